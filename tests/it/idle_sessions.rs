//! Idle open sessions past `daemon.maxIdleSessions`: closed least recently used first, told to
//! clients as `soba/session/closed` with reason `idle`, and opened again from the log by the next
//! request that names them, with nothing lost; the file watch of their workspace follows.

use crate::common::user;
use crate::support::lsp_client;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lsp_client::LspClient;
use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::protocol::code;
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba::daemon::watcher::WatchMode;

const NOTICE: Duration = Duration::from_secs(10);

struct Env {
    base: tempfile::TempDir,
    daemon: Arc<Daemon>,
}

impl Env {
    fn new(max_idle_sessions: usize, watch: Option<WatchMode>) -> Env {
        let base = tempfile::tempdir().unwrap();
        let daemon = Daemon::new(
            Paths::under(&base.path().join("soba")),
            DaemonOptions {
                watch,
                max_idle_sessions,
                ..DaemonOptions::default()
            },
        );
        Env { base, daemon }
    }

    /// A new workspace folder under the test's temporary folder.
    fn workspace(&self, name: &str) -> PathBuf {
        let ws = std::fs::canonicalize(self.base.path()).unwrap().join(name);
        std::fs::create_dir_all(&ws).unwrap();
        ws
    }

    fn connect(&self) -> LspClient {
        let (client_io, server_io) = tokio::io::duplex(1 << 20);
        let (sr, sw) = tokio::io::split(server_io);
        tokio::spawn(soba::daemon::server::serve_connection(
            self.daemon.clone(),
            sr,
            sw,
        ));
        let (cr, cw) = tokio::io::split(client_io);
        LspClient::new(cr, cw)
    }
}

/// Open a new session in `ws` with two entries; its id and the append's answer.
async fn session_with_history(c: &LspClient, ws: &Path) -> (String, Value) {
    let opened = c
        .request(
            "soba/session/open",
            json!({"workspace": ws, "model": {"name": "gpt-4o"}}),
        )
        .await;
    let id = opened["sessionId"].as_str().unwrap().to_string();
    let appended = c
        .request(
            "soba/session/append",
            json!({"sessionId": id, "entries": [user(&format!("first of {id}")), user("second")]}),
        )
        .await;
    (id, appended)
}

/// The next `soba/session/closed` this client hears; it must be about `id`, for `reason`.
async fn expect_closed(c: &LspClient, id: &str, reason: &str) -> Value {
    let notice = c.expect_notification("soba/session/closed", NOTICE).await;
    assert_eq!(notice["sessionId"], id, "{notice}");
    assert_eq!(notice["reason"], reason, "{notice}");
    notice
}

