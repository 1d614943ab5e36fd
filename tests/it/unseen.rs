//! The unseen-context allowance learned across sessions on one machine, in a private data
//! folder: what a first session of an agent and model showed beyond its log is what the next
//! session's first request allows for; another model starts from the agent's default. Only a
//! writer of sessions (the daemon) teaches the file; `soba budget` reads it and never writes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba_core::budget::unseen_allowance::Agent;
use soba_core::budget::unseen_allowance::Fresh;

use crate::support::lsp_client::{connect, LspClient};

/// A Claude Code transcript as SOBA imports it: the header names the agent and the model.
fn write_log(path: &Path, id: &str, model: &str, entries: &[Value]) {
    write_log_in(path, "/w", id, model, entries)
}

fn write_log_in(path: &Path, workspace: &str, id: &str, model: &str, entries: &[Value]) {
    let header = json!({"type": "session", "version": 1, "id": id, "workspace": workspace,
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

/// A daemon over a private base folder, with one workspace: the writer that learns.
struct Machine {
    _base: tempfile::TempDir,
    workspace: PathBuf,
    paths: Paths,
}

impl Machine {
    fn new() -> Machine {
        let base = tempfile::tempdir().unwrap();
        let workspace = std::fs::canonicalize(base.path()).unwrap().join("project");
        std::fs::create_dir_all(&workspace).unwrap();
        let paths = Paths::under(&base.path().join("soba"));
        std::fs::create_dir_all(&paths.data_dir).unwrap();
        Machine {
            _base: base,
            workspace,
            paths,
        }
    }

    fn data(&self) -> &Path {
        &self.paths.data_dir
    }

    fn store(&self) -> PathBuf {
        self.data().join("unseen-context.json")
    }

    /// A Claude Code log of this workspace, where the daemon finds it.
    fn place(&self, id: &str, model: &str, entries: &[Value]) -> PathBuf {
        let sessions = self.paths.sessions_dir(&self.workspace);
        std::fs::create_dir_all(&sessions).unwrap();
        let log = sessions.join(format!("{id}.jsonl"));
        let workspace = self.workspace.display().to_string();
        write_log_in(&log, &workspace, id, model, entries);
        log
    }

    async fn daemon(&self) -> (Arc<Daemon>, LspClient) {
        let d = Daemon::new(
            self.paths.clone(),
            DaemonOptions {
                watch: None,
                extra_config: None,
                summarizer: None,
                ..DaemonOptions::default()
            },
        );
        let c = connect(&d);
        c.initialize(&[&self.workspace], false).await;
        (d, c)
    }

    async fn open(&self, c: &LspClient, id: &str) -> Value {
        c.request(
            "soba/session/open",
            json!({"workspace": self.workspace, "sessionId": id}),
        )
        .await["budget"]
            .clone()
    }
}

#[tokio::test]
async fn a_second_session_starts_from_what_the_first_taught_and_another_model_does_not() {
    let m = Machine::new();
    let default = Agent::ClaudeCode.default_unseen(Fresh::Start).unwrap();

    // The first session, before any report: the agent's default.
    let first = m.place("s1", "claude-opus-4-1", &[user("fix the parser")]);
    let (r, _) = budget(&first, m.data());
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
    // default allows for), appended by the daemon, which learns the gap.
    let (_d, c) = m.daemon().await;
    let opened = m.open(&c, "s1").await;
    assert_eq!(unseen(&opened), (default, "default".into(), 0), "{opened}");
    c.request(
        "soba/session/append",
        json!({"sessionId": "s1", "entries": [
            {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "done"}],
             "usage": {"input": counted + 18_000, "output": 20}}]}),
    )
    .await;
    let text = std::fs::read_to_string(m.store()).unwrap();
    assert!(text.contains("claude-opus-4-1"), "{text}");
    let (r, _) = budget(&first, m.data());
    assert_eq!(r["source"], "provider_usage");

    // The second session of the same agent and model starts from what the first showed.
    let second = m.place("s2", "claude-opus-4-1", &[user("fix the parser")]);
    let (r, _) = budget(&second, m.data());
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
    let other = m.place("s3", "claude-haiku-4-5", &[user("fix the parser")]);
    let (r, _) = budget(&other, m.data());
    assert_eq!(unseen(&r), (default, "default".into(), 0));
}

fn bytes_and_mtime(path: &Path) -> Option<(Vec<u8>, std::time::SystemTime)> {
    let bytes = std::fs::read(path).ok()?;
    Some((bytes, std::fs::metadata(path).unwrap().modified().unwrap()))
}

/// `soba budget` reads what this machine learned and never writes it: the same log reads the
/// same whatever other logs were inspected before, and a log with a report teaches nothing.
#[test]
fn soba_budget_never_writes_the_learned_file() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let store = data.join("unseen-context.json");
    let inspected = dir.path().join("inspected.jsonl");
    // A session that showed 90,000 tokens beyond its log: a reader must not learn it.
    write_log(
        &inspected,
        "inspected",
        "claude-opus-4-1",
        &[user("hello"), reply(90_000)],
    );

    // No file yet: a budget does not create one.
    let (r, _) = budget(&inspected, &data);
    assert_eq!(r["source"], "provider_usage");
    assert!(!store.exists(), "a reader created the learned file");

    // A file with what an earlier session taught: left as it was, bytes and time.
    let earlier = json!({"version": 1, "agents": {"claude-code": {"claude-opus-4-1": [
        {"session": "earlier", "start": 23_000}]}}})
    .to_string();
    std::fs::write(&store, &earlier).unwrap();
    let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&store)
        .unwrap()
        .set_modified(an_hour_ago)
        .unwrap();
    let before = bytes_and_mtime(&store).unwrap();
    let fresh = dir.path().join("fresh.jsonl");
    write_log(&fresh, "fresh", "claude-opus-4-1", &[user("hello")]);
    let (first_read, _) = budget(&fresh, &data);
    assert_eq!(unseen(&first_read), (23_000, "learned".into(), 1));
    budget(&inspected, &data);
    assert_eq!(
        bytes_and_mtime(&store).unwrap(),
        before,
        "a reader wrote the learned file"
    );
    let (again, _) = budget(&fresh, &data);
    assert_eq!(
        again["effectiveTokens"], first_read["effectiveTokens"],
        "inspecting another log changed this one's budget"
    );
}

