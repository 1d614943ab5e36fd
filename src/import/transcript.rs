//! A transcript in any known format: which format it is, and its entries.

use serde_json::Value;

use super::{
    aider, claude_code, codex, copilot_cli, openai_chat, pi, read_jsonl, swe_agent, Format,
    ImportError, ImportOptions, ImportResult,
};
use soba_core::session::entry::Entry;

/// Import `text` in `format`, or in the format detected from its content.
pub fn import_str(
    text: &str,
    format: Option<Format>,
    options: &ImportOptions,
) -> Result<ImportResult, ImportError> {
    // Editors on some systems save UTF-8 with a byte-order mark; JSON parsers refuse it.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let format = match format {
        Some(f) => f,
        None => detect(text)?,
    };
    let result = match format {
        Format::ClaudeCode => claude_code::import_str(text, options)?,
        Format::Codex => codex::import_str(text, options)?,
        Format::Pi => pi::import_str(text, options)?,
        Format::OpenaiChat => openai_chat::import_str(text, options)?,
        Format::SweAgent => swe_agent::import_str(text, options)?,
        Format::Aider => aider::import_str(text, options)?,
        Format::CopilotCli => copilot_cli::import_str(text, options)?,
    };
    if !result.entries.iter().any(Entry::is_model_visible) {
        return Err(ImportError::Empty { format });
    }
    Ok(result)
}

