//! Rewind: the model input after rewinding to entry X equals the model input captured when
//! the leaf was X; the abandoned branch (capsules included) stays out of the new branch's
//! input; nothing is deleted.

mod common;

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;
use soba::capsule::{Artifacts, CapsuleEntry, CapsuleState, CapsuleTokens, Origin, Quality};
use soba::cli::capsule::{list_capsules, rewind_session};
use soba::config::Durability;
use soba::session::entry::{
    ContentBlock, Entry, EntryBody, HeaderTag, MessageEntry, Role, SessionHeader, ToolResultEntry,
    Trigger, LOG_FORMAT_VERSION,
};
use soba::session::log::{read_session, SessionLog};
use soba::session::view::{ModelMessage, ModelView};

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
                && soba::session::entry::blocks_text(&m.content).starts_with("# Context Capsule")
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
                input: Value::Null,
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
// Real transcripts: pi sessions already form a tree (id / parentId); their `message`
// records become SOBA entries directly. Other records (model changes, pi's own compactions,
// bash executions) are left out and their children attach to the nearest kept ancestor.

fn pi_blocks(content: &Value) -> Vec<ContentBlock> {
    match content {
        Value::String(s) => vec![ContentBlock::text(s.clone())],
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| {
                let s = |k: &str| {
                    b.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                match b.get("type").and_then(Value::as_str)? {
                    "text" => Some(ContentBlock::Text { text: s("text") }),
                    "thinking" => Some(ContentBlock::Thinking {
                        thinking: s("thinking"),
                    }),
                    "toolCall" => Some(ContentBlock::ToolCall {
                        id: s("id"),
                        name: s("name"),
                        input: b.get("arguments").cloned().unwrap_or(Value::Null),
                    }),
                    "image" => Some(ContentBlock::Image {
                        media_type: Some(s("mimeType")),
                        data: Some(s("data")),
                    }),
                    _ => None,
                }
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn pi_body(record: &Value) -> Option<EntryBody> {
    let content = pi_blocks(record.get("content").unwrap_or(&Value::Null));
    match record.get("role")?.as_str()? {
        "user" => Some(message(Role::User, content)),
        "assistant" => Some(message(Role::Assistant, content)),
        "toolResult" => Some(EntryBody::ToolResult(ToolResultEntry {
            call_id: record.get("toolCallId")?.as_str()?.to_string(),
            tool_name: record
                .get("toolName")
                .and_then(Value::as_str)
                .map(str::to_string),
            content,
            is_error: record
                .get("isError")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            exit_code: None,
        })),
        _ => None,
    }
}

struct Replay {
    log: Log,
    /// (entry id, model input captured when it was the leaf)
    captured: Vec<(String, Vec<ModelMessage>)>,
    /// Entry whose captured input precedes the injected capsule.
    before_capsule: String,
    capsule_entry: String,
}

/// Append the pi session's messages in file order, inject one capsule halfway (on the path
/// of everything after it), and capture the model input at a spread of leaves.
fn replay(path: &Path) -> Replay {
    let text = std::fs::read_to_string(path).unwrap();
    let records: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let messages = records
        .iter()
        .filter(|r| r.get("type").and_then(Value::as_str) == Some("message"))
        .count();
    let inject_after = messages / 2;
    let mut l = Log::new();
    // pi id → the SOBA entry a child of it attaches to.
    let mut attach: HashMap<String, Option<String>> = HashMap::new();
    let mut appended = 0usize;
    let mut captured = Vec::new();
    let mut before_capsule = String::new();
    let mut capsule_entry = String::new();
    for r in &records {
        let Some(id) = r.get("id").and_then(Value::as_str) else {
            continue;
        };
        let parent = r
            .get("parentId")
            .and_then(Value::as_str)
            .and_then(|p| attach.get(p).cloned().flatten());
        let body = (r.get("type").and_then(Value::as_str) == Some("message"))
            .then(|| r.get("message").and_then(pi_body))
            .flatten();
        let Some(body) = body else {
            attach.insert(id.to_string(), parent);
            continue;
        };
        l.log.append(Entry::new(id, parent, body)).unwrap();
        attach.insert(id.to_string(), Some(id.to_string()));
        appended += 1;
        if appended.is_multiple_of(97) {
            captured.push((id.to_string(), l.input()));
        }
        if appended == inject_after {
            before_capsule = id.to_string();
            captured.push((id.to_string(), l.input()));
            // Keep the last few entries of the branch verbatim after the capsule.
            let s = l.log.session();
            let branch = s.branch(s.leaf().unwrap());
            let first_kept = s.entry(branch[branch.len().saturating_sub(6)]).id.clone();
            capsule_entry = format!("capsule-{id}");
            l.log
                .append(Entry::new(
                    capsule_entry.clone(),
                    Some(id.to_string()),
                    capsule("ck_replay", Some(&first_kept)),
                ))
                .unwrap();
            attach.insert(id.to_string(), Some(capsule_entry.clone()));
            captured.push((capsule_entry.clone(), l.input()));
        }
    }
    assert!(
        appended > 500,
        "{}: only {appended} messages replayed",
        path.display()
    );
    captured.push((l.log.session().leaf_id().unwrap().to_string(), l.input()));
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
    for name in [
        "pi/pi-mono-large-session.jsonl",
        "pi/pi-mono-two-compactions.jsonl",
    ] {
        let Replay {
            log: mut l,
            captured,
            before_capsule,
            capsule_entry,
        } = replay(&dir.join(name));
        let entries_before = l.log.session().len();
        assert!(
            captured.len() >= 10,
            "{name}: {} capture points",
            captured.len()
        );
        let last_input = &captured.last().unwrap().1;
        assert_eq!(
            capsule_messages(last_input),
            1,
            "{name}: the injected capsule opens the final input"
        );
        assert!(
            last_input.len() > 6,
            "{name}: the input after the capsule holds the kept tail and new entries"
        );
        // Rewind newest first, then oldest first: every target reproduces its input exactly,
        // whatever the leaf was before.
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
        // Rewound to before the capsule, the new branch carries no capsule.
        rewind_session(&mut l.log, &before_capsule).unwrap();
        assert_eq!(capsule_messages(&l.input()), 0, "{name}");
        l.add(
            "new-direction",
            text(Role::User, "let's try something else"),
        );
        let s = l.log.session();
        let view = ModelView::build(s, s.leaf());
        assert_eq!(
            view.capsule, None,
            "{name}: the abandoned branch's capsule entered the input"
        );
        assert!(!s.is_ancestor(s.index_of(&capsule_entry).unwrap(), s.leaf().unwrap()));
        // Nothing was deleted: every entry is still in the log on disk.
        let path = l.log.path().to_path_buf();
        let expected = l.log.session().len();
        assert_eq!(expected, entries_before + 2 * captured.len() + 2);
        drop(l.log);
        let (reread, report) = read_session(&path).unwrap();
        assert!(report.skipped.is_empty(), "{name}: {:?}", report.skipped);
        assert_eq!(reread.len(), expected);
        assert_eq!(reread.leaf_id(), Some("new-direction"));
    }
}
