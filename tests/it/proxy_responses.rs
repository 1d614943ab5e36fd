//! `soba proxy` with OpenAI's Responses API (`POST /v1/responses`), end to end: a client that
//! sends requests the way Codex does (instructions, a developer message, input items with
//! encrypted reasoning and tool calls, `store: false`, streamed) or the way the SDKs do
//! (`previous_response_id`) through the proxy to a loopback upstream that answers like the
//! Responses API, whole and as `response.*` events.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba::proxy::server::DaemonTarget;
use soba::proxy::server::Proxy;
use soba::proxy::server::ProxyConfig;
use soba::proxy::server::ProxySummarizer;
use soba_core::tokens::TokenizerKind;

use crate::loopback::{self, Loopback, Recorded, Step};

const WINDOW: u64 = 20000;
const MAX_OUTPUT: u64 = 2000;
const KEY: &str = "sk-test-responses-77aa";

/// What the fake model writes when SOBA asks it for a capsule.
fn summary_state() -> Value {
    json!({
        "goal": "Walk the repository module by module",
        "constraints": ["Keep answers short"],
        "completed": ["Read the first modules"],
        "active": ["Reading the next module"],
        "pending": [],
        "decisions": [],
        "blockers": [],
        "nextSteps": ["Read the next module"]
    })
}

fn is_summary(body: &Value) -> bool {
    body["instructions"].as_str() == Some(soba::summarize::prompt::SYSTEM_PROMPT)
}

/// One `response.*` event as the API writes it: its type on the `event:` line and in the data.
fn event(data: Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap()
    )
}

/// The events of a streamed response, in the order the Responses API sends them.
fn stream_of(response: &Value, completed: bool) -> Vec<String> {
    let id = &response["id"];
    let pending = json!({"id": id, "object": "response", "status": "in_progress", "output": []});
    let mut seq = 0;
    let mut next = |mut e: Value| {
        e["sequence_number"] = json!(seq);
        seq += 1;
        event(e)
    };
    let mut events = vec![
        next(json!({"type": "response.created", "response": pending})),
        next(json!({"type": "response.in_progress", "response": pending})),
    ];
    for (i, item) in response["output"].as_array().unwrap().iter().enumerate() {
        let mut added = item.clone();
        if item["type"] == "message" {
            added["content"] = json!([]);
            added["status"] = json!("in_progress");
        }
        events.push(next(
            json!({"type": "response.output_item.added", "output_index": i, "item": added}),
        ));
        if item["type"] == "message" {
            let text = item["content"][0]["text"].as_str().unwrap();
            let at = |k: &str| json!({"type": k, "item_id": item["id"], "output_index": i, "content_index": 0});
            let mut part = at("response.content_part.added");
            part["part"] = json!({"type": "output_text", "annotations": [], "text": ""});
            events.push(next(part));
            let (a, b) = text.split_at(text.len() / 2);
            for d in [a, b] {
                let mut delta = at("response.output_text.delta");
                delta["delta"] = json!(d);
                events.push(next(delta));
            }
            let mut done = at("response.output_text.done");
            done["text"] = json!(text);
            events.push(next(done));
            let mut part_done = at("response.content_part.done");
            part_done["part"] = item["content"][0].clone();
            events.push(next(part_done));
        }
        events.push(next(
            json!({"type": "response.output_item.done", "output_index": i, "item": item}),
        ));
    }
    if completed {
        events.push(next(
            json!({"type": "response.completed", "response": response}),
        ));
    }
    events
}

