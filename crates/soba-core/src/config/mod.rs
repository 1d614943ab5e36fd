//! Configuration: the spec's `compaction` block, the model definition, the summarizer and
//! storage settings. Layers, lowest first: built-in defaults, the user's config file, the
//! workspace's `.soba/config.json`, a `--config FILE`, then command-line flags.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::limits::CompactionConfig;
use crate::limits::Limits;
use crate::tokens::CalibrationSource;
use crate::tokens::TokenizerKind;
use crate::util::did_you_mean;

pub mod layers;

/// The agent model whose window is being managed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelDef {
    pub name: String,
    pub context_window: u64,
    pub max_output_tokens: u64,
    pub tokenizer: TokenizerKind,
    /// How far the model's bills run above counts with `tokenizer` (≥ 1.0); counted tokens of
    /// the budget are multiplied by it, or by the higher factor a session learns from its own
    /// usage reports (`Session::calibration_at`).
    pub count_factor: f64,
    pub count_factor_source: CalibrationSource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// The deterministic local builder; no network.
    #[default]
    Local,
    /// Any OpenAI-compatible Chat Completions server.
    Openai,
    /// Anthropic Messages API.
    Anthropic,
}

/// The model that writes capsules, configured independently of the agent's model.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummarizerConfig {
    /// `local` (default: the deterministic builder, no network), `openai` (any
    /// OpenAI-compatible Chat Completions server) or `anthropic`.
    pub provider: Provider,
    /// API root. Defaults: `https://api.openai.com/v1` for `openai`, `https://api.anthropic.com`
    /// for `anthropic`. Local servers: e.g. `http://127.0.0.1:11434/v1` (Ollama).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The summarization model (required for `openai` and `anthropic`), independent of the
    /// agent's model; a small, cheap model is the usual choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Name of the environment variable holding the API key (never the key itself). Required
    /// for `anthropic`; optional for `openai`-compatible servers that need no key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// The summarization model's context window in tokens. Default: the catalog's figure for
    /// `model`, else 32768. No request larger than `contextWindow - maxOutputTokens` is sent;
    /// longer histories are summarized in chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Output tokens asked for per request. Default: 4096 (or the catalog's limit if smaller).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// After 3 consecutive model failures, the model is skipped for this many milliseconds
    /// (the local capsule is built at once). Default: 60000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_ms: Option<u64>,
    /// Redact secrets from everything sent to the summarizer (history, previous capsule,
    /// instructions). Default: on for a remote server, off for one on this machine
    /// (`localhost`, `127.0.0.1`, `::1`). `false` sends the history as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redact_input: Option<bool>,
}

/// When an append counts as acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// `fsync` (fdatasync) before acknowledging each append: survives power loss.
    #[default]
    Fsync,
    /// Written to the OS before acknowledging: survives a process crash, not power loss.
    Flush,
}

/// Fully resolved configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    pub compaction: CompactionConfig,
    pub model: ModelDef,
    pub summarizer: SummarizerConfig,
    pub durability: Durability,
    /// Mirror explicit, validated, non-degraded capsules into `.soba/memory/`.
    pub mirror_explicit_compacts: bool,
    /// How tool calls become artifacts (files read and modified, verification commands).
    pub tool_mapping: crate::tool_mapping::ToolMapping,
    /// The model was named but is in no catalog and no layer gave its window: `model` holds
    /// the default figures, and `warnings` says so.
    #[serde(skip)]
    pub model_guessed: bool,
    /// A layer set the `summarizer` block (even to `{"provider": "local"}`). Without one, a
    /// client that offers the agent's own model (`soba proxy`, the pi extension) has its
    /// capsules written by that model; with one, the configured summarizer (or the local
    /// builder) is used whatever the client offers.
    #[serde(skip)]
    pub summarizer_configured: bool,
    /// What the user must be told about this configuration (an unknown model name).
    #[serde(skip)]
    pub warnings: Vec<String>,
    /// Set when no layer gave `keepRecentTokens` and the default did not fit the window: it
    /// was capped to [`DEFAULT_KEEP_RECENT_SHARE`] of the hard limit. `soba budget` shows it.
    #[serde(skip)]
    pub keep_recent_capped: Option<KeepRecentCap>,
    /// Set when the window is below [`SMALL_WINDOW_TOKENS`] and defaults were scaled to it
    /// (the safety reserve, the maximum output). `soba budget` shows it.
    #[serde(skip)]
    pub small_window: Option<SmallWindow>,
    /// The defaults no layer gave, before any window scaled them: what another window would
    /// apply (see [`Config::smallest_window_above`]). `None` for a value given as it is.
    #[serde(skip)]
    pub unscaled_defaults: UnscaledDefaults,
}

/// The safety reserve and maximum output a window of any size would start from, where no
/// layer gave them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UnscaledDefaults {
    pub safety_reserve: Option<u64>,
    pub max_output: Option<u64>,
}

/// Windows below this many tokens scale the defaults that the spec sizes for large windows:
/// the safety reserve (8192) and the maximum output shrink with the window, and the default
/// `keepRecentTokens` is capped to [`SMALL_WINDOW_KEEP_RECENT_SHARE`] of the hard limit. From
/// this size up the spec's figures hold exactly.
pub const SMALL_WINDOW_TOKENS: u64 = 64_000;

/// The share of the hard limit the default `keepRecentTokens` is capped to below
/// [`SMALL_WINDOW_TOKENS`]: with the capsule and the system prompt, the retained tail must fit
/// in the room a compaction leaves ([`crate::limits::ROOM_AFTER_COMPACTION`]).
pub const SMALL_WINDOW_KEEP_RECENT_SHARE: f64 = 0.3;

/// The defaults a small window scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmallWindow {
    pub context_window: u64,
    /// The configured default reserve and what applies: `default × window / 64000`.
    pub safety_reserve: Option<(u64, u64)>,
    /// The model's maximum output and what applies: a quarter of the window.
    pub max_output: Option<(u64, u64)>,
}

impl SmallWindow {
    /// `window 24.0k is below 64.0k: safetyReserveTokens 3.1k (default 8.2k scaled to the
    /// window), maxOutputTokens 6.0k (16.4k capped to a quarter of the window)`.
    pub fn note(&self) -> String {
        use crate::util::human_tokens as k;
        let mut scaled = Vec::new();
        if let Some((default, applied)) = self.safety_reserve {
            scaled.push(format!(
                "safetyReserveTokens {} (default {} scaled to the window)",
                k(applied),
                k(default)
            ));
        }
        if let Some((model, applied)) = self.max_output {
            scaled.push(format!(
                "maxOutputTokens {} ({} capped to a quarter of the window)",
                k(applied),
                k(model)
            ));
        }
        format!(
            "window {} is below {}: {}",
            k(self.context_window),
            k(SMALL_WINDOW_TOKENS),
            scaled.join(", ")
        )
    }
}

/// The default safety reserve scaled to a small window: `reserve × window / 64000`, rounded
/// down; the reserve as it is from [`SMALL_WINDOW_TOKENS`] up.
pub fn scaled_safety_reserve(reserve: u64, context_window: u64) -> u64 {
    if context_window >= SMALL_WINDOW_TOKENS {
        return reserve;
    }
    (reserve as u128 * context_window as u128 / SMALL_WINDOW_TOKENS as u128) as u64
}

/// A model's maximum output scaled to a small window: at most a quarter of it.
pub fn scaled_max_output(max_output: u64, context_window: u64) -> u64 {
    if context_window >= SMALL_WINDOW_TOKENS {
        return max_output;
    }
    max_output.min(context_window / 4)
}

/// The share of the hard limit the *default* `keepRecentTokens` is capped to, so that a small
/// window (a local model with 16k–32k tokens) works without configuration. A value given in
/// any layer is used as given, and refused if it does not fit. Half, not less: the spec's own
/// example (hard limit 48808) keeps the spec's default of 20000 as it is.
pub const DEFAULT_KEEP_RECENT_SHARE: f64 = 0.5;

/// The default `keepRecentTokens`, capped because the window is small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepRecentCap {
    /// The spec's default (20000).
    pub default: u64,
    /// What applies: `floor(hardLimit × share)`.
    pub capped: u64,
    pub hard_limit: u64,
    /// The share of the hard limit, in percent: 50, or 30 below [`SMALL_WINDOW_TOKENS`].
    pub share_percent: u64,
}

impl KeepRecentCap {
    /// `keepRecentTokens 4.9k (default 20.0k capped to 50% of the 9.8k hard limit)`.
    pub fn note(&self) -> String {
        use crate::util::human_tokens;
        format!(
            "keepRecentTokens {} (default {} capped to {}% of the {} hard limit)",
            human_tokens(self.capped),
            human_tokens(self.default),
            self.share_percent,
            human_tokens(self.hard_limit)
        )
    }
}

/// `floor(hard_limit × DEFAULT_KEEP_RECENT_SHARE)`, in integers.
fn keep_recent_share_of(hard_limit: u64) -> u64 {
    hard_limit / 2
}

impl Default for Config {
    fn default() -> Self {
        Config {
            compaction: CompactionConfig::default(),
            model: default_model(),
            summarizer: SummarizerConfig::default(),
            durability: Durability::default(),
            mirror_explicit_compacts: false,
            tool_mapping: crate::tool_mapping::ToolMapping::default(),
            model_guessed: false,
            summarizer_configured: false,
            warnings: Vec::new(),
            keep_recent_capped: None,
            small_window: None,
            unscaled_defaults: UnscaledDefaults::default(),
        }
    }
}

