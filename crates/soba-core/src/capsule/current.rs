//! What the agent was doing right before the cut: its last few actions, one line each, read
//! from the calls and what their results printed.
//!
//! A summary written from the conversation alone states the agent's last plan ("now I'm
//! running the example with --dry-run") as the next step, though the run happened and failed
//! after those words. The agent that continues must see the run and its failure, and must not
//! be sent to do again what the calls already did.

use serde_json::Value;

use super::artifacts::{patch_changes, result_outcome, PatchChange};
use super::shell::patch_paths;
use super::work::clip;
use crate::session::capsule::model::VerificationOutcome;
use crate::session::entry::{blocks_text, ToolResultEntry};

/// How the current work quotes the agent's last words when its actions came after them.
pub const LAST_WORDS: &str = "The agent's last words: ";
/// How it quotes them when the actions listed came before them.
pub const LAST_WORDS_AFTER: &str = "Its last words, after those: ";
/// Lines of the current work: the last words and the newest actions.
pub const CURRENT_WORK_LINES: usize = 6;
/// Characters of the agent's last words quoted in the current work.
const CURRENT_WORDS_CHARS: usize = 300;
/// Commands a folded run of looks shows by name.
const FOLDED_COMMANDS_SHOWN: usize = 3;
/// Characters of each command a folded run of looks shows.
const FOLDED_COMMAND_CHARS: usize = 50;

/// Characters of a command kept in its line.
const COMMAND_CHARS: usize = 160;
/// Characters of a failure line quoted.
const FAILURE_CHARS: usize = 200;

/// One call of the agent, described for the agent that continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// "ran `cargo test` — failed: \"…\"", "edited `src/a.rs`", "read `src/b.rs`".
    pub line: String,
    /// The command, for a shell call.
    pub command: Option<String>,
    /// What it printed that says it failed, for a command whose output shows a failure.
    pub failure: Option<String>,
    /// Whether the call changed files (an edit, a write, a patch).
    pub edits: bool,
    /// Whether the call only looked (a read, a search): its failure is no work to fix.
    pub looks: bool,
    /// Whether its result came: a call cut off before it may not have happened at all.
    pub finished: bool,
}

/// The shell script of a call, from the arguments shell tools use.
pub fn shell_script(input: &Value) -> Option<String> {
    let v = input
        .get("command")
        .or_else(|| input.get("cmd"))
        .or_else(|| input.get("script"))?;
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        _ => None,
    }
}

/// The script without the shell that wraps it (`bash -lc "…"`, Codex's form).
fn bare_script(script: &str) -> &str {
    let t = script.trim();
    for wrapper in ["bash -lc ", "bash -c ", "sh -c ", "zsh -lc ", "zsh -c "] {
        if let Some(rest) = t.strip_prefix(wrapper) {
            return rest.trim().trim_matches(['"', '\'']);
        }
    }
    t
}

/// A command part without the variables set in front of it (`TMPDIR=/tmp rg …`).
fn without_assignments(part: &str) -> &str {
    let mut rest = part.trim_start();
    while let Some((word, after)) = rest.split_once(char::is_whitespace) {
        let is_assignment = word.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if !is_assignment {
            break;
        }
        rest = after.trim_start();
    }
    rest
}

/// Commands that only look at files or state: what they print is content, not an outcome.
/// Every part of the script must look (`cd x && rg foo | head`); `npm test | tail` runs.
fn only_looks(script: &str) -> bool {
    command_parts(script)
        .into_iter()
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .all(|part| {
            let mut w = without_assignments(part).split_whitespace();
            match w.next().unwrap_or("") {
                "cat" | "sed" | "head" | "tail" | "ls" | "rg" | "grep" | "find" | "fd" | "nl"
                | "wc" | "tree" | "pwd" | "echo" | "awk" | "jq" | "cd" | "sort" | "uniq"
                | "true" | "printf" | "which" | "file" | "stat" => true,
                "git" => matches!(
                    w.next(),
                    Some("status" | "log" | "diff" | "show" | "branch" | "grep")
                ),
                _ => false,
            }
        })
}

