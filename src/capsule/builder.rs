//! The deterministic local capsule: built from the log alone, no model. It is the fallback the
//! spec names and the default when no summarization model is configured, so it is always
//! marked `quality: degraded`.

use serde_json::Value;

use super::decisions::stated_decisions;
use super::model::{Artifacts, CapsuleEntry, CapsuleState, Decision, VerificationOutcome};
use super::requests::{latest_substantive, stated_rules, typed_text};
use crate::session::entry::{blocks_text, Entry, EntryBody, Role};
use crate::tokens::TokenizerKind;

/// Every prompt keeps at least this many characters of its opening.
pub const PROMPT_OPENING_CHARS: usize = 200;
/// Budget for prompts kept in full, newest first (the first prompt is always kept in full).
pub const FULL_PROMPTS_BUDGET_TOKENS: u64 = 4000;
/// Constraints kept, newest: older rules stay in the requests they came from.
const MAX_CONSTRAINTS: usize = 20;
/// Decisions kept, newest.
const MAX_DECISIONS: usize = 20;
/// How many recent tool errors are considered unresolved blockers.
const RECENT_TOOL_RESULTS: usize = 3;

/// The requests a person typed among `entries`, oldest first, boilerplate cut.
pub fn user_prompts<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Vec<String> {
    entries
        .into_iter()
        .filter_map(|e| match &e.body {
            EntryBody::Message(m) if m.role == Role::User && !m.synthetic => {
                typed_text(&blocks_text(&m.content))
            }
            _ => None,
        })
        .collect()
}

/// Decisions stated in the assistant's text among `entries`, oldest first.
fn assistant_decisions(entries: &[&Entry]) -> Vec<Decision> {
    entries
        .iter()
        .filter_map(|e| match &e.body {
            EntryBody::Message(m) if m.role == Role::Assistant => {
                Some(stated_decisions(&blocks_text(&m.content)))
            }
            _ => None,
        })
        .flatten()
        .collect()
}

fn opening(text: &str) -> String {
    let mut chars = text.chars();
    let head: String = chars.by_ref().take(PROMPT_OPENING_CHARS).collect();
    if chars.next().is_some() {
        format!("{head}…")
    } else {
        head
    }
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

/// The newest task list among `entries`.
pub fn latest_task_list<'a>(
    entries: impl DoubleEndedIterator<Item = &'a Entry>,
) -> Option<TaskList> {
    entries.rev().find_map(|e| {
        e.tool_calls()
            .filter_map(|(_, name, input)| task_list(name, input))
            .last()
    })
}

fn push_unique(list: &mut Vec<String>, item: String) {
    if !list.contains(&item) {
        list.push(item);
    }
}

