//! Claude Code session files: one record per line (or the same records as one JSON array).
//!
//! Records form a tree by `uuid` / `parentUuid`. One model response is split over several
//! `assistant` records that share `message.id` and each repeat the usage; the usage is kept
//! once, on the response's last record. Tool results live in `user` records as `tool_result`
//! blocks and become `tool_result` entries. Parallel tool calls make the source tree fork (each
//! result hangs off its own call record); those forks are folded back into one line so that
//! every result follows its call. Sidechain records (subagent traffic) are left out and counted.
//! A `compact_boundary` system record and the `isCompactSummary` message after it become one
//! `foreign_compaction` entry (Claude Code 2.x). Claude Code 1.0.x writes only the summary,
//! with `parentUuid: null`: it becomes a `foreign_compaction` continuing the conversation
//! before it in the file.

use std::collections::HashMap;

use serde_json::Value;

use super::{
    message, nonzero, opaque_block, provider_fields, read_jsonl, str_field, u64_field, value_text,
    EntryBuilder, Format, HeaderInfo, ImportError, ImportOptions, ImportResult,
};
use soba_core::session::entry::{
    ContentBlock, EntryBody, ForeignCompactionEntry, Role, ToolResultEntry, Usage,
};

/// Record types Claude Code writes that carry nothing for the model input.
const BOOKKEEPING_TYPES: &[&str] = &[
    "summary",
    "file-history-snapshot",
    "progress",
    "queue-operation",
    "custom-title",
    "tag",
    "attachment",
];

/// Prefixes of user messages the harness writes for slash commands.
const COMMAND_MARKERS: &[&str] = &[
    "<command-name>",
    "<command-message>",
    "<local-command-stdout>",
    "<local-command-caveat>",
];

/// Whether a JSON value looks like a Claude Code record.
pub(crate) fn looks_like_record(v: &Value) -> bool {
    let kind = str_field(v, "type");
    let has_tree = v.get("uuid").is_some() && v.get("parentUuid").is_some();
    (has_tree && matches!(kind, Some("user" | "assistant" | "system")))
        || (kind == Some("file-history-snapshot") && v.get("snapshot").is_some())
        || (kind == Some("summary") && v.get("leafUuid").is_some())
}

pub fn import_str(text: &str, options: &ImportOptions) -> Result<ImportResult, ImportError> {
    let (records, corrupt) = if text.trim_start().starts_with('[') {
        let items: Vec<Value> =
            serde_json::from_str(text).map_err(|e| ImportError::WrongFormat {
                format: Format::ClaudeCode,
                reason: format!("not a JSON array of records ({e})"),
            })?;
        (
            items
                .into_iter()
                .enumerate()
                .map(|(i, v)| (i + 1, v))
                .collect(),
            Vec::new(),
        )
    } else {
        read_jsonl(text)
    };
    let mut reader = Reader::new(options);
    reader.builder.report.corrupt_lines = corrupt;
    for (_, record) in &records {
        reader.record(record);
    }
    Ok(reader.finish())
}

/// The Claude Code record reader: fed one record at a time, by `import_str` for a whole file
/// and by [`super::stream::StreamImporter`] for a live one.
pub(crate) struct Reader {
    builder: EntryBuilder,
    header: HeaderInfo,
    /// The uuid of the latest main-branch record: the source's leaf.
    last_main_uuid: Option<String>,
    /// The response of the latest assistant record: until another response or a user prompt
    /// arrives, its usage may move to a later record of it (records of one response can be
    /// interleaved with tool results and bookkeeping records).
    open_response: Option<String>,
    /// A compaction boundary entry waiting for its summary in the next record.
    open_boundary: Option<usize>,
    /// `message.id` → position of the entry that holds the response's usage so far.
    usage_holder: HashMap<String, usize>,
    /// Tool call id → tool name, for results.
    tool_names: HashMap<String, String>,
    /// Source uuid → `message.id` of the assistant record.
    response_of: HashMap<String, String>,
}

