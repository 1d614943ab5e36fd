//! `soba/attach` and automatic discovery: a live agent transcript followed into a session.
//!
//! The follow loop is the thin shell around [`crate::attach`]: it wakes on a file event for
//! the transcript's folder (notify) or every [`POLL`], reads what was appended, and appends the
//! settled entries to the session through its actor, like any client's `soba/session/append`,
//! so every editor of the workspace sees the budget move. When nothing was written for the
//! idle time and no process holds the transcript open, the agent is gone: the session is
//! closed and clients hear `soba/session/closed`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use notify::Watcher;

use super::actor::SessionHandle;
use super::paths::workspace_path;
use super::protocol::{code, AttachParams, AttachResult, Control, ModelParams, RpcError};
use super::registry::{Daemon, OpenRequest};
use crate::attach::agent_settings;
use crate::attach::discover::{self, Agent, Homes};
use crate::attach::follow::Follower;
use crate::attach::integration;
use crate::attach::liveness;
use crate::attach::tail::{Growth, Tailer};
use crate::import::ImportOptions;

/// How often the transcript is looked at when no file event came.
pub const POLL: Duration = Duration::from_millis(500);
/// Entries still open to change are appended after the writer has been quiet this long.
pub const QUIET: Duration = Duration::from_secs(1);
/// Default idle time after which an agent that holds no transcript open counts as gone.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(300);
/// Entries per append.
const APPEND_BATCH: usize = 256;

