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
//! It runs twice: with the default `daemon.maxIdleSessions` (16), where the sessions of a cycle
//! past 16 are already closed for being idle when the cycle closes them, and with it at 64,
//! where every session of a cycle is in memory until `soba/session/close` frees it.
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

struct Measured {
    max_idle_sessions: Option<usize>,
    at_start: u64,
    one_session: u64,
    after_cycle: Vec<u64>,
    after_unclosed: u64,
    peak: u64,
    in_memory: usize,
    listed: usize,
    tokens: Value,
    cycle_ms: Vec<f64>,
}

impl Measured {
    fn ratio(&self) -> f64 {
        *self.after_cycle.last().expect("at least one cycle") as f64 / self.one_session as f64
    }

    fn json(&self) -> Value {
        json!({
            "maxIdleSessions": self.max_idle_sessions,
            "rssMiB": {
                "atStart": mib(self.at_start),
                "oneSession": mib(self.one_session),
                "afterEachCycle": self.after_cycle.iter().map(|k| mib(*k)).collect::<Vec<_>>(),
                "afterUnclosedSessions": mib(self.after_unclosed),
                "peak": mib(self.peak),
            },
            "lastCycleOverOneSession": (self.ratio() * 1000.0).round() / 1000.0,
            "withinTarget": self.ratio() <= 1.10,
            "sessionsListed": self.listed,
            "sessionsInMemory": self.in_memory,
            "effectiveTokensPerSession": self.tokens,
            "cycleMillis": Summary::of(&self.cycle_ms).json(),
        })
    }
}

/// One daemon, with `daemon.maxIdleSessions` set in its user config when given.
fn measure(plan: &Plan, max_idle_sessions: Option<usize>) -> Measured {
    let base = tempfile::tempdir().expect("temp dir");
    let workspace = std::fs::canonicalize(base.path())
        .expect("canonical temp dir")
        .join("project");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let daemon_base = base.path().join("soba");
    std::fs::create_dir_all(&daemon_base).expect("daemon folder");
    if let Some(n) = max_idle_sessions {
        // The user config of the spawned daemon (`SOBA_CONFIG`, see common/daemon.rs).
        std::fs::write(
            daemon_base.join("no-user-config.json"),
            json!({"daemon": {"maxIdleSessions": n}}).to_string(),
        )
        .expect("daemon config");
    }
    let d = Daemon::spawn(&daemon_base);
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
    let sessions = listed["sessions"].as_array().expect("sessions");
    let in_memory = sessions.iter().filter(|s| s["inMemory"] == true).count();
    // Every one of them is still there, whole: the oldest, opened again, has its history.
    let context = conn.request("soba/context", json!({"sessionId": unclosed[0]}));
    let first_context = conn.request("soba/context", json!({"sessionId": first}));
    assert_eq!(first_context["effectiveTokens"], context["effectiveTokens"]);
    Measured {
        max_idle_sessions,
        at_start,
        one_session,
        after_cycle,
        after_unclosed,
        peak: d.memory().hwm_kib,
        in_memory,
        listed: sessions.len(),
        tokens: context["effectiveTokens"].clone(),
        cycle_ms,
    }
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
    let runs = [measure(&plan, None), measure(&plan, Some(64))];
    let report = json!({
        "bench": "daemon_memory",
        "binary": daemon::SOBA,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "loadAverage": {"atStart": load_at_start, "atEnd": daemon::load_average()},
        "sessionsPerCycle": plan.sessions,
        "cycles": plan.cycles,
        "entriesPerSession": plan.history,
        "runs": runs.iter().map(Measured::json).collect::<Vec<_>>(),
    });
    println!("{report}");
    for m in &runs {
        println!(
            "daemon_memory (maxIdleSessions {}): RSS {:.1} MiB with one session, {:.1} MiB after \
             {} cycles of {} sessions opened and closed ({:.3}× the one-session figure; target \
             ≤ 1.10×), {:.1} MiB with {} unclosed sessions ({} of {} in memory); peak {:.1} MiB; \
             one cycle p50 {:.0} ms",
            m.max_idle_sessions
                .map_or("default".to_string(), |n| n.to_string()),
            mib(m.one_session),
            mib(*m.after_cycle.last().expect("a cycle")),
            plan.cycles,
            plan.sessions,
            m.ratio(),
            mib(m.after_unclosed),
            plan.sessions,
            m.in_memory,
            m.listed,
            mib(m.peak),
            Summary::of(&m.cycle_ms).p50,
        );
    }
}
