//! The append-only JSONL session log on disk.
//!
//! Line 1 is the header, every later line one entry. Appends are single `write` calls of a
//! whole line; with [`Durability::Fsync`] (the default) the data is on stable storage before
//! the append returns, so an acknowledged entry survives a crash or power loss. One process
//! writes a session at a time, enforced by an OS lock on the log file itself (so every path to
//! it, links included, meets the same lock); `<log>.lock` only names the holder.
//!
//! A write that fails (a full disk, an I/O error) may have left part of a line behind; the
//! file is cut back to the end of the last acknowledged line before the error is returned, so
//! the next append starts clean. When even that fails, the log stops taking writes until it
//! is reopened.
//!
//! Loading never deletes data: a torn final line (a crash mid-write) is moved to a side file
//! `<log>.torn-<n>` and reported; an unparseable line elsewhere is reported with its line
//! number, skipped, and left in the file.

use crate::budget::unseen_allowance::LEARN_GROWTH_FROM_REPORTS;
use crate::budget::LEARN_FROM_REPORTS;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::entry::{Entry, SessionHeader};
use super::token_file::{self, LineKey};
use super::{Session, TreeError};
use crate::config::Durability;
use crate::tokens::TokenizerKind;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    // Each message prints its cause, which is therefore not also a `source()` (the field is
    // not named `source`): `{:#}` would print it twice.
    #[error("{path}: {cause}")]
    Io { path: String, cause: std::io::Error },
    #[error("{path}: not a SOBA session log: {reason}. To convert an agent transcript, run `soba import FILE -o SESSION.jsonl`")]
    NotASession { path: String, reason: String },
    #[error("{path} is being written by {holder}; one writer per session. Stop that process, or send the request through the daemon (`soba serve`)")]
    Locked { path: String, holder: String },
    #[error("{path} already exists; choose another path or remove it")]
    Exists { path: String },
    #[error("cannot append to {path}: {cause}")]
    Tree { path: String, cause: TreeError },
    #[error("could not write to {path}: {cause}. Nothing was saved: the log is back at its last complete entry. Free disk space (or fix the cause), then send the entries again")]
    WriteFailed { path: String, cause: std::io::Error },
    #[error("{path}: writing is stopped for this session: {reason}. Free disk space (or fix the cause), then close the session and open it again; opening repairs the log")]
    WritesStopped { path: String, reason: String },
}

