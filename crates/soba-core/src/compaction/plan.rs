//! The immutable plan a compaction runs from: trigger, cut, expected leaf, limits, tokens
//! before, the history to summarize, the previous capsule, the facts, and the local capsule.

use crate::budget::Budget;
use crate::capsule::artifacts::collect;
use crate::capsule::builder::{build_state, trim_state};
use crate::config::Config;
use crate::limits::Limits;
use crate::session::capsule::model::Artifacts;
use crate::session::capsule::model::CapsuleEntry;
use crate::session::capsule::model::CapsuleState;
use crate::session::capsule::model::Origin;
use crate::session::capsule::model::Quality;
use crate::session::entry::{Entry, EntryBody, Outcome, Role};
use crate::session::foreign::ForeignCompactions;
use crate::session::trigger::Trigger;
use crate::session::view::{ModelMessage, ModelView, ViewItem, ViewPart};
use crate::session::Session;
use crate::tokens::MESSAGE_OVERHEAD_TOKENS;
use crate::tool_mapping::ToolMapping;

use super::cut::{choose_cut, fit_cut, suffix_tokens, CutItem};
use super::reasons;

/// Everything a compaction needs, captured when it starts. Owns its data: generating a summary
/// from it borrows nothing from the session.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub operation_id: String,
    pub trigger: Trigger,
    /// A client asked for it: no ROI minimum applies ([`PlanRequest::requested`]).
    pub requested: bool,
    /// The leaf when the plan was made; a capsule is appended only if it is still the leaf.
    pub expected_leaf: String,
    pub limits: Limits,
    pub tokens_before: u64,
    /// Tokens the provider counted that are in no log entry (see `Budget::not_in_log`).
    pub not_in_log_tokens: u64,
    /// System prompt and tool schemas, which every continuation carries.
    pub overhead_tokens: u64,
    pub first_kept_entry_id: Option<String>,
    /// Tokens of the retained tail as it will be sent (after elision).
    pub tail_tokens: u64,
    pub elide_tool_results_over: Option<u64>,
    pub previous: Option<CapsuleEntry>,
    /// The history being folded into the capsule, as the model would read it.
    pub to_summarize: Vec<ModelMessage>,
    pub summarized_entry_ids: Vec<String>,
    pub artifacts: Artifacts,
    /// The deterministic capsule state, the fallback for any model failure.
    pub local_state: CapsuleState,
    pub instructions: Option<String>,
    pub title: Option<String>,
    pub workspace: String,
    pub tokenizer: crate::tokens::TokenizerKind,
    /// The factor the budget scales SOBA's counts by (a tokenizer that is not the model's own):
    /// the continuation is measured on the budget's scale, so the "after" of a compaction is
    /// the figure the budget shows next.
    pub calibration: crate::budget::Calibration,
    /// The ROI minimums the post-generation gate applies.
    pub roi: crate::limits::CompactionConfig,
    /// Mirror the capsule into the workspace's Project Memory, where the rules allow it.
    pub mirror_requested: bool,
    /// The window setting the limits come from, when a provider's overflow lowered them.
    pub learned_window: Option<crate::window::WindowSetting>,
    /// How long making this plan took, for the operation's `planning_ms`: set by the host that
    /// timed it ([`plan`] itself reads no clock, so it is 0 there).
    pub planning_ms: u64,
}

impl Plan {
    pub fn is_soft(&self) -> bool {
        self.trigger.is_soft()
    }

    /// The capsule entry this plan produces with a given narrative state.
    pub fn capsule(
        &self,
        checkpoint_id: String,
        state: CapsuleState,
        quality: Quality,
        degraded_reason: Option<String>,
    ) -> CapsuleEntry {
        CapsuleEntry {
            checkpoint_id,
            trigger: self.trigger,
            quality,
            first_kept_entry_id: self.first_kept_entry_id.clone(),
            previous_checkpoint_id: self.previous.as_ref().map(|p| p.checkpoint_id.clone()),
            state,
            artifacts: self.artifacts.clone(),
            tokens: Default::default(),
            origin: Origin::Session,
            mirrored: false,
            title: self.title.clone(),
            degraded_reason,
            instructions: self.instructions.clone(),
            elide_tool_results_over: self.elide_tool_results_over,
            loaded_from: None,
        }
    }

