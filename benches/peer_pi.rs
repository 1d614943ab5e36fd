//! SOBA's side of the pi comparison (`benches/peers/run`): the same pi session file, the same
//! operations pi performs, timed the same way (median of many runs), printed as one JSON object.
//!
//! - `import`: the pi transcript → a SOBA session log (once per session; not part of open).
//! - `open`: parse the SOBA log and build the entry index (`read_session`).
//! - `check`: the preflight decision on an open session (`Barrier::check`): budget from the
//!   session's kept tally, turn facts, trigger decision. This is what runs before every
//!   inference.
//! - `appendAndCheck`: one more message joins the session (in memory: counted exactly, the
//!   tally updated), then the check — the work an agent's turn adds between two inferences.
//! - `firstCheck`: a resume before its first check, cold: the log opened for writing
//!   (`SessionLog::open`) with no token-count side file, the configured tokenizer set, every
//!   entry counted exactly (and the counts recorded in `<log>.tokens`), then the check.
//! - `firstCheckWarm`: the same with the side file there, as at every resume after the first:
//!   the counts are read, not tokenized again.
//! - `firstCheckProcess`: `soba budget --json` on the same log, warm, as a process of its own
//!   (start-up, config, open, budget, output): what a CLI call or a freshly started editor
//!   pays. Median wall time, and its CPU time (`firstCheckProcessCpu`).
//! - `firstCheckProcessCold`: the same process with no side file (deleted before each run):
//!   every entry counted, the counts recorded as a by-product.
//! - `baseline`: with `SOBA_BASELINE=path/to/soba`, the two process figures of that build too,
//!   timed back to back with this one's on the same log.
//! - `plan`: the compaction plan (cut point, summary input, facts, local capsule).
//!
//! Usage: `cargo bench --bench peer_pi -- PI_SESSION.jsonl` (default: the fixture).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use soba::import::transcript::import_str;
use soba::import::{Format, ImportOptions};
use soba_core::budget::Budget;
use soba_core::compaction::plan::plan;
use soba_core::compaction::plan::PlanRequest;
use soba_core::compaction::run::Barrier;
use soba_core::config::{Config, Durability, Overrides};
use soba_core::session::entry::{ContentBlock, Entry, EntryBody, MessageEntry, Role, Usage};
use soba_core::session::log::{read_session, SessionLog};
use soba_core::session::token_file;
use soba_core::session::trigger::Trigger;
use soba_core::session::view::ModelView;
use soba_core::session::Session;
use soba_core::tool_mapping::ToolMapping;

#[path = "support.rs"]
mod support;

use support::{measuring, Start};

/// Median wall time per call of `f`, timed in batches of `batch` calls (so that operations
/// shorter than the clock's own cost are measured), over batches that together take about
/// `budget` (at least 5). What `f` returns is dropped outside the timed region: closing a
/// session is not part of opening it.
fn median<T>(budget: Duration, batch: u32, mut f: impl FnMut() -> T) -> Duration {
    let budget = if measuring() { budget } else { Duration::ZERO };
    let mut times = Vec::new();
    let mut results = Vec::with_capacity(batch as usize);
    let started = Instant::now();
    while times.len() < 5 || (started.elapsed() < budget && times.len() < 100_000) {
        let t = Instant::now();
        for _ in 0..batch {
            results.push(std::hint::black_box(f()));
        }
        times.push(t.elapsed() / batch);
        results.clear();
    }
    times.sort_unstable();
    times[times.len() / 2]
}

fn check(session: &Session, barrier: &Barrier) -> bool {
    let check = barrier.check(session);
    matches!(
        check.decision,
        soba_core::compaction::triggers::Decision::Compact { .. }
    )
}

