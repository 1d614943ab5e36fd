//! The window a provider's context-overflow error teaches a session: lowered by the recovery,
//! kept in the log across a reload, shown by the budget with where it came from, raised again
//! when a larger input succeeds (`soba_core::window`, `Barrier::overflow`).

use crate::support::agent::{config, Agent};

use soba_core::compaction::run::Preflight;
use soba_core::session::entry::*;
use soba_core::session::log::read_session;
use soba_core::window::{OverflowFigures, WindowSource};

/// contextWindow 64000, maxOutputTokens 2000, keepRecentTokens 20000: hard limit 53808.
const WINDOW_64K: &str = r#"{"model":{"name":"test","contextWindow":64000,"maxOutputTokens":2000},
                             "compaction":{"keepRecentTokens":20000}}"#;

/// An agent at about 25k tokens in its seventh turn, under [`WINDOW_64K`].
fn agent_at_25k() -> Agent {
    let mut h = Agent::with(config(WINDOW_64K));
    for _ in 0..6 {
        h.turn(4000);
    }
    h.user(500);
    h
}

fn figures(window: u64, tokens: u64) -> OverflowFigures {
    OverflowFigures {
        provider_window: Some(window),
        provider_tokens: Some(tokens),
    }
}

fn budget(h: &Agent) -> soba::inspect::BudgetReport {
    let s = h.log.session();
    soba::inspect::budget_report(
        s,
        h.config.limits_under(s.window_setting()),
        true,
        "test",
        None,
    )
}

#[test]
fn an_overflow_lowers_the_window_the_recovery_fits_it_and_a_reload_keeps_it() {
    let mut h = agent_at_25k();
    let before = h.effective();
    let settings = h.settings();
    let b = settings.barrier();
    let plan = b
        .overflow(&mut h.log, figures(24_000, before + 500))
        .unwrap()
        .expect("a recovery plan");
    // The provider counted 500 more than SOBA: its window in SOBA's count is that much smaller.
    let learned = (24_000.0 * before as f64 / (before + 500) as f64).floor() as u64;
    assert_eq!(plan.limits.context_window, learned);
    let r = b.run_local(&mut h.log, &plan).unwrap();
    assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    assert_eq!(r.context_window, learned);
    assert!(
        r.reason.contains("below keepRecentTokens 20000"),
        "{}",
        r.reason
    );
    let Preflight::Ready { tokens, .. } = b.preflight(&mut h.log).unwrap() else {
        panic!("the retry gets input");
    };
    assert!(
        tokens <= plan.limits.hard_limit,
        "{tokens} > {}",
        plan.limits.hard_limit
    );

    // The log holds the setting and the capsule says how short its tail is.
    let (session, _) = read_session(&h.path).unwrap();
    let w = session
        .window_setting()
        .expect("the window survives a reload");
    assert_eq!(w.context_window, Some(learned));
    assert_eq!(w.source, WindowSource::ProviderError);
    assert_eq!(w.figures, figures(24_000, before + 500));
    assert_eq!(w.counted_tokens, Some(before));
    let capsule = session
        .entries()
        .iter()
        .find_map(|e| e.as_capsule().cloned())
        .unwrap();
    let short = capsule
        .tokens
        .short_tail
        .expect("the tail is below keepRecentTokens");
    assert_eq!(short.keep_recent_tokens, 20_000);
    assert_eq!(short.context_window, learned);
    assert_eq!(short.learned_from, Some(WindowSource::ProviderError));
    assert!(short.retained_tail_tokens < 20_000);

    let report = budget(&h);
    assert_eq!(report.context_window, learned);
    assert_eq!(report.window_source, "provider_error");
    assert_eq!(report.learned_window, Some(*w));
}

#[test]
fn the_next_step_of_the_turn_stays_under_the_learned_window() {
    let mut h = agent_at_25k();
    let before = h.effective();
    let settings = h.settings();
    let b = settings.barrier();
    let plan = b
        .overflow(&mut h.log, figures(24_000, before))
        .unwrap()
        .unwrap();
    b.run_local(&mut h.log, &plan).unwrap();
    let hard = plan.limits.hard_limit;
    // The agent's turn goes on: tool calls and results, each followed by a preflight.
    for step in 0..6 {
        let id = format!("step{step}");
        h.call(&[(
            id.as_str(),
            "read_file",
            serde_json::json!({"path": "a.rs"}),
        )]);
        h.result(&id, "read_file", 1500);
        match b.preflight(&mut h.log).unwrap() {
            Preflight::Ready { tokens, .. } => assert!(tokens <= hard, "{tokens} > {hard}"),
            Preflight::Compact(p) => {
                assert_eq!(
                    p.limits.hard_limit, hard,
                    "compacts against the learned limit"
                );
                b.run_local(&mut h.log, &p).unwrap();
            }
            Preflight::Failed(r) => panic!("step {step} failed: {r:?}"),
        }
    }
}

