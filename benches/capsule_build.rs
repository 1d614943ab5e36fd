//! Building the local capsule against the length of the history it folds: one pass indexes
//! calls, results, turns and user messages, so the cost must grow linearly with the entries.
//!
//! `plan_and_local_capsule/N`: plan an explicit compaction of a never-compacted session of N
//! entries (cut, facts, artifacts, the local capsule), as `soba compact` does. The ratio of the
//! medians at 24k and 6k entries against the entry ratio (4×) is the linearity figure.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use soba_core::compaction::plan::plan;
use soba_core::compaction::plan::PlanRequest;
use soba_core::config::Config;
use soba_core::session::trigger::Trigger;
use soba_core::tool_mapping::ToolMapping;

#[path = "support.rs"]
mod support;

fn capsule_build(c: &mut Criterion) {
    let sizes: &[usize] = if support::measuring() {
        &[6_000, 24_000, 60_000]
    } else {
        &[1_000]
    };
    let config = Config::default();
    let mapping = ToolMapping::default();
    let mut g = c.benchmark_group("plan_and_local_capsule");
    g.sample_size(10);
    for &n in sizes {
        let s = support::compacted_session(n, usize::MAX);
        g.bench_with_input(BenchmarkId::from_parameter(n), &s, |b, s| {
            b.iter(|| {
                let req = PlanRequest {
                    trigger: Trigger::User,
                    requested: false,
                    instructions: None,
                    title: None,
                    config: &config,
                    mapping: &mapping,
                    operation_id: "op_bench".into(),
                };
                plan(s, s.leaf(), &req).expect("a plan")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, capsule_build);
criterion_main!(benches);
