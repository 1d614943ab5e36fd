//! Artifacts are facts: read and modified files, verification commands with their last
//! outcome, and active skills, taken from tool calls, their results, `file` entries and
//! `skill` entries — never from a model's prose. Every item carries the entries it came from.

// foldhash, seeded per process: paths and commands of the whole history are hashed here.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

use serde_json::Value;

use super::model::{Artifacts, FileArtifact, Verification, VerificationOutcome};
use super::shell::analyze_command_value;
use crate::session::entry::{blocks_text, Entry, EntryBody, FileOp, ToolResultEntry};

pub use crate::tool_mapping::ToolMapping;

/// Accumulates facts over entries in order; later facts update earlier ones.
#[derive(Debug, Default, Clone)]
pub struct ArtifactCollector {
    workspace: String,
    read: Vec<FileArtifact>,
    read_at: HashMap<String, usize>,
    modified: Vec<FileArtifact>,
    modified_at: HashMap<String, usize>,
    verification: Vec<Verification>,
    verification_at: HashMap<String, usize>,
    skills: Vec<String>,
    /// Verification calls waiting for their result: call id → command.
    pending_checks: HashMap<String, String>,
    /// Checks still running in a process the agent polls (Codex `exec_command` answers
    /// "Process running with session ID N"; `write_stdin` to N reads on): session → command.
    running_checks: HashMap<String, String>,
    /// When each check last ran, so the list reads oldest run first.
    last_run: HashMap<String, u64>,
    run_seq: u64,
    /// When each file was last read or modified, to keep the newest when the lists are capped.
    touched: HashMap<String, u64>,
    seq: u64,
    /// Modified-list slots of files renamed since (their history moved to the new name).
    renamed_away: Vec<usize>,
}

impl ArtifactCollector {
    pub fn new(workspace: &str) -> Self {
        ArtifactCollector {
            workspace: workspace.trim_end_matches('/').to_string(),
            ..Default::default()
        }
    }

    /// Start from an earlier capsule's artifacts, so a roll-forward loses nothing.
    pub fn seed(&mut self, previous: &Artifacts) {
        for f in &previous.read_files {
            for id in &f.entry_ids {
                self.add_read(&f.path, id);
            }
            if f.entry_ids.is_empty() {
                self.add_read(&f.path, "");
            }
        }
        for f in &previous.modified_files {
            for id in &f.entry_ids {
                self.add_modified(&f.path, id);
            }
            if let Some(i) = self.add_modified(&f.path, "") {
                self.modified[i].deleted = f.deleted;
                self.modified[i].renamed_from = f.renamed_from.clone();
            }
        }
        for v in &previous.verification {
            self.set_verification(&v.command, v.outcome, &v.entry_id);
        }
        for s in &previous.active_skills {
            if !self.skills.contains(s) {
                self.skills.push(s.clone());
            }
        }
    }

    fn relative(&self, path: &str) -> String {
        let p = path.trim();
        let p = p.strip_prefix("./").unwrap_or(p);
        if !self.workspace.is_empty() {
            if let Some(rest) = p.strip_prefix(&self.workspace) {
                if let Some(rel) = rest.strip_prefix('/') {
                    return rel.to_string();
                }
            }
        }
        p.to_string()
    }

    /// A path outside the workspace (a scratch clone in /tmp, a file in the home folder) is
    /// not the project's work: read there, perhaps, but never listed as modified.
    fn outside_workspace(&self, relative: &str) -> bool {
        let absolute = relative.starts_with('/') || relative.starts_with('~');
        let scratch = ["/tmp/", "/private/tmp/", "/var/folders/", "/dev/"]
            .iter()
            .any(|d| relative.starts_with(d));
        scratch || (absolute && !self.workspace.is_empty())
    }

    fn touch(&mut self, path: &str) {
        self.seq += 1;
        self.touched.insert(path.to_string(), self.seq);
    }

    fn add_read(&mut self, path: &str, entry_id: &str) {
        let path = self.relative(path);
        if path.is_empty() {
            return;
        }
        self.touch(&path);
        add_file(&mut self.read, &mut self.read_at, path, entry_id);
    }