impl Reader {
    pub(crate) fn new(options: &ImportOptions) -> Self {
        Reader {
            builder: EntryBuilder::new(Format::ClaudeCode, &options.now),
            header: HeaderInfo::new(Format::ClaudeCode, options),
            last_main_uuid: None,
            open_response: None,
            open_boundary: None,
            usage_holder: HashMap::new(),
            tool_names: HashMap::new(),
            response_of: HashMap::new(),
        }
    }

    fn finish(mut self) -> ImportResult {
        // The source's leaf is its last main-branch record.
        let leaf = self
            .last_main_uuid
            .take()
            .and_then(|u| self.builder.resolve(&u))
            .flatten();
        self.builder.set_leaf(leaf);
        self.builder.finish(self.header)
    }

    fn record(&mut self, r: &Value) {
        self.open_boundary = None;
        if !is_sidechain(r) {
            if let Some(uuid) = str_field(r, "uuid") {
                self.last_main_uuid = Some(uuid.to_string());
            }
        }
        self.read(r);
    }

    fn read(&mut self, r: &Value) {
        let Some(kind) = str_field(r, "type") else {
            self.builder.unknown("(no type)");
            return;
        };
        if is_sidechain(r) {
            self.builder.skipped("sidechain");
            return;
        }
        if self.header.source_session_id.is_none() {
            if let Some(id) = str_field(r, "sessionId") {
                self.header.set_session_id(id);
            }
        }
        if let Some(cwd) = str_field(r, "cwd") {
            self.header.set_workspace(cwd);
        }
        if let Some(ts) = str_field(r, "timestamp") {
            self.header.set_created_at(ts);
        }
        match kind {
            "user" => self.user(r),
            "assistant" => self.assistant(r),
            "system" if str_field(r, "subtype") == Some("compact_boundary") => {
                self.compact_boundary(r)
            }
            "system" => {
                let subtype = str_field(r, "subtype").unwrap_or("other");
                self.builder.skipped(format!("system:{subtype}"));
                self.alias_to_parent(r);
            }
            k if BOOKKEEPING_TYPES.contains(&k) => {
                self.builder.skipped(k.to_string());
                self.alias_to_parent(r);
            }
            other => {
                self.builder.unknown(other.to_string());
                self.alias_to_parent(r);
            }
        }
    }

    /// The entry the record's first entry attaches to.
    fn parent_of(&self, r: &Value) -> Option<String> {
        let parent_uuid = str_field(r, "parentUuid").or_else(|| str_field(r, "logicalParentUuid"));
        match parent_uuid {
            // A parent that is not in the file (trimmed transcript): keep the line going.
            Some(p) => self
                .builder
                .resolve(p)
                .unwrap_or_else(|| self.builder.last_id()),
            None => None,
        }
    }

    /// Parent for a record that continues a tool exchange: when the source tree forks only
    /// because of parallel tool calls, attach to the latest entry instead, so the calls and
    /// results form one line.
    fn parent_folding_parallel_calls(&self, r: &Value, is_tool_traffic: bool) -> Option<String> {
        let parent = self.parent_of(r);
        let tail = self.builder.last_id();
        if !is_tool_traffic || parent == tail {
            return parent;
        }
        match (&parent, &tail) {
            (Some(p), Some(t)) if only_tool_traffic_between(&self.builder, p, t) => tail,
            _ => parent,
        }
    }

    fn alias_to_parent(&mut self, r: &Value) {
        if let Some(uuid) = str_field(r, "uuid") {
            let parent = self.parent_of(r);
            self.builder.alias(uuid, parent);
        }
    }

