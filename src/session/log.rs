//! The append-only JSONL session log on disk.
//!
//! Line 1 is the header, every later line one entry. Appends are single `write` calls of a
//! whole line; with [`Durability::Fsync`] (the default) the data is on stable storage before
//! the append returns, so an acknowledged entry survives a crash or power loss. One process
//! writes a session at a time, enforced by an OS lock on `<log>.lock`.
//!
//! Loading never deletes data: a torn final line (a crash mid-write) is moved to a side file
//! `<log>.torn-<n>` and reported; an unparseable line elsewhere is reported with its line
//! number, skipped, and left in the file.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::entry::{Entry, SessionHeader};
use super::{Session, TreeError};
use crate::config::Durability;
use crate::tokens::TokenizerKind;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a SOBA session log: {reason}. To convert an agent transcript, run `soba import FILE -o SESSION.jsonl`")]
    NotASession { path: String, reason: String },
    #[error("{path} is being written by {holder}; one writer per session. Stop that process, or send the request through the daemon (`soba serve`)")]
    Locked { path: String, holder: String },
    #[error("{path} already exists; choose another path or remove it")]
    Exists { path: String },
    #[error("cannot append to {path}: {source}")]
    Tree { path: String, source: TreeError },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> LogError + '_ {
    move |source| LogError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// A line that could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkippedLine {
    pub line: usize,
    pub reason: String,
}

/// A torn final line moved aside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TornTail {
    pub line: usize,
    pub bytes: usize,
    /// Side file holding the torn bytes; `None` when the log was opened read-only.
    pub moved_to: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadReport {
    pub entries: usize,
    pub skipped: Vec<SkippedLine>,
    pub torn_tail: Option<TornTail>,
}

impl LoadReport {
    /// Human-readable lines for stderr.
    pub fn messages(&self, path: &Path) -> Vec<String> {
        let mut out: Vec<String> = self
            .skipped
            .iter()
            .map(|s| format!("{}:{}: skipped: {}", path.display(), s.line, s.reason))
            .collect();
        if let Some(t) = &self.torn_tail {
            out.push(match &t.moved_to {
                Some(side) => format!(
                    "{}:{}: torn final line ({} bytes, an interrupted write) moved to {side}",
                    path.display(),
                    t.line,
                    t.bytes
                ),
                None => format!(
                    "{}:{}: torn final line ({} bytes, an interrupted write) ignored",
                    path.display(),
                    t.line,
                    t.bytes
                ),
            });
        }
        out
    }
}

/// An open, locked, writable session log.
#[derive(Debug)]
pub struct SessionLog {
    path: PathBuf,
    file: File,
    _lock: File,
    session: Session,
    durability: Durability,
}

fn lock_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".lock");
    PathBuf::from(p)
}

/// Take the session's writer lock, or say who holds it.
fn acquire_lock(path: &Path) -> Result<File, LogError> {
    let lp = lock_path(path);
    let mut lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lp)
        .map_err(io_err(&lp))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = lock.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(LogError::Locked {
                path: path.display().to_string(),
                holder: if holder.is_empty() {
                    "another process".into()
                } else {
                    holder.to_string()
                },
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io_err(&lp)(e)),
    }
    let who = format!(
        "pid {} ({}) since {}",
        std::process::id(),
        std::env::args().take(2).collect::<Vec<_>>().join(" "),
        crate::util::now_rfc3339()
    );
    lock.set_len(0).map_err(io_err(&lp))?;
    lock.seek(SeekFrom::Start(0)).map_err(io_err(&lp))?;
    lock.write_all(who.as_bytes()).map_err(io_err(&lp))?;
    Ok(lock)
}

