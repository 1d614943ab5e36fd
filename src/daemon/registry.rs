//! Workspaces → sessions: which sessions are live, which one is active in each workspace, the
//! file watcher and flight log of each workspace, and the event channel every client listens to.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast;

use super::actor::{self, Event, SessionHandle};
use super::connection::ConnectionConfig;
use super::paths::{workspace_path, Paths};
use super::protocol::{code, ModelParams, RpcError, SessionClosedNotice, SessionSummary};
use super::watcher::{WatchMode, WorkspaceWatcher};
use crate::config::{
    user_config_path, workspace_config_path, Config, ConfigError, ConfigFile, Layers, Overrides,
};
use crate::flight::{FlightLog, FlightRecord};
use crate::session::entry::{HeaderTag, ModelRef, SessionHeader, LOG_FORMAT_VERSION};
use crate::session::log::{LogError, SessionLog};
use crate::summarize::Summarizer;

/// How the daemon behaves; tests turn the watcher off or force polling.
#[derive(Clone)]
pub struct DaemonOptions {
    pub watch: Option<WatchMode>,
    /// A `--config FILE` layered over the user's and each workspace's config.
    pub extra_config: Option<PathBuf>,
    /// The summarizer of every session, instead of the one each session's config names
    /// (embedders and tests).
    pub summarizer: Option<Arc<dyn Summarizer>>,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            watch: Some(WatchMode::Native),
            extra_config: None,
            summarizer: None,
        }
    }
}

/// The state shared by every connection of one daemon.
pub struct Daemon {
    pub paths: Paths,
    pub options: DaemonOptions,
    events: broadcast::Sender<Event>,
    inner: Mutex<Registry>,
    /// Transcripts followed (`soba/attach`) → the session each is followed into.
    pub(super) followers: Mutex<HashMap<PathBuf, String>>,
    /// One `soba/attach` at a time, so that two clients attaching the same transcript at once
    /// start one follower.
    pub(super) attaching: tokio::sync::Mutex<()>,
    /// Transcripts discovery found but could not follow, each announced once: editors showing
    /// no budget ask again every few seconds, and a warning each time would bury the user.
    pub(super) unfollowable: Mutex<HashSet<PathBuf>>,
}

#[derive(Default)]
struct Registry {
    sessions: HashMap<String, SessionHandle>,
    workspaces: HashMap<PathBuf, Workspace>,
}

struct Workspace {
    active: Option<String>,
    flight: FlightLog,
    /// Held for its lifetime: dropping it stops the watch. `None` while it starts, when
    /// watching is off, or when it could not start (the client was told).
    _watcher: Option<WorkspaceWatcher>,
}

/// What `soba/session/open` asks for.
#[derive(Debug, Clone, Default)]
pub struct OpenRequest {
    pub workspace: String,
    pub session_id: Option<String>,
    pub create: Option<bool>,
    pub model: Option<ModelParams>,
    /// The session's own settings (`compaction`, `summarizer`), over every config file.
    pub settings: Option<ConfigFile>,
    /// The config and keys of the connection opening it; `None` for a client that sent no
    /// hello (the daemon's own config files and environment apply).
    pub connection: Option<Arc<ConnectionConfig>>,
}

