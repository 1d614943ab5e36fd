//! A private scratch folder for what a command writes only to use it (`soba replay`'s session
//! log, which holds the whole transcript): created `0700` under the system's temporary folder
//! and removed when the command ends, also when it is interrupted (Ctrl-C, `SIGTERM`,
//! `SIGHUP`).
//!
//! Interruption is handled without a signal handler: the first scratch folder blocks those
//! signals in the calling thread (and so in every thread started after it) and starts one
//! thread that waits for them with `sigwait`, removes the registered folders and exits with
//! `128 + signal`, as the shell reports a process the signal ended.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, Once};

use anyhow::Context;

/// Folders to remove when a signal ends the process.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
static WATCH: Once = Once::new();

/// A private temporary folder, removed with everything in it when dropped.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// A new folder `soba-<command>-<id>` in the system's temporary folder.
    pub fn new(command: &str) -> anyhow::Result<ScratchDir> {
        watch_signals();
        let base = std::env::temp_dir();
        let mut last = None;
        for _ in 0..16 {
            let path = base.join(soba_core::util::new_id(&format!("soba-{command}-")));
            match soba_core::files::create_private_dir(&path) {
                Ok(()) => {
                    LIVE.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(path.clone());
                    return Ok(ScratchDir { path });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!(
                            "cannot create a private temporary folder in {}; set TMPDIR to a writable folder",
                            base.display()
                        )
                    })
                }
            }
        }
        Err(last.map_or_else(|| anyhow::anyhow!("no free name"), anyhow::Error::new))
            .with_context(|| format!("cannot create a temporary folder in {}", base.display()))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|p| p != &self.path);
    }
}

fn watch_signals() {
    WATCH.call_once(|| {
        // SAFETY: sigset_t is plain data, initialized by sigemptyset before any other use.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t; the calls only change it and this thread's mask.
        unsafe {
            libc::sigemptyset(&mut set);
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::sigaddset(&mut set, sig);
            }
            if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
                return;
            }
        }
        let spawned = std::thread::Builder::new()
            .name("soba-signals".into())
            .spawn(move || loop {
                let mut sig: libc::c_int = 0;
                // SAFETY: `set` is a valid sigset_t, blocked in this thread (inherited).
                if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                    continue;
                }
                for dir in LIVE.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    let _ = std::fs::remove_dir_all(dir);
                }
                std::process::exit(128 + sig);
            });
        if spawned.is_err() {
            // Nobody would take the signals: let them end the process as before.
            // SAFETY: as above, unblocking what this thread blocked.
            unsafe {
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_scratch_folder_is_private_and_removed_with_its_files() {
        let dir = ScratchDir::new("test").unwrap();
        let path = dir.path().to_path_buf();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert!(path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("soba-test-"));
        std::fs::write(path.join("session.jsonl"), "{}").unwrap();
        assert!(LIVE.lock().unwrap().contains(&path));
        drop(dir);
        assert!(!path.exists());
        assert!(!LIVE.lock().unwrap().contains(&path));
    }
}