async fn listed(c: &LspClient, id: &str) -> Value {
    let all = c.request("soba/sessions", json!({})).await;
    all["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sessionId"] == id)
        .cloned()
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn the_least_recently_used_idle_session_is_closed_and_reopened_on_use_with_nothing_lost() {
    let e = Env::new(2, None);
    let ws = e.workspace("project");
    let agent = e.connect();
    agent.initialize(&[&ws], false).await;
    let editor = e.connect();
    editor.initialize(&[&ws], false).await;

    let (first, first_append) = session_with_history(&agent, &ws).await;
    let (second, _) = session_with_history(&agent, &ws).await;
    // The first is used again: the second is now the least recently used. (Reading a budget
    // is no use: it is answered from the session's snapshot.)
    let first_budget = agent
        .request("soba/context", json!({"sessionId": first}))
        .await;
    let (third, _) = session_with_history(&agent, &ws).await;

    let notice = expect_closed(&editor, &second, "idle").await;
    assert_eq!(notice["workspace"], ws.display().to_string());
    let dormant = listed(&editor, &second).await;
    assert_eq!(dormant["inMemory"], false, "{dormant}");
    assert_eq!(dormant["entries"], 2, "{dormant}");
    assert_eq!(listed(&editor, &first).await["inMemory"], true);
    assert_eq!(listed(&editor, &third).await["inMemory"], true);

    // Closed for real: the log is released, whole, for any writer.
    let second_path = PathBuf::from(dormant["path"].as_str().unwrap());
    {
        let (log, _) = soba_core::session::log::SessionLog::open(
            &second_path,
            soba_core::config::Durability::Flush,
        )
        .expect("an idle-closed session's log is released");
        assert_eq!(log.session().len(), 2);
    }

    // Its budget is its last snapshot, exact since its log has not changed: asking for it (as
    // a status bar does on `soba/session/closed`) does not bring it back into memory.
    let before = agent
        .request("soba/budget", json!({"sessionId": second}))
        .await;
    assert_eq!(before["effectiveTokens"], dormant["effectiveTokens"]);
    assert_eq!(before["sessionId"], second.as_str());
    assert_eq!(listed(&editor, &second).await["inMemory"], false);

    // The next request that needs it opens it again before it is answered; it continues
    // where it was.
    let more = agent
        .request(
            "soba/session/append",
            json!({"sessionId": second, "entries": [user("third")]}),
        )
        .await;
    let entry = more["entryIds"][0].as_str().unwrap();
    let context = agent
        .request("soba/context", json!({"sessionId": second, "limit": 10}))
        .await;
    assert!(
        context["effectiveTokens"].as_u64() > before["effectiveTokens"].as_u64(),
        "{context}"
    );
    let log = std::fs::read_to_string(&second_path).unwrap();
    let last: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(last["id"], entry);
    assert_eq!(
        last["parentId"],
        dormant_leaf(&log),
        "the new entry follows the leaf the session had when it was closed"
    );

    // Waking it made three idle sessions again: the least recently used one, the first, goes.
    expect_closed(&editor, &first, "idle").await;
    let again = agent
        .request("soba/budget", json!({"sessionId": first}))
        .await;
    assert_eq!(again["effectiveTokens"], first_budget["effectiveTokens"]);
    let more = agent
        .request(
            "soba/session/append",
            json!({"sessionId": first, "entries": [user("later")]}),
        )
        .await;
    assert_eq!(
        more["budget"]["sessionId"], first,
        "{more} after {first_append}"
    );
}

/// The leaf before the last line of a log: the entry the last one was appended after.
fn dormant_leaf(log: &str) -> Value {
    let lines: Vec<&str> = log.lines().collect();
    let before: Value = serde_json::from_str(lines[lines.len() - 2]).unwrap();
    before["id"].clone()
}

#[tokio::test]
async fn a_workspaces_active_session_is_reopened_for_requests_that_name_only_the_workspace() {
    let e = Env::new(1, None);
    let (ws_a, ws_b) = (e.workspace("a"), e.workspace("b"));
    let agent = e.connect();
    agent.initialize(&[&ws_a, &ws_b], false).await;
    let editor = e.connect();
    editor.initialize(&[&ws_a], false).await;

    let (a, appended) = session_with_history(&agent, &ws_a).await;
    let (_b, _) = session_with_history(&agent, &ws_b).await;
    expect_closed(&editor, &a, "idle").await;
    assert_eq!(listed(&editor, &a).await["active"], true);

    // The editor asks by workspace, as a status bar does: still the same session, from its
    // snapshot; a request that needs the session opens it again.
    let budget = editor
        .request("soba/budget", json!({"workspace": ws_a}))
        .await;
    assert_eq!(budget["sessionId"], a.as_str());
    assert_eq!(
        budget["effectiveTokens"],
        appended["budget"]["effectiveTokens"]
    );
    assert_eq!(listed(&editor, &a).await["inMemory"], false);
    let context = editor
        .request("soba/context", json!({"workspace": ws_a}))
        .await;
    assert_eq!(context["sessionId"], a.as_str());
    assert_eq!(context["effectiveTokens"], budget["effectiveTokens"]);
    assert_eq!(listed(&editor, &a).await["inMemory"], true);
    let reopened = agent
        .request(
            "soba/session/open",
            json!({"workspace": ws_a, "create": false}),
        )
        .await;
    assert_eq!(reopened["sessionId"], a.as_str());
}