    /// Record a modification; returns the file's index in the modified list.
    fn add_modified(&mut self, path: &str, entry_id: &str) -> Option<usize> {
        let path = self.relative(path);
        if path.is_empty() || self.outside_workspace(&path) {
            return None;
        }
        self.touch(&path);
        let i = add_file(&mut self.modified, &mut self.modified_at, path, entry_id);
        // Written again after a deletion: it exists now.
        self.modified[i].deleted = false;
        Some(i)
    }

    fn add_deleted(&mut self, path: &str, entry_id: &str) {
        if let Some(i) = self.add_modified(path, entry_id) {
            self.modified[i].deleted = true;
        }
    }

    /// `from` now lives at `to`: one entry, under the new name, with the history of both.
    fn add_renamed(&mut self, from: &str, to: &str, entry_id: &str) {
        let from_rel = self.relative(from);
        let Some(i) = self.add_modified(to, entry_id) else {
            return;
        };
        if let Some(j) = self.modified_at.get(&from_rel).copied() {
            let old = self.modified[j].clone();
            let earlier_name = old.renamed_from.clone().unwrap_or(from_rel.clone());
            for id in old.entry_ids {
                if !self.modified[i].entry_ids.contains(&id) {
                    self.modified[i].entry_ids.insert(0, id);
                }
            }
            self.modified[i].renamed_from = Some(earlier_name);
            // Forgotten, not removed, so the indices of the others stay put.
            self.modified_at.remove(&from_rel);
            self.renamed_away.push(j);
        } else {
            self.modified[i].renamed_from = Some(from_rel);
        }
    }

    fn set_verification(&mut self, command: &str, outcome: VerificationOutcome, entry_id: &str) {
        let v = Verification {
            command: command.to_string(),
            outcome,
            entry_id: entry_id.to_string(),
            edited_since: false,
        };
        match self.verification_at.get(command) {
            Some(&i) => {
                // The last run decides the outcome and the place in the list.
                self.verification[i] = v;
            }
            None => {
                self.verification_at
                    .insert(command.to_string(), self.verification.len());
                self.verification.push(v);
            }
        }
        self.run_seq += 1;
        self.last_run.insert(command.to_string(), self.run_seq);
    }

    /// Take the facts of one entry.
    pub fn observe(&mut self, entry: &Entry, mapping: &ToolMapping) {
        match &entry.body {
            EntryBody::Message(_) => {
                for (call_id, name, input) in entry.tool_calls() {
                    self.observe_call(&entry.id, call_id, name, input, mapping);
                }
            }
            EntryBody::ToolResult(r) => {
                if let Some(command) = self.pending_checks.remove(&r.call_id) {
                    let outcome = result_outcome(r);
                    if let Some(session) = running_session(r) {
                        self.running_checks.insert(session, command.clone());
                    }
                    // The verification keeps pointing at the call entry (set when it was made).
                    let call_entry = self
                        .verification_at
                        .get(&command)
                        .map(|&i| self.verification[i].entry_id.clone())
                        .unwrap_or_else(|| entry.id.clone());
                    self.set_verification(&command, outcome, &call_entry);
                }
            }
            EntryBody::File(f) => match f.op {
                FileOp::Read => self.add_read(&f.path, &entry.id),
                FileOp::Modified | FileOp::Created => {
                    self.add_modified(&f.path, &entry.id);
                }
                FileOp::Deleted => self.add_deleted(&f.path, &entry.id),
            },
            EntryBody::Skill(s) => {
                if s.active {
                    if !self.skills.contains(&s.name) {
                        self.skills.push(s.name.clone());
                    }
                } else {
                    self.skills.retain(|n| n != &s.name);
                }
            }
            _ => {}
        }
    }

