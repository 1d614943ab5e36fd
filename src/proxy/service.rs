//! The proxy as a service people leave running: what any client (any local user can reach a
//! loopback port) may hold, and for how long.
//!
//! - **Connections** are capped ([`ServiceOptions::max_connections`], by default what the
//!   file-descriptor limit allows); one past the cap is answered `503` with `Retry-After` and
//!   closed, so load is shed instead of piling up.
//! - **Running out of file descriptors** (`EMFILE`/`ENFILE` on accept) never ends the proxy: a
//!   spare descriptor is given up to take the waiting connection and answer it `503`, and
//!   accepting backs off until descriptors are free again.
//! - **Timeouts**: a request's headers must arrive within [`ServiceOptions::header_timeout`] of
//!   the connection opening or of the previous answer (so idle and half-open connections, and
//!   headers sent a byte at a time, are closed); a request body that stops arriving, or an
//!   answer the client stops reading, ends the connection after
//!   [`ServiceOptions::idle_timeout`].
//! - **Bodies** over [`ServiceOptions::max_body_bytes`] are answered `413`: by their declared
//!   `Content-Length` before a byte is read, and while streaming for chunked bodies.
//! - **Access**: with a proxy token (`SOBA_PROXY_TOKEN`), a request without it is answered
//!   `401` and nothing goes upstream ([`Access`]).

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::server::{Proxy, ProxyBody};
use crate::wire::{self, Api};

/// Largest request body by default: the largest request the providers' own APIs take (32 MB
/// for Anthropic Messages).
pub const DEFAULT_MAX_BODY_BYTES: u64 = 32 << 20;
/// Time a request's headers may take by default, counted from the connection's start or the
/// previous answer.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(20);
/// Time a request body may stall, or an answer stay unread, by default.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Connections served at once by default, when the file-descriptor limit allows it.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// The header an agent that can send extra headers puts the proxy token in.
pub const TOKEN_HEADER: &str = "x-soba-proxy-token";
/// The environment variable holding the proxy token.
pub const TOKEN_ENV: &str = "SOBA_PROXY_TOKEN";
/// The environment variable holding the upstream key sent in place of a token used as the
/// agent's key.
pub const UPSTREAM_KEY_ENV: &str = "SOBA_PROXY_UPSTREAM_KEY";

/// Descriptors kept back from the connection cap: the listener, the runtime, the daemon
/// connection, logs, the upstream pool's spare connections.
const RESERVED_FDS: u64 = 32;
/// The most connections refused at once with a written `503`; past it they are just closed.
const MAX_SHEDDING: usize = 32;
/// How long a refused connection is given to read its `503`.
const SHED_LINGER: Duration = Duration::from_secs(1);
/// How long a closing connection's unread input is drained (see [`linger`]).
const LINGER: Duration = Duration::from_secs(2);

