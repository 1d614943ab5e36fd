//! The token-count side file `<log>.tokens`: each entry's counts, so that opening a session
//! does not tokenize its whole history again.
//!
//! Counting every entry exactly is most of the cost of a first budget after an open (tens of
//! milliseconds for a 1 MB log, seconds for 100 MB). The writer of a log records what it
//! counted in a side file beside the log; an open takes the counts it finds there and counts
//! only the rest.
//!
//! The file is a cache, never the truth: a count is taken only when its record names the
//! same tokenizer and counting rules, the same entry id, and a line of the log at the same
//! offset with the same length and CRC-32; each record carries a CRC-32 of its own bytes, so
//! a damaged digit cannot pass for a count. Anything else (a missing, foreign, truncated or
//! damaged file, a log rewritten or cut back, a changed tokenizer) costs a recount and a
//! rewrite, never an error.
//!
//! Format, one line each: a header `soba-token-counts <format> <rules> <tokenizer>`, then one
//! record per entry in log order:
//! `<offset> <length> <crc> <tokens> <derived|-> <sample> <id as a JSON string> <record crc>`,
//! where `derived` lists the entry's derived counts separated by commas (a setting's system
//! prompt and tool schemas, a tool-calling message's stand-in result per call, a source
//! agent's compaction's summary: see [`EntryCounts::derived`]), and `sample` is a usage
//! report's count sample (`<provider>:<counted>`; `n` when it teaches nothing; `-` when not
//! measured), so that an open neither counts nor builds a view per report.
//! Records are appended as entries are appended (one `write`, no sync: a lost record is
//! counted again); a rebuild writes a fresh file and renames it into place, so a reader sees
//! the old file or the new one, whole.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::index::EntryCounts;
use crate::budget::CountSample;
use crate::tokens::{TokenizerKind, COUNT_RULES_VERSION};

const MAGIC: &str = "soba-token-counts";
/// The layout of the file; a file of another layout is rebuilt. 2: every derived count and
/// usage reports' count samples recorded (1 recorded a setting's counts only).
pub const FORMAT_VERSION: u32 = 2;

/// Where one entry's line lies in the log, and what it holds: what a record must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineKey {
    pub offset: u64,
    /// Bytes of the line without its line ending (a line of 4 GiB or more, which no log
    /// holds, keys as `u32::MAX`). Narrow: a writer keeps one key per entry.
    pub len: u32,
    pub crc: u32,
}

impl LineKey {
    /// The key of the line starting at `offset` whose text (line ending removed) is `text`.
    pub fn of(offset: u64, text: &[u8]) -> LineKey {
        LineKey {
            offset,
            len: u32::try_from(text.len()).unwrap_or(u32::MAX),
            crc: crc32fast::hash(text),
        }
    }
}

/// One entry's recorded counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub key: LineKey,
    pub id: String,
    pub counts: EntryCounts,
}

/// The side file of the log at `log`, beside its real path (links resolved), so that every
/// path to one log names one side file.
pub fn path_for(log: &Path) -> PathBuf {
    let real = std::fs::canonicalize(log).unwrap_or_else(|_| log.to_path_buf());
    let mut p = real.into_os_string();
    p.push(".tokens");
    PathBuf::from(p)
}

pub fn header_line(tokenizer: TokenizerKind) -> String {
    format!(
        "{MAGIC} {FORMAT_VERSION} {COUNT_RULES_VERSION} {}\n",
        tokenizer.as_str()
    )
}

/// The tokenizer a header line names, when the file's layout and counting rules are this
/// build's.
pub fn parse_header(line: &[u8]) -> Option<TokenizerKind> {
    let text = std::str::from_utf8(line.strip_suffix(b"\n")?).ok()?;
    let mut fields = text.split(' ');
    if fields.next()? != MAGIC
        || fields.next()?.parse::<u32>().ok()? != FORMAT_VERSION
        || fields.next()?.parse::<u32>().ok()? != COUNT_RULES_VERSION
    {
        return None;
    }
    let tokenizer = match fields.next()? {
        "o200k_base" => TokenizerKind::O200kBase,
        "cl100k_base" => TokenizerKind::Cl100kBase,
        _ => return None,
    };
    fields.next().is_none().then_some(tokenizer)
}

