//! End-to-end tests of the daemon over an in-memory, `Content-Length`-framed duplex stream.

use crate::common::{append_parser_turns, user};
use crate::support::lsp_client::{self, connect};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lsp_client::LspClient;
use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::protocol::{code, command_for, METHODS};
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba::daemon::watcher::WatchMode;

struct Env {
    _base: tempfile::TempDir,
    workspace: PathBuf,
    daemon: Arc<Daemon>,
}

fn env_with(watch: Option<WatchMode>) -> Env {
    let base = tempfile::tempdir().unwrap();
    let workspace = std::fs::canonicalize(base.path()).unwrap().join("project");
    std::fs::create_dir_all(&workspace).unwrap();
    let daemon = Daemon::new(
        Paths::under(&base.path().join("soba")),
        DaemonOptions {
            watch,
            extra_config: None,
            summarizer: None,
            ..DaemonOptions::default()
        },
    );
    Env {
        _base: base,
        workspace,
        daemon,
    }
}

fn env() -> Env {
    env_with(None)
}

async fn open(c: &LspClient, ws: &Path) -> String {
    let r = c
        .request("soba/session/open", json!({"workspace": ws}))
        .await;
    r["sessionId"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn initialize_offers_every_method_as_a_command() {
    let e = env();
    let c = connect(&e.daemon);
    let r = c.initialize(&[&e.workspace], false).await;
    let commands: Vec<String> =
        serde_json::from_value(r["capabilities"]["executeCommandProvider"]["commands"].clone())
            .unwrap();
    let expected: Vec<String> = soba::daemon::server::HANDLED
        .iter()
        .map(|m| command_for(m))
        .collect();
    assert_eq!(commands, expected);
    assert_eq!(r["serverInfo"]["name"], "soba");
}

#[tokio::test]
async fn open_append_budget_and_sessions() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let opened = c
        .request(
            "soba/session/open",
            json!({"workspace": e.workspace, "model": {"name": "gpt-4o"}}),
        )
        .await;
    let id = opened["sessionId"].as_str().unwrap().to_string();
    assert!(Path::new(opened["path"].as_str().unwrap()).is_file());
    assert_eq!(opened["budget"]["effectiveTokens"], 0);
    assert_eq!(opened["budget"]["model"], "gpt-4o");
    assert_eq!(opened["budget"]["hardLimit"], 128_000 - 16_384 - 8192);

    let appended = c
        .request(
            "soba/session/append",
            json!({"sessionId": id, "entries": [user("hello there"), user("and more")]}),
        )
        .await;
    let ids = appended["entryIds"].as_array().unwrap();
    assert_eq!(ids.len(), 2);
    assert_eq!(appended["leafId"], ids[1]);
    let tokens = appended["budget"]["effectiveTokens"].as_u64().unwrap();
    assert!(tokens > 0);

    let changed = c
        .expect_notification("soba/budgetChanged", Duration::from_secs(5))
        .await;
    assert_eq!(changed["sessionId"], id.as_str());
    assert_eq!(changed["effectiveTokens"], tokens);

    // The same budget by session, by workspace, and by the client's first folder.
    let by_id = c.request("soba/budget", json!({"sessionId": id})).await;
    let by_ws = c
        .request("soba/budget", json!({"workspace": e.workspace}))
        .await;
    let by_folder = c.request("soba/budget", json!({})).await;
    assert_eq!(by_id, by_ws);
    assert_eq!(by_id, by_folder);
    assert_eq!(by_id["effectiveTokens"], tokens);
    assert_eq!(by_id["compacting"], false);
    assert_eq!(by_id["source"], "estimated");

    let sessions = c
        .request("soba/sessions", json!({"workspace": e.workspace}))
        .await;
    let s = &sessions["sessions"][0];
    assert_eq!(s["sessionId"], id.as_str());
    assert_eq!(s["active"], true);
    assert_eq!(s["entries"], 2);
    assert_eq!(s["effectiveTokens"], tokens);
}

#[tokio::test]
async fn budget_notifications_are_coalesced() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let id = open(&c, &e.workspace).await;
    c.drain(Duration::from_millis(200)).await;
    let appends: Vec<_> = (0..8)
        .map(|i| {
            c.request(
                "soba/session/append",
                json!({"sessionId": id, "entries": [user(&format!("m{i}"))]}),
            )
        })
        .collect();
    futures::future::join_all(appends).await;
    let last = c.request("soba/budget", json!({"sessionId": id})).await;
    let notes: Vec<Value> = c
        .drain(Duration::from_millis(400))
        .await
        .into_iter()
        .filter(|n| n["method"] == "soba/budgetChanged")
        .collect();
    assert!(
        !notes.is_empty() && notes.len() < 8,
        "{} notifications for 8 appends",
        notes.len()
    );
    assert_eq!(
        notes.last().unwrap()["params"]["effectiveTokens"],
        last["effectiveTokens"]
    );
}

