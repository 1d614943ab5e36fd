//! Readers for foreign agent transcripts: Claude Code, Codex, pi, OpenAI-chat trajectories,
//! SWE-agent trajectories, aider chat histories and GitHub Copilot CLI session logs become SOBA
//! session entries.
//!
//! Every reader is pure: `import_str(text, options)` turns the transcript's text into an
//! [`ImportResult`] (header, entries, report). Writing the log is the caller's business
//! (`soba import` in `cli/import.rs`). Entries get fresh ids (`e1`, `e2`, …) and keep the id of
//! the record they came from in `sourceId`.
//!
//! The source agent's own compactions become `foreign_compaction` entries: a record of where
//! and at what size that agent compacted and what it kept. They are never model input, so the
//! imported session shows what SOBA itself would send.

pub mod aider;
pub mod claude_code;
pub mod codex;
pub mod copilot_cli;
pub mod openai_chat;
pub mod pi;
pub mod stream;
pub mod swe_agent;
pub mod transcript;

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;
use serde_json::Value;

use soba_core::session::entry::{
    ContentBlock, Entry, EntryBody, HeaderTag, MessageEntry, ModelRef, OpaqueBlock, ProviderFields,
    RewindEntry, Role, SessionHeader, SourceInfo, Usage, LOG_FORMAT_VERSION,
};
use soba_core::tokens::TokenizerKind;

/// When a transcript reports its context window, the catalog's maximum output is capped at
/// this fraction (1/n) of it.
const MAX_OUTPUT_SHARE_OF_REPORTED_WINDOW: u64 = 4;

/// A transcript format this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    ClaudeCode,
    Codex,
    Pi,
    OpenaiChat,
    SweAgent,
    Aider,
    CopilotCli,
}

impl Format {
    pub const ALL: [Format; 7] = [
        Format::ClaudeCode,
        Format::Codex,
        Format::Pi,
        Format::OpenaiChat,
        Format::SweAgent,
        Format::Aider,
        Format::CopilotCli,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Format::ClaudeCode => "claude-code",
            Format::Codex => "codex",
            Format::Pi => "pi",
            Format::OpenaiChat => "openai-chat",
            Format::SweAgent => "swe-agent",
            Format::Aider => "aider",
            Format::CopilotCli => "copilot-cli",
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a transcript could not be imported at all. Problems with single records are not
/// errors: they are counted in the [`ImportReport`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    #[error("not a transcript in any known format (tried claude-code, codex, pi, openai-chat, swe-agent, aider, copilot-cli): {reason}. Pass --format to force one")]
    UnknownFormat { reason: String },
    #[error("not a {format} transcript: {reason}")]
    WrongFormat { format: Format, reason: String },
    #[error("the {format} transcript holds no conversation (no messages, tool calls or results were found)")]
    Empty { format: Format },
}

/// What the caller knows that the transcript may not say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportOptions {
    /// The transcript's path, recorded in the header's `source`.
    pub source_path: String,
    /// Workspace recorded when the transcript names no working directory.
    pub default_workspace: String,
    /// Session id used when the transcript has none.
    pub default_session_id: String,
    /// Timestamp used for the header and for records without one (RFC 3339).
    pub now: String,
}

/// A line of the transcript that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CorruptLine {
    pub line: usize,
    pub reason: String,
}

/// What is done with a line with bytes that are not UTF-8 and that otherwise reads.
const NOT_UTF8_KEPT: &str = "; the invalid bytes were replaced with U+FFFD and the line kept";

/// The reason given for a line with bytes that are not UTF-8.
pub fn not_utf8_reason(e: &std::str::Utf8Error) -> String {
    format!("not valid UTF-8 ({e}){NOT_UTF8_KEPT}")
}

/// Add the report of a line whose bytes were not UTF-8 to `corrupt`, one report per line: when
/// the line, its bytes replaced, also failed to read as JSON, the two become one reason that
/// ends with what was done with it (skipped), not one saying kept and one saying skipped.
pub fn note_not_utf8(corrupt: &mut Vec<CorruptLine>, not_utf8: CorruptLine) {
    match corrupt.iter_mut().find(|c| c.line == not_utf8.line) {
        Some(other) => {
            let what = not_utf8
                .reason
                .strip_suffix(NOT_UTF8_KEPT)
                .unwrap_or(&not_utf8.reason);
            other.reason = format!(
                "{what}; with its invalid bytes replaced with U+FFFD, {}",
                other.reason
            );
        }
        None => corrupt.push(not_utf8),
    }
}

