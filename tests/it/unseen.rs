//! The unseen-context allowance learned across sessions on one machine, through `soba budget`
//! and a private data folder: what a first session of an agent and model showed beyond its log
//! is what the next session's first request allows for; another model starts from the agent's
//! default.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};
use soba_core::budget::unseen_allowance::Agent;
use soba_core::budget::unseen_allowance::Fresh;

/// A Claude Code transcript as SOBA imports it: the header names the agent and the model.
fn write_log(path: &Path, id: &str, model: &str, entries: &[Value]) {
    let header = json!({"type": "session", "version": 1, "id": id, "workspace": "/w",
        "createdAt": "2026-01-01T00:00:00Z",
        "model": {"name": model, "contextWindow": 200000, "maxOutputTokens": 32000},
        "source": {"format": "claude-code", "path": "/t.jsonl"}});
    let mut text = header.to_string() + "\n";
    let mut parent: Option<String> = None;
    for (n, e) in entries.iter().enumerate() {
        let mut e = e.clone();
        let id = format!("e{n}");
        e["id"] = id.clone().into();
        e["parentId"] = parent.clone().into();
        e["ts"] = "2026-01-01T00:00:00Z".into();
        text += &(e.to_string() + "\n");
        parent = Some(id);
    }
    std::fs::write(path, text).unwrap();
}

fn user(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "text", "text": text}]})
}

fn reply(input: u64) -> Value {
    json!({"type": "message", "role": "assistant",
           "content": [{"type": "text", "text": "done"}], "usage": {"input": input, "output": 20}})
}

fn budget(log: &Path, data: &Path) -> (Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["budget", "--json"])
        .arg(log)
        .env("SOBA_DATA_DIR", data)
        .env("SOBA_CONFIG", data.join("no-user-config.json"))
        .current_dir(log.parent().unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        serde_json::from_slice(&out.stdout).unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn unseen(report: &Value) -> (u64, String, u64) {
    let u = &report["breakdown"]["unseen"];
    (
        u["tokens"].as_u64().unwrap(),
        u["source"].as_str().unwrap().to_string(),
        u["learnedFrom"].as_u64().unwrap(),
    )
}

#[test]
fn a_second_session_starts_from_what_the_first_taught_and_another_model_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let default = Agent::ClaudeCode.default_unseen(Fresh::Start).unwrap();

    // The first session, before any report: the agent's default.
    let first = dir.path().join("first.jsonl");
    write_log(&first, "s1", "claude-opus-4-1", &[user("fix the parser")]);
    let (r, _) = budget(&first, &data);
    assert_eq!(unseen(&r), (default, "default".into(), 0));
    assert_eq!(r["source"], "estimated");
    let counted = r["effectiveTokens"].as_u64().unwrap() - default;
    assert_eq!(r["breakdown"]["notInLog"], default);
    assert_eq!(
        r["breakdown"]["unseenText"],
        format!(
            "not in the log: ~{}, default for Claude Code",
            soba_core::util::human_tokens(default)
        )
    );

    // Its first report: 18,000 tokens beyond the log (a smaller system prompt than the
    // default allows for). The budget now stands on it; the store learns the gap.
    write_log(
        &first,
        "s1",
        "claude-opus-4-1",
        &[user("fix the parser"), reply(counted + 18_000)],
    );
    let (r, _) = budget(&first, &data);
    assert_eq!(r["source"], "provider_usage");
    assert_ne!(unseen(&r).1, "default");
    let store = data.join("unseen-context.json");
    let text = std::fs::read_to_string(&store).unwrap();
    assert!(text.contains("claude-opus-4-1"), "{text}");

    // The second session of the same agent and model starts from what the first showed.
    let second = dir.path().join("second.jsonl");
    write_log(&second, "s2", "claude-opus-4-1", &[user("fix the parser")]);
    let (r, _) = budget(&second, &data);
    let (tokens, source, learned_from) = unseen(&r);
    assert_eq!((source.as_str(), learned_from), ("learned", 1));
    // The first request's count goes through the provisional factor; the gap is what remains.
    assert!(
        (17_900..=18_000).contains(&tokens),
        "learned {tokens}, the first session showed 18,000 beyond its count"
    );
    assert_eq!(
        r["breakdown"]["unseenText"],
        format!(
            "not in the log: ~{}, learned from 1 Claude Code session",
            soba_core::util::human_tokens(tokens)
        )
    );

    // Another model of the same agent has learned nothing.
    let other = dir.path().join("other.jsonl");
    write_log(&other, "s3", "claude-haiku-4-5", &[user("fix the parser")]);
    let (r, _) = budget(&other, &data);
    assert_eq!(unseen(&r), (default, "default".into(), 0));
}

