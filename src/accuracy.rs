//! How close SOBA's budget comes to what the provider reported, over a real transcript.
//!
//! Every assistant message with provider usage closes one inference; the request that produced
//! it held everything logged before the response began. Replaying the transcript, each such
//! request gives a pair: SOBA's estimate of the input at the response's parent (the same
//! arithmetic as the live budget: anchor, counted tail, calibration) and the input the provider
//! reported. Beside it, pi's method on the same state: the last usage plus ⌈chars/4⌉ of every
//! message after it. Pure: the caller reads the files.

use serde::Serialize;

use crate::import::ImportResult;
use soba_core::budget::Breakdown;
use soba_core::config::{Config, ConfigError, ModelDef, Overrides};
use soba_core::session::entry::{ContentBlock, Entry, EntryBody, Role};
use soba_core::session::view::ModelView;
use soba_core::session::Session;

/// One request of the transcript: what SOBA and pi's method estimated, what the provider said.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pair {
    /// The entry that carried the provider usage.
    pub entry_id: String,
    /// Input tokens the provider reported for the request (cache included).
    pub reported: u64,
    pub soba: u64,
    pub pi_chars4: u64,
    /// The estimate rests on an earlier provider usage of the same context. Without one (the
    /// first request, or the first after the agent's own compaction) the estimate counts only
    /// what the transcript holds, and transcripts leave out the system prompt and the tool
    /// schemas.
    pub anchored: bool,
    /// The anchor's context tokens and SOBA's uncalibrated count of what follows it, when
    /// anchored: `reported - anchorContext` is the provider's count of the same content.
    pub anchor_context: Option<u64>,
    pub counted_tail: u64,
    /// The factor the counted tail was multiplied by, and where it came from (`session`: learned
    /// from the reports before this one).
    pub factor: f64,
    pub factor_source: soba_core::tokens::CalibrationSource,
    /// The source agent compacted its own context earlier on this branch: the view starts from
    /// its summary and what it kept, as the agent's request did.
    pub after_foreign_compaction: bool,
    /// What the estimate added for content the provider counts beyond the log (included in
    /// `soba`): the unseen-context allowance of an unanchored request, the unseen-growth
    /// allowance of an anchored one.
    pub unseen: soba_core::budget::unseen_allowance::Unseen,
}

impl Pair {
    /// The transcript holds what the request held: an anchored estimate. The accuracy target
    /// applies to these.
    pub fn comparable(&self) -> bool {
        self.anchored
    }

    /// A request with no earlier report to stand on: the first of the session, or the first
    /// after the agent's own compaction. Its estimate rests on the unseen-context allowance.
    pub fn fresh(&self) -> bool {
        !self.anchored
    }

    /// `(estimate - reported) / reported`: negative when the estimate is low.
    pub fn soba_error(&self) -> f64 {
        relative(self.soba, self.reported)
    }

    pub fn pi_error(&self) -> f64 {
        relative(self.pi_chars4, self.reported)
    }
}

fn relative(estimate: u64, reported: u64) -> f64 {
    (estimate as f64 - reported as f64) / reported.max(1) as f64
}

/// The imported session as SOBA holds it, counted for `model` (its tokenizer and factor).
pub fn session_of(import: &ImportResult, model: &ModelDef) -> Session {
    let mut session = Session::new(import.header.clone(), model.tokenizer);
    session.configure_counting(model);
    for e in &import.entries {
        // Imports are checked trees; an entry the tree refuses is left out of the replay.
        let _ = session.push(e.clone());
    }
    session
}

/// The model an imported transcript ran on, resolved as `soba budget` resolves it with no
/// configuration files: the catalog's figures for the name the transcript records.
pub fn model_of(import: &ImportResult) -> Result<ModelDef, ConfigError> {
    Ok(Config::resolve(
        &[],
        import.header.model_config().as_ref(),
        &Overrides::default(),
    )?
    .model)
}

/// Every request pair of an imported transcript, counted for `model`. After a source agent's
/// own compaction the view holds what the agent sent (its summary, what it kept, what came
/// after), so those requests are measured like any other.
pub fn replay(import: &ImportResult, model: &ModelDef) -> Vec<Pair> {
    pairs(&session_of(import, model))
}

