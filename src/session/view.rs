//! The model-input view: what the next inference sees for a given leaf.
//!
//! The latest capsule on the leaf's branch (rendered as one message), every entry from its
//! `firstKeptEntryId` on, then the entries appended after the capsule. Tool results always
//! follow the assistant message that made the call; a call with no result gets a synthetic
//! "no result: interrupted" result, and a result whose call is not in the view is left out
//! with a warning. The log itself is never changed.

use std::collections::{HashMap, HashSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::entry::{ContentBlock, EntryBody, Role};
use super::Session;
use crate::budget::{Breakdown, UsageAnchor};
use crate::tokens::{TokenizerKind, MESSAGE_OVERHEAD_TOKENS};

/// Text of the result the view supplies for a call that never got one.
pub const INTERRUPTED_RESULT_TEXT: &str = "no result: interrupted";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ViewPart {
    Capsule,
    RetainedTail,
    New,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewItem {
    Capsule(usize),
    Entry(usize),
    /// Stand-in result for a call (in entry `call_entry`) that has none.
    InterruptedResult {
        call_id: String,
        tool_name: String,
        call_entry: usize,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewSlot {
    pub item: ViewItem,
    pub part: ViewPart,
    /// A tool result shown shortened because the capsule asks for it.
    pub elided: bool,
}

/// One message of the model input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelMessage {
    /// `system`, `user`, `assistant`, or `tool`.
    #[schemars(extend("enum" = ["system", "user", "assistant", "tool"]))]
    pub role: String,
    pub content: Vec<ContentBlock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// The log entry this message comes from; absent for the capsule and synthetic results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelView {
    pub leaf: Option<usize>,
    pub capsule: Option<usize>,
    pub first_kept: Option<usize>,
    pub slots: Vec<ViewSlot>,
    /// Tool results on the branch left out of the input (no call for them, or a repeat).
    pub left_out: Vec<usize>,
    pub warnings: Vec<String>,
}

/// Tokens of the synthetic result for an interrupted call.
pub fn interrupted_result_tokens(kind: TokenizerKind, call_id: &str) -> u64 {
    MESSAGE_OVERHEAD_TOKENS + kind.count(call_id) + kind.count(INTERRUPTED_RESULT_TEXT)
}

impl ModelView {
    /// The view for `leaf` (usually `session.leaf()`).
    pub fn build(session: &Session, leaf: Option<usize>) -> ModelView {
        let mut view = ModelView {
            leaf,
            ..ModelView::default()
        };
        let Some(leaf) = leaf else { return view };
        let capsule = session.capsule_on_path(leaf);
        view.capsule = capsule;

        // Walk up from the leaf: new entries until the capsule, then the retained tail until
        // the first kept entry.
        let mut new_entries = Vec::new();
        let mut tail = Vec::new();
        let mut cur = Some(leaf);
        while let Some(i) = cur {
            if Some(i) == capsule {
                break;
            }
            new_entries.push(i);
            cur = session.parent_of(i);
        }
        if let Some(c) = capsule {
            let cap = session
                .entry(c)
                .as_capsule()
                .expect("capsule index holds a capsule");
            if let Some(fk) = cap.first_kept_entry_id.as_deref() {
                match session.index_of(fk) {
                    Some(fk_idx) if session.is_ancestor(fk_idx, c) => {
                        view.first_kept = Some(fk_idx);
                        let mut cur = session.parent_of(c);
                        while let Some(i) = cur {
                            tail.push(i);
                            if i == fk_idx {
                                break;
                            }
                            cur = session.parent_of(i);
                        }
                    }
                    _ => view.warnings.push(format!(
                        "capsule {} keeps from entry `{fk}`, which is not on its branch; no tail retained",
                        cap.checkpoint_id
                    )),
                }
            }
        }
        tail.reverse();
        new_entries.reverse();

        let ordered: Vec<(usize, ViewPart)> = tail
            .into_iter()
            .map(|i| (i, ViewPart::RetainedTail))
            .chain(new_entries.into_iter().map(|i| (i, ViewPart::New)))
            .filter(|(i, _)| session.entry(*i).is_model_visible())
            .collect();

        if let Some(c) = capsule {
            view.slots.push(ViewSlot {
                item: ViewItem::Capsule(c),
                part: ViewPart::Capsule,
                elided: false,
            });
        }
        pair_tool_results(session, &ordered, &mut view);
        if let Some(limit) = capsule
            .and_then(|c| session.entry(c).as_capsule())
            .and_then(|c| c.elide_tool_results_over)
        {
            view.elide_results_over(session, limit);
        }
        view
    }

    /// Mark tool results larger than `limit` tokens as elided.
    pub fn elide_results_over(&mut self, session: &Session, limit: u64) {
        for slot in &mut self.slots {
            if let ViewItem::Entry(i) = slot.item {
                if session.entry(i).as_tool_result().is_some() && session.tokens_of(i) > limit {
                    slot.elided = true;
                }
            }
        }
    }

    /// Ids of the entries in the view, in order (capsule and synthetic results left out).
    pub fn entry_indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots.iter().filter_map(|s| match s.item {
            ViewItem::Entry(i) => Some(i),
            _ => None,
        })
    }

    pub fn slot_tokens(session: &Session, slot: &ViewSlot) -> u64 {
        if slot.elided {
            if let ViewItem::Entry(i) = slot.item {
                if let Some(r) = session.entry(i).as_tool_result() {
                    let kind = session.tokenizer();
                    return MESSAGE_OVERHEAD_TOKENS
                        + kind.count(&r.call_id)
                        + kind.count(&elided_text(&session.entry(i).id, r));
                }
            }
        }
        match &slot.item {
            ViewItem::Capsule(i) | ViewItem::Entry(i) => session.tokens_of(*i),
            ViewItem::InterruptedResult { call_id, .. } => {
                interrupted_result_tokens(session.tokenizer(), call_id)
            }
        }
    }

    /// Counted tokens per part, with the system and tool overhead in force at the leaf.
    pub fn breakdown(&self, session: &Session) -> Breakdown {
        let (system, tools) = session.overhead_at(self.leaf);
        let mut b = Breakdown {
            system,
            tools,
            ..Breakdown::default()
        };
        for slot in &self.slots {
            let t = Self::slot_tokens(session, slot);
            match slot.part {
                ViewPart::Capsule => b.capsule += t,
                ViewPart::RetainedTail => b.retained_tail += t,
                ViewPart::New => b.new_entries += t,
            }
        }
        b
    }

    /// The newest provider usage after the latest capsule, with the counted tokens after it.
    /// Usage on retained-tail entries predates the capsule and is ignored. So is usage after a
    /// `foreign_compaction` (an imported agent's own compaction): it measured that agent's
    /// compacted context, not this view.
    pub fn usage_anchor(&self, session: &Session) -> Option<UsageAnchor> {
        self.usage_anchor_at(session).map(|(_, a)| a)
    }

    /// [`Self::usage_anchor`], with the index of the entry that carried the usage.
    pub fn usage_anchor_at(&self, session: &Session) -> Option<(usize, UsageAnchor)> {
        let oldest_foreign_compaction = self.oldest_foreign_compaction(session);
        let mut after = 0;
        for slot in self.slots.iter().rev() {
            if slot.part != ViewPart::New {
                break;
            }
            if let ViewItem::Entry(i) = slot.item {
                // Parents precede children in the file, so on one branch a larger index is newer.
                let measured_foreign_context = oldest_foreign_compaction.is_some_and(|fc| i > fc);
                if let EntryBody::Message(m) = &session.entry(i).body {
                    if let Some(usage) = m.usage.filter(|_| !measured_foreign_context) {
                        if m.role == Role::Assistant {
                            let anchor = UsageAnchor {
                                usage,
                                tokens_after: after,
                            };
                            return Some((i, anchor));
                        }
                    }
                }
            }
            after += Self::slot_tokens(session, slot);
        }
        None
    }

    /// The oldest `foreign_compaction` between the latest capsule (or the root) and the leaf.
    pub fn oldest_foreign_compaction(&self, session: &Session) -> Option<usize> {
        let mut oldest = None;
        let mut cur = self.leaf;
        while let Some(i) = cur.filter(|&i| Some(i) != self.capsule) {
            if matches!(session.entry(i).body, EntryBody::ForeignCompaction(_)) {
                oldest = Some(i);
            }
            cur = session.parent_of(i);
        }
        oldest
    }

    /// The messages to send, in order.
    pub fn messages(&self, session: &Session) -> Vec<ModelMessage> {
        self.slots.iter().map(|s| render_slot(session, s)).collect()
    }
}

/// Emit the visible entries so that each assistant message with tool calls is followed by one
/// result per call, in call order.
fn pair_tool_results(session: &Session, ordered: &[(usize, ViewPart)], view: &mut ModelView) {
    // call id → position in `ordered` of its result (first one wins).
    let mut result_at: HashMap<&str, usize> = HashMap::new();
    let mut call_ids: HashSet<&str> = HashSet::new();
    for (pos, (i, _)) in ordered.iter().enumerate() {
        let e = session.entry(*i);
        if let Some(r) = e.as_tool_result() {
            result_at.entry(r.call_id.as_str()).or_insert(pos);
        }
        for (id, _, _) in e.tool_calls() {
            call_ids.insert(id);
        }
    }
    let mut emitted = vec![false; ordered.len()];
    for (pos, &(i, part)) in ordered.iter().enumerate() {
        if emitted[pos] {
            continue;
        }
        let e = session.entry(i);
        if let Some(r) = e.as_tool_result() {
            if !call_ids.contains(r.call_id.as_str()) {
                view.warnings.push(format!(
                    "tool result `{}` (entry {}) has no matching call in the model input; left out",
                    r.call_id, e.id
                ));
            } else {
                // A duplicate result for a call whose first result was already emitted.
                view.warnings.push(format!(
                    "tool result `{}` (entry {}) repeats an earlier result; left out",
                    r.call_id, e.id
                ));
            }
            view.left_out.push(i);
            emitted[pos] = true;
            continue;
        }
        emitted[pos] = true;
        view.slots.push(ViewSlot {
            item: ViewItem::Entry(i),
            part,
            elided: false,
        });
        for (call_id, name, _) in e.tool_calls() {
            match result_at.get(call_id) {
                Some(&rpos) if rpos > pos && !emitted[rpos] => {
                    emitted[rpos] = true;
                    view.slots.push(ViewSlot {
                        item: ViewItem::Entry(ordered[rpos].0),
                        part: ordered[rpos].1,
                        elided: false,
                    });
                }
                _ => view.slots.push(ViewSlot {
                    item: ViewItem::InterruptedResult {
                        call_id: call_id.to_string(),
                        tool_name: name.to_string(),
                        call_entry: i,
                    },
                    part,
                    elided: false,
                }),
            }
        }
    }
}

/// Characters kept from the start and the end of an elided tool output.
pub const ELIDE_HEAD_CHARS: usize = 2000;
pub const ELIDE_TAIL_CHARS: usize = 1000;

/// An oversized tool output shortened for the model input: its head and tail with a marker
/// naming the entry that holds the whole output.
pub fn elided_text(entry_id: &str, r: &super::entry::ToolResultEntry) -> String {
    let text = super::entry::blocks_text(&r.content);
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= ELIDE_HEAD_CHARS + ELIDE_TAIL_CHARS {
        return text;
    }
    let head: String = chars[..ELIDE_HEAD_CHARS].iter().collect();
    let tail: String = chars[chars.len() - ELIDE_TAIL_CHARS..].iter().collect();
    format!(
        "{head}\n[… {} characters of tool output elided to fit the context window; the full output is kept in the session log, entry {entry_id} …]\n{tail}",
        chars.len() - ELIDE_HEAD_CHARS - ELIDE_TAIL_CHARS
    )
}

fn render_slot(session: &Session, slot: &ViewSlot) -> ModelMessage {
    match &slot.item {
        ViewItem::Capsule(i) => {
            let cap = session.entry(*i).as_capsule().expect("capsule slot");
            ModelMessage {
                role: "user".into(),
                content: vec![ContentBlock::text(
                    crate::capsule::render::render_for_model(cap),
                )],
                tool_call_id: None,
                is_error: None,
                entry_id: None,
            }
        }
        ViewItem::Entry(i) => {
            let e = session.entry(*i);
            match &e.body {
                EntryBody::Message(m) => ModelMessage {
                    role: m.role.as_str().into(),
                    content: m.content.clone(),
                    tool_call_id: None,
                    is_error: None,
                    entry_id: Some(e.id.clone()),
                },
                EntryBody::ToolResult(r) => ModelMessage {
                    role: "tool".into(),
                    content: if slot.elided {
                        vec![ContentBlock::text(elided_text(&e.id, r))]
                    } else {
                        r.content.clone()
                    },
                    tool_call_id: Some(r.call_id.clone()),
                    is_error: Some(r.is_error),
                    entry_id: Some(e.id.clone()),
                },
                _ => unreachable!("only model-visible entries are placed in the view"),
            }
        }
        ViewItem::InterruptedResult { call_id, .. } => ModelMessage {
            role: "tool".into(),
            content: vec![ContentBlock::text(INTERRUPTED_RESULT_TEXT)],
            tool_call_id: Some(call_id.clone()),
            is_error: Some(true),
            entry_id: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::testing::Builder;
    use proptest::prelude::*;
    use serde_json::json;

    fn roles(session: &Session) -> Vec<String> {
        ModelView::build(session, session.leaf())
            .messages(session)
            .iter()
            .map(|m| match &m.tool_call_id {
                Some(id) => format!("tool:{id}"),
                None => m.role.clone(),
            })
            .collect()
    }

    #[test]
    fn an_interrupted_call_gets_a_synthetic_result_in_the_view() {
        let mut b = Builder::new();
        b.user("go");
        b.bash("c1", "sleep 100");
        b.user("stop, do something else");
        let s = &b.session;
        assert_eq!(roles(s), ["user", "assistant", "tool:c1", "user"]);
        let msgs = ModelView::build(s, s.leaf()).messages(s);
        assert_eq!(blocks_text_of(&msgs[2]), INTERRUPTED_RESULT_TEXT);
        assert_eq!(msgs[2].is_error, Some(true));
        // The log itself has no such entry.
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn a_result_whose_call_is_missing_is_left_out_with_a_warning() {
        let mut b = Builder::new();
        b.user("go");
        b.result("ghost", "output of a call the log never saw");
        b.assistant("done");
        let s = &b.session;
        let view = ModelView::build(s, s.leaf());
        assert_eq!(roles(s), ["user", "assistant"]);
        assert_eq!(view.warnings.len(), 1);
        assert!(view.warnings[0].contains("ghost"));
        assert_eq!(s.len(), 3, "the log keeps both");
    }

    #[test]
    fn results_follow_their_call_even_when_logged_later() {
        let mut b = Builder::new();
        b.user("go");
        b.call("a", "Read", json!({"file_path": "x"}));
        b.user("(typed while the tool ran)");
        b.result("a", "contents");
        let s = &b.session;
        assert_eq!(roles(s), ["user", "assistant", "tool:a", "user"]);
    }

    fn blocks_text_of(m: &ModelMessage) -> String {
        crate::session::entry::blocks_text(&m.content)
    }

    proptest! {
        /// The view never separates a tool call from its result, whatever the log holds.
        #[test]
        fn the_view_never_separates_a_tool_call_from_its_result(ops in proptest::collection::vec(0u8..5, 1..80)) {
            let mut b = Builder::new();
            let mut calls: Vec<String> = Vec::new();
            for (n, op) in ops.into_iter().enumerate() {
                match op {
                    0 => { b.user("u"); }
                    1 => { b.assistant("a"); }
                    2 => { let id = format!("c{n}"); b.call(&id, "Bash", json!({"command": "ls"})); calls.push(id); }
                    3 => { if let Some(id) = calls.pop() { b.result(&id, "r"); } }
                    _ => { b.result(&format!("orphan{n}"), "r"); }
                }
            }
            let s = &b.session;
            let msgs = ModelView::build(s, s.leaf()).messages(s);
            let mut i = 0;
            while i < msgs.len() {
                let calls: Vec<String> = msgs[i].content.iter().filter_map(|c| match c {
                    ContentBlock::ToolCall { id, .. } => Some(id.clone()),
                    _ => None,
                }).collect();
                for (k, id) in calls.iter().enumerate() {
                    prop_assert_eq!(msgs.get(i + 1 + k).and_then(|m| m.tool_call_id.clone()), Some(id.clone()));
                }
                if calls.is_empty() {
                    prop_assert!(msgs[i].tool_call_id.is_none() || i > 0, "a result at the start");
                }
                i += 1 + calls.len();
                // Results only ever appear directly after their call.
                if i < msgs.len() {
                    prop_assert!(msgs[i].tool_call_id.is_none() || msgs[i].role != "tool");
                }
            }
        }
    }
}

#[cfg(test)]
mod foreign_compaction_tests {
    use super::*;
    use crate::session::entry::{ForeignCompactionEntry, Usage};
    use crate::session::testing::Builder;

    fn set_usage(b: &mut Builder, id: &str, input: u64) {
        let idx = b.session.index_of(id).unwrap();
        let mut entry = b.session.entry(idx).clone();
        if let EntryBody::Message(m) = &mut entry.body {
            m.usage = Some(Usage {
                input,
                ..Usage::default()
            });
        }
        // Rebuild the session with the changed entry (entries are immutable once pushed).
        let entries: Vec<_> = b
            .session
            .entries()
            .iter()
            .map(|e| if e.id == id { entry.clone() } else { e.clone() })
            .collect();
        let mut fresh = Session::new(b.session.header.clone(), b.session.tokenizer());
        for e in entries {
            fresh.push(e).unwrap();
        }
        b.session = fresh;
    }

    #[test]
    fn usage_after_a_foreign_compaction_is_not_an_anchor() {
        let mut b = Builder::new();
        b.user("start");
        let before = b.assistant("measured on the full history");
        b.push(EntryBody::ForeignCompaction(ForeignCompactionEntry {
            agent: "claude-code".into(),
            trigger: Some("auto".into()),
            tokens_before: Some(1000),
            summary: Some("summary".into()),
            summary_tokens: None,
            first_kept_entry_id: None,
            kept_items: None,
            instructions: None,
        }));
        let after = b.assistant("measured on the source agent's compacted context");
        set_usage(&mut b, &before, 1000);
        set_usage(&mut b, &after, 50);
        let s = &b.session;
        let view = ModelView::build(s, s.leaf());
        let anchor = view
            .usage_anchor(s)
            .expect("the usage before the foreign compaction anchors");
        assert_eq!(anchor.usage.input, 1000);
        let after_idx = s.index_of(&after).unwrap();
        assert!(
            anchor.tokens_after >= s.tokens_of(after_idx),
            "entries after the anchor are counted"
        );
    }
}

#[cfg(test)]
mod usage_tests {
    use super::*;
    use crate::session::entry::{MessageEntry, Usage};
    use crate::session::testing::Builder;

    fn assistant_with_usage(b: &mut Builder, input: u64) -> String {
        b.push(EntryBody::Message(MessageEntry {
            role: Role::Assistant,
            content: vec![ContentBlock::text("answer")],
            usage: Some(Usage {
                input,
                cache_read: 0,
                cache_write: 0,
                output: 10,
            }),
            model: None,
            synthetic: false,
        }))
    }

    #[test]
    fn usage_recorded_before_the_latest_capsule_is_ignored() {
        let mut b = Builder::new();
        b.user("one");
        assistant_with_usage(&mut b, 90_000);
        let kept = b.user("two");
        assistant_with_usage(&mut b, 95_000);
        let mut cap = crate::capsule::render::tests::full_capsule();
        cap.first_kept_entry_id = Some(kept);
        b.push(EntryBody::Capsule(Box::new(cap)));
        let s = &b.session;
        let view = ModelView::build(s, s.leaf());
        // The tail's usage measured the old, larger input: no anchor.
        assert!(view.usage_anchor(s).is_none());
        // Usage reported after the capsule is used again.
        b.user("three");
        assistant_with_usage(&mut b, 7_000);
        b.user("four");
        let s = &b.session;
        let view = ModelView::build(s, s.leaf());
        let anchor = view.usage_anchor(s).expect("fresh usage");
        assert_eq!(anchor.usage.input, 7_000);
        assert_eq!(anchor.tokens_after, s.tokens_of(s.leaf().unwrap()));
    }
}
