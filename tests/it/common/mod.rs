//! Helpers shared by integration tests.

use std::path::PathBuf;

/// The real agent transcripts in `../shared/fixtures/transcripts`, beside the checkout.
///
/// When the folder is missing, tests that need it are skipped with a loud message, except on CI
/// (`CI=true`), where a missing folder is a failure: CI must run them.
pub fn transcripts_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/transcripts");
    if dir.is_dir() {
        return Some(dir);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "{} is missing; CI must provide ../shared/fixtures beside the checkout",
            dir.display()
        );
    }
    eprintln!(
        "SKIPPED: ../shared/fixtures missing ({} not found)",
        dir.display()
    );
    None
}

/// A user message entry with one text block, as `soba/session/append` takes it.
pub fn user(text: &str) -> serde_json::Value {
    serde_json::json!({"type": "message", "role": "user", "content": [{"type": "text", "text": text}]})
}

/// Twelve long turns (user, assistant, …) numbered from `from`, appended to session `id`:
/// enough history over a small `keepRecentTokens` for a compaction to fold.
pub async fn append_parser_turns(c: &crate::support::lsp_client::LspClient, id: &str, from: usize) {
    let words = "the parser reads each token from the input stream and builds a syntax tree that \
                 the checker walks twice to resolve every reference against scopes";
    let turns: Vec<serde_json::Value> = (from..from + 12)
        .map(|i| {
            let text = format!("Turn {i}: {}", words.repeat(8));
            if i % 2 == 0 {
                user(&text)
            } else {
                serde_json::json!({"type": "message", "role": "assistant", "content": [{"type": "text", "text": text}]})
            }
        })
        .collect();
    c.request(
        "soba/session/append",
        serde_json::json!({"sessionId": id, "entries": turns}),
    )
    .await;
}
