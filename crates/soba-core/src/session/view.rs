//! The model-input view: what the next inference sees for a given leaf.
//!
//! The latest capsule on the leaf's branch (rendered as one message), every entry from its
//! `firstKeptEntryId` on, then the entries appended after the capsule. When the source agent of
//! an imported or followed transcript compacted its own context after that capsule (a
//! `foreign_compaction` with a summary or a record of what it kept), its context was replaced:
//! the view starts from the latest such compaction instead, with its summary (as the agent sends
//! it), the entries it kept, and the entries after it. Tool results always follow the assistant
//! message that made the call; a call with no result gets a synthetic "no result: interrupted"
//! result, and a result whose call is not in the view is left out with a warning. The log
//! itself is never changed.

use std::collections::{HashMap, HashSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::count::INTERRUPTED_RESULT_TEXT;
use super::entry::{ContentBlock, EntryBody, EntryKind, ForeignCompactionEntry, Role};
use super::foreign::{foreign_summary_text, ForeignCompactions};
use super::index::SessionIndex;
use crate::budget::{Breakdown, UsageAnchor};
use crate::tokens::MESSAGE_OVERHEAD_TOKENS;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ViewPart {
    Capsule,
    RetainedTail,
    New,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewItem {
    Capsule(u32),
    /// The summary of the `foreign_compaction` entry the view starts from.
    ForeignSummary(u32),
    Entry(u32),
    /// Stand-in result for the `call`-th tool call of entry `call_entry`, which has none.
    /// Positions rather than the call's id and name, and entry indices as the session keeps
    /// them (`u32`): a view of a long history holds one slot per entry, and each slot is as
    /// large as its largest variant.
    InterruptedResult {
        call_entry: u32,
        call: u32,
    },
}

impl ViewItem {
    /// The id of the call an `InterruptedResult` stands in for, from the index.
    pub fn interrupted_call_id<'s>(&self, session: &'s SessionIndex) -> Option<&'s str> {
        match *self {
            ViewItem::InterruptedResult { call_entry, call } => {
                session.call_ids_of(call_entry as usize).nth(call as usize)
            }
            _ => None,
        }
    }

    /// The id and tool name of the call an `InterruptedResult` stands in for.
    pub fn interrupted_call<'s>(&self, session: &'s SessionIndex) -> Option<(&'s str, &'s str)> {
        match *self {
            ViewItem::InterruptedResult { call_entry, call } => session
                .entry(call_entry as usize)
                .tool_calls()
                .nth(call as usize)
                .map(|(id, name, _)| (id, name)),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewSlot {
    pub item: ViewItem,
    pub part: ViewPart,
    /// A tool result shown shortened because the capsule asks for it.
    pub elided: bool,
}

/// One message of the model input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelMessage {
    /// `system`, `user`, `assistant`, or `tool`.
    #[schemars(extend("enum" = ["system", "user", "assistant", "tool"]))]
    pub role: String,
    pub content: Vec<ContentBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// The log entry this message comes from; absent for the capsule, a source agent's summary
    /// and synthetic results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelView {
    pub leaf: Option<usize>,
    /// The latest capsule on the branch: the previous one for the next compaction, and the
    /// first message of the view unless a foreign compaction after it replaced the context.
    pub capsule: Option<usize>,
    /// The source agent's compaction the view starts from, when there is one.
    pub foreign: Option<usize>,
    pub first_kept: Option<usize>,
    pub slots: Vec<ViewSlot>,
    /// Tool results on the branch left out of the input (no call for them, or a repeat).
    pub left_out: Vec<usize>,
    pub warnings: Vec<String>,
}

impl ModelView {
    /// The view for `leaf` (usually `session.leaf()`), with the session's policy for foreign
    /// compactions.
    pub fn build(session: &SessionIndex, leaf: Option<usize>) -> ModelView {
        Self::build_with(session, leaf, session.foreign_compactions())
    }

    /// The view for `leaf`, with foreign compactions treated as `policy` says.
    pub fn build_with(
        session: &SessionIndex,
        leaf: Option<usize>,
        policy: ForeignCompactions,
    ) -> ModelView {
        let mut view = ModelView {
            leaf,
            ..ModelView::default()
        };
        let Some(leaf) = leaf else { return view };
        let capsule = session.capsule_on_path(leaf);
        view.capsule = capsule;

        // Walk up from the leaf: new entries until the capsule, or until the latest foreign
        // compaction that replaced the context when the policy honours it.
        let mut new_entries = Vec::new();
        let mut cur = Some(leaf);
        while let Some(i) = cur {
            if Some(i) == capsule {
                break;
            }
            if policy == ForeignCompactions::Honour && replacing_compaction(session, i).is_some() {
                view.foreign = Some(i);
                break;
            }
            new_entries.push(i);
            cur = session.parent_of(i);
        }
        let tail = match view.foreign {
            Some(f) => view.kept_by_foreign(session, f),
            None => view.capsule_tail(session),
        };
        new_entries.reverse();

        // Entry indices as the session keeps them (`u32`): one per entry of a long history.
        let ordered: Vec<(u32, ViewPart)> = tail
            .into_iter()
            .map(|i| (i, ViewPart::RetainedTail))
            .chain(new_entries.into_iter().map(|i| (i, ViewPart::New)))
            .filter(|&(i, _)| session.kind_of(i).is_model_visible())
            .map(|(i, part)| (i as u32, part))
            .collect();

        match view.foreign {
            Some(f) => {
                if replacing_compaction(session, f).is_some_and(|fc| fc.summary.is_some()) {
                    view.slots.push(ViewSlot {
                        item: ViewItem::ForeignSummary(f as u32),
                        part: ViewPart::Capsule,
                        elided: false,
                    });
                }
            }
            None => {
                if let Some(c) = capsule {
                    view.slots.push(ViewSlot {
                        item: ViewItem::Capsule(c as u32),
                        part: ViewPart::Capsule,
                        elided: false,
                    });
                }
            }
        }
        pair_tool_results(session, &ordered, &mut view);
        if let Some(limit) = view.elide_results_limit(session) {
            view.elide_results_over(session, limit);
        }
        view
    }

    /// The capsule's retained tail: the entries from its `firstKeptEntryId` to the capsule,
    /// oldest first.
    fn capsule_tail(&mut self, session: &SessionIndex) -> Vec<usize> {
        let Some(c) = self.capsule else {
            return Vec::new();
        };
        let cap = session
            .entry(c)
            .as_capsule()
            .expect("capsule index holds a capsule");
        let Some(fk) = cap.first_kept_entry_id.as_deref() else {
            return Vec::new();
        };
        match session.index_of(fk) {
            Some(fk_idx) if session.is_ancestor(fk_idx, c) => {
                self.first_kept = Some(fk_idx);
                kept_run(session, fk_idx, c)
            }
            _ => {
                self.warnings.push(format!(
                    "capsule {} keeps from entry `{fk}`, which is not on its branch; no tail retained",
                    cap.checkpoint_id
                ));
                Vec::new()
            }
        }
    }

    /// The entries the source agent carried over its compaction `f`: the run from its
    /// `firstKeptEntryId` (pi), or the entries it copied into its new history (Codex), in the
    /// agent's order.
    fn kept_by_foreign(&mut self, session: &SessionIndex, f: usize) -> Vec<usize> {
        let fc = replacing_compaction(session, f).expect("the view starts from a compaction");
        let mut kept = Vec::new();
        let on_branch = |id: &str| {
            session
                .index_of(id)
                .filter(|&i| i != f && session.is_ancestor(i, f))
        };
        if let Some(fk) = fc.first_kept_entry_id.as_deref() {
            match on_branch(fk) {
                Some(fk_idx) => {
                    self.first_kept = Some(fk_idx);
                    kept = kept_run(session, fk_idx, f);
                }
                None => self.warnings.push(format!(
                    "{}'s compaction (entry {}) keeps from entry `{fk}`, which is not on its branch; nothing kept",
                    fc.agent,
                    session.entry(f).id
                )),
            }
        }
        for id in fc.kept_entry_ids.iter().flatten() {
            match on_branch(id) {
                Some(i) if !kept.contains(&i) => kept.push(i),
                Some(_) => {}
                None => self.warnings.push(format!(
                    "{}'s compaction (entry {}) keeps entry `{id}`, which is not on its branch; left out",
                    fc.agent,
                    session.entry(f).id
                )),
            }
        }
        kept
    }

    /// The size over which tool results are shortened: the capsule's, while it opens the view.
    pub fn elide_results_limit(&self, session: &SessionIndex) -> Option<u64> {
        if self.foreign.is_some() {
            return None;
        }
        self.capsule
            .and_then(|c| session.entry(c).as_capsule())
            .and_then(|c| c.elide_tool_results_over)
    }

    /// The model-visible entries of the whole history that the source agent's compaction left
    /// out of this view, oldest first: what a capsule made now must still account for.
    pub fn superseded(&self, session: &SessionIndex) -> Vec<usize> {
        let Some(f) = self.foreign else {
            return Vec::new();
        };
        let shown: HashSet<usize> = self.entry_indices().collect();
        let mut hidden: Vec<usize> =
            ModelView::build_with(session, self.leaf, ForeignCompactions::WholeHistory)
                .entry_indices()
                .filter(|&i| i < f && !shown.contains(&i))
                .collect();
        hidden.sort_unstable();
        hidden
    }

    /// Mark tool results larger than `limit` tokens as elided.
    pub fn elide_results_over(&mut self, session: &SessionIndex, limit: u64) {
        for slot in &mut self.slots {
            if let ViewItem::Entry(i) = slot.item {
                let i = i as usize;
                if session.kind_of(i) == EntryKind::ToolResult && session.tokens_of(i) > limit {
                    slot.elided = true;
                }
            }
        }
    }

    /// Ids of the entries in the view, in order (capsule and synthetic results left out).
    pub fn entry_indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots.iter().filter_map(|s| match s.item {
            ViewItem::Entry(i) => Some(i as usize),
            _ => None,
        })
    }

    pub fn slot_tokens(session: &SessionIndex, slot: &ViewSlot) -> u64 {
        if slot.elided {
            if let ViewItem::Entry(i) = slot.item {
                // Read for this count only: a capsule that elides results would otherwise keep
                // every large result of its retained tail parsed, the largest entries of all.
                let elided = session.with_entry(i as usize, |e| {
                    e.as_tool_result().map(|r| {
                        let kind = session.tokenizer();
                        MESSAGE_OVERHEAD_TOKENS
                            + kind.count(&r.call_id)
                            + kind.count(&elided_text(&e.id, r))
                    })
                });
                if let Some(tokens) = elided {
                    return tokens;
                }
            }
        }
        match &slot.item {
            ViewItem::Capsule(i) | ViewItem::Entry(i) => session.tokens_of(*i as usize),
            ViewItem::ForeignSummary(i) => foreign_summary_tokens(session, *i as usize),
            ViewItem::InterruptedResult { call_entry, call } => {
                session.stand_in_tokens_at(*call_entry as usize, *call as usize)
            }
        }
    }

    /// Counted tokens per part, with the system and tool overhead in force at the leaf.
    pub fn breakdown(&self, session: &SessionIndex) -> Breakdown {
        let (system, tools) = session.overhead_at(self.leaf);
        let mut b = Breakdown {
            system,
            tools,
            ..Breakdown::default()
        };
        for slot in &self.slots {
            let t = Self::slot_tokens(session, slot);
            match slot.part {
                ViewPart::Capsule => b.capsule += t,
                ViewPart::RetainedTail => b.retained_tail += t,
                ViewPart::New => b.new_entries += t,
            }
        }
        b
    }

    /// The newest provider usage after the latest capsule, with the counted tokens after it.
    /// Usage on retained-tail entries predates the capsule and is ignored. When the view starts
    /// from a source agent's own compaction, usage after it measured exactly this context and
    /// anchors; under [`ForeignCompactions::WholeHistory`] it measured the agent's compacted
    /// context, not this view, and is ignored.
    pub fn usage_anchor(&self, session: &SessionIndex) -> Option<UsageAnchor> {
        self.usage_anchor_at(session).map(|(_, a)| a)
    }

    /// [`Self::usage_anchor`], with the index of the entry that carried the usage.
    ///
    /// "After" is log order, not view order: the view moves each tool result next to its call,
    /// so when one response is logged as several assistant entries (one per parallel call,
    /// usage on the last), the results of the earlier calls sit before the anchor in the view
    /// although the provider never saw them. Every entry logged after the anchor counts, and so
    /// does every synthetic result of the new part (no provider input held it as written).
    ///
    /// Before the first usage after a source agent's own compaction there is no anchor: the
    /// budget counts the summary, the kept entries and what follows.
    pub fn usage_anchor_at(&self, session: &SessionIndex) -> Option<(usize, UsageAnchor)> {
        let ignored_from = self.usage_ignored_from(session);
        // Parents precede children in the file, so on one branch a larger index is newer. The
        // index says which entries carry usage: only the newest is read (reading each would
        // keep every reply of a long view parsed).
        let at = self
            .slots
            .iter()
            .filter(|s| s.part == ViewPart::New)
            .filter_map(|s| match s.item {
                ViewItem::Entry(i) => Some(i as usize),
                _ => None,
            })
            .filter(|&i| ignored_from.is_none_or(|fc| i < fc) && session.has_usage(i))
            .max()?;
        let usage = session.with_entry(at, |e| match &e.body {
            EntryBody::Message(m) if m.role == Role::Assistant => m.usage,
            _ => None,
        })?;
        let tokens_after = self
            .slots
            .iter()
            .filter(|s| s.part == ViewPart::New)
            .filter(|s| match s.item {
                ViewItem::Entry(i) => i as usize > at,
                ViewItem::InterruptedResult { .. } => true,
                ViewItem::Capsule(_) | ViewItem::ForeignSummary(_) => false,
            })
            .map(|s| Self::slot_tokens(session, s))
            .sum();
        Some((
            at,
            UsageAnchor {
                usage,
                tokens_after,
            },
        ))
    }

    /// The entry from which provider usage no longer measures this view: the oldest foreign
    /// compaction in the new part, which only a whole-history view holds.
    pub fn usage_ignored_from(&self, session: &SessionIndex) -> Option<usize> {
        match self.foreign {
            Some(_) => None,
            None => self.oldest_foreign_compaction(session),
        }
    }

    /// The oldest `foreign_compaction` that replaced the source agent's context between the
    /// latest capsule (or the root) and the leaf. Records of a compaction request alone (a
    /// `PreCompact` hook) replaced nothing and are passed over.
    pub fn oldest_foreign_compaction(&self, session: &SessionIndex) -> Option<usize> {
        let mut oldest = None;
        let mut cur = self.leaf;
        while let Some(i) = cur.filter(|&i| Some(i) != self.capsule) {
            if replacing_compaction(session, i).is_some() {
                oldest = Some(i);
            }
            cur = session.parent_of(i);
        }
        oldest
    }

    /// The messages to send, in order.
    pub fn messages(&self, session: &SessionIndex) -> Vec<ModelMessage> {
        self.slots.iter().map(|s| render_slot(session, s)).collect()
    }
}

