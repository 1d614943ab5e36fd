//! One daemon per user, shared through a Unix socket.
//!
//! `soba serve` connects to the user's daemon (starting it when absent) and relays its stdio,
//! so an agent in a terminal and an editor's status bar talk to the same live sessions. The
//! socket lives in a private runtime folder (0700, owned by the user), is itself 0600, and
//! every connection's peer uid is checked with `SO_PEERCRED`. The daemon holds an exclusive
//! lock for its lifetime: whoever holds it owns the socket path, so a socket file left by a
//! crashed daemon is recognized as stale and replaced.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use tokio::net::{UnixListener, UnixStream};

use super::paths::Paths;
use super::registry::{Daemon, DaemonOptions};
use super::server::serve_connection;

/// How long a daemon with no client waits before exiting.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(600);

/// How long `soba serve` waits for a daemon it started to accept connections.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

fn own_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Only the user who runs the daemon may talk to it.
pub fn authorized(peer_uid: u32, own_uid: u32) -> bool {
    peer_uid == own_uid
}

/// Create the runtime folder private to the user, or check an existing one: it must belong to
/// the user; group and other permissions are removed.
pub fn prepare_runtime_dir(dir: &Path) -> anyhow::Result<()> {
    soba_core::files::create_private_dir_all(dir)
        .with_context(|| format!("cannot create runtime folder {}", dir.display()))?;
    let meta = std::fs::metadata(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    if meta.uid() != own_uid() {
        bail!(
            "runtime folder {} belongs to uid {}, not to you (uid {}); set SOBA_RUNTIME_DIR to a folder of your own",
            dir.display(),
            meta.uid(),
            own_uid()
        );
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot make {} private (chmod 700)", dir.display()))?;
    }
    Ok(())
}

/// The exclusive daemon lock, or `None` when another daemon holds it.
fn try_daemon_lock(paths: &Paths) -> anyhow::Result<Option<File>> {
    let path = paths.lock_path();
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match f.try_lock() {
        Ok(()) => {
            f.set_len(0)?;
            writeln!(f, "{}", std::process::id())?;
            Ok(Some(f))
        }
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
}

/// A bound, private socket with the daemon lock held.
pub struct Listener {
    listener: UnixListener,
    _lock: File,
}

/// Bind the user's socket. `Ok(None)` when another daemon already serves it.
pub fn bind(paths: &Paths) -> anyhow::Result<Option<Listener>> {
    prepare_runtime_dir(&paths.runtime_dir)?;
    let Some(lock) = try_daemon_lock(paths)? else {
        return Ok(None);
    };
    let sock = paths.socket_path();
    // We hold the lock, so no live daemon is behind an existing socket file: it is stale.
    match std::fs::remove_file(&sock) {
        Ok(()) => eprintln!("soba: replaced stale socket {}", sock.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(e).with_context(|| format!("cannot remove stale socket {}", sock.display()))
        }
    }
    let listener = UnixListener::bind(&sock)
        .with_context(|| format!("cannot listen on {}", sock.display()))?;
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot chmod 600 {}", sock.display()))?;
    Ok(Some(Listener {
        listener,
        _lock: lock,
    }))
}

/// Accept clients until no client has been connected for `idle`.
pub async fn run(listener: Listener, daemon: Arc<Daemon>, idle: Duration) -> anyhow::Result<()> {
    let live = Arc::new(AtomicUsize::new(0));
    let changed = Arc::new(tokio::sync::Notify::new());
    loop {
        let idle_timer = async {
            loop {
                if live.load(Ordering::SeqCst) == 0 {
                    tokio::select! {
                        _ = tokio::time::sleep(idle) => return,
                        _ = changed.notified() => {}
                    }
                } else {
                    changed.notified().await;
                }
            }
        };
        let stream = tokio::select! {
            r = listener.listener.accept() => r.context("accepting a client")?.0,
            _ = idle_timer => return Ok(()),
        };
        let peer = stream.peer_cred().map(|c| c.uid()).ok();
        if !peer.is_some_and(|uid| authorized(uid, own_uid())) {
            eprintln!(
                "soba: refused a connection from uid {peer:?}: only uid {} may use this daemon",
                own_uid()
            );
            continue;
        }
        live.fetch_add(1, Ordering::SeqCst);
        changed.notify_waiters();
        let (daemon, live, changed) = (daemon.clone(), live.clone(), changed.clone());
        tokio::spawn(async move {
            let (r, w) = stream.into_split();
            serve_connection(daemon, r, w).await;
            live.fetch_sub(1, Ordering::SeqCst);
            changed.notify_waiters();
        });
    }
}

/// `soba serve --daemon`: bind and serve, or exit quietly when a daemon already runs.
pub async fn run_daemon(
    paths: Paths,
    options: DaemonOptions,
    idle: Duration,
) -> anyhow::Result<()> {
    let Some(listener) = bind(&paths)? else {
        return Ok(());
    };
    let daemon = Daemon::new(paths, options);
    run(listener, daemon, idle).await
}

/// Connect to the user's daemon, starting it when absent or when only a stale socket is left.
pub async fn connect_or_start(
    paths: &Paths,
    start: impl Fn() -> anyhow::Result<()>,
    wait: Duration,
) -> anyhow::Result<UnixStream> {
    let sock = paths.socket_path();
    if let Ok(s) = UnixStream::connect(&sock).await {
        return Ok(s);
    }
    prepare_runtime_dir(&paths.runtime_dir)?;
    start()?;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match UnixStream::connect(&sock).await {
            Ok(s) => return Ok(s),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                bail!(
                    "the daemon did not start listening on {} within {:.1}s ({e}); see {} or run `soba serve --standalone`",
                    sock.display(),
                    wait.as_secs_f64(),
                    paths.runtime_dir.join("daemon.log").display()
                )
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Start `soba serve --daemon` detached from this terminal, logging to `<runtime>/daemon.log`.
/// `withheld`: variables left out of its environment (the API keys this client hands over on
/// its own connection: the daemon serves other clients, who must not get them).
pub fn spawn_daemon_process(
    paths: &Paths,
    extra_args: &[std::ffi::OsString],
    withheld: &[&str],
) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("cannot find the soba executable")?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(paths.runtime_dir.join("daemon.log"))
        .context("cannot open the daemon log")?;
    let mut command = std::process::Command::new(exe);
    for var in withheld {
        command.env_remove(var);
    }
    command
        .args(extra_args)
        .arg("serve")
        .arg("--daemon")
        .env("SOBA_DATA_DIR", &paths.data_dir)
        .env("SOBA_RUNTIME_DIR", &paths.runtime_dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        // Its own process group: a Ctrl-C in the terminal that started it does not stop it.
        .process_group(0)
        .spawn()
        .context("cannot start the daemon")?;
    Ok(())
}

/// Hand the daemon this relay's config files and keys (`soba/client/hello`, see
/// [`super::connection`]) before anything else is sent on `stream`, and wait for its answer.
/// A daemon that refuses it (one started by an older `soba`, which predates the handshake)
/// still serves the connection, with its own configuration: that is a warning for the user
/// (the returned sentence), not a failure.
pub async fn send_hello(
    stream: &mut UnixStream,
    hello: &super::protocol::HelloParams,
) -> anyhow::Result<Option<String>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = serde_json::to_vec(&serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": super::protocol::CLIENT_HELLO, "params": hello,
    }))?;
    stream
        .write_all(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes())
        .await?;
    stream.write_all(&body).await?;
    stream.flush().await?;
    // Byte by byte up to the body: nothing after the answer may be read here, it is the
    // client's.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > super::framing::MAX_HEADER_BYTES {
            bail!("the daemon's answer to the handshake has no readable header");
        }
        let byte = stream
            .read_u8()
            .await
            .context("the daemon closed the connection during the handshake")?;
        head.push(byte);
    }
    let length = String::from_utf8_lossy(&head)
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())
                .flatten()
        })
        .context("the daemon's answer to the handshake has no Content-Length")?;
    let mut answer = vec![0; length];
    stream.read_exact(&mut answer).await?;
    let answer: serde_json::Value = serde_json::from_slice(&answer)
        .context("the daemon's answer to the handshake is not JSON")?;
    if let Some(err) = answer.get("error") {
        return Ok(Some(format!(
            "the running daemon did not take this client's config files and API keys ({}), so this client's sessions use the configuration of the daemon's own start; stop it (it exits when no client is left, or end the `soba serve --daemon` process) to start one that does",
            err["message"].as_str().unwrap_or("no reason given")
        )));
    }
    Ok(None)
}

