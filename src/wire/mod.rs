//! Provider wire formats, one module for every request SOBA reads or sends: which API a request
//! speaks ([`Api`]); at the proxy's edge, OpenAI Chat Completions and Anthropic Messages
//! requests split into the agent's fixed part (system prompt, tools) and its messages, each
//! message turned into the session-log entries it stands for, SOBA's model input rendered back
//! into the provider's messages (the mapping of `docs/protocol.md`, "Sending the input to a
//! provider"), replies (whole or streamed) turned into an assistant entry with its usage; the
//! Responses API ([`responses`]); server-sent events ([`sse`]); and the summarizer's own
//! requests and streamed replies ([`summary`]). Pure: JSON in, JSON out.

pub mod fingerprint;
pub mod message;
pub mod responses;
pub mod sse;
pub mod summary;

use self::message::{
    arguments_text, image_url, message_entry, parse_arguments, text_block, tool_result_entry,
    BadRequest, Incoming, Reply,
};

use serde_json::{json, Map, Value};

use self::sse::{SseEvent, SseParser};
use soba_core::session::entry::{ContentBlock, Usage};
use soba_core::session::view::ModelMessage;

/// The chat APIs whose requests the proxy rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/chat/completions`.
    OpenAiChat,
    /// `POST /v1/messages`.
    Anthropic,
    /// `POST /v1/responses` (OpenAI's Responses API, Codex's wire format).
    OpenAiResponses,
}

impl Api {
    /// The API a request path belongs to, when the proxy rewrites it.
    pub fn for_path(path: &str) -> Option<Api> {
        let p = path.trim_end_matches('/');
        if p.ends_with("/chat/completions") {
            Some(Api::OpenAiChat)
        } else if p == "/v1/messages" || p == "/messages" {
            Some(Api::Anthropic)
        } else if p.ends_with("/responses") {
            Some(Api::OpenAiResponses)
        } else {
            None
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Api::OpenAiChat => "openai",
            Api::Anthropic => "anthropic",
            Api::OpenAiResponses => "openai-responses",
        }
    }
}

/// A chat request split at the proxy's edge.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    pub api: Api,
    /// The body as sent but for its history (`messages`; Responses: `input`), which was
    /// moved into `preamble` and `messages` (an empty list stands in its place): the upstream
    /// request is this with the history put back as the model input has it.
    pub body: Map<String, Value>,
    pub model: Option<String>,
    pub stream: bool,
    /// System prompt text (Anthropic `system`; OpenAI leading `system`/`developer` messages).
    pub system: String,
    /// Tool schemas as JSON text (counted by the budget, sent as is).
    pub tools: Option<String>,
    /// OpenAI's leading system messages (Responses: developer items), sent first as they came.
    pub preamble: Vec<Value>,
    pub messages: Vec<Incoming>,
}

impl ChatRequest {
    pub fn parse(api: Api, body: &[u8]) -> Result<ChatRequest, BadRequest> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| BadRequest(format!("the request body is not JSON: {e}")))?;
        let Value::Object(mut body) = value else {
            return Err(BadRequest("the request body must be a JSON object".into()));
        };
        let (system, preamble, messages) = match api {
            Api::OpenAiChat => openai_messages(&mut body)?,
            Api::Anthropic => anthropic_messages(&mut body)?,
            Api::OpenAiResponses => {
                let input = self::responses::parse_input(&mut body)?;
                (input.system, input.preamble, input.messages)
            }
        };
        let tools = body
            .get("tools")
            .filter(|t| !t.is_null())
            .map(|t| t.to_string());
        Ok(ChatRequest {
            api,
            model: body
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_string),
            stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
            system,
            tools,
            preamble,
            messages,
            body,
        })
    }

    /// The upstream body: everything as sent, with `messages` (Responses: `input`) replaced.
    pub fn with_messages(&self, messages: Vec<Value>) -> Value {
        let mut body = self.body.clone();
        let all = match self.api {
            Api::OpenAiChat | Api::OpenAiResponses => {
                self.preamble.iter().cloned().chain(messages).collect()
            }
            Api::Anthropic => messages,
        };
        let field = match self.api {
            Api::OpenAiResponses => "input",
            Api::OpenAiChat | Api::Anthropic => "messages",
        };
        body.insert(field.into(), Value::Array(all));
        Value::Object(body)
    }
}

/// System prompt, preamble and messages of a request.
type Split = (String, Vec<Value>, Vec<Incoming>);

/// The request's messages, taken out of `body` (an empty list is left in their place), not
/// copied: a request's history is read once.
fn take_messages(body: &mut Map<String, Value>) -> Result<Vec<Value>, BadRequest> {
    match body.get_mut("messages") {
        Some(Value::Array(messages)) => Ok(std::mem::take(messages)),
        _ => Err(BadRequest(
            "the request has no `messages` array; send a chat request".into(),
        )),
    }
}

fn openai_messages(body: &mut Map<String, Value>) -> Result<Split, BadRequest> {
    let messages = take_messages(body)?;
    let mut preamble = Vec::new();
    let mut system = String::new();
    let mut out = Vec::with_capacity(messages.len());
    let mut leading = true;
    for (i, m) in messages.into_iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if leading && (role == "system" || role == "developer") {
            push_line(&mut system, &openai_text(m.get("content")));
            preamble.push(m);
            continue;
        }
        leading = false;
        let entries = openai_entries(&m).map_err(|e| at(i, e))?;
        out.push(Incoming::new(m, entries));
    }
    Ok((system, preamble, out))
}