/// One config file as written by a person: every key optional.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(
    title = "SOBA configuration",
    description = "`.soba/config.json` or the user config file. Every key is optional; unset keys come from lower layers."
)]
pub struct ConfigFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<CompactionFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelFile>,
    /// Models added to the built-in catalog, or replacing its figures: name → window. A name
    /// matches like a catalog name (exact, then the longest entry it starts with, so
    /// `my-model` covers `my-model-2025-01`). Later layers replace an entry of the same name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<std::collections::BTreeMap<String, CatalogEntryFile>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarizer: Option<SummarizerConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<ArtifactsFile>,
    /// User config (or `--config`) only: how the shared daemon runs. Ignored in a workspace's
    /// own config, since one workspace must not size the daemon every other workspace shares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon: Option<DaemonFile>,
    /// User config only: workspaces (canonical paths) whose `.soba/config.json` may set the
    /// summarizer (endpoint, key variable, redaction). Edit with `soba trust PATH`. Ignored in
    /// a workspace's own config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trusted_workspaces: Option<Vec<String>>,
}

/// Which tools read files, write files, run shell commands or apply patches, and the argument
/// that holds the path, command or patch. Entries are added to (or replace) the built-in
/// mapping for Claude Code, Codex, pi and OpenAI-chat agents; an empty argument name removes a
/// built-in entry.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ArtifactsFile {
    /// Tool name → argument holding the path it reads, e.g. `{"Read": "file_path"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<std::collections::BTreeMap<String, String>>,
    /// Tool name → argument holding the path it writes, e.g. `{"Edit": "file_path"}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<std::collections::BTreeMap<String, String>>,
    /// Tool name → argument holding the shell command (a string or an argv array).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<std::collections::BTreeMap<String, String>>,
    /// Tool name → argument holding a patch (`apply_patch` format or a unified diff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactionFile {
    /// Soft triggers on or off. Hard-limit and overflow compaction stay mandatory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto: Option<bool>,
    /// Record a pending compaction intent when the agent completes a turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_on_turn_complete: Option<bool>,
    /// Record a pending compaction intent on milestone and plan-pivot checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_on_milestone: Option<bool>,
    /// Floor of the soft limit, in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_tokens_for_auto_compact: Option<u64>,
    /// A soft compact must reclaim at least this many tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_reclaimable_tokens: Option<u64>,
    /// A soft compact must reclaim at least this share of the context, in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1.0), extend("exclusiveMinimum" = 0.0))]
    pub min_savings_ratio: Option<f64>,
    /// Newest tokens kept verbatim after the capsule; below the hard limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_recent_tokens: Option<u64>,
    /// Tokens held back for overhead that is hard to estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub safety_reserve_tokens: Option<u64>,
    /// Soft limit as a share of the hard limit, in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 1.0), extend("exclusiveMinimum" = 0.0))]
    pub auto_compact_threshold_ratio: Option<f64>,
    /// How long a model summary may take before the local capsule is used, in ms (> 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelFile {
    /// A model name; known names fill in the other fields from the built-in catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<TokenizerKind>,
    /// Multiply SOBA's token counts by this (≥ 1.0) to estimate the model's bills, for a model
    /// whose tokenizer is not public. Default: the catalog's factor (1.15 for Claude), else 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1.0))]
    pub count_factor: Option<f64>,
}

/// One model of the user's catalog (`models` in config).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogEntryFile {
    /// The model's context window in tokens (input and output together).
    #[schemars(range(min = 1))]
    pub context_window: u64,
    /// Output tokens reserved for the reply. Default: 16384, or a quarter of the window when
    /// that is smaller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// The tokenizer SOBA counts with. Default: `o200k_base`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<TokenizerKind>,
    /// Multiply counts by this (≥ 1.0) when the model's tokenizer is not public. Default: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1.0, max = 4.0))]
    pub count_factor: Option<f64>,
}

/// Output tokens reserved for a user-catalog model that names none (capped at a quarter of
/// its window).
pub const DEFAULT_CATALOG_MAX_OUTPUT: u64 = 16_384;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageFile {
    /// `fsync` (default): an acknowledged append survives power loss. `flush`: survives a crash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durability: Option<Durability>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryFile {
    /// Mirror explicit `/compact` capsules (validated, non-degraded) into `.soba/memory/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_explicit_compacts: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DaemonFile {
    /// Open sessions kept in memory while no client uses them (default 16, at least 1). Past
    /// this, the least recently used idle session is closed; its log stays on disk and the
    /// next request for it opens it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_idle_sessions: Option<usize>,
}

/// Idle open sessions the daemon keeps in memory unless `daemon.maxIdleSessions` says otherwise.
pub const DEFAULT_MAX_IDLE_SESSIONS: usize = 16;

/// How the shared daemon runs, from the user's config and `--config` (lowest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DaemonSettings {
    pub max_idle_sessions: usize,
}

impl Default for DaemonSettings {
    fn default() -> Self {
        DaemonSettings {
            max_idle_sessions: DEFAULT_MAX_IDLE_SESSIONS,
        }
    }
}

impl DaemonSettings {
    /// Resolve the daemon's settings from layered files (lowest first). Only the user's file
    /// and `--config` are given here: a workspace's `daemon` section never applies.
    pub fn resolve(files: &[ConfigFile]) -> Result<DaemonSettings, ConfigError> {
        let mut settings = DaemonSettings::default();
        for d in files.iter().filter_map(|f| f.daemon.as_ref()) {
            if let Some(n) = d.max_idle_sessions {
                settings.max_idle_sessions = n;
            }
        }
        if settings.max_idle_sessions == 0 {
            return Err(ConfigError::OutOfRange {
                key: "daemon.maxIdleSessions".into(),
                value: "0".into(),
                allowed: "must be at least 1 (sessions kept in memory while unused)".into(),
            });
        }
        Ok(settings)
    }
}

/// A model known to the built-in catalog.
#[derive(Debug, Clone, Copy)]
pub struct CatalogModel {
    pub name: &'static str,
    pub context_window: u64,
    pub max_output_tokens: u64,
    pub tokenizer: TokenizerKind,
    /// Provider-billed tokens per token counted with `tokenizer`, for models whose tokenizer
    /// is not public (see [`CLAUDE_COUNT_FACTOR`]); 1.0 when `tokenizer` is the model's own.
    pub count_factor: f64,
    /// Where the figures come from.
    pub source: &'static str,
}

impl CatalogModel {
    /// Whether `tokenizer` is the model's own, so that counts are exact. OpenAI publishes its
    /// models' tokenizers; for every other provider SOBA's count is an estimate, which a
    /// session checks against its usage reports (see [`crate::budget::Calibration::learned`]).
    pub fn tokenizer_is_the_models(&self) -> bool {
        self.source.starts_with("OpenAI ")
    }
}

/// Anthropic bills about 1/0.87 of what o200k_base counts on the same text: the median ratio of
/// o200k counts to Claude's reported input on real Claude Code transcripts is 0.87 (range
/// 0.72–0.95). Applied to the counted tail only, the median factor keeps the budget within 2%
/// on the transcripts of `../shared/fixtures` (`tests/it/accuracy.rs`).
pub const CLAUDE_COUNT_FACTOR: f64 = 1.15;

const O200K: TokenizerKind = TokenizerKind::O200kBase;
const CL100K: TokenizerKind = TokenizerKind::Cl100kBase;

