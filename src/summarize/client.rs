//! The HTTP shell: a [`Summarizer`] over an OpenAI-compatible or Anthropic endpoint, streaming
//! the reply over SSE. Chunking, prompts, event meanings and validation come from the pure
//! modules; this file only sends, reads, and stops reading when told.

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::breaker::Breaker;
use super::progress::stream_fraction;
use super::prompt::{self, input_window, next_chunk, Prompt, PromptContext, SIZING_TOKENIZER};
use super::response::parse_capsule_state;
use super::summarizer::{Summarizer, SummarizerConfigError, SummaryError, SummaryRequest};
use crate::wire::sse::SseParser;
use crate::wire::summary::Reply;
use crate::wire::summary::{self, EventError, StreamItem};
use crate::wire::Api;
use soba_core::config::{catalog_lookup, Provider, SummarizerConfig};
use soba_core::session::capsule::model::CapsuleState;

pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// Context window assumed for a model the catalog does not know.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 32_768;
/// Output tokens asked for when the config names none: a capsule is well under this.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 4_096;
pub const DEFAULT_COOLDOWN_MS: u64 = 60_000;
/// Output size a capsule reply is expected to have, for progress.
const EXPECTED_REPLY_TOKENS: u64 = 1_024;
/// Connecting should be quick; the whole run is bounded by the compaction timeout anyway.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most of an error body kept for the message.
const MAX_ERROR_BODY_BYTES: usize = 16 * 1024;
const REDACTED: &str = "[redacted]";

/// One summarization request's transport: sends a prompt, returns the whole reply text. The
/// chunking loop ([`run_chunked`]) is the same whoever sends: an endpoint SOBA calls itself
/// ([`ModelSummarizer`]), or the agent's own model reached through the client that drives the
/// session (the daemon's client summarizer).
pub trait PromptSender: Send + Sync {
    /// Send `prompt`; `on_tokens` gets the reply's token count so far as it streams in. Stops
    /// (dropping the connection or telling the client) when `cancel` fires or the future is
    /// dropped.
    fn send<'a>(
        &'a self,
        prompt: &'a Prompt,
        on_tokens: &'a (dyn Fn(u64) + Send + Sync),
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Reply, SummaryError>>;
}

/// The limits one summarization runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    pub context_window: u64,
    pub max_output_tokens: u64,
    /// The setting that raises `max_output_tokens`, for the message of a cut-off reply.
    pub output_setting: &'static str,
}

/// Summarize `req` through `sender`: the history cut into chunks that fit the window, oldest
/// first, each chunk's state the previous capsule of the next; the last chunk's state is the
/// result. `outgoing` is applied to every text before it is sized and sent (redaction).
pub async fn run_chunked(
    req: &SummaryRequest,
    limits: RunLimits,
    outgoing: &(dyn Fn(String) -> String + Send + Sync),
    sender: &dyn PromptSender,
    progress: &(dyn Fn(u8) + Send + Sync),
    cancel: &CancellationToken,
) -> Result<CapsuleState, SummaryError> {
    let items: Vec<String> = req
        .history
        .iter()
        .map(|m| outgoing(prompt::render_message(m)))
        .collect();
    let item_tokens: Vec<u64> = items.iter().map(|t| SIZING_TOKENIZER.count(t)).collect();
    let total: u64 = item_tokens.iter().sum::<u64>().max(1);
    let window = input_window(limits.context_window, limits.max_output_tokens);
    // Redacted whole, before the older messages are shortened.
    let facts = req.facts_after(window, outgoing);
    let shown = req.shown_artifacts();
    let ctx = PromptContext {
        instructions: req.instructions.as_deref(),
        artifacts: &shown,
        facts: &facts,
        follow_up: req.follow_up.as_deref(),
    };
    let expected = limits.max_output_tokens.min(EXPECTED_REPLY_TOKENS);

    // Oldest first; each chunk's state becomes the next chunk's previous capsule.
    let mut previous = req.previous.as_ref().map(|c| c.state.clone());
    let mut start = 0;
    loop {
        let chunk = next_chunk(ctx, previous.as_ref(), &items, &item_tokens, start, window)
            .map_err(SummaryError::WindowTooSmall)?;
        let done: u64 = item_tokens[..start].iter().sum();
        let share: u64 = item_tokens[start..chunk.next].iter().sum();
        let on_tokens = |received: u64| {
            let fraction =
                (done as f64 + share as f64 * stream_fraction(received, expected)) / total as f64;
            progress((fraction * 100.0).floor().min(99.0) as u8);
        };
        // The history was redacted before it was sized; this pass covers the previous
        // capsule, the instructions and the artifacts.
        let prompt = Prompt {
            system: outgoing(chunk.prompt.system),
            user: outgoing(chunk.prompt.user),
        };
        let reply = sender.send(&prompt, &on_tokens, cancel).await?;
        let state = parse_capsule_state(&reply.text).map_err(|why| {
            SummaryError::InvalidResponse(if reply.hit_output_limit {
                format!(
                    "{why} (the reply was cut off at {} = {}; raise it)",
                    limits.output_setting, limits.max_output_tokens
                )
            } else {
                why
            })
        })?;
        start = chunk.next;
        if start >= items.len() {
            return Ok(state);
        }
        previous = Some(state);
    }
}

