//! Inputs shared by the benchmarks: real transcript text and generated sessions.
#![allow(dead_code)]

use std::path::PathBuf;

use serde_json::{json, Value};
use soba_core::session::capsule::model::Artifacts;
use soba_core::session::capsule::model::CapsuleEntry;
use soba_core::session::capsule::model::CapsuleState;
use soba_core::session::capsule::model::CapsuleTokens;
use soba_core::session::capsule::model::Origin;
use soba_core::session::capsule::model::Quality;
use soba_core::session::entry::*;
use soba_core::session::trigger::Trigger;
use soba_core::session::Session;
use soba_core::tokens::TokenizerKind;

/// Whether criterion runs for real (`cargo bench`) rather than once as a smoke test.
pub fn measuring() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// A command timed as a process of its own: medians over the runs, and the largest peak RSS.
pub struct ProcessFigures {
    pub wall_s: f64,
    /// User + system seconds: on a shared machine the wall clock also counts the time spent
    /// waiting for a core.
    pub cpu_s: f64,
    pub peak_rss_kib: u64,
}

/// The argument that makes a bench binary serve [`budget_process`] (see
/// [`serve_budget_process`]).
const BUDGET_PROCESS_ARG: &str = "--budget-process";

/// `soba budget --json LOG` (`exe` is the built `soba`) run `runs` times, each a process of
/// its own, measured from the kernel's account of the child: what a CLI call or a freshly
/// started editor pays to resume a session, start-up and output included.
///
/// The runs are spawned by a fresh copy of this bench binary, not by the bench itself: a
/// child's peak RSS includes the memory of the process it was forked from, before its `exec`,
/// and the bench holds whole logs.
pub fn budget_process(exe: &str, log: &std::path::Path, runs: usize) -> ProcessFigures {
    budget_process_at(exe, log, runs, Start::Warm)
}

/// Whether `soba budget` finds the log's counts recorded in `<log>.tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Recorded (a writer's, or what an earlier budget recorded).
    Warm,
    /// Not: the side file is deleted before each run (outside the timed region), so every run
    /// counts the log and records the counts again.
    Cold,
}

/// [`budget_process`], warm or cold.
pub fn budget_process_at(
    exe: &str,
    log: &std::path::Path,
    runs: usize,
    start: Start,
) -> ProcessFigures {
    let out = std::process::Command::new(std::env::current_exe().expect("this bench"))
        .arg(BUDGET_PROCESS_ARG)
        .arg(exe)
        .arg(log)
        .arg(runs.max(1).to_string())
        .arg(match start {
            Start::Warm => "warm",
            Start::Cold => "cold",
        })
        .output()
        .expect("the bench starts again");
    assert!(
        out.status.success(),
        "timing soba budget failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut runs: Vec<(f64, f64, u64)> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((
                f.next()?.parse().ok()?,
                f.next()?.parse().ok()?,
                f.next()?.parse().ok()?,
            ))
        })
        .collect();
    assert!(!runs.is_empty(), "no runs timed: {text}");
    let peak_rss_kib = runs.iter().map(|r| r.2).max().unwrap_or(0);
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let wall_s = runs[runs.len() / 2].0;
    runs.sort_by(|a, b| a.1.total_cmp(&b.1));
    ProcessFigures {
        wall_s,
        cpu_s: runs[runs.len() / 2].1,
        peak_rss_kib,
    }
}

/// When this bench binary was started by [`budget_process`]: time the runs, print one line
/// per run (wall seconds, CPU seconds, peak RSS in KiB) and return `true`.
pub fn serve_budget_process() -> bool {
    let args: Vec<String> = std::env::args().collect();
    let Some(at) = args.iter().position(|a| a == BUDGET_PROCESS_ARG) else {
        return false;
    };
    let (exe, log) = (&args[at + 1], &args[at + 2]);
    let runs: usize = args[at + 3].parse().expect("runs");
    let cold = args[at + 4] == "cold";
    let side_file = soba_core::session::token_file::path_for(std::path::Path::new(log));
    for _ in 0..runs {
        if cold {
            let _ = std::fs::remove_file(&side_file);
        }
        let start = std::time::Instant::now();
        #[allow(
            clippy::zombie_processes,
            reason = "reaped by `wait4` below, which also reports what it used"
        )]
        let child = std::process::Command::new(exe)
            .args(["budget", "--json", log.as_str()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("soba starts");
        let mut status = 0;
        // SAFETY: an all-zero `rusage` is a valid value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for the child just spawned, which `Child` itself is never asked to
        // wait for.
        let waited = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
        let wall = start.elapsed().as_secs_f64();
        assert!(
            waited > 0 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "soba budget {log} failed"
        );
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        let cpu = secs(usage.ru_utime) + secs(usage.ru_stime);
        println!("{wall} {cpu} {}", usage.ru_maxrss);
    }
    true
}

