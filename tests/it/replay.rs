//! `soba replay` over every real transcript in the fixtures, with a window small enough to force
//! compactions: every input handed out fits under the hard limit and keeps tool calls with
//! their results, and the report is written.

use crate::common;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::Command;

use soba::import::transcript::import_str;
use soba::import::ImportOptions;
use soba::replay::host::CapsuleWriter;
use soba::replay::{replay, Observers};
use soba_core::config::{Config, ConfigFile, Overrides};
use soba_core::session::entry::{ContentBlock, Outcome};
use soba_core::session::view::ModelMessage;

/// A 13k window (hard limit 10k): even the smallest fixture outgrows it.
const SMALL_WINDOW: &str = r#"{"model":{"name":"replay-test","contextWindow":13000,"maxOutputTokens":1500},
  "compaction":{"safetyReserveTokens":1500,"keepRecentTokens":4000,
                "minTokensForAutoCompact":4000,"minReclaimableTokens":3000}}"#;

fn small_window() -> Config {
    let f = ConfigFile::parse("test", SMALL_WINDOW).unwrap();
    Config::resolve(&[f], None, &Overrides::default()).unwrap()
}

fn transcripts(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for agent in std::fs::read_dir(dir).unwrap() {
        let agent = agent.unwrap().path();
        if !agent.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&agent).unwrap() {
            let f = f.unwrap().path();
            if f.extension().is_some_and(|e| e == "jsonl" || e == "json") {
                files.push(f);
            }
        }
    }
    files.sort();
    files
}

/// Independent of the library's own check: each call's results follow it directly, and no
/// result appears without its call.
fn pairing_problems(messages: &[ModelMessage]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        let calls: Vec<&str> = messages[i]
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolCall { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect();
        if messages[i].tool_call_id.is_some() {
            problems.push(format!(
                "message {i}: a result with no call right before it"
            ));
        }
        let mut got: Vec<&str> = Vec::new();
        let mut j = i + 1;
        while j < messages.len() && messages[j].tool_call_id.is_some() {
            got.push(messages[j].tool_call_id.as_deref().unwrap());
            j += 1;
        }
        let mut want = calls.clone();
        want.sort();
        got.sort();
        if want != got {
            problems.push(format!(
                "message {i}: calls {want:?}, results after it {got:?}"
            ));
        }
        i = j;
    }
    problems
}

