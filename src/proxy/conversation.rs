//! One proxied conversation and the session it maps to. Agents resend their whole history with
//! every request; the conversation remembers which incoming message became which log entries,
//! so each request appends only what is new, a changed history (an edit, a retried turn)
//! rewinds the session to where the two agree, and the prefix a capsule replaced keeps
//! matching after a compaction. Pure: no I/O; the server performs what it says.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;

use crate::wire::fingerprint::content_fingerprint;
use crate::wire::message::{Incoming, Outgoing};
use crate::wire::Api;
use soba_core::session::entry::ContentBlock;
use soba_core::session::view::ModelMessage;

/// One message of the conversation as the session holds it. Only fingerprints and ids: the
/// agent resends every message with each request, so the message itself is read from the
/// request being answered, and a long conversation costs its proxy a few dozen bytes a message
/// rather than a copy of its history.
#[derive(Debug, Clone)]
struct Mapped {
    /// Content fingerprint: the entries the message stands for.
    fingerprint: u64,
    /// Whether the agent has sent this message (a reply it has not resent yet has not).
    sent_by_agent: bool,
    /// Each entry's content: whether the model input still shows it unchanged.
    contents: Vec<EntryContent>,
    entry_ids: Vec<String>,
}

/// What the conversation keeps of an entry's content to tell whether the model input shows it
/// as the agent sent it.
#[derive(Debug, Clone, Copy)]
struct EntryContent {
    /// Fingerprinted key order aside, as appended.
    fingerprint: u64,
    /// The session logs it as appended: read into the log's content blocks and written back
    /// it is the same (a block of a kind the log keeps in part would not be). A message the
    /// daemon says it shows as logged then shows it as the agent sent it, and the daemon can
    /// leave its content out of the model input.
    logged_as_sent: bool,
}

impl EntryContent {
    fn of(entry: &Value) -> EntryContent {
        let content = entry.get("content").unwrap_or(&Value::Null);
        let fingerprint = value_fingerprint(content);
        let logged_as_sent = Vec::<ContentBlock>::deserialize(content)
            .ok()
            .and_then(|blocks| serde_json::to_value(blocks).ok())
            .is_some_and(|logged| value_fingerprint(&logged) == fingerprint);
        EntryContent {
            fingerprint,
            logged_as_sent,
        }
    }
}

impl Mapped {
    fn of(
        fingerprint: u64,
        entries: &[Value],
        entry_ids: Vec<String>,
        sent_by_agent: bool,
    ) -> Mapped {
        Mapped {
            fingerprint,
            sent_by_agent,
            contents: entries.iter().map(EntryContent::of).collect(),
            entry_ids,
        }
    }
}

