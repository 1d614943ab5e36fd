//! Provider wire formats: request bodies and the meaning of each streamed event. Pure; the
//! HTTP shell in `client.rs` sends the bodies and feeds the events in.

use serde_json::{json, Value};

use super::sse::SseEvent;

/// A whole reply.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reply {
    pub text: String,
    /// Generation stopped at `max_tokens`.
    pub hit_output_limit: bool,
}

/// What one streamed event contributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamItem {
    /// More reply text.
    Text(String),
    /// The model stopped generating (`finish_reason` / `stop_reason`); trailing events such as
    /// usage may still follow. `hit_output_limit`: it stopped at `max_tokens`, so the reply is
    /// probably cut off.
    Finished { hit_output_limit: bool },
    /// The provider's end-of-stream marker (`[DONE]` / `message_stop`).
    Done,
    /// Nothing for us (role announcements, pings, usage, block boundaries).
    Nothing,
}

/// What a provider's stream events mean.
pub type EventDecoder = fn(&SseEvent) -> Result<StreamItem, EventError>;

/// An event the stream must not contain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventError {
    /// The provider reported an error in the stream.
    Provider(String),
    /// The event's data is not the JSON the format promises.
    Malformed(String),
}

fn parse_data(event: &SseEvent) -> Result<Value, EventError> {
    serde_json::from_str(&event.data).map_err(|e| {
        let mut sample: String = event.data.chars().take(80).collect();
        if sample.len() < event.data.len() {
            sample.push('…');
        }
        EventError::Malformed(format!("stream event is not valid JSON ({e}): {sample}"))
    })
}

fn parse_body(body: &[u8]) -> Result<Value, EventError> {
    serde_json::from_slice(body)
        .map_err(|e| EventError::Malformed(format!("response body is not valid JSON: {e}")))
}

fn error_message(error: &Value) -> String {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("no message");
    match error.get("type").and_then(Value::as_str) {
        Some(kind) => format!("{kind}: {message}"),
        None => message.to_string(),
    }
}

pub mod openai {
    use super::*;

    /// `POST {baseUrl}/chat/completions`, streaming with usage.
    pub fn request_body(model: &str, system: &str, user: &str, max_output_tokens: u64) -> Value {
        json!({
            "model": model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            // No `temperature`: OpenAI's reasoning models reject any value but the default.
            "max_tokens": max_output_tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
        })
    }

    /// The reply text of a complete, non-streamed response body.
    pub fn complete_reply(body: &[u8]) -> Result<Reply, EventError> {
        let v = parse_body(body)?;
        if let Some(error) = v.get("error") {
            return Err(EventError::Provider(error_message(error)));
        }
        let text = v
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                EventError::Malformed("response has no choices[0].message.content".into())
            })?;
        let hit_output_limit = v
            .pointer("/choices/0/finish_reason")
            .is_some_and(|r| r == "length");
        Ok(Reply {
            text: text.to_string(),
            hit_output_limit,
        })
    }

    pub fn event(event: &SseEvent) -> Result<StreamItem, EventError> {
        if event.data.trim() == "[DONE]" {
            return Ok(StreamItem::Done);
        }
        let v = parse_data(event)?;
        if let Some(error) = v.get("error") {
            return Err(EventError::Provider(error_message(error)));
        }
        let Some(choice) = v
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            // The usage chunk has no choices.
            return Ok(StreamItem::Nothing);
        };
        if let Some(text) = choice.pointer("/delta/content").and_then(Value::as_str) {
            if !text.is_empty() {
                return Ok(StreamItem::Text(text.to_string()));
            }
        }
        if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
            return Ok(StreamItem::Finished {
                hit_output_limit: reason == "length",
            });
        }
        Ok(StreamItem::Nothing)
    }
}

pub mod anthropic {
    use super::*;

    pub const API_VERSION: &str = "2023-06-01";

    /// `POST {baseUrl}/v1/messages`, streaming.
    pub fn request_body(model: &str, system: &str, user: &str, max_output_tokens: u64) -> Value {
        json!({
            "model": model,
            "system": system,
            "messages": [{"role": "user", "content": user}],
            "max_tokens": max_output_tokens,
            "temperature": 0,
            "stream": true,
        })
    }

