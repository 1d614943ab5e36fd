//! The checked-in JSON Schemas match the Rust types, and they accept what SOBA writes.
//!
//! After changing a type, regenerate with `UPDATE_SCHEMAS=1 cargo test --test it schemas::`.

use std::path::PathBuf;

use serde_json::{json, Value};
use soba::schemas::{
    capsule_schema, protocol_schemas, schema_text, session_entry_schema, SCHEMA_FILES,
};
use soba_core::session::capsule::model::Artifacts;
use soba_core::session::capsule::model::CapsuleEntry;
use soba_core::session::capsule::model::CapsuleState;
use soba_core::session::capsule::model::CapsuleTokens;
use soba_core::session::capsule::model::Decision;
use soba_core::session::capsule::model::ErrorFix;
use soba_core::session::capsule::model::Exchange;
use soba_core::session::capsule::model::FileArtifact;
use soba_core::session::capsule::model::LoadedFrom;
use soba_core::session::capsule::model::Origin;
use soba_core::session::capsule::model::Quality;
use soba_core::session::capsule::model::Verification;
use soba_core::session::capsule::model::VerificationOutcome;
use soba_core::session::entry::*;
use soba_core::session::trigger::Trigger;

fn schemas_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schemas")
}

#[test]
fn checked_in_schemas_match_the_types() {
    let update = std::env::var("UPDATE_SCHEMAS").is_ok_and(|v| v == "1");
    let mut stale = Vec::new();
    let files = SCHEMA_FILES
        .iter()
        .map(|(name, generate)| (name.to_string(), generate()))
        .chain(protocol_schemas());
    let mut expected = std::collections::BTreeSet::new();
    for (name, schema) in files {
        let path = schemas_dir().join(&name);
        let fresh = schema_text(&schema);
        expected.insert(name.clone());
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &fresh).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(on_disk) if on_disk == fresh => {}
            Ok(_) => stale.push(format!("schemas/{name} differs from the Rust types")),
            Err(e) => stale.push(format!("schemas/{name}: {e}")),
        }
    }
    // A schema of a method that no longer exists is stale too.
    for folder in ["protocol", "protocol/handshake", "protocol/client"] {
        for entry in std::fs::read_dir(schemas_dir().join(folder))
            .into_iter()
            .flatten()
        {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                continue;
            }
            let name = format!("{folder}/{}", entry.file_name().to_string_lossy());
            if !expected.contains(&name) {
                if update {
                    std::fs::remove_file(schemas_dir().join(&name)).unwrap();
                } else {
                    stale.push(format!(
                        "schemas/{name} belongs to no method or notification"
                    ));
                }
            }
        }
    }
    assert!(
        stale.is_empty(),
        "{}\nRegenerate with `UPDATE_SCHEMAS=1 cargo test --test it schemas::`, then the SDK types \
         (`node sdk/ts/scripts/gen-types.mjs`, `python3 sdk/python/scripts/gen_types.py`), and \
         commit the result.",
        stale.join("\n")
    );
}

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::validator_for(schema).expect("schema compiles")
}

