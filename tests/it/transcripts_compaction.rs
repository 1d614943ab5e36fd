//! Compaction over every real transcript, imported: at several points of each session, the
//! capsule keeps every modified file, read file and verification command seen before the cut,
//! and the continuation is smaller than the context it replaces.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
use soba::import::transcript::import_str;
use soba::import::ImportOptions;
use soba_core::compaction::run::Barrier;
use soba_core::config::{Config, Durability, Overrides};
use soba_core::session::entry::{Entry, EntryBody, Outcome};
use soba_core::session::log::SessionLog;
use soba_core::tool_mapping::ToolMapping;

/// Files and checks named by tool calls, extracted here from the raw tool inputs without the
/// engine's extractor: the path arguments of the file tools each agent uses, `apply_patch`
/// headers, and test/build commands in shell calls.
#[derive(Debug, Default)]
struct Seen {
    /// Oldest first; a file touched again moves to the end.
    modified: Newest,
    read: Newest,
    checks: Vec<String>,
}

#[derive(Debug, Default)]
struct Newest(Vec<String>);

impl Newest {
    fn insert(&mut self, p: String) {
        self.0.retain(|x| x != &p);
        self.0.push(p);
    }

    fn extend(&mut self, p: Option<String>) {
        if let Some(p) = p {
            self.insert(p);
        }
    }

    fn newest(&self, n: usize) -> &[String] {
        &self.0[self.0.len().saturating_sub(n)..]
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// How many of the newest facts of each kind the capsule must hold: its lists are bounded
/// (40 modified, 30 read, 15 checks), and a file touched again moves up, so a margin below
/// the bounds.
const NEWEST_MODIFIED: usize = 20;
const NEWEST_READ: usize = 12;
const NEWEST_CHECKS: usize = 8;

fn observe(seen: &mut Seen, workspace: &str, e: &Entry) {
    let rel = |p: &str| {
        let p = p
            .strip_prefix(workspace)
            .map(|r| r.trim_start_matches('/'))
            .unwrap_or(p);
        p.strip_prefix("./").unwrap_or(p).to_string()
    };
    for (_, name, input) in e.tool_calls() {
        let arg = |k: &str| input.get(k).and_then(Value::as_str);
        match name {
            "Edit" | "Write" | "MultiEdit" => seen.modified.extend(arg("file_path").map(rel)),
            "edit" | "write" => seen.modified.extend(arg("path").map(rel)),
            "Read" => seen.read.extend(arg("file_path").map(rel)),
            "read" => seen.read.extend(arg("path").map(rel)),
            "apply_patch" => {
                let patch = arg("input").or(input.as_str()).unwrap_or("");
                for line in patch.lines() {
                    for prefix in ["*** Update File: ", "*** Add File: "] {
                        if let Some(p) = line.strip_prefix(prefix) {
                            seen.modified.insert(rel(p.trim()));
                        }
                    }
                }
            }
            _ => {
                // Codex `shell` passes argv: `["bash", "-lc", SCRIPT]`.
                let argv_script = input
                    .get("command")
                    .and_then(Value::as_array)
                    .and_then(|a| a.last())
                    .and_then(Value::as_str);
                let cmd = arg("command").or(arg("cmd")).or(argv_script).unwrap_or("");
                // Plain viewer commands on one file: `[cd DIR && ]cat|nl -ba|sed -n 'A,Bp' FILE`.
                static VIEW: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
                    regex::Regex::new(
                        r"^(?:cd (\S+) && )?(?:cat|nl -ba|sed -n '\d+,\d+p') ([\w./-]+\.\w+)$",
                    )
                    .unwrap()
                });
                if let Some(c) = VIEW.captures(cmd.trim()) {
                    let file = &c[2];
                    // Codex runs the command in its `workdir`; a `cd` goes on from there.
                    let workdir = arg("workdir").filter(|d| *d != ".");
                    let dir = match (workdir, c.get(1).map(|d| d.as_str())) {
                        (_, Some(d)) if d.starts_with('/') => Some(d.to_string()),
                        (Some(w), Some(d)) => Some(format!("{}/{d}", w.trim_end_matches('/'))),
                        (w, d) => w.or(d).map(str::to_string),
                    };
                    let full = match dir {
                        Some(d) if !file.starts_with('/') => {
                            format!("{}/{file}", d.trim_end_matches('/'))
                        }
                        _ => file.to_string(),
                    };
                    seen.read.insert(rel(&full));
                }
                let starts_check = [
                    "cargo test",
                    "go test",
                    "npm test",
                    "pnpm test",
                    "pytest",
                    "npx tsc",
                    "bun test",
                    "make test",
                ];
                if starts_check.iter().any(|c| cmd.contains(c)) {
                    seen.checks.push(cmd.to_string());
                }
            }
        }
    }
}