/// Build the narrative state from the history being folded, the previous capsule and the facts.
pub fn build_state(
    tokenizer: TokenizerKind,
    previous: Option<&CapsuleEntry>,
    summarized: &[&Entry],
    artifacts: &Artifacts,
) -> CapsuleState {
    let prev = previous.map(|p| &p.state);
    let prompts = user_prompts(summarized.iter().copied());

    // Requests: the previous capsule's first, then this span's; the newest in full within one
    // budget for the whole rolled-forward list, the opening of the rest. The budget spans every
    // roll-forward, so capsules do not grow by a budget per compaction.
    let mut all: Vec<String> = prev.map(|p| p.requests.clone()).unwrap_or_default();
    for p in &prompts {
        push_unique(&mut all, p.clone());
    }
    let mut budget = FULL_PROMPTS_BUDGET_TOKENS;
    let mut requests: Vec<String> = Vec::with_capacity(all.len());
    for p in all.iter().rev() {
        let t = tokenizer.count(p);
        if t <= budget {
            budget -= t;
            requests.push(p.clone());
        } else {
            budget = 0;
            requests.push(opening(p));
        }
    }
    requests.reverse();
    requests.dedup();

    // Goal: the latest substantive request of this span (not "yes", not "proof read this"),
    // else the previous capsule's goal, else the session's first request.
    let goal = latest_substantive(&prompts)
        .cloned()
        .or_else(|| {
            prev.map(|p| p.goal.trim().to_string())
                .filter(|g| !g.is_empty())
        })
        .or_else(|| prompts.first().cloned())
        .unwrap_or_default();

    // Constraints: what the user stated as a rule, newest last.
    let mut constraints: Vec<String> = prev.map(|p| p.constraints.clone()).unwrap_or_default();
    for p in &prompts {
        for rule in stated_rules(p) {
            push_unique(&mut constraints, rule);
        }
    }
    let n = constraints.len().saturating_sub(MAX_CONSTRAINTS);
    constraints.drain(..n);

    // Work state: the newest task list, else what the previous capsule said.
    let tasks = latest_task_list(summarized.iter().copied());
    let mut completed = prev.map(|p| p.completed.clone()).unwrap_or_default();
    let (active, mut pending) = match &tasks {
        Some(t) => {
            for c in &t.completed {
                push_unique(&mut completed, c.clone());
            }
            (t.active.clone(), t.pending.clone())
        }
        None => (
            prev.map(|p| p.active.clone()).unwrap_or_default(),
            prev.map(|p| p.pending.clone()).unwrap_or_default(),
        ),
    };
    pending.retain(|p| !completed.contains(p));

    // Tool outcomes: passing checks are completed work, failing ones are blockers.
    let mut blockers = Vec::new();
    for v in &artifacts.verification {
        let passes = format!("`{}` passes", v.command);
        match v.outcome {
            VerificationOutcome::Passed => push_unique(&mut completed, passes),
            VerificationOutcome::Failed => {
                completed.retain(|c| c != &passes);
                let detail = failure_line(summarized, &v.entry_id);
                blockers.push(match detail {
                    Some(d) => format!("`{}` fails: {d}", v.command),
                    None => format!("`{}` fails", v.command),
                });
            }
            VerificationOutcome::Unknown => {}
        }
    }
    for e in recent_tool_errors(summarized, artifacts) {
        push_unique(&mut blockers, e);
    }

    let mut next_steps: Vec<String> = active
        .iter()
        .chain(pending.iter())
        .take(10)
        .cloned()
        .collect();
    for v in artifacts
        .verification
        .iter()
        .filter(|v| v.outcome == VerificationOutcome::Failed)
    {
        push_unique(&mut next_steps, format!("Make `{}` pass", v.command));
    }
    if next_steps.is_empty() {
        // The previous capsule's next steps, less those done since: a step now completed, or
        // "Make `X` pass" once `X` passed.
        let passed = |step: &str| {
            artifacts.verification.iter().any(|v| {
                v.outcome == VerificationOutcome::Passed
                    && step == format!("Make `{}` pass", v.command)
            })
        };
        next_steps = prev
            .map(|p| p.next_steps.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|s| !completed.contains(s) && !passed(s))
            .collect();
    }

    let mut decisions: Vec<Decision> = prev.map(|p| p.decisions.clone()).unwrap_or_default();
    for d in assistant_decisions(summarized) {
        if !decisions.iter().any(|x| x.decision == d.decision) {
            decisions.push(d);
        }
    }
    let n = decisions.len().saturating_sub(MAX_DECISIONS);
    decisions.drain(..n);

    CapsuleState {
        goal,
        requests,
        constraints,
        completed,
        active,
        pending,
        decisions,
        blockers,
        next_steps,
    }
}

/// Items kept per list by [`trim_state`].
const TRIMMED_LIST_ITEMS: usize = 12;

/// A shorter state for when the capsule itself does not fit a small window: prompts by their
/// openings, the newest items of each list. The goal and every artifact stay.
pub fn trim_state(mut s: CapsuleState) -> CapsuleState {
    let newest = |v: &mut Vec<String>| {
        let n = v.len().saturating_sub(TRIMMED_LIST_ITEMS);
        v.drain(..n);
        for item in v.iter_mut() {
            *item = opening(item);
        }
    };
    newest(&mut s.requests);
    newest(&mut s.constraints);
    newest(&mut s.completed);
    newest(&mut s.active);
    newest(&mut s.pending);
    newest(&mut s.blockers);
    newest(&mut s.next_steps);
    let n = s.decisions.len().saturating_sub(TRIMMED_LIST_ITEMS);
    s.decisions.drain(..n);
    s
}

/// First meaningful error line of the result of the call in `call_entry_id`.
fn failure_line(entries: &[&Entry], call_entry_id: &str) -> Option<String> {
    let call_ids: Vec<&str> = entries
        .iter()
        .find(|e| e.id == call_entry_id)?
        .tool_calls()
        .map(|(id, _, _)| id)
        .collect();
    let result = entries.iter().rev().find_map(|e| match &e.body {
        EntryBody::ToolResult(r) if call_ids.contains(&r.call_id.as_str()) => Some(r),
        _ => None,
    })?;
    let text = blocks_text(&result.content);
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| {
            let l = l.to_ascii_lowercase();
            l.starts_with("error")
                || l.contains("failed")
                || l.contains("panicked")
                || l.starts_with("fail")
                || l.contains("assert")
        })
        .or_else(|| text.lines().map(str::trim).find(|l| !l.is_empty()))?;
    Some(opening_chars(line, 160))
}