/// Append the record line of one entry to `out`.
pub fn encode_record(out: &mut Vec<u8>, key: LineKey, id: &str, counts: &EntryCounts) {
    use std::io::Write as _;
    let start = out.len();
    let _ = write!(
        out,
        "{} {} {:08x} {} ",
        key.offset, key.len, key.crc, counts.tokens
    );
    match counts.derived.split_first() {
        None => out.push(b'-'),
        Some((first, rest)) => {
            let _ = write!(out, "{first}");
            for n in rest {
                let _ = write!(out, ",{n}");
            }
        }
    }
    match counts.sample {
        None => out.extend_from_slice(b" - "),
        Some(None) => out.extend_from_slice(b" n "),
        Some(Some(s)) => {
            let _ = write!(out, " {}:{} ", s.provider, s.counted);
        }
    }
    serde_json::to_writer(&mut *out, id).expect("a string serializes");
    let crc = crc32fast::hash(&out[start..]);
    let _ = writeln!(out, " {crc:08x}");
}

/// The record a line holds (with its newline), or `None` when it is damaged or torn.
pub fn decode_record(line: &[u8]) -> Option<Record> {
    let text = line.strip_suffix(b"\n")?;
    let split = memchr::memrchr(b' ', text)?;
    let (body, crc) = (&text[..split], &text[split + 1..]);
    if crc.len() != 8
        || u32::from_str_radix(std::str::from_utf8(crc).ok()?, 16).ok()? != crc32fast::hash(body)
    {
        return None;
    }
    let body = std::str::from_utf8(body).ok()?;
    let mut fields = body.splitn(7, ' ');
    let offset = fields.next()?.parse().ok()?;
    let len = fields.next()?.parse().ok()?;
    let line_crc = fields.next()?;
    if line_crc.len() != 8 {
        return None;
    }
    let line_crc = u32::from_str_radix(line_crc, 16).ok()?;
    let tokens = fields.next()?.parse().ok()?;
    let derived = match fields.next()? {
        "-" => Box::default(),
        list => list
            .split(',')
            .map(|n| n.parse().ok())
            .collect::<Option<Box<[u32]>>>()?,
    };
    let sample = match fields.next()? {
        "-" => None,
        "n" => Some(None),
        pair => {
            let (provider, counted) = pair.split_once(':')?;
            Some(Some(CountSample {
                provider: provider.parse().ok()?,
                counted: counted.parse().ok()?,
            }))
        }
    };
    let id_json = fields.next()?;
    let id = match id_json.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(plain) if !plain.contains(['\\', '"']) => plain.to_string(),
        _ => serde_json::from_str(id_json).ok()?,
    };
    Some(Record {
        key: LineKey {
            offset,
            len,
            crc: line_crc,
        },
        id,
        counts: EntryCounts {
            tokens,
            derived,
            sample,
        },
    })
}

/// Reads a side file alongside the log's load, in log order.
pub struct Reader {
    lines: BufReader<File>,
    tokenizer: TokenizerKind,
    next: Option<Record>,
    line: Vec<u8>,
    /// Every record so far was whole and matched the entry at its offset.
    clean: bool,
    done: bool,
}

impl Reader {
    /// The side file at `path`, when there is one with a header this build can use. A file
    /// that is not there, not a regular file or a link is no side file.
    pub fn open(path: &Path) -> Option<Reader> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .ok()?;
        if !file.metadata().ok()?.is_file() {
            return None;
        }
        let mut lines = BufReader::with_capacity(1 << 16, file);
        let mut header = Vec::new();
        lines.read_until(b'\n', &mut header).ok()?;
        let tokenizer = parse_header(&header)?;
        Some(Reader {
            lines,
            tokenizer,
            next: None,
            line: Vec::new(),
            clean: true,
            done: false,
        })
    }

    /// The tokenizer the recorded counts were made with.
    pub fn tokenizer(&self) -> TokenizerKind {
        self.tokenizer
    }

    /// The next whole record; damaged lines are passed over (and make the file unclean).
    fn peek(&mut self) -> Option<&Record> {
        while self.next.is_none() && !self.done {
            self.line.clear();
            match self.lines.read_until(b'\n', &mut self.line) {
                Ok(0) | Err(_) => self.done = true,
                Ok(_) => match decode_record(&self.line) {
                    Some(r) => self.next = Some(r),
                    None => self.clean = false,
                },
            }
        }
        self.next.as_ref()
    }

    /// The recorded counts of the entry `id` loaded from the line `key`, if a record matches
    /// it exactly. Lines must be asked for in the order of the log.
    pub fn counts_for(&mut self, key: LineKey, id: &str) -> Option<EntryCounts> {
        loop {
            let record = self.peek()?;
            if record.key.offset < key.offset {
                // A line that no longer holds an entry (damaged since, or cut off).
                self.next = None;
                self.clean = false;
                continue;
            }
            if record.key.offset > key.offset {
                self.clean = false;
                return None;
            }
            let record = self.next.take()?;
            if record.key == key && record.id == id {
                return Some(record.counts);
            }
            self.clean = false;
            return None;
        }
    }

    /// Whether the file is exactly one matching record per entry asked for, so that new
    /// records can be appended to it rather than the file rebuilt.
    pub fn finish(mut self) -> bool {
        self.peek().is_none() && self.clean
    }
}