fn anthropic_messages(body: &mut Map<String, Value>) -> Result<Split, BadRequest> {
    let messages = take_messages(body)?;
    let mut system = String::new();
    match body.get("system") {
        Some(Value::String(s)) => system.push_str(s),
        Some(Value::Array(blocks)) => {
            for b in blocks {
                if let Some(t) = b.get("text").and_then(Value::as_str) {
                    push_line(&mut system, t);
                }
            }
        }
        _ => {}
    }
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.into_iter().enumerate() {
        let entries = anthropic_entries(&m).map_err(|e| at(i, e))?;
        out.push(Incoming::new(m, entries));
    }
    Ok((system, Vec::new(), out))
}

fn at(i: usize, e: BadRequest) -> BadRequest {
    BadRequest(format!("messages[{i}]: {}", e.0))
}

fn push_line(s: &mut String, t: &str) {
    if !s.is_empty() && !t.is_empty() {
        s.push('\n');
    }
    s.push_str(t);
}

// ---------------------------------------------------------------------------------------------
// OpenAI Chat Completions

/// Text of an OpenAI `content`: a string, or the `text` parts of an array.
fn openai_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let mut s = String::new();
            for p in parts {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    s.push_str(t);
                }
            }
            s
        }
        _ => String::new(),
    }
}