    /// The retained tail when it is below keepRecentTokens (a hand-off keeps none).
    pub fn short_tail(&self) -> Option<crate::session::capsule::model::ShortTail> {
        let keep = self.roi.keep_recent_tokens;
        (self.trigger != Trigger::Handoff && self.tail_tokens < keep).then(|| {
            crate::session::capsule::model::ShortTail {
                retained_tail_tokens: self.tail_tokens,
                keep_recent_tokens: keep,
                context_window: self.limits.context_window,
                learned_from: self.learned_window.map(|w| w.source),
                hard_limit: self.limits.hard_limit,
            }
        })
    }

    /// Exact tokens of the continuation with this capsule: overhead + capsule + retained tail.
    pub fn continuation_tokens(&self, capsule: &CapsuleEntry) -> u64 {
        let capsule_tokens = MESSAGE_OVERHEAD_TOKENS
            + self
                .tokenizer
                .count(&crate::session::capsule::render::render_for_model(capsule));
        self.calibration
            .apply(self.overhead_tokens + capsule_tokens + self.tail_tokens)
    }
}

/// What to plan.
#[derive(Debug, Clone)]
pub struct PlanRequest<'a> {
    pub trigger: Trigger,
    /// A client asked for it (`soba/compact`): the agent decided to compact, so no ROI minimum
    /// holds it back, whatever its trigger.
    pub requested: bool,
    pub instructions: Option<String>,
    pub title: Option<String>,
    pub config: &'a Config,
    pub mapping: &'a ToolMapping,
    pub operation_id: String,
}

/// Why no plan: an outcome and its reason.
#[derive(Debug, Clone, PartialEq)]
pub struct NoPlan {
    pub outcome: Outcome,
    pub reason: String,
    pub tokens_before: u64,
}

/// Model-visible entries of the view in branch order, and the entries after the capsule
/// (all types, so watcher `file` entries and skills count as facts).
fn view_items(session: &Session, view: &ModelView) -> (Vec<usize>, Vec<CutItem>) {
    let mut order: Vec<usize> = view.entry_indices().collect();
    order.sort_unstable();
    let mut extra: std::collections::HashMap<usize, u64> = std::collections::HashMap::new();
    let mut elided: std::collections::HashMap<usize, u64> = std::collections::HashMap::new();
    for slot in &view.slots {
        match &slot.item {
            ViewItem::InterruptedResult { call_entry, .. } => {
                *extra.entry(*call_entry as usize).or_default() +=
                    ModelView::slot_tokens(session, slot);
            }
            ViewItem::Entry(i) if slot.elided => {
                elided.insert(*i as usize, ModelView::slot_tokens(session, slot));
            }
            _ => {}
        }
    }
    let items = order
        .iter()
        .map(|&i| {
            let e = session.entry(i);
            CutItem {
                // What a source agent kept over its own compaction goes with its summary: a
                // retained tail from there would bring back what it dropped in between.
                is_message: matches!(&e.body, EntryBody::Message(m) if m.role != Role::System)
                    && view.foreign.is_none_or(|f| i > f),
                tokens: elided
                    .get(&i)
                    .copied()
                    .unwrap_or_else(|| session.tokens_of(i))
                    + extra.get(&i).copied().unwrap_or(0),
                calls: e.tool_calls().map(|(id, _, _)| id.to_string()).collect(),
                result_of: e.as_tool_result().map(|r| r.call_id.clone()),
            }
        })
        .collect();
    (order, items)
}

