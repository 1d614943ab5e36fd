//! File changes under a workspace root, recorded as `file` entries in its live sessions.
//!
//! Edits made by shell commands, formatters or the user never pass through a tool call, so the
//! capsule's modified files would miss them; the watcher closes that gap. Events are debounced
//! ([`burst`]: a burst of writes is one change), filtered through `.gitignore` files, `.soba/`,
//! `.git/`, build output and the daemon's own data and runtime folders ([`filter`]), merged per
//! path, and capped per batch.
//!
//! Where the OS watches one folder at a time (inotify, kqueue) only the folders whose files
//! could be recorded are watched, so a large `node_modules/` or ignored build tree costs no
//! watches; folders created later are watched as they appear. When the OS watch limit is
//! exhausted the watcher falls back to polling ([`snapshot`]) and says so instead of failing.

mod burst;
pub mod filter;
mod snapshot;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use self::filter::{change_op, ChangeFilter, MAX_CHANGES_PER_BATCH};
use notify::{RecommendedWatcher, RecursiveMode, Watcher, WatcherKind};

use self::burst::Burst;
use self::snapshot::Snapshot;
use soba_core::session::entry::{FileEntry, FileOp};

/// Quiet time before a burst of events is reported.
pub const DEBOUNCE: Duration = Duration::from_millis(300);

/// A burst that never goes quiet is still reported this often.
pub const LONGEST_BURST: Duration = Duration::from_secs(2);

/// Raw events one burst holds before further ones are only counted: far above what the
/// per-batch cap keeps, and a bound on memory when a tool rewrites a whole tree.
const BURST_CAPACITY: usize = 1 << 16;

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
#[derive(Debug)]
pub struct WorkspaceWatcher {
    mode: WatchMode,
    folders: Arc<AtomicUsize>,
    signals: mpsc::Sender<Signal>,
}

enum Signal {
    Event(notify::Result<notify::Event>),
    Stop,
}

impl Drop for WorkspaceWatcher {
    fn drop(&mut self) {
        let _ = self.signals.send(Signal::Stop);
    }
}

impl WorkspaceWatcher {
    /// Watch `root`; `sink` receives each batch of changes (on the watcher's thread).
    /// The second value is a warning when the watcher had to fall back to polling.
    /// Returns once the watch is in place: a change made after it returns is recorded.
    pub fn start<S>(
        root: &Path,
        mode: WatchMode,
        sink: S,
    ) -> notify::Result<(WorkspaceWatcher, Option<String>)>
    where
        S: Fn(Vec<FileEntry>) + Send + 'static,
    {
        Self::start_excluding(root, mode, &[], sink)
    }

    /// [`start`](Self::start), never watching or recording anything under `excluded` (SOBA's
    /// own data and runtime folders, which may lie inside the workspace).
    pub fn start_excluding<S>(
        root: &Path,
        mode: WatchMode,
        excluded: &[PathBuf],
        sink: S,
    ) -> notify::Result<(WorkspaceWatcher, Option<String>)>
    where
        S: Fn(Vec<FileEntry>) + Send + 'static,
    {
        let root = std::fs::canonicalize(root)
            .map_err(|e| notify::Error::io(e).add_path(root.to_path_buf()))?;
        // Without a native backend on this platform the recommended watcher is itself a
        // poller, and a worse one than ours.
        if mode == WatchMode::Native && RecommendedWatcher::kind() != WatcherKind::PollWatcher {
            match NativeWatch::start(&root, excluded) {
                Ok((native, filter)) => return Ok((native.run(filter, sink), None)),
                Err(e) if is_watch_limit(&e) => {
                    let warning = format!(
                        "the OS file-watch limit is exhausted ({e}); watching {} by polling every {}s instead. \
                         Raise the limit (Linux: sysctl fs.inotify.max_user_watches) for instant updates",
                        root.display(),
                        POLL_INTERVAL.as_secs()
                    );
                    return Ok((PollWatch::start(&root, excluded).run(sink), Some(warning)));
                }
                Err(e) => return Err(e),
            }
        }
        Ok((PollWatch::start(&root, excluded).run(sink), None))
    }

    pub fn mode(&self) -> WatchMode {
        self.mode
    }

