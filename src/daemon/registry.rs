//! Workspaces → sessions: which sessions are live, which one is active in each workspace, the
//! file watcher and flight log of each workspace, and the event channel every client listens to.
//!
//! Live sessions cost memory (the whole log, parsed), so at most
//! [`DaemonOptions::max_idle_sessions`] of them are kept while no request uses them: past that,
//! the least recently used idle one is closed and becomes *dormant*. Its log is on disk, whole;
//! the next request that names it (or its workspace, when it was the active session) opens it
//! again before being answered, so clients never see the difference.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{broadcast, watch};

use super::actor::{self, ClientId, Event, OpenedWith, SessionHandle};
use super::connection::ConnectionConfig;
use super::paths::{workspace_path, Paths};
use super::protocol::{
    code, ModelParams, RpcError, SessionCloseReason, SessionClosedNotice, SessionSummary,
};
use super::watcher::{WatchMode, WorkspaceWatcher};
use crate::flight::{FlightLog, FlightRecord};
use crate::summarize::summarizer::Summarizer;
use soba_core::config::layers::Layers;
use soba_core::config::{
    load_workspace_config, user_config_path, Config, ConfigError, ConfigFile, ModelFile, Overrides,
};
use soba_core::session::entry::FileEntry;
use soba_core::session::entry::{
    HeaderTag, ModelRef, SessionHeader, SourceInfo, LOG_FORMAT_VERSION,
};
use soba_core::session::log::{LogError, SessionLog};

/// How the daemon behaves; tests turn the watcher off or force polling.
#[derive(Clone)]
pub struct DaemonOptions {
    pub watch: Option<WatchMode>,
    /// A `--config FILE` layered over the user's and each workspace's config.
    pub extra_config: Option<PathBuf>,
    /// The summarizer of every session, instead of the one each session's config names
    /// (embedders and tests).
    pub summarizer: Option<Arc<dyn Summarizer>>,
    /// Live sessions kept while no request uses them (`daemon.maxIdleSessions`); at least 1.
    pub max_idle_sessions: usize,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            watch: Some(WatchMode::Native),
            extra_config: None,
            summarizer: None,
            max_idle_sessions: soba_core::config::DEFAULT_MAX_IDLE_SESSIONS,
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
    /// One dormant session opened again at a time, so that two requests for it open it once.
    waking: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Registry {
    sessions: HashMap<String, Live>,
    workspaces: HashMap<PathBuf, Workspace>,
    /// Workspace → its active session, live or dormant.
    active: HashMap<PathBuf, String>,
    /// Sessions closed for being idle, opened again on their next use.
    dormant: HashMap<String, Dormant>,
    /// Bumped on every use of a session; the least recently used idle session goes first.
    clock: u64,
    /// Connections open now: an inference in flight for a connection that is gone ends nothing.
    connections: HashSet<ClientId>,
}

struct Live {
    handle: SessionHandle,
    last_used: u64,
    /// Requests using the session now ([`InUse`] guards); a session in use is never idle.
    in_use: Arc<AtomicUsize>,
}

struct Dormant {
    workspace: PathBuf,
    path: PathBuf,
    /// Its last snapshot, for `soba/sessions`.
    status: actor::Status,
    /// Changes its workspace's watch saw while it was dormant (another session kept the watch
    /// running): path → (order seen, latest change), recorded when it is opened again.
    changes: BTreeMap<String, (u64, FileEntry)>,
    /// Turns `true` once its actor let go of the log, so that opening it again finds it free.
    released: watch::Receiver<bool>,
    /// Its session settings and the connection that opened it, to open it the same way again.
    opened_with: OpenedWith,
}

/// A live session held for one request: while any is held the session is not closed for being
/// idle. Dereferences to the session's handle.
pub struct InUse {
    handle: SessionHandle,
    in_use: Arc<AtomicUsize>,
}

impl Deref for InUse {
    type Target = SessionHandle;
    fn deref(&self) -> &SessionHandle {
        &self.handle
    }
}

/// The caller's own copy of the handle (warnings for its client), not the registry's.
impl DerefMut for InUse {
    fn deref_mut(&mut self) -> &mut SessionHandle {
        &mut self.handle
    }
}

impl Drop for InUse {
    fn drop(&mut self) {
        self.in_use.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Registry {
    /// Take a live session for a request: it becomes the most recently used.
    fn take(&mut self, id: &str) -> Option<InUse> {
        self.clock += 1;
        let clock = self.clock;
        let live = self.sessions.get_mut(id)?;
        live.last_used = clock;
        live.in_use.fetch_add(1, Ordering::AcqRel);
        Some(InUse {
            handle: live.handle.clone(),
            in_use: live.in_use.clone(),
        })
    }

    /// Register a live session; what its workspace's watch saw while it was dormant, in order.
    fn insert(&mut self, handle: SessionHandle) -> Vec<FileEntry> {
        self.clock += 1;
        let mut held: Vec<(u64, FileEntry)> = self
            .dormant
            .remove(&handle.id)
            .map(|d| d.changes.into_values().collect())
            .unwrap_or_default();
        held.sort_by_key(|(seen, _)| *seen);
        self.sessions.insert(
            handle.id.clone(),
            Live {
                handle,
                last_used: self.clock,
                in_use: Arc::new(AtomicUsize::new(0)),
            },
        );
        held.into_iter().map(|(_, change)| change).collect()
    }

    /// Keep changes a watch saw for the dormant sessions of its workspace.
    fn hold_changes(&mut self, workspace: &Path, changes: &[FileEntry]) {
        for d in self.dormant.values_mut() {
            if d.workspace != workspace {
                continue;
            }
            for change in changes {
                self.clock += 1;
                let room =
                    d.changes.len() < MAX_HELD_CHANGES || d.changes.contains_key(&change.path);
                if room {
                    d.changes
                        .insert(change.path.clone(), (self.clock, change.clone()));
                }
            }
        }
    }
}

/// Paths whose latest change is kept for one dormant session; past this (a tree rewritten while
/// the session slept), further paths are not recorded for it.
const MAX_HELD_CHANGES: usize = 10_000;

struct Workspace {
    flight: FlightLog,
    /// Held for its lifetime: dropping it stops the watch. `None` while it starts, when
    /// watching is off, or when it could not start (the client was told).
    watcher: Option<WorkspaceWatcher>,
}

/// What `soba/session/open` asks for.
#[derive(Debug, Clone, Default)]
pub struct OpenRequest {
    pub workspace: String,
    pub session_id: Option<String>,
    pub create: Option<bool>,
    pub model: Option<ModelParams>,
    /// What a created log's header records as its source: the agent transcript `soba attach`
    /// follows, so that the session is budgeted as that agent's (the allowance for what its
    /// transcript never records) exactly as `soba import` of the same transcript is.
    pub source: Option<SourceInfo>,
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
            waking: tokio::sync::Mutex::new(()),
        })
    }

