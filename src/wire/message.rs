//! What every provider format maps to and from: the log entries of one provider message, the
//! messages of an upstream request before they take a provider's shape, a reply, and why a
//! request cannot be read.

use serde_json::{json, Value};

use soba_core::session::entry::Usage;
use soba_core::session::view::ModelMessage;

/// Why a request body could not be read as a chat request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadRequest(pub String);

/// One message of the incoming history, with the log entries it stands for.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    /// The message as the agent sent it (returned upstream byte for byte when the model input
    /// keeps it whole).
    pub raw: Value,
    /// Entries for `soba/session/append`, without `id`, `parentId` and `ts`.
    pub entries: Vec<Value>,
    /// [`super::fingerprint::content_fingerprint`] of `entries`, computed once when the request is read:
    /// the conversation and the registry both match the message by it.
    pub fingerprint: u64,
}

impl Incoming {
    pub fn new(raw: Value, entries: Vec<Value>) -> Incoming {
        let fingerprint = super::fingerprint::content_fingerprint(&entries);
        Incoming {
            raw,
            entries,
            fingerprint,
        }
    }
}

/// What the proxy keeps of a reply: its assistant entries (without usage; one per message the
/// agent will resend: one for a chat reply, one per output item for a response), the provider
/// usage, and whether the model asked for tools (the turn goes on) or finished. No entries: no
/// complete reply to record.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reply {
    pub entries: Vec<Value>,
    pub usage: Option<Usage>,
    pub wants_tools: bool,
    /// The provider's id of the response (Responses API), which a later request may continue
    /// with `previous_response_id`.
    pub response_id: Option<String>,
}

pub fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

pub fn message_entry(role: &str, content: Vec<Value>) -> Value {
    json!({"type": "message", "role": role, "content": content})
}

pub fn tool_result_entry(call_id: &str, content: Vec<Value>, is_error: bool) -> Value {
    json!({"type": "tool_result", "callId": call_id, "content": content, "isError": is_error})
}

/// `input` of a tool call from OpenAI's `arguments` text (kept as a string when not JSON).
pub fn parse_arguments(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_string()))
}

pub fn image_url(media_type: Option<&str>, data: Option<&str>) -> String {
    let data = data.unwrap_or("");
    if data.starts_with("data:") || data.starts_with("http://") || data.starts_with("https://") {
        data.to_string()
    } else {
        format!(
            "data:{};base64,{data}",
            media_type.unwrap_or("application/octet-stream")
        )
    }
}

pub fn arguments_text(input: &Value) -> String {
    match input {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One message of the upstream request, before it is put into the provider's shape.
#[derive(Debug, Clone, PartialEq)]
pub enum Outgoing {
    /// The agent's own message, kept whole by the model input: sent byte for byte.
    Raw(Value),
    /// A message SOBA's model input made or changed (the capsule, a synthesized or shortened
    /// result, a message the cut divided): rendered from the model input.
    Rendered(ModelMessage),
}
