//! The size of the model input and the facts of the current turn at the leaf, kept up to date
//! entry by entry.
//!
//! Building the model view is proportional to the model input; an agent appends a few entries
//! between two inferences. The tally is built from the view once, and then each ordinary
//! append (a message, a tool result, an intent, a compaction record, a file or skill entry)
//! changes it in constant time, so the preflight decision and the budget the daemon publishes
//! after every append cost the same at 1k tokens as at 1M. Anything that reshapes the view — a
//! capsule, a setting, a rewind, a branch, an imported agent's compaction, or a tool-call id
//! used twice — drops the tally, and the next reader rebuilds it from the view. The result is
//! always exactly what [`ModelView`] gives; a property test holds the two together.

use std::collections::HashSet;

use super::entry::{EntryBody, EntryKind, IntentAction, Role, Usage};
use super::index::SessionIndex;
use super::trigger::Trigger;
use super::turn::{turn_facts, PendingIntent, TurnFacts};
use super::view::{ModelView, ViewItem, ViewPart, ViewSlot};
use crate::budget::{Breakdown, UsageAnchor};
use crate::tokens::TokenizerKind;

/// A call in the view that has no result yet: the view gives it a synthetic one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Unanswered {
    call_id: String,
    call_entry: usize,
    part: ViewPart,
    tokens: u64,
}

/// Call ids by a 64-bit hash of each: a long view holds hundreds of thousands, and the ids
/// themselves are in the session. Two ids with one hash only ever make the tally think a
/// call id was used twice, and a tally that does is built again from the view.
type CallIds = HashSet<u64, foldhash::fast::RandomState>;

/// The hash of a call id in [`CallIds`]: the same in every tally, so that two tallies of one
/// view are equal.
fn call_key(id: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x5ba_ca11).hash_one(id)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    leaf: Option<usize>,
    tokenizer: TokenizerKind,
    capsule: Option<usize>,
    breakdown: Breakdown,
    /// The newest assistant message with provider usage, and the tokens after it.
    anchor: Option<(usize, Usage)>,
    tokens_after_anchor: u64,
    /// A foreign compaction in a whole-history view: usage from here on measured another
    /// context.
    usage_ignored: bool,
    elide_results_over: Option<u64>,
    /// The session's `/auto-compact` setting at the leaf, if it has one.
    auto_compact: Option<bool>,
    unanswered: Vec<Unanswered>,
    call_ids: CallIds,
    result_call_ids: CallIds,
    facts: TurnFacts,
}

impl Tally {
    /// The tally at the session's leaf, from the model view.
    pub fn build(session: &SessionIndex) -> Tally {
        let leaf = session.leaf();
        let view = ModelView::build(session, leaf);
        let anchor = view.usage_anchor_at(session);
        let mut call_ids = CallIds::default();
        let mut result_call_ids = CallIds::default();
        let mut unanswered = Vec::new();
        let results = view.entry_indices().chain(view.left_out.iter().copied());
        for i in results {
            let ids = match session.kind_of(i) {
                EntryKind::ToolResult => &mut result_call_ids,
                _ => &mut call_ids,
            };
            ids.extend(session.call_ids_of(i).map(call_key));
        }
        for slot in &view.slots {
            if let (ViewItem::InterruptedResult { call_entry, .. }, Some(call_id)) =
                (&slot.item, slot.item.interrupted_call_id(session))
            {
                unanswered.push(Unanswered {
                    call_id: call_id.to_string(),
                    call_entry: *call_entry as usize,
                    part: slot.part,
                    tokens: ModelView::slot_tokens(session, slot),
                });
            }
        }
        Tally {
            leaf,
            tokenizer: session.tokenizer(),
            capsule: view.capsule,
            breakdown: view.breakdown(session),
            anchor: anchor.map(|(i, a)| (i, a.usage)),
            tokens_after_anchor: anchor.map_or(0, |(_, a)| a.tokens_after),
            usage_ignored: view.usage_ignored_from(session).is_some(),
            elide_results_over: view.elide_results_limit(session),
            auto_compact: session.settings_at(leaf).auto_compact,
            unanswered,
            call_ids,
            result_call_ids,
            facts: turn_facts(session, leaf),
        }
    }

