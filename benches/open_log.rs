//! Opening (resuming) a session: open + first budget, cold (no token-count side file: every
//! entry is tokenized) and warm (counts read from `<log>.tokens`), with peak memory; and
//! parsing alone, for comparison.
//!
//! Logs: the 1 MB pi fixture imported into a SOBA log; a 100 MB log of real entries (the
//! Claude Code fixtures chained copy after copy, see `common/real_log.rs`); and generated 100 MB logs
//! (2 MB each under `cargo test --all-targets`), written once into `target/bench-data/`. Each
//! measurement runs in a child process, so its time includes what a fresh `soba` pays (the
//! tokenizer's tables, when anything is counted) and its peak RSS is the open alone. For the
//! pi fixture and the real-entries log, `soba budget --json` itself is timed as a process too:
//! what a CLI call or a freshly started editor pays, start-up and output included.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use soba::import::transcript::import_str;
use soba::import::{Format, ImportOptions};
use soba_core::compaction::run::Barrier;
use soba_core::config::{Config, Durability, Overrides};
use soba_core::session::entry::Entry;
use soba_core::session::log::{read_session, SessionLog};
use soba_core::session::token_file;
use soba_core::tool_mapping::ToolMapping;

#[path = "support.rs"]
mod support;

#[path = "common/real_log.rs"]
mod real_log;

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// A log of about `target_bytes`: one session's chain of entries, compacted every
/// `compact_every` entries when given (else its whole history is the model input).
fn generate(path: &Path, target_bytes: u64, compact_every: Option<usize>) {
    if path
        .metadata()
        .map(|m| m.len() >= target_bytes)
        .unwrap_or(false)
    {
        return;
    }
    std::fs::create_dir_all(path.parent().expect("parent")).expect("bench dir");
    let _ = std::fs::remove_file(token_file::path_for(path));
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    serde_json::to_writer(&mut f, &support::header()).expect("header");
    f.write_all(b"\n").expect("write");
    let mut written = 0u64;
    let mut i = 0usize;
    let mut last: Option<String> = None;
    let mut since = 0;
    while written < target_bytes {
        let id = format!("e{i}");
        let body = match compact_every {
            Some(every) => support::compacted_body(i, every, &mut since),
            None => support::body(i),
        };
        let e = Entry::new(id.clone(), last.clone(), body);
        let line = serde_json::to_vec(&e).expect("entry");
        written += line.len() as u64 + 1;
        f.write_all(&line).expect("write");
        f.write_all(b"\n").expect("write");
        last = Some(id);
        i += 1;
    }
    f.flush().expect("flush");
}

/// The pi fixture as a SOBA log (what `soba import` writes), or `None` without the fixture.
fn imported_pi(dir: &Path) -> Option<PathBuf> {
    let input = support::transcripts_dir()?.join("pi/pi-mono-large-session.jsonl");
    let text = std::fs::read_to_string(&input).ok()?;
    let options = ImportOptions {
        source_path: input.display().to_string(),
        default_workspace: "/ws".into(),
        default_session_id: "bench".into(),
        now: "2026-01-01T00:00:00Z".into(),
    };
    let imported = import_str(&text, Some(Format::Pi), &options).expect("the fixture imports");
    std::fs::create_dir_all(dir).expect("bench dir");
    let path = dir.join("pi-session.jsonl");
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(token_file::path_for(&path));
    let mut log =
        SessionLog::create(&path, imported.header, Durability::Flush).expect("log created");
    log.append_all(imported.entries).expect("entries appended");
    Some(path)
}

/// What a resume does before it can answer: open the log (writer lock, load), count with
/// the configured tokenizer, record the counts, and the first budget. Returns the open log
/// and the budget's effective tokens.
fn open_and_budget(path: &Path) -> (SessionLog, u64) {
    let (mut log, _) = SessionLog::open(path, Durability::Flush).expect("open");
    let config = Config::resolve(
        &[],
        log.session().header.model_config().as_ref(),
        &Overrides::default(),
    )
    .expect("config");
    log.session_mut().configure_counting(&config.model);
    log.save_token_counts();
    let mapping = ToolMapping::default();
    let barrier = Barrier {
        config: &config,
        mapping: &mapping,
    };
    let budget = barrier.measure(log.session());
    (log, budget.effective_tokens)
}

/// One measurement in this (child) process: prints entries, seconds, peak RSS (KiB), tokens.
fn child(mode: &str, path: &Path) {
    if mode == "cold" {
        let _ = std::fs::remove_file(token_file::path_for(path));
    }
    let start = Instant::now();
    // What was opened is freed after the clock stops: closing is not part of opening.
    let (opened, tokens) = match mode {
        "parse" => (Err(read_session(path).expect("open").0), 0),
        _ => {
            let (log, tokens) = open_and_budget(path);
            (Ok(log), tokens)
        }
    };
    let secs = start.elapsed().as_secs_f64();
    let entries = match &opened {
        Ok(log) => log.session().len(),
        Err(session) => session.len(),
    };
    println!("{entries} {secs} {} {tokens}", peak_rss_kib());
    // The process exits at once; freeing each entry would only take time.
    std::mem::forget(opened);
}

