//! The HTTP shell: accept requests on a loopback port, run chat requests through their
//! conversation's session (append what is new, preflight, rewrite to the model input), forward
//! everything to the upstream with the agent's own headers, and pass the answer back as it
//! comes. The user's key travels in those headers; it is never logged nor stored.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{HeaderMap, HeaderName, Method, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use super::conversation::{provider_messages, Conversation};
use super::identity::{self, ConversationId, Registry, Signature};
use super::overflow;
use super::rpc::{ClientSetup, RequestHandler, RpcClient};
use crate::daemon::paths::Paths;
use crate::daemon::protocol::{
    client_method, code, method, RpcError, SummarizeParams, SummarizeResult,
};
use crate::daemon::registry::Daemon;
use crate::wire::message::Reply;
use crate::wire::responses;
use crate::wire::{self, Api, ChatRequest, StreamEnd, StreamTap};
use soba_core::compaction::reasons;
use soba_core::session::view::ModelMessage;

pub(crate) type ProxyBody = BoxBody<Bytes, std::io::Error>;

/// Where the proxy's sessions live.
pub enum DaemonTarget {
    /// The user's shared daemon (started when absent): editors see the proxied sessions.
    Shared {
        paths: Paths,
        /// Arguments for a daemon the proxy starts (`--config FILE`).
        args: Vec<std::ffi::OsString>,
        /// The proxy's config files and keys, handed over on each connection
        /// (`soba/client/hello`); `None` to use the daemon's own.
        hello: Option<crate::daemon::protocol::HelloParams>,
    },
    /// A daemon inside the proxy's own process (`--standalone`, tests).
    InProcess(Arc<Daemon>),
}

/// Who writes the capsules of the proxy's sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxySummarizer {
    /// The upstream the conversation is served by, with the credentials of the request being
    /// served: the conversation's own model, or `model` when given (a cheaper one). A
    /// `summarizer` block in the config still wins.
    Upstream { model: Option<String> },
    /// Never the upstream: the configured summarizer, else the local builder
    /// (`--local-capsules`).
    Local,
}

impl Default for ProxySummarizer {
    fn default() -> Self {
        ProxySummarizer::Upstream { model: None }
    }
}

/// Everything the proxy is told at start.
pub struct ProxyConfig {
    /// Base URL of the provider API, e.g. `https://api.openai.com`.
    pub upstream: reqwest::Url,
    /// Workspace the sessions belong to.
    pub workspace: String,
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u64>,
    /// Who writes capsules when the config names no summarizer.
    pub summarizer: ProxySummarizer,
    pub daemon: DaemonTarget,
    /// Where request lines go (stderr from the CLI). Never given headers or bodies.
    pub log: Arc<dyn Fn(&str) + Send + Sync>,
    /// Conversations remembered at once: past it, the one used least recently that no request
    /// holds is forgotten (its session log stays; see [`Proxy::claimed`]).
    pub max_conversations: usize,
}

/// Conversations a proxy remembers by default. Each costs a few dozen bytes a message (ids and
/// fingerprints, never the messages), so this bounds a proxy left running for months at a few
/// megabytes for typical conversations.
pub const DEFAULT_MAX_CONVERSATIONS: usize = 256;

/// A conversation and the daemon connection it was last opened on; `conv` is `None` until the
/// first request assigned to it opens its session.
#[derive(Default)]
struct Live {
    conv: Option<Conversation>,
    generation: u64,
}

impl Live {
    fn conv(&self) -> &Conversation {
        self.conv.as_ref().expect("opened before use")
    }
}

/// A request's hold on its conversation in the registry: in flight until dropped.
struct Claim {
    registry: Arc<std::sync::Mutex<Registry>>,
    id: ConversationId,
}

impl Claim {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.registry().finished(self.id);
    }
}

/// The upstream and credentials of a request being served, lent to the compaction it starts
/// (`soba/summarize`) and held in memory only while it is served.
struct Lent {
    api: Api,
    url: reqwest::Url,
    headers: HeaderMap,
    model: Option<String>,
    /// The served request limits its output with `max_completion_tokens` (OpenAI's reasoning
    /// models refuse `max_tokens`): the summarization request does the same.
    max_completion_tokens: bool,
}

type LentMap = Arc<std::sync::Mutex<HashMap<String, Lent>>>;

/// Takes a session's lent credentials back when the request that lent them is done.
struct Lending {
    lent: LentMap,
    session: String,
}

impl Drop for Lending {
    fn drop(&mut self) {
        self.lent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.session);
    }
}

pub struct Proxy {
    config: ProxyConfig,
    http: reqwest::Client,
    lent: LentMap,
    link: Mutex<Option<(Arc<RpcClient>, u64)>>,
    /// Which conversation each request belongs to ([`identity`]); held only briefly, apart
    /// from the conversations, which a request holds while its reply streams.
    /// Responses API replies are known in it by their response id too ([`Registry::name`]),
    /// which a later request's `previous_response_id` names.
    registry: Arc<std::sync::Mutex<Registry>>,
    conversations: std::sync::Mutex<Remembered>,
}

/// The conversations the proxy remembers, each with when a request last claimed it.
#[derive(Default)]
struct Remembered {
    by_id: HashMap<ConversationId, (Arc<Mutex<Live>>, u64)>,
    clock: u64,
}

impl Remembered {
    /// The conversation `id`, claimed now.
    fn claim(&mut self, id: ConversationId) -> Arc<Mutex<Live>> {
        self.clock += 1;
        let clock = self.clock;
        let (live, used) = self.by_id.entry(id).or_default();
        *used = clock;
        live.clone()
    }

    /// Forget the least recently claimed conversations no request holds until at most `max`
    /// remain; the ids forgotten.
    fn bound(&mut self, max: usize) -> Vec<ConversationId> {
        let mut forgotten = Vec::new();
        while self.by_id.len() > max {
            let idle = self
                .by_id
                .iter()
                .filter(|(_, (live, _))| Arc::strong_count(live) == 1)
                .min_by_key(|(_, (_, used))| *used)
                .map(|(id, _)| *id);
            let Some(id) = idle else { break };
            self.by_id.remove(&id);
            forgotten.push(id);
        }
        forgotten
    }
}

/// Headers that belong to one connection, not to the request (RFC 9110 §7.6.1), and those the
/// proxy recomputes.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "trailers"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
    )
}

