//! The attack corpus (`redaction_corpus::attack_secrets`, 130 secrets in the shapes agents show
//! them) through every path text leaves a session by: a capsule export, a Project Memory mirror
//! and its index, the `replay --report` HTML page, the summarizer's requests with `redactInput`,
//! and the summarizer requests of a session the proxy fills from an agent's chat requests.
//! A secret leaks on a path when its last twelve characters reach that path's output.
//!
//! The figures are printed (`cargo test --test it redaction_paths -- --nocapture`) and kept in
//! docs/reliability.md; no secret may leak on any path.

use crate::loopback::{sse, Loopback};
use crate::redaction_corpus::{attack_secrets, capsule_holding, Planted, Shown};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba::proxy::server::DaemonTarget;
use soba::proxy::server::Proxy;
use soba::proxy::server::ProxyConfig;
use soba::proxy::server::ProxySummarizer;
use soba::summarize::client::ModelSummarizer;
use soba::summarize::summarizer::Summarizer;
use soba::summarize::summarizer::SummaryRequest;
use soba_core::config::{Provider, SummarizerConfig};
use soba_core::session::entry::ContentBlock;
use soba_core::session::view::ModelMessage;
use tokio_util::sync::CancellationToken;

fn tail(secret: &str) -> &str {
    &secret[secret.len().saturating_sub(12)..]
}

/// Whether `out` holds the secret, as it is or escaped for HTML or JSON.
fn holds(out: &str, secret: &str) -> bool {
    let t = tail(secret);
    let html = soba::report::html::escape(t);
    let json = serde_json::to_string(t).unwrap();
    out.contains(t) || out.contains(&html) || out.contains(json.trim_matches('"'))
}

/// Leaks of the files SOBA writes: export, Project Memory (capsule and index), report.
fn file_paths(corpus: &[Planted]) -> BTreeMap<&'static str, Vec<usize>> {
    use soba_core::capsule::portable::{write, PortableCapsule};
    let ws = tempfile::tempdir().unwrap();
    let limits = soba_core::limits::Limits::compute(200_000, 8_000, &Default::default()).unwrap();
    let mut leaks: BTreeMap<&'static str, Vec<usize>> = BTreeMap::new();
    for (n, p) in corpus.iter().enumerate() {
        let capsule = capsule_holding(&p.text, n);
        let exported = write(&PortableCapsule::from_entry(
            &capsule,
            "2026-12-01T00:00:00Z",
            None,
            None,
        ));
        let src = soba_core::capsule::project_memory::MirrorSource {
            created: "2026-12-01T00:00:00Z",
            session: Some("s1"),
        };
        let m = soba_core::capsule::project_memory::mirror(ws.path(), &capsule, src, true).unwrap();
        let memory =
            std::fs::read_to_string(&m.path).unwrap() + &std::fs::read_to_string(&m.index).unwrap();
        let mut t = soba::report::Timeline::new(p.text.clone(), "m", "o200k_base", limits);
        t.latest_capsule = Some(p.text.clone());
        let report = soba::report::html::render(&t);
        for (path, out) in [
            ("export", &exported.text),
            ("Project Memory", &memory),
            ("report.html", &report),
        ] {
            let list = leaks.entry(path).or_default();
            if holds(out, &p.secret) {
                list.push(n);
            }
        }
    }
    leaks
}

/// A summarizer reply: a valid capsule state, streamed as OpenAI chat chunks.
fn summarizer_reply() -> Vec<crate::loopback::Step> {
    let state = json!({"goal": "deploy", "constraints": [], "completed": [], "active": [],
        "pending": [], "decisions": [], "blockers": [], "nextSteps": []})
    .to_string();
    let chunk = |delta: Value, finish: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    sse(&[
        chunk(json!({"role": "assistant", "content": state}), Value::Null),
        chunk(json!({}), json!("stop")),
        "data: [DONE]\n\n".to_string(),
    ])
}

/// A remote-style summarizer on a loopback server, with `redactInput` on.
fn summarizer(server: &Loopback) -> ModelSummarizer {
    let cfg = SummarizerConfig {
        provider: Provider::Openai,
        base_url: Some(format!("{}/v1", server.base)),
        model: Some("gpt-4o-mini".into()),
        api_key_env: Some("SOBA_TEST_SUMMARIZER_KEY".into()),
        context_window: Some(400_000),
        max_output_tokens: Some(2_000),
        cooldown_ms: None,
        redact_input: Some(true),
    };
    ModelSummarizer::new(&cfg, |_| Some("sk-test-summarizer".to_string())).unwrap()
}

/// The tool call an agent made for a planted text and what the tool answered.
fn tool_call(n: usize, p: &Planted) -> (String, Value, String) {
    match p.shown {
        Shown::Command => ("Bash".into(), json!({"command": p.text}), "done".into()),
        Shown::Output => (
            "Read".into(),
            json!({"file_path": format!("/ws/config/file{n}.txt")}),
            p.text.clone(),
        ),
    }
}

fn summarizer_leaks(corpus: &[Planted], requests: &[String]) -> Vec<usize> {
    let all = requests.join("\n");
    corpus
        .iter()
        .enumerate()
        .filter(|(_, p)| holds(&all, &p.secret))
        .map(|(n, _)| n)
        .collect()
}

