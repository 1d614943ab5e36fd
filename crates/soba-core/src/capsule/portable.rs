//! Portable Capsules: the `.capsule.md` hand-off format (see `docs/capsule-format.md`).
//!
//! A front matter block of `key: value` lines, then Markdown sections in a fixed order. The
//! writer is canonical (the same capsule always gives the same bytes, secrets redacted) and
//! the reader is tolerant of what people do to Markdown by hand (CRLF, trailing spaces, extra
//! blank lines, reordered sections, added notes), so export → load → export is byte-identical.
//! Anything the reader cannot make sense of is an error naming the line and what it expected.
//!
//! Pure functions on strings; [`read_capsule_file`] and [`write_capsule_file`] are the thin
//! file shell around them.

use std::fmt::Write as _;
use std::io::Read;
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;
use serde::Serialize;

use crate::files::write_atomic;
use crate::redact::{redact_with_report, RedactionReport};
use crate::session::capsule::model::{
    Artifacts, CapsuleEntry, CapsuleState, CapsuleTokens, Decision, ErrorFix, Exchange,
    FileArtifact, LoadedFrom, Origin, Quality, Verification, VerificationOutcome,
};
use crate::session::capsule::render::DECISIONS_NEED_A_MODEL;
use crate::session::trigger::Trigger;

/// The `format:` value this build writes and reads.
pub const FORMAT: &str = "soba-capsule/1";

/// Capsule files larger than this are refused: a capsule is a summary, not a transcript.
pub const MAX_CAPSULE_FILE_BYTES: u64 = 1024 * 1024;

/// A capsule as a `.capsule.md` file holds it: the capsule plus where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortableCapsule {
    pub checkpoint_id: String,
    pub title: Option<String>,
    /// RFC 3339 time the capsule was written in its source session.
    pub created: String,
    /// Workspace root of the source session.
    pub workspace: Option<String>,
    /// Id of the source session.
    pub session: Option<String>,
    pub trigger: Trigger,
    pub quality: Quality,
    pub tokens: CapsuleTokens,
    pub previous_checkpoint_id: Option<String>,
    pub degraded_reason: Option<String>,
    pub state: CapsuleState,
    pub artifacts: Artifacts,
}

impl PortableCapsule {
    /// The portable form of a capsule entry written at `created` in session `session` of
    /// `workspace`. A capsule that was itself loaded keeps the identity of its file, so
    /// re-exporting it gives back the same file.
    pub fn from_entry(
        capsule: &CapsuleEntry,
        created: &str,
        workspace: Option<&str>,
        session: Option<&str>,
    ) -> Self {
        let loaded = capsule
            .loaded_from
            .as_ref()
            .filter(|_| capsule.origin == Origin::Loaded);
        let (checkpoint_id, created, workspace, session) = match loaded {
            Some(l) => (
                l.checkpoint_id
                    .clone()
                    .unwrap_or_else(|| capsule.checkpoint_id.clone()),
                l.created.clone().unwrap_or_else(|| created.to_string()),
                l.workspace.clone(),
                l.session.clone(),
            ),
            None => (
                capsule.checkpoint_id.clone(),
                created.to_string(),
                workspace.map(str::to_string),
                session.map(str::to_string),
            ),
        };
        PortableCapsule {
            checkpoint_id,
            title: capsule.title.clone(),
            created,
            workspace,
            session,
            trigger: capsule.trigger,
            quality: capsule.quality,
            tokens: capsule.tokens,
            previous_checkpoint_id: capsule.previous_checkpoint_id.clone(),
            degraded_reason: capsule.degraded_reason.clone(),
            state: capsule.state.clone(),
            artifacts: capsule.artifacts.clone(),
        }
    }

    /// The capsule entry that loading this file appends: a new checkpoint id, `origin:
    /// loaded`, provenance in `loaded_from`, and nothing kept verbatim (the file carries no
    /// entries of this session).
    pub fn to_loaded_entry(&self, checkpoint_id: String, path: &str) -> CapsuleEntry {
        CapsuleEntry {
            checkpoint_id,
            trigger: self.trigger,
            quality: self.quality,
            first_kept_entry_id: None,
            // Provenance only: it names a checkpoint of the source session.
            previous_checkpoint_id: self.previous_checkpoint_id.clone(),
            state: self.state.clone(),
            artifacts: self.artifacts.clone(),
            tokens: self.tokens,
            origin: Origin::Loaded,
            mirrored: false,
            title: self.title.clone(),
            degraded_reason: self.degraded_reason.clone(),
            instructions: None,
            elide_tool_results_over: None,
            loaded_from: Some(LoadedFrom {
                path: path.to_string(),
                workspace: self.workspace.clone(),
                session: self.session.clone(),
                checkpoint_id: Some(self.checkpoint_id.clone()),
                created: Some(self.created.clone()),
            }),
        }
    }
}

/// The text of a `.capsule.md` file and the secrets taken out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    pub text: String,
    pub redactions: RedactionReport,
}

/// Content of a capsule file the reader skipped: notes people added, unknown sections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IgnoredLine {
    pub line: usize,
    pub text: String,
}

/// A parsed capsule file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub capsule: PortableCapsule,
    pub ignored: Vec<IgnoredLine>,
}

/// Why a capsule file could not be read: the line (1-based) and what the reader expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: expected {expected}, found {found}")]
pub struct FormatError {
    pub line: usize,
    pub expected: String,
    pub found: String,
}

fn format_err(line: usize, expected: impl Into<String>, found: &str) -> FormatError {
    let found = if found.trim().is_empty() {
        "an empty line".to_string()
    } else {
        let short: String = found.chars().take(60).collect();
        format!(
            "`{short}`{}",
            if found.chars().count() > 60 {
                "…"
            } else {
                ""
            }
        )
    };
    FormatError {
        line,
        expected: expected.into(),
        found,
    }
}

// ---------------------------------------------------------------------------------------
// Sections

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Goal,
    Requests,
    Exchanges,
    Constraints,
    Completed,
    Active,
    Pending,
    Decisions,
    Findings,
    Errors,
    Blockers,
    CurrentWork,
    NextSteps,
    FilesRead,
    FilesModified,
    Verification,
    ActiveSkills,
}

const SECTIONS: [(Section, &str); 17] = [
    (Section::Goal, "Goal"),
    (Section::Requests, "User requests"),
    (Section::Exchanges, "Recent conversation"),
    (Section::Constraints, "Constraints"),
    (Section::Completed, "Completed"),
    (Section::Active, "Active"),
    (Section::Pending, "Pending"),
    (Section::Decisions, "Decisions"),
    (Section::Findings, "Findings"),
    (Section::Errors, "Errors and fixes"),
    (Section::Blockers, "Blockers"),
    (Section::CurrentWork, "Current work"),
    (Section::NextSteps, "Next steps"),
    (Section::FilesRead, "Files read"),
    (Section::FilesModified, "Files modified"),
    (Section::Verification, "Verification"),
    (Section::ActiveSkills, "Active skills"),
];

fn section_named(name: &str) -> Option<Section> {
    SECTIONS
        .iter()
        .find(|(_, n)| n.eq_ignore_ascii_case(name.trim()))
        .map(|(s, _)| *s)
}

/// Sections added after the format's first files: never required, empty when missing.
const LATER_SECTIONS: [Section; 5] = [
    Section::Requests,
    Section::Exchanges,
    Section::Findings,
    Section::Errors,
    Section::CurrentWork,
];

/// How an exchange's two sides open in the Recent conversation section.
const USER_SAID: &str = "User: ";
const AGENT_SAID: &str = "Agent: ";

/// Written after a check's outcome when files were modified after its last run.
const EDITED_SINCE_MARK: &str = "; edited since";

/// A modified file's change, after its path: ` (deleted)`, ` (renamed from OLD)`.
fn change_mark(f: &FileArtifact) -> String {
    match (&f.renamed_from, f.deleted) {
        (_, true) => " (deleted)".to_string(),
        (Some(from), false) => format!(" (renamed from {})", normalize_value(from)),
        (None, false) => String::new(),
    }
}

/// Take a change mark written by [`change_mark`] off a modified file's path.
fn read_change_mark(f: &mut FileArtifact) {
    if let Some(path) = f.path.strip_suffix(" (deleted)") {
        f.path = path.trim_end().to_string();
        f.deleted = true;
    } else if let Some((path, from)) = f
        .path
        .strip_suffix(')')
        .and_then(|p| p.rsplit_once(" (renamed from "))
    {
        f.renamed_from = Some(from.trim().to_string());
        f.path = path.trim_end().to_string();
    }
}

// ---------------------------------------------------------------------------------------
// Writing

/// Lines that Markdown or this reader would take for structure get a leading backslash.
fn escape_line(line: &str) -> String {
    const STRUCTURAL: [&str; 6] = ["#", "-", "*", "+", "\\", "<!--"];
    if STRUCTURAL.iter().any(|p| line.starts_with(p)) {
        format!("\\{line}")
    } else {
        line.to_string()
    }
}

fn unescape_line(line: &str) -> &str {
    line.strip_prefix('\\').unwrap_or(line)
}

/// The canonical form of a list item: lines trimmed, no blank lines at either end.
fn normalize_item(s: &str) -> String {
    join_without_blank_edges(s.lines().map(str::trim).collect())
}

