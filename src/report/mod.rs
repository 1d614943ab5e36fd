//! The timeline of a session run (`soba demo`, `soba replay`) and its renderings: the terminal
//! lines and a self-contained HTML report.
//!
//! A [`Timeline`] records, per preflight, the effective tokens of the input that was sent, and
//! every compaction outcome with the preflight it preceded. Rendering is a pure function of it.

pub mod html;
pub mod text;

use schemars::JsonSchema;
use serde::Serialize;

use crate::budget::{Limits, MeasurementSource};
use crate::compaction::CompactionResult;

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
            .filter(|c| c.result.outcome == crate::session::entry::Outcome::Completed)
    }
}

/// One thing that happened, in order: what a live printer receives.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    Step(&'a Step),
    Compaction(&'a TimelineCompaction),
    Foreign(&'a ForeignMark),
}
