//! The deterministic local capsule: built from the log alone, no model. It is the fallback the
//! spec names and the default when no summarization model is configured, so it is always
//! marked `quality: degraded`.

use serde_json::Value;

use super::model::{Artifacts, CapsuleEntry, CapsuleState, VerificationOutcome};
use crate::session::entry::{blocks_text, Entry, EntryBody, Role};
use crate::tokens::TokenizerKind;

/// Every prompt keeps at least this many characters of its opening.
pub const PROMPT_OPENING_CHARS: usize = 200;
/// Budget for prompts kept in full, newest first (the first prompt is always kept in full).
pub const FULL_PROMPTS_BUDGET_TOKENS: u64 = 4000;
/// How many recent tool errors are considered unresolved blockers.
const RECENT_TOOL_RESULTS: usize = 3;

/// Text a harness injects into user turns rather than a person typing it.
fn is_injected(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("<command-")
        || t.starts_with("<local-command")
        || t.starts_with("<system-reminder>")
        || t.starts_with("Caveat: The messages below were generated")
        || t.starts_with("<environment_context>")
        || t.starts_with("<user_instructions>")
        || t.starts_with("[Request interrupted")
}

/// The real user prompts among `entries`, oldest first.
pub fn user_prompts<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Vec<String> {
    entries
        .into_iter()
        .filter_map(|e| match &e.body {
            EntryBody::Message(m) if m.role == Role::User && !m.synthetic => {
                let text = blocks_text(&m.content);
                let text = text.trim();
                (!text.is_empty() && !is_injected(text)).then(|| text.to_string())
            }
            _ => None,
        })
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
    let mut prompts = user_prompts(summarized.iter().copied());

    // Goal: the first prompt of the session, in full.
    let goal = match prev.map(|p| p.goal.trim()).filter(|g| !g.is_empty()) {
        Some(g) => g.to_string(),
        None if !prompts.is_empty() => prompts.remove(0),
        None => String::new(),
    };

    // Later prompts: full text newest first within a budget, the opening of the rest.
    let mut budget = FULL_PROMPTS_BUDGET_TOKENS;
    let mut kept: Vec<String> = prompts
        .iter()
        .rev()
        .map(|p| {
            let t = tokenizer.count(p);
            if t <= budget {
                budget -= t;
                p.clone()
            } else {
                budget = 0;
                opening(p)
            }
        })
        .collect();
    kept.reverse();
    let mut constraints = prev.map(|p| p.constraints.clone()).unwrap_or_default();
    for p in kept {
        push_unique(&mut constraints, p);
    }

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
    for e in recent_tool_errors(summarized) {
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
        next_steps = prev.map(|p| p.next_steps.clone()).unwrap_or_default();
    }

    CapsuleState {
        goal,
        constraints,
        completed,
        active,
        pending,
        decisions: prev.map(|p| p.decisions.clone()).unwrap_or_default(),
        blockers,
        next_steps,
    }
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
fn recent_tool_errors(entries: &[&Entry]) -> Vec<String> {
    let results: Vec<_> = entries.iter().filter_map(|e| e.as_tool_result()).collect();
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
    fn the_first_prompt_is_the_goal_in_full() {
        let mut b = Builder::new();
        let long = "Fix the flaky login test. ".repeat(40);
        b.user(&long);
        b.user("also keep the public API unchanged");
        let s = state_of(&b);
        assert_eq!(s.goal, long.trim());
        assert_eq!(s.constraints, ["also keep the public API unchanged"]);
    }

    #[test]
    fn every_prompt_keeps_at_least_its_opening_newest_in_full() {
        let mut b = Builder::new();
        b.user("goal");
        let old = format!("OLD {}", "x ".repeat(5000));
        let new = format!("NEW {}", "y ".repeat(1000));
        b.user(&old);
        b.user(&new);
        let s = state_of(&b);
        assert_eq!(s.constraints.len(), 2);
        assert!(s.constraints[0].starts_with("OLD x"));
        assert_eq!(
            s.constraints[0].chars().count(),
            PROMPT_OPENING_CHARS + 1,
            "opening plus ellipsis"
        );
        assert_eq!(s.constraints[1], new.trim());
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
        assert_eq!(s.goal, "original goal");
        assert_eq!(s.completed, ["step one"]);
        assert_eq!(s.constraints, ["next request"]);
        assert_eq!(s.decisions.len(), 1);
    }
}