#[tokio::test]
async fn a_session_with_an_inference_in_flight_stays_until_its_agent_disconnects() {
    let e = Env::new(1, None);
    let ws = e.workspace("project");
    let editor = e.connect();
    editor.initialize(&[&ws], false).await;
    let agent = e.connect();
    agent.initialize(&[&ws], false).await;
    let (busy, _) = session_with_history(&agent, &ws).await;
    let preflight = agent
        .request("soba/preflight", json!({"sessionId": busy}))
        .await;
    assert!(preflight["messages"].is_array(), "{preflight}");

    // Two more sessions from another agent: the one the inference runs in is not idle.
    let other = e.connect();
    other.initialize(&[&ws], false).await;
    let (second, _) = session_with_history(&other, &ws).await;
    let (_third, _) = session_with_history(&other, &ws).await;
    expect_closed(&editor, &second, "idle").await;
    assert_eq!(listed(&editor, &busy).await["inMemory"], true);

    // The agent goes away mid-inference: nothing will end it, so the session is idle now.
    agent.close().await;
    expect_closed(&editor, &busy, "idle").await;
    assert_eq!(listed(&editor, &busy).await["inMemory"], false);
}

#[tokio::test]
async fn a_workspace_stops_being_watched_only_when_none_of_its_sessions_is_in_memory() {
    let e = Env::new(1, Some(WatchMode::Native));
    let (ws_w, ws_v) = (e.workspace("w"), e.workspace("v"));
    let agent = e.connect();
    agent.initialize(&[&ws_w, &ws_v], false).await;
    let editor = e.connect();
    editor.initialize(&[&ws_w, &ws_v], false).await;

    let (w1, _) = session_with_history(&agent, &ws_w).await;
    let (w2, _) = session_with_history(&agent, &ws_w).await;
    expect_closed(&editor, &w1, "idle").await;
    assert_eq!(e.daemon.watched_workspaces(), vec![ws_w.clone()]);

    // The live session of the workspace still hears its changes.
    std::fs::write(ws_w.join("edited.rs"), "fn main() {}\n").unwrap();
    wait_for_file_entry(&agent, &w2, "edited.rs").await;

    let (_v1, _) = session_with_history(&agent, &ws_v).await;
    expect_closed(&editor, &w2, "idle").await;
    assert_eq!(
        e.daemon.watched_workspaces(),
        vec![ws_v.clone()],
        "no session of w is in memory, so w is not watched"
    );

    // Using a session of w again watches w again (and v, idle now, goes).
    agent
        .request(
            "soba/session/append",
            json!({"sessionId": w1, "entries": [user("back")]}),
        )
        .await;
    expect_closed(&editor, &_v1, "idle").await;
    assert_eq!(e.daemon.watched_workspaces(), vec![ws_w.clone()]);
    // What the watch saw while w1 was dormant and w2 kept it running is in w1 now, once.
    wait_for_file_entry(&agent, &w1, "edited.rs").await;
    let w1_log =
        std::fs::read_to_string(listed(&agent, &w1).await["path"].as_str().unwrap()).unwrap();
    assert_eq!(w1_log.matches("\"edited.rs\"").count(), 1, "{w1_log}");
    std::fs::write(ws_w.join("again.rs"), "fn again() {}\n").unwrap();
    wait_for_file_entry(&agent, &w1, "again.rs").await;
}