#[test]
fn every_fixture_replays_with_inputs_under_the_hard_limit_and_no_tool_pair_split() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let config = small_window();
    let hard = config.limits().hard_limit;
    let files = transcripts(&dir);
    assert!(files.len() >= 4, "fixtures found: {files:?}");
    let out = tempfile::tempdir().unwrap();
    for (n, file) in files.iter().enumerate() {
        let text = std::fs::read_to_string(file).unwrap();
        let options = ImportOptions {
            source_path: file.display().to_string(),
            default_workspace: "/ws".into(),
            default_session_id: format!("s{n}"),
            now: "2026-01-01T00:00:00Z".into(),
        };
        let import = import_str(&text, None, &options).unwrap();
        let foreign_in_transcript = import.report.foreign_compactions;
        let problems = RefCell::new(Vec::new());
        let checked = RefCell::new(0usize);
        let observers = Observers {
            on_input: Box::new(|messages: &[ModelMessage], tokens: u64| {
                *checked.borrow_mut() += 1;
                let mut p = problems.borrow_mut();
                if tokens > hard {
                    p.push(format!(
                        "input of {tokens} tokens over the hard limit {hard}"
                    ));
                }
                p.extend(pairing_problems(messages));
            }),
            ..Observers::default()
        };
        let log = out.path().join(format!("replay{n}.jsonl"));
        let r = replay(import, &config, CapsuleWriter::Local, &log, observers).unwrap();
        let name = file.display();
        assert!(
            problems.borrow().is_empty(),
            "{name}: {:?}",
            problems.borrow()
        );
        assert_eq!(*checked.borrow(), r.inputs, "{name}");
        assert!(r.inputs > 0, "{name}");
        assert!(
            r.timeline
                .compactions
                .iter()
                .any(|c| c.result.outcome == Outcome::Completed),
            "{name}: the window forces compactions"
        );
        for s in &r.timeline.steps {
            assert!(s.effective_tokens <= hard, "{name}: {s:?}");
        }
        // A compaction belongs to the turn of the inference it preceded: the turn the chart and
        // the terminal's bars give that step. (Where a preflight failed no input went out, and
        // the next step may be a turn later.)
        let failed_before: Vec<usize> = r
            .timeline
            .compactions
            .iter()
            .filter(|c| c.result.outcome == Outcome::Failed)
            .map(|c| c.step)
            .collect();
        for c in &r.timeline.compactions {
            if let Some(step) = r.timeline.steps.get(c.step) {
                if !failed_before.contains(&c.step) {
                    assert_eq!(c.turn, step.turn, "{name}: {c:?}");
                }
            }
        }
        // Where no input could be sent, the barrier failed closed and said why.
        let failed: Vec<_> = r
            .timeline
            .compactions
            .iter()
            .filter(|c| c.result.outcome == Outcome::Failed)
            .collect();
        assert!(failed.len() >= r.refusals, "{name}");
        for c in failed {
            assert!(
                c.result.reason.starts_with("context budget exceeded"),
                "{name}: {:?}",
                c.result
            );
        }
        assert_eq!(
            r.timeline.foreign_compactions.len(),
            foreign_in_transcript,
            "{name}: the source agent's compactions are on the timeline"
        );
        // The replayed log reads back and its leaf input fits.
        let (session, report) = soba_core::session::log::read_session(&log).unwrap();
        assert!(
            report.messages(&log).is_empty(),
            "{name}: {:?}",
            report.messages(&log)
        );
        let latest = session.leaf().and_then(|l| session.capsule_on_path(l));
        assert!(
            latest.is_some(),
            "{name}: the final branch carries SOBA's capsule"
        );
        let html = soba::report::html::render(&r.timeline);
        let report_path = out.path().join(format!("report{n}.html"));
        std::fs::write(&report_path, &html).unwrap();
        assert!(html.contains(r#"<polyline class="effective""#), "{name}");
        assert!(html.contains("compaction-row"), "{name}");
    }
}

#[test]
fn the_replay_command_prints_the_timeline_and_writes_the_report() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let file = dir.join("codex/agentv-two-compactions.jsonl");
    let out = tempfile::tempdir().unwrap();
    let report = out.path().join("r.html");
    let config = out.path().join("small.json");
    std::fs::write(&config, SMALL_WINDOW).unwrap();
    let log = out.path().join("s.jsonl");
    let run = Command::new(env!("CARGO_BIN_EXE_soba"))
        .env("NO_COLOR", "1")
        .arg("replay")
        .arg(&file)
        .arg("--config")
        .arg(&config)
        .arg("--report")
        .arg(&report)
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("turn  1 ▕"), "{stdout}");
    assert!(stdout.contains("hard limit"), "{stdout}");
    // At the end, the source agent's two compactions beside what SOBA had done by then.
    let comparison = stdout
        .split("The source agent's compactions beside SOBA's:\n")
        .nth(1)
        .expect("the comparison section");
    assert_eq!(
        comparison.matches("codex compacted").count(),
        2,
        "{comparison}"
    );
    assert_eq!(
        comparison.matches("SOBA by then: ").count(),
        2,
        "{comparison}"
    );
    assert!(
        stdout.contains(&format!("report       {}", report.display())),
        "{stdout}"
    );
    assert!(std::fs::read_to_string(&report).unwrap().contains("<svg"));
    assert!(log.is_file());

    // --json: the timeline plus the paths.
    let log2 = out.path().join("s2.jsonl");
    let run = Command::new(env!("CARGO_BIN_EXE_soba"))
        .arg("replay")
        .arg(&file)
        .arg("--config")
        .arg(&config)
        .args(["--json", "--log"])
        .arg(&log2)
        .output()
        .unwrap();
    assert!(run.status.success());
    let v: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(v["sessionLog"], log2.display().to_string());
    assert!(v["report"].is_null());
    assert!(!v["steps"].as_array().unwrap().is_empty());
}

