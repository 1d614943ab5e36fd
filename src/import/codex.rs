//! Codex CLI rollout files: `{timestamp, type, payload}` per line.
//!
//! `response_item` payloads are the conversation (`message`, `reasoning`, `function_call` /
//! `function_call_output`, `custom_tool_call` / `custom_tool_call_output`); they form one line
//! in file order. `event_msg` payloads mostly repeat them for the UI and are skipped, except
//! `token_count`, whose `last_token_usage` is attached to the latest assistant entry of the
//! response it measures, and whose `model_context_window` becomes the header's context window.
//! Current Codex writes `token_count` after the items of its response; the 0.40 era wrote it
//! before them (streamed events first, items when the response completed). A file whose first
//! measured `token_count` comes before any reply of its turn is read in that order: each usage
//! waits for the items that follow it and lands on the last assistant entry of that response.
//! `compacted` records become `foreign_compaction` entries.

use std::collections::HashMap;

use serde_json::Value;

use super::{
    message, nonzero, opaque_block, read_jsonl, str_field, u64_field, value_text, EntryBuilder,
    Format, HeaderInfo, ImportError, ImportOptions, ImportResult,
};
use soba_core::session::entry::{
    ContentBlock, EntryBody, ForeignCompactionEntry, Role, SettingEntry, ToolResultEntry, Usage,
};

/// Prefixes of user-role messages the Codex harness writes (environment, instructions).
const HARNESS_MARKERS: &[&str] = &[
    "<environment_context>",
    "<user_instructions>",
    "<permissions instructions>",
    "# AGENTS.md instructions",
    "<turn_aborted>",
];

pub(crate) fn looks_like_record(v: &Value) -> bool {
    v.get("payload").is_some()
        && v.get("timestamp").is_some()
        && matches!(
            str_field(v, "type"),
            Some("session_meta" | "response_item" | "event_msg" | "turn_context" | "compacted")
        )
}

pub fn import_str(text: &str, options: &ImportOptions) -> Result<ImportResult, ImportError> {
    let (records, corrupt) = read_jsonl(text);
    let mut reader = Reader::new(options);
    reader.builder.report.corrupt_lines = corrupt;
    for (line, record) in &records {
        reader.record(*line, record);
    }
    Ok(reader.builder.finish(reader.header))
}

/// The Codex rollout reader: fed one record at a time, by `import_str` for a whole file and by
/// [`super::stream::StreamImporter`] for a live one.
pub(crate) struct Reader {
    builder: EntryBuilder,
    header: HeaderInfo,
    /// The latest assistant entry that has no usage yet: where the next `token_count` goes.
    usage_target: Option<String>,
    /// Whether this file writes `token_count` before the items of its response (0.40 era);
    /// decided by the first `token_count` that carries usage.
    usage_leads: Option<bool>,
    /// In that order: the usage of the response being read, and the entry holding it so far.
    leading: Option<(Usage, Option<String>)>,
    /// Context size after the latest measured inference, for a following compaction.
    last_context_tokens: Option<u64>,
    /// Tool call id → tool name, for results.
    tool_names: HashMap<String, String>,
}

impl Reader {
    pub(crate) fn new(options: &ImportOptions) -> Self {
        Reader {
            builder: EntryBuilder::new(Format::Codex, &options.now),
            header: HeaderInfo::new(Format::Codex, options),
            usage_target: None,
            usage_leads: None,
            leading: None,
            last_context_tokens: None,
            tool_names: HashMap::new(),
        }
    }

    fn record(&mut self, line: usize, r: &Value) {
        let payload = r.get("payload").unwrap_or(&Value::Null);
        let ts = str_field(r, "timestamp");
        if let Some(ts) = ts {
            self.header.set_created_at(ts);
        }
        let source_id = format!("line {line}");
        match str_field(r, "type") {
            Some("session_meta") => self.session_meta(payload, ts, &source_id),
            Some("turn_context") => {
                if let Some(m) = str_field(payload, "model") {
                    self.header.set_model(m);
                }
                self.builder.skipped("turn_context");
            }
            Some("response_item") => self.response_item(payload, ts, &source_id),
            Some("event_msg") => self.event(payload),
            Some("compacted") => self.compacted(payload, ts, &source_id),
            Some(other) => self.builder.unknown(other.to_string()),
            None => self.builder.unknown("(no type)"),
        }
    }

