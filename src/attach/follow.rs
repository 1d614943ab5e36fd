//! From transcript bytes to the session entries to append, idempotently.
//!
//! A [`Follower`] owns one [`StreamImporter`] per reading of the file. When the file starts over
//! (replaced, truncated, rewritten) a new importer reads it from the first byte, and every
//! entry it makes is matched against what the session already holds by its source key (the
//! source record's id and the entry's rank among the entries of that record): entries already
//! there are skipped and their ids reused as parents, so following again, or after a restart,
//! never imports a record twice.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::tail::Growth;
use crate::import::stream::StreamImporter;
use crate::import::{Format, ImportError, ImportOptions};
use crate::session::entry::{Entry, EntryBody, SessionHeader};

pub struct Follower {
    format: Option<Format>,
    options: ImportOptions,
    importer: StreamImporter,
    /// Readings of the file so far (1 until it starts over).
    generation: u32,
    /// Source key → id of the session entry it became.
    by_key: HashMap<String, String>,
    /// Ids the session holds.
    session_ids: HashSet<String>,
    /// This reading's entry id → the session entry id.
    mapped: HashMap<String, String>,
    /// This reading: entries made per source record so far.
    rank: HashMap<String, usize>,
    last_appended: Option<String>,
}

impl Follower {
    pub fn new(format: Option<Format>, options: ImportOptions) -> Result<Follower, ImportError> {
        Ok(Follower {
            importer: StreamImporter::new(format, options.clone())?,
            format,
            options,
            generation: 1,
            by_key: HashMap::new(),
            session_ids: HashSet::new(),
            mapped: HashMap::new(),
            rank: HashMap::new(),
            last_appended: None,
        })
    }

    /// Entries the session already holds (it was followed before): their records are skipped.
    pub fn know(&mut self, existing: &crate::session::Session) {
        let mut rank: HashMap<String, usize> = HashMap::new();
        for i in 0..existing.len() {
            // Read once each: keeping a whole session parsed only to skip its records costs
            // more than reading it.
            existing.with_entry(i, |e| {
                self.session_ids.insert(e.id.clone());
                if let Some(key) = key_of(e, &mut rank) {
                    self.by_key.insert(key, e.id.clone());
                }
                self.last_appended = Some(e.id.clone());
            });
        }
    }

    /// The session header as the transcript tells it so far.
    pub fn header(&self) -> Option<SessionHeader> {
        self.importer.header()
    }

    pub fn format(&self) -> Option<Format> {
        self.importer.format()
    }

    /// Whether a line is still waiting for its newline.
    pub fn has_partial_line(&self) -> bool {
        self.importer.has_partial_line()
    }

    /// Read what the tailer found.
    pub fn feed(&mut self, growth: Growth) -> Result<(), ImportError> {
        match growth {
            Growth::Appended(bytes) => self.importer.feed(&bytes),
            Growth::Restarted { bytes, .. } => {
                self.importer = StreamImporter::new(self.format, self.options.clone())?;
                self.generation += 1;
                self.mapped.clear();
                self.rank.clear();
                self.importer.feed(&bytes)
            }
        }
    }

    /// The entries to append now, as the daemon's `soba/session/append` takes them: settled
    /// ones, or all when `quiet` (the writer has stopped for a while).
    pub fn take(&mut self, quiet: bool) -> Vec<Value> {
        let entries = if quiet {
            self.importer.take_all()
        } else {
            self.importer.take_settled()
        };
        let mut out = Vec::new();
        for mut e in entries {
            // The leaf follows the last record live; rewinds belong to finished imports.
            if matches!(e.body, EntryBody::Rewind(_)) {
                continue;
            }
            let import_id = e.id.clone();
            let key = key_of(&e, &mut self.rank);
            if let Some(existing) = key.as_ref().and_then(|k| self.by_key.get(k)) {
                self.mapped.insert(import_id, existing.clone());
                continue;
            }
            let id = if self.generation == 1 && !self.session_ids.contains(&import_id) {
                import_id.clone()
            } else {
                let mut n = 0;
                loop {
                    let candidate = format!("g{}-{import_id}{}", self.generation, suffix(n));
                    if !self.session_ids.contains(&candidate) {
                        break candidate;
                    }
                    n += 1;
                }
            };
            e.parent_id = match &e.parent_id {
                Some(p) => self
                    .mapped
                    .get(p)
                    .cloned()
                    .or_else(|| self.last_appended.clone()),
                None => None,
            };
            e.id = id.clone();
            self.mapped.insert(import_id, id.clone());
            self.session_ids.insert(id.clone());
            if let Some(k) = key {
                self.by_key.insert(k, id.clone());
            }
            self.last_appended = Some(id);
            if let Ok(v) = serde_json::to_value(&e) {
                out.push(v);
            }
        }
        out
    }
}

