//! The timeline of a session run (`soba demo`, `soba replay`) and its renderings: the terminal
//! lines and a self-contained HTML report.
//!
//! A [`Timeline`] records, per preflight, the effective tokens of the input that was sent, and
//! every compaction outcome with the preflight it preceded. Rendering is a pure function of it.

pub mod html;
pub mod text;

use schemars::JsonSchema;
use serde::Serialize;

use soba_core::budget::MeasurementSource;
use soba_core::compaction::CompactionResult;
use soba_core::limits::Limits;
use soba_core::util::human_tokens;

/// One preflight that handed out model input.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// 0-based position among the run's preflights: the chart's x axis.
    pub index: usize,
    /// The user turn (1-based) the preflight belongs to; 0 before the first prompt.
    pub turn: usize,
    /// Effective tokens of the input that was handed out (always ≤ the hard limit).
    pub effective_tokens: u64,
    pub source: MeasurementSource,
    pub messages: usize,
    /// The context size the source agent itself reported for this inference (replay only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_agent_tokens: Option<u64>,
}

/// A compaction outcome and where in the run it happened.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimelineCompaction {
    /// The step this compaction preceded (equal to the number of steps recorded before it).
    pub step: usize,
    pub turn: usize,
    #[serde(flatten)]
    pub result: CompactionResult,
    /// What the capsule of a completed compaction carries forward.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<Kept>,
}

/// The facts a SOBA capsule keeps, counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Kept {
    pub capsule_tokens: u64,
    pub read_files: usize,
    pub modified_files: usize,
    pub verifications: usize,
}

/// A compaction the source agent made in the imported transcript.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForeignMark {
    pub step: usize,
    pub turn: usize,
    pub agent: String,
    pub trigger: Option<String>,
    /// The context size the source agent compacted at, when it said.
    pub tokens_before: Option<u64>,
    /// Tokens of the source agent's summary.
    pub summary_tokens: Option<u64>,
    /// Items the source agent kept verbatim, when it said.
    pub kept_items: Option<u64>,
    pub first_kept_entry_id: Option<String>,
    /// SOBA's effective tokens at the same point of the session.
    pub soba_tokens: u64,
    /// SOBA's compaction outcomes recorded before this point (a prefix of `compactions`).
    pub compactions_before: usize,
}

/// Everything `soba demo` and `soba replay` print and chart.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Timeline {
    pub title: String,
    pub model: String,
    pub tokenizer: String,
    pub limits: Limits,
    pub keep_recent_tokens: u64,
    /// Who wrote the capsules: the local builder or a model.
    pub capsule_writer: String,
    pub steps: Vec<Step>,
    pub compactions: Vec<TimelineCompaction>,
    pub foreign_compactions: Vec<ForeignMark>,
    /// The latest capsule on the final branch, as the model reads it.
    pub latest_capsule: Option<String>,
    /// The transcript's format (the agent it came from), for a replay; `None` for the demo.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_agent: Option<String>,
    /// Image blocks in the transcript: SOBA counts each at a flat estimate, where the source
    /// agent's provider counted its real size.
    pub images: usize,
}

impl Timeline {
    pub fn new(title: impl Into<String>, model: &str, tokenizer: &str, limits: Limits) -> Self {
        Timeline {
            title: title.into(),
            model: model.to_string(),
            tokenizer: tokenizer.to_string(),
            limits,
            keep_recent_tokens: 0,
            capsule_writer: String::new(),
            steps: Vec::new(),
            compactions: Vec::new(),
            foreign_compactions: Vec::new(),
            latest_capsule: None,
            source_agent: None,
            images: 0,
        }
    }

    /// The largest token figure on the timeline, for scaling a chart.
    pub fn peak_tokens(&self) -> u64 {
        let steps = self
            .steps
            .iter()
            .map(|s| s.effective_tokens.max(s.source_agent_tokens.unwrap_or(0)));
        let compactions = self
            .compactions
            .iter()
            .map(|c| c.result.tokens_before.max(c.result.tokens_after));
        let foreign = self
            .foreign_compactions
            .iter()
            .filter_map(|f| f.tokens_before);
        steps
            .chain(compactions)
            .chain(foreign)
            .max()
            .unwrap_or(0)
            .max(self.limits.hard_limit)
    }
}

impl Timeline {
    /// SOBA's completed compactions before the source agent's compaction `f`.
    pub fn completed_before<'a>(
        &'a self,
        f: &ForeignMark,
    ) -> impl Iterator<Item = &'a TimelineCompaction> {
        self.compactions
            .iter()
            .take(f.compactions_before)
            .filter(|c| c.result.outcome == soba_core::session::entry::Outcome::Completed)
    }
}