/// Common models. Names match by exact name first, then by the longest catalog name the
/// given name starts with (so dated snapshots such as `gpt-4o-2024-08-06` resolve).
pub const CATALOG: &[CatalogModel] = &[
    CatalogModel {
        name: "gpt-5",
        context_window: 400_000,
        max_output_tokens: 128_000,
        tokenizer: O200K,
        count_factor: 1.0,
        source: "OpenAI model docs: GPT-5",
    },
    CatalogModel {
        name: "gpt-5-mini",
        context_window: 400_000,
        max_output_tokens: 128_000,
        tokenizer: O200K,
        count_factor: 1.0,
        source: "OpenAI model docs: GPT-5 mini",
    },
    CatalogModel {
        name: "gpt-5-codex",
        context_window: 400_000,
        max_output_tokens: 128_000,
        tokenizer: O200K,
        count_factor: 1.0,
        source: "OpenAI model docs: GPT-5-Codex",
    },
    CatalogModel {
        name: "gpt-5.1",
        context_window: 400_000,
        max_output_tokens: 128_000,
        tokenizer: O200K,
        count_factor: 1.0,
        source: "OpenAI model docs: GPT-5.1",
    },
    CatalogModel {
        name: "gpt-5.1-codex",
        context_window: 400_000,
        max_output_tokens: 128_000,
        tokenizer: O200K,
        count_factor: 1.0,
        source: "OpenAI model docs: GPT-5.1-Codex",
    },
    CatalogModel {
        name: "gpt-4.1",
        context_window: 1_047_576,
        max_output_tokens: 32_768,
        tokenizer: O200K,
        count_factor: 1.0,
        source: "OpenAI model docs: GPT-4.1",
    },
    CatalogModel {
        name: "gpt-4.1-mini",
        context_window: 1_047_576,
        max_output_tokens: 32_768,
        tokenizer: O200K,
        count_factor: 1.0,
        source: "OpenAI model docs: GPT-4.1 mini",
    },
    CatalogModel {
        name: "gpt-4o",
        context_window: 128_000,
        max_output_tokens: 16_384,
        tokenizer: O200K,
        count_factor: 1.0,
        source: "OpenAI model docs: GPT-4o",
    },
    CatalogModel {
        name: "gpt-4o-mini",
        context_window: 128_000,
        max_output_tokens: 16_384,
        tokenizer: O200K,
        count_factor: 1.0,
        source: "OpenAI model docs: GPT-4o mini",
    },
    CatalogModel {
        name: "o3",
        context_window: 200_000,
        max_output_tokens: 100_000,
        tokenizer: O200K,
        count_factor: 1.0,
        source: "OpenAI model docs: o3",
    },
    CatalogModel {
        name: "o4-mini",
        context_window: 200_000,
        max_output_tokens: 100_000,
        tokenizer: O200K,
        count_factor: 1.0,
        source: "OpenAI model docs: o4-mini",
    },
    CatalogModel {
        name: "gpt-4-turbo",
        context_window: 128_000,
        max_output_tokens: 4_096,
        tokenizer: CL100K,
        count_factor: 1.0,
        source: "OpenAI model docs: GPT-4 Turbo",
    },
    CatalogModel {
        name: "gpt-4",
        context_window: 8_192,
        max_output_tokens: 8_192,
        tokenizer: CL100K,
        count_factor: 1.0,
        source: "OpenAI model docs: GPT-4",
    },
    CatalogModel {
        name: "gpt-3.5-turbo",
        context_window: 16_385,
        max_output_tokens: 4_096,
        tokenizer: CL100K,
        count_factor: 1.0,
        source: "OpenAI model docs: GPT-3.5 Turbo",
    },
    CatalogModel {
        name: "claude-opus-4-5",
        context_window: 200_000,
        max_output_tokens: 64_000,
        tokenizer: O200K,
        count_factor: CLAUDE_COUNT_FACTOR,
        source: "Anthropic models overview: Claude Opus 4.5 (tokenizer estimated with o200k_base)",
    },
    CatalogModel {
        name: "claude-sonnet-4-5",
        context_window: 200_000,
        max_output_tokens: 64_000,
        tokenizer: O200K,
        count_factor: CLAUDE_COUNT_FACTOR,
        source:
            "Anthropic models overview: Claude Sonnet 4.5 (tokenizer estimated with o200k_base)",
    },
    CatalogModel {
        name: "claude-haiku-4-5",
        context_window: 200_000,
        max_output_tokens: 64_000,
        tokenizer: O200K,
        count_factor: CLAUDE_COUNT_FACTOR,
        source: "Anthropic models overview: Claude Haiku 4.5 (tokenizer estimated with o200k_base)",
    },
    CatalogModel {
        name: "claude-opus-4-1",
        context_window: 200_000,
        max_output_tokens: 32_000,
        tokenizer: O200K,
        count_factor: CLAUDE_COUNT_FACTOR,
        source: "Anthropic models overview: Claude Opus 4.1 (tokenizer estimated with o200k_base)",
    },
    CatalogModel {
        name: "claude-opus-4",
        context_window: 200_000,
        max_output_tokens: 32_000,
        tokenizer: O200K,
        count_factor: CLAUDE_COUNT_FACTOR,
        source: "Anthropic models overview: Claude Opus 4 (tokenizer estimated with o200k_base)",
    },
    CatalogModel {
        name: "claude-sonnet-4",
        context_window: 200_000,
        max_output_tokens: 64_000,
        tokenizer: O200K,
        count_factor: CLAUDE_COUNT_FACTOR,
        source: "Anthropic models overview: Claude Sonnet 4 (tokenizer estimated with o200k_base)",
    },
    CatalogModel {
        name: "claude-3-7-sonnet",
        context_window: 200_000,
        max_output_tokens: 64_000,
        tokenizer: O200K,
        count_factor: CLAUDE_COUNT_FACTOR,
        source:
            "Anthropic models overview: Claude Sonnet 3.7 (tokenizer estimated with o200k_base)",
    },
    CatalogModel {
        name: "claude-3-5-sonnet",
        context_window: 200_000,
        max_output_tokens: 8_192,
        tokenizer: O200K,
        count_factor: CLAUDE_COUNT_FACTOR,
        source:
            "Anthropic models overview: Claude Sonnet 3.5 (tokenizer estimated with o200k_base)",
    },
    CatalogModel {
        name: "claude-3-5-haiku",
        context_window: 200_000,
        max_output_tokens: 8_192,
        tokenizer: O200K,
        count_factor: CLAUDE_COUNT_FACTOR,
        source: "Anthropic models overview: Claude Haiku 3.5 (tokenizer estimated with o200k_base)",
    },
    CatalogModel {
        name: "gemini-2.5-pro",
        context_window: 1_048_576,
        max_output_tokens: 65_536,
        tokenizer: O200K,
        count_factor: 1.0,
        source: "Google Gemini models: 2.5 Pro (tokenizer estimated with o200k_base)",
    },
    CatalogModel {
        name: "gemini-2.5-flash",
        context_window: 1_048_576,
        max_output_tokens: 65_536,
        tokenizer: O200K,
        count_factor: 1.0,
        source: "Google Gemini models: 2.5 Flash (tokenizer estimated with o200k_base)",
    },
];

/// Name of the model used when nothing names one.
pub const DEFAULT_MODEL: &str = "gpt-4o";

/// Look a model up in the catalog: exact name, else the longest catalog name that the given
/// name starts with (after dropping a `provider/` prefix).
pub fn catalog_lookup(name: &str) -> Option<&'static CatalogModel> {
    let bare = name.rsplit('/').next().unwrap_or(name).to_ascii_lowercase();
    if let Some(m) = CATALOG.iter().find(|m| m.name == bare) {
        return Some(m);
    }
    CATALOG
        .iter()
        .filter(|m| extends_name(&bare, m.name))
        .max_by_key(|m| m.name.len())
}

fn model_from_catalog(m: &CatalogModel) -> ModelDef {
    ModelDef {
        name: m.name.to_string(),
        context_window: m.context_window,
        max_output_tokens: m.max_output_tokens,
        tokenizer: m.tokenizer,
        count_factor: m.count_factor,
        count_factor_source: if m.tokenizer_is_the_models() {
            CalibrationSource::Exact
        } else {
            CalibrationSource::Catalog
        },
    }
}

pub fn default_model() -> ModelDef {
    model_from_catalog(catalog_lookup(DEFAULT_MODEL).expect("default model is in the catalog"))
}

/// A configuration problem, naming the key, the value and what is allowed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read: {message}")]
    Unreadable { file: String, message: String },
    #[error("{file}: not valid JSON: {message}")]
    Syntax { file: String, message: String },
    #[error("{file}: unknown key `{key}`{}", suggestion.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default())]
    UnknownKey {
        file: String,
        key: String,
        suggestion: Option<String>,
    },
    #[error("{file}: `{key}` has the wrong type: {message}")]
    WrongType {
        file: String,
        key: String,
        message: String,
    },
    #[error("`{key}` = {value} is invalid: {allowed}")]
    OutOfRange {
        key: String,
        value: String,
        allowed: String,
    },
    #[error("{path} is a symbolic link; a workspace's .soba/config.json is read only from the workspace itself, never through a link (a cloned repository could point it at any file). Put the file itself there (`cp --remove-destination \"$(readlink -f {path})\" {path}`) or remove the link (`rm {path}`)")]
    Link { path: String },
}

/// Flags that override every file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    pub model: Option<String>,
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u64>,
    pub auto_compact: Option<bool>,
    pub keep_recent_tokens: Option<u64>,
}

const TOP_KEYS: &[&str] = &[
    "compaction",
    "model",
    "models",
    "summarizer",
    "artifacts",
    "storage",
    "memory",
    "daemon",
    "trustedWorkspaces",
    "$schema",
];
const COMPACTION_KEYS: &[&str] = &[
    "auto",
    "compactOnTurnComplete",
    "compactOnMilestone",
    "minTokensForAutoCompact",
    "minReclaimableTokens",
    "minSavingsRatio",
    "keepRecentTokens",
    "safetyReserveTokens",
    "autoCompactThresholdRatio",
    "timeoutMs",
];
const MODEL_KEYS: &[&str] = &[
    "name",
    "contextWindow",
    "maxOutputTokens",
    "tokenizer",
    "countFactor",
];
const SUMMARIZER_KEYS: &[&str] = &[
    "provider",
    "baseUrl",
    "model",
    "apiKeyEnv",
    "contextWindow",
    "maxOutputTokens",
    "cooldownMs",
    "redactInput",
];
const CATALOG_ENTRY_KEYS: &[&str] = &[
    "contextWindow",
    "maxOutputTokens",
    "tokenizer",
    "countFactor",
];
const STORAGE_KEYS: &[&str] = &["durability"];
const MEMORY_KEYS: &[&str] = &["mirrorExplicitCompacts"];
const ARTIFACTS_KEYS: &[&str] = &["read", "write", "shell", "patch"];
const DAEMON_KEYS: &[&str] = &["maxIdleSessions"];

fn check_keys(file: &str, prefix: &str, value: &Value, known: &[&str]) -> Result<(), ConfigError> {
    let Some(obj) = value.as_object() else {
        return Err(ConfigError::WrongType {
            file: file.into(),
            key: if prefix.is_empty() {
                "(top level)".into()
            } else {
                prefix.into()
            },
            message: "expected an object".into(),
        });
    };
    for key in obj.keys() {
        if !known.contains(&key.as_str()) {
            let full = if prefix.is_empty() {
                key.clone()
            } else {
                format!("{prefix}.{key}")
            };
            let suggestion = did_you_mean(key, known).map(|s| {
                if prefix.is_empty() {
                    s.to_string()
                } else {
                    format!("{prefix}.{s}")
                }
            });
            return Err(ConfigError::UnknownKey {
                file: file.into(),
                key: full,
                suggestion,
            });
        }
    }
    Ok(())
}