/// Parse a whole log. `repair` moves a torn final line to a side file (needs write access).
fn load(
    path: &Path,
    tokenizer: Option<TokenizerKind>,
    repair: bool,
) -> Result<(Session, LoadReport), LogError> {
    let file = File::open(path).map_err(io_err(path))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    let mut offset = 0u64;
    let mut report = LoadReport::default();

    let n = reader.read_until(b'\n', &mut buf).map_err(io_err(path))?;
    line_no += 1;
    let not_session = |reason: String| LogError::NotASession {
        path: path.display().to_string(),
        reason,
    };
    if n == 0 {
        return Err(not_session("the file is empty".into()));
    }
    let header: SessionHeader = serde_json::from_slice(trim_newline(&buf))
        .map_err(|e| not_session(format!("line 1 is not a session header ({e})")))?;
    offset += n as u64;
    let kind = tokenizer
        .or_else(|| header.model.as_ref().and_then(|m| m.tokenizer))
        .or_else(|| {
            header
                .model
                .as_ref()
                .and_then(|m| m.name.as_deref())
                .and_then(crate::config::catalog_lookup)
                .map(|m| m.tokenizer)
        })
        .unwrap_or_default();
    let mut session = Session::new(header, kind);

    loop {
        // A line that lies whole in the read buffer (nearly all of them) is parsed where it
        // lies; only one that straddles two reads is copied.
        let available = reader.fill_buf().map_err(io_err(path))?;
        if available.is_empty() {
            break;
        }
        let (line, n) = match memchr::memchr(b'\n', available) {
            Some(end) => (&available[..=end], end + 1),
            None => {
                buf.clear();
                buf.extend_from_slice(available);
                let len = available.len();
                reader.consume(len);
                reader.read_until(b'\n', &mut buf).map_err(io_err(path))?;
                (&buf[..], 0)
            }
        };
        line_no += 1;
        let outcome = load_line(&mut session, line);
        let len = line.len();
        let torn = matches!(outcome, LineOutcome::Torn);
        if torn {
            let moved_to = if repair {
                Some(move_torn_tail(path, offset, line)?)
            } else {
                None
            };
            report.torn_tail = Some(TornTail {
                line: line_no,
                bytes: len,
                moved_to,
            });
        }
        if let LineOutcome::Skipped(reason) = outcome {
            report.skipped.push(SkippedLine {
                line: line_no,
                reason,
            });
        }
        reader.consume(n);
        if torn {
            break;
        }
        offset += len as u64;
    }
    report.entries = session.len();
    Ok((session, report))
}

enum LineOutcome {
    Loaded,
    Skipped(String),
    /// The last bytes of the file, without a newline, that do not parse: an interrupted write.
    Torn,
}

/// Parse one line (with its newline, if it has one) into the session.
fn load_line(session: &mut Session, line: &[u8]) -> LineOutcome {
    let complete = line.ends_with(b"\n");
    let text = trim_newline(line);
    if text.iter().all(u8::is_ascii_whitespace) {
        return LineOutcome::Loaded;
    }
    match serde_json::from_slice::<Entry>(text) {
        Ok(entry) => match session.push(entry) {
            Ok(()) => LineOutcome::Loaded,
            Err(e) => LineOutcome::Skipped(e.to_string()),
        },
        Err(_) if !complete => LineOutcome::Torn,
        Err(e) => LineOutcome::Skipped(format!("not a valid entry: {e}")),
    }
}

fn trim_newline(b: &[u8]) -> &[u8] {
    let b = b.strip_suffix(b"\n").unwrap_or(b);
    b.strip_suffix(b"\r").unwrap_or(b)
}

/// Copy the torn bytes to a fresh side file, make it durable, then cut them from the log.
fn move_torn_tail(path: &Path, offset: u64, bytes: &[u8]) -> Result<String, LogError> {
    let mut n = 1;
    let side = loop {
        let mut p = path.as_os_str().to_owned();
        p.push(format!(".torn-{n}"));
        let p = PathBuf::from(p);
        if !p.exists() {
            break p;
        }
        n += 1;
    };
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&side)
        .map_err(io_err(&side))?;
    f.write_all(bytes).map_err(io_err(&side))?;
    f.sync_all().map_err(io_err(&side))?;
    let log = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io_err(path))?;
    log.set_len(offset).map_err(io_err(path))?;
    log.sync_all().map_err(io_err(path))?;
    Ok(side.display().to_string())
}

