//! `soba serve` and `soba flight`.

use std::path::Path;

use super::{print_json, CommonArgs};
use crate::daemon::paths::Paths;
use crate::daemon::registry::{Daemon, DaemonOptions};
use crate::daemon::{connection, socket};
use crate::flight::{FlightLog, FlightRecord};
use soba_core::config::DaemonSettings;
use soba_core::session::log::read_session;
use soba_core::util::human_tokens;

/// How `soba serve` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeMode {
    /// Relay stdio to the user's shared daemon, starting it when needed.
    Shared,
    /// Serve this one client in-process.
    Standalone,
    /// Be the shared daemon (started by `soba serve`).
    Daemon,
}

fn idle_timeout() -> std::time::Duration {
    std::env::var("SOBA_DAEMON_IDLE_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(socket::DEFAULT_IDLE, std::time::Duration::from_secs_f64)
}

pub fn serve(mode: ServeMode, common: &CommonArgs) -> anyhow::Result<()> {
    // A client that disconnects mid-reply must end that connection, not the daemon: writes to
    // a closed socket or pipe return EPIPE instead of raising SIGPIPE.
    // SAFETY: called before the runtime starts any thread; SIG_IGN is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let paths = Paths::from_env()?;
    // Read here in every mode, so that a bad `daemon` setting is reported to the user running
    // `soba serve` rather than to the log of a daemon started in the background.
    let settings = DaemonSettings::load(common.config.clone())?;
    let options = DaemonOptions {
        extra_config: common.config.clone(),
        max_idle_sessions: settings.max_idle_sessions,
        ..DaemonOptions::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(async move {
        match mode {
            ServeMode::Standalone => {
                let daemon = Daemon::new(paths, options);
                crate::daemon::server::serve_connection(
                    daemon,
                    tokio::io::stdin(),
                    tokio::io::stdout(),
                )
                .await;
                Ok(())
            }
            ServeMode::Daemon => socket::run_daemon(paths, options, idle_timeout()).await,
            ServeMode::Shared => {
                let mut args = Vec::new();
                if let Some(c) = &common.config {
                    args.push("--config".into());
                    args.push(c.clone().into_os_string());
                }
                // This client's own config and keys, whoever started the daemon.
                let cwd = std::env::current_dir().ok();
                let (hello, warnings) =
                    connection::gather_own(common.config.as_deref(), cwd.as_deref())?;
                for w in &warnings {
                    errln!("soba: warning: {w}");
                }
                let withheld: Vec<&str> = hello.env.keys().map(String::as_str).collect();
                let start = || socket::spawn_daemon_process(&paths, &args, &withheld);
                let mut stream =
                    socket::connect_or_start(&paths, start, socket::START_TIMEOUT).await?;
                if let Some(w) = socket::send_hello(&mut stream, &hello).await? {
                    errln!("soba: warning: {w}");
                }
                drop(hello);
                socket::relay(stream, tokio::io::stdin(), tokio::io::stdout()).await
            }
        }
    });
    // A blocking read of stdin may still be pending; waiting for it would hang the exit.
    rt.shutdown_background();
    result
}

/// `soba flight [SESSION]`: the flight records of a session log, or of the current folder's
/// workspace.
pub fn flight(session: Option<&Path>, common: &CommonArgs) -> anyhow::Result<()> {
    let records = match session {
        Some(path) => {
            let (s, _) = read_session(path)?;
            FlightLog::for_session_log(path).read(Some(&s.header.id), None)?
        }
        None => {
            let cwd = std::env::current_dir()?.canonicalize()?;
            FlightLog::new(&Paths::from_env()?.workspace_dir(&cwd)).read(None, None)?
        }
    };
    if common.json {
        return print_json(&serde_json::json!({ "records": records }));
    }
    if records.is_empty() {
        outln!("no compaction recorded yet");
    }
    for r in &records {
        outln!("{}", flight_line(r));
    }
    Ok(())
}

fn flight_line(r: &FlightRecord) -> String {
    format!(
        "{}  {}  {}  {:<16} {:<9} {} → {} tokens (−{}) in {} ms{}  {}",
        r.ts,
        r.session_id,
        r.operation_id,
        r.trigger,
        r.outcome,
        human_tokens(r.tokens_before),
        human_tokens(r.tokens_after),
        human_tokens(r.reclaimed),
        r.duration_ms,
        r.checkpoint_id
            .as_deref()
            .map(|c| format!(", {c}"))
            .unwrap_or_default(),
        r.reason
    )
}
