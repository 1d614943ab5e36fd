//! The OpenAI Responses API (`POST /v1/responses`, Codex's wire format) at the proxy's edge:
//! `instructions`, leading developer messages and `input` items split into the agent's fixed
//! part and its history; each item turned into the session-log entries it stands for; SOBA's
//! model input rendered back into items; a reply (whole, or streamed as `response.*` events)
//! turned into the entries the agent will resend. Pure: JSON in, JSON out.
//!
//! One input item is one incoming message, so an item the model input keeps whole goes back
//! byte for byte. A reply's output items become one entry each, normalized the way agents
//! resend them (Codex drops the provider's item `id`s and `status`, the SDKs keep them), so the
//! resent history matches what was recorded.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Map, Value};

use super::message::{
    arguments_text, image_url, message_entry, parse_arguments, text_block, tool_result_entry,
    BadRequest, Incoming, Outgoing, Reply,
};
use soba_core::session::entry::{ContentBlock, Usage};
use soba_core::session::view::ModelMessage;

/// The provider field on a `tool_call` block that says which Responses item made the call,
/// when it is not a `function_call`: its result must go back as the matching output item.
const CALL_ITEM_FIELD: &str = "responsesItem";

/// The parts of a Responses request the proxy reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsesInput {
    /// `instructions` and the text of the leading developer/system messages.
    pub system: String,
    /// The leading developer/system items, sent first as they came.
    pub preamble: Vec<Value>,
    pub messages: Vec<Incoming>,
}

/// Read `instructions` and `input` (text, or a list of items). The items are taken out of
/// `body` (an empty list is left in their place), not copied: a request's history is read once.
pub fn parse_input(body: &mut Map<String, Value>) -> Result<ResponsesInput, BadRequest> {
    let mut system = String::new();
    match body.get("instructions") {
        Some(Value::String(s)) => system.push_str(s),
        None | Some(Value::Null) => {}
        Some(_) => {
            return Err(BadRequest(
                "`instructions` must be a string; send the system prompt as text".into(),
            ))
        }
    }
    let items = match body.get_mut("input") {
        Some(Value::String(text)) => vec![json!({
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": text}],
        })],
        Some(Value::Array(items)) => std::mem::take(items),
        _ => {
            return Err(BadRequest(
                "the request has no `input`; send the conversation as `input` text or items".into(),
            ))
        }
    };
    let mut preamble = Vec::new();
    let mut messages = Vec::with_capacity(items.len());
    let mut leading = true;
    for (i, item) in items.into_iter().enumerate() {
        let role = item.get("role").and_then(Value::as_str);
        if leading && item_type(&item) == Some("message") && is_instructions_role(role) {
            push_line(&mut system, &content_text(item.get("content")));
            preamble.push(item);
            continue;
        }
        leading = false;
        let entries =
            item_entries(&item).map_err(|e| BadRequest(format!("input[{i}]: {}", e.0)))?;
        messages.push(Incoming::new(item, entries));
    }
    Ok(ResponsesInput {
        system,
        preamble,
        messages,
    })
}

/// The `previous_response_id` of a request that continues a history the provider stores.
pub fn previous_response_id(body: &Map<String, Value>) -> Option<&str> {
    body.get("previous_response_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// Whether the provider holds history the request builds on (`previous_response_id`, or a
/// provider-side `conversation`), so the request's `input` is only what follows it.
pub fn history_held_upstream(body: &Map<String, Value>) -> bool {
    previous_response_id(body).is_some() || body.get("conversation").is_some_and(|c| !c.is_null())
}

fn is_instructions_role(role: Option<&str>) -> bool {
    matches!(role, Some("developer" | "system"))
}

fn push_line(s: &mut String, t: &str) {
    if !s.is_empty() && !t.is_empty() {
        s.push('\n');
    }
    s.push_str(t);
}

/// An item's type; an item with a `role` and no `type` is a message (the SDKs' short form).
fn item_type(item: &Value) -> Option<&str> {
    match item.get("type").and_then(Value::as_str) {
        Some(t) => Some(t),
        None if item.get("role").is_some() => Some("message"),
        None => None,
    }
}

/// Text of a message's `content`: a string, or its parts' `text`.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            texts.join("\n")
        }
        _ => String::new(),
    }
}

