//! File changes under a workspace root, recorded as `file` entries in its live sessions.
//!
//! Edits made by shell commands, formatters or the user never pass through a tool call, so the
//! capsule's modified files would miss them; the watcher closes that gap. Events are debounced
//! (a burst of writes is one change), filtered through `.gitignore` files, `.soba/`, `.git/` and
//! build output, deduplicated per path, and capped per batch. When the OS watch limit is
//! exhausted the watcher falls back to polling and says so instead of failing.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use notify::event::{EventKind, MetadataKind, ModifyKind, RenameMode};
use notify::{PollWatcher, RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{new_debouncer_opt, DebounceEventResult, Debouncer, NoCache};

use crate::session::entry::{FileEntry, FileOp, FileSource};

/// Path components that are never recorded: SOBA's own folder, VCS metadata, build output.
const SKIPPED_DIRS: &[&str] = &[".soba", ".git", ".hg", ".svn", "target", "node_modules"];

/// At most this many distinct paths per debounced batch; the rest are counted and dropped.
pub const MAX_CHANGES_PER_BATCH: usize = 256;

/// Quiet time before a burst of events is reported.
pub const DEBOUNCE: Duration = Duration::from_millis(300);

/// How often the polling fallback scans.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchMode {
    /// inotify / FSEvents / ReadDirectoryChanges; falls back to polling at the watch limit.
    Native,
    /// Periodic scans.
    Poll,
}

/// A running watch of one workspace root; dropping it stops the watch.
pub enum WorkspaceWatcher {
    Native(Debouncer<RecommendedWatcher, NoCache>),
    Poll(Debouncer<PollWatcher, NoCache>),
}

impl std::fmt::Debug for WorkspaceWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WorkspaceWatcher::Native(_) => "WorkspaceWatcher::Native",
            WorkspaceWatcher::Poll(_) => "WorkspaceWatcher::Poll",
        })
    }
}

impl WorkspaceWatcher {
    /// Watch `root`; `sink` receives each batch of changes (on the watcher's thread).
    /// The second value is a warning when the watcher had to fall back to polling.
    pub fn start<S>(
        root: &Path,
        mode: WatchMode,
        sink: S,
    ) -> notify::Result<(WorkspaceWatcher, Option<String>)>
    where
        S: Fn(Vec<FileEntry>) + Send + Sync + Clone + 'static,
    {
        if mode == WatchMode::Native {
            match start_native(root, sink.clone()) {
                Ok(w) => return Ok((w, None)),
                Err(e) if is_watch_limit(&e) => {
                    let w = start_poll(root, sink)?;
                    let warning = format!(
                        "the OS file-watch limit is exhausted ({e}); watching {} by polling every {}s instead. \
                         Raise the limit (Linux: sysctl fs.inotify.max_user_watches) for instant updates",
                        root.display(),
                        POLL_INTERVAL.as_secs()
                    );
                    return Ok((w, Some(warning)));
                }
                Err(e) => return Err(e),
            }
        }
        Ok((start_poll(root, sink)?, None))
    }

    pub fn mode(&self) -> WatchMode {
        match self {
            WorkspaceWatcher::Native(_) => WatchMode::Native,
            WorkspaceWatcher::Poll(_) => WatchMode::Poll,
        }
    }
}

fn handler<S>(root: &Path, sink: S) -> impl FnMut(DebounceEventResult) + Send + 'static
where
    S: Fn(Vec<FileEntry>) + Send + 'static,
{
    let mut filter = ChangeFilter::new(root);
    move |result: DebounceEventResult| {
        let Ok(events) = result else { return };
        let raw = events.into_iter().flat_map(|e| {
            let kind = e.event.kind;
            let n = e.event.paths.len();
            e.event
                .paths
                .into_iter()
                .enumerate()
                .map(move |(i, p)| (kind, i, n, p))
                .collect::<Vec<_>>()
        });
        let (changes, dropped) =
            filter.batch(raw.filter_map(|(kind, i, n, p)| change_op(kind, i, n).map(|op| (p, op))));
        if dropped > 0 {
            eprintln!("soba: {dropped} more file changes in one burst were not recorded (limit {MAX_CHANGES_PER_BATCH})");
        }
        if !changes.is_empty() {
            sink(changes);
        }
    }
}

