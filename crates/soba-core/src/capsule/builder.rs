//! The deterministic local capsule: built from the log alone, no model. It is the fallback the
//! spec names and the default when no summarization model is configured, so it is always
//! marked `quality: degraded`.
//!
//! It is a working state, not a list of facts: the task the user is driving at now, what was
//! done (the agent's wrap-ups, commits, pushes, closed issues), what is in progress and
//! pending, the decisions with their reasons, the next step, and what blocks it. Every item
//! names the entries it came from (`CapsuleState::sources`).
//!
//! One pass over the history indexes calls, results, turns and user messages, so building
//! stays linear in the session's length.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::Regex;

// foldhash, seeded per process: the maps here are keyed by entry ids, call ids and item texts
// of the whole history, where SipHash was a visible share of building a capsule.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

use serde_json::Value;

use super::artifacts::result_outcome;
use super::current::{
    current_work, describe_call, fault_lines, shell_script, standing_failure, usual_cd,
    without_workspace_cd, Action,
};
use super::decisions::stated_decisions;
use super::findings::{
    chosen_option, offered_options, proposal, proposed_section, revises, sentence_before_offer,
    stated_findings,
};
use super::intent::{classify, Intent, UserMessage};
use super::milestones::milestones;
use super::requests::typed_text;
use super::work::{
    capitalise, clip, covers, is_wrap_up, names_no_work, offers, planned_next_steps, reported_done,
    stated_next_steps,
};
use crate::session::capsule::model::{
    Artifacts, CapsuleEntry, CapsuleState, Decision, ErrorFix, Exchange, Verification,
    VerificationOutcome,
};
use crate::session::entry::{blocks_text, Entry, EntryBody, Role, ToolResultEntry};
use crate::tokens::TokenizerKind;

/// Every request keeps at least this many characters of its opening.
pub const PROMPT_OPENING_CHARS: usize = 200;
/// Budget for requests kept in full, newest first, across every roll-forward.
pub const FULL_PROMPTS_BUDGET_TOKENS: u64 = 1000;
/// Requests kept, newest: the agent that continues should know every thing it was asked,
/// at least by its opening; older ones than these live on in the completed work and the log.
const MAX_REQUESTS: usize = 160;
/// The newest requests, kept in full within the budget or by a long opening; older ones keep
/// [`OLDER_REQUEST_CHARS`].
const RECENT_REQUESTS: usize = 10;
const OLDER_REQUEST_CHARS: usize = 100;
/// The goal is stated in a line or two: a longer request keeps its opening here (and stays
/// whole in the requests).
const GOAL_CHARS: usize = 400;
/// Constraints kept, newest: older rules stay in the requests they came from.
const MAX_CONSTRAINTS: usize = 10;
/// Decisions kept, newest.
const MAX_DECISIONS: usize = 8;
/// Completed items kept, newest.
const MAX_COMPLETED: usize = 12;
/// Pending items and next steps kept.
const MAX_STEPS: usize = 10;
/// How many recent tool errors are considered unresolved blockers.
const RECENT_TOOL_RESULTS: usize = 3;
/// Request opening used to say which request a wrap-up answered.
const REQUEST_LABEL_CHARS: usize = 100;
/// Longest completed item.
const MAX_DONE_CHARS: usize = 240;
/// Findings kept, newest: older conclusions were often revised since.
const MAX_FINDINGS: usize = 8;
/// Findings are taken from this many latest turns.
const FINDING_TURNS: usize = 4;
/// Messages whose conclusions are kept: the latest that stated any.
const FINDING_MESSAGES: usize = 4;
/// Errors with their fixes kept, newest.
const MAX_ERRORS: usize = 5;
/// The agent's last message, quoted as where to pick up, up to this many characters.
const LAST_WORDS_CHARS: usize = 600;
/// A last message shorter than this many words is quoted with the message before it.
const SHORT_LAST_WORDS: usize = 15;
/// Said as the next step when the latest request is done and the agent named nothing further.
pub const AWAIT_NEXT_REQUEST: &str =
    "The latest request is done (see Completed); wait for the user's next request.";

fn user_message(e: &Entry) -> Option<UserMessage> {
    match &e.body {
        EntryBody::Message(m) if m.role == Role::User && !m.synthetic => {
            typed_text(&blocks_text(&m.content)).map(|t| classify(&t))
        }
        _ => None,
    }
}

fn opening(text: &str) -> String {
    clip(text, PROMPT_OPENING_CHARS)
}

/// The goal in a line or two: the request's first paragraph, cut at a sentence end near
/// [`GOAL_CHARS`].
fn goal_line(request: &str) -> String {
    let t = request.trim();
    if t.chars().count() <= GOAL_CHARS {
        return t.to_string();
    }
    let head: String = t.chars().take(GOAL_CHARS).collect();
    let cut = head
        .rfind(['.', '!', '?', '\n'])
        .filter(|&i| i >= GOAL_CHARS / 3)
        .map(|i| head[..=i].trim_end().to_string())
        .unwrap_or(head);
    format!("{cut} …")
}

/// What a message asks, for the goal and the work in progress: the user's own words, with
/// what they pasted named after them rather than standing in their place ("[pasted 40 lines
/// of test output]" in mid-sentence says nothing of the task). A message that is only a paste
/// keeps its description.
fn asked(m: &UserMessage) -> String {
    if m.pastes.is_empty() || m.intent == Intent::Paste || m.prose.trim().is_empty() {
        return m.text.clone();
    }
    format!(
        "{} (with what the user pasted: {})",
        m.prose.trim(),
        m.pastes.join("; ")
    )
}

/// A task list snapshot from a task-list tool call (Claude Code TodoWrite, Codex update_plan).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TaskList {
    pub completed: Vec<String>,
    pub active: Vec<String>,
    pub pending: Vec<String>,
}

fn task_list(name: &str, input: &Value) -> Option<TaskList> {
    let (items, text_key) = match name {
        "TodoWrite" | "todo_write" | "todowrite" => (input.get("todos")?.as_array()?, "content"),
        "update_plan" => (input.get("plan")?.as_array()?, "step"),
        _ => return None,
    };
    let mut list = TaskList::default();
    for item in items {
        let Some(text) = item.get(text_key).and_then(Value::as_str) else {
            continue;
        };
        match item
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("pending")
        {
            "completed" | "done" => list.completed.push(text.to_string()),
            "in_progress" | "active" => list.active.push(text.to_string()),
            _ => list.pending.push(text.to_string()),
        }
    }
    Some(list)
}

/// Which check a command is an instance of: its tool and subcommand (`cargo test`, `go test`,
/// `mise run lint`), so a pass of `go test ./...` supersedes a failed `go test ./pkg`.
pub fn check_family(command: &str) -> String {
    let words: Vec<&str> = command.split_whitespace().collect();
    let take = match words.get(1).copied() {
        Some("run" | "run-script" | "exec" | "x" | "-m") => 3,
        _ => 2,
    };
    words
        .iter()
        .take(take)
        .filter(|w| !w.starts_with('-') || **w == "-m")
        .copied()
        .collect::<Vec<_>>()
        .join(" ")
}

/// A list that keeps first-seen order and drops repeats; the set makes a repeat check O(1),
/// so a history of many thousand requests stays linear.
#[derive(Default)]
struct Items {
    items: Vec<String>,
    seen: HashSet<String>,
}

impl Items {
    fn from(v: &[String]) -> Self {
        let mut out = Items::default();
        for i in v {
            out.push(i.clone());
        }
        out
    }

    fn push(&mut self, item: String) -> bool {
        if item.trim().is_empty() || self.seen.contains(&item) {
            return false;
        }
        self.seen.insert(item.clone());
        self.items.push(item);
        true
    }

    fn newest(mut self, n: usize) -> Vec<String> {
        let cut = self.items.len().saturating_sub(n);
        self.items.drain(..cut);
        self.items
    }
}

/// The item → entries map, filled as items are found. Every request of the history becomes a
/// key before the state keeps only the newest, so it is hashed rather than ordered.
#[derive(Default)]
struct Sources(HashMap<String, Vec<String>>);

impl Sources {
    fn add(&mut self, item: &str, entry_id: &str) {
        if entry_id.is_empty() {
            return;
        }
        let ids = self.0.entry(item.to_string()).or_default();
        if !ids.iter().any(|i| i == entry_id) {
            ids.push(entry_id.to_string());
        }
    }

    /// Only the sources of items the state still holds.
    fn keep(mut self, s: &CapsuleState) -> BTreeMap<String, Vec<String>> {
        let mut held: Vec<&str> = vec![s.goal.as_str()];
        for list in [
            &s.requests,
            &s.constraints,
            &s.completed,
            &s.active,
            &s.pending,
            &s.findings,
            &s.current_work,
            &s.blockers,
            &s.next_steps,
        ] {
            held.extend(list.iter().map(String::as_str));
        }
        held.extend(s.decisions.iter().map(|d| d.decision.as_str()));
        held.extend(s.exchanges.iter().map(|x| x.user.as_str()));
        held.extend(s.errors.iter().map(|e| e.error.as_str()));
        held.into_iter()
            .filter_map(|k| self.0.remove_entry(k))
            .collect()
    }
}

/// A user turn: the message that opened it and what the agent said and did in it.
struct Turn<'a> {
    /// The request this turn works on: its own message, or for an approval or an answer to
    /// the agent, the request it continues.
    request: Option<usize>,
    /// The message that opened the turn.
    message: usize,
    /// The last assistant text of the turn, with its entry id.
    last_text: Option<(&'a str, String)>,
    /// Where that text stands in the history.
    last_text_at: usize,
    /// The assistant text before it, when the last one says too little on its own ("Let me
    /// try a different approach:").
    text_before: Option<String>,
    /// Tool calls made after that text.
    calls_after_text: usize,
}

/// What one pass over the history finds.
#[derive(Default)]
struct History<'a> {
    /// User messages with their entry ids, oldest first.
    messages: Vec<(&'a str, UserMessage)>,
    turns: Vec<Turn<'a>>,
    /// Done items: (text, entry id, where in the history it happened), oldest first. Wrap-ups
    /// are found after the pass and milestones during it, so the position keeps them in order.
    done: Vec<(String, &'a str, usize)>,
    decisions: Vec<(Decision, &'a str)>,
    /// The newest task list and its entry.
    tasks: Option<(TaskList, &'a str)>,
    /// Results of calls, by the call's entry id (the verification list points at calls).
    result_of_call_entry: HashMap<&'a str, &'a ToolResultEntry>,
    /// Where each entry with tool calls stands in the history, to tell what came after what.
    call_position: HashMap<&'a str, usize>,
    /// Where each user message stands.
    message_position: Vec<usize>,
    /// The last few results of calls that run no check, for unresolved tool errors.
    recent_results: Vec<(&'a ToolResultEntry, &'a str)>,
    /// Conclusions the agent stated, oldest first, with the number of turns begun by then.
    findings: Vec<(String, &'a str, usize)>,
    /// What the agent last offered or proposed, for a "yes" to approve.
    open_proposal: Option<Proposal>,
    /// Every proposal since the user last set the task, oldest first.
    proposals: Vec<String>,
    /// Options the agent put to the user that no reply has chosen from yet.
    open_options: Option<(Vec<(String, String)>, &'a str)>,
    /// Checks that failed and then passed: the error and what the agent said after it.
    errors: Vec<(ErrorFix, &'a str)>,
    /// The latest proposal or option the user approved, with the index of the approving
    /// message.
    approved: Option<(usize, String)>,
    /// The agent's last text before the span's first user message: the end of a turn the
    /// previous capsule holds the start of.
    leading_text: Option<String>,
    /// The calls of the latest turn, oldest first: (call id, tool name, input, position).
    last_turn_calls: Vec<(&'a str, &'a str, &'a Value, usize)>,
    /// Results by call id.
    result_of_call: HashMap<&'a str, &'a ToolResultEntry>,
}

/// What a "yes" would approve.
enum Proposal {
    /// An offer or recommendation that names its work.
    Offer(String),
    /// The sentence before an offer that names no work of its own ("Shall I proceed?").
    Vague(String),
}

/// A check's failed run, until a pass of the same check fixes it.
struct FailedRun<'a> {
    error: String,
    entry_id: &'a str,
    /// The agent's first words after the failure: most often its diagnosis.
    said_after: Option<String>,
}

/// One pass over `entries`: calls are indexed by id as they come, so each result finds its
/// call in O(1).
fn read_history<'a>(entries: &[&'a Entry], checks: &[&str]) -> History<'a> {
    struct Call<'a> {
        entry_id: &'a str,
        script: Option<String>,
        runs_a_check: bool,
    }
    let mut calls: HashMap<&'a str, Call<'a>> = HashMap::default();
    let mut h = History::default();
    let mut failed_runs: HashMap<String, FailedRun<'a>> = HashMap::default();
    // The request that the latest turns continue.
    let mut current_request: Option<usize> = None;
    for (position, e) in entries.iter().enumerate() {
        match &e.body {
            EntryBody::Message(m) if m.role == Role::User && !m.synthetic => {
                let Some(msg) = user_message(e) else { continue };
                // "yes, option 2": the choice is a decision, with the option's own text; a plain
                // "yes" to what the agent offered or proposed decides that.
                let chosen = h
                    .open_options
                    .take()
                    .and_then(|(options, _)| {
                        chosen_option(&msg.prose, &options).map(|c| (c.to_string(), "chose", true))
                    })
                    .or_else(|| {
                        (msg.intent == Intent::Approval).then_some(())?;
                        let (p, named) = match h.open_proposal.take()? {
                            Proposal::Offer(p) => (p, true),
                            // "Shall I proceed?" after questions and answers: the proposal
                            // those questions were about, the first since the task was set.
                            Proposal::Vague(p) => {
                                (h.proposals.first().cloned().unwrap_or(p), false)
                            }
                        };
                        h.proposals.clear();
                        Some((p, "approved", named))
                    });
                // A new task ends what was proposed for the last one; a reply that still asks
                // ("…, right?") is part of the discussion.
                if msg.sets_goal() && !msg.prose.trim_end().ends_with('?') {
                    h.open_proposal = None;
                    h.proposals.clear();
                }
                // Only work the agent named: a guess at what "Shall I proceed?" referred to
                // decides nothing about the task.
                if let Some((decision, _, true)) = &chosen {
                    h.approved = Some((h.messages.len(), decision.clone()));
                }
                if let Some((decision, how, _)) = chosen {
                    h.decisions.push((
                        Decision {
                            decision,
                            rationale: format!(
                                "the user {how} it (\"{}\")",
                                clip(&one_line(&msg.prose), 80)
                            ),
                        },
                        &e.id,
                    ));
                }
                let i = h.messages.len();
                let continues = matches!(msg.intent, Intent::Approval)
                    || (matches!(msg.intent, Intent::Preference | Intent::Request)
                        && !msg.sets_goal()
                        && current_request.is_some());
                if !continues && msg.intent != Intent::Paste {
                    current_request = Some(i);
                }
                h.messages.push((&e.id, msg));
                h.message_position.push(position);
                h.last_turn_calls.clear();
                h.turns.push(Turn {
                    request: current_request,
                    message: i,
                    last_text: None,
                    last_text_at: 0,
                    text_before: None,
                    calls_after_text: 0,
                });
            }
            EntryBody::Message(m) if m.role == Role::Assistant => {
                let text = blocks_text(&m.content);
                // Claude Code's placeholder after a local command (`/exit`) is no reply.
                if !text.trim().is_empty() && text.trim() != "No response requested." {
                    for d in stated_decisions(&text) {
                        h.decisions.push((d, &e.id));
                    }
                    for f in stated_findings(&text) {
                        h.findings.push((f, &e.id, h.turns.len()));
                    }
                    let options = offered_options(&text);
                    if !options.is_empty() {
                        h.open_options = Some((options, &e.id));
                    }
                    // What a "yes" would approve: the offer, or what a vague offer ("Shall I
                    // proceed?") refers to, which may be a message or two back.
                    let offered = offers(&text).into_iter().next();
                    let proposed = match offered {
                        Some(o) if !names_no_work(&o) => Some(Proposal::Offer(capitalise(&o))),
                        Some(_) => proposed_section(&text)
                            .or_else(|| proposal(&text))
                            .or_else(|| sentence_before_offer(&text))
                            .map(Proposal::Vague),
                        None => proposal(&text).map(Proposal::Offer),
                    };
                    if let Some(p) = proposed {
                        let (Proposal::Offer(text) | Proposal::Vague(text)) = &p;
                        h.proposals.push(text.clone());
                        h.open_proposal = Some(p);
                    }
                    for run in failed_runs.values_mut() {
                        if run.said_after.is_none() {
                            run.said_after = first_words(&text);
                        }
                    }
                    match h.turns.last_mut() {
                        Some(t) => {
                            t.text_before = t.last_text.take().map(|(_, before)| before);
                            t.last_text = Some((&e.id, text));
                            t.last_text_at = position;
                            t.calls_after_text = 0;
                        }
                        None => h.leading_text = Some(text),
                    }
                }
                for (call_id, name, input) in e.tool_calls() {
                    h.call_position.insert(&e.id, position);
                    h.last_turn_calls.push((call_id, name, input, position));
                    if let Some(list) = task_list(name, input) {
                        h.tasks = Some((list, &e.id));
                    }
                    let script = shell_script(input);
                    let runs_a_check = script
                        .as_deref()
                        .is_some_and(|s| checks.iter().any(|c| s.contains(c)));
                    calls.insert(
                        call_id,
                        Call {
                            entry_id: &e.id,
                            script,
                            runs_a_check,
                        },
                    );
                    if let Some(t) = h.turns.last_mut() {
                        t.calls_after_text += 1;
                    }
                }
            }
            EntryBody::ToolResult(r) => {
                let Some(call) = calls.get(r.call_id.as_str()) else {
                    continue;
                };
                h.result_of_call_entry.insert(call.entry_id, r);
                h.result_of_call.insert(r.call_id.as_str(), r);
                if let Some(script) = &call.script {
                    // The outcome scans the whole output: read it only for a script whose
                    // outcome decides something (a milestone, a check), once.
                    let done = milestones(script);
                    let outcome = if done.is_empty() && !call.runs_a_check {
                        VerificationOutcome::Unknown
                    } else {
                        result_outcome(r)
                    };
                    if outcome == VerificationOutcome::Passed {
                        for m in done {
                            h.done.push((m, call.entry_id, position));
                        }
                    }
                    if call.runs_a_check {
                        if let Some(check) = checks.iter().find(|c| script.contains(*c)) {
                            let family = check_family(check);
                            match outcome {
                                VerificationOutcome::Failed => {
                                    let line = first_error_line(&blocks_text(&r.content));
                                    let error = match line {
                                        Some(l) => format!("`{check}` failed: {l}"),
                                        None => format!("`{check}` failed"),
                                    };
                                    failed_runs.insert(
                                        family,
                                        FailedRun {
                                            error,
                                            entry_id: call.entry_id,
                                            said_after: None,
                                        },
                                    );
                                }
                                VerificationOutcome::Passed => {
                                    if let Some(run) = failed_runs.remove(&family) {
                                        // The agent's words after the failure say how it
                                        // was fixed only when they speak of it.
                                        let fix = match run
                                            .said_after
                                            .filter(|w| speaks_of(w, &run.error))
                                        {
                                            Some(w) => format!("{w} — then `{check}` passed"),
                                            None => format!("`{check}` passed on a later run"),
                                        };
                                        h.errors.push((
                                            ErrorFix {
                                                error: run.error,
                                                fix,
                                            },
                                            run.entry_id,
                                        ));
                                    }
                                }
                                VerificationOutcome::Unknown => {}
                            }
                        }
                    }
                }
                if !call.runs_a_check && !is_no_problem(r, call.script.as_deref()) {
                    h.recent_results.push((r, call.entry_id));
                    if h.recent_results.len() > RECENT_TOOL_RESULTS {
                        h.recent_results.remove(0);
                    }
                }
            }
            _ => {}
        }
    }
    // Wrap-ups: what each finished turn reports done, labelled with the request it answered.
    for turn in &h.turns {
        let Some((id, text)) = &turn.last_text else {
            continue;
        };
        if turn.calls_after_text > 0 || !is_wrap_up(text) {
            continue;
        }
        let reported = reported_done(text);
        if reported.is_empty() {
            continue;
        }
        let label = turn
            .request
            .map(|r| clip(&one_line(&h.messages[r].1.text), REQUEST_LABEL_CHARS));
        let what = reported.join("; ");
        let item = match label {
            Some(l) => format!("{l} → {what}"),
            None => what,
        };
        h.done
            .push((clip(&item, MAX_DONE_CHARS), id, turn.last_text_at));
    }
    // In the order they happened, so that the newest kept are the newest done.
    h.done.sort_by_key(|&(_, _, at)| at);
    h
}

/// A conclusion that says it was checked.
static CONFIRMED: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"(?i)(?-u:\b)(?:confirm(?:ed|s)|root cause is|verified that)(?-u:\b)")
        .expect("valid regex")
});

