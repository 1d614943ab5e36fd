//! Turning a model's text into a validated [`CapsuleState`].
//!
//! Models wrap JSON in prose or Markdown fences more often than not, so extraction is lenient:
//! the first balanced JSON object in the text is taken. Validation is strict: the object must
//! match the state part of the capsule schema (unknown keys rejected) and carry a goal.
//! Then it is checked against the log ([`vet_paths`]): a file path the summarized history, the
//! facts and the previous capsule never mention is the model's invention, and the item naming it
//! is dropped (the goal, which cannot be dropped, is flagged).

use serde_json::Value;

use crate::capsule::{CapsuleState, Decision};
use crate::session::entry::ContentBlock;

/// The first balanced `{…}` in `text`, skipping braces inside JSON strings.
pub fn extract_json_object(text: &str) -> Option<&str> {
    let start = text.find('{')?;
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (offset, c) in text[start..].char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[start..start + offset + 1]);
                }
            }
            _ => {}
        }
    }
    None
}

/// Parse and validate a model's reply. The error says what was wrong, for the degraded reason.
pub fn parse_capsule_state(text: &str) -> Result<CapsuleState, String> {
    let json = extract_json_object(text).ok_or_else(|| {
        if text.trim().is_empty() {
            "the model returned no text".to_string()
        } else {
            "the model's reply holds no complete JSON object".to_string()
        }
    })?;
    let mut value: Value =
        serde_json::from_str(json).map_err(|e| format!("the model's JSON does not parse: {e}"))?;
    // Artifacts are facts merged from the log afterwards; a model that echoes them back is
    // ignored on that point rather than failed.
    if let Some(obj) = value.as_object_mut() {
        obj.remove("artifacts");
    }
    let state: CapsuleState = serde_json::from_value(value)
        .map_err(|e| format!("the model's JSON is not a capsule state: {e}"))?;
    validate_state(&state)?;
    Ok(state)
}

/// Reject states that would make a useless or misleading capsule.
pub fn validate_state(state: &CapsuleState) -> Result<(), String> {
    if state.goal.trim().is_empty() {
        return Err("the model's capsule has an empty goal".into());
    }
    let lists: [(&str, &Vec<String>); 7] = [
        ("requests", &state.requests),
        ("constraints", &state.constraints),
        ("completed", &state.completed),
        ("active", &state.active),
        ("pending", &state.pending),
        ("blockers", &state.blockers),
        ("nextSteps", &state.next_steps),
    ];
    for (name, items) in lists {
        if items.iter().any(|s| s.trim().is_empty()) {
            return Err(format!("the model's capsule has an empty item in `{name}`"));
        }
    }
    if state.decisions.iter().any(|d| d.decision.trim().is_empty()) {
        return Err("the model's capsule has a decision with no text".into());
    }
    Ok(())
}

/// Extensions a word must end with to be taken for a file name when it has no `/`.
const FILE_EXTENSIONS: &[&str] = &[
    "rs",
    "ts",
    "tsx",
    "js",
    "jsx",
    "mjs",
    "cjs",
    "py",
    "pyi",
    "go",
    "java",
    "kt",
    "kts",
    "c",
    "h",
    "cc",
    "cpp",
    "hpp",
    "cs",
    "rb",
    "php",
    "swift",
    "scala",
    "sh",
    "bash",
    "zsh",
    "fish",
    "ps1",
    "md",
    "mdx",
    "txt",
    "rst",
    "adoc",
    "json",
    "jsonl",
    "json5",
    "toml",
    "yaml",
    "yml",
    "xml",
    "html",
    "htm",
    "css",
    "scss",
    "sass",
    "less",
    "sql",
    "proto",
    "graphql",
    "gql",
    "lock",
    "cfg",
    "ini",
    "conf",
    "env",
    "ipynb",
    "csv",
    "tsv",
    "svg",
    "png",
    "jpg",
    "jpeg",
    "gif",
    "pdf",
    "wasm",
    "vue",
    "svelte",
    "lua",
    "dart",
    "ex",
    "exs",
    "erl",
    "hs",
    "ml",
    "nix",
    "tf",
    "zig",
    "gradle",
    "mk",
    "cmake",
    "dockerfile",
    "tex",
    "r",
    "jl",
    "pl",
    "patch",
    "diff",
    "log",
];

/// Everything the model was shown, to check the names in its reply against.
#[derive(Debug, Clone, Default)]
pub struct Grounding {
    /// The history's text (whole, not elided), the previous capsule, the instructions and the
    /// facts, one string.
    text: String,
    /// File paths of the facts.
    paths: Vec<String>,
}

