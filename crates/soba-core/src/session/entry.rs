//! The session log's data model: one header line, then one entry per line.
//!
//! Everything here is plain data with a stable JSON shape (camelCase keys, `type` tags);
//! `schemas/session-entry.schema.json` is generated from these types.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::session::capsule::model::CapsuleEntry;
use crate::session::trigger::Trigger;

/// Format version written in every new header.
pub const LOG_FORMAT_VERSION: u32 = 1;

/// First line of every session log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionHeader {
    /// Always `"session"`.
    #[serde(rename = "type")]
    pub kind: HeaderTag,
    pub version: u32,
    pub id: String,
    /// Absolute path of the workspace root the session belongs to.
    pub workspace: String,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRef>,
    /// Where an imported session came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceInfo>,
}

impl SessionHeader {
    /// The model the header names, as the lowest layer of configuration (`Config::resolve`).
    /// A log whose model changed later says so in a `setting` entry: see
    /// [`crate::session::Session::model_config`].
    pub fn model_config(&self) -> Option<crate::config::ModelFile> {
        self.model.as_ref().map(ModelRef::to_config)
    }
}

impl ModelRef {
    /// This model as the lowest layer of configuration (`Config::resolve`).
    pub fn to_config(&self) -> crate::config::ModelFile {
        crate::config::ModelFile {
            name: self.name.clone(),
            context_window: self.context_window,
            max_output_tokens: self.max_output_tokens,
            tokenizer: self.tokenizer,
            count_factor: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HeaderTag {
    Session,
}

/// The agent model a session runs against, as far as the log knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct ModelRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<crate::tokens::TokenizerKind>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceInfo {
    /// `claude-code`, `codex`, `pi`, `openai-chat`, `swe-agent`, `aider` or `copilot-cli`.
    pub format: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// One line after the header.
// Deserialized by `super::decode`, in one pass.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub id: String,
    /// The entry this one follows; `None` for the first entry of a tree.
    pub parent_id: Option<String>,
    /// RFC 3339 timestamp.
    pub ts: String,
    /// Id of the record this entry was imported from, for traceability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_id: Option<String>,
    #[serde(flatten)]
    pub body: EntryBody,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EntryBody {
    Message(MessageEntry),
    ToolResult(ToolResultEntry),
    Capsule(Box<CapsuleEntry>),
    Checkpoint(CheckpointEntry),
    File(FileEntry),
    Setting(SettingEntry),
    Rewind(RewindEntry),
    Skill(SkillEntry),
    /// A pending compaction intent recorded by a soft trigger, or its consumption.
    Intent(IntentEntry),
    /// The end of an agent turn, as reported by the agent.
    TurnComplete(TurnCompleteEntry),
    /// The outcome of a compaction that did not append a capsule (skipped, failed, …),
    /// kept so that "one soft attempt per turn" survives a restart and the log tells the story.
    Compaction(CompactionRecord),
    /// A compaction performed by the agent a transcript was imported from. Never model input.
    // Boxed: the largest body by far, and rare; unboxed it sized every entry.
    ForeignCompaction(Box<ForeignCompactionEntry>),
}

/// An entry's type, without its content: what the index keeps per entry, so that looking for
/// entries of one type (capsules) does not parse the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    Message,
    ToolResult,
    Capsule,
    Checkpoint,
    File,
    Setting,
    Rewind,
    Skill,
    Intent,
    TurnComplete,
    Compaction,
    ForeignCompaction,
}

impl EntryKind {
    /// Whether entries of this type are part of the conversation the model sees.
    pub fn is_model_visible(self) -> bool {
        matches!(self, EntryKind::Message | EntryKind::ToolResult)
    }
}

impl EntryBody {
    pub fn kind(&self) -> EntryKind {
        match self {
            EntryBody::Message(_) => EntryKind::Message,
            EntryBody::ToolResult(_) => EntryKind::ToolResult,
            EntryBody::Capsule(_) => EntryKind::Capsule,
            EntryBody::Checkpoint(_) => EntryKind::Checkpoint,
            EntryBody::File(_) => EntryKind::File,
            EntryBody::Setting(_) => EntryKind::Setting,
            EntryBody::Rewind(_) => EntryKind::Rewind,
            EntryBody::Skill(_) => EntryKind::Skill,
            EntryBody::Intent(_) => EntryKind::Intent,
            EntryBody::TurnComplete(_) => EntryKind::TurnComplete,
            EntryBody::Compaction(_) => EntryKind::Compaction,
            EntryBody::ForeignCompaction(_) => EntryKind::ForeignCompaction,
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            EntryBody::Message(_) => "message",
            EntryBody::ToolResult(_) => "tool_result",
            EntryBody::Capsule(_) => "capsule",
            EntryBody::Checkpoint(_) => "checkpoint",
            EntryBody::File(_) => "file",
            EntryBody::Setting(_) => "setting",
            EntryBody::Rewind(_) => "rewind",
            EntryBody::Skill(_) => "skill",
            EntryBody::Intent(_) => "intent",
            EntryBody::TurnComplete(_) => "turn_complete",
            EntryBody::Compaction(_) => "compaction",
            EntryBody::ForeignCompaction(_) => "foreign_compaction",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    System,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageEntry {
    pub role: Role,
    #[serde(deserialize_with = "blocks_without_spare_capacity")]
    pub content: Vec<ContentBlock>,
    /// Provider usage of the inference that produced this (assistant) message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// True for messages a harness injected (command output, caveats), not typed by a person.
    #[serde(default, skip_serializing_if = "is_false")]
    pub synthetic: bool,
}

// Deserialized by `super::decode`, in one pass. Agents replaying a tool loop with extended
// thinking need the provider's data back exactly as it was sent: fields of a known block are
// kept in `extra`, a block of another type whole as `Opaque`.
/// One block of a message's or tool result's content.
///
/// Provider data SOBA does not interpret survives untouched: other fields of a known block
/// (Anthropic's `signature` on thinking, `cache_control`, `citations`, …) are kept and written
/// back after the block's own, and a block of any other type (`redacted_thinking`, server tool
/// blocks, …) is kept whole and returned as it came.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
        #[serde(flatten)]
        extra: ProviderFields,
    },
    Thinking {
        thinking: String,
        #[serde(flatten)]
        extra: ProviderFields,
    },
    ToolCall {
        id: String,
        name: String,
        // Boxed: a JSON value is 72 bytes inline, and every block of every entry would pay
        // for it.
        input: Box<Value>,
        #[serde(flatten)]
        extra: ProviderFields,
    },
    Image {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        media_type: Option<String>,
        /// Base64 data or a reference; never counted as text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        #[serde(flatten)]
        extra: ProviderFields,
    },
    /// A block of a type SOBA does not know, kept whole (its `type` included) and returned as it
    /// came.
    #[serde(untagged)]
    Opaque(OpaqueBlock),
}

/// Fields of a content block that SOBA does not interpret, in the order they came.
///
/// Absent rather than an empty map when a block has none: a long log holds hundreds of
/// thousands of blocks, nearly all without provider fields, and this costs them one pointer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProviderFields(Option<Box<Map<String, Value>>>);

impl ProviderFields {
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|m| m.is_empty())
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.as_ref().and_then(|m| m.get(key))
    }

    /// Sets `key`; returns the value it replaces.
    pub fn insert(&mut self, key: String, value: Value) -> Option<Value> {
        self.0
            .get_or_insert_with(Default::default)
            .insert(key, value)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.0.iter().flat_map(|m| m.iter())
    }

    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |m| m.len())
    }
}