fn start_native<S>(root: &Path, sink: S) -> notify::Result<WorkspaceWatcher>
where
    S: Fn(Vec<FileEntry>) + Send + Sync + 'static,
{
    let mut d = new_debouncer_opt::<_, RecommendedWatcher, NoCache>(
        DEBOUNCE,
        None,
        handler(root, sink),
        NoCache,
        notify::Config::default(),
    )?;
    d.watch(root, RecursiveMode::Recursive)?;
    Ok(WorkspaceWatcher::Native(d))
}

fn start_poll<S>(root: &Path, sink: S) -> notify::Result<WorkspaceWatcher>
where
    S: Fn(Vec<FileEntry>) + Send + Sync + 'static,
{
    let mut d = new_debouncer_opt::<_, PollWatcher, NoCache>(
        DEBOUNCE,
        None,
        handler(root, sink),
        NoCache,
        notify::Config::default().with_poll_interval(POLL_INTERVAL),
    )?;
    d.watch(root, RecursiveMode::Recursive)?;
    Ok(WorkspaceWatcher::Poll(d))
}

/// Whether a watcher error means the OS ran out of watches (inotify `ENOSPC`, `EMFILE`).
pub fn is_watch_limit(e: &notify::Error) -> bool {
    match &e.kind {
        notify::ErrorKind::MaxFilesWatch => true,
        notify::ErrorKind::Io(io) => {
            matches!(io.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EMFILE))
        }
        _ => false,
    }
}

/// The file operation an event means for its `index`-th of `count` paths; `None` for events
/// that change no content (access, permissions, ownership).
pub fn change_op(kind: EventKind, index: usize, count: usize) -> Option<FileOp> {
    match kind {
        EventKind::Create(_) => Some(FileOp::Created),
        EventKind::Remove(_) => Some(FileOp::Deleted),
        EventKind::Modify(ModifyKind::Name(RenameMode::From)) => Some(FileOp::Deleted),
        EventKind::Modify(ModifyKind::Name(RenameMode::To)) => Some(FileOp::Created),
        // A rename with both paths: the first disappears, the second appears.
        EventKind::Modify(ModifyKind::Name(RenameMode::Both)) if count == 2 => {
            Some(if index == 0 {
                FileOp::Deleted
            } else {
                FileOp::Created
            })
        }
        // The polling watcher's only sign of a write: the modification time moved forward.
        // (Native watchers report writes as data changes and never send this kind.)
        EventKind::Modify(ModifyKind::Metadata(MetadataKind::WriteTime)) => Some(FileOp::Modified),
        EventKind::Modify(ModifyKind::Metadata(_)) => None,
        EventKind::Modify(_) => Some(FileOp::Modified),
        EventKind::Access(_) | EventKind::Other | EventKind::Any => None,
    }
}

/// Turns raw paths into recorded changes: inside the root, not ignored, files only, one per
/// path per batch, at most [`MAX_CHANGES_PER_BATCH`].
pub struct ChangeFilter {
    root: PathBuf,
    /// `.gitignore` matcher per directory (None: the directory has none), loaded lazily.
    ignores: HashMap<PathBuf, Option<Gitignore>>,
}

/// Directories whose `.gitignore` stays cached; the cache is cleared beyond that.
const IGNORE_CACHE_LIMIT: usize = 4096;

impl ChangeFilter {
    pub fn new(root: &Path) -> Self {
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        ChangeFilter {
            root,
            ignores: HashMap::new(),
        }
    }

