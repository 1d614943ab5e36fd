//! The JSON-RPC front end: one tower-lsp-server instance per connected client, all sharing one
//! [`Daemon`].
//!
//! Handlers parse parameters, call the registry or a session actor, and convert the answer.
//! None of them blocks the connection: `soba/budget` and `soba/sessions` read published
//! snapshots, and a request that waits for a compaction (`soba/preflight`, `soba/compact`)
//! holds only its own slot while other requests keep flowing.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;
use tower_lsp_server::jsonrpc;
use tower_lsp_server::ls_types::notification::Notification;
use tower_lsp_server::ls_types::{
    ExecuteCommandOptions, ExecuteCommandParams, InitializeParams, InitializeResult,
    InitializedParams, MessageType, NumberOrString, ServerCapabilities, ServerInfo,
};
use tower_lsp_server::{
    Bounded, Client, LanguageServer, LspService, LspServiceBuilder, NotCancellable,
    OngoingProgress, Server,
};

use super::actor::Event;
use super::client_model::ClientModel;
use super::connection::{ConnectionConfig, Handshake};
use super::framing;
use super::paths::workspace_path;
use super::protocol::*;
use super::registry::{Daemon, InUse, OpenRequest};

/// Budget notifications for one session within this window are merged into the last one.
pub const BUDGET_COALESCE: Duration = Duration::from_millis(50);

/// Requests one connection may have in flight at once (a preflight waiting for a compaction
/// holds one).
const MAX_CONCURRENT_REQUESTS: usize = 64;

/// Serve one client over a byte stream until it disconnects or sends `exit`. Frames the
/// service cannot read are answered by [`framing::relay_frames`] and the connection goes on.
pub async fn serve_connection<R, W>(daemon: Arc<Daemon>, input: R, output: W)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite,
{
    let hello = Arc::new(OnceLock::new());
    let input_ended = CancellationToken::new();
    let (service, socket) = build_service_with(daemon, hello.clone(), input_ended.clone());
    let mut handshake = Handshake::new(hello);
    framing::relay_frames_with(
        EndNotice {
            inner: input,
            ended: input_ended,
        },
        output,
        |body| handshake.answer(body),
        |service_input, service_output| {
            Server::new(service_input, service_output, socket)
                .concurrency_level(MAX_CONCURRENT_REQUESTS)
                .serve(service)
        },
    )
    .await;
}

/// The service of one connection (no `soba/client/hello`: the daemon's own config applies).
/// Its caller owns the transport, so the end of the client's input is not watched here.
pub fn build_service(daemon: Arc<Daemon>) -> (LspService<Backend>, tower_lsp_server::ClientSocket) {
    build_service_with(daemon, Arc::new(OnceLock::new()), CancellationToken::new())
}

/// The service of one connection whose hello, if any, lands in `hello`; `input_ended` is
/// cancelled when the client's input ends.
fn build_service_with(
    daemon: Arc<Daemon>,
    hello: Arc<OnceLock<Arc<ConnectionConfig>>>,
    input_ended: CancellationToken,
) -> (LspService<Backend>, tower_lsp_server::ClientSocket) {
    let builder = LspService::build(|client| Backend::new(client, daemon, hello, input_ended));
    register(builder).finish()
}

/// The client's input, cancelling `ended` when it ends (or fails): from then on no answer of
/// the client can arrive, so the daemon stops waiting for the ones it asked for (a summary from
/// the client's model) instead of holding the connection open until they time out.
struct EndNotice<R> {
    inner: R,
    ended: CancellationToken,
}

impl<R: AsyncRead + Unpin> AsyncRead for EndNotice<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            std::task::Poll::Ready(Ok(()))
                if buf.filled().len() == before && buf.remaining() > 0 =>
            {
                self.ended.cancel()
            }
            std::task::Poll::Ready(Err(_)) => self.ended.cancel(),
            _ => {}
        }
        polled
    }
}

