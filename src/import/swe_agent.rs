//! SWE-agent trajectories (`<instance>.traj`): one JSON document
//! `{trajectory, history, info, replay_config, environment}`.
//!
//! `history` is the model input SWE-agent kept: `{role, content, message_type, agent, is_demo,
//! action, tool_calls, tool_call_ids}`. A leading `system` item is the system prompt;
//! demonstrations (`is_demo`) are model input the user did not type (kept, marked synthetic).
//! With function calling, assistant items carry OpenAI `tool_calls` and results are `tool`
//! items with `tool_call_ids`. Without it (thought-action parsers), the assistant's `action` is
//! the command it ran and the next `observation` item is its output: the action becomes a
//! `bash` call and the observation its result. A file with no `history` (older versions) is
//! read from `trajectory[]` steps (`response`, `action`, `observation`). The model is
//! `replay_config` (a JSON string) `agent.model.name`.

use serde_json::Value;

use super::{
    message, str_field, value_text, EntryBuilder, Format, HeaderInfo, ImportError, ImportOptions,
    ImportResult,
};
use soba_core::session::entry::{ContentBlock, EntryBody, Role, SettingEntry, ToolResultEntry};

/// Whether a whole-file document is a SWE-agent trajectory.
pub(crate) fn looks_like_trajectory(doc: &Value) -> bool {
    doc.get("trajectory").is_some_and(Value::is_array)
        && (doc.get("history").is_some_and(Value::is_array) || doc.get("info").is_some())
}

pub fn import_str(text: &str, options: &ImportOptions) -> Result<ImportResult, ImportError> {
    let wrong = |reason: String| ImportError::WrongFormat {
        format: Format::SweAgent,
        reason,
    };
    let doc: Value =
        serde_json::from_str(text).map_err(|e| wrong(format!("not one JSON document ({e})")))?;
    if !looks_like_trajectory(&doc) {
        return Err(wrong(
            "expected an object with a `trajectory` array and `history` or `info`".into(),
        ));
    }
    let mut builder = EntryBuilder::new(Format::SweAgent, &options.now);
    let mut header = HeaderInfo::new(Format::SweAgent, options);
    if let Some(model) = replay_model(&doc) {
        header.set_model(&model);
    }
    match doc.get("history").and_then(Value::as_array) {
        Some(history) if !history.is_empty() => from_history(history, &mut builder),
        _ => from_steps(
            doc["trajectory"].as_array().map_or(&[][..], Vec::as_slice),
            &mut builder,
        ),
    }
    Ok(builder.finish(header))
}