/// Send one summarization prompt to `url` as `api` asks, with `headers` (the credentials),
/// and collect the reply as it streams in. A server that ignores `stream: true` and answers
/// one JSON body is read too.
#[allow(clippy::too_many_arguments)]
pub async fn send_prompt(
    http: &reqwest::Client,
    api: Api,
    url: &str,
    headers: reqwest::header::HeaderMap,
    model: &str,
    prompt: &Prompt,
    max_output_tokens: u64,
    on_tokens: &(dyn Fn(u64) + Send + Sync),
    cancel: &CancellationToken,
) -> Result<Reply, SummaryError> {
    let body = request_body(api, model, prompt, max_output_tokens);
    send_body(http, api, url, headers, &body, on_tokens, cancel).await
}

/// The body [`send_prompt`] sends.
pub fn request_body(api: Api, model: &str, prompt: &Prompt, max_output_tokens: u64) -> Value {
    match api {
        Api::OpenAiChat => {
            summary::openai::request_body(model, &prompt.system, &prompt.user, max_output_tokens)
        }
        Api::Anthropic => {
            summary::anthropic::request_body(model, &prompt.system, &prompt.user, max_output_tokens)
        }
        Api::OpenAiResponses => {
            summary::responses::request_body(model, &prompt.system, &prompt.user, max_output_tokens)
        }
    }
}

