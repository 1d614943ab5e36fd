//! The connection's own LSP base-protocol framing, in front of tower-lsp-server.
//!
//! tower-lsp-server answers an unreadable frame with an error and then stops reading: its
//! framed reader ends after the first decode error, so one bad frame used to cost the client its
//! connection. [`relay_frames`] reads the client's frames itself and passes the service only frames
//! whose body tower-lsp-server decodes. Everything else is answered here with a JSON-RPC error
//! (null id) and the connection goes on: garbage where a header belongs is skipped up to the
//! next `Content-Length:` header, a frame with a known length but a bad body or header is
//! dropped whole.
//!
//! ```text
//! client input ─▶ FrameReader ─▶ check_message ─┬─ accepted ─▶ pipe ─▶ tower-lsp-server
//!                                               └─ rejected ─▶ ┐             │
//! client output ◀─ one writer ◀─ frame queue ◀──────────────────┴─ FrameReader ◀┘
//! ```
//!
//! One task writes the client's output, whole frames at a time, so the service's responses and
//! the errors of this layer never interleave mid-frame. Every buffer on the way is bounded: the
//! pipes and the queue apply backpressure, a body may be at most [`MAX_CONTENT_LENGTH`] bytes,
//! and a longer one is discarded as it streams past.

use std::fmt;
use std::future::Future;
use std::io;

use bytes::{Buf, Bytes, BytesMut};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tower_lsp_server::jsonrpc;

use super::protocol::code;

/// The largest body a client may send (the `Content-Length` of one frame). A frame announcing
/// more is answered with a parse error and its body is discarded unread.
pub const MAX_CONTENT_LENGTH: usize = 64 << 20;

/// A header section (everything before the empty line) longer than this is not a header.
/// Real ones are well under 100 bytes.
pub const MAX_HEADER_BYTES: usize = 8 << 10;

/// Bytes in flight between this layer and the service, each way.
const SERVICE_PIPE_BYTES: usize = 64 << 10;

/// Frames waiting for the client's output.
const OUTPUT_QUEUE_FRAMES: usize = 16;

/// The least a read asks for, and the most it asks for while a large body comes in.
const MIN_READ: usize = 8 << 10;
const MAX_READ: usize = 1 << 20;

/// How much of a body over the limit is read to find the request's id. Clients write `id`
/// and `method` before `params`, so a request's id is within the first few bytes.
const OVERSIZED_HEAD_BYTES: usize = 64 << 10;

/// After a large frame the read buffer is replaced when it holds more than this, so an idle
/// connection does not keep a body-sized allocation.
const RETAINED_BUFFER_BYTES: usize = 1 << 20;

/// Where a header is searched for after garbage. Matched case-insensitively, as header names are.
const RESYNC_MARKER: &[u8] = b"content-length:";

/// Serve one connection: `start_service` gets the two ends the service reads its input from and
/// writes its output to (tower-lsp-server's `Server::new(input, output, …).serve(…)`), and this
/// relays between them and the client until the client's input ends and the service has
/// answered, or until the service stops on its own (after `exit`).
pub async fn relay_frames<R, W, S, F>(input: R, output: W, start_service: S)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite,
    S: FnOnce(DuplexStream, DuplexStream) -> F,
    F: Future<Output = ()>,
{
    relay_frames_with(input, output, |_| None, start_service).await;
}

/// [`relay_frames`] with `handshake` shown every readable frame before the service: a frame it
/// answers (the body of its response) stays here, which is how a connection's
/// `soba/client/hello` is served before tower-lsp-server's `initialize`.
pub async fn relay_frames_with<R, W, H, S, F>(input: R, output: W, handshake: H, start_service: S)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite,
    H: FnMut(&[u8]) -> Option<Bytes>,
    S: FnOnce(DuplexStream, DuplexStream) -> F,
    F: Future<Output = ()>,
{
    let (to_service, service_input) = tokio::io::duplex(SERVICE_PIPE_BYTES);
    let (service_output, from_service) = tokio::io::duplex(SERVICE_PIPE_BYTES);
    let (outgoing, outgoing_queue) = mpsc::channel(OUTPUT_QUEUE_FRAMES);
    let service_stopped = CancellationToken::new();

    let service = async {
        start_service(service_input, service_output).await;
        service_stopped.cancel();
    };
    let client_replies = outgoing.clone();
    let client_input = async {
        // After `exit` the service is gone while the client may keep its side open: stop
        // reading then, instead of waiting for an end of input that may never come.
        tokio::select! {
            () = relay_client_input(input, to_service, client_replies, handshake) => {}
            () = service_stopped.cancelled() => {}
        }
    };
    tokio::join!(
        service,
        client_input,
        relay_service_output(from_service, outgoing),
        write_frames(output, outgoing_queue),
    );
}

/// Client frames to the service, or answered with an error here.
async fn relay_client_input<R: AsyncRead + Unpin>(
    input: R,
    mut to_service: DuplexStream,
    outgoing: mpsc::Sender<Bytes>,
    mut handshake: impl FnMut(&[u8]) -> Option<Bytes>,
) {
    let mut frames = FrameReader::new(input, MAX_CONTENT_LENGTH);
    // An I/O error on the client's input ends the connection like the end of input does.
    while let Ok(Some(incoming)) = frames.next().await {
        let rejection = match incoming {
            Incoming::Frame(body) => match check_message(&body) {
                Verdict::Forward => {
                    if let Some(answer) = handshake(&body) {
                        let _ = outgoing.send(answer).await;
                        continue;
                    }
                    if write_frame(&mut to_service, body).await.is_err() {
                        // The service stopped reading: it has ended.
                        return;
                    }
                    continue;
                }
                Verdict::Ignore => continue,
                Verdict::Reject(rejection) => rejection,
            },
            Incoming::Unreadable(problem) => Rejection {
                code: code::PARSE_ERROR,
                message: problem.to_string(),
                id: match &problem {
                    Unreadable::TooLarge { request_id, .. } => request_id.clone(),
                    _ => None,
                },
            },
        };
        // A full queue holds this reader back until the client reads its answers. A closed one
        // means the client's output is gone; its input is still read to the end so the service
        // sees the end too.
        let _ = outgoing.send(rejection.response()).await;
    }
    // Dropping `to_service` here is the service's end of input.
}

