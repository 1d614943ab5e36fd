//! One task per live session: the only writer of its log.
//!
//! Every mutation of a session goes through its actor's queue, so writes are serialized without
//! locks. The actor publishes a [`Status`] snapshot after each change; `soba/budget` and
//! `soba/sessions` read that snapshot and never wait for the actor, so they answer at once
//! even while the actor is busy.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use serde_json::{Map, Value};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::client_model::ClientModel;
use super::connection::ConnectionConfig;
use super::protocol::{
    code, AppendResult, AutoCompactResult, BudgetReport, CancelResult, CapsuleCreateResult,
    CapsuleExportResult, CapsuleListResult, CapsuleLoadResult, CapsuleSummary, CapsuleTokensView,
    CheckpointResult, CompactionNotice, CompactionPhase, ContextResult, Control, OverflowResult,
    PreflightResult, PreviewAction, PreviewResult, RewindResult, RpcError, SessionClosedNotice,
    TurnCompleteResult,
};
use crate::flight::FlightLog;
use crate::inspect::budget_report;
use crate::summarize::breaker::Breaker;
use crate::summarize::summarizer::Summarizer;
use soba_core::compaction::plan::Plan;
use soba_core::compaction::run::{Barrier as Engine, Preflight};
use soba_core::compaction::{reasons, CompactionResult};
use soba_core::config::{Config, ConfigFile};
use soba_core::session::entry::{
    CheckpointKind, Entry, EntryBody, FileEntry, Outcome, SettingEntry, Usage,
};
use soba_core::session::log::{LogError, SessionLog};
use soba_core::session::trigger::Trigger;
use soba_core::session::view::ModelMessage;
use soba_core::tool_mapping::ToolMapping;
use soba_core::window::OverflowFigures;

/// What the actor tells every interested client.
#[derive(Debug, Clone)]
pub enum Event {
    BudgetChanged(BudgetReport),
    Compaction {
        workspace: String,
        /// Boxed: a notice with its result is several times the size of the other events.
        notice: Box<CompactionNotice>,
    },
    /// A degraded fallback was used; the text says why.
    Degraded {
        workspace: String,
        message: String,
    },
    SessionClosed(SessionClosedNotice),
}

impl Event {
    pub fn workspace(&self) -> &str {
        match self {
            Event::BudgetChanged(b) => &b.workspace,
            Event::Compaction { workspace, .. } | Event::Degraded { workspace, .. } => workspace,
            Event::SessionClosed(notice) => &notice.workspace,
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
    Append {
        entries: Vec<Value>,
        reply: Reply<AppendResult>,
    },
    Rewind {
        entry_id: String,
        reply: Reply<RewindResult>,
    },
    SetAutoCompact {
        enabled: bool,
        reply: Reply<AutoCompactResult>,
    },
    WatchedFiles {
        changes: Vec<FileEntry>,
    },
    Preflight {
        /// The connection asking: its inference is in flight once it has the input.
        client: ClientId,
        /// The connection's model, when it offered it (see [`ClientModel`]).
        model: Option<ClientModel>,
        /// Runs of entries whose content the client holds (see [`PreflightParams`]).
        omit_content_of: Vec<Vec<String>>,
        reply: Reply<PreflightResult>,
    },
    TurnComplete {
        usage: Option<Usage>,
        reply: Reply<TurnCompleteResult>,
    },
    Checkpoint {
        kind: CheckpointKind,
        label: String,
        reply: Reply<CheckpointResult>,
    },
    Overflow {
        figures: OverflowFigures,
        model: Option<ClientModel>,
        reply: Reply<OverflowResult>,
    },
    Compact {
        /// The connection asking: the agent whose inference is in flight may compact between
        /// its own inferences; anyone else waits for that inference to end.
        client: ClientId,
        model: Option<ClientModel>,
        instructions: Option<String>,
        mirror: Option<bool>,
        /// What made the client ask (`user`, or the agent's own automatic compaction).
        trigger: Trigger,
        reply: Reply<CompactionResult>,
    },
    Cancel {
        reply: Reply<CancelResult>,
    },
    CapsuleCreate {
        title: String,
        reply: Reply<CapsuleCreateResult>,
    },
    CapsuleExport {
        checkpoint_id: String,
        path: PathBuf,
        reply: Reply<CapsuleExportResult>,
    },
    CapsuleLoad {
        path: PathBuf,
        reply: Reply<CapsuleLoadResult>,
    },
    CapsuleList {
        reply: Reply<CapsuleListResult>,
    },
    Context {
        limit: usize,
        reply: Reply<ContextResult>,
    },
    /// SOBA follows the agent's transcript into this session: the agent compacts itself.
    Follow {
        control: Control,
        agent: Following,
        reply: Reply<BudgetReport>,
    },
    /// What an action would send, changing nothing.
    Preview {
        action: PreviewAction,
        reply: Reply<PreviewResult>,
    },
    /// Stop taking input and release the log once everything before this is done.
    Close {
        reply: Reply<()>,
    },
    /// A spawned generation finished (internal).
    Generated {
        operation_id: String,
        /// Boxed: a capsule state is far larger than any other command.
        generated: Box<crate::summarize::Generation>,
    },
}

/// A cheap, cloneable reference to a live session.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    pub id: String,
    pub workspace: PathBuf,
    pub path: PathBuf,
    /// For the clients that open it: config settings left out (an untrusted workspace's
    /// summarizer) and what loading the log skipped or re-attached.
    pub warnings: Vec<String>,
    /// The summarizer as the session holds it when a client's keys built it: handed the keys
    /// of the next client that opens the session once that client is gone.
    pub keyed_summarizer: Option<Arc<super::connection::ConnectionBound>>,
    /// Its settings and opening connection, to open it the same way after an idle close.
    pub opened_with: OpenedWith,
    tx: mpsc::UnboundedSender<Command>,
    status: watch::Receiver<Status>,
    activity: Arc<Activity>,
}

/// What a session was opened with besides its log, kept so that a session closed for being
/// idle opens again with the same settings, and with its client's config and keys while that
/// client is connected. The connection is held weakly: its keys go when it closes.
#[derive(Clone, Debug, Default)]
pub struct OpenedWith {
    pub settings: Option<ConfigFile>,
    pub connection: Option<Weak<ConnectionConfig>>,
}

/// What the actor is in the middle of, kept current after every command, so that the registry
/// can tell a session that may be closed while idle from one whose work a close would cut off.
#[derive(Debug, Default)]
struct Activity {
    /// A compaction runs, or an explicit one waits for the agent's inference to end.
    compacting: AtomicBool,
    /// The connection whose inference is in flight; 0 for none (connection ids start at 1).
    inference_client: AtomicU64,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Command::Append { .. } => "Append",
            Command::Rewind { .. } => "Rewind",
            Command::SetAutoCompact { .. } => "SetAutoCompact",
            Command::WatchedFiles { .. } => "WatchedFiles",
            Command::Preflight { .. } => "Preflight",
            Command::TurnComplete { .. } => "TurnComplete",
            Command::Checkpoint { .. } => "Checkpoint",
            Command::Overflow { .. } => "Overflow",
            Command::Compact { .. } => "Compact",
            Command::Cancel { .. } => "Cancel",
            Command::CapsuleCreate { .. } => "CapsuleCreate",
            Command::CapsuleExport { .. } => "CapsuleExport",
            Command::CapsuleLoad { .. } => "CapsuleLoad",
            Command::CapsuleList { .. } => "CapsuleList",
            Command::Context { .. } => "Context",
            Command::Follow { .. } => "Follow",
            Command::Preview { .. } => "Preview",
            Command::Close { .. } => "Close",
            Command::Generated { .. } => "Generated",
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

