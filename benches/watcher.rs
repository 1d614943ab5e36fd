//! The workspace watcher on a large tree: time until the watch is established, memory, and
//! how long a file change takes to reach the session.
//!
//! The tree (100,000 files under `target/bench-data/watch-tree-100k/`, generated once) is a
//! source tree plus build output and dependencies that must be ignored: `node_modules/` and
//! `target/` (always skipped) and `dist/` (ignored by the tree's `.gitignore`).
//!
//! Two paths are measured:
//! - **daemon**: the built `soba` binary as `soba serve --daemon` on private folders, over its
//!   Unix socket. `soba/session/open` in the tree answers once the workspace's watch is
//!   established (the registry starts it before replying), so its duration is the time to
//!   ready. Then files are modified one at a time; a change is visible when its `file` entry
//!   (`source: watcher`) is in the session log, and when the client gets `soba/budgetChanged`.
//! - **in-process**: `WorkspaceWatcher::start` in a child process of this bench (so that its
//!   memory is the watcher's alone), and the time from a write to the batch callback.
//!
//! `cargo bench --bench watcher` measures (50 changes per path) and prints one JSON object and
//! a summary; under `cargo test` it runs on a tree of 400 files as a smoke test.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use soba::daemon::watcher::{WatchMode, WorkspaceWatcher, DEBOUNCE, POLL_INTERVAL};
use soba_core::session::entry::{FileEntry, FileOp};

#[path = "common/daemon.rs"]
mod daemon;

use daemon::{measuring, paced, Daemon, Memory, Summary};

/// The shape of a generated workspace.
#[derive(Clone, Copy)]
struct Shape {
    /// `src/m{i}/s{j}/f{k}.rs`: modules × submodules × files.
    src: (usize, usize, usize),
    /// `node_modules/p{i}/`: packages of 5 files, plus `lib/` and `dist/` of 10 files each.
    packages: usize,
    /// `target/debug/deps/` files and `target/debug/build/b{i}/` folders of 100 files.
    target: (usize, usize),
    /// `dist/d{i}/` folders × files, ignored by `.gitignore`.
    dist: (usize, usize),
}

const FULL: Shape = Shape {
    src: (40, 25, 60),
    packages: 1_000,
    target: (5_000, 50),
    dist: (50, 100),
};

const SMOKE: Shape = Shape {
    src: (4, 3, 20),
    packages: 4,
    target: (20, 0),
    dist: (2, 10),
};

impl Shape {
    fn src_files(&self) -> usize {
        self.src.0 * self.src.1 * self.src.2
    }

    fn ignored_files(&self) -> usize {
        self.packages * 25 + self.target.0 + self.target.1 * 100 + self.dist.0 * self.dist.1
    }

    fn files(&self) -> usize {
        self.src_files() + self.ignored_files()
    }

    fn src_file(&self, n: usize) -> String {
        let (m, s, f) = self.src;
        format!("src/m{}/s{}/f{}.rs", n % m, (n * 7) % s, (n * 13) % f)
    }
}