/// The canonical form of the goal: trailing spaces dropped, no blank lines at either end.
fn normalize_block(s: &str) -> String {
    join_without_blank_edges(s.lines().map(str::trim_end).collect())
}

fn join_without_blank_edges(lines: Vec<&str>) -> String {
    let start = lines
        .iter()
        .position(|l| !l.is_empty())
        .unwrap_or(lines.len());
    let end = lines
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(start, |e| e + 1);
    lines[start..end].join("\n")
}

/// One-line front matter value.
fn normalize_value(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Write one list item: `- first line`, continuation lines indented by `indent + 2`, and an
/// optional metadata comment at the end of its last line.
fn write_item(out: &mut String, indent: &str, text: &str, comment: Option<&str>) {
    let text = normalize_item(text);
    let mut lines = text.lines().peekable();
    let first = lines.next().unwrap_or("");
    let _ = write!(out, "{indent}- {}", escape_line(first));
    for line in lines {
        if line.is_empty() {
            out.push('\n');
        } else {
            let _ = write!(out, "\n{indent}  {}", escape_line(line));
        }
    }
    if let Some(c) = comment {
        let _ = write!(out, " <!-- {c} -->");
    }
    out.push('\n');
}

/// The `<!-- key: value -->` comment of a file or verification item. Written when there is a
/// value, and also (empty) when the item's text itself ends like a comment, so that the reader,
/// which strips exactly one trailing comment, never takes the text for metadata.
fn metadata_comment(key: &str, value: &str, text: &str) -> Option<String> {
    if !value.is_empty() {
        Some(format!("{key}: {value}"))
    } else if normalize_item(text).ends_with("-->") {
        Some(format!("{key}:"))
    } else {
        None
    }
}

fn section_body(c: &PortableCapsule, section: Section) -> String {
    let mut out = String::new();
    let items = |out: &mut String, list: &[String]| {
        for i in list.iter().filter(|i| !normalize_item(i).is_empty()) {
            write_item(out, "", i, None);
        }
    };
    let files = |out: &mut String, list: &[FileArtifact]| {
        for f in list.iter().filter(|f| !normalize_item(&f.path).is_empty()) {
            let ids = f.entry_ids.join(", ");
            let comment = metadata_comment("entries", &ids, &f.path);
            write_item(out, "", &f.path, comment.as_deref());
        }
    };
    let s = &c.state;
    let a = &c.artifacts;
    match section {
        Section::Goal => {
            let goal = normalize_block(&s.goal);
            for line in goal.lines() {
                out.push_str(&escape_line(line));
                out.push('\n');
            }
        }
        Section::Requests => items(&mut out, &s.requests),
        Section::Constraints => items(&mut out, &s.constraints),
        Section::Completed => items(&mut out, &s.completed),
        Section::Active => items(&mut out, &s.active),
        Section::Pending => items(&mut out, &s.pending),
        Section::Decisions => {
            for d in s
                .decisions
                .iter()
                .filter(|d| !normalize_item(&d.decision).is_empty())
            {
                write_item(&mut out, "", &d.decision, None);
                let why = normalize_item(&d.rationale);
                if !why.is_empty() {
                    write_item(&mut out, "  ", &format!("Why: {why}"), None);
                }
            }
        }
        Section::Exchanges => {
            for x in s
                .exchanges
                .iter()
                .filter(|x| !normalize_item(&x.user).is_empty())
            {
                write_item(&mut out, "", &format!("{USER_SAID}{}", x.user.trim()), None);
                if !normalize_item(&x.agent).is_empty() {
                    write_item(
                        &mut out,
                        "  ",
                        &format!("{AGENT_SAID}{}", x.agent.trim()),
                        None,
                    );
                }
            }
        }
        Section::Findings => items(&mut out, &s.findings),
        Section::Errors => {
            for e in s
                .errors
                .iter()
                .filter(|e| !normalize_item(&e.error).is_empty())
            {
                write_item(&mut out, "", &e.error, None);
                let fix = normalize_item(&e.fix);
                if !fix.is_empty() {
                    write_item(&mut out, "  ", &format!("Fix: {fix}"), None);
                }
            }
        }
        Section::Blockers => items(&mut out, &s.blockers),
        Section::CurrentWork => items(&mut out, &s.current_work),
        Section::NextSteps => items(&mut out, &s.next_steps),
        Section::FilesRead => files(&mut out, &a.read_files),
        Section::FilesModified => {
            for f in a
                .modified_files
                .iter()
                .filter(|f| !normalize_item(&f.path).is_empty())
            {
                let text = normalize_item(&f.path) + &change_mark(f);
                let ids = f.entry_ids.join(", ");
                let comment = metadata_comment("entries", &ids, &text);
                write_item(&mut out, "", &text, comment.as_deref());
            }
        }
        Section::Verification => {
            for v in a
                .verification
                .iter()
                .filter(|v| !normalize_item(&v.command).is_empty())
            {
                let text = format!(
                    "[{}{}] {}",
                    v.outcome.as_str(),
                    if v.edited_since {
                        EDITED_SINCE_MARK
                    } else {
                        ""
                    },
                    normalize_item(&v.command)
                );
                let comment = metadata_comment("entry", v.entry_id.trim(), &v.command);
                write_item(&mut out, "", &text, comment.as_deref());
            }
        }
        Section::ActiveSkills => items(&mut out, &a.active_skills),
    }
    out
}

/// Render a capsule as a `.capsule.md` file, secrets redacted.
///
/// Each value is redacted on its own before it is laid out, so a marker never spans the
/// format's structure (a key block pasted into one item cannot swallow the next section).
pub fn write(c: &PortableCapsule) -> Exported {
    let (clean, redactions) = redact_capsule(c);
    Exported {
        text: render(&clean),
        redactions,
    }
}

/// Text from the session as the file holds it: terminal control characters (ESC and the
/// sequences it starts, BEL, C1 controls, NUL, a lone carriage return) and bidirectional
/// overrides written as visible `\u{1b}` escapes, so `cat` on a capsule cannot set the
/// clipboard, retitle the terminal or rewrite lines. A CRLF line end is a line end.
/// The escapes are plain text that this function leaves as they are, so a loaded capsule
/// exports byte-identically.
fn file_text(s: &str) -> String {
    if s.contains('\r') {
        crate::util::terminal_text(&s.replace("\r\n", "\n")).into_owned()
    } else {
        crate::util::terminal_text(s).into_owned()
    }
}

/// The capsule with every text value redacted and its control characters escaped.
fn redact_capsule(c: &PortableCapsule) -> (PortableCapsule, RedactionReport) {
    let mut report = RedactionReport::default();
    let mut r = |s: &str| {
        let (out, found) = redact_with_report(s);
        report.merge(&found);
        file_text(&out)
    };
    // A list is redacted as a whole: a model that writes a private key one line per item
    // must not leave its body behind in the items after the `BEGIN` line.
    let lists = std::cell::RefCell::new(RedactionReport::default());
    let list = |v: &[String], _: &mut dyn FnMut(&str) -> String| {
        let (out, found) = crate::redact::redact_items(v);
        lists.borrow_mut().merge(&found);
        out.iter().map(|item| file_text(item)).collect::<Vec<_>>()
    };
    let files = |v: &[FileArtifact], r: &mut dyn FnMut(&str) -> String| {
        v.iter()
            .map(|f| FileArtifact {
                path: r(&f.path),
                entry_ids: f.entry_ids.clone(),
                deleted: f.deleted,
                renamed_from: f.renamed_from.as_deref().map(&mut *r),
            })
            .collect::<Vec<_>>()
    };
    let state = &c.state;
    let clean = PortableCapsule {
        checkpoint_id: r(&c.checkpoint_id),
        title: c.title.as_deref().map(&mut r),
        created: r(&c.created),
        workspace: c.workspace.as_deref().map(&mut r),
        session: c.session.as_deref().map(&mut r),
        trigger: c.trigger,
        quality: c.quality,
        tokens: c.tokens,
        previous_checkpoint_id: c.previous_checkpoint_id.as_deref().map(&mut r),
        degraded_reason: c.degraded_reason.as_deref().map(&mut r),
        state: CapsuleState {
            goal: r(&state.goal),
            requests: list(&state.requests, &mut r),
            constraints: list(&state.constraints, &mut r),
            completed: list(&state.completed, &mut r),
            active: list(&state.active, &mut r),
            pending: list(&state.pending, &mut r),
            decisions: state
                .decisions
                .iter()
                .map(|d| Decision {
                    decision: r(&d.decision),
                    rationale: r(&d.rationale),
                })
                .collect(),
            exchanges: state
                .exchanges
                .iter()
                .map(|x| Exchange {
                    user: r(&x.user),
                    agent: r(&x.agent),
                })
                .collect(),
            findings: list(&state.findings, &mut r),
            current_work: list(&state.current_work, &mut r),
            errors: state
                .errors
                .iter()
                .map(|e| ErrorFix {
                    error: r(&e.error),
                    fix: r(&e.fix),
                })
                .collect(),
            blockers: list(&state.blockers, &mut r),
            next_steps: list(&state.next_steps, &mut r),
            // Keyed by item text, so redacted the same way as the items.
            sources: state
                .sources
                .iter()
                .map(|(item, ids)| (r(item), ids.clone()))
                .collect(),
        },
        artifacts: Artifacts {
            read_files: files(&c.artifacts.read_files, &mut r),
            modified_files: files(&c.artifacts.modified_files, &mut r),
            verification: c
                .artifacts
                .verification
                .iter()
                .map(|v| Verification {
                    command: r(&v.command),
                    outcome: v.outcome,
                    entry_id: v.entry_id.clone(),
                    edited_since: v.edited_since,
                })
                .collect(),
            active_skills: list(&c.artifacts.active_skills, &mut r),
            // The file's paths say where the work was; the folders stay in the session log.
            work_trees: Vec::new(),
        },
    };
    report.merge(&lists.into_inner());
    (clean, report)
}

/// Lay out an already redacted capsule.
fn render(c: &PortableCapsule) -> String {
    let mut out = String::new();
    out.push_str("---\n");
    let mut kv = |k: &str, v: &str| {
        let v = normalize_value(v);
        // No trailing space after an empty value.
        let _ = writeln!(out, "{k}:{}{v}", if v.is_empty() { "" } else { " " });
    };
    kv("format", FORMAT);
    kv("checkpoint", &c.checkpoint_id);
    kv("title", c.title.as_deref().unwrap_or(""));
    kv("created", &c.created);
    kv("workspace", c.workspace.as_deref().unwrap_or(""));
    kv("session", c.session.as_deref().unwrap_or(""));
    kv("trigger", c.trigger.as_str());
    kv("quality", c.quality.as_str());
    kv("tokens_before", &c.tokens.before.to_string());
    kv("tokens_after", &c.tokens.after.to_string());
    if let Some(p) = &c.previous_checkpoint_id {
        kv("previous_checkpoint", p);
    }
    if let Some(r) = &c.degraded_reason {
        kv("degraded_reason", r);
    }
    out.push_str("---\n\n");
    let title = c
        .title
        .as_deref()
        .map(normalize_value)
        .filter(|t| !t.is_empty());
    let _ = writeln!(
        out,
        "# {}",
        title.unwrap_or_else(|| format!("Context Capsule {}", normalize_value(&c.checkpoint_id)))
    );
    for (section, name) in SECTIONS {
        let body = section_body(c, section);
        let _ = writeln!(out, "\n## {name}");
        if !body.is_empty() {
            out.push('\n');
            out.push_str(&body);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Reading

const FRONT_MATTER_KEYS: [&str; 12] = [
    "format",
    "checkpoint",
    "title",
    "created",
    "workspace",
    "session",
    "trigger",
    "quality",
    "tokens_before",
    "tokens_after",
    "previous_checkpoint",
    "degraded_reason",
];

fn enum_value<T: serde::de::DeserializeOwned>(
    line: usize,
    key: &str,
    value: &str,
    allowed: &[&str],
) -> Result<T, FormatError> {
    serde_json::from_value(serde_json::Value::String(value.to_string())).map_err(|_| {
        format_err(
            line,
            format!("`{key}` to be one of {}", allowed.join(", ")),
            value,
        )
    })
}

const TRIGGERS: [&str; 8] = [
    "hard_limit",
    "milestone",
    "plan_pivot",
    "turn_complete",
    "auto_threshold",
    "user",
    "context_overflow",
    "handoff",
];

/// Front matter as read: each key with its value and line.
struct FrontMatter {
    values: Vec<(&'static str, String, usize)>,
    /// Line of the closing `---`.
    end_line: usize,
}

impl FrontMatter {
    fn get(&self, key: &str) -> Option<(&str, usize)> {
        self.values
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|(_, v, l)| (v.as_str(), *l))
    }

    fn optional(&self, key: &str) -> Option<String> {
        self.get(key)
            .map(|(v, _)| v.to_string())
            .filter(|v| !v.is_empty())
    }

    fn required(&self, key: &str) -> Result<(&str, usize), FormatError> {
        match self.get(key) {
            Some((v, l)) if !v.is_empty() => Ok((v, l)),
            Some((_, l)) => Err(format_err(l, format!("a value for `{key}`"), "nothing")),
            None => Err(format_err(
                self.end_line,
                format!("a `{key}: …` line before the closing `---`"),
                "---",
            )),
        }
    }

    fn number(&self, key: &str) -> Result<u64, FormatError> {
        let Some((v, l)) = self.get(key) else {
            return Ok(0);
        };
        let n: u64 = v.parse().map_err(|_| {
            let what = if v.starts_with('-') {
                "a whole number of tokens, not negative"
            } else {
                "a whole number of tokens"
            };
            format_err(l, format!("`{key}` to be {what}"), v)
        })?;
        if n > MAX_CAPSULE_TOKENS {
            return Err(format_err(
                l,
                format!(
                    "`{key}` at most {MAX_CAPSULE_TOKENS} tokens (no context is larger); write the real count, or 0 when it is not known"
                ),
                v,
            ));
        }
        Ok(n)
    }
}

/// A line and its 1-based number.
type NumberedLine<'a> = (usize, &'a str);

/// Lines with their 1-based numbers, line endings and trailing spaces removed.
fn numbered_lines(text: &str) -> Vec<NumberedLine<'_>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end()))
        .collect()
}

fn parse_front_matter(lines: &[(usize, &str)]) -> Result<(FrontMatter, usize), FormatError> {
    let mut i = lines
        .iter()
        .position(|(_, l)| !l.is_empty())
        .unwrap_or(lines.len());
    match lines.get(i) {
        Some((_, "---")) => {}
        Some((n, l)) => return Err(format_err(*n, "`---` opening the front matter", l)),
        None => return Err(format_err(1, "`---` opening the front matter", "")),
    }
    i += 1;
    let mut values: Vec<(&'static str, String, usize)> = Vec::new();
    loop {
        let Some(&(n, line)) = lines.get(i) else {
            let last = lines.last().map_or(1, |(n, _)| n + 1);
            return Err(format_err(
                last,
                "`---` closing the front matter",
                "the end of the file",
            ));
        };
        i += 1;
        if line == "---" {
            let fm = FrontMatter {
                values,
                end_line: n,
            };
            return Ok((fm, i));
        }
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((key, value)) = trimmed.split_once(':') else {
            return Err(format_err(
                n,
                "a `key: value` line or `---` closing the front matter",
                line,
            ));
        };
        let key = key.trim();
        let Some(&known) = FRONT_MATTER_KEYS.iter().find(|k| **k == key) else {
            let hint = crate::util::did_you_mean(key, &FRONT_MATTER_KEYS)
                .map(|k| format!(" (did you mean `{k}`?)"))
                .unwrap_or_default();
            return Err(format_err(
                n,
                format!(
                    "a front matter key: one of {}{hint}",
                    FRONT_MATTER_KEYS.join(", ")
                ),
                line,
            ));
        };
        if let Some((_, _, first)) = values.iter().find(|(k, _, _)| *k == known) {
            return Err(format_err(
                n,
                format!("each key once; `{known}` is already set on line {first}"),
                line,
            ));
        }
        values.push((known, value.trim().to_string(), n));
    }
}

static ITEM_COMMENT: LazyLock<Regex> = LazyLock::new(|| {
    // One line: a comment broken over lines is item text, so ids never hold line breaks.
    Regex::new(r"[ \t]*<!--[ \t]*(entries|entry)[ \t]*:[ \t]*([^<>\n]*?)[ \t]*-->\s*$")
        .expect("pattern compiles")
});

static VERIFICATION_ITEM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?s)^\[\s*([A-Za-z]+\s*(?:;[^\]]*)?)\]\s*(.*)$").expect("pattern compiles")
});