/// Words that make a rule stand beyond the request it came with.
static STANDING_RULE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"(?i)(?-u:\b)(?:always|never|must|mustn't|under no circumstances|from now on|in general|any time|every time|only (?:ever )?want|(?:don't|do not) ever)(?-u:\b)")
        .expect("valid regex")
});

static START_IMPLEMENTING: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(
        r"(?i)\b(?:start|begin|go ahead(?: and)?|proceed(?: with)?)\s+(?:implementing|implementation|to implement|with the implementation|the implementation)\b|\bimplement (?:it|this|that|the plan)\b",
    )
    .expect("valid regex")
});

static FINAL_STEP: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(
        r"(?i)^(?:when|once|after)\s+(?:you'?ve|you have|you are|you're|you|it'?s|it is|everything is|all is)\s+(?:completed|finished|done|complete|ready)\b",
    )
    .expect("valid regex")
});

/// Steps the user asked for at the end of the work: "When you've completed your work, you
/// MUST submit your changes as a git patch."
fn final_steps(prose: &str) -> Vec<String> {
    prose
        .lines()
        .flat_map(|l| l.split_inclusive(". "))
        .map(|s| s.trim().trim_start_matches(['-', '*', '•']).trim())
        .filter(|s| FINAL_STEP.is_match(s))
        .map(|s| format!("Finally: {}", clip(s, PROMPT_OPENING_CHARS)))
        .collect()
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A decision's identity: its words, without the "I'll" / "we'll" that open it.
fn decision_key(d: &str) -> String {
    let lower = d.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let skip = words
        .iter()
        .take_while(|w| {
            matches!(
                **w,
                "i" | "ll" | "we" | "will" | "let" | "s" | "going" | "to" | "m" | "so" | "then"
            )
        })
        .count();
    words[skip..].join(" ")
}

/// Build the narrative state from the history being folded, the previous capsule and the facts.
pub fn build_state(
    tokenizer: TokenizerKind,
    previous: Option<&CapsuleEntry>,
    summarized: &[&Entry],
    artifacts: &Artifacts,
) -> CapsuleState {
    let prev = previous.map(|p| &p.state);
    let mut sources = Sources::default();
    if let Some(p) = prev {
        for (k, v) in &p.sources {
            for id in v {
                sources.add(k, id);
            }
        }
    }
    let checks: Vec<&str> = artifacts
        .verification
        .iter()
        .map(|v| v.command.as_str())
        .collect();
    let h = read_history(summarized, &checks);

    // Requests: the previous capsule's, then this span's (approvals left out, pastes
    // described); the newest in full within one budget for the whole rolled-forward list.
    let mut all = Items::from(&prev.map(|p| p.requests.clone()).unwrap_or_default());
    for (id, m) in &h.messages {
        if m.intent != Intent::Approval {
            all.push(m.text.clone());
            sources.add(&m.text, id);
        }
    }
    let all = all.newest(MAX_REQUESTS);
    let mut budget = FULL_PROMPTS_BUDGET_TOKENS;
    let mut requests: Vec<String> = Vec::with_capacity(all.len());
    for (age, p) in all.iter().rev().enumerate() {
        let t = tokenizer.count(p);
        if age < RECENT_REQUESTS && t <= budget {
            budget -= t;
            requests.push(p.clone());
        } else {
            budget = 0;
            let o = if age < RECENT_REQUESTS {
                opening(p)
            } else {
                clip(p, OLDER_REQUEST_CHARS)
            };
            if let Some(ids) = sources.0.get(p).cloned() {
                for id in ids {
                    sources.add(&o, &id);
                }
            }
            requests.push(o);
        }
    }
    requests.reverse();
    requests.dedup();

    // Goal: the latest message of this span that sets one, else the previous capsule's, else
    // the latest request of any kind. A plan the user then told the agent to implement is
    // the implementation of that plan.
    let goal_at = h.messages.iter().rposition(|(_, m)| m.sets_goal());
    let implementing = goal_at.is_some_and(|g| {
        h.messages[g + 1..]
            .iter()
            .any(|(_, m)| START_IMPLEMENTING.is_match(&m.prose))
    });
    // "yeah, do it all" after the agent laid out the release steps: what was approved is the
    // task now, in the agent's words.
    let approved_goal_at = h
        .approved
        .as_ref()
        .filter(|(at, _)| goal_at.is_none_or(|g| *at > g))
        .map(|(at, _)| *at);
    let approved_goal = h
        .approved
        .as_ref()
        .filter(|(at, _)| goal_at.is_none_or(|g| *at > g))
        .map(|(at, what)| {
            let (id, m) = &h.messages[*at];
            let g = format!(
                "{} (the agent's proposal, which the user approved: \"{}\")",
                capitalise(what),
                clip(&one_line(&m.prose), 80)
            );
            sources.add(&g, id);
            g
        });
    let goal = approved_goal
        .or_else(|| {
            goal_at
                .map(|g| &h.messages[g])
                .or_else(|| {
                    prev.is_none()
                        .then(|| {
                            h.messages
                                .iter()
                                .rev()
                                .find(|(_, m)| m.intent == Intent::Request)
                        })
                        .flatten()
                })
                .map(|(id, m)| {
                    let g = goal_line(&asked(m));
                    let g = if implementing {
                        format!("Implement the plan asked for here: {g}")
                    } else if m.intent == Intent::Paste {
                        // A pasted error with nothing said around it asks for it to be fixed.
                        format!("Fix the error the user pasted: {g}")
                    } else {
                        g
                    };
                    sources.add(&g, id);
                    g
                })
                .or_else(|| {
                    prev.map(|p| p.goal.trim().to_string())
                        .filter(|g| !g.is_empty())
                })
                .or_else(|| {
                    h.messages.first().map(|(id, m)| {
                        let g = goal_line(&asked(m));
                        sources.add(&g, id);
                        g
                    })
                })
        })
        .unwrap_or_default();

    // A goal that gave way to a newer one rolls forward among the requests, at least by its
    // opening, however many newer requests came since.
    if let Some(earlier) = prev.map(|p| p.goal.trim()).filter(|g| !g.is_empty()) {
        let head: String = earlier.chars().take(40).collect();
        if earlier != goal && !requests.iter().any(|r| r.starts_with(&head)) {
            if requests.len() >= MAX_REQUESTS {
                requests.remove(0);
            }
            let item = opening(earlier);
            if let Some(ids) = prev.and_then(|p| p.sources.get(earlier)) {
                for id in ids {
                    sources.add(&item, id);
                }
            }
            requests.insert(0, item);
        }
    }

    // Constraints: rules, preferences and corrections the user stated; never a question.
    let mut constraints = Items::from(&prev.map(|p| p.constraints.clone()).unwrap_or_default());
    // A rule stated inside a request ("don't fix anything, just validate it works") holds for
    // that request: once the user sets a new goal it is history, unless it says always or never.
    let last_goal = h.messages.iter().rposition(|(_, m)| m.sets_goal());
    for (i, (id, m)) in h.messages.iter().enumerate() {
        let superseded =
            (m.intent == Intent::Request || m.sets_goal()) && last_goal.is_some_and(|g| g > i);
        for c in m.constraints() {
            if superseded
                && !STANDING_RULE.is_match(&c)
                && !super::requests::STANDING_PREFERENCE.is_match(&c)
            {
                continue;
            }
            sources.add(&c, id);
            constraints.push(c);
        }
    }
    let constraints = constraints.newest(MAX_CONSTRAINTS);

    // Done: what the previous capsule said, the agent's wrap-ups, commits and the like, and a
    // task list's completed items.
    // A task list's items come first: the wrap-ups and commits that follow them are newer.
    let mut completed = Items::from(&prev.map(|p| p.completed.clone()).unwrap_or_default());
    if let Some((t, id)) = &h.tasks {
        for c in &t.completed {
            sources.add(c, id);
            completed.push(c.clone());
        }
    }
    for (item, id, _) in &h.done {
        sources.add(item, id);
        completed.push(item.clone());
    }
    let completed = completed.newest(MAX_COMPLETED);
    let is_done = |step: &str| completed.iter().any(|c| c == step || covers(c, step));

    // The last turn: finished (its wrap-up names what is next, or offers), or in progress.
    let last_turn = h.turns.last();
    // A turn is finished when its last message wraps the work up, or answers the question
    // that opened it with no tool call after the answer.
    // A turn whose last words put a question to the user, with no call after them, waits for
    // the user: whatever it offered or asked is theirs to answer.
    let in_progress = last_turn.is_some_and(|t| {
        let answered = h.messages[t.message].1.intent == Intent::Question;
        t.calls_after_text > 0
            || t.last_text.as_ref().is_none_or(|(_, text)| {
                !is_wrap_up(text) && !answered && asks_the_user(text).is_none()
            })
    });
    // A goal whose request the agent reported done, which the user has moved past, is not the
    // task any more. While the agent works on (or owes an answer to) a later message, that
    // message is the goal, with the finished task as its context: "did you update the docs
    // too?" after "Done! I've created the theme". Once the user's questions about it are all
    // answered, it stays the subject, marked done, so the agent that continues does not redo it.
    // The newest turn is open while the agent works on it or its last words report nothing
    // done ("only session A was condensed. Let me check why.").
    let latest_open = in_progress
        || last_turn.is_some_and(|t| {
            t.last_text
                .as_ref()
                .is_none_or(|(_, text)| !is_wrap_up(text))
        });
    let goal = match (
        goal_at,
        h.turns.iter().position(|t| Some(t.message) == goal_at),
    ) {
        (Some(g), Some(goal_turn))
            if goal_turn + 1 < h.turns.len()
                && goal.contains(&goal_line(&asked(&h.messages[g].1))) =>
        {
            let t = &h.turns[goal_turn];
            let wrapped_up = t.calls_after_text == 0
                && t.last_text
                    .as_ref()
                    .is_some_and(|(_, text)| is_wrap_up(text));
            let later = &h.turns[goal_turn + 1..];
            let asked_since = later
                .iter()
                .all(|t| h.messages[t.message].1.intent == Intent::Question);
            let (latest_id, latest) = &h.messages[later[later.len() - 1].message];
            if !wrapped_up {
                goal
            } else if !in_progress && asked_since {
                let done = format!(
                    "{goal} (done; since then the user asked about it, latest: \"{}\")",
                    clip(&one_line(&latest.text), 160)
                );
                sources.add(&done, h.messages[g].0);
                sources.add(&done, latest_id);
                done
            } else if latest_open && latest.intent != Intent::Approval {
                let follow_up = format!(
                    "{} (a follow-up to the finished task: \"{}\")",
                    goal_line(&asked(latest)),
                    clip(&one_line(&goal), 160)
                );
                sources.add(&follow_up, h.messages[g].0);
                sources.add(&follow_up, latest_id);
                follow_up
            } else {
                goal
            }
        }
        // The previous capsule's goal, which its span reported done ("Can we add the hint?
        // → Done."), with the agent now at work on a newer message of the user's.
        (None, _) if latest_open && approved_goal_at.is_none() => {
            let reported_done = completed.iter().any(|c| {
                c.split_once(" → ").is_some_and(|(request, _)| {
                    let request = request.trim_end_matches('…').trim();
                    !request.is_empty() && one_line(&goal).starts_with(request)
                })
            });
            match last_turn.map(|t| &h.messages[t.message]) {
                Some((latest_id, latest)) if reported_done && latest.intent != Intent::Approval => {
                    let follow_up = format!(
                        "{} (a follow-up to the finished task: \"{}\")",
                        goal_line(&asked(latest)),
                        clip(&one_line(&goal), 160)
                    );
                    if let Some(ids) = prev.and_then(|p| p.sources.get(goal.as_str())) {
                        for id in ids {
                            sources.add(&follow_up, id);
                        }
                    }
                    sources.add(&follow_up, latest_id);
                    follow_up
                }
                _ => goal,
            }
        }
        _ => goal,
    };
    let last_text = last_turn.and_then(|t| t.last_text.as_ref());
    let last_request = last_turn
        .and_then(|t| t.request)
        .map(|r| (&h.messages[r].0, &h.messages[r].1));
    // What the turn in progress works on: its own message when it asks for something (a
    // correction, a question, a pasted error), else the request it continues.
    let focus = last_turn
        .map(|t| (&h.messages[t.message].0, &h.messages[t.message].1))
        .filter(|(_, m)| {
            m.intent != Intent::Approval && (m.intent != Intent::Paste || m.sets_goal())
        })
        .or(last_request);

    let mut active = Items::default();
    let mut pending = Items::default();
    let mut next_steps = Items::default();
    if let Some((t, id)) = &h.tasks {
        for a in &t.active {
            sources.add(a, id);
            active.push(a.clone());
        }
        for p in &t.pending {
            sources.add(p, id);
            pending.push(p.clone());
        }
    }
    if in_progress {
        if let Some((id, m)) = focus {
            let item = format!("In progress: {}", one_line(&goal_line(&asked(m))));
            sources.add(&item, id);
            active.push(item);
        }
    }
    // A question the agent has not answered yet.
    if let Some((id, m)) = h.messages.last() {
        let answered = last_turn.is_some_and(|t| t.last_text.is_some());
        if m.intent == Intent::Question && !answered {
            let item = format!("Answer the user's question: {}", one_line(&m.text));
            sources.add(&item, id);
            pending.push(item);
        }
    }
    if let Some((id, text)) = last_text {
        if !in_progress {
            let offered = offers(text);
            // "these steps" say what only beside the request they answer.
            let about = focus
                .map(|(_, m)| {
                    format!(
                        " (for the user's request \"{}\")",
                        clip(&one_line(&m.text), 120)
                    )
                })
                .unwrap_or_default();
            for o in &offered {
                let item = if names_no_work(o) || o.contains("these") || o.contains("this") {
                    format!("Offered to {o}{about}; waiting for the user's answer")
                } else {
                    format!("Offered to {o}; waiting for the user's answer")
                };
                sources.add(&item, id);
                pending.push(item);
            }
            if let Some(q) = asks_the_user(text).filter(|_| offered.is_empty()) {
                let item = format!("The agent asked the user \"{q}\"; waiting for the answer");
                sources.add(&item, id);
                pending.push(item);
            }
        }
        // Steps the last text names are still ahead only when no call came after it: calls
        // after it acted on them, and the step built from those calls quotes the plan whole.
        let acted_on = last_turn.is_some_and(|t| {
            h.last_turn_calls.iter().any(|(call_id, _, _, at)| {
                *at >= t.last_text_at && h.result_of_call.contains_key(call_id)
            })
        });
        let steps = if acted_on {
            Vec::new()
        } else if in_progress {
            stated_next_steps(text)
        } else {
            planned_next_steps(text)
        };
        for step in steps {
            if !names_no_work(&step) {
                sources.add(&step, id);
                next_steps.push(step);
            }
        }
    }
    for a in active.items.iter().chain(pending.items.iter()) {
        if !a.starts_with("In progress: ") {
            next_steps.push(a.clone());
        }
    }
    // A turn cut in progress: after the step at hand, the rest of what was asked — unless a
    // check failed since it was asked, which is then what stands between the work and done.
    let asked_at = last_turn.map(|t| h.message_position[t.message]);
    let failed_since = artifacts.verification.iter().any(|v| {
        v.outcome == VerificationOutcome::Failed
            && h.call_position
                .get(v.entry_id.as_str())
                .is_some_and(|&p| asked_at.is_some_and(|a| p > a))
    });
    // Current work: what the agent did after its last words to the user, read from the calls
    // and what they printed; when it spoke last, the turn's last calls before those words.
    let words_at = last_turn
        .filter(|t| t.last_text.is_some())
        .map(|t| t.last_text_at);
    let describe = |calls: &[(&str, &str, &Value, usize)]| -> Vec<(Action, usize)> {
        calls
            .iter()
            .map(|(call_id, name, input, at)| {
                let result = h.result_of_call.get(call_id).copied();
                (describe_call(name, input, result), *at)
            })
            .collect()
    };
    // A task list's update is no action on the work: the list is the capsule's own section.
    let work_calls: Vec<(&str, &str, &Value, usize)> = h
        .last_turn_calls
        .iter()
        .filter(|(_, name, input, _)| task_list(name, input).is_none())
        .copied()
        .collect();
    let turn_actions = describe(&work_calls);
    let after_words: Vec<Action> = turn_actions
        .iter()
        // A call in the same message as the words comes after them: they announce it.
        .filter(|(_, at)| words_at.is_none_or(|w| *at >= w))
        .map(|(a, _)| a.clone())
        .collect();
    let failure_after_words = standing_failure(&after_words).cloned();
    // Calls cut off before their result may not have happened: a plan followed only by them
    // is still ahead.
    let acted_since_words = after_words.iter().any(|a| a.finished);
    // A finished turn's work is in Completed; the current work is that of a turn in progress.
    let scripts: Vec<String> = work_calls
        .iter()
        .filter_map(|(_, _, input, _)| shell_script(input))
        .collect();
    let workspace = usual_cd(scripts.iter().map(String::as_str));
    let current_work = if !in_progress {
        Vec::new()
    } else {
        current_work(
            last_text.map(|(_, t)| t.as_str()),
            &after_words,
            &turn_actions
                .iter()
                .map(|(a, _)| a.clone())
                .collect::<Vec<_>>(),
            workspace.as_deref(),
        )
    };
    let current_source = last_turn
        .and_then(|t| t.last_text.as_ref().map(|(id, _)| *id))
        .or_else(|| h.messages.last().map(|(id, _)| *id));
    if let Some(id) = current_source {
        for line in &current_work {
            sources.add(line, id);
        }
    }
    // The next step from where the work truly stands: a failure after the agent's last words
    // is what to fix; a plan the calls since began is carried on from the last action, not
    // started again; a plan no call followed yet is quoted as where to pick up.
    let picked_up = match (in_progress, last_text, &failure_after_words) {
        (_, _, Some(failed)) => {
            let step = format!(
                "Fix what made the last run fail (it ran after the agent's last words): `{}` — \"{}\"",
                clip(failed.command.as_deref().unwrap_or_default(), 160),
                failed.failure.as_deref().unwrap_or_default()
            );
            if let Some(id) = current_source {
                sources.add(&step, id);
            }
            Some(step)
        }
        (true, Some((id, text)), None) if acted_since_words => {
            let last_action = without_workspace_cd(
                &after_words[after_words.len() - 1].line,
                workspace.as_deref(),
            );
            // A commit last closes the plan: what is left is the next piece of the work.
            let committed = after_words.last().is_some_and(|a| {
                a.finished
                    && a.failure.is_none()
                    && a.command
                        .as_deref()
                        .is_some_and(|c| c.contains("git commit"))
            });
            let step = if committed {
                format!(
                    "The agent carried out its plan \"{}\" and committed it (last action: {last_action}): go on to the next piece of the work, without redoing it",
                    clip_start(&one_line(text), LAST_WORDS_CHARS / 2)
                )
            } else {
                format!(
                    "The agent acted on its plan \"{}\" (last action: {last_action}): check what that left undone and carry on from there, without redoing it",
                    clip_start(&one_line(text), LAST_WORDS_CHARS / 2)
                )
            };
            sources.add(&step, id);
            Some(step)
        }
        (true, Some((id, text)), None) => {
            let last = one_line(text);
            let words = match last_turn.and_then(|t| t.text_before.as_deref()) {
                Some(before) if last.split_whitespace().count() < SHORT_LAST_WORDS => {
                    format!("{} … {last}", clip(&one_line(before), LAST_WORDS_CHARS / 2))
                }
                _ => last,
            };
            // The whole message is quoted under the recent conversation; its end is where the
            // agent stood, and no call has acted on it yet.
            let step = format!(
                "Pick up where the agent's last message left off: \"{}\"",
                clip_start(&words, LAST_WORDS_CHARS)
            );
            sources.add(&step, id);
            Some(step)
        }
        _ => None,
    };
    // The request the turn works on, after the agent's words: what "done" means for it —
    // while it is open. A question is not: one still unanswered has its own step, and one the
    // agent answered and then changed files after was taken up as work the current work shows.
    let question_open_or_moved_past = focus.is_some_and(|(_, m)| {
        m.intent == Intent::Question
            && (last_turn.is_none_or(|t| t.last_text.is_none())
                || after_words
                    .iter()
                    .chain(turn_actions.iter().map(|(a, _)| a))
                    .any(|a| {
                        a.edits
                            || a.command
                                .as_deref()
                                .is_some_and(|c| c.contains("git commit"))
                    }))
    });
    if in_progress && !failed_since && failure_after_words.is_none() && !question_open_or_moved_past
    {
        if let Some((id, m)) = focus {
            let step = format!("Continue: {}", one_line(&goal_line(&asked(m))));
            sources.add(&step, id);
            next_steps.push(step);
        }
    }
    // What the user said to do once the work is done ("When you've completed your work, you
    // MUST submit …"), until it is.
    if in_progress {
        // A message whose own turn ended on a wrap-up had its "finally" done in that turn.
        let wrapped_up = |i: usize| {
            h.turns.iter().any(|t| {
                t.message == i
                    && t.calls_after_text == 0
                    && t.last_text
                        .as_ref()
                        .is_some_and(|(_, text)| is_wrap_up(text))
            })
        };
        for (i, (id, m)) in h.messages.iter().enumerate() {
            if wrapped_up(i) {
                continue;
            }
            for step in final_steps(&m.prose) {
                sources.add(&step, id);
                next_steps.push(step);
            }
        }
    }

    // Checks: the last outcome of each; a failure that a later pass of the same check
    // superseded blocks nothing.
    // The verification list is ordered by each check's last run, so "later" is "after it".
    // Where the request the latest turn works on was asked.
    let request_at = last_turn
        .and_then(|t| t.request.or(Some(t.message)))
        .map(|r| h.message_position[r]);
    let failing: Vec<&Verification> = artifacts
        .verification
        .iter()
        .enumerate()
        .filter(|(i, v)| {
            let family = check_family(&v.command);
            // A failure from before the task at hand, with files edited since, is history:
            // it stays in the checks, marked, but blocks nothing and asks for no step.
            let ran_for_this_task = request_at.is_none_or(|r| {
                h.call_position
                    .get(v.entry_id.as_str())
                    .is_none_or(|&p| p > r)
            });
            v.outcome == VerificationOutcome::Failed
                && (!v.edited_since || ran_for_this_task)
                && !artifacts.verification[i + 1..].iter().any(|w| {
                    w.outcome == VerificationOutcome::Passed && check_family(&w.command) == family
                })
        })
        .map(|(_, v)| v)
        .collect();
    let mut blockers = Items::default();
    for v in &failing {
        let item = match failure_line(&h, &v.entry_id) {
            Some(d) => format!("`{}` fails: {d}", v.command),
            None => format!("`{}` fails", v.command),
        };
        let item = if v.edited_since {
            format!("{item} ({NOT_RERUN})")
        } else {
            item
        };
        sources.add(&item, &v.entry_id);
        blockers.push(item);
        // A check the agent's last words turned away from ("the build fails on Cython; let me
        // try a different approach") stays a blocker, but making it pass is a dead end.
        let ran_at = h.call_position.get(v.entry_id.as_str()).copied();
        let turned_away = words_at.is_some_and(|w| ran_at.is_some_and(|r| r < w))
            && last_text.is_some_and(|(_, t)| turns_away(t));
        if !turned_away {
            let step = format!("Make `{}` pass", v.command);
            sources.add(&step, &v.entry_id);
            next_steps.push(step);
        }
    }
    for (item, id) in recent_tool_errors(&h) {
        sources.add(&item, id);
        blockers.push(item);
    }

    // Nothing newer named a step: the previous capsule's, less those done since.
    if next_steps.items.is_empty() {
        let passed = |step: &str| {
            artifacts.verification.iter().any(|v| {
                v.outcome == VerificationOutcome::Passed
                    && step == format!("Make `{}` pass", v.command)
            })
        };
        for s in prev.map(|p| p.next_steps.clone()).unwrap_or_default() {
            if !is_done(&s) && !passed(&s) && s != AWAIT_NEXT_REQUEST {
                next_steps.push(s);
            }
        }
    }
    if pending.items.is_empty() && h.tasks.is_none() {
        for s in prev.map(|p| p.pending.clone()).unwrap_or_default() {
            if !is_done(&s) && h.messages.is_empty() {
                pending.push(s);
            }
        }
    }
    if let Some(step) = picked_up {
        next_steps.items.insert(0, step.clone());
        next_steps.seen.insert(step);
    }
    if next_steps.items.is_empty() && (!h.messages.is_empty() || prev.is_some()) {
        next_steps.push(AWAIT_NEXT_REQUEST.to_string());
    }

    // Findings: what the agent concluded, newest; options it put to the user and nobody
    // chose from yet.
    let mut findings = Items::from(&prev.map(|p| p.findings.clone()).unwrap_or_default());
    // Only the latest turns' conclusions: older ones were often revised since, and the agent
    // that continues needs where the work stands, not its history.
    let recent_turns = h.turns.len().saturating_sub(FINDING_TURNS);
    // Within a long turn too: a debugging turn states guesses before the cause it confirms,
    // so only the messages that concluded last count.
    // A cause the agent confirmed, or a later "actually, …" that takes back its guesses,
    // replaces what it concluded before.
    let confirmed_at = h
        .findings
        .iter()
        .rposition(|(f, _, _)| CONFIRMED.is_match(f) || revises(f))
        .unwrap_or(0);
    let findings_since = &h.findings[confirmed_at..];
    let mut concluding: Vec<&str> = Vec::new();
    for (_, id, _) in findings_since.iter().rev() {
        if !concluding.contains(id) {
            if concluding.len() == FINDING_MESSAGES {
                break;
            }
            concluding.push(id);
        }
    }
    // Newest first, so that of two findings saying the same thing the later one stays.
    let mut kept: Vec<(&String, &str)> = Vec::new();
    for (f, id, _) in findings_since
        .iter()
        .rev()
        .filter(|(_, id, t)| *t > recent_turns && concluding.contains(id))
    {
        if !kept.iter().any(|(k, _)| says_the_same(k, f)) {
            kept.push((f, id));
        }
    }
    for (f, id) in kept.into_iter().rev() {
        sources.add(f, id);
        findings.push(f.clone());
    }
    if let Some((options, id)) = &h.open_options {
        let listed: Vec<String> = options.iter().map(|(l, t)| format!("{l}) {t}")).collect();
        let item = format!(
            "Options put to the user, not answered yet: {}",
            listed.join("; ")
        );
        sources.add(&item, id);
        findings.push(item);
    }
    let findings = findings.newest(MAX_FINDINGS);

    // Errors met and fixed: a check that failed and then passed, with what the agent said.
    // Each says what the check's last run says: one fixed once and failing again is not fixed.
    let mut errors: Vec<ErrorFix> = Vec::new();
    for e in prev.map(|p| p.errors.clone()).unwrap_or_default() {
        let agreed = agree_with_last_run(e.clone(), &artifacts.verification);
        if agreed.error != e.error {
            for id in sources.0.get(&e.error).cloned().unwrap_or_default() {
                sources.add(&agreed.error, &id);
            }
        }
        errors.push(agreed);
    }
    for (e, id) in &h.errors {
        let e = agree_with_last_run(e.clone(), &artifacts.verification);
        errors.retain(|x| x.error != e.error);
        sources.add(&e.error, id);
        errors.push(e);
    }
    let n = errors.len().saturating_sub(MAX_ERRORS);
    errors.drain(..n);

    // Decisions with the reason the text gave, each once.
    let mut decisions: Vec<Decision> = prev.map(|p| p.decisions.clone()).unwrap_or_default();
    let mut decided: HashSet<String> = decisions
        .iter()
        .map(|d| decision_key(&d.decision))
        .collect();
    for (d, id) in &h.decisions {
        // "X (instead of Y)" states its reason as the alternative it was chosen over.
        let d = &match d.decision.split_once(" (instead of ") {
            Some((what, other)) if d.rationale.trim().is_empty() => Decision {
                decision: what.to_string(),
                rationale: format!("chosen instead of {}", other.trim_end_matches(')')),
            },
            _ => d.clone(),
        };
        let stated_why = !d.rationale.trim().is_empty();
        if !stated_why || !decided.insert(decision_key(&d.decision)) {
            continue;
        }
        sources.add(&d.decision, id);
        decisions.push(d.clone());
    }
    let n = decisions.len().saturating_sub(MAX_DECISIONS);
    decisions.drain(..n);

    let exchanges = recent_exchanges(&h, prev, &mut sources, tokenizer);
    let mut state = CapsuleState {
        goal,
        requests,
        constraints,
        completed,
        active: active.newest(MAX_STEPS),
        current_work,
        pending: pending.newest(MAX_STEPS),
        decisions,
        findings,
        errors,
        blockers: blockers.newest(MAX_STEPS),
        next_steps: next_steps.items.into_iter().take(MAX_STEPS).collect(),
        exchanges,
        sources: BTreeMap::new(),
    };
    fit_local_budget(&mut state, artifacts, tokenizer);
    state.sources = sources.keep(&state);
    state
}

/// Words by which the agent gives up on a way of doing something for another.
static TURNS_AWAY: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"(?i)(?-u:\b)(?:(?:a |an )?different approach|another approach|another way|(?:work|get) around (?:it|this|that)|skip (?:the|this) build|without (?:building|installing))(?-u:\b)")
        .expect("valid regex")
});