/// OpenAI `content` as SOBA blocks: text and images (`image_url`, kept as the URL).
fn openai_blocks(content: Option<&Value>) -> Vec<Value> {
    match content {
        Some(Value::String(s)) if !s.is_empty() => vec![text_block(s)],
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match p.get("type").and_then(Value::as_str) {
                Some("text") | Some("input_text") => p
                    .get("text")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                    .map(text_block),
                Some("image_url") => {
                    let url = p.pointer("/image_url/url").and_then(Value::as_str)?;
                    let media_type = url
                        .strip_prefix("data:")
                        .and_then(|r| r.split(';').next())
                        .map(str::to_string);
                    Some(json!({"type": "image", "media_type": media_type, "data": url}))
                }
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn openai_entries(m: &Value) -> Result<Vec<Value>, BadRequest> {
    let role = m
        .get("role")
        .and_then(Value::as_str)
        .ok_or_else(|| BadRequest("a message has no `role`".into()))?;
    Ok(match role {
        "user" | "system" | "developer" => {
            let role = if role == "user" { "user" } else { "system" };
            vec![message_entry(role, openai_blocks(m.get("content")))]
        }
        "assistant" => vec![openai_assistant_entry(m)],
        "tool" | "function" => {
            let call_id = m
                .get("tool_call_id")
                .or_else(|| m.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| BadRequest("a `tool` message has no `tool_call_id`".into()))?;
            let text = openai_text(m.get("content"));
            vec![tool_result_entry(call_id, vec![text_block(&text)], false)]
        }
        other => {
            return Err(BadRequest(format!(
                "unknown role `{other}`; expected system, developer, user, assistant or tool"
            )))
        }
    })
}

/// An OpenAI assistant message (a request's, or a reply's `choices[0].message`) as an entry.
fn openai_assistant_entry(m: &Value) -> Value {
    let mut content = openai_blocks(m.get("content"));
    if let Some(Value::Array(calls)) = m.get("tool_calls") {
        for c in calls {
            let f = c.get("function").cloned().unwrap_or(Value::Null);
            content.push(json!({
                "type": "tool_call",
                "id": c.get("id").and_then(Value::as_str).unwrap_or(""),
                "name": f.get("name").and_then(Value::as_str).unwrap_or(""),
                "input": parse_arguments(f.get("arguments").and_then(Value::as_str).unwrap_or("")),
            }));
        }
    }
    message_entry("assistant", content)
}

fn blocks_text(content: &[ContentBlock]) -> String {
    soba_core::session::entry::blocks_text(content)
}

/// SOBA messages as OpenAI Chat messages.
pub fn render_openai(messages: &[ModelMessage]) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len());
    let mut pending_images: Vec<Value> = Vec::new();
    for m in messages {
        if m.role != "tool" && !pending_images.is_empty() {
            out.push(json!({"role": "user", "content": std::mem::take(&mut pending_images)}));
        }
        match m.role.as_str() {
            "assistant" => {
                let text = blocks_text(&m.content);
                let calls: Vec<Value> = m
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::ToolCall {
                            id, name, input, ..
                        } => Some(json!({
                            "id": id, "type": "function",
                            "function": {"name": name, "arguments": arguments_text(input)},
                        })),
                        _ => None,
                    })
                    .collect();
                let mut msg = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::String(text) }});
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                }
                out.push(msg);
            }
            "tool" => {
                let mut text = blocks_text(&m.content);
                if m.is_error == Some(true) && !text.starts_with("no result") {
                    text = format!("[error] {text}");
                }
                for b in &m.content {
                    if let ContentBlock::Image {
                        media_type, data, ..
                    } = b
                    {
                        pending_images.push(json!({"type": "image_url", "image_url": {"url": image_url(media_type.as_deref(), data.as_deref())}}));
                    }
                }
                out.push(json!({"role": "tool", "tool_call_id": m.tool_call_id.clone().unwrap_or_default(), "content": text}));
            }
            role => {
                let has_images = m
                    .content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Image { .. }));
                let content = if has_images {
                    Value::Array(
                        m.content
                            .iter()
                            .filter_map(|b| match b {
                                ContentBlock::Text { text, .. } => {
                                    Some(json!({"type": "text", "text": text}))
                                }
                                ContentBlock::Image { media_type, data, .. } => Some(
                                    json!({"type": "image_url", "image_url": {"url": image_url(media_type.as_deref(), data.as_deref())}}),
                                ),
                                _ => None,
                            })
                            .collect(),
                    )
                } else {
                    Value::String(blocks_text(&m.content))
                };
                let role = if role == "system" { "system" } else { "user" };
                out.push(json!({"role": role, "content": content}));
            }
        }
    }
    if !pending_images.is_empty() {
        out.push(json!({"role": "user", "content": pending_images}));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Anthropic Messages

fn anthropic_image(b: &Value) -> Option<Value> {
    let source = b.get("source")?;
    let media_type = source.get("media_type").and_then(Value::as_str);
    let data = source
        .get("data")
        .or_else(|| source.get("url"))
        .and_then(Value::as_str);
    Some(json!({"type": "image", "media_type": media_type, "data": data}))
}

/// Anthropic content (a string or blocks) as SOBA blocks; `tool_use` becomes `tool_call`.
fn anthropic_blocks(blocks: &[Value]) -> Vec<Value> {
    blocks
        .iter()
        .filter_map(|b| match b.get("type").and_then(Value::as_str) {
            Some("text") => b
                .get("text")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .map(text_block),
            // The signature is what lets the API take earlier thinking back: it is kept (the
            // log stores it opaque). `cache_control` and other markers agents move between
            // requests are not, so a resent message still matches by content.
            Some("thinking") => b.get("thinking").and_then(Value::as_str).map(|t| {
                let mut block = json!({"type": "thinking", "thinking": t});
                if let Some(sig) = b
                    .get("signature")
                    .filter(|s| s.as_str().is_some_and(|s| !s.is_empty()))
                {
                    block["signature"] = sig.clone();
                }
                block
            }),
            Some("redacted_thinking") => Some(b.clone()),
            Some("tool_use") | Some("server_tool_use") => Some(json!({
                "type": "tool_call",
                "id": b.get("id").and_then(Value::as_str).unwrap_or(""),
                "name": b.get("name").and_then(Value::as_str).unwrap_or(""),
                "input": b.get("input").cloned().unwrap_or_else(|| json!({})),
            })),
            Some("image") => anthropic_image(b),
            _ => None,
        })
        .collect()
}

fn anthropic_result_content(content: Option<&Value>) -> Vec<Value> {
    match content {
        Some(Value::String(s)) => vec![text_block(s)],
        Some(Value::Array(blocks)) => anthropic_blocks(blocks),
        _ => Vec::new(),
    }
}

fn anthropic_entries(m: &Value) -> Result<Vec<Value>, BadRequest> {
    let role = m
        .get("role")
        .and_then(Value::as_str)
        .ok_or_else(|| BadRequest("a message has no `role`".into()))?;
    if role != "user" && role != "assistant" {
        return Err(BadRequest(format!(
            "unknown role `{role}`; Anthropic messages are `user` or `assistant`"
        )));
    }
    let blocks = match m.get("content") {
        Some(Value::String(s)) => vec![text_block(s)],
        Some(Value::Array(b)) => b.clone(),
        _ => return Err(BadRequest("a message has no `content`".into())),
    };
    if role == "assistant" {
        return Ok(vec![message_entry("assistant", anthropic_blocks(&blocks))]);
    }
    // A user turn: its tool results become `tool_result` entries; the other blocks between
    // them one user message each run.
    let mut entries = Vec::new();
    let mut run: Vec<Value> = Vec::new();
    for b in &blocks {
        if b.get("type").and_then(Value::as_str) == Some("tool_result") {
            if !run.is_empty() {
                entries.push(message_entry(
                    "user",
                    anthropic_blocks(&std::mem::take(&mut run)),
                ));
            }
            let id = b
                .get("tool_use_id")
                .and_then(Value::as_str)
                .ok_or_else(|| BadRequest("a `tool_result` block has no `tool_use_id`".into()))?;
            let is_error = b.get("is_error").and_then(Value::as_bool).unwrap_or(false);
            entries.push(tool_result_entry(
                id,
                anthropic_result_content(b.get("content")),
                is_error,
            ));
        } else {
            run.push(b.clone());
        }
    }
    if !run.is_empty() || entries.is_empty() {
        entries.push(message_entry("user", anthropic_blocks(&run)));
    }
    Ok(entries)
}

fn anthropic_out_blocks(content: &[ContentBlock]) -> Vec<Value> {
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text, .. } if !text.is_empty() => Some(text_block(text)),
            ContentBlock::ToolCall {
                id, name, input, ..
            } => Some(json!({"type": "tool_use", "id": id, "name": name, "input": input})),
            ContentBlock::Image {
                media_type, data, ..
            } => Some(match data.as_deref() {
                Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                    json!({"type": "image", "source": {"type": "url", "url": url}})
                }
                _ => json!({"type": "image", "source": {
                    "type": "base64",
                    "media_type": media_type.as_deref().unwrap_or("image/png"),
                    "data": data.as_deref().unwrap_or(""),
                }}),
            }),
            // Earlier thinking is accepted only with its signature; a redacted_thinking (or
            // other opaque) block goes back as it came.
            ContentBlock::Thinking { .. } | ContentBlock::Opaque(_) => {
                let v = serde_json::to_value(b).ok()?;
                let signed = v
                    .get("signature")
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty());
                (signed || matches!(b, ContentBlock::Opaque(_))).then_some(v)
            }
            _ => None,
        })
        .collect()
}

