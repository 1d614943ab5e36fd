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
    message, nonzero, opaque_block, provider_fields, read_jsonl, str_field, u64_field, value_text,
    EntryBuilder, Format, HeaderInfo, ImportError, ImportOptions, ImportResult,
};
use soba_core::session::entry::{
    ContentBlock, EntryBody, ForeignCompactionEntry, Role, ToolResultEntry, Usage,
};

/// Entry types that change settings or annotate the tree, with nothing for the model input.
const BOOKKEEPING_TYPES: &[&str] = &[
    "thinking_level_change",
    "model_change",
    "label",
    "custom",
    "session_info",
];

/// A pi session header. Early files have no `version`; a SOBA log header (version 1, with a
/// `workspace`) is not one.
pub(crate) fn looks_like_header(v: &Value) -> bool {
    let versioned = v
        .get("version")
        .is_some_and(|n| n.as_u64().is_some_and(|n| n >= 2));
    str_field(v, "type") == Some("session")
        && v.get("id").is_some()
        && (versioned || v.get("cwd").is_some())
        && v.get("workspace").is_none()
}

pub fn import_str(text: &str, options: &ImportOptions) -> Result<ImportResult, ImportError> {
    let (records, corrupt) = read_jsonl(text);
    let mut reader = Reader::new(options);
    reader.builder.report.corrupt_lines = corrupt;
    for (_, r) in &records {
        reader.record(r);
    }
    Ok(reader.finish())
}

/// The pi session reader: fed one record at a time, by `import_str` for a whole file and by
/// [`super::stream::StreamImporter`] for a live one. No record changes an entry made before it.
pub(crate) struct Reader {
    builder: EntryBuilder,
    header: HeaderInfo,
    /// The id of the latest record with one: the source's leaf.
    leaf_source: Option<String>,
    /// How many records were read, the session header included: the index pi v1's compactions
    /// name their first kept entry by (`firstKeptEntryIndex`, before entries had ids).
    records_read: usize,
    /// The first entry made from each record, by that record's index, for files without ids.
    entry_of_record: Vec<(usize, String)>,
}

impl Reader {
    pub(crate) fn new(options: &ImportOptions) -> Self {
        Reader {
            builder: EntryBuilder::new(Format::Pi, &options.now),
            header: HeaderInfo::new(Format::Pi, options),
            leaf_source: None,
            records_read: 0,
            entry_of_record: Vec::new(),
        }
    }

    fn finish(mut self) -> ImportResult {
        let leaf = self
            .leaf_source
            .take()
            .and_then(|id| self.builder.resolve(&id))
            .flatten();
        self.builder.set_leaf(leaf);
        self.builder.finish(self.header)
    }

    fn record(&mut self, r: &Value) {
        let index = self.records_read;
        self.records_read += 1;
        let kept_by_index = r
            .get("firstKeptEntryIndex")
            .and_then(Value::as_u64)
            .and_then(|i| self.first_entry_from_record(i as usize));
        let builder = &mut self.builder;
        let header = &mut self.header;
        let kind = str_field(r, "type").unwrap_or("(no type)");
        if kind == "session" {
            session_header(header, r);
            return;
        }
        if let Some(ts) = str_field(r, "timestamp") {
            header.set_created_at(ts);
        }
        let id = str_field(r, "id");
        let parent = match (id, str_field(r, "parentId")) {
            // Early pi files have no tree: entries follow each other in file order.
            (None, _) => builder.last_id(),
            // A parent lost to a corrupt line: keep the line going from the latest entry.
            (Some(_), Some(p)) => builder.resolve(p).unwrap_or_else(|| builder.last_id()),
            (Some(_), None) => None,
        };
        let ts = str_field(r, "timestamp");
        let body = match kind {
            "message" => message_body(builder, header, r.get("message").unwrap_or(&Value::Null)),
            "compaction" => Some(EntryBody::ForeignCompaction(Box::new(
                ForeignCompactionEntry {
                    agent: Format::Pi.as_str().into(),
                    trigger: None,
                    tokens_before: r.get("tokensBefore").and_then(Value::as_u64),
                    summary: str_field(r, "summary").map(str::to_string),
                    summary_tokens: None,
                    // The source id of the kept entry becomes the id of the entry it was imported as.
                    first_kept_entry_id: str_field(r, "firstKeptEntryId")
                        .and_then(|k| builder.first_entry_of(k).map(str::to_string))
                        .or(kept_by_index),
                    kept_items: None,
                    kept_entry_ids: None,
                    instructions: None,
                },
            ))),
            "branch_summary" => {
                // pi sends the summary of an abandoned branch to the model as a user message.
                let mut m = message(
                    Role::User,
                    vec![ContentBlock::text(str_field(r, "summary").unwrap_or(""))],
                );
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
                let made = builder.push(parent, id, ts, body);
                self.entry_of_record.push((index, made));
            }
            (None, Some(id)) => builder.alias(id, parent),
            (None, None) => {}
        }
        if id.is_some() {
            self.leaf_source = id.map(str::to_string);
        }
    }
}

