//! Artifacts are facts: read and modified files, verification commands with their last
//! outcome, and active skills, taken from tool calls, their results, `file` entries and
//! `skill` entries — never from a model's prose. Every item carries the entries it came from.

// foldhash, seeded per process: paths and commands of the whole history are hashed here.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

use crate::tool_mapping::ToolMapping;
use serde_json::Value;

use super::shell::{analyze_command_value_in, patch_paths};
use crate::session::capsule::model::{Artifacts, FileArtifact, Verification, VerificationOutcome};
use crate::session::entry::{blocks_text, Entry, EntryBody, FileOp, ToolResultEntry};

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
    /// Reads waiting for their call's result: call id → (whether the whole call is the read,
    /// path, entry id). A read that failed ("No such file") read nothing.
    pending_reads: HashMap<String, Vec<(bool, String, String)>>,
    /// The calls of `pending_reads`, in the order they came.
    pending_read_calls: Vec<String>,
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
    /// `run_seq` at the latest modification: a check last run before it may no longer hold.
    last_edit: u64,
    /// Checks an earlier capsule already marked as run before later edits, until run again.
    stale_seeded: std::collections::HashSet<String, foldhash::fast::RandomState>,
    /// Set while an earlier capsule's facts are taken in: they are no new edits.
    seeding: bool,
    /// Where Claude Code's persistent `Bash` shell was left by a `cd` (absolute when known).
    shell_cwd: Option<String>,
    /// Folders outside the workspace where the session does its work: git worktrees it added
    /// or works in, folders its shell works in. Edits there are the work, under their real
    /// paths; edits anywhere else outside the workspace are not.
    work_roots: Vec<String>,
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
        self.seeding = true;
        for w in &previous.work_trees {
            self.add_work_root(w);
        }
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
            if v.edited_since {
                self.stale_seeded.insert(v.command.clone());
            }
        }
        self.seeding = false;
        for s in &previous.active_skills {
            if !self.skills.contains(s) {
                self.skills.push(s.clone());
            }
        }
    }

    /// A path as the capsule lists it: relative to the workspace when inside it, else
    /// absolute; `.` and `..` resolved, so one file has one name however it was reached.
    fn relative(&self, path: &str) -> String {
        let p = path.trim();
        if p.is_empty() {
            return String::new();
        }
        let absolute = p.starts_with('/') || p.starts_with('~');
        let resolved = if absolute || self.workspace.is_empty() {
            normalize_path(p)
        } else {
            normalize_path(&format!("{}/{p}", self.workspace))
        };
        if !self.workspace.is_empty() {
            if resolved == self.workspace {
                return ".".to_string();
            }
            if let Some(rel) = resolved
                .strip_prefix(&self.workspace)
                .and_then(|r| r.strip_prefix('/'))
            {
                return rel.to_string();
            }
        }
        resolved
    }

    /// A path outside the workspace and the session's other work trees (a scratch clone in
    /// /tmp, a file in the home folder) is not the project's work: read there, perhaps, but
    /// never listed as modified.
    fn outside_workspace(&self, relative: &str) -> bool {
        let absolute = relative.starts_with('/') || relative.starts_with('~');
        if is_scratch(relative) {
            return true;
        }
        absolute
            && !self.workspace.is_empty()
            && !relative.starts_with('~')
            && !self.in_work_root(relative)
    }

    fn in_work_root(&self, absolute: &str) -> bool {
        let under = |root: &str| {
            absolute
                .strip_prefix(root)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        };
        self.work_roots.iter().any(|r| under(r)) || self.sibling_checkout(absolute)
    }

    /// A checkout beside the workspace named after it (`../repo.worktrees/fix`, `../repo-v2`,
    /// `../repo_main`): where agents put the git worktrees of the same project.
    fn sibling_checkout(&self, absolute: &str) -> bool {
        let Some((parent, name)) = self.workspace.rsplit_once('/') else {
            return false;
        };
        if name.is_empty() {
            return false;
        }
        let Some(rest) = absolute
            .strip_prefix(parent)
            .and_then(|r| r.strip_prefix('/'))
        else {
            return false;
        };
        let top = rest.split('/').next().unwrap_or("");
        top.strip_prefix(name)
            .is_some_and(|tail| tail.starts_with(['.', '-', '_']) && tail.len() > 1)
    }

    /// A folder the session works in, outside the workspace (resolved first).
    fn add_work_root(&mut self, dir: &str) {
        let dir = self.relative(dir);
        let absolute = dir.starts_with('/');
        if !absolute || is_scratch(&dir) || dir == "/" || is_home_folder(&dir) {
            return;
        }
        if !self.work_roots.contains(&dir) {
            self.work_roots.push(dir);
        }
    }

    fn touch(&mut self, path: &str) {
        self.seq += 1;
        self.touched.insert(path.to_string(), self.seq);
    }

    fn add_read(&mut self, path: &str, entry_id: &str) {
        let path = self.relative(path);
        if path.is_empty() || path == "." || not_the_work(&path) {
            return;
        }
        self.touch(&path);
        add_file(&mut self.read, &mut self.read_at, path, entry_id);
    }

    /// Record a modification; returns the file's index in the modified list.
    fn add_modified(&mut self, path: &str, entry_id: &str) -> Option<usize> {
        let path = self.relative(path);
        if path.is_empty() || path == "." || self.outside_workspace(&path) {
            return None;
        }
        // A file in the home folder (an agent's or a tool's settings) is no code a check
        // covers: it leaves earlier checks standing.
        if !self.seeding && !path.starts_with('~') {
            self.run_seq += 1;
            self.last_edit = self.run_seq;
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
        if !self.seeding {
            self.stale_seeded.remove(command);
        }
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
                if self.shell_cwd.is_some() && shell_was_reset(r) {
                    self.shell_cwd = None;
                }
                if let Some(reads) = self.pending_reads.remove(&r.call_id) {
                    let text = blocks_text(&r.content);
                    // Codex reports a command its sandbox stopped in the result's text.
                    let failed = r.is_error
                        || r.exit_code.is_some_and(|c| c != 0)
                        || text.starts_with("failed in sandbox");
                    for (whole_call, path, entry_id) in reads {
                        let missing = if failed {
                            whole_call || named_as_missing(&text, &path)
                        } else {
                            // `rg x a b | head` exits 0 though a file it was given is not there.
                            reported_missing_by_tool(&text, &path)
                        };
                        if !missing {
                            self.add_read(&path, &entry_id);
                        }
                    }
                }
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
                self.defer_read(call_id, true, p, entry_id);
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
            // Codex runs each command in its `workdir`; Claude Code's Bash is one shell that
            // stays where a `cd` left it.
            let workdir = ["workdir", "cwd"]
                .iter()
                .find_map(|k| input.get(*k).and_then(Value::as_str))
                .map(|d| self.absolute(d));
            let persistent = name == "Bash";
            let base = workdir
                .clone()
                .or_else(|| persistent.then(|| self.shell_cwd.clone()).flatten());
            if let Some(d) = &workdir {
                self.add_work_root(d);
            }
            let command = input.get(arg).unwrap_or(&Value::Null);
            if let Some(facts) = analyze_command_value_in(command, base.as_deref()) {
                for w in &facts.worktrees {
                    self.add_work_root(w);
                }
                if let Some(d) = &facts.final_cwd {
                    let d = self.absolute(d);
                    self.add_work_root(&d);
                    if persistent {
                        self.shell_cwd = Some(d);
                    }
                }
                for p in facts.reads {
                    self.defer_read(call_id, false, &p, entry_id);
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

    /// A read counts once its call's result shows it succeeded (a read whose result never came
    /// counts at [`finish`](Self::finish)).
    fn defer_read(&mut self, call_id: &str, whole_call: bool, path: &str, entry_id: &str) {
        if call_id.is_empty() {
            self.add_read(path, entry_id);
            return;
        }
        let reads = self.pending_reads.entry(call_id.to_string()).or_default();
        if reads.is_empty() {
            self.pending_read_calls.push(call_id.to_string());
        }
        reads.push((whole_call, path.to_string(), entry_id.to_string()));
    }

    /// `dir` resolved against the workspace, absolute where the workspace is known.
    fn absolute(&self, dir: &str) -> String {
        let rel = self.relative(dir);
        if rel == "." {
            self.workspace.clone()
        } else if rel.starts_with('/') || rel.starts_with('~') || self.workspace.is_empty() {
            rel
        } else {
            format!("{}/{rel}", self.workspace)
        }
    }

    /// The facts, bounded: however long the session and however many capsules rolled it
    /// forward, the newest files and checks are kept (a file the agent modified is not listed
    /// again as read), each with its newest entries.
    pub fn finish(mut self) -> Artifacts {
        // Calls that never got a result (the turn was cut off, the agent interrupted) read
        // nothing the agent saw.
        self.pending_read_calls.clear();
        self.pending_reads.clear();
        for v in &mut self.verification {
            let ran = self.last_run.get(&v.command).copied().unwrap_or(0);
            v.edited_since = self.last_edit > ran || self.stale_seeded.contains(&v.command);
        }
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
            work_trees: self.work_roots,
        }
    }
}

/// `.` and `..` components resolved and repeated slashes collapsed; a `..` above a relative
/// path's start is kept.
fn normalize_path(p: &str) -> String {
    let (root, rest) = if let Some(r) = p.strip_prefix('/') {
        ("/", r)
    } else if let Some(r) = p.strip_prefix("~/") {
        ("~/", r)
    } else {
        ("", p)
    };
    let mut parts: Vec<&str> = Vec::new();
    for c in rest.split('/') {
        match c {
            "" | "." => {}
            ".." => match parts.last() {
                Some(&last) if last != ".." => {
                    parts.pop();
                }
                _ if root == "/" => {}
                _ => parts.push(".."),
            },
            c => parts.push(c),
        }
    }
    let joined = parts.join("/");
    if root.is_empty() && joined.is_empty() {
        ".".to_string()
    } else {
        format!("{root}{joined}")
    }
}

/// Scratch space: what is made there is thrown away.
fn is_scratch(path: &str) -> bool {
    ["/tmp/", "/private/tmp/", "/var/folders/", "/dev/"]
        .iter()
        .any(|d| path.starts_with(d) || path == d.trim_end_matches('/'))
}

/// `/home/NAME`, `/Users/NAME`, `/root`: too wide to be a work tree.
fn is_home_folder(path: &str) -> bool {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    matches!(
        parts.as_slice(),
        ["home" | "Users", _] | ["root"] | ["home" | "Users"]
    )
}

/// Folder names of installed dependencies, caches and build tools' own state: a read there is
/// the agent looking something up, not the project's work.
const DEPENDENCY_FOLDERS: [&str; 22] = [
    "node_modules",
    "bower_components",
    ".git",
    "site-packages",
    "dist-packages",
    ".venv",
    "__pycache__",
    ".cache",
    ".npm",
    ".pnpm-store",
    ".yarn",
    ".cargo",
    ".rustup",
    ".m2",
    ".gradle",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".terraform",
    "__snapshots_cache__",
];

/// Whether a file read is outside the work: a dependency, a cache, or an agent's own skill and
/// settings files (`.claude/skills/…/SKILL.md`, `~/.codex/…`).
fn not_the_work(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    if parts.iter().any(|c| DEPENDENCY_FOLDERS.contains(c)) || path.contains("/go/pkg/mod/") {
        return true;
    }
    if parts.last() == Some(&"SKILL.md") {
        return true;
    }
    let agent_dir = |c: &&str| matches!(*c, ".claude" | ".codex" | ".pi" | ".agents" | ".cursor");
    let outside = path.starts_with('/') || path.starts_with('~');
    parts
        .windows(2)
        .any(|w| agent_dir(&w[0]) && w[1] == "skills")
        || (outside && parts.iter().any(agent_dir))
}

/// Whether a failed command's output says `path` was not there ("cat: x: No such file or
/// directory", "ENOENT: …, open 'x'", "File does not exist").
fn named_as_missing(output: &str, path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    output.lines().any(|l| {
        let lower = l.to_ascii_lowercase();
        l.contains(name)
            && (lower.contains("no such file")
                || lower.contains("does not exist")
                || lower.contains("enoent")
                || lower.contains("cannot open")
                || lower.contains("not found")
                || lower.contains("cannot access"))
    })
}

/// Whether a tool's own error line says `path` was not there ("rg: x: No such file or directory
/// (os error 2)", "ls: cannot access 'x': …"): stricter than [`named_as_missing`], for a run that
/// succeeded, whose output is otherwise the files' text and may mention anything.
fn reported_missing_by_tool(output: &str, path: &str) -> bool {
    // The tool prints the name it was given, which may be relative to a folder the command
    // moved to, where `path` is resolved.
    let is_path =
        |named: &str| !named.is_empty() && (path == named || path.ends_with(&format!("/{named}")));
    let quotes = |c: char| matches!(c, '\'' | '‘' | '’' | '"');
    output.lines().any(|l| {
        let Some((tool, rest)) = l.split_once(": ") else {
            return false;
        };
        if tool.is_empty()
            || tool.contains(char::is_whitespace)
            || !rest
                .to_ascii_lowercase()
                .contains("no such file or directory")
        {
            return false;
        }
        // The name stands where the tool names the file it failed on, right after its name
        // ("rg: x: …") or after what it could not do ("ls: cannot access 'x': …",
        // "head: cannot open 'x' for reading: …", "sed: can't read x: …").
        let named = ["cannot access ", "cannot open ", "can't read "]
            .iter()
            .find_map(|what| rest.strip_prefix(what))
            .unwrap_or(rest);
        let named = named.split(": ").next().unwrap_or_default();
        let named = named.strip_suffix(" for reading").unwrap_or(named);
        is_path(named.trim_matches(quotes))
    })
}

/// Claude Code moves its shell back to the project when a `cd` left it: "Shell cwd was reset
/// to /path".
fn shell_was_reset(r: &ToolResultEntry) -> bool {
    blocks_text(&r.content).contains("Shell cwd was reset to")
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
    if aborted(&text) || ran_no_tests(&text) {
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
            r"(?i)(?:exit code:?|exited with code|<returncode>|exit status)\s*(-?[0-9]+)",
        )
        .expect("valid regex")
    });
    RE.captures_iter(text)
        .last()
        .and_then(|c| c[1].parse().ok())
}