/// Whether the agent's words turn away from what failed for another way.
fn turns_away(text: &str) -> bool {
    TURNS_AWAY.is_match(text)
}

/// Said of a check whose last run came before files were edited again.
const NOT_RERUN: &str = "not re-run since the last edit";

/// An error met and fixed, told as the check's last run tells it: a check that passed once
/// and failed again on its last run is not fixed; a fix whose passing run came before later
/// edits is not re-run since. The errors list, the blockers and the verification list then
/// say one thing of each check.
fn agree_with_last_run(e: ErrorFix, verification: &[Verification]) -> ErrorFix {
    let Some(checked) = verification
        .iter()
        .find(|v| e.error.starts_with(&format!("`{}` failed", v.command)))
    else {
        return e;
    };
    let family = check_family(&checked.command);
    let Some(last) = verification
        .iter()
        .rev()
        .find(|v| check_family(&v.command) == family)
    else {
        return e;
    };
    match last.outcome {
        VerificationOutcome::Failed if !e.fix.is_empty() => ErrorFix {
            error: format!(
                "{} (it passed once since, but its last run, `{}`, failed again)",
                e.error, last.command
            ),
            fix: String::new(),
        },
        VerificationOutcome::Passed if last.edited_since && !e.fix.contains(NOT_RERUN) => {
            ErrorFix {
                fix: format!("{} ({NOT_RERUN})", e.fix),
                ..e
            }
        }
        _ => e,
    }
}

