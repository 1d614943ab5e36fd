//! The CLI contract on a session the test writes itself: `--json` prints one object with the
//! DESIGN.md fields; errors go to stderr with a non-zero exit and advice.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use soba_core::config::Durability;
use soba_core::session::entry::*;
use soba_core::session::log::SessionLog;

fn soba(args: &[&str], cwd: &Path) -> (bool, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(args)
        .current_dir(cwd)
        .env("SOBA_CONFIG", cwd.join("no-user-config.json"))
        .output()
        .expect("soba runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let json = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (
        out.status.success(),
        json,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn filler(n: usize) -> String {
    " lorem".repeat(n)
}

/// A bug-fix session of `turns` turns of about 4000 tokens each.
fn write_session(dir: &Path, turns: usize) -> PathBuf {
    let path = dir.join("session.jsonl");
    let header = SessionHeader {
        kind: HeaderTag::Session,
        version: LOG_FORMAT_VERSION,
        id: "cli".into(),
        workspace: dir.display().to_string(),
        created_at: "2026-01-01T00:00:00Z".into(),
        model: Some(ModelRef {
            name: Some("custom".into()),
            context_window: Some(65000),
            max_output_tokens: Some(8000),
            tokenizer: None,
        }),
        source: None,
    };
    let mut log = SessionLog::create(&path, header, Durability::Flush).unwrap();
    let mut last: Option<String> = None;
    let mut n = 0;
    let mut push = |log: &mut SessionLog, body: EntryBody| {
        n += 1;
        let id = format!("e{n}");
        log.append(Entry::new(id.clone(), last.clone(), body))
            .unwrap();
        last = Some(id);
    };
    for t in 0..turns {
        push(
            &mut log,
            EntryBody::Message(MessageEntry {
                role: Role::User,
                content: vec![ContentBlock::text(format!("turn {t}: {}", filler(1000)))],
                usage: None,
                model: None,
                synthetic: false,
            }),
        );
        push(
            &mut log,
            EntryBody::Message(MessageEntry {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolCall {
                    id: format!("c{t}"),
                    name: "Edit".into(),
                    input: Box::new(json!({"file_path": format!("{}/src/m{t}.rs", dir.display())})),
                    extra: Default::default(),
                }],
                usage: None,
                model: None,
                synthetic: false,
            }),
        );
        push(
            &mut log,
            EntryBody::ToolResult(ToolResultEntry {
                call_id: format!("c{t}"),
                tool_name: Some("Edit".into()),
                content: vec![ContentBlock::text(filler(2000))],
                is_error: false,
                exit_code: None,
            }),
        );
        push(
            &mut log,
            EntryBody::Message(MessageEntry {
                role: Role::Assistant,
                content: vec![ContentBlock::text(filler(1000))],
                usage: None,
                model: None,
                synthetic: false,
            }),
        );
    }
    path
}

#[test]
fn budget_json_has_the_design_fields_and_the_spec_limits() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_session(dir.path(), 3);
    let (ok, v, err) = soba(&["budget", p.to_str().unwrap(), "--json"], dir.path());
    assert!(ok, "{err}");
    for key in [
        "effectiveTokens",
        "hardLimit",
        "softLimit",
        "source",
        "contextWindow",
        "maxOutputTokens",
        "autoCompact",
        "lastCompaction",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert_eq!(v["hardLimit"], 48808);
    assert_eq!(v["softLimit"], 39046);
    assert_eq!(v["source"], "estimated");
    assert_eq!(v["lastCompaction"], Value::Null);
    assert!(v["effectiveTokens"].as_u64().unwrap() > 12000);
}

#[test]
fn compact_then_context_shows_the_capsule_and_the_retained_tail() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_session(dir.path(), 12);
    let (ok, r, err) = soba(
        &[
            "compact",
            p.to_str().unwrap(),
            "--instructions",
            "keep the parser work",
            "--json",
        ],
        dir.path(),
    );
    assert!(ok, "{err}");
    for key in [
        "outcome",
        "reason",
        "trigger",
        "tokensBefore",
        "tokensAfter",
        "reclaimedPercent",
        "checkpointId",
        "quality",
        "firstKeptEntryId",
        "durationMs",
    ] {
        assert!(r.get(key).is_some(), "missing {key}: {r}");
    }
    assert_eq!(r["outcome"], "completed");
    assert_eq!(r["trigger"], "user");
    assert_eq!(r["quality"], "local");
    let (ok, c, err) = soba(&["context", p.to_str().unwrap(), "--json"], dir.path());
    assert!(ok, "{err}");
    assert_eq!(c["firstKeptEntryId"], r["firstKeptEntryId"]);
    // `tokens` is SOBA's count of the messages; `tokensAfter` is the continuation as the budget
    // measures it (the counted input raised by the calibration factor of a model whose tokenizer
    // is not its own), the figure the completion line reports.
    assert_eq!(c["preflight"]["effectiveTokens"], r["tokensAfter"], "{c}");
    assert!(c["tokens"].as_u64() <= r["tokensAfter"].as_u64(), "{c} {r}");
    let first = c["messages"][0]["content"][0]["text"].as_str().unwrap();
    assert!(first.starts_with("# Context Capsule"), "{first}");
    assert!(
        first.contains("src/m0.rs"),
        "modified files are facts in the capsule: {first}"
    );
    let (_, b, _) = soba(&["budget", p.to_str().unwrap(), "--json"], dir.path());
    assert_eq!(b["lastCompaction"]["checkpointId"], r["checkpointId"]);
    assert_eq!(b["effectiveTokens"], r["tokensAfter"]);
}

