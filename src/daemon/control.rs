//! Who compacts a session, in the words every editor shows.
//!
//! A session an agent talks to (`soba/session/open` and `soba/preflight`: the SDKs, the proxy,
//! the pi extension's sessions) takes SOBA's capsule at its next inference. A transcript SOBA
//! follows belongs to an agent that compacts itself: appending a capsule to SOBA's copy would
//! change nothing the agent sends, and its next usage report would undo the figure. So the
//! daemon refuses those actions there ([`super::protocol::code::AGENT_COMPACTS`]) and offers
//! `soba/preview` instead; the editors read the sentences below and show no logic of their own.

use super::protocol::{CompactedBy, Control};
use crate::attach::discover::Agent;
use crate::attach::integration::Integration;

impl Control {
    /// An agent takes its model input from SOBA.
    pub fn driven() -> Control {
        Control {
            compacted_by: CompactedBy::Soba,
            agent: None,
            integration: None,
            note: "SOBA compacts this session before the agent's next response.".into(),
            actions: "Compact, capsule load and rewind change the model input of the agent's next response.".into(),
        }
    }

    /// SOBA follows `agent`'s transcript; `integration` is how the agent's own compactions
    /// reach SOBA, when installed.
    pub fn followed(agent: Agent, integration: Option<Integration>) -> Control {
        let name = display_name(agent);
        let note = match integration {
            Some(Integration::ClaudeCodeHook) => format!(
                "{name} compacts this session itself; SOBA follows it, and SOBA's hook adds its capsule after each of {name}'s compactions."
            ),
            Some(Integration::PiExtension) => format!(
                "{name} compacts this session itself; SOBA follows it, and the SOBA pi extension makes each of {name}'s compactions SOBA's."
            ),
            None => format!("{name} compacts this session itself; SOBA follows it."),
        };
        let how = match (agent, integration) {
            (Agent::ClaudeCode, Some(_)) => {
                "Run /compact in Claude Code: SOBA's hook adds SOBA's capsule to the new context.".to_string()
            }
            (Agent::ClaudeCode, None) => {
                "Run /compact in Claude Code; `soba hook install claude-code` adds SOBA's capsule after each of its compactions.".to_string()
            }
            (Agent::Pi, Some(_)) => {
                "Run /compact in pi: the SOBA pi extension makes it SOBA's compaction.".to_string()
            }
            (Agent::Pi, None) => {
                "Run /compact in pi; the SOBA pi extension (editors/pi) makes pi's compactions SOBA's.".to_string()
            }
            (Agent::Codex, _) => "Run /compact in Codex.".to_string(),
        };
        Control {
            compacted_by: CompactedBy::Agent,
            agent: Some(agent.as_str().to_string()),
            integration,
            note,
            actions: format!(
                "SOBA cannot change what {name} sends: compact, capsule load and rewind show what SOBA would send, as a preview. {how}"
            ),
        }
    }

    /// The error for an action that would change a followed session's model input.
    pub fn refusal(&self, action: &str) -> Option<super::protocol::RpcError> {
        (self.compacted_by == CompactedBy::Agent).then(|| {
            super::protocol::RpcError::new(
                super::protocol::code::AGENT_COMPACTS,
                format!(
                    "{action} was not applied: {} {} (soba/preview)",
                    self.note, self.actions
                ),
            )
        })
    }
}

fn display_name(agent: Agent) -> &'static str {
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
    fn a_driven_session_is_compacted_by_soba_and_refuses_nothing() {
        let c = Control::driven();
        assert_eq!(c.compacted_by, CompactedBy::Soba);
        assert!(c.note.contains("SOBA compacts this session before"));
        assert!(c.refusal("compact").is_none());
    }

    #[test]
    fn a_followed_session_names_the_agent_that_compacts_and_how_soba_reaches_it() {
        let plain = Control::followed(Agent::ClaudeCode, None);
        assert_eq!(
            plain.note,
            "Claude Code compacts this session itself; SOBA follows it."
        );
        assert!(plain.actions.contains("soba hook install claude-code"));
        let hooked = Control::followed(Agent::ClaudeCode, Some(Integration::ClaudeCodeHook));
        assert!(hooked.note.contains("SOBA's hook adds its capsule"));
        assert!(!hooked.actions.contains("soba hook install"));
        let pi = Control::followed(Agent::Pi, Some(Integration::PiExtension));
        assert!(pi.actions.contains("Run /compact in pi"));
        let err = Control::followed(Agent::Codex, None)
            .refusal("soba/rewind")
            .expect("a followed session refuses");
        assert_eq!(err.code, super::super::protocol::code::AGENT_COMPACTS);
        assert!(err
            .message
            .starts_with("soba/rewind was not applied: Codex compacts"));
    }
}