/// The upstream's answer to request `n`: encrypted reasoning, a message, and a call when the
/// test asked for one.
fn response(n: usize, body: &Value, call: Option<&str>) -> Value {
    let mut output = vec![
        json!({"id": format!("rs_{n}"), "type": "reasoning", "summary": [{"type": "summary_text", "text": format!("**Planning step {n}**")}],
               "encrypted_content": format!("gAAAAABo{n}-{}", "Zx9".repeat(200))}),
        json!({"id": format!("msg_{n}"), "type": "message", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": format!("answer number {n}")}]}),
    ];
    if let Some(id) = call {
        output.push(json!({"id": format!("fc_{n}"), "type": "function_call", "status": "completed", "name": "shell",
                           "arguments": "{\"command\":[\"cat\",\"src/lib.rs\"]}", "call_id": id}));
    }
    json!({"id": format!("resp_{n}"), "object": "response", "created_at": 1767225600, "status": "completed",
           "model": body["model"], "output": output,
           "usage": {"input_tokens": body.to_string().len() / 4, "input_tokens_details": {"cached_tokens": 0},
                     "output_tokens": 12, "output_tokens_details": {"reasoning_tokens": 4}, "total_tokens": 0}})
}

#[derive(Default)]
struct Script {
    /// Call a tool in the next answer: the call id.
    call: Option<String>,
    /// Answers to give before the normal ones.
    canned: Vec<Vec<Step>>,
    /// Leave `response.completed` out of the next stream.
    cut_next_stream: bool,
}

struct Env {
    base: tempfile::TempDir,
    workspace: PathBuf,
    proxy: std::net::SocketAddr,
    upstream: Loopback,
    script: Arc<Mutex<Script>>,
    log: Arc<Mutex<Vec<String>>>,
}

fn config(summarizer: bool) -> Value {
    let mut c = json!({"compaction": {"keepRecentTokens": 1500, "minTokensForAutoCompact": 3000, "minReclaimableTokens": 500}});
    if !summarizer {
        c["summarizer"] = json!({"provider": "local"});
    }
    c
}

async fn start(config: Value) -> Env {
    let base = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(base.path()).unwrap().join("project");
    std::fs::create_dir_all(ws.join(".soba")).unwrap();
    std::fs::write(ws.join(".soba/config.json"), config.to_string()).unwrap();
    let script: Arc<Mutex<Script>> = Arc::default();
    let s = script.clone();
    let upstream = Loopback::start(move |n, req: &Recorded| {
        let body = &req.body;
        if is_summary(body) {
            let text = summary_state().to_string();
            let mut done = response(n, body, None);
            done["output"] = json!([{"id": "msg_s", "type": "message", "status": "completed", "role": "assistant",
                                     "content": [{"type": "output_text", "annotations": [], "text": text}]}]);
            return loopback::sse(&stream_of(&done, true));
        }
        let mut script = s.lock().unwrap();
        if !script.canned.is_empty() {
            return script.canned.remove(0);
        }
        let r = response(n, body, script.call.take().as_deref());
        if body["stream"] == true {
            let completed = !std::mem::take(&mut script.cut_next_stream);
            loopback::sse(&stream_of(&r, completed))
        } else {
            loopback::json(200, &r.to_string())
        }
    })
    .await;
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let l = log.clone();
    let proxy = Proxy::new(ProxyConfig {
        upstream: upstream.base.parse().unwrap(),
        workspace: ws.display().to_string(),
        context_window: Some(WINDOW),
        max_output_tokens: Some(MAX_OUTPUT),
        summarizer: ProxySummarizer::default(),
        daemon: DaemonTarget::InProcess(Daemon::new(
            Paths::under(&base.path().join("soba")),
            DaemonOptions::default(),
        )),
        log: Arc::new(move |line: &str| l.lock().unwrap().push(line.to_string())),
        max_conversations: soba::proxy::server::DEFAULT_MAX_CONVERSATIONS,
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
        script,
        log,
    }
}

impl Env {
    async fn post(&self, body: &Value) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("http://{}/v1/responses", self.proxy))
            .header("authorization", format!("Bearer {KEY}"))
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// The agent's requests as the upstream got them (not SOBA's summarization requests).
    fn requests(&self) -> Vec<Recorded> {
        self.upstream
            .requests()
            .into_iter()
            .filter(|r| !is_summary(&r.body))
            .collect()
    }

    fn has_logged(&self, needle: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(needle))
    }

    /// Whether a log line holds `needle` within 10 s: a request's line is written once its
    /// reply has been sent, which may be just after the client read it.
    async fn logged(&self, needle: &str) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if self.has_logged(needle) {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    fn sessions(&self) -> Vec<soba_core::session::Session> {
        let dir = Paths::under(&self.base.path().join("soba")).sessions_dir(&self.workspace);
        std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                    .map(|p| soba_core::session::log::read_session(&p).unwrap().0)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The session once the last reply is recorded (a streamed reply is recorded when its
    /// stream has ended, which may be just after the client read the last byte).
    async fn session_with_replies(&self, replies: usize) -> soba_core::session::Session {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let sessions = self.sessions();
            assert_eq!(sessions.len(), 1, "one conversation, one session");
            let session = sessions.into_iter().next().unwrap();
            let with_usage = session
                .entries()
                .iter()
                .filter_map(|e| e.as_message())
                .filter(|m| m.usage.is_some())
                .count();
            if with_usage >= replies || std::time::Instant::now() > deadline {
                return session;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// The output items of an answer, whole or streamed.
async fn output_items(r: reqwest::Response) -> (Option<String>, Vec<Value>) {
    let streamed = r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream");
    let text = r.text().await.unwrap();
    if !streamed {
        let v: Value = serde_json::from_str(&text).unwrap();
        return (
            v["id"].as_str().map(str::to_string),
            v["output"].as_array().unwrap().clone(),
        );
    }
    let mut items = Vec::new();
    let mut id = None;
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        let e: Value = serde_json::from_str(data).unwrap();
        match e["type"].as_str() {
            Some("response.output_item.done") => items.push(e["item"].clone()),
            Some("response.completed") => id = e["response"]["id"].as_str().map(str::to_string),
            _ => {}
        }
    }
    (id, items)
}

/// An output item as Codex puts it back into its next request: without the provider's `id`
/// and `status`, message parts reduced to their text.
fn as_codex_resends(item: &Value) -> Value {
    let mut i = item.clone();
    let o = i.as_object_mut().unwrap();
    o.remove("id");
    if item["type"] != "custom_tool_call" {
        o.remove("status");
    }
    if item["type"] == "message" {
        o["content"] = json!([{"type": "output_text", "text": item["content"][0]["text"]}]);
    }
    i
}

/// About `tokens` tokens of distinct prose.
fn filler(turn: usize, tokens: usize) -> String {
    (0..tokens / 6)
        .map(|i| format!("step{turn}x{i} checks module "))
        .collect()
}

fn user(text: &str) -> Value {
    json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
}

/// Tokens of the text the `input` items carry: a lower bound of what the provider counts.
fn input_tokens(body: &Value) -> u64 {
    let k = TokenizerKind::O200kBase;
    let mut t = 0;
    for item in body["input"].as_array().unwrap() {
        for part in item["content"].as_array().into_iter().flatten() {
            t += k.count(part["text"].as_str().unwrap_or(""));
        }
        for s in ["output", "arguments"] {
            t += k.count(item[s].as_str().unwrap_or(""));
        }
    }
    t
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

/// The fields of Codex's requests besides `input`.
fn codex_request(input: &[Value], stream: bool) -> Value {
    json!({
        "model": "gpt-5-codex",
        "instructions": "You are Codex, based on GPT-5. You are running as a coding agent in the Codex CLI.",
        "input": input,
        "tools": [{"type": "function", "name": "shell", "description": "Runs a shell command",
                   "strict": false, "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}, "required": ["command"]}}],
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": false,
        "stream": stream,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "019f03e3-3ddb-72c0-93d8-59a737f12c3b",
    })
}

/// A Codex-shaped conversation of 24 turns, every third with a tool round.
async fn codex_conversation(stream: bool) {
    let env = start(config(false)).await;
    let hard = hard_limit();
    let mut input = vec![
        json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions instructions>\nApproval policy is currently never.\n</permissions instructions>"}]}),
        user("<environment_context>\n  <cwd>/home/dev/project</cwd>\n  <shell>bash</shell>\n</environment_context>"),
    ];
    // Every body the agent sent, in order, for the byte-for-byte checks.
    let mut sent: Vec<Value> = Vec::new();
    for turn in 0..24 {
        input.push(user(&filler(turn, 700)));
        if turn % 3 == 1 {
            env.script.lock().unwrap().call = Some(format!("call_{turn}"));
        }
        loop {
            let body = codex_request(&input, stream);
            let r = env.post(&body).await;
            assert_eq!(
                r.status(),
                200,
                "turn {turn}: {:?}",
                env.log.lock().unwrap()
            );
            sent.push(body);
            let (_, items) = output_items(r).await;
            input.extend(items.iter().map(as_codex_resends));
            let Some(call) = items.iter().find(|i| i["type"] == "function_call") else {
                break;
            };
            input.push(json!({"type": "function_call_output", "call_id": call["call_id"], "output": filler(turn, 400)}));
        }
    }
    let requests = env.requests();
    assert_eq!(requests.len(), sent.len());
    let mut reasoning_checked = 0;
    for (i, (got, agent)) in requests.iter().zip(&sent).enumerate() {
        let t = input_tokens(&got.body);
        assert!(
            t <= hard,
            "request {i} carried {t} tokens, over the hard limit {hard}"
        );
        assert_eq!(got.path, "/v1/responses");
        assert_eq!(
            got.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
        // Everything but the input goes upstream as the agent sent it.
        for (k, v) in agent.as_object().unwrap() {
            if k != "input" {
                assert_eq!(&got.body[k], v, "request {i}: `{k}`");
            }
        }
        // The developer message first, as sent.
        assert_eq!(got.body["input"][0], agent["input"][0]);
        // Every reasoning item upstream is one the agent sent, byte for byte.
        let agent_items: Vec<String> = agent["input"]
            .as_array()
            .unwrap()
            .iter()
            .map(Value::to_string)
            .collect();
        let got_input = got.body["input"].as_array().unwrap();
        for item in got_input.iter().filter(|i| i["type"] == "reasoning") {
            let text = item.to_string();
            assert!(agent_items.contains(&text), "request {i}: {text:.120}");
            assert!(got.raw.contains(&text), "request {i}: not byte for byte");
            reasoning_checked += 1;
        }
        // Every result follows its call.
        for (j, item) in got_input.iter().enumerate() {
            if item["type"] == "function_call_output" {
                assert!(
                    got_input[..j]
                        .iter()
                        .any(|c| c["type"] == "function_call" && c["call_id"] == item["call_id"]),
                    "request {i}: result {} without its call",
                    item["call_id"]
                );
            }
        }
    }
    assert!(reasoning_checked > sent.len(), "reasoning went upstream");
    let last = &requests.last().unwrap().body;
    let capsule = last["input"][1]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(
        capsule.contains("Context Capsule"),
        "the history was replaced by a capsule: {capsule:.200}"
    );
    assert_eq!(last["input"][1]["role"], "user");
    let (kept, history) = (
        last["input"].as_array().unwrap().len(),
        sent.last().unwrap()["input"].as_array().unwrap().len(),
    );
    assert!(kept < history, "{kept} items went upstream for {history}");
    assert!(
        env.logged("compaction completed").await,
        "{:?}",
        env.log.lock().unwrap()
    );
    // One session; each user message was appended once, and each reply with its usage.
    let session = env.session_with_replies(sent.len()).await;
    let users = session
        .entries()
        .iter()
        .filter_map(|e| e.as_message())
        .filter(|m| m.role == soba_core::session::entry::Role::User)
        .count();
    assert_eq!(users, 25, "every user message appended exactly once");
    let measured = session
        .entries()
        .iter()
        .filter_map(|e| e.as_message())
        .filter(|m| m.usage.is_some_and(|u| u.output == 12))
        .count();
    assert_eq!(
        measured,
        sent.len(),
        "each reply was recorded with its usage"
    );
    // Each output item was recorded once and matched when the agent resent it: a resent item
    // that did not match would be appended again.
    let replies = session
        .entries()
        .iter()
        .filter_map(|e| e.as_message())
        .filter(|m| m.role == soba_core::session::entry::Role::Assistant)
        .count();
    let tool_rounds = sent.len() - 24;
    assert_eq!(replies, 2 * sent.len() + tool_rounds);
    eprintln!(
        "responses ({}): {} requests, last sent {kept} of {history} items, {} of {} tokens",
        if stream { "streamed" } else { "whole" },
        sent.len(),
        input_tokens(last),
        input_tokens(sent.last().unwrap()),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_codex_conversation_is_compacted_under_the_hard_limit_with_reasoning_byte_identical(
) {
    codex_conversation(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_responses_conversation_is_compacted_under_the_hard_limit() {
    codex_conversation(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conversations_upstream_writes_the_capsule_through_the_responses_api() {
    let env = start(config(true)).await;
    let mut input = Vec::new();
    for turn in 0..30 {
        input.push(user(&filler(turn, 700)));
        let r = env.post(&codex_request(&input, true)).await;
        assert_eq!(r.status(), 200, "turn {turn}");
        let (_, items) = output_items(r).await;
        input.extend(items.iter().map(as_codex_resends));
        if env.has_logged("compaction completed") {
            break;
        }
    }
    let summaries: Vec<Recorded> = env
        .upstream
        .requests()
        .into_iter()
        .filter(|r| is_summary(&r.body))
        .collect();
    assert!(!summaries.is_empty(), "{:?}", env.log.lock().unwrap());
    for s in &summaries {
        assert_eq!(s.path, "/v1/responses");
        assert_eq!(
            s.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
        assert_eq!(s.body["model"], "gpt-5-codex");
        assert_eq!(s.body["store"], false);
    }
    assert!(
        env.logged(", model)").await,
        "{:?}",
        env.log.lock().unwrap()
    );
    let session = env.session_with_replies(1).await;
    let capsule = session
        .entries()
        .iter()
        .filter_map(|e| e.as_capsule())
        .next_back()
        .expect("a capsule");
    assert_eq!(
        capsule.quality,
        soba_core::session::capsule::model::Quality::Model
    );
    assert_eq!(capsule.state.goal, "Walk the repository module by module");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_previous_response_id_request_goes_upstream_as_sent_and_is_recorded_in_its_conversation()
{
    let env = start(config(false)).await;
    let first = json!({"model": "gpt-5", "input": "list the modules", "store": true});
    let r = env.post(&first).await;
    let (id, _) = output_items(r).await;
    let id = id.unwrap();
    assert_eq!(id, "resp_0");

    // The SDK way: only what follows, and the id of the response it follows.
    let follow = json!({"model": "gpt-5", "previous_response_id": id, "store": true, "stream": true,
                        "input": [{"role": "user", "content": "and the tests?"}]});
    let r = env.post(&follow).await;
    assert_eq!(r.status(), 200);
    let (second, _) = output_items(r).await;
    let got = &env.requests()[1];
    assert_eq!(got.body, follow, "sent upstream as it came");
    assert!(
        env.logged("previous_response_id: the provider holds the history; recorded, not compacted")
            .await,
        "{:?}",
        env.log.lock().unwrap()
    );

    // Recorded after the response it continues, in the same session.
    let session = env.session_with_replies(2).await;
    let texts: Vec<String> = session
        .entries()
        .iter()
        .filter_map(|e| e.as_message())
        .map(|m| soba_core::session::entry::blocks_text(&m.content))
        .filter(|t| !t.is_empty())
        .collect();
    assert_eq!(
        texts,
        [
            "list the modules",
            "answer number 0",
            "and the tests?",
            "answer number 1"
        ]
    );

    // Continuing the second response works the same; a response this proxy never forwarded
    // passes through unrecorded.
    let r = env
        .post(&json!({"model": "gpt-5", "previous_response_id": second.unwrap(), "input": "more"}))
        .await;
    assert_eq!(r.status(), 200);
    let stranger =
        json!({"model": "gpt-5", "previous_response_id": "resp_elsewhere", "input": "hi"});
    let r = env.post(&stranger).await;
    assert_eq!(r.status(), 200);
    assert_eq!(env.requests()[3].body, stranger);
    assert!(
        env.logged("which this proxy did not forward: passed through, not recorded")
            .await
    );
    let session = env.session_with_replies(3).await;
    let users = session
        .entries()
        .iter()
        .filter_map(|e| e.as_message())
        .filter(|m| m.role == soba_core::session::entry::Role::User)
        .count();
    assert_eq!(users, 3, "the stranger's input is in no session");

    // A provider-side conversation is the provider's too.
    let stored = json!({"model": "gpt-5", "conversation": "conv_68af", "input": "hi"});
    let r = env.post(&stored).await;
    assert_eq!(r.status(), 200);
    assert_eq!(env.requests()[4].body, stored);

    // The agent sends its whole history again, changed: the second response's history is
    // replaced, so a request continuing it is passed through and recorded nowhere.
    let r = env
        .post(&json!({"model": "gpt-5", "input": [
            {"role": "user", "content": "list the modules"},
            {"role": "assistant", "content": "answer number 0"},
            {"role": "user", "content": "and the docs?"},
        ]}))
        .await;
    assert_eq!(r.status(), 200);
    let r = env
        .post(&json!({"model": "gpt-5", "previous_response_id": "resp_1", "input": "x"}))
        .await;
    assert_eq!(r.status(), 200);
    assert!(
        env.logged("names a reply whose history was since replaced")
            .await
    );

    // An upstream error reaches the client as it came.
    let limited = json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}).to_string();
    env.script
        .lock()
        .unwrap()
        .canned
        .push(loopback::json(429, &limited));
    let r = env
        .post(&json!({"model": "gpt-5", "previous_response_id": "resp_5", "input": "y"}))
        .await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.text().await.unwrap(), limited);
    let line = env.log.lock().unwrap().last().cloned().unwrap();
    assert!(
        line.contains("→ 429") && line.contains("recorded, not compacted"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responses_overflow_compacts_and_retries_once() {
    let env = start(config(false)).await;
    let mut input = Vec::new();
    for turn in 0..6 {
        let id = format!("call_{turn}");
        input.push(user(&format!("look at part {turn}")));
        input.push(json!({"type": "function_call", "name": "shell", "arguments": format!("{{\"command\":[\"cat\",\"part{turn}.rs\"]}}"), "call_id": id}));
        input.push(
            json!({"type": "function_call_output", "call_id": id, "output": filler(turn, 800)}),
        );
        input.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": format!("done with {turn}")}]}));
    }
    input.push(user("and now?"));
    let overflow = json!({"error": {"message": "Your input exceeds the context window of this model. Please adjust your input and try again.", "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}}).to_string();
    env.script
        .lock()
        .unwrap()
        .canned
        .push(loopback::json(400, &overflow));
    let r = env.post(&codex_request(&input, false)).await;
    assert_eq!(r.status(), 200, "{:?}", env.log.lock().unwrap());
    let requests = env.requests();
    assert_eq!(requests.len(), 2, "one retry");
    assert!(input_tokens(&requests[1].body) < input_tokens(&requests[0].body));
    let capsule = requests[1].body["input"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(capsule.contains("Context Capsule"), "{capsule:.200}");
    assert!(env.logged("retried after overflow").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_response_completed_is_not_recorded_and_bad_input_is_refused() {
    let env = start(config(false)).await;
    env.script.lock().unwrap().cut_next_stream = true;
    let r = env
        .post(&json!({"model": "gpt-5", "input": "hi", "stream": true}))
        .await;
    assert_eq!(r.status(), 200);
    let (id, items) = output_items(r).await;
    assert_eq!(
        (id, items.len()),
        (None, 2),
        "the items arrived, the end did not"
    );
    let r = env
        .post(&json!({"model": "gpt-5", "input": "hi", "stream": true}))
        .await;
    let (id, _) = output_items(r).await;
    assert!(id.is_some());
    // Only the complete reply is in the session.
    let session = env.session_with_replies(1).await;
    let replies = session
        .entries()
        .iter()
        .filter_map(|e| e.as_message())
        .filter(|m| m.role == soba_core::session::entry::Role::Assistant)
        .count();
    assert_eq!(
        replies, 2,
        "the reasoning and the message of the completed reply"
    );

    let r = env
        .post(&json!({"model": "gpt-5", "input": [{"content": "no type"}]}))
        .await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["type"], "invalid_request_error");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("soba proxy: input[0]: an item has no `type`"),
        "{message}"
    );
}

/// The response items of a real Codex rollout, as Codex sends them (it never sends the
/// provider's item ids back, nor its own bookkeeping).
fn rollout_items(file: &str) -> Option<Vec<Value>> {
    let path = crate::common::transcripts_dir()?.join("codex").join(file);
    let text = std::fs::read_to_string(path).unwrap();
    Some(
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .take_while(|r| r["type"] != "compacted")
            .filter(|r| r["type"] == "response_item")
            .map(|r| {
                let mut item = r["payload"].clone();
                let o = item.as_object_mut().unwrap();
                o.remove("id");
                o.remove("internal_chat_message_metadata_passthrough");
                item
            })
            .collect(),
    )
}

#[test]
fn every_item_of_real_codex_rollouts_reads_and_renders_back_to_the_same_entries() {
    use soba::wire::message::Outgoing;
    use soba::wire::responses::{item_entries, render_items};
    for file in [
        "agentv-two-compactions.jsonl",
        "agentcmd-rollout-v0.40.jsonl",
    ] {
        let Some(items) = rollout_items(file) else {
            return;
        };
        assert!(items.len() > 170, "{file}: {}", items.len());
        for item in &items {
            let entries = item_entries(item).unwrap_or_else(|e| panic!("{file}: {e}: {item}"));
            // Rendered from the log (as when the model input does not keep it whole), the item
            // reads as the same entries, encrypted reasoning included.
            let messages: Vec<soba_core::session::view::ModelMessage> = entries
                .iter()
                .map(|e| {
                    let role = if e["type"] == "tool_result" {
                        "tool"
                    } else {
                        e["role"].as_str().unwrap()
                    };
                    serde_json::from_value(
                        json!({"role": role, "content": e["content"], "toolCallId": e["callId"]}),
                    )
                    .unwrap()
                })
                .collect();
            let mut outgoing: Vec<Outgoing> = Vec::new();
            if item["type"] == "custom_tool_call_output" {
                // Its call went out before it, as in the conversation.
                outgoing.push(Outgoing::Raw(json!({"type": "custom_tool_call", "call_id": item["call_id"], "name": "apply_patch", "input": ""})));
            }
            outgoing.extend(messages.into_iter().map(Outgoing::Rendered));
            let rendered = render_items(outgoing);
            let back = item_entries(rendered.last().unwrap()).unwrap();
            assert_eq!(back, entries, "{file}: {item:.300}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_codex_history_is_compacted_to_fit_in_one_request() {
    for (file, last_user) in [
        ("agentv-two-compactions.jsonl", 169),
        ("agentcmd-rollout-v0.40.jsonl", 174),
    ] {
        let Some(items) = rollout_items(file) else {
            return;
        };
        let env = start(config(false)).await;
        let input = &items[..=last_user];
        assert_eq!(input.last().unwrap()["role"], "user", "{file}");
        let body = codex_request(input, true);
        let r = env.post(&body).await;
        assert_eq!(r.status(), 200, "{file}: {:?}", env.log.lock().unwrap());
        output_items(r).await;
        let got = &env.requests()[0];
        let hard = hard_limit();
        let t = input_tokens(&got.body);
        assert!(t <= hard, "{file}: {t} tokens over the hard limit {hard}");
        let sent = got.body["input"].as_array().unwrap();
        let capsule = sent
            .iter()
            .filter_map(|i| i["content"][0]["text"].as_str())
            .find(|t| t.contains("Context Capsule"));
        assert!(
            capsule.is_some(),
            "{file}: no capsule in {} items",
            sent.len()
        );
        let agent: Vec<String> = input.iter().map(Value::to_string).collect();
        for item in sent.iter().filter(|i| i["type"] == "reasoning") {
            assert!(agent.contains(&item.to_string()), "{file}: {item:.200}");
        }
        assert_eq!(sent.last().unwrap(), input.last().unwrap(), "{file}");
        eprintln!(
            "{file}: {} items, {} tokens of text in; {} items, {t} tokens sent",
            input.len(),
            input_tokens(&body),
            sent.len()
        );
    }
}

/// A request to `/v1/responses` with `X-Soba-Session: name`.
async fn post_named(env: &Env, name: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{}/v1/responses", env.proxy))
        .header("authorization", format!("Bearer {KEY}"))
        .header("x-soba-session", name)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// The texts of a session's messages, in order.
fn session_texts(session: &soba_core::session::Session) -> Vec<String> {
    session
        .entries()
        .iter()
        .filter_map(|e| e.as_message())
        .map(|m| soba_core::session::entry::blocks_text(&m.content))
        .filter(|t| !t.is_empty())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_conversations_are_told_apart_by_their_replies_and_the_session_header_wins() {
    let env = start(config(false)).await;
    let first = json!({"model": "gpt-5", "input": [user("list the modules")], "store": true});
    // Two conversations that open alike: one named, one not.
    let (a, _) = output_items(post_named(&env, "task-a", &first).await).await;
    let (b, b_items) = output_items(env.post(&first).await).await;
    let (a, b) = (a.unwrap(), b.unwrap());
    // The header wins over previous_response_id: task-a never had b's response.
    let cross = json!({"model": "gpt-5", "previous_response_id": b, "input": "into a?"});
    let r = post_named(&env, "task-a", &cross).await;
    assert_eq!(r.status(), 200);
    assert!(!r.text().await.unwrap().is_empty());
    assert!(
        env.logged("or that this conversation never recorded: passed through, not recorded")
            .await
    );
    // task-a continues its own response; the header never goes upstream.
    let own = json!({"model": "gpt-5", "previous_response_id": a, "input": "and the tests?", "stream": true});
    let (_, _) = output_items(post_named(&env, "task-a", &own).await).await;
    assert!(env
        .requests()
        .iter()
        .all(|r| r.headers.iter().all(|(n, _)| n != "x-soba-session")));
    // The unnamed one resends its whole history, Codex's way: the items it received tell it.
    let mut input = vec![user("list the modules")];
    input.extend(b_items.iter().map(as_codex_resends));
    input.push(user("and the docs?"));
    let r = env.post(&codex_request(&input, false)).await;
    assert_eq!(r.status(), 200, "{:?}", env.log.lock().unwrap());
    let _ = r.text().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut texts: Vec<Vec<String>> = loop {
        let t: Vec<Vec<String>> = env.sessions().iter().map(session_texts).collect();
        if t.iter().map(Vec::len).sum::<usize>() >= 8 || std::time::Instant::now() > deadline {
            break t;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    texts.sort_by_key(|t| t[1].clone());
    assert_eq!(texts.len(), 2, "two conversations, two sessions: {texts:?}");
    assert_eq!(
        texts[0][..3],
        ["list the modules", "answer number 0", "and the tests?"]
    );
    assert_eq!(
        texts[1][..3],
        ["list the modules", "answer number 1", "and the docs?"]
    );
    assert!(texts.iter().flatten().all(|t| t != "into a?"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_over_the_budget_gets_the_responses_apis_own_overflow_error() {
    let env = start(config(false)).await;
    let r = env
        .post(&json!({"model": "gpt-5", "input": filler(0, 24000)}))
        .await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["param"], "input");
    let message = body["error"]["message"].as_str().unwrap();
    let expected = format!(
        "This model's maximum context length is {} tokens. However, your input resulted in ",
        hard_limit()
    );
    assert!(message.starts_with(&expected), "{message}");
    assert!(env.requests().is_empty(), "nothing went upstream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_response_stream_is_passed_on_logged_and_not_recorded() {
    let env = start(config(false)).await;
    let body = json!({"model": "gpt-5"});
    let mut events = stream_of(&response(0, &body, None), false);
    events.push(event(
        json!({"type": "response.failed", "sequence_number": 99, "response": {
        "id": "resp_0", "object": "response", "status": "failed", "output": [],
        "error": {"code": "server_error", "message": "The model failed."}}}),
    ));
    let sent: String = events.concat();
    env.script
        .lock()
        .unwrap()
        .canned
        .push(loopback::sse(&events));
    let r = env
        .post(&json!({"model": "gpt-5", "input": "hi", "stream": true}))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), sent, "passed on byte for byte");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let line = loop {
        let found = env
            .log
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains("POST /v1/responses"))
            .cloned();
        match found {
            Some(l) => break l,
            None if std::time::Instant::now() > deadline => panic!("no request line"),
            None => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    };
    assert!(
        line.contains(", stream malformed after ")
            && line.contains(": the upstream sent an error event (response.failed: server_error); reply not recorded (session "),
        "{line}"
    );
    let sessions = env.sessions();
    assert_eq!(sessions.len(), 1);
    assert_eq!(session_texts(&sessions[0]), ["hi"], "no reply recorded");
    // The response's id was known from the first event, but no reply was recorded: a request
    // continuing it is passed through.
    let r = env
        .post(&json!({"model": "gpt-5", "previous_response_id": "resp_0", "input": "again"}))
        .await;
    assert_eq!(r.status(), 200);
    assert!(env.logged("passed through, not recorded").await);
}