impl Timeline {
    /// The context the source agent reported at its first inference after its compaction `f`:
    /// what its compaction kept, as its provider measured it.
    pub fn source_context_after(&self, f: &ForeignMark) -> Option<u64> {
        self.steps
            .get(f.step..)?
            .iter()
            .find_map(|s| s.source_agent_tokens)
    }

    /// What the source agent's compaction `f` kept, in words: its summary, what it kept
    /// verbatim, and the context it reported next. The terminal and the HTML page both print it.
    pub fn source_kept(&self, f: &ForeignMark) -> String {
        let mut kept = Vec::new();
        if let Some(t) = f.summary_tokens {
            kept.push(format!("a {}-token summary", human_tokens(t)));
        }
        if let Some(k) = f.kept_items {
            kept.push(format!("{k} items verbatim"));
        }
        if let Some(id) = &f.first_kept_entry_id {
            kept.push(format!("entries from {id}"));
        }
        let mut text = if kept.is_empty() {
            "nothing it reported".to_string()
        } else {
            kept.join(", ")
        };
        if let Some(next) = self.source_context_after(f) {
            text.push_str(&format!(
                "; its next input was {} tokens",
                human_tokens(next)
            ));
        }
        text
    }
}

/// How SOBA's count of the input compares with the source agent's reported context, over the
/// inferences where the transcript reports one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EstimateGap {
    /// The first reporting inference: SOBA's effective tokens and the source agent's.
    pub first_soba: u64,
    pub first_reported: u64,
    /// How much faster the source agent's count grew than SOBA's while neither side had
    /// compacted (the tokenizers' ratio, roughly); `None` when the conversation did not grow
    /// over at least two reporting inferences before the first compaction.
    pub growth_ratio: Option<f64>,
}

impl EstimateGap {
    /// Tokens in the source agent's input that the transcript does not hold (its system prompt
    /// and tool definitions): the gap when the conversation was smallest.
    pub fn hidden_tokens(&self) -> i64 {
        self.first_reported as i64 - self.first_soba as i64
    }
}

/// The run summed up: what SOBA's compactions reclaimed, its inputs against the source agent's
/// reported ones, and where the two counts differ.
#[derive(Debug, Clone, PartialEq)]
pub struct BottomLine {
    pub completed: usize,
    pub reclaimed_tokens: u64,
    pub peak_soba: u64,
    pub peak_reported: Option<u64>,
    /// Inferences with a reported context, SOBA's inputs there (each plus the hidden tokens),
    /// and the source agent's reported total there.
    pub compared: usize,
    pub soba_total: u64,
    pub reported_total: u64,
    pub gap: Option<EstimateGap>,
}

impl Timeline {
    /// The run summed up; see [`BottomLine`].
    pub fn bottom_line(&self) -> BottomLine {
        use soba_core::session::entry::Outcome;
        let done = self
            .compactions
            .iter()
            .filter(|c| c.result.outcome == Outcome::Completed);
        let reclaimed_tokens = done
            .clone()
            .map(|c| c.result.tokens_before.saturating_sub(c.result.tokens_after))
            .sum();
        let reported: Vec<(&Step, u64)> = self
            .steps
            .iter()
            .filter_map(|s| s.source_agent_tokens.map(|r| (s, r)))
            .collect();
        // Before either side compacted, both counted the same conversation.
        let first_compaction = done
            .map(|c| c.step)
            .chain(self.foreign_compactions.iter().map(|f| f.step))
            .min()
            .unwrap_or(usize::MAX);
        let gap = reported.first().map(|&(first, first_reported)| {
            let before: Vec<&(&Step, u64)> = reported
                .iter()
                .filter(|(s, _)| s.index < first_compaction)
                .collect();
            let growth_ratio = match (before.first(), before.last()) {
                (Some((a, ra)), Some((b, rb))) if b.effective_tokens > a.effective_tokens => Some(
                    (*rb as f64 - *ra as f64) / (b.effective_tokens - a.effective_tokens) as f64,
                ),
                _ => None,
            };
            EstimateGap {
                first_soba: first.effective_tokens,
                first_reported,
                growth_ratio,
            }
        });
        let hidden = gap.map_or(0, |g| g.hidden_tokens().max(0) as u64);
        BottomLine {
            completed: self
                .compactions
                .iter()
                .filter(|c| c.result.outcome == Outcome::Completed)
                .count(),
            reclaimed_tokens,
            peak_soba: self
                .steps
                .iter()
                .map(|s| s.effective_tokens)
                .max()
                .unwrap_or(0),
            peak_reported: reported.iter().map(|&(_, r)| r).max(),
            compared: reported.len(),
            soba_total: reported
                .iter()
                .map(|(s, _)| s.effective_tokens + hidden)
                .sum(),
            reported_total: reported.iter().map(|&(_, r)| r).sum(),
            gap,
        }
    }

