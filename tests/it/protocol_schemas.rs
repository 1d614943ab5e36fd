//! The protocol schemas in `schemas/protocol/` against the daemon: every method it dispatches
//! and every notification it sends has a schema, and what a real session sends and receives
//! validates against them.

use crate::support::lsp_client;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lsp_client::LspClient;
use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::protocol::{code, NOTIFICATIONS};
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba::schemas::{protocol_file, HANDSHAKE_METHODS, PROTOCOL_METHODS, PROTOCOL_NOTIFICATIONS};

fn schemas_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schemas")
}

/// The checked-in schema file, compiled.
fn validator(name: &str, part: &str) -> jsonschema::Validator {
    let path = schemas_dir().join(protocol_file(name, part));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let schema: Value = serde_json::from_str(&text).unwrap();
    jsonschema::validator_for(&schema).expect("schema compiles")
}

fn assert_valid(name: &str, part: &str, instance: &Value) {
    let v = validator(name, part);
    let errors: Vec<String> = v
        .iter_errors(instance)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{name} {part} does not match its schema: {errors:?}\n{instance}"
    );
}

#[test]
fn every_dispatched_method_and_notification_has_a_schema() {
    let handled: BTreeSet<&str> = soba::daemon::server::HANDLED.iter().copied().collect();
    let with_schema: BTreeSet<&str> = PROTOCOL_METHODS.iter().map(|m| m.method).collect();
    assert_eq!(
        handled.difference(&with_schema).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "methods the server dispatches without a schema: add them to PROTOCOL_METHODS in src/schemas.rs"
    );
    assert_eq!(
        with_schema.difference(&handled).collect::<Vec<_>>(),
        Vec::<&&str>::new(),
        "schemas of methods the server does not dispatch"
    );
    let notices: BTreeSet<&str> = NOTIFICATIONS.iter().copied().collect();
    let notice_schemas: BTreeSet<&str> = PROTOCOL_NOTIFICATIONS.iter().map(|(n, _)| *n).collect();
    assert_eq!(notices, notice_schemas);
    for m in PROTOCOL_METHODS.iter().chain(HANDSHAKE_METHODS) {
        for part in ["params", "result"] {
            let path = schemas_dir().join(protocol_file(m.method, part));
            assert!(path.is_file(), "{} is missing", path.display());
        }
    }
}

#[tokio::test]
async fn the_connection_handshake_matches_its_schema() {
    let base = tempfile::tempdir().unwrap();
    let daemon = Daemon::new(
        Paths::under(&base.path().join("soba")),
        DaemonOptions {
            watch: None,
            ..DaemonOptions::default()
        },
    );
    let c = lsp_client::connect(&daemon);
    let hello = soba::daemon::protocol::CLIENT_HELLO;
    let params = json!({
        "userConfig": {"path": "/home/me/.config/soba/config.json", "text": "{\"summarizer\": {\"apiKeyEnv\": \"SOBA_TEST_HANDSHAKE_KEY\"}}"},
        "env": {"SOBA_TEST_HANDSHAKE_KEY": "not-a-real-key"}
    });
    assert_valid(hello, "params", &params);
    let answer = c.request(hello, params).await;
    assert_valid(hello, "result", &answer);
    assert_eq!(answer["env"], json!(["SOBA_TEST_HANDSHAKE_KEY"]));
    for wrong in [json!({"env": {"K": 1}}), json!({"userConfig": "text"})] {
        assert!(
            !validator(hello, "params").is_valid(&wrong),
            "the schema refuses {wrong}, as the daemon does"
        );
    }
}

/// A client that checks every request's params and answer against the checked-in schemas and
/// remembers which methods it exercised.
struct CheckedClient {
    client: LspClient,
    exercised: std::sync::Mutex<BTreeMap<String, usize>>,
}

impl CheckedClient {
    async fn call(&self, method: &str, params: Value) -> Value {
        assert_valid(method, "params", &params);
        let result = self.client.request(method, params).await;
        assert_valid(method, "result", &result);
        *self
            .exercised
            .lock()
            .unwrap()
            .entry(method.to_string())
            .or_default() += 1;
        result
    }
}

fn message(role: &str, text: &str) -> Value {
    json!({"type": "message", "role": role, "content": [{"type": "text", "text": text}]})
}

/// About 1000 tokens of distinct text.
fn chunk(i: usize) -> String {
    (0..1000)
        .map(|w| format!("w{}", (i * 7919 + w) % 9973))
        .collect::<Vec<_>>()
        .join(" ")
}

fn small_window_workspace(base: &Path) -> PathBuf {
    let workspace = std::fs::canonicalize(base).unwrap().join("project");
    std::fs::create_dir_all(workspace.join(".soba")).unwrap();
    std::fs::write(
        workspace.join(".soba/config.json"),
        json!({
            "model": {"name": "gpt-4o", "contextWindow": 20000, "maxOutputTokens": 2000},
            "compaction": {"keepRecentTokens": 1000, "minTokensForAutoCompact": 3000, "minReclaimableTokens": 500}
        })
        .to_string(),
    )
    .unwrap();
    workspace
}

