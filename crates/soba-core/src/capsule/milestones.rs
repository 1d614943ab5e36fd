//! Work that leaves no trace in the files: commits, pushes, rebases, pull requests, closed
//! issues, tags and releases, read from the shell commands that did them. Only a command whose
//! result succeeded counts as done.

use std::sync::LazyLock;

use regex::Regex;

use super::work::clip;

/// Longest commit message kept.
const MAX_MESSAGE_CHARS: usize = 120;

static COMMIT_MESSAGE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?s)\s(?:-[a-zA-Z]*m|--message)(?:\s+|=)(?:"(?P<dq>(?:[^"\\]|\\.)*)"|'(?P<sq>[^']*)'|(?P<bare>[^\s"'$]+))"#)
        .expect("valid regex")
});

static HEREDOC_START: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"<<-?\s*['"]?(?P<tag>\w+)['"]?[^\n]*\n"#).expect("valid regex"));

/// The body of the first heredoc in `script`, up to the line that closes it.
fn heredoc_body(script: &str) -> Option<String> {
    let c = HEREDOC_START.captures(script)?;
    let tag = c.name("tag")?.as_str();
    let rest = &script[c.get(0)?.end()..];
    let body: Vec<&str> = rest.lines().take_while(|l| l.trim() != tag).collect();
    Some(body.join("\n"))
}

static ISSUE_OR_PR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^gh\s+(?P<what>issue|pr)\s+(?P<verb>close|merge|create|reopen|comment|edit)\b(?P<rest>.*)$")
        .expect("valid regex")
});

/// The commands of a script, one per `&&`, `;`, `||` or line, with `cd …` and env prefixes
/// left as they are (only the command's own words matter here).
fn commands(script: &str) -> Vec<&str> {
    script
        .split(['\n', ';'])
        .flat_map(|s| s.split("&&"))
        .flat_map(|s| s.split("||"))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

fn first_number(s: &str) -> Option<&str> {
    s.split_whitespace()
        .map(|w| w.trim_start_matches('#'))
        .find(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_digit()))
}

/// The value of the first of `flags` in `s`, whole: `--title "Add retries"` is "Add retries",
/// not its first word.
fn flag_value(s: &str, flags: &[&str]) -> Option<String> {
    FLAG_VALUE.captures_iter(s).find_map(|c| {
        if !flags.contains(&&c["flag"]) {
            return None;
        }
        let v = c.name("dq").or(c.name("sq")).or(c.name("bare"))?.as_str();
        Some(v.replace("\\\"", "\""))
    })
}

static FLAG_VALUE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?:^|\s)(?P<flag>--?[A-Za-z][\w-]*)(?:\s+|=)(?:"(?P<dq>(?:[^"\\]|\\.)*)"|'(?P<sq>[^']*)'|(?P<bare>[^\s"'-][^\s"']*))"#)
        .expect("valid regex")
});

