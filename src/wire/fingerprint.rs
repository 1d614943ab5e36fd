//! Fingerprints of messages: stable hashes by which the proxy knows a message it has seen,
//! whatever whitespace an agent changed when it sent it again.

use std::borrow::Cow;

use serde_json::Value;

/// A stable 64-bit FNV-1a hash of the parts (stable across processes, unlike `DefaultHasher`).
pub fn fingerprint(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.as_bytes().iter().chain(std::iter::once(&0xff)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The fingerprint of a message by its content: the entries it stands for, the text of its
/// user and assistant messages compared with whitespace folded ([`fold_whitespace`]). Agents
/// resend a message re-wrapped or re-trimmed (aider restoring its chat history from markdown)
/// and it is still the same message; any other edit makes it another.
pub fn content_fingerprint(entries: &[Value]) -> u64 {
    // Hashed as it is serialized, message text folded on the way: the same value as
    // `fingerprint` of the folded entries' JSON text, without building the text or a folded
    // copy of the entries first (every request fingerprints every message it carries).
    let mut hasher = Fnv1a(0xcbf2_9ce4_8422_2325);
    hasher.eat(b'[');
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            hasher.eat(b',');
        }
        if is_message(entry) {
            hash_object(&mut hasher, entry, |h, key, value| match (key, value) {
                ("content", Value::Array(blocks)) => hash_blocks(h, blocks),
                _ => hash_json(h, value),
            });
        } else {
            hash_json(&mut hasher, entry);
        }
    }
    hasher.eat(b']');
    hasher.eat(0xff);
    hasher.0
}

/// A message's content blocks, the text of its text blocks folded.
fn hash_blocks(h: &mut Fnv1a, blocks: &[Value]) {
    h.eat(b'[');
    for (i, block) in blocks.iter().enumerate() {
        if i > 0 {
            h.eat(b',');
        }
        if is_text_block(block) {
            hash_object(h, block, |h, key, value| match (key, value) {
                ("text", Value::String(text)) => hash_json(h, fold_whitespace(text).as_ref()),
                _ => hash_json(h, value),
            });
        } else {
            hash_json(h, block);
        }
    }
    h.eat(b']');
}

/// An object as serde_json writes it compactly (keys in the map's order), each value hashed by
/// `value_of`; anything else as plain JSON.
fn hash_object(h: &mut Fnv1a, v: &Value, value_of: impl Fn(&mut Fnv1a, &str, &Value)) {
    let Value::Object(map) = v else {
        return hash_json(h, v);
    };
    h.eat(b'{');
    for (i, (key, value)) in map.iter().enumerate() {
        if i > 0 {
            h.eat(b',');
        }
        hash_json(h, key);
        h.eat(b':');
        value_of(h, key, value);
    }
    h.eat(b'}');
}

/// Writing JSON into the hasher cannot fail: its `write` never errs, and a `Value` or a
/// string always serializes.
fn hash_json(h: &mut Fnv1a, v: &(impl serde::Serialize + ?Sized)) {
    let _ = serde_json::to_writer(h, v);
}

/// FNV-1a over the bytes written to it.
struct Fnv1a(u64);

impl Fnv1a {
    fn eat(&mut self, b: u8) {
        self.0 ^= u64::from(b);
        self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

impl std::io::Write for Fnv1a {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for &b in buf {
            self.eat(b);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `text` with every run of whitespace as one space and none at either end.
pub fn fold_whitespace(text: &str) -> Cow<'_, str> {
    if is_folded(text) {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(text.split_whitespace().collect::<Vec<_>>().join(" "))
    }
}

/// Whether [`fold_whitespace`] leaves `text` as it is, found without building the folded text:
/// every request's messages are fingerprinted, and most are folded already or not at all.
fn is_folded(text: &str) -> bool {
    !text.starts_with(char::is_whitespace)
        && !text.ends_with(char::is_whitespace)
        && !text.contains(|c: char| c.is_whitespace() && c != ' ')
        && !text.contains("  ")
}

/// Whether `entry` is a user or assistant message, whose text is compared whitespace-folded
/// (tool results and thinking keep their whitespace: it can be what they say).
fn is_message(entry: &Value) -> bool {
    entry.get("type").and_then(Value::as_str) == Some("message")
}

fn is_text_block(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("text")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_content_fingerprint_hashes_the_entries_json_text_without_building_it() {
        let entries = vec![
            json!({"type": "message", "role": "user", "content": [{"type": "text", "text": "a  b\nc"}]}),
            json!({"type": "tool_result", "callId": "c1", "content": [{"type": "text", "text": "x\ty"}]}),
        ];
        let mut folded = entries.clone();
        folded[0]["content"][0]["text"] = json!("a b c");
        let text = serde_json::to_string(&folded).unwrap();
        assert_eq!(content_fingerprint(&entries), fingerprint(&[&text]));
        assert_ne!(
            content_fingerprint(&entries),
            content_fingerprint(&entries[..1])
        );
    }

    #[test]
    fn the_content_fingerprint_folds_only_message_text_and_equals_the_folded_json_text() {
        let entries = vec![
            json!({"type": "message", "role": "assistant", "content": [
                {"type": "text", "text": "  two\n\nlines \"quoted\" \u{e9}\t"},
                {"type": "tool_call", "callId": "c1", "name": "sh", "input": {"cmd": "a  b", "n": 1.5, "ok": true, "none": null}},
                {"type": "thinking", "text": "kept  as\nis"}
            ], "usage": {"input": 12}}),
            json!({"type": "tool_result", "callId": "c1", "content": [{"type": "text", "text": "x\ty  z"}]}),
            json!({"type": "message", "role": "user", "content": "plain  string"}),
        ];
        let mut folded = entries.clone();
        folded[0]["content"][0]["text"] = json!("two lines \"quoted\" \u{e9}");
        let text = serde_json::to_string(&folded).unwrap();
        assert_eq!(content_fingerprint(&entries), fingerprint(&[&text]));
        let mut edited = entries.clone();
        edited[1]["content"][0]["text"] = json!("x y z");
        assert_ne!(content_fingerprint(&entries), content_fingerprint(&edited));
    }

    #[test]
    fn whitespace_folds_to_single_spaces_and_folded_text_is_borrowed() {
        for folded in ["", "a", "fix the parser", "a b c"] {
            assert!(
                matches!(fold_whitespace(folded), Cow::Borrowed(_)),
                "{folded:?}"
            );
        }
        for (text, folded) in [
            (" a", "a"),
            ("a ", "a"),
            ("a  b", "a b"),
            ("a\nb", "a b"),
            ("a\t\r\n  b\n", "a b"),
            ("\n", ""),
        ] {
            let got = fold_whitespace(text);
            assert!(matches!(got, Cow::Owned(_)), "{text:?}");
            assert_eq!(got, folded, "{text:?}");
        }
    }
}
