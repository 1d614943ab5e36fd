//! One test per behaviour sentence of the spec's sections 2–7, over a real session log.

use crate::support::agent;

use agent::{config, filler, Agent};
use serde_json::json;
use soba_core::compaction::reasons;
use soba_core::compaction::run::commit;
use soba_core::compaction::run::generate_local;
use soba_core::compaction::run::{Generated, Preflight};
use soba_core::config::Durability;
use soba_core::session::capsule::model::CapsuleState;
use soba_core::session::capsule::model::Quality;
use soba_core::session::entry::*;
use soba_core::session::log::{read_session, SessionLog};
use soba_core::session::trigger::Trigger;
use soba_core::session::turn::turn_facts;
use soba_core::session::view::{ModelMessage, ModelView};

fn ready_messages(p: &Preflight) -> &[ModelMessage] {
    match p {
        Preflight::Ready { messages, .. } => messages,
        other => panic!("expected input, got {other:?}"),
    }
}

// §2.1 Model input and canonical history

#[test]
fn after_a_successful_compact_the_next_request_is_capsule_then_retained_tail_then_new_entries() {
    let mut h = Agent::new();
    for _ in 0..12 {
        h.turn(4000);
    }
    let r = h.explicit(None, None);
    assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    let first_kept = r.first_kept_entry_id.clone().unwrap();
    let new = h.user(10);
    let (_, p) = h.preflight_through(None);
    let msgs = ready_messages(&p);
    assert!(
        msgs[0].entry_id.is_none()
            && blocks_text(&msgs[0].content).starts_with("# Context Capsule")
    );
    assert_eq!(msgs[1].entry_id.as_deref(), Some(first_kept.as_str()));
    assert_eq!(msgs.last().unwrap().entry_id.as_deref(), Some(new.as_str()));
    // Complete recent entries: everything on the branch from firstKeptEntryId on, in order.
    let s = h.log.session();
    let from = s.index_of(&first_kept).unwrap();
    let expected: Vec<String> = s
        .branch(s.leaf().unwrap())
        .into_iter()
        .filter(|&i| i >= from && s.entry(i).is_model_visible())
        .map(|i| s.entry(i).id.clone())
        .collect();
    let got: Vec<String> = msgs[1..]
        .iter()
        .filter_map(|m| m.entry_id.clone())
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn older_messages_remain_in_the_canonical_session_jsonl_for_audit_and_rewind() {
    let mut h = Agent::new();
    let first = h.user(100);
    for _ in 0..12 {
        h.turn(4000);
    }
    let before = std::fs::read_to_string(&h.path).unwrap();
    assert_eq!(h.explicit(None, None).outcome, Outcome::Completed);
    let after = std::fs::read_to_string(&h.path).unwrap();
    assert!(after.starts_with(&before), "the log is only appended to");
    let (s, _) = read_session(&h.path).unwrap();
    assert!(s.get(&first).is_some());
    // They stop consuming model context…
    let view = ModelView::build(&s, s.leaf());
    assert!(!view.entry_indices().any(|i| s.entry(i).id == first));
    // …but remain available for rewind: the input at that entry includes it again.
    let at_first = ModelView::build(&s, s.index_of(&first));
    assert!(at_first.entry_indices().any(|i| s.entry(i).id == first));
}

#[test]
fn tool_calls_are_never_split_from_their_results_at_the_compaction_boundary() {
    let mut h = Agent::new();
    h.user(100);
    for i in 0..40 {
        h.tool("Bash", json!({"command": format!("cat f{i}.txt")}), 1500);
    }
    let r = h.explicit(None, None);
    assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    let s = h.log.session();
    let view = ModelView::build(s, s.leaf());
    assert!(view.warnings.is_empty(), "{:?}", view.warnings);
    let msgs = view.messages(s);
    // Every result follows its call.
    let mut open: Vec<String> = Vec::new();
    for m in &msgs {
        for b in &m.content {
            if let ContentBlock::ToolCall { id, .. } = b {
                open.push(id.clone());
            }
        }
        if let Some(id) = &m.tool_call_id {
            assert!(open.contains(id), "result {id} without its call");
            assert!(m
                .content
                .iter()
                .all(|b| !blocks_text(std::slice::from_ref(b)).contains("interrupted")));
        }
    }
}

// §2.2 Multiple capsules

#[test]
fn only_the_latest_capsule_and_its_retained_tail_enter_model_input_older_capsules_do_not_accumulate(
) {
    let mut h = Agent::new();
    for round in 0..3 {
        for _ in 0..12 {
            h.turn(4000);
        }
        let r = h.explicit(None, None);
        assert_eq!(r.outcome, Outcome::Completed, "round {round}: {r:?}");
    }
    assert_eq!(h.capsules(), 3);
    let s = h.log.session();
    let msgs = ModelView::build(s, s.leaf()).messages(s);
    let capsule_messages = msgs
        .iter()
        .filter(|m| blocks_text(&m.content).starts_with("# Context Capsule"))
        .count();
    assert_eq!(capsule_messages, 1);
    assert!(h.effective() <= h.config.limits().hard_limit);
}

#[test]
fn when_soba_compacts_again_the_previous_state_is_rolled_into_the_new_capsule() {
    let mut h = Agent::new();
    h.user(50);
    h.tool("Write", json!({"file_path": "/ws/early.rs"}), 100);
    for _ in 0..12 {
        h.turn(4000);
    }
    let r1 = h.explicit(None, None);
    let first_goal = {
        let s = h.log.session();
        s.entries()
            .iter()
            .rev()
            .find_map(|e| e.as_capsule())
            .unwrap()
            .state
            .goal
            .clone()
    };
    for _ in 0..12 {
        h.turn(4000);
    }
    let r2 = h.explicit(None, None);
    assert_eq!(
        (r1.outcome, r2.outcome),
        (Outcome::Completed, Outcome::Completed)
    );
    let s = h.log.session();
    let latest = s
        .entries()
        .iter()
        .rev()
        .find_map(|e| e.as_capsule())
        .unwrap();
    assert_eq!(latest.previous_checkpoint_id, r1.checkpoint_id);
    // The goal follows the latest substantive request; the first capsule's goal (one of the
    // user's requests) rolls forward among the requests, at least by its opening.
    let opening: String = first_goal.chars().take(40).collect();
    assert!(
        latest
            .state
            .requests
            .iter()
            .any(|r| r.starts_with(&opening)),
        "the first capsule's goal is kept among the requests: {:?}",
        latest.state.requests
    );
    let modified: Vec<&str> = latest
        .artifacts
        .modified_files
        .iter()
        .map(|f| f.path.as_str())
        .collect();
    assert!(
        modified.contains(&"early.rs"),
        "a file modified before the first capsule survives the second: {modified:?}"
    );
}

// §3 Deferred preflight barrier

#[test]
fn soft_triggers_record_a_pending_intent_and_never_mutate_the_session_in_the_background() {
    let mut h = Agent::new();
    for _ in 0..10 {
        h.turn(4000);
    }
    let entries_before = h.log.session().len();
    let settings = h.settings();
    let b = settings.barrier();
    let recorded = b.turn_complete(&mut h.log, None).unwrap();
    assert!(recorded);
    // turn_complete + intent, and no capsule.
    assert_eq!(h.log.session().len(), entries_before + 2);
    assert_eq!(h.capsules(), 0);
    // The compact runs at the next preflight barrier.
    h.user(10);
    let (results, _) = h.preflight_through(None);
    assert_eq!(results[0].trigger, Trigger::TurnComplete);
    assert_eq!(results[0].outcome, Outcome::Completed);
}

#[test]
fn immediately_before_the_next_inference_soba_creates_an_immutable_plan() {
    let mut h = Agent::new();
    for _ in 0..10 {
        h.turn(4000);
    }
    let leaf = h.log.session().leaf_id().unwrap().to_string();
    let Preflight::Compact(plan) = h.preflight() else {
        panic!("expected a compaction plan")
    };
    assert_eq!(plan.trigger, Trigger::AutoThreshold);
    assert_eq!(plan.expected_leaf, leaf);
    assert!(plan.tokens_before >= h.config.limits().soft_limit);
    assert!(!plan.summarized_entry_ids.is_empty());
    assert!(plan.first_kept_entry_id.is_some());
}

#[test]
fn completion_leaves_one_persistent_line_with_trigger_tokens_reclaimed_and_checkpoint() {
    let mut h = Agent::new();
    for _ in 0..12 {
        h.turn(4000);
    }
    let r = h.explicit(None, None);
    let line = r.completion_line();
    let ck = r.checkpoint_id.clone().unwrap();
    assert!(line.starts_with("user compact: "), "{line}");
    assert!(line.contains(" → "), "{line}");
    assert!(
        line.contains(&format!("(−{:.0}%)", r.reclaimed_percent)),
        "{line}"
    );
    assert!(line.contains(&ck), "{line}");
}

#[test]
fn a_compactions_duration_covers_its_planning_and_its_generation() {
    let mut h = Agent::new();
    for _ in 0..12 {
        h.turn(4000);
    }
    let settings = h.settings();
    let b = settings.barrier();
    let mut plan = b.explicit(&mut h.log, None).unwrap().unwrap();
    // The barrier timed the planning; a fixed figure makes the sum checkable.
    plan.planning_ms = 40;
    let r = commit(&mut h.log, &plan, generate_local(&plan), false, 7).unwrap();
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!((r.planning_ms, r.generation_ms), (40, 7));
    assert_eq!(r.duration_ms, 47, "durationMs is planning + generation");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["planningMs"], 40);
    assert_eq!(json["generationMs"], 7);
    assert_eq!(json["durationMs"], 47);
}