/// Open the side file to append to it; it must already be a regular file (no link).
pub fn open_append(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| crate::files::symlink_refused(path, e))?;
    if !file.metadata()?.is_file() {
        return Err(crate::files::not_regular(path, "not a regular file"));
    }
    Ok(file)
}

/// Replace the side file with `bytes` (mode `0600`): written beside it, then renamed into
/// place, so no reader sees half of it. Returns the new file, open for appending.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<File> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    // Left behind by a write of this process id that was interrupted.
    let _ = std::fs::remove_file(&tmp);
    let written = crate::files::create_private(&tmp, true)
        .and_then(|mut f| f.write_all(bytes).map(|()| f))
        .and_then(|f| std::fs::rename(&tmp, path).map(|()| f));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Create the side file with `bytes` (mode `0600`) only if there is none: written beside it,
/// then linked into place, which fails rather than replace a file another process created
/// meanwhile. `false` when there was one.
pub fn create_new(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    // Left behind by a write of this process id that was interrupted.
    let _ = std::fs::remove_file(&tmp);
    let linked = crate::files::create_private(&tmp, true)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(tokens: u32, derived: &[u32]) -> EntryCounts {
        EntryCounts {
            tokens,
            derived: derived.into(),
            sample: None,
        }
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let key = LineKey::of(1234, br#"{"id":"a b"}"#);
        for (id, c) in [
            ("e1", counts(17, &[])),
            ("with space \"quoted\"\ttab\n", counts(0, &[120, 3400])),
            ("call", counts(52, &[9])),
            ("three calls", counts(80, &[9, 11, 0])),
            (
                "report",
                EntryCounts {
                    sample: Some(Some(CountSample {
                        provider: 1234,
                        counted: 1000,
                    })),
                    ..counts(30, &[])
                },
            ),
            (
                "report teaching nothing",
                EntryCounts {
                    sample: Some(None),
                    ..counts(30, &[])
                },
            ),
        ] {
            let mut line = Vec::new();
            encode_record(&mut line, key, id, &c);
            assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
            let r = decode_record(&line).expect("whole record");
            assert_eq!((r.key, r.id.as_str(), r.counts), (key, id, c));
        }
    }

    #[test]
    fn a_changed_byte_anywhere_in_a_record_is_refused() {
        let mut line = Vec::new();
        encode_record(
            &mut line,
            LineKey::of(9, b"xyz"),
            "e1",
            &counts(42, &[7, 8]),
        );
        for at in 0..line.len() - 1 {
            let mut bad = line.clone();
            bad[at] = if bad[at] == b'4' { b'5' } else { b'4' };
            if bad != line {
                assert_eq!(decode_record(&bad), None, "byte {at} changed");
            }
        }
        assert_eq!(decode_record(&line[..line.len() - 1]), None, "torn");
    }

    #[test]
    fn headers_of_other_layouts_rules_or_tokenizers_are_refused() {
        assert_eq!(
            parse_header(header_line(TokenizerKind::Cl100kBase).as_bytes()),
            Some(TokenizerKind::Cl100kBase)
        );
        let other_rules = format!(
            "{MAGIC} {FORMAT_VERSION} {} o200k_base\n",
            COUNT_RULES_VERSION + 1
        );
        let other_format = format!(
            "{MAGIC} {} {COUNT_RULES_VERSION} o200k_base\n",
            FORMAT_VERSION + 1
        );
        for bad in [
            other_rules.as_str(),
            other_format.as_str(),
            "soba-token-counts 1 1 p50k_base\n",
            "soba-token-counts 1 1 o200k_base",
            "",
            "garbage\n",
        ] {
            assert_eq!(parse_header(bad.as_bytes()), None, "{bad:?}");
        }
    }
}
