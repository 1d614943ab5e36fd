//! Following live agent transcripts: the incremental importer against `soba import` on every
//! real transcript, the tailer, discovery of each agent's transcripts, and `soba/attach`
//! through the daemon.

use crate::common;
use crate::support::lsp_client::{self, connect};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lsp_client::LspClient;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use soba::attach::discover::{self, Agent, Homes};
use soba::daemon::paths::Paths;
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba::import::stream::StreamImporter;
use soba::import::transcript::import_str;
use soba::import::ImportOptions;

fn options(path: &str) -> ImportOptions {
    ImportOptions {
        source_path: path.into(),
        default_workspace: "/ws".into(),
        default_session_id: "imported".into(),
        now: "2026-01-01T00:00:00.000Z".into(),
    }
}

#[test]
fn incremental_import_fed_in_random_chunks_equals_soba_import_on_every_fixture() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let mut checked = 0;
    for agent in std::fs::read_dir(&dir).unwrap() {
        let agent = agent.unwrap().path();
        if !agent.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&agent).unwrap() {
            let path = file.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let text = String::from_utf8(bytes.clone()).unwrap();
            let name = path.display().to_string();
            let whole = import_str(&text, None, &options(&name)).unwrap();
            let is_lines = path.extension().is_some_and(|e| e == "jsonl");
            if !is_lines {
                // One JSON document: followed only once complete.
                let mut s = StreamImporter::new(None, options(&name)).unwrap();
                let refused = s.feed(&bytes).err().or_else(|| s.finish().err());
                assert!(refused.is_some(), "{name}: a whole document was followed");
                continue;
            }
            for seed in 0..3u64 {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                let mut s = StreamImporter::new(None, options(&name)).unwrap();
                let mut streamed = Vec::new();
                let mut at = 0;
                while at < bytes.len() {
                    // Mostly small pieces, sometimes single bytes, sometimes big ones.
                    let max = match rng.random_range(0..3) {
                        0 => 1,
                        1 => 64,
                        _ => 8192,
                    };
                    let n = rng.random_range(1..=max).min(bytes.len() - at);
                    s.feed(&bytes[at..at + n]).unwrap();
                    at += n;
                    streamed.extend(s.take_settled());
                }
                // Some fixtures end without a newline: live, that last line waits for it.
                if !bytes.ends_with(b"\n") {
                    s.feed(b"\n").unwrap();
                }
                streamed.extend(s.take_all());
                let result = s.finish().unwrap();
                assert_eq!(
                    result, whole,
                    "{name} (seed {seed}): finish differs from import"
                );
                // What was handed out live is what `soba import` writes, up to the leaf rewind
                // only a finished file has.
                let imported: Vec<_> = whole
                    .entries
                    .iter()
                    .filter(|e| !matches!(e.body, soba_core::session::entry::EntryBody::Rewind(_)))
                    .cloned()
                    .collect();
                assert_same_entries(&streamed, &imported, &format!("{name} (seed {seed})"));
            }
            checked += 1;
        }
    }
    assert!(checked >= 6, "only {checked} line transcripts were checked");
}

/// Entries equal one by one; a difference names the first entry that differs.
fn assert_same_entries(
    got: &[soba_core::session::entry::Entry],
    want: &[soba_core::session::entry::Entry],
    what: &str,
) {
    if let Some(i) = (0..got.len().min(want.len())).find(|&i| got[i] != want[i]) {
        panic!(
            "{what}: entry {i} differs:\n got  {:?}\n want {:?}",
            got[i], want[i]
        );
    }
    assert_eq!(got.len(), want.len(), "{what}: entry counts differ");
}

// ---------------------------------------------------------------------------------------------
// Discovery