    fn user(&mut self, r: &Value) {
        let uuid = str_field(r, "uuid");
        let ts = str_field(r, "timestamp");
        let content = r.pointer("/message/content").unwrap_or(&Value::Null);
        if r.get("isCompactSummary").and_then(Value::as_bool) == Some(true) {
            self.compact_summary(r, content);
            return;
        }
        let blocks: Vec<&Value> = match content {
            Value::Array(items) => items.iter().collect(),
            _ => vec![content],
        };
        let mut results = Vec::new();
        let mut visible = Vec::new();
        for b in blocks {
            match b {
                Value::String(s) => visible.push(ContentBlock::text(s)),
                _ => match str_field(b, "type") {
                    Some("tool_result") => results.push(self.tool_result(b)),
                    Some("text") => visible.push(text_block(b)),
                    Some("image") => visible.push(image(b)),
                    Some(other) => match opaque_block(b) {
                        Some(block) => visible.push(block),
                        None => self.builder.skipped(format!("user block:{other}")),
                    },
                    None => self.builder.unknown("user block without type"),
                },
            }
        }
        let only_results = visible.is_empty() && !results.is_empty();
        let mut parent = self.parent_folding_parallel_calls(r, only_results);
        for result in results {
            parent = Some(
                self.builder
                    .push(parent, uuid, ts, EntryBody::ToolResult(result)),
            );
        }
        if !visible.is_empty() {
            // A prompt of the user's: the response before it is over.
            self.open_response = None;
            let mut m = message(Role::User, visible);
            m.synthetic = is_harness_message(r, &m.content);
            parent = Some(self.builder.push(parent, uuid, ts, EntryBody::Message(m)));
        }
        if let Some(uuid) = uuid {
            self.builder.alias(uuid, parent);
        }
    }

