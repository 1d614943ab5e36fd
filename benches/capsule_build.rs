//! Building the local capsule against the length of the history it folds: one pass indexes
//! calls, results, turns and user messages, so the cost must grow linearly with the entries.
//!
//! `plan_and_local_capsule/N`: plan an explicit compaction of a never-compacted session of N
//! entries (cut, facts, artifacts, the local capsule), as `soba compact` does. The ratio of the
//! medians at 24k and 6k entries against the entry ratio (4×) is the linearity figure.
//!
//! `plan_real_entries/N`: the same plan over N real entries (the Claude Code fixtures chained
//! copy after copy, see `common/real_log.rs`), each entry's count already cached as a resumed
//! session has it from its side file. Real entries carry long tool results, thinking blocks
//! and shell output in many scripts: what the fact and failure patterns scan. Skipped, with a
//! line saying so, without `../shared`.
//!
//! Then, as a process (`soba compact --json` on a fresh copy of a log of 6,000 and of 59,736
//! chained real entries, counts recorded in its side file as a resumed session has them):
//! wall and CPU time, the reported planning and generation milliseconds, and the peak RSS
//! against the log's size: what a user waits for and what a writer holds. Each figure is
//! printed beside its target (issue 40): planning ≤ 50 ms at 6,000 entries, the whole
//! process ≤ 1 s at 59,736, a writer's peak RSS ≤ 1.5× the log. With `SOBA_BASELINE` set
//! to another build of `soba` (the main branch's), that build is timed first on the same
//! logs, back to back, so that both sets of figures come from one machine state.

use criterion::{criterion_group, BenchmarkId, Criterion};
use soba_core::compaction::plan::plan;
use soba_core::compaction::plan::PlanRequest;
use soba_core::config::Config;
use soba_core::session::trigger::Trigger;
use soba_core::tool_mapping::ToolMapping;

#[path = "support.rs"]
mod support;

// This bench chains the fixtures in memory: the log writer and checker go unused.
#[allow(dead_code)]
#[path = "common/real_log.rs"]
mod real_log;

use soba_core::session::Session;

fn request<'a>(config: &'a Config, mapping: &'a ToolMapping) -> PlanRequest<'a> {
    PlanRequest {
        trigger: Trigger::User,
        requested: false,
        instructions: None,
        title: None,
        config,
        mapping,
        operation_id: "op_bench".into(),
    }
}

/// A session of the first `n` chained real entries, every count taken once.
fn real_session(
    header: &soba_core::session::entry::SessionHeader,
    sources: &[Vec<soba_core::session::entry::Entry>],
    n: usize,
) -> Session {
    let mut s = Session::new(header.clone(), soba_core::tokens::TokenizerKind::O200kBase);
    for e in real_log::chained(sources).take(n) {
        s.push(e).expect("a chained entry joins the session");
    }
    for i in 0..s.len() {
        s.tokens_of(i);
    }
    s
}

/// The long real-entries session: about 60k entries, where a cut exists. The input starts
/// at the source agent's own latest compaction, so at some lengths (60,000) what follows it
/// is all within keepRecentTokens and there is nothing to compact.
const REAL_LONG: usize = 59_736;

fn plan_real_entries(c: &mut Criterion) {
    let Some((header, sources)) = real_log::claude_code_fixtures() else {
        eprintln!(
            "SKIPPED: plan_real_entries: the Claude Code fixtures \
             (../shared/fixtures/transcripts/claude-code) are missing"
        );
        return;
    };
    let sizes: &[usize] = if support::measuring() {
        &[6_000, REAL_LONG]
    } else {
        &[1_000]
    };
    let config = Config::default();
    let mapping = ToolMapping::default();
    let mut g = c.benchmark_group("plan_real_entries");
    g.sample_size(10);
    for &n in sizes {
        let s = real_session(&header, &sources, n);
        g.bench_with_input(BenchmarkId::from_parameter(n), &s, |b, s| {
            b.iter(|| plan(s, s.leaf(), &request(&config, &mapping)).expect("a plan"))
        });
    }
    g.finish();
}

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
            b.iter(|| plan(s, s.leaf(), &request(&config, &mapping)).expect("a plan"))
        });
    }
    g.finish();
}

criterion_group!(benches, capsule_build, plan_real_entries);

/// The argument that makes this bench binary serve [`compact_process`].
const COMPACT_PROCESS_ARG: &str = "--compact-process";

/// One `soba compact --json` run: wall and CPU seconds, peak RSS (KiB), and the result's
/// `planningMs`, `generationMs` and `durationMs`.
struct CompactRun {
    wall_s: f64,
    cpu_s: f64,
    peak_rss_kib: u64,
    planning_ms: u64,
    generation_ms: u64,
    duration_ms: u64,
}

/// `soba compact --json` on a fresh copy of `log`, `runs` times, each a process of its own
/// spawned by a fresh copy of this bench binary (a child's peak RSS counts the memory of the
/// process it was forked from, and the bench holds whole sessions).
fn compact_process(exe: &str, log: &std::path::Path, runs: usize) -> Vec<CompactRun> {
    let out = std::process::Command::new(std::env::current_exe().expect("this bench"))
        .arg(COMPACT_PROCESS_ARG)
        .arg(exe)
        .arg(log)
        .arg(runs.to_string())
        .output()
        .expect("the bench starts again");
    assert!(
        out.status.success(),
        "timing soba compact failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(CompactRun {
                wall_s: f.first()?.parse().ok()?,
                cpu_s: f.get(1)?.parse().ok()?,
                peak_rss_kib: f.get(2)?.parse().ok()?,
                planning_ms: f.get(3)?.parse().ok()?,
                generation_ms: f.get(4)?.parse().ok()?,
                duration_ms: f.get(5)?.parse().ok()?,
            })
        })
        .collect()
}