/// Content parts as SOBA blocks: text (`input_text`, `output_text`, a refusal), images, and
/// any other part (`input_file`, …) kept whole.
fn content_blocks(content: Option<&Value>) -> Vec<Value> {
    match content {
        Some(Value::String(s)) => vec![text_block(s)],
        Some(Value::Array(parts)) => parts.iter().filter_map(content_block).collect(),
        _ => Vec::new(),
    }
}

fn content_block(part: &Value) -> Option<Value> {
    match part.get("type").and_then(Value::as_str) {
        Some("input_text" | "output_text" | "text") => {
            part.get("text").and_then(Value::as_str).map(text_block)
        }
        Some("refusal") => part.get("refusal").and_then(Value::as_str).map(text_block),
        Some("input_image") if part.get("image_url").is_some_and(Value::is_string) => {
            let url = part.get("image_url").and_then(Value::as_str).unwrap_or("");
            let media_type = url
                .strip_prefix("data:")
                .and_then(|r| r.split(';').next())
                .map(str::to_string);
            let mut block = json!({"type": "image", "media_type": media_type, "data": url});
            if let Some(detail) = part.get("detail") {
                block["detail"] = detail.clone();
            }
            Some(block)
        }
        // An image by `file_id`, a file, audio: returned as they came.
        Some(_) => Some(part.clone()),
        None => None,
    }
}

