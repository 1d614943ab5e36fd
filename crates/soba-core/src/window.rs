//! The context window a session's limits use, when a provider showed that it is smaller than
//! the configured one. Pure: no I/O, no clocks.
//!
//! A provider's context-overflow error proves the configured window wrong for this session's
//! model. The window is lowered to what the provider said (its figures scaled into SOBA's
//! count), or, when the error carries no figures, to a window whose hard limit is
//! [`UNSTATED_WINDOW_FRACTION`] of the refused request. The lowered window is recorded in the
//! session log as a `setting` entry, so it survives a reload, and it stays until a usage report
//! shows the provider accepted an input larger than what the lowering was based on.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::limits::CompactionConfig;
use crate::limits::Limits;
use crate::tokens::MAX_LEARNED_FACTOR;

/// With no figures in the provider's error, the hard limit becomes this share of the refused
/// request's size: there is no telling how far over it was, and a second overflow in the turn
/// ends it, while one in a later turn lowers the window again by as much.
pub const UNSTATED_WINDOW_FRACTION: f64 = 0.8;

/// What a provider's context-overflow error said, as far as it said it (provider tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverflowFigures {
    /// The window (or maximum input) the provider named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_window: Option<u64>,
    /// The input tokens the provider counted in the refused request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_tokens: Option<u64>,
}

/// Where a session's window setting comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WindowSource {
    /// The window the provider named in its overflow error.
    ProviderError,
    /// An overflow error without a usable window: lowered below the refused request's size.
    RefusedRequest,
    /// A usage report showed an input larger than the lowered window allows: back to the
    /// configured window.
    Usage,
}

impl WindowSource {
    pub fn as_str(self) -> &'static str {
        match self {
            WindowSource::ProviderError => "provider_error",
            WindowSource::RefusedRequest => "refused_request",
            WindowSource::Usage => "usage",
        }
    }
}

/// A change of the window a session's limits use (a `window` field of a `setting` entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WindowSetting {
    /// The window the limits use from here on, in SOBA's counted tokens; absent: the configured
    /// window again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    pub source: WindowSource,
    /// What the provider's error said.
    #[serde(flatten)]
    pub figures: OverflowFigures,
    /// SOBA's effective tokens of the refused request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted_tokens: Option<u64>,
    /// The reported input that showed the lowered window too small (`source: usage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_input: Option<u64>,
}

impl WindowSetting {
    /// Whether a successful inference that took `reported_input` tokens of input shows this
    /// lowered window was too small: larger than the window the provider named, or, without
    /// one, than the request it refused.
    pub fn disproved_by(&self, reported_input: u64) -> bool {
        if self.context_window.is_none() {
            return false;
        }
        match (self.figures.provider_window, self.counted_tokens) {
            (Some(named), _) if self.source == WindowSource::ProviderError => {
                reported_input > named
            }
            (_, Some(refused)) => reported_input > refused,
            _ => false,
        }
    }

    /// The setting that restores the configured window after `reported_input` succeeded.
    pub fn restored(reported_input: u64) -> WindowSetting {
        WindowSetting {
            context_window: None,
            source: WindowSource::Usage,
            figures: OverflowFigures::default(),
            counted_tokens: None,
            reported_input: Some(reported_input),
        }
    }
}