/// The commands of a script, split at `|`, `;`, `&` and line ends outside quotes (a search
/// for `"a|b"` is one command).
fn command_parts(script: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut quote: Option<char> = None;
    let mut start = 0;
    for (i, c) in script.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '|' | ';' | '&' | '\n') => {
                parts.push(&script[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&script[start..]);
    parts
}

/// A script in one line: a multi-line one (a file written with a heredoc, then run) by its
/// first and last lines.
fn shown_command(script: &str) -> String {
    let lines: Vec<&str> = script
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let one = match lines.as_slice() {
        [] => String::new(),
        [only] => only.to_string(),
        [first, .., last] => format!("{first} … {last}"),
    };
    clip(
        &one.split_whitespace().collect::<Vec<_>>().join(" "),
        COMMAND_CHARS,
    )
}

/// Lines a harness wraps a command's output in (Codex's chunk header, the echoed command).
fn is_harness_line(l: &str) -> bool {
    [
        "Chunk ID:",
        "Wall time:",
        "Process exited with code",
        "Original token count:",
        "Output:",
        "$ ",
    ]
    .iter()
    .any(|p| l.starts_with(p))
}

/// What a failed command printed that says why: a line that names the fault (an unknown
/// argument, a missing file, a ✗ case, a denied call), after the general error line that
/// introduces it ("error: found 1 error … ^ Unknown arguments"); else the first error line,
/// else the first line. Output that names its faults in a tool's form (compiler errors at a
/// place, failed tests) is quoted by those, up to three.
fn failure_of(text: &str) -> String {
    let faults = fault_lines(text);
    if !faults.is_empty() {
        return faults.join("; ");
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.chars().any(char::is_alphanumeric) && !is_harness_line(l))
        .collect();
    let specific = |l: &&&str| {
        let lower = l.to_lowercase();
        [
            "unknown",
            "invalid",
            "not found",
            "no such",
            "denied",
            "cannot",
            "can't",
            "missing",
            "unexpected",
            "panicked",
            "assert",
            "expected",
            "✗",
            "✕",
            "✘",
            "❌",
            "traceback",
        ]
        .iter()
        .any(|m| lower.contains(m))
    };
    let general = |l: &&&str| {
        let lower = l.to_ascii_lowercase();
        lower.starts_with("error") || lower.contains("error:") || lower.starts_with("fail")
    };
    let at = |want: &dyn Fn(&&&str) -> bool| lines.iter().position(|l| want(&l));
    let line = match (lines.iter().find(general), lines.iter().find(specific)) {
        (Some(g), Some(s)) if at(&general) < at(&specific) => format!("{g} … {s}"),
        (_, Some(s)) => s.to_string(),
        (Some(g), None) => g.to_string(),
        (None, None) => lines.first().copied().unwrap_or("no output").to_string(),
    };
    clip(&line, FAILURE_CHARS)
}

/// Fault lines quoted from a failed run, at most.
pub const FAULT_LINES: usize = 3;
/// Characters of each fault line quoted.
const FAULT_LINE_CHARS: usize = 160;

/// A line that names a fault: a compiler or linter error at a place (`common.go:256:28:
/// undefined: paths.ShadowBranchPrefix`, `src/a.ts(3,5): error TS2304: …`), a Rust error code
/// (`error[E0425]: …`), a failed test (`--- FAIL: TestX`, `FAILED tests/x.py::test_y`).
static FAULT_LINE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(
        r"^(?:\./)?[\w@.~/-]*\w\.[A-Za-z]{1,6}(?::\d+){1,2}:\s*[^\s#:]|^(?:\./)?[\w@.~/-]*\w\.[A-Za-z]{1,6}\(\d+,\d+\):\s*error\b|^error\[E\d{4}\]|\berror TS\d{4}\b|^--- FAIL: \S|^FAILED \S+::\S",
    )
    .expect("valid regex")
});

