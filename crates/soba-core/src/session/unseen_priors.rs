//! What this machine learned about each agent's unseen context: per agent and model, what the
//! first request of each session (and the first after each of the agent's own compactions)
//! held beyond the log. One small private JSON file in SOBA's data folder; the arithmetic is in
//! [`crate::budget::unseen_allowance`], this is the shell that keeps it.
//!
//! A file that cannot be read or parsed is never fatal: the budget falls back to the agents'
//! defaults with a warning, and the next write keeps the unreadable file beside the new one
//! (`unseen-context.json.corrupt`) instead of overwriting it.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::unseen_measure::UnseenObservations;
use crate::budget::unseen_allowance::Agent;
use crate::budget::unseen_allowance::Fresh;
use crate::budget::unseen_allowance::Learned;
use crate::budget::unseen_allowance::UnseenPrior;

/// The file's name in the data folder.
pub const UNSEEN_CONTEXT_FILE: &str = "unseen-context.json";

const FORMAT_VERSION: u32 = 1;

/// Sessions kept per agent and model: many more than the learning window
/// ([`crate::budget::unseen_allowance::LEARN_FROM_SESSIONS`]), so that "learned from N sessions" says how
/// much this machine has seen, and the file stays a few kilobytes.
pub const KEEP_SESSIONS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SessionRecord {
    session: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after_agent_compaction: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct StoreFile {
    version: u32,
    /// Agent → model → sessions, oldest first.
    agents: BTreeMap<String, BTreeMap<String, Vec<SessionRecord>>>,
}

#[derive(Debug)]
pub struct UnseenStore {
    path: PathBuf,
    file: StoreFile,
    /// Why the file on disk could not be used, when it could not.
    problem: Option<String>,
}

impl UnseenStore {
    /// The store's path in the data folder `data_dir`.
    pub fn path_in(data_dir: &Path) -> PathBuf {
        data_dir.join(UNSEEN_CONTEXT_FILE)
    }

    /// The store at `path`: empty when the file is missing, and empty with
    /// [`UnseenStore::problem`] set when it cannot be read or parsed.
    pub fn load(path: &Path) -> UnseenStore {
        let empty = StoreFile {
            version: FORMAT_VERSION,
            agents: BTreeMap::new(),
        };
        let (file, problem) = match crate::files::read_regular_to_string(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => (empty, None),
            Err(e) => (empty, Some(format!("cannot read {}: {e}", path.display()))),
            Ok(text) => match serde_json::from_str::<StoreFile>(&text) {
                Ok(f) if f.version == FORMAT_VERSION => (f, None),
                Ok(f) => (
                    empty,
                    Some(format!(
                        "{} is of format {} (this SOBA reads {FORMAT_VERSION})",
                        path.display(),
                        f.version
                    )),
                ),
                Err(e) => (empty, Some(format!("{} is not valid: {e}", path.display()))),
            },
        };
        UnseenStore {
            path: path.to_path_buf(),
            file,
            problem: problem.map(|p| {
                format!(
                    "{p}; the budget allows for the agents' default unseen context until this \
                     machine learns again (the file is kept as {}.corrupt when SOBA next writes)",
                    UNSEEN_CONTEXT_FILE
                )
            }),
        }
    }

    pub fn problem(&self) -> Option<&str> {
        self.problem.as_deref()
    }

    /// What earlier sessions of `agent` on `model` showed, leaving out `session` itself.
    pub fn prior(&self, agent: Option<Agent>, model: &str, session: &str) -> UnseenPrior {
        let Some(records) = agent.and_then(|a| self.records(a, model)) else {
            return UnseenPrior::defaults(agent);
        };
        let gaps = |pick: fn(&SessionRecord) -> Option<u64>| -> Vec<u64> {
            records
                .iter()
                .filter(|r| r.session != session)
                .filter_map(pick)
                .collect()
        };
        // Every gap is kept in the file; outliers are left out here, when the prior is read,
        // so that a set-up that really changed is learned once later sessions agree with it.
        let learned = |pick: fn(&SessionRecord) -> Option<u64>, fresh: Fresh| {
            Learned::from_gaps(&gaps(pick), agent?.default_unseen(fresh))
        };
        UnseenPrior {
            agent,
            start: learned(|r| r.start, Fresh::Start),
            after_agent_compaction: learned(
                |r| r.after_agent_compaction,
                Fresh::AfterAgentCompaction,
            ),
        }
    }

    fn records(&self, agent: Agent, model: &str) -> Option<&Vec<SessionRecord>> {
        self.file.agents.get(agent.as_str())?.get(model)
    }

    /// Record what `session` of `agent` on `model` showed. `true` when that changed the store.
    pub fn learn(
        &mut self,
        agent: Agent,
        model: &str,
        session: &str,
        seen: UnseenObservations,
    ) -> bool {
        if seen.is_empty() {
            return false;
        }
        let records = self
            .file
            .agents
            .entry(agent.as_str().to_string())
            .or_default()
            .entry(model.to_string())
            .or_default();
        let record = SessionRecord {
            session: session.to_string(),
            start: seen.start,
            after_agent_compaction: seen.after_agent_compaction,
        };
        match records.iter_mut().find(|r| r.session == session) {
            Some(r) if *r == record => return false,
            Some(r) => *r = record,
            None => records.push(record),
        }
        let over = records.len().saturating_sub(KEEP_SESSIONS);
        records.drain(..over);
        true
    }

    /// Write the store (a private file in a private folder, replaced whole). A file that could
    /// not be used is first kept as `….corrupt`, so nothing it held is lost.
    pub fn save(&mut self) -> io::Result<()> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::files::create_private_dir_all(dir)?;
        }
        if self.problem.is_some() {
            let mut kept = self.path.clone().into_os_string();
            kept.push(".corrupt");
            match std::fs::rename(&self.path, &kept) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => self.problem = None,
            }
        }
        let mut bytes = serde_json::to_vec_pretty(&self.file).map_err(io::Error::other)?;
        bytes.push(b'\n');
        crate::files::write_atomic(&self.path, &bytes)
    }
}

