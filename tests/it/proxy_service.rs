//! `soba proxy` as a service left running, attacked the way any local user can: bodies too
//! large or lying about their size, headers sent a byte at a time, idle and half-open
//! connections, more connections than the cap and than the file-descriptor limit, requests
//! without the proxy token, and an upstream URL holding credentials. Traffic goes to
//! 127.0.0.1 only; every wait is bounded.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use soba::daemon::paths::Paths;
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba::proxy::server::DaemonTarget;
use soba::proxy::server::Proxy;
use soba::proxy::server::ProxyConfig;
use soba::proxy::server::ProxySummarizer;
use soba::proxy::service::{Access, Secret, ServiceOptions, TOKEN_HEADER};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The longest any single wait in these tests may take before it counts as a failure.
const BOUND: Duration = Duration::from_secs(30);

/// A request the fake upstream saw.
#[derive(Debug, Clone)]
struct Seen {
    path_and_query: String,
    headers: Vec<(String, String)>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A loopback upstream that records every request and answers `{"ok": true}`.
async fn upstream() -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let s = s.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let s = s.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let _ = body.collect().await;
                            s.lock().unwrap().push(Seen {
                                path_and_query: parts.uri.path_and_query().unwrap().to_string(),
                                headers: parts
                                    .headers
                                    .iter()
                                    .map(|(n, v)| {
                                        (n.to_string(), v.to_str().unwrap_or("").to_string())
                                    })
                                    .collect(),
                            });
                            let r = http::Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from_static(b"{\"ok\": true}")))
                                .unwrap();
                            Ok::<_, std::convert::Infallible>(r)
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, seen)
}

struct Env {
    _base: tempfile::TempDir,
    proxy: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Env {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.proxy)
    }
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// The proxy in this process with `options`, in front of a fake upstream whose base URL is
/// `upstream(addr)`.
async fn start(options: ServiceOptions, upstream_url: impl FnOnce(SocketAddr) -> String) -> Env {
    let base = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(base.path()).unwrap().join("project");
    std::fs::create_dir_all(&ws).unwrap();
    let (addr, seen) = upstream().await;
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let l = log.clone();
    let proxy = Proxy::new(ProxyConfig {
        upstream: upstream_url(addr).parse().unwrap(),
        workspace: ws.display().to_string(),
        context_window: Some(20_000),
        max_output_tokens: Some(2_000),
        summarizer: ProxySummarizer::Local,
        daemon: DaemonTarget::InProcess(Daemon::new(
            Paths::under(&base.path().join("soba")),
            DaemonOptions {
                watch: None,
                ..DaemonOptions::default()
            },
        )),
        log: Arc::new(move |line: &str| l.lock().unwrap().push(line.to_string())),
        max_conversations: soba::proxy::server::DEFAULT_MAX_CONVERSATIONS,
    })
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_addr = listener.local_addr().unwrap();
    tokio::spawn(proxy.serve_with(listener, options));
    Env {
        _base: base,
        proxy: proxy_addr,
        seen,
        log,
    }
}

async fn plain(options: ServiceOptions) -> Env {
    start(options, |a| format!("http://{a}")).await
}