#[test]
fn an_abort_never_appends_a_late_capsule() {
    let mut h = Agent::new();
    for _ in 0..12 {
        h.turn(4000);
    }
    let settings = h.settings();
    let b = settings.barrier();
    let plan = b.explicit(&mut h.log, None).unwrap().unwrap();
    let len = h.log.session().len();
    let r = commit(&mut h.log, &plan, generate_local(&plan), true, 5).unwrap();
    assert_eq!(r.outcome, Outcome::Cancelled);
    assert_eq!(h.log.session().len(), len, "nothing appended");
    let r = commit(&mut h.log, &plan, Generated::Cancelled, false, 5).unwrap();
    assert_eq!(r.outcome, Outcome::Cancelled);
    assert_eq!(h.log.session().len(), len);
}

#[test]
fn a_changed_session_leaf_never_appends_a_late_capsule() {
    let mut h = Agent::new();
    for _ in 0..12 {
        h.turn(4000);
    }
    let settings = h.settings();
    let b = settings.barrier();
    let plan = b.explicit(&mut h.log, None).unwrap().unwrap();
    // New input lands on the session while the summary is being written (a model that
    // finishes late).
    h.user(10);
    let len = h.log.session().len();
    let late = Generated::State {
        state: CapsuleState {
            goal: "late".into(),
            ..Default::default()
        },
        quality: Quality::Model,
        degraded_reason: None,
    };
    let r = commit(&mut h.log, &plan, late, false, 5).unwrap();
    assert_eq!(r.outcome, Outcome::Stale);
    assert_eq!(r.reason, reasons::STALE);
    assert_eq!(h.log.session().len(), len);
    assert_eq!(h.capsules(), 0);
}