    /// The reply text of a complete, non-streamed response body.
    pub fn complete_reply(body: &[u8]) -> Result<Reply, EventError> {
        let v = parse_body(body)?;
        if v.get("type").and_then(Value::as_str) == Some("error") {
            let error = v
                .get("error")
                .map(error_message)
                .unwrap_or_else(|| "unknown error".into());
            return Err(EventError::Provider(error));
        }
        let blocks = v
            .get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| EventError::Malformed("response has no content blocks".into()))?;
        let text = blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect();
        let hit_output_limit = v.get("stop_reason").is_some_and(|r| r == "max_tokens");
        Ok(Reply {
            text,
            hit_output_limit,
        })
    }

    pub fn event(event: &SseEvent) -> Result<StreamItem, EventError> {
        let v = parse_data(event)?;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or("");
        match kind {
            "content_block_delta" => match v.pointer("/delta/type").and_then(Value::as_str) {
                Some("text_delta") => Ok(v
                    .pointer("/delta/text")
                    .and_then(Value::as_str)
                    .map(|t| StreamItem::Text(t.to_string()))
                    .unwrap_or(StreamItem::Nothing)),
                // thinking_delta, input_json_delta, signature_delta: not part of the reply text.
                _ => Ok(StreamItem::Nothing),
            },
            "message_delta" => match v.pointer("/delta/stop_reason").filter(|r| !r.is_null()) {
                Some(reason) => Ok(StreamItem::Finished {
                    hit_output_limit: reason == "max_tokens",
                }),
                None => Ok(StreamItem::Nothing),
            },
            "message_stop" => Ok(StreamItem::Done),
            "error" => Err(EventError::Provider(
                v.get("error")
                    .map(error_message)
                    .unwrap_or_else(|| "unknown error".into()),
            )),
            _ => Ok(StreamItem::Nothing),
        }
    }
}

/// OpenAI's Responses API: what the proxy summarizes with when the agent it serves talks it
/// (Codex).
pub mod responses {
    use super::*;

    /// `POST {baseUrl}/responses`, streaming, stored nowhere.
    pub fn request_body(model: &str, system: &str, user: &str, max_output_tokens: u64) -> Value {
        json!({
            "model": model,
            "instructions": system,
            "input": [{"role": "user", "content": [{"type": "input_text", "text": user}]}],
            "max_output_tokens": max_output_tokens,
            "store": false,
            "stream": true,
        })
    }

    fn stopped_at_output_limit(response: &Value) -> bool {
        response.get("status").and_then(Value::as_str) == Some("incomplete")
            && response
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str)
                == Some("max_output_tokens")
    }

    fn failure(response: &Value) -> String {
        response
            .get("error")
            .filter(|e| !e.is_null())
            .map(error_message)
            .unwrap_or_else(|| {
                let status = response
                    .get("status")
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                format!("the response ended {status}")
            })
    }

    /// The reply text of a complete, non-streamed response.
    pub fn complete_reply(body: &[u8]) -> Result<Reply, EventError> {
        let v = parse_body(body)?;
        if let Some(error) = v.get("error").filter(|e| !e.is_null()) {
            return Err(EventError::Provider(error_message(error)));
        }
        let hit_output_limit = stopped_at_output_limit(&v);
        if v.get("status").and_then(Value::as_str) != Some("completed") && !hit_output_limit {
            return Err(EventError::Provider(failure(&v)));
        }
        let output = v
            .get("output")
            .and_then(Value::as_array)
            .ok_or_else(|| EventError::Malformed("response has no output items".into()))?;
        let text = output
            .iter()
            .filter(|i| i.get("type").and_then(Value::as_str) == Some("message"))
            .filter_map(|i| i.get("content").and_then(Value::as_array))
            .flatten()
            .filter(|c| c.get("type").and_then(Value::as_str) == Some("output_text"))
            .filter_map(|c| c.get("text").and_then(Value::as_str))
            .collect();
        Ok(Reply {
            text,
            hit_output_limit,
        })
    }

    pub fn event(event: &SseEvent) -> Result<StreamItem, EventError> {
        let v = parse_data(event)?;
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or("");
        let response = v.get("response").unwrap_or(&Value::Null);
        match kind {
            "response.output_text.delta" => Ok(v
                .get("delta")
                .and_then(Value::as_str)
                .map(|t| StreamItem::Text(t.to_string()))
                .unwrap_or(StreamItem::Nothing)),
            "response.completed" => Ok(StreamItem::Done),
            "response.incomplete" if stopped_at_output_limit(response) => {
                Ok(StreamItem::Finished {
                    hit_output_limit: true,
                })
            }
            "response.incomplete" | "response.failed" => {
                Err(EventError::Provider(failure(response)))
            }
            "error" => Err(EventError::Provider(error_message(&v))),
            _ => Ok(StreamItem::Nothing),
        }
    }
}