fn suffix(n: usize) -> String {
    if n == 0 {
        String::new()
    } else {
        format!("-{n}")
    }
}

/// The source key of an entry: its source record and its rank among that record's entries.
fn key_of(e: &Entry, rank: &mut HashMap<String, usize>) -> Option<String> {
    let source = e.source_id.as_ref()?;
    let r = rank.entry(source.clone()).or_default();
    let key = format!("{source}#{r}");
    *r += 1;
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn options() -> ImportOptions {
        ImportOptions {
            source_path: "/t".into(),
            default_workspace: "/ws".into(),
            default_session_id: "s".into(),
            now: "2026-01-01T00:00:00Z".into(),
        }
    }

    fn pi_lines(n: usize) -> String {
        let mut s = json!({"type":"session","version":3,"id":"p1","cwd":"/ws","timestamp":"t"})
            .to_string()
            + "\n";
        for i in 0..n {
            let parent = if i == 0 {
                Value::Null
            } else {
                json!(format!("m{}", i - 1))
            };
            s += &json!({"type":"message","id":format!("m{i}"),"parentId":parent,"timestamp":"t",
                "message":{"role":"user","content":[{"type":"text","text":format!("hello {i}")}]}})
            .to_string();
            s.push('\n');
        }
        s
    }

    fn ids(v: &[Value]) -> Vec<String> {
        v.iter()
            .map(|e| e["id"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn a_restart_imports_only_what_is_new() {
        let mut f = Follower::new(Some(Format::Pi), options()).unwrap();
        f.feed(Growth::Appended(pi_lines(2).into_bytes())).unwrap();
        let first = f.take(false);
        assert_eq!(ids(&first), ["e1", "e2"]);
        f.feed(Growth::Restarted {
            bytes: pi_lines(3).into_bytes(),
            why: super::super::tail::Restart::Replaced,
        })
        .unwrap();
        let second = f.take(false);
        assert_eq!(second.len(), 1, "{second:?}");
        assert_eq!(second[0]["sourceId"], "m2");
        assert_eq!(
            second[0]["parentId"], "e2",
            "hangs off the entry already there"
        );
        assert_eq!(
            second[0]["id"], "g2-e3",
            "a later reading gets ids of its own"
        );
    }

    #[test]
    fn a_session_followed_before_skips_its_records() {
        let mut first = Follower::new(Some(Format::Pi), options()).unwrap();
        first
            .feed(Growth::Appended(pi_lines(2).into_bytes()))
            .unwrap();
        let existing: Vec<Entry> = first
            .take(false)
            .into_iter()
            .map(|v| serde_json::from_value(v).unwrap())
            .collect();
        let mut session = crate::session::Session::new(
            crate::session::testing::header(),
            crate::tokens::TokenizerKind::default(),
        );
        for e in existing {
            session.push(e).unwrap();
        }
        let mut again = Follower::new(Some(Format::Pi), options()).unwrap();
        again.know(&session);
        again
            .feed(Growth::Appended(pi_lines(3).into_bytes()))
            .unwrap();
        let out = again.take(false);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0]["sourceId"], "m2");
        assert_eq!(out[0]["parentId"], "e2");
        assert_eq!(out[0]["id"], "e3");
    }
}
