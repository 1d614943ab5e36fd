//! One task per live session: the only writer of its log.
//!
//! Every mutation of a session goes through its actor's queue, so writes are serialized without
//! locks. The actor publishes a [`Status`] snapshot after each change; `soba/budget` and
//! `soba/sessions` read that snapshot and never wait for the actor, so they answer at once
//! even while the actor is busy.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::protocol::{
    AppendResult, AutoCompactResult, BudgetReport, CompactionNotice, RewindResult, RpcError,
};
use crate::cli::inspect::budget_report;
use crate::config::Config;
use crate::session::entry::{Entry, EntryBody, FileEntry, RewindEntry, SettingEntry};
use crate::session::log::{LogError, SessionLog};

/// What the actor tells every interested client.
#[derive(Debug, Clone)]
pub enum Event {
    BudgetChanged(BudgetReport),
    Compaction { workspace: String, notice: CompactionNotice },
    /// A degraded fallback was used; the text says why.
    Degraded { workspace: String, message: String },
}

impl Event {
    pub fn workspace(&self) -> &str {
        match self {
            Event::BudgetChanged(b) => &b.workspace,
            Event::Compaction { workspace, .. } | Event::Degraded { workspace, .. } => workspace,
        }
    }
}

/// Snapshot of a session, published after every change.
#[derive(Debug, Clone)]
pub struct Status {
    pub budget: BudgetReport,
    pub entries: usize,
    pub leaf_id: Option<String>,
}

type Reply<T> = oneshot::Sender<Result<T, RpcError>>;

enum Command {
    Append { entries: Vec<Value>, reply: Reply<AppendResult> },
    Rewind { entry_id: String, reply: Reply<RewindResult> },
    SetAutoCompact { enabled: bool, reply: Reply<AutoCompactResult> },
    WatchedFiles { changes: Vec<FileEntry> },
}

/// A cheap, cloneable reference to a live session.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    pub id: String,
    pub workspace: PathBuf,
    pub path: PathBuf,
    tx: mpsc::UnboundedSender<Command>,
    status: watch::Receiver<Status>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Command::Append { .. } => "Append",
            Command::Rewind { .. } => "Rewind",
            Command::SetAutoCompact { .. } => "SetAutoCompact",
            Command::WatchedFiles { .. } => "WatchedFiles",
        })
    }
}

fn stopped() -> RpcError {
    RpcError::internal("the session's writer stopped; open the session again")
}

impl SessionHandle {
    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    async fn request<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, RpcError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    pub async fn append(&self, entries: Vec<Value>) -> Result<AppendResult, RpcError> {
        self.request(|reply| Command::Append { entries, reply }).await
    }

    pub async fn rewind(&self, entry_id: String) -> Result<RewindResult, RpcError> {
        self.request(|reply| Command::Rewind { entry_id, reply }).await
    }

    pub async fn set_auto_compact(&self, enabled: bool) -> Result<AutoCompactResult, RpcError> {
        self.request(|reply| Command::SetAutoCompact { enabled, reply }).await
    }

    /// Record file changes seen on disk. Fire and forget: the watcher never waits on a session.
    pub fn watched_files(&self, changes: Vec<FileEntry>) {
        let _ = self.tx.send(Command::WatchedFiles { changes });
    }
}

/// Input that arrived while a compaction ran; applied in order after its outcome.
enum Queued {
    Append { entries: Vec<Value>, reply: Reply<AppendResult> },
    SetAutoCompact { enabled: bool, reply: Reply<AutoCompactResult> },
    Files(Vec<FileEntry>),
}

struct Actor {
    log: SessionLog,
    config: Config,
    workspace: String,
    status: watch::Sender<Status>,
    events: broadcast::Sender<Event>,
    /// `Some` while a compaction is between plan and commit.
    barrier: Option<Barrier>,
}

struct Barrier {
    queued: Vec<Queued>,
}

/// Start the actor of an opened log.
pub fn spawn(log: SessionLog, config: Config, events: broadcast::Sender<Event>) -> SessionHandle {
    let id = log.session().header.id.clone();
    let workspace = PathBuf::from(&log.session().header.workspace);
    let path = log.path().to_path_buf();
    let (tx, rx) = mpsc::unbounded_channel();
    let mut actor = Actor {
        workspace: workspace.display().to_string(),
        status: watch::Sender::new(placeholder_status()),
        log,
        config,
        events,
        barrier: None,
    };
    actor.log.session_mut().set_tokenizer(actor.config.model.tokenizer);
    actor.status.send_replace(actor.snapshot());
    let status = actor.status.subscribe();
    tokio::spawn(actor.run(rx));
    SessionHandle { id, workspace, path, tx, status }
}