    /// Whether closing the session now would cut off work: a compaction running or queued, or
    /// an inference in flight for a connection that `connected` says is still there (an agent
    /// that disconnected mid-inference will not come back to end it).
    pub fn busy(&self, connected: impl Fn(ClientId) -> bool) -> bool {
        if self.activity.compacting.load(Ordering::Acquire) {
            return true;
        }
        match self.activity.inference_client.load(Ordering::Acquire) {
            0 => false,
            client => connected(client),
        }
    }

    async fn request<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, RpcError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(make(reply)).map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }

    pub async fn append(&self, entries: Vec<Value>) -> Result<AppendResult, RpcError> {
        self.request(|reply| Command::Append { entries, reply })
            .await
    }

    pub async fn rewind(&self, entry_id: String) -> Result<RewindResult, RpcError> {
        self.request(|reply| Command::Rewind { entry_id, reply })
            .await
    }

    pub async fn set_auto_compact(&self, enabled: bool) -> Result<AutoCompactResult, RpcError> {
        self.request(|reply| Command::SetAutoCompact { enabled, reply })
            .await
    }

    /// The model input for the next inference, after any compaction the barrier requires.
    /// `model`: the asking client's offer to summarize with the agent's own model, for a
    /// compaction this preflight starts.
    /// `omit_content_of`: runs of entries whose content the client holds, left out of the
    /// answer where it shows them whole (see [`PreflightResult::omitted`]).
    pub async fn preflight(
        &self,
        client: ClientId,
        model: Option<ClientModel>,
        omit_content_of: Vec<Vec<String>>,
    ) -> Result<PreflightResult, RpcError> {
        self.request(|reply| Command::Preflight {
            client,
            model,
            omit_content_of,
            reply,
        })
        .await
    }

    pub async fn turn_complete(
        &self,
        usage: Option<Usage>,
    ) -> Result<TurnCompleteResult, RpcError> {
        self.request(|reply| Command::TurnComplete { usage, reply })
            .await
    }

    pub async fn checkpoint(
        &self,
        kind: CheckpointKind,
        label: String,
    ) -> Result<CheckpointResult, RpcError> {
        self.request(|reply| Command::Checkpoint { kind, label, reply })
            .await
    }

    pub async fn overflow(
        &self,
        figures: OverflowFigures,
        model: Option<ClientModel>,
    ) -> Result<OverflowResult, RpcError> {
        self.request(|reply| Command::Overflow {
            figures,
            model,
            reply,
        })
        .await
    }

    pub async fn compact(
        &self,
        client: ClientId,
        model: Option<ClientModel>,
        instructions: Option<String>,
        mirror: Option<bool>,
        trigger: Trigger,
    ) -> Result<CompactionResult, RpcError> {
        self.request(|reply| Command::Compact {
            client,
            model,
            instructions,
            mirror,
            trigger,
            reply,
        })
        .await
    }

    pub async fn cancel(&self) -> Result<CancelResult, RpcError> {
        self.request(|reply| Command::Cancel { reply }).await
    }

    pub async fn capsule_create(&self, title: String) -> Result<CapsuleCreateResult, RpcError> {
        self.request(|reply| Command::CapsuleCreate { title, reply })
            .await
    }

    pub async fn capsule_export(
        &self,
        checkpoint_id: String,
        path: PathBuf,
    ) -> Result<CapsuleExportResult, RpcError> {
        self.request(|reply| Command::CapsuleExport {
            checkpoint_id,
            path,
            reply,
        })
        .await
    }

    pub async fn capsule_load(&self, path: PathBuf) -> Result<CapsuleLoadResult, RpcError> {
        self.request(|reply| Command::CapsuleLoad { path, reply })
            .await
    }

    pub async fn capsule_list(&self) -> Result<CapsuleListResult, RpcError> {
        self.request(|reply| Command::CapsuleList { reply }).await
    }

    /// What fills the context window, with the `limit` largest entries.
    pub async fn context(&self, limit: usize) -> Result<ContextResult, RpcError> {
        self.request(|reply| Command::Context { limit, reply })
            .await
    }

    /// Mark the session as one SOBA follows (see [`Control`]); the budget says so from now on.
    pub async fn follow(
        &self,
        control: Control,
        agent: Following,
    ) -> Result<BudgetReport, RpcError> {
        self.request(|reply| Command::Follow {
            control,
            agent,
            reply,
        })
        .await
    }

    /// What compact, capsule load or rewind would send, without doing it.
    pub async fn preview(&self, action: PreviewAction) -> Result<PreviewResult, RpcError> {
        self.request(|reply| Command::Preview { action, reply })
            .await
    }

    /// Finish what was asked before, end a running compaction as `soba/cancel` does, then stop
    /// and release the log; returns once the log is free for another writer.
    pub async fn close(&self) -> Result<(), RpcError> {
        self.request(|reply| Command::Close { reply }).await
    }

    /// Record file changes seen on disk. Fire and forget: the watcher never waits on a session.
    pub fn watched_files(&self, changes: Vec<FileEntry>) {
        let _ = self.tx.send(Command::WatchedFiles { changes });
    }
}

/// Who waits for the outcome of the running compaction.
enum Waiter {
    Preflight {
        client: ClientId,
        omit_content_of: Vec<Vec<String>>,
        reply: Reply<PreflightResult>,
    },
    Overflow(Reply<OverflowResult>),
    Compact(Reply<CompactionResult>),
    Handoff {
        title: String,
        reply: Reply<CapsuleCreateResult>,
    },
}

/// A compaction between plan and commit.
struct Running {
    plan: Arc<Plan>,
    cancel: CancellationToken,
    started: Instant,
    waiter: Waiter,
    /// Input that arrived meanwhile, applied in order after the outcome.
    queued: VecDeque<Command>,
}

struct Actor {
    log: SessionLog,
    config: Config,
    /// The layers `config` was resolved from, kept to resolve it again when the log switches
    /// the session's model (a followed agent named its model, or changed it).
    config_files: Vec<ConfigFile>,
    mapping: ToolMapping,
    summarizer: Option<Arc<dyn Summarizer>>,
    /// The breaker of runs on a client's model (see [`ClientModel`]), kept across compactions.
    client_breaker: Arc<Breaker>,
    /// The client model the latest compaction request offered, for the budget's summarizer.
    offered_model: Option<String>,
    workspace: String,
    status: watch::Sender<Status>,
    events: broadcast::Sender<Event>,
    flight: FlightLog,
    /// Our own queue, for generation tasks to report back on.
    me: mpsc::WeakUnboundedSender<Command>,
    running: Option<Running>,
    /// The connection whose inference is in flight: a preflight handed it input and no agent
    /// has appended, completed a turn, reported an overflow, rewound or asked again since.
    inference_in_flight: Option<ClientId>,
    /// An explicit `soba/compact` that arrived during an inference, run when it ends.
    queued_compact: Option<QueuedCompact>,
    /// Set by `Close`: whoever waits for the log to be released.
    closing: Option<Reply<()>>,
    activity: Arc<Activity>,
    unseen_store: Option<PathBuf>,
    /// What the session last taught the store, so that only a change is written.
    unseen_taught: soba_core::session::unseen_measure::UnseenObservations,
    /// Who compacts this session: SOBA, or the followed agent itself.
    control: Control,
    /// The agent SOBA follows into this session, and what its settings say.
    following: Option<Following>,
}