/// A fingerprint of a JSON value that does not depend on the order of object keys: the
/// session renders an entry's content with its own key order.
fn value_fingerprint(v: &Value) -> u64 {
    fn eat(h: &mut u64, bytes: &[u8]) {
        for b in bytes.iter().chain(std::iter::once(&0xff)) {
            *h ^= u64::from(*b);
            *h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn feed(v: &Value, h: &mut u64) {
        match v {
            Value::Null => eat(h, b"n"),
            Value::Bool(b) => eat(h, if *b { b"t" } else { b"f" }),
            Value::Number(n) => eat(h, n.to_string().as_bytes()),
            Value::String(s) => {
                eat(h, b"s");
                eat(h, s.as_bytes());
            }
            Value::Array(items) => {
                eat(h, b"[");
                for i in items {
                    feed(i, h);
                }
                eat(h, b"]");
            }
            Value::Object(map) => {
                eat(h, b"{");
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                for k in keys {
                    eat(h, k.as_bytes());
                    feed(&map[k], h);
                }
                eat(h, b"}");
            }
        }
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    feed(v, &mut h);
    h
}

/// What to do to bring the session in step with an incoming history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncPlan {
    /// Move the session's leaf back to this entry first (the history changed after it).
    pub rewind_to: Option<String>,
    /// Incoming messages from this index on are new: append them.
    pub append_from: usize,
    /// The histories share nothing: the conversation must start over in a new session.
    pub restart: bool,
}

/// A proxied conversation.
#[derive(Debug, Clone)]
pub struct Conversation {
    pub session_id: String,
    mapped: Vec<Mapped>,
    /// System prompt and tool schemas last recorded in the session.
    overhead: Option<(String, Option<String>)>,
    /// Responses API replies by the provider's response id: how many messages the conversation
    /// held once the reply was recorded, and the reply's last entry id.
    responses: HashMap<String, (usize, String)>,
}

/// Where a request that continues a stored response (`previous_response_id`) picks up: its
/// input holds only what follows that response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    /// Move the session's leaf back to the response's last entry first (the request continues
    /// an earlier response than the latest).
    pub rewind_to: Option<String>,
    /// Messages of the conversation up to and including the response.
    pub keep: usize,
}

impl Conversation {
    pub fn new(session_id: String) -> Self {
        Conversation {
            session_id,
            mapped: Vec::new(),
            overhead: None,
            responses: HashMap::new(),
        }
    }

    /// Messages the session holds.
    pub fn len(&self) -> usize {
        self.mapped.len()
    }

    pub fn is_empty(&self) -> bool {
        self.mapped.is_empty()
    }

    /// The setting entry to append when the agent's system prompt or tools changed.
    pub fn overhead_change(&self, system: &str, tools: Option<&str>) -> Option<Value> {
        let now = (system.to_string(), tools.map(str::to_string));
        if self.overhead.as_ref() == Some(&now) {
            return None;
        }
        let mut setting = serde_json::json!({"type": "setting", "systemPrompt": system});
        if let Some(t) = tools {
            setting["toolSchemas"] = Value::String(t.to_string());
        }
        Some(setting)
    }

    pub fn overhead_recorded(&mut self, system: &str, tools: Option<&str>) {
        self.overhead = Some((system.to_string(), tools.map(str::to_string)));
    }

    /// Match the incoming history against the session by content.
    pub fn plan(&self, incoming: &[Incoming]) -> SyncPlan {
        let common = self
            .mapped
            .iter()
            .zip(incoming)
            .take_while(|(m, i)| m.fingerprint == i.fingerprint)
            .count();
        if common == self.mapped.len() {
            return SyncPlan {
                rewind_to: None,
                append_from: common,
                restart: false,
            };
        }
        // The agent changed or dropped something after `common`: continue from the last
        // message both agree on.
        let target = self.mapped[..common]
            .iter()
            .rev()
            .find_map(|m| m.entry_ids.last().cloned());
        SyncPlan {
            restart: target.is_none(),
            rewind_to: target,
            append_from: common,
        }
    }

    /// The plan was carried out: messages after `keep` are gone from the session's branch,
    /// and `appended` (each with the ids the session gave its entries) follow. Messages both
    /// sides agree on take the agent's latest wording.
    pub fn applied(&mut self, incoming: &[Incoming], keep: usize, appended: Vec<Vec<String>>) {
        self.mapped.truncate(keep);
        for m in self.mapped.iter_mut().take(incoming.len()) {
            m.sent_by_agent = true;
        }
        for (msg, ids) in incoming[keep..].iter().zip(appended) {
            self.mapped
                .push(Mapped::of(msg.fingerprint, &msg.entries, ids, true));
        }
    }

    /// The upstream's reply became entry `entry_id`; the agent will resend it as the next
    /// message of its history.
    pub fn replied(&mut self, entry: Value, entry_id: String) {
        let entries = vec![without_usage(entry)];
        let fingerprint = content_fingerprint(&entries);
        self.mapped
            .push(Mapped::of(fingerprint, &entries, vec![entry_id], false));
    }

    /// The reply just recorded (its entries passed to [`Conversation::replied`]) is the
    /// provider's response `response_id`.
    pub fn response_recorded(&mut self, response_id: String) {
        if let Some(last) = self.mapped.last().and_then(|m| m.entry_ids.last()) {
            let at = (self.mapped.len(), last.clone());
            self.responses.insert(response_id, at);
        }
    }

    /// Where a request continuing response `response_id` picks up; `None` when the response
    /// is not one of this conversation's, or the history it ended has since been replaced.
    pub fn continuation(&self, response_id: &str) -> Option<Continuation> {
        let (keep, entry) = self.responses.get(response_id)?;
        let at = self.mapped.get(keep.checked_sub(1)?)?;
        if at.entry_ids.last() != Some(entry) {
            return None;
        }
        Some(Continuation {
            rewind_to: (*keep < self.mapped.len()).then(|| entry.clone()),
            keep: *keep,
        })
    }

    /// The continuation was carried out: messages after `keep` are gone from the session's
    /// branch, and all of `incoming` (each with the ids the session gave its entries) follows.
    pub fn continued(&mut self, keep: usize, incoming: &[Incoming], appended: Vec<Vec<String>>) {
        self.mapped.truncate(keep);
        for (msg, ids) in incoming.iter().zip(appended) {
            self.mapped
                .push(Mapped::of(msg.fingerprint, &msg.entries, ids, true));
        }
    }

    /// The entries of each message the agent sent whose content the session logs as the agent
    /// sent it, one run a message: the agent's request holds their content, so the daemon
    /// need not send it back where the model input shows them whole ([`Conversation::compose`]
    /// sends such a message as the agent sent it).
    pub fn held_runs(&self, incoming: usize) -> Vec<&[String]> {
        self.mapped
            .iter()
            .take(incoming)
            .filter(|m| {
                m.sent_by_agent
                    && !m.entry_ids.is_empty()
                    && m.contents.iter().all(|c| c.logged_as_sent)
            })
            .map(|m| m.entry_ids.as_slice())
            .collect()
    }

    /// Lay out the model input: every run of messages that is one of the agent's messages,
    /// whole and unchanged, goes out as the agent sent it in `incoming` (the request the
    /// conversation was just brought in step with); the rest is rendered. `omitted`: the
    /// positions of the input's messages the daemon left the content out of, each a run of
    /// [`Conversation::held_runs`] it shows whole and as logged.
    pub fn compose(
        &self,
        input: &[ModelMessage],
        omitted: &[usize],
        incoming: &[Incoming],
    ) -> Vec<Outgoing> {
        let mut shown_as_logged = vec![false; input.len()];
        for &i in omitted {
            if let Some(at) = shown_as_logged.get_mut(i) {
                *at = true;
            }
        }
        let mut first_entry: HashMap<&str, usize> = HashMap::new();
        for (i, m) in self.mapped.iter().enumerate() {
            if let Some(first) = m.entry_ids.first() {
                first_entry.insert(first.as_str(), i);
            }
        }
        let mut out = Vec::with_capacity(input.len());
        let mut pos = 0;
        while pos < input.len() {
            let msg = &input[pos];
            let whole = msg
                .entry_id
                .as_deref()
                .and_then(|id| first_entry.get(id))
                .filter(|&&i| {
                    let m = &self.mapped[i];
                    m.sent_by_agent
                        && i < incoming.len()
                        && kept_whole(m, &input[pos..], &shown_as_logged[pos..])
                });
            match whole {
                Some(&i) => {
                    out.push(Outgoing::Raw(incoming[i].raw.clone()));
                    pos += self.mapped[i].entry_ids.len();
                }
                None => {
                    out.push(Outgoing::Rendered(msg.clone()));
                    pos += 1;
                }
            }
        }
        out
    }
}

fn without_usage(mut entry: Value) -> Value {
    if let Some(o) = entry.as_object_mut() {
        o.remove("usage");
    }
    entry
}

/// Whether the model input shows all of `m`'s entries, in order, with the content they were
/// appended with (a tool result the view shortened is not). A message whose content the
/// daemon left out is shown as logged, which is as appended when the log holds it so; another
/// is compared by its content.
fn kept_whole(m: &Mapped, input: &[ModelMessage], shown_as_logged: &[bool]) -> bool {
    if input.len() < m.entry_ids.len() {
        return false;
    }
    m.entry_ids
        .iter()
        .zip(&m.contents)
        .zip(input.iter().zip(shown_as_logged))
        .all(|((id, content), (shown, &as_logged))| {
            shown.entry_id.as_deref() == Some(id.as_str())
                && if as_logged {
                    content.logged_as_sent
                } else {
                    serde_json::to_value(&shown.content)
                        .is_ok_and(|c| value_fingerprint(&c) == content.fingerprint)
                }
        })
}

/// The provider messages for the upstream request.
pub fn provider_messages(api: Api, outgoing: Vec<Outgoing>) -> Vec<Value> {
    match api {
        Api::OpenAiChat => {
            let mut out = Vec::with_capacity(outgoing.len());
            let mut rendered = Vec::new();
            for o in outgoing {
                match o {
                    Outgoing::Raw(v) => {
                        out.extend(crate::wire::render_openai(&std::mem::take(&mut rendered)));
                        out.push(v);
                    }
                    Outgoing::Rendered(m) => rendered.push(m),
                }
            }
            out.extend(crate::wire::render_openai(&rendered));
            out
        }
        Api::OpenAiResponses => crate::wire::responses::render_items(outgoing),
        Api::Anthropic => crate::wire::merge_anthropic_turns(
            outgoing
                .into_iter()
                .map(|o| match o {
                    Outgoing::Raw(v) => v,
                    Outgoing::Rendered(m) => crate::wire::render_anthropic_one(&m),
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ChatRequest;
    use serde_json::json;
    use soba_core::session::entry::ContentBlock;

    fn request(messages: Value) -> ChatRequest {
        let body = json!({"model": "gpt-4o", "messages": messages});
        ChatRequest::parse(Api::OpenAiChat, body.to_string().as_bytes()).unwrap()
    }

    fn ids(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    fn shown(id: &str, role: &str, text: &str) -> ModelMessage {
        ModelMessage {
            role: role.into(),
            content: vec![ContentBlock::text(text)],
            tool_call_id: None,
            is_error: None,
            entry_id: Some(id.into()),
        }
    }

    #[test]
    fn a_resent_history_appends_only_the_new_messages() {
        let mut c = Conversation::new("s".into());
        let r1 = request(json!([{"role": "user", "content": "hi"}]));
        let plan = c.plan(&r1.messages);
        assert_eq!(plan.append_from, 0);
        c.applied(&r1.messages, 0, vec![ids("a", 1)]);
        c.replied(
            json!({"type": "message", "role": "assistant", "content": [{"type": "text", "text": "hello"}], "usage": {"input": 3}}),
            "b0".into(),
        );
        let r2 = request(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "next"},
        ]));
        let plan = c.plan(&r2.messages);
        assert_eq!(
            plan,
            SyncPlan {
                rewind_to: None,
                append_from: 2,
                restart: false
            }
        );
    }

    #[test]
    fn a_changed_history_rewinds_to_where_both_agree() {
        let mut c = Conversation::new("s".into());
        let r1 = request(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "do x"},
        ]));
        c.applied(&r1.messages, 0, vec![ids("a", 1), ids("b", 1), ids("c", 1)]);
        let r2 = request(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "do y instead"},
        ]));
        let plan = c.plan(&r2.messages);
        assert_eq!(plan.rewind_to.as_deref(), Some("b0"));
        assert_eq!(plan.append_from, 2);
        c.applied(&r2.messages, plan.append_from, vec![ids("d", 1)]);
        assert_eq!(c.len(), 3);
        assert_eq!(c.plan(&r2.messages).append_from, 3);
    }

    #[test]
    fn a_history_resent_with_other_whitespace_continues_and_goes_out_as_resent() {
        let mut c = Conversation::new("s".into());
        let r1 =
            request(json!([{"role": "user", "content": "Fix the parser.\n\nIt fails on tabs."}]));
        c.applied(&r1.messages, 0, vec![ids("a", 1)]);
        c.replied(reply_entry("Found it."), "b0".into());
        let resent = |opening: &str| {
            request(json!([
                {"role": "user", "content": opening},
                {"role": "assistant", "content": "Found it.\n"},
                {"role": "user", "content": "fix it"},
            ]))
        };
        let r2 = resent("Fix the parser.\nIt fails on tabs.  ");
        let plan = c.plan(&r2.messages);
        assert_eq!(
            plan,
            SyncPlan {
                rewind_to: None,
                append_from: 2,
                restart: false
            }
        );
        c.applied(&r2.messages, plan.append_from, vec![ids("c", 1)]);
        assert_eq!(c.len(), 3, "nothing recorded twice");
        // The session keeps the wording it recorded; the model gets the agent's latest.
        let input = [
            shown("a0", "user", "Fix the parser.\n\nIt fails on tabs."),
            shown("b0", "assistant", "Found it."),
            shown("c0", "user", "fix it"),
        ];
        let out = c.compose(&input, &[], &r2.messages);
        let raw: Vec<Outgoing> = r2
            .messages
            .iter()
            .map(|m| Outgoing::Raw(m.raw.clone()))
            .collect();
        assert_eq!(out, raw);
        // Any other edit of the first message is another history.
        let edited = resent("Fix the parser.\n\nIt fails on spaces.");
        assert!(c.plan(&edited.messages).restart);
    }

    #[test]
    fn messages_kept_whole_go_out_as_sent_and_the_capsule_is_rendered() {
        let mut c = Conversation::new("s".into());
        // Key order and spacing the agent chose survive: the raw value is sent.
        let r = request(json!([
            {"content": "old", "role": "user"},
            {"content": "kept", "role": "user"},
        ]));
        c.applied(&r.messages, 0, vec![ids("a", 1), ids("b", 1)]);
        let capsule = ModelMessage {
            entry_id: None,
            ..shown("", "user", "# Context Capsule")
        };
        let out = c.compose(
            &[capsule.clone(), shown("b0", "user", "kept")],
            &[],
            &r.messages,
        );
        assert_eq!(
            out,
            vec![
                Outgoing::Rendered(capsule),
                Outgoing::Raw(json!({"content": "kept", "role": "user"}))
            ]
        );
    }

    #[test]
    fn a_shortened_tool_result_is_rendered_not_sent_raw() {
        let mut c = Conversation::new("s".into());
        let r = request(json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "long output"},
        ]));
        c.applied(&r.messages, 0, vec![ids("a", 1), ids("b", 1), ids("c", 1)]);
        let mut result = shown("c0", "tool", "long … [elided]");
        result.tool_call_id = Some("c1".into());
        let out = c.compose(&[result.clone()], &[], &r.messages);
        assert_eq!(out, vec![Outgoing::Rendered(result)]);
    }

    fn responses_request(input: Value) -> ChatRequest {
        let body = json!({"model": "gpt-5", "input": input});
        ChatRequest::parse(Api::OpenAiResponses, body.to_string().as_bytes()).unwrap()
    }

    fn reply_entry(text: &str) -> Value {
        json!({"type": "message", "role": "assistant", "content": [{"type": "text", "text": text}]})
    }

    #[test]
    fn a_stored_response_is_continued_from_where_it_ended() {
        let mut c = Conversation::new("s".into());
        let r1 = responses_request(json!("hi"));
        c.applied(&r1.messages, 0, vec![ids("a", 1)]);
        c.replied(reply_entry("hello"), "b0".into());
        c.response_recorded("resp_1".into());
        let next = responses_request(json!([{"role": "user", "content": "go on"}]));
        let plan = c.continuation("resp_1").unwrap();
        assert_eq!(
            plan,
            Continuation {
                rewind_to: None,
                keep: 2
            }
        );
        c.continued(plan.keep, &next.messages, vec![ids("c", 1)]);
        c.replied(reply_entry("going"), "d0".into());
        c.response_recorded("resp_2".into());
        assert_eq!(c.len(), 4);
        // Continuing the first response again (a fork): back to its last entry.
        let plan = c.continuation("resp_1").unwrap();
        assert_eq!(
            plan,
            Continuation {
                rewind_to: Some("b0".into()),
                keep: 2
            }
        );
        c.continued(plan.keep, &next.messages, vec![ids("e", 1)]);
        assert_eq!(c.len(), 3);
        // The second response's history was replaced: it cannot be continued any more.
        assert_eq!(c.continuation("resp_2"), None);
        assert_eq!(c.continuation("resp_unknown"), None);
    }

    #[test]
    fn responses_items_kept_whole_go_out_as_sent_after_the_capsule() {
        let mut c = Conversation::new("s".into());
        let reasoning = json!({"type": "reasoning", "summary": [], "encrypted_content": "gAAAA=="});
        let r = responses_request(json!([
            {"role": "user", "content": "old"},
            reasoning,
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "kept"}]},
        ]));
        c.applied(&r.messages, 0, vec![ids("a", 1), ids("b", 1), ids("c", 1)]);
        let capsule = ModelMessage {
            entry_id: None,
            ..shown("", "user", "# Context Capsule")
        };
        let mut thinking: ModelMessage = serde_json::from_value(json!({
            "role": "assistant", "entryId": "b0",
            "content": [{"type": "thinking", "thinking": "", "encrypted_content": "gAAAA=="}]}))
        .unwrap();
        thinking.entry_id = Some("b0".into());
        let out = c.compose(
            &[capsule, thinking, shown("c0", "user", "kept")],
            &[],
            &r.messages,
        );
        let items = provider_messages(Api::OpenAiResponses, out);
        assert_eq!(
            items,
            vec![
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "# Context Capsule"}]}),
                reasoning,
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "kept"}]}),
            ]
        );
    }

    #[test]
    fn an_anthropic_turn_split_by_the_input_is_rendered_and_turns_alternate() {
        let body = json!({"model": "claude", "max_tokens": 10, "messages": [
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                {"type": "text", "text": "and now"},
            ]},
        ]});
        let r = ChatRequest::parse(Api::Anthropic, body.to_string().as_bytes()).unwrap();
        assert_eq!(r.messages[0].entries.len(), 2);
        let mut c = Conversation::new("s".into());
        c.applied(&r.messages, 0, vec![ids("a", 2)]);
        // The view kept only the text (the result went with its call into the capsule).
        let capsule = ModelMessage {
            entry_id: None,
            ..shown("", "user", "capsule")
        };
        let out = c.compose(&[capsule, shown("a1", "user", "and now")], &[], &r.messages);
        assert!(matches!(out[1], Outgoing::Rendered(_)));
        let msgs = provider_messages(Api::Anthropic, out);
        assert_eq!(msgs.len(), 1, "two user messages share one turn: {msgs:?}");
        assert_eq!(msgs[0]["content"][1]["text"], "and now");
    }
    #[test]
    fn content_fingerprints_do_not_depend_on_key_order() {
        let a = json!([{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]);
        let b = json!([{"cache_control": {"type": "ephemeral"}, "text": "x", "type": "text"}]);
        assert_eq!(value_fingerprint(&a), value_fingerprint(&b));
        let c = json!([{"type": "text", "text": "y", "cache_control": {"type": "ephemeral"}}]);
        assert_ne!(value_fingerprint(&a), value_fingerprint(&c));
        assert_ne!(value_fingerprint(&json!("1")), value_fingerprint(&json!(1)));
        assert_ne!(
            value_fingerprint(&json!(["ab"])),
            value_fingerprint(&json!(["a", "b"]))
        );
    }

    #[test]
    fn a_message_goes_out_as_the_latest_request_sent_it() {
        // The conversation keeps no copy of a message: the request being answered supplies
        // it, with the agent's latest wording (key order, spacing) of content both agree on.
        let mut c = Conversation::new("s".into());
        let r1 = request(json!([{"role": "user", "content": "kept"}]));
        c.applied(&r1.messages, 0, vec![ids("a", 1)]);
        let r2 = request(json!([{"content": "kept", "role": "user"}]));
        let plan = c.plan(&r2.messages);
        assert_eq!(plan.append_from, 1);
        c.applied(&r2.messages, plan.append_from, vec![]);
        let out = c.compose(&[shown("a0", "user", "kept")], &[], &r2.messages);
        assert_eq!(
            out,
            vec![Outgoing::Raw(json!({"content": "kept", "role": "user"}))]
        );
        // A reply the agent has not resent is rendered, never taken from another request.
        c.replied(reply_entry("hello"), "b0".into());
        let reply = shown("b0", "assistant", "hello");
        let out = c.compose(
            &[shown("a0", "user", "kept"), reply.clone()],
            &[],
            &r2.messages,
        );
        assert_eq!(out[1], Outgoing::Rendered(reply));
    }

    #[test]
    fn a_message_whose_content_the_daemon_left_out_goes_out_as_sent() {
        let mut c = Conversation::new("s".into());
        let r = request(json!([
            {"role": "user", "content": "old"},
            {"role": "user", "content": "kept"},
        ]));
        c.applied(&r.messages, 0, vec![ids("a", 1), ids("b", 1)]);
        // Every message the agent sent is held: its content is logged as sent.
        let held: Vec<Vec<String>> = c.held_runs(2).iter().map(|r| r.to_vec()).collect();
        assert_eq!(held, vec![ids("a", 1), ids("b", 1)]);
        // The daemon left out the content of the second message: the agent's message stands
        // for it. The first, shown with other content, is rendered.
        let left_out = ModelMessage {
            content: Vec::new(),
            ..shown("b0", "user", "")
        };
        let changed = shown("a0", "user", "old, shortened");
        let out = c.compose(&[changed.clone(), left_out], &[1], &r.messages);
        assert_eq!(
            out,
            vec![
                Outgoing::Rendered(changed),
                Outgoing::Raw(json!({"role": "user", "content": "kept"}))
            ]
        );
        // A reply the agent has not resent yet is not held: its content must come back.
        c.replied(reply_entry("done"), "c0".into());
        assert_eq!(c.held_runs(2).len(), 2);
        assert_eq!(
            c.held_runs(3).len(),
            2,
            "the reply was not sent by the agent"
        );
    }
}