/// A transcript's text, with lines that are not valid UTF-8 kept: their invalid bytes become
/// U+FFFD, and each such line is reported (1-based), so one bad byte does not cost the whole
/// transcript. Borrows when every line is valid.
pub fn decode_lossy(bytes: &[u8]) -> (std::borrow::Cow<'_, str>, Vec<CorruptLine>) {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return (std::borrow::Cow::Borrowed(text), Vec::new());
    }
    let mut text = String::with_capacity(bytes.len());
    let mut bad = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if i > 0 {
            text.push('\n');
        }
        match std::str::from_utf8(line) {
            Ok(l) => text.push_str(l),
            Err(e) => {
                bad.push(CorruptLine {
                    line: i + 1,
                    reason: not_utf8_reason(&e),
                });
                text.push_str(&String::from_utf8_lossy(line));
            }
        }
    }
    (std::borrow::Cow::Owned(text), bad)
}

/// Read a transcript file (a regular file only), decoding it as [`decode_lossy`] does.
pub fn read_transcript(path: &std::path::Path) -> std::io::Result<(String, Vec<CorruptLine>)> {
    use std::io::Read;
    let mut bytes = Vec::new();
    soba_core::files::open_regular(path)?.read_to_end(&mut bytes)?;
    match String::from_utf8(bytes) {
        Ok(text) => Ok((text, Vec::new())),
        Err(e) => {
            let (text, bad) = decode_lossy(e.as_bytes());
            Ok((text.into_owned(), bad))
        }
    }
}

impl ImportResult {
    /// Add lines decoding found to the report, in line order.
    pub fn note_lossy_lines(&mut self, lines: Vec<CorruptLine>) {
        if lines.is_empty() {
            return;
        }
        let corrupt = &mut self.report.corrupt_lines;
        for line in lines {
            note_not_utf8(corrupt, line);
        }
        corrupt.sort_by_key(|c| c.line);
    }
}

/// Message entries by role.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RoleCounts {
    pub user: usize,
    pub assistant: usize,
    pub system: usize,
}

/// What an import did, printed by `soba import --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportReport {
    pub format: Format,
    /// Entries written after the header.
    pub entries: usize,
    pub messages: RoleCounts,
    /// Tool calls in assistant messages.
    pub tool_calls: usize,
    pub tool_results: usize,
    /// Calls that never got a result (interrupted or aborted). Kept as they are.
    pub unmatched_calls: usize,
    /// Results whose call is not in the transcript.
    pub orphan_results: usize,
    pub foreign_compactions: usize,
    pub corrupt_lines: Vec<CorruptLine>,
    /// Assistant messages carrying provider usage.
    pub usage_records: usize,
    pub model: Option<String>,
    /// Records of types this reader knows and leaves out on purpose (by type).
    pub skipped_records: BTreeMap<String, usize>,
    /// Records of types this reader does not know (by type), left out: they hold nothing the
    /// model sees.
    pub unknown_records: BTreeMap<String, usize>,
    /// Conversation items of types this reader does not read into its own shape, kept whole as
    /// opaque content and counted as their JSON (by type).
    pub opaque_records: BTreeMap<String, usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ImportResult {
    pub header: SessionHeader,
    pub entries: Vec<Entry>,
    pub report: ImportReport,
}

/// Parse JSON Lines leniently: every readable object with its 1-based line number, and the
/// lines that could not be read. A line holding several complete objects (two writes that lost
/// the newline between them) yields each of them and is reported.
pub(crate) fn read_jsonl(text: &str) -> (Vec<(usize, Value)>, Vec<CorruptLine>) {
    let mut records = Vec::new();
    let mut corrupt = Vec::new();
    for (i, line) in text.lines().enumerate() {
        read_line(i + 1, line, &mut records, &mut corrupt);
    }
    (records, corrupt)
}

/// Read one line of JSON Lines (numbered from 1) into `records`, or say in `corrupt` why not.
pub(crate) fn read_line(
    line_no: usize,
    line: &str,
    records: &mut Vec<(usize, Value)>,
    corrupt: &mut Vec<CorruptLine>,
) {
    let line = line.trim();
    if line.is_empty() {
        return;
    }
    let values: Result<Vec<Value>, _> = serde_json::Deserializer::from_str(line)
        .into_iter::<Value>()
        .collect();
    match values {
        Ok(values) if values.len() == 1 => records.extend(values.into_iter().map(|v| (line_no, v))),
        Ok(values) => {
            corrupt.push(CorruptLine {
                line: line_no,
                reason: format!(
                    "{} JSON objects on one line; each was imported",
                    values.len()
                ),
            });
            records.extend(values.into_iter().map(|v| (line_no, v)));
        }
        Err(e) => corrupt.push(CorruptLine {
            line: line_no,
            reason: format!("not valid JSON ({e}); line skipped"),
        }),
    }
}

