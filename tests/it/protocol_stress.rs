//! The daemon under bad input and load, over in-memory `Content-Length`-framed streams (the same
//! server a `soba serve` connection runs):
//!
//! - more than 50 malformed messages (broken framing, wrong types, huge payloads, unknown
//!   methods, requests before `initialize`, reused ids): each gets a proper JSON-RPC error or
//!   is ignored as the specification says, the connection keeps answering, and another client
//!   is served throughout;
//! - load: concurrent clients sending mixed requests to one daemon; zero errors, latency
//!   percentiles and memory reported. 32 clients × 200 requests in the normal run;
//!   `SOBA_LOAD_REQUESTS=10000 cargo test --release --test it protocol_stress::load -- --nocapture`
//!   for the full size.

use crate::common::user;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use soba::daemon::framing::MAX_CONTENT_LENGTH;
use soba::daemon::paths::Paths;
use soba::daemon::registry::{Daemon, DaemonOptions};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, WriteHalf};
use tokio::sync::mpsc;

const ANSWER_WITHIN: Duration = Duration::from_secs(10);

struct Env {
    _base: tempfile::TempDir,
    workspace: PathBuf,
    daemon: Arc<Daemon>,
}

fn env() -> Env {
    let base = tempfile::tempdir().unwrap();
    let workspace = std::fs::canonicalize(base.path()).unwrap().join("project");
    std::fs::create_dir_all(&workspace).unwrap();
    let daemon = Daemon::new(
        Paths::under(&base.path().join("soba")),
        DaemonOptions {
            watch: None,
            extra_config: None,
            summarizer: None,
            ..DaemonOptions::default()
        },
    );
    Env {
        _base: base,
        workspace,
        daemon,
    }
}

/// A client that writes raw bytes and reads framed messages.
struct RawClient {
    writer: WriteHalf<tokio::io::DuplexStream>,
    incoming: mpsc::UnboundedReceiver<Value>,
    next_id: i64,
}

async fn read_frame<R: tokio::io::AsyncRead + Unpin>(r: &mut BufReader<R>) -> Option<Value> {
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

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

impl RawClient {
    fn connect(daemon: &Arc<Daemon>) -> RawClient {
        let (client_io, server_io) = tokio::io::duplex(1 << 20);
        let (sr, sw) = tokio::io::split(server_io);
        tokio::spawn(soba::daemon::server::serve_connection(
            daemon.clone(),
            sr,
            sw,
        ));
        let (cr, cw) = tokio::io::split(client_io);
        let (tx, incoming) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut r = BufReader::new(cr);
            while let Some(msg) = read_frame(&mut r).await {
                if tx.send(msg).is_err() {
                    break;
                }
            }
        });
        RawClient {
            writer: cw,
            incoming,
            next_id: 1000,
        }
    }

    async fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.unwrap();
        self.writer.flush().await.unwrap();
    }

    async fn send(&mut self, msg: &Value) {
        self.send_raw(&frame(&serde_json::to_vec(msg).unwrap()))
            .await;
    }

    /// The next response (a message with `result` or `error`), skipping notifications and
    /// answering server requests.
    async fn response(&mut self) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
        loop {
            let msg = tokio::time::timeout_at(deadline, self.incoming.recv())
                .await
                .ok()??;
            if msg.get("method").is_some() {
                if msg.get("id").is_some() {
                    let reply = json!({"jsonrpc": "2.0", "id": msg["id"], "result": null});
                    self.send(&reply).await;
                }
                continue;
            }
            return Some(msg);
        }
    }

    /// The server closed the connection within `wait` (after at most notifications).
    async fn closed_within(&mut self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.incoming.recv()).await {
                Ok(None) => return true,
                Err(_) => return false,
                Ok(Some(msg)) if msg.get("method").is_some() && msg.get("id").is_none() => {}
                Ok(Some(msg)) => panic!("unexpected message {msg}"),
            }
        }
    }

    /// Nothing arrives (besides notifications) within `wait`.
    async fn silent_for(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.incoming.recv()).await {
                Err(_) | Ok(None) => return None,
                Ok(Some(msg)) if msg.get("method").is_some() && msg.get("id").is_none() => {}
                Ok(Some(msg)) => return Some(msg),
            }
        }
    }

    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let r = self
            .response()
            .await
            .unwrap_or_else(|| panic!("no answer to {method}"));
        assert_eq!(r["id"], id, "{r}");
        r
    }

    async fn initialize(&mut self, workspace: &std::path::Path) {
        let r = self
            .request(
                "initialize",
                json!({"processId": null, "rootUri": null, "capabilities": {},
                    "workspaceFolders": [{"uri": format!("file://{}", workspace.display()), "name": "ws"}]}),
            )
            .await;
        assert!(r.get("result").is_some(), "{r}");
        self.send(&json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}))
            .await;
    }

    /// The connection still answers a well-formed request.
    async fn assert_alive(&mut self, after: &str) {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "soba/sessions", "params": {}}))
            .await;
        let r = self
            .response()
            .await
            .unwrap_or_else(|| panic!("the connection stopped answering after {after}"));
        assert_eq!(r["id"], id, "after {after}: {r}");
        assert!(r.get("result").is_some(), "after {after}: {r}");
    }
}

