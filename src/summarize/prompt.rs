//! The summarization prompt and its sizing: rendering the history as text, eliding long tool
//! outputs middle-out, and cutting the history into chunks that each fit the summarizer's
//! window. Pure: no I/O, token counts from the o200k encoding.

use soba_core::session::capsule::model::Artifacts;
use soba_core::session::capsule::model::CapsuleState;
use soba_core::session::capsule::model::FileArtifact;
use soba_core::session::entry::{blocks_text, ContentBlock};
use soba_core::session::view::ModelMessage;
use soba_core::tokens::{TokenizerKind, MESSAGE_OVERHEAD_TOKENS};

/// Encoding used to size requests. Exact for OpenAI models; for others (Claude, Llama, …) it
/// is the same estimate the budget uses, which is why [`WINDOW_RESERVE_RATIO`] is kept free.
pub const SIZING_TOKENIZER: TokenizerKind = TokenizerKind::O200kBase;
/// A tool result longer than this is elided middle-out before it reaches the prompt: its head
/// and tail carry the command and the verdict, the middle is mostly noise.
pub const MAX_TOOL_OUTPUT_TOKENS: u64 = 1000;
/// Tool-call arguments longer than this are elided (file contents passed to write tools).
pub const MAX_TOOL_INPUT_TOKENS: u64 = 300;
/// The least history a chunk must be able to carry; below it the window is too small.
pub const MIN_HISTORY_TOKENS: u64 = 128;
/// Share of the input window left unused, because the summarizer's own tokenizer may count
/// more tokens than o200k does.
pub const WINDOW_RESERVE_RATIO: f64 = 0.05;
/// Tokens of the reply primer every chat request carries.
const REPLY_PRIMER_TOKENS: u64 = 3;
const SEPARATOR: &str = "\n\n";

pub const SYSTEM_PROMPT: &str = "\
You write the Context Capsule of a coding-agent session: the working state the agent needs to \
continue after the history you are shown is removed from its context. The agent will see only \
the capsule, the recorded facts and its most recent messages, so write what it must know to take \
the next step correctly, not a story of the session.