/// A list item as read, before it is interpreted for its section.
#[derive(Debug, Default)]
struct RawItem {
    line: usize,
    text: String,
    /// Decisions and errors only: the `Why:` or `Fix:` sub-item.
    rationale: Option<String>,
}

/// Collect the items of a list section. Lines outside items (notes people add) are returned
/// as ignored.
fn parse_items(
    lines: &[(usize, &str)],
    sub_item: &[&str],
    ignored: &mut Vec<IgnoredLine>,
) -> Vec<RawItem> {
    let mut items: Vec<RawItem> = Vec::new();
    let mut blank_run = 0usize;
    // Whether continuation lines attach to the current item (false after a note).
    let mut open = false;
    let mut in_rationale = false;
    for &(n, line) in lines {
        if line.is_empty() {
            blank_run += 1;
            continue;
        }
        let indented = line.starts_with(' ') || line.starts_with('\t');
        let content = line.trim_start();
        if !indented
            && (content.starts_with("- ")
                || content.starts_with("* ")
                || content == "-"
                || content == "*")
        {
            let text = content[1..].trim_start();
            items.push(RawItem {
                line: n,
                text: unescape_line(text).to_string(),
                rationale: None,
            });
            open = true;
            in_rationale = false;
        } else if indented && open {
            let item = items.last_mut().expect("an open item exists");
            let why = content
                .strip_prefix("- ")
                .or_else(|| content.strip_prefix("* "))
                .map(str::trim_start)
                .and_then(|t| {
                    sub_item
                        .iter()
                        .find_map(|label| strip_prefix_ignore_case(t, label))
                });
            match why {
                Some(rest) if item.rationale.is_none() => {
                    // The writer never escapes text after `Why: ` or `Fix: `.
                    item.rationale = Some(rest.trim_start().to_string());
                    in_rationale = true;
                }
                _ => {
                    let target = if in_rationale {
                        item.rationale.get_or_insert_with(String::new)
                    } else {
                        &mut item.text
                    };
                    target.push_str(&"\n".repeat(blank_run + 1));
                    target.push_str(unescape_line(content));
                }
            }
        } else {
            ignored.push(IgnoredLine {
                line: n,
                text: line.to_string(),
            });
            open = false;
        }
        blank_run = 0;
    }
    items
}