    fn tool_result(&mut self, b: &Value) -> ToolResultEntry {
        let call_id = str_field(b, "tool_use_id").unwrap_or("").to_string();
        let content = match b.get("content") {
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| match str_field(i, "type") {
                    Some("image") => image(i),
                    Some("text") => text_block(i),
                    _ => opaque_block(i).unwrap_or_else(|| ContentBlock::text(value_text(i))),
                })
                .collect(),
            Some(other) => vec![ContentBlock::text(value_text(other))],
            None => Vec::new(),
        };
        ToolResultEntry {
            tool_name: self.tool_names.get(&call_id).cloned(),
            call_id,
            content,
            is_error: b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
            exit_code: None,
        }
    }

    fn assistant(&mut self, r: &Value) {
        let uuid = str_field(r, "uuid");
        let msg = r.get("message").unwrap_or(&Value::Null);
        let response_id = str_field(msg, "id");
        let model = str_field(msg, "model").filter(|m| *m != "<synthetic>");
        if let Some(m) = model {
            self.header.set_model(m);
        }
        let mut content = Vec::new();
        match msg.get("content") {
            Some(Value::Array(items)) => {
                for b in items {
                    match str_field(b, "type") {
                        Some("text") => content.push(text_block(b)),
                        // `signature` stays on the block: the API takes earlier thinking back
                        // in a tool loop only with it.
                        Some("thinking") => content.push(ContentBlock::Thinking {
                            thinking: str_field(b, "thinking").unwrap_or("").to_string(),
                            extra: provider_fields(b, &["type", "thinking"]),
                        }),
                        Some("tool_use") => {
                            let id = str_field(b, "id").unwrap_or("").to_string();
                            let name = str_field(b, "name").unwrap_or("").to_string();
                            self.tool_names.insert(id.clone(), name.clone());
                            content.push(ContentBlock::ToolCall {
                                id,
                                name,
                                input: Box::new(b.get("input").cloned().unwrap_or(Value::Null)),
                                extra: provider_fields(b, &["type", "id", "name", "input"]),
                            });
                        }
                        // `redacted_thinking`, server tool blocks, …: kept whole, for the
                        // provider.
                        Some(other) => match opaque_block(b) {
                            Some(block) => content.push(block),
                            None => self.builder.skipped(format!("assistant block:{other}")),
                        },
                        None => self.builder.unknown("assistant block without type"),
                    }
                }
            }
            Some(Value::String(s)) => content.push(ContentBlock::text(s)),
            _ => {}
        }
        // Same response as the parent record: a continuation, part of one tool exchange.
        let continues_response = response_id.is_some()
            && str_field(r, "parentUuid")
                .and_then(|p| self.response_of.get(p))
                .map(String::as_str)
                == response_id;
        let parent = self.parent_folding_parallel_calls(r, continues_response);
        if let (Some(u), Some(id)) = (uuid, response_id) {
            self.response_of.insert(u.to_string(), id.to_string());
        }
        if content.is_empty() {
            if let Some(u) = uuid {
                self.builder.alias(u, parent);
            }
            self.builder.skipped("assistant record without content");
            return;
        }
        let mut m = message(Role::Assistant, content);
        m.model = model.map(str::to_string);
        m.synthetic = r.get("isApiErrorMessage").and_then(Value::as_bool) == Some(true)
            || str_field(msg, "model") == Some("<synthetic>");
        let id = self.builder.push(
            parent,
            uuid,
            str_field(r, "timestamp"),
            EntryBody::Message(m),
        );
        if let Some(usage) = msg.get("usage").map(usage_of).and_then(nonzero) {
            self.set_response_usage(response_id, &id, usage);
        }
        self.open_response = response_id.map(str::to_string);
    }

    /// Keep one usage per response, on the entry of its latest record: every record repeats
    /// the usage, and the last one has the final output count.
    fn set_response_usage(&mut self, response_id: Option<&str>, entry_id: &str, usage: Usage) {
        if let Some(rid) = response_id {
            let position = self.builder.entries().len() - 1;
            if let Some(previous) = self.usage_holder.insert(rid.to_string(), position) {
                let previous_id = format!("e{}", previous + 1);
                if let Some(EntryBody::Message(m)) =
                    self.builder.entry_mut(&previous_id).map(|e| &mut e.body)
                {
                    m.usage = None;
                }
            }
        }
        if let Some(EntryBody::Message(m)) = self.builder.entry_mut(entry_id).map(|e| &mut e.body) {
            m.usage = Some(usage);
        }
    }

    fn compact_boundary(&mut self, r: &Value) {
        let meta = r.get("compactMetadata").unwrap_or(&Value::Null);
        let entry = ForeignCompactionEntry {
            agent: Format::ClaudeCode.as_str().into(),
            trigger: str_field(meta, "trigger").map(str::to_string),
            tokens_before: meta.get("preTokens").and_then(Value::as_u64),
            summary: None,
            summary_tokens: None,
            first_kept_entry_id: None,
            kept_items: None,
            kept_entry_ids: None,
            instructions: None,
        };
        let parent = self.parent_of(r);
        self.builder.push(
            parent,
            str_field(r, "uuid"),
            str_field(r, "timestamp"),
            EntryBody::ForeignCompaction(Box::new(entry)),
        );
        self.open_boundary = Some(self.builder.entries().len() - 1);
    }

    /// The summary message after a boundary: it is what the source agent kept, recorded on the
    /// boundary's `foreign_compaction` entry rather than as a message.
    fn compact_summary(&mut self, r: &Value, content: &Value) {
        let text = match content {
            Value::Array(items) => items
                .iter()
                .filter_map(|b| str_field(b, "text"))
                .collect::<Vec<_>>()
                .join("\n"),
            other => value_text(other),
        };
        let parent = match self.parent_of(r) {
            // Claude Code 1.0.x writes no boundary record: the summary alone marks the
            // compaction, as a new root (`parentUuid: null`). It summarized the conversation
            // before it in the file, which it continues.
            None if str_field(r, "parentUuid").is_none()
                && str_field(r, "logicalParentUuid").is_none() =>
            {
                self.builder.last_id()
            }
            parent => parent,
        };
        let boundary = parent.clone().filter(|p| {
            matches!(
                self.builder.get(p).map(|e| &e.body),
                Some(EntryBody::ForeignCompaction(_))
            )
        });
        let target = match boundary {
            Some(b) => b,
            // A summary without its boundary record: still a foreign compaction.
            None => self.builder.push(
                parent,
                None,
                str_field(r, "timestamp"),
                EntryBody::ForeignCompaction(Box::new(ForeignCompactionEntry {
                    agent: Format::ClaudeCode.as_str().into(),
                    trigger: None,
                    tokens_before: None,
                    summary: None,
                    summary_tokens: None,
                    first_kept_entry_id: None,
                    kept_items: None,
                    kept_entry_ids: None,
                    instructions: None,
                })),
            ),
        };
        if let Some(EntryBody::ForeignCompaction(fc)) =
            self.builder.entry_mut(&target).map(|e| &mut e.body)
        {
            fc.summary = Some(text);
        }
        if let Some(uuid) = str_field(r, "uuid") {
            self.builder.alias(uuid, Some(target));
        }
    }
}

