//! Triggers, pending intents and the preflight priority (spec §4):
//! 1. hard_limit; 2. pending milestone or plan_pivot; 3. pending turn_complete;
//! 4. ordinary auto_threshold. Provider context_overflow is a separate recovery barrier.

use crate::budget::Budget;
use crate::limits::CompactionConfig;
use crate::session::trigger::Trigger;
use crate::session::turn::TurnFacts;

use super::roi;

/// What the preflight barrier must do before handing out the model input.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Send the model input as it is.
    Proceed,
    /// Compact now with this trigger; `consume` are the pending intents it serves.
    Compact {
        trigger: Trigger,
        consume: Vec<String>,
    },
    /// A soft compaction was due but its pre-generation ROI check failed: record the skipped
    /// attempt (so the turn gets no second one), then proceed.
    SkipSoft {
        trigger: Trigger,
        reason: String,
        consume: Vec<String>,
    },
    /// Auto-compact is off: pending soft intents are consumed without a compaction.
    ConsumeOnly { consume: Vec<String> },
}

/// The preflight decision. Pure.
pub fn decide(budget: &Budget, c: &CompactionConfig, auto: bool, facts: &TurnFacts) -> Decision {
    let all_pending: Vec<String> = facts.pending.iter().map(|p| p.entry_id.clone()).collect();
    if budget.over_hard_limit() {
        // Mandatory and fail-closed; `auto: false` cannot disable it.
        return Decision::Compact {
            trigger: Trigger::HardLimit,
            consume: all_pending,
        };
    }
    if !auto {
        return if all_pending.is_empty() {
            Decision::Proceed
        } else {
            Decision::ConsumeOnly {
                consume: all_pending,
            }
        };
    }
    if facts.soft_attempted {
        // At most one soft attempt per agent turn; intents wait for the next turn.
        return Decision::Proceed;
    }
    let pending = |t: &[Trigger]| {
        facts
            .pending
            .iter()
            .find(|p| t.contains(&p.trigger))
            .map(|p| p.trigger)
    };
    let trigger = pending(&[Trigger::Milestone, Trigger::PlanPivot])
        .or_else(|| pending(&[Trigger::TurnComplete]))
        .or_else(|| budget.at_soft_limit().then_some(Trigger::AutoThreshold));
    let Some(trigger) = trigger else {
        return Decision::Proceed;
    };
    let check = roi::pre_generation(budget.effective_tokens, c);
    if check.passes {
        Decision::Compact {
            trigger,
            consume: all_pending,
        }
    } else {
        Decision::SkipSoft {
            trigger,
            reason: check.reason(c, "pre-generation"),
            consume: all_pending,
        }
    }
}

