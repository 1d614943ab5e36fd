//! Limits and effective-token arithmetic. Pure: no I/O, no clocks.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::limits::Limits;
use crate::session::entry::Usage;
use crate::tokens::{CalibrationSource, TokenizerKind, MAX_LEARNED_FACTOR, PROVISIONAL_MARGIN};
use unseen_allowance::Unseen;

pub mod unseen_allowance;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MeasurementSource {
    /// The provider's reported usage of the last inference after the latest capsule, plus
    /// counts of the entries appended since.
    ProviderUsage,
    /// Tokenizer counts of everything in the model input.
    Estimated,
}

impl MeasurementSource {
    pub fn as_str(self) -> &'static str {
        match self {
            MeasurementSource::ProviderUsage => "provider_usage",
            MeasurementSource::Estimated => "estimated",
        }
    }
}

/// Token counts of the parts of the model input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Breakdown {
    pub system: u64,
    pub tools: u64,
    pub capsule: u64,
    pub retained_tail: u64,
    pub new_entries: u64,
}

impl Breakdown {
    pub fn total(&self) -> u64 {
        self.system + self.tools + self.capsule + self.retained_tail + self.new_entries
    }
}

/// The budget's total split into the parts of the model input, on the budget's scale: the parts
/// always sum to `effective_tokens`. SOBA's counts ([`Breakdown`]) are what the log holds in its
/// tokenizer; the provider bills in its own, and counts what the log never recorded. So each
/// counted part is scaled the way the total was made: by the calibration factor, and where a
/// usage report anchors the budget, to the provider's count of everything before it (which
/// may be below SOBA's count: the parts then shrink with it). What the provider counted beyond
/// the log's parts, and the unseen allowance, are `not_in_log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetParts {
    pub system: u64,
    pub tools: u64,
    pub capsule: u64,
    pub retained_tail: u64,
    pub new_entries: u64,
    /// Tokens the provider counted (or, for an estimate, is expected to count) that none of
    /// the log's parts accounts for: a system prompt and tool schemas the transcript never
    /// recorded, what the agent adds without recording it (the unseen allowance). No compaction
    /// can reclaim them.
    pub not_in_log: u64,
}

impl BudgetParts {
    pub fn total(&self) -> u64 {
        self.system
            + self.tools
            + self.capsule
            + self.retained_tail
            + self.new_entries
            + self.not_in_log
    }

    /// The parts of a budget measured as [`Budget::measure`] measures it.
    fn of(
        counted: &Breakdown,
        anchor: Option<UsageAnchor>,
        calibration: &Calibration,
        unseen: &Unseen,
    ) -> BudgetParts {
        let mut parts = [
            counted.system,
            counted.tools,
            counted.capsule,
            counted.retained_tail,
            counted.new_entries,
        ];
        let beyond = match anchor.filter(|a| a.usage.context_tokens() > 0) {
            Some(a) => {
                // The usage covers everything up to the anchor; the entries after it are in
                // the new part, counted and scaled.
                let reported = a.usage.context_tokens();
                parts[4] = parts[4].saturating_sub(a.tokens_after);
                let before = calibration.apply(parts.iter().sum());
                let covered = before.min(reported);
                parts = apportion(parts, covered);
                parts[4] += calibration.apply(a.tokens_after);
                reported - covered
            }
            None => {
                let total = calibration.apply(parts.iter().sum());
                parts = apportion(parts, total);
                0
            }
        };
        let [system, tools, capsule, retained_tail, new_entries] = parts;
        BudgetParts {
            system,
            tools,
            capsule,
            retained_tail,
            new_entries,
            not_in_log: beyond + unseen.tokens,
        }
    }
}

/// `parts` scaled in proportion to sum to `target` (largest remainders round up, the earlier
/// part first on a tie), so that no token is lost or invented by rounding. Parts summing to 0
/// stay 0; the callers never ask them for more.
fn apportion<const N: usize>(parts: [u64; N], target: u64) -> [u64; N] {
    let sum: u128 = parts.iter().map(|&p| p as u128).sum();
    if sum == 0 {
        debug_assert_eq!(target, 0, "nothing to scale up to {target}");
        return [0; N];
    }
    let mut out = [0u64; N];
    let mut remainders = [(0u128, 0usize); N];
    let mut given = 0u64;
    for (i, &p) in parts.iter().enumerate() {
        let exact = p as u128 * target as u128;
        out[i] = (exact / sum) as u64;
        remainders[i] = (exact % sum, i);
        given += out[i];
    }
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in remainders.iter().take((target - given) as usize) {
        out[i] += 1;
    }
    out
}