/// Everything the proxy sends on `stream` until it closes the connection (or `BOUND`).
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(BOUND, stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the proxy closed `stream` (end of file or reset) within `BOUND`.
async fn closed_by_proxy(stream: &mut TcpStream) -> bool {
    let mut buf = [0u8; 512];
    let read = tokio::time::timeout(BOUND, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await;
    read.is_ok()
}

fn small_body_limit() -> ServiceOptions {
    ServiceOptions {
        max_body_bytes: 1 << 20,
        idle_timeout: Duration::from_secs(1),
        ..ServiceOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_is_answered_413_in_the_providers_shape_and_nothing_goes_upstream() {
    let env = plain(small_body_limit()).await;
    let big = format!(
        "{{\"model\": \"gpt-4o\", \"messages\": [{{\"role\": \"user\", \"content\": \"{}\"}}]}}",
        "x".repeat(2 << 20)
    );
    let r = reqwest::Client::new()
        .post(env.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "request_too_large", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("1 MiB") && message.contains("--max-body"),
        "{message}"
    );
    // Anthropic's shape on its path.
    let r = reqwest::Client::new()
        .post(env.url("/v1/messages"))
        .body(vec![b' '; 2 << 20])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert!(env.seen().is_empty(), "nothing went upstream");
    let log = env.log.lock().unwrap().join("\n");
    assert!(log.contains("→ 413"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_length_over_the_limit_is_answered_before_any_of_the_body_is_sent() {
    let env = plain(small_body_limit()).await;
    // 10 GB declared, none sent: the answer must not wait for the body.
    let mut s = TcpStream::connect(env.proxy).await.unwrap();
    s.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 10737418240\r\n\r\n",
    )
    .await
    .unwrap();
    let answer = read_to_close(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(env.seen().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_body_is_cut_off_at_the_limit_while_it_streams() {
    let env = plain(small_body_limit()).await;
    let mut s = TcpStream::connect(env.proxy).await.unwrap();
    s.write_all(b"POST /v1/embeddings HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    let (mut r, mut w) = s.into_split();
    // Up to 8 MiB in 64 KiB chunks; the proxy answers and closes long before the end.
    let writer = tokio::spawn(async move {
        let chunk = vec![b'a'; 64 << 10];
        for _ in 0..128 {
            let head = format!("{:x}\r\n", chunk.len());
            if w.write_all(head.as_bytes()).await.is_err()
                || w.write_all(&chunk).await.is_err()
                || w.write_all(b"\r\n").await.is_err()
            {
                return false;
            }
        }
        true
    });
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(BOUND, r.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let _ = tokio::time::timeout(BOUND, writer).await;
    assert!(env.seen().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_shorter_than_its_declared_length_gets_408_once_it_stops_arriving() {
    let env = plain(small_body_limit()).await;
    let mut s = TcpStream::connect(env.proxy).await.unwrap();
    s.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n{\"model\":",
    )
    .await
    .unwrap();
    let answer = read_to_close(&mut s).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("stopped arriving"), "{answer}");
    assert!(env.seen().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_half_open_and_slowloris_connections_are_closed_by_the_header_timeout() {
    let env = plain(ServiceOptions {
        header_timeout: Duration::from_secs(1),
        ..ServiceOptions::default()
    })
    .await;
    // Connections that never send a byte.
    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(TcpStream::connect(env.proxy).await.unwrap());
    }
    // One that sends a header a byte at a time, forever (up to the bound).
    let mut slow = TcpStream::connect(env.proxy).await.unwrap();
    let dripped = tokio::time::timeout(BOUND, async {
        slow.write_all(b"GET /v1/models HTTP/1.1\r\nx-filler: ")
            .await?;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            slow.write_all(b"a").await?;
        }
        #[allow(unreachable_code)]
        Ok::<_, std::io::Error>(())
    })
    .await;
    assert!(
        matches!(dripped, Ok(Err(_))),
        "the slow header was never cut off"
    );
    for s in &mut idle {
        assert!(closed_by_proxy(s).await, "an idle connection is still held");
    }
    // A kept-alive connection that goes quiet after its answer is closed the same way.
    let mut kept = TcpStream::connect(env.proxy).await.unwrap();
    kept.write_all(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_close(&mut kept).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // And the proxy still serves.
    let r = reqwest::get(env.url("/v1/models")).await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_answered_503_and_the_proxy_keeps_serving() {
    let env = plain(ServiceOptions {
        max_connections: 4,
        ..ServiceOptions::default()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(env.proxy).await.unwrap();
        // A request answered on each proves the connection was taken before the next.
        s.write_all(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 12];
        tokio::time::timeout(BOUND, s.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf, b"HTTP/1.1 200");
        held.push(s);
    }
    let mut over = TcpStream::connect(env.proxy).await.unwrap();
    let answer = read_to_close(&mut over).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("retry-after: 1"), "{answer}");
    assert!(answer.contains("overloaded_error"), "{answer}");
    drop(held);
    // Once the held connections are gone their places are free again.
    let served = tokio::time::timeout(BOUND, async {
        loop {
            if let Ok(r) = reqwest::get(env.url("/v1/models")).await {
                if r.status() == 200 {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(served.is_ok(), "the proxy stopped serving");
    let log = env.log.lock().unwrap().join("\n");
    assert!(log.contains("answering new ones 503"), "{log}");
}

fn with_token(upstream_key: Option<&str>) -> ServiceOptions {
    ServiceOptions {
        access: Some(Access {
            token: Secret::new("soba-proxy-token-8f2a61c0"),
            upstream_key: upstream_key.map(Secret::new),
        }),
        ..ServiceOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_proxy_token_a_request_without_it_is_refused_and_nothing_goes_upstream() {
    let env = plain(with_token(None)).await;
    let client = reqwest::Client::new();
    let r = client
        .post(env.url("/v1/messages"))
        .header("x-api-key", "sk-ant-agent-key")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "authentication_error", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(TOKEN_HEADER),
        "{body}"
    );
    let r = client
        .get(env.url("/v1/models"))
        .header(TOKEN_HEADER, "not-the-token-at-all-000")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(env.seen().is_empty(), "nothing went upstream");
    // The token in its header: the agent's own key goes upstream, the token does not.
    let r = client
        .get(env.url("/v1/models"))
        .header(TOKEN_HEADER, "soba-proxy-token-8f2a61c0")
        .header("authorization", "Bearer sk-agent-own-key")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let seen = env.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].header("authorization"),
        Some("Bearer sk-agent-own-key")
    );
    assert!(seen[0].header(TOKEN_HEADER).is_none());
    // The token as the agent's key, with no upstream key to send instead: refused.
    let r = client
        .get(env.url("/v1/models"))
        .header("authorization", "Bearer soba-proxy-token-8f2a61c0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(env.seen().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_sent_as_the_agents_key_is_replaced_by_the_upstream_key() {
    let env = plain(with_token(Some("sk-real-upstream-key"))).await;
    let r = reqwest::Client::new()
        .get(env.url("/v1/models"))
        .header("x-api-key", "soba-proxy-token-8f2a61c0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let seen = env.seen();
    assert_eq!(seen[0].header("x-api-key"), Some("sk-real-upstream-key"));
    assert!(seen[0]
        .headers
        .iter()
        .all(|(_, v)| !v.contains("soba-proxy-token")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_the_upstream_url_are_used_but_never_echoed_and_its_query_is_kept() {
    let env = start(ServiceOptions::default(), |a| {
        format!("http://gw-user:gw-pass-7781@{a}/openai?key=qk-5512-secret&api-version=2024-06-01")
    })
    .await;
    let r = reqwest::get(env.url("/v1/models?limit=5")).await.unwrap();
    assert_eq!(r.status(), 200);
    let seen = env.seen();
    assert_eq!(
        seen[0].path_and_query,
        "/openai/v1/models?key=qk-5512-secret&api-version=2024-06-01&limit=5"
    );
    assert!(
        seen[0]
            .header("authorization")
            .is_some_and(|v| v.starts_with("Basic ")),
        "user-info goes upstream as Basic auth: {:?}",
        seen[0].headers
    );

    // An upstream that cannot be reached: the 502 names it without its credentials.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let env = start(ServiceOptions::default(), move |_| {
        format!("http://gw-user:gw-pass-7781@127.0.0.1:{port}/openai?key=qk-5512-secret&api-version=2024-06-01")
    })
    .await;
    let r = reqwest::get(env.url("/v1/models")).await.unwrap();
    assert_eq!(r.status(), 502);
    let text = r.text().await.unwrap();
    assert!(
        !text.contains("gw-pass-7781") && !text.contains("qk-5512-secret"),
        "{text}"
    );
    assert!(
        text.contains("***") && text.contains("api-version=2024-06-01"),
        "{text}"
    );
    let log = env.log.lock().unwrap().join("\n");
    assert!(
        !log.contains("gw-pass-7781") && !log.contains("qk-5512-secret"),
        "{log}"
    );
}

/// `soba proxy` as a process with a file-descriptor limit of 64 and a connection cap it cannot
/// hold: 150 half-open connections run it out of descriptors. It must not exit, must say what
/// happened, and must serve again once the connections are gone (its header timeout closes
/// them).
#[test]
fn the_proxy_process_survives_running_out_of_file_descriptors() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    let rt = tokio::runtime::Runtime::new().unwrap();
    let (up, seen) = rt.block_on(upstream());
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_soba"));
    cmd.args([
        "proxy",
        "--standalone",
        "--listen",
        "127.0.0.1:0",
        "--header-timeout",
        "2",
        "--max-connections",
        "1000",
        "--upstream",
    ])
    .arg(format!("http://u:pw-9931@{up}/?key=qk-7710"))
    .current_dir(dir.path())
    .env("SOBA_DATA_DIR", dir.path().join("data"))
    .env("SOBA_RUNTIME_DIR", dir.path().join("run"))
    .env("SOBA_CONFIG", dir.path().join("none.json"))
    .env_remove("SOBA_PROXY_TOKEN")
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    // SAFETY: only setrlimit, which is async-signal-safe, runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    let wait_for = |what: &str, lines: &mut Vec<String>| -> bool {
        let deadline = std::time::Instant::now() + BOUND;
        while std::time::Instant::now() < deadline {
            if lines.iter().any(|l| l.contains(what)) {
                return true;
            }
            if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
                lines.push(l);
            }
        }
        false
    };
    assert!(wait_for("listening on", &mut lines), "{lines:?}");
    let start = lines.iter().find(|l| l.contains("listening on")).unwrap();
    assert!(
        !start.contains("pw-9931") && !start.contains("qk-7710") && start.contains("***"),
        "{start}"
    );
    let addr: SocketAddr = start
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();

    let mut half_open = Vec::new();
    for _ in 0..150 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(s) => half_open.push(s),
            Err(_) => break,
        }
    }
    assert!(
        wait_for("out of file descriptors", &mut lines),
        "{} connections did not run the proxy out of descriptors: {lines:?}",
        half_open.len()
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the proxy exited: {lines:?}"
    );
    // Some of the waiting connections were answered 503 rather than left hanging.
    let mut refused = 0;
    for s in &mut half_open {
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let mut buf = [0u8; 12];
        if s.read_exact(&mut buf).is_ok() && &buf == b"HTTP/1.1 503" {
            refused += 1;
        }
    }
    assert!(refused > 0, "no connection was answered 503");

    // The half-open connections stay open on this side; the header timeout frees them.
    let deadline = std::time::Instant::now() + BOUND;
    let answered = loop {
        let attempt = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).and_then(
            |mut s| {
                s.set_read_timeout(Some(Duration::from_secs(5)))?;
                s.write_all(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")?;
                let mut out = String::new();
                s.read_to_string(&mut out)?;
                Ok(out)
            },
        );
        if let Ok(out) = attempt {
            if out.starts_with("HTTP/1.1 200") {
                break true;
            }
        }
        if std::time::Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(answered, "the proxy never served again: {lines:?}");
    assert!(child.try_wait().unwrap().is_none(), "the proxy exited");
    assert!(seen
        .lock()
        .unwrap()
        .iter()
        .any(|s| s.path_and_query.starts_with("/v1/models")));
    drop(half_open);
    child.kill().unwrap();
    child.wait().unwrap();
}
