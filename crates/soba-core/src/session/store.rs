//! Entries as a session holds them: a log's entries are held as the bytes of their lines and
//! parsed when first read.
//!
//! A session reads its history rarely and its tail often: the model input is the newest
//! capsule and what follows it. An entry held parsed costs about two and a half times its line
//! (its id, time, every text and content block is an allocation of its own), so a long log
//! held parsed took three times its size in memory to open. Lines are read in blocks of about
//! 4 MiB; an entry is parsed on first read and then kept parsed, and a block is freed once
//! every entry in it has been parsed. Entries appended in this process are held parsed.

use std::ops::Index;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use once_cell::race::OnceBox;

use super::entry::Entry;

/// Where an entry not parsed yet lies: `len` bytes at `start` in the block it was read in
/// (the block is found from the entry's index: blocks hold consecutive entries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    len: u32,
}

impl Span {
    /// The span of an entry that was never held as bytes.
    const NONE: Span = Span { start: 0, len: 0 };

    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..(self.start as usize + self.len as usize)
    }
}

/// Whole lines of the log, as read.
struct Block {
    /// `None` once no entry needs them. Shared with the reader while it reads the block, so
    /// that each entry can be held as bytes as soon as it has been indexed.
    bytes: Mutex<Option<Arc<Vec<u8>>>>,
    /// Entries held here and not parsed yet.
    unparsed: AtomicU32,
    /// The index of the first entry pushed after the block was held.
    first_entry: u32,
}

impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Block")
            .field("bytes", &self.lock().as_ref().map(|b| b.len()))
            .field("unparsed", &self.unparsed.load(Ordering::Relaxed))
            .finish()
    }
}