    /// Account for entry `idx`, just pushed. `false` when the entry reshapes the view and only
    /// a rebuild can say what it is now.
    pub(super) fn apply(&mut self, session: &SessionIndex, idx: usize) -> bool {
        if session.parent_of(idx) != self.leaf
            || session.leaf() != Some(idx)
            || session.tokenizer() != self.tokenizer
        {
            return false;
        }
        let applied = match &session.entry(idx).body {
            EntryBody::Message(m) => {
                if m.role == Role::User && !m.synthetic {
                    // A new agent turn.
                    self.facts.soft_attempted = false;
                    self.facts.overflow_recoveries = 0;
                    self.facts.overflow_exhausted = false;
                    self.facts.overflow_failure = None;
                }
                self.message(session, idx, m.role, m.usage)
            }
            EntryBody::ToolResult(r) => self.result(session, idx, &r.call_id),
            EntryBody::Intent(intent) => {
                match intent.action {
                    IntentAction::Recorded => self.facts.pending.push(PendingIntent {
                        entry_id: session.entry(idx).id.clone(),
                        trigger: intent.trigger,
                        label: intent.label.clone(),
                    }),
                    IntentAction::Consumed => self
                        .facts
                        .pending
                        .retain(|p| Some(&p.entry_id) != intent.intent_id.as_ref()),
                }
                true
            }
            EntryBody::Compaction(r) => {
                self.facts.soft_attempted |= super::turn::spends_the_soft_attempt(r.trigger);
                if r.trigger == Trigger::ContextOverflow {
                    self.facts.overflow_recoveries += 1;
                    if r.outcome == super::entry::Outcome::Failed {
                        self.facts.overflow_exhausted = true;
                        self.facts.overflow_failure = Some(r.reason.clone());
                    }
                }
                true
            }
            EntryBody::TurnComplete(_)
            | EntryBody::File(_)
            | EntryBody::Skill(_)
            | EntryBody::Checkpoint(_) => true,
            EntryBody::Capsule(_)
            | EntryBody::Setting(_)
            | EntryBody::Rewind(_)
            | EntryBody::ForeignCompaction(_) => false,
        };
        if applied {
            self.leaf = Some(idx);
        }
        applied
    }

    fn message(
        &mut self,
        session: &SessionIndex,
        idx: usize,
        role: Role,
        usage: Option<Usage>,
    ) -> bool {
        let e = session.entry(idx);
        let mut new_calls: Vec<(usize, &str)> = Vec::new();
        for (call, (id, _, _)) in e.tool_calls().enumerate() {
            // A call id seen before pairs in ways only the view's full pass decides.
            if self.call_ids.contains(&call_key(id))
                || self.result_call_ids.contains(&call_key(id))
                || new_calls.iter().any(|&(_, seen)| seen == id)
            {
                return false;
            }
            new_calls.push((call, id));
        }
        let own = session.tokens_of(idx);
        let mut added = own;
        for (call, id) in new_calls {
            let tokens = session.stand_in_tokens_at(idx, call);
            added += tokens;
            self.call_ids.insert(call_key(id));
            self.unanswered.push(Unanswered {
                call_id: id.to_string(),
                call_entry: idx,
                part: ViewPart::New,
                tokens,
            });
        }
        self.breakdown.new_entries += added;
        match usage {
            Some(usage) if role == Role::Assistant && !self.usage_ignored => {
                // Logged before the anchor, so only the synthetic results stand after it
                // (see `ModelView::usage_anchor_at`).
                self.anchor = Some((idx, usage));
                self.tokens_after_anchor = self
                    .unanswered
                    .iter()
                    .filter(|u| u.part == ViewPart::New)
                    .map(|u| u.tokens)
                    .sum();
            }
            _ if self.anchor.is_some() => self.tokens_after_anchor += added,
            _ => {}
        }
        true
    }