/// The place a fault line opens with (`a.go:12:3: `, `a.ts(3,5): `), so the same fault
/// reported at several places counts once.
static FAULT_PLACE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"^\S*?(?::\d+){1,2}:\s*|^\S*?\(\d+,\d+\):\s*").expect("valid regex")
});

/// What a message at a place says when it names a fault: an error's words, or a linter's
/// rule in brackets at its end (`… (errcheck)`).
static FAULT_WORDS: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"(?i)\b(?:error|undefined|undeclared|expected|cannot|can't|not found|no such|invalid|missing|unused|mismatch|panic|panicked|failed|failure|fatal|unexpected|not assignable|does not|doesn't|has no|got)\b|\([a-z][\w-]*\)$")
        .expect("valid regex")
});

/// A compiler's note or warning beside an error: no fault of its own.
static NOT_A_FAULT: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"(?i)^(?:note|warning|info|hint):").expect("valid regex")
});

/// The lines of a failed run's output that name what broke it, in the order printed: up to
/// [`FAULT_LINES`] distinct ones (a fault reported again at another place counts once), each
/// at most 160 characters. Empty when the output names no fault in a form a tool prints it.
pub fn fault_lines(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut faults_seen: Vec<String> = Vec::new();
    for line in text.lines().map(str::trim) {
        if !FAULT_LINE.is_match(line) {
            continue;
        }
        let fault = FAULT_PLACE.replace(line, "").to_string();
        // A line at a place says what broke only in a fault's words: a test's log line
        // (`hooks.go:155: Hook stop output: …`) and a compiler's note do not.
        let placed = fault.len() < line.len();
        if placed && (!FAULT_WORDS.is_match(&fault) || NOT_A_FAULT.is_match(&fault)) {
            continue;
        }
        if faults_seen.contains(&fault) {
            continue;
        }
        faults_seen.push(fault);
        out.push(clip(line, FAULT_LINE_CHARS));
        if out.len() == FAULT_LINES {
            break;
        }
    }
    out
}

/// The path a file tool names in its arguments.
fn path_of(input: &Value) -> Option<&str> {
    ["file_path", "path", "filePath", "notebook_path", "filename"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str))
}

/// A patch's text, from `apply_patch`'s arguments.
fn patch_of(input: &Value) -> Option<&str> {
    ["patch", "input"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str))
        .or_else(|| input.as_str())
        .filter(|p| p.contains("*** Begin Patch") || p.contains("+++ "))
}