/// `text` less its `label`, written or not: a hand-edited file may drop it.
fn strip_label<'a>(text: &'a str, label: &str) -> &'a str {
    strip_prefix_ignore_case(text, label)
        .unwrap_or(text)
        .trim_start()
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// Split a trailing `<!-- entries: … -->` / `<!-- entry: … -->` comment off an item.
fn split_comment(text: &str) -> (String, Option<(String, String)>) {
    match ITEM_COMMENT.captures(text) {
        Some(c) => {
            let whole = c.get(0).expect("group 0");
            let key = c[1].to_ascii_lowercase();
            (
                text[..whole.start()].to_string(),
                Some((key, c[2].to_string())),
            )
        }
        None => (text.to_string(), None),
    }
}

fn plain_items(items: Vec<RawItem>) -> Vec<String> {
    items
        .into_iter()
        .map(|i| normalize_item(&i.text))
        .filter(|t| !t.is_empty())
        .collect()
}

fn file_items(items: Vec<RawItem>) -> Vec<FileArtifact> {
    items
        .into_iter()
        .filter_map(|i| {
            let (path, comment) = split_comment(&i.text);
            let path = normalize_item(&path);
            let entry_ids = comment
                .map(|(_, ids)| {
                    ids.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            (!path.is_empty()).then_some(FileArtifact {
                path,
                entry_ids,
                ..Default::default()
            })
        })
        .collect()
}

fn verification_items(items: Vec<RawItem>) -> Result<Vec<Verification>, FormatError> {
    let mut out = Vec::new();
    for i in items {
        let (text, comment) = split_comment(&i.text);
        let expected = "`[passed]`, `[failed]` or `[unknown]` before the command";
        let Some(c) = VERIFICATION_ITEM.captures(text.trim()) else {
            return Err(format_err(
                i.line,
                expected,
                &format!("- {}", text.lines().next().unwrap_or("")),
            ));
        };
        let (word, edited_since) = match c[1].split_once(';') {
            Some((w, mark))
                if mark
                    .trim()
                    .eq_ignore_ascii_case(EDITED_SINCE_MARK[1..].trim()) =>
            {
                (w.trim().to_ascii_lowercase(), true)
            }
            _ => (c[1].trim().to_ascii_lowercase(), false),
        };
        let outcome = match word.as_str() {
            "passed" => VerificationOutcome::Passed,
            "failed" => VerificationOutcome::Failed,
            "unknown" => VerificationOutcome::Unknown,
            _ => return Err(format_err(i.line, expected, &format!("[{}]", &c[1]))),
        };
        let command = normalize_item(&c[2]);
        if command.is_empty() {
            return Err(format_err(i.line, "a command after the outcome", &text));
        }
        let entry_id = comment
            .map(|(_, id)| id.trim().to_string())
            .unwrap_or_default();
        out.push(Verification {
            command,
            outcome,
            entry_id,
            edited_since,
        });
    }
    Ok(out)
}

/// Largest token count a capsule may state: far above any context window.
pub const MAX_CAPSULE_TOKENS: u64 = 10_000_000;

/// How far in the future `created` may be, for clocks that disagree between machines.
pub const CLOCK_SKEW_SECS: i64 = 10 * 60;

/// `tokens_after` counts the continuation, which holds the capsule itself: it may not be
/// below one token per this many bytes of the capsule as exported (about four bytes a token,
/// with a factor of four for tokenizers that disagree).
pub const MIN_BYTES_PER_STATED_TOKEN: u64 = 16;

/// 2000-01-01T00:00:00Z: no capsule is older.
const EARLIEST_CREATED_UNIX: i64 = 946_684_800;

static RFC3339: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|([+-])(\d{2}):(\d{2}))$",
    )
    .expect("pattern compiles")
});

