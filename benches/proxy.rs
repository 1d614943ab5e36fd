//! Latency and CPU `soba proxy` adds to a chat request of a 100k-token conversation, in each
//! format it rewrites (OpenAI Chat Completions, Anthropic Messages, OpenAI Responses), whole
//! and streamed.
//!
//! A loopback fake upstream answers at once, in the request's format (server-sent events when
//! the request streams). Each format's conversation (about 100k tokens of generated
//! coding-session turns) is sent with one new user message per request, as agents do,
//! alternately straight to the upstream and through the proxy (an in-process daemon, the model
//! window large enough that no compaction runs: this measures the steady-state cost of matching
//! the history, appending, preflight and the rewrite). The added latency is the difference of
//! the medians and of the 99th percentiles: of the whole answer for a request that does not
//! stream, of the first byte of the answer's body for one that does. CPU per request is the
//! process's CPU time (`getrusage`) over a batch of requests through the proxy, less that of
//! the same batch sent straight, divided by the batch: what the proxy and its daemon spend.
//!
//! Per-request percentiles are what matter here, which criterion does not report; like
//! `daemon_rtt`, this bench has its own harness. `cargo bench --bench proxy` measures (200
//! requests each way and format; `SOBA_BENCH_PROXY_REQUESTS` sets another number) and prints
//! one JSON object and a summary; under `cargo test` it sends a few requests as a smoke test.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba::proxy::server::DaemonTarget;
use soba::proxy::server::Proxy;
use soba::proxy::server::ProxyConfig;
use soba::proxy::server::ProxySummarizer;

fn measuring() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// The request header that asks the fake upstream to stream its answer (it reads no body).
const STREAM_HEADER: &str = "x-bench-stream";

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Chat,
    Messages,
    Responses,
}

impl Format {
    const ALL: [Format; 3] = [Format::Chat, Format::Messages, Format::Responses];

    fn name(self) -> &'static str {
        match self {
            Format::Chat => "chatCompletions",
            Format::Messages => "messages",
            Format::Responses => "responses",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Format::Chat => "/v1/chat/completions",
            Format::Messages => "/v1/messages",
            Format::Responses => "/v1/responses",
        }
    }

    fn of_path(path: &str) -> Format {
        match path {
            "/v1/messages" => Format::Messages,
            "/v1/responses" => Format::Responses,
            _ => Format::Chat,
        }
    }

    /// A message of the conversation in this format.
    fn message(self, role: &str, text: &str) -> Value {
        match (self, role) {
            (Format::Chat, _) => json!({"role": role, "content": text}),
            (Format::Messages, _) => {
                json!({"role": role, "content": [{"type": "text", "text": text}]})
            }
            (Format::Responses, "assistant") => json!({"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": text}]}),
            (Format::Responses, _) => json!({"type": "message", "role": role,
                "content": [{"type": "input_text", "text": text}]}),
        }
    }

    fn body(self, messages: &[Value], stream: bool) -> Value {
        match self {
            Format::Chat => json!({"model": "gpt-4o", "messages": messages, "stream": stream}),
            Format::Messages => json!({"model": "claude-sonnet-4-5", "max_tokens": 4096,
                "system": "You are a careful coding agent.", "messages": messages, "stream": stream}),
            Format::Responses => {
                json!({"model": "gpt-5", "instructions": "You are a careful coding agent.",
                "input": messages, "store": false, "stream": stream})
            }
        }
    }
}

const ANSWER: &str = "ok, done.";

fn sse(events: &[Value], done: bool) -> String {
    let mut s: String = events
        .iter()
        .map(|e| match e.get("type").and_then(Value::as_str) {
            Some(t) if !t.starts_with("chat") => format!("event: {t}\ndata: {e}\n\n"),
            _ => format!("data: {e}\n\n"),
        })
        .collect();
    if done {
        s.push_str("data: [DONE]\n\n");
    }
    s
}

