//! GitHub Copilot CLI session logs: `~/.copilot/session-state/<id>/events.jsonl` (older
//! versions: `~/.copilot/session-state/<id>.jsonl`).
//!
//! Every line is an event `{type, id, timestamp, parentId, data}`. `session.start` names the
//! session, its working directory (`data.context.cwd`) and the selected model;
//! `session.model_change` a later model. `user.message` is a prompt (`data.content`, what the
//! user typed; `transformedContent` adds the CLI's injected reminders and is not kept).
//! `assistant.message` carries the reply text, `reasoningText`, and `toolRequests[]`
//! (`toolCallId`, `name`, `arguments`). `tool.execution_complete` is the result of one call
//! (`toolCallId`, `success`, `result.content`, or `error.message`).

use std::collections::HashMap;

use serde_json::Value;

use super::{
    message, read_jsonl, str_field, value_text, EntryBuilder, Format, HeaderInfo, ImportError,
    ImportOptions, ImportResult,
};
use soba_core::session::entry::{ContentBlock, EntryBody, Role, ToolResultEntry};

/// Event types that carry no model input: streaming pieces, turn markers, UI notices.
const NOT_MODEL_INPUT: &[&str] = &[
    "assistant.message_delta",
    "assistant.reasoning",
    "assistant.reasoning_delta",
    "assistant.turn_start",
    "assistant.turn_end",
    "assistant.intent",
    "tool.execution_start",
    "tool.execution_partial_result",
    "session.info",
    "session.error",
    "session.resume",
    "session.usage_info",
    "session.mcp_server_status_changed",
    "abort",
    "result",
];

/// Whether an event has the Copilot CLI's shape: a dotted `type` and a `data` object.
pub(crate) fn looks_like_record(v: &Value) -> bool {
    let Some(ty) = str_field(v, "type") else {
        return false;
    };
    v.get("data").is_some_and(Value::is_object)
        && (ty == "session.start" || ty == "user.message" || ty == "assistant.message")
}