#[test]
fn cli_compactions_write_their_flight_records() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_session(dir.path(), 12);
    let (ok, _, err) = soba(&["flight", p.to_str().unwrap()], dir.path());
    assert!(ok, "{err}");
    let (ok, r, err) = soba(&["compact", p.to_str().unwrap(), "--json"], dir.path());
    assert!(ok, "{err}");
    let (ok, created, err) = soba(
        &[
            "capsule",
            "create",
            p.to_str().unwrap(),
            "hand-off",
            "--json",
        ],
        dir.path(),
    );
    assert!(ok, "{err}");
    let (ok, f, err) = soba(&["flight", p.to_str().unwrap(), "--json"], dir.path());
    assert!(ok, "{err}");
    let records = f["records"].as_array().unwrap();
    assert_eq!(records.len(), 2, "{f}");
    assert_eq!(records[0]["operationId"], r["operationId"]);
    assert_eq!(records[0]["trigger"], "user");
    assert_eq!(records[0]["outcome"], "completed");
    assert_eq!(records[0]["checkpointId"], r["checkpointId"]);
    assert_eq!(records[1]["trigger"], "handoff");
    assert_eq!(records[1]["checkpointId"], created["checkpointId"]);
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["flight", p.to_str().unwrap()])
        .current_dir(dir.path())
        .env("SOBA_CONFIG", dir.path().join("no-user-config.json"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("no compaction recorded yet"), "{text}");
    assert!(text.contains("user"), "{text}");
}

#[test]
fn capsule_create_reports_the_capsules_size_and_the_sessions_apart() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_session(dir.path(), 12);
    let (_, budget, _) = soba(&["budget", p.to_str().unwrap(), "--json"], dir.path());
    let (ok, created, err) = soba(
        &[
            "capsule",
            "create",
            p.to_str().unwrap(),
            "hand-off",
            "--json",
        ],
        dir.path(),
    );
    assert!(ok, "{err}");
    assert_eq!(
        created["sessionTokens"], budget["effectiveTokens"],
        "{created}"
    );
    let tokens = created["tokens"].as_u64().unwrap();
    assert!(
        tokens > 0 && tokens * 10 < created["sessionTokens"].as_u64().unwrap(),
        "{created}"
    );
    // No model configured: the local builder wrote it, and that is no fallback.
    assert_eq!(created["quality"], "local");
    assert_eq!(created["result"]["fallback"], false);
    assert!(created["result"].get("degraded").is_none(), "{created}");
}

