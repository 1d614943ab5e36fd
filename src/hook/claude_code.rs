//! Claude Code's hook protocol: the JSON it writes on a command hook's stdin, and SOBA's answer.
//!
//! `SessionStart` with source `compact` fires right after Claude Code compacted the
//! conversation; SOBA answers with its own capsule of the transcript up to that compaction
//! (`hookSpecificOutput.additionalContext`), so the files, verification state, blockers and
//! requests Claude Code's summary drops come back. `PreCompact` fires just before; SOBA records
//! its trigger and the user's instructions, which then focus that capsule.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::import::ImportResult;
use soba_core::capsule::builder::trim_state;
use soba_core::compaction::plan::{plan, PlanRequest};
use soba_core::config::Config;
use soba_core::session::capsule::model::CapsuleEntry;
use soba_core::session::capsule::model::Quality;
use soba_core::session::capsule::render::{render_followed_by, Followed};
use soba_core::session::entry::EntryBody;
use soba_core::session::trigger::Trigger;
use soba_core::session::Session;

/// The capsule comes after Claude Code's own compaction: its summary and the messages after it
/// are in the context, not SOBA's retained tail.
const AFTER_CLAUDE_CODE: Followed = Followed::ByAgentSummary {
    agent: "Claude Code",
};

/// Longest `additionalContext` SOBA hands back. Claude Code caps hook output added to the
/// context at 10,000 characters and replaces longer output with a notice; this leaves room.
pub const MAX_CONTEXT_CHARS: usize = 9_000;

/// The fields of Claude Code's hook input SOBA reads; the others are ignored.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct HookInput {
    pub session_id: String,
    pub transcript_path: String,
    #[serde(default)]
    pub cwd: Option<String>,
    pub hook_event_name: String,
    /// `SessionStart`: `startup`, `resume`, `clear` or `compact`.
    #[serde(default)]
    pub source: Option<String>,
    /// `PreCompact`: `manual` or `auto`.
    #[serde(default)]
    pub trigger: Option<String>,
    /// `PreCompact`: what the user typed after `/compact` (empty for `auto`).
    #[serde(default)]
    pub custom_instructions: Option<String>,
}

/// What a hook invocation asks of SOBA.
#[derive(Debug, Clone, PartialEq)]
pub enum HookAction {
    /// Answer with SOBA's capsule of the transcript up to its latest compaction.
    CapsuleAfterCompaction,
    /// Record that Claude Code is about to compact, why, and with which instructions.
    RecordPreCompact {
        trigger: String,
        instructions: Option<String>,
    },
    /// An event SOBA has nothing to do for (another `SessionStart` source, another event).
    Nothing,
}

/// Read the hook input. The error says what was wrong, for the one stderr line.
pub fn parse_input(text: &str) -> Result<HookInput, String> {
    if text.trim().is_empty() {
        return Err("no hook input on stdin (Claude Code writes a JSON object there)".into());
    }
    serde_json::from_str(text).map_err(|e| format!("the hook input is not Claude Code's: {e}"))
}

impl HookInput {
    pub fn action(&self) -> HookAction {
        match self.hook_event_name.as_str() {
            "SessionStart" if self.source.as_deref() == Some("compact") => {
                HookAction::CapsuleAfterCompaction
            }
            "PreCompact" => HookAction::RecordPreCompact {
                trigger: self.trigger.clone().unwrap_or_else(|| "unknown".into()),
                instructions: self
                    .custom_instructions
                    .as_deref()
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            },
            _ => HookAction::Nothing,
        }
    }

    /// The id of the SOBA session that mirrors this Claude Code session. Only characters safe
    /// in a file name: the id comes from the payload.
    pub fn soba_session_id(&self) -> String {
        let safe: String = self
            .session_id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .take(80)
            .collect();
        format!("claude-code-{safe}")
    }
}

/// The hook's answer for `SessionStart`: context Claude Code adds to the conversation.
pub fn session_start_output(additional_context: &str) -> Value {
    json!({
        "hookSpecificOutput": {
            "hookEventName": "SessionStart",
            "additionalContext": additional_context,
        }
    })
}

/// A session holding the imported transcript, loaded as far as its entries form a tree.
pub fn session_of(imported: &ImportResult, config: &Config) -> Session {
    let mut session = Session::new(imported.header.clone(), config.model.tokenizer);
    for e in &imported.entries {
        // The importer writes a valid tree; an entry that does not load is left out, the
        // rest still makes a capsule.
        let _ = session.push(e.clone());
    }
    session
}

/// Index of the last entry before the latest compaction Claude Code recorded; the session's
/// leaf when there is none (the transcript was read before the boundary was written).
pub fn compaction_point(session: &Session) -> Option<usize> {
    let latest = (0..session.len())
        .rev()
        .find(|&i| matches!(session.entry(i).body, EntryBody::ForeignCompaction(_)));
    match latest {
        Some(i) => session.parent_of(i),
        None => session.leaf(),
    }
}