/// A value that is never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }
    fn matches(&self, candidate: &[u8]) -> bool {
        constant_time_eq(self.0.as_bytes(), candidate)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Comparison whose time does not depend on where the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Who may use the proxy's port: requests must carry `token`, either in
/// [`TOKEN_HEADER`] (or `Proxy-Authorization: Bearer …`), with the agent's own key going
/// upstream as sent, or as the agent's key itself (`Authorization: Bearer …`, `x-api-key`,
/// `api-key`), for agents that send nothing but a base URL and a key. A token sent as the key
/// never goes upstream: `upstream_key` is sent in its place, and without one the request is
/// refused.
#[derive(Debug, Clone)]
pub struct Access {
    pub token: Secret,
    pub upstream_key: Option<Secret>,
}

impl Access {
    /// From `SOBA_PROXY_TOKEN` and `SOBA_PROXY_UPSTREAM_KEY`; `None` when no token is set.
    pub fn from_env() -> anyhow::Result<Option<Access>> {
        let read = |name: &str| -> anyhow::Result<Option<Secret>> {
            match std::env::var(name) {
                Ok(v) if v.trim().is_empty() => Ok(None),
                Ok(v) if v.trim() != v || v.chars().any(char::is_control) => anyhow::bail!(
                    "{name} holds spaces or control characters around or inside it; set it to the token alone"
                ),
                Ok(v) => Ok(Some(Secret::new(v))),
                Err(std::env::VarError::NotPresent) => Ok(None),
                Err(std::env::VarError::NotUnicode(_)) => {
                    anyhow::bail!("{name} is not valid UTF-8; set it to a plain ASCII token")
                }
            }
        };
        let Some(token) = read(TOKEN_ENV)? else {
            if read(UPSTREAM_KEY_ENV)?.is_some() {
                anyhow::bail!(
                    "{UPSTREAM_KEY_ENV} is set but {TOKEN_ENV} is not; the upstream key is only sent in place of the proxy token, so set {TOKEN_ENV} too (or unset {UPSTREAM_KEY_ENV})"
                );
            }
            return Ok(None);
        };
        if token.0.len() < 16 {
            anyhow::bail!(
                "{TOKEN_ENV} is shorter than 16 characters; use a random one, e.g. `openssl rand -hex 24`"
            );
        }
        Ok(Some(Access {
            token,
            upstream_key: read(UPSTREAM_KEY_ENV)?,
        }))
    }

    /// Check a request's headers and put them in the shape that goes upstream: the proxy's
    /// own header removed, a token sent as the key replaced by the upstream key. `Err` says
    /// why the request is refused.
    pub fn admit(&self, headers: &mut HeaderMap) -> Result<(), String> {
        let mut admitted = false;
        if let Some(v) = headers.remove(TOKEN_HEADER) {
            if !self.token.matches(v.as_bytes()) {
                return Err(format!("the {TOKEN_HEADER} header does not hold this proxy's token ({TOKEN_ENV} where soba proxy runs)"));
            }
            admitted = true;
        }
        if let Some(v) = headers.get(http::header::PROXY_AUTHORIZATION) {
            let given = strip_bearer(v.as_bytes());
            if !self.token.matches(given) {
                return Err(format!("Proxy-Authorization does not hold this proxy's token ({TOKEN_ENV} where soba proxy runs)"));
            }
            admitted = true;
        }
        for name in ["authorization", "x-api-key", "api-key"] {
            let Some(v) = headers.get(name) else { continue };
            let bearer = name == "authorization";
            let given = if bearer {
                strip_bearer(v.as_bytes())
            } else {
                v.as_bytes()
            };
            if !self.token.matches(given) {
                continue;
            }
            let Some(key) = &self.upstream_key else {
                return Err(format!("the proxy token was sent as the API key, but {UPSTREAM_KEY_ENV} is not set where soba proxy runs, so there is no key to send upstream in its place; set it, or send the token in the {TOKEN_HEADER} header and your own key as usual"));
            };
            let value = if bearer {
                format!("Bearer {}", key.0)
            } else {
                key.0.clone()
            };
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                format!("{UPSTREAM_KEY_ENV} cannot be sent in a header (it holds characters a header cannot); set it to the key alone")
            })?;
            value.set_sensitive(true);
            headers.insert(name, value);
            admitted = true;
        }
        if admitted {
            Ok(())
        } else {
            Err(format!("this proxy requires its token ({TOKEN_ENV} where soba proxy runs): send it in the {TOKEN_HEADER} header, or as the API key when {UPSTREAM_KEY_ENV} holds the real one"))
        }
    }
}

fn strip_bearer(v: &[u8]) -> &[u8] {
    match v.get(..7) {
        Some(p) if p.eq_ignore_ascii_case(b"bearer ") => &v[7..],
        _ => v,
    }
}

/// How the proxy serves its port.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// Connections served at once; one more is answered `503`.
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_body_bytes: u64,
    pub access: Option<Access>,
}

impl Default for ServiceOptions {
    fn default() -> Self {
        ServiceOptions {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            access: None,
        }
    }
}

/// The process's file-descriptor limit, raised to its hard limit (at most 65,536) first, as
/// servers do: the default soft limit (often 1,024) is what an attacker exhausts. `None` when
/// it cannot be read.
pub fn raise_fd_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    let wanted = lim.rlim_max.min(1 << 16);
    if wanted > lim.rlim_cur {
        let raised = libc::rlimit {
            rlim_cur: wanted,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: a valid rlimit, within the hard limit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim.rlim_cur = wanted;
        }
    }
    Some(lim.rlim_cur)
}

/// Connections the descriptor limit leaves room for: each may hold an upstream connection
/// too, and some descriptors are the process's own or refuse connections.
pub fn connections_for_fds(fds: u64) -> usize {
    let shed = (MAX_SHEDDING as u64).min(fds / 8);
    (fds.saturating_sub(RESERVED_FDS + shed) / 2).max(1) as usize
}

