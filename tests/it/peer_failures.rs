//! Known compaction failures of other coding agents, replayed against the real engine
//! (`compaction::run::Barrier` over a session log on disk). Each test rebuilds the scenario of
//! the cited issue and checks that it does not reproduce here.

use crate::loopback;
use crate::support::agent;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agent::{config, Agent};
use futures::future::BoxFuture;
use serde_json::json;
use soba::summarize::client::ModelSummarizer;
use soba::summarize::summarizer::Summarizer;
use soba::summarize::summarizer::SummaryError;
use soba::summarize::summarizer::SummaryRequest;
use soba_core::compaction::run::Preflight;
use soba_core::config::{Provider, SummarizerConfig};
use soba_core::session::capsule::model::CapsuleState;
use soba_core::session::capsule::model::Quality;
use soba_core::session::entry::*;
use soba_core::session::log::read_session;
use soba_core::session::trigger::Trigger;
use soba_core::session::view::{ModelMessage, ModelView};
use soba_core::tokens::{TokenizerKind, MESSAGE_OVERHEAD_TOKENS};
use tokio_util::sync::CancellationToken;

/// A summarizer that counts its calls and answers at once with a short state, like a model
/// that always succeeds.
#[derive(Default)]
struct CountingSummarizer {
    calls: AtomicUsize,
}

impl Summarizer for CountingSummarizer {
    fn describe(&self) -> String {
        "counting test summarizer".into()
    }

    fn summarize<'a>(
        &'a self,
        _req: &'a SummaryRequest,
        progress: &'a (dyn Fn(u8) + Send + Sync),
        _cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<CapsuleState, SummaryError>> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        Box::pin(async move {
            progress(50);
            Ok(CapsuleState {
                goal: format!("continue the task (summary {n})"),
                next_steps: vec!["run the tests".into()],
                ..CapsuleState::default()
            })
        })
    }
}

/// Every tool result in the model input follows the assistant message that made its call, and
/// every call is answered: the shape providers require ("No tool call found for function call
/// output", "tool_use ids were found without tool_result blocks").
fn assert_tool_pairs_whole(messages: &[ModelMessage]) {
    let mut open: Vec<String> = Vec::new();
    let mut answered: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        for b in &m.content {
            if let ContentBlock::ToolCall { id, .. } = b {
                open.push(id.clone());
            }
        }
        if m.role == "tool" {
            let id = m
                .tool_call_id
                .as_deref()
                .expect("a tool message names its call");
            assert!(
                open.iter().any(|c| c == id),
                "message {i}: tool result for {id} without its call in the input"
            );
            answered.push(id.to_string());
        }
    }
    for id in &open {
        assert!(
            answered.contains(id),
            "call {id} has no result in the input"
        );
    }
}

