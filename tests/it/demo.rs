//! `soba demo` end to end: every trigger and outcome the demo promises is in its JSON output.

use std::process::Command;

use serde_json::Value;

/// The binary with no user configuration (so no summarization model) and no colour.
fn soba() -> Command {
    let home = std::env::temp_dir().join("soba-demo-test-home");
    let mut c = Command::new(env!("CARGO_BIN_EXE_soba"));
    c.env("NO_COLOR", "1")
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"));
    c
}

fn demo_json(dir: &std::path::Path) -> Value {
    let out = soba()
        .args(["demo", "--json", "--out"])
        .arg(dir)
        .output()
        .expect("soba runs");
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object on stdout")
}

fn compactions<'a>(v: &'a Value, trigger: &str, outcome: &str) -> Vec<&'a Value> {
    v["compactions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["trigger"] == trigger && c["outcome"] == outcome)
        .collect()
}

#[test]
fn the_demo_fires_every_trigger_and_shows_a_skipped_and_a_stale_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let v = demo_json(dir.path());
    for trigger in [
        "auto_threshold",
        "turn_complete",
        "milestone",
        "plan_pivot",
        "hard_limit",
        "user",
        "context_overflow",
    ] {
        let done = compactions(&v, trigger, "completed");
        assert!(!done.is_empty(), "no completed {trigger} compaction: {v:#}");
        for c in done {
            assert!(c["checkpointId"].as_str().unwrap().starts_with("ck_"));
            assert!(
                c["tokensAfter"].as_u64() < c["tokensBefore"].as_u64(),
                "{c}"
            );
            assert_eq!(c["quality"], "local", "built locally: {c}");
        }
    }
    let skipped = v["compactions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["outcome"] == "skipped")
        .collect::<Vec<_>>();
    assert!(
        skipped
            .iter()
            .any(|c| c["reason"].as_str().unwrap().contains("ROI too low")),
        "a soft compaction skipped for its ROI: {skipped:?}"
    );
    assert!(
        !compactions(&v, "user", "stale").is_empty(),
        "a stale compaction"
    );
    assert!(v["capsuleWriter"]
        .as_str()
        .unwrap()
        .starts_with("built locally"));
}

#[test]
fn the_overflow_recovery_is_followed_by_its_one_retry_and_every_input_fits() {
    let dir = tempfile::tempdir().unwrap();
    let v = demo_json(dir.path());
    let hard = v["limits"]["hardLimit"].as_u64().unwrap();
    let steps = v["steps"].as_array().unwrap();
    assert!(steps.len() > 20, "a multi-turn session");
    for s in steps {
        assert!(s["effectiveTokens"].as_u64().unwrap() <= hard, "{s}");
    }
    let overflow = compactions(&v, "context_overflow", "completed")[0];
    let at = overflow["step"].as_u64().unwrap() as usize;
    // The rejected request was the step before; the retry is the step the recovery preceded.
    let rejected = &steps[at - 1];
    let retry = &steps[at];
    assert_eq!(retry["turn"], overflow["turn"]);
    assert_eq!(rejected["turn"], overflow["turn"]);
    assert!(retry["effectiveTokens"].as_u64() < rejected["effectiveTokens"].as_u64());
    assert_eq!(
        compactions(&v, "context_overflow", "failed").len(),
        0,
        "the retry was not rejected again"
    );
}

#[test]
fn the_explicit_compact_keeps_its_instructions_and_the_files_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let v = demo_json(dir.path());
    let log = std::fs::read_to_string(v["sessionLog"].as_str().unwrap()).unwrap();
    let user_checkpoint = compactions(&v, "user", "completed")[0]["checkpointId"]
        .as_str()
        .unwrap()
        .to_string();
    let capsule = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["type"] == "capsule" && e["checkpointId"] == user_checkpoint.as_str())
        .expect("the capsule of the explicit compact is in the log");
    assert_eq!(
        capsule["instructions"],
        "keep the public API changes and the benchmark numbers"
    );
    // Nine outcomes; only completed ones append a capsule.
    let capsules = log
        .lines()
        .filter(|l| l.contains(r#""type":"capsule""#))
        .count();
    let completed = v["compactions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["outcome"] == "completed")
        .count();
    assert_eq!(capsules, completed);
    let report = std::fs::read_to_string(v["report"].as_str().unwrap()).unwrap();
    assert!(report.contains("<svg") && report.contains("compaction-row"));
    assert!(v["latestCapsule"]
        .as_str()
        .unwrap()
        .starts_with("# Context Capsule"));
}

#[test]
fn the_text_timeline_has_a_bar_per_turn_and_the_completion_lines_without_colour_under_no_color() {
    let dir = tempfile::tempdir().unwrap();
    let out = soba()
        .args(["demo", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains('\x1b'), "no colour: {text}");
    assert!(
        text.contains("hard limit 20.0k"),
        "the header shows the config: {text}"
    );
    for turn in 1..=6 {
        assert!(
            text.contains(&format!("turn  {turn} ▕")),
            "turn {turn}: {text}"
        );
    }
    assert!(text.contains("hard_limit compact: "), "{text}");
    assert!(text.contains("user compact stale: "), "{text}");
    assert!(text.contains(&format!(
        "session log  {}",
        dir.path().join("session.jsonl").display()
    )));
    assert!(text.contains(&format!(
        "report       {}",
        dir.path().join("report.html").display()
    )));
}

#[test]
fn the_demo_refuses_to_overwrite_an_earlier_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("session.jsonl"), "").unwrap();
    let out = soba()
        .args(["demo", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("already exists") && err.contains("--out"),
        "{err}"
    );
}

#[test]
fn every_demo_compaction_writes_its_flight_record() {
    let dir = tempfile::tempdir().unwrap();
    let v = demo_json(dir.path());
    let log = dir.path().join("session.jsonl");
    let out = soba()
        .args(["flight", "--json"])
        .arg(&log)
        .output()
        .expect("soba runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let flight: Value = serde_json::from_slice(&out.stdout).unwrap();
    let records = flight["records"].as_array().unwrap();
    let ran: Vec<(&Value, &Value)> = v["compactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (&c["operationId"], &c["outcome"]))
        .collect();
    let recorded: Vec<(&Value, &Value)> = records
        .iter()
        .map(|r| (&r["operationId"], &r["outcome"]))
        .collect();
    assert_eq!(recorded, ran, "one record per compaction, in order");
    // Never capsule text, and private.
    let text = std::fs::read_to_string(dir.path().join("flight.jsonl")).unwrap();
    assert!(!text.contains("Context Capsule"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("flight.jsonl"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn the_demo_folder_it_creates_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::tempdir().unwrap();
    let out = base.path().join("new/demo");
    demo_json(&out);
    for dir in [base.path().join("new"), out] {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", dir.display());
    }
}