/// Seconds since the Unix epoch of an RFC 3339 time, or `None` when it is not one (wrong
/// shape, or a field out of range such as February 30th or hour 25).
fn rfc3339_unix(s: &str) -> Option<i64> {
    let c = RFC3339.captures(s)?;
    let n = |i: usize| c[i].parse::<i64>().ok();
    let (y, mo, d, h, mi, sec) = (n(1)?, n(2)?, n(3)?, n(4)?, n(5)?, n(6)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo) || d < 1 || d > month_days[(mo - 1) as usize] {
        return None;
    }
    // Second 60 is a leap second.
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let offset = match c.get(9) {
        None => 0,
        Some(sign) => {
            let (oh, om) = (n(10)?, n(11)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let o = oh * 3600 + om * 60;
            if sign.as_str() == "-" {
                -o
            } else {
                o
            }
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let (yy, mm) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * mm + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + sec.min(59) - offset)
}

fn unix_secs(t: std::time::SystemTime) -> i64 {
    match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

/// Parse a `.capsule.md` file, validating its dates against the current time.
pub fn parse(text: &str) -> Result<Parsed, FormatError> {
    parse_at(text, std::time::SystemTime::now())
}

/// Parse a `.capsule.md` file; `now` is the time `created` may not be after (beyond
/// [`CLOCK_SKEW_SECS`]).
pub fn parse_at(text: &str, now: std::time::SystemTime) -> Result<Parsed, FormatError> {
    let lines = numbered_lines(text);
    let (fm, body_start) = parse_front_matter(&lines)?;

    let (format, format_line) = fm.required("format")?;
    if format != FORMAT {
        return Err(format_err(
            format_line,
            format!("`format: {FORMAT}` (the version this build reads)"),
            format,
        ));
    }
    let (checkpoint_id, _) = fm.required("checkpoint")?;
    let (created, created_line) = fm.required("created")?;
    let fix_created =
        "set it to when the capsule was written, e.g. `created: 2026-11-29T22:00:00Z`";
    match rfc3339_unix(created) {
        None => {
            return Err(format_err(
                created_line,
                format!("`created` to be an RFC 3339 time that exists; {fix_created}"),
                created,
            ))
        }
        Some(t) if t < EARLIEST_CREATED_UNIX => {
            return Err(format_err(
                created_line,
                format!("`created` not before 2000; {fix_created}"),
                created,
            ))
        }
        Some(t) if t > unix_secs(now) + CLOCK_SKEW_SECS => {
            return Err(format_err(
                created_line,
                format!(
                    "`created` not in the future (more than {} minutes ahead of this clock); {fix_created}",
                    CLOCK_SKEW_SECS / 60
                ),
                created,
            ))
        }
        Some(_) => {}
    }
    let (trigger, trigger_line) = fm.required("trigger")?;
    let trigger: Trigger = enum_value(trigger_line, "trigger", trigger, &TRIGGERS)?;
    let (quality, quality_line) = fm.required("quality")?;
    let quality: Quality = enum_value(quality_line, "quality", quality, &Quality::NAMES)?;
    let (quality, degraded_reason) =
        crate::session::capsule::model::read_quality(quality, fm.optional("degraded_reason"));

    let mut capsule = PortableCapsule {
        checkpoint_id: checkpoint_id.to_string(),
        title: fm.optional("title"),
        created: created.to_string(),
        workspace: fm.optional("workspace"),
        session: fm.optional("session"),
        trigger,
        quality,
        tokens: CapsuleTokens {
            before: fm.number("tokens_before")?,
            after: fm.number("tokens_after")?,
            short_tail: None,
        },
        previous_checkpoint_id: fm.optional("previous_checkpoint"),
        degraded_reason,
        state: CapsuleState::default(),
        artifacts: Artifacts::default(),
    };

    // Split the body at `## ` headings. Text before the first heading (the `# title` line,
    // notes) and sections this reader does not know are not part of the capsule.
    let mut ignored = Vec::new();
    let mut seen: Vec<(Section, usize)> = Vec::new();
    let mut preamble: Vec<NumberedLine> = Vec::new();
    // Each `## ` heading with the lines under it; `None` for a section this reader does not know.
    let mut sections: Vec<(Option<Section>, Vec<NumberedLine>)> = Vec::new();
    for &(n, line) in &lines[body_start.min(lines.len())..] {
        if let Some(name) = line.strip_prefix("## ") {
            let section = section_named(name);
            match section {
                Some(s) => {
                    if let Some((_, first)) = seen.iter().find(|(x, _)| *x == s) {
                        let expected = format!(
                            "each section once; `## {}` is already on line {first}",
                            name.trim()
                        );
                        return Err(format_err(n, expected, line));
                    }
                    seen.push((s, n));
                }
                None => ignored.push(IgnoredLine {
                    line: n,
                    text: line.to_string(),
                }),
            }
            sections.push((section, Vec::new()));
        } else if let Some((_, body)) = sections.last_mut() {
            body.push((n, line));
        } else {
            preamble.push((n, line));
        }
    }
    let notes = |lines: Vec<(usize, &str)>| {
        lines
            .into_iter()
            .filter(|(_, l)| !l.is_empty())
            .map(|(n, l)| IgnoredLine {
                line: n,
                text: l.to_string(),
            })
            .collect::<Vec<_>>()
    };
    preamble.retain(|(_, l)| !l.starts_with("# "));
    ignored.extend(notes(preamble));
    for (section, body) in sections {
        match section {
            Some(s) => fill_section(&mut capsule, s, &body, &mut ignored)?,
            None => ignored.extend(notes(body)),
        }
    }
    if capsule.quality == Quality::Model {
        // User requests, findings, errors and the current work came later than the other
        // sections: files written
        // before them have none.
        if let Some((_, name)) = SECTIONS
            .iter()
            .filter(|(s, _)| !LATER_SECTIONS.contains(s))
            .find(|(s, _)| !seen.iter().any(|(x, _)| x == s))
        {
            return Err(format_err(
                quality_line,
                format!(
                    "a `## {name}` section, which a `quality: model` capsule always has (docs/capsule-format.md lists them); add the heading, empty if there is nothing to say, or set `quality: degraded`"
                ),
                &format!("quality: {}", capsule.quality.as_str()),
            ));
        }
    }
    // The size of the capsule as it exports, not of the file: notes people add do not count,
    // and a file that loads still loads after export (export → load → export is stable).
    let size = write(&capsule).text.len() as u64;
    let after = capsule.tokens.after;
    if after != 0 && after.saturating_mul(MIN_BYTES_PER_STATED_TOKEN) < size {
        let line = fm.get("tokens_after").map_or(fm.end_line, |(_, l)| l);
        return Err(format_err(
            line,
            format!(
                "`tokens_after` of at least {} for a capsule of {size} bytes as exported (the continuation holds the capsule itself); write the real count, or 0 when it is not known",
                size.div_ceil(MIN_BYTES_PER_STATED_TOKEN)
            ),
            &format!("tokens_after: {after}"),
        ));
    }
    ignored.sort_by_key(|i| i.line);
    Ok(Parsed { capsule, ignored })
}

fn fill_section(
    c: &mut PortableCapsule,
    section: Section,
    lines: &[(usize, &str)],
    ignored: &mut Vec<IgnoredLine>,
) -> Result<(), FormatError> {
    if section == Section::Goal {
        let text: Vec<&str> = lines.iter().map(|(_, l)| unescape_line(l)).collect();
        c.state.goal = normalize_block(&text.join("\n"));
        return Ok(());
    }
    let lines: Vec<(usize, &str)> = lines
        .iter()
        .copied()
        .filter(|(_, l)| !(section == Section::Decisions && l.trim() == DECISIONS_NEED_A_MODEL))
        .collect();
    let sub_item: &[&str] = match section {
        Section::Decisions => &["why:", "rationale:"],
        Section::Errors => &["fix:", "fixed by:"],
        Section::Exchanges => &["agent:"],
        _ => &[],
    };
    let items = parse_items(&lines, sub_item, ignored);
    let s = &mut c.state;
    let a = &mut c.artifacts;
    match section {
        Section::Goal => unreachable!("handled above"),
        Section::Requests => s.requests = plain_items(items),
        Section::Constraints => s.constraints = plain_items(items),
        Section::Completed => s.completed = plain_items(items),
        Section::Active => s.active = plain_items(items),
        Section::Pending => s.pending = plain_items(items),
        Section::Findings => s.findings = plain_items(items),
        Section::Exchanges => {
            s.exchanges = items
                .into_iter()
                .map(|i| {
                    let user = normalize_item(&i.text);
                    Exchange {
                        user: strip_label(&user, USER_SAID).to_string(),
                        agent: i
                            .rationale
                            .as_deref()
                            .map(normalize_item)
                            .unwrap_or_default(),
                    }
                })
                .filter(|x| !x.user.is_empty())
                .collect();
        }
        Section::Errors => {
            s.errors = items
                .into_iter()
                .map(|i| ErrorFix {
                    error: normalize_item(&i.text),
                    fix: i
                        .rationale
                        .as_deref()
                        .map(normalize_item)
                        .unwrap_or_default(),
                })
                .filter(|e| !e.error.is_empty())
                .collect();
        }
        Section::Blockers => s.blockers = plain_items(items),
        Section::CurrentWork => s.current_work = plain_items(items),
        Section::NextSteps => s.next_steps = plain_items(items),
        Section::Decisions => {
            s.decisions = items
                .into_iter()
                .map(|i| Decision {
                    decision: normalize_item(&i.text),
                    rationale: i
                        .rationale
                        .as_deref()
                        .map(normalize_item)
                        .unwrap_or_default(),
                })
                .filter(|d| !d.decision.is_empty())
                .collect();
        }
        Section::FilesRead => a.read_files = file_items(items),
        Section::FilesModified => {
            a.modified_files = file_items(items);
            for f in &mut a.modified_files {
                read_change_mark(f);
            }
        }
        Section::Verification => a.verification = verification_items(items)?,
        Section::ActiveSkills => a.active_skills = plain_items(items),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Files

#[derive(Debug, thiserror::Error)]
pub enum PortableError {
    // Messages print their cause, so it is not also a `source()`: `{:#}` would repeat it.
    #[error("{path}: {cause}")]
    Io { path: String, cause: std::io::Error },
    #[error("{path} is {size} bytes, over the {limit}-byte limit for a capsule file. A capsule is a summary: trim pasted logs or file contents and load it again")]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("{path} is not UTF-8 text; a capsule file is Markdown")]
    NotText { path: String },
    #[error("{path}:{}: not a valid capsule file: expected {}, found {}. See docs/capsule-format.md", cause.line, cause.expected, cause.found)]
    Format { path: String, cause: FormatError },
}

impl PortableError {
    /// The I/O error behind this one, for advice on its kind (not a `source()`: see above).
    pub fn io_cause(&self) -> Option<&std::io::Error> {
        match self {
            PortableError::Io { cause, .. } => Some(cause),
            _ => None,
        }
    }
}

/// Read and parse a capsule file, refusing files over [`MAX_CAPSULE_FILE_BYTES`].
pub fn read_capsule_file(path: &Path) -> Result<Parsed, PortableError> {
    read_capsule_file_limited(path, MAX_CAPSULE_FILE_BYTES)
}

pub fn read_capsule_file_limited(path: &Path, limit: u64) -> Result<Parsed, PortableError> {
    let shown = path.display().to_string();
    let io = |cause| PortableError::Io {
        path: shown.clone(),
        cause,
    };
    let file = crate::files::open_regular(path).map_err(io)?;
    // Read at most one byte past the limit: a huge file is never loaded whole.
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        let size = std::fs::metadata(path)
            .map(|m| m.len())
            .unwrap_or(bytes.len() as u64);
        return Err(PortableError::TooLarge {
            path: shown,
            size,
            limit,
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| PortableError::NotText {
        path: shown.clone(),
    })?;
    parse(&text).map_err(|cause| PortableError::Format { path: shown, cause })
}

/// Write `text` to `path` atomically: a temporary file beside it, then a rename. The folder
/// must exist.
pub fn write_capsule_file(path: &Path, text: &str) -> Result<(), PortableError> {
    crate::files::require_parent(path)
        .and_then(|()| write_atomic(path, text.as_bytes()))
        .map_err(|cause| PortableError::Io {
            path: path.display().to_string(),
            cause,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample() -> PortableCapsule {
        PortableCapsule {
            checkpoint_id: "ck_0123456789ab".into(),
            title: Some("Port the selector".into()),
            created: "2026-11-29T22:00:00.000Z".into(),
            workspace: Some("/home/dev/pi-mono".into()),
            session: Some("d703a1a9".into()),
            trigger: Trigger::Handoff,
            quality: Quality::Model,
            tokens: CapsuleTokens { before: 151_000, after: 9_800, short_tail: None },
            previous_checkpoint_id: Some("ck_aaaaaaaaaaaa".into()),
            degraded_reason: None,
            state: CapsuleState {
                goal: "Port user-message-selector.ts to the new TUI.\n\n## Not a heading\n- not an item".into(),
                requests: vec!["read theme.md in full\n\nthen port the selector".into(), "- yes".into()],
                constraints: vec!["Keep the theme API".into(), "- starts with a dash".into()],
                completed: vec!["Read theme.md\nand theme.ts".into()],
                active: vec!["Writing the selector".into()],
                pending: vec![],
                decisions: vec![
                    Decision { decision: "Reuse SelectList".into(), rationale: "same keyboard handling".into() },
                    Decision { decision: "No new dependency".into(), rationale: String::new() },
                ],
                blockers: vec![],
                next_steps: vec!["Wire it into main.ts".into(), "# run the tests".into()],
                sources: Default::default(),
                ..Default::default()
            },
            artifacts: Artifacts {
                read_files: vec![FileArtifact { path: "docs/theme.md".into(), entry_ids: vec!["e3".into(), "e7".into()], ..Default::default() }],
                modified_files: vec![FileArtifact { path: "src/selector.ts".into(), entry_ids: vec![], ..Default::default() }],
                verification: vec![Verification {
                    command: "npm test -- selector".into(),
                    outcome: VerificationOutcome::Failed,
                    entry_id: "e12".into(),
                    edited_since: false,
                }],
                active_skills: vec!["tui-patterns".into()],
                work_trees: Vec::new(),
            },
        }
    }

    #[test]
    fn write_then_parse_gives_the_capsule_back() {
        let c = sample();
        let out = write(&c);
        let parsed = parse(&out.text).unwrap();
        assert_eq!(parsed.capsule, c, "{}", out.text);
        assert!(parsed.ignored.is_empty(), "{:?}", parsed.ignored);
        assert_eq!(write(&parsed.capsule).text, out.text);
    }

    #[test]
    fn a_degraded_capsule_without_decisions_has_an_empty_section_and_round_trips() {
        let mut c = sample();
        c.quality = Quality::Degraded;
        c.degraded_reason = Some("the summarizer timed out after 15000 ms".into());
        c.state.decisions.clear();
        let out = write(&c);
        assert!(
            out.text.contains("## Decisions\n\n## Findings"),
            "{}",
            out.text
        );
        assert!(!out.text.contains(DECISIONS_NEED_A_MODEL));
        // Files written by earlier versions carry a line saying a model was needed: dropped.
        let legacy = out.text.replace(
            "## Decisions\n",
            &format!("## Decisions\n\n{DECISIONS_NEED_A_MODEL}\n"),
        );
        assert_eq!(
            parse(&legacy).unwrap().capsule,
            parse(&out.text).unwrap().capsule
        );
        let parsed = parse(&out.text).unwrap();
        assert!(parsed.capsule.state.decisions.is_empty());
        assert!(parsed.ignored.is_empty(), "{:?}", parsed.ignored);
        assert_eq!(
            write(&parsed.capsule).text,
            out.text,
            "export → load → export"
        );
    }

    #[test]
    fn a_file_without_a_user_requests_section_loads_with_none() {
        let text = write(&sample()).text;
        let start = text.find("## User requests").unwrap();
        let end = text.find("## Constraints").unwrap();
        let old = format!("{}{}", &text[..start], &text[end..]);
        assert_eq!(
            sample().quality,
            Quality::Model,
            "a model capsule, which has every other section"
        );
        let parsed = parse(&old).unwrap();
        assert!(parsed.capsule.state.requests.is_empty());
        assert_eq!(parsed.capsule.state.constraints, sample().state.constraints);
    }

    #[test]
    fn recent_exchanges_round_trip_with_their_line_breaks() {
        let mut c = sample();
        c.state.exchanges = vec![
            Exchange {
                user: "why does the hook fire twice?\n\n- once on save\n- once on commit".into(),
                agent: "It is registered in two places.\nShall I remove one?".into(),
            },
            Exchange {
                user: "yes".into(),
                agent: String::new(),
            },
        ];
        let out = write(&c);
        assert!(
            out.text
                .contains("## Recent conversation\n\n- User: why does the hook fire twice?"),
            "{}",
            out.text
        );
        let parsed = parse(&out.text).unwrap();
        assert_eq!(parsed.capsule.state.exchanges, c.state.exchanges);
        assert_eq!(
            write(&parsed.capsule).text,
            out.text,
            "export → load → export is byte-identical"
        );
    }

    #[test]
    fn findings_errors_change_marks_and_checks_run_before_edits_round_trip() {
        let mut c = sample();
        c.state.findings = vec!["root cause: a timing issue at PostCommit".into()];
        c.state.current_work = vec![
            "The agent's last words: \"Running the tests.\"".into(),
            "ran `cargo test` — failed: \"error: 1 failed\"".into(),
        ];
        c.state.errors = vec![
            ErrorFix {
                error: "E0599: no method `tick`".into(),
                fix: "import the Tick trait".into(),
            },
            ErrorFix {
                error: "login test times out".into(),
                fix: String::new(),
            },
        ];
        c.artifacts.modified_files = vec![
            FileArtifact {
                path: "out.html".into(),
                entry_ids: vec!["e4".into()],
                deleted: true,
                ..Default::default()
            },
            FileArtifact {
                path: "src/new name.rs".into(),
                renamed_from: Some("src/old.rs".into()),
                ..Default::default()
            },
            FileArtifact {
                path: "src/plain.rs".into(),
                ..Default::default()
            },
        ];
        c.artifacts.verification = vec![Verification {
            command: "cargo test".into(),
            outcome: VerificationOutcome::Passed,
            entry_id: "e9".into(),
            edited_since: true,
        }];
        let out = write(&c);
        for line in [
            "## Findings\n\n- root cause: a timing issue at PostCommit\n",
            "## Current work\n\n- The agent's last words: \"Running the tests.\"\n- ran `cargo test` — failed: \"error: 1 failed\"\n",
            "- E0599: no method `tick`\n  - Fix: import the Tick trait\n- login test times out\n",
            "- out.html (deleted) <!-- entries: e4 -->\n",
            "- src/new name.rs (renamed from src/old.rs)\n",
            "- [passed; edited since] cargo test <!-- entry: e9 -->\n",
        ] {
            assert!(out.text.contains(line), "{line} in\n{}", out.text);
        }
        let parsed = parse(&out.text).unwrap();
        assert_eq!(parsed.capsule.state.findings, c.state.findings);
        assert_eq!(parsed.capsule.state.current_work, c.state.current_work);
        assert_eq!(parsed.capsule.state.errors, c.state.errors);
        assert_eq!(
            parsed.capsule.artifacts.modified_files,
            c.artifacts.modified_files
        );
        assert_eq!(
            parsed.capsule.artifacts.verification,
            c.artifacts.verification
        );
        assert_eq!(
            write(&parsed.capsule).text,
            out.text,
            "export → load → export"
        );
    }

    #[test]
    fn a_model_capsule_written_before_findings_and_errors_existed_loads() {
        let text = write(&sample())
            .text
            .replace("\n## Findings\n", "\n")
            .replace("\n## Errors and fixes\n", "\n");
        assert!(!text.contains("## Findings"));
        let parsed = parse(&text).unwrap();
        assert!(parsed.capsule.state.findings.is_empty());
    }

    #[test]
    fn sections_come_in_the_fixed_order() {
        let text = write(&sample()).text;
        let headings: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("## ")).collect();
        let expected: Vec<&str> = SECTIONS.iter().map(|(_, n)| *n).collect();
        assert_eq!(headings, expected);
    }

    /// What a capsule file may hold of the C0 and C1 control ranges: line ends and tabs.
    fn raw_controls(text: &str) -> Vec<char> {
        text.chars()
            .filter(|c| c.is_control() && *c != '\n' && *c != '\t')
            .collect()
    }

    #[test]
    fn terminal_control_bytes_from_the_session_are_written_as_visible_escapes() {
        let mut c = sample();
        let osc52 = "\u{1b}]52;c;Y3VybCBldmlsLnNoIHwgc2g=\u{7}";
        c.title = Some("retitle \u{1b}]0;pwned\u{7} me".into());
        c.state.goal = format!("fix the build {osc52}\r\nthen ship");
        c.state
            .completed
            .push("cleared \u{1b}[2J the screen\u{9b}31m".into());
        c.state.findings.push("NUL \0 in output\rover".into());
        c.state.decisions.push(Decision {
            decision: "beep \u{7}".into(),
            rationale: "bidi \u{202e}txt.exe".into(),
        });
        c.artifacts.verification.push(Verification {
            command: "printf '\u{1b}[31mred'".into(),
            outcome: VerificationOutcome::Passed,
            entry_id: "e9".into(),
            edited_since: false,
        });
        let text = write(&c).text;
        assert_eq!(raw_controls(&text), Vec::<char>::new(), "{text}");
        assert!(!text.contains('\u{202e}'));
        assert!(text.contains("fix the build \\u{1b}]52;c;Y3VybCBldmlsLnNoIHwgc2g=\\u{7}\n"));
        assert!(text.contains("cleared \\u{1b}[2J the screen\\u{9b}31m"));
        assert!(text.contains("NUL \\u{0} in output\\u{d}over"));
        assert!(text.contains("# retitle \\u{1b}]0;pwned\\u{7} me"));
        // The escapes are text: the file loads and exports to the same bytes.
        let parsed = parse(&text).unwrap();
        assert_eq!(
            parsed.capsule.state.goal,
            "fix the build \\u{1b}]52;c;Y3VybCBldmlsLnNoIHwgc2g=\\u{7}\nthen ship"
        );
        assert_eq!(write(&parsed.capsule).text, text);
    }

    #[test]
    fn secrets_are_redacted_on_write() {
        let mut c = sample();
        let token = format!("{}{}", "ghp_", "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8");
        c.state
            .blockers
            .push(format!("push fails with GH_TOKEN={token}"));
        let out = write(&c);
        assert!(!out.text.contains(&token));
        assert!(out.text.contains("[redacted:github_token]"));
        assert_eq!(out.redactions.total(), 1);
        // Exporting the loaded file again changes nothing.
        let again = write(&parse(&out.text).unwrap().capsule);
        assert_eq!(again.text, out.text);
        assert!(again.redactions.is_empty());
    }

    #[test]
    fn a_key_block_split_over_two_items_cannot_swallow_the_sections_between() {
        let mut c = sample();
        let begin = format!("-----BEGIN {}-----", "PRIVATE KEY");
        let end = format!("-----END {}-----", "PRIVATE KEY");
        c.state.constraints = vec![format!(
            "{begin}\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
        )];
        c.state.next_steps = vec![format!("rotate the key ending in {end}")];
        let out = write(&c);
        let parsed = parse(&out.text).unwrap().capsule;
        assert_eq!(
            parsed.state.constraints,
            vec!["[redacted:private_key]"],
            "{}",
            out.text
        );
        assert_eq!(parsed.state.active, c.state.active, "{}", out.text);
        assert_eq!(parsed.state.decisions, c.state.decisions);
        assert_eq!(
            parsed.state.next_steps,
            vec![format!("rotate the key ending in {end}")]
        );
    }

    #[test]
    fn loaded_entry_reexports_identically() {
        let c = sample();
        let text = write(&c).text;
        let parsed = parse(&text).unwrap().capsule;
        let entry = parsed.to_loaded_entry("ck_ffffffffffff".into(), "/tmp/x.capsule.md");
        assert_eq!(entry.origin, Origin::Loaded);
        assert_eq!(entry.first_kept_entry_id, None);
        let back = PortableCapsule::from_entry(
            &entry,
            "2030-01-01T00:00:00Z",
            Some("/elsewhere"),
            Some("s9"),
        );
        assert_eq!(write(&back).text, text);
    }

    const HAND_EDITED: &str = "\u{feff}\r
---\r
# written by hand\r
format:soba-capsule/1\r
checkpoint :  ck_hand   \r
created: 2026-11-29T10:00:00Z\r
trigger: user\r
quality: degraded\r
---\r
Some notes before the first section.\r
\r
## Next Steps   \r
\r
* ship it\r
\r
\r
## Goal\r
\r
   Make the build green.   \r
\r
## Decisions\r
- Pin the toolchain\r
    * rationale:   CI and laptops differ\r
    and the lockfile is not enough\r
\r
A note someone added between items.\r
- Drop the nightly job\r
## Verification\r
- [ Passed ]   cargo test\r
  --workspace\r
## Team notes\r
- call Sam about the release\r
";

    #[test]
    fn hand_edited_file_is_read() {
        let parsed = parse(HAND_EDITED).unwrap();
        let c = &parsed.capsule;
        assert_eq!(c.checkpoint_id, "ck_hand");
        assert_eq!(c.trigger, Trigger::User);
        // `degraded` with no failure named: a file written before `local` existed.
        assert_eq!(c.quality, Quality::Local);
        assert_eq!(c.title, None);
        assert_eq!(c.tokens, CapsuleTokens::default());
        assert_eq!(c.state.goal, "   Make the build green.");
        assert_eq!(c.state.next_steps, vec!["ship it"]);
        assert_eq!(
            c.state.decisions,
            vec![
                Decision {
                    decision: "Pin the toolchain".into(),
                    rationale: "CI and laptops differ\nand the lockfile is not enough".into()
                },
                Decision {
                    decision: "Drop the nightly job".into(),
                    rationale: String::new()
                },
            ]
        );
        assert_eq!(
            c.artifacts.verification,
            vec![Verification {
                command: "cargo test\n--workspace".into(),
                outcome: VerificationOutcome::Passed,
                entry_id: String::new(),
                edited_since: false,
            }]
        );
        let ignored: Vec<usize> = parsed.ignored.iter().map(|i| i.line).collect();
        assert_eq!(ignored, vec![10, 26, 31, 32], "{:?}", parsed.ignored);
        // Its canonical form reads back to the same capsule and writes the same bytes.
        let canonical = write(c).text;
        let again = parse(&canonical).unwrap();
        assert_eq!(&again.capsule, c);
        assert_eq!(write(&again.capsule).text, canonical);
    }

    fn err(text: &str) -> FormatError {
        parse(text).unwrap_err()
    }

    const HEAD: &str =
        "---\nformat: soba-capsule/1\ncheckpoint: ck_1\ncreated: 2026-01-01T00:00:00Z\n";

    #[test]
    fn malformed_files_name_the_line_and_what_was_expected() {
        let e = err("# Capsule\n---\n");
        assert_eq!(
            (e.line, e.expected.as_str()),
            (1, "`---` opening the front matter")
        );
        assert_eq!(
            e.to_string(),
            "line 1: expected `---` opening the front matter, found `# Capsule`"
        );

        let e = err("");
        assert_eq!(e.line, 1);

        let e = err(&format!("{HEAD}trigger: user\nquality: model\n\n## Goal\n"));
        assert_eq!(
            (e.line, e.expected.as_str()),
            (9, "`---` closing the front matter")
        );

        let e = err(&format!("{HEAD}trigger user\n---\n"));
        assert_eq!(e.line, 5);
        assert!(e.expected.contains("`key: value`"), "{e}");

        let e = err(&format!("{HEAD}triger: user\n---\n"));
        assert_eq!(e.line, 5);
        assert!(e.expected.contains("did you mean `trigger`"), "{e}");

        let e = err(&format!("{HEAD}trigger: user\ntrigger: user\n---\n"));
        assert_eq!(e.line, 6);
        assert!(e.expected.contains("already set on line 5"), "{e}");

        let e = err(&format!("{HEAD}trigger: sometimes\nquality: model\n---\n"));
        assert_eq!(e.line, 5);
        assert!(
            e.expected.contains("hard_limit") && e.found == "`sometimes`",
            "{e}"
        );

        let e = err(&format!("{HEAD}trigger: user\nquality: great\n---\n"));
        assert_eq!(
            (e.line, e.expected.as_str()),
            (6, "`quality` to be one of model, local, degraded")
        );

        let e = err(&format!("{HEAD}quality: model\n---\n"));
        assert_eq!(
            (e.line, e.expected.as_str()),
            (6, "a `trigger: …` line before the closing `---`")
        );

        let e = err(&format!(
            "{HEAD}trigger: user\nquality: model\ntokens_after: lots\n---\n"
        ));
        assert_eq!(e.line, 7);
        assert!(e.expected.contains("whole number"), "{e}");

        let e = err("---\nformat: soba-capsule/2\n---\n");
        assert_eq!(e.line, 2);
        assert!(e.expected.contains("soba-capsule/1"), "{e}");

        let ok_head = format!("{HEAD}trigger: user\nquality: model\n---\n");
        let e = err(&format!("{ok_head}\n## Goal\nx\n## Goal\ny\n"));
        assert_eq!(e.line, 11);
        assert!(e.expected.contains("already on line 9"), "{e}");

        let e = err(&format!("{ok_head}## Verification\n- cargo test\n"));
        assert_eq!(e.line, 9);
        assert!(e.expected.contains("`[passed]`"), "{e}");

        let e = err(&format!(
            "{ok_head}## Verification\n- [skipped] cargo test\n"
        ));
        assert_eq!((e.line, e.found.as_str()), (9, "`[skipped]`"));

        let e = err(&format!("{ok_head}## Verification\n- [passed]\n"));
        assert_eq!(e.line, 9);
    }

    /// 2026-12-01T00:00:00Z, the clock of the validation tests.
    fn test_now() -> std::time::SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_083_200)
    }

    fn refusal(text: &str) -> FormatError {
        parse_at(text, test_now()).unwrap_err()
    }

    /// A complete model capsule with `replace` applied to its text.
    fn sample_with(from: &str, to: &str) -> String {
        let text = write(&sample()).text;
        assert!(text.contains(from), "{from} not in\n{text}");
        text.replacen(from, to, 1)
    }

    #[test]
    fn model_capsule_missing_a_section_is_refused() {
        let text = sample_with("## Blockers\n", "");
        let e = refusal(&text);
        assert_eq!(e.line, 9, "{e}");
        assert!(e.expected.contains("`## Blockers`"), "{e}");
        assert!(e.expected.contains("quality: degraded"), "{e}");
        assert_eq!(e.found, "`quality: model`");
        // The same file, honest about its quality, loads with the section empty.
        let degraded = text.replace("quality: model", "quality: degraded");
        assert!(parse_at(&degraded, test_now())
            .unwrap()
            .capsule
            .state
            .blockers
            .is_empty());
    }

    #[test]
    fn model_capsule_with_every_section_empty_loads() {
        let mut c = sample();
        c.state = CapsuleState::default();
        c.artifacts = Artifacts::default();
        let parsed = parse_at(&write(&c).text, test_now()).unwrap();
        assert_eq!(parsed.capsule, c);
    }

    #[test]
    fn impossible_created_dates_are_refused() {
        for bad in [
            "2026-02-30T10:00:00Z",
            "2026-13-01T10:00:00Z",
            "2026-11-29T25:00:00Z",
            "2026-11-29T22:61:00Z",
            "2026-11-29T22:00:00+24:00",
            "2026-11-29",
            "yesterday",
            "2023-02-29T00:00:00Z",
        ] {
            let e = refusal(&sample_with("2026-11-29T22:00:00.000Z", bad));
            assert_eq!(e.line, 5, "{bad}: {e}");
            assert!(e.expected.contains("RFC 3339"), "{bad}: {e}");
            assert_eq!(e.found, format!("`{bad}`"));
        }
    }

    #[test]
    fn created_before_2000_is_refused() {
        let e = refusal(&sample_with(
            "2026-11-29T22:00:00.000Z",
            "1999-12-31T23:59:59Z",
        ));
        assert_eq!(e.line, 5);
        assert!(e.expected.contains("not before 2000"), "{e}");
    }

    #[test]
    fn created_in_the_future_beyond_clock_skew_is_refused() {
        let e = refusal(&sample_with(
            "2026-11-29T22:00:00.000Z",
            "2026-12-01T00:11:00Z",
        ));
        assert_eq!(e.line, 5);
        assert!(e.expected.contains("not in the future"), "{e}");
        // An offset counts: 01:05+01:00 is 00:05Z, within the skew.
        for ok in [
            "2026-12-01T00:09:00Z",
            "2026-12-01T01:05:00+01:00",
            "2026-11-30T19:30:00-04:30",
        ] {
            let parsed = parse_at(&sample_with("2026-11-29T22:00:00.000Z", ok), test_now());
            assert!(parsed.is_ok(), "{ok}: {parsed:?}");
        }
    }

    #[test]
    fn leap_days_and_leap_seconds_are_valid_dates() {
        assert_eq!(
            rfc3339_unix("2000-01-01T00:00:00Z"),
            Some(EARLIEST_CREATED_UNIX)
        );
        assert_eq!(rfc3339_unix("2024-02-29T00:00:00Z"), Some(1_709_164_800));
        assert_eq!(rfc3339_unix("2016-12-31T23:59:60Z"), Some(1_483_228_799));
        assert_eq!(
            rfc3339_unix("2026-12-01T00:00:00.5z"),
            Some(unix_secs(test_now()))
        );
        assert!(rfc3339_unix("2000-02-29T00:00:00Z").is_some());
        assert_eq!(rfc3339_unix("1900-02-29T00:00:00Z"), None);
    }

    #[test]
    fn negative_token_counts_are_refused() {
        let e = refusal(&sample_with(
            "tokens_before: 151000",
            "tokens_before: -151000",
        ));
        assert_eq!(e.line, 10);
        assert!(e.expected.contains("not negative"), "{e}");
    }

    #[test]
    fn token_counts_over_ten_million_are_refused() {
        let e = refusal(&sample_with(
            "tokens_before: 151000",
            "tokens_before: 10000001",
        ));
        assert_eq!(e.line, 10);
        assert!(e.expected.contains("at most 10000000"), "{e}");
        let e = refusal(&sample_with(
            "tokens_after: 9800",
            "tokens_after: 99999999999999",
        ));
        assert_eq!(e.line, 11);
        let at_limit = sample_with("tokens_before: 151000", "tokens_before: 10000000");
        assert!(parse_at(&at_limit, test_now()).is_ok());
    }

    #[test]
    fn tokens_after_smaller_than_the_capsule_itself_is_refused() {
        let mut c = sample();
        c.state.goal = "word ".repeat(2000);
        c.tokens.after = 9_800;
        let text = write(&c).text;
        assert!(parse_at(&text, test_now()).is_ok());
        let small = text.replace("tokens_after: 9800", "tokens_after: 50");
        let e = refusal(&small);
        assert_eq!(e.line, 11);
        let least = (small.len() as u64).div_ceil(MIN_BYTES_PER_STATED_TOKEN);
        // Notes added by hand do not count towards the capsule's size.
        let noted = text.replace(
            "# Port the selector\n",
            &format!("# Port the selector\n{}\n", "note ".repeat(40_000)),
        );
        assert!(parse_at(&noted, test_now()).is_ok());
        assert!(
            e.expected
                .contains(&format!("at least {least} for a capsule")),
            "{e}"
        );
        // 0 means not known and is never refused.
        let unknown = text.replace("tokens_after: 9800", "tokens_after: 0");
        assert!(parse_at(&unknown, test_now()).is_ok());
    }

    #[test]
    fn degraded_capsule_dates_and_counts_are_validated_too() {
        let degraded = sample_with("quality: model", "quality: degraded");
        let e = refusal(&degraded.replace("2026-11-29T22:00:00.000Z", "2026-04-31T00:00:00Z"));
        assert_eq!(e.line, 5);
        let e = refusal(&degraded.replace("tokens_after: 9800", "tokens_after: 20000000"));
        assert_eq!(e.line, 11);
    }

    #[test]
    fn hand_edited_valid_model_capsule_still_loads() {
        // Reordered sections, CRLF, `*` bullets, odd key spacing, a note, a `+02:00` date.
        let text = "\u{feff}---\r\nformat:soba-capsule/1\r\ncheckpoint : ck_hand\r\n\
created: 2026-11-30T09:15:00+02:00\r\ntrigger: handoff\r\nquality: MODEL_FIXED\r\n\
tokens_before: 40000\r\ntokens_after:  3000\r\n---\r\n# Hand-off\r\nA note.\r\n\
## next steps\r\n* ship it\r\n## Goal\r\nMake the build green.\r\n## Constraints\r\n\
## Completed\r\n## Active\r\n## Pending\r\n## Decisions\r\n## Blockers\r\n\
## Files read\r\n## Files modified\r\n## Verification\r\n- [ Passed ] cargo test\r\n\
## ACTIVE SKILLS\r\n"
            .replace("MODEL_FIXED", "model");
        let parsed = parse_at(&text, test_now()).unwrap();
        assert_eq!(parsed.capsule.quality, Quality::Model);
        assert_eq!(parsed.capsule.state.next_steps, vec!["ship it"]);
        assert_eq!(
            parsed.capsule.tokens,
            CapsuleTokens {
                before: 40_000,
                after: 3_000,
                short_tail: None,
            }
        );
        assert_eq!(parsed.ignored.len(), 1);
    }

    #[test]
    fn oversized_files_are_refused_before_parsing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.capsule.md");
        let mut c = sample();
        c.state.goal = "x".repeat(300);
        write_capsule_file(&path, &write(&c).text).unwrap();
        let err = read_capsule_file_limited(&path, 256).unwrap_err();
        assert!(
            matches!(err, PortableError::TooLarge { limit: 256, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("over the 256-byte limit"), "{err}");
        assert_eq!(
            read_capsule_file_limited(&path, MAX_CAPSULE_FILE_BYTES)
                .unwrap()
                .capsule,
            c
        );
    }

    #[test]
    fn file_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.capsule.md");
        std::fs::write(&path, "---\nformat soba\n---\n").unwrap();
        let msg = read_capsule_file(&path).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!("{}:2: not a valid capsule file", path.display())),
            "{msg}"
        );
        std::fs::write(&path, [0xff, 0xfe, 0x00]).unwrap();
        assert!(matches!(
            read_capsule_file(&path),
            Err(PortableError::NotText { .. })
        ));
        let missing = dir.path().join("missing.capsule.md");
        assert!(matches!(
            read_capsule_file(&missing),
            Err(PortableError::Io { .. })
        ));
    }

    mod round_trip {
        use super::*;
        use proptest::prelude::*;

        /// Text made of the pieces that matter to the format: markers, escapes, comments,
        /// blank lines, indentation.
        fn text() -> impl Strategy<Value = String> {
            const PIECES: [&str; 23] = [
                "a",
                "b c",
                " ",
                "\n",
                "\n\n",
                "\t",
                "- ",
                "* ",
                "#",
                "## x",
                "\\",
                "<!-- entries: e1 -->",
                "Why: ",
                "[passed] ",
                "---",
                "\r\n",
                "é",
                "  - Why: y",
                "\u{1b}]52;c;aGk=\u{7}",
                "\u{9b}",
                "\0",
                "\r",
                "\\u{1b}",
            ];
            proptest::collection::vec(proptest::sample::select(&PIECES[..]), 0..8)
                .prop_map(|v| v.concat())
        }

        fn capsule() -> impl Strategy<Value = PortableCapsule> {
            let list = || proptest::collection::vec(text(), 0..3);
            (
                text(),
                list(),
                list(),
                proptest::collection::vec((text(), text()), 0..3),
                list(),
                list(),
                text(),
            )
                .prop_map(
                    |(goal, constraints, steps, decisions, files, commands, title)| {
                        let mut c = tests::sample();
                        c.title = Some(title);
                        c.state.goal = goal;
                        c.state.constraints = constraints;
                        c.state.next_steps = steps;
                        c.state.decisions = decisions
                            .into_iter()
                            .map(|(decision, rationale)| Decision {
                                decision,
                                rationale,
                            })
                            .collect();
                        c.artifacts.read_files = files
                            .into_iter()
                            .map(|path| FileArtifact {
                                path,
                                entry_ids: vec!["e1".into()],
                                ..Default::default()
                            })
                            .collect();
                        c.artifacts.verification = commands
                            .into_iter()
                            .map(|command| Verification {
                                command,
                                outcome: VerificationOutcome::Unknown,
                                entry_id: "e9".into(),
                                edited_since: false,
                            })
                            .collect();
                        c
                    },
                )
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

            #[test]
            fn export_load_export_is_byte_identical(c in capsule()) {
                let first = write(&c).text;
                let parsed = parse(&first).map_err(|e| TestCaseError::fail(format!("{e}\n{first}")))?;
                prop_assert!(parsed.ignored.is_empty(), "{:?}\n{}", parsed.ignored, first);
                let second = write(&parsed.capsule).text;
                prop_assert_eq!(&second, &first);
                prop_assert_eq!(parse(&second).unwrap().capsule, parsed.capsule);
            }
        }
    }
}
