//! Two-stage ROI validation (spec §6): an estimate before generating a summary, and an exact
//! measure of the whole continuation after.

use crate::limits::CompactionConfig;

/// Outcome of a ROI check, with the figures behind it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoiCheck {
    pub reclaimable: u64,
    pub savings_ratio: f64,
    pub passes: bool,
}

impl RoiCheck {
    pub fn reason(&self, c: &CompactionConfig, stage: &str) -> String {
        let (ratio, min) = percents_apart(self.savings_ratio, c.min_savings_ratio);
        format!(
            "{stage} ROI too low: reclaims {} tokens ({ratio}%), needs ≥ {} and ≥ {min}%",
            self.reclaimable, c.min_reclaimable_tokens,
        )
    }
}

/// Both ratios as percentages with the fewest decimals (up to 3) that keep a ratio below the
/// minimum from printing as equal to it: 24.98% against 25% reads "24.98%", not "25%".
fn percents_apart(ratio: f64, min: f64) -> (String, String) {
    let show = |v: f64, decimals: usize| format!("{:.*}", decimals, v * 100.0);
    let mut decimals = 0;
    while decimals < 3 && ratio != min && show(ratio, decimals) == show(min, decimals) {
        decimals += 1;
    }
    (show(ratio, decimals), show(min, decimals))
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
    fn a_ratio_just_below_the_minimum_is_printed_with_the_decimals_that_show_it() {
        let c = CompactionConfig::default();
        // 4130 of 16533 tokens: 24.98%, which rounds to the 25% minimum.
        let r = post_generation(16_533, 16_533 - 4130, &c);
        assert!(!r.passes);
        let reason = r.reason(&c, "post-generation");
        assert!(reason.contains("reclaims 4130 tokens (24.98%)"), "{reason}");
        assert!(reason.contains("≥ 25.00%"), "{reason}");
        // Far from the minimum, whole percents say enough.
        let far = post_generation(40_000, 34_000, &c).reason(&c, "post-generation");
        assert!(far.contains("(15%)") && far.contains("≥ 25%"), "{far}");
    }

    #[test]
    fn empty_context_never_passes() {
        assert!(!pre_generation(0, &CompactionConfig::default()).passes);
    }
}