fn write_file(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

fn generate(root: &Path, shape: Shape) {
    std::fs::create_dir_all(root).expect("tree root");
    write_file(
        &root.join(".gitignore"),
        "/target\nnode_modules/\n/dist\n*.log\n",
    );
    let (m, s, f) = shape.src;
    for i in 0..m {
        for j in 0..s {
            let dir = root.join(format!("src/m{i}/s{j}"));
            std::fs::create_dir_all(&dir).expect("src folder");
            for k in 0..f {
                write_file(
                    &dir.join(format!("f{k}.rs")),
                    &format!("pub fn f{k}() -> u32 {{ {i}{j}{k} }}\n"),
                );
            }
        }
    }
    for p in 0..shape.packages {
        let pkg = root.join(format!("node_modules/p{p}"));
        for sub in ["lib", "dist"] {
            std::fs::create_dir_all(pkg.join(sub)).expect("package folder");
            for k in 0..10 {
                write_file(
                    &pkg.join(sub).join(format!("m{k}.js")),
                    "module.exports = {};\n",
                );
            }
        }
        for name in [
            "package.json",
            "README.md",
            "index.js",
            "LICENSE",
            "CHANGELOG.md",
        ] {
            write_file(&pkg.join(name), "{}\n");
        }
    }
    let deps = root.join("target/debug/deps");
    std::fs::create_dir_all(&deps).expect("target folder");
    for k in 0..shape.target.0 {
        write_file(&deps.join(format!("lib{k}.rlib")), "rlib\n");
    }
    for b in 0..shape.target.1 {
        let dir = root.join(format!("target/debug/build/b{b}"));
        std::fs::create_dir_all(&dir).expect("build folder");
        for k in 0..100 {
            write_file(&dir.join(format!("out{k}.o")), "obj\n");
        }
    }
    for d in 0..shape.dist.0 {
        let dir = root.join(format!("dist/d{d}"));
        std::fs::create_dir_all(&dir).expect("dist folder");
        for k in 0..shape.dist.1 {
            write_file(&dir.join(format!("chunk{k}.js")), "export {};\n");
        }
    }
}

/// Files and folders in the tree: (files, folders, folders under ignored paths).
fn census(root: &Path) -> (usize, usize, usize) {
    let (mut files, mut dirs, mut ignored_dirs) = (0, 0, 0);
    let mut stack = vec![(root.to_path_buf(), false)];
    while let Some((dir, ignored)) = stack.pop() {
        dirs += 1;
        if ignored {
            ignored_dirs += 1;
        }
        for e in std::fs::read_dir(&dir).expect("read tree").flatten() {
            let t = e.file_type().expect("file type");
            if t.is_dir() {
                let name = e.file_name();
                let top = dir == root;
                let skip = ignored
                    || name == "node_modules"
                    || (top && (name == "target" || name == "dist"));
                stack.push((e.path(), skip));
            } else if e.file_name() != ".gitignore" {
                files += 1;
            }
        }
    }
    (files, dirs, ignored_dirs)
}

/// The tree for this run: the full one is generated once and reused.
fn tree(full: bool, scratch: &Path) -> (PathBuf, Shape) {
    if !full {
        let root = scratch.join("tree");
        generate(&root, SMOKE);
        return (std::fs::canonicalize(&root).expect("tree"), SMOKE);
    }
    let data = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    let root = data.join("watch-tree-100k");
    let done = data.join("watch-tree-100k.done");
    if !done.exists() {
        let _ = std::fs::remove_dir_all(&root);
        let t = Instant::now();
        generate(&root, FULL);
        write_file(&done, "");
        eprintln!(
            "watcher: generated {} files in {:.1} s",
            FULL.files(),
            t.elapsed().as_secs_f64()
        );
    }
    // Left behind by an interrupted run (the bench removes it after use).
    let _ = std::fs::remove_file(root.join("src/m0/build.log"));
    (std::fs::canonicalize(&root).expect("tree"), FULL)
}

/// Append a line to a file, as an editor or formatter would change it.
fn touch(path: &Path, n: usize) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    writeln!(f, "// change {n}").expect("write");
}

/// New complete lines of a growing JSONL file.
struct Tail {
    file: std::fs::File,
    partial: Vec<u8>,
}

impl Tail {
    fn open(path: &Path) -> Tail {
        let mut file = std::fs::File::open(path).expect("session log");
        file.seek(SeekFrom::End(0)).expect("seek");
        Tail {
            file,
            partial: Vec::new(),
        }
    }

    fn lines(&mut self) -> Vec<Value> {
        let mut buf = Vec::new();
        self.file.read_to_end(&mut buf).expect("read log");
        self.partial.extend_from_slice(&buf);
        let Some(end) = self.partial.iter().rposition(|b| *b == b'\n') else {
            return Vec::new();
        };
        let complete: Vec<u8> = self.partial.drain(..=end).collect();
        complete
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .filter_map(|l| serde_json::from_slice(l).ok())
            .collect()
    }
}

