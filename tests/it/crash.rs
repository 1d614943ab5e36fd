//! Crash harness: a process appends entries and runs compactions (`soba debug append-loop`),
//! and is killed with SIGKILL at a random moment. After every kill the log must open, hold
//! every entry the process acknowledged, have a leaf that is an entry of the file, and have
//! any torn final line moved aside. Because a kill rarely lands inside a write, every trial
//! also cuts a copy of the log at a random byte of the unacknowledged writes (the state such a
//! kill leaves) and checks the same on the copy.
//!
//! 50 trials in the normal run; `SOBA_CRASH_TRIALS=1000 cargo test --release --test it crash:: --
//! --nocapture` for the long mode. `SOBA_CRASH_SEED` picks the schedule.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use soba_core::compaction::run::{Barrier, Preflight};
use soba_core::config::{Config, Durability};
use soba_core::session::entry::{ContentBlock, Entry, EntryBody, MessageEntry, Role};
use soba_core::session::log::{read_session, SessionLog};
use soba_core::tool_mapping::ToolMapping;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default,
    }
}

#[derive(Debug, Default)]
struct Tally {
    trials: u64,
    acknowledged: u64,
    torn_tails: u64,
    cut_torn_tails: u64,
    cut_whole_lines: u64,
    compactions: u64,
    longest_verify: Duration,
}

/// Run the appender on `log` for `run_for`, kill it, and return the ids it acknowledged.
fn kill_after(log: &Path, seed: u64, fsync: bool, run_for: Duration) -> Vec<String> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_soba"));
    cmd.args(["debug", "append-loop"])
        .arg(log)
        .args(["--seed", &seed.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if fsync {
        cmd.arg("--fsync");
    }
    let mut child = cmd.spawn().expect("the soba binary starts");
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    std::thread::sleep(run_for);
    // `Child::kill` sends SIGKILL on Unix: no destructor, no flush, no unlock runs.
    child.kill().expect("the appender is killed");
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "the appender ran to the end instead of being killed"
    );
    reader.join().unwrap()
}

