//! The `soba/*` JSON-RPC surface in one place: method and notification names, parameter and
//! result types, error codes. `docs/protocol.md` documents every name listed here; a test keeps
//! the two in step. Nothing below the daemon imports these types.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::inspect::BudgetReport as CoreBudgetReport;
use soba_core::compaction::CompactionResult;
use soba_core::session::entry::{CheckpointKind, Usage};
use soba_core::session::view::ModelMessage;

/// Requests a client sends to the daemon.
pub mod method {
    pub const SESSION_OPEN: &str = "soba/session/open";
    pub const SESSION_APPEND: &str = "soba/session/append";
    pub const PREFLIGHT: &str = "soba/preflight";
    pub const TURN_COMPLETE: &str = "soba/turn/complete";
    pub const CHECKPOINT: &str = "soba/checkpoint";
    pub const OVERFLOW: &str = "soba/overflow";
    pub const CANCEL: &str = "soba/cancel";
    pub const REWIND: &str = "soba/rewind";
    pub const SESSION_CLOSE: &str = "soba/session/close";
    pub const BUDGET: &str = "soba/budget";
    pub const CONTEXT: &str = "soba/context";
    pub const COMPACT: &str = "soba/compact";
    pub const AUTO_COMPACT: &str = "soba/autoCompact";
    pub const SESSIONS: &str = "soba/sessions";
    pub const FLIGHT: &str = "soba/flight";
    pub const CAPSULE_CREATE: &str = "soba/capsule/create";
    pub const CAPSULE_EXPORT: &str = "soba/capsule/export";
    pub const CAPSULE_LOAD: &str = "soba/capsule/load";
    pub const CAPSULE_LIST: &str = "soba/capsule/list";
    pub const ATTACH: &str = "soba/attach";
    pub const PREVIEW: &str = "soba/preview";
}

/// The connection handshake `soba serve` sends before relaying its client: the relay's config
/// files and the API keys they name. Answered by the connection's frame reader, before
/// `initialize`; not a method of the service.
pub const CLIENT_HELLO: &str = "soba/client/hello";

/// Requests the daemon sends to a client that offered them at `initialize`.
pub mod client_method {
    /// Answer one summarization prompt with the client's own model (see
    /// [`super::SummarizeCapability`]).
    pub const SUMMARIZE: &str = "soba/summarize";
}

/// Where a client offers its model at `initialize`: `capabilities.experimental.soba.summarize`.
pub const SUMMARIZE_CAPABILITY_POINTER: &str = "/capabilities/experimental/soba/summarize";

/// Notifications the daemon sends to clients.
pub mod notification {
    pub const BUDGET_CHANGED: &str = "soba/budgetChanged";
    pub const COMPACTION: &str = "soba/compaction";
    pub const SESSION_CLOSED: &str = "soba/session/closed";
}

/// Every request method the daemon handles, in documentation order.
pub const METHODS: &[&str] = &[
    method::SESSION_OPEN,
    method::SESSION_APPEND,
    method::PREFLIGHT,
    method::TURN_COMPLETE,
    method::CHECKPOINT,
    method::OVERFLOW,
    method::CANCEL,
    method::REWIND,
    method::SESSION_CLOSE,
    method::BUDGET,
    method::CONTEXT,
    method::COMPACT,
    method::AUTO_COMPACT,
    method::SESSIONS,
    method::FLIGHT,
    method::CAPSULE_CREATE,
    method::CAPSULE_EXPORT,
    method::CAPSULE_LOAD,
    method::CAPSULE_LIST,
    method::ATTACH,
    method::PREVIEW,
];

/// Every request the daemon sends to clients (to those that offered it at `initialize`).
pub const CLIENT_METHODS: &[&str] = &[client_method::SUMMARIZE];

/// Every custom notification the daemon sends.
pub const NOTIFICATIONS: &[&str] = &[
    notification::BUDGET_CHANGED,
    notification::COMPACTION,
    notification::SESSION_CLOSED,
];

/// Prefix of the `workspace/executeCommand` equivalents.
pub const COMMAND_PREFIX: &str = "soba.server.";

/// `soba/session/open` → `soba.server.session.open`.
pub fn command_for(method: &str) -> String {
    let bare = method.strip_prefix("soba/").unwrap_or(method);
    format!("{COMMAND_PREFIX}{}", bare.replace('/', "."))
}

