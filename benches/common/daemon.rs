//! The real daemon for benchmarks: `soba serve --daemon` spawned from the built binary on
//! private data, runtime and config paths (never the user's daemon), and a blocking client that
//! speaks the LSP base protocol (`Content-Length` frames) over its Unix socket.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The `soba` executable cargo built for this bench (release under `cargo bench`, debug under
/// `cargo test`).
pub const SOBA: &str = env!("CARGO_BIN_EXE_soba");

/// Whether this is a real measurement (`cargo bench`) rather than the smoke run of
/// `cargo test --all-targets`.
pub fn measuring() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// A running `soba serve --daemon`; killed and reaped on drop.
pub struct Daemon {
    child: Child,
    pub base: PathBuf,
    pub socket: PathBuf,
    stderr: PathBuf,
}

impl Daemon {
    /// Start the daemon with its data, runtime folder and user config under `base`, and wait
    /// until its socket accepts connections.
    pub fn spawn(base: &Path) -> Daemon {
        std::fs::create_dir_all(base).expect("daemon base folder");
        let stderr = base.join("daemon.stderr");
        let child = Command::new(SOBA)
            .args(["serve", "--daemon"])
            .env("SOBA_DATA_DIR", base.join("data"))
            .env("SOBA_RUNTIME_DIR", base.join("run"))
            .env("SOBA_CONFIG", base.join("no-user-config.json"))
            // A safety net: a daemon left behind by a crashed bench exits on its own.
            .env("SOBA_DAEMON_IDLE_SECS", "60")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("daemon stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {SOBA}: {e}"));
        let mut d = Daemon {
            child,
            base: base.to_path_buf(),
            socket: base.join("run").join("soba.sock"),
            stderr,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while UnixStream::connect(&d.socket).is_err() {
            if let Ok(Some(status)) = d.child.try_wait() {
                panic!("the daemon exited ({status}): {}", d.stderr_text());
            }
            assert!(
                Instant::now() < deadline,
                "the daemon did not listen on {} within 10 s: {}",
                d.socket.display(),
                d.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        d
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    pub fn connect(&self) -> Conn {
        Conn::connect(&self.socket)
    }

    /// `VmRSS` and `VmHWM` of the daemon process, in KiB.
    pub fn memory(&self) -> Memory {
        Memory::of(&format!("/proc/{}/status", self.pid()))
    }

    /// inotify watches the daemon holds (all its inotify instances).
    pub fn inotify_watches(&self) -> usize {
        inotify_watches(&format!("/proc/{}", self.pid()))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

impl Memory {
    pub fn of(status_path: &str) -> Memory {
        let text = std::fs::read_to_string(status_path).unwrap_or_default();
        let field = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
                .unwrap_or(0)
        };
        Memory {
            rss_kib: field("VmRSS:"),
            hwm_kib: field("VmHWM:"),
        }
    }

    pub fn own() -> Memory {
        Memory::of("/proc/self/status")
    }

    pub fn json(&self) -> Value {
        json!({"rssMiB": mib(self.rss_kib), "peakRssMiB": mib(self.hwm_kib)})
    }
}

pub fn mib(kib: u64) -> f64 {
    (kib as f64 / 1024.0 * 10.0).round() / 10.0
}

/// inotify watches held by a process (`/proc/<pid>` or `/proc/self`): one `inotify wd:` line
/// per watch in the fdinfo of each inotify descriptor.
pub fn inotify_watches(proc_dir: &str) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("{proc_dir}/fd")) else {
        return 0;
    };
    let mut n = 0;
    for fd in fds.flatten() {
        let is_inotify =
            std::fs::read_link(fd.path()).is_ok_and(|t| t.to_string_lossy().contains("inotify"));
        if !is_inotify {
            continue;
        }
        let info = format!("{proc_dir}/fdinfo/{}", fd.file_name().to_string_lossy());
        n += std::fs::read_to_string(info)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("inotify wd:"))
            .count();
    }
    n
}

/// One message of the LSP base protocol.
pub fn frame(msg: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(msg).expect("JSON");
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(&body);
    out
}

/// The body of the next frame; `None` at end of stream.
pub fn read_frame(r: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut len = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("Content-Length: ") {
            len = v.parse::<usize>().ok();
        }
    }
    let mut body = vec![0; len?];
    r.read_exact(&mut body).ok()?;
    Some(body)
}

/// A message from the daemon and when its last byte was read.
pub struct Received {
    pub at: Instant,
    pub msg: Value,
}

impl Received {
    /// The id of a response (`None` for notifications and server requests).
    pub fn response_id(&self) -> Option<i64> {
        if self.msg.get("method").is_some() {
            return None;
        }
        self.msg.get("id").and_then(Value::as_i64)
    }
}

