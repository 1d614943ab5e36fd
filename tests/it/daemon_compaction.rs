//! The preflight barrier through the daemon: compaction with progress and notifications,
//! concurrency while a compaction runs, cancellation, staleness, overflow recovery, errors,
//! flight records, and file changes reaching the capsule.

use crate::support::lsp_client;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use lsp_client::LspClient;
use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::protocol::code;
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba::daemon::watcher::WatchMode;
use soba::summarize::summarizer::Summarizer;
use soba::summarize::summarizer::SummaryError;
use soba::summarize::summarizer::SummaryRequest;
use soba_core::session::capsule::model::CapsuleState;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// A summarizer that reports 40% and then waits until the test releases it: the test decides
/// exactly when the compaction ends.
struct GatedSummarizer {
    gate: Arc<Semaphore>,
    fail: Option<SummaryError>,
}

impl Summarizer for GatedSummarizer {
    fn describe(&self) -> String {
        "gated test summarizer".into()
    }

    fn summarize<'a>(
        &'a self,
        _req: &'a SummaryRequest,
        progress: &'a (dyn Fn(u8) + Send + Sync),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<CapsuleState, SummaryError>> {
        Box::pin(async move {
            progress(40);
            tokio::select! {
                permit = self.gate.acquire() => permit.expect("gate open").forget(),
                _ = cancel.cancelled() => return Err(SummaryError::Cancelled),
            }
            progress(90);
            match &self.fail {
                Some(e) => Err(e.clone()),
                None => Ok(CapsuleState {
                    goal: "Fix the failing auth test".into(),
                    next_steps: vec!["run the suite".into()],
                    sources: Default::default(),
                    ..CapsuleState::default()
                }),
            }
        })
    }
}

struct Env {
    _base: tempfile::TempDir,
    workspace: PathBuf,
    daemon: Arc<Daemon>,
    gate: Arc<Semaphore>,
}

/// A workspace with a small window: hard limit 9808, soft limit 7846, 1000 recent tokens kept.
fn env_with(watch: Option<WatchMode>, fail: Option<SummaryError>) -> Env {
    let base = tempfile::tempdir().unwrap();
    let workspace = std::fs::canonicalize(base.path()).unwrap().join("project");
    std::fs::create_dir_all(workspace.join(".soba")).unwrap();
    std::fs::write(
        workspace.join(".soba/config.json"),
        json!({
            "model": {"name": "gpt-4o", "contextWindow": 20000, "maxOutputTokens": 2000},
            "compaction": {"keepRecentTokens": 1000, "minTokensForAutoCompact": 3000, "minReclaimableTokens": 500,
                           "safetyReserveTokens": 8192}
        })
        .to_string(),
    )
    .unwrap();
    let gate = Arc::new(Semaphore::new(0));
    let summarizer: Arc<dyn Summarizer> = Arc::new(GatedSummarizer {
        gate: gate.clone(),
        fail,
    });
    let options = DaemonOptions {
        watch,
        extra_config: None,
        summarizer: Some(summarizer),
        ..DaemonOptions::default()
    };
    let daemon = Daemon::new(Paths::under(&base.path().join("soba")), options);
    Env {
        _base: base,
        workspace,
        daemon,
        gate,
    }
}

fn env() -> Env {
    env_with(None, None)
}