/// Per-connection state.
pub struct Backend {
    client: Client,
    /// This connection, for the session actors (whose inference is in flight).
    id: super::actor::ClientId,
    daemon: Arc<Daemon>,
    /// Workspace folders the client named at `initialize`, first one first.
    folders: Mutex<Vec<String>>,
    /// Workspaces this client hears events of: its folders and the workspaces of the sessions
    /// it opened or addressed.
    known: Arc<Mutex<HashSet<String>>>,
    work_done_progress: AtomicBool,
    /// The client's offer, at `initialize`, to summarize with its own model.
    summarize_offer: OnceLock<ClientModel>,
    stop: CancellationToken,
    /// The config files and keys of the relay that opened this connection, once its
    /// `soba/client/hello` is in; dropped with the connection.
    hello: Arc<OnceLock<Arc<ConnectionConfig>>>,
    /// Cancelled when the client's input ends.
    input_ended: CancellationToken,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop.cancel();
        self.daemon.disconnected(self.id);
    }
}

macro_rules! handlers {
    ($($name:ident => $method:expr),* $(,)?) => {
        impl Backend {
            $(
                async fn $name(&self, params: Value) -> jsonrpc::Result<Value> {
                    self.call($method, params).await.map_err(Into::into)
                }
            )*
        }

        fn register(builder: LspServiceBuilder<Backend>) -> LspServiceBuilder<Backend> {
            builder $(.custom_method($method, Backend::$name))*
        }

        /// Every method a connection answers (the drift test compares it with the docs).
        pub const HANDLED: &[&str] = &[$($method),*];
    };
}

handlers! {
    session_open => method::SESSION_OPEN,
    session_append => method::SESSION_APPEND,
    preflight => method::PREFLIGHT,
    turn_complete => method::TURN_COMPLETE,
    checkpoint => method::CHECKPOINT,
    overflow => method::OVERFLOW,
    cancel => method::CANCEL,
    rewind => method::REWIND,
    session_close => method::SESSION_CLOSE,
    budget => method::BUDGET,
    context => method::CONTEXT,
    compact => method::COMPACT,
    auto_compact => method::AUTO_COMPACT,
    sessions => method::SESSIONS,
    flight => method::FLIGHT,
    capsule_create => method::CAPSULE_CREATE,
    capsule_export => method::CAPSULE_EXPORT,
    capsule_load => method::CAPSULE_LOAD,
    capsule_list => method::CAPSULE_LIST,
    attach => method::ATTACH,
    preview => method::PREVIEW,
}

/// `soba/budget` found no session and no agent to follow: what the user can do about it.
fn no_agent_running(workspace: &str, why: &str) -> RpcError {
    let shown = workspace_path(workspace)
        .map_or_else(|_| workspace.to_string(), |p| p.display().to_string());
    RpcError::new(
        code::UNKNOWN_SESSION,
        format!(
            "workspace {shown} has no active session, and no running agent could be followed: {why}. \
             Start Claude Code, Codex or pi in {shown} and its budget shows up by itself, \
             or follow a transcript with `soba attach`"
        ),
    )
}

fn to_value<T: serde::Serialize>(v: T) -> Result<Value, RpcError> {
    serde_json::to_value(v)
        .map_err(|e| RpcError::internal(format!("result does not serialize: {e}")))
}

impl Backend {
    fn new(
        client: Client,
        daemon: Arc<Daemon>,
        hello: Arc<OnceLock<Arc<ConnectionConfig>>>,
        input_ended: CancellationToken,
    ) -> Backend {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        daemon.connected(id);
        Backend {
            client,
            id,
            daemon,
            folders: Mutex::new(Vec::new()),
            known: Arc::new(Mutex::new(HashSet::new())),
            work_done_progress: AtomicBool::new(false),
            summarize_offer: OnceLock::new(),
            stop: CancellationToken::new(),
            hello,
            input_ended,
        }
    }

    fn connection(&self) -> Option<Arc<ConnectionConfig>> {
        self.hello.get().cloned()
    }

    /// This client's model, when it offered to summarize with it.
    fn client_model(&self) -> Option<ClientModel> {
        self.summarize_offer.get().cloned()
    }

    fn know(&self, workspace: &std::path::Path) {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(workspace.display().to_string());
    }

