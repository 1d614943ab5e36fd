//! OpenAI chat-completions trajectories: `{"messages": [...]}` (as mini-swe-agent writes its
//! `.traj.json`, model under `info.config.model.model_name`) or a bare array of messages.
//!
//! Assistant `tool_calls[].id` pair with `role: "tool"` messages' `tool_call_id`. A leading
//! `system` message is the system prompt: it becomes a `setting` entry (counted in the budget,
//! never summarized). Per-call usage is read from the message's `usage` or, in mini-swe-agent
//! files, from `extra.response.usage`.

use serde_json::Value;

use super::{
    message, nonzero, str_field, u64_field, value_text, EntryBuilder, Format, HeaderInfo,
    ImportError, ImportOptions, ImportResult,
};
use soba_core::session::entry::{
    ContentBlock, EntryBody, Role, SettingEntry, ToolResultEntry, Usage,
};

pub(crate) fn looks_like_message(v: &Value) -> bool {
    matches!(
        str_field(v, "role"),
        Some("user" | "assistant" | "system" | "tool")
    ) && v.get("content").is_some()
}

pub fn import_str(text: &str, options: &ImportOptions) -> Result<ImportResult, ImportError> {
    let wrong = |reason: String| ImportError::WrongFormat {
        format: Format::OpenaiChat,
        reason,
    };
    let doc: Value =
        serde_json::from_str(text).map_err(|e| wrong(format!("not one JSON document ({e})")))?;
    let (info, messages) = match &doc {
        Value::Object(o) => (o.get("info"), o.get("messages")),
        Value::Array(_) => (None, Some(&doc)),
        _ => (None, None),
    };
    let Some(messages) = messages.and_then(Value::as_array) else {
        return Err(wrong(
            "expected an object with a `messages` array, or an array of messages".into(),
        ));
    };
    if !messages.iter().any(looks_like_message) {
        return Err(wrong(
            "no element of `messages` has a `role` and `content`".into(),
        ));
    }

    let mut builder = EntryBuilder::new(Format::OpenaiChat, &options.now);
    let mut header = HeaderInfo::new(Format::OpenaiChat, options);
    if let Some(name) = info
        .and_then(|i| i.pointer("/config/model/model_name"))
        .and_then(Value::as_str)
    {
        header.set_model(name);
    }
    if let Some(id) = doc.get("instance_id").and_then(Value::as_str) {
        header.set_session_id(id);
    }
    for (i, m) in messages.iter().enumerate() {
        let source_id = format!("messages[{i}]");
        let parent = builder.last_id();
        let body = match str_field(m, "role") {
            Some("system") if builder.entries().is_empty() => EntryBody::Setting(SettingEntry {
                system_prompt: Some(text_of(m.get("content"))),
                ..SettingEntry::default()
            }),
            Some("system") => EntryBody::Message(message(Role::System, blocks(m.get("content")))),
            Some("user") => EntryBody::Message(message(Role::User, blocks(m.get("content")))),
            Some("assistant") => EntryBody::Message(assistant(m, &mut header)),
            Some("tool") => EntryBody::ToolResult(ToolResultEntry {
                call_id: str_field(m, "tool_call_id").unwrap_or("").to_string(),
                tool_name: str_field(m, "name").map(str::to_string),
                content: blocks(m.get("content")),
                is_error: false,
                exit_code: m.pointer("/extra/returncode").and_then(Value::as_i64),
            }),
            Some("exit") => {
                // mini-swe-agent's final record: the submission, never sent to the model.
                builder.skipped("message role:exit");
                continue;
            }
            other => {
                builder.unknown(format!("message role:{}", other.unwrap_or("(none)")));
                continue;
            }
        };
        builder.push(parent, Some(&source_id), None, body);
    }
    Ok(builder.finish(header))
}

