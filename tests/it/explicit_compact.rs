//! Explicit compactions through the CLI: Project Memory mirroring of a model capsule, the
//! refusal to mirror a local one, and `soba capsule create` (a hand-off that leaves the model
//! input as it is).

use crate::loopback;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};
use soba_core::config::Durability;
use soba_core::session::entry::*;
use soba_core::session::log::SessionLog;

fn write_session(dir: &Path, turns: usize) -> PathBuf {
    write_session_with(
        dir,
        turns,
        ModelRef {
            name: Some("custom".into()),
            context_window: Some(65000),
            max_output_tokens: Some(8000),
            tokenizer: None,
        },
    )
}

fn write_session_with(dir: &Path, turns: usize, model: ModelRef) -> PathBuf {
    let path = dir.join("session.jsonl");
    let header = SessionHeader {
        kind: HeaderTag::Session,
        version: LOG_FORMAT_VERSION,
        id: "explicit".into(),
        workspace: dir.display().to_string(),
        created_at: "2026-01-01T00:00:00Z".into(),
        model: Some(model),
        source: None,
    };
    let mut log = SessionLog::create(&path, header, Durability::Flush).unwrap();
    let mut last: Option<String> = None;
    for t in 0..turns {
        for (k, body) in [
            EntryBody::Message(MessageEntry {
                role: Role::User,
                content: vec![ContentBlock::text(format!(
                    "turn {t}:{}",
                    " lorem".repeat(1500)
                ))],
                usage: None,
                model: None,
                synthetic: false,
            }),
            EntryBody::Message(MessageEntry {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolCall {
                    id: format!("c{t}"),
                    name: "Write".into(),
                    input: Box::new(json!({"file_path": format!("src/w{t}.rs")})),
                    extra: Default::default(),
                }],
                usage: None,
                model: None,
                synthetic: false,
            }),
            EntryBody::ToolResult(ToolResultEntry {
                call_id: format!("c{t}"),
                tool_name: Some("Write".into()),
                content: vec![ContentBlock::text(" ipsum".repeat(2500))],
                is_error: false,
                exit_code: None,
            }),
        ]
        .into_iter()
        .enumerate()
        {
            let id = format!("e{t}_{k}");
            log.append(Entry::new(id.clone(), last.clone(), body))
                .unwrap();
            last = Some(id);
        }
    }
    path
}

