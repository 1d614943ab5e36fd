//! Rewind: the model input after rewinding to entry X equals the model input captured when
//! the leaf was X; the abandoned branch (capsules included) stays out of the new branch's
//! input; nothing is deleted.

use crate::common;

use std::path::Path;

use serde_json::Value;
use soba::import::transcript::import_str;
use soba::import::ImportOptions;
use soba_core::capsule::handoff::list_capsules;
use soba_core::config::Durability;
use soba_core::session::capsule::model::Artifacts;
use soba_core::session::capsule::model::CapsuleEntry;
use soba_core::session::capsule::model::CapsuleState;
use soba_core::session::capsule::model::CapsuleTokens;
use soba_core::session::capsule::model::Origin;
use soba_core::session::capsule::model::Quality;
use soba_core::session::entry::{
    ContentBlock, Entry, EntryBody, HeaderTag, MessageEntry, Role, SessionHeader, ToolResultEntry,
    LOG_FORMAT_VERSION,
};
use soba_core::session::log::{read_session, SessionLog};
use soba_core::session::rewind::rewind_session;
use soba_core::session::trigger::Trigger;
use soba_core::session::view::{ModelMessage, ModelView};

fn header(id: &str) -> SessionHeader {
    SessionHeader {
        kind: HeaderTag::Session,
        version: LOG_FORMAT_VERSION,
        id: id.into(),
        workspace: "/ws".into(),
        created_at: "2026-01-01T00:00:00Z".into(),
        model: None,
        source: None,
    }
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

fn text(role: Role, t: &str) -> EntryBody {
    message(role, vec![ContentBlock::text(t)])
}

fn capsule(checkpoint: &str, first_kept: Option<&str>) -> EntryBody {
    EntryBody::Capsule(Box::new(CapsuleEntry {
        checkpoint_id: checkpoint.into(),
        trigger: Trigger::User,
        quality: Quality::Model,
        first_kept_entry_id: first_kept.map(str::to_string),
        previous_checkpoint_id: None,
        state: CapsuleState {
            goal: format!("goal of {checkpoint}"),
            ..Default::default()
        },
        artifacts: Artifacts::default(),
        tokens: CapsuleTokens {
            before: 1000,
            after: 100,
            short_tail: None,
        },
        origin: Origin::Session,
        mirrored: false,
        title: None,
        degraded_reason: None,
        instructions: None,
        elide_tool_results_over: None,
        loaded_from: None,
    }))
}

/// A log on disk that appends after its leaf and can capture the model input.
struct Log {
    log: SessionLog,
    _dir: tempfile::TempDir,
}

impl Log {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = SessionLog::create(&dir.path().join("s.jsonl"), header("s1"), Durability::Flush)
            .unwrap();
        Log { log, _dir: dir }
    }

    fn add(&mut self, id: &str, body: EntryBody) -> String {
        let parent = self.log.session().leaf_id().map(str::to_string);
        self.log.append(Entry::new(id, parent, body)).unwrap();
        id.to_string()
    }

    fn input(&self) -> Vec<ModelMessage> {
        let s = self.log.session();
        ModelView::build(s, s.leaf()).messages(s)
    }
}

fn capsule_messages(messages: &[ModelMessage]) -> usize {
    messages
        .iter()
        .filter(|m| {
            m.entry_id.is_none()
                && soba_core::session::entry::blocks_text(&m.content)
                    .starts_with("# Context Capsule")
        })
        .count()
}

#[test]
fn rewind_to_before_a_capsule_restores_the_input_of_that_point() {
    let mut l = Log::new();
    l.add("u1", text(Role::User, "start"));
    l.add("a1", text(Role::Assistant, "ok"));
    let at_a1 = l.input();
    l.add("u2", text(Role::User, "keep this"));
    l.add("a2", text(Role::Assistant, "kept"));
    l.add("c1", capsule("ck_1", Some("u2")));
    l.add("u3", text(Role::User, "after the capsule"));
    let before_rewind = l.input();
    assert_eq!(capsule_messages(&before_rewind), 1);

    let r = rewind_session(&mut l.log, "a1").unwrap();
    assert_eq!(
        (r.from.as_deref(), r.to.as_str(), r.messages),
        (Some("u3"), "a1", 2)
    );
    assert_eq!(l.input(), at_a1);

    // The new branch grows from a1; the abandoned capsule does not come back.
    l.add("u4", text(Role::User, "a different direction"));
    let input = l.input();
    assert_eq!(capsule_messages(&input), 0);
    assert_eq!(&input[..2], &at_a1[..]);
    assert_eq!(input[2].entry_id.as_deref(), Some("u4"));
    let rows = list_capsules(l.log.session());
    assert_eq!(rows.len(), 1);
    assert!(!rows[0].on_branch && !rows[0].current);
}

