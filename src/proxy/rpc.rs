//! The proxy as an agent client of the daemon: `soba/*` requests over the LSP base protocol
//! (`Content-Length` framing), on the user's shared socket or on an in-process daemon. The
//! daemon's session actor stays the one writer of every log, and editors connected to the same
//! daemon see proxied sessions like any other.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::daemon::protocol::{code, RpcError};

type Pending = Arc<Mutex<HashMap<i64, oneshot::Sender<Value>>>>;

/// Answers requests the daemon sends (`soba/summarize`): the method, its params, and a token
/// that fires when the daemon cancels the request (`$/cancelRequest`).
pub type RequestHandler = Arc<
    dyn Fn(&str, Value, CancellationToken) -> Option<BoxFuture<'static, Result<Value, RpcError>>>
        + Send
        + Sync,
>;

/// What the proxy tells the daemon at `initialize`.
#[derive(Clone, Default)]
pub struct ClientSetup {
    /// `capabilities.experimental.soba.summarize`: the offer to summarize with the agent's model.
    pub summarize: Option<Value>,
    /// Answers the daemon's requests; those it does not take (`None`) are answered with `null`.
    pub handler: Option<RequestHandler>,
}

/// A connection to the daemon.
pub struct RpcClient {
    writer: Arc<tokio::sync::Mutex<Box<dyn AsyncWrite + Unpin + Send>>>,
    pending: Pending,
    next_id: AtomicI64,
    closed: Arc<AtomicBool>,
}

/// Largest frame the client accepts from the daemon (a model input of a very large session).
const MAX_FRAME: usize = 256 << 20;

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
        if let Some((name, v)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse::<usize>().ok();
            }
        }
    }
    let len = len.filter(|&l| l <= MAX_FRAME)?;
    let mut body = vec![0; len];
    r.read_exact(&mut body).await.ok()?;
    serde_json::from_slice(&body).ok()
}

async fn write_frame(w: &mut (dyn AsyncWrite + Unpin + Send), msg: &Value) -> std::io::Result<()> {
    let body = serde_json::to_vec(msg)?;
    w.write_all(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes())
        .await?;
    w.write_all(&body).await?;
    w.flush().await
}

fn disconnected() -> RpcError {
    RpcError::internal(
        "the connection to the SOBA daemon closed; the proxy reconnects on the next request",
    )
}