/// `soba capsule create` prints the capsule's size on the budget's scale: for a Claude model,
/// whose bills run above SOBA's count (1.15 ×, with a margin until the provider reports), the
/// count raised by the factor the budget applies, not the tokenizer's raw count.
#[test]
fn capsule_create_prints_the_capsules_size_on_the_budgets_scale() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_session(dir.path(), 12);
    let claude = std::fs::read_to_string(&p).unwrap().replacen(
        "\"name\":\"custom\"",
        "\"name\":\"claude-sonnet-4-5\"",
        1,
    );
    std::fs::write(&p, claude).unwrap();
    let (_, budget, _) = soba(&["budget", p.to_str().unwrap(), "--json"], dir.path());
    assert_eq!(budget["model"], "claude-sonnet-4-5", "{budget}");
    let factor = budget["calibration"]["factor"].as_f64().unwrap();
    assert!(factor > 1.1, "{budget}");
    let on_the_budgets_scale = |counted: u64| (counted as f64 * factor).ceil() as u64;
    let (ok, created, err) = soba(
        &[
            "capsule",
            "create",
            p.to_str().unwrap(),
            "hand-off",
            "--json",
        ],
        dir.path(),
    );
    assert!(ok, "{err}");
    let (session, _) = soba_core::session::log::read_session(&p).unwrap();
    let counted = soba_core::capsule::handoff::capsule_tokens(
        &session,
        created["checkpointId"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(
        created["tokens"].as_u64().unwrap(),
        on_the_budgets_scale(counted),
        "{counted} counted: {created}"
    );
    // The text line says the same.
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["capsule", "create", p.to_str().unwrap(), "again"])
        .current_dir(dir.path())
        .env("SOBA_CONFIG", dir.path().join("no-user-config.json"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let (session, _) = soba_core::session::log::read_session(&p).unwrap();
    let again = soba_core::capsule::handoff::list_capsules(&session)
        .pop()
        .unwrap();
    let counted =
        soba_core::capsule::handoff::capsule_tokens(&session, &again.checkpoint_id).unwrap();
    let scaled = soba_core::util::human_tokens(on_the_budgets_scale(counted));
    assert!(
        text.contains(&format!(", {scaled} tokens for a session of")),
        "{text}"
    );
}

#[test]
fn an_error_names_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.jsonl");
    let (ok, _, err) = soba(&["budget", missing.to_str().unwrap()], dir.path());
    assert!(!ok);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    let capsule = dir.path().join("missing.capsule.md");
    let p = write_session(dir.path(), 1);
    let (ok, _, err) = soba(
        &[
            "capsule",
            "load",
            p.to_str().unwrap(),
            capsule.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(!ok);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn context_shows_the_preflights_decision_and_says_when_a_compaction_runs_first() {
    let dir = tempfile::tempdir().unwrap();
    let small = write_session(dir.path(), 2);
    let (ok, c, err) = soba(&["context", small.to_str().unwrap(), "--json"], dir.path());
    assert!(ok, "{err}");
    assert_eq!(c["preflight"]["decision"], "send", "{}", c["preflight"]);
    // Plain text says it too, on the last line, where the README promises it.
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["context", small.to_str().unwrap()])
        .current_dir(dir.path())
        .env("SOBA_CONFIG", dir.path().join("no-user-config.json"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or("");
    assert!(
        last.starts_with("── the next preflight sends this input as shown: ")
            && last.contains("no compaction is due"),
        "{last}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("note:"),
        "a plain send is no warning"
    );
    let big_dir = tempfile::tempdir().unwrap();
    let big = write_session(big_dir.path(), 14);
    let (ok, c, err) = soba(
        &["context", big.to_str().unwrap(), "--json"],
        big_dir.path(),
    );
    assert!(ok, "{err}");
    let p = &c["preflight"];
    assert_eq!(p["decision"], "compact_first", "{p}");
    assert_eq!(p["trigger"], "hard_limit", "{p}");
    assert!(
        p["effectiveTokens"].as_u64() > p["hardLimit"].as_u64(),
        "{p}"
    );
    assert!(p["tokensAfter"].as_u64() < p["hardLimit"].as_u64(), "{p}");
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["context", big.to_str().unwrap()])
        .current_dir(big_dir.path())
        .env("SOBA_CONFIG", big_dir.path().join("no-user-config.json"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("the next preflight would not send this input: a hard_limit compaction"),
        "{}",
        text.lines().last().unwrap_or("")
    );
    // Reading never writes: the log is as it was.
    let (s, _) = soba_core::session::log::read_session(&big).unwrap();
    assert!(s.entries().iter().all(|e| e.as_capsule().is_none()));
}

#[test]
fn errors_go_to_stderr_with_advice_and_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, err) = soba(&["budget", "missing.jsonl"], dir.path());
    assert!(!ok);
    assert!(err.contains("missing.jsonl"), "{err}");
    let transcript = dir.path().join("claude.jsonl");
    std::fs::write(&transcript, "{\"type\":\"user\",\"uuid\":\"u1\"}\n").unwrap();
    let (ok, _, err) = soba(&["context", transcript.to_str().unwrap()], dir.path());
    assert!(!ok);
    assert!(err.contains("soba import"), "{err}");
    let p = write_session(dir.path(), 1);
    let cfg = dir.path().join("bad.json");
    std::fs::write(&cfg, r#"{"compaction":{"minSavingsRatio":2}}"#).unwrap();
    let (ok, _, err) = soba(
        &[
            "budget",
            p.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(!ok);
    assert!(
        err.contains("compaction.minSavingsRatio") && err.contains("(0, 1]"),
        "{err}"
    );
}

#[test]
fn workspace_config_is_layered_under_flags() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_session(dir.path(), 1);
    std::fs::create_dir_all(dir.path().join(".soba")).unwrap();
    std::fs::write(
        dir.path().join(".soba/config.json"),
        r#"{"compaction":{"safetyReserveTokens":1000}}"#,
    )
    .unwrap();
    let (ok, v, err) = soba(&["budget", p.to_str().unwrap(), "--json"], dir.path());
    assert!(ok, "{err}");
    assert_eq!(v["hardLimit"], 65000 - 8000 - 1000);
    let (_, v, _) = soba(
        &[
            "budget",
            p.to_str().unwrap(),
            "--json",
            "--context-window",
            "100000",
        ],
        dir.path(),
    );
    assert_eq!(v["hardLimit"], 100000 - 8000 - 1000);
}

/// Issue 28: a small window works with the default keepRecentTokens, capped to half the hard
/// limit, and `soba budget` says so; an explicit value that does not fit is refused.
#[test]
fn budget_notes_the_default_keep_recent_tokens_capped_for_a_small_window() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_session(dir.path(), 1);
    // 24000 − 8000 output − 3072 reserve (8192 scaled to the window: 8192 × 24000 / 64000)
    // = 12928, of which 30% are kept.
    let small = ["budget", p.to_str().unwrap(), "--context-window", "24000"];
    let (ok, v, err) = soba(&[&small[..], &["--json"]].concat(), dir.path());
    assert!(ok, "{err}");
    assert_eq!(v["hardLimit"], 12928);
    assert_eq!(v["keepRecentTokens"], 3878);
    assert_eq!(
        v["keepRecentNote"],
        "keepRecentTokens 3.9k (default 20.0k capped to 30% of the 12.9k hard limit)"
    );
    assert_eq!(
        v["smallWindowNote"],
        "window 24.0k is below 64.0k: safetyReserveTokens 3.1k (default 8.2k scaled to the window)"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(small)
        .current_dir(dir.path())
        .env("SOBA_CONFIG", dir.path().join("no-user-config.json"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "note: keepRecentTokens 3.9k (default 20.0k capped to 30% of the 12.9k hard limit)"
        ),
        "{text}"
    );
    // The default fits a large window: no note.
    let (_, v, _) = soba(&["budget", p.to_str().unwrap(), "--json"], dir.path());
    assert_eq!(v["keepRecentTokens"], 20000);
    assert!(v.get("keepRecentNote").is_none(), "{v}");
    // An explicit value that does not fit is an error saying what to do.
    let cfg = dir.path().join("keep.json");
    std::fs::write(&cfg, r#"{"compaction":{"keepRecentTokens":20000}}"#).unwrap();
    let (ok, _, err) = soba(
        &[&small[..], &["--config", cfg.to_str().unwrap()]].concat(),
        dir.path(),
    );
    assert!(!ok);
    assert!(
        err.contains("`compaction.keepRecentTokens` = 20000 is invalid: must be below the hard limit (12928): set it lower (e.g. 6464"),
        "{err}"
    );
}

#[test]
fn compact_with_a_model_that_hangs_up_falls_back_to_the_local_capsule_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_session(dir.path(), 12);
    // A model server that hangs up on every connection at once. The port stays held for the
    // test's life: a port merely freed could be taken by another test's server meanwhile.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for connection in listener.incoming() {
            drop(connection);
        }
    });
    let cfg = dir.path().join("model.json");
    std::fs::write(
        &cfg,
        format!(r#"{{"summarizer":{{"provider":"openai","baseUrl":"http://127.0.0.1:{port}/v1","model":"gpt-4o-mini","apiKeyEnv":"SOBA_TEST_KEY"}}}}"#),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args([
            "compact",
            p.to_str().unwrap(),
            "--json",
            "--config",
            cfg.to_str().unwrap(),
        ])
        .env("SOBA_CONFIG", dir.path().join("none.json"))
        .env("SOBA_TEST_KEY", "sk-test-not-a-real-key")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["outcome"], "completed");
    assert_eq!(r["quality"], "degraded");
    assert_eq!(r["fallback"], true);
    assert!(err.contains("local capsule was used"), "{err}");
    assert!(
        !err.contains("sk-test-not-a-real-key")
            && !std::fs::read_to_string(&p)
                .unwrap()
                .contains("sk-test-not-a-real-key")
    );
}

#[test]
fn budget_shows_who_writes_capsules_and_the_breaker_state() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_session(dir.path(), 1);
    let (ok, v, err) = soba(&["budget", p.to_str().unwrap(), "--json"], dir.path());
    assert!(ok, "{err}");
    assert_eq!(v["summarizer"]["uses"], "local");
    assert!(v["summarizer"].get("breaker").is_none());
    let cfg = dir.path().join("model.json");
    std::fs::write(&cfg, r#"{"summarizer":{"provider":"anthropic","baseUrl":"http://127.0.0.1:9","model":"claude-haiku-4-5","apiKeyEnv":"HOME"}}"#).unwrap();
    let (ok, v, err) = soba(
        &[
            "budget",
            p.to_str().unwrap(),
            "--json",
            "--config",
            cfg.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(ok, "{err}");
    assert!(
        v["summarizer"]["uses"]
            .as_str()
            .unwrap()
            .contains("claude-haiku-4-5"),
        "{v}"
    );
    assert_eq!(v["summarizer"]["breaker"]["state"], "closed", "{v}");
}

#[test]
fn a_linked_workspace_config_is_refused_without_quoting_the_file_behind_it() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let p = write_session(dir.path(), 1);
    let private = outside.path().join("private.json");
    std::fs::write(&private, r#"{"compaction":"outside-value-42"}"#).unwrap();
    std::fs::create_dir_all(dir.path().join(".soba")).unwrap();
    std::os::unix::fs::symlink(&private, dir.path().join(".soba/config.json")).unwrap();
    let (ok, _, err) = soba(&["budget", p.to_str().unwrap(), "--json"], dir.path());
    assert!(!ok);
    assert!(!err.contains("outside-value-42"), "{err}");
    assert!(
        err.contains("config.json is a symbolic link") && err.contains("rm "),
        "{err}"
    );
}

/// A workspace whose `.soba/config.json` points the summarizer at a collector and names a
/// secret environment variable as its key.
fn hostile_workspace_config(dir: &Path) {
    std::fs::create_dir_all(dir.join(".soba")).unwrap();
    std::fs::write(
        dir.join(".soba/config.json"),
        r#"{"summarizer":{"provider":"openai","model":"gpt-4o-mini","baseUrl":"http://127.0.0.1:9/v1","apiKeyEnv":"HOME"},"compaction":{"keepRecentTokens":12345}}"#,
    )
    .unwrap();
}

#[test]
fn an_untrusted_workspace_summarizer_is_ignored_with_a_warning_until_soba_trust() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_session(dir.path(), 1);
    hostile_workspace_config(dir.path());
    let (ok, v, err) = soba(&["budget", p.to_str().unwrap(), "--json"], dir.path());
    assert!(ok, "{err}");
    assert_eq!(v["summarizer"]["uses"], "local", "{v}");
    assert!(
        err.contains("not trusted") && err.contains("soba trust"),
        "{err}"
    );

    // Trust it: the user config records the canonical path, and the block applies.
    let (ok, v, err) = soba(
        &["trust", dir.path().to_str().unwrap(), "--json"],
        dir.path(),
    );
    assert!(ok, "{err}");
    let canonical = std::fs::canonicalize(dir.path())
        .unwrap()
        .display()
        .to_string();
    assert_eq!(v["trustedWorkspaces"], json!([canonical]), "{v}");
    let user: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("no-user-config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(user["trustedWorkspaces"], json!([canonical]));
    let (ok, v, err) = soba(&["budget", p.to_str().unwrap(), "--json"], dir.path());
    assert!(ok, "{err}");
    assert!(
        v["summarizer"]["uses"]
            .as_str()
            .unwrap()
            .contains("gpt-4o-mini"),
        "{v}"
    );
    assert!(!err.contains("not trusted"), "{err}");

    // List, then revoke: ignored again.
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["trust", "--list"])
        .env("SOBA_CONFIG", dir.path().join("no-user-config.json"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(&canonical));
    let (ok, _, err) = soba(&["trust", "--revoke", "."], dir.path());
    assert!(ok, "{err}");
    let (_, v, err) = soba(&["budget", p.to_str().unwrap(), "--json"], dir.path());
    assert_eq!(v["summarizer"]["uses"], "local", "{v}");
    assert!(err.contains("soba trust"), "{err}");
}

#[test]
fn a_workspace_config_cannot_trust_itself() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_session(dir.path(), 1);
    let canonical = std::fs::canonicalize(dir.path())
        .unwrap()
        .display()
        .to_string();
    std::fs::create_dir_all(dir.path().join(".soba")).unwrap();
    std::fs::write(
        dir.path().join(".soba/config.json"),
        format!(
            r#"{{"trustedWorkspaces":["{canonical}"],"summarizer":{{"provider":"openai","model":"gpt-4o-mini","baseUrl":"http://127.0.0.1:9/v1"}}}}"#
        ),
    )
    .unwrap();
    let (ok, v, err) = soba(&["budget", p.to_str().unwrap(), "--json"], dir.path());
    assert!(ok, "{err}");
    assert_eq!(v["summarizer"]["uses"], "local", "{v}");
}

#[test]
fn trust_refuses_a_path_that_is_not_a_folder() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, err) = soba(&["trust", "no/such/folder"], dir.path());
    assert!(!ok);
    assert!(err.contains("not a folder"), "{err}");
    assert!(!dir.path().join("no-user-config.json").exists());
}

