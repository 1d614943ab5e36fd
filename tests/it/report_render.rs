//! The HTML report rendered by a real browser (headless Chromium): the chart and the tables are
//! in the DOM it builds. Without `chromium` the test fails on CI and is skipped loudly elsewhere.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use soba::replay::host::CapsuleWriter;
use soba::report::{html, Timeline};
use soba_core::config::{Config, ConfigFile, Overrides};

fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("chromium"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("chromium is not installed; CI must install it (scripts/test does: apt-get install -y chromium)");
        }
        eprintln!("SKIPPED: chromium not installed; the report was not rendered in a browser (apt-get install -y chromium)");
    }
    found
}

/// The DOM Chromium builds from the file.
fn dump_dom(browser: &Path, page: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium starts");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn demo_timeline(dir: &Path) -> Timeline {
    let config = soba::demo::demo_config();
    soba::demo::run(
        &config,
        CapsuleWriter::Local,
        &dir.join("demo.jsonl"),
        Box::new(|_| {}),
    )
    .unwrap()
}

#[test]
fn the_demo_report_renders_its_chart_table_and_capsule_in_a_browser() {
    let Some(browser) = chromium() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let timeline = demo_timeline(dir.path());
    let page = dir.path().join("report.html");
    std::fs::write(&page, html::render(&timeline)).unwrap();
    let dom = dump_dom(&browser, &page);
    assert!(dom.contains("<svg"), "an inline SVG chart");
    assert!(dom.contains(r#"<polyline class="effective""#));
    assert!(dom.contains(r#"class="limit hard""#) && dom.contains(r#"class="limit soft""#));
    for trigger in ["auto_threshold", "hard_limit", "context_overflow"] {
        assert!(
            dom.contains(&format!("compaction trigger-{trigger} outcome-completed")),
            "marker for {trigger}"
        );
    }
    let rows = dom.matches(r#"<tr class="compaction-row"#).count();
    assert_eq!(rows, timeline.compactions.len());
    assert!(dom.contains(r#"<pre class="capsule"># Context Capsule"#));
    // Self-contained: no scripts, no resources fetched from anywhere.
    assert!(!dom.contains("<script") && !dom.contains(r#"src=""#) && !dom.contains("<link"));
}

#[test]
fn a_replay_report_shows_the_source_agents_compactions_in_a_browser() {
    let Some(browser) = chromium() else {
        return;
    };
    let Some(fixtures) = common::transcripts_dir() else {
        return;
    };
    let file = fixtures.join("codex/agentv-two-compactions.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    let options = soba::import::ImportOptions {
        source_path: file.display().to_string(),
        default_workspace: "/ws".into(),
        default_session_id: "s".into(),
        now: "2026-01-01T00:00:00Z".into(),
    };
    let import = soba::import::transcript::import_str(&text, None, &options).unwrap();
    let f = ConfigFile::parse(
        "t",
        r#"{"model":{"name":"t","contextWindow":40000,"maxOutputTokens":4000},"compaction":{"keepRecentTokens":8000}}"#,
    )
    .unwrap();
    let config = Config::resolve(&[f], None, &Overrides::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let r = soba::replay::replay(
        import,
        &config,
        CapsuleWriter::Local,
        &dir.path().join("s.jsonl"),
        soba::replay::Observers::default(),
    )
    .unwrap();
    assert_eq!(r.timeline.foreign_compactions.len(), 2);
    let page = dir.path().join("replay.html");
    std::fs::write(&page, html::render(&r.timeline)).unwrap();
    let dom = dump_dom(&browser, &page);
    assert_eq!(dom.matches(r#"<g class="foreign">"#).count(), 2);
    assert_eq!(dom.matches(r#"<tr class="foreign-row">"#).count(), 2);
    assert!(
        dom.contains(r#"<polyline class="source-agent""#),
        "the source agent's own context"
    );
}