    fn first_folder(&self) -> Option<String> {
        self.folders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .first()
            .cloned()
    }

    async fn target(
        &self,
        session_id: Option<&str>,
        workspace: Option<&str>,
    ) -> Result<InUse, RpcError> {
        let h = self
            .daemon
            .resolve(session_id, workspace, self.first_folder().as_deref())
            .await?;
        self.know(&h.workspace);
        Ok(h)
    }

    async fn session(&self, id: &str) -> Result<InUse, RpcError> {
        let h = self.daemon.use_session(id).await?;
        self.know(&h.workspace);
        Ok(h)
    }

    /// Run one `soba/*` method. The sessions it used are idle again afterwards, so the bound on
    /// idle sessions is applied once it is answered.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let answer = self.dispatch(method, params).await;
        self.daemon.close_idle();
        answer
    }

    async fn dispatch(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        match method {
            method::SESSION_OPEN => {
                let p: SessionOpenParams = parse_params(method, params)?;
                let settings = soba_core::config::session_layer(p.compaction, p.summarizer)
                    .map_err(|e| {
                        RpcError::invalid_params(format!(
                            "{e}; the `compaction` and `summarizer` params take the keys and values of the config file's blocks (see docs/configuration.md)"
                        ))
                    })?;
                let h = self
                    .daemon
                    .open(OpenRequest {
                        workspace: p.workspace,
                        session_id: p.session_id,
                        create: p.create,
                        model: p.model,
                        source: None,
                        settings,
                        connection: self.connection(),
                    })
                    .await?;
                self.know(&h.workspace);
                for w in &h.warnings {
                    // Also as `window/showMessage`, to every client of the workspace.
                    self.daemon.degraded(&h.workspace, w.clone());
                }
                let budget = h.status().budget;
                to_value(SessionOpenResult {
                    session_id: h.id.clone(),
                    path: h.path.display().to_string(),
                    budget,
                    warnings: h.warnings.clone(),
                })
            }
            method::SESSION_APPEND => {
                let p: AppendParams = parse_params(method, params)?;
                to_value(self.session(&p.session_id).await?.append(p.entries).await?)
            }
            method::PREFLIGHT => {
                let p: PreflightParams = parse_params(method, params)?;
                to_value(
                    self.session(&p.session_id)
                        .await?
                        .preflight(self.id, self.client_model(), p.omit_content_of)
                        .await?,
                )
            }
            method::TURN_COMPLETE => {
                let p: TurnCompleteParams = parse_params(method, params)?;
                to_value(
                    self.session(&p.session_id)
                        .await?
                        .turn_complete(p.usage)
                        .await?,
                )
            }
            method::CHECKPOINT => {
                let p: CheckpointParams = parse_params(method, params)?;
                to_value(
                    self.session(&p.session_id)
                        .await?
                        .checkpoint(p.kind, p.label)
                        .await?,
                )
            }
            method::OVERFLOW => {
                let p: OverflowParams = parse_params(method, params)?;
                let figures = soba_core::window::OverflowFigures {
                    provider_window: p.provider_window,
                    provider_tokens: p.provider_tokens,
                };
                to_value(
                    self.session(&p.session_id)
                        .await?
                        .overflow(figures, self.client_model())
                        .await?,
                )
            }
            method::CANCEL => {
                let p: SessionParams = parse_params(method, params)?;
                to_value(self.session(&p.session_id).await?.cancel().await?)
            }
            method::COMPACT => {
                let p: CompactParams = parse_params(method, params)?;
                let h = self
                    .target(p.session_id.as_deref(), p.workspace.as_deref())
                    .await?;
                let trigger = p
                    .trigger
                    .map_or(soba_core::session::trigger::Trigger::User, Into::into);
                to_value(
                    h.compact(
                        self.id,
                        self.client_model(),
                        p.instructions,
                        p.mirror,
                        trigger,
                    )
                    .await?,
                )
            }
            method::CAPSULE_CREATE => {
                let p: CapsuleCreateParams = parse_params(method, params)?;
                let h = self
                    .target(p.session_id.as_deref(), p.workspace.as_deref())
                    .await?;
                to_value(h.capsule_create(p.title).await?)
            }
            method::CAPSULE_EXPORT => {
                let p: CapsuleExportParams = parse_params(method, params)?;
                let h = self
                    .target(p.session_id.as_deref(), p.workspace.as_deref())
                    .await?;
                to_value(h.capsule_export(p.checkpoint_id, p.path.into()).await?)
            }
            method::CAPSULE_LOAD => {
                let p: CapsuleLoadParams = parse_params(method, params)?;
                let h = self
                    .target(p.session_id.as_deref(), p.workspace.as_deref())
                    .await?;
                to_value(h.capsule_load(p.path.into()).await?)
            }
            method::CAPSULE_LIST => {
                let p: CapsuleListParams = parse_params(method, params)?;
                let h = self
                    .target(p.session_id.as_deref(), p.workspace.as_deref())
                    .await?;
                to_value(h.capsule_list().await?)
            }
            method::REWIND => {
                let p: RewindParams = parse_params(method, params)?;
                to_value(
                    self.session(&p.session_id)
                        .await?
                        .rewind(p.entry_id)
                        .await?,
                )
            }
            method::SESSION_CLOSE => {
                let p: SessionParams = parse_params(method, params)?;
                let path = self.daemon.close(&p.session_id).await?;
                to_value(SessionCloseResult {
                    session_id: p.session_id,
                    path: path.display().to_string(),
                })
            }
            method::BUDGET => {
                let p: BudgetParams = parse_params(method, params)?;
                // A snapshot: asking for a budget never brings an idle session back into memory.
                let snapshot = self
                    .daemon
                    .snapshot(
                        p.session_id.as_deref(),
                        p.workspace.as_deref(),
                        self.first_folder().as_deref(),
                    )
                    .map(|s| {
                        self.know(std::path::Path::new(&s.budget.workspace));
                        s.budget
                    });
                let budget = match snapshot {
                    // No agent opened a session here: follow the one the user runs, if any.
                    Err(e) if e.code == code::UNKNOWN_SESSION && p.session_id.is_none() => {
                        let ws = p.workspace.clone().or_else(|| self.first_folder());
                        match ws {
                            Some(ws) => match self.daemon.discover(&ws).await {
                                Ok(h) => {
                                    self.know(&h.workspace);
                                    h.status().budget
                                }
                                Err(why) => return Err(no_agent_running(&ws, &why)),
                            },
                            None => return Err(e),
                        }
                    }
                    other => other?,
                };
                to_value(budget)
            }
            method::ATTACH => {
                let p: AttachParams = parse_params(method, params)?;
                let outcome = self.daemon.attach(p, self.connection()).await?;
                self.know(&outcome.handle.workspace);
                to_value(outcome.result())
            }
            method::CONTEXT => {
                let p: ContextParams = parse_params(method, params)?;
                let limit = p
                    .limit
                    .unwrap_or(CONTEXT_DEFAULT_LIMIT)
                    .min(CONTEXT_MAX_LIMIT);
                let h = self
                    .target(p.session_id.as_deref(), p.workspace.as_deref())
                    .await?;
                to_value(h.context(limit).await?)
            }
            method::PREVIEW => {
                let p: PreviewParams = parse_params(method, params)?;
                let h = self
                    .target(p.session_id.as_deref(), p.workspace.as_deref())
                    .await?;
                to_value(h.preview(p.action).await?)
            }
            method::AUTO_COMPACT => {
                let p: AutoCompactParams = parse_params(method, params)?;
                let h = self
                    .target(p.session_id.as_deref(), p.workspace.as_deref())
                    .await?;
                to_value(h.set_auto_compact(p.enabled).await?)
            }
            method::SESSIONS => {
                let p: SessionsParams = parse_params(method, params)?;
                to_value(SessionsResult {
                    sessions: self.daemon.summaries(p.workspace.as_deref())?,
                })
            }
            method::FLIGHT => {
                let p: FlightParams = parse_params(method, params)?;
                let (workspace, session) = match (&p.session_id, &p.workspace) {
                    (Some(id), _) => {
                        let h = self.session(id).await?;
                        (h.workspace.clone(), Some(id.clone()))
                    }
                    (None, ws) => {
                        let ws = ws.clone().or_else(|| self.first_folder()).ok_or_else(|| {
                            RpcError::invalid_params("`workspace`: give a sessionId or a workspace")
                        })?;
                        (workspace_path(&ws).map_err(RpcError::invalid_params)?, None)
                    }
                };
                let records = self
                    .daemon
                    .read_flight(&workspace, session.as_deref(), p.limit)?;
                to_value(FlightResult { records })
            }
            other => Err(RpcError::new(
                jsonrpc::ErrorCode::MethodNotFound.code(),
                format!("unknown method `{other}`"),
            )),
        }
    }

    /// Forward daemon events this client cares about until the connection ends.
    fn spawn_forwarder(&self) {
        let mut rx = self.daemon.subscribe();
        let client = self.client.clone();
        let known = self.known.clone();
        let stop = self.stop.clone();
        let progress = self.work_done_progress.load(Ordering::Relaxed);
        tokio::spawn(async move {
            let mut fwd = Forwarder {
                client,
                progress,
                pending: HashMap::new(),
                ongoing: HashMap::new(),
            };
            let mut deadline: Option<tokio::time::Instant> = None;
            loop {
                let flush_at = deadline;
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = async { tokio::time::sleep_until(flush_at.expect("guarded")).await }, if flush_at.is_some() => {
                        deadline = None;
                        fwd.flush_budgets().await;
                    }
                    ev = rx.recv() => match ev {
                        Ok(ev) => {
                            let interested = known.lock().unwrap_or_else(|p| p.into_inner()).contains(ev.workspace());
                            if !interested {
                                continue;
                            }
                            match ev {
                                Event::BudgetChanged(b) => {
                                    fwd.pending.insert(b.session_id.clone(), b);
                                    deadline.get_or_insert_with(|| tokio::time::Instant::now() + BUDGET_COALESCE);
                                }
                                other => {
                                    // Keep order: budgets seen before this event go out first.
                                    deadline = None;
                                    fwd.flush_budgets().await;
                                    fwd.send(other).await;
                                }
                            }
                        }
                        Err(RecvError::Lagged(_)) => continue,
                        Err(RecvError::Closed) => break,
                    },
                }
            }
        });
    }
}