/// [`send_prompt`] with the body given (a caller that adapts it to its server).
pub async fn send_body(
    http: &reqwest::Client,
    api: Api,
    url: &str,
    headers: reqwest::header::HeaderMap,
    body: &Value,
    on_tokens: &(dyn Fn(u64) + Send + Sync),
    cancel: &CancellationToken,
) -> Result<Reply, SummaryError> {
    let decode: summary::EventDecoder = match api {
        Api::OpenAiChat => summary::openai::event,
        Api::Anthropic => summary::anthropic::event,
        Api::OpenAiResponses => summary::responses::event,
    };
    let mut request = http
        .post(url)
        .headers(headers)
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .json(body);
    if api == Api::Anthropic {
        request = request.header("anthropic-version", summary::anthropic::API_VERSION);
    }

    let response = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Err(SummaryError::Cancelled),
        r = request.send() => r.map_err(|e| SummaryError::Transport(describe_error(&e)))?,
    };
    let status = response.status();
    if !status.is_success() {
        let body = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(SummaryError::Cancelled),
            b = read_limited(response, MAX_ERROR_BODY_BYTES) => b,
        };
        return Err(SummaryError::Http {
            status: status.as_u16(),
            message: summary::http_error_message(&body),
        });
    }

    let is_json = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        // A server that ignores `stream: true` answers with one complete JSON body.
        let body = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(SummaryError::Cancelled),
            b = response.bytes() => b.map_err(|e| SummaryError::Transport(describe_error(&e)))?,
        };
        let complete = match api {
            Api::OpenAiChat => summary::openai::complete_reply(&body),
            Api::Anthropic => summary::anthropic::complete_reply(&body),
            Api::OpenAiResponses => summary::responses::complete_reply(&body),
        };
        let reply = complete.map_err(|e| match e {
            EventError::Provider(m) => SummaryError::Provider(m),
            EventError::Malformed(m) => SummaryError::InvalidResponse(m),
        })?;
        on_tokens(SIZING_TOKENIZER.count(&reply.text));
        return Ok(reply);
    }

    let mut bytes = response.bytes_stream();
    let mut parser = SseParser::new();
    let mut text = String::new();
    let mut received_tokens = 0;
    let mut finished = false;
    let mut hit_output_limit = false;
    loop {
        let next = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(SummaryError::Cancelled),
            n = bytes.next() => n,
        };
        let chunk = match next {
            None => break,
            Some(Err(e)) => return Err(SummaryError::Transport(describe_error(&e))),
            Some(Ok(chunk)) => chunk,
        };
        for event in parser.feed(&chunk) {
            match decode(&event) {
                Ok(StreamItem::Text(t)) => {
                    received_tokens += SIZING_TOKENIZER.count(&t);
                    text.push_str(&t);
                    on_tokens(received_tokens);
                }
                Ok(StreamItem::Finished {
                    hit_output_limit: limit,
                }) => {
                    finished = true;
                    hit_output_limit = limit;
                }
                // Return without reading further: dropping the response closes the stream.
                Ok(StreamItem::Done) => {
                    return Ok(Reply {
                        text,
                        hit_output_limit,
                    })
                }
                Ok(StreamItem::Nothing) => {}
                Err(EventError::Provider(m)) => return Err(SummaryError::Provider(m)),
                Err(EventError::Malformed(m)) => return Err(SummaryError::InvalidResponse(m)),
            }
        }
    }
    // Some servers end the stream after the stop reason without an end marker; that is a
    // complete reply. Anything else stopped early.
    if finished && !parser.has_partial_event() {
        Ok(Reply {
            text,
            hit_output_limit,
        })
    } else {
        Err(SummaryError::Truncated)
    }
}

/// An API key that never prints.
#[derive(Clone)]
struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

/// A model summarizer over one provider endpoint, with its circuit breaker.
#[derive(Debug)]
pub struct ModelSummarizer {
    api: Api,
    /// `baseUrl` without any credentials it holds, for [`Summarizer::describe`].
    shown_url: String,
    endpoint: String,
    model: String,
    key: Option<ApiKey>,
    context_window: u64,
    max_output_tokens: u64,
    http: reqwest::Client,
    breaker: Breaker,
    /// Redact secrets from every request's prompt (`summarizer.redactInput`).
    redact_input: bool,
}