fn errors(v: &jsonschema::Validator, instance: &Value) -> Vec<String> {
    v.iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

fn capsule() -> CapsuleEntry {
    CapsuleEntry {
        checkpoint_id: "ck_0123456789ab".into(),
        trigger: Trigger::User,
        quality: Quality::Model,
        first_kept_entry_id: Some("e3".into()),
        previous_checkpoint_id: Some("ck_aaaaaaaaaaaa".into()),
        state: CapsuleState {
            goal: "g".into(),
            requests: vec!["r".into()],
            constraints: vec!["c".into()],
            completed: vec!["d".into()],
            active: vec!["a".into()],
            pending: vec!["p".into()],
            decisions: vec![Decision {
                decision: "x".into(),
                rationale: "y".into(),
            }],
            findings: vec!["f".into()],
            current_work: vec!["ran `cargo test` — succeeded".into()],
            errors: vec![ErrorFix {
                error: "e".into(),
                fix: "x".into(),
            }],
            blockers: vec!["b".into()],
            next_steps: vec!["n".into()],
            exchanges: vec![Exchange {
                user: "u".into(),
                agent: "a".into(),
            }],
            sources: Default::default(),
        },
        artifacts: Artifacts {
            read_files: vec![FileArtifact {
                path: "a.rs".into(),
                entry_ids: vec!["e1".into()],
                ..Default::default()
            }],
            modified_files: vec![FileArtifact {
                path: "b.rs".into(),
                entry_ids: vec![],
                ..Default::default()
            }],
            verification: vec![Verification {
                command: "cargo test".into(),
                outcome: VerificationOutcome::Passed,
                entry_id: "e2".into(),
                edited_since: true,
            }],
            active_skills: vec!["s".into()],
            work_trees: vec!["/w/repo.worktrees/fix".into()],
        },
        tokens: CapsuleTokens {
            before: 10,
            after: 5,
            short_tail: None,
        },
        origin: Origin::Loaded,
        mirrored: false,
        title: Some("t".into()),
        degraded_reason: None,
        instructions: Some("focus".into()),
        elide_tool_results_over: Some(4000),
        loaded_from: Some(LoadedFrom {
            path: "x.capsule.md".into(),
            workspace: Some("/w".into()),
            session: Some("s".into()),
            checkpoint_id: Some("ck_1".into()),
            created: Some("2026-01-01T00:00:00Z".into()),
        }),
    }
}

/// One body of every entry type. The match makes a new variant a compile error here.
fn bodies() -> Vec<EntryBody> {
    let all = vec![
        EntryBody::Message(MessageEntry {
            role: Role::Assistant,
            content: vec![
                ContentBlock::text("hi"),
                ContentBlock::Thinking {
                    thinking: "hmm".into(),
                    extra: Default::default(),
                },
                ContentBlock::ToolCall {
                    id: "c1".into(),
                    name: "Bash".into(),
                    input: Box::new(json!({"command": "ls"})),
                    extra: Default::default(),
                },
                ContentBlock::Image {
                    media_type: Some("image/png".into()),
                    data: Some("iVBORw0KGgo=".into()),
                    extra: Default::default(),
                },
            ],
            usage: Some(Usage {
                input: 1,
                cache_read: 2,
                cache_write: 3,
                output: 4,
            }),
            model: Some("gpt-4o".into()),
            synthetic: true,
        }),
        EntryBody::ToolResult(ToolResultEntry {
            call_id: "c1".into(),
            tool_name: Some("Bash".into()),
            content: vec![ContentBlock::text("ok")],
            is_error: false,
            exit_code: Some(0),
        }),
        EntryBody::Capsule(Box::new(capsule())),
        EntryBody::Checkpoint(CheckpointEntry {
            kind: CheckpointKind::Milestone,
            label: "parser done".into(),
            checkpoint_id: None,
        }),
        EntryBody::File(FileEntry {
            path: "a.rs".into(),
            op: FileOp::Modified,
            source: FileSource::Watcher,
        }),
        EntryBody::Setting(SettingEntry {
            auto_compact: Some(false),
            system_tokens: Some(1200),
            ..Default::default()
        }),
        EntryBody::Rewind(RewindEntry { to: "e1".into() }),
        EntryBody::Skill(SkillEntry {
            name: "review".into(),
            active: true,
        }),
        EntryBody::Intent(IntentEntry {
            trigger: Trigger::Milestone,
            action: IntentAction::Recorded,
            intent_id: None,
            label: Some("m".into()),
        }),
        EntryBody::TurnComplete(TurnCompleteEntry { usage: None }),
        EntryBody::Compaction(CompactionRecord {
            operation_id: "op_1".into(),
            trigger: Trigger::TurnComplete,
            outcome: Outcome::Skipped,
            reason: "below ROI".into(),
            tokens_before: 30000,
            tokens_after: None,
        }),
        EntryBody::ForeignCompaction(Box::new(ForeignCompactionEntry {
            agent: "codex".into(),
            trigger: Some("auto".into()),
            tokens_before: Some(180000),
            summary: Some("s".into()),
            summary_tokens: Some(900),
            first_kept_entry_id: None,
            kept_items: Some(12),
            kept_entry_ids: None,
            instructions: None,
        })),
    ];
    let mut covered = [false; 12];
    for b in &all {
        let i = match b {
            EntryBody::Message(_) => 0,
            EntryBody::ToolResult(_) => 1,
            EntryBody::Capsule(_) => 2,
            EntryBody::Checkpoint(_) => 3,
            EntryBody::File(_) => 4,
            EntryBody::Setting(_) => 5,
            EntryBody::Rewind(_) => 6,
            EntryBody::Skill(_) => 7,
            EntryBody::Intent(_) => 8,
            EntryBody::TurnComplete(_) => 9,
            EntryBody::Compaction(_) => 10,
            EntryBody::ForeignCompaction(_) => 11,
        };
        covered[i] = true;
    }
    assert!(
        covered.iter().all(|c| *c),
        "a sample is missing: {covered:?}"
    );
    all
}

#[test]
fn session_entry_schema_accepts_every_entry_type_and_the_header() {
    let v = validator(&session_entry_schema());
    let header = SessionHeader {
        kind: HeaderTag::Session,
        version: LOG_FORMAT_VERSION,
        id: "s1".into(),
        workspace: "/w".into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        model: Some(ModelRef {
            name: Some("gpt-4o".into()),
            context_window: Some(128000),
            ..Default::default()
        }),
        source: Some(SourceInfo {
            format: "pi".into(),
            path: "x.jsonl".into(),
            session_id: None,
        }),
    };
    let h = serde_json::to_value(&header).unwrap();
    assert!(errors(&v, &h).is_empty(), "{:?}", errors(&v, &h));
    for (n, body) in bodies().into_iter().enumerate() {
        let name = body.type_name();
        let mut entry = Entry::new(format!("e{n}"), Some("e0".into()), body);
        entry.source_id = Some("src".into());
        let line = serde_json::to_value(&entry).unwrap();
        assert_eq!(line["type"], name);
        assert!(
            errors(&v, &line).is_empty(),
            "{name}: {:?}",
            errors(&v, &line)
        );
    }
}

#[test]
fn session_entry_schema_rejects_malformed_lines() {
    let v = validator(&session_entry_schema());
    let bad = [
        json!({"id": "e1", "parentId": null, "ts": "t", "type": "bogus"}),
        json!({"parentId": null, "ts": "t", "type": "rewind", "to": "e0"}),
        json!({"id": "e1", "parentId": null, "ts": "t", "type": "rewind"}),
        json!({"id": "e1", "parentId": null, "ts": "t", "type": "message", "role": "robot", "content": []}),
    ];
    for line in bad {
        assert!(!v.is_valid(&line), "accepted {line}");
    }
}

#[test]
fn capsule_schema_accepts_a_capsule_and_rejects_a_bad_quality() {
    let v = validator(&capsule_schema());
    let mut c = serde_json::to_value(capsule()).unwrap();
    assert!(errors(&v, &c).is_empty(), "{:?}", errors(&v, &c));
    c["quality"] = json!("great");
    assert!(!v.is_valid(&c));
}

#[test]
fn config_schema_accepts_a_config_and_rejects_unknown_keys() {
    let v = validator(&soba_core::config::config_schema());
    let good = json!({"compaction": {"keepRecentTokens": 20000, "minSavingsRatio": 0.3}, "memory": {"mirrorExplicitCompacts": true}});
    assert!(errors(&v, &good).is_empty(), "{:?}", errors(&v, &good));
    assert!(!v.is_valid(&json!({"compaction": {"keepRecentToken": 1}})));
    assert!(!v.is_valid(&json!({"compaction": {"minSavingsRatio": 2.0}})));
}

/// The schema an editor validates with and the binary agree on every ratio: (0, 1].
#[test]
fn config_schema_refuses_the_ratios_the_binary_refuses() {
    let v = validator(&soba_core::config::config_schema());
    for key in ["minSavingsRatio", "autoCompactThresholdRatio"] {
        for (ratio, allowed) in [
            (0.0, false),
            (-0.1, false),
            (0.5, true),
            (1.0, true),
            (1.1, false),
        ] {
            let doc = json!({"compaction": {key: ratio}});
            assert_eq!(v.is_valid(&doc), allowed, "schema: {key} = {ratio}");
            let binary =
                soba_core::config::ConfigFile::parse("t.json", &doc.to_string()).and_then(|f| {
                    soba_core::config::Config::resolve(&[f], None, &Default::default()).map(|_| ())
                });
            assert_eq!(
                binary.is_ok(),
                allowed,
                "binary: {key} = {ratio}: {binary:?}"
            );
        }
    }
}
