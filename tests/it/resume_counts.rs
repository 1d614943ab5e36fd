//! A resume's budget is the same whether the log's token counts are recorded beside it or not:
//! `soba budget --json` on real transcripts, cold (no `<log>.tokens`: what the budget needs is
//! counted from the text, and recorded as a by-product), warm (the counts the cold run
//! recorded) and with the side file a writer records, against the exact path (the log read
//! with nothing recorded, every count made in this process, the budget measured from a fresh
//! model view).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use soba::import::transcript::import_str;
use soba::import::ImportOptions;
use soba_core::budget::Budget;
use soba_core::config::{Config, Durability, Overrides};
use soba_core::session::entry::EntryBody;
use soba_core::session::log::{read_session, SessionLog};
use soba_core::session::token_file;
use soba_core::session::unseen_priors::UnseenStore;
use soba_core::session::view::ModelView;

/// The figures of a budget report that counting decides.
const FIGURES: [&str; 4] = ["effectiveTokens", "source", "breakdown", "calibration"];

fn budget_process(log: &Path, home: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["budget", "--json"])
        .arg(log)
        .current_dir(home)
        .env("SOBA_CONFIG", home.join("no-user-config.json"))
        .env("SOBA_DATA_DIR", home.join("data"))
        .env("HOME", home)
        .output()
        .expect("soba runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    FIGURES
        .iter()
        .map(|k| (k.to_string(), v[k].clone()))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// The budget counted from the text in this process, from a fresh model view (not the kept
/// tally), as the figures `soba budget --json` prints.
fn exact(log: &Path) -> Value {
    assert!(!token_file::path_for(log).exists(), "nothing recorded");
    let (mut session, report) = read_session(log).unwrap();
    assert!(report.is_clean());
    let config =
        Config::resolve(&[], session.model_config().as_ref(), &Overrides::default()).unwrap();
    session.configure_counting(&config.model);
    let store = UnseenStore::load(&log.with_extension("no-store"));
    session.set_unseen_prior(store.prior(session.agent(), &config.model.name, &session.header.id));
    let view = ModelView::build(&session, session.leaf());
    let anchor = view.usage_anchor(&session);
    let budget = Budget::measure(
        config.limits_under(session.window_setting()),
        view.breakdown(&session),
        anchor,
        session.calibration(),
        session.unseen_at(session.leaf(), anchor),
    );
    let breakdown = soba::inspect::ReportBreakdown::of(&budget);
    serde_json::json!({
        "effectiveTokens": budget.effective_tokens,
        "source": budget.source,
        "breakdown": breakdown,
        "calibration": budget.calibration,
    })
}

/// `fixture` imported into a log of `dir` (with its usage reports, or without any), with no
/// side file beside it.
fn imported(fixture: &Path, dir: &Path, keep_usage: bool) -> PathBuf {
    let text = std::fs::read_to_string(fixture).unwrap();
    let options = ImportOptions {
        source_path: fixture.display().to_string(),
        default_workspace: "/w".into(),
        default_session_id: "s".into(),
        now: "2026-01-01T00:00:00Z".into(),
    };
    let mut import = import_str(&text, None, &options).unwrap();
    if !keep_usage {
        for e in &mut import.entries {
            if let EntryBody::Message(m) = &mut e.body {
                m.usage = None;
            }
        }
    }
    let path = dir.join("session.jsonl");
    let mut log = SessionLog::create(&path, import.header, Durability::Flush).unwrap();
    log.append_all(import.entries).unwrap();
    drop(log);
    std::fs::remove_file(token_file::path_for(&path)).unwrap();
    path
}

/// The records of a side file's bytes (its header line checked and left out).
fn records(bytes: &[u8]) -> Vec<token_file::Record> {
    let mut lines = bytes.split_inclusive(|&b| b == b'\n');
    assert!(token_file::parse_header(lines.next().unwrap()).is_some());
    lines
        .map(|l| token_file::decode_record(l).expect("a whole record"))
        .collect()
}

fn check(fixture: &str, keep_usage: bool) {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let log = imported(&dir.join(fixture), home.path(), keep_usage);
    let side = token_file::path_for(&log);
    let exact = exact(&log);
    let reported = exact["source"].as_str().unwrap();
    assert_eq!(
        reported,
        if keep_usage {
            "provider_usage"
        } else {
            "estimated"
        },
        "{fixture}"
    );

    let cold = budget_process(&log, home.path());
    assert_eq!(cold, exact, "{fixture}: cold against the exact path");
    let recorded = std::fs::read(&side).expect("the cold budget recorded the counts");

    let warm = budget_process(&log, home.path());
    assert_eq!(warm, exact, "{fixture}: warm against the exact path");
    assert!(
        std::fs::read(&side).unwrap() == recorded,
        "{fixture}: a warm budget writes nothing"
    );

    // What the session's writer records is what the cold budget recorded, and reads the same.
    std::fs::remove_file(&side).unwrap();
    let (mut writer, _) = SessionLog::open(&log, Durability::Flush).unwrap();
    let config = Config::resolve(
        &[],
        writer.session().model_config().as_ref(),
        &Overrides::default(),
    )
    .unwrap();
    writer.session_mut().configure_counting(&config.model);
    writer.save_token_counts();
    drop(writer);
    // The writer records every entry; the budget recorded what it counted (the model input,
    // the tails of the reports it learns from), each the same. Samples may differ in number:
    // each records the usage reports it measured, never different ones.
    let (ours, writers) = (records(&recorded), records(&std::fs::read(&side).unwrap()));
    assert!(!ours.is_empty() && ours.len() <= writers.len(), "{fixture}");
    let by_key: std::collections::HashMap<u64, &token_file::Record> =
        writers.iter().map(|r| (r.key.offset, r)).collect();
    for a in &ours {
        let b = by_key[&a.key.offset];
        assert_eq!(
            (&a.key, &a.id, a.counts.tokens, &a.counts.derived),
            (&b.key, &b.id, b.counts.tokens, &b.counts.derived),
            "{fixture}"
        );
        if let (Some(x), Some(y)) = (a.counts.sample, b.counts.sample) {
            assert_eq!(x, y, "{fixture}: {}", a.id);
        }
    }
    assert_eq!(budget_process(&log, home.path()), exact, "{fixture}");
}

#[test]
fn claude_code_with_usage() {
    check("claude-code/entire-cli-two-compactions.jsonl", true);
}

#[test]
fn claude_code_without_usage() {
    check("claude-code/agentcmd-session-four.jsonl", false);
}

#[test]
fn codex_with_usage() {
    check("codex/agentv-two-compactions.jsonl", true);
}

#[test]
fn codex_without_usage() {
    check("codex/agentcmd-rollout-v0.40.jsonl", false);
}

#[test]
fn pi_with_usage() {
    check("pi/pi-mono-large-session.jsonl", true);
}

#[test]
fn pi_without_usage() {
    check("pi/pi-mono-two-compactions.jsonl", false);
}

#[test]
fn openai_chat_with_usage() {
    check("openai-chat/mini-swe-agent-astropy-12907.traj.json", true);
}

#[test]
fn openai_chat_without_usage() {
    check("openai-chat/mini-swe-agent-astropy-12907.traj.json", false);
}

/// A log whose side file cannot be written (a folder in its place) still gets its budget,
/// counted, and the folder is left as it was.
#[test]
fn a_side_file_that_cannot_be_written_leaves_the_budget_exact() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let log = imported(
        &dir.join("pi/pi-mono-large-session.jsonl"),
        home.path(),
        true,
    );
    let exact = exact(&log);
    let side = token_file::path_for(&log);
    std::fs::create_dir(&side).unwrap();
    std::fs::write(side.join("keep"), "x").unwrap();
    for _ in 0..2 {
        assert_eq!(budget_process(&log, home.path()), exact);
    }
    assert!(side.join("keep").exists());
}