// §4 Triggers and priority

#[test]
fn soba_does_not_send_a_request_already_known_to_be_oversized() {
    let mut h = Agent::new();
    h.user(10);
    // One tool result larger than the whole window, with nothing older to summarize.
    h.tool("Bash", json!({"command": "cat huge.log"}), 60000);
    let (results, p) = h.preflight_through(None);
    match p {
        Preflight::Ready { tokens, .. } => {
            assert!(tokens <= h.config.limits().hard_limit);
            let r = results.last().unwrap();
            assert_eq!(r.trigger, Trigger::HardLimit);
            assert_eq!(r.outcome, Outcome::Completed);
            // The log keeps the output whole; the input carries it elided with a marker.
            let again = p_ready(&mut h);
            let msgs = ready_messages(&again);
            assert!(msgs
                .iter()
                .any(|m| blocks_text(&m.content).contains("elided to fit the context window")));
        }
        Preflight::Failed(r) => panic!("expected elision to fit: {r:?}"),
        Preflight::Compact(_) => unreachable!(),
    }
}

fn p_ready(h: &mut Agent) -> Preflight {
    h.preflight_through(None).1
}

#[test]
fn hard_limit_compaction_is_mandatory_even_with_auto_off_and_fits_under_the_hard_limit() {
    let mut h = Agent::new();
    h.push(EntryBody::Setting(SettingEntry {
        auto_compact: Some(false),
        ..Default::default()
    }));
    for _ in 0..14 {
        h.turn(4000);
    }
    assert!(h.effective() > h.config.limits().hard_limit);
    let (results, p) = h.preflight_through(None);
    assert_eq!(results[0].trigger, Trigger::HardLimit);
    assert_eq!(results[0].outcome, Outcome::Completed);
    let Preflight::Ready { tokens, .. } = p else {
        panic!()
    };
    assert!(tokens <= h.config.limits().hard_limit);
}