/// Learn from `session` (run on `model`) into the store at `path`: read the file fresh (another
/// SOBA process may have written it since), record, write when that changed anything. Returns
/// a write that failed, in words, for the caller to show as a warning; never fails. (A file
/// that could not be read is the caller's to report, when it loads the prior.)
pub fn learn_from_session(path: &Path, session: &super::Session, model: &str) -> Option<String> {
    let agent = session.agent()?;
    let seen = session.unseen_observations();
    if seen.is_empty() {
        return None;
    }
    let mut store = UnseenStore::load(path);
    if !store.learn(agent, model, &session.header.id, seen) {
        return None;
    }
    match store.save() {
        Ok(()) => None,
        Err(e) => Some(format!(
            "cannot record what this session showed beyond its log in {}: {e}",
            path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn seen(start: u64) -> UnseenObservations {
        UnseenObservations {
            start: Some(start),
            after_agent_compaction: None,
        }
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_learned_gap_survives_a_reload_per_agent_and_model_in_private_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = UnseenStore::path_in(&dir.path().join("data"));
        let mut store = UnseenStore::load(&path);
        assert_eq!(store.problem(), None, "a missing file is no problem");
        assert!(store.learn(Agent::ClaudeCode, "claude-opus-4", "s1", seen(18_000)));
        assert!(!store.learn(Agent::ClaudeCode, "claude-opus-4", "s1", seen(18_000)));
        assert!(store.learn(Agent::ClaudeCode, "claude-opus-4", "s2", seen(21_000)));
        store.save().unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);

        let again = UnseenStore::load(&path);
        let prior = again.prior(Some(Agent::ClaudeCode), "claude-opus-4", "s3");
        assert_eq!(
            prior.start,
            Some(Learned {
                tokens: 21_000,
                sessions: 2
            })
        );
        assert_eq!(prior.after_agent_compaction, None);
        let own_left_out = again.prior(Some(Agent::ClaudeCode), "claude-opus-4", "s2");
        assert_eq!(
            own_left_out.start,
            Some(Learned {
                tokens: 18_000,
                sessions: 1
            })
        );
        for (agent, model) in [
            (Agent::ClaudeCode, "claude-haiku-4"),
            (Agent::Codex, "claude-opus-4"),
        ] {
            assert_eq!(
                again.prior(Some(agent), model, "s3"),
                UnseenPrior::defaults(Some(agent))
            );
        }
    }

    #[test]
    fn a_session_learned_again_is_updated_not_counted_twice_and_old_sessions_drop_out() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = UnseenStore::load(&UnseenStore::path_in(dir.path()));
        for n in 0..KEEP_SESSIONS + 3 {
            store.learn(Agent::Pi, "m", &format!("s{n}"), seen(1_000 + n as u64));
        }
        assert!(store.learn(Agent::Pi, "m", "s70", seen(5)));
        let prior = store.prior(Some(Agent::Pi), "m", "other");
        assert_eq!(prior.start.unwrap().sessions, KEEP_SESSIONS as u32);
        assert!(!store.learn(Agent::Pi, "m", "s1", UnseenObservations::default()));
    }

    #[test]
    fn a_corrupt_file_is_ignored_with_a_warning_and_kept_beside_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = UnseenStore::path_in(dir.path());
        for bad in ["{not json", r#"{"version":99,"agents":{}}"#] {
            std::fs::write(&path, bad).unwrap();
            let mut store = UnseenStore::load(&path);
            let problem = store.problem().expect("a warning").to_string();
            assert!(problem.contains("unseen-context.json"), "{problem}");
            assert_eq!(
                store.prior(Some(Agent::Codex), "gpt-5", "s"),
                UnseenPrior::defaults(Some(Agent::Codex)),
                "defaults stand in"
            );
            assert!(store.learn(Agent::Codex, "gpt-5", "s", seen(5_000)));
            store.save().unwrap();
            let kept = std::fs::read_to_string(dir.path().join("unseen-context.json.corrupt"));
            assert_eq!(kept.unwrap(), bad, "the unreadable file is kept, not lost");
            let fresh = UnseenStore::load(&path);
            assert_eq!(fresh.problem(), None);
            assert_eq!(
                fresh.prior(Some(Agent::Codex), "gpt-5", "t").start,
                Some(Learned {
                    tokens: 5_000,
                    sessions: 1
                })
            );
            std::fs::remove_file(&path).unwrap();
        }
    }

    #[test]
    fn an_unreadable_file_is_a_warning_and_kept_aside_by_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        // A folder where the file should be: it cannot be read as a file.
        let path = UnseenStore::path_in(dir.path());
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), "kept").unwrap();
        let mut store = UnseenStore::load(&path);
        assert!(store.problem().unwrap().contains("cannot read"));
        assert!(store.learn(Agent::Pi, "m", "s", seen(2_000)));
        store.save().unwrap();
        let kept = dir.path().join("unseen-context.json.corrupt/inside");
        assert_eq!(std::fs::read_to_string(kept).unwrap(), "kept");
        assert!(UnseenStore::load(&path).problem().is_none());
    }

    #[test]
    fn a_write_that_fails_is_reported_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        // The data folder's place is taken by a file: nothing can be written under it.
        let blocked = dir.path().join("data");
        std::fs::write(&blocked, "a file").unwrap();
        let path = UnseenStore::path_in(&blocked);
        let mut store = UnseenStore::load(&path);
        assert!(store.problem().is_some(), "reading under a file fails too");
        assert!(store.learn(Agent::Pi, "m", "s", seen(2_000)));
        assert!(store.save().is_err());
        assert_eq!(std::fs::read_to_string(&blocked).unwrap(), "a file");
    }
}