/// One SOBA message as an Anthropic turn (role, blocks); merging turns is the caller's part.
pub fn render_anthropic_one(m: &ModelMessage) -> Value {
    match m.role.as_str() {
        "assistant" => json!({"role": "assistant", "content": anthropic_out_blocks(&m.content)}),
        "tool" => json!({"role": "user", "content": [{
            "type": "tool_result",
            "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
            "content": anthropic_out_blocks(&m.content),
            "is_error": m.is_error.unwrap_or(false),
        }]}),
        _ => json!({"role": "user", "content": anthropic_out_blocks(&m.content)}),
    }
}

/// Anthropic alternates roles: consecutive messages of one role become one turn.
pub fn merge_anthropic_turns(messages: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len());
    for m in messages {
        let same_role = out
            .last()
            .is_some_and(|prev: &Value| prev.get("role") == m.get("role"));
        if !same_role {
            out.push(m);
            continue;
        }
        let prev = out.last_mut().expect("checked above");
        let mut blocks = content_as_blocks(prev.get("content"));
        blocks.extend(content_as_blocks(m.get("content")));
        prev["content"] = Value::Array(blocks);
    }
    out
}

fn content_as_blocks(content: Option<&Value>) -> Vec<Value> {
    match content {
        Some(Value::String(s)) => vec![text_block(s)],
        Some(Value::Array(b)) => b.clone(),
        _ => Vec::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Replies

fn openai_usage(u: &Value) -> Option<Usage> {
    let prompt = u.get("prompt_tokens")?.as_u64()?;
    let cached = u
        .pointer("/prompt_tokens_details/cached_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    Some(Usage {
        input: prompt.saturating_sub(cached),
        cache_read: cached,
        cache_write: 0,
        output: u
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    })
}

fn anthropic_usage(u: &Value, into: &mut Usage) -> bool {
    let mut any = false;
    let mut set = |key: &str, slot: &mut u64| {
        if let Some(v) = u.get(key).and_then(Value::as_u64) {
            *slot = v;
            any = true;
        }
    };
    set("input_tokens", &mut into.input);
    set("cache_read_input_tokens", &mut into.cache_read);
    set("cache_creation_input_tokens", &mut into.cache_write);
    set("output_tokens", &mut into.output);
    any
}

/// A whole (non-streamed) reply body.
pub fn parse_reply(api: Api, body: &[u8]) -> Reply {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Reply::default();
    };
    match api {
        Api::OpenAiChat => {
            let msg = v.pointer("/choices/0/message");
            Reply {
                wants_tools: msg
                    .and_then(|m| m.get("tool_calls"))
                    .and_then(Value::as_array)
                    .is_some_and(|c| !c.is_empty()),
                entries: msg.map(openai_assistant_entry).into_iter().collect(),
                usage: v.get("usage").and_then(openai_usage),
                response_id: None,
            }
        }
        Api::Anthropic => {
            let blocks = v
                .get("content")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let mut usage = Usage::default();
            let has_usage = v
                .get("usage")
                .is_some_and(|u| anthropic_usage(u, &mut usage));
            Reply {
                wants_tools: v.get("stop_reason").and_then(Value::as_str) == Some("tool_use"),
                entries: vec![message_entry("assistant", anthropic_blocks(&blocks))],
                usage: has_usage.then_some(usage),
                response_id: None,
            }
        }
        Api::OpenAiResponses => self::responses::parse_reply(&v),
    }
}

/// Rebuilds the reply from a stream's bytes as they pass through to the client, and tells
/// whether the stream carried a whole reply.
#[derive(Debug)]
pub struct StreamTap {
    api: Api,
    parser: SseParser,
    /// The provider's end of a reply was seen: `[DONE]` or a `finish_reason` (OpenAI),
    /// `message_stop` (Anthropic), `response.completed` (Responses).
    ended: bool,
    /// Why the events do not make a whole reply, first problem first.
    fault: Option<String>,
    events: usize,
    /// Content blocks by index (Anthropic) or text + tool calls by index (OpenAI), in order.
    blocks: Vec<Value>,
    /// Tool-call input JSON text being streamed, by block index.
    partial_json: Vec<String>,
    text: String,
    usage: Usage,
    has_usage: bool,
    wants_tools: bool,
    saw_any: bool,
    responses: self::responses::ResponsesTap,
}

impl StreamTap {
    pub fn new(api: Api) -> Self {
        StreamTap {
            api,
            parser: SseParser::new(),
            ended: false,
            fault: None,
            events: 0,
            blocks: Vec::new(),
            partial_json: Vec::new(),
            text: String::new(),
            usage: Usage::default(),
            has_usage: false,
            wants_tools: false,
            saw_any: false,
            responses: Default::default(),
        }
    }

