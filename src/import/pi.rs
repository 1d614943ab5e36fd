//! pi session files (format v3): a `session` header line, then entries that form a tree by
//! `id` / `parentId`.
//!
//! Branches are kept: every entry attaches to the entry its source parent became, and the
//! session's leaf is the source's last entry. `message` entries carry the roles `user`,
//! `assistant` (text, thinking, `toolCall`, `usage`), `toolResult` and `bashExecution` (a
//! command the user ran with `!`; its output reaches the model as a user message, and it is
//! imported as one, marked synthetic). `compaction` entries become `foreign_compaction`.

use serde_json::Value;

use super::{
    message, nonzero, read_jsonl, str_field, u64_field, value_text, EntryBuilder, Format, HeaderInfo, ImportError,
    ImportOptions, ImportResult,
};
use crate::session::entry::{ContentBlock, EntryBody, ForeignCompactionEntry, Role, ToolResultEntry, Usage};

/// Entry types that change settings or annotate the tree, with nothing for the model input.
const BOOKKEEPING_TYPES: &[&str] = &["thinking_level_change", "model_change", "label", "custom", "session_info"];

pub(crate) fn looks_like_header(v: &Value) -> bool {
    str_field(v, "type") == Some("session")
        && v.get("id").is_some()
        && v.get("version").is_some_and(|n| n.as_u64().is_some_and(|n| n >= 2))
        && v.get("workspace").is_none()
}

pub fn import_str(text: &str, options: &ImportOptions) -> Result<ImportResult, ImportError> {
    let (records, corrupt) = read_jsonl(text);
    let mut builder = EntryBuilder::new(Format::Pi, &options.now);
    let mut header = HeaderInfo::new(Format::Pi, options);
    builder.report.corrupt_lines = corrupt;
    let mut leaf_source = None;
    for (_, r) in &records {
        let kind = str_field(r, "type").unwrap_or("(no type)");
        if kind == "session" {
            session_header(&mut header, r);
            continue;
        }
        if let Some(ts) = str_field(r, "timestamp") {
            header.set_created_at(ts);
        }
        let id = str_field(r, "id");
        let parent = match str_field(r, "parentId") {
            // A parent lost to a corrupt line: keep the line going from the latest entry.
            Some(p) => builder.resolve(p).unwrap_or_else(|| builder.last_id()),
            None => None,
        };
        let ts = str_field(r, "timestamp");
        let body = match kind {
            "message" => message_body(&mut builder, &mut header, r.get("message").unwrap_or(&Value::Null)),
            "compaction" => Some(EntryBody::ForeignCompaction(ForeignCompactionEntry {
                agent: Format::Pi.as_str().into(),
                trigger: None,
                tokens_before: r.get("tokensBefore").and_then(Value::as_u64),
                summary: str_field(r, "summary").map(str::to_string),
                summary_tokens: None,
                // The source id of the kept entry becomes the id of the entry it was imported as.
                first_kept_entry_id: str_field(r, "firstKeptEntryId")
                    .and_then(|k| builder.first_entry_of(k).map(str::to_string)),
                kept_items: None,
            })),
            "branch_summary" => {
                // pi sends the summary of an abandoned branch to the model as a user message.
                let mut m = message(Role::User, vec![ContentBlock::text(str_field(r, "summary").unwrap_or(""))]);
                m.synthetic = true;
                Some(EntryBody::Message(m))
            }
            k if BOOKKEEPING_TYPES.contains(&k) => {
                if k == "model_change" {
                    if let Some(m) = str_field(r, "modelId") {
                        header.set_model(m);
                    }
                }
                builder.skipped(k.to_string());
                None
            }
            other => {
                builder.unknown(other.to_string());
                None
            }
        };
        match (body, id) {
            (Some(body), _) => {
                builder.push(parent, id, ts, body);
            }
            (None, Some(id)) => builder.alias(id, parent),
            (None, None) => {}
        }
        if id.is_some() {
            leaf_source = id;
        }
    }
    let leaf = leaf_source.and_then(|id| builder.resolve(id)).flatten();
    builder.set_leaf(leaf);
    Ok(builder.finish(header))
}