/// A corrupt file: `soba budget` warns and reads with the defaults, leaving the file alone;
/// the daemon's next write keeps it beside the new one.
#[tokio::test]
async fn a_corrupt_store_is_a_warning_and_the_writer_keeps_it_aside() {
    let m = Machine::new();
    let corrupt = "{\"version\": 1, \"agents\": [";
    std::fs::write(m.store(), corrupt).unwrap();
    let log = m.place("s1", "claude-opus-4-1", &[user("hello"), reply(20_000)]);
    let (r, stderr) = budget(&log, m.data());
    assert!(stderr.contains("unseen-context.json"), "{stderr}");
    assert_eq!(r["source"], "provider_usage");
    assert_eq!(std::fs::read_to_string(m.store()).unwrap(), corrupt);
    assert!(!m.data().join("unseen-context.json.corrupt").exists());

    // The daemon opens the session and learns from its report; what the file held is kept.
    let (_d, c) = m.daemon().await;
    m.open(&c, "s1").await;
    assert_eq!(
        std::fs::read_to_string(m.data().join("unseen-context.json.corrupt")).unwrap(),
        corrupt
    );
    let fresh: Value = serde_json::from_str(&std::fs::read_to_string(m.store()).unwrap()).unwrap();
    assert!(fresh["agents"]["claude-code"]["claude-opus-4-1"].is_array());
}

/// The daemon opens a followed agent's session with what this machine learned for its agent and
/// model, and learns from the session's own first report as it arrives.
#[tokio::test]
async fn the_daemon_starts_from_what_the_machine_learned_and_learns_from_the_session() {
    let m = Machine::new();
    // What an earlier session of Claude Code on this model showed beyond its log.
    std::fs::write(
        m.store(),
        json!({"version": 1, "agents": {"claude-code": {"claude-opus-4-1": [
            {"session": "earlier", "start": 23_000}]}}})
        .to_string(),
    )
    .unwrap();
    // A followed Claude Code session with one prompt and no report yet.
    m.place("followed", "claude-opus-4-1", &[user("fix the parser")]);
    let (_d, c) = m.daemon().await;
    let budget = m.open(&c, "followed").await;
    assert_eq!(unseen(&budget), (23_000, "learned".into(), 1), "{budget}");
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
    let learned: Value =
        serde_json::from_str(&std::fs::read_to_string(m.store()).unwrap()).unwrap();
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

/// One session far above what the others showed teaches nothing: the next session's first
/// request allows for what the others showed.
#[test]
fn one_outlier_session_does_not_move_what_the_next_session_allows_for() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let store = json!({"version": 1, "agents": {"claude-code": {"claude-opus-4-1": [
        {"session": "a", "start": 18_000},
        {"session": "b", "start": 21_000},
        {"session": "poisoned", "start": 190_000},
        {"session": "c", "start": 19_000}]}}});
    std::fs::write(data.join("unseen-context.json"), store.to_string()).unwrap();
    let log = dir.path().join("next.jsonl");
    write_log(&log, "next", "claude-opus-4-1", &[user("hello")]);
    let (r, _) = budget(&log, &data);
    assert_eq!(unseen(&r), (21_000, "learned".into(), 3));
}