fn ticked(paths: &[String]) -> String {
    paths
        .iter()
        .map(|p| format!("`{p}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Describe one call and what its result says. `result` is `None` when no result came (the
/// call was cut off, or is still running).
pub fn describe_call(name: &str, input: &Value, result: Option<&ToolResultEntry>) -> Action {
    let lower = name.to_ascii_lowercase();
    let shown = |p: &str| p.to_string();
    if let Some(patch) = patch_of(input) {
        let deleted: Vec<String> = patch_changes(patch)
            .into_iter()
            .filter_map(|c| match c {
                PatchChange::Deleted(p) => Some(p),
                PatchChange::Moved(..) => None,
            })
            .collect();
        let edited: Vec<String> = patch_paths(patch)
            .into_iter()
            .filter(|p| !deleted.contains(p))
            .collect();
        let mut parts = Vec::new();
        if !edited.is_empty() {
            parts.push(format!("edited {}", ticked(&edited)));
        }
        if !deleted.is_empty() {
            parts.push(format!("deleted {}", ticked(&deleted)));
        }
        let failed = result.is_some_and(|r| r.is_error);
        let mut line = if parts.is_empty() {
            "applied a patch".to_string()
        } else {
            parts.join("; ")
        };
        if failed {
            line = format!("tried to patch ({line}) — the patch failed");
        }
        return Action {
            line,
            command: None,
            failure: None,
            edits: !failed,
            looks: false,
            finished: result.is_some(),
        };
    }
    if let Some(script) = shell_script(input) {
        let bare = bare_script(&script).to_string();
        let cmd = shown_command(&bare);
        let (outcome, failure) = match result {
            None => ("no result yet (cut off or still running)".to_string(), None),
            Some(r) => {
                let text = blocks_text(&r.content);
                let declined = text.contains("doesn't want to proceed with this tool use");
                if declined {
                    ("declined by the user".to_string(), None)
                } else if only_looks(&bare) {
                    let failed = r.is_error && !looker_found_nothing(r, &text);
                    if failed {
                        let f = failure_of(&text);
                        (format!("failed: \"{f}\""), Some(f))
                    } else {
                        (String::new(), None)
                    }
                } else {
                    match result_outcome(r) {
                        VerificationOutcome::Failed => {
                            let f = failure_of(&text);
                            (format!("failed: \"{f}\""), Some(f))
                        }
                        VerificationOutcome::Passed => ("succeeded".to_string(), None),
                        VerificationOutcome::Unknown => (
                            "no outcome yet (interrupted or still running)".to_string(),
                            None,
                        ),
                    }
                }
            }
        };
        let line = if outcome.is_empty() {
            format!("looked with `{cmd}`")
        } else {
            format!("ran `{cmd}` — {outcome}")
        };
        return Action {
            line,
            looks: only_looks(&bare),
            command: Some(bare),
            failure,
            edits: false,
            finished: result.is_some(),
        };
    }
    let path = path_of(input).map(shown);
    let (verb, edits) = if lower.contains("write") || lower.contains("create") {
        ("wrote", true)
    } else if lower.contains("edit") || lower.contains("replace") {
        ("edited", true)
    } else if lower.contains("delete") || lower.contains("remove") {
        ("deleted", true)
    } else if lower.contains("read") || lower == "view" || lower.contains("open") {
        ("read", false)
    } else {
        ("", false)
    };
    let failed = result.is_some_and(|r| r.is_error);
    let pattern = ["pattern", "query", "regex"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str));
    let (verb, path) = match (verb, path, pattern) {
        ("", p, Some(q)) => (
            "searched",
            Some(match p {
                Some(p) => format!("{q}` in `{p}"),
                None => q.to_string(),
            }),
        ),
        other => (other.0, other.1),
    };
    let line = match (verb, path) {
        ("searched", Some(q)) => format!("searched for `{q}`"),
        ("", Some(p)) => format!("called {name} on `{p}`"),
        ("", None) => format!("called {name}"),
        (v, Some(p)) => format!("{v} `{p}`"),
        (v, None) => format!("{v} (via {name})"),
    };
    let (line, failure) = match result {
        Some(r) if failed => {
            let f = failure_of(&blocks_text(&r.content));
            (format!("{line} — failed: \"{f}\""), Some(f))
        }
        None => (format!("{line} — no result yet"), None),
        _ => (line, None),
    };
    Action {
        line,
        command: None,
        failure,
        edits: edits && !failed,
        looks: matches!(verb, "read" | "searched"),
        finished: result.is_some(),
    }
}

/// The folder a script opens with (`cd DIR && …`), and the rest of it.
fn leading_cd(script: &str) -> Option<(&str, &str)> {
    let rest = script.trim_start().strip_prefix("cd ")?;
    let (dir, after) = rest.split_once("&&")?;
    let dir = dir.trim().trim_matches(['"', '\'']);
    (!dir.is_empty() && !dir.contains(char::is_whitespace)).then_some((dir, after.trim_start()))
}

/// The folder most of `scripts` open with `cd DIR && `, when at least two do: the workspace
/// the agent works in, which says nothing on each line. A `cd` elsewhere is kept.
pub fn usual_cd<'a>(scripts: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for s in scripts {
        if let Some((dir, _)) = leading_cd(bare_script(s)) {
            match counts.iter_mut().find(|(d, _)| *d == dir) {
                Some((_, n)) => *n += 1,
                None => counts.push((dir, 1)),
            }
        }
    }
    let (dir, n) = counts.into_iter().max_by_key(|(_, n)| *n)?;
    (n >= 2).then(|| dir.to_string())
}

