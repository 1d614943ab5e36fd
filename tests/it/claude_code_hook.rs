//! `soba hook claude-code` with recorded Claude Code hook payloads over the real Claude Code
//! transcripts in `../shared/fixtures/transcripts/claude-code/`, and `soba hook install
//! claude-code` against temporary homes.

use crate::common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

const FIXTURE: &str = "claude-code/entire-cli-two-compactions.jsonl";

struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_soba"));
        c.args(args)
            .env("HOME", self.path())
            .env("SOBA_DATA_DIR", self.path().join("soba-data"))
            .env("SOBA_RUNTIME_DIR", self.path().join("soba-run"))
            .env("XDG_CONFIG_HOME", self.path().join("config"))
            .env_remove("CLAUDE_CONFIG_DIR")
            .current_dir(self.path());
        c
    }

    fn hook(&self, stdin: &str) -> Output {
        let mut child = self
            .command(&["hook", "claude-code"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }
}

/// The first `lines` records of the fixture, as Claude Code's file stood then.
fn transcript_prefix(home: &Home, lines: usize) -> Option<PathBuf> {
    let dir = common::transcripts_dir()?;
    let text = std::fs::read_to_string(dir.join(FIXTURE)).unwrap();
    let prefix: String = text.lines().take(lines).map(|l| format!("{l}\n")).collect();
    let path = home.path().join("transcript.jsonl");
    std::fs::write(&path, prefix).unwrap();
    Some(path)
}

/// Line index of the fixture's `n`-th compact boundary (0-based).
fn boundary_line(n: usize) -> usize {
    let dir = common::transcripts_dir().unwrap();
    let text = std::fs::read_to_string(dir.join(FIXTURE)).unwrap();
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            serde_json::from_str::<Value>(l).is_ok_and(|r| r["subtype"] == "compact_boundary")
        })
        .nth(n)
        .map(|(i, _)| i)
        .unwrap()
}

/// Files an `Edit` / `Write` call changed in the fixture's first `lines` records.
fn modified_files(lines: usize) -> Vec<String> {
    let dir = common::transcripts_dir().unwrap();
    let text = std::fs::read_to_string(dir.join(FIXTURE)).unwrap();
    let mut files = Vec::new();
    for l in text.lines().take(lines) {
        let Ok(r) = serde_json::from_str::<Value>(l) else {
            continue;
        };
        if r["type"] != "assistant" || r["isSidechain"] == true {
            continue;
        }
        for b in r["message"]["content"].as_array().into_iter().flatten() {
            let name = b["name"].as_str().unwrap_or("");
            if b["type"] == "tool_use" && matches!(name, "Edit" | "Write" | "MultiEdit") {
                if let Some(f) = b["input"]["file_path"].as_str() {
                    files.push(f.to_string());
                }
            }
        }
    }
    files
}

fn payload(transcript: &Path, event: Value) -> String {
    let mut p = json!({
        "session_id": "44df7d08-6bc4-4532-bef8-167ea3797cee",
        "transcript_path": transcript,
        "cwd": "/Users/soph/Work/entire/devenv/cli",
    });
    for (k, v) in event.as_object().unwrap() {
        p[k] = v.clone();
    }
    p.to_string()
}

fn stdout_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON on stdout ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn session_start_after_a_compaction_returns_sobas_capsule_of_the_transcript_before_it() {
    let home = Home::new();
    let Some(_) = common::transcripts_dir() else {
        return;
    };
    // Claude Code runs the hook right after writing the boundary and its summary.
    let first = boundary_line(0);
    let transcript = transcript_prefix(&home, first + 2).unwrap();
    let out = home.hook(&payload(
        &transcript,
        json!({"hook_event_name": "SessionStart", "source": "compact"}),
    ));
    let v = stdout_json(&out);
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "SessionStart");
    let context = v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .expect("additionalContext");
    assert!(context.chars().count() <= 9_000, "{} chars", context.len());
    assert!(context.starts_with("# Context Capsule"), "{context}");
    // Claude Code's summary follows, not a verbatim tail of SOBA's: the opening says so.
    let opening = context.lines().nth(1).unwrap_or_default();
    assert!(
        opening.starts_with("Claude Code compacted this conversation into its own summary."),
        "{opening}"
    );
    assert!(!context.contains("verbatim"), "{context}");
    // What Claude Code's summary is weakest at: the files changed before the compaction.
    let modified = modified_files(first);
    let latest = modified
        .last()
        .expect("the fixture edits files before compacting");
    let name = Path::new(latest).file_name().unwrap().to_str().unwrap();
    assert!(context.contains(name), "{name} missing from:\n{context}");
    // Nothing after the boundary is in it: the session's later edits are not.
    let later: Vec<String> = modified_files(boundary_line(1))
        .into_iter()
        .skip(modified.len())
        .filter(|f| !modified.contains(f))
        .collect();
    assert!(
        !later.is_empty(),
        "the fixture edits other files after its first compaction"
    );
    let modified_section = context
        .split("## Files modified")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("a files-modified section");
    for f in later {
        let relative = f
            .strip_prefix("/Users/soph/Work/entire/devenv/cli/")
            .unwrap_or(&f);
        assert!(
            !modified_section.contains(relative),
            "{relative} was changed after the compaction"
        );
    }
}

