//! `soba replay`: an imported transcript run through the agent loop as if SOBA had managed it.
//!
//! Entries are appended in order; before each assistant message (one inference) the host runs
//! the preflight barrier, which compacts per the configured policy; a new user prompt closes the
//! previous turn (`turn_complete`). The source agent's provider usage is kept off the replayed
//! log: it measured the source agent's input, not SOBA's, and is charted beside it instead. The
//! source agent's own compactions are recorded on the timeline where they happened.

pub mod host;

use std::path::Path;

use crate::config::{Config, Durability};
use crate::import::ImportResult;
use crate::report::{ForeignMark, Timeline};
use crate::session::entry::{EntryBody, Role};
use crate::session::log::{LogError, SessionLog};
use crate::session::view::ModelMessage;

use host::{Sent, Sink, SimulatedHost};

/// What a replay produced besides the log file.
#[derive(Debug, Clone, PartialEq)]
pub struct Replayed {
    pub timeline: Timeline,
    /// Preflights that handed out input.
    pub inputs: usize,
    /// Preflights where no input could be sent.
    pub refusals: usize,
}

/// Callbacks of a replay: every model input handed out, and progress over the entries.
pub struct Observers<'a> {
    pub sink: Sink<'a>,
    pub on_input: Box<dyn FnMut(&[ModelMessage], u64) + 'a>,
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
pub fn replay(
    import: ImportResult,
    config: &Config,
    log_path: &Path,
    observers: Observers<'_>,
) -> Result<Replayed, LogError> {
    let Observers {
        sink,
        mut on_input,
        mut on_progress,
    } = observers;
    let mut log = SessionLog::create(log_path, import.header.clone(), Durability::Flush)?;
    log.session_mut().set_tokenizer(config.model.tokenizer);
    let title = match &import.header.source {
        Some(src) => format!("Replay of {} ({})", src.path, src.format),
        None => format!("Replay of session {}", import.header.id),
    };
    let mut host = SimulatedHost::new(log, config, &title, sink);
    let total = import.entries.len();
    let mut last_imported: Option<String> = None;
    let mut inferences_in_turn = 0usize;
    let (mut inputs, mut refusals) = (0, 0);
    for (n, mut entry) in import.entries.into_iter().enumerate() {
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
            EntryBody::ForeignCompaction(f) => {
                let f = f.clone();
                host.foreign(|step, turn, soba_tokens| ForeignMark {
                    step,
                    turn,
                    agent: f.agent,
                    trigger: f.trigger,
                    tokens_before: f.tokens_before,
                    summary_tokens: f.summary_tokens,
                    kept_items: f.kept_items,
                    first_kept_entry_id: f.first_kept_entry_id,
                    soba_tokens,
                });
            }
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
    let (timeline, mut log) = host.finish();
    log.sync()?;
    Ok(Replayed {
        timeline,
        inputs,
        refusals,
    })
}

/// Tool calls and results that the input separates: a result with no call before it, or a call
/// whose result does not follow. Empty for a well-formed input.
pub fn split_tool_pairs(messages: &[ModelMessage]) -> Vec<String> {
    use crate::session::entry::ContentBlock;
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