    /// A connection opened; its id is what the session actors know it by.
    pub fn connected(&self, client: ClientId) {
        self.lock().connections.insert(client);
    }

    /// A connection ended: an inference it left in flight no longer keeps its session busy.
    pub fn disconnected(&self, client: ClientId) {
        self.lock().connections.remove(&client);
        self.close_idle();
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
    /// as is; one on disk (dormant or closed) is loaded; a missing one is created only when
    /// `create` is `true`.
    pub async fn open(self: &Arc<Self>, req: OpenRequest) -> Result<InUse, RpcError> {
        let workspace = workspace_path(&req.workspace).map_err(RpcError::invalid_params)?;
        let id = match (&req.session_id, req.create) {
            (Some(id), _) => {
                validate_session_id(id)?;
                id.clone()
            }
            (None, Some(false)) => return self.active(&workspace).await,
            (None, _) => soba_core::util::new_id("s_"),
        };
        let (live, dormant_in) = {
            let mut reg = self.lock();
            let dormant_in = reg.dormant.get(&id).map(|d| d.workspace.clone());
            (reg.take(&id), dormant_in)
        };
        let known_in = live.as_ref().map(|h| h.workspace.clone()).or(dormant_in);
        if let Some(other) = known_in.filter(|w| *w != workspace) {
            return Err(RpcError::invalid_params(format!(
                "`sessionId`: session `{id}` belongs to workspace {}, not {}",
                other.display(),
                workspace.display()
            )));
        }
        let handle = match live {
            Some(mut h) => {
                let unbound = match (&h.keyed_summarizer, &req.connection) {
                    (Some(keyed), Some(connection)) => keyed.rebind_if_gone(connection).err(),
                    _ => None,
                };
                if let Some(e) = unbound {
                    h.warnings.push(format!(
                        "The summarization model cannot be used ({e}); capsules are built locally"
                    ));
                }
                if req.settings.is_some() {
                    h.warnings.push(format!(
                        "session `{id}` is already open, with the settings it was opened with; the `compaction` and `summarizer` given now apply after soba/session/close and a new open"
                    ));
                }
                h
            }
            None => {
                let create = req.session_id.is_none() || req.create == Some(true);
                let opened_with = OpenedWith {
                    settings: req.settings.clone(),
                    connection: req.connection.as_ref().map(Arc::downgrade),
                };
                self.load(
                    &workspace,
                    &id,
                    create,
                    req.model.clone(),
                    req.source.clone(),
                    opened_with,
                )
                .await?
            }
        };
        self.set_active(&workspace, &handle.id);
        Ok(handle)
    }

    /// Load a session's log into a new actor and register it, held for the caller. A session
    /// that was just closed for being idle is loaded once its old actor let go of the log.
    async fn load(
        self: &Arc<Self>,
        workspace: &Path,
        id: &str,
        create: bool,
        model: Option<ModelParams>,
        source: Option<SourceInfo>,
        opened_with: OpenedWith,
    ) -> Result<InUse, RpcError> {
        let released = self.lock().dormant.get(id).map(|d| d.released.clone());
        if let Some(mut released) = released {
            // An error means the closing task is gone, and with it the old actor.
            let _ = released.wait_for(|done| *done).await;
        }
        let path = self
            .paths
            .sessions_dir(workspace)
            .join(format!("{id}.jsonl"));
        let connection = opened_with.connection.as_ref().and_then(Weak::upgrade);
        let layers = self.layers(
            workspace,
            connection.as_deref(),
            opened_with.settings.clone(),
        );
        let (ws, id_owned) = (workspace.to_path_buf(), id.to_string());
        let (log, config, config_files, warnings) = tokio::task::spawn_blocking(move || {
            open_log(&path, &ws, &id_owned, create, model, source, layers?)
        })
        .await
        .map_err(|e| RpcError::internal(format!("opening the session failed: {e}")))??;
        let mut keyed_summarizer = None;
        let summarizer = match &self.options.summarizer {
            Some(s) => Some(s.clone()),
            None => match match &connection {
                Some(c) => c.summarizer(&config.summarizer).map(|keyed| {
                    keyed_summarizer = keyed.clone();
                    keyed.map(|k| k as Arc<dyn Summarizer>)
                }),
                None => crate::summarize::from_config(&config.summarizer).map(|s| s.map(Arc::from)),
            } {
                Ok(s) => s,
                Err(e) => {
                    self.degraded(
                        workspace,
                        format!("The summarization model cannot be used ({e}); capsules are built locally"),
                    );
                    None
                }
            },
        };
        let mut handle = actor::spawn(actor::ActorSetup {
            log,
            config,
            config_files,
            summarizer,
            flight: FlightLog::new(&self.paths.workspace_dir(workspace)),
            events: self.events.clone(),
            unseen_store: Some(soba_core::session::unseen_priors::UnseenStore::path_in(
                &self.paths.data_dir,
            )),
        });
        handle.warnings = warnings;
        handle.keyed_summarizer = keyed_summarizer;
        handle.opened_with = opened_with;
        let taken = {
            let mut reg = self.lock();
            // Another client may have opened the same session meanwhile; the log lock makes
            // that impossible on disk, so the first handle stays.
            let held = if reg.sessions.contains_key(&handle.id) {
                Vec::new()
            } else {
                reg.insert(handle.clone())
            };
            (reg.take(&handle.id).expect("registered above"), held)
        };
        let (taken, held) = taken;
        if !held.is_empty() {
            // Queued before the caller's request, so the request sees them.
            taken.watched_files(held);
        }
        self.ensure_workspace(workspace).await;
        self.close_idle();
        Ok(taken)
    }

    /// Open a dormant session again for a request; `None` when `id` is not dormant.
    async fn wake(self: &Arc<Self>, id: &str) -> Result<Option<InUse>, RpcError> {
        let _one_at_a_time = self.waking.lock().await;
        let workspace = {
            let mut reg = self.lock();
            if let Some(h) = reg.take(id) {
                // Woken by the request before this one.
                return Ok(Some(h));
            }
            match reg.dormant.get(id) {
                Some(d) => (d.workspace.clone(), d.opened_with.clone()),
                None => return Ok(None),
            }
        };
        let (workspace, opened_with) = workspace;
        match self
            .load(&workspace, id, false, None, None, opened_with)
            .await
        {
            Ok(h) => Ok(Some(h)),
            Err(e) => {
                if e.code == code::UNKNOWN_SESSION {
                    // Its log was removed meanwhile: it is gone, not dormant.
                    self.lock().dormant.remove(id);
                }
                Err(e)
            }
        }
    }

    /// Close the least recently used idle sessions while more than `max_idle_sessions` are
    /// live and idle. Idle: no request holds it ([`InUse`]), no compaction runs or waits, no
    /// connected agent's inference is in flight, and no transcript is followed into it. Each
    /// becomes dormant, its workspace stops being watched when no live session of it is left,
    /// and every client of the workspace hears `soba/session/closed` with reason `idle`.
    pub fn close_idle(&self) {
        let max = self.options.max_idle_sessions.max(1);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut unwatched = Vec::new();
        let victims = {
            let mut guard = self.lock();
            if guard.sessions.len() <= max {
                return;
            }
            let followed: HashSet<String> = self
                .followers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .cloned()
                .collect();
            let reg = &mut *guard;
            let mut idle: Vec<(u64, String)> = reg
                .sessions
                .iter()
                .filter(|(id, live)| {
                    live.in_use.load(Ordering::Acquire) == 0
                        && !followed.contains(*id)
                        && !live.handle.busy(|c| reg.connections.contains(&c))
                })
                .map(|(id, live)| (live.last_used, id.clone()))
                .collect();
            if idle.len() <= max {
                return;
            }
            idle.sort_unstable();
            idle.truncate(idle.len() - max);
            let mut victims = Vec::with_capacity(idle.len());
            for (_, id) in idle {
                let Some(live) = reg.sessions.remove(&id) else {
                    continue;
                };
                let (released_tx, released) = watch::channel(false);
                reg.dormant.insert(
                    id,
                    Dormant {
                        workspace: live.handle.workspace.clone(),
                        path: live.handle.path.clone(),
                        status: live.handle.status(),
                        changes: BTreeMap::new(),
                        released,
                        opened_with: live.handle.opened_with.clone(),
                    },
                );
                victims.push((live.handle, released_tx));
            }
            for (h, _) in &victims {
                let needed = reg
                    .sessions
                    .values()
                    .any(|l| l.handle.workspace == h.workspace);
                if !needed {
                    unwatched.extend(reg.workspaces.remove(&h.workspace));
                }
            }
            victims
        };
        // The watchers stop here, outside the registry's lock (their threads may be calling
        // into the registry to deliver a last change).
        drop(unwatched);
        for (handle, released) in victims {
            let events = self.events.clone();
            runtime.spawn(async move {
                // Everything queued before finishes first; appends were durable when answered.
                if let Err(e) = handle.close().await {
                    eprintln!("soba: closing idle session {}: {}", handle.id, e.message);
                }
                let _ = released.send(true);
                let _ = events.send(Event::SessionClosed(SessionClosedNotice {
                    session_id: handle.id.clone(),
                    workspace: handle.workspace.display().to_string(),
                    reason: SessionCloseReason::Idle,
                }));
                drop(handle);
                super::heap_trim::return_freed_memory();
            });
        }
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
            load_workspace_config(workspace).map_err(bad)?
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
                    flight: FlightLog::new(&self.paths.workspace_dir(workspace)),
                    watcher: None,
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
        let mut unneeded = None;
        {
            let mut reg = self.lock();
            match reg.workspaces.get_mut(workspace) {
                Some(entry) => entry.watcher = watcher,
                // Its sessions were closed while the watch started.
                None => unneeded = watcher,
            }
        }
        drop(unneeded);
    }

    fn start_watcher(
        self: &Arc<Self>,
        workspace: &Path,
        mode: WatchMode,
    ) -> Option<WorkspaceWatcher> {
        let daemon = Arc::downgrade(self);
        let ws = workspace.to_path_buf();
        let sink = move |changes: Vec<soba_core::session::entry::FileEntry>| {
            if let Some(d) = daemon.upgrade() {
                // Under the lock, so that each session gets the changes once: a live one through
                // its queue (ahead of any close), a dormant one when it is opened again.
                let mut reg = d.lock();
                for live in reg.sessions.values().filter(|l| l.handle.workspace == ws) {
                    live.handle.watched_files(changes.clone());
                }
                reg.hold_changes(&ws, &changes);
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
        self.lock()
            .active
            .insert(workspace.to_path_buf(), id.to_string());
    }

    async fn active(self: &Arc<Self>, workspace: &Path) -> Result<InUse, RpcError> {
        let id = self.lock().active.get(workspace).cloned();
        let found = match id {
            Some(id) => self.use_session(&id).await,
            None => Err(RpcError::unknown_session("")),
        };
        match found {
            Err(e) if e.code == code::UNKNOWN_SESSION => Err(RpcError::new(
                code::UNKNOWN_SESSION,
                format!(
                    "workspace {} has no active session; an agent opens one with soba/session/open",
                    workspace.display()
                ),
            )),
            other => other,
        }
    }

    /// End a session: it leaves the registry (and stops being the workspace's active
    /// session), its actor finishes what was asked before and releases the log, and every
    /// client that knows the workspace hears `soba/session/closed`. The last session of a
    /// workspace takes the workspace's file watch with it. Opening it again loads it from disk.
    /// A dormant session is closed too: it stops being opened again on use. Returns the log.
    pub async fn close(&self, id: &str) -> Result<PathBuf, RpcError> {
        let (closing, workspace, path, unwatched) = {
            let mut reg = self.lock();
            let (closing, workspace, path) = if let Some(live) = reg.sessions.remove(id) {
                let (ws, path) = (live.handle.workspace.clone(), live.handle.path.clone());
                (Ok(live.handle), ws, path)
            } else if let Some(d) = reg.dormant.remove(id) {
                (Err(d.released), d.workspace, d.path)
            } else {
                return Err(RpcError::unknown_session(id));
            };
            if reg.active.get(&workspace).map(String::as_str) == Some(id) {
                reg.active.remove(&workspace);
            }
            let needed = reg
                .sessions
                .values()
                .any(|l| l.handle.workspace == workspace);
            let unwatched = if needed {
                None
            } else {
                reg.workspaces.remove(&workspace)
            };
            (closing, workspace, path, unwatched)
        };
        drop(unwatched);
        match closing {
            Ok(handle) => handle.close().await?,
            Err(mut released) => {
                // Closed for being idle a moment ago: answer once the log is free.
                let _ = released.wait_for(|done| *done).await;
            }
        }
        let _ = self.events.send(Event::SessionClosed(SessionClosedNotice {
            session_id: id.to_string(),
            workspace: workspace.display().to_string(),
            reason: SessionCloseReason::Closed,
        }));
        super::heap_trim::return_freed_memory();
        Ok(path)
    }

    /// A live session by id (never opens a dormant one).
    pub fn session(&self, id: &str) -> Result<SessionHandle, RpcError> {
        self.lock()
            .sessions
            .get(id)
            .map(|l| l.handle.clone())
            .ok_or_else(|| RpcError::unknown_session(id))
    }

    /// A session for one request: live, or dormant and opened again first.
    pub async fn use_session(self: &Arc<Self>, id: &str) -> Result<InUse, RpcError> {
        let live = self.lock().take(id);
        match live {
            Some(h) => Ok(h),
            None => self
                .wake(id)
                .await?
                .ok_or_else(|| RpcError::unknown_session(id)),
        }
    }

    /// The session an editor-side request means: `sessionId`, else the active session of
    /// `workspace`, else of `fallback_workspace` (the client's first folder).
    pub async fn resolve(
        self: &Arc<Self>,
        session_id: Option<&str>,
        workspace: Option<&str>,
        fallback_workspace: Option<&str>,
    ) -> Result<InUse, RpcError> {
        if let Some(id) = session_id {
            return self.use_session(id).await;
        }
        let ws = workspace.or(fallback_workspace).ok_or_else(|| {
            RpcError::invalid_params("`sessionId`: give a sessionId or a workspace (the client named no workspace folder)")
        })?;
        self.active(&workspace_path(ws).map_err(RpcError::invalid_params)?)
            .await
    }

    /// Workspaces whose file watch runs now, sorted.
    pub fn watched_workspaces(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self
            .lock()
            .workspaces
            .iter()
            .filter(|(_, w)| w.watcher.is_some())
            .map(|(p, _)| p.clone())
            .collect();
        out.sort();
        out
    }

    /// The last snapshot of the session a read-only request means (as [`Daemon::resolve`]
    /// finds it), without opening a dormant one: its log has not changed since it was closed,
    /// so its snapshot is exact. A status bar asking after `soba/session/closed` with reason
    /// `idle` thus sees the same figures and does not bring the session back into memory.
    pub fn snapshot(
        &self,
        session_id: Option<&str>,
        workspace: Option<&str>,
        fallback_workspace: Option<&str>,
    ) -> Result<actor::Status, RpcError> {
        let ws = match session_id {
            Some(_) => None,
            None => {
                let ws = workspace.or(fallback_workspace).ok_or_else(|| {
                    RpcError::invalid_params("`sessionId`: give a sessionId or a workspace (the client named no workspace folder)")
                })?;
                Some(workspace_path(ws).map_err(RpcError::invalid_params)?)
            }
        };
        let reg = self.lock();
        let id = match (session_id, &ws) {
            (Some(id), _) => Some(id),
            (None, Some(ws)) => reg.active.get(ws).map(String::as_str),
            (None, None) => None,
        };
        let found = id.and_then(|id| {
            reg.sessions
                .get(id)
                .map(|l| l.handle.status())
                .or_else(|| reg.dormant.get(id).map(|d| d.status.clone()))
        });
        found.ok_or_else(|| match (session_id, ws) {
            (Some(id), _) => RpcError::unknown_session(id),
            (None, ws) => RpcError::new(
                code::UNKNOWN_SESSION,
                format!(
                    "workspace {} has no active session; an agent opens one with soba/session/open",
                    ws.unwrap_or_default().display()
                ),
            ),
        })
    }

    /// Sessions, live and dormant, of one workspace when given, sorted by workspace then id.
    /// A dormant session shows the figures it had when it was closed for being idle: its log
    /// has not changed since.
    pub fn summaries(&self, workspace: Option<&str>) -> Result<Vec<SessionSummary>, RpcError> {
        let filter = workspace
            .map(workspace_path)
            .transpose()
            .map_err(RpcError::invalid_params)?;
        let reg = self.lock();
        let live = reg.sessions.values().map(|l| {
            (
                &l.handle.id,
                &l.handle.workspace,
                &l.handle.path,
                l.handle.status(),
                true,
            )
        });
        let dormant = reg
            .dormant
            .iter()
            .map(|(id, d)| (id, &d.workspace, &d.path, d.status.clone(), false));
        let mut out: Vec<SessionSummary> = live
            .chain(dormant)
            .filter(|(_, ws, ..)| filter.as_ref().is_none_or(|w| w == *ws))
            .map(|(id, ws, path, status, in_memory)| SessionSummary {
                session_id: id.clone(),
                workspace: ws.display().to_string(),
                path: path.display().to_string(),
                active: reg.active.get(ws) == Some(id),
                in_memory,
                entries: status.entries,
                effective_tokens: status.budget.effective_tokens(),
                hard_limit: status.budget.hard_limit(),
                last_compaction: status.budget.last_compaction(),
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
    source: Option<SourceInfo>,
    layers: Layers,
) -> Result<(SessionLog, Config, Vec<ConfigFile>, Vec<String>), RpcError> {
    let loaded = layers.stack();
    let files = loaded.files;
    let mut warnings = loaded.warnings;
    let asked_model = model.map(|m| ModelFile {
        name: m.name,
        context_window: m.context_window,
        max_output_tokens: m.max_output_tokens,
        ..ModelFile::default()
    });
    let provisional = Config::resolve(&files, asked_model.as_ref(), &Overrides::default())
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
            created_at: soba_core::util::now_rfc3339(),
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
            source,
        };
        if let Some(dir) = path.parent() {
            soba_core::files::create_private_dir_all(dir)
                .map_err(|e| RpcError::internal(format!("{}: {e}", dir.display())))?;
        }
        SessionLog::create(path, header, provisional.durability).map_err(log_error)?
    } else {
        return Err(RpcError::unknown_session(id));
    };
    let config = Config::resolve(
        &files,
        log.session().model_config().as_ref(),
        &Overrides::default(),
    )
    .map_err(|e| RpcError::invalid_params(format!("configuration: {e}")))?;
    warnings.extend(config.warnings.iter().cloned());
    Ok((log, config, files, warnings))
}