pub fn transcripts_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/transcripts");
    dir.is_dir().then_some(dir)
}

fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) if s.len() > 16 => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// Every longer string value of every transcript: prompts, code, tool output, summaries.
pub fn transcript_texts() -> Vec<String> {
    let Some(dir) = transcripts_dir() else {
        eprintln!("SKIPPED: ../shared/fixtures/transcripts missing; using generated text");
        return (0..2000)
            .map(|i| format!("fn f{i}() {{ println!(\"line {i}\"); }} // héllo wörld {i}\n"))
            .collect();
    };
    let mut out = Vec::new();
    let mut files = Vec::new();
    for sub in std::fs::read_dir(&dir).expect("transcripts dir") {
        let sub = sub.expect("entry").path();
        if sub.is_dir() {
            for f in std::fs::read_dir(&sub).expect("format dir") {
                files.push(f.expect("file").path());
            }
        }
    }
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("readable fixture");
        if let Ok(v) = serde_json::from_str::<Value>(&text) {
            strings(&v, &mut out);
            continue;
        }
        for line in text.lines() {
            if let Ok(v) = serde_json::from_str::<Value>(line) {
                strings(&v, &mut out);
            }
        }
    }
    out
}

pub fn header() -> SessionHeader {
    SessionHeader {
        kind: HeaderTag::Session,
        version: LOG_FORMAT_VERSION,
        id: "bench".into(),
        workspace: "/ws".into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        model: None,
        source: None,
    }
}

fn text(role: Role, t: String) -> EntryBody {
    EntryBody::Message(MessageEntry {
        role,
        content: vec![ContentBlock::text(t)],
        usage: None,
        model: None,
        synthetic: false,
    })
}

/// The `i`-th entry of a realistic coding session: prompt, tool call, tool result, answer.
pub fn body(i: usize) -> EntryBody {
    match i % 4 {
        0 => text(
            Role::User,
            format!("Please fix the failing test in src/module_{i}.rs and keep the API stable."),
        ),
        1 => EntryBody::Message(MessageEntry {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolCall {
                id: format!("call{i}"),
                name: "Bash".into(),
                input: Box::new(json!({"command": format!("cargo test -p crate_{i}")})),
                extra: Default::default(),
            }],
            usage: None,
            model: None,
            synthetic: false,
        }),
        2 => EntryBody::ToolResult(ToolResultEntry {
            call_id: format!("call{}", i - 1),
            tool_name: Some("Bash".into()),
            content: vec![ContentBlock::text(format!(
                "running 12 tests\n{}test result: ok. 12 passed; 0 failed",
                "test module::case ... ok\n".repeat(12)
            ))],
            is_error: false,
            exit_code: Some(0),
        }),
        _ => text(
            Role::Assistant,
            format!("The test in module {i} passes now; next I will look at the error handling."),
        ),
    }
}

pub fn capsule(n: usize, first_kept: Option<String>) -> EntryBody {
    EntryBody::Capsule(Box::new(CapsuleEntry {
        checkpoint_id: format!("ck_{n:012x}"),
        trigger: Trigger::AutoThreshold,
        quality: Quality::Degraded,
        first_kept_entry_id: first_kept,
        previous_checkpoint_id: None,
        state: CapsuleState {
            goal: "Fix the failing tests across the workspace.".into(),
            ..Default::default()
        },
        artifacts: Artifacts::default(),
        tokens: CapsuleTokens {
            before: 40000,
            after: 12000,
            short_tail: None,
        },
        origin: Origin::Session,
        mirrored: false,
        title: None,
        degraded_reason: None,
        instructions: None,
        elide_tool_results_over: None,
        loaded_from: None,
    }))
}

/// A session of `n` entries compacted every `every` entries (keeping the last 40), as a
/// long-running agent session would be.
pub fn compacted_session(n: usize, every: usize) -> Session {
    let mut s = Session::new(header(), TokenizerKind::O200kBase);
    let mut last: Option<String> = None;
    let mut since = 0;
    for i in 0..n {
        let id = format!("e{i}");
        s.push(Entry::new(
            id.clone(),
            last.clone(),
            compacted_body(i, every, &mut since),
        ))
        .expect("valid entry");
        last = Some(id);
    }
    s
}

/// Entry `i` of a session compacted every `every` entries: a capsule keeping the last 40
/// entries (from the start of a user turn) once `since` reaches `every`, else [`body`].
pub fn compacted_body(i: usize, every: usize, since: &mut usize) -> EntryBody {
    if *since >= every && i.is_multiple_of(4) {
        *since = 0;
        capsule(i, Some(format!("e{}", i - 40)))
    } else {
        *since += 1;
        body(i)
    }
}
