//! `soba demo`: the real pipeline (session log, barrier, triggers, capsules) over a scripted
//! coding session, with a window small enough that every trigger fires.
//!
//! The driver acts like an agent host: it appends what the agent and the user do, runs the
//! preflight barrier before each inference, reports turn ends and checkpoints, and runs
//! `/compact` and the provider's context-overflow recovery through the barrier's own entry
//! points. Every outcome on the timeline is the engine's.

pub mod script;

use std::path::Path;

use crate::report::Timeline;
use soba_core::config::{Config, ConfigFile, Durability, Overrides};
use soba_core::session::entry::{
    ContentBlock, EntryBody, FileEntry, FileSource, HeaderTag, MessageEntry, Role, SessionHeader,
    SettingEntry, ToolResultEntry, LOG_FORMAT_VERSION,
};
use soba_core::session::log::SessionLog;

use crate::replay::host::{CapsuleWriter, Sent, SimulatedHost, Sink};
use script::Action;

/// The demo's configuration, shown in its header: a 24k window so a short session fills it.
pub const DEMO_CONFIG: &str = r#"{
  "model": { "name": "demo-24k", "contextWindow": 24000, "maxOutputTokens": 2000, "tokenizer": "o200k_base" },
  "compaction": {
    "safetyReserveTokens": 2048,
    "keepRecentTokens": 6000,
    "minTokensForAutoCompact": 4000,
    "minReclaimableTokens": 5000,
    "autoCompactThresholdRatio": 0.7
  }
}"#;

pub fn demo_config() -> Config {
    let file = ConfigFile::parse("demo", DEMO_CONFIG).expect("the demo config is valid");
    Config::resolve(&[file], None, &Overrides::default()).expect("the demo config resolves")
}

/// Why the demo could not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Log(#[from] soba_core::session::log::LogError),
    #[error("no model input could be sent at turn {turn}: {reason}")]
    Refused { turn: usize, reason: String },
}

/// Run the scripted session into a new log at `log_path`.
pub fn run<'a>(
    config: &'a Config,
    writer: CapsuleWriter<'a>,
    log_path: &Path,
    sink: Sink<'a>,
) -> Result<Timeline, DemoError> {
    let header = SessionHeader {
        kind: HeaderTag::Session,
        version: LOG_FORMAT_VERSION,
        id: soba_core::util::new_id("demo_"),
        workspace: "/work/tinyjson".into(),
        created_at: soba_core::util::now_rfc3339(),
        model: None,
        source: None,
    };
    let mut log = SessionLog::create(log_path, header, Durability::Flush)?;
    log.session_mut().configure_counting(&config.model);
    let mut host = SimulatedHost::new(
        log,
        config,
        "soba demo: fixing exponent parsing in a JSON library",
        writer,
        sink,
    );
    let mut call = 0usize;
    for action in script::script() {
        match action {
            Action::Setup {
                system_prompt,
                tool_schemas,
            } => {
                host.push(EntryBody::Setting(SettingEntry {
                    system_prompt: Some(system_prompt),
                    tool_schemas: Some(tool_schemas),
                    ..SettingEntry::default()
                }))?;
            }
            Action::User { text, screenshot } => {
                let mut content = vec![ContentBlock::text(text)];
                if screenshot {
                    content.push(ContentBlock::Image {
                        media_type: Some("image/png".into()),
                        data: Some("screenshot-ci-windows.png".into()),
                        extra: Default::default(),
                    });
                }
                host.push(message(Role::User, content))?;
            }
            Action::Tool {
                thought,
                name,
                input,
                output,
                exit_code,
            } => {
                infer(&mut host)?;
                call += 1;
                let call_id = format!("call_{call:02}");
                host.push(message(
                    Role::Assistant,
                    vec![
                        ContentBlock::text(thought),
                        ContentBlock::ToolCall {
                            id: call_id.clone(),
                            name: name.into(),
                            input: Box::new(input),
                            extra: Default::default(),
                        },
                    ],
                ))?;
                host.push(EntryBody::ToolResult(ToolResultEntry {
                    call_id,
                    tool_name: Some(name.into()),
                    content: vec![ContentBlock::text(output)],
                    is_error: exit_code.is_some_and(|c| c != 0),
                    exit_code,
                }))?;
            }
            Action::Answer(text) => {
                infer(&mut host)?;
                host.push(message(Role::Assistant, vec![ContentBlock::text(text)]))?;
            }
            Action::TurnComplete => {
                host.turn_complete(None)?;
            }
            Action::Checkpoint { kind, label } => {
                host.checkpoint(kind, &label)?;
            }
            Action::Compact {
                instructions,
                edited_during,
            } => {
                host.explicit_with(Some(instructions), |h| match edited_during {
                    // The editor's file watcher records the save while the capsule is written.
                    Some((path, op)) => h
                        .push(EntryBody::File(FileEntry {
                            path,
                            op,
                            source: FileSource::Watcher,
                        }))
                        .map(drop),
                    None => Ok(()),
                })?;
            }
            Action::ProviderOverflow => {
                // The request goes out and the provider answers "context length exceeded".
                infer(&mut host)?;
                host.overflow()?;
                // The next inference's preflight is the one retry.
            }
        }
    }
    let (timeline, mut log) = host.finish();
    log.sync()?;
    Ok(timeline)
}

fn message(role: Role, content: Vec<ContentBlock>) -> EntryBody {
    EntryBody::Message(MessageEntry {
        role,
        content,
        usage: None,
        model: None,
        synthetic: false,
    })
}

/// The preflight before an inference; the demo cannot go on without input.
fn infer(host: &mut SimulatedHost<'_>) -> Result<(), DemoError> {
    match host.preflight(None)? {
        Sent::Input { .. } => Ok(()),
        Sent::Nothing(r) => Err(DemoError::Refused {
            turn: host.turn(),
            reason: r.reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_too_small_for_the_agents_own_prompt_stops_the_demo_with_the_reason() {
        let f = ConfigFile::parse(
            "t",
            r#"{"model":{"name":"t","contextWindow":1200,"maxOutputTokens":200},
                "compaction":{"safetyReserveTokens":100,"keepRecentTokens":300,
                              "minTokensForAutoCompact":100,"minReclaimableTokens":100}}"#,
        )
        .unwrap();
        let config = Config::resolve(&[f], None, &Overrides::default()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let err = run(
            &config,
            CapsuleWriter::Local,
            &dir.path().join("s.jsonl"),
            Box::new(|_| {}),
        )
        .unwrap_err();
        let DemoError::Refused { turn, reason } = &err else {
            panic!("{err}")
        };
        assert_eq!(*turn, 1);
        assert!(reason.starts_with("context budget exceeded"), "{reason}");
        assert!(err
            .to_string()
            .starts_with("no model input could be sent at turn 1: "));
    }

    #[test]
    fn the_demo_config_is_the_documented_small_window() {
        let l = demo_config().limits();
        assert_eq!(
            (l.context_window, l.max_output_tokens, l.hard_limit),
            (24000, 2000, 19952)
        );
        assert_eq!(demo_config().compaction.keep_recent_tokens, 6000);
    }
}