/// One connection to the daemon's socket. A reader thread timestamps every incoming frame
/// as soon as it is read and queues it; requests are written from the caller's thread.
pub struct Conn {
    writer: UnixStream,
    rx: mpsc::Receiver<Received>,
    /// Notifications and server requests that arrived while waiting for a response.
    pub other: VecDeque<Received>,
    next_id: i64,
}

impl Conn {
    pub fn connect(socket: &Path) -> Conn {
        let stream = UnixStream::connect(socket).expect("connect to the daemon's socket");
        let reader = stream.try_clone().expect("clone the socket");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::with_capacity(1 << 16, reader);
            while let Some(body) = read_frame(&mut r) {
                let at = Instant::now();
                let Ok(msg) = serde_json::from_slice(&body) else {
                    continue;
                };
                if tx.send(Received { at, msg }).is_err() {
                    return;
                }
            }
        });
        Conn {
            writer: stream,
            rx,
            other: VecDeque::new(),
            next_id: 1,
        }
    }

    /// A second handle on the socket for writing from another thread.
    pub fn writer(&self) -> UnixStream {
        self.writer.try_clone().expect("clone the socket")
    }

    /// Everything received, in arrival order, waiting at most until `deadline` for more.
    pub fn recv_until(&mut self, deadline: Instant) -> Option<Received> {
        if let Some(r) = self.other.pop_front() {
            return Some(r);
        }
        let wait = deadline.saturating_duration_since(Instant::now());
        self.rx.recv_timeout(wait).ok()
    }

    /// Next message received, waiting at most `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> Option<Received> {
        self.recv_until(Instant::now() + timeout)
    }

    pub fn send(&mut self, msg: &Value) {
        self.writer
            .write_all(&frame(msg))
            .expect("write to the daemon");
    }

    /// Send a request and wait for its response (`result` or `error`, whole).
    pub fn raw(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let r = self
                .rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("no answer to {method}"));
            if r.response_id() == Some(id) {
                return r.msg;
            }
            self.other.push_back(r);
        }
    }

    /// A request that must succeed; its result.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let r = self.raw(method, params);
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    pub fn initialize(&mut self, folders: &[&Path]) {
        let folders: Vec<Value> = folders
            .iter()
            .map(|f| json!({"uri": format!("file://{}", f.display()), "name": "ws"}))
            .collect();
        self.request(
            "initialize",
            json!({
                "processId": std::process::id(),
                "rootUri": null,
                "capabilities": {},
                "workspaceFolders": folders,
            }),
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}));
    }

    /// Drop what has arrived so far (notifications), waiting `quiet` for stragglers.
    pub fn drain(&mut self, quiet: Duration) -> Vec<Received> {
        let mut out: Vec<Received> = self.other.drain(..).collect();
        while let Ok(r) = self.rx.recv_timeout(quiet) {
            out.push(r);
        }
        out
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Ends the reader thread and the daemon's side of the connection.
        let _ = self.writer.shutdown(std::net::Shutdown::Both);
    }
}

/// Percentiles of a sample, in the sample's unit.
pub struct Summary {
    pub n: usize,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

impl Summary {
    pub fn of(values: &[f64]) -> Summary {
        assert!(!values.is_empty(), "no samples");
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
        Summary {
            n: v.len(),
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: v[v.len() - 1],
            mean: v.iter().sum::<f64>() / v.len() as f64,
        }
    }

    pub fn json(&self) -> Value {
        let r = |x: f64| (x * 1000.0).round() / 1000.0;
        json!({"n": self.n, "p50": r(self.p50), "p90": r(self.p90), "p99": r(self.p99),
               "max": r(self.max), "mean": r(self.mean)})
    }
}

/// utime + stime of a process (`/proc/<pid>/stat`, or `/proc/self/stat`), in ms.
pub fn cpu_ms(stat_path: &str) -> f64 {
    let stat = std::fs::read_to_string(stat_path).unwrap_or_default();
    // Fields after the command name, which is parenthesized and may contain spaces.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    ticks as f64 * 1000.0 / hz
}

/// An open-loop run of `soba/budget` requests.
pub struct Outcome {
    pub connections: usize,
    pub requests: usize,
    pub ok: usize,
    pub errors: usize,
    pub lost: usize,
    /// When request `i` was due: `start + i * period`.
    pub start: Instant,
    pub period: Duration,
    /// When request `i` was written, and when its answer arrived.
    pub sent: Vec<Instant>,
    pub arrival: Vec<Option<Instant>>,
    /// Responses per second from the first scheduled send to the last response.
    pub achieved_rate: f64,
    /// Requests written per second.
    pub send_rate: f64,
    pub daemon_cpu_ms: f64,
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

impl Outcome {
    pub fn scheduled(&self, i: usize) -> Instant {
        self.start + self.period * i as u32
    }

