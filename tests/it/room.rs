//! Issue 38: a compaction leaves the agent room to work, and a window too small for the agent's
//! steps stops compacting instead of writing capsule after capsule.

use crate::support::agent::{config, Agent};

use serde_json::json;
use soba_core::compaction::reasons;
use soba_core::compaction::run::Preflight;
use soba_core::compaction::storm::STORM;
use soba_core::session::entry::Outcome;

/// A 16k window on the defaults: the reserve and the output scale with the window.
const WINDOW_16K: &str = r#"{"model":{"name":"test","contextWindow":16384}}"#;

/// One agent step: a tool call with a result of about `tokens` tokens.
fn step(h: &mut Agent, k: usize, tokens: usize) {
    h.tool(
        "Read",
        json!({"file_path": format!("/ws/src/f{k}.rs")}),
        tokens,
    );
}

/// A loop whose steps cannot be made smaller (replies of 4.5k tokens, nothing to elide) in a
/// 16k window (hard limit 10191): every step fills the room a compaction leaves, compaction
/// after compaction, until the breaker stops it.
#[test]
fn a_loop_that_would_storm_is_stopped_with_its_reason_and_few_capsules() {
    let mut h = Agent::with(config(WINDOW_16K));
    h.user(200);
    let mut stopped = None;
    for _ in 0..200 {
        match h.preflight_through(None).1 {
            Preflight::Failed(r) => {
                stopped = Some(r);
                break;
            }
            _ => {
                h.assistant(4500);
            }
        }
    }
    let r = stopped.expect("the breaker stops the loop");
    assert_eq!(r.outcome, Outcome::Failed);
    assert!(
        r.reason
            .starts_with(&format!("{}: {STORM}", reasons::CONTEXT_BUDGET_EXCEEDED)),
        "{}",
        r.reason
    );
    assert!(h.capsules() <= 4, "{} capsules", h.capsules());
    for _ in 0..20 {
        assert!(matches!(h.preflight(), Preflight::Failed(_)));
    }
    assert!(h.capsules() <= 4, "asking again writes none");
    let explicit = h.explicit(None, None);
    assert_eq!(explicit.outcome, Outcome::Completed, "{}", explicit.reason);
}

#[test]
fn a_sixteen_k_window_on_the_defaults_leaves_room_for_three_steps_after_each_compaction() {
    let mut h = Agent::with(config(WINDOW_16K));
    let limits = h.config.limits();
    // 16384 − 4096 output − 2097 reserve (8192 × 16384 / 64000).
    assert_eq!(limits.hard_limit, 16_384 - 4096 - 2097);
    h.user(200);
    let mut completed = 0;
    let mut storm = None;
    let mut inferences = 0;
    // The requests (inferences) a compaction ran before.
    let mut compacted_at = Vec::new();
    for k in 0..200 {
        let (results, p) = h.preflight_through(None);
        for r in &results {
            if r.outcome == Outcome::Completed {
                completed += 1;
                compacted_at.push(inferences);
                assert!(
                    r.tokens_after <= limits.room_after_compaction(),
                    "a compaction leaves room: {} of {} ({})",
                    r.tokens_after,
                    limits.hard_limit,
                    r.reason
                );
            }
        }
        match p {
            Preflight::Ready { .. } => inferences += 1,
            Preflight::Failed(r) => {
                storm = Some(r);
                break;
            }
            Preflight::Compact(_) => unreachable!("preflight_through settles"),
        }
        step(&mut h, k, 2900);
    }
    assert!(completed >= 1, "the window compacted");
    assert!(inferences > completed, "work gets done between compactions");
    // Each compaction leaves room for three steps of 2.9k tokens (the largest results of the
    // tail elided): a compaction every third inference at most, where one came at nearly every
    // inference before issue 38 (46 capsules in 48). No storm: the loop works to its end.
    assert!(storm.is_none(), "{storm:?}");
    assert!(
        h.capsules() * 3 <= inferences + 3,
        "{} capsules in {inferences} inferences",
        h.capsules()
    );
    // Not only on average: each compaction leaves room for the next two steps, so no two come
    // within three requests.
    assert!(
        compacted_at.windows(2).all(|w| w[1] - w[0] >= 3),
        "compactions before requests {compacted_at:?}"
    );
}