/// A kill can land inside any write that was not acknowledged: the file then ends with a
/// prefix of it. Cut a copy of the log at a random byte after the last acknowledged line and
/// check that it opens with every acknowledged entry and its torn tail moved aside.
fn verify_cut_copy(log: &Path, acknowledged: &[String], rng: &mut StdRng, tally: &mut Tally) {
    let bytes = std::fs::read(log).unwrap();
    let acknowledged_end = match acknowledged.last() {
        Some(id) => {
            let needle = format!("{{\"id\":\"{id}\",");
            let at = find(&bytes, needle.as_bytes())
                .unwrap_or_else(|| panic!("acknowledged entry {id} is not in the file"));
            at + bytes[at..].iter().position(|&b| b == b'\n').unwrap() + 1
        }
        None => bytes.iter().position(|&b| b == b'\n').map_or(0, |p| p + 1),
    };
    if acknowledged_end >= bytes.len() {
        return;
    }
    let cut = rng.random_range(acknowledged_end + 1..=bytes.len());
    let copy = log.with_extension("cut.jsonl");
    std::fs::write(&copy, &bytes[..cut]).unwrap();
    let (reopened, report) = SessionLog::open(&copy, Durability::Flush)
        .unwrap_or_else(|e| panic!("a log cut at byte {cut} does not open: {e}"));
    for id in acknowledged {
        assert!(
            reopened.session().get(id).is_some(),
            "{id} lost by a cut at byte {cut}"
        );
    }
    assert!(report.skipped.is_empty(), "{:?}", report.skipped);
    let line_start = bytes[..cut].iter().rposition(|&b| b == b'\n').unwrap() + 1;
    if bytes[cut - 1] != b'\n' && bytes.get(cut) == Some(&b'\n') {
        // Cut just before a newline: the last entry is whole, only its newline is missing.
        // It is kept, and the writable open supplies the newline for the next append.
        assert!(
            report.torn_tail.is_none(),
            "a whole entry was taken for torn"
        );
        let last: Entry = serde_json::from_slice(&bytes[line_start..cut]).unwrap();
        assert!(
            reopened.session().get(&last.id).is_some(),
            "the whole last entry cut off from its newline at byte {cut} was dropped"
        );
        assert!(std::fs::read(&copy).unwrap().ends_with(b"\n"));
        tally.cut_whole_lines += 1;
    } else if bytes[cut - 1] != b'\n' {
        let torn = report
            .torn_tail
            .expect("a cut inside a line is a torn tail");
        let side = std::fs::read(torn.moved_to.expect("moved aside")).unwrap();
        assert_eq!(
            side,
            &bytes[line_start..cut],
            "the side file holds exactly the torn bytes"
        );
        tally.cut_torn_tails += 1;
    }
    drop(reopened);
    for entry in std::fs::read_dir(log.parent().unwrap()).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().contains(".cut.") {
            std::fs::remove_file(path).unwrap();
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Everything a reopened log must satisfy after a crash.
fn verify(log: &Path, acknowledged: &[String], tally: &mut Tally) {
    let started = Instant::now();
    let (mut reopened, report) = SessionLog::open(log, Durability::Flush)
        .unwrap_or_else(|e| panic!("the log does not open after a kill: {e}"));
    assert!(
        report.skipped.is_empty(),
        "complete lines were lost or damaged: {:?}",
        report.skipped
    );
    let session = reopened.session();
    for id in acknowledged {
        assert!(
            session.get(id).is_some(),
            "acknowledged entry {id} is missing after the kill"
        );
    }
    if let Some(torn) = &report.torn_tail {
        tally.torn_tails += 1;
        let side = torn
            .moved_to
            .as_deref()
            .expect("a writable open moves the torn tail");
        let bytes = std::fs::read(side).expect("the torn tail's side file exists");
        assert_eq!(bytes.len(), torn.bytes);
        assert!(!bytes.ends_with(b"\n"), "a complete line was moved aside");
    }
    let text = std::fs::read(log).unwrap();
    assert!(text.ends_with(b"\n"), "the log ends with a complete line");
    if !session.is_empty() {
        let leaf = session.leaf_id().expect("a log with entries has a leaf");
        assert!(
            session.get(leaf).is_some(),
            "the leaf {leaf} is not an entry of the log"
        );
    }
    tally.compactions += session
        .entries()
        .iter()
        .filter(|e| e.as_capsule().is_some())
        .count() as u64;
    // The barrier works on the reopened log, and the log takes new entries.
    let config = Config::default();
    let mapping = ToolMapping::default();
    let barrier = Barrier {
        config: &config,
        mapping: &mapping,
    };
    match barrier
        .preflight(&mut reopened)
        .expect("preflight after a crash")
    {
        Preflight::Ready { .. } | Preflight::Compact(_) | Preflight::Failed(_) => {}
    }
    let parent = reopened.session().leaf_id().map(str::to_string);
    reopened
        .append(Entry::new(
            soba_core::util::new_id("after-crash-"),
            parent,
            EntryBody::Message(MessageEntry {
                role: Role::User,
                content: vec![ContentBlock::text("continue")],
                usage: None,
                model: None,
                synthetic: false,
            }),
        ))
        .expect("the reopened log takes an append");
    drop(reopened);
    let (_, again) = read_session(log).unwrap();
    assert!(
        again.torn_tail.is_none() && again.skipped.is_empty(),
        "{again:?}"
    );
    tally.longest_verify = tally.longest_verify.max(started.elapsed());
}

#[test]
fn every_acknowledged_entry_survives_sigkill() {
    let trials = env_u64("SOBA_CRASH_TRIALS", 50);
    let seed = env_u64("SOBA_CRASH_SEED", 0x50BA);
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut tally = Tally::default();
    let started = Instant::now();
    let mut log = dir.path().join("s0.jsonl");
    for trial in 0..trials {
        // A fresh log now and then; otherwise the next run resumes the repaired one.
        if trial % 10 == 0 {
            log = dir.path().join(format!("s{trial}.jsonl"));
        }
        let run_for = Duration::from_millis(rng.random_range(5..250));
        let fsync = rng.random_range(0..4) == 0;
        let acknowledged = kill_after(&log, rng.random(), fsync, run_for);
        if !log.exists() {
            // Killed before the log was created: nothing was acknowledged.
            assert!(acknowledged.is_empty());
            continue;
        }
        verify_cut_copy(&log, &acknowledged, &mut rng, &mut tally);
        verify(&log, &acknowledged, &mut tally);
        tally.trials += 1;
        tally.acknowledged += acknowledged.len() as u64;
    }
    eprintln!(
        "crash harness: {} trials (seed {seed:#x}), {} acknowledged entries, all present; \
         {} torn tails moved aside after kills, {} after cuts inside unacknowledged writes, \
         {} cuts just before a newline kept whole; {} capsules on disk; longest verify {:?}; {:?} in all",
        tally.trials,
        tally.acknowledged,
        tally.torn_tails,
        tally.cut_torn_tails,
        tally.cut_whole_lines,
        tally.compactions,
        tally.longest_verify,
        started.elapsed()
    );
    assert!(
        tally.trials >= trials / 2,
        "most trials got far enough to write"
    );
    assert!(tally.acknowledged > 0);
    assert!(tally.cut_torn_tails > 0, "torn tails were exercised");
}

/// A long log built from a real transcript: the imported session chained `copies` times, each
/// copy continuing from the previous one's last entry (its latest usage is the budget's anchor).
fn chained_real_log(dir: &Path, copies: usize) -> Option<std::path::PathBuf> {
    let transcript = crate::common::transcripts_dir()?.join("claude-code/dmux-hook-array.json");
    let imported = dir.join("imported.jsonl");
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .arg("import")
        .arg(&transcript)
        .arg("-o")
        .arg(&imported)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = std::fs::read_to_string(&imported).unwrap();
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    let entries: Vec<serde_json::Value> = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut log = format!("{header}\n");
    let mut last: Option<String> = None;
    for copy in 0..copies {
        let rename = |id: &str| format!("c{copy}-{id}");
        for e in &entries {
            let mut e = e.clone();
            e["id"] = rename(e["id"].as_str().unwrap()).into();
            e["parentId"] = match e["parentId"].as_str() {
                Some(p) => rename(p).into(),
                None => last.clone().map_or(serde_json::Value::Null, Into::into),
            };
            for key in ["to", "firstKeptEntryId"] {
                if let Some(id) = e[key].as_str().map(rename) {
                    e[key] = id.into();
                }
            }
            if let Some(ids) = e["keptEntryIds"].as_array_mut() {
                for id in ids {
                    *id = rename(id.as_str().unwrap()).into();
                }
            }
            log.push_str(&e.to_string());
            log.push('\n');
        }
        last = Some(rename(entries.last().unwrap()["id"].as_str().unwrap()));
    }
    let path = dir.join("long.jsonl");
    std::fs::write(&path, log).unwrap();
    Some(path)
}

#[test]
fn a_writer_opening_a_long_real_log_compacts_only_past_the_logs_own_hard_limit() {
    let dir = tempfile::tempdir().unwrap();
    let Some(log) = chained_real_log(dir.path(), 6) else {
        return;
    };
    let (before, _) = read_session(&log).unwrap();
    let hard_limit = 200_000 - 64_000 - 8_192;
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["debug", "append-loop"])
        .arg(&log)
        .args(["--seed", "1", "--ops", "12"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let (after, _) = read_session(&log).unwrap();
    let mut barriers = 0;
    for e in after.entries().iter().skip(before.len()) {
        let (trigger, tokens_before) = match &e.body {
            EntryBody::Capsule(c) => (c.trigger, c.tokens.before),
            EntryBody::Compaction(r) => (r.trigger, r.tokens_before),
            _ => continue,
        };
        barriers += 1;
        if trigger == soba_core::session::trigger::Trigger::HardLimit {
            assert!(
                tokens_before > hard_limit,
                "a hard-limit compaction at {tokens_before} tokens, under the log's own \
                 hard limit {hard_limit}: {e:?}"
            );
        }
    }
    eprintln!("{barriers} compaction record(s) appended");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("keeps its model claude-sonnet-4-5-20250929 (hard limit 127.8k)"),
        "{stderr}"
    );
}