impl Budget {
    /// Tokens the provider counted (or, for an estimate, is expected to count) that none of
    /// the log's parts accounts for (see [`BudgetParts::not_in_log`]).
    pub fn not_in_log(&self) -> u64 {
        self.parts.not_in_log
    }

    /// The part of the input no compaction can reclaim, on the budget's scale: the system
    /// prompt, the tool schemas and what is not in the log.
    pub fn fixed_tokens(&self) -> u64 {
        self.parts.system + self.parts.tools + self.parts.not_in_log
    }

    /// The fixed part leaves no room under the hard limit: every request is refused whatever
    /// a compaction does, and only a larger window helps.
    pub fn fixed_part_exceeds_hard_limit(&self) -> bool {
        self.fixed_tokens() >= self.limits.hard_limit
    }
}

/// What to tell a user about tokens outside the log, or `None` when there are none.
pub fn not_in_log_note(tokens: u64) -> Option<String> {
    (tokens > 0).then(|| {
        format!(
            "{tokens} tokens of the provider's count (or of the allowance kept for it until the \
             session's usage reports it) are not in the log (a system prompt and tool schemas the \
             session never recorded, as in a followed or imported transcript); no compaction can \
             reclaim them. Record them (a `setting` entry with `systemPrompt` and `tools`) so the \
             budget counts them, or give the model a larger window (`--context-window`)"
        )
    })
}

/// The last provider usage that is still valid for the model input: reported by an assistant
/// message after the latest capsule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageAnchor {
    pub usage: Usage,
    /// Counted tokens of the view entries after the message that carried the usage.
    pub tokens_after: u64,
}

/// How counted tokens become an estimate of what the provider will bill: SOBA counts with
/// `tokenizer`, and multiplies what it counted (never the provider's own usage) by `factor`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Calibration {
    pub tokenizer: TokenizerKind,
    /// ≥ 1.0: a count is never lowered.
    pub factor: f64,
    pub source: CalibrationSource,
}

impl Calibration {
    pub fn exact(tokenizer: TokenizerKind) -> Calibration {
        Calibration {
            tokenizer,
            factor: 1.0,
            source: CalibrationSource::Exact,
        }
    }

    /// `counted` scaled by the factor, rounded up. A factor below 1 (or not a number) is
    /// treated as 1: calibration only ever raises an estimate.
    pub fn apply(&self, counted: u64) -> u64 {
        let factor = if self.factor.is_finite() && self.factor > 1.0 {
            self.factor
        } else {
            return counted;
        };
        (counted as f64 * factor).ceil() as u64
    }
}

impl Calibration {
    /// The most counted tokens whose estimate stays within `estimate`: what fits under a
    /// limit once the factor is applied.
    pub fn counted_within(&self, estimate: u64) -> u64 {
        if !(self.factor.is_finite() && self.factor > 1.0) {
            return estimate;
        }
        let mut counted = (estimate as f64 / self.factor).floor() as u64;
        while counted > 0 && self.apply(counted) > estimate {
            counted -= 1;
        }
        counted
    }
}

/// One usage report set against SOBA's count of the same content: the provider's input grew
/// by `provider` tokens since the previous report, over entries SOBA counted as `counted`
/// (uncalibrated, with the session's tokenizer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountSample {
    pub provider: u64,
    pub counted: u64,
}

impl CountSample {
    /// How many tokens the provider bills per token SOBA counts, or `None` when the tail is too
    /// small to say: below [`MIN_SAMPLE_TOKENS`] the message framing, not the text, decides
    /// the ratio.
    pub fn ratio(&self) -> Option<f64> {
        (self.counted >= MIN_SAMPLE_TOKENS).then(|| self.provider as f64 / self.counted as f64)
    }
}

/// The newest usage reports a session learns its count factor from: enough to see each kind of
/// content an agent sends (prose, code, tool output), few enough to follow a change of kind.
pub const LEARN_FROM_REPORTS: usize = 8;

/// Tails smaller than this teach nothing: the few framing tokens a provider adds per message
/// swing the ratio of a short tail by tens of percent, and such a tail barely moves a budget.
pub const MIN_SAMPLE_TOKENS: u64 = 100;

