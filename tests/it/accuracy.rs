//! SOBA's budget against the input the provider reported, on the real transcripts of
//! `../shared/fixtures/transcripts`: requests replayed in order, SOBA's estimate before each one
//! against the usage its response carried.

use crate::common;

use std::path::Path;

use serde_json::Value;
use soba::accuracy::{self, model_of, pairs, session_of, Distribution, Pair};
use soba::import::transcript::import_str;
use soba::import::{ImportOptions, ImportResult};
use soba_core::budget::unseen_allowance::Agent;
use soba_core::budget::unseen_allowance::Fresh;
use soba_core::budget::unseen_allowance::Learned;
use soba_core::budget::unseen_allowance::UnseenKind;
use soba_core::budget::unseen_allowance::UnseenPrior;
use soba_core::budget::unseen_allowance::UnseenSource;
use soba_core::budget::unseen_allowance::MAX_GROWTH_SHARE;
use soba_core::session::entry::{EntryBody, Role};
use soba_core::session::view::{ModelView, ViewItem, ViewPart};
use soba_core::tokens::CalibrationSource;
use soba_core::tokens::MAX_LEARNED_FACTOR;
use soba_core::tokens::PROVISIONAL_MARGIN;

fn import(path: &Path) -> ImportResult {
    let text = std::fs::read_to_string(path).unwrap();
    let options = ImportOptions {
        source_path: path.display().to_string(),
        default_workspace: "/w".into(),
        default_session_id: "s".into(),
        now: "2026-01-01T00:00:00Z".into(),
    };
    import_str(&text, None, &options).unwrap()
}

fn replay(path: &Path) -> Vec<Pair> {
    let import = import(path);
    let model = model_of(&import).unwrap();
    accuracy::replay(&import, &model)
}

fn transcripts() -> Vec<std::path::PathBuf> {
    let Some(dir) = common::transcripts_dir() else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for sub in ["codex", "claude-code", "pi", "openai-chat"] {
        for f in std::fs::read_dir(dir.join(sub)).unwrap() {
            files.push(f.unwrap().path());
        }
    }
    files.sort();
    files
}

/// Requests whose transcript does not hold what the agent sent, so no estimate from the log can
/// reach the bill. Listed so that any new under-estimate fails this test, and any fixed one too
/// (drop it). The test checks each one's claim: the provider's count grew by more than
/// [`MAX_LEARNED_FACTOR`] times SOBA's count of everything the transcript recorded in between,
/// and by more than the unseen-growth allowance's cap ([`MAX_GROWTH_SHARE`] of the usage).
///
/// - session four e11: 13k tokens of this request are in no record of the transcript.
///
/// (Interrupted calls e14, two short tool results of 82 tokens billed as 439 because Claude Code
/// adds reminders its transcript does not record, was listed here until the unseen-growth
/// allowance covered it.)
const CONTENT_NOT_HELD_LOW: &[&str] = &["agentcmd-session-four.jsonl e11"];

/// The first measured request of a session, which once read up to 5.7% low: no report before
/// it has a tail to learn the session's factor from, so the factor is still provisional (the
/// catalog's, raised by [`PROVISIONAL_MARGIN`]).
const FIRST_MEASURED: &[&str] = &[
    "mini-swe-agent-astropy-12907.traj.json e7",
    "pi-mono-large-session.jsonl e8",
    "pi-mono-two-compactions.jsonl e5",
];