    fn session_meta(&mut self, p: &Value, ts: Option<&str>, source_id: &str) {
        if let Some(id) = str_field(p, "id").or_else(|| str_field(p, "session_id")) {
            self.header.set_session_id(id);
        }
        if let Some(cwd) = str_field(p, "cwd") {
            self.header.set_workspace(cwd);
        }
        // The system prompt Codex sends with every request: counted in the budget as overhead.
        let instructions = p
            .pointer("/base_instructions/text")
            .and_then(Value::as_str)
            .or_else(|| str_field(p, "instructions"))
            .filter(|s| !s.is_empty());
        if let Some(text) = instructions {
            let parent = self.builder.last_id();
            let setting = SettingEntry {
                system_prompt: Some(text.to_string()),
                ..SettingEntry::default()
            };
            self.builder
                .push(parent, Some(source_id), ts, EntryBody::Setting(setting));
        }
    }

    fn push(&mut self, ts: Option<&str>, source_id: &str, body: EntryBody) -> String {
        // Anything but a reply ends the response a leading usage measured.
        self.leading = None;
        self.push_entry(ts, source_id, body)
    }

    fn push_entry(&mut self, ts: Option<&str>, source_id: &str, body: EntryBody) -> String {
        let parent = self.builder.last_id();
        self.builder.push(parent, Some(source_id), ts, body)
    }

    fn push_assistant(&mut self, ts: Option<&str>, source_id: &str, content: Vec<ContentBlock>) {
        let mut m = message(Role::Assistant, content);
        m.model = self.header.model_name.clone();
        let leading = self.leading.take();
        if let Some((usage, _)) = leading {
            m.usage = Some(usage);
        }
        let id = self.push_entry(ts, source_id, EntryBody::Message(m));
        if let Some((usage, holder)) = leading {
            // The usage moves to the response's latest entry, where the view's anchor wants it.
            if let Some(EntryBody::Message(held)) = holder
                .and_then(|h| self.builder.entry_mut(&h))
                .map(|e| &mut e.body)
            {
                held.usage = None;
            }
            self.leading = Some((usage, Some(id.clone())));
        }
        self.usage_target = Some(id);
    }

    fn response_item(&mut self, p: &Value, ts: Option<&str>, source_id: &str) {
        match str_field(p, "type") {
            Some("message") => {
                let role = match str_field(p, "role") {
                    Some("assistant") => Role::Assistant,
                    Some("user") => Role::User,
                    Some("developer" | "system") => Role::System,
                    other => {
                        self.builder
                            .unknown(format!("message role:{}", other.unwrap_or("(none)")));
                        return;
                    }
                };
                let content = message_content(p.get("content").unwrap_or(&Value::Null));
                if role == Role::Assistant {
                    self.push_assistant(ts, source_id, content);
                } else {
                    let mut m = message(role, content);
                    m.synthetic = role == Role::System
                        || m.content.iter().any(|b| match b {
                            ContentBlock::Text { text, .. } => HARNESS_MARKERS
                                .iter()
                                .any(|h| text.trim_start().starts_with(h)),
                            _ => false,
                        });
                    self.push(ts, source_id, EntryBody::Message(m));
                }
            }
            Some("reasoning") => {
                let summary: Vec<&str> = p
                    .get("summary")
                    .and_then(Value::as_array)
                    .map(|items| items.iter().filter_map(|s| str_field(s, "text")).collect())
                    .unwrap_or_default();
                if summary.is_empty() {
                    // Only encrypted reasoning: nothing readable to keep.
                    self.builder.skipped("reasoning without summary");
                    return;
                }
                self.push_assistant(
                    ts,
                    source_id,
                    vec![ContentBlock::Thinking {
                        thinking: summary.join("\n"),
                        extra: Default::default(),
                    }],
                );
            }
            Some("function_call" | "local_shell_call") => {
                let arguments = p
                    .get("arguments")
                    .or_else(|| p.get("action"))
                    .unwrap_or(&Value::Null);
                // Arguments are a JSON string; keep them as text if they do not parse.
                let input = match arguments {
                    Value::String(s) => {
                        serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
                    }
                    other => other.clone(),
                };
                let name = str_field(p, "name").unwrap_or("shell").to_string();
                self.push_call(ts, source_id, call_id(p), name, input);
            }
            Some("custom_tool_call") => {
                // Free-form input (the apply_patch body), stored the way function-call
                // apply_patch passes it: `{"input": …}`.
                let input = serde_json::json!({ "input": str_field(p, "input").unwrap_or("") });
                let name = str_field(p, "name").unwrap_or("").to_string();
                self.push_call(ts, source_id, call_id(p), name, input);
            }
            Some(
                "function_call_output" | "custom_tool_call_output" | "local_shell_call_output",
            ) => {
                let call = call_id(p);
                let tool_name = self.tool_name(&call);
                let (text, exit_code) = tool_output(p.get("output").unwrap_or(&Value::Null));
                let result = ToolResultEntry {
                    call_id: call,
                    tool_name,
                    content: vec![ContentBlock::text(text)],
                    is_error: false,
                    exit_code,
                };
                self.push(ts, source_id, EntryBody::ToolResult(result));
            }
            Some("tool_search_call") if p.get("call_id").is_some_and(|c| !c.is_null()) => {
                let input = p.get("arguments").cloned().unwrap_or(Value::Null);
                self.push_call(ts, source_id, call_id(p), "tool_search".into(), input);
            }
            Some(other) => self.opaque_item(other, p, ts, source_id),
            None => self.builder.unknown("response_item without type"),
        }
    }

