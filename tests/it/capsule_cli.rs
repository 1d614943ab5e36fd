//! `soba capsule export|load|list` and `soba rewind`, through the library glue and through
//! the binary.

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use soba_core::capsule::handoff::{export_capsule, list_capsules, load_capsule};
use soba_core::capsule::portable::{read_capsule_file, write_capsule_file};
use soba_core::config::Durability;
use soba_core::session::capsule::model::Artifacts;
use soba_core::session::capsule::model::CapsuleEntry;
use soba_core::session::capsule::model::CapsuleState;
use soba_core::session::capsule::model::CapsuleTokens;
use soba_core::session::capsule::model::Decision;
use soba_core::session::capsule::model::FileArtifact;
use soba_core::session::capsule::model::Origin;
use soba_core::session::capsule::model::Quality;
use soba_core::session::entry::{
    ContentBlock, Entry, EntryBody, HeaderTag, MessageEntry, Role, SessionHeader,
    LOG_FORMAT_VERSION,
};
use soba_core::session::log::{read_session, SessionLog};
use soba_core::session::trigger::Trigger;
use soba_core::session::view::ModelView;

fn header(id: &str, workspace: &str) -> SessionHeader {
    SessionHeader {
        kind: HeaderTag::Session,
        version: LOG_FORMAT_VERSION,
        id: id.into(),
        workspace: workspace.into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        model: None,
        source: None,
    }
}

fn user(id: &str, parent: Option<&str>, text: &str) -> Entry {
    Entry::new(
        id,
        parent.map(str::to_string),
        EntryBody::Message(MessageEntry {
            role: Role::User,
            content: vec![ContentBlock::text(text)],
            usage: None,
            model: None,
            synthetic: false,
        }),
    )
}

fn handoff_capsule() -> CapsuleEntry {
    let key = format!(
        "{}{}",
        "sk-ant-api03-", "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa9Zx8Yw7Vu6Ts5Rq4Po3Nm2Lk1Ji0"
    );
    CapsuleEntry {
        checkpoint_id: "ck_00000000beef".into(),
        trigger: Trigger::Handoff,
        quality: Quality::Model,
        first_kept_entry_id: Some("u1".into()),
        previous_checkpoint_id: None,
        state: CapsuleState {
            goal: "Finish the importer".into(),
            decisions: vec![Decision {
                decision: "Stream records".into(),
                rationale: "files reach 100 MB".into(),
            }],
            blockers: vec![format!("CI has no ANTHROPIC_API_KEY={key}")],
            next_steps: vec!["Add the codex reader".into()],
            ..Default::default()
        },
        artifacts: Artifacts {
            modified_files: vec![FileArtifact {
                path: "src/import/mod.rs".into(),
                entry_ids: vec!["u1".into()],
                ..Default::default()
            }],
            ..Default::default()
        },
        tokens: CapsuleTokens {
            before: 120_000,
            after: 8_000,
            short_tail: None,
        },
        origin: Origin::Session,
        mirrored: false,
        title: Some("Importer hand-off".into()),
        degraded_reason: None,
        instructions: None,
        elide_tool_results_over: None,
        loaded_from: None,
    }
}

/// Session A: one message and a capsule after it.
fn session_a(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("a.jsonl");
    let mut log =
        SessionLog::create(&path, header("sess-a", "/work/a"), Durability::Flush).unwrap();
    log.append(user("u1", None, "import the transcripts"))
        .unwrap();
    log.append(Entry::new(
        "c1",
        Some("u1".into()),
        EntryBody::Capsule(Box::new(handoff_capsule())),
    ))
    .unwrap();
    path
}