/// An action's line without the `cd <workspace> && ` its command opens with.
pub fn without_workspace_cd(line: &str, workspace: Option<&str>) -> String {
    match workspace {
        Some(dir) => line.replacen(&format!("`cd {dir} && "), "`", 1),
        None => line.to_string(),
    }
}

/// A shell command that only looked and did not fail: one of a run folded into one line.
fn folds(a: &Action) -> bool {
    a.looks && a.command.is_some() && a.failure.is_none() && a.finished
}

/// The actions as lines, newest `max` kept: a run of look-only commands folded into one
/// ("looked 6 times (`rg …`, `find …`)"), a line repeated counted (×N).
fn action_lines(actions: &[Action], workspace: Option<&str>, max: usize) -> Vec<String> {
    let mut lines: Vec<(String, usize)> = Vec::new();
    let mut i = 0;
    while i < actions.len() {
        let run = actions[i..].iter().take_while(|a| folds(a)).count();
        let line = if run > 1 {
            let mut shown: Vec<String> = Vec::new();
            for a in &actions[i..i + run] {
                let script = a.command.as_deref().unwrap_or_default();
                let script = match (workspace, leading_cd(script)) {
                    (Some(w), Some((dir, rest))) if dir == w => rest,
                    _ => script,
                };
                let cmd = clip(&shown_command(script), FOLDED_COMMAND_CHARS);
                if !shown.contains(&cmd) {
                    shown.push(cmd);
                }
            }
            let more = if shown.len() > FOLDED_COMMANDS_SHOWN {
                ", …"
            } else {
                ""
            };
            shown.truncate(FOLDED_COMMANDS_SHOWN);
            let listed = shown
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", ");
            i += run;
            format!("looked {run} times ({listed}{more})")
        } else {
            let l = without_workspace_cd(&actions[i].line, workspace);
            i += 1;
            l
        };
        match lines.last_mut() {
            Some((l, n)) if *l == line => *n += 1,
            _ => lines.push((line, 1)),
        }
    }
    let skip = lines.len().saturating_sub(max);
    lines[skip..]
        .iter()
        .map(|(l, n)| {
            if *n > 1 {
                format!("{l} (×{n})")
            } else {
                l.clone()
            }
        })
        .collect()
}

/// What the agent was doing right before the cut, in at most [`CURRENT_WORK_LINES`] lines:
/// its last words quoted once, then one line per action after them; when it did nothing
/// after them, the turn's actions before them, then the words.
pub fn current_work(
    last_words: Option<&str>,
    after_words: &[Action],
    turn_actions: &[Action],
    workspace: Option<&str>,
) -> Vec<String> {
    let words = last_words
        .map(|w| w.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|w| !w.is_empty())
        .map(|w| clip_start(&w, CURRENT_WORDS_CHARS));
    let room = CURRENT_WORK_LINES - usize::from(words.is_some());
    let mut out = Vec::new();
    if !after_words.is_empty() {
        if let Some(w) = &words {
            out.push(format!("{LAST_WORDS}\"{w}\""));
        }
        out.extend(action_lines(after_words, workspace, room));
    } else if !turn_actions.is_empty() {
        out.extend(action_lines(turn_actions, workspace, room));
        if let Some(w) = &words {
            out.push(format!("{LAST_WORDS_AFTER}\"{w}\""));
        }
    }
    out
}

/// The end of `s`, at most `n` characters, after a marker.
fn clip_start(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        return s.to_string();
    }
    let tail: String = s.chars().skip(count - n).collect();
    format!("…{}", tail.trim_start())
}