impl Block {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<Vec<u8>>>> {
        // The bytes are never changed while locked, only read or freed: a panic elsewhere
        // cannot leave them half done.
        self.bytes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A session's entries in file order.
#[derive(Debug, Default)]
pub(super) struct Store {
    /// A pointer each: filled by whichever reader parses first.
    parsed: Vec<OnceBox<Entry>>,
    spans: Vec<Span>,
    blocks: Vec<Block>,
}

/// Parse one line of a log (its text without the line ending) into an entry.
pub(crate) fn parse_line(text: &[u8]) -> serde_json::Result<Entry> {
    // One UTF-8 check of the whole line, so the parser need not check each string again.
    match std::str::from_utf8(text) {
        Ok(text) => serde_json::from_str::<Entry>(text),
        Err(_) => serde_json::from_slice::<Entry>(text),
    }
}

/// The id of the entry on `line`, read without parsing it: SOBA writes `id` first. `None` when
/// the line does not start with it or the id has escapes. Whitespace around the key and the
/// colon is allowed: a log rewritten by another JSON writer (`{"id": "…"`) would otherwise be
/// held parsed whole, at about two and a half times its size.
fn raw_id(line: &[u8]) -> Option<&str> {
    fn after_whitespace(b: &[u8]) -> &[u8] {
        let start = b
            .iter()
            .position(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
            .unwrap_or(b.len());
        &b[start..]
    }
    let rest = match line.strip_prefix(br#"{"id":""#) {
        Some(rest) => rest,
        None => {
            let rest = after_whitespace(line.strip_prefix(b"{")?);
            let rest = after_whitespace(rest.strip_prefix(br#""id""#)?);
            after_whitespace(rest.strip_prefix(b":")?).strip_prefix(b"\"")?
        }
    };
    let end = memchr::memchr(b'"', rest)?;
    let id = &rest[..end];
    if id.contains(&b'\\') {
        return None;
    }
    std::str::from_utf8(id).ok()
}

impl Store {
    pub(super) fn len(&self) -> usize {
        self.parsed.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.parsed.is_empty()
    }

    pub(super) fn reserve(&mut self, additional: usize) {
        self.parsed.reserve(additional);
        self.spans.reserve(additional);
    }

    /// Append an entry, held parsed.
    pub(super) fn push(&mut self, entry: Entry) {
        let cell = OnceBox::new();
        let _ = cell.set(Box::new(entry));
        self.parsed.push(cell);
        self.spans.push(Span::NONE);
    }

    /// Hold whole lines of the log for entries to be parsed from later; returns the block's
    /// number for [`Store::shelve`].
    pub(super) fn hold_block(&mut self, bytes: Arc<Vec<u8>>) -> u32 {
        self.blocks.push(Block {
            bytes: Mutex::new(Some(bytes)),
            unparsed: AtomicU32::new(0),
            first_entry: self.parsed.len() as u32,
        });
        (self.blocks.len() - 1) as u32
    }

    /// Hold entry `idx`, pushed parsed from `len` bytes at `start` in block `block`, as those
    /// bytes instead, to be parsed again when next read. An entry whose id cannot be read
    /// from its bytes without parsing them stays parsed: looking entries up by id must not
    /// parse them. Returns whether it is held as bytes.
    pub(super) fn shelve(&mut self, idx: usize, block: u32, start: usize, len: usize) -> bool {
        let (Ok(start32), Ok(len32)) = (u32::try_from(start), u32::try_from(len)) else {
            return false;
        };
        if self.block_of(idx) != Some(block as usize) {
            return false;
        }
        let Some(b) = self.blocks.get_mut(block as usize) else {
            return false;
        };
        let Some(bytes) = b.bytes.get_mut().unwrap_or_else(PoisonError::into_inner) else {
            return false;
        };
        let Some(line) = bytes.get(start..start + len) else {
            return false;
        };
        let Some(entry) = self.parsed[idx].get() else {
            return false;
        };
        if self.spans[idx] != Span::NONE || raw_id(line) != Some(entry.id.as_str()) {
            return false;
        }
        self.spans[idx] = Span {
            start: start32,
            len: len32,
        };
        self.parsed[idx] = OnceBox::new();
        *b.unparsed.get_mut() += 1;
        true
    }

    /// Free block `block` when no unparsed entry lies in it (a header, damaged lines, or
    /// entries whose id cannot be read from their line): called as soon as the block has been
    /// read, so that such blocks are not all held until the whole log is.
    pub(super) fn free_block_if_unneeded(&mut self, block: u32) {
        if let Some(b) = self.blocks.get_mut(block as usize) {
            if *b.unparsed.get_mut() == 0 {
                *b.bytes.get_mut().unwrap_or_else(PoisonError::into_inner) = None;
            }
        }
    }

    /// The block entry `idx` was read in (when it was read from a log).
    fn block_of(&self, idx: usize) -> Option<usize> {
        self.blocks
            .partition_point(|b| b.first_entry as usize <= idx)
            .checked_sub(1)
    }

    /// The held block and span of entry `idx`, which is not parsed.
    fn lines_of(&self, idx: usize) -> (&Block, Span) {
        let block = self
            .block_of(idx)
            .expect("an entry not parsed was read from a block");
        (&self.blocks[block], self.spans[idx])
    }

    /// Entry `idx`, parsed on first read and kept parsed.
    pub(super) fn get(&self, idx: usize) -> &Entry {
        let cell = &self.parsed[idx];
        if let Some(e) = cell.get() {
            return e;
        }
        let (block, span) = self.lines_of(idx);
        // Cloned, then parsed outside the lock, so that threads reading one block do not wait
        // in turn.
        let Some(bytes) = block.lock().clone() else {
            // Freed meanwhile: the entry was parsed, and set before its block was freed.
            return cell
                .get()
                .expect("an entry is parsed before its block is freed");
        };
        let entry = parse_line(&bytes[span.range()])
            .expect("a line that parsed when the log was read parses again");
        // Two readers may parse it at once; the first to set it counts it as parsed.
        if cell.set(Box::new(entry)).is_ok() && block.unparsed.fetch_sub(1, Ordering::AcqRel) == 1 {
            *block.lock() = None;
        }
        cell.get().expect("just set")
    }

    /// `f` of entry `idx`, parsing it for this call only when it is not parsed yet: for walks
    /// over the whole history (counting every entry) that must not keep it all parsed.
    pub(super) fn with<R>(&self, idx: usize, f: impl FnOnce(&Entry) -> R) -> R {
        if let Some(e) = self.parsed[idx].get() {
            return f(e);
        }
        let (block, span) = self.lines_of(idx);
        let bytes = block.lock().clone();
        let parsed = bytes.map(|bytes| {
            parse_line(&bytes[span.range()])
                .expect("a line that parsed when the log was read parses again")
        });
        match parsed {
            Some(e) => f(&e),
            // Freed meanwhile: the entry was parsed.
            None => f(self.get(idx)),
        }
    }

    /// `f` of entry `idx`'s id, without parsing the entry.
    pub(super) fn with_id<R>(&self, idx: usize, f: impl FnOnce(&str) -> R) -> R {
        if let Some(e) = self.parsed[idx].get() {
            return f(&e.id);
        }
        let (block, span) = self.lines_of(idx);
        let bytes = block.lock();
        match bytes
            .as_deref()
            .and_then(|bytes| raw_id(&bytes[span.range()]))
        {
            Some(id) => f(id),
            None => {
                drop(bytes);
                f(&self.get(idx).id)
            }
        }
    }

    /// The indices of the entries parsed so far.
    #[cfg(any(test, feature = "test-support"))]
    pub(super) fn parsed_indices(&self) -> Vec<usize> {
        (0..self.parsed.len())
            .filter(|&i| self.parsed[i].get().is_some())
            .collect()
    }

    /// Entries parsed so far, and the bytes held for those that are not.
    #[cfg(any(test, feature = "test-support"))]
    pub(super) fn held(&self) -> (usize, usize) {
        let parsed = self.parsed.iter().filter(|p| p.get().is_some()).count();
        let bytes = self
            .blocks
            .iter()
            .map(|b| b.lock().as_deref().map_or(0, Vec::len))
            .sum();
        (parsed, bytes)
    }
}

/// A session's entries in file order, each parsed when first read (see [`Store`]).
#[derive(Clone, Copy)]
pub struct Entries<'a> {
    store: &'a Store,
}

impl<'a> Entries<'a> {
    pub(super) fn of(store: &'a Store) -> Entries<'a> {
        Entries { store }
    }

    pub fn len(&self) -> usize {
        self.store.len()
    }

    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    pub fn last(&self) -> Option<&'a Entry> {
        self.len().checked_sub(1).map(|i| self.store.get(i))
    }

    pub fn iter(&self) -> Iter<'a> {
        Iter {
            store: self.store,
            range: 0..self.len(),
        }
    }

    /// The entries from `from` on.
    pub fn from(&self, from: usize) -> Iter<'a> {
        Iter {
            store: self.store,
            range: from.min(self.len())..self.len(),
        }
    }

    pub fn to_vec(&self) -> Vec<Entry> {
        self.iter().cloned().collect()
    }
}

impl Index<usize> for Entries<'_> {
    type Output = Entry;

