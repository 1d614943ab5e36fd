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
use crate::tokens::{MESSAGE_OVERHEAD_TOKENS, TokenizerKind};

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
    InterruptedResult { call_id: String, tool_name: String, call_entry: usize },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewSlot {
    pub item: ViewItem,
    pub part: ViewPart,
}

/// One message of the model input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelMessage {
    /// `system`, `user`, `assistant`, or `tool`.
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
    pub warnings: Vec<String>,
}

/// Tokens of the synthetic result for an interrupted call.
pub fn interrupted_result_tokens(kind: TokenizerKind, call_id: &str) -> u64 {
    MESSAGE_OVERHEAD_TOKENS + kind.count(call_id) + kind.count(INTERRUPTED_RESULT_TEXT)
}

impl ModelView {
    /// The view for `leaf` (usually `session.leaf()`).
    pub fn build(session: &Session, leaf: Option<usize>) -> ModelView {
        let mut view = ModelView { leaf, ..ModelView::default() };
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
            let cap = session.entry(c).as_capsule().expect("capsule index holds a capsule");
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
            view.slots.push(ViewSlot { item: ViewItem::Capsule(c), part: ViewPart::Capsule });
        }
        pair_tool_results(session, &ordered, &mut view);
        view
    }

    /// Ids of the entries in the view, in order (capsule and synthetic results left out).
    pub fn entry_indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.slots.iter().filter_map(|s| match s.item {
            ViewItem::Entry(i) => Some(i),
            _ => None,
        })
    }

    fn slot_tokens(session: &Session, slot: &ViewSlot) -> u64 {
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
        let mut b = Breakdown { system, tools, ..Breakdown::default() };
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
    /// Usage on retained-tail entries predates the capsule and is ignored.
    pub fn usage_anchor(&self, session: &Session) -> Option<UsageAnchor> {
        let mut after = 0;
        for slot in self.slots.iter().rev() {
            if slot.part != ViewPart::New {
                break;
            }
            if let ViewItem::Entry(i) = slot.item {
                if let EntryBody::Message(m) = &session.entry(i).body {
                    if let Some(usage) = m.usage {
                        if m.role == Role::Assistant {
                            return Some(UsageAnchor { usage, tokens_after: after });
                        }
                    }
                }
            }
            after += Self::slot_tokens(session, slot);
        }
        None
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
            emitted[pos] = true;
            continue;
        }
        emitted[pos] = true;
        view.slots.push(ViewSlot { item: ViewItem::Entry(i), part });
        for (call_id, name, _) in e.tool_calls() {
            match result_at.get(call_id) {
                Some(&rpos) if rpos > pos && !emitted[rpos] => {
                    emitted[rpos] = true;
                    view.slots.push(ViewSlot { item: ViewItem::Entry(ordered[rpos].0), part: ordered[rpos].1 });
                }
                _ => view.slots.push(ViewSlot {
                    item: ViewItem::InterruptedResult {
                        call_id: call_id.to_string(),
                        tool_name: name.to_string(),
                        call_entry: i,
                    },
                    part,
                }),
            }
        }
    }
}

fn render_slot(session: &Session, slot: &ViewSlot) -> ModelMessage {
    match &slot.item {
        ViewItem::Capsule(i) => {
            let cap = session.entry(*i).as_capsule().expect("capsule slot");
            ModelMessage {
                role: "user".into(),
                content: vec![ContentBlock::text(crate::capsule::render::render_for_model(cap))],
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
                    content: r.content.clone(),
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