#[tokio::test]
async fn rewind_and_auto_compact_are_log_entries() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let id = open(&c, &e.workspace).await;
    let a = c
        .request(
            "soba/session/append",
            json!({"sessionId": id, "entries": [user("one")]}),
        )
        .await;
    let first = a["entryIds"][0].clone();
    c.request(
        "soba/session/append",
        json!({"sessionId": id, "entries": [user("two two two")]}),
    )
    .await;
    let r = c
        .request("soba/rewind", json!({"sessionId": id, "entryId": first}))
        .await;
    assert_eq!(r["leafId"], first);
    assert_eq!(
        r["budget"]["effectiveTokens"],
        a["budget"]["effectiveTokens"]
    );

    let err = c
        .error("soba/rewind", json!({"sessionId": id, "entryId": "nope"}))
        .await;
    assert_eq!(err["code"], code::INVALID_PARAMS);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .starts_with("`entryId`: no entry `nope` in "),
        "{err}"
    );

    c.drain(Duration::from_millis(150)).await;
    let off = c
        .request("soba/autoCompact", json!({"enabled": false}))
        .await;
    assert_eq!(off, json!({"autoCompact": false}));
    let changed = c
        .expect_notification("soba/budgetChanged", Duration::from_secs(5))
        .await;
    assert_eq!(changed["autoCompact"], false);
    let on = c
        .request(
            "soba/autoCompact",
            json!({"sessionId": id, "enabled": true}),
        )
        .await;
    assert_eq!(on["autoCompact"], true);

    // Both survive a reload of the log.
    let path = e.daemon.session(&id).unwrap().path;
    let (s, _) = soba_core::session::log::read_session(&path).unwrap();
    assert_eq!(s.settings_at(s.leaf()).auto_compact, Some(true));
    let types: Vec<&str> = s.entries().iter().map(|e| e.body.type_name()).collect();
    assert_eq!(
        types,
        ["message", "message", "rewind", "setting", "setting"]
    );
}

#[tokio::test]
async fn errors_have_stable_codes_and_name_the_field() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[], false).await;
    let err = c
        .error("soba/budget", json!({"sessionId": "s_missing"}))
        .await;
    assert_eq!(err["code"], code::UNKNOWN_SESSION);
    assert!(err["message"].as_str().unwrap().contains("s_missing"));

    let err = c.error("soba/budget", json!({})).await;
    assert_eq!(
        err["code"],
        code::INVALID_PARAMS,
        "no session and no workspace folder: {err}"
    );

    let err = c.error("soba/session/append", json!({"entries": []})).await;
    assert_eq!(err["code"], code::INVALID_PARAMS);
    assert!(
        err["message"].as_str().unwrap().contains("sessionId"),
        "{err}"
    );

    let err = c
        .error("soba/session/open", json!({"workspace": "relative/path"}))
        .await;
    assert!(
        err["message"].as_str().unwrap().contains("absolute"),
        "{err}"
    );

    let err = c
        .error(
            "soba/session/open",
            json!({"workspace": e.workspace, "sessionId": "s_absent", "create": false}),
        )
        .await;
    assert_eq!(err["code"], code::UNKNOWN_SESSION);

    let err = c
        .error(
            "soba/session/open",
            json!({"workspace": e.workspace, "create": false}),
        )
        .await;
    assert_eq!(
        err["code"],
        code::UNKNOWN_SESSION,
        "no active session yet: {err}"
    );

    let err = c
        .error(
            "soba/session/open",
            json!({"workspace": e.workspace, "sessionId": "../escape"}),
        )
        .await;
    assert_eq!(err["code"], code::INVALID_PARAMS);

    let id = open(&c, &e.workspace).await;
    let err = c.error("soba/session/append", json!({"sessionId": id, "entries": [{"type": "message", "role": "robot", "content": []}]})).await;
    assert!(
        err["message"].as_str().unwrap().contains("entries[0]"),
        "{err}"
    );
    let err = c.error("soba/session/append", json!({"sessionId": id, "entries": [{"type": "message", "role": "user", "content": [], "parentId": "ghost"}]})).await;
    assert!(err["message"].as_str().unwrap().contains("ghost"), "{err}");
    let err = c
        .error(
            "soba/autoCompact",
            json!({"sessionId": id, "enabled": "yes"}),
        )
        .await;
    assert!(
        err["message"].as_str().unwrap().contains("`enabled`"),
        "{err}"
    );
}