First think in an <analysis>…</analysis> block if it helps: go through the history in order and \
note each request of the user, what was done, the errors met and how they were fixed, and what \
was learned about the system. The analysis is discarded. Then write one JSON object, with nothing \
after it. Its keys:
- goal (string, required, non-empty): what the user wants done now, in one or two sentences of \
your own. Take it from the latest request that sets or changes the objective; a short reply \
(\"yes\", \"go on\", \"proof read this\") continues the objective before it. Never paste a long \
message, a log or a document as the goal, and never take it from an early request that was \
finished or replaced.
- requests (list of strings): the user's requests, oldest first, each as its gist in one line, \
the latest ones close to the user's words; leave out pasted material.
- constraints (list of strings): the user's preferences, rules and corrections that still apply, \
each stated as an instruction (\"Use httpie, not curl\", \"Do not edit generated files\"). A \
correction of the agent (\"no, not that file\") becomes a rule. Never phrase a constraint as a \
question. Keep text the user wrote or approved (names, titles, wording) exactly as written.
- completed (list of strings): work that is done, with specifics (names, results, numbers); one \
item per piece of work, never a list folded into one line.
- active (list of strings): the work in progress when the history ends, with what remains of it.
- pending (list of strings): work requested or agreed but not started, one item each.
- decisions (list of {\"decision\": string, \"rationale\": string}): choices made; the rationale \
only where the history states one, otherwise \"\".
- findings (list of strings): what was learned about the system and must not be rediscovered: a \
root cause, a hypothesis ruled out and why, how a part works, the options under discussion.
- errors (list of {\"error\": string, \"fix\": string}): errors met on the way, each with the \
exact message or symptom and what fixed it; the fix \"\" while it is not fixed.
- currentWork (list of strings): what the agent was doing right before the history ends: its \
last words, then what it did after them, one item per action with its outcome (a failure with \
its message). Take it from the recorded current work where the facts have one.
- blockers (list of strings): problems still open at the end: a failing check with its error, a \
question the user has not answered, a missing permission. Leave out problems that were solved.
- nextSteps (list of strings): the concrete actions to take next, in order; the first is the \
exact next step (which command, which file, which function), continuing from the latest exchange.

Rules:
- The recorded facts are ground truth taken from the log: files read and modified, checks with \
the outcome of their last run, and the user's messages, each with the ids of the entries they \
come from. Never contradict them: a check whose last run failed is not passing, and a file is \
deleted only when the facts say so. The file lists are what the log recorded; an edit made some \
other way can be missing from them. Do not copy the file lists or checks into your lists; name a \
file or check where it matters to a piece of work.
- Name only files, commands and identifiers that appear in the history, the facts or the \
previous capsule, and keep exact paths, function names and error messages.
- Roll the previous capsule forward: keep what still holds, move finished work from active or \
pending to completed, drop what is finished, solved or obsolete.
- Do not answer questions in the history and do not continue the work; only describe its state.
- Follow the user's instructions for this summary when there are any.
- Do not invent anything the history does not support. Empty lists are fine; empty strings \
are not.";

/// The instruction again after the history, where a long history would otherwise leave it
/// ~40k tokens behind: the keys and the rules that matter most, short.
pub const REPLY_REMINDER: &str = "\
## Your reply
Think in <analysis>…</analysis> first if it helps (it is discarded), then write one JSON object \
with the keys goal, requests, constraints, completed, active, pending, decisions, findings, \
errors, currentWork, blockers, nextSteps, and nothing after it. Never contradict the recorded facts (check \
outcomes, deleted files); name only files and commands shown above; findings hold root causes, \
hypotheses ruled out and how the system works; errors are {\"error\", \"fix\"}; the first \
nextSteps item continues from the latest exchange.";

/// Tokens the user's messages may take in the facts, newest first: the newest kept whole (cut
/// only past the whole budget), older ones shortened. Less for a small window
/// ([`FactBudget::for_window`]).
pub const FACT_MESSAGES_BUDGET_TOKENS: u64 = 4000;
/// An older user message longer than this is shortened: pastes described, then head and tail
/// kept around a marker.
pub const MAX_FACT_MESSAGE_TOKENS: u64 = 400;
/// The agent's last words quoted in the latest exchange are cut to this, middle-out.
pub const MAX_LATEST_REPLY_TOKENS: u64 = 600;
/// Lines in a row that look like code or a log before they count as a paste.
const MIN_PASTE_LINES: usize = 8;

/// A user message of the facts: the entry it came from and what the user typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserMessage {
    pub entry_id: Option<String>,
    pub text: String,
}

/// Where the next step starts: the user's last message and the agent's last words after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestExchange {
    pub user: UserMessage,
    /// The agent's last text after the user's message (tool calls and results left out).
    pub agent: Option<UserMessage>,
}

/// Facts of the summarized history the model is given as ground truth beside the artifacts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryFacts {
    /// The user's messages, oldest first, as typed: the harness's injected context (system
    /// reminders, instruction files, environment blocks, command wrappers) cut.
    pub user_messages: Vec<UserMessage>,
    /// User messages left out of `user_messages` (the oldest ones) to keep within the budget.
    pub omitted: usize,
    pub latest: Option<LatestExchange>,
    /// What the agent was doing when the history ends, read from its calls and what they
    /// printed: its last words, then one line per action after them.
    pub current_work: Vec<String>,
}

/// How many tokens the user's messages and the latest exchange may take in the facts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FactBudget {
    /// All of the user's messages together.
    pub messages: u64,
    /// One older message before it is shortened.
    pub per_message: u64,
    /// Each side of the latest exchange.
    pub latest: u64,
}

impl FactBudget {
    /// The budget for a summarizer whose input window is `window`: the constants, shrunk for a
    /// small window (at most a fifth of it for the messages, a twentieth for each side of the
    /// latest exchange) so that the facts leave room for the history.
    pub fn for_window(window: u64) -> FactBudget {
        let messages = FACT_MESSAGES_BUDGET_TOKENS.min(window / 5);
        FactBudget {
            messages,
            per_message: MAX_FACT_MESSAGE_TOKENS.min(messages / 4),
            latest: MAX_LATEST_REPLY_TOKENS.min(window / 20),
        }
    }
}

impl HistoryFacts {
    /// [`HistoryFacts::within`] the full budget.
    pub fn of(history: &[ModelMessage]) -> HistoryFacts {
        HistoryFacts::within(history, FactBudget::for_window(u64::MAX))
    }

    /// The user's messages of `history` within `budget`, newest first, and its latest
    /// exchange.
    pub fn within(history: &[ModelMessage], budget: FactBudget) -> HistoryFacts {
        HistoryFacts::within_after(history, budget, &|text| text)
    }

    /// [`HistoryFacts::within`], each message passed through `clean` (redaction) whole, before
    /// it is shortened: a cut can leave a private key's body without its `BEGIN` line, which
    /// a later pass over the shortened text no longer knows for a key.
    pub fn within_after(
        history: &[ModelMessage],
        budget: FactBudget,
        clean: &(dyn Fn(String) -> String + Send + Sync),
    ) -> HistoryFacts {
        let typed: Vec<(usize, UserMessage)> = history
            .iter()
            .enumerate()
            .filter(|(_, m)| m.role == "user")
            .filter_map(|(i, m)| {
                let text =
                    soba_core::capsule::requests::typed_text(&clean(blocks_text(&m.content)))?;
                Some((
                    i,
                    UserMessage {
                        entry_id: m.entry_id.clone(),
                        text,
                    },
                ))
            })
            .collect();
        let latest = typed.last().map(|(at, user)| {
            let agent = history[at + 1..]
                .iter()
                .rev()
                .filter(|m| m.role == "assistant")
                .find_map(|m| {
                    let text = clean(blocks_text(&m.content));
                    (!text.trim().is_empty()).then(|| UserMessage {
                        entry_id: m.entry_id.clone(),
                        text: elide_middle(text.trim(), budget.latest),
                    })
                });
            LatestExchange {
                user: UserMessage {
                    entry_id: user.entry_id.clone(),
                    text: elide_middle(&user.text, budget.latest),
                },
                agent,
            }
        });
        // Newest first until the budget is spent: the newest whole, older ones shortened.
        let mut kept = Vec::new();
        let mut left = budget.messages;
        for (n, (_, m)) in typed.iter().rev().enumerate() {
            let text = if n == 0 {
                elide_middle(&m.text, budget.messages)
            } else {
                shorten_message(&m.text, budget.per_message)
            };
            let tokens = SIZING_TOKENIZER.count(&text);
            if n > 0 && tokens > left {
                break;
            }
            left = left.saturating_sub(tokens);
            kept.push(UserMessage {
                entry_id: m.entry_id.clone(),
                text,
            });
        }
        kept.reverse();
        let after_request = typed.last().map_or(0, |(at, _)| at + 1);
        HistoryFacts {
            current_work: current_work_of(&history[after_request..])
                .into_iter()
                .map(clean)
                .collect(),
            omitted: typed.len() - kept.len(),
            user_messages: kept,
            latest,
        }
    }
}

/// The current work of a turn (`turn`: the messages after its user message): when calls came
/// after the agent's last words, those words and one line per call with the outcome its
/// result shows. A turn that ended on the agent's words has none: its work is done or handed
/// back to the user.
pub fn current_work_of(turn: &[ModelMessage]) -> Vec<String> {
    use soba_core::capsule::current::{current_work, describe_call, shell_script, usual_cd};
    use soba_core::session::entry::ToolResultEntry;
    let results: Vec<ToolResultEntry> = turn
        .iter()
        .filter(|m| m.role == "tool")
        .filter_map(|m| {
            Some(ToolResultEntry {
                call_id: m.tool_call_id.clone()?,
                tool_name: None,
                content: m.content.clone(),
                is_error: m.is_error.unwrap_or(false),
                exit_code: None,
            })
        })
        .collect();
    let mut words: Option<String> = None;
    let mut calls: Vec<(&String, &String, &serde_json::Value, bool)> = Vec::new();
    for m in turn.iter().filter(|m| m.role == "assistant") {
        for b in &m.content {
            match b {
                ContentBlock::Text { text, .. } if !text.trim().is_empty() => {
                    words = Some(text.clone());
                    for c in &mut calls {
                        c.3 = false;
                    }
                }
                ContentBlock::ToolCall {
                    id, name, input, ..
                } => {
                    calls.push((id, name, input, true));
                }
                _ => {}
            }
        }
    }
    let describe = |(id, name, input, _): &(&String, &String, &serde_json::Value, bool)| {
        describe_call(name, input, results.iter().find(|r| &r.call_id == *id))
    };
    let after: Vec<_> = calls.iter().filter(|c| c.3).map(describe).collect();
    if after.is_empty() {
        return Vec::new();
    }
    let all: Vec<_> = calls.iter().map(describe).collect();
    let scripts: Vec<String> = calls.iter().filter_map(|c| shell_script(c.2)).collect();
    let workspace = usual_cd(scripts.iter().map(String::as_str));
    current_work(words.as_deref(), &after, &all, workspace.as_deref())
}

/// A line of code or of a log rather than of prose.
fn looks_pasted(line: &str) -> bool {
    let t = line.trim_end();
    !t.trim_start().starts_with("```")
        && (t.starts_with(['\t', ' ', '|', '$', '/', '+', '@'])
            || t.contains(['{', '}', ';', '=', '<', '(', '[']))
}

/// Lines from the start of `lines` that make a paste: lines that look pasted, with blank lines
/// among them (not at the end).
fn paste_run(lines: &[&str]) -> usize {
    let mut end = 0;
    for (n, line) in lines.iter().enumerate() {
        if looks_pasted(line) {
            end = n + 1;
        } else if !line.trim().is_empty() || end == 0 {
            break;
        }
    }
    end
}

/// `text` with its pastes described rather than quoted (a fenced block, or
/// [`MIN_PASTE_LINES`] or more lines in a row of code or log), then cut middle-out to
/// `max_tokens` if still longer. Unchanged when it fits.
pub fn shorten_message(text: &str, max_tokens: u64) -> String {
    if SIZING_TOKENIZER.count(text) <= max_tokens {
        return text.to_string();
    }
    let lines: Vec<&str> = text.lines().collect();
    let describe = |block: &[&str]| {
        let first = block
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.is_empty() && !l.starts_with("```"))
            .unwrap_or("");
        format!(
            "[pasted: {} lines, first: {}]",
            block.len(),
            one_line(first, 80)
        )
    };
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_start().starts_with("```") {
            let end = lines[i + 1..]
                .iter()
                .position(|l| l.trim_start().starts_with("```"))
                .map_or(lines.len(), |p| i + 1 + p + 1);
            out.push(describe(&lines[i..end]));
            i = end;
            continue;
        }
        let run = paste_run(&lines[i..]);
        let pasted = lines[i..i + run]
            .iter()
            .filter(|l| !l.trim().is_empty())
            .count();
        if pasted >= MIN_PASTE_LINES {
            out.push(describe(&lines[i..i + run]));
            i += run;
        } else {
            out.push(lines[i].to_string());
            i += 1;
        }
    }
    elide_middle(&out.join("\n"), max_tokens)
}

