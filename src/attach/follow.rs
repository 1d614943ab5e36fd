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
use soba_core::session::entry::{Entry, EntryBody, ModelRef, SessionHeader, SettingEntry};

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
    /// The model the session has in force: its header's, or the last one a `setting` entry
    /// switched to.
    session_model: Option<ModelRef>,
    /// The model the transcript names at the entry being read.
    transcript_model: Option<ModelRef>,
    /// Entries the session held before this reading that it has not met again yet: while
    /// some remain, the reading is still going over history and records no model switch of
    /// its own (a daemon restart must not record the session's old switches again).
    unmet: usize,
    /// An inserted model switch → the setting entry now in its parent's place, so that the
    /// next entry hangs off the setting and the setting is on the leaf's branch.
    relinked: HashMap<Option<String>, String>,
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
            session_model: None,
            transcript_model: None,
            unmet: 0,
            relinked: HashMap::new(),
        })
    }

    /// Entries the session already holds (it was followed before): their records are skipped.
    pub fn know(&mut self, existing: &soba_core::session::Session) {
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
        self.unmet = self.by_key.len();
        self.session_model = existing
            .settings_at(existing.leaf())
            .model
            .or_else(|| existing.header.model.clone());
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
                self.unmet = self.by_key.len();
                self.transcript_model = None;
                self.importer.feed(&bytes)
            }
        }
    }

    /// The entries to append now, as the daemon's `soba/session/append` takes them: settled
    /// ones, or all when `quiet` (the writer has stopped for a while). Where the transcript
    /// names another model than the session's (its first response, a switch), a `setting`
    /// entry with the model comes first, so the session's limits follow the agent's model.
    pub fn take(&mut self, quiet: bool) -> Vec<Value> {
        let first = self.importer.released();
        let entries = if quiet {
            self.importer.take_all()
        } else {
            self.importer.take_settled()
        };
        let mut changes = self.importer.take_model_changes().into_iter().peekable();
        let mut out = Vec::new();
        for (n, mut e) in entries.into_iter().enumerate() {
            while let Some(change) = changes.next_if(|c| c.at <= first + n) {
                self.transcript_model = Some(change.model);
            }
            // The leaf follows the last record live; rewinds belong to finished imports.
            if matches!(e.body, EntryBody::Rewind(_)) {
                continue;
            }
            let import_id = e.id.clone();
            let key = key_of(&e, &mut self.rank);
            if let Some(existing) = key.as_ref().and_then(|k| self.by_key.get(k)) {
                self.mapped.insert(import_id, existing.clone());
                self.unmet = self.unmet.saturating_sub(1);
                continue;
            }
            self.switch_model_if_named(&e.ts, &mut out);
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
            let parent = match &e.parent_id {
                Some(p) => self
                    .mapped
                    .get(p)
                    .cloned()
                    .or_else(|| self.last_appended.clone()),
                None => None,
            };
            e.parent_id = self.relinked_parent(parent);
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
        // A model named by a record whose entries are not settled yet (a response still
        // streaming) applies now: the budget shows the agent's model from its first record.
        for change in changes {
            self.transcript_model = Some(change.model);
        }
        if self.unmet == 0 {
            let now = self.options.now.clone();
            self.switch_model_if_named(&now, &mut out);
        }
        out
    }

    /// Append a `setting` entry with the transcript's model when it is not the session's.
    fn switch_model_if_named(&mut self, ts: &str, out: &mut Vec<Value>) {
        let Some(model) = self.transcript_model.as_ref() else {
            return;
        };
        if self
            .session_model
            .as_ref()
            .is_some_and(|current| same_model(current, model))
        {
            return;
        }
        let mut n = 0;
        let id = loop {
            let candidate = format!("g{}-model{}", self.generation, suffix(n));
            if !self.session_ids.contains(&candidate) {
                break candidate;
            }
            n += 1;
        };
        let setting = Entry {
            id: id.clone(),
            parent_id: self.last_appended.clone(),
            ts: ts.to_string(),
            source_id: None,
            body: EntryBody::Setting(SettingEntry {
                model: Some(model.clone()),
                ..SettingEntry::default()
            }),
        };
        let Ok(value) = serde_json::to_value(&setting) else {
            return;
        };
        out.push(value);
        self.session_model = Some(model.clone());
        self.session_ids.insert(id.clone());
        self.relinked.insert(setting.parent_id, id.clone());
        self.last_appended = Some(id);
    }

    /// `parent`, or the model switch inserted after it.
    fn relinked_parent(&self, mut parent: Option<String>) -> Option<String> {
        while let Some(setting) = self.relinked.get(&parent) {
            parent = Some(setting.clone());
        }
        parent
    }
}