#[tokio::test]
async fn a_session_has_one_writer() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[], false).await;
    let id = open(&c, &e.workspace).await;
    // A second daemon on the same data folder (another user session, a stale process).
    let other = Daemon::new(
        e.daemon.paths.clone(),
        DaemonOptions {
            watch: None,
            extra_config: None,
            summarizer: None,
            ..DaemonOptions::default()
        },
    );
    let c2 = connect(&other);
    c2.initialize(&[], false).await;
    let err = c2
        .error(
            "soba/session/open",
            json!({"workspace": e.workspace, "sessionId": id}),
        )
        .await;
    assert_eq!(err["code"], code::SESSION_LOCKED, "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("one writer per session"),
        "{err}"
    );
}

#[tokio::test]
async fn open_returns_the_live_session_and_reloads_from_disk() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[], false).await;
    let id = open(&c, &e.workspace).await;
    c.request(
        "soba/session/append",
        json!({"sessionId": id, "entries": [user("persist me")]}),
    )
    .await;
    let again = c
        .request(
            "soba/session/open",
            json!({"workspace": e.workspace, "sessionId": id}),
        )
        .await;
    assert_eq!(again["sessionId"], id.as_str());
    let active = c
        .request(
            "soba/session/open",
            json!({"workspace": e.workspace, "create": false}),
        )
        .await;
    assert_eq!(active["sessionId"], id.as_str());
    let tokens = again["budget"]["effectiveTokens"].clone();
    c.close().await;

    // A fresh daemon loads the log from disk (the first one is gone with its lock).
    let paths = e.daemon.paths.clone();
    drop(e.daemon);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let fresh = Daemon::new(
        paths,
        DaemonOptions {
            watch: None,
            extra_config: None,
            summarizer: None,
            ..DaemonOptions::default()
        },
    );
    let c = connect(&fresh);
    c.initialize(&[], false).await;
    let reopened = c
        .request(
            "soba/session/open",
            json!({"workspace": e.workspace, "sessionId": id}),
        )
        .await;
    assert_eq!(reopened["budget"]["effectiveTokens"], tokens);
}

#[tokio::test]
async fn execute_command_reaches_every_method() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let opened = c
        .request("workspace/executeCommand", json!({"command": "soba.server.session.open", "arguments": [{"workspace": e.workspace}]}))
        .await;
    let id = opened["sessionId"].as_str().unwrap();
    let budget = c
        .request(
            "workspace/executeCommand",
            json!({"command": "soba.server.budget", "arguments": [{"sessionId": id}]}),
        )
        .await;
    assert_eq!(
        budget,
        c.request("soba/budget", json!({"sessionId": id})).await
    );
    let err = c
        .error(
            "workspace/executeCommand",
            json!({"command": "soba.server.nope", "arguments": []}),
        )
        .await;
    assert_eq!(err["code"], code::INVALID_PARAMS);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("soba.server.budget"),
        "{err}"
    );
    let err = c
        .error(
            "workspace/executeCommand",
            json!({"command": "soba.server.budget", "arguments": [{"sessionId": "s_x"}]}),
        )
        .await;
    assert_eq!(err["code"], code::UNKNOWN_SESSION);
}