    fn index(&self, idx: usize) -> &Entry {
        self.store.get(idx)
    }
}

impl<'a> IntoIterator for Entries<'a> {
    type Item = &'a Entry;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl std::fmt::Debug for Entries<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// An iterator over [`Entries`].
#[derive(Clone)]
pub struct Iter<'a> {
    store: &'a Store,
    range: std::ops::Range<usize>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a Entry;

    fn next(&mut self) -> Option<&'a Entry> {
        self.range.next().map(|i| self.store.get(i))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.range.size_hint()
    }

    fn nth(&mut self, n: usize) -> Option<&'a Entry> {
        self.range.nth(n).map(|i| self.store.get(i))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.range.next_back().map(|i| self.store.get(i))
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::testing::user_message;

    fn entry(id: &str, text: &str) -> Entry {
        user_message(id, None, text)
    }

    /// A store holding `entries` as one block of lines, as a log is read; with whether each
    /// is held as its line.
    fn read_as_lines(entries: &[Entry]) -> (Store, Vec<bool>) {
        let mut bytes = Vec::new();
        let mut spans = Vec::new();
        for e in entries {
            let start = bytes.len();
            serde_json::to_writer(&mut bytes, e).unwrap();
            spans.push((start, bytes.len() - start));
            bytes.push(b'\n');
        }
        let mut store = Store::default();
        let block = store.hold_block(Arc::new(bytes));
        let shelved = entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                store.push(e.clone());
                store.shelve(i, block, spans[i].0, spans[i].1)
            })
            .collect();
        store.free_block_if_unneeded(block);
        (store, shelved)
    }

    fn shelved(entries: &[Entry]) -> Store {
        let (store, shelved) = read_as_lines(entries);
        assert!(shelved.iter().all(|&s| s));
        store
    }

    #[test]
    fn a_held_entry_reads_back_the_same_and_its_block_is_freed_once_all_are_parsed() {
        let entries = [entry("a", "one"), entry("b", "two")];
        let store = shelved(&entries);
        assert_eq!(store.held().0, 0);
        assert!(store.with_id(1, |id| id == "b"));
        assert_eq!(store.with(0, Clone::clone), entries[0]);
        assert_eq!(
            store.held().0,
            0,
            "reading for one call keeps nothing parsed"
        );
        assert_eq!(store.get(0), &entries[0]);
        assert!(store.held().1 > 0, "the block still holds the other entry");
        assert_eq!(store.get(1), &entries[1]);
        assert_eq!(store.held(), (2, 0));
        assert!(store.with_id(0, |id| id == "a"));
    }

    #[test]
    fn an_entry_whose_id_has_escapes_stays_parsed() {
        let entries = [entry("a\"quoted", "x"), entry("plain", "y")];
        let (store, shelved) = read_as_lines(&entries);
        assert_eq!(shelved, [false, true]);
        assert_eq!(store.held().0, 1);
        assert!(store.with_id(0, |id| id == "a\"quoted"));
        assert_eq!(store.get(0), &entries[0]);
    }

    #[test]
    fn entries_read_in_any_order_and_from_several_threads_are_the_entries_held() {
        let entries: Vec<Entry> = (0..200)
            .map(|i| entry(&format!("e{i}"), &"word ".repeat(i)))
            .collect();
        let store = shelved(&entries);
        std::thread::scope(|s| {
            for t in 0..4 {
                let (store, entries) = (&store, &entries);
                s.spawn(move || {
                    for i in (0..200).rev().filter(|i| i % 4 == t || i % 3 == 0) {
                        assert_eq!(store.get(i), &entries[i]);
                        assert!(store.with_id(i, |id| id == entries[i].id));
                    }
                });
            }
        });
        let all = Entries::of(&store);
        assert_eq!(all.len(), 200);
        assert_eq!(all.to_vec(), entries);
        assert_eq!(
            all.iter().next_back().map(|e| &e.id),
            Some(&entries[199].id)
        );
        assert_eq!(store.held(), (200, 0));
    }
}