impl Grounding {
    /// What `req` showed the model.
    pub fn of(req: &super::SummaryRequest) -> Grounding {
        let mut text = String::new();
        for m in &req.history {
            for block in &m.content {
                match block {
                    ContentBlock::Text { text: t, .. } => text.push_str(t),
                    ContentBlock::Thinking { thinking, .. } => text.push_str(thinking),
                    ContentBlock::ToolCall { name, input, .. } => {
                        text.push_str(name);
                        text.push(' ');
                        text.push_str(&input.to_string());
                        // Arguments as they were written, without JSON escapes.
                        collect_strings(input, &mut text);
                    }
                    ContentBlock::Image { .. } | ContentBlock::Opaque(_) => {}
                }
                text.push('\n');
            }
        }
        if let Some(previous) = &req.previous {
            text.push_str(&serde_json::to_string(&previous.state).unwrap_or_default());
            text.push_str(&serde_json::to_string(&previous.artifacts).unwrap_or_default());
        }
        if let Some(i) = &req.instructions {
            text.push_str(i);
        }
        let a = &req.artifacts;
        let paths: Vec<String> = a
            .read_files
            .iter()
            .chain(&a.modified_files)
            .map(|f| f.path.clone())
            .collect();
        for p in &paths {
            text.push('\n');
            text.push_str(p);
        }
        for v in &a.verification {
            text.push('\n');
            text.push_str(&v.command);
        }
        Grounding { text, paths }
    }

    /// Whether `path` is something the log mentions: named in its text, or a file of the
    /// facts named with more or fewer leading folders.
    pub fn knows(&self, path: &str) -> bool {
        let path = path.strip_prefix("./").unwrap_or(path);
        if path.is_empty() || memchr::memmem::find(self.text.as_bytes(), path.as_bytes()).is_some()
        {
            return true;
        }
        self.paths.iter().any(|known| {
            let known = known.strip_prefix("./").unwrap_or(known);
            ends_with_segments(path, known) || ends_with_segments(known, path)
        })
    }
}

/// `long` is `short` with more leading folders (`/home/u/p/src/a.rs` and `src/a.rs`).
fn ends_with_segments(long: &str, short: &str) -> bool {
    long.len() > short.len()
        && long.ends_with(short)
        && long.as_bytes()[long.len() - short.len() - 1] == b'/'
}

fn collect_strings(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push(' ');
            out.push_str(s);
        }
        Value::Array(items) => items.iter().for_each(|i| collect_strings(i, out)),
        Value::Object(map) => map.values().for_each(|i| collect_strings(i, out)),
        _ => {}
    }
}

/// The words of `text` that look like file paths: `src/a.rs`, `./run.sh`, `docs/x/`, `a.rs:12`
/// (the line is left out), never a URL.
pub fn path_mentions(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for word in text.split_whitespace() {
        let enclosing = |c: char| {
            matches!(
                c,
                '`' | '\''
                    | '"'
                    | '('
                    | ')'
                    | '['
                    | ']'
                    | '{'
                    | '}'
                    | '<'
                    | '>'
                    | ','
                    | ';'
                    | '!'
                    | '?'
                    | '*'
            )
        };
        // Quotes and brackets around it, then a sentence stop or a colon after it.
        let word = word
            .trim_start_matches(enclosing)
            .trim_end_matches(|c: char| enclosing(c) || c == '.' || c == ':');
        if word.contains("://") {
            continue;
        }
        // A `:line[:col]` suffix.
        let word = match word.split_once(':') {
            Some((path, rest))
                if rest
                    .split(':')
                    .all(|n| n.chars().all(|c| c.is_ascii_digit())) =>
            {
                path
            }
            Some(_) => continue,
            None => word,
        };
        if looks_like_path(word) {
            out.push(word);
        }
    }
    out
}

fn looks_like_path(word: &str) -> bool {
    if word.len() < 3
        || !word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '~' | '+'))
    {
        return false;
    }
    let name = word.rsplit('/').next().unwrap_or(word);
    let has_extension = name
        .rsplit_once('.')
        .filter(|(stem, _)| !stem.is_empty() && stem.chars().any(|c| c.is_ascii_alphabetic()))
        .is_some_and(|(stem, ext)| {
            let ext = ext.to_ascii_lowercase();
            FILE_EXTENSIONS.contains(&ext.as_str())
                // `Node.js`, `Vue.js`: names of things, not files.
                && !(ext == "js" && !word.contains('/') && stem.starts_with(|c: char| c.is_ascii_uppercase()))
        });
    if !word.contains('/') {
        return has_extension;
    }
    let segments: Vec<&str> = word.split('/').filter(|s| !s.is_empty()).collect();
    if segments.is_empty() || segments.contains(&"...") {
        return false;
    }
    let rooted = ["/", "./", "../", "~/"].iter().any(|p| word.starts_with(p));
    // `and/or`, `read/write`: a single slash between words is prose unless a file name ends it.
    has_extension || rooted || segments.len() >= 3
}

