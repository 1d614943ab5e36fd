//! A followed agent shown as it sees itself (`followed` in `soba/budget`): its model from the
//! transcript, else its settings' default, else "not known yet"; the threshold at which it
//! compacts itself; its own latest compaction. Through the binary, with the agents' homes in a
//! temp folder.

use crate::attach::{
    append_to, budget_until, claude_compaction, claude_prompt, claude_response, homed_with,
    soba_command, Homed,
};
use crate::support::lsp_client::LspClient;

use serde_json::json;

async fn serve(h: &Homed) -> (tokio::process::Child, LspClient) {
    let mut child = soba_command(h)
        .env("SOBA_CONFIG", h.root.join("no-user-config.json"))
        .args(["serve", "--standalone"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let c = LspClient::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
    c.initialize(&[&h.workspace], false).await;
    (child, c)
}

/// A workspace and a temp Claude Code home whose live transcript holds only the user's first
/// prompt: the agent has not answered, so nothing names its model.
fn before_the_first_response() -> Homed {
    homed_with(|workspace| claude_prompt(workspace, 0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_the_first_response_the_model_is_not_known_yet_then_the_agents_threshold_rules() {
    let h = before_the_first_response();
    let (mut child, c) = serve(&h).await;
    let early = budget_until(&c, &h.workspace, |b| b.get("followed").is_some()).await;
    let followed = &early["followed"];
    assert_eq!(followed["modelSource"], "unknown", "{early}");
    assert!(followed.get("model").is_none(), "{early}");
    assert!(
        followed.get("compactsAt").is_none(),
        "no threshold without the model: {early}"
    );
    assert!(
        followed["text"]
            .as_str()
            .unwrap()
            .starts_with("model not known yet"),
        "{early}"
    );
    assert!(followed.get("lastCompaction").is_none(), "{early}");

    append_to(&h.transcript, &claude_response(&h.workspace, 0, 150_000));
    let known = budget_until(&c, &h.workspace, |b| {
        b["followed"]["modelSource"] == "transcript"
    })
    .await;
    let followed = &known["followed"];
    assert_eq!(followed["model"], "claude-sonnet-4-5");
    assert_eq!(known["model"], "claude-sonnet-4-5");
    // 200k less the 20k Claude Code keeps for output, less its 13k buffer.
    assert_eq!(followed["compactsAt"], 167_000, "{known}");
    let hard = known["hardLimit"].as_u64().unwrap();
    assert!(
        hard < 150_000,
        "past SOBA's hard limit, under the agent's: {known}"
    );
    let text = followed["text"].as_str().unwrap();
    assert!(
        text.contains("Claude Code compacts at ~167.0k") && text.contains("SOBA's hard limit"),
        "{text}"
    );
    let _ = child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_settings_name_its_default_model_until_the_transcript_does() {
    let h = before_the_first_response();
    let settings = h.workspace.join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(&settings, json!({"model": "claude-opus-4-5"}).to_string()).unwrap();
    let (mut child, c) = serve(&h).await;
    let b = budget_until(&c, &h.workspace, |b| b.get("followed").is_some()).await;
    let followed = &b["followed"];
    assert_eq!(followed["modelSource"], "settings", "{b}");
    assert_eq!(followed["model"], "claude-opus-4-5");
    assert_eq!(followed["settingsFile"], settings.display().to_string());
    // SOBA's own limits are the default model's, not another model's.
    assert_eq!(b["model"], "claude-opus-4-5", "{b}");
    assert_eq!(b["contextWindow"], 200_000, "{b}");
    assert!(
        followed["text"]
            .as_str()
            .unwrap()
            .contains("Claude Code's default in"),
        "{b}"
    );
    let _ = child.kill().await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settings_file_linking_out_of_the_agents_home_is_not_read() {
    let h = before_the_first_response();
    let elsewhere = h.root.join("elsewhere.json");
    std::fs::write(&elsewhere, json!({"model": "claude-opus-4-5"}).to_string()).unwrap();
    std::os::unix::fs::symlink(&elsewhere, h.root.join("claude/settings.json")).unwrap();
    let (mut child, c) = serve(&h).await;
    let b = budget_until(&c, &h.workspace, |b| b.get("followed").is_some()).await;
    assert_eq!(b["followed"]["modelSource"], "unknown", "{b}");
    assert_ne!(b["model"], "claude-opus-4-5", "{b}");
    let problem = b["followed"]["problems"][0].as_str().unwrap();
    assert!(problem.contains("outside"), "{problem}");
    let _ = child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_own_compaction_is_its_last_compaction() {
    let h = before_the_first_response();
    append_to(&h.transcript, &claude_response(&h.workspace, 0, 150_000));
    let (mut child, c) = serve(&h).await;
    let before = budget_until(&c, &h.workspace, |b| {
        b["followed"]["modelSource"] == "transcript"
    })
    .await;
    assert!(
        before["followed"].get("lastCompaction").is_none(),
        "{before}"
    );

    append_to(&h.transcript, &claude_compaction(&h.workspace, 0));
    append_to(
        &h.transcript,
        &claude_prompt(&h.workspace, 1).replace("\"a0\"", "\"cs\""),
    );
    let after = budget_until(&c, &h.workspace, |b| {
        b["followed"].get("lastCompaction").is_some()
    })
    .await;
    let last = &after["followed"]["lastCompaction"];
    assert_eq!(last["trigger"], "auto", "{after}");
    assert_eq!(last["tokensBefore"], 150_000, "{after}");
    assert!(last["summaryTokens"].as_u64() > Some(0), "{after}");
    assert!(last["entryId"].as_str().is_some(), "{after}");
    // SOBA wrote no capsule of its own: its last compaction stays none.
    assert!(after["lastCompaction"].is_null(), "{after}");

    // View Current Capsule's source: the agent's summary is what its context starts from.
    let context = c
        .request(
            "soba/context",
            json!({"workspace": h.workspace, "limit": 0}),
        )
        .await;
    let summary = &context["agentSummary"];
    assert_eq!(summary["agent"], "claude-code", "{context}");
    assert_eq!(summary["entryId"], last["entryId"], "{context}");
    assert!(
        summary["text"]
            .as_str()
            .unwrap()
            .contains("The parser is done."),
        "{context}"
    );
    assert!(summary["tokens"].as_u64() > Some(0), "{context}");
    assert!(context["capsule"].is_null(), "{context}");
    let _ = child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previews_stand_on_the_budgets_basis() {
    let h = before_the_first_response();
    append_to(&h.transcript, &claude_response(&h.workspace, 0, 30_000));
    append_to(&h.transcript, &claude_prompt(&h.workspace, 1));
    let (mut child, c) = serve(&h).await;
    let b = budget_until(&c, &h.workspace, |b| {
        b["followed"]["modelSource"] == "transcript"
    })
    .await;
    let not_in_log = b["breakdown"]["notInLog"].as_u64().unwrap();
    assert!(not_in_log > 0, "the transcript holds no system prompt: {b}");
    let context = c
        .request(
            "soba/context",
            json!({"workspace": h.workspace, "limit": 10}),
        )
        .await;
    let first_prompt = context["largest"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["label"] == "user: request 0")
        .unwrap_or_else(|| panic!("{context}"))["entryId"]
        .clone();
    let rewind = c
        .request(
            "soba/preview",
            json!({"workspace": h.workspace, "action": "rewind", "entryId": first_prompt}),
        )
        .await;
    let now = budget_until(&c, &h.workspace, |_| true).await;
    assert_eq!(
        rewind["tokensBefore"], now["effectiveTokens"],
        "before is the status bar's figure: {rewind}"
    );
    assert_eq!(rewind["notInLog"], now["breakdown"]["notInLog"], "{rewind}");
    let after = rewind["tokensAfter"].as_u64().unwrap();
    assert!(
        after >= not_in_log && after < rewind["tokensBefore"].as_u64().unwrap(),
        "after keeps what is not in the log: {rewind}"
    );
    let _ = child.kill().await;
}