/// The accuracy target, where the transcript holds what the request held (an anchored
/// estimate; after a source agent's own compaction the view holds what the agent sent): the median error within
/// ±1%, under 1% of requests under-estimated by more than 2%, and no request under-estimated
/// by more than 2% beyond the known ones above. The session-learned factor is what keeps the
/// rest within 2%: without it, 9 more requests are low (see docs/performance.md).
#[test]
fn requests_the_transcript_holds_are_not_under_estimated_by_more_than_2_percent() {
    let mut low = Vec::new();
    let mut all = Vec::new();
    let mut learned = 0;
    let mut first_measured = 0;
    for path in transcripts() {
        let pairs = replay(&path);
        let comparable: Vec<&Pair> = pairs.iter().filter(|p| p.comparable()).collect();
        assert!(
            comparable.len() * 10 >= pairs.len() * 9,
            "{}: only {} of {} requests comparable",
            path.display(),
            comparable.len(),
            pairs.len()
        );
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        for p in &comparable {
            all.push(p.soba_error());
            learned += usize::from(p.factor_source == CalibrationSource::Session);
            let label = format!("{name} {}", p.entry_id);
            if FIRST_MEASURED.contains(&label.as_str()) {
                first_measured += 1;
                assert_eq!(
                    p.factor_source,
                    CalibrationSource::Provisional,
                    "{label}: no earlier report taught a factor"
                );
                assert!(
                    p.factor >= PROVISIONAL_MARGIN,
                    "{label}: factor {}",
                    p.factor
                );
                assert!(
                    p.soba_error() >= -0.02,
                    "{label}: {:+.2}%",
                    p.soba_error() * 100.0
                );
            }
            if p.soba_error() < -0.02 {
                low.push(label);
                if CONTENT_NOT_HELD_LOW.contains(&low.last().unwrap().as_str()) {
                    let grew = p.reported - p.anchor_context.expect("anchored");
                    assert!(
                        grew as f64 > p.counted_tail as f64 * MAX_LEARNED_FACTOR,
                        "{}: the provider grew by {grew} over a tail counted {}: a count factor could reach it",
                        low.last().unwrap(),
                        p.counted_tail
                    );
                    let unexplained = grew as f64 - p.counted_tail as f64 * p.factor;
                    assert!(
                        unexplained > p.anchor_context.unwrap() as f64 * MAX_GROWTH_SHARE,
                        "{}: {unexplained} tokens unexplained, within the growth allowance's cap",
                        low.last().unwrap()
                    );
                }
                eprintln!(
                    "{}: reported {}, SOBA {} ({:+.1}%)",
                    low.last().unwrap(),
                    p.reported,
                    p.soba,
                    p.soba_error() * 100.0
                );
            }
        }
    }
    let Some(d) = Distribution::of(all) else {
        return;
    };
    assert_eq!(first_measured, FIRST_MEASURED.len());
    eprintln!(
        "SOBA over {} requests ({learned} at a learned factor): {d:?}",
        d.pairs
    );
    assert!(learned > 0, "no request used a learned factor");
    assert!(d.median.abs() < 0.01, "median error {:+.3}", d.median);
    assert!(
        d.share_low_over_2pct < 0.01,
        "{:.3} under by >2%",
        d.share_low_over_2pct
    );
    low.sort();
    let mut known: Vec<String> = CONTENT_NOT_HELD_LOW.iter().map(|s| s.to_string()).collect();
    known.sort();
    let new: Vec<&String> = low.iter().filter(|l| !known.contains(l)).collect();
    assert!(
        new.is_empty(),
        "newly under-estimated by more than 2%: {new:?}"
    );
    let fixed: Vec<&String> = known.iter().filter(|k| !low.contains(k)).collect();
    assert!(
        fixed.is_empty(),
        "no longer under-estimated, drop from the known lists: {fixed:?}"
    );
}