    /// Folders under watch: one OS watch each where the OS watches folder by folder, the
    /// folders scanned each round when polling.
    pub fn folders(&self) -> usize {
        self.folders.load(Ordering::Relaxed)
    }
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

/// What both loops share: the filter, the count of folders, and where batches go.
struct Recorder<S> {
    filter: ChangeFilter,
    folders: Arc<AtomicUsize>,
    sink: S,
}

impl<S: Fn(Vec<FileEntry>)> Recorder<S> {
    fn record(&mut self, raw: Vec<(PathBuf, FileOp)>, overflow: usize) {
        let (changes, dropped) = self.filter.batch(raw);
        let dropped = dropped + overflow;
        if dropped > 0 {
            eprintln!(
                "soba: {dropped} more file changes in one burst under {} were not recorded (limit {MAX_CHANGES_PER_BATCH})",
                self.filter.root().display()
            );
        }
        if !changes.is_empty() {
            (self.sink)(changes);
        }
    }
}

fn spawn_loop(name: &str, body: impl FnOnce() + Send + 'static) {
    // A thread that cannot start leaves the workspace unwatched; the daemon goes on.
    if let Err(e) = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(body)
    {
        eprintln!(
            "soba: the file watcher could not start a thread ({e}); file changes are not recorded"
        );
    }
}

/// The OS watcher, its folders, and the events it has queued for the loop.
struct NativeWatch {
    watcher: RecommendedWatcher,
    /// Folders with a watch of their own; empty when the OS watches the root recursively.
    watched: HashSet<PathBuf>,
    per_folder: bool,
    signals: mpsc::Sender<Signal>,
    events: mpsc::Receiver<Signal>,
    limit_reported: bool,
}

impl NativeWatch {
    fn start(root: &Path, excluded: &[PathBuf]) -> notify::Result<(NativeWatch, ChangeFilter)> {
        let (signals, events) = mpsc::channel();
        let forward = signals.clone();
        let mut watcher = RecommendedWatcher::new(
            move |event| {
                let _ = forward.send(Signal::Event(event));
            },
            notify::Config::default(),
        )?;
        let mut filter = ChangeFilter::new(root).excluding(excluded);
        let per_folder = matches!(
            RecommendedWatcher::kind(),
            WatcherKind::Inotify | WatcherKind::Kqueue
        );
        let mode = if per_folder {
            RecursiveMode::NonRecursive
        } else {
            RecursiveMode::Recursive
        };
        watcher.watch(root, mode)?;
        let mut native = NativeWatch {
            watcher,
            watched: HashSet::from([root.to_path_buf()]),
            per_folder,
            signals,
            events,
            limit_reported: false,
        };
        if per_folder {
            native.watch_tree(root.to_path_buf(), &mut filter)?;
        }
        Ok((native, filter))
    }