impl ConfigFile {
    /// Parse one config file's text, reporting unknown keys with a suggestion.
    pub fn parse(file: &str, text: &str) -> Result<ConfigFile, ConfigError> {
        let value: Value = serde_json::from_str(text).map_err(|e| ConfigError::Syntax {
            file: file.into(),
            message: e.to_string(),
        })?;
        ConfigFile::from_value(file, value)
    }

    /// [`ConfigFile::parse`] for JSON already decoded (`file` names where it came from).
    pub fn from_value(file: &str, value: Value) -> Result<ConfigFile, ConfigError> {
        check_keys(file, "", &value, TOP_KEYS)?;
        if let Some(Value::Object(models)) = value.get("models") {
            for (name, entry) in models {
                check_keys(file, &format!("models.{name}"), entry, CATALOG_ENTRY_KEYS)?;
            }
        }
        let sections: [(&str, &[&str]); 7] = [
            ("compaction", COMPACTION_KEYS),
            ("model", MODEL_KEYS),
            ("summarizer", SUMMARIZER_KEYS),
            ("storage", STORAGE_KEYS),
            ("memory", MEMORY_KEYS),
            ("artifacts", ARTIFACTS_KEYS),
            ("daemon", DAEMON_KEYS),
        ];
        for (section, keys) in sections {
            if let Some(v) = value.get(section) {
                check_keys(file, section, v, keys)?;
            }
        }
        let mut value = value;
        if let Some(obj) = value.as_object_mut() {
            obj.remove("$schema");
        }
        serde_json::from_value::<ConfigFile>(value.clone()).map_err(|e| {
            let message = e.to_string();
            ConfigError::WrongType {
                file: file.into(),
                key: offending_key(&value, &message).unwrap_or_else(|| key_in_message(&message)),
                message,
            }
        })
    }

    pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Unreadable {
            file: file.clone(),
            message: e.to_string(),
        })?;
        ConfigFile::parse(&file, &text)
    }
}

/// The dotted key (`compaction.keepRecentTokens`) whose value a type error is about. serde's
/// message names the expected type but not the field, so each key in turn is left out: the one
/// without which the error goes away (or becomes another) is the one it is about.
fn offending_key(value: &Value, message: &str) -> Option<String> {
    fn paths(v: &Value, prefix: &str, out: &mut Vec<String>) {
        if let Value::Object(obj) = v {
            for (k, child) in obj {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                // Deepest first, so that the leaf is named rather than its section.
                paths(child, &path, out);
                out.push(path);
            }
        }
    }
    fn without(v: &Value, path: &[&str]) -> Value {
        let mut v = v.clone();
        let mut cur = &mut v;
        for (i, k) in path.iter().enumerate() {
            let Some(obj) = cur.as_object_mut() else {
                break;
            };
            if i + 1 == path.len() {
                obj.remove(*k);
                break;
            }
            match obj.get_mut(*k) {
                Some(next) => cur = next,
                None => break,
            }
        }
        v
    }
    let mut all = Vec::new();
    paths(value, "", &mut all);
    all.into_iter().find(|path| {
        let parts: Vec<&str> = path.split('.').collect();
        match serde_json::from_value::<ConfigFile>(without(value, &parts)) {
            Ok(_) => true,
            Err(e) => e.to_string() != message,
        }
    })
}

fn key_in_message(message: &str) -> String {
    message
        .split('`')
        .nth(1)
        .map(str::to_string)
        .unwrap_or_else(|| "(value)".into())
}

/// The user's config file (`<config dir>/soba/config.json`).
pub fn user_config_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SOBA_CONFIG") {
        return Some(PathBuf::from(p));
    }
    directories::ProjectDirs::from("dev", "soba", "soba")
        .map(|d| d.config_dir().join("config.json"))
}

pub fn workspace_config_path(workspace: &Path) -> PathBuf {
    workspace.join(".soba").join("config.json")
}

/// A `.soba` folder or `.soba/config.json` that is a symbolic link is refused before anything
/// is read through it: a repository can carry such a link to any file of the user's, and a
/// config error would quote that file back (as Project Memory refuses to write through one).
pub fn refuse_links_to_workspace_config(workspace: &Path) -> Result<(), ConfigError> {
    let soba = workspace.join(".soba");
    for at in [soba.clone(), workspace_config_path(workspace)] {
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(ConfigError::Link {
                path: at.display().to_string(),
            });
        }
    }
    Ok(())
}

/// The workspace's `.soba/config.json` when it is there: `None` when missing, refused when
/// it or `.soba` is a link.
pub fn load_workspace_config(workspace: &Path) -> Result<Option<ConfigFile>, ConfigError> {
    refuse_links_to_workspace_config(workspace)?;
    let path = workspace_config_path(workspace);
    if path.is_file() {
        ConfigFile::load(&path).map(Some)
    } else {
        Ok(None)
    }
}

/// Where the session settings of `soba/session/open` are named in errors.
pub const SESSION_LAYER: &str = "soba/session/open";

/// The `compaction` and `summarizer` blocks of `soba/session/open`, checked like a config
/// file's blocks (unknown keys, wrong types); `None` when neither is given.
pub fn session_layer(
    compaction: Option<Value>,
    summarizer: Option<Value>,
) -> Result<Option<ConfigFile>, ConfigError> {
    let mut obj = serde_json::Map::new();
    if let Some(c) = compaction.filter(|v| !v.is_null()) {
        obj.insert("compaction".into(), c);
    }
    if let Some(s) = summarizer.filter(|v| !v.is_null()) {
        obj.insert("summarizer".into(), s);
    }
    if obj.is_empty() {
        return Ok(None);
    }
    ConfigFile::from_value(SESSION_LAYER, Value::Object(obj)).map(Some)
}

impl Config {
    /// Resolve layered files (lowest first) and flags into a validated configuration.
    /// `session_model` is the model the session log names (`SessionHeader::model_config`),
    /// used when no layer names one.
    pub fn resolve(
        files: &[ConfigFile],
        session_model: Option<&ModelFile>,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        let mut model = session_model.cloned().unwrap_or_default();
        let mut user_models = std::collections::BTreeMap::new();
        for f in files {
            for (name, entry) in f.models.iter().flatten() {
                check_catalog_entry(name, entry)?;
                user_models.insert(name.to_ascii_lowercase(), entry.clone());
            }
        }
        for f in files {
            if let Some(c) = &f.compaction {
                apply_compaction(&mut config.compaction, c);
            }
            if let Some(m) = &f.model {
                if m.name.is_some() {
                    // A newly named model resets figures that came from another model.
                    model = ModelFile::default();
                }
                merge_model(&mut model, m);
            }
            if let Some(s) = &f.summarizer {
                config.summarizer = s.clone();
                config.summarizer_configured = true;
            }
            if let Some(d) = f.storage.as_ref().and_then(|s| s.durability) {
                config.durability = d;
            }
            if let Some(m) = f.memory.as_ref().and_then(|m| m.mirror_explicit_compacts) {
                config.mirror_explicit_compacts = m;
            }
            if let Some(a) = &f.artifacts {
                let m = &mut config.tool_mapping;
                for (ours, theirs) in [
                    (&mut m.read, &a.read),
                    (&mut m.write, &a.write),
                    (&mut m.shell, &a.shell),
                    (&mut m.patch, &a.patch),
                ] {
                    for (tool, arg) in theirs.iter().flatten() {
                        if arg.is_empty() {
                            ours.remove(tool);
                        } else {
                            ours.insert(tool.clone(), arg.clone());
                        }
                    }
                }
            }
        }
        if let Some(name) = &overrides.model {
            model = ModelFile {
                name: Some(name.clone()),
                ..ModelFile::default()
            };
        }
        if overrides.context_window.is_some() {
            model.context_window = overrides.context_window;
        }
        if overrides.max_output_tokens.is_some() {
            model.max_output_tokens = overrides.max_output_tokens;
        }
        if let Some(a) = overrides.auto_compact {
            config.compaction.auto = a;
        }
        if let Some(k) = overrides.keep_recent_tokens {
            config.compaction.keep_recent_tokens = k;
        }
        let (resolved, guessed) = resolve_model(&model, &user_models);
        // The output the model reserves before a window caps it: its catalog's, or the default.
        let unscaled_output = model.max_output_tokens.is_none().then(|| {
            let unsized_model = ModelFile {
                context_window: None,
                ..model.clone()
            };
            resolve_model(&unsized_model, &user_models)
                .0
                .max_output_tokens
        });
        config.model = resolved;
        config.model_guessed = guessed;
        if guessed {
            config.warnings.push(unknown_model_warning(&config.model));
        }
        let reserve_given = files.iter().any(|f| {
            f.compaction
                .as_ref()
                .is_some_and(|c| c.safety_reserve_tokens.is_some())
        });
        config.unscaled_defaults = UnscaledDefaults {
            safety_reserve: (!reserve_given).then_some(config.compaction.safety_reserve_tokens),
            max_output: unscaled_output,
        };
        config.scale_to_small_window(model.max_output_tokens.is_some(), reserve_given);
        let keep_recent_given = overrides.keep_recent_tokens.is_some()
            || files.iter().any(|f| {
                f.compaction
                    .as_ref()
                    .is_some_and(|c| c.keep_recent_tokens.is_some())
            });
        if !keep_recent_given {
            config.cap_default_keep_recent();
        }
        config.validate()?;
        Ok(config)
    }