/// Wait until the session's log records a change of `name`.
async fn wait_for_file_entry(c: &LspClient, id: &str, name: &str) {
    let path = PathBuf::from(listed(c, id).await["path"].as_str().unwrap());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        let recorded = log.lines().any(|l| {
            serde_json::from_str::<Value>(l)
                .is_ok_and(|v| v["type"] == "file" && v["path"].as_str() == Some(name))
        });
        if recorded {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "session {id} did not record the change of {name}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn closing_a_dormant_session_forgets_it() {
    let e = Env::new(1, None);
    let ws = e.workspace("project");
    let agent = e.connect();
    agent.initialize(&[&ws], false).await;
    let (first, _) = session_with_history(&agent, &ws).await;
    let (_second, _) = session_with_history(&agent, &ws).await;
    expect_closed(&agent, &first, "idle").await;

    let closed = agent
        .request("soba/session/close", json!({"sessionId": first}))
        .await;
    assert_eq!(closed["sessionId"], first.as_str());
    assert!(closed["path"]
        .as_str()
        .unwrap()
        .ends_with(&format!("{first}.jsonl")));
    expect_closed(&agent, &first, "closed").await;
    assert_eq!(listed(&agent, &first).await, Value::Null);
    let err = agent
        .error("soba/budget", json!({"sessionId": first}))
        .await;
    assert_eq!(err["code"], code::UNKNOWN_SESSION, "{err}");
}

#[tokio::test]
async fn a_dormant_session_whose_log_was_removed_is_reported_unknown_and_forgotten() {
    let e = Env::new(1, None);
    let ws = e.workspace("project");
    let agent = e.connect();
    agent.initialize(&[&ws], false).await;
    let (first, _) = session_with_history(&agent, &ws).await;
    let (_second, _) = session_with_history(&agent, &ws).await;
    expect_closed(&agent, &first, "idle").await;
    let path = PathBuf::from(listed(&agent, &first).await["path"].as_str().unwrap());
    std::fs::remove_file(&path).unwrap();

    let err = agent
        .error(
            "soba/session/append",
            json!({"sessionId": first, "entries": [user("lost?")]}),
        )
        .await;
    assert_eq!(err["code"], code::UNKNOWN_SESSION, "{err}");
    assert!(err["message"].as_str().unwrap().contains(&first), "{err}");
    assert_eq!(listed(&agent, &first).await, Value::Null);
    assert!(!path.exists(), "nothing was created in its place");
}

#[test]
fn serve_refuses_a_bad_max_idle_sessions_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(&config, r#"{"daemon": {"maxIdleSessions": 0}}"#).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["serve", "--standalone"])
        .env("SOBA_CONFIG", &config)
        .env("SOBA_DATA_DIR", dir.path().join("data"))
        .env("SOBA_RUNTIME_DIR", dir.path().join("run"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("daemon.maxIdleSessions") && err.contains("at least 1"),
        "{err}"
    );
}

#[tokio::test]
async fn a_session_closed_for_being_idle_opens_again_with_the_settings_it_was_opened_with() {
    let e = Env::new(1, None);
    let ws = e.workspace("project");
    let agent = e.connect();
    agent.initialize(&[&ws], false).await;
    let editor = e.connect();
    editor.initialize(&[&ws], false).await;

    let tuned = agent
        .request(
            "soba/session/open",
            json!({"workspace": ws, "model": {"name": "custom", "contextWindow": 20000, "maxOutputTokens": 2000},
                   "compaction": {"safetyReserveTokens": 1000, "keepRecentTokens": 4000, "auto": false}}),
        )
        .await;
    let id = tuned["sessionId"].as_str().unwrap().to_string();
    assert_eq!(tuned["budget"]["hardLimit"], 17000, "{tuned}");
    let (other, _) = session_with_history(&agent, &ws).await;
    expect_closed(&editor, &id, "idle").await;
    assert_eq!(listed(&editor, &id).await["inMemory"], false);

    // Any request but a budget read opens it again.
    let appended = agent
        .request(
            "soba/session/append",
            json!({"sessionId": id, "entries": [user("after the idle close")]}),
        )
        .await;
    assert!(appended["entryIds"].is_array(), "{appended}");
    assert_eq!(listed(&editor, &id).await["inMemory"], true);
    let budget = agent.request("soba/budget", json!({"sessionId": id})).await;
    assert_eq!(
        budget["hardLimit"], 17000,
        "the session's own reserve: {budget}"
    );
    assert_eq!(budget["autoCompact"], false, "{budget}");
    let plain = agent
        .request("soba/budget", json!({"sessionId": other}))
        .await;
    assert_eq!(
        plain["autoCompact"], true,
        "the other session keeps the defaults"
    );
}