fn session_header(header: &mut HeaderInfo, r: &Value) {
    if let Some(id) = str_field(r, "id") {
        header.set_session_id(id);
    }
    if let Some(cwd) = str_field(r, "cwd") {
        header.set_workspace(cwd);
    }
    if let Some(ts) = str_field(r, "timestamp") {
        header.set_created_at(ts);
    }
    if let Some(m) = str_field(r, "modelId") {
        header.set_model(m);
    }
}

fn message_body(builder: &mut EntryBuilder, header: &mut HeaderInfo, m: &Value) -> Option<EntryBody> {
    match str_field(m, "role") {
        Some("user") => Some(EntryBody::Message(message(Role::User, blocks(m.get("content"))))),
        Some("assistant") => {
            let model = str_field(m, "model");
            if let Some(name) = model {
                header.set_model(name);
            }
            let usage = m.get("usage").map(|u| Usage {
                input: u64_field(u, "input"),
                cache_read: u64_field(u, "cacheRead"),
                cache_write: u64_field(u, "cacheWrite"),
                output: u64_field(u, "output"),
            });
            let mut entry = message(Role::Assistant, blocks(m.get("content")));
            entry.usage = usage.and_then(nonzero);
            entry.model = model.map(str::to_string);
            Some(EntryBody::Message(entry))
        }
        Some("toolResult") => Some(EntryBody::ToolResult(ToolResultEntry {
            call_id: str_field(m, "toolCallId").unwrap_or("").to_string(),
            tool_name: str_field(m, "toolName").map(str::to_string),
            content: blocks(m.get("content")),
            is_error: m.get("isError").and_then(Value::as_bool).unwrap_or(false),
            exit_code: None,
        })),
        Some("bashExecution") => {
            let mut entry = message(Role::User, vec![ContentBlock::text(bash_execution_text(m))]);
            entry.synthetic = true;
            Some(EntryBody::Message(entry))
        }
        other => {
            builder.unknown(format!("message role:{}", other.unwrap_or("(none)")));
            None
        }
    }
}

/// The text pi shows the model for a user-run shell command.
fn bash_execution_text(m: &Value) -> String {
    let command = str_field(m, "command").unwrap_or("");
    let output = str_field(m, "output").unwrap_or("");
    let mut text = format!("Ran `{command}`\n```\n{}\n```", output.trim_end());
    if m.get("cancelled").and_then(Value::as_bool) == Some(true) {
        text.push_str("\n(command cancelled)");
    } else if let Some(code) = m.get("exitCode").and_then(Value::as_i64).filter(|c| *c != 0) {
        text.push_str(&format!("\nCommand exited with code {code}"));
    }
    text
}

fn blocks(content: Option<&Value>) -> Vec<ContentBlock> {
    match content {
        Some(Value::Array(items)) => items
            .iter()
            .map(|b| match str_field(b, "type") {
                Some("text") => ContentBlock::text(str_field(b, "text").unwrap_or("")),
                Some("thinking") => ContentBlock::Thinking { thinking: str_field(b, "thinking").unwrap_or("").to_string() },
                Some("toolCall") => ContentBlock::ToolCall {
                    id: str_field(b, "id").unwrap_or("").to_string(),
                    name: str_field(b, "name").unwrap_or("").to_string(),
                    input: b.get("arguments").cloned().unwrap_or(Value::Null),
                },
                Some("image") => ContentBlock::Image {
                    media_type: str_field(b, "mimeType").map(str::to_string),
                    data: str_field(b, "data").map(str::to_string),
                },
                _ => ContentBlock::text(value_text(b)),
            })
            .collect(),
        Some(Value::String(s)) => vec![ContentBlock::text(s)],
        Some(other) => vec![ContentBlock::text(value_text(other))],
        None => Vec::new(),
    }
}