/// Serve connections on `listener` until the process ends. Accept errors, even running out of
/// file descriptors, never end it.
pub async fn serve(
    proxy: Arc<Proxy>,
    listener: TcpListener,
    options: ServiceOptions,
) -> anyhow::Result<()> {
    let options = Arc::new(options);
    let permits = Arc::new(Semaphore::new(options.max_connections));
    let shedding = Arc::new(Semaphore::new(MAX_SHEDDING));
    let mut spare = std::fs::File::open("/dev/null").ok();
    let mut backoff = Duration::from_millis(5);
    // Notes about shedding load, at most one per kind every ten seconds.
    let mut last_fd_note: Option<Instant> = None;
    let mut last_shed_note: Option<Instant> = None;
    let due = |last: &Option<Instant>| last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff = Duration::from_millis(5);
                stream
            }
            Err(e) if is_fd_exhaustion(&e) => {
                if due(&last_fd_note) {
                    proxy.log(&format!(
                        "soba proxy: out of file descriptors ({e}); new connections are answered 503 until some close. Raise the limit (ulimit -n) or lower --max-connections"
                    ));
                    last_fd_note = Some(Instant::now());
                }
                // Give up the spare descriptor to take the waiting connection and refuse it,
                // rather than leave it hanging in the backlog.
                if spare.take().is_some() {
                    if let Ok(Ok((s, _))) =
                        tokio::time::timeout(Duration::from_millis(10), listener.accept()).await
                    {
                        let _ = s.try_write(&overloaded_response(options.max_connections));
                    }
                    spare = std::fs::File::open("/dev/null").ok();
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
            Err(e) => {
                // Errors of one connection (reset before it was accepted, …).
                proxy.log(&format!("soba proxy: accepting a connection: {e}"));
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        match permits.clone().try_acquire_owned() {
            Ok(permit) => {
                tokio::spawn(serve_connection(
                    proxy.clone(),
                    stream,
                    options.clone(),
                    permit,
                ));
            }
            Err(_) => {
                if due(&last_shed_note) {
                    proxy.log(&format!(
                        "soba proxy: {} connections open (--max-connections); answering new ones 503",
                        options.max_connections
                    ));
                    last_shed_note = Some(Instant::now());
                }
                shed(stream, &shedding, options.max_connections);
            }
        }
    }
}

fn is_fd_exhaustion(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// The answer to a connection over the cap: both providers' error shapes at once (the path is
/// not read), and a hint to retry.
fn overloaded_response(limit: usize) -> Vec<u8> {
    let body = json!({"type": "error", "error": {
        "type": "overloaded_error",
        "code": "overloaded_error",
        "message": format!("soba proxy: too many connections (at most {limit}); retry shortly"),
    }})
    .to_string();
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Refuse a connection over the cap: write the `503`, then give the client a moment to read
/// it before closing (closing with its request unread would reset the connection and lose the
/// answer). At most [`MAX_SHEDDING`] at a time; past that the connection is only closed.
fn shed(stream: TcpStream, shedding: &Arc<Semaphore>, limit: usize) {
    let response = overloaded_response(limit);
    let Ok(permit) = shedding.clone().try_acquire_owned() else {
        let _ = stream.try_write(&response);
        return;
    };
    tokio::spawn(async move {
        let mut stream = stream;
        let _ = tokio::time::timeout(SHED_LINGER, async {
            stream.write_all(&response).await?;
            stream.shutdown().await?;
            let mut sink = [0u8; 4096];
            let mut read = 0usize;
            while read < 64 << 10 {
                match tokio::io::AsyncReadExt::read(&mut stream, &mut sink).await? {
                    0 => break,
                    n => read += n,
                }
            }
            Ok::<_, io::Error>(())
        })
        .await;
        drop(permit);
    });
}

async fn serve_connection(
    proxy: Arc<Proxy>,
    stream: TcpStream,
    options: Arc<ServiceOptions>,
    _permit: OwnedSemaphorePermit,
) {
    let io = hyper_util::rt::TokioIo::new(WriteStall::new(stream, options.idle_timeout));
    let opts = options.clone();
    let service = hyper::service::service_fn(move |req| {
        let proxy = proxy.clone();
        let opts = opts.clone();
        async move { Ok::<_, Infallible>(admit_and_handle(proxy, req, &opts).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(options.header_timeout)
        .serve_connection(io, service)
        .without_shutdown()
        .await;
    if let Ok(parts) = served {
        linger(parts.io.into_inner().inner).await;
    }
}

/// Close a connection whose last answer is written: end the sending side, then read and drop
/// what the client still sends for a moment. A client still writing a body the proxy refused
/// (`413`) would otherwise meet a reset and lose the answer.
async fn linger(mut stream: TcpStream) {
    use tokio::io::AsyncReadExt;
    if stream.shutdown().await.is_err() {
        return;
    }
    let _ = tokio::time::timeout(LINGER, async {
        let mut sink = vec![0u8; 64 << 10];
        while let Ok(n) = stream.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

/// A request refused before the proxy handled it.
fn refusal(api: Option<Api>, status: StatusCode, kind: &str, message: &str) -> Response<ProxyBody> {
    let body = match api {
        Some(api) => wire::error_body(api, kind, message),
        None => json!({"error": {"message": message, "type": kind}}),
    };
    let mut r = Response::new(super::server::full(body.to_string()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // The body may be unread: the connection cannot carry another request.
    h.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// Why a request body was not taken.
#[derive(Debug)]
pub enum BodyRefused {
    TooLarge,
    Stalled,
    Broken(String),
}

/// Read a body of at most `limit` bytes; stop at the first byte past it, or when no byte came
/// for `stall`.
pub async fn read_body<B>(mut body: B, limit: u64, stall: Duration) -> Result<Bytes, BodyRefused>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut buf = BytesMut::new();
    loop {
        let frame = match tokio::time::timeout(stall, body.frame()).await {
            Err(_) => return Err(BodyRefused::Stalled),
            Ok(None) => return Ok(buf.freeze()),
            Ok(Some(Err(e))) => return Err(BodyRefused::Broken(e.to_string())),
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if buf.len() as u64 + data.len() as u64 > limit {
                return Err(BodyRefused::TooLarge);
            }
            buf.extend_from_slice(&data);
        }
    }
}

/// `1.5 MiB`, `32 MiB`, `900 bytes`.
pub fn human_bytes(n: u64) -> String {
    const MIB: u64 = 1 << 20;
    const KIB: u64 = 1 << 10;
    if n >= MIB {
        format!("{} MiB", trim_float(n as f64 / MIB as f64))
    } else if n >= KIB {
        format!("{} KiB", trim_float(n as f64 / KIB as f64))
    } else {
        format!("{n} bytes")
    }
}

fn trim_float(x: f64) -> String {
    let s = format!("{x:.1}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

/// `32MiB`, `512k`, `1g`, `1048576`: a size given on the command line.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits.parse().map_err(|_| {
        format!("`{s}` is not a size; give bytes or a number with KiB, MiB or GiB, e.g. 32MiB")
    })?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => {
            return Err(format!(
                "`{other}` is not a size unit; use KiB, MiB or GiB, e.g. 32MiB"
            ))
        }
    };
    match n.checked_mul(mult) {
        Some(0) | None => Err(format!(
            "`{s}` is not a usable size; give at least one byte"
        )),
        Some(v) => Ok(v),
    }
}

async fn admit_and_handle(
    proxy: Arc<Proxy>,
    req: Request<Incoming>,
    options: &ServiceOptions,
) -> Response<ProxyBody> {
    let started = Instant::now();
    let (mut parts, body) = req.into_parts();
    let api = Api::for_path(parts.uri.path());
    let refuse = |status: StatusCode, kind: &str, message: String, why: &str| {
        proxy.log(&format!(
            "soba proxy: {} {} → {} in {} ms ({why})",
            parts.method,
            parts.uri.path(),
            status.as_u16(),
            started.elapsed().as_millis()
        ));
        refusal(api, status, kind, &message)
    };
    if let Some(access) = &options.access {
        if let Err(why) = access.admit(&mut parts.headers) {
            return refuse(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                format!("soba proxy: {why}"),
                "no proxy token",
            );
        }
    }
    let limit = options.max_body_bytes;
    let too_large = || {
        format!(
            "soba proxy: the request body is larger than the proxy's limit of {}; start soba proxy with a larger --max-body if this request is meant to be sent",
            human_bytes(limit)
        )
    };
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            too_large(),
            "declared body over the limit",
        );
    }
    let body = match read_body(body, limit, options.idle_timeout).await {
        Ok(b) => b,
        Err(BodyRefused::TooLarge) => {
            return refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                too_large(),
                "body over the limit",
            )
        }
        Err(BodyRefused::Stalled) => {
            return refuse(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!(
                    "soba proxy: the request body stopped arriving for {} s; send it again",
                    options.idle_timeout.as_secs()
                ),
                "body stalled",
            )
        }
        Err(BodyRefused::Broken(e)) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                format!("soba proxy: cannot read the request body: {e}"),
                "body unreadable",
            )
        }
    };
    proxy.handle(parts, body, started).await
}

/// A connection whose writes fail once they have waited `limit` without progress: a client
/// that stops reading its answer does not hold the connection (and the upstream stream feeding
/// it) forever.
struct WriteStall<S> {
    inner: S,
    limit: Duration,
    waiting: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteStall<S> {
    fn new(inner: S, limit: Duration) -> Self {
        WriteStall {
            inner,
            limit,
            waiting: None,
        }
    }

    /// After a write that could not proceed: fail once it has waited too long.
    fn pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let timer = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client stopped reading its answer",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<T>(&mut self, r: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => self.pending(cx),
            ready => {
                self.waiting = None;
                ready
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteStall<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteStall<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progress(r, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progress(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(r, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.progress(r, cx)
    }
}

impl Proxy {
    /// Serve connections with the default limits ([`ServiceOptions::default`]).
    pub async fn serve(self: Arc<Self>, listener: TcpListener) -> anyhow::Result<()> {
        serve(self, listener, ServiceOptions::default()).await
    }

    /// Serve connections with `options`' limits, timeouts and access token.
    pub async fn serve_with(
        self: Arc<Self>,
        listener: TcpListener,
        options: ServiceOptions,
    ) -> anyhow::Result<()> {
        serve(self, listener, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(upstream_key: Option<&str>) -> Access {
        Access {
            token: Secret::new("proxy-token-0123456789"),
            upstream_key: upstream_key.map(Secret::new),
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.insert(*n, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_request_without_the_token_is_refused() {
        let a = access(None);
        let mut h = headers(&[("authorization", "Bearer sk-agent-key")]);
        let why = a.admit(&mut h).unwrap_err();
        assert!(
            why.contains(TOKEN_HEADER) && why.contains(TOKEN_ENV),
            "{why}"
        );
        let mut h = headers(&[(TOKEN_HEADER, "proxy-token-0123456780")]);
        assert!(a.admit(&mut h).is_err(), "a wrong token");
    }

    #[test]
    fn the_token_header_is_removed_and_the_agents_key_goes_upstream() {
        let a = access(Some("sk-upstream"));
        let mut h = headers(&[
            (TOKEN_HEADER, "proxy-token-0123456789"),
            ("authorization", "Bearer sk-agent-key"),
        ]);
        a.admit(&mut h).unwrap();
        assert!(h.get(TOKEN_HEADER).is_none());
        assert_eq!(h["authorization"], "Bearer sk-agent-key");
        let mut h = headers(&[("proxy-authorization", "Bearer proxy-token-0123456789")]);
        a.admit(&mut h).unwrap();
    }

    #[test]
    fn a_token_sent_as_the_key_is_replaced_by_the_upstream_key_or_refused() {
        let a = access(Some("sk-upstream"));
        let mut h = headers(&[("authorization", "Bearer proxy-token-0123456789")]);
        a.admit(&mut h).unwrap();
        assert_eq!(h["authorization"], "Bearer sk-upstream");
        let mut h = headers(&[("x-api-key", "proxy-token-0123456789")]);
        a.admit(&mut h).unwrap();
        assert_eq!(h["x-api-key"], "sk-upstream");
        // Without an upstream key the token would go upstream: refused.
        let a = access(None);
        let mut h = headers(&[
            (TOKEN_HEADER, "proxy-token-0123456789"),
            ("x-api-key", "proxy-token-0123456789"),
        ]);
        let why = a.admit(&mut h).unwrap_err();
        assert!(why.contains(UPSTREAM_KEY_ENV), "{why}");
    }

    #[test]
    fn sizes_are_read_and_shown() {
        assert_eq!(parse_size("32MiB"), Ok(32 << 20));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("0").is_err());
        assert!(parse_size("12 parsecs").unwrap_err().contains("MiB"));
        assert_eq!(human_bytes(32 << 20), "32 MiB");
        assert_eq!(human_bytes(1536 << 10), "1.5 MiB");
        assert_eq!(human_bytes(900), "900 bytes");
        assert_eq!(human_bytes(1 << 20), "1 MiB");
    }

    #[test]
    fn the_connection_cap_leaves_room_under_the_descriptor_limit() {
        assert_eq!(connections_for_fds(64), (64 - 32 - 8) / 2);
        assert!(connections_for_fds(1024) >= DEFAULT_MAX_CONNECTIONS);
        assert_eq!(connections_for_fds(10), 1);
    }

    #[tokio::test]
    async fn a_body_past_the_limit_is_refused_while_it_streams() {
        use futures::stream;
        use http_body_util::StreamBody;
        use hyper::body::Frame;
        let chunks = || {
            stream::iter(
                (0..8).map(|_| Ok::<_, Infallible>(Frame::data(Bytes::from(vec![b'x'; 1000])))),
            )
        };
        let body = StreamBody::new(chunks());
        assert!(matches!(
            read_body(body, 7999, Duration::from_secs(5)).await,
            Err(BodyRefused::TooLarge)
        ));
        let body = StreamBody::new(chunks());
        assert_eq!(
            read_body(body, 8000, Duration::from_secs(5))
                .await
                .unwrap()
                .len(),
            8000
        );
    }
}