/// Read a log without taking the writer lock or changing the file.
pub fn read_session(path: &Path) -> Result<(Session, LoadReport), LogError> {
    load(path, None, false)
}

impl SessionLog {
    /// Create a new log with its header. Fails if the file exists.
    pub fn create(
        path: &Path,
        header: SessionHeader,
        durability: Durability,
    ) -> Result<SessionLog, LogError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        let lock = acquire_lock(path)?;
        let mut file = match OpenOptions::new().append(true).create_new(true).open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(LogError::Exists {
                    path: path.display().to_string(),
                })
            }
            Err(e) => return Err(io_err(path)(e)),
        };
        let mut line = serde_json::to_vec(&header).expect("header serializes");
        line.push(b'\n');
        file.write_all(&line).map_err(io_err(path))?;
        file.sync_all().map_err(io_err(path))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Make the new directory entry durable too.
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        let tokenizer = header
            .model
            .as_ref()
            .and_then(|m| m.tokenizer)
            .unwrap_or_default();
        Ok(SessionLog {
            path: path.to_path_buf(),
            file,
            _lock: lock,
            session: Session::new(header, tokenizer),
            durability,
        })
    }

    /// Open an existing log for writing: take the lock, load, and move a torn tail aside.
    pub fn open(path: &Path, durability: Durability) -> Result<(SessionLog, LoadReport), LogError> {
        let lock = acquire_lock(path)?;
        let (session, report) = load(path, None, true)?;
        let mut file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(io_err(path))?;
        // A complete last entry written without its newline gets one, so the next append
        // starts on its own line.
        let len = file.metadata().map_err(io_err(path))?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            let mut r = File::open(path).map_err(io_err(path))?;
            r.seek(SeekFrom::Start(len - 1)).map_err(io_err(path))?;
            r.read_exact(&mut last).map_err(io_err(path))?;
            if last[0] != b'\n' {
                file.write_all(b"\n").map_err(io_err(path))?;
            }
        }
        Ok((
            SessionLog {
                path: path.to_path_buf(),
                file,
                _lock: lock,
                session,
                durability,
            },
            report,
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn session(&self) -> &Session {
        &self.session
    }

    pub fn session_mut(&mut self) -> &mut Session {
        &mut self.session
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// Force everything appended so far to stable storage, whatever the durability policy:
    /// lets a bulk writer append with [`Durability::Flush`] and sync once at the end.
    pub fn sync(&mut self) -> Result<(), LogError> {
        self.file.sync_data().map_err(io_err(&self.path))
    }

    /// Append one entry; when this returns `Ok` the entry is durable per the policy.
    pub fn append(&mut self, entry: Entry) -> Result<(), LogError> {
        self.append_all(vec![entry])
    }

    /// Append several entries with one write and one sync. All or none join the index.
    pub fn append_all(&mut self, entries: Vec<Entry>) -> Result<(), LogError> {
        if entries.is_empty() {
            return Ok(());
        }
        // Validate against the index as it will be, before writing anything.
        let mut bytes = Vec::new();
        {
            let mut ids: std::collections::HashSet<&str> = std::collections::HashSet::new();
            for e in &entries {
                let tree_err = |source| LogError::Tree {
                    path: self.path.display().to_string(),
                    source,
                };
                if ids.contains(e.id.as_str()) {
                    return Err(tree_err(TreeError::DuplicateId(e.id.clone())));
                }
                let parent_pending = e.parent_id.as_deref().is_some_and(|p| ids.contains(p));
                if !parent_pending {
                    self.session.check(e).map_err(tree_err)?;
                } else if self.session.index_of(&e.id).is_some() {
                    return Err(tree_err(TreeError::DuplicateId(e.id.clone())));
                }
                ids.insert(e.id.as_str());
                serde_json::to_writer(&mut bytes, e).expect("entries serialize");
                bytes.push(b'\n');
            }
        }
        self.file.write_all(&bytes).map_err(io_err(&self.path))?;
        if self.durability == Durability::Fsync {
            self.file.sync_data().map_err(io_err(&self.path))?;
        }
        for e in entries {
            self.session.push(e).map_err(|source| LogError::Tree {
                path: self.path.display().to_string(),
                source,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::entry::*;
    use crate::session::testing::header;

    fn msg(id: &str, parent: Option<&str>, text: &str) -> Entry {
        Entry::new(
            id,
            parent.map(str::to_string),
            EntryBody::Message(MessageEntry {
                role: Role::User,
                content: vec![ContentBlock::text(text)],
                usage: None,
                model: None,
                synthetic: false,
            }),
        )
    }

    /// A log at `dir/s.jsonl` holding `a` and its child `b`.
    fn two_entry_log(dir: &Path) -> (PathBuf, SessionLog) {
        let p = dir.join("s.jsonl");
        let mut log = SessionLog::create(&p, header(), Durability::Fsync).unwrap();
        log.append(msg("a", None, "one")).unwrap();
        log.append(msg("b", Some("a"), "two")).unwrap();
        (p, log)
    }

    #[test]
    fn appended_entries_load_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (p, log) = two_entry_log(dir.path());
        drop(log);
        let (s, report) = read_session(&p).unwrap();
        assert_eq!(
            report,
            LoadReport {
                entries: 2,
                ..Default::default()
            }
        );
        assert_eq!(s.leaf_id(), Some("b"));
        assert_eq!(s.entries()[0].id, "a");
    }

    #[test]
    fn torn_final_line_is_moved_to_a_side_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        let mut log = SessionLog::create(&p, header(), Durability::Fsync).unwrap();
        log.append(msg("a", None, "one")).unwrap();
        drop(log);
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(br#"{"id":"b","parentId":"a","ts":"x","type":"mess"#)
            .unwrap();
        drop(f);
        let (log, report) = SessionLog::open(&p, Durability::Fsync).unwrap();
        let torn = report.torn_tail.clone().unwrap();
        assert_eq!(torn.line, 3);
        let side = torn.moved_to.unwrap();
        assert!(std::fs::read_to_string(&side)
            .unwrap()
            .starts_with(r#"{"id":"b""#));
        assert_eq!(log.session().len(), 1);
        drop(log);
        // The log itself now ends with the last complete line.
        assert!(std::fs::read_to_string(&p).unwrap().ends_with("}\n"));
        let (_, again) = read_session(&p).unwrap();
        assert!(again.torn_tail.is_none());
    }

    /// A kill between an entry's bytes and its newline leaves a whole entry as the last line:
    /// it is kept, and the next append starts on a line of its own.
    #[test]
    fn whole_last_entry_without_its_newline_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (p, log) = two_entry_log(dir.path());
        drop(log);
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        let (mut log, report) = SessionLog::open(&p, Durability::Fsync).unwrap();
        assert!(report.torn_tail.is_none(), "{report:?}");
        assert_eq!(log.session().leaf_id(), Some("b"));
        log.append(msg("c", Some("b"), "three")).unwrap();
        drop(log);
        let (s, again) = read_session(&p).unwrap();
        assert!(
            again.torn_tail.is_none() && again.skipped.is_empty(),
            "{again:?}"
        );
        assert_eq!(s.len(), 3);
        assert_eq!(s.leaf_id(), Some("c"));
    }

    /// Lines are read in place from a 1 MiB buffer; lines longer than it, and lines that
    /// straddle two reads, must load the same, and so must a long torn tail.
    #[test]
    fn lines_longer_than_the_read_buffer_load_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        let mut log = SessionLog::create(&p, header(), Durability::Flush).unwrap();
        let sizes = [10, 700_000, 3_000_000, 5, 1_048_000, 1_048_576, 20];
        let mut parent: Option<String> = None;
        let mut written = Vec::new();
        for (n, size) in sizes.iter().enumerate() {
            let id = format!("e{n}");
            let e = msg(&id, parent.as_deref(), &"x".repeat(*size));
            log.append(e.clone()).unwrap();
            written.push(e);
            parent = Some(id);
        }
        drop(log);
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        let torn = format!(
            r#"{{"id":"t","parentId":"e6","ts":"x","type":"message","role":"user","content":[{{"type":"text","text":"{}"#,
            "y".repeat(2_500_000)
        );
        f.write_all(torn.as_bytes()).unwrap();
        drop(f);
        let (session, report) = read_session(&p).unwrap();
        assert!(report.skipped.is_empty(), "{:?}", report.skipped);
        assert_eq!(session.entries(), &written[..]);
        let tail = report.torn_tail.unwrap();
        assert_eq!((tail.line, tail.bytes), (sizes.len() + 2, torn.len()));
        let (log, _) = SessionLog::open(&p, Durability::Flush).unwrap();
        assert_eq!(log.session().entries(), &written[..]);
        let side = std::fs::read(dir.path().join("s.jsonl.torn-1")).unwrap();
        assert_eq!(side, torn.as_bytes());
    }

    #[test]
    fn garbage_in_the_middle_is_reported_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        let mut log = SessionLog::create(&p, header(), Durability::Flush).unwrap();
        log.append(msg("a", None, "one")).unwrap();
        drop(log);
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"this is not json\n").unwrap();
        f.write_all(
            format!(
                "{}\n",
                serde_json::to_string(&msg("b", Some("a"), "two")).unwrap()
            )
            .as_bytes(),
        )
        .unwrap();
        drop(f);
        let (mut log, report) = SessionLog::open(&p, Durability::Flush).unwrap();
        assert_eq!(report.skipped.len(), 1);
        assert_eq!(report.skipped[0].line, 3);
        assert_eq!(log.session().len(), 2);
        log.append(msg("c", Some("b"), "three")).unwrap();
        drop(log);
        assert!(std::fs::read_to_string(&p)
            .unwrap()
            .contains("this is not json\n"));
    }

    #[test]
    fn second_writer_gets_an_error_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        let first = SessionLog::create(&p, header(), Durability::Fsync).unwrap();
        let err = SessionLog::open(&p, Durability::Fsync).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, LogError::Locked { .. }), "{msg}");
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        assert!(msg.contains("one writer per session"), "{msg}");
        drop(first);
        assert!(SessionLog::open(&p, Durability::Fsync).is_ok());
    }

    #[test]
    fn a_file_that_is_not_a_log_is_refused_with_advice() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, "{\"type\":\"user\",\"message\":{}}\n").unwrap();
        let err = read_session(&p).unwrap_err().to_string();
        assert!(err.contains("not a SOBA session log"), "{err}");
        assert!(err.contains("soba import"), "{err}");
    }

    #[test]
    fn rejected_append_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        let mut log = SessionLog::create(&p, header(), Durability::Fsync).unwrap();
        log.append(msg("a", None, "one")).unwrap();
        let before = std::fs::read(&p).unwrap();
        assert!(log.append(msg("a", None, "dup")).is_err());
        assert!(log.append(msg("b", Some("nope"), "orphan")).is_err());
        assert_eq!(std::fs::read(&p).unwrap(), before);
    }

    #[test]
    fn rewind_moves_the_leaf_and_survives_reload() {
        let dir = tempfile::tempdir().unwrap();
        let (p, mut log) = two_entry_log(dir.path());
        log.append(Entry::new(
            "r",
            Some("b".into()),
            EntryBody::Rewind(RewindEntry { to: "a".into() }),
        ))
        .unwrap();
        assert_eq!(log.session().leaf_id(), Some("a"));
        log.append(msg("c", Some("a"), "branch")).unwrap();
        drop(log);
        let (s, _) = read_session(&p).unwrap();
        assert_eq!(s.leaf_id(), Some("c"));
        let branch: Vec<_> = s
            .branch(s.leaf().unwrap())
            .into_iter()
            .map(|i| s.entry(i).id.clone())
            .collect();
        assert_eq!(branch, ["a", "c"]);
    }
}