/// A followed agent and its own settings (read by `soba/attach`).
#[derive(Debug, Clone)]
pub struct Following {
    pub agent: crate::attach::discover::Agent,
    pub settings: crate::attach::agent_settings::AgentSettings,
    /// SOBA's limits are those of the settings' default model: the transcript has named none
    /// yet, and SOBA's catalog knows the default.
    pub settings_model_in_use: bool,
    /// The transcript named the agent's model when SOBA started following it (the session
    /// header's model is then the agent's; otherwise it is SOBA's default until a `setting`
    /// entry names the agent's).
    pub header_names_model: bool,
}

/// One connection to the daemon (an agent, an editor), as the session actor tells them apart.
pub type ClientId = u64;

/// An editor's `/compact` waiting for the agent's inference to end (spec §3: SOBA does not
/// generate summaries concurrently with model work).
struct QueuedCompact {
    client: ClientId,
    model: Option<ClientModel>,
    instructions: Option<String>,
    mirror: Option<bool>,
    trigger: Trigger,
    reply: Reply<CompactionResult>,
}

impl Command {
    /// Whether the agent sending this shows that its inference has ended: it appended what the
    /// model said, ended the turn, reported an overflow, moved the leaf, or asks for the next
    /// input.
    fn ends_inference(&self) -> bool {
        matches!(
            self,
            Command::Append { .. }
                | Command::TurnComplete { .. }
                | Command::Overflow { .. }
                | Command::Rewind { .. }
                | Command::Preflight { .. }
        )
    }
}

/// What a session's actor is started with.
pub struct ActorSetup {
    pub log: SessionLog,
    pub config: Config,
    pub config_files: Vec<ConfigFile>,
    pub summarizer: Option<Arc<dyn Summarizer>>,
    pub flight: FlightLog,
    pub events: broadcast::Sender<Event>,
    /// Where this machine keeps what it learned about agents' unseen context
    /// ([`soba_core::session::unseen_priors`]); `None`: the agents' defaults, nothing learned.
    pub unseen_store: Option<PathBuf>,
}

/// Start the actor of an opened log.
pub fn spawn(setup: ActorSetup) -> SessionHandle {
    let ActorSetup {
        log,
        config,
        config_files,
        summarizer,
        flight,
        events,
        unseen_store,
    } = setup;
    let id = log.session().header.id.clone();
    let workspace = PathBuf::from(&log.session().header.workspace);
    let path = log.path().to_path_buf();
    let (tx, rx) = mpsc::unbounded_channel();
    let mut actor = Actor {
        workspace: workspace.display().to_string(),
        status: watch::Sender::new(placeholder_status()),
        log,
        mapping: config.tool_mapping.clone(),
        config,
        config_files,
        summarizer,
        client_breaker: Arc::new(Breaker::new(std::time::Duration::from_millis(
            crate::summarize::client::DEFAULT_COOLDOWN_MS,
        ))),
        offered_model: None,
        events,
        flight,
        me: tx.downgrade(),
        running: None,
        inference_in_flight: None,
        queued_compact: None,
        closing: None,
        activity: Arc::new(Activity::default()),
        unseen_store,
        unseen_taught: Default::default(),
        control: Control::driven(),
        following: None,
    };
    actor
        .log
        .session_mut()
        .configure_counting(&actor.config.model);
    actor.load_unseen_prior();
    actor.learn_unseen();
    // Before the first budget: entries the side file did not hold are counted here, on
    // several threads, and recorded for the next open.
    actor.log.save_token_counts();
    actor.status.send_replace(actor.snapshot());
    let status = actor.status.subscribe();
    let activity = actor.activity.clone();
    tokio::spawn(actor.run(rx));
    SessionHandle {
        id,
        workspace,
        path,
        warnings: Vec::new(),
        keyed_summarizer: None,
        opened_with: Default::default(),
        tx,
        status,
        activity,
    }
}

fn placeholder_status() -> Status {
    Status {
        budget: BudgetReport {
            session_id: String::new(),
            workspace: String::new(),
            budget: Value::Null,
            compacting: false,
            compact_queued: false,
            control: Control::driven(),
            followed: None,
        },
        entries: 0,
        leaf_id: None,
    }
}

fn log_failure(e: LogError) -> RpcError {
    match e {
        LogError::Tree { cause, .. } => RpcError::invalid_params(format!("entries: {cause}")),
        other => RpcError::internal(other.to_string()),
    }
}

/// The error for a preflight that cannot hand out input.
fn budget_exceeded(r: CompactionResult) -> RpcError {
    let (code, message) = if reasons::is_overflow_exhausted(&r.reason) {
        (code::OVERFLOW_RETRY_USED, r.reason.clone())
    } else if r.reason.contains(reasons::CONTEXT_BUDGET_EXCEEDED) {
        // The barrier's reasons already say it; saying it again reads as a stutter.
        (code::BUDGET_EXCEEDED, r.reason.clone())
    } else {
        (
            code::BUDGET_EXCEEDED,
            format!("{}: {}", reasons::CONTEXT_BUDGET_EXCEEDED, r.reason),
        )
    };
    let data = serde_json::to_value(&r).unwrap_or(Value::Null);
    RpcError::new(code, message).with_data(serde_json::json!({ "compaction": data }))
}

/// A hand-off capsule that was not written, with the outcome saying why.
fn no_capsule(r: CompactionResult) -> RpcError {
    let data = serde_json::to_value(&r).unwrap_or(Value::Null);
    RpcError::internal(format!("no capsule created ({}): {}", r.outcome, r.reason))
        .with_data(serde_json::json!({ "compaction": data }))
}

impl Actor {
    fn capsule_list(&self) -> CapsuleListResult {
        let rows = soba_core::capsule::handoff::list_capsules(self.log.session());
        CapsuleListResult {
            capsules: rows
                .into_iter()
                .map(|r| CapsuleSummary {
                    tokens: CapsuleTokensView {
                        before: r.tokens_before,
                        after: r.tokens_after,
                        capsule: self.capsule_size(&r.checkpoint_id),
                    },
                    checkpoint_id: r.checkpoint_id,
                    entry_id: r.entry_id,
                    title: r.title,
                    trigger: r.trigger,
                    quality: r.quality,
                    ts: r.ts,
                    origin: r.origin,
                })
                .collect(),
        }
    }

