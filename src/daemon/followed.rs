//! A followed agent as it sees itself: the model it runs (from its transcript, else its
//! settings' default, else not known yet), the threshold at which it compacts its own context,
//! and its own latest compaction. SOBA's limits stay SOBA's: for a session SOBA only follows,
//! the agent's threshold is the one that says whether the session is healthy.

use schemars::JsonSchema;
use serde::Serialize;

use soba_core::session::entry::EntryKind;
use soba_core::session::Session;
use soba_core::util::human_tokens;

use crate::attach::agent_settings::AgentSettings;
use crate::attach::discover::Agent;

/// Claude Code keeps room for the summary its compaction writes: its usable window is the
/// context window less the model's output tokens, capped at this.
pub const CLAUDE_CODE_OUTPUT_RESERVE_CAP: u64 = 20_000;
/// Claude Code compacts itself this far below its usable window.
pub const CLAUDE_CODE_AUTOCOMPACT_BUFFER: u64 = 13_000;
/// pi compacts when its context passes the window less `compaction.reserveTokens`, by default
/// this many.
pub const PI_DEFAULT_RESERVE_TOKENS: u64 = 16_384;

/// The followed agent, as it sees itself; in `soba/budget` as `followed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FollowedAgent {
    /// The agent's model: named by its transcript, or by its settings until the transcript does;
    /// absent while neither names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub model_source: ModelSource,
    /// The settings file that names the model, for `modelSource: settings`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settings_file: Option<String>,
    /// Tokens at which the agent compacts its own context: the limit that says whether the
    /// session is healthy. Absent while the model is not known, or when the agent does not
    /// compact by itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compacts_at: Option<u64>,
    /// How `compactsAt` follows from the agent's own rule and settings, in words.
    pub compacts_at_basis: String,
    /// One line for a tooltip: `Claude Code compacts at ~167.0k; SOBA's hard limit 127.8k`,
    /// or `model not known yet: …`.
    pub text: String,
    /// The agent's own latest compaction on the active branch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_compaction: Option<AgentCompaction>,
    /// Settings files that exist but were not read, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// Where the followed agent's model comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelSource {
    /// The transcript named it (the agent's responses say which model wrote them).
    Transcript,
    /// The agent's settings file names it as the default; no response has named one yet.
    Settings,
    /// Neither: the limits SOBA shows are not the agent's until its first response.
    Unknown,
}

/// One of the agent's own compactions (Claude Code's `compact_boundary`, Codex `compacted`, a pi
/// compaction entry), as the session log holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentCompaction {
    /// The `foreign_compaction` entry.
    pub entry_id: String,
    pub ts: String,
    /// `auto`, `manual`, or what the agent said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// The context size the agent reported when it compacted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens_before: Option<u64>,
    /// The agent's summary, counted with the session's tokenizer: what its context starts from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_tokens: Option<u64>,
}

/// The threshold at which `agent` compacts itself, and how it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Threshold {
    pub tokens: Option<u64>,
    pub basis: String,
}

/// `agent`'s own compaction threshold for a model of `context_window` tokens that writes at
/// most `max_output_tokens`, under the agent's `settings`.
pub fn agent_threshold(
    agent: Agent,
    context_window: u64,
    max_output_tokens: u64,
    settings: &AgentSettings,
) -> Threshold {
    let window = human_tokens(context_window);
    match agent {
        Agent::ClaudeCode => {
            let reserve = max_output_tokens.min(CLAUDE_CODE_OUTPUT_RESERVE_CAP);
            Threshold {
                tokens: Some(
                    context_window.saturating_sub(reserve + CLAUDE_CODE_AUTOCOMPACT_BUFFER),
                ),
                basis: format!(
                    "Claude Code auto-compacts {} below its usable window ({window} less {} kept for output)",
                    human_tokens(CLAUDE_CODE_AUTOCOMPACT_BUFFER),
                    human_tokens(reserve)
                ),
            }
        }
        Agent::Codex => {
            let default = context_window * 9 / 10;
            match settings.auto_compact_token_limit.filter(|l| *l > 0) {
                Some(limit) if limit < default => Threshold {
                    tokens: Some(limit),
                    basis:
                        "Codex auto-compacts at model_auto_compact_token_limit in its config.toml"
                            .into(),
                },
                _ => Threshold {
                    tokens: Some(default),
                    basis: format!("Codex auto-compacts at 90% of its {window} window"),
                },
            }
        }
        Agent::Pi => {
            if settings.auto_compact_enabled == Some(false) {
                return Threshold {
                    tokens: None,
                    basis: "pi does not compact by itself (compaction.enabled is false in its settings)".into(),
                };
            }
            let (reserve, from) = match settings.reserve_tokens {
                Some(r) => (r, "compaction.reserveTokens in its settings"),
                None => (PI_DEFAULT_RESERVE_TOKENS, "its default reserve"),
            };
            Threshold {
                tokens: Some(context_window.saturating_sub(reserve)),
                basis: format!(
                    "pi auto-compacts {} below its {window} window ({from})",
                    human_tokens(reserve)
                ),
            }
        }
    }
}

/// What is known of a followed agent at one moment.
pub struct Observed<'a> {
    pub agent: Agent,
    pub settings: &'a AgentSettings,
    /// The model the session log names (from the transcript), if any.
    pub transcript_model: Option<&'a str>,
    /// Whether SOBA's limits are the settings' default model's (it resolved that model).
    pub settings_model_in_use: bool,
    /// SOBA's limits, in force for the model above.
    pub context_window: u64,
    pub max_output_tokens: u64,
    pub hard_limit: u64,
}