/// A short assistant reply with its provider usage, as an agent appends one between two
/// inferences.
fn reply(n: usize, parent: Option<&str>, usage: Option<Usage>) -> Entry {
    Entry::new(
        format!("bench_{n}"),
        parent.map(str::to_string),
        EntryBody::Message(MessageEntry {
            role: Role::Assistant,
            content: vec![ContentBlock::text(format!(
                "Done: step {n} of the refactor passes its tests; next I update the docs."
            ))],
            usage,
            model: None,
            synthetic: false,
        }),
    )
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() -> anyhow::Result<()> {
    if support::serve_budget_process() {
        return Ok(());
    }
    let input = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../shared/fixtures/transcripts/pi/pi-mono-large-session.jsonl")
        });
    if !input.exists() && !measuring() && std::env::var("CI").as_deref() != Ok("true") {
        eprintln!("SKIPPED: {} missing", input.display());
        return Ok(());
    }
    let text =
        std::fs::read_to_string(&input).map_err(|e| anyhow::anyhow!("{}: {e}", input.display()))?;
    let options = ImportOptions {
        source_path: input.display().to_string(),
        default_workspace: "/ws".into(),
        default_session_id: "bench".into(),
        now: soba_core::util::now_rfc3339(),
    };
    let import = median(Duration::from_secs(2), 1, || {
        import_str(&text, Some(Format::Pi), &options)
    });
    let imported = import_str(&text, Some(Format::Pi), &options)?;

    let dir = tempfile::tempdir()?;
    let log_path = dir.path().join("session.jsonl");
    let mut log = SessionLog::create(&log_path, imported.header.clone(), Durability::Flush)?;
    log.append_all(imported.entries)?;
    drop(log);
    let log_bytes = std::fs::metadata(&log_path)?.len();

    let (session, _) = read_session(&log_path)?;
    let config = Config::resolve(
        &[],
        session.header.model_config().as_ref(),
        &Overrides::default(),
    )?;
    let mapping = ToolMapping::default();
    let barrier = Barrier {
        config: &config,
        mapping: &mapping,
    };
    let open = median(Duration::from_secs(3), 1, || read_session(&log_path));
    let counts_path = token_file::path_for(&log_path);
    let first_check_at = |cold: bool| {
        median(Duration::from_secs(3), 1, || {
            if cold {
                let _ = std::fs::remove_file(&counts_path);
            }
            let (mut log, _) =
                SessionLog::open(&log_path, Durability::Flush).expect("the log opens");
            log.session_mut().configure_counting(&config.model);
            log.save_token_counts();
            check(log.session(), &barrier);
            log
        })
    };
    let first_check = first_check_at(true);
    let first_check_warm = first_check_at(false);
    let process_runs = if measuring() { 41 } else { 1 };
    // Cold first: its last run leaves the counts recorded for the warm runs (a build that
    // does not record them, the baseline's, gets them from the log's writer above).
    let timed = |exe: &str| {
        let cold = support::budget_process_at(exe, &log_path, process_runs, Start::Cold);
        let (mut log, _) = SessionLog::open(&log_path, Durability::Flush).expect("the log opens");
        log.session_mut().configure_counting(&config.model);
        log.save_token_counts();
        drop(log);
        let warm = support::budget_process_at(exe, &log_path, process_runs, Start::Warm);
        (cold, warm)
    };
    let (process_cold, process) = timed(env!("CARGO_BIN_EXE_soba"));
    // The same runs of another build of `soba` (`SOBA_BASELINE=path/to/soba`), back to back
    // with this one's on the same file: what a change gained.
    let baseline = std::env::var_os("SOBA_BASELINE").map(|exe| {
        let exe = exe.to_string_lossy().into_owned();
        let (cold, warm) = timed(&exe);
        serde_json::json!({
            "exe": exe,
            "firstCheckProcess": warm.wall_s * 1e6,
            "firstCheckProcessCpu": warm.cpu_s * 1e6,
            "firstCheckProcessCold": cold.wall_s * 1e6,
            "firstCheckProcessColdCpu": cold.cpu_s * 1e6,
        })
    });
    // Warm: every entry's count is cached and the tally kept, as in a running daemon.
    let compact_due = check(&session, &barrier);
    let check_time = median(Duration::from_secs(2), 10_000, || check(&session, &barrier));
    let req = PlanRequest {
        trigger: Trigger::User,
        requested: false,
        instructions: None,
        title: None,
        config: &config,
        mapping: &mapping,
        operation_id: "op_bench".into(),
    };
    let plan_time = median(Duration::from_secs(2), 1, || {
        plan(&session, session.leaf(), &req)
    });
    let budget = barrier.measure(&session);
    let view = ModelView::build(&session, session.leaf());
    assert_eq!(
        budget,
        Budget::measure(
            config.limits(),
            view.breakdown(&session),
            view.usage_anchor(&session),
            session.calibration(),
            session.unseen_at(session.leaf(), view.usage_anchor(&session)),
        ),
        "the kept tally measures what the view does"
    );
    let entries = session.len();
    // Last, as it grows the session: each run appends one reply.
    let last_usage = session.entries().iter().rev().find_map(|e| match &e.body {
        EntryBody::Message(m) if m.role == Role::Assistant => m.usage,
        _ => None,
    });
    let mut session = session;
    let mut n = 0;
    let append_and_check = median(Duration::from_secs(2), 100, || {
        n += 1;
        let parent = session.leaf_id().map(str::to_string);
        session
            .push(reply(n, parent.as_deref(), last_usage))
            .expect("a fresh id on the leaf");
        check(&session, &barrier)
    });

    let report = serde_json::json!({
        "input": input.display().to_string(),
        "inputBytes": text.len(),
        "logBytes": log_bytes,
        "entries": entries,
        "contextWindow": config.model.context_window,
        "effectiveTokens": budget.effective_tokens,
        "source": budget.source,
        "compactDue": compact_due,
        "micros": {
            "import": micros(import),
            "open": micros(open),
            "check": micros(check_time),
            "appendAndCheck": micros(append_and_check),
            "firstCheck": micros(first_check),
            "firstCheckWarm": micros(first_check_warm),
            "firstCheckProcess": process.wall_s * 1e6,
            "firstCheckProcessCpu": process.cpu_s * 1e6,
            "firstCheckProcessCold": process_cold.wall_s * 1e6,
            "firstCheckProcessColdCpu": process_cold.cpu_s * 1e6,
            "plan": micros(plan_time),
        },
        "baseline": baseline,
    });
    println!("{report}");
    Ok(())
}
