//! The capsule-quality benchmark (`docs/capsule-quality.md`): at every annotated cut of the real
//! transcripts in `../shared/fixtures/transcripts`, the local capsule must meet the four targets
//! — the goal right, no question kept as a constraint, next steps present and none stale, every
//! check's last outcome right. The per-field precision/recall table is printed either way; a
//! model capsule is built and scored too when `SOBA_EVAL_ENDPOINT` names a server.

use crate::common;

use std::path::PathBuf;

use soba::eval::bench::{load_gold, run, GoldCut, ModelEndpoint, MODEL_SKIPPED};
use soba::eval::capsule_quality::{failure_lines, render_table, Cut};

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