#[test]
fn replaying_a_file_that_is_no_transcript_says_so() {
    let out = tempfile::tempdir().unwrap();
    let bogus = out.path().join("notes.txt");
    std::fs::write(&bogus, "just some notes\n").unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_soba"))
        .arg("replay")
        .arg(&bogus)
        .output()
        .unwrap();
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("cannot import") && err.contains("--format"),
        "{err}"
    );
}

#[test]
fn replay_will_not_overwrite_an_existing_log() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let log = out.path().join("s.jsonl");
    std::fs::write(&log, "keep me").unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_soba"))
        .arg("replay")
        .arg(dir.join("codex/agentcmd-rollout-v0.40.jsonl"))
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("already exists"));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "keep me");
}

/// Fake secrets of several kinds, assembled at run time (the repository holds no
/// secret-shaped literal).
fn planted_secrets() -> Vec<String> {
    let body = |seed: u32, n: usize| -> String {
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let mut x = seed.wrapping_mul(2_654_435_761) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                alphabet[x as usize % alphabet.len()] as char
            })
            .collect()
    };
    vec![
        format!("ghp_{}", body(1, 36)),
        format!("sk-proj-{}", body(2, 64)),
        format!("AKIA{}", body(3, 16).to_ascii_uppercase()),
        format!(
            "xoxb-{}-{}-{}",
            "123456789012",
            "1234567890123",
            body(4, 24)
        ),
        format!("Tr0ub4dor{}", body(5, 8)),
        format!("SG.{}.{}", body(6, 22), body(7, 43)),
    ]
}

#[test]
fn the_html_report_holds_no_planted_secret() {
    let s = planted_secrets();
    let filler =
        "The parser handles nested blocks and reports the line of every error. ".repeat(60);
    let mut messages =
        vec![serde_json::json!({"role": "system", "content": "You are a coding agent."})];
    messages.push(serde_json::json!({"role": "user",
        "content": format!("Deploy with GITHUB_TOKEN={} and OPENAI_API_KEY={}; the database password is in .env", s[0], s[1])}));
    for i in 0..14 {
        let id = format!("call_{i}");
        messages.push(serde_json::json!({"role": "assistant", "content": format!("Step {i}: checking the config. {filler}"),
            "tool_calls": [{"id": id, "type": "function", "function": {"name": "bash",
                "arguments": serde_json::json!({"command": format!("AWS_ACCESS_KEY_ID={} DB_PASSWORD={} ./deploy.sh --step {i}", s[2], s[4])}).to_string()}}]}));
        messages.push(serde_json::json!({"role": "tool", "tool_call_id": id,
            "content": format!("SLACK_BOT_TOKEN={}\nSENDGRID_API_KEY={}\n{filler}", s[3], s[5])}));
        messages.push(serde_json::json!({"role": "user", "content": format!("Continue; keep using {} for GitHub. {filler}", s[0])}));
    }
    let out = tempfile::tempdir().unwrap();
    let transcript = out.path().join("leaky.traj.json");
    std::fs::write(&transcript, serde_json::to_string(&messages).unwrap()).unwrap();
    let config = out.path().join("small.json");
    std::fs::write(&config, SMALL_WINDOW).unwrap();
    let report = out.path().join("r.html");
    let run = Command::new(env!("CARGO_BIN_EXE_soba"))
        .env("NO_COLOR", "1")
        .arg("replay")
        .arg(&transcript)
        .arg("--config")
        .arg(&config)
        .arg("--report")
        .arg(&report)
        .arg("--log")
        .arg(out.path().join("s.jsonl"))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("compaction-row"), "the replay compacted");
    assert!(
        html.contains("[redacted:"),
        "the capsule in the report kept the planted text"
    );
    let leaked: Vec<&String> = s
        .iter()
        .filter(|secret| html.contains(secret.as_str()))
        .collect();
    assert!(
        leaked.is_empty(),
        "{} of {} planted secrets in the report: {leaked:?}",
        leaked.len(),
        s.len()
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&report).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o077, 0, "the report is private: {mode:o}");
}