/// The fake upstream's answer to a request of `prompt` tokens: (content type, body).
fn answer(format: Format, stream: bool, prompt: usize, n: u64) -> (&'static str, String) {
    let usage_chat =
        json!({"prompt_tokens": prompt, "completion_tokens": 4, "total_tokens": prompt + 4});
    let usage_anthropic = json!({"input_tokens": prompt, "output_tokens": 4});
    let response = || {
        json!({"id": format!("resp_{n}"), "object": "response", "status": "completed", "model": "gpt-5",
            "output": [{"type": "message", "id": format!("msg_{n}"), "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": ANSWER, "annotations": []}]}],
            "usage": {"input_tokens": prompt, "output_tokens": 4, "total_tokens": prompt + 4}})
    };
    match (format, stream) {
        (Format::Chat, false) => ("application/json", json!({"id": "c", "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}],
            "usage": usage_chat}).to_string()),
        (Format::Chat, true) => ("text/event-stream", sse(&[
            json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ANSWER}, "finish_reason": null}]}),
            json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage_chat}),
        ], true)),
        (Format::Messages, false) => ("application/json", json!({"id": format!("msg_{n}"), "type": "message",
            "role": "assistant", "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": ANSWER}],
            "stop_reason": "end_turn", "usage": usage_anthropic}).to_string()),
        (Format::Messages, true) => ("text/event-stream", sse(&[
            json!({"type": "message_start", "message": {"id": format!("msg_{n}"), "type": "message", "role": "assistant",
                "content": [], "model": "claude-sonnet-4-5", "usage": {"input_tokens": prompt, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ANSWER}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}}),
            json!({"type": "message_stop"}),
        ], false)),
        (Format::Responses, false) => ("application/json", response().to_string()),
        (Format::Responses, true) => {
            let r = response();
            let mut created = r.clone();
            created["status"] = json!("in_progress");
            created["output"] = json!([]);
            ("text/event-stream", sse(&[
                json!({"type": "response.created", "response": created}),
                json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": ANSWER}),
                json!({"type": "response.output_item.done", "output_index": 0, "item": r["output"][0]}),
                json!({"type": "response.completed", "response": r}),
            ], false))
        }
    }
}

