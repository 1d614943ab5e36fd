//! The barrier's steps that touch the log: preflight bookkeeping (consumed intents, skipped
//! attempts), and `commit`, which appends a capsule only if the operation was not aborted and
//! the leaf is still the expected leaf — checked immediately before the append.

use crate::budget::Budget;
use crate::config::Config;
use crate::session::capsule::model::CapsuleState;
use crate::session::capsule::model::Quality;
use crate::session::entry::{
    CheckpointEntry, CheckpointKind, CompactionRecord, Entry, EntryBody, IntentAction, IntentEntry,
    Outcome, SettingEntry, TurnCompleteEntry, Usage,
};
use crate::session::log::{LogError, SessionLog};
use crate::session::trigger::Trigger;
use crate::session::view::{ModelMessage, ModelView};
use crate::session::Session;
use crate::tool_mapping::ToolMapping;
use crate::util::new_id;
use crate::window::OverflowFigures;

use super::plan::{plan, short_tail_note, NoPlan, Plan, PlanRequest};
use super::triggers::{decide, records_intent, Decision};
use super::{reasons, roi, CompactionResult};

/// The narrative state a compaction produced, or its cancellation.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // built once per compaction, moved, never stored in bulk
pub enum Generated {
    State {
        state: CapsuleState,
        quality: Quality,
        degraded_reason: Option<String>,
    },
    Cancelled,
}

/// What a completed compaction with a `local` capsule says about it.
pub const BUILT_LOCALLY: &str = "built locally from the log (no summarization model configured)";

/// The local deterministic capsule of a plan.
pub fn generate_local(plan: &Plan) -> Generated {
    Generated::State {
        state: plan.local_state.clone(),
        quality: Quality::Local,
        degraded_reason: None,
    }
}

fn append_child(log: &mut SessionLog, body: EntryBody) -> Result<String, LogError> {
    let id = new_id("e_");
    let parent = log.session().leaf_id().map(str::to_string);
    log.append(Entry::new(id.clone(), parent, body))?;
    Ok(id)
}

fn record(log: &mut SessionLog, r: &CompactionResult) -> Result<(), LogError> {
    append_child(
        log,
        EntryBody::Compaction(CompactionRecord {
            operation_id: r.operation_id.clone(),
            trigger: r.trigger,
            outcome: r.outcome,
            reason: r.reason.clone(),
            tokens_before: r.tokens_before,
            tokens_after: Some(r.tokens_after),
        }),
    )
    .map(|_| ())
}