    fn run<S>(mut self, filter: ChangeFilter, sink: S) -> WorkspaceWatcher
    where
        S: Fn(Vec<FileEntry>) + Send + 'static,
    {
        let folders = Arc::new(AtomicUsize::new(self.watched.len().max(1)));
        let handle = WorkspaceWatcher {
            mode: WatchMode::Native,
            folders: folders.clone(),
            signals: self.signals.clone(),
        };
        let mut recorder = Recorder {
            filter,
            folders,
            sink,
        };
        spawn_loop("soba-watch", move || {
            let mut burst = Burst::new(DEBOUNCE, LONGEST_BURST, BURST_CAPACITY);
            loop {
                let wait = burst.due_at().map_or(Duration::from_secs(3600), |at| {
                    at.saturating_duration_since(Instant::now())
                });
                match self.events.recv_timeout(wait) {
                    Ok(Signal::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                    Ok(Signal::Event(Ok(event))) => self.on_event(event, &mut recorder, &mut burst),
                    Ok(Signal::Event(Err(e))) => eprintln!(
                        "soba: the file watcher of {} reported an error: {e}",
                        recorder.filter.root().display()
                    ),
                    Err(RecvTimeoutError::Timeout) => {}
                }
                if let Some((raw, overflow)) = burst.take_if_due(Instant::now()) {
                    recorder.record(raw, overflow);
                }
            }
        });
        handle
    }

    fn on_event<S>(
        &mut self,
        event: notify::Event,
        recorder: &mut Recorder<S>,
        burst: &mut Burst<(PathBuf, FileOp)>,
    ) {
        if event.need_rescan() {
            eprintln!(
                "soba: the OS dropped file events under {} (its queue overflowed); changes in that burst may be missing",
                recorder.filter.root().display()
            );
        }
        let now = Instant::now();
        let count = event.paths.len();
        for (index, path) in event.paths.into_iter().enumerate() {
            let Some(op) = change_op(event.kind, index, count) else {
                continue;
            };
            if self.per_folder {
                self.follow_folders(&path, op, recorder);
            }
            burst.push(now, (path, op));
        }
        recorder
            .folders
            .store(self.watched.len(), Ordering::Relaxed);
    }

    /// Keep the watches in step with the tree: watch folders as they appear (or stop being
    /// ignored), forget those that go away. Done as the event arrives, not when the burst is
    /// due, so the window in which a new folder's files go unseen stays short.
    fn follow_folders<S>(&mut self, path: &Path, op: FileOp, recorder: &mut Recorder<S>) {
        let filter = &mut recorder.filter;
        if path.file_name().is_some_and(|n| n == ".gitignore") {
            if let Some(dir) = path.parent() {
                filter.gitignore_changed(dir);
                if self.watched.contains(dir) {
                    self.watch_new(dir.to_path_buf(), filter);
                }
            }
            return;
        }
        match op {
            FileOp::Created if path.is_dir() => self.watch_new(path.to_path_buf(), filter),
            FileOp::Deleted if self.watched.contains(path) => {
                // A folder moved away keeps its OS watch under the old name; drop it and
                // everything below, so a folder created later under that name is watched anew.
                let gone: Vec<PathBuf> = self
                    .watched
                    .iter()
                    .filter(|d| d.starts_with(path))
                    .cloned()
                    .collect();
                for dir in gone {
                    let _ = self.watcher.unwatch(&dir);
                    self.watched.remove(&dir);
                }
            }
            _ => {}
        }
    }

    /// Watch the kept folders at and below `top` that have no watch yet, saying once when
    /// the OS runs out of watches.
    fn watch_new(&mut self, top: PathBuf, filter: &mut ChangeFilter) {
        if let Err(e) = self.watch_tree(top, filter) {
            if !self.limit_reported {
                self.limit_reported = true;
                eprintln!(
                    "soba: the OS file-watch limit is exhausted ({e}); changes in new folders under {} are not recorded. \
                     Raise the limit (Linux: sysctl fs.inotify.max_user_watches)",
                    filter.root().display()
                );
            }
        }
    }

    /// Watch the kept folders at and below `top`, each before it is listed: a folder created
    /// inside one once its watch is in place is reported by the watch, one created earlier is
    /// found by the listing, so none falls between the two. Fails only at the watch limit.
    fn watch_tree(&mut self, top: PathBuf, filter: &mut ChangeFilter) -> notify::Result<()> {
        if !filter.keeps_dir(&top) {
            return Ok(());
        }
        let mut queue = vec![top];
        while let Some(dir) = queue.pop() {
            if !self.watched.contains(&dir) {
                match self.watcher.watch(&dir, RecursiveMode::NonRecursive) {
                    Ok(()) => {
                        self.watched.insert(dir.clone());
                    }
                    Err(e) if is_watch_limit(&e) => return Err(e),
                    // Gone or unreadable since it was seen: nothing in it to record.
                    Err(_) => continue,
                }
            }
            queue.extend(filter.kept_subdirs(&dir));
        }
        Ok(())
    }
}

/// The polling fallback: a scan of the kept folders every [`POLL_INTERVAL`].
struct PollWatch {
    filter: ChangeFilter,
    snapshot: Snapshot,
    scanned_at: SystemTime,
}

impl PollWatch {
    /// The first scan happens here, so that changes made once `start` returns are seen.
    fn start(root: &Path, excluded: &[PathBuf]) -> PollWatch {
        let mut filter = ChangeFilter::new(root).excluding(excluded);
        let scanned_at = SystemTime::now();
        let snapshot = Snapshot::scan(&mut filter, root);
        PollWatch {
            filter,
            snapshot,
            scanned_at,
        }
    }

