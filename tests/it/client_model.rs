//! The agent's own model as summarizer, through the client that offered it: the daemon sends
//! `soba/summarize` to that client for the compactions its own requests start, validates the
//! answer, and falls back to the local capsule when it fails. Another client's compactions and
//! a configured summarizer never use it.

use crate::common::append_parser_turns;
use crate::support::lsp_client::{connect, LspClient};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba::schemas::protocol_file;

struct Env {
    _base: tempfile::TempDir,
    workspace: PathBuf,
    daemon: Arc<Daemon>,
}

/// A workspace whose config keeps a short tail, with `summarizer` as its summarizer block.
fn env(summarizer: Option<Value>) -> Env {
    let base = tempfile::tempdir().unwrap();
    let workspace = std::fs::canonicalize(base.path()).unwrap().join("project");
    std::fs::create_dir_all(workspace.join(".soba")).unwrap();
    let mut config = json!({"compaction": {"keepRecentTokens": 500, "minReclaimableTokens": 200}});
    if let Some(s) = summarizer {
        config["summarizer"] = s;
    }
    std::fs::write(workspace.join(".soba/config.json"), config.to_string()).unwrap();
    let daemon = Daemon::new(
        Paths::under(&base.path().join("soba")),
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

/// A client that offers its model (`small-model`), answering `soba/summarize` with `answer`.
async fn agent(e: &Env, answer: Value) -> LspClient {
    let c = connect(&e.daemon);
    c.answers
        .lock()
        .unwrap()
        .insert("soba/summarize".into(), answer);
    c.request(
        "initialize",
        json!({
            "processId": null,
            "rootUri": null,
            "clientInfo": {"name": "test agent"},
            "capabilities": {"experimental": {"soba": {"summarize": {"model": "small-model", "contextWindow": 32000}}}},
            "workspaceFolders": [{"uri": format!("file://{}", e.workspace.display()), "name": "ws"}],
        }),
    )
    .await;
    c.notify("initialized", json!({})).await;
    c
}

async fn session_with_history(c: &LspClient, ws: &Path) -> String {
    let id = c
        .request(
            "soba/session/open",
            json!({"workspace": ws, "model": {"name": "gpt-4o"}}),
        )
        .await["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    append_parser_turns(c, &id, 0).await;
    id
}

fn summarize_requests(c: &LspClient) -> Vec<Value> {
    c.server_request_log
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r["method"] == "soba/summarize")
        .cloned()
        .collect()
}

fn assert_matches_schema(part: &str, instance: &Value) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("schemas")
        .join(protocol_file("soba/summarize", part));
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = v.iter_errors(instance).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{part}: {errors:?}\n{instance}");
}

fn state_answer() -> Value {
    let state = json!({
        "goal": "Ship the parser",
        "completed": ["Wrote the token reader", "Edited src/ghost_module.rs"],
        "nextSteps": ["Resolve references against scopes"]
    });
    json!({"result": {"text": format!("Here it is:\n{state}"), "hitOutputLimit": false}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offering_clients_model_writes_its_compactions_and_no_one_elses() {
    let e = env(None);
    let a = agent(&e, state_answer()).await;
    let id = session_with_history(&a, &e.workspace).await;

    let compacted = a.request("soba/compact", json!({"sessionId": id})).await;
    assert_eq!(compacted["outcome"], "completed", "{compacted}");
    assert_eq!(compacted["quality"], "model");
    assert_eq!(compacted["fallback"], false);
    let capsule = a.request("soba/context", json!({"sessionId": id})).await["capsule"]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(capsule.contains("Ship the parser"), "{capsule}");
    assert!(capsule.contains("Wrote the token reader"));
    assert!(
        !capsule.contains("src/ghost_module.rs"),
        "an invented file is dropped"
    );

    // What went to the client: SOBA's prompt, sized for the offered model, per the schema.
    let asked = summarize_requests(&a);
    assert!(!asked.is_empty());
    for r in &asked {
        assert_matches_schema("params", &r["params"]);
        assert_eq!(r["params"]["sessionId"], id.as_str());
        assert_eq!(r["params"]["operationId"], compacted["operationId"]);
        assert_eq!(r["params"]["model"], "small-model");
        assert_eq!(
            r["params"]["system"],
            soba::summarize::prompt::SYSTEM_PROMPT
        );
        assert!(r["params"]["user"].as_str().unwrap().contains("Turn 0:"));
    }
    assert_matches_schema("result", &state_answer()["result"]);
    let budget = a.request("soba/budget", json!({"sessionId": id})).await;
    assert_eq!(
        budget["summarizer"]["uses"],
        "the agent's model (small-model) through test agent"
    );
    assert_eq!(budget["summarizer"]["breaker"]["state"], "closed");

    // An editor that offered nothing compacts with what the config says: the local builder.
    let editor = connect(&e.daemon);
    editor.initialize(&[&e.workspace], false).await;
    append_parser_turns(&a, &id, 12).await;
    let asked_before = summarize_requests(&a).len();
    let by_editor = editor
        .request("soba/compact", json!({"sessionId": id}))
        .await;
    assert_eq!(by_editor["outcome"], "completed", "{by_editor}");
    assert_eq!(by_editor["quality"], "local");
    assert_eq!(
        by_editor["fallback"], false,
        "no model was configured for it"
    );
    assert_eq!(
        summarize_requests(&a).len(),
        asked_before,
        "the agent was not asked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_client_model_gives_the_local_capsule_with_the_reason() {
    let e = env(None);
    let a = agent(
        &e,
        json!({"error": {"code": -32803, "message": "upstream overloaded", "data": {"status": 529}}}),
    )
    .await;
    let id = session_with_history(&a, &e.workspace).await;
    let compacted = a.request("soba/compact", json!({"sessionId": id})).await;
    assert_eq!(compacted["outcome"], "completed", "{compacted}");
    assert_eq!(compacted["quality"], "degraded");
    assert_eq!(compacted["fallback"], true);
    let reason = compacted["reason"].as_str().unwrap();
    assert!(
        reason.contains("HTTP 529: upstream overloaded")
            && reason.ends_with("the local capsule was used"),
        "{reason}"
    );
}

/// A client that exits while the daemon waits for its model's summary (pi stopped during a
/// compaction) can never answer: the daemon stops waiting as soon as the client's input ends
/// and builds the local capsule, rather than holding the connection, and the `soba serve`
/// relaying it, open until the compaction's 15 s timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_input_ends_while_it_owes_a_summary_gets_the_local_capsule_at_once() {
    let e = env(None);
    let a = Arc::new(agent(&e, Value::Null).await);
    let id = session_with_history(&a, &e.workspace).await;
    let compacting = tokio::spawn({
        let a = a.clone();
        async move { a.request("soba/compact", json!({"sessionId": id})).await }
    });
    let asked = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while summarize_requests(&a).is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(asked.is_ok(), "the daemon asked the client's model");
    a.close_input().await;
    let compacted = tokio::time::timeout(std::time::Duration::from_secs(5), compacting)
        .await
        .expect("answered long before the compaction's 15 s timeout")
        .unwrap();
    assert_eq!(compacted["outcome"], "completed", "{compacted}");
    assert_eq!(compacted["quality"], "degraded");
    let reason = compacted["reason"].as_str().unwrap();
    assert!(
        reason.contains("test agent closed its connection before it answered"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summarizer_block_in_the_config_wins_over_the_offer() {
    let e = env(Some(json!({"provider": "local"})));
    let a = agent(&e, state_answer()).await;
    let id = session_with_history(&a, &e.workspace).await;
    let compacted = a.request("soba/compact", json!({"sessionId": id})).await;
    assert_eq!(compacted["outcome"], "completed", "{compacted}");
    assert_eq!(compacted["quality"], "local");
    assert!(summarize_requests(&a).is_empty());
    let budget = a.request("soba/budget", json!({"sessionId": id})).await;
    assert_eq!(budget["summarizer"]["uses"], "local");
}
