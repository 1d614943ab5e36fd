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
    for k in 0..200 {
        let (results, p) = h.preflight_through(None);
        for r in &results {
            if r.outcome == Outcome::Completed {
                completed += 1;
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