/// `soba.server.session.open` → `soba/session/open`, for handled methods only.
pub fn method_for_command(command: &str) -> Option<&'static str> {
    METHODS.iter().copied().find(|m| command_for(m) == command)
}

/// Title of the work-done progress shown while a compaction runs, worded by its trigger: only
/// the barrier's own compactions hold a response back.
pub fn progress_title(trigger: &str) -> String {
    match trigger {
        "user" => "Compacting context (/compact)".into(),
        "handoff" => "Creating capsule".into(),
        "context_overflow" => "Compacting context after a context overflow".into(),
        other => format!("Compacting context before response ({other})"),
    }
}

/// Stable JSON-RPC error codes beyond the standard ones.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const BUDGET_EXCEEDED: i64 = -32001;
    pub const UNKNOWN_SESSION: i64 = -32002;
    pub const OVERFLOW_RETRY_USED: i64 = -32003;
    pub const SESSION_LOCKED: i64 = -32004;
    /// Compact, capsule load or rewind asked of a session SOBA only follows: the agent owns its
    /// context, so nothing was changed (`soba/preview` shows what SOBA would send).
    pub const AGENT_COMPACTS: i64 = -32005;
    pub const INTERNAL: i64 = -32603;
}

// ---------------------------------------------------------------------------------------------
// Parameters

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelParams {
    pub name: Option<String>,
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionOpenParams {
    pub workspace: String,
    pub session_id: Option<String>,
    pub create: Option<bool>,
    pub model: Option<ModelParams>,
    /// The config file's `compaction` block, layered over the connection's config for this
    /// session only (same keys and checks).
    #[schemars(with = "Option<soba_core::config::CompactionFile>")]
    pub compaction: Option<Value>,
    /// The config file's `summarizer` block, for this session only. Its endpoint and key
    /// variable apply only in a workspace the user trusts (`soba trust`).
    #[schemars(with = "Option<soba_core::config::SummarizerConfig>")]
    pub summarizer: Option<Value>,
}

/// One config file as the relay read it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigText {
    /// Where it was read, for error messages.
    pub path: String,
    pub text: String,
}

/// The params of [`CLIENT_HELLO`]. `Debug` shows the variables' names, never their values.
#[derive(Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelloParams {
    /// The relay's user config file, when it has one. With a hello, the daemon uses this one
    /// (not its own) for the connection's sessions, trust list included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_config: Option<ConfigText>,
    /// The relay's `--config` file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_config: Option<ConfigText>,
    /// The values of the variables the relay's config names in `summarizer.apiKeyEnv` (and
    /// no others), by name. Kept in memory for the connection only.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
}

impl std::fmt::Debug for HelloParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HelloParams")
            .field("user_config", &self.user_config.as_ref().map(|c| &c.path))
            .field("extra_config", &self.extra_config.as_ref().map(|c| &c.path))
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The answer to [`CLIENT_HELLO`].
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelloResult {
    /// The variables received (names only).
    pub env: Vec<String>,
}

/// A client's offer, at `initialize`, to write capsules with the agent's own model: the
/// daemon then sends it `soba/summarize` for compactions that this client's own requests
/// (`soba/preflight`, `soba/overflow`, `soba/compact`) start in a session whose config sets no
/// `summarizer` block. The client answers with the model's reply and never hands over its key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummarizeCapability {
    /// The model the client summarizes with, for status lines; the session's model when left
    /// out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// That model's context window in tokens; the session model's when left out. Longer
    /// histories are sent in chunks that fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Output tokens to ask for per request; the session model's limit, at most 4096, when
    /// left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
}

/// `soba/summarize` (daemon → client): one request of a compaction's summarization. Send
/// `system` as the system prompt and `user` as the one user message to the agent's model, ask
/// for at most `maxOutputTokens`, and answer with the reply's text. A compaction whose history
/// does not fit the window sends several, one after the other, each rolling the previous
/// answer forward. `$/cancelRequest` with this request's id means the daemon stopped waiting
/// (timeout, cancellation): abort the model request.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummarizeParams {
    pub session_id: String,
    /// The compaction this request belongs to (`soba/compaction`'s `operationId`).
    pub operation_id: String,
    /// The system prompt; the same text for every request.
    pub system: String,
    /// The user message: the previous capsule, the facts, the instructions and the history.
    pub user: String,
    pub max_output_tokens: u64,
    /// The model to use when the client offered one by name (`SummarizeCapability::model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// The answer to `soba/summarize`. A failure is answered as a JSON-RPC error whose message