/// The request headers that go upstream. For a rewritten chat request the body must be read,
/// so the upstream is asked for it uncompressed.
pub fn upstream_headers(headers: &HeaderMap, rewritten: bool) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if is_hop_by_hop(name)
            || name == identity::SESSION_HEADER
            || (rewritten && name == http::header::ACCEPT_ENCODING)
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// The headers of a served request that its summarization request carries: those that
/// authenticate it or pick the API's version and account (`authorization`, `x-api-key`,
/// `api-key`, a gateway's `*-authorization` or `*-key` header, `anthropic-version`,
/// `anthropic-beta`, `openai-organization`, `openai-project`). The agent's own (`user-agent`,
/// `x-app`, SDK telemetry, custom ones) stay with the agent's requests.
pub fn summarizer_headers(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in upstream_headers(headers, true).iter() {
        let n = name.as_str();
        let authenticates = n == "authorization"
            || n.ends_with("-authorization")
            || n.ends_with("api-key")
            || n.ends_with("-key")
            || n.ends_with("-token");
        let picks_the_api = n.starts_with("anthropic-")
            || n == "openai-organization"
            || n == "openai-project"
            || n == "openai-beta";
        if authenticates || picks_the_api {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

fn response_headers(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if !is_hop_by_hop(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// The upstream URL for an incoming path: the base URL's path, then the request's, without
/// repeating a `/v1` both carry. The base URL's query (Azure's `api-version`, a gateway's key)
/// comes first, then the request's parameters that it does not name.
pub fn upstream_url(base: &reqwest::Url, path_and_query: &str) -> reqwest::Url {
    let mut url = base.clone();
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    let base_path = base.path().trim_end_matches('/');
    let path = match path.strip_prefix("/v1") {
        Some(rest) if base_path.ends_with("/v1") && (rest.is_empty() || rest.starts_with('/')) => {
            rest
        }
        _ => path,
    };
    url.set_path(&format!("{base_path}{path}"));
    let query = match (base.query().filter(|q| !q.is_empty()), query) {
        (Some(b), Some(q)) => {
            let named: Vec<String> = base.query_pairs().map(|(k, _)| k.into_owned()).collect();
            let extra: Vec<&str> = q
                .split('&')
                .filter(|p| {
                    let name = p.split('=').next().unwrap_or("");
                    !p.is_empty() && !named.iter().any(|n| n == name)
                })
                .collect();
            Some(if extra.is_empty() {
                b.to_string()
            } else {
                format!("{b}&{}", extra.join("&"))
            })
        }
        (Some(b), None) => Some(b.to_string()),
        (None, q) => q.map(str::to_string),
    };
    url.set_query(query.as_deref());
    url
}

/// Refuse an address other machines can reach unless the user asked for it: whoever reaches
/// the proxy spends the key the agent sends through it. `listen` is what the user gave (a host
/// name such as `localhost` is fine when every address it resolves to is loopback); `addrs`
/// what it resolved to.
pub fn check_listen(listen: &str, addrs: &[SocketAddr], allow_remote: bool) -> anyhow::Result<()> {
    if allow_remote {
        return Ok(());
    }
    if let Some(remote) = addrs.iter().find(|a| !a.ip().is_loopback()) {
        let shown = if remote.to_string() == listen {
            listen.to_string()
        } else {
            format!("{listen} ({remote})")
        };
        anyhow::bail!(
            "refusing to listen on {shown}: other machines could send requests through the proxy with your API key; listen on 127.0.0.1 (the default) or localhost, or pass --allow-remote"
        )
    }
    Ok(())
}

pub(crate) fn full(bytes: impl Into<Bytes>) -> ProxyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

fn json_response(status: StatusCode, body: &Value) -> Response<ProxyBody> {
    let mut r = Response::new(full(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

/// An error of the proxy itself, in the provider's shape.
fn proxy_error(api: Api, status: StatusCode, kind: &str, message: &str) -> Response<ProxyBody> {
    json_response(status, &wire::error_body(api, kind, message))
}

/// The budget could not be met even after compaction: answered as the provider answers a
/// prompt that is too long, so the agent's own recovery runs.
/// Returns the answer and the reason for the request line.
fn too_long(api: Api, e: &RpcError) -> (Response<ProxyBody>, String) {
    let figure = |key: &str| {
        e.data
            .as_ref()
            .and_then(|d| d.pointer(&format!("/compaction/{key}")))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    // What the history still holds: after the compaction that ran, else as it came.
    let tokens = Some(figure("tokensAfter"))
        .filter(|&t| t > 0)
        .unwrap_or_else(|| figure("tokensBefore"));
    let hard_limit = figure("hardLimit");
    // A refusal that already names the window it needs (the fixed part alone is too large)
    // is passed on as it is.
    let named = e.message.contains(reasons::LARGER_WINDOW);
    let detail = match smallest_window(figure("contextWindow"), hard_limit, tokens) {
        Some(w) if !named => format!("{}; {}", e.message, reasons::larger_window(w, "it")),
        _ => e.message.clone(),
    };
    let why = format!("too long: {tokens} tokens > {hard_limit}: {detail}");
    (
        json_response(
            StatusCode::BAD_REQUEST,
            &wire::overflow_body(api, tokens, hard_limit, &detail),
        ),
        why,
    )
}

/// The smallest context window, rounded up to a thousand tokens, whose hard limit holds
/// `tokens`: what the window sets aside beyond the hard limit (output and reserve) stays.
fn smallest_window(context_window: u64, hard_limit: u64, tokens: u64) -> Option<u64> {
    if context_window == 0 || hard_limit == 0 || tokens <= hard_limit {
        return None;
    }
    let set_aside = context_window.saturating_sub(hard_limit);
    Some((tokens + set_aside).div_ceil(1000) * 1000)
}

fn daemon_error(api: Api, e: &RpcError) -> Response<ProxyBody> {
    proxy_error(
        api,
        StatusCode::BAD_GATEWAY,
        "api_error",
        &format!("soba proxy: the SOBA daemon failed: {}", e.message),
    )
}

/// What one chat request did, for the request line.
#[derive(Default)]
struct Note {
    session: String,
    sent: usize,
    received: usize,
    compaction: Option<String>,
    /// What a context overflow from the upstream led to.
    overflow: Option<String>,
    /// Why a whole answer's reply was not recorded.
    unrecorded: Option<&'static str>,
    /// Why the proxy answered the request itself with an error.
    refused: Option<String>,
    /// A streamed answer's line is written when the stream ends, saying how it ended.
    stream_line: Option<StreamLine>,
    /// The provider holds the history the request continues: what SOBA did instead of
    /// compacting.
    held_upstream: Option<&'static str>,
}

/// The request line of a streamed answer: the part before where the stream's end is told,
/// and the part after.
type StreamLine = tokio::sync::oneshot::Sender<(String, String)>;

impl Proxy {
    pub fn new(config: ProxyConfig) -> anyhow::Result<Arc<Proxy>> {
        let http = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(30))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Arc::new(Proxy {
            config,
            http,
            lent: LentMap::default(),
            link: Mutex::new(None),
            registry: Arc::default(),
            conversations: std::sync::Mutex::default(),
        }))
    }

    /// The daemon connection, made (again) when there is none or the last one closed.
    async fn rpc(&self) -> Result<(Arc<RpcClient>, u64), RpcError> {
        let mut link = self.link.lock().await;
        if let Some((c, g)) = link.as_ref() {
            if !c.is_closed() {
                return Ok((c.clone(), *g));
            }
        }
        let generation = link.as_ref().map_or(0, |(_, g)| g + 1);
        let client = match &self.config.daemon {
            DaemonTarget::InProcess(daemon) => {
                let (ours, theirs) = tokio::io::duplex(1 << 20);
                let (sr, sw) = tokio::io::split(theirs);
                tokio::spawn(crate::daemon::server::serve_connection(
                    daemon.clone(),
                    sr,
                    sw,
                ));
                let (cr, cw) = tokio::io::split(ours);
                RpcClient::connect_with(cr, cw, self.client_setup()).await?
            }
            DaemonTarget::Shared { paths, args, hello } => {
                let withheld: Vec<&str> = hello
                    .iter()
                    .flat_map(|h| h.env.keys().map(String::as_str))
                    .collect();
                let start = || crate::daemon::socket::spawn_daemon_process(paths, args, &withheld);
                let mut stream = crate::daemon::socket::connect_or_start(
                    paths,
                    start,
                    crate::daemon::socket::START_TIMEOUT,
                )
                .await
                .map_err(|e| RpcError::internal(format!("{e:#}")))?;
                if let Some(hello) = hello {
                    let refused = crate::daemon::socket::send_hello(&mut stream, hello)
                        .await
                        .map_err(|e| RpcError::internal(format!("{e:#}")))?;
                    if let Some(w) = refused {
                        (self.config.log)(&format!("soba proxy: warning: {w}"));
                    }
                }
                let (r, w) = stream.into_split();
                RpcClient::connect_with(r, w, self.client_setup()).await?
            }
        };
        let client = Arc::new(client);
        *link = Some((client.clone(), generation));
        Ok((client, generation))
    }

    /// The offer to summarize with the upstream, and the handler of the daemon's
    /// `soba/summarize` requests; none with `--local-capsules`.
    fn client_setup(&self) -> ClientSetup {
        let ProxySummarizer::Upstream { model } = &self.config.summarizer else {
            return ClientSetup::default();
        };
        let mut offer = json!({});
        if let Some(m) = model {
            offer["model"] = json!(m);
            // Sized for the summarization model when the catalog knows it; else for the
            // conversation's model.
            if let Some(known) = soba_core::config::catalog_lookup(m) {
                offer["contextWindow"] = json!(known.context_window);
            }
        }
        let (lent, http) = (self.lent.clone(), self.http.clone());
        let handler: RequestHandler = Arc::new(move |method, params, cancel| {
            if method != client_method::SUMMARIZE {
                return None;
            }
            let (lent, http) = (lent.clone(), http.clone());
            Some(Box::pin(async move {
                summarize_upstream(&lent, &http, params, cancel).await
            }))
        });
        ClientSetup {
            summarize: Some(offer),
            handler: Some(handler),
        }
    }

    /// Lend the request's upstream and credentials to a compaction of `session` while the
    /// returned guard lives.
    fn lend(
        &self,
        session: &str,
        parts: &http::request::Parts,
        chat: &ChatRequest,
    ) -> Option<Lending> {
        let ProxySummarizer::Upstream { model } = &self.config.summarizer else {
            return None;
        };
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut headers = summarizer_headers(&parts.headers);
        for value in headers.values_mut() {
            value.set_sensitive(true);
        }
        let lent = Lent {
            api: chat.api,
            url: upstream_url(&self.config.upstream, path),
            headers,
            model: model.clone().or_else(|| chat.model.clone()),
            max_completion_tokens: chat.body.contains_key("max_completion_tokens"),
        };
        self.lent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session.to_string(), lent);
        Some(Lending {
            lent: self.lent.clone(),
            session: session.to_string(),
        })
    }

    /// Write a line to the proxy's log.
    pub(crate) fn log(&self, line: &str) {
        (self.config.log)(line)
    }

    /// Handle one request whose body has been read (within the limits of
    /// [`super::service`]).
    pub(crate) async fn handle(
        self: Arc<Self>,
        parts: http::request::Parts,
        body: Bytes,
        started: Instant,
    ) -> Response<ProxyBody> {
        let path_and_query = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let api = (parts.method == Method::POST)
            .then(|| Api::for_path(parts.uri.path()))
            .flatten();
        let mut note = Note::default();
        let response = match api {
            Some(api) => match ChatRequest::parse(api, &body) {
                Ok(chat)
                    if api == Api::OpenAiResponses
                        && responses::history_held_upstream(&chat.body) =>
                {
                    self.continue_held(&parts, chat, body.clone(), &mut note)
                        .await
                }
                Ok(chat) => self.chat(&parts, chat, &mut note).await,
                Err(e) => {
                    note.refused = Some(format!("not a request SOBA can read: {e}"));
                    proxy_error(
                        api,
                        StatusCode::BAD_REQUEST,
                        "invalid_request_error",
                        &format!("soba proxy: {e}"),
                    )
                }
            },
            None => {
                self.pass_through(&parts, &path_and_query, body, &mut note)
                    .await
            }
        };
        let head = format!(
            "soba proxy: {} {} → {} in {} ms",
            parts.method,
            parts.uri.path(),
            response.status().as_u16(),
            started.elapsed().as_millis()
        );
        let mut tail = String::new();
        if let Some(why) = &note.refused {
            tail.push_str(&format!(", refused: {why}"));
        }
        if let Some(why) = note.unrecorded {
            tail.push_str(&format!(", reply not recorded: {why}"));
        }
        if !note.session.is_empty() {
            tail.push_str(&format!(
                " (session {}, {} messages in, {} sent",
                note.session, note.received, note.sent
            ));
            if let Some(c) = &note.compaction {
                tail.push_str(&format!(", compaction {c}"));
            }
            if let Some(o) = &note.overflow {
                tail.push_str(&format!(", {o}"));
            }
            tail.push(')');
        }
        if let Some(held) = note.held_upstream {
            tail.push_str(&format!(" ({held})"));
        }
        match note.stream_line.take() {
            Some(stream) => {
                // Written by the stream when it ends; a stream already gone has nothing to say.
                let _ = stream.send((head, tail));
            }
            None => (self.config.log)(&format!("{head}{tail}")),
        }
        response
    }

    async fn send_upstream(
        &self,
        parts: &http::request::Parts,
        path_and_query: &str,
        body: Bytes,
        rewritten: bool,
    ) -> Result<reqwest::Response, Response<ProxyBody>> {
        let url = upstream_url(&self.config.upstream, path_and_query);
        let mut headers = upstream_headers(&parts.headers, rewritten);
        if rewritten {
            headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
        }
        self.http
            .request(parts.method.clone(), url)
            .headers(headers)
            .body(body)
            .send()
            .await
            .map_err(|e| {
                json_response(
                    StatusCode::BAD_GATEWAY,
                    &json!({"error": {"message": format!("soba proxy: the upstream {} cannot be reached: {}", shown_url(&self.config.upstream), without_url(e)), "type": "api_error"}}),
                )
            })
    }

    async fn pass_through(
        &self,
        parts: &http::request::Parts,
        path_and_query: &str,
        body: Bytes,
        note: &mut Note,
    ) -> Response<ProxyBody> {
        match self.send_upstream(parts, path_and_query, body, false).await {
            Ok(up) => {
                let (response, line) = stream_back(up, None, self.config.log.clone());
                note.stream_line = Some(line);
                response
            }
            Err(r) => r,
        }
    }

    /// The conversation a request belongs to ([`identity`]), claimed until the request is done.
    fn claim(&self, sig: &Signature, name: Option<&str>) -> (Claim, Arc<Mutex<Live>>) {
        let id = self
            .registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .assign(sig, name)
            .id;
        self.claimed(id)
    }

    /// The conversation of a Responses request that continues response `response_id`
    /// (`previous_response_id`), claimed until the request is done: the one `X-Soba-Session`
    /// names when given, else the one whose reply that response was. `None`: this proxy
    /// forwarded no such response.
    fn claim_continued(
        &self,
        sig: &Signature,
        name: Option<&str>,
        response_id: Option<&str>,
    ) -> Option<(Claim, Arc<Mutex<Live>>)> {
        let id = {
            let mut registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
            let name = match name {
                Some(n) => n,
                None => {
                    let r = response_id?;
                    registry.lookup(Api::OpenAiResponses, r)?;
                    r
                }
            };
            registry.assign(sig, Some(name)).id
        };
        Some(self.claimed(id))
    }

    /// Claim conversation `id`. A proxy left running must not grow with every conversation it
    /// ever saw: past `max_conversations`, the least recently used idle ones are forgotten here
    /// and in the registry. Their sessions stay in their logs; a forgotten conversation that
    /// comes back is not recognized and starts a new session (its history is appended to it
    /// again and compacted as any long history is).
    fn claimed(&self, id: ConversationId) -> (Claim, Arc<Mutex<Live>>) {
        let (live, forgotten) = {
            let mut remembered = self.conversations.lock().unwrap_or_else(|p| p.into_inner());
            let live = remembered.claim(id);
            (live, remembered.bound(self.config.max_conversations.max(1)))
        };
        if !forgotten.is_empty() {
            let mut registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
            for id in forgotten {
                registry.forget(id);
            }
        }
        let claim = Claim {
            registry: self.registry.clone(),
            id,
        };
        (claim, live)
    }

    /// Open the conversation's session on the current daemon connection: a new one the first
    /// time and when `fresh` (its history started over), the same one again after the daemon
    /// connection was made anew (loaded from its log).
    async fn open(
        &self,
        chat: &ChatRequest,
        rpc: &RpcClient,
        generation: u64,
        live: &mut Live,
        fresh: bool,
    ) -> Result<(), RpcError> {
        if let Some(conv) = live.conv.as_ref().filter(|_| !fresh) {
            if live.generation != generation {
                rpc.request(
                    method::SESSION_OPEN,
                    json!({"workspace": self.config.workspace, "sessionId": conv.session_id, "create": false}),
                )
                .await?;
                live.generation = generation;
            }
            return Ok(());
        }
        let opened = rpc
            .request(
                method::SESSION_OPEN,
                json!({"workspace": self.config.workspace, "create": true, "model": {
                    "name": chat.model,
                    "contextWindow": self.config.context_window,
                    "maxOutputTokens": self.config.max_output_tokens,
                }}),
            )
            .await?;
        let id = opened
            .get("sessionId")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::internal("soba/session/open answered without a sessionId"))?
            .to_string();
        live.conv = Some(Conversation::new(id));
        live.generation = generation;
        Ok(())
    }

    /// Bring the session in step with the request; the model input to send.
    async fn sync(
        &self,
        chat: &ChatRequest,
        rpc: &RpcClient,
        conv: &mut Conversation,
    ) -> Result<Option<Value>, RpcError> {
        let plan = conv.plan(&chat.messages);
        if plan.restart {
            return Ok(None);
        }
        let session = conv.session_id.clone();
        if let Some(to) = &plan.rewind_to {
            rpc.request(method::REWIND, json!({"sessionId": session, "entryId": to}))
                .await?;
        }
        let mut entries = Vec::new();
        let setting = conv.overhead_change(&chat.system, chat.tools.as_deref());
        if let Some(s) = &setting {
            entries.push(s.clone());
        }
        let new = &chat.messages[plan.append_from..];
        for m in new {
            entries.extend(m.entries.iter().cloned());
        }
        let mut appended = Vec::with_capacity(new.len());
        if !entries.is_empty() {
            let result = rpc
                .request(
                    method::SESSION_APPEND,
                    json!({"sessionId": session, "entries": entries}),
                )
                .await?;
            let mut ids = result
                .get("entryIds")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|v| v.as_str().map(str::to_string));
            if setting.is_some() {
                ids.next();
                conv.overhead_recorded(&chat.system, chat.tools.as_deref());
            }
            for m in new {
                appended.push(ids.by_ref().take(m.entries.len()).collect());
            }
        }
        conv.applied(&chat.messages, plan.append_from, appended);
        let params = preflight_params(&session, conv, chat);
        let input = rpc.request(method::PREFLIGHT, params).await?;
        Ok(Some(input))
    }

    fn upstream_body(
        &self,
        chat: &ChatRequest,
        conv: &Conversation,
        input: &Value,
    ) -> (Bytes, usize) {
        let messages: Vec<ModelMessage> = input
            .get("messages")
            .and_then(|m| Vec::<ModelMessage>::deserialize(m).ok())
            .unwrap_or_default();
        let omitted: Vec<usize> = input
            .get("omitted")
            .and_then(|l| Vec::<usize>::deserialize(l).ok())
            .unwrap_or_default();
        let outgoing =
            provider_messages(chat.api, conv.compose(&messages, &omitted, &chat.messages));
        let n = outgoing.len();
        (Bytes::from(chat.with_messages(outgoing).to_string()), n)
    }

    async fn chat(
        self: &Arc<Self>,
        parts: &http::request::Parts,
        chat: ChatRequest,
        note: &mut Note,
    ) -> Response<ProxyBody> {
        let api = chat.api;
        note.received = chat.messages.len();
        let name = match identity::session_header(parts.headers.get(identity::SESSION_HEADER)) {
            Ok(n) => n,
            Err(e) => {
                note.refused = Some(e.clone());
                return proxy_error(
                    api,
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    &format!("soba proxy: {e}"),
                );
            }
        };
        let (rpc, generation) = match self.rpc().await {
            Ok(c) => c,
            Err(e) => return daemon_error(api, &e),
        };
        let sig = Signature::of(&chat);
        let (claim, live) = self.claim(&sig, name.as_deref());
        let mut restart = false;
        let mut lending: Option<Lending> = None;
        let (live, input) = loop {
            let mut guard = live.clone().lock_owned().await;
            if let Err(e) = self
                .open(&chat, &rpc, generation, &mut guard, restart)
                .await
            {
                return daemon_error(api, &e);
            }
            // A restarted conversation's earlier session gives its credentials back first.
            drop(lending.take());
            lending = self.lend(&guard.conv().session_id, parts, &chat);
            let conv = guard.conv.as_mut().expect("opened above");
            match self.sync(&chat, &rpc, conv).await {
                Ok(Some(input)) => break (guard, input),
                Ok(None) if !restart => restart = true,
                Ok(None) => {
                    return daemon_error(
                        api,
                        &RpcError::internal("the conversation could not be matched"),
                    )
                }
                Err(e) if e.code == code::BUDGET_EXCEEDED => {
                    note.session = conv.session_id.clone();
                    let (response, why) = too_long(api, &e);
                    note.refused = Some(why);
                    return response;
                }
                Err(e) => return daemon_error(api, &e),
            }
        };
        claim.registry().synced(claim.id, &sig);
        note.session = live.conv().session_id.clone();
        note.compaction = compaction_outcome(&input);
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let (body, sent) = self.upstream_body(&chat, live.conv(), &input);
        note.sent = sent;
        let mut up = match self.send_upstream(parts, &path, body, true).await {
            Ok(up) => up,
            Err(r) => return r,
        };
        if !up.status().is_success() {
            let status = up.status();
            let headers = up.headers().clone();
            let bytes = up.bytes().await.unwrap_or_default();
            let Some(figures) = overflow::parse(status.as_u16(), &bytes) else {
                return buffered(status, &headers, bytes);
            };
            // The provider counted more than SOBA did: learn its window, recover once, retry.
            let session = live.conv().session_id.clone();
            let input = match recover_from_overflow(
                &rpc,
                &session,
                figures,
                preflight_params(&session, live.conv(), &chat),
            )
            .await
            {
                Ok((compaction, input)) => {
                    note.compaction = Some(compaction);
                    input
                }
                // No recovery possible: the agent gets the provider's own answer.
                Err(why) => {
                    note.overflow = Some(why);
                    return buffered(status, &headers, bytes);
                }
            };
            note.overflow = Some("retried after overflow".into());
            let (body, sent) = self.upstream_body(&chat, live.conv(), &input);
            note.sent = sent;
            up = match self.send_upstream(parts, &path, body, true).await {
                Ok(up) => up,
                Err(r) => return r,
            };
            if !up.status().is_success() {
                let status = up.status();
                let headers = up.headers().clone();
                let bytes = up.bytes().await.unwrap_or_default();
                if let Some(figures) = overflow::parse(status.as_u16(), &bytes) {
                    // The turn's one retry is spent; what the provider said still lowers the
                    // window for the turns after it.
                    let preflight = preflight_params(&session, live.conv(), &chat);
                    let why = recover_from_overflow(&rpc, &session, figures, preflight)
                        .await
                        .err()
                        .unwrap_or_default();
                    note.overflow = Some(format!(
                        "retried after overflow; the retry overflowed too ({why})"
                    ));
                }
                return buffered(status, &headers, bytes);
            }
        }
        // Compactions run at preflight and overflow only; the credentials go back now.
        drop(lending);
        let recorder = Recorder {
            rpc,
            live,
            api,
            claim,
            named: false,
        };
        self.deliver(up, recorder, note).await
    }

    /// A Responses request whose earlier history the provider holds (`previous_response_id`,
    /// `conversation`). SOBA cannot compact what it is not sent, so the request goes upstream
    /// as it came. When it continues a response this proxy forwarded (or `X-Soba-Session`
    /// names a conversation that holds it), its items and the reply are recorded in that
    /// conversation's session, so the session and its budget follow the conversation; the
    /// model input is the provider's to manage.
    async fn continue_held(
        self: &Arc<Self>,
        parts: &http::request::Parts,
        chat: ChatRequest,
        body: Bytes,
        note: &mut Note,
    ) -> Response<ProxyBody> {
        let api = chat.api;
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        note.received = chat.messages.len();
        note.sent = chat.messages.len();
        let name = match identity::session_header(parts.headers.get(identity::SESSION_HEADER)) {
            Ok(n) => n,
            Err(e) => {
                note.refused = Some(e.clone());
                return proxy_error(
                    api,
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    &format!("soba proxy: {e}"),
                );
            }
        };
        let previous = responses::previous_response_id(&chat.body);
        let sig = Signature::of(&chat);
        let Some((claim, live)) = self.claim_continued(&sig, name.as_deref(), previous) else {
            note.held_upstream = Some("the provider holds the history, which this proxy did not forward: passed through, not recorded");
            return self.pass_through(parts, &path, body, note).await;
        };
        let (rpc, generation) = match self.rpc().await {
            Ok(c) => c,
            Err(e) => return daemon_error(api, &e),
        };
        let mut guard = live.lock_owned().await;
        let plan = guard
            .conv
            .as_ref()
            .zip(previous)
            .and_then(|(conv, id)| conv.continuation(id));
        let Some(plan) = plan else {
            note.held_upstream = Some("previous_response_id names a reply whose history was since replaced, or that this conversation never recorded: passed through, not recorded");
            return self.pass_through(parts, &path, body, note).await;
        };
        if let Err(e) = self
            .record_continuation(&chat, &rpc, generation, &mut guard, plan.clone())
            .await
        {
            return daemon_error(api, &e);
        }
        claim.registry().continued(claim.id, plan.keep, &sig);
        note.session = guard.conv().session_id.clone();
        note.held_upstream =
            Some("previous_response_id: the provider holds the history; recorded, not compacted");
        let up = match self.send_upstream(parts, &path, body, true).await {
            Ok(up) => up,
            Err(r) => return r,
        };
        if !up.status().is_success() {
            // An overflow cannot be recovered from here: the history is the provider's.
            let status = up.status();
            let headers = up.headers().clone();
            let bytes = up.bytes().await.unwrap_or_default();
            return buffered(status, &headers, bytes);
        }
        let recorder = Recorder {
            rpc,
            live: guard,
            api,
            claim,
            named: false,
        };
        self.deliver(up, recorder, note).await
    }

    /// Append a continuing request's items to its conversation's session after the response
    /// it continues.
    async fn record_continuation(
        &self,
        chat: &ChatRequest,
        rpc: &RpcClient,
        generation: u64,
        live: &mut Live,
        plan: super::conversation::Continuation,
    ) -> Result<(), RpcError> {
        let session = live.conv().session_id.clone();
        if live.generation != generation {
            // A new daemon connection: the session is loaded again from its log.
            rpc.request(
                method::SESSION_OPEN,
                json!({"workspace": self.config.workspace, "sessionId": session, "create": false}),
            )
            .await?;
            live.generation = generation;
        }
        if let Some(to) = &plan.rewind_to {
            rpc.request(method::REWIND, json!({"sessionId": session, "entryId": to}))
                .await?;
        }
        let conv = live.conv.as_mut().expect("checked by the caller");
        let setting = conv.overhead_change(&chat.system, chat.tools.as_deref());
        let entries: Vec<Value> = setting
            .iter()
            .cloned()
            .chain(chat.messages.iter().flat_map(|m| m.entries.iter().cloned()))
            .collect();
        let mut appended = Vec::with_capacity(chat.messages.len());
        if !entries.is_empty() {
            let result = rpc
                .request(
                    method::SESSION_APPEND,
                    json!({"sessionId": session, "entries": entries}),
                )
                .await?;
            let mut ids = result
                .get("entryIds")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|v| v.as_str().map(str::to_string));
            if setting.is_some() {
                ids.next();
                conv.overhead_recorded(&chat.system, chat.tools.as_deref());
            }
            for m in &chat.messages {
                appended.push(ids.by_ref().take(m.entries.len()).collect());
            }
        }
        conv.continued(plan.keep, &chat.messages, appended);
        Ok(())
    }

    /// The upstream's successful answer, passed back to the agent and recorded in the session
    /// once the agent has it (a streamed one once it has ended whole).
    async fn deliver(
        &self,
        up: reqwest::Response,
        recorder: Recorder,
        note: &mut Note,
    ) -> Response<ProxyBody> {
        let api = recorder.api;
        let is_stream = up
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if is_stream {
            let (response, line) = stream_back(up, Some(recorder), self.config.log.clone());
            note.stream_line = Some(line);
            return response;
        }
        let status = up.status();
        let headers = up.headers().clone();
        let bytes = match up.bytes().await {
            Ok(b) => b,
            Err(e) => {
                return proxy_error(
                    api,
                    StatusCode::BAD_GATEWAY,
                    "api_error",
                    &format!(
                        "soba proxy: the upstream answer broke off: {}",
                        without_url(e)
                    ),
                )
            }
        };
        let reply = wire::parse_reply(api, &bytes);
        if reply.entries.is_empty() {
            note.unrecorded = Some(match api {
                Api::OpenAiResponses => "the answer is not a completed response",
                Api::OpenAiChat | Api::Anthropic => "the answer is not a chat reply",
            });
        }
        let mut recorder = recorder;
        recorder.announce(&reply);
        recorder.record(reply).await;
        buffered(status, &headers, bytes)
    }
}

/// Answer the daemon's `soba/summarize` with the upstream and credentials lent by the request
/// being served in that session. Errors name what went wrong, never a credential.
async fn summarize_upstream(
    lent: &LentMap,
    http: &reqwest::Client,
    params: Value,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<Value, RpcError> {
    let p: SummarizeParams = serde_json::from_value(params)
        .map_err(|e| RpcError::invalid_params(format!("{}: {e}", client_method::SUMMARIZE)))?;
    let (api, url, headers, model, max_completion_tokens) = {
        let lent = lent.lock().unwrap_or_else(|e| e.into_inner());
        let Some(l) = lent.get(&p.session_id) else {
            return Err(RpcError::internal(format!(
                "soba proxy is serving no request of session {} whose credentials it could summarize with",
                p.session_id
            )));
        };
        (
            l.api,
            l.url.clone(),
            l.headers.clone(),
            l.model.clone(),
            l.max_completion_tokens,
        )
    };
    let secrets: Vec<String> = headers
        .values()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| {
            // `Bearer sk-…`: the key alone may be echoed too.
            let key = v.rsplit(' ').next().unwrap_or(v);
            [v.to_string(), key.to_string()]
        })
        .chain(url.query_pairs().map(|(_, v)| v.into_owned()))
        .filter(|s| s.len() >= 8)
        .collect();
    let clean = |message: String| {
        let mut m = message;
        for s in &secrets {
            if m.contains(s.as_str()) {
                m = m.replace(s.as_str(), "[redacted]");
            }
        }
        soba_core::redact::redact(&m).into_owned()
    };
    let Some(model) = p.model.or(model) else {
        return Err(RpcError::internal(
            "the request being served names no `model`, so the proxy cannot summarize with it; start soba proxy with --summarizer-model NAME",
        ));
    };
    let prompt = crate::summarize::prompt::Prompt {
        system: p.system,
        user: p.user,
    };
    let mut body =
        crate::summarize::client::request_body(api, &model, &prompt, p.max_output_tokens);
    if max_completion_tokens {
        if let Some(limit) = body.as_object_mut().and_then(|b| b.remove("max_tokens")) {
            body["max_completion_tokens"] = limit;
        }
    }
    let reply = crate::summarize::client::send_body(
        http,
        api,
        url.as_str(),
        headers,
        &body,
        &|_| {},
        &cancel,
    )
    .await;
    match reply {
        Ok(r) => Ok(serde_json::to_value(SummarizeResult {
            text: r.text,
            hit_output_limit: r.hit_output_limit,
        })
        .expect("result serializes")),
        Err(crate::summarize::summarizer::SummaryError::Http { status, message }) => {
            Err(RpcError {
                code: code::INTERNAL,
                message: clean(message),
                data: Some(json!({ "status": status })),
            })
        }
        Err(e) => Err(RpcError::internal(clean(e.to_string()))),
    }
}

/// Tell the daemon about an upstream overflow, with the figures the provider gave: the
/// compaction's outcome and the model input to retry with, or the log text saying why there is
/// no retry.
async fn recover_from_overflow(
    rpc: &RpcClient,
    session: &str,
    figures: soba_core::window::OverflowFigures,
    preflight: Value,
) -> Result<(String, Value), String> {
    let mut params = json!({"sessionId": session});
    if let Some(w) = figures.provider_window {
        params["providerWindow"] = w.into();
    }
    if let Some(t) = figures.provider_tokens {
        params["providerTokens"] = t.into();
    }
    let r = match rpc.request(method::OVERFLOW, params).await {
        Ok(r) => r,
        Err(e) => {
            return Err(match e.data.as_ref().and_then(|d| d.get("compaction")) {
                Some(c) => overflow::not_recovered(c),
                None => format!("overflow: the recovery failed: {}", e.message),
            })
        }
    };
    let compaction = r.get("compaction").cloned().unwrap_or(Value::Null);
    if r.get("retryAllowed").and_then(Value::as_bool) != Some(true) {
        return Err(overflow::not_recovered(&compaction));
    }
    let input = rpc
        .request(method::PREFLIGHT, preflight)
        .await
        .map_err(|e| format!("overflow: no input after the recovery: {}", e.message))?;
    let outcome = compaction
        .get("outcome")
        .and_then(Value::as_str)
        .unwrap_or("?");
    Ok((format!("{outcome} (overflow)"), input))
}

/// `soba/preflight` for a conversation's session: the messages the agent resent come back
/// without their content where the model input shows them as sent (the request holds it), so
/// the daemon hop carries what the daemon decided, not the history again.
fn preflight_params(session: &str, conv: &Conversation, chat: &ChatRequest) -> Value {
    json!({"sessionId": session, "omitContentOf": conv.held_runs(chat.messages.len())})
}

/// `completed (hard_limit, model)`; a fallback also says why the model was not used.
fn compaction_outcome(input: &Value) -> Option<String> {
    let c = input.get("compaction").filter(|c| !c.is_null())?;
    let mut line = format!(
        "{} ({}",
        c.get("outcome").and_then(Value::as_str).unwrap_or("?"),
        c.get("trigger").and_then(Value::as_str).unwrap_or("?")
    );
    if let Some(q) = c.get("quality").and_then(Value::as_str) {
        line.push_str(&format!(", {q}"));
    }
    line.push(')');
    if c.get("fallback").and_then(Value::as_bool) == Some(true) {
        if let Some(r) = c.get("reason").and_then(Value::as_str) {
            line.push_str(&format!(": {r}"));
        }
    }
    Some(line)
}

/// reqwest errors name the URL; the URL may carry a key in its query, so it is left out.
fn without_url(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut s = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(inner) = source {
        s.push_str(&format!(": {inner}"));
        source = inner.source();
    }
    s
}

/// Records the reply in the session once the agent has it.
struct Recorder {
    rpc: Arc<RpcClient>,
    live: tokio::sync::OwnedMutexGuard<Live>,
    api: Api,
    claim: Claim,
    /// The response's id names the conversation in the registry.
    named: bool,
}

impl Recorder {
    /// The reply being streamed is response `response_id`: a request continuing it
    /// (`previous_response_id`) finds its conversation in the registry from now on, and waits
    /// there until the reply is recorded. Streaming clients may send it the moment the last
    /// event arrives, before the stream's end has been seen here.
    fn announce_response(&mut self, response_id: &str) {
        if self.named {
            return;
        }
        self.named = true;
        self.claim.registry().name(self.claim.id, response_id);
    }

    /// Make the reply known as this conversation's before the agent has all of it: the agent
    /// may send its next request, carrying the reply (each of its messages: one per output
    /// item of a response) or naming it, the moment it has.
    fn announce(&mut self, reply: &Reply) {
        {
            let mut registry = self.claim.registry();
            for entry in &reply.entries {
                registry.replied(self.claim.id, std::slice::from_ref(entry));
            }
        }
        if let Some(id) = &reply.response_id {
            self.announce_response(id);
        }
    }

    async fn record(mut self, reply: Reply) {
        if reply.entries.is_empty() {
            return;
        }
        let Some(session) = self.live.conv.as_ref().map(|c| c.session_id.clone()) else {
            return;
        };
        let mut entries = reply.entries.clone();
        // The usage measures the whole reply: it goes on its last entry, where the budget's
        // anchor looks for it.
        if let (Some(u), Some(last)) = (reply.usage, entries.last_mut()) {
            last["usage"] = serde_json::to_value(u).unwrap_or(Value::Null);
        }
        let appended = self
            .rpc
            .request(
                method::SESSION_APPEND,
                json!({"sessionId": session, "entries": entries}),
            )
            .await;
        let Some(ids) = appended.ok().and_then(|r| {
            r.get("entryIds").and_then(Value::as_array).map(|ids| {
                ids.iter()
                    .filter_map(|id| id.as_str().map(str::to_string))
                    .collect::<Vec<_>>()
            })
        }) else {
            return;
        };
        if ids.len() != reply.entries.len() {
            return;
        }
        if let Some(conv) = self.live.conv.as_mut() {
            for (entry, id) in reply.entries.into_iter().zip(ids) {
                conv.replied(entry, id);
            }
            if let Some(response_id) = reply.response_id {
                conv.response_recorded(response_id);
            }
        }
        if !reply.wants_tools {
            let _ = self
                .rpc
                .request(
                    method::TURN_COMPLETE,
                    json!({"sessionId": session, "usage": reply.usage}),
                )
                .await;
        }
    }
}

fn buffered(status: StatusCode, headers: &HeaderMap, bytes: Bytes) -> Response<ProxyBody> {
    let mut r = Response::new(full(bytes));
    *r.status_mut() = status;
    *r.headers_mut() = response_headers(headers);
    r
}

/// Pass the upstream's answer through as it arrives; with a recorder, read the events on the
/// way and record the reply when the stream has ended whole. The request line, sent on the
/// returned channel, is written when the stream ends, with how it ended.
fn stream_back(
    up: reqwest::Response,
    mut recorder: Option<Recorder>,
    log: Arc<dyn Fn(&str) + Send + Sync>,
) -> (Response<ProxyBody>, StreamLine) {
    let status = up.status();
    let headers = response_headers(up.headers());
    let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(16);
    let (line_tx, line_rx) = tokio::sync::oneshot::channel::<(String, String)>();
    let mut tap = recorder.as_ref().map(|r| StreamTap::new(r.api));
    tokio::spawn(async move {
        let mut chunks = up.bytes_stream();
        let mut passed: u64 = 0;
        let mut end = StreamEnd::Complete;
        while let Some(chunk) = chunks.next().await {
            match chunk {
                Ok(bytes) => {
                    if let Some(t) = tap.as_mut() {
                        t.feed(&bytes);
                    }
                    if let (Some(r), Some(id)) = (
                        recorder.as_mut(),
                        tap.as_ref().and_then(StreamTap::response_id),
                    ) {
                        r.announce_response(id);
                    }
                    let n = bytes.len() as u64;
                    if tx.send(Ok(Frame::data(bytes))).await.is_err() {
                        // The agent went away: it never saw this reply and will not resend it.
                        end = StreamEnd::ClientGone { bytes: passed };
                        break;
                    }
                    passed += n;
                }
                Err(e) => {
                    let reason = without_url(e);
                    let _ = tx.send(Err(std::io::Error::other(reason.clone()))).await;
                    end = StreamEnd::Broke {
                        bytes: passed,
                        reason,
                    };
                    break;
                }
            }
        }
        let reply = match tap
            .filter(|_| end == StreamEnd::Complete)
            .map(StreamTap::finish)
        {
            Some(Ok(reply)) => Some(reply),
            Some(Err(reason)) => {
                end = StreamEnd::Malformed {
                    bytes: passed,
                    reason,
                };
                None
            }
            None => None,
        };
        if let (Some(r), Some(reply)) = (recorder.as_mut(), &reply) {
            r.announce(reply);
        }
        // Logged before the client sees the end, so the line is there once it has the answer.
        if let Ok((head, tail)) = line_rx.await {
            let told = end
                .describe(recorder.is_some())
                .map(|d| format!(", {d}"))
                .unwrap_or_default();
            log(&format!("{head}{told}{tail}"));
        }
        drop(tx);
        if let (Some(r), Some(reply)) = (recorder, reply) {
            r.record(reply).await;
        }
    });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(rx)));
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    (r, line_tx)
}

/// The upstream base URL as it may be shown: user-info and query values (which may be keys)
/// as `***`, except the harmless `api-version`.
pub fn shown_url(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    if !url.username().is_empty() {
        let _ = shown.set_username("***");
    }
    if url.password().is_some() {
        let _ = shown.set_password(Some("***"));
    }
    if url.query().is_some() {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let keep = matches!(k.as_ref(), "api-version" | "api_version");
                (
                    k.into_owned(),
                    if keep { v.into_owned() } else { "***".into() },
                )
            })
            .collect();
        let mut q = shown.query_pairs_mut();
        q.clear();
        for (k, v) in &pairs {
            q.append_pair(k, v);
        }
    }
    shown.set_fragment(None);
    // `***` is written percent-encoded in user-info; show it as typed.
    shown.as_str().replace("%2A%2A%2A", "***")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_shown_upstream_hides_credentials_and_keys() {
        let url: reqwest::Url =
            "https://bob:hunter2pw@gw.example/openai?key=abc123secret&api-version=2024-06-01"
                .parse()
                .unwrap();
        let shown = shown_url(&url);
        assert_eq!(
            shown,
            "https://***:***@gw.example/openai?key=***&api-version=2024-06-01"
        );
        let plain: reqwest::Url = "https://api.openai.com/v1".parse().unwrap();
        assert_eq!(shown_url(&plain), "https://api.openai.com/v1");
    }

    #[test]
    fn the_least_recently_claimed_idle_conversation_is_forgotten_first() {
        let mut r = Remembered::default();
        for id in [1, 2, 3] {
            r.claim(id);
        }
        r.claim(1);
        assert_eq!(r.bound(2), vec![2]);
        // One a request holds is never forgotten, however old.
        let held = r.claim(3);
        r.claim(1);
        r.claim(4);
        assert_eq!(r.bound(2), vec![1]);
        assert_eq!(r.bound(1), vec![4], "3 is held");
        assert!(r.bound(0).is_empty(), "nothing idle is left to forget");
        drop(held);
        r.claim(5);
        assert_eq!(r.bound(1), vec![3]);
        assert!(r.by_id.contains_key(&5));
    }

    use super::*;

    #[test]
    fn a_remote_listen_address_is_refused_without_allow_remote() {
        let at = |s: &str| -> Vec<SocketAddr> { vec![s.parse().unwrap()] };
        let err = check_listen("0.0.0.0:4860", &at("0.0.0.0:4860"), false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--allow-remote"), "{err}");
        assert!(err.contains("on 0.0.0.0:4860:"), "{err}");
        assert!(check_listen("0.0.0.0:4860", &at("0.0.0.0:4860"), true).is_ok());
        assert!(check_listen("127.0.0.1:4860", &at("127.0.0.1:4860"), false).is_ok());
        assert!(check_listen("[::1]:4860", &at("[::1]:4860"), false).is_ok());
    }

    #[test]
    fn a_host_name_is_taken_when_everything_it_resolves_to_is_loopback() {
        let local: Vec<SocketAddr> = vec![
            "[::1]:4860".parse().unwrap(),
            "127.0.0.1:4860".parse().unwrap(),
        ];
        assert!(check_listen("localhost:4860", &local, false).is_ok());
        let mixed: Vec<SocketAddr> = vec![
            "127.0.0.1:4860".parse().unwrap(),
            "192.168.1.7:4860".parse().unwrap(),
        ];
        let err = check_listen("devbox:4860", &mixed, false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("devbox:4860 (192.168.1.7:4860)"), "{err}");
        assert!(check_listen("devbox:4860", &mixed, true).is_ok());
    }

    #[test]
    fn hop_by_hop_headers_are_dropped_and_auth_goes_upstream() {
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer sk-test".parse().unwrap());
        h.insert("x-api-key", "k".parse().unwrap());
        h.insert("connection", "keep-alive".parse().unwrap());
        h.insert("host", "127.0.0.1".parse().unwrap());
        h.insert("accept-encoding", "gzip".parse().unwrap());
        let out = upstream_headers(&h, true);
        assert_eq!(out.get("authorization").unwrap(), "Bearer sk-test");
        assert_eq!(out.get("x-api-key").unwrap(), "k");
        assert!(out.get("connection").is_none() && out.get("host").is_none());
        assert!(out.get("accept-encoding").is_none());
        assert!(upstream_headers(&h, false).get("accept-encoding").is_some());
    }

    #[test]
    fn upstream_paths_join_without_a_doubled_v1() {
        let base: reqwest::Url = "https://api.openai.com/v1".parse().unwrap();
        assert_eq!(
            upstream_url(&base, "/v1/chat/completions").as_str(),
            "https://api.openai.com/v1/chat/completions"
        );
        let base: reqwest::Url = "http://127.0.0.1:9/".parse().unwrap();
        assert_eq!(
            upstream_url(&base, "/v1/models?x=1").as_str(),
            "http://127.0.0.1:9/v1/models?x=1"
        );
    }

    #[test]
    fn the_base_urls_query_is_kept() {
        let base: reqwest::Url =
            "https://acme.openai.azure.com/openai/deployments/gpt?api-version=2024-06-01"
                .parse()
                .unwrap();
        assert_eq!(
            upstream_url(&base, "/chat/completions").as_str(),
            "https://acme.openai.azure.com/openai/deployments/gpt/chat/completions?api-version=2024-06-01"
        );
        // The request's own parameters follow; one the base names is the base's.
        assert_eq!(
            upstream_url(&base, "/models?limit=5&api-version=1999").as_str(),
            "https://acme.openai.azure.com/openai/deployments/gpt/models?api-version=2024-06-01&limit=5"
        );
    }
}

