//! The count factor a session learns from its usage reports, through the daemon and the CLI:
//! shown as `session` in `soba/budget`, applied to the tail after the newest report, and the
//! same after the session is closed and opened again from its log.

use crate::support::lsp_client::connect;

use std::process::Command;
use std::sync::Arc;

use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba_core::session::count::entry_tokens;
use soba_core::session::entry::{Entry, EntryBody};
use soba_core::tokens::TokenizerKind;
use soba_core::tokens::MAX_LEARNED_FACTOR;

fn daemon(base: &std::path::Path) -> Arc<Daemon> {
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

fn reply(text: &str, input: u64) -> Value {
    json!({"type": "message", "role": "assistant", "content": [{"type": "text", "text": text}],
           "usage": {"input": input, "output": 50}})
}

fn call(id: &str) -> Value {
    json!({"type": "message", "role": "assistant",
           "content": [{"type": "tool_call", "id": id, "name": "Bash", "input": {"command": "ls"}}]})
}

fn result(id: &str, words: usize) -> Value {
    json!({"type": "tool_result", "callId": id,
           "content": [{"type": "text", "text": " lorem".repeat(words)}]})
}

/// SOBA's count of entries as the daemon logs them.
fn counted(entries: &[Value]) -> u64 {
    entries
        .iter()
        .map(|e| {
            let body: EntryBody = serde_json::from_value(e.clone()).unwrap();
            entry_tokens(TokenizerKind::O200kBase, &Entry::new("x", None, body))
        })
        .sum()
}

fn calibration(budget: &Value) -> (String, f64) {
    let c = &budget["calibration"];
    (
        c["source"].as_str().unwrap().to_string(),
        c["factor"].as_f64().unwrap(),
    )
}

#[tokio::test]
async fn a_learned_factor_is_shown_applied_and_the_same_after_reopening() {
    let base = tempfile::tempdir().unwrap();
    let workspace = std::fs::canonicalize(base.path()).unwrap().join("project");
    std::fs::create_dir_all(&workspace).unwrap();
    let d = daemon(base.path());
    let c = connect(&d);
    c.initialize(&[&workspace], false).await;
    let opened = c
        .request(
            "soba/session/open",
            json!({"workspace": workspace, "model": {"name": "claude-sonnet-4-5"}}),
        )
        .await;
    let id = opened["sessionId"].as_str().unwrap().to_string();
    let path = opened["path"].as_str().unwrap().to_string();
    let append = |entries: Vec<Value>| {
        c.request(
            "soba/session/append",
            json!({"sessionId": id, "entries": entries}),
        )
    };
    let first_tail = vec![call("c1"), result("c1", 1_000)];
    let mut entries = vec![
        json!({"type": "message", "role": "user", "content": [{"type": "text", "text": "go"}]}),
        reply("first", 10_000),
    ];
    entries.extend(first_tail.clone());
    append(entries).await;
    let cli = |json: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_soba"));
        cmd.arg("budget").arg(&path).current_dir(&workspace);
        if json {
            cmd.arg("--json");
        }
        let out = cmd
            .env("SOBA_CONFIG", base.path().join("no-user-config.json"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let before = c.request("soba/budget", json!({"sessionId": id})).await;
    assert_eq!(before["source"], "provider_usage");
    // No report has taught a factor yet: the catalog's, with the provisional margin.
    let provisional = 1.15 * soba_core::tokens::PROVISIONAL_MARGIN;
    let (source, factor) = calibration(&before);
    assert_eq!(source, "provisional");
    assert!((factor - provisional).abs() < 1e-9, "{factor}");
    let tail = counted(&first_tail);
    assert_eq!(
        before["effectiveTokens"],
        10_050 + (tail as f64 * provisional).ceil() as u64
    );
    let text = cli(false);
    assert!(
        text.contains(
            "× 1.38 (the catalog factor with a 20% margin until this session's usage reports teach its own"
        ),
        "{text}"
    );
    // The provider bills that tail at twice SOBA's count: above what any tokenizer explains,
    // so the learned factor stops at the cap.
    append(vec![reply("second", 10_050 + 2 * tail)]).await;
    let second_tail = vec![call("c2"), result("c2", 500)];
    append(second_tail.clone()).await;
    let learned = c.request("soba/budget", json!({"sessionId": id})).await;
    assert_eq!(
        calibration(&learned),
        ("session".into(), MAX_LEARNED_FACTOR)
    );
    // What even the capped factor leaves of that report's growth is the session's unseen
    // growth, added over the usage.
    let growth = 2 * tail - (tail as f64 * MAX_LEARNED_FACTOR).ceil() as u64;
    assert_eq!(learned["breakdown"]["unseen"]["kind"], "growth");
    assert_eq!(learned["breakdown"]["unseen"]["tokens"], growth);
    assert_eq!(
        learned["effectiveTokens"],
        10_050
            + 2 * tail
            + 50
            + (counted(&second_tail) as f64 * MAX_LEARNED_FACTOR).ceil() as u64
            + growth,
        "the report as it came, the tail after it at the learned factor, the unseen growth"
    );

    // Closed and opened again from the log: the same figure, learned again from the reports.
    c.request("soba/session/close", json!({"sessionId": id}))
        .await;
    let reopened = c
        .request(
            "soba/session/open",
            json!({"workspace": workspace, "sessionId": id}),
        )
        .await;
    assert_eq!(
        reopened["budget"]["effectiveTokens"],
        learned["effectiveTokens"]
    );
    assert_eq!(reopened["budget"]["calibration"], learned["calibration"]);

    // And read by the CLI, text and JSON.
    c.request("soba/session/close", json!({"sessionId": id}))
        .await;
    let v: Value = serde_json::from_str(cli(true).trim()).unwrap();
    assert_eq!(v["effectiveTokens"], learned["effectiveTokens"]);
    assert_eq!(v["calibration"], learned["calibration"]);
    let text = cli(false);
    assert!(
        text.contains("× 1.60 (learned from this session's usage reports"),
        "{text}"
    );
}