/// A per-format reader fed one record at a time: what `import_str` drives over a whole file
/// and [`stream::StreamImporter`] over a file that grows.
pub(crate) trait RecordReader: Send {
    /// Read one record (`line`: its 1-based line number).
    fn record(&mut self, line: usize, record: &Value);
    /// How many of the entries made so far no later record can change.
    fn settled_len(&self) -> usize;
    fn builder(&self) -> &EntryBuilder;
    fn header(&self) -> &HeaderInfo;
    /// What `import_str` gives for the records read so far.
    fn finish(self: Box<Self>) -> ImportResult;
}

/// The model named by a transcript, with the catalog's figures when it knows the name.
pub fn model_ref(name: &str) -> ModelRef {
    let known = soba_core::config::catalog_lookup(name);
    ModelRef {
        name: Some(name.to_string()),
        context_window: known.map(|m| m.context_window),
        max_output_tokens: known.map(|m| m.max_output_tokens),
        tokenizer: known.map(|m| m.tokenizer),
    }
}

/// Accumulates entries in transcript order and maps source record ids to the entries they
/// became, so that the source's tree (`parentUuid`, `parentId`) carries over.
pub(crate) struct EntryBuilder {
    entries: Vec<Entry>,
    /// Source record id → the last entry that record produced (or, for a record that produced
    /// none, the entry its children should attach to).
    by_source: HashMap<String, Option<String>>,
    /// Source record id → the first entry that record produced.
    first_of_source: HashMap<String, String>,
    pub report: ImportReport,
    pub fallback_ts: String,
}

impl EntryBuilder {
    pub fn new(format: Format, fallback_ts: &str) -> Self {
        EntryBuilder {
            entries: Vec::new(),
            by_source: HashMap::new(),
            first_of_source: HashMap::new(),
            report: ImportReport {
                format,
                entries: 0,
                messages: RoleCounts::default(),
                tool_calls: 0,
                tool_results: 0,
                unmatched_calls: 0,
                orphan_results: 0,
                foreign_compactions: 0,
                corrupt_lines: Vec::new(),
                usage_records: 0,
                model: None,
                skipped_records: BTreeMap::new(),
                unknown_records: BTreeMap::new(),
                opaque_records: BTreeMap::new(),
            },
            fallback_ts: fallback_ts.to_string(),
        }
    }

    /// Append an entry and return its id.
    pub fn push(
        &mut self,
        parent: Option<String>,
        source_id: Option<&str>,
        ts: Option<&str>,
        body: EntryBody,
    ) -> String {
        let id = format!("e{}", self.entries.len() + 1);
        if let Some(sid) = source_id {
            self.first_of_source
                .entry(sid.to_string())
                .or_insert_with(|| id.clone());
            self.by_source.insert(sid.to_string(), Some(id.clone()));
        }
        self.entries.push(Entry {
            id: id.clone(),
            parent_id: parent,
            ts: ts.unwrap_or(&self.fallback_ts).to_string(),
            source_id: source_id.map(str::to_string),
            body,
        });
        id
    }

    /// The last entry pushed.
    pub fn last_id(&self) -> Option<String> {
        self.entries.last().map(|e| e.id.clone())
    }

    /// The entry children of source record `source_id` attach to, if that record was seen.
    pub fn resolve(&self, source_id: &str) -> Option<Option<String>> {
        self.by_source.get(source_id).cloned()
    }

    /// The first entry made from source record `source_id`.
    pub fn first_entry_of(&self, source_id: &str) -> Option<&str> {
        self.first_of_source.get(source_id).map(String::as_str)
    }

