//! Progress of a model summarization through the daemon: a loopback provider streams its reply
//! slowly, and `soba/compaction` progress and `$/progress` reports move with the streamed
//! tokens instead of sitting at 0% until the end.

use crate::loopback::{head, Loopback, Step};
use crate::support::lsp_client::LspClient;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba::summarize::client::ModelSummarizer;
use soba::summarize::summarizer::Summarizer;
use soba_core::config::{Provider, SummarizerConfig};

/// Pieces the reply streams in, and the pause before each.
const PIECES: usize = 8;
const PAUSE: Duration = Duration::from_millis(120);

/// A capsule reply of several hundred tokens: against the expected reply size, each streamed
/// piece is worth a few percent.
fn capsule_reply() -> String {
    let items = |what: &str| -> Vec<String> {
        (0..12)
            .map(|i| format!("{what} {i}: the parser module keeps its public interface stable"))
            .collect()
    };
    json!({
        "goal": "Stream capsule progress to the editors",
        "constraints": items("constraint"),
        "completed": items("done"),
        "active": items("active"),
        "pending": [],
        "decisions": [{"decision": "count streamed tokens", "rationale": "the reply length is known roughly"}],
        "blockers": [],
        "nextSteps": items("next")
    })
    .to_string()
}

/// An OpenAI chat-completions stream of `reply` in [`PIECES`] parts, a pause before each.
fn slow_openai_stream(reply: &str) -> Vec<Step> {
    let event = |delta: Value, finish: Value| {
        let v = json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        Step::Chunk(format!("data: {v}\n\n").into_bytes())
    };
    let chars: Vec<char> = reply.chars().collect();
    let mut steps = vec![head(200, "text/event-stream", true)];
    for piece in chars.chunks(chars.len().div_ceil(PIECES)) {
        steps.push(Step::Sleep(PAUSE));
        steps.push(event(
            json!({"content": piece.iter().collect::<String>()}),
            json!(null),
        ));
    }
    steps.push(event(json!({}), json!("stop")));
    steps.push(Step::Chunk(b"data: [DONE]\n\n".to_vec()));
    steps.push(Step::EndChunks);
    steps
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

/// Percentages in order, strictly between 0 and 100.
fn in_between(percents: &[u64]) -> Vec<u64> {
    percents
        .iter()
        .copied()
        .filter(|&p| p > 0 && p < 100)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_moves_with_the_streamed_reply_before_the_compaction_ends() {
    let server = Loopback::start(|_, _| slow_openai_stream(&capsule_reply())).await;
    let base = tempfile::tempdir().unwrap();
    let workspace = std::fs::canonicalize(base.path()).unwrap().join("project");
    std::fs::create_dir_all(workspace.join(".soba")).unwrap();
    std::fs::write(
        workspace.join(".soba/config.json"),
        json!({
            "model": {"name": "gpt-4o", "contextWindow": 20000, "maxOutputTokens": 2000},
            "compaction": {"keepRecentTokens": 1000, "minTokensForAutoCompact": 3000,
                           "minReclaimableTokens": 500, "timeoutMs": 30000}
        })
        .to_string(),
    )
    .unwrap();
    let summarizer = ModelSummarizer::new(
        &SummarizerConfig {
            provider: Provider::Openai,
            base_url: Some(format!("{}/v1", server.base)),
            model: Some("gpt-4o-mini".into()),
            api_key_env: Some("SOBA_TEST_SUMMARIZER_KEY".into()),
            context_window: Some(32_000),
            max_output_tokens: Some(1_000),
            cooldown_ms: None,
            redact_input: None,
        },
        |_| Some("sk-test".to_string()),
    )
    .expect("valid summarizer config");
    let summarizer: Arc<dyn Summarizer> = Arc::new(summarizer);
    let daemon = Daemon::new(
        Paths::under(&base.path().join("soba")),
        DaemonOptions {
            watch: None,
            extra_config: None,
            summarizer: Some(summarizer),
            ..DaemonOptions::default()
        },
    );
    let (client_io, server_io) = tokio::io::duplex(1 << 22);
    let (sr, sw) = tokio::io::split(server_io);
    tokio::spawn(soba::daemon::server::serve_connection(daemon, sr, sw));
    let (cr, cw) = tokio::io::split(client_io);
    let c = LspClient::new(cr, cw);
    c.initialize(&[&workspace], true).await;

    let opened = c
        .request("soba/session/open", json!({"workspace": workspace}))
        .await;
    let id = opened["sessionId"].as_str().unwrap().to_string();
    let entries: Vec<Value> = (0..12)
        .map(|i| message(if i % 2 == 0 { "user" } else { "assistant" }, &chunk(i)))
        .collect();
    c.request(
        "soba/session/append",
        json!({"sessionId": id, "entries": entries}),
    )
    .await;
    let answer = c.request("soba/preflight", json!({"sessionId": id})).await;
    assert!(answer["compaction"]["checkpointId"].is_string(), "{answer}");

    // Every compaction notice up to and including the end, in the order sent.
    let mut notices = Vec::new();
    loop {
        let n = c
            .expect_notification("soba/compaction", Duration::from_secs(10))
            .await;
        let end = n["phase"] == "end";
        notices.push(n);
        if end {
            break;
        }
    }
    let end = notices.last().unwrap();
    assert_eq!(end["result"]["outcome"], "completed", "{end}");
    assert_eq!(
        end["result"]["quality"], "model",
        "the model wrote it: {end}"
    );
    let percents: Vec<u64> = notices
        .iter()
        .filter(|n| n["phase"] == "progress")
        .map(|n| n["percent"].as_u64().unwrap())
        .collect();
    assert!(
        percents.windows(2).all(|w| w[0] < w[1]),
        "progress only increases: {percents:?}"
    );
    assert_eq!(percents.last(), Some(&100), "{percents:?}");
    let moving = in_between(&percents);
    assert!(
        moving.len() >= 3,
        "several percentages between 0 and 100 while the reply streamed: {percents:?}"
    );

    // The same movement as standard work-done progress, before its end.
    let progress: Vec<Value> = c
        .seen("$/progress")
        .into_iter()
        .map(|p| p["value"].clone())
        .collect();
    assert_eq!(progress.first().unwrap()["kind"], "begin", "{progress:?}");
    assert_eq!(progress.last().unwrap()["kind"], "end", "{progress:?}");
    let reported: Vec<u64> = progress
        .iter()
        .filter(|p| p["kind"] == "report")
        .map(|p| p["percentage"].as_u64().unwrap())
        .collect();
    assert_eq!(
        in_between(&reported),
        moving,
        "$/progress mirrors every soba/compaction percentage"
    );
    assert!(!server.requests().is_empty());
}