    /// A conversation item this reader does not read into its own shape (`tool_search_output`,
    /// `web_search_call`, `image_generation_call`, a type newer than this reader, …). The
    /// provider counts it as input, and the `token_count` after it measures a response that may
    /// hold nothing else, so it is kept whole, counted as its JSON, and reported by type.
    fn opaque_item(&mut self, kind: &str, p: &Value, ts: Option<&str>, source_id: &str) {
        let Some(block) = opaque_block(p) else {
            self.builder.unknown(format!("response_item:{kind}"));
            return;
        };
        self.builder.kept_opaque(format!("response_item:{kind}"));
        let call = str_field(p, "call_id").map(str::to_string);
        if kind.ends_with("_output") {
            // The answer to a call the model made: a tool result when its call is known.
            if let Some(call) = call.filter(|c| self.tool_names.contains_key(c)) {
                let result = ToolResultEntry {
                    tool_name: self.tool_name(&call),
                    call_id: call,
                    content: vec![block],
                    is_error: false,
                    exit_code: None,
                };
                self.push(ts, source_id, EntryBody::ToolResult(result));
                return;
            }
            // Otherwise input the harness supplied (a server-side search's tools).
            let mut m = message(Role::User, vec![block]);
            m.synthetic = true;
            self.push(ts, source_id, EntryBody::Message(m));
            return;
        }
        // What the model produced (a web search, an image, a server-side tool search).
        self.push_assistant(ts, source_id, vec![block]);
    }

    fn tool_name(&self, call_id: &str) -> Option<String> {
        self.tool_names.get(call_id).cloned()
    }

    fn push_call(
        &mut self,
        ts: Option<&str>,
        source_id: &str,
        id: String,
        name: String,
        input: Value,
    ) {
        self.tool_names.insert(id.clone(), name.clone());
        self.push_assistant(
            ts,
            source_id,
            vec![ContentBlock::ToolCall {
                id,
                name,
                input: Box::new(input),
                extra: Default::default(),
            }],
        );
    }

    fn event(&mut self, p: &Value) {
        let kind = str_field(p, "type").unwrap_or("(none)");
        // By content as well as by name: a usage report is what anchors the budget.
        if kind == "token_count" || p.pointer("/info/last_token_usage").is_some() {
            self.token_count(p);
        } else if kind == "task_started" {
            if let Some(w) = p.get("model_context_window").and_then(Value::as_u64) {
                self.header.set_context_window(w);
            }
        }
        // Every other event repeats a response item for the UI (user_message, agent_message,
        // agent_reasoning, patch_apply_end, …) or marks turn boundaries.
        self.builder.skipped(format!("event_msg:{kind}"));
    }