fn opening_chars(s: &str, n: usize) -> String {
    let mut out: String = s.chars().take(n).collect();
    if s.chars().count() > n {
        out.push('…');
    }
    out
}

/// Errors among the last few tool results that no later success of the same tool resolved.
/// Runs of a verification command are left out: the verification list holds each command's
/// latest outcome, so a test that failed and then passed is no blocker.
fn recent_tool_errors(entries: &[&Entry], artifacts: &Artifacts) -> Vec<String> {
    let runs_a_check = |call_id: &str| {
        entries.iter().any(|e| {
            e.tool_calls().any(|(id, _, input)| {
                id == call_id
                    && artifacts
                        .verification
                        .iter()
                        .any(|v| input.to_string().contains(&v.command))
            })
        })
    };
    let results: Vec<_> = entries
        .iter()
        .filter_map(|e| e.as_tool_result())
        .filter(|r| !runs_a_check(&r.call_id))
        .collect();
    let recent = &results[results.len().saturating_sub(RECENT_TOOL_RESULTS)..];
    recent
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            r.is_error
                && !recent[i + 1..]
                    .iter()
                    .any(|later| !later.is_error && later.tool_name == r.tool_name)
        })
        .map(|(_, r)| {
            let first = blocks_text(&r.content);
            let first = first
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("error");
            format!(
                "{} error: {}",
                r.tool_name.as_deref().unwrap_or("tool"),
                opening_chars(first, 160)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capsule::artifacts::{collect, ToolMapping};
    use crate::session::entry::{ContentBlock, MessageEntry, ToolResultEntry};
    use crate::session::testing::Builder;
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

    #[test]
    fn the_goal_is_the_latest_substantive_request_in_full() {
        let mut b = Builder::new();
        b.user("Can you audit the session module?");
        let long = "Fix the flaky login test. ".repeat(40);
        b.user(&long);
        b.user("yes");
        b.user("can you proof read this?");
        let s = state_of(&b);
        assert_eq!(s.goal, long.trim());
        assert_eq!(
            s.requests,
            [
                "Can you audit the session module?",
                long.trim(),
                "yes",
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
            ..crate::capsule::render::tests::full_capsule()
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
        assert!(s
            .completed
            .contains(&"`cargo test -- --include-ignored` passes".to_string()));
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
        assert!(s.completed.contains(&"`cargo build` passes".to_string()));
    }

    #[test]
    fn every_request_keeps_at_least_its_opening_newest_in_full() {
        let mut b = Builder::new();
        b.user("goal");
        let old = format!("OLD {}", "x ".repeat(5000));
        let new = format!("NEW {}", "y ".repeat(1000));
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
    fn the_full_prompt_budget_spans_every_roll_forward() {
        let long = |tag: &str| format!("{tag} {}", "word ".repeat(3000));
        let mut prev_state = CapsuleState {
            goal: "goal".into(),
            ..Default::default()
        };
        prev_state.requests = vec![long("A"), long("B")];
        let prev = CapsuleEntry {
            state: prev_state,
            ..crate::capsule::render::tests::full_capsule()
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
        assert!(total <= FULL_PROMPTS_BUDGET_TOKENS + 3 * 60, "{total}");
        assert_eq!(s.requests.len(), 3);
        assert!(s.requests[2].starts_with("C word"));
        assert!(s.requests[0].starts_with("A word") && s.requests[0].ends_with('…'));
    }

    #[test]
    fn previous_state_rolls_forward() {
        let mut prev_state = CapsuleState {
            goal: "original goal".into(),
            ..Default::default()
        };
        prev_state.completed.push("step one".into());
        prev_state.decisions.push(crate::capsule::model::Decision {
            decision: "use sqlite".into(),
            rationale: "simple".into(),
        });
        let prev = CapsuleEntry {
            checkpoint_id: "ck_1".into(),
            trigger: crate::session::entry::Trigger::AutoThreshold,
            quality: crate::capsule::Quality::Degraded,
            first_kept_entry_id: None,
            previous_checkpoint_id: None,
            state: prev_state,
            artifacts: Artifacts::default(),
            tokens: Default::default(),
            origin: crate::capsule::Origin::Session,
            mirrored: false,
            title: None,
            degraded_reason: None,
            instructions: None,
            elide_tool_results_over: None,
            loaded_from: None,
        };
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