/// The entries from `first_kept` down to the parent of `compaction` on its branch, oldest first:
/// what a compaction that keeps from `first_kept` carries over (`first_kept` must be an ancestor).
fn kept_run(session: &SessionIndex, first_kept: usize, compaction: usize) -> Vec<usize> {
    let mut run = Vec::new();
    let mut cur = session.parent_of(compaction);
    while let Some(i) = cur {
        run.push(i);
        if i == first_kept {
            break;
        }
        cur = session.parent_of(i);
    }
    run.reverse();
    run
}

/// The `foreign_compaction` at `idx`, when it replaced the source agent's context: it carries
/// the summary the agent continued from or a record of what it kept.
pub(super) fn replacing_compaction(
    session: &SessionIndex,
    idx: usize,
) -> Option<&ForeignCompactionEntry> {
    // Told by the index first: walks over a long history pass mostly other entries.
    if session.kind_of(idx) != EntryKind::ForeignCompaction {
        return None;
    }
    match &session.entry(idx).body {
        EntryBody::ForeignCompaction(f) if f.replaces_context() => Some(f),
        _ => None,
    }
}

/// Tokens of the summary message of the foreign compaction at `idx`.
fn foreign_summary_tokens(session: &SessionIndex, idx: usize) -> u64 {
    session
        .derived_counts(idx)
        .first()
        .map_or(0, |&n| u64::from(n))
}

