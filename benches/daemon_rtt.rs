//! Round trip of `soba/budget` through the real daemon at a paced request rate.
//!
//! The built `soba` binary runs as `soba serve --daemon` on private data and runtime folders;
//! the bench talks to it over its Unix socket, LSP-framed, like any client. One session in a
//! temporary workspace gets a history of generated coding-session entries (appended over the
//! socket), then `soba/budget` requests for it are sent open-loop: every send time is fixed in
//! advance (1,000 per second), a writer thread sends on schedule whatever the answers do, and
//! each request's latency is measured from its *scheduled* send time to the arrival of its
//! response, so a stall delays every request scheduled behind it (no coordinated omission).
//! Requests are pipelined on one connection, then spread over four connections.
//!
//! `cargo bench --bench daemon_rtt` measures (1 s warm-up, 10 s per scenario) and prints one
//! JSON object and a summary; under `cargo test` it sends a few requests as a smoke test.

use std::time::Duration;

use serde_json::{json, Value};

#[path = "common/daemon.rs"]
mod daemon;
#[path = "support.rs"]
mod support;

use daemon::{measuring, paced, Daemon, Summary};

/// Requests per second, over all connections.
const RATE: f64 = 1000.0;

struct Plan {
    connections: usize,
    warmup: usize,
    requests: usize,
}

fn main() {
    let load_at_start = daemon::load_average();
    let full = measuring();
    let history = if full { 2_000 } else { 40 };
    let plans = if full {
        vec![
            Plan {
                connections: 1,
                warmup: 1_000,
                requests: 10_000,
            },
            Plan {
                connections: 4,
                warmup: 1_000,
                requests: 10_000,
            },
        ]
    } else {
        vec![
            Plan {
                connections: 1,
                warmup: 0,
                requests: 20,
            },
            Plan {
                connections: 2,
                warmup: 0,
                requests: 20,
            },
        ]
    };

    let base = tempfile::tempdir().expect("temp dir");
    let workspace = std::fs::canonicalize(base.path())
        .expect("canonical temp dir")
        .join("project");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let d = Daemon::spawn(&base.path().join("soba"));
    let mut main_conn = d.connect();
    main_conn.initialize(&[&workspace]);
    let opened = main_conn.request(
        "soba/session/open",
        json!({"workspace": workspace, "model": {"name": "gpt-4o"}}),
    );
    let session = opened["sessionId"].as_str().expect("sessionId").to_string();
    let memory_open = d.memory();

    // The history: a realistic coding session (prompt, tool call, tool result, answer, …).
    let mut budget = Value::Null;
    for chunk in (0..history).collect::<Vec<_>>().chunks(50) {
        let entries: Vec<Value> = chunk
            .iter()
            .map(|&i| serde_json::to_value(support::body(i)).expect("entry"))
            .collect();
        let r = main_conn.request(
            "soba/session/append",
            json!({"sessionId": session, "entries": entries}),
        );
        assert_eq!(r["entryIds"].as_array().map(Vec::len), Some(chunk.len()));
        budget = r["budget"].clone();
    }
    let tokens = budget["effectiveTokens"].as_u64().expect("effectiveTokens");
    let check = main_conn.request("soba/budget", json!({"sessionId": session}));
    assert_eq!(check["effectiveTokens"].as_u64(), Some(tokens));
    main_conn.drain(Duration::from_millis(100));
    let memory_loaded = d.memory();

    let mut next_id = 1_000_000i64;
    let mut outcomes = Vec::new();
    for plan in &plans {
        let mut conns = vec![main_conn];
        for _ in 1..plan.connections {
            let mut c = d.connect();
            c.initialize(&[&workspace]);
            conns.push(c);
        }
        if plan.warmup > 0 {
            let w = paced(
                &mut conns,
                &session,
                tokens,
                plan.warmup,
                next_id,
                RATE,
                d.pid(),
            );
            next_id += plan.warmup as i64;
            assert_eq!(w.ok, plan.warmup, "warm-up answers");
        }
        let o = paced(
            &mut conns,
            &session,
            tokens,
            plan.requests,
            next_id,
            RATE,
            d.pid(),
        );
        next_id += plan.requests as i64;
        main_conn = conns.swap_remove(0);
        assert_eq!(o.errors, 0, "every answer is the session's budget");
        assert_eq!(o.lost, 0, "every request is answered");
        assert_eq!(o.ok, plan.requests);
        outcomes.push(o);
    }
    let memory_after = d.memory();

    let scenarios: Vec<Value> = outcomes
        .iter()
        .map(|o| {
            json!({
                "connections": o.connections,
                "requests": o.requests,
                "ok": o.ok,
                "errors": o.errors,
                "lost": o.lost,
                "targetRate": RATE,
                "achievedRate": (o.achieved_rate * 10.0).round() / 10.0,
                "sendRate": (o.send_rate * 10.0).round() / 10.0,
                "latencyFromScheduleMicros": Summary::of(&o.latency()).json(),
                "serviceMicros": Summary::of(&o.service()).json(),
                "sendLagMicros": Summary::of(&o.send_lag()).json(),
                "daemonCpuMicrosPerRequest": (o.daemon_cpu_ms * 1000.0 / o.requests as f64).round(),
            })
        })
        .collect();
    let report = json!({
        "bench": "daemon_rtt",
        "binary": daemon::SOBA,
        "transport": "Unix socket to a spawned `soba serve --daemon`, LSP Content-Length frames",
        "method": "soba/budget",
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "loadAverage": {"atStart": load_at_start, "atEnd": daemon::load_average()},
        "history": {
            "entries": history,
            "effectiveTokens": tokens,
            "hardLimit": budget["hardLimit"],
            "model": budget["model"],
        },
        "scenarios": scenarios,
        "daemonMemory": {
            "afterOpen": memory_open.json(),
            "afterHistory": memory_loaded.json(),
            "afterRequests": memory_after.json(),
        },
    });
    println!("{report}");
    for o in &outcomes {
        let l = Summary::of(&o.latency());
        println!(
            "daemon_rtt: soba/budget at {RATE:.0}/s on {} connection(s), {} requests: \
             p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs (from scheduled send); \
             achieved {:.1}/s; {} errors, {} lost",
            o.connections, o.requests, l.p50, l.p99, l.max, o.achieved_rate, o.errors, o.lost
        );
    }
}