#[test]
fn a_successful_input_larger_than_the_named_window_raises_it_again() {
    let mut h = agent_at_25k();
    let settings = h.settings();
    let b = settings.barrier();
    let plan = b
        .overflow(&mut h.log, figures(24_000, 26_000))
        .unwrap()
        .unwrap();
    b.run_local(&mut h.log, &plan).unwrap();
    // A reply within the named window keeps it.
    h.push(EntryBody::Message(MessageEntry {
        role: Role::Assistant,
        content: vec![ContentBlock::text("ok")],
        usage: Some(Usage {
            input: 20_000,
            ..Usage::default()
        }),
        model: None,
        synthetic: false,
    }));
    b.preflight(&mut h.log).unwrap();
    assert_eq!(budget(&h).window_source, "provider_error");
    // The user switched to a larger model: an input above the named window succeeded.
    h.user(100);
    h.push(EntryBody::Message(MessageEntry {
        role: Role::Assistant,
        content: vec![ContentBlock::text("ok")],
        usage: Some(Usage {
            input: 30_000,
            ..Usage::default()
        }),
        model: None,
        synthetic: false,
    }));
    b.preflight(&mut h.log).unwrap();
    let report = budget(&h);
    assert_eq!(report.context_window, 64_000, "the configured window again");
    assert_eq!(report.window_source, "configured");
    let (session, _) = read_session(&h.path).unwrap();
    let w = session.window_setting().unwrap();
    assert_eq!(w.context_window, None);
    assert_eq!(w.source, WindowSource::Usage);
    assert_eq!(w.reported_input, Some(30_000));
}

#[test]
fn an_overflow_without_figures_lowers_the_hard_limit_below_the_refused_request() {
    let mut h = agent_at_25k();
    let before = h.effective();
    let settings = h.settings();
    let b = settings.barrier();
    let plan = b
        .overflow(&mut h.log, OverflowFigures::default())
        .unwrap()
        .unwrap();
    assert_eq!(plan.limits.hard_limit, (before as f64 * 0.8).floor() as u64);
    let r = b.run_local(&mut h.log, &plan).unwrap();
    assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    assert_eq!(budget(&h).window_source, "refused_request");
}

#[test]
fn a_provider_window_with_no_room_for_input_fails_the_recovery_and_says_what_to_change() {
    let mut h = agent_at_25k();
    let settings = h.settings();
    let b = settings.barrier();
    let r = b
        .overflow(&mut h.log, figures(8192, 26_000))
        .unwrap()
        .expect_err("no recovery");
    assert_eq!(r.outcome, Outcome::Failed);
    assert!(r.reason.contains("8192"), "{}", r.reason);
    assert!(r.reason.contains("model.maxOutputTokens"), "{}", r.reason);
    assert!(
        h.log.session().window_setting().is_none(),
        "nothing learned"
    );
    let Preflight::Failed(refused) = b.preflight(&mut h.log).unwrap() else {
        panic!("the failed recovery ends the turn's input");
    };
    // The provider reported one overflow, not two: the preflight says the recovery failed and
    // why, in the recovery's own words.
    assert!(
        !refused.reason.contains("again after the recovery compact"),
        "{}",
        refused.reason
    );
    assert!(
        refused
            .reason
            .contains("the recovery compact could not make room"),
        "{}",
        refused.reason
    );
    assert!(refused.reason.contains(&r.reason), "{}", refused.reason);
    assert!(soba_core::compaction::reasons::is_overflow_exhausted(
        &refused.reason
    ));
}

/// The recovery finds no history to compact (the task alone is what overflowed): the provider
/// reported one overflow, and the preflight that follows says the recovery could not make room,
/// in the recovery's own words, not that the provider overflowed a second time.
#[test]
fn a_recovery_with_no_history_to_compact_is_not_reported_as_a_second_overflow() {
    let mut h = Agent::with(config(WINDOW_64K));
    h.user(30_000);
    let settings = h.settings();
    let b = settings.barrier();
    assert!(matches!(
        b.preflight(&mut h.log).unwrap(),
        Preflight::Ready { .. }
    ));
    let r = match b.overflow(&mut h.log, OverflowFigures::default()).unwrap() {
        Ok(plan) => b.run_local(&mut h.log, &plan).unwrap(),
        Err(r) => r,
    };
    assert_ne!(r.outcome, Outcome::Completed, "{r:?}");
    let Preflight::Failed(refused) = b.preflight(&mut h.log).unwrap() else {
        panic!("the failed recovery ends the turn's input");
    };
    assert!(
        !refused.reason.contains("again after the recovery compact"),
        "{}",
        refused.reason
    );
    assert!(
        refused
            .reason
            .contains("the recovery compact could not make room"),
        "{}",
        refused.reason
    );
    assert!(refused.reason.contains(&r.reason), "{}", refused.reason);
}
