//! `soba proxy` end to end: an agent-like client sends its whole history with every request
//! through the proxy to a loopback fake upstream that answers like the provider (whole and
//! streamed), records every request it gets, and reports usage and cache reads.

use crate::support::lsp_client;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba::proxy::server::DaemonTarget;
use soba::proxy::server::Proxy;
use soba::proxy::server::ProxyConfig;
use soba::proxy::server::ProxySummarizer;
use soba_core::tokens::TokenizerKind;

/// Context window of the test model: hard limit 20000 − 2000 − the safety reserve.
const WINDOW: u64 = 20000;
const MAX_OUTPUT: u64 = 2000;
const KEY: &str = "sk-test-secret-4b1d";

// ---------------------------------------------------------------------------------------------
// The fake upstream

#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    raw: Bytes,
}

impl Seen {
    fn body(&self) -> Value {
        serde_json::from_slice(&self.raw).unwrap_or(Value::Null)
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Clone)]
struct Canned {
    status: u16,
    content_type: &'static str,
    body: String,
}

#[derive(Default)]
struct UpstreamState {
    seen: Vec<Seen>,
    /// Answers to give before the normal ones, in order.
    script: VecDeque<Canned>,
    /// Bytes of every streamed answer, in order.
    streamed: Vec<Vec<u8>>,
    /// Messages of the previous chat request, serialized one by one (for cache reads).
    previous: Vec<String>,
    /// `cache_read` reported per chat request.
    cache_reads: Vec<u64>,
    /// Per chat request: the previous request's messages were all a byte-identical prefix.
    whole_prefix: Vec<bool>,
    /// Call a tool in the next answers (OpenAI): tool call ids to use, one per answer.
    tool_calls: VecDeque<String>,
    /// How long to wait before answering a summarization request.
    summary_delay: Option<std::time::Duration>,
    /// Break the connection after this many bytes of the next streamed answer.
    cut_next_stream: Option<usize>,
    /// The model's real context window, in the fake's count (a quarter of the body's bytes): a
    /// chat request above it is refused with the provider's own overflow error.
    window: Option<u64>,
    /// Chat requests refused as too long.
    overflows: usize,
}

#[derive(Clone)]
struct Upstream {
    addr: SocketAddr,
    state: Arc<Mutex<UpstreamState>>,
}

impl Upstream {
    fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }
    /// The agent's chat requests (not SOBA's summarization requests).
    fn chats(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == "POST" && !is_summary(&s.body()))
            .collect()
    }
    /// SOBA's summarization requests.
    fn summaries(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.method == "POST" && is_summary(&s.body()))
            .collect()
    }
    fn script(&self, c: Canned) {
        self.state.lock().unwrap().script.push_back(c);
    }
}

/// Tokens a provider would roughly prefill for a prefix of serialized messages (the fake's
/// stand-in for a prompt cache: the longest run of leading messages identical byte for byte).
fn cached_tokens(state: &mut UpstreamState, messages: &[Value]) -> u64 {
    let now: Vec<String> = messages.iter().map(|m| m.to_string()).collect();
    let same = now
        .iter()
        .zip(&state.previous)
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a.len() as u64 / 4)
        .sum();
    let whole = !state.previous.is_empty()
        && now.len() >= state.previous.len()
        && now.iter().zip(&state.previous).all(|(a, b)| a == b);
    state.whole_prefix.push(whole);
    state.previous = now;
    same
}

fn sse(events: &[(Option<&str>, Value)], done: bool) -> String {
    let mut s = String::new();
    for (name, data) in events {
        if let Some(n) = name {
            s.push_str(&format!("event: {n}\n"));
        }
        s.push_str(&format!("data: {data}\n\n"));
    }
    if done {
        s.push_str("data: [DONE]\n\n");
    }
    s
}

/// A request SOBA sends to summarize: its system prompt, byte for byte.
fn is_summary(body: &Value) -> bool {
    let system = &soba::summarize::prompt::SYSTEM_PROMPT;
    body["system"].as_str() == Some(system)
        || body["messages"][0]["content"].as_str() == Some(system)
}

/// What the fake model writes as a capsule state. One item names a file the conversation never
/// touched; SOBA drops it.
fn summary_state() -> Value {
    json!({
        "goal": "Walk through every module step by step",
        "constraints": ["Keep each answer short"],
        "completed": ["Checked the first modules", "Rewrote src/imaginary_module.rs"],
        "active": ["Checking the next module"],
        "pending": [],
        "decisions": [{"decision": "Go module by module", "rationale": ""}],
        "blockers": [],
        "nextSteps": ["Check the next module"]
    })
}

fn summary_answer(body: &Value) -> Canned {
    let text = summary_state().to_string();
    let (first, second) = text.split_at(text.len() / 2);
    if body["system"].is_string() {
        let delta = |t: &str| {
            (
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}),
            )
        };
        let events = vec![
            (
                Some("message_start"),
                json!({"type": "message_start", "message": {"id": "msg_s", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 10, "output_tokens": 1}}}),
            ),
            (
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            delta(first),
            delta(second),
            (
                Some("content_block_stop"),
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                Some("message_delta"),
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 50}}),
            ),
            (Some("message_stop"), json!({"type": "message_stop"})),
        ];
        return Canned {
            status: 200,
            content_type: "text/event-stream",
            body: sse(&events, false),
        };
    }
    let chunk = |t: &str| {
        (
            None,
            json!({"id": "s", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": t}}]}),
        )
    };
    let events = vec![
        chunk(first),
        chunk(second),
        (
            None,
            json!({"id": "s", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ),
    ];
    Canned {
        status: 200,
        content_type: "text/event-stream",
        body: sse(&events, true),
    }
}

fn answer(state: &mut UpstreamState, path: &str, body: &Value) -> Canned {
    if is_summary(body) {
        return summary_answer(body);
    }
    if let Some(c) = state.script.pop_front() {
        return c;
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let prompt = (body.to_string().len() / 4) as u64;
    if let Some(window) = state.window.filter(|&w| prompt > w) {
        state.overflows += 1;
        return overflow_answer(path, window, prompt);
    }
    let cached = cached_tokens(state, &messages).min(prompt);
    state.cache_reads.push(cached);
    let n = state.seen.len();
    let stream = body["stream"].as_bool().unwrap_or(false);
    if path.ends_with("/chat/completions") {
        let tool = state.tool_calls.pop_front();
        let usage = json!({"prompt_tokens": prompt, "completion_tokens": 7,
                           "prompt_tokens_details": {"cached_tokens": cached}});
        if stream {
            let mut events = vec![
                (
                    None,
                    json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "answer "}}]}),
                ),
                (
                    None,
                    json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": format!("number {n}")}}]}),
                ),
            ];
            if let Some(id) = tool {
                events.push((None, json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":"}}]}}]})));
                events.push((None, json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"src/main.rs\"}"}}]}}]})));
            }
            events.push((None, json!({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage})));
            return Canned {
                status: 200,
                content_type: "text/event-stream",
                body: sse(&events, true),
            };
        }
        let mut message = json!({"role": "assistant", "content": format!("answer number {n}")});
        if let Some(id) = tool {
            message["tool_calls"] = json!([{"id": id, "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"src/main.rs\"}"}}]);
        }
        return Canned {
            status: 200,
            content_type: "application/json",
            body: json!({"id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
                         "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                         "usage": usage})
            .to_string(),
        };
    }
    // Anthropic Messages.
    let usage = json!({"input_tokens": prompt - cached, "cache_read_input_tokens": cached,
                       "cache_creation_input_tokens": 0, "output_tokens": 9});
    if stream {
        let events = vec![
            (
                Some("message_start"),
                json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": prompt - cached, "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0, "output_tokens": 1}}}),
            ),
            (
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            ),
            (
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "let me think"}}),
            ),
            (
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig=="}}),
            ),
            (
                Some("content_block_stop"),
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            ),
            (
                Some("content_block_delta"),
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": format!("answer number {n}")}}),
            ),
            (
                Some("content_block_stop"),
                json!({"type": "content_block_stop", "index": 1}),
            ),
            (
                Some("message_delta"),
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}),
            ),
            (Some("message_stop"), json!({"type": "message_stop"})),
        ];
        return Canned {
            status: 200,
            content_type: "text/event-stream",
            body: sse(&events, false),
        };
    }
    Canned {
        status: 200,
        content_type: "application/json",
        body: json!({"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
                     "content": [{"type": "text", "text": format!("answer number {n}")}],
                     "stop_reason": "end_turn", "usage": usage})
        .to_string(),
    }
}