    /// The bottom line in sentences, the same on the terminal and in the HTML page.
    pub fn bottom_line_sentences(&self) -> Vec<String> {
        let b = self.bottom_line();
        let mut out = vec![match b.completed {
            0 => format!(
                "SOBA: no compaction; its largest input was {} tokens (hard limit {}).",
                human_tokens(b.peak_soba),
                human_tokens(self.limits.hard_limit)
            ),
            n => format!(
                "SOBA: {n} compaction{} reclaimed {} tokens in all; its largest input was {} tokens (hard limit {}).",
                if n == 1 { "" } else { "s" },
                human_tokens(b.reclaimed_tokens),
                human_tokens(b.peak_soba),
                human_tokens(self.limits.hard_limit)
            ),
        }];
        let Some(agent) = &self.source_agent else {
            return out;
        };
        let Some(gap) = b.gap else {
            out.push(format!(
                "The transcript reports no context sizes, so SOBA's count cannot be set beside what {agent} measured."
            ));
            return out;
        };
        let hidden = gap.hidden_tokens();
        let saved = b.reported_total as i64 - b.soba_total as i64;
        let share = |n: i64| 100.0 * n.unsigned_abs() as f64 / b.reported_total.max(1) as f64;
        out.push(format!(
            "Over the {} inferences {agent} reported a size for, its inputs totalled {} tokens and SOBA's would have totalled {}{}: {} {} ({:.0}%); its largest input was {} tokens, SOBA's {}.",
            b.compared,
            human_tokens(b.reported_total),
            human_tokens(b.soba_total),
            if hidden > 0 {
                format!(
                    ", each with the {} tokens the transcript does not hold",
                    human_tokens(hidden as u64)
                )
            } else {
                String::new()
            },
            human_tokens(saved.unsigned_abs()),
            if saved >= 0 { "fewer" } else { "more" },
            share(saved),
            human_tokens(b.peak_reported.unwrap_or(0)),
            human_tokens(b.peak_soba)
        ));
        out.push(if hidden >= 0 {
            format!(
                "Where the counts differ: at the first inference {agent} reported {} tokens and SOBA counted {}; the {} tokens between are what the transcript does not hold (the agent's system prompt and tool definitions).",
                human_tokens(gap.first_reported),
                human_tokens(gap.first_soba),
                human_tokens(hidden as u64)
            )
        } else {
            format!(
                "Where the counts differ: at the first inference SOBA counted {} tokens, {} more than the {} {agent} reported (the provider's prompt cache or a part of the input it does not report).",
                human_tokens(gap.first_soba),
                human_tokens(hidden.unsigned_abs()),
                human_tokens(gap.first_reported)
            )
        });
        let images = match self.images {
            0 => String::new(),
            n => format!(
                "; SOBA counts the {n} image{} at a flat {} tokens each, the provider their real size",
                if n == 1 { "" } else { "s" },
                soba_core::tokens::IMAGE_TOKENS
            ),
        };
        let span = if b.completed == 0 && self.foreign_compactions.is_empty() {
            "With no compaction on either side"
        } else {
            "Before the first compaction"
        };
        match gap.growth_ratio {
            Some(ratio) if (ratio - 1.0).abs() < 0.05 => out.push(format!(
                "{span}, {agent}'s count grew about as fast as SOBA's ({ratio:.2}×, SOBA counting with {}){images}.",
                self.tokenizer
            )),
            Some(ratio) => out.push(format!(
                "{span}, {agent}'s count grew {ratio:.2}× as fast as SOBA's: the provider's tokenizer differs from {}, the one SOBA counts with{images}.",
                self.tokenizer
            )),
            None if self.images > 0 => out.push(format!(
                "SOBA counts the transcript's {} image{} at a flat {} tokens each; the provider counted their real size.",
                self.images,
                if self.images == 1 { "" } else { "s" },
                soba_core::tokens::IMAGE_TOKENS
            )),
            None => {}
        }
        out
    }
}