    /// From scheduled send to response, µs, of the answered requests whose scheduled send
    /// time passes `keep`.
    pub fn latency_where(&self, keep: impl Fn(Instant) -> bool) -> Vec<f64> {
        (0..self.requests)
            .filter(|&i| keep(self.scheduled(i)))
            .filter_map(|i| Some(micros(self.arrival[i]?.duration_since(self.scheduled(i)))))
            .collect()
    }

    /// From scheduled send to response, µs: what a client sending on schedule waits.
    pub fn latency(&self) -> Vec<f64> {
        self.latency_where(|_| true)
    }

    /// From actual send to response, µs.
    pub fn service(&self) -> Vec<f64> {
        (0..self.requests)
            .filter_map(|i| Some(micros(self.arrival[i]?.duration_since(self.sent[i]))))
            .collect()
    }

    /// Actual send minus scheduled send, µs: the client's own delay.
    pub fn send_lag(&self) -> Vec<f64> {
        (0..self.requests)
            .map(|i| micros(self.sent[i].duration_since(self.scheduled(i))))
            .collect()
    }
}

/// Send `n` `soba/budget` requests for `session` open-loop, request `i` due at
/// `start + i / rate` on connection `i % conns.len()`, whatever the answers do; then collect
/// every answer (a wrong budget counts as an error, a missing answer as lost).
pub fn paced(
    conns: &mut [Conn],
    session: &str,
    expected_tokens: u64,
    n: usize,
    first_id: i64,
    rate: f64,
    daemon_pid: u32,
) -> Outcome {
    let k = conns.len();
    let period = Duration::from_secs_f64(1.0 / rate);
    let frames: Vec<(usize, Vec<u8>)> = (0..n)
        .map(|i| {
            let msg = json!({"jsonrpc": "2.0", "id": first_id + i as i64,
                             "method": "soba/budget", "params": {"sessionId": session}});
            (i % k, frame(&msg))
        })
        .collect();
    let mut writers: Vec<_> = conns.iter().map(Conn::writer).collect();
    let start = Instant::now() + Duration::from_millis(20);
    let stat = format!("/proc/{daemon_pid}/stat");
    let cpu_before = cpu_ms(&stat);
    let writer = std::thread::spawn(move || {
        // Wake-ups within a microsecond of the schedule instead of the default 50 µs slack.
        // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
        }
        let mut sent = Vec::with_capacity(frames.len());
        for (i, (c, bytes)) in frames.iter().enumerate() {
            let at = start + period * i as u32;
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at - now);
            }
            writers[*c].write_all(bytes).expect("send a request");
            sent.push(Instant::now());
        }
        sent
    });
    let sent = writer.join().expect("writer thread");
    let last_scheduled = start + period * n as u32;
    let deadline = last_scheduled.max(Instant::now()) + Duration::from_secs(10);
    let mut arrival: Vec<Option<Instant>> = vec![None; n];
    let (mut ok, mut errors) = (0, 0);
    for (c, conn) in conns.iter_mut().enumerate() {
        let expected = (0..n).filter(|i| i % k == c).count();
        let mut got = 0;
        while got < expected {
            let Some(r) = conn.recv_until(deadline) else {
                break;
            };
            let Some(id) = r.response_id() else {
                continue;
            };
            let Some(i) = usize::try_from(id - first_id).ok().filter(|i| *i < n) else {
                continue;
            };
            got += 1;
            arrival[i] = Some(r.at);
            let res = &r.msg["result"];
            if r.msg.get("error").is_none()
                && res["sessionId"] == session
                && res["effectiveTokens"].as_u64() == Some(expected_tokens)
            {
                ok += 1;
            } else {
                errors += 1;
                if errors <= 3 {
                    eprintln!("unexpected answer to budget request {i}: {}", r.msg);
                }
            }
        }
    }
    let daemon_cpu_ms = cpu_ms(&stat) - cpu_before;
    let last_arrival = arrival.iter().flatten().max().copied().unwrap_or(start);
    let answered = arrival.iter().flatten().count();
    Outcome {
        connections: k,
        requests: n,
        ok,
        errors,
        lost: n - answered,
        start,
        period,
        achieved_rate: answered as f64 / last_arrival.duration_since(start).as_secs_f64(),
        send_rate: (n.max(2) - 1) as f64
            / sent[n - 1]
                .duration_since(sent[0])
                .as_secs_f64()
                .max(f64::EPSILON),
        sent,
        arrival,
        daemon_cpu_ms,
    }
}

/// The 1-minute load average (other work on the machine while measuring).
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
