//! Artifacts are facts: read and modified files, verification commands with their last
//! outcome, and active skills, taken from tool calls, their results, `file` entries and
//! `skill` entries — never from a model's prose. Every item carries the entries it came from.

use std::collections::HashMap;

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
            if f.entry_ids.is_empty() {
                self.add_modified(&f.path, "");
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

    fn add_read(&mut self, path: &str, entry_id: &str) {
        let path = self.relative(path);
        if path.is_empty() {
            return;
        }
        add_file(&mut self.read, &mut self.read_at, path, entry_id);
    }

    fn add_modified(&mut self, path: &str, entry_id: &str) {
        let path = self.relative(path);
        if path.is_empty() {
            return;
        }
        add_file(&mut self.modified, &mut self.modified_at, path, entry_id);
    }

    fn set_verification(&mut self, command: &str, outcome: VerificationOutcome, entry_id: &str) {
        let v = Verification {
            command: command.to_string(),
            outcome,
            entry_id: entry_id.to_string(),
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
                FileOp::Modified | FileOp::Created | FileOp::Deleted => {
                    self.add_modified(&f.path, &entry.id)
                }
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

    pub fn finish(mut self) -> Artifacts {
        let last_run = &self.last_run;
        self.verification
            .sort_by_key(|v| last_run.get(&v.command).copied().unwrap_or(0));
        Artifacts {
            read_files: self.read,
            modified_files: self.modified,
            verification: self.verification,
            active_skills: self.skills,
        }
    }
}

fn add_file(
    list: &mut Vec<FileArtifact>,
    at: &mut HashMap<String, usize>,
    path: String,
    entry_id: &str,
) {
    let i = *at.entry(path.clone()).or_insert_with(|| {
        list.push(FileArtifact {
            path,
            entry_ids: Vec::new(),
        });
        list.len() - 1
    });
    if !entry_id.is_empty() && !list[i].entry_ids.iter().any(|e| e == entry_id) {
        list[i].entry_ids.push(entry_id.to_string());
    }
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
    let text = blocks_text(&r.content);
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
        assert_eq!(
            files(&a.read_files),
            [
                ("src/lib.rs".to_string(), vec![read]),
                ("/etc/hosts".to_string(), vec![outside])
            ]
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