pub fn import_str(text: &str, options: &ImportOptions) -> Result<ImportResult, ImportError> {
    let (records, corrupt) = read_jsonl(text);
    if !records.iter().any(|(_, r)| looks_like_record(r)) {
        return Err(ImportError::WrongFormat {
            format: Format::CopilotCli,
            reason: "no `session.start`, `user.message` or `assistant.message` event with a \
                     `data` object"
                .into(),
        });
    }
    let mut builder = EntryBuilder::new(Format::CopilotCli, &options.now);
    builder.report.corrupt_lines = corrupt;
    let mut header = HeaderInfo::new(Format::CopilotCli, options);
    // Tool names by call id, for results (the result event does not repeat the name).
    let mut tool_names: HashMap<String, String> = HashMap::new();
    for (line, event) in &records {
        let ty = str_field(event, "type").unwrap_or("(none)");
        let data = event.get("data").unwrap_or(&Value::Null);
        let ts = str_field(event, "timestamp");
        if let Some(ts) = ts {
            header.set_created_at(ts);
        }
        let source_id = str_field(event, "id")
            .map(str::to_string)
            .unwrap_or_else(|| format!("line {line}"));
        let body = match ty {
            "session.start" => {
                if let Some(id) = str_field(data, "sessionId") {
                    header.set_session_id(id);
                }
                if let Some(cwd) = data.pointer("/context/cwd").and_then(Value::as_str) {
                    header.set_workspace(cwd);
                }
                if let Some(model) = str_field(data, "selectedModel") {
                    header.set_model(model);
                }
                continue;
            }
            "session.model_change" => {
                if let Some(model) = str_field(data, "newModel") {
                    header.set_model(model);
                }
                continue;
            }
            "user.message" => {
                let text = str_field(data, "content").unwrap_or("");
                EntryBody::Message(message(Role::User, vec![ContentBlock::text(text)]))
            }
            "assistant.message" => {
                let mut content = Vec::new();
                if let Some(thinking) = str_field(data, "reasoningText").filter(|t| !t.is_empty()) {
                    content.push(ContentBlock::Thinking {
                        thinking: thinking.to_string(),
                        extra: Default::default(),
                    });
                }
                if let Some(text) = str_field(data, "content").filter(|t| !t.is_empty()) {
                    content.push(ContentBlock::text(text));
                }
                for call in data
                    .get("toolRequests")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let id = str_field(call, "toolCallId").unwrap_or("").to_string();
                    let name = str_field(call, "name").unwrap_or("").to_string();
                    tool_names.insert(id.clone(), name.clone());
                    content.push(ContentBlock::ToolCall {
                        id,
                        name,
                        input: Box::new(call.get("arguments").cloned().unwrap_or(Value::Null)),
                        extra: Default::default(),
                    });
                }
                if content.is_empty() {
                    builder.skipped("assistant.message (empty)");
                    continue;
                }
                let mut m = message(Role::Assistant, content);
                m.model = str_field(data, "model").map(str::to_string);
                if let Some(model) = &m.model {
                    header.set_model(model);
                }
                EntryBody::Message(m)
            }
            "tool.execution_complete" => {
                let call_id = str_field(data, "toolCallId").unwrap_or("").to_string();
                let success = data.get("success").and_then(Value::as_bool).unwrap_or(true);
                let text = data
                    .pointer("/result/content")
                    .map(value_text)
                    .or_else(|| data.pointer("/error/message").map(value_text))
                    .or_else(|| data.get("error").map(value_text))
                    .unwrap_or_default();
                EntryBody::ToolResult(ToolResultEntry {
                    tool_name: tool_names
                        .get(&call_id)
                        .cloned()
                        .or_else(|| str_field(data, "toolName").map(str::to_string)),
                    call_id,
                    content: vec![ContentBlock::text(text)],
                    is_error: !success,
                    exit_code: None,
                })
            }
            other if NOT_MODEL_INPUT.contains(&other) => {
                builder.skipped(other);
                continue;
            }
            other => {
                builder.unknown(other);
                continue;
            }
        };
        let parent = builder.last_id();
        builder.push(parent, Some(&source_id), ts, body);
    }
    Ok(builder.finish(header))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::import::check::{is_one_line, loads};
    use crate::import::testing::options;
    use serde_json::json;

    fn event(ty: &str, id: &str, data: Value) -> String {
        json!({"type": ty, "id": id, "timestamp": "2026-09-17T10:00:00.000Z", "parentId": null, "data": data})
            .to_string()
    }

    pub(in crate::import) fn session() -> String {
        [
            event(
                "session.start",
                "ev1",
                json!({"sessionId": "c2a8b641", "version": 1, "producer": "copilot-agent",
                       "copilotVersion": "0.0.369", "startTime": "2026-09-17T10:00:00.000Z",
                       "context": {"cwd": "/home/me/infra", "gitRoot": "/home/me/infra"}}),
            ),
            event("session.model_change", "ev2", json!({"newModel": "claude-sonnet-4.5"})),
            event(
                "user.message",
                "ev3",
                json!({"content": "why does the deploy fail?", "attachments": [],
                       "transformedContent": "<current_datetime>…</current_datetime>\n\nwhy does the deploy fail?"}),
            ),
            event("assistant.turn_start", "ev4", json!({"turnId": "0"})),
            event(
                "assistant.message",
                "ev5",
                json!({"messageId": "m1", "content": "Let me look.", "reasoningText": "check the script",
                       "toolRequests": [
                           {"toolCallId": "tooluse_1", "name": "view", "arguments": {"path": "deploy.sh"}, "type": "function"},
                           {"toolCallId": "tooluse_2", "name": "bash", "arguments": {"command": "./deploy.sh --dry-run"}, "type": "function"}]}),
            ),
            event("tool.execution_start", "ev6", json!({"toolCallId": "tooluse_1", "toolName": "view", "arguments": {"path": "deploy.sh"}})),
            event("tool.execution_complete", "ev7", json!({"toolCallId": "tooluse_1", "success": true, "result": {"content": "#!/bin/sh\nset -e"}})),
            event("tool.execution_complete", "ev8", json!({"toolCallId": "tooluse_2", "success": false, "error": {"message": "exit 1: missing KUBECONFIG"}})),
            event("assistant.message", "ev9", json!({"messageId": "m2", "content": "KUBECONFIG is unset.", "toolRequests": []})),
            event("assistant.turn_end", "ev10", json!({"turnId": "0"})),
            event("session.someday_new_event", "ev11", json!({})),
        ]
        .join("\n")
    }

    #[test]
    fn a_copilot_cli_session_becomes_prompts_replies_calls_and_results() {
        let r = import_str(&session(), &options()).unwrap();
        assert_eq!(r.header.id, "c2a8b641");
        assert_eq!(r.header.workspace, "/home/me/infra");
        assert_eq!(r.header.created_at, "2026-09-17T10:00:00.000Z");
        assert_eq!(r.report.model.as_deref(), Some("claude-sonnet-4.5"));
        assert_eq!(r.report.messages.user, 1);
        assert_eq!(r.report.messages.assistant, 2);
        assert_eq!(r.report.tool_calls, 2);
        assert_eq!(r.report.tool_results, 2);
        assert_eq!(r.report.unmatched_calls, 0);
        assert_eq!(r.report.skipped_records["tool.execution_start"], 1);
        assert_eq!(r.report.unknown_records["session.someday_new_event"], 1);
        // The prompt as typed, not the CLI's injected reminders.
        let user = r.entries[0].as_message().unwrap();
        assert_eq!(
            soba_core::session::entry::blocks_text(&user.content),
            "why does the deploy fail?"
        );
        let failed = r
            .entries
            .iter()
            .find_map(|e| match &e.body {
                EntryBody::ToolResult(t) if t.call_id == "tooluse_2" => Some(t),
                _ => None,
            })
            .unwrap();
        assert!(failed.is_error);
        assert_eq!(failed.tool_name.as_deref(), Some("bash"));
        assert!(soba_core::session::entry::blocks_text(&failed.content).contains("KUBECONFIG"));
        assert_eq!(r.entries[1].source_id.as_deref(), Some("ev5"));
        assert!(is_one_line(&r));
        loads(&r);
    }
}