/// A search's exit status 1: nothing matched, which is no failure.
/// A search the sandbox or the shell refused ("sandbox denied exec error, exit code: 1", "No
/// such file or directory") did fail, whatever its exit status: it never looked.
fn looker_found_nothing(r: &ToolResultEntry, text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    let refused = [
        "denied",
        "sandbox",
        "no such file",
        "not found",
        "permission",
        "error",
    ]
    .iter()
    .any(|m| lower.contains(m));
    !refused
        && (r.exit_code == Some(1) || text.contains("exited with code 1") || text.trim().is_empty())
}

/// The last failure among `actions` that nothing after it superseded: no later run of the
/// same command succeeded. A file edited since does not supersede it: the run was not
/// repeated to show the edit fixed it.
pub fn standing_failure(actions: &[Action]) -> Option<&Action> {
    let (i, failed) = actions
        .iter()
        .enumerate()
        .rev()
        .find(|(_, a)| a.failure.is_some() && a.command.is_some() && !a.looks)?;
    let cmd = failed.command.as_deref()?;
    let head = command_head(cmd);
    let rerun_passed = actions[i + 1..].iter().any(|a| {
        a.command
            .as_deref()
            .is_some_and(|c| command_head(c) == head)
            && a.failure.is_none()
    });
    (!rerun_passed).then_some(failed)
}