/// Whether a soft trigger may record an intent under this configuration.
pub fn records_intent(trigger: Trigger, c: &CompactionConfig, auto: bool) -> bool {
    auto && match trigger {
        Trigger::TurnComplete => c.compact_on_turn_complete,
        Trigger::Milestone | Trigger::PlanPivot => c.compact_on_milestone,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Breakdown;
    use crate::limits::Limits;
    use crate::session::turn::PendingIntent;

    fn budget(effective: u64) -> Budget {
        let limits = Limits::compute(65000, 8000, &CompactionConfig::default()).unwrap();
        Budget::measure(
            limits,
            Breakdown {
                new_entries: effective,
                ..Breakdown::default()
            },
            None,
            crate::budget::Calibration::exact(crate::tokens::TokenizerKind::O200kBase),
            crate::budget::unseen_allowance::Unseen::NONE,
        )
    }

    fn intent(t: Trigger) -> PendingIntent {
        PendingIntent {
            entry_id: format!("i-{t}"),
            trigger: t,
            label: None,
        }
    }

    fn facts(pending: &[Trigger]) -> TurnFacts {
        TurnFacts {
            pending: pending.iter().map(|t| intent(*t)).collect(),
            ..TurnFacts::default()
        }
    }

    fn trigger_of(d: &Decision) -> Option<Trigger> {
        match d {
            Decision::Compact { trigger, .. } | Decision::SkipSoft { trigger, .. } => {
                Some(*trigger)
            }
            _ => None,
        }
    }

    const C: fn() -> CompactionConfig = CompactionConfig::default;

    /// Spec §4: the effective preflight priority is hard_limit; pending milestone or
    /// plan_pivot; pending turn_complete; ordinary auto_threshold.
    #[test]
    fn preflight_priority_is_hard_limit_then_milestone_then_turn_complete_then_auto_threshold() {
        let all = facts(&[Trigger::TurnComplete, Trigger::Milestone]);
        assert_eq!(
            trigger_of(&decide(&budget(50000), &C(), true, &all)),
            Some(Trigger::HardLimit)
        );
        assert_eq!(
            trigger_of(&decide(&budget(40000), &C(), true, &all)),
            Some(Trigger::Milestone)
        );
        let pivot = facts(&[Trigger::TurnComplete, Trigger::PlanPivot]);
        assert_eq!(
            trigger_of(&decide(&budget(40000), &C(), true, &pivot)),
            Some(Trigger::PlanPivot)
        );
        let tc = facts(&[Trigger::TurnComplete]);
        assert_eq!(
            trigger_of(&decide(&budget(40000), &C(), true, &tc)),
            Some(Trigger::TurnComplete)
        );
        assert_eq!(
            trigger_of(&decide(&budget(40000), &C(), true, &facts(&[]))),
            Some(Trigger::AutoThreshold)
        );
        assert_eq!(
            decide(&budget(39045), &C(), true, &facts(&[])),
            Decision::Proceed
        );
    }

    /// Spec §4: "If effective input exceeds this limit, compaction is mandatory and fail-closed.
    /// auto: false cannot disable it."
    #[test]
    fn auto_false_cannot_disable_the_hard_limit() {
        let d = decide(&budget(48809), &C(), false, &facts(&[]));
        assert_eq!(trigger_of(&d), Some(Trigger::HardLimit));
        assert_eq!(
            decide(&budget(48808), &C(), false, &facts(&[])),
            Decision::Proceed
        );
    }

    /// Spec §8: "/auto-compact off disables only soft triggers."
    #[test]
    fn auto_compact_off_disables_only_soft_triggers() {
        let d = decide(&budget(45000), &C(), false, &facts(&[Trigger::Milestone]));
        assert_eq!(
            d,
            Decision::ConsumeOnly {
                consume: vec!["i-milestone".into()]
            }
        );
        assert_eq!(
            decide(&budget(45000), &C(), false, &facts(&[])),
            Decision::Proceed
        );
    }

    /// Spec §4: "At most one soft attempt runs per agent turn."
    #[test]
    fn at_most_one_soft_attempt_runs_per_agent_turn() {
        let f = TurnFacts {
            soft_attempted: true,
            ..facts(&[Trigger::Milestone])
        };
        assert_eq!(decide(&budget(45000), &C(), true, &f), Decision::Proceed);
        // The hard limit is not a soft attempt and still applies.
        assert_eq!(
            trigger_of(&decide(&budget(50000), &C(), true, &f)),
            Some(Trigger::HardLimit)
        );
    }

    /// Spec §4: "An ordinary soft compact becomes eligible when effective context reaches the
    /// soft limit and the pre-generation ROI check passes."
    #[test]
    fn a_soft_compact_needs_the_soft_limit_and_the_pre_generation_roi() {
        // Reaches the soft limit, but keepRecentTokens leaves too little to reclaim.
        let c = CompactionConfig {
            keep_recent_tokens: 35000,
            ..CompactionConfig::default()
        };
        let d = decide(&budget(40000), &c, true, &facts(&[]));
        assert!(
            matches!(
                d,
                Decision::SkipSoft {
                    trigger: Trigger::AutoThreshold,
                    ..
                }
            ),
            "{d:?}"
        );
    }

    #[test]
    fn intents_are_recorded_only_when_enabled() {
        let c = CompactionConfig::default();
        assert!(records_intent(Trigger::TurnComplete, &c, true));
        assert!(!records_intent(Trigger::TurnComplete, &c, false));
        let off = CompactionConfig {
            compact_on_turn_complete: false,
            compact_on_milestone: false,
            ..c
        };
        assert!(!records_intent(Trigger::TurnComplete, &off, true));
        assert!(!records_intent(Trigger::Milestone, &off, true));
        assert!(!records_intent(Trigger::PlanPivot, &off, true));
    }
}