    fn observe_call(
        &mut self,
        entry_id: &str,
        call_id: &str,
        name: &str,
        input: &Value,
        mapping: &ToolMapping,
    ) {
        if let Some(arg) = mapping.read.get(name) {
            if let Some(p) = input.get(arg).and_then(Value::as_str) {
                self.add_read(p, entry_id);
            }
        }
        if let Some(arg) = mapping.write.get(name) {
            if let Some(p) = input.get(arg).and_then(Value::as_str) {
                self.add_modified(p, entry_id);
            }
        }
        if let Some(arg) = mapping.patch.get(name) {
            let patch = if arg.is_empty() {
                input.as_str()
            } else {
                input.get(arg).and_then(Value::as_str).or(input.as_str())
            };
            if let Some(patch) = patch {
                for p in patch_paths(patch) {
                    self.add_modified(&p, entry_id);
                }
                for change in patch_changes(patch) {
                    match change {
                        PatchChange::Deleted(p) => self.add_deleted(&p, entry_id),
                        PatchChange::Moved(from, to) => self.add_renamed(&from, &to, entry_id),
                    }
                }
            }
        }
        if let Some(arg) = mapping.shell.get(name) {
            if let Some(facts) = analyze_command_value(input.get(arg).unwrap_or(&Value::Null)) {
                for p in facts.reads {
                    self.add_read(&p, entry_id);
                }
                for p in facts.modifies {
                    self.add_modified(&p, entry_id);
                }
                for p in facts.deletes {
                    self.add_deleted(&p, entry_id);
                }
                for (from, to) in facts.renames {
                    self.add_renamed(&from, &to, entry_id);
                }
                if let Some(check) = facts.verification {
                    self.set_verification(&check, VerificationOutcome::Unknown, entry_id);
                    self.pending_checks.insert(call_id.to_string(), check);
                }
            }
        }
        if let Some(session) = input.get("session_id").and_then(session_key) {
            if let Some(check) = self.running_checks.remove(&session) {
                self.pending_checks.insert(call_id.to_string(), check);
            }
        }
        if name == "Skill" {
            if let Some(s) = input
                .get("skill")
                .or(input.get("command"))
                .and_then(Value::as_str)
            {
                if !self.skills.iter().any(|k| k == s) {
                    self.skills.push(s.to_string());
                }
            }
        }
    }

    /// The facts, bounded: however long the session and however many capsules rolled it
    /// forward, the newest files and checks are kept (a file the agent modified is not listed
    /// again as read), each with its newest entries.
    pub fn finish(mut self) -> Artifacts {
        let last_run = &self.last_run;
        self.verification
            .sort_by_key(|v| last_run.get(&v.command).copied().unwrap_or(0));
        let cut = self.verification.len().saturating_sub(MAX_CHECKS);
        self.verification.drain(..cut);

        let mut renamed_away = std::mem::take(&mut self.renamed_away);
        renamed_away.sort_unstable();
        for j in renamed_away.into_iter().rev() {
            self.modified.remove(j);
        }
        let touched = &self.touched;
        let newest = |list: &mut Vec<FileArtifact>, n: usize| {
            if list.len() > n {
                let mut order: Vec<(u64, usize)> = list
                    .iter()
                    .enumerate()
                    .map(|(i, f)| (touched.get(&f.path).copied().unwrap_or(0), i))
                    .collect();
                order.sort_unstable();
                let mut keep: Vec<usize> =
                    order[order.len() - n..].iter().map(|&(_, i)| i).collect();
                keep.sort_unstable();
                let old = std::mem::take(list);
                let mut keep = keep.into_iter().peekable();
                for (i, f) in old.into_iter().enumerate() {
                    if keep.peek() == Some(&i) {
                        keep.next();
                        list.push(f);
                    }
                }
            }
            for f in list.iter_mut() {
                let cut = f.entry_ids.len().saturating_sub(MAX_ENTRY_IDS_PER_FILE);
                f.entry_ids.drain(..cut);
            }
        };
        newest(&mut self.modified, MAX_MODIFIED_FILES);
        let modified = &self.modified;
        self.read
            .retain(|r| !modified.iter().any(|m| m.path == r.path));
        newest(&mut self.read, MAX_READ_FILES);
        Artifacts {
            read_files: self.read,
            modified_files: self.modified,
            verification: self.verification,
            active_skills: self.skills,
        }
    }
}

/// Files read kept in a capsule, newest: the ones the work is about now.
pub const MAX_READ_FILES: usize = 30;
/// Files modified kept in a capsule, newest.
pub const MAX_MODIFIED_FILES: usize = 40;
/// Checks kept, by newest run.
pub const MAX_CHECKS: usize = 15;
/// Entries named per file, newest.
const MAX_ENTRY_IDS_PER_FILE: usize = 3;