#[tokio::test]
async fn flight_of_a_workspace_without_compactions_is_empty() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let id = open(&c, &e.workspace).await;
    assert_eq!(
        c.request("soba/flight", json!({"sessionId": id})).await,
        json!({"records": []})
    );
    assert_eq!(
        c.request("soba/flight", json!({})).await,
        json!({"records": []})
    );
}

#[tokio::test]
async fn clients_only_hear_about_their_workspaces() {
    let e = env();
    let other_ws = e.workspace.parent().unwrap().join("other");
    std::fs::create_dir_all(&other_ws).unwrap();
    let mine = connect(&e.daemon);
    mine.initialize(&[&e.workspace], false).await;
    let theirs = connect(&e.daemon);
    theirs.initialize(&[&other_ws], false).await;
    let id = open(&theirs, &other_ws).await;
    theirs
        .request(
            "soba/session/append",
            json!({"sessionId": id, "entries": [user("x")]}),
        )
        .await;
    let notes = mine.drain(Duration::from_millis(300)).await;
    assert!(
        notes
            .iter()
            .all(|n| n["params"]["workspace"] != other_ws.display().to_string()),
        "{notes:?}"
    );
}

#[tokio::test]
async fn the_watcher_records_files_changed_on_disk() {
    let e = env_with(Some(WatchMode::Native));
    std::fs::write(e.workspace.join(".gitignore"), "*.tmp\n").unwrap();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let id = open(&c, &e.workspace).await;
    c.request(
        "soba/session/append",
        json!({"sessionId": id, "entries": [user("start")]}),
    )
    .await;
    std::fs::create_dir_all(e.workspace.join("src")).unwrap();
    std::fs::write(e.workspace.join("src/lib.rs"), "fn main() {}\n").unwrap();
    std::fs::write(e.workspace.join("scratch.tmp"), "ignored").unwrap();
    std::fs::write(e.workspace.join("README.md"), "# project\n").unwrap();
    let path = e.daemon.session(&id).unwrap().path;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let files = loop {
        let (s, _) = soba_core::session::log::read_session(&path).unwrap();
        let files: Vec<(String, String)> = s
            .entries()
            .iter()
            .filter_map(|e| match &e.body {
                soba_core::session::entry::EntryBody::File(f) => Some((
                    f.path.clone(),
                    serde_json::to_value(f.op)
                        .unwrap()
                        .as_str()
                        .unwrap()
                        .to_string(),
                )),
                _ => None,
            })
            .collect();
        if files.len() >= 2 || tokio::time::Instant::now() > deadline {
            break files;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut files = files;
    files.sort();
    assert_eq!(
        files,
        [
            ("README.md".to_string(), "created".to_string()),
            ("src/lib.rs".to_string(), "created".to_string())
        ]
    );
}

#[tokio::test]
async fn polling_fallback_records_files_too() {
    let e = env_with(Some(WatchMode::Poll));
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let id = open(&c, &e.workspace).await;
    // The first scan ran before the open answered.
    std::fs::write(e.workspace.join("notes.md"), "edited by a formatter").unwrap();
    let path = e.daemon.session(&id).unwrap().path;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(&path).unwrap();
        if text.contains("\"notes.md\"") {
            assert!(text.contains("\"source\":\"watcher\""));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "polling watcher recorded nothing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn polling_fallback_records_edits_of_existing_files() {
    let e = env_with(Some(WatchMode::Poll));
    let file = e.workspace.join("main.rs");
    // Written just before the session opens: the edit below most likely falls in the same
    // second, which a scan comparing whole seconds would miss.
    std::fs::write(&file, "fn main() {}\n").unwrap();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    // The watch (and its first scan) is in place once the session is open.
    let id = open(&c, &e.workspace).await;
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        writeln!(f, "// reformatted").unwrap();
    }
    let path = e.daemon.session(&id).unwrap().path;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (s, _) = soba_core::session::log::read_session(&path).unwrap();
        let edits: Vec<_> = s
            .entries()
            .iter()
            .filter_map(|e| match &e.body {
                soba_core::session::entry::EntryBody::File(f) => Some((f.path.clone(), f.op)),
                _ => None,
            })
            .collect();
        if !edits.is_empty() {
            assert_eq!(
                edits,
                [(
                    "main.rs".to_string(),
                    soba_core::session::entry::FileOp::Modified
                )]
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "polling watcher did not record the edit"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn closing_a_session_releases_its_log_and_tells_every_client() {
    let e = env();
    let agent = connect(&e.daemon);
    agent.initialize(&[&e.workspace], false).await;
    let editor = connect(&e.daemon);
    editor.initialize(&[&e.workspace], false).await;
    let opened = agent
        .request("soba/session/open", json!({"workspace": e.workspace}))
        .await;
    let id = opened["sessionId"].as_str().unwrap().to_string();
    let path = PathBuf::from(opened["path"].as_str().unwrap());
    let appended = agent
        .request(
            "soba/session/append",
            json!({"sessionId": id, "entries": [user("one"), user("two")]}),
        )
        .await;

    let closed = agent
        .request("soba/session/close", json!({"sessionId": id}))
        .await;
    assert_eq!(closed["sessionId"], id.as_str());
    assert_eq!(closed["path"], path.display().to_string());
    let notice = editor
        .expect_notification("soba/session/closed", Duration::from_secs(5))
        .await;
    assert_eq!(notice["sessionId"], id.as_str());
    assert_eq!(notice["workspace"], e.workspace.display().to_string());

    // The log is free for another writer the moment the answer arrives, and holds everything.
    {
        let (log, _) =
            soba_core::session::log::SessionLog::open(&path, soba_core::config::Durability::Flush)
                .expect("the closed session's log is released");
        assert_eq!(log.session().leaf_id(), appended["leafId"].as_str());
    }

    // Gone from the daemon: listed nowhere, unknown by id, no longer the active session.
    let sessions = editor.request("soba/sessions", json!({})).await;
    assert_eq!(sessions["sessions"], json!([]));
    for (method, params) in [
        ("soba/budget", json!({"sessionId": id})),
        ("soba/budget", json!({"workspace": e.workspace})),
        (
            "soba/session/append",
            json!({"sessionId": id, "entries": [user("late")]}),
        ),
        ("soba/session/close", json!({"sessionId": id})),
    ] {
        let err = agent.error(method, params.clone()).await;
        assert_eq!(
            err["code"],
            code::UNKNOWN_SESSION,
            "{method} {params}: {err}"
        );
    }

    // Opening it again loads it from disk, and it takes input as before.
    let reopened = agent
        .request(
            "soba/session/open",
            json!({"workspace": e.workspace, "sessionId": id}),
        )
        .await;
    assert_eq!(reopened["budget"]["sessionId"], id.as_str());
    let more = agent
        .request(
            "soba/session/append",
            json!({"sessionId": id, "entries": [user("three")]}),
        )
        .await;
    assert_eq!(more["entryIds"].as_array().unwrap().len(), 1);
    let budget = editor
        .request("soba/budget", json!({"workspace": e.workspace}))
        .await;
    assert_eq!(budget["sessionId"], id.as_str());
}

/// Closing the last session of a workspace stops its file watch; opening a session there
/// again starts a new one.
#[tokio::test]
async fn a_workspace_reopened_after_its_last_close_is_watched_again() {
    let e = env_with(Some(WatchMode::Native));
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let id = open(&c, &e.workspace).await;
    c.request("soba/session/close", json!({"sessionId": id}))
        .await;
    let id = c
        .request(
            "soba/session/open",
            json!({"workspace": e.workspace, "sessionId": id}),
        )
        .await["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(e.workspace.join("after.rs"), "fn main() {}\n").unwrap();
    let path = e.daemon.session(&id).unwrap().path;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if std::fs::read_to_string(&path)
            .unwrap()
            .contains("\"after.rs\"")
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the reopened workspace's watcher recorded nothing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every handled method and notification is documented in docs/protocol.md, and every method
/// documented there is handled.
#[test]
fn protocol_doc_and_handlers_agree() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/protocol.md"))
            .unwrap();
    let documented: std::collections::BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("### `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect();
    let handled: std::collections::BTreeSet<String> = soba::daemon::server::HANDLED
        .iter()
        .chain(soba::daemon::protocol::NOTIFICATIONS)
        .chain(soba::daemon::protocol::CLIENT_METHODS)
        .map(|s| s.to_string())
        .collect();
    let missing_in_doc: Vec<_> = handled.difference(&documented).collect();
    let missing_handler: Vec<_> = documented.difference(&handled).collect();
    assert!(
        missing_in_doc.is_empty(),
        "handled but not documented in docs/protocol.md: {missing_in_doc:?}"
    );
    assert!(
        missing_handler.is_empty(),
        "documented in docs/protocol.md but not handled: {missing_handler:?}"
    );
    let declared: std::collections::BTreeSet<&str> = METHODS.iter().copied().collect();
    let handled_methods: std::collections::BTreeSet<&str> =
        soba::daemon::server::HANDLED.iter().copied().collect();
    assert_eq!(
        declared, handled_methods,
        "protocol::METHODS and the server's handlers differ"
    );
}

#[tokio::test]
async fn an_untrusted_workspace_summarizer_is_ignored_and_the_open_result_says_how_to_trust_it() {
    let e = env();
    std::fs::create_dir_all(e.workspace.join(".soba")).unwrap();
    std::fs::write(
        e.workspace.join(".soba/config.json"),
        r#"{"summarizer":{"provider":"openai","model":"gpt-4o-mini","baseUrl":"http://127.0.0.1:9/v1","apiKeyEnv":"HOME"}}"#,
    )
    .unwrap();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let opened = c
        .request("soba/session/open", json!({"workspace": e.workspace}))
        .await;
    let warnings = opened["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| {
            let w = w.as_str().unwrap();
            w.contains("not trusted") && w.contains("soba trust")
        }),
        "{opened}"
    );
    let shown = c.seen("window/showMessage");
    assert!(
        shown
            .iter()
            .any(|m| m["message"].as_str().unwrap_or("").contains("soba trust")),
        "{shown:?}"
    );
}

#[tokio::test]
async fn a_linked_workspace_config_fails_the_open_without_quoting_the_file_behind_it() {
    let e = env();
    let outside = tempfile::tempdir().unwrap();
    let private = outside.path().join("private.json");
    std::fs::write(&private, r#"{"compaction":"outside-value-42"}"#).unwrap();
    std::fs::create_dir_all(e.workspace.join(".soba")).unwrap();
    std::os::unix::fs::symlink(&private, e.workspace.join(".soba/config.json")).unwrap();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let err = c
        .error("soba/session/open", json!({"workspace": e.workspace}))
        .await;
    let text = err.to_string();
    assert!(!text.contains("outside-value-42"), "{text}");
    assert!(text.contains("config.json is a symbolic link"), "{text}");
}

#[tokio::test]
async fn context_shows_what_fills_the_window_by_part_and_largest_entries() {
    let e = env();
    let c = connect(&e.daemon);
    std::fs::create_dir_all(e.workspace.join(".soba")).unwrap();
    std::fs::write(
        e.workspace.join(".soba/config.json"),
        r#"{"compaction": {"keepRecentTokens": 200, "minReclaimableTokens": 100}}"#,
    )
    .unwrap();
    c.initialize(&[&e.workspace], false).await;
    let id = open(&c, &e.workspace).await;
    let big_file: String = (0..120)
        .map(|i| format!("fn parse_{i}(input: &str) -> Token{i} {{ lexer_{i}.next() }}\n"))
        .collect();
    c.request(
        "soba/session/append",
        json!({"sessionId": id, "entries": [
            user("Fix the failing parser test"),
            {"type": "message", "role": "assistant", "content": [
                {"type": "tool_call", "id": "c1", "name": "Read", "input": {"file_path": "src/parser.rs"}}
            ]},
            {"type": "tool_result", "callId": "c1", "content": [{"type": "text", "text": big_file}]},
            {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "Read it."}]},
            user("Run the tests"),
            {"type": "message", "role": "assistant", "content": [
                {"type": "tool_call", "id": "c2", "name": "Bash", "input": {"command": "cargo test"}}
            ]},
            {"type": "tool_result", "callId": "c2", "content": [{"type": "text", "text": "1 failed"}]},
            user("Now make the lexer keep the last token"),
        ]}),
    )
    .await;

    let ctx = c
        .request(
            "soba/context",
            json!({"workspace": e.workspace, "limit": 2}),
        )
        .await;
    assert_eq!(ctx["sessionId"], id.as_str());
    let budget = c.request("soba/budget", json!({"sessionId": id})).await;
    assert_eq!(ctx["effectiveTokens"], budget["effectiveTokens"]);
    // The counted parts are the budget's counts; the budget's own parts (on its scale, with
    // what is not in the log) are there too, and sum to the total.
    assert_eq!(ctx["breakdown"], budget["breakdown"]["counted"]);
    assert_eq!(ctx["budgetBreakdown"], budget["breakdown"]);
    let parts: u64 = [
        "system",
        "tools",
        "capsule",
        "retainedTail",
        "newEntries",
        "notInLog",
    ]
    .iter()
    .map(|k| ctx["budgetBreakdown"][k].as_u64().unwrap())
    .sum();
    assert_eq!(Some(parts), ctx["effectiveTokens"].as_u64(), "{ctx}");
    let largest = ctx["largest"].as_array().unwrap();
    assert_eq!(largest.len(), 2, "the limit is honoured: {ctx}");
    assert_eq!(largest[0]["kind"], "file");
    assert_eq!(largest[0]["label"], "Read src/parser.rs");
    assert_eq!(largest[0]["path"], "src/parser.rs");
    assert_eq!(largest[0]["part"], "new");
    let k = &ctx["byKind"];
    assert!(k["fileReads"].as_u64().unwrap() > k["toolOutputs"].as_u64().unwrap());
    assert!(ctx["capsule"].is_null(), "no capsule before a compaction");

    // After a compaction the capsule in force is there to view, as the model reads it.
    append_parser_turns(&c, &id, 0).await;
    let compacted = c.request("soba/compact", json!({"sessionId": id})).await;
    assert_eq!(compacted["outcome"], "completed", "{compacted}");
    let ctx = c.request("soba/context", json!({"sessionId": id})).await;
    assert_eq!(ctx["capsule"]["checkpointId"], compacted["checkpointId"]);
    assert!(!ctx["capsule"]["text"].as_str().unwrap().is_empty());
    // One size for the capsule: the capsule in force is the size the capsule list gives it.
    let list = c.request("soba/capsule/list", json!({})).await;
    let row = list["capsules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["checkpointId"] == compacted["checkpointId"])
        .expect("the compaction's capsule is listed");
    assert_eq!(ctx["capsule"]["tokens"], row["tokens"]["capsule"], "{list}");
    assert!(ctx["largest"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["kind"] == "capsule"));

    let err = c.error("soba/context", json!({"limit": "many"})).await;
    assert_eq!(err["code"], code::INVALID_PARAMS);
}

/// Rewrite the side file of `log` with `tokens` as the count of every message entry, its
/// checksums intact, so that a budget built from it shows it was read, not counted.
fn forge_counts(log: &Path, tokens: u32) {
    use soba_core::session::token_file;
    let path = token_file::path_for(log);
    let bytes = std::fs::read(&path).unwrap();
    let mut out = Vec::new();
    for (n, line) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
        match token_file::decode_record(line) {
            Some(r) if n > 0 && r.counts.tokens > 0 => token_file::encode_record(
                &mut out,
                r.key,
                &r.id,
                &soba_core::session::index::EntryCounts { tokens, ..r.counts },
            ),
            _ => out.extend_from_slice(line),
        }
    }
    std::fs::write(&path, out).unwrap();
}

/// Close the session and open it again: the effective tokens of its first budget.
async fn reopen_budget(c: &LspClient, workspace: &Path, id: &str) -> u64 {
    c.request("soba/session/close", json!({"sessionId": id}))
        .await;
    c.request(
        "soba/session/open",
        json!({"workspace": workspace, "sessionId": id}),
    )
    .await["budget"]["effectiveTokens"]
        .as_u64()
        .unwrap()
}

/// A reopened session takes its entries' counts from `<log>.tokens` (a forged count shows in
/// its budget); a damaged side file is recounted to the true budget and written afresh.
#[tokio::test]
async fn a_reopened_session_takes_recorded_counts_and_recounts_a_damaged_file() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let opened = c
        .request("soba/session/open", json!({"workspace": e.workspace}))
        .await;
    let id = opened["sessionId"].as_str().unwrap().to_string();
    let path = PathBuf::from(opened["path"].as_str().unwrap());
    let appended = c
        .request(
            "soba/session/append",
            json!({"sessionId": id, "entries": [user("one two three"), user("four five")]}),
        )
        .await;
    let counted = appended["budget"]["effectiveTokens"].as_u64().unwrap();
    let reopen = || reopen_budget(&c, &e.workspace, &id);
    assert_eq!(
        reopen().await,
        counted,
        "the recorded counts are the counts"
    );
    forge_counts(&path, 50_000);
    assert!(reopen().await >= 100_000, "both messages' counts were read");
    // One byte changed in each record: none passes its checksum.
    let side = soba_core::session::token_file::path_for(&path);
    let text = std::fs::read_to_string(&side).unwrap();
    std::fs::write(&side, text.replace(" 50000 ", " 50001 ")).unwrap();
    assert_eq!(reopen().await, counted, "recounted");
    let rebuilt = std::fs::read(&side).unwrap();
    let records: Vec<_> = rebuilt
        .split_inclusive(|&b| b == b'\n')
        .skip(1)
        .map(|l| soba_core::session::token_file::decode_record(l).expect("a whole record"))
        .collect();
    assert!(!records.is_empty());
    assert!(
        records.iter().all(|r| r.counts.tokens < 50_000),
        "written afresh: {records:?}"
    );
}

#[tokio::test]
async fn preflight_leaves_out_the_content_of_runs_the_client_holds_only_where_shown_whole() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let id = open(&c, &e.workspace).await;
    let appended = c
        .request(
            "soba/session/append",
            json!({"sessionId": id, "entries": [user("first"), user("second"), user("third")]}),
        )
        .await;
    let ids: Vec<String> = serde_json::from_value(appended["entryIds"].clone()).unwrap();
    // Without the ask, every message has its content and nothing is said to be left out.
    let plain = c.request("soba/preflight", json!({"sessionId": id})).await;
    assert!(plain.get("omitted").is_none(), "{plain}");
    assert_eq!(plain["messages"][0]["content"][0]["text"], "first");
    // A run shown whole loses its content; one that names an entry the input does not show
    // in that order (here: a run of the second and first) keeps it, and so does one it does
    // not name.
    let r = c
        .request(
            "soba/preflight",
            json!({"sessionId": id, "omitContentOf": [[ids[0]], [ids[1], ids[0]], ["e_unknown"]]}),
        )
        .await;
    assert_eq!(r["omitted"], json!([0]), "{r}");
    assert_eq!(r["messages"][0]["content"], json!([]));
    assert_eq!(r["messages"][0]["entryId"], ids[0].as_str());
    assert_eq!(r["messages"][1]["content"][0]["text"], "second");
    assert_eq!(r["messages"][2]["content"][0]["text"], "third");
    assert_eq!(
        r["tokens"], plain["tokens"],
        "the budget is the same either way"
    );
    // A run of two consecutive messages shown whole: both left out.
    let r = c
        .request(
            "soba/preflight",
            json!({"sessionId": id, "omitContentOf": [[ids[1], ids[2]]]}),
        )
        .await;
    assert_eq!(r["omitted"], json!([1, 2]), "{r}");
}
