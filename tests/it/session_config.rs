//! Whose configuration a session follows: the settings of `soba/session/open`, the config files
//! and API keys each `soba serve` hands the shared daemon (`soba/client/hello`), the user's
//! `models` catalog, and the warning for a model no catalog knows.

use crate::loopback::{self, Loopback, Recorded};
use crate::support::lsp_client::{connect, LspClient};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::protocol::code;
use soba::daemon::registry::{Daemon, DaemonOptions};

/// gpt-4o, the default model: 128000 − 16384 output − the safety reserve.
const DEFAULT_WINDOW: u64 = 128_000;
const DEFAULT_OUTPUT: u64 = 16_384;

struct Env {
    _base: tempfile::TempDir,
    workspace: PathBuf,
    daemon: Arc<Daemon>,
}

fn env() -> Env {
    let base = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(base.path()).unwrap();
    let workspace = root.join("project");
    std::fs::create_dir_all(&workspace).unwrap();
    let daemon = Daemon::new(
        Paths::under(&root.join("soba")),
        DaemonOptions {
            watch: None,
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

/// A connection that hands over `user` as its user config file and `env` as its keys.
async fn connect_with(daemon: &Arc<Daemon>, user: Value, env: Value) -> LspClient {
    let c = connect(daemon);
    let r = c
        .request(
            "soba/client/hello",
            json!({"userConfig": {"path": "/relay/config.json", "text": user.to_string()}, "env": env}),
        )
        .await;
    assert!(r["env"].is_array(), "{r}");
    c
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

async fn fill(c: &LspClient, id: &str) {
    let entries: Vec<Value> = (0..8)
        .map(|i| message(if i % 2 == 0 { "user" } else { "assistant" }, &chunk(i)))
        .collect();
    c.request(
        "soba/session/append",
        json!({"sessionId": id, "entries": entries}),
    )
    .await;
}

fn capsule_json(goal: &str) -> String {
    json!({
        "goal": goal, "constraints": [], "completed": ["parser written"], "active": [],
        "pending": [], "decisions": [], "blockers": [], "nextSteps": ["ship it"]
    })
    .to_string()
}

/// A streamed OpenAI-compatible reply holding `reply`.
fn openai_reply(reply: &str) -> Vec<loopback::Step> {
    let chunk = |delta: Value, finish: Value| {
        let v = json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {v}\n\n")
    };
    loopback::sse(&[
        chunk(json!({"role": "assistant", "content": reply}), json!(null)),
        chunk(json!({}), json!("stop")),
        "data: [DONE]\n\n".to_string(),
    ])
}

async fn summarizer_server() -> Loopback {
    Loopback::start(|_, _: &Recorded| openai_reply(&capsule_json("Finish the parser"))).await
}

fn summarizer_block(server: &Loopback, key_env: &str) -> Value {
    json!({"provider": "openai", "model": "m", "baseUrl": format!("{}/v1", server.base), "apiKeyEnv": key_env})
}

fn trusting(workspace: &Path) -> Value {
    json!({"trustedWorkspaces": [workspace.display().to_string()]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_settings_set_that_sessions_limits_only() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let tuned = c
        .request(
            "soba/session/open",
            json!({"workspace": e.workspace, "compaction": {"safetyReserveTokens": 1000, "autoCompactThresholdRatio": 0.5, "auto": false}}),
        )
        .await;
    let plain = c
        .request("soba/session/open", json!({"workspace": e.workspace}))
        .await;
    assert_eq!(
        tuned["budget"]["hardLimit"],
        DEFAULT_WINDOW - DEFAULT_OUTPUT - 1000
    );
    assert_eq!(
        plain["budget"]["hardLimit"],
        DEFAULT_WINDOW - DEFAULT_OUTPUT - 8192
    );
    let tuned_budget = c
        .request("soba/budget", json!({"sessionId": tuned["sessionId"]}))
        .await;
    assert_eq!(
        tuned_budget["softLimit"],
        (DEFAULT_WINDOW - DEFAULT_OUTPUT - 1000) / 2
    );
    assert_eq!(tuned_budget["autoCompact"], false);
    let plain_budget = c
        .request("soba/budget", json!({"sessionId": plain["sessionId"]}))
        .await;
    assert_eq!(
        plain_budget["autoCompact"], true,
        "the other session keeps the defaults"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_settings_drive_compaction() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    // Two sessions of one model, alike but for the keepRecentTokens each was opened with.
    let mut after = Vec::new();
    for keep in [2500, 9000] {
        let opened = c
            .request(
                "soba/session/open",
                json!({"workspace": e.workspace, "model": {"name": "custom", "contextWindow": 20000, "maxOutputTokens": 2000},
                       "compaction": {"safetyReserveTokens": 1000, "keepRecentTokens": keep}}),
            )
            .await;
        assert_eq!(opened["budget"]["hardLimit"], 17000, "{opened}");
        let id = opened["sessionId"].as_str().unwrap();
        fill(&c, id).await;
        let r = c.request("soba/compact", json!({"sessionId": id})).await;
        assert_eq!(r["outcome"], "completed", "{r}");
        after.push(r["tokensAfter"].as_u64().unwrap());
    }
    // 6,500 tokens less kept; the capsule of the longer history quotes up to 2,000 tokens of
    // its latest exchanges, so what stays apart is at least about half of it.
    assert!(
        after[0] + 3000 < after[1],
        "the session that keeps less keeps less: {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_session_settings_are_refused_naming_the_key_and_create_nothing() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let cases = [
        (json!({"compaction": {"auto": "yes"}}), "compaction.auto"),
        (
            json!({"compaction": {"keepRecentToken": 5}}),
            "compaction.keepRecentTokens",
        ),
        (
            json!({"compaction": {"minSavingsRatio": 2}}),
            "compaction.minSavingsRatio",
        ),
        (
            json!({"summarizer": {"provider": "gemini"}}),
            "summarizer.provider",
        ),
        (json!({"compaction": 7}), "compaction"),
    ];
    for (settings, key) in cases {
        let mut params = settings.clone();
        params["workspace"] = json!(e.workspace);
        let err = c.error("soba/session/open", params).await;
        assert_eq!(err["code"], code::INVALID_PARAMS, "{err}");
        let message = err["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("`{key}`")),
            "{settings}: {message}"
        );
    }
    let sessions = e.daemon.paths.sessions_dir(&e.workspace);
    let created = std::fs::read_dir(&sessions).map_or(0, |d| d.count());
    assert_eq!(created, 0, "no session log was created");
    let listed = c
        .request("soba/sessions", json!({"workspace": e.workspace}))
        .await;
    assert_eq!(listed["sessions"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_workspace_session_cannot_choose_the_summarizer_and_a_trusted_one_can() {
    let server = summarizer_server().await;
    let e = env();
    let key = "sk-session-trust-2f9c";
    // Untrusted: the endpoint and key variable are dropped with a warning; limits still apply.
    let c = connect_with(&e.daemon, json!({}), json!({"SOBA_IT_TRUST_KEY": key})).await;
    c.initialize(&[&e.workspace], false).await;
    let opened = c
        .request(
            "soba/session/open",
            json!({"workspace": e.workspace, "summarizer": summarizer_block(&server, "SOBA_IT_TRUST_KEY"),
                   "compaction": {"safetyReserveTokens": 1000}}),
        )
        .await;
    let warnings = opened["warnings"].to_string();
    assert!(
        warnings.contains("not trusted") && warnings.contains("soba trust"),
        "{opened}"
    );
    assert_eq!(opened["budget"]["summarizer"]["uses"], "local", "{opened}");
    assert_eq!(
        opened["budget"]["hardLimit"],
        DEFAULT_WINDOW - DEFAULT_OUTPUT - 1000
    );
    let id = opened["sessionId"].as_str().unwrap();
    fill(&c, id).await;
    c.request("soba/compact", json!({"sessionId": id})).await;
    assert!(
        server.requests().is_empty(),
        "nothing went to the session's endpoint"
    );

    // Trusted in the connection's user config: the session's summarizer is used, with the key.
    let c = connect_with(
        &e.daemon,
        trusting(&e.workspace),
        json!({"SOBA_IT_TRUST_KEY": key}),
    )
    .await;
    c.initialize(&[&e.workspace], false).await;
    let opened = c
        .request(
            "soba/session/open",
            json!({"workspace": e.workspace, "summarizer": summarizer_block(&server, "SOBA_IT_TRUST_KEY")}),
        )
        .await;
    assert!(opened.get("warnings").is_none(), "{opened}");
    let id = opened["sessionId"].as_str().unwrap();
    fill(&c, id).await;
    let r = c.request("soba/compact", json!({"sessionId": id})).await;
    assert_eq!(r["quality"], "model", "{r}");
    let seen = server.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_client_did_not_pass_is_named_with_what_to_do() {
    let server = summarizer_server().await;
    let e = env();
    let user = json!({"summarizer": summarizer_block(&server, "SOBA_IT_NOT_PASSED")});
    let c = connect_with(&e.daemon, user, json!({})).await;
    c.initialize(&[&e.workspace], false).await;
    c.request("soba/session/open", json!({"workspace": e.workspace}))
        .await;
    let shown = c
        .expect_notification("window/showMessage", Duration::from_secs(5))
        .await;
    let message = shown["message"].as_str().unwrap();
    assert!(
        message.contains("SOBA_IT_NOT_PASSED") && message.contains("was not passed"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connections_keys_go_when_it_closes() {
    let server = summarizer_server().await;
    let e = env();
    let key = "sk-dropped-on-close-81d0";
    let user = json!({"summarizer": summarizer_block(&server, "SOBA_IT_CLOSE_KEY"),
                      "compaction": {"keepRecentTokens": 2500}});
    let agent = connect_with(&e.daemon, user, json!({"SOBA_IT_CLOSE_KEY": key})).await;
    agent.initialize(&[&e.workspace], false).await;
    let opened = agent
        .request("soba/session/open", json!({"workspace": e.workspace}))
        .await;
    let id = opened["sessionId"].as_str().unwrap().to_string();
    assert!(
        opened["budget"]["summarizer"]["uses"]
            .as_str()
            .unwrap()
            .contains(&server.base),
        "{opened}"
    );
    fill(&agent, &id).await;
    agent.close().await;

    // The session lives on; another client's compaction cannot use the departed client's key.
    let editor = connect(&e.daemon);
    editor.initialize(&[&e.workspace], false).await;
    let r = editor
        .request("soba/compact", json!({"sessionId": id}))
        .await;
    assert_eq!(r["outcome"], "completed", "{r}");
    assert_eq!(r["fallback"], true, "{r}");
    assert!(
        r["reason"].as_str().unwrap().contains("disconnected"),
        "{r}"
    );
    assert!(server.requests().is_empty(), "no request went out");

    // The agent comes back with its key and opens the session again: the model is used,
    // with the key of the client now connected.
    let again = "sk-came-back-44e1";
    let user = json!({"summarizer": summarizer_block(&server, "SOBA_IT_CLOSE_KEY")});
    let agent = connect_with(&e.daemon, user, json!({"SOBA_IT_CLOSE_KEY": again})).await;
    agent.initialize(&[&e.workspace], false).await;
    agent
        .request(
            "soba/session/open",
            json!({"workspace": e.workspace, "sessionId": id}),
        )
        .await;
    fill(&agent, &id).await;
    let r = agent
        .request("soba/compact", json!({"sessionId": id}))
        .await;
    assert_eq!(r["quality"], "model", "{r}");
    let seen = server.requests();
    assert!(!seen.is_empty());
    for request in &seen {
        assert_eq!(
            request.header("authorization"),
            Some(format!("Bearer {again}").as_str())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_or_malformed_hello_is_refused() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let err = c.error("soba/client/hello", json!({})).await;
    assert_eq!(err["code"], code::INVALID_REQUEST, "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("first message"),
        "{err}"
    );
    let c = connect(&e.daemon);
    let err = c.error("soba/client/hello", json!({"env": {"K": 1}})).await;
    assert_eq!(err["code"], code::INVALID_PARAMS, "{err}");
    // The connection goes on.
    c.initialize(&[&e.workspace], false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_model_warns_with_the_default_window_and_the_models_catalog_fixes_it() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let opened = c
        .request(
            "soba/session/open",
            json!({"workspace": e.workspace, "sessionId": "acme", "create": true, "model": {"name": "acme-coder-7"}}),
        )
        .await;
    let warnings = opened["warnings"].to_string();
    assert!(warnings.contains("acme-coder-7"), "{opened}");
    assert!(warnings.contains(&DEFAULT_WINDOW.to_string()), "{opened}");
    assert!(
        warnings.contains("models") && warnings.contains("contextWindow"),
        "{opened}"
    );
    assert_eq!(opened["budget"]["contextWindow"], DEFAULT_WINDOW);
    let shown = c
        .expect_notification("window/showMessage", Duration::from_secs(5))
        .await;
    assert!(
        shown["message"].as_str().unwrap().contains("acme-coder-7"),
        "{shown}"
    );
    c.request("soba/session/close", json!({"sessionId": "acme"}))
        .await;

    // The user adds the model: the same session, opened again, gets its window.
    let models =
        json!({"models": {"acme-coder-7": {"contextWindow": 64000, "maxOutputTokens": 4000}}});
    let c = connect_with(&e.daemon, models, json!({})).await;
    c.initialize(&[&e.workspace], false).await;
    let reopened = c
        .request(
            "soba/session/open",
            json!({"workspace": e.workspace, "sessionId": "acme"}),
        )
        .await;
    assert!(reopened.get("warnings").is_none(), "{reopened}");
    assert_eq!(reopened["budget"]["contextWindow"], 64000);
    assert_eq!(reopened["budget"]["hardLimit"], 64000 - 4000 - 8192);
}

#[test]
fn the_cli_warns_about_an_unknown_model_and_a_models_entry_silences_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.jsonl");
    let header = soba_core::session::entry::SessionHeader {
        kind: soba_core::session::entry::HeaderTag::Session,
        version: soba_core::session::entry::LOG_FORMAT_VERSION,
        id: "s".into(),
        workspace: dir.path().display().to_string(),
        created_at: "2026-01-01T00:00:00Z".into(),
        model: Some(soba_core::session::entry::ModelRef {
            name: Some("acme-coder-7".into()),
            ..Default::default()
        }),
        source: None,
    };
    drop(
        soba_core::session::log::SessionLog::create(
            &path,
            header,
            soba_core::config::Durability::Flush,
        )
        .unwrap(),
    );
    let budget = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_soba"))
            .arg("budget")
            .arg(&path)
            .arg("--json")
            .args(extra)
            .env("SOBA_CONFIG", dir.path().join("no-user-config.json"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (v, String::from_utf8_lossy(&out.stderr).to_string())
    };
    let (v, stderr) = budget(&[]);
    assert!(
        stderr.contains("warning:") && stderr.contains("acme-coder-7"),
        "{stderr}"
    );
    assert!(stderr.contains(&DEFAULT_WINDOW.to_string()), "{stderr}");
    assert_eq!(v["contextWindow"], DEFAULT_WINDOW);
    let config = dir.path().join("models.json");
    std::fs::write(
        &config,
        r#"{"models":{"acme-coder-7":{"contextWindow":64000,"maxOutputTokens":4000}}}"#,
    )
    .unwrap();
    let (v, stderr) = budget(&["--config", config.to_str().unwrap()]);
    assert!(!stderr.contains("acme-coder-7"), "{stderr}");
    assert_eq!(v["contextWindow"], 64000);
}

// ---------------------------------------------------------------------------------------------
// Two `soba serve` relays, each with its own --config and environment, on one shared daemon.

struct Relay {
    child: tokio::process::Child,
    client: LspClient,
}

fn relay(root: &Path, config: &Path, key: &str) -> Relay {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["serve", "--config"])
        .arg(config)
        .current_dir(root)
        .env("SOBA_DATA_DIR", root.join("data"))
        .env("SOBA_RUNTIME_DIR", root.join("run"))
        .env("SOBA_CONFIG", root.join("no-user-config.json"))
        .env("SOBA_DAEMON_IDLE_SECS", "2")
        .env("SOBA_IT_RELAY_KEY", key)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let client = LspClient::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
    Relay { child, client }
}

/// Every regular file under `dir`, as bytes.
fn files_under(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            files_under(&path, out);
        } else if meta.is_file() {
            if let Ok(bytes) = std::fs::read(&path) {
                out.push((path, bytes));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_on_one_daemon_each_get_their_own_config_and_key_and_no_key_leaks() {
    let server = summarizer_server().await;
    let base = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(base.path()).unwrap();
    let workspace = root.join("project");
    std::fs::create_dir_all(&workspace).unwrap();
    let write_config = |name: &str, reserve: u64| {
        let path = root.join(name);
        let cfg = json!({"compaction": {"safetyReserveTokens": reserve},
                         "summarizer": summarizer_block(&server, "SOBA_IT_RELAY_KEY")});
        std::fs::write(&path, cfg.to_string()).unwrap();
        path
    };
    let (config_a, config_b) = (write_config("a.json", 1000), write_config("b.json", 3000));
    let key_a = "sk-planted-relay-a-5c1e9b77";
    let key_b = "sk-planted-relay-b-0d4af213";

    // A starts the daemon (which inherits A's environment and --config); B joins it.
    let mut a = relay(&root, &config_a, key_a);
    a.client.initialize(&[&workspace], false).await;
    let mut b = relay(&root, &config_b, key_b);
    b.client.initialize(&[&workspace], false).await;

    let mut ids = Vec::new();
    for (r, reserve) in [(&a, 1000u64), (&b, 3000)] {
        let opened = r
            .client
            .request("soba/session/open", json!({"workspace": workspace}))
            .await;
        assert_eq!(
            opened["budget"]["hardLimit"],
            DEFAULT_WINDOW - DEFAULT_OUTPUT - reserve,
            "{opened}"
        );
        let id = opened["sessionId"].as_str().unwrap().to_string();
        fill(&r.client, &id).await;
        let done = r
            .client
            .request("soba/compact", json!({"sessionId": id}))
            .await;
        assert_eq!(done["outcome"], "completed", "{done}");
        assert_eq!(done["quality"], "model", "{done}");
        ids.push(id);
    }
    let seen = server.requests();
    assert_eq!(seen.len(), 2, "one summary per session");
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {key_a}").as_str())
    );
    assert_eq!(
        seen[1].header("authorization"),
        Some(format!("Bearer {key_b}").as_str()),
        "B's session uses B's key, not that of the relay that started the daemon"
    );
    let a_budget = a
        .client
        .request("soba/budget", json!({"sessionId": ids[0]}))
        .await;
    assert_eq!(
        a_budget["hardLimit"],
        DEFAULT_WINDOW - DEFAULT_OUTPUT - 1000
    );

    // The daemon A started does not carry A's key in its environment.
    let pid = std::fs::read_to_string(root.join("run/daemon.lock")).unwrap();
    let environ = std::fs::read(format!("/proc/{}/environ", pid.trim())).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    assert!(
        environ.contains("SOBA_RUNTIME_DIR="),
        "the daemon's own environment was read"
    );
    assert!(!environ.contains(key_a), "the daemon inherited A's key");

    // Close both; the daemon leaves after its idle time, flushing what it writes.
    let mut stderr = Vec::new();
    for r in [&mut a, &mut b] {
        r.client.request("shutdown", Value::Null).await;
    }
    for mut r in [a, b] {
        drop(r.client);
        let _ = tokio::time::timeout(Duration::from_secs(10), r.child.wait()).await;
        let _ = r.child.start_kill();
        let out = r.child.wait_with_output().await.unwrap();
        stderr.push(out.stderr);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    let mut files = Vec::new();
    for dir in [root.join("data"), root.join("run"), workspace.clone()] {
        files_under(&dir, &mut files);
    }
    assert!(
        files.iter().any(|(p, _)| p.ends_with("daemon.log")),
        "the daemon's stderr is among the files scanned"
    );
    assert!(
        files
            .iter()
            .any(|(p, _)| p.to_string_lossy().contains("flight")),
        "flight records are among the files scanned: {:?}",
        files.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    for key in [key_a, key_b] {
        for (path, bytes) in &files {
            assert!(
                !String::from_utf8_lossy(bytes).contains(key),
                "{} holds a key",
                path.display()
            );
        }
        for err in &stderr {
            assert!(
                !String::from_utf8_lossy(err).contains(key),
                "a relay printed a key"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_older_than_the_handshake_refuses_it_with_a_warning_and_still_serves() {
    let e = env();
    // A daemon without the handshake: its frames go straight to the service, which refuses
    // every request before `initialize`.
    let (ours, theirs) = tokio::net::UnixStream::pair().unwrap();
    let (service, socket) = soba::daemon::server::build_service(e.daemon.clone());
    tokio::spawn(async move {
        let (r, w) = theirs.into_split();
        soba::daemon::framing::relay_frames(r, w, |i, o| {
            tower_lsp_server::Server::new(i, o, socket).serve(service)
        })
        .await;
    });
    let mut ours = ours;
    let hello = soba::daemon::protocol::HelloParams::default();
    let warning = soba::daemon::socket::send_hello(&mut ours, &hello)
        .await
        .unwrap()
        .expect("refused");
    assert!(
        warning.contains("did not take this client's config"),
        "{warning}"
    );
    let (r, w) = ours.into_split();
    let c = LspClient::new(r, w);
    c.initialize(&[&e.workspace], false).await;
    c.request("soba/session/open", json!({"workspace": e.workspace}))
        .await;
}

/// Issue 28, item 4, and the spec's "Do not reduce keepRecentTokens so far that the agent
/// loses the current tool batch or immediate task details": a session of a local model with a
/// 24k window opens with the default configuration (the default keepRecentTokens is capped to
/// half the hard limit), compacts at the hard limit, and keeps the current tool batch and
/// the task after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_window_session_opens_and_compacts_with_the_default_config_keeping_the_current_tool_batch(
) {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let opened = c
        .request(
            "soba/session/open",
            json!({"workspace": e.workspace, "model": {"name": "local-24k", "contextWindow": 24000}}),
        )
        .await;
    // 24000 − 6000 output (a quarter of the window) − 3072 reserve (8192 scaled to the window).
    assert_eq!(opened["budget"]["hardLimit"], 14928, "{opened}");
    let id = opened["sessionId"].as_str().unwrap().to_string();
    let mut entries: Vec<Value> = (0..12)
        .map(|i| message(if i % 2 == 0 { "user" } else { "assistant" }, &chunk(i)))
        .collect();
    entries.extend([
        json!({"type": "message", "role": "assistant", "content": [
            {"type": "tool_call", "id": "c-now", "name": "Bash", "input": {"command": "cargo test -p lexer"}}
        ]}),
        json!({"type": "tool_result", "callId": "c-now", "content": [{"type": "text", "text": "test lexer::keeps_last_token ... FAILED"}]}),
        message("user", "Make the lexer keep the last token, then rerun cargo test -p lexer"),
    ]);
    c.request(
        "soba/session/append",
        json!({"sessionId": id, "entries": entries}),
    )
    .await;
    let r = c.request("soba/preflight", json!({"sessionId": id})).await;
    assert_eq!(r["compaction"]["outcome"], "completed", "{r}");
    assert_eq!(r["compaction"]["trigger"], "hard_limit", "{r}");
    let sent = r["messages"].to_string();
    for kept in [
        "cargo test -p lexer",
        "keeps_last_token ... FAILED",
        "Make the lexer keep the last token",
    ] {
        assert!(
            sent.contains(kept),
            "{kept:?} is kept after the capsule: {sent}"
        );
    }
    let budget = c.request("soba/budget", json!({"sessionId": id})).await;
    assert!(
        budget["effectiveTokens"].as_u64().unwrap() < 9808,
        "{budget}"
    );
}