/// Whether `later` already says what `earlier` says: most of its words of substance are
/// among the later one's.
fn says_the_same(later: &str, earlier: &str) -> bool {
    let words = super::work::content_words(earlier);
    if words.is_empty() {
        return later == earlier;
    }
    let in_later: HashSet<String> = super::work::content_words(later).into_iter().collect();
    let shared = words.iter().filter(|w| in_later.contains(*w)).count();
    shared * 5 >= words.len() * 4
}

/// The question the agent's last words put to the user, when they end with one.
fn asks_the_user(text: &str) -> Option<String> {
    let last = super::work::prose_lines(text)
        .into_iter()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())?;
    let last = last.trim_end_matches(['*', '_', ' ']);
    if !last.ends_with('?') {
        return None;
    }
    // The sentence that asks: from the last sentence end before the question mark.
    let body = &last[..last.len() - 1];
    let start = body.rfind(['.', '!', '?', ':']).map_or(0, |i| i + 1);
    let q = last[start..]
        .trim()
        .trim_start_matches(['*', '_', '-', ' ']);
    (q.split_whitespace().count() >= 2).then(|| clip(q, 200))
}

/// `s` within `n` characters, keeping its end.
fn clip_start(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        return s.to_string();
    }
    let tail: String = s.chars().skip(count - n).collect();
    format!("…{}", tail.trim_start())
}

/// Exchanges quoted, newest: enough for the conversation the next step comes out of.
const MAX_EXCHANGES: usize = 8;
/// Tokens the quoted exchanges take at most; older ones give way first.
const EXCHANGES_BUDGET_TOKENS: u64 = 2000;
/// Characters an older exchange keeps of each side; the latest, the anchor of the next step,
/// keeps [`LATEST_QUOTE_CHARS`].
const QUOTE_CHARS: usize = 700;
const LATEST_QUOTE_CHARS: usize = 2400;

/// A user message that points back at what the agent just said: "the ones you marked",
/// "those", "option 2", "#950". The agent's words it points at keep their structure.
static REFERS_BACK: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(?:the ones?|those|these|you(?:'ve| have)? (?:marked|listed|ranked|flagged|proposed|suggested|mentioned)|(?:option|number|item|point|step) \d+|the (?:list|ranking|options?|first|second|third|last) ?(?:one)?|above)\b|#\d+",
    )
    .expect("valid regex")
});

/// The latest exchanges, quoted: each user turn of the span (approvals and answers included:
/// a "yes" means something only next to what it answers) with the agent's last words in it,
/// after the previous capsule's, newest within [`EXCHANGES_BUDGET_TOKENS`].
fn recent_exchanges(
    h: &History,
    prev: Option<&CapsuleState>,
    sources: &mut Sources,
    tokenizer: TokenizerKind,
) -> Vec<Exchange> {
    let mut all: Vec<(Exchange, Option<&str>)> = prev
        .map(|p| p.exchanges.iter().map(|x| (x.clone(), None)).collect())
        .unwrap_or_default();
    // The turn the previous capsule ended in went on in this span: its newest words are here.
    if let (Some((last, _)), Some(text)) = (all.last_mut(), h.leading_text.as_deref()) {
        last.agent = text.trim().to_string();
    }
    for t in &h.turns {
        let (id, m) = &h.messages[t.message];
        let agent = match &t.last_text {
            Some((_, last)) => match t.text_before.as_deref() {
                // "Let me try another way:" says little without what came before it.
                Some(before) if last.split_whitespace().count() < SHORT_LAST_WORDS => {
                    format!("{}\n…\n{}", before.trim(), last.trim())
                }
                _ => last.trim().to_string(),
            },
            None => String::new(),
        };
        all.push((
            Exchange {
                user: m.text.trim().to_string(),
                agent,
            },
            Some(id),
        ));
    }
    let mut budget = EXCHANGES_BUDGET_TOKENS;
    let mut kept: Vec<Exchange> = Vec::new();
    // The user's words right after this exchange: whether they point back at its reply.
    let mut next_user: Option<String> = None;
    for (age, (x, id)) in all.into_iter().rev().take(MAX_EXCHANGES).enumerate() {
        let referred = next_user
            .as_deref()
            .is_some_and(|u| REFERS_BACK.is_match(u));
        next_user = Some(x.user.clone());
        let x = if age == 0 || referred {
            Exchange {
                user: quote(&x.user, LATEST_QUOTE_CHARS),
                agent: quote_whole_items(&x.agent, LATEST_QUOTE_CHARS),
            }
        } else {
            Exchange {
                user: quote(&x.user, QUOTE_CHARS),
                agent: quote(&x.agent, QUOTE_CHARS),
            }
        };
        let t = tokenizer.count(&x.user) + tokenizer.count(&x.agent);
        // The latest exchange always stays: it is where the work stands.
        if age > 0 && t > budget {
            break;
        }
        budget = budget.saturating_sub(t);
        if let Some(id) = id {
            sources.add(&x.user, id);
        }
        kept.push(x);
    }
    kept.reverse();
    kept
}

/// `text` within `n` characters: a longer one keeps its opening and its end (where a message
/// states what it asks, or a reply its conclusion), with a marker where the middle was left out.
fn quote(text: &str, n: usize) -> String {
    let count = text.chars().count();
    if count <= n {
        return text.to_string();
    }
    let head: String = text.chars().take(n * 2 / 3).collect();
    let tail: String = text.chars().skip(count - n / 3).collect();
    format!(
        "{} [… {} characters left out …] {}",
        head.trim_end(),
        count - head.chars().count() - tail.chars().count(),
        tail.trim_start()
    )
}

static LIST_ITEM: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s*(?:[-*+•]|\d+[.)])\s").expect("valid regex"));

/// `text` within `n` characters, cut between whole list items and paragraphs: its opening
/// ones and its closing ones stay, with the count of those left out of the middle, so that a
/// ranking or a set of options the user is about to ask about keeps the items it keeps whole.
/// A text whose opening paragraph alone is over the limit is cut as [`quote`] cuts it.
fn quote_whole_items(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        return text.to_string();
    }
    // A unit: a list item with its continuation lines, or a paragraph; a code fence stays
    // inside the unit it opens in.
    let mut units: Vec<(String, bool)> = Vec::new();
    let mut in_fence = false;
    let mut blank_before = true;
    for line in text.lines() {
        let fence = line.trim_start().starts_with("```");
        let starts = !in_fence && (blank_before || LIST_ITEM.is_match(line));
        if fence {
            in_fence = !in_fence;
        }
        if line.trim().is_empty() && !in_fence {
            blank_before = true;
            continue;
        }
        match units.last_mut() {
            Some((unit, _)) if !starts => {
                unit.push('\n');
                unit.push_str(line);
            }
            _ => units.push((line.to_string(), LIST_ITEM.is_match(line))),
        }
        blank_before = false;
    }
    let size = |u: &String| u.chars().count() + 2;
    let head_budget = n * 2 / 3;
    let mut used = 0;
    let mut head = 0;
    while head < units.len() && used + size(&units[head].0) <= head_budget {
        used += size(&units[head].0);
        head += 1;
    }
    let mut tail = units.len();
    while tail > head + 1 && used + size(&units[tail - 1].0) <= n {
        used += size(&units[tail - 1].0);
        tail -= 1;
    }
    if head == 0 || tail <= head {
        return quote(text, n);
    }
    let left_out = &units[head..tail];
    let what = if left_out.iter().all(|(_, item)| *item) {
        "list items"
    } else {
        "paragraphs and list items"
    };
    let mut out: Vec<String> = units[..head].iter().map(|(u, _)| u.clone()).collect();
    out.push(format!("[… {} {what} left out …]", left_out.len()));
    out.extend(units[tail..].iter().map(|(u, _)| u.clone()));
    out.join("\n\n")
}

/// The local capsule stays under this many tokens however many capsules came before it: each
/// list is bounded, and what still does not fit gives up its oldest items.
pub const LOCAL_CAPSULE_BUDGET_TOKENS: u64 = 6000;

/// Characters an older request keeps when the capsule must shrink: enough to recognise it.
const SHORTEST_REQUEST_CHARS: usize = 64;
/// Exchanges kept however tight the budget.
const MIN_EXCHANGES: usize = 3;

/// Drop the oldest items, list by list, until the rendered capsule fits
/// [`LOCAL_CAPSULE_BUDGET_TOKENS`]. The goal, the newest request, the next step and the facts
/// always stay.
fn fit_local_budget(state: &mut CapsuleState, artifacts: &Artifacts, tokenizer: TokenizerKind) {
    let tokens = |s: &CapsuleState| {
        let c = CapsuleEntry {
            checkpoint_id: "ck_000000000000".into(),
            trigger: crate::session::trigger::Trigger::AutoThreshold,
            quality: crate::session::capsule::model::Quality::Degraded,
            first_kept_entry_id: None,
            previous_checkpoint_id: None,
            state: s.clone(),
            artifacts: artifacts.clone(),
            tokens: Default::default(),
            origin: crate::session::capsule::model::Origin::Session,
            mirrored: false,
            title: None,
            degraded_reason: None,
            instructions: None,
            elide_tool_results_over: None,
            loaded_from: None,
        };
        tokenizer.count(&crate::session::capsule::render::render_for_model(&c))
    };
    // (list, items it keeps at least, whether its last item gives way first), in the order
    // they give way. Lists are oldest first; next steps are in order, the first the step at
    // hand.
    type Pick = fn(&mut CapsuleState) -> &mut Vec<String>;
    let rounds: [&[(Pick, usize, bool)]; 2] = [
        &[
            (|s| &mut s.requests, 4, false),
            (|s| &mut s.completed, 6, false),
            (|s| &mut s.findings, 3, false),
            (|s| &mut s.constraints, 4, false),
            (|s| &mut s.blockers, 3, false),
            (|s| &mut s.pending, 3, false),
            (|s| &mut s.active, 2, false),
            (|s| &mut s.next_steps, 3, true),
        ],
        &[
            (|s| &mut s.requests, 1, false),
            (|s| &mut s.completed, 2, false),
            (|s| &mut s.findings, 1, false),
            (|s| &mut s.constraints, 2, false),
            (|s| &mut s.blockers, 1, false),
            (|s| &mut s.pending, 1, false),
            (|s| &mut s.active, 1, false),
            (|s| &mut s.next_steps, 1, true),
        ],
    ];
    let mut current = tokens(state);
    // Every request stays known by its opening before any gives way; then the older quoted
    // exchanges, which the requests still name.
    if current > LOCAL_CAPSULE_BUDGET_TOKENS {
        let older = state.requests.len().saturating_sub(RECENT_REQUESTS);
        for r in &mut state.requests[..older] {
            *r = clip(r, SHORTEST_REQUEST_CHARS);
        }
        current = tokens(state);
    }
    while current > LOCAL_CAPSULE_BUDGET_TOKENS && state.exchanges.len() > MIN_EXCHANGES {
        state.exchanges.remove(0);
        current = tokens(state);
    }
    for round in rounds {
        for &(pick, keep, last_first) in round {
            while current > LOCAL_CAPSULE_BUDGET_TOKENS && pick(state).len() > keep {
                let list = pick(state);
                if last_first {
                    list.pop();
                } else {
                    list.remove(0);
                }
                if state.decisions.len() > 3 {
                    state.decisions.remove(0);
                }
                if state.errors.len() > 2 {
                    state.errors.remove(0);
                }
                current = tokens(state);
            }
        }
    }
}

/// Items kept per list by [`trim_state`].
const TRIMMED_LIST_ITEMS: usize = 8;
/// Exchanges [`trim_state`] keeps, and the characters each side keeps.
const TRIMMED_EXCHANGES: usize = 2;
const TRIMMED_QUOTE_CHARS: usize = 400;