/// The idle time discovery uses: `SOBA_ATTACH_IDLE_SECS`, else [`DEFAULT_IDLE`].
pub fn discovery_idle() -> Duration {
    std::env::var("SOBA_ATTACH_IDLE_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(DEFAULT_IDLE, Duration::from_secs_f64)
}

/// What `soba/attach` did.
pub struct Attached {
    pub handle: SessionHandle,
    pub transcript: PathBuf,
    pub agent: String,
    pub imported: usize,
}

impl Attached {
    pub fn result(&self) -> AttachResult {
        AttachResult {
            session_id: self.handle.id.clone(),
            path: self.handle.path.display().to_string(),
            transcript: self.transcript.display().to_string(),
            agent: self.agent.clone(),
            imported: self.imported,
            budget: self.handle.status().budget,
        }
    }
}

/// A session id for a transcript: the agent and the file's name (the agent's own session id
/// for Claude Code and pi, the rollout name for Codex), stable across restarts.
fn session_id_for(agent: &str, transcript: &Path) -> String {
    let stem = transcript
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("transcript");
    let safe: String = format!("{agent}-{stem}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(128)
        .collect();
    safe
}

impl Daemon {
    /// Follow the newest live transcript of `workspace`, if an agent is running there, and
    /// return its session; else why no agent was found, in words for the user. Quiet on
    /// failure: this runs because a client looked.
    pub async fn discover(self: &Arc<Self>, workspace: &str) -> Result<SessionHandle, String> {
        let idle = discovery_idle();
        let ws = workspace_path(workspace)?;
        let homes = Homes::from_env();
        let found = tokio::task::spawn_blocking({
            let (homes, ws) = (homes.clone(), ws.clone());
            move || discover::newest(&homes, &ws, None)
        })
        .await
        .map_err(|e| format!("looking for agent transcripts failed: {e}"))?;
        let Some(found) = found else {
            let looked: Vec<String> = Agent::ALL
                .iter()
                .map(|a| homes.describe_for(*a, &ws))
                .collect();
            return Err(format!(
                "no Claude Code, Codex or pi transcript of it was found (looked in {})",
                looked.join(", ")
            ));
        };
        let age = found.modified.elapsed().unwrap_or_default();
        if age >= idle && liveness::held_open(&found.path) != Some(true) {
            return Err(format!(
                "its newest {} transcript, {}, was last written {} ago (the idle time is {} s) and no process holds it open",
                found.agent.as_str(),
                found.path.display(),
                rough_age(age),
                idle.as_secs()
            ));
        }
        let params = AttachParams {
            workspace: ws.display().to_string(),
            transcript: Some(found.path.display().to_string()),
            agent: Some(found.agent.as_str().to_string()),
            idle_secs: Some(idle.as_secs_f64()),
        };
        let result = self.attach(params, None).await;
        let mut unfollowable = self.unfollowable.lock().unwrap_or_else(|p| p.into_inner());
        match result {
            Ok(a) => {
                // A later failure of the same transcript is news again.
                unfollowable.remove(&found.path);
                Ok(a.handle)
            }
            Err(e) => {
                let why = format!(
                    "the {} transcript {} cannot be followed: {}",
                    found.agent.as_str(),
                    found.path.display(),
                    e.message
                );
                if unfollowable.insert(found.path.clone()) {
                    self.degraded(&ws, why.clone());
                }
                Err(why)
            }
        }
    }

    /// `soba/attach`: import the transcript so far into its session and keep following it.
    /// `connection`: the config and keys of the client asking (see
    /// [`super::connection`]); `None` for the daemon's own discovery.
    pub async fn attach(
        self: &Arc<Self>,
        p: AttachParams,
        connection: Option<Arc<super::connection::ConnectionConfig>>,
    ) -> Result<Attached, RpcError> {
        let workspace = workspace_path(&p.workspace).map_err(RpcError::invalid_params)?;
        let agent = p
            .agent
            .as_deref()
            .map(Agent::parse)
            .transpose()
            .map_err(|e| RpcError::invalid_params(format!("`agent`: {e}")))?;
        let idle = match p.idle_secs {
            Some(s) if s.is_finite() && s > 0.0 => Duration::from_secs_f64(s),
            Some(s) => {
                return Err(RpcError::invalid_params(format!(
                    "`idleSecs`: {s} is not a positive number of seconds"
                )))
            }
            None => DEFAULT_IDLE,
        };
        let transcript = match &p.transcript {
            Some(t) => {
                let path = PathBuf::from(t);
                if !path.is_absolute() {
                    return Err(RpcError::invalid_params(format!(
                        "`transcript`: {t} is not an absolute path"
                    )));
                }
                std::fs::canonicalize(&path).map_err(|e| {
                    RpcError::invalid_params(format!("`transcript`: cannot read {t}: {e}"))
                })?
            }
            None => {
                let homes = Homes::from_env();
                let ws = workspace.clone();
                let found = tokio::task::spawn_blocking(move || {
                    discover::newest(&homes, &ws, agent).ok_or(homes)
                })
                .await
                .map_err(|e| RpcError::internal(format!("discovery failed: {e}")))?;
                match found {
                    Ok(f) => f.path,
                    Err(homes) => {
                        let agents = agent.map_or(Agent::ALL.to_vec(), |a| vec![a]);
                        let looked: Vec<String> = agents
                            .iter()
                            .map(|a| homes.describe_for(*a, &workspace))
                            .collect();
                        return Err(RpcError::new(
                            code::UNKNOWN_SESSION,
                            format!(
                                "no agent transcript of workspace {} was found (looked in {}); pass `transcript`",
                                workspace.display(),
                                looked.join(", ")
                            ),
                        ));
                    }
                }
            }
        };
        let _one_at_a_time = self.attaching.lock().await;
        let followed = self
            .followers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&transcript)
            .cloned();
        if let Some(id) = followed {
            if let Ok(handle) = self.session(&id) {
                let agent = handle_agent(&id);
                return Ok(Attached {
                    handle,
                    transcript,
                    agent,
                    imported: 0,
                });
            }
        }

        // Read what is there now.
        let options = ImportOptions {
            source_path: transcript.display().to_string(),
            default_workspace: workspace.display().to_string(),
            default_session_id: String::new(),
            now: soba_core::util::now_rfc3339(),
        };
        let mut follower = Follower::new(agent.map(Agent::format), options)
            .map_err(|e| RpcError::invalid_params(format!("`agent`: {e}")))?;
        let mut tailer = Tailer::new(&transcript);
        let (mut follower, tailer) = tokio::task::spawn_blocking(move || {
            let growth = tailer.poll().map_err(|e| {
                RpcError::invalid_params(format!(
                    "`transcript`: cannot read {}: {e}",
                    tailer.path().display()
                ))
            })?;
            follower
                .feed(growth)
                .map_err(|e| RpcError::invalid_params(format!("`transcript`: {e}")))?;
            Ok::<_, RpcError>((follower, tailer))
        })
        .await
        .map_err(|e| RpcError::internal(format!("reading the transcript failed: {e}")))??;
        let Some(format) = follower.format() else {
            return Err(RpcError::invalid_params(format!(
                "`transcript`: {} holds no record of a known agent yet (claude-code, codex, pi); pass `agent` to follow it anyway",
                transcript.display()
            )));
        };
        let agent_name = format.as_str().to_string();
        let model = follower
            .header()
            .and_then(|h| h.model)
            .filter(|m| m.name.is_some() || m.context_window.is_some())
            .map(|m| ModelParams {
                name: m.name,
                context_window: m.context_window,
                max_output_tokens: m.max_output_tokens,
            });
        let header_names_model = model.as_ref().is_some_and(|m| m.name.is_some());
        let handle = self
            .open(OpenRequest {
                workspace: workspace.display().to_string(),
                session_id: Some(session_id_for(&agent_name, &transcript)),
                create: Some(true),
                model,
                source: follower.header().and_then(|h| h.source),
                settings: None,
                connection,
            })
            .await?;
        // The agent compacts its own context; the budget says so, and how SOBA reaches it.
        let followed_agent = Agent::parse(&agent_name).map_err(RpcError::internal)?;
        let integration = integration::installed(
            followed_agent,
            &integration::SettingsHomes::from_env(),
            &workspace,
        );
        // What the agent's own settings say of its default model and its compaction threshold,
        // read here (the shell), never by the engine.
        let settings = {
            let workspace = workspace.clone();
            tokio::task::spawn_blocking(move || {
                agent_settings::read(
                    followed_agent,
                    &integration::SettingsHomes::from_env(),
                    &workspace,
                )
            })
            .await
            .map_err(|e| RpcError::internal(format!("reading the agent's settings failed: {e}")))?
        };
        handle
            .follow(
                Control::followed(followed_agent, integration),
                super::actor::Following {
                    agent: followed_agent,
                    settings,
                    settings_model_in_use: false,
                    header_names_model,
                },
            )
            .await?;
        // A session followed before (an earlier daemon): its records are not imported again.
        let log = handle.path.clone();
        if let Ok(Ok((existing, _))) =
            tokio::task::spawn_blocking(move || soba_core::session::log::read_session(&log)).await
        {
            follower.know(&existing);
        }
        // The file as it stands: written long enough ago that nothing is still open.
        let quiet = std::fs::metadata(&transcript)
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age >= QUIET));
        let batch = follower.take(quiet);
        let imported = batch.len();
        append_all(&handle, batch).await?;
        self.followers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(transcript.clone(), handle.id.clone());
        let daemon = Arc::downgrade(self);
        let session = handle.clone();
        tokio::spawn(follow(daemon, session, tailer, follower, idle));
        Ok(Attached {
            handle: handle.clone(),
            transcript,
            agent: agent_name,
            imported,
        })
    }
}