#[test]
fn rewind_to_the_capsule_entry_keeps_the_capsule() {
    let mut l = Log::new();
    l.add("u1", text(Role::User, "start"));
    l.add("a1", text(Role::Assistant, "ok"));
    l.add("c1", capsule("ck_1", Some("a1")));
    let at_capsule = l.input();
    l.add("u2", text(Role::User, "more"));
    l.add("c2", capsule("ck_2", None));
    l.add("u3", text(Role::User, "even more"));
    rewind_session(&mut l.log, "c1").unwrap();
    assert_eq!(l.input(), at_capsule);
    let rows = list_capsules(l.log.session());
    let current: Vec<&str> = rows
        .iter()
        .filter(|r| r.current)
        .map(|r| r.checkpoint_id.as_str())
        .collect();
    assert_eq!(current, vec!["ck_1"]);
}

#[test]
fn rewind_keeps_an_interrupted_call_as_it_was() {
    let mut l = Log::new();
    l.add("u1", text(Role::User, "list files"));
    l.add(
        "a1",
        message(
            Role::Assistant,
            vec![ContentBlock::ToolCall {
                id: "c1".into(),
                name: "ls".into(),
                input: Box::new(Value::Null),
                extra: Default::default(),
            }],
        ),
    );
    let at_call = l.input();
    assert_eq!(
        at_call.len(),
        3,
        "the call gets a synthetic interrupted result"
    );
    l.add(
        "r1",
        EntryBody::ToolResult(ToolResultEntry {
            call_id: "c1".into(),
            tool_name: None,
            content: vec![ContentBlock::text("a b")],
            is_error: false,
            exit_code: None,
        }),
    );
    rewind_session(&mut l.log, "a1").unwrap();
    assert_eq!(l.input(), at_call);
}

#[test]
fn rewind_refuses_an_unknown_entry_and_appends_nothing() {
    let mut l = Log::new();
    l.add("entry-one", text(Role::User, "start"));
    let err = rewind_session(&mut l.log, "entry-onf")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no entry `entry-onf`") && err.contains("Did you mean `entry-one`?"),
        "{err}"
    );
    assert_eq!(l.log.session().len(), 1);
}

#[test]
fn rewind_is_an_appended_entry_and_survives_reopening() {
    let mut l = Log::new();
    l.add("u1", text(Role::User, "one"));
    l.add("u2", text(Role::User, "two"));
    let r = rewind_session(&mut l.log, "u1").unwrap();
    let path = l.log.path().to_path_buf();
    let leaf_before = l.log.session().leaf_id().map(str::to_string);
    drop(l.log);
    let (s, report) = read_session(&path).unwrap();
    assert!(report.skipped.is_empty());
    assert_eq!(s.len(), 3, "u1, u2 and the rewind entry are all kept");
    assert_eq!(s.leaf_id().map(str::to_string), leaf_before);
    assert_eq!(s.leaf_id(), Some("u1"));
    assert!(
        matches!(&s.get(&r.rewind_entry_id).unwrap().body, EntryBody::Rewind(x) if x.to == "u1")
    );
    assert_eq!(
        s.get(&r.rewind_entry_id).unwrap().parent_id.as_deref(),
        Some("u2")
    );
}

// ---------------------------------------------------------------------------------------
// Real transcripts, imported with `soba import`'s reader: every entry is appended in order,
// one capsule is injected halfway (on the path of everything after it), and the model input
// is captured at a spread of leaves.

struct Replay {
    log: Log,
    /// (leaf id, model input captured when it was the leaf)
    captured: Vec<(String, Vec<ModelMessage>)>,
    /// Leaf whose captured input precedes the injected capsule.
    before_capsule: String,
    capsule_entry: String,
}