    /// Below [`SMALL_WINDOW_TOKENS`], the defaults no layer gave scale with the window: the
    /// safety reserve, and the maximum output (to a quarter of the window).
    fn scale_to_small_window(&mut self, max_output_given: bool, reserve_given: bool) {
        let window = self.model.context_window;
        if window >= SMALL_WINDOW_TOKENS {
            // A catalog's maximum output sized for the model's own window can leave a window
            // the user set no room at all (Claude Sonnet's 64000 at `--context-window 64000`):
            // the default is then capped to a quarter of the window as below it.
            let output = self.model.max_output_tokens;
            if !max_output_given
                && output + self.compaction.safety_reserve_tokens >= window
                && window / 4 < output
            {
                self.model.max_output_tokens = window / 4;
            }
            return;
        }
        let mut small = SmallWindow {
            context_window: window,
            safety_reserve: None,
            max_output: None,
        };
        let reserve = self.compaction.safety_reserve_tokens;
        let scaled = scaled_safety_reserve(reserve, window);
        if !reserve_given && scaled < reserve {
            self.compaction.safety_reserve_tokens = scaled;
            small.safety_reserve = Some((reserve, scaled));
        }
        let output = self.model.max_output_tokens;
        let capped = scaled_max_output(output, window);
        if !max_output_given && capped < output {
            self.model.max_output_tokens = capped;
            small.max_output = Some((output, capped));
        }
        if small.safety_reserve.is_some() || small.max_output.is_some() {
            self.small_window = Some(small);
        }
    }

    /// The default `keepRecentTokens` that does not fit the window is capped to
    /// [`DEFAULT_KEEP_RECENT_SHARE`] of the hard limit (recorded in `keep_recent_capped`).
    fn cap_default_keep_recent(&mut self) {
        let Some(limits) = Limits::compute(
            self.model.context_window,
            self.model.max_output_tokens,
            &self.compaction,
        ) else {
            return; // validate() reports the window
        };
        let share_percent = if self.model.context_window < SMALL_WINDOW_TOKENS {
            (SMALL_WINDOW_KEEP_RECENT_SHARE * 100.0) as u64
        } else {
            (DEFAULT_KEEP_RECENT_SHARE * 100.0) as u64
        };
        let share = limits.hard_limit * share_percent / 100;
        let default = self.compaction.keep_recent_tokens;
        if default > share {
            self.compaction.keep_recent_tokens = share;
            self.keep_recent_capped = Some(KeepRecentCap {
                default,
                capped: share,
                hard_limit: limits.hard_limit,
                share_percent,
            });
        }
    }

    /// The hard and soft limits this configuration implies.
    pub fn limits(&self) -> Limits {
        Limits::compute(
            self.model.context_window,
            self.model.max_output_tokens,
            &self.compaction,
        )
        .expect("validated configuration has a positive hard limit")
    }

    /// The smallest context window, in whole thousands of tokens, whose hard limit is above
    /// `tokens` under this configuration: its maximum output and safety reserve, scaled as a
    /// window of that size scales the defaults (a value the user gave stays as given).
    pub fn smallest_window_above(&self, tokens: u64) -> u64 {
        let defaults = self.unscaled_defaults;
        let (reserve, reserve_scales) = match defaults.safety_reserve {
            Some(default) => (default, true),
            None => (self.compaction.safety_reserve_tokens, false),
        };
        let (output, output_scales) = match defaults.max_output {
            Some(default) => (default, true),
            None => (self.model.max_output_tokens, false),
        };
        let hard_limit = |window: u64| {
            let reserve = if reserve_scales {
                scaled_safety_reserve(reserve, window)
            } else {
                reserve
            };
            let output = match output_scales {
                // As resolving that window would cap it (see `scale_to_small_window`).
                true if window < SMALL_WINDOW_TOKENS || output + reserve >= window => {
                    output.min(window / 4)
                }
                _ => output,
            };
            window.saturating_sub(output + reserve)
        };
        // Unscaled, the answer is exact; a small window's scaled defaults need less.
        let mut window = (tokens + 1 + output + reserve).div_ceil(1000) * 1000;
        while window > 1000 && hard_limit(window - 1000) > tokens {
            window -= 1000;
        }
        window
    }

    /// The limits of a session whose window a provider's overflow lowered (see
    /// [`crate::window`]); the configured ones without such a setting.
    pub fn limits_under(&self, window: Option<&crate::window::WindowSetting>) -> Limits {
        crate::window::limits_under(self.limits(), window, &self.compaction)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let c = &self.compaction;
        let m = &self.model;
        let ratio = |key: &str, v: f64| -> Result<(), ConfigError> {
            if v.is_finite() && v > 0.0 && v <= 1.0 {
                Ok(())
            } else {
                Err(ConfigError::OutOfRange {
                    key: format!("compaction.{key}"),
                    value: v.to_string(),
                    allowed: "must be a ratio in (0, 1]".into(),
                })
            }
        };
        ratio("minSavingsRatio", c.min_savings_ratio)?;
        ratio("autoCompactThresholdRatio", c.auto_compact_threshold_ratio)?;
        if c.timeout_ms == 0 {
            return Err(ConfigError::OutOfRange {
                key: "compaction.timeoutMs".into(),
                value: "0".into(),
                allowed: "must be at least 1 (milliseconds)".into(),
            });
        }
        if !(m.count_factor.is_finite() && (1.0..=4.0).contains(&m.count_factor)) {
            return Err(ConfigError::OutOfRange {
                key: "model.countFactor".into(),
                value: m.count_factor.to_string(),
                allowed: "must be a number from 1.0 to 4.0 (a factor below 1 would lower the budget below the count)".into(),
            });
        }
        if m.context_window == 0 {
            return Err(ConfigError::OutOfRange {
                key: "model.contextWindow".into(),
                value: "0".into(),
                allowed: "must be positive".into(),
            });
        }
        let Some(limits) = Limits::compute(m.context_window, m.max_output_tokens, c) else {
            return Err(ConfigError::OutOfRange {
                key: "model.contextWindow".into(),
                value: m.context_window.to_string(),
                allowed: format!(
                    "must exceed maxOutputTokens + safetyReserveTokens = {} + {} = {} so that the hard limit is positive",
                    m.max_output_tokens,
                    c.safety_reserve_tokens,
                    m.max_output_tokens + c.safety_reserve_tokens
                ),
            });
        };
        check_summarizer_base_url(self.summarizer.base_url.as_deref())?;
        if c.keep_recent_tokens >= limits.hard_limit {
            return Err(ConfigError::OutOfRange {
                key: "compaction.keepRecentTokens".into(),
                value: c.keep_recent_tokens.to_string(),
                allowed: format!(
                    "must be below the hard limit ({hard}): set it lower (e.g. {share}, {pct}% of the hard limit), or remove it so the default applies ({default}, capped to {pct}% of the hard limit for small windows)",
                    hard = limits.hard_limit,
                    share = keep_recent_share_of(limits.hard_limit),
                    pct = DEFAULT_KEEP_RECENT_SHARE * 100.0,
                    default = CompactionConfig::default().keep_recent_tokens,
                ),
            });
        }
        Ok(())
    }
}

/// A `baseUrl` with user-info (`https://user:pass@host`) would send those credentials as Basic
/// auth in place of the key, and print them wherever the URL is shown: refused, without
/// repeating them.
fn check_summarizer_base_url(base_url: Option<&str>) -> Result<(), ConfigError> {
    let Some(raw) = base_url else {
        return Ok(());
    };
    let Ok(url) = url::Url::parse(raw.trim()) else {
        // Unparsable URLs are reported, with the reason, when the summarizer is built.
        return Ok(());
    };
    if url.username().is_empty() && url.password().is_none() {
        return Ok(());
    }
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    Err(ConfigError::OutOfRange {
        key: "summarizer.baseUrl".into(),
        value: shown.as_str().trim_end_matches('/').to_string(),
        allowed: "must not hold credentials (`user:password@`): remove them from the URL, put the API key in an environment variable and name it in summarizer.apiKeyEnv".into(),
    })
}

fn apply_compaction(c: &mut CompactionConfig, f: &CompactionFile) {
    macro_rules! set {
        ($($field:ident),*) => { $( if let Some(v) = f.$field { c.$field = v; } )* };
    }
    set!(
        auto,
        compact_on_turn_complete,
        compact_on_milestone,
        min_tokens_for_auto_compact,
        min_reclaimable_tokens,
        min_savings_ratio,
        keep_recent_tokens,
        safety_reserve_tokens,
        auto_compact_threshold_ratio,
        timeout_ms
    );
}

fn merge_model(into: &mut ModelFile, from: &ModelFile) {
    if from.name.is_some() {
        into.name = from.name.clone();
    }
    if from.context_window.is_some() {
        into.context_window = from.context_window;
    }
    if from.max_output_tokens.is_some() {
        into.max_output_tokens = from.max_output_tokens;
    }
    if from.tokenizer.is_some() {
        into.tokenizer = from.tokenizer;
    }
    if from.count_factor.is_some() {
        into.count_factor = from.count_factor;
    }
}

