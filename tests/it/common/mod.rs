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