impl RpcClient {
    /// Start a client over a byte stream and run the `initialize` handshake.
    pub async fn connect<R, W>(reader: R, writer: W) -> Result<RpcClient, RpcError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        RpcClient::connect_with(reader, writer, ClientSetup::default()).await
    }

    /// [`RpcClient::connect`] with an offer and a handler for the daemon's requests.
    pub async fn connect_with<R, W>(
        reader: R,
        writer: W,
        setup: ClientSetup,
    ) -> Result<RpcClient, RpcError>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let pending: Pending = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        let (p, c) = (pending.clone(), closed.clone());
        let (reply_tx, mut reply_rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
        let handler = setup.handler.clone();
        tokio::spawn(async move {
            let mut r = BufReader::new(reader);
            // The daemon's requests being answered, by id, to cancel them.
            let running: Arc<Mutex<HashMap<String, CancellationToken>>> = Arc::default();
            while let Some(msg) = read_frame(&mut r).await {
                let method = msg.get("method").and_then(Value::as_str);
                let Some(method) = method else {
                    if let Some(id) = msg.get("id").and_then(Value::as_i64) {
                        let waiter = p.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                        if let Some(s) = waiter {
                            let _ = s.send(msg);
                        }
                    }
                    continue;
                };
                let Some(id) = msg.get("id").cloned() else {
                    if method == "$/cancelRequest" {
                        let key = msg.pointer("/params/id").map(Value::to_string);
                        let token = key.and_then(|k| {
                            running.lock().unwrap_or_else(|e| e.into_inner()).remove(&k)
                        });
                        if let Some(t) = token {
                            t.cancel();
                        }
                    }
                    // Other notifications (budget changes, compaction progress) are for editors.
                    continue;
                };
                let cancel = CancellationToken::new();
                let work = handler.as_ref().and_then(|h| {
                    h(
                        method,
                        msg.get("params").cloned().unwrap_or(Value::Null),
                        cancel.clone(),
                    )
                });
                let Some(work) = work else {
                    // A request the proxy takes no part in (work-done progress): null.
                    let _ = reply_tx.send(json!({"jsonrpc": "2.0", "id": id, "result": null}));
                    continue;
                };
                let key = id.to_string();
                running
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key.clone(), cancel);
                let (tx, running) = (reply_tx.clone(), running.clone());
                tokio::spawn(async move {
                    let answer = match work.await {
                        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                        Err(e) => {
                            let mut error = json!({"code": e.code, "message": e.message});
                            if let Some(data) = e.data {
                                error["data"] = data;
                            }
                            json!({"jsonrpc": "2.0", "id": id, "error": error})
                        }
                    };
                    running
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(&key);
                    let _ = tx.send(answer);
                });
            }
            c.store(true, Ordering::SeqCst);
            // Waiters see their sender dropped and report the closed connection.
            p.lock().unwrap_or_else(|e| e.into_inner()).clear();
        });
        let writer: Arc<tokio::sync::Mutex<Box<dyn AsyncWrite + Unpin + Send>>> =
            Arc::new(tokio::sync::Mutex::new(Box::new(writer)));
        let answers = Arc::downgrade(&writer);
        tokio::spawn(async move {
            while let Some(reply) = reply_rx.recv().await {
                let Some(w) = answers.upgrade() else { return };
                let mut w = w.lock().await;
                let _ = write_frame(&mut **w, &reply).await;
            }
        });
        let client = RpcClient {
            writer,
            pending,
            next_id: AtomicI64::new(1),
            closed,
        };
        let capabilities = match setup.summarize {
            Some(offer) => json!({"experimental": {"soba": {"summarize": offer}}}),
            None => json!({}),
        };
        client
            .request(
                "initialize",
                json!({"processId": std::process::id(), "rootUri": null, "capabilities": capabilities,
                       "clientInfo": {"name": "soba proxy"}}),
            )
            .await?;
        client.notify("initialized", json!({})).await?;
        Ok(client)
    }

    /// Whether the daemon closed the connection.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    async fn notify(&self, method: &str, params: Value) -> Result<(), RpcError> {
        let mut w = self.writer.lock().await;
        write_frame(
            &mut **w,
            &json!({"jsonrpc": "2.0", "method": method, "params": params}),
        )
        .await
        .map_err(|_| disconnected())
    }

    /// One request; the daemon's `result`, or its error with code and message.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        if self.is_closed() {
            return Err(disconnected());
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, tx);
        {
            let mut w = self.writer.lock().await;
            let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            if write_frame(&mut **w, &msg).await.is_err() {
                return Err(disconnected());
            }
        }
        let reply = rx.await.map_err(|_| disconnected())?;
        if let Some(e) = reply.get("error") {
            return Err(RpcError {
                code: e
                    .get("code")
                    .and_then(Value::as_i64)
                    .unwrap_or(code::INTERNAL),
                message: e
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("the daemon reported an error")
                    .to_string(),
                data: e.get("data").cloned(),
            });
        }
        Ok(reply.get("result").cloned().unwrap_or(Value::Null))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The daemon's side of a connection: reads the client's frames, writes its own.
    struct FakeDaemon {
        reader: BufReader<tokio::io::ReadHalf<tokio::io::DuplexStream>>,
        writer: tokio::io::WriteHalf<tokio::io::DuplexStream>,
    }

    impl FakeDaemon {
        async fn read(&mut self) -> Value {
            read_frame(&mut self.reader).await.expect("a frame")
        }
        async fn write(&mut self, msg: Value) {
            write_frame(&mut self.writer, &msg).await.unwrap();
        }
    }

    #[tokio::test]
    async fn the_daemons_requests_reach_the_handler_and_cancel_requests_cancel_them() {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let (r, w) = tokio::io::split(ours);
        let (dr, dw) = tokio::io::split(theirs);
        let mut daemon = FakeDaemon {
            reader: BufReader::new(dr),
            writer: dw,
        };
        let handler: RequestHandler = Arc::new(|method, params, cancel| {
            if method != "soba/summarize" {
                return None;
            }
            Some(Box::pin(async move {
                if params["user"] == "quick" {
                    return Ok(json!({"text": "done"}));
                }
                cancel.cancelled().await;
                Err(RpcError::internal("cancelled by the daemon"))
            }))
        });
        let setup = ClientSetup {
            summarize: Some(json!({"model": "m"})),
            handler: Some(handler),
        };
        let client = tokio::spawn(RpcClient::connect_with(r, w, setup));
        let init = daemon.read().await;
        assert_eq!(init["method"], "initialize");
        assert_eq!(
            init["params"]["capabilities"]["experimental"]["soba"]["summarize"],
            json!({"model": "m"})
        );
        daemon
            .write(json!({"jsonrpc": "2.0", "id": init["id"], "result": {}}))
            .await;
        assert_eq!(daemon.read().await["method"], "initialized");
        let _client = client.await.unwrap().unwrap();

        daemon
            .write(json!({"jsonrpc": "2.0", "id": 41, "method": "soba/summarize", "params": {"user": "slow"}}))
            .await;
        daemon
            .write(json!({"jsonrpc": "2.0", "id": 42, "method": "soba/summarize", "params": {"user": "quick"}}))
            .await;
        daemon
            .write(json!({"jsonrpc": "2.0", "id": 43, "method": "window/workDoneProgress/create", "params": {}}))
            .await;
        let mut answers = std::collections::BTreeMap::new();
        for _ in 0..2 {
            let a = daemon.read().await;
            answers.insert(a["id"].as_i64().unwrap(), a);
        }
        assert_eq!(answers[&42]["result"], json!({"text": "done"}));
        assert_eq!(
            answers[&43]["result"],
            Value::Null,
            "other requests get null"
        );
        daemon
            .write(json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 41}}))
            .await;
        let cancelled = daemon.read().await;
        assert_eq!(cancelled["id"], 41);
        assert_eq!(cancelled["error"]["message"], "cancelled by the daemon");
    }
}