impl Calibration {
    /// `configured`, raised to what this session's usage reports show: the highest ratio of the
    /// provider's count to SOBA's among the usable samples (so the estimate errs high), capped at
    /// [`MAX_LEARNED_FACTOR`]. A session never learns a factor lower than the configured one:
    /// reports that agree with it keep it as it is. Until a report teaches anything, a
    /// catalog factor (a tokenizer that only estimates the model's) is raised by
    /// [`PROVISIONAL_MARGIN`], so a session's first requests err high, not low; an exact
    /// tokenizer and a configured factor are taken as they are.
    pub fn learned(configured: Calibration, samples: &[CountSample]) -> Calibration {
        let highest = samples
            .iter()
            .filter_map(CountSample::ratio)
            .filter(|r| r.is_finite())
            .fold(None, |best: Option<f64>, r| {
                Some(best.map_or(r, |b| b.max(r)))
            });
        match highest.map(|r| r.min(MAX_LEARNED_FACTOR)) {
            Some(factor) if factor > configured.factor.max(1.0) => Calibration {
                tokenizer: configured.tokenizer,
                factor,
                source: CalibrationSource::Session,
            },
            None if configured.source == CalibrationSource::Catalog => Calibration {
                tokenizer: configured.tokenizer,
                factor: (configured.factor.max(1.0) * PROVISIONAL_MARGIN)
                    .min(MAX_LEARNED_FACTOR.max(configured.factor)),
                source: CalibrationSource::Provisional,
            },
            _ => configured,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    pub effective_tokens: u64,
    pub source: MeasurementSource,
    pub breakdown: Breakdown,
    pub limits: Limits,
    /// How the counted part of `effectiveTokens` was estimated: the tokenizer and the factor
    /// applied to it. With `source: provider_usage` only the tokens after the anchor are
    /// counted; with `estimated`, all of them.
    pub calibration: Calibration,
    /// What was added for content the provider counts beyond the log (included in
    /// `effectiveTokens`): the unseen-context allowance of an estimate, the unseen-growth
    /// allowance over provider usage.
    #[serde(default)]
    pub unseen: Unseen,
    /// `effectiveTokens` split into the parts of the model input, on the budget's scale.
    #[serde(default)]
    pub parts: BudgetParts,
}

impl Budget {
    /// Effective tokens: provider usage when a valid anchor exists, else the counted breakdown;
    /// plus `unseen`, the allowance for what the provider counts beyond the log
    /// (`Session::unseen_at` gives the one that fits the anchor: growth over usage, context
    /// over an estimate). Usage recorded before the latest capsule must not be passed as an
    /// anchor (stale-usage guard); the view only offers usage from entries after the capsule.
    pub fn measure(
        limits: Limits,
        breakdown: Breakdown,
        anchor: Option<UsageAnchor>,
        calibration: Calibration,
        unseen: Unseen,
    ) -> Budget {
        let (counted, source) = match anchor {
            Some(a) if a.usage.context_tokens() > 0 => (
                a.usage.context_tokens() + calibration.apply(a.tokens_after),
                MeasurementSource::ProviderUsage,
            ),
            _ => (
                calibration.apply(breakdown.total()),
                MeasurementSource::Estimated,
            ),
        };
        Budget {
            effective_tokens: counted + unseen.tokens,
            source,
            breakdown,
            limits,
            calibration,
            unseen,
            parts: BudgetParts::of(&breakdown, anchor, &calibration, &unseen),
        }
    }

    pub fn over_hard_limit(&self) -> bool {
        self.effective_tokens > self.limits.hard_limit
    }

    pub fn at_soft_limit(&self) -> bool {
        self.effective_tokens >= self.limits.soft_limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::CompactionConfig;

    fn spec_limits() -> Limits {
        Limits::compute(65000, 8000, &CompactionConfig::default()).unwrap()
    }

    /// Spec §4: "For contextWindow=65000, maxOutputTokens=8000, and safetyReserveTokens=8192,
    /// the hard limit is 48808."
    #[test]
    fn counted_within_is_the_most_a_factor_keeps_under_a_limit() {
        let c = Calibration {
            tokenizer: TokenizerKind::O200kBase,
            factor: 1.2,
            source: CalibrationSource::Provisional,
        };
        let n = c.counted_within(13_808);
        assert!(c.apply(n) <= 13_808 && c.apply(n + 1) > 13_808, "{n}");
        let exact = Calibration::exact(TokenizerKind::O200kBase);
        assert_eq!(exact.counted_within(13_808), 13_808);
    }

    #[test]
    fn for_context_window_65000_the_hard_limit_is_48808() {
        assert_eq!(spec_limits().hard_limit, 48808);
    }

    /// Spec §5: "With a 48808 hard limit and the defaults, the soft limit is 39046."
    #[test]
    fn with_a_48808_hard_limit_and_the_defaults_the_soft_limit_is_39046() {
        assert_eq!(spec_limits().soft_limit, 39046);
    }

    #[test]
    fn soft_limit_floor_applies_to_small_windows() {
        // hard = 50000 - 4000 - 8192 = 37808; 0.8 * hard = 30246 < 32000 → floor wins.
        let l = Limits::compute(50000, 4000, &CompactionConfig::default()).unwrap();
        assert_eq!(l.hard_limit, 37808);
        assert_eq!(l.soft_limit, 32000);
    }

    #[test]
    fn soft_limit_never_reaches_the_hard_limit_in_tiny_windows() {
        // hard = 20000 - 2000 - 8192 = 9808 < minTokensForAutoCompact → min(hard - 1, …) wins.
        let l = Limits::compute(20000, 2000, &CompactionConfig::default()).unwrap();
        assert_eq!(l.hard_limit, 9808);
        assert_eq!(l.soft_limit, 9807);
        let one = Limits::compute(8192 + 100 + 1, 100, &CompactionConfig::default()).unwrap();
        assert_eq!(one.hard_limit, 1);
        assert_eq!(one.soft_limit, 0);
    }

    #[test]
    fn no_limits_when_the_window_leaves_no_room() {
        assert!(Limits::compute(16000, 8000, &CompactionConfig::default()).is_none());
        assert!(Limits::compute(16192, 8000, &CompactionConfig::default()).is_none());
    }

    #[test]
    fn provider_usage_wins_over_estimates() {
        let b = Breakdown {
            system: 10,
            tools: 20,
            capsule: 0,
            retained_tail: 0,
            new_entries: 500,
        };
        let anchor = UsageAnchor {
            usage: Usage {
                input: 400,
                cache_read: 100,
                cache_write: 0,
                output: 50,
            },
            tokens_after: 30,
        };
        let exact = Calibration::exact(TokenizerKind::O200kBase);
        let m = Budget::measure(spec_limits(), b, Some(anchor), exact, Unseen::NONE);
        assert_eq!(m.source, MeasurementSource::ProviderUsage);
        assert_eq!(m.effective_tokens, 580);
        let e = Budget::measure(spec_limits(), b, None, exact, Unseen::NONE);
        assert_eq!(e.source, MeasurementSource::Estimated);
        assert_eq!(e.effective_tokens, 530);
    }

    #[test]
    fn calibration_scales_only_the_counted_tokens_and_never_lowers_them() {
        let b = Breakdown {
            new_entries: 1000,
            ..Breakdown::default()
        };
        let anchor = UsageAnchor {
            usage: Usage {
                input: 50_000,
                ..Usage::default()
            },
            tokens_after: 1000,
        };
        let claude = Calibration {
            tokenizer: TokenizerKind::O200kBase,
            factor: 1.15,
            source: CalibrationSource::Catalog,
        };
        let m = Budget::measure(spec_limits(), b, Some(anchor), claude, Unseen::NONE);
        assert_eq!(m.effective_tokens, 50_000 + 1150, "usage kept, tail scaled");
        assert_eq!(m.calibration, claude);
        let e = Budget::measure(spec_limits(), b, None, claude, Unseen::NONE);
        assert_eq!(e.effective_tokens, 1150);
        for low in [0.5, 0.0, -1.0, f64::NAN] {
            let c = Calibration {
                factor: low,
                ..claude
            };
            assert_eq!(c.apply(1000), 1000, "factor {low} must not lower a count");
        }
    }

    /// What `soba budget` once showed: a usage anchor below SOBA's own count of the same input
    /// (44.9k reported, 47.7k counted), so the new part alone exceeded the total.
    #[test]
    fn parts_sum_to_the_total_when_the_provider_counts_less_than_soba() {
        let counted = Breakdown {
            new_entries: 47_694,
            ..Breakdown::default()
        };
        let anchor = UsageAnchor {
            usage: Usage {
                input: 44_000,
                ..Usage::default()
            },
            tokens_after: 900,
        };
        let exact = Calibration::exact(TokenizerKind::O200kBase);
        let b = Budget::measure(spec_limits(), counted, Some(anchor), exact, Unseen::NONE);
        assert_eq!(b.effective_tokens, 44_900);
        assert_eq!(b.parts.total(), b.effective_tokens);
        assert_eq!(b.parts.new_entries, 44_900, "{:?}", b.parts);
        assert_eq!(b.not_in_log(), 0);
    }

    #[test]
    fn parts_are_scaled_by_the_factor_and_what_the_provider_counted_beyond_them_is_not_in_the_log()
    {
        let counted = Breakdown {
            system: 1_000,
            tools: 2_000,
            capsule: 0,
            retained_tail: 0,
            new_entries: 7_000,
        };
        let claude = Calibration {
            tokenizer: TokenizerKind::O200kBase,
            factor: 1.15,
            source: CalibrationSource::Catalog,
        };
        // An estimate: every part × 1.15, plus the allowance.
        let unseen = Unseen {
            tokens: 3_000,
            kind: unseen_allowance::UnseenKind::Context,
            source: unseen_allowance::UnseenSource::Default,
            learned_from: 0,
            agent: None,
            restored_files: 0,
        };
        let e = Budget::measure(spec_limits(), counted, None, claude, unseen);
        assert_eq!(
            e.parts,
            BudgetParts {
                system: 1_150,
                tools: 2_300,
                capsule: 0,
                retained_tail: 0,
                new_entries: 8_050,
                not_in_log: 3_000,
            }
        );
        assert_eq!(e.parts.total(), e.effective_tokens);
        // Anchored, the provider counting 20k for what SOBA counts 9k before the anchor: the
        // scaled parts, and 20k − 9k × 1.15 beyond them.
        let anchor = UsageAnchor {
            usage: Usage {
                input: 20_000,
                ..Usage::default()
            },
            tokens_after: 1_000,
        };
        let a = Budget::measure(spec_limits(), counted, Some(anchor), claude, Unseen::NONE);
        assert_eq!(a.effective_tokens, 20_000 + 1_150);
        assert_eq!(a.parts.new_entries, 6_900 + 1_150);
        assert_eq!(a.parts.not_in_log, 20_000 - 10_350);
        assert_eq!(a.parts.total(), a.effective_tokens);
    }

    #[test]
    fn apportioning_loses_and_invents_no_token() {
        assert_eq!(
            apportion([1, 1, 1], 2),
            [1, 1, 0],
            "ties go to the earlier part"
        );
        assert_eq!(apportion([0, 0], 0), [0, 0]);
        assert_eq!(apportion([5, 0, 5], 3), [2, 0, 1]);
        assert_eq!(apportion([u64::MAX, 1], u64::MAX), [u64::MAX - 1, 1]);
    }

    fn arb_usage_anchor() -> impl proptest::strategy::Strategy<Value = Option<UsageAnchor>> {
        use proptest::prelude::*;
        proptest::option::of((0u64..200_000, 0u64..50_000, 0u64..60_000).prop_map(
            |(input, cache_read, tokens_after)| UsageAnchor {
                usage: Usage {
                    input,
                    cache_read,
                    cache_write: 0,
                    output: 0,
                },
                tokens_after,
            },
        ))
    }

    proptest::proptest! {
        /// Whatever anchors the budget (provider usage above or below SOBA's count, a tail
        /// longer than the new part, none), whatever the factor and the allowance: the parts
        /// sum to the total, and the parts of the log never exceed it.
        #[test]
        fn the_parts_always_sum_to_the_total(
            counted in proptest::array::uniform5(0u64..100_000),
            anchor in arb_usage_anchor(),
            factor in proptest::prop_oneof![proptest::strategy::Just(1.0), 1.0f64..1.6, -1.0f64..1.0],
            unseen_tokens in 0u64..60_000,
        ) {
            let [system, tools, capsule, retained_tail, new_entries] = counted;
            let breakdown = Breakdown { system, tools, capsule, retained_tail, new_entries };
            let calibration = Calibration {
                tokenizer: TokenizerKind::O200kBase,
                factor,
                source: CalibrationSource::Session,
            };
            let unseen = Unseen {
                tokens: unseen_tokens,
                kind: unseen_allowance::UnseenKind::Growth,
                source: unseen_allowance::UnseenSource::Session,
                learned_from: 0,
                agent: None,
                restored_files: 0,
            };
            let b = Budget::measure(spec_limits(), breakdown, anchor, calibration, unseen);
            proptest::prop_assert_eq!(b.parts.total(), b.effective_tokens, "{:?}", b);
            proptest::prop_assert!(b.parts.not_in_log >= unseen_tokens);
            if b.source == MeasurementSource::Estimated {
                // An estimate never lowers a count: each part is at least what SOBA counted.
                for (scaled, raw) in [
                    (b.parts.system, system),
                    (b.parts.tools, tools),
                    (b.parts.capsule, capsule),
                    (b.parts.retained_tail, retained_tail),
                    (b.parts.new_entries, new_entries),
                ] {
                    proptest::prop_assert!(scaled >= raw, "{:?}", b);
                }
            }
        }
    }

    fn sample(provider: u64, counted: u64) -> CountSample {
        CountSample { provider, counted }
    }

    fn catalog() -> Calibration {
        Calibration {
            tokenizer: TokenizerKind::O200kBase,
            factor: 1.15,
            source: CalibrationSource::Catalog,
        }
    }

    #[test]
    fn a_session_learns_the_highest_ratio_of_its_reports() {
        let c = Calibration::learned(catalog(), &[sample(1200, 1000), sample(1300, 1000)]);
        assert_eq!(c.source, CalibrationSource::Session);
        assert_eq!(c.factor, 1.3);
        assert_eq!(c.tokenizer, TokenizerKind::O200kBase);
    }

    #[test]
    fn a_learned_factor_is_never_below_the_configured_one_nor_below_1() {
        for samples in [
            vec![sample(900, 1000)],
            vec![sample(1100, 1000), sample(1150, 1000)],
        ] {
            assert_eq!(Calibration::learned(catalog(), &samples), catalog());
        }
        let exact = Calibration::exact(TokenizerKind::O200kBase);
        assert_eq!(Calibration::learned(exact, &[sample(800, 1000)]), exact);
        assert_eq!(Calibration::learned(exact, &[sample(0, 1000)]), exact);
        let raised = Calibration::learned(exact, &[sample(1020, 1000)]);
        assert_eq!(
            (raised.factor, raised.source),
            (1.02, CalibrationSource::Session)
        );
    }

    #[test]
    fn until_a_report_teaches_a_catalog_factor_is_raised_by_the_provisional_margin() {
        let provisional = Calibration::learned(catalog(), &[]);
        assert_eq!(provisional.source, CalibrationSource::Provisional);
        assert!((provisional.factor - 1.15 * PROVISIONAL_MARGIN).abs() < 1e-12);
        assert_eq!(provisional.tokenizer, catalog().tokenizer);
        // An estimated tokenizer with no catalog factor of its own (1.0) is raised too.
        let estimated = Calibration {
            factor: 1.0,
            ..catalog()
        };
        assert_eq!(
            Calibration::learned(estimated, &[]).factor,
            PROVISIONAL_MARGIN
        );
        // The first report that teaches ends it, even one below the margin.
        let taught = Calibration::learned(catalog(), &[sample(1160, 1000)]);
        assert_eq!(
            (taught.factor, taught.source),
            (1.16, CalibrationSource::Session)
        );
        assert_eq!(
            Calibration::learned(catalog(), &[sample(1000, 1000)]),
            catalog()
        );
        // Exact counts and the user's own factor need no margin.
        let exact = Calibration::exact(TokenizerKind::O200kBase);
        assert_eq!(Calibration::learned(exact, &[]), exact);
        let config = Calibration {
            factor: 1.3,
            source: CalibrationSource::Config,
            ..catalog()
        };
        assert_eq!(Calibration::learned(config, &[]), config);
    }

    #[test]
    fn short_tails_teach_nothing_and_huge_ratios_are_capped() {
        let short = sample(50 * 10, MIN_SAMPLE_TOKENS - 1);
        assert_eq!(short.ratio(), None);
        assert_eq!(
            Calibration::learned(catalog(), &[short]).source,
            CalibrationSource::Provisional,
            "a short tail teaches nothing, so the factor is still provisional"
        );
        let huge = Calibration::learned(catalog(), &[sample(40_000, 1_000)]);
        assert_eq!(huge.factor, MAX_LEARNED_FACTOR);
        // A configured factor above the cap is the user's: learning never lowers it.
        let config = Calibration {
            factor: 2.5,
            source: CalibrationSource::Config,
            ..catalog()
        };
        assert_eq!(
            Calibration::learned(config, &[sample(40_000, 1_000)]),
            config
        );
    }
}