/// The request pairs of `session`, with SOBA's estimate as the live budget makes it.
pub fn pairs(session: &Session) -> Vec<Pair> {
    let mut out = Vec::new();
    for idx in 0..session.len() {
        let e = session.entry(idx);
        let Some(usage) = assistant_usage(e) else {
            continue;
        };
        if usage.prompt_tokens() == 0 {
            continue;
        }
        let request_leaf = session.parent_of(session.response_start(idx));
        let view = ModelView::build(session, request_leaf);
        let anchor = view
            .usage_anchor(session)
            .filter(|a| a.usage.context_tokens() > 0);
        // What the live budget applied then: the factor as learned from the reports before.
        let cal = session.calibration_at(request_leaf);
        let breakdown: Breakdown = view.breakdown(session);
        let unseen = session.unseen_at(request_leaf, anchor);
        let soba = unseen.tokens
            + match anchor {
                Some(a) => a.usage.context_tokens() + cal.apply(a.tokens_after),
                None => cal.apply(breakdown.total()),
            };
        out.push(Pair {
            entry_id: e.id.clone(),
            reported: usage.prompt_tokens(),
            soba,
            pi_chars4: pi_estimate(session, request_leaf),
            anchored: anchor.is_some(),
            anchor_context: anchor.map(|a| a.usage.context_tokens()),
            counted_tail: anchor.map_or(breakdown.total(), |a| a.tokens_after),
            factor: cal.factor,
            factor_source: cal.source,
            after_foreign_compaction: view.foreign.is_some(),
            unseen,
        });
    }
    out
}

fn assistant_usage(e: &Entry) -> Option<soba_core::session::entry::Usage> {
    match &e.body {
        EntryBody::Message(m) if m.role == Role::Assistant => m.usage,
        _ => None,
    }
}

/// pi's estimate of the context at `leaf`: the newest assistant usage on the branch
/// (input + output + cache) plus ⌈chars/4⌉ of every message after it; ⌈chars/4⌉ of everything
/// when no usage exists.
pub fn pi_estimate(session: &Session, leaf: Option<usize>) -> u64 {
    let Some(leaf) = leaf else { return 0 };
    let mut tail = 0;
    for i in session.branch(leaf).into_iter().rev() {
        let e = session.entry(i);
        if let Some(u) = assistant_usage(e).filter(|u| u.context_tokens() > 0) {
            return u.context_tokens() + tail;
        }
        tail += chars(e).div_ceil(4);
    }
    tail
}

fn chars(e: &Entry) -> u64 {
    let blocks = |content: &[ContentBlock]| -> u64 {
        content
            .iter()
            .map(|b| match b {
                ContentBlock::Text { text, .. } => text.chars().count() as u64,
                ContentBlock::Thinking { thinking, .. } => thinking.chars().count() as u64,
                ContentBlock::ToolCall { name, input, .. } => {
                    (name.chars().count() + input.to_string().chars().count()) as u64
                }
                // pi estimates an image at 4800 characters (1200 tokens).
                ContentBlock::Image { .. } => 4800,
                // pi's estimate serializes what it does not know.
                ContentBlock::Opaque(o) => serde_json::to_string(o.fields())
                    .map(|s| s.chars().count() as u64)
                    .unwrap_or(0),
            })
            .sum()
    };
    match &e.body {
        EntryBody::Message(m) => blocks(&m.content),
        EntryBody::ToolResult(r) => blocks(&r.content),
        _ => 0,
    }
}

/// Median, 90th percentile and share of pairs under-estimated by more than 2%.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Distribution {
    pub pairs: usize,
    pub median: f64,
    pub p90: f64,
    /// The lowest error (most under-estimated).
    pub worst_low: f64,
    pub share_low_over_2pct: f64,
}

impl Distribution {
    pub fn of(errors: impl IntoIterator<Item = f64>) -> Option<Distribution> {
        let mut e: Vec<f64> = errors.into_iter().collect();
        if e.is_empty() {
            return None;
        }
        e.sort_by(f64::total_cmp);
        let at = |q: f64| e[((e.len() - 1) as f64 * q).round() as usize];
        Some(Distribution {
            pairs: e.len(),
            median: at(0.5),
            p90: at(0.9),
            worst_low: e[0],
            share_low_over_2pct: e.iter().filter(|&&x| x < -0.02).count() as f64 / e.len() as f64,
        })
    }
}