/// The first request of each session and the first after each of the agent's own compactions:
/// nothing before them anchors the budget, and the transcript never records the system prompt
/// and tools the agent sent. On a machine that has learned nothing, the agent's default
/// unseen-context allowance stands in for them: none may read low by more than 2% (they read
/// 82–100% low without it, median −92.1%), and the median may not read more than 50% high.
/// Beside it, what a machine that had seen the other transcripts of the same agent would
/// allow for (printed: each transcript's own set-up differs, so some of those read low).
#[test]
fn first_requests_and_the_first_after_an_agents_compaction_are_not_under_estimated() {
    let mut fresh = Vec::new();
    let mut starts: Vec<(Agent, String, u64)> = Vec::new();
    let mut imports = Vec::new();
    for path in transcripts() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let import = import(&path);
        let model = model_of(&import).unwrap();
        let session = session_of(&import, &model);
        let agent = session.agent().expect("every fixture names its agent");
        for p in pairs(&session).iter().filter(|p| p.fresh()) {
            let label = format!("{name} {}", p.entry_id);
            // After Claude Code's compaction: the session's own start gap plus the files it
            // attaches again, where that is above the default after a compaction.
            let expected_source = if p.after_foreign_compaction && p.unseen.restored_files > 0 {
                UnseenSource::Session
            } else {
                UnseenSource::Default
            };
            assert_eq!(
                (p.unseen.kind, p.unseen.source),
                (UnseenKind::Context, expected_source),
                "{label}"
            );
            eprintln!(
                "{label}{}: reported {}, SOBA {} ({:+.1}%)",
                if p.after_foreign_compaction {
                    " (after the agent's compaction)"
                } else {
                    ""
                },
                p.reported,
                p.soba,
                p.soba_error() * 100.0
            );
            assert!(
                p.soba_error() >= -0.02,
                "{label}: {:+.2}%",
                p.soba_error() * 100.0
            );
            fresh.push(p.soba_error());
        }
        if let Some(gap) = session.start_gap_at(session.leaf()) {
            starts.push((agent, name.clone(), gap));
        }
        imports.push((name, agent, import, model));
    }
    let Some(d) = Distribution::of(fresh) else {
        return;
    };
    eprintln!("first requests with the agents' defaults: {d:?}");
    assert!(d.pairs >= 15, "{} first requests", d.pairs);
    assert!(d.worst_low >= -0.02 && d.median <= 0.5, "{d:?}");

    let mut learned = Vec::new();
    for (name, agent, import, model) in &imports {
        let others: Vec<u64> = starts
            .iter()
            .filter(|(a, n, _)| a == agent && n != name)
            .map(|(_, _, gap)| *gap)
            .collect();
        let Some(start) = Learned::from_gaps(&others, agent.default_unseen(Fresh::Start)) else {
            continue;
        };
        let mut session = session_of(import, model);
        session.set_unseen_prior(UnseenPrior {
            agent: Some(*agent),
            start: Some(start),
            after_agent_compaction: None,
        });
        let first = pairs(&session).into_iter().find(|p| p.fresh()).unwrap();
        assert_eq!(first.unseen.source, UnseenSource::Learned, "{name}");
        learned.push(first.soba_error());
    }
    eprintln!(
        "first requests learned from the other transcripts of the same agent: {:?}",
        Distribution::of(learned)
    );
}

