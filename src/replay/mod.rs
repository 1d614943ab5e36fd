//! `soba replay`: an imported transcript run through the agent loop as if SOBA had managed it.
//!
//! Entries are appended in order; before each assistant message (one inference) the host runs
//! the preflight barrier, which compacts per the configured policy; a new user prompt closes the
//! previous turn (`turn_complete`). The source agent's provider usage is kept off the replayed
//! log: it measured the source agent's input, not SOBA's, and is charted beside it instead. The
//! source agent's own compactions are recorded on the timeline where they happened; they do not
//! cut the replayed input (the view keeps the whole history), so SOBA's compactions are
//! compared with the agent's over the same history.

pub mod host;

use std::path::Path;

use crate::import::ImportResult;
use crate::report::Timeline;
use soba_core::config::{Config, Durability};
use soba_core::session::entry::{EntryBody, Role};
use soba_core::session::foreign::ForeignCompactions;
use soba_core::session::log::{LogError, SessionLog};
use soba_core::session::view::ModelMessage;

use host::{CapsuleWriter, Sent, SimulatedHost, Sink};

/// What a replay produced besides the log file.
#[derive(Debug, Clone, PartialEq)]
pub struct Replayed {
    pub timeline: Timeline,
    /// Preflights that handed out input.
    pub inputs: usize,
    /// Preflights where no input could be sent.
    pub refusals: usize,
}

/// Sees each model input handed out, with its effective tokens.
pub type InputObserver<'a> = Box<dyn FnMut(&[ModelMessage], u64) + 'a>;

/// Callbacks of a replay: every model input handed out, and progress over the entries.
pub struct Observers<'a> {
    pub sink: Sink<'a>,
    pub on_input: InputObserver<'a>,
    /// Entries done, entries in all.
    pub on_progress: Box<dyn FnMut(usize, usize) + 'a>,
}

impl Default for Observers<'_> {
    fn default() -> Self {
        Observers {
            sink: Box::new(|_| {}),
            on_input: Box::new(|_, _| {}),
            on_progress: Box::new(|_, _| {}),
        }
    }
}

/// Replay `import` into a new session log at `log_path`.
pub fn replay<'a>(
    import: ImportResult,
    config: &'a Config,
    writer: CapsuleWriter<'a>,
    log_path: &Path,
    observers: Observers<'a>,
) -> Result<Replayed, LogError> {
    let Observers {
        sink,
        mut on_input,
        mut on_progress,
    } = observers;
    let mut log = SessionLog::create(log_path, import.header.clone(), Durability::Flush)?;
    log.session_mut().configure_counting(&config.model);
    // The replay measures SOBA's own input; the report sets what the transcript does not hold
    // beside it, so no allowance for it is added here.
    log.session_mut().set_allow_for_unseen(false);
    // SOBA in the source agent's place: the agent's own compactions are marks on the
    // timeline, not cuts of the input SOBA would have sent.
    log.session_mut()
        .set_foreign_compactions(ForeignCompactions::WholeHistory);
    let title = match &import.header.source {
        Some(src) => format!("Replay of {} ({})", src.path, src.format),
        None => format!("Replay of session {}", import.header.id),
    };
    let source_agent = import.report.format.to_string();
    let mut host = SimulatedHost::new(log, config, &title, writer, sink);
    let total = import.entries.len();
    let mut last_imported: Option<String> = None;
    let mut inferences_in_turn = 0usize;
    let (mut inputs, mut refusals, mut images) = (0, 0, 0);
    for (n, mut entry) in import.entries.into_iter().enumerate() {
        images += image_blocks(&entry.body);
        match &mut entry.body {
            EntryBody::Message(m) if m.role == Role::Assistant => {
                let reported = m.usage.take().map(|u| u.prompt_tokens());
                match host.preflight(reported)? {
                    Sent::Input { messages, tokens } => {
                        inputs += 1;
                        on_input(&messages, tokens);
                    }
                    Sent::Nothing(_) => refusals += 1,
                }
                inferences_in_turn += 1;
            }
            EntryBody::Message(m) if m.role == Role::User && !m.synthetic => {
                if inferences_in_turn > 0 {
                    host.turn_complete(None)?;
                }
                inferences_in_turn = 0;
            }
            EntryBody::ForeignCompaction(f) => host.foreign(f),
            _ => {}
        }
        // Keep the transcript's chain on top of what SOBA appended since (capsules, records);
        // an entry that branches off an older one keeps its parent.
        let continues_chain = entry.parent_id.is_some() && entry.parent_id == last_imported;
        last_imported = Some(entry.id.clone());
        if continues_chain {
            entry.parent_id = host.log().session().leaf_id().map(str::to_string);
        }
        host.append(entry)?;
        on_progress(n + 1, total);
    }
    let (mut timeline, mut log) = host.finish();
    timeline.source_agent = Some(source_agent);
    timeline.images = images;
    log.sync()?;
    Ok(Replayed {
        timeline,
        inputs,
        refusals,
    })
}

