//! Opaque provider data survives: thinking signatures, `redacted_thinking`, `cache_control` and
//! any provider field SOBA does not interpret go into the log and come back in
//! `soba/preflight`'s `messages` exactly as the agent sent them, across a daemon restart; and
//! the Claude Code importer keeps the signatures of the real transcripts.

use crate::common;
use crate::support::lsp_client::connect;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba::import::transcript::import_str;
use soba::import::{Format, ImportOptions};
use soba_core::session::entry::{ContentBlock, EntryBody};

fn daemon(base: &Path) -> Arc<Daemon> {
    Daemon::new(
        Paths::under(&base.join("soba")),
        DaemonOptions {
            watch: None,
            extra_config: None,
            summarizer: None,
            ..DaemonOptions::default()
        },
    )
}

/// An extended-thinking tool loop as Anthropic returns it: a signed thinking block, a redacted
/// one, a cached text block, a call with a field SOBA does not know.
const ASSISTANT_CONTENT: &str = concat!(
    r#"[{"type":"thinking","thinking":"The user wants the tests run. I'll call Bash.","#,
    r#""signature":"EqQBCkYIBRgCKkD3mR+xq/8nPz0Wc1kU9aT4n1ZcM7oYbL2vQeXoJw=="},"#,
    r#"{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP+Qk="},"#,
    r#"{"type":"text","text":"Running the tests.","cache_control":{"type":"ephemeral","ttl":"1h"},"citations":null},"#,
    r#"{"type":"tool_call","id":"toolu_01","name":"Bash","input":{"command":"cargo test","timeout":120000},"caller":{"type":"direct"}}]"#
);

const USER_CONTENT: &str = concat!(
    r#"[{"type":"text","text":"Run the tests, please.","cache_control":{"type":"ephemeral"}},"#,
    r#"{"type":"document","source":{"type":"text","media_type":"text/plain","data":"notes"},"title":"notes.txt"}]"#
);

const RESULT_CONTENT: &str =
    r#"[{"type":"text","text":"test result: ok. 12 passed","cache_control":{"type":"ephemeral"}}]"#;

fn compact(raw: &str) -> String {
    let v: Value = serde_json::from_str(raw).unwrap();
    serde_json::to_string(&v).unwrap()
}

#[tokio::test]
async fn opaque_provider_data_survives_the_log_a_restart_and_preflight_byte_for_byte() {
    let base = tempfile::tempdir().unwrap();
    let workspace = std::fs::canonicalize(base.path()).unwrap().join("project");
    std::fs::create_dir_all(&workspace).unwrap();
    let content = |raw: &str| -> Value { serde_json::from_str(raw).unwrap() };

    let first = daemon(base.path());
    let c = connect(&first);
    c.initialize(&[], false).await;
    let opened = c
        .request("soba/session/open", json!({"workspace": workspace}))
        .await;
    let id = opened["sessionId"].as_str().unwrap().to_string();
    let appended = c
        .request(
            "soba/session/append",
            json!({"sessionId": id, "entries": [
                {"type": "message", "role": "user", "content": content(USER_CONTENT)},
                {"type": "message", "role": "assistant", "content": content(ASSISTANT_CONTENT)},
                {"type": "tool_result", "callId": "toolu_01", "toolName": "Bash",
                 "content": content(RESULT_CONTENT)},
            ]}),
        )
        .await;
    assert_eq!(
        appended["entryIds"].as_array().map(Vec::len),
        Some(3),
        "{appended}"
    );

    // On disk: every block is in the log line as it was sent.
    let log = std::fs::read_to_string(find_log(&base.path().join("soba"))).unwrap();
    for raw in [USER_CONTENT, ASSISTANT_CONTENT, RESULT_CONTENT] {
        let blocks: Value = serde_json::from_str(raw).unwrap();
        for block in blocks.as_array().unwrap() {
            let text = serde_json::to_string(block).unwrap();
            assert!(log.contains(&text), "the log lacks {text}");
        }
    }
    c.close().await;
    drop(first);
    tokio::time::sleep(Duration::from_millis(100)).await;

    // A fresh daemon reads the log back and hands the blocks out unchanged.
    let fresh = daemon(base.path());
    let c = connect(&fresh);
    c.initialize(&[], false).await;
    c.request(
        "soba/session/open",
        json!({"workspace": workspace, "sessionId": id}),
    )
    .await;
    let pre = c.request("soba/preflight", json!({"sessionId": id})).await;
    let messages = pre["messages"].as_array().expect("messages");
    let contents: Vec<String> = messages
        .iter()
        .map(|m| serde_json::to_string(&m["content"]).unwrap())
        .collect();
    assert_eq!(
        contents,
        [
            compact(USER_CONTENT),
            compact(ASSISTANT_CONTENT),
            compact(RESULT_CONTENT)
        ],
        "{pre}"
    );
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["toolCallId"], "toolu_01");
}