#[test]
fn when_the_continuation_cannot_fit_the_outcome_is_failed_and_no_input_is_produced() {
    // A tiny window where even the system prompt overflows: hard limit 20000 − 2000 − 2560
    // (the reserve scaled to the window) = 15440.
    let mut h = Agent::with(config(
        r#"{"model":{"contextWindow":20000,"maxOutputTokens":2000},"compaction":{"keepRecentTokens":1000}}"#,
    ));
    h.push(EntryBody::Setting(SettingEntry {
        system_tokens: Some(16000),
        ..Default::default()
    }));
    h.user(10);
    h.assistant(10);
    let (_, p) = h.preflight_through(None);
    let Preflight::Failed(r) = p else {
        panic!("expected failure, got {p:?}")
    };
    assert_eq!(r.outcome, Outcome::Failed);
    assert!(
        r.reason.starts_with(reasons::CONTEXT_BUDGET_EXCEEDED),
        "{}",
        r.reason
    );
}

#[test]
fn at_most_one_soft_attempt_runs_per_agent_turn_and_a_skipped_one_is_not_appended() {
    // keepRecentTokens so high that no soft compaction pays off.
    let mut h = Agent::with(config(
        r#"{"model":{"contextWindow":65000,"maxOutputTokens":8000},"compaction":{"keepRecentTokens":36000}}"#,
    ));
    for _ in 0..10 {
        h.turn(4000);
    }
    assert!(h.effective() >= h.config.limits().soft_limit);
    let (results, p) = h.preflight_through(None);
    assert!(matches!(p, Preflight::Ready { .. }));
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].outcome, Outcome::Skipped);
    assert_eq!(h.capsules(), 0);
    // Same turn (tool work, no new prompt): no second soft attempt.
    h.tool("Bash", json!({"command": "ls"}), 10);
    let (again, _) = h.preflight_through(None);
    assert!(again.is_empty(), "{again:?}");
    // A new turn may try again.
    h.user(10);
    let (next, _) = h.preflight_through(None);
    assert_eq!(next.len(), 1);
}

/// Tool work in one turn (no new prompt) until effective input is at least `tokens`.
fn tool_work_until(h: &mut Agent, tokens: u64) {
    while h.effective() < tokens {
        h.tool("Bash", json!({"command": "cargo test"}), 1500);
    }
}

#[test]
fn a_hard_limit_compaction_spends_the_turns_one_soft_attempt() {
    let mut h = Agent::new();
    h.user(100);
    let (soft, hard) = (h.config.limits().soft_limit, h.config.limits().hard_limit);
    tool_work_until(&mut h, hard + 1);
    let (results, _) = h.preflight_through(None);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].trigger, Trigger::HardLimit);
    assert_eq!(results[0].outcome, Outcome::Completed);
    // The same turn grows past the soft limit again: no soft attempt follows the hard one.
    tool_work_until(&mut h, soft);
    assert!(h.effective() < hard);
    let (again, p) = h.preflight_through(None);
    assert!(again.is_empty(), "{again:?}");
    assert!(matches!(p, Preflight::Ready { skipped: None, .. }));
    // The log says so too, for a reader that starts from the file (a restart).
    let (s, _) = read_session(&h.path).unwrap();
    assert!(turn_facts(&s, s.leaf()).soft_attempted);
    // A new turn may try again.
    h.user(10);
    let (next, _) = h.preflight_through(None);
    assert_eq!(next.len(), 1, "{next:?}");
    assert!(next[0].trigger.is_soft());
}