/// `text` with its whitespace collapsed, cut to `max` characters with `…`.
fn one_line(text: &str, max: usize) -> String {
    let mut out = String::new();
    for word in text.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
        if out.chars().count() > max {
            let cut: String = out.chars().take(max).collect();
            return format!("{}…", cut.trim_end());
        }
    }
    out
}

/// The facts the model may be shown: those of the summarized `history` and the `previous`
/// capsule's. A file or check the log recorded only in entries kept after the cut (which the
/// model never sees) is left out; a check whose last run is there shows the previous capsule's
/// record of it, if any. Facts with no entry ids, or a history with none, cannot be placed and
/// are kept.
pub fn shown_artifacts(
    artifacts: &Artifacts,
    history: &[ModelMessage],
    previous: Option<&Artifacts>,
) -> Artifacts {
    let shown: std::collections::HashSet<&str> = history
        .iter()
        .filter_map(|m| m.entry_id.as_deref())
        .collect();
    if shown.is_empty() {
        return artifacts.clone();
    }
    let files = |files: &[FileArtifact], before: Option<&Vec<FileArtifact>>| {
        files
            .iter()
            .filter(|f| {
                f.entry_ids.is_empty()
                    || f.entry_ids.iter().any(|id| shown.contains(id.as_str()))
                    || before.is_some_and(|b| b.iter().any(|p| p.path == f.path))
            })
            .map(|f| FileArtifact {
                entry_ids: f
                    .entry_ids
                    .iter()
                    .filter(|id| shown.contains(id.as_str()))
                    .cloned()
                    .collect(),
                ..f.clone()
            })
            .collect()
    };
    let verification = artifacts
        .verification
        .iter()
        .filter_map(|v| {
            if v.entry_id.is_empty() || shown.contains(v.entry_id.as_str()) {
                return Some(v.clone());
            }
            previous?
                .verification
                .iter()
                .find(|p| p.command == v.command)
                .cloned()
        })
        .collect();
    Artifacts {
        read_files: files(&artifacts.read_files, previous.map(|p| &p.read_files)),
        modified_files: files(
            &artifacts.modified_files,
            previous.map(|p| &p.modified_files),
        ),
        verification,
        active_skills: artifacts.active_skills.clone(),
        work_trees: artifacts.work_trees.clone(),
    }
}

/// One request's messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub system: String,
    pub user: String,
}

impl Prompt {
    /// Input tokens of the request: both messages with their framing, plus the reply primer.
    pub fn tokens(&self) -> u64 {
        2 * MESSAGE_OVERHEAD_TOKENS
            + SIZING_TOKENIZER.count(&self.system)
            + SIZING_TOKENIZER.count(&self.user)
            + REPLY_PRIMER_TOKENS
    }
}

/// What stays the same across the chunks of one summarization.
#[derive(Debug, Clone, Copy)]
pub struct PromptContext<'a> {
    pub instructions: Option<&'a str>,
    /// The facts the model is shown (see [`shown_artifacts`]).
    pub artifacts: &'a Artifacts,
    pub facts: &'a HistoryFacts,
    /// What was wrong with the model's previous reply to this request, when it is asked again.
    pub follow_up: Option<&'a str>,
}