#[tokio::test]
async fn a_whole_session_through_the_daemon_matches_the_schemas() {
    let base = tempfile::tempdir().unwrap();
    let ws = small_window_workspace(base.path());
    let daemon = Daemon::new(
        Paths::under(&base.path().join("soba")),
        DaemonOptions {
            watch: None,
            extra_config: None,
            summarizer: None,
            ..DaemonOptions::default()
        },
    );
    let (client_io, server_io) = tokio::io::duplex(1 << 22);
    let (sr, sw) = tokio::io::split(server_io);
    tokio::spawn(soba::daemon::server::serve_connection(
        Arc::clone(&daemon),
        sr,
        sw,
    ));
    let (cr, cw) = tokio::io::split(client_io);
    let c = CheckedClient {
        client: LspClient::new(cr, cw),
        exercised: Default::default(),
    };
    c.client.initialize(&[&ws], false).await;

    let opened = c
        .call(
            "soba/session/open",
            json!({"workspace": ws, "model": {"name": "gpt-4o", "contextWindow": 20000, "maxOutputTokens": 2000}}),
        )
        .await;
    let sid = opened["sessionId"].as_str().unwrap().to_string();
    c.call(
        "soba/session/append",
        json!({"sessionId": sid, "entries": [
            {"type": "setting", "systemPrompt": "You are a careful coding agent."},
            message("user", "Fix the failing auth test"),
            {"type": "message", "role": "assistant", "content": [
                {"type": "thinking", "thinking": "Run the tests first."},
                {"type": "tool_call", "id": "call_1", "name": "Bash", "input": {"command": "cargo test"}}
            ], "usage": {"input": 900, "cacheRead": 0, "cacheWrite": 0, "output": 40}, "model": "gpt-4o"},
            {"type": "tool_result", "callId": "call_1", "toolName": "Bash", "content": [{"type": "text", "text": "1 failed"}], "isError": true, "exitCode": 101},
            {"type": "file", "path": "src/auth.rs", "op": "modified", "source": "agent"},
        ]}),
    )
    .await;
    c.call(
        "soba/turn/complete",
        json!({"sessionId": sid, "usage": {"input": 950, "cacheRead": 0, "cacheWrite": 0, "output": 60}}),
    )
    .await;
    c.call(
        "soba/checkpoint",
        json!({"sessionId": sid, "kind": "milestone", "label": "auth test reproduced"}),
    )
    .await;
    let entries: Vec<Value> = (0..12)
        .map(|i| message(if i % 2 == 0 { "user" } else { "assistant" }, &chunk(i)))
        .collect();
    let appended = c
        .call(
            "soba/session/append",
            json!({"sessionId": sid, "entries": entries}),
        )
        .await;
    let input = c.call("soba/preflight", json!({"sessionId": sid})).await;
    assert_eq!(input["compaction"]["outcome"], "completed", "{input}");
    assert_eq!(input["messages"][0]["role"], "user");
    assert!(
        input["messages"][0].get("entryId").is_none(),
        "the capsule comes from no entry"
    );

    c.call(
        "soba/session/append",
        json!({"sessionId": sid, "entries": [message("user", &chunk(20)), message("assistant", &chunk(21))]}),
    )
    .await;
    // A session an agent drives may be previewed too: the preview says the action would apply.
    let preview = c
        .call(
            "soba/preview",
            json!({"sessionId": sid, "action": "compact", "instructions": "keep the auth details"}),
        )
        .await;
    assert_eq!(preview["control"]["compactedBy"], "soba");
    let compacted = c
        .call(
            "soba/compact",
            json!({"sessionId": sid, "instructions": "keep the auth details"}),
        )
        .await;
    assert_eq!(compacted["trigger"], "user");
    c.call("soba/budget", json!({})).await;
    let context = c
        .call("soba/context", json!({"sessionId": sid, "limit": 3}))
        .await;
    assert_eq!(
        context["capsule"]["checkpointId"],
        compacted["checkpointId"]
    );
    c.call(
        "soba/autoCompact",
        json!({"workspace": ws, "enabled": false}),
    )
    .await;
    c.call("soba/sessions", json!({})).await;
    // A live pi transcript followed into a session of another workspace.
    let other = std::fs::canonicalize(base.path()).unwrap().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let transcript = other.join("pi-session.jsonl");
    std::fs::write(
        &transcript,
        format!(
            "{}\n{}\n",
            json!({"type": "session", "version": 3, "id": "p1", "cwd": other, "timestamp": "2026-12-01T10:00:00Z"}),
            json!({"type": "message", "id": "m1", "parentId": null, "timestamp": "2026-12-01T10:00:01Z",
                   "message": {"role": "user", "content": [{"type": "text", "text": "hello"}]}})
        ),
    )
    .unwrap();
    c.call(
        "soba/attach",
        json!({"workspace": other, "transcript": transcript, "agent": "pi", "idleSecs": 600}),
    )
    .await;
    let flight = c
        .call("soba/flight", json!({"sessionId": sid, "limit": 5}))
        .await;
    assert!(!flight["records"].as_array().unwrap().is_empty());

    let created = c
        .call(
            "soba/capsule/create",
            json!({"sessionId": sid, "title": "auth fix hand-off"}),
        )
        .await;
    let list = c.call("soba/capsule/list", json!({"sessionId": sid})).await;
    assert!(list["capsules"].as_array().unwrap().len() >= 2);
    let export = base.path().join("handoff.capsule.md");
    c.call(
        "soba/capsule/export",
        json!({"sessionId": sid, "checkpointId": created["checkpointId"], "path": export}),
    )
    .await;
    c.call(
        "soba/capsule/load",
        json!({"sessionId": sid, "path": export}),
    )
    .await;

    // An overflow: one recovery compaction; the retry of a second one is refused.
    c.call(
        "soba/session/append",
        json!({"sessionId": sid, "entries": [message("user", &chunk(30)), message("assistant", &chunk(31))]}),
    )
    .await;
    c.call("soba/overflow", json!({"sessionId": sid})).await;
    let second = c
        .client
        .error("soba/overflow", json!({"sessionId": sid}))
        .await;
    assert_eq!(second["code"], code::OVERFLOW_RETRY_USED);
    assert_valid(
        "soba/overflow",
        "result",
        &json!({"compaction": second["data"]["compaction"], "retryAllowed": false}),
    );

    let cancel = c.call("soba/cancel", json!({"sessionId": sid})).await;
    assert_eq!(cancel["cancelled"], false);
    let first_entry = appended["entryIds"][0].clone();
    c.call(
        "soba/rewind",
        json!({"sessionId": sid, "entryId": first_entry}),
    )
    .await;
    // A dangling call: the view supplies its result.
    c.call(
        "soba/session/append",
        json!({"sessionId": sid, "entries": [
            {"type": "message", "role": "assistant", "content": [
                {"type": "text", "text": "Reading the test."},
                {"type": "tool_call", "id": "call_2", "name": "Read", "input": {"path": "tests/auth.rs"}}
            ]},
            message("user", "never mind, look at the config instead"),
        ]}),
    )
    .await;
    let input = c.call("soba/preflight", json!({"sessionId": sid})).await;
    let synthetic = input["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["toolCallId"] == "call_2")
        .expect("a result for the dangling call");
    assert_eq!(synthetic["role"], "tool");
    assert_eq!(synthetic["isError"], true);
    assert!(synthetic.get("entryId").is_none());

    c.call("soba/session/close", json!({"sessionId": sid}))
        .await;

    let closed = c
        .client
        .expect_notification("soba/session/closed", Duration::from_secs(5))
        .await;
    assert_eq!(closed["sessionId"], sid.as_str());
    let mut notified = BTreeSet::new();
    for n in c.client.seen.lock().unwrap().iter() {
        let method = n["method"].as_str().unwrap_or_default();
        if NOTIFICATIONS.contains(&method) {
            assert_valid(method, "notification", &n["params"]);
            notified.insert(method.to_string());
        }
    }
    assert_eq!(
        notified,
        NOTIFICATIONS.iter().map(|n| n.to_string()).collect(),
        "every notification was seen and checked"
    );
    let exercised: BTreeSet<String> = c.exercised.lock().unwrap().keys().cloned().collect();
    let handled: BTreeSet<String> = soba::daemon::server::HANDLED
        .iter()
        .map(|m| m.to_string())
        .collect();
    assert_eq!(
        exercised, handled,
        "every method was called and its answer checked"
    );
}

#[tokio::test]
async fn the_append_schema_refuses_what_the_daemon_refuses() {
    let schema = validator("soba/session/append", "params");
    let base = tempfile::tempdir().unwrap();
    let ws = small_window_workspace(base.path());
    let daemon = Daemon::new(
        Paths::under(&base.path().join("soba")),
        DaemonOptions {
            watch: None,
            extra_config: None,
            summarizer: None,
            ..DaemonOptions::default()
        },
    );
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let (sr, sw) = tokio::io::split(server_io);
    tokio::spawn(soba::daemon::server::serve_connection(daemon, sr, sw));
    let (cr, cw) = tokio::io::split(client_io);
    let c = LspClient::new(cr, cw);
    c.initialize(&[&ws], false).await;
    let opened = c
        .request("soba/session/open", json!({"workspace": ws}))
        .await;
    let sid = opened["sessionId"].as_str().unwrap();
    for (ty, _) in soba::daemon::actor::DAEMON_WRITTEN {
        let params = json!({"sessionId": sid, "entries": [{"type": ty, "to": "e1"}]});
        assert!(
            !schema.is_valid(&params),
            "the schema accepts a `{ty}` entry"
        );
        let e = c.error("soba/session/append", params).await;
        assert_eq!(e["code"], code::INVALID_PARAMS);
    }
    let bad_role =
        json!({"sessionId": sid, "entries": [{"type": "message", "role": "robot", "content": []}]});
    assert!(!schema.is_valid(&bad_role));
    assert_eq!(
        c.error("soba/session/append", bad_role).await["code"],
        code::INVALID_PARAMS
    );
    let good = json!({"sessionId": sid, "entries": [message("user", "hi")]});
    assert!(schema.is_valid(&good));
    c.request("soba/session/append", good).await;
}