    fn slot(&mut self, index: usize) -> &mut Value {
        while self.blocks.len() <= index {
            self.blocks.push(Value::Null);
            self.partial_json.push(String::new());
        }
        &mut self.blocks[index]
    }

    /// The next bytes of the stream, as they arrived.
    pub fn feed(&mut self, bytes: &[u8]) {
        for e in self.parser.feed(bytes) {
            self.event(&e);
        }
    }

    pub fn event(&mut self, e: &SseEvent) {
        self.events += 1;
        if self.api != Api::Anthropic && e.data.trim() == "[DONE]" {
            // Some OpenAI-compatible servers close a response stream with `[DONE]` too; there
            // it ends nothing: only `response.completed` does.
            self.ended |= self.api == Api::OpenAiChat;
            return;
        }
        let Ok(v) = serde_json::from_str::<Value>(&e.data) else {
            self.fault.get_or_insert_with(|| {
                format!("event {} is not JSON ({} bytes)", self.events, e.data.len())
            });
            return;
        };
        if let Some(kind) = stream_error(&v) {
            self.fault
                .get_or_insert_with(|| format!("the upstream sent an error event ({kind})"));
            return;
        }
        self.saw_any = true;
        match self.api {
            Api::OpenAiChat => self.openai_chunk(&v),
            Api::Anthropic => self.anthropic_event(&v),
            Api::OpenAiResponses => self.responses_event(&v),
        }
    }

    fn responses_event(&mut self, v: &Value) {
        match v.get("type").and_then(Value::as_str) {
            Some("response.completed") => self.ended = true,
            // The response ended short of its output limit or filtered: what was streamed is
            // not the whole reply.
            Some("response.incomplete") => {
                let why = v
                    .pointer("/response/incomplete_details/reason")
                    .and_then(Value::as_str)
                    .unwrap_or("no reason given");
                self.fault
                    .get_or_insert_with(|| format!("the response ended incomplete ({why})"));
            }
            _ => {}
        }
        self.responses.event(v);
    }

    fn openai_chunk(&mut self, v: &Value) {
        // Servers that leave out `[DONE]` still end a reply with a finish reason.
        if v.pointer("/choices/0/finish_reason")
            .is_some_and(|r| !r.is_null())
        {
            self.ended = true;
        }
        if let Some(u) = v.get("usage").and_then(openai_usage) {
            self.usage = u;
            self.has_usage = true;
        }
        let Some(delta) = v.pointer("/choices/0/delta") else {
            return;
        };
        if let Some(t) = delta.get("content").and_then(Value::as_str) {
            self.text.push_str(t);
        }
        if let Some(Value::Array(calls)) = delta.get("tool_calls") {
            self.wants_tools = true;
            for c in calls {
                let index = c.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
                let slot = self.slot(index);
                if slot.is_null() {
                    *slot = json!({"type": "tool_call", "id": "", "name": "", "input": {}});
                }
                if let Some(id) = c.get("id").and_then(Value::as_str) {
                    slot["id"] = Value::String(id.to_string());
                }
                if let Some(n) = c.pointer("/function/name").and_then(Value::as_str) {
                    let name = format!("{}{n}", slot["name"].as_str().unwrap_or(""));
                    slot["name"] = Value::String(name);
                }
                if let Some(a) = c.pointer("/function/arguments").and_then(Value::as_str) {
                    self.partial_json[index].push_str(a);
                }
            }
        }
    }

