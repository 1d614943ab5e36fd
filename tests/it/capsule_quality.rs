//! The capsule-quality benchmark (`docs/capsule-quality.md`): at the annotated cuts of the real
//! transcripts in `../shared/fixtures/transcripts` the builder was tuned on, the local capsule
//! must meet the four targets — the goal right, no question kept as a constraint, next steps
//! present and none stale, every check's last outcome right; at the held-out cuts the misses are
//! printed. The per-field precision/recall table is printed either way; a model capsule is built
//! and scored too when `SOBA_EVAL_ENDPOINT` names a server. The floors of the other fields
//! (`FLOORS`) are reported, and those in [`ENFORCED_FLOORS`] asserted.

use crate::common;
use crate::loopback::{json, Loopback};

use std::path::PathBuf;

use soba::eval::bench::{load_gold, run, GoldCut, ModelEndpoint, MODEL_SKIPPED};
use soba::eval::capsule_quality::{
    failure_lines, floor, floor_miss_lines, render_floors, render_table, total_value, Cut,
    CutScore, Field, Floor, Measure, FLOORS,
};
use soba_core::config::{Provider, SummarizerConfig};
use soba_core::session::capsule::model::Quality;

/// The floors of `FLOORS` this test asserts at every annotated cut where they apply; the others
/// are reported only. A floor goes in here once the local capsule meets it at every cut, so that
/// a builder change that loses it fails. At the 24 annotated cuts the local capsule meets the
/// prompts-kept floor at every cut (its quoted exchanges and the requests by their openings);
/// the others not yet (see docs/capsule-quality.md for the figures).
const ENFORCED_FLOORS: &[(Field, Measure)] = &[(Field::Prompts, Measure::Recall)];

/// The floors this test asserts over all cuts together (micro-averaged): the local capsule meets
/// files precision and prompts kept there.
const ENFORCED_FLOORS_OVER_ALL_CUTS: &[(Field, Measure)] = &[
    (Field::Files, Measure::Precision),
    (Field::Prompts, Measure::Recall),
];

fn floor_named(field: Field, measure: Measure) -> Floor {
    floor(field, measure).unwrap_or_else(|| {
        panic!(
            "an enforced floor names {} {}, which has no floor in FLOORS",
            field.as_str(),
            measure.as_str()
        )
    })
}

/// The enforced floors `cuts` miss, one line each.
fn enforced_floor_misses(cuts: &[CutScore]) -> Vec<String> {
    let every_cut: Vec<Floor> = ENFORCED_FLOORS
        .iter()
        .map(|&(f, m)| floor_named(f, m))
        .collect();
    let mut misses = floor_miss_lines(cuts, &every_cut);
    for &(field, measure) in ENFORCED_FLOORS_OVER_ALL_CUTS {
        let f = floor_named(field, measure);
        if let Some(v) = total_value(&f, cuts).filter(|v| *v < f.min) {
            misses.push(format!("all cuts: {}: {v:.2}", f.name()));
        }
    }
    misses
}

fn gold() -> Vec<GoldCut> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/capsule_quality/gold");
    load_gold(&dir).expect("the gold annotations load")
}

/// Every compaction the source agents made in the fixtures is an annotated cut, next to cuts in
/// every other transcript.
#[test]
fn the_gold_covers_every_agent_compaction_and_every_transcript() {
    let gold = gold();
    for (file, compactions) in [
        ("claude-code/entire-cli-two-compactions.jsonl", 2),
        ("codex/agentv-two-compactions.jsonl", 2),
        ("pi/pi-mono-two-compactions.jsonl", 2),
    ] {
        for n in 1..=compactions {
            assert!(
                gold.iter().any(|g| g.annotation.transcript == file
                    && g.annotation.cut == Cut::BeforeCompaction(n)),
                "{file}: compaction {n} is not annotated"
            );
        }
    }
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).into_iter().flatten())
        .map(|f| f.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl" || e == "json"))
        .map(|p| p.strip_prefix(&dir).unwrap().display().to_string())
        .collect();
    files.sort();
    for f in &files {
        assert!(
            gold.iter().any(|g| &g.annotation.transcript == f),
            "{f} has no annotated cut"
        );
    }
}

/// The cuts the working-state builder was developed against: the four targets are asserted at
/// these. The cuts annotated since (other points of the same transcripts, other task kinds) are
/// held out: their missed targets are printed, not asserted, until the builder meets them; to
/// assert them too, add their names here.
const TARGETS_ASSERTED_AT: [&str; 12] = [
    "agentcmd-interrupted-calls",
    "agentcmd-session-four",
    "agentv-1",
    "agentv-2",
    "codex-agentcmd-rollout",
    "dmux-hook-array",
    "entire-cli-1",
    "entire-cli-2",
    "mini-swe-agent-astropy",
    "pi-mono-1",
    "pi-mono-2",
    "pi-mono-large-session",
];