/// A shorter state for when the capsule itself does not fit a small window: prompts by their
/// openings, the newest items of each list. The goal and every artifact stay.
pub fn trim_state(mut s: CapsuleState) -> CapsuleState {
    let mut renamed: Vec<(String, String)> = Vec::new();
    let mut newest = |v: &mut Vec<String>| {
        let n = v.len().saturating_sub(TRIMMED_LIST_ITEMS);
        v.drain(..n);
        for item in v.iter_mut() {
            let short = opening(item);
            if short != *item {
                renamed.push((item.clone(), short.clone()));
                *item = short;
            }
        }
    };
    newest(&mut s.requests);
    newest(&mut s.constraints);
    newest(&mut s.completed);
    newest(&mut s.active);
    newest(&mut s.pending);
    newest(&mut s.blockers);
    newest(&mut s.findings);
    newest(&mut s.current_work);
    // Next steps are in order: the first ones are the steps at hand.
    s.next_steps.truncate(TRIMMED_LIST_ITEMS);
    for item in s.next_steps.iter_mut() {
        let short = opening(item);
        if short != *item {
            renamed.push((item.clone(), short.clone()));
            *item = short;
        }
    }
    let n = s.exchanges.len().saturating_sub(TRIMMED_EXCHANGES);
    s.exchanges.drain(..n);
    for x in &mut s.exchanges {
        x.user = quote(&x.user, TRIMMED_QUOTE_CHARS);
        x.agent = quote(&x.agent, TRIMMED_QUOTE_CHARS);
    }
    let n = s.decisions.len().saturating_sub(TRIMMED_LIST_ITEMS);
    s.decisions.drain(..n);
    let n = s.errors.len().saturating_sub(TRIMMED_LIST_ITEMS);
    s.errors.drain(..n);
    for (long, short) in renamed {
        if let Some(ids) = s.sources.remove(&long) {
            s.sources.entry(short).or_default().extend(ids);
        }
    }
    let sources = Sources(std::mem::take(&mut s.sources).into_iter().collect());
    s.sources = sources.keep(&s);
    s
}

/// What broke the run of the call in `call_entry_id`: the lines its output names the faults
/// in, else its first meaningful error line.
fn failure_line(h: &History, call_entry_id: &str) -> Option<String> {
    let result = h.result_of_call_entry.get(call_entry_id)?;
    let text = ANSI_ESCAPE
        .replace_all(&blocks_text(&result.content), "")
        .to_string();
    // The errors that broke the run, not the runner's closing "ERROR task failed".
    let faults = fault_lines(&text);
    if faults.is_empty() {
        first_error_line(&text)
    } else {
        Some(faults.join("; "))
    }
}

/// Terminal colour and cursor sequences, which test runners print and a capsule must not.
static ANSI_ESCAPE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")
        .expect("valid regex")
});

/// The line of a check's output that says what failed: an error, a failed assertion, a panic,
/// a FAIL line; else the first line that says anything. Colour codes and decoration removed.
fn first_error_line(text: &str) -> Option<String> {
    let clean = ANSI_ESCAPE.replace_all(text, "");
    let lines: Vec<&str> = clean
        .lines()
        .map(|l| {
            l.trim()
                .trim_matches(|c: char| c == '⎯' || c == '─' || c == '=')
        })
        .map(str::trim)
        .filter(|l| l.chars().any(char::is_alphanumeric))
        .collect();
    let says_what_failed = |l: &&str| {
        let lower = l.to_ascii_lowercase();
        (lower.starts_with("error")
            || lower.contains("error:")
            || lower.contains("error ts")
            || lower.contains("panicked")
            || lower.contains("assert")
            || lower.contains("expected"))
            && !lower.starts_with("debugger")
    };
    let loose = |l: &&str| {
        let lower = l.to_ascii_lowercase();
        (lower.starts_with("fail") || lower.contains("failed"))
            && !lower.contains("0 failed")
            && !lower.starts_with("debugger")
    };
    let line = lines
        .iter()
        .find(|l| says_what_failed(l))
        .or_else(|| lines.iter().find(|l| loose(l)))
        .or_else(|| {
            lines
                .iter()
                .find(|l| !l.to_ascii_lowercase().starts_with("debugger"))
        })?;
    Some(clip(line, 160))
}

/// The opening of an assistant message, one line: its first sentence or two.
/// Whether `words` share a word of substance with `error` (a name, a file, an error code):
/// "The import of settingsManager is wrong" after `Cannot find module '…/settingsManager.js'`
/// does; "Perfect! Now let me look at the archive logic" after a lint failure does not.
fn speaks_of(words: &str, error: &str) -> bool {
    let terms = |s: &str| -> HashSet<String> {
        s.split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.chars().count() >= 4)
            .map(str::to_lowercase)
            .filter(|w| !COMMON_WORDS.contains(&w.as_str()))
            .collect()
    };
    let said = terms(words);
    terms(error).iter().any(|t| said.contains(t))
}

/// Words too common in errors and replies to tie one to the other.
const COMMON_WORDS: [&str; 20] = [
    "error", "failed", "fails", "test", "tests", "that", "this", "with", "from", "have", "need",
    "needs", "there", "what", "when", "check", "found", "cannot", "could", "should",
];

fn first_words(text: &str) -> Option<String> {
    let prose: String = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("```"))
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    let prose = prose.replace("**", "");
    let prose = prose.trim();
    (!prose.is_empty()).then(|| clip(prose, 200))
}

/// Errors among the last few tool results that no later success of the same tool resolved.
/// Runs of a verification command are left out: the verification list holds each command's
/// latest outcome, so a test that failed and then passed is no blocker.
/// A failed result that blocks nothing: the user declined the call (their next message says
/// what they want instead), or a search found nothing (grep's exit status 1).
fn is_no_problem(r: &ToolResultEntry, script: Option<&str>) -> bool {
    let text = blocks_text(&r.content);
    let declined = text.contains("doesn't want to proceed with this tool use")
        || text.contains("tool use was rejected");
    let exit_1 = r.exit_code == Some(1) || text.contains("exited with code 1");
    declined || (exit_1 && script.is_some_and(ends_in_a_search))
}

/// Whether the command that decides a script's exit status is a search, whose status 1 only
/// says nothing matched.
fn ends_in_a_search(script: &str) -> bool {
    let last = script
        .trim()
        .rsplit(['|', ';', '&', '\n'])
        .map(str::trim)
        .find(|c| !c.is_empty())
        .unwrap_or("");
    let mut words = last.split_whitespace();
    match words.next() {
        Some("grep" | "egrep" | "fgrep" | "rg" | "ag" | "ack" | "find" | "fd") => true,
        Some("git") => words.next() == Some("grep"),
        _ => false,
    }
}