/// SOBA's capsule of `session` up to `leaf`, built locally from the log, as the Markdown the
/// model reads, at most `max_chars` long. `None` when there is nothing to summarize.
pub fn capsule_text(
    session: &Session,
    leaf: Option<usize>,
    config: &Config,
    instructions: Option<String>,
    max_chars: usize,
) -> Option<String> {
    let req = PlanRequest {
        trigger: Trigger::Handoff,
        requested: false,
        instructions,
        title: Some("Before Claude Code's compaction".into()),
        config,
        mapping: &config.tool_mapping,
        operation_id: soba_core::util::new_id("op_"),
    };
    let plan = plan(session, leaf, &req).ok()?;
    if plan.summarized_entry_ids.is_empty() {
        return None;
    }
    let capsule = |state| -> CapsuleEntry {
        plan.capsule(soba_core::util::new_id("ck_"), state, Quality::Local, None)
    };
    let full = render_followed_by(&capsule(plan.local_state.clone()), AFTER_CLAUDE_CODE);
    let text = if full.len() <= max_chars {
        full
    } else {
        render_followed_by(
            &capsule(trim_state(plan.local_state.clone())),
            AFTER_CLAUDE_CODE,
        )
    };
    let text = soba_core::redact::redact(&text).into_owned();
    Some(fit(&text, max_chars))
}

/// `text` cut to at most `max_chars` characters at a line end, with a closing marker.
fn fit(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_string();
    }
    const MARK: &str = "\n[… capsule cut to fit Claude Code's hook output limit]";
    let room = max_chars.saturating_sub(MARK.chars().count());
    let end = text.char_indices().nth(room).map_or(text.len(), |(i, _)| i);
    let head = &text[..end];
    let head = head.rfind('\n').map_or(head, |i| &head[..i]);
    format!("{head}{MARK}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(v: Value) -> HookInput {
        parse_input(&v.to_string()).unwrap()
    }

    #[test]
    fn session_start_after_compact_asks_for_the_capsule_and_other_sources_for_nothing() {
        let base = json!({"session_id": "abc", "transcript_path": "/t.jsonl", "cwd": "/ws",
                          "hook_event_name": "SessionStart", "source": "compact"});
        assert_eq!(
            input(base.clone()).action(),
            HookAction::CapsuleAfterCompaction
        );
        for source in ["startup", "resume", "clear"] {
            let mut v = base.clone();
            v["source"] = json!(source);
            assert_eq!(input(v).action(), HookAction::Nothing, "{source}");
        }
        let mut other = base;
        other["hook_event_name"] = json!("Stop");
        assert_eq!(input(other).action(), HookAction::Nothing);
    }

    #[test]
    fn pre_compact_keeps_trigger_and_instructions_and_drops_empty_ones() {
        let v = json!({"session_id": "abc", "transcript_path": "/t.jsonl",
                       "hook_event_name": "PreCompact", "trigger": "manual",
                       "custom_instructions": "  keep the auth work  "});
        assert_eq!(
            input(v).action(),
            HookAction::RecordPreCompact {
                trigger: "manual".into(),
                instructions: Some("keep the auth work".into())
            }
        );
        let auto = json!({"session_id": "abc", "transcript_path": "/t.jsonl",
                          "hook_event_name": "PreCompact", "trigger": "auto",
                          "custom_instructions": ""});
        assert_eq!(
            input(auto).action(),
            HookAction::RecordPreCompact {
                trigger: "auto".into(),
                instructions: None
            }
        );
    }

    #[test]
    fn bad_hook_input_is_refused_with_a_reason() {
        assert!(parse_input("").unwrap_err().contains("no hook input"));
        assert!(parse_input("{not json")
            .unwrap_err()
            .contains("not Claude Code's"));
        assert!(parse_input(r#"{"hook_event_name":"PreCompact"}"#)
            .unwrap_err()
            .contains("session_id"));
    }

    #[test]
    fn the_session_id_from_the_payload_cannot_name_another_file() {
        let v = json!({"session_id": "../../etc/passwd", "transcript_path": "/t",
                       "hook_event_name": "PreCompact"});
        assert_eq!(input(v).soba_session_id(), "claude-code-etcpasswd");
    }

    /// What follows the capsule here is Claude Code's summary and the messages after its
    /// compaction, not a retained tail of SOBA's: the capsule's opening says so.
    #[test]
    fn the_capsule_says_claude_code_compacted_and_what_it_was_built_from() {
        let mut b = soba_core::session::testing::Builder::new();
        b.user("Fix the login bug in src/auth.rs; keep the cookie format");
        b.assistant("I'll start with the session check.");
        b.user("Also add a test for expired sessions");
        b.assistant("Done: the check and the test.");
        let config = Config::default();
        let text = capsule_text(
            &b.session,
            b.session.leaf(),
            &config,
            None,
            MAX_CONTEXT_CHARS,
        )
        .expect("a capsule");
        let mut lines = text.lines();
        assert!(
            lines.next().unwrap().starts_with("# Context Capsule ck_"),
            "{text}"
        );
        assert_eq!(
            lines.next().unwrap(),
            "Claude Code compacted this conversation into its own summary. This capsule is \
             SOBA's record of the conversation up to that compaction, built from the full \
             transcript: what the summary may have dropped (files read and modified, \
             verification, blockers, the user's requests). Where the two differ about that \
             history, trust this capsule; Claude Code's summary and the messages after the \
             compaction are the more recent context."
        );
        assert_eq!(lines.next(), Some("Title: Before Claude Code's compaction"));
        assert!(!text.contains("verbatim"), "{text}");
        assert!(
            text.contains("Also add a test for expired sessions"),
            "{text}"
        );
    }

    #[test]
    fn long_text_is_cut_at_a_line_end_within_the_limit() {
        let text = "line one\n".repeat(2000);
        let cut = fit(&text, 1000);
        assert!(cut.chars().count() <= 1000);
        assert!(cut.ends_with("hook output limit]"));
        assert!(cut.contains("line one\n["));
        assert_eq!(fit("short", 1000), "short");
    }
}
