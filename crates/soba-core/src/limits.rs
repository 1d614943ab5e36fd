//! A model's window and the limits SOBA keeps under it, as data: what configuration resolves
//! and the budget, compaction and the servers compute with. Imports nothing of the core.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The spec's `compaction` block, fully resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionConfig {
    pub auto: bool,
    pub compact_on_turn_complete: bool,
    pub compact_on_milestone: bool,
    pub min_tokens_for_auto_compact: u64,
    pub min_reclaimable_tokens: u64,
    pub min_savings_ratio: f64,
    pub keep_recent_tokens: u64,
    pub safety_reserve_tokens: u64,
    pub auto_compact_threshold_ratio: f64,
    pub timeout_ms: u64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            auto: true,
            compact_on_turn_complete: true,
            compact_on_milestone: true,
            min_tokens_for_auto_compact: 32000,
            min_reclaimable_tokens: 12000,
            min_savings_ratio: 0.25,
            keep_recent_tokens: 20000,
            safety_reserve_tokens: 8192,
            auto_compact_threshold_ratio: 0.8,
            timeout_ms: 15000,
        }
    }
}

/// The hard and soft limits of one model under one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    pub context_window: u64,
    pub max_output_tokens: u64,
    pub safety_reserve_tokens: u64,
    /// `contextWindow - maxOutputTokens - safetyReserveTokens`: input above it is never sent.
    pub hard_limit: u64,
    /// `min(hardLimit - 1, max(minTokensForAutoCompact, floor(hardLimit * ratio)))`.
    pub soft_limit: u64,
}

/// The share of the hard limit a compaction aims to leave the model input at, so that the next
/// ordinary step (a tool round, a reply) does not compact again: the cut moves later and the
/// largest tool results of the tail are elided until the continuation fits it. Where even that
/// cannot reach it, the hard limit is what a compaction must meet.
pub const ROOM_AFTER_COMPACTION: f64 = 0.6;

/// How many more steps of the size the agent's recent steps had (a reply and the tool results
/// answering it) the room a compaction leaves should hold before the soft limit: with two, the
/// request after a compaction and the next both go out as they are, so compactions come at most
/// once in three requests. In a small window, where a step is a large share of it,
/// [`ROOM_AFTER_COMPACTION`] alone does not leave that room.
pub const STEPS_OF_ROOM: u64 = 2;

impl Limits {
    /// The input a compaction aims to leave: [`ROOM_AFTER_COMPACTION`] of the hard limit, and
    /// never above three quarters of the soft limit (a soft limit configured low).
    pub fn room_after_compaction(&self) -> u64 {
        let of_hard = (self.hard_limit as f64 * ROOM_AFTER_COMPACTION).floor() as u64;
        of_hard.min(self.soft_limit / 4 * 3)
    }

    /// The input a compaction aims to leave when each of the agent's recent steps added up to
    /// `step` tokens: [`Limits::room_after_compaction`], lowered so that [`STEPS_OF_ROOM`] more
    /// such steps fit under the soft limit.
    pub fn room_for_steps(&self, step: u64) -> u64 {
        self.room_after_compaction().min(
            self.soft_limit
                .saturating_sub(STEPS_OF_ROOM.saturating_mul(step)),
        )
    }

    /// `None` when the window leaves no room for input (hard limit ≤ 0).
    pub fn compute(
        context_window: u64,
        max_output_tokens: u64,
        c: &CompactionConfig,
    ) -> Option<Limits> {
        let hard_limit = context_window
            .checked_sub(max_output_tokens)?
            .checked_sub(c.safety_reserve_tokens)?;
        if hard_limit == 0 {
            return None;
        }
        let by_ratio = (hard_limit as f64 * c.auto_compact_threshold_ratio).floor() as u64;
        let soft_limit = (hard_limit - 1).min(c.min_tokens_for_auto_compact.max(by_ratio));
        Some(Limits {
            context_window,
            max_output_tokens,
            safety_reserve_tokens: c.safety_reserve_tokens,
            hard_limit,
            soft_limit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sixteen_k() -> Limits {
        Limits {
            context_window: 16_384,
            max_output_tokens: 4096,
            safety_reserve_tokens: 2097,
            hard_limit: 10_191,
            soft_limit: 10_190,
        }
    }

    #[test]
    fn the_room_for_steps_holds_two_more_steps_under_the_soft_limit() {
        let l = sixteen_k();
        // 2.9k-token steps: 60% of the hard limit (6114) would hold one more step only.
        assert_eq!(l.room_for_steps(2_920), 10_190 - 2 * 2_920);
        assert!(l.room_for_steps(2_920) + 2 * 2_920 <= l.soft_limit);
        // Small steps: the room after a compaction as it is.
        assert_eq!(l.room_for_steps(300), l.room_after_compaction());
        // Steps larger than half the soft limit: no room holds two, and none is asked.
        assert_eq!(l.room_for_steps(6_000), 0);
        assert_eq!(l.room_for_steps(u64::MAX), 0);
    }
}