/// The service's frames to the output queue.
async fn relay_service_output(from_service: DuplexStream, outgoing: mpsc::Sender<Bytes>) {
    // The service's frames are trusted to be as long as they say.
    let mut frames = FrameReader::new(from_service, usize::MAX);
    loop {
        match frames.next().await {
            Ok(Some(Incoming::Frame(body))) => {
                if outgoing.send(body).await.is_err() {
                    // The client's output is gone; dropping `from_service` makes the service's
                    // next write fail, as a broken client stream would have.
                    return;
                }
            }
            Ok(Some(Incoming::Unreadable(problem))) => {
                eprintln!("soba: the JSON-RPC service wrote a frame that does not read back ({problem}); closing the connection's output");
                return;
            }
            Ok(None) | Err(_) => return,
        }
    }
}

/// The single writer of the client's output.
async fn write_frames<W: AsyncWrite>(output: W, mut outgoing_queue: mpsc::Receiver<Bytes>) {
    tokio::pin!(output);
    while let Some(body) = outgoing_queue.recv().await {
        if write_frame(&mut output, body).await.is_err() {
            return;
        }
    }
    // Both producers are done: the client sees the end of the stream, as it did when the
    // service wrote to it directly.
    let _ = output.shutdown().await;
}

async fn write_frame<W: AsyncWrite + Unpin>(output: &mut W, body: Bytes) -> io::Result<()> {
    let header = format!("Content-Length: {}\r\n\r\n", body.len());
    output
        .write_all_buf(&mut Buf::chain(header.as_bytes(), body))
        .await?;
    output.flush().await
}

// ---------------------------------------------------------------------------------------------
// Frames

/// What the next bytes of a stream hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    /// The body of a well-framed message, not yet checked.
    Frame(Bytes),
    /// Bytes that are not a frame; they have been skipped.
    Unreadable(Unreadable),
}

/// Why bytes could not be read as a frame. The message says what was skipped and what a client
/// should send instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// A line where a header belongs that is not `Name: value`.
    NotAHeader,
    /// No empty line within [`MAX_HEADER_BYTES`].
    HeaderTooLong,
    /// A header section without `Content-Length`, so the body's end is unknown.
    MissingContentLength,
    BadContentLength(String),
    DuplicateContentLength,
    UnsupportedContentType(String),
    TooLarge {
        declared: u64,
        limit: usize,
        /// The id of the request, read from the head of the body, so the client can match
        /// the error to what it sent.
        request_id: Option<Value>,
    },
    /// The input ended inside a header or a body.
    EndedInsideFrame,
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const RESYNCED: &str = "the bytes up to the next `Content-Length:` header were skipped";
        const FRAMING: &str = "frame each message as `Content-Length: <byte count>\\r\\n\\r\\n` followed by that many bytes of UTF-8 JSON";
        match self {
            Unreadable::NotAHeader => {
                write!(f, "expected a message header; {RESYNCED}. {FRAMING}")
            }
            Unreadable::HeaderTooLong => write!(
                f,
                "no end of header (an empty line) within {MAX_HEADER_BYTES} bytes; {RESYNCED}. {FRAMING}"
            ),
            Unreadable::MissingContentLength => write!(
                f,
                "the header has no `Content-Length`, so the message's end is unknown; {RESYNCED}. {FRAMING}"
            ),
            Unreadable::BadContentLength(value) => write!(
                f,
                "`Content-Length: {value}` is not a byte count (a non-negative decimal integer); {RESYNCED}. {FRAMING}"
            ),
            Unreadable::DuplicateContentLength => write!(
                f,
                "the header has more than one `Content-Length`; {RESYNCED}. {FRAMING}"
            ),
            Unreadable::UnsupportedContentType(value) => write!(
                f,
                "`Content-Type: {value}` is not supported and the message was skipped; send `application/vscode-jsonrpc; charset=utf-8` or no `Content-Type`"
            ),
            Unreadable::TooLarge { declared, limit, .. } => write!(
                f,
                "`Content-Length: {declared}` is over the limit of {limit} bytes and the message was skipped; send less in one message"
            ),
            Unreadable::EndedInsideFrame => {
                write!(f, "the input ended inside a message")
            }
        }
    }
}