fn replay(path: &Path) -> Replay {
    let text = std::fs::read_to_string(path).unwrap();
    let options = ImportOptions {
        source_path: path.display().to_string(),
        default_workspace: "/ws".into(),
        default_session_id: "replay".into(),
        now: "2026-01-01T00:00:00Z".into(),
    };
    let imported = import_str(&text, None, &options).unwrap();
    let entries = imported.entries;
    let every = (entries.len() / 12).max(1);
    let inject_after = entries.len() / 2;
    let mut l = Log::new();
    let mut captured = Vec::new();
    let mut before_capsule = String::new();
    let mut capsule_entry = String::new();
    let capture = |l: &Log| (l.log.session().leaf_id().unwrap().to_string(), l.input());
    for (n, mut entry) in entries.into_iter().enumerate() {
        // Children of the injection point hang below the capsule instead.
        if !before_capsule.is_empty() && entry.parent_id.as_deref() == Some(before_capsule.as_str())
        {
            entry.parent_id = Some(capsule_entry.clone());
        }
        l.log.append(entry).unwrap();
        if (n + 1) % every == 0 {
            captured.push(capture(&l));
        }
        if n + 1 == inject_after {
            let s = l.log.session();
            let leaf = s.leaf().unwrap();
            before_capsule = s.entry(leaf).id.clone();
            captured.push(capture(&l));
            // Keep the last few entries of the branch verbatim after the capsule.
            let branch = s.branch(leaf);
            let first_kept = s.entry(branch[branch.len().saturating_sub(6)]).id.clone();
            capsule_entry = format!("capsule-{before_capsule}");
            let body = capsule("ck_replay", Some(&first_kept));
            l.add(&capsule_entry.clone(), body);
            captured.push(capture(&l));
        }
    }
    captured.push(capture(&l));
    Replay {
        log: l,
        captured,
        before_capsule,
        capsule_entry,
    }
}

#[test]
fn rewind_reproduces_the_captured_input_over_real_transcripts() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let mut replayed = 0;
    for format in ["claude-code", "codex", "pi", "openai-chat"] {
        for file in std::fs::read_dir(dir.join(format)).unwrap() {
            let path = file.unwrap().path();
            let name = path.display().to_string();
            let Replay {
                log: mut l,
                captured,
                before_capsule,
                capsule_entry,
            } = replay(&path);
            let entries_before = l.log.session().len();
            assert!(
                captured.len() >= 10,
                "{name}: {} capture points",
                captured.len()
            );
            assert!(
                captured
                    .iter()
                    .any(|(_, input)| capsule_messages(input) == 1),
                "{name}: the injected capsule never opened the input"
            );
            // Rewind newest first, then oldest first: every target reproduces its input
            // exactly, whatever the leaf was before.
            let order: Vec<&(String, Vec<ModelMessage>)> =
                captured.iter().rev().chain(captured.iter()).collect();
            for (id, input) in order {
                rewind_session(&mut l.log, id).unwrap();
                let now = l.input();
                assert_eq!(now.len(), input.len(), "{name}: rewind to {id}");
                assert!(
                    now == *input,
                    "{name}: model input after rewinding to {id} differs from the captured one"
                );
            }
            // Rewound to before the capsule, the new branch carries no capsule of that branch.
            rewind_session(&mut l.log, &before_capsule).unwrap();
            l.add(
                "new-direction",
                text(Role::User, "let's try something else"),
            );
            let s = l.log.session();
            assert!(!s.is_ancestor(s.index_of(&capsule_entry).unwrap(), s.leaf().unwrap()));
            let view = ModelView::build(s, s.leaf());
            assert_ne!(
                view.capsule,
                s.index_of(&capsule_entry),
                "{name}: the abandoned capsule entered the input"
            );
            // Nothing was deleted: every entry is still in the log on disk.
            let path = l.log.path().to_path_buf();
            let expected = s.len();
            assert_eq!(expected, entries_before + 2 * captured.len() + 2);
            drop(l.log);
            let (reread, report) = read_session(&path).unwrap();
            assert!(report.skipped.is_empty(), "{name}: {:?}", report.skipped);
            assert_eq!(reread.len(), expected);
            assert_eq!(reread.leaf_id(), Some("new-direction"));
            replayed += 1;
        }
    }
    assert_eq!(replayed, 9, "every fixture transcript is replayed");
}