impl LogError {
    /// The I/O error behind this one, for advice on its kind (not a `source()`: see above).
    pub fn io_cause(&self) -> Option<&std::io::Error> {
        match self {
            LogError::Io { cause, .. } | LogError::WriteFailed { cause, .. } => Some(cause),
            _ => None,
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> LogError + '_ {
    move |cause| LogError::Io {
        path: path.display().to_string(),
        cause,
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

/// An entry whose parent was lost to a damaged line, attached where that parent hung.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reattached {
    pub line: usize,
    pub entry_id: String,
    /// The parent it names, whose line is damaged.
    pub missing_parent: String,
    /// Where it now hangs: the lost parent's own parent, or (when the damaged line's ids
    /// could not be read) the entry that was the leaf just before the damaged line.
    pub attached_to: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadReport {
    pub entries: usize,
    pub skipped: Vec<SkippedLine>,
    pub torn_tail: Option<TornTail>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reattached: Vec<Reattached>,
}

impl LoadReport {
    /// Whether anything in the file was skipped, cut or re-attached.
    pub fn is_clean(&self) -> bool {
        self.skipped.is_empty() && self.torn_tail.is_none() && self.reattached.is_empty()
    }

    /// One line for a client: how many lines were skipped and what that means.
    pub fn summary(&self, path: &Path) -> Option<String> {
        if self.is_clean() {
            return None;
        }
        let mut parts = Vec::new();
        if !self.skipped.is_empty() {
            let lines: Vec<String> = self.skipped.iter().map(|s| s.line.to_string()).collect();
            parts.push(format!(
                "{} damaged line(s) skipped (line {}); they stay in the file",
                self.skipped.len(),
                lines.join(", ")
            ));
        }
        if !self.reattached.is_empty() {
            parts.push(format!(
                "{} entr{} after them re-attached to the chain",
                self.reattached.len(),
                if self.reattached.len() == 1 {
                    "y"
                } else {
                    "ies"
                }
            ));
        }
        if let Some(t) = &self.torn_tail {
            parts.push(format!(
                "a torn final line ({} bytes) set aside{}",
                t.bytes,
                t.moved_to
                    .as_deref()
                    .map(|s| format!(" in {s}"))
                    .unwrap_or_default()
            ));
        }
        Some(format!(
            "{}: {}. What those lines held is not in the budget or the model input; see the log",
            path.display(),
            parts.join("; ")
        ))
    }

    /// Human-readable lines for stderr.
    pub fn messages(&self, path: &Path) -> Vec<String> {
        let mut out: Vec<String> = self
            .skipped
            .iter()
            .map(|s| format!("{}:{}: skipped: {}", path.display(), s.line, s.reason))
            .collect();
        out.extend(self.reattached.iter().map(|r| {
            format!(
                "{}:{}: entry `{}` names `{}`, lost to a damaged line; attached to {}",
                path.display(),
                r.line,
                r.entry_id,
                r.missing_parent,
                r.attached_to
                    .as_deref()
                    .map_or("the root".to_string(), |a| format!("`{a}`"))
            )
        }));
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
    /// Opened for appending; its OS lock is the session's writer lock.
    file: File,
    session: Session,
    durability: Durability,
    /// Length of the file up to the end of the last acknowledged line.
    good_len: u64,
    /// Why writes are refused: a failed write could not be undone.
    stopped: Option<String>,
    fault: Option<WriteFault>,
    /// Where each entry's line lies in the file: what the side file's records are keyed by.
    line_keys: Vec<LineKey>,
    counts_file: CountsFile,
}

/// The token-count side file as this writer keeps it (see [`token_file`]).
#[derive(Debug)]
struct CountsFile {
    path: PathBuf,
    state: CountsState,
    /// Open for appending once this writer has written or checked it.
    file: Option<File>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CountsState {
    /// The file holds one matching record for each of the first `upto` entries, counted
    /// with `tokenizer`, and nothing else: records of later entries can be appended.
    Recorded {
        tokenizer: TokenizerKind,
        upto: usize,
    },
    /// Missing, stale or damaged: written afresh at the next save.
    Rebuild,
    /// A write failed; not tried again until the log is opened again.
    Off,
}

impl CountsFile {
    fn new(log: &Path, state: CountsState) -> CountsFile {
        CountsFile {
            path: token_file::path_for(log),
            state,
            file: None,
        }
    }
}

/// A failure to inject into the next append (tests): the write stores `written` bytes of the
/// line and then fails with `ENOSPC`, the way a write to a full disk does.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteFault {
    pub written: usize,
    /// The fsync after a complete write fails instead (`written` is ignored).
    pub sync_fails: bool,
    /// Cutting the partial line back off fails too.
    pub cut_fails: bool,
}

/// The side file naming the writer, beside the log's real path (links resolved), so that a
/// link to the log names the same holder.
fn holder_note_path(log: &Path) -> PathBuf {
    let real = std::fs::canonicalize(log).unwrap_or_else(|_| log.to_path_buf());
    let mut p = real.into_os_string();
    p.push(".lock");
    PathBuf::from(p)
}

/// Take the session's writer lock on the opened log, or say who holds it.
fn acquire_lock(path: &Path, log: &File) -> Result<(), LogError> {
    let mut tries = 0;
    loop {
        match log.try_lock() {
            Err(std::fs::TryLockError::WouldBlock) if tries < lock_tries(path) => {
                // A lock its writer let go of can stay held for a moment by a child that writer
                // was spawning meanwhile: the child shares the closed descriptor until its exec
                // closes it. That writer may be this process or the one that started this one.
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => break lock_outcome(path, other),
        }
    }?;
    Ok(())
}

/// Tries, 10 ms apart, before a held lock is reported: up to a second for a lock this process
/// let go of, a fifth of one for another's (a writer that really holds the log is named after
/// that, not at once).
fn lock_tries(path: &Path) -> u32 {
    if held_by_this_process(path) {
        100
    } else {
        20
    }
}

/// Whether the holder note names this process.
fn held_by_this_process(path: &Path) -> bool {
    let mut holder = String::new();
    if let Ok(mut note) = crate::files::open_regular(&holder_note_path(path)) {
        let _ = note.read_to_string(&mut holder);
    }
    holder.starts_with(&format!("pid {} ", std::process::id()))
}

fn lock_outcome(path: &Path, r: Result<(), std::fs::TryLockError>) -> Result<(), LogError> {
    match r {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            if let Ok(mut note) = crate::files::open_regular(&holder_note_path(path)) {
                let _ = note.read_to_string(&mut holder);
            }
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
        Err(std::fs::TryLockError::Error(e)) => return Err(io_err(path)(e)),
    }
    let note = holder_note_path(path);
    let who = format!(
        "pid {} ({}) since {}",
        std::process::id(),
        std::env::args().take(2).collect::<Vec<_>>().join(" "),
        crate::util::now_rfc3339()
    );
    // The lock is on the log itself; the note only names the holder for a second writer's
    // error, so a note that cannot be written is worth a warning, not a refusal.
    if let Err(e) = write_holder_note(&note, &who) {
        ::log::warn!("cannot name this writer in {}: {e}", note.display());
    }
    Ok(())
}

/// Replace the holder note. A link planted at its path is refused, never followed: the note
/// must not overwrite some other file.
fn write_holder_note(note: &Path, who: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(crate::files::PRIVATE_FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(note)
        .map_err(|e| crate::files::symlink_refused(note, e))?;
    if !f.metadata()?.is_file() {
        return Err(crate::files::not_regular(note, "not a regular file"));
    }
    // Written over the old note, then cut to length: truncating to zero first would make
    // ext4 flush the file to disk at close (its guard for truncate-and-rewrite), on every open.
    f.seek(SeekFrom::Start(0))?;
    f.write_all(who.as_bytes())?;
    f.set_len(who.len() as u64)
}

/// A log as loaded.
struct Loaded {
    session: Session,
    report: LoadReport,
    /// The key of each entry's line (for a writer, or when a side file was read).
    line_keys: Vec<LineKey>,
    counts: CountsState,
}

/// A log is read in blocks of about this many bytes of whole lines; each block is held for
/// the entries in it until every one of them has been parsed (see [`Session::entries`]).
const BLOCK: usize = 4 << 20;

/// A file read as blocks of whole lines (the last block's last line may lack its newline).
struct LineBlocks {
    file: File,
    /// Bytes read at a time (more when one line is longer).
    size: usize,
    /// Bytes of the file not read yet, as it was when opened: a block of a short file is
    /// sized to it. (A file that grows meanwhile is still read to its end.)
    left: u64,
    /// The start of a line that did not end in the block before.
    carry: Vec<u8>,
    eof: bool,
}

impl LineBlocks {
    fn next_block(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        let mut block = std::mem::take(&mut self.carry);
        let mut target = self.size.max(block.len() + 1);
        loop {
            if !self.eof && block.len() < target {
                let want = target - block.len();
                block.reserve_exact(want.min(self.left.saturating_add(1) as usize));
                let n = (&mut self.file).take(want as u64).read_to_end(&mut block)?;
                self.left = self.left.saturating_sub(n as u64);
                self.eof = n < want;
            }
            if self.eof {
                return Ok((!block.is_empty()).then_some(block));
            }
            match memchr::memrchr(b'\n', &block) {
                Some(last) => {
                    self.carry = block[last + 1..].to_vec();
                    block.truncate(last + 1);
                    return Ok(Some(block));
                }
                // One line longer than a block: read on until it ends.
                None => target = block.len() * 2,
            }
        }
    }
}

/// The lines of `bytes`, each with its newline (the last may lack one), found with `memchr`:
/// a byte-at-a-time split was a tenth of the time of opening a short log.
fn split_lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = bytes;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = memchr::memchr(b'\n', rest).map_or(rest.len(), |at| at + 1);
        let (line, tail) = rest.split_at(end);
        rest = tail;
        Some(line)
    })
}

/// How a log's entries are held once indexed (see [`Session::entries`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holding {
    /// As their lines when the log is longer than one block. A shorter log is held parsed:
    /// holding its lines would save little, and a reader of its model input would parse most
    /// of it again.
    ParsedWhenShort,
    /// As their lines however short the log: for a reader of the index and a few entries (a
    /// budget), for which parsed entries are memory a fresh process must fault in and free.
    Lines,
    /// Parsed from the latest capsule's line on (all of a log never compacted), as their lines
    /// before it: for a compaction, whose plan reads the history since the capsule in force
    /// (its facts, the history it folds). Held as lines, each of those entries was parsed
    /// once to be indexed and again to be planned.
    ParsedFromLatestCapsule,
}

/// The marks of a capsule entry's line: SOBA writes `"type":"capsule"`; another JSON writer
/// may space it.
const CAPSULE_MARKS: [&[u8]; 2] = [br#""type":"capsule""#, br#""type": "capsule""#];

/// The offset of the latest capsule mark in the first `len` bytes of `file`, read backwards
/// `block` bytes at a time (each read overlapping the next by a mark's length, so that a mark
/// across two reads is found). Any line holding the mark counts, also a text quoting it: it
/// only decides which entries a compaction holds parsed, never what they are. Leaves `file`
/// at its start.
fn latest_capsule_mark<R: Read + Seek>(
    file: &mut R,
    len: u64,
    block: usize,
) -> std::io::Result<Option<u64>> {
    // Forward searches, the last match kept: a reverse search has no vectorized prefilter
    // and took a tenth of a compaction's time over a log never compacted.
    let finders = CAPSULE_MARKS.map(memchr::memmem::Finder::new);
    let overlap = CAPSULE_MARKS.iter().map(|m| m.len()).max().unwrap_or(0) as u64 - 1;
    let mut buf = Vec::new();
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(block.max(1) as u64);
        let read_end = (end + overlap).min(len);
        buf.resize((read_end - start) as usize, 0);
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf)?;
        if let Some(at) = finders
            .iter()
            .filter_map(|f| f.find_iter(&buf).last())
            .max()
        {
            file.rewind()?;
            return Ok(Some(start + at as u64));
        }
        end = start;
    }
    file.rewind()?;
    Ok(None)
}

/// Parse a whole log, taking entry counts from its side file where they match. `repair`
/// moves a torn final line to a side file (needs write access).
fn load(
    path: &Path,
    tokenizer: Option<TokenizerKind>,
    repair: bool,
    holding: Holding,
) -> Result<Loaded, LogError> {
    load_in_blocks(path, tokenizer, repair, holding, BLOCK)
}

/// [`load`], reading `block` bytes at a time.
fn load_in_blocks(
    path: &Path,
    tokenizer: Option<TokenizerKind>,
    repair: bool,
    holding: Holding,
    block: usize,
) -> Result<Loaded, LogError> {
    let file = crate::files::open_regular(path).map_err(io_err(path))?;
    let left = file.metadata().map_or(0, |m| m.len());
    let mut blocks = LineBlocks {
        file,
        size: block,
        left,
        carry: Vec::new(),
        eof: false,
    };
    // Entries whose lines end at or before this offset are held as their lines.
    let lines_until = match holding {
        Holding::Lines => u64::MAX,
        _ if left <= block as u64 => 0,
        Holding::ParsedWhenShort => u64::MAX,
        Holding::ParsedFromLatestCapsule => latest_capsule_mark(&mut blocks.file, left, block)
            .map_err(io_err(path))?
            .unwrap_or(0),
    };
    let mut line_no = 0usize;
    let mut report = LoadReport::default();
    let not_session = |reason: String| LogError::NotASession {
        path: path.display().to_string(),
        reason,
    };
    let Some(mut block) = blocks.next_block().map_err(io_err(path))? else {
        return Err(not_session("the file is empty".into()));
    };
    let header_len = memchr::memchr(b'\n', &block).map_or(block.len(), |at| at + 1);
    line_no += 1;
    let header: SessionHeader = serde_json::from_slice(trim_newline(&block[..header_len]))
        .map_err(|e| not_session(format!("line 1 is not a session header ({e})")))?;
    let mut offset = header_len as u64;
    let mut skip = header_len;
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
    if holding == Holding::ParsedFromLatestCapsule {
        // A compaction counts its capsule: the tokenizer's tables (tens of milliseconds to
        // load) load on another core while this one reads the log.
        std::thread::spawn(move || kind.count(" "));
    }
    let mut session = Session::new(header, kind);
    // Entry lines are rarely shorter than 256 bytes: growing the index as it fills would copy
    // it (and hash every id read so far again) at each doubling.
    let expected_entries = (left / 256).min(1 << 24) as usize;
    session.reserve(expected_entries);
    // The leaf before a damaged line whose entry id could not be read: the next entry that
    // names an unknown parent continues the chain from here.
    let mut gap: Option<Option<usize>> = None;
    let mut recorded = token_file::Reader::open(&token_file::path_for(path));
    // Keys cost a checksum of every line: only a writer (which records them), a reader of
    // recorded counts, or a budget (which records what it counts) needs them.
    let keyed = repair || recorded.is_some() || holding == Holding::Lines;
    let mut line_keys = Vec::with_capacity(if keyed { expected_entries } else { 0 });
    // Leading entries whose counts came from the side file.
    let mut recorded_upto = 0usize;
    loop {
        let lines = std::sync::Arc::new(block);
        let held = session.hold_lines(std::sync::Arc::clone(&lines));
        let mut at = skip;
        let mut torn = false;
        for line in split_lines(&lines[skip..]) {
            let start = at;
            at += line.len();
            line_no += 1;
            let before = session.len();
            let outcome = load_line(&mut session, line, &mut gap);
            if keyed && session.len() > before {
                let key = LineKey::of(offset, trim_newline(line));
                line_keys.push(key);
                if let Some(side) = &mut recorded {
                    if let Some(counts) = side.counts_for(key, &session.entry(before).id) {
                        session.preset_counts(side.tokenizer(), before, counts);
                        if recorded_upto == before {
                            recorded_upto += 1;
                        }
                    }
                }
            }
            let len = line.len();
            torn = matches!(outcome, LineOutcome::Torn);
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
            // An entry that is its whole line is held as the line from now on, parsed again
            // when read: freed at once, its memory goes to the next line's entry.
            let whole_line = matches!(outcome, LineOutcome::Reattached { .. })
                || matches!(outcome, LineOutcome::Loaded if session.len() > before);
            if whole_line && offset + len as u64 <= lines_until {
                session.shelve(before, held, start, trim_newline(line).len());
            }
            match outcome {
                LineOutcome::Skipped(reason) => report.skipped.push(SkippedLine {
                    line: line_no,
                    reason,
                }),
                LineOutcome::Reattached {
                    entry_id,
                    missing_parent,
                } => {
                    let attached_to = session
                        .attach_point(&missing_parent)
                        .flatten()
                        .map(|i| session.with_id(i, str::to_string));
                    report.reattached.push(Reattached {
                        line: line_no,
                        entry_id,
                        missing_parent,
                        attached_to,
                    });
                }
                LineOutcome::Loaded | LineOutcome::Torn => {}
            }
            if torn {
                break;
            }
            offset += len as u64;
        }
        session.free_lines_if_unneeded(held);
        if torn {
            break;
        }
        match blocks.next_block().map_err(io_err(path))? {
            Some(next) => block = next,
            None => break,
        }
        skip = 0;
    }
    report.entries = session.len();
    let counts = match recorded {
        Some(side) => {
            let tokenizer = side.tokenizer();
            if side.finish() {
                CountsState::Recorded {
                    tokenizer,
                    upto: recorded_upto,
                }
            } else {
                CountsState::Rebuild
            }
        }
        None => CountsState::Rebuild,
    };
    Ok(Loaded {
        session,
        report,
        line_keys,
        counts,
    })
}

enum LineOutcome {
    Loaded,
    Skipped(String),
    /// Loaded, though its parent was lost to a damaged line: attached where that parent hung.
    Reattached {
        entry_id: String,
        missing_parent: String,
    },
    /// The last bytes of the file, without a newline, that do not parse: an interrupted write.
    Torn,
}

/// Parse one line (with its newline, if it has one) into the session.
///
/// A damaged line must not orphan everything after it: when its entry's `id` and `parentId`
/// can still be read, entries naming it attach to its parent; when they cannot, the first
/// later entry naming an unknown parent continues the chain from the leaf before the damage
/// (`gap`). Either way the damaged line is reported and stays in the file.
fn load_line(session: &mut Session, line: &[u8], gap: &mut Option<Option<usize>>) -> LineOutcome {
    let complete = line.ends_with(b"\n");
    let text = trim_newline(line);
    if text.iter().all(u8::is_ascii_whitespace) {
        return LineOutcome::Loaded;
    }
    let entry = match super::store::parse_line(text) {
        Ok(entry) => entry,
        Err(_) if !complete => return LineOutcome::Torn,
        Err(e) => {
            let lost = salvage_ids(text).and_then(|(id, parent)| match parent {
                None => Some((id, None)),
                Some(p) => session.attach_point(&p).map(|slot| (id, slot)),
            });
            let lost_unreadable = lost.is_none();
            if let Some((id, slot)) = lost {
                session.bridge(id, slot);
            }
            let mut reason = format!("not a valid entry: {e}");
            // A write that failed part-way, followed by a later append on the same line (what
            // a full disk did before failed writes were cut back): the later entry is whole.
            if let Some(glued) = glued_entry(text) {
                let id = glued.id.clone();
                if session.push(glued).is_ok() {
                    reason.push_str(&format!(
                        "; the whole entry `{id}` written after the damaged part of the line was loaded"
                    ));
                    return LineOutcome::Skipped(reason);
                }
            }
            if lost_unreadable {
                *gap = Some(session.leaf());
            }
            return LineOutcome::Skipped(reason);
        }
    };
    // Only a log with damaged lines pays for this check.
    if session.has_bridges() {
        if let Some(missing_parent) = entry
            .parent_id
            .as_deref()
            .filter(|p| session.is_bridged(p))
            .map(str::to_string)
        {
            let entry_id = entry.id.clone();
            return match session.push(entry) {
                Ok(()) => LineOutcome::Reattached {
                    entry_id,
                    missing_parent,
                },
                Err(e) => LineOutcome::Skipped(e.to_string()),
            };
        }
    }
    match session.push(entry) {
        Ok(()) => LineOutcome::Loaded,
        Err(TreeError::UnknownParent { id, parent }) if gap.is_some() => {
            let slot = gap.take().flatten();
            session.bridge(parent.clone(), slot);
            // The entry itself was refused untouched; push it again now that its parent
            // resolves. It was consumed, so rebuild it from the line.
            match serde_json::from_slice::<Entry>(text).map(|e| session.push(e)) {
                Ok(Ok(())) => LineOutcome::Reattached {
                    entry_id: id,
                    missing_parent: parent,
                },
                Ok(Err(e)) => LineOutcome::Skipped(e.to_string()),
                Err(e) => LineOutcome::Skipped(format!("not a valid entry: {e}")),
            }
        }
        Err(e) => LineOutcome::Skipped(e.to_string()),
    }
}

/// A whole entry at the end of a damaged line, after the damaged part.
fn glued_entry(text: &[u8]) -> Option<Entry> {
    memchr::memmem::find_iter(text, br#"{"id":""#)
        .filter(|&at| at > 0)
        .find_map(|at| serde_json::from_slice::<Entry>(&text[at..]).ok())
}

/// The `id` and `parentId` of a damaged entry line, when its start is intact: entries are
/// written with those two keys first (`{"id":"…","parentId":…`). `parentId` is `None` for a
/// root entry.
fn salvage_ids(text: &[u8]) -> Option<(String, Option<String>)> {
    let rest = text.strip_prefix(br#"{"id":"#)?;
    let mut stream = serde_json::Deserializer::from_slice(rest).into_iter::<String>();
    let id = stream.next()?.ok()?;
    let rest = rest[stream.byte_offset()..].strip_prefix(br#","parentId":"#)?;
    let mut stream = serde_json::Deserializer::from_slice(rest).into_iter::<Option<String>>();
    let parent = stream.next()?.ok()?;
    Some((id, parent))
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
    let mut f = crate::files::create_private(&side, false).map_err(io_err(&side))?;
    f.write_all(bytes).map_err(io_err(&side))?;
    f.sync_all().map_err(io_err(&side))?;
    let log = crate::files::open_regular_write(path).map_err(io_err(path))?;
    log.set_len(offset).map_err(io_err(path))?;
    log.sync_all().map_err(io_err(path))?;
    Ok(side.display().to_string())
}

/// Read a log without taking the writer lock or changing the file (nor its side files).
pub fn read_session(path: &Path) -> Result<(Session, LoadReport), LogError> {
    load(path, None, false, Holding::ParsedWhenShort).map(|l| (l.session, l.report))
}

/// [`read_session`] for a reader of the index and a few entries (`soba budget`): every entry
/// is held as its line, however short the log, and parsed again only where it is read.
pub fn read_session_as_lines(path: &Path) -> Result<(Session, LoadReport), LogError> {
    load(path, None, false, Holding::Lines).map(|l| (l.session, l.report))
}

/// [`read_session_as_lines`], with what [`SideFile::record_new_counts`] needs to record the
/// counts the reader makes.
pub fn read_session_for_budget(path: &Path) -> Result<(Session, LoadReport, SideFile), LogError> {
    let loaded = load(path, None, false, Holding::Lines)?;
    let side = SideFile {
        log: path.to_path_buf(),
        keys: loaded.line_keys,
        existed: token_file::path_for(path).exists(),
        kept_by: match loaded.counts {
            CountsState::Recorded { tokenizer, .. } => Some(tokenizer),
            CountsState::Rebuild | CountsState::Off => None,
        },
    };
    Ok((loaded.session, loaded.report, side))
}

/// The token-count side file of a log opened by a reader (see [`read_session_for_budget`]).
#[derive(Debug)]
pub struct SideFile {
    log: PathBuf,
    /// The key of each entry's line, as the load read it: what the records are keyed by.
    keys: Vec<LineKey>,
    /// Whether a file was there when the log was read (usable or not).
    existed: bool,
    /// The tokenizer of a file that held one whole, matching record per entry, in order:
    /// what a writer keeps, and may be appending to.
    kept_by: Option<TokenizerKind>,
}

/// What [`SideFile::record_new_counts`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Nothing was tokenized: every count read came from the side file.
    NothingNew,
    /// Written: the next read of the log takes these counts instead of tokenizing again.
    Written,
    /// Not written: the log has damaged lines (left to a writer, which repairs what it can
    /// and records then), another process created the file meanwhile, or a writer keeps it.
    Skipped,
}

impl SideFile {
    /// Record the counts a read-only command made (a `soba budget` of a log with no side
    /// file, or one that lacked them), so that the next one reads them. Only what was counted
    /// is recorded, nothing more is counted for it: a budget counts its model input, and a
    /// long compacted log's history is left to the writer, which records every entry when it
    /// opens the log. The log is never touched. A missing file is created only if none
    /// appears meanwhile; one that was there is replaced whole, by rename, as a writer
    /// replaces it, unless it is one a writer keeps with this tokenizer (a writer appending
    /// to it would append to the replaced file): that writer records what it counts.
    pub fn record_new_counts(
        &self,
        session: &Session,
        report: &LoadReport,
    ) -> std::io::Result<Recorded> {
        if !session.tokenized_since_load() {
            return Ok(Recorded::NothingNew);
        }
        if !report.is_clean() || self.kept_by == Some(session.tokenizer()) {
            return Ok(Recorded::Skipped);
        }
        if self.keys.len() != session.len() {
            // Entries joined the session after the load: no line of this file holds them.
            return Ok(Recorded::Skipped);
        }
        let mut bytes = token_file::header_line(session.tokenizer()).into_bytes();
        for (i, key) in self.keys.iter().enumerate() {
            if let Some(counts) = session.counts_if_counted(i) {
                session.with_id(i, |id| {
                    token_file::encode_record(&mut bytes, *key, id, &counts)
                });
            }
        }
        let path = token_file::path_for(&self.log);
        if self.existed {
            token_file::replace(&path, &bytes)?;
        } else if !token_file::create_new(&path, &bytes)? {
            return Ok(Recorded::Skipped);
        }
        Ok(Recorded::Written)
    }
}

/// The side file's records of entries `from..` of `session`, whose lines `keys` locate.
fn encode_records(session: &Session, keys: &[LineKey], from: usize) -> Vec<u8> {
    // The samples the next open learns from (the newest reports on the leaf's branch: its
    // count factor from 8, its unseen-growth allowance from 32) are measured before they are
    // recorded, so that a budget after the open builds no view per report; older ones only
    // if already measured.
    let _ = session.newest_samples_at(
        session.leaf(),
        LEARN_FROM_REPORTS.max(LEARN_GROWTH_FROM_REPORTS),
    );
    let mut bytes = Vec::with_capacity((session.len() - from) * 48);
    for (i, key) in keys.iter().enumerate().skip(from) {
        let counts = session.counts_of(i);
        session.with_id(i, |id| {
            token_file::encode_record(&mut bytes, *key, id, &counts)
        });
    }
    bytes
}

impl SessionLog {
    /// Create a new log with its header (mode `0600`). Fails if the file exists or its folder
    /// does not: creating folders is the caller's decision.
    pub fn create(
        path: &Path,
        header: SessionHeader,
        durability: Durability,
    ) -> Result<SessionLog, LogError> {
        crate::files::require_parent(path).map_err(io_err(path))?;
        let mut file = match crate::files::create_private(path, true) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(LogError::Exists {
                    path: path.display().to_string(),
                })
            }
            Err(e) => return Err(io_err(path)(e)),
        };
        acquire_lock(path, &file)?;
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
            session: Session::new(header, tokenizer),
            durability,
            good_len: line.len() as u64,
            stopped: None,
            fault: None,
            line_keys: Vec::new(),
            counts_file: CountsFile::new(path, CountsState::Rebuild),
        })
    }

