//! Turning a model's text into a validated [`CapsuleState`].
//!
//! The model may think first in an `<analysis>` block; it is cut from the reply before
//! anything else reads it ([`strip_analysis`]) and goes nowhere. Models wrap JSON in prose or
//! Markdown fences more often than not, so extraction is lenient: the first balanced JSON
//! object in what is left is taken. Validation is strict: the object must match the state part
//! of the capsule schema (unknown keys rejected) and carry a goal.
//! Then it is checked against the log: a file path the summarized history, the facts and the
//! previous capsule never mention is the model's invention, and the item naming it is dropped
//! (the goal, which cannot be dropped, is flagged) ([`vet_paths`]); a claim about a check's
//! outcome or a file's deletion that the facts contradict is dropped ([`vet_claims`]). Each
//! correction is counted ([`Corrections`]), never quoted.

use std::borrow::Cow;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use soba_core::session::capsule::model::Artifacts;
use soba_core::session::capsule::model::CapsuleState;
use soba_core::session::capsule::model::Decision;
use soba_core::session::capsule::model::VerificationOutcome;
use soba_core::session::entry::ContentBlock;

/// How many of a model capsule's claims were corrected from the facts, by kind. Numbers only:
/// they go to flight records and results, which never hold capsule text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Corrections {
    /// Items naming a file the log never mentions: dropped (the goal flagged instead).
    #[serde(default)]
    pub unknown_paths: u32,
    /// Items claiming a check passed or failed where its last recorded run says otherwise.
    #[serde(default)]
    pub check_outcomes: u32,
    /// Items saying a file was deleted that the facts do not record as deleted.
    #[serde(default)]
    pub deletions: u32,
}

impl Corrections {
    pub fn total(&self) -> u32 {
        self.unknown_paths + self.check_outcomes + self.deletions
    }

    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }

    /// "2 claims corrected from the facts (1 check outcome, 1 deletion)", or `None`.
    pub fn describe(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let plural =
            |n: u32, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let kinds: Vec<String> = [
            (self.check_outcomes, "check outcome", "check outcomes"),
            (self.deletions, "deletion", "deletions"),
            (self.unknown_paths, "unknown file", "unknown files"),
        ]
        .into_iter()
        .filter(|(n, ..)| *n > 0)
        .map(|(n, one, many)| plural(n, one, many))
        .collect();
        Some(format!(
            "{} corrected from the facts ({})",
            plural(self.total(), "claim", "claims"),
            kinds.join(", ")
        ))
    }
}

const ANALYSIS_OPEN: &str = "<analysis>";
const ANALYSIS_CLOSE: &str = "</analysis>";