/// Emit the visible entries so that each assistant message with tool calls is followed by one
/// result per call, in call order.
fn pair_tool_results(session: &SessionIndex, ordered: &[(u32, ViewPart)], view: &mut ModelView) {
    // Entries are told apart by the index's types and call ids: a view of a long history
    // parses none of them.
    let is_result = |i: usize| session.kind_of(i) == EntryKind::ToolResult;
    let (mut results, mut calls) = (0, 0);
    for &(i, _) in ordered {
        match is_result(i as usize) {
            true => results += 1,
            false => calls += session.call_ids_of(i as usize).len(),
        }
    }
    // call id → position in `ordered` of its result (first one wins).
    // Built once per view, and a view per usage report when a session learns its factor:
    // foldhash, several times faster than SipHash on call ids, still seeded per process.
    let hasher = foldhash::fast::RandomState::default();
    let mut result_at: HashMap<&str, usize, _> =
        HashMap::with_capacity_and_hasher(results, hasher.clone());
    let mut call_ids: HashSet<&str, _> = HashSet::with_capacity_and_hasher(calls, hasher);
    for (pos, &(i, _)) in ordered.iter().enumerate() {
        let i = i as usize;
        if is_result(i) {
            for call_id in session.call_ids_of(i) {
                result_at.entry(call_id).or_insert(pos);
            }
        } else {
            call_ids.extend(session.call_ids_of(i));
        }
    }
    let mut emitted = vec![false; ordered.len()];
    for (pos, &(i, part)) in ordered.iter().enumerate() {
        let i = i as usize;
        if emitted[pos] {
            continue;
        }
        if is_result(i) {
            let call_id = session.call_ids_of(i).next().unwrap_or_default();
            let entry_id = session.with_id(i, str::to_string);
            if !call_ids.contains(call_id) {
                view.warnings.push(format!(
                    "tool result `{call_id}` (entry {entry_id}) has no matching call in the model input; left out"
                ));
            } else {
                // A duplicate result for a call whose first result was already emitted.
                view.warnings.push(format!(
                    "tool result `{call_id}` (entry {entry_id}) repeats an earlier result; left out"
                ));
            }
            view.left_out.push(i);
            emitted[pos] = true;
            continue;
        }
        emitted[pos] = true;
        view.slots.push(ViewSlot {
            item: ViewItem::Entry(i as u32),
            part,
            elided: false,
        });
        for (call, call_id) in session.call_ids_of(i).enumerate() {
            match result_at.get(call_id) {
                Some(&rpos) if rpos > pos && !emitted[rpos] => {
                    emitted[rpos] = true;
                    view.slots.push(ViewSlot {
                        item: ViewItem::Entry(ordered[rpos].0),
                        part: ordered[rpos].1,
                        elided: false,
                    });
                }
                _ => view.slots.push(ViewSlot {
                    item: ViewItem::InterruptedResult {
                        call_entry: i as u32,
                        call: call as u32,
                    },
                    part,
                    elided: false,
                }),
            }
        }
    }
}