/// The message of an HTTP error body: the provider's `error.message` when it is JSON,
/// otherwise the start of the body.
pub fn http_error_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        if let Some(error) = v.get("error") {
            return match error {
                Value::String(s) => s.clone(),
                other => error_message(other),
            };
        }
    }
    let trimmed = body.trim();
    if trimmed.is_empty() {
        return "(empty body)".into();
    }
    let mut sample: String = trimmed.chars().take(200).collect();
    if sample.len() < trimmed.len() {
        sample.push('…');
    }
    sample
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(d: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: d.into(),
        }
    }

    #[test]
    fn openai_events() {
        let role = data(
            r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        );
        assert_eq!(openai::event(&role), Ok(StreamItem::Nothing));
        let text = data(
            r#"{"choices":[{"index":0,"delta":{"content":"{\"goal\""},"finish_reason":null}]}"#,
        );
        assert_eq!(
            openai::event(&text),
            Ok(StreamItem::Text("{\"goal\"".into()))
        );
        let stop = data(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#);
        assert_eq!(
            openai::event(&stop),
            Ok(StreamItem::Finished {
                hit_output_limit: false
            })
        );
        let length = data(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#);
        assert_eq!(
            openai::event(&length),
            Ok(StreamItem::Finished {
                hit_output_limit: true
            })
        );
        let usage = data(r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3}}"#);
        assert_eq!(openai::event(&usage), Ok(StreamItem::Nothing));
        assert_eq!(openai::event(&data("[DONE]")), Ok(StreamItem::Done));
        let err = data(r#"{"error":{"message":"overloaded","type":"server_error"}}"#);
        assert_eq!(
            openai::event(&err),
            Err(EventError::Provider("server_error: overloaded".into()))
        );
        assert!(matches!(
            openai::event(&data("{not json")),
            Err(EventError::Malformed(_))
        ));
    }

    #[test]
    fn anthropic_events() {
        let ev = |name: &str, d: &str| SseEvent {
            event: Some(name.into()),
            data: d.into(),
        };
        let start = ev(
            "message_start",
            r#"{"type":"message_start","message":{"id":"m","usage":{"input_tokens":10,"output_tokens":1}}}"#,
        );
        assert_eq!(anthropic::event(&start), Ok(StreamItem::Nothing));
        let delta = ev(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        );
        assert_eq!(anthropic::event(&delta), Ok(StreamItem::Text("Hi".into())));
        let thinking = ev(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
        );
        assert_eq!(anthropic::event(&thinking), Ok(StreamItem::Nothing));
        let stop_reason = ev(
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#,
        );
        assert_eq!(
            anthropic::event(&stop_reason),
            Ok(StreamItem::Finished {
                hit_output_limit: false
            })
        );
        let max = ev(
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"}}"#,
        );
        assert_eq!(
            anthropic::event(&max),
            Ok(StreamItem::Finished {
                hit_output_limit: true
            })
        );
        assert_eq!(
            anthropic::event(&ev("message_stop", r#"{"type":"message_stop"}"#)),
            Ok(StreamItem::Done)
        );
        assert_eq!(
            anthropic::event(&ev("ping", r#"{"type": "ping"}"#)),
            Ok(StreamItem::Nothing)
        );
        let err = ev(
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        assert_eq!(
            anthropic::event(&err),
            Err(EventError::Provider("overloaded_error: Overloaded".into()))
        );
    }

    #[test]
    fn request_bodies_stream_and_carry_the_prompt() {
        let o = openai::request_body("gpt-4o-mini", "S", "U", 2048);
        assert_eq!(o["stream"], true);
        assert_eq!(o["stream_options"]["include_usage"], true);
        assert_eq!(o["messages"][1]["content"], "U");
        assert_eq!(o["max_tokens"], 2048);
        assert!(o.get("temperature").is_none());
        let a = anthropic::request_body("claude-haiku-4-5", "S", "U", 2048);
        assert_eq!(a["system"], "S");
        assert_eq!(a["messages"][0]["role"], "user");
        assert_eq!(a["stream"], true);
    }

    #[test]
    fn responses_events_and_bodies() {
        let b = responses::request_body("gpt-5", "S", "U", 2048);
        assert_eq!(b["instructions"], "S");
        assert_eq!(b["input"][0]["content"][0]["text"], "U");
        assert_eq!(
            (b["stream"].clone(), b["store"].clone()),
            (json!(true), json!(false))
        );
        let event = |v: Value| responses::event(&data(&v.to_string()));
        assert_eq!(
            event(
                json!({"type": "response.created", "response": {"id": "r", "status": "in_progress"}})
            ),
            Ok(StreamItem::Nothing)
        );
        assert_eq!(
            event(
                json!({"type": "response.output_text.delta", "item_id": "m", "delta": "{\"goal\""})
            ),
            Ok(StreamItem::Text("{\"goal\"".into()))
        );
        assert_eq!(
            event(json!({"type": "response.completed", "response": {"status": "completed"}})),
            Ok(StreamItem::Done)
        );
        assert_eq!(
            event(
                json!({"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}})
            ),
            Ok(StreamItem::Finished {
                hit_output_limit: true
            })
        );
        assert_eq!(
            event(
                json!({"type": "response.failed", "response": {"status": "failed", "error": {"type": "server_error", "message": "boom"}}})
            ),
            Err(EventError::Provider("server_error: boom".into()))
        );
        assert_eq!(
            event(
                json!({"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": {"reason": "content_filter"}}})
            ),
            Err(EventError::Provider("the response ended incomplete".into()))
        );
        let whole = json!({"id": "r", "status": "completed", "output": [
            {"type": "reasoning", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "{}", "annotations": []}]},
        ]});
        assert_eq!(
            responses::complete_reply(whole.to_string().as_bytes()),
            Ok(Reply {
                text: "{}".into(),
                hit_output_limit: false
            })
        );
        let failed = json!({"id": "r", "status": "failed", "error": {"message": "overloaded"}, "output": []});
        assert_eq!(
            responses::complete_reply(failed.to_string().as_bytes()),
            Err(EventError::Provider("overloaded".into()))
        );
    }

    #[test]
    fn complete_replies_of_servers_that_do_not_stream() {
        let o = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"{\"goal\":\"g\"}"},"finish_reason":"stop"}]}"#;
        let want = Reply {
            text: "{\"goal\":\"g\"}".into(),
            hit_output_limit: false,
        };
        assert_eq!(openai::complete_reply(o), Ok(want));
        assert!(matches!(
            openai::complete_reply(b"{}"),
            Err(EventError::Malformed(_))
        ));
        assert!(matches!(
            openai::complete_reply(b"<html>"),
            Err(EventError::Malformed(_))
        ));
        let a = br#"{"type":"message","content":[{"type":"thinking","thinking":"x"},{"type":"text","text":"{}"}]}"#;
        assert_eq!(
            anthropic::complete_reply(a),
            Ok(Reply {
                text: "{}".into(),
                hit_output_limit: false
            })
        );
        let cut = br#"{"type":"message","content":[{"type":"text","text":"{\"go"}],"stop_reason":"max_tokens"}"#;
        assert!(anthropic::complete_reply(cut).unwrap().hit_output_limit);
        let e = br#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#;
        assert_eq!(
            anthropic::complete_reply(e),
            Err(EventError::Provider("invalid_request_error: bad".into()))
        );
    }

    #[test]
    fn http_error_messages() {
        assert_eq!(
            http_error_message(r#"{"error":{"message":"Rate limit","type":"rate_limit_error"}}"#),
            "rate_limit_error: Rate limit"
        );
        assert_eq!(
            http_error_message(r#"{"error":"model not found"}"#),
            "model not found"
        );
        assert_eq!(http_error_message("  "), "(empty body)");
        assert_eq!(http_error_message("Bad Gateway"), "Bad Gateway");
    }
}