#[test]
fn pre_compact_records_trigger_and_instructions_and_they_focus_the_next_capsule() {
    let home = Home::new();
    let Some(_) = common::transcripts_dir() else {
        return;
    };
    let second = boundary_line(1);
    let before = transcript_prefix(&home, second).unwrap();
    // An earlier automatic compaction's record, without instructions.
    let auto = home.hook(&payload(
        &before,
        json!({"hook_event_name": "PreCompact", "trigger": "auto", "custom_instructions": ""}),
    ));
    assert!(
        auto.status.success(),
        "{}",
        String::from_utf8_lossy(&auto.stderr)
    );
    let out = home.hook(&payload(
        &before,
        json!({"hook_event_name": "PreCompact", "trigger": "manual",
               "custom_instructions": "keep the branch naming fallback details"}),
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "PreCompact prints nothing");

    // The record is in the SOBA session of this transcript, a private file.
    let sessions = find_file(
        &home.path().join("soba-data"),
        "claude-code-44df7d08-6bc4-4532-bef8-167ea3797cee.jsonl",
    );
    let mode = std::fs::metadata(&sessions).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let log = std::fs::read_to_string(&sessions).unwrap();
    let record: Value = log
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["sourceId"] == "hook:claude-code:PreCompact")
        .expect("the PreCompact record");
    assert_eq!(record["type"], "foreign_compaction");
    assert_eq!(record["trigger"], "manual");
    assert_eq!(
        record["instructions"],
        "keep the branch naming fallback details"
    );

    // The second PreCompact kept the first record.
    assert_eq!(log.matches("hook:claude-code:PreCompact").count(), 2);

    // The capsule after the compaction is focused by the instructions of the PreCompact
    // just before it.
    let after = transcript_prefix(&home, second + 2).unwrap();
    let v = stdout_json(&home.hook(&payload(
        &after,
        json!({"hook_event_name": "SessionStart", "source": "compact"}),
    )));
    let context = v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert!(
        context.contains("keep the branch naming fallback details"),
        "{context}"
    );
}

fn find_file(dir: &Path, name: &str) -> PathBuf {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == name) {
                return p;
            }
        }
    }
    panic!("{name} not under {}", dir.display());
}

#[test]
fn other_session_starts_and_events_print_nothing_and_succeed() {
    let home = Home::new();
    let transcript = home.path().join("missing.jsonl");
    for event in [
        json!({"hook_event_name": "SessionStart", "source": "startup"}),
        json!({"hook_event_name": "SessionStart", "source": "resume"}),
        json!({"hook_event_name": "Stop", "stop_hook_active": false}),
    ] {
        let out = home.hook(&payload(&transcript, event.clone()));
        assert_eq!(out.status.code(), Some(0), "{event}");
        assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{event}");
    }
}

#[test]
fn bad_hook_input_exits_1_with_one_stderr_line_never_2() {
    let home = Home::new();
    for stdin in ["", "not json", r#"{"hook_event_name": "PreCompact"}"#] {
        let out = home.hook(stdin);
        assert_eq!(out.status.code(), Some(1), "{stdin:?}");
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.starts_with("soba hook: "), "{err}");
    }
}