    fn token_count(&mut self, p: &Value) {
        let Some(info) = p.get("info").filter(|i| !i.is_null()) else {
            return;
        };
        if let Some(w) = info.get("model_context_window").and_then(Value::as_u64) {
            self.header.set_context_window(w);
        }
        let Some(last) = info.get("last_token_usage") else {
            return;
        };
        // OpenAI counts cached tokens inside input_tokens.
        let input = u64_field(last, "input_tokens");
        let cached = u64_field(last, "cached_input_tokens").min(input);
        let usage = Usage {
            input: input - cached,
            cache_read: cached,
            cache_write: 0,
            output: u64_field(last, "output_tokens"),
        };
        let Some(usage) = nonzero(usage) else { return };
        self.last_context_tokens = Some(usage.context_tokens());
        // The first measurement, before any reply of its turn: usage leads its response.
        let leads = *self
            .usage_leads
            .get_or_insert_with(|| self.usage_target.is_none());
        if leads {
            self.usage_target = None;
            self.leading = Some((usage, None));
            return;
        }
        // A repeated token_count with no new response since carries nothing new.
        if let Some(target) = self.usage_target.take() {
            if let Some(EntryBody::Message(m)) =
                self.builder.entry_mut(&target).map(|e| &mut e.body)
            {
                m.usage = Some(usage);
            }
        }
    }

    fn compacted(&mut self, p: &Value, ts: Option<&str>, source_id: &str) {
        let replacement = p.get("replacement_history").and_then(Value::as_array);
        let kept_entry_ids = replacement.map(|items| self.kept_entries(items));
        let entry = ForeignCompactionEntry {
            agent: Format::Codex.as_str().into(),
            trigger: None,
            tokens_before: self.last_context_tokens,
            summary: str_field(p, "message")
                .filter(|m| !m.is_empty())
                .map(str::to_string),
            summary_tokens: None,
            first_kept_entry_id: None,
            kept_items: replacement.map(|h| h.len() as u64),
            kept_entry_ids,
            instructions: None,
        };
        self.push(ts, source_id, EntryBody::ForeignCompaction(Box::new(entry)));
    }

    /// The imported entries a `replacement_history` carries over: each of its messages is a
    /// copy of an earlier message of the history (the user's prompts, the harness's
    /// instructions), matched to the latest earlier entry with the same role and text that no
    /// other item took. Items with no such entry (the encrypted summary itself) add nothing.
    fn kept_entries(&self, items: &[Value]) -> Vec<String> {
        let entries = self.builder.entries();
        let mut taken = vec![false; entries.len()];
        let mut kept = Vec::new();
        for item in items {
            if str_field(item, "type") != Some("message") {
                continue;
            }
            let role = match str_field(item, "role") {
                Some("user") => Role::User,
                Some("developer" | "system") => Role::System,
                _ => continue,
            };
            let text = soba_core::session::entry::blocks_text(&message_content(
                item.get("content").unwrap_or(&Value::Null),
            ));
            let found = (0..entries.len()).rev().find(|&i| {
                !taken[i]
                    && matches!(&entries[i].body, EntryBody::Message(m)
                        if m.role == role && soba_core::session::entry::blocks_text(&m.content) == text)
            });
            if let Some(i) = found {
                taken[i] = true;
                kept.push(entries[i].id.clone());
            }
        }
        kept
    }
}

impl super::RecordReader for Reader {
    fn record(&mut self, line: usize, record: &Value) {
        Reader::record(self, line, record)
    }

    /// The assistant entry waiting for its `token_count` may still get its usage, and in a
    /// rollout whose usage leads its response, the entry holding that usage may still lose it
    /// to a later reply of the same response.
    fn settled_len(&self) -> usize {
        let len = self.builder.entries().len();
        let waiting = self
            .usage_target
            .as_deref()
            .and_then(|id| self.builder.position(id));
        let holding = self
            .leading
            .as_ref()
            .and_then(|(_, holder)| holder.as_deref())
            .and_then(|id| self.builder.position(id));
        waiting.into_iter().chain(holding).min().unwrap_or(len)
    }

    fn builder(&self) -> &EntryBuilder {
        &self.builder
    }

    fn header(&self) -> &HeaderInfo {
        &self.header
    }

    fn finish(self: Box<Self>) -> ImportResult {
        self.builder.finish(self.header)
    }
}

fn call_id(p: &Value) -> String {
    str_field(p, "call_id")
        .or_else(|| str_field(p, "id"))
        .unwrap_or("")
        .to_string()
}

fn message_content(content: &Value) -> Vec<ContentBlock> {
    match content {
        Value::Array(items) => items
            .iter()
            .map(|b| match str_field(b, "type") {
                Some("input_image") => ContentBlock::Image {
                    media_type: None,
                    data: str_field(b, "image_url").map(str::to_string),
                    extra: Default::default(),
                },
                _ => ContentBlock::text(
                    str_field(b, "text")
                        .map(str::to_string)
                        .unwrap_or_else(|| value_text(b)),
                ),
            })
            .collect(),
        other => vec![ContentBlock::text(value_text(other))],
    }
}