/// The entries one item stands for, without `id`, `parentId` and `ts`. Used for the agent's
/// input and for the provider's output alike, so a reply recorded from the output matches the
/// item the agent resends.
pub fn item_entries(item: &Value) -> Result<Vec<Value>, BadRequest> {
    let Some(kind) = item_type(item) else {
        return Err(BadRequest(
            "an item has no `type`; expected message, reasoning, function_call, function_call_output or another Responses item".into(),
        ));
    };
    let call_id = || {
        item.get("call_id")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .ok_or_else(|| BadRequest(format!("a `{kind}` item has no `call_id`")))
    };
    Ok(match kind {
        "message" => {
            let role = match item.get("role").and_then(Value::as_str) {
                Some("user") => "user",
                Some("assistant") => "assistant",
                Some("developer" | "system") => "system",
                Some(other) => {
                    return Err(BadRequest(format!(
                    "unknown message role `{other}`; expected user, assistant, developer or system"
                )))
                }
                None => return Err(BadRequest("a `message` item has no `role`".into())),
            };
            vec![message_entry(role, content_blocks(item.get("content")))]
        }
        "reasoning" => {
            // The summary is what a person (and the capsule) can read; the encrypted content is
            // what lets the API take the reasoning back, so it is kept as it came.
            let summary: Vec<&str> = item
                .get("summary")
                .and_then(Value::as_array)
                .map(|parts| {
                    parts
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .collect()
                })
                .unwrap_or_default();
            let mut block = json!({"type": "thinking", "thinking": summary.join("\n\n")});
            if let Some(e) = item.get("encrypted_content").filter(|e| e.is_string()) {
                block["encrypted_content"] = e.clone();
            }
            vec![message_entry("assistant", vec![block])]
        }
        "function_call" => {
            let arguments = item.get("arguments").and_then(Value::as_str).unwrap_or("");
            vec![message_entry(
                "assistant",
                vec![json!({
                    "type": "tool_call",
                    "id": call_id()?,
                    "name": item.get("name").and_then(Value::as_str).unwrap_or(""),
                    "input": parse_arguments(arguments),
                })],
            )]
        }
        "custom_tool_call" => vec![message_entry(
            "assistant",
            vec![json!({
                "type": "tool_call",
                "id": call_id()?,
                "name": item.get("name").and_then(Value::as_str).unwrap_or(""),
                // Free-form input (Codex's apply_patch body), the way SOBA stores it for
                // imported Codex sessions.
                "input": {"input": item.get("input").and_then(Value::as_str).unwrap_or("")},
                CALL_ITEM_FIELD: "custom_tool_call",
            })],
        )],
        "local_shell_call" => vec![message_entry(
            "assistant",
            vec![json!({
                "type": "tool_call",
                "id": call_id()?,
                "name": "local_shell",
                "input": item.get("action").cloned().unwrap_or_else(|| json!({})),
                CALL_ITEM_FIELD: "local_shell_call",
            })],
        )],
        "function_call_output" | "custom_tool_call_output" | "local_shell_call_output" => {
            // A local shell result names its call by `id` in older shapes.
            let id = match call_id() {
                Ok(id) => id,
                Err(e) => item
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|_| kind == "local_shell_call_output")
                    .ok_or(e)?,
            };
            let content = match item.get("output") {
                Some(Value::String(s)) => vec![text_block(s)],
                Some(Value::Array(_)) => content_blocks(item.get("output")),
                Some(other) if !other.is_null() => vec![text_block(&other.to_string())],
                _ => vec![text_block("")],
            };
            vec![tool_result_entry(id, content, false)]
        }
        // Anything else (web searches, image generation, MCP and computer calls, item
        // references, a type newer than this proxy) is kept whole. The provider's item `id` of
        // a call the model made is left out: agents resend such items without it.
        other => {
            let mut kept = item.clone();
            if other.ends_with("_call") {
                if let Some(o) = kept.as_object_mut() {
                    o.remove("id");
                }
            }
            let role = if other.ends_with("_output") || other == "item_reference" {
                "user"
            } else {
                "assistant"
            };
            vec![message_entry(role, vec![kept])]
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Rendering the model input

/// The output item type that answers a call item.
fn output_type(call_item: &str) -> &'static str {
    match call_item {
        "custom_tool_call" => "custom_tool_call_output",
        "local_shell_call" => "local_shell_call_output",
        _ => "function_call_output",
    }
}

/// The upstream `input`: the agent's own items where the model input keeps them whole, the
/// rest (the capsule, a shortened or synthesized result) rendered as items.
pub fn render_items(outgoing: Vec<Outgoing>) -> Vec<Value> {
    // Call id → the call's item type, so each result goes back as its call's output type.
    let mut calls: HashMap<String, String> = HashMap::new();
    let mut out = Vec::with_capacity(outgoing.len());
    for o in outgoing {
        match o {
            Outgoing::Raw(item) => {
                if let (Some(kind), Some(id)) = (
                    item_type(&item),
                    item.get("call_id").and_then(Value::as_str),
                ) {
                    if kind.ends_with("_call") {
                        calls.insert(id.to_string(), kind.to_string());
                    }
                }
                out.push(item);
            }
            Outgoing::Rendered(m) => render_message(&m, &mut calls, &mut out),
        }
    }
    out
}

fn render_message(m: &ModelMessage, calls: &mut HashMap<String, String>, out: &mut Vec<Value>) {
    match m.role.as_str() {
        "assistant" => render_assistant(&m.content, calls, out),
        "tool" => {
            let id = m.tool_call_id.clone().unwrap_or_default();
            let kind = output_type(calls.get(&id).map_or("function_call", String::as_str));
            let mut text = soba_core::session::entry::blocks_text(&m.content);
            if m.is_error == Some(true) && !text.starts_with("no result") {
                text = format!("[error] {text}");
            }
            let has_parts = m
                .content
                .iter()
                .any(|b| matches!(b, ContentBlock::Image { .. } | ContentBlock::Opaque(_)));
            let output = if has_parts && kind == "function_call_output" {
                Value::Array(input_parts(&m.content))
            } else {
                Value::String(text)
            };
            out.push(json!({"type": kind, "call_id": id, "output": output}));
        }
        role => {
            // As docs/protocol.md maps a system message (Codex's own go out raw, as `developer`).
            let role = if role == "system" { "system" } else { "user" };
            let mut parts = Vec::new();
            let mut whole_items = 0;
            for b in &m.content {
                match b {
                    // A whole item kept in a message (a provider tool's output): an item again.
                    ContentBlock::Opaque(o) if !is_content_part(o.block_type()) => {
                        if !parts.is_empty() {
                            out.push(message_item(role, std::mem::take(&mut parts)));
                        }
                        out.push(Value::Object(o.fields().clone()));
                        whole_items += 1;
                    }
                    other => parts.extend(input_parts(std::slice::from_ref(other))),
                }
            }
            if !parts.is_empty() || whole_items == 0 {
                out.push(message_item(role, parts));
            }
        }
    }
}

fn message_item(role: &str, content: Vec<Value>) -> Value {
    json!({"type": "message", "role": role, "content": content})
}

/// Content part types (as opposed to item types) among blocks kept whole.
fn is_content_part(kind: &str) -> bool {
    kind.starts_with("input_") || kind.starts_with("output_") || kind == "refusal"
}

/// Blocks as the input content parts of a user, developer or tool message.
fn input_parts(content: &[ContentBlock]) -> Vec<Value> {
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text, .. } => {
                Some(json!({"type": "input_text", "text": text}))
            }
            ContentBlock::Image {
                media_type,
                data,
                extra,
            } => {
                let mut part = json!({"type": "input_image", "image_url": image_url(media_type.as_deref(), data.as_deref())});
                if let Some(detail) = extra.get("detail") {
                    part["detail"] = detail.clone();
                }
                Some(part)
            }
            ContentBlock::Opaque(o) => Some(Value::Object(o.fields().clone())),
            ContentBlock::Thinking { .. } | ContentBlock::ToolCall { .. } => None,
        })
        .collect()
}