async fn fake_upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(std::sync::atomic::AtomicU64::new(0));
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let served = served.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let served = served.clone();
                        async move {
                            let format = Format::of_path(req.uri().path());
                            let stream = req.headers().contains_key(STREAM_HEADER);
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let n = served.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let (content_type, answer) = answer(format, stream, body.len() / 4, n);
                            Ok::<_, std::convert::Infallible>(
                                http::Response::builder()
                                    .header("content-type", content_type)
                                    .body(Full::new(Bytes::from(answer)))
                                    .unwrap(),
                            )
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// A user turn of about 800 tokens and a short answer, distinct per turn and format.
fn turn(format: Format, i: usize) -> (Value, Value) {
    let text: String = (0..130)
        .map(|j| {
            format!(
                "step{i}.{j} edits src/{}/module_{}.rs ",
                format.name(),
                j % 17
            )
        })
        .collect();
    (
        format.message("user", &text),
        format.message(
            "assistant",
            &format!("Turn {i}: the change is in place and the tests pass."),
        ),
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// CPU time (user + system) of the whole process so far.
fn process_cpu() -> Duration {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF is always valid.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage failed");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// One request: the time to the first byte of the answer's body and to its end.
async fn send(
    client: &reqwest::Client,
    addr: SocketAddr,
    format: Format,
    stream: bool,
    body: &Value,
) -> (Duration, Duration) {
    let started = Instant::now();
    let mut req = client
        .post(format!("http://{addr}{}", format.path()))
        .header("authorization", "Bearer sk-bench")
        .header("x-api-key", "sk-bench")
        .header("anthropic-version", "2023-06-01")
        .json(body);
    if stream {
        req = req.header(STREAM_HEADER, "1");
    }
    let mut r = req.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut first = None;
    let mut bytes = Vec::new();
    while let Some(chunk) = r.chunk().await.unwrap() {
        first.get_or_insert_with(|| started.elapsed());
        bytes.extend_from_slice(&chunk);
    }
    assert!(!bytes.is_empty(), "an empty answer");
    (
        first.unwrap_or_else(|| started.elapsed()),
        started.elapsed(),
    )
}

/// The figures of one format, whole or streamed.
struct Figures {
    format: Format,
    stream: bool,
    tokens: u64,
    first: Duration,
    direct: Vec<Duration>,
    proxied: Vec<Duration>,
    cpu_direct: Duration,
    cpu_proxied: Duration,
    cpu_requests: usize,
}

impl Figures {
    fn report(&mut self) -> Value {
        self.direct.sort();
        self.proxied.sort();
        let (d50, d99) = (
            percentile(&self.direct, 0.5),
            percentile(&self.direct, 0.99),
        );
        let (p50, p99) = (
            percentile(&self.proxied, 0.5),
            percentile(&self.proxied, 0.99),
        );
        let n = self.cpu_requests.max(1) as u32;
        let cpu_added = self.cpu_proxied.saturating_sub(self.cpu_direct) / n;
        let report = json!({
            "format": self.format.name(),
            "stream": self.stream,
            "measures": if self.stream { "time to first byte" } else { "time to the whole answer" },
            "conversationTokens": self.tokens,
            "requests": self.direct.len(),
            "firstRequestMs": ms(self.first),
            "directMs": {"p50": ms(d50), "p99": ms(d99)},
            "proxiedMs": {"p50": ms(p50), "p99": ms(p99)},
            "addedMs": {"p50": ms(p50.saturating_sub(d50)), "p99": ms(p99.saturating_sub(d99))},
            "cpuPerRequestMs": {"direct": ms(self.cpu_direct / n), "proxied": ms(self.cpu_proxied / n), "added": ms(cpu_added)},
        });
        println!(
            "proxy {:>15} {:>6}: {} tokens; direct p50 {:.2} / p99 {:.2} ms; proxied p50 {:.2} / p99 {:.2} ms; added p50 {:.2} ms, p99 {:.2} ms; CPU added {:.2} ms/request (first request {:.1} ms)",
            self.format.name(),
            if self.stream { "stream" } else { "whole" },
            self.tokens, ms(d50), ms(d99), ms(p50), ms(p99),
            ms(p50.saturating_sub(d50)), ms(p99.saturating_sub(d99)), ms(cpu_added), ms(self.first)
        );
        report
    }
}

/// Drive one conversation of `format` through the proxy and straight to the upstream.
async fn measure(
    client: &reqwest::Client,
    upstream: SocketAddr,
    proxy: SocketAddr,
    format: Format,
    stream: bool,
    full: bool,
    requests: usize,
) -> Figures {
    let mut messages = Vec::new();
    if format == Format::Chat {
        messages.push(json!({"role": "system", "content": "You are a careful coding agent."}));
    }
    // Each run its own conversation: the opening says which.
    messages.push(format.message(
        "user",
        &format!("Bench conversation {} stream={stream}", format.name()),
    ));
    messages.push(format.message("assistant", "Ready."));
    let count = soba_core::tokens::TokenizerKind::O200kBase;
    let text_tokens = |m: &Value| match &m["content"] {
        Value::String(s) => count.count(s),
        blocks => count.count(blocks[0]["text"].as_str().unwrap_or("")),
    };
    let target: u64 = if full { 100_000 } else { 15_000 };
    let mut tokens: u64 = messages.iter().map(text_tokens).sum();
    let mut i = 0;
    while tokens < target {
        let (u, a) = turn(format, i);
        tokens += text_tokens(&u) + text_tokens(&a);
        messages.push(u);
        messages.push(a);
        i += 1;
    }
    // Every answer is the same text, which the agent resends as the next assistant message.
    let reply = format.message("assistant", ANSWER);
    let mut step = 0;
    let mut next = |messages: &mut Vec<Value>| {
        messages.push(format.message("user", &format!("next step {step}: run the tests again")));
        step += 1;
        format.body(messages, stream)
    };
    // The first request through the proxy appends the whole history; it is not measured.
    let body = next(&mut messages);
    let (_, first) = send(client, proxy, format, stream, &body).await;
    messages.push(reply.clone());
    let mut direct = Vec::with_capacity(requests);
    let mut proxied = Vec::with_capacity(requests);
    let pick = |(first_byte, whole): (Duration, Duration)| if stream { first_byte } else { whole };
    for _ in 0..requests {
        let body = next(&mut messages);
        direct.push(pick(send(client, upstream, format, stream, &body).await));
        proxied.push(pick(send(client, proxy, format, stream, &body).await));
        messages.push(reply.clone());
    }
    // CPU: a batch through the proxy, then the same number of requests straight. A streamed
    // reply is recorded after the stream ends: the pause lets that work land in its batch.
    let cpu_requests = requests.min(50);
    let settle = Duration::from_millis(100);
    tokio::time::sleep(settle).await;
    let before = process_cpu();
    for _ in 0..cpu_requests {
        let body = next(&mut messages);
        send(client, proxy, format, stream, &body).await;
        messages.push(reply.clone());
    }
    tokio::time::sleep(settle).await;
    let cpu_proxied = process_cpu() - before;
    let before = process_cpu();
    for _ in 0..cpu_requests {
        let body = next(&mut messages);
        send(client, upstream, format, stream, &body).await;
        messages.push(reply.clone());
    }
    tokio::time::sleep(settle).await;
    let cpu_direct = process_cpu() - before;
    Figures {
        format,
        stream,
        tokens,
        first,
        direct,
        proxied,
        cpu_direct,
        cpu_proxied,
        cpu_requests,
    }
}

fn main() {
    let full = measuring();
    let requests = if full {
        std::env::var("SOBA_BENCH_PROXY_REQUESTS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(200)
    } else {
        3
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let base = tempfile::tempdir().unwrap();
        let workspace = std::fs::canonicalize(base.path()).unwrap().join("project");
        std::fs::create_dir_all(&workspace).unwrap();
        let upstream = fake_upstream().await;
        let daemon = Daemon::new(
            Paths::under(&base.path().join("soba")),
            DaemonOptions {
                watch: None,
                extra_config: None,
                summarizer: None,
                ..DaemonOptions::default()
            },
        );
        let lines = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let kept = lines.clone();
        let proxy = Proxy::new(ProxyConfig {
            upstream: format!("http://{upstream}").parse().unwrap(),
            workspace: workspace.display().to_string(),
            context_window: Some(1_000_000),
            max_output_tokens: Some(8_000),
            // The proxy's own cost: no summarization requests.
            summarizer: ProxySummarizer::Local,
            daemon: DaemonTarget::InProcess(daemon),
            log: Arc::new(move |l: &str| kept.lock().unwrap().push(l.to_string())),
            max_conversations: soba::proxy::server::DEFAULT_MAX_CONVERSATIONS,
        })
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_addr = listener.local_addr().unwrap();
        tokio::spawn(proxy.serve(listener));
        let client = reqwest::Client::new();
        let mut runs = Vec::new();
        for format in Format::ALL {
            for stream in [false, true] {
                let mut figures = measure(
                    &client, upstream, proxy_addr, format, stream, full, requests,
                )
                .await;
                runs.push(figures.report());
            }
        }
        // Every request must have been a steady-state one: answered and recorded, its
        // conversation matched (one session per conversation, never restarted).
        let lines = lines.lock().unwrap();
        let sessions: std::collections::BTreeSet<&str> = lines
            .iter()
            .filter_map(|l| l.split("(session ").nth(1))
            .filter_map(|s| s.split(',').next())
            .collect();
        assert_eq!(
            sessions.len(),
            runs.len(),
            "one session per conversation: {sessions:?}"
        );
        let faults: Vec<&String> = lines
            .iter()
            .filter(|l| !l.contains("→ 200") || l.contains("not recorded"))
            .collect();
        assert!(faults.is_empty(), "requests that went wrong: {faults:?}");
        println!("{}", json!({"runs": runs}));
    });
}