    /// A capsule's own size on the budget's scale: what every view shows for it.
    fn capsule_size(&self, checkpoint_id: &str) -> u64 {
        let session = self.log.session();
        soba_core::capsule::handoff::capsule_tokens(session, checkpoint_id)
            .map_or(0, |counted| session.calibration().apply(counted))
    }

    fn capsule_export(
        &self,
        checkpoint_id: &str,
        path: &Path,
    ) -> Result<CapsuleExportResult, RpcError> {
        if !path.is_absolute() {
            return Err(RpcError::invalid_params(format!(
                "`path`: give an absolute path, got `{}`",
                path.display()
            )));
        }
        if path.exists() {
            return Err(RpcError::invalid_params(format!(
                "`path`: {} already exists; choose another path or remove it",
                path.display()
            )));
        }
        let exported =
            soba_core::capsule::handoff::export_capsule(self.log.session(), checkpoint_id)
                .map_err(|e| RpcError::from(e).about_param("checkpointId"))?;
        soba_core::capsule::portable::write_capsule_file(path, &exported.text)
            .map_err(|e| RpcError::internal(e.to_string()))?;
        Ok(CapsuleExportResult {
            path: path.display().to_string(),
        })
    }

    fn capsule_load(&mut self, path: &Path) -> Result<CapsuleLoadResult, RpcError> {
        if let Some(refused) = self.control.refusal("soba/capsule/load") {
            return Err(refused);
        }
        let parsed = soba_core::capsule::portable::read_capsule_file(path)
            .map_err(|e| RpcError::invalid_params(format!("`path`: {e}")))?;
        let shown = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let r = soba_core::capsule::handoff::load_capsule(
            &mut self.log,
            &parsed,
            &shown.display().to_string(),
        )
        .map_err(RpcError::from);
        self.publish();
        Ok(CapsuleLoadResult {
            checkpoint_id: r?.checkpoint_id,
            session_id: self.session_id().to_string(),
        })
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        while let Some(cmd) = rx.recv().await {
            self.handle(cmd);
            self.record_activity();
            if self.closing.is_some() {
                break;
            }
        }
        if let Some(reply) = self.closing.take() {
            // Input sent after the close fails at once; the log and its lock go with the actor,
            // before the answer, so the closer can hand the file to another writer.
            drop(rx);
            drop(self);
            let _ = reply.send(Ok(()));
        }
    }

    fn record_activity(&self) {
        let compacting = self.running.is_some() || self.queued_compact.is_some();
        self.activity
            .compacting
            .store(compacting, Ordering::Release);
        self.activity
            .inference_client
            .store(self.inference_in_flight.unwrap_or(0), Ordering::Release);
    }