/// When started by [`compact_process`]: copy the log (and its side file, once a first run
/// wrote it) before each run, time the run, print one line per run; returns `true`.
fn serve_compact_process() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let Some(at) = args.iter().position(|a| a == COMPACT_PROCESS_ARG) else {
        return false;
    };
    let (exe, log) = (&args[at + 1], std::path::Path::new(&args[at + 2]));
    let runs: usize = args[at + 3].parse().expect("runs");
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("compacted.jsonl");
    let side = soba_core::session::token_file::path_for(&copy);
    // The first run counts every entry and records the counts; the timed runs resume warm.
    for run in 0..=runs {
        std::fs::copy(log, &copy).expect("the log copies");
        let start = std::time::Instant::now();
        #[allow(
            clippy::zombie_processes,
            reason = "reaped by `wait4` below, which also reports what it used"
        )]
        let mut child = std::process::Command::new(exe)
            .args(["compact", "--json"])
            .arg(&copy)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("soba starts");
        let pid = child.id() as libc::pid_t;
        let mut stdout = String::new();
        std::io::Read::read_to_string(&mut child.stdout.take().expect("piped"), &mut stdout)
            .expect("soba's output reads");
        let mut status = 0;
        // SAFETY: an all-zero `rusage` is a valid value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for the child just spawned, which `Child` itself is never asked to
        // wait for.
        let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        let wall = start.elapsed().as_secs_f64();
        assert!(
            waited > 0 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "soba compact {} failed",
            copy.display()
        );
        assert!(side.is_file(), "soba compact records the counts");
        if run == 0 {
            continue;
        }
        let result: serde_json::Value = serde_json::from_str(&stdout).expect("a JSON result");
        assert_eq!(result["outcome"], "completed", "{result}");
        let ms = |k: &str| {
            result[k]
                .as_u64()
                .unwrap_or_else(|| panic!("{k} in {result}"))
        };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        let cpu = secs(usage.ru_utime) + secs(usage.ru_stime);
        println!(
            "{wall} {cpu} {} {} {} {}",
            usage.ru_maxrss,
            ms("planningMs"),
            ms("generationMs"),
            ms("durationMs")
        );
    }
    true
}

/// Write the first `n` chained real entries as a log at `path`, lines as SOBA writes them,
/// unless it is there already.
fn write_real_log(
    path: &std::path::Path,
    n: usize,
    header: &soba_core::session::entry::SessionHeader,
    sources: &[Vec<soba_core::session::entry::Entry>],
) {
    if path.is_file() {
        return;
    }
    std::fs::create_dir_all(path.parent().expect("parent")).expect("bench dir");
    let mut text = serde_json::to_string(header).expect("header");
    text.push('\n');
    for e in real_log::chained(sources).take(n) {
        text.push_str(&serde_json::to_string(&e).expect("entry"));
        text.push('\n');
    }
    std::fs::write(path, text).expect("the log writes");
}

fn compact_as_a_process() {
    let Some((header, sources)) = real_log::claude_code_fixtures() else {
        eprintln!("SKIPPED: soba compact as a process: the Claude Code fixtures are missing");
        return;
    };
    let (sizes, runs): (&[usize], usize) = if support::measuring() {
        (&[6_000, REAL_LONG], 5)
    } else {
        (&[1_000], 1)
    };
    let data = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    let baseline = std::env::var("SOBA_BASELINE").ok();
    let builds = baseline
        .iter()
        .map(|b| ("baseline", b.as_str()))
        .chain([("this build", env!("CARGO_BIN_EXE_soba"))]);
    for (build, exe) in builds {
        for &n in sizes {
            let path = data.join(format!("compact-{n}-real.jsonl"));
            write_real_log(&path, n, &header, &sources);
            print_compact_figures(build, exe, &path, n, runs);
        }
    }
}

/// Time `soba compact --json` (`exe`) on the log at `path`, of `n` entries, and print its
/// figures beside their targets.
fn print_compact_figures(build: &str, exe: &str, path: &std::path::Path, n: usize, runs: usize) {
    let bytes = path.metadata().expect("the log").len() as f64;
    let mut r = compact_process(exe, path, runs);
    assert!(!r.is_empty(), "no run timed");
    let median = |r: &mut Vec<CompactRun>, key: fn(&CompactRun) -> f64| {
        r.sort_by(|a, b| key(a).total_cmp(&key(b)));
        key(&r[r.len() / 2])
    };
    let wall = median(&mut r, |x| x.wall_s);
    let cpu = median(&mut r, |x| x.cpu_s);
    let planning = median(&mut r, |x| x.planning_ms as f64);
    let generation = median(&mut r, |x| x.generation_ms as f64);
    let duration = median(&mut r, |x| x.duration_ms as f64);
    let peak = r.iter().map(|x| x.peak_rss_kib).max().unwrap_or(0) as f64;
    let planning_target = if n <= 6_000 { " (target ≤ 50)" } else { "" };
    let whole_target = if n >= REAL_LONG {
        " (target ≤ 1 s)"
    } else {
        ""
    };
    println!(
        "{build}: soba compact, {n} real entries ({:.1} MB), warm: median {:.0} ms wall, \
             {:.0} ms CPU{whole_target}; durationMs {duration:.0} = planningMs \
             {planning:.0}{planning_target} + generationMs {generation:.0}; peak RSS {:.0} MB \
             ({:.2}× the log, target ≤ 1.5×)",
        bytes / 1e6,
        wall * 1e3,
        cpu * 1e3,
        peak / 1024.0,
        peak * 1024.0 / bytes,
    );
}

fn main() {
    if serve_compact_process() {
        return;
    }
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
    compact_as_a_process();
}