fn connect(daemon: &Arc<Daemon>) -> LspClient {
    let (client_io, server_io) = tokio::io::duplex(1 << 22);
    let (sr, sw) = tokio::io::split(server_io);
    tokio::spawn(soba::daemon::server::serve_connection(
        daemon.clone(),
        sr,
        sw,
    ));
    let (cr, cw) = tokio::io::split(client_io);
    LspClient::new(cr, cw)
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

/// A session over its hard limit: 12 exchanges of ~1000 tokens each.
async fn oversized_session(c: &LspClient, env: &Env) -> String {
    let opened = c
        .request("soba/session/open", json!({"workspace": env.workspace}))
        .await;
    let id = opened["sessionId"].as_str().unwrap().to_string();
    assert_eq!(opened["budget"]["hardLimit"], 9808);
    let entries: Vec<Value> = (0..12)
        .map(|i| message(if i % 2 == 0 { "user" } else { "assistant" }, &chunk(i)))
        .collect();
    let r = c
        .request(
            "soba/session/append",
            json!({"sessionId": id, "entries": entries}),
        )
        .await;
    assert!(
        r["budget"]["effectiveTokens"].as_u64().unwrap() > 9808,
        "{}",
        r["budget"]
    );
    id
}

async fn until_phase(c: &LspClient, phase: &str) -> Value {
    loop {
        let n = c
            .expect_notification("soba/compaction", Duration::from_secs(10))
            .await;
        if n["phase"] == phase {
            return n;
        }
    }
}

/// Wait up to 5 s for a condition (notifications are coalesced and arrive a little later).
async fn eventually(mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < deadline, "condition not met within 5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn session_types(daemon: &Daemon, id: &str) -> Vec<String> {
    let path = daemon.session(id).unwrap().path;
    let (s, _) = soba_core::session::log::read_session(&path).unwrap();
    s.entries()
        .iter()
        .map(|e| e.body.type_name().to_string())
        .collect()
}

/// A close sent while a compaction runs ends it as a cancel does: the waiting preflight is
/// answered, input queued before the close is applied, and the log is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_during_a_compaction_cancels_it_and_answers_everyone() {
    let e = env();
    let c = Arc::new(connect(&e.daemon));
    c.initialize(&[&e.workspace], false).await;
    let id = oversized_session(&c, &e).await;
    let preflight = {
        let (c, id) = (c.clone(), id.clone());
        tokio::spawn(async move { c.raw("soba/preflight", json!({"sessionId": id})).await })
    };
    until_phase(&c, "progress").await;
    let queued = {
        let (c, id) = (c.clone(), id.clone());
        tokio::spawn(async move {
            c.raw(
                "soba/session/append",
                json!({"sessionId": id, "entries": [message("user", "sent before the close")]}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let closed = c
        .request("soba/session/close", json!({"sessionId": id}))
        .await;
    let path = PathBuf::from(closed["path"].as_str().unwrap());
    // The gate was never opened: only the close could end the compaction.
    let end = until_phase(&c, "end").await;
    assert_eq!(end["result"]["outcome"], "cancelled", "{end}");
    // Over the hard limit with no capsule, the waiting agent hears that its turn was
    // cancelled and the budget is exceeded, not silence.
    let answer = preflight.await.unwrap();
    assert_eq!(answer["error"]["code"], code::BUDGET_EXCEEDED, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cancelled"),
        "{answer}"
    );
    let appended = queued.await.unwrap();
    assert!(appended.get("result").is_some(), "{appended}");
    let (log, _) =
        soba_core::session::log::SessionLog::open(&path, soba_core::config::Durability::Flush)
            .expect("the log is released");
    let last = log.session().entries().last().unwrap();
    assert!(
        serde_json::to_string(&last.body)
            .unwrap()
            .contains("sent before the close"),
        "{last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preflight_compacts_with_progress_and_stays_responsive() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], true).await;
    let id = oversized_session(&c, &e).await;
    let observer = connect(&e.daemon);
    observer.initialize(&[], false).await;

    let c = Arc::new(c);
    let preflight = {
        let (c, id) = (c.clone(), id.clone());
        tokio::spawn(async move { c.raw("soba/preflight", json!({"sessionId": id})).await })
    };
    let start = until_phase(&c, "start").await;
    assert_eq!(start["trigger"], "hard_limit");
    let progress = until_phase(&c, "progress").await;
    assert_eq!(progress["percent"], 40);

    // While the summary is being written: budget, sessions and other sessions answer at once.
    let t = Instant::now();
    let budget = observer
        .request("soba/budget", json!({"sessionId": id}))
        .await;
    assert_eq!(budget["compacting"], true);
    observer.request("soba/sessions", json!({})).await;
    let other = observer
        .request("soba/session/open", json!({"workspace": e.workspace}))
        .await;
    let other_id = other["sessionId"].as_str().unwrap();
    observer
        .request(
            "soba/session/append",
            json!({"sessionId": other_id, "entries": [message("user", "hi")]}),
        )
        .await;
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "requests during a compaction took {:?}",
        t.elapsed()
    );

    // An append to the compacting session waits and lands after the capsule.
    let queued = {
        let id = id.clone();
        let daemon = e.daemon.clone();
        tokio::spawn(async move {
            let o = connect(&daemon);
            o.initialize(&[], false).await;
            o.request(
                "soba/session/append",
                json!({"sessionId": id, "entries": [message("user", "typed during the barrier")]}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !queued.is_finished(),
        "an append to a compacting session is queued"
    );
    assert!(!session_types(&e.daemon, &id).contains(&"capsule".to_string()));

    e.gate.add_permits(1);
    let end = until_phase(&c, "end").await;
    let result = &end["result"];
    assert_eq!(result["outcome"], "completed", "{end}");
    assert_eq!(result["quality"], "model");
    let line = end["message"].as_str().unwrap();
    assert!(
        line.starts_with("hard_limit compact: ")
            && line.contains(result["checkpointId"].as_str().unwrap()),
        "{line}"
    );

    let answer = preflight.await.unwrap();
    let answer = &answer["result"];
    assert_eq!(answer["compaction"]["checkpointId"], result["checkpointId"]);
    assert!(answer["tokens"].as_u64().unwrap() <= 9808);
    let messages = answer["messages"].as_array().unwrap();
    assert!(messages[0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("Fix the failing auth test"));
    assert_eq!(
        messages.last().unwrap()["content"][0]["text"],
        "typed during the barrier"
    );
    queued.await.unwrap();

    let types = session_types(&e.daemon, &id);
    let capsule_at = types.iter().position(|t| t == "capsule").unwrap();
    assert_eq!(
        types[capsule_at + 1..],
        ["message".to_string()],
        "{types:?}"
    );

    // $/progress mirrored the compaction for a client that asked for it.
    assert!(c
        .server_requests
        .lock()
        .unwrap()
        .contains(&"window/workDoneProgress/create".to_string()));
    let progress: Vec<Value> = c
        .seen("$/progress")
        .into_iter()
        .map(|p| p["value"].clone())
        .collect();
    assert_eq!(progress.first().unwrap()["kind"], "begin");
    assert_eq!(
        progress.first().unwrap()["title"],
        "Compacting context before response (hard_limit)"
    );
    assert!(
        progress
            .iter()
            .any(|p| p["kind"] == "report" && p["message"] == "40%" && p["percentage"] == 40),
        "{progress:?}"
    );
    assert_eq!(progress.last().unwrap()["kind"], "end");
    assert_eq!(progress.last().unwrap()["message"], line);
    // Budget notifications followed the compaction.
    eventually(|| {
        c.seen("soba/budgetChanged")
            .last()
            .is_some_and(|b| b["lastCompaction"]["checkpointId"] == result["checkpointId"])
    })
    .await;

    let flight = observer
        .request("soba/flight", json!({"sessionId": id}))
        .await;
    let records = flight["records"].as_array().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["operationId"], result["operationId"]);
    assert_eq!(records[0]["outcome"], "completed");
    assert_eq!(records[0]["hardLimit"], 9808);
    let text = serde_json::to_string(records).unwrap();
    assert!(
        !text.contains("Fix the failing auth test"),
        "flight records carry no capsule text"
    );
}

/// Start a preflight that compacts, and wait until its summary is being written.
async fn compacting(c: &Arc<LspClient>, id: &str) -> tokio::task::JoinHandle<Value> {
    let preflight = {
        let (c, id) = (c.clone(), id.to_string());
        tokio::spawn(async move { c.raw("soba/preflight", json!({"sessionId": id})).await })
    };
    until_phase(c, "progress").await;
    preflight
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_the_compaction_without_a_capsule() {
    let e = env();
    let c = Arc::new(connect(&e.daemon));
    c.initialize(&[&e.workspace], false).await;
    let id = oversized_session(&c, &e).await;
    assert_eq!(
        c.request("soba/cancel", json!({"sessionId": id})).await,
        json!({"cancelled": false})
    );
    let preflight = compacting(&c, &id).await;
    assert_eq!(
        c.request("soba/cancel", json!({"sessionId": id})).await,
        json!({"cancelled": true})
    );
    let end = until_phase(&c, "end").await;
    assert_eq!(end["result"]["outcome"], "cancelled");
    // The input is still over the hard limit, so nothing may be sent.
    let answer = preflight.await.unwrap();
    assert_eq!(answer["error"]["code"], code::BUDGET_EXCEEDED, "{answer}");
    assert_eq!(
        answer["error"]["data"]["compaction"]["operationId"],
        end["result"]["operationId"]
    );
    assert!(!session_types(&e.daemon, &id).contains(&"capsule".to_string()));
    // A summary that arrives after the cancellation cannot write either.
    e.gate.add_permits(1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!session_types(&e.daemon, &id).contains(&"capsule".to_string()));
    let flight = c.request("soba/flight", json!({"sessionId": id})).await;
    assert_eq!(flight["records"][0]["outcome"], "cancelled");
    // What docs/compaction.md's outcome table promises: the log records the cancelled
    // operation (a `compaction` record), and holds no capsule.
    let types = session_types(&e.daemon, &id);
    assert_eq!(
        types.iter().filter(|t| *t == "compaction").count(),
        1,
        "{types:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_during_the_barrier_makes_it_stale() {
    let e = env();
    let c = Arc::new(connect(&e.daemon));
    c.initialize(&[&e.workspace], false).await;
    let id = oversized_session(&c, &e).await;
    let first = {
        let path = e.daemon.session(&id).unwrap().path;
        let (s, _) = soba_core::session::log::read_session(&path).unwrap();
        s.entries()[0].id.clone()
    };
    let preflight = compacting(&c, &id).await;
    let rewound = c
        .request("soba/rewind", json!({"sessionId": id, "entryId": first}))
        .await;
    assert_eq!(rewound["leafId"], first.as_str());
    e.gate.add_permits(1);
    let end = until_phase(&c, "end").await;
    assert_eq!(end["result"]["outcome"], "stale", "{end}");
    // After the rewind the input is one message: it is sent as is.
    let answer = preflight.await.unwrap();
    assert_eq!(
        answer["result"]["messages"].as_array().unwrap().len(),
        1,
        "{answer}"
    );
    assert_eq!(answer["result"]["compaction"]["outcome"], "stale");
    assert!(!session_types(&e.daemon, &id).contains(&"capsule".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_compact_with_instructions_from_the_editor() {
    let e = env();
    let agent = connect(&e.daemon);
    agent.initialize(&[], false).await;
    let id = oversized_session(&agent, &e).await;
    let editor = connect(&e.daemon);
    editor.initialize(&[&e.workspace], false).await;
    e.gate.add_permits(1);
    // No sessionId: the active session of the editor's first folder.
    let r = editor
        .request("workspace/executeCommand", json!({"command": "soba.server.compact", "arguments": [{"instructions": "focus on auth"}]}))
        .await;
    assert_eq!(r["outcome"], "completed", "{r}");
    assert_eq!(r["trigger"], "user");
    assert!(r["tokensAfter"].as_u64().unwrap() < r["tokensBefore"].as_u64().unwrap());
    let path = e.daemon.session(&id).unwrap().path;
    let (s, _) = soba_core::session::log::read_session(&path).unwrap();
    let capsule = s
        .entries()
        .iter()
        .rev()
        .find_map(|e| e.as_capsule())
        .unwrap();
    assert_eq!(capsule.instructions.as_deref(), Some("focus on auth"));
    let budget = editor.request("soba/budget", json!({})).await;
    assert_eq!(budget["lastCompaction"]["checkpointId"], r["checkpointId"]);
    assert_eq!(budget["effectiveTokens"], r["tokensAfter"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_the_agent_starts_on_its_own_is_recorded_with_its_trigger() {
    let e = env();
    let agent = connect(&e.daemon);
    agent.initialize(&[], false).await;
    let id = oversized_session(&agent, &e).await;
    e.gate.add_permits(1);
    // pi compacting at its own threshold.
    let r = agent
        .request(
            "soba/compact",
            json!({"sessionId": id, "trigger": "auto_threshold"}),
        )
        .await;
    assert_eq!(r["outcome"], "completed", "{r}");
    assert_eq!(r["trigger"], "auto_threshold");
    let path = e.daemon.session(&id).unwrap().path;
    let (s, _) = soba_core::session::log::read_session(&path).unwrap();
    let capsule = s
        .entries()
        .iter()
        .rev()
        .find_map(|e| e.as_capsule())
        .unwrap();
    assert_eq!(
        capsule.trigger,
        soba_core::session::trigger::Trigger::AutoThreshold
    );
    let budget = agent.request("soba/budget", json!({"sessionId": id})).await;
    assert_eq!(budget["lastCompaction"]["trigger"], "auto_threshold");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_a_client_cannot_give_is_refused_with_the_ones_it_can() {
    let e = env();
    let agent = connect(&e.daemon);
    agent.initialize(&[], false).await;
    let id = oversized_session(&agent, &e).await;
    let before = session_types(&e.daemon, &id);
    for trigger in ["hard_limit", "milestone", "handoff", "threshold"] {
        let err = agent
            .error("soba/compact", json!({"sessionId": id, "trigger": trigger}))
            .await;
        assert_eq!(err["code"], code::INVALID_PARAMS, "{err}");
        let message = err["message"].as_str().unwrap();
        for accepted in ["`user`", "`auto_threshold`", "`context_overflow`"] {
            assert!(message.contains(accepted), "{message}");
        }
        assert!(message.contains(trigger), "{message}");
    }
    assert_eq!(session_types(&e.daemon, &id), before, "nothing recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_allows_one_recovery_per_turn() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[], false).await;
    let id = oversized_session(&c, &e).await;
    e.gate.add_permits(1);
    let r = c.request("soba/overflow", json!({"sessionId": id})).await;
    assert_eq!(r["compaction"]["trigger"], "context_overflow");
    assert_eq!(r["compaction"]["outcome"], "completed", "{r}");
    assert_eq!(r["retryAllowed"], true);
    let err = c.error("soba/overflow", json!({"sessionId": id})).await;
    assert_eq!(err["code"], code::OVERFLOW_RETRY_USED, "{err}");
    assert_eq!(err["data"]["compaction"]["outcome"], "failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_input_that_cannot_fit_is_refused() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[], false).await;
    let opened = c
        .request("soba/session/open", json!({"workspace": e.workspace}))
        .await;
    let id = opened["sessionId"].as_str().unwrap();
    // One message larger than the hard limit: nothing lies before it to compact.
    let huge: String = (0..12).map(chunk).collect::<Vec<_>>().join(" ");
    c.request(
        "soba/session/append",
        json!({"sessionId": id, "entries": [message("user", &huge)]}),
    )
    .await;
    let err = c.error("soba/preflight", json!({"sessionId": id})).await;
    assert_eq!(err["code"], code::BUDGET_EXCEEDED, "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .starts_with("context budget exceeded"),
        "{err}"
    );
    // Said once, not "context budget exceeded: context budget exceeded: …".
    assert_eq!(
        err["message"]
            .as_str()
            .unwrap()
            .matches("context budget exceeded")
            .count(),
        1,
        "{err}"
    );
    assert_eq!(err["data"]["compaction"]["trigger"], "hard_limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turn_complete_and_checkpoints_record_intents() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[], false).await;
    let opened = c
        .request("soba/session/open", json!({"workspace": e.workspace}))
        .await;
    let id = opened["sessionId"].as_str().unwrap();
    c.request(
        "soba/session/append",
        json!({"sessionId": id, "entries": [message("user", "hi"), message("assistant", "hello")]}),
    )
    .await;
    let r = c
        .request("soba/turn/complete", json!({"sessionId": id, "usage": {"input": 900, "cacheRead": 0, "cacheWrite": 0, "output": 100}}))
        .await;
    assert_eq!(r, json!({"intentRecorded": true}));
    let r = c
        .request(
            "soba/checkpoint",
            json!({"sessionId": id, "kind": "milestone", "label": "tests green"}),
        )
        .await;
    assert_eq!(r["intentRecorded"], true);
    assert!(r["entryId"].as_str().unwrap().starts_with("e_"));
    let err = c
        .error(
            "soba/checkpoint",
            json!({"sessionId": id, "kind": "lunch", "label": "x"}),
        )
        .await;
    assert!(
        err["message"].as_str().unwrap().contains("`kind`")
            || err["message"].as_str().unwrap().contains("lunch"),
        "{err}"
    );
    c.request(
        "soba/autoCompact",
        json!({"sessionId": id, "enabled": false}),
    )
    .await;
    assert_eq!(
        c.request("soba/turn/complete", json!({"sessionId": id}))
            .await,
        json!({"intentRecorded": false})
    );
    // The small session is under every limit: preflight consumes the intents and sends as is.
    let r = c.request("soba/preflight", json!({"sessionId": id})).await;
    assert_eq!(r["messages"].as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degraded_fallback_is_announced() {
    let e = env_with(None, Some(SummaryError::Timeout { after_ms: 15000 }));
    let c = Arc::new(connect(&e.daemon));
    c.initialize(&[&e.workspace], false).await;
    let id = oversized_session(&c, &e).await;
    e.gate.add_permits(1);
    let r = c.request("soba/preflight", json!({"sessionId": id})).await;
    assert_eq!(r["compaction"]["quality"], "degraded");
    assert_eq!(r["compaction"]["fallback"], true);
    let shown = c
        .expect_notification("window/showMessage", Duration::from_secs(5))
        .await;
    assert_eq!(shown["type"], 2);
    assert!(
        shown["message"]
            .as_str()
            .unwrap()
            .contains("did not finish within 15000 ms"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_changed_on_disk_between_turns_reaches_the_next_capsule() {
    let e = env_with(Some(WatchMode::Native), None);
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let id = oversized_session(&c, &e).await;
    // Edited by a formatter, not by a tool call of the agent.
    std::fs::write(e.workspace.join("formatted.rs"), "fn main() {}\n").unwrap();
    eventually(|| session_types(&e.daemon, &id).contains(&"file".to_string())).await;
    // The file entry is the newest entry; more conversation follows so that it is summarized.
    let entries: Vec<Value> = (20..24)
        .map(|i| message(if i % 2 == 0 { "user" } else { "assistant" }, &chunk(i)))
        .collect();
    c.request(
        "soba/session/append",
        json!({"sessionId": id, "entries": entries}),
    )
    .await;
    e.gate.add_permits(1);
    let r = c.request("soba/preflight", json!({"sessionId": id})).await;
    assert_eq!(r["compaction"]["outcome"], "completed", "{r}");
    let path = e.daemon.session(&id).unwrap().path;
    let (s, _) = soba_core::session::log::read_session(&path).unwrap();
    let capsule = s
        .entries()
        .iter()
        .rev()
        .find_map(|e| e.as_capsule())
        .unwrap();
    let modified: Vec<&str> = capsule
        .artifacts
        .modified_files
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    assert!(modified.contains(&"formatted.rs"), "{modified:?}");
    assert!(r["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("formatted.rs"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capsules_are_created_listed_exported_and_loaded() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let id = oversized_session(&c, &e).await;
    e.gate.add_permits(1);
    let created = c
        .request(
            "soba/capsule/create",
            json!({"sessionId": id, "title": "handoff auth work"}),
        )
        .await;
    let ck = created["checkpointId"].as_str().unwrap().to_string();
    assert_eq!(created["title"], "handoff auth work");
    // The capsule's own size, and apart from it the size of the session it describes.
    assert!(
        created["sessionTokens"].as_u64().unwrap() > 9808,
        "{created}"
    );
    let tokens = created["tokens"].as_u64().unwrap();
    assert!(tokens > 0 && tokens < 9808, "{created}");

    let list = c.request("soba/capsule/list", json!({})).await;
    let row = &list["capsules"][0];
    assert_eq!(row["checkpointId"], ck.as_str());
    assert!(row["entryId"]
        .as_str()
        .is_some_and(|id| id.starts_with("e_")));
    assert_eq!(row["trigger"], "handoff");
    assert_eq!(row["origin"], "session");
    assert_eq!(row["title"], "handoff auth work");
    // One size for the capsule wherever it is shown: the toast's and the list's agree.
    assert_eq!(row["tokens"]["capsule"], created["tokens"], "{list}");

    let out = e.workspace.join("handoff.capsule.md");
    let exported = c
        .request(
            "soba/capsule/export",
            json!({"checkpointId": ck, "path": out}),
        )
        .await;
    assert_eq!(exported["path"], out.display().to_string());
    assert!(std::fs::read_to_string(&out)
        .unwrap()
        .contains("Fix the failing auth test"));
    let err = c
        .error(
            "soba/capsule/export",
            json!({"checkpointId": ck, "path": out}),
        )
        .await;
    assert!(
        err["message"].as_str().unwrap().contains("already exists"),
        "{err}"
    );
    let err = c
        .error(
            "soba/capsule/export",
            json!({"checkpointId": "ck_nope", "path": e.workspace.join("x.capsule.md")}),
        )
        .await;
    // An unknown checkpoint is the request's to fix, not the daemon's failure.
    assert_eq!(err["code"], code::INVALID_PARAMS, "{err}");
    let message = err["message"].as_str().unwrap();
    assert!(
        message.starts_with("`checkpointId`: no capsule `ck_nope` in this session.")
            && message.contains(ck.as_str()),
        "{err}"
    );

    // Into a fresh session (which becomes the workspace's active one).
    let other = c
        .request("soba/session/open", json!({"workspace": e.workspace}))
        .await;
    let other_id = other["sessionId"].as_str().unwrap();
    let loaded = c.request("soba/capsule/load", json!({"path": out})).await;
    assert_eq!(loaded["sessionId"], other_id);
    let list = c
        .request("soba/capsule/list", json!({"sessionId": other_id}))
        .await;
    assert_eq!(list["capsules"][0]["checkpointId"], loaded["checkpointId"]);
    assert_eq!(list["capsules"][0]["origin"], "loaded");
    let input = c
        .request("soba/preflight", json!({"sessionId": other_id}))
        .await;
    assert!(input["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("Fix the failing auth test"));
    let err = c
        .error(
            "soba/capsule/load",
            json!({"path": e.workspace.join("missing.capsule.md")}),
        )
        .await;
    assert_eq!(err["code"], code::INVALID_PARAMS, "{err}");

    // A model capsule missing a section is refused with its line, and nothing is appended.
    let exported = std::fs::read_to_string(&out).unwrap();
    assert!(exported.contains("quality: model"), "{exported}");
    let edited = e.workspace.join("edited.capsule.md");
    std::fs::write(&edited, exported.replace("## Blockers\n", "")).unwrap();
    let err = c.error("soba/capsule/load", json!({"path": edited})).await;
    assert_eq!(err["code"], code::INVALID_PARAMS, "{err}");
    let message = err["message"].as_str().unwrap();
    assert!(
        message.contains("not a valid capsule file") && message.contains("`## Blockers` section"),
        "{err}"
    );
    let after = c
        .request("soba/capsule/list", json!({"sessionId": other_id}))
        .await;
    assert_eq!(after["capsules"].as_array().unwrap().len(), 1, "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soba_flight_prints_the_records_of_a_session() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let id = oversized_session(&c, &e).await;
    e.gate.add_permits(1);
    let r = c.request("soba/compact", json!({"sessionId": id})).await;
    let path = e.daemon.session(&id).unwrap().path;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["flight", path.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["records"][0]["operationId"], r["operationId"]);
    assert_eq!(
        printed["records"][0]["reclaimed"],
        r["tokensBefore"].as_u64().unwrap() - r["tokensAfter"].as_u64().unwrap()
    );
}

/// A session under its soft limit with history enough for an explicit compact: 6 messages of
/// ~800 tokens, and a preflight that handed the agent its input (the inference is in flight).
async fn inference_in_flight(c: &LspClient, env: &Env) -> String {
    let opened = c
        .request("soba/session/open", json!({"workspace": env.workspace}))
        .await;
    let id = opened["sessionId"].as_str().unwrap().to_string();
    let short = |i: usize| chunk(i).split(' ').take(300).collect::<Vec<_>>().join(" ");
    let entries: Vec<Value> = (0..6)
        .map(|i| message(if i % 2 == 0 { "user" } else { "assistant" }, &short(i)))
        .collect();
    c.request(
        "soba/session/append",
        json!({"sessionId": id, "entries": entries}),
    )
    .await;
    c.request(
        "soba/session/append",
        json!({"sessionId": id, "entries": [message("user", "next")]}),
    )
    .await;
    let ready = c.request("soba/preflight", json!({"sessionId": id})).await;
    assert!(ready["compaction"].is_null(), "{ready}");
    id
}

/// Wait until the session shows an explicit `/compact` queued behind the agent's inference.
async fn until_compact_queued(e: &Env, id: &str) {
    eventually(|| e.daemon.session(id).unwrap().status().budget.compact_queued).await;
}

/// Send `soba/compact` as an editor would, without waiting for the answer.
fn editor_compact(c: &Arc<LspClient>, id: &str) -> tokio::task::JoinHandle<Value> {
    let (c, id) = (c.clone(), id.to_string());
    tokio::spawn(async move { c.raw("soba/compact", json!({"sessionId": id})).await })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_compact_during_the_agents_inference_waits_for_its_next_append() {
    let e = env();
    let agent = connect(&e.daemon);
    agent.initialize(&[&e.workspace], false).await;
    let editor = Arc::new(connect(&e.daemon));
    editor.initialize(&[&e.workspace], false).await;
    let id = inference_in_flight(&agent, &e).await;
    let compact = editor_compact(&editor, &id);
    // Queued, not running: no summary is written while the model works; the status says so.
    until_compact_queued(&e, &id).await;
    let budget = editor
        .request("soba/budget", json!({"sessionId": id}))
        .await;
    assert_eq!(budget["compactQueued"], true, "{budget}");
    assert_eq!(budget["compacting"], false, "{budget}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !compact.is_finished(),
        "answered before the inference ended"
    );
    assert!(!session_types(&e.daemon, &id).contains(&"capsule".to_string()));
    // The inference ends: the agent appends the model's answer; the compaction runs after it.
    e.gate.add_permits(1);
    agent
        .request(
            "soba/session/append",
            json!({"sessionId": id, "entries": [message("assistant", "done")]}),
        )
        .await;
    let answer = compact.await.unwrap();
    assert_eq!(answer["result"]["outcome"], "completed", "{answer}");
    assert_eq!(answer["result"]["trigger"], "user", "{answer}");
    let types = session_types(&e.daemon, &id);
    let capsule = types.iter().position(|t| t == "capsule").unwrap();
    let last_message = types.iter().rposition(|t| t == "message").unwrap();
    assert!(capsule > last_message, "{types:?}");
    let budget = editor
        .request("soba/budget", json!({"sessionId": id}))
        .await;
    assert_eq!(budget["compactQueued"], false, "{budget}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_compact_runs_before_the_agents_next_preflight() {
    let e = env();
    let agent = connect(&e.daemon);
    agent.initialize(&[&e.workspace], false).await;
    let editor = Arc::new(connect(&e.daemon));
    editor.initialize(&[&e.workspace], false).await;
    let id = inference_in_flight(&agent, &e).await;
    let compact = editor_compact(&editor, &id);
    until_compact_queued(&e, &id).await;
    // A second /compact meanwhile is refused with what to do.
    let again = editor.raw("soba/compact", json!({"sessionId": id})).await;
    assert_eq!(again["error"]["code"], code::INVALID_REQUEST, "{again}");
    assert!(
        again["error"]["message"]
            .as_str()
            .unwrap()
            .contains("soba/cancel"),
        "{again}"
    );
    e.gate.add_permits(1);
    let next = agent
        .request("soba/preflight", json!({"sessionId": id}))
        .await;
    let first = next["messages"][0]["content"][0]["text"].as_str().unwrap();
    assert!(first.starts_with("# Context Capsule"), "{first}");
    let answer = compact.await.unwrap();
    assert_eq!(answer["result"]["outcome"], "completed", "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_compact_can_be_cancelled_before_it_runs() {
    let e = env();
    let agent = connect(&e.daemon);
    agent.initialize(&[&e.workspace], false).await;
    let editor = Arc::new(connect(&e.daemon));
    editor.initialize(&[&e.workspace], false).await;
    let id = inference_in_flight(&agent, &e).await;
    let compact = editor_compact(&editor, &id);
    until_compact_queued(&e, &id).await;
    assert_eq!(
        editor
            .request("soba/cancel", json!({"sessionId": id}))
            .await,
        json!({"cancelled": true})
    );
    let answer = compact.await.unwrap();
    assert_eq!(answer["result"]["outcome"], "cancelled", "{answer}");
    agent
        .request(
            "soba/session/append",
            json!({"sessionId": id, "entries": [message("assistant", "done")]}),
        )
        .await;
    assert!(!session_types(&e.daemon, &id).contains(&"capsule".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_own_compact_between_its_inferences_runs_at_once() {
    // pi's `/compact`: the agent that was handed the input asks, so its model is not working.
    let e = env();
    let agent = Arc::new(connect(&e.daemon));
    agent.initialize(&[&e.workspace], false).await;
    let id = inference_in_flight(&agent, &e).await;
    e.gate.add_permits(1);
    let answer = editor_compact(&agent, &id).await.unwrap();
    assert_eq!(answer["result"]["outcome"], "completed", "{answer}");
    assert!(session_types(&e.daemon, &id).contains(&"capsule".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_compact_with_no_inference_in_flight_runs_at_once() {
    let e = env();
    let c = Arc::new(connect(&e.daemon));
    c.initialize(&[&e.workspace], false).await;
    let id = inference_in_flight(&c, &e).await;
    c.request(
        "soba/session/append",
        json!({"sessionId": id, "entries": [message("assistant", "done")]}),
    )
    .await;
    e.gate.add_permits(1);
    let answer = editor_compact(&c, &id).await.unwrap();
    assert_eq!(answer["result"]["outcome"], "completed", "{answer}");
}