/// What a malformed message must get.
#[derive(Debug, Clone)]
enum Expect {
    /// An error response with this id and one of these codes; the connection stays open.
    Error(Value, &'static [i64]),
    /// A frame the server cannot read (bad header, a body that is not JSON) or JSON that is not
    /// a JSON-RPC message: an error response with this code and a message saying what was
    /// wrong, and a null id — or, for what reads as a request with a valid id, that id, so the
    /// client can match the error to its request; then the same connection goes on answering.
    Unreadable(i64, Value),
    /// No response at all (notifications, responses to nothing).
    Ignored,
}

const PARSE: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const UNKNOWN_SESSION: i64 = soba::daemon::protocol::code::UNKNOWN_SESSION;

struct Case {
    name: String,
    bytes: Vec<u8>,
    expect: Expect,
}

fn case(name: &str, bytes: Vec<u8>, expect: Expect) -> Case {
    Case {
        name: name.into(),
        bytes,
        expect,
    }
}

fn req(id: Value, method: &str, params: Value) -> Vec<u8> {
    frame(
        &serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .unwrap(),
    )
}

fn bad_params(id: i64, method: &str, params: Value) -> Case {
    case(
        &format!("{method} with {params}"),
        req(json!(id), method, params),
        Expect::Error(json!(id), &[INVALID_PARAMS]),
    )
}

/// The suite, for a connection that is initialized and has `session` open.
fn malformed_cases(session: &str) -> Vec<Case> {
    let huge_string = "x".repeat(16 << 20);
    let nested = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let mut over_the_limit =
        format!("Content-Length: {}\r\n\r\n", MAX_CONTENT_LENGTH + 1).into_bytes();
    over_the_limit.resize(over_the_limit.len() + MAX_CONTENT_LENGTH + 1, b' ');
    // An append too large to accept, as a client writes it: `id` and `method` first.
    let request_head = format!(
        r#"{{"jsonrpc":"2.0","id":41,"method":"soba/session/append","params":{{"sessionId":"{session}","entries":[{{"type":"message","role":"user","content":[{{"type":"text","text":""#
    );
    let mut request_over_the_limit = format!(
        "Content-Length: {}\r\n\r\n{request_head}",
        MAX_CONTENT_LENGTH + 1
    )
    .into_bytes();
    request_over_the_limit.resize(
        request_over_the_limit.len() + MAX_CONTENT_LENGTH + 1 - request_head.len(),
        b'x',
    );
    let mut cases = vec![
        // Broken framing and bodies.
        case(
            "body is not JSON",
            frame(b"hello"),
            Expect::Unreadable(PARSE, Value::Null),
        ),
        case(
            "truncated JSON",
            frame(br#"{"jsonrpc":"2.0","id":1,"#),
            Expect::Unreadable(PARSE, Value::Null),
        ),
        case(
            "invalid UTF-8",
            frame(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}"),
            Expect::Unreadable(PARSE, Value::Null),
        ),
        // A frame with no body holds no message: ignored.
        case("empty body", frame(b""), Expect::Ignored),
        case(
            "garbage before a header",
            b"garbage!!\r\n"
                .iter()
                .copied()
                .chain(req(json!(1), "soba/sessions", json!({})))
                .collect(),
            Expect::Unreadable(PARSE, Value::Null),
        ),
        case(
            "Content-Length not a number",
            b"Content-Length: ten\r\n\r\n{}".to_vec(),
            Expect::Unreadable(PARSE, Value::Null),
        ),
        case(
            "negative Content-Length",
            b"Content-Length: -5\r\n\r\n{}".to_vec(),
            Expect::Unreadable(PARSE, Value::Null),
        ),
        case(
            "unsupported Content-Type",
            b"Content-Length: 2\r\nContent-Type: text/html\r\n\r\n{}".to_vec(),
            Expect::Unreadable(PARSE, Value::Null),
        ),
        case(
            "no Content-Length header",
            b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{}".to_vec(),
            Expect::Unreadable(PARSE, Value::Null),
        ),
        case(
            "two Content-Length headers",
            b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}".to_vec(),
            Expect::Unreadable(PARSE, Value::Null),
        ),
        case(
            "header lines ended by a bare line feed",
            b"Content-Length: 2\n\n{}".to_vec(),
            Expect::Unreadable(PARSE, Value::Null),
        ),
        case(
            "garbage glued to a header",
            b"garbage"
                .iter()
                .copied()
                .chain(req(json!(2), "soba/sessions", json!({})))
                .collect(),
            Expect::Unreadable(PARSE, Value::Null),
        ),
        case(
            "Content-Length over the limit",
            over_the_limit,
            Expect::Unreadable(PARSE, Value::Null),
        ),
        case(
            "request over the size limit",
            request_over_the_limit,
            Expect::Unreadable(PARSE, json!(41)),
        ),
        case(
            "JSON nested 100 000 deep",
            frame(nested.as_bytes()),
            Expect::Unreadable(PARSE, Value::Null),
        ),
        case(
            "16 MB of garbage",
            frame(huge_string.as_bytes()),
            Expect::Unreadable(PARSE, Value::Null),
        ),
        // Not a JSON-RPC request.
        case(
            "a JSON number",
            frame(b"42"),
            Expect::Unreadable(INVALID_REQUEST, Value::Null),
        ),
        case(
            "a JSON string",
            frame(br#""soba/budget""#),
            Expect::Unreadable(INVALID_REQUEST, Value::Null),
        ),
        case(
            "an empty batch",
            frame(b"[]"),
            Expect::Unreadable(INVALID_REQUEST, Value::Null),
        ),
        case(
            "a batch of requests",
            frame(br#"[{"jsonrpc":"2.0","id":7,"method":"soba/sessions"}]"#),
            Expect::Unreadable(INVALID_REQUEST, Value::Null),
        ),
        case(
            "an empty object",
            frame(b"{}"),
            Expect::Unreadable(INVALID_REQUEST, Value::Null),
        ),
        case(
            "jsonrpc 1.0",
            frame(br#"{"jsonrpc":"1.0","id":8,"method":"soba/sessions"}"#),
            Expect::Unreadable(INVALID_REQUEST, json!(8)),
        ),
        case(
            "no jsonrpc member",
            frame(br#"{"id":9,"method":"soba/sessions"}"#),
            Expect::Unreadable(INVALID_REQUEST, json!(9)),
        ),
        case(
            "method is a number",
            frame(br#"{"jsonrpc":"2.0","id":10,"method":5}"#),
            Expect::Unreadable(INVALID_REQUEST, Value::Null),
        ),
        case(
            "id is an object",
            frame(br#"{"jsonrpc":"2.0","id":{"a":1},"method":"soba/sessions"}"#),
            Expect::Unreadable(INVALID_REQUEST, Value::Null),
        ),
        case(
            "id is an array",
            frame(br#"{"jsonrpc":"2.0","id":[1],"method":"soba/sessions"}"#),
            Expect::Unreadable(INVALID_REQUEST, Value::Null),
        ),
        case(
            "id is a fraction",
            frame(br#"{"jsonrpc":"2.0","id":1.5,"method":"soba/sessions"}"#),
            Expect::Unreadable(INVALID_REQUEST, Value::Null),
        ),
        case(
            "id beyond 64 bits",
            frame(br#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"soba/sessions"}"#),
            Expect::Unreadable(INVALID_REQUEST, Value::Null),
        ),
        case(
            "a repeated method member",
            frame(br#"{"jsonrpc":"2.0","id":17,"method":"soba/sessions","method":"soba/budget"}"#),
            Expect::Unreadable(INVALID_REQUEST, json!(17)),
        ),
        // Unknown methods.
        case(
            "unknown soba method",
            req(json!(11), "soba/doesNotExist", json!({})),
            Expect::Error(json!(11), &[METHOD_NOT_FOUND]),
        ),
        case(
            "unknown method",
            req(json!(12), "frobnicate", json!({})),
            Expect::Error(json!(12), &[METHOD_NOT_FOUND]),
        ),
        case(
            "method name with a slash only",
            req(json!(13), "/", json!({})),
            Expect::Error(json!(13), &[METHOD_NOT_FOUND]),
        ),
        case(
            "empty method name",
            req(json!(14), "", json!({})),
            Expect::Error(json!(14), &[METHOD_NOT_FOUND]),
        ),
        case(
            "string id, unknown method",
            req(json!("abc"), "soba/nope", json!({})),
            Expect::Error(json!("abc"), &[METHOD_NOT_FOUND]),
        ),
        case(
            "16 MB params to an unknown method",
            req(json!(15), "soba/nope", json!({"blob": huge_string})),
            Expect::Error(json!(15), &[METHOD_NOT_FOUND]),
        ),
        case(
            "unknown executeCommand",
            req(
                json!(16),
                "workspace/executeCommand",
                json!({"command": "soba.server.nope", "arguments": []}),
            ),
            Expect::Error(json!(16), &[METHOD_NOT_FOUND, INVALID_PARAMS]),
        ),
        // Wrong parameter types.
        bad_params(20, "soba/session/open", json!({})),
        bad_params(21, "soba/session/open", json!({"workspace": 5})),
        bad_params(22, "soba/session/open", json!([1, 2])),
        bad_params(23, "soba/session/open", json!("workspace")),
        bad_params(24, "soba/session/append", json!({"sessionId": session})),
        bad_params(
            25,
            "soba/session/append",
            json!({"sessionId": session, "entries": "not a list"}),
        ),
        bad_params(
            26,
            "soba/session/append",
            json!({"sessionId": session, "entries": [null]}),
        ),
        bad_params(
            27,
            "soba/session/append",
            json!({"sessionId": session, "entries": [{"type": "bogus"}]}),
        ),
        bad_params(
            28,
            "soba/session/append",
            json!({"sessionId": session, "entries": [{"type": "message", "role": "wizard", "content": []}]}),
        ),
        bad_params(
            29,
            "soba/session/append",
            json!({"sessionId": 17, "entries": []}),
        ),
        bad_params(30, "soba/preflight", json!({})),
        bad_params(31, "soba/preflight", json!({"sessionId": [session]})),
        bad_params(
            32,
            "soba/turn/complete",
            json!({"sessionId": session, "usage": "lots"}),
        ),
        bad_params(
            33,
            "soba/checkpoint",
            json!({"sessionId": session, "kind": "bogus", "label": "x"}),
        ),
        bad_params(
            34,
            "soba/checkpoint",
            json!({"sessionId": session, "kind": "milestone"}),
        ),
        bad_params(35, "soba/rewind", json!({"sessionId": session})),
        bad_params(
            36,
            "soba/autoCompact",
            json!({"sessionId": session, "enabled": "yes"}),
        ),
        bad_params(
            37,
            "soba/flight",
            json!({"sessionId": session, "limit": -1}),
        ),
        bad_params(38, "soba/budget", json!({"sessionId": 3})),
        bad_params(
            39,
            "soba/compact",
            json!({"sessionId": session, "instructions": 42}),
        ),
        bad_params(40, "soba/cancel", json!({"session": session})),
        bad_params(42, "soba/session/close", json!({"sessionId": true})),
        // Well-formed, but about things that do not exist.
        case(
            "append to an unknown session",
            req(
                json!(50),
                "soba/session/append",
                json!({"sessionId": "s_nope", "entries": [user("hi")]}),
            ),
            Expect::Error(json!(50), &[UNKNOWN_SESSION]),
        ),
        case(
            "preflight of an unknown session",
            req(json!(51), "soba/preflight", json!({"sessionId": "s_nope"})),
            Expect::Error(json!(51), &[UNKNOWN_SESSION]),
        ),
        case(
            "budget of an unknown session",
            req(json!(52), "soba/budget", json!({"sessionId": "s_nope"})),
            Expect::Error(json!(52), &[UNKNOWN_SESSION]),
        ),
        case(
            "close of an unknown session",
            req(
                json!(55),
                "soba/session/close",
                json!({"sessionId": "s_nope"}),
            ),
            Expect::Error(json!(55), &[UNKNOWN_SESSION]),
        ),
        case(
            "rewind to an unknown entry",
            req(
                json!(53),
                "soba/rewind",
                json!({"sessionId": session, "entryId": "e_nope"}),
            ),
            Expect::Error(json!(53), &[INVALID_PARAMS, UNKNOWN_SESSION]),
        ),
        case(
            "append with a dangling parent",
            req(
                json!(54),
                "soba/session/append",
                json!({"sessionId": session, "entries": [{"type": "message", "role": "user", "parentId": "e_nope", "content": [{"type": "text", "text": "x"}]}]}),
            ),
            Expect::Error(json!(54), &[INVALID_PARAMS]),
        ),
        // Protocol misuse.
        case(
            "initialize twice",
            req(json!(60), "initialize", json!({"capabilities": {}})),
            Expect::Error(json!(60), &[INVALID_REQUEST]),
        ),
        // Notifications and stray responses: no answer, per JSON-RPC.
        case(
            "unknown notification",
            frame(br#"{"jsonrpc":"2.0","method":"soba/nothing","params":{}}"#),
            Expect::Ignored,
        ),
        case(
            "cancel notification with bad params",
            frame(br#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":{"x":1}}}"#),
            Expect::Ignored,
        ),
        case(
            "cancel of an unknown request",
            frame(br#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":987654}}"#),
            Expect::Ignored,
        ),
        case(
            "a response to nothing",
            frame(br#"{"jsonrpc":"2.0","id":424242,"result":null}"#),
            Expect::Ignored,
        ),
        case(
            "an error response to nothing",
            frame(br#"{"jsonrpc":"2.0","id":434343,"error":{"code":1,"message":"x"}}"#),
            Expect::Ignored,
        ),
        case(
            "a request notification of a soba method",
            frame(br#"{"jsonrpc":"2.0","method":"soba/budget","params":{}}"#),
            Expect::Ignored,
        ),
    ];
    // An empty frame directly followed by a notification.
    cases.push(case(
        "an empty frame before a notification",
        b"Content-Length: 0\r\n\r\n"
            .iter()
            .copied()
            .chain(frame(
                br#"{"jsonrpc":"2.0","method":"soba/nothing","params":{}}"#,
            ))
            .collect(),
        Expect::Ignored,
    ));
    cases
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_get_errors_and_the_daemon_keeps_serving() {
    let e = env();

    // Requests before initialize: refused, the connection stays usable.
    let mut fresh = RawClient::connect(&e.daemon);
    let r = fresh.request("soba/sessions", json!({})).await;
    assert_eq!(r["error"]["code"], -32002, "{r}");
    fresh.initialize(&e.workspace).await;
    fresh.assert_alive("a request before initialize").await;

    // A second, well-behaved client works through the whole suite.
    let mut bystander = RawClient::connect(&e.daemon);
    bystander.initialize(&e.workspace).await;
    let opened = bystander
        .request("soba/session/open", json!({"workspace": e.workspace}))
        .await;
    let bystander_session = opened["result"]["sessionId"].as_str().unwrap().to_string();

    let mut c = RawClient::connect(&e.daemon);
    c.initialize(&e.workspace).await;
    let opened = c
        .request(
            "soba/session/open",
            json!({"workspace": e.workspace, "create": true}),
        )
        .await;
    let session = opened["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("{opened}"))
        .to_string();

    let cases = malformed_cases(&session);
    assert!(cases.len() >= 50, "{} cases", cases.len());
    let mut failures = Vec::new();
    let mut unreadable_answered = 0;
    for (i, case) in cases.iter().enumerate() {
        c.send_raw(&case.bytes).await;
        match &case.expect {
            Expect::Unreadable(code, id) => match c.response().await {
                Some(r) => {
                    let message = r["error"]["message"].as_str().unwrap_or("");
                    // The bare "Parse error" / "Invalid request" of a generic decoder says
                    // neither what was wrong nor what to send instead.
                    if r["id"] == *id && r["error"]["code"] == *code && message.len() > 30 {
                        unreadable_answered += 1;
                    } else {
                        failures.push(format!(
                            "{}: expected an error with id {id}, code {code} and an explaining message, got {r}",
                            case.name
                        ));
                    }
                }
                None => failures.push(format!("{}: no answer", case.name)),
            },
            Expect::Error(id, codes) => match c.response().await {
                Some(r) => {
                    let code = r["error"]["code"].as_i64();
                    let message = r["error"]["message"].as_str().unwrap_or("");
                    if r["id"] != *id
                        || !code.is_some_and(|c| codes.contains(&c))
                        || message.is_empty()
                    {
                        failures.push(format!(
                            "{}: expected an error with id {id} and a code in {codes:?}, got {r}",
                            case.name
                        ));
                    }
                }
                None => failures.push(format!("{}: no answer", case.name)),
            },
            Expect::Ignored => {
                if let Some(r) = c.silent_for(Duration::from_millis(100)).await {
                    failures.push(format!("{}: expected no answer, got {r}", case.name));
                }
            }
        }
        // Drain what a framing error may have produced besides (a resynchronized request).
        while let Some(extra) = c.silent_for(Duration::from_millis(20)).await {
            if extra["id"] != Value::Null && extra.get("result").is_some() {
                continue;
            }
            if extra["id"] != Value::Null {
                failures.push(format!("{}: unexpected extra message {extra}", case.name));
            }
        }
        // The same connection goes on: a frame it could not read never ends it.
        c.assert_alive(&case.name).await;
        // The other client is served between every two bad messages.
        let r = bystander
            .request(
                "soba/session/append",
                json!({"sessionId": bystander_session, "entries": [user(&format!("still here {i}"))]}),
            )
            .await;
        assert!(r.get("result").is_some(), "after {}: {r}", case.name);
    }
    let unreadable = cases
        .iter()
        .filter(|c| matches!(c.expect, Expect::Unreadable(..)))
        .count();
    eprintln!(
        "malformed: {} cases; {unreadable_answered} of {unreadable} unreadable frames answered, on one connection that kept serving",
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );

    // Reused ids: two requests in flight with the same id both get an answer with that id.
    for _ in 0..2 {
        c.send(&json!({"jsonrpc": "2.0", "id": 777, "method": "soba/sessions", "params": {}}))
            .await;
    }
    for _ in 0..2 {
        let r = c.response().await.expect("an answer to a reused id");
        assert_eq!(r["id"], 777, "{r}");
    }
    c.assert_alive("reused ids").await;

    // A frame that announces more than it sends, then the client goes away: nothing breaks.
    let mut half = RawClient::connect(&e.daemon);
    half.initialize(&e.workspace).await;
    half.send_raw(b"Content-Length: 100\r\n\r\n{\"jsonrpc\"")
        .await;
    drop(half);
    let r = bystander
        .request("soba/budget", json!({"sessionId": bystander_session}))
        .await;
    assert!(r.get("result").is_some(), "{r}");

    // After shutdown, requests are refused; exit ends the connection.
    let r = c.request("shutdown", Value::Null).await;
    assert!(r.get("result").is_some(), "{r}");
    let r = c.request("soba/sessions", json!({})).await;
    assert_eq!(r["error"]["code"], INVALID_REQUEST, "{r}");
    let r = bystander.request("soba/sessions", json!({})).await;
    assert!(r.get("result").is_some(), "{r}");
    // The client keeps its side open; the server ends the connection anyway.
    c.send(&json!({"jsonrpc": "2.0", "method": "exit"})).await;
    assert!(
        c.closed_within(ANSWER_WITHIN).await,
        "exit did not end the connection"
    );
}

/// Header variants the base protocol allows are read like the plain `Content-Length` header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lenient_headers_are_read() {
    let e = env();
    let mut c = RawClient::connect(&e.daemon);
    c.initialize(&e.workspace).await;
    for (i, header) in [
        "content-length: {}\r\n\r\n",
        "CONTENT-LENGTH:{}\r\n\r\n",
        "Content-Length: {}\r\nContent-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n",
        "Content-Type: application/vscode-jsonrpc; charset=utf8\r\nContent-Length: {}\r\n\r\n",
        "Content-Length: {}\r\nContent-Type: application/json\r\nX-Trace: 7\r\n\r\n",
    ]
    .iter()
    .enumerate()
    {
        let id = 100 + i as i64;
        let body = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": "soba/sessions", "params": {}}),
        )
        .unwrap();
        let mut bytes = header.replace("{}", &body.len().to_string()).into_bytes();
        bytes.extend(body);
        c.send_raw(&bytes).await;
        let r = c
            .response()
            .await
            .unwrap_or_else(|| panic!("no answer with header {header:?}"));
        assert_eq!(r["id"], id, "{header:?}: {r}");
        assert!(r.get("result").is_some(), "{header:?}: {r}");
    }
}

/// One seeded mix of frames, broken frames and noise, for the test below.
fn mixed_input(rng: &mut StdRng) -> Vec<u8> {
    let mut input = Vec::new();
    for _ in 0..rng.random_range(1..8) {
        match rng.random_range(0..8) {
            0 => input.extend(req(
                json!(rng.random_range(0..100)),
                "soba/sessions",
                json!({}),
            )),
            1 => {
                let mut noise = vec![0; rng.random_range(0..200)];
                rng.fill(&mut noise[..]);
                input.extend(noise);
            }
            2 => {
                let mut body = vec![0; rng.random_range(0..100)];
                rng.fill(&mut body[..]);
                input.extend(frame(&body));
            }
            3 => {
                let lengths = [
                    "",
                    "-1",
                    "abc",
                    "99999999999999999999999",
                    "70000000",
                    "5",
                    "0",
                ];
                let length = lengths[rng.random_range(0..lengths.len())];
                input.extend(format!("Content-Length: {length}\r\n").as_bytes());
                if rng.random_bool(0.3) {
                    input.extend(b"Content-Type: text/plain\r\n");
                }
                input.extend(b"\r\n{}");
            }
            4 => input.extend(b"Content-Length: 50\r\n\r\n{\"jsonrpc\""),
            5 => {
                let ids = [
                    json!(1),
                    json!("a"),
                    json!(null),
                    json!(1.5),
                    json!([1]),
                    json!({}),
                ];
                let methods = [
                    json!("soba/budget"),
                    json!(5),
                    json!(""),
                    json!("initialize"),
                ];
                let message = json!({
                    "jsonrpc": if rng.random_bool(0.8) { "2.0" } else { "1.0" },
                    "id": ids[rng.random_range(0..ids.len())],
                    "method": methods[rng.random_range(0..methods.len())],
                    "params": {},
                });
                input.extend(frame(&serde_json::to_vec(&message).unwrap()));
            }
            6 if rng.random_bool(0.2) => {
                input.extend(frame(br#"{"jsonrpc":"2.0","method":"exit"}"#))
            }
            _ => input.extend(b"\r\n"),
        }
    }
    input
}

/// What the fuzz target (`fuzz/fuzz_targets/jsonrpc.rs`) checks, over seeded inputs: whatever
/// the bytes, the connection's task ends without a panic once the client closes its side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arbitrary_bytes_never_wedge_a_connection() {
    let e = env();
    let mut rng = StdRng::seed_from_u64(0x50ba);
    for case in 0..60 {
        let input = mixed_input(&mut rng);
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let (sr, sw) = tokio::io::split(server_io);
        let connection = tokio::spawn(soba::daemon::server::serve_connection(
            e.daemon.clone(),
            sr,
            sw,
        ));
        let (mut cr, mut cw) = tokio::io::split(client_io);
        let reader = tokio::spawn(async move {
            let mut out = Vec::new();
            let _ = cr.read_to_end(&mut out).await;
        });
        let init = req(json!(0), "initialize", json!({"capabilities": {}}));
        let _ = cw.write_all(&init).await;
        for chunk in input.chunks(rng.random_range(1..64)) {
            let _ = cw.write_all(chunk).await;
        }
        let _ = cw.shutdown().await;
        tokio::time::timeout(ANSWER_WITHIN, connection)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "case {case}: the connection did not end after the client closed; input {:?}",
                    String::from_utf8_lossy(&input)
                )
            })
            .unwrap_or_else(|p| panic!("case {case}: the connection's task failed: {p}"));
        tokio::time::timeout(ANSWER_WITHIN, reader)
            .await
            .expect("the client sees the end of the output")
            .unwrap();
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default,
    }
}

fn rss_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::test(flavor = "multi_thread")]
async fn load_concurrent_clients_mixed_requests() {
    let clients = env_usize("SOBA_LOAD_CLIENTS", 32);
    let requests = env_usize("SOBA_LOAD_REQUESTS", 200);
    let e = env();
    let rss_before = rss_kib("VmRSS:");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for k in 0..clients {
        let daemon = e.daemon.clone();
        let workspace = e.workspace.join(format!("ws{}", k % 4));
        std::fs::create_dir_all(&workspace).unwrap();
        tasks.push(tokio::spawn(async move {
            let mut c = RawClient::connect(&daemon);
            c.initialize(&workspace).await;
            let opened = c
                .request("soba/session/open", json!({"workspace": workspace, "create": true}))
                .await;
            let session = opened["result"]["sessionId"].as_str().unwrap().to_string();
            let mut latencies = Vec::with_capacity(requests);
            let mut errors = Vec::new();
            for i in 0..requests {
                let (method, params) = match i % 10 {
                    0..=3 => (
                        "soba/session/append",
                        json!({"sessionId": session, "entries": [user(&format!("client {k} message {i}"))]}),
                    ),
                    4..=6 => ("soba/budget", json!({"sessionId": session})),
                    7 => ("soba/preflight", json!({"sessionId": session})),
                    8 => ("soba/sessions", json!({"workspace": workspace})),
                    _ => ("soba/turn/complete", json!({"sessionId": session})),
                };
                let t = Instant::now();
                let r = c.request(method, params).await;
                latencies.push(t.elapsed());
                if r.get("error").is_some() {
                    errors.push(format!("{method}: {r}"));
                }
            }
            (latencies, errors)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = Vec::new();
    for t in tasks {
        let (l, e) = t.await.unwrap();
        latencies.extend(l);
        errors.extend(e);
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    let rss_after = rss_kib("VmRSS:");
    let peak = rss_kib("VmHWM:");
    eprintln!(
        "load: {clients} clients × {requests} requests = {} in {elapsed:.2?} ({:.0} req/s); \
         p50 {:?}, p99 {:?}, max {:?}; RSS {:?} → {:?} KiB, peak {:?} KiB; {} errors",
        latencies.len(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        latencies.last().unwrap(),
        rss_before,
        rss_after,
        peak,
        errors.len()
    );
    assert!(
        errors.is_empty(),
        "{} errors, first: {}",
        errors.len(),
        errors[0]
    );
    assert_eq!(latencies.len(), clients * requests);
}