    fn anthropic_event(&mut self, v: &Value) {
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
        match v.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                if let Some(u) = v.pointer("/message/usage") {
                    self.has_usage |= anthropic_usage(u, &mut self.usage);
                }
            }
            Some("content_block_start") => {
                let block = v.get("content_block").cloned().unwrap_or(Value::Null);
                *self.slot(index) = block;
            }
            Some("content_block_delta") => {
                let delta = v.get("delta").cloned().unwrap_or(Value::Null);
                let slot = self.slot(index);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let t = format!(
                            "{}{}",
                            slot.get("text").and_then(Value::as_str).unwrap_or(""),
                            delta.get("text").and_then(Value::as_str).unwrap_or("")
                        );
                        slot["text"] = Value::String(t);
                    }
                    Some("signature_delta") => {
                        let t = format!(
                            "{}{}",
                            slot.get("signature").and_then(Value::as_str).unwrap_or(""),
                            delta.get("signature").and_then(Value::as_str).unwrap_or("")
                        );
                        slot["signature"] = Value::String(t);
                    }
                    Some("thinking_delta") => {
                        let t = format!(
                            "{}{}",
                            slot.get("thinking").and_then(Value::as_str).unwrap_or(""),
                            delta.get("thinking").and_then(Value::as_str).unwrap_or("")
                        );
                        slot["thinking"] = Value::String(t);
                    }
                    Some("input_json_delta") => {
                        let p = delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        self.partial_json[index].push_str(p);
                    }
                    _ => {}
                }
            }
            Some("message_stop") => self.ended = true,
            Some("message_delta") => {
                if let Some(u) = v.get("usage") {
                    self.has_usage |= anthropic_usage(u, &mut self.usage);
                }
                if v.pointer("/delta/stop_reason").and_then(Value::as_str) == Some("tool_use") {
                    self.wants_tools = true;
                }
            }
            _ => {}
        }
    }

    /// The provider's id of the response being streamed, once the stream has named it
    /// (Responses API).
    pub fn response_id(&self) -> Option<&str> {
        match self.api {
            Api::OpenAiResponses => self.responses.response_id(),
            Api::OpenAiChat | Api::Anthropic => None,
        }
    }

    /// The reply the stream carried, or why it carried no whole reply (the stream ended early,
    /// or its events were malformed): such a reply is not recorded.
    pub fn finish(mut self) -> Result<Reply, String> {
        if let Some(fault) = self.fault.take() {
            return Err(fault);
        }
        if self.parser.has_partial_event() {
            return Err("the stream ended in the middle of an event".into());
        }
        if !self.ended {
            return Err(format!(
                "the stream ended without {}",
                match self.api {
                    Api::OpenAiChat => "`[DONE]`",
                    Api::Anthropic => "`message_stop`",
                    Api::OpenAiResponses => "`response.completed`",
                }
            ));
        }
        if !self.saw_any {
            return Ok(Reply::default());
        }
        for (i, json) in self.partial_json.iter().enumerate() {
            if !json.is_empty() {
                self.blocks[i]["input"] = parse_arguments(json);
            }
        }
        let content = match self.api {
            Api::OpenAiChat => {
                let mut content = Vec::new();
                if !self.text.is_empty() {
                    content.push(text_block(&self.text));
                }
                content.extend(self.blocks.into_iter().filter(|b| !b.is_null()));
                content
            }
            Api::Anthropic => anthropic_blocks(&self.blocks),
            Api::OpenAiResponses => return Ok(self.responses.finish()),
        };
        Ok(Reply {
            entries: vec![message_entry("assistant", content)],
            usage: self.has_usage.then_some(self.usage),
            wants_tools: self.wants_tools,
            response_id: None,
        })
    }
}

/// The kind of an error a stream carries as an event (Anthropic `event: error`; OpenAI-style
/// servers put an `error` object in a chunk; the Responses API sends an `error` event with its
/// `code` at the top, or `response.failed` with the response's `error`).
fn stream_error(v: &Value) -> Option<String> {
    let kind = |e: &Value, keys: &[&str]| {
        keys.iter()
            .find_map(|k| e.get(*k).and_then(Value::as_str))
            .unwrap_or("unknown")
            .to_string()
    };
    match v.get("type").and_then(Value::as_str) {
        Some("error") => Some(match v.get("error").filter(|e| e.is_object()) {
            Some(error) => kind(error, &["type", "code"]),
            None => kind(v, &["code"]),
        }),
        Some("response.failed") => Some(format!(
            "response.failed: {}",
            v.pointer("/response/error")
                .map_or_else(|| "unknown".to_string(), |e| kind(e, &["code", "type"]))
        )),
        _ => v
            .get("error")
            .filter(|e| e.is_object())
            .map(|error| kind(error, &["type", "code"])),
    }
}

/// How a stream passed on to the client ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEnd {
    /// Every byte reached the client and the events made a whole reply.
    Complete,
    /// Every byte reached the client, but the events were not a whole reply.
    Malformed { bytes: u64, reason: String },
    /// The upstream connection failed mid-way.
    Broke { bytes: u64, reason: String },
    /// The client stopped reading.
    ClientGone { bytes: u64 },
}