/// Characters kept from the start and the end of an elided tool output.
pub const ELIDE_HEAD_CHARS: usize = 2000;
pub const ELIDE_TAIL_CHARS: usize = 1000;

/// An oversized tool output shortened for the model input: its head and tail with a marker
/// naming the entry that holds the whole output.
pub fn elided_text(entry_id: &str, r: &super::entry::ToolResultEntry) -> String {
    let text = super::entry::blocks_text(&r.content);
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= ELIDE_HEAD_CHARS + ELIDE_TAIL_CHARS {
        return text;
    }
    let head: String = chars[..ELIDE_HEAD_CHARS].iter().collect();
    let tail: String = chars[chars.len() - ELIDE_TAIL_CHARS..].iter().collect();
    format!(
        "{head}\n[… {} characters of tool output elided to fit the context window; the full output is kept in the session log, entry {entry_id} …]\n{tail}",
        chars.len() - ELIDE_HEAD_CHARS - ELIDE_TAIL_CHARS
    )
}

fn render_slot(session: &SessionIndex, slot: &ViewSlot) -> ModelMessage {
    match &slot.item {
        ViewItem::Capsule(i) => {
            let cap = session
                .entry(*i as usize)
                .as_capsule()
                .expect("capsule slot");
            ModelMessage {
                role: "user".into(),
                content: vec![ContentBlock::text(
                    crate::session::capsule::render::render_for_model(cap),
                )],
                tool_call_id: None,
                is_error: None,
                entry_id: None,
            }
        }
        ViewItem::ForeignSummary(i) => {
            let text = match &session.entry(*i as usize).body {
                EntryBody::ForeignCompaction(f) => foreign_summary_text(f).unwrap_or_default(),
                _ => unreachable!("a foreign summary slot holds a foreign compaction"),
            };
            ModelMessage {
                role: "user".into(),
                content: vec![ContentBlock::text(text)],
                tool_call_id: None,
                is_error: None,
                entry_id: None,
            }
        }
        ViewItem::Entry(i) => {
            let e = session.entry(*i as usize);
            match &e.body {
                EntryBody::Message(m) => ModelMessage {
                    role: m.role.as_str().into(),
                    content: m.content.clone(),
                    tool_call_id: None,
                    is_error: None,
                    entry_id: Some(e.id.clone()),
                },
                EntryBody::ToolResult(r) => ModelMessage {
                    role: "tool".into(),
                    content: if slot.elided {
                        vec![ContentBlock::text(elided_text(&e.id, r))]
                    } else {
                        r.content.clone()
                    },
                    tool_call_id: Some(r.call_id.clone()),
                    is_error: Some(r.is_error),
                    entry_id: Some(e.id.clone()),
                },
                _ => unreachable!("only model-visible entries are placed in the view"),
            }
        }
        ViewItem::InterruptedResult { .. } => ModelMessage {
            role: "tool".into(),
            content: vec![ContentBlock::text(INTERRUPTED_RESULT_TEXT)],
            tool_call_id: slot
                .item
                .interrupted_call(session)
                .map(|(id, _)| id.to_string()),
            is_error: Some(true),
            entry_id: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::testing::Builder;
    use proptest::prelude::*;
    use serde_json::json;

    fn roles(session: &SessionIndex) -> Vec<String> {
        ModelView::build(session, session.leaf())
            .messages(session)
            .iter()
            .map(|m| match &m.tool_call_id {
                Some(id) => format!("tool:{id}"),
                None => m.role.clone(),
            })
            .collect()
    }

    #[test]
    fn an_interrupted_call_gets_a_synthetic_result_in_the_view() {
        let mut b = Builder::new();
        b.user("go");
        b.bash("c1", "sleep 100");
        b.user("stop, do something else");
        let s = &b.session;
        assert_eq!(roles(s), ["user", "assistant", "tool:c1", "user"]);
        let msgs = ModelView::build(s, s.leaf()).messages(s);
        assert_eq!(blocks_text_of(&msgs[2]), INTERRUPTED_RESULT_TEXT);
        assert_eq!(msgs[2].is_error, Some(true));
        // The log itself has no such entry.
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn a_result_whose_call_is_missing_is_left_out_with_a_warning() {
        let mut b = Builder::new();
        b.user("go");
        b.result("ghost", "output of a call the log never saw");
        b.assistant("done");
        let s = &b.session;
        let view = ModelView::build(s, s.leaf());
        assert_eq!(roles(s), ["user", "assistant"]);
        assert_eq!(view.warnings.len(), 1);
        assert!(view.warnings[0].contains("ghost"));
        assert_eq!(s.len(), 3, "the log keeps both");
    }

    #[test]
    fn results_follow_their_call_even_when_logged_later() {
        let mut b = Builder::new();
        b.user("go");
        b.call("a", "Read", json!({"file_path": "x"}));
        b.user("(typed while the tool ran)");
        b.result("a", "contents");
        let s = &b.session;
        assert_eq!(roles(s), ["user", "assistant", "tool:a", "user"]);
    }

    fn blocks_text_of(m: &ModelMessage) -> String {
        crate::session::entry::blocks_text(&m.content)
    }

    proptest! {
        /// The view never separates a tool call from its result, whatever the log holds.
        #[test]
        fn the_view_never_separates_a_tool_call_from_its_result(ops in proptest::collection::vec(0u8..5, 1..80)) {
            let mut b = Builder::new();
            let mut calls: Vec<String> = Vec::new();
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    0 => { b.user("u"); }
                    1 => { b.assistant("a"); }
                    2 => { let id = format!("c{n}"); b.call(&id, "Bash", json!({"command": "ls"})); calls.push(id); }
                    3 => { if let Some(id) = calls.pop() { b.result(&id, "r"); } }
                    _ => { b.result(&format!("orphan{n}"), "r"); }
                }
            }
            let s = &b.session;
            let msgs = ModelView::build(s, s.leaf()).messages(s);
            let mut i = 0;
            while i < msgs.len() {
                let calls: Vec<String> = msgs[i].content.iter().filter_map(|c| match c {
                    ContentBlock::ToolCall { id, .. } => Some(id.clone()),
                    _ => None,
                }).collect();
                for (k, id) in calls.iter().enumerate() {
                    prop_assert_eq!(msgs.get(i + 1 + k).and_then(|m| m.tool_call_id.clone()), Some(id.clone()));
                }
                if calls.is_empty() {
                    prop_assert!(msgs[i].tool_call_id.is_none() || i > 0, "a result at the start");
                }
                i += 1 + calls.len();
                // Results only ever appear directly after their call.
                if i < msgs.len() {
                    prop_assert!(msgs[i].tool_call_id.is_none() || msgs[i].role != "tool");
                }
            }
        }
    }
}

#[cfg(test)]
mod foreign_compaction_tests {
    use super::*;
    use crate::session::entry::{ForeignCompactionEntry, Usage};
    use crate::session::foreign::{PI_SUMMARY_PREFIX, PI_SUMMARY_SUFFIX};
    use crate::session::testing::Builder;
    use crate::session::Session;

    fn set_usage(b: &mut Builder, id: &str, input: u64) {
        let idx = b.session.index_of(id).unwrap();
        let mut entry = b.session.entry(idx).clone();
        if let EntryBody::Message(m) = &mut entry.body {
            m.usage = Some(Usage {
                input,
                ..Usage::default()
            });
        }
        // Rebuild the session with the changed entry (entries are immutable once pushed).
        let entries: Vec<_> = b
            .session
            .entries()
            .iter()
            .map(|e| if e.id == id { entry.clone() } else { e.clone() })
            .collect();
        let mut fresh = Session::new(b.session.header.clone(), b.session.tokenizer());
        for e in entries {
            fresh.push(e).unwrap();
        }
        b.session = fresh;
    }

    fn foreign(agent: &str) -> ForeignCompactionEntry {
        ForeignCompactionEntry {
            agent: agent.into(),
            trigger: Some("auto".into()),
            tokens_before: Some(1000),
            summary: None,
            summary_tokens: None,
            first_kept_entry_id: None,
            kept_items: None,
            kept_entry_ids: None,
            instructions: None,
        }
    }

    fn texts(s: &SessionIndex) -> Vec<String> {
        ModelView::build(s, s.leaf())
            .messages(s)
            .iter()
            .map(|m| {
                format!(
                    "{}:{}",
                    m.role,
                    crate::session::entry::blocks_text(&m.content)
                )
            })
            .collect()
    }

    #[test]
    fn the_view_starts_from_the_summary_and_the_entries_pi_kept() {
        let mut b = Builder::new();
        b.user("first task");
        b.assistant("done with the first");
        let kept = b.user("second task");
        b.assistant("working on the second");
        b.push(EntryBody::ForeignCompaction(Box::new(
            ForeignCompactionEntry {
                summary: Some("the first task is done".into()),
                first_kept_entry_id: Some(kept.clone()),
                ..foreign("pi")
            },
        )));
        b.user("third task");
        let s = &b.session;
        let view = ModelView::build(s, s.leaf());
        assert_eq!(
            texts(s),
            [
                format!("user:{PI_SUMMARY_PREFIX}the first task is done{PI_SUMMARY_SUFFIX}"),
                "user:second task".into(),
                "assistant:working on the second".into(),
                "user:third task".into(),
            ]
        );
        assert_eq!(view.foreign, s.index_of(&kept).map(|k| k + 2));
        assert_eq!(view.first_kept, s.index_of(&kept));
        let b = view.breakdown(s);
        let summary = format!("{PI_SUMMARY_PREFIX}the first task is done{PI_SUMMARY_SUFFIX}");
        assert_eq!(
            b.capsule,
            MESSAGE_OVERHEAD_TOKENS + s.tokenizer().count(&summary),
            "the summary is counted as the capsule part"
        );
        let kept_idx = s.index_of(&kept).unwrap();
        assert_eq!(
            b.retained_tail,
            s.tokens_of(kept_idx) + s.tokens_of(kept_idx + 1)
        );
        assert_eq!(b.new_entries, s.tokens_of(s.leaf().unwrap()));
        assert_eq!(s.len(), 6, "the log keeps the whole history");
    }

    #[test]
    fn a_claude_code_summary_replaces_everything_before_it() {
        let mut b = Builder::new();
        b.user("long history");
        b.bash("c1", "cargo test");
        b.result("c1", "ok");
        b.push(EntryBody::ForeignCompaction(Box::new(
            ForeignCompactionEntry {
                summary: Some(
                    "This session is being continued from a previous conversation.".into(),
                ),
                ..foreign("claude-code")
            },
        )));
        b.user("go on");
        assert_eq!(
            texts(&b.session),
            [
                "user:This session is being continued from a previous conversation.",
                "user:go on"
            ]
        );
    }

    #[test]
    fn the_entries_codex_copied_into_its_new_history_are_kept_in_its_order() {
        let mut b = Builder::new();
        let first = b.user("first prompt");
        b.assistant("a long answer");
        let second = b.user("second prompt");
        b.bash("c1", "ls");
        b.result("c1", "files");
        b.push(EntryBody::ForeignCompaction(Box::new(
            ForeignCompactionEntry {
                kept_items: Some(3),
                kept_entry_ids: Some(vec![first, second, "e_gone".into()]),
                ..foreign("codex")
            },
        )));
        b.assistant("continuing");
        let s = &b.session;
        assert_eq!(
            texts(s),
            [
                "user:first prompt",
                "user:second prompt",
                "assistant:continuing"
            ]
        );
        let view = ModelView::build(s, s.leaf());
        assert!(
            view.warnings.iter().any(|w| w.contains("e_gone")),
            "a kept entry not on the branch is named: {:?}",
            view.warnings
        );
        // What the compaction dropped is still there for a capsule's facts.
        let superseded: Vec<&str> = view
            .superseded(s)
            .into_iter()
            .map(|i| s.entry(i).id.as_str())
            .collect();
        assert_eq!(superseded.len(), 3, "{superseded:?}");
    }

    #[test]
    fn usage_after_a_foreign_compaction_anchors() {
        let mut b = Builder::new();
        b.user("start");
        let before = b.assistant("measured on the full history");
        b.push(EntryBody::ForeignCompaction(Box::new(
            ForeignCompactionEntry {
                summary: Some("summary".into()),
                ..foreign("claude-code")
            },
        )));
        let after = b.assistant("measured on the source agent's compacted context");
        b.user("next");
        set_usage(&mut b, &before, 1000);
        set_usage(&mut b, &after, 50);
        let s = &b.session;
        let view = ModelView::build(s, s.leaf());
        let anchor = view.usage_anchor(s).expect("the usage after it anchors");
        assert_eq!(anchor.usage.input, 50);
        assert_eq!(anchor.tokens_after, s.tokens_of(s.leaf().unwrap()));
        assert_eq!(s.tally().usage_anchor(), Some(anchor), "the tally agrees");
    }

    #[test]
    fn a_compaction_request_alone_does_not_cut_the_view() {
        let mut b = Builder::new();
        b.user("start");
        let before = b.assistant("measured");
        // What `soba hook claude-code` records at PreCompact: no summary, nothing kept.
        b.push(EntryBody::ForeignCompaction(Box::new(
            ForeignCompactionEntry {
                trigger: Some("manual".into()),
                tokens_before: None,
                instructions: Some("keep the API notes".into()),
                ..foreign("claude-code")
            },
        )));
        b.user("next");
        set_usage(&mut b, &before, 1000);
        let s = &b.session;
        let view = ModelView::build(s, s.leaf());
        assert_eq!(view.foreign, None);
        assert_eq!(texts(s), ["user:start", "assistant:measured", "user:next"]);
        assert_eq!(view.usage_anchor(s).map(|a| a.usage.input), Some(1000));
        assert_eq!(view.oldest_foreign_compaction(s), None);
    }

    #[test]
    fn a_soba_capsule_after_a_foreign_compaction_wins() {
        let mut b = Builder::new();
        b.user("old");
        b.push(EntryBody::ForeignCompaction(Box::new(
            ForeignCompactionEntry {
                summary: Some("the agent's summary".into()),
                ..foreign("claude-code")
            },
        )));
        b.user("after the agent compacted");
        let kept = b.user("kept by SOBA");
        let mut cap = crate::session::testing::full_capsule();
        cap.first_kept_entry_id = Some(kept);
        let c = b.push(EntryBody::Capsule(Box::new(cap)));
        b.user("newest");
        let s = &b.session;
        let view = ModelView::build(s, s.leaf());
        assert_eq!(view.foreign, None);
        assert_eq!(view.capsule, s.index_of(&c));
        assert_eq!(
            view.slots[0].item,
            ViewItem::Capsule(s.index_of(&c).unwrap() as u32)
        );
        let rest: Vec<String> = texts(s)[1..].to_vec();
        assert_eq!(rest, ["user:kept by SOBA", "user:newest"]);
    }

    #[test]
    fn a_foreign_compaction_after_a_soba_capsule_replaces_it() {
        let mut b = Builder::new();
        b.user("old");
        let mut cap = crate::session::testing::full_capsule();
        cap.first_kept_entry_id = None;
        let c = b.push(EntryBody::Capsule(Box::new(cap)));
        b.user("after SOBA's capsule");
        b.push(EntryBody::ForeignCompaction(Box::new(
            ForeignCompactionEntry {
                summary: Some("the agent's summary".into()),
                ..foreign("claude-code")
            },
        )));
        b.user("newest");
        let s = &b.session;
        let view = ModelView::build(s, s.leaf());
        assert_eq!(view.capsule, s.index_of(&c), "still the previous capsule");
        assert_eq!(texts(s), ["user:the agent's summary", "user:newest"]);
    }

    #[test]
    fn the_whole_history_policy_keeps_everything_and_ignores_usage_after_the_compaction() {
        let mut b = Builder::new();
        b.user("start");
        let before = b.assistant("measured on the full history");
        b.push(EntryBody::ForeignCompaction(Box::new(
            ForeignCompactionEntry {
                summary: Some("summary".into()),
                ..foreign("claude-code")
            },
        )));
        let after = b.assistant("measured on the source agent's compacted context");
        set_usage(&mut b, &before, 1000);
        set_usage(&mut b, &after, 50);
        b.session
            .set_foreign_compactions(ForeignCompactions::WholeHistory);
        let s = &b.session;
        let view = ModelView::build(s, s.leaf());
        assert_eq!(view.foreign, None);
        assert_eq!(view.slots.len(), 3, "the whole history");
        let anchor = view
            .usage_anchor(s)
            .expect("the usage before the foreign compaction anchors");
        assert_eq!(anchor.usage.input, 1000);
        let after_idx = s.index_of(&after).unwrap();
        assert!(
            anchor.tokens_after >= s.tokens_of(after_idx),
            "entries after the anchor are counted"
        );
        assert_eq!(s.tally().usage_anchor(), Some(anchor), "the tally agrees");
    }
}

#[cfg(test)]
mod usage_tests {
    use super::*;
    use crate::session::entry::{MessageEntry, Usage};
    use crate::session::testing::Builder;

    fn assistant_with_usage(b: &mut Builder, input: u64) -> String {
        b.push(EntryBody::Message(MessageEntry {
            role: Role::Assistant,
            content: vec![ContentBlock::text("answer")],
            usage: Some(Usage {
                input,
                cache_read: 0,
                cache_write: 0,
                output: 10,
            }),
            model: None,
            synthetic: false,
        }))
    }

    #[test]
    fn usage_recorded_before_the_latest_capsule_is_ignored() {
        let mut b = Builder::new();
        b.user("one");
        assistant_with_usage(&mut b, 90_000);
        let kept = b.user("two");
        assistant_with_usage(&mut b, 95_000);
        let mut cap = crate::session::testing::full_capsule();
        cap.first_kept_entry_id = Some(kept);
        b.push(EntryBody::Capsule(Box::new(cap)));
        let s = &b.session;
        let view = ModelView::build(s, s.leaf());
        // The tail's usage measured the old, larger input: no anchor.
        assert!(view.usage_anchor(s).is_none());
        // Usage reported after the capsule is used again.
        b.user("three");
        assistant_with_usage(&mut b, 7_000);
        b.user("four");
        let s = &b.session;
        let view = ModelView::build(s, s.leaf());
        let anchor = view.usage_anchor(s).expect("fresh usage");
        assert_eq!(anchor.usage.input, 7_000);
        assert_eq!(anchor.tokens_after, s.tokens_of(s.leaf().unwrap()));
    }
}
