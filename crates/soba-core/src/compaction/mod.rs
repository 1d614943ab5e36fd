//! Compaction: triggers and pending intents, the preflight barrier, cut points, two-stage ROI,
//! and named outcomes.
//!
//! The decisions are pure functions of (session, config): [`triggers::decide`],
//! [`cut::choose_cut`], [`roi`], [`plan::plan`]. The barrier runs as plan → generate → commit;
//! only [`run`] touches the log, and `generate` holds no borrow of the session, so a host (the
//! daemon) can keep serving requests while a summary is written.
//!
//! How a host drives the barrier ([`run::Barrier`]):
//! 1. `barrier.preflight(&mut log)` → `Ready { messages, .. }` (send them), `Failed(result)`
//!    (send nothing; tell the agent why), or `Compact(plan)`.
//! 2. For `Compact(plan)`: emit `compaction_start`, produce a [`run::Generated`] from the plan with no
//!    session borrow (`generate_local(&plan)`, or a model summarizer with fallback), queueing any
//!    input that arrives meanwhile.
//! 3. `commit(&mut log, &plan, generated, aborted, generation_ms)` → the terminal
//!    [`CompactionResult`]; then apply queued input in order and call `preflight` again.
//!
//! `barrier.explicit`, `overflow` and `handoff` return `Ok(plan)` for step 2, or the result that
//! ended the operation at once. `turn_complete` and `checkpoint` record soft-trigger intents.

pub mod cut;
pub mod plan;
pub mod roi;
pub mod run;
pub mod storm;
pub mod triggers;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::session::capsule::model::Quality;
use crate::session::entry::Outcome;
use crate::session::trigger::Trigger;

/// The terminal outcome of one compaction operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionResult {
    pub operation_id: String,
    pub outcome: Outcome,
    pub reason: String,
    pub trigger: Trigger,
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub reclaimed_percent: f64,
    pub checkpoint_id: Option<String>,
    pub quality: Option<Quality>,
    pub first_kept_entry_id: Option<String>,
    /// The whole operation: planning (cut, facts, the local capsule) and generation.
    pub duration_ms: u64,
    /// Of `duration_ms`: choosing the cut, collecting the facts and building the local
    /// capsule, before anything is generated.
    #[serde(default)]
    pub planning_ms: u64,
    /// Of `duration_ms`: writing the capsule (a model's summary, or the local one) and
    /// committing it.
    #[serde(default)]
    pub generation_ms: u64,
    /// A summarization model was configured but failed, and the local capsule stands in for
    /// its summary. Who wrote the capsule is `quality`; without a model configured the local
    /// capsule is the normal case and this stays false.
    pub fallback: bool,
    pub hard_limit: u64,
    pub soft_limit: u64,
    /// The context window the limits came from: the configured one, or the one a provider's
    /// overflow taught the session.
    #[serde(default)]
    pub context_window: u64,
    /// Path of the Project Memory copy, when the capsule was mirrored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirrored_to: Option<String>,
    /// Why a requested mirror was not written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_note: Option<String>,
}

impl CompactionResult {
    /// The persistent completion line: trigger, before → after tokens, reclaimed %, checkpoint.
    /// A hand-off capsule (`/capsule create`) records state and compacts nothing: its line
    /// says it was created and that the context stays as it was.
    pub fn completion_line(&self) -> String {
        let k = crate::util::human_tokens;
        match self.outcome {
            Outcome::Completed if self.trigger == Trigger::Handoff => format!(
                "capsule created: {} ({}); the context is unchanged at {} tokens",
                self.checkpoint_id.as_deref().unwrap_or("-"),
                self.quality.map(Quality::as_str).unwrap_or("-"),
                k(self.tokens_before),
            ),
            outcome if self.trigger == Trigger::Handoff => {
                format!("capsule creation {outcome}: {}", self.reason)
            }
            Outcome::Completed => format!(
                "{} compact: {} → {} tokens (−{:.0}%), {}, {}",
                self.trigger,
                k(self.tokens_before),
                k(self.tokens_after),
                self.reclaimed_percent,
                self.checkpoint_id.as_deref().unwrap_or("-"),
                self.quality.map(Quality::as_str).unwrap_or("-"),
            ),
            outcome => format!("{} compact {outcome}: {}", self.trigger, self.reason),
        }
    }

    pub fn ended(
        operation_id: &str,
        trigger: Trigger,
        outcome: Outcome,
        reason: impl Into<String>,
        tokens_before: u64,
        limits: crate::limits::Limits,
    ) -> Self {
        CompactionResult {
            operation_id: operation_id.to_string(),
            outcome,
            reason: reason.into(),
            trigger,
            tokens_before,
            tokens_after: tokens_before,
            reclaimed_percent: 0.0,
            checkpoint_id: None,
            quality: None,
            first_kept_entry_id: None,
            duration_ms: 0,
            planning_ms: 0,
            generation_ms: 0,
            fallback: false,
            hard_limit: limits.hard_limit,
            soft_limit: limits.soft_limit,
            context_window: limits.context_window,
            mirrored_to: None,
            mirror_note: None,
        }
    }
}