#[test]
fn a_cancelled_soft_attempt_spends_the_turns_one_soft_attempt() {
    let mut h = Agent::new();
    for _ in 0..10 {
        h.turn(4000);
    }
    let Preflight::Compact(plan) = h.preflight() else {
        panic!("expected a soft compaction at the soft limit")
    };
    assert!(plan.trigger.is_soft());
    let r = commit(&mut h.log, &plan, Generated::Cancelled, false, 5).unwrap();
    assert_eq!(r.outcome, Outcome::Cancelled);
    assert_eq!(h.capsules(), 0, "a cancellation appends no capsule");
    let recorded = h
        .log
        .session()
        .leaf()
        .map(|i| h.log.session().entry(i).body.clone());
    assert!(
        matches!(&recorded, Some(EntryBody::Compaction(c)) if c.outcome == Outcome::Cancelled),
        "{recorded:?}"
    );
    // Same turn: the cancelled attempt was the turn's one.
    h.tool("Bash", json!({"command": "ls"}), 10);
    let (again, p) = h.preflight_through(None);
    assert!(again.is_empty(), "{again:?}");
    assert!(matches!(p, Preflight::Ready { skipped: None, .. }));
    let (s, _) = read_session(&h.path).unwrap();
    assert!(turn_facts(&s, s.leaf()).soft_attempted);
    // An abort seen at commit counts the same way.
    h.user(10);
    let Preflight::Compact(plan) = h.preflight() else {
        panic!("a new turn may try again")
    };
    let r = commit(&mut h.log, &plan, generate_local(&plan), true, 5).unwrap();
    assert_eq!(r.outcome, Outcome::Cancelled);
    let (again, _) = h.preflight_through(None);
    assert!(again.is_empty(), "{again:?}");
}

#[test]
fn a_cancelled_attempt_on_a_moved_leaf_appends_nothing() {
    let mut h = Agent::new();
    for _ in 0..10 {
        h.turn(4000);
    }
    let Preflight::Compact(plan) = h.preflight() else {
        panic!("expected a soft compaction at the soft limit")
    };
    h.user(10);
    let len = h.log.session().len();
    let r = commit(&mut h.log, &plan, Generated::Cancelled, false, 5).unwrap();
    assert_eq!(r.outcome, Outcome::Cancelled);
    assert_eq!(
        h.log.session().len(),
        len,
        "the new turn is not charged for it"
    );
}

#[test]
fn milestone_and_plan_pivot_outrank_turn_complete_and_are_consumed_once() {
    let mut h = Agent::new();
    for _ in 0..10 {
        h.turn(4000);
    }
    let settings = h.settings();
    let b = settings.barrier();
    b.turn_complete(&mut h.log, None).unwrap();
    let (_, recorded) = b
        .checkpoint(&mut h.log, CheckpointKind::Milestone, "tests pass".into())
        .unwrap();
    assert!(recorded);
    h.user(10);
    let (results, _) = h.preflight_through(None);
    assert_eq!(results[0].trigger, Trigger::Milestone);
    assert_eq!(results[0].outcome, Outcome::Completed);
    // Consumed: the next turn's preflight does not compact for it again.
    h.user(10);
    let (next, _) = h.preflight_through(None);
    assert!(
        next.iter()
            .all(|r| r.trigger != Trigger::Milestone && r.trigger != Trigger::TurnComplete),
        "{next:?}"
    );
}

#[test]
fn pending_intents_survive_a_restart() {
    let mut h = Agent::new();
    for _ in 0..10 {
        h.turn(4000);
    }
    let settings = h.settings();
    let b = settings.barrier();
    b.checkpoint(
        &mut h.log,
        CheckpointKind::PlanPivot,
        "switch to sqlite".into(),
    )
    .unwrap();
    let path = h.path.clone();
    let header = h.log.session().header.clone();
    drop(std::mem::replace(
        &mut h.log,
        SessionLog::create(&h.dir.path().join("tmp.jsonl"), header, Durability::Flush).unwrap(),
    ));
    let (reopened, _) = SessionLog::open(&path, Durability::Flush).unwrap();
    h.log = reopened;
    let facts = turn_facts(h.log.session(), h.log.session().leaf());
    assert_eq!(facts.pending.len(), 1);
    assert_eq!(facts.pending[0].trigger, Trigger::PlanPivot);
}

#[test]
fn explicit_compact_bypasses_the_soft_roi_threshold() {
    let mut h = Agent::new();
    // Well under the soft limit: a soft trigger would never run, /compact does.
    for _ in 0..6 {
        h.turn(4000);
    }
    assert!(h.effective() < h.config.limits().soft_limit);
    let r = h.explicit(Some("focus on the parser"), None);
    assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    let s = h.log.session();
    let cap = s
        .entries()
        .iter()
        .rev()
        .find_map(|e| e.as_capsule())
        .unwrap();
    assert_eq!(cap.instructions.as_deref(), Some("focus on the parser"));
}

