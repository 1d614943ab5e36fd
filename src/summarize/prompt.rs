//! The summarization prompt and its sizing: rendering the history as text, eliding long tool
//! outputs middle-out, and cutting the history into chunks that each fit the summarizer's
//! window. Pure: no I/O, token counts from the o200k encoding.

use crate::capsule::{Artifacts, CapsuleState};
use crate::session::entry::ContentBlock;
use crate::session::view::ModelMessage;
use crate::tokens::{TokenizerKind, MESSAGE_OVERHEAD_TOKENS};

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

Reply with exactly one JSON object and nothing else. Its keys:
- goal (string, required, non-empty): what the user wants done now, in one or two sentences of \
your own. Take it from the latest request that sets or changes the objective; a short reply \
(\"yes\", \"go on\", \"proof read this\") continues the objective before it. Never paste a long \
message, a log or a document as the goal, and never take it from an early request that was \
finished or replaced.
- requests (list of strings): the user's requests, oldest first, each as its gist in one line, \
the latest ones close to the user's words; leave out what the agent's tooling wrapped around \
them (IDE context, system reminders, instruction files) and pasted material.
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
- blockers (list of strings): problems still open at the end: a failing check with its error, a \
question the user has not answered, a missing permission. Leave out problems that were solved.
- nextSteps (list of strings): the concrete actions to take next, in order; the first is the \
exact next step (which command, which file, which function).

Rules:
- The recorded facts are ground truth taken from the log: files read and modified, checks with \
the outcome of their last run, and the user's messages, each with the ids of the entries they \
come from. Never contradict them: a check whose last run failed is not passing, and a file not \
listed as modified was not changed. Do not copy the file lists or checks into your lists; name a \
file or check where it matters to a piece of work.
- Name only files, commands and identifiers that appear in the history, the facts or the \
previous capsule, and keep exact paths, function names and error messages.
- Roll the previous capsule forward: keep what still holds, move finished work from active or \
pending to completed, drop what is finished, solved or obsolete.
- Do not answer questions in the history and do not continue the work; only describe its state.
- Follow the user's instructions for this summary when there are any.
- Do not invent anything the history does not support. Empty lists are fine; empty strings \
are not.";

/// Most user messages the facts list (the latest ones), and most characters of each.
pub const MAX_FACT_MESSAGES: usize = 40;
pub const MAX_FACT_MESSAGE_CHARS: usize = 240;

/// Facts of the summarized history the model is given as ground truth beside the artifacts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistoryFacts {
    /// The user's messages, oldest first: entry id and the message's opening, one line.
    pub user_messages: Vec<(String, String)>,
    /// User messages left out of `user_messages` (the oldest ones) to keep the facts short.
    pub omitted: usize,
}

impl HistoryFacts {
    /// The user messages of `history` that carry an entry id.
    pub fn of(history: &[ModelMessage]) -> HistoryFacts {
        let mut all: Vec<(String, String)> = history
            .iter()
            .filter(|m| m.role == "user")
            .filter_map(|m| {
                let id = m.entry_id.clone()?;
                let text = m
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Text { text, .. } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                let line = one_line(&text, MAX_FACT_MESSAGE_CHARS);
                (!line.is_empty()).then_some((id, line))
            })
            .collect();
        let omitted = all.len().saturating_sub(MAX_FACT_MESSAGES);
        all.drain(..omitted);
        HistoryFacts {
            user_messages: all,
            omitted,
        }
    }
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
    pub artifacts: &'a Artifacts,
    pub facts: &'a HistoryFacts,
}

/// The prompt for one chunk of history, rolling `previous` forward.
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
    Prompt {
        system: SYSTEM_PROMPT.to_string(),
        user,
    }
}

fn render_facts(a: &Artifacts, facts: &HistoryFacts) -> String {
    let ids = |ids: &[String]| {
        if ids.is_empty() {
            String::new()
        } else {
            format!(" [{}]", ids.join(", "))
        }
    };
    let files = |files: &[crate::capsule::FileArtifact]| {
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
            .map(|v| format!("`{}` {} [{}]", v.command, v.outcome.as_str(), v.entry_id))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let skills = if a.active_skills.is_empty() {
        "(none)".to_string()
    } else {
        a.active_skills.join(", ")
    };
    let mut out = format!(
        "Read files: {}\nModified files: {}\nChecks, outcome of the last run: {verification}\nActive skills: {skills}\nThe user's messages, oldest first:",
        files(&a.read_files),
        files(&a.modified_files)
    );
    if facts.user_messages.is_empty() {
        out.push_str(" (none in this history)");
    }
    if facts.omitted > 0 {
        out.push_str(&format!("\n- ({} older ones left out)", facts.omitted));
    }
    for (id, text) in &facts.user_messages {
        out.push_str(&format!("\n- [{id}] {text}"));
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
    use crate::capsule::FileArtifact;

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
        use crate::capsule::{Verification, VerificationOutcome};
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
            },
            None,
            &items,
        );
        for needle in [
            "Read files: src/lexer.rs [e2, e4]",
            "Modified files: (none)",
            "Checks, outcome of the last run: `cargo test` failed [e6]",
            "- [e1] Fix the lexer so that it reads every token",
            "- [e7] yes, go on",
            "### user [e1]\nFix the lexer",
        ] {
            assert!(p.user.contains(needle), "missing {needle}: {}", p.user);
        }
        // A long message is cut to one line in the facts; whole in the history.
        let line = p.user.lines().find(|l| l.starts_with("- [e1]")).unwrap();
        assert!(line.ends_with('…') && line.chars().count() <= MAX_FACT_MESSAGE_CHARS + 10);
        // The system prompt is one constant: every request starts with the same bytes.
        assert_eq!(p.system, SYSTEM_PROMPT);
    }

    #[test]
    fn the_facts_keep_the_latest_user_messages() {
        let history: Vec<ModelMessage> = (0..MAX_FACT_MESSAGES + 5)
            .map(|i| user_message(&format!("e{i}"), &format!("request {i}")))
            .collect();
        let facts = HistoryFacts::of(&history);
        assert_eq!(facts.omitted, 5);
        assert_eq!(facts.user_messages.len(), MAX_FACT_MESSAGES);
        assert_eq!(
            facts.user_messages[0],
            ("e5".to_string(), "request 5".to_string())
        );
        let text = render_facts(&Artifacts::default(), &facts);
        assert!(
            text.contains("- (5 older ones left out)\n- [e5] request 5"),
            "{text}"
        );
        let none = render_facts(&Artifacts::default(), &HistoryFacts::default());
        assert!(none.ends_with("The user's messages, oldest first: (none in this history)"));
    }

    #[test]
    fn chunks_cover_everything_oldest_first_and_fit() {
        let artifacts = Artifacts::default();
        let ctx = PromptContext {
            instructions: None,
            artifacts: &artifacts,
            facts: &HistoryFacts::default(),
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