/// Copy stdin to the daemon and the daemon's output to stdout until either side closes.
pub async fn relay<I, O>(stream: UnixStream, mut input: I, mut output: O) -> anyhow::Result<()>
where
    I: tokio::io::AsyncRead + Unpin,
    O: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    let (mut from_daemon, mut to_daemon) = stream.into_split();
    let upstream = async {
        let r = tokio::io::copy(&mut input, &mut to_daemon).await;
        let _ = to_daemon.shutdown().await;
        r
    };
    let downstream = async {
        let r = tokio::io::copy(&mut from_daemon, &mut output).await;
        let _ = output.flush().await;
        r
    };
    tokio::select! {
        // The daemon closing the connection ends the relay even if stdin stays open.
        r = downstream => { r.context("relaying daemon output")?; }
        r = async { let r = upstream.await; std::future::pending::<()>().await; r } => { r.context("relaying input")?; }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_user_is_authorized() {
        assert!(authorized(1000, 1000));
        assert!(!authorized(1001, 1000));
        assert!(!authorized(0, 1000));
    }

    #[test]
    fn runtime_dir_is_made_private() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("run");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        prepare_runtime_dir(&dir).unwrap();
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }

    #[tokio::test]
    async fn socket_is_private_and_a_stale_one_is_replaced() {
        let base = tempfile::tempdir().unwrap();
        let paths = Paths::under(base.path());
        prepare_runtime_dir(&paths.runtime_dir).unwrap();
        // A crashed daemon leaves its socket file behind with nobody listening.
        drop(std::os::unix::net::UnixListener::bind(paths.socket_path()).unwrap());
        assert!(std::os::unix::net::UnixStream::connect(paths.socket_path()).is_err());

        let listener = bind(&paths).unwrap().expect("no daemon holds the lock");
        let mode = std::fs::metadata(paths.socket_path())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        // A second daemon sees the lock and steps aside without touching the socket.
        assert!(bind(&paths).unwrap().is_none());

        let daemon = Daemon::new(
            paths.clone(),
            DaemonOptions {
                watch: None,
                extra_config: None,
                summarizer: None,
                ..DaemonOptions::default()
            },
        );
        let server = tokio::spawn(run(listener, daemon, Duration::from_millis(200)));
        let started = std::sync::atomic::AtomicBool::new(false);
        let stream = connect_or_start(
            &paths,
            || {
                started.store(true, Ordering::SeqCst);
                Ok(())
            },
            START_TIMEOUT,
        )
        .await
        .unwrap();
        assert!(
            !started.load(Ordering::SeqCst),
            "a live daemon is reused, not restarted"
        );
        drop(stream);
        // With no client left, the daemon exits after its idle time.
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_daemon_that_never_starts_is_reported() {
        let base = tempfile::tempdir().unwrap();
        let paths = Paths::under(base.path());
        let err = connect_or_start(&paths, || Ok(()), Duration::from_millis(200))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("did not start listening"), "{err}");
        assert!(err.contains("--standalone"), "{err}");
    }
}