/// A command's program and first argument, past any `cd` and variables set in front: what
/// makes a run a re-run of another (`cargo build` and `cd /ws && cargo build | tail`).
fn command_head(cmd: &str) -> String {
    let part = command_parts(cmd)
        .into_iter()
        .map(|p| without_assignments(p.trim()))
        .find(|p| !p.is_empty() && !p.starts_with("cd ") && *p != "cd")
        .unwrap_or("");
    part.split_whitespace()
        .filter(|w| !w.starts_with('-') && !w.contains('>'))
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::entry::ContentBlock;
    use serde_json::json;

    fn result(text: &str, is_error: bool, exit_code: Option<i64>) -> ToolResultEntry {
        ToolResultEntry {
            call_id: "c".into(),
            tool_name: None,
            content: vec![ContentBlock::text(text)],
            is_error,
            exit_code,
        }
    }

    #[test]
    fn a_failed_run_is_described_with_the_line_that_says_why() {
        let r = result(
            "Usage: agentv eval [options]\nerror: unknown option '--dry-run'\n",
            true,
            Some(1),
        );
        let a = describe_call(
            "exec_command",
            &json!({"cmd": ["bash", "-lc", "bun agentv eval examples/strict-or.yaml --dry-run"]}),
            Some(&r),
        );
        assert_eq!(
            a.line,
            "ran `bun agentv eval examples/strict-or.yaml --dry-run` — failed: \"error: unknown option '--dry-run'\""
        );
        assert_eq!(
            a.failure.as_deref(),
            Some("error: unknown option '--dry-run'")
        );
    }

    #[test]
    fn a_failed_run_quotes_up_to_three_distinct_faults_not_its_logs_or_notes() {
        let go_test = "=== RUN   TestBoth\n    hooks.go:155: Hook stop output: INFO stop component=hooks\n    both_test.go:344: Expected session_count=2, got 1\n    both_test.go:350: Expected session_count=2, got 1\n--- FAIL: TestBoth (0.61s)\nFAIL\nok  \tother\t0.1s";
        assert_eq!(
            fault_lines(go_test),
            [
                "both_test.go:344: Expected session_count=2, got 1",
                "--- FAIL: TestBoth (0.61s)"
            ]
        );
        let gcc = "a.c:318:11: error: too few arguments to function 'f'\na.c:6146:15: note: in expansion of macro 'F'\nb.c:2:1: error: unknown type 'x'";
        assert_eq!(
            fault_lines(gcc),
            [
                "a.c:318:11: error: too few arguments to function 'f'",
                "b.c:2:1: error: unknown type 'x'"
            ]
        );
        let rust = format!(
            "error[E0425]: cannot find value `y{}` in this scope\n --> src/a.rs:3:5\nerror: aborting due to 1 previous error",
            "y".repeat(200)
        );
        let faults = fault_lines(&rust);
        assert_eq!(faults.len(), 1);
        assert!(faults[0].starts_with("error[E0425]: cannot find value"));
        assert_eq!(
            faults[0].chars().count(),
            161,
            "160 characters and a marker"
        );
        let py = "FAILED tests/x.py::test_y - AssertionError\nFAILED tests/x.py::test_z - KeyError\nFAILED tests/x.py::test_w - KeyError\nFAILED tests/x.py::test_v - KeyError";
        assert_eq!(fault_lines(py).len(), 3);
        let ts = "src/a.ts(5,15): error TS2305: Module 'x' has no exported member 'Y'.";
        assert_eq!(fault_lines(ts), [ts]);
        assert!(fault_lines("[lint] ERROR task failed\nFAIL").is_empty());
        let r = result(&format!("{go_test}\n"), true, Some(1));
        let a = describe_call("Bash", &json!({"command": "go test ./..."}), Some(&r));
        assert_eq!(
            a.failure.as_deref(),
            Some("both_test.go:344: Expected session_count=2, got 1; --- FAIL: TestBoth (0.61s)")
        );
    }

    #[test]
    fn a_run_whose_output_shows_a_failure_fails_though_it_exited_zero() {
        let r = result(
            "FAIL src/a.test.ts\nTests: 1 failed, 3 passed",
            false,
            Some(0),
        );
        let a = describe_call("Bash", &json!({"command": "npm test | tail -5"}), Some(&r));
        assert!(
            a.line.contains("— failed: \"FAIL src/a.test.ts\""),
            "{}",
            a.line
        );
    }

    #[test]
    fn file_tools_say_what_they_did_to_which_file() {
        let ok = result("ok", false, None);
        let edit = describe_call("Edit", &json!({"file_path": "/ws/src/a.rs"}), Some(&ok));
        assert_eq!(edit.line, "edited `/ws/src/a.rs`");
        assert!(edit.edits);
        let read = describe_call("read", &json!({"path": "src/b.ts"}), Some(&ok));
        assert_eq!(read.line, "read `src/b.ts`");
        assert!(!read.edits);
        let patch = "*** Begin Patch\n*** Update File: src/c.rs\n@@\n-a\n+b\n*** Delete File: src/old.rs\n*** End Patch";
        let p = describe_call("apply_patch", &json!({"input": patch}), Some(&ok));
        assert_eq!(p.line, "edited `src/c.rs`; deleted `src/old.rs`");
        let cut = describe_call("Bash", &json!({"command": "cargo test"}), None);
        assert_eq!(
            cut.line,
            "ran `cargo test` — no result yet (cut off or still running)"
        );
    }

    fn ran(command: &str, failure: Option<&str>) -> Action {
        let r = match failure {
            Some(f) => result(f, true, Some(2)),
            None => result("ok", false, Some(0)),
        };
        describe_call("Bash", &json!({ "command": command }), Some(&r))
    }

    #[test]
    fn current_work_quotes_the_last_words_once_then_one_plain_line_per_action() {
        let after = [
            ran("cd /ws && cargo test -p core", Some("error: test failed")),
            ran("cd /ws && cargo build", None),
        ];
        let lines = current_work(Some("Now running the tests."), &after, &after, Some("/ws"));
        assert_eq!(
            lines,
            [
                "The agent's last words: \"Now running the tests.\"",
                "ran `cargo test -p core` — failed: \"error: test failed\"",
                "ran `cargo build` — succeeded",
            ]
        );
    }

    #[test]
    fn a_cd_into_the_workspace_is_dropped_and_a_cd_elsewhere_kept() {
        let scripts = [
            "cd /ws && cargo build",
            "cd /ws && cargo test",
            "cd /ws/sub && make",
        ];
        assert_eq!(usual_cd(scripts).as_deref(), Some("/ws"));
        assert_eq!(
            usual_cd(["cd /ws && make"]),
            None,
            "one cd names no workspace"
        );
        let after = [ran("cd /ws/sub && make", None), ran("cd /ws && make", None)];
        let lines = current_work(None, &after, &after, Some("/ws"));
        assert_eq!(
            lines,
            [
                "ran `cd /ws/sub && make` — succeeded",
                "ran `make` — succeeded"
            ]
        );
    }

    #[test]
    fn a_run_of_looks_is_folded_into_one_line_unless_one_failed() {
        let after = [
            ran("cd /ws && rg -n cache src", None),
            ran("find . -name '*.rs'", None),
            ran("sed -n 1,80p src/a.rs", None),
            ran("git status", None),
            ran("cargo test", None),
        ];
        let lines = current_work(None, &after, &after, Some("/ws"));
        assert_eq!(
            lines,
            [
                "looked 4 times (`rg -n cache src`, `find . -name '*.rs'`, `sed -n 1,80p src/a.rs`, …)",
                "ran `cargo test` — succeeded",
            ]
        );
        let failed_look = [
            ran("rg -n cache src", None),
            ran(
                "cat missing.txt",
                Some("cat: missing.txt: No such file or directory"),
            ),
        ];
        let lines = current_work(None, &failed_look, &failed_look, None);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[1].contains("No such file"), "{lines:?}");
    }

    #[test]
    fn current_work_keeps_at_most_six_lines_the_newest() {
        let after: Vec<Action> = (0..9)
            .map(|i| ran(&format!("make step{i}"), None))
            .collect();
        let lines = current_work(Some("Building."), &after, &after, None);
        assert_eq!(lines.len(), CURRENT_WORK_LINES);
        assert_eq!(lines.last().unwrap(), "ran `make step8` — succeeded");
        assert!(lines[0].starts_with(LAST_WORDS));
    }

    #[test]
    fn a_search_that_found_nothing_is_no_failure() {
        let r = result("", true, Some(1));
        let a = describe_call(
            "Bash",
            &json!({"command": "rg -n invalidate src"}),
            Some(&r),
        );
        assert_eq!(a.line, "looked with `rg -n invalidate src`");
        assert!(a.failure.is_none());
    }

    #[test]
    fn a_search_the_sandbox_refused_failed_though_it_exited_one() {
        let r = result("sandbox denied exec error, exit code: 1", true, Some(1));
        let a = describe_call(
            "exec_command",
            &json!({"cmd": "rg \"Chart|Graph\" src/app"}),
            Some(&r),
        );
        assert_eq!(
            a.line,
            "ran `rg \"Chart|Graph\" src/app` — failed: \"sandbox denied exec error, exit code: 1\""
        );
        assert!(!folds(&a), "a refused search is no look to fold away");
    }

    #[test]
    fn a_failure_stands_until_a_rerun_of_the_same_command_succeeds() {
        let failed = |c: &str| Action {
            line: String::new(),
            command: Some(c.into()),
            failure: Some("boom".into()),
            edits: false,
            looks: false,
            finished: true,
        };
        let passed = |c: &str| Action {
            failure: None,
            ..failed(c)
        };
        let edit = Action {
            line: "edited `a`".into(),
            command: None,
            failure: None,
            edits: true,
            looks: false,
            finished: true,
        };
        let run = [failed("cargo test -p core"), edit.clone()];
        assert!(
            standing_failure(&run).is_some(),
            "an edit since is no re-run"
        );
        let rerun = [
            failed("cargo test -p core"),
            edit,
            passed("cargo test -p core"),
        ];
        assert!(standing_failure(&rerun).is_none());
        let other = [failed("cargo test -p core"), passed("git status")];
        assert!(standing_failure(&other).is_some());
    }
}