impl FromIterator<(String, Value)> for ProviderFields {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        let map: Map<String, Value> = iter.into_iter().collect();
        ProviderFields((!map.is_empty()).then(|| Box::new(map)))
    }
}

impl Serialize for ProviderFields {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl JsonSchema for ProviderFields {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ProviderFields".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        // Flattened into each block's schema: only what it adds, no description of its own.
        schemars::json_schema!({
            "type": "object",
            "additionalProperties": true
        })
    }
}

/// A content block of a type SOBA does not know: the whole JSON object, `type` included, in the
/// order it came.
#[derive(Debug, Clone, PartialEq)]
pub struct OpaqueBlock(Box<Map<String, Value>>);

impl OpaqueBlock {
    /// `None` unless `map` has a string `type` that is not one of SOBA's block types.
    pub fn new(map: Map<String, Value>) -> Option<Self> {
        let known = map
            .get("type")
            .and_then(Value::as_str)
            .map(|t| BLOCK_TYPES.contains(&t))?;
        (!known).then(|| OpaqueBlock(Box::new(map)))
    }

    pub fn block_type(&self) -> &str {
        self.0.get("type").and_then(Value::as_str).unwrap_or("")
    }

    pub fn fields(&self) -> &Map<String, Value> {
        &self.0
    }
}