/// Leaks of the summarizer's requests, the history holding every planted text as an agent
/// session holds it.
async fn summarizer_input(corpus: &[Planted]) -> Vec<usize> {
    let server = Loopback::start(|_, _| summarizer_reply()).await;
    let s = summarizer(&server);
    let text = |role: &str, t: String| ModelMessage {
        role: role.into(),
        content: vec![ContentBlock::Text {
            text: t,
            extra: Default::default(),
        }],
        tool_call_id: None,
        is_error: None,
        entry_id: None,
    };
    let mut history = vec![text("user", "set up the deploy".into())];
    for (n, p) in corpus.iter().enumerate() {
        let (name, input, output) = tool_call(n, p);
        history.push(ModelMessage {
            role: "assistant".into(),
            content: vec![ContentBlock::ToolCall {
                id: format!("call_{n}"),
                name,
                input: Box::new(input),
                extra: Default::default(),
            }],
            tool_call_id: None,
            is_error: None,
            entry_id: None,
        });
        let mut result = text("tool", output);
        result.tool_call_id = Some(format!("call_{n}"));
        history.push(result);
    }
    let req = SummaryRequest {
        previous: None,
        history,
        instructions: None,
        artifacts: Default::default(),
        follow_up: None,
    };
    let progress = |_: u8| {};
    let r = s.summarize(&req, &progress, CancellationToken::new()).await;
    assert!(r.is_ok(), "{r:?}");
    let raw: Vec<String> = server.requests().into_iter().map(|r| r.raw).collect();
    assert!(!raw.is_empty());
    summarizer_leaks(corpus, &raw)
}

/// An upstream that answers every chat request with a short reply.
async fn upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    |req: http::Request<hyper::body::Incoming>| async move {
                        let _ = req.into_body().collect().await;
                        let body = json!({"id": "chatcmpl-1", "object": "chat.completion",
                            "model": "gpt-4o", "choices": [{"index": 0, "message":
                            {"role": "assistant", "content": "deployed"}, "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": 10, "completion_tokens": 2}});
                        Ok::<_, std::convert::Infallible>(
                            http::Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(body.to_string())))
                                .unwrap(),
                        )
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// Leaks of the summarizer requests of a proxied session: an agent's chat request carries the
/// whole corpus as tool calls and results, and is long enough that the proxy's preflight
/// compacts it with the configured remote summarizer (`--local-capsules`, `redactInput`).
async fn proxy_summarizer_calls(corpus: &[Planted]) -> Vec<usize> {
    let server = Loopback::start(|_, _| summarizer_reply()).await;
    let s: Arc<dyn Summarizer> = Arc::new(summarizer(&server));
    let base = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(base.path()).unwrap().join("project");
    std::fs::create_dir_all(ws.join(".soba")).unwrap();
    std::fs::write(
        ws.join(".soba/config.json"),
        // The spec's reserve, not one scaled to the 40k window: the history below crosses the
        // soft limit of that budget.
        json!({"compaction": {"keepRecentTokens": 1500, "minTokensForAutoCompact": 3000,
            "minReclaimableTokens": 500, "safetyReserveTokens": 8192}})
        .to_string(),
    )
    .unwrap();
    let up = upstream().await;
    let proxy = Proxy::new(ProxyConfig {
        upstream: format!("http://{up}").parse().unwrap(),
        workspace: ws.display().to_string(),
        context_window: Some(40_000),
        max_output_tokens: Some(2_000),
        // A summarizer of its own, not the upstream: capsules written by the agent's model
        // through the proxy get the history unredacted by design (that model was sent it).
        summarizer: ProxySummarizer::Local,
        daemon: DaemonTarget::InProcess(Daemon::new(
            Paths::under(&base.path().join("soba")),
            DaemonOptions {
                watch: None,
                summarizer: Some(s),
                ..DaemonOptions::default()
            },
        )),
        log: Arc::new(|_: &str| {}),
        max_conversations: soba::proxy::server::DEFAULT_MAX_CONVERSATIONS,
    })
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(proxy.serve(listener));

    let mut messages = vec![json!({"role": "user", "content": "set up the deploy"})];
    for (n, p) in corpus.iter().enumerate() {
        let (name, input, output) = tool_call(n, p);
        messages.push(
            json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": format!("call_{n}"), "type": "function",
            "function": {"name": name, "arguments": input.to_string()}}]}),
        );
        messages
            .push(json!({"role": "tool", "tool_call_id": format!("call_{n}"), "content": output}));
    }
    // Enough after the corpus to cross the soft limit and fill the retained tail.
    for t in 0..6 {
        messages.push(json!({"role": "user", "content": format!("step {t}: {}", "check the rollout status again. ".repeat(500))}));
        messages.push(json!({"role": "assistant", "content": format!("step {t} looks fine")}));
    }
    messages.push(json!({"role": "user", "content": "ship it"}));
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .header("authorization", "Bearer sk-agent")
        .json(&json!({"model": "gpt-4o", "messages": messages}))
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let body = r.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    let raw: Vec<String> = server.requests().into_iter().map(|r| r.raw).collect();
    assert!(!raw.is_empty(), "the proxied session was never compacted");
    summarizer_leaks(corpus, &raw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attack_corpus_leaks_no_secret_on_any_path() {
    let corpus = attack_secrets();
    let mut leaks = file_paths(&corpus);
    leaks.insert("summarizer input", summarizer_input(&corpus).await);
    leaks.insert(
        "proxy summarizer calls",
        proxy_summarizer_calls(&corpus).await,
    );
    let mut failures = Vec::new();
    for (path, list) in &leaks {
        println!(
            "attack corpus, {path}: {} of {} leaked",
            list.len(),
            corpus.len()
        );
        for &n in list {
            let p = &corpus[n];
            println!("  {}: {:?}", p.form, p.text);
            failures.push(format!("{path}: {} {:?}", p.form, p.text));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