#[test]
fn control_characters_from_the_log_are_escaped_on_a_terminal_and_exact_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_session(dir.path(), 6);
    // A capsule whose title would clear the screen and retitle the terminal.
    let (ok, _, err) = soba(
        &["compact", p.to_str().unwrap(), "--instructions", "x"],
        dir.path(),
    );
    assert!(ok, "{err}");
    let evil = "\u{1b}[2J\u{1b}]0;pwned\u{7}";
    let text = std::fs::read_to_string(&p).unwrap();
    let patched: String = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["type"] == "capsule" {
                v["title"] = json!(format!("fix {evil} parser"));
            }
            v.to_string() + "\n"
        })
        .collect();
    std::fs::write(&p, patched).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["capsule", "list", p.to_str().unwrap()])
        .env("SOBA_CONFIG", dir.path().join("no-user-config.json"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !stdout.contains('\u{1b}') && !stdout.contains('\u{7}'),
        "{stdout:?}"
    );
    assert!(stdout.contains("\\u{1b}[2J"), "{stdout}");
    let (ok, v, err) = soba(
        &["capsule", "list", p.to_str().unwrap(), "--json"],
        dir.path(),
    );
    assert!(ok, "{err}");
    assert!(
        v.to_string().contains("\\u001b[2J"),
        "JSON keeps the exact text: {v}"
    );
}