/// The error a provider answers a prompt of `prompt` tokens with, over a window of `window`.
fn overflow_answer(path: &str, window: u64, prompt: u64) -> Canned {
    let body = if path.ends_with("/chat/completions") {
        json!({"error": {"message": format!("This model's maximum context length is {window} tokens. However, your messages resulted in {prompt} tokens. Please reduce the length of the messages."), "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
    } else {
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": format!("prompt is too long: {prompt} tokens > {window} maximum")}})
    };
    Canned {
        status: 400,
        content_type: "application/json",
        body: body.to_string(),
    }
}

async fn start_upstream() -> Upstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let state: Arc<Mutex<UpstreamState>> = Arc::default();
    let st = state.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let st = st.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |req: http::Request<hyper::body::Incoming>| {
                        let st = st.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let raw = body.collect().await.unwrap().to_bytes();
                            let value: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
                            let delay = st.lock().unwrap().summary_delay;
                            if let (true, Some(d)) = (is_summary(&value), delay) {
                                st.lock().unwrap().seen.push(Seen {
                                    method: parts.method.to_string(),
                                    path: parts.uri.path().to_string(),
                                    headers: Vec::new(),
                                    raw: raw.clone(),
                                });
                                // Never answered in time: the proxy drops the request first.
                                tokio::time::sleep(d).await;
                            }
                            let mut s = st.lock().unwrap();
                            s.seen.push(Seen {
                                method: parts.method.to_string(),
                                path: parts.uri.path_and_query().unwrap().to_string(),
                                headers: parts
                                    .headers
                                    .iter()
                                    .map(|(n, v)| {
                                        (n.to_string(), v.to_str().unwrap_or("").to_string())
                                    })
                                    .collect(),
                                raw,
                            });
                            let canned = if parts.method == http::Method::GET {
                                Canned {
                                status: 200,
                                content_type: "application/json",
                                body: json!({"object": "list", "data": [{"id": "gpt-4o"}], "query": parts.uri.query()}).to_string(),
                            }
                            } else {
                                answer(&mut s, parts.uri.path(), &value)
                            };
                            let mut cut = None;
                            if canned.content_type == "text/event-stream" {
                                s.streamed.push(canned.body.clone().into_bytes());
                                cut = s.cut_next_stream.take();
                            }
                            let body = match cut {
                                // The first bytes, then the connection fails mid-body.
                                Some(n) => {
                                    use futures::StreamExt;
                                    let head = Bytes::from(canned.body[..n].to_string());
                                    let first = futures::stream::once(async move {
                                        Ok(hyper::body::Frame::data(head))
                                    });
                                    let lost = futures::stream::once(async {
                                        // After the head has reached the proxy.
                                        tokio::time::sleep(std::time::Duration::from_millis(100))
                                            .await;
                                        Err(std::io::Error::other("upstream connection lost"))
                                    });
                                    BodyExt::boxed(http_body_util::StreamBody::new(
                                        first.chain(lost),
                                    ))
                                }
                                None => Full::new(Bytes::from(canned.body))
                                    .map_err(|never| match never {})
                                    .boxed(),
                            };
                            let r = http::Response::builder()
                                .status(canned.status)
                                .header("content-type", canned.content_type)
                                .header("x-request-id", "req_upstream_7")
                                .body(body)
                                .unwrap();
                            Ok::<_, std::convert::Infallible>(r)
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Upstream { addr, state }
}

// ---------------------------------------------------------------------------------------------
// The proxy under test

struct Env {
    base: tempfile::TempDir,
    workspace: PathBuf,
    proxy: SocketAddr,
    upstream: Upstream,
    log: Arc<Mutex<Vec<String>>>,
}

/// The tests' workspace config: small limits, and the local builder unless a test says
/// otherwise.
fn config() -> Value {
    json!({
        "compaction": {"keepRecentTokens": 1500, "minTokensForAutoCompact": 3000, "minReclaimableTokens": 500},
        "summarizer": {"provider": "local"}
    })
}

fn workspace(base: &std::path::Path, config: &Value) -> PathBuf {
    let ws = std::fs::canonicalize(base).unwrap().join("project");
    std::fs::create_dir_all(ws.join(".soba")).unwrap();
    std::fs::write(ws.join(".soba/config.json"), config.to_string()).unwrap();
    ws
}

async fn start_proxy(target: impl FnOnce(&std::path::Path) -> DaemonTarget) -> Env {
    start_proxy_with(target, &config(), ProxySummarizer::default()).await
}

async fn start_proxy_with(
    target: impl FnOnce(&std::path::Path) -> DaemonTarget,
    config: &Value,
    summarizer: ProxySummarizer,
) -> Env {
    start_proxy_sized(target, config, summarizer, WINDOW).await
}

/// A proxy whose model has a context window of `window` tokens.
async fn start_proxy_sized(
    target: impl FnOnce(&std::path::Path) -> DaemonTarget,
    config: &Value,
    summarizer: ProxySummarizer,
    window: u64,
) -> Env {
    start_proxy_remembering(
        target,
        config,
        summarizer,
        window,
        soba::proxy::server::DEFAULT_MAX_CONVERSATIONS,
    )
    .await
}

/// [`start_proxy_sized`], remembering at most `max_conversations` conversations.
async fn start_proxy_remembering(
    target: impl FnOnce(&std::path::Path) -> DaemonTarget,
    config: &Value,
    summarizer: ProxySummarizer,
    window: u64,
    max_conversations: usize,
) -> Env {
    let base = tempfile::tempdir().unwrap();
    let ws = workspace(base.path(), config);
    let upstream = start_upstream().await;
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let l = log.clone();
    let proxy = Proxy::new(ProxyConfig {
        upstream: format!("http://{}", upstream.addr).parse().unwrap(),
        workspace: ws.display().to_string(),
        context_window: Some(window),
        max_output_tokens: Some(MAX_OUTPUT),
        summarizer,
        daemon: target(base.path()),
        log: Arc::new(move |line: &str| l.lock().unwrap().push(line.to_string())),
        max_conversations,
    })
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(proxy.serve(listener));
    Env {
        base,
        workspace: ws,
        proxy: addr,
        upstream,
        log,
    }
}

fn in_process(base: &std::path::Path) -> DaemonTarget {
    DaemonTarget::InProcess(Daemon::new(
        Paths::under(&base.join("soba")),
        DaemonOptions {
            watch: None,
            extra_config: None,
            summarizer: None,
            ..DaemonOptions::default()
        },
    ))
}

async fn env() -> Env {
    start_proxy(in_process).await
}

impl Env {
    async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.post_with(path, body, &[]).await
    }

    /// [`Env::post`] with extra headers.
    async fn post_with(
        &self,
        path: &str,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut request = reqwest::Client::new().post(format!("http://{}{path}", self.proxy));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request
            .header("authorization", format!("Bearer {KEY}"))
            .header("x-api-key", KEY)
            .header("anthropic-version", "2023-06-01")
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// Session logs the proxy's sessions wrote.
    fn session_logs(&self) -> Vec<PathBuf> {
        let dir = Paths::under(&self.base.path().join("soba")).sessions_dir(&self.workspace);
        std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn hard_limit() -> u64 {
    // Below a 64000-token window the default reserve scales with the window.
    let reserve = soba_core::limits::CompactionConfig::default().safety_reserve_tokens;
    soba_core::limits::Limits::compute(
        WINDOW,
        MAX_OUTPUT,
        &soba_core::limits::CompactionConfig {
            safety_reserve_tokens: soba_core::config::scaled_safety_reserve(reserve, WINDOW),
            ..soba_core::limits::CompactionConfig::default()
        },
    )
    .unwrap()
    .hard_limit
}

/// Tokens of the text a request carries in its messages: a lower bound of what the provider
/// counts, and what SOBA's budget must keep under the hard limit.
fn message_tokens(body: &Value) -> u64 {
    let k = TokenizerKind::O200kBase;
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let mut t = 0;
            match &m["content"] {
                Value::String(s) => t += k.count(s),
                Value::Array(parts) => {
                    for p in parts {
                        for key in ["text", "thinking"] {
                            if let Some(s) = p[key].as_str() {
                                t += k.count(s);
                            }
                        }
                        if let Some(s) = p["content"].as_str() {
                            t += k.count(s);
                        }
                    }
                }
                _ => {}
            }
            t
        })
        .sum()
}

/// About `tokens` tokens of distinct prose.
fn filler(turn: usize, tokens: usize) -> String {
    (0..tokens / 6)
        .map(|i| format!("step{turn}x{i} checks module "))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_conversation_is_compacted_and_no_request_exceeds_the_hard_limit() {
    let env = env().await;
    let hard = hard_limit();
    let mut messages =
        vec![json!({"role": "system", "content": "You are a careful coding agent."})];
    for turn in 0..24 {
        if turn % 3 == 1 {
            // A tool round: the agent's call and its result, as OpenAI clients resend them.
            let id = format!("call_{turn}");
            messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"src/lib.rs\"}"}}]}));
            messages
                .push(json!({"role": "tool", "tool_call_id": id, "content": filler(turn, 400)}));
        }
        messages.push(json!({"role": "user", "content": filler(turn, 700)}));
        let r = env
            .post(
                "/v1/chat/completions",
                &json!({"model": "gpt-4o", "messages": messages}),
            )
            .await;
        assert_eq!(r.status(), 200, "turn {turn}: {:?}", r.text().await);
        let reply: Value = r.json().await.unwrap();
        messages.push(reply["choices"][0]["message"].clone());
    }
    let chats = env.upstream.chats();
    assert_eq!(chats.len(), 24);
    for (i, c) in chats.iter().enumerate() {
        let t = message_tokens(&c.body());
        assert!(
            t <= hard,
            "request {i} carried {t} tokens, over the hard limit {hard}"
        );
        // The agent's system prompt is sent first, as it was sent.
        assert_eq!(c.body()["messages"][0], messages[0]);
        // Every tool message follows the assistant message with its call.
        let sent = c.body()["messages"].as_array().unwrap().clone();
        for (j, m) in sent.iter().enumerate() {
            if m["role"] == "tool" {
                let id = m["tool_call_id"].as_str().unwrap();
                let call_at = sent[..j].iter().rposition(|p| p["role"] != "tool").unwrap();
                let calls = sent[call_at]["tool_calls"]
                    .as_array()
                    .expect("a tool message follows its call");
                assert!(
                    calls.iter().any(|c| c["id"] == id),
                    "request {i}: result {id} is not paired"
                );
            }
        }
    }
    let last = chats.last().unwrap().body();
    let first_after_system = last["messages"][1]["content"].as_str().unwrap_or("");
    assert!(
        first_after_system.contains("Context Capsule"),
        "the history was replaced by a capsule: {first_after_system:.200}"
    );
    assert!(
        last["messages"].as_array().unwrap().len() < messages.len(),
        "fewer messages than the agent's history went upstream"
    );
    assert!(env
        .log
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains("compaction completed")));
    // One session; each message of the history was appended once.
    let logs = env.session_logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let (session, _) = soba_core::session::log::read_session(&logs[0]).unwrap();
    let users = session
        .entries()
        .iter()
        .filter(|e| {
            e.as_message()
                .is_some_and(|m| m.role == soba_core::session::entry::Role::User)
        })
        .count();
    assert_eq!(users, 24, "every user message appended exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_streaming_reaches_the_client_byte_identical_and_usage_anchors_the_budget() {
    let env = env().await;
    let mut messages: Vec<Value> = Vec::new();
    for turn in 0..3 {
        messages.push(
            json!({"role": "user", "content": [{"type": "text", "text": filler(turn, 300)}]}),
        );
        let r = env
            .post(
                "/v1/messages",
                &json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "system": "Be brief.", "stream": true, "messages": messages}),
            )
            .await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "text/event-stream");
        assert_eq!(r.headers()["x-request-id"], "req_upstream_7");
        let got = r.bytes().await.unwrap();
        let sent = env
            .upstream
            .state
            .lock()
            .unwrap()
            .streamed
            .last()
            .cloned()
            .unwrap();
        assert_eq!(
            got.as_ref(),
            sent.as_slice(),
            "SSE events reach the client unchanged"
        );
        messages.push(json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "let me think", "signature": "sig=="},
            {"type": "text", "text": format!("answer number {}", env.upstream.seen().len())},
        ]}));
    }
    // The upstream got the system prompt as sent, and no duplicated history.
    let last = env.upstream.chats().last().unwrap().body();
    assert_eq!(last["system"], "Be brief.");
    assert_eq!(last["messages"].as_array().unwrap().len(), 5);
    // The streamed reply's usage anchors the budget. The proxy records a streamed reply once the
    // stream has ended, which may be just after the client has read its last byte.
    let logs = env.session_logs();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (session, with_usage) = loop {
        let (session, _) = soba_core::session::log::read_session(&logs[0]).unwrap();
        let with_usage = session
            .entries()
            .iter()
            .filter_map(|e| e.as_message())
            .filter(|m| m.usage.is_some_and(|u| u.output == 9 && u.input > 0))
            .count();
        if with_usage >= 3 || std::time::Instant::now() > deadline {
            break (session, with_usage);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(
        with_usage, 3,
        "each streamed reply was recorded with its usage"
    );
    let assistants = session
        .entries()
        .iter()
        .filter_map(|e| e.as_message())
        .filter(|m| m.role == soba_core::session::entry::Role::Assistant)
        .count();
    assert_eq!(
        assistants, 3,
        "resent replies match the recorded ones, not appended again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_error_reaches_the_client_as_the_same_status_and_body() {
    let env = env().await;
    let body = json!({"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": "rate_limit_exceeded"}}).to_string();
    env.upstream.script(Canned {
        status: 429,
        content_type: "application/json",
        body: body.clone(),
    });
    let r = env
        .post(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["x-request-id"], "req_upstream_7");
    assert_eq!(r.text().await.unwrap(), body);
    assert_eq!(
        env.upstream.chats().len(),
        1,
        "a plain error is not retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_overflow_from_upstream_compacts_and_retries_once() {
    let env = env().await;
    // A history under SOBA's soft limit, which the provider still refuses.
    let mut messages = Vec::new();
    for turn in 0..6 {
        let id = format!("call_{turn}");
        messages.push(json!({"role": "user", "content": format!("look at part {turn}")}));
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "read_file", "arguments": format!("{{\"path\": \"src/part{turn}.rs\"}}")}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": filler(turn, 800)}));
        messages.push(json!({"role": "assistant", "content": format!("done with {turn}")}));
    }
    messages.push(json!({"role": "user", "content": "and now?"}));
    let overflow = json!({"error": {"message": "This model's maximum context length is 16000 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}}).to_string();
    env.upstream.script(Canned {
        status: 400,
        content_type: "application/json",
        body: overflow.clone(),
    });
    let r = env
        .post(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o", "messages": messages}),
        )
        .await;
    assert_eq!(
        r.status(),
        200,
        "the retry succeeded: {:?}",
        env.log.lock().unwrap()
    );
    let chats = env.upstream.chats();
    assert_eq!(chats.len(), 2, "one retry");
    let (first, retry) = (chats[0].body(), chats[1].body());
    assert!(
        message_tokens(&retry) < message_tokens(&first),
        "the retry is smaller"
    );
    assert!(
        retry["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("Context Capsule"),
        "{retry}"
    );
    assert!(env
        .log
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.contains("retried after overflow")));

    // When the retry overflows too, the agent gets the provider's own answer.
    env.upstream.script(Canned {
        status: 400,
        content_type: "application/json",
        body: overflow.clone(),
    });
    env.upstream.script(Canned {
        status: 400,
        content_type: "application/json",
        body: overflow.clone(),
    });
    messages.push(json!({"role": "assistant", "content": "answer number 1"}));
    messages.push(json!({"role": "user", "content": filler(99, 300)}));
    let r = env
        .post(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o", "messages": messages}),
        )
        .await;
    assert_eq!(r.status(), 400);
    assert_eq!(r.text().await.unwrap(), overflow);
    assert_eq!(env.upstream.chats().len(), 4, "never more than one retry");
    let log = env.log.lock().unwrap().clone();
    assert!(
        log[1].contains("retried after overflow; the retry overflowed too"),
        "{log:?}"
    );
}

/// Issue 28: a provider whose real window is below SOBA's configured one. The first request of
/// a ~25k history overflows once; SOBA learns the provider's window, the recovery cuts into
/// keepRecentTokens so the retry fits, and the rest of the turn stays under the learned window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_window_below_the_configured_one_is_learned_once_and_the_turn_goes_on() {
    let config =
        json!({"compaction": {"keepRecentTokens": 20000}, "summarizer": {"provider": "local"}});
    let env = start_proxy_sized(in_process, &config, ProxySummarizer::default(), 64_000).await;
    env.upstream.state.lock().unwrap().window = Some(24_000);
    let mut messages =
        vec![json!({"role": "system", "content": "You are a careful coding agent."})];
    for turn in 0..12 {
        let id = format!("call_{turn}");
        messages.push(json!({"role": "user", "content": filler(turn, 1000)}));
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "read_file", "arguments": format!("{{\"path\": \"src/part{turn}.rs\"}}")}}]}));
        messages
            .push(json!({"role": "tool", "tool_call_id": id, "content": filler(100 + turn, 1000)}));
        messages.push(json!({"role": "assistant", "content": format!("done with {turn}")}));
    }
    messages.push(json!({"role": "user", "content": "now read the remaining modules one by one"}));
    assert!(
        message_tokens(&json!({"messages": messages})) > 20_000,
        "a history above keepRecentTokens"
    );
    // The agent's turn: each answer calls a tool, whose result the next request carries.
    let steps = 5;
    env.upstream
        .state
        .lock()
        .unwrap()
        .tool_calls
        .extend((0..steps).map(|i| format!("read_{i}")));
    for step in 0..steps {
        let r = env
            .post(
                "/v1/chat/completions",
                &json!({"model": "gpt-4o", "messages": messages}),
            )
            .await;
        assert_eq!(
            r.status(),
            200,
            "step {step}: {:?}",
            env.log.lock().unwrap()
        );
        let reply: Value = r.json().await.unwrap();
        let message = reply["choices"][0]["message"].clone();
        let id = message["tool_calls"][0]["id"].as_str().unwrap().to_string();
        messages.push(message);
        messages
            .push(json!({"role": "tool", "tool_call_id": id, "content": filler(200 + step, 1500)}));
    }
    assert_eq!(
        env.upstream.state.lock().unwrap().overflows,
        1,
        "only the first request overflowed: {:?}",
        env.log.lock().unwrap()
    );
    let log = env.log.lock().unwrap().clone();
    assert!(
        log[0].contains("compaction completed (overflow)"),
        "{log:?}"
    );
    assert!(log[0].contains("retried after overflow"), "{log:?}");
    assert!(log[1..].iter().all(|l| !l.contains("overflow")), "{log:?}");

    // The session log records the learned window and the shortened tail.
    let (session, _) = soba_core::session::log::read_session(&env.session_logs()[0]).unwrap();
    let window = *session.window_setting().expect("a learned window");
    assert_eq!(
        window.source,
        soba_core::window::WindowSource::ProviderError
    );
    assert_eq!(window.figures.provider_window, Some(24_000));
    let learned = window.context_window.unwrap();
    assert!(learned <= 24_000, "{window:?}");
    let first = session
        .entries()
        .iter()
        .find_map(|e| e.as_capsule().cloned())
        .expect("the recovery's capsule");
    assert_eq!(
        first.trigger,
        soba_core::session::trigger::Trigger::ContextOverflow
    );
    let short = first
        .tokens
        .short_tail
        .expect("the tail was cut below keepRecentTokens");
    assert_eq!(short.keep_recent_tokens, 20_000);
    assert!(short.retained_tail_tokens < 20_000, "{short:?}");
    assert_eq!(short.context_window, learned);
}