#[test]
fn explicit_compact_is_a_no_op_when_there_is_no_safe_history_before_the_retained_window() {
    let mut h = Agent::new();
    h.turn(2000);
    let len = h.log.session().len();
    let r = h.explicit(None, None);
    assert_eq!(r.outcome, Outcome::Skipped);
    assert_eq!(r.reason, reasons::NOTHING_BEFORE_RETAINED_WINDOW);
    assert_eq!(h.capsules(), 0);
    assert_eq!(h.log.session().len(), len + 1, "only the outcome record");
}

#[test]
fn context_overflow_gets_one_recovery_compact_and_at_most_one_retry_per_turn() {
    let mut h = Agent::new();
    for _ in 0..9 {
        h.turn(4000);
    }
    h.user(10);
    let settings = h.settings();
    let b = settings.barrier();
    let plan = b
        .overflow(&mut h.log, Default::default())
        .unwrap()
        .expect("first overflow plans a recovery");
    assert_eq!(plan.trigger, Trigger::ContextOverflow);
    let r = b.run_local(&mut h.log, &plan).unwrap();
    assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    let retry = b.preflight(&mut h.log).unwrap();
    assert!(
        matches!(retry, Preflight::Ready { .. }),
        "the one retry gets input"
    );
    // The retry overflows too: failed, and the same input is never handed out again.
    let second = b
        .overflow(&mut h.log, Default::default())
        .unwrap()
        .unwrap_err();
    assert_eq!(second.outcome, Outcome::Failed);
    assert_eq!(second.reason, reasons::OVERFLOW_RETRY_USED);
    assert!(matches!(
        b.preflight(&mut h.log).unwrap(),
        Preflight::Failed(_)
    ));
    // A new user turn starts fresh.
    h.user(10);
    assert!(matches!(
        b.preflight(&mut h.log).unwrap(),
        Preflight::Ready { .. } | Preflight::Compact(_)
    ));
}

// §6 Two-stage ROI validation

#[test]
fn after_generation_soba_measures_the_complete_continuation_exactly() {
    let mut h = Agent::new();
    h.push(EntryBody::Setting(SettingEntry {
        system_prompt: Some(filler(500)),
        tool_tokens: Some(700),
        ..Default::default()
    }));
    for _ in 0..12 {
        h.turn(4000);
    }
    let r = h.explicit(None, None);
    assert_eq!(r.outcome, Outcome::Completed);
    // The recorded "after" equals the budget of the new input: system + tools + capsule + tail.
    assert_eq!(r.tokens_after, h.effective());
    let s = h.log.session();
    let b = ModelView::build(s, s.leaf()).breakdown(s);
    assert_eq!(b.system, 500);
    assert_eq!(b.tools, 700);
}

#[test]
fn a_soft_capsule_that_misses_a_minimum_after_generation_is_skipped_and_not_appended() {
    let mut h = Agent::new();
    for _ in 0..10 {
        h.turn(4000);
    }
    let settings = h.settings();
    let b = settings.barrier();
    let Preflight::Compact(plan) = b.preflight(&mut h.log).unwrap() else {
        panic!()
    };
    // A capsule so large that the continuation reclaims too little.
    let bloated = CapsuleState {
        goal: filler(20000),
        ..Default::default()
    };
    let r = commit(
        &mut h.log,
        &plan,
        Generated::State {
            state: bloated,
            quality: Quality::Model,
            degraded_reason: None,
        },
        false,
        1,
    )
    .unwrap();
    assert_eq!(r.outcome, Outcome::Skipped, "{r:?}");
    assert!(
        r.reason.starts_with("post-generation ROI too low"),
        "{}",
        r.reason
    );
    assert_eq!(h.capsules(), 0);
}

