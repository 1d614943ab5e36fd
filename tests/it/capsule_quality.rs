//! The capsule-quality benchmark (`docs/capsule-quality.md`): at every annotated cut of the real
//! transcripts in `../shared/fixtures/transcripts`, the local capsule must meet the four targets
//! — the goal right, no question kept as a constraint, next steps present and none stale, every
//! check's last outcome right. The per-field precision/recall table is printed either way; a
//! model capsule is built and scored too when `SOBA_EVAL_ENDPOINT` names a server.

use crate::common;
use crate::loopback::{json, Loopback};

use std::path::PathBuf;

use soba::capsule::Quality;
use soba::config::{Provider, SummarizerConfig};
use soba::eval::bench::{load_gold, run, GoldCut, ModelEndpoint, MODEL_SKIPPED};
use soba::eval::capsule_quality::{failure_lines, render_table, Cut, Field};

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

#[test]
fn the_local_capsule_meets_the_targets_at_every_annotated_cut() {
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
    let failures = failure_lines(&local);
    assert!(
        failures.is_empty(),
        "the local capsule misses {} target(s) (docs/capsule-quality.md):\n{}",
        failures.len(),
        failures.join("\n")
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