/// All entries on the branch after `capsule` up to `leaf`, oldest first.
fn entries_after(session: &Session, leaf: usize, capsule: Option<usize>) -> Vec<usize> {
    let mut out = Vec::new();
    let mut cur = Some(leaf);
    while let Some(i) = cur {
        if Some(i) == capsule {
            break;
        }
        out.push(i);
        cur = session.parent_of(i);
    }
    out.reverse();
    out
}

/// How many of the agent's latest steps [`recent_step_tokens`] measures.
const STEPS_MEASURED: usize = 3;

/// The tokens the largest of the agent's latest [`STEPS_MEASURED`] steps added to the input: a
/// step is a message and the tool results that follow it (a reply and its tool round).
fn recent_step_tokens(items: &[CutItem]) -> u64 {
    let mut steps = Vec::with_capacity(STEPS_MEASURED);
    let mut step = 0;
    for item in items.iter().rev() {
        step += item.tokens;
        if item.is_message {
            steps.push(step);
            step = 0;
            if steps.len() == STEPS_MEASURED {
                break;
            }
        }
    }
    steps.into_iter().max().unwrap_or(0)
}

/// Tool results in the tail, largest first: elide the fewest that make the tail fit.
fn elision_threshold(
    session: &Session,
    order: &[usize],
    items: &[CutItem],
    from: usize,
    room: u64,
) -> Option<(u64, u64)> {
    let kind = session.tokenizer();
    let mut results: Vec<(u64, u64)> = (from..items.len())
        .filter(|&p| items[p].result_of.is_some())
        .filter_map(|p| {
            let e = session.entry(order[p]);
            let r = e.as_tool_result()?;
            let elided = MESSAGE_OVERHEAD_TOKENS
                + kind.count(&r.call_id)
                + kind.count(&crate::session::view::elided_text(&e.id, r));
            (elided < items[p].tokens).then_some((items[p].tokens, elided))
        })
        .collect();
    results.sort_unstable_by_key(|r| std::cmp::Reverse(r.0));
    let mut tail: u64 = items[from..].iter().map(|i| i.tokens).sum();
    for k in 0..results.len() {
        tail = tail - results[k].0 + results[k].1;
        let threshold = results[k].0 - 1;
        // Results of the same size as the k-th are elided too by a threshold.
        let ties: u64 = results[k + 1..]
            .iter()
            .filter(|r| r.0 > threshold)
            .map(|r| r.0 - r.1)
            .sum();
        let tail_with_ties = tail - ties;
        if tail_with_ties <= room {
            return Some((threshold, tail_with_ties));
        }
    }
    None
}

