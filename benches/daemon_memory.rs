//! Daemon memory over many sessions: is what a closed session held given back?
//!
//! The built `soba` binary runs as `soba serve --daemon` on private folders (see
//! `common/daemon.rs`); the bench is one client on its socket. It measures the daemon's RSS
//! (`VmRSS` of `/proc/<pid>/status`):
//!
//! 1. after one session with a history of generated coding-session entries (this loads the
//!    token tables, once per process): the *one-session figure*;
//! 2. after each of `CYCLES` cycles that open `SESSIONS` sessions, give each the same history,
//!    and close them all with `soba/session/close`;
//! 3. after `SESSIONS` sessions are opened and given that history and never closed: past
//!    `daemon.maxIdleSessions` (default 16) the least recently used are closed for being idle.
//!
//! The target is the last cycle within 10% of the one-session figure. The time of one cycle
//! (open, append, close of every session) is reported as a median over the cycles.
//!
//! `cargo bench --bench daemon_memory` measures (10 cycles of 50 sessions of 400 entries) and
//! prints one JSON object and a summary; under `cargo test` it runs one small cycle as a smoke
//! test.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "common/daemon.rs"]
mod daemon;
#[path = "support.rs"]
mod support;

use daemon::{measuring, mib, Conn, Daemon, Summary};

struct Plan {
    sessions: usize,
    cycles: usize,
    history: usize,
}

/// Open a session in `workspace` and append `history` entries; its id.
fn session_with_history(conn: &mut Conn, workspace: &std::path::Path, history: usize) -> String {
    let opened = conn.request(
        "soba/session/open",
        json!({"workspace": workspace, "model": {"name": "gpt-4o"}}),
    );
    let id = opened["sessionId"].as_str().expect("sessionId").to_string();
    for chunk in (0..history).collect::<Vec<_>>().chunks(100) {
        let entries: Vec<Value> = chunk
            .iter()
            .map(|&i| serde_json::to_value(support::body(i)).expect("entry"))
            .collect();
        let r = conn.request(
            "soba/session/append",
            json!({"sessionId": id, "entries": entries}),
        );
        assert_eq!(r["entryIds"].as_array().map(Vec::len), Some(chunk.len()));
    }
    id
}

/// The daemon's RSS in KiB once the notifications of what was just done have been sent.
fn settled_rss(d: &Daemon, conn: &mut Conn) -> u64 {
    conn.drain(Duration::from_millis(200));
    d.memory().rss_kib
}

fn main() {
    let load_at_start = daemon::load_average();
    let plan = if measuring() {
        Plan {
            sessions: 50,
            cycles: 10,
            history: 400,
        }
    } else {
        Plan {
            sessions: 3,
            cycles: 1,
            history: 8,
        }
    };
    let base = tempfile::tempdir().expect("temp dir");
    let workspace = std::fs::canonicalize(base.path())
        .expect("canonical temp dir")
        .join("project");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let d = Daemon::spawn(&base.path().join("soba"));
    let mut conn = d.connect();
    conn.initialize(&[&workspace]);
    let at_start = settled_rss(&d, &mut conn);

    let first = session_with_history(&mut conn, &workspace, plan.history);
    let one_session = settled_rss(&d, &mut conn);

    let mut after_cycle = Vec::with_capacity(plan.cycles);
    let mut cycle_ms = Vec::with_capacity(plan.cycles);
    for _ in 0..plan.cycles {
        let started = Instant::now();
        let ids: Vec<String> = (0..plan.sessions)
            .map(|_| session_with_history(&mut conn, &workspace, plan.history))
            .collect();
        for id in &ids {
            let closed = conn.request("soba/session/close", json!({"sessionId": id}));
            assert_eq!(closed["sessionId"], id.as_str());
        }
        cycle_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        after_cycle.push(settled_rss(&d, &mut conn));
    }
    let listed = conn.request("soba/sessions", json!({}));
    assert_eq!(
        listed["sessions"].as_array().map(Vec::len),
        Some(1),
        "only the first session is left: {listed}"
    );

    // Sessions opened and never closed: the idle bound closes all but the most recent ones.
    let unclosed: Vec<String> = (0..plan.sessions)
        .map(|_| session_with_history(&mut conn, &workspace, plan.history))
        .collect();
    let after_unclosed = settled_rss(&d, &mut conn);
    let listed = conn.request("soba/sessions", json!({}));
    let in_memory = listed["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter(|s| s["inMemory"] == true)
        .count();
    // Every one of them is still there, whole: the last appended entry of the first unclosed
    // session is where it was.
    let budget = conn.request("soba/budget", json!({"sessionId": unclosed[0]}));
    assert_eq!(budget["sessionId"], unclosed[0].as_str());
    let first_budget = conn.request("soba/budget", json!({"sessionId": first}));
    assert_eq!(first_budget["effectiveTokens"], budget["effectiveTokens"]);

    let last = *after_cycle.last().expect("at least one cycle");
    let ratio = last as f64 / one_session as f64;
    let hwm = d.memory().hwm_kib;
    let report = json!({
        "bench": "daemon_memory",
        "binary": daemon::SOBA,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "loadAverage": {"atStart": load_at_start, "atEnd": daemon::load_average()},
        "sessionsPerCycle": plan.sessions,
        "cycles": plan.cycles,
        "entriesPerSession": plan.history,
        "effectiveTokensPerSession": budget["effectiveTokens"],
        "rssMiB": {
            "atStart": mib(at_start),
            "oneSession": mib(one_session),
            "afterEachCycle": after_cycle.iter().map(|k| mib(*k)).collect::<Vec<_>>(),
            "afterUnclosedSessions": mib(after_unclosed),
            "peak": mib(hwm),
        },
        "lastCycleOverOneSession": (ratio * 1000.0).round() / 1000.0,
        "withinTarget": ratio <= 1.10,
        "unclosedSessionsInMemory": in_memory,
        "cycleMillis": Summary::of(&cycle_ms).json(),
    });
    println!("{report}");
    println!(
        "daemon_memory: RSS {:.1} MiB with one session, {:.1} MiB after {} cycles of {} sessions \
         opened and closed ({:.3}× the one-session figure; target ≤ 1.10×), {:.1} MiB with {} \
         unclosed sessions ({} in memory); peak {:.1} MiB; one cycle p50 {:.0} ms",
        mib(one_session),
        mib(last),
        plan.cycles,
        plan.sessions,
        ratio,
        mib(after_unclosed),
        plan.sessions,
        in_memory,
        mib(hwm),
        Summary::of(&cycle_ms).p50,
    );
}