/// `replay_config` is the run's configuration serialized as a JSON string.
fn replay_model(doc: &Value) -> Option<String> {
    let config: Value = match doc.get("replay_config")? {
        Value::String(s) => serde_json::from_str(s).ok()?,
        other => other.clone(),
    };
    config
        .pointer("/agent/model/name")
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn from_history(history: &[Value], builder: &mut EntryBuilder) {
    // The call id an observation answers, when the previous action had no tool call of its own.
    let mut open_action: Option<String> = None;
    for (i, item) in history.iter().enumerate() {
        let source_id = format!("history[{i}]");
        let content = content_text(item.get("content"));
        let body = match str_field(item, "role") {
            Some("system") if builder.entries().is_empty() => EntryBody::Setting(SettingEntry {
                system_prompt: Some(content),
                ..SettingEntry::default()
            }),
            Some("system") => {
                EntryBody::Message(message(Role::System, vec![ContentBlock::text(content)]))
            }
            Some("assistant") => {
                let mut blocks = Vec::new();
                if !content.is_empty() {
                    blocks.push(ContentBlock::text(content));
                }
                let calls = item.get("tool_calls").and_then(Value::as_array);
                for call in calls.into_iter().flatten() {
                    blocks.push(openai_call(call));
                }
                open_action = None;
                if calls.is_none_or(|c| c.is_empty()) {
                    if let Some(action) = str_field(item, "action").filter(|a| !a.trim().is_empty())
                    {
                        let id = format!("action-{i}");
                        blocks.push(ContentBlock::ToolCall {
                            id: id.clone(),
                            name: "bash".into(),
                            input: Box::new(serde_json::json!({ "command": action.trim() })),
                            extra: Default::default(),
                        });
                        open_action = Some(id);
                    }
                }
                let mut m = message(Role::Assistant, blocks);
                m.synthetic = is_demo(item);
                EntryBody::Message(m)
            }
            Some("tool") => EntryBody::ToolResult(ToolResultEntry {
                call_id: item
                    .get("tool_call_ids")
                    .and_then(Value::as_array)
                    .and_then(|ids| ids.first())
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                tool_name: None,
                content: vec![ContentBlock::text(content)],
                is_error: false,
                exit_code: None,
            }),
            Some("user") if str_field(item, "message_type") == Some("observation") => {
                match open_action.take() {
                    Some(call_id) => EntryBody::ToolResult(ToolResultEntry {
                        call_id,
                        tool_name: Some("bash".into()),
                        content: vec![ContentBlock::text(content)],
                        is_error: false,
                        exit_code: None,
                    }),
                    None => user(item, content),
                }
            }
            Some("user") => user(item, content),
            other => {
                builder.unknown(format!("history role:{}", other.unwrap_or("(none)")));
                continue;
            }
        };
        let parent = builder.last_id();
        builder.push(parent, Some(&source_id), None, body);
    }
}

fn user(item: &Value, content: String) -> EntryBody {
    let mut m = message(Role::User, vec![ContentBlock::text(content)]);
    m.synthetic = is_demo(item);
    EntryBody::Message(m)
}

fn is_demo(item: &Value) -> bool {
    item.get("is_demo")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Older trajectories without `history`: each step is a response, the action it ran and the
/// observation it got.
fn from_steps(steps: &[Value], builder: &mut EntryBuilder) {
    for (i, step) in steps.iter().enumerate() {
        let source_id = format!("trajectory[{i}]");
        let mut blocks = Vec::new();
        let response = str_field(step, "response").unwrap_or("");
        if !response.is_empty() {
            blocks.push(ContentBlock::text(response));
        }
        let action = str_field(step, "action").unwrap_or("").trim();
        let call_id = format!("action-{i}");
        if !action.is_empty() {
            blocks.push(ContentBlock::ToolCall {
                id: call_id.clone(),
                name: "bash".into(),
                input: Box::new(serde_json::json!({ "command": action })),
                extra: Default::default(),
            });
        }
        if blocks.is_empty() {
            builder.skipped("trajectory step (empty)");
            continue;
        }
        let parent = builder.last_id();
        builder.push(
            parent,
            Some(&source_id),
            None,
            EntryBody::Message(message(Role::Assistant, blocks)),
        );
        if !action.is_empty() {
            let parent = builder.last_id();
            builder.push(
                parent,
                Some(&source_id),
                None,
                EntryBody::ToolResult(ToolResultEntry {
                    call_id,
                    tool_name: Some("bash".into()),
                    content: vec![ContentBlock::text(
                        str_field(step, "observation").unwrap_or(""),
                    )],
                    is_error: false,
                    exit_code: None,
                }),
            );
        }
    }
}

fn openai_call(call: &Value) -> ContentBlock {
    let function = call.get("function").unwrap_or(&Value::Null);
    let input = match function.get("arguments") {
        Some(Value::String(s)) => {
            serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
        }
        Some(other) => other.clone(),
        None => Value::Null,
    };
    ContentBlock::ToolCall {
        id: str_field(call, "id").unwrap_or("").to_string(),
        name: str_field(function, "name").unwrap_or("").to_string(),
        input: Box::new(input),
        extra: Default::default(),
    }
}

/// History content is a string or a list of `{type: "text", text}` parts.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| {
                str_field(p, "text")
                    .map(str::to_string)
                    .unwrap_or_else(|| value_text(p))
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(v) => value_text(v),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::check::{is_one_line, loads};
    use crate::import::testing::options;
    use serde_json::json;
    use soba_core::session::entry::blocks_text;

    fn replay_config() -> String {
        json!({"agent": {"model": {"name": "claude-sonnet-4-20250514"}}}).to_string()
    }

    #[test]
    fn a_function_calling_swe_agent_trajectory_pairs_calls_and_tool_results() {
        let traj = json!({
            "environment": "main",
            "replay_config": replay_config(),
            "info": {"exit_status": "submitted", "model_stats": {"api_calls": 2}},
            "trajectory": [{"action": "ls", "observation": "setup.py", "response": "", "thought": ""}],
            "history": [
                {"role": "system", "content": "You are a helpful assistant.", "agent": "main", "message_type": "system_prompt"},
                {"role": "user", "content": [{"type": "text", "text": "<uploaded_files>/repo</uploaded_files> fix issue 7"}], "agent": "main", "message_type": "observation"},
                {"role": "assistant", "content": "Let me look.", "thought": "Let me look.", "action": "ls", "agent": "main",
                 "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}],
                 "message_type": "action"},
                {"role": "tool", "content": [{"type": "text", "text": "OBSERVATION:\nsetup.py"}], "agent": "main", "message_type": "observation", "tool_call_ids": ["toolu_1"]},
                {"role": "assistant", "content": "Editing.", "agent": "main", "message_type": "action",
                 "tool_calls": [{"id": "toolu_2", "type": "function", "function": {"name": "str_replace_editor", "arguments": "{\"command\": \"str_replace\", \"path\": \"/repo/setup.py\"}"}}]},
                {"role": "tool", "content": "The file /repo/setup.py has been edited.", "message_type": "observation", "tool_call_ids": ["toolu_2"]}
            ]
        });
        let r = import_str(&traj.to_string(), &options()).unwrap();
        assert_eq!(r.report.model.as_deref(), Some("claude-sonnet-4-20250514"));
        assert!(matches!(&r.entries[0].body, EntryBody::Setting(s) if s.system_prompt.is_some()));
        assert_eq!(r.report.messages.user, 1);
        assert_eq!(r.report.tool_calls, 2);
        assert_eq!(r.report.tool_results, 2);
        assert_eq!(r.report.unmatched_calls, 0);
        assert_eq!(r.report.orphan_results, 0);
        let user = r.entries[1].as_message().unwrap();
        assert!(blocks_text(&user.content).contains("fix issue 7"));
        assert!(is_one_line(&r));
        loads(&r);
    }

    #[test]
    fn a_thought_action_trajectory_turns_each_action_into_a_bash_call() {
        let traj = json!({
            "trajectory": [],
            "info": {},
            "history": [
                {"role": "system", "content": "SETTING: you are an autonomous programmer", "message_type": "system_prompt"},
                {"role": "user", "content": "demo task", "is_demo": true, "message_type": "demonstration"},
                {"role": "user", "content": "We're solving this issue: tests fail", "message_type": "observation"},
                {"role": "assistant", "content": "DISCUSSION\nrun the tests\n```\npytest -q\n```", "action": "pytest -q\n", "message_type": "action"},
                {"role": "user", "content": "1 failed", "message_type": "observation"}
            ]
        });
        let r = import_str(&traj.to_string(), &options()).unwrap();
        assert!(
            r.entries[1].as_message().unwrap().synthetic,
            "a demonstration"
        );
        let call = r
            .entries
            .iter()
            .flat_map(|e| e.tool_calls())
            .next()
            .expect("the action is a call");
        assert_eq!(call.1, "bash");
        assert_eq!(call.2["command"], "pytest -q");
        assert_eq!(r.report.tool_results, 1);
        assert_eq!(r.report.unmatched_calls, 0);
        loads(&r);
    }

    #[test]
    fn a_trajectory_without_history_is_read_from_its_steps() {
        let traj = json!({
            "info": {"exit_status": "submitted"},
            "trajectory": [
                {"action": "find_file setup.py", "observation": "Found 1 match", "response": "find it", "thought": "find it", "state": {}},
                {"action": "submit", "observation": "diff --git", "response": "done", "thought": "done", "state": {}}
            ]
        });
        let r = import_str(&traj.to_string(), &options()).unwrap();
        assert_eq!(r.report.tool_calls, 2);
        assert_eq!(r.report.tool_results, 2);
        loads(&r);
    }
}