/// Make the plan for compacting `session` at `leaf`. Pure.
pub fn plan(session: &Session, leaf: Option<usize>, req: &PlanRequest<'_>) -> Result<Plan, NoPlan> {
    let config = req.config;
    let limits = config.limits_under(session.window_setting());
    let c = &config.compaction;
    let view = ModelView::build(session, leaf);
    let (breakdown, anchor) = (view.breakdown(session), view.usage_anchor(session));
    let budget = Budget::measure(
        limits,
        breakdown,
        anchor,
        session.calibration(),
        session.unseen_at(leaf, anchor),
    );
    let tokens_before = budget.effective_tokens;
    let no_plan = |outcome, reason: &str| NoPlan {
        outcome,
        reason: reason.to_string(),
        tokens_before,
    };
    let Some(leaf) = leaf else {
        return Err(no_plan(
            Outcome::Skipped,
            reasons::NOTHING_BEFORE_RETAINED_WINDOW,
        ));
    };
    let previous = view
        .capsule
        .and_then(|i| session.entry(i).as_capsule())
        .cloned();
    let overhead_tokens = budget.breakdown.system + budget.breakdown.tools;
    let (order, items) = view_items(session, &view);
    let mandatory = matches!(req.trigger, Trigger::HardLimit | Trigger::ContextOverflow);
    let handoff = req.trigger == Trigger::Handoff;

    // Where the retained tail starts. A hand-off capsule summarizes everything and keeps the
    // session as it is.
    let mut cut = if handoff {
        Some(items.len())
    } else {
        choose_cut(&items, c.keep_recent_tokens)
    };
    // The spec's safe minimum of a retained tail: the latest user message and everything after
    // it (the current request and the tool batches answering it). A mandatory compaction cuts
    // into keepRecentTokens down to it before anything else, and past it only when even that
    // tail, elided, cannot fit.
    let latest_request = (0..items.len()).rev().find(|&p| {
        items[p].is_message
            && matches!(&session.entry(order[p]).body,
                        EntryBody::Message(m) if m.role == Role::User && !m.synthetic)
    });
    if cut.is_none() && mandatory && !items.is_empty() {
        // Nothing older than the window: cut as late as the safe minimum allows.
        cut = Some(match latest_request {
            Some(p) if p > 0 => fit_cut(&items, 0, p + 1, 0).0,
            _ => fit_cut(&items, 0, items.len(), 0).0,
        });
    }
    let Some(mut cut) = cut else {
        return Err(no_plan(
            Outcome::Skipped,
            reasons::NOTHING_BEFORE_RETAINED_WINDOW,
        ));
    };

    let workspace = session.header.workspace.clone();
    let after_capsule = entries_after(session, leaf, view.capsule);
    // The capsule's facts cover the whole history, also what the source agent's own
    // compaction took out of the input.
    let superseded = view.superseded(session);
    let whole_history = match view.foreign {
        Some(_) => ModelView::build_with(session, Some(leaf), ForeignCompactions::WholeHistory),
        None => view.clone(),
    };
    let tail_of_previous: Vec<usize> = whole_history
        .slots
        .iter()
        .filter(|s| s.part == ViewPart::RetainedTail)
        .filter_map(|s| match s.item {
            ViewItem::Entry(i) => Some(i as usize),
            _ => None,
        })
        .collect();
    let fact_entries: Vec<&Entry> = tail_of_previous
        .iter()
        .chain(after_capsule.iter())
        .map(|&i| session.entry(i))
        .collect();
    let artifacts = collect(
        &workspace,
        previous.as_ref().map(|p| &p.artifacts),
        fact_entries.iter().copied(),
        req.mapping,
    );

    let summarized_at = |cut: usize| -> Vec<usize> {
        let mut summarized: Vec<usize> = superseded.iter().chain(&order[..cut]).copied().collect();
        summarized.sort_unstable();
        summarized
    };
    let build = |cut: usize| {
        let summarized: Vec<&Entry> = summarized_at(cut)
            .into_iter()
            .map(|i| session.entry(i))
            .collect();
        build_state(
            session.tokenizer(),
            previous.as_ref(),
            &summarized,
            &artifacts,
        )
    };
    let mut local_state = build(cut);
    let mut elide_over = previous.as_ref().and_then(|p| p.elide_tool_results_over);
    let suffix = suffix_tokens(&items);
    let mut tail_tokens = if handoff { 0 } else { suffix[cut] };

    // Every continuation but a hand-off's must fit under the hard limit: an explicit /compact
    // of a session already past the window moves the cut and elides like a mandatory one,
    // instead of failing exactly when it is needed.
    let capsule_of = |state: &CapsuleState| {
        capsule_tokens(
            session.tokenizer(),
            state,
            &artifacts,
            previous.as_ref(),
            req,
        )
    };
    // The cut may move later up to the latest request, never past it.
    let latest_cut = |cut: usize| match latest_request {
        Some(p) if p >= cut => p + 1,
        _ => items.len(),
    };
    if !handoff {
        // First leave room for the next steps of the size the agent's recent steps had
        // (`Limits::room_for_steps`), by moving the cut later alone: in a small window a step
        // is a large share of it, and a compaction that leaves room for one step only compacts
        // again at the next. Whole steps stay: nothing is elided for this room.
        let for_steps = limits.room_for_steps(budget.calibration.apply(recent_step_tokens(&items)));
        let capsule = capsule_of(&local_state);
        let room = budget
            .calibration
            .counted_within(for_steps)
            .saturating_sub(overhead_tokens + capsule);
        if tail_tokens > room {
            let (later, fits) = fit_cut(&items, cut, latest_cut(cut), room);
            if fits && later != cut {
                let later_state = build(later);
                let later_room = budget
                    .calibration
                    .counted_within(for_steps)
                    .saturating_sub(overhead_tokens + capsule_of(&later_state));
                if suffix[later] <= later_room {
                    cut = later;
                    tail_tokens = suffix[later];
                    local_state = later_state;
                }
            }
        }
    }
    if !handoff {
        // Then aim at the room a compaction leaves (`Limits::room_after_compaction`), so the
        // next ordinary step does not compact again: move the cut later, up to the latest
        // request, and elide the largest tool results of the tail. Nothing is lost that the
        // capsule does not hold; when that cannot reach the room, the hard limit is what must
        // hold, by every means below.
        let target = limits.room_after_compaction();
        let capsule = capsule_of(&local_state);
        let until = latest_cut(cut);
        let room = budget
            .calibration
            .counted_within(target)
            .saturating_sub(overhead_tokens + capsule);
        if tail_tokens > room {
            let (later, fits) = fit_cut(&items, cut, until, room);
            let later_state = (later != cut).then(|| build(later));
            let later_capsule = later_state.as_ref().map_or(capsule, capsule_of);
            // The capsule grows as the cut moves: measure the room again with it.
            let later_room = budget
                .calibration
                .counted_within(target)
                .saturating_sub(overhead_tokens + later_capsule);
            if fits && suffix[later] <= later_room {
                cut = later;
                tail_tokens = suffix[later];
                if let Some(state) = later_state {
                    local_state = state;
                }
            } else if let Some((threshold, tail)) =
                elision_threshold(session, &order, &items, later, later_room)
            {
                cut = later;
                elide_over = Some(elide_over.map_or(threshold, |t: u64| t.min(threshold)));
                tail_tokens = tail;
                if let Some(state) = later_state {
                    local_state = state;
                }
            }
        }
    }
    if !handoff {
        // Fit capsule + tail under the hard limit. Moving the cut later grows the capsule, so
        // re-measure after every move; as a last resort shorten the capsule's prose.
        let mut trimmed = false;
        let mut until = latest_cut(cut);
        loop {
            let capsule = capsule_of(&local_state);
            // Counted tokens, which the next preflight raises by the calibration factor.
            let room = budget
                .calibration
                .counted_within(limits.hard_limit)
                .saturating_sub(overhead_tokens + capsule);
            if tail_tokens <= room {
                break;
            }
            let (later, fits) = fit_cut(&items, cut, until, room);
            if later != cut {
                cut = later;
                local_state = build(cut);
                if trimmed {
                    local_state = trim_state(local_state);
                }
                tail_tokens = suffix[cut];
                continue;
            }
            if !fits {
                if let Some((threshold, tail)) =
                    elision_threshold(session, &order, &items, cut, room)
                {
                    elide_over = Some(threshold);
                    tail_tokens = tail;
                    break;
                }
                if until < items.len() {
                    // Even the latest request's turn, elided, does not fit: cut into it.
                    until = items.len();
                    continue;
                }
            }
            if trimmed {
                return Err(no_plan(Outcome::Failed, reasons::CONTEXT_BUDGET_EXCEEDED));
            }
            local_state = trim_state(local_state);
            trimmed = true;
        }
    }
    if cut == 0 && !mandatory {
        return Err(no_plan(
            Outcome::Skipped,
            reasons::NOTHING_BEFORE_RETAINED_WINDOW,
        ));
    }

    if req.trigger.is_soft() && !req.requested {
        // No capsule can make the continuation smaller than system + tools + retained tail:
        // when even that misses the post-generation minimums, asking a model is wasted.
        let best = super::roi::post_generation(tokens_before, overhead_tokens + tail_tokens, c);
        if !best.passes {
            return Err(no_plan(Outcome::Skipped, &best.reason(c, "pre-generation")));
        }
    }

    let first_kept_entry_id = if handoff {
        None
    } else {
        order.get(cut).map(|&i| session.entry(i).id.clone())
    };
    let cut_entry = order.get(cut).copied();
    let messages = view.messages(session);
    let to_summarize: Vec<ModelMessage> = view
        .slots
        .iter()
        .zip(messages)
        .filter(|(slot, _)| {
            let idx = match &slot.item {
                ViewItem::Entry(i) => Some(*i as usize),
                ViewItem::InterruptedResult { call_entry, .. } => Some(*call_entry as usize),
                ViewItem::ForeignSummary(f) => Some(*f as usize),
                ViewItem::Capsule(_) => None,
            };
            matches!((idx, cut_entry), (Some(i), Some(c)) if i < c)
                || (idx.is_some() && cut_entry.is_none())
        })
        .map(|(_, m)| m)
        .collect();

    Ok(Plan {
        operation_id: req.operation_id.clone(),
        trigger: req.trigger,
        expected_leaf: session.entry(leaf).id.clone(),
        limits,
        tokens_before,
        not_in_log_tokens: budget.not_in_log(),
        overhead_tokens,
        first_kept_entry_id,
        tail_tokens,
        elide_tool_results_over: elide_over,
        previous,
        to_summarize,
        summarized_entry_ids: summarized_at(cut)
            .into_iter()
            .map(|i| session.entry(i).id.clone())
            .collect(),
        artifacts,
        local_state,
        instructions: req.instructions.clone(),
        title: req.title.clone(),
        workspace,
        tokenizer: session.tokenizer(),
        roi: c.clone(),
        mirror_requested: false,
        requested: req.requested,
        calibration: budget.calibration,
        learned_window: session
            .window_setting()
            .filter(|w| w.context_window == Some(limits.context_window))
            .copied(),
        planning_ms: 0,
    })
}