impl super::RecordReader for Reader {
    fn record(&mut self, _line: usize, record: &Value) {
        Reader::record(self, record)
    }

    fn settled_len(&self) -> usize {
        let response = self
            .open_response
            .as_ref()
            .and_then(|rid| self.usage_holder.get(rid).copied());
        [response, self.open_boundary]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.builder.entries().len())
    }

    fn builder(&self) -> &EntryBuilder {
        &self.builder
    }

    fn header(&self) -> &HeaderInfo {
        &self.header
    }

    fn finish(self: Box<Self>) -> ImportResult {
        Reader::finish(*self)
    }
}

fn is_sidechain(r: &Value) -> bool {
    r.get("isSidechain").and_then(Value::as_bool) == Some(true)
}

/// Whether every entry from `tail` up to (not including) `ancestor` is a tool call or a tool
/// result, and `ancestor` is on that path: the shape parallel tool calls leave behind.
fn only_tool_traffic_between(builder: &EntryBuilder, ancestor: &str, tail: &str) -> bool {
    let mut cur = Some(tail);
    while let Some(id) = cur {
        if id == ancestor {
            return true;
        }
        let Some(entry) = builder.get(id) else {
            return false;
        };
        let tool_traffic = match &entry.body {
            EntryBody::ToolResult(_) => true,
            EntryBody::Message(m) => {
                m.role == Role::Assistant
                    && m.content
                        .iter()
                        .all(|b| matches!(b, ContentBlock::ToolCall { .. }))
            }
            _ => false,
        };
        if !tool_traffic {
            return false;
        }
        cur = entry.parent_id.as_deref();
    }
    false
}

fn is_harness_message(r: &Value, content: &[ContentBlock]) -> bool {
    let flagged = |k: &str| r.get(k).and_then(Value::as_bool) == Some(true);
    flagged("isMeta")
        || flagged("isVisibleInTranscriptOnly")
        || content.iter().any(|b| match b {
            ContentBlock::Text { text, .. } => COMMAND_MARKERS
                .iter()
                .any(|m| text.trim_start().starts_with(m)),
            _ => false,
        })
}

fn text_block(b: &Value) -> ContentBlock {
    ContentBlock::Text {
        text: str_field(b, "text").unwrap_or("").to_string(),
        extra: provider_fields(b, &["type", "text"]),
    }
}

fn image(b: &Value) -> ContentBlock {
    let source = b.get("source").unwrap_or(&Value::Null);
    ContentBlock::Image {
        media_type: str_field(source, "media_type").map(str::to_string),
        data: str_field(source, "data")
            .or_else(|| str_field(source, "url"))
            .map(str::to_string),
        extra: provider_fields(b, &["type", "source"]),
    }
}