impl StreamEnd {
    /// What the request line says of it (nothing for a complete stream). `recording`: the
    /// stream's reply is recorded when whole.
    pub fn describe(&self, recording: bool) -> Option<String> {
        let not_recorded = if recording {
            "; reply not recorded"
        } else {
            ""
        };
        match self {
            StreamEnd::Complete => None,
            StreamEnd::Malformed { bytes, reason } => Some(format!(
                "stream malformed after {bytes} bytes: {reason}{not_recorded}"
            )),
            StreamEnd::Broke { bytes, reason } => Some(format!(
                "stream broke after {bytes} bytes: {reason}{not_recorded}"
            )),
            StreamEnd::ClientGone { bytes } => Some(format!(
                "the client stopped reading after {bytes} bytes{not_recorded}"
            )),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/// The answer to a history that does not fit the budget even after compaction, worded as the
/// provider words its own overflow, so the agent's recovery (which often reads the figures)
/// runs: `tokens` of the history against `limit`, the most SOBA lets through. `detail` says
/// why no compaction made it fit.
pub fn overflow_body(api: Api, tokens: u64, limit: u64, detail: &str) -> Value {
    match api {
        Api::OpenAiChat => json!({"error": {
            "message": format!("This model's maximum context length is {limit} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages. (soba proxy: {detail})"),
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }}),
        Api::OpenAiResponses => json!({"error": {
            "message": format!("This model's maximum context length is {limit} tokens. However, your input resulted in {tokens} tokens. Please reduce the length of the input. (soba proxy: {detail})"),
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
            "param": "input",
        }}),
        Api::Anthropic => error_body(
            api,
            "invalid_request_error",
            &format!(
                "prompt is too long: {tokens} tokens > {limit} maximum (soba proxy: {detail})"
            ),
        ),
    }
}

/// An error body in the provider's own shape, so the agent reports it as it would a
/// provider's.
pub fn error_body(api: Api, kind: &str, message: &str) -> Value {
    match api {
        Api::OpenAiChat | Api::OpenAiResponses => {
            json!({"error": {"message": message, "type": kind, "code": kind}})
        }
        Api::Anthropic => json!({"type": "error", "error": {"type": kind, "message": message}}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_is_taken_out_of_the_body_and_put_back_in_its_place() {
        let body = json!({"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}], "stream": true});
        let chat = ChatRequest::parse(Api::OpenAiChat, body.to_string().as_bytes()).unwrap();
        assert_eq!(chat.body["messages"], json!([]), "not a second copy");
        let out = chat.with_messages(vec![json!({"role": "user", "content": "hi"})]);
        let keys: Vec<&String> = out.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["model", "messages", "stream"],
            "the key order the agent sent"
        );
        assert_eq!(out["messages"], body["messages"]);
    }

    #[test]
    fn only_creating_a_response_is_rewritten() {
        assert_eq!(Api::for_path("/v1/responses"), Some(Api::OpenAiResponses));
        assert_eq!(
            Api::for_path("/openai/v1/responses/"),
            Some(Api::OpenAiResponses)
        );
        // Reading, cancelling, compacting a stored response and counting input tokens pass
        // through.
        for path in [
            "/v1/responses/resp_1",
            "/v1/responses/resp_1/cancel",
            "/v1/responses/compact",
            "/v1/responses/input_tokens",
        ] {
            assert_eq!(Api::for_path(path), None, "{path}");
        }
    }

    #[test]
    fn an_unreadable_response_is_no_reply() {
        assert_eq!(
            parse_reply(Api::OpenAiResponses, b"not json"),
            Reply::default()
        );
    }

    #[test]
    fn signed_thinking_and_redacted_thinking_survive_the_round_trip_to_anthropic() {
        let body = json!({"model": "claude", "max_tokens": 5, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "plan", "signature": "sig=="},
                {"type": "redacted_thinking", "data": "opaque=="},
                {"type": "text", "text": "ok", "cache_control": {"type": "ephemeral"}},
            ]},
        ]});
        let r = ChatRequest::parse(Api::Anthropic, body.to_string().as_bytes()).unwrap();
        let entry = &r.messages[1].entries[0];
        assert_eq!(entry["content"][0]["signature"], "sig==");
        assert_eq!(entry["content"][1]["type"], "redacted_thinking");
        assert!(
            entry["content"][2].get("cache_control").is_none(),
            "moving markers do not change the content"
        );
        // Through the log's block type and back out as an Anthropic turn.
        let msg: ModelMessage =
            serde_json::from_value(json!({"role": "assistant", "content": entry["content"]}))
                .unwrap();
        let out = render_anthropic_one(&msg);
        assert_eq!(
            out["content"][0],
            json!({"type": "thinking", "thinking": "plan", "signature": "sig=="})
        );
        assert_eq!(
            out["content"][1],
            json!({"type": "redacted_thinking", "data": "opaque=="})
        );
        assert_eq!(out["content"][2]["text"], "ok");
    }

    fn tapped(api: Api, stream: &str) -> Result<Reply, String> {
        let mut tap = StreamTap::new(api);
        // Split mid-event: the tap reads bytes as they arrive.
        let (a, b) = stream.split_at(stream.len() / 2);
        tap.feed(a.as_bytes());
        tap.feed(b.as_bytes());
        tap.finish()
    }

    const OPENAI_CHUNK: &str = r#"data: {"choices":[{"index":0,"delta":{"content":"hello"}}]}

"#;

    #[test]
    fn an_openai_stream_is_whole_only_with_its_end() {
        let whole = format!("{OPENAI_CHUNK}data: [DONE]\n\n");
        let reply = tapped(Api::OpenAiChat, &whole).unwrap();
        assert_eq!(reply.entries[0]["content"][0]["text"], "hello");
        // A server that leaves out `[DONE]` still ends with a finish reason.
        let finished = r#"data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}

"#;
        assert!(tapped(Api::OpenAiChat, finished).is_ok());
        assert_eq!(
            tapped(Api::OpenAiChat, OPENAI_CHUNK).unwrap_err(),
            "the stream ended without `[DONE]`"
        );
        let cut = format!("{OPENAI_CHUNK}data: {{\"choices\":[");
        assert_eq!(
            tapped(Api::OpenAiChat, &cut).unwrap_err(),
            "the stream ended in the middle of an event"
        );
        let garbled = format!("{OPENAI_CHUNK}data: <html>bad gateway</html>\n\ndata: [DONE]\n\n");
        assert_eq!(
            tapped(Api::OpenAiChat, &garbled).unwrap_err(),
            "event 2 is not JSON (24 bytes)"
        );
        let error = format!("{OPENAI_CHUNK}data: {{\"error\":{{\"code\":\"server_error\",\"message\":\"x\"}}}}\n\ndata: [DONE]\n\n");
        assert_eq!(
            tapped(Api::OpenAiChat, &error).unwrap_err(),
            "the upstream sent an error event (server_error)"
        );
    }

    #[test]
    fn an_anthropic_stream_is_whole_only_with_message_stop() {
        let events = [
            r#"{"type":"message_start","message":{"usage":{"input_tokens":5}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}"#,
        ];
        let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
        assert_eq!(
            tapped(Api::Anthropic, &body).unwrap_err(),
            "the stream ended without `message_stop`"
        );
        let whole = format!("{body}event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n");
        let reply = tapped(Api::Anthropic, &whole).unwrap();
        assert_eq!(reply.entries[0]["content"][0]["text"], "hi");
        assert_eq!(reply.usage.unwrap().output, 2);
        let overloaded = format!("{body}event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}}}\n\n");
        assert_eq!(
            tapped(Api::Anthropic, &overloaded).unwrap_err(),
            "the upstream sent an error event (overloaded_error)"
        );
    }

    #[test]
    fn how_a_stream_ended_is_told_and_a_complete_one_says_nothing() {
        assert_eq!(StreamEnd::Complete.describe(true), None);
        let broke = StreamEnd::Broke {
            bytes: 512,
            reason: "connection reset".into(),
        };
        assert_eq!(
            broke.describe(true).unwrap(),
            "stream broke after 512 bytes: connection reset; reply not recorded"
        );
        assert_eq!(
            broke.describe(false).unwrap(),
            "stream broke after 512 bytes: connection reset"
        );
        let malformed = StreamEnd::Malformed {
            bytes: 90,
            reason: "the stream ended without `[DONE]`".into(),
        };
        assert_eq!(
            malformed.describe(true).unwrap(),
            "stream malformed after 90 bytes: the stream ended without `[DONE]`; reply not recorded"
        );
        assert_eq!(
            StreamEnd::ClientGone { bytes: 7 }.describe(true).unwrap(),
            "the client stopped reading after 7 bytes; reply not recorded"
        );
    }

    #[test]
    fn an_overflow_is_worded_as_each_provider_words_it() {
        let openai = overflow_body(Api::OpenAiChat, 12000, 9808, "context budget exceeded");
        assert_eq!(openai["error"]["code"], "context_length_exceeded");
        assert_eq!(openai["error"]["type"], "invalid_request_error");
        assert_eq!(openai["error"]["param"], "messages");
        let message = openai["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("This model's maximum context length is 9808 tokens. However, your messages resulted in 12000 tokens."),
            "{message}"
        );
        assert!(!message.contains("prompt is too long"), "{message}");
        assert!(crate::proxy::overflow::parse(400, openai.to_string().as_bytes()).is_some());
        let anthropic = overflow_body(Api::Anthropic, 12000, 9808, "context budget exceeded");
        assert_eq!(anthropic["type"], "error");
        assert!(anthropic["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("prompt is too long: 12000 tokens > 9808 maximum"));
        let responses = overflow_body(Api::OpenAiResponses, 12000, 9808, "context budget exceeded");
        assert_eq!(
            (
                &responses["error"]["code"],
                &responses["error"]["type"],
                &responses["error"]["param"]
            ),
            (
                &json!("context_length_exceeded"),
                &json!("invalid_request_error"),
                &json!("input")
            )
        );
        assert!(responses["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("This model's maximum context length is 9808 tokens. However, your input resulted in 12000 tokens."));
        assert!(crate::proxy::overflow::parse(400, responses.to_string().as_bytes()).is_some());
    }

    fn responses_stream(end: &str) -> String {
        let item = json!({"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
            "content": [{"type": "output_text", "text": "hi", "annotations": []}]});
        let events = [
            json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ];
        let mut body: String = events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
            .collect();
        body.push_str(end);
        body
    }

    #[test]
    fn a_responses_stream_is_whole_only_with_response_completed() {
        let completed = json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed",
            "output": [], "usage": {"input_tokens": 5, "output_tokens": 2}}});
        let whole = responses_stream(&format!("event: response.completed\ndata: {completed}\n\n"));
        let reply = tapped(Api::OpenAiResponses, &whole).unwrap();
        assert_eq!(reply.entries.len(), 1);
        assert_eq!(reply.response_id.as_deref(), Some("resp_1"));
        // `[DONE]` after the end is tolerated; it ends nothing by itself.
        assert!(tapped(Api::OpenAiResponses, &format!("{whole}data: [DONE]\n\n")).is_ok());
        assert_eq!(
            tapped(Api::OpenAiResponses, &responses_stream("data: [DONE]\n\n")).unwrap_err(),
            "the stream ended without `response.completed`"
        );
        let failed = json!({"type": "response.failed", "response": {"id": "resp_1", "status": "failed",
            "error": {"code": "server_error", "message": "x"}}});
        assert_eq!(
            tapped(
                Api::OpenAiResponses,
                &responses_stream(&format!("data: {failed}\n\n"))
            )
            .unwrap_err(),
            "the upstream sent an error event (response.failed: server_error)"
        );
        let error = json!({"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": null});
        assert_eq!(
            tapped(
                Api::OpenAiResponses,
                &responses_stream(&format!("event: error\ndata: {error}\n\n"))
            )
            .unwrap_err(),
            "the upstream sent an error event (rate_limit_exceeded)"
        );
        let incomplete = json!({"type": "response.incomplete", "response": {"id": "resp_1", "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"}}});
        assert_eq!(
            tapped(
                Api::OpenAiResponses,
                &responses_stream(&format!("data: {incomplete}\n\n"))
            )
            .unwrap_err(),
            "the response ended incomplete (max_output_tokens)"
        );
    }
}
