//! What the watcher records and which folders it watches: paths inside the root, outside
//! `.soba/`, VCS metadata, build output and anything a `.gitignore` ignores; files only, one
//! change per path per burst.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use notify::event::{EventKind, MetadataKind, ModifyKind, RenameMode};

use soba_core::session::entry::{FileEntry, FileOp, FileSource};

/// Path components that are never recorded: SOBA's own folder, VCS metadata, build output.
const SKIPPED_DIRS: &[&str] = &[".soba", ".git", ".hg", ".svn", "target", "node_modules"];

/// At most this many distinct paths per burst; the rest are counted and dropped.
pub const MAX_CHANGES_PER_BATCH: usize = 256;

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
/// path per batch, at most [`MAX_CHANGES_PER_BATCH`]. Also decides which folders are worth a
/// watch: those whose files could be recorded.
pub struct ChangeFilter {
    root: PathBuf,
    /// Folders never recorded nor watched, wherever they lie: SOBA's own data and runtime
    /// folders. Recording a write to a session log would append to that log, which the
    /// watcher would record again: a session growing forever with no activity.
    excluded: Vec<PathBuf>,
    /// `.gitignore` matcher per directory (None: the directory has none), loaded lazily.
    ignores: HashMap<PathBuf, Option<Gitignore>>,
}

/// Directories whose `.gitignore` stays cached; the cache is cleared beyond that.
const IGNORE_CACHE_LIMIT: usize = 1 << 16;

impl ChangeFilter {
    pub fn new(root: &Path) -> Self {
        let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        ChangeFilter {
            root,
            excluded: Vec::new(),
            ignores: HashMap::new(),
        }
    }

    /// Never record or watch anything under `dirs` (which need not exist yet).
    pub fn excluding(mut self, dirs: &[PathBuf]) -> Self {
        self.excluded = dirs.iter().map(|d| resolved(d)).collect();
        self
    }

    /// The canonical root every recorded path is relative to.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Changes to record, in path order, and how many were dropped over the cap.
    ///
    /// A path's net change over the burst follows from its first event and whether it exists
    /// now: created and gone again (a temporary file) is nothing; deleted and back (an
    /// editor's atomic save) is a modification.
    pub fn batch(
        &mut self,
        raw: impl IntoIterator<Item = (PathBuf, FileOp)>,
    ) -> (Vec<FileEntry>, usize) {
        let mut first: BTreeMap<PathBuf, FileOp> = BTreeMap::new();
        let mut dropped = 0;
        let mut note = |first: &mut BTreeMap<PathBuf, FileOp>, path: PathBuf, op: FileOp| {
            if first.contains_key(&path) {
                return;
            }
            if first.len() >= MAX_CHANGES_PER_BATCH {
                dropped += 1;
                return;
            }
            first.insert(path, op);
        };
        for (path, op) in raw {
            if path.file_name().is_some_and(|n| n == ".gitignore") {
                if let Some(dir) = path.parent() {
                    self.gitignore_changed(dir);
                }
            }
            if self.relative(&path).is_none() {
                continue;
            }
            // A new folder's files can be written before the OS watch on the folder exists;
            // they are reported by looking inside it.
            if op == FileOp::Created && path.is_dir() {
                for file in self.kept_files(&path, MAX_CHANGES_PER_BATCH) {
                    if self.relative(&file).is_some() {
                        note(&mut first, file, FileOp::Created);
                    }
                }
                continue;
            }
            note(&mut first, path, op);
        }
        let mut changes = Vec::with_capacity(first.len());
        for (path, op) in first {
            let exists = std::fs::symlink_metadata(&path).ok();
            if exists.as_ref().is_some_and(|m| m.is_dir()) {
                continue;
            }
            let op = match (op, exists.is_some()) {
                (FileOp::Created, true) => FileOp::Created,
                (FileOp::Created, false) => continue,
                (_, false) => FileOp::Deleted,
                (_, true) => FileOp::Modified,
            };
            if self.ignored(&path, false) {
                continue;
            }
            let Some(rel) = self.relative(&path) else {
                continue;
            };
            changes.push(FileEntry {
                path: rel.to_string_lossy().into_owned(),
                op,
                source: FileSource::Watcher,
            });
        }
        (changes, dropped)
    }

