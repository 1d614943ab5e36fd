//! A session at its leaf, read-only: its budget (behind `soba budget` and the daemon's
//! `soba/budget`) and the model input it hands out (behind `soba context`).

use schemars::JsonSchema;
use serde::Serialize;

use crate::budget::{Breakdown, Budget, Limits, MeasurementSource};
use crate::session::view::{ModelMessage, ModelView};
use crate::session::Session;

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetReport {
    pub effective_tokens: u64,
    pub hard_limit: u64,
    pub soft_limit: u64,
    pub source: MeasurementSource,
    pub context_window: u64,
    pub max_output_tokens: u64,
    pub auto_compact: bool,
    pub last_compaction: Option<LastCompaction>,
    pub breakdown: ReportBreakdown,
    pub model: String,
    pub tokenizer: &'static str,
    /// How the counted tokens were turned into the estimate: the tokenizer, the factor applied
    /// to what was counted (the provider's own usage is never scaled), and where it comes from.
    pub calibration: crate::budget::Calibration,
    /// Who writes capsules: the configured model (with its circuit breaker) or the local builder.
    pub summarizer: SummarizerStatus,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummarizerStatus {
    /// `local`, or the model and server (never the key).
    pub uses: String,
    /// The model path's circuit breaker; absent for the local builder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker: Option<crate::summarize::BreakerState>,
}

impl SummarizerStatus {
    pub fn of(summarizer: Option<&dyn crate::summarize::Summarizer>) -> Self {
        match summarizer {
            None => SummarizerStatus {
                uses: "local".into(),
                breaker: None,
            },
            Some(s) => SummarizerStatus {
                uses: s.describe(),
                breaker: s.breaker().map(|b| b.state(std::time::Instant::now())),
            },
        }
    }
}

/// The parts of the model input, and what the provider counted beyond them.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportBreakdown {
    #[serde(flatten)]
    pub parts: Breakdown,
    /// Provider-counted tokens no part of the log accounts for (see `Budget::not_in_log`).
    pub not_in_log: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastCompaction {
    pub checkpoint_id: String,
    #[schemars(with = "crate::session::entry::Trigger")]
    pub trigger: String,
    #[schemars(with = "crate::capsule::Quality")]
    pub quality: String,
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub ts: String,
}

/// The budget of a session at its leaf.
pub fn budget_report(
    session: &Session,
    limits: Limits,
    auto_default: bool,
    model: &str,
    summarizer: Option<&dyn crate::summarize::Summarizer>,
) -> BudgetReport {
    // The kept tally, not a fresh view: the daemon reports the budget after every append.
    let tally = session.tally();
    let budget = Budget::measure(
        limits,
        tally.breakdown(),
        tally.usage_anchor(),
        session.calibration(),
    );
    let last_compaction = tally.capsule().map(|c| {
        let e = session.entry(c);
        let cap = e.as_capsule().expect("capsule");
        LastCompaction {
            checkpoint_id: cap.checkpoint_id.clone(),
            trigger: cap.trigger.as_str().into(),
            quality: cap.quality.as_str().into(),
            tokens_before: cap.tokens.before,
            tokens_after: cap.tokens.after,
            ts: e.ts.clone(),
        }
    });
    BudgetReport {
        effective_tokens: budget.effective_tokens,
        hard_limit: limits.hard_limit,
        soft_limit: limits.soft_limit,
        source: budget.source,
        context_window: limits.context_window,
        max_output_tokens: limits.max_output_tokens,
        auto_compact: tally.auto_compact().unwrap_or(auto_default),
        last_compaction,
        breakdown: ReportBreakdown {
            parts: budget.breakdown,
            not_in_log: budget.not_in_log(),
        },
        model: model.to_string(),
        tokenizer: session.tokenizer().as_str(),
        calibration: budget.calibration,
        summarizer: SummarizerStatus::of(summarizer),
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextReport {
    pub messages: Vec<ModelMessage>,
    pub capsule: Option<serde_json::Value>,
    pub first_kept_entry_id: Option<String>,
    pub tokens: u64,
    pub warnings: Vec<String>,
}

pub fn context_report(session: &Session) -> ContextReport {
    let view = ModelView::build(session, session.leaf());
    let breakdown = view.breakdown(session);
    ContextReport {
        messages: view.messages(session),
        capsule: view.capsule.map(|c| {
            serde_json::to_value(session.entry(c).as_capsule()).expect("capsule serializes")
        }),
        first_kept_entry_id: view.first_kept.map(|i| session.entry(i).id.clone()),
        tokens: breakdown.total(),
        warnings: view.warnings,
    }
}

/// What the preflight barrier would do before it hands out the input `soba context` shows.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreflightOutlook {
    /// `send` (the input as shown), `compact_first` (a compaction runs before anything is
    /// sent), `skip_then_send` (a soft attempt is due but skipped by its ROI check), or
    /// `refused` (nothing may be sent).
    pub decision: &'static str,
    pub trigger: Option<crate::session::entry::Trigger>,
    /// Why, in words.
    pub reason: String,
    pub effective_tokens: u64,
    pub hard_limit: u64,
    /// For `compact_first`: the input's size after the compaction, with the local capsule.
    pub tokens_after: Option<u64>,
}

/// The preflight's decision at the leaf, without acting on it: nothing is written.
pub fn preflight_outlook(session: &Session, config: &crate::config::Config) -> PreflightOutlook {
    use crate::compaction::triggers::Decision;
    let mapping = config.tool_mapping.clone();
    let barrier = crate::compaction::run::Barrier {
        config,
        mapping: &mapping,
    };
    let check = barrier.check(session);
    let outlook = |decision, trigger, reason: String, tokens_after| PreflightOutlook {
        decision,
        trigger,
        reason,
        effective_tokens: check.budget.effective_tokens,
        hard_limit: check.budget.limits.hard_limit,
        tokens_after,
    };
    if check.overflow_exhausted {
        return outlook(
            "refused",
            Some(crate::session::entry::Trigger::ContextOverflow),
            crate::compaction::reasons::OVERFLOW_RETRY_USED.to_string(),
            None,
        );
    }
    match &check.decision {
        Decision::Proceed | Decision::ConsumeOnly { .. } => outlook(
            "send",
            None,
            "within the limits and no compaction is due".into(),
            None,
        ),
        Decision::SkipSoft {
            trigger, reason, ..
        } => outlook("skip_then_send", Some(*trigger), reason.clone(), None),
        Decision::Compact { trigger, .. } => {
            let req = crate::compaction::PlanRequest {
                trigger: *trigger,
                instructions: None,
                title: None,
                config,
                mapping: &mapping,
                operation_id: String::new(),
            };
            match crate::compaction::plan(session, session.leaf(), &req) {
                Ok(plan) => {
                    let capsule = plan.capsule(
                        String::new(),
                        plan.local_state.clone(),
                        crate::capsule::Quality::Degraded,
                        None,
                    );
                    let after = plan.continuation_tokens(&capsule);
                    if after > check.budget.limits.hard_limit && !trigger.is_soft() {
                        outlook(
                            "refused",
                            Some(*trigger),
                            format!(
                                "{}: even after a {trigger} compaction the input needs {after} tokens, the hard limit is {}",
                                crate::compaction::reasons::CONTEXT_BUDGET_EXCEEDED,
                                check.budget.limits.hard_limit
                            ),
                            Some(after),
                        )
                    } else {
                        outlook(
                            "compact_first",
                            Some(*trigger),
                            format!("a {trigger} compaction runs before this input is sent"),
                            Some(after),
                        )
                    }
                }
                Err(no) if trigger.is_soft() => {
                    outlook("skip_then_send", Some(*trigger), no.reason, None)
                }
                Err(no) => outlook("refused", Some(*trigger), no.reason, None),
            }
        }
    }
}