/// The prompt for one chunk of history, rolling `previous` forward. The instruction stands
/// before the history and, short, again after it; the latest exchange comes last, as the
/// anchor of the next step.
pub fn build_prompt(
    ctx: PromptContext<'_>,
    previous: Option<&CapsuleState>,
    history: &[String],
) -> Prompt {
    let mut user = String::new();
    user.push_str("## Previous capsule\n");
    match previous {
        Some(state) => {
            user.push_str(&serde_json::to_string_pretty(state).expect("capsule state serializes"))
        }
        None => user.push_str("(none: this is the first capsule of the session)"),
    }
    user.push_str("\n\n## Recorded facts (ground truth from the log; entry ids in brackets)\n");
    user.push_str(&render_facts(ctx.artifacts, ctx.facts));
    if let Some(instructions) = ctx.instructions.filter(|i| !i.trim().is_empty()) {
        user.push_str("\n\n## The user's instructions for this summary\n");
        user.push_str(instructions.trim());
    }
    user.push_str("\n\n## History to summarize, oldest first\n");
    user.push_str(&history.join(SEPARATOR));
    if let Some(latest) = &ctx.facts.latest {
        user.push_str("\n\n## The latest exchange (the next step continues from here)\n");
        user.push_str(&quoted("The user", &latest.user));
        if let Some(agent) = &latest.agent {
            user.push('\n');
            user.push_str(&quoted("The agent's last words", agent));
        }
    }
    user.push_str("\n\n");
    user.push_str(REPLY_REMINDER);
    if let Some(why) = ctx.follow_up {
        user.push_str("\n\n## Your previous reply could not be used\n");
        user.push_str(why);
        user.push_str(
            "\nReply again: an optional <analysis> block, then one JSON object with the keys \
above and nothing else.",
        );
    }
    Prompt {
        system: SYSTEM_PROMPT.to_string(),
        user,
    }
}

/// `message` under `who`, each line quoted with `> `.
fn quoted(who: &str, message: &UserMessage) -> String {
    let id = message
        .entry_id
        .as_deref()
        .map(|id| format!(" [{id}]"))
        .unwrap_or_default();
    let body: Vec<String> = message.text.lines().map(|l| format!("> {l}")).collect();
    format!("{who}{id}:\n{}", body.join("\n"))
}