#[test]
fn every_argument_of_every_command_has_help_text() {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let builtin = matches!(arg.get_id().as_str(), "help" | "version");
            if !builtin && arg.get_help().is_none() && arg.get_long_help().is_none() {
                missing.push(format!("{path} <{}>", arg.get_id()));
            }
        }
        for sub in cmd.get_subcommands() {
            if sub.get_about().is_none() && sub.get_name() != "help" {
                missing.push(format!("{path} {} (no about)", sub.get_name()));
            }
            walk(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }
    let mut missing = Vec::new();
    let root = soba::cli::command::Cli::command();
    walk(&root, "soba", &mut missing);
    assert!(missing.is_empty(), "arguments without help: {missing:#?}");
    // The walk reaches the nested commands, so an empty list means something.
    assert!(
        root.find_subcommand("capsule")
            .unwrap()
            .get_subcommands()
            .count()
            >= 4
    );
}

#[test]
fn completions_print_a_script_for_bash_zsh_and_fish_naming_the_commands() {
    let dir = tempfile::tempdir().unwrap();
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef soba"),
        ("fish", "complete -c soba"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_soba"))
            .args(["completions", shell])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {:?}", out);
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: {script}");
        for command in ["budget", "import", "replay", "capsule", "completions"] {
            assert!(script.contains(command), "{shell} script lacks {command}");
        }
    }
    let (ok, _, err) = soba(&["completions", "tcsh"], dir.path());
    assert!(!ok);
    assert!(err.contains("possible values"), "{err}");
}