#[test]
fn a_missing_transcript_exits_1_with_a_clear_line() {
    let home = Home::new();
    let transcript = home.path().join("gone.jsonl");
    for event in [
        json!({"hook_event_name": "SessionStart", "source": "compact"}),
        json!({"hook_event_name": "PreCompact", "trigger": "auto"}),
    ] {
        let out = home.hook(&payload(&transcript, event.clone()));
        assert_eq!(out.status.code(), Some(1), "{event}");
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with("soba hook: cannot read the transcript") && err.contains("gone.jsonl"),
            "{err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

fn settings(home: &Home) -> PathBuf {
    home.path().join(".claude/settings.json")
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn sobas_command(v: &Value, event: &str) -> Vec<String> {
    v["hooks"][event]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["hooks"].as_array().cloned().unwrap_or_default())
        .filter_map(|h| h["command"].as_str().map(str::to_string))
        .filter(|c| c.ends_with("hook claude-code"))
        .collect()
}

#[test]
fn install_into_a_fresh_home_writes_both_hooks() {
    let home = Home::new();
    let out = home.run(&["hook", "install", "claude-code"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = read_json(&settings(&home));
    let start = sobas_command(&v, "SessionStart");
    assert_eq!(start.len(), 1);
    assert!(start[0].starts_with(env!("CARGO_BIN_EXE_soba")));
    assert_eq!(v["hooks"]["SessionStart"][0]["matcher"], "compact");
    assert_eq!(sobas_command(&v, "PreCompact").len(), 1);
}

#[test]
fn install_keeps_the_users_settings_and_hooks_backs_up_and_twice_is_once() {
    let home = Home::new();
    std::fs::create_dir_all(home.path().join(".claude")).unwrap();
    let users = json!({
        "model": "opus",
        "hooks": {
            "PreCompact": [{"hooks": [{"type": "command", "command": "cp \"$T\" ~/backup"}]}],
            "PostToolUse": [{"matcher": "Edit", "hooks": [{"type": "command", "command": "cargo fmt"}]}]
        }
    });
    let original = serde_json::to_string_pretty(&users).unwrap();
    std::fs::write(settings(&home), &original).unwrap();
    std::fs::set_permissions(settings(&home), std::fs::Permissions::from_mode(0o644)).unwrap();

    assert!(home
        .run(&["hook", "install", "claude-code"])
        .status
        .success());
    let once = std::fs::read_to_string(settings(&home)).unwrap();
    let v: Value = serde_json::from_str(&once).unwrap();
    assert_eq!(v["model"], "opus");
    assert_eq!(v["hooks"]["PostToolUse"], users["hooks"]["PostToolUse"]);
    assert_eq!(v["hooks"]["PreCompact"][0], users["hooks"]["PreCompact"][0]);
    assert_eq!(sobas_command(&v, "PreCompact").len(), 1);
    let mode = std::fs::metadata(settings(&home))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o644, "the settings file keeps its mode");

    let backup = home.path().join(".claude/settings.json.soba-backup");
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), original);
    let mode = std::fs::metadata(&backup).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the backup is private");

    let twice = home.run(&["hook", "install", "claude-code"]);
    assert!(twice.status.success());
    assert!(String::from_utf8_lossy(&twice.stdout).contains("nothing changed"));
    assert_eq!(std::fs::read_to_string(settings(&home)).unwrap(), once);

    let removed = home.run(&["hook", "install", "claude-code", "--uninstall"]);
    assert!(removed.status.success());
    assert_eq!(
        read_json(&settings(&home)),
        users,
        "uninstall leaves the user's hooks"
    );
}

#[test]
fn malformed_settings_are_refused_and_left_untouched() {
    let home = Home::new();
    std::fs::create_dir_all(home.path().join(".claude")).unwrap();
    let broken = "{\n  \"model\": \"opus\",\n  \"hooks\": {\n";
    std::fs::write(settings(&home), broken).unwrap();
    let out = home.run(&["hook", "install", "claude-code"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not valid JSON") && err.contains("left as it is"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(settings(&home)).unwrap(), broken);
    assert!(!home
        .path()
        .join(".claude/settings.json.soba-backup")
        .exists());
}

#[test]
fn claude_config_dir_and_project_choose_the_settings_file() {
    let home = Home::new();
    let config_dir = home.path().join("cc-config");
    std::fs::create_dir_all(&config_dir).unwrap();
    let out = home
        .command(&["hook", "install", "claude-code"])
        .env("CLAUDE_CONFIG_DIR", &config_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        sobas_command(&read_json(&config_dir.join("settings.json")), "PreCompact").len(),
        1
    );
    assert!(!settings(&home).exists());

    let project = home.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let out = home
        .command(&["hook", "install", "claude-code", "--project"])
        .current_dir(&project)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = read_json(&project.join(".claude/settings.json"));
    assert_eq!(sobas_command(&v, "SessionStart").len(), 1);
}

/// A Claude Code 1.0.x transcript: the compaction is marked only by the summary record
/// (`isCompactSummary`, `parentUuid: null`), with no `compact_boundary` before it.
fn transcript_1_0_x(home: &Home) -> PathBuf {
    let base = |kind: &str, uuid: &str, parent: Option<&str>, message: Value| {
        json!({"type": kind, "uuid": uuid, "parentUuid": parent, "isSidechain": false,
               "sessionId": "s-1-0-x", "cwd": "/home/dev/lexer", "version": "1.0.44",
               "timestamp": "2025-07-01T10:00:00Z", "message": message})
    };
    let mut summary = base(
        "user",
        "s1",
        None,
        json!({"role": "user", "content": "This session is being continued from a previous conversation. Summary: the lexer work."}),
    );
    summary["isCompactSummary"] = json!(true);
    let records = [
        base(
            "user",
            "u1",
            None,
            json!({"role": "user", "content": "Make the lexer keep the last token"}),
        ),
        base(
            "assistant",
            "a1",
            Some("u1"),
            json!({"id": "m1", "role": "assistant", "model": "claude-sonnet-4-20250514", "content": [
                {"type": "tool_use", "id": "t1", "name": "Edit",
                 "input": {"file_path": "/home/dev/lexer/src/lexer_core.rs", "old_string": "a", "new_string": "b"}}]}),
        ),
        base(
            "user",
            "r1",
            Some("a1"),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "edited"}]}),
        ),
        base(
            "assistant",
            "a2",
            Some("r1"),
            json!({"id": "m2", "role": "assistant", "model": "claude-sonnet-4-20250514",
                   "content": [{"type": "text", "text": "The lexer keeps its last token now."}]}),
        ),
        summary,
    ];
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    let path = home.path().join("transcript-1.0.x.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn session_start_after_a_1_0_x_compaction_returns_the_capsule_of_the_conversation_before_it() {
    let home = Home::new();
    let transcript = transcript_1_0_x(&home);
    let out = home.hook(
        &json!({"session_id": "s-1-0-x", "transcript_path": transcript, "cwd": "/home/dev/lexer",
                "hook_event_name": "SessionStart", "source": "compact"})
        .to_string(),
    );
    let v = stdout_json(&out);
    let context = v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .expect("additionalContext");
    assert!(context.starts_with("# Context Capsule"), "{context}");
    assert!(context.contains("lexer_core.rs"), "{context}");
}

