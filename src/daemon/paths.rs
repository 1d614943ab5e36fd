//! Where the daemon keeps sessions, flight records and its socket.
//!
//! `SOBA_DATA_DIR` and `SOBA_RUNTIME_DIR` override the per-user defaults (tests use them).

use std::path::{Path, PathBuf};

/// Folders the daemon works in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// `<data>`: holds `workspaces/<key>/sessions/<id>.jsonl` and `workspaces/<key>/flight.jsonl`.
    pub data_dir: PathBuf,
    /// Private (0700) folder holding the daemon's socket and lock.
    pub runtime_dir: PathBuf,
}

impl Paths {
    /// The per-user folders, or the ones named by `SOBA_DATA_DIR` / `SOBA_RUNTIME_DIR`.
    pub fn from_env() -> anyhow::Result<Paths> {
        let data_dir = match std::env::var_os("SOBA_DATA_DIR") {
            Some(p) => PathBuf::from(p),
            None => directories::ProjectDirs::from("dev", "soba", "soba")
                .map(|d| d.data_dir().to_path_buf())
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "no home directory found; set SOBA_DATA_DIR to a folder for session logs"
                    )
                })?,
        };
        let runtime_dir = match std::env::var_os("SOBA_RUNTIME_DIR") {
            Some(p) => PathBuf::from(p),
            None => match std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
                Some(p) => PathBuf::from(p).join("soba"),
                None => data_dir.join("run"),
            },
        };
        Ok(Paths {
            data_dir,
            runtime_dir,
        })
    }

    /// Paths under one base folder (tests).
    pub fn under(base: &Path) -> Paths {
        Paths {
            data_dir: base.join("data"),
            runtime_dir: base.join("run"),
        }
    }

    pub fn workspace_dir(&self, workspace: &Path) -> PathBuf {
        self.data_dir
            .join("workspaces")
            .join(workspace_key(workspace))
    }

    pub fn sessions_dir(&self, workspace: &Path) -> PathBuf {
        self.workspace_dir(workspace).join("sessions")
    }

    pub fn socket_path(&self) -> PathBuf {
        self.runtime_dir.join("soba.sock")
    }

    pub fn lock_path(&self) -> PathBuf {
        self.runtime_dir.join("daemon.lock")
    }
}

/// A folder name for a workspace: its last path component (readable) and a stable hash of the
/// whole path (unique), e.g. `my-app-9f1c2a7b3e4d5f60`.
pub fn workspace_key(workspace: &Path) -> String {
    let name: String = workspace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let name = if name.is_empty() || name.starts_with('.') {
        format!("ws{name}")
    } else {
        name
    };
    format!(
        "{name}-{:016x}",
        fnv1a(workspace.as_os_str().as_encoded_bytes())
    )
}

/// FNV-1a: stable across builds and platforms, unlike the standard library's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A workspace as clients name it (an absolute path or a `file://` URI) → an absolute path.
pub fn workspace_path(given: &str) -> Result<PathBuf, String> {
    let raw = match given.strip_prefix("file://") {
        Some(rest) => percent_decode(rest.strip_prefix("localhost").unwrap_or(rest))?,
        None => given.to_string(),
    };
    let path = PathBuf::from(&raw);
    if !path.is_absolute() {
        return Err(format!(
            "`workspace` must be an absolute path or a file:// URI, got `{given}`"
        ));
    }
    // Symlinked and relative-component spellings of one folder are one workspace.
    Ok(std::fs::canonicalize(&path).unwrap_or(path))
}

fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .ok_or_else(|| format!("bad escape in URI `{s}`"))?;
            out.push(
                u8::from_str_radix(hex, 16)
                    .map_err(|_| format!("bad escape `%{hex}` in URI `{s}`"))?,
            );
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("URI `{s}` is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_keys_are_readable_stable_and_distinct() {
        let a = workspace_key(Path::new("/home/me/my app"));
        assert_eq!(a, workspace_key(Path::new("/home/me/my app")));
        assert!(a.starts_with("my_app-"), "{a}");
        assert_ne!(a, workspace_key(Path::new("/other/my app")));
        assert!(workspace_key(Path::new("/")).starts_with("ws-"));
    }

    #[test]
    fn workspaces_are_paths_or_file_uris() {
        assert_eq!(
            workspace_path("file:///no/such%20dir").unwrap(),
            PathBuf::from("/no/such dir")
        );
        assert_eq!(
            workspace_path("/no/such/dir").unwrap(),
            PathBuf::from("/no/such/dir")
        );
        let e = workspace_path("relative/dir").unwrap_err();
        assert!(e.contains("absolute"), "{e}");
        assert!(workspace_path("file:///bad%zz").is_err());
    }
}