fn recent_tool_errors<'a>(h: &History<'a>) -> Vec<(String, &'a str)> {
    let recent = &h.recent_results;
    recent
        .iter()
        .enumerate()
        .filter(|(i, (r, _))| {
            r.is_error
                && !recent[i + 1..]
                    .iter()
                    .any(|(later, _)| !later.is_error && later.tool_name == r.tool_name)
        })
        .map(|(_, (r, id))| {
            let first = blocks_text(&r.content);
            let first = first
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("error");
            (
                format!(
                    "{} error: {}",
                    r.tool_name.as_deref().unwrap_or("tool"),
                    clip(first, 160)
                ),
                *id,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capsule::artifacts::collect;
    use crate::session::entry::{ContentBlock, MessageEntry, ToolResultEntry};
    use crate::session::testing::Builder;
    use crate::tool_mapping::ToolMapping;
    use serde_json::json;

    fn state_of(b: &Builder) -> CapsuleState {
        let entries: Vec<&Entry> = b.session.entries().iter().collect();
        let artifacts = collect(
            "/ws",
            None,
            entries.iter().copied(),
            &ToolMapping::default(),
        );
        build_state(TokenizerKind::O200kBase, None, &entries, &artifacts)
    }

    fn failed_result(b: &mut Builder, call: &str, text: &str) {
        b.push(EntryBody::ToolResult(ToolResultEntry {
            call_id: call.into(),
            tool_name: Some("exec_command".into()),
            content: vec![ContentBlock::text(text)],
            is_error: true,
            exit_code: Some(1),
        }));
    }

    #[test]
    fn a_finished_task_the_user_moved_past_gives_the_goal_to_the_open_follow_up() {
        let mut b = Builder::new();
        b.user("Create a custom dark theme and open it in the editor for me");
        b.assistant("Done! I've created custom-dark.json and opened it in the editor.");
        b.user(", exit claude and run");
        b.assistant("Done. The message now reads: exit Claude and run.");
        b.user("did you update docs/theme.md as well with the new tokens?");
        let s = state_of(&b);
        assert!(
            s.goal
                .starts_with("did you update docs/theme.md as well with the new tokens?"),
            "the open follow-up is the goal: {}",
            s.goal
        );
        assert!(
            s.goal.contains("Create a custom dark theme"),
            "the finished task stays as its context: {}",
            s.goal
        );
    }

    #[test]
    fn a_task_whose_turn_did_not_report_done_stays_the_goal() {
        let mut b = Builder::new();
        b.user("Create a custom dark theme and open it in the editor for me");
        b.assistant("The theme loader reads from the themes folder; let me look at it.");
        b.user("is the folder under the home directory?");
        let s = state_of(&b);
        assert!(
            s.goal.starts_with("Create a custom dark theme"),
            "{}",
            s.goal
        );
    }

    #[test]
    fn a_long_list_the_user_asks_about_is_cut_between_whole_items() {
        let ranking: String = (1..=35)
            .map(|i| format!("- #{i} — stale for {i}0 days, no comments and no assignee — keep it or discard it, by its label"))
            .collect::<Vec<_>>()
            .join("\n");
        let reply = format!("I ranked all 35 open issues:\n\n{ranking}\n\nWant a stricter pass?");
        let mut b = Builder::new();
        b.user("rank every open issue by staleness");
        b.assistant(&reply);
        b.user("are you confident about all the ones you've marked discard");
        b.assistant("No, not for all of them.");
        b.user("ask me questions to get the info you need");
        let s = state_of(&b);
        let quoted = &s
            .exchanges
            .iter()
            .find(|x| x.user.starts_with("rank every"))
            .expect("the ranking's exchange is quoted")
            .agent;
        assert!(quoted.contains("list items left out …]"), "{quoted}");
        assert!(quoted.ends_with("Want a stricter pass?"), "{quoted}");
        for line in quoted.lines().filter(|l| l.starts_with("- #")) {
            assert!(
                line.ends_with("by its label"),
                "an item cut mid-way: {line}"
            );
        }
        assert!(
            quoted.lines().filter(|l| l.starts_with("- #")).count() > 12,
            "{quoted}"
        );
    }

    #[test]
    fn an_unanswered_question_is_answered_not_continued() {
        let mut b = Builder::new();
        b.user("Add the auth guard to the settings page");
        b.assistant("Done: the settings page now checks the session.");
        b.user("does it get the logged in user from the authStore?");
        let s = state_of(&b);
        assert!(
            s.next_steps
                .iter()
                .any(|n| n.starts_with("Answer the user's question: does it get")),
            "{:?}",
            s.next_steps
        );
        assert!(
            !s.next_steps.iter().any(|n| n.starts_with("Continue:")),
            "{:?}",
            s.next_steps
        );
    }

    #[test]
    fn a_question_answered_and_then_worked_past_is_no_request_to_continue() {
        let mut b = Builder::new();
        b.user("Refactor the session into AgentSession, one work package at a time");
        b.assistant("WP1 done.");
        b.user("why does unsubscribe clear the event listeners? they should survive a reset, no?");
        b.assistant("You're right, they should survive. I'll keep them and go on with WP9.");
        b.call(
            "e",
            "Edit",
            json!({"file_path": "/ws/src/agent-session.ts"}),
        );
        b.result("e", "ok");
        b.bash("c", "git add -A && git commit -m \"WP9\"");
        b.result("c", "[main 1a2b3c] WP9");
        let s = state_of(&b);
        assert!(
            !s.next_steps.iter().any(|n| n.starts_with("Continue:")),
            "{:?}",
            s.next_steps
        );
        assert!(
            s.next_steps[0].starts_with("The agent carried out its plan \"You're right")
                && s.next_steps[0].contains("and committed it")
                && s.next_steps[0].contains("go on to the next piece of the work"),
            "{:?}",
            s.next_steps
        );
    }

    #[test]
    fn a_plan_the_agent_carried_out_and_committed_points_to_the_next_piece_of_work() {
        let mut b = Builder::new();
        b.user("Work through the refactor plan in docs/refactor.md, committing each package");
        b.assistant("Now update the checkboxes for WP9 and WP10:");
        b.call("e", "Edit", json!({"file_path": "/ws/docs/refactor.md"}));
        b.result("e", "ok");
        b.bash("c", "git add -A && git commit -m \"WP9+WP10\"");
        b.result("c", "[main 1a2b3c] WP9+WP10");
        let s = state_of(&b);
        assert!(
            s.next_steps[0].starts_with("The agent carried out its plan")
                && !s.next_steps[0].contains("check what that left undone"),
            "{:?}",
            s.next_steps
        );
        // Not committed: what the plan left undone is still to check.
        let mut b = Builder::new();
        b.user("Work through the refactor plan in docs/refactor.md, committing each package");
        b.assistant("Now update the checkboxes for WP9 and WP10:");
        b.call("e", "Edit", json!({"file_path": "/ws/docs/refactor.md"}));
        b.result("e", "ok");
        let s = state_of(&b);
        assert!(
            s.next_steps[0].starts_with("The agent acted on its plan"),
            "{:?}",
            s.next_steps
        );
    }

    #[test]
    fn a_final_step_whose_turn_wrapped_up_is_done() {
        let mut b = Builder::new();
        b.user("Port the modes to AgentSession");
        b.user("after you are done and committed, remove the old files main.ts and cli.ts");
        b.call(
            "r",
            "Bash",
            json!({"command": "git rm main.ts cli.ts && git commit -m \"Remove old files\""}),
        );
        b.result("r", "ok");
        b.assistant("Done. Removed main.ts and cli.ts and committed.");
        b.user("why are we using appendMessage and not queueMessage here?");
        b.assistant("Let me look at the events:");
        b.bash("g", "rg -n queueMessage src");
        b.result("g", "src/a.ts:3: queueMessage");
        let s = state_of(&b);
        assert!(
            !s.next_steps.iter().any(|n| n.starts_with("Finally:")),
            "{:?}",
            s.next_steps
        );
        // Not wrapped up yet: the final step stands.
        let mut b = Builder::new();
        b.user("after you are done and committed, remove the old files main.ts and cli.ts");
        b.assistant("Starting with the port.");
        b.call("e", "Edit", json!({"file_path": "/ws/src/a.ts"}));
        b.result("e", "ok");
        let s = state_of(&b);
        assert!(
            s.next_steps.iter().any(|n| n.starts_with("Finally:")),
            "{:?}",
            s.next_steps
        );
    }

    #[test]
    fn a_turn_ending_on_a_question_to_the_user_waits_for_the_answer() {
        let mut b = Builder::new();
        b.user("Clean up the stale issues");
        b.assistant("I found 14 stale issues. Which labels mark an issue as still wanted?");
        let s = state_of(&b);
        assert_eq!(
            s.next_steps.first().map(String::as_str),
            Some("The agent asked the user \"Which labels mark an issue as still wanted?\"; waiting for the answer"),
            "{:?}",
            s.next_steps
        );
        assert!(!s.next_steps.iter().any(|n| n.starts_with("Continue:")));
    }

    #[test]
    fn a_failing_check_the_agent_turned_away_from_blocks_but_asks_no_step() {
        let mut b = Builder::new();
        b.user("Fix the separability matrix for nested models");
        b.bash("p", "pip install -e .");
        printed(&mut b, "p", "ERROR: Could not build wheels for astropy", 1);
        b.assistant("The build is failing due to Cython compatibility issues. Let me try a different approach - just test the separable module logic directly:");
        b.bash("t", "python /tmp/check_separable.py");
        b.result("t", "ok");
        let s = state_of(&b);
        assert!(
            s.blockers
                .iter()
                .any(|x| x.starts_with("`pip install -e .` fails")),
            "{:?}",
            s.blockers
        );
        assert!(
            !s.next_steps.iter().any(|n| n.contains("pip install")),
            "{:?}",
            s.next_steps
        );
    }

    #[test]
    fn every_section_tells_a_check_as_its_last_run_does() {
        let mut b = Builder::new();
        b.user("Fix the lint errors");
        b.bash("l1", "mise run lint");
        failed_result(&mut b, "l1", "2 issues\n[lint] ERROR task failed");
        b.call("e1", "Edit", json!({"file_path": "/ws/src/a.go"}));
        b.result("e1", "ok");
        b.bash("l2", "mise run lint");
        b.result("l2", "0 issues");
        b.call("e2", "Edit", json!({"file_path": "/ws/src/b.go"}));
        b.result("e2", "ok");
        b.bash("l3", "mise run lint");
        failed_result(&mut b, "l3", "1 issue\n[lint] ERROR task failed");
        let s = state_of(&b);
        assert!(
            !s.errors
                .iter()
                .any(|e| e.error.contains("mise run lint") && !e.fix.is_empty()),
            "a check failing on its last run is not fixed: {:?}",
            s.errors
        );
        assert!(
            s.errors.iter().any(|e| e
                .error
                .contains("but its last run, `mise run lint`, failed again")),
            "{:?}",
            s.errors
        );
        assert!(
            s.blockers
                .iter()
                .any(|x| x.starts_with("`mise run lint` fails")),
            "{:?}",
            s.blockers
        );
        // Passed last, then edited: the fix is not re-run since, and nothing blocks.
        let mut b = Builder::new();
        b.user("Fix the lint errors");
        b.bash("l1", "mise run lint");
        failed_result(&mut b, "l1", "[lint] ERROR task failed");
        b.bash("l2", "mise run lint");
        b.result("l2", "0 issues");
        b.call("e2", "Edit", json!({"file_path": "/ws/src/b.go"}));
        b.result("e2", "ok");
        let s = state_of(&b);
        assert!(
            s.errors
                .iter()
                .any(|e| e.fix.ends_with("(not re-run since the last edit)")),
            "{:?}",
            s.errors
        );
        assert!(
            !s.blockers.iter().any(|x| x.contains("mise run lint")),
            "{:?}",
            s.blockers
        );
        // Failed last, then edited: it still blocks, and says it was not run on the edit.
        let mut b = Builder::new();
        b.user("Fix the lint errors");
        b.bash("l1", "mise run lint");
        failed_result(&mut b, "l1", "[lint] ERROR task failed");
        b.call("e2", "Edit", json!({"file_path": "/ws/src/b.go"}));
        b.result("e2", "ok");
        let s = state_of(&b);
        assert!(
            s.blockers
                .iter()
                .any(|x| x.starts_with("`mise run lint` fails")
                    && x.ends_with("(not re-run since the last edit)")),
            "{:?}",
            s.blockers
        );
    }

    #[test]
    fn a_failed_run_after_the_agents_last_words_is_current_work_and_the_next_step() {
        let mut b = Builder::new();
        b.user("Can you ensure we have an example that runs?");
        b.call("e", "Edit", json!({"file_path": "/ws/examples/or.yaml"}));
        b.result("e", "ok");
        b.assistant(
            "I've finished the edits; now I'm running the strict-OR example with --dry-run.",
        );
        b.bash(
            "r",
            "bun agentv eval examples/or.yaml --filter strict-or --dry-run",
        );
        failed_result(
            &mut b,
            "r",
            "error: found 1 error\n  agentv eval run examples/or.yaml --dry-run\n  ^ Unknown arguments\n",
        );
        let s = state_of(&b);
        assert!(
            s.current_work
                .iter()
                .any(|a| a.starts_with("ran `bun agentv eval")
                    && a.contains("failed: \"error: found 1 error … ^ Unknown arguments\"")),
            "{:?}",
            s.current_work
        );
        assert!(
            s.current_work[0].starts_with("The agent's last words: \"I've finished the edits"),
            "{:?}",
            s.current_work
        );
        assert!(
            s.next_steps[0].starts_with("Fix what made the last run fail")
                && s.next_steps[0].contains("Unknown arguments"),
            "{:?}",
            s.next_steps
        );
        assert!(
            !s.next_steps
                .iter()
                .any(|n| n.contains("now I'm running") || n.starts_with("Continue:")),
            "the run the agent announced happened; it is not the next step: {:?}",
            s.next_steps
        );
    }

    #[test]
    fn a_plan_the_calls_since_acted_on_is_not_offered_as_the_next_step_again() {
        let mut b = Builder::new();
        b.user("Make the cache per user");
        b.assistant("Next I'll update the call site in src/cache.rs.");
        b.call("e", "Edit", json!({"file_path": "/ws/src/cache.rs"}));
        b.result("e", "ok");
        let s = state_of(&b);
        assert!(
            !s.next_steps
                .iter()
                .any(|n| n.starts_with("Update the call site") || n.starts_with("Pick up where")),
            "{:?}",
            s.next_steps
        );
        assert!(
            s.next_steps[0].starts_with("The agent acted on its plan")
                && s.next_steps[0].contains("edited `/ws/src/cache.rs`"),
            "{:?}",
            s.next_steps
        );
        // No call after the plan: it is still ahead, quoted.
        let mut b = Builder::new();
        b.user("Make the cache per user");
        b.call("e", "Edit", json!({"file_path": "/ws/src/cache.rs"}));
        b.result("e", "ok");
        b.assistant("Next I'll update the call site in src/main.rs.");
        let s = state_of(&b);
        assert!(
            s.next_steps[0].starts_with("Pick up where the agent's last message left off"),
            "{:?}",
            s.next_steps
        );
        assert!(
            s.current_work
                == [
                    "edited `/ws/src/cache.rs`",
                    "Its last words, after those: \"Next I'll update the call site in src/main.rs.\""
                ],
            "{:?}",
            s.current_work
        );
    }

    #[test]
    fn a_failed_search_is_current_work_but_no_step_to_fix() {
        let mut b = Builder::new();
        b.user("Find where the chart is drawn");
        b.assistant("Searching the app.");
        b.bash("g", "TMPDIR=/tmp rg \"Chart|Graph\" src/app");
        failed_result(&mut b, "g", "sandbox denied exec error, exit code: 1");
        let s = state_of(&b);
        assert!(
            !s.next_steps.iter().any(|n| n.starts_with("Fix what made")),
            "{:?}",
            s.next_steps
        );
        assert!(
            s.current_work
                .iter()
                .any(|a| a.contains("rg \"Chart|Graph\" src/app")),
            "{:?}",
            s.current_work
        );
    }

    #[test]
    fn findings_come_from_mid_turn_texts_and_a_later_correction_replaces_the_guess() {
        let mut b = Builder::new();
        b.user("Why does the theme not update?");
        b.assistant("The issue is that the footer caches its colours at startup.");
        b.bash("c", "rg -n theme src/footer.ts");
        b.result("c", "12: const c = theme.fg");
        b.assistant("Actually, the footer is fine: the cache in `Text` is never invalidated.");
        b.bash("d", "rg -n invalidate src/text.ts");
        b.result("d", "40: invalidate() {}");
        b.assistant(
            "I found that `Text.invalidate()` is empty, so the cache survives a theme change.",
        );
        b.call("r", "Read", json!({"file_path": "/ws/src/text.ts"}));
        b.result("r", "...");
        let s = state_of(&b);
        assert!(
            !s.findings.iter().any(|f| f.contains("footer caches")),
            "the guess taken back stays out: {:?}",
            s.findings
        );
        assert!(
            s.findings.iter().any(|f| f.contains("never invalidated"))
                && s.findings.iter().any(|f| f.contains("is empty")),
            "{:?}",
            s.findings
        );
    }

    #[test]
    fn a_bug_report_a_pointer_or_a_wrapped_api_error_is_no_constraint() {
        let mut b = Builder::new();
        b.user("i don't think the component invalidate works correctly. if i change the theme, not everything updates");
        b.assistant("Looking.");
        b.user("actually, it's the bg color of the tool execution that doesn't change");
        b.assistant("Looking.");
        b.user("you can look up the detailed history in /Users/me/.pi/sessions/x.jsonl if you need to (don't read the full file!)");
        b.assistant("Ok.");
        b.user("this results in\n Error: 400 {\"type\":\"error\",\"message\":\"messages.236: `tool_use`\n ids were found without `tool_result` blocks. Each\n `tool_use` block must have a corresponding `tool_result` block in the next\n message.\"}\n\nfix it, and never reorder messages");
        let s = state_of(&b);
        assert_eq!(
            s.constraints,
            ["fix it, and never reorder messages"],
            "{:?}",
            s.constraints
        );
    }

    #[test]
    fn a_prohibition_about_the_one_file_a_pointer_names_is_no_standing_rule() {
        let mut b = Builder::new();
        b.user("read src/main.ts in full and plan the refactor");
        b.assistant("Plan: …");
        b.user("you can look up the detailed history of this session in /Users/me/.pi/sessions/x.jsonl if you need to (don't read the full file!)");
        b.assistant("Ok.");
        b.user("don't open that file again, and never add a dependency");
        let s = state_of(&b);
        assert!(
            !s.constraints.iter().any(|c| c.contains("full file")
                || c.contains("look up")
                || c.contains("that file")),
            "{:?}",
            s.constraints
        );
        b.user("fix the parser");
        b.user("never add a dependency");
        assert_eq!(state_of(&b).constraints, ["never add a dependency"]);
    }

    #[test]
    fn a_rule_inside_a_bug_report_is_the_fix_for_it_not_a_standing_rule() {
        let mut b = Builder::new();
        b.user("ok, i think the queued messages component doesn't adhere to the invariant that every line returned by a component's render method must not be wider than the passed in width. investigate");
        b.assistant("Found it.");
        b.user("what's footer using? should be dimmer, don't modify the theme, look into the footer sources");
        b.assistant("Done.");
        b.user("hm, i selected the theme while you were working and got a crash, that should never happen.");
        b.assistant("Fixed.");
        b.user("invalid themes must NEVER explode");
        let s = state_of(&b);
        assert_eq!(
            s.constraints,
            [
                "every line returned by a component's render method must not be wider than the passed in width.",
                "invalid themes must NEVER explode"
            ],
            "{:?}",
            s.constraints
        );
    }

    #[test]
    fn standing_preferences_without_a_rule_word_are_constraints_that_outlive_their_request() {
        let mut b = Builder::new();
        b.user("i would only want e2e tests for AgentSession, anything else is shitty.\n\nalright, create a full implementation plan in docs/refactor.md");
        b.assistant("Plan written.");
        b.user("btw, can we make it so we keep the old code around for reference? you can call it main-new");
        b.assistant("Ok.");
        b.user("omfg use fucking rgb values in the themes, no rgb indices!");
        b.assistant("Ok.");
        b.user("basically it doesn't require any core code change, it's just documentation.. can you spawn a worker to update the docs");
        b.assistant("Spawned.");
        b.user("now port the selector to the new TUI");
        let s = state_of(&b);
        assert_eq!(
            s.constraints,
            [
                "i would only want e2e tests for AgentSession, anything else is shitty.",
                "btw, can we make it so we keep the old code around for reference?",
                "omfg use fucking rgb values in the themes, no rgb indices!",
                "basically it doesn't require any core code change, it's just documentation.."
            ],
            "{:?}",
            s.constraints
        );
        assert_eq!(s.goal, "now port the selector to the new TUI");
    }

    #[test]
    fn the_goal_is_the_instruction_around_a_paste_not_its_marker() {
        let mut b = Builder::new();
        let trace = (0..8)
            .map(|i| format!("    at Object.<anonymous> (/ws/src/a.ts:{i}:3)"))
            .collect::<Vec<_>>()
            .join("\n");
        b.user(&format!(
            "{trace}\n\nthe login test crashes like this, can you fix the crash?"
        ));
        let s = state_of(&b);
        assert!(
            s.goal
                .starts_with("the login test crashes like this, can you fix the crash?"),
            "{}",
            s.goal
        );
        assert!(
            s.goal.contains("(with what the user pasted: "),
            "{}",
            s.goal
        );
    }

    #[test]
    fn a_declined_call_or_a_search_that_found_nothing_blocks_nothing() {
        let mut b = Builder::new();
        b.user("Find where the cache is built");
        let failed = |b: &mut Builder, call: &str, text: &str| {
            b.push(EntryBody::ToolResult(ToolResultEntry {
                call_id: call.into(),
                tool_name: Some("Bash".into()),
                content: vec![ContentBlock::text(text)],
                is_error: true,
                exit_code: None,
            }));
        };
        b.bash("g", "cd /ws && grep -rn invalidate src/text.ts");
        failed(&mut b, "g", "Command exited with code 1");
        b.bash("v", "gh repo view");
        failed(
            &mut b,
            "v",
            "The user doesn't want to proceed with this tool use. The tool use was rejected.",
        );
        b.bash("c", "cat missing.txt");
        failed(&mut b, "c", "cat: missing.txt: No such file or directory");
        let s = state_of(&b);
        assert_eq!(s.blockers.len(), 1, "{:?}", s.blockers);
        assert!(s.blockers[0].contains("missing.txt"), "{:?}", s.blockers);
        assert!(ends_in_a_search("cd x && rg foo src"));
        assert!(ends_in_a_search("git grep -n foo"));
        assert!(!ends_in_a_search("grep foo a.txt && cargo test"));
    }

    #[test]
    fn every_turn_is_quoted_with_the_agents_last_words_approvals_included() {
        let mut b = Builder::new();
        b.user("Should the cache be per user or global? Propose something.");
        b.assistant("Looking at the code first.");
        b.call("r", "Read", json!({"file_path": "/ws/src/cache.rs"}));
        b.assistant("Option 1: a per-user cache keyed by id.\nOption 2: one global cache.\nI recommend option 1. Shall I implement it?");
        b.user("yes, option 1");
        b.assistant("Implemented the per-user cache in src/cache.rs.");
        let s = state_of(&b);
        assert_eq!(s.exchanges.len(), 2, "{:?}", s.exchanges);
        assert!(s.exchanges[0]
            .user
            .starts_with("Should the cache be per user"));
        assert!(
            s.exchanges[0].agent.ends_with("Shall I implement it?"),
            "the last words of the turn, not its first: {:?}",
            s.exchanges[0].agent
        );
        assert_eq!(s.exchanges[1].user, "yes, option 1");
        assert_eq!(
            s.exchanges[1].agent,
            "Implemented the per-user cache in src/cache.rs."
        );
    }

    #[test]
    fn a_long_message_keeps_its_opening_and_its_end_with_a_marker() {
        let long = format!(
            "Please fix the parser. {} The real ask: keep the API.",
            "filler words here. ".repeat(200)
        );
        let q = quote(&long, 300);
        assert!(q.starts_with("Please fix the parser."), "{q}");
        assert!(q.ends_with("The real ask: keep the API."), "{q}");
        assert!(q.contains("characters left out"), "{q}");
        assert!(q.chars().count() < 360, "{}", q.chars().count());
        assert_eq!(quote("short", 300), "short");
    }

    #[test]
    fn only_the_newest_exchanges_stay_and_the_latest_always_does() {
        let mut b = Builder::new();
        for i in 0..20 {
            b.user(&format!("Request number {i}: {}", "detail ".repeat(150)));
            b.assistant(&format!("Answer {i}: {}", "words ".repeat(150)));
        }
        let s = state_of(&b);
        assert!(s.exchanges.len() < 20 && s.exchanges.len() >= MIN_EXCHANGES);
        assert!(s
            .exchanges
            .last()
            .unwrap()
            .user
            .starts_with("Request number 19"));
        let first_kept: usize = s.exchanges[0].user["Request number ".len()..]
            .split(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(first_kept, 20 - s.exchanges.len(), "the newest, in order");
    }

    #[test]
    fn an_errors_fix_quotes_the_agent_only_when_it_speaks_of_the_error() {
        assert!(!speaks_of(
            "Let me fix the test path:",
            "`node /tmp/t.js` failed: Error [ERR_MODULE_NOT_FOUND]: Cannot find module '/private/tmp/dist/utils/settingsManager.js'"
        ));
        assert!(speaks_of(
            "The import of settingsManager is wrong; fixing it.",
            "`node /tmp/t.js` failed: Cannot find module '/private/tmp/dist/utils/settingsManager.js'"
        ));
        assert!(!speaks_of(
            "Perfect! Now let me look at the archive logic.",
            "`mise run lint` failed: 2 issues: unused parameter ctx"
        ));
    }

    #[test]
    fn done_items_keep_the_order_they_happened_in() {
        let mut b = Builder::new();
        b.user("Rename the widget module to gadget and update every import");
        b.assistant("Done. The widget module is renamed and every import updated.");
        b.user("yeah, release it");
        b.bash("c", "git commit -m \"Release v0.8.0\"");
        exit(&mut b, "c", 0);
        b.bash("t", "git tag v0.8.0");
        exit(&mut b, "t", 0);
        let s = state_of(&b);
        let n = s.completed.len();
        assert!(n >= 3, "{:?}", s.completed);
        assert_eq!(
            s.completed[n - 2..],
            ["Committed: Release v0.8.0", "Tagged v0.8.0"],
            "the release is the newest done, after the earlier wrap-up: {:?}",
            s.completed
        );
    }

    #[test]
    fn a_finished_answers_let_me_narrates_and_names_no_next_step() {
        let mut b = Builder::new();
        b.user("does the sidebar get the logged in user from the authStore?");
        b.assistant("Let me trace through the flow. Yes: AppSidebar reads `user` from useAuthStore and falls back to 'Guest User' when it has no name.");
        let s = state_of(&b);
        assert!(
            s.next_steps
                .iter()
                .all(|n| !n.contains("Trace through the flow")),
            "{:?}",
            s.next_steps
        );
    }

    #[test]
    fn a_confirmed_cause_replaces_the_guesses_before_it() {
        let mut b = Builder::new();
        b.user("separability_matrix is wrong for nested compound models, fix it");
        b.assistant(
            "The issue is that `_cstack` does not use `_separable` for compound models at all.",
        );
        b.call("r", "Read", json!({"file_path": "/ws/separable.py"}));
        b.assistant("The bug is confirmed. In `_cstack` the code sets the block to all ones instead of the `right` matrix.");
        b.call("e", "Edit", json!({"file_path": "/ws/separable.py"}));
        let s = state_of(&b);
        assert_eq!(
            s.findings,
            vec!["The bug is confirmed. In `_cstack` the code sets the block to all ones instead of the `right` matrix."]
        );
    }

    #[test]
    fn a_turn_that_ends_by_asking_the_user_waits_for_the_answer() {
        let mut b = Builder::new();
        b.user("Investigate why the build is slow and give me a plan.");
        b.call("r", "Read", json!({"file_path": "/ws/build.rs"}));
        b.assistant("The root cause is the codegen step running twice.\n\nWhich of the two fixes do you prefer, caching or a single pass?");
        let s = state_of(&b);
        assert!(
            s.active.iter().all(|a| !a.starts_with("In progress: ")),
            "the agent waits for the user: {:?}",
            s.active
        );
        assert!(
            s.pending
                .iter()
                .any(|p| p
                    .contains("Which of the two fixes do you prefer, caching or a single pass?")),
            "{:?}",
            s.pending
        );
    }

    #[test]
    fn the_previous_capsules_last_exchange_takes_the_newer_words_of_its_turn() {
        let mut prev = crate::session::testing::full_capsule();
        prev.state.exchanges = vec![Exchange {
            user: "Port the tests to the new runner".into(),
            agent: "Starting with the parser tests.".into(),
        }];
        let mut b = Builder::new();
        b.assistant("All 40 tests are ported and pass.");
        let entries: Vec<&Entry> = b.session.entries().iter().collect();
        let s = build_state(
            TokenizerKind::O200kBase,
            Some(&prev),
            &entries,
            &Artifacts::default(),
        );
        assert_eq!(s.exchanges.len(), 1);
        assert_eq!(s.exchanges[0].agent, "All 40 tests are ported and pass.");
    }

    #[test]
    fn the_goal_is_the_latest_substantive_request_in_a_line_or_two() {
        let mut b = Builder::new();
        b.user("Can you audit the session module?");
        let long = "Fix the flaky login test. ".repeat(40);
        b.user(&long);
        b.user("yes");
        b.user("can you proof read this?");
        let s = state_of(&b);
        // The goal is a line or two; the request stays whole among the requests.
        assert!(
            s.goal.starts_with("Fix the flaky login test."),
            "{}",
            s.goal
        );
        assert!(s.goal.chars().count() <= GOAL_CHARS + 2, "{}", s.goal);
        assert_eq!(
            s.requests,
            [
                "Can you audit the session module?",
                long.trim(),
                "can you proof read this?"
            ]
        );
        assert!(s.constraints.is_empty(), "{:?}", s.constraints);
    }

    #[test]
    fn without_a_substantive_request_the_first_one_is_the_goal() {
        let mut b = Builder::new();
        b.user("Hey");
        b.user("yes");
        assert_eq!(state_of(&b).goal, "Hey");
    }

    #[test]
    fn constraints_are_only_the_rules_the_user_stated() {
        let mut b = Builder::new();
        b.user("Port the selector to the new TUI. Never add a dependency.");
        b.user("ok");
        b.user("don't touch the theme API, and always run the tests");
        let s = state_of(&b);
        assert_eq!(
            s.constraints,
            [
                "Never add a dependency.",
                "don't touch the theme API, and always run the tests"
            ]
        );
        assert_eq!(
            s.goal,
            "Port the selector to the new TUI. Never add a dependency."
        );
    }

    #[test]
    fn ide_boilerplate_around_a_prompt_is_cut_from_requests_and_goal() {
        let mut b = Builder::new();
        b.user("<ide_opened_file>The user opened /ws/src/a.rs in the IDE.</ide_opened_file>\nRefactor the parser into modules");
        b.user("<system-reminder>\nplan mode\n</system-reminder>");
        let s = state_of(&b);
        assert_eq!(s.goal, "Refactor the parser into modules");
        assert_eq!(s.requests, ["Refactor the parser into modules"]);
    }

    #[test]
    fn stated_decisions_of_the_assistant_are_kept_with_their_reasons() {
        let mut b = Builder::new();
        b.user("Add caching to the client");
        b.assistant("I'll use an LRU map because entries expire by use, not by time.");
        b.assistant("Let me read the client first.");
        let s = state_of(&b);
        assert_eq!(s.decisions.len(), 1, "{:?}", s.decisions);
        assert_eq!(s.decisions[0].decision, "I'll use an LRU map");
        assert_eq!(
            s.decisions[0].rationale,
            "entries expire by use, not by time"
        );
    }

    fn capsule_with(state: CapsuleState) -> CapsuleEntry {
        CapsuleEntry {
            state,
            ..crate::session::testing::full_capsule()
        }
    }

    fn exit(b: &mut Builder, call: &str, code: i64) {
        b.push(EntryBody::ToolResult(ToolResultEntry {
            call_id: call.into(),
            tool_name: Some("Bash".into()),
            content: vec![ContentBlock::text(if code == 0 {
                "ok"
            } else {
                "error: boom"
            })],
            is_error: code != 0,
            exit_code: Some(code),
        }));
    }

    #[test]
    fn a_next_step_whose_check_passed_since_is_not_carried_forward() {
        let prev = capsule_with(CapsuleState {
            goal: "make the tests pass".into(),
            next_steps: vec![
                "Make `cargo test -- --include-ignored` pass".into(),
                "Write the changelog".into(),
            ],
            ..Default::default()
        });
        let mut b = Builder::new();
        b.bash("c1", "cargo test -- --include-ignored");
        exit(&mut b, "c1", 0);
        let entries: Vec<&Entry> = b.session.entries().iter().collect();
        let artifacts = collect(
            "/ws",
            None,
            entries.iter().copied(),
            &ToolMapping::default(),
        );
        let s = build_state(TokenizerKind::O200kBase, Some(&prev), &entries, &artifacts);
        assert_eq!(s.next_steps, ["Write the changelog"]);
        assert_eq!(
            artifacts.verification[0].outcome,
            VerificationOutcome::Passed
        );
    }

    #[test]
    fn a_check_that_failed_and_later_passed_is_no_blocker() {
        let mut b = Builder::new();
        b.user("fix the build");
        b.bash("c1", "cargo build");
        exit(&mut b, "c1", 101);
        b.bash("c2", "cd /ws && cargo build 2>&1 | tail -5");
        exit(&mut b, "c2", 0);
        b.call("c3", "Read", json!({"file_path": "/ws/src/lib.rs"}));
        b.result("c3", "fn main() {}");
        let s = state_of(&b);
        assert!(s.blockers.is_empty(), "{:?}", s.blockers);
        assert!(
            !s.next_steps.iter().any(|n| n.contains("cargo build")),
            "{:?}",
            s.next_steps
        );
    }

    #[test]
    fn every_request_keeps_at_least_its_opening_newest_in_full() {
        let mut b = Builder::new();
        b.user("goal");
        let old = format!("OLD {}", "x ".repeat(5000));
        let new = format!("NEW {}", "y ".repeat(500));
        b.user(&old);
        b.user(&new);
        let s = state_of(&b);
        assert_eq!(s.requests.len(), 3);
        assert!(s.requests[1].starts_with("OLD x"));
        assert_eq!(
            s.requests[1].chars().count(),
            PROMPT_OPENING_CHARS + 1,
            "opening plus ellipsis"
        );
        assert_eq!(s.requests[2], new.trim());
    }

    #[test]
    fn injected_and_synthetic_user_text_is_not_a_prompt() {
        let mut b = Builder::new();
        b.user("<command-name>/clear</command-name>");
        b.push(EntryBody::Message(MessageEntry {
            role: Role::User,
            content: vec![ContentBlock::text("tool output echo")],
            usage: None,
            model: None,
            synthetic: true,
        }));
        b.user("real goal");
        assert_eq!(state_of(&b).goal, "real goal");
    }

    #[test]
    fn task_list_statuses_become_completed_active_pending() {
        let mut b = Builder::new();
        b.user("do it");
        b.call(
            "t1",
            "TodoWrite",
            json!({"todos": [
                {"content": "read code", "status": "completed", "activeForm": "Reading"},
                {"content": "fix bug", "status": "in_progress", "activeForm": "Fixing"},
                {"content": "add test", "status": "pending", "activeForm": "Adding"}
            ]}),
        );
        let s = state_of(&b);
        assert_eq!(s.completed, ["read code"]);
        assert_eq!(s.active, ["fix bug"]);
        assert_eq!(s.pending, ["add test"]);
        assert_eq!(s.next_steps, ["fix bug", "add test"]);
    }

    #[test]
    fn failing_checks_are_blockers_and_next_steps() {
        let mut b = Builder::new();
        b.user("make tests pass");
        b.bash("c1", "cargo test");
        b.push(EntryBody::ToolResult(ToolResultEntry {
            call_id: "c1".into(),
            tool_name: Some("Bash".into()),
            content: vec![ContentBlock::text(
                "running 2 tests\nthread 'x' panicked at src/lib.rs:3\ntest result: FAILED",
            )],
            is_error: true,
            exit_code: Some(101),
        }));
        let s = state_of(&b);
        assert_eq!(
            s.blockers[0],
            "`cargo test` fails: thread 'x' panicked at src/lib.rs:3"
        );
        assert!(s.next_steps.contains(&"Make `cargo test` pass".to_string()));
    }

    #[test]
    fn a_failing_checks_blocker_quotes_the_errors_that_broke_it_not_the_runners_last_line() {
        let mut b = Builder::new();
        b.user("move the shadow branch constants to paths");
        b.bash("c1", "go build ./...");
        b.push(EntryBody::ToolResult(ToolResultEntry {
            call_id: "c1".into(),
            tool_name: Some("Bash".into()),
            content: vec![ContentBlock::text(
                "[build] $ go build ./...\n# entire.io/cli/cmd/entire/cli/strategy\ncmd/strategy/common.go:256:28: undefined: paths.ShadowBranchPrefix\ncmd/strategy/common.go:273:26: undefined: paths.MetadataDir\ncmd/strategy/auto.go:12:2: undefined: paths.MetadataDir\ncmd/strategy/rewind.go:40:9: undefined: paths.SessionsDir\ncmd/strategy/rewind.go:41:9: undefined: paths.TrailerKey\n[build] ERROR task failed",
            )],
            is_error: true,
            exit_code: Some(1),
        }));
        let s = state_of(&b);
        assert_eq!(
            s.blockers[0],
            "`go build ./...` fails: cmd/strategy/common.go:256:28: undefined: paths.ShadowBranchPrefix; cmd/strategy/common.go:273:26: undefined: paths.MetadataDir; cmd/strategy/rewind.go:40:9: undefined: paths.SessionsDir"
        );
    }

    #[test]
    fn the_full_prompt_budget_spans_every_roll_forward() {
        let long = |tag: &str| format!("{tag} {}", "word ".repeat(3000));
        let mut prev_state = CapsuleState {
            goal: "goal".into(),
            ..Default::default()
        };
        prev_state.requests = vec![long("A"), long("B")];
        let prev = CapsuleEntry {
            state: prev_state,
            ..crate::session::testing::full_capsule()
        };
        let mut b = Builder::new();
        b.user(&long("C"));
        let entries: Vec<&Entry> = b.session.entries().iter().collect();
        let s = build_state(
            TokenizerKind::O200kBase,
            Some(&prev),
            &entries,
            &Artifacts::default(),
        );
        let total: u64 = s
            .requests
            .iter()
            .map(|c| TokenizerKind::O200kBase.count(c))
            .sum();
        assert!(total <= FULL_PROMPTS_BUDGET_TOKENS + 4 * 60, "{total}");
        // The previous goal, which "C" replaced, rolls forward first.
        assert_eq!(s.requests.len(), 4);
        assert_eq!(s.requests[0], "goal");
        assert!(s.requests[3].starts_with("C word"));
        assert!(s.requests[1].starts_with("A word") && s.requests[1].ends_with('…'));
    }

    /// Two hundred compactions, each folding a turn that reads, edits, checks, commits and
    /// says what it did and decided: the capsule stays under its budget and keeps the newest.
    fn printed(b: &mut Builder, call: &str, text: &str, code: i64) {
        b.push(EntryBody::ToolResult(ToolResultEntry {
            call_id: call.into(),
            tool_name: Some("Bash".into()),
            content: vec![ContentBlock::text(text)],
            is_error: code != 0,
            exit_code: Some(code),
        }));
    }

    /// A turn cut mid-work: the next step is the agent's own last message, quoted, not the
    /// request echoed back.
    #[test]
    fn a_turn_in_progress_is_picked_up_from_the_agents_last_words() {
        let mut b = Builder::new();
        b.user("Fix the flaky login test in auth/session.rs");
        b.assistant("The clock is read twice per request. Next I'll make the clock injectable in session.rs and pin it in the test.");
        b.call("r1", "Read", json!({"file_path": "/ws/auth/session.rs"}));
        let s = state_of(&b);
        assert_eq!(
            s.next_steps[0],
            "Pick up where the agent's last message left off: \"The clock is read twice per request. Next I'll make the clock injectable in session.rs and pin it in the test.\""
        );
        assert_eq!(
            s.next_steps[1..],
            [
                "Make the clock injectable in session.rs and pin it in the test.",
                "Continue: Fix the flaky login test in auth/session.rs"
            ]
        );
        // A last message that says little is quoted with the one before it.
        b.assistant("Let me try a different approach:");
        b.call("r2", "Read", json!({"file_path": "/ws/auth/clock.rs"}));
        let s = state_of(&b);
        assert!(
            s.next_steps[0].contains("pin it in the test. … Let me try a different approach:"),
            "{:?}",
            s.next_steps
        );
        // Before the agent said anything, the request is what to continue.
        let mut b = Builder::new();
        b.user("Fix the flaky login test in auth/session.rs");
        b.call("r1", "Read", json!({"file_path": "/ws/auth/session.rs"}));
        let s = state_of(&b);
        assert_eq!(
            s.next_steps,
            ["Continue: Fix the flaky login test in auth/session.rs"]
        );
        // "Let me fix this" names no work of its own.
        let mut b = Builder::new();
        b.user("Fix the flaky login test");
        b.assistant("Done. The test passes now.\n\nLet me fix this. Next I'll document the clock in docs/auth.md.");
        let s = state_of(&b);
        assert_eq!(s.next_steps, ["Document the clock in docs/auth.md."]);
    }

    #[test]
    fn a_confirmation_in_other_words_decides_what_the_agent_offered() {
        for reply in ["let's do that", "sounds good, implement it"] {
            let mut b = Builder::new();
            b.user("Why do the two sessions overwrite each other's metadata?");
            b.assistant("Both write metadata.json. Want me to archive each session to a numbered subfolder?");
            b.user(reply);
            let s = state_of(&b);
            assert_eq!(
                s.decisions.first().map(|d| d.decision.as_str()),
                Some("Archive each session to a numbered subfolder"),
                "{reply}: {:?}",
                s.decisions
            );
        }
    }

    #[test]
    fn a_reason_listed_for_a_proposal_is_not_what_a_yes_approves() {
        let mut b = Builder::new();
        b.user("How about numbered subfolders for the older sessions?");
        b.assistant("That's a clean design.\n\nI like this approach because:\n- Root level always has the latest session for simple reads\n- Numbered folders preserve the history of every session\n\nWant me to implement this?");
        b.user("One question: would the sessions branch handle this?");
        b.assistant("Yes. So the logic would go in writeStandardCheckpointEntries: archive the existing files to a numbered folder before writing. Want me to implement it?");
        b.user("yes");
        let s = state_of(&b);
        assert!(
            !s.decisions
                .iter()
                .any(|d| d.decision.contains("Root level")),
            "{:?}",
            s.decisions
        );
        assert!(
            s.decisions.iter().any(|d| d
                .decision
                .contains("archive the existing files to a numbered folder")),
            "{:?}",
            s.decisions
        );
    }

    #[test]
    fn conclusions_become_findings_and_a_chosen_option_a_decision() {
        let mut b = Builder::new();
        b.user("Why do the two sessions overwrite each other's metadata?");
        b.assistant("The root cause is that both sessions write metadata.json at PostCommit. There are two options:\n\n1. Archive each session to a numbered subfolder\n2. Overwrite the metadata on every commit\n\nWhich do you prefer?");
        let s = state_of(&b);
        assert_eq!(
            s.findings,
            [
                "The root cause is that both sessions write metadata.json at PostCommit.",
                "Options put to the user, not answered yet: 1) Archive each session to a numbered subfolder; 2) Overwrite the metadata on every commit"
            ]
        );
        b.user("yes, do option 1");
        let s = state_of(&b);
        assert_eq!(s.decisions.len(), 1, "{:?}", s.decisions);
        assert_eq!(
            s.decisions[0].decision,
            "Archive each session to a numbered subfolder"
        );
        assert_eq!(
            s.decisions[0].rationale,
            "the user chose it (\"yes, do option 1\")"
        );
        assert_eq!(
            s.findings,
            ["The root cause is that both sessions write metadata.json at PostCommit."]
        );
        assert!(s
            .sources
            .contains_key("Archive each session to a numbered subfolder"));
        // A plain "yes" to an offer or a proposal decides it.
        let mut b = Builder::new();
        b.user("Why do the two sessions overwrite each other's metadata?");
        b.assistant("Both write metadata.json. Would you like me to archive each session to a numbered subfolder?");
        b.user("yes");
        let s = state_of(&b);
        assert_eq!(
            s.decisions[0].decision,
            "Archive each session to a numbered subfolder"
        );
        assert_eq!(s.decisions[0].rationale, "the user approved it (\"yes\")");
        let mut b = Builder::new();
        b.user("How should we store the sessions?");
        b.assistant("I'd recommend one folder per session, so nothing is overwritten.");
        b.user("ok go ahead");
        let s = state_of(&b);
        assert_eq!(
            s.decisions[0].decision,
            "I'd recommend one folder per session, so nothing is overwritten."
        );
    }

    #[test]
    fn a_pasted_error_with_nothing_said_is_a_goal_to_fix_it() {
        let mut b = Builder::new();
        b.user("Add a --help flag to the CLI");
        b.assistant("Done. `cli --help` prints the usage.");
        b.user("node:internal/modules/cjs/loader:1228\n  throw err;\n  ^\n\nError: Cannot find module '/repo/src/package.json'\n    at Module._resolveFilename (node:internal/modules/cjs/loader:1225:15)\n    at Module._load (node:internal/modules/cjs/loader:1051:27)");
        let s = state_of(&b);
        assert!(
            s.goal.starts_with("Fix the error the user pasted: ")
                && s.goal
                    .contains("[pasted 5 lines of error output: Error: Cannot find module"),
            "{}",
            s.goal
        );
    }

    /// A rule that came with a request holds for it; a new goal ends it unless it says always
    /// or never.
    #[test]
    fn a_rule_stated_with_a_request_ends_with_it_unless_it_says_always_or_never() {
        let mut b = Builder::new();
        b.user("Can you check the skip hook part is actually working? don't fix anything, but just validate it works.");
        b.assistant("Done. The hook skips as it should.");
        b.user("Now make the warning show the other session's prompt. Invalid prompts must never crash the hook.");
        let s = state_of(&b);
        assert_eq!(
            s.constraints,
            ["Invalid prompts must never crash the hook."]
        );
    }

    /// A question the agent answered is a finished turn: no "Continue" of it, no quote of the
    /// answer as where to pick up.
    #[test]
    fn an_answered_question_is_a_finished_turn() {
        let mut b = Builder::new();
        b.user("Add the first two initials of the logged-in user to the NavUser avatar");
        b.assistant("Done. NavUser shows the initials.");
        b.user("does it get the logged in user from the authStore?");
        b.call("r1", "Read", json!({"file_path": "/ws/src/NavUser.tsx"}));
        b.assistant("Yes: NavUser reads `user` from useAuthStore() and falls back to Guest.");
        let s = state_of(&b);
        assert!(s.active.is_empty(), "{:?}", s.active);
        assert!(
            !s.next_steps
                .iter()
                .any(|n| n.starts_with("Continue:") || n.starts_with("Pick up")),
            "{:?}",
            s.next_steps
        );
    }

    /// A failure from an earlier task, with edits since, is not what blocks the task at hand.
    #[test]
    fn a_failure_from_an_earlier_task_with_edits_since_blocks_nothing() {
        let mut b = Builder::new();
        b.user("Port the theme loader to the new API");
        b.bash("t1", "npx tsc --noEmit src/theme.ts");
        printed(
            &mut b,
            "t1",
            "src/theme.ts(4,1): error TS2304: Cannot find name 'x'.",
            2,
        );
        b.call("e1", "Edit", json!({"file_path": "/ws/src/theme.ts"}));
        b.assistant("Done. The loader uses the new API.");
        b.user("Now add a --verbose flag to the CLI");
        b.call("e2", "Edit", json!({"file_path": "/ws/src/cli.ts"}));
        let s = state_of(&b);
        assert!(s.blockers.is_empty(), "{:?}", s.blockers);
        assert!(
            !s.next_steps.iter().any(|n| n.contains("npx tsc")),
            "{:?}",
            s.next_steps
        );
        // Failed for this task: a blocker, edits or not.
        b.bash("t2", "npm test");
        printed(&mut b, "t2", "FAIL src/cli.test.ts", 1);
        b.call("e3", "Edit", json!({"file_path": "/ws/src/cli.ts"}));
        let s = state_of(&b);
        assert_eq!(
            s.blockers,
            ["`npm test` fails: FAIL src/cli.test.ts (not re-run since the last edit)"]
        );
    }

    #[test]
    fn a_check_that_failed_then_passed_is_an_error_with_its_fix() {
        let mut b = Builder::new();
        b.user("Make the parser tests pass");
        b.bash("t1", "cargo test -p parser");
        printed(
            &mut b,
            "t1",
            "\u{1b}[31m⎯⎯⎯ Failed Tests 1 ⎯⎯⎯\u{1b}[39m\nthread 'lexes_numbers' panicked at src/lex.rs:9:5:\nassertion failed: tokens.len() == 3",
            101,
        );
        b.assistant(
            "The lexer drops the sign of negative numbers. I'll keep the minus in lex_number.",
        );
        b.call("e1", "Edit", json!({"file_path": "/ws/src/lex.rs"}));
        b.bash("t2", "cargo test -p parser");
        printed(&mut b, "t2", "test result: ok. 4 passed", 0);
        let s = state_of(&b);
        assert_eq!(s.errors.len(), 1, "{:?}", s.errors);
        assert_eq!(
            s.errors[0].error,
            "`cargo test -p parser` failed: thread 'lexes_numbers' panicked at src/lex.rs:9:5:"
        );
        assert_eq!(
            s.errors[0].fix,
            "The lexer drops the sign of negative numbers. I'll keep the minus in lex_number. — then `cargo test -p parser` passed"
        );
        assert!(s.blockers.is_empty(), "{:?}", s.blockers);
        // A failure still open is a blocker, its colour codes gone.
        let mut b = Builder::new();
        b.user("Make the parser tests pass");
        b.bash("t1", "pnpm test");
        printed(&mut b, "t1", "\u{1b}[31m⎯⎯⎯⎯\u{1b}[39m\u{1b}[1m Failed Tests 1 \u{1b}[22m\nDebugger attached.\nAssertionError: expected 2 to be 3", 1);
        let s = state_of(&b);
        assert_eq!(
            s.blockers,
            ["`pnpm test` fails: AssertionError: expected 2 to be 3"]
        );
    }

    #[test]
    fn the_capsule_stays_bounded_over_200_rolled_forward_compactions() {
        use crate::capsule::artifacts::collect;
        use crate::session::capsule::render::render_for_model;
        use crate::tool_mapping::ToolMapping;
        let mut previous: Option<CapsuleEntry> = None;
        let mut sizes = Vec::new();
        for round in 0..200 {
            let mut b = Builder::new();
            b.user(&format!(
                "Implement feature {round}: add the handler, wire it into the router and never break the public API. {}",
                "Details of the request. ".repeat(30)
            ));
            b.assistant(&format!("I'll use a trait object for handler {round} because the router stores them by name."));
            for f in 0..6 {
                b.call(
                    &format!("r{f}"),
                    "Read",
                    json!({"file_path": format!("/ws/src/r{round}_{f}.rs")}),
                );
                b.call(
                    &format!("w{f}"),
                    "Edit",
                    json!({"file_path": format!("/ws/src/w{round}_{f}.rs")}),
                );
            }
            b.bash("t", &format!("cargo test -p crate{round}"));
            exit(&mut b, "t", 0);
            b.bash("g", &format!("git commit -am \"Feature {round}\""));
            exit(&mut b, "g", 0);
            b.assistant(&format!(
                "Done. Feature {round} works.\n\n## Summary\n- Added handler {round}\n- Wired it into the router\n- Tests for {round}\n\n## Next steps\n- Document feature {round}"
            ));
            let entries: Vec<&Entry> = b.session.entries().iter().collect();
            let artifacts = collect(
                "/ws",
                previous.as_ref().map(|p| &p.artifacts),
                entries.iter().copied(),
                &ToolMapping::default(),
            );
            let state = build_state(
                TokenizerKind::O200kBase,
                previous.as_ref(),
                &entries,
                &artifacts,
            );
            let capsule = CapsuleEntry {
                state,
                artifacts,
                ..crate::session::testing::full_capsule()
            };
            sizes.push(TokenizerKind::O200kBase.count(&render_for_model(&capsule)));
            previous = Some(capsule);
        }
        let max = *sizes.iter().max().unwrap();
        assert!(
            max <= LOCAL_CAPSULE_BUDGET_TOKENS + 200,
            "largest capsule {max} tokens: {sizes:?}"
        );
        let last = previous.unwrap();
        assert!(
            last.state.goal.starts_with("Implement feature 199"),
            "{}",
            last.state.goal
        );
        assert!(
            last.state
                .completed
                .iter()
                .any(|c| c.contains("Feature 199")),
            "{:?}",
            last.state.completed
        );
        assert_eq!(last.state.next_steps, ["Document feature 199"]);
        assert!(last
            .artifacts
            .modified_files
            .iter()
            .any(|f| f.path == "src/w199_5.rs"));
        assert!(!last
            .artifacts
            .modified_files
            .iter()
            .any(|f| f.path == "src/w0_0.rs"));
        assert!(
            last.state.sources.len() <= 80,
            "{}",
            last.state.sources.len()
        );
    }

    #[test]
    fn a_previous_goal_reported_done_gives_way_to_the_message_at_work() {
        let mut prev_state = CapsuleState {
            goal: "Can we add the up-arrow hint to the warning".into(),
            ..Default::default()
        };
        prev_state
            .completed
            .push("Can we add the up-arrow hint to the warning → Done.".into());
        let prev = previous_capsule(prev_state);
        let mut b = Builder::new();
        b.user("do we have an integration test with two sessions committed together?");
        b.assistant("The test shows only session A was condensed. Let me check why.");
        b.bash("c1", "go test ./...");
        let entries: Vec<&Entry> = b.session.entries().iter().collect();
        let s = build_state(
            TokenizerKind::O200kBase,
            Some(&prev),
            &entries,
            &Artifacts::default(),
        );
        assert!(
            s.goal.starts_with("do we have an integration test")
                && s.goal.contains("Can we add the up-arrow hint"),
            "{}",
            s.goal
        );
    }

    /// A local capsule written before the span being built, holding `state`.
    fn previous_capsule(state: CapsuleState) -> CapsuleEntry {
        CapsuleEntry {
            checkpoint_id: "ck_1".into(),
            trigger: crate::session::trigger::Trigger::AutoThreshold,
            quality: crate::session::capsule::model::Quality::Degraded,
            first_kept_entry_id: None,
            previous_checkpoint_id: None,
            state,
            artifacts: Artifacts::default(),
            tokens: Default::default(),
            origin: crate::session::capsule::model::Origin::Session,
            mirrored: false,
            title: None,
            degraded_reason: None,
            instructions: None,
            elide_tool_results_over: None,
            loaded_from: None,
        }
    }

    #[test]
    fn previous_state_rolls_forward() {
        let mut prev_state = CapsuleState {
            goal: "original goal".into(),
            ..Default::default()
        };
        prev_state.completed.push("step one".into());
        prev_state
            .decisions
            .push(crate::session::capsule::model::Decision {
                decision: "use sqlite".into(),
                rationale: "simple".into(),
            });
        let prev = previous_capsule(prev_state);
        let mut b = Builder::new();
        b.user("next request");
        let entries: Vec<&Entry> = b.session.entries().iter().collect();
        let s = build_state(
            TokenizerKind::O200kBase,
            Some(&prev),
            &entries,
            &Artifacts::default(),
        );
        assert_eq!(
            s.goal, "original goal",
            "a short follow-up does not replace the goal"
        );
        assert_eq!(s.completed, ["step one"]);
        assert_eq!(s.requests, ["next request"]);
        assert_eq!(s.decisions.len(), 1);
    }
}