impl Reader {
    /// The first entry made from record `index` or, when that record made none (a model
    /// change, a line pi keeps for itself), from the first record after it that did.
    fn first_entry_from_record(&self, index: usize) -> Option<String> {
        let at = self.entry_of_record.partition_point(|(i, _)| *i < index);
        self.entry_of_record.get(at).map(|(_, id)| id.clone())
    }
}

impl super::RecordReader for Reader {
    fn record(&mut self, _line: usize, record: &Value) {
        Reader::record(self, record)
    }

    fn settled_len(&self) -> usize {
        self.builder.entries().len()
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

fn message_body(
    builder: &mut EntryBuilder,
    header: &mut HeaderInfo,
    m: &Value,
) -> Option<EntryBody> {
    match str_field(m, "role") {
        Some("user") => Some(EntryBody::Message(message(
            Role::User,
            blocks(m.get("content")),
        ))),
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
    } else if let Some(code) = m
        .get("exitCode")
        .and_then(Value::as_i64)
        .filter(|c| *c != 0)
    {
        text.push_str(&format!("\nCommand exited with code {code}"));
    }
    text
}

fn blocks(content: Option<&Value>) -> Vec<ContentBlock> {
    match content {
        Some(Value::Array(items)) => items
            .iter()
            .map(|b| match str_field(b, "type") {
                // Provider fields (pi's `thinkingSignature`, `textSignature`, …) stay on the
                // block under pi's names.
                Some("text") => ContentBlock::Text {
                    text: str_field(b, "text").unwrap_or("").to_string(),
                    extra: provider_fields(b, &["type", "text"]),
                },
                Some("thinking") => ContentBlock::Thinking {
                    thinking: str_field(b, "thinking").unwrap_or("").to_string(),
                    extra: provider_fields(b, &["type", "thinking"]),
                },
                Some("toolCall") => ContentBlock::ToolCall {
                    id: str_field(b, "id").unwrap_or("").to_string(),
                    name: str_field(b, "name").unwrap_or("").to_string(),
                    input: Box::new(b.get("arguments").cloned().unwrap_or(Value::Null)),
                    extra: provider_fields(b, &["type", "id", "name", "arguments"]),
                },
                Some("image") => ContentBlock::Image {
                    media_type: str_field(b, "mimeType").map(str::to_string),
                    data: str_field(b, "data").map(str::to_string),
                    extra: provider_fields(b, &["type", "mimeType", "data"]),
                },
                _ => opaque_block(b).unwrap_or_else(|| ContentBlock::text(value_text(b))),
            })
            .collect(),
        Some(Value::String(s)) => vec![ContentBlock::text(s)],
        Some(other) => vec![ContentBlock::text(value_text(other))],
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::check::loads;
    use crate::import::testing::options;
    use serde_json::json;

    fn header() -> Value {
        json!({"type": "session", "id": "pi-1", "version": 3, "cwd": "/proj", "modelId": "claude-sonnet-4-5", "timestamp": "2026-01-01T00:00:00Z"})
    }

    fn msg(id: &str, parent: Option<&str>, message: Value) -> Value {
        json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2026-01-01T00:00:01Z", "message": message})
    }

    fn user(id: &str, parent: Option<&str>, text: &str) -> Value {
        msg(
            id,
            parent,
            json!({"role": "user", "content": [{"type": "text", "text": text}]}),
        )
    }

    fn assistant(id: &str, parent: Option<&str>, text: &str) -> Value {
        msg(
            id,
            parent,
            json!({"role": "assistant", "content": [{"type": "text", "text": text}], "model": "claude-sonnet-4-5",
            "usage": {"input": 5, "output": 7, "cacheRead": 100, "cacheWrite": 3}}),
        )
    }

    fn lines(records: &[Value]) -> String {
        records.iter().map(|r| format!("{r}\n")).collect()
    }

    fn import(records: &[Value]) -> ImportResult {
        import_str(&lines(records), &options()).unwrap()
    }

    fn by_source<'a>(r: &'a ImportResult, source: &str) -> &'a soba_core::session::entry::Entry {
        r.entries
            .iter()
            .find(|e| e.source_id.as_deref() == Some(source))
            .unwrap()
    }

    #[test]
    fn branches_are_kept_and_the_leaf_is_the_last_source_entry() {
        let r = import(&[
            header(),
            user("u1", None, "start"),
            assistant("a1", Some("u1"), "one"),
            user("u2", Some("a1"), "branch A"),
            assistant("a2", Some("u2"), "A"),
            user("u3", Some("a1"), "branch B"),
            assistant("a3", Some("u3"), "B"),
        ]);
        let a1 = by_source(&r, "a1").id.clone();
        assert_eq!(by_source(&r, "u2").parent_id.as_ref(), Some(&a1));
        assert_eq!(by_source(&r, "u3").parent_id.as_ref(), Some(&a1));
        let session = loads(&r);
        assert_eq!(session.leaf_id(), Some(by_source(&r, "a3").id.as_str()));
        let usage = by_source(&r, "a1").as_message().unwrap().usage.unwrap();
        assert_eq!(
            (
                usage.input,
                usage.cache_read,
                usage.cache_write,
                usage.output
            ),
            (5, 100, 3, 7)
        );
        assert_eq!(r.header.id, "pi-1");
    }

    #[test]
    fn a_last_record_on_an_older_branch_rewinds_the_leaf_there() {
        let r = import(&[
            header(),
            user("u1", None, "start"),
            assistant("a1", Some("u1"), "one"),
            user("u2", Some("u1"), "again"),
            json!({"type": "thinking_level_change", "id": "t1", "parentId": "a1", "thinkingLevel": "high"}),
        ]);
        let session = loads(&r);
        assert_eq!(session.leaf_id(), Some(by_source(&r, "a1").id.as_str()));
        assert_eq!(
            r.report.skipped_records.get("thinking_level_change"),
            Some(&1)
        );
    }

    #[test]
    fn a_file_without_a_tree_is_one_line() {
        let early_header =
            json!({"type": "session", "id": "old", "cwd": "/proj", "modelId": "gpt-4o"});
        let text = lines(&[
            early_header,
            json!({"type": "message", "message": {"role": "user", "content": "hi"}}),
            json!({"type": "message", "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}]}}),
        ]);
        let r = import_str(&text, &options()).unwrap();
        assert!(crate::import::check::is_one_line(&r));
        assert_eq!(r.entries.len(), 2);
    }

    #[test]
    fn a_corrupt_line_is_reported_and_the_rest_imports() {
        let mut text = lines(&[header(), user("u1", None, "start")]);
        // Two objects on one line (a lost newline), then a torn write.
        text.push_str(&format!(
            "{}{}\n",
            assistant("a1", Some("u1"), "one"),
            user("u2", Some("a1"), "more")
        ));
        text.push_str("{\"type\":\"message\",\"id\":\"x\n");
        text.push_str(&lines(&[assistant("a2", Some("u2"), "two")]));
        let r = import_str(&text, &options()).unwrap();
        let corrupt: Vec<usize> = r.report.corrupt_lines.iter().map(|c| c.line).collect();
        assert_eq!(corrupt, [3, 4]);
        assert_eq!(r.report.messages.user + r.report.messages.assistant, 4);
        assert_eq!(
            by_source(&r, "a2").parent_id.as_deref(),
            Some(by_source(&r, "u2").id.as_str())
        );
        loads(&r);
    }

    #[test]
    fn tool_calls_results_bash_and_compaction() {
        let r = import(&[
            header(),
            user("u1", None, "start"),
            msg(
                "a1",
                Some("u1"),
                json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": "plan"},
                {"type": "toolCall", "id": "t1", "name": "read", "arguments": {"path": "a.rs"}},
                {"type": "toolCall", "id": "t2", "name": "bash", "arguments": {"command": "ls"}}],
                "usage": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}, "stopReason": "aborted"}),
            ),
            msg(
                "r1",
                Some("a1"),
                json!({"role": "toolResult", "toolCallId": "t1", "toolName": "read",
                "content": [{"type": "text", "text": "fn main() {}"}], "isError": false}),
            ),
            msg(
                "b1",
                Some("r1"),
                json!({"role": "bashExecution", "command": "cargo test", "output": "failed\n", "exitCode": 101}),
            ),
            json!({"type": "compaction", "id": "c1", "parentId": "b1", "summary": "## Goal\nfix", "firstKeptEntryId": "r1", "tokensBefore": 175004}),
            user("u2", Some("c1"), "go on"),
        ]);
        assert_eq!(
            (
                r.report.tool_calls,
                r.report.tool_results,
                r.report.unmatched_calls
            ),
            (2, 1, 1)
        );
        assert_eq!(
            r.report.usage_records, 0,
            "an aborted request's zero usage is no measurement"
        );
        let bash = by_source(&r, "b1").as_message().unwrap();
        assert!(bash.synthetic);
        assert_eq!(
            bash.content,
            [ContentBlock::text(
                "Ran `cargo test`\n```\nfailed\n```\nCommand exited with code 101"
            )]
        );
        let EntryBody::ForeignCompaction(fc) = &by_source(&r, "c1").body else {
            panic!()
        };
        assert_eq!(
            fc.first_kept_entry_id.as_deref(),
            Some(by_source(&r, "r1").id.as_str())
        );
        assert_eq!(fc.tokens_before, Some(175_004));
        assert_eq!(r.report.foreign_compactions, 1);
        assert_eq!(
            by_source(&r, "u2").parent_id.as_deref(),
            Some(by_source(&r, "c1").id.as_str())
        );
    }

    #[test]
    fn a_v1_compaction_keeps_the_entries_from_its_first_kept_index() {
        // pi v1 files have no ids: a compaction names the first entry it kept by its index
        // among the file's records, the session header being record 0.
        let v1_header = json!({"type": "session", "id": "old", "timestamp": "2025-11-01T10:00:00.000Z", "cwd": "/proj", "provider": "anthropic", "modelId": "claude-sonnet-4-5"});
        let said = |role: &str, text: &str| json!({"type": "message", "timestamp": "2025-11-01T10:00:01.000Z", "message": {"role": role, "content": [{"type": "text", "text": text}]}});
        let r = import(&[
            v1_header,
            said("user", "first task"),
            said("assistant", "done with the first"),
            json!({"type": "model_change", "timestamp": "2025-11-01T10:00:02.000Z", "provider": "anthropic", "modelId": "claude-sonnet-4-5"}),
            said("user", "second task"),
            said("assistant", "working on the second"),
            json!({"type": "compaction", "timestamp": "2025-11-01T10:00:03.000Z", "summary": "## Goal\nthe second task", "firstKeptEntryIndex": 3, "tokensBefore": 120000}),
            said("user", "go on"),
        ]);
        let compaction = r
            .entries
            .iter()
            .find_map(|e| match &e.body {
                EntryBody::ForeignCompaction(fc) => Some(fc),
                _ => None,
            })
            .expect("the compaction is imported");
        // Record 3 is the model change, which makes no entry: the next record's entry is kept.
        let second_task = r
            .entries
            .iter()
            .find(|e| {
                e.as_message()
                    .is_some_and(|m| m.content == [ContentBlock::text("second task")])
            })
            .unwrap();
        assert_eq!(
            compaction.first_kept_entry_id.as_deref(),
            Some(second_task.id.as_str())
        );
        let mut session = soba_core::session::Session::new(r.header.clone(), Default::default());
        for e in &r.entries {
            session.push(e.clone()).unwrap();
        }
        let view = soba_core::session::view::ModelView::build(&session, session.leaf());
        let texts: Vec<String> = view
            .messages(&session)
            .iter()
            .map(|m| soba_core::session::entry::blocks_text(&m.content))
            .collect();
        assert!(
            texts.iter().any(|t| t == "second task")
                && texts.iter().any(|t| t == "working on the second"),
            "the kept messages stay in the model input after pi's compaction: {texts:?}"
        );
        assert!(
            !texts.iter().any(|t| t == "first task"),
            "what pi compacted is replaced by its summary: {texts:?}"
        );
    }
}