/// Reads LSP base-protocol frames off a byte stream, at most one body at a time in memory.
pub struct FrameReader<R> {
    input: R,
    buffered: BytesMut,
    state: ReadState,
    max_content_length: usize,
    /// The head of an oversized body while it is read.
    oversized_head: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadState {
    Header,
    Body {
        content_length: usize,
    },
    /// Discarding a body whose length is known but which will not be read.
    SkipBody {
        remaining: u64,
    },
    /// Keeping the first [`OVERSIZED_HEAD_BYTES`] of a body over the limit, to find the
    /// request's id, before discarding the rest.
    ReadOversizedHead {
        remaining: u64,
        declared: u64,
    },
    /// Discarding garbage up to the next [`RESYNC_MARKER`].
    Resync,
    Ended,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(input: R, max_content_length: usize) -> Self {
        FrameReader {
            input,
            buffered: BytesMut::new(),
            state: ReadState::Header,
            max_content_length,
            oversized_head: Vec::new(),
        }
    }

    /// The answer to an oversized body whose head has been read.
    fn oversized(&mut self, declared: u64) -> Incoming {
        let request_id = request_id_in_head(&self.oversized_head);
        self.oversized_head = Vec::new();
        Incoming::Unreadable(Unreadable::TooLarge {
            declared,
            limit: self.max_content_length,
            request_id,
        })
    }

    /// The next frame or unreadable stretch; `None` at the end of the input.
    ///
    /// Cancel-safe: all progress lives in `self` between reads.
    pub async fn next(&mut self) -> io::Result<Option<Incoming>> {
        loop {
            if let Some(incoming) = self.take_buffered() {
                return Ok(Some(incoming));
            }
            if self.state == ReadState::Ended {
                return Ok(None);
            }
            self.buffered.reserve(self.read_size());
            if self.input.read_buf(&mut self.buffered).await? == 0 {
                let cut_short = match self.state {
                    ReadState::Header => !self.buffered.is_empty(),
                    ReadState::Body { .. } => true,
                    // Already answered when the skipping began.
                    ReadState::SkipBody { .. } | ReadState::Resync | ReadState::Ended => false,
                    // Not answered yet: it is, with the id if the head held one.
                    ReadState::ReadOversizedHead { declared, .. } => {
                        self.state = ReadState::Ended;
                        self.buffered = BytesMut::new();
                        return Ok(Some(self.oversized(declared)));
                    }
                };
                self.state = ReadState::Ended;
                self.buffered = BytesMut::new();
                if cut_short {
                    return Ok(Some(Incoming::Unreadable(Unreadable::EndedInsideFrame)));
                }
            }
        }
    }

    fn read_size(&self) -> usize {
        match self.state {
            ReadState::Body { content_length } => content_length
                .saturating_sub(self.buffered.len())
                .clamp(MIN_READ, MAX_READ),
            _ => MIN_READ,
        }
    }

    /// Advance through what is buffered until a frame or a problem is found, or more input is
    /// needed.
    fn take_buffered(&mut self) -> Option<Incoming> {
        loop {
            match self.state {
                ReadState::Ended => return None,
                ReadState::Header => match parse_header(&self.buffered, self.max_content_length) {
                    HeaderScan::Incomplete => return None,
                    HeaderScan::NotAHeader(problem) => {
                        // A header may still start after the first byte of the garbage.
                        self.buffered.advance(1);
                        self.state = ReadState::Resync;
                        return Some(Incoming::Unreadable(problem));
                    }
                    HeaderScan::Complete {
                        header_len,
                        framing,
                    } => {
                        self.buffered.advance(header_len);
                        match framing {
                            Framing::Body(content_length) => {
                                self.state = ReadState::Body { content_length };
                            }
                            Framing::Oversized(declared) => {
                                self.oversized_head.clear();
                                self.state = ReadState::ReadOversizedHead {
                                    remaining: declared,
                                    declared,
                                };
                            }
                            Framing::Skip(remaining, problem) => {
                                self.state = ReadState::SkipBody { remaining };
                                return Some(Incoming::Unreadable(problem));
                            }
                            Framing::Unknown(problem) => {
                                self.state = ReadState::Resync;
                                return Some(Incoming::Unreadable(problem));
                            }
                        }
                    }
                },
                ReadState::Body { content_length } => {
                    if self.buffered.len() < content_length {
                        return None;
                    }
                    let body = self.buffered.split_to(content_length).freeze();
                    if self.buffered.capacity() > RETAINED_BUFFER_BYTES {
                        self.buffered = BytesMut::from(&self.buffered[..]);
                    }
                    self.state = ReadState::Header;
                    return Some(Incoming::Frame(body));
                }
                ReadState::ReadOversizedHead {
                    remaining,
                    declared,
                } => {
                    let room = OVERSIZED_HEAD_BYTES - self.oversized_head.len();
                    let taken = (room as u64).min(remaining).min(self.buffered.len() as u64);
                    self.oversized_head
                        .extend_from_slice(&self.buffered[..taken as usize]);
                    self.buffered.advance(taken as usize);
                    let remaining = remaining - taken;
                    if self.oversized_head.len() < OVERSIZED_HEAD_BYTES && remaining > 0 {
                        self.state = ReadState::ReadOversizedHead {
                            remaining,
                            declared,
                        };
                        return None;
                    }
                    self.state = ReadState::SkipBody { remaining };
                    return Some(self.oversized(declared));
                }
                ReadState::SkipBody { remaining } => {
                    let skipped = remaining.min(self.buffered.len() as u64);
                    self.buffered.advance(skipped as usize);
                    if skipped < remaining {
                        self.state = ReadState::SkipBody {
                            remaining: remaining - skipped,
                        };
                        return None;
                    }
                    self.state = ReadState::Header;
                }
                ReadState::Resync => match find_ignoring_case(&self.buffered, RESYNC_MARKER) {
                    Some(at) => {
                        self.buffered.advance(at);
                        self.state = ReadState::Header;
                    }
                    None => {
                        // Keep what could be the start of a marker cut by the read boundary.
                        let keep = self.buffered.len().min(RESYNC_MARKER.len() - 1);
                        self.buffered.advance(self.buffered.len() - keep);
                        return None;
                    }
                },
            }
        }
    }
}

enum HeaderScan {
    Incomplete,
    NotAHeader(Unreadable),
    Complete { header_len: usize, framing: Framing },
}

/// What a complete header says about the body after it.
enum Framing {
    Body(usize),
    /// The body's length is known but it is refused.
    Skip(u64, Unreadable),
    /// The body is longer than the limit: its head is read for the id, the rest discarded.
    Oversized(u64),
    /// The body's length is unknown.
    Unknown(Unreadable),
}

fn parse_header(buffered: &[u8], max_content_length: usize) -> HeaderScan {
    let window = &buffered[..buffered.len().min(MAX_HEADER_BYTES)];
    let end = find(window, b"\r\n\r\n");
    let section = &window[..end.unwrap_or(window.len())];
    let mut fields = Vec::new();
    for piece in section.split_inclusive(|&b| b == b'\n') {
        let line = match piece.strip_suffix(b"\n") {
            Some(line) => match line.strip_suffix(b"\r") {
                Some(line) => line,
                // A bare line feed: not the base protocol's line end.
                None => return HeaderScan::NotAHeader(Unreadable::NotAHeader),
            },
            // The last line of a complete section has its line end in the `\r\n\r\n`.
            None if end.is_some() => piece,
            // A line still coming in.
            None => break,
        };
        match parse_field(line) {
            Some(field) => fields.push(field),
            None => return HeaderScan::NotAHeader(Unreadable::NotAHeader),
        }
    }
    let Some(end) = end else {
        return if buffered.len() >= MAX_HEADER_BYTES {
            HeaderScan::NotAHeader(Unreadable::HeaderTooLong)
        } else {
            HeaderScan::Incomplete
        };
    };

    let mut content_length = None;
    let mut unsupported_type = None;
    for (name, value) in fields {
        if name.eq_ignore_ascii_case(b"content-length") {
            if content_length.is_some() {
                return complete(end, Framing::Unknown(Unreadable::DuplicateContentLength));
            }
            content_length = Some(value);
        } else if name.eq_ignore_ascii_case(b"content-type") && !is_json_rpc_content_type(value) {
            unsupported_type = Some(String::from_utf8_lossy(value).into_owned());
        }
        // Other headers carry nothing this server uses; the base protocol lets them pass.
    }
    let Some(length) = content_length else {
        // Not a frame header: resynchronize from inside it, where garbage glued to a header
        // (`garbageContent-Length: 52`) hides the real one.
        return HeaderScan::NotAHeader(Unreadable::MissingContentLength);
    };
    let Some(declared) = parse_content_length(length) else {
        let shown = String::from_utf8_lossy(&length[..length.len().min(40)]).into_owned();
        return complete(end, Framing::Unknown(Unreadable::BadContentLength(shown)));
    };
    let framing = match (unsupported_type, usize::try_from(declared)) {
        (Some(content_type), _) => {
            Framing::Skip(declared, Unreadable::UnsupportedContentType(content_type))
        }
        (None, Ok(length)) if length <= max_content_length => Framing::Body(length),
        (None, _) => Framing::Oversized(declared),
    };
    complete(end, framing)
}

fn complete(section_end: usize, framing: Framing) -> HeaderScan {
    HeaderScan::Complete {
        header_len: section_end + 4,
        framing,
    }
}

/// `Name: value` with a token name (RFC 9110) and a value free of control characters.
fn parse_field(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = line.iter().position(|&b| b == b':')?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    let is_token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    if name.is_empty() || !name.iter().all(is_token) {
        return None;
    }
    if value.iter().any(|&b| b.is_ascii_control() && b != b'\t') {
        return None;
    }
    Some((name, value.trim_ascii()))
}

fn parse_content_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// The LSP base protocol's type, or plain JSON; in UTF-8, which is also the default when no
/// charset is named.
fn is_json_rpc_content_type(value: &[u8]) -> bool {
    let Ok(value) = std::str::from_utf8(value) else {
        return false;
    };
    let mut parts = value.split(';');
    let media_type = parts.next().unwrap_or_default().trim();
    if !["application/vscode-jsonrpc", "application/json"]
        .iter()
        .any(|t| media_type.eq_ignore_ascii_case(t))
    {
        return false;
    }
    parts.all(|parameter| match parameter.split_once('=') {
        Some((name, charset)) if name.trim().eq_ignore_ascii_case("charset") => {
            let charset = charset.trim().trim_matches('"');
            charset.eq_ignore_ascii_case("utf-8") || charset.eq_ignore_ascii_case("utf8")
        }
        _ => true,
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn find_ignoring_case(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
}

// ---------------------------------------------------------------------------------------------
// Messages

/// What to do with a frame's body.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The service decodes it.
    Forward,
    /// An empty body holds no message; the service skipped these too.
    Ignore,
    Reject(Rejection),
}

/// An error answered by this layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub code: i64,
    pub message: String,
    /// The id of a request that is readable but not valid (a wrong `jsonrpc`, say), so that the
    /// client can match the error to the request it sent; null when no id could be read.
    pub id: Option<Value>,
}

impl Rejection {
    fn response(&self) -> Bytes {
        let response = json!({
            "jsonrpc": "2.0",
            "error": {"code": self.code, "message": self.message},
            "id": self.id.clone().unwrap_or(Value::Null),
        });
        Bytes::from(serde_json::to_vec(&response).expect("a JSON value serializes"))
    }
}

/// tower-lsp-server's message type (private to it) rebuilt from its public parts, the same way:
/// a response first, then a request. A body that deserializes into this is one the service's
/// decoder accepts, so forwarding it cannot end the service's reader.
#[derive(Deserialize)]
#[serde(untagged)]
enum ServiceMessage {
    #[expect(dead_code, reason = "only whether a body deserializes matters")]
    Response(jsonrpc::Response),
    #[expect(dead_code, reason = "only whether a body deserializes matters")]
    Request(jsonrpc::Request),
}

/// Whether a body goes to the service; if not, the error that says why. The codes follow
/// tower-lsp-server's: -32600 when the JSON is well-formed but not a message, -32700 otherwise.
pub fn check_message(body: &[u8]) -> Verdict {
    if body.is_empty() {
        return Verdict::Ignore;
    }
    let text = match std::str::from_utf8(body) {
        Ok(text) => text,
        Err(e) => {
            return Verdict::Reject(Rejection {
                code: code::PARSE_ERROR,
                message: format!(
                    "the message body is not UTF-8 (invalid byte at offset {}); send UTF-8 JSON",
                    e.valid_up_to()
                ),
                id: None,
            })
        }
    };
    // serde_json stops at 128 levels of nesting, so a deep body cannot exhaust the stack.
    match serde_json::from_str::<ServiceMessage>(text) {
        Ok(_) => Verdict::Forward,
        Err(e) if e.is_data() => Verdict::Reject(Rejection {
            code: code::INVALID_REQUEST,
            message: explain_not_a_message(text),
            id: request_id(text),
        }),
        Err(e) => Verdict::Reject(Rejection {
            code: code::PARSE_ERROR,
            message: format!(
                "the message body is not JSON ({e}); send one JSON-RPC 2.0 message object per frame"
            ),
            id: None,
        }),
    }
}

/// The id of a body that reads as a request (an object with a string `method`) and has a valid
/// id. A response's id is never echoed: the client would take the error for the answer to a
/// request of its own.
fn request_id(text: &str) -> Option<Value> {
    let Ok(Value::Object(object)) = serde_json::from_str::<Value>(text) else {
        return None;
    };
    if !object.get("method").is_some_and(Value::is_string) {
        return None;
    }
    echoable_id(object.get("id")?)
}

/// A request id the client can match: a string or an integer.
fn echoable_id(id: &Value) -> Option<Value> {
    match id {
        Value::String(_) => Some(id.clone()),
        Value::Number(n) if n.is_i64() => Some(id.clone()),
        _ => None,
    }
}

/// The id of a request from the first bytes of its body: the top-level `id`, provided a string
/// `method` comes before the body is cut off (a response's id is never echoed, as above).
fn request_id_in_head(head: &[u8]) -> Option<Value> {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};

    #[derive(Default)]
    struct Seen {
        id: Option<Value>,
        method: bool,
    }
    struct TopLevel<'s>(&'s mut Seen);
    impl<'de> Visitor<'de> for TopLevel<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON-RPC message object")
        }
        // Each member is noted as it is read, so what precedes the cut survives the error
        // the cut raises.
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "id" => self.0.id = Some(map.next_value()?),
                    "method" => self.0.method = map.next_value::<Value>()?.is_string(),
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    let mut seen = Seen::default();
    let _ = serde_json::Deserializer::from_slice(head).deserialize_map(TopLevel(&mut seen));
    if !seen.method {
        return None;
    }
    echoable_id(seen.id.as_ref()?)
}

