//! The tool-call ids of each entry, held apart from the entries: pairing each result with its
//! call is what building the model view reads most, and with these it parses no entry.

use super::entry::{Entry, EntryBody};

/// For each entry, the ids of the tool calls it makes (an assistant message) or answers (a
/// tool result: one), in order. Every id lies in one string; a long log holds hundreds of
/// thousands.
#[derive(Debug, Default)]
pub(super) struct CallIndex {
    text: String,
    /// Where each id ends in `text`.
    ends: Vec<usize>,
    /// For each entry, how many ids came before its own.
    first: Vec<u32>,
}

impl CallIndex {
    /// Record the call ids of `entry`, the next entry.
    pub(super) fn push(&mut self, entry: &Entry) {
        let first = u32::try_from(self.ends.len())
            .expect("a session holds fewer than 4 billion tool calls");
        let mut add = |id: &str| {
            self.text.push_str(id);
            self.ends.push(self.text.len());
        };
        match &entry.body {
            EntryBody::Message(_) => entry.tool_calls().for_each(|(id, _, _)| add(id)),
            EntryBody::ToolResult(r) => add(&r.call_id),
            _ => {}
        }
        self.first.push(first);
    }

    /// Make room for `entries` more entries (their ids grow as they come).
    pub(super) fn reserve(&mut self, entries: usize) {
        self.first.reserve(entries);
    }

    /// The call ids of entry `idx`.
    pub(super) fn of(&self, idx: usize) -> impl ExactSizeIterator<Item = &str> + '_ {
        let from = self.first[idx] as usize;
        let to = self
            .first
            .get(idx + 1)
            .map_or(self.ends.len(), |&n| n as usize);
        (from..to).map(move |n| {
            let start = match n {
                0 => 0,
                n => self.ends[n - 1],
            };
            &self.text[start..self.ends[n]]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::entry::{ContentBlock, MessageEntry, Role, ToolResultEntry};
    use serde_json::json;

    fn calls(ids: &[&str]) -> Entry {
        Entry::new(
            "m",
            None,
            EntryBody::Message(MessageEntry {
                role: Role::Assistant,
                content: ids
                    .iter()
                    .map(|id| ContentBlock::tool_call(*id, "Bash", json!({})))
                    .collect(),
                usage: None,
                model: None,
                synthetic: false,
            }),
        )
    }

    fn result(call_id: &str) -> Entry {
        Entry::new(
            "r",
            None,
            EntryBody::ToolResult(ToolResultEntry {
                call_id: call_id.into(),
                tool_name: None,
                content: vec![ContentBlock::text("ok")],
                is_error: false,
                exit_code: None,
            }),
        )
    }

    #[test]
    fn each_entry_reads_back_its_own_call_ids_in_order() {
        let mut index = CallIndex::default();
        let entries = [
            calls(&["a", "bb"]),
            calls(&[]),
            result("bb"),
            calls(&["ccc"]),
            result("a"),
            result(""),
        ];
        for e in &entries {
            index.push(e);
        }
        let ids: Vec<Vec<&str>> = (0..entries.len()).map(|i| index.of(i).collect()).collect();
        assert_eq!(
            ids,
            [
                vec!["a", "bb"],
                vec![],
                vec!["bb"],
                vec!["ccc"],
                vec!["a"],
                vec![""]
            ]
        );
    }
}
