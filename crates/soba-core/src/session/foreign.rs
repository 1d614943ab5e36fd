//! A source agent's own compactions: what the model view makes of them, and the summary the
//! agent sends in place of what it compacted.

use super::entry::ForeignCompactionEntry;
use crate::tokens::{TokenizerKind, MESSAGE_OVERHEAD_TOKENS};

/// What the view makes of a source agent's own compactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForeignCompactions {
    /// The agent's context was replaced: the view starts from its latest compaction. This is
    /// what the agent sends, so its provider usage after the compaction measures the view.
    #[default]
    Honour,
    /// The whole history stays in the view, as if the agent had never compacted: what SOBA
    /// alone would have sent (`soba replay` simulates that). Usage after a compaction measured
    /// another context and is no anchor.
    WholeHistory,
}

/// Prefix and suffix pi wraps a compaction summary in when it sends it to the model.
pub(crate) const PI_SUMMARY_PREFIX: &str =
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n";
pub(crate) const PI_SUMMARY_SUFFIX: &str = "\n</summary>";

/// The summary of a source agent's compaction as that agent sends it: a user message (Claude
/// Code sends the text as written; pi wraps it).
pub fn foreign_summary_text(f: &ForeignCompactionEntry) -> Option<String> {
    let summary = f.summary.as_deref()?;
    Some(match f.agent.as_str() {
        "pi" => format!("{PI_SUMMARY_PREFIX}{summary}{PI_SUMMARY_SUFFIX}"),
        _ => summary.to_string(),
    })
}

/// Tokens of the summary message a view that starts from the source agent's compaction `f`
/// sends (0 where it has no summary).
pub fn foreign_summary_tokens_of(kind: TokenizerKind, f: &ForeignCompactionEntry) -> u64 {
    foreign_summary_text(f).map_or(0, |text| MESSAGE_OVERHEAD_TOKENS + kind.count(&text))
}