/// End the operation: append the capsule when it is still valid, else record why not.
/// Cancelled and stale operations never append a capsule. A cancelled automatic attempt (soft
/// or hard limit) on the leaf it planned for leaves its compaction record, so that the turn's
/// one soft attempt stays spent; on a moved leaf it appends nothing at all.
///
/// `generation_ms` is how long generating took; the result's `duration_ms` adds the plan's own
/// `planning_ms` to it, so it covers the whole operation.
pub fn commit(
    log: &mut SessionLog,
    plan: &Plan,
    generated: Generated,
    aborted: bool,
    generation_ms: u64,
) -> Result<CompactionResult, LogError> {
    let c = CompactionResult::ended(
        &plan.operation_id,
        plan.trigger,
        Outcome::Cancelled,
        reasons::CANCELLED,
        plan.tokens_before,
        plan.limits,
    );
    let mut result = CompactionResult {
        duration_ms: plan.planning_ms + generation_ms,
        planning_ms: plan.planning_ms,
        generation_ms,
        ..c
    };
    let cancelled = |log: &mut SessionLog, result: CompactionResult| {
        let spent = crate::session::turn::spends_the_soft_attempt(plan.trigger)
            && log.session().leaf_id() == Some(plan.expected_leaf.as_str());
        if spent {
            record(log, &result)?;
        }
        Ok(result)
    };
    let Generated::State {
        state,
        quality,
        degraded_reason,
    } = generated
    else {
        return cancelled(log, result);
    };
    if aborted {
        return cancelled(log, result);
    }
    if log.session().leaf_id() != Some(plan.expected_leaf.as_str()) {
        result.outcome = Outcome::Stale;
        result.reason = reasons::STALE.into();
        return Ok(result);
    }

    let checkpoint_id = new_id("ck_");
    let mut capsule = plan.capsule(checkpoint_id.clone(), state, quality, degraded_reason);
    let mut after = plan.continuation_tokens(&capsule);
    if after > plan.limits.hard_limit && quality == Quality::Model {
        // A model capsule too large to fit: the local one may still fit.
        let local = plan.capsule(
            checkpoint_id.clone(),
            plan.local_state.clone(),
            Quality::Degraded,
            Some("the model's capsule did not fit under the hard limit; built locally".into()),
        );
        let local_after = plan.continuation_tokens(&local);
        if local_after < after {
            capsule = local;
            after = local_after;
        }
    }
    result.tokens_after = after;
    let end =
        |log: &mut SessionLog, mut result: CompactionResult, outcome: Outcome, reason: String| {
            result.outcome = outcome;
            result.reason = reason;
            result.tokens_after = plan.tokens_before;
            record(log, &result)?;
            Ok(result)
        };
    if after > plan.limits.hard_limit {
        return end(
            log,
            result,
            Outcome::Failed,
            format!(
                "{}: the continuation needs {after} tokens, the hard limit is {}",
                reasons::CONTEXT_BUDGET_EXCEEDED,
                plan.limits.hard_limit
            ),
        );
    }
    if plan.trigger != Trigger::Handoff {
        if plan.is_soft() && !plan.requested {
            let check = roi::post_generation(plan.tokens_before, after, &plan.roi);
            if !check.passes {
                return end(
                    log,
                    result,
                    Outcome::Skipped,
                    check.reason(&plan.roi, "post-generation"),
                );
            }
        } else if after >= plan.tokens_before {
            let outcome = if plan.trigger == Trigger::User || plan.requested {
                Outcome::Skipped
            } else {
                Outcome::Failed
            };
            return end(log, result, outcome, {
                let mut reason = format!(
                    "{} ({} → {after} tokens)",
                    reasons::WOULD_NOT_SHRINK,
                    plan.tokens_before
                );
                // An explicit /compact that cannot help: say what holds the tokens.
                if plan.trigger == Trigger::User {
                    if let Some(note) = crate::budget::not_in_log_note(plan.not_in_log_tokens) {
                        reason = format!("{reason}. {note}");
                    }
                }
                reason
            });
        }
    }

    let short_tail = plan.short_tail();
    capsule.tokens = crate::session::capsule::model::CapsuleTokens {
        before: plan.tokens_before,
        after,
        short_tail,
    };
    result.fallback = capsule.quality == Quality::Degraded;
    result.quality = Some(capsule.quality);
    result.reason = match (capsule.quality, &capsule.degraded_reason) {
        (Quality::Degraded, Some(reason)) => reason.clone(),
        (Quality::Degraded, None) => "the summarization model's capsule was not used".into(),
        (Quality::Local, _) => BUILT_LOCALLY.into(),
        (Quality::Model, _) => "capsule written by the summarization model".into(),
    };
    if let Some(short) = short_tail {
        result.reason = format!("{}; {}", result.reason, short_tail_note(&short));
    }
    result.first_kept_entry_id = capsule.first_kept_entry_id.clone();
    result.checkpoint_id = Some(checkpoint_id);
    result.outcome = Outcome::Completed;
    result.reclaimed_percent = if plan.tokens_before == 0 {
        0.0
    } else {
        100.0 * plan.tokens_before.saturating_sub(after) as f64 / plan.tokens_before as f64
    };
    if plan.trigger == Trigger::Handoff {
        result.tokens_after = plan.tokens_before;
        result.reclaimed_percent = 0.0;
    }
    let mirrored = if plan.mirror_requested {
        mirror(log, plan, &mut capsule, &mut result)
    } else {
        None
    };
    if let Err(e) = append_child(log, EntryBody::Capsule(Box::new(capsule))) {
        // The capsule is not in the session: neither may its Project Memory copy be.
        if let Some(path) = mirrored {
            let _ = std::fs::remove_file(path);
        }
        return Err(e);
    }
    Ok(result)
}

/// Write the Project Memory copy of an explicit compaction's capsule before it is appended,
/// when the rules allow (a validated, non-degraded, explicit `/compact`).
fn mirror(
    log: &SessionLog,
    plan: &Plan,
    capsule: &mut crate::session::capsule::model::CapsuleEntry,
    result: &mut CompactionResult,
) -> Option<std::path::PathBuf> {
    use crate::capsule::project_memory;
    if let Err(why) = project_memory::should_mirror(capsule, true) {
        result.mirror_note = Some(why.to_string());
        return None;
    }
    capsule.mirrored = true;
    let created = crate::util::now_rfc3339();
    let source = project_memory::MirrorSource {
        created: &created,
        session: Some(&log.session().header.id),
    };
    match project_memory::mirror(std::path::Path::new(&plan.workspace), capsule, source, true) {
        Ok(m) => {
            result.mirrored_to = Some(m.path.display().to_string());
            Some(m.path)
        }
        Err(e) => {
            capsule.mirrored = false;
            result.mirror_note = Some(e.to_string());
            None
        }
    }
}