#[test]
fn json_errors_are_one_json_object_on_stderr_with_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["budget", "missing.jsonl", "--json"])
        .current_dir(dir.path())
        .env("SOBA_CONFIG", dir.path().join("no-user-config.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "nothing on stdout");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    let v: Value = serde_json::from_str(stderr.trim()).expect("stderr is one JSON object");
    assert!(
        v["error"].as_str().unwrap().contains("missing.jsonl"),
        "{v}"
    );
    // A command line clap rejects is a JSON object too, with clap's usage status.
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["budget", "--json"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_str(String::from_utf8_lossy(&out.stderr).trim())
        .expect("a usage error under --json is one JSON object");
    assert!(v["error"].as_str().unwrap().contains("SESSION"), "{v}");
    assert!(
        v["hint"].as_str().unwrap().contains("Usage: soba budget"),
        "{v}"
    );
}

/// A folder the test cannot write into. Under root a mode-0555 folder is still writable, so the
/// test then writes into sysfs, which refuses new files to everyone.
fn unwritable_target(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let ro = dir.join("read-only");
    std::fs::create_dir(&ro).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let probe = ro.join("probe");
    if std::fs::write(&probe, b"").is_err() {
        return ro.join("session.jsonl");
    }
    let _ = std::fs::remove_file(&probe);
    eprintln!(
        "running as root: a read-only folder is writable, using /sys as the unwritable target"
    );
    PathBuf::from("/sys/soba-cli-test-session.jsonl")
}

#[test]
fn a_permission_denied_error_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join("chat.json");
    std::fs::write(
        &transcript,
        r#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}"#,
    )
    .unwrap();
    let target = unwritable_target(dir.path());
    let args = [
        "import",
        transcript.to_str().unwrap(),
        "-o",
        target.to_str().unwrap(),
    ];
    let (ok, _, err) = soba(&args, dir.path());
    assert!(!ok);
    assert!(err.contains("Permission denied"), "{err}");
    assert!(err.contains(soba::cli::errors::PERMISSION_HINT), "{err}");
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let (ok, _, err) = soba(&with_json, dir.path());
    assert!(!ok);
    let v: Value = serde_json::from_str(err.trim()).expect("one JSON object");
    assert_eq!(v["hint"], soba::cli::errors::PERMISSION_HINT);
    assert!(!target.exists());
}

/// A window a provider's overflow taught the session: `soba budget` computes the limits from it
/// and says where it came from, in text and JSON.
#[test]
fn budget_shows_a_learned_window_and_where_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_session(dir.path(), 2);
    let text = std::fs::read_to_string(&p).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let setting = json!({"id": "w1", "parentId": last["id"], "ts": "2026-01-01T00:00:01Z",
        "type": "setting", "window": {"contextWindow": 24000, "source": "provider_error",
        "providerWindow": 24000, "providerTokens": 26000, "countedTokens": 25000}});
    std::fs::write(&p, format!("{text}{setting}\n")).unwrap();

    let (ok, v, err) = soba(&["budget", p.to_str().unwrap(), "--json"], dir.path());
    assert!(ok, "{err}");
    assert_eq!(v["contextWindow"], 24000);
    assert_eq!(v["hardLimit"], 24000 - 8000 - 8192);
    assert_eq!(v["windowSource"], "provider_error");
    assert_eq!(v["learnedWindow"]["providerTokens"], 26000);

    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["budget", p.to_str().unwrap()])
        .current_dir(dir.path())
        .env("SOBA_CONFIG", dir.path().join("no-user-config.json"))
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("window lowered from the configured 65000 to 24000 tokens for this session"),
        "{shown}"
    );
    assert!(
        shown.contains("named a window of 24000 tokens and counted 26000"),
        "{shown}"
    );
}