#[test]
fn hard_limit_overflow_and_explicit_compacts_are_exempt_from_the_post_generation_roi_gate() {
    for trigger in [Trigger::HardLimit, Trigger::ContextOverflow, Trigger::User] {
        let mut h = Agent::new();
        // An overflow lowers the window below the refused request (by a fifth without
        // figures), so its recovery always reclaims a fifth: its exemption shows on a session
        // small enough that what it reclaims is under minReclaimableTokens.
        let turns = if trigger == Trigger::ContextOverflow {
            5
        } else {
            14
        };
        for _ in 0..turns {
            h.turn(4000);
        }
        h.user(10);
        let settings = h.settings();
        let b = settings.barrier();
        let plan = match trigger {
            Trigger::HardLimit => match b.preflight(&mut h.log).unwrap() {
                Preflight::Compact(p) => *p,
                other => panic!("{other:?}"),
            },
            Trigger::ContextOverflow => {
                b.overflow(&mut h.log, Default::default()).unwrap().unwrap()
            }
            _ => b.explicit(&mut h.log, None).unwrap().unwrap(),
        };
        assert_eq!(plan.trigger, trigger);
        // Reclaims well under minSavingsRatio, yet still fits and shrinks.
        let room = plan.tokens_before - plan.tail_tokens - plan.overhead_tokens;
        let state = CapsuleState {
            goal: filler(
                (room as usize)
                    .saturating_sub(6000)
                    .min(plan.limits.hard_limit as usize - plan.tail_tokens as usize - 2000),
            ),
            ..Default::default()
        };
        let r = commit(
            &mut h.log,
            &plan,
            Generated::State {
                state,
                quality: Quality::Model,
                degraded_reason: None,
            },
            false,
            1,
        )
        .unwrap();
        assert_eq!(r.outcome, Outcome::Completed, "{trigger}: {r:?}");
        let c = &settings.config.compaction;
        let reclaimed = r.tokens_before - r.tokens_after;
        assert!(
            r.reclaimed_percent < 100.0 * c.min_savings_ratio
                || reclaimed < c.min_reclaimable_tokens,
            "{trigger}: {} % ({reclaimed} tokens) passes the soft gate anyway",
            r.reclaimed_percent
        );
    }
}

// §7 Timeout and fallback (engine side: the deterministic capsule)

#[test]
fn the_local_capsule_without_a_model_configured_is_local_not_degraded() {
    let mut h = Agent::new();
    for _ in 0..12 {
        h.turn(4000);
    }
    let r = h.explicit(None, None);
    assert_eq!(r.quality, Some(Quality::Local));
    assert!(!r.fallback, "no model configured is not a fallback");
    assert!(r.completion_line().ends_with(", local"), "{r:?}");
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Event {
        Cancel,
        NewInput,
        Rewind,
        Nothing,
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            Just(Event::Cancel),
            Just(Event::NewInput),
            Just(Event::Rewind),
            Just(Event::Nothing)
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// A cancelled or stale operation appends nothing: random interleavings of cancel, new
        /// input and leaf changes between plan and commit.
        #[test]
        fn a_cancelled_or_stale_operation_appends_nothing(
            turns in 8usize..14,
            events in proptest::collection::vec(event(), 0..3),
            model in any::<bool>(),
        ) {
            let mut h = Agent::new();
            for _ in 0..turns {
                h.turn(4000);
            }
            let settings = h.settings();
            let b = settings.barrier();
            let plan = match b.explicit(&mut h.log, None).unwrap() {
                Ok(p) => p,
                Err(r) => { prop_assert_ne!(r.outcome, Outcome::Completed); return Ok(()); }
            };
            let mut aborted = false;
            let mut changed = false;
            for e in &events {
                match e {
                    Event::Cancel => aborted = true,
                    Event::NewInput => { h.user(5); changed = true; }
                    Event::Rewind => {
                        let to = h.log.session().entries()[1].id.clone();
                        h.push(EntryBody::Rewind(RewindEntry { to }));
                        changed = true;
                    }
                    Event::Nothing => {}
                }
            }
            let capsules = h.capsules();
            let len = h.log.session().len();
            let generated = if model {
                Generated::State { state: CapsuleState { goal: "g".into(), ..Default::default() }, quality: Quality::Model, degraded_reason: None }
            } else {
                generate_local(&plan)
            };
            let r = commit(&mut h.log, &plan, generated, aborted, 1).unwrap();
            if aborted {
                prop_assert_eq!(r.outcome, Outcome::Cancelled);
            } else if changed {
                prop_assert_eq!(r.outcome, Outcome::Stale);
            }
            if aborted || changed {
                prop_assert_eq!(h.capsules(), capsules);
                prop_assert_eq!(h.log.session().len(), len);
            } else {
                prop_assert_eq!(r.outcome, Outcome::Completed);
            }
        }

        /// After a completed hard-limit compaction the continuation is under the hard limit.
        #[test]
        fn after_a_completed_hard_limit_compaction_the_continuation_is_under_the_hard_limit(
            sizes in proptest::collection::vec(200usize..9000, 12..40),
            system in 0u64..6000,
        ) {
            let mut h = Agent::new();
            h.push(EntryBody::Setting(SettingEntry { system_tokens: Some(system), ..Default::default() }));
            for s in sizes {
                h.turn(s);
            }
            let over = h.effective() > h.config.limits().hard_limit;
            let (results, p) = h.preflight_through(None);
            if let Some(r) = results.iter().find(|r| r.trigger == Trigger::HardLimit) {
                prop_assert!(over);
                if r.outcome == Outcome::Completed {
                    prop_assert!(r.tokens_after <= h.config.limits().hard_limit);
                    prop_assert!(h.effective() <= h.config.limits().hard_limit);
                }
            }
            match p {
                Preflight::Ready { tokens, .. } => prop_assert!(tokens <= h.config.limits().hard_limit),
                Preflight::Failed(r) => prop_assert_eq!(r.outcome, Outcome::Failed),
                Preflight::Compact(_) => prop_assert!(false, "preflight_through settles"),
            }
        }
    }
}

