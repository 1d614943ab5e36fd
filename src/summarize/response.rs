//! Turning a model's text into a validated [`CapsuleState`].
//!
//! Models wrap JSON in prose or Markdown fences more often than not, so extraction is lenient:
//! the first balanced JSON object in the text is taken. Validation is strict: the object must
//! match the state part of the capsule schema (unknown keys rejected) and carry a goal.

use serde_json::Value;

use crate::capsule::CapsuleState;

/// The first balanced `{…}` in `text`, skipping braces inside JSON strings.
pub fn extract_json_object(text: &str) -> Option<&str> {
    let start = text.find('{')?;
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (offset, c) in text[start..].char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[start..start + offset + 1]);
                }
            }
            _ => {}
        }
    }
    None
}

/// Parse and validate a model's reply. The error says what was wrong, for the degraded reason.
pub fn parse_capsule_state(text: &str) -> Result<CapsuleState, String> {
    let json = extract_json_object(text).ok_or_else(|| {
        if text.trim().is_empty() {
            "the model returned no text".to_string()
        } else {
            "the model's reply holds no complete JSON object".to_string()
        }
    })?;
    let mut value: Value =
        serde_json::from_str(json).map_err(|e| format!("the model's JSON does not parse: {e}"))?;
    // Artifacts are facts merged from the log afterwards; a model that echoes them back is
    // ignored on that point rather than failed.
    if let Some(obj) = value.as_object_mut() {
        obj.remove("artifacts");
    }
    let state: CapsuleState = serde_json::from_value(value)
        .map_err(|e| format!("the model's JSON is not a capsule state: {e}"))?;
    validate_state(&state)?;
    Ok(state)
}

/// Reject states that would make a useless or misleading capsule.
pub fn validate_state(state: &CapsuleState) -> Result<(), String> {
    if state.goal.trim().is_empty() {
        return Err("the model's capsule has an empty goal".into());
    }
    let lists: [(&str, &Vec<String>); 7] = [
        ("requests", &state.requests),
        ("constraints", &state.constraints),
        ("completed", &state.completed),
        ("active", &state.active),
        ("pending", &state.pending),
        ("blockers", &state.blockers),
        ("nextSteps", &state.next_steps),
    ];
    for (name, items) in lists {
        if items.iter().any(|s| s.trim().is_empty()) {
            return Err(format!("the model's capsule has an empty item in `{name}`"));
        }
    }
    if state.decisions.iter().any(|d| d.decision.trim().is_empty()) {
        return Err("the model's capsule has a decision with no text".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extracts_from_fences_and_prose() {
        let text = "Here it is:\n```json\n{\"goal\": \"fix {braces} in \\\"strings\\\"\", \"blockers\": []}\n```\nDone {x}";
        assert_eq!(
            extract_json_object(text),
            Some("{\"goal\": \"fix {braces} in \\\"strings\\\"\", \"blockers\": []}")
        );
        assert_eq!(extract_json_object("no json"), None);
        assert_eq!(extract_json_object("{\"goal\": \"unterminated\""), None);
    }

    #[test]
    fn parses_a_full_state() {
        let s = parse_capsule_state(
            r#"```json
{"goal":"Ship the parser","constraints":["no new crates"],"completed":["tokenizer"],
 "active":["SSE"],"pending":[],"decisions":[{"decision":"hand-roll SSE","rationale":"tiny"}],
 "blockers":[],"nextSteps":["tests"]}
```"#,
        )
        .unwrap();
        assert_eq!(s.goal, "Ship the parser");
        assert_eq!(s.decisions[0].rationale, "tiny");
        assert_eq!(s.next_steps, vec!["tests"]);
    }

    #[test]
    fn echoed_artifacts_are_ignored() {
        let s = parse_capsule_state(r#"{"goal":"g","artifacts":{"modifiedFiles":[]}}"#).unwrap();
        assert_eq!(s.goal, "g");
    }

    #[test]
    fn rejections_carry_a_reason() {
        let cases = [
            ("", "no text"),
            ("I could not do it.", "no complete JSON object"),
            (r#"{"goal": 5}"#, "not a capsule state"),
            (r#"{"goal":"g","mood":"happy"}"#, "unknown field `mood`"),
            (r#"{"goal":"  "}"#, "empty goal"),
            (r#"{"constraints":["x"]}"#, "empty goal"),
            (r#"{"goal":"g","nextSteps":[""]}"#, "`nextSteps`"),
            (
                r#"{"goal":"g","decisions":[{"decision":""}]}"#,
                "decision with no text",
            ),
            (r#"{"goal":"g",}"#, "does not parse"),
        ];
        for (text, want) in cases {
            let err = parse_capsule_state(text).unwrap_err();
            assert!(err.contains(want), "{text:?} → {err}");
        }
    }
}
