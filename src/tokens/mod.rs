//! Token counting with tiktoken-compatible encodings (the `bpe-openai` crate: the same counts as
//! OpenAI's tiktoken and tiktoken-rs on every text of the real transcripts, and faster; see
//! docs/performance.md).
//!
//! Counts are exact for the chosen encoding on text. Structure around the text (role markers,
//! tool-call framing) adds small fixed amounts that follow OpenAI's published chat accounting
//! (3 tokens per message, 1 for the reply primer). Images have no text to count and use a fixed
//! documented estimate.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::session::entry::{ContentBlock, Entry, EntryBody, OpaqueBlock};

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

/// Tokens of a list of content blocks as the model sees them.
pub fn blocks_tokens(kind: TokenizerKind, blocks: &[ContentBlock]) -> u64 {
    blocks
        .iter()
        .map(|b| match b {
            ContentBlock::Text { text, .. } => kind.count(text),
            ContentBlock::Thinking { thinking, .. } => kind.count(thinking),
            ContentBlock::ToolCall { name, input, .. } => {
                TOOL_CALL_OVERHEAD_TOKENS
                    + kind.count(name)
                    + kind.count(&serde_json::to_string(input).unwrap_or_default())
            }
            ContentBlock::Image { .. } => IMAGE_TOKENS,
            ContentBlock::Opaque(o) => opaque_tokens(kind, o),
        })
        .sum()
}

/// An opaque block (a type SOBA does not know) is sent back as it came, so it costs what its
/// JSON text costs: counted whole, keys and all. For encrypted payloads (`redacted_thinking`)
/// this overestimates the provider's count, which is the safe side for a budget. Provider
/// fields on a known block (`signature`, `cache_control`) are request metadata, not model
/// input, and cost nothing.
fn opaque_tokens(kind: TokenizerKind, block: &OpaqueBlock) -> u64 {
    kind.count(&serde_json::to_string(block.fields()).unwrap_or_default())
}

/// Tokens an entry costs in the model input; 0 for entries the model never sees.
pub fn entry_tokens(kind: TokenizerKind, entry: &Entry) -> u64 {
    match &entry.body {
        EntryBody::Message(m) => MESSAGE_OVERHEAD_TOKENS + blocks_tokens(kind, &m.content),
        EntryBody::ToolResult(r) => {
            MESSAGE_OVERHEAD_TOKENS + kind.count(&r.call_id) + blocks_tokens(kind, &r.content)
        }
        EntryBody::Capsule(c) => {
            MESSAGE_OVERHEAD_TOKENS
                + kind.count(&crate::session::capsule::render::render_for_model(c))
        }
        _ => 0,
    }
}

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

    fn block(v: serde_json::Value) -> ContentBlock {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn provider_fields_on_a_known_block_cost_nothing() {
        let k = TokenizerKind::O200kBase;
        let plain = block(serde_json::json!({"type": "thinking", "thinking": "let me see"}));
        let signed = block(
            serde_json::json!({"type": "thinking", "thinking": "let me see",
            "signature": "EqQBCkYIBRgCKkD3mR+xq/8nPz0Wc1kU9aT4n1ZcM7oYbL2vQeXoJw==",
            "cache_control": {"type": "ephemeral"}}),
        );
        assert_eq!(blocks_tokens(k, &[signed]), blocks_tokens(k, &[plain]));
    }

    #[test]
    fn an_opaque_block_costs_its_json_text() {
        for k in [TokenizerKind::O200kBase, TokenizerKind::Cl100kBase] {
            let json = r#"{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw"}"#;
            let opaque: ContentBlock = serde_json::from_str(json).unwrap();
            assert!(matches!(opaque, ContentBlock::Opaque(_)));
            let tokens = blocks_tokens(k, std::slice::from_ref(&opaque));
            assert_eq!(tokens, k.count(json));
            assert!(tokens > 10, "{tokens}");
        }
    }

    #[test]
    fn images_use_the_documented_estimate() {
        let blocks = vec![ContentBlock::Image {
            media_type: Some("image/png".into()),
            data: Some("AAAA".into()),
            extra: Default::default(),
        }];
        assert_eq!(
            blocks_tokens(TokenizerKind::O200kBase, &blocks),
            IMAGE_TOKENS
        );
    }
}