/// One line for a person: the window in force, where it comes from, and what raises it again.
pub fn describe(w: &WindowSetting, configured: u64) -> String {
    let Some(window) = w.context_window else {
        return format!(
            "window back to the configured {configured} tokens: the provider accepted an input of \
             {} tokens",
            w.reported_input.unwrap_or(0)
        );
    };
    let counted = w.counted_tokens.unwrap_or(0);
    let why = match (w.source, w.figures.provider_window) {
        (WindowSource::ProviderError, Some(named)) => match w.figures.provider_tokens {
            Some(theirs) if theirs as f64 > counted as f64 * MAX_LEARNED_FACTOR => format!(
                "the provider's overflow error named a window of {named} tokens and counted \
                 {theirs} where SOBA counted {counted}, more than a tokenizer's difference \
                 explains (content SOBA does not see, such as a system prompt the log does not \
                 hold), so the window is not scaled into SOBA's count and goes no lower than \
                 the named one"
            ),
            Some(theirs) => format!(
                "the provider's overflow error named a window of {named} tokens and counted \
                 {theirs} where SOBA counted {counted}"
            ),
            None => format!("the provider's overflow error named a window of {named} tokens"),
        },
        (WindowSource::RefusedRequest, Some(named)) => format!(
            "the provider refused a request of {counted} tokens; the window of {named} tokens \
             its error named is not below the one SOBA already kept under, so SOBA's count fell \
             short and the hard limit goes below the refused request"
        ),
        _ => format!(
            "the provider refused a request of {} tokens without naming its window",
            w.counted_tokens.unwrap_or(0)
        ),
    };
    format!(
        "window lowered from the configured {configured} to {window} tokens for this session: \
         {why}; a successful larger input raises it again"
    )
}

/// Why no window could be learned from an overflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoRoom {
    pub window: u64,
    pub max_output_tokens: u64,
    pub safety_reserve_tokens: u64,
}

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the provider's window of {} tokens leaves no room for input after maxOutputTokens {} \
             and safetyReserveTokens {}; set model.contextWindow to the provider's window and \
             lower model.maxOutputTokens or compaction.safetyReserveTokens to fit it",
            self.window, self.max_output_tokens, self.safety_reserve_tokens
        )
    }
}

/// The window to use after the provider refused a request SOBA counted as `counted` tokens,
/// with `current` the limits that request was sent under and `accepted` the largest input the
/// provider accepted in this session (its last usage report). Always below `current`'s window:
/// an overflow means the limits were too high, whatever the figures say.
///
/// The provider's figures are in its own tokens. When it counted more than SOBA did, its window
/// is scaled down by the same ratio, so that SOBA's counts stay under it; a provider that counted
/// less leaves the window as named (the limits never rise on an overflow).
///
/// Figures that contradict SOBA's count (the provider counted more than any tokenizer difference
/// explains: content SOBA never saw, such as a system prompt the log does not hold) say nothing
/// about SOBA's scale, so they are not scaled into it: the window goes no lower than the one
/// the provider named. And no window goes so low that an input the provider just accepted
/// would not fit under its hard limit.
pub fn learn(
    current: &Limits,
    figures: OverflowFigures,
    counted: u64,
    accepted: Option<u64>,
    c: &CompactionConfig,
) -> Result<WindowSetting, NoRoom> {
    let contradicts = figures
        .provider_tokens
        .is_some_and(|theirs| theirs as f64 > counted as f64 * MAX_LEARNED_FACTOR);
    let scale = match figures.provider_tokens {
        Some(theirs) if theirs > counted && counted > 0 && !contradicts => {
            counted as f64 / theirs as f64
        }
        _ => 1.0,
    };
    let named = figures
        .provider_window
        .map(|w| (w as f64 * scale).floor() as u64);
    // What the evidence supports at least: the input the provider accepted, with the output and
    // the reserve on top.
    let floor = accepted
        .map(|input| input + current.max_output_tokens + c.safety_reserve_tokens)
        .unwrap_or(0);
    let below_current = current.context_window.saturating_sub(1);
    let setting = |context_window: u64, source| WindowSetting {
        context_window: Some(context_window.max(floor).min(below_current)),
        source,
        figures,
        counted_tokens: Some(counted),
        reported_input: None,
    };
    match named {
        Some(window) if window < current.context_window => {
            let fits = Limits::compute(window.max(floor), current.max_output_tokens, c).is_some();
            if !fits {
                return Err(NoRoom {
                    window: figures.provider_window.unwrap_or(window),
                    max_output_tokens: current.max_output_tokens,
                    safety_reserve_tokens: c.safety_reserve_tokens,
                });
            }
            Ok(setting(window, WindowSource::ProviderError))
        }
        // A named window SOBA already kept under, with figures that contradict SOBA's count:
        // lowering SOBA's limits below it would not shrink what SOBA cannot see.
        Some(window) if contradicts => Ok(setting(window, WindowSource::ProviderError)),
        // No window named, or one SOBA already kept under: SOBA's count of the input was what
        // fell short. The hard limit goes below the refused request.
        _ => {
            let input = (counted.min(current.hard_limit) as f64 * UNSTATED_WINDOW_FRACTION)
                .floor()
                .max(1.0) as u64;
            let window = input + current.max_output_tokens + c.safety_reserve_tokens;
            Ok(setting(window, WindowSource::RefusedRequest))
        }
    }
}