/// The block types SOBA reads into their own variants.
pub const BLOCK_TYPES: &[&str] = &["text", "thinking", "tool_call", "image"];

impl Serialize for OpaqueBlock {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl JsonSchema for OpaqueBlock {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "OpaqueBlock".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "title": "Opaque",
            "type": "object",
            "description": "A block of a type SOBA does not know (e.g. `redacted_thinking`), \
                kept whole and returned unchanged.",
            "properties": {
                "type": {
                    "type": "string",
                    "description": "Any type but `text`, `thinking`, `tool_call` and `image`."
                }
            },
            "required": ["type"],
            "additionalProperties": true
        })
    }
}

/// Provider-reported usage of one inference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    #[serde(default)]
    pub input: u64,
    #[serde(default)]
    pub cache_read: u64,
    #[serde(default)]
    pub cache_write: u64,
    #[serde(default)]
    pub output: u64,
}

impl Usage {
    /// Tokens the model actually saw as input in that inference, cache included.
    pub fn prompt_tokens(&self) -> u64 {
        self.input + self.cache_read + self.cache_write
    }

    /// Size of the context after that inference: its input plus what it wrote.
    pub fn context_tokens(&self) -> u64 {
        self.prompt_tokens() + self.output
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultEntry {
    pub call_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    #[serde(deserialize_with = "blocks_without_spare_capacity")]
    pub content: Vec<ContentBlock>,
    #[serde(default)]
    pub is_error: bool,
    /// Exit code of a shell command, when the agent reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    Milestone,
    PlanPivot,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointEntry {
    pub kind: CheckpointKind,
    pub label: String,
    /// The capsule written for this checkpoint, once one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileOp {
    Read,
    Modified,
    Created,
    Deleted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FileSource {
    Tool,
    Watcher,
    Agent,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileEntry {
    pub path: String,
    pub op: FileOp,
    pub source: FileSource,
}

/// A change of session settings. Only the fields present change.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettingEntry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_compact: Option<bool>,
    /// The agent's model from here on: a followed transcript named another model than the
    /// session's (its first response, or a switch). It replaces the header's model, limits
    /// included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRef>,
    /// System prompt text the agent sends with every request (counted, never summarized).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// System prompt size when the agent reports a count instead of the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_tokens: Option<u64>,
    /// Tool schemas (JSON text) the agent sends with every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_schemas: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_tokens: Option<u64>,
    /// The context window the limits use, learned from a provider's overflow error or restored
    /// by a usage report. Session-wide: the newest one in the log holds on every branch, since
    /// it is a fact about the provider, not about the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<crate::window::WindowSetting>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RewindEntry {
    /// The entry that becomes the leaf.
    pub to: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkillEntry {
    pub name: String,
    pub active: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum IntentAction {
    /// A soft trigger asked for a compaction at the next preflight.
    Recorded,
    /// The next preflight took it (whatever the outcome).
    Consumed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IntentEntry {
    pub trigger: Trigger,
    pub action: IntentAction,
    /// For `consumed`: the id of the `recorded` entry it consumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnCompleteEntry {
    /// Provider usage of the turn's last inference, when the agent reports it here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Completed,
    Skipped,
    Cancelled,
    Stale,
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Skipped => "skipped",
            Outcome::Cancelled => "cancelled",
            Outcome::Stale => "stale",
            Outcome::Failed => "failed",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionRecord {
    pub operation_id: String,
    pub trigger: Trigger,
    pub outcome: Outcome,
    pub reason: String,
    pub tokens_before: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_after: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForeignCompactionEntry {
    /// `claude-code`, `codex` or `pi`.
    pub agent: String,
    /// `auto`, `manual`, or what the source said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// Context size the source agent reported when it compacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_before: Option<u64>,
    /// The summary text the source agent wrote (for comparison only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// Tokens of that summary, counted with the session's tokenizer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_tokens: Option<u64>,
    /// First entry the source agent kept after the summary, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_kept_entry_id: Option<String>,
    /// Number of items the source agent kept verbatim (e.g. Codex `replacement_history`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_items: Option<u64>,
    /// Earlier entries the source agent carried into its new context, in its order, when what
    /// it kept is not one run from `firstKeptEntryId` (Codex copies the user messages of the
    /// history into `replacement_history`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_entry_ids: Option<Vec<String>>,
    /// What the user asked the compaction to focus on (`/compact TEXT`), when the agent said
    /// (Claude Code's `PreCompact` hook).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

impl ForeignCompactionEntry {
    /// The agent replaced its context: it recorded the summary it continued from or what it
    /// kept. A record of a compaction request alone (Claude Code's `PreCompact` hook) did not.
    pub fn replaces_context(&self) -> bool {
        self.summary.is_some()
            || self.first_kept_entry_id.is_some()
            || self.kept_entry_ids.is_some()
            || self.kept_items.is_some()
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Entry {
    pub fn new(id: impl Into<String>, parent_id: Option<String>, body: EntryBody) -> Self {
        Entry {
            id: id.into(),
            parent_id,
            ts: crate::util::now_rfc3339(),
            source_id: None,
            body,
        }
    }

    pub fn as_message(&self) -> Option<&MessageEntry> {
        match &self.body {
            EntryBody::Message(m) => Some(m),
            _ => None,
        }
    }

    pub fn as_tool_result(&self) -> Option<&ToolResultEntry> {
        match &self.body {
            EntryBody::ToolResult(r) => Some(r),
            _ => None,
        }
    }

    pub fn as_capsule(&self) -> Option<&CapsuleEntry> {
        match &self.body {
            EntryBody::Capsule(c) => Some(c),
            _ => None,
        }
    }

    /// Tool calls this entry makes, as (call id, tool name, input).
    pub fn tool_calls(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.as_message().into_iter().flat_map(|m| {
            m.content.iter().filter_map(|b| match b {
                ContentBlock::ToolCall {
                    id, name, input, ..
                } => Some((id.as_str(), name.as_str(), &**input)),
                _ => None,
            })
        })
    }

    /// Whether the entry is part of the conversation the model sees.
    pub fn is_model_visible(&self) -> bool {
        self.body.kind().is_model_visible()
    }
}

impl ContentBlock {
    pub fn text(s: impl Into<String>) -> Self {
        ContentBlock::Text {
            text: s.into(),
            extra: ProviderFields::default(),
        }
    }

    pub fn thinking(s: impl Into<String>) -> Self {
        ContentBlock::Thinking {
            thinking: s.into(),
            extra: ProviderFields::default(),
        }
    }

    pub fn tool_call(id: impl Into<String>, name: impl Into<String>, input: Value) -> Self {
        ContentBlock::ToolCall {
            id: id.into(),
            name: name.into(),
            input: Box::new(input),
            extra: ProviderFields::default(),
        }
    }

    pub fn image(media_type: Option<String>, data: Option<String>) -> Self {
        ContentBlock::Image {
            media_type,
            data,
            extra: ProviderFields::default(),
        }
    }

    /// The provider fields of a known block; `None` for an opaque one (all of it is).
    pub fn extra_mut(&mut self) -> Option<&mut ProviderFields> {
        match self {
            ContentBlock::Text { extra, .. }
            | ContentBlock::Thinking { extra, .. }
            | ContentBlock::ToolCall { extra, .. }
            | ContentBlock::Image { extra, .. } => Some(extra),
            ContentBlock::Opaque(_) => None,
        }
    }
}

/// Text of a list of blocks, tool calls and images left out.
pub fn blocks_text(blocks: &[ContentBlock]) -> String {
    let mut out = String::new();
    for b in blocks {
        if let ContentBlock::Text { text, .. } = b {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(text);
        }
    }
    out
}

/// A message's or result's content blocks, without spare capacity: read from a stream, a
/// `Vec` grows by doubling, and a long log holds hundreds of thousands of these.
fn blocks_without_spare_capacity<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<ContentBlock>, D::Error> {
    let mut blocks = Vec::<ContentBlock>::deserialize(d)?;
    blocks.shrink_to_fit();
    Ok(blocks)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// One entry of every type, with every optional field that type has.
    pub(crate) fn one_of_each() -> Vec<EntryBody> {
        let capsule = crate::session::testing::full_capsule();
        vec![
            EntryBody::Message(MessageEntry {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::text("hi"),
                    ContentBlock::Thinking {
                        thinking: "hmm".into(),
                        extra: [("signature".to_string(), json!("EqQBCkYI"))]
                            .into_iter()
                            .collect(),
                    },
                    ContentBlock::ToolCall {
                        id: "c1".into(),
                        name: "Bash".into(),
                        input: Box::new(json!({"command": "ls"})),
                        extra: [("cache_control".to_string(), json!({"type": "ephemeral"}))]
                            .into_iter()
                            .collect(),
                    },
                    ContentBlock::Image {
                        media_type: Some("image/png".into()),
                        data: Some("AAAA".into()),
                        extra: Default::default(),
                    },
                    ContentBlock::Opaque(
                        OpaqueBlock::new(
                            json!({"type": "redacted_thinking", "data": "EmwKAhgB"})
                                .as_object()
                                .unwrap()
                                .clone(),
                        )
                        .unwrap(),
                    ),
                ],
                usage: Some(Usage {
                    input: 1,
                    cache_read: 2,
                    cache_write: 3,
                    output: 4,
                }),
                model: Some("gpt-4o".into()),
                synthetic: true,
            }),
            EntryBody::ToolResult(ToolResultEntry {
                call_id: "c1".into(),
                tool_name: Some("Bash".into()),
                content: vec![ContentBlock::text("out")],
                is_error: true,
                exit_code: Some(2),
            }),
            EntryBody::Capsule(Box::new(capsule)),
            EntryBody::Checkpoint(CheckpointEntry {
                kind: CheckpointKind::PlanPivot,
                label: "pivot".into(),
                checkpoint_id: Some("ck_1".into()),
            }),
            EntryBody::File(FileEntry {
                path: "src/a.rs".into(),
                op: FileOp::Deleted,
                source: FileSource::Watcher,
            }),
            EntryBody::Setting(SettingEntry {
                auto_compact: Some(false),
                model: Some(ModelRef {
                    name: Some("claude-opus-4-5".into()),
                    context_window: Some(200_000),
                    max_output_tokens: Some(32_000),
                    tokenizer: None,
                }),
                system_prompt: Some("be brief".into()),
                system_tokens: Some(10),
                tool_schemas: Some("[]".into()),
                tool_tokens: Some(20),
                window: None,
            }),
            EntryBody::Rewind(RewindEntry { to: "e1".into() }),
            EntryBody::Skill(SkillEntry {
                name: "pdf".into(),
                active: true,
            }),
            EntryBody::Intent(IntentEntry {
                trigger: Trigger::Milestone,
                action: IntentAction::Consumed,
                intent_id: Some("e9".into()),
                label: Some("done".into()),
            }),
            EntryBody::TurnComplete(TurnCompleteEntry {
                usage: Some(Usage::default()),
            }),
            EntryBody::Compaction(CompactionRecord {
                operation_id: "op_1".into(),
                trigger: Trigger::AutoThreshold,
                outcome: Outcome::Skipped,
                reason: "roi".into(),
                tokens_before: 10,
                tokens_after: Some(10),
            }),
            EntryBody::ForeignCompaction(Box::new(ForeignCompactionEntry {
                agent: "pi".into(),
                trigger: Some("auto".into()),
                tokens_before: Some(100),
                summary: Some("s".into()),
                summary_tokens: Some(1),
                first_kept_entry_id: Some("e3".into()),
                kept_items: Some(4),
                kept_entry_ids: None,
                instructions: Some("keep the auth work".into()),
            })),
        ]
    }

    #[test]
    fn every_entry_type_round_trips_through_one_json_line() {
        let bodies = one_of_each();
        let mut types: Vec<&str> = bodies.iter().map(EntryBody::type_name).collect();
        types.sort_unstable();
        types.dedup();
        assert_eq!(types.len(), 12, "one of each type");
        for (i, body) in bodies.into_iter().enumerate() {
            let mut e = Entry::new(format!("e{i}"), Some("p".into()), body);
            e.source_id = Some(format!("src-{i}"));
            let line = serde_json::to_string(&e).unwrap();
            assert!(!line.contains('\n'));
            let v: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["type"], e.body.type_name());
            let back: Entry = serde_json::from_str(&line).unwrap();
            assert_eq!(back, e, "{line}");
        }
    }
}