/// The text and exit code of a tool output. Older Codex writes a JSON string
/// `{"output": …, "metadata": {"exit_code": …}}`; newer writes plain text with a
/// `Process exited with code N` or `Exit code: N` line.
fn tool_output(output: &Value) -> (String, Option<i64>) {
    let text = match output {
        Value::String(s) => s.clone(),
        Value::Array(items) => items
            .iter()
            .filter_map(|i| str_field(i, "text"))
            .collect::<Vec<_>>()
            .join("\n"),
        other => value_text(other),
    };
    if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(&text) {
        if let Some(inner) = o.get("output") {
            let code = o
                .get("metadata")
                .and_then(|m| m.get("exit_code"))
                .and_then(Value::as_i64);
            return (value_text(inner), code);
        }
    }
    let code = text.lines().take(5).find_map(|l| {
        l.strip_prefix("Process exited with code ")
            .or_else(|| l.strip_prefix("Exit code: "))
            .and_then(|n| n.trim().parse().ok())
    });
    (text, code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::check::{is_one_line, loads};
    use crate::import::testing::{jsonl, options};
    use serde_json::json;

    fn line(kind: &str, payload: Value) -> Value {
        json!({"timestamp": "2026-01-01T00:00:00Z", "type": kind, "payload": payload})
    }

    fn item(payload: Value) -> Value {
        line("response_item", payload)
    }

    fn token_count(input: u64, cached: u64, output: u64) -> Value {
        line(
            "event_msg",
            json!({"type": "token_count", "info": {
            "last_token_usage": {"input_tokens": input, "cached_input_tokens": cached, "output_tokens": output},
            "model_context_window": 272000}}),
        )
    }

    fn import(records: &[Value]) -> ImportResult {
        import_str(&jsonl(records), &options()).unwrap()
    }

    #[test]
    fn apply_patch_is_a_call_with_its_patch_and_a_result_with_its_exit_code() {
        let patch = "*** Begin Patch\n*** Update File: a.rs\n@@\n-x\n+y\n*** End Patch";
        let r = import(&[
            item(
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "edit a.rs"}]}),
            ),
            item(
                json!({"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": patch}),
            ),
            item(
                json!({"type": "custom_tool_call_output", "call_id": "c1", "output": "Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess."}),
            ),
        ]);
        let (id, name, input) = r.entries[1].tool_calls().next().unwrap();
        assert_eq!((id, name), ("c1", "apply_patch"));
        assert_eq!(input, &json!({"input": patch}));
        let result = r.entries[2].as_tool_result().unwrap();
        assert_eq!(
            (
                result.call_id.as_str(),
                result.tool_name.as_deref(),
                result.exit_code
            ),
            ("c1", Some("apply_patch"), Some(0))
        );
        assert!(is_one_line(&r));
        loads(&r);
    }

    #[test]
    fn function_output_json_gives_text_and_exit_code() {
        let r = import(&[
            item(
                json!({"type": "function_call", "name": "shell", "call_id": "c1", "arguments": "{\"command\":[\"false\"]}"}),
            ),
            item(json!({"type": "function_call_output", "call_id": "c1",
                "output": "{\"output\":\"boom\\n\",\"metadata\":{\"exit_code\":1,\"duration_seconds\":0.1}}"})),
            item(
                json!({"type": "function_call", "name": "shell", "call_id": "c2", "arguments": "not json"}),
            ),
        ]);
        let (_, _, input) = r.entries[0].tool_calls().next().unwrap();
        assert_eq!(input, &json!({"command": ["false"]}));
        let result = r.entries[1].as_tool_result().unwrap();
        assert_eq!(result.exit_code, Some(1));
        assert_eq!(result.content, [ContentBlock::text("boom\n")]);
        let (_, _, raw) = r.entries[2].tool_calls().next().unwrap();
        assert_eq!(raw, &json!("not json"));
        assert_eq!(
            r.report.unmatched_calls, 1,
            "the second call never got output"
        );
    }

    #[test]
    fn token_count_goes_on_the_latest_assistant_entry_once() {
        let r = import(&[
            line(
                "session_meta",
                json!({"id": "rollout-1", "cwd": "/proj", "base_instructions": {"text": "You are Codex."}}),
            ),
            line("turn_context", json!({"model": "gpt-5-codex"})),
            item(
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}),
            ),
            item(
                json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}], "encrypted_content": "x"}),
            ),
            item(
                json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]}),
            ),
            token_count(1000, 800, 50),
            token_count(1000, 800, 50),
            item(json!({"type": "reasoning", "summary": [], "encrypted_content": "x"})),
        ]);
        let usages: Vec<(usize, Usage)> = r
            .entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.as_message().and_then(|m| m.usage).map(|u| (i, u)))
            .collect();
        assert_eq!(
            usages,
            [(
                3,
                Usage {
                    input: 200,
                    cache_read: 800,
                    cache_write: 0,
                    output: 50
                }
            )]
        );
        assert_eq!(r.report.usage_records, 1);
        let model = r.header.model.as_ref().unwrap();
        assert_eq!(
            (model.name.as_deref(), model.context_window),
            (Some("gpt-5-codex"), Some(272_000))
        );
        assert_eq!(
            (r.header.id.as_str(), r.header.workspace.as_str()),
            ("rollout-1", "/proj")
        );
        assert!(
            matches!(&r.entries[0].body, EntryBody::Setting(s) if s.system_prompt.as_deref() == Some("You are Codex."))
        );
        assert_eq!(
            r.report.skipped_records.get("reasoning without summary"),
            Some(&1)
        );
    }

    #[test]
    fn harness_messages_are_synthetic_and_developer_is_system() {
        let r = import(&[
            item(
                json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions instructions>"}]}),
            ),
            item(
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>\n</environment_context>"}]}),
            ),
            item(
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "real question"}]}),
            ),
        ]);
        let roles: Vec<(Role, bool)> = r
            .entries
            .iter()
            .map(|e| e.as_message().map(|m| (m.role, m.synthetic)).unwrap())
            .collect();
        assert_eq!(
            roles,
            [
                (Role::System, true),
                (Role::User, true),
                (Role::User, false)
            ]
        );
    }

    #[test]
    fn compacted_becomes_a_foreign_compaction_with_what_it_kept() {
        let r = import(&[
            item(
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}),
            ),
            item(
                json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]}),
            ),
            token_count(90_000, 10_000, 500),
            line(
                "compacted",
                json!({"message": "", "replacement_history": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"type": "compaction", "encrypted_content": "x"}]}),
            ),
            line("event_msg", json!({"type": "context_compacted"})),
        ]);
        assert_eq!(r.report.foreign_compactions, 1);
        let EntryBody::ForeignCompaction(fc) = &r.entries[2].body else {
            panic!("{:?}", r.entries[2])
        };
        assert_eq!(
            (
                fc.agent.as_str(),
                fc.kept_items,
                fc.tokens_before,
                fc.summary.as_deref()
            ),
            ("codex", Some(2), Some(90_500), None)
        );
        assert_eq!(r.entries[2].source_id.as_deref(), Some("line 4"));
        assert_eq!(fc.kept_entry_ids, Some(vec![r.entries[0].id.clone()]));
    }

    #[test]
    fn the_entries_a_replacement_history_copies_are_matched_latest_first_and_once() {
        let user = |text: &str| json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]});
        let r = import(&[
            item(
                json!({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions instructions>"}]}),
            ),
            item(user("again")),
            item(user("fix it")),
            item(user("again")),
            line(
                "compacted",
                json!({"message": "", "replacement_history": [
                user("again"), user("again"), user("never said"),
                {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions instructions>"}]},
                {"type": "compaction", "encrypted_content": "x"}]}),
            ),
        ]);
        let fc = r
            .entries
            .iter()
            .find_map(|e| match &e.body {
                EntryBody::ForeignCompaction(fc) => Some(fc),
                _ => None,
            })
            .unwrap();
        let ids = |n: &[usize]| n.iter().map(|&i| r.entries[i].id.clone()).collect();
        assert_eq!(fc.kept_entry_ids, Some(ids(&[3, 1, 0])));
        assert_eq!(fc.kept_items, Some(5));
    }

    #[test]
    fn a_reported_window_below_the_catalog_output_keeps_a_positive_hard_limit() {
        let r = import(&[
            line("turn_context", json!({"model": "gpt-5.3-codex-spark"})),
            item(
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}),
            ),
            line(
                "event_msg",
                json!({"type": "task_started", "model_context_window": 121600}),
            ),
        ]);
        let model = r.header.model.unwrap();
        assert_eq!(model.context_window, Some(121_600));
        assert_eq!(model.max_output_tokens, Some(30_400));
    }
    #[test]
    fn search_items_are_kept_and_the_usage_after_them_lands() {
        let tools = json!([{"type": "function", "name": "mcp__docs__search", "description": "x".repeat(400), "parameters": {"type": "object"}}]);
        let r = import(&[
            item(
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "find the docs tool"}]}),
            ),
            item(
                json!({"type": "tool_search_call", "call_id": "ts1", "execution": "client", "arguments": {"query": "docs"}}),
            ),
            item(
                json!({"type": "tool_search_output", "call_id": "ts1", "status": "completed", "execution": "client", "tools": tools}),
            ),
            item(
                json!({"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "tokio select"}}),
            ),
            token_count(30_000, 0, 40),
            item(
                json!({"type": "tool_search_output", "status": "completed", "execution": "server", "tools": []}),
            ),
            item(
                json!({"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": ""}),
            ),
            token_count(31_000, 0, 10),
        ]);
        loads(&r);
        assert!(is_one_line(&r));
        assert!(
            r.report.unknown_records.is_empty(),
            "{:?}",
            r.report.unknown_records
        );
        let opaque = &r.report.opaque_records;
        assert_eq!(opaque.get("response_item:tool_search_output"), Some(&2));
        assert_eq!(opaque.get("response_item:web_search_call"), Some(&1));
        assert_eq!(opaque.get("response_item:image_generation_call"), Some(&1));
        // The client-side search is a call and its result, the tools whole in the result.
        let result = r
            .entries
            .iter()
            .find_map(|e| match &e.body {
                EntryBody::ToolResult(t) if t.call_id == "ts1" => Some(t),
                _ => None,
            })
            .expect("the search output answers its call");
        assert_eq!(result.tool_name.as_deref(), Some("tool_search"));
        let ContentBlock::Opaque(block) = &result.content[0] else {
            panic!("kept whole: {:?}", result.content)
        };
        assert_eq!(block.fields().get("tools"), Some(&tools));
        // Both usage reports land: on the web search, and on the image generation.
        let usages: Vec<(usize, u64)> = r
            .entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match &e.body {
                EntryBody::Message(m) => m.usage.map(|u| (i, u.input)),
                _ => None,
            })
            .collect();
        assert_eq!(usages.len(), 2, "{usages:?}");
        assert_eq!(usages[0].1, 30_000);
        assert_eq!(usages[1].1, 31_000);
        assert!(matches!(&r.entries[usages[1].0].body,
            EntryBody::Message(m) if matches!(&m.content[0], ContentBlock::Opaque(o) if o.block_type() == "image_generation_call")));
        // The server-side search output is input the harness supplied.
        assert!(r.entries.iter().any(|e| matches!(&e.body,
            EntryBody::Message(m) if m.role == Role::User && m.synthetic
                && matches!(&m.content[0], ContentBlock::Opaque(_)))));
    }

    #[test]
    fn kept_items_count_in_the_budget_as_their_json() {
        let big = "schema ".repeat(3000);
        let with = import(&[
            item(
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}),
            ),
            item(
                json!({"type": "tool_search_output", "status": "completed", "execution": "server", "tools": [{"description": big}]}),
            ),
        ]);
        let tokens: u64 = with
            .entries
            .iter()
            .map(|e| {
                soba_core::session::count::entry_tokens(
                    soba_core::tokens::TokenizerKind::O200kBase,
                    e,
                )
            })
            .sum();
        assert!(tokens > 3000, "the 21 KB of tools count: {tokens}");
    }

    #[test]
    fn a_usage_report_under_another_event_name_still_anchors() {
        let r = import(&[
            item(
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}),
            ),
            item(
                json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}),
            ),
            line(
                "event_msg",
                json!({"type": "token_usage", "info": {"last_token_usage": {"input_tokens": 900, "output_tokens": 5}}}),
            ),
        ]);
        let m = r
            .entries
            .iter()
            .find_map(|e| match &e.body {
                EntryBody::Message(m) if m.role == Role::Assistant => Some(m),
                _ => None,
            })
            .unwrap();
        assert_eq!(m.usage.map(|u| u.input), Some(900));
    }
}
