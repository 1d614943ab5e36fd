//! Model summarization against loopback servers that speak the providers' real wire formats:
//! streaming success, timeouts, every failure path, cancellation, chunking, the circuit
//! breaker, and the API key never leaking.

use crate::loopback;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loopback::{head, json, sse, Loopback, Recorded, Step};
use serde_json::json;
use soba::summarize::breaker::BreakerState;
use soba::summarize::client::ModelSummarizer;
use soba::summarize::summarizer::Summarizer;
use soba::summarize::summarizer::SummaryRequest;
use soba::summarize::{from_config, summarize_with_fallback, Summarized};
use soba_core::config::{Provider, SummarizerConfig};
use soba_core::session::capsule::model::Artifacts;
use soba_core::session::capsule::model::CapsuleState;
use soba_core::session::capsule::model::FileArtifact;
use soba_core::session::entry::ContentBlock;
use soba_core::session::view::ModelMessage;
use soba_core::tokens::{TokenizerKind, MESSAGE_OVERHEAD_TOKENS};
use tokio_util::sync::CancellationToken;

const KEY: &str = "sk-test-SECRET123";

fn capsule_json(goal: &str) -> String {
    json!({
        "goal": goal,
        "constraints": ["keep the public API"],
        "completed": ["parser written"],
        "active": ["streaming"],
        "pending": [],
        "decisions": [{"decision": "hand-rolled SSE", "rationale": "small and testable"}],
        "blockers": [],
        "nextSteps": ["wire into the engine"]
    })
    .to_string()
}

fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(n);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

fn openai_events(reply: &str) -> Vec<String> {
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        let v = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {v}\n\n")
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        json!(null),
    )];
    events.extend(
        pieces(reply, 8)
            .into_iter()
            .map(|p| chunk(json!({"content": p}), json!(null))),
    );
    events.push(chunk(json!({}), json!("stop")));
    events.push(format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140}})
    ));
    events.push("data: [DONE]\n\n".into());
    events
}