/// anomalyco/opencode#27924 "infinite compaction loop when compression fails to reduce
/// context": a large AGENTS.md plus MCP tool schemas (~100K tokens of fixed overhead) keep the
/// context above the threshold after every compaction, so compaction fires again on every loop
/// iteration, each one a paid model request, forever.
///
/// Here: the same overhead at a 200K window. Within one turn the agent loop (preflight →
/// inference → tool call → preflight …) runs at most one soft compaction; a compaction that
/// cannot shrink the context enough is skipped and appends no capsule; later turns do not
/// call the model again for a compaction that cannot pay off.
#[test]
fn opencode_27924_compaction_that_cannot_shrink_does_not_loop() {
    let cfg = config(r#"{"model":{"name":"test","contextWindow":200000,"maxOutputTokens":32000}}"#);
    let mut agent = Agent::with(cfg);
    // ~100K tokens sent with every request: AGENTS.md and tool schemas.
    agent.push(EntryBody::Setting(SettingEntry {
        system_tokens: Some(70_000),
        tool_tokens: Some(30_000),
        ..Default::default()
    }));
    let soft = agent.config.limits().soft_limit;
    let summarizer = CountingSummarizer::default();
    let mut turns_at_threshold = 0;
    for turn in 0..6 {
        agent.user(500);
        // The agent loop of one turn: 8 inferences with a tool call each.
        let calls_before = summarizer.calls.load(Ordering::SeqCst);
        let mut attempts_this_turn = 0;
        for step in 0..8 {
            let (results, p) = agent.preflight_through(Some(&summarizer));
            attempts_this_turn += results.iter().filter(|r| r.trigger.is_soft()).count();
            assert!(
                matches!(p, Preflight::Ready { .. }),
                "turn {turn} step {step}: {p:?}"
            );
            agent.tool("Bash", json!({"command": format!("cat log{step}")}), 2500);
        }
        if agent.effective() >= soft {
            turns_at_threshold += 1;
        }
        assert!(
            attempts_this_turn <= 1,
            "turn {turn}: {attempts_this_turn} soft attempts in one turn"
        );
        let calls = summarizer.calls.load(Ordering::SeqCst) - calls_before;
        assert!(
            calls <= 1,
            "turn {turn}: {calls} model summaries in one turn"
        );
    }
    assert!(
        turns_at_threshold >= 3,
        "the scenario reaches the threshold"
    );
    let calls = summarizer.calls.load(Ordering::SeqCst);
    let capsules = agent.capsules();
    // Each capsule that was appended reclaimed at least the configured minimum.
    let s = agent.log.session();
    for c in s.entries().iter().filter_map(|e| e.as_capsule()) {
        assert!(
            c.tokens.before - c.tokens.after >= agent.config.compaction.min_reclaimable_tokens,
            "a capsule that did not shrink the context was appended: {:?}",
            c.tokens
        );
    }
    assert_eq!(
        calls, capsules,
        "{calls} model summaries for {capsules} capsules: the model is asked for compactions \
         that cannot pay off"
    );
}

/// anomalyco/opencode#27924, second shape (PR #29150): the model's context limit is smaller
/// than the window the host believes in, so every request comes back as a context overflow
/// and auto-compaction fires forever. Here: one recovery compact per turn, then a clear
/// failure; the loop ends and no capsule piles on capsule.
#[test]
fn opencode_27924_provider_overflow_on_every_request_ends_after_one_recovery() {
    let mut agent = Agent::with(config(
        r#"{"model":{"name":"test","contextWindow":65000,"maxOutputTokens":8000}}"#,
    ));
    for _ in 0..9 {
        agent.turn(4000);
    }
    agent.user(10);
    let settings = agent.settings();
    let barrier = settings.barrier();
    let mut recoveries = 0;
    let mut ended = None;
    for attempt in 0..20 {
        match barrier.preflight(&mut agent.log).unwrap() {
            Preflight::Ready { .. } => {}
            Preflight::Compact(plan) => {
                barrier.run_local(&mut agent.log, &plan).unwrap();
                continue;
            }
            Preflight::Failed(r) => {
                ended = Some((attempt, r));
                break;
            }
        }
        // The provider rejects every request as too long.
        match barrier
            .overflow(&mut agent.log, Default::default())
            .unwrap()
        {
            Ok(plan) => {
                recoveries += 1;
                let r = barrier.run_local(&mut agent.log, &plan).unwrap();
                assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
            }
            Err(r) => {
                assert_eq!(r.outcome, Outcome::Failed);
                ended = Some((attempt, r));
                break;
            }
        }
    }
    let (attempt, r) = ended.expect("the overflow loop ends");
    assert!(attempt <= 2, "ended after {attempt} attempts");
    assert_eq!(recoveries, 1);
    assert_eq!(r.outcome, Outcome::Failed);
    assert_eq!(agent.capsules(), 1);
    // And the host is told so, not handed the same input again.
    assert!(matches!(
        barrier.preflight(&mut agent.log).unwrap(),
        Preflight::Failed(_)
    ));
}

/// openai/codex#29319 "automatic context compaction fails at 258k/258k and aborts with
/// context-window error": the session reached 100% of the window, auto-compaction started, and
/// the compaction itself could not run inside the full window; the thread was lost.
///
/// Here: the last tool output fills the window past 100% in one step (nothing was compacted
/// before), and the summarization model never answers. The preflight still returns promptly
/// (the model is abandoned at `timeoutMs` and the local capsule is used) with input under the
/// hard limit.
#[test]
fn codex_29319_a_full_window_still_compacts_promptly() {
    let mut agent = Agent::with(config(
        r#"{"model":{"name":"test","contextWindow":65000,"maxOutputTokens":8000},
            "compaction":{"timeoutMs":300}}"#,
    ));
    for _ in 0..8 {
        agent.turn(4000);
    }
    agent.user(20);
    agent.tool("Bash", json!({"command": "cat build.log"}), 40_000);
    assert!(agent.effective() > 65_000, "past 100% of the window");

    let server = agent.runtime.block_on(loopback::Loopback::start(|_, _| {
        vec![
            loopback::head(200, "text/event-stream", true),
            loopback::Step::Sleep(Duration::from_secs(30)),
        ]
    }));
    let summarizer = ModelSummarizer::new(
        &SummarizerConfig {
            provider: Provider::Openai,
            base_url: Some(format!("{}/v1", server.base)),
            model: Some("gpt-4o-mini".into()),
            api_key_env: Some("SOBA_TEST_KEY".into()),
            context_window: Some(65_000),
            max_output_tokens: Some(8_000),
            cooldown_ms: None,
            redact_input: None,
        },
        |_| Some("test-key".into()),
    )
    .unwrap();
    let started = Instant::now();
    let (results, p) = agent.preflight_through(Some(&summarizer));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "preflight took {took:?}");
    let r = &results[0];
    assert_eq!(r.trigger, Trigger::HardLimit);
    assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    assert!(
        r.fallback,
        "the model timed out: the local capsule stands in"
    );
    let Preflight::Ready {
        tokens, messages, ..
    } = p
    else {
        panic!("expected input, got {p:?}")
    };
    assert!(tokens <= agent.config.limits().hard_limit);
    assert_tool_pairs_whole(&messages);
}