impl ModelSummarizer {
    /// Build from the config, reading the key from the environment through `env`.
    pub fn new(
        cfg: &SummarizerConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ModelSummarizer, SummarizerConfigError> {
        let (api, provider_name, default_base) = match cfg.provider {
            Provider::Openai => (Api::OpenAiChat, "openai", DEFAULT_OPENAI_BASE_URL),
            Provider::Anthropic => (Api::Anthropic, "anthropic", DEFAULT_ANTHROPIC_BASE_URL),
            Provider::Local => return Err(SummarizerConfigError::LocalProvider),
        };
        let model = cfg.model.clone().filter(|m| !m.trim().is_empty()).ok_or(
            SummarizerConfigError::MissingModel {
                provider: provider_name,
            },
        )?;
        let key = match (&cfg.api_key_env, api) {
            (Some(var), _) => match env(var).filter(|k| !k.trim().is_empty()) {
                Some(k) => Some(ApiKey(k.trim().to_string())),
                None => return Err(SummarizerConfigError::MissingApiKey { var: var.clone() }),
            },
            (None, Api::Anthropic) => return Err(SummarizerConfigError::MissingApiKeyEnv),
            (None, Api::OpenAiChat | Api::OpenAiResponses) => None,
        };

        let base_url = cfg
            .base_url
            .as_deref()
            .unwrap_or(default_base)
            .trim_end_matches('/')
            .to_string();
        let url =
            reqwest::Url::parse(&base_url).map_err(|e| SummarizerConfigError::BadBaseUrl {
                url: base_url.clone(),
                message: e.to_string(),
            })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(SummarizerConfigError::BadBaseUrl {
                url: base_url,
                message: "only http and https are supported".into(),
            });
        }
        let mut shown = url.clone();
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        let shown_url = shown.as_str().trim_end_matches('/').to_string();
        // reqwest would send user-info as Basic auth in place of the key: refused (and not
        // repeated in the message).
        if !url.username().is_empty() || url.password().is_some() {
            return Err(SummarizerConfigError::BadBaseUrl {
                url: shown_url,
                message: "it holds credentials (`user:password@`); remove them, put the API key in an environment variable and name it in summarizer.apiKeyEnv".into(),
            });
        }
        // A remote server gets the history with its secrets redacted unless the user said
        // otherwise; a summarizer on this machine sees what the agent saw.
        let redact_input = cfg.redact_input.unwrap_or(!is_loopback(&url));
        let endpoint = match api {
            Api::OpenAiChat => format!("{base_url}/chat/completions"),
            Api::Anthropic => format!("{base_url}/v1/messages"),
            Api::OpenAiResponses => format!("{base_url}/responses"),
        };

        let catalog = catalog_lookup(&model);
        let context_window = cfg
            .context_window
            .or(catalog.map(|m| m.context_window))
            .unwrap_or(DEFAULT_CONTEXT_WINDOW);
        let max_output_tokens = cfg.max_output_tokens.unwrap_or_else(|| {
            catalog.map_or(DEFAULT_MAX_OUTPUT_TOKENS, |m| {
                m.max_output_tokens.min(DEFAULT_MAX_OUTPUT_TOKENS)
            })
        });
        if max_output_tokens == 0 {
            return Err(SummarizerConfigError::OutOfRange {
                key: "maxOutputTokens",
                value: 0,
                allowed: "must be positive".into(),
            });
        }
        // Room for the prompt's fixed parts and some history; a real check against the actual
        // prompt happens per request.
        let least_input = 2 * prompt::MIN_HISTORY_TOKENS;
        if input_window(context_window, max_output_tokens) < least_input {
            let min_window = (max_output_tokens..)
                .find(|&w| input_window(w, max_output_tokens) >= least_input)
                .unwrap_or(u64::MAX);
            return Err(SummarizerConfigError::OutOfRange {
                key: "contextWindow",
                value: context_window,
                allowed: format!("must leave room for input beyond maxOutputTokens ({max_output_tokens}); at least {min_window}"),
            });
        }
        let cooldown = Duration::from_millis(cfg.cooldown_ms.unwrap_or(DEFAULT_COOLDOWN_MS));

        let mut builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(concat!("soba/", env!("CARGO_PKG_VERSION")));
        // A summarizer on this machine (Ollama, llama.cpp, tests) must not be sent through
        // a proxy configured for the outside world.
        if is_loopback(&url) {
            builder = builder.no_proxy();
        }
        let http = builder
            .build()
            .map_err(|e| SummarizerConfigError::Client(e.to_string()))?;

        Ok(ModelSummarizer {
            api,
            shown_url,
            endpoint,
            model,
            key,
            context_window,
            max_output_tokens,
            http,
            breaker: Breaker::new(cooldown),
            redact_input,
        })
    }

    /// Input tokens one request may carry.
    pub fn input_window(&self) -> u64 {
        input_window(self.context_window, self.max_output_tokens)
    }