fn placeholder_status() -> Status {
    Status {
        budget: BudgetReport {
            session_id: String::new(),
            workspace: String::new(),
            budget: Value::Null,
            compacting: false,
        },
        entries: 0,
        leaf_id: None,
    }
}

impl Actor {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        while let Some(cmd) = rx.recv().await {
            self.handle(cmd);
        }
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Append { entries, reply } => match &mut self.barrier {
                Some(b) => b.queued.push(Queued::Append { entries, reply }),
                None => {
                    let r = self.append(entries);
                    let _ = reply.send(r);
                }
            },
            Command::SetAutoCompact { enabled, reply } => match &mut self.barrier {
                Some(b) => b.queued.push(Queued::SetAutoCompact { enabled, reply }),
                None => {
                    let r = self.set_auto_compact(enabled);
                    let _ = reply.send(r);
                }
            },
            Command::WatchedFiles { changes } => match &mut self.barrier {
                Some(b) => b.queued.push(Queued::Files(changes)),
                None => self.record_files(changes),
            },
            // A rewind is applied even during a compaction: it moves the leaf, so the running
            // compaction ends `stale` and appends nothing.
            Command::Rewind { entry_id, reply } => {
                let r = self.rewind(&entry_id);
                let _ = reply.send(r);
            }
        }
    }

    /// Apply input queued during a compaction, in arrival order.
    #[allow(dead_code)]
    fn drain(&mut self, queued: Vec<Queued>) {
        for q in queued {
            match q {
                Queued::Append { entries, reply } => {
                    let r = self.append(entries);
                    let _ = reply.send(r);
                }
                Queued::SetAutoCompact { enabled, reply } => {
                    let r = self.set_auto_compact(enabled);
                    let _ = reply.send(r);
                }
                Queued::Files(changes) => self.record_files(changes),
            }
        }
    }

    fn session_id(&self) -> &str {
        &self.log.session().header.id
    }

    fn budget(&self) -> BudgetReport {
        let s = self.log.session();
        let core = budget_report(s, self.config.limits(), self.config.compaction.auto, &self.config.model.name);
        BudgetReport::new(&s.header.id, &self.workspace, &core, self.barrier.is_some())
    }

    fn snapshot(&self) -> Status {
        Status {
            budget: self.budget(),
            entries: self.log.session().len(),
            leaf_id: self.log.session().leaf_id().map(str::to_string),
        }
    }

    /// Publish the new state and tell clients the budget changed.
    fn publish(&self) -> BudgetReport {
        let status = self.snapshot();
        let budget = status.budget.clone();
        self.status.send_replace(status);
        let _ = self.events.send(Event::BudgetChanged(budget.clone()));
        budget
    }

    fn write(&mut self, entries: Vec<Entry>) -> Result<(), RpcError> {
        self.log.append_all(entries).map_err(|e| match e {
            LogError::Tree { source, .. } => RpcError::invalid_params(format!("entries: {source}")),
            other => RpcError::internal(other.to_string()),
        })
    }

    fn append(&mut self, raw: Vec<Value>) -> Result<AppendResult, RpcError> {
        let entries = prepare_entries(self.log.session().leaf_id(), raw)?;
        let entry_ids = entries.iter().map(|e| e.id.clone()).collect();
        self.write(entries)?;
        let budget = self.publish();
        Ok(AppendResult { entry_ids, leaf_id: self.log.session().leaf_id().map(str::to_string), budget })
    }

    fn leaf_entry(&self, body: EntryBody) -> Entry {
        Entry::new(crate::util::new_id("e_"), self.log.session().leaf_id().map(str::to_string), body)
    }

    fn rewind(&mut self, entry_id: &str) -> Result<RewindResult, RpcError> {
        if self.log.session().get(entry_id).is_none() {
            return Err(RpcError::invalid_params(format!(
                "`entryId`: entry `{entry_id}` is not in session `{}`",
                self.session_id()
            )));
        }
        let entry = self.leaf_entry(EntryBody::Rewind(RewindEntry { to: entry_id.to_string() }));
        self.write(vec![entry])?;
        let budget = self.publish();
        Ok(RewindResult { leaf_id: self.log.session().leaf_id().map(str::to_string), budget })
    }

    fn set_auto_compact(&mut self, enabled: bool) -> Result<AutoCompactResult, RpcError> {
        let entry = self.leaf_entry(EntryBody::Setting(SettingEntry {
            auto_compact: Some(enabled),
            ..SettingEntry::default()
        }));
        self.write(vec![entry])?;
        let budget = self.publish();
        let auto_compact = budget.budget["autoCompact"].as_bool().unwrap_or(enabled);
        Ok(AutoCompactResult { auto_compact })
    }

    fn record_files(&mut self, changes: Vec<FileEntry>) {
        if changes.is_empty() {
            return;
        }
        let mut entries = Vec::with_capacity(changes.len());
        let mut parent = self.log.session().leaf_id().map(str::to_string);
        for change in changes {
            let e = Entry::new(crate::util::new_id("e_"), parent.take(), EntryBody::File(change));
            parent = Some(e.id.clone());
            entries.push(e);
        }
        if let Err(e) = self.write(entries) {
            // Nothing to answer: the watcher is fire-and-forget. The log stays as it was.
            eprintln!("soba: session {}: cannot record file changes: {}", self.session_id(), e.message);
            return;
        }
        self.publish();
    }
}