/// Tokens the capsule will take with this state and these facts (the local estimate).
fn capsule_tokens(
    tokenizer: crate::tokens::TokenizerKind,
    state: &CapsuleState,
    artifacts: &Artifacts,
    previous: Option<&CapsuleEntry>,
    req: &PlanRequest<'_>,
) -> u64 {
    let probe = CapsuleEntry {
        checkpoint_id: "ck_000000000000".into(),
        trigger: req.trigger,
        quality: Quality::Degraded,
        first_kept_entry_id: None,
        previous_checkpoint_id: previous.map(|p| p.checkpoint_id.clone()),
        state: state.clone(),
        artifacts: artifacts.clone(),
        tokens: Default::default(),
        origin: Origin::Session,
        mirrored: false,
        title: req.title.clone(),
        degraded_reason: None,
        instructions: req.instructions.clone(),
        elide_tool_results_over: None,
        loaded_from: None,
    };
    MESSAGE_OVERHEAD_TOKENS
        + tokenizer.count(&crate::session::capsule::render::render_for_model(&probe))
}

/// What a compaction that cut into keepRecentTokens did, for its outcome's reason.
pub fn short_tail_note(t: &crate::session::capsule::model::ShortTail) -> String {
    let window = match t.learned_from {
        None => format!("the configured window of {} tokens", t.context_window),
        Some(source) => format!(
            "the window of {} tokens learned from the provider ({})",
            t.context_window,
            source.as_str()
        ),
    };
    format!(
        "kept a retained tail of {} tokens, below keepRecentTokens {}, to leave room under the hard limit of {} \
         tokens under {window}",
        t.retained_tail_tokens, t.keep_recent_tokens, t.hard_limit
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Overrides;
    use crate::session::entry::ForeignCompactionEntry;
    use crate::session::testing::Builder;

    /// A session whose window a provider's overflow lowered to `window` tokens, under a
    /// configured window of 64000 with keepRecentTokens 20000.
    fn lowered(window: u64) -> (Builder, Config) {
        let overrides = Overrides {
            context_window: Some(64_000),
            max_output_tokens: Some(2000),
            keep_recent_tokens: Some(20_000),
            ..Overrides::default()
        };
        let config = Config::resolve(&[], None, &overrides).unwrap();
        let mut b = Builder::new();
        b.push(EntryBody::Setting(crate::session::entry::SettingEntry {
            window: Some(crate::window::WindowSetting {
                context_window: Some(window),
                source: crate::window::WindowSource::ProviderError,
                figures: crate::window::OverflowFigures {
                    provider_window: Some(window),
                    provider_tokens: None,
                },
                counted_tokens: Some(30_000),
                reported_input: None,
            }),
            ..Default::default()
        }));
        (b, config)
    }

    /// About `n` tokens of prose.
    fn words(n: usize, seed: &str) -> String {
        (0..n).map(|i| format!(" {seed}{}", i % 7)).collect()
    }

    fn overflow_plan(b: &Builder, config: &Config) -> Plan {
        let req = PlanRequest {
            trigger: Trigger::ContextOverflow,
            requested: false,
            instructions: None,
            title: None,
            config,
            mapping: &config.tool_mapping,
            operation_id: "op_1".into(),
        };
        plan(&b.session, b.session.leaf(), &req).expect("a recovery plan")
    }

    #[test]
    fn an_overflow_recovery_cuts_into_keep_recent_tokens_to_fit_the_learned_window() {
        let (mut b, config) = lowered(24_000);
        for turn in 0..6 {
            b.user(&words(900, &format!("ask{turn}x")));
            b.assistant(&words(900, &format!("did{turn}y")));
        }
        let p = overflow_plan(&b, &config);
        assert_eq!(
            p.limits.context_window, 24_000,
            "the learned window's limits"
        );
        assert!(p.tail_tokens < 20_000, "{}", p.tail_tokens);
        assert!(
            p.overhead_tokens + p.tail_tokens <= p.limits.hard_limit,
            "the tail fits the lowered hard limit {}: {}",
            p.limits.hard_limit,
            p.tail_tokens
        );
        let short = p.short_tail().expect("the tail is below keepRecentTokens");
        assert_eq!(short.keep_recent_tokens, 20_000);
        assert_eq!(short.retained_tail_tokens, p.tail_tokens);
        assert_eq!(short.context_window, 24_000);
        assert_eq!(
            short.learned_from,
            Some(crate::window::WindowSource::ProviderError)
        );
        let note = short_tail_note(&short);
        assert!(note.contains("below keepRecentTokens 20000"), "{note}");
        assert!(
            note.contains("24000 tokens learned from the provider"),
            "{note}"
        );
    }

    #[test]
    fn the_latest_request_stays_in_the_tail_and_its_tool_output_is_elided_first() {
        let (mut b, config) = lowered(24_000);
        for turn in 0..3 {
            b.user(&words(900, &format!("ask{turn}x")));
            b.assistant(&words(900, &format!("did{turn}y")));
        }
        let request = b.user("now read the big log");
        b.call("c1", "read_file", serde_json::json!({"path": "big.log"}));
        b.result("c1", &words(9000, "log"));
        b.assistant("read it");
        let p = overflow_plan(&b, &config);
        assert_eq!(
            p.first_kept_entry_id.as_deref(),
            Some(request.as_str()),
            "the tail starts at the latest user message"
        );
        assert!(
            p.elide_tool_results_over.is_some(),
            "the big result is elided"
        );
        assert!(p.overhead_tokens + p.tail_tokens <= p.limits.hard_limit);
    }

    #[test]
    fn the_cut_passes_the_latest_request_only_when_its_turn_cannot_fit_even_elided() {
        let (mut b, config) = lowered(24_000);
        b.user(&words(900, "first"));
        b.assistant(&words(900, "reply"));
        let request = b.user("write the whole report");
        b.assistant(&words(9000, "report"));
        let last = b.assistant("done");
        let p = overflow_plan(&b, &config);
        assert_ne!(p.first_kept_entry_id.as_deref(), Some(request.as_str()));
        assert_eq!(p.first_kept_entry_id.as_deref(), Some(last.as_str()));
        assert!(p.overhead_tokens + p.tail_tokens <= p.limits.hard_limit);
    }

    /// Issue 38: a hard-limit compaction leaves the input at the room target, not just under
    /// the hard limit, so the next step does not compact again.
    #[test]
    fn a_hard_limit_plan_in_a_small_window_leaves_the_room_target() {
        let overrides = Overrides {
            context_window: Some(16_384),
            ..Overrides::default()
        };
        let config = Config::resolve(&[], None, &overrides).unwrap();
        let limits = config.limits();
        let mut b = Builder::new();
        b.user("fix the parser");
        for k in 0..3 {
            let id = format!("c{k}");
            b.call(
                &id,
                "read_file",
                serde_json::json!({"path": format!("f{k}.rs")}),
            );
            b.result(&id, &words(2900, &format!("out{k}x")));
        }
        let req = PlanRequest {
            trigger: Trigger::HardLimit,
            requested: false,
            instructions: None,
            title: None,
            config: &config,
            mapping: &config.tool_mapping,
            operation_id: "op_1".into(),
        };
        let p = plan(&b.session, b.session.leaf(), &req).expect("a plan");
        let capsule = p.capsule(
            "ck_000000000000".into(),
            p.local_state.clone(),
            Quality::Local,
            None,
        );
        let after = p.continuation_tokens(&capsule);
        assert!(
            after <= limits.room_after_compaction(),
            "{after} > {} (hard limit {})",
            limits.room_after_compaction(),
            limits.hard_limit
        );
        assert!(
            p.elide_tool_results_over.is_some(),
            "the only request's turn keeps its place: its largest results are elided"
        );
    }

    /// A capsule made after a source agent's own compaction still holds the facts of the
    /// history that compaction took out of the input.
    #[test]
    fn a_capsule_after_a_foreign_compaction_covers_the_whole_history() {
        let mut b = Builder::new();
        let goal = b.user("implement the tokenizer cache");
        b.assistant("the cache is in place");
        b.push(EntryBody::ForeignCompaction(Box::new(
            ForeignCompactionEntry {
                agent: "claude-code".into(),
                trigger: Some("auto".into()),
                tokens_before: Some(150_000),
                summary: Some("The cache was built.".into()),
                summary_tokens: None,
                first_kept_entry_id: None,
                kept_items: None,
                kept_entry_ids: None,
                instructions: None,
            },
        )));
        b.user("now write the benchmarks");
        b.assistant("benchmarks written");
        let config = Config::resolve(&[], None, &Overrides::default()).unwrap();
        let req = PlanRequest {
            trigger: Trigger::Handoff,
            requested: false,
            instructions: None,
            title: None,
            config: &config,
            mapping: &config.tool_mapping,
            operation_id: "op_1".into(),
        };
        let s = &b.session;
        let plan = plan(s, s.leaf(), &req).expect("a hand-off plan");
        assert!(plan.summarized_entry_ids.contains(&goal), "{plan:?}");
        let requests = plan.local_state.requests.join("\n");
        assert!(
            requests.contains("implement the tokenizer cache"),
            "{requests}"
        );
        assert!(requests.contains("now write the benchmarks"), "{requests}");
        // The writer model reads the agent's summary, not the history it replaced.
        let read: Vec<String> = plan
            .to_summarize
            .iter()
            .map(|m| crate::session::entry::blocks_text(&m.content))
            .collect();
        assert_eq!(read[0], "The cache was built.");
        assert!(!read
            .iter()
            .any(|t| t.contains("implement the tokenizer cache")));
    }
}