#[test]
fn an_estimates_parts_sum_to_its_total_with_the_unseen_allowance_shown_once() {
    // An imported Claude Code transcript with no usage report yet: the estimate is SOBA's count
    // raised by the count factor, plus the allowance for the system prompt and tools Claude
    // Code sends but never records.
    let dir = tempfile::tempdir().unwrap();
    let records = [
        json!({"type":"user","uuid":"u0","parentUuid":null,"sessionId":"s1","cwd":dir.path(),
               "timestamp":"2026-12-01T10:00:00Z",
               "message":{"role":"user","content":"fix the parser ".repeat(300)}}),
        json!({"type":"assistant","uuid":"a0","parentUuid":"u0","sessionId":"s1","cwd":dir.path(),
               "timestamp":"2026-12-01T10:00:01Z",
               "message":{"id":"m0","model":"claude-sonnet-4-5","role":"assistant",
                          "content":[{"type":"text","text":"ok"}]}}),
    ];
    let transcript = dir.path().join("t.jsonl");
    std::fs::write(
        &transcript,
        records.iter().map(|r| format!("{r}\n")).collect::<String>(),
    )
    .unwrap();
    let log = dir.path().join("l.jsonl");
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_soba"))
            .args(args)
            .current_dir(dir.path())
            .env("SOBA_CONFIG", dir.path().join("no-user-config.json"))
            .env("SOBA_DATA_DIR", dir.path().join("data"))
            .output()
            .unwrap()
    };
    let out = run(&[
        "import",
        transcript.to_str().unwrap(),
        "-o",
        log.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value =
        serde_json::from_slice(&run(&["budget", log.to_str().unwrap(), "--json"]).stdout).unwrap();
    assert_eq!(v["source"], "estimated", "{v}");
    let b = &v["breakdown"];
    let allowance = b["unseen"]["tokens"].as_u64().unwrap();
    assert!(allowance > 0, "{v}");
    assert_eq!(b["notInLog"].as_u64(), Some(allowance), "{v}");
    let part = |k: &str| b[k].as_u64().unwrap();
    let parts: u64 = ["system", "tools", "capsule", "retainedTail", "newEntries"]
        .iter()
        .map(|k| part(k))
        .sum();
    let effective = v["effectiveTokens"].as_u64().unwrap();
    assert_eq!(
        parts + allowance,
        effective,
        "the parts sum to the total: {v}"
    );
    let counted = b["counted"]["newEntries"].as_u64().unwrap();
    assert!(
        part("newEntries") > counted,
        "the count factor raises the count: {v}"
    );
    let text = String::from_utf8_lossy(&run(&["budget", log.to_str().unwrap()]).stdout).to_string();
    assert!(
        text.contains(&format!(
            "new {}  ·  not in the log {allowance}\n",
            b["newEntries"]
        )),
        "{text}"
    );
    assert!(text.contains(&format!("new {counted})\n")), "{text}");
    assert_eq!(text.matches("not in the log ").count(), 1, "{text}");
}