    /// Record that source record `source_id` produced no entry: its children attach to `to`.
    pub fn alias(&mut self, source_id: &str, to: Option<String>) {
        self.by_source.entry(source_id.to_string()).or_insert(to);
    }

    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.entries.get(position_of(id)?)
    }

    /// Position of an entry this builder made.
    pub fn position(&self, id: &str) -> Option<usize> {
        position_of(id).filter(|p| *p < self.entries.len())
    }

    pub fn entry_mut(&mut self, id: &str) -> Option<&mut Entry> {
        self.entries.get_mut(position_of(id)?)
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn skipped(&mut self, kind: impl Into<String>) {
        *self.report.skipped_records.entry(kind.into()).or_default() += 1;
    }

    pub fn unknown(&mut self, kind: impl Into<String>) {
        *self.report.unknown_records.entry(kind.into()).or_default() += 1;
    }

    pub fn kept_opaque(&mut self, kind: impl Into<String>) {
        *self.report.opaque_records.entry(kind.into()).or_default() += 1;
    }

    /// Make `leaf` (an entry id) the session's leaf: when the last entry written is elsewhere
    /// in the tree, a `rewind` entry moves the leaf back, as the source had it.
    pub fn set_leaf(&mut self, leaf: Option<String>) {
        if let Some(leaf) = leaf {
            if self.last_id().as_deref() != Some(leaf.as_str()) {
                let parent = self.last_id();
                self.push(
                    parent,
                    None,
                    None,
                    EntryBody::Rewind(RewindEntry { to: leaf }),
                );
            }
        }
    }

    /// Finish: count what was imported and build the header.
    pub fn finish(mut self, header: HeaderInfo) -> ImportResult {
        let model = header.model();
        let tokenizer = model.as_ref().and_then(|m| m.tokenizer).unwrap_or_default();
        count_summary_tokens(&mut self.entries, tokenizer);
        let mut report = self.report;
        report.model = header.model_name.clone();
        tally(&self.entries, &mut report);
        let header = header.to_header();
        ImportResult {
            header,
            entries: self.entries,
            report,
        }
    }
}

/// Position of an entry this builder made: ids are `e<n>`, n the 1-based position.
fn position_of(id: &str) -> Option<usize> {
    id.strip_prefix('e')?.parse::<usize>().ok()?.checked_sub(1)
}

/// What a reader learned about the session as a whole.
pub(crate) struct HeaderInfo {
    pub format: Format,
    pub session_id: String,
    pub source_session_id: Option<String>,
    pub workspace: String,
    workspace_from_source: bool,
    pub created_at: String,
    created_at_from_source: bool,
    pub source_path: String,
    pub model_name: Option<String>,
    pub context_window: Option<u64>,
}

impl HeaderInfo {
    pub fn new(format: Format, options: &ImportOptions) -> Self {
        HeaderInfo {
            format,
            session_id: options.default_session_id.clone(),
            source_session_id: None,
            workspace: options.default_workspace.clone(),
            workspace_from_source: false,
            created_at: options.now.clone(),
            created_at_from_source: false,
            source_path: options.source_path.clone(),
            model_name: None,
            context_window: None,
        }
    }

    /// Record the source's session id; it becomes the SOBA session id too.
    pub fn set_session_id(&mut self, id: &str) {
        if !id.is_empty() {
            self.session_id = id.to_string();
            self.source_session_id = Some(id.to_string());
        }
    }

    /// The working directory the transcript names first.
    pub fn set_workspace(&mut self, cwd: &str) {
        if !self.workspace_from_source && !cwd.is_empty() {
            self.workspace = cwd.to_string();
            self.workspace_from_source = true;
        }
    }

    /// The transcript's first timestamp.
    pub fn set_created_at(&mut self, ts: &str) {
        if !self.created_at_from_source && !ts.is_empty() {
            self.created_at = ts.to_string();
            self.created_at_from_source = true;
        }
    }

    /// Record the model the transcript names (the last one named wins: it is the model the
    /// session would continue with).
    pub fn set_model(&mut self, name: &str) {
        if !name.is_empty() {
            self.model_name = Some(name.to_string());
        }
    }

    /// A context window the transcript itself reports overrides the catalog's.
    pub fn set_context_window(&mut self, window: u64) {
        if window > 0 {
            self.context_window = Some(window);
        }
    }

    /// The session header as far as the records read so far tell.
    pub(crate) fn to_header(&self) -> SessionHeader {
        SessionHeader {
            kind: HeaderTag::Session,
            version: LOG_FORMAT_VERSION,
            id: self.session_id.clone(),
            workspace: self.workspace.clone(),
            created_at: self.created_at.clone(),
            model: self.model(),
            source: Some(SourceInfo {
                format: self.format.as_str().to_string(),
                path: self.source_path.clone(),
                session_id: self.source_session_id.clone(),
            }),
        }
    }