#[test]
fn a_compaction_in_a_roomy_window_leaves_the_input_below_the_room_target() {
    let mut h = Agent::with(config(
        r#"{"model":{"name":"test","contextWindow":65000,"maxOutputTokens":8000}}"#,
    ));
    let limits = h.config.limits();
    for _ in 0..4 {
        h.turn(12_000);
    }
    let (results, p) = h.preflight_through(None);
    let done: Vec<_> = results
        .iter()
        .filter(|r| r.outcome == Outcome::Completed)
        .collect();
    assert_eq!(done.len(), 1, "{results:?}");
    assert!(
        done[0].tokens_after <= limits.room_after_compaction(),
        "{} > {}",
        done[0].tokens_after,
        limits.room_after_compaction()
    );
    assert!(matches!(p, Preflight::Ready { .. }));
}

/// Claude Code at 32k: its system prompt and tools alone do not fit the hard limit, so no
/// compaction can make room. The preflight refuses at once with one error that says so and names
/// the smallest window that holds them with the room a compaction leaves; nothing is written,
/// and an explicit compaction and `soba context`'s outlook say the same.
#[test]
fn a_fixed_part_over_the_hard_limit_is_refused_with_the_window_that_would_hold_it() {
    use soba_core::session::entry::{EntryBody, SettingEntry};
    let mut h = Agent::with(config(r#"{"model":{"name":"test","contextWindow":32768}}"#));
    h.push(EntryBody::Setting(SettingEntry {
        system_prompt: Some(crate::support::agent::filler(14_000)),
        tool_tokens: Some(10_000),
        ..Default::default()
    }));
    for k in 0..3 {
        h.user(300);
        step(&mut h, k, 500);
    }
    let hard_limit = h.config.limits().hard_limit;
    let fixed = {
        let s = h.log.session();
        let b = h.settings().barrier().measure(s);
        b.fixed_tokens()
    };
    assert!(fixed >= hard_limit, "{fixed} vs {hard_limit}");
    let lines = std::fs::read_to_string(&h.path).unwrap().lines().count();
    let Preflight::Failed(r) = h.preflight() else {
        panic!("refused")
    };
    assert_eq!(r.outcome, Outcome::Failed);
    eprintln!("{}", r.reason);
    let prefix = format!(
        "{}: the system prompt and the tool schemas alone need {fixed} tokens, the hard limit is {hard_limit}",
        reasons::CONTEXT_BUDGET_EXCEEDED
    );
    assert!(r.reason.starts_with(&prefix), "{}", r.reason);
    let window: u64 = r
        .reason
        .split(reasons::LARGER_WINDOW)
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("names a window: {}", r.reason));
    // That window's limits leave the fixed part within the room a compaction leaves; a
    // thousand tokens less would not.
    let at = |w: u64| {
        config(&format!(
            r#"{{"model":{{"name":"test","contextWindow":{w}}}}}"#
        ))
    };
    let room = |w: u64| {
        (at(w).limits().hard_limit as f64 * soba_core::limits::ROOM_AFTER_COMPACTION) as u64
    };
    assert!(room(window) >= fixed, "{window}: room {}", room(window));
    assert!(room(window - 1000) < fixed, "{window} is not the smallest");
    assert_eq!(
        std::fs::read_to_string(&h.path).unwrap().lines().count(),
        lines,
        "nothing is written: no compaction was attempted"
    );
    assert_eq!(h.capsules(), 0);
    // An explicit compaction cannot help either, and says why in the same words.
    let explicit = h.explicit(None, None);
    assert!(explicit.reason.starts_with(&prefix), "{}", explicit.reason);
    // What `soba context` shows before sending.
    let outlook = soba::inspect::preflight_outlook(h.log.session(), &h.config);
    assert_eq!(outlook.decision, "refused");
    assert!(outlook.reason.starts_with(&prefix), "{}", outlook.reason);
}