fn compact_at_several_points(path: &Path) {
    let text = std::fs::read_to_string(path).expect("fixture");
    let options = ImportOptions {
        source_path: path.display().to_string(),
        default_workspace: "/ws".into(),
        default_session_id: "t".into(),
        now: "2026-01-01T00:00:00Z".into(),
    };
    let imported = import_str(&text, None, &options).expect("imports");
    let workspace = imported.header.workspace.clone();
    // A small retained window so that even the short sessions have history to fold.
    let overrides = Overrides {
        keep_recent_tokens: Some(4000),
        ..Overrides::default()
    };
    let config =
        Config::resolve(&[], imported.header.model_config().as_ref(), &overrides).expect("config");
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("s.jsonl");
    let mut header = imported.header.clone();
    header.model = None;
    let mut log = SessionLog::create(&log_path, header, Durability::Flush).unwrap();
    log.session_mut().configure_counting(&config.model);
    let mapping = ToolMapping::default();
    let barrier = Barrier {
        config: &config,
        mapping: &mapping,
    };

    // Re-parent each imported entry that follows the previous one onto the current leaf, as
    // an agent appending to a live session would: capsules stay on the branch.
    let mut last_imported: Option<String> = None;
    let mut seen = Seen::default();
    let n = imported.entries.len();
    let points = [n / 3, 2 * n / 3, n];
    let mut next = 0;
    let mut compactions = 0;
    for (i, mut e) in imported.entries.into_iter().enumerate() {
        if e.parent_id.is_some() && e.parent_id == last_imported {
            e.parent_id = log.session().leaf_id().map(str::to_string);
        }
        last_imported = Some(e.id.clone());
        let on_main_branch = !matches!(e.body, EntryBody::Rewind(_));
        log.append(e.clone()).expect("append");
        if on_main_branch {
            observe(&mut seen, &workspace, &e);
        }
        if i + 1 == points[next] {
            next = (next + 1).min(points.len() - 1);
            let plan = match barrier.explicit(&mut log, None).unwrap() {
                Ok(plan) => plan,
                Err(r) => {
                    assert_ne!(r.outcome, Outcome::Failed, "{}: {r:?}", path.display());
                    continue;
                }
            };
            // Only what precedes the cut must be in the capsule; everything is on the branch.
            let r = barrier.run_local(&mut log, &plan).unwrap();
            assert_eq!(r.outcome, Outcome::Completed, "{}: {r:?}", path.display());
            assert!(
                r.tokens_after < r.tokens_before,
                "{}: continuation not smaller: {r:?}",
                path.display()
            );
            compactions += 1;
            let s = log.session();
            let cap = s
                .entries()
                .last()
                .and_then(|e| e.as_capsule())
                .expect("capsule appended");
            let modified: BTreeSet<&str> = cap
                .artifacts
                .modified_files
                .iter()
                .map(|f| f.path.as_str())
                .collect();
            let read: BTreeSet<&str> = cap
                .artifacts
                .read_files
                .iter()
                .map(|f| f.path.as_str())
                .collect();
            let renamed_from: BTreeSet<&str> = cap
                .artifacts
                .modified_files
                .iter()
                .filter_map(|f| f.renamed_from.as_deref())
                .collect();
            // A path outside the workspace (a scratch clone, a file in the home folder) is not
            // the project's work, and is not listed as modified.
            let outside = |p: &str| p.starts_with('/') || p.starts_with('~');
            // A list at its bound holds the newest files by any touch (a bulk `mv` of forty
            // files is newer than an edit before it); below the bound it holds every one.
            let modified_full = cap.artifacts.modified_files.len()
                == soba_core::capsule::artifacts::MAX_MODIFIED_FILES;
            for m in seen
                .modified
                .newest(NEWEST_MODIFIED)
                .iter()
                .filter(|m| !outside(m) && !modified_full)
            {
                assert!(
                    modified.contains(m.as_str()) || renamed_from.contains(m.as_str()),
                    "{}: modified file {m} missing from the capsule",
                    path.display()
                );
            }
            // A file read and then modified is listed once, as modified.
            let read_full =
                cap.artifacts.read_files.len() == soba_core::capsule::artifacts::MAX_READ_FILES;
            // A file read and modified competes among the modified ones.
            for f in seen
                .read
                .newest(NEWEST_READ)
                .iter()
                .filter(|_| !read_full && !modified_full)
            {
                assert!(
                    read.contains(f.as_str())
                        || modified.contains(f.as_str())
                        || renamed_from.contains(f.as_str()),
                    "{}: read file {f} missing from the capsule",
                    path.display()
                );
            }
            let mut newest_checks: Vec<&String> = Vec::new();
            for c in seen.checks.iter().rev() {
                if newest_checks.len() < NEWEST_CHECKS && !newest_checks.contains(&c) {
                    newest_checks.push(c);
                }
            }
            for c in newest_checks {
                // The capsule keeps the command as the shell runs it: quotes removed.
                let unquoted = c.replace(['"', '\''], "");
                assert!(
                    cap.artifacts
                        .verification
                        .iter()
                        .any(|v| unquoted.contains(v.command.split(" && ").next().unwrap_or(""))),
                    "{}: verification `{c}` missing from the capsule: {:?}",
                    path.display(),
                    cap.artifacts.verification
                );
            }
        }
    }
    assert!(compactions >= 1, "{}: no compaction ran", path.display());
    eprintln!(
        "{}: {compactions} compactions, {} modified, {} read, {} checks kept",
        path.display(),
        seen.modified.len(),
        seen.read.len(),
        seen.checks.len()
    );
}