    /// Changes to record, in path order, and how many were dropped over the cap.
    pub fn batch(
        &mut self,
        raw: impl IntoIterator<Item = (PathBuf, FileOp)>,
    ) -> (Vec<FileEntry>, usize) {
        let mut latest: BTreeMap<String, FileOp> = BTreeMap::new();
        let mut dropped = 0;
        for (path, op) in raw {
            if path.file_name().is_some_and(|n| n == ".gitignore") {
                if let Some(dir) = path.parent() {
                    self.ignores.remove(dir);
                }
            }
            // A new folder's files can be written before the OS watch on the folder exists;
            // they are reported by looking inside it.
            if op == FileOp::Created && path.is_dir() {
                for file in files_under(&path, MAX_CHANGES_PER_BATCH) {
                    if let Some(rel) = self.recordable(&file, FileOp::Created) {
                        if latest.len() < MAX_CHANGES_PER_BATCH || latest.contains_key(&rel) {
                            latest.insert(rel, FileOp::Created);
                        } else {
                            dropped += 1;
                        }
                    }
                }
                continue;
            }
            let Some(rel) = self.recordable(&path, op) else {
                continue;
            };
            let merged = match (latest.get(&rel), op) {
                // Created then modified in one burst is still a new file.
                (Some(FileOp::Created), FileOp::Modified) => FileOp::Created,
                // Deleted then created again (an editor's atomic save) is a modification.
                (Some(FileOp::Deleted), FileOp::Created) => FileOp::Modified,
                _ => op,
            };
            if latest.len() >= MAX_CHANGES_PER_BATCH && !latest.contains_key(&rel) {
                dropped += 1;
                continue;
            }
            latest.insert(rel, merged);
        }
        let changes = latest
            .into_iter()
            .map(|(path, op)| FileEntry {
                path,
                op,
                source: FileSource::Watcher,
            })
            .collect();
        (changes, dropped)
    }

    /// The workspace-relative path to record, or `None` when the path is skipped.
    fn recordable(&mut self, path: &Path, op: FileOp) -> Option<String> {
        let rel = path.strip_prefix(&self.root).ok()?;
        if rel.as_os_str().is_empty() {
            return None;
        }
        if rel
            .components()
            .any(|c| SKIPPED_DIRS.iter().any(|s| c.as_os_str() == *s))
        {
            return None;
        }
        let is_dir = op != FileOp::Deleted && path.is_dir();
        if is_dir || (op != FileOp::Deleted && !path.exists()) {
            return None;
        }
        if self.ignored(path) {
            return None;
        }
        Some(rel.to_string_lossy().into_owned())
    }

    /// Whether a `.gitignore` between the root and the path ignores it; the deepest file
    /// that has an opinion decides (so `!negations` in subfolders work).
    fn ignored(&mut self, path: &Path) -> bool {
        if self.ignores.len() > IGNORE_CACHE_LIMIT {
            self.ignores.clear();
        }
        let mut dirs: Vec<PathBuf> = path
            .ancestors()
            .skip(1)
            .take_while(|d| d.starts_with(&self.root))
            .map(Path::to_path_buf)
            .collect();
        // Deepest first.
        for dir in dirs.drain(..) {
            let matcher = self
                .ignores
                .entry(dir.clone())
                .or_insert_with(|| load_gitignore(&dir, dir == self.root));
            if let Some(m) = matcher {
                let m = m.matched_path_or_any_parents(path, false);
                if m.is_ignore() {
                    return true;
                }
                if m.is_whitelist() {
                    return false;
                }
            }
        }
        false
    }
}

/// Up to `limit` files below `dir` (skipped folders left out).
fn files_under(dir: &Path, limit: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in rd.flatten() {
            if out.len() >= limit {
                return out;
            }
            let p = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() && !SKIPPED_DIRS.iter().any(|s| entry.file_name() == *s) => {
                    stack.push(p)
                }
                Ok(t) if t.is_dir() => {}
                Ok(t) if t.is_file() => out.push(p),
                _ => {}
            }
        }
    }
    out
}

