//! Budget and preflight cost against session length: must stay flat, because a preflight only
//! touches the model input (bounded by the window), never the whole history.
//!
//! - `budget/N`: the budget from a fresh model view (what a rebuild of the tally costs).
//! - `preflight_check/N`: the preflight decision on the session's kept tally.
//! - `append_and_check/N`: one more message joins the session (counted, tally updated), then
//!   the decision.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use soba_core::budget::Budget;
use soba_core::compaction::run::Barrier;
use soba_core::config::Config;
use soba_core::session::entry::Entry;
use soba_core::session::view::ModelView;
use soba_core::tool_mapping::ToolMapping;

#[path = "support.rs"]
mod support;

fn budget_flat(c: &mut Criterion) {
    let config = Config::default();
    let limits = config.limits();
    let sizes: &[usize] = if support::measuring() {
        &[1_000, 10_000, 100_000]
    } else {
        &[1_000]
    };
    let mut g = c.benchmark_group("budget");
    for &n in sizes {
        let s = support::compacted_session(n, 400);
        // Warm the per-entry count cache as a running daemon would have it.
        let view = ModelView::build(&s, s.leaf());
        let _ = view.breakdown(&s);
        g.bench_with_input(BenchmarkId::from_parameter(n), &s, |b, s| {
            b.iter(|| {
                let view = ModelView::build(s, s.leaf());
                let (breakdown, anchor) = (view.breakdown(s), view.usage_anchor(s));
                Budget::measure(
                    limits,
                    breakdown,
                    anchor,
                    s.calibration(),
                    s.unseen_at(s.leaf(), anchor),
                )
                .effective_tokens
            })
        });
    }
    g.finish();

    let mapping = ToolMapping::default();
    let barrier = Barrier {
        config: &config,
        mapping: &mapping,
    };
    let mut g = c.benchmark_group("preflight_check");
    for &n in sizes {
        let s = support::compacted_session(n, 400);
        g.bench_with_input(BenchmarkId::from_parameter(n), &s, |b, s| {
            b.iter(|| barrier.check(s).budget.effective_tokens)
        });
    }
    g.finish();

    let mut g = c.benchmark_group("append_and_check");
    for &n in sizes {
        let mut s = support::compacted_session(n, 400);
        let _ = barrier.check(&s);
        let mut i = n;
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                i += 1;
                let parent = s.leaf_id().map(str::to_string);
                s.push(Entry::new(format!("x{i}"), parent, support::body(i)))
                    .expect("a fresh id on the leaf");
                barrier.check(&s).budget.effective_tokens
            })
        });
    }
    g.finish();
}

criterion_group!(benches, budget_flat);
criterion_main!(benches);
