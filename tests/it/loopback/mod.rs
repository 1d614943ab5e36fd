//! A scripted HTTP/1.1 server on 127.0.0.1 for summarizer tests: each connection reads one
//! request, records it, and plays the steps the test's handler returns (bytes, chunked frames,
//! pauses, close, reset). It notices when the client drops the connection.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Lower-cased names.
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// The whole request as text (head and body).
    pub raw: String,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone)]
pub enum Step {
    /// Raw bytes.
    Raw(Vec<u8>),
    /// One `Transfer-Encoding: chunked` frame.
    Chunk(Vec<u8>),
    /// The terminating zero-length chunk.
    EndChunks,
    Sleep(Duration),
    /// Drop the connection with a TCP reset.
    Reset,
    /// Close the connection.
    Close,
}

pub fn head(status: u16, content_type: &str, chunked: bool) -> Step {
    let framing = if chunked {
        "Transfer-Encoding: chunked\r\n"
    } else {
        ""
    };
    Step::Raw(
        format!("HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n{framing}Connection: close\r\n\r\n")
            .into_bytes(),
    )
}

/// A complete `text/event-stream` response, one chunk per event.
pub fn sse(events: &[String]) -> Vec<Step> {
    let mut steps = vec![head(200, "text/event-stream", true)];
    steps.extend(events.iter().map(|e| Step::Chunk(e.clone().into_bytes())));
    steps.push(Step::EndChunks);
    steps
}

/// A complete JSON response with a length.
pub fn json(status: u16, body: &str) -> Vec<Step> {
    vec![Step::Raw(
        format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )]
}

type Handler = dyn Fn(usize, &Recorded) -> Vec<Step> + Send + Sync;

#[derive(Default)]
struct State {
    requests: Vec<Recorded>,
    /// Per connection: when the server saw the client close it.
    client_closed: Vec<Option<Instant>>,
}

#[derive(Clone)]
pub struct Loopback {
    pub base: String,
    state: Arc<Mutex<State>>,
}

impl Loopback {
    pub async fn start(
        handler: impl Fn(usize, &Recorded) -> Vec<Step> + Send + Sync + 'static,
    ) -> Loopback {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let base = format!("http://{}", listener.local_addr().expect("local addr"));
        let state = Arc::new(Mutex::new(State::default()));
        let handler: Arc<Handler> = Arc::new(handler);
        let accept_state = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = accept_state.clone();
                let handler = handler.clone();
                tokio::spawn(serve(stream, state, handler));
            }
        });
        Loopback { base, state }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.lock().unwrap().requests.clone()
    }

    /// Wait until the client has closed connection `index`; when, or `None` after `within`.
    pub async fn client_closed(&self, index: usize, within: Duration) -> Option<Instant> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(Some(at)) = self.state.lock().unwrap().client_closed.get(index) {
                return Some(*at);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = stream.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body_text = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
    let body = serde_json::from_str(&body_text).unwrap_or(Value::Null);
    Some(Recorded {
        method,
        path,
        headers,
        body,
        raw: format!("{head}{body_text}"),
    })
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>, handler: Arc<Handler>) {
    let Some(request) = read_request(&mut stream).await else {
        return;
    };
    let index = {
        let mut s = state.lock().unwrap();
        s.requests.push(request.clone());
        s.client_closed.push(None);
        s.requests.len() - 1
    };
    let mark_closed = || state.lock().unwrap().client_closed[index] = Some(Instant::now());
    let mut probe = [0u8; 1024];
    for step in handler(index, &request) {
        let written = match step {
            Step::Raw(bytes) => stream.write_all(&bytes).await,
            Step::Chunk(bytes) => {
                let mut frame = format!("{:x}\r\n", bytes.len()).into_bytes();
                frame.extend_from_slice(&bytes);
                frame.extend_from_slice(b"\r\n");
                stream.write_all(&frame).await
            }
            Step::EndChunks => stream.write_all(b"0\r\n\r\n").await,
            Step::Sleep(d) => {
                // Sleep, but notice the client going away meanwhile.
                tokio::select! {
                    _ = tokio::time::sleep(d) => Ok(()),
                    r = stream.read(&mut probe) => match r {
                        Ok(0) | Err(_) => { mark_closed(); return; }
                        Ok(_) => Ok(()),
                    },
                }
            }
            Step::Reset => {
                let _ = stream.set_zero_linger();
                return;
            }
            Step::Close => return,
        };
        if written.is_err() {
            mark_closed();
            return;
        }
        let _ = stream.flush().await;
    }
    // Script done: end our side and wait for the client to close its own.
    let _ = stream.shutdown().await;
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.read(&mut probe).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    if closed.is_ok() {
        mark_closed();
    }
}