enum BudgetChangedNotification {}
impl Notification for BudgetChangedNotification {
    type Params = Value;
    const METHOD: &'static str = notification::BUDGET_CHANGED;
}

enum SessionClosedNotification {}
impl Notification for SessionClosedNotification {
    type Params = Value;
    const METHOD: &'static str = notification::SESSION_CLOSED;
}

enum CompactionNotification {}
impl Notification for CompactionNotification {
    type Params = Value;
    const METHOD: &'static str = notification::COMPACTION;
}

struct Forwarder {
    client: Client,
    progress: bool,
    pending: HashMap<String, BudgetReport>,
    ongoing: HashMap<String, OngoingProgress<Bounded, NotCancellable>>,
}

impl Forwarder {
    async fn flush_budgets(&mut self) {
        for (_, b) in self.pending.drain() {
            if let Ok(v) = serde_json::to_value(&b) {
                self.client
                    .send_notification::<BudgetChangedNotification>(v)
                    .await;
            }
        }
    }

    async fn send(&mut self, ev: Event) {
        match ev {
            Event::BudgetChanged(_) => unreachable!("budgets are coalesced by the caller"),
            Event::Degraded { message, .. } => {
                self.client
                    .show_message(MessageType::WARNING, message)
                    .await
            }
            Event::SessionClosed(notice) => {
                if let Ok(v) = serde_json::to_value(&notice) {
                    self.client
                        .send_notification::<SessionClosedNotification>(v)
                        .await;
                }
            }
            Event::Compaction { notice, .. } => {
                if self.progress {
                    self.work_done(&notice).await;
                }
                if let Ok(v) = serde_json::to_value(&notice) {
                    self.client
                        .send_notification::<CompactionNotification>(v)
                        .await;
                }
            }
        }
    }