/// Whether the session's model is the one the transcript names: the same name, and the same
/// figures where the transcript gives them (a window Codex reports).
fn same_model(session: &ModelRef, transcript: &ModelRef) -> bool {
    let same_name = match (&session.name, &transcript.name) {
        (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
        (None, None) => true,
        _ => false,
    };
    let agrees = |ours: Option<u64>, theirs: Option<u64>| theirs.is_none() || ours == theirs;
    same_name
        && agrees(session.context_window, transcript.context_window)
        && agrees(session.max_output_tokens, transcript.max_output_tokens)
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
        let mut session = soba_core::session::Session::new(
            soba_core::session::testing::header(),
            soba_core::tokens::TokenizerKind::default(),
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

    fn claude_user(uuid: &str, parent: Option<&str>, text: &str) -> String {
        json!({"type":"user","uuid":uuid,"parentUuid":parent,"sessionId":"c1","cwd":"/ws","timestamp":"t",
               "message":{"role":"user","content":text}})
        .to_string()
            + "\n"
    }

    fn claude_reply(uuid: &str, parent: &str, response: &str, model: &str) -> String {
        json!({"type":"assistant","uuid":uuid,"parentUuid":parent,"timestamp":"t",
               "message":{"id":response,"model":model,"role":"assistant",
                          "content":[{"type":"text","text":"done"}],
                          "usage":{"input_tokens":100,"output_tokens":5}}})
        .to_string()
            + "\n"
    }

    /// The session the daemon creates when it attaches before any response: the default model.
    fn session_with_default_model() -> soba_core::session::Session {
        let mut header = soba_core::session::testing::header();
        header.model = Some(ModelRef {
            name: Some("gpt-4o".into()),
            context_window: Some(128_000),
            max_output_tokens: Some(16_384),
            tokenizer: None,
        });
        soba_core::session::Session::new(header, soba_core::tokens::TokenizerKind::default())
    }

    fn push_all(session: &mut soba_core::session::Session, values: &[Value]) {
        for v in values {
            session
                .push(serde_json::from_value(v.clone()).unwrap())
                .unwrap();
        }
    }

    fn models_set(values: &[Value]) -> Vec<String> {
        values
            .iter()
            .filter(|v| v["type"] == "setting")
            .map(|v| v["model"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn the_first_response_replaces_a_default_model_before_it_settles() {
        let mut session = session_with_default_model();
        let mut f = Follower::new(Some(Format::ClaudeCode), options()).unwrap();
        f.know(&session);
        f.feed(Growth::Appended(claude_user("u1", None, "hi").into_bytes()))
            .unwrap();
        let before = f.take(false);
        assert!(
            models_set(&before).is_empty(),
            "no record names a model yet"
        );
        push_all(&mut session, &before);
        f.feed(Growth::Appended(
            claude_reply("a1", "u1", "m1", "claude-opus-4-5").into_bytes(),
        ))
        .unwrap();
        // The response may still stream: its entry waits, its model does not.
        let named = f.take(false);
        assert_eq!(models_set(&named), ["claude-opus-4-5"]);
        assert_eq!(named.len(), 1, "{named:?}");
        assert_eq!(named[0]["model"]["contextWindow"], 200_000);
        push_all(&mut session, &named);
        let reply = f.take(true);
        assert_eq!(reply.len(), 1);
        assert_eq!(
            reply[0]["parentId"], named[0]["id"],
            "the response hangs off the switch, so the switch is on the leaf's branch"
        );
        push_all(&mut session, &reply);
        let model = session.model_config().unwrap();
        assert_eq!(model.name.as_deref(), Some("claude-opus-4-5"));
        assert_eq!(model.context_window, Some(200_000));
    }

    #[test]
    fn a_switch_is_recorded_once_and_reading_again_does_not_repeat_it() {
        let transcript = claude_user("u1", None, "hi")
            + &claude_reply("a1", "u1", "m1", "claude-sonnet-4-5")
            + &claude_user("u2", Some("a1"), "switch")
            + &claude_reply("a2", "u2", "m2", "claude-opus-4-5");
        let mut session = session_with_default_model();
        let mut f = Follower::new(Some(Format::ClaudeCode), options()).unwrap();
        f.know(&session);
        f.feed(Growth::Appended(transcript.clone().into_bytes()))
            .unwrap();
        let out = f.take(true);
        assert_eq!(
            models_set(&out),
            ["claude-sonnet-4-5", "claude-opus-4-5"],
            "{out:#?}"
        );
        let types: Vec<_> = out.iter().map(|v| v["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            ["message", "setting", "message", "message", "setting", "message"],
            "each switch comes before the response that named it"
        );
        push_all(&mut session, &out);
        assert_eq!(
            session.model_config().unwrap().name.as_deref(),
            Some("claude-opus-4-5")
        );

        // A daemon restart reads the whole transcript again: nothing new, no switch again.
        let mut again = Follower::new(Some(Format::ClaudeCode), options()).unwrap();
        again.know(&session);
        again
            .feed(Growth::Appended(transcript.into_bytes()))
            .unwrap();
        assert!(again.take(true).is_empty());
    }

    #[test]
    fn the_model_the_session_already_has_is_not_recorded_again() {
        let mut header = soba_core::session::testing::header();
        header.model = Some(crate::import::model_ref("claude-opus-4-5"));
        let session =
            soba_core::session::Session::new(header, soba_core::tokens::TokenizerKind::default());
        let mut f = Follower::new(Some(Format::ClaudeCode), options()).unwrap();
        f.know(&session);
        f.feed(Growth::Appended(
            (claude_user("u1", None, "hi") + &claude_reply("a1", "u1", "m1", "claude-opus-4-5"))
                .into_bytes(),
        ))
        .unwrap();
        assert!(models_set(&f.take(true)).is_empty());
    }
}