#[test]
fn compaction_over_every_real_transcript_keeps_every_fact_seen_before_the_cut() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).into_iter().flatten())
        .map(|f| f.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl" || e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 9, "{files:?}");
    for f in files {
        compact_at_several_points(&f);
    }
}

/// A listed file is shaped like a path: no shell syntax (`{`, `2>&1`, quotes, `$`, globs), no
/// patch or heredoc text, a folder or an extension (or a well-known extensionless file name).
/// Parentheses stay allowed: route groups such as `app/(protected)/page.tsx` are real paths.
fn shaped_like_a_path(p: &str) -> bool {
    const EXTENSIONLESS: [&str; 7] = [
        "Makefile",
        "Dockerfile",
        "Justfile",
        "LICENSE",
        "README",
        "Gemfile",
        "Rakefile",
    ];
    let name = p.trim_end_matches('/').rsplit('/').next().unwrap_or(p);
    !p.is_empty()
        && !p.starts_with('-')
        && !p.contains(|c: char| "{}<>|;&$`\"'*?\n\r\t".contains(c))
        && p.chars().any(char::is_alphanumeric)
        && (p.contains('/') || name.contains('.') || EXTENSIONLESS.contains(&name))
}

#[test]
fn every_listed_file_of_every_real_transcript_is_a_path_the_log_names() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).into_iter().flatten())
        .map(|f| f.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl" || e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 9, "{files:?}");
    let mut listed = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).expect("fixture");
        let options = ImportOptions {
            source_path: path.display().to_string(),
            default_workspace: "/ws".into(),
            default_session_id: "t".into(),
            now: "2026-01-01T00:00:00Z".into(),
        };
        let imported = import_str(&text, None, &options).expect("imports");
        let artifacts = soba_core::capsule::artifacts::collect(
            &imported.header.workspace,
            None,
            imported.entries.iter(),
            &ToolMapping::default(),
        );
        for (kind, list) in [
            ("read", &artifacts.read_files),
            ("modified", &artifacts.modified_files),
        ] {
            for f in list {
                listed += 1;
                assert!(
                    shaped_like_a_path(&f.path),
                    "{}: {kind} file `{}` is not a path",
                    path.display(),
                    f.path
                );
                let name = f.path.trim_end_matches('/').rsplit('/').next().unwrap();
                assert!(
                    text.contains(name),
                    "{}: {kind} file `{}` is named nowhere in the log",
                    path.display(),
                    f.path
                );
            }
        }
    }
    assert!(
        listed > 100,
        "only {listed} files listed over every transcript"
    );
}