struct Figures {
    entries: usize,
    median_s: f64,
    /// User + system seconds, where measured: on a shared machine the wall clock also counts
    /// the time spent waiting for a core.
    cpu_s: Option<f64>,
    peak_kib: u64,
    tokens: u64,
}

fn measure(exe: &str, mode: &str, path: &Path, runs: usize) -> Figures {
    let mut times = Vec::new();
    let mut peak = 0;
    let mut entries = 0;
    let mut tokens = 0;
    for _ in 0..runs {
        let out = std::process::Command::new(exe)
            .args(["--open-child", mode])
            .arg(path)
            .output()
            .expect("child");
        assert!(
            out.status.success(),
            "open failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let parts: Vec<&str> = text.split_whitespace().collect();
        entries = parts[0].parse().expect("entries");
        times.push(parts[1].parse::<f64>().expect("seconds"));
        peak = parts[2].parse::<u64>().expect("rss").max(peak);
        tokens = parts[3].parse().expect("tokens");
    }
    times.sort_by(f64::total_cmp);
    Figures {
        entries,
        median_s: times[times.len() / 2],
        cpu_s: None,
        peak_kib: peak,
        tokens,
    }
}

/// `process`: also time `soba budget --json` as a process, warm (after the cold runs wrote
/// the side file).
fn report(name: &str, exe: &str, path: &Path, runs: usize, process: bool) -> serde_json::Value {
    let bytes = path.metadata().expect("log").len() as f64;
    let mb = bytes / (1 << 20) as f64;
    let parse = measure(exe, "parse", path, runs);
    let cold = measure(exe, "cold", path, runs);
    let warm = measure(exe, "warm", path, runs);
    let budget = process.then(|| budget_process(env!("CARGO_BIN_EXE_soba"), path, runs));
    let budget_cold = process.then(|| budget_process_cold(env!("CARGO_BIN_EXE_soba"), path, runs));
    // Another build of `soba` (`SOBA_BASELINE=path/to/soba`), timed back to back with this
    // one's on the same log; its warm runs read the writer's side file too.
    let baseline = std::env::var("SOBA_BASELINE")
        .ok()
        .filter(|_| process)
        .map(|exe| {
            let cold = budget_process_cold(&exe, path, runs);
            (budget_process(&exe, path, runs), cold)
        });
    assert_eq!(
        cold.tokens, warm.tokens,
        "recorded counts give the budget that counting does"
    );
    assert_eq!(cold.entries, warm.entries);
    let line = |what: &str, f: &Figures| {
        let cpu = f
            .cpu_s
            .map_or(String::new(), |c| format!(" (CPU {:.2} ms)", c * 1e3));
        println!(
            "open_log {name}: {what}: median {:.2} ms{cpu}, peak RSS {:.0} MB ({:.2}× the file)",
            f.median_s * 1e3,
            f.peak_kib as f64 / 1024.0,
            f.peak_kib as f64 * 1024.0 / bytes,
        )
    };
    println!(
        "open_log {name}: {mb:.1} MB, {} entries, {} tokens",
        warm.entries, warm.tokens
    );
    line("parse only           ", &parse);
    line("open + budget, cold  ", &cold);
    line("open + budget, warm  ", &warm);
    if let Some(budget) = &budget {
        line("`soba budget`, warm  ", budget);
    }
    if let Some(cold) = &budget_cold {
        line("`soba budget`, cold  ", cold);
    }
    if let Some((warm, cold)) = &baseline {
        line("baseline build, warm ", warm);
        line("baseline build, cold ", cold);
    }
    println!(
        "open_log {name}: warm is {:.1}× faster than cold",
        cold.median_s / warm.median_s
    );
    let figures = |f: &Figures| {
        serde_json::json!({
            "medianMs": f.median_s * 1e3,
            "cpuMs": f.cpu_s.map(|c| c * 1e3),
            "peakRssMiB": f.peak_kib as f64 / 1024.0,
        })
    };
    serde_json::json!({
        "log": name,
        "bytes": bytes,
        "entries": warm.entries,
        "tokens": warm.tokens,
        "parse": figures(&parse),
        "cold": figures(&cold),
        "warm": figures(&warm),
        "budgetProcess": budget.as_ref().map(figures),
        "budgetProcessCold": budget_cold.as_ref().map(figures),
        "baseline": baseline.as_ref().map(|(warm, cold)| serde_json::json!({
            "budgetProcess": figures(warm),
            "budgetProcessCold": figures(cold),
        })),
    })
}

/// `soba budget --json LOG` as a process of its own (see [`support::budget_process`]), warm.
fn budget_process(exe: &str, path: &Path, runs: usize) -> Figures {
    figures_of(support::budget_process_at(
        exe,
        path,
        runs,
        support::Start::Warm,
    ))
}

/// The same with no side file: each run counts the log (and records the counts).
fn budget_process_cold(exe: &str, path: &Path, runs: usize) -> Figures {
    let figures = figures_of(support::budget_process_at(
        exe,
        path,
        runs,
        support::Start::Cold,
    ));
    // What the warm runs after it read: the writer's side file.
    let _ = open_and_budget(path);
    figures
}

fn figures_of(p: support::ProcessFigures) -> Figures {
    Figures {
        entries: 0,
        median_s: p.wall_s,
        cpu_s: Some(p.cpu_s),
        peak_kib: p.peak_rss_kib,
        tokens: 0,
    }
}

/// Median time of one append with `Durability::Flush` (one `write`; the default fsync would
/// hide the difference) and the entry's count, over `n` entries: with the side file kept, or
/// with a folder in its place, so that it is never written.
fn append_micros(n: usize, side_file: bool) -> f64 {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("s.jsonl");
    if !side_file {
        let blocked = dir.path().join("s.jsonl.tokens");
        std::fs::create_dir(&blocked).expect("folder");
        std::fs::write(blocked.join("keep"), "x").expect("file");
    }
    let mut log = SessionLog::create(&path, support::header(), Durability::Flush).expect("log");
    let mut times = Vec::with_capacity(n);
    let mut last: Option<String> = None;
    for i in 0..n {
        let id = format!("e{i}");
        let e = Entry::new(id.clone(), last.clone(), support::body(i));
        let t = Instant::now();
        log.append(e).expect("append");
        // The daemon's tally counts each appended entry in any case.
        std::hint::black_box(log.session().tokens_of(i));
        times.push(t.elapsed().as_secs_f64() * 1e6);
        last = Some(id);
    }
    times.sort_by(f64::total_cmp);
    times[n / 2]
}

/// Entries between two capsules in the compacted generated log.
const COMPACT_EVERY: usize = 2000;

fn main() {
    if support::serve_budget_process() {
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    if let Some(pos) = args.iter().position(|a| a == "--open-child") {
        child(&args[pos + 1], Path::new(&args[pos + 2]));
        return;
    }
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    let runs = if support::measuring() { 5 } else { 1 };
    let mut out = Vec::new();
    match imported_pi(&data) {
        Some(pi) => out.push(report("pi fixture", &args[0], &pi, runs * 4, true)),
        None => eprintln!("SKIPPED: the pi fixture (../shared/fixtures/transcripts) is missing"),
    }
    let mb: u64 = if support::measuring() { 100 } else { 2 };
    match real_log::claude_code_fixtures() {
        Some((header, sources)) => {
            let path = data.join(format!("session-{mb}mb-real.jsonl"));
            real_log::write(&path, mb << 20, &header, &sources);
            real_log::check(&path, &sources);
            out.push(report(
                &format!("real entries {mb} MB (Claude Code fixtures, chained)"),
                &args[0],
                &path,
                runs,
                true,
            ));
        }
        None => eprintln!(
            "FALLBACK: the Claude Code fixtures (../shared/fixtures/transcripts/claude-code) are \
             missing: no real-entries log; the generated logs below are all that is measured, \
             and their memory figures are NOT representative of real entries"
        ),
    }
    let path = data.join(format!("session-{mb}mb.jsonl"));
    generate(&path, mb << 20, None);
    out.push(report(
        &format!("generated {mb} MB, never compacted"),
        &args[0],
        &path,
        runs,
        false,
    ));
    // What a long session's log is: compacted whenever its input neared the window (about
    // 90k tokens of entries between two capsules here).
    let path = data.join(format!("session-{mb}mb-compacted.jsonl"));
    generate(&path, mb << 20, Some(COMPACT_EVERY));
    out.push(report(
        &format!("generated {mb} MB, compacted every {COMPACT_EVERY} entries"),
        &args[0],
        &path,
        runs,
        false,
    ));
    let n = if support::measuring() { 5000 } else { 200 };
    // Both count each entry (the daemon's tally does): the difference is the record's write.
    let without = append_micros(n, false);
    let with = append_micros(n, true);
    println!(
        "open_log append: median {with:.2} µs with the side file, {without:.2} µs without ({:+.2} µs)",
        with - without
    );
    out.push(
        serde_json::json!({"appendMicros": {"withSideFile": with, "withoutSideFile": without}}),
    );
    println!("{}", serde_json::Value::Array(out));
}
