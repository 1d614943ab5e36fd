//! Whether an agent is still there: a process holding its transcript open.
//!
//! Agents append to their transcript through a file they keep open (pi, Codex) or reopen per
//! write (Claude Code). A session whose transcript nobody holds open and nobody wrote for a
//! while is over; one that is held open stays live however quiet it is.

use std::path::Path;

/// Whether some process has `path` open, as far as this user may look (`/proc/*/fd` on
/// Linux). `None` where that cannot be known (another system, or `/proc` unreadable): the
/// caller then goes by idle time alone.
pub fn held_open(path: &Path) -> Option<bool> {
    let target = std::fs::canonicalize(path).ok()?;
    let procs = std::fs::read_dir("/proc").ok()?;
    let own = std::process::id().to_string();
    for p in procs.flatten() {
        let name = p.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if pid == own {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l == target) {
                return Some(true);
            }
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_another_process_holds_open_is_held() {
        if !Path::new("/proc/self/fd").is_dir() {
            eprintln!("SKIPPED: no /proc on this system");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, b"x\n").unwrap();
        assert_eq!(held_open(&p), Some(false));
        // A child process that keeps the file open on its stdin.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::fs::File::open(&p).unwrap())
            .spawn()
            .unwrap();
        let held = held_open(&p);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(held, Some(true));
    }
}