/// A pi session written here: `turns` turns of a prompt, a file read of ~1500 tokens and an
/// answer, usage reported on every assistant message (a fixed 4000-token system prompt the
/// transcript does not hold, plus the conversation), and one compaction by pi halfway.
fn pi_session(turns: usize) -> String {
    let mut lines = vec![
        serde_json::json!({"type": "session", "id": "s-written", "version": 3,
        "timestamp": "2026-01-01T00:00:00Z", "cwd": "/ws", "provider": "anthropic",
        "modelId": "claude-sonnet-4-5"})
        .to_string(),
    ];
    let mut parent: Option<String> = None;
    let mut context = 4000u64;
    let mut push = |id: String, body: serde_json::Value, lines: &mut Vec<String>| {
        let mut v = body;
        v["id"] = id.clone().into();
        v["parentId"] = parent.clone().map_or(serde_json::Value::Null, Into::into);
        v["timestamp"] = "2026-01-01T00:00:00Z".into();
        lines.push(v.to_string());
        parent = Some(id);
    };
    for t in 0..turns {
        let text = |role: &str, text: String| {
            serde_json::json!({"type": "message", "message": {"role": role,
                "content": [{"type": "text", "text": text}]}})
        };
        push(
            format!("u{t}"),
            text("user", format!("step {t}: read f{t}.rs")),
            &mut lines,
        );
        context += 20;
        let mut call = serde_json::json!({"type": "message", "message": {"role": "assistant",
            "content": [{"type": "toolCall", "id": format!("c{t}"), "name": "read",
                "arguments": {"path": format!("/ws/f{t}.rs")}}]}});
        call["message"]["usage"] = serde_json::json!({"input": context, "output": 30,
            "cacheRead": 0, "cacheWrite": 0});
        push(format!("a{t}"), call, &mut lines);
        let body = format!("fn item_{t}() {{}} ").repeat(250);
        context += 30 + 1800;
        push(
            format!("r{t}"),
            serde_json::json!({"type": "message", "message": {"role": "toolResult",
                "toolCallId": format!("c{t}"), "toolName": "read",
                "content": [{"type": "text", "text": body}], "isError": false}}),
            &mut lines,
        );
        let mut answer = text("assistant", format!("f{t}.rs read"));
        answer["message"]["usage"] = serde_json::json!({"input": context, "output": 10,
            "cacheRead": 0, "cacheWrite": 0});
        push(format!("d{t}"), answer, &mut lines);
        context += 10;
        if t == turns / 2 {
            push(
                format!("k{t}"),
                serde_json::json!({"type": "compaction", "summary": "## Goal\nread every file",
                    "firstKeptEntryId": format!("u{t}"), "tokensBefore": context}),
                &mut lines,
            );
            context = 4000 + 600;
        }
    }
    lines.join("\n") + "\n"
}

/// The turn numbers on `soba replay`'s terminal lines and in its HTML report, in order: each
/// compaction's and each of the source agent's compactions'.
fn replay_turns(file: &Path, out: &Path, config: &Path) -> (String, String) {
    let report = out.join(format!(
        "{}.html",
        file.file_stem().unwrap().to_string_lossy()
    ));
    let run = Command::new(env!("CARGO_BIN_EXE_soba"))
        .env("NO_COLOR", "1")
        .arg("replay")
        .arg(file)
        .arg("--config")
        .arg(config)
        .arg("--report")
        .arg(&report)
        .arg("--log")
        .arg(out.join(format!(
            "{}.replayed.jsonl",
            file.file_stem().unwrap().to_string_lossy()
        )))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "{}: {stdout}\n{}",
        file.display(),
        String::from_utf8_lossy(&run.stderr)
    );
    (stdout, std::fs::read_to_string(&report).unwrap())
}