/// Recognize a transcript from its first records.
pub fn detect(text: &str) -> Result<Format, ImportError> {
    let trimmed = text.trim_start_matches('\u{feff}').trim_start();
    if trimmed.is_empty() {
        return Err(ImportError::UnknownFormat {
            reason: "the file is empty".into(),
        });
    }
    // A whole-file JSON document: an OpenAI-chat trajectory or Claude Code records as an array.
    if let Ok(doc) = serde_json::from_str::<Value>(trimmed) {
        match &doc {
            doc if swe_agent::looks_like_trajectory(doc) => return Ok(Format::SweAgent),
            Value::Object(o) if o.get("messages").is_some_and(Value::is_array) => {
                return Ok(Format::OpenaiChat)
            }
            Value::Array(items) if items.iter().any(claude_code::looks_like_record) => {
                return Ok(Format::ClaudeCode)
            }
            Value::Array(items) if items.iter().any(openai_chat::looks_like_message) => {
                return Ok(Format::OpenaiChat)
            }
            _ => {}
        }
        // A single-line JSONL file parses as one document too; fall through to the line check.
    }
    let (records, _) = read_jsonl(text);
    for (_, record) in records.iter().take(50) {
        if pi::looks_like_header(record) {
            return Ok(Format::Pi);
        }
        if codex::looks_like_record(record) {
            return Ok(Format::Codex);
        }
        if claude_code::looks_like_record(record) {
            return Ok(Format::ClaudeCode);
        }
        if copilot_cli::looks_like_record(record) {
            return Ok(Format::CopilotCli);
        }
    }
    // Markdown, not JSON: aider's chat history.
    if records.is_empty() && aider::looks_like_history(trimmed) {
        return Ok(Format::Aider);
    }
    let reason = if records.is_empty() {
        "no line is a JSON object, and no `#### ` line of an aider chat history".to_string()
    } else {
        "no record has the shape of a known transcript format".to_string()
    };
    Err(ImportError::UnknownFormat { reason })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::testing::*;
    use crate::import::*;
    use serde_json::json;

    #[test]
    fn two_objects_on_one_line_are_both_read_and_reported() {
        let text = "{\"a\":1}\n{\"b\":2}{\"c\":3}\n\n{\"d\":\n";
        let (records, corrupt) = read_jsonl(text);
        let lines: Vec<usize> = records.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [1, 2, 2]);
        assert_eq!(corrupt.len(), 2);
        assert_eq!(corrupt[0].line, 2);
        assert!(
            corrupt[0].reason.contains("2 JSON objects"),
            "{}",
            corrupt[0].reason
        );
        assert_eq!(corrupt[1].line, 4);
        assert!(
            corrupt[1].reason.contains("not valid JSON"),
            "{}",
            corrupt[1].reason
        );
    }

    #[test]
    fn detection_names_every_format() {
        let claude = jsonl(&[
            json!({"type":"user","uuid":"u1","parentUuid":null,"sessionId":"s","message":{"role":"user","content":"hi"}}),
        ]);
        let codex = jsonl(&[json!({"timestamp":"t","type":"session_meta","payload":{"id":"x"}})]);
        let pi = jsonl(&[json!({"type":"session","id":"x","version":3,"cwd":"/w"})]);
        let chat = json!({"messages":[{"role":"user","content":"hi"}]}).to_string();
        let claude_array = json!([{"type":"user","uuid":"u1","parentUuid":null,"message":{"role":"user","content":"hi"}}]).to_string();
        assert_eq!(detect(&claude), Ok(Format::ClaudeCode));
        assert_eq!(detect(&codex), Ok(Format::Codex));
        assert_eq!(detect(&pi), Ok(Format::Pi));
        assert_eq!(detect(&chat), Ok(Format::OpenaiChat));
        assert_eq!(detect(&claude_array), Ok(Format::ClaudeCode));
    }

    #[test]
    fn a_byte_order_mark_is_ignored() {
        let chat = json!({"messages":[{"role":"user","content":"hi"}]}).to_string();
        let r = import_str(&format!("\u{feff}{chat}"), None, &options()).unwrap();
        assert_eq!(r.report.format, Format::OpenaiChat);
        assert_eq!(r.report.messages.user, 1);
    }

    #[test]
    fn a_file_that_is_not_a_transcript_names_the_formats_tried() {
        for text in [
            "",
            "hello world\n",
            "{\"type\":\"session\",\"version\":1,\"workspace\":\"/w\",\"id\":\"s\"}\n",
        ] {
            let err = import_str(text, None, &options()).unwrap_err().to_string();
            for f in Format::ALL {
                assert!(err.contains(f.as_str()), "{f} not named: {err}");
            }
            assert!(err.contains("--format"), "{err}");
        }
    }

    #[test]
    fn a_forced_format_that_does_not_fit_says_so() {
        let err = import_str("{\"x\":1}\n", Some(Format::Codex), &options()).unwrap_err();
        assert_eq!(
            err,
            ImportError::Empty {
                format: Format::Codex
            }
        );
        let err = import_str("[1,2]", Some(Format::OpenaiChat), &options()).unwrap_err();
        assert!(
            matches!(
                err,
                ImportError::WrongFormat {
                    format: Format::OpenaiChat,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn the_leaf_is_restored_with_a_rewind_when_the_last_entry_is_elsewhere() {
        let mut b = EntryBuilder::new(Format::Pi, "t");
        let a = b.push(
            None,
            Some("a"),
            None,
            EntryBody::Message(message(Role::User, vec![ContentBlock::text("a")])),
        );
        b.push(
            Some(a.clone()),
            Some("b"),
            None,
            EntryBody::Message(message(Role::User, vec![ContentBlock::text("b")])),
        );
        b.set_leaf(Some(a.clone()));
        let r = b.finish(HeaderInfo::new(Format::Pi, &options()));
        let last = r.entries.last().unwrap();
        assert_eq!(last.body, EntryBody::Rewind(RewindEntry { to: a }));
    }

    #[test]
    fn an_aider_history_is_detected_from_its_markdown() {
        assert_eq!(detect(aider::tests::HISTORY), Ok(Format::Aider));
    }

    #[test]
    fn a_copilot_cli_session_is_detected_from_its_events() {
        assert_eq!(
            detect(&copilot_cli::tests::session()),
            Ok(Format::CopilotCli)
        );
    }

    #[test]
    fn a_swe_agent_trajectory_is_detected_from_its_document() {
        let traj =
            json!({"trajectory": [], "history": [{"role": "user", "content": "x"}], "info": {}});
        assert_eq!(detect(&traj.to_string()), Ok(Format::SweAgent));
    }

    #[test]
    fn a_pi_session_whose_header_names_no_tree_is_detected() {
        let early_header =
            json!({"type": "session", "id": "old", "cwd": "/proj", "modelId": "gpt-4o"});
        let text = jsonl(&[
            early_header,
            json!({"type": "message", "message": {"role": "user", "content": "hi"}}),
        ]);
        assert_eq!(detect(&text), Ok(Format::Pi));
    }
}