#[test]
fn export_load_export_is_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = read_session(&session_a(dir.path())).unwrap();
    let first = export_capsule(&a, "ck_00000000beef").unwrap();
    assert!(
        first.text.contains("[redacted:anthropic_key]"),
        "{}",
        first.text
    );
    assert_eq!(first.redactions.total(), 1);
    let file = dir.path().join("handoff.capsule.md");
    write_capsule_file(&file, &first.text).unwrap();

    // Load into another session that already has history.
    let b_path = dir.path().join("b.jsonl");
    let mut b =
        SessionLog::create(&b_path, header("sess-b", "/work/b"), Durability::Flush).unwrap();
    b.append(user("b1", None, "hello")).unwrap();
    let parsed = read_capsule_file(&file).unwrap();
    let r = load_capsule(&mut b, &parsed, &file.display().to_string()).unwrap();
    assert_eq!(r.source_checkpoint_id, "ck_00000000beef");
    assert_ne!(r.checkpoint_id, "ck_00000000beef");
    drop(b);

    let (b, _) = read_session(&b_path).unwrap();
    let loaded = b.get(&r.entry_id).unwrap();
    assert_eq!(loaded.parent_id.as_deref(), Some("b1"));
    let cap = loaded.as_capsule().unwrap();
    assert_eq!(cap.origin, Origin::Loaded);
    assert_eq!(cap.first_kept_entry_id, None);
    assert_eq!(
        cap.loaded_from.as_ref().unwrap().session.as_deref(),
        Some("sess-a")
    );
    // It is the latest capsule of the model input, which now opens with it alone.
    let view = ModelView::build(&b, b.leaf());
    assert_eq!(view.capsule, b.index_of(&r.entry_id));
    let messages = view.messages(&b);
    assert_eq!(messages.len(), 1);
    let opening = soba_core::session::entry::blocks_text(&messages[0].content);
    assert!(
        opening.contains("Finish the importer") && opening.contains("[redacted:anthropic_key]"),
        "{opening}"
    );

    let second = export_capsule(&b, &r.checkpoint_id).unwrap();
    assert_eq!(second.text, first.text);
    assert!(second.redactions.is_empty());
}

#[test]
fn export_of_an_unknown_checkpoint_lists_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = read_session(&session_a(dir.path())).unwrap();
    let err = export_capsule(&a, "ck_00000000beep")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Did you mean `ck_00000000beef`?")
            && err.contains("Its capsules: ck_00000000beef"),
        "{err}"
    );
}

#[test]
fn load_into_an_empty_session_starts_its_tree() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = read_session(&session_a(dir.path())).unwrap();
    let file = dir.path().join("h.capsule.md");
    write_capsule_file(&file, &export_capsule(&a, "ck_00000000beef").unwrap().text).unwrap();
    let mut log = SessionLog::create(
        &dir.path().join("new.jsonl"),
        header("new", "/w"),
        Durability::Flush,
    )
    .unwrap();
    let r = load_capsule(&mut log, &read_capsule_file(&file).unwrap(), "h.capsule.md").unwrap();
    let s = log.session();
    assert_eq!(s.get(&r.entry_id).unwrap().parent_id, None);
    let rows = list_capsules(s);
    assert_eq!(rows.len(), 1);
    assert!(rows[0].current && rows[0].on_branch);
    assert_eq!(
        (rows[0].origin.as_str(), rows[0].trigger.as_str()),
        ("loaded", "handoff")
    );
}