/// The number after `turn ` at the start of `rest`.
fn turn_after(rest: &str) -> usize {
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no turn in {rest:?}"))
}

/// `(compaction turns, source agent's compaction turns, turns of the budget bars)` as printed.
fn cli_turns(stdout: &str) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let (mut compactions, mut foreign, mut bars) = (Vec::new(), Vec::new(), Vec::new());
    for line in stdout.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix("turn ") {
            if rest.contains('▕') {
                bars.push(turn_after(rest));
            }
            continue;
        }
        for mark in ["⟳ turn ", "· turn ", "× turn ", "! turn "] {
            if let Some(rest) = trimmed.strip_prefix(mark) {
                compactions.push(turn_after(rest));
            }
        }
        if let Some(rest) = trimmed.strip_prefix("◇ turn ") {
            foreign.push(turn_after(rest));
        }
    }
    (compactions, foreign, bars)
}

/// The second cell of every `<tr class="{row}…">` (the turn of a compaction row) or the first
/// (of a source agent's row).
fn html_turns(html: &str, row: &str, cell: usize) -> Vec<usize> {
    html.split(&format!("<tr class=\"{row}"))
        .skip(1)
        .map(|r| {
            let cells: Vec<&str> = r.split("<td>").skip(1).collect();
            turn_after(cells[cell].split('<').next().unwrap())
        })
        .collect()
}

fn assert_cli_and_html_agree(file: &Path, out: &Path, config: &Path) -> (String, String) {
    let (stdout, html) = replay_turns(file, out, config);
    let name = file.display();
    let (compactions, foreign, bars) = cli_turns(&stdout);
    assert!(!compactions.is_empty(), "{name}: {stdout}");
    assert_eq!(
        compactions,
        html_turns(&html, "compaction-row", 1),
        "{name}: compaction turns"
    );
    assert_eq!(
        foreign,
        html_turns(&html, "foreign-row", 0),
        "{name}: the source agent's compaction turns"
    );
    // The bars count turns as the chart does: the last bar is the chart's last turn.
    let last_turn = html
        .split(" turns</text>")
        .next()
        .and_then(|h| h.rsplit(", ").next())
        .map(turn_after)
        .unwrap();
    assert_eq!(bars.last(), Some(&last_turn), "{name}");
    assert!(bars.windows(2).all(|w| w[0] <= w[1]), "{name}: {bars:?}");
    (stdout, html)
}

#[test]
fn the_terminal_and_the_html_report_agree_on_turns_and_share_the_bottom_line() {
    let out = tempfile::tempdir().unwrap();
    let config = out.path().join("small.json");
    std::fs::write(&config, SMALL_WINDOW).unwrap();
    let written = out.path().join("written-pi.jsonl");
    std::fs::write(&written, pi_session(10)).unwrap();
    let (stdout, html) = assert_cli_and_html_agree(&written, out.path(), &config);

    // pi compacted once, at turn 6; what it kept is filled in on both sides, down to the
    // context it reported at its next inference.
    assert_eq!(cli_turns(&stdout).1, [6], "{stdout}");
    // The importer numbers entries itself: pi's `u5` is `e21`.
    let kept = "a 6-token summary, entries from e21; its next input was 4.6k tokens";
    assert!(stdout.contains(&format!("kept {kept}")), "{stdout}");
    assert!(html.contains(&format!("<td>{kept}</td>")), "{html}");

    // The bottom line: the same sentences on the terminal and in the page, with the 4000
    // tokens the transcript does not hold found at the first inference.
    let bottom = stdout
        .split("Bottom line:\n")
        .nth(1)
        .expect("a bottom line")
        .split("\n\n")
        .next()
        .unwrap();
    let sentences: Vec<&str> = bottom.lines().map(str::trim).collect();
    assert!(sentences.len() >= 3, "{bottom}");
    assert!(sentences[0].starts_with("SOBA: "), "{bottom}");
    assert!(
        sentences[1]
            .starts_with("Over the 20 inferences pi reported a size for, its inputs totalled"),
        "{bottom}"
    );
    assert!(
        sentences[2].contains("the 4.0k tokens between are what the transcript does not hold"),
        "{bottom}"
    );
    let page_bottom = html
        .split(r#"<ul class="bottom-line">"#)
        .nth(1)
        .and_then(|h| h.split("</ul>").next())
        .unwrap();
    let page_sentences: Vec<String> = page_bottom
        .split("<li>")
        .skip(1)
        .map(|s| s.trim_end_matches("</li>").replace("&#39;", "'"))
        .collect();
    assert_eq!(page_sentences, sentences, "{page_bottom}");

    // And on every real transcript.
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    for file in transcripts(&dir) {
        let (stdout, _) = assert_cli_and_html_agree(&file, out.path(), &config);
        assert!(stdout.contains("Bottom line:\n  SOBA: "), "{stdout}");
    }
}

/// The `soba-replay-*` folders in `tmp`.
fn replay_folders(tmp: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("soba-replay-"))
        })
        .collect()
}