#[test]
fn a_relative_cwd_is_refused_with_one_documented_line() {
    let home = Home::new();
    let transcript = transcript_1_0_x(&home);
    for event in [
        json!({"hook_event_name": "SessionStart", "source": "compact"}),
        json!({"hook_event_name": "PreCompact", "trigger": "auto"}),
    ] {
        let mut p =
            json!({"session_id": "s-1-0-x", "transcript_path": transcript, "cwd": "dev/lexer"});
        for (k, v) in event.as_object().unwrap() {
            p[k] = v.clone();
        }
        let out = home.hook(&p.to_string());
        assert_eq!(out.status.code(), Some(1), "{event}");
        assert!(out.stdout.is_empty());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(
            err.starts_with(
                "soba hook: the hook input's `cwd` (\"dev/lexer\") is not an absolute path"
            ),
            "{err}"
        );
    }
    assert!(
        !home.path().join("soba-data").exists(),
        "nothing was written for a refused hook"
    );
}

#[test]
fn install_into_a_fresh_home_says_the_file_is_new_then_names_the_backup() {
    let home = Home::new();
    let out = home.run(&["hook", "install", "claude-code"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.trim_end().ends_with("(a new file)"), "{said}");
    assert!(!said.contains('—'), "{said}");
    let out = home.run(&["hook", "install", "claude-code", "--uninstall"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("removed from") && said.contains("settings.json.soba-backup"),
        "{said}"
    );
}
