//! Reading a growing file from where the last read stopped.
//!
//! A transcript is followed by byte offset. Before each read the tailer checks that the file
//! is still the one it was reading: the same inode (an agent that rotates its log writes a new
//! file under the old name), at least as long as what was read (a truncation), and starting
//! with the same bytes (a rewrite in place). When any of these fails it starts over from the
//! first byte and says so, so that the caller can re-import idempotently.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Bytes from the file's start remembered to detect a rewrite in place.
const PREFIX_LEN: usize = 4096;

/// What a poll found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Growth {
    /// Bytes appended since the last poll (possibly none).
    Appended(Vec<u8>),
    /// The file was replaced, truncated or rewritten: its whole content, from the first byte.
    Restarted { bytes: Vec<u8>, why: Restart },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    Replaced,
    Truncated,
    Rewritten,
}

impl std::fmt::Display for Restart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Restart::Replaced => "the file was replaced (a new inode under the same name)",
            Restart::Truncated => "the file was truncated",
            Restart::Rewritten => "the file was rewritten in place",
        })
    }
}

/// Follows one file by byte offset.
#[derive(Debug)]
pub struct Tailer {
    path: PathBuf,
    offset: u64,
    inode: Option<(u64, u64)>,
    prefix: Vec<u8>,
}

impl Tailer {
    pub fn new(path: &Path) -> Tailer {
        Tailer {
            path: path.to_path_buf(),
            offset: 0,
            inode: None,
            prefix: Vec::new(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes read so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Read what is new. A file that is missing for a moment (an agent replacing it) is an
    /// error the caller retries.
    pub fn poll(&mut self) -> std::io::Result<Growth> {
        let mut file = File::open(&self.path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(std::io::Error::other(format!(
                "{} is not a regular file",
                self.path.display()
            )));
        }
        let inode = (meta.dev(), meta.ino());
        let restart = if self.inode.is_some_and(|i| i != inode) {
            Some(Restart::Replaced)
        } else if meta.len() < self.offset {
            Some(Restart::Truncated)
        } else if !self.prefix.is_empty() && !starts_with(&mut file, &self.prefix)? {
            Some(Restart::Rewritten)
        } else {
            None
        };
        self.inode = Some(inode);
        if restart.is_some() {
            self.offset = 0;
            self.prefix.clear();
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        self.offset += bytes.len() as u64;
        if self.prefix.len() < PREFIX_LEN {
            let from = self.prefix.len();
            let have = (self.offset as usize).min(PREFIX_LEN);
            // The new bytes start at `offset - bytes.len()`; the prefix grows from its end.
            let start_of_new = self.offset as usize - bytes.len();
            if from >= start_of_new && have > from {
                self.prefix
                    .extend_from_slice(&bytes[from - start_of_new..have - start_of_new]);
            }
        }
        Ok(match restart {
            Some(why) => Growth::Restarted { bytes, why },
            None => Growth::Appended(bytes),
        })
    }
}

fn starts_with(file: &mut File, prefix: &[u8]) -> std::io::Result<bool> {
    file.seek(SeekFrom::Start(0))?;
    let mut head = vec![0; prefix.len()];
    let mut got = 0;
    while got < head.len() {
        match file.read(&mut head[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got == prefix.len() && head == prefix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn append(path: &Path, bytes: &[u8]) {
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
    }

    #[test]
    fn appended_bytes_are_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        append(&p, b"one\n");
        let mut t = Tailer::new(&p);
        assert_eq!(t.poll().unwrap(), Growth::Appended(b"one\n".to_vec()));
        assert_eq!(t.poll().unwrap(), Growth::Appended(Vec::new()));
        append(&p, b"two\n");
        assert_eq!(t.poll().unwrap(), Growth::Appended(b"two\n".to_vec()));
        assert_eq!(t.offset(), 8);
    }

    #[test]
    fn a_replaced_file_is_read_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        append(&p, b"one\ntwo\n");
        let mut t = Tailer::new(&p);
        t.poll().unwrap();
        let tmp = dir.path().join("new");
        append(&tmp, b"one\ntwo\nthree\n");
        std::fs::rename(&tmp, &p).unwrap();
        match t.poll().unwrap() {
            Growth::Restarted { bytes, why } => {
                assert_eq!(why, Restart::Replaced);
                assert_eq!(bytes, b"one\ntwo\nthree\n");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_truncated_file_is_read_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        append(&p, b"one\ntwo\n");
        let mut t = Tailer::new(&p);
        t.poll().unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&p)
            .unwrap()
            .write_all(b"x\n")
            .unwrap();
        match t.poll().unwrap() {
            Growth::Restarted { bytes, why } => {
                assert_eq!(why, Restart::Truncated);
                assert_eq!(bytes, b"x\n");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_file_rewritten_in_place_is_read_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        append(&p, b"one\ntwo\n");
        let mut t = Tailer::new(&p);
        t.poll().unwrap();
        // Same inode, longer, different first bytes.
        let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all(b"ONE\ntwo\nthree\n").unwrap();
        drop(f);
        match t.poll().unwrap() {
            Growth::Restarted { bytes, why } => {
                assert_eq!(why, Restart::Rewritten);
                assert_eq!(bytes, b"ONE\ntwo\nthree\n");
            }
            other => panic!("{other:?}"),
        }
    }
}
