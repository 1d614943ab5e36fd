//! What an entry of a session costs in the model input, by the counting rules of
//! [`crate::tokens`].

use crate::session::capsule::render::render_for_model;
use crate::session::entry::{ContentBlock, Entry, EntryBody, OpaqueBlock};
use crate::tokens::{
    TokenizerKind, IMAGE_TOKENS, MESSAGE_OVERHEAD_TOKENS, TOOL_CALL_OVERHEAD_TOKENS,
};

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
        EntryBody::Capsule(c) => MESSAGE_OVERHEAD_TOKENS + kind.count(&render_for_model(c)),
        _ => 0,
    }
}

/// Text of the result the view supplies for a call that never got one.
pub const INTERRUPTED_RESULT_TEXT: &str = "no result: interrupted";

/// Tokens of the synthetic result for an interrupted call.
pub fn interrupted_result_tokens(kind: TokenizerKind, call_id: &str) -> u64 {
    MESSAGE_OVERHEAD_TOKENS + kind.count(call_id) + kind.count(INTERRUPTED_RESULT_TEXT)
}

#[cfg(test)]
mod tests {
    use super::*;

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
