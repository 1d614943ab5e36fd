//! What starts a compaction: the spec's seven triggers, and a hand-off.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What starts a compaction. The first seven are the spec's triggers; `handoff` is an
/// intentional `/capsule create`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    HardLimit,
    Milestone,
    PlanPivot,
    TurnComplete,
    AutoThreshold,
    User,
    ContextOverflow,
    Handoff,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::HardLimit => "hard_limit",
            Trigger::Milestone => "milestone",
            Trigger::PlanPivot => "plan_pivot",
            Trigger::TurnComplete => "turn_complete",
            Trigger::AutoThreshold => "auto_threshold",
            Trigger::User => "user",
            Trigger::ContextOverflow => "context_overflow",
            Trigger::Handoff => "handoff",
        }
    }

    /// Soft triggers are optional: ROI-gated and disabled by `/auto-compact off`.
    pub fn is_soft(self) -> bool {
        matches!(
            self,
            Trigger::Milestone
                | Trigger::PlanPivot
                | Trigger::TurnComplete
                | Trigger::AutoThreshold
        )
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