/// `text` without its `<analysis>…</analysis>` blocks, the thinking the prompt allows before
/// the JSON. An unclosed block runs to the end of the text (a reply cut off mid-thought).
pub fn strip_analysis(text: &str) -> Cow<'_, str> {
    if !text.contains(ANALYSIS_OPEN) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(ANALYSIS_OPEN) {
        out.push_str(&rest[..start]);
        let after = &rest[start + ANALYSIS_OPEN.len()..];
        match after.find(ANALYSIS_CLOSE) {
            Some(end) => rest = &after[end + ANALYSIS_CLOSE.len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

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
    let answer = strip_analysis(text);
    let json = extract_json_object(&answer).ok_or_else(|| {
        if text.trim().is_empty() {
            "the model returned no text".to_string()
        } else if answer.trim().is_empty() {
            "the model's reply holds only its analysis, no JSON object".to_string()
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
    let lists: [(&str, &Vec<String>); 9] = [
        ("requests", &state.requests),
        ("constraints", &state.constraints),
        ("completed", &state.completed),
        ("active", &state.active),
        ("pending", &state.pending),
        ("findings", &state.findings),
        ("currentWork", &state.current_work),
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
    if state.errors.iter().any(|e| e.error.trim().is_empty()) {
        return Err("the model's capsule has an error with no text".into());
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
    pub fn of(req: &super::summarizer::SummaryRequest) -> Grounding {
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
    let lists: [(&str, &mut Vec<String>); 9] = [
        ("requests", &mut state.requests),
        ("constraints", &mut state.constraints),
        ("completed", &mut state.completed),
        ("active", &mut state.active),
        ("pending", &mut state.pending),
        ("findings", &mut state.findings),
        ("currentWork", &mut state.current_work),
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
    state.errors.retain(|e| {
        let mut bad = unknown(&e.error);
        bad.extend(unknown(&e.fix));
        if !bad.is_empty() {
            report.push(format!("errors: dropped one naming {}", bad.join(", ")));
        }
        bad.is_empty()
    });
    report
}

/// Runners whose task name alone stands for the check (`mise run lint` → "lint").
const TASK_RUNNERS: &[&str] = &[
    "mise", "npm", "pnpm", "yarn", "bun", "make", "just", "task", "rake", "poe", "nox", "tox",
];
/// Task names too common to stand for one check on their own.
const GENERIC_TASKS: &[&str] = &["test", "tests", "build", "check", "run", "all", "ci", "dev"];

/// How an item can refer to a check: its command, or a runner's task name.
fn check_names(command: &str) -> (String, Option<String>) {
    let words: Vec<&str> = command.split_whitespace().collect();
    let task = match words.first() {
        Some(runner) if TASK_RUNNERS.contains(runner) => words[1..]
            .iter()
            .rev()
            .find(|w| !w.starts_with('-') && **w != "run")
            .filter(|t| !GENERIC_TASKS.contains(&t.to_ascii_lowercase().as_str()))
            .map(|t| t.to_ascii_lowercase()),
        _ => None,
    };
    (command.to_ascii_lowercase(), task)
}

const PASS_WORDS: &[&str] = &[
    "pass",
    "passes",
    "passed",
    "passing",
    "green",
    "succeeds",
    "succeeded",
    "clean",
];
const FAIL_WORDS: &[&str] = &["fail", "fails", "failed", "failing", "broken", "red"];
/// Words that turn an outcome into its opposite ("no longer fails", "doesn't pass").
const NEGATIONS: &[&str] = &[
    "not", "no", "never", "longer", "doesn't", "don't", "didn't", "isn't", "aren't", "won't",
    "without",
];
/// Words that make an outcome a wish or a condition, not a report ("until it passes", "make
/// the lint pass", "should pass").
const INTENTIONS: &[&str] = &[
    "to", "make", "makes", "making", "get", "getting", "until", "should", "must", "will", "would",
    "need", "needs", "once", "if", "when", "unless", "expect", "expected", "so", "can", "could",
    "might", "may",
];

fn outcome_word(word: &str) -> Option<VerificationOutcome> {
    if PASS_WORDS.contains(&word) {
        Some(VerificationOutcome::Passed)
    } else if FAIL_WORDS.contains(&word) {
        Some(VerificationOutcome::Failed)
    } else {
        None
    }
}

fn opposite(o: VerificationOutcome) -> VerificationOutcome {
    match o {
        VerificationOutcome::Passed => VerificationOutcome::Failed,
        VerificationOutcome::Failed => VerificationOutcome::Passed,
        VerificationOutcome::Unknown => VerificationOutcome::Unknown,
    }
}

/// The outcome a clause reports, if it reports exactly one: "`cargo test` fails" → failed,
/// "lint no longer fails" → passed; `None` for a wish ("until it passes") or a mix.
fn reported_outcome(clause: &str) -> Option<VerificationOutcome> {
    let words: Vec<String> = clause
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'')
                .to_ascii_lowercase()
        })
        .collect();
    let mut found = None;
    for (i, w) in words.iter().enumerate() {
        let Some(mut outcome) = outcome_word(w) else {
            continue;
        };
        let before = &words[i.saturating_sub(3)..i];
        if words[..i].iter().any(|b| INTENTIONS.contains(&b.as_str())) {
            return None;
        }
        if before.iter().any(|b| NEGATIONS.contains(&b.as_str())) {
            outcome = opposite(outcome);
        }
        match found {
            Some(other) if other != outcome => return None,
            _ => found = Some(outcome),
        }
    }
    found
}

/// The clauses of an item: outcomes are read per clause so that "tests pass, but lint
/// fails" says two things.
fn clauses(item: &str) -> Vec<&str> {
    let mut out = vec![item];
    for sep in [
        "; ",
        ", ",
        ". ",
        " but ",
        " while ",
        " whereas ",
        " although ",
        " though ",
    ] {
        out = out.iter().flat_map(|c| c.split(sep)).collect();
    }
    out
}

fn is_word_boundary(text: &str, start: usize, end: usize) -> bool {
    let ok = |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '-'));
    ok(text[..start].chars().next_back()) && ok(text[end..].chars().next())
}

fn mentions(clause: &str, name: &str) -> bool {
    clause
        .match_indices(name)
        .any(|(at, m)| is_word_boundary(clause, at, at + m.len()))
}

/// Words that may stand between a deletion verb and the file it names.
const DELETION_FILLERS: &[&str] = &[
    "the", "file", "files", "old", "stale", "-f", "-r", "-rf", "and",
];
const DELETION_VERBS: &[&str] = &["deleted", "removed", "rm", "unlinked"];
const PASSIVE_BE: &[&str] = &["was", "were", "is", "are", "got", "been", "now"];

/// The files an item says were deleted: "Deleted src/a.rs and src/b.rs", "`git rm old.rs`",
/// "src/a.rs was removed". "Removed the import from src/a.rs" deletes no file.
pub fn deletion_claims(item: &str) -> Vec<&str> {
    let words: Vec<&str> = item.split_whitespace().collect();
    let bare = |w: &str| {
        w.trim_matches(|c: char| !c.is_alphanumeric() && c != '-')
            .to_ascii_lowercase()
    };
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if DELETION_VERBS.contains(&bare(w).as_str()) {
            for next in &words[i + 1..] {
                match path_mentions(next).first() {
                    Some(path) => out.push(*path),
                    None if DELETION_FILLERS.contains(&bare(next).as_str()) => continue,
                    None => break,
                }
            }
        } else if let Some(path) = path_mentions(w).first() {
            let after: Vec<String> = words[i + 1..].iter().take(3).map(|w| bare(w)).collect();
            let be = after
                .iter()
                .take_while(|a| PASSIVE_BE.contains(&a.as_str()))
                .count();
            if be > 0
                && after
                    .get(be)
                    .is_some_and(|v| DELETION_VERBS.contains(&v.as_str()))
            {
                out.push(*path);
            }
        }
    }
    out.dedup();
    out
}

/// `a` and `b` name the same file, one perhaps with more leading folders.
fn same_file(a: &str, b: &str) -> bool {
    let a = a.strip_prefix("./").unwrap_or(a);
    let b = b.strip_prefix("./").unwrap_or(b);
    a == b || ends_with_segments(a, b) || ends_with_segments(b, a)
}

/// The model's current work, filled from the one the facts recorded (`recorded`, read from the
/// calls and what they printed) where the model left it empty: the agent that continues must
/// see what was just done and how it came out, whatever the model chose to say.
pub fn fill_current_work(state: &mut CapsuleState, recorded: Vec<String>) {
    if state.current_work.is_empty() {
        state.current_work = recorded;
    }
}

/// Check the model's claims about checks and deletions against the `facts` it was shown, and
/// correct what they contradict. Only reports are checked: `completed`, `active`, `findings`,
/// `currentWork` and `blockers` (plans, requests and rules speak of what should happen, not of what did).
///
/// - An item that says a check passed when its last run failed, or failed when its last run
///   passed (and nothing was edited since, which would make a failure plausible), is dropped;
///   a check whose failure was so hidden gets a blocker written from the facts.
/// - An item that says a file was deleted is dropped unless the facts record that file as
///   deleted, or as the old name of a rename.
pub fn vet_claims(state: &mut CapsuleState, facts: &Artifacts) -> Corrections {
    let checks: Vec<_> = facts
        .verification
        .iter()
        .filter(|v| v.outcome != VerificationOutcome::Unknown)
        .map(|v| (v, check_names(&v.command)))
        .collect();
    let mut corrections = Corrections::default();
    let mut hidden_failures: Vec<String> = Vec::new();
    let contradicted_check = |item: &str| -> Option<(String, VerificationOutcome)> {
        for clause in clauses(item) {
            let lower = clause.to_ascii_lowercase();
            let Some(claimed) = reported_outcome(&lower) else {
                continue;
            };
            for (v, (command, task)) in &checks {
                let named = lower.contains(command.as_str())
                    || task.as_deref().is_some_and(|t| mentions(&lower, t));
                let contradicts = match (claimed, v.outcome) {
                    (VerificationOutcome::Passed, VerificationOutcome::Failed) => true,
                    (VerificationOutcome::Failed, VerificationOutcome::Passed) => !v.edited_since,
                    _ => false,
                };
                if named && contradicts {
                    return Some((v.command.clone(), v.outcome));
                }
            }
        }
        None
    };
    let deleted_in_facts = |path: &str| {
        facts.modified_files.iter().any(|f| {
            (f.deleted && same_file(&f.path, path))
                || f.renamed_from
                    .as_deref()
                    .is_some_and(|from| same_file(from, path))
        })
    };
    for items in [
        &mut state.completed,
        &mut state.active,
        &mut state.findings,
        &mut state.current_work,
        &mut state.blockers,
    ] {
        items.retain(|item| {
            if let Some((command, outcome)) = contradicted_check(item) {
                corrections.check_outcomes += 1;
                if outcome == VerificationOutcome::Failed {
                    hidden_failures.push(command);
                }
                return false;
            }
            if deletion_claims(item).iter().any(|p| !deleted_in_facts(p)) {
                corrections.deletions += 1;
                return false;
            }
            true
        });
    }
    hidden_failures.dedup();
    for command in hidden_failures {
        let lower = command.to_ascii_lowercase();
        if !state
            .blockers
            .iter()
            .any(|b| b.to_ascii_lowercase().contains(&lower))
        {
            state
                .blockers
                .push(format!("`{command}` failed on its last run"));
        }
    }
    corrections
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
    use crate::summarize::summarizer::SummaryRequest;
    use soba_core::session::capsule::model::Artifacts;
    use soba_core::session::capsule::model::FileArtifact;
    use soba_core::session::view::ModelMessage;

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

#[cfg(test)]
mod claim_tests {
    use super::*;
    use soba_core::session::capsule::model::ErrorFix;
    use soba_core::session::capsule::model::FileArtifact;
    use soba_core::session::capsule::model::Verification;

    fn check(command: &str, outcome: VerificationOutcome, edited_since: bool) -> Verification {
        Verification {
            command: command.into(),
            outcome,
            entry_id: "e5".into(),
            edited_since,
        }
    }

    fn facts() -> Artifacts {
        Artifacts {
            modified_files: vec![
                FileArtifact {
                    path: "src/parser.rs".into(),
                    entry_ids: vec!["e2".into()],
                    ..Default::default()
                },
                FileArtifact {
                    path: "src/old_lexer.rs".into(),
                    entry_ids: vec!["e3".into()],
                    deleted: true,
                    ..Default::default()
                },
                FileArtifact {
                    path: "src/tokens.rs".into(),
                    entry_ids: vec!["e4".into()],
                    renamed_from: Some("src/tok.rs".into()),
                    ..Default::default()
                },
            ],
            verification: vec![
                check("mise run lint", VerificationOutcome::Failed, false),
                check("mise run test:ci", VerificationOutcome::Passed, false),
                check("cargo clippy", VerificationOutcome::Passed, true),
            ],
            ..Artifacts::default()
        }
    }

    #[test]
    fn the_analysis_block_is_cut_before_the_json_is_read() {
        let reply = "<analysis>\nThe user asked {x}. Tests failed, then passed.\n</analysis>\n{\"goal\":\"Ship it\"}";
        assert_eq!(strip_analysis(reply).trim(), "{\"goal\":\"Ship it\"}");
        assert_eq!(parse_capsule_state(reply).unwrap().goal, "Ship it");
        // Two blocks, text between them kept; an unclosed one runs to the end.
        assert_eq!(
            strip_analysis("a<analysis>1</analysis>b<analysis>2</analysis>c<analysis>open"),
            "abc"
        );
        assert!(matches!(
            strip_analysis("{\"goal\":\"g\"}"),
            Cow::Borrowed(_)
        ));
        let err = parse_capsule_state("<analysis>thinking {about it} and then the reply was cut")
            .unwrap_err();
        assert_eq!(
            err,
            "the model's reply holds only its analysis, no JSON object"
        );
    }

    #[test]
    fn a_model_capsule_without_current_work_gets_the_recorded_one_and_keeps_its_own() {
        let recorded = vec!["ran `make` — failed: \"error: no rule\"".to_string()];
        let mut silent = CapsuleState {
            goal: "g".into(),
            ..Default::default()
        };
        fill_current_work(&mut silent, recorded.clone());
        assert_eq!(silent.current_work, recorded);
        let mut spoke = CapsuleState {
            goal: "g".into(),
            current_work: vec!["fixing the Makefile rule".into()],
            ..Default::default()
        };
        fill_current_work(&mut spoke, recorded);
        assert_eq!(spoke.current_work, vec!["fixing the Makefile rule"]);
        let err = parse_capsule_state(r#"{"goal":"g","currentWork":[" "]}"#).unwrap_err();
        assert!(err.contains("`currentWork`"), "{err}");
    }

    #[test]
    fn findings_and_errors_are_read_and_validated() {
        let s = parse_capsule_state(
            r#"{"goal":"g","findings":["the cache key ignores the locale"],"errors":[{"error":"E0308 in parse()","fix":"return Option"}]}"#,
        )
        .unwrap();
        assert_eq!(s.findings, vec!["the cache key ignores the locale"]);
        assert_eq!(
            s.errors,
            vec![ErrorFix {
                error: "E0308 in parse()".into(),
                fix: "return Option".into()
            }]
        );
        let err = parse_capsule_state(r#"{"goal":"g","findings":[" "]}"#).unwrap_err();
        assert!(err.contains("`findings`"), "{err}");
        let err =
            parse_capsule_state(r#"{"goal":"g","errors":[{"error":"","fix":"x"}]}"#).unwrap_err();
        assert!(err.contains("an error with no text"), "{err}");
    }

    #[test]
    fn a_claimed_outcome_the_facts_contradict_is_dropped_and_a_hidden_failure_becomes_a_blocker() {
        let mut state = CapsuleState {
            goal: "Ship the parser".into(),
            completed: vec![
                "Fixed the parser; lint passes".into(),
                "`mise run test:ci` passes".into(),
                "Ported the lexer".into(),
            ],
            blockers: vec!["`mise run test:ci` fails on the snapshot test".into()],
            findings: vec!["cargo clippy fails on the new module".into()],
            next_steps: vec!["Run mise run lint until it passes".into()],
            ..CapsuleState::default()
        };
        let c = vet_claims(&mut state, &facts());
        assert_eq!(
            c,
            Corrections {
                check_outcomes: 2,
                ..Corrections::default()
            }
        );
        assert_eq!(
            state.completed,
            vec!["`mise run test:ci` passes", "Ported the lexer"]
        );
        // The failing lint the model called passing is a blocker, written from the facts.
        assert_eq!(
            state.blockers,
            vec!["`mise run lint` failed on its last run"]
        );
        // clippy passed, but files were edited since: a failure is plausible and kept.
        assert_eq!(state.findings, vec!["cargo clippy fails on the new module"]);
        // Plans are not reports.
        assert_eq!(state.next_steps, vec!["Run mise run lint until it passes"]);
    }

    #[test]
    fn a_current_work_line_the_facts_contradict_is_dropped_and_the_failure_kept() {
        let mut state = CapsuleState {
            goal: "g".into(),
            current_work: vec![
                "ran `mise run lint` — it passes now".into(),
                "edited src/parser.rs".into(),
            ],
            ..Default::default()
        };
        let c = vet_claims(&mut state, &facts());
        assert_eq!(c.check_outcomes, 1);
        assert_eq!(state.current_work, vec!["edited src/parser.rs"]);
        assert_eq!(
            state.blockers,
            vec!["`mise run lint` failed on its last run"]
        );
    }

    #[test]
    fn outcomes_are_read_per_clause_with_negations() {
        assert_eq!(
            reported_outcome("lint no longer fails"),
            Some(VerificationOutcome::Passed)
        );
        assert_eq!(
            reported_outcome("`cargo test` doesn't pass"),
            Some(VerificationOutcome::Failed)
        );
        assert_eq!(reported_outcome("make the lint pass"), None);
        assert_eq!(reported_outcome("3 passed, 1 failed"), None);
        assert_eq!(
            clauses("tests pass, but lint fails"),
            vec!["tests pass", "but lint fails"]
        );
        let mut state = CapsuleState {
            goal: "g".into(),
            completed: vec![
                "test:ci passes, but the lint fails".into(),
                "the lint no longer fails".into(),
            ],
            ..CapsuleState::default()
        };
        let c = vet_claims(&mut state, &facts());
        assert_eq!(c.check_outcomes, 1);
        assert_eq!(state.completed, vec!["test:ci passes, but the lint fails"]);
    }

    #[test]
    fn a_deletion_the_facts_do_not_record_is_dropped() {
        let mut state = CapsuleState {
            goal: "g".into(),
            completed: vec![
                "Deleted src/parser.rs".into(),
                "Removed the unused import from src/parser.rs".into(),
                "Deleted src/old_lexer.rs".into(),
                "Removed `src/tok.rs` (renamed)".into(),
                "src/cache.rs was deleted".into(),
            ],
            active: vec!["git rm ./src/parser.rs and src/old_lexer.rs".into()],
            next_steps: vec!["Delete src/parser.rs".into()],
            ..CapsuleState::default()
        };
        let c = vet_claims(&mut state, &facts());
        assert_eq!(
            c,
            Corrections {
                deletions: 3,
                ..Corrections::default()
            }
        );
        assert_eq!(
            state.completed,
            vec![
                "Removed the unused import from src/parser.rs",
                "Deleted src/old_lexer.rs",
                "Removed `src/tok.rs` (renamed)",
            ]
        );
        assert!(state.active.is_empty());
        assert_eq!(state.next_steps, vec!["Delete src/parser.rs"]);
        assert_eq!(
            deletion_claims("Deleted the file a.rs and b.rs"),
            vec!["a.rs", "b.rs"]
        );
        assert!(deletion_claims("removed the flag from Cargo.toml").is_empty());
    }

    #[test]
    fn corrections_describe_themselves_in_numbers() {
        assert_eq!(Corrections::default().describe(), None);
        let c = Corrections {
            unknown_paths: 0,
            check_outcomes: 1,
            deletions: 1,
        };
        assert_eq!(
            c.describe().unwrap(),
            "2 claims corrected from the facts (1 check outcome, 1 deletion)"
        );
        let c = Corrections {
            unknown_paths: 2,
            check_outcomes: 0,
            deletions: 0,
        };
        assert_eq!(
            c.describe().unwrap(),
            "2 claims corrected from the facts (2 unknown files)"
        );
    }
}