/// Entry types only the daemon writes, with the method that writes them.
const DAEMON_WRITTEN: &[(&str, &str)] = &[
    ("capsule", "soba/compact"),
    ("intent", "soba/turn/complete or soba/checkpoint"),
    ("compaction", "soba/compact"),
    ("rewind", "soba/rewind"),
];

/// Turn client-supplied entries into log entries: fill in `id`, `ts` and `parentId` (the
/// previous entry of the batch, or the leaf), and check each against the entry schema.
pub fn prepare_entries(leaf: Option<&str>, raw: Vec<Value>) -> Result<Vec<Entry>, RpcError> {
    if raw.is_empty() {
        return Err(RpcError::invalid_params("`entries`: give at least one entry"));
    }
    let mut parent = leaf.map(str::to_string);
    let mut out = Vec::with_capacity(raw.len());
    for (i, value) in raw.into_iter().enumerate() {
        let Value::Object(mut obj) = value else {
            return Err(RpcError::invalid_params(format!("`entries[{i}]`: expected an object")));
        };
        if let Some(ty) = obj.get("type").and_then(Value::as_str) {
            if let Some((_, method)) = DAEMON_WRITTEN.iter().find(|(t, _)| *t == ty) {
                return Err(RpcError::invalid_params(format!(
                    "`entries[{i}].type`: `{ty}` entries are written by the daemon; use {method}"
                )));
            }
        }
        fill(&mut obj, "id", || Value::String(crate::util::new_id("e_")));
        fill(&mut obj, "ts", || Value::String(crate::util::now_rfc3339()));
        fill(&mut obj, "parentId", || parent.clone().map_or(Value::Null, Value::String));
        let entry: Entry = super::protocol::parse_params(&format!("entries[{i}]"), Value::Object(obj))
            .map_err(|e| RpcError::invalid_params(e.message.replacen(": invalid params", "", 1)))?;
        parent = Some(entry.id.clone());
        out.push(entry);
    }
    Ok(out)
}

fn fill(obj: &mut Map<String, Value>, key: &str, value: impl FnOnce() -> Value) {
    if obj.get(key).is_none_or(Value::is_null) {
        obj.insert(key.to_string(), value());
    }
}

/// A file path as recorded in the log: relative to the workspace when inside it.
pub fn workspace_relative(workspace: &Path, path: &Path) -> String {
    path.strip_prefix(workspace).unwrap_or(path).to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_get_ids_timestamps_and_a_chain_of_parents() {
        let entries = prepare_entries(
            Some("leaf"),
            vec![
                json!({"type": "message", "role": "user", "content": [{"type": "text", "text": "hi"}]}),
                json!({"type": "file", "path": "a.rs", "op": "modified", "source": "tool", "id": "mine"}),
            ],
        )
        .unwrap();
        assert_eq!(entries[0].parent_id.as_deref(), Some("leaf"));
        assert!(entries[0].id.starts_with("e_"));
        assert_eq!(entries[1].id, "mine");
        assert_eq!(entries[1].parent_id.as_deref(), Some(entries[0].id.as_str()));
        assert!(!entries[0].ts.is_empty());
    }

    #[test]
    fn bad_entries_are_refused_naming_the_entry_and_field() {
        let e = prepare_entries(None, vec![]).unwrap_err();
        assert!(e.message.contains("`entries`"), "{}", e.message);
        let e = prepare_entries(None, vec![json!("text")]).unwrap_err();
        assert!(e.message.contains("`entries[0]`"), "{}", e.message);
        let e = prepare_entries(None, vec![json!({"type": "message", "role": "user"})]).unwrap_err();
        assert!(e.message.contains("entries[0]") && e.message.contains("content"), "{}", e.message);
        let e = prepare_entries(None, vec![json!({"type": "capsule"})]).unwrap_err();
        assert!(e.message.contains("soba/compact"), "{}", e.message);
        let e = prepare_entries(None, vec![json!({"type": "file", "path": "a", "op": "eaten", "source": "tool"})])
            .unwrap_err();
        assert!(e.message.contains("entries[0]") && e.message.contains("eaten"), "{}", e.message);
    }
}