#[test]
fn without_log_the_replayed_transcript_is_not_left_behind() {
    let out = tempfile::tempdir().unwrap();
    let tmp = out.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let config = out.path().join("small.json");
    std::fs::write(&config, SMALL_WINDOW).unwrap();
    let written = out.path().join("written-pi.jsonl");
    std::fs::write(&written, pi_session(6)).unwrap();
    for json in [false, true] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_soba"));
        cmd.env("TMPDIR", &tmp)
            .env("SOBA_CONFIG", out.path().join("none.json"))
            .arg("replay")
            .arg(&written)
            .arg("--config")
            .arg(&config);
        if json {
            cmd.arg("--json");
        }
        let run = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&run.stdout);
        assert!(
            run.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&run.stderr)
        );
        if json {
            let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            assert!(v["sessionLog"].is_null(), "{}", v["sessionLog"]);
        } else {
            assert!(stdout.contains("session log  not kept"), "{stdout}");
        }
        assert_eq!(replay_folders(&tmp), Vec::<PathBuf>::new());
    }
}

/// Ctrl-C in the middle of a replay (here: while the summarizer is asked for a capsule and
/// never answers) removes the private folder holding the replayed transcript.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_replay_removes_its_private_folder() {
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, Instant};
    let server = crate::loopback::Loopback::start(|_, _| {
        vec![crate::loopback::Step::Sleep(Duration::from_secs(120))]
    })
    .await;
    let out = tempfile::tempdir().unwrap();
    let tmp = out.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(SMALL_WINDOW).unwrap();
    config["summarizer"] = serde_json::json!({"provider": "openai", "model": "gpt-4o-mini",
        "baseUrl": format!("{}/v1", server.base), "apiKeyEnv": "SOBA_TEST_KEY"});
    let config_path = out.path().join("hanging.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let written = out.path().join("written-pi.jsonl");
    std::fs::write(&written, pi_session(10)).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_soba"))
        .env("TMPDIR", &tmp)
        .env("SOBA_CONFIG", out.path().join("none.json"))
        .env("SOBA_TEST_KEY", "sk-test-replay")
        .arg("replay")
        .arg(&written)
        .arg("--config")
        .arg(&config_path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.requests().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!server.requests().is_empty(), "the replay never compacted");
    let folders = replay_folders(&tmp);
    assert_eq!(folders.len(), 1, "{folders:?}");
    let mode = std::fs::metadata(&folders[0]).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    assert!(folders[0].join("session.jsonl").is_file());
    // SAFETY: sending a signal to our own child.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let status = status.expect("the replay did not end on SIGINT");
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert_eq!(replay_folders(&tmp), Vec::<PathBuf>::new());
}
