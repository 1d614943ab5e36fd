//! Two-stage ROI validation (spec §6): an estimate before generating a summary, and an exact
//! measure of the whole continuation after.

use crate::config::CompactionConfig;

/// Outcome of a ROI check, with the figures behind it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoiCheck {
    pub reclaimable: u64,
    pub savings_ratio: f64,
    pub passes: bool,
}

impl RoiCheck {
    pub fn reason(&self, c: &CompactionConfig, stage: &str) -> String {
        format!(
            "{stage} ROI too low: reclaims {} tokens ({:.0}%), needs ≥ {} and ≥ {:.0}%",
            self.reclaimable,
            self.savings_ratio * 100.0,
            c.min_reclaimable_tokens,
            c.min_savings_ratio * 100.0
        )
    }
}

fn check(reclaimable: u64, effective: u64, c: &CompactionConfig) -> RoiCheck {
    let savings_ratio = if effective == 0 {
        0.0
    } else {
        reclaimable as f64 / effective as f64
    };
    RoiCheck {
        reclaimable,
        savings_ratio,
        passes: reclaimable >= c.min_reclaimable_tokens && savings_ratio >= c.min_savings_ratio,
    }
}

/// Before generation: `reclaimable = effectiveTokens - keepRecentTokens`,
/// `savingsRatio = reclaimable / effectiveTokens`.
pub fn pre_generation(effective_tokens: u64, c: &CompactionConfig) -> RoiCheck {
    check(
        effective_tokens.saturating_sub(c.keep_recent_tokens),
        effective_tokens,
        c,
    )
}

/// After generation: what the exact continuation (system + tools + capsule + retained tail)
/// reclaims against the context before.
pub fn post_generation(
    tokens_before: u64,
    continuation_tokens: u64,
    c: &CompactionConfig,
) -> RoiCheck {
    check(
        tokens_before.saturating_sub(continuation_tokens),
        tokens_before,
        c,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spec §6: "Generation starts only when reclaimable >= minReclaimableTokens and
    /// savingsRatio >= minSavingsRatio."
    #[test]
    fn generation_starts_only_when_reclaimable_and_savings_ratio_meet_the_minimums() {
        let c = CompactionConfig::default();
        // 40000 - 20000 = 20000 reclaimable, 50% → passes.
        assert!(pre_generation(40000, &c).passes);
        // 31000 - 20000 = 11000 < 12000 → fails on tokens.
        let r = pre_generation(31000, &c);
        assert!(!r.passes);
        assert_eq!(r.reclaimable, 11000);
        // Enough tokens but a low ratio: 12000 / 100000 = 12% < 25%.
        let c2 = CompactionConfig {
            keep_recent_tokens: 88000,
            ..CompactionConfig::default()
        };
        let r = pre_generation(100000, &c2);
        assert_eq!(r.reclaimable, 12000);
        assert!(!r.passes);
        assert!(r
            .reason(&c2, "pre-generation")
            .contains("needs ≥ 12000 and ≥ 25%"));
    }

    #[test]
    fn post_generation_measures_the_continuation() {
        let c = CompactionConfig::default();
        assert!(post_generation(40000, 22000, &c).passes);
        assert!(!post_generation(40000, 30000, &c).passes);
        assert!(
            !post_generation(40000, 45000, &c).passes,
            "a growing continuation never passes"
        );
    }

    #[test]
    fn empty_context_never_passes() {
        assert!(!pre_generation(0, &CompactionConfig::default()).passes);
    }
}