fn add_file(
    list: &mut Vec<FileArtifact>,
    at: &mut HashMap<String, usize>,
    path: String,
    entry_id: &str,
) -> usize {
    let i = *at.entry(path.clone()).or_insert_with(|| {
        list.push(FileArtifact {
            path,
            entry_ids: Vec::new(),
            ..Default::default()
        });
        list.len() - 1
    });
    let ids = &mut list[i].entry_ids;
    if !entry_id.is_empty() && !ids.iter().any(|e| e == entry_id) {
        ids.push(entry_id.to_string());
        // Only the newest are named in the end; a file touched in every turn must not make
        // each later touch scan all the earlier ones.
        if ids.len() > 2 * MAX_ENTRY_IDS_PER_FILE {
            ids.drain(..ids.len() - MAX_ENTRY_IDS_PER_FILE);
        }
    }
    i
}

/// Facts of every entry in order, on top of an earlier capsule's artifacts.
pub fn collect<'a>(
    workspace: &str,
    previous: Option<&Artifacts>,
    entries: impl IntoIterator<Item = &'a Entry>,
    mapping: &ToolMapping,
) -> Artifacts {
    let mut c = ArtifactCollector::new(workspace);
    if let Some(p) = previous {
        c.seed(p);
    }
    for e in entries {
        c.observe(e, mapping);
    }
    c.finish()
}

fn session_key(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The session of a command that is still running ("Process running with session ID 7").
fn running_session(r: &ToolResultEntry) -> Option<String> {
    static RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"(?i)process running with session id:?\s*(\S+)").expect("valid regex")
    });
    let text = blocks_text(&r.content);
    RE.captures(&text)
        .map(|c| c[1].trim_end_matches('.').to_string())
}

/// Whether a result says the command has not finished (so it has no outcome yet).
fn still_running(text: &str) -> bool {
    static RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?i)process running with session id|command (?:is )?still running|running in (?:the )?background|<status>running</status>",
        )
        .expect("valid regex")
    });
    RE.is_match(text)
}

/// Outcome of a verification run from its result: exit code, error flag, then the output.
/// A run whose result says it is still going has no outcome yet: `unknown`, never `passed`.
pub fn result_outcome(r: &ToolResultEntry) -> VerificationOutcome {
    let text = blocks_text(&r.content);
    if aborted(&text) {
        return VerificationOutcome::Unknown;
    }
    // A pipe (`tsc | grep error`, `… | tail`) reports the exit of its last command: what the
    // check printed decides.
    if strong_failure_marker(&text) {
        return VerificationOutcome::Failed;
    }
    if let Some(code) = r.exit_code {
        return if code == 0 {
            VerificationOutcome::Passed
        } else {
            VerificationOutcome::Failed
        };
    }
    if r.is_error {
        return VerificationOutcome::Failed;
    }
    if let Some(code) = exit_code_in_output(&text) {
        return if code == 0 {
            VerificationOutcome::Passed
        } else {
            VerificationOutcome::Failed
        };
    }
    if still_running(&text) {
        return VerificationOutcome::Unknown;
    }
    if failure_marker(&text) {
        VerificationOutcome::Failed
    } else {
        VerificationOutcome::Passed
    }
}

/// Exit codes as agents print them: `Exit code: 1`, `Process exited with code 1`,
/// `<returncode>1</returncode>`, `exit status 1`.
fn exit_code_in_output(text: &str) -> Option<i64> {
    static RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?i)(?:exit code:?|exited with code|<returncode>|exit status)\s*(-?\d+)",
        )
        .expect("valid regex")
    });
    RE.captures_iter(text)
        .last()
        .and_then(|c| c[1].parse().ok())
}

/// Failure lines no passing run prints.
fn strong_failure_marker(text: &str) -> bool {
    static RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?m)(test result: FAILED|^FAIL\b|^--- FAIL:|\berror TS\d+:|^thread '.*' panicked at|Traceback \(most recent call last\)|npm ERR!|BUILD FAILURE|^error: command '[^']*' failed|\bfailed with exit (?:code|status) [1-9])",
        )
        .expect("valid regex")
    });
    RE.is_match(text)
}