fn render_facts(a: &Artifacts, facts: &HistoryFacts) -> String {
    let ids = |ids: &[String]| {
        if ids.is_empty() {
            String::new()
        } else {
            format!(" [{}]", ids.join(", "))
        }
    };
    let files = |files: &[FileArtifact]| {
        if files.is_empty() {
            "(none)".to_string()
        } else {
            files
                .iter()
                .map(|f| {
                    let change = match (&f.renamed_from, f.deleted) {
                        (_, true) => " (deleted)".to_string(),
                        (Some(from), false) => format!(" (renamed from {from})"),
                        (None, false) => String::new(),
                    };
                    format!("{}{change}{}", f.path, ids(&f.entry_ids))
                })
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let verification = if a.verification.is_empty() {
        "(none)".to_string()
    } else {
        a.verification
            .iter()
            .map(|v| {
                let since = if v.edited_since {
                    " (files edited since)"
                } else {
                    ""
                };
                format!(
                    "`{}` {}{since} [{}]",
                    v.command,
                    v.outcome.as_str(),
                    v.entry_id
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let skills = if a.active_skills.is_empty() {
        "(none)".to_string()
    } else {
        a.active_skills.join(", ")
    };
    // Edits in the session's other git worktrees are listed under their absolute paths.
    let work_trees = if a.work_trees.is_empty() {
        String::new()
    } else {
        format!(
            "\nWork trees outside the workspace: {}",
            a.work_trees.join(", ")
        )
    };
    let mut out = format!(
        "Read files: {}\nModified files: {}{work_trees}\nChecks, outcome of the last run: {verification}\nActive skills: {skills}\nThe user's messages, oldest first, as typed:",
        files(&a.read_files),
        files(&a.modified_files)
    );
    if facts.user_messages.is_empty() {
        out.push_str(" (none in this history)");
    }
    if facts.omitted > 0 {
        out.push_str(&format!("\n- ({} older ones left out)", facts.omitted));
    }
    for m in &facts.user_messages {
        let id = m
            .entry_id
            .as_deref()
            .map(|id| format!("[{id}] "))
            .unwrap_or_default();
        // Continuation lines indented under their item.
        out.push_str(&format!("\n- {id}{}", m.text.replace('\n', "\n  ")));
    }
    if !facts.current_work.is_empty() {
        out.push_str(
            "\nCurrent work (the agent's last words, then its calls since, with the outcome each printed):",
        );
        for line in &facts.current_work {
            out.push_str(&format!("\n- {line}"));
        }
    }
    out
}

/// One history message as prompt text. Thinking is left out (private reasoning, often long);
/// long tool inputs and outputs are elided middle-out.
pub fn render_message(m: &ModelMessage) -> String {
    let mut heading = match (m.role.as_str(), m.is_error) {
        ("tool", Some(true)) => "### tool result (error)".to_string(),
        ("tool", _) => "### tool result".to_string(),
        (role, _) => format!("### {role}"),
    };
    if let Some(id) = &m.entry_id {
        heading.push_str(&format!(" [{id}]"));
    }
    let limit = if m.role == "tool" {
        MAX_TOOL_OUTPUT_TOKENS
    } else {
        u64::MAX
    };
    let mut parts = Vec::new();
    for block in &m.content {
        match block {
            ContentBlock::Text { text, .. } => parts.push(elide_middle(text, limit)),
            ContentBlock::Thinking { .. } => {}
            ContentBlock::ToolCall { name, input, .. } => {
                let args = serde_json::to_string(input).unwrap_or_default();
                parts.push(format!(
                    "→ {name}({})",
                    elide_middle(&args, MAX_TOOL_INPUT_TOKENS)
                ));
            }
            ContentBlock::Image { .. } => parts.push("[image]".to_string()),
            // Provider data (encrypted reasoning, server tool blocks): named, never quoted.
            ContentBlock::Opaque(o) => parts.push(format!("[{}]", o.block_type())),
        }
    }
    format!("{heading}\n{}", parts.join("\n"))
}

/// `text` cut to at most `max_tokens` by removing its middle, with a marker saying how much
/// went. Unchanged when it already fits.
pub fn elide_middle(text: &str, max_tokens: u64) -> String {
    let total = SIZING_TOKENIZER.count(text);
    if total <= max_tokens {
        return text.to_string();
    }
    let chars: Vec<char> = text.chars().collect();
    let marker = |elided: u64| format!("\n[… {elided} tokens elided …]\n");
    let marker_tokens = SIZING_TOKENIZER.count(&marker(total));
    let mut keep_tokens = max_tokens.saturating_sub(marker_tokens);
    loop {
        let keep_chars = ((chars.len() as f64) * (keep_tokens as f64 / total as f64)) as usize;
        let head: String = chars[..keep_chars / 2].iter().collect();
        let tail: String = chars[chars.len() - keep_chars / 2..].iter().collect();
        let kept = SIZING_TOKENIZER.count(&head) + SIZING_TOKENIZER.count(&tail);
        let out = format!("{head}{}{tail}", marker(total.saturating_sub(kept)));
        let n = SIZING_TOKENIZER.count(&out);
        if n <= max_tokens || keep_tokens == 0 {
            return out;
        }
        // Shrink by the overshoot plus a little, so the loop ends in a step or two.
        keep_tokens = keep_tokens.saturating_sub(n - max_tokens + keep_tokens / 20 + 1);
    }
}

/// The next request of a chunked summarization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub prompt: Prompt,
    /// Index of the first history item not in this chunk.
    pub next: usize,
    /// Input tokens of `prompt`.
    pub tokens: u64,
}

/// The input budget of a summarizer with `context_window` and `max_output_tokens`.
pub fn input_window(context_window: u64, max_output_tokens: u64) -> u64 {
    let input = context_window.saturating_sub(max_output_tokens);
    input - (input as f64 * WINDOW_RESERVE_RATIO).ceil() as u64
}

/// Take as many history items from `start` on as fit `window` together with the fixed parts
/// (previous capsule, facts, instructions). A single item too large for the window on its own
/// is elided middle-out to fit. Errors when the fixed parts leave no room for history.
pub fn next_chunk(
    ctx: PromptContext<'_>,
    previous: Option<&CapsuleState>,
    items: &[String],
    item_tokens: &[u64],
    start: usize,
    window: u64,
) -> Result<Chunk, String> {
    debug_assert_eq!(items.len(), item_tokens.len());
    let fixed = build_prompt(ctx, previous, &[]).tokens();
    let room = window.saturating_sub(fixed);
    if room < MIN_HISTORY_TOKENS {
        return Err(format!(
            "the summarizer's input window ({window} tokens) cannot hold the prompt, the previous capsule and the facts ({fixed} tokens) plus any history; raise summarizer.contextWindow or lower summarizer.maxOutputTokens"
        ));
    }
    let separator = SIZING_TOKENIZER.count(SEPARATOR);
    let mut end = start;
    let mut used = 0;
    while end < items.len() && used + item_tokens[end] + separator <= room {
        used += item_tokens[end] + separator;
        end += 1;
    }
    if end == start && start < items.len() {
        // The oldest remaining item alone is too big: elide it into the room there is.
        let mut limit = room - separator;
        loop {
            let elided = elide_middle(&items[start], limit);
            let prompt = build_prompt(ctx, previous, std::slice::from_ref(&elided));
            let tokens = prompt.tokens();
            if tokens <= window {
                return Ok(Chunk {
                    prompt,
                    next: start + 1,
                    tokens,
                });
            }
            limit = limit.saturating_sub(tokens - window);
            if limit < MIN_HISTORY_TOKENS {
                return Err(format!("a history message cannot be made to fit the summarizer's input window ({window} tokens)"));
            }
        }
    }
    // Token counts of parts do not add up exactly once joined; check the real prompt and give
    // back items until it fits.
    loop {
        let prompt = build_prompt(ctx, previous, &items[start..end]);
        let tokens = prompt.tokens();
        if tokens <= window {
            return Ok(Chunk {
                prompt,
                next: end,
                tokens,
            });
        }
        if end - start <= 1 {
            if end == start {
                return Err(format!("the summarizer's input window ({window} tokens) cannot hold the prompt ({tokens} tokens)"));
            }
            let elided = elide_middle(&items[start], room.saturating_sub(tokens - window));
            let prompt = build_prompt(ctx, previous, std::slice::from_ref(&elided));
            let tokens = prompt.tokens();
            if tokens <= window {
                return Ok(Chunk {
                    prompt,
                    next: end,
                    tokens,
                });
            }
            return Err(format!("a history message cannot be made to fit the summarizer's input window ({window} tokens)"));
        }
        end -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use soba_core::session::capsule::model::FileArtifact;

    fn words(n: usize, seed: &str) -> String {
        (0..n)
            .map(|i| format!("{seed}{i}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn elide_middle_keeps_head_and_tail_under_the_limit() {
        let text = words(3000, "w");
        let out = elide_middle(&text, 200);
        assert!(SIZING_TOKENIZER.count(&out) <= 200);
        assert!(out.starts_with("w0 w1"));
        assert!(out.ends_with("w2999"));
        assert!(out.contains("tokens elided"));
        assert_eq!(elide_middle("short", 200), "short");
        let multibyte = "é漢🙂".repeat(2000);
        assert!(SIZING_TOKENIZER.count(&elide_middle(&multibyte, 100)) <= 100);
    }

    #[test]
    fn tool_output_is_elided_and_thinking_left_out() {
        let m = ModelMessage {
            role: "tool".into(),
            content: vec![ContentBlock::Text {
                text: words(5000, "line"),
                extra: Default::default(),
            }],
            tool_call_id: Some("c1".into()),
            is_error: Some(true),
            entry_id: None,
        };
        let text = render_message(&m);
        assert!(text.starts_with("### tool result (error)\n"));
        assert!(SIZING_TOKENIZER.count(&text) <= MAX_TOOL_OUTPUT_TOKENS + 10);
        let m = ModelMessage {
            role: "assistant".into(),
            content: vec![
                ContentBlock::Thinking {
                    thinking: "secret plan".into(),
                    extra: Default::default(),
                },
                ContentBlock::ToolCall {
                    id: "c1".into(),
                    name: "bash".into(),
                    input: Box::new(serde_json::json!({"cmd": "cargo test"})),
                    extra: Default::default(),
                },
            ],
            tool_call_id: None,
            is_error: None,
            entry_id: None,
        };
        let text = render_message(&m);
        assert_eq!(text, "### assistant\n→ bash({\"cmd\":\"cargo test\"})");
    }

    #[test]
    fn prompt_holds_previous_facts_instructions_and_history() {
        let artifacts = Artifacts {
            modified_files: vec![FileArtifact {
                path: "src/a.rs".into(),
                entry_ids: vec![],
                ..Default::default()
            }],
            ..Artifacts::default()
        };
        let prev = CapsuleState {
            goal: "old goal".into(),
            ..CapsuleState::default()
        };
        let ctx = PromptContext {
            instructions: Some("focus on tests"),
            artifacts: &artifacts,
            facts: &HistoryFacts::default(),
            follow_up: None,
        };
        let p = build_prompt(ctx, Some(&prev), &["### user\nhi".into()]);
        for needle in [
            "old goal",
            "Modified files: src/a.rs",
            "focus on tests",
            "### user\nhi",
        ] {
            assert!(p.user.contains(needle), "missing {needle}: {}", p.user);
        }
        let p = build_prompt(
            PromptContext {
                instructions: None,
                artifacts: &artifacts,
                facts: &HistoryFacts::default(),
                follow_up: None,
            },
            None,
            &[],
        );
        assert!(p.user.contains("(none: this is the first capsule"));
        assert!(!p.user.contains("instructions for this summary"));
    }

    fn user_message(id: &str, text: &str) -> ModelMessage {
        ModelMessage {
            role: "user".into(),
            content: vec![ContentBlock::Text {
                text: text.into(),
                extra: Default::default(),
            }],
            tool_call_id: None,
            is_error: None,
            entry_id: Some(id.into()),
        }
    }

    #[test]
    fn facts_carry_entry_ids_and_the_users_messages() {
        use soba_core::session::capsule::model::Verification;
        use soba_core::session::capsule::model::VerificationOutcome;
        let artifacts = Artifacts {
            read_files: vec![FileArtifact {
                path: "src/lexer.rs".into(),
                entry_ids: vec!["e2".into(), "e4".into()],
                ..Default::default()
            }],
            verification: vec![Verification {
                command: "cargo test".into(),
                outcome: VerificationOutcome::Failed,
                entry_id: "e6".into(),
                edited_since: false,
            }],
            ..Artifacts::default()
        };
        let long = format!(
            "Fix the lexer\n\n{}",
            "so that it reads every token ".repeat(30)
        );
        let history = vec![user_message("e1", &long), user_message("e7", "yes, go on")];
        let facts = HistoryFacts::of(&history);
        let items: Vec<String> = history.iter().map(render_message).collect();
        let p = build_prompt(
            PromptContext {
                instructions: None,
                artifacts: &artifacts,
                facts: &facts,
                follow_up: None,
            },
            None,
            &items,
        );
        for needle in [
            "Read files: src/lexer.rs [e2, e4]",
            "Modified files: (none)",
            "Checks, outcome of the last run: `cargo test` failed [e6]",
            "- [e1] Fix the lexer\n  \n  so that it reads every token",
            "- [e7] yes, go on",
            "### user [e1]\nFix the lexer",
        ] {
            assert!(p.user.contains(needle), "missing {needle}: {}", p.user);
        }
        // A message under the per-message limit is quoted whole, not cut to a line.
        assert!(p
            .user
            .contains(&long.replace('\n', "\n  ").trim_end().to_string()));
        // No sentence claims the file lists are complete: the log can miss an edit.
        assert!(!SYSTEM_PROMPT.contains("not listed as modified was not changed"));
        assert!(SYSTEM_PROMPT.contains("an edit made some other way can be missing"));
        // The system prompt is one constant: every request starts with the same bytes.
        assert_eq!(p.system, SYSTEM_PROMPT);
    }

    #[test]
    fn a_check_run_before_later_edits_is_marked_in_the_facts() {
        use soba_core::session::capsule::model::Verification;
        use soba_core::session::capsule::model::VerificationOutcome;
        let artifacts = Artifacts {
            verification: vec![Verification {
                command: "mise run lint".into(),
                outcome: VerificationOutcome::Passed,
                entry_id: "e3".into(),
                edited_since: true,
            }],
            ..Artifacts::default()
        };
        let text = render_facts(&artifacts, &HistoryFacts::default());
        assert!(
            text.contains("`mise run lint` passed (files edited since) [e3]"),
            "{text}"
        );
    }

    #[test]
    fn the_facts_keep_the_newest_messages_within_the_budget() {
        let history: Vec<ModelMessage> = (0..60)
            .map(|i| {
                user_message(
                    &format!("e{i}"),
                    &format!("request {i}: {}", words(150, "w")),
                )
            })
            .collect();
        let facts = HistoryFacts::of(&history);
        assert!(facts.omitted > 0, "{}", facts.omitted);
        assert_eq!(facts.omitted + facts.user_messages.len(), 60);
        assert_eq!(
            facts.user_messages.last().unwrap().entry_id.as_deref(),
            Some("e59")
        );
        let first_kept = facts.omitted;
        assert_eq!(
            facts.user_messages[0].entry_id.as_deref(),
            Some(format!("e{first_kept}").as_str())
        );
        let tokens: u64 = facts
            .user_messages
            .iter()
            .map(|m| SIZING_TOKENIZER.count(&m.text))
            .sum();
        assert!(tokens <= FACT_MESSAGES_BUDGET_TOKENS, "{tokens}");
        let text = render_facts(&Artifacts::default(), &facts);
        assert!(
            text.contains(&format!(
                "- ({} older ones left out)\n- [e{first_kept}] request {first_kept}",
                facts.omitted
            )),
            "{text}"
        );
        let none = render_facts(&Artifacts::default(), &HistoryFacts::default());
        assert!(
            none.ends_with("The user's messages, oldest first, as typed: (none in this history)")
        );
    }

    #[test]
    fn an_older_message_is_redacted_whole_before_it_is_shortened() {
        // Fake key lines, assembled so the repository holds no key-shaped literal.
        let body: Vec<String> = (0..30)
            .map(|i| {
                format!(
                    "b3BlbnNzaC1rZXktdjEAAAAA{i:02}{}",
                    "Q9Lm2Pz9Rt4Vw8Ys3Kd6Hf1Nb5Jc0Ga"
                )
            })
            .collect();
        let older = format!(
            "{}\n-----BEGIN {kind}-----\n{}\n-----END {kind}-----\nthat is the deploy key",
            words(1500, "context"),
            body.join("\n"),
            kind = "OPENSSH PRIVATE KEY",
        );
        let history = vec![user_message("e1", &older), user_message("e2", "go on")];
        let redact = |t: String| soba_core::redact::redact(&t).into_owned();
        let leaked = |facts: &HistoryFacts| {
            facts.user_messages[0]
                .text
                .lines()
                .any(|l| body.iter().any(|b| l.contains(b.as_str())))
        };
        // Shortening cuts the `BEGIN` line out and keeps the end of the body: redacting the
        // shortened text afterwards no longer sees a key.
        let mut shortened_first = HistoryFacts::of(&history);
        shortened_first.user_messages[0].text =
            redact(shortened_first.user_messages[0].text.clone());
        assert!(leaked(&shortened_first), "the test no longer cuts the key");
        let facts = HistoryFacts::within_after(&history, FactBudget::for_window(u64::MAX), &redact);
        assert!(!leaked(&facts), "{}", facts.user_messages[0].text);
        assert!(facts.user_messages[0].text.contains("tokens elided"));
    }

    #[test]
    fn the_newest_message_is_whole_and_older_long_ones_are_shortened_with_pastes_described() {
        let log: String = (0..40)
            .map(|i| {
                format!("2026-01-01T00:00:{i:02}Z ERROR worker={i} failed to connect (retry {i})\n")
            })
            .collect();
        let older = format!(
            "The worker crashes on start, here is the log:\n{log}{}\nPlease find the cause.",
            words(400, "context")
        );
        let newest = format!("Now fix it. {}", words(900, "detail"));
        let history = vec![user_message("e1", &older), user_message("e2", &newest)];
        let facts = HistoryFacts::of(&history);
        let [old, new] = &facts.user_messages[..] else {
            panic!("{facts:?}")
        };
        assert_eq!(new.text, newest, "the newest message is kept verbatim");
        assert!(SIZING_TOKENIZER.count(&old.text) <= MAX_FACT_MESSAGE_TOKENS);
        assert!(
            old.text.starts_with("The worker crashes on start, here is the log:\n[pasted: 40 lines, first: 2026-01-01T00:00:00Z ERROR"),
            "{}",
            old.text
        );
        assert!(old.text.ends_with("Please find the cause."), "{}", old.text);
        assert!(old.text.contains("tokens elided"));
        // A fenced block is described too.
        let fenced = format!("look:\n```\n{}\n```\nwhy?", "let x = 1;\n".repeat(300));
        let short = shorten_message(&fenced, 100);
        assert_eq!(short, "look:\n[pasted: 303 lines, first: let x = 1;]\nwhy?");
        // Prose with short lines and lists is not a paste.
        let list = format!(
            "Do these:\n{}\n# Notes\n> quoted",
            "- rename the loader and keep the alias\n".repeat(12)
        );
        let short = shorten_message(&list, 60);
        assert!(
            !short.contains("[pasted") && short.contains("tokens elided"),
            "{short}"
        );
        assert_eq!(shorten_message("short", 100), "short");
    }

    #[test]
    fn injected_context_is_cut_from_the_users_messages() {
        let claude_code = "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n# claudeMd\nAlways run mise run lint.\n</system-reminder>\n<system-reminder>The TodoWrite tool hasn't been used recently.</system-reminder>\nRename the config loader to ConfigSource and keep the old name as an alias.";
        let only_injected = "<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>";
        let command = "<command-name>/clear</command-name>\n<command-message>clear</command-message>\n<command-args></command-args>";
        let caveat = "<local-command-caveat>Caveat: The messages below were generated by the user while running local commands.</local-command-caveat>";
        let history = vec![
            user_message("e1", claude_code),
            user_message("e2", only_injected),
            user_message("e3", command),
            user_message("e4", caveat),
        ];
        let facts = HistoryFacts::of(&history);
        assert_eq!(
            facts.user_messages,
            vec![UserMessage {
                entry_id: Some("e1".into()),
                text: "Rename the config loader to ConfigSource and keep the old name as an alias."
                    .into()
            }]
        );
        assert_eq!(facts.omitted, 0);
    }

    fn assistant_text(id: &str, text: &str) -> ModelMessage {
        ModelMessage {
            role: "assistant".into(),
            ..user_message(id, text)
        }
    }

    fn call(id: &str, command: &str) -> ModelMessage {
        ModelMessage {
            role: "assistant".into(),
            content: vec![ContentBlock::ToolCall {
                id: format!("call-{id}"),
                name: "Bash".into(),
                input: Box::new(serde_json::json!({ "command": command })),
                extra: Default::default(),
            }],
            tool_call_id: None,
            is_error: None,
            entry_id: Some(id.into()),
        }
    }

    fn tool_result(id: &str, text: &str, is_error: bool) -> ModelMessage {
        ModelMessage {
            role: "tool".into(),
            tool_call_id: Some(format!("call-{id}")),
            is_error: Some(is_error),
            ..user_message(&format!("{id}r"), text)
        }
    }

    #[test]
    fn the_facts_carry_the_current_work_read_from_the_calls_after_the_agents_last_words() {
        let history = vec![
            user_message("e1", "Make the example run"),
            assistant_text("e2", "Now I'm running the example with --dry-run."),
            call("e3", "bun agentv eval ex.yaml --dry-run"),
            tool_result("e3", "error: unknown option '--dry-run'", true),
        ];
        let facts = HistoryFacts::of(&history);
        assert_eq!(
            facts.current_work,
            vec![
                "The agent's last words: \"Now I'm running the example with --dry-run.\"".to_string(),
                "ran `bun agentv eval ex.yaml --dry-run` — failed: \"error: unknown option '--dry-run'\"".to_string(),
            ]
        );
        let rendered = render_facts(&Artifacts::default(), &facts);
        assert!(
            rendered.contains("Current work (") && rendered.contains("- ran `bun agentv eval"),
            "{rendered}"
        );
        // A turn that ended on the agent's words has no current work: it is done or handed back.
        let ended = vec![
            user_message("e1", "Make the example run"),
            call("e2", "make"),
            tool_result("e2", "ok", false),
            assistant_text("e3", "It runs now."),
        ];
        assert!(HistoryFacts::of(&ended).current_work.is_empty());
    }

    #[test]
    fn the_latest_exchange_is_quoted_after_the_history_then_the_reply_instruction() {
        let history = vec![
            user_message("e1", "Port the parser"),
            assistant_text("e2", "Done with the lexer."),
            user_message("e3", "Should we keep the old API?"),
            assistant_text(
                "e4",
                "Two options: keep it behind a flag, or remove it in 2.0.",
            ),
            ModelMessage {
                role: "tool".into(),
                ..user_message("e5", "ok")
            },
        ];
        let facts = HistoryFacts::of(&history);
        let latest = facts.latest.clone().unwrap();
        assert_eq!(latest.user.entry_id.as_deref(), Some("e3"));
        assert_eq!(
            latest.agent.as_ref().unwrap().entry_id.as_deref(),
            Some("e4")
        );
        let items: Vec<String> = history.iter().map(render_message).collect();
        let p = build_prompt(
            PromptContext {
                instructions: None,
                artifacts: &Artifacts::default(),
                facts: &facts,
                follow_up: None,
            },
            None,
            &items,
        );
        let history_at = p.user.find("## History to summarize").unwrap();
        let latest_at = p.user.find("## The latest exchange").unwrap();
        let reply_at = p.user.find("## Your reply").unwrap();
        assert!(history_at < latest_at && latest_at < reply_at, "{}", p.user);
        assert!(p.user[latest_at..].contains(
            "The user [e3]:\n> Should we keep the old API?\nThe agent's last words [e4]:\n> Two options"
        ));
        assert!(p.user.ends_with(REPLY_REMINDER));
        for key in [
            "findings",
            "errors",
            "currentWork",
            "nextSteps",
            "<analysis>",
        ] {
            assert!(REPLY_REMINDER.contains(key), "{key}");
            assert!(SYSTEM_PROMPT.contains(key), "{key}");
        }
        assert!(!SYSTEM_PROMPT.contains("exactly one JSON object and nothing else"));
        // A second try says what was wrong, after everything else.
        let again = build_prompt(
            PromptContext {
                instructions: None,
                artifacts: &Artifacts::default(),
                facts: &facts,
                follow_up: Some("Your reply was rejected: the model's capsule has an empty goal."),
            },
            None,
            &items,
        );
        let tail = &again.user[again
            .user
            .find("## Your previous reply could not be used")
            .unwrap()..];
        assert!(
            tail.contains("empty goal") && tail.contains("Reply again"),
            "{tail}"
        );
    }

    #[test]
    fn the_facts_shown_leave_out_what_only_the_kept_tail_recorded() {
        use soba_core::session::capsule::model::Verification;
        use soba_core::session::capsule::model::VerificationOutcome;
        let file = |path: &str, ids: &[&str]| FileArtifact {
            path: path.into(),
            entry_ids: ids.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let check = |cmd: &str, outcome, id: &str| Verification {
            command: cmd.into(),
            outcome,
            entry_id: id.into(),
            edited_since: false,
        };
        let artifacts = Artifacts {
            modified_files: vec![
                file("src/span.rs", &["e2", "t9"]),
                file("src/tail.rs", &["t8"]),
                file("src/before.rs", &["t7"]),
            ],
            verification: vec![
                check("cargo test", VerificationOutcome::Failed, "e3"),
                check("mise run lint", VerificationOutcome::Passed, "t9"),
                check("cargo fmt", VerificationOutcome::Passed, "t9"),
            ],
            ..Artifacts::default()
        };
        let previous = Artifacts {
            modified_files: vec![file("src/before.rs", &["p1"])],
            verification: vec![check("mise run lint", VerificationOutcome::Failed, "p2")],
            ..Artifacts::default()
        };
        let history = vec![
            user_message("e1", "go"),
            assistant_text("e2", "editing"),
            assistant_text("e3", "testing"),
        ];
        let shown = shown_artifacts(&artifacts, &history, Some(&previous));
        assert_eq!(
            shown.modified_files,
            vec![file("src/span.rs", &["e2"]), file("src/before.rs", &[])]
        );
        assert_eq!(
            shown.verification,
            vec![
                check("cargo test", VerificationOutcome::Failed, "e3"),
                check("mise run lint", VerificationOutcome::Failed, "p2"),
            ]
        );
        // A history without entry ids cannot place anything: all of it is shown.
        let unplaced = vec![ModelMessage {
            entry_id: None,
            ..user_message("x", "go")
        }];
        assert_eq!(shown_artifacts(&artifacts, &unplaced, None), artifacts);
    }

    #[test]
    fn chunks_cover_everything_oldest_first_and_fit() {
        let artifacts = Artifacts::default();
        let ctx = PromptContext {
            instructions: None,
            artifacts: &artifacts,
            facts: &HistoryFacts::default(),
            follow_up: None,
        };
        let items: Vec<String> = (0..30)
            .map(|i| format!("### user\n{}", words(150, &format!("m{i}x"))))
            .collect();
        let tokens: Vec<u64> = items.iter().map(|t| SIZING_TOKENIZER.count(t)).collect();
        let window = 2000;
        let mut start = 0;
        let mut chunks = 0;
        while start < items.len() {
            let c = next_chunk(ctx, None, &items, &tokens, start, window).unwrap();
            assert!(c.tokens <= window, "{} > {window}", c.tokens);
            assert_eq!(c.tokens, c.prompt.tokens());
            assert!(c.next > start);
            assert!(
                c.prompt.user.contains(&format!("m{start}x0 ")),
                "starts at item {start}"
            );
            start = c.next;
            chunks += 1;
        }
        assert!(chunks > 3, "{chunks}");
    }

    #[test]
    fn an_oversized_item_is_elided_into_its_own_chunk() {
        let artifacts = Artifacts::default();
        let ctx = PromptContext {
            instructions: None,
            artifacts: &artifacts,
            facts: &HistoryFacts::default(),
            follow_up: None,
        };
        let items = vec![
            format!("### user\n{}", words(4000, "big")),
            "### user\nsmall".into(),
        ];
        let tokens: Vec<u64> = items.iter().map(|t| SIZING_TOKENIZER.count(t)).collect();
        let c = next_chunk(ctx, None, &items, &tokens, 0, 1500).unwrap();
        assert_eq!(c.next, 1);
        assert!(c.tokens <= 1500);
        assert!(c.prompt.user.contains("tokens elided"));
    }

    #[test]
    fn a_window_too_small_for_the_fixed_parts_is_an_error() {
        let artifacts = Artifacts::default();
        let ctx = PromptContext {
            instructions: None,
            artifacts: &artifacts,
            facts: &HistoryFacts::default(),
            follow_up: None,
        };
        let err = next_chunk(ctx, None, &["x".into()], &[1], 0, 300).unwrap_err();
        assert!(err.contains("raise summarizer.contextWindow"), "{err}");
    }

    #[test]
    fn input_window_leaves_output_and_reserve() {
        assert_eq!(input_window(10_000, 2_000), 7_600);
        assert_eq!(input_window(1_000, 2_000), 0);
    }
}