/// Drop what names a file the log never mentions (see [`Grounding`]): list items and
/// decisions go, and the goal, which a capsule must have, gets the unknown paths named after
/// it. Returns a line for each item dropped or flagged.
pub fn vet_paths(state: &mut CapsuleState, grounding: &Grounding) -> Vec<String> {
    let unknown = |text: &str| -> Vec<String> {
        let mut found: Vec<String> = path_mentions(text)
            .into_iter()
            .filter(|p| !grounding.knows(p))
            .map(str::to_string)
            .collect();
        found.dedup();
        found
    };
    let mut report = Vec::new();
    let goal_unknown = unknown(&state.goal);
    if !goal_unknown.is_empty() {
        report.push(format!("goal: names {}", goal_unknown.join(", ")));
        state.goal = format!(
            "{} (unverified: the session log never mentions {})",
            state.goal.trim_end(),
            goal_unknown.join(", ")
        );
    }
    let lists: [(&str, &mut Vec<String>); 7] = [
        ("requests", &mut state.requests),
        ("constraints", &mut state.constraints),
        ("completed", &mut state.completed),
        ("active", &mut state.active),
        ("pending", &mut state.pending),
        ("blockers", &mut state.blockers),
        ("nextSteps", &mut state.next_steps),
    ];
    for (name, items) in lists {
        items.retain(|item| {
            let bad = unknown(item);
            if !bad.is_empty() {
                report.push(format!("{name}: dropped an item naming {}", bad.join(", ")));
            }
            bad.is_empty()
        });
    }
    state.decisions.retain(|d: &Decision| {
        let mut bad = unknown(&d.decision);
        bad.extend(unknown(&d.rationale));
        if !bad.is_empty() {
            report.push(format!("decisions: dropped one naming {}", bad.join(", ")));
        }
        bad.is_empty()
    });
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extracts_from_fences_and_prose() {
        let text = "Here it is:\n```json\n{\"goal\": \"fix {braces} in \\\"strings\\\"\", \"blockers\": []}\n```\nDone {x}";
        assert_eq!(
            extract_json_object(text),
            Some("{\"goal\": \"fix {braces} in \\\"strings\\\"\", \"blockers\": []}")
        );
        assert_eq!(extract_json_object("no json"), None);
        assert_eq!(extract_json_object("{\"goal\": \"unterminated\""), None);
    }

    #[test]
    fn parses_a_full_state() {
        let s = parse_capsule_state(
            r#"```json
{"goal":"Ship the parser","constraints":["no new crates"],"completed":["tokenizer"],
 "active":["SSE"],"pending":[],"decisions":[{"decision":"hand-roll SSE","rationale":"tiny"}],
 "blockers":[],"nextSteps":["tests"]}
```"#,
        )
        .unwrap();
        assert_eq!(s.goal, "Ship the parser");
        assert_eq!(s.decisions[0].rationale, "tiny");
        assert_eq!(s.next_steps, vec!["tests"]);
    }

    #[test]
    fn echoed_artifacts_are_ignored() {
        let s = parse_capsule_state(r#"{"goal":"g","artifacts":{"modifiedFiles":[]}}"#).unwrap();
        assert_eq!(s.goal, "g");
    }

    #[test]
    fn rejections_carry_a_reason() {
        let cases = [
            ("", "no text"),
            ("I could not do it.", "no complete JSON object"),
            (r#"{"goal": 5}"#, "not a capsule state"),
            (r#"{"goal":"g","mood":"happy"}"#, "unknown field `mood`"),
            (r#"{"goal":"  "}"#, "empty goal"),
            (r#"{"constraints":["x"]}"#, "empty goal"),
            (r#"{"goal":"g","nextSteps":[""]}"#, "`nextSteps`"),
            (
                r#"{"goal":"g","decisions":[{"decision":""}]}"#,
                "decision with no text",
            ),
            (r#"{"goal":"g",}"#, "does not parse"),
        ];
        for (text, want) in cases {
            let err = parse_capsule_state(text).unwrap_err();
            assert!(err.contains(want), "{text:?} → {err}");
        }
    }
}

#[cfg(test)]
mod vet_tests {
    use super::*;
    use crate::capsule::{Artifacts, FileArtifact};
    use crate::session::view::ModelMessage;
    use crate::summarize::SummaryRequest;

    fn text(role: &str, t: &str) -> ModelMessage {
        ModelMessage {
            role: role.into(),
            content: vec![ContentBlock::Text {
                text: t.into(),
                extra: Default::default(),
            }],
            tool_call_id: None,
            is_error: None,
            entry_id: Some("e1".into()),
        }
    }

    #[test]
    fn path_mentions_find_files_not_prose() {
        assert_eq!(
            path_mentions(
                "Edited `src/summarize/prompt.rs:42`, then ran ./scripts/test (see docs/proxy.md)."
            ),
            vec!["src/summarize/prompt.rs", "./scripts/test", "docs/proxy.md"]
        );
        assert_eq!(
            path_mentions("Cargo.toml and README.md"),
            vec!["Cargo.toml", "README.md"]
        );
        for prose in [
            "and/or read/write",
            "e.g. i.e. v1.2.3 0.5",
            "https://example.com/a/b.rs",
            "Node.js and Vue.js",
            "self.config.model",
            "a fn(x) -> Vec<String>",
        ] {
            assert!(
                path_mentions(prose).is_empty(),
                "{prose}: {:?}",
                path_mentions(prose)
            );
        }
        assert_eq!(path_mentions("a/b/c x"), vec!["a/b/c"]);
    }

    fn grounding() -> Grounding {
        let req = SummaryRequest {
            history: vec![
                text("user", "Fix the bug in src/parser/lexer.rs please"),
                ModelMessage {
                    role: "assistant".into(),
                    content: vec![ContentBlock::ToolCall {
                        id: "c1".into(),
                        name: "read".into(),
                        input: Box::new(
                            serde_json::json!({"path": "/home/u/p/tests/lexer_test.rs"}),
                        ),
                        extra: Default::default(),
                    }],
                    tool_call_id: None,
                    is_error: None,
                    entry_id: Some("e2".into()),
                },
            ],
            artifacts: Artifacts {
                modified_files: vec![FileArtifact {
                    path: "src/parser/mod.rs".into(),
                    entry_ids: vec!["e3".into()],
                    ..Default::default()
                }],
                ..Artifacts::default()
            },
            ..SummaryRequest::default()
        };
        Grounding::of(&req)
    }

    #[test]
    fn known_paths_are_the_logs_in_any_form() {
        let g = grounding();
        for known in [
            "src/parser/lexer.rs",
            "parser/lexer.rs",
            "lexer.rs",
            "tests/lexer_test.rs",
            "/home/u/p/tests/lexer_test.rs",
            "src/parser/mod.rs",
            "/work/p/src/parser/mod.rs",
            "./src/parser/mod.rs",
        ] {
            assert!(g.knows(known), "{known}");
        }
        for unknown in ["src/parser/ast.rs", "src/lexer.rs.bak", "docs/parser.md"] {
            assert!(!g.knows(unknown), "{unknown}");
        }
    }

    #[test]
    fn items_naming_unknown_files_are_dropped_and_the_goal_flagged() {
        let g = grounding();
        let mut state = CapsuleState {
            goal: "Fix the lexer bug in src/parser/lexer.rs and src/parser/ast.rs".into(),
            completed: vec![
                "Read tests/lexer_test.rs".into(),
                "Rewrote src/parser/tokens.rs".into(),
            ],
            next_steps: vec!["Run the lexer tests".into(), "Update docs/lexer.md".into()],
            decisions: vec![
                Decision {
                    decision: "Keep the lexer hand-written".into(),
                    rationale: "no new crates".into(),
                },
                Decision {
                    decision: "Move tokens".into(),
                    rationale: "see src/parser/tokens.rs".into(),
                },
            ],
            ..CapsuleState::default()
        };
        let report = vet_paths(&mut state, &g);
        assert_eq!(state.completed, vec!["Read tests/lexer_test.rs"]);
        assert_eq!(state.next_steps, vec!["Run the lexer tests"]);
        assert_eq!(state.decisions.len(), 1);
        assert!(
            state
                .goal
                .ends_with("(unverified: the session log never mentions src/parser/ast.rs)"),
            "{}",
            state.goal
        );
        assert_eq!(report.len(), 4, "{report:?}");
        assert!(report
            .iter()
            .any(|r| r.contains("completed: dropped an item naming src/parser/tokens.rs")));
        // A state that names only known files is left as it is.
        let mut clean = CapsuleState {
            goal: "Fix src/parser/lexer.rs".into(),
            active: vec!["Editing src/parser/mod.rs:40".into()],
            ..CapsuleState::default()
        };
        let before = clean.clone();
        assert!(vet_paths(&mut clean, &g).is_empty());
        assert_eq!(clean, before);
    }
}