#[cfg(test)]
mod header_tests {
    use super::*;

    #[test]
    fn the_smallest_window_keeps_what_the_window_sets_aside() {
        assert_eq!(smallest_window(32768, 19808, 35704), Some(49000));
        assert_eq!(smallest_window(32768, 19808, 19000), None);
        assert_eq!(smallest_window(0, 19808, 35704), None);
    }

    /// An oversized history gets the window that would hold it; a refusal whose reason names
    /// a window already (the fixed part alone is too large) is passed on without a second.
    #[test]
    fn an_overflow_answer_names_one_window() {
        let data = json!({"compaction": {"tokensBefore": 35704, "hardLimit": 19808, "contextWindow": 32768}});
        let window_named = |message: &str| {
            let e = RpcError::new(-32001, message).with_data(data.clone());
            let (_, why) = too_long(Api::Anthropic, &e);
            why.matches(reasons::LARGER_WINDOW).count()
        };
        assert_eq!(
            window_named("context budget exceeded: the input needs 35704 tokens"),
            1
        );
        let fixed = reasons::fixed_part_too_large(30_000, 0, 19808, 66_000);
        assert_eq!(window_named(&fixed), 1);
        let e = RpcError::new(-32001, fixed.clone()).with_data(data.clone());
        assert!(too_long(Api::Anthropic, &e).1.ends_with(&fixed));
    }

    #[test]
    fn a_summarization_request_carries_only_the_auth_and_api_version_headers() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("authorization", "Bearer sk-x"),
            ("x-api-key", "sk-ant-x"),
            ("api-key", "azure"),
            ("cf-aig-authorization", "Bearer gw"),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "prompt-caching"),
            ("openai-organization", "org-1"),
            ("user-agent", "claude-cli/2.1"),
            ("x-app", "cli"),
            ("x-stainless-os", "Linux"),
            ("x-custom-trace", "abc"),
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
        ] {
            h.insert(http::HeaderName::from_static(k), v.parse().unwrap());
        }
        let headers = summarizer_headers(&h);
        let mut kept: Vec<&str> = headers.keys().map(|k| k.as_str()).collect();
        kept.sort_unstable();
        assert_eq!(
            kept,
            [
                "anthropic-beta",
                "anthropic-version",
                "api-key",
                "authorization",
                "cf-aig-authorization",
                "openai-organization",
                "x-api-key"
            ]
        );
    }
}