fn touch_later(path: &Path, secs: u64) {
    let t = std::time::SystemTime::now() + Duration::from_secs(secs);
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn homes(base: &Path) -> Homes {
    Homes {
        claude: base.join("claude"),
        codex: base.join("codex"),
        pi_sessions: base.join("pi/agent/sessions"),
        pi_flat: false,
    }
}

#[test]
fn discovery_picks_the_newest_claude_code_transcript_of_the_workspace() {
    let base = tempfile::tempdir().unwrap();
    let h = homes(base.path());
    let dir = h.claude.join("projects/-work-my-app");
    write(&dir.join("old.jsonl"), "{}\n");
    write(&dir.join("new.jsonl"), "{}\n");
    touch_later(&dir.join("new.jsonl"), 5);
    write(&h.claude.join("projects/-work-other/newest.jsonl"), "{}\n");
    touch_later(&h.claude.join("projects/-work-other/newest.jsonl"), 50);
    let found = discover::newest(&h, Path::new("/work/my_app"), None).unwrap();
    assert_eq!(found.agent, Agent::ClaudeCode);
    assert_eq!(found.path, dir.join("new.jsonl"));
}

#[test]
fn discovery_picks_the_newest_codex_rollout_whose_session_meta_names_the_workspace() {
    let base = tempfile::tempdir().unwrap();
    let h = homes(base.path());
    let meta = |cwd: &str| {
        json!({"timestamp":"t","type":"session_meta","payload":{"id":"x","cwd":cwd}}).to_string()
            + "\n"
    };
    let day = h.codex.join("sessions/2026/11/30");
    let today = h.codex.join("sessions/2026/12/01");
    write(&day.join("rollout-a.jsonl"), &meta("/work/app"));
    write(&today.join("rollout-b.jsonl"), &meta("/work/app"));
    touch_later(&today.join("rollout-b.jsonl"), 5);
    write(&today.join("rollout-c.jsonl"), &meta("/work/elsewhere"));
    touch_later(&today.join("rollout-c.jsonl"), 50);
    let found = discover::newest(&h, Path::new("/work/app"), Some(Agent::Codex)).unwrap();
    assert_eq!(found.path, today.join("rollout-b.jsonl"));
    assert!(discover::newest(&h, Path::new("/work/none"), None).is_none());
}

#[test]
fn discovery_picks_the_newest_pi_session_of_the_workspace() {
    let base = tempfile::tempdir().unwrap();
    let h = homes(base.path());
    let dir = h.pi_sessions.join("--work-my_app--");
    write(&dir.join("2026-12-01_a.jsonl"), "{}\n");
    write(&dir.join("2026-12-01_b.jsonl"), "{}\n");
    touch_later(&dir.join("2026-12-01_a.jsonl"), 5);
    let found = discover::newest(&h, Path::new("/work/my_app"), None).unwrap();
    assert_eq!(found.agent, Agent::Pi);
    assert_eq!(found.path, dir.join("2026-12-01_a.jsonl"));
    // The newest across agents wins.
    let claude = h.claude.join("projects/-work-my-app/s.jsonl");
    write(&claude, "{}\n");
    touch_later(&claude, 60);
    assert_eq!(
        discover::newest(&h, Path::new("/work/my_app"), None)
            .unwrap()
            .agent,
        Agent::ClaudeCode
    );
}

// ---------------------------------------------------------------------------------------------
// Through the daemon

struct Env {
    _base: tempfile::TempDir,
    workspace: PathBuf,
    transcript: PathBuf,
    daemon: Arc<Daemon>,
}

fn env() -> Env {
    let base = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(base.path()).unwrap();
    let workspace = root.join("project");
    std::fs::create_dir_all(&workspace).unwrap();
    let transcript = root.join("agent/session-1.jsonl");
    std::fs::create_dir_all(transcript.parent().unwrap()).unwrap();
    let daemon = Daemon::new(
        Paths::under(&root.join("soba")),
        DaemonOptions {
            watch: None,
            extra_config: None,
            summarizer: None,
            ..DaemonOptions::default()
        },
    );
    Env {
        _base: base,
        workspace,
        transcript,
        daemon,
    }
}

/// Claude Code records: a prompt, then `n` responses with growing usage.
/// A Claude Code prompt, the `i`-th of a chain.
pub(crate) fn claude_prompt(cwd: &Path, i: usize) -> String {
    let parent = if i == 0 {
        Value::Null
    } else {
        json!(format!("a{}", i - 1))
    };
    let user = json!({"type":"user","uuid":format!("u{i}"),"parentUuid":parent,"sessionId":"s1",
        "cwd":cwd,"timestamp":"2026-12-01T10:00:00Z",
        "message":{"role":"user","content":format!("request {i}")}});
    format!("{user}\n")
}

/// Claude Code's response to prompt `i`, with the usage it reported.
pub(crate) fn claude_response(cwd: &Path, i: usize, input_tokens: u64) -> String {
    let assistant = json!({"type":"assistant","uuid":format!("a{i}"),"parentUuid":format!("u{i}"),
        "sessionId":"s1","cwd":cwd,"timestamp":"2026-12-01T10:00:01Z",
        "message":{"id":format!("m{i}"),"model":"claude-sonnet-4-5","role":"assistant",
                   "content":[{"type":"text","text":format!("answer {i}")}],
                   "usage":{"input_tokens":input_tokens,"output_tokens":10}}});
    format!("{assistant}\n")
}

fn claude_turn(cwd: &Path, i: usize, input_tokens: u64) -> String {
    claude_prompt(cwd, i) + &claude_response(cwd, i, input_tokens)
}

pub(crate) fn append_to(path: &Path, text: &str) {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

/// Wait until the workspace's budget satisfies `ok`, by `soba/budget` (which follows the
/// workspace's live transcript when it has none yet).
pub(crate) async fn budget_until(c: &LspClient, ws: &Path, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let b = c.raw("soba/budget", json!({"workspace": ws})).await;
        if let Some(r) = b.get("result") {
            if ok(r) {
                return r.clone();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "budget never got there: {b}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn effective(b: &Value) -> u64 {
    b["effectiveTokens"].as_u64().unwrap_or(0)
}

/// The budget stands on a usage report and reaches `at_least`: the allowance for what the
/// transcript never records makes an estimate before the first report large already.
fn anchored_at(b: &Value, at_least: u64) -> bool {
    b["source"] == "provider_usage" && effective(b) >= at_least
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_through_the_daemon_follows_appends_and_a_half_written_line() {
    let e = env();
    append_to(&e.transcript, &claude_turn(&e.workspace, 0, 1000));
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let r = c
        .request(
            "soba/attach",
            json!({"workspace": e.workspace, "transcript": e.transcript, "agent": "claude-code", "idleSecs": 60}),
        )
        .await;
    assert_eq!(r["agent"], "claude-code");
    assert_eq!(r["sessionId"], "claude-code-session-1");
    let first = budget_until(&c, &e.workspace, |b| anchored_at(b, 1010)).await;
    assert_eq!(first["sessionId"], "claude-code-session-1");

    // The next turn arrives in two writes, the first ending mid-line.
    let turn = claude_turn(&e.workspace, 1, 5000);
    let cut = turn.len() - 30;
    append_to(&e.transcript, &turn[..cut]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mid = budget_until(&c, &e.workspace, |_| true).await;
    assert!(
        effective(&mid) < 5000,
        "a half-written record was imported: {mid}"
    );
    append_to(&e.transcript, &turn[cut..]);
    let after = budget_until(&c, &e.workspace, |b| anchored_at(b, 5010)).await;

    // Attaching again starts no second follower and imports nothing twice.
    let again = c
        .request(
            "soba/attach",
            json!({"workspace": e.workspace, "transcript": e.transcript}),
        )
        .await;
    assert_eq!(again["imported"], 0);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let log = std::fs::read_to_string(r["path"].as_str().unwrap()).unwrap();
    let sources: Vec<String> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["sourceId"].as_str().map(str::to_string))
        .collect();
    assert_eq!(sources, ["u0", "a0", "u1", "a1"], "each record once");
    assert_eq!(after["sessionId"], "claude-code-session-1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_transcript_is_followed_without_importing_twice() {
    let e = env();
    append_to(&e.transcript, &claude_turn(&e.workspace, 0, 1000));
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let r = c
        .request(
            "soba/attach",
            json!({"workspace": e.workspace, "transcript": e.transcript, "idleSecs": 60}),
        )
        .await;
    budget_until(&c, &e.workspace, |b| anchored_at(b, 1010)).await;
    // The agent rewrites its file: same records, then a new one, under a new inode.
    let tmp = e.transcript.with_extension("tmp");
    std::fs::write(
        &tmp,
        claude_turn(&e.workspace, 0, 1000) + &claude_turn(&e.workspace, 1, 7000),
    )
    .unwrap();
    std::fs::rename(&tmp, &e.transcript).unwrap();
    budget_until(&c, &e.workspace, |b| anchored_at(b, 7010)).await;
    let log = std::fs::read_to_string(r["path"].as_str().unwrap()).unwrap();
    let sources: Vec<String> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["sourceId"].as_str().map(str::to_string))
        .collect();
    assert_eq!(sources, ["u0", "a0", "u1", "a1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_agent_goes_inactive_and_editors_hear_session_closed() {
    let e = env();
    append_to(&e.transcript, &claude_turn(&e.workspace, 0, 1000));
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let r = c
        .request(
            "soba/attach",
            json!({"workspace": e.workspace, "transcript": e.transcript, "idleSecs": 1.5}),
        )
        .await;
    let closed = c
        .expect_notification("soba/session/closed", Duration::from_secs(15))
        .await;
    assert_eq!(closed["sessionId"], r["sessionId"]);
    let b = c
        .raw("soba/budget", json!({"workspace": e.workspace}))
        .await;
    assert!(b.get("error").is_some(), "the session is still active: {b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_errors_say_what_to_do() {
    let e = env();
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let missing = c
        .error(
            "soba/attach",
            json!({"workspace": e.workspace, "transcript": e.transcript}),
        )
        .await;
    assert!(
        missing["message"].as_str().unwrap().contains("cannot read"),
        "{missing}"
    );
    let relative = c
        .error(
            "soba/attach",
            json!({"workspace": e.workspace, "transcript": "x.jsonl"}),
        )
        .await;
    assert!(
        relative["message"].as_str().unwrap().contains("absolute"),
        "{relative}"
    );
    append_to(&e.transcript, "{\"x\":1}\n");
    let unknown = c
        .error(
            "soba/attach",
            json!({"workspace": e.workspace, "transcript": e.transcript}),
        )
        .await;
    assert!(
        unknown["message"]
            .as_str()
            .unwrap()
            .contains("pass `agent`"),
        "{unknown}"
    );
    let agent = c
        .error(
            "soba/attach",
            json!({"workspace": e.workspace, "transcript": e.transcript, "agent": "vim"}),
        )
        .await;
    assert!(
        agent["message"]
            .as_str()
            .unwrap()
            .contains("claude-code, codex or pi"),
        "{agent}"
    );
}

// ---------------------------------------------------------------------------------------------
// The binary: discovery from an editor's workspace, and `soba attach`

pub(crate) struct Homed {
    _base: tempfile::TempDir,
    pub(crate) root: PathBuf,
    pub(crate) workspace: PathBuf,
    pub(crate) transcript: PathBuf,
}

/// A workspace and a temp Claude Code home holding its live transcript.
fn homed() -> Homed {
    homed_with(|workspace| claude_turn(workspace, 0, 2000))
}

/// A workspace and a temp Claude Code home whose live transcript starts with `first`.
pub(crate) fn homed_with(first: impl Fn(&Path) -> String) -> Homed {
    let base = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(base.path()).unwrap();
    let workspace = root.join("my_app");
    std::fs::create_dir_all(&workspace).unwrap();
    let dir = root
        .join("claude/projects")
        .join(discover::claude_project_dir(workspace.to_str().unwrap()));
    std::fs::create_dir_all(&dir).unwrap();
    let transcript = dir.join("7d1c2f.jsonl");
    append_to(&transcript, &first(&workspace));
    Homed {
        _base: base,
        root,
        workspace,
        transcript,
    }
}

pub(crate) fn soba_command(h: &Homed) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_soba"));
    cmd.env("CLAUDE_CONFIG_DIR", h.root.join("claude"))
        .env("CODEX_HOME", h.root.join("codex"))
        .env("PI_CODING_AGENT_DIR", h.root.join("pi"))
        .env("SOBA_DATA_DIR", h.root.join("data"))
        .env("SOBA_RUNTIME_DIR", h.root.join("run"))
        .env("SOBA_DAEMON_IDLE_SECS", "1")
        .env("SOBA_ATTACH_IDLE_SECS", "30")
        .kill_on_drop(true);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_opening_the_workspace_sees_the_running_agents_budget_live() {
    let h = homed();
    let mut child = soba_command(&h)
        .args(["serve", "--standalone"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let c = LspClient::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
    c.initialize(&[&h.workspace], false).await;
    let first = budget_until(&c, &h.workspace, |b| anchored_at(b, 2010)).await;
    assert_eq!(first["sessionId"], "claude-code-7d1c2f");
    append_to(&h.transcript, &claude_turn(&h.workspace, 1, 9000));
    let changed = loop {
        let n = c
            .expect_notification("soba/budgetChanged", Duration::from_secs(20))
            .await;
        if anchored_at(&n, 9010) {
            break n;
        }
    };
    assert_eq!(changed["sessionId"], "claude-code-7d1c2f");
    let _ = child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_with_no_agent_to_follow_is_told_where_soba_looked_and_what_to_do() {
    let h = homed();
    let empty = h.root.join("empty_app");
    std::fs::create_dir_all(&empty).unwrap();
    // The workspace's transcript was last written ten minutes ago (SOBA_ATTACH_IDLE_SECS is 30).
    std::fs::File::options()
        .write(true)
        .open(&h.transcript)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(600))
        .unwrap();
    let mut child = soba_command(&h)
        .args(["serve", "--standalone"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let c = LspClient::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
    c.initialize(&[&h.workspace, &empty], false).await;

    let none = c.error("soba/budget", json!({"workspace": empty})).await;
    assert_eq!(none["code"], soba::daemon::protocol::code::UNKNOWN_SESSION);
    let message = none["message"].as_str().unwrap();
    let claude_dir = h
        .root
        .join("claude/projects")
        .join(discover::claude_project_dir(empty.to_str().unwrap()));
    assert!(message.contains("has no active session"), "{message}");
    assert!(
        message.contains(&format!("looked in {}", claude_dir.display())),
        "{message}"
    );
    assert!(
        message.contains("Start Claude Code, Codex or pi in"),
        "{message}"
    );

    let stale = c
        .error("soba/budget", json!({"workspace": h.workspace}))
        .await;
    let message = stale["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "its newest claude-code transcript, {}, was last written 10 min ago (the idle time is 30 s)",
            h.transcript.display()
        )),
        "{message}"
    );
    assert!(message.contains("`soba attach`"), "{message}");
    let _ = child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_that_cannot_be_followed_is_announced_once_not_at_every_retry() {
    let h = homed();
    let serve = || {
        soba_command(&h)
            .args(["serve", "--standalone"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // A first daemon follows the transcript and holds its session log.
    let mut first = serve();
    let a = LspClient::new(first.stdout.take().unwrap(), first.stdin.take().unwrap());
    a.initialize(&[&h.workspace], false).await;
    budget_until(&a, &h.workspace, |b| anchored_at(b, 2010)).await;

    // A second, standalone one cannot open that log: its editor asks again and again.
    let mut second = serve();
    let b = LspClient::new(second.stdout.take().unwrap(), second.stdin.take().unwrap());
    b.initialize(&[&h.workspace], false).await;
    for _ in 0..3 {
        let err = b
            .error("soba/budget", json!({"workspace": h.workspace}))
            .await;
        let message = err["message"].as_str().unwrap();
        assert!(
            message.contains(&format!(
                "the claude-code transcript {} cannot be followed: ",
                h.transcript.display()
            )),
            "{message}"
        );
    }
    b.drain(Duration::from_millis(500)).await;
    let warnings = b.seen("window/showMessage");
    assert_eq!(
        warnings.len(),
        1,
        "one warning, not one per retry: {warnings:?}"
    );
    let _ = second.kill().await;
    let _ = first.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soba_attach_prints_budget_lines_as_they_change_until_the_agent_goes_away() {
    use tokio::io::AsyncBufReadExt;
    let h = homed();
    let mut child = soba_command(&h)
        .args([
            "attach",
            "--latest",
            "--agent",
            "claude-code",
            "--idle",
            "3",
            "--workspace",
        ])
        .arg(&h.workspace)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let head = next_line(&mut lines).await;
    assert!(head.starts_with("following "), "{head}");
    assert!(head.contains("7d1c2f.jsonl (claude-code)"), "{head}");
    // The last response may still be streaming when attach reads it: its usage comes in once
    // the file has been quiet for a moment.
    loop {
        let budget = next_line(&mut lines).await;
        assert!(budget.contains(" tokens ("), "{budget}");
        if budget.contains("2.0k") {
            break;
        }
    }
    append_to(&h.transcript, &claude_turn(&h.workspace, 1, 9000));
    let mut seen = Vec::new();
    loop {
        let l = next_line(&mut lines).await;
        seen.push(l.clone());
        if l.contains("went away") {
            break;
        }
    }
    // The new turn's usage (9.0k), plus at most 5% for the growth its report showed beyond
    // the few tokens the transcript recorded.
    let thousands =
        |l: &str| -> Option<f64> { l.split_whitespace().nth(1)?.strip_suffix('k')?.parse().ok() };
    assert!(
        seen.iter()
            .filter_map(|l| thousands(l))
            .any(|k| (9.0..=9.0 * 1.05 + 0.05).contains(&k)),
        "no budget line for the new turn: {seen:?}"
    );
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
}

async fn next_line<R: tokio::io::AsyncBufRead + Unpin>(lines: &mut tokio::io::Lines<R>) -> String {
    tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("soba attach printed nothing for 30 s")
        .unwrap()
        .expect("soba attach ended early")
}

/// Claude Code's own compaction of the followed session: the boundary record, its summary, and
/// the next turn, whose usage measured the compacted context.
/// Claude Code's own compaction after response `after`: its boundary and summary records.
pub(crate) fn claude_compaction(cwd: &Path, after: usize) -> String {
    let boundary = json!({"type":"system","subtype":"compact_boundary","uuid":"cb","parentUuid":null,
        "logicalParentUuid":format!("a{after}"),"sessionId":"s1","cwd":cwd,
        "timestamp":"2026-12-01T10:05:00Z","compactMetadata":{"trigger":"auto","preTokens":150_000}});
    let summary = json!({"type":"user","uuid":"cs","parentUuid":"cb","sessionId":"s1","cwd":cwd,
        "timestamp":"2026-12-01T10:05:01Z","isCompactSummary":true,
        "message":{"role":"user","content":"This session is being continued from a previous conversation. The parser is done."}});
    format!("{boundary}\n{summary}\n")
}

fn claude_compaction_and_turn(cwd: &Path, after: usize, input_tokens: u64) -> String {
    let user = json!({"type":"user","uuid":"u9","parentUuid":"cs","sessionId":"s1","cwd":cwd,
        "timestamp":"2026-12-01T10:05:02Z","message":{"role":"user","content":"now the tests"}});
    let assistant = json!({"type":"assistant","uuid":"a9","parentUuid":"u9","sessionId":"s1","cwd":cwd,
        "timestamp":"2026-12-01T10:05:03Z",
        "message":{"id":"m9","model":"claude-sonnet-4-5","role":"assistant",
                   "content":[{"type":"text","text":"writing them"}],
                   "usage":{"input_tokens":input_tokens,"output_tokens":10}}});
    format!("{}{user}\n{assistant}\n", claude_compaction(cwd, after))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_followed_agent_compacts_its_own_context_the_budget_drops_to_it() {
    let h = homed();
    append_to(&h.transcript, &claude_turn(&h.workspace, 1, 150_000));
    let mut child = soba_command(&h)
        .args(["serve", "--standalone"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let c = LspClient::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
    c.initialize(&[&h.workspace], false).await;
    budget_until(&c, &h.workspace, |b| effective(b) >= 150_010).await;
    append_to(
        &h.transcript,
        &claude_compaction_and_turn(&h.workspace, 1, 21_000),
    );
    // The usage after the compaction measured the agent's compacted context: the budget drops
    // to it (the whole history would stay above 150k), plus the allowance for the growth the
    // session's reports showed beyond the log (capped at 5% of the usage).
    let changed = loop {
        let n = c
            .expect_notification("soba/budgetChanged", Duration::from_secs(20))
            .await;
        let growth = n["breakdown"]["unseen"]["tokens"].as_u64().unwrap_or(0);
        if growth <= 21_010 / 20 && (21_010..21_100).contains(&(effective(&n) - growth)) {
            break n;
        }
    };
    assert_eq!(changed["sessionId"], "claude-code-7d1c2f");
    let now = budget_until(&c, &h.workspace, |_| true).await;
    assert_eq!(effective(&now), effective(&changed), "{now}");
    assert!(
        now["breakdown"]["capsule"].as_u64() > Some(0),
        "the agent's summary is the first message: {now}"
    );
    assert!(
        now["breakdown"]["newEntries"].as_u64() < Some(24),
        "the turns before the compaction are out of the input: {now}"
    );
    let _ = child.kill().await;
}

/// A long Claude Code conversation: `turns` prompts and answers of some 400 tokens each.
fn long_claude_conversation(cwd: &Path, turns: usize) -> String {
    let mut text = String::new();
    for i in 0..turns {
        let parent = if i == 0 {
            Value::Null
        } else {
            json!(format!("a{}", i - 1))
        };
        let user = json!({"type":"user","uuid":format!("u{i}"),"parentUuid":parent,"sessionId":"s1",
            "cwd":cwd,"timestamp":"2026-12-01T10:00:00Z",
            "message":{"role":"user","content":format!("request {i}: fix the parser's number handling")}});
        let assistant = json!({"type":"assistant","uuid":format!("a{i}"),"parentUuid":format!("u{i}"),
            "sessionId":"s1","cwd":cwd,"timestamp":"2026-12-01T10:00:01Z",
            "message":{"id":format!("m{i}"),"model":"claude-sonnet-4-5","role":"assistant",
                       "content":[{"type":"text","text":format!("answer {i}: {}", "the parser now reads exponents and reports a missing digit with its column. ".repeat(25))}],
                       "usage":{"input_tokens":1000 + 450 * i as u64,"output_tokens":10}}});
        text.push_str(&format!("{user}\n{assistant}\n"));
    }
    text
}

fn capsules_in(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "capsule")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_on_a_followed_agent_are_previews_and_the_budget_says_who_compacts() {
    let h = homed();
    std::fs::write(&h.transcript, long_claude_conversation(&h.workspace, 12)).unwrap();
    std::fs::create_dir_all(h.workspace.join(".soba")).unwrap();
    std::fs::write(
        h.workspace.join(".soba/config.json"),
        json!({"compaction": {"keepRecentTokens": 800}}).to_string(),
    )
    .unwrap();
    // SOBA's Claude Code hook, installed in the user's settings.
    std::fs::write(
        h.root.join("claude/settings.json"),
        json!({"hooks": {"SessionStart": [{"matcher": "compact", "hooks": [
            {"type": "command", "command": "/usr/local/bin/soba hook claude-code"}]}]}})
        .to_string(),
    )
    .unwrap();
    let mut child = soba_command(&h)
        .args(["serve", "--standalone"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let c = LspClient::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
    c.initialize(&[&h.workspace], false).await;
    let before = budget_until(&c, &h.workspace, |b| anchored_at(b, 5950)).await;
    let control = &before["control"];
    assert_eq!(control["compactedBy"], "agent", "{before}");
    assert_eq!(control["agent"], "claude-code");
    assert_eq!(control["integration"], "claude-code-hook");
    assert_eq!(
        control["note"],
        "Claude Code compacts this session itself; SOBA follows it, and SOBA's hook adds its capsule after each of Claude Code's compactions."
    );
    assert!(control["actions"]
        .as_str()
        .unwrap()
        .contains("Run /compact in Claude Code"));
    let sessions = c
        .request("soba/sessions", json!({"workspace": h.workspace}))
        .await;
    let log = PathBuf::from(sessions["sessions"][0]["path"].as_str().unwrap());
    let session_id = before["sessionId"].as_str().unwrap();

    // Compact, capsule load and rewind change nothing and say why.
    let compact = c
        .raw("soba/compact", json!({"workspace": h.workspace}))
        .await;
    assert_eq!(compact["error"]["code"], -32005, "{compact}");
    assert!(compact["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("soba/compact was not applied: Claude Code compacts this session itself"));
    let load = c
        .raw(
            "soba/capsule/load",
            json!({"workspace": h.workspace, "path": h.root.join("x.capsule.md")}),
        )
        .await;
    assert_eq!(load["error"]["code"], -32005, "{load}");
    let rewind = c
        .raw(
            "soba/rewind",
            json!({"sessionId": session_id, "entryId": "missing"}),
        )
        .await;
    assert_eq!(rewind["error"]["code"], -32005, "{rewind}");
    assert_eq!(
        capsules_in(&log),
        0,
        "nothing was appended as if the agent took it"
    );
    // Auto-compact is the agent's to set: SOBA's setting would sit on a branch the transcript
    // never continues.
    let lines_before = std::fs::read_to_string(&log).unwrap().lines().count();
    let auto = c
        .raw(
            "soba/autoCompact",
            json!({"workspace": h.workspace, "enabled": false}),
        )
        .await;
    assert_eq!(auto["error"]["code"], -32005, "{auto}");
    assert!(auto["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("soba/autoCompact was not applied: Claude Code compacts this session itself"));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap().lines().count(),
        lines_before,
        "no setting entry was appended"
    );

    // The preview is what SOBA would send: its capsule, then the retained tail.
    let preview = c
        .request(
            "soba/preview",
            json!({"workspace": h.workspace, "action": "compact", "instructions": "keep the parser work"}),
        )
        .await;
    assert_eq!(preview["action"], "compact");
    assert_eq!(preview["control"]["compactedBy"], "agent");
    let text = preview["text"].as_str().unwrap();
    assert!(
        text.starts_with("# What SOBA would send after compacting\n\n> Preview: nothing was changed, and the agent does not receive this.\n> Claude Code compacts this session itself"),
        "{text}"
    );
    assert!(text.contains("Context Capsule"), "{text}");
    assert!(
        text.contains("answer 11"),
        "the retained tail follows: {text}"
    );
    assert!(
        preview["tokensAfter"].as_u64() < preview["tokensBefore"].as_u64(),
        "{preview}"
    );
    // Rewinding: the model input at an earlier entry, as it stood.
    let entry = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["sourceId"] == "a2")
        .unwrap();
    let rewound = c
        .request(
            "soba/preview",
            json!({"sessionId": session_id, "action": "rewind", "entryId": entry["id"]}),
        )
        .await;
    let text = rewound["text"].as_str().unwrap();
    assert!(
        text.contains("answer 2") && !text.contains("answer 3"),
        "{text}"
    );
    let missing = c
        .raw(
            "soba/preview",
            json!({"sessionId": session_id, "action": "rewind", "entryId": "e_missing"}),
        )
        .await;
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
    assert_eq!(capsules_in(&log), 0, "a preview appends nothing");
    let after = c
        .request("soba/budget", json!({"workspace": h.workspace}))
        .await;
    assert_eq!(effective(&after), effective(&before));

    // A session an agent opens is SOBA's to compact.
    let opened = c
        .request(
            "soba/session/open",
            json!({"workspace": h.workspace, "create": true}),
        )
        .await;
    assert_eq!(opened["budget"]["control"]["compactedBy"], "soba");
    assert_eq!(
        opened["budget"]["control"]["note"],
        "SOBA compacts this session before the agent's next response."
    );
    let _ = child.kill().await;
}

/// A Claude Code prompt and response naming `model`.
fn claude_turn_with(cwd: &Path, i: usize, input_tokens: u64, model: &str) -> String {
    claude_turn(cwd, i, input_tokens).replace("claude-sonnet-4-5", model)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attached_before_the_first_response_the_budget_takes_the_transcripts_model_and_its_switches(
) {
    let e = env();
    // The editor attaches while the agent has only written the user's prompt.
    let first = claude_turn_with(&e.workspace, 0, 1000, "claude-opus-4-5");
    let prompt_end = first.find('\n').unwrap() + 1;
    append_to(&e.transcript, &first[..prompt_end]);
    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    let r = c
        .request(
            "soba/attach",
            json!({"workspace": e.workspace, "transcript": e.transcript, "agent": "claude-code", "idleSecs": 60}),
        )
        .await;
    let guessed = budget_until(&c, &e.workspace, |_| true).await;
    assert_ne!(guessed["model"], "claude-opus-4-5", "{guessed}");

    append_to(&e.transcript, &first[prompt_end..]);
    let opus = budget_until(&c, &e.workspace, |b| b["model"] == "claude-opus-4-5").await;
    assert_eq!(opus["contextWindow"], 200_000, "{opus}");
    assert_eq!(
        opus["hardLimit"],
        200_000 - 64_000 - 8192,
        "the hard limit is Opus's, not the default model's: {opus}"
    );
    assert_ne!(opus["hardLimit"], guessed["hardLimit"]);

    // The user switches the agent to another model mid-session.
    append_to(
        &e.transcript,
        &claude_turn_with(&e.workspace, 1, 3000, "gpt-4.1"),
    );
    let switched = budget_until(&c, &e.workspace, |b| {
        b["model"] == "gpt-4.1" && anchored_at(b, 3010)
    })
    .await;
    assert_eq!(switched["contextWindow"], 1_047_576, "{switched}");

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let log = std::fs::read_to_string(r["path"].as_str().unwrap()).unwrap();
    let switches: Vec<String> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "setting")
        .filter_map(|v| v["model"]["name"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        switches,
        ["claude-opus-4-5", "gpt-4.1"],
        "the log records each switch once"
    );

    // `soba budget` on the log agrees: the model in force is the last switch's.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_soba"))
        .args(["budget", r["path"].as_str().unwrap(), "--json"])
        .env("SOBA_CONFIG", e.workspace.join("no-user-config.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cli["model"], "gpt-4.1");
    assert_eq!(cli["hardLimit"], switched["hardLimit"]);
}

/// `soba attach` and `soba import` of the same transcript give the same first-request budget:
/// both allow for what the agent sends that its transcript never records (its system prompt and
/// tools), from the same data folder. `first` writes the agent's transcript before its first
/// response, in the workspace it is given.
async fn attach_and_import_give_the_same_first_request_budget(
    agent: &str,
    first: impl Fn(&Path) -> String,
) {
    let e = env();
    append_to(&e.transcript, &first(&e.workspace));

    let data = e.workspace.parent().unwrap().join("soba/data");
    let soba = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_soba"))
            .args(args)
            .env("SOBA_DATA_DIR", &data)
            .env("SOBA_CONFIG", e.workspace.join("no-user-config.json"))
            .current_dir(&e.workspace)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let imported = e.workspace.join("imported.jsonl");
    let transcript = e.transcript.to_str().unwrap();
    soba(&[
        "import",
        transcript,
        "-o",
        imported.to_str().unwrap(),
        "--json",
    ]);
    let import_budget = soba(&["budget", "--json", imported.to_str().unwrap()]);
    let unseen = &import_budget["breakdown"]["unseen"];
    assert_eq!(unseen["kind"], "context", "{agent}: {import_budget}");
    assert_eq!(unseen["agent"], agent, "{import_budget}");

    let c = connect(&e.daemon);
    c.initialize(&[&e.workspace], false).await;
    c.request(
        "soba/attach",
        json!({"workspace": e.workspace, "transcript": e.transcript, "agent": agent, "idleSecs": 60}),
    )
    .await;
    // The prompt is followed once the file has been quiet a moment: wait for the same total
    // (a first request without the allowance reads ~90% lower and never gets there).
    let want = effective(&import_budget);
    let attached = budget_until(&c, &e.workspace, |b| effective(b) == want).await;
    assert_eq!(
        attached["breakdown"]["unseen"], import_budget["breakdown"]["unseen"],
        "{agent} attached: {attached}"
    );
    assert_eq!(attached["hardLimit"], import_budget["hardLimit"], "{agent}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_and_import_of_one_claude_code_transcript_give_the_same_first_request_budget() {
    // The agent has written the user's first prompt; no response, no usage report yet.
    attach_and_import_give_the_same_first_request_budget("claude-code", |cwd| {
        let turn = claude_turn_with(cwd, 0, 1000, "claude-opus-4-5");
        turn[..turn.find('\n').unwrap() + 1].to_string()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_and_import_of_one_codex_rollout_give_the_same_first_request_budget() {
    attach_and_import_give_the_same_first_request_budget("codex", |cwd| {
        [
            json!({"timestamp": "2026-12-01T10:00:00Z", "type": "session_meta",
               "payload": {"id": "0199-codex", "cwd": cwd}}),
            json!({"timestamp": "2026-12-01T10:00:00Z", "type": "turn_context",
               "payload": {"model": "gpt-5-codex"}}),
            json!({"timestamp": "2026-12-01T10:00:01Z", "type": "response_item",
               "payload": {"type": "message", "role": "user",
                           "content": [{"type": "input_text", "text": "fix the parser"}]}}),
        ]
        .iter()
        .map(|r| format!("{r}\n"))
        .collect()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_and_import_of_one_pi_session_give_the_same_first_request_budget() {
    attach_and_import_give_the_same_first_request_budget("pi", |cwd| {
        format!(
            "{}\n{}\n",
            json!({"type": "session", "version": 3, "id": "p1", "cwd": cwd,
                   "timestamp": "2026-12-01T10:00:00Z"}),
            json!({"type": "message", "id": "m1", "parentId": null, "timestamp": "2026-12-01T10:00:01Z",
                   "message": {"role": "user", "content": [{"type": "text", "text": "fix the parser"}]}})
        )
    })
    .await;
}