/// Codex logs one assistant entry per parallel call, usage on the last. The view puts each
/// result after its call, so counting "after the anchor" in view order misses the results of
/// all calls but the last; counting in log order sees them all.
#[test]
fn every_result_of_a_codex_parallel_call_counts_in_the_next_budget() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let import = import(&dir.join("codex/agentv-two-compactions.jsonl"));
    let model = model_of(&import).unwrap();
    let mut parallel = 0;
    {
        let session = session_of(&import, &model);
        let pairs = pairs(&session);
        for idx in 0..session.len() {
            // A response of several call entries whose usage sits on the last.
            let EntryBody::Message(m) = &session.entry(idx).body else {
                continue;
            };
            if m.role != Role::Assistant || m.usage.is_none() || m.content.is_empty() {
                continue;
            }
            let mut calls = 0;
            let mut cur = Some(idx);
            while let Some(i) = cur {
                match &session.entry(i).body {
                    EntryBody::Message(m)
                        if m.role == Role::Assistant && (i == idx || m.usage.is_none()) =>
                    {
                        calls += session.entry(i).tool_calls().count();
                    }
                    _ => break,
                }
                cur = session.parent_of(i);
            }
            if calls < 2 {
                continue;
            }
            // The budget right before the next request: after every result of this response.
            let Some(next) = (idx + 1..session.len()).find(|&i| {
            matches!(&session.entry(i).body, EntryBody::Message(m) if m.role == Role::Assistant)
        }) else {
            continue;
        };
            let leaf = session.parent_of(next);
            let view = ModelView::build(&session, leaf);
            let anchor = view.usage_anchor(&session).expect("anchored");
            assert_eq!(view.usage_anchor_at(&session).unwrap().0, idx);
            // What counting in view order would have seen after the anchor.
            let pos = view
                .slots
                .iter()
                .position(|s| s.item == ViewItem::Entry(idx as u32))
                .unwrap();
            let in_view_order: u64 = view.slots[pos + 1..]
                .iter()
                .filter(|s| s.part == ViewPart::New)
                .map(|s| ModelView::slot_tokens(&session, s))
                .sum();
            let results: u64 = view
                .entry_indices()
                .filter(|&i| i > idx)
                .map(|i| session.tokens_of(i))
                .sum();
            assert!(
                in_view_order < results,
                "the view moves results before the anchor ({in_view_order} vs {results})"
            );
            assert!(anchor.tokens_after >= results, "every result counts");
            // The pair of the request right after this response.
            let pair = pairs
                .iter()
                .find(|p| session.index_of(&p.entry_id).is_some_and(|p| p > idx))
                .unwrap();
            assert!(
                pair.soba >= pair.reported,
                "request after {}: SOBA {} < reported {}",
                session.entry(idx).id,
                pair.soba,
                pair.reported
            );
            parallel += 1;
        }
    }
    assert!(
        parallel >= 3,
        "the fixture has three parallel-call responses, saw {parallel}"
    );
}

/// Codex 0.40 writes `token_count` before the items of its response. Each usage belongs to the
/// last reply item that follows it, before the next `token_count` (numbers read here from the
/// raw file, not through the importer).
#[test]
fn codex_0_40_usage_lands_on_the_response_it_measures() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let path = dir.join("codex/agentcmd-rollout-v0.40.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    // Line of the last reply item after each measured token_count → its prompt tokens.
    let mut expected: Vec<(usize, u64)> = Vec::new();
    let mut pending: Option<u64> = None;
    let mut last_reply: Option<usize> = None;
    let close =
        |pending: &mut Option<u64>, last: &mut Option<usize>, out: &mut Vec<(usize, u64)>| {
            if let (Some(input), Some(line)) = (pending.take(), last.take()) {
                out.push((line, input));
            }
        };
    for (n, line) in text.lines().enumerate() {
        let r: Value = serde_json::from_str(line).unwrap();
        let p = &r["payload"];
        let kind = p["type"].as_str().unwrap_or("");
        match (r["type"].as_str(), kind) {
            (Some("event_msg"), "token_count") => {
                if let Some(input) = p["info"]["last_token_usage"]["input_tokens"].as_u64() {
                    close(&mut pending, &mut last_reply, &mut expected);
                    pending = Some(input);
                }
            }
            (Some("response_item"), "function_call" | "custom_tool_call" | "local_shell_call") => {
                last_reply = Some(n + 1)
            }
            (Some("response_item"), "message") if p["role"] == "assistant" => {
                last_reply = Some(n + 1)
            }
            // Encrypted reasoning alone has nothing to keep, and no entry.
            (Some("response_item"), "reasoning")
                if p["summary"].as_array().is_some_and(|s| !s.is_empty()) =>
            {
                last_reply = Some(n + 1)
            }
            (Some("response_item"), "reasoning") => {}
            (Some("response_item"), _) => close(&mut pending, &mut last_reply, &mut expected),
            _ => {}
        }
    }
    close(&mut pending, &mut last_reply, &mut expected);
    assert!(expected.len() > 40, "{} measured responses", expected.len());

    let import = import(&path);
    let mut got: Vec<(usize, u64)> = import
        .entries
        .iter()
        .filter_map(|e| match &e.body {
            EntryBody::Message(m) => m.usage.map(|u| {
                let line = e.source_id.as_deref().unwrap().trim_start_matches("line ");
                (line.parse().unwrap(), u.prompt_tokens())
            }),
            _ => None,
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, expected);
}
