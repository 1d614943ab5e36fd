//! A minimal LSP-base-protocol client for tests: `Content-Length` framing, request/response
//! matching by id, notifications collected in order, server requests answered with `null` or
//! the answer a test set for their method.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, Mutex};

type Writer = Arc<Mutex<Box<dyn AsyncWrite + Unpin + Send>>>;

pub struct LspClient {
    writer: Writer,
    pending: Arc<std::sync::Mutex<HashMap<i64, oneshot::Sender<Value>>>>,
    notifications: Mutex<mpsc::UnboundedReceiver<Value>>,
    /// Every notification received so far, in order.
    pub seen: Arc<std::sync::Mutex<Vec<Value>>>,
    /// Requests the server sent us (method names), e.g. `window/workDoneProgress/create`.
    pub server_requests: Arc<std::sync::Mutex<Vec<String>>>,
    /// The whole requests the server sent us, in order.
    pub server_request_log: Arc<std::sync::Mutex<Vec<Value>>>,
    /// The answer (`{"result": …}` or `{"error": …}`) to give to a server request, by method;
    /// `null`: leave it unanswered.
    pub answers: Arc<std::sync::Mutex<HashMap<String, Value>>>,
    next_id: std::sync::atomic::AtomicI64,
}

async fn write_frame(w: &Writer, msg: &Value) {
    let body = serde_json::to_vec(msg).unwrap();
    let mut w = w.lock().await;
    w.write_all(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes())
        .await
        .unwrap();
    w.write_all(&body).await.unwrap();
    w.flush().await.unwrap();
}

async fn read_frame<R: AsyncRead + Unpin>(r: &mut BufReader<R>) -> Option<Value> {
    let mut len = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("Content-Length: ") {
            len = v.parse::<usize>().ok();
        }
    }
    let mut body = vec![0; len?];
    r.read_exact(&mut body).await.ok()?;
    serde_json::from_slice(&body).ok()
}

impl LspClient {
    pub fn new<R, W>(reader: R, writer: W) -> LspClient
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let writer: Writer = Arc::new(Mutex::new(Box::new(writer)));
        let pending: Arc<std::sync::Mutex<HashMap<i64, oneshot::Sender<Value>>>> =
            Default::default();
        let server_requests: Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let server_request_log: Arc<std::sync::Mutex<Vec<Value>>> = Default::default();
        let answers: Arc<std::sync::Mutex<HashMap<String, Value>>> = Default::default();
        let (tx, notifications) = mpsc::unbounded_channel();
        let seen: Arc<std::sync::Mutex<Vec<Value>>> = Default::default();
        let seen_by_reader = seen.clone();
        // The reader holds the writer weakly: dropping the client closes the stream.
        let (p, w, sr) = (
            pending.clone(),
            Arc::downgrade(&writer),
            server_requests.clone(),
        );
        let (log, canned) = (server_request_log.clone(), answers.clone());
        tokio::spawn(async move {
            let mut r = BufReader::new(reader);
            while let Some(msg) = read_frame(&mut r).await {
                let is_response = msg.get("result").is_some() || msg.get("error").is_some();
                if is_response && msg.get("method").is_none() {
                    if let Some(id) = msg["id"].as_i64() {
                        if let Some(s) = p.lock().unwrap().remove(&id) {
                            let _ = s.send(msg);
                        }
                    }
                } else if msg.get("id").is_some() {
                    let method = msg["method"].as_str().unwrap_or("").to_string();
                    sr.lock().unwrap().push(method.clone());
                    log.lock().unwrap().push(msg.clone());
                    let mut answer = canned
                        .lock()
                        .unwrap()
                        .get(&method)
                        .cloned()
                        .unwrap_or_else(|| json!({"result": null}));
                    if answer.is_null() {
                        continue;
                    }
                    answer["jsonrpc"] = json!("2.0");
                    answer["id"] = msg["id"].clone();
                    if let Some(w) = w.upgrade() {
                        write_frame(&w, &answer).await;
                    }
                } else {
                    seen_by_reader.lock().unwrap().push(msg.clone());
                    let _ = tx.send(msg);
                }
            }
        });
        LspClient {
            writer,
            pending,
            notifications: Mutex::new(notifications),
            seen,
            server_requests,
            server_request_log,
            answers,
            next_id: 1.into(),
        }
    }

    /// Send a request; the whole response (`result` or `error`).
    pub async fn raw(&self, method: &str, params: Value) -> Value {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        write_frame(
            &self.writer,
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .await;
        tokio::time::timeout(Duration::from_secs(20), rx)
            .await
            .unwrap_or_else(|_| panic!("no answer to {method} within 20s"))
            .unwrap()
    }

    /// A request that must succeed; its result.
    pub async fn request(&self, method: &str, params: Value) -> Value {
        let r = self.raw(method, params).await;
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    /// A request that must fail; its error object.
    pub async fn error(&self, method: &str, params: Value) -> Value {
        let r = self.raw(method, params).await;
        assert!(
            r.get("error").is_some(),
            "{method} unexpectedly succeeded: {r}"
        );
        r["error"].clone()
    }

    /// Close our side of the stream: the server sees end of input.
    /// Notifications received so far with this method.
    pub fn seen(&self, method: &str) -> Vec<Value> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|n| n["method"] == method)
            .map(|n| n["params"].clone())
            .collect()
    }

    pub async fn close(self) {
        let _ = self.writer.lock().await.shutdown().await;
    }

    /// End the input of the server (as a client process that exits does) while still reading
    /// what the server sends.
    pub async fn close_input(&self) {
        let _ = self.writer.lock().await.shutdown().await;
    }

    pub async fn notify(&self, method: &str, params: Value) {
        write_frame(
            &self.writer,
            &json!({"jsonrpc": "2.0", "method": method, "params": params}),
        )
        .await;
    }

    pub async fn initialize(
        &self,
        folders: &[&std::path::Path],
        work_done_progress: bool,
    ) -> Value {
        let folders: Vec<Value> = folders
            .iter()
            .map(|f| json!({"uri": format!("file://{}", f.display()), "name": "ws"}))
            .collect();
        let r = self
            .request(
                "initialize",
                json!({
                    "processId": null,
                    "rootUri": null,
                    "capabilities": {"window": {"workDoneProgress": work_done_progress}},
                    "workspaceFolders": folders,
                }),
            )
            .await;
        self.notify("initialized", json!({})).await;
        r
    }

    /// The next notification with this method, skipping others; panics after `timeout`.
    pub async fn expect_notification(&self, method: &str, timeout: Duration) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut rx = self.notifications.lock().await;
        loop {
            let n = tokio::time::timeout_at(deadline, rx.recv())
                .await
                .unwrap_or_else(|_| panic!("no {method} notification within {timeout:?}"))
                .expect("connection closed");
            if n["method"] == method {
                return n["params"].clone();
            }
        }
    }

    /// Every notification that arrives within `window`.
    pub async fn drain(&self, window: Duration) -> Vec<Value> {
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + window;
        let mut rx = self.notifications.lock().await;
        while let Ok(Some(n)) = tokio::time::timeout_at(deadline, rx.recv()).await {
            out.push(n);
        }
        out
    }
}

/// A client on a new in-process connection to `daemon` (its server side runs as a task).
pub fn connect(daemon: &std::sync::Arc<soba::daemon::registry::Daemon>) -> LspClient {
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let (sr, sw) = tokio::io::split(server_io);
    tokio::spawn(soba::daemon::server::serve_connection(
        daemon.clone(),
        sr,
        sw,
    ));
    let (cr, cw) = tokio::io::split(client_io);
    LspClient::new(cr, cw)
}