/// earendil-works/pi#2608 "kept messages from first compaction are silently lost after second
/// compaction": the second compaction only looked at entries after the first compaction entry,
/// so [u2, a2, u3, a3] kept by compaction 1 were neither summarized nor kept by compaction 2.
/// Also the variant of pi PR #1585: a kept message larger than keepRecentTokens (a ~37K-token
/// paste) never got summarized and triggered compaction on every later turn.
///
/// Here: every entry the first compaction kept is, after the second, either folded into the
/// second capsule's summary input or still in the model input; facts recorded before the
/// first capsule survive the second.
#[test]
fn pi_2608_messages_kept_by_the_first_compaction_survive_the_second() {
    let mut agent = Agent::with(config(
        r#"{"model":{"name":"test","contextWindow":200000,"maxOutputTokens":32000},
            "compaction":{"keepRecentTokens":20000}}"#,
    ));
    // 5 small question/answer pairs, then a large paste, then a short reply (pi #1585).
    for k in 0..5 {
        agent.user(300);
        agent.tool(
            "Write",
            json!({"file_path": format!("/ws/early{k}.rs"), "content": "x"}),
            200,
        );
        agent.assistant(300);
    }
    let paste = agent.user(37_000);
    agent.assistant(200);
    let first = agent.explicit(None, None);
    assert_eq!(first.outcome, Outcome::Completed, "{first:?}");
    let kept_by_first: Vec<String> = agent.input_ids();
    assert!(
        kept_by_first.contains(&paste),
        "the first compaction keeps the large paste, as in pi #1585"
    );

    // More questions and answers, then the second compaction.
    for _ in 0..7 {
        agent.user(2000);
        agent.assistant(2000);
    }
    let settings = agent.settings();
    let plan = settings
        .barrier()
        .explicit(&mut agent.log, None)
        .unwrap()
        .expect("the second compaction plans");
    let second = agent.run(&plan, None);
    assert_eq!(second.outcome, Outcome::Completed, "{second:?}");
    let after = agent.input_ids();
    for id in &kept_by_first {
        assert!(
            plan.summarized_entry_ids.contains(id) || after.contains(id),
            "{id}, kept by the first compaction, is neither summarized nor kept by the second"
        );
    }
    // The large paste kept in the first round is folded into the second, not kept forever.
    assert!(
        plan.summarized_entry_ids.contains(&paste),
        "the paste kept by the first compaction is summarized by the second"
    );
    // The summary input holds the kept messages themselves, in order.
    let summarized_ids: Vec<&str> = plan
        .to_summarize
        .iter()
        .filter_map(|m| m.entry_id.as_deref())
        .collect();
    let first_kept_folded: Vec<&str> = kept_by_first
        .iter()
        .map(String::as_str)
        .filter(|id| plan.summarized_entry_ids.iter().any(|s| s == id))
        .collect();
    for id in &first_kept_folded {
        assert!(
            summarized_ids.contains(id),
            "{id} is missing from the summary input"
        );
    }
    // Facts from before the first capsule are in the second one.
    let (reloaded, _) = read_session(&agent.path).unwrap();
    let latest = reloaded
        .entry(reloaded.capsule_on_path(reloaded.leaf().unwrap()).unwrap())
        .as_capsule()
        .unwrap()
        .clone();
    let modified: Vec<&str> = latest
        .artifacts
        .modified_files
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    for k in 0..5 {
        let path = format!("early{k}.rs");
        assert!(
            modified.contains(&path.as_str()),
            "{path} lost: {modified:?}"
        );
    }
    // And the next turns do not compact again and again: one soft attempt at most per turn.
    for _ in 0..3 {
        agent.user(100);
        let (results, _) = agent.preflight_through(None);
        assert!(results.len() <= 1, "{results:?}");
    }
}