impl Daemon {
    pub fn new(paths: Paths, options: DaemonOptions) -> Arc<Daemon> {
        let (events, _) = broadcast::channel(1024);
        Arc::new(Daemon {
            paths,
            options,
            events,
            inner: Mutex::new(Registry::default()),
            followers: Mutex::new(HashMap::new()),
            attaching: tokio::sync::Mutex::new(()),
            unfollowable: Mutex::new(HashSet::new()),
        })
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    pub fn events(&self) -> broadcast::Sender<Event> {
        self.events.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        // A panic while holding the lock leaves plain maps behind, still consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Open (or create) a session and make it the active session of its workspace.
    ///
    /// Without `sessionId` a new session is created, unless `create` is `false`: then the
    /// workspace's active session is returned. With `sessionId`, a live session is returned
    /// as is; one on disk is loaded; a missing one is created only when `create` is `true`.
    pub async fn open(self: &Arc<Self>, req: OpenRequest) -> Result<SessionHandle, RpcError> {
        let workspace = workspace_path(&req.workspace).map_err(RpcError::invalid_params)?;
        let id = match (&req.session_id, req.create) {
            (Some(id), _) => {
                validate_session_id(id)?;
                id.clone()
            }
            (None, Some(false)) => return self.active(&workspace),
            (None, _) => crate::util::new_id("s_"),
        };
        let live = self.lock().sessions.get(&id).cloned();
        if let Some(h) = live {
            if h.workspace != workspace {
                return Err(RpcError::invalid_params(format!(
                    "`sessionId`: session `{id}` belongs to workspace {}, not {}",
                    h.workspace.display(),
                    workspace.display()
                )));
            }
            self.set_active(&workspace, &id);
            let mut h = h;
            if let (Some(keyed), Some(connection)) = (&h.keyed_summarizer, &req.connection) {
                if let Err(e) = keyed.rebind_if_gone(connection) {
                    h.warnings.push(format!(
                        "The summarization model cannot be used ({e}); capsules are built locally"
                    ));
                }
            }
            if req.settings.is_some() {
                h.warnings.push(format!(
                    "session `{id}` is already open, with the settings it was opened with; the `compaction` and `summarizer` given now apply after soba/session/close and a new open"
                ));
            }
            return Ok(h);
        }
        let path = self
            .paths
            .sessions_dir(&workspace)
            .join(format!("{id}.jsonl"));
        let create = req.session_id.is_none() || req.create == Some(true);
        let model = req.model.clone();
        let layers = self.layers(&workspace, req.connection.as_deref(), req.settings.clone());
        let ws = workspace.clone();
        let (log, config, warnings) =
            tokio::task::spawn_blocking(move || open_log(&path, &ws, &id, create, model, layers?))
                .await
                .map_err(|e| RpcError::internal(format!("opening the session failed: {e}")))??;
        let mut keyed_summarizer = None;
        let summarizer = match &self.options.summarizer {
            Some(s) => Some(s.clone()),
            None => match match &req.connection {
                Some(c) => c.summarizer(&config.summarizer).map(|keyed| {
                    keyed_summarizer = keyed.clone();
                    keyed.map(|k| k as Arc<dyn Summarizer>)
                }),
                None => crate::summarize::from_config(&config.summarizer).map(|s| s.map(Arc::from)),
            } {
                Ok(s) => s,
                Err(e) => {
                    self.degraded(
                        &workspace,
                        format!("The summarization model cannot be used ({e}); capsules are built locally"),
                    );
                    None
                }
            },
        };
        let mut handle = actor::spawn(actor::ActorSetup {
            log,
            config,
            summarizer,
            flight: FlightLog::new(&self.paths.workspace_dir(&workspace)),
            events: self.events.clone(),
        });
        handle.warnings = warnings;
        handle.keyed_summarizer = keyed_summarizer;
        {
            let mut reg = self.lock();
            // Another client may have opened the same session meanwhile; the log lock makes
            // that impossible on disk, so the first handle stays.
            if let Some(existing) = reg.sessions.get(&handle.id) {
                return Ok(existing.clone());
            }
            reg.sessions.insert(handle.id.clone(), handle.clone());
        }
        self.ensure_workspace(&workspace).await;
        self.set_active(&workspace, &handle.id);
        Ok(handle)
    }

    /// The config layers of a session in `workspace`: the connection's files when it sent a
    /// hello, else the daemon's own (its user file and `--config`); the workspace's file;
    /// the session's settings.
    fn layers(
        &self,
        workspace: &Path,
        connection: Option<&ConnectionConfig>,
        settings: Option<ConfigFile>,
    ) -> Result<Layers, RpcError> {
        let bad = |e: ConfigError| RpcError::invalid_params(format!("configuration: {e}"));
        let present = |p: &Path| -> Result<Option<ConfigFile>, ConfigError> {
            if p.is_file() {
                ConfigFile::load(p).map(Some)
            } else {
                Ok(None)
            }
        };
        let (user, extra) = match connection {
            Some(c) => c.files().map_err(bad)?,
            None => (
                user_config_path()
                    .map(|p| present(&p))
                    .transpose()
                    .map_err(bad)?
                    .flatten(),
                self.options
                    .extra_config
                    .as_deref()
                    .map(ConfigFile::load)
                    .transpose()
                    .map_err(bad)?,
            ),
        };
        let workspace_file = if workspace.is_dir() {
            present(&workspace_config_path(workspace)).map_err(bad)?
        } else {
            None
        };
        Ok(Layers {
            user,
            workspace: Some(workspace.to_path_buf()),
            workspace_file,
            extra,
            session: settings,
        })
    }

    /// Register the workspace and start its watch. The first open in a workspace claims it
    /// and answers once the watch is in place; the walk of the tree runs on a blocking thread,
    /// so other clients' requests go on meanwhile.
    async fn ensure_workspace(self: &Arc<Self>, workspace: &Path) {
        {
            let mut reg = self.lock();
            if reg.workspaces.contains_key(workspace) {
                return;
            }
            reg.workspaces.insert(
                workspace.to_path_buf(),
                Workspace {
                    active: None,
                    flight: FlightLog::new(&self.paths.workspace_dir(workspace)),
                    _watcher: None,
                },
            );
        }
        let Some(mode) = self.options.watch else {
            return;
        };
        let daemon = self.clone();
        let ws = workspace.to_path_buf();
        let started = tokio::task::spawn_blocking(move || daemon.start_watcher(&ws, mode)).await;
        let watcher = match started {
            Ok(watcher) => watcher,
            Err(e) => {
                self.not_watched(workspace, e);
                None
            }
        };
        if let Some(entry) = self.lock().workspaces.get_mut(workspace) {
            entry._watcher = watcher;
        }
    }

    fn start_watcher(
        self: &Arc<Self>,
        workspace: &Path,
        mode: WatchMode,
    ) -> Option<WorkspaceWatcher> {
        let daemon = Arc::downgrade(self);
        let ws = workspace.to_path_buf();
        let sink = move |changes: Vec<crate::session::entry::FileEntry>| {
            if let Some(d) = daemon.upgrade() {
                for h in d.sessions_of(&ws) {
                    h.watched_files(changes.clone());
                }
            }
        };
        let own = [self.paths.data_dir.clone(), self.paths.runtime_dir.clone()];
        match WorkspaceWatcher::start_excluding(workspace, mode, &own, sink) {
            Ok((w, warning)) => {
                if let Some(message) = warning {
                    self.degraded(workspace, message);
                }
                Some(w)
            }
            Err(e) => {
                self.not_watched(workspace, e);
                None
            }
        }
    }

    fn not_watched(&self, workspace: &Path, why: impl std::fmt::Display) {
        self.degraded(
            workspace,
            format!(
                "file changes in {} are not recorded: {why}",
                workspace.display()
            ),
        );
    }

    pub(crate) fn degraded(&self, workspace: &Path, message: String) {
        let _ = self.events.send(Event::Degraded {
            workspace: workspace.display().to_string(),
            message,
        });
    }

    fn set_active(&self, workspace: &Path, id: &str) {
        if let Some(ws) = self.lock().workspaces.get_mut(workspace) {
            ws.active = Some(id.to_string());
        }
    }

    fn active(&self, workspace: &Path) -> Result<SessionHandle, RpcError> {
        let reg = self.lock();
        reg.workspaces
            .get(workspace)
            .and_then(|w| w.active.as_ref())
            .and_then(|id| reg.sessions.get(id))
            .cloned()
            .ok_or_else(|| {
                RpcError::new(
                    code::UNKNOWN_SESSION,
                    format!(
                        "workspace {} has no active session; an agent opens one with soba/session/open",
                        workspace.display()
                    ),
                )
            })
    }

    /// End a live session: it leaves the registry (and stops being the workspace's active
    /// session), its actor finishes what was asked before and releases the log, and every
    /// client that knows the workspace hears `soba/session/closed`. The last session of a
    /// workspace takes the workspace's file watch with it. Opening it again loads it from disk.
    pub async fn close(&self, id: &str) -> Result<SessionHandle, RpcError> {
        let handle = {
            let mut reg = self.lock();
            let handle = reg
                .sessions
                .remove(id)
                .ok_or_else(|| RpcError::unknown_session(id))?;
            let ws = &handle.workspace;
            if !reg.sessions.values().any(|h| &h.workspace == ws) {
                reg.workspaces.remove(ws);
            } else if let Some(w) = reg.workspaces.get_mut(ws) {
                if w.active.as_deref() == Some(id) {
                    w.active = None;
                }
            }
            handle
        };
        handle.close().await?;
        let _ = self.events.send(Event::SessionClosed(SessionClosedNotice {
            session_id: handle.id.clone(),
            workspace: handle.workspace.display().to_string(),
        }));
        Ok(handle)
    }

    /// A live session by id.
    pub fn session(&self, id: &str) -> Result<SessionHandle, RpcError> {
        self.lock()
            .sessions
            .get(id)
            .cloned()
            .ok_or_else(|| RpcError::unknown_session(id))
    }

    /// The session an editor-side request means: `sessionId`, else the active session of
    /// `workspace`, else of `fallback_workspace` (the client's first folder).
    pub fn resolve(
        &self,
        session_id: Option<&str>,
        workspace: Option<&str>,
        fallback_workspace: Option<&str>,
    ) -> Result<SessionHandle, RpcError> {
        if let Some(id) = session_id {
            return self.session(id);
        }
        let ws = workspace.or(fallback_workspace).ok_or_else(|| {
            RpcError::invalid_params("`sessionId`: give a sessionId or a workspace (the client named no workspace folder)")
        })?;
        self.active(&workspace_path(ws).map_err(RpcError::invalid_params)?)
    }

    pub fn sessions_of(&self, workspace: &Path) -> Vec<SessionHandle> {
        self.lock()
            .sessions
            .values()
            .filter(|h| h.workspace == workspace)
            .cloned()
            .collect()
    }

    /// Live sessions, of one workspace when given, sorted by workspace then id.
    pub fn summaries(&self, workspace: Option<&str>) -> Result<Vec<SessionSummary>, RpcError> {
        let filter = workspace
            .map(workspace_path)
            .transpose()
            .map_err(RpcError::invalid_params)?;
        let reg = self.lock();
        let mut out: Vec<SessionSummary> = reg
            .sessions
            .values()
            .filter(|h| filter.as_ref().is_none_or(|w| &h.workspace == w))
            .map(|h| {
                let status = h.status();
                let active = reg
                    .workspaces
                    .get(&h.workspace)
                    .and_then(|w| w.active.as_deref())
                    == Some(&h.id);
                SessionSummary {
                    session_id: h.id.clone(),
                    workspace: h.workspace.display().to_string(),
                    path: h.path.display().to_string(),
                    active,
                    entries: status.entries,
                    effective_tokens: status.budget.effective_tokens(),
                    hard_limit: status.budget.hard_limit(),
                    last_compaction: status.budget.last_compaction(),
                }
            })
            .collect();
        out.sort_by(|a, b| (&a.workspace, &a.session_id).cmp(&(&b.workspace, &b.session_id)));
        Ok(out)
    }

    /// The flight log of a workspace (whether or not a session of it is live).
    pub fn flight_log(&self, workspace: &Path) -> FlightLog {
        self.lock()
            .workspaces
            .get(workspace)
            .map(|w| w.flight.clone())
            .unwrap_or_else(|| FlightLog::new(&self.paths.workspace_dir(workspace)))
    }

    pub fn read_flight(
        &self,
        workspace: &Path,
        session: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<FlightRecord>, RpcError> {
        self.flight_log(workspace)
            .read(session, limit)
            .map_err(|e| RpcError::internal(format!("cannot read flight records: {e}")))
    }
}

fn validate_session_id(id: &str) -> Result<(), RpcError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        && !id.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(RpcError::invalid_params(format!(
            "`sessionId`: `{id}` is not a valid session id (letters, digits, `-`, `_`, `.`; at most 128)"
        )))
    }
}

fn log_error(e: LogError) -> RpcError {
    match e {
        LogError::Locked { .. } => RpcError::new(code::SESSION_LOCKED, e.to_string()),
        other => RpcError::internal(other.to_string()),
    }
}

/// Open or create the log and resolve its configuration (blocking: reads the whole log); the
/// third value holds the warnings for the client: config layers left out (an untrusted
/// workspace's summarizer) and what loading skipped.
fn open_log(
    path: &Path,
    workspace: &Path,
    id: &str,
    create: bool,
    model: Option<ModelParams>,
    layers: Layers,
) -> Result<(SessionLog, Config, Vec<String>), RpcError> {
    let loaded = layers.stack();
    let files = loaded.files;
    let mut warnings = loaded.warnings;
    let model_ref = model.map(|m| ModelRef {
        name: m.name,
        context_window: m.context_window,
        max_output_tokens: m.max_output_tokens,
        tokenizer: None,
    });
    let provisional = Config::resolve(&files, model_ref.as_ref(), &Overrides::default())
        .map_err(|e| RpcError::invalid_params(format!("configuration: {e}")))?;
    let log = if path.exists() {
        let (log, report) = SessionLog::open(path, provisional.durability).map_err(log_error)?;
        for m in report.messages(path) {
            eprintln!("soba: warning: {m}");
        }
        warnings.extend(report.summary(path));
        log
    } else if create {
        let header = SessionHeader {
            kind: HeaderTag::Session,
            version: LOG_FORMAT_VERSION,
            id: id.to_string(),
            workspace: workspace.display().to_string(),
            created_at: crate::util::now_rfc3339(),
            // A guessed model's default figures are not recorded, so that adding the model
            // to the config later corrects the session when it is opened again.
            model: Some(if provisional.model_guessed {
                ModelRef {
                    name: Some(provisional.model.name.clone()),
                    ..ModelRef::default()
                }
            } else {
                ModelRef {
                    name: Some(provisional.model.name.clone()),
                    context_window: Some(provisional.model.context_window),
                    max_output_tokens: Some(provisional.model.max_output_tokens),
                    tokenizer: Some(provisional.model.tokenizer),
                }
            }),
            source: None,
        };
        if let Some(dir) = path.parent() {
            crate::files::create_private_dir_all(dir)
                .map_err(|e| RpcError::internal(format!("{}: {e}", dir.display())))?;
        }
        SessionLog::create(path, header, provisional.durability).map_err(log_error)?
    } else {
        return Err(RpcError::unknown_session(id));
    };
    let config = Config::resolve(
        &files,
        log.session().header.model.as_ref(),
        &Overrides::default(),
    )
    .map_err(|e| RpcError::invalid_params(format!("configuration: {e}")))?;
    warnings.extend(config.warnings.iter().cloned());
    Ok((log, config, warnings))
}
