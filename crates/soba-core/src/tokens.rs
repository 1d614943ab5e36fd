//! Token counting with tiktoken-compatible encodings (the `bpe-openai` crate: the same counts as
//! OpenAI's tiktoken and tiktoken-rs on every text of the real transcripts, and faster; see
//! docs/performance.md).
//!
//! Counts are exact for the chosen encoding on text. Structure around the text (role markers,
//! tool-call framing) adds small fixed amounts that follow OpenAI's published chat accounting
//! (3 tokens per message, 1 for the reply primer). Images have no text to count and use a fixed
//! documented estimate. What an entry of a session costs is counted in `session::count`,
//! with these rules.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The version of the counting rules below (framing constants, what each block costs, the
/// encodings' crates): counts recorded under another version are not reused. Raise it with
/// any change that can change a count.
pub const COUNT_RULES_VERSION: u32 = 1;

/// Framing tokens added to every message (role marker, separators).
pub const MESSAGE_OVERHEAD_TOKENS: u64 = 3;
/// Framing tokens added to every tool call (name/arguments wrapper).
pub const TOOL_CALL_OVERHEAD_TOKENS: u64 = 8;
/// Fixed estimate for one image: Anthropic's and OpenAI's cost of a ~1 megapixel image
/// (1092×1092 px ≈ 1590 tokens at (w·h)/750). Images are not decoded.
pub const IMAGE_TOKENS: u64 = 1600;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TokenizerKind {
    /// GPT-4o, GPT-4.1, GPT-5, o-series; also used as the estimate for models whose
    /// tokenizer is not public (Claude, Gemini).
    #[default]
    O200kBase,
    /// GPT-4, GPT-3.5.
    Cl100kBase,
}

impl TokenizerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenizerKind::O200kBase => "o200k_base",
            TokenizerKind::Cl100kBase => "cl100k_base",
        }
    }

    /// Number of tokens of `text` in this encoding. The encoding's tables (about 66 MiB for
    /// o200k_base) are built on the first count and kept by `bpe-openai` for the process: every
    /// session of a daemon shares them.
    pub fn count(self, text: &str) -> u64 {
        if text.is_empty() {
            return 0;
        }
        let bpe = match self {
            TokenizerKind::O200kBase => bpe_openai::o200k_base(),
            TokenizerKind::Cl100kBase => bpe_openai::cl100k_base(),
        };
        bpe.count(text) as u64
    }
}

/// Where a calibration factor comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CalibrationSource {
    /// The tokenizer is the model's own: counts are exact, the factor is 1.
    Exact,
    /// The model catalog's factor for a model whose tokenizer is not public.
    Catalog,
    /// The configuration's `model.countFactor`.
    Config,
    /// Learned from this session: the provider's usage against SOBA's count of the same
    /// content.
    Session,
    /// The catalog's factor for a tokenizer that only estimates the model's, raised by
    /// [`PROVISIONAL_MARGIN`] until the session's own usage reports teach a factor: before
    /// the first report with a tail to learn from, nothing has checked the estimate against
    /// this session's bills.
    Provisional,
}

/// The most a learned factor may raise counts. Well above any tokenizer's real difference
/// (Claude's runs about 1.15 × `o200k_base`, up to 1.4 on dense text); a higher ratio means the
/// provider counted content the log never held, which a factor on the log's tail cannot model.
pub const MAX_LEARNED_FACTOR: f64 = 1.6;

/// How far a session's count factor is raised above the catalog's while no usage report has
/// taught it one. Over the real transcripts of `../shared/fixtures`, 90% of the reports bill
/// their tail at most 1.22 × the catalog factor's count (`soba debug accuracy --pairs`); the
/// first measured request of a session, which has no earlier report to learn from, ran up to
/// 7% above it (Claude on a tail of code, DeepSeek against o200k_base).
pub const PROVISIONAL_MARGIN: f64 = 1.2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_known_strings_exactly() {
        // Reference counts from OpenAI's tiktoken for these encodings.
        assert_eq!(TokenizerKind::Cl100kBase.count("hello world"), 2);
        assert_eq!(TokenizerKind::O200kBase.count("hello world"), 2);
        assert_eq!(TokenizerKind::O200kBase.count(""), 0);
        assert_eq!(
            TokenizerKind::Cl100kBase.count("tiktoken is great!"),
            6,
            "cl100k_base reference count"
        );
    }
}