fn load_gitignore(dir: &Path, is_root: bool) -> Option<Gitignore> {
    let mut b = GitignoreBuilder::new(dir);
    let mut any = false;
    let mut candidates = vec![dir.join(".gitignore")];
    if is_root {
        candidates.push(dir.join(".git").join("info").join("exclude"));
    }
    for file in candidates {
        if file.is_file() && b.add(&file).is_none() {
            any = true;
        }
    }
    if !any {
        return None;
    }
    b.build().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, DataChange, RemoveKind};

    #[test]
    fn events_map_to_file_operations() {
        assert_eq!(
            change_op(EventKind::Create(CreateKind::File), 0, 1),
            Some(FileOp::Created)
        );
        assert_eq!(
            change_op(EventKind::Remove(RemoveKind::File), 0, 1),
            Some(FileOp::Deleted)
        );
        assert_eq!(
            change_op(
                EventKind::Modify(ModifyKind::Data(DataChange::Content)),
                0,
                1
            ),
            Some(FileOp::Modified)
        );
        assert_eq!(
            change_op(
                EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
                0,
                1
            ),
            None
        );
        assert_eq!(
            change_op(
                EventKind::Modify(ModifyKind::Metadata(MetadataKind::WriteTime)),
                0,
                1
            ),
            Some(FileOp::Modified)
        );
        let both = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        assert_eq!(change_op(both, 0, 2), Some(FileOp::Deleted));
        assert_eq!(change_op(both, 1, 2), Some(FileOp::Created));
    }

    #[test]
    fn watch_limit_errors_are_recognized() {
        assert!(is_watch_limit(&notify::Error::new(
            notify::ErrorKind::MaxFilesWatch
        )));
        assert!(is_watch_limit(&notify::Error::io(
            std::io::Error::from_raw_os_error(libc::ENOSPC)
        )));
        assert!(!is_watch_limit(&notify::Error::io(
            std::io::Error::from_raw_os_error(libc::EACCES)
        )));
        assert!(!is_watch_limit(&notify::Error::path_not_found()));
    }

    #[test]
    fn filter_honours_gitignore_skips_build_output_and_merges_bursts() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(root.join(".gitignore"), "*.log\nout/\n").unwrap();
        std::fs::create_dir_all(root.join("src/gen")).unwrap();
        std::fs::write(root.join("src/gen/.gitignore"), "*.rs\n!keep.rs\n").unwrap();
        for f in [
            "src/a.rs",
            "x.log",
            "src/gen/b.rs",
            "src/gen/keep.rs",
            "new.txt",
        ] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        std::fs::create_dir_all(root.join("out")).unwrap();
        std::fs::write(root.join("out/o.txt"), "x").unwrap();
        std::fs::create_dir_all(root.join(".soba/memory")).unwrap();
        std::fs::write(root.join(".soba/memory/m.md"), "x").unwrap();
        let mut f = ChangeFilter::new(&root);
        let (changes, dropped) = f.batch([
            (root.join("src/a.rs"), FileOp::Modified),
            (root.join("x.log"), FileOp::Modified),
            (root.join("out/o.txt"), FileOp::Modified),
            (root.join("src/gen/b.rs"), FileOp::Modified),
            (root.join("src/gen/keep.rs"), FileOp::Modified),
            (root.join(".soba/memory/m.md"), FileOp::Created),
            (root.join("src"), FileOp::Modified),
            (root.join("new.txt"), FileOp::Created),
            (root.join("new.txt"), FileOp::Modified),
            (root.join("gone.txt"), FileOp::Deleted),
            (PathBuf::from("/elsewhere/file"), FileOp::Modified),
        ]);
        assert_eq!(dropped, 0);
        let got: Vec<(String, FileOp)> = changes.into_iter().map(|c| (c.path, c.op)).collect();
        assert_eq!(
            got,
            [
                ("gone.txt".to_string(), FileOp::Deleted),
                ("new.txt".to_string(), FileOp::Created),
                ("src/a.rs".to_string(), FileOp::Modified),
                ("src/gen/keep.rs".to_string(), FileOp::Modified),
            ]
        );
    }

    #[test]
    fn a_new_folder_reports_the_files_inside_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("pkg/sub/target")).unwrap();
        std::fs::write(root.join("pkg/a.rs"), "x").unwrap();
        std::fs::write(root.join("pkg/sub/b.rs"), "x").unwrap();
        std::fs::write(root.join("pkg/sub/target/out.o"), "x").unwrap();
        let (changes, _) = ChangeFilter::new(&root).batch([(root.join("pkg"), FileOp::Created)]);
        let got: Vec<_> = changes.into_iter().map(|c| (c.path, c.op)).collect();
        assert_eq!(
            got,
            [
                ("pkg/a.rs".to_string(), FileOp::Created),
                ("pkg/sub/b.rs".to_string(), FileOp::Created)
            ]
        );
    }

    #[test]
    fn a_burst_is_capped() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let mut f = ChangeFilter::new(&root);
        let n = MAX_CHANGES_PER_BATCH + 10;
        let (changes, dropped) =
            f.batch((0..n).map(|i| (root.join(format!("f{i}")), FileOp::Deleted)));
        assert_eq!(changes.len(), MAX_CHANGES_PER_BATCH);
        assert_eq!(dropped, 10);
    }
}