/// Failure lines no passing run prints: what a check printed decides over an exit status
/// that a pipe, a wrapper script or a task runner reported as 0.
///
/// Word boundaries, digits and word characters are ASCII (`(?-u:\b)`, `[0-9]`): the Unicode
/// ones keep the regex engine off its fast paths on non-ASCII output and make each pattern
/// many times larger to compile, and every marker here is ASCII.
fn strong_failure_marker(text: &str) -> bool {
    static RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(concat!(
            r"(?m)(",
            // Test runners' summaries: cargo, go, jest/vitest, pytest.
            r"test result: FAILED|^FAIL(?-u:\b)|^--- FAIL:|^Tests:\s+[1-9][0-9]* failed|^=+ .*(?-u:\b)[1-9][0-9]* failed(?-u:\b).*=+\s*$",
            r"|^thread '.*' panicked at|Traceback \(most recent call last\)",
            // Compilers and linters: tsc, cargo, mypy/ruff, eslint, golangci-lint.
            r"|(?-u:\b)error TS[0-9]+:|^error: could not compile|^error: [0-9]+ target|^Found [1-9][0-9]* errors?(?-u:\b)",
            r"|^\s*(?:\S+ )?[1-9][0-9]* problems? \(|^[1-9][0-9]* issues?(?: found)?[:.]?\s*$",
            // Package managers and task runners: npm, pnpm, yarn, make, mise, task, just,
            // gradle/maven.
            r"|npm ERR!|^npm error |(?-u:\b)ERR_PNPM_[A-Za-z0-9_]+|^error Command failed with exit code [1-9]|(?-u:\b)ELIFECYCLE(?-u:\b)",
            // pip's failures (its warnings say WARNING); a CLI that rejected its arguments.
            r"|^ERROR: |^error: (?:unknown|unexpected|missing required) (?:option|argument|command)|^\s*\^? ?Unknown arguments?(?-u:\b)",
            r"|^make(?:\[[0-9]+\])?: \*\*\* .*Error [0-9]+|(?-u:\b)ERROR(?-u:\b)[^\n]*(?-u:\b)(?:task|command|recipe|job) failed(?-u:\b)",
            r"|^error: Recipe `[^`]*` failed|^task: Failed to run task|BUILD FAILURE|^FAILURE: Build failed",
            r"|^error: command '[^']*' failed|(?-u:\b)failed with exit (?:code|status) [1-9]",
            // A test script's own marks for a failing case: ✗ ✕ ✘ ❌.
            r"|[✗✕✘❌]",
            r")",
        ))
        .expect("valid regex")
    });
    RE.is_match(text)
}