/// An overflow the recovery cannot help is passed through, and the log says so instead of
/// claiming a retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflow_without_a_retry_is_logged_as_such() {
    let env = env().await;
    // A window that leaves no room after the output (2000) and the safety reserve (2560: 8192
    // scaled to the 20000-token window).
    let overflow = json!({"error": {"message": "This model's maximum context length is 4000 tokens. However, your messages resulted in 3100 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}}).to_string();
    env.upstream.script(Canned {
        status: 400,
        content_type: "application/json",
        body: overflow.clone(),
    });
    let messages = json!([{"role": "user", "content": filler(1, 3000)}]);
    let r = env
        .post(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o", "messages": messages}),
        )
        .await;
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.text().await.unwrap(),
        overflow,
        "the provider's own answer"
    );
    assert_eq!(env.upstream.chats().len(), 1, "no retry was sent");
    let log = env.log.lock().unwrap().clone();
    assert!(!log[0].contains("retried"), "{log:?}");
    assert!(
        log[0].contains("overflow: could not shrink below"),
        "{log:?}"
    );
    assert!(log[0].contains(&format!("(window {WINDOW})")), "{log:?}");
    assert!(log[0].contains("4000"), "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rewritten_prefix_is_byte_identical_between_compactions_so_prompt_caching_reads() {
    let env = env().await;
    let mut messages =
        vec![json!({"role": "system", "content": "You are a careful coding agent."})];
    let mut compactions_seen = 0;
    let mut previous_first: Option<Value> = None;
    for turn in 0..20 {
        messages.push(json!({"role": "user", "content": filler(turn, 700)}));
        let r = env
            .post(
                "/v1/chat/completions",
                &json!({"model": "gpt-4o", "messages": messages}),
            )
            .await;
        let reply: Value = r.json().await.unwrap();
        messages.push(reply["choices"][0]["message"].clone());
        let sent = env.upstream.chats().last().unwrap().body();
        let first = sent["messages"][1].clone();
        if previous_first.as_ref().is_some_and(|p| p != &first) {
            compactions_seen += 1;
        }
        previous_first = Some(first);
    }
    let (reads, whole) = {
        let s = env.upstream.state.lock().unwrap();
        (s.cache_reads.clone(), s.whole_prefix.clone())
    };
    let compactions = env
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("compaction completed"))
        .count();
    assert!(compactions >= 1, "the run compacted");
    assert_eq!(
        compactions, compactions_seen,
        "the capsule changes only at a compaction"
    );
    // Every request but the first and those right after a compaction resends the previous
    // request byte for byte as its prefix, so the provider reads it from its cache.
    let hits = whole.iter().filter(|&&w| w).count();
    assert_eq!(hits, whole.len() - 1 - compactions, "{whole:?}");
    assert!(reads.iter().skip(1).all(|&r| r > 0), "{reads:?}");
    // Cache reads were recorded as such in the session.
    let (session, _) = soba_core::session::log::read_session(&env.session_logs()[0]).unwrap();
    assert!(session
        .entries()
        .iter()
        .filter_map(|e| e.as_message())
        .any(|m| m.usage.is_some_and(|u| u.cache_read > 0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_paths_pass_through_unchanged_and_the_key_goes_upstream_but_never_into_logs() {
    let env = env().await;
    let r = reqwest::Client::new()
        .get(format!("http://{}/v1/models?limit=5", env.proxy))
        .header("authorization", format!("Bearer {KEY}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["data"][0]["id"], "gpt-4o");
    assert_eq!(body["query"], "limit=5");
    let r = env
        .post("/v1/chat/completions", &json!({"model": "gpt-4o", "stream": true, "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(r.status(), 200);
    let _ = r.bytes().await.unwrap();
    for s in env.upstream.seen() {
        assert_eq!(
            s.header("authorization"),
            Some(format!("Bearer {KEY}").as_str()),
            "{}",
            s.path
        );
        assert!(
            s.header("connection").is_none_or(|v| v != "x"),
            "hop-by-hop headers are the proxy's own"
        );
    }
    let chat = env.upstream.chats().pop().unwrap();
    assert_eq!(chat.header("x-api-key"), Some(KEY));
    assert_eq!(chat.header("anthropic-version"), Some("2023-06-01"));
    let lines = env.log.lock().unwrap().join("\n");
    assert!(lines.contains("GET /v1/models"), "{lines}");
    assert!(!lines.contains(KEY), "the key is never logged: {lines}");
    for log in env.session_logs() {
        let text = std::fs::read_to_string(log).unwrap();
        assert!(!text.contains(KEY), "the key is never stored");
    }
}

/// The `type` of every entry in a session log, in order.
fn entry_types(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| e["type"].as_str().map(str::to_string))
        .collect()
}

fn count(types: &[String], kind: &str) -> usize {
    types.iter().filter(|t| *t == kind).count()
}

/// The texts of the model view of a session log's current branch.
fn view_texts(log: &std::path::Path) -> Vec<String> {
    let (session, _) = soba_core::session::log::read_session(log).unwrap();
    let view = soba_core::session::view::ModelView::build(&session, session.leaf());
    view.messages(&session)
        .iter()
        .map(|m| soba_core::session::entry::blocks_text(&m.content))
        .collect()
}

/// Send an OpenAI chat request and return the assistant message to resend.
async fn openai_turn(env: &Env, messages: &[Value], headers: &[(&str, &str)]) -> Value {
    let r = env
        .post_with(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o", "messages": messages}),
            headers,
        )
        .await;
    assert_eq!(r.status(), 200, "{:?}", env.log.lock().unwrap());
    let reply: Value = r.json().await.unwrap();
    reply["choices"][0]["message"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_interleaved_conversations_with_the_same_opening_get_two_sessions_and_never_rewind() {
    let env = env().await;
    // Two copies of an agent given one task: the same system prompt and first message.
    let opening = vec![
        json!({"role": "system", "content": "You are a careful coding agent."}),
        json!({"role": "user", "content": "Repository map: src/main.rs src/lib.rs src/parser.rs"}),
    ];
    let mut histories = [opening.clone(), opening];
    let turns = 12;
    for turn in 0..turns {
        for (k, history) in histories.iter_mut().enumerate() {
            let text = format!("copy-{k} turn {turn}: {}", filler(turn, 700));
            history.push(json!({"role": "user", "content": text}));
            let reply = openai_turn(&env, history, &[]).await;
            history.push(reply);
        }
    }
    let logs = env.session_logs();
    assert_eq!(logs.len(), 2, "one session per conversation: {logs:?}");
    let lines = env.log.lock().unwrap().clone();
    let mut capsules = Vec::new();
    for log in &logs {
        let types = entry_types(log);
        assert_eq!(count(&types, "rewind"), 0, "{}: no rewinds", log.display());
        let text = std::fs::read_to_string(log).unwrap();
        let own = usize::from(text.contains("copy-1 turn"));
        assert!(
            !text.contains(&format!("copy-{} turn", 1 - own)),
            "a session holds one conversation"
        );
        let users = count(&types, "message");
        assert_eq!(users, 1 + 2 * turns, "each message once: {types:?}");
        capsules.push(count(&types, "capsule"));
    }
    // Each conversation compacts as it would alone: a few times over twelve long turns (not at
    // every request, as when they shared a session), and once per log line that says so.
    let logged = lines
        .iter()
        .filter(|l| l.contains("compaction completed"))
        .count();
    assert_eq!(capsules.iter().sum::<usize>(), logged, "{lines:?}");
    assert!(
        capsules.iter().all(|&c| (1..=4).contains(&c)),
        "{capsules:?} compactions in {turns} turns each"
    );
    assert_eq!(capsules[0], capsules[1], "the two grow alike");
    // Every upstream request carries one conversation only.
    for chat in env.upstream.chats() {
        let body = String::from_utf8_lossy(&chat.raw).to_string();
        assert!(
            !(body.contains("copy-0 turn") && body.contains("copy-1 turn")),
            "a request mixed the two conversations"
        );
    }
    eprintln!(
        "two interleaved conversations: {} requests, sessions {}, compactions {capsules:?}, log bytes {:?}",
        env.upstream.chats().len(),
        logs.len(),
        logs.iter()
            .map(|l| std::fs::metadata(l).unwrap().len())
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_in_the_system_prompt_keeps_one_session_and_records_each_change() {
    let env = env().await;
    let mut messages: Vec<Value> = Vec::new();
    let turns = 6;
    for turn in 0..turns {
        messages.push(
            json!({"role": "user", "content": format!("step {turn}: {}", filler(turn, 200))}),
        );
        let r = env
            .post(
                "/v1/messages",
                &json!({"model": "claude-sonnet-4-5", "max_tokens": 100,
                        "system": format!("You are a coding agent. The time is 10:0{turn}:00."),
                        "messages": messages}),
            )
            .await;
        assert_eq!(r.status(), 200);
        let reply: Value = r.json().await.unwrap();
        messages.push(json!({"role": "assistant", "content": reply["content"]}));
    }
    let logs = env.session_logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let types = entry_types(&logs[0]);
    assert_eq!(count(&types, "rewind"), 0);
    assert_eq!(
        count(&types, "setting"),
        turns,
        "each new system prompt is a setting change: {types:?}"
    );
    assert_eq!(count(&types, "message"), 2 * turns);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regenerate_edit_and_drop_last_turn_rewind_within_the_conversation() {
    let env = env().await;
    let ask = |text: &str| json!({"role": "user", "content": text});
    // The first request fails upstream; the agent's retry continues the same conversation.
    env.upstream.script(Canned {
        status: 500,
        content_type: "application/json",
        body: json!({"error": {"message": "boom", "type": "server_error"}}).to_string(),
    });
    let r = env
        .post(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o", "messages": [ask("write the parser")]}),
        )
        .await;
    assert_eq!(r.status(), 500);
    let r1 = openai_turn(&env, &[ask("write the parser")], &[]).await;
    let base = [ask("write the parser"), r1.clone()];
    let with = |last: &str| {
        let mut m = base.to_vec();
        m.push(ask(last));
        m
    };
    openai_turn(&env, &with("now the tests"), &[]).await;
    // Regenerate the last answer, edit the last question, drop the last turn for another.
    openai_turn(&env, &with("now the tests"), &[]).await;
    openai_turn(&env, &with("now the benchmarks"), &[]).await;
    let last = openai_turn(&env, &with("document the parser"), &[]).await;

    let logs = env.session_logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(count(&entry_types(&logs[0]), "rewind"), 3);
    assert_eq!(
        view_texts(&logs[0]),
        vec![
            "write the parser".to_string(),
            r1["content"].as_str().unwrap().to_string(),
            "document the parser".to_string(),
            last["content"].as_str().unwrap().to_string(),
        ]
    );
    let sent = env.upstream.chats().last().unwrap().body();
    assert_eq!(sent["messages"].as_array().unwrap().len(), 3, "{sent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_message_resent_with_other_whitespace_keeps_the_session() {
    let env = env().await;
    let ask = |text: &str| json!({"role": "user", "content": text});
    let opening = "Fix the parser.\n\nIt fails on tabs.";
    let r1 = openai_turn(&env, &[ask(opening)], &[]).await;
    // Aider restoring its chat history resends the first message re-wrapped.
    let rewrapped = "Fix the parser.\nIt fails on tabs.\n";
    let r2 = openai_turn(
        &env,
        &[ask(rewrapped), r1.clone(), ask("now the tests")],
        &[],
    )
    .await;

    let logs = env.session_logs();
    assert_eq!(logs.len(), 1, "one session: {logs:?}");
    let types = entry_types(&logs[0]);
    assert_eq!(count(&types, "rewind"), 0, "{types:?}");
    assert_eq!(
        view_texts(&logs[0]),
        vec![
            opening.to_string(),
            r1["content"].as_str().unwrap().to_string(),
            "now the tests".to_string(),
            r2["content"].as_str().unwrap().to_string(),
        ],
        "each message recorded once"
    );
    // The model reads the history as the agent sent it.
    let sent = env.upstream.chats().last().unwrap().body();
    let sent = sent["messages"].as_array().unwrap();
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(sent[0]["content"], rewrapped);
    assert_eq!(sent[2]["content"], "now the tests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_message_resent_with_its_text_edited_starts_a_new_session() {
    let env = env().await;
    let ask = |text: &str| json!({"role": "user", "content": text});
    let r1 = openai_turn(&env, &[ask("Fix the parser.\n\nIt fails on tabs.")], &[]).await;
    let edited = "Fix the parser.\n\nIt fails on spaces.";
    openai_turn(&env, &[ask(edited), r1, ask("now the tests")], &[]).await;

    let mut logs = env.session_logs();
    assert_eq!(
        logs.len(),
        2,
        "the edited history is another session: {logs:?}"
    );
    logs.sort_by_key(|l| std::fs::metadata(l).unwrap().len());
    let texts = view_texts(logs.last().unwrap());
    assert_eq!(texts[0], edited);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_soba_session_separates_otherwise_identical_conversations() {
    let env = env().await;
    let hi = json!({"role": "user", "content": "hi"});
    let one = [("x-soba-session", "task-one")];
    let two = [("x-soba-session", "task-two")];
    let r1 = openai_turn(&env, std::slice::from_ref(&hi), &one).await;
    openai_turn(&env, std::slice::from_ref(&hi), &two).await;
    // A request carrying task-one's reply, named task-two, goes to task-two.
    let more = [
        hi.clone(),
        r1,
        json!({"role": "user", "content": "more please"}),
    ];
    openai_turn(&env, &more, &two).await;
    let logs = env.session_logs();
    assert_eq!(logs.len(), 2, "{logs:?}");
    let holding_more: Vec<_> = logs
        .iter()
        .filter(|l| std::fs::read_to_string(l).unwrap().contains("more please"))
        .collect();
    assert_eq!(holding_more.len(), 1);
    let types = entry_types(holding_more[0]);
    assert_eq!(
        count(&types, "rewind"),
        1,
        "task-two took the other history: {types:?}"
    );
    // The name is SOBA's: it never goes upstream.
    assert!(env
        .upstream
        .chats()
        .iter()
        .all(|c| c.header("x-soba-session").is_none()));
    // A name that is not one gets a clear error, and nothing goes upstream.
    let before = env.upstream.chats().len();
    let r = env
        .post_with(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o", "messages": [hi]}),
            &[("x-soba-session", "  ")],
        )
        .await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("x-soba-session header is empty"),
        "{message}"
    );
    assert_eq!(env.upstream.chats().len(), before);
}

/// The log line of the last request to `path`, once it is written (a stream's is written
/// when the stream ends).
async fn log_line(env: &Env, path: &str, n: usize) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let lines: Vec<String> = env
            .log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(path))
            .cloned()
            .collect();
        if lines.len() >= n || std::time::Instant::now() > deadline {
            return lines.get(n - 1).cloned().unwrap_or_default();
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn assistant_entries(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "message" && e["role"] == "assistant")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_breaks_midway_is_logged_as_broken_and_its_reply_is_not_recorded() {
    let env = env().await;
    env.upstream.state.lock().unwrap().cut_next_stream = Some(60);
    let body =
        json!({"model": "gpt-4o", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let r = env.post("/v1/chat/completions", &body).await;
    assert_eq!(r.status(), 200, "the status went out before the break");
    assert!(r.bytes().await.is_err(), "the client sees the break too");
    let line = log_line(&env, "/v1/chat/completions", 1).await;
    assert!(
        line.contains("→ 200 in ")
            && line.contains(", stream broke after 60 bytes: ")
            && line.contains("; reply not recorded"),
        "{line}"
    );
    let logs = env.session_logs();
    assert_eq!(assistant_entries(&logs[0]), 0);
    // The agent retries: the same conversation, since it never got a reply.
    let r = env.post("/v1/chat/completions", &body).await;
    let _ = r.bytes().await.unwrap();
    let line = log_line(&env, "/v1/chat/completions", 2).await;
    assert!(
        !line.contains("stream"),
        "a whole stream is not remarked on: {line}"
    );
    assert_eq!(env.session_logs().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_its_terminal_event_is_logged_as_malformed_and_not_recorded() {
    let env = env().await;
    let events = [
        (
            Some("message_start"),
            json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 5, "output_tokens": 1}}}),
        ),
        (
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            Some("content_block_delta"),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "half an ans"}}),
        ),
    ];
    env.upstream.script(Canned {
        status: 200,
        content_type: "text/event-stream",
        body: sse(&events, false),
    });
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let r = env.post("/v1/messages", &body).await;
    assert_eq!(r.status(), 200);
    let got = r.bytes().await.unwrap();
    assert_eq!(
        got.as_ref(),
        sse(&events, false).as_bytes(),
        "passed on as it came"
    );
    let line = log_line(&env, "/v1/messages", 1).await;
    assert!(
        line.contains(&format!(
            ", stream malformed after {} bytes: the stream ended without `message_stop`; reply not recorded",
            got.len()
        )),
        "{line}"
    );
    // The half answer is not in the session: the agent, which could not use it, asks again.
    let r = env.post("/v1/messages", &body).await;
    let _ = r.bytes().await.unwrap();
    log_line(&env, "/v1/messages", 2).await;
    let logs = env.session_logs();
    assert_eq!(logs.len(), 1);
    let texts = view_texts(&logs[0]);
    assert!(
        !texts.iter().any(|t| t.contains("half an ans")),
        "{texts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_answer_that_is_not_a_chat_reply_is_passed_on_and_logged_as_not_recorded() {
    let env = env().await;
    env.upstream.script(Canned {
        status: 200,
        content_type: "application/json",
        body: "<html>gateway page</html>".into(),
    });
    let r = env
        .post(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "<html>gateway page</html>");
    let line = log_line(&env, "/v1/chat/completions", 1).await;
    assert!(
        line.contains("→ 200 in ")
            && line.contains(", reply not recorded: the answer is not a chat reply (session "),
        "{line}"
    );
    assert_eq!(assistant_entries(&env.session_logs()[0]), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_over_the_budget_gets_openais_own_overflow_error() {
    let env = env().await;
    let r = env
        .post(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o", "messages": [{"role": "user", "content": filler(0, 16000)}]}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let message = body["error"]["message"].as_str().unwrap();
    let expected = format!(
        "This model's maximum context length is {} tokens. However, your messages resulted in ",
        hard_limit()
    );
    assert!(message.starts_with(&expected), "{message}");
    assert!(!message.contains("prompt is too long"), "{message}");
    // The answer names a window that would hold the history; the proxy's request line says
    // why it refused, and for which session.
    assert!(
        message.contains("a context window of about ") && message.contains(" tokens would hold it"),
        "{message}"
    );
    assert!(env.upstream.chats().is_empty(), "nothing went upstream");
    let line = log_line(&env, "/v1/chat/completions", 1).await;
    assert!(
        line.contains("→ 400 in ")
            && line.contains(", refused: too long: ")
            && line.contains(" (session "),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_proxy_cannot_read_is_refused_with_its_reason_in_the_log() {
    let env = env().await;
    let r = env
        .post(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o", "messages": "not a list"}),
        )
        .await;
    assert_eq!(r.status(), 400);
    let line = log_line(&env, "/v1/chat/completions", 1).await;
    assert!(
        line.contains("→ 400 in ") && line.contains(", refused: not a request SOBA can read: "),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_name_the_proxy_cannot_use_is_refused_with_its_reason_in_the_log() {
    let env = env().await;
    for (path, body) in [
        (
            "/v1/chat/completions",
            json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
        ),
        (
            "/v1/responses",
            json!({"model": "gpt-5", "previous_response_id": "resp_1", "input": "and now?"}),
        ),
    ] {
        let r = env.post_with(path, &body, &[("x-soba-session", " ")]).await;
        assert_eq!(r.status(), 400, "{path}");
        let line = log_line(&env, path, 1).await;
        assert!(
            line.contains("→ 400 in ")
                && line.contains(", refused: the x-soba-session header is empty; "),
            "{line}"
        );
    }
    assert!(env.upstream.chats().is_empty(), "nothing went upstream");
}

/// `soba proxy --listen ADDR` as a process: the start-up line, or the error it exits with.
fn proxy_listening_on(listen: &str) -> Result<String, String> {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_soba"))
        .args([
            "proxy",
            "--standalone",
            "--listen",
            listen,
            "--upstream",
            "http://127.0.0.1:9",
        ])
        .current_dir(dir.path())
        .env("SOBA_DATA_DIR", dir.path().join("data"))
        .env("SOBA_RUNTIME_DIR", dir.path().join("run"))
        .env("SOBA_CONFIG", dir.path().join("none.json"))
        .env_remove("SOBA_PROXY_TOKEN")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let status = child.wait().unwrap();
    if first.contains("listening on") {
        Ok(first)
    } else {
        assert!(!running || !status.success(), "{first}");
        Err(first)
    }
}

#[test]
fn listen_takes_localhost_and_still_refuses_a_remote_address() {
    let started = proxy_listening_on("localhost:0").unwrap();
    assert!(
        started.contains("listening on http://127.0.0.1:")
            || started.contains("listening on http://[::1]:"),
        "{started}"
    );
    let refused = proxy_listening_on("0.0.0.0:0").unwrap_err();
    assert!(
        refused.contains("refusing to listen on 0.0.0.0:0") && refused.contains("--allow-remote"),
        "{refused}"
    );
    let unknown = proxy_listening_on("no-such-host.invalid:4860").unwrap_err();
    assert!(
        unknown.contains("cannot resolve --listen no-such-host.invalid:4860"),
        "{unknown}"
    );
    let portless = proxy_listening_on("localhost").unwrap_err();
    assert!(
        portless.contains("has no port; give HOST:PORT"),
        "{portless}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_request_body_gets_a_clear_error_in_the_providers_shape() {
    let env = env().await;
    let r = env
        .post("/v1/messages", &json!({"model": "claude", "max_tokens": 5}))
        .await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("messages"),
        "{body}"
    );
    assert!(env.upstream.seen().is_empty(), "nothing went upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_client_sees_the_proxied_sessions_budget() {
    // The shared daemon on its socket, as `soba serve` would start it.
    let base = tempfile::tempdir().unwrap();
    let paths = Paths::under(&base.path().join("soba"));
    let listener = soba::daemon::socket::bind(&paths).unwrap().unwrap();
    let daemon = Daemon::new(
        paths.clone(),
        DaemonOptions {
            watch: None,
            extra_config: None,
            summarizer: None,
            ..DaemonOptions::default()
        },
    );
    tokio::spawn(soba::daemon::socket::run(
        listener,
        daemon,
        std::time::Duration::from_secs(30),
    ));
    let p = paths.clone();
    let env = start_proxy(move |_| DaemonTarget::Shared {
        paths: p,
        args: Vec::new(),
        hello: Some(Default::default()),
    })
    .await;
    let r = env
        .post(
            "/v1/chat/completions",
            &json!({"model": "gpt-4o", "messages": [{"role": "user", "content": filler(0, 900)}]}),
        )
        .await;
    assert_eq!(r.status(), 200);

    // An editor connected to the same daemon.
    let stream = tokio::net::UnixStream::connect(paths.socket_path())
        .await
        .unwrap();
    let (r, w) = stream.into_split();
    let editor = lsp_client::LspClient::new(r, w);
    editor.initialize(&[env.workspace.as_path()], false).await;
    let sessions = editor
        .request(
            "soba/sessions",
            json!({"workspace": env.workspace.display().to_string()}),
        )
        .await;
    let list = sessions["sessions"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{sessions}");
    let id = list[0]["sessionId"].as_str().unwrap();
    let budget = editor
        .request("soba/budget", json!({"sessionId": id}))
        .await;
    assert_eq!(
        budget["source"], "provider_usage",
        "the reply's usage anchors it: {budget}"
    );
    assert!(
        budget["effectiveTokens"].as_u64().unwrap() > 500,
        "{budget}"
    );
    assert_eq!(budget["hardLimit"].as_u64().unwrap(), hard_limit());
}

// ---------------------------------------------------------------------------------------------
// Capsules written by the conversation's own model

/// Workspace config with no summarizer block: the proxy's upstream writes the capsules.
fn config_without_summarizer(timeout_ms: Option<u64>) -> Value {
    let mut c = config();
    c.as_object_mut().unwrap().remove("summarizer");
    if let Some(t) = timeout_ms {
        c["compaction"]["timeoutMs"] = json!(t);
    }
    c
}

/// Send turns of a conversation in `api`'s shape until the proxy has compacted once.
async fn converse_until_compacted(env: &Env, api: &str) {
    converse_until_compacted_with(env, api, json!({})).await
}

/// [`converse_until_compacted`] with `extra` fields in every OpenAI request body.
async fn converse_until_compacted_with(env: &Env, api: &str, extra: Value) {
    let mut messages: Vec<Value> = Vec::new();
    for turn in 0..30 {
        let user = filler(turn, 700);
        let r = if api == "openai" {
            messages.push(json!({"role": "user", "content": user}));
            let mut body = json!({"model": "gpt-4o", "messages": messages});
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            env.post("/v1/chat/completions", &body).await
        } else {
            messages.push(json!({"role": "user", "content": [{"type": "text", "text": user}]}));
            env.post(
                "/v1/messages",
                &json!({"model": "claude-sonnet-4-5", "max_tokens": 1000, "messages": messages}),
            )
            .await
        };
        assert_eq!(r.status(), 200, "turn {turn}");
        let reply: Value = r.json().await.unwrap();
        if api == "openai" {
            messages.push(reply["choices"][0]["message"].clone());
        } else {
            messages.push(json!({"role": "assistant", "content": reply["content"]}));
        }
        let compacted = env
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("compaction completed"));
        if compacted {
            return;
        }
    }
    panic!("no compaction in 30 turns: {:?}", env.log.lock().unwrap());
}

/// The session's capsule entries.
fn capsules(env: &Env) -> Vec<soba_core::session::capsule::model::CapsuleEntry> {
    let logs = env.session_logs();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let (session, _) = soba_core::session::log::read_session(&logs[0]).unwrap();
    session
        .entries()
        .iter()
        .filter_map(|e| e.as_capsule().cloned())
        .collect()
}

/// Everything the proxy and the daemon wrote: log lines, session logs, flight records.
fn everything_written(env: &Env) -> String {
    let mut all = env.log.lock().unwrap().join("\n");
    for entry in walk(env.base.path()) {
        if let Ok(text) = std::fs::read_to_string(&entry) {
            all.push_str(&text);
        }
    }
    all
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_the_conversations_own_upstream_model_writes_the_capsule_with_its_credentials() {
    for api in ["openai", "anthropic"] {
        let env = start_proxy_with(
            in_process,
            &config_without_summarizer(None),
            ProxySummarizer::default(),
        )
        .await;
        converse_until_compacted(&env, api).await;

        // The summarization went to the same upstream, in the conversation's API shape, with
        // the served request's credentials and model.
        let summaries = env.upstream.summaries();
        assert!(!summaries.is_empty(), "{api}: no summarization request");
        for s in &summaries {
            if api == "openai" {
                assert_eq!(s.path, "/v1/chat/completions");
                assert_eq!(
                    s.header("authorization"),
                    Some(format!("Bearer {KEY}").as_str())
                );
                assert_eq!(s.body()["model"], "gpt-4o");
                assert!(s.body()["max_tokens"].is_u64());
            } else {
                assert_eq!(s.path, "/v1/messages");
                assert_eq!(s.header("x-api-key"), Some(KEY));
                assert_eq!(s.header("anthropic-version"), Some("2023-06-01"));
                assert_eq!(s.body()["model"], "claude-sonnet-4-5");
            }
            let user = if api == "openai" {
                s.body()["messages"][1]["content"]
                    .as_str()
                    .unwrap()
                    .to_string()
            } else {
                s.body()["messages"][0]["content"]
                    .as_str()
                    .unwrap()
                    .to_string()
            };
            assert!(
                user.contains("## Recorded facts (ground truth from the log"),
                "the facts are in the request: {user:.300}"
            );
        }

        // The capsule is the model's, validated: the invented file is gone.
        let caps = capsules(&env);
        let cap = caps.last().expect("a capsule");
        assert_eq!(
            cap.quality,
            soba_core::session::capsule::model::Quality::Model,
            "{api}"
        );
        assert_eq!(cap.state.goal, "Walk through every module step by step");
        assert_eq!(cap.state.completed, vec!["Checked the first modules"]);
        assert_eq!(cap.state.constraints, vec!["Keep each answer short"]);

        // The next chat request carries it.
        let last = env.upstream.chats().last().unwrap().body();
        assert!(
            last.to_string()
                .contains("Walk through every module step by step"),
            "{api}: the capsule goes upstream"
        );
        let written = everything_written(&env);
        assert!(
            !written.contains(KEY),
            "{api}: the key is never logged nor stored"
        );
        assert!(
            written.contains(", model)"),
            "{api}: the request line names the capsule's quality: {:?}",
            env.log.lock().unwrap()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summarizer_model_flag_names_the_model_the_upstream_summarizes_with() {
    let env = start_proxy_with(
        in_process,
        &config_without_summarizer(None),
        ProxySummarizer::Upstream {
            model: Some("gpt-4o-mini".into()),
        },
    )
    .await;
    // An agent that limits its output with `max_completion_tokens` (OpenAI's reasoning models
    // refuse `max_tokens`): the summarization request does the same.
    converse_until_compacted_with(&env, "openai", json!({"max_completion_tokens": 900})).await;
    let summaries = env.upstream.summaries();
    assert!(!summaries.is_empty());
    assert!(summaries.iter().all(|s| s.body()["model"] == "gpt-4o-mini"));
    for s in &summaries {
        assert!(s.body()["max_completion_tokens"].is_u64(), "{}", s.body());
        assert!(s.body().get("max_tokens").is_none());
    }
    assert!(env
        .upstream
        .chats()
        .iter()
        .all(|c| c.body()["model"] == "gpt-4o"));
    assert_eq!(
        capsules(&env).last().unwrap().quality,
        soba_core::session::capsule::model::Quality::Model
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summarization_past_the_timeout_is_aborted_and_the_local_capsule_is_marked_degraded() {
    // Soft triggers off: the hard limit starts the compaction, which then reclaims enough
    // with the local capsule to complete.
    let mut config = config_without_summarizer(Some(300));
    config["compaction"]["auto"] = json!(false);
    let env = start_proxy_with(in_process, &config, ProxySummarizer::default()).await;
    env.upstream.state.lock().unwrap().summary_delay = Some(std::time::Duration::from_secs(30));
    converse_until_compacted(&env, "openai").await;
    assert!(!env.upstream.summaries().is_empty(), "the model was asked");
    let cap = capsules(&env).last().cloned().unwrap();
    assert_eq!(
        cap.quality,
        soba_core::session::capsule::model::Quality::Degraded
    );
    assert_ne!(cap.state.goal, "Walk through every module step by step");
    // The flight record says why.
    let flight = walk(env.base.path())
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("flight"))
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect::<String>();
    assert!(
        flight.contains("did not finish within 300 ms")
            && flight.contains("the local capsule was used"),
        "{flight}"
    );
    // So does the proxy's request line.
    let lines = env.log.lock().unwrap().clone();
    assert!(
        lines.iter().any(|l| l.contains(
            "compaction completed (hard_limit, degraded): the summarization model did not finish within 300 ms"
        )),
        "{lines:?}"
    );
    assert!(!everything_written(&env).contains(KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_capsules_keep_summarization_off_the_upstream() {
    let env = start_proxy_with(
        in_process,
        &config_without_summarizer(None),
        ProxySummarizer::Local,
    )
    .await;
    converse_until_compacted(&env, "openai").await;
    assert!(
        env.upstream.summaries().is_empty(),
        "nothing was summarized upstream"
    );
    // Built with no summarization model at all: `local`, not the fallback `degraded`.
    assert_eq!(
        capsules(&env).last().unwrap().quality,
        soba_core::session::capsule::model::Quality::Local
    );

    // An explicit `summarizer` block wins over the upstream too.
    let env = start_proxy(in_process).await;
    converse_until_compacted(&env, "openai").await;
    assert!(env.upstream.summaries().is_empty());
    assert_eq!(
        capsules(&env).last().unwrap().quality,
        soba_core::session::capsule::model::Quality::Local
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_remembers_a_bounded_number_of_conversations_and_forgets_the_least_recent() {
    let env =
        start_proxy_remembering(in_process, &config(), ProxySummarizer::default(), WINDOW, 2).await;
    let opening = |k: usize| {
        vec![
            json!({"role": "system", "content": "You are a careful coding agent."}),
            json!({"role": "user", "content": format!("task {k}: tidy the parser")}),
        ]
    };
    let mut histories: Vec<Vec<Value>> = (0..3).map(opening).collect();
    // Conversations 0 and 1, then 0 again: 1 is now the least recently used.
    for k in [0, 1, 0] {
        let reply = openai_turn(&env, &histories[k], &[]).await;
        histories[k].push(reply);
        histories[k].push(json!({"role": "user", "content": format!("and then {k}")}));
    }
    assert_eq!(env.session_logs().len(), 2);
    // A third conversation: the proxy forgets conversation 1, not 0.
    let reply = openai_turn(&env, &histories[2], &[]).await;
    histories[2].push(reply);
    assert_eq!(env.session_logs().len(), 3);
    // Conversation 0 is still known: it continues its session.
    openai_turn(&env, &histories[0], &[]).await;
    assert_eq!(env.session_logs().len(), 3, "conversation 0 was remembered");
    // Conversation 1 was forgotten: it comes back as a new session; its first session stays.
    openai_turn(&env, &histories[1], &[]).await;
    let logs = env.session_logs();
    assert_eq!(logs.len(), 4, "conversation 1 starts over: {logs:?}");
    let holding_1: Vec<_> = logs
        .iter()
        .filter(|l| std::fs::read_to_string(l).unwrap().contains("task 1: tidy"))
        .collect();
    assert_eq!(holding_1.len(), 2, "the forgotten session's log is kept");
    for log in &logs {
        assert_eq!(count(&entry_types(log), "rewind"), 0, "{}", log.display());
    }
}