/// Reasons shared by outcomes, tests and the protocol.
pub mod reasons {
    pub const NOTHING_BEFORE_RETAINED_WINDOW: &str = "nothing before the retained window";
    pub const CONTEXT_BUDGET_EXCEEDED: &str = "context budget exceeded";
    pub const CANCELLED: &str = "the turn was cancelled; no capsule appended";
    pub const STALE: &str = "the session changed during compaction; no capsule appended";
    pub const OVERFLOW_RETRY_USED: &str = "the provider reported a context overflow again after the recovery compact; the one retry for this turn is used";
    pub const WOULD_NOT_SHRINK: &str =
        "the continuation would not be smaller than the current context";

    /// Why a preflight hands out nothing after the turn's overflow recovery: a second overflow
    /// (`failure` is [`OVERFLOW_RETRY_USED`]), or a recovery that could not compact at all, which
    /// is said as it was, not as a second overflow.
    pub fn overflow_exhausted(failure: Option<&str>) -> String {
        match failure {
            None | Some(OVERFLOW_RETRY_USED) => OVERFLOW_RETRY_USED.to_string(),
            Some(why) => format!(
                "{OVERFLOW_RECOVERY_FAILED} ({why}); the request is not sent again this turn: \
                 start a new turn with less input, or give the model a larger window \
                 (`--context-window`)"
            ),
        }
    }

    /// How a refusal that names a larger window says it: the proxy's answer to an oversized
    /// request does not add a second one.
    pub const LARGER_WINDOW: &str = "a context window of about";

    /// `a context window of about 49000 tokens would hold it (…)`.
    pub fn larger_window(window: u64, what: &str) -> String {
        format!(
            "{LARGER_WINDOW} {window} tokens would hold {what} (--context-window, or a model \
             with a larger window)"
        )
    }

    /// Why nothing can be sent when the part of the input no compaction can reclaim (system
    /// prompt, tool schemas, what the provider counts beyond the log) needs `fixed` tokens, at
    /// or over the hard limit, and which window would hold it with the room a compaction
    /// leaves ([`crate::limits::ROOM_AFTER_COMPACTION`]).
    pub fn fixed_part_too_large(
        fixed: u64,
        not_in_log: u64,
        hard_limit: u64,
        window: u64,
    ) -> String {
        let what = if not_in_log > 0 {
            "the system prompt, the tool schemas and what the provider counts beyond the log"
        } else {
            "the system prompt and the tool schemas"
        };
        format!(
            "{CONTEXT_BUDGET_EXCEEDED}: {what} alone need {fixed} tokens, the hard limit is \
             {hard_limit}, and no compaction can reclaim them; {}",
            larger_window(window, "them and leave room to work")
        )
    }

    /// How [`overflow_exhausted`] begins for a recovery that could not compact.
    pub const OVERFLOW_RECOVERY_FAILED: &str =
        "the provider reported a context overflow and the recovery compact could not make room";

    /// Whether a preflight's reason says the turn's one overflow recovery is spent.
    pub fn is_overflow_exhausted(reason: &str) -> bool {
        reason == OVERFLOW_RETRY_USED || reason.starts_with(OVERFLOW_RECOVERY_FAILED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completed(trigger: Trigger, quality: Quality) -> CompactionResult {
        let limits = crate::limits::Limits::compute(
            128_000,
            16_384,
            &crate::limits::CompactionConfig::default(),
        )
        .unwrap();
        let mut r =
            CompactionResult::ended("op_1", trigger, Outcome::Completed, "", 117_600, limits);
        r.tokens_after = 21_500;
        r.reclaimed_percent = 81.7;
        r.checkpoint_id = Some("ck_1".into());
        r.quality = Some(quality);
        r
    }

    #[test]
    fn a_created_capsule_reads_as_a_creation_not_a_compaction() {
        let mut created = completed(Trigger::Handoff, Quality::Local);
        created.tokens_after = created.tokens_before;
        assert_eq!(
            created.completion_line(),
            "capsule created: ck_1 (local); the context is unchanged at 117.6k tokens"
        );
        let mut failed = created.clone();
        failed.outcome = Outcome::Failed;
        failed.reason = "the session changed".into();
        assert_eq!(
            failed.completion_line(),
            "capsule creation failed: the session changed"
        );
    }

    #[test]
    fn a_compaction_line_names_how_its_capsule_was_written() {
        assert_eq!(
            completed(Trigger::User, Quality::Local).completion_line(),
            "user compact: 117.6k → 21.5k tokens (−82%), ck_1, local"
        );
        assert!(completed(Trigger::User, Quality::Degraded)
            .completion_line()
            .ends_with(", degraded"));
    }
}