fn anthropic_events(reply: &str) -> Vec<String> {
    let ev = |name: &str, data: serde_json::Value| format!("event: {name}\r\ndata: {data}\r\n\r\n");
    let mut events = vec![
        ev(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "content": [], "model": "claude-haiku-4-5", "stop_reason": null,
            "stop_sequence": null, "usage": {"input_tokens": 25, "output_tokens": 1}}}),
        ),
        ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        ev("ping", json!({"type": "ping"})),
    ];
    events.extend(pieces(reply, 8).into_iter().map(|p| {
        ev("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}))
    }));
    events.push(ev(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push(ev("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 40}})));
    events.push(ev("message_stop", json!({"type": "message_stop"})));
    events
}

fn config(provider: Provider, server: &Loopback) -> SummarizerConfig {
    let base_url = match provider {
        Provider::Openai => format!("{}/v1", server.base),
        _ => server.base.clone(),
    };
    SummarizerConfig {
        provider,
        base_url: Some(base_url),
        model: Some(match provider {
            Provider::Anthropic => "claude-haiku-4-5".into(),
            _ => "gpt-4o-mini".into(),
        }),
        api_key_env: Some("SOBA_TEST_SUMMARIZER_KEY".into()),
        context_window: Some(16_000),
        max_output_tokens: Some(1_000),
        cooldown_ms: None,
        redact_input: None,
    }
}

fn summarizer(cfg: &SummarizerConfig) -> ModelSummarizer {
    ModelSummarizer::new(cfg, |_| Some(KEY.to_string())).expect("valid config")
}

fn message(role: &str, text: &str) -> ModelMessage {
    ModelMessage {
        role: role.into(),
        content: vec![ContentBlock::Text {
            text: text.into(),
            extra: Default::default(),
        }],
        tool_call_id: (role == "tool").then(|| "call_1".into()),
        is_error: None,
        entry_id: None,
    }
}

fn request() -> SummaryRequest {
    SummaryRequest {
        previous: None,
        history: vec![
            message("user", "Add streaming to the summarizer."),
            message("assistant", "I will write an SSE parser first."),
            message("tool", "test result: ok. 8 passed"),
        ],
        instructions: Some("Focus on the open questions.".into()),
        artifacts: Artifacts {
            modified_files: vec![FileArtifact {
                path: "src/summarize/sse.rs".into(),
                entry_ids: vec![],
                ..Default::default()
            }],
            ..Artifacts::default()
        },
        follow_up: None,
    }
}

fn local_state() -> CapsuleState {
    CapsuleState {
        goal: "built from the log".into(),
        ..CapsuleState::default()
    }
}

struct Run {
    outcome: Summarized,
    progress: Vec<u8>,
    elapsed: Duration,
    local_called: bool,
}

async fn run_with(
    s: &dyn Summarizer,
    req: &SummaryRequest,
    timeout_ms: u64,
    cancel: CancellationToken,
) -> Run {
    let seen = Mutex::new(Vec::new());
    let sink = |p: u8| seen.lock().unwrap().push(p);
    let local_called = AtomicBool::new(false);
    let started = Instant::now();
    let outcome = summarize_with_fallback(
        Some(s),
        req,
        Duration::from_millis(timeout_ms),
        cancel,
        &sink,
        || {
            local_called.store(true, Ordering::SeqCst);
            local_state()
        },
    )
    .await;
    Run {
        outcome,
        progress: seen.into_inner().unwrap(),
        elapsed: started.elapsed(),
        local_called: local_called.into_inner(),
    }
}

async fn run(s: &dyn Summarizer, timeout_ms: u64) -> Run {
    run_with(s, &request(), timeout_ms, CancellationToken::new()).await
}

fn assert_monotonic_to_100(progress: &[u8]) {
    assert!(
        progress.windows(2).all(|w| w[0] < w[1]),
        "not monotonic: {progress:?}"
    );
    assert_eq!(progress.last(), Some(&100), "{progress:?}");
    assert!(
        progress[..progress.len() - 1].iter().all(|&p| p < 100),
        "{progress:?}"
    );
}

fn degraded_reason(run: &Run) -> &str {
    match &run.outcome {
        Summarized::Degraded { state, reason } => {
            assert_eq!(
                state,
                &local_state(),
                "the fallback is the local capsule, never a partial one"
            );
            assert!(run.local_called);
            reason
        }
        other => panic!("expected a degraded capsule, got {other:?}"),
    }
}

#[tokio::test]
async fn openai_streaming_success() {
    let reply = format!(
        "```json\n{}\n```",
        capsule_json("Stream capsules from OpenAI")
    );
    let server = Loopback::start(move |_, _| sse(&openai_events(&reply))).await;
    let s = summarizer(&config(Provider::Openai, &server));
    let r = run(&s, 2000).await;
    let Summarized::Model(state, _) = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert_eq!(state.goal, "Stream capsules from OpenAI");
    assert_eq!(state.decisions[0].rationale, "small and testable");
    assert!(!r.local_called);
    assert_monotonic_to_100(&r.progress);
    assert!(
        r.progress.len() > 2,
        "progress while streaming: {:?}",
        r.progress
    );

    let req = &server.requests()[0];
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        req.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(req.body["model"], "gpt-4o-mini");
    assert_eq!(req.body["stream"], true);
    assert_eq!(req.body["stream_options"]["include_usage"], true);
    assert_eq!(req.body["max_tokens"], 1000);
    let user = req.body["messages"][1]["content"].as_str().unwrap();
    for needle in [
        "Add streaming",
        "src/summarize/sse.rs",
        "Focus on the open questions",
        "8 passed",
    ] {
        assert!(user.contains(needle), "prompt lacks {needle}");
    }
}

#[tokio::test]
async fn anthropic_streaming_success() {
    let reply = capsule_json("Stream capsules from Anthropic");
    let server = Loopback::start(move |_, _| sse(&anthropic_events(&reply))).await;
    let s = summarizer(&config(Provider::Anthropic, &server));
    assert_eq!(
        s.describe(),
        format!("anthropic claude-haiku-4-5 @ {}", server.base)
    );
    let r = run(&s, 2000).await;
    let Summarized::Model(state, _) = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert_eq!(state.goal, "Stream capsules from Anthropic");
    assert_monotonic_to_100(&r.progress);

    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/messages");
    assert_eq!(req.header("x-api-key"), Some(KEY));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(req.header("authorization"), None);
    assert_eq!(req.body["stream"], true);
    assert!(req.body["system"]
        .as_str()
        .unwrap()
        .contains("Context Capsule"));
}

#[tokio::test]
async fn servers_that_ignore_stream_true_still_work() {
    let openai_body = json!({"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": capsule_json("non-streamed openai")}, "finish_reason": "stop"}]})
    .to_string();
    let server = Loopback::start(move |_, _| json(200, &openai_body)).await;
    let r = run(&summarizer(&config(Provider::Openai, &server)), 2000).await;
    assert!(
        matches!(&r.outcome, Summarized::Model(s, _) if s.goal == "non-streamed openai"),
        "{:?}",
        r.outcome
    );
    assert_monotonic_to_100(&r.progress);

    let anthropic_body = json!({"id": "msg_1", "type": "message", "role": "assistant",
        "content": [{"type": "text", "text": capsule_json("non-streamed anthropic")}], "stop_reason": "end_turn"})
    .to_string();
    let server = Loopback::start(move |_, _| json(200, &anthropic_body)).await;
    let r = run(&summarizer(&config(Provider::Anthropic, &server)), 2000).await;
    assert!(
        matches!(&r.outcome, Summarized::Model(s, _) if s.goal == "non-streamed anthropic"),
        "{:?}",
        r.outcome
    );
}

#[tokio::test]
async fn slow_drip_past_the_timeout_falls_back_and_drops_the_connection() {
    let server = Loopback::start(|_, _| {
        let mut steps = vec![head(200, "text/event-stream", true)];
        for event in openai_events(&capsule_json("too slow")) {
            steps.push(Step::Sleep(Duration::from_millis(100)));
            steps.push(Step::Chunk(event.into_bytes()));
        }
        steps.push(Step::EndChunks);
        steps
    })
    .await;
    let s = summarizer(&config(Provider::Openai, &server));
    let r = run(&s, 300).await;
    let reason = degraded_reason(&r);
    assert!(reason.contains("did not finish within 300 ms"), "{reason}");
    assert!(reason.contains("local capsule was used"), "{reason}");
    assert!(r.elapsed >= Duration::from_millis(300), "{:?}", r.elapsed);
    assert!(
        r.elapsed < Duration::from_millis(300 + 150),
        "fallback not immediate: {:?}",
        r.elapsed
    );
    assert_monotonic_to_100(&r.progress);
    let gave_up = Instant::now();
    let closed = server.client_closed(0, Duration::from_millis(500)).await;
    let closed = closed.expect("the server never saw the connection closed");
    assert!(closed.saturating_duration_since(gave_up) < Duration::from_millis(200));
}

/// Every failure: the local capsule with a reason, never a partial model capsule.
#[tokio::test]
async fn failures_fall_back_with_their_reason() {
    let valid = capsule_json("never used");
    let half: String = valid.chars().take(valid.len() / 2).collect();
    let cases: Vec<(&str, Provider, Vec<Step>, &str)> = vec![
        ("500", Provider::Openai, json(500, r#"{"error":{"message":"upstream exploded","type":"server_error"}}"#), "HTTP 500: server_error: upstream exploded"),
        ("429", Provider::Anthropic, json(429, r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#), "HTTP 429: rate_limit_error: slow down"),
        ("malformed event", Provider::Openai, sse(&["data: {\"choices\": [\n\n".into()]), "stream event is not valid JSON"),
        ("truncated stream", Provider::Openai, {
            let mut steps = vec![head(200, "text/event-stream", false)];
            steps.extend(openai_events(&valid).into_iter().take(4).map(|e| Step::Raw(e.into_bytes())));
            steps.push(Step::Close);
            steps
        }, "stream ended before the reply was complete"),
        ("truncated chunked body", Provider::Anthropic, {
            let mut steps = vec![head(200, "text/event-stream", true)];
            steps.extend(anthropic_events(&valid).into_iter().take(5).map(|e| Step::Chunk(e.into_bytes())));
            steps.push(Step::Raw(b"40\r\nevent: content_block_delta".to_vec()));
            steps.push(Step::Close);
            steps
        }, "could not talk to the summarization model"),
        ("connection reset", Provider::Openai, vec![Step::Reset], "could not talk to the summarization model"),
        ("reset mid-stream", Provider::Openai, {
            let mut steps = vec![head(200, "text/event-stream", true)];
            steps.extend(openai_events(&valid).into_iter().take(3).map(|e| Step::Chunk(e.into_bytes())));
            steps.push(Step::Sleep(Duration::from_millis(20)));
            steps.push(Step::Reset);
            steps
        }, "could not talk to the summarization model"),
        ("invalid capsule JSON", Provider::Openai, sse(&openai_events(r#"{"goal": "", "mood": "great"}"#)), "not a capsule state"),
        ("reply without JSON", Provider::Anthropic, sse(&anthropic_events("Sorry, I cannot help with that.")), "no complete JSON object"),
        ("half a JSON reply", Provider::Openai, sse(&openai_events(&half)), "no complete JSON object"),
        ("reply cut at max_tokens", Provider::Openai, {
            let mut events = openai_events(&half);
            let n = events.len();
            events[n - 3] = events[n - 3].replace("\"stop\"", "\"length\"");
            sse(&events)
        }, "cut off at summarizer.maxOutputTokens = 1000; raise it"),
        ("error event", Provider::Anthropic, sse(&[
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n".into(),
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n".into(),
        ]), "reported an error: overloaded_error: Overloaded"),
    ];
    for (name, provider, steps, want) in cases {
        let server = Loopback::start(move |_, _| steps.clone()).await;
        let s = summarizer(&config(provider, &server));
        let r = run(&s, 2000).await;
        let reason = degraded_reason(&r);
        assert!(reason.contains(want), "{name}: {reason}");
        assert_monotonic_to_100(&r.progress);
    }
}

#[tokio::test]
async fn cancellation_mid_stream_appends_nothing_even_when_the_server_answers() {
    let answered = Arc::new(AtomicBool::new(false));
    let flag = answered.clone();
    let server = Loopback::start(move |_, _| {
        flag.store(true, Ordering::SeqCst);
        let events = openai_events(&capsule_json("late answer"));
        let mut steps = vec![
            head(200, "text/event-stream", true),
            Step::Chunk(events[0].clone().into_bytes()),
        ];
        steps.push(Step::Sleep(Duration::from_millis(200)));
        steps.extend(
            events[1..]
                .iter()
                .map(|e| Step::Chunk(e.clone().into_bytes())),
        );
        steps.push(Step::EndChunks);
        steps
    })
    .await;
    let s = summarizer(&config(Provider::Openai, &server));
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(80)).await;
        trigger.cancel();
    });
    let r = run_with(&s, &request(), 2000, cancel).await;
    assert_eq!(r.outcome, Summarized::Cancelled);
    assert!(!r.local_called, "cancellation builds no capsule at all");
    assert!(
        r.elapsed < Duration::from_millis(500),
        "request not aborted at once: {:?}",
        r.elapsed
    );
    assert!(answered.load(Ordering::SeqCst));
    assert!(
        server
            .client_closed(0, Duration::from_millis(500))
            .await
            .is_some(),
        "request not aborted"
    );
    assert!(
        !r.progress.contains(&100),
        "a cancelled run never reports completion"
    );
}

#[tokio::test]
async fn a_history_larger_than_the_window_is_chunked_and_every_request_fits() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let server = Loopback::start(move |i, _| {
        counter.fetch_add(1, Ordering::SeqCst);
        sse(&openai_events(&capsule_json(&format!(
            "state after part {i}"
        ))))
    })
    .await;
    let mut cfg = config(Provider::Openai, &server);
    // Room for the prompt, the facts and the latest exchange (about 2000 tokens) and a few
    // messages of history.
    cfg.context_window = Some(4_000);
    cfg.max_output_tokens = Some(500);
    let s = summarizer(&cfg);
    let words = |i: usize| {
        (0..60)
            .map(|w| format!("m{i}w{w}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut req = request();
    req.history = (0..24)
        .map(|i| message(if i % 2 == 0 { "user" } else { "assistant" }, &words(i)))
        .collect();
    // One tool output far larger than the whole window.
    req.history
        .insert(5, message("tool", &"error: line failed\n".repeat(4000)));
    let r = run_with(&s, &req, 5000, CancellationToken::new()).await;
    let Summarized::Model(state, _) = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert_monotonic_to_100(&r.progress);

    let requests = server.requests();
    assert!(
        (3..=12).contains(&requests.len()),
        "expected several chunks, got {}",
        requests.len()
    );
    assert_eq!(
        state.goal,
        format!("state after part {}", requests.len() - 1)
    );
    let window = 4_000 - 500;
    let mut next_message = 0;
    for (i, req) in requests.iter().enumerate() {
        let messages = req.body["messages"].as_array().unwrap();
        let tokens: u64 = messages
            .iter()
            .map(|m| {
                MESSAGE_OVERHEAD_TOKENS
                    + TokenizerKind::O200kBase.count(m["content"].as_str().unwrap())
            })
            .sum();
        assert!(
            tokens <= window,
            "request {i} has {tokens} tokens, window {window}"
        );
        let user = messages[1]["content"].as_str().unwrap();
        if i > 0 {
            assert!(
                user.contains(&format!("state after part {}", i - 1)),
                "request {i} does not roll the previous state forward"
            );
        }
        // Oldest first, nothing skipped.
        while next_message < 24 && user.contains(&format!("m{next_message}w0 ")) {
            next_message += 1;
        }
    }
    assert_eq!(next_message, 24, "every message was summarized, in order");
}

#[tokio::test]
async fn the_breaker_opens_after_three_failures_and_closes_after_the_cooldown() {
    let server = Loopback::start(|i, _| {
        if i < 3 {
            json(500, r#"{"error":{"message":"down"}}"#)
        } else {
            sse(&openai_events(&capsule_json("back up")))
        }
    })
    .await;
    let mut cfg = config(Provider::Openai, &server);
    cfg.cooldown_ms = Some(400);
    let s = summarizer(&cfg);
    let breaker = s.breaker().unwrap();
    for n in 0..3 {
        assert_eq!(
            breaker.state(Instant::now()),
            BreakerState::Closed {
                consecutive_failures: n
            }
        );
        degraded_reason(&run(&s, 1000).await);
    }
    assert!(
        matches!(breaker.state(Instant::now()), BreakerState::Open { retry_in_ms } if retry_in_ms <= 400)
    );
    let r = run(&s, 1000).await;
    assert!(degraded_reason(&r).contains("paused after 3 consecutive failures"));
    assert_eq!(
        server.requests().len(),
        3,
        "no request while the breaker is open"
    );

    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(breaker.state(Instant::now()), BreakerState::HalfOpen);
    let r = run(&s, 1000).await;
    assert!(
        matches!(&r.outcome, Summarized::Model(s, _) if s.goal == "back up"),
        "{:?}",
        r.outcome
    );
    assert_eq!(server.requests().len(), 4);
    assert_eq!(
        breaker.state(Instant::now()),
        BreakerState::Closed {
            consecutive_failures: 0
        }
    );
}

#[tokio::test]
async fn the_api_key_appears_in_no_output_and_no_file() {
    // A server that quotes the key back in its error, as some providers do.
    let server = Loopback::start(|i, req| {
        if i == 0 {
            let key = req
                .header("authorization")
                .unwrap_or_default()
                .trim_start_matches("Bearer ")
                .to_string();
            json(
                401,
                &json!({"error": {"message": format!("Incorrect API key provided: {key}")}})
                    .to_string(),
            )
        } else {
            sse(&openai_events(&capsule_json("all good")))
        }
    })
    .await;
    let var = "SOBA_TEST_KEY_NEVER_LEAKS";
    // No other test touches this variable.
    std::env::set_var(var, KEY);
    let mut cfg = config(Provider::Openai, &server);
    cfg.api_key_env = Some(var.into());
    let s = from_config(&cfg)
        .expect("config")
        .expect("a model summarizer");

    let failed = run(s.as_ref(), 1000).await;
    assert!(degraded_reason(&failed).contains("Incorrect API key provided: [redacted]"));
    let succeeded = run(s.as_ref(), 1000).await;
    assert!(matches!(succeeded.outcome, Summarized::Model(..)));
    assert_eq!(
        server.requests()[1].header("authorization"),
        Some(format!("Bearer {KEY}").as_str()),
        "the key was really used"
    );

    let dir = tempfile::tempdir().unwrap();
    let outputs = [
        (
            "failed.txt",
            format!("{:?}\n{:#?}", failed.outcome, failed.outcome),
        ),
        ("succeeded.txt", format!("{:?}", succeeded.outcome)),
        ("describe.txt", s.describe()),
        (
            "breaker.json",
            serde_json::to_string(&s.breaker().unwrap().state(Instant::now())).unwrap(),
        ),
        ("config.json", serde_json::to_string(&cfg).unwrap()),
    ];
    for (name, text) in &outputs {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let mut scanned = 0;
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.contains(KEY) && !text.contains("SECRET123"),
            "{} holds the key",
            path.display()
        );
        scanned += 1;
    }
    assert_eq!(scanned, outputs.len());
    std::env::remove_var(var);
}

#[tokio::test]
async fn a_missing_key_variable_is_named_in_the_error() {
    let server = Loopback::start(|_, _: &Recorded| Vec::new()).await;
    let mut cfg = config(Provider::Anthropic, &server);
    cfg.api_key_env = Some("SOBA_TEST_KEY_THAT_IS_NOT_SET".into());
    let err = from_config(&cfg).err().expect("missing key is an error");
    assert_eq!(
        err.to_string(),
        "the environment variable `SOBA_TEST_KEY_THAT_IS_NOT_SET` named by summarizer.apiKeyEnv is not set or empty; export it, or change summarizer.apiKeyEnv"
    );
    assert!(
        from_config(&SummarizerConfig::default()).unwrap().is_none(),
        "local provider needs no model"
    );
}

#[test]
fn the_summarizer_block_of_a_config_file_resolves() {
    use soba_core::config::{Config, ConfigFile, Overrides};
    let file = ConfigFile::parse(
        "config.json",
        r#"{"summarizer":{"provider":"openai","baseUrl":"http://127.0.0.1:11434/v1","model":"qwen2.5:7b",
            "contextWindow":32768,"maxOutputTokens":2048,"cooldownMs":30000}}"#,
    )
    .unwrap();
    let config = Config::resolve(&[file], None, &Overrides::default()).unwrap();
    assert_eq!(config.summarizer.cooldown_ms, Some(30_000));
    let s = from_config(&config.summarizer).unwrap().unwrap();
    assert_eq!(
        s.describe(),
        "openai qwen2.5:7b @ http://127.0.0.1:11434/v1"
    );
    let err = ConfigFile::parse("config.json", r#"{"summarizer":{"cooldown":1}}"#).unwrap_err();
    assert!(
        err.to_string()
            .contains("did you mean `summarizer.cooldownMs`"),
        "{err}"
    );
}

/// A session log on disk with enough history for an explicit compaction: turns that read and
/// edit files, so the capsule has facts the model never mentions.
mod engine {
    use super::*;
    use soba_core::config::{Config, ConfigFile, Durability, Overrides};
    use soba_core::session::entry::*;
    use soba_core::session::log::SessionLog;
    use soba_core::tool_mapping::ToolMapping;

    pub struct Session {
        pub dir: tempfile::TempDir,
        pub path: std::path::PathBuf,
        pub log: SessionLog,
        pub config: Config,
        pub mapping: ToolMapping,
        n: usize,
    }

    impl Session {
        pub fn new() -> Session {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.jsonl");
            let header = SessionHeader {
                kind: HeaderTag::Session,
                version: LOG_FORMAT_VERSION,
                id: "s".into(),
                workspace: "/ws".into(),
                created_at: soba_core::util::now_rfc3339(),
                model: None,
                source: None,
            };
            let log = SessionLog::create(&path, header, Durability::Flush).unwrap();
            let file = ConfigFile::parse(
                "t",
                r#"{"model":{"name":"test","contextWindow":65000,"maxOutputTokens":8000}}"#,
            )
            .unwrap();
            let config = Config::resolve(&[file], None, &Overrides::default()).unwrap();
            let mut s = Session {
                dir,
                path,
                log,
                config,
                mapping: ToolMapping::default(),
                n: 0,
            };
            for turn in 0..8 {
                s.turn(turn, 4000);
            }
            s
        }

        fn push(&mut self, body: EntryBody) {
            self.n += 1;
            let parent = self.log.session().leaf_id().map(str::to_string);
            self.log
                .append(Entry::new(format!("x{}", self.n), parent, body))
                .unwrap();
        }

        fn message(&mut self, role: Role, content: Vec<ContentBlock>) {
            self.push(EntryBody::Message(MessageEntry {
                role,
                content,
                usage: None,
                model: None,
                synthetic: false,
            }));
        }

        fn turn(&mut self, k: usize, tokens: usize) {
            let filler = " lorem".repeat(tokens / 3);
            self.message(
                Role::User,
                vec![ContentBlock::text(format!("request {k}:{filler}"))],
            );
            let call_id = format!("call{k}");
            self.message(
                Role::Assistant,
                vec![ContentBlock::ToolCall {
                    id: call_id.clone(),
                    name: "Edit".into(),
                    input: Box::new(json!({"file_path": format!("/ws/src/f{k}.rs"), "old_string": "a", "new_string": "b"})), extra: Default::default() }],
            );
            self.push(EntryBody::ToolResult(ToolResultEntry {
                call_id,
                tool_name: Some("Edit".into()),
                content: vec![ContentBlock::text(filler.clone())],
                is_error: false,
                exit_code: Some(0),
            }));
            self.message(Role::Assistant, vec![ContentBlock::text(filler)]);
        }

        /// Plan an explicit `/compact`.
        pub fn explicit(
            &mut self,
            instructions: Option<&str>,
        ) -> soba_core::compaction::plan::Plan {
            let barrier = soba_core::compaction::run::Barrier {
                config: &self.config,
                mapping: &self.mapping,
            };
            barrier
                .explicit(&mut self.log, instructions.map(str::to_string))
                .unwrap()
                .expect("a plan")
        }

        pub fn file_text(&self) -> String {
            std::fs::read_to_string(&self.path).unwrap()
        }
    }
}

#[tokio::test]
async fn an_explicit_compaction_writes_a_model_capsule_with_the_facts_merged() {
    use soba::summarize::generate;
    use soba_core::compaction::run::commit;
    use soba_core::session::capsule::model::Quality;
    use soba_core::session::entry::Outcome;

    // The model's reply mentions no files at all.
    let server =
        Loopback::start(|_, _| sse(&openai_events(&capsule_json("Finish the refactor")))).await;
    let mut cfg = config(Provider::Openai, &server);
    cfg.context_window = Some(128_000);
    let s = summarizer(&cfg);
    let mut session = engine::Session::new();
    let plan = session.explicit(Some("keep it short"));
    assert!(plan.artifacts.modified_files.len() > 1);
    let progress = Mutex::new(Vec::new());
    let generated = generate(&plan, Some(&s), CancellationToken::new(), &|p| {
        progress.lock().unwrap().push(p)
    })
    .await;
    assert_monotonic_to_100(&progress.into_inner().unwrap());
    let result = commit(&mut session.log, &plan, generated, false, 1).unwrap();
    assert_eq!(
        (result.outcome, result.quality),
        (Outcome::Completed, Some(Quality::Model)),
        "{result:?}"
    );

    let prompt = server.requests()[0].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(prompt.contains("keep it short"));
    // The facts hold no file the model is not shown: one edited only in the kept tail is left
    // out of the prompt (and kept in the capsule's artifacts below).
    let shown: Vec<&str> = plan
        .to_summarize
        .iter()
        .filter_map(|m| m.entry_id.as_deref())
        .collect();
    let tail_only: Vec<&str> = plan
        .artifacts
        .modified_files
        .iter()
        .filter(|f| !f.entry_ids.iter().any(|id| shown.contains(&id.as_str())))
        .map(|f| f.path.as_str())
        .collect();
    assert!(
        !tail_only.is_empty(),
        "the plan keeps a tail that edits files"
    );
    for path in tail_only {
        assert!(!prompt.contains(path), "{path} is only in the kept tail");
    }
    let (reloaded, _) = soba_core::session::log::read_session(&session.path).unwrap();
    let capsule = reloaded
        .entry(reloaded.capsule_on_path(reloaded.leaf().unwrap()).unwrap())
        .as_capsule()
        .unwrap()
        .clone();
    assert_eq!(capsule.state.goal, "Finish the refactor");
    assert_eq!(
        capsule.artifacts.modified_files, plan.artifacts.modified_files,
        "facts come from the log, not the model"
    );
    assert!(!session.file_text().contains(KEY));
}

#[tokio::test]
async fn a_cancelled_compaction_appends_nothing_even_when_the_model_answers_later() {
    use soba::summarize::generate;
    use soba_core::compaction::run::commit;
    use soba_core::compaction::run::Generated;
    use soba_core::session::entry::Outcome;

    let server = Loopback::start(|_, _| {
        let mut steps = vec![
            head(200, "text/event-stream", true),
            Step::Sleep(Duration::from_millis(300)),
        ];
        steps.extend(
            openai_events(&capsule_json("late"))
                .into_iter()
                .map(|e| Step::Chunk(e.into_bytes())),
        );
        steps.push(Step::EndChunks);
        steps
    })
    .await;
    let mut cfg = config(Provider::Openai, &server);
    cfg.context_window = Some(128_000);
    let s = summarizer(&cfg);
    let mut session = engine::Session::new();
    let plan = session.explicit(None);
    let before = session.file_text();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        trigger.cancel();
    });
    let generated = generate(&plan, Some(&s), cancel.clone(), &|_| {}).await;
    assert_eq!(generated, Generated::Cancelled);
    tokio::time::sleep(Duration::from_millis(400)).await; // past the server's late answer
    let result = commit(&mut session.log, &plan, generated, cancel.is_cancelled(), 1).unwrap();
    assert_eq!(result.outcome, Outcome::Cancelled);
    assert_eq!(session.file_text(), before, "nothing appended");
    assert!(session.dir.path().exists());
}

#[tokio::test]
async fn without_a_model_the_plan_gets_its_local_capsule() {
    use soba::summarize::generate;
    use soba_core::compaction::run::Generated;
    use soba_core::session::capsule::model::Quality;

    let mut session = engine::Session::new();
    let plan = session.explicit(None);
    let progress = Mutex::new(Vec::new());
    let generated = generate(&plan, None, CancellationToken::new(), &|p| {
        progress.lock().unwrap().push(p)
    })
    .await;
    assert_eq!(
        generated,
        Generated::State {
            state: plan.local_state.clone(),
            quality: Quality::Local,
            degraded_reason: None
        }
    );
    assert_eq!(progress.into_inner().unwrap(), vec![100]);
    let cancel = CancellationToken::new();
    cancel.cancel();
    assert_eq!(
        generate(&plan, None, cancel, &|_| {}).await,
        Generated::Cancelled
    );
}

/// The CLI has no runtime: `generate_blocking` brings its own.
#[test]
fn generate_blocking_needs_no_runtime() {
    use soba::summarize::generate_blocking;
    use soba_core::compaction::run::Generated;
    use soba_core::session::capsule::model::Quality;

    let server_runtime = tokio::runtime::Runtime::new().unwrap();
    let server = server_runtime.block_on(Loopback::start(|_, _| {
        sse(&anthropic_events(&capsule_json("from the CLI")))
    }));
    let mut cfg = config(Provider::Anthropic, &server);
    cfg.context_window = Some(200_000);
    let s = summarizer(&cfg);
    let mut session = engine::Session::new();
    let plan = session.explicit(None);
    let (generation, cancelled) = generate_blocking(&plan, Some(&s), &|_| {}).unwrap();
    let generated = generation.generated;
    assert!(!cancelled);
    let Generated::State { state, quality, .. } = generated else {
        panic!("{generated:?}")
    };
    assert_eq!(
        (state.goal.as_str(), quality),
        ("from the CLI", Quality::Model)
    );
}

/// A fake secret, assembled so that the repository holds no secret-shaped literal.
fn planted() -> (String, String) {
    let token = format!("ghp_{}{}", "Zq8Xw3Vt6Ru9Sp2On5Ml", "8Kj1Ih4Gf7Ed0Cb3Aa9Y");
    let password = format!("{}{}", "Tr0ub4dor", "-and-3-Horses");
    (token, password)
}

fn request_with_secrets() -> SummaryRequest {
    let (token, password) = planted();
    let mut req = request();
    req.history.push(message(
        "user",
        &format!("push with GITHUB_TOKEN={token} and db_password={password}"),
    ));
    req.history.push(message(
        "tool",
        &format!("$ cat .env\nDB_PASSWORD={password}\n"),
    ));
    req.instructions = Some(format!("Remember the token {token}."));
    req
}

#[tokio::test]
async fn summarizer_input_is_redacted_when_redact_input_is_on() {
    let reply = capsule_json("Push the release");
    let server = Loopback::start(move |_, _| sse(&openai_events(&reply))).await;
    let mut cfg = config(Provider::Openai, &server);
    cfg.redact_input = Some(true);
    let s = summarizer(&cfg);
    let r = run_with(&s, &request_with_secrets(), 2000, CancellationToken::new()).await;
    assert!(
        matches!(r.outcome, Summarized::Model(..)),
        "{:?}",
        r.outcome
    );
    let (token, password) = planted();
    let raw = &server.requests()[0].raw;
    assert!(!raw.contains(&token), "the token reached the summarizer");
    assert!(
        !raw.contains(&password),
        "the password reached the summarizer"
    );
    assert!(raw.contains("[redacted:github_token]"), "{raw}");
    assert!(
        raw.contains("push with GITHUB_TOKEN="),
        "the rest of the history is sent"
    );
}

#[tokio::test]
async fn a_summarizer_on_this_machine_gets_the_history_as_it_is_unless_told_otherwise() {
    let reply = capsule_json("Push the release");
    let server = Loopback::start(move |_, _| sse(&openai_events(&reply))).await;
    let s = summarizer(&config(Provider::Openai, &server));
    assert!(
        !s.redacts_input(),
        "loopback servers default to no redaction"
    );
    let r = run_with(&s, &request_with_secrets(), 2000, CancellationToken::new()).await;
    assert!(
        matches!(r.outcome, Summarized::Model(..)),
        "{:?}",
        r.outcome
    );
    assert!(server.requests()[0].raw.contains(&planted().0));
}

#[test]
fn remote_summarizers_get_redacted_input_by_default_and_an_explicit_false_turns_it_off() {
    let mut cfg = SummarizerConfig {
        provider: Provider::Openai,
        base_url: Some("https://llm.example.com/v1".into()),
        model: Some("gpt-4o-mini".into()),
        ..SummarizerConfig::default()
    };
    assert!(ModelSummarizer::new(&cfg, |_| None)
        .unwrap()
        .redacts_input());
    cfg.base_url = None;
    assert!(ModelSummarizer::new(&cfg, |_| None)
        .unwrap()
        .redacts_input());
    cfg.redact_input = Some(false);
    assert!(!ModelSummarizer::new(&cfg, |_| None)
        .unwrap()
        .redacts_input());
}

#[test]
fn credentials_in_the_base_url_are_refused_without_being_repeated() {
    let pw = format!("{}{}", "hunter2", "-Secret");
    let cfg = SummarizerConfig {
        provider: Provider::Openai,
        base_url: Some(format!("https://bob:{pw}@llm.example.com/v1")),
        model: Some("gpt-4o-mini".into()),
        ..SummarizerConfig::default()
    };
    let err = ModelSummarizer::new(&cfg, |_| None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("credentials") && err.contains("apiKeyEnv"),
        "{err}"
    );
    assert!(!err.contains(&pw) && !err.contains("bob"), "{err}");
    // And at config validation, before any summarizer is built.
    let text = format!(
        r#"{{"summarizer":{{"provider":"openai","model":"gpt-4o-mini","baseUrl":"https://bob:{pw}@llm.example.com/v1"}}}}"#
    );
    let file = soba_core::config::ConfigFile::parse("c.json", &text).unwrap();
    let err =
        soba_core::config::Config::resolve(&[file], None, &soba_core::config::Overrides::default())
            .unwrap_err()
            .to_string();
    assert!(
        err.contains("summarizer.baseUrl") && err.contains("apiKeyEnv"),
        "{err}"
    );
    assert!(!err.contains(&pw), "{err}");
}

#[tokio::test]
async fn secrets_in_a_server_error_body_are_redacted_from_the_error() {
    let (token, _) = planted();
    let body =
        format!(r#"{{"error":{{"message":"invalid credentials for GITHUB_TOKEN={token}"}}}}"#);
    let server = Loopback::start(move |_, _| json(401, &body)).await;
    let s = summarizer(&config(Provider::Openai, &server));
    let r = run(&s, 2000).await;
    let reason = degraded_reason(&r);
    assert!(reason.contains("401"), "{reason}");
    assert!(!reason.contains(&token), "{reason}");
}

fn user_prompt(r: &Recorded) -> String {
    r.body["messages"][1]["content"]
        .as_str()
        .expect("an OpenAI chat request with a user message")
        .to_string()
}

#[tokio::test]
async fn a_malformed_first_reply_is_asked_again_and_the_second_is_used() {
    let server = Loopback::start(|n, _| match n {
        0 => sse(&openai_events("Here is the summary you asked for.")),
        _ => sse(&openai_events(&capsule_json("asked twice, answered once"))),
    })
    .await;
    let s = summarizer(&config(Provider::Openai, &server));
    let r = run(&s, 10_000).await;
    let Summarized::Model(state, _) = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert_eq!(state.goal, "asked twice, answered once");
    assert!(!r.local_called);
    assert_monotonic_to_100(&r.progress);
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(!user_prompt(&requests[0]).contains("could not be used"));
    let second = user_prompt(&requests[1]);
    let follow_up = &second[second
        .find("## Your previous reply could not be used")
        .unwrap()..];
    assert!(
        follow_up.contains("no complete JSON object") && follow_up.contains("Reply again"),
        "{follow_up}"
    );
}

#[tokio::test]
async fn two_malformed_replies_fall_back_with_the_reason() {
    let server = Loopback::start(|n, _| match n {
        0 => sse(&openai_events("no json here")),
        _ => sse(&openai_events(r#"{"goal": ""}"#)),
    })
    .await;
    let s = summarizer(&config(Provider::Openai, &server));
    let r = run(&s, 10_000).await;
    assert_eq!(
        degraded_reason(&r),
        "invalid reply from the summarization model: the model's capsule has an empty goal (asked twice); the local capsule was used"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn no_second_try_when_the_time_left_is_shorter_than_the_first_took() {
    // The first reply takes 600 ms of a 1000 ms budget: 400 ms cannot hold another.
    let server = Loopback::start(|_, _| {
        let mut steps = vec![Step::Sleep(Duration::from_millis(600))];
        steps.extend(sse(&openai_events("still thinking")));
        steps
    })
    .await;
    let s = summarizer(&config(Provider::Openai, &server));
    let r = run(&s, 1_000).await;
    let reason = degraded_reason(&r);
    assert!(reason.contains("no complete JSON object"), "{reason}");
    assert!(!reason.contains("asked twice"), "{reason}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn the_analysis_block_is_dropped_and_never_reaches_the_session_log() {
    use soba::summarize::generate;
    use soba_core::compaction::run::commit;

    const THOUGHT: &str = "ANALYSIS-ONLY-7f3c: the user asked three things";
    let reply = format!(
        "<analysis>\n{THOUGHT}. A {{brace}} in the thinking.\n</analysis>\n{}",
        capsule_json("Finish the refactor")
    );
    let server = Loopback::start(move |_, _| sse(&openai_events(&reply))).await;
    let mut cfg = config(Provider::Openai, &server);
    cfg.context_window = Some(128_000);
    let s = summarizer(&cfg);
    let mut session = engine::Session::new();
    let plan = session.explicit(None);
    let generated = generate(&plan, Some(&s), CancellationToken::new(), &|_| {}).await;
    let result = commit(&mut session.log, &plan, generated, false, 1).unwrap();
    assert_eq!(
        result.quality,
        Some(soba_core::session::capsule::model::Quality::Model),
        "{result:?}"
    );
    let log = session.file_text();
    assert!(log.contains("Finish the refactor"));
    assert!(
        !log.contains("ANALYSIS-ONLY-7f3c"),
        "the analysis was stored"
    );
    assert!(!format!("{result:?}").contains("ANALYSIS-ONLY-7f3c"));
}

/// The request of [`request`] with entry ids and a failing check among its facts.
fn request_with_a_failing_check() -> SummaryRequest {
    use soba_core::session::capsule::model::Verification;
    use soba_core::session::capsule::model::VerificationOutcome;
    let mut req = request();
    for (n, m) in req.history.iter_mut().enumerate() {
        m.entry_id = Some(format!("e{n}"));
    }
    req.artifacts.verification = vec![Verification {
        command: "cargo test".into(),
        outcome: VerificationOutcome::Failed,
        entry_id: "e2".into(),
        edited_since: false,
    }];
    req.artifacts.modified_files[0].entry_ids = vec!["e1".into()];
    req
}

#[tokio::test]
async fn a_check_outcome_the_facts_contradict_is_corrected_and_counted() {
    let reply = json!({
        "goal": "Add streaming",
        "completed": ["SSE parser written; `cargo test` passes", "wired the parser"],
        "blockers": [],
    })
    .to_string();
    let server = Loopback::start(move |_, _| sse(&openai_events(&reply))).await;
    let s = summarizer(&config(Provider::Openai, &server));
    let r = run_with(
        &s,
        &request_with_a_failing_check(),
        10_000,
        CancellationToken::new(),
    )
    .await;
    let Summarized::Model(state, corrections) = &r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert_eq!(state.completed, vec!["wired the parser"]);
    assert_eq!(state.blockers, vec!["`cargo test` failed on its last run"]);
    assert_eq!(corrections.check_outcomes, 1);
    assert_eq!(corrections.total(), 1);
}

#[tokio::test]
async fn a_deletion_the_facts_do_not_record_is_dropped_counted_and_reported() {
    use soba::flight::FlightLog;
    use soba::summarize::generate_checked;
    use soba_core::compaction::run::commit;

    let reply = json!({
        "goal": "Finish the refactor",
        "completed": ["Deleted src/f1.rs", "Edited src/f2.rs"],
    })
    .to_string();
    let server = Loopback::start(move |_, _| sse(&openai_events(&reply))).await;
    let mut cfg = config(Provider::Openai, &server);
    cfg.context_window = Some(128_000);
    let s = summarizer(&cfg);
    let mut session = engine::Session::new();
    let plan = session.explicit(None);
    let generation = generate_checked(&plan, Some(&s), CancellationToken::new(), &|_| {}).await;
    assert_eq!(generation.corrections.deletions, 1, "{generation:?}");
    let soba_core::compaction::run::Generated::State { state, .. } = &generation.generated else {
        panic!("{generation:?}")
    };
    assert_eq!(state.completed, vec!["Edited src/f2.rs"]);
    let mut result = commit(
        &mut session.log,
        &plan,
        generation.generated.clone(),
        false,
        1,
    )
    .unwrap();
    let corrections = generation.annotate(&mut result);
    assert_eq!(corrections, generation.corrections);
    assert!(
        result
            .reason
            .ends_with("; 1 claim corrected from the facts (1 deletion)"),
        "{}",
        result.reason
    );
    let flight = FlightLog::for_session_log(&session.path);
    flight.record_corrected("s", &result, corrections);
    let records = flight.read(Some("s"), None).unwrap();
    assert_eq!(records.last().unwrap().corrections.deletions, 1);
    let line = std::fs::read_to_string(flight.path()).unwrap();
    assert!(line.contains("\"corrections\":{"), "{line}");
    assert!(!line.contains("Deleted src/f1.rs"), "counts, never text");
}

#[tokio::test]
async fn claude_code_reminders_do_not_hide_the_users_task_from_the_model() {
    let server =
        Loopback::start(|_, _| sse(&openai_events(&capsule_json("Use Decimal for money")))).await;
    let s = summarizer(&config(Provider::Openai, &server));
    let first = ModelMessage {
        role: "user".into(),
        content: vec![
            ContentBlock::text(
                "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# claudeMd\nCodebase and user instructions are shown below.\n</system-reminder>",
            ),
            ContentBlock::text(
                "<system-reminder>\nThe TodoWrite tool hasn't been used recently.\n</system-reminder>",
            ),
            ContentBlock::text("Refactor the billing module to use Decimal for money amounts."),
        ],
        tool_call_id: None,
        is_error: None,
        entry_id: Some("u1".into()),
    };
    let mut req = request();
    req.history.insert(0, first);
    let r = run_with(&s, &req, 10_000, CancellationToken::new()).await;
    assert!(
        matches!(r.outcome, Summarized::Model(..)),
        "{:?}",
        r.outcome
    );
    let prompt = user_prompt(&server.requests()[0]);
    let facts = &prompt[prompt.find("## Recorded facts").unwrap()
        ..prompt.find("## History to summarize").unwrap()];
    assert!(
        facts.contains("- [u1] Refactor the billing module to use Decimal for money amounts."),
        "{facts}"
    );
    assert!(
        !facts.contains("system-reminder") && !facts.contains("claudeMd"),
        "{facts}"
    );
}

/// A model capsule quotes what was said from the log, as the local one does: the model writes
/// the state, never the user's words.
#[test]
fn a_model_capsule_quotes_the_same_exchanges_as_the_local_capsule() {
    use soba::summarize::generate_blocking;
    use soba_core::compaction::run::Generated;
    use soba_core::session::capsule::model::Quality;

    let server_runtime = tokio::runtime::Runtime::new().unwrap();
    let server = server_runtime.block_on(Loopback::start(|_, _| {
        sse(&anthropic_events(&capsule_json("a goal from the model")))
    }));
    let mut cfg = config(Provider::Anthropic, &server);
    cfg.context_window = Some(200_000);
    let s = summarizer(&cfg);
    let mut session = engine::Session::new();
    let plan = session.explicit(None);
    assert!(
        !plan.local_state.exchanges.is_empty(),
        "the history has user turns to quote"
    );
    let (generation, _) = generate_blocking(&plan, Some(&s), &|_| {}).unwrap();
    let Generated::State { state, quality, .. } = generation.generated else {
        panic!("no state")
    };
    assert_eq!(quality, Quality::Model);
    assert_eq!(state.goal, "a goal from the model");
    assert_eq!(state.exchanges, plan.local_state.exchanges);
}