    fn run<S>(self, sink: S) -> WorkspaceWatcher
    where
        S: Fn(Vec<FileEntry>) + Send + 'static,
    {
        let (signals, stop) = mpsc::channel::<Signal>();
        let folders = Arc::new(AtomicUsize::new(self.snapshot.folders));
        let handle = WorkspaceWatcher {
            mode: WatchMode::Poll,
            folders: folders.clone(),
            signals,
        };
        let mut snapshot = self.snapshot;
        let mut recorder = Recorder {
            filter: self.filter,
            folders,
            sink,
        };
        let mut last_scan = self.scanned_at;
        spawn_loop("soba-poll", move || loop {
            match stop.recv_timeout(POLL_INTERVAL) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return,
            }
            let root = recorder.filter.root().to_path_buf();
            let scanned_at = SystemTime::now();
            let mut next = Snapshot::scan(&mut recorder.filter, &root);
            let mut changes = snapshot.changes_to(&next);
            let rules_changed: Vec<PathBuf> = changes
                .iter()
                .filter(|(path, _)| path.file_name().is_some_and(|n| n == ".gitignore"))
                .filter_map(|(path, _)| path.parent().map(Path::to_path_buf))
                .collect();
            if !rules_changed.is_empty() {
                // This scan used the old rules: scan again with the new ones, and leave out
                // files that only came into or went out of view.
                for dir in &rules_changed {
                    recorder.filter.gitignore_changed(dir);
                }
                next = Snapshot::scan(&mut recorder.filter, &root);
                changes = snapshot.changes_across_rule_change(&next, last_scan, |p| p.exists());
            }
            last_scan = scanned_at;
            recorder.folders.store(next.folders, Ordering::Relaxed);
            snapshot = next;
            if !changes.is_empty() {
                recorder.record(changes, 0);
            }
        });
        handle
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live watcher on a fresh temporary tree, and the batches it records.
    struct Live {
        _dir: tempfile::TempDir,
        root: PathBuf,
        watcher: WorkspaceWatcher,
        batches: mpsc::Receiver<Vec<FileEntry>>,
    }

    fn live(mode: WatchMode, tree: impl FnOnce(&Path)) -> Live {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        tree(&root);
        let (tx, batches) = mpsc::channel();
        let (watcher, warning) = WorkspaceWatcher::start(&root, mode, move |changes| {
            let _ = tx.send(changes);
        })
        .unwrap();
        assert_eq!(warning, None);
        assert_eq!(watcher.mode(), mode);
        Live {
            _dir: dir,
            root,
            watcher,
            batches,
        }
    }

    impl Live {
        fn write(&self, rel: &str) {
            let path = self.root.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, rel).unwrap();
        }

        /// Wait until the watcher has `n` folders under watch.
        fn folders_become(&self, n: usize) {
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.watcher.folders() != n {
                assert!(
                    Instant::now() < deadline,
                    "{} folders watched, expected {n}",
                    self.watcher.folders()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }

        /// The paths recorded until `path` shows up (fails after 10 s).
        fn recorded_until(&self, path: &str) -> Vec<(String, FileOp)> {
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut seen = Vec::new();
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let batch = self
                    .batches
                    .recv_timeout(left)
                    .unwrap_or_else(|_| panic!("{path} was not recorded; saw {seen:?}"));
                seen.extend(batch.into_iter().map(|c| (c.path, c.op)));
                if seen.iter().any(|(p, _)| p == path) {
                    return seen;
                }
            }
        }

        /// Let the burst now gathering fall due, so the next change starts a new one.
        fn settle(&self) {
            std::thread::sleep(DEBOUNCE * 2);
            while self.batches.try_recv().is_ok() {}
        }
    }

    #[test]
    fn native_watches_only_the_folders_whose_files_are_recorded() {
        let w = live(WatchMode::Native, |root| {
            std::fs::write(root.join(".gitignore"), "dist/\n").unwrap();
            for d in [
                "src/deep",
                "dist/assets",
                "node_modules/a/b/c",
                "target/debug/deps",
            ] {
                std::fs::create_dir_all(root.join(d)).unwrap();
            }
        });
        // The root, src and src/deep; none of the seven ignored or skipped folders.
        assert_eq!(w.watcher.folders(), 3);
        w.write("src/deep/lib.rs");
        w.write("dist/assets/app.js");
        w.write("node_modules/a/b/c/index.js");
        let seen = w.recorded_until("src/deep/lib.rs");
        assert_eq!(seen, [("src/deep/lib.rs".to_string(), FileOp::Created)]);
    }

    #[test]
    fn native_watches_folders_created_after_it_started() {
        let w = live(WatchMode::Native, |_| {});
        assert_eq!(w.watcher.folders(), 1);
        std::fs::create_dir_all(w.root.join("pkg/sub")).unwrap();
        w.folders_become(3);
        w.settle();
        // Written well after the folder appeared: only its own watch can see this.
        w.write("pkg/sub/late.rs");
        let seen = w.recorded_until("pkg/sub/late.rs");
        assert_eq!(seen, [("pkg/sub/late.rs".to_string(), FileOp::Created)]);
        // An ignored folder created later gets no watch.
        std::fs::create_dir_all(w.root.join("node_modules/x")).unwrap();
        w.write("pkg/after.rs");
        w.recorded_until("pkg/after.rs");
        assert_eq!(w.watcher.folders(), 3);
    }