/// says what went wrong (never a key); `error.data.status` may carry the provider's HTTP status.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummarizeResult {
    /// The model's reply text, whole.
    pub text: String,
    /// The model stopped at `maxOutputTokens`.
    #[serde(default)]
    pub hit_output_limit: bool,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendParams {
    pub session_id: String,
    /// Entries as in the session log; `id`, `parentId` and `ts` may be left out.
    #[schemars(with = "Vec<AppendedEntry>")]
    pub entries: Vec<Value>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionParams {
    pub session_id: String,
}

/// The answer to `soba/session/close`: the session is no longer live and its log is free.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionCloseResult {
    pub session_id: String,
    pub path: String,
}

/// `soba/session/closed`: a session left the daemon; clients showing it let it go.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionClosedNotice {
    pub session_id: String,
    pub workspace: String,
    pub reason: SessionCloseReason,
}

/// Why a session left the daemon's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SessionCloseReason {
    /// `soba/session/close`, or the agent whose transcript was followed went away.
    Closed,
    /// Unused while more idle sessions were open than `daemon.maxIdleSessions`: its log is on
    /// disk, whole, and the next request that names it opens it again.
    Idle,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnCompleteParams {
    pub session_id: String,
    pub usage: Option<Usage>,
}

/// `soba/overflow`: the provider refused the last request as too long. The figures its error
/// gave, when it gave them, lower the session's window to what the provider accepts.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverflowParams {
    pub session_id: String,
    /// The context window (or maximum input) the provider's error named, in its tokens.
    #[serde(default)]
    pub provider_window: Option<u64>,
    /// The input tokens the provider's error said the refused request had.
    #[serde(default)]
    pub provider_tokens: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointParams {
    pub session_id: String,
    pub kind: CheckpointKind,
    pub label: String,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RewindParams {
    pub session_id: String,
    pub entry_id: String,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetParams {
    pub session_id: Option<String>,
    pub workspace: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContextParams {
    pub session_id: Option<String>,
    pub workspace: Option<String>,
    /// How many of the largest entries to list (default 10, at most 100).
    pub limit: Option<usize>,
}

/// Largest entries listed by `soba/context` unless the client asks for another number.
pub const CONTEXT_DEFAULT_LIMIT: usize = 10;
/// The most `soba/context` lists, whatever the client asks.
pub const CONTEXT_MAX_LIMIT: usize = 100;

/// What `soba/preview` shows, as the request it stands for would do it.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", tag = "action")]
pub enum PreviewAction {
    /// `soba/compact`: the capsule and the retained tail.
    Compact { instructions: Option<String> },
    /// `soba/capsule/load`: the capsule of a `.capsule.md` file.
    CapsuleLoad { path: String },
    /// `soba/rewind`: the model input at an earlier entry.
    Rewind {
        #[serde(rename = "entryId")]
        entry_id: String,
    },
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewParams {
    pub session_id: Option<String>,
    pub workspace: Option<String>,
    #[serde(flatten)]
    pub action: PreviewAction,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactParams {
    pub session_id: Option<String>,
    pub workspace: Option<String>,
    pub instructions: Option<String>,
    pub mirror: Option<bool>,
    /// What made the client compact (default `user`).
    pub trigger: Option<RequestedTrigger>,
}

/// The triggers a client may give `soba/compact`: a `/compact`, or an agent's own automatic
/// compaction (its threshold, its recovery from a context overflow). SOBA's other triggers
/// are its own decisions at the preflight barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RequestedTrigger {
    User,
    AutoThreshold,
    ContextOverflow,
}

impl From<RequestedTrigger> for soba_core::session::trigger::Trigger {
    fn from(t: RequestedTrigger) -> Self {
        use soba_core::session::trigger::Trigger;
        match t {
            RequestedTrigger::User => Trigger::User,
            RequestedTrigger::AutoThreshold => Trigger::AutoThreshold,
            RequestedTrigger::ContextOverflow => Trigger::ContextOverflow,
        }
    }
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoCompactParams {
    pub session_id: Option<String>,
    pub workspace: Option<String>,
    pub enabled: bool,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionsParams {
    pub workspace: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlightParams {
    pub session_id: Option<String>,
    pub workspace: Option<String>,
    pub limit: Option<usize>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleCreateParams {
    pub session_id: Option<String>,
    pub workspace: Option<String>,
    pub title: String,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleExportParams {
    pub session_id: Option<String>,
    pub workspace: Option<String>,
    pub checkpoint_id: String,
    pub path: String,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleLoadParams {
    pub session_id: Option<String>,
    pub workspace: Option<String>,
    pub path: String,
}

#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleListParams {
    pub session_id: Option<String>,
    pub workspace: Option<String>,
}

/// `soba/attach`: follow a live agent transcript into a session of `workspace`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttachParams {
    pub workspace: String,
    /// The transcript file; without it, the newest live transcript of the workspace in the
    /// agents' homes.
    pub transcript: Option<String>,
    /// `claude-code`, `codex` or `pi`; without it, recognized from the transcript.
    pub agent: Option<String>,
    /// Seconds without a write, with no process holding the transcript open, after which the
    /// agent counts as gone and the session closes (default 300).
    pub idle_secs: Option<f64>,
}

// ---------------------------------------------------------------------------------------------
// Results

/// The answer to `soba/attach`: the session the transcript is followed into.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttachResult {
    pub session_id: String,
    /// The session log.
    pub path: String,
    pub transcript: String,
    pub agent: String,
    /// Entries imported by this call (0 when the transcript was already followed).
    pub imported: usize,
    pub budget: BudgetReport,
}

/// The budget of one session as clients see it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetReport {
    pub session_id: String,
    pub workspace: String,
    #[serde(flatten)]
    #[schemars(with = "CoreBudgetReport")]
    pub budget: Value,
    pub compacting: bool,
    /// An explicit `/compact` is queued until the agent's inference in flight ends.
    pub compact_queued: bool,
    /// Who compacts this session's context, and what SOBA's actions do to it.
    pub control: Control,
    /// For a session SOBA follows: the agent as it sees itself (its model, the threshold at
    /// which it compacts itself, its own latest compaction).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub followed: Option<Box<super::followed::FollowedAgent>>,
}

/// Who compacts a session: SOBA, for an agent that takes its model input from SOBA (the SDKs,
/// `soba proxy`, the pi extension's own sessions), or the agent itself, for a transcript SOBA
/// only follows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Control {
    pub compacted_by: CompactedBy,
    /// The followed agent: `claude-code`, `codex` or `pi`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// How the followed agent's own compactions reach SOBA, when installed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub integration: Option<crate::attach::integration::Integration>,
    /// One sentence for a tooltip: who compacts, and when.
    pub note: String,
    /// What SOBA's compact, capsule load and rewind do for this session.
    pub actions: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompactedBy {
    /// SOBA's capsule is the model input of the agent's next inference.
    Soba,
    /// The agent compacts its own context; SOBA's actions are previews.
    Agent,
}

/// The answer to `soba/preview`: what SOBA would send after the action, changing nothing.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewResult {
    pub session_id: String,
    /// `compact`, `capsuleLoad` or `rewind`.
    pub action: String,
    pub control: Control,
    /// The budget's total now, as `soba/budget` reports it (the status bar's figure).
    pub tokens_before: u64,
    /// The model input after the action, on the budget's basis: SOBA's count of it, scaled as
    /// the budget scales counts, plus `notInLog`.
    pub tokens_after: u64,
    /// The budget's part that is not in the log (a system prompt and tool schemas the log does
    /// not hold), in both figures: no action changes it.
    pub not_in_log: u64,
    /// Markdown: a header saying that this is a preview and who compacts, then the model input.
    pub text: String,
}

impl BudgetReport {
    pub fn new(
        session_id: &str,
        workspace: &str,
        core: &CoreBudgetReport,
        compacting: bool,
    ) -> Self {
        BudgetReport {
            session_id: session_id.to_string(),
            workspace: workspace.to_string(),
            budget: serde_json::to_value(core).expect("budget report serializes"),
            compacting,
            compact_queued: false,
            control: Control::driven(),
            followed: None,
        }
    }

    /// The report, with the followed agent's view of itself.
    pub fn with_followed(mut self, followed: Option<super::followed::FollowedAgent>) -> Self {
        self.followed = followed.map(Box::new);
        self
    }

    pub fn with_control(mut self, control: Control) -> Self {
        self.control = control;
        self
    }

    /// The report, saying whether an explicit `/compact` waits for an inference to end.
    pub fn with_compact_queued(mut self, queued: bool) -> Self {
        self.compact_queued = queued;
        self
    }

    pub fn effective_tokens(&self) -> u64 {
        self.budget["effectiveTokens"].as_u64().unwrap_or(0)
    }

    pub fn hard_limit(&self) -> u64 {
        self.budget["hardLimit"].as_u64().unwrap_or(0)
    }

    pub fn last_compaction(&self) -> Value {
        self.budget
            .get("lastCompaction")
            .cloned()
            .unwrap_or(Value::Null)
    }
}

/// The answer to `soba/context`: what fills the active session's context window.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContextResult {
    pub session_id: String,
    pub workspace: String,
    /// Effective tokens and the limits, as in `soba/budget`, for the percentages.
    pub effective_tokens: u64,
    pub hard_limit: u64,
    pub soft_limit: u64,
    /// Who compacts the session, as in `soba/budget`: the soft limit is SOBA's promise only
    /// where SOBA compacts.
    pub control: Control,
    /// How `effectiveTokens` was measured. `tokens`, `breakdown` and `byKind` are SOBA's counts
    /// of the log; `budgetBreakdown` splits `effectiveTokens` itself.
    pub source: soba_core::budget::MeasurementSource,
    /// `effectiveTokens` split into its parts, as `soba/budget`'s `breakdown`: the parts on the
    /// budget's scale and `notInLog` (what the provider counts beyond the log, the unseen
    /// allowance included) always sum to it.
    #[schemars(with = "crate::inspect::ReportBreakdown")]
    pub budget_breakdown: Value,
    #[serde(flatten)]
    pub usage: crate::inspect::ContextUsage,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionOpenResult {
    pub session_id: String,
    pub path: String,
    pub budget: BudgetReport,
    /// Damaged lines skipped (and entries re-attached) when the log was loaded.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppendResult {
    pub entry_ids: Vec<String>,
    pub leaf_id: Option<String>,
    pub budget: BudgetReport,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightResult {
    pub messages: Vec<ModelMessage>,
    pub tokens: u64,
    pub compaction: Option<CompactionResult>,
    /// Positions in `messages` whose `content` was left out (an empty list), as the params'
    /// `omitContentOf` asked: the client holds it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<usize>,
}

/// `soba/preflight`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightParams {
    pub session_id: String,
    /// Runs of entry ids whose content the client holds (each run one message of the client's,
    /// such as a message the proxy's agent resends with every request): where the model input
    /// shows a run whole, in order, each entry's content as it was logged, those messages come
    /// back without their content (the result's `omitted`). A run shown in part, shortened or
    /// not at all comes back as it is.
    #[serde(default)]
    pub omit_content_of: Vec<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnCompleteResult {
    pub intent_recorded: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointResult {
    pub entry_id: String,
    pub intent_recorded: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverflowResult {
    pub compaction: CompactionResult,
    pub retry_allowed: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelResult {
    pub cancelled: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RewindResult {
    pub leaf_id: Option<String>,
    pub budget: BudgetReport,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoCompactResult {
    pub auto_compact: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    pub session_id: String,
    pub workspace: String,
    pub path: String,
    pub active: bool,
    /// `false` for a session closed for being idle: listed with the figures it had then, and
    /// opened again by the next request that names it.
    pub in_memory: bool,
    pub entries: usize,
    pub effective_tokens: u64,
    pub hard_limit: u64,
    #[schemars(with = "Option<crate::inspect::LastCompaction>")]
    pub last_compaction: Value,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionsResult {
    pub sessions: Vec<SessionSummary>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlightResult {
    pub records: Vec<crate::flight::FlightRecord>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleCreateResult {
    pub checkpoint_id: String,
    pub title: String,
    /// The capsule's own size in tokens, scaled as the budget scales counts (as `tokens.capsule`
    /// in `soba/capsule/list`).
    pub tokens: u64,
    /// Effective tokens of the session state the capsule describes.
    pub session_tokens: u64,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleExportResult {
    pub path: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleLoadResult {
    pub checkpoint_id: String,
    pub session_id: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleTokensView {
    /// The context when the capsule was written.
    pub before: u64,
    /// The context the capsule left (the capsule and what was kept after it).
    pub after: u64,
    /// The capsule's own size, scaled as the budget scales counts: the one figure every view
    /// gives for a capsule (`soba/capsule/create`'s `tokens` is the same).
    pub capsule: u64,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleSummary {
    pub checkpoint_id: String,
    /// The capsule's log entry: the parent for entries that continue from it.
    pub entry_id: String,
    pub title: Option<String>,
    #[schemars(with = "soba_core::session::trigger::Trigger")]
    pub trigger: String,
    #[schemars(with = "soba_core::session::capsule::model::Quality")]
    pub quality: String,
    pub ts: String,
    pub tokens: CapsuleTokensView,
    #[schemars(with = "soba_core::session::capsule::model::Origin")]
    pub origin: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleListResult {
    pub capsules: Vec<CapsuleSummary>,
}

// ---------------------------------------------------------------------------------------------
// Notifications

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CompactionPhase {
    Start,
    Progress,
    End,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionNotice {
    pub session_id: String,
    pub operation_id: String,
    pub phase: CompactionPhase,
    #[schemars(with = "soba_core::session::trigger::Trigger")]
    pub trigger: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percent: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<CompactionResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// On `start`: what to call the operation while it runs, worded by its trigger
    /// (`Compacting context (/compact)`, `Compacting context before response (hard_limit)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Errors

/// A JSON-RPC error with a stable code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        RpcError::new(code::INVALID_PARAMS, message)
    }

    pub fn unknown_session(id: &str) -> Self {
        RpcError::new(
            code::UNKNOWN_SESSION,
            format!("unknown session `{id}`; open it first with soba/session/open (create: true makes a new one)"),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        RpcError::new(code::INTERNAL, message)
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// Name the request field an invalid-params error is about (`` `entryId`: … ``). Other
    /// errors are not the request's fault, so they name no field.
    pub fn about_param(mut self, field: &str) -> Self {
        if self.code == code::INVALID_PARAMS {
            self.message = format!("`{field}`: {}", self.message);
        }
        self
    }
}

/// An error's message followed by its causes, joined by `: ` (what `{:#}` prints for anyhow).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        message.push_str(": ");
        message.push_str(&c.to_string());
        cause = c.source();
    }
    message
}

// The engine's errors become protocol errors here, and only here: what the request asked for
// that is not there is the caller's to fix (invalid params); a log that cannot be written is
// the daemon's (internal).

impl From<soba_core::session::rewind::RewindError> for RpcError {
    fn from(e: soba_core::session::rewind::RewindError) -> Self {
        use soba_core::session::rewind::RewindError;
        match e {
            RewindError::NoEntry { .. } => RpcError::invalid_params(e.to_string()),
            RewindError::Append(_) => RpcError::internal(with_causes(&e)),
        }
    }
}

impl From<soba_core::capsule::handoff::HandoffError> for RpcError {
    fn from(e: soba_core::capsule::handoff::HandoffError) -> Self {
        use soba_core::capsule::handoff::HandoffError;
        match e {
            HandoffError::NoCapsules { .. } | HandoffError::NoCapsule { .. } => {
                RpcError::invalid_params(e.to_string())
            }
            HandoffError::Append(_) => RpcError::internal(with_causes(&e)),
        }
    }
}

impl From<RpcError> for tower_lsp_server::jsonrpc::Error {
    fn from(e: RpcError) -> Self {
        tower_lsp_server::jsonrpc::Error {
            code: tower_lsp_server::jsonrpc::ErrorCode::from(e.code),
            message: e.message.into(),
            data: e.data,
        }
    }
}

/// Parse parameters; the error names the offending field.
pub fn parse_params<T: serde::de::DeserializeOwned>(
    method: &str,
    params: Value,
) -> Result<T, RpcError> {
    let params = if params.is_null() {
        Value::Object(Default::default())
    } else {
        params
    };
    match serde_json::from_value::<T>(params.clone()) {
        Ok(v) => Ok(v),
        Err(e) => {
            let message = e.to_string();
            let field = if message.contains('`') {
                None
            } else {
                offending_field::<T>(&params, &message)
            };
            Err(RpcError::invalid_params(match field {
                Some(f) => format!("{method}: invalid params: `{f}`: {message}"),
                None => format!("{method}: invalid params: {message}"),
            }))
        }
    }
}

/// serde reports a wrong type without the field's name. The field is the one whose removal
/// makes that error go away.
fn offending_field<T: serde::de::DeserializeOwned>(
    params: &Value,
    message: &str,
) -> Option<String> {
    let obj = params.as_object()?;
    obj.keys()
        .find(|key| {
            let mut without = obj.clone();
            without.remove(key.as_str());
            match serde_json::from_value::<T>(Value::Object(without)) {
                Ok(_) => true,
                Err(e) => e.to_string() != message,
            }
        })
        .cloned()
}

/// An entry as `soba/session/append` takes it: a session-log entry whose `id`, `parentId` and
/// `ts` may be left out. Entry types the daemon alone writes are not accepted.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // Exists for its schema only.
pub struct AppendedEntry {
    /// Assigned by the daemon when left out.
    id: Option<String>,
    /// The entry this one follows; left out (or null): the previous entry of the batch, or
    /// the session's leaf for the first one.
    parent_id: Option<String>,
    /// RFC 3339 timestamp; the time of the append when left out.
    ts: Option<String>,
    /// Id of the record this entry comes from in the agent's own transcript.
    source_id: Option<String>,
    #[serde(flatten)]
    body: soba_core::session::entry::EntryBody,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_names_follow_the_method_names() {
        assert_eq!(
            command_for(method::SESSION_OPEN),
            "soba.server.session.open"
        );
        assert_eq!(command_for(method::BUDGET), "soba.server.budget");
        assert_eq!(
            method_for_command("soba.server.turn.complete"),
            Some(method::TURN_COMPLETE)
        );
        assert_eq!(method_for_command("soba.server.nope"), None);
    }

    #[test]
    fn invalid_params_name_the_field() {
        let e = parse_params::<RewindParams>(method::REWIND, serde_json::json!({"sessionId": "s"}))
            .unwrap_err();
        assert_eq!(e.code, code::INVALID_PARAMS);
        assert!(e.message.contains("entryId"), "{}", e.message);
        let e = parse_params::<AutoCompactParams>(
            method::AUTO_COMPACT,
            serde_json::json!({"enabled": "yes"}),
        )
        .unwrap_err();
        assert!(
            e.message.contains("`enabled`: invalid type"),
            "{}",
            e.message
        );
    }

    fn write_failure() -> soba_core::session::log::LogError {
        soba_core::session::log::LogError::WriteFailed {
            path: "/s.jsonl".into(),
            cause: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        }
    }

    #[test]
    fn an_unknown_rewind_target_is_the_callers_and_a_failed_append_the_daemons() {
        use soba_core::session::rewind::RewindError;
        let e = RpcError::from(RewindError::NoEntry {
            to: "entry-onf".into(),
            log: "/s.jsonl".into(),
            suggestion: Some("entry-one".into()),
        })
        .about_param("entryId");
        assert_eq!(e.code, code::INVALID_PARAMS);
        assert!(
            e.message
                .starts_with("`entryId`: no entry `entry-onf` in /s.jsonl.")
                && e.message.contains("Did you mean `entry-one`?"),
            "{}",
            e.message
        );

        let e = RpcError::from(RewindError::Append(write_failure())).about_param("entryId");
        assert_eq!(e.code, code::INTERNAL);
        assert!(
            e.message
                .starts_with("appending the rewind entry: could not write to /s.jsonl:"),
            "the cause is in the message, and no field is blamed: {}",
            e.message
        );
    }

    #[test]
    fn an_unknown_checkpoint_is_the_callers_and_a_failed_load_the_daemons() {
        use soba_core::capsule::handoff::HandoffError;
        let none = RpcError::from(HandoffError::NoCapsules {
            checkpoint: "ck_1".into(),
        });
        assert_eq!(none.code, code::INVALID_PARAMS);
        assert!(
            none.message.contains("has no capsules yet"),
            "{}",
            none.message
        );
        let other = RpcError::from(HandoffError::NoCapsule {
            checkpoint: "ck_2".into(),
            known: vec!["ck_1".into(), "ck_3".into()],
            suggestion: None,
        })
        .about_param("checkpointId");
        assert_eq!(other.code, code::INVALID_PARAMS);
        assert_eq!(
            other.message,
            "`checkpointId`: no capsule `ck_2` in this session. Its capsules: ck_1, ck_3"
        );

        let e = RpcError::from(HandoffError::Append(write_failure()));
        assert_eq!(e.code, code::INTERNAL);
        assert!(
            e.message
                .starts_with("cannot add the capsule to the session: could not write to /s.jsonl:"),
            "{}",
            e.message
        );
    }
}