/// The followed agent's view of itself, from what is observed and the session log.
pub fn followed_agent(observed: &Observed, session: &Session) -> FollowedAgent {
    let name = display_name(observed.agent);
    let settings_model = observed
        .settings
        .default_model
        .as_ref()
        .filter(|_| observed.settings_model_in_use);
    let (model, source, file) = match (observed.transcript_model, settings_model) {
        (Some(m), _) => (Some(m.to_string()), ModelSource::Transcript, None),
        (None, Some(d)) => (
            Some(d.name.clone()),
            ModelSource::Settings,
            Some(d.file.display().to_string()),
        ),
        (None, None) => (None, ModelSource::Unknown, None),
    };
    let soba = format!("SOBA's hard limit {}", human_tokens(observed.hard_limit));
    let (threshold, text) = match source {
        ModelSource::Unknown => {
            let unresolved = observed
                .settings
                .default_model
                .as_ref()
                .map(|d| {
                    format!(
                        " ({} names {}, a model SOBA's catalog does not know)",
                        d.file.display(),
                        d.name
                    )
                })
                .unwrap_or_default();
            (
                Threshold {
                    tokens: None,
                    basis: format!("{name}'s threshold depends on its model"),
                },
                format!(
                    "model not known yet: {name}'s first response names it{unresolved}; no limits are shown until then"
                ),
            )
        }
        _ => {
            let t = agent_threshold(
                observed.agent,
                observed.context_window,
                observed.max_output_tokens,
                observed.settings,
            );
            let model = model.as_deref().unwrap_or_default();
            let whose = match &file {
                Some(f) => format!("{model}, {name}'s default in {f}"),
                None => model.to_string(),
            };
            let text = match t.tokens {
                Some(at) => {
                    format!("{name} compacts at ~{} ({whose}); {soba}", human_tokens(at))
                }
                None => format!("{name} does not compact by itself ({whose}); {soba}"),
            };
            (t, text)
        }
    };
    FollowedAgent {
        model,
        model_source: source,
        settings_file: file,
        compacts_at: threshold.tokens,
        compacts_at_basis: threshold.basis,
        text,
        last_compaction: last_agent_compaction(session),
        problems: observed.settings.problems.clone(),
    }
}

/// The latest of the agent's own compactions on the active branch.
pub fn last_agent_compaction(session: &Session) -> Option<AgentCompaction> {
    let leaf = session.leaf()?;
    session
        .indices_of(EntryKind::ForeignCompaction)
        .rev()
        .find(|&i| i == leaf || session.is_ancestor(i, leaf))
        .and_then(|i| {
            let entry = session.entry(i);
            let soba_core::session::entry::EntryBody::ForeignCompaction(f) = &entry.body else {
                return None;
            };
            Some(AgentCompaction {
                entry_id: entry.id.clone(),
                ts: entry.ts.clone(),
                trigger: f.trigger.clone(),
                tokens_before: f.tokens_before,
                summary_tokens: f.summary_tokens,
            })
        })
}

pub fn display_name(agent: Agent) -> &'static str {
    match agent {
        Agent::ClaudeCode => "Claude Code",
        Agent::Codex => "Codex",
        Agent::Pi => "pi",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_code_compacts_thirteen_thousand_below_its_window_less_the_output_reserve() {
        let t = agent_threshold(
            Agent::ClaudeCode,
            200_000,
            64_000,
            &AgentSettings::default(),
        );
        assert_eq!(t.tokens, Some(167_000));
        // A model that writes less than the cap keeps only what it writes.
        let small = agent_threshold(Agent::ClaudeCode, 200_000, 8_192, &AgentSettings::default());
        assert_eq!(small.tokens, Some(200_000 - 8_192 - 13_000));
    }

    #[test]
    fn codex_compacts_at_ninety_percent_unless_its_config_sets_lower() {
        let default = agent_threshold(Agent::Codex, 272_000, 128_000, &AgentSettings::default());
        assert_eq!(default.tokens, Some(244_800));
        let lower = AgentSettings {
            auto_compact_token_limit: Some(150_000),
            ..AgentSettings::default()
        };
        let t = agent_threshold(Agent::Codex, 272_000, 128_000, &lower);
        assert_eq!(t.tokens, Some(150_000));
        assert!(t.basis.contains("model_auto_compact_token_limit"));
        // A configured limit can only lower Codex's threshold.
        let higher = AgentSettings {
            auto_compact_token_limit: Some(400_000),
            ..AgentSettings::default()
        };
        assert_eq!(
            agent_threshold(Agent::Codex, 272_000, 128_000, &higher).tokens,
            Some(244_800)
        );
    }

    #[test]
    fn pi_compacts_its_reserve_below_the_window_or_not_at_all_when_turned_off() {
        let default = agent_threshold(Agent::Pi, 200_000, 32_000, &AgentSettings::default());
        assert_eq!(default.tokens, Some(200_000 - PI_DEFAULT_RESERVE_TOKENS));
        let reserve = AgentSettings {
            reserve_tokens: Some(50_000),
            ..AgentSettings::default()
        };
        assert_eq!(
            agent_threshold(Agent::Pi, 200_000, 32_000, &reserve).tokens,
            Some(150_000)
        );
        let off = AgentSettings {
            auto_compact_enabled: Some(false),
            ..AgentSettings::default()
        };
        let t = agent_threshold(Agent::Pi, 200_000, 32_000, &off);
        assert_eq!(t.tokens, None);
        assert!(t.basis.contains("does not compact by itself"));
    }
}