const MESSAGE_SHAPE: &str =
    "send an object with \"jsonrpc\": \"2.0\", a string \"method\", and optionally \"params\" and an \"id\"";

/// Why well-formed JSON is not a JSON-RPC message (called for rejected bodies only).
fn explain_not_a_message(text: &str) -> String {
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(e) => return format!("the message body does not read as JSON ({e})"),
    };
    let object = match value {
        Value::Object(object) => object,
        Value::Array(items) if items.is_empty() => {
            return format!("the message body is an empty array; {MESSAGE_SHAPE}")
        }
        Value::Array(_) => {
            return "the message body is an array (a batch), which this server does not take; send each message in a frame of its own".into()
        }
        other => {
            return format!(
                "the message body is {}, not a message object; {MESSAGE_SHAPE}",
                describe(&other)
            )
        }
    };
    match object.get("jsonrpc") {
        None => return format!("the message has no \"jsonrpc\" member; {MESSAGE_SHAPE}"),
        Some(Value::String(v)) if v == "2.0" => {}
        Some(other) => {
            return format!(
                "\"jsonrpc\" is {}; only \"2.0\" is supported",
                describe(other)
            )
        }
    }
    if let Some(method) = object.get("method").filter(|m| !m.is_string()) {
        return format!("\"method\" is {}; it must be a string", describe(method));
    }
    if let Some(id) = object.get("id") {
        let valid = match id {
            Value::Null | Value::String(_) => true,
            Value::Number(n) => n.is_i64(),
            _ => false,
        };
        if !valid {
            return format!(
                "\"id\" is {}; an id must be a string, null, or an integer within 64 bits",
                describe(id)
            );
        }
    }
    // The members look right on their own; serde names what is still wrong (a repeated member,
    // for one, which the parsed object no longer shows).
    let detail = serde_json::from_str::<jsonrpc::Request>(text)
        .err()
        .map(|e| format!(" ({e})"))
        .unwrap_or_default();
    format!("the message is not a JSON-RPC 2.0 request, notification or response{detail}")
}

fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() <= 40 => format!("the string {value}"),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use std::time::Duration;

    use tokio::io::ReadBuf;

    use super::*;

    fn frame(body: &str) -> Vec<u8> {
        format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    const EXIT: &str = r#"{"jsonrpc":"2.0","method":"exit"}"#;
    const SESSIONS: &str = r#"{"jsonrpc":"2.0","id":1,"method":"soba/sessions","params":{}}"#;

    /// Hands out its bytes `step` at a time.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl Trickle {
        fn new(bytes: Vec<u8>, step: usize) -> Self {
            Trickle { bytes, at: 0, step }
        }
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let end = (self.at + self.step)
                .min(self.bytes.len())
                .min(self.at + buf.remaining());
            buf.put_slice(&self.bytes[self.at..end]);
            self.at = end;
            Poll::Ready(Ok(()))
        }
    }

    /// `declared` bytes of spaces after an oversized header, then a valid frame; nothing held.
    struct Flood {
        header: Vec<u8>,
        spaces: u64,
        trailer: Vec<u8>,
    }

    impl AsyncRead for Flood {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if !self.header.is_empty() {
                let header = std::mem::take(&mut self.header);
                buf.put_slice(&header);
            } else if self.spaces > 0 {
                let n = (buf.remaining() as u64).min(self.spaces);
                buf.put_slice(&vec![b' '; n as usize]);
                self.spaces -= n;
            } else {
                let trailer = std::mem::take(&mut self.trailer);
                buf.put_slice(&trailer);
            }
            Poll::Ready(Ok(()))
        }
    }

    async fn read_all<R: AsyncRead + Unpin>(reader: &mut FrameReader<R>) -> Vec<Incoming> {
        let mut all = Vec::new();
        while let Some(incoming) = reader.next().await.expect("reads") {
            all.push(incoming);
        }
        all
    }

    fn body(text: &str) -> Incoming {
        Incoming::Frame(Bytes::copy_from_slice(text.as_bytes()))
    }

    #[tokio::test]
    async fn a_frame_delivered_one_byte_at_a_time_reads_whole() {
        let mut bytes = frame(SESSIONS);
        bytes.extend(frame(EXIT));
        let mut reader = FrameReader::new(Trickle::new(bytes, 1), MAX_CONTENT_LENGTH);
        assert_eq!(
            read_all(&mut reader).await,
            vec![body(SESSIONS), body(EXIT)]
        );
    }

    #[tokio::test]
    async fn several_frames_in_one_read_all_come_out() {
        let mut bytes = Vec::new();
        for _ in 0..5 {
            bytes.extend(frame(SESSIONS));
        }
        bytes.extend(b"Content-Length: 0\r\n\r\n");
        let mut reader = FrameReader::new(&bytes[..], MAX_CONTENT_LENGTH);
        let mut expected: Vec<_> = (0..5).map(|_| body(SESSIONS)).collect();
        expected.push(body(""));
        assert_eq!(read_all(&mut reader).await, expected);
    }

    #[tokio::test]
    async fn garbage_before_a_header_is_reported_once_and_skipped() {
        for garbage in [
            &b"garbage!!\r\n"[..],
            b"garbage with no line end",
            b"\r\n",
            &[0xff, 0x00, b'\n', b'{'],
        ] {
            for step in [1, 3, 4096] {
                let mut bytes = garbage.to_vec();
                bytes.extend(frame(SESSIONS));
                let mut reader = FrameReader::new(Trickle::new(bytes, step), MAX_CONTENT_LENGTH);
                assert_eq!(
                    read_all(&mut reader).await,
                    vec![Incoming::Unreadable(Unreadable::NotAHeader), body(SESSIONS)],
                    "{:?} in steps of {step}",
                    String::from_utf8_lossy(garbage)
                );
            }
        }
    }

    #[tokio::test]
    async fn a_header_without_a_usable_length_loses_only_its_frame() {
        for (header, problem) in [
            (
                "Content-Length: ten\r\n\r\n{}",
                Unreadable::BadContentLength("ten".into()),
            ),
            (
                "Content-Length: -5\r\n\r\n{}",
                Unreadable::BadContentLength("-5".into()),
            ),
            (
                "Content-Type: application/vscode-jsonrpc\r\n\r\n{}",
                Unreadable::MissingContentLength,
            ),
            (
                "Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
                Unreadable::DuplicateContentLength,
            ),
            (
                "Content-Length: 99999999999999999999999\r\n\r\n{}",
                Unreadable::BadContentLength("99999999999999999999999".into()),
            ),
        ] {
            let mut bytes = header.as_bytes().to_vec();
            bytes.extend(frame(SESSIONS));
            let mut reader = FrameReader::new(&bytes[..], MAX_CONTENT_LENGTH);
            assert_eq!(
                read_all(&mut reader).await,
                vec![Incoming::Unreadable(problem), body(SESSIONS)],
                "{header:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_header_with_no_end_is_garbage_after_the_limit() {
        let mut bytes = vec![b'a'; MAX_HEADER_BYTES + 10];
        bytes.extend(frame(SESSIONS));
        let mut reader = FrameReader::new(&bytes[..], MAX_CONTENT_LENGTH);
        assert_eq!(
            read_all(&mut reader).await,
            vec![
                Incoming::Unreadable(Unreadable::HeaderTooLong),
                body(SESSIONS)
            ]
        );
    }

    /// A frame announcing `declared` bytes whose body starts with `head` (then spaces), over a
    /// limit of 1 KiB, followed by a valid frame.
    fn oversized(head: &str, declared: u64) -> FrameReader<Flood> {
        FrameReader::new(
            Flood {
                header: format!("Content-Length: {declared}\r\n\r\n{head}").into_bytes(),
                spaces: declared - head.len() as u64,
                trailer: frame(SESSIONS),
            },
            1 << 10,
        )
    }

    #[tokio::test]
    async fn an_oversized_body_is_skipped_as_it_streams_past() {
        let (limit, declared) = (1 << 10, 64u64 << 20);
        let mut reader = oversized("", declared);
        assert_eq!(
            reader.next().await.unwrap(),
            Some(Incoming::Unreadable(Unreadable::TooLarge {
                declared,
                limit,
                request_id: None,
            }))
        );
        assert_eq!(reader.next().await.unwrap(), Some(body(SESSIONS)));
        assert!(
            reader.buffered.capacity() < 1 << 20,
            "the skipped body was buffered: {} bytes of capacity",
            reader.buffered.capacity()
        );
        assert_eq!(reader.next().await.unwrap(), None);
    }

    #[tokio::test]
    async fn an_oversized_request_is_answered_under_its_id() {
        let (limit, declared) = (1 << 10, 8u64 << 20);
        let head =
            r#"{"jsonrpc":"2.0","id":7,"method":"soba/session/append","params":{"entries":["#;
        let mut reader = oversized(head, declared);
        assert_eq!(
            reader.next().await.unwrap(),
            Some(Incoming::Unreadable(Unreadable::TooLarge {
                declared,
                limit,
                request_id: Some(json!(7)),
            }))
        );
        assert_eq!(reader.next().await.unwrap(), Some(body(SESSIONS)));
        assert!(reader.oversized_head.capacity() == 0, "the head is let go");
    }

    #[tokio::test]
    async fn input_ending_inside_an_oversized_body_is_still_answered_under_its_id() {
        let head = r#"{"jsonrpc":"2.0","method":"soba/session/append","id":"big","params":{"#;
        let bytes = format!("Content-Length: 5000\r\n\r\n{head}").into_bytes();
        let mut reader = FrameReader::new(Trickle::new(bytes, 7), 100);
        assert_eq!(
            read_all(&mut reader).await,
            [Incoming::Unreadable(Unreadable::TooLarge {
                declared: 5000,
                limit: 100,
                request_id: Some(json!("big")),
            })]
        );
    }

    #[test]
    fn a_request_id_is_read_from_the_head_of_a_body() {
        let id = |head: &str| request_id_in_head(head.as_bytes());
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":3,"method":"m","params":{"a":[1,2"#),
            Some(json!(3))
        );
        assert_eq!(
            id(r#"{"method":"m","params":{},"id":"x","tail":"cut her"#),
            Some(json!("x"))
        );
        assert_eq!(
            id(r#"{"method":"m","id":"with \"escapes\"","params":["#),
            Some(json!("with \"escapes\""))
        );
        // Whole small bodies read the same way.
        assert_eq!(
            id(r#"{"jsonrpc":"2.0","id":-4,"method":"m"}"#),
            Some(json!(-4))
        );
        // Not echoed: a response, a method after the cut, ids a client cannot have sent.
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":3,"result":{"big":"#), None);
        assert_eq!(id(r#"{"id":3,"params":{"entries":["#), None);
        assert_eq!(id(r#"{"id":1.5,"method":"m","params":"#), None);
        assert_eq!(id(r#"{"id":null,"method":"m","params":"#), None);
        assert_eq!(id(r#"{"method":3,"id":1,"params":"#), None);
        assert_eq!(id(r#"{"method":"m","id":"cut in the mid"#), None);
        assert_eq!(id(r#"["#), None);
        assert_eq!(id(""), None);
        assert_eq!(id("\u{ff}not json"), None);
    }

    #[tokio::test]
    async fn header_names_are_case_insensitive() {
        let bytes = format!(
            "content-length: {}\r\nCONTENT-TYPE: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{SESSIONS}",
            SESSIONS.len()
        );
        let mut reader = FrameReader::new(bytes.as_bytes(), MAX_CONTENT_LENGTH);
        assert_eq!(read_all(&mut reader).await, vec![body(SESSIONS)]);
    }

    #[tokio::test]
    async fn json_rpc_content_types_are_accepted_and_others_skipped() {
        for accepted in [
            "application/vscode-jsonrpc; charset=utf-8",
            "application/vscode-jsonrpc; charset=utf8",
            "application/vscode-jsonrpc",
            "application/json; charset=\"UTF-8\"",
        ] {
            let bytes = format!(
                "Content-Length: {}\r\nContent-Type: {accepted}\r\n\r\n{SESSIONS}",
                SESSIONS.len()
            );
            let mut reader = FrameReader::new(bytes.as_bytes(), MAX_CONTENT_LENGTH);
            assert_eq!(
                read_all(&mut reader).await,
                vec![body(SESSIONS)],
                "{accepted}"
            );
        }
        for refused in [
            "text/html",
            "application/vscode-jsonrpc; charset=latin1",
            "this-mime-should-be-ignored; charset=utf8",
        ] {
            let mut bytes = format!(
                "Content-Length: {}\r\nContent-Type: {refused}\r\n\r\n{SESSIONS}",
                SESSIONS.len()
            )
            .into_bytes();
            bytes.extend(frame(EXIT));
            let mut reader = FrameReader::new(&bytes[..], MAX_CONTENT_LENGTH);
            assert_eq!(
                read_all(&mut reader).await,
                vec![
                    Incoming::Unreadable(Unreadable::UnsupportedContentType(refused.into())),
                    body(EXIT)
                ],
                "{refused}"
            );
        }
    }

    #[tokio::test]
    async fn input_ending_inside_a_frame_is_reported() {
        for cut in ["Content-Length: 100\r\n\r\n{\"jsonrpc\"", "Content-Len"] {
            let mut reader = FrameReader::new(cut.as_bytes(), MAX_CONTENT_LENGTH);
            assert_eq!(
                read_all(&mut reader).await,
                vec![Incoming::Unreadable(Unreadable::EndedInsideFrame)],
                "{cut:?}"
            );
        }
        let mut reader = FrameReader::new(&b""[..], MAX_CONTENT_LENGTH);
        assert_eq!(read_all(&mut reader).await, vec![]);
    }

    fn rejected_with(body: &str) -> i64 {
        match check_message(body.as_bytes()) {
            Verdict::Reject(r) => {
                assert!(r.message.len() > 20, "{body}: {}", r.message);
                r.code
            }
            other => panic!("{body}: {other:?}"),
        }
    }

    /// A client matches answers to requests by id: an invalid request whose id can be read gets
    /// its error under that id; anything else, or anything shaped as a response, under null.
    #[test]
    fn an_invalid_request_with_a_readable_id_is_answered_under_it() {
        let id_of = |body: &str| match check_message(body.as_bytes()) {
            Verdict::Reject(r) => r.id,
            other => panic!("{body}: {other:?}"),
        };
        assert_eq!(
            id_of(r#"{"jsonrpc":"1.0","id":8,"method":"soba/sessions"}"#),
            Some(json!(8))
        );
        assert_eq!(
            id_of(r#"{"id":"a","method":"soba/sessions"}"#),
            Some(json!("a"))
        );
        for body in [
            r#"{"jsonrpc":"1.0","id":5,"result":1}"#,
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"soba/sessions"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"soba/sessions"}"#,
            r#"{"jsonrpc":"2.0","id":10,"method":5}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"soba/sessions"}]"#,
            r#"{"jsonrpc":"2.0","id":3,"#,
        ] {
            assert_eq!(id_of(body), None, "{body}");
        }
    }

    #[test]
    fn what_the_service_decodes_is_forwarded() {
        for body in [
            SESSIONS,
            EXIT,
            r#"{"jsonrpc":"2.0","id":"abc","method":"x","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":-3,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":4,"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"x","extra":{"deep":[[[1]]]}}"#,
        ] {
            assert_eq!(check_message(body.as_bytes()), Verdict::Forward, "{body}");
        }
        assert_eq!(check_message(b""), Verdict::Ignore);
    }

    #[test]
    fn unreadable_bodies_are_parse_errors() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let deep_params = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"x","params":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        for body in [
            "hello",
            r#"{"jsonrpc":"2.0","id":1,"#,
            &deep,
            &deep_params,
            r#"{"jsonrpc":"2.0","method":"x"} trailing"#,
        ] {
            assert_eq!(rejected_with(body), code::PARSE_ERROR, "{body:.60}");
        }
        match check_message(b"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}") {
            Verdict::Reject(r) => assert_eq!(r.code, code::PARSE_ERROR),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn json_that_is_not_a_message_is_an_invalid_request_that_says_why() {
        for (body, says) in [
            ("42", "the number 42"),
            (r#""soba/budget""#, "the string"),
            ("[]", "empty array"),
            (r#"[{"jsonrpc":"2.0","method":"x"}]"#, "batch"),
            ("{}", "no \"jsonrpc\""),
            (r#"{"jsonrpc":"1.0","id":8,"method":"x"}"#, "only \"2.0\""),
            (
                r#"{"jsonrpc":"2.0","id":10,"method":5}"#,
                "\"method\" is the number 5",
            ),
            (
                r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#,
                "\"id\" is an object",
            ),
            (
                r#"{"jsonrpc":"2.0","id":[1],"method":"x"}"#,
                "\"id\" is an array",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
                "\"id\" is the number 1.5",
            ),
            (
                r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"x"}"#,
                "within 64 bits",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#,
                "duplicate field `method`",
            ),
        ] {
            assert_eq!(rejected_with(body), code::INVALID_REQUEST, "{body}");
            let Verdict::Reject(r) = check_message(body.as_bytes()) else {
                unreachable!("checked above")
            };
            assert!(r.message.contains(says), "{body}: {}", r.message);
        }
    }

    /// A frame reader over the client's side of a relay: every frame, none unreadable.
    async fn client_frames(output: impl AsyncRead + Unpin) -> Vec<Value> {
        let mut reader = FrameReader::new(output, usize::MAX);
        let mut frames = Vec::new();
        while let Some(incoming) = reader.next().await.expect("reads") {
            match incoming {
                Incoming::Frame(body) => frames.push(serde_json::from_slice(&body).unwrap()),
                Incoming::Unreadable(problem) => {
                    panic!("the client read a broken frame: {problem}")
                }
            }
        }
        frames
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn service_output_and_errors_never_interleave() {
        const SERVICE_FRAMES: usize = 40;
        const BAD_FRAMES: usize = 40;
        let (client, server) = tokio::io::duplex(4 << 10);
        let (server_input, server_output) = tokio::io::split(server);
        let (client_output, mut client_input) = tokio::io::split(client);
        let relayed = tokio::spawn(relay_frames(
            server_input,
            server_output,
            |mut service_input: DuplexStream, mut service_output: DuplexStream| async move {
                // Large frames written in small pieces, so a frame is often half written when
                // an error is queued.
                let body = format!(
                    r#"{{"jsonrpc":"2.0","method":"n","params":"{}"}}"#,
                    "x".repeat(50_000)
                );
                let framed = frame(&body);
                for _ in 0..SERVICE_FRAMES {
                    for piece in framed.chunks(1000) {
                        service_output.write_all(piece).await.unwrap();
                        tokio::task::yield_now().await;
                    }
                }
                let mut rest = Vec::new();
                service_input.read_to_end(&mut rest).await.unwrap();
            },
        ));
        let reading = tokio::spawn(client_frames(client_output));
        for _ in 0..BAD_FRAMES {
            client_input.write_all(&frame("not json")).await.unwrap();
            tokio::task::yield_now().await;
        }
        client_input.shutdown().await.unwrap();
        let frames = tokio::time::timeout(Duration::from_secs(20), reading)
            .await
            .expect("the relay ends after the client closes")
            .unwrap();
        relayed.await.unwrap();
        let errors = frames
            .iter()
            .filter(|f| f["error"]["code"] == -32700)
            .count();
        let notifications = frames.iter().filter(|f| f["method"] == "n").count();
        assert_eq!((notifications, errors), (SERVICE_FRAMES, BAD_FRAMES));
    }

    #[tokio::test]
    async fn the_relay_ends_when_the_service_stops_though_the_client_stays() {
        let (client, server) = tokio::io::duplex(4 << 10);
        let (server_input, server_output) = tokio::io::split(server);
        let relayed = relay_frames(server_input, server_output, |_, _| async {});
        tokio::time::timeout(Duration::from_secs(5), relayed)
            .await
            .expect("the relay ends with the service");
        drop(client);
    }

    #[tokio::test]
    async fn the_service_gets_accepted_frames_verbatim_and_nothing_else() {
        let (client, server) = tokio::io::duplex(64 << 10);
        let (server_input, server_output) = tokio::io::split(server);
        let (client_output, mut client_input) = tokio::io::split(client);
        let (seen_tx, seen_rx) = tokio::sync::oneshot::channel();
        let relayed = tokio::spawn(relay_frames(
            server_input,
            server_output,
            |service_input, _| async move {
                let mut reader = FrameReader::new(service_input, usize::MAX);
                let _ = seen_tx.send(read_all(&mut reader).await);
            },
        ));
        let spaced = r#"{ "jsonrpc" : "2.0", "method" : "x" }"#;
        let mut bytes = frame("{}");
        bytes.extend(b"garbage");
        bytes.extend(format!("content-length: {}\r\n\r\n{spaced}", spaced.len()).as_bytes());
        bytes.extend(frame(""));
        bytes.extend(frame(EXIT));
        client_input.write_all(&bytes).await.unwrap();
        client_input.shutdown().await.unwrap();
        let answers = client_frames(client_output).await;
        relayed.await.unwrap();
        assert_eq!(seen_rx.await.unwrap(), vec![body(spaced), body(EXIT)]);
        let codes: Vec<_> = answers.iter().map(|a| a["error"]["code"].clone()).collect();
        assert_eq!(codes, vec![json!(-32600), json!(-32700)]);
        assert!(answers.iter().all(|a| a["id"].is_null()));
    }
}