/// The model `m` describes: its catalog figures (the user's catalog first, then the built-in
/// one) under the figures given explicitly. The flag is set when a named model is in neither
/// catalog and no window was given, so the default model's figures stand in.
fn resolve_model(
    m: &ModelFile,
    user_models: &std::collections::BTreeMap<String, CatalogEntryFile>,
) -> (ModelDef, bool) {
    let named = m.name.as_deref();
    let known = named.and_then(|n| {
        user_lookup(n, user_models).or_else(|| catalog_lookup(n).map(model_from_catalog))
    });
    let unknown_name = named.is_some() && known.is_none();
    let guessed = unknown_name && m.context_window.is_none();
    let from_catalog = known.is_some();
    let base = known.unwrap_or_else(default_model);
    let context_window = m.context_window.unwrap_or(base.context_window);
    // A window no catalog gives reserves output as the user catalog's entries do: the
    // default's 16384, or a quarter of the window when that is smaller.
    let default_output = match m.context_window {
        Some(w) if !from_catalog => base.max_output_tokens.min(w / 4),
        _ => base.max_output_tokens,
    };
    let model = ModelDef {
        name: m.name.clone().unwrap_or(base.name),
        context_window,
        max_output_tokens: m.max_output_tokens.unwrap_or(default_output),
        tokenizer: m.tokenizer.unwrap_or(base.tokenizer),
        count_factor: m.count_factor.unwrap_or(base.count_factor),
        count_factor_source: if m.count_factor.is_some() {
            CalibrationSource::Config
        } else if unknown_name && m.tokenizer.is_none() {
            // A model of no catalog, whose tokenizer the config does not name, is counted with
            // the default's: an estimate.
            CalibrationSource::Catalog
        } else {
            base.count_factor_source
        },
    };
    (model, guessed)
}

/// A model of the user's catalog, matched like [`catalog_lookup`] matches (the full name or
/// the name after a `provider/` prefix, exactly, else the longest entry it starts with).
fn user_lookup(
    name: &str,
    user_models: &std::collections::BTreeMap<String, CatalogEntryFile>,
) -> Option<ModelDef> {
    let full = name.to_ascii_lowercase();
    let bare = full.rsplit('/').next().unwrap_or(&full).to_string();
    let (key, entry) = user_models
        .get_key_value(&full)
        .or_else(|| user_models.get_key_value(&bare))
        .or_else(|| {
            user_models
                .iter()
                .filter(|(k, _)| extends_name(&bare, k) || extends_name(&full, k))
                .max_by_key(|(k, _)| k.len())
        })?;
    let context_window = entry.context_window;
    Some(ModelDef {
        name: key.clone(),
        context_window,
        max_output_tokens: entry
            .max_output_tokens
            .unwrap_or(DEFAULT_CATALOG_MAX_OUTPUT.min(context_window / 4)),
        tokenizer: entry.tokenizer.unwrap_or(O200K),
        count_factor: entry.count_factor.unwrap_or(1.0),
        // Counts are exact only when the entry names the model's tokenizer; without one,
        // o200k_base estimates it.
        count_factor_source: if entry.count_factor.is_some() {
            CalibrationSource::Config
        } else if entry.tokenizer.is_some() {
            CalibrationSource::Exact
        } else {
            CalibrationSource::Catalog
        },
    })
}

/// `name` is `base` followed by a snapshot or variant suffix (`-2024-08-06`, `@latest`,
/// `:free`, `.1`).
fn extends_name(name: &str, base: &str) -> bool {
    name.starts_with(base)
        && name[base.len()..]
            .chars()
            .next()
            .is_some_and(|c| c == '-' || c == '@' || c == ':' || c == '.')
}

/// A user-catalog entry's figures, checked whether or not a session uses the model, so a typo
/// is reported where it is written.
fn check_catalog_entry(name: &str, e: &CatalogEntryFile) -> Result<(), ConfigError> {
    let key = |k: &str| format!("models.{name}.{k}");
    if e.context_window == 0 {
        return Err(ConfigError::OutOfRange {
            key: key("contextWindow"),
            value: "0".into(),
            allowed: "must be positive (the model's window in tokens)".into(),
        });
    }
    if let Some(out) = e.max_output_tokens {
        if out >= e.context_window {
            return Err(ConfigError::OutOfRange {
                key: key("maxOutputTokens"),
                value: out.to_string(),
                allowed: format!("must be below contextWindow ({})", e.context_window),
            });
        }
    }
    if let Some(f) = e.count_factor {
        if !(f.is_finite() && (1.0..=4.0).contains(&f)) {
            return Err(ConfigError::OutOfRange {
                key: key("countFactor"),
                value: f.to_string(),
                allowed: "must be a number from 1.0 to 4.0".into(),
            });
        }
    }
    Ok(())
}

/// What a session of a model no catalog knows is told: the window its budget uses and how to
/// give the real one.
pub fn unknown_model_warning(used: &ModelDef) -> String {
    let name = serde_json::to_string(&used.name).unwrap_or_else(|_| "\"MODEL\"".into());
    format!(
        "model {name} is not in the model catalog, so its budget uses the default context window of {} tokens with {} output tokens reserved ({DEFAULT_MODEL}'s figures). If its window differs, add it to your config file: \"models\": {{{name}: {{\"contextWindow\": TOKENS, \"maxOutputTokens\": TOKENS}}}}, or set model.contextWindow",
        used.context_window, used.max_output_tokens
    )
}