    pub(crate) fn model(&self) -> Option<ModelRef> {
        let mut model = match &self.model_name {
            Some(name) => model_ref(name),
            None if self.context_window.is_some() => ModelRef::default(),
            None => return None,
        };
        if let Some(window) = self.context_window {
            model.context_window = Some(window);
            // A reported window is the input budget the agent enforced and can be far below
            // the catalog's full window (Codex reports e.g. 121600 for a model the catalog
            // knows at 400k with 128k output); keep the catalog's output reserve from eating
            // the whole window.
            if let Some(max_output) = model.max_output_tokens {
                model.max_output_tokens =
                    Some(max_output.min(window / MAX_OUTPUT_SHARE_OF_REPORTED_WINDOW));
            }
        }
        Some(model)
    }
}

/// Count the foreign compactions' summaries with the session's tokenizer.
pub(crate) fn count_summary_tokens(entries: &mut [Entry], tokenizer: TokenizerKind) {
    for e in entries {
        if let EntryBody::ForeignCompaction(fc) = &mut e.body {
            fc.summary_tokens = fc.summary.as_deref().map(|s| tokenizer.count(s));
        }
    }
}

/// Fill the report's counts from the entries.
fn tally(entries: &[Entry], report: &mut ImportReport) {
    let mut calls = HashSet::new();
    let mut answered = HashSet::new();
    for e in entries {
        match &e.body {
            EntryBody::Message(m) => {
                match m.role {
                    Role::User => report.messages.user += 1,
                    Role::Assistant => report.messages.assistant += 1,
                    Role::System => report.messages.system += 1,
                }
                if m.usage.is_some() {
                    report.usage_records += 1;
                }
                for (id, _, _) in e.tool_calls() {
                    report.tool_calls += 1;
                    calls.insert(id);
                }
            }
            EntryBody::ToolResult(r) => {
                report.tool_results += 1;
                answered.insert(r.call_id.as_str());
            }
            EntryBody::ForeignCompaction(_) => report.foreign_compactions += 1,
            _ => {}
        }
    }
    report.unmatched_calls = calls.iter().filter(|c| !answered.contains(*c)).count();
    report.orphan_results = entries
        .iter()
        .filter_map(Entry::as_tool_result)
        .filter(|r| !calls.contains(r.call_id.as_str()))
        .count();
    report.entries = entries.len();
}

/// A message body.
pub(crate) fn message(role: Role, content: Vec<ContentBlock>) -> MessageEntry {
    MessageEntry {
        role,
        content,
        usage: None,
        model: None,
        synthetic: false,
    }
}

/// Usage worth recording: an aborted request reports all zeros, which is no measurement.
pub(crate) fn nonzero(usage: Usage) -> Option<Usage> {
    (usage != Usage::default()).then_some(usage)
}

/// A JSON value as text: strings as they are, anything else as compact JSON.
pub(crate) fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A source block's fields other than `own` (those SOBA reads), to keep on the block: provider
/// data such as a thinking block's `signature` or `cache_control` goes back to the provider as
/// it came.
pub(crate) fn provider_fields(block: &Value, own: &[&str]) -> ProviderFields {
    block
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !own.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A source block of a type SOBA has no variant for, kept whole; `None` when it is not an
/// object with a string `type` (or its type is one of SOBA's own, with another meaning).
pub(crate) fn opaque_block(block: &Value) -> Option<ContentBlock> {
    OpaqueBlock::new(block.as_object()?.clone()).map(ContentBlock::Opaque)
}

pub(crate) fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

pub(crate) fn u64_field(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

#[cfg(test)]
pub(crate) mod testing {
    use super::ImportOptions;

    pub fn options() -> ImportOptions {
        ImportOptions {
            source_path: "/tmp/transcript".into(),
            default_workspace: "/ws".into(),
            default_session_id: "imported".into(),
            now: "2026-01-01T00:00:00.000Z".into(),
        }
    }

    /// JSON values, one per line.
    pub fn jsonl(records: &[serde_json::Value]) -> String {
        records.iter().map(|r| format!("{r}\n")).collect()
    }
}

#[cfg(test)]
pub(crate) mod check {
    //! Assertions shared by the per-format tests.
    use super::ImportResult;
    use soba_core::session::Session;
    use soba_core::tokens::TokenizerKind;

    /// The imported entries form a valid tree that a session loads.
    pub fn loads(result: &ImportResult) -> Session {
        let mut session = Session::new(result.header.clone(), TokenizerKind::O200kBase);
        for e in &result.entries {
            session
                .push(e.clone())
                .unwrap_or_else(|err| panic!("entry {} does not load: {err}", e.id));
        }
        session
    }

    /// Every entry's parent is the entry before it.
    pub fn is_one_line(result: &ImportResult) -> bool {
        result
            .entries
            .windows(2)
            .all(|w| w[1].parent_id.as_deref() == Some(w[0].id.as_str()))
    }
}