fn soba(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Put a folder that is not empty where a side file of the log goes, so it cannot be written.
fn block_side_file(log: &Path, suffix: &str) -> std::path::PathBuf {
    let mut side = log.as_os_str().to_owned();
    side.push(suffix);
    let side = std::path::PathBuf::from(side);
    let _ = std::fs::remove_file(&side);
    std::fs::create_dir(&side).unwrap();
    std::fs::write(side.join("keep"), "x").unwrap();
    side
}

#[test]
fn side_files_that_cannot_be_written_are_warnings_of_the_binary_not_failures() {
    let dir = tempfile::tempdir().unwrap();
    let a = session_a(dir.path());
    let note = block_side_file(&a, ".lock");
    let counts = block_side_file(&a, ".tokens");
    let (ok, _, err) = soba(&["rewind", a.to_str().unwrap(), "u1"]);
    assert!(ok, "{err}");
    let warned = |what: &str, side: &Path| {
        err.lines()
            .any(|l| l.starts_with(&format!("soba: warning: {what} in {}: ", side.display())))
    };
    assert!(warned("cannot name this writer", &note), "{err}");
    assert!(warned("cannot save token counts", &counts), "{err}");
    assert!(
        err.contains("the next open of this session counts its entries again"),
        "{err}"
    );
    let (s, _) = read_session(&a).unwrap();
    assert_eq!(s.len(), 3, "the rewind was written");
}

#[test]
fn binary_exports_loads_lists_and_rewinds() {
    let dir = tempfile::tempdir().unwrap();
    let a = session_a(dir.path());
    let a = a.to_str().unwrap();
    let file = dir.path().join("out.capsule.md");
    let file_s = file.to_str().unwrap();

    let (ok, out, err) = soba(&["capsule", "export", a, "ck_00000000beef", file_s, "--json"]);
    assert!(ok, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["redactions"]["counts"]["anthropic_key"], 1);
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .starts_with("---\nformat: soba-capsule/1\n"));

    let (ok, _, err) = soba(&["capsule", "export", a, "ck_00000000beef", file_s]);
    assert!(!ok && err.contains("already exists; pass --force"), "{err}");
    let (ok, out, err) = soba(&["capsule", "export", a, "ck_00000000beef", file_s, "--force"]);
    assert!(
        ok && out.contains("1 secret redacted (anthropic_key)"),
        "{out}{err}"
    );

    let (ok, out, err) = soba(&["capsule", "load", a, file_s, "--json"]);
    assert!(ok, "{err}");
    let loaded: Value = serde_json::from_str(&out).unwrap();
    let new_ck = loaded["checkpointId"].as_str().unwrap().to_string();

    let (ok, out, err) = soba(&["capsule", "list", a, "--json"]);
    assert!(ok, "{err}");
    let list: Value = serde_json::from_str(&out).unwrap();
    let rows = list["capsules"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["checkpointId"], new_ck.as_str());
    assert_eq!(rows[1]["current"], true);
    assert_eq!(rows[0]["current"], false);

    let (ok, out, err) = soba(&["rewind", a, "u1", "--json"]);
    assert!(ok, "{err}");
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["to"], "u1");
    assert_eq!(r["messages"], 1);

    let (ok, _, err) = soba(&["rewind", a, "nope"]);
    assert!(!ok);
    assert!(err.contains("no entry `nope`"), "{err}");

    // Into a new session: the capsule is all of its model input.
    let fresh = dir.path().join("fresh.jsonl");
    let fresh_s = fresh.to_str().unwrap();
    let ws = dir.path().to_str().unwrap();
    let (ok, _, err) = soba(&[
        "capsule",
        "load",
        fresh_s,
        file_s,
        "--new",
        "--workspace",
        ws,
    ]);
    assert!(ok, "{err}");
    let (ok, out, err) = soba(&["context", fresh_s, "--json"]);
    assert!(ok, "{err}");
    let context: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(context["messages"].as_array().unwrap().len(), 1);
    assert_eq!(context["capsule"]["origin"], "loaded");
    let (ok, _, err) = soba(&["capsule", "load", fresh_s, file_s, "--new"]);
    assert!(!ok && err.contains("already exists"), "{err}");

    std::fs::write(&file, "---\nformat: soba-capsule/1\ncheckpoint: x\n").unwrap();
    let (ok, _, err) = soba(&["capsule", "load", a, file_s]);
    assert!(!ok);
    assert!(
        err.contains(":4: not a valid capsule file: expected `---` closing the front matter"),
        "{err}"
    );
}

#[test]
fn binary_refuses_an_invalid_model_capsule_and_leaves_the_session_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let a = session_a(dir.path());
    let a_s = a.to_str().unwrap();
    let file = dir.path().join("edited.capsule.md");
    let file_s = file.to_str().unwrap();
    let (ok, _, err) = soba(&["capsule", "export", a_s, "ck_00000000beef", file_s]);
    assert!(ok, "{err}");
    let exported = std::fs::read_to_string(&file).unwrap();
    let before = std::fs::read(&a).unwrap();

    let cases = [
        (
            exported.replace("## Blockers\n", ""),
            ":9:",
            "`## Blockers` section",
        ),
        (
            exported.replacen("created: ", "created: 2099-01-01T00:00:00Z\n#", 1),
            ":5:",
            "not in the future",
        ),
        (
            exported.replace("tokens_before: 120000", "tokens_before: 900000000"),
            ":10:",
            "at most 10000000",
        ),
    ];
    for (text, line, what) in cases {
        std::fs::write(&file, &text).unwrap();
        let (ok, _, err) = soba(&["capsule", "load", a_s, file_s]);
        assert!(!ok, "loaded:\n{text}");
        assert!(
            err.contains(&format!("{file_s}{line} not a valid capsule file")) && err.contains(what),
            "{err}"
        );
        assert_eq!(
            std::fs::read(&a).unwrap(),
            before,
            "the session log changed"
        );
    }
}