    /// The path relative to the root, or `None` when it is outside the root, the root itself,
    /// or under a skipped folder.
    fn relative<'p>(&self, path: &'p Path) -> Option<&'p Path> {
        let rel = path.strip_prefix(&self.root).ok()?;
        if rel.as_os_str().is_empty() || rel.components().any(|c| is_skipped(c.as_os_str())) {
            return None;
        }
        if self.excluded.iter().any(|x| path.starts_with(x)) {
            return None;
        }
        Some(rel)
    }

    /// Whether files in `dir` could be recorded, so a watch on it is worth its cost.
    pub fn keeps_dir(&mut self, dir: &Path) -> bool {
        if dir == self.root {
            return true;
        }
        self.relative(dir).is_some() && !self.ignored(dir, true)
    }

    /// The kept folders at and below `top` (itself included when kept), parents first.
    /// Symbolic links are not followed, so a link cycle cannot trap the walk.
    pub fn kept_dirs(&mut self, top: &Path) -> Vec<PathBuf> {
        if !self.keeps_dir(top) {
            return Vec::new();
        }
        let mut out = vec![top.to_path_buf()];
        let mut next = 0;
        while next < out.len() {
            let dir = out[next].clone();
            out.extend(self.kept_subdirs(&dir));
            next += 1;
        }
        out
    }

    /// The kept folders directly inside `dir` (none when it cannot be read); links are left
    /// out.
    pub fn kept_subdirs(&mut self, dir: &Path) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
            .map(|entry| entry.path())
            .filter(|child| self.keeps_dir(child))
            .collect()
    }

    /// Up to `limit` files in the kept folders at and below `top`, read no further than needed.
    fn kept_files(&mut self, top: &Path, limit: usize) -> Vec<PathBuf> {
        let mut files = Vec::new();
        if !self.keeps_dir(top) {
            return files;
        }
        let mut queue = vec![top.to_path_buf()];
        while let Some(dir) = queue.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                if files.len() >= limit {
                    return files;
                }
                match entry.file_type() {
                    Ok(t) if t.is_file() => files.push(entry.path()),
                    Ok(t) if t.is_dir() && self.keeps_dir(&entry.path()) => {
                        queue.push(entry.path())
                    }
                    _ => {}
                }
            }
        }
        files
    }

    /// A `.gitignore` in `dir` was written or removed: read it afresh next time.
    pub fn gitignore_changed(&mut self, dir: &Path) {
        self.ignores.remove(dir);
    }

    /// Whether a `.gitignore` between the root and the path ignores it; the deepest file
    /// that has an opinion decides (so `!negations` in subfolders work).
    pub fn ignored(&mut self, path: &Path, is_dir: bool) -> bool {
        if self.ignores.len() > IGNORE_CACHE_LIMIT {
            self.ignores.clear();
        }
        // Deepest first.
        for dir in path
            .ancestors()
            .skip(1)
            .take_while(|d| d.starts_with(&self.root))
        {
            if !self.ignores.contains_key(dir) {
                let m = load_gitignore(dir, dir == self.root);
                self.ignores.insert(dir.to_path_buf(), m);
            }
            if let Some(m) = &self.ignores[dir] {
                let m = m.matched_path_or_any_parents(path, is_dir);
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

/// `path` with symbolic links resolved as far as it exists, the rest appended as given: the
/// form watched paths take (the root is canonical), for a folder that may not exist yet.
fn resolved(path: &Path) -> PathBuf {
    let mut existing = path;
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

fn is_skipped(name: &std::ffi::OsStr) -> bool {
    SKIPPED_DIRS.iter().any(|s| name == *s)
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
    fn a_path_records_its_net_change_over_the_burst() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(root.join("saved.rs"), "x").unwrap();
        std::fs::write(root.join("kept.rs"), "x").unwrap();
        let mut f = ChangeFilter::new(&root);
        let (changes, _) = f.batch([
            // A temporary file that came and went.
            (root.join("tmp.swp"), FileOp::Created),
            (root.join("tmp.swp"), FileOp::Modified),
            (root.join("tmp.swp"), FileOp::Deleted),
            // An atomic save: the file was replaced.
            (root.join("saved.rs"), FileOp::Deleted),
            (root.join("saved.rs"), FileOp::Created),
            // Written, then removed before the burst was due.
            (root.join("edited-then-gone.rs"), FileOp::Modified),
            (root.join("kept.rs"), FileOp::Modified),
        ]);
        let got: Vec<_> = changes.into_iter().map(|c| (c.path, c.op)).collect();
        assert_eq!(
            got,
            [
                ("edited-then-gone.rs".to_string(), FileOp::Deleted),
                ("kept.rs".to_string(), FileOp::Modified),
                ("saved.rs".to_string(), FileOp::Modified),
            ]
        );
    }

    #[test]
    fn only_folders_whose_files_are_recorded_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(root.join(".gitignore"), "out/\n*.d\n").unwrap();
        for d in [
            "src/deep",
            "src/gen.d",
            "out/x",
            "node_modules/pkg/lib",
            "target/debug",
            ".git/objects",
            "docs",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("docs/.gitignore"), "*\n!keep/\n").unwrap();
        std::fs::create_dir_all(root.join("docs/keep")).unwrap();
        std::fs::create_dir_all(root.join("docs/drop")).unwrap();
        std::os::unix::fs::symlink(&root, root.join("src/loop")).unwrap();
        let mut f = ChangeFilter::new(&root);
        let mut kept: Vec<String> = f
            .kept_dirs(&root)
            .iter()
            .map(|d| {
                d.strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        kept.sort();
        assert_eq!(kept, ["", "docs", "docs/keep", "src", "src/deep"]);
        assert!(f.kept_dirs(&root.join("out")).is_empty());
        assert!(!f.keeps_dir(&root.join("node_modules/pkg")));
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

    /// A data folder inside the workspace (or a workspace that is the home folder holding
    /// it): recording the log's own writes would append to the log, forever.
    #[test]
    fn soba_own_folders_are_never_recorded_nor_watched() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let data = root.join(".local/share/soba");
        std::fs::create_dir_all(data.join("workspaces/w/sessions")).unwrap();
        std::fs::write(data.join("workspaces/w/sessions/s.jsonl"), "x").unwrap();
        std::fs::write(root.join("notes.md"), "x").unwrap();
        // The runtime folder does not exist yet when the watch starts.
        let mut f = ChangeFilter::new(&root).excluding(&[data.clone(), root.join("run/soba")]);
        let (changes, _) = f.batch([
            (data.join("workspaces/w/sessions/s.jsonl"), FileOp::Modified),
            (root.join("notes.md"), FileOp::Modified),
            (root.join("run/soba/soba.sock"), FileOp::Created),
        ]);
        let paths: Vec<_> = changes.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["notes.md"]);
        assert!(!f.keeps_dir(&data));
        assert!(!f.keeps_dir(&data.join("workspaces")));
        assert!(f.keeps_dir(&root.join(".local/share")));
        let (changes, _) = f.batch([(root.join(".local"), FileOp::Created)]);
        assert!(changes.is_empty(), "{changes:?}");
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