    /// Open an existing log for writing: take the lock, load, and move a torn tail aside.
    pub fn open(path: &Path, durability: Durability) -> Result<(SessionLog, LoadReport), LogError> {
        Self::open_holding(path, durability, Holding::ParsedWhenShort)
    }

    /// [`SessionLog::open`] for a process that compacts the session at once (`soba compact`,
    /// `soba capsule create`): the entries from the latest capsule on, which the plan reads,
    /// stay parsed from the load, so that each is parsed once; older ones are held as their
    /// lines, as [`SessionLog::open`] holds them all.
    pub fn open_to_compact(
        path: &Path,
        durability: Durability,
    ) -> Result<(SessionLog, LoadReport), LogError> {
        Self::open_holding(path, durability, Holding::ParsedFromLatestCapsule)
    }

    fn open_holding(
        path: &Path,
        durability: Durability,
        holding: Holding,
    ) -> Result<(SessionLog, LoadReport), LogError> {
        let mut file = crate::files::open_regular_append(path).map_err(io_err(path))?;
        acquire_lock(path, &file)?;
        let loaded = load(path, None, true, holding)?;
        // A complete last entry written without its newline gets one, so the next append
        // starts on its own line.
        let mut len = file.metadata().map_err(io_err(path))?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            file.seek(SeekFrom::Start(len - 1)).map_err(io_err(path))?;
            file.read_exact(&mut last).map_err(io_err(path))?;
            if last[0] != b'\n' {
                file.write_all(b"\n").map_err(io_err(path))?;
                len += 1;
            }
        }
        Ok((
            SessionLog {
                path: path.to_path_buf(),
                file,
                session: loaded.session,
                durability,
                good_len: len,
                stopped: None,
                fault: None,
                line_keys: loaded.line_keys,
                counts_file: CountsFile::new(path, loaded.counts),
            },
            loaded.report,
        ))
    }

    /// Make the next append fail the way a full disk does (tests of the recovery).
    #[doc(hidden)]
    pub fn inject_write_fault(&mut self, fault: WriteFault) {
        self.fault = Some(fault);
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

    /// Apply the durability policy a configuration chose after the log was opened: a writer
    /// that reads its configuration from the log's own header opens the log once, not once
    /// to learn the policy and again to write.
    pub fn set_durability(&mut self, durability: Durability) {
        self.durability = durability;
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
        let mut keys = Vec::with_capacity(entries.len());
        {
            let mut ids: std::collections::HashSet<&str> = std::collections::HashSet::new();
            for e in &entries {
                let tree_err = |cause| LogError::Tree {
                    path: self.path.display().to_string(),
                    cause,
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
                let start = bytes.len();
                serde_json::to_writer(&mut bytes, e).expect("entries serialize");
                keys.push(LineKey::of(self.good_len + start as u64, &bytes[start..]));
                bytes.push(b'\n');
            }
        }
        if let Some(reason) = &self.stopped {
            return Err(LogError::WritesStopped {
                path: self.path.display().to_string(),
                reason: reason.clone(),
            });
        }
        let fault = self.fault.take();
        if let Err(source) = self.write_durably(&bytes, fault) {
            return Err(self.undo_failed_write(source, fault));
        }
        self.good_len += bytes.len() as u64;
        for e in entries {
            self.session.push(e).map_err(|cause| LogError::Tree {
                path: self.path.display().to_string(),
                cause,
            })?;
        }
        self.line_keys.extend(keys);
        self.save_token_counts();
        Ok(())
    }

    /// Bring the token-count side file up to date with every entry, counted with the
    /// session's tokenizer: records of new entries are appended; a missing, stale or damaged
    /// file (or a changed tokenizer) is written afresh, counting what is not counted yet.
    /// Never fails: the file is a cache, and a write that fails costs a recount at the next
    /// open (a warning says so once).
    pub fn save_token_counts(&mut self) {
        let tokenizer = self.session.tokenizer();
        let len = self.session.len();
        if self.line_keys.len() != len {
            // Entries joined the session without a line of this file: keys unknown.
            return;
        }
        let written = match self.counts_file.state {
            CountsState::Off => return,
            CountsState::Recorded { tokenizer: t, upto } if t == tokenizer => {
                if upto == len {
                    return;
                }
                self.append_records(upto)
            }
            _ => self.rewrite_records(),
        };
        self.counts_file.state = match written {
            Ok(()) => CountsState::Recorded {
                tokenizer,
                upto: len,
            },
            Err(e) => {
                self.counts_file.file = None;
                ::log::warn!(
                    "cannot save token counts in {}: {e}; the next open of this session counts its entries again",
                    self.counts_file.path.display()
                );
                CountsState::Off
            }
        };
    }

    fn records(&self, from: usize) -> Vec<u8> {
        encode_records(&self.session, &self.line_keys, from)
    }

    fn append_records(&mut self, from: usize) -> std::io::Result<()> {
        let bytes = self.records(from);
        let file = match &mut self.counts_file.file {
            Some(f) => f,
            slot => slot.insert(token_file::open_append(&self.counts_file.path)?),
        };
        file.write_all(&bytes)
    }

    fn rewrite_records(&mut self) -> std::io::Result<()> {
        self.session.count_all();
        let mut bytes = token_file::header_line(self.session.tokenizer()).into_bytes();
        bytes.extend(self.records(0));
        self.counts_file.file = Some(token_file::replace(&self.counts_file.path, &bytes)?);
        Ok(())
    }
}

impl SessionLog {
    /// One write of the whole batch, then the sync the durability policy asks for.
    fn write_durably(&mut self, bytes: &[u8], fault: Option<WriteFault>) -> std::io::Result<()> {
        match fault {
            Some(f) if !f.sync_fails => {
                self.file.write_all(&bytes[..f.written.min(bytes.len())])?;
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            _ => {}
        }
        self.file.write_all(bytes)?;
        if fault.is_some_and(|f| f.sync_fails) {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        if self.durability == Durability::Fsync {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Cut the file back to its last acknowledged line after a failed write, so that no part
    /// of the failed batch is glued to the next one. When that fails too, stop writing.
    fn undo_failed_write(&mut self, source: std::io::Error, fault: Option<WriteFault>) -> LogError {
        let path = self.path.display().to_string();
        let cut = if fault.is_some_and(|f| f.cut_fails) {
            Err(std::io::Error::from_raw_os_error(libc::EIO))
        } else {
            self.cut_back()
        };
        match cut {
            Ok(()) => LogError::WriteFailed {
                path,
                cause: source,
            },
            Err(cut) => {
                let reason = format!(
                    "a write failed ({source}) and its partial line could not be cut off ({cut})"
                );
                self.stopped = Some(reason.clone());
                LogError::WritesStopped { path, reason }
            }
        }
    }

    fn cut_back(&mut self) -> std::io::Result<()> {
        self.file.set_len(self.good_len)?;
        self.file.sync_data()?;
        let len = self.file.metadata()?.len();
        if len != self.good_len {
            return Err(std::io::Error::other(format!(
                "the file is {len} bytes after cutting it to {}",
                self.good_len
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::CountSample;
    use crate::session::entry::*;
    use crate::session::testing::{header, written_log};

    use crate::session::testing::user_message as msg;

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
        assert_eq!(session.entries().to_vec(), written);
        let tail = report.torn_tail.unwrap();
        assert_eq!((tail.line, tail.bytes), (sizes.len() + 2, torn.len()));
        let (log, _) = SessionLog::open(&p, Durability::Flush).unwrap();
        assert_eq!(log.session().entries().to_vec(), written);
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

    /// A log of `a → b → c → d → e` whose line for `c` is replaced by `damaged`.
    fn log_with_damaged_middle(dir: &Path, damaged: &str) -> PathBuf {
        let p = dir.join("s.jsonl");
        let mut log = SessionLog::create(&p, header(), Durability::Flush).unwrap();
        let mut parent = None;
        for id in ["a", "b", "c", "d", "e"] {
            log.append(msg(id, parent, &format!("entry {id}"))).unwrap();
            parent = Some(id);
        }
        drop(log);
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut out = String::new();
        for (n, l) in lines.iter().enumerate() {
            out.push_str(if n == 3 { damaged } else { l });
            out.push('\n');
        }
        std::fs::write(&p, out).unwrap();
        p
    }

    fn branch_ids(s: &Session) -> Vec<String> {
        s.branch(s.leaf().unwrap())
            .into_iter()
            .map(|i| s.entry(i).id.clone())
            .collect()
    }

    /// One damaged line used to orphan every later entry: the budget fell and a compaction
    /// wrote onto the old branch.
    #[test]
    fn a_damaged_line_whose_ids_are_readable_leaves_its_children_on_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let damaged = r#"{"id":"c","parentId":"b","ts":"x","type":"message","role":"us\u00"#;
        let p = log_with_damaged_middle(dir.path(), damaged);
        let (s, report) = read_session(&p).unwrap();
        assert_eq!(report.skipped.len(), 1, "{report:?}");
        assert_eq!(report.skipped[0].line, 4);
        assert_eq!(branch_ids(&s), ["a", "b", "d", "e"]);
        assert_eq!(
            report.reattached,
            [Reattached {
                line: 5,
                entry_id: "d".into(),
                missing_parent: "c".into(),
                attached_to: Some("b".into()),
            }]
        );
        let summary = report.summary(&p).unwrap();
        assert!(
            summary.contains("1 damaged line(s) skipped (line 4)"),
            "{summary}"
        );
        assert!(
            summary.contains("1 entry after them re-attached"),
            "{summary}"
        );
        // New entries go on the same chain, and the damaged line stays in the file.
        let (mut log, _) = SessionLog::open(&p, Durability::Flush).unwrap();
        log.append(msg("f", Some("e"), "six")).unwrap();
        drop(log);
        let (s, _) = read_session(&p).unwrap();
        assert_eq!(branch_ids(&s), ["a", "b", "d", "e", "f"]);
        assert!(std::fs::read_to_string(&p).unwrap().contains(damaged));
    }

    /// When not even the id can be read, the entries after the damaged line continue the
    /// chain from the leaf before it.
    #[test]
    fn entries_after_an_unreadable_line_continue_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let p = log_with_damaged_middle(dir.path(), "\u{0}\u{0}garbage from a bad sector");
        let (s, report) = read_session(&p).unwrap();
        assert_eq!(report.skipped.len(), 1, "{report:?}");
        assert_eq!(branch_ids(&s), ["a", "b", "d", "e"]);
        assert_eq!(report.reattached.len(), 1);
        assert_eq!(report.reattached[0].attached_to.as_deref(), Some("b"));
        // Only the one missing id is bridged: a later entry naming another unknown parent
        // is still refused.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        let stray = serde_json::to_string(&msg("g", Some("nowhere"), "stray")).unwrap();
        writeln!(f, "{stray}").unwrap();
        drop(f);
        let (s, report) = read_session(&p).unwrap();
        assert_eq!(report.skipped.len(), 2, "{report:?}");
        assert_eq!(s.leaf_id(), Some("e"));
    }

    /// The same log read a few bytes at a time: every line straddles blocks, some lines are
    /// longer than a block, and the damaged, glued, reattached and torn lines are told the same.
    #[test]
    fn a_log_read_in_blocks_of_any_size_loads_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let d = serde_json::to_string(&msg("d", Some("b"), "four")).unwrap();
        let partial = r#"{"id":"c","parentId":"b","ts":"x","type":"message","role":"user","con"#;
        let cases = [
            "\u{0}\u{0}garbage from a bad sector".to_string(),
            r#"{"id":"c","parentId":"b","ts":"x","type":"mess"#.to_string(),
            format!("{partial}{d}"),
            serde_json::to_string(&msg("c\"quoted", Some("b"), "escaped id")).unwrap(),
        ];
        for (n, damaged) in cases.iter().enumerate() {
            let sub = dir.path().join(n.to_string());
            std::fs::create_dir(&sub).unwrap();
            let p = log_with_damaged_middle(&sub, damaged);
            let mut f = OpenOptions::new().append(true).open(&p).unwrap();
            write!(f, r#"{{"id":"t","parentId":"e","ts":"x","type":"mes"#).unwrap();
            drop(f);
            let whole = load(&p, None, false, Holding::ParsedWhenShort).unwrap();
            let entries = whole.session.entries().to_vec();
            for block in [1, 2, 7, 64, 300] {
                let read =
                    load_in_blocks(&p, None, false, Holding::ParsedWhenShort, block).unwrap();
                assert_eq!(read.report, whole.report, "case {n}, blocks of {block}");
                assert_eq!(read.session.entries().to_vec(), entries, "case {n}");
                assert_eq!(branch_ids(&read.session), branch_ids(&whole.session));
            }
        }
    }

    /// Opening a long log parses each line to index it, then holds it as its line: only what
    /// is read again (the model input, for a budget) is parsed again and kept parsed. A log
    /// that fits in one block is held parsed.
    #[test]
    fn an_opened_log_keeps_parsed_only_the_entries_read_since() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = crate::session::testing::Builder::new();
        for i in 0..60 {
            b.user(&format!("question {i}"));
            b.assistant(&format!("answer {i}"));
        }
        let kept = b.user("the tail starts here");
        let mut cap = crate::session::testing::full_capsule();
        cap.first_kept_entry_id = Some(kept);
        b.push(EntryBody::Capsule(Box::new(cap)));
        b.assistant("after the capsule");
        let p = written_log(dir.path(), &b.session);
        // Read in blocks smaller than the log, as a long log is.
        let loaded = load_in_blocks(&p, None, true, Holding::ParsedWhenShort, 1024).unwrap();
        let s = &loaded.session;
        assert_eq!(s.len(), 123);
        assert_eq!(s.parsed_entries(), 0);
        // Capsules are found by the index's entry types, the others left unread.
        let capsules = s.indices_of(crate::session::entry::EntryKind::Capsule);
        assert_eq!(
            capsules
                .filter(|&i| s.entry(i).as_capsule().is_some())
                .count(),
            1
        );
        assert_eq!(s.parsed_entries(), 1);
        let view = crate::session::view::ModelView::build(s, s.leaf());
        s.tally();
        let read = view.entry_indices().count() + 1;
        assert!(
            s.parsed_entries() <= read + 1,
            "{} parsed for a view of {read}",
            s.parsed_entries()
        );
        assert_eq!(s.entries().to_vec(), b.session.entries().to_vec());
        let (log, _) = SessionLog::open(&p, Durability::Flush).unwrap();
        assert_eq!(log.session().parsed_entries(), 123);
    }

    /// A session of turns with shell calls (one failing), then a capsule, then more turns.
    fn turns_around_a_capsule() -> crate::session::testing::Builder {
        let mut b = crate::session::testing::Builder::new();
        let turn = |b: &mut crate::session::testing::Builder, i: usize| {
            b.user(&format!("fix the parser, step {i}"));
            b.call(
                &format!("c{i}"),
                "Bash",
                serde_json::json!({"command": "cargo test"}),
            );
            let out = if i % 5 == 2 {
                format!("error[E0308]: mismatched types in step {i}\ntest result: FAILED")
            } else {
                format!("test result: ok. {i} passed")
            };
            b.result(&format!("c{i}"), &out);
            b.assistant(&format!("step {i} done: the tests pass"));
        };
        for i in 0..30 {
            turn(&mut b, i);
        }
        let kept = b.user("the tail starts here");
        let mut cap = crate::session::testing::full_capsule();
        cap.first_kept_entry_id = Some(kept);
        b.push(EntryBody::Capsule(Box::new(cap)));
        for i in 30..50 {
            turn(&mut b, i);
        }
        b
    }

    /// Opened to compact, a long log holds parsed what the plan reads, from the latest
    /// capsule on, and holds the rest as lines; a log never compacted is held parsed whole.
    #[test]
    fn a_log_opened_to_compact_holds_parsed_the_entries_from_the_latest_capsule_on() {
        let dir = tempfile::tempdir().unwrap();
        let b = turns_around_a_capsule();
        let p = written_log(dir.path(), &b.session);
        let capsule = b
            .session
            .indices_of(crate::session::entry::EntryKind::Capsule)
            .next()
            .unwrap();
        let loaded =
            load_in_blocks(&p, None, true, Holding::ParsedFromLatestCapsule, 1024).unwrap();
        let s = &loaded.session;
        let parsed: Vec<usize> = s.parsed_entry_kinds().iter().map(|(i, _)| *i).collect();
        assert_eq!(parsed, (capsule..s.len()).collect::<Vec<_>>());
        assert_eq!(s.entries().to_vec(), b.session.entries().to_vec());

        let dir = tempfile::tempdir().unwrap();
        let mut never = crate::session::testing::Builder::new();
        for i in 0..80 {
            never.user(&format!("question {i}"));
            never.assistant(&format!("answer {i}"));
        }
        let p = written_log(dir.path(), &never.session);
        let loaded =
            load_in_blocks(&p, None, true, Holding::ParsedFromLatestCapsule, 1024).unwrap();
        assert_eq!(loaded.session.parsed_entries(), 160);
    }

    /// Holding entries parsed from the load changes what is parsed when, never the plan:
    /// the capsule planned from a log opened to compact is the one planned from a log opened
    /// as every other writer opens it.
    #[test]
    fn the_plan_of_a_log_opened_to_compact_equals_the_plan_of_a_log_held_as_lines() {
        use crate::compaction::plan::{plan, PlanRequest};
        let dir = tempfile::tempdir().unwrap();
        let b = turns_around_a_capsule();
        let p = written_log(dir.path(), &b.session);
        let overrides = crate::config::Overrides {
            keep_recent_tokens: Some(200),
            ..Default::default()
        };
        let config = crate::config::Config::resolve(&[], None, &overrides).unwrap();
        let req = PlanRequest {
            trigger: crate::session::trigger::Trigger::User,
            requested: true,
            instructions: None,
            title: None,
            config: &config,
            mapping: &config.tool_mapping,
            operation_id: "op_1".into(),
        };
        let planned = |holding| {
            let loaded = load_in_blocks(&p, None, true, holding, 1024).unwrap();
            let s = &loaded.session;
            plan(s, s.leaf(), &req).expect("a plan")
        };
        let as_lines = planned(Holding::ParsedWhenShort);
        assert!(!as_lines.summarized_entry_ids.is_empty());
        assert!(
            as_lines.local_state.errors.len() + as_lines.local_state.completed.len() > 0,
            "{:?}",
            as_lines.local_state
        );
        assert_eq!(planned(Holding::ParsedFromLatestCapsule), as_lines);
    }

    /// The latest mark is found wherever the reads fall, also across two of them; the file is
    /// left at its start for the load.
    #[test]
    fn the_latest_capsule_mark_is_found_across_read_boundaries() {
        let text = format!(
            "{{\"id\":\"a\",\"type\":\"capsule\"}}\n{{\"id\":\"b\",\"type\":\"message\"}}\n\
             {{\"id\":\"c\", \"type\": \"capsule\"}}\n{}\n",
            "{\"id\":\"d\",\"type\":\"message\"}"
        );
        let expected = text.rfind("\"type\": \"capsule\"").unwrap() as u64;
        for block in 1..text.len() + 2 {
            let mut file = std::io::Cursor::new(text.as_bytes());
            file.set_position(9);
            let found = latest_capsule_mark(&mut file, text.len() as u64, block).unwrap();
            assert_eq!(found, Some(expected), "reading {block} bytes at a time");
            assert_eq!(file.position(), 0);
        }
        let none = "{\"id\":\"d\",\"type\":\"message\"}\n";
        let mut file = std::io::Cursor::new(none.as_bytes());
        assert_eq!(
            latest_capsule_mark(&mut file, none.len() as u64, 4).unwrap(),
            None
        );
    }

    /// A read that fails while looking for the latest capsule fails the open with the cause.
    #[test]
    fn a_failed_read_looking_for_the_latest_capsule_is_an_error() {
        struct Unreadable;
        impl Read for Unreadable {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("the disk went away"))
            }
        }
        impl Seek for Unreadable {
            fn seek(&mut self, _: SeekFrom) -> std::io::Result<u64> {
                Ok(0)
            }
        }
        let err = latest_capsule_mark(&mut Unreadable, 100, 16).unwrap_err();
        assert_eq!(err.to_string(), "the disk went away");
    }

    /// A log never compacted: its whole history is the model input. The first budget is
    /// read from the index (entry types, call ids, counts), not from the entries: only the
    /// current turn's are parsed.
    #[test]
    fn the_first_budget_of_a_log_never_compacted_parses_only_the_current_turn() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = crate::session::testing::Builder::new();
        for i in 0..40 {
            b.user(&format!("question {i}"));
            b.call(
                &format!("c{i}"),
                "Bash",
                serde_json::json!({"command": "ls"}),
            );
            if i % 7 != 3 {
                b.result(&format!("c{i}"), "files");
            }
            b.assistant(&format!("answer {i}"));
        }
        let p = written_log(dir.path(), &b.session);
        let loaded = load_in_blocks(
            &p,
            Some(b.session.tokenizer()),
            true,
            Holding::ParsedWhenShort,
            512,
        )
        .unwrap();
        let s = &loaded.session;
        assert_eq!(s.parsed_entries(), 0);
        assert_eq!(s.tally(), b.session.tally());
        assert!(s.parsed_entries() <= 4, "{} parsed", s.parsed_entries());
    }

    /// Logs written before failed appends were cut back: a partial entry with the next
    /// (acknowledged) entry glued onto it. The glued entry and its children load.
    #[test]
    fn an_entry_glued_onto_a_partial_line_is_recovered() {
        let dir = tempfile::tempdir().unwrap();
        let d = serde_json::to_string(&msg("d", Some("b"), "four")).unwrap();
        let partial = r#"{"id":"c","parentId":"b","ts":"x","type":"message","role":"user","con"#;
        let p = log_with_damaged_middle(dir.path(), &format!("{partial}{d}"));
        // The original `d` and `e` lines now name parents `c` and `d`; drop the first `d`.
        let text = std::fs::read_to_string(&p).unwrap();
        let kept: Vec<&str> = text
            .lines()
            .enumerate()
            .filter(|(n, _)| *n != 4)
            .map(|(_, l)| l)
            .collect();
        std::fs::write(&p, kept.join("\n") + "\n").unwrap();
        let (s, report) = read_session(&p).unwrap();
        assert_eq!(report.skipped.len(), 1, "{report:?}");
        assert!(report.skipped[0].reason.contains("`d`"), "{report:?}");
        assert_eq!(branch_ids(&s), ["a", "b", "d", "e"]);
        assert!(report.reattached.is_empty(), "{report:?}");
    }

    #[test]
    fn ids_are_salvaged_only_from_an_intact_start() {
        assert_eq!(
            salvage_ids(br#"{"id":"c","parentId":"b","ts":"#),
            Some(("c".into(), Some("b".into())))
        );
        assert_eq!(
            salvage_ids(br#"{"id":"r","parentId":null,"t"#),
            Some(("r".into(), None))
        );
        assert_eq!(salvage_ids(br#"{"ts":"x","id":"c","parentId":"b"}"#), None);
        assert_eq!(salvage_ids(br#"{"id":"c","pa"#), None);
        assert_eq!(salvage_ids(b"garbage"), None);
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

    fn fault(written: usize) -> WriteFault {
        WriteFault {
            written,
            sync_fails: false,
            cut_fails: false,
        }
    }

    /// A full disk used to leave part of a line that the next append was glued onto: the
    /// entries acknowledged after it were lost on reload.
    #[test]
    fn a_failed_append_is_cut_back_and_later_entries_survive_reload() {
        let dir = tempfile::tempdir().unwrap();
        let (p, mut log) = two_entry_log(dir.path());
        let before = std::fs::read(&p).unwrap();
        log.inject_write_fault(fault(17));
        let err = log.append(msg("c", Some("b"), "three")).unwrap_err();
        assert!(matches!(err, LogError::WriteFailed { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("Nothing was saved") && text.contains("Free disk space"),
            "{text}"
        );
        assert_eq!(
            std::fs::read(&p).unwrap(),
            before,
            "the partial line is cut off"
        );
        assert_eq!(log.session().len(), 2);
        log.append(msg("c", Some("b"), "three")).unwrap();
        log.append(msg("d", Some("c"), "four")).unwrap();
        log.append(msg("e", Some("d"), "five")).unwrap();
        drop(log);
        let (s, report) = read_session(&p).unwrap();
        assert!(
            report.skipped.is_empty() && report.torn_tail.is_none(),
            "{report:?}"
        );
        assert_eq!(s.len(), 5);
        assert_eq!(s.leaf_id(), Some("e"));
    }

    #[test]
    fn a_failed_sync_is_not_acknowledged_and_is_cut_back() {
        let dir = tempfile::tempdir().unwrap();
        let (p, mut log) = two_entry_log(dir.path());
        let before = std::fs::read(&p).unwrap();
        log.inject_write_fault(WriteFault {
            sync_fails: true,
            ..fault(0)
        });
        let err = log
            .append_all(vec![
                msg("c", Some("b"), "three"),
                msg("d", Some("c"), "four"),
            ])
            .unwrap_err();
        assert!(matches!(err, LogError::WriteFailed { .. }), "{err}");
        assert_eq!(std::fs::read(&p).unwrap(), before);
        assert_eq!(log.session().leaf_id(), Some("b"));
    }

    #[test]
    fn writes_stop_when_a_partial_line_cannot_be_cut_off_and_reopening_repairs() {
        let dir = tempfile::tempdir().unwrap();
        let (p, mut log) = two_entry_log(dir.path());
        log.inject_write_fault(WriteFault {
            cut_fails: true,
            ..fault(9)
        });
        let err = log.append(msg("c", Some("b"), "three")).unwrap_err();
        assert!(matches!(err, LogError::WritesStopped { .. }), "{err}");
        let again = log.append(msg("c", Some("b"), "three")).unwrap_err();
        let text = again.to_string();
        assert!(matches!(again, LogError::WritesStopped { .. }), "{text}");
        assert!(
            text.contains("close the session and open it again"),
            "{text}"
        );
        drop(log);
        let (mut log, report) = SessionLog::open(&p, Durability::Fsync).unwrap();
        assert_eq!(
            report.torn_tail.as_ref().map(|t| t.bytes),
            Some(9),
            "{report:?}"
        );
        assert_eq!(log.session().leaf_id(), Some("b"));
        log.append(msg("c", Some("b"), "three")).unwrap();
        drop(log);
        let (s, report) = read_session(&p).unwrap();
        assert!(
            report.skipped.is_empty() && report.torn_tail.is_none(),
            "{report:?}"
        );
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn a_symbolic_link_to_a_locked_log_meets_the_same_lock() {
        let dir = tempfile::tempdir().unwrap();
        let (p, log) = two_entry_log(dir.path());
        let link = dir.path().join("other-name.jsonl");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        let err = SessionLog::open(&link, Durability::Fsync).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, LogError::Locked { .. }), "{text}");
        assert!(
            text.contains(&format!("pid {}", std::process::id())),
            "{text}"
        );
        let hard = dir.path().join("hard-link.jsonl");
        std::fs::hard_link(&p, &hard).unwrap();
        let err = SessionLog::open(&hard, Durability::Fsync).unwrap_err();
        assert!(matches!(err, LogError::Locked { .. }), "{err}");
        drop(log);
        assert!(SessionLog::open(&link, Durability::Fsync).is_ok());
    }

    #[test]
    fn a_symbolic_link_planted_at_the_lock_note_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let p = dir.path().join("s.jsonl");
        std::os::unix::fs::symlink(&victim, dir.path().join("s.jsonl.lock")).unwrap();
        let mut log = SessionLog::create(&p, header(), Durability::Fsync).unwrap();
        log.append(msg("a", None, "one")).unwrap();
        drop(log);
        let (log, _) = SessionLog::open(&p, Durability::Fsync).unwrap();
        assert_eq!(log.session().len(), 1);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn a_fifo_as_a_log_is_refused_without_hanging() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("s.jsonl");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_session(&fifo).unwrap_err().to_string();
        assert!(e.contains("named pipe (FIFO)"), "{e}");
        let e = SessionLog::open(&fifo, Durability::Fsync)
            .unwrap_err()
            .to_string();
        assert!(e.contains("named pipe (FIFO)"), "{e}");
    }

    #[test]
    fn logs_lock_notes_and_torn_side_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let dir = tempfile::tempdir().unwrap();
        let (p, log) = two_entry_log(dir.path());
        drop(log);
        assert_eq!(mode(&p), 0o600);
        assert_eq!(mode(&dir.path().join("s.jsonl.lock")), 0o600);
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(br#"{"id":"c","par"#).unwrap();
        drop(f);
        let (_, report) = SessionLog::open(&p, Durability::Fsync).unwrap();
        let side = report.torn_tail.unwrap().moved_to.unwrap();
        assert_eq!(mode(Path::new(&side)), 0o600);
    }

    #[test]
    fn a_log_is_not_created_in_a_missing_folder() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("missing/s.jsonl");
        let e = SessionLog::create(&p, header(), Durability::Fsync)
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not exist"), "{e}");
        assert!(!dir.path().join("missing").exists());
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

    // The token-count side file.

    fn counts_path(log: &Path) -> PathBuf {
        token_file::path_for(log)
    }

    /// Lines of the side file after its header.
    fn records(log: &Path) -> Vec<token_file::Record> {
        let bytes = std::fs::read(counts_path(log)).unwrap();
        bytes
            .split_inclusive(|&b| b == b'\n')
            .skip(1)
            .map(|l| token_file::decode_record(l).expect("a whole record"))
            .collect()
    }

    /// Rewrite entry `id`'s record with what `change` makes of its counts, checksums intact:
    /// an open that shows the changed counts took them from the file.
    fn rewrite_record(
        log: &Path,
        id: &str,
        change: impl Fn(crate::session::index::EntryCounts) -> crate::session::index::EntryCounts,
    ) {
        let bytes = std::fs::read(counts_path(log)).unwrap();
        let mut out = Vec::new();
        for (n, line) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
            match token_file::decode_record(line) {
                Some(r) if n > 0 && r.id == id => {
                    token_file::encode_record(&mut out, r.key, &r.id, &change(r.counts))
                }
                _ => out.extend_from_slice(line),
            }
        }
        std::fs::write(counts_path(log), out).unwrap();
    }

    /// Rewrite entry `id`'s record with a count no tokenizer gives it.
    fn forge(log: &Path, id: &str, tokens: u32) {
        rewrite_record(log, id, |c| crate::session::index::EntryCounts {
            tokens,
            ..c
        });
    }

    fn real_tokens(s: &Session, id: &str) -> u64 {
        crate::session::count::entry_tokens(s.tokenizer(), s.get(id).unwrap())
    }

    /// `a → b → c`, closed, its side file written by the appends.
    fn three_entry_log(dir: &Path) -> PathBuf {
        let (p, mut log) = two_entry_log(dir);
        log.append(msg("c", Some("b"), "three little words"))
            .unwrap();
        p
    }

    const FORGED: u32 = 987_654;

    #[test]
    fn appends_record_counts_and_an_open_reuses_them_without_counting() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        let side = counts_path(&p);
        assert_eq!(
            std::fs::metadata(&side).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let text = std::fs::read_to_string(&side).unwrap();
        assert!(
            text.starts_with(&token_file::header_line(TokenizerKind::O200kBase)),
            "{text}"
        );
        let ids: Vec<String> = records(&p).into_iter().map(|r| r.id).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        for reader in [
            read_session(&p).unwrap().0,
            SessionLog::open(&p, Durability::Flush).unwrap().0.session,
        ] {
            assert!((0..3).all(|i| reader.is_counted(i)), "taken from the file");
            assert_eq!(reader.tokens_of(2), real_tokens(&reader, "c"));
        }
        forge(&p, "b", FORGED);
        let (s, _) = read_session(&p).unwrap();
        assert_eq!(
            s.tokens_of(1),
            u64::from(FORGED),
            "the recorded count is used"
        );
    }

    /// Rewrite entry `id`'s derived counts (stand-in results, a setting's overhead).
    fn forge_derived(log: &Path, id: &str, derived: &[u32]) {
        rewrite_record(log, id, |c| crate::session::index::EntryCounts {
            derived: derived.into(),
            ..c
        });
    }

    /// A resumed session answers its first budget from the side file alone: what the view
    /// derives from entries (a call's stand-in result while it has none, a setting's system
    /// prompt and tools) is recorded too, so nothing is tokenized (in a fresh process that
    /// would load the tokenizer's tables for one call id).
    #[test]
    fn derived_counts_are_recorded_and_an_open_takes_them_without_counting() {
        let dir = tempfile::tempdir().unwrap();
        let (p, mut log) = two_entry_log(dir.path());
        let call = |id: &str| ContentBlock::ToolCall {
            id: id.into(),
            name: "Bash".into(),
            input: Box::new(serde_json::json!({"command": "ls"})),
            extra: Default::default(),
        };
        log.append(Entry::new(
            "calls",
            Some("b".into()),
            EntryBody::Message(MessageEntry {
                role: Role::Assistant,
                content: vec![call("call_1"), call("call_2")],
                usage: None,
                model: None,
                synthetic: false,
            }),
        ))
        .unwrap();
        log.append(Entry::new(
            "r1",
            Some("calls".into()),
            EntryBody::ToolResult(ToolResultEntry {
                call_id: "call_1".into(),
                tool_name: Some("Bash".into()),
                content: vec![ContentBlock::text("a.txt")],
                is_error: false,
                exit_code: Some(0),
            }),
        ))
        .unwrap();
        log.append(Entry::new(
            "set",
            Some("r1".into()),
            EntryBody::Setting(SettingEntry {
                system_prompt: Some("You are a careful coding agent.".into()),
                ..SettingEntry::default()
            }),
        ))
        .unwrap();
        let stand_in =
            crate::session::count::interrupted_result_tokens(TokenizerKind::O200kBase, "call_2");
        let system = TokenizerKind::O200kBase.count("You are a careful coding agent.");
        drop(log);
        let by_id: std::collections::HashMap<String, Box<[u32]>> = records(&p)
            .into_iter()
            .map(|r| (r.id, r.counts.derived))
            .collect();
        assert_eq!(by_id["calls"].len(), 2, "one stand-in per call");
        assert_eq!(u64::from(by_id["calls"][1]), stand_in);
        assert_eq!(by_id["set"][..], [system as u32, 0]);
        assert!(by_id["a"].is_empty() && by_id["r1"].is_empty());

        forge_derived(&p, "calls", &[1, FORGED]);
        forge_derived(&p, "set", &[FORGED, 7]);
        let (s, _) = read_session(&p).unwrap();
        let calls = s.index_of("calls").unwrap();
        assert_eq!(s.stand_in_tokens_at(calls, 1), u64::from(FORGED));
        assert_eq!(
            s.overhead_at(s.leaf()),
            (u64::from(FORGED), 0),
            "no tool schemas set"
        );
        let view = crate::session::view::ModelView::build(&s, s.leaf());
        let stand_ins: Vec<u64> = view
            .slots
            .iter()
            .filter(|slot| {
                matches!(
                    slot.item,
                    crate::session::view::ViewItem::InterruptedResult { .. }
                )
            })
            .map(|slot| crate::session::view::ModelView::slot_tokens(&s, slot))
            .collect();
        assert_eq!(
            stand_ins,
            [u64::from(FORGED)],
            "the budget takes the recorded stand-in"
        );

        // A record whose derived counts do not fit the entry is not taken: counted instead.
        forge_derived(&p, "calls", &[FORGED]);
        let (s, _) = read_session(&p).unwrap();
        assert_eq!(s.stand_in_tokens_at(calls, 1), stand_in);
    }

    /// A log written in one batch (an import) records the samples of as many newest reports
    /// as a budget reads: the count factor's and the unseen-growth allowance's, the larger.
    #[test]
    fn a_batch_records_the_samples_every_budget_allowance_reads() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        let mut log = SessionLog::create(&p, header(), Durability::Flush).unwrap();
        let mut entries = Vec::new();
        let mut parent: Option<String> = None;
        let reports = LEARN_GROWTH_FROM_REPORTS + 8;
        for n in 0..reports {
            let tail = format!("t{n}");
            entries.push(msg(&tail, parent.as_deref(), &"lorem ipsum ".repeat(40)));
            let id = format!("r{n}");
            entries.push(Entry::new(
                id.clone(),
                Some(tail),
                EntryBody::Message(MessageEntry {
                    role: Role::Assistant,
                    content: vec![ContentBlock::text("done")],
                    usage: Some(Usage {
                        input: 1_000 + 600 * n as u64,
                        output: 10,
                        ..Usage::default()
                    }),
                    model: None,
                    synthetic: false,
                }),
            ));
            parent = Some(id);
        }
        log.append_all(entries).unwrap();
        drop(log);
        let measured: Vec<bool> = records(&p)
            .into_iter()
            .filter(|r| r.id.starts_with('r'))
            .map(|r| r.counts.sample.is_some())
            .collect();
        assert_eq!(measured.len(), reports);
        let newest = LEARN_FROM_REPORTS.max(LEARN_GROWTH_FROM_REPORTS);
        assert!(
            measured[reports - newest..].iter().all(|&m| m),
            "{measured:?}"
        );
        assert!(
            measured[..reports - newest].iter().all(|&m| !m),
            "{measured:?}"
        );
    }

    /// The newest usage reports' count samples are recorded, so a resumed session learns its
    /// count factor without building a view per report; a recorded sample is what it uses.
    #[test]
    fn count_samples_are_recorded_and_an_open_takes_them() {
        let dir = tempfile::tempdir().unwrap();
        let (p, mut log) = two_entry_log(dir.path());
        let reply = |id: &str, parent: &str, input: u64| {
            Entry::new(
                id,
                Some(parent.into()),
                EntryBody::Message(MessageEntry {
                    role: Role::Assistant,
                    content: vec![ContentBlock::text("done")],
                    usage: Some(Usage {
                        input,
                        output: 10,
                        ..Usage::default()
                    }),
                    model: None,
                    synthetic: false,
                }),
            )
        };
        log.append(reply("r1", "b", 5_000)).unwrap();
        log.append(msg("t", Some("r1"), &"lorem ipsum ".repeat(200)))
            .unwrap();
        log.append(reply("r2", "t", 5_600)).unwrap();
        let measured = log
            .session()
            .count_sample(log.session().index_of("r2").unwrap());
        assert!(measured.is_some(), "r2 measures the tail after r1");
        drop(log);
        let by_id: std::collections::HashMap<String, Option<Option<CountSample>>> = records(&p)
            .into_iter()
            .map(|r| (r.id, r.counts.sample))
            .collect();
        assert_eq!(by_id["r2"], Some(measured));
        assert_eq!(by_id["r1"], Some(None), "the first report teaches nothing");
        assert_eq!(by_id["t"], None, "no usage, no sample");

        let forged = CountSample {
            provider: 999,
            counted: 500,
        };
        rewrite_record(&p, "r2", |c| crate::session::index::EntryCounts {
            sample: Some(Some(forged)),
            ..c
        });
        let (s, _) = read_session(&p).unwrap();
        assert_eq!(s.count_sample(s.index_of("r2").unwrap()), Some(forged));
        // Another view policy measures other samples: the recorded ones are not used.
        let (mut s, _) = read_session(&p).unwrap();
        s.set_foreign_compactions(crate::session::foreign::ForeignCompactions::WholeHistory);
        assert_eq!(s.count_sample(s.index_of("r2").unwrap()), measured);
    }

    #[test]
    fn a_missing_side_file_is_counted_and_written_again() {
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        std::fs::remove_file(counts_path(&p)).unwrap();
        let (s, _) = read_session(&p).unwrap();
        assert!(!s.is_counted(0));
        assert!(!counts_path(&p).exists(), "a reader never writes it");
        let (mut log, _) = SessionLog::open(&p, Durability::Flush).unwrap();
        log.save_token_counts();
        assert_eq!(records(&p).len(), 3);
        log.append(msg("d", Some("c"), "four")).unwrap();
        drop(log);
        let (s, _) = read_session(&p).unwrap();
        assert!((0..4).all(|i| s.is_counted(i)));
        assert_eq!(s.tokens_of(3), real_tokens(&s, "d"));
    }

    #[test]
    fn counts_of_another_tokenizer_are_not_used_and_the_file_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        forge(&p, "b", FORGED);
        let side = counts_path(&p);
        let text = std::fs::read_to_string(&side).unwrap();
        std::fs::write(&side, text.replacen("o200k_base", "cl100k_base", 1)).unwrap();
        let (mut log, _) = SessionLog::open(&p, Durability::Flush).unwrap();
        assert_eq!(log.session().tokenizer(), TokenizerKind::O200kBase);
        assert_eq!(log.session().tokens_of(1), real_tokens(log.session(), "b"));
        log.save_token_counts();
        drop(log);
        let text = std::fs::read_to_string(&side).unwrap();
        assert!(
            text.starts_with(&token_file::header_line(TokenizerKind::O200kBase)),
            "{text}"
        );
        assert!(records(&p).iter().all(|r| r.counts.tokens != FORGED));
    }

    /// A log is loaded with its header's tokenizer and then set to the configured one: counts
    /// recorded with the configured one are used, and the file is not rewritten.
    #[test]
    fn counts_recorded_with_the_configured_tokenizer_survive_the_switch_after_loading() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        let mut log = SessionLog::create(&p, header(), Durability::Flush).unwrap();
        log.session_mut().set_tokenizer(TokenizerKind::Cl100kBase);
        log.append(msg("a", None, "one")).unwrap();
        log.append(msg("b", Some("a"), "two")).unwrap();
        drop(log);
        forge(&p, "b", FORGED);
        let before = std::fs::read(counts_path(&p)).unwrap();
        let (mut log, _) = SessionLog::open(&p, Durability::Flush).unwrap();
        assert_eq!(log.session().tokenizer(), TokenizerKind::O200kBase);
        assert!(!log.session().is_counted(1));
        log.session_mut().set_tokenizer(TokenizerKind::Cl100kBase);
        assert_eq!(log.session().tokens_of(1), u64::from(FORGED));
        log.save_token_counts();
        assert_eq!(std::fs::read(counts_path(&p)).unwrap(), before);
    }

    #[test]
    fn other_counting_rules_are_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        forge(&p, "b", FORGED);
        let side = counts_path(&p);
        let text = std::fs::read_to_string(&side).unwrap();
        std::fs::write(
            &side,
            text.replacen(
                &format!("soba-token-counts {} 1 ", token_file::FORMAT_VERSION),
                &format!("soba-token-counts {} 0 ", token_file::FORMAT_VERSION),
                1,
            ),
        )
        .unwrap();
        let (s, _) = read_session(&p).unwrap();
        assert_eq!(s.tokens_of(1), real_tokens(&s, "b"));
    }

    #[test]
    fn a_damaged_record_is_recounted_and_the_others_are_used() {
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        forge(&p, "a", FORGED);
        forge(&p, "c", FORGED);
        // A changed digit in `b`'s count: its record's checksum no longer holds.
        let side = counts_path(&p);
        let mut bytes = std::fs::read(&side).unwrap();
        let b = records(&p)[1].clone();
        let line_start = bytes
            .split_inclusive(|&x| x == b'\n')
            .take(2)
            .map(<[u8]>::len)
            .sum::<usize>();
        let fields = format!("{} {} {:08x} ", b.key.offset, b.key.len, b.key.crc);
        let at = line_start + fields.len();
        bytes[at] = if bytes[at] == b'9' { b'1' } else { b'9' };
        std::fs::write(&side, &bytes).unwrap();
        let (mut log, _) = SessionLog::open(&p, Durability::Flush).unwrap();
        let s = log.session();
        assert_eq!(s.tokens_of(0), u64::from(FORGED));
        assert_eq!(s.tokens_of(1), real_tokens(s, "b"), "recounted");
        assert_eq!(s.tokens_of(2), u64::from(FORGED));
        log.save_token_counts();
        drop(log);
        let r = records(&p);
        assert_eq!(r.len(), 3, "rebuilt whole");
        assert_eq!(
            u64::from(r[1].counts.tokens),
            real_tokens(&read_session(&p).unwrap().0, "b")
        );
    }

    #[test]
    fn a_truncated_side_file_serves_its_whole_records_and_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        forge(&p, "a", FORGED);
        let side = counts_path(&p);
        let bytes = std::fs::read(&side).unwrap();
        std::fs::write(&side, &bytes[..bytes.len() - 10]).unwrap();
        let (mut log, _) = SessionLog::open(&p, Durability::Flush).unwrap();
        assert_eq!(log.session().tokens_of(0), u64::from(FORGED));
        assert!(!log.session().is_counted(2), "the torn record is not used");
        log.append(msg("d", Some("c"), "four")).unwrap();
        drop(log);
        let ids: Vec<String> = records(&p).into_iter().map(|r| r.id).collect();
        assert_eq!(
            ids,
            ["a", "b", "c", "d"],
            "rebuilt, not glued onto the torn record"
        );
        // A side file cut at a record boundary is only short: records are appended to it.
        let bytes = std::fs::read(&side).unwrap();
        let last = bytes[..bytes.len() - 1]
            .iter()
            .rposition(|&b| b == b'\n')
            .unwrap();
        std::fs::write(&side, &bytes[..=last]).unwrap();
        let (mut log, _) = SessionLog::open(&p, Durability::Flush).unwrap();
        assert!(!log.session().is_counted(3));
        log.save_token_counts();
        drop(log);
        assert_eq!(std::fs::read(&side).unwrap(), bytes);
    }

    #[test]
    fn an_entry_rewritten_in_the_log_is_recounted() {
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        forge(&p, "b", FORGED);
        forge(&p, "c", FORGED);
        // Same id, same length, other text: only the line's checksum tells.
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(&p, text.replace("\"two\"", "\"TWO\"")).unwrap();
        let (s, _) = read_session(&p).unwrap();
        assert_eq!(s.tokens_of(1), real_tokens(&s, "b"));
        assert_eq!(
            s.tokens_of(2),
            u64::from(FORGED),
            "the lines after it are unchanged"
        );
    }

    /// The log cut back (restored from a copy, say) and written on: other entries now lie
    /// where recorded ones did.
    #[test]
    fn a_log_cut_back_and_written_again_is_recounted() {
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        let records_before = records(&p);
        forge(&p, "b", FORGED);
        forge(&p, "c", FORGED);
        let saved = std::fs::read(counts_path(&p)).unwrap();
        let cut = records_before[1].key.offset;
        OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(cut)
            .unwrap();
        let (mut log, _) = SessionLog::open(&p, Durability::Flush).unwrap();
        log.append(msg("x", Some("a"), "another second entry, longer"))
            .unwrap();
        log.append(msg("c", Some("x"), "three little words"))
            .unwrap();
        drop(log);
        // Put back the old records, as if the cut had come after they were written.
        std::fs::write(counts_path(&p), &saved).unwrap();
        let (s, _) = read_session(&p).unwrap();
        assert_eq!(s.tokens_of(1), real_tokens(&s, "x"));
        assert_eq!(
            s.tokens_of(2),
            real_tokens(&s, "c"),
            "same id, other offset"
        );
        let (mut log, _) = SessionLog::open(&p, Durability::Flush).unwrap();
        log.save_token_counts();
        drop(log);
        let ids: Vec<String> = records(&p).into_iter().map(|r| r.id).collect();
        assert_eq!(ids, ["a", "x", "c"]);
    }

    /// A reader opening the log while the writer appends never takes a count that is not
    /// the entry's, whatever part of the log and side file it sees.
    #[test]
    fn readers_during_appends_take_only_matching_counts() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        let mut log = SessionLog::create(&p, header(), Durability::Flush).unwrap();
        log.append(msg("e0", None, "start")).unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            let reader = scope.spawn(|| {
                let mut opens = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) || opens < 3 {
                    let (s, _) = read_session(&p).unwrap();
                    for (i, e) in s.entries().iter().enumerate() {
                        assert_eq!(
                            s.tokens_of(i),
                            crate::session::count::entry_tokens(s.tokenizer(), e),
                            "entry {}",
                            e.id
                        );
                    }
                    opens += 1;
                }
                opens
            });
            for n in 1..300 {
                let text = "word ".repeat(n % 37);
                log.append(msg(&format!("e{n}"), Some(&format!("e{}", n - 1)), &text))
                    .unwrap();
                if n % 100 == 0 {
                    // A rebuild (a changed tokenizer) renames a new file into place.
                    let kind = if n % 200 == 0 {
                        TokenizerKind::O200kBase
                    } else {
                        TokenizerKind::Cl100kBase
                    };
                    log.session_mut().set_tokenizer(kind);
                    log.save_token_counts();
                }
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            assert!(reader.join().unwrap() >= 3);
        });
        drop(log);
        let (s, _) = read_session(&p).unwrap();
        assert!((0..s.len()).all(|i| s.is_counted(i)), "the file ends whole");
    }

    /// A first open of a long log counts on several threads: every entry gets its own count,
    /// and the rebuilt side file records exactly those.
    #[test]
    fn counting_a_long_log_on_several_threads_gives_each_entry_its_count() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        let mut log = SessionLog::create(&p, header(), Durability::Flush).unwrap();
        let entries: Vec<Entry> = (0..3 * crate::session::index::PARALLEL_COUNT_MIN)
            .map(|n| {
                let parent = n.checked_sub(1).map(|p| format!("e{p}"));
                msg(&format!("e{n}"), parent.as_deref(), &"word ".repeat(n % 50))
            })
            .collect();
        log.append_all(entries).unwrap();
        drop(log);
        std::fs::remove_file(counts_path(&p)).unwrap();
        let (mut log, _) = SessionLog::open(&p, Durability::Flush).unwrap();
        assert!(!log.session().is_counted(0));
        log.session().count_all();
        assert!((0..log.session().len()).all(|i| log.session().is_counted(i)));
        log.save_token_counts();
        let s = log.session();
        let recorded = records(&p);
        assert_eq!(recorded.len(), s.len());
        for (i, (e, r)) in s.entries().iter().zip(&recorded).enumerate() {
            let expected = crate::session::count::entry_tokens(s.tokenizer(), e);
            assert_eq!(s.tokens_of(i), expected, "entry {}", e.id);
            assert_eq!(
                (r.id.as_str(), u64::from(r.counts.tokens)),
                (e.id.as_str(), expected)
            );
        }
    }

    #[test]
    fn a_side_file_that_cannot_be_written_never_fails_an_append() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.jsonl");
        std::fs::create_dir(dir.path().join("s.jsonl.tokens")).unwrap();
        std::fs::write(dir.path().join("s.jsonl.tokens/keep"), "x").unwrap();
        let mut log = SessionLog::create(&p, header(), Durability::Flush).unwrap();
        log.append(msg("a", None, "one")).unwrap();
        log.append(msg("b", Some("a"), "two")).unwrap();
        drop(log);
        let (s, report) = read_session(&p).unwrap();
        assert!(report.is_clean());
        assert_eq!(s.len(), 2);
        assert!(!s.is_counted(0));
        assert!(dir.path().join("s.jsonl.tokens/keep").exists());
    }

    #[test]
    fn a_link_planted_at_the_side_file_is_replaced_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let p = dir.path().join("s.jsonl");
        let mut log = SessionLog::create(&p, header(), Durability::Flush).unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("s.jsonl.tokens")).unwrap();
        log.append(msg("a", None, "one")).unwrap();
        log.append(msg("b", Some("a"), "two")).unwrap();
        drop(log);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(records(&p).len(), 2);
    }

    /// What a budget of a short log does: every entry counted.
    fn count_every_entry(s: &Session) {
        (0..s.len()).for_each(|i| {
            s.tokens_of(i);
        });
    }

    /// A reader that had to count a log records the counts a writer would have: the same
    /// bytes, and the next reader takes every count from them and records nothing.
    #[test]
    fn a_budget_reader_records_what_the_writer_would_and_the_next_reader_counts_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        let writers = std::fs::read(counts_path(&p)).unwrap();
        std::fs::remove_file(counts_path(&p)).unwrap();
        let (s, report, side) = read_session_for_budget(&p).unwrap();
        assert!(!s.is_counted(0));
        assert_eq!(
            side.record_new_counts(&s, &report).unwrap(),
            Recorded::NothingNew
        );
        assert!(
            !counts_path(&p).exists(),
            "nothing counted, nothing recorded"
        );
        count_every_entry(&s);
        assert_eq!(
            side.record_new_counts(&s, &report).unwrap(),
            Recorded::Written
        );
        assert_eq!(std::fs::read(counts_path(&p)).unwrap(), writers);
        let (s, report, side) = read_session_for_budget(&p).unwrap();
        assert!((0..3).all(|i| s.is_counted(i)), "every count read");
        count_every_entry(&s);
        assert_eq!(
            side.record_new_counts(&s, &report).unwrap(),
            Recorded::NothingNew
        );
        assert_eq!(std::fs::read(counts_path(&p)).unwrap(), writers);
    }

    /// Only what the reader counted is recorded (a budget counts the model input, not the
    /// history before a capsule); the next reader takes it and counts the rest itself.
    #[test]
    fn a_budget_reader_records_only_what_it_counted() {
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        std::fs::remove_file(counts_path(&p)).unwrap();
        let (s, report, side) = read_session_for_budget(&p).unwrap();
        let last = s.tokens_of(2);
        assert_eq!(
            side.record_new_counts(&s, &report).unwrap(),
            Recorded::Written
        );
        assert!(!s.is_counted(0), "nothing counted for the record");
        let recorded = records(&p);
        assert_eq!(recorded.len(), 1);
        assert_eq!(
            (
                recorded[0].id.as_str(),
                u64::from(recorded[0].counts.tokens)
            ),
            ("c", last)
        );
        let (s, report, side) = read_session_for_budget(&p).unwrap();
        assert!(s.is_counted(2) && !s.is_counted(0) && !s.is_counted(1));
        assert_eq!(s.tokens_of(2), last);
        assert_eq!(s.tokens_of(0), real_tokens(&s, "a"));
        assert_eq!(
            side.record_new_counts(&s, &report).unwrap(),
            Recorded::Written
        );
        assert_eq!(records(&p).len(), 2);
        // A writer opening the log records every entry, taking what is recorded.
        let (mut log, _) = SessionLog::open(&p, Durability::Flush).unwrap();
        log.save_token_counts();
        drop(log);
        assert_eq!(records(&p).len(), 3);
    }

    #[test]
    fn a_budget_reader_replaces_a_stale_side_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        forge(&p, "b", FORGED);
        let side_path = counts_path(&p);
        let text = std::fs::read_to_string(&side_path).unwrap();
        std::fs::write(&side_path, text.replacen("o200k_base", "cl100k_base", 1)).unwrap();
        let (s, report, side) = read_session_for_budget(&p).unwrap();
        count_every_entry(&s);
        assert_eq!(
            side.record_new_counts(&s, &report).unwrap(),
            Recorded::Written
        );
        let (s, _, _) = read_session_for_budget(&p).unwrap();
        assert!((0..3).all(|i| s.is_counted(i)));
        assert!(records(&p).iter().all(|r| r.counts.tokens != FORGED));
        assert_eq!(s.tokens_of(1), real_tokens(&s, "b"));
    }

    /// A side file a writer keeps (one whole record per entry, in order) is its own to
    /// extend: a reader that counted an entry it lacks leaves it as it is.
    #[test]
    fn a_budget_reader_never_replaces_a_side_file_a_writer_keeps() {
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        let writers = std::fs::read(counts_path(&p)).unwrap();
        // An entry whose record the writer has not written yet.
        let line = serde_json::to_string(&msg("d", Some("c"), "four")).unwrap();
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        writeln!(f, "{line}").unwrap();
        drop(f);
        let (s, report, side) = read_session_for_budget(&p).unwrap();
        assert!(report.is_clean() && s.is_counted(2) && !s.is_counted(3));
        count_every_entry(&s);
        assert_eq!(
            side.record_new_counts(&s, &report).unwrap(),
            Recorded::Skipped
        );
        assert_eq!(std::fs::read(counts_path(&p)).unwrap(), writers);
    }

    /// A side file another process created after the reader loaded the log (a writer that
    /// opened the session meanwhile) is left as it is.
    #[test]
    fn a_budget_reader_never_replaces_a_side_file_created_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        std::fs::remove_file(counts_path(&p)).unwrap();
        let (s, report, side) = read_session_for_budget(&p).unwrap();
        count_every_entry(&s);
        std::fs::write(counts_path(&p), "a writer's").unwrap();
        assert_eq!(
            side.record_new_counts(&s, &report).unwrap(),
            Recorded::Skipped
        );
        assert_eq!(
            std::fs::read_to_string(counts_path(&p)).unwrap(),
            "a writer's"
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    /// An entry pushed after the load has no line in the file to key its record by.
    #[test]
    fn a_budget_reader_records_nothing_once_entries_joined_after_the_load() {
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        std::fs::remove_file(counts_path(&p)).unwrap();
        let (mut s, report, side) = read_session_for_budget(&p).unwrap();
        s.push(msg("d", Some("c"), "four")).unwrap();
        count_every_entry(&s);
        assert_eq!(
            side.record_new_counts(&s, &report).unwrap(),
            Recorded::Skipped
        );
        assert!(!counts_path(&p).exists());
    }

    /// Nothing is recorded for a log with damaged lines (a writer's open repairs what it can
    /// and records then).
    #[test]
    fn a_budget_reader_records_nothing_for_a_damaged_log() {
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        std::fs::remove_file(counts_path(&p)).unwrap();
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{not an entry}\n").unwrap();
        drop(f);
        let (s, report, side) = read_session_for_budget(&p).unwrap();
        assert!(!report.is_clean());
        count_every_entry(&s);
        assert_eq!(
            side.record_new_counts(&s, &report).unwrap(),
            Recorded::Skipped
        );
        assert!(!counts_path(&p).exists());
    }

    #[test]
    fn a_side_file_a_budget_reader_cannot_write_is_an_error_the_log_survives() {
        let dir = tempfile::tempdir().unwrap();
        let p = three_entry_log(dir.path());
        let log_bytes = std::fs::read(&p).unwrap();
        std::fs::remove_file(counts_path(&p)).unwrap();
        std::fs::create_dir(counts_path(&p)).unwrap();
        std::fs::write(counts_path(&p).join("keep"), "x").unwrap();
        let (s, report, side) = read_session_for_budget(&p).unwrap();
        count_every_entry(&s);
        assert!(side.record_new_counts(&s, &report).is_err());
        assert!(counts_path(&p).join("keep").exists());
        assert_eq!(std::fs::read(&p).unwrap(), log_bytes);
    }
}