    /// The credentials of every request.
    fn auth_headers(&self) -> reqwest::header::HeaderMap {
        let mut headers = reqwest::header::HeaderMap::new();
        let Some(key) = &self.key else {
            return headers;
        };
        let (name, value) = match self.api {
            Api::OpenAiChat | Api::OpenAiResponses => {
                (reqwest::header::AUTHORIZATION, format!("Bearer {}", key.0))
            }
            Api::Anthropic => (
                reqwest::header::HeaderName::from_static("x-api-key"),
                key.0.clone(),
            ),
        };
        if let Ok(mut value) = reqwest::header::HeaderValue::from_str(&value) {
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        headers
    }

    /// Text on its way to the server, redacted when `redactInput` says so.
    fn outgoing(&self, text: String) -> String {
        if !self.redact_input {
            return text;
        }
        match soba_core::redact::redact(&text) {
            std::borrow::Cow::Borrowed(_) => text,
            std::borrow::Cow::Owned(clean) => clean,
        }
    }

    /// The key, and any secret the server's error body echoes, never leave in a message.
    fn redact(&self, message: String) -> String {
        let message = match &self.key {
            Some(key) if message.contains(&key.0) => message.replace(&key.0, REDACTED),
            _ => message,
        };
        soba_core::redact::redact(&message).into_owned()
    }

    /// Whether requests are redacted (for tests and `describe`).
    pub fn redacts_input(&self) -> bool {
        self.redact_input
    }

    /// Error text can echo what the server said (some providers quote the key they were
    /// given); the key never leaves in a message.
    fn redact_error(&self, error: SummaryError) -> SummaryError {
        match error {
            SummaryError::Http { status, message } => SummaryError::Http {
                status,
                message: self.redact(message),
            },
            SummaryError::Transport(m) => SummaryError::Transport(self.redact(m)),
            SummaryError::Provider(m) => SummaryError::Provider(self.redact(m)),
            SummaryError::InvalidResponse(m) => SummaryError::InvalidResponse(self.redact(m)),
            SummaryError::WindowTooSmall(m) => SummaryError::WindowTooSmall(self.redact(m)),
            other @ (SummaryError::Timeout { .. }
            | SummaryError::Cancelled
            | SummaryError::Truncated
            | SummaryError::BreakerOpen { .. }) => other,
        }
    }
}

impl PromptSender for ModelSummarizer {
    fn send<'a>(
        &'a self,
        prompt: &'a Prompt,
        on_tokens: &'a (dyn Fn(u64) + Send + Sync),
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Reply, SummaryError>> {
        Box::pin(send_prompt(
            &self.http,
            self.api,
            &self.endpoint,
            self.auth_headers(),
            &self.model,
            prompt,
            self.max_output_tokens,
            on_tokens,
            cancel,
        ))
    }
}

impl Summarizer for ModelSummarizer {
    fn describe(&self) -> String {
        let provider = match self.api {
            Api::OpenAiChat | Api::OpenAiResponses => "openai",
            Api::Anthropic => "anthropic",
        };
        format!("{provider} {} @ {}", self.model, self.shown_url)
    }

    fn summarize<'a>(
        &'a self,
        req: &'a SummaryRequest,
        progress: &'a (dyn Fn(u8) + Send + Sync),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<CapsuleState, SummaryError>> {
        Box::pin(async move {
            let limits = RunLimits {
                context_window: self.context_window,
                max_output_tokens: self.max_output_tokens,
                output_setting: "summarizer.maxOutputTokens",
            };
            let outgoing = |text: String| self.outgoing(text);
            run_chunked(req, limits, &outgoing, self, progress, &cancel)
                .await
                .map_err(|e| self.redact_error(e))
        })
    }

    fn breaker(&self) -> Option<&Breaker> {
        Some(&self.breaker)
    }
}

fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The error with its causes ("error sending request: connection refused"), which reqwest's
/// own message leaves out.
fn describe_error(e: &reqwest::Error) -> String {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// The start of a response body as text, reading no more than `limit` bytes.
async fn read_limited(response: reqwest::Response, limit: usize) -> String {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        body.extend_from_slice(&chunk);
        if body.len() >= limit {
            body.truncate(limit);
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(provider: Provider) -> SummarizerConfig {
        SummarizerConfig {
            provider,
            model: Some("gpt-4o-mini".into()),
            ..SummarizerConfig::default()
        }
    }

    #[test]
    fn config_errors_name_settings_not_secrets() {
        let mut c = cfg(Provider::Anthropic);
        assert_eq!(
            ModelSummarizer::new(&c, |_| None).unwrap_err(),
            SummarizerConfigError::MissingApiKeyEnv
        );
        c.api_key_env = Some("MY_KEY".into());
        let err = ModelSummarizer::new(&c, |_| Some("  ".into())).unwrap_err();
        assert_eq!(
            err,
            SummarizerConfigError::MissingApiKey {
                var: "MY_KEY".into()
            }
        );
        assert!(err.to_string().contains("`MY_KEY`"));
        c.model = None;
        assert!(matches!(
            ModelSummarizer::new(&c, |_| Some("k".into())),
            Err(SummarizerConfigError::MissingModel {
                provider: "anthropic"
            })
        ));
        let mut c = cfg(Provider::Openai);
        c.base_url = Some("ftp://example.com".into());
        assert!(matches!(
            ModelSummarizer::new(&c, |_| None),
            Err(SummarizerConfigError::BadBaseUrl { .. })
        ));
        c.base_url = Some("not a url".into());
        assert!(matches!(
            ModelSummarizer::new(&c, |_| None),
            Err(SummarizerConfigError::BadBaseUrl { .. })
        ));
        let mut c = cfg(Provider::Openai);
        c.context_window = Some(4000);
        c.max_output_tokens = Some(4000);
        let err = ModelSummarizer::new(&c, |_| None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "summarizer.contextWindow = 4000 is invalid: must leave room for input beyond maxOutputTokens (4000); at least 4270"
        );
        c.context_window = Some(4270);
        assert!(ModelSummarizer::new(&c, |_| None).is_ok());
    }

    #[test]
    fn defaults_come_from_the_catalog_then_the_constants() {
        let s = ModelSummarizer::new(&cfg(Provider::Openai), |_| None).unwrap();
        assert_eq!(s.context_window, 128_000);
        assert_eq!(s.max_output_tokens, DEFAULT_MAX_OUTPUT_TOKENS);
        assert_eq!(s.endpoint, "https://api.openai.com/v1/chat/completions");
        assert_eq!(
            s.describe(),
            "openai gpt-4o-mini @ https://api.openai.com/v1"
        );
        let mut c = cfg(Provider::Anthropic);
        c.model = Some("my-local-model".into());
        c.api_key_env = Some("K".into());
        c.base_url = Some("http://127.0.0.1:9/".into());
        let s = ModelSummarizer::new(&c, |_| Some("sk-secret".into())).unwrap();
        assert_eq!(s.context_window, DEFAULT_CONTEXT_WINDOW);
        c.base_url = Some("http://user:hunter2@127.0.0.1:9/".into());
        // Credentials in the URL are refused, and the message does not repeat them.
        let err = ModelSummarizer::new(&c, |_| Some("sk-secret".into()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("http://127.0.0.1:9") && !err.contains("hunter2"),
            "{err}"
        );
        assert_eq!(s.endpoint, "http://127.0.0.1:9/v1/messages");
        assert!(!format!("{s:?}").contains("sk-secret"));
    }

    #[test]
    fn redaction_covers_every_message() {
        let mut c = cfg(Provider::Openai);
        c.api_key_env = Some("K".into());
        let s = ModelSummarizer::new(&c, |_| Some("sk-secret".into())).unwrap();
        let e = s.redact_error(SummaryError::Http {
            status: 401,
            message: "bad key sk-secret".into(),
        });
        assert_eq!(
            e.to_string(),
            "the summarization model answered HTTP 401: bad key [redacted]"
        );
    }
}