/// earendil-works/pi#1764 (and its regressions #4570, #6832): after compaction, and above all
/// after chained compactions, the kept window held a tool result whose call had been
/// summarized away; every later request failed with "400 No tool call found for function call
/// output". pi-smart-compact PR #13 names one path: when the recent-token walk never reaches
/// keepRecentTokens the boundary falls on the last message, a tool result.
///
/// Here: parallel tool calls, results far larger than keepRecentTokens, and three chained
/// compactions (explicit, hard-limit, overflow). After each, no tool result in the model
/// input lacks its call and no call lacks its result.
#[test]
fn pi_1764_no_orphan_tool_result_after_chained_compactions() {
    let mut agent = Agent::with(config(
        r#"{"model":{"name":"test","contextWindow":65000,"maxOutputTokens":8000},
            "compaction":{"keepRecentTokens":6000}}"#,
    ));
    let settings = agent.settings();
    let barrier = settings.barrier();
    for round in 0..3 {
        agent.user(200);
        for step in 0..6 {
            // Three parallel calls in one assistant message, each result ~1500 tokens.
            let ids: Vec<String> = (0..3).map(|k| format!("r{round}s{step}c{k}")).collect();
            let calls: Vec<(&str, &str, serde_json::Value)> = ids
                .iter()
                .map(|id| {
                    (
                        id.as_str(),
                        "Read",
                        json!({"file_path": format!("/ws/{id}.rs")}),
                    )
                })
                .collect();
            agent.call(&calls);
            for id in &ids {
                agent.result(id, "Read", 1500);
            }
        }
        // The last result alone is larger than keepRecentTokens.
        agent.tool("Bash", json!({"command": "cargo test"}), 9000);
        let result = match round {
            0 => agent.explicit(None, None),
            1 => {
                agent.tool("Bash", json!({"command": "cat big.log"}), 30_000);
                let (results, p) = agent.preflight_through(None);
                assert!(matches!(p, Preflight::Ready { .. }), "{p:?}");
                results.into_iter().next().expect("a hard-limit compaction")
            }
            _ => {
                let plan = barrier
                    .overflow(&mut agent.log, Default::default())
                    .unwrap()
                    .expect("a recovery plan");
                barrier.run_local(&mut agent.log, &plan).unwrap()
            }
        };
        assert_eq!(
            result.outcome,
            Outcome::Completed,
            "round {round}: {result:?}"
        );
        let first_kept = result.first_kept_entry_id.clone().unwrap();
        assert!(
            agent
                .log
                .session()
                .get(&first_kept)
                .unwrap()
                .as_tool_result()
                .is_none(),
            "round {round}: the boundary falls on a tool result"
        );
        let input = agent.input();
        assert_tool_pairs_whole(&input);
        let s = agent.log.session();
        assert!(
            ModelView::build(s, s.leaf()).warnings.is_empty(),
            "round {round}"
        );
    }
    assert_eq!(agent.capsules(), 3);
    // A reloaded log gives the same well-formed input.
    let (reloaded, _) = read_session(&agent.path).unwrap();
    assert_tool_pairs_whole(&ModelView::build(&reloaded, reloaded.leaf()).messages(&reloaded));
}