/// The session log under the daemon's data folder (there is one).
fn find_log(dir: &Path) -> std::path::PathBuf {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                return p;
            }
        }
    }
    panic!("no session log under {}", dir.display());
}

#[test]
fn the_claude_code_importer_keeps_every_thinking_signature() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let path = dir.join("claude-code/entire-cli-two-compactions.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    // Signatures counted from the raw transcript, independent of the importer.
    let mut expected: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let Ok(r) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if r["type"] != "assistant" {
            continue;
        }
        for b in r["message"]["content"].as_array().into_iter().flatten() {
            if b["type"] == "thinking" {
                expected.push((
                    b["thinking"].as_str().unwrap_or("").to_string(),
                    b["signature"].as_str().unwrap().to_string(),
                ));
            }
        }
    }
    assert!(expected.len() > 100, "the fixture has signed thinking");

    let options = ImportOptions {
        source_path: path.display().to_string(),
        default_workspace: "/ws".into(),
        default_session_id: "imported".into(),
        now: "2026-01-01T00:00:00.000Z".into(),
    };
    let imported = import_str(&text, Some(Format::ClaudeCode), &options).unwrap();
    let mut kept: Vec<(String, String)> = Vec::new();
    for e in &imported.entries {
        let EntryBody::Message(m) = &e.body else {
            continue;
        };
        for b in &m.content {
            if let ContentBlock::Thinking { thinking, extra } = b {
                let signature = extra.get("signature").and_then(Value::as_str);
                kept.push((thinking.clone(), signature.expect("signed").to_string()));
            }
        }
    }
    assert_eq!(kept, expected);
}

#[test]
fn unknown_claude_code_blocks_are_imported_whole() {
    let lines = [
        json!({"type": "user", "uuid": "u1", "parentUuid": null, "sessionId": "s",
               "timestamp": "2026-01-01T00:00:00Z", "cwd": "/ws",
               "message": {"role": "user", "content": "hi"}}),
        json!({"type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": "s",
               "timestamp": "2026-01-01T00:00:01Z", "cwd": "/ws",
               "message": {"id": "msg_1", "role": "assistant", "model": "claude-sonnet-4-5",
                           "content": [
                               {"type": "redacted_thinking", "data": "EmwKAhgBEgy3"},
                               {"type": "text", "text": "hello", "citations": [{"type": "char_location", "cited_text": "x"}]}
                           ],
                           "usage": {"input_tokens": 10, "output_tokens": 2}}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let options = ImportOptions {
        source_path: "/tmp/t.jsonl".into(),
        default_workspace: "/ws".into(),
        default_session_id: "imported".into(),
        now: "2026-01-01T00:00:00.000Z".into(),
    };
    let imported = import_str(&text, Some(Format::ClaudeCode), &options).unwrap();
    let assistant = imported
        .entries
        .iter()
        .filter_map(|e| e.as_message())
        .find(|m| m.role == soba_core::session::entry::Role::Assistant)
        .expect("the assistant message");
    assert_eq!(
        serde_json::to_value(&assistant.content).unwrap(),
        lines[1]["message"]["content"]
    );
}