/// What one successful shell script did that a capsule should report as done.
pub fn milestones(script: &str) -> Vec<String> {
    let mut out = Vec::new();
    for cmd in commands(script) {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        let Some(start) = words.iter().position(|w| *w == "git" || *w == "gh") else {
            continue;
        };
        let cmd_from = &cmd[cmd.find(words[start]).unwrap_or(0)..];
        let rest: Vec<&str> = words[start + 1..]
            .iter()
            .copied()
            .skip_while(|w| w.starts_with('-') || w.contains('='))
            .collect();
        if words[start] == "git" {
            match rest.first().copied() {
                Some("commit") => {
                    let msg = commit_message(script, cmd_from);
                    let amend = cmd_from.contains("--amend");
                    out.push(match (msg, amend) {
                        (Some(m), false) => format!("Committed: {m}"),
                        (Some(m), true) => format!("Amended the last commit: {m}"),
                        (None, true) => "Amended the last commit".to_string(),
                        (None, false) => "Committed the staged changes".to_string(),
                    });
                }
                Some("push") => {
                    let force = cmd_from.contains("--force") || rest.contains(&"-f");
                    let target: Vec<&str> = rest[1..]
                        .iter()
                        .copied()
                        .filter(|w| !w.starts_with('-'))
                        .collect();
                    let what = if target.is_empty() {
                        String::new()
                    } else {
                        format!(" {}", target.join(" "))
                    };
                    out.push(if force {
                        format!("Force-pushed{what}")
                    } else {
                        format!("Pushed{what}")
                    });
                }
                Some("rebase") => {
                    if cmd_from.contains("--abort") {
                        out.push("Aborted the rebase".to_string());
                    } else if cmd_from.contains("--continue") {
                        out.push("Continued the rebase".to_string());
                    } else if let Some(onto) = rest.get(1).filter(|w| !w.starts_with('-')) {
                        out.push(format!("Rebased onto {onto}"));
                    } else {
                        out.push("Rebased".to_string());
                    }
                }
                Some("merge") => {
                    if let Some(b) = rest.get(1).filter(|w| !w.starts_with('-')) {
                        out.push(format!("Merged {b}"));
                    }
                }
                Some("tag") => {
                    if let Some(t) = rest.get(1).filter(|w| !w.starts_with('-')) {
                        out.push(format!("Tagged {t}"));
                    }
                }
                Some("stash") if rest.get(1).is_none_or(|w| *w == "push") => {
                    out.push("Stashed the working-tree changes".to_string())
                }
                _ => {}
            }
        } else if let Some(c) = ISSUE_OR_PR.captures(cmd_from) {
            let what = if &c["what"] == "pr" {
                "pull request"
            } else {
                "issue"
            };
            let n = first_number(&c["rest"]).map(|n| format!(" #{n}"));
            let title = flag_value(&c["rest"], &["--title", "-t"]);
            let line = match (&c["verb"], n, title) {
                ("create", _, Some(t)) => format!("Opened {what}: {}", clip(&t, MAX_MESSAGE_CHARS)),
                ("create", _, None) => format!("Opened a {what}"),
                ("close", Some(n), _) => format!("Closed {what}{n}"),
                ("merge", Some(n), _) => format!("Merged {what}{n}"),
                ("merge", None, _) => format!("Merged the {what}"),
                ("reopen", Some(n), _) => format!("Reopened {what}{n}"),
                ("comment", Some(n), _) => format!("Commented on {what}{n}"),
                ("edit", Some(n), _) => format!("Edited {what}{n}"),
                _ => continue,
            };
            out.push(line);
        } else if cmd_from.starts_with("gh release create") {
            let tag = cmd_from
                .split_whitespace()
                .nth(3)
                .filter(|w| !w.starts_with('-'));
            out.push(match tag {
                Some(t) => format!("Released {t}"),
                None => "Created a release".to_string(),
            });
        }
    }
    out
}

/// A commit's message: `-m "…"`, or the first line of a heredoc fed to it.
fn commit_message(script: &str, cmd: &str) -> Option<String> {
    let from_flag = COMMIT_MESSAGE.captures(cmd).and_then(|c| {
        c.name("dq")
            .or(c.name("sq"))
            .or(c.name("bare"))
            .map(|m| m.as_str().to_string())
    });
    let msg = match from_flag {
        Some(m) if !m.starts_with("$(") => Some(m),
        _ => heredoc_body(script),
    }?;
    let first = msg.lines().map(str::trim).find(|l| !l.is_empty())?;
    Some(clip(first, MAX_MESSAGE_CHARS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_pushes_and_rebases_are_milestones() {
        assert_eq!(
            milestones(
                "git add -A && git commit -m \"Fix the flaky login test\" && git push origin main"
            ),
            ["Committed: Fix the flaky login test", "Pushed origin main"]
        );
        assert_eq!(
            milestones(
                "git commit -m \"$(cat <<'EOF'\nAdd multi-session checkpoints\n\nDetails\nEOF\n)\""
            ),
            ["Committed: Add multi-session checkpoints"]
        );
        assert_eq!(milestones("git rebase main"), ["Rebased onto main"]);
        assert_eq!(milestones("git commit -am 'Bump'"), ["Committed: Bump"]);
        assert_eq!(
            milestones("git push --force-with-lease origin feat"),
            ["Force-pushed origin feat"]
        );
    }

    #[test]
    fn issues_prs_and_releases_are_milestones() {
        assert_eq!(
            milestones("gh issue close 42 --comment done"),
            ["Closed issue #42"]
        );
        assert_eq!(
            milestones("gh pr create --title \"Add retries\" --body x"),
            ["Opened pull request: Add retries"]
        );
        assert_eq!(
            milestones(
                "gh pr create --fill --title \"docs: document composite AND/OR patterns\" --body \"## Summary\""
            ),
            ["Opened pull request: docs: document composite AND/OR patterns"]
        );
        assert_eq!(
            milestones("gh issue create -t 'Flaky test' -b x"),
            ["Opened issue: Flaky test"]
        );
        assert_eq!(
            milestones("gh release create v1.2.0 --notes x"),
            ["Released v1.2.0"]
        );
    }

    #[test]
    fn reading_commands_are_not_milestones() {
        for c in [
            "git status",
            "git log --oneline",
            "git diff",
            "gh pr view 3",
            "cargo test",
        ] {
            assert!(milestones(c).is_empty(), "{c}");
        }
    }
}