    /// Folders made in quick succession, each inside the last, while the watcher is adding
    /// watches: every one must end up watched (a folder is watched before it is listed).
    #[test]
    fn native_watches_every_folder_of_a_tree_made_at_once() {
        let w = live(WatchMode::Native, |_| {});
        let (chains, depth) = (40, 6);
        for c in 0..chains {
            // One level at a time, so that folders appear while the watcher is adding
            // watches to their parents.
            let mut dir = w.root.join(format!("c{c}"));
            std::fs::create_dir(&dir).unwrap();
            for d in 0..depth {
                std::thread::sleep(Duration::from_micros(300));
                dir.push(format!("d{d}"));
                std::fs::create_dir(&dir).unwrap();
            }
        }
        w.folders_become(1 + chains * (depth + 1));
        w.settle();
        w.write("c39/d0/d1/d2/d3/d4/d5/deep.rs");
        w.recorded_until("c39/d0/d1/d2/d3/d4/d5/deep.rs");
    }

    #[test]
    fn native_watches_a_folder_once_it_is_no_longer_ignored() {
        let w = live(WatchMode::Native, |root| {
            std::fs::write(root.join(".gitignore"), "gen/\n").unwrap();
            std::fs::create_dir_all(root.join("gen")).unwrap();
        });
        assert_eq!(w.watcher.folders(), 1);
        std::fs::write(w.root.join(".gitignore"), "").unwrap();
        w.folders_become(2);
        w.settle();
        w.write("gen/a.rs");
        let seen = w.recorded_until("gen/a.rs");
        assert_eq!(seen, [("gen/a.rs".to_string(), FileOp::Created)]);
    }

    #[test]
    fn native_follows_a_folder_that_is_moved() {
        let w = live(WatchMode::Native, |root| {
            std::fs::create_dir_all(root.join("old/inner")).unwrap();
        });
        assert_eq!(w.watcher.folders(), 3);
        std::fs::rename(w.root.join("old"), w.root.join("new")).unwrap();
        w.settle();
        w.write("new/inner/x.rs");
        let seen = w.recorded_until("new/inner/x.rs");
        assert!(
            seen.iter().all(|(p, _)| !p.starts_with("old/inner/")),
            "an event was recorded under the folder's old name: {seen:?}"
        );
        assert_eq!(w.watcher.folders(), 3);
        // A new folder under the old name is watched afresh.
        std::fs::create_dir_all(w.root.join("old")).unwrap();
        w.folders_become(4);
        w.settle();
        w.write("old/y.rs");
        w.recorded_until("old/y.rs");
    }

    /// A `.gitignore` edit that brings a folder into view is recorded as itself, not as every
    /// file of the folder created; files written there afterwards are recorded.
    #[test]
    fn polling_records_a_rule_change_not_the_files_it_reveals() {
        let w = live(WatchMode::Poll, |root| {
            std::fs::write(root.join(".gitignore"), "gen/\n").unwrap();
            std::fs::create_dir_all(root.join("gen")).unwrap();
            let old = root.join("gen/old.rs");
            std::fs::write(&old, "// generated").unwrap();
            std::fs::File::options()
                .write(true)
                .open(&old)
                .unwrap()
                .set_modified(SystemTime::now() - Duration::from_secs(3600))
                .unwrap();
        });
        std::fs::write(w.root.join(".gitignore"), "").unwrap();
        let seen = w.recorded_until(".gitignore");
        assert_eq!(seen, [(".gitignore".to_string(), FileOp::Modified)]);
        assert_eq!(w.watcher.folders(), 2);
        w.write("gen/new.rs");
        assert_eq!(
            w.recorded_until("gen/new.rs"),
            [("gen/new.rs".to_string(), FileOp::Created)]
        );
    }

    #[test]
    fn polling_sees_two_edits_within_one_second() {
        let w = live(WatchMode::Poll, |root| {
            std::fs::create_dir_all(root.join("node_modules/pkg")).unwrap();
            std::fs::write(root.join("main.rs"), "fn main() {}").unwrap();
        });
        assert_eq!(w.watcher.folders(), 1);
        // The first scan ran inside `start`: this edit, most likely in the same second as the
        // file's creation, is a change of nanoseconds and size.
        std::fs::write(w.root.join("main.rs"), "fn main() { run() }").unwrap();
        let seen = w.recorded_until("main.rs");
        assert_eq!(seen, [("main.rs".to_string(), FileOp::Modified)]);
        std::fs::remove_file(w.root.join("main.rs")).unwrap();
        assert_eq!(
            w.recorded_until("main.rs"),
            [("main.rs".to_string(), FileOp::Deleted)]
        );
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
}