/// `40 s`, `12 min`, `3 h`, `2 days`: how long ago, for a message.
fn rough_age(age: Duration) -> String {
    let secs = age.as_secs();
    match secs {
        0..=119 => format!("{secs} s"),
        120..=7199 => format!("{} min", secs / 60),
        7200..=172_799 => format!("{} h", secs / 3600),
        _ => format!("{} days", secs / 86_400),
    }
}

fn handle_agent(session_id: &str) -> String {
    Agent::ALL
        .iter()
        .map(|a| a.as_str())
        .find(|a| session_id.starts_with(&format!("{a}-")))
        .unwrap_or("unknown")
        .to_string()
}

async fn append_all(
    handle: &SessionHandle,
    entries: Vec<serde_json::Value>,
) -> Result<(), RpcError> {
    for chunk in entries.chunks(APPEND_BATCH) {
        handle.append(chunk.to_vec()).await?;
    }
    Ok(())
}

/// Follow until the agent is gone or the session is closed.
async fn follow(
    daemon: std::sync::Weak<Daemon>,
    session: SessionHandle,
    mut tailer: Tailer,
    mut follower: Follower,
    idle: Duration,
) {
    let transcript = tailer.path().to_path_buf();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // File events only wake the loop early; the poll below reads either way.
    let watcher = notify::recommended_watcher(move |_: notify::Result<notify::Event>| {
        let _ = tx.send(());
    });
    let _watcher = watcher.ok().and_then(|mut w| {
        let dir = transcript.parent()?;
        w.watch(dir, notify::RecursiveMode::NonRecursive).ok()?;
        Some(w)
    });
    let mut last_write = Instant::now();
    let mut pending = true;
    loop {
        tokio::select! {
            _ = rx.recv() => {}
            _ = tokio::time::sleep(POLL) => {}
        }
        while rx.try_recv().is_ok() {}
        let Some(d) = daemon.upgrade() else { return };
        if d.session(&session.id).is_err() {
            // Closed by a client.
            break;
        }
        match tailer.poll() {
            Ok(growth) => {
                let grew = !matches!(&growth, Growth::Appended(b) if b.is_empty());
                if grew {
                    last_write = Instant::now();
                    pending = true;
                }
                if let Err(e) = follower.feed(growth) {
                    d.degraded(
                        &session.workspace,
                        format!("stopped following {}: {e}", transcript.display()),
                    );
                    break;
                }
            }
            // Missing for a moment while the agent replaces it; gone for good ends below.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                d.degraded(
                    &session.workspace,
                    format!("stopped following {}: {e}", transcript.display()),
                );
                break;
            }
        }
        let quiet = pending && last_write.elapsed() >= QUIET;
        let batch = follower.take(quiet);
        if quiet {
            pending = false;
        }
        if let Err(e) = append_all(&session, batch).await {
            if e.code == code::UNKNOWN_SESSION {
                break;
            }
            d.degraded(
                &session.workspace,
                format!(
                    "entries of {} were not recorded: {}",
                    transcript.display(),
                    e.message
                ),
            );
        }
        if last_write.elapsed() >= idle {
            let path = transcript.clone();
            let held = tokio::task::spawn_blocking(move || liveness::held_open(&path))
                .await
                .ok()
                .flatten();
            if held != Some(true) {
                // The agent went away: the session stops being active in every editor.
                let _ = d.close(&session.id).await;
                break;
            }
        }
    }
    if let Some(d) = daemon.upgrade() {
        let mut followers = d.followers.lock().unwrap_or_else(|p| p.into_inner());
        if followers.get(&transcript) == Some(&session.id) {
            followers.remove(&transcript);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_in_the_unit_a_person_would_use() {
        assert_eq!(rough_age(Duration::from_secs(45)), "45 s");
        assert_eq!(rough_age(Duration::from_secs(12 * 60 + 5)), "12 min");
        assert_eq!(rough_age(Duration::from_secs(3 * 3600)), "3 h");
        assert_eq!(rough_age(Duration::from_secs(5 * 86_400)), "5 days");
    }
}