/// A test run that selected no test (`go test -run X` matching none, pytest collecting
/// nothing): it shows nothing about the work, so it has no outcome.
fn ran_no_tests(text: &str) -> bool {
    let none = text.contains("no tests to run")
        || text.contains("no tests ran in")
        || text.contains("No tests found");
    // `go test ./...` where one package ran tests and another none ran tests.
    let some_package_ran = text
        .lines()
        .any(|l| l.starts_with("ok ") && !l.contains("[no test"));
    none && !some_package_ran && !text.contains("--- PASS") && !text.contains(" passed")
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
            r"(?m)(test result: FAILED|^FAILED(?-u:\b)|^FAIL(?-u:\b)|(?-u:\b)[0-9]+ (?:failed|failing|errors?)(?-u:\b)|^error(?:\[E[0-9]+\])?:|npm ERR!|Traceback \(most recent call last\)|BUILD FAILURE|Build FAILED|Found [0-9]+ errors?)",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::entry::{ContentBlock, FileEntry, FileSource};
    use crate::session::testing::Builder;
    use serde_json::json;

    /// A result that printed `text` and exited 0, as a task runner, wrapper or pipe reports.
    fn r(text: &str) -> ToolResultEntry {
        ToolResultEntry {
            call_id: "c".into(),
            tool_name: None,
            content: vec![ContentBlock::text(text)],
            is_error: false,
            exit_code: Some(0),
        }
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
        answered(&mut b);
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

    /// Every call still without a result answered, as a finished turn's calls are: a read
    /// stands only once its result came.
    fn answered(b: &mut Builder) {
        let mut done: std::collections::HashSet<String> = b
            .session
            .entries()
            .iter()
            .filter_map(|e| match &e.body {
                EntryBody::ToolResult(r) => Some(r.call_id.clone()),
                _ => None,
            })
            .collect();
        let calls: Vec<String> = b
            .session
            .entries()
            .iter()
            .flat_map(|e| {
                e.tool_calls()
                    .map(|(id, _, _)| id.to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        for id in calls {
            if done.insert(id.clone()) {
                result(b, &id, "ok", Some(0));
            }
        }
    }

    fn result(b: &mut Builder, call_id: &str, text: &str, exit_code: Option<i64>) {
        b.push(EntryBody::ToolResult(ToolResultEntry {
            call_id: call_id.into(),
            tool_name: None,
            content: vec![ContentBlock::text(text)],
            is_error: false,
            exit_code,
        }));
    }

    /// A run that selected no test says nothing about the work: no outcome, whatever its exit.
    #[test]
    fn a_test_run_that_ran_no_tests_has_no_outcome() {
        for none in [
            "testing: warning: no tests to run\nPASS\nok  \tgithub.com/x/cli/integration_test\t0.412s [no tests to run]",
            "collected 0 items\n\n============ no tests ran in 0.01s ============",
        ] {
            assert_eq!(result_outcome(&r(none)), VerificationOutcome::Unknown, "{none}");
        }
        for ran in [
            "=== RUN   TestA\n--- PASS: TestA (0.00s)\nok  \tx\t0.1s",
            "ok  \tx/a\t0.3s\nok  \tx/b\t0.1s [no tests to run]",
        ] {
            assert_eq!(
                result_outcome(&r(ran)),
                VerificationOutcome::Passed,
                "{ran}"
            );
        }
    }

    /// An editable install, a publish and a CLI's dry run fail by what they print too: pip's
    /// `ERROR:` lines, npm's `npm error`, a rejected option — though a pipe reported 0.
    #[test]
    fn an_install_a_publish_and_a_dry_run_fail_by_what_they_printed() {
        for failed in [
            "Obtaining file:///testbed\nERROR: Could not build wheels for astropy",
            "npm error code E403\nnpm error 403 Forbidden - PUT https://registry.npmjs.org/pkg",
            "Usage: agentv eval [options]\nerror: unknown option '--dry-run'",
            "error: found 1 error\n  agentv eval run x.yaml --dry-run\n  ^ Unknown arguments",
        ] {
            assert_eq!(
                result_outcome(&r(failed)),
                VerificationOutcome::Failed,
                "{failed}"
            );
        }
        for passed in [
            "Successfully installed astropy-4.3",
            "WARNING: pip is out of date\nSuccessfully installed astropy-4.3",
            "+ pkg@1.2.0",
            "Dry run: 3 cases would run",
        ] {
            assert_eq!(
                result_outcome(&r(passed)),
                VerificationOutcome::Passed,
                "{passed}"
            );
        }
    }

    /// What a check printed decides over an exit status of 0 that a task runner, a wrapper or
    /// a pipe reported; a passing run's output stays passed.
    #[test]
    fn a_check_that_printed_its_failure_has_failed_whatever_its_exit_status() {
        for failed in [
            "src/a.go:3:1: unused (unused)\n2 issues:\n* unused: 2\n[lint] ERROR task failed",
            "[lint] ERROR task failed",
            "/w/src/a.ts\n  3:1  error  'x' is unused  no-unused-vars\n\n✖ 3 problems (3 errors, 0 warnings)",
            "src/a.py:1: error: Name 'x' is not defined\nFound 2 errors in 1 file (checked 3 source files)",
            "=========== 2 failed, 14 passed in 0.52s ===========",
            "Tests:       1 failed, 41 passed, 42 total",
            "error: could not compile `soba` (lib) due to 2 previous errors",
            "make: *** [Makefile:12: test] Error 2",
            " ELIFECYCLE  Command failed with exit code 1.",
            "error Command failed with exit code 1.",
            "error: Recipe `test` failed on line 3 with exit code 1",
            "case 1: Match: ✓\ncase 2: Match: ✗ (expected --flag)\ntests passed",
        ] {
            assert_eq!(result_outcome(&r(failed)), VerificationOutcome::Failed, "{failed}");
        }
        for passed in [
            "0 issues.",
            "=========== 16 passed in 0.52s ===========",
            "Tests:       42 passed, 42 total",
            "Found 0 errors",
            "✔ no problems",
            "test result: ok. 12 passed; 0 failed",
            "INFO the error task failed earlier was retried", // no ERROR level
        ] {
            assert_eq!(
                result_outcome(&r(passed)),
                VerificationOutcome::Passed,
                "{passed}"
            );
        }
    }

    #[test]
    fn a_settings_file_in_the_home_folder_leaves_checks_standing() {
        let mut b = Builder::new();
        b.bash("c1", "pnpm build");
        result(&mut b, "c1", "built", Some(0));
        b.bash("d1", "rm ~/.dmux.global.json");
        result(&mut b, "d1", "", Some(0));
        b.call("w1", "Write", json!({"file_path": "/tmp/check.js"}));
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        assert!(
            a.modified_files
                .iter()
                .any(|f| f.path == "~/.dmux.global.json" && f.deleted),
            "still listed as changed: {:?}",
            a.modified_files
        );
        assert!(a.verification.iter().all(|v| !v.edited_since), "{a:?}");
    }

    #[test]
    fn a_check_run_before_later_edits_is_marked_until_it_runs_again() {
        let mut b = Builder::new();
        b.bash("c1", "cargo test");
        result(&mut b, "c1", "test result: ok. 2 passed", Some(0));
        b.bash("c2", "npm run lint");
        result(&mut b, "c2", "done", Some(0));
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        assert!(a.verification.iter().all(|v| !v.edited_since));

        b.call("e1", "Edit", json!({"file_path": "/ws/src/lib.rs"}));
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        assert!(a.verification.iter().all(|v| v.edited_since), "{a:?}");

        b.bash("c3", "cargo test");
        result(&mut b, "c3", "test result: ok. 2 passed", Some(0));
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        let stale: Vec<(&str, bool)> = a
            .verification
            .iter()
            .map(|v| (v.command.as_str(), v.edited_since))
            .collect();
        assert_eq!(stale, [("npm run lint", true), ("cargo test", false)]);

        // Rolled forward, the mark stays until the check runs again; the earlier capsule's
        // own files are no new edits.
        let mut next = Builder::new();
        next.bash("c4", "ls");
        let rolled = collect(
            "/ws",
            Some(&a),
            next.session.entries(),
            &ToolMapping::default(),
        );
        assert_eq!(
            rolled
                .verification
                .iter()
                .map(|v| (v.command.as_str(), v.edited_since))
                .collect::<Vec<_>>(),
            stale
        );
        next.bash("c5", "npm run lint");
        result(&mut next, "c5", "done", Some(0));
        let rolled = collect(
            "/ws",
            Some(&a),
            next.session.entries(),
            &ToolMapping::default(),
        );
        assert!(rolled.verification.iter().all(|v| !v.edited_since));
    }

    /// Agents work in git worktrees beside the workspace; the edits there are the work, under
    /// their real paths.
    #[test]
    fn edits_in_the_sessions_worktrees_are_kept_under_their_real_paths() {
        let mut b = Builder::new();
        // A sibling checkout named after the workspace, edited by absolute patch paths.
        b.call(
            "p1",
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Update File: /home/me/repo.worktrees/fix/src/a.rs\n*** End Patch"}),
        );
        // A worktree added under another name, then edited through the shell.
        b.bash("b1", "git worktree add -b spike /srv/work/spike main");
        b.bash("b2", "cd /srv/work/spike && sed -i s/a/b/ lib/x.py");
        // Codex runs a command in its workdir.
        b.call(
            "b3",
            "exec_command",
            json!({"cmd": "rm stale.txt", "workdir": "/opt/checkouts/other"}),
        );
        // Outside any of them: not the work.
        b.call("w1", "Write", json!({"file_path": "/home/me/notes.txt"}));
        b.call(
            "w2",
            "Write",
            json!({"file_path": "/home/me/repository/x.rs"}),
        );
        let a = collect(
            "/home/me/repo",
            None,
            b.session.entries(),
            &ToolMapping::default(),
        );
        let paths: Vec<(&str, bool)> = a
            .modified_files
            .iter()
            .map(|f| (f.path.as_str(), f.deleted))
            .collect();
        assert_eq!(
            paths,
            [
                ("/home/me/repo.worktrees/fix/src/a.rs", false),
                ("/srv/work/spike/lib/x.py", false),
                ("/opt/checkouts/other/stale.txt", true),
            ]
        );
        // Rolled forward, a later edit in the same worktree is still the work.
        let mut next = Builder::new();
        next.call(
            "w3",
            "Write",
            json!({"file_path": "/srv/work/spike/lib/y.py"}),
        );
        let rolled = collect(
            "/home/me/repo",
            Some(&a),
            next.session.entries(),
            &ToolMapping::default(),
        );
        assert!(rolled
            .modified_files
            .iter()
            .any(|f| f.path == "/srv/work/spike/lib/y.py"));
    }

    #[test]
    fn paths_are_resolved_through_cd_and_workdir_and_one_file_has_one_name() {
        let mut b = Builder::new();
        // Claude Code's Bash keeps the folder a `cd` left it in.
        b.bash("b1", "cd packages/web");
        b.bash("b2", "cat src/app.ts");
        b.bash("b3", "sed -i s/x/y/ src/app.ts");
        // Until Claude Code says it moved the shell back.
        b.bash("b4", "cd /elsewhere");
        result(&mut b, "b4", "Shell cwd was reset to /ws", Some(0));
        b.bash("b5", "cat README.md");
        // Codex's workdir, relative to the workspace.
        b.call(
            "x1",
            "exec_command",
            json!({"cmd": "cat index.ts", "workdir": "packages/api"}),
        );
        // The same file by an absolute path, a `./` and a `..`.
        b.call(
            "r1",
            "Read",
            json!({"file_path": "/ws/packages/web/src/app.ts"}),
        );
        b.call(
            "r2",
            "Read",
            json!({"file_path": "./packages/api/../api/index.ts"}),
        );
        answered(&mut b);
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        let read: Vec<&str> = a.read_files.iter().map(|f| f.path.as_str()).collect();
        let modified: Vec<&str> = a.modified_files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(modified, ["packages/web/src/app.ts"]);
        assert_eq!(read, ["README.md", "packages/api/index.ts"]);
        // A shell that does not persist (pi's bash) takes each command from the workspace.
        let mut b = Builder::new();
        b.call("p1", "bash", json!({"command": "cd pkg"}));
        b.call("p2", "bash", json!({"command": "cat a.ts"}));
        answered(&mut b);
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        assert_eq!(a.read_files[0].path, "a.ts");
    }

    #[test]
    fn a_read_that_failed_read_nothing() {
        let mut b = Builder::new();
        b.call("r1", "Read", json!({"file_path": "/ws/package-lock.json"}));
        b.push(EntryBody::ToolResult(ToolResultEntry {
            call_id: "r1".into(),
            tool_name: Some("Read".into()),
            content: vec![ContentBlock::text("File does not exist.")],
            is_error: true,
            exit_code: None,
        }));
        b.bash("b1", "cat src/a.rs src/missing.rs");
        result(
            &mut b,
            "b1",
            "fn a() {}\ncat: src/missing.rs: No such file or directory",
            Some(1),
        );
        b.call("r2", "Read", json!({"file_path": "/ws/src/b.rs"}));
        result(&mut b, "r2", "fn b() {}", None);
        // No result (the turn was cut off): the agent saw nothing of it.
        b.call("r3", "Read", json!({"file_path": "/ws/src/c.rs"}));
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        let read: Vec<&str> = a.read_files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(read, ["src/a.rs", "src/b.rs"]);
        // A command Codex's sandbox stopped read nothing either.
        b.call(
            "x1",
            "shell",
            json!({"command": ["zsh", "-lc", "sed -n '1,200p' src/d.ts"]}),
        );
        result(
            &mut b,
            "x1",
            "failed in sandbox MacosSeatbelt with execution error: sandbox denied exec error, exit code: 1, stdout: , stderr: sed: src/d.ts: No such file or directory",
            None,
        );
        b.call(
            "x2",
            "shell",
            json!({"command": ["zsh", "-lc", "sed -n '1,200p' src/e.ts"]}),
        );
        result(&mut b, "x2", "export const e = 1;", None);
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        let read: Vec<&str> = a.read_files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(read, ["src/a.rs", "src/b.rs", "src/e.ts"]);
    }

    #[test]
    fn a_file_a_successful_run_reports_missing_was_not_read() {
        let mut b = Builder::new();
        // `| head` makes the run succeed though rg could not open one of its files.
        b.bash(
            "b1",
            "cd pkg && rg -n schema package.json package-lock.json | head -n 20",
        );
        result(
            &mut b,
            "b1",
            "package.json:12:    \"schema\": \"x\"\nrg: package-lock.json: No such file or directory (os error 2)",
            Some(0),
        );
        // A file's text may say anything, even that another file is missing: it was read.
        b.bash("b2", "cat notes.md");
        result(
            &mut b,
            "b2",
            "cat: config.toml: No such file or directory, says the log in notes.md",
            Some(0),
        );
        answered(&mut b);
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        let read: Vec<&str> = a.read_files.iter().map(|f| f.path.as_str()).collect();
        // Claude Code's shell stays in the folder a `cd` left it in.
        assert_eq!(read, ["pkg/package.json", "pkg/notes.md"]);
        // A tool that could not open a file it was given, quoted after what it could not do.
        let mut b = Builder::new();
        b.bash("h1", "head -n 3 a.txt b.txt; true");
        result(
            &mut b,
            "h1",
            "==> a.txt <==\nalpha\nhead: cannot open 'b.txt' for reading: No such file or directory",
            Some(0),
        );
        answered(&mut b);
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        let read: Vec<&str> = a.read_files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(read, ["a.txt"]);
    }

    #[test]
    fn dependency_cache_and_skill_files_are_not_files_read() {
        let mut b = Builder::new();
        for p in [
            "/ws/node_modules/react/index.d.ts",
            "/ws/.venv/lib/python3.12/site-packages/x/y.py",
            "/home/me/.cargo/registry/src/serde-1.0/src/lib.rs",
            "/home/me/go/pkg/mod/github.com/x/y.go",
            "/ws/.claude/skills/release/SKILL.md",
            "/home/me/.codex/prompts/review.md",
            "/ws/.git/config",
            "/ws/src/main.rs",
            "/ws/.github/workflows/ci.yml",
        ] {
            b.call("r", "Read", json!({"file_path": p}));
        }
        answered(&mut b);
        let a = collect("/ws", None, b.session.entries(), &ToolMapping::default());
        let read: Vec<&str> = a.read_files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(read, ["src/main.rs", ".github/workflows/ci.yml"]);
    }

    #[test]
    fn normalized_paths() {
        assert_eq!(normalize_path("/a/./b//c/../d"), "/a/b/d");
        assert_eq!(normalize_path("../x/./y"), "../x/y");
        assert_eq!(normalize_path("a/../.."), "..");
        assert_eq!(normalize_path("/.."), "/");
        assert_eq!(normalize_path("~/p/../q"), "~/q");
        assert_eq!(normalize_path("./"), ".");
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
        answered(&mut b);
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
