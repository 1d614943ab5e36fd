//! Small builders of sessions and logs, for the tests of this crate and (with the
//! `test-support` feature) of the crates built on it.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::capsule::model::*;
use super::entry::*;
use super::log::SessionLog;
use super::trigger::Trigger;
use super::Session;
use crate::config::Durability;
use crate::tokens::TokenizerKind;

/// A user message entry `id` under `parent`.
pub fn user_message(id: &str, parent: Option<&str>, text: &str) -> Entry {
    Entry::new(id, parent.map(str::to_string), user_text(text))
}

fn user_text(text: &str) -> EntryBody {
    EntryBody::Message(MessageEntry {
        role: Role::User,
        content: vec![ContentBlock::text(text)],
        usage: None,
        model: None,
        synthetic: false,
    })
}

pub fn header() -> SessionHeader {
    SessionHeader {
        kind: HeaderTag::Session,
        version: LOG_FORMAT_VERSION,
        id: "s1".into(),
        workspace: "/ws".into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        model: None,
        source: None,
    }
}

/// A session built one entry at a time, each under the last, with ids `e1`, `e2`, ….
pub struct Builder {
    pub session: Session,
    n: usize,
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    pub fn new() -> Self {
        Builder {
            session: Session::new(header(), TokenizerKind::O200kBase),
            n: 0,
        }
    }

    pub fn push(&mut self, body: EntryBody) -> String {
        self.n += 1;
        let id = format!("e{}", self.n);
        let parent = self.session.leaf_id().map(str::to_string);
        self.session
            .push(Entry::new(id.clone(), parent, body))
            .unwrap();
        id
    }

    pub fn user(&mut self, text: &str) -> String {
        self.push(user_text(text))
    }

    pub fn assistant(&mut self, text: &str) -> String {
        self.push(EntryBody::Message(MessageEntry {
            role: Role::Assistant,
            content: vec![ContentBlock::text(text)],
            usage: None,
            model: None,
            synthetic: false,
        }))
    }

    pub fn call(&mut self, call_id: &str, name: &str, input: serde_json::Value) -> String {
        self.push(EntryBody::Message(MessageEntry {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolCall {
                id: call_id.into(),
                name: name.into(),
                input: Box::new(input),
                extra: Default::default(),
            }],
            usage: None,
            model: None,
            synthetic: false,
        }))
    }

    pub fn result(&mut self, call_id: &str, text: &str) -> String {
        self.push(EntryBody::ToolResult(ToolResultEntry {
            call_id: call_id.into(),
            tool_name: None,
            content: vec![ContentBlock::text(text)],
            is_error: false,
            exit_code: None,
        }))
    }

    pub fn bash(&mut self, call_id: &str, command: &str) -> String {
        self.call(call_id, "Bash", json!({ "command": command }))
    }
}

/// A log at `dir/s.jsonl` holding `session`'s entries.
pub fn written_log(dir: &Path, session: &Session) -> PathBuf {
    let p = dir.join("s.jsonl");
    let mut log = SessionLog::create(&p, header(), Durability::Flush).unwrap();
    log.append_all(session.entries().to_vec()).unwrap();
    p
}

/// A long session as `soba budget` meets it: turns of calls and results, provider usage
/// on every reply, a capsule part-way. Returns the builder and the entries of its current
/// turn (from the last user message on).
pub fn long_session_with_usage() -> (crate::session::testing::Builder, usize) {
    let mut b = crate::session::testing::Builder::new();
    let reply = |b: &mut crate::session::testing::Builder, text: &str, prompt: u64| {
        b.push(EntryBody::Message(MessageEntry {
            role: Role::Assistant,
            content: vec![ContentBlock::text(text)],
            usage: Some(Usage {
                input: prompt,
                output: 50,
                ..Usage::default()
            }),
            model: None,
            synthetic: false,
        }))
    };
    for i in 0..60u64 {
        b.user(&format!("question {i}"));
        b.bash(&format!("c{i}"), "cargo test");
        b.result(&format!("c{i}"), &"test result ok. ".repeat(8));
        reply(&mut b, &format!("answer {i}"), 1_000 + 300 * i);
        if i == 30 {
            let kept = b.user("the tail starts here");
            let mut cap = full_capsule();
            cap.first_kept_entry_id = Some(kept);
            b.push(EntryBody::Capsule(Box::new(cap)));
        }
    }
    let turn_start = b.session.len();
    b.user("the current turn");
    b.bash("last", "ls");
    let turn = b.session.len() - turn_start;
    (b, turn)
}

/// `", "` between members and `": "` after keys, as Python's `json.dumps` writes.
pub struct SpacedFormatter;

impl serde_json::ser::Formatter for SpacedFormatter {
    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
}

pub fn full_capsule() -> CapsuleEntry {
    CapsuleEntry {
        checkpoint_id: "ck_0123456789ab".into(),
        trigger: Trigger::AutoThreshold,
        quality: Quality::Local,
        first_kept_entry_id: Some("e42".into()),
        previous_checkpoint_id: Some("ck_ba9876543210".into()),
        state: CapsuleState {
            goal: "Fix the flaky login test in auth/session.rs without changing the public API."
                .into(),
            requests: vec![
                "Fix the flaky login test".into(),
                "keep the API stable\nand add no new dependencies".into(),
            ],
            constraints: vec![
                "keep the API stable".into(),
                "no new dependencies\nand no unsafe".into(),
            ],
            completed: vec![
                "reproduced the failure".into(),
                "`cargo test` passes".into(),
            ],
            active: vec!["make the session clock injectable".into()],
            pending: vec!["add a regression test".into()],
            decisions: vec![
                Decision {
                    decision: "inject a Clock trait".into(),
                    rationale: "tests need a fixed time".into(),
                },
                Decision {
                    decision: "keep the cookie format".into(),
                    rationale: String::new(),
                },
            ],
            blockers: vec!["`cargo test -p auth` fails: assertion failed: expired".into()],
            next_steps: vec!["Make `cargo test -p auth` pass".into()],
            sources: Default::default(),
            ..Default::default()
        },
        artifacts: Artifacts {
            read_files: vec![FileArtifact {
                path: "src/auth/session.rs".into(),
                entry_ids: vec!["e3".into()],
                ..Default::default()
            }],
            modified_files: vec![FileArtifact {
                path: "src/auth/clock.rs".into(),
                entry_ids: vec!["e9".into()],
                ..Default::default()
            }],
            verification: vec![Verification {
                command: "cargo test -p auth".into(),
                outcome: VerificationOutcome::Failed,
                entry_id: "e11".into(),
                edited_since: false,
            }],
            active_skills: vec!["rust-testing".into()],
            work_trees: Vec::new(),
        },
        tokens: CapsuleTokens {
            before: 41000,
            after: 18000,
            short_tail: None,
        },
        origin: Origin::Session,
        mirrored: false,
        title: Some("auth clock".into()),
        degraded_reason: None,
        instructions: Some("keep the clock design details".into()),
        elide_tool_results_over: None,
        loaded_from: None,
    }
}