/// anthropics/claude-code#2038 (and its many duplicates, e.g. #2119, #2964, #23047):
/// "Error during compaction: Error: Conversation too long". The compaction request carried
/// the whole conversation to the same model whose window it had already outgrown ("prompt is
/// too long: 205030 tokens > 200000 maximum"), so /compact failed exactly when it was needed.
///
/// Here: a session already past the window (the provider rejected it) is compacted with a
/// summarization model of the same window. Every request the summarizer sends fits its input
/// window (the history is chunked, oversized items elided); the capsule is the model's, and
/// the next input fits under the hard limit.
#[test]
fn claude_code_2038_the_compaction_request_itself_never_overflows() {
    let mut agent = Agent::with(config(
        r#"{"model":{"name":"test","contextWindow":65000,"maxOutputTokens":8000}}"#,
    ));
    for _ in 0..18 {
        agent.turn(4000);
    }
    agent.tool("Bash", json!({"command": "cat dump.txt"}), 70_000);
    agent.user(50);
    assert!(agent.effective() > 65_000 * 2, "far past the window");

    let reply =
        json!({"goal": "finish the migration", "nextSteps": ["rerun the suite"]}).to_string();
    let server = agent
        .runtime
        .block_on(loopback::Loopback::start(move |_, _| {
            let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
                let v = json!({"id": "c", "object": "chat.completion.chunk", "created": 1,
                "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
                format!("data: {v}\n\n")
            };
            loopback::sse(&[
                chunk(
                    json!({"role": "assistant", "content": reply.clone()}),
                    json!(null),
                ),
                chunk(json!({}), json!("stop")),
                "data: [DONE]\n\n".to_string(),
            ])
        }));
    let window = 65_000u64;
    let max_output = 8_000u64;
    let summarizer = ModelSummarizer::new(
        &SummarizerConfig {
            provider: Provider::Openai,
            base_url: Some(format!("{}/v1", server.base)),
            model: Some("same-model".into()),
            api_key_env: Some("SOBA_TEST_KEY".into()),
            context_window: Some(window),
            max_output_tokens: Some(max_output),
            cooldown_ms: None,
            redact_input: None,
        },
        |_| Some("test-key".into()),
    )
    .unwrap();
    let result = agent.explicit(None, Some(&summarizer));
    assert_eq!(result.outcome, Outcome::Completed, "{result:?}");
    assert_eq!(result.quality, Some(Quality::Model), "{result:?}");

    let requests = server.requests();
    assert!(requests.len() >= 2, "the history was sent in chunks");
    for (i, req) in requests.iter().enumerate() {
        let tokens: u64 = req.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                MESSAGE_OVERHEAD_TOKENS
                    + TokenizerKind::O200kBase.count(m["content"].as_str().unwrap())
            })
            .sum();
        assert!(
            tokens <= window - max_output,
            "request {i}: {tokens} tokens for a {window}-token window with {max_output} output"
        );
    }
    let (_, p) = agent.preflight_through(None);
    let Preflight::Ready { tokens, .. } = p else {
        panic!("expected input, got {p:?}")
    };
    assert!(tokens <= agent.config.limits().hard_limit);
}