fn assistant(m: &Value, header: &mut HeaderInfo) -> soba_core::session::entry::MessageEntry {
    let mut content: Vec<ContentBlock> = blocks(m.get("content"))
        .into_iter()
        .filter(|b| !matches!(b, ContentBlock::Text { text, .. } if text.is_empty()))
        .collect();
    for call in m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let function = call.get("function").unwrap_or(&Value::Null);
        let input = match function.get("arguments") {
            Some(Value::String(s)) => {
                serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
            }
            Some(other) => other.clone(),
            None => Value::Null,
        };
        content.push(ContentBlock::ToolCall {
            id: str_field(call, "id").unwrap_or("").to_string(),
            name: str_field(function, "name").unwrap_or("").to_string(),
            input: Box::new(input),
            extra: Default::default(),
        });
    }
    let mut entry = message(Role::Assistant, content);
    let response = m.pointer("/extra/response");
    entry.usage = m
        .get("usage")
        .or_else(|| response.and_then(|r| r.get("usage")))
        .map(usage_of)
        .and_then(nonzero);
    entry.model = response
        .and_then(|r| str_field(r, "model"))
        .map(str::to_string);
    if header.model_name.is_none() {
        if let Some(name) = &entry.model {
            header.set_model(name);
        }
    }
    entry
}

/// OpenAI usage: `prompt_tokens` includes the cached tokens.
fn usage_of(u: &Value) -> Usage {
    let prompt = u64_field(u, "prompt_tokens");
    let cached = u
        .pointer("/prompt_tokens_details/cached_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(0)
        .min(prompt);
    Usage {
        input: prompt - cached,
        cache_read: cached,
        cache_write: 0,
        output: u64_field(u, "completion_tokens"),
    }
}

fn blocks(content: Option<&Value>) -> Vec<ContentBlock> {
    match content {
        Some(Value::String(s)) => vec![ContentBlock::text(s)],
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| match str_field(p, "type") {
                Some("image_url") => ContentBlock::Image {
                    media_type: None,
                    data: p
                        .pointer("/image_url/url")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    extra: Default::default(),
                },
                _ => ContentBlock::text(
                    str_field(p, "text")
                        .map(str::to_string)
                        .unwrap_or_else(|| value_text(p)),
                ),
            })
            .collect(),
        Some(Value::Null) | None => Vec::new(),
        Some(other) => vec![ContentBlock::text(value_text(other))],
    }
}

fn text_of(content: Option<&Value>) -> String {
    soba_core::session::entry::blocks_text(&blocks(content))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::check::{is_one_line, loads};
    use crate::import::testing::options;
    use serde_json::json;

    #[test]
    fn a_mini_swe_agent_trajectory_pairs_calls_and_results() {
        let traj = json!({
            "info": {"config": {"model": {"model_name": "gpt-4o-2024-08-06"}}},
            "instance_id": "repo__issue-1",
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "fix the bug"},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"exit 3\"}"}}],
                 "extra": {"response": {"model": "gpt-4o-2024-08-06",
                    "usage": {"prompt_tokens": 1689, "completion_tokens": 76, "prompt_tokens_details": {"cached_tokens": 1664}}}}},
                {"role": "tool", "tool_call_id": "call_1", "content": "a.py", "extra": {"returncode": 0}},
                {"role": "exit", "content": "diff"}
            ]
        });
        let r = import_str(&traj.to_string(), &options()).unwrap();
        assert!(
            matches!(&r.entries[0].body, EntryBody::Setting(s) if s.system_prompt.as_deref() == Some("You are a helpful assistant."))
        );
        let usage = r.entries[2].as_message().unwrap().usage.unwrap();
        assert_eq!(
            usage,
            Usage {
                input: 25,
                cache_read: 1664,
                cache_write: 0,
                output: 76
            }
        );
        let result = r.entries[3].as_tool_result().unwrap();
        assert_eq!(
            (result.call_id.as_str(), result.exit_code),
            ("call_1", Some(0))
        );
        assert_eq!(
            (
                r.report.tool_calls,
                r.report.tool_results,
                r.report.unmatched_calls
            ),
            (2, 1, 1)
        );
        assert_eq!(r.report.skipped_records.get("message role:exit"), Some(&1));
        assert_eq!(r.header.id, "repo__issue-1");
        assert_eq!(
            r.header.model.as_ref().unwrap().context_window,
            Some(128_000)
        );
        assert_eq!(r.entries[3].source_id.as_deref(), Some("messages[3]"));
        assert!(is_one_line(&r));
        loads(&r);
    }

    #[test]
    fn a_result_without_its_call_is_an_orphan() {
        let chat = json!([{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "gone", "content": "x"}]);
        let r = import_str(&chat.to_string(), &options()).unwrap();
        assert_eq!(r.report.orphan_results, 1);
    }

    #[test]
    fn a_document_without_messages_is_refused() {
        let err = import_str("{\"messages\": 3}", &options()).unwrap_err();
        assert!(err.to_string().contains("`messages` array"), "{err}");
    }
}