/// An assistant message as the items the model produced: reasoning, text, calls, in order.
fn render_assistant(
    content: &[ContentBlock],
    calls: &mut HashMap<String, String>,
    out: &mut Vec<Value>,
) {
    let mut text: Vec<Value> = Vec::new();
    let flush = |text: &mut Vec<Value>, out: &mut Vec<Value>| {
        if !text.is_empty() {
            out.push(message_item("assistant", std::mem::take(text)));
        }
    };
    for b in content {
        match b {
            ContentBlock::Text { text: t, .. } => {
                text.push(json!({"type": "output_text", "text": t}));
            }
            ContentBlock::Thinking { thinking, extra } => {
                flush(&mut text, out);
                let summary: Vec<Value> = if thinking.is_empty() {
                    Vec::new()
                } else {
                    vec![json!({"type": "summary_text", "text": thinking})]
                };
                let mut item = json!({"type": "reasoning", "summary": summary});
                if let Some(e) = extra.get("encrypted_content") {
                    item["encrypted_content"] = e.clone();
                }
                out.push(item);
            }
            ContentBlock::ToolCall {
                id,
                name,
                input,
                extra,
            } => {
                flush(&mut text, out);
                let kind = extra
                    .get(CALL_ITEM_FIELD)
                    .and_then(Value::as_str)
                    .unwrap_or("function_call");
                calls.insert(id.clone(), kind.to_string());
                out.push(match kind {
                    "custom_tool_call" => json!({
                        "type": "custom_tool_call", "call_id": id, "name": name,
                        "input": input.get("input").and_then(Value::as_str).unwrap_or(""),
                    }),
                    "local_shell_call" => json!({
                        "type": "local_shell_call", "call_id": id, "status": "completed",
                        "action": input,
                    }),
                    _ => json!({
                        "type": "function_call", "call_id": id, "name": name,
                        "arguments": arguments_text(input),
                    }),
                });
            }
            ContentBlock::Opaque(o) => {
                flush(&mut text, out);
                out.push(Value::Object(o.fields().clone()));
            }
            ContentBlock::Image { .. } => {}
        }
    }
    flush(&mut text, out);
}

// ---------------------------------------------------------------------------------------------
// Replies

/// Calls the agent runs itself: a reply that makes one continues the turn.
fn is_client_call(kind: &str) -> bool {
    matches!(
        kind,
        "function_call" | "custom_tool_call" | "local_shell_call" | "computer_call"
    )
}

/// `usage` of a response: `input_tokens` counts the cached ones too.
fn usage(u: &Value) -> Option<Usage> {
    let input = u.get("input_tokens")?.as_u64()?;
    let cached = u
        .pointer("/input_tokens_details/cached_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0)
        .min(input);
    Some(Usage {
        input: input - cached,
        cache_read: cached,
        cache_write: 0,
        output: u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0),
    })
}

/// The reply a completed response object carries, with its output items in `items`.
fn reply_of(response: &Value, items: &[Value]) -> Reply {
    let mut entries = Vec::with_capacity(items.len());
    let mut wants_tools = false;
    for item in items {
        wants_tools |= item_type(item).is_some_and(is_client_call);
        // An item this proxy cannot read is left out of the record, never out of the answer.
        if let Ok(e) = item_entries(item) {
            entries.extend(e);
        }
    }
    Reply {
        entries,
        usage: response.get("usage").and_then(usage),
        wants_tools,
        response_id: response
            .get("id")
            .and_then(Value::as_str)
            .map(str::to_string),
    }
}

