//! A long log of real entries: the Claude Code fixtures in `../shared`, imported as `soba
//! import` does and chained copy after copy (each copy's ids prefixed, its roots hung under the
//! previous copy's last entry) until the log reaches the size asked for.
//!
//! Generated entries are short and alike; real ones carry long tool results, thinking blocks
//! and provider fields, and what a log costs to hold and to read back depends on them (the
//! generated 100 MB log measured 1.48× its size in memory where real entries measured 1.56×).

use std::io::Write;
use std::path::{Path, PathBuf};

use soba::import::transcript::import_str;
use soba::import::{Format, ImportOptions};
use soba_core::session::entry::{Entry, EntryBody, SessionHeader};
use soba_core::session::token_file;

/// The imported Claude Code fixtures, in file-name order, or `None` without `../shared`.
pub fn claude_code_fixtures() -> Option<(SessionHeader, Vec<Vec<Entry>>)> {
    let dir = super::support::transcripts_dir()?.join("claude-code");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    paths.sort();
    let mut header = None;
    let mut sources = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).expect("a fixture reads");
        let options = ImportOptions {
            source_path: path.display().to_string(),
            default_workspace: "/ws".into(),
            default_session_id: "bench-real".into(),
            now: "2026-01-01T00:00:00Z".into(),
        };
        let imported = import_str(&text, Some(Format::ClaudeCode), &options)
            .unwrap_or_else(|e| panic!("{} imports: {e}", path.display()));
        header.get_or_insert(imported.header);
        sources.push(imported.entries);
    }
    Some((header?, sources))
}

/// Copy `copy` of `entries`: every id prefixed, every reference to an id of the same copy
/// prefixed alike, and the roots hung under `after` (the previous copy's last entry).
fn chained_copy(entries: &[Entry], copy: usize, after: Option<&str>) -> Vec<Entry> {
    let own: std::collections::HashSet<&str> = entries.iter().map(|e| e.id.as_str()).collect();
    let renamed = |id: &str| match own.contains(id) {
        true => format!("c{copy}_{id}"),
        false => id.to_string(),
    };
    entries
        .iter()
        .map(|e| {
            let mut e = e.clone();
            e.id = renamed(&e.id);
            e.parent_id = match &e.parent_id {
                Some(p) => Some(renamed(p)),
                None => after.map(str::to_string),
            };
            match &mut e.body {
                EntryBody::Rewind(r) => r.to = renamed(&r.to),
                EntryBody::Intent(i) => i.intent_id = i.intent_id.as_deref().map(renamed),
                EntryBody::Capsule(c) => {
                    c.first_kept_entry_id = c.first_kept_entry_id.as_deref().map(renamed)
                }
                EntryBody::ForeignCompaction(f) => {
                    f.first_kept_entry_id = f.first_kept_entry_id.as_deref().map(renamed);
                    if let Some(ids) = &mut f.kept_entry_ids {
                        ids.iter_mut().for_each(|id| *id = renamed(id));
                    }
                }
                _ => {}
            }
            e
        })
        .collect()
}

/// The fixtures' entries copy after copy, without end.
pub fn chained(sources: &[Vec<Entry>]) -> impl Iterator<Item = Entry> + '_ {
    let mut copy = 0;
    let mut last: Option<String> = None;
    std::iter::from_fn(move || {
        let entries = &sources[copy % sources.len()];
        let out = chained_copy(entries, copy, last.as_deref());
        last = out.last().map(|e| e.id.clone()).or(last.take());
        copy += 1;
        Some(out)
    })
    .flatten()
}

/// Write the log at `path` (about `target_bytes`, lines as SOBA writes them) unless it is
/// there already; no side file, so the first open is cold.
pub fn write(path: &Path, target_bytes: u64, header: &SessionHeader, sources: &[Vec<Entry>]) {
    if path
        .metadata()
        .map(|m| m.len() >= target_bytes)
        .unwrap_or(false)
    {
        return;
    }
    std::fs::create_dir_all(path.parent().expect("parent")).expect("bench dir");
    let _ = std::fs::remove_file(token_file::path_for(path));
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let mut written = 0u64;
    let mut line = serde_json::to_vec(header).expect("header");
    for entry in std::iter::once(None).chain(chained(sources).map(Some)) {
        if let Some(e) = entry {
            line.clear();
            serde_json::to_writer(&mut line, &e).expect("entry");
        }
        line.push(b'\n');
        f.write_all(&line).expect("write");
        written += line.len() as u64;
        if written >= target_bytes {
            break;
        }
    }
    f.flush().expect("flush");
}

/// Check that the log at `path` is what [`write`] makes of the fixtures: it loads with no
/// damaged or re-attached line, and its entries are the fixtures' in chained copies, at least
/// two (so that the chaining itself is in what is measured).
pub fn check(path: &Path, sources: &[Vec<Entry>]) {
    let (session, report) = soba_core::session::log::read_session(path).expect("the log opens");
    assert!(
        report.is_clean(),
        "the real-entries log loads cleanly: {:?}",
        report.summary(path)
    );
    let first_copy = sources[0].len();
    assert!(
        session.len() > first_copy,
        "{} entries: at least two copies",
        session.len()
    );
    for (i, (held, expected)) in session.entries().iter().zip(chained(sources)).enumerate() {
        assert_eq!(held, &expected, "entry {i} of the real-entries log");
    }
    let leaf = session.leaf().expect("a leaf");
    assert!(
        session.is_ancestor(0, leaf),
        "every copy hangs under the one before it"
    );
}
