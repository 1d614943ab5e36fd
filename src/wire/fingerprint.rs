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
    let folded = whitespace_folded(entries);
    // Hashed as it is serialized: the same value as `fingerprint` of the JSON text, without
    // building the text (a copy of the message) first.
    let mut hasher = Fnv1a(0xcbf2_9ce4_8422_2325);
    if serde_json::to_writer(&mut hasher, folded.as_ref()).is_err() {
        hasher = Fnv1a(0xcbf2_9ce4_8422_2325);
    }
    hasher.eat(0xff);
    hasher.0
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

/// `entries` with the text of their messages whitespace-folded; borrowed when it already is.
fn whitespace_folded(entries: &[Value]) -> Cow<'_, [Value]> {
    let unfolded = |entry: &Value| {
        is_message(entry)
            && entry
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|b| is_text_block(b))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .any(|t| !is_folded(t))
    };
    if !entries.iter().any(unfolded) {
        return Cow::Borrowed(entries);
    }
    let mut owned = entries.to_vec();
    for entry in owned.iter_mut().filter(|e| is_message(e)) {
        let Some(blocks) = entry.get_mut("content").and_then(Value::as_array_mut) else {
            continue;
        };
        for text in blocks
            .iter_mut()
            .filter(|b| is_text_block(b))
            .filter_map(|b| b.get_mut("text"))
        {
            if let Some(folded) = text.as_str().map(|t| fold_whitespace(t).into_owned()) {
                *text = Value::String(folded);
            }
        }
    }
    Cow::Owned(owned)
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