/// A whole (non-streamed) response. A response that did not complete (`incomplete`,
/// `failed`, still `in_progress` in the background) is no reply to record.
pub fn parse_reply(v: &Value) -> Reply {
    if v.get("status").and_then(Value::as_str) != Some("completed") {
        return Reply::default();
    }
    let items = v
        .get("output")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    reply_of(v, &items)
}

/// Rebuilds the reply from a response stream's events: the output items as each is done, the
/// usage from `response.completed`. A stream that never says `response.completed` (cut off,
/// `response.failed`, `response.incomplete`) carries no complete reply.
#[derive(Debug, Default)]
pub struct ResponsesTap {
    /// Finished output items by `output_index`.
    items: BTreeMap<u64, Value>,
    completed: Option<Value>,
    /// The response's id, from its first event.
    response_id: Option<String>,
}

impl ResponsesTap {
    pub fn event(&mut self, v: &Value) {
        if self.response_id.is_none() {
            self.response_id = v
                .pointer("/response/id")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        match v.get("type").and_then(Value::as_str) {
            Some("response.output_item.done") => {
                let Some(item) = v.get("item") else { return };
                let index = v
                    .get("output_index")
                    .and_then(Value::as_u64)
                    .unwrap_or(self.items.len() as u64);
                self.items.insert(index, item.clone());
            }
            Some("response.completed") => {
                self.completed = v.get("response").cloned();
            }
            _ => {}
        }
    }

    pub fn response_id(&self) -> Option<&str> {
        self.response_id.as_deref()
    }

    pub fn finish(self) -> Reply {
        let Some(response) = self.completed else {
            return Reply::default();
        };
        // The completed response repeats the output; the items streamed are the same ones,
        // and the only ones when a server sends a summary `response.completed`.
        let items: Vec<Value> = if self.items.is_empty() {
            response
                .get("output")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        } else {
            self.items.into_values().collect()
        };
        reply_of(&response, &items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first lines of a Codex 0.40 rollout (`codex/agentcmd-rollout-v0.40.jsonl`) as items
    /// of the request Codex sends: a harness message, encrypted reasoning, a shell call and its
    /// output, then Codex's next prompt.
    fn codex_items() -> Vec<Value> {
        vec![
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/Users/jnarowski/Dev/spectora/src/spectora-labs-monorepo-v2</cwd>\n  <approval_policy>on-request</approval_policy>\n</environment_context>"}]}),
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "analyze the issue metrics page"}]}),
            json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "**Assessing permissions and gathering context**"}], "content": null, "encrypted_content": "gAAAAABo1UtusguIAaryXASa9QDJQQjzqRpTQc5jXlK8pcm61PDs_XMbTgehWq4Ro2NiPqhcrYRspyoAsmZIZdywhfwO1uYOynl"}),
            json!({"type": "function_call", "name": "shell", "arguments": "{\"command\":[\"zsh\",\"-lc\",\"ls\"],\"workdir\":\".\",\"timeout_ms\":120000}", "call_id": "call_7aW7HdqDm6sDUxTLqglDl5ZC"}),
            json!({"type": "function_call_output", "call_id": "call_7aW7HdqDm6sDUxTLqglDl5ZC", "output": "{\"output\":\"CLAUDE.md\\nREADME.md\\napps\\n\",\"metadata\":{\"exit_code\":0,\"duration_seconds\":0.5}}"}),
            json!({"type": "custom_tool_call", "status": "completed", "call_id": "call_3aQYzRmjiM9adlIhEr6xAJrQ", "name": "apply_patch", "input": "*** Begin Patch\n*** Update File: a.mdx\n@@\n-x\n+y\n*** End Patch"}),
            json!({"type": "custom_tool_call_output", "call_id": "call_3aQYzRmjiM9adlIhEr6xAJrQ", "output": "Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess."}),
            json!({"type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "tokio broadcast lagged"}}),
        ]
    }

    fn codex_body() -> Map<String, Value> {
        let mut input = vec![
            json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions instructions>\nApproval policy is currently never."}]}),
        ];
        input.extend(codex_items());
        json!({
            "model": "gpt-5-codex", "instructions": "You are Codex.", "input": input,
            "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}],
            "tool_choice": "auto", "parallel_tool_calls": false, "store": false, "stream": true,
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": "019f03e3",
        })
        .as_object()
        .cloned()
        .unwrap()
    }

    fn model_message(role: &str, content: Value) -> ModelMessage {
        serde_json::from_value(json!({"role": role, "content": content})).unwrap()
    }

    #[test]
    fn codex_items_become_entries_and_the_developer_message_joins_the_instructions() {
        let parsed = parse_input(&mut codex_body()).unwrap();
        assert_eq!(
            parsed.system,
            "You are Codex.\n<permissions instructions>\nApproval policy is currently never."
        );
        assert_eq!(parsed.preamble.len(), 1);
        assert_eq!(parsed.messages.len(), 8);
        let entry = |i: usize| parsed.messages[i].entries[0].clone();
        assert_eq!(entry(1)["role"], "user");
        assert_eq!(
            entry(2)["content"][0],
            json!({"type": "thinking", "thinking": "**Assessing permissions and gathering context**",
                   "encrypted_content": "gAAAAABo1UtusguIAaryXASa9QDJQQjzqRpTQc5jXlK8pcm61PDs_XMbTgehWq4Ro2NiPqhcrYRspyoAsmZIZdywhfwO1uYOynl"})
        );
        assert_eq!(
            entry(3)["content"][0]["id"],
            "call_7aW7HdqDm6sDUxTLqglDl5ZC"
        );
        assert_eq!(entry(3)["content"][0]["input"]["workdir"], ".");
        assert_eq!(entry(4)["type"], "tool_result");
        assert_eq!(entry(4)["callId"], "call_7aW7HdqDm6sDUxTLqglDl5ZC");
        assert_eq!(
            entry(5)["content"][0]["input"]["input"],
            "*** Begin Patch\n*** Update File: a.mdx\n@@\n-x\n+y\n*** End Patch"
        );
        assert_eq!(entry(6)["callId"], "call_3aQYzRmjiM9adlIhEr6xAJrQ");
        // A provider tool SOBA does not read: kept whole.
        assert_eq!(entry(7)["content"][0], codex_items()[7]);
        // Every entry reads as a log entry.
        for m in &parsed.messages {
            for e in &m.entries {
                let mut e = e.clone();
                e["id"] = json!("e");
                e["ts"] = json!("2026-01-01T00:00:00Z");
                serde_json::from_value::<soba_core::session::entry::Entry>(e.clone())
                    .unwrap_or_else(|err| panic!("{e}: {err}"));
            }
        }
    }

    #[test]
    fn text_input_and_the_sdks_short_messages_are_user_messages() {
        let body = json!({"model": "m", "input": "hi"});
        let parsed = parse_input(&mut body.as_object().unwrap().clone()).unwrap();
        assert_eq!(
            parsed.messages[0].entries,
            vec![
                json!({"type": "message", "role": "user", "content": [{"type": "text", "text": "hi"}]})
            ]
        );
        let body = json!({"model": "m", "input": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hey"}]});
        let parsed = parse_input(&mut body.as_object().unwrap().clone()).unwrap();
        assert_eq!(parsed.messages[1].entries[0]["role"], "assistant");
        assert_eq!(parsed.messages[1].entries[0]["content"][0]["text"], "hey");
    }

    #[test]
    fn bad_requests_say_what_to_send() {
        let err = |body: Value| {
            parse_input(&mut body.as_object().unwrap().clone())
                .unwrap_err()
                .0
        };
        assert!(err(json!({"model": "m"})).contains("no `input`"));
        assert!(err(json!({"input": "x", "instructions": 3}))
            .contains("`instructions` must be a string"));
        let e = err(json!({"input": [{"role": "user", "content": "a"}, {"content": "b"}]}));
        assert!(e.starts_with("input[1]: an item has no `type`"), "{e}");
        let e = err(json!({"input": [{"type": "function_call_output", "output": "x"}]}));
        assert!(
            e.contains("`function_call_output` item has no `call_id`"),
            "{e}"
        );
        let e = err(json!({"input": [{"type": "message", "role": "tool", "content": "x"}]}));
        assert!(e.contains("unknown message role `tool`"), "{e}");
    }

    #[test]
    fn a_reply_matches_the_items_the_agent_resends() {
        // The provider's output carries ids, status and annotations; Codex resends the items
        // without them, the SDKs with them. Both read as the same entries.
        let output = vec![
            json!({"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "enc=="}),
            json!({"id": "msg_1", "type": "message", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": "Looking."}]}),
            json!({"id": "fc_1", "type": "function_call", "status": "completed", "arguments": "{\"cmd\":\"ls\"}", "call_id": "call_1", "name": "exec_command"}),
            json!({"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "q"}}),
        ];
        let resent = [
            json!({"type": "reasoning", "summary": [], "encrypted_content": "enc=="}),
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]}),
            json!({"type": "function_call", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}", "call_id": "call_1"}),
            json!({"type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "q"}}),
        ];
        let response = json!({"id": "resp_1", "object": "response", "status": "completed", "output": output,
            "usage": {"input_tokens": 1200, "input_tokens_details": {"cached_tokens": 1000}, "output_tokens": 40}});
        let reply = parse_reply(&response);
        let expected: Vec<Value> = resent
            .iter()
            .flat_map(|i| item_entries(i).unwrap())
            .collect();
        assert_eq!(reply.entries, expected);
        let sdk: Vec<Value> = output
            .iter()
            .flat_map(|i| item_entries(i).unwrap())
            .collect();
        assert_eq!(reply.entries, sdk);
        assert_eq!(
            reply.usage,
            Some(Usage {
                input: 200,
                cache_read: 1000,
                cache_write: 0,
                output: 40
            })
        );
        assert!(reply.wants_tools);
        assert_eq!(reply.response_id.as_deref(), Some("resp_1"));
    }

    #[test]
    fn an_incomplete_or_unreadable_response_is_no_reply() {
        let incomplete = json!({"id": "resp_2", "status": "incomplete", "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "cut"}]}]});
        assert_eq!(parse_reply(&incomplete), Reply::default());
    }

    fn stream_events(completed: bool) -> Vec<Value> {
        let reasoning = json!({"id": "rs_9", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Plan"}], "encrypted_content": "gAAAA-enc"});
        let message = json!({"id": "msg_9", "type": "message", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "annotations": [], "text": "Done."}]});
        let mut events = vec![
            json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_9", "status": "in_progress", "output": []}}),
            json!({"type": "response.in_progress", "sequence_number": 1, "response": {"id": "resp_9", "status": "in_progress", "output": []}}),
            json!({"type": "response.output_item.added", "sequence_number": 2, "output_index": 0, "item": {"id": "rs_9", "type": "reasoning", "summary": []}}),
            json!({"type": "response.output_item.done", "sequence_number": 3, "output_index": 0, "item": reasoning}),
            json!({"type": "response.output_item.added", "sequence_number": 4, "output_index": 1, "item": {"id": "msg_9", "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
            json!({"type": "response.output_text.delta", "sequence_number": 5, "output_index": 1, "content_index": 0, "item_id": "msg_9", "delta": "Done."}),
            json!({"type": "response.output_item.done", "sequence_number": 6, "output_index": 1, "item": message}),
        ];
        if completed {
            events.push(json!({"type": "response.completed", "sequence_number": 7, "response": {
                "id": "resp_9", "status": "completed", "output": [reasoning, message],
                "usage": {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 12}}}));
        }
        events
    }

    #[test]
    fn a_stream_is_a_reply_once_it_completes_and_reasoning_keeps_its_encrypted_content() {
        let mut tap = ResponsesTap::default();
        for (i, e) in stream_events(true).iter().enumerate() {
            tap.event(e);
            if i == 0 {
                assert_eq!(
                    tap.response_id(),
                    Some("resp_9"),
                    "named by its first event"
                );
            }
        }
        let reply = tap.finish();
        assert_eq!(reply.entries.len(), 2);
        assert_eq!(
            reply.entries[0]["content"][0],
            json!({"type": "thinking", "thinking": "Plan", "encrypted_content": "gAAAA-enc"})
        );
        assert_eq!(reply.entries[1]["content"][0]["text"], "Done.");
        assert_eq!(reply.usage.map(|u| u.input), Some(900));
        assert!(!reply.wants_tools);
        assert_eq!(reply.response_id.as_deref(), Some("resp_9"));

        let mut cut = ResponsesTap::default();
        for e in stream_events(false) {
            cut.event(&e);
        }
        assert_eq!(cut.finish(), Reply::default(), "no response.completed");
    }

    #[test]
    fn rendered_items_pair_each_result_with_its_calls_output_type() {
        let call = |id: &str, extra: Value| {
            let mut b = json!({"type": "tool_call", "id": id, "name": "apply_patch", "input": {"input": "*** Begin Patch"}});
            if let Some(kind) = extra.as_str() {
                b[CALL_ITEM_FIELD] = json!(kind);
            }
            b
        };
        let mut result = model_message("tool", json!([{"type": "text", "text": "ok"}]));
        result.tool_call_id = Some("c1".into());
        let mut plain_result = result.clone();
        plain_result.tool_call_id = Some("c2".into());
        let out = render_items(vec![
            Outgoing::Rendered(model_message(
                "user",
                json!([{"type": "text", "text": "# Context Capsule"}]),
            )),
            Outgoing::Rendered(model_message(
                "assistant",
                json!([
                    {"type": "thinking", "thinking": "", "encrypted_content": "enc"},
                    {"type": "text", "text": "patching"},
                    call("c1", json!("custom_tool_call")),
                    call("c2", Value::Null),
                ]),
            )),
            Outgoing::Rendered(result),
            Outgoing::Rendered(plain_result),
        ]);
        assert_eq!(
            out,
            vec![
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "# Context Capsule"}]}),
                json!({"type": "reasoning", "summary": [], "encrypted_content": "enc"}),
                json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "patching"}]}),
                json!({"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch"}),
                json!({"type": "function_call", "call_id": "c2", "name": "apply_patch", "arguments": "{\"input\":\"*** Begin Patch\"}"}),
                json!({"type": "custom_tool_call_output", "call_id": "c1", "output": "ok"}),
                json!({"type": "function_call_output", "call_id": "c2", "output": "ok"}),
            ]
        );
    }

    #[test]
    fn a_result_whose_call_went_out_raw_takes_the_calls_output_type() {
        let shell = json!({"type": "local_shell_call", "call_id": "s1", "status": "completed", "action": {"type": "exec", "command": ["ls"]}});
        let mut result = model_message("tool", json!([{"type": "text", "text": "a.rs"}]));
        result.tool_call_id = Some("s1".into());
        let out = render_items(vec![
            Outgoing::Raw(shell.clone()),
            Outgoing::Rendered(result),
        ]);
        assert_eq!(out[0], shell);
        assert_eq!(
            out[1],
            json!({"type": "local_shell_call_output", "call_id": "s1", "output": "a.rs"})
        );
    }

    #[test]
    fn items_kept_in_the_log_render_back_to_the_same_items() {
        // Through the log's block type: what the capsule path renders when an item is not
        // sent raw.
        let parsed = parse_input(&mut codex_body()).unwrap();
        let messages: Vec<ModelMessage> = parsed
            .messages
            .iter()
            .map(|m| {
                let e = &m.entries[0];
                let role = if e["type"] == "tool_result" {
                    "tool"
                } else {
                    e["role"].as_str().unwrap()
                };
                let mut msg = model_message(role, e["content"].clone());
                msg.tool_call_id = e["callId"].as_str().map(str::to_string);
                msg
            })
            .collect();
        let out = render_items(messages.into_iter().map(Outgoing::Rendered).collect());
        let items = codex_items();
        assert_eq!(out[2]["encrypted_content"], items[2]["encrypted_content"]);
        assert_eq!(
            out[3]["arguments"].as_str().map(parse_arguments),
            Some(parse_arguments(items[3]["arguments"].as_str().unwrap()))
        );
        assert_eq!(out[5]["type"], "custom_tool_call");
        assert_eq!(out[5]["input"], items[5]["input"]);
        assert_eq!(out[6]["type"], "custom_tool_call_output");
        assert_eq!(out[7], items[7], "a kept item goes back whole");
        // Read again, every rendered item stands for the entries it came from.
        for (rendered, m) in out.iter().zip(&parsed.messages) {
            assert_eq!(item_entries(rendered).unwrap(), m.entries, "{rendered}");
        }
    }
}