    fn result(&mut self, session: &SessionIndex, idx: usize, call_id: &str) -> bool {
        let answered_before = !self.result_call_ids.insert(call_key(call_id));
        let Some(pos) = self.unanswered.iter().position(|u| u.call_id == call_id) else {
            // No call waits for it: the view leaves it out.
            return true;
        };
        if answered_before {
            // A result logged before its call: the view's pairing decides.
            return false;
        }
        let call = self.unanswered.remove(pos);
        let slot = ViewSlot {
            item: ViewItem::Entry(idx as u32),
            part: ViewPart::New,
            elided: self
                .elide_results_over
                .is_some_and(|limit| session.tokens_of(idx) > limit),
        };
        let tokens = ModelView::slot_tokens(session, &slot);
        match call.part {
            ViewPart::Capsule => return false,
            ViewPart::RetainedTail => self.breakdown.retained_tail -= call.tokens,
            ViewPart::New => self.breakdown.new_entries -= call.tokens,
        }
        self.breakdown.new_entries += tokens;
        // The result takes the synthetic one's place, right after its call. Logged after the
        // anchor whatever the call's place in the view, it counts after it.
        if self.anchor.is_some() {
            if call.part == ViewPart::New {
                self.tokens_after_anchor -= call.tokens;
            }
            self.tokens_after_anchor += tokens;
        }
        true
    }

    /// Counted tokens per part, overhead included.
    pub fn breakdown(&self) -> Breakdown {
        self.breakdown
    }

    /// The provider usage that measures the input, as [`ModelView::usage_anchor`] gives it.
    pub fn usage_anchor(&self) -> Option<UsageAnchor> {
        self.anchor.map(|(_, usage)| UsageAnchor {
            usage,
            tokens_after: self.tokens_after_anchor,
        })
    }

    pub fn facts(&self) -> &TurnFacts {
        &self.facts
    }

    /// The latest capsule of the model input.
    pub fn capsule(&self) -> Option<usize> {
        self.capsule
    }