/// The limits under a window setting: the configured ones when there is none, when it restores
/// the configured window, or when a configuration changed since leaves the learned window no
/// room for input (the next overflow learns again).
pub fn limits_under(
    configured: Limits,
    setting: Option<&WindowSetting>,
    c: &CompactionConfig,
) -> Limits {
    setting
        .and_then(|s| s.context_window)
        .filter(|&w| w < configured.context_window)
        .and_then(|w| Limits::compute(w, configured.max_output_tokens, c))
        .unwrap_or(configured)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> CompactionConfig {
        CompactionConfig::default()
    }

    fn limits(window: u64) -> Limits {
        Limits::compute(window, 2000, &config()).unwrap()
    }

    #[test]
    fn the_window_the_provider_names_becomes_the_sessions_window() {
        let figures = OverflowFigures {
            provider_window: Some(24_000),
            provider_tokens: Some(20_000),
        };
        let s = learn(&limits(64_000), figures, 25_000, None, &config()).unwrap();
        assert_eq!(
            s.context_window,
            Some(24_000),
            "SOBA counted more: no scaling"
        );
        assert_eq!(s.source, WindowSource::ProviderError);
        assert_eq!(s.counted_tokens, Some(25_000));
        assert_eq!(
            limits_under(limits(64_000), Some(&s), &config()),
            limits(24_000)
        );
    }

    #[test]
    fn a_provider_that_counts_more_than_soba_scales_its_window_into_sobas_count() {
        let figures = OverflowFigures {
            provider_window: Some(24_000),
            provider_tokens: Some(30_000),
        };
        let s = learn(&limits(64_000), figures, 20_000, None, &config()).unwrap();
        assert_eq!(s.context_window, Some(16_000));
    }

    #[test]
    fn figures_far_above_sobas_count_are_not_scaled_into_it() {
        // The provider counted 35 times what SOBA sent: not a tokenizer's difference. Its named
        // window is not below the current one, so nothing SOBA counts is lowered below it.
        let figures = OverflowFigures {
            provider_window: Some(200_000),
            provider_tokens: Some(210_000),
        };
        let s = learn(&limits(20_000), figures, 6000, None, &config()).unwrap();
        assert_eq!(s.source, WindowSource::ProviderError);
        assert_eq!(
            s.context_window,
            Some(19_999),
            "just below the current window"
        );
        assert_eq!(s.figures, figures, "what the provider said stays on record");
    }

    /// Issue 38: `soba/overflow` with providerWindow 30000 and providerTokens 31000 where SOBA
    /// counted 98 had set the window to 10318 (hard limit 78).
    #[test]
    fn a_report_that_contradicts_sobas_count_never_lowers_the_window_below_the_named_one() {
        let current = Limits::compute(128_000, 16_384, &config()).unwrap();
        let figures = OverflowFigures {
            provider_window: Some(30_000),
            provider_tokens: Some(31_000),
        };
        let s = learn(&current, figures, 98, None, &config()).unwrap();
        assert_eq!(s.source, WindowSource::ProviderError);
        assert_eq!(
            s.context_window,
            Some(30_000),
            "the window the provider named"
        );
        let l = limits_under(current, Some(&s), &config());
        assert_eq!(l.hard_limit, 30_000 - 16_384 - 8192);
        let note = describe(&s, 128_000);
        assert!(note.contains("named a window of 30000 tokens"), "{note}");
        assert!(
            note.contains("counted 31000 where SOBA counted 98"),
            "{note}"
        );
        assert!(note.contains("not scaled into SOBA's count"), "{note}");
        assert!(!note.contains("without naming"), "{note}");
    }

    #[test]
    fn the_window_never_drops_below_an_input_the_provider_just_accepted() {
        // No figures: 80% of the refused 30000 would be a hard limit of 24000, but the
        // provider accepted 27000 a request ago.
        let s = learn(
            &limits(64_000),
            OverflowFigures::default(),
            30_000,
            Some(27_000),
            &config(),
        )
        .unwrap();
        let l = limits_under(limits(64_000), Some(&s), &config());
        assert_eq!(l.hard_limit, 27_000);
    }

    #[test]
    fn without_figures_the_hard_limit_goes_below_the_refused_request() {
        let s = learn(
            &limits(64_000),
            OverflowFigures::default(),
            30_000,
            None,
            &config(),
        )
        .unwrap();
        assert_eq!(s.source, WindowSource::RefusedRequest);
        let l = limits_under(limits(64_000), Some(&s), &config());
        assert_eq!(l.hard_limit, 24_000);
        assert_eq!(l.context_window, 24_000 + 2000 + 8192);
    }

    #[test]
    fn a_named_window_at_or_above_the_current_one_still_lowers_it() {
        // The provider named the configured window: SOBA's count, not the window, was wrong.
        let figures = OverflowFigures {
            provider_window: Some(64_000),
            provider_tokens: None,
        };
        let s = learn(&limits(64_000), figures, 50_000, None, &config()).unwrap();
        assert_eq!(s.source, WindowSource::RefusedRequest);
        let l = limits_under(limits(64_000), Some(&s), &config());
        assert_eq!(l.hard_limit, 40_000);
        assert!(l.context_window < 64_000);
    }

    #[test]
    fn a_window_with_no_room_for_input_is_refused_with_what_to_change() {
        let figures = OverflowFigures {
            provider_window: Some(8192),
            provider_tokens: Some(9000),
        };
        let e = learn(&limits(64_000), figures, 9000, None, &config()).unwrap_err();
        assert_eq!(e.window, 8192);
        let text = e.to_string();
        assert!(text.contains("model.maxOutputTokens"), "{text}");
        assert!(text.contains("compaction.safetyReserveTokens"), "{text}");
    }

    #[test]
    fn a_larger_input_that_succeeded_disproves_the_lowered_window() {
        let named = learn(
            &limits(64_000),
            OverflowFigures {
                provider_window: Some(24_000),
                provider_tokens: Some(26_000),
            },
            25_000,
            None,
            &config(),
        )
        .unwrap();
        assert!(
            !named.disproved_by(24_000),
            "at the named window: still true"
        );
        assert!(named.disproved_by(24_001));
        let unstated = learn(
            &limits(64_000),
            OverflowFigures::default(),
            30_000,
            None,
            &config(),
        )
        .unwrap();
        assert!(!unstated.disproved_by(29_000));
        assert!(unstated.disproved_by(30_001));
        let restored = WindowSetting::restored(30_001);
        assert_eq!(restored.context_window, None);
        assert!(
            !restored.disproved_by(1_000_000),
            "nothing lowered to disprove"
        );
        assert_eq!(
            limits_under(limits(64_000), Some(&restored), &config()),
            limits(64_000)
        );
    }

    #[test]
    fn a_learned_window_a_new_configuration_leaves_no_room_for_falls_back_to_the_configured_one() {
        let s = WindowSetting {
            context_window: Some(9000),
            source: WindowSource::ProviderError,
            figures: OverflowFigures::default(),
            counted_tokens: None,
            reported_input: None,
        };
        assert_eq!(
            limits_under(limits(64_000), Some(&s), &config()),
            limits(64_000)
        );
    }

    #[test]
    fn the_setting_round_trips_through_the_log_format() {
        let s = learn(
            &limits(64_000),
            OverflowFigures {
                provider_window: Some(24_000),
                provider_tokens: Some(26_000),
            },
            25_000,
            None,
            &config(),
        )
        .unwrap();
        let v = serde_json::to_value(s).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"contextWindow": 23076, "source": "provider_error",
                               "providerWindow": 24000, "providerTokens": 26000,
                               "countedTokens": 25000})
        );
        assert_eq!(serde_json::from_value::<WindowSetting>(v).unwrap(), s);
    }
}