/// A run the user or the harness stopped: it has no outcome.
fn aborted(text: &str) -> bool {
    static RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?im)^\s*(?:command (?:was )?aborted|aborted by (?:the )?user|\[request interrupted|interrupted by (?:the )?user|the user (?:doesn't|does not) want to proceed)[^\n]*\s*\z",
        )
        .expect("valid regex")
    });
    RE.is_match(text)
}

fn failure_marker(text: &str) -> bool {
    static RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?m)(test result: FAILED|^FAILED\b|^FAIL\b|\b\d+ (?:failed|failing|errors?)\b|^error(?:\[E\d+\])?:|npm ERR!|Traceback \(most recent call last\)|BUILD FAILURE|Build FAILED|Found \d+ errors?)",
        )
        .expect("valid regex")
    });
    // "0 failed" / "0 errors" are successes.
    RE.find_iter(text)
        .any(|m| !m.as_str().trim_start().starts_with("0 "))
}

/// A patch's deletions and moves (`*** Delete File:`, `*** Update File:` + `*** Move to:`,
/// a unified diff to `/dev/null`).
#[derive(Debug, PartialEq, Eq)]
pub enum PatchChange {
    Deleted(String),
    Moved(String, String),
}

pub fn patch_changes(patch: &str) -> Vec<PatchChange> {
    let mut out = Vec::new();
    let mut updating: Option<&str> = None;
    let mut minus: Option<&str> = None;
    for line in patch.lines() {
        if let Some(p) = line.strip_prefix("*** Delete File: ") {
            out.push(PatchChange::Deleted(p.trim().to_string()));
        } else if let Some(p) = line.strip_prefix("*** Update File: ") {
            updating = Some(p.trim());
        } else if let Some(to) = line.strip_prefix("*** Move to: ") {
            if let Some(from) = updating {
                out.push(PatchChange::Moved(from.to_string(), to.trim().to_string()));
            }
        } else if let Some(p) = line.strip_prefix("--- ") {
            let p = p.split('\t').next().unwrap_or(p).trim();
            minus = Some(p.strip_prefix("a/").unwrap_or(p));
        } else if let Some(p) = line.strip_prefix("+++ ") {
            if p.trim().starts_with("/dev/null") {
                if let Some(m) = minus.filter(|m| *m != "/dev/null") {
                    out.push(PatchChange::Deleted(m.to_string()));
                }
            }
        }
    }
    out
}