    fn engine(&self) -> Engine<'_> {
        Engine {
            config: &self.config,
            mapping: &self.mapping,
        }
    }

    fn handle(&mut self, cmd: Command) {
        if self.closing.is_some() {
            // Queued behind a close: dropping it answers its sender that the session stopped.
            return;
        }
        if let Some(running) = &mut self.running {
            match cmd {
                // A close ends the compaction as a cancel does, then waits its turn.
                Command::Close { reply } => {
                    running.cancel.cancel();
                    running.queued.push_back(Command::Close { reply });
                }
                // A rewind is applied even during a compaction: it moves the leaf, so the
                // running compaction ends `stale` and appends nothing.
                Command::Rewind { entry_id, reply } => {
                    let r = self.rewind(&entry_id);
                    let _ = reply.send(r);
                }
                Command::Preview { action, reply } => {
                    let _ = reply.send(self.preview(action));
                }
                Command::Cancel { reply } => {
                    running.cancel.cancel();
                    let _ = reply.send(Ok(CancelResult { cancelled: true }));
                }
                Command::Generated {
                    operation_id,
                    generated,
                } => self.finish(operation_id, *generated),
                // Reads answer at once.
                Command::CapsuleList { reply } => {
                    let _ = reply.send(Ok(self.capsule_list()));
                }
                Command::Context { limit, reply } => {
                    let _ = reply.send(Ok(self.context(limit)));
                }
                Command::CapsuleExport {
                    checkpoint_id,
                    path,
                    reply,
                } => {
                    let _ = reply.send(self.capsule_export(&checkpoint_id, &path));
                }
                other => running.queued.push_back(other),
            }
            return;
        }
        if cmd.ends_inference() {
            self.inference_in_flight = None;
            if let Some(queued) = self.queued_compact.take() {
                self.publish();
                if matches!(cmd, Command::Preflight { .. }) {
                    // The queued compaction runs first; the preflight then sees its capsule.
                    self.compact(
                        queued.model,
                        queued.instructions,
                        queued.mirror,
                        queued.trigger,
                        queued.reply,
                    );
                    self.handle(cmd);
                } else {
                    self.handle(cmd);
                    self.handle(Command::Compact {
                        client: queued.client,
                        model: queued.model,
                        instructions: queued.instructions,
                        mirror: queued.mirror,
                        trigger: queued.trigger,
                        reply: queued.reply,
                    });
                }
                return;
            }
        }
        match cmd {
            Command::Append { entries, reply } => {
                let r = self.append(entries);
                let _ = reply.send(r);
            }
            Command::SetAutoCompact { enabled, reply } => {
                let r = self.set_auto_compact(enabled);
                let _ = reply.send(r);
            }
            Command::WatchedFiles { changes } => self.record_files(changes),
            Command::Rewind { entry_id, reply } => {
                let r = self.rewind(&entry_id);
                let _ = reply.send(r);
            }
            Command::Follow {
                control,
                agent,
                reply,
            } => {
                self.control = control;
                self.following = Some(agent);
                self.use_settings_default_model();
                let _ = reply.send(Ok(self.publish()));
            }
            Command::Preview { action, reply } => {
                let _ = reply.send(self.preview(action));
            }
            Command::Cancel { reply } => {
                let cancelled = self.queued_compact.take().map(|q| {
                    let _ = q
                        .reply
                        .send(Ok(self.not_run(q.trigger, reasons::CANCELLED)));
                    self.publish();
                });
                let _ = reply.send(Ok(CancelResult {
                    cancelled: cancelled.is_some(),
                }));
            }
            Command::Close { reply } => {
                if let Some(q) = self.queued_compact.take() {
                    let _ = q.reply.send(Ok(self.not_run(
                        q.trigger,
                        "the session closed before the agent's inference ended",
                    )));
                }
                self.closing = Some(reply)
            }
            Command::TurnComplete { usage, reply } => {
                let r = self.engine_step(|e, log| e.turn_complete(log, usage));
                let _ = reply.send(r.map(|intent_recorded| TurnCompleteResult { intent_recorded }));
            }
            Command::Checkpoint { kind, label, reply } => {
                let r = self.engine_step(|e, log| e.checkpoint(log, kind, label));
                let _ = reply.send(r.map(|(entry_id, intent_recorded)| CheckpointResult {
                    entry_id,
                    intent_recorded,
                }));
            }
            Command::Preflight {
                client,
                model,
                omit_content_of,
                reply,
            } => self.preflight(client, model, omit_content_of, reply),
            Command::Overflow {
                figures,
                model,
                reply,
            } => match self.engine_step(|e, log| e.overflow(log, figures)) {
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
                Ok(Ok(plan)) => self.start(plan, Waiter::Overflow(reply), model),
                Ok(Err(ended)) => {
                    self.record_flight(&ended);
                    let r = if ended.reason == reasons::OVERFLOW_RETRY_USED {
                        Err(budget_exceeded(ended))
                    } else {
                        Ok(OverflowResult {
                            compaction: ended,
                            retry_allowed: false,
                        })
                    };
                    let _ = reply.send(r);
                }
            },
            Command::Compact {
                client,
                model,
                instructions,
                mirror,
                trigger,
                reply,
            } => {
                if let Some(refused) = self.control.refusal("soba/compact") {
                    let _ = reply.send(Err(refused));
                    return;
                }
                // The agent itself asking is between its inferences (pi's `/compact`); only
                // another client's request would run beside the model's work.
                if self.inference_in_flight == Some(client) {
                    self.inference_in_flight = None;
                }
                if self.inference_in_flight.is_none() {
                    self.compact(model, instructions, mirror, trigger, reply);
                } else if self.queued_compact.is_some() {
                    let _ = reply.send(Err(RpcError::new(
                        code::INVALID_REQUEST,
                        "a /compact is already queued to run when the agent's inference ends; \
                         wait for it, or cancel it with soba/cancel and send this one again",
                    )));
                } else {
                    self.queued_compact = Some(QueuedCompact {
                        client,
                        model,
                        instructions,
                        mirror,
                        trigger,
                        reply,
                    });
                    self.publish();
                }
            }
            Command::CapsuleList { reply } => {
                let _ = reply.send(Ok(self.capsule_list()));
            }
            Command::Context { limit, reply } => {
                let _ = reply.send(Ok(self.context(limit)));
            }
            Command::CapsuleExport {
                checkpoint_id,
                path,
                reply,
            } => {
                let _ = reply.send(self.capsule_export(&checkpoint_id, &path));
            }
            Command::CapsuleLoad { path, reply } => {
                let r = self.capsule_load(&path);
                let _ = reply.send(r);
            }
            Command::CapsuleCreate { title, reply } => {
                match self.engine_step(|e, log| e.handoff(log, title.clone())) {
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                    Ok(Ok(plan)) => self.start(plan, Waiter::Handoff { title, reply }, None),
                    Ok(Err(ended)) => {
                        self.record_flight(&ended);
                        let _ = reply.send(Err(no_capsule(ended)));
                    }
                }
            }
            // A late report of a compaction that already ended (cannot happen: one runs at a time).
            Command::Generated { .. } => {}
        }
    }

    /// A compaction a client asked for, now.
    fn compact(
        &mut self,
        model: Option<ClientModel>,
        instructions: Option<String>,
        mirror: Option<bool>,
        trigger: Trigger,
        reply: Reply<CompactionResult>,
    ) {
        // Only a `/compact` is mirrored unless asked: the setting is about explicit compacts.
        let mirror =
            mirror.unwrap_or(trigger == Trigger::User && self.config.mirror_explicit_compacts);
        match self.engine_step(|e, log| e.requested(log, trigger, instructions, mirror)) {
            Err(e) => {
                let _ = reply.send(Err(e));
            }
            Ok(Ok(plan)) => self.start(plan, Waiter::Compact(reply), model),
            Ok(Err(ended)) => {
                self.record_flight(&ended);
                let _ = reply.send(Ok(ended));
            }
        }
    }

    /// The answer to a queued `/compact` that never started: nothing was planned or written.
    fn not_run(&self, trigger: Trigger, reason: &str) -> CompactionResult {
        let budget = self.engine().measure(self.log.session());
        CompactionResult::ended(
            "",
            trigger,
            Outcome::Cancelled,
            reason,
            budget.effective_tokens,
            budget.limits,
        )
    }

    /// Run one engine step on the log and publish the new state.
    fn engine_step<T>(
        &mut self,
        f: impl FnOnce(&Engine<'_>, &mut SessionLog) -> Result<T, LogError>,
    ) -> Result<T, RpcError> {
        let engine = Engine {
            config: &self.config,
            mapping: &self.mapping,
        };
        let r = f(&engine, &mut self.log).map_err(log_failure);
        self.publish();
        r
    }

    fn preflight(
        &mut self,
        client: ClientId,
        model: Option<ClientModel>,
        omit_content_of: Vec<Vec<String>>,
        reply: Reply<PreflightResult>,
    ) {
        if model.is_some() {
            self.offer(model.as_ref());
        }
        match self.engine_step(|e, log| e.preflight(log)) {
            Err(e) => {
                let _ = reply.send(Err(e));
            }
            Ok(Preflight::Compact(plan)) => self.start(
                *plan,
                Waiter::Preflight {
                    client,
                    omit_content_of,
                    reply,
                },
                model,
            ),
            Ok(other) => {
                let answer = self
                    .preflight_answer(other)
                    .map(|r| self.content_omitted(r, &omit_content_of));
                self.inference_in_flight = answer.is_ok().then_some(client);
                let _ = reply.send(answer);
            }
        }
    }

    /// `result` without the content of each run of `runs` it shows whole, in order, each
    /// entry's content as logged (the client that asked holds it: see [`PreflightParams`]).
    fn content_omitted(
        &self,
        mut result: PreflightResult,
        runs: &[Vec<String>],
    ) -> PreflightResult {
        if runs.is_empty() {
            return result;
        }
        let session = self.log.session();
        let by_first: HashMap<&str, &[String]> = runs
            .iter()
            .filter_map(|run| Some((run.first()?.as_str(), run.as_slice())))
            .collect();
        let shown_as_logged = |m: &ModelMessage, id: &str| {
            m.entry_id.as_deref() == Some(id)
                && session.get(id).is_some_and(|entry| match &entry.body {
                    EntryBody::Message(e) => e.content == m.content,
                    EntryBody::ToolResult(e) => e.content == m.content,
                    _ => false,
                })
        };
        let mut pos = 0;
        while pos < result.messages.len() {
            let run = result.messages[pos]
                .entry_id
                .as_deref()
                .and_then(|id| by_first.get(id))
                .filter(|run| {
                    result.messages.len() - pos >= run.len()
                        && run
                            .iter()
                            .zip(&result.messages[pos..])
                            .all(|(id, m)| shown_as_logged(m, id))
                });
            let Some(run) = run else {
                pos += 1;
                continue;
            };
            let n = run.len();
            for at in pos..pos + n {
                result.messages[at].content = Vec::new();
                result.omitted.push(at);
            }
            pos += n;
        }
        result
    }

    fn preflight_answer(&self, p: Preflight) -> Result<PreflightResult, RpcError> {
        match p {
            Preflight::Ready {
                messages,
                tokens,
                skipped,
            } => {
                if let Some(s) = &skipped {
                    self.record_flight(s);
                }
                Ok(PreflightResult {
                    messages,
                    tokens,
                    compaction: skipped,
                    omitted: Vec::new(),
                })
            }
            Preflight::Failed(r) => {
                if !r.operation_id.is_empty() {
                    self.record_flight(&r);
                }
                Err(budget_exceeded(r))
            }
            Preflight::Compact(_) => unreachable!("handled by the caller"),
        }
    }

    /// Begin the barrier: announce it, and write the summary in a task of its own so that this
    /// actor keeps answering (budget, rewind, cancel) and queueing input meanwhile.
    /// Whether this session's capsules may be written by a client's model: its config sets no
    /// summarizer block, and nothing else (a daemon-wide summarizer) writes them.
    fn takes_client_models(&self) -> bool {
        self.summarizer.is_none() && !self.config.summarizer_configured
    }

    /// Remember the model a client offered, for the budget's `summarizer.uses`.
    fn offer(&mut self, model: Option<&ClientModel>) {
        if !self.takes_client_models() {
            return;
        }
        let described = model.map(|m| m.describe(&self.config.model.name));
        if described.is_some() && described != self.offered_model {
            self.offered_model = described;
            self.publish();
        }
    }

    /// Who writes the capsule of `plan`: the configured summarizer; else the model of the
    /// client whose request started it, when it offered one and the config leaves the choice
    /// open; else nobody (the local builder).
    fn summarizer_for(
        &mut self,
        plan: &Plan,
        model: Option<ClientModel>,
    ) -> Option<Arc<dyn Summarizer>> {
        if let Some(s) = &self.summarizer {
            return Some(s.clone());
        }
        if !self.takes_client_models() {
            return None;
        }
        let model = model?;
        self.offered_model = Some(model.describe(&self.config.model.name));
        Some(Arc::new(model.summarizer(
            self.session_id(),
            &plan.operation_id,
            &self.config.model,
            self.client_breaker.clone(),
        )))
    }

    fn start(&mut self, plan: Plan, waiter: Waiter, model: Option<ClientModel>) {
        let summarizer = self.summarizer_for(&plan, model);
        let plan = Arc::new(plan);
        let cancel = CancellationToken::new();
        self.running = Some(Running {
            plan: plan.clone(),
            cancel: cancel.clone(),
            started: Instant::now(),
            waiter,
            queued: VecDeque::new(),
        });
        self.notice(&plan, CompactionPhase::Start, None, None, None);
        self.publish();
        let Some(me) = self.me.upgrade() else { return };
        let events = self.events.clone();
        let (session_id, workspace) = (self.session_id().to_string(), self.workspace.clone());
        tokio::spawn(async move {
            let last = AtomicU8::new(0);
            let progress_plan = plan.clone();
            let progress = move |pct: u8| {
                // Only changes are worth a message.
                if last.swap(pct, Ordering::Relaxed) != pct {
                    let notice = CompactionNotice {
                        session_id: session_id.clone(),
                        operation_id: progress_plan.operation_id.clone(),
                        phase: CompactionPhase::Progress,
                        trigger: progress_plan.trigger.as_str().to_string(),
                        percent: Some(pct.min(100)),
                        result: None,
                        message: None,
                        title: None,
                    };
                    let _ = events.send(Event::Compaction {
                        workspace: workspace.clone(),
                        notice: Box::new(notice),
                    });
                }
            };
            let generated =
                crate::summarize::generate_checked(&plan, summarizer.as_deref(), cancel, &progress)
                    .await;
            let _ = me.send(Command::Generated {
                operation_id: plan.operation_id.clone(),
                generated: Box::new(generated),
            });
        });
    }

    /// End the barrier: commit, tell everyone, apply queued input in order, answer the waiter.
    fn finish(&mut self, operation_id: String, generation: crate::summarize::Generation) {
        let Some(running) = self
            .running
            .take_if(|r| r.plan.operation_id == operation_id)
        else {
            return;
        };
        let Running {
            plan,
            cancel,
            started,
            waiter,
            queued,
        } = running;
        let duration_ms = started.elapsed().as_millis() as u64;
        let committed = soba_core::compaction::run::commit(
            &mut self.log,
            &plan,
            generation.generated.clone(),
            cancel.is_cancelled(),
            duration_ms,
        )
        .map(|mut result| {
            let corrections = generation.annotate(&mut result);
            (result, corrections)
        });
        let outcome = committed
            .map(|(result, corrections)| {
                self.flight
                    .record_corrected(self.session_id(), &result, corrections);
                result
            })
            .map_err(|e| RpcError::internal(format!("the compaction could not be written: {e}")));
        match &outcome {
            Ok(result) => {
                let line = result.completion_line();
                self.notice(
                    &plan,
                    CompactionPhase::End,
                    None,
                    Some(result.clone()),
                    Some(line),
                );
                if result.fallback {
                    let _ = self.events.send(Event::Degraded {
                        workspace: self.workspace.clone(),
                        message: format!(
                            "The compaction used the local capsule: {}",
                            result.reason
                        ),
                    });
                }
            }
            Err(e) => self.notice(
                &plan,
                CompactionPhase::End,
                None,
                None,
                Some(e.message.clone()),
            ),
        }
        self.publish();
        for cmd in queued {
            self.handle(cmd);
        }
        // Queued input may have started another compaction; the waiter's answer is about this one.
        match waiter {
            Waiter::Compact(reply) => {
                let _ = reply.send(outcome);
            }
            Waiter::Handoff { title, reply } => {
                let r = outcome.and_then(|r| match (&r.checkpoint_id, r.outcome) {
                    (Some(ck), Outcome::Completed) => Ok(CapsuleCreateResult {
                        tokens: self.capsule_size(ck),
                        checkpoint_id: ck.clone(),
                        title,
                        session_tokens: r.tokens_before,
                    }),
                    _ => Err(no_capsule(r)),
                });
                let _ = reply.send(r);
            }
            Waiter::Overflow(reply) => {
                let r = outcome.map(|compaction| OverflowResult {
                    retry_allowed: compaction.outcome == Outcome::Completed,
                    compaction,
                });
                let _ = reply.send(r);
            }
            Waiter::Preflight {
                client,
                omit_content_of,
                reply,
            } => {
                // The input as it is now, never a second compaction in a loop: a compaction that
                // could not bring the input under the hard limit is reported as such.
                let r = outcome.and_then(|compaction| {
                    match self
                        .engine()
                        .ready_input(&self.log, Some(compaction.clone()))
                    {
                        Preflight::Ready {
                            messages, tokens, ..
                        } => Ok(self.content_omitted(
                            PreflightResult {
                                messages,
                                tokens,
                                compaction: Some(compaction),
                                omitted: Vec::new(),
                            },
                            &omit_content_of,
                        )),
                        Preflight::Failed(mut r) => {
                            r.operation_id = compaction.operation_id.clone();
                            r.trigger = compaction.trigger;
                            if compaction.outcome != Outcome::Completed {
                                r.reason = format!("{}; {}", compaction.reason, r.reason);
                            }
                            Err(budget_exceeded(r))
                        }
                        Preflight::Compact(_) => unreachable!("ready_input never plans"),
                    }
                });
                self.inference_in_flight = r.is_ok().then_some(client);
                let _ = reply.send(r);
            }
        }
    }

    fn notice(
        &self,
        plan: &Plan,
        phase: CompactionPhase,
        percent: Option<u8>,
        result: Option<CompactionResult>,
        message: Option<String>,
    ) {
        let title = matches!(phase, CompactionPhase::Start)
            .then(|| super::protocol::progress_title(plan.trigger.as_str()));
        let notice = CompactionNotice {
            session_id: self.session_id().to_string(),
            operation_id: plan.operation_id.clone(),
            phase,
            trigger: plan.trigger.as_str().to_string(),
            percent,
            result,
            message,
            title,
        };
        let _ = self.events.send(Event::Compaction {
            workspace: self.workspace.clone(),
            notice: Box::new(notice),
        });
    }

    /// One flight record per operation; never any capsule text.
    fn record_flight(&self, r: &CompactionResult) {
        self.flight.record(self.session_id(), r);
    }

    fn session_id(&self) -> &str {
        &self.log.session().header.id
    }

    fn context(&self, limit: usize) -> ContextResult {
        let budget = self.budget();
        ContextResult {
            session_id: budget.session_id.clone(),
            workspace: budget.workspace.clone(),
            effective_tokens: budget.effective_tokens(),
            hard_limit: budget.hard_limit(),
            soft_limit: budget.budget["softLimit"].as_u64().unwrap_or(0),
            control: self.control.clone(),
            source: serde_json::from_value(budget.budget["source"].clone())
                .unwrap_or(soba_core::budget::MeasurementSource::Estimated),
            budget_breakdown: budget.budget["breakdown"].clone(),
            usage: crate::inspect::context_usage(self.log.session(), limit),
        }
    }

    fn budget(&self) -> BudgetReport {
        let s = self.log.session();
        let mut core = budget_report(
            s,
            self.config.limits_under(s.window_setting()),
            self.config.compaction.auto,
            &self.config.model.name,
            self.summarizer.as_deref(),
        );
        if let (true, Some(uses)) = (self.takes_client_models(), &self.offered_model) {
            core.summarizer = crate::inspect::SummarizerStatus {
                uses: uses.clone(),
                breaker: Some(self.client_breaker.state(Instant::now())),
            };
        }
        let followed = self.following.as_ref().map(|f| {
            let limits = self.config.limits_under(s.window_setting());
            let transcript_model = self.transcript_model(f);
            super::followed::followed_agent(
                &super::followed::Observed {
                    agent: f.agent,
                    settings: &f.settings,
                    transcript_model: transcript_model.as_deref(),
                    settings_model_in_use: f.settings_model_in_use,
                    context_window: limits.context_window,
                    max_output_tokens: limits.max_output_tokens,
                    hard_limit: limits.hard_limit,
                },
                s,
            )
        });
        BudgetReport::new(&s.header.id, &self.workspace, &core, self.running.is_some())
            .with_compact_queued(self.queued_compact.is_some())
            .with_control(self.control.clone())
            .with_followed(followed)
    }

    /// The model the followed agent's transcript named: the newest `setting` on the branch that
    /// names one, else the header's where the transcript named it when following began.
    fn transcript_model(&self, following: &Following) -> Option<String> {
        let s = self.log.session();
        s.settings_at(s.leaf())
            .model
            .and_then(|m| m.name)
            .or_else(|| {
                following
                    .header_names_model
                    .then(|| s.header.model.as_ref().and_then(|m| m.name.clone()))
                    .flatten()
            })
    }

    /// Before the followed agent's transcript names its model, SOBA's limits are those of the
    /// default its settings name, where SOBA's catalog knows it: never another model's.
    fn use_settings_default_model(&mut self) {
        let Some(following) = &self.following else {
            return;
        };
        if self.transcript_model(following).is_some() {
            return;
        }
        let Some(default) = &following.settings.default_model else {
            return;
        };
        let named = soba_core::config::ModelFile {
            name: Some(default.name.clone()),
            ..Default::default()
        };
        let resolved = Config::resolve(
            &self.config_files,
            Some(&named),
            &soba_core::config::Overrides::default(),
        );
        let in_use = match resolved {
            Ok(config) if !config.model_guessed => {
                self.log.session_mut().configure_counting(&config.model);
                let model_changed = config.model.name != self.config.model.name;
                self.config = config;
                if model_changed {
                    self.load_unseen_prior();
                }
                true
            }
            _ => false,
        };
        if let Some(f) = &mut self.following {
            f.settings_model_in_use = in_use;
        }
    }

    fn preview(&self, action: PreviewAction) -> Result<PreviewResult, RpcError> {
        let session = self.log.session();
        let budget = self.budget();
        let not_in_log = budget.budget["breakdown"]["notInLog"].as_u64().unwrap_or(0);
        let (name, title, preview) = match action {
            PreviewAction::Compact { instructions } => (
                "compact",
                "What SOBA would send after compacting",
                crate::preview::compact(session, &self.config, &self.mapping, instructions)
                    .map_err(|why| {
                        RpcError::invalid_params(format!("nothing to compact: {why}"))
                    })?,
            ),
            PreviewAction::CapsuleLoad { path } => {
                let file = Path::new(&path);
                let parsed = soba_core::capsule::portable::read_capsule_file(file)
                    .map_err(|e| RpcError::invalid_params(format!("`path`: {e}")))?;
                (
                    "capsuleLoad",
                    "What SOBA would send after loading the capsule",
                    crate::preview::capsule_load(session, &parsed, &path),
                )
            }
            PreviewAction::Rewind { entry_id } => (
                "rewind",
                "What SOBA would send after rewinding",
                crate::preview::rewind(session, &entry_id)
                    .map_err(|why| RpcError::invalid_params(format!("`entryId`: {why}")))?,
            ),
        };
        // One basis with the status bar: the budget's total before, and what the log does not
        // hold (which no action changes) in the figure after.
        let preview = preview.on_budget_basis(budget.effective_tokens(), not_in_log);
        let mut header =
            vec!["Preview: nothing was changed, and the agent does not receive this.".to_string()];
        header.extend([self.control.note.clone(), self.control.actions.clone()]);
        if self.control.compacted_by == super::protocol::CompactedBy::Soba {
            // A driven session may preview too; the note then says the action would apply.
            header.truncate(1);
            header.push(self.control.actions.clone());
        }
        Ok(PreviewResult {
            session_id: self.session_id().to_string(),
            action: name.to_string(),
            control: self.control.clone(),
            tokens_before: preview.tokens_before,
            tokens_after: preview.tokens_after,
            not_in_log,
            text: crate::preview::document(title, &header, &preview),
        })
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
        let reports = entries.iter().any(|e| {
            matches!(&e.body, EntryBody::Message(m) if m.role == soba_core::session::entry::Role::Assistant && m.usage.is_some())
        });
        let may_switch_model = entries
            .iter()
            .any(|e| matches!(e.body, EntryBody::Setting(_) | EntryBody::Rewind(_)));
        self.log.append_all(entries).map_err(log_failure)?;
        if may_switch_model {
            self.follow_session_model();
        }
        if reports {
            self.learn_unseen();
        }
        Ok(())
    }

    /// Start from what earlier sessions of this agent and model taught this machine about the
    /// context the agent sends beyond its transcript.
    fn load_unseen_prior(&mut self) {
        let Some(path) = &self.unseen_store else {
            return;
        };
        let store = soba_core::session::unseen_priors::UnseenStore::load(path);
        if let Some(problem) = store.problem() {
            eprintln!("soba: warning: {problem}");
        }
        let s = self.log.session();
        let prior = store.prior(s.agent(), &self.config.model.name, &s.header.id);
        self.log.session_mut().set_unseen_prior(prior);
    }

    /// Teach the store what this session's reports showed beyond its log, when that changed.
    fn learn_unseen(&mut self) {
        let Some(path) = &self.unseen_store else {
            return;
        };
        let s = self.log.session();
        if s.agent().is_none() {
            return;
        }
        let seen = s.unseen_observations();
        if seen == self.unseen_taught {
            return;
        }
        if let Some(problem) =
            soba_core::session::unseen_priors::learn_from_session(path, s, &self.config.model.name)
        {
            eprintln!("soba: session {}: warning: {problem}", self.session_id());
        }
        self.unseen_taught = seen;
    }

    /// Resolve the configuration again when the model in force at the leaf is not the one it
    /// was resolved with: the limits, the tokenizer and the budget follow the model switch the
    /// log records. A switch to a model the configuration refuses keeps the limits in force
    /// and says why on stderr; the entry stays in the log, as every entry does.
    fn follow_session_model(&mut self) {
        let model = self.log.session().model_config();
        let Some(name) = model.as_ref().and_then(|m| m.name.as_deref()) else {
            return;
        };
        let resolved = Config::resolve(
            &self.config_files,
            model.as_ref(),
            &soba_core::config::Overrides::default(),
        );
        match resolved {
            Ok(config) if config.model != self.config.model => {
                self.log.session_mut().configure_counting(&config.model);
                let model_changed = config.model.name != self.config.model.name;
                self.config = config;
                if model_changed {
                    // What this machine learned about unseen context is per agent and model.
                    self.load_unseen_prior();
                }
            }
            Ok(_) => {}
            Err(e) => eprintln!(
                "soba: session {}: the model {name} the log switched to is not used: {e}",
                self.session_id()
            ),
        }
    }

    fn append(&mut self, raw: Vec<Value>) -> Result<AppendResult, RpcError> {
        let entries = prepare_entries(self.log.session().leaf_id(), raw)?;
        let entry_ids = entries.iter().map(|e| e.id.clone()).collect();
        self.write(entries)?;
        let budget = self.publish();
        Ok(AppendResult {
            entry_ids,
            leaf_id: self.log.session().leaf_id().map(str::to_string),
            budget,
        })
    }

    fn leaf_entry(&self, body: EntryBody) -> Entry {
        Entry::new(
            soba_core::util::new_id("e_"),
            self.log.session().leaf_id().map(str::to_string),
            body,
        )
    }

    fn rewind(&mut self, entry_id: &str) -> Result<RewindResult, RpcError> {
        if let Some(refused) = self.control.refusal("soba/rewind") {
            return Err(refused);
        }
        let entry = soba_core::session::rewind::rewind_entry(&self.log, entry_id)
            .map_err(|e| RpcError::from(e).about_param("entryId"))?;
        self.write(vec![entry])?;
        let budget = self.publish();
        Ok(RewindResult {
            leaf_id: self.log.session().leaf_id().map(str::to_string),
            budget,
        })
    }

    fn set_auto_compact(&mut self, enabled: bool) -> Result<AutoCompactResult, RpcError> {
        // The agent compacts a followed session itself, and a setting appended to SOBA's copy
        // of its log would sit on a branch the transcript never continues: refused, not undone
        // behind the user's back.
        if let Some(refused) = self.control.refusal("soba/autoCompact") {
            return Err(refused);
        }
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
            let e = Entry::new(
                soba_core::util::new_id("e_"),
                parent.take(),
                EntryBody::File(change),
            );
            parent = Some(e.id.clone());
            entries.push(e);
        }
        if let Err(e) = self.write(entries) {
            // Nothing to answer: the watcher is fire-and-forget. The log stays as it was.
            eprintln!(
                "soba: session {}: cannot record file changes: {}",
                self.session_id(),
                e.message
            );
            return;
        }
        self.publish();
    }
}