/// Image blocks an entry carries (a message's or a tool result's).
fn image_blocks(body: &EntryBody) -> usize {
    use soba_core::session::entry::ContentBlock;
    let content = match body {
        EntryBody::Message(m) => &m.content,
        EntryBody::ToolResult(r) => &r.content,
        _ => return 0,
    };
    content
        .iter()
        .filter(|b| matches!(b, ContentBlock::Image { .. }))
        .count()
}

/// Tool calls and results that the input separates: a result with no call before it, or a call
/// whose result does not follow. Empty for a well-formed input.
pub fn split_tool_pairs(messages: &[ModelMessage]) -> Vec<String> {
    use soba_core::session::entry::ContentBlock;
    let mut problems = Vec::new();
    let mut open: Vec<String> = Vec::new();
    for m in messages {
        if let Some(id) = &m.tool_call_id {
            match open.iter().position(|c| c == id) {
                Some(i) => {
                    open.remove(i);
                }
                None => problems.push(format!("result {id} without its call before it")),
            }
            continue;
        }
        if !open.is_empty() {
            problems.extend(
                open.drain(..)
                    .map(|id| format!("call {id} not followed by its result")),
            );
        }
        for b in &m.content {
            if let ContentBlock::ToolCall { id, .. } = b {
                open.push(id.clone());
            }
        }
    }
    problems.extend(
        open.into_iter()
            .map(|id| format!("call {id} not followed by its result")),
    );
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use soba_core::config::{ConfigFile, Overrides};
    use soba_core::session::entry::{
        ContentBlock, Entry, ForeignCompactionEntry, MessageEntry, ToolResultEntry, Usage,
    };
    use soba_core::session::log::read_session;
    use soba_core::session::testing::header;

    fn config() -> Config {
        let f = ConfigFile::parse(
            "t",
            r#"{"model":{"name":"t","contextWindow":9000,"maxOutputTokens":1000},
                "compaction":{"safetyReserveTokens":1000,"keepRecentTokens":2000,
                              "minTokensForAutoCompact":1000,"minReclaimableTokens":1000}}"#,
        )
        .unwrap();
        Config::resolve(&[f], None, &Overrides::default()).unwrap()
    }

    fn msg(role: Role, content: Vec<ContentBlock>, usage: Option<Usage>) -> EntryBody {
        EntryBody::Message(MessageEntry {
            role,
            content,
            usage,
            model: None,
            synthetic: false,
        })
    }

    /// A transcript of `turns` turns, each a prompt, a file read of ~1500 tokens and an answer;
    /// the source agent reports usage and compacts once, halfway.
    fn transcript(turns: usize) -> ImportResult {
        let mut entries: Vec<Entry> = Vec::new();
        let mut push = |body: EntryBody| {
            let id = format!("e{}", entries.len() + 1);
            let parent = entries.last().map(|e: &Entry| e.id.clone());
            entries.push(Entry::new(id, parent, body));
        };
        for t in 0..turns {
            push(msg(
                Role::User,
                vec![ContentBlock::text(format!("step {t}: go on"))],
                None,
            ));
            let call = format!("c{t}");
            push(msg(
                Role::Assistant,
                vec![ContentBlock::ToolCall {
                    id: call.clone(),
                    name: "Read".into(),
                    input: Box::new(json!({"file_path": format!("/ws/f{t}.rs")})),
                    extra: Default::default(),
                }],
                Some(Usage {
                    input: 1000 * (t as u64 + 1),
                    ..Usage::default()
                }),
            ));
            push(EntryBody::ToolResult(ToolResultEntry {
                call_id: call,
                tool_name: Some("Read".into()),
                content: vec![ContentBlock::text(" fn x() {}".repeat(300))],
                is_error: false,
                exit_code: None,
            }));
            push(msg(Role::Assistant, vec![ContentBlock::text("done")], None));
            if t == turns / 2 {
                push(EntryBody::ForeignCompaction(Box::new(
                    ForeignCompactionEntry {
                        agent: "codex".into(),
                        trigger: Some("auto".into()),
                        tokens_before: Some(123_000),
                        summary: Some("summary".into()),
                        summary_tokens: Some(1),
                        first_kept_entry_id: None,
                        kept_items: Some(3),
                        kept_entry_ids: None,
                        instructions: None,
                    },
                )));
            }
        }
        ImportResult {
            header: header(),
            entries,
            report: crate::import::ImportReport {
                format: crate::import::Format::Codex,
                entries: 0,
                messages: Default::default(),
                tool_calls: 0,
                tool_results: 0,
                unmatched_calls: 0,
                orphan_results: 0,
                foreign_compactions: 1,
                corrupt_lines: Vec::new(),
                usage_records: 0,
                model: None,
                skipped_records: Default::default(),
                unknown_records: Default::default(),
                opaque_records: Default::default(),
            },
        }
    }

    #[test]
    fn the_replay_compacts_keeps_the_chain_on_its_capsules_and_never_sends_too_much() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let config = config();
        let hard = config.limits().hard_limit;
        let mut sizes = Vec::new();
        let observers = Observers {
            on_input: Box::new(|m: &[ModelMessage], tokens: u64| {
                assert!(split_tool_pairs(m).is_empty(), "{:?}", split_tool_pairs(m));
                sizes.push(tokens);
            }),
            ..Observers::default()
        };
        let r = replay(
            transcript(12),
            &config,
            CapsuleWriter::Local,
            &path,
            observers,
        )
        .unwrap();
        assert_eq!(r.inputs, 24, "a preflight before each assistant message");
        assert_eq!(r.refusals, 0);
        assert!(sizes.iter().all(|&t| t <= hard), "{sizes:?}");
        assert!(r
            .timeline
            .compactions
            .iter()
            .any(|c| c.result.outcome == soba_core::session::entry::Outcome::Completed));
        // The source agent's usage is charted, not used as SOBA's measure.
        assert_eq!(r.timeline.steps[0].source_agent_tokens, Some(1000));
        assert_eq!(r.timeline.steps[1].source_agent_tokens, None);
        assert!(r
            .timeline
            .steps
            .iter()
            .all(|s| s.source == soba_core::budget::MeasurementSource::Estimated));
        let f = &r.timeline.foreign_compactions;
        assert_eq!(f.len(), 1);
        // "By then" means recorded before it, not merely before the next inference.
        let before: Vec<_> = r.timeline.completed_before(&f[0]).collect();
        assert!(!before.is_empty());
        assert!(before.iter().all(|c| c.turn <= f[0].turn), "{before:?}");
        assert!(r.timeline.compactions[f[0].compactions_before..]
            .iter()
            .all(|c| c.turn >= f[0].turn));
        assert_eq!(
            (f[0].turn, f[0].tokens_before, f[0].kept_items),
            (7, Some(123_000), Some(3))
        );
        // The final branch runs through SOBA's latest capsule and holds every imported entry.
        let (s, _) = read_session(&path).unwrap();
        let leaf = s.leaf().unwrap();
        assert!(s.capsule_on_path(leaf).is_some());
        let on_branch: Vec<&str> = s
            .branch(leaf)
            .into_iter()
            .map(|i| s.entry(i).id.as_str())
            .collect();
        for n in 1..=49 {
            assert!(
                on_branch.contains(&format!("e{n}").as_str()),
                "e{n} on the final branch"
            );
        }
        assert!(s
            .entries()
            .iter()
            .all(|e| !matches!(&e.body, EntryBody::Message(m) if m.usage.is_some())));
    }

    #[test]
    fn a_transcript_entry_that_branches_off_keeps_its_parent() {
        let mut t = transcript(2);
        // The last answer is re-written from the tool result (a fork, as an edited message).
        let fork_parent = t.entries[2].id.clone();
        let n = t.entries.len();
        t.entries[n - 1].parent_id = Some(fork_parent.clone());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let config = config();
        replay(
            t,
            &config,
            CapsuleWriter::Local,
            &path,
            Observers::default(),
        )
        .unwrap();
        let (s, _) = read_session(&path).unwrap();
        let last = s.get(&format!("e{n}")).unwrap();
        assert_eq!(last.parent_id.as_deref(), Some(fork_parent.as_str()));
    }

    #[test]
    fn the_timeline_names_the_source_agent_and_counts_the_transcripts_images() {
        let mut t = transcript(2);
        if let EntryBody::Message(m) = &mut t.entries[0].body {
            m.content
                .push(ContentBlock::image(Some("image/png".into()), None));
        }
        if let EntryBody::ToolResult(r) = &mut t.entries[2].body {
            r.content
                .push(ContentBlock::image(Some("image/png".into()), None));
        }
        let dir = tempfile::tempdir().unwrap();
        let config = config();
        let r = replay(
            t,
            &config,
            CapsuleWriter::Local,
            &dir.path().join("r.jsonl"),
            Observers::default(),
        )
        .unwrap();
        assert_eq!(r.timeline.source_agent.as_deref(), Some("codex"));
        assert_eq!(r.timeline.images, 2);
        assert!(r
            .timeline
            .bottom_line_sentences()
            .iter()
            .any(|s| s.contains("2 images at a flat 1600 tokens each")));
    }

    #[test]
    fn split_tool_pairs_names_every_separation() {
        let m = |role: &str, call: Option<&str>, result_of: Option<&str>| ModelMessage {
            role: role.into(),
            content: call
                .map(|id| {
                    vec![ContentBlock::ToolCall {
                        id: id.into(),
                        name: "Bash".into(),
                        input: Box::new(json!({})),
                        extra: Default::default(),
                    }]
                })
                .unwrap_or_default(),
            tool_call_id: result_of.map(str::to_string),
            is_error: None,
            entry_id: None,
        };
        let ok = [
            m("user", None, None),
            m("assistant", Some("a"), None),
            m("tool", None, Some("a")),
        ];
        assert!(split_tool_pairs(&ok).is_empty());
        let orphan = [m("user", None, None), m("tool", None, Some("x"))];
        assert_eq!(
            split_tool_pairs(&orphan),
            ["result x without its call before it"]
        );
        let interleaved = [
            m("assistant", Some("a"), None),
            m("user", None, None),
            m("tool", None, Some("a")),
        ];
        assert_eq!(
            split_tool_pairs(&interleaved),
            [
                "call a not followed by its result",
                "result a without its call before it"
            ]
        );
        let dangling = [m("assistant", Some("a"), None)];
        assert_eq!(
            split_tool_pairs(&dangling),
            ["call a not followed by its result"]
        );
    }
}
