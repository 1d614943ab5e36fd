//! Opening (resuming) a large session log: throughput and peak memory.
//!
//! The log is generated once into `target/bench-data/`; each measurement runs in a child
//! process so that its peak RSS is the open alone.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use soba::session::entry::Entry;

#[path = "support.rs"]
mod support;

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn generate(path: &Path, target_bytes: u64) {
    if path
        .metadata()
        .map(|m| m.len() >= target_bytes)
        .unwrap_or(false)
    {
        return;
    }
    std::fs::create_dir_all(path.parent().expect("parent")).expect("bench dir");
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    serde_json::to_writer(&mut f, &support::header()).expect("header");
    f.write_all(b"\n").expect("write");
    let mut written = 0u64;
    let mut i = 0usize;
    let mut last: Option<String> = None;
    while written < target_bytes {
        let id = format!("e{i}");
        let e = Entry::new(id.clone(), last.clone(), support::body(i));
        let line = serde_json::to_vec(&e).expect("entry");
        written += line.len() as u64 + 1;
        f.write_all(&line).expect("write");
        f.write_all(b"\n").expect("write");
        last = Some(id);
        i += 1;
    }
    f.flush().expect("flush");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(pos) = args.iter().position(|a| a == "--open-child") {
        let path = PathBuf::from(&args[pos + 1]);
        let start = Instant::now();
        let (session, _) = soba::session::log::read_session(&path).expect("open");
        let secs = start.elapsed().as_secs_f64();
        println!("{} {} {}", session.len(), secs, peak_rss_kib());
        return;
    }
    let mb: u64 = if support::measuring() { 100 } else { 2 };
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("target/bench-data/session-{mb}mb.jsonl"));
    generate(&path, mb << 20);
    let size = path.metadata().expect("log").len() as f64 / (1 << 20) as f64;
    let runs = if support::measuring() { 5 } else { 1 };
    let mut times = Vec::new();
    let mut peak = 0;
    let mut entries = 0;
    for _ in 0..runs {
        let out = std::process::Command::new(&args[0])
            .arg("--open-child")
            .arg(&path)
            .output()
            .expect("child");
        assert!(
            out.status.success(),
            "open failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let mut parts = text.split_whitespace();
        entries = parts.next().and_then(|x| x.parse().ok()).unwrap_or(0);
        times.push(
            parts
                .next()
                .and_then(|x| x.parse::<f64>().ok())
                .unwrap_or(0.0),
        );
        peak = parts
            .next()
            .and_then(|x| x.parse().ok())
            .unwrap_or(0u64)
            .max(peak);
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    println!(
        "open_log: {size:.0} MB, {entries} entries: median {:.3} s ({:.0} MB/s), peak RSS {:.0} MB",
        median,
        size / median,
        peak as f64 / 1024.0
    );
}