fn usage_of(u: &Value) -> Usage {
    Usage {
        input: u64_field(u, "input_tokens"),
        cache_read: u64_field(u, "cache_read_input_tokens"),
        cache_write: u64_field(u, "cache_creation_input_tokens"),
        output: u64_field(u, "output_tokens"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::check::{is_one_line, loads};
    use crate::import::testing::{jsonl, options};
    use serde_json::json;

    fn rec(kind: &str, uuid: &str, parent: Option<&str>, message: Value) -> Value {
        json!({"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "sess", "cwd": "/proj",
               "isSidechain": false, "timestamp": "2026-01-01T00:00:00Z", "message": message})
    }

    fn usage(output: u64) -> Value {
        json!({"input_tokens": 10, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5, "output_tokens": output})
    }

    fn import(records: &[Value]) -> ImportResult {
        import_str(&jsonl(records), &options()).unwrap()
    }

    /// One response split over three records with two parallel calls, whose results hang off
    /// their own call records, then a second response.
    fn split_response() -> Vec<Value> {
        vec![
            rec(
                "user",
                "u1",
                None,
                json!({"role": "user", "content": "fix it"}),
            ),
            rec(
                "assistant",
                "a1",
                Some("u1"),
                json!({"id": "msg_1", "model": "claude-sonnet-4-5-20250929",
                "content": [{"type": "thinking", "thinking": "hmm"}], "usage": usage(1)}),
            ),
            rec(
                "assistant",
                "a2",
                Some("a1"),
                json!({"id": "msg_1", "model": "claude-sonnet-4-5-20250929",
                "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "a.rs"}}], "usage": usage(2)}),
            ),
            rec(
                "assistant",
                "a3",
                Some("a2"),
                json!({"id": "msg_1", "model": "claude-sonnet-4-5-20250929",
                "content": [{"type": "tool_use", "id": "t2", "name": "Read", "input": {"file_path": "b.rs"}}], "usage": usage(40)}),
            ),
            rec(
                "user",
                "r1",
                Some("a2"),
                json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "A"}]}),
            ),
            rec(
                "user",
                "r2",
                Some("a3"),
                json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2",
                "content": [{"type": "text", "text": "B"}], "is_error": true}]}),
            ),
            rec(
                "assistant",
                "a4",
                Some("r2"),
                json!({"id": "msg_2", "model": "claude-sonnet-4-5-20250929",
                "content": [{"type": "text", "text": "done"}], "usage": usage(7)}),
            ),
        ]
    }

    #[test]
    fn a_split_response_keeps_its_usage_once_on_its_last_record() {
        let r = import(&split_response());
        let with_usage: Vec<(&str, u64)> = r
            .entries
            .iter()
            .filter_map(|e| {
                e.as_message()
                    .and_then(|m| m.usage)
                    .map(|u| (e.source_id.as_deref().unwrap(), u.output))
            })
            .collect();
        assert_eq!(with_usage, [("a3", 40), ("a4", 7)]);
        assert_eq!(r.report.usage_records, 2);
        let u = r.entries[3].as_message().unwrap().usage.unwrap();
        assert_eq!((u.input, u.cache_read, u.cache_write), (10, 100, 5));
        assert_eq!(
            r.header.model.as_ref().unwrap().context_window,
            Some(200_000)
        );
    }

    #[test]
    fn parallel_call_forks_fold_into_one_line_with_named_results() {
        let r = import(&split_response());
        assert!(is_one_line(&r), "{:#?}", r.entries);
        let results: Vec<(&str, Option<&str>, bool)> = r
            .entries
            .iter()
            .filter_map(|e| e.as_tool_result())
            .map(|t| (t.call_id.as_str(), t.tool_name.as_deref(), t.is_error))
            .collect();
        assert_eq!(
            results,
            [("t1", Some("Read"), false), ("t2", Some("Read"), true)]
        );
        assert_eq!(
            (
                r.report.tool_calls,
                r.report.tool_results,
                r.report.unmatched_calls
            ),
            (2, 2, 0)
        );
        let session = loads(&r);
        assert_eq!(session.leaf_id(), r.entries.last().map(|e| e.id.as_str()));
        assert_eq!(r.header.workspace, "/proj");
        assert_eq!(r.header.id, "sess");
    }

    #[test]
    fn a_real_branch_is_kept() {
        // The user went back to u1 and asked again: a branch, not a parallel-call fork.
        let mut records = split_response();
        records.push(rec(
            "user",
            "u2",
            Some("u1"),
            json!({"role": "user", "content": "no, differently"}),
        ));
        let r = import(&records);
        let u2 = r.entries.last().unwrap();
        assert_eq!(u2.parent_id.as_deref(), Some("e1"));
        assert_eq!(loads(&r).leaf_id(), Some(u2.id.as_str()));
    }

    #[test]
    fn results_come_before_the_text_of_the_same_user_record() {
        let r = import(&[
            rec(
                "assistant",
                "a1",
                None,
                json!({"id": "m", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]}),
            ),
            rec(
                "user",
                "u1",
                Some("a1"),
                json!({"role": "user", "content": [
                {"type": "text", "text": "also this"}, {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}),
            ),
        ]);
        assert!(r.entries[1].as_tool_result().is_some());
        assert_eq!(
            r.entries[2].as_message().unwrap().content,
            [ContentBlock::text("also this")]
        );
        assert_eq!(r.entries[1].source_id.as_deref(), Some("u1"));
        assert_eq!(r.entries[2].source_id.as_deref(), Some("u1"));
    }

    #[test]
    fn a_compaction_becomes_one_foreign_compaction_entry() {
        let mut boundary = json!({"type": "system", "subtype": "compact_boundary", "uuid": "cb", "parentUuid": null,
            "logicalParentUuid": "a1", "compactMetadata": {"trigger": "auto", "preTokens": 155109}});
        boundary["isSidechain"] = json!(false);
        let mut summary = rec(
            "user",
            "s1",
            Some("cb"),
            json!({"role": "user", "content": "This session is being continued. Summary: did things."}),
        );
        summary["isCompactSummary"] = json!(true);
        let r = import(&[
            rec("user", "u1", None, json!({"role": "user", "content": "go"})),
            rec(
                "assistant",
                "a1",
                Some("u1"),
                json!({"id": "m1", "content": [{"type": "text", "text": "went"}]}),
            ),
            boundary,
            summary,
            rec(
                "assistant",
                "a2",
                Some("s1"),
                json!({"id": "m2", "content": [{"type": "text", "text": "continuing"}]}),
            ),
        ]);
        assert_eq!(r.report.foreign_compactions, 1);
        assert_eq!(r.report.messages.user, 1, "the summary is not a message");
        let fc = &r.entries[2];
        assert_eq!(fc.parent_id.as_deref(), Some("e2"));
        assert_eq!(fc.source_id.as_deref(), Some("cb"));
        let EntryBody::ForeignCompaction(body) = &fc.body else {
            panic!("{fc:?}")
        };
        assert_eq!(body.trigger.as_deref(), Some("auto"));
        assert_eq!(body.tokens_before, Some(155_109));
        assert!(body.summary.as_deref().unwrap().contains("did things"));
        assert!(body.summary_tokens.unwrap() > 5);
        assert_eq!(r.entries[3].parent_id.as_deref(), Some(fc.id.as_str()));
        assert!(is_one_line(&r));
    }

    #[test]
    fn a_1_0_x_compaction_marked_only_by_its_summary_continues_the_conversation() {
        // Claude Code 1.0.x: no boundary record; the summary is a new root.
        let mut summary = rec(
            "user",
            "s1",
            None,
            json!({"role": "user", "content": "This session is being continued. Summary: did things."}),
        );
        summary["isCompactSummary"] = json!(true);
        summary["parentUuid"] = Value::Null;
        let r = import(&[
            rec("user", "u1", None, json!({"role": "user", "content": "go"})),
            rec(
                "assistant",
                "a1",
                Some("u1"),
                json!({"id": "m1", "content": [{"type": "text", "text": "went"}]}),
            ),
            summary,
            rec(
                "assistant",
                "a2",
                Some("s1"),
                json!({"id": "m2", "content": [{"type": "text", "text": "continuing"}]}),
            ),
        ]);
        assert_eq!(r.report.foreign_compactions, 1);
        let fc = &r.entries[2];
        assert_eq!(
            fc.parent_id.as_deref(),
            Some("e2"),
            "after the conversation"
        );
        let EntryBody::ForeignCompaction(body) = &fc.body else {
            panic!("{fc:?}")
        };
        assert!(body.summary.as_deref().unwrap().contains("did things"));
        assert_eq!(r.entries[3].parent_id.as_deref(), Some(fc.id.as_str()));
        assert!(is_one_line(&r));
    }

    #[test]
    fn sidechains_are_left_out_and_harness_messages_marked() {
        let mut side = rec(
            "assistant",
            "x1",
            Some("u1"),
            json!({"id": "mx", "content": [{"type": "text", "text": "subagent"}]}),
        );
        side["isSidechain"] = json!(true);
        let mut meta = rec(
            "user",
            "u2",
            Some("u1"),
            json!({"role": "user", "content": "<local-command-caveat>Caveat</local-command-caveat>"}),
        );
        meta["isMeta"] = json!(true);
        let r = import(&[
            rec("user", "u1", None, json!({"role": "user", "content": "go"})),
            side,
            meta,
            rec(
                "user",
                "u3",
                Some("u2"),
                json!({"role": "user", "content": "<command-name>/exit</command-name>"}),
            ),
            json!({"type": "file-history-snapshot", "messageId": "x", "snapshot": {}}),
            json!({"type": "brand-new-thing", "uuid": "n1", "parentUuid": "u3"}),
        ]);
        assert_eq!(r.report.skipped_records.get("sidechain"), Some(&1));
        assert_eq!(
            r.report.skipped_records.get("file-history-snapshot"),
            Some(&1)
        );
        assert_eq!(r.report.unknown_records.get("brand-new-thing"), Some(&1));
        let synthetic: Vec<bool> = r
            .entries
            .iter()
            .map(|e| e.as_message().unwrap().synthetic)
            .collect();
        assert_eq!(synthetic, [false, true, true]);
    }

    #[test]
    fn an_interrupted_call_is_kept_without_a_result() {
        let r = import(&[
            rec("user", "u1", None, json!({"role": "user", "content": "go"})),
            rec(
                "assistant",
                "a1",
                Some("u1"),
                json!({"id": "m1", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "sleep 99"}}]}),
            ),
            rec(
                "user",
                "u2",
                Some("a1"),
                json!({"role": "user", "content": [{"type": "text", "text": "[Request interrupted by user]"}]}),
            ),
        ]);
        assert_eq!(
            (
                r.report.tool_calls,
                r.report.tool_results,
                r.report.unmatched_calls
            ),
            (1, 0, 1)
        );
        assert_eq!(r.entries[1].tool_calls().count(), 1);
    }

    #[test]
    fn records_as_one_json_array_import_the_same() {
        let records = split_response();
        let from_lines = import(&records);
        let from_array = import_str(&Value::Array(records).to_string(), &options()).unwrap();
        assert_eq!(from_lines.entries, from_array.entries);
        let err = import_str("[{\"type\":", &options()).unwrap_err();
        assert!(
            matches!(
                err,
                ImportError::WrongFormat {
                    format: Format::ClaudeCode,
                    ..
                }
            ),
            "{err}"
        );
    }
}