    /// Mirror a compaction as standard work-done progress.
    async fn work_done(&mut self, notice: &CompactionNotice) {
        match notice.phase {
            CompactionPhase::Start => {
                let token =
                    NumberOrString::String(format!("soba/compaction/{}", notice.operation_id));
                let created = tokio::time::timeout(
                    Duration::from_secs(2),
                    self.client.create_work_done_progress(token.clone()),
                )
                .await;
                if matches!(created, Ok(Ok(()))) {
                    let p = self
                        .client
                        .progress(token, progress_title(&notice.trigger))
                        .with_percentage(0)
                        .with_message("0%")
                        .begin()
                        .await;
                    self.ongoing.insert(notice.operation_id.clone(), p);
                }
            }
            CompactionPhase::Progress => {
                if let (Some(p), Some(pct)) =
                    (self.ongoing.get(&notice.operation_id), notice.percent)
                {
                    p.report_with_message(format!("{pct}%"), u32::from(pct))
                        .await;
                }
            }
            CompactionPhase::End => {
                if let Some(p) = self.ongoing.remove(&notice.operation_id) {
                    p.finish_with_message(notice.message.clone().unwrap_or_default())
                        .await;
                }
            }
        }
    }
}

impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> jsonrpc::Result<InitializeResult> {
        let folders: Vec<String> = params
            .workspace_folders
            .unwrap_or_default()
            .iter()
            .filter_map(|f| f.uri.to_file_path().map(|p| p.display().to_string()))
            .collect();
        for f in &folders {
            if let Ok(p) = workspace_path(f) {
                self.know(&p);
            }
        }
        *self.folders.lock().unwrap_or_else(|p| p.into_inner()) = folders;
        let progress = params
            .capabilities
            .window
            .as_ref()
            .and_then(|w| w.work_done_progress)
            .unwrap_or(false);
        self.work_done_progress.store(progress, Ordering::Relaxed);
        let offer = super::client_model::capability_of(
            &serde_json::json!({"capabilities": {"experimental": params.capabilities.experimental}}),
        );
        if let Some(capability) = offer {
            let name = params
                .client_info
                .as_ref()
                .map_or_else(|| "the client".to_string(), |c| c.name.clone());
            let _ = self.summarize_offer.set(ClientModel::new(
                self.client.clone(),
                capability,
                name,
                self.input_ended.clone(),
            ));
        }
        Ok(InitializeResult {
            capabilities: ServerCapabilities {
                execute_command_provider: Some(ExecuteCommandOptions {
                    commands: HANDLED.iter().map(|m| command_for(m)).collect(),
                    ..ExecuteCommandOptions::default()
                }),
                ..ServerCapabilities::default()
            },
            server_info: Some(ServerInfo {
                name: "soba".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            }),
            ..InitializeResult::default()
        })
    }

    async fn initialized(&self, _: InitializedParams) {
        self.spawn_forwarder();
        // A workspace opened with an agent already running in it shows that agent's budget.
        let folders = self
            .folders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for folder in folders {
            let daemon = self.daemon.clone();
            tokio::spawn(async move {
                // Nothing to say yet: the client's `soba/budget` tells the user why.
                let _ = daemon.discover(&folder).await;
            });
        }
    }

    async fn shutdown(&self) -> jsonrpc::Result<()> {
        self.stop.cancel();
        Ok(())
    }

    async fn execute_command(
        &self,
        params: ExecuteCommandParams,
    ) -> jsonrpc::Result<Option<Value>> {
        let Some(method) = method_for_command(&params.command).filter(|m| HANDLED.contains(m))
        else {
            return Err(RpcError::invalid_params(format!(
                "`command`: unknown command `{}`; the server offers {}",
                params.command,
                HANDLED
                    .iter()
                    .map(|m| command_for(m))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .into());
        };
        let arg = params.arguments.into_iter().next().unwrap_or(Value::Null);
        Ok(Some(self.call(method, arg).await?))
    }
}
