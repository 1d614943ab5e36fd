//! Helpers shared by integration tests.

use std::path::PathBuf;

/// The real agent transcripts beside the checkout (`../shared/fixtures/transcripts`).
///
/// When the folder is missing: under `CI=true` the calling test fails; otherwise this prints
/// a loud notice and returns `None` so the test can return early.
pub fn transcripts_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/transcripts");
    if dir.is_dir() {
        return Some(dir);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("../shared/fixtures/transcripts is missing; CI must provide it beside the checkout");
    }
    eprintln!("SKIPPED: ../shared/fixtures missing ({})", dir.display());
    None
}