#[test]
fn the_local_capsule_meets_the_targets_at_every_asserted_cut() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let gold = gold();
    let model = ModelEndpoint::from_env().expect("SOBA_EVAL_* settings");
    match &model {
        Some(m) => eprintln!("capsule quality: model capsule by {}", m.describe()),
        None => eprintln!("{MODEL_SKIPPED}"),
    }
    let results = run(&dir, &gold, model.as_ref(), &mut |_| {}).expect("every cut is built");
    assert_eq!(results.len(), gold.len());
    let local: Vec<_> = results.iter().map(|r| r.local.clone()).collect();
    eprintln!("{}", render_table("local capsule", &local));
    if let Some(m) = &model {
        // Reported, not asserted: the targets are the local builder's.
        let scored: Vec<_> = results
            .iter()
            .filter_map(|r| r.model.as_ref()?.as_ref().ok().map(|(s, _)| s.clone()))
            .collect();
        eprintln!(
            "{}",
            render_table(&format!("model capsule ({})", m.describe()), &scored)
        );
        for line in failure_lines(&scored) {
            eprintln!("  {line}");
        }
        for r in &results {
            if let Some(Err(why)) = &r.model {
                eprintln!("  {}: NO MODEL CAPSULE: {why}", r.name);
            }
        }
    }
    for name in TARGETS_ASSERTED_AT {
        assert!(
            local.iter().any(|c| c.cut == name),
            "TARGETS_ASSERTED_AT names {name}, which is not an annotated cut"
        );
    }
    let (asserted, held_out): (Vec<CutScore>, Vec<CutScore>) = local
        .into_iter()
        .partition(|c| TARGETS_ASSERTED_AT.contains(&c.cut.as_str()));
    for line in failure_lines(&held_out) {
        eprintln!("  held out: {line}");
    }
    let failures = failure_lines(&asserted);
    assert!(
        failures.is_empty(),
        "the local capsule misses {} target(s) (docs/capsule-quality.md):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The floors beyond the four targets: every floor's figures are printed with the cuts that miss
/// it, and the enforced ones must hold.
#[test]
fn the_local_capsule_meets_the_enforced_floors() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let gold = gold();
    let results = run(&dir, &gold, None, &mut |_| {}).expect("every cut is built");
    let local: Vec<CutScore> = results.iter().map(|r| r.local.clone()).collect();
    eprintln!("{}", render_floors(&local, &FLOORS));
    let misses = enforced_floor_misses(&local);
    assert!(
        misses.is_empty(),
        "the local capsule misses {} enforced floor(s) (docs/capsule-quality.md):\n{}",
        misses.len(),
        misses.join("\n")
    );
}

/// The model path without a model: an OpenAI-compatible loopback server answers every
/// summarizer request with the same capsule, which is then scored like the local one; a server
/// that fails yields no model capsule and says why (the local fallback is not scored as the
/// model's).
#[test]
fn a_model_capsule_from_an_openai_compatible_endpoint_is_scored_and_a_failing_one_reported() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let cut: Vec<GoldCut> = gold()
        .into_iter()
        .filter(|g| g.name == "agentcmd-session-four")
        .collect();
    assert_eq!(cut.len(), 1);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let state = serde_json::json!({
        "goal": "Show the initials of the logged-in user's username in NavUser when there is no name",
        "constraints": ["Use the username's initials when the name isn't present"],
        "completed": ["getInitials added to NavUser", "AppSidebar passes the username"],
        "active": ["Fix getInitials for an empty name"],
        "pending": [],
        "decisions": [{"decision": "Fall back to the username", "rationale": "the User model only has a username"}],
        "blockers": [],
        "nextSteps": ["Fix getInitials for an empty string, then re-run pnpm test NavUser.test.tsx"]
    });
    let body = serde_json::json!({"id": "chatcmpl-1", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": state.to_string()},
        "finish_reason": "stop"}]})
    .to_string();
    let server = runtime.block_on(Loopback::start(move |_, _| json(200, &body)));
    let failing = runtime.block_on(Loopback::start(|_, _| {
        json(500, r#"{"error":{"message":"overloaded"}}"#)
    }));
    let endpoint = |base: &str| ModelEndpoint {
        summarizer: SummarizerConfig {
            provider: Provider::Openai,
            base_url: Some(format!("{base}/v1")),
            model: Some("open-weights-test".into()),
            ..SummarizerConfig::default()
        },
        timeout_ms: 60_000,
    };

    let results = run(&dir, &cut, Some(&endpoint(&server.base)), &mut |_| {}).unwrap();
    let Some(Ok((score, capsule))) = &results[0].model else {
        panic!("no model capsule: {:?}", results[0].model)
    };
    assert_eq!(capsule.quality, Quality::Model);
    assert!(capsule.state.goal.starts_with("Show the initials"));
    assert!(!server.requests().is_empty());
    assert!(score.failures.is_empty(), "{:?}", score.failures);
    assert_eq!(score.field(Field::Decisions).recall(), Some(0.5));
    // The facts are the log's, whoever writes the narrative.
    assert_eq!(capsule.artifacts, results[0].local_capsule.artifacts);

    let results = run(&dir, &cut, Some(&endpoint(&failing.base)), &mut |_| {}).unwrap();
    let Some(Err(why)) = &results[0].model else {
        panic!("expected no model capsule: {:?}", results[0].model)
    };
    assert!(why.contains("HTTP 500"), "{why}");
}

/// `soba debug capsule-quality --json`: the scores of every cut, each with the capsule it scored,
/// and the loud line that no model was asked.
#[test]
fn the_debug_command_prints_every_cut_as_json_and_says_the_model_was_skipped() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let gold_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/capsule_quality/gold");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["debug", "capsule-quality", "--json", "--gold"])
        .arg(&gold_dir)
        .arg("--transcripts")
        .arg(&dir)
        .env_remove("SOBA_EVAL_ENDPOINT")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains(MODEL_SKIPPED), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cuts = v["local"]["cuts"].as_array().unwrap();
    assert_eq!(cuts.len(), gold().len());
    for c in cuts {
        assert!(c["capsule"]["state"]["goal"].is_string(), "{c}");
        assert!(c["fields"]["next_steps"]["annotated"].is_u64(), "{c}");
    }
    assert!(v["local"]["totals"]["checks"]["recall"].is_number(), "{v}");
    assert!(v.get("model").is_none());
}