/// What preflight hands back.
#[derive(Debug, Clone, PartialEq)]
pub enum Preflight {
    /// Send this input. `skipped` reports a soft attempt that was skipped on the way.
    Ready {
        messages: Vec<ModelMessage>,
        tokens: u64,
        skipped: Option<CompactionResult>,
    },
    /// Run this compaction (generate, then commit), then ask for the input again.
    Compact(Box<Plan>),
    /// No input can be sent: the reason is in the result.
    Failed(CompactionResult),
}

/// Everything the barrier needs from the host.
pub struct Barrier<'a> {
    pub config: &'a Config,
    pub mapping: &'a ToolMapping,
}

/// The preflight decision before any of it is acted on.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub budget: Budget,
    /// Set when the fixed part of the input (system prompt, tool schemas, what is not in the
    /// log) alone reaches the hard limit: the preflight refuses with this reason at once.
    pub fixed_part_refusal: Option<String>,
    pub decision: Decision,
    /// The turn's one overflow recovery is spent: no input may be handed out.
    pub overflow_exhausted: bool,
}

impl Barrier<'_> {
    /// Whether soft triggers may compact: the session's `/auto-compact` setting, else the
    /// configuration's.
    fn auto(&self, s: &Session) -> bool {
        s.tally()
            .auto_compact()
            .unwrap_or(self.config.compaction.auto)
    }

    /// The budget at the leaf, from the session's kept tally: no view is built.
    pub fn measure(&self, s: &Session) -> Budget {
        let t = s.tally();
        Budget::measure(
            self.config.limits_under(s.window_setting()),
            t.breakdown(),
            t.usage_anchor(),
            s.calibration(),
            s.unseen_at(s.leaf(), t.usage_anchor()),
        )
    }

    /// What the preflight barrier would do at the leaf. Constant time while ordinary appends
    /// keep the tally; the model input is built only when it is handed out.
    pub fn check(&self, s: &Session) -> Check {
        let budget = self.measure(s);
        let facts = s.tally().facts();
        Check {
            decision: decide(&budget, &self.config.compaction, self.auto(s), facts),
            overflow_exhausted: facts.overflow_exhausted,
            fixed_part_refusal: self.fixed_part_refusal(&budget),
            budget,
        }
    }

    /// Why nothing can be sent, when the part of the input no compaction can reclaim leaves no
    /// room under the hard limit: with the window that would hold it and leave room to work.
    pub fn fixed_part_refusal(&self, budget: &Budget) -> Option<String> {
        if !budget.fixed_part_exceeds_hard_limit() {
            return None;
        }
        let fixed = budget.fixed_tokens();
        let hard_limit_needed = (fixed as f64 / crate::limits::ROOM_AFTER_COMPACTION).ceil() as u64;
        Some(reasons::fixed_part_too_large(
            fixed,
            budget.not_in_log(),
            budget.limits.hard_limit,
            self.config.smallest_window_above(hard_limit_needed),
        ))
    }

    fn budget(&self, log: &SessionLog) -> (ModelView, Budget) {
        let s = log.session();
        (ModelView::build(s, s.leaf()), self.measure(s))
    }

    fn consume(&self, log: &mut SessionLog, ids: &[String]) -> Result<(), LogError> {
        for id in ids {
            let trigger = match log.session().get(id).map(|e| &e.body) {
                Some(EntryBody::Intent(i)) => i.trigger,
                _ => continue,
            };
            append_child(
                log,
                EntryBody::Intent(IntentEntry {
                    trigger,
                    action: IntentAction::Consumed,
                    intent_id: Some(id.clone()),
                    label: None,
                }),
            )?;
        }
        Ok(())
    }

    fn plan(
        &self,
        log: &SessionLog,
        trigger: Trigger,
        requested: bool,
        instructions: Option<String>,
        title: Option<String>,
    ) -> Result<Plan, NoPlan> {
        let s = log.session();
        let req = PlanRequest {
            trigger,
            requested,
            instructions,
            title,
            config: self.config,
            mapping: self.mapping,
            operation_id: new_id("op_"),
        };
        let started = std::time::Instant::now();
        let mut plan = plan(s, s.leaf(), &req)?;
        plan.planning_ms = started.elapsed().as_millis() as u64;
        Ok(plan)
    }

    /// The model input if it is within the hard limit, else a failure: an input known to be
    /// oversized is never handed out.
    pub fn ready_input(&self, log: &SessionLog, skipped: Option<CompactionResult>) -> Preflight {
        let (view, budget) = self.budget(log);
        Self::ready_from(log, &view, &budget, skipped)
    }

    fn ready_from(
        log: &SessionLog,
        view: &ModelView,
        budget: &Budget,
        skipped: Option<CompactionResult>,
    ) -> Preflight {
        if budget.over_hard_limit() {
            let r = CompactionResult::ended(
                "",
                Trigger::HardLimit,
                Outcome::Failed,
                format!(
                    "{}: the input needs {} tokens, the hard limit is {}",
                    reasons::CONTEXT_BUDGET_EXCEEDED,
                    budget.effective_tokens,
                    budget.limits.hard_limit
                ),
                budget.effective_tokens,
                budget.limits,
            );
            return Preflight::Failed(r);
        }
        Preflight::Ready {
            messages: view.messages(log.session()),
            tokens: budget.effective_tokens,
            skipped,
        }
    }

    /// Ask before an inference. Appends only bookkeeping (consumed intents, skipped attempts).
    pub fn preflight(&self, log: &mut SessionLog) -> Result<Preflight, LogError> {
        self.restore_window_if_disproved(log)?;
        let Check {
            budget,
            decision,
            overflow_exhausted,
            fixed_part_refusal,
        } = self.check(log.session());
        if let Some(reason) = fixed_part_refusal {
            // No compaction can help: none is attempted, and nothing is written.
            let r = CompactionResult::ended(
                "",
                Trigger::HardLimit,
                Outcome::Failed,
                reason,
                budget.effective_tokens,
                budget.limits,
            );
            return Ok(Preflight::Failed(r));
        }
        if overflow_exhausted {
            let failure = log.session().tally().facts().overflow_failure.clone();
            let r = CompactionResult::ended(
                "",
                Trigger::ContextOverflow,
                Outcome::Failed,
                reasons::overflow_exhausted(failure.as_deref()),
                budget.effective_tokens,
                budget.limits,
            );
            return Ok(Preflight::Failed(r));
        }
        match decision {
            Decision::Proceed => {
                let s = log.session();
                Ok(Self::ready_from(
                    log,
                    &ModelView::build(s, s.leaf()),
                    &budget,
                    None,
                ))
            }
            Decision::ConsumeOnly { consume } => {
                self.consume(log, &consume)?;
                Ok(self.ready_input(log, None))
            }
            Decision::SkipSoft {
                trigger,
                reason,
                consume,
            } => {
                self.consume(log, &consume)?;
                let r = CompactionResult::ended(
                    &new_id("op_"),
                    trigger,
                    Outcome::Skipped,
                    reason,
                    budget.effective_tokens,
                    budget.limits,
                );
                record(log, &r)?;
                Ok(self.ready_input(log, Some(r)))
            }
            Decision::Compact { trigger, consume } => {
                self.consume(log, &consume)?;
                let s = log.session();
                if let Some(reason) = super::storm::storm_facts(s, s.leaf()).reason() {
                    return self.storm(log, trigger, reason, &budget);
                }
                self.start(log, trigger, false, None, None)
            }
        }
    }

    /// An automatic compaction the storm breaker stopped: a soft one is skipped and the input
    /// goes out as it is; at the hard limit nothing can be sent, and the result says why.
    fn storm(
        &self,
        log: &mut SessionLog,
        trigger: Trigger,
        reason: String,
        budget: &Budget,
    ) -> Result<Preflight, LogError> {
        // At the hard limit the input is over budget and is not sent: said first, as every
        // refusal of the barrier says it.
        let (outcome, reason) = if trigger.is_soft() {
            (Outcome::Skipped, reason)
        } else {
            (
                Outcome::Failed,
                format!("{}: {reason}", reasons::CONTEXT_BUDGET_EXCEEDED),
            )
        };
        let r = CompactionResult::ended(
            &new_id("op_"),
            trigger,
            outcome,
            reason,
            budget.effective_tokens,
            budget.limits,
        );
        record(log, &r)?;
        if trigger.is_soft() {
            Ok(self.ready_input(log, Some(r)))
        } else {
            Ok(Preflight::Failed(r))
        }
    }

    /// Plan a compaction with this trigger, or end it at once with the reason.
    fn start(
        &self,
        log: &mut SessionLog,
        trigger: Trigger,
        requested: bool,
        instructions: Option<String>,
        title: Option<String>,
    ) -> Result<Preflight, LogError> {
        // No compaction can fit a fixed part over the hard limit (a hand-off capsule is not
        // model input, and may still be written).
        let refused = (trigger != Trigger::Handoff)
            .then(|| self.fixed_part_refusal(&self.measure(log.session())))
            .flatten();
        let planned = match refused {
            Some(reason) => Err(NoPlan {
                outcome: Outcome::Failed,
                reason,
                tokens_before: self.measure(log.session()).effective_tokens,
            }),
            None => self.plan(log, trigger, requested, instructions, title),
        };
        match planned {
            Ok(p) => Ok(Preflight::Compact(Box::new(p))),
            Err(no) => {
                let limits = self.config.limits_under(log.session().window_setting());
                let mut reason = no.reason;
                if trigger == Trigger::User && !reason.contains(reasons::LARGER_WINDOW) {
                    // An explicit /compact that cannot help: say what holds the tokens.
                    let outside = self.measure(log.session()).not_in_log();
                    if let Some(note) = crate::budget::not_in_log_note(outside) {
                        reason = format!("{reason}. {note}");
                    }
                }
                let r = CompactionResult::ended(
                    &new_id("op_"),
                    trigger,
                    no.outcome,
                    reason,
                    no.tokens_before,
                    limits,
                );
                record(log, &r)?;
                if trigger.is_soft() {
                    Ok(self.ready_input(log, Some(r)))
                } else {
                    Ok(Preflight::Failed(r))
                }
            }
        }
    }

    /// An explicit `/compact [instructions]`: bypasses the soft ROI threshold. Mirrors into
    /// Project Memory when the configuration asks for it.
    pub fn explicit(
        &self,
        log: &mut SessionLog,
        instructions: Option<String>,
    ) -> Result<Result<Plan, CompactionResult>, LogError> {
        self.explicit_mirrored(log, instructions, self.config.mirror_explicit_compacts)
    }

    /// An explicit `/compact`, asking (or not) for a Project Memory mirror (`--mirror`).
    pub fn explicit_mirrored(
        &self,
        log: &mut SessionLog,
        instructions: Option<String>,
        mirror: bool,
    ) -> Result<Result<Plan, CompactionResult>, LogError> {
        self.requested(log, Trigger::User, instructions, mirror)
    }

    /// A compaction a client asks for now, recorded with what made it ask: `user` (a
    /// `/compact`), or the agent's own automatic compaction (`auto_threshold`, its threshold;
    /// `context_overflow`, its overflow recovery). The agent decided to compact, so no ROI
    /// minimum holds it back (as for `/compact`); the trigger decides the rest as it does for
    /// SOBA's own compactions: mirroring only for `user`, the storm history, a mandatory cut.
    pub fn requested(
        &self,
        log: &mut SessionLog,
        trigger: Trigger,
        instructions: Option<String>,
        mirror: bool,
    ) -> Result<Result<Plan, CompactionResult>, LogError> {
        Ok(self
            .planned(log, trigger, true, instructions, None)?
            .map(|mut p| {
                p.mirror_requested = mirror;
                p
            }))
    }

    /// `/capsule create "title"`: a hand-off capsule of the current state; not ROI-gated and
    /// not part of the model input.
    pub fn handoff(
        &self,
        log: &mut SessionLog,
        title: String,
    ) -> Result<Result<Plan, CompactionResult>, LogError> {
        self.planned(log, Trigger::Handoff, false, None, Some(title))
    }

    /// The provider reported a real context overflow: the session's window is lowered to what
    /// the provider's figures say (or below the refused request), then one mandatory recovery
    /// compact per turn; a second overflow in the turn fails and nothing is handed out again.
    pub fn overflow(
        &self,
        log: &mut SessionLog,
        figures: OverflowFigures,
    ) -> Result<Result<Plan, CompactionResult>, LogError> {
        // The request just refused is the input at the leaf: nothing is appended in between.
        let budget = self.measure(log.session());
        let fail = |log: &mut SessionLog, reason: String, limits| {
            let r = CompactionResult::ended(
                &new_id("op_"),
                Trigger::ContextOverflow,
                Outcome::Failed,
                reason,
                budget.effective_tokens,
                limits,
            );
            record(log, &r)?;
            Ok(Err(r))
        };
        // The input the provider accepted last: the window never goes below what it held.
        let accepted = log
            .session()
            .tally()
            .usage_anchor()
            .map(|a| a.usage.prompt_tokens());
        let learned = crate::window::learn(
            &budget.limits,
            figures,
            budget.effective_tokens,
            accepted,
            &self.config.compaction,
        );
        let limits = match learned {
            Ok(window) => {
                append_child(
                    log,
                    EntryBody::Setting(SettingEntry {
                        window: Some(window),
                        ..SettingEntry::default()
                    }),
                )?;
                self.measure(log.session()).limits
            }
            Err(no_room) => return fail(log, no_room.to_string(), budget.limits),
        };
        if log.session().tally().facts().overflow_recoveries >= 1 {
            return fail(log, reasons::OVERFLOW_RETRY_USED.to_string(), limits);
        }
        self.planned(log, Trigger::ContextOverflow, false, None, None)
    }

    /// A usage report after a lowered window showed the provider accepting a larger input:
    /// record that the configured window holds again. Returns whether it did.
    fn restore_window_if_disproved(&self, log: &mut SessionLog) -> Result<bool, LogError> {
        let s = log.session();
        let (Some(window), Some(anchor)) = (s.window_setting(), s.tally().usage_anchor()) else {
            return Ok(false);
        };
        let reported = anchor.usage.prompt_tokens();
        if !window.disproved_by(reported) {
            return Ok(false);
        }
        append_child(
            log,
            EntryBody::Setting(SettingEntry {
                window: Some(crate::window::WindowSetting::restored(reported)),
                ..SettingEntry::default()
            }),
        )?;
        Ok(true)
    }

    fn planned(
        &self,
        log: &mut SessionLog,
        trigger: Trigger,
        requested: bool,
        instructions: Option<String>,
        title: Option<String>,
    ) -> Result<Result<Plan, CompactionResult>, LogError> {
        match self.start(log, trigger, requested, instructions, title)? {
            Preflight::Compact(p) => Ok(Ok(*p)),
            Preflight::Failed(r) => Ok(Err(r)),
            Preflight::Ready { skipped, .. } => Ok(Err(
                skipped.expect("a soft start that did not plan reports why")
            )),
        }
    }

    /// The agent finished a turn: record it, and a pending intent when enabled.
    pub fn turn_complete(
        &self,
        log: &mut SessionLog,
        usage: Option<Usage>,
    ) -> Result<bool, LogError> {
        append_child(log, EntryBody::TurnComplete(TurnCompleteEntry { usage }))?;
        self.intent(log, Trigger::TurnComplete, None)
    }

    /// A milestone or plan pivot: the checkpoint entry, and a pending intent when enabled.
    pub fn checkpoint(
        &self,
        log: &mut SessionLog,
        kind: CheckpointKind,
        label: String,
    ) -> Result<(String, bool), LogError> {
        let id = append_child(
            log,
            EntryBody::Checkpoint(CheckpointEntry {
                kind,
                label: label.clone(),
                checkpoint_id: None,
            }),
        )?;
        let trigger = match kind {
            CheckpointKind::Milestone => Trigger::Milestone,
            CheckpointKind::PlanPivot => Trigger::PlanPivot,
        };
        let recorded = self.intent(log, trigger, Some(label))?;
        Ok((id, recorded))
    }

    fn intent(
        &self,
        log: &mut SessionLog,
        trigger: Trigger,
        label: Option<String>,
    ) -> Result<bool, LogError> {
        if !records_intent(trigger, &self.config.compaction, self.auto(log.session())) {
            return Ok(false);
        }
        append_child(
            log,
            EntryBody::Intent(IntentEntry {
                trigger,
                action: IntentAction::Recorded,
                intent_id: None,
                label,
            }),
        )?;
        Ok(true)
    }

    /// Run a plan to its outcome with the local builder (no model), synchronously.
    pub fn run_local(
        &self,
        log: &mut SessionLog,
        plan: &Plan,
    ) -> Result<CompactionResult, LogError> {
        let started = std::time::Instant::now();
        let generated = generate_local(plan);
        commit(
            log,
            plan,
            generated,
            false,
            started.elapsed().as_millis() as u64,
        )
    }
}