/// JSON Schema of the config file, as checked in at `schemas/config.schema.json`.
pub fn config_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(ConfigFile)).expect("schema serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_text(text: &str) -> Result<Config, ConfigError> {
        let f = ConfigFile::parse("test.json", text)?;
        Config::resolve(&[f], None, &Overrides::default())
    }

    #[test]
    fn daemon_max_idle_sessions_comes_from_the_last_layer_that_sets_it() {
        let parse = |t: &str| ConfigFile::parse("test.json", t).unwrap();
        assert_eq!(
            DaemonSettings::resolve(&[]).unwrap().max_idle_sessions,
            DEFAULT_MAX_IDLE_SESSIONS
        );
        let user = parse(r#"{"daemon":{"maxIdleSessions":4}}"#);
        let extra = parse(r#"{"daemon":{"maxIdleSessions":2}}"#);
        let silent = parse(r#"{"daemon":{}}"#);
        let s = DaemonSettings::resolve(&[user.clone(), silent]).unwrap();
        assert_eq!(s.max_idle_sessions, 4);
        let s = DaemonSettings::resolve(&[user, extra]).unwrap();
        assert_eq!(s.max_idle_sessions, 2);
    }

    #[test]
    fn a_bad_max_idle_sessions_is_refused_naming_the_key() {
        let zero = ConfigFile::parse("test.json", r#"{"daemon":{"maxIdleSessions":0}}"#).unwrap();
        let e = DaemonSettings::resolve(&[zero]).unwrap_err().to_string();
        assert!(
            e.contains("daemon.maxIdleSessions") && e.contains("at least 1"),
            "{e}"
        );
        let e = ConfigFile::parse("test.json", r#"{"daemon":{"maxIdleSessions":-3}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("daemon.maxIdleSessions"), "{e}");
        let e = ConfigFile::parse("test.json", r#"{"daemon":{"maxIdleSession":3}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("daemon.maxIdleSessions"), "did you mean: {e}");
    }

    #[test]
    fn claude_counts_are_raised_by_the_catalog_factor_and_others_are_exact() {
        let claude = resolve_text(r#"{"model":{"name":"claude-sonnet-4-5-20250929"}}"#).unwrap();
        assert_eq!(claude.model.count_factor, CLAUDE_COUNT_FACTOR);
        assert_eq!(claude.model.count_factor_source, CalibrationSource::Catalog);
        let gpt = resolve_text(r#"{"model":{"name":"gpt-5"}}"#).unwrap();
        assert_eq!(gpt.model.count_factor, 1.0);
        assert_eq!(gpt.model.count_factor_source, CalibrationSource::Exact);
        // o200k_base only estimates these: no factor of their own, but not exact either.
        for estimated in ["gemini-2.5-pro", "deepseek-chat"] {
            let c = resolve_text(&format!(r#"{{"model":{{"name":"{estimated}"}}}}"#)).unwrap();
            assert_eq!(c.model.count_factor, 1.0, "{estimated}");
            assert_eq!(
                c.model.count_factor_source,
                CalibrationSource::Catalog,
                "{estimated}"
            );
        }
        // A config that names the tokenizer of a model no catalog knows says it is its own.
        let named = resolve_text(
            r#"{"model":{"name":"local-7b","contextWindow":128000,"tokenizer":"cl100k_base"}}"#,
        )
        .unwrap();
        assert_eq!(named.model.count_factor_source, CalibrationSource::Exact);
    }

    #[test]
    fn model_count_factor_sets_the_factor_for_any_model() {
        let c = resolve_text(r#"{"model":{"name":"deepseek-chat","countFactor":1.05}}"#).unwrap();
        assert_eq!(c.model.count_factor, 1.05);
        assert_eq!(c.model.count_factor_source, CalibrationSource::Config);
    }

    #[test]
    fn a_count_factor_below_one_is_refused_with_the_allowed_range() {
        for bad in ["0.9", "0", "5"] {
            let err = resolve_text(&format!(r#"{{"model":{{"countFactor":{bad}}}}}"#)).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains("model.countFactor"), "{msg}");
            assert!(msg.contains("1.0 to 4.0"), "{msg}");
        }
    }

    #[test]
    fn defaults_are_the_specs_ten_keys() {
        let c = CompactionConfig::default();
        let v = serde_json::to_value(&c).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, COMPACTION_KEYS);
        assert_eq!(c.min_tokens_for_auto_compact, 32000);
        assert_eq!(c.min_reclaimable_tokens, 12000);
        assert_eq!(c.min_savings_ratio, 0.25);
        assert_eq!(c.keep_recent_tokens, 20000);
        assert_eq!(c.safety_reserve_tokens, 8192);
        assert_eq!(c.auto_compact_threshold_ratio, 0.8);
        assert_eq!(c.timeout_ms, 15000);
        assert!(c.auto && c.compact_on_turn_complete && c.compact_on_milestone);
    }

    #[test]
    fn unknown_key_gets_did_you_mean() {
        let err = resolve_text(r#"{"compaction":{"keepRecentToken":100}}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "test.json: unknown key `compaction.keepRecentToken` (did you mean `compaction.keepRecentTokens`?)"
        );
        let err = resolve_text(r#"{"compacton":{}}"#).unwrap_err();
        assert!(
            err.to_string().contains("did you mean `compaction`"),
            "{err}"
        );
    }

    #[test]
    fn ratios_must_be_in_zero_one() {
        for bad in ["0", "1.5", "-0.1"] {
            let err = resolve_text(&format!(r#"{{"compaction":{{"minSavingsRatio":{bad}}}}}"#))
                .unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains("compaction.minSavingsRatio"), "{msg}");
            assert!(msg.contains("(0, 1]"), "{msg}");
        }
        assert!(resolve_text(r#"{"compaction":{"autoCompactThresholdRatio":1}}"#).is_ok());
    }

    #[test]
    fn keep_recent_must_be_below_hard_limit() {
        let err = resolve_text(
            r#"{"model":{"contextWindow":65000,"maxOutputTokens":8000},"compaction":{"keepRecentTokens":48808}}"#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "`compaction.keepRecentTokens` = 48808 is invalid: must be below the hard limit (48808): set it lower (e.g. 24404, 50% of the hard limit), or remove it so the default applies (20000, capped to 50% of the hard limit for small windows)"
        );
    }

    #[test]
    fn the_default_keep_recent_tokens_is_capped_to_a_share_of_a_small_hard_limit() {
        // A local model with a 24k window: the reserve scales to 8192 × 24000 / 64000 = 3072,
        // hard limit 24000 - 2000 - 3072 = 18928, of which 30% are kept.
        let c = resolve_text(
            r#"{"model":{"name":"local-24k","contextWindow":24000,"maxOutputTokens":2000}}"#,
        )
        .unwrap();
        assert_eq!(c.limits().hard_limit, 18928);
        assert_eq!(c.compaction.keep_recent_tokens, 5678);
        let cap = c.keep_recent_capped.expect("capped");
        assert_eq!(
            cap.note(),
            "keepRecentTokens 5.7k (default 20.0k capped to 30% of the 18.9k hard limit)"
        );
        // Where the default fits (the spec's example: hard limit 48808), it stands as the
        // spec gives it and nothing is noted.
        let c =
            resolve_text(r#"{"model":{"contextWindow":65000,"maxOutputTokens":8000}}"#).unwrap();
        assert_eq!(c.compaction.keep_recent_tokens, 20000);
        assert_eq!(c.keep_recent_capped, None);
    }

    #[test]
    fn an_explicit_keep_recent_tokens_that_does_not_fit_is_still_an_error() {
        // 20000 given with a 16000 hard limit (26192 - 2000 - 8192), in a file or as a flag.
        let text = r#"{"model":{"contextWindow":26192,"maxOutputTokens":2000},"compaction":{"keepRecentTokens":20000,"safetyReserveTokens":8192}}"#;
        let want = "`compaction.keepRecentTokens` = 20000 is invalid: must be below the hard limit (16000): set it lower (e.g. 8000, 50% of the hard limit), or remove it so the default applies (20000, capped to 50% of the hard limit for small windows)";
        assert_eq!(resolve_text(text).unwrap_err().to_string(), want);
        let file = ConfigFile::parse(
            "t",
            r#"{"model":{"contextWindow":26192,"maxOutputTokens":2000},"compaction":{"safetyReserveTokens":8192}}"#,
        )
        .unwrap();
        let flag = Overrides {
            keep_recent_tokens: Some(20000),
            ..Overrides::default()
        };
        let err = Config::resolve(&[file], None, &flag).unwrap_err();
        assert_eq!(err.to_string(), want);
        // An explicit value that fits is used as given, however large a share it is.
        let c = resolve_text(
            r#"{"model":{"contextWindow":26192,"maxOutputTokens":2000},"compaction":{"keepRecentTokens":15000,"safetyReserveTokens":8192}}"#,
        )
        .unwrap();
        assert_eq!(c.compaction.keep_recent_tokens, 15000);
        assert_eq!(c.keep_recent_capped, None);
    }

    #[test]
    fn window_must_leave_a_positive_hard_limit() {
        let err = resolve_text(
            r#"{"model":{"contextWindow":16000,"maxOutputTokens":8000},"compaction":{"safetyReserveTokens":8192}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("model.contextWindow"), "{err}");
    }

    /// The window a refusal names is the smallest, in thousands, whose own limits hold the
    /// tokens: a small window's scaled defaults where they would apply, given values as given.
    #[test]
    fn the_smallest_window_above_a_size_is_the_first_whose_hard_limit_exceeds_it() {
        let hard_at = |text: String| resolve_text(&text).unwrap().limits().hard_limit;
        let cases = [
            // Defaults scaled at 32k; the answer lies above 64k, where they are not.
            (r#"{"model":{"name":"test","contextWindow":32768}}"#, 60_000),
            // Defaults scaled at 16k, and still scaled at the answer.
            (r#"{"model":{"name":"test","contextWindow":16384}}"#, 20_000),
            // Given values stay as given at every size.
            (
                r#"{"model":{"name":"test","contextWindow":16384,"maxOutputTokens":6000},"compaction":{"safetyReserveTokens":1000}}"#,
                20_000,
            ),
            (
                r#"{"model":{"name":"test","contextWindow":128000}}"#,
                150_000,
            ),
            // A catalog model whose output a small window caps (Claude Sonnet: 64000).
            (
                r#"{"model":{"name":"claude-sonnet-4-5","contextWindow":32768}}"#,
                38_064,
            ),
        ];
        for (text, tokens) in cases {
            let c = resolve_text(text).unwrap();
            let w = c.smallest_window_above(tokens);
            assert_eq!(w % 1000, 0, "{text}");
            let with_window = |w: u64| {
                let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
                v["model"]["contextWindow"] = w.into();
                v.to_string()
            };
            assert!(hard_at(with_window(w)) > tokens, "{text}: {w}");
            assert!(
                hard_at(with_window(w - 1000)) <= tokens,
                "{text}: {w} is not the smallest"
            );
        }
    }

    /// `--context-window 64000` for a model whose catalog output is 64000 (Claude Sonnet) was an
    /// invalid configuration: a default output that leaves the window no room is capped to a
    /// quarter of it; a given one is still refused.
    #[test]
    fn a_catalog_output_that_fills_a_window_of_64k_or_more_is_capped_to_a_quarter() {
        let c = resolve_text(r#"{"model":{"name":"claude-sonnet-4-5","contextWindow":64000}}"#)
            .unwrap();
        assert_eq!(c.model.max_output_tokens, 16_000);
        assert_eq!(c.limits().hard_limit, 64_000 - 16_000 - 8192);
        let given = resolve_text(
            r#"{"model":{"name":"claude-sonnet-4-5","contextWindow":64000,"maxOutputTokens":64000}}"#,
        );
        assert!(given.is_err());
        // A window the output leaves room in keeps the catalog's output.
        let roomy =
            resolve_text(r#"{"model":{"name":"claude-sonnet-4-5","contextWindow":200000}}"#)
                .unwrap();
        assert_eq!(roomy.model.max_output_tokens, 64_000);
    }

    /// Issue 38: a 16k window on the defaults had a hard limit of 16384 − 4096 − 8192 = 4096.
    #[test]
    fn below_64k_the_default_reserve_and_output_scale_with_the_window_and_from_64k_they_do_not() {
        let c = resolve_text(r#"{"model":{"name":"test","contextWindow":16384}}"#).unwrap();
        assert_eq!(
            c.compaction.safety_reserve_tokens, 2097,
            "8192 × 16384 / 64000"
        );
        assert_eq!(c.model.max_output_tokens, 4096, "a quarter of the window");
        assert_eq!(c.limits().hard_limit, 16384 - 4096 - 2097);
        let note = c.small_window.expect("scaled").note();
        assert_eq!(
            note,
            "window 16.4k is below 64.0k: safetyReserveTokens 2.1k (default 8.2k scaled to the window)"
        );
        // A catalog model given a small window: its output is capped to a quarter of it.
        let c = resolve_text(r#"{"model":{"name":"claude-sonnet-4-5","contextWindow":32000}}"#)
            .unwrap();
        assert_eq!(c.model.max_output_tokens, 8000);
        assert_eq!(c.compaction.safety_reserve_tokens, 4096);
        assert!(c
            .small_window
            .unwrap()
            .note()
            .contains("maxOutputTokens 8.0k"));
        // Values given in a layer stand as given.
        let c = resolve_text(
            r#"{"model":{"contextWindow":16384,"maxOutputTokens":6000},"compaction":{"safetyReserveTokens":1000}}"#,
        )
        .unwrap();
        assert_eq!(c.compaction.safety_reserve_tokens, 1000);
        assert_eq!(c.model.max_output_tokens, 6000);
        assert_eq!(c.small_window, None);
        // From 64000 up the spec's figures hold exactly.
        let c =
            resolve_text(r#"{"model":{"contextWindow":64000,"maxOutputTokens":8000}}"#).unwrap();
        assert_eq!(c.compaction.safety_reserve_tokens, 8192);
        assert_eq!(c.small_window, None);
        let c =
            resolve_text(r#"{"model":{"contextWindow":65000,"maxOutputTokens":8000}}"#).unwrap();
        assert_eq!(c.limits().hard_limit, 48808);
    }

    #[test]
    fn wrong_type_names_the_key() {
        let err = resolve_text(r#"{"compaction":{"auto":"yes"}}"#).unwrap_err();
        assert!(matches!(err, ConfigError::WrongType { .. }), "{err}");
        assert!(err.to_string().contains("`compaction.auto`"), "{err}");
        let err =
            resolve_text(r#"{"model":{"name":"x"},"compaction":{"keepRecentTokens":"lots"}}"#)
                .unwrap_err();
        assert!(
            err.to_string()
                .contains("`compaction.keepRecentTokens` has the wrong type"),
            "{err}"
        );
        let err = resolve_text(r#"{"compaction":7}"#).unwrap_err();
        assert!(err.to_string().contains("`compaction`"), "{err}");
    }

    #[test]
    fn layers_override_in_order() {
        let user = ConfigFile::parse(
            "user",
            r#"{"compaction":{"keepRecentTokens":10000,"timeoutMs":5000}}"#,
        )
        .unwrap();
        let ws = ConfigFile::parse("ws", r#"{"compaction":{"keepRecentTokens":12000}}"#).unwrap();
        let flags = Overrides {
            keep_recent_tokens: Some(9000),
            ..Default::default()
        };
        let c = Config::resolve(&[user.clone(), ws.clone()], None, &Overrides::default()).unwrap();
        assert_eq!(c.compaction.keep_recent_tokens, 12000);
        assert_eq!(c.compaction.timeout_ms, 5000);
        let c = Config::resolve(&[user, ws], None, &flags).unwrap();
        assert_eq!(c.compaction.keep_recent_tokens, 9000);
    }

    #[test]
    fn tool_mapping_is_configurable() {
        let c = resolve_text(
            r#"{"artifacts":{"read":{"open_file":"filename"},"write":{"Write":""},"shell":{"run":"script"}}}"#,
        )
        .unwrap();
        let m = &c.tool_mapping;
        assert_eq!(
            m.read.get("open_file").map(String::as_str),
            Some("filename")
        );
        assert_eq!(
            m.read.get("Read").map(String::as_str),
            Some("file_path"),
            "built-ins stay"
        );
        assert!(
            !m.write.contains_key("Write"),
            "an empty argument removes a built-in"
        );
        assert_eq!(m.shell.get("run").map(String::as_str), Some("script"));
        let err = resolve_text(r#"{"artifacts":{"reads":{}}}"#).unwrap_err();
        assert!(
            err.to_string().contains("did you mean `artifacts.read`"),
            "{err}"
        );
    }

    #[test]
    fn catalog_resolves_snapshots_and_prefixes() {
        assert_eq!(catalog_lookup("gpt-4o-2024-08-06").unwrap().name, "gpt-4o");
        assert_eq!(catalog_lookup("gpt-4o-mini").unwrap().name, "gpt-4o-mini");
        assert_eq!(
            catalog_lookup("claude-sonnet-4-5-20250929").unwrap().name,
            "claude-sonnet-4-5"
        );
        assert_eq!(
            catalog_lookup("anthropic/claude-opus-4-5").unwrap().name,
            "claude-opus-4-5"
        );
        assert_eq!(
            catalog_lookup("gpt-4").unwrap().tokenizer,
            TokenizerKind::Cl100kBase
        );
        assert!(catalog_lookup("my-local-llama").is_none());
    }

    #[test]
    fn session_model_is_used_and_flags_override_it() {
        let sm = ModelFile {
            name: Some("claude-sonnet-4-5".into()),
            ..Default::default()
        };
        let c = Config::resolve(&[], Some(&sm), &Overrides::default()).unwrap();
        assert_eq!(c.model.context_window, 200_000);
        let flags = Overrides {
            context_window: Some(65000),
            max_output_tokens: Some(8000),
            ..Default::default()
        };
        let c = Config::resolve(&[], Some(&sm), &flags).unwrap();
        assert_eq!(c.limits().hard_limit, 48808);
    }

    #[test]
    fn the_user_catalog_adds_models_and_overrides_built_in_ones() {
        let c = resolve_text(
            r#"{"models":{"my-model":{"contextWindow":65536,"maxOutputTokens":4096,"tokenizer":"cl100k_base","countFactor":1.1}},"model":{"name":"my-model-2025-01"}}"#,
        )
        .unwrap();
        assert_eq!(c.model.name, "my-model-2025-01");
        assert_eq!(c.model.context_window, 65536);
        assert_eq!(c.model.max_output_tokens, 4096);
        assert_eq!(c.model.tokenizer, TokenizerKind::Cl100kBase);
        assert_eq!(c.model.count_factor, 1.1);
        assert!(
            !c.model_guessed && c.warnings.is_empty(),
            "{:?}",
            c.warnings
        );

        let c = resolve_text(
            r#"{"models":{"gpt-4o":{"contextWindow":100000}},"model":{"name":"openai/gpt-4o"}}"#,
        )
        .unwrap();
        assert_eq!(c.model.context_window, 100_000, "the user's figures win");
        assert_eq!(c.model.max_output_tokens, 16_384);
        let small =
            resolve_text(r#"{"models":{"tiny":{"contextWindow":8192}},"model":{"name":"tiny"},"compaction":{"keepRecentTokens":1000,"safetyReserveTokens":1000}}"#)
                .unwrap();
        assert_eq!(
            small.model.max_output_tokens, 2048,
            "a quarter of a small window"
        );
    }

    #[test]
    fn a_later_layer_replaces_a_catalog_entry_and_a_session_model_uses_it() {
        let user =
            ConfigFile::parse("user", r#"{"models":{"m":{"contextWindow":50000}}}"#).unwrap();
        let extra =
            ConfigFile::parse("extra", r#"{"models":{"m":{"contextWindow":90000}}}"#).unwrap();
        let sm = ModelFile {
            name: Some("m".into()),
            ..Default::default()
        };
        let c = Config::resolve(&[user, extra], Some(&sm), &Overrides::default()).unwrap();
        assert_eq!(c.model.context_window, 90000);
    }

    #[test]
    fn an_unknown_model_warns_with_the_default_window_and_how_to_add_it() {
        let c = resolve_text(r#"{"model":{"name":"acme-coder-7"}}"#).unwrap();
        assert!(c.model_guessed);
        assert_eq!(c.model.context_window, default_model().context_window);
        assert_eq!(c.warnings.len(), 1);
        let w = &c.warnings[0];
        assert!(w.contains("\"acme-coder-7\""), "{w}");
        assert!(
            w.contains(&default_model().context_window.to_string()),
            "{w}"
        );
        assert!(w.contains("\"models\""), "{w}");
        assert!(w.contains("contextWindow"), "{w}");
        // A window given explicitly is no guess; no name at all is the documented default.
        let c = resolve_text(
            r#"{"model":{"name":"acme-coder-7","contextWindow":64000,"maxOutputTokens":4000}}"#,
        )
        .unwrap();
        assert!(!c.model_guessed && c.warnings.is_empty());
        let c = resolve_text("{}").unwrap();
        assert!(!c.model_guessed && c.warnings.is_empty());
    }

    #[test]
    fn bad_catalog_entries_name_the_key() {
        for (text, key) in [
            (
                r#"{"models":{"m":{"contextWindow":0}}}"#,
                "models.m.contextWindow",
            ),
            (
                r#"{"models":{"m":{"contextWindow":1000,"maxOutputTokens":1000}}}"#,
                "models.m.maxOutputTokens",
            ),
            (
                r#"{"models":{"m":{"contextWindow":1000,"countFactor":0.5}}}"#,
                "models.m.countFactor",
            ),
            (
                r#"{"models":{"m":{"contextWindow":"big"}}}"#,
                "models.m.contextWindow",
            ),
            (r#"{"models":{"m":{}}}"#, "models.m"),
        ] {
            let err = resolve_text(text).unwrap_err().to_string();
            assert!(err.contains(&format!("`{key}`")), "{text}: {err}");
        }
        let err = resolve_text(r#"{"models":{"m":{"contextWindows":1}}}"#).unwrap_err();
        assert!(
            err.to_string()
                .contains("did you mean `models.m.contextWindow`"),
            "{err}"
        );
    }

    #[test]
    fn session_settings_are_checked_like_a_config_file() {
        let err = session_layer(Some(serde_json::json!({"auto": "yes"})), None).unwrap_err();
        assert!(matches!(err, ConfigError::WrongType { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.starts_with("soba/session/open: `compaction.auto`"),
            "{msg}"
        );
        let err = session_layer(None, Some(serde_json::json!({"apiKey": "x"}))).unwrap_err();
        assert!(err.to_string().contains("`summarizer.apiKey`"), "{err}");
        assert!(
            err.to_string()
                .contains("did you mean `summarizer.apiKeyEnv`"),
            "{err}"
        );
        let err = session_layer(Some(serde_json::json!(5)), None).unwrap_err();
        assert!(err.to_string().contains("`compaction`"), "{err}");
        assert_eq!(session_layer(None, None).unwrap(), None);
    }
}