#[test]
fn a_corrupt_store_is_a_warning_and_the_budget_still_reads() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let store = data.join("unseen-context.json");
    std::fs::write(&store, "{\"version\": 1, \"agents\": [").unwrap();
    let log = dir.path().join("s.jsonl");
    write_log(
        &log,
        "s1",
        "claude-opus-4-1",
        &[user("hello"), reply(20_000)],
    );
    let (r, stderr) = budget(&log, &data);
    assert!(stderr.contains("unseen-context.json"), "{stderr}");
    assert_eq!(r["source"], "provider_usage");
    // Learning resumes; what the file held is kept beside it.
    assert_eq!(
        std::fs::read_to_string(data.join("unseen-context.json.corrupt")).unwrap(),
        "{\"version\": 1, \"agents\": ["
    );
    let fresh: Value = serde_json::from_str(&std::fs::read_to_string(&store).unwrap()).unwrap();
    assert!(fresh["agents"]["claude-code"]["claude-opus-4-1"].is_array());
}

/// The daemon opens a followed agent's session with what this machine learned for its agent and
/// model, and learns from the session's own first report as it arrives.
#[tokio::test]
async fn the_daemon_starts_from_what_the_machine_learned_and_learns_from_the_session() {
    use crate::support::lsp_client::connect;
    use soba::daemon::paths::Paths;
    use soba::daemon::registry::{Daemon, DaemonOptions};

    let base = tempfile::tempdir().unwrap();
    let workspace = std::fs::canonicalize(base.path()).unwrap().join("project");
    std::fs::create_dir_all(&workspace).unwrap();
    let paths = Paths::under(&base.path().join("soba"));
    // What an earlier session of Claude Code on this model showed beyond its log.
    std::fs::create_dir_all(&paths.data_dir).unwrap();
    let store = paths.data_dir.join("unseen-context.json");
    std::fs::write(
        &store,
        json!({"version": 1, "agents": {"claude-code": {"claude-opus-4-1": [
            {"session": "earlier", "start": 23_000}]}}})
        .to_string(),
    )
    .unwrap();
    // A followed Claude Code session with one prompt and no report yet.
    let sessions = paths.sessions_dir(&workspace);
    std::fs::create_dir_all(&sessions).unwrap();
    let log = sessions.join("followed.jsonl");
    write_log(
        &log,
        "followed",
        "claude-opus-4-1",
        &[user("fix the parser")],
    );
    let text = std::fs::read_to_string(&log)
        .unwrap()
        .replace("\"/w\"", &serde_json::to_string(&workspace).unwrap());
    std::fs::write(&log, text).unwrap();

    let d = Daemon::new(
        paths,
        DaemonOptions {
            watch: None,
            extra_config: None,
            summarizer: None,
            ..DaemonOptions::default()
        },
    );
    let c = connect(&d);
    c.initialize(&[&workspace], false).await;
    let opened = c
        .request(
            "soba/session/open",
            json!({"workspace": workspace, "sessionId": "followed"}),
        )
        .await;
    let budget = &opened["budget"];
    assert_eq!(unseen(budget), (23_000, "learned".into(), 1), "{budget}");
    assert_eq!(
        budget["breakdown"]["unseenText"],
        "not in the log: ~23.0k, learned from 1 Claude Code session"
    );
    let counted = budget["effectiveTokens"].as_u64().unwrap() - 23_000;

    // The session's first report: 19,000 tokens beyond its log. The store learns it.
    c.request(
        "soba/session/append",
        json!({"sessionId": "followed", "entries": [
            {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "on it"}],
             "usage": {"input": counted + 19_000, "output": 20}}]}),
    )
    .await;
    let learned: Value = serde_json::from_str(&std::fs::read_to_string(&store).unwrap()).unwrap();
    let records = learned["agents"]["claude-code"]["claude-opus-4-1"]
        .as_array()
        .unwrap();
    let this = records
        .iter()
        .find(|r| r["session"] == "followed")
        .expect("the session's gap is recorded");
    let gap = this["start"].as_u64().unwrap();
    assert!((18_900..=19_000).contains(&gap), "{gap}");
    assert_eq!(records.len(), 2, "the earlier session is kept");
}