/// Paths a patch touches: `apply_patch` headers and unified-diff `+++ b/path` lines.
pub fn patch_paths(patch: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |p: &str| {
        let p = p.trim();
        if !p.is_empty() && p != "/dev/null" && !out.iter().any(|o| o == p) {
            out.push(p.to_string());
        }
    };
    for line in patch.lines() {
        for prefix in [
            "*** Update File: ",
            "*** Add File: ",
            "*** Delete File: ",
            "*** Move to: ",
        ] {
            if let Some(p) = line.strip_prefix(prefix) {
                push(p);
            }
        }
        if let Some(p) = line.strip_prefix("+++ ") {
            let p = p.split('\t').next().unwrap_or(p);
            push(p.strip_prefix("b/").unwrap_or(p));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::entry::{ContentBlock, FileEntry, FileSource};
    use crate::session::testing::Builder;
    use serde_json::json;

    #[test]
    fn apply_patch_headers_and_diffs() {
        let p = "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-x\n+y\n*** Add File: src/b.rs\n+new\n*** Delete File: old.rs\n*** End Patch";
        assert_eq!(patch_paths(p), ["src/a.rs", "src/b.rs", "old.rs"]);
        let d = "--- a/src/x.py\n+++ b/src/x.py\n@@ -1 +1 @@\n-a\n+b\n";
        assert_eq!(patch_paths(d), ["src/x.py"]);
    }

    #[test]
    fn verification_outcome_follows_the_last_run() {
        let mut b = Builder::new();
        b.user("fix the test");
        b.bash("c1", "cargo test");
        let fail = |b: &mut Builder, id: &str, text: &str, err: bool| {
            b.push(EntryBody::ToolResult(ToolResultEntry {
                call_id: id.into(),
                tool_name: Some("Bash".into()),
                content: vec![ContentBlock::text(text)],
                is_error: err,
                exit_code: None,
            }))
        };
        fail(
            &mut b,
            "c1",
            "test result: FAILED. 1 passed; 1 failed",
            false,
        );
        let first = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        assert_eq!(first.verification.len(), 1);
        assert_eq!(first.verification[0].outcome, VerificationOutcome::Failed);
        let call2 = b.bash("c2", "cargo test");
        fail(&mut b, "c2", "test result: ok. 2 passed; 0 failed", false);
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        assert_eq!(a.verification.len(), 1);
        assert_eq!(a.verification[0].outcome, VerificationOutcome::Passed);
        assert_eq!(a.verification[0].entry_id, call2);
    }

    #[test]
    fn outcomes_from_exit_codes_and_flags() {
        let r = |text: &str, is_error: bool, exit_code: Option<i64>| ToolResultEntry {
            call_id: "c".into(),
            tool_name: None,
            content: vec![ContentBlock::text(text)],
            is_error,
            exit_code,
        };
        assert_eq!(
            result_outcome(&r("", false, Some(1))),
            VerificationOutcome::Failed
        );
        assert_eq!(
            result_outcome(&r("FAILED", false, Some(0))),
            VerificationOutcome::Passed
        );
        assert_eq!(
            result_outcome(&r("", true, None)),
            VerificationOutcome::Failed
        );
        assert_eq!(
            result_outcome(&r("<returncode>2</returncode>", false, None)),
            VerificationOutcome::Failed
        );
        assert_eq!(
            result_outcome(&r("Process exited with code 0\nok", false, None)),
            VerificationOutcome::Passed
        );
        assert_eq!(
            result_outcome(&r("12 passed, 0 failed", false, None)),
            VerificationOutcome::Passed
        );
        assert_eq!(
            result_outcome(&r("3 failed, 9 passed", false, None)),
            VerificationOutcome::Failed
        );
    }

    #[test]
    fn tool_calls_file_entries_and_skills_become_facts_with_entry_ids() {
        let mut b = Builder::new();
        let read = b.call("r1", "Read", json!({"file_path": "/ws/src/lib.rs"}));
        let edit = b.call(
            "e1",
            "Edit",
            json!({"file_path": "/ws/src/lib.rs", "old_string": "a", "new_string": "b"}),
        );
        let pi = b.call("p1", "edit", json!({"path": "src/main.rs"}));
        let codex = b.call(
            "x1",
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Update File: src/z.rs\n*** End Patch"}),
        );
        let watcher = b.push(EntryBody::File(FileEntry {
            path: "/ws/fmt.toml".into(),
            op: FileOp::Modified,
            source: FileSource::Watcher,
        }));
        b.push(EntryBody::Skill(crate::session::entry::SkillEntry {
            name: "pdf".into(),
            active: true,
        }));
        let outside = b.call("r2", "Read", json!({"file_path": "/etc/hosts"}));
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        let files = |v: &[FileArtifact]| {
            v.iter()
                .map(|f| (f.path.clone(), f.entry_ids.clone()))
                .collect::<Vec<_>>()
        };
        // src/lib.rs was read, then modified: it is listed once, as modified.
        let _ = read;
        assert_eq!(
            files(&a.read_files),
            [("/etc/hosts".to_string(), vec![outside])]
        );
        assert_eq!(
            files(&a.modified_files),
            [
                ("src/lib.rs".to_string(), vec![edit]),
                ("src/main.rs".to_string(), vec![pi]),
                ("src/z.rs".to_string(), vec![codex]),
                ("fmt.toml".to_string(), vec![watcher]),
            ]
        );
        assert_eq!(a.active_skills, ["pdf"]);
    }

    #[test]
    fn deletions_renames_scratch_paths_and_staging_are_told_apart() {
        let mut b = Builder::new();
        b.call("w1", "Write", json!({"file_path": "/ws/out.html"}));
        b.bash("b1", "rm out.html");
        b.call("w2", "Edit", json!({"file_path": "/ws/src/a.rs"}));
        b.bash("b2", "git mv src/a.rs src/b.rs");
        b.bash(
            "b3",
            "git clone https://example.invalid/x /tmp/scratch && touch /tmp/scratch/x.txt",
        );
        b.call(
            "w3",
            "Write",
            json!({"file_path": "/home/me/.config/tool.toml"}),
        );
        b.bash("b4", "git restore --staged src/c.rs");
        b.call(
            "x1",
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Delete File: old.txt\n*** Update File: d.rs\n*** Move to: e.rs\n*** End Patch"}),
        );
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        let shown: Vec<(String, bool, Option<String>)> = a
            .modified_files
            .iter()
            .map(|f| (f.path.clone(), f.deleted, f.renamed_from.clone()))
            .collect();
        assert_eq!(
            shown,
            [
                ("out.html".to_string(), true, None),
                ("src/b.rs".to_string(), false, Some("src/a.rs".to_string())),
                ("old.txt".to_string(), true, None),
                ("e.rs".to_string(), false, Some("d.rs".to_string())),
            ]
        );
    }

    #[test]
    fn a_long_history_keeps_bounded_newest_file_lists() {
        let mut b = Builder::new();
        for i in 0..200 {
            b.call(
                &format!("r{i}"),
                "Read",
                json!({"file_path": format!("/ws/read{i}.rs")}),
            );
            b.call(
                &format!("w{i}"),
                "Edit",
                json!({"file_path": format!("/ws/mod{i}.rs")}),
            );
        }
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        assert_eq!(a.read_files.len(), MAX_READ_FILES);
        assert_eq!(a.modified_files.len(), MAX_MODIFIED_FILES);
        assert_eq!(a.read_files.last().unwrap().path, "read199.rs");
        assert_eq!(
            a.modified_files[0].path,
            format!("mod{}.rs", 200 - MAX_MODIFIED_FILES)
        );
    }

    #[test]
    fn what_a_check_printed_decides_over_a_pipe_and_an_abort_has_no_outcome() {
        let r = |text: &str, code: Option<i64>| ToolResultEntry {
            call_id: "c".into(),
            tool_name: None,
            content: vec![ContentBlock::text(text)],
            is_error: false,
            exit_code: code,
        };
        assert_eq!(
            result_outcome(&r("src/a.ts(3,1): error TS2345: Argument of type", Some(0))),
            VerificationOutcome::Failed
        );
        assert_eq!(
            result_outcome(&r("--- FAIL: TestX (0.01s)\nFAIL\tpkg\t0.2s", Some(0))),
            VerificationOutcome::Failed
        );
        assert_eq!(
            result_outcome(&r("Command aborted by user", None)),
            VerificationOutcome::Unknown
        );
        assert_eq!(
            result_outcome(&r(
                "> node --test\nDebugger attached.\n\nCommand aborted",
                None
            )),
            VerificationOutcome::Unknown
        );
        assert_eq!(
            result_outcome(&r(
                "<returncode>0</returncode>\nerror: command '/usr/bin/gcc' failed with exit code 1",
                Some(0)
            )),
            VerificationOutcome::Failed
        );
    }

    #[test]
    fn a_check_still_running_is_unknown_until_its_session_reports() {
        let mut b = Builder::new();
        b.call("c1", "exec_command", json!({"cmd": "cargo test"}));
        b.result("c1", "Process running with session ID 7");
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        assert_eq!(a.verification[0].outcome, VerificationOutcome::Unknown);
        b.call("c2", "write_stdin", json!({"session_id": 7, "chars": ""}));
        b.result(
            "c2",
            "test result: ok. 3 passed\nProcess exited with code 0",
        );
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        assert_eq!(a.verification[0].outcome, VerificationOutcome::Passed);
    }

    #[test]
    fn seeding_keeps_everything_of_the_previous_capsule() {
        let mut b = Builder::new();
        b.call("e1", "Write", json!({"file_path": "a.rs"}));
        let first = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        let mut b2 = Builder::new();
        b2.call("e2", "Write", json!({"file_path": "b.rs"}));
        let second = collect(
            "/ws",
            Some(&first),
            b2.session.entries(),
            &ToolMapping::default(),
        );
        let paths: Vec<_> = second
            .modified_files
            .iter()
            .map(|f| f.path.as_str())
            .collect();
        assert_eq!(paths, ["a.rs", "b.rs"]);
    }
}