/// One thing that happened, in order: what a live printer receives.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    Step(&'a Step),
    Compaction(&'a TimelineCompaction),
    Foreign(&'a ForeignMark),
}

#[cfg(test)]
mod tests {
    use super::*;
    use soba_core::session::entry::Outcome;
    use soba_core::session::trigger::Trigger;

    fn limits() -> Limits {
        Limits {
            context_window: 24000,
            max_output_tokens: 2000,
            safety_reserve_tokens: 2000,
            hard_limit: 20000,
            soft_limit: 14000,
        }
    }

    fn step(index: usize, soba: u64, reported: Option<u64>) -> Step {
        Step {
            index,
            turn: 1 + index / 2,
            effective_tokens: soba,
            source: MeasurementSource::Estimated,
            messages: 2,
            source_agent_tokens: reported,
        }
    }

    fn completed(step: usize, before: u64, after: u64) -> TimelineCompaction {
        let mut result = CompactionResult::ended(
            "op",
            Trigger::AutoThreshold,
            Outcome::Completed,
            "",
            before,
            limits(),
        );
        result.tokens_after = after;
        TimelineCompaction {
            step,
            turn: 1 + step / 2,
            result,
            kept: None,
        }
    }

    /// Five inferences: the source agent reports 3000 more at the first (its system prompt)
    /// and grows 1.2× as fast; SOBA compacts before the fourth.
    fn replayed() -> Timeline {
        let mut t = Timeline::new("t", "m", "o200k_base", limits());
        t.source_agent = Some("pi".into());
        t.steps = vec![
            step(0, 1000, Some(4000)),
            step(1, 6000, Some(10000)),
            step(2, 11000, Some(16000)),
            step(3, 5000, Some(22000)),
            step(4, 7000, None),
        ];
        t.compactions = vec![
            completed(3, 16000, 5000),
            TimelineCompaction {
                result: CompactionResult::ended(
                    "op",
                    Trigger::TurnComplete,
                    Outcome::Skipped,
                    "",
                    7000,
                    limits(),
                ),
                ..completed(4, 0, 0)
            },
        ];
        t
    }

    #[test]
    fn the_bottom_line_finds_the_hidden_prompt_and_the_tokenizer_ratio_before_any_compaction() {
        let t = replayed();
        let b = t.bottom_line();
        assert_eq!((b.completed, b.reclaimed_tokens), (1, 11000));
        assert_eq!((b.peak_soba, b.peak_reported), (11000, Some(22000)));
        let gap = b.gap.unwrap();
        assert_eq!(gap.hidden_tokens(), 3000);
        // Steps 0..3 are before the compaction: (16000 − 4000) / (11000 − 1000).
        assert_eq!(gap.growth_ratio, Some(1.2));
        // SOBA's inputs where the source reported, each with the 3000 hidden tokens.
        assert_eq!(b.compared, 4);
        assert_eq!(b.soba_total, 1000 + 6000 + 11000 + 5000 + 4 * 3000);
        assert_eq!(b.reported_total, 52000);

        let s = t.bottom_line_sentences();
        assert_eq!(
            s[0],
            "SOBA: 1 compaction reclaimed 11.0k tokens in all; its largest input was 11.0k tokens (hard limit 20.0k)."
        );
        assert_eq!(
            s[1],
            "Over the 4 inferences pi reported a size for, its inputs totalled 52.0k tokens and SOBA's would have totalled 35.0k, each with the 3.0k tokens the transcript does not hold: 17.0k fewer (33%); its largest input was 22.0k tokens, SOBA's 11.0k."
        );
        assert!(s[2].contains("at the first inference pi reported 4.0k tokens and SOBA counted 1.0k; the 3.0k tokens between"), "{}", s[2]);
        assert_eq!(
            s[3],
            "Before the first compaction, pi's count grew 1.20× as fast as SOBA's: the provider's tokenizer differs from o200k_base, the one SOBA counts with."
        );
    }

    #[test]
    fn the_bottom_line_names_images_and_says_when_nothing_was_reported() {
        let mut t = replayed();
        t.images = 2;
        let s = t.bottom_line_sentences();
        assert!(
            s[3].ends_with("; SOBA counts the 2 images at a flat 1600 tokens each, the provider their real size."),
            "{}",
            s[3]
        );
        // A run where neither side compacted.
        t.compactions.clear();
        let s = t.bottom_line_sentences();
        assert!(
            s[0].starts_with("SOBA: no compaction; its largest input was 11.0k tokens"),
            "{}",
            s[0]
        );
        assert!(
            s[3].starts_with("With no compaction on either side, pi's count grew"),
            "{}",
            s[3]
        );
        // A source agent that starts below SOBA's count, with no growth to compare.
        t.steps = vec![step(0, 5000, Some(4000))];
        let s = t.bottom_line_sentences();
        assert!(
            s[2].contains("SOBA counted 5.0k tokens, 1.0k more than the 4.0k pi reported"),
            "{}",
            s[2]
        );
        assert!(
            s[3].starts_with("SOBA counts the transcript's 2 images"),
            "{}",
            s[3]
        );
        // No usage in the transcript: said so, no figures invented.
        for s in &mut t.steps {
            s.source_agent_tokens = None;
        }
        let s = t.bottom_line_sentences();
        assert_eq!(s.len(), 2);
        assert!(
            s[1].starts_with("The transcript reports no context sizes"),
            "{}",
            s[1]
        );
        // The demo has no source agent: only SOBA's own line.
        t.source_agent = None;
        assert_eq!(t.bottom_line_sentences().len(), 1);
        assert_eq!(human_tokens(27_840_100), "27.8M");
        assert_eq!(human_tokens(52_000), "52.0k");
    }
}