/// Entry types only the daemon writes, with the method that writes them.
pub const DAEMON_WRITTEN: &[(&str, &str)] = &[
    ("capsule", "soba/compact"),
    ("intent", "soba/turn/complete or soba/checkpoint"),
    ("compaction", "soba/compact"),
    ("rewind", "soba/rewind"),
];

/// Turn client-supplied entries into log entries: fill in `id`, `ts` and `parentId` (the
/// previous entry of the batch, or the leaf), and check each against the entry schema.
pub fn prepare_entries(leaf: Option<&str>, raw: Vec<Value>) -> Result<Vec<Entry>, RpcError> {
    if raw.is_empty() {
        return Err(RpcError::invalid_params(
            "`entries`: give at least one entry",
        ));
    }
    let mut parent = leaf.map(str::to_string);
    let mut out = Vec::with_capacity(raw.len());
    for (i, value) in raw.into_iter().enumerate() {
        let Value::Object(mut obj) = value else {
            return Err(RpcError::invalid_params(format!(
                "`entries[{i}]`: expected an object"
            )));
        };
        if let Some(ty) = obj.get("type").and_then(Value::as_str) {
            if let Some((_, method)) = DAEMON_WRITTEN.iter().find(|(t, _)| *t == ty) {
                return Err(RpcError::invalid_params(format!(
                    "`entries[{i}].type`: `{ty}` entries are written by the daemon; use {method}"
                )));
            }
        }
        fill(&mut obj, "id", || {
            Value::String(soba_core::util::new_id("e_"))
        });
        fill(&mut obj, "ts", || {
            Value::String(soba_core::util::now_rfc3339())
        });
        fill(&mut obj, "parentId", || {
            parent.clone().map_or(Value::Null, Value::String)
        });
        let entry: Entry =
            super::protocol::parse_params(&format!("entries[{i}]"), Value::Object(obj)).map_err(
                |e| RpcError::invalid_params(e.message.replacen(": invalid params", "", 1)),
            )?;
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
    path.strip_prefix(workspace)
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned()
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
        assert_eq!(
            entries[1].parent_id.as_deref(),
            Some(entries[0].id.as_str())
        );
        assert!(!entries[0].ts.is_empty());
    }

    #[test]
    fn bad_entries_are_refused_naming_the_entry_and_field() {
        let e = prepare_entries(None, vec![]).unwrap_err();
        assert!(e.message.contains("`entries`"), "{}", e.message);
        let e = prepare_entries(None, vec![json!("text")]).unwrap_err();
        assert!(e.message.contains("`entries[0]`"), "{}", e.message);
        let e =
            prepare_entries(None, vec![json!({"type": "message", "role": "user"})]).unwrap_err();
        assert!(
            e.message.contains("entries[0]") && e.message.contains("content"),
            "{}",
            e.message
        );
        let e = prepare_entries(None, vec![json!({"type": "capsule"})]).unwrap_err();
        assert!(e.message.contains("soba/compact"), "{}", e.message);
        let e = prepare_entries(
            None,
            vec![json!({"type": "file", "path": "a", "op": "eaten", "source": "tool"})],
        )
        .unwrap_err();
        assert!(
            e.message.contains("entries[0]") && e.message.contains("eaten"),
            "{}",
            e.message
        );
    }
}