#[test]
fn provider_usage_beyond_the_logged_parts_is_its_own_part_and_compact_says_so() {
    let mut h = Agent::new();
    h.user(200);
    // An imported session: the provider counted a system prompt and tools the log never saw.
    h.push(EntryBody::Message(MessageEntry {
        role: Role::Assistant,
        content: vec![ContentBlock::text(filler(50))],
        usage: Some(Usage {
            input: 30000,
            cache_read: 0,
            cache_write: 0,
            output: 50,
        }),
        model: None,
        synthetic: false,
    }));
    let s = h.log.session();
    let report = soba::inspect::budget_report(s, h.config.limits(), true, "test", None);
    let parts = report.breakdown.parts;
    let logged = parts.total() - parts.not_in_log;
    assert!(logged < 1000, "{logged}");
    assert_eq!(
        parts.not_in_log,
        report.effective_tokens - logged,
        "the difference is its own part"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["breakdown"]["notInLog"], parts.not_in_log);
    // /compact cannot help, and says why and what to do.
    let r = h.explicit(None, None);
    assert_eq!(r.outcome, Outcome::Skipped, "{r:?}");
    assert!(r.reason.contains("not in the log"), "{}", r.reason);
    assert!(r.reason.contains("systemPrompt"), "{}", r.reason);
}

/// A model that answers every request with a capsule far longer than any history.
struct VerboseSummarizer;

impl soba::summarize::summarizer::Summarizer for VerboseSummarizer {
    fn describe(&self) -> String {
        "verbose test summarizer".into()
    }

    fn summarize<'a>(
        &'a self,
        _req: &'a soba::summarize::summarizer::SummaryRequest,
        _progress: &'a (dyn Fn(u8) + Send + Sync),
        _cancel: tokio_util::sync::CancellationToken,
    ) -> futures::future::BoxFuture<
        'a,
        Result<CapsuleState, soba::summarize::summarizer::SummaryError>,
    > {
        Box::pin(async move {
            Ok(CapsuleState {
                goal: filler(6000),
                next_steps: vec!["run the tests".into()],
                ..CapsuleState::default()
            })
        })
    }
}

#[test]
fn an_explicit_compact_that_would_not_shrink_says_what_is_not_in_the_log() {
    let mut h = Agent::with(config(
        r#"{"model":{"name":"test","contextWindow":65000,"maxOutputTokens":8000},
            "compaction":{"keepRecentTokens":500}}"#,
    ));
    for _ in 0..6 {
        h.turn(400);
    }
    let counted = soba::inspect::budget_report(h.log.session(), h.config.limits(), true, "t", None)
        .breakdown
        .parts
        .total();
    // The provider counted a little more than the log holds: a system prompt never recorded.
    h.push(EntryBody::Message(MessageEntry {
        role: Role::Assistant,
        content: vec![ContentBlock::text("done")],
        usage: Some(Usage {
            input: counted + 40,
            cache_read: 0,
            cache_write: 0,
            output: 2,
        }),
        model: None,
        synthetic: false,
    }));
    let r = h.explicit(None, Some(&VerboseSummarizer));
    assert_eq!(r.outcome, Outcome::Skipped, "{r:?}");
    assert!(r.reason.contains("would not be smaller"), "{}", r.reason);
    assert!(r.reason.contains("not in the log"), "{}", r.reason);
}