fn watcher_file_entry(v: &Value) -> Option<(&str, &str)> {
    (v["type"] == "file" && v["source"] == "watcher")
        .then(|| Some((v["path"].as_str()?, v["op"].as_str()?)))
        .flatten()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A pause before change `n`, spread evenly over `span` (golden-ratio steps), so that the
/// changes land at every phase of the watcher's own clock — the debounce window, or the
/// polling interval — and the latencies sample all of them instead of one.
fn phase(n: usize, span: Duration) -> Duration {
    span.mul_f64((n as f64 * 0.618_033_988_75).fract())
}

/// A figure of the report, `n/a` where the run has none.
struct Figure(Option<f64>);

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(x) => std::fmt::Display::fmt(&x, f),
            None => f.write_str("n/a"),
        }
    }
}

fn max_user_watches() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The daemon path: open a session in the tree, then change files one at a time.
/// `watched_folders`: the folders a native watch must cover (those not under ignored paths).
fn daemon_path(
    root: &Path,
    shape: Shape,
    changes: usize,
    watched_folders: usize,
    scratch: &Path,
) -> Value {
    let full = measuring();
    let d = Daemon::spawn(&scratch.join("soba"));
    let mut c = d.connect();
    c.initialize(&[root]);
    // Another client, in a small workspace of its own, asks for its budget 1,000 times a
    // second while the large workspace is opened: does the open hold up other requests?
    let small = scratch.join("small");
    std::fs::create_dir_all(&small).expect("small workspace");
    let small = std::fs::canonicalize(&small).expect("small workspace");
    let mut other = d.connect();
    other.initialize(&[&small]);
    let opened_small = other.request("soba/session/open", json!({"workspace": small}));
    let small_id = opened_small["sessionId"].as_str().expect("id").to_string();
    let small_tokens = opened_small["budget"]["effectiveTokens"]
        .as_u64()
        .expect("tokens");
    let pid = d.pid();
    let (paced_requests, lead) = if full {
        (3_000, Duration::from_millis(500))
    } else {
        (100, Duration::from_millis(30))
    };
    let pacer = std::thread::spawn(move || {
        let mut conns = [other];
        paced(
            &mut conns,
            &small_id,
            small_tokens,
            paced_requests,
            1_000_000,
            1000.0,
            pid,
        )
    });
    std::thread::sleep(lead);
    let before = d.memory();
    let watches_before = d.inotify_watches();
    let t = Instant::now();
    let opened = c.request("soba/session/open", json!({"workspace": root}));
    let ready = t.elapsed();
    let others = pacer.join().expect("budget client");
    assert_eq!(
        others.errors + others.lost,
        0,
        "every budget request answered"
    );
    let during = others.latency_where(|at| at >= t && at <= t + ready);
    let outside = others.latency_where(|at| at < t || at > t + ready);
    let to_ms = |v: Vec<f64>| v.into_iter().map(|x| x / 1000.0).collect::<Vec<_>>();
    let others_json = json!({
        "rate": 1000,
        "requests": others.requests,
        "errors": others.errors,
        "duringOpenMillis": (!during.is_empty()).then(|| Summary::of(&to_ms(during)).json()),
        "otherwiseMillis": Summary::of(&to_ms(outside)).json(),
    });
    let watches = d.inotify_watches() - watches_before;
    let session = opened["sessionId"].as_str().expect("sessionId").to_string();
    let log = PathBuf::from(opened["path"].as_str().expect("path"));
    // A polling fallback is announced with window/showMessage.
    let messages: Vec<String> = c
        .drain(Duration::from_millis(300))
        .into_iter()
        .filter(|r| r.msg["method"] == "window/showMessage")
        .map(|r| {
            r.msg["params"]["message"]
                .as_str()
                .unwrap_or("")
                .to_string()
        })
        .collect();
    let polling = messages.iter().any(|m| m.contains("polling"));
    // Ready means ready: when the open answers, every folder to watch has its watch, and
    // no folder whose changes would be dropped has one.
    assert!(
        polling || watches == watched_folders,
        "{watches} inotify watches when soba/session/open answered, for {watched_folders} folders"
    );
    let after_open = d.memory();

    let mut tail = Tail::open(&log);
    let mut to_entry = Vec::new();
    let mut to_notification = Vec::new();
    for n in 0..changes {
        let rel = shape.src_file(n);
        c.drain(Duration::from_millis(100) + phase(n, DEBOUNCE));
        let t0 = Instant::now();
        touch(&root.join(&rel), n);
        let deadline = t0 + Duration::from_secs(15);
        let mut entry_at = None;
        let mut note_at = None;
        while entry_at.is_none() || note_at.is_none() {
            assert!(
                Instant::now() < deadline,
                "change {n} of {rel} not seen within 15 s (entry: {entry_at:?}, notification: {note_at:?}): {}",
                d.stderr_text()
            );
            if entry_at.is_none() {
                let seen = tail.lines().iter().any(|l| {
                    watcher_file_entry(l).is_some_and(|(p, op)| p == rel && op == "modified")
                });
                if seen {
                    entry_at = Some(Instant::now());
                }
            }
            while note_at.is_none() {
                let Some(r) = c.recv(Duration::ZERO) else {
                    break;
                };
                if r.msg["method"] == "soba/budgetChanged"
                    && r.msg["params"]["sessionId"] == session
                {
                    note_at = Some(r.at);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        to_entry.push(ms(entry_at.expect("entry").duration_since(t0)));
        to_notification.push(ms(note_at.expect("notification").duration_since(t0)));
    }

    // Ignored files change too; only the source file may be recorded.
    let ignored = [
        "node_modules/p0/index.js",
        "node_modules/p1/lib/m3.js",
        "target/debug/deps/lib0.rlib",
        "dist/d0/chunk0.js",
    ];
    for (i, rel) in ignored.iter().enumerate() {
        touch(&root.join(rel), i);
    }
    write_file(&root.join("src/m0/build.log"), "ignored by *.log\n");
    let tracked = shape.src_file(changes + 1);
    touch(&root.join(&tracked), changes + 1);
    let mut recorded: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !recorded.contains(&tracked) {
        assert!(Instant::now() < deadline, "{tracked} not recorded");
        recorded.extend(
            tail.lines()
                .iter()
                .filter_map(|l| watcher_file_entry(l).map(|(p, _)| p.to_string())),
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The ignored files were written first, so their events are reported in the same batch
    // as the source file or an earlier one, and the session writes batches in order: what
    // was recorded of them is in the log by now. Read once more after a margin anyway.
    std::thread::sleep(DEBOUNCE / 2);
    recorded.extend(
        tail.lines()
            .iter()
            .filter_map(|l| watcher_file_entry(l).map(|(p, _)| p.to_string())),
    );
    assert_eq!(
        recorded,
        std::slice::from_ref(&tracked),
        "only the source file is recorded"
    );
    std::fs::remove_file(root.join("src/m0/build.log")).expect("remove build.log");
    let after_changes = d.memory();

    let entry = Summary::of(&to_entry);
    let note = Summary::of(&to_notification);
    json!({
        "readyMillis": (ms(ready) * 10.0).round() / 10.0,
        "readyMeans": "soba/session/open answered; the registry establishes the watch before replying",
        "budgetOfAnotherSessionMeanwhile": others_json,
        "mode": if polling { "poll" } else if watches > 0 { "native" } else { "none" },
        "pollingFallback": polling,
        "messages": messages,
        "inotifyWatches": watches,
        "memory": {
            "beforeOpen": before.json(),
            "afterOpen": after_open.json(),
            "afterChanges": after_changes.json(),
        },
        "changes": changes,
        "changeToEntryMillis": entry.json(),
        "changeToNotificationMillis": note.json(),
        "ignoredChanges": {"written": ignored.len() + 1, "recordedOfThose": recorded.len() - 1},
    })
}

/// The in-process path, run in a child process: `WorkspaceWatcher::start` and the batch
/// callback. Prints one JSON line.
fn watch_child(root: &Path, shape: Shape, mode: WatchMode, changes: usize, idle: Duration) {
    let (tx, rx) = mpsc::channel::<(Instant, Vec<FileEntry>)>();
    let sink = move |batch: Vec<FileEntry>| {
        let _ = tx.send((Instant::now(), batch));
    };
    let before = Memory::own();
    let t = Instant::now();
    let (watcher, warning) = WorkspaceWatcher::start(root, mode, sink).expect("watch the tree");
    let start = t.elapsed();
    let watches = daemon::inotify_watches("/proc/self");
    let after = Memory::own();
    // What the watch costs while nothing changes (a polling watcher scans all the time).
    let cpu_before = daemon::cpu_ms("/proc/self/stat");
    std::thread::sleep(idle);
    let idle_cpu = daemon::cpu_ms("/proc/self/stat") - cpu_before;
    let mut latency = Vec::new();
    for n in 0..changes {
        let rel = shape.src_file(n);
        let span = match mode {
            WatchMode::Native => DEBOUNCE,
            WatchMode::Poll => POLL_INTERVAL,
        };
        while rx
            .recv_timeout(Duration::from_millis(50) + phase(n, span))
            .is_ok()
        {}
        let t0 = Instant::now();
        touch(&root.join(&rel), n + 1000);
        let deadline = t0 + Duration::from_secs(15);
        let at = loop {
            let (at, batch) = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("change {n} of {rel} not reported within 15 s"));
            if batch
                .iter()
                .any(|e| e.path == rel && e.op == FileOp::Modified)
            {
                break at;
            }
        };
        latency.push(ms(at.duration_since(t0)));
    }
    let mode = match watcher.mode() {
        WatchMode::Native => "native",
        WatchMode::Poll => "poll",
    };
    let idle_cores = (!idle.is_zero()).then(|| idle_cpu / ms(idle));
    drop(watcher);
    println!(
        "{}",
        json!({
            "startMillis": (ms(start) * 10.0).round() / 10.0,
            "mode": mode,
            "pollingFallback": warning.is_some(),
            "warning": warning,
            "inotifyWatches": watches,
            "memory": {"before": before.json(), "afterStart": after.json(),
                       "watcherMiB": daemon::mib(after.rss_kib.saturating_sub(before.rss_kib))},
            "idleSeconds": idle.as_secs_f64(),
            "idleCpuCores": idle_cores,
            "changes": changes,
            "changeToCallbackMillis": (!latency.is_empty()).then(|| Summary::of(&latency).json()),
        })
    );
}

fn main() {
    let load_at_start = daemon::load_average();
    let args: Vec<String> = std::env::args().collect();
    let full = measuring();
    let changes = if full { 50 } else { 1 };
    if let Some(pos) = args.iter().position(|a| a == "--watch-child") {
        let shape = if full { FULL } else { SMOKE };
        let (mode, changes, idle) = match args[pos + 2].as_str() {
            "native" => (WatchMode::Native, changes, Duration::ZERO),
            // Polling reports a change up to a scan interval late: fewer changes, and the
            // smoke run only starts it.
            "poll" if full => (WatchMode::Poll, 20, Duration::from_secs(10)),
            "poll" => (WatchMode::Poll, 0, Duration::ZERO),
            other => panic!("unknown watch mode {other}"),
        };
        watch_child(Path::new(&args[pos + 1]), shape, mode, changes, idle);
        return;
    }
    let scratch = tempfile::tempdir().expect("temp dir");
    let (root, shape) = tree(full, scratch.path());
    let t = Instant::now();
    let (files, dirs, ignored_dirs) = census(&root);
    let census_ms = ms(t.elapsed());
    assert_eq!(files, shape.files(), "the tree is complete");

    let daemon = daemon_path(&root, shape, changes, dirs - ignored_dirs, scratch.path());

    let in_process = |mode: &str| -> Value {
        let mut child = std::process::Command::new(&args[0]);
        child.arg("--watch-child").arg(&root).arg(mode);
        if full {
            child.arg("--bench");
        }
        let out = child.output().expect("in-process child");
        assert!(
            out.status.success(),
            "in-process {mode} watcher failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("child's JSON line")
    };
    let native = in_process("native");
    let poll = in_process("poll");

    let report = json!({
        "bench": "watcher",
        "binary": daemon::SOBA,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "loadAverage": {"atStart": load_at_start, "atEnd": daemon::load_average()},
        "tree": {
            "root": root.display().to_string(),
            "files": files,
            "sourceFiles": shape.src_files(),
            "ignoredFiles": shape.ignored_files(),
            "folders": dirs,
            "foldersUnderIgnoredPaths": ignored_dirs,
            "walkMillisWarmCache": (census_ms * 10.0).round() / 10.0,
        },
        "maxUserWatches": max_user_watches(),
        "debounceMillis": DEBOUNCE.as_millis() as u64,
        "pollIntervalMillis": POLL_INTERVAL.as_millis() as u64,
        "budgetCoalesceMillis": soba::daemon::server::BUDGET_COALESCE.as_millis() as u64,
        "daemon": daemon,
        "inProcess": native,
        "inProcessPolling": poll,
    });
    println!("{report}");
    let d = &report["daemon"];
    let p = &report["inProcess"];
    let f = |v: &Value| Figure(v.as_f64());
    let s = |v: &Value| v.as_str().unwrap_or("?").to_string();
    println!(
        "watcher: {files} files in {dirs} folders ({ignored_dirs} under ignored paths); \
         inotify limit {}; debounce {} ms",
        report["maxUserWatches"], report["debounceMillis"]
    );
    println!(
        "watcher (daemon): ready {:.0} ms after soba/session/open, mode {}, {} inotify watches, \
         RSS {:.1} → {:.1} MiB; change → file entry p50 {:.0} ms, p99 {:.0} ms; \
         → soba/budgetChanged p50 {:.0} ms, p99 {:.0} ms",
        f(&d["readyMillis"]),
        s(&d["mode"]),
        d["inotifyWatches"],
        f(&d["memory"]["beforeOpen"]["rssMiB"]),
        f(&d["memory"]["afterOpen"]["rssMiB"]),
        f(&d["changeToEntryMillis"]["p50"]),
        f(&d["changeToEntryMillis"]["p99"]),
        f(&d["changeToNotificationMillis"]["p50"]),
        f(&d["changeToNotificationMillis"]["p99"]),
    );
    println!(
        "watcher (in-process): WorkspaceWatcher::start {:.0} ms, mode {}, {} inotify watches, \
         +{:.1} MiB RSS; change → callback p50 {:.0} ms, p99 {:.0} ms",
        f(&p["startMillis"]),
        s(&p["mode"]),
        p["inotifyWatches"],
        f(&p["memory"]["watcherMiB"]),
        f(&p["changeToCallbackMillis"]["p50"]),
        f(&p["changeToCallbackMillis"]["p99"]),
    );
    let o = &d["budgetOfAnotherSessionMeanwhile"];
    println!(
        "watcher (daemon): another client's soba/budget at 1000/s during the open: \
         p50 {:.1} ms, max {:.1} ms (otherwise p50 {:.1} ms, max {:.1} ms)",
        f(&o["duringOpenMillis"]["p50"]),
        f(&o["duringOpenMillis"]["max"]),
        f(&o["otherwiseMillis"]["p50"]),
        f(&o["otherwiseMillis"]["max"]),
    );
    let q = &report["inProcessPolling"];
    println!(
        "watcher (in-process, forced polling): start {:.0} ms, +{:.1} MiB RSS, \
         {:.2} cores while idle; change → callback p50 {:.0} ms, p99 {:.0} ms",
        f(&q["startMillis"]),
        f(&q["memory"]["watcherMiB"]),
        f(&q["idleCpuCores"]),
        f(&q["changeToCallbackMillis"]["p50"]),
        f(&q["changeToCallbackMillis"]["p99"]),
    );
}
