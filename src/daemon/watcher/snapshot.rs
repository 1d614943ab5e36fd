//! The polling fallback's view of a tree: each recordable file's modification time (to the
//! nanosecond where the file system keeps it) and size. Two scans compared give the changes
//! between them, so two edits in the same second are both seen.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::filter::ChangeFilter;
use soba_core::session::entry::FileOp;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub modified: Option<SystemTime>,
    pub len: u64,
}

/// Every file under the kept folders of a root that the filter would record.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub files: HashMap<PathBuf, Stamp>,
    /// Folders the scan read.
    pub folders: usize,
}

impl Snapshot {
    /// Walk the kept folders under `top` and stamp their files. Symbolic links are left out:
    /// their targets live elsewhere and a link cycle must not trap the scan.
    pub fn scan(filter: &mut ChangeFilter, top: &Path) -> Snapshot {
        let mut files = HashMap::new();
        let dirs = filter.kept_dirs(top);
        for dir in &dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let Ok(meta) = entry.metadata() else { continue };
                if !meta.is_file() {
                    continue;
                }
                let path = entry.path();
                if filter.ignored(&path, false) {
                    continue;
                }
                files.insert(
                    path,
                    Stamp {
                        modified: meta.modified().ok(),
                        len: meta.len(),
                    },
                );
            }
        }
        Snapshot {
            files,
            folders: dirs.len(),
        }
    }

    /// What changed from `self` to `next`, in path order.
    pub fn changes_to(&self, next: &Snapshot) -> Vec<(PathBuf, FileOp)> {
        let mut changes: Vec<(PathBuf, FileOp)> = next
            .files
            .iter()
            .filter_map(|(path, stamp)| match self.files.get(path) {
                None => Some((path.clone(), FileOp::Created)),
                Some(old) if old != stamp => Some((path.clone(), FileOp::Modified)),
                Some(_) => None,
            })
            .chain(
                self.files
                    .keys()
                    .filter(|path| !next.files.contains_key(*path))
                    .map(|path| (path.clone(), FileOp::Deleted)),
            )
            .collect();
        changes.sort_by(|a, b| a.0.cmp(&b.0));
        changes
    }

    /// What changed from `self` to `next` when the ignore rules changed in between, so that
    /// files came into view (a folder no longer ignored) or went out of it: a file that
    /// appeared is new only if written since the previous scan began (`since`), and one that
    /// disappeared is deleted only if it is gone from disk.
    pub fn changes_across_rule_change(
        &self,
        next: &Snapshot,
        since: SystemTime,
        exists: impl Fn(&Path) -> bool,
    ) -> Vec<(PathBuf, FileOp)> {
        // The kernel stamps files from a clock that may lag the one `since` was read from.
        let since = since - CLOCK_SLACK;
        self.changes_to(next)
            .into_iter()
            .filter(|(path, op)| match op {
                FileOp::Created => next.files[path].modified.is_none_or(|m| m >= since),
                FileOp::Deleted => !exists(path),
                _ => true,
            })
            .collect()
    }
}

const CLOCK_SLACK: std::time::Duration = std::time::Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn stamp(nanos: u64, len: u64) -> Stamp {
        Stamp {
            modified: Some(SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos)),
            len,
        }
    }

    fn snapshot(files: &[(&str, Stamp)]) -> Snapshot {
        Snapshot {
            files: files.iter().map(|(p, s)| (PathBuf::from(p), *s)).collect(),
            folders: 1,
        }
    }

    #[test]
    fn two_scans_give_created_modified_and_deleted_files() {
        let second = 1_700_000_000_000_000_000;
        let before = snapshot(&[
            ("/w/same.rs", stamp(second, 10)),
            ("/w/edited.rs", stamp(second + 1_000, 10)),
            ("/w/grown.rs", stamp(second, 10)),
            ("/w/gone.rs", stamp(second, 10)),
        ]);
        let after = snapshot(&[
            ("/w/same.rs", stamp(second, 10)),
            // Rewritten within the same second, same size: only the nanoseconds moved.
            ("/w/edited.rs", stamp(second + 900_000, 10)),
            // Same time stamp (a coarse file system), different size.
            ("/w/grown.rs", stamp(second, 11)),
            ("/w/new.rs", stamp(second, 1)),
        ]);
        let ops = |changes: Vec<(PathBuf, FileOp)>| {
            changes
                .into_iter()
                .map(|(p, op)| (p.to_string_lossy().into_owned(), op))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            ops(before.changes_to(&after)),
            [
                ("/w/edited.rs".to_string(), FileOp::Modified),
                ("/w/gone.rs".to_string(), FileOp::Deleted),
                ("/w/grown.rs".to_string(), FileOp::Modified),
                ("/w/new.rs".to_string(), FileOp::Created),
            ]
        );
        assert!(after.changes_to(&after).is_empty());
    }

    #[test]
    fn files_that_only_came_into_or_out_of_view_are_not_changes() {
        let second = 1_700_000_000_000_000_000u64;
        let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_nanos(second + s * 1_000_000_000);
        let before = snapshot(&[
            ("/w/.gitignore", stamp(second, 5)),
            ("/w/now-ignored.log", stamp(second, 5)),
            ("/w/removed.rs", stamp(second, 5)),
        ]);
        let after = snapshot(&[
            ("/w/.gitignore", stamp(second + 20_000_000_000, 0)),
            // In a folder no longer ignored: written long before the previous scan.
            ("/w/gen/old.rs", stamp(second, 5)),
            // Written since the previous scan began (at +10 s).
            ("/w/gen/new.rs", stamp(second + 15_000_000_000, 5)),
        ]);
        let on_disk = |p: &Path| p == Path::new("/w/now-ignored.log");
        let changes = before.changes_across_rule_change(&after, at(10), on_disk);
        let got: Vec<(String, FileOp)> = changes
            .into_iter()
            .map(|(p, op)| (p.to_string_lossy().into_owned(), op))
            .collect();
        assert_eq!(
            got,
            [
                ("/w/.gitignore".to_string(), FileOp::Modified),
                ("/w/gen/new.rs".to_string(), FileOp::Created),
                ("/w/removed.rs".to_string(), FileOp::Deleted),
            ]
        );
    }

    #[test]
    fn a_scan_leaves_out_ignored_skipped_and_linked_entries() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(root.join(".gitignore"), "*.log\nbuild/\n").unwrap();
        for d in ["src", "build", "node_modules/pkg", ".git"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in [
            "src/a.rs",
            "x.log",
            "build/out.o",
            "node_modules/pkg/i.js",
            ".git/HEAD",
        ] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink(root.join("src"), root.join("src/loop")).unwrap();
        let mut filter = ChangeFilter::new(&root);
        let snap = Snapshot::scan(&mut filter, &root);
        let mut got: Vec<String> = snap
            .files
            .keys()
            .map(|p| {
                p.strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        got.sort();
        assert_eq!(got, [".gitignore", "src/a.rs"]);
    }
}