fn soba(dir: &Path, args: &[&str]) -> (bool, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(args)
        .env("SOBA_CONFIG", dir.join("none.json"))
        .env("SOBA_TEST_KEY", "sk-test-mirror")
        .output()
        .unwrap();
    (
        out.status.success(),
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

fn model_reply() -> String {
    let state = json!({
        "goal": "Write the w-modules",
        "constraints": ["keep the API"],
        "completed": ["wrote the first modules"],
        "active": [],
        "pending": ["write the rest"],
        "decisions": [{"decision": "one file per turn", "rationale": "easy to review"}],
        "blockers": [],
        "nextSteps": ["write the rest"]
    });
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": state.to_string()}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150}
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_compact_with_mirror_writes_project_memory_from_a_model_capsule() {
    let server = loopback::Loopback::start(|_, _| loopback::json(200, &model_reply())).await;
    let dir = tempfile::tempdir().unwrap();
    let session = write_session(dir.path(), 12);
    let cfg = dir.path().join("model.json");
    std::fs::write(
        &cfg,
        json!({"summarizer": {"provider": "openai", "baseUrl": format!("{}/v1", server.base), "model": "gpt-4o-mini", "apiKeyEnv": "SOBA_TEST_KEY"}}).to_string(),
    )
    .unwrap();
    let d = dir.path().to_path_buf();
    let (ok, r, err) = tokio::task::spawn_blocking(move || {
        soba(
            &d,
            &[
                "compact",
                session.to_str().unwrap(),
                "--mirror",
                "--json",
                "--config",
                cfg.to_str().unwrap(),
            ],
        )
    })
    .await
    .unwrap();
    assert!(ok, "{err}");
    assert_eq!(r["quality"], "model", "{r}");
    let mirrored = PathBuf::from(r["mirroredTo"].as_str().expect("mirrored"));
    assert!(mirrored.starts_with(dir.path().join(".soba/memory")));
    let text = std::fs::read_to_string(&mirrored).unwrap();
    assert!(text.contains("Write the w-modules"), "{text}");
    assert!(dir.path().join(".soba/memory/index.md").is_file());
    // The capsule in the log records that it was mirrored.
    let log = std::fs::read_to_string(dir.path().join("session.jsonl")).unwrap();
    assert!(log
        .lines()
        .any(|l| l.contains("\"type\":\"capsule\"") && l.contains("\"mirrored\":true")));
}

/// A user config naming the loopback summarizer (the user's own settings apply everywhere).
fn summarizer_config(dir: &Path, base: &str) -> PathBuf {
    let cfg = dir.join("model.json");
    std::fs::write(
        &cfg,
        json!({"summarizer": {"provider": "openai", "baseUrl": format!("{base}/v1"), "model": "gpt-4o-mini", "apiKeyEnv": "SOBA_TEST_KEY"}}).to_string(),
    )
    .unwrap();
    cfg
}

async fn compact(dir: &Path, extra: &'static [&'static str]) -> (bool, Value, String) {
    let d = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let session = d.join("session.jsonl");
        let cfg = d.join("model.json");
        let mut args = vec![
            "compact",
            session.to_str().unwrap(),
            "--json",
            "--config",
            cfg.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let args: Vec<String> = args.into_iter().map(str::to_string).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        soba(&d, &args)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloned_repositorys_config_cannot_turn_mirroring_on_until_the_workspace_is_trusted() {
    let server = loopback::Loopback::start(|_, _| loopback::json(200, &model_reply())).await;
    let dir = tempfile::tempdir().unwrap();
    write_session(dir.path(), 12);
    summarizer_config(dir.path(), &server.base);
    std::fs::create_dir_all(dir.path().join(".soba")).unwrap();
    std::fs::write(
        dir.path().join(".soba/config.json"),
        r#"{"memory":{"mirrorExplicitCompacts":true}}"#,
    )
    .unwrap();
    let (ok, r, err) = compact(dir.path(), &[]).await;
    assert!(ok, "{err}");
    assert_eq!(r["quality"], "model", "{r}");
    assert!(r.get("mirroredTo").is_none(), "{r}");
    assert!(
        err.contains("mirrorExplicitCompacts") && err.contains("soba trust"),
        "{err}"
    );
    assert!(!dir.path().join(".soba/memory").exists());

    // The user trusts the workspace (recorded in the user config, `SOBA_CONFIG`): its setting
    // applies.
    let d = dir.path().to_path_buf();
    let (ok, _, err) =
        tokio::task::spawn_blocking(move || soba(&d, &["trust", d.to_str().unwrap(), "--json"]))
            .await
            .unwrap();
    assert!(ok, "{err}");
    write_session_again(dir.path());
    let (ok, r, err) = compact(dir.path(), &[]).await;
    assert!(ok, "{err}");
    assert!(!err.contains("not trusted"), "{err}");
    let mirrored = PathBuf::from(r["mirroredTo"].as_str().expect("mirrored"));
    assert!(mirrored.starts_with(dir.path().join(".soba/memory")), "{r}");
}

/// A fresh session in place of the compacted one.
fn write_session_again(dir: &Path) {
    std::fs::remove_file(dir.join("session.jsonl")).unwrap();
    let _ = std::fs::remove_file(dir.join("session.jsonl.tokens"));
    write_session(dir, 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlinked_memory_folder_is_refused_and_the_compaction_still_completes() {
    let server = loopback::Loopback::start(|_, _| loopback::json(200, &model_reply())).await;
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("index.md"), "keep me").unwrap();
    write_session(dir.path(), 12);
    summarizer_config(dir.path(), &server.base);
    std::fs::create_dir_all(dir.path().join(".soba")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), dir.path().join(".soba/memory")).unwrap();
    let (ok, r, err) = compact(dir.path(), &["--mirror"]).await;
    assert!(ok, "{err}");
    assert_eq!(r["outcome"], "completed", "{r}");
    assert!(r.get("mirroredTo").is_none(), "{r}");
    let note = r["mirrorNote"].as_str().unwrap_or_default();
    assert!(
        note.contains("symbolic link") && note.contains("Remove the link"),
        "{r}"
    );
    assert_eq!(
        std::fs::read_to_string(elsewhere.path().join("index.md")).unwrap(),
        "keep me"
    );
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 1);
}

#[test]
fn a_local_capsule_is_never_mirrored_even_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let session = write_session(dir.path(), 12);
    let (ok, r, err) = soba(
        dir.path(),
        &["compact", session.to_str().unwrap(), "--mirror", "--json"],
    );
    assert!(ok, "{err}");
    assert_eq!(r["outcome"], "completed");
    assert_eq!(r["quality"], "local");
    assert!(r.get("mirroredTo").is_none());
    assert!(
        r["mirrorNote"]
            .as_str()
            .unwrap()
            .contains("built locally (no summarization model configured)"),
        "{r}"
    );
    assert!(!dir.path().join(".soba/memory").exists());
}

#[test]
fn capsule_create_records_a_handoff_without_changing_the_model_input() {
    let dir = tempfile::tempdir().unwrap();
    let session = write_session(dir.path(), 3);
    let s = session.to_str().unwrap();
    let (_, before, _) = soba(dir.path(), &["context", s, "--json"]);
    let (ok, created, err) = soba(
        dir.path(),
        &["capsule", "create", s, "handoff auth work", "--json"],
    );
    assert!(ok, "{err}");
    let ck = created["checkpointId"].as_str().unwrap().to_string();
    let (_, after, _) = soba(dir.path(), &["context", s, "--json"]);
    assert_eq!(
        before["messages"], after["messages"],
        "a hand-off does not compact"
    );
    let (ok, list, err) = soba(dir.path(), &["capsule", "list", s, "--json"]);
    assert!(ok, "{err}");
    let listed = list.to_string();
    assert!(
        listed.contains(&ck) && listed.contains("handoff auth work") && listed.contains("handoff"),
        "{listed}"
    );
    let out = dir.path().join("handoff.capsule.md");
    let (ok, _, err) = soba(
        dir.path(),
        &["capsule", "export", s, &ck, out.to_str().unwrap()],
    );
    assert!(ok, "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains("handoff auth work") && text.contains("src/w0.rs"),
        "{text}"
    );
}

/// `soba budget` and `soba context` agree with what the last operation said, for a model whose
/// tokenizer is not public (its counts are scaled), after a compaction, a capsule creation, a
/// capsule load and a rewind.
#[test]
fn the_budget_and_the_context_agree_with_each_operation_they_follow() {
    let dir = tempfile::tempdir().unwrap();
    let session = write_session_with(
        dir.path(),
        12,
        ModelRef {
            name: Some("claude-sonnet-4-5".into()),
            ..ModelRef::default()
        },
    );
    let s = session.to_str().unwrap();
    let views = || {
        let (ok, budget, err) = soba(dir.path(), &["budget", s, "--json"]);
        assert!(ok, "{err}");
        let (ok, context, err) = soba(dir.path(), &["context", s, "--json"]);
        assert!(ok, "{err}");
        (budget, context)
    };
    let (before, _) = views();
    assert!(
        before["calibration"]["factor"].as_f64().unwrap() > 1.0,
        "the model's counts are scaled: {before}"
    );

    let (ok, compacted, err) = soba(dir.path(), &["compact", s, "--json"]);
    assert!(ok, "{err}");
    assert_eq!(compacted["outcome"], "completed", "{compacted}");
    assert_eq!(compacted["tokensBefore"], before["effectiveTokens"]);
    let (budget, context) = views();
    assert_eq!(
        budget["effectiveTokens"], compacted["tokensAfter"],
        "the budget shows the completion line's after: {budget} / {compacted}"
    );
    let last = &budget["lastCompaction"];
    assert_eq!(last["checkpointId"], compacted["checkpointId"]);
    assert_eq!(last["tokensAfter"], compacted["tokensAfter"]);
    assert_eq!(
        context["capsule"]["checkpointId"],
        compacted["checkpointId"]
    );

    // A created capsule compacts nothing: the budget and the capsule in force stay.
    let (ok, created, err) = soba(dir.path(), &["capsule", "create", s, "hand-off", "--json"]);
    assert!(ok, "{err}");
    assert_eq!(created["sessionTokens"], budget["effectiveTokens"]);
    let (after_create, context) = views();
    assert_eq!(after_create["effectiveTokens"], budget["effectiveTokens"]);
    assert_eq!(
        after_create["lastCompaction"]["checkpointId"],
        compacted["checkpointId"]
    );
    assert_eq!(
        context["capsule"]["checkpointId"],
        compacted["checkpointId"]
    );

    // A loaded capsule is the capsule in force, in every view.
    let file = dir.path().join("hand-off.capsule.md");
    let ck = created["checkpointId"].as_str().unwrap();
    let (ok, _, err) = soba(
        dir.path(),
        &["capsule", "export", s, ck, file.to_str().unwrap()],
    );
    assert!(ok, "{err}");
    let (ok, loaded, err) = soba(
        dir.path(),
        &["capsule", "load", s, file.to_str().unwrap(), "--json"],
    );
    assert!(ok, "{err}");
    let (after_load, context) = views();
    assert_eq!(
        after_load["lastCompaction"]["checkpointId"], loaded["checkpointId"],
        "{loaded}"
    );
    assert_eq!(context["capsule"]["checkpointId"], loaded["checkpointId"]);

    // Rewound to before the first compaction: no capsule in force anywhere, the budget as it was.
    let (ok, _, err) = soba(dir.path(), &["rewind", s, "e11_2"]);
    assert!(ok, "{err}");
    let (rewound, context) = views();
    assert_eq!(rewound["effectiveTokens"], before["effectiveTokens"]);
    assert!(rewound["lastCompaction"].is_null(), "{rewound}");
    assert!(context["capsule"].is_null(), "{context}");
}
