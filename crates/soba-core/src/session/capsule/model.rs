//! The Context Capsule: narrative state (goal, decisions, …) plus artifacts that are facts.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::session::trigger::Trigger;

/// How a capsule's narrative state was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Quality {
    /// Written by a summarization model and validated.
    Model,
    /// Built deterministically from the log because no summarization model is configured:
    /// the normal case without one, not a failure.
    Local,
    /// Built deterministically from the log in place of a configured model's summary, which
    /// failed, timed out, was refused by its circuit breaker or did not fit (the spec's
    /// fallback); `degradedReason` says which.
    Degraded,
}

impl Quality {
    pub fn as_str(self) -> &'static str {
        match self {
            Quality::Model => "model",
            Quality::Local => "local",
            Quality::Degraded => "degraded",
        }
    }

    /// Names as written in logs and `.capsule.md` files.
    pub const NAMES: [&'static str; 3] = ["model", "local", "degraded"];
}

/// Reasons that logs written before `local` existed gave a capsule built with no model
/// configured, calling it `degraded`.
const LEGACY_NO_MODEL_REASONS: [&str; 2] = [
    "no summarization model configured; built locally from the log",
    "no summarization model is configured",
];

/// The quality a capsule stored as `quality` with `degraded_reason` stands for, and the reason
/// that still applies. Logs and capsule files written before `local` existed call a capsule
/// built with no model configured `degraded`, with one of the no-model reasons or none: it
/// reads as `local`. A degraded capsule with any other reason was a fallback after a model
/// failed and stays degraded.
pub fn read_quality(
    quality: Quality,
    degraded_reason: Option<String>,
) -> (Quality, Option<String>) {
    let legacy_local = quality == Quality::Degraded
        && degraded_reason
            .as_deref()
            .is_none_or(|r| LEGACY_NO_MODEL_REASONS.contains(&r));
    if legacy_local {
        (Quality::Local, None)
    } else {
        (quality, degraded_reason)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// Produced by compaction of this session.
    Session,
    /// Loaded from a Portable Capsule (`.capsule.md`).
    Loaded,
}

/// The narrative part of a capsule: what a model may write.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapsuleState {
    #[serde(default)]
    pub goal: String,
    /// The user's requests, oldest first: recent ones verbatim, older ones by their opening.
    #[serde(default)]
    pub requests: Vec<String>,
    /// Rules the user stated (must, never, don't, always, only, avoid, …).
    #[serde(default)]
    pub constraints: Vec<String>,
    #[serde(default)]
    pub completed: Vec<String>,
    #[serde(default)]
    pub active: Vec<String>,
    #[serde(default)]
    pub pending: Vec<String>,
    #[serde(default)]
    pub decisions: Vec<Decision>,
    /// What the agent concluded about the system: a root cause, a hypothesis ruled out, how a
    /// part works, the options it laid before the user. Most of a debugging session's state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
    /// Errors met on the way and how each was fixed (an empty fix: not fixed yet).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ErrorFix>,
    /// What the agent was doing right before the cut: its last words quoted, then what it did
    /// after them, one line per action with the outcome its output shows (a failure quoted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub current_work: Vec<String>,
    #[serde(default)]
    pub blockers: Vec<String>,
    #[serde(default)]
    pub next_steps: Vec<String>,
    /// The latest exchanges, oldest first, quoted from the log: each user message (pastes
    /// described, long ones shortened with a marker) and the agent's last words in that turn.
    /// Where a summary would have to guess, the agent that continues reads what was said.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exchanges: Vec<Exchange>,
    /// The entries each item above came from, by the item's text (the goal's too): where a
    /// reader of the capsule can check it in the log.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Decision {
    pub decision: String,
    #[serde(default)]
    pub rationale: String,
}

/// One user turn, quoted: what the user wrote and the agent's last words in reply.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Exchange {
    pub user: String,
    /// The agent's last words in that turn; empty when it has said nothing yet.
    #[serde(default)]
    pub agent: String,
}

/// An error the work ran into and what fixed it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorFix {
    pub error: String,
    /// How it was fixed; empty while it is not.
    #[serde(default)]
    pub fix: String,
}

/// Facts taken from tool calls, file events and explicit reports, never from prose.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Artifacts {
    #[serde(default)]
    pub read_files: Vec<FileArtifact>,
    #[serde(default)]
    pub modified_files: Vec<FileArtifact>,
    #[serde(default)]
    pub verification: Vec<Verification>,
    #[serde(default)]
    pub active_skills: Vec<String>,
    /// Folders outside the workspace the session worked in (git worktrees it added, checkouts
    /// its commands ran in): edits there are listed under their absolute paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub work_trees: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FileArtifact {
    /// Relative to the workspace when inside it.
    pub path: String,
    /// Entries this fact came from.
    #[serde(default)]
    pub entry_ids: Vec<String>,
    /// A modified file that was deleted last (and not written again since).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// A modified file that got its name by a rename (`mv`, `git mv`, a patch's move).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renamed_from: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VerificationOutcome {
    Passed,
    Failed,
    /// The command ran but no result was recorded (interrupted, still running).
    Unknown,
}

impl VerificationOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            VerificationOutcome::Passed => "passed",
            VerificationOutcome::Failed => "failed",
            VerificationOutcome::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    pub command: String,
    pub outcome: VerificationOutcome,
    /// The entry holding the call of its last run.
    pub entry_id: String,
    /// Files were modified after its last run: its outcome may no longer hold.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub edited_since: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleTokens {
    /// Effective tokens before the compaction.
    pub before: u64,
    /// Effective tokens of the continuation (capsule + retained tail + overhead).
    pub after: u64,
    /// Set when the retained tail is smaller than keepRecentTokens: a mandatory compaction cut
    /// into it to fit the limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_tail: Option<ShortTail>,
}

/// A retained tail kept below keepRecentTokens, and the limits it was cut to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShortTail {
    /// Tokens of the retained tail as sent (after elision).
    pub retained_tail_tokens: u64,
    /// The configured keepRecentTokens.
    pub keep_recent_tokens: u64,
    /// The context window the limits used: the configured one, or one a provider's overflow
    /// lowered (then `learnedFrom` says how).
    pub context_window: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learned_from: Option<crate::window::WindowSource>,
    pub hard_limit: u64,
}

/// A `capsule` entry of the session log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleEntry {
    /// `ck_…`
    pub checkpoint_id: String,
    pub trigger: Trigger,
    pub quality: Quality,
    /// First entry kept verbatim after the capsule; `None` when nothing is kept.
    #[serde(default)]
    pub first_kept_entry_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_checkpoint_id: Option<String>,
    pub state: CapsuleState,
    pub artifacts: Artifacts,
    pub tokens: CapsuleTokens,
    pub origin: Origin,
    #[serde(default)]
    pub mirrored: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Why a configured model's summary was not used (timeout, invalid response, …): set on
    /// `degraded` capsules only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded_reason: Option<String>,
    /// Custom instructions of an explicit `/compact`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// Tool results in the retained tail larger than this many tokens are elided in the model
    /// input (head and tail kept, with a marker); the log keeps them whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elide_tool_results_over: Option<u64>,
    /// Where a loaded capsule came from (workspace, session, checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_from: Option<LoadedFrom>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoadedFrom {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_id: Option<String>,
    /// When the capsule was first written, as its file said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
}