    /// The session's `/auto-compact` setting at the leaf (settings drop the tally).
    pub fn auto_compact(&self) -> Option<bool> {
        self.auto_compact
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::entry::*;
    use crate::session::testing::Builder;
    use proptest::prelude::*;

    /// One step of an agent session, as the generator draws it.
    #[derive(Debug, Clone)]
    enum Step {
        User {
            synthetic: bool,
            words: usize,
        },
        Assistant {
            words: usize,
            usage: Option<u64>,
        },
        Calls {
            ids: Vec<u8>,
            usage: Option<u64>,
        },
        /// One response logged as one assistant entry per call, usage on the last (Codex).
        Parallel {
            ids: Vec<u8>,
            usage: Option<u64>,
        },
        Result {
            id: u8,
            words: usize,
        },
        Intent {
            consume: bool,
            milestone: bool,
        },
        Compaction {
            overflow: bool,
            failed: bool,
        },
        TurnComplete,
        File,
        Capsule {
            keep_back: usize,
            elide_over: Option<u64>,
            handoff: bool,
        },
        Setting,
        Rewind {
            back: usize,
        },
        /// A source agent's compaction: a request record alone (0), a summary (1), a summary
        /// keeping the entries from `keep_back` entries up (2), or kept entries alone (3).
        ForeignCompaction {
            kind: u8,
            keep_back: usize,
        },
    }

    fn step() -> impl Strategy<Value = Step> {
        let usage = proptest::option::of(0u64..200_000);
        prop_oneof![
            4 => (any::<bool>(), 0usize..60).prop_map(|(s, w)| Step::User { synthetic: s && w % 5 == 0, words: w }),
            3 => (0usize..80, usage.clone()).prop_map(|(words, usage)| Step::Assistant { words, usage }),
            4 => (proptest::collection::vec(0u8..12, 1..3), usage.clone()).prop_map(|(ids, usage)| Step::Calls { ids, usage }),
            3 => (proptest::collection::vec(0u8..12, 2..5), usage).prop_map(|(ids, usage)| Step::Parallel { ids, usage }),
            5 => (0u8..12, 0usize..400).prop_map(|(id, words)| Step::Result { id, words }),
            1 => (any::<bool>(), any::<bool>()).prop_map(|(consume, milestone)| Step::Intent { consume, milestone }),
            1 => (any::<bool>(), any::<bool>()).prop_map(|(overflow, failed)| Step::Compaction { overflow, failed }),
            1 => Just(Step::TurnComplete),
            1 => Just(Step::File),
            1 => (0usize..6, proptest::option::of(5u64..60), any::<bool>()).prop_map(|(keep_back, elide_over, handoff)| Step::Capsule { keep_back, elide_over, handoff }),
            1 => Just(Step::Setting),
            1 => (1usize..8).prop_map(|back| Step::Rewind { back }),
            1 => (0u8..4, 0usize..6).prop_map(|(kind, keep_back)| Step::ForeignCompaction { kind, keep_back }),
        ]
    }

    fn usage(context: u64) -> Usage {
        Usage {
            input: context / 2,
            cache_read: context / 4,
            cache_write: 0,
            output: context - context / 2 - context / 4,
        }
    }

    fn words(n: usize) -> String {
        (0..n).map(|i| format!("w{i} ")).collect()
    }

    fn run(b: &mut Builder, step: &Step, calls: &mut Vec<String>) {
        let ancestor = |b: &Builder, back: usize| {
            let leaf = b.session.leaf()?;
            let branch = b.session.branch(leaf);
            Some(
                b.session
                    .entry(branch[branch.len().saturating_sub(back + 1)])
                    .id
                    .clone(),
            )
        };
        match step {
            Step::User {
                synthetic,
                words: w,
            } => {
                b.push(EntryBody::Message(MessageEntry {
                    role: Role::User,
                    content: vec![ContentBlock::text(words(*w))],
                    usage: None,
                    model: None,
                    synthetic: *synthetic,
                }));
            }
            Step::Assistant { words: w, usage: u } => {
                b.push(EntryBody::Message(MessageEntry {
                    role: Role::Assistant,
                    content: vec![ContentBlock::text(words(*w))],
                    usage: u.map(usage),
                    model: None,
                    synthetic: false,
                }));
            }
            Step::Calls { ids, usage: u } => {
                let content = ids
                    .iter()
                    .map(|id| ContentBlock::ToolCall {
                        id: format!("c{id}"),
                        name: "Bash".into(),
                        input: Box::new(serde_json::json!({"command": words(*id as usize)})),
                        extra: Default::default(),
                    })
                    .collect();
                calls.extend(ids.iter().map(|id| format!("c{id}")));
                b.push(EntryBody::Message(MessageEntry {
                    role: Role::Assistant,
                    content,
                    usage: u.map(usage),
                    model: None,
                    synthetic: false,
                }));
            }
            Step::Parallel { ids, usage: u } => {
                for (n, id) in ids.iter().enumerate() {
                    calls.push(format!("c{id}"));
                    b.push(EntryBody::Message(MessageEntry {
                        role: Role::Assistant,
                        content: vec![ContentBlock::ToolCall {
                            id: format!("c{id}"),
                            name: "Bash".into(),
                            input: Box::new(serde_json::json!({"command": words(*id as usize)})),
                            extra: Default::default(),
                        }],
                        usage: u.filter(|_| n + 1 == ids.len()).map(usage),
                        model: None,
                        synthetic: false,
                    }));
                }
            }
            Step::Result { id, words: w } => {
                b.result(&format!("c{id}"), &words(*w));
            }
            Step::Intent { consume, milestone } => {
                let pending = b.session.tally().facts().pending.first().cloned();
                let (action, intent_id) = match (consume, pending) {
                    (true, Some(p)) => (IntentAction::Consumed, Some(p.entry_id)),
                    _ => (IntentAction::Recorded, None),
                };
                b.push(EntryBody::Intent(IntentEntry {
                    trigger: if *milestone {
                        Trigger::Milestone
                    } else {
                        Trigger::TurnComplete
                    },
                    action,
                    intent_id,
                    label: None,
                }));
            }
            Step::Compaction { overflow, failed } => {
                b.push(EntryBody::Compaction(CompactionRecord {
                    operation_id: "op".into(),
                    trigger: if *overflow {
                        Trigger::ContextOverflow
                    } else {
                        Trigger::AutoThreshold
                    },
                    outcome: if *failed {
                        Outcome::Failed
                    } else {
                        Outcome::Skipped
                    },
                    reason: "r".into(),
                    tokens_before: 1,
                    tokens_after: None,
                }));
            }
            Step::TurnComplete => {
                b.push(EntryBody::TurnComplete(TurnCompleteEntry { usage: None }));
            }
            Step::File => {
                b.push(EntryBody::File(FileEntry {
                    path: "src/a.rs".into(),
                    op: FileOp::Modified,
                    source: FileSource::Watcher,
                }));
            }
            Step::Capsule {
                keep_back,
                elide_over,
                handoff,
            } => {
                let mut c = crate::session::testing::full_capsule();
                c.first_kept_entry_id = ancestor(b, *keep_back);
                c.elide_tool_results_over = *elide_over;
                if *handoff {
                    c.trigger = Trigger::Handoff;
                }
                b.push(EntryBody::Capsule(Box::new(c)));
            }
            Step::Setting => {
                b.push(EntryBody::Setting(SettingEntry {
                    system_tokens: Some(b.session.len() as u64),
                    auto_compact: Some(b.session.len().is_multiple_of(2)),
                    ..SettingEntry::default()
                }));
            }
            Step::Rewind { back } => {
                if let Some(to) = ancestor(b, *back) {
                    b.push(EntryBody::Rewind(RewindEntry { to }));
                }
            }
            Step::ForeignCompaction { kind, keep_back } => {
                let kept = ancestor(b, *keep_back);
                b.push(EntryBody::ForeignCompaction(Box::new(
                    ForeignCompactionEntry {
                        agent: "pi".into(),
                        trigger: None,
                        tokens_before: None,
                        summary: matches!(kind, 1 | 2).then(|| words(*keep_back * 7)),
                        summary_tokens: None,
                        first_kept_entry_id: if *kind == 2 { kept.clone() } else { None },
                        kept_items: None,
                        kept_entry_ids: if *kind == 3 {
                            kept.map(|k| vec![k])
                        } else {
                            None
                        },
                        instructions: None,
                    },
                )));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// After every append the kept-up tally equals one built afresh from the view, and its
        /// budget and turn facts equal what the view and the log say.
        #[test]
        fn the_tally_kept_per_append_equals_the_view(steps in proptest::collection::vec(step(), 1..60), whole_history in any::<bool>()) {
            let mut b = Builder::new();
            if whole_history {
                b.session.set_foreign_compactions(crate::session::foreign::ForeignCompactions::WholeHistory);
            }
            let mut calls = Vec::new();
            b.user("start");
            let _ = b.session.tally();
            for s in &steps {
                run(&mut b, s, &mut calls);
                let kept = b.session.tally().clone();
                let fresh = Tally::build(&b.session);
                prop_assert_eq!(&kept, &fresh, "after {:?}", s);
                let view = ModelView::build(&b.session, b.session.leaf());
                prop_assert_eq!(kept.breakdown(), view.breakdown(&b.session));
                prop_assert_eq!(kept.usage_anchor(), view.usage_anchor(&b.session));
                prop_assert_eq!(kept.facts(), &turn_facts(&b.session, b.session.leaf()));
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Whatever order the view puts entries in, the estimate is never below the anchor's
        /// usage plus the exact count of every entry of the input logged after the anchor.
        #[test]
        fn the_estimate_never_drops_below_the_anchor_plus_everything_logged_after_it(
            steps in proptest::collection::vec(step(), 1..60),
        ) {
            let mut b = Builder::new();
            let mut calls = Vec::new();
            b.user("start");
            let limits = crate::limits::Limits::compute(
                1_000_000,
                8_000,
                &crate::limits::CompactionConfig::default(),
            )
            .unwrap();
            for s in &steps {
                run(&mut b, s, &mut calls);
                let view = ModelView::build(&b.session, b.session.leaf());
                let Some((at, anchor)) = view.usage_anchor_at(&b.session) else {
                    continue;
                };
                let logged_after: u64 = view
                    .slots
                    .iter()
                    .filter(|slot| matches!(slot.item, ViewItem::Entry(i) if i as usize > at))
                    .map(|slot| ModelView::slot_tokens(&b.session, slot))
                    .sum();
                let floor = anchor.usage.context_tokens() + logged_after;
                let tally = b.session.tally();
                let budget = crate::budget::Budget::measure(
                    limits,
                    tally.breakdown(),
                    tally.usage_anchor(),
                    b.session.calibration(),
                    crate::budget::unseen_allowance::Unseen::NONE,
                );
                if anchor.usage.context_tokens() > 0 {
                    prop_assert!(
                        budget.effective_tokens >= floor,
                        "after {:?}: {} < {}",
                        s,
                        budget.effective_tokens,
                        floor
                    );
                }
            }
        }
    }

    /// Codex logs one assistant entry per parallel call with the usage on the last; the view
    /// puts each result after its call, before the anchor. Every result still counts.
    #[test]
    fn results_of_every_parallel_call_count_after_the_anchor() {
        let mut b = Builder::new();
        b.user("start");
        for (n, id) in ["c1", "c2", "c3"].iter().enumerate() {
            b.push(EntryBody::Message(MessageEntry {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolCall {
                    id: (*id).into(),
                    name: "Bash".into(),
                    input: Box::new(serde_json::json!({"command": "ls"})),
                    extra: Default::default(),
                }],
                usage: (n == 2).then(|| usage(10_000)),
                model: None,
                synthetic: false,
            }));
        }
        let results: Vec<String> = ["c1", "c2", "c3"]
            .iter()
            .map(|id| b.result(id, &words(500)))
            .collect();
        let s = &b.session;
        let counted: u64 = results
            .iter()
            .map(|id| s.tokens_of(s.index_of(id).unwrap()))
            .sum();
        let anchor = s.tally().usage_anchor().expect("usage on the last call");
        assert_eq!(anchor.tokens_after, counted, "all three results count");
        let view = ModelView::build(s, s.leaf());
        assert_eq!(view.usage_anchor(s), Some(anchor));
    }

    #[test]
    fn ordinary_appends_keep_the_tally_and_a_capsule_drops_it() {
        let mut b = Builder::new();
        b.user("hello");
        let before = b.session.tally().breakdown().total();
        b.bash("c1", "ls");
        assert!(b.session.tally.get().is_some(), "a call keeps the tally");
        b.result("c1", "a b c");
        assert!(
            b.session.tally.get().is_some(),
            "its result keeps the tally"
        );
        assert!(b.session.tally().breakdown().total() > before);
        let mut c = crate::session::testing::full_capsule();
        c.first_kept_entry_id = None;
        b.push(EntryBody::Capsule(Box::new(c)));
        assert!(
            b.session.tally.get().is_none(),
            "a capsule reshapes the view"
        );
        assert_eq!(b.session.tally(), &Tally::build(&b.session));
    }
}
