//! Which conversation a proxied request belongs to. Agents resend their whole history with no
//! conversation id, so the proxy tells conversations apart by what only one of them can hold:
//! the replies it forwarded. A reply the upstream wrote for one request reached exactly one
//! conversation, so a request that carries it continues that conversation, whatever its system
//! prompt says now (a clock in it, a changed tool list) and however many other conversations
//! opened the same way (two copies of an agent given one task, every run of an agent whose first
//! message is a fixed summary of the repository).
//!
//! A request that carries no reply the proxy forwarded is the first of a conversation, or a
//! retry of one whose earlier attempts got no reply: it continues a conversation that opened
//! the same way only when that one has no reply yet and no request in flight; otherwise it
//! starts a new one. Messages are compared with the whitespace of their text folded
//! ([`crate::wire::content_fingerprint`]): an agent that resends its history re-wrapped (aider
//! restoring its chat history) still continues its conversation. An explicit name (`X-Soba-Session`, or an id the server knows, such as a
//! response id the next request refers to) wins over all of this.
//!
//! Pure: no I/O, no locks. The server holds the registry behind a short-lived lock, separate
//! from the per-conversation state that a request holds while its reply streams, so telling
//! conversations apart never waits on another conversation's request.

use std::collections::HashMap;

use serde_json::Value;

use crate::wire::fingerprint::{content_fingerprint, fingerprint, fold_whitespace};
use crate::wire::{Api, ChatRequest};

/// The request header that names the conversation explicitly; it never goes upstream.
pub const SESSION_HEADER: &str = "x-soba-session";

/// Longest name `X-Soba-Session` takes.
const MAX_NAME_LEN: usize = 200;

/// The proxy's handle on one conversation (not the session id: a conversation's session is
/// opened after it is told apart, and a new one replaces it when the history starts over).
pub type ConversationId = u64;

/// What tells a forwarded reply apart when the agent resends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ReplyKey {
    /// The reply's content exactly as the session holds it.
    Content(u64),
    /// A tool call id the provider generated, for a reply the agent resends changed (thinking
    /// dropped). Some servers number calls `call_0`, `call_1`… in every conversation, so it
    /// counts only for conversations that opened the same way.
    ToolCall(u64),
    /// The reply's text alone, for the same. Short texts ("Done.") recur across conversations,
    /// so it too counts only for conversations that opened the same way.
    Text(u64),
}

/// The keys of one assistant message, as recorded or as resent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyKeys(Vec<ReplyKey>);

impl ReplyKeys {
    /// Keys of an assistant message from the entries it stands for.
    pub fn of(entries: &[Value]) -> ReplyKeys {
        ReplyKeys::with_content(content_fingerprint(entries), entries)
    }

    /// [`ReplyKeys::of`] when the entries' content fingerprint is known already.
    fn with_content(content: u64, entries: &[Value]) -> ReplyKeys {
        let mut keys = vec![ReplyKey::Content(content)];
        let mut texts: Vec<&str> = Vec::new();
        for block in entries
            .iter()
            .filter_map(|e| e.get("content").and_then(Value::as_array))
            .flatten()
        {
            match block.get("type").and_then(Value::as_str) {
                Some("tool_call") => {
                    if let Some(id) = block
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|i| !i.is_empty())
                    {
                        keys.push(ReplyKey::ToolCall(fingerprint(&["tool_call", id])));
                    }
                }
                Some("text") => {
                    if let Some(t) = block.get("text").and_then(Value::as_str) {
                        texts.push(t);
                    }
                }
                _ => {}
            }
        }
        // Each block folded, then joined as they come: a reply resent in more blocks than it
        // was recorded in reads the same.
        let text: String = texts.iter().map(|t| fold_whitespace(t)).collect();
        if !text.is_empty() {
            keys.push(ReplyKey::Text(fingerprint(&["text", &text])));
        }
        ReplyKeys(keys)
    }
}

/// What the registry needs of a request: its messages by content, and the keys of its
/// assistant messages.
#[derive(Debug, Clone)]
pub struct Signature {
    api: Api,
    /// Content fingerprint of each message, in order (as [`super::conversation`] matches them).
    messages: Vec<u64>,
    /// Keys of each assistant message.
    assistant: Vec<ReplyKeys>,
}

impl Signature {
    pub fn of(chat: &ChatRequest) -> Signature {
        let mut messages = Vec::with_capacity(chat.messages.len());
        let mut assistant = Vec::new();
        for m in &chat.messages {
            messages.push(m.fingerprint);
            let from_assistant = m.entries.first().is_some_and(|e| {
                e.get("type").and_then(Value::as_str) == Some("message")
                    && e.get("role").and_then(Value::as_str) == Some("assistant")
            });
            if from_assistant {
                assistant.push(ReplyKeys::with_content(m.fingerprint, &m.entries));
            }
        }
        Signature {
            api: chat.api,
            messages,
            assistant,
        }
    }

    fn opening(&self) -> Option<u64> {
        self.messages.first().copied()
    }
}

/// A name the agent or the server gives a conversation; names of different APIs never meet
/// (a conversation's messages go back to the upstream in its own API's shape).
type Name = (&'static str, String);

/// What the registry knows of one conversation.
#[derive(Debug)]
struct Known {
    api: Api,
    /// Content fingerprints of the messages its session holds, in order: the last history
    /// synced, then the replies recorded since.
    trail: Vec<u64>,
    /// Keys of the replies recorded in it.
    replies: Vec<ReplyKeys>,
    names: Vec<Name>,
    /// Requests assigned to it and not finished.
    in_flight: usize,
    /// When a request was last assigned to it (the registry's own clock).
    last_used: u64,
}

impl Known {
    fn opening(&self) -> Option<u64> {
        self.trail.first().copied()
    }

    /// Messages the request and this conversation agree on, from the start.
    fn common(&self, sig: &Signature) -> usize {
        self.trail
            .iter()
            .zip(&sig.messages)
            .take_while(|(a, b)| a == b)
            .count()
    }
}

/// A request's conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Assignment {
    pub id: ConversationId,
    /// Why: what the answer rests on (for tests and the request line).
    pub by: AssignedBy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignedBy {
    /// A name the request gave.
    Name,
    /// A reply the proxy forwarded to this conversation.
    Reply,
    /// The same opening, in a conversation that has had no reply yet: a retry.
    Retry,
    /// Nothing matched: a new conversation.
    New,
}

/// Every proxied conversation the proxy tells apart.
#[derive(Debug, Default)]
pub struct Registry {
    next_id: ConversationId,
    clock: u64,
    known: HashMap<ConversationId, Known>,
    /// Reply key → the conversations that recorded a reply with it.
    owners: HashMap<ReplyKey, Vec<ConversationId>>,
    named: HashMap<Name, ConversationId>,
}

impl Registry {
    pub fn new() -> Self {
        Registry::default()
    }

    /// Conversations known.
    pub fn len(&self) -> usize {
        self.known.len()
    }

    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// The conversation a request belongs to, counted as in flight until [`Registry::finished`].
    /// `name`: the request's explicit name, which wins when given.
    pub fn assign(&mut self, sig: &Signature, name: Option<&str>) -> Assignment {
        let assignment = match name {
            Some(n) => self.by_name(sig.api, n),
            None => self.by_history(sig),
        };
        self.clock += 1;
        let known = self
            .known
            .get_mut(&assignment.id)
            .expect("an assigned conversation is known");
        known.in_flight += 1;
        known.last_used = self.clock;
        assignment
    }

    /// The conversation called `name` (by `X-Soba-Session`, or a name given with
    /// [`Registry::name`]), if there is one. For a server that finds a request's conversation
    /// by an id of its own (a previous response's id) before assigning by it.
    pub fn lookup(&self, api: Api, name: &str) -> Option<ConversationId> {
        self.named.get(&(api.as_str(), name.to_string())).copied()
    }

    /// Give conversation `id` another name, so a later request naming it (a response id the
    /// next request refers to) is assigned to it.
    pub fn name(&mut self, id: ConversationId, name: &str) {
        let Some(api) = self.known.get(&id).map(|k| k.api.as_str()) else {
            return;
        };
        let key = (api, name.to_string());
        if let Some(previous) = self.named.insert(key.clone(), id) {
            if let Some(p) = self.known.get_mut(&previous) {
                p.names.retain(|n| n != &key);
            }
        }
        if let Some(known) = self.known.get_mut(&id) {
            known.names.push(key);
        }
    }

    /// The session of `id` now holds the request's history (appended, or rewound to where the
    /// two agree and continued).
    pub fn synced(&mut self, id: ConversationId, sig: &Signature) {
        if let Some(k) = self.known.get_mut(&id) {
            k.trail.clone_from(&sig.messages);
        }
    }

    /// The session of `id` was rewound to its first `keep` messages and the request's messages
    /// followed (a request continuing a response the provider holds, which sends only what
    /// follows it).
    pub fn continued(&mut self, id: ConversationId, keep: usize, sig: &Signature) {
        if let Some(k) = self.known.get_mut(&id) {
            k.trail.truncate(keep);
            k.trail.extend_from_slice(&sig.messages);
        }
    }

    /// The reply with `entries` was forwarded to conversation `id` (and goes into its session):
    /// from now on a request carrying it belongs to `id`.
    pub fn replied(&mut self, id: ConversationId, entries: &[Value]) {
        let Some(k) = self.known.get_mut(&id) else {
            return;
        };
        let content = content_fingerprint(entries);
        k.trail.push(content);
        let keys = ReplyKeys::with_content(content, entries);
        for key in &keys.0 {
            let owners = self.owners.entry(*key).or_default();
            if !owners.contains(&id) {
                owners.push(id);
            }
        }
        k.replies.push(keys);
    }

    /// A request assigned to `id` is done (answered, failed, or abandoned).
    pub fn finished(&mut self, id: ConversationId) {
        if let Some(k) = self.known.get_mut(&id) {
            k.in_flight = k.in_flight.saturating_sub(1);
        }
    }

    /// Drop conversation `id` and everything that pointed to it.
    pub fn forget(&mut self, id: ConversationId) {
        let Some(k) = self.known.remove(&id) else {
            return;
        };
        for keys in &k.replies {
            for key in &keys.0 {
                if let Some(owners) = self.owners.get_mut(key) {
                    owners.retain(|o| *o != id);
                    if owners.is_empty() {
                        self.owners.remove(key);
                    }
                }
            }
        }
        for n in &k.names {
            self.named.remove(n);
        }
    }

    fn create(&mut self, api: Api) -> ConversationId {
        self.next_id += 1;
        let id = self.next_id;
        self.known.insert(
            id,
            Known {
                api,
                trail: Vec::new(),
                replies: Vec::new(),
                names: Vec::new(),
                in_flight: 0,
                last_used: 0,
            },
        );
        id
    }

    fn by_name(&mut self, api: Api, name: &str) -> Assignment {
        let id = match self.lookup(api, name) {
            Some(id) => id,
            None => {
                let id = self.create(api);
                self.name(id, name);
                id
            }
        };
        Assignment {
            id,
            by: AssignedBy::Name,
        }
    }

    fn by_history(&mut self, sig: &Signature) -> Assignment {
        if let Some(id) = self.by_reply(sig) {
            return Assignment {
                id,
                by: AssignedBy::Reply,
            };
        }
        // No reply of any conversation: the first request of a conversation, or a retry of one
        // whose earlier requests got no answer. A conversation that already had a reply, or
        // whose first request is still being answered, is another conversation that opened the
        // same way.
        let opening = sig.opening();
        let retried = self
            .known
            .iter()
            .filter(|(_, k)| {
                k.api == sig.api
                    && k.replies.is_empty()
                    && k.in_flight == 0
                    && opening.is_some()
                    && k.opening() == opening
            })
            .max_by_key(|(_, k)| k.last_used)
            .map(|(id, _)| *id);
        match retried {
            Some(id) => Assignment {
                id,
                by: AssignedBy::Retry,
            },
            None => {
                let id = self.create(sig.api);
                // Its opening counts from now: a retry finds it even if this request never
                // reaches its session (the daemon refused it).
                self.synced(id, sig);
                Assignment {
                    id,
                    by: AssignedBy::New,
                }
            }
        }
    }

    /// The conversation that recorded the request's replies. When identical replies went to
    /// more than one (the same model answering the same question twice), the one holding more
    /// of the request's replies wins, then the one agreeing with more of its history, then one
    /// the request extends without rewinding, then the one used last.
    fn by_reply(&self, sig: &Signature) -> Option<ConversationId> {
        let mut recognized: HashMap<ConversationId, usize> = HashMap::new();
        for keys in &sig.assistant {
            let mut holders: Vec<ConversationId> = Vec::new();
            for key in &keys.0 {
                for &id in self.owners.get(key).map(Vec::as_slice).unwrap_or_default() {
                    let Some(k) = self.known.get(&id) else {
                        continue;
                    };
                    let weak = !matches!(key, ReplyKey::Content(_));
                    if k.api != sig.api || (weak && k.opening() != sig.opening()) {
                        continue;
                    }
                    if !holders.contains(&id) {
                        holders.push(id);
                    }
                }
            }
            for id in holders {
                *recognized.entry(id).or_default() += 1;
            }
        }
        recognized
            .into_iter()
            .map(|(id, replies)| {
                let k = &self.known[&id];
                let common = k.common(sig);
                (replies, common, common == k.trail.len(), k.last_used, id)
            })
            .max()
            .map(|(.., id)| id)
    }
}

/// The conversation name a request gives in `X-Soba-Session`, if any.
pub fn session_header(value: Option<&http::HeaderValue>) -> Result<Option<String>, String> {
    let Some(v) = value else {
        return Ok(None);
    };
    let usage = format!(
        "give each conversation its own name of 1 to {MAX_NAME_LEN} bytes without control characters, e.g. `{SESSION_HEADER}: refactor-parser-1`"
    );
    let text = std::str::from_utf8(v.as_bytes())
        .map_err(|_| format!("the {SESSION_HEADER} header is not UTF-8 text; {usage}"))?
        .trim();
    if text.is_empty() || text.len() > MAX_NAME_LEN || text.chars().any(char::is_control) {
        return Err(format!(
            "the {SESSION_HEADER} header {}; {usage}",
            if text.is_empty() {
                "is empty".to_string()
            } else if text.len() > MAX_NAME_LEN {
                format!("is {} bytes long", text.len())
            } else {
                "holds control characters".to_string()
            }
        ));
    }
    Ok(Some(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(api: Api, system: &str, messages: Value) -> Signature {
        let body = match api {
            Api::OpenAiChat => {
                let mut all = vec![json!({"role": "system", "content": system})];
                all.extend(messages.as_array().unwrap().iter().cloned());
                json!({"model": "gpt-4o", "messages": all})
            }
            Api::Anthropic => {
                json!({"model": "claude", "max_tokens": 9, "system": system, "messages": messages})
            }
            Api::OpenAiResponses => {
                json!({"model": "gpt-5", "instructions": system, "input": messages})
            }
        };
        Signature::of(&ChatRequest::parse(api, body.to_string().as_bytes()).unwrap())
    }

    fn openai(messages: Value) -> Signature {
        request(Api::OpenAiChat, "You are a coding agent.", messages)
    }

    fn reply(text: &str) -> Value {
        json!({"type": "message", "role": "assistant", "content": [{"type": "text", "text": text}]})
    }

    /// Assign, sync and record the reply, as the server does for one answered request.
    fn answered(r: &mut Registry, sig: &Signature, name: Option<&str>, text: &str) -> Assignment {
        let a = r.assign(sig, name);
        r.synced(a.id, sig);
        r.replied(a.id, &[reply(text)]);
        r.finished(a.id);
        a
    }

    #[test]
    fn two_interleaved_conversations_with_the_same_opening_stay_apart() {
        let mut r = Registry::new();
        let first = openai(json!([{"role": "user", "content": "fix the parser"}]));
        let a = answered(&mut r, &first, None, "looking at the parser (a)");
        let b = answered(&mut r, &first, None, "looking at the parser (b)");
        assert_eq!((a.by, b.by), (AssignedBy::New, AssignedBy::New));
        assert_ne!(a.id, b.id);
        for turn in 0..3 {
            for (own, other, tag) in [(a, b, "a"), (b, a, "b")] {
                let sig = openai(json!([
                    {"role": "user", "content": "fix the parser"},
                    {"role": "assistant", "content": format!("looking at the parser ({tag})")},
                    {"role": "user", "content": format!("step {turn}")},
                ]));
                let got = r.assign(&sig, None);
                assert_eq!(got.id, own.id, "turn {turn} of {tag}");
                assert_ne!(got.id, other.id);
                assert_eq!(got.by, AssignedBy::Reply);
                r.finished(got.id);
            }
        }
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn a_changed_system_prompt_with_the_same_history_is_the_same_conversation() {
        let mut r = Registry::new();
        let at = |clock: &str, messages: Value| {
            request(Api::Anthropic, &format!("Now: {clock}"), messages)
        };
        let a = answered(
            &mut r,
            &at("10:00", json!([{"role": "user", "content": "hi"}])),
            None,
            "hello",
        );
        let next = at(
            "10:01",
            json!([
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "go on"},
            ]),
        );
        assert_eq!(r.assign(&next, None).id, a.id);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn a_retry_after_no_answer_continues_but_a_repeat_after_an_answer_is_new() {
        let mut r = Registry::new();
        let first = openai(json!([{"role": "user", "content": "hi"}]));
        let a = r.assign(&first, None);
        r.synced(a.id, &first);
        r.finished(a.id); // the upstream failed: no reply recorded
        let retry = r.assign(&first, None);
        assert_eq!(
            retry,
            Assignment {
                id: a.id,
                by: AssignedBy::Retry
            }
        );
        r.synced(a.id, &first);
        r.replied(a.id, &[reply("hello")]);
        r.finished(a.id);
        let again = r.assign(&first, None);
        assert_eq!(
            again.by,
            AssignedBy::New,
            "a second conversation opening alike"
        );
        assert_ne!(again.id, a.id);
    }

    #[test]
    fn a_retry_after_a_first_request_that_never_reached_its_session_continues_it() {
        let mut r = Registry::new();
        let first = openai(json!([{"role": "user", "content": "hi"}]));
        let a = r.assign(&first, None);
        r.finished(a.id); // refused before the session was synced
        assert_eq!(r.assign(&first, None).id, a.id);
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn a_first_request_in_flight_is_not_joined_by_another_opening_alike() {
        let mut r = Registry::new();
        let first = openai(json!([{"role": "user", "content": "hi"}]));
        let a = r.assign(&first, None);
        r.synced(a.id, &first);
        let b = r.assign(&first, None);
        assert_ne!(a.id, b.id, "two agents started at once");
        assert_eq!(b.by, AssignedBy::New);
    }

    #[test]
    fn messages_the_agent_wrote_as_the_assistant_do_not_identify_a_conversation() {
        // Aider opens every run with its repository summary and an assistant "Ok" of its own.
        let mut r = Registry::new();
        let run = |task: &str| {
            openai(json!([
                {"role": "user", "content": "Here is the repository map."},
                {"role": "assistant", "content": "Ok, I won't edit those files."},
                {"role": "user", "content": task},
            ]))
        };
        let a = answered(&mut r, &run("add a flag"), None, "added the flag");
        let b = r.assign(&run("fix the typo"), None);
        assert_eq!(b.by, AssignedBy::New);
        assert_ne!(a.id, b.id);
    }

    #[test]
    fn regenerate_edit_and_drop_last_turn_stay_in_the_conversation() {
        let mut r = Registry::new();
        let first = openai(json!([{"role": "user", "content": "hi"}]));
        let a = answered(&mut r, &first, None, "hello");
        let second = openai(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "write the parser"},
        ]));
        answered(&mut r, &second, None, "here is the parser");
        let regenerate = second.clone();
        let edit = openai(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "write the lexer"},
        ]));
        let dropped_last_turn = openai(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
        ]));
        for sig in [regenerate, edit, dropped_last_turn] {
            let got = r.assign(&sig, None);
            assert_eq!(got.id, a.id);
            r.finished(got.id);
        }
    }

    #[test]
    fn identical_replies_in_two_conversations_go_to_the_one_holding_more_of_the_history() {
        let mut r = Registry::new();
        let first = openai(json!([{"role": "user", "content": "hi"}]));
        // The same model gave both the same first answer.
        let a = answered(&mut r, &first, None, "hello");
        let b = answered(&mut r, &first, None, "hello");
        let turn = |ask: &str| {
            openai(json!([
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": ask},
            ]))
        };
        let x = answered(&mut r, &turn("plan x"), None, "plan for x");
        // The other one continues the conversation that has not moved on, without a rewind.
        let y = r.assign(&turn("plan y"), None);
        r.finished(y.id);
        assert_eq!([x.id, y.id].iter().filter(|&&i| i == a.id).count(), 1);
        assert_eq!([x.id, y.id].iter().filter(|&&i| i == b.id).count(), 1);
        // And the longer history goes where its second reply is.
        let x2 = openai(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "plan x"},
            {"role": "assistant", "content": "plan for x"},
            {"role": "user", "content": "do it"},
        ]));
        assert_eq!(r.assign(&x2, None).id, x.id);
    }

    #[test]
    fn a_resent_reply_without_its_thinking_is_still_found_by_its_tool_call() {
        let mut r = Registry::new();
        let first = request(
            Api::Anthropic,
            "s",
            json!([{"role": "user", "content": "read it"}]),
        );
        let a = r.assign(&first, None);
        r.synced(a.id, &first);
        r.replied(
            a.id,
            &[json!({"type": "message", "role": "assistant", "content": [
                {"type": "thinking", "thinking": "read main", "signature": "sig=="},
                {"type": "tool_call", "id": "toolu_01", "name": "read", "input": {"path": "main.rs"}},
            ]})],
        );
        r.finished(a.id);
        let next = request(
            Api::Anthropic,
            "s",
            json!([
                {"role": "user", "content": "read it"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01", "name": "read", "input": {"path": "main.rs"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "fn main() {}"}]},
            ]),
        );
        assert_eq!(
            r.assign(&next, None),
            Assignment {
                id: a.id,
                by: AssignedBy::Reply
            }
        );
    }

    #[test]
    fn a_reply_text_alone_identifies_only_among_conversations_that_opened_alike() {
        let mut r = Registry::new();
        let a = answered(
            &mut r,
            &openai(json!([{"role": "user", "content": "task one"}])),
            None,
            "Done.",
        );
        // Another conversation whose agent wrote "Done." itself, resent in other blocks, so
        // that it differs in content: not a's.
        let other = openai(json!([
            {"role": "user", "content": "task two"},
            {"role": "assistant", "content": [{"type": "text", "text": " Done"}, {"type": "text", "text": ". "}]},
            {"role": "user", "content": "next"},
        ]));
        assert_ne!(r.assign(&other, None).id, a.id);
    }

    #[test]
    fn an_opening_resent_with_other_whitespace_continues_its_conversation_and_an_edited_one_does_not(
    ) {
        let mut r = Registry::new();
        let first =
            openai(json!([{"role": "user", "content": "Fix the parser.\n\nIt fails on tabs."}]));
        let a = r.assign(&first, None);
        r.synced(a.id, &first);
        // The agent resends the reply without its thinking: only its text finds it, a key that
        // counts for conversations that opened the same way.
        r.replied(
            a.id,
            &[json!({"type": "message", "role": "assistant", "content": [
                {"type": "thinking", "thinking": "the lexer", "signature": "sig=="},
                {"type": "text", "text": "The lexer  splits on spaces only."},
            ]})],
        );
        r.finished(a.id);
        let resent = |opening: &str| {
            openai(json!([
                {"role": "user", "content": opening},
                {"role": "assistant", "content": "The lexer splits\non spaces only. "},
                {"role": "user", "content": "fix it"},
            ]))
        };
        let rewrapped = resent("  Fix the parser.\nIt fails  on\ttabs.\n");
        assert_eq!(rewrapped.opening(), first.opening());
        assert_eq!(
            r.assign(&rewrapped, None),
            Assignment {
                id: a.id,
                by: AssignedBy::Reply
            }
        );
        r.finished(a.id);
        for edited in [
            "Fix the parser.\n\nIt fails on tab.",
            "Fix the parser. It fails on tabs!",
            "Fix the parser.It fails on tabs.",
        ] {
            let sig = resent(edited);
            assert_ne!(sig.opening(), first.opening(), "{edited:?}");
            let got = r.assign(&sig, None);
            assert_eq!(got.by, AssignedBy::New, "{edited:?}");
            r.finished(got.id);
        }
    }

    #[test]
    fn a_tool_call_id_another_server_reuses_does_not_pull_a_request_elsewhere() {
        let mut r = Registry::new();
        let call = |opening: &str| {
            openai(json!([
                {"role": "user", "content": opening},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_0", "content": "src"},
            ]))
        };
        let first = openai(json!([{"role": "user", "content": "list the files"}]));
        let a = r.assign(&first, None);
        r.synced(a.id, &first);
        r.replied(
            a.id,
            &[json!({"type": "message", "role": "assistant", "content": [
                {"type": "tool_call", "id": "call_0", "name": "ls", "input": {"all": true}},
            ]})],
        );
        r.finished(a.id);
        // Another conversation whose reply, with the same id, was never recorded (its stream
        // broke): not a's.
        assert_ne!(r.assign(&call("count the lines"), None).id, a.id);
    }

    #[test]
    fn an_explicit_name_wins_and_separates_identical_conversations() {
        let mut r = Registry::new();
        let first = openai(json!([{"role": "user", "content": "hi"}]));
        let one = answered(&mut r, &first, Some("one"), "hello");
        let two = answered(&mut r, &first, Some("two"), "hello");
        assert_ne!(one.id, two.id);
        assert_eq!(one.by, AssignedBy::Name);
        // Even a request carrying one's reply goes where its name says.
        let next = openai(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "more"},
        ]));
        assert_eq!(r.assign(&next, Some("two")).id, two.id);
        assert_eq!(r.lookup(Api::OpenAiChat, "one"), Some(one.id));
        assert_eq!(r.lookup(Api::Anthropic, "one"), None, "names are per API");
    }

    #[test]
    fn a_name_given_by_the_server_finds_the_conversation_and_forget_drops_it() {
        let mut r = Registry::new();
        let first = openai(json!([{"role": "user", "content": "hi"}]));
        let a = answered(&mut r, &first, None, "hello");
        r.name(a.id, "resp_123");
        assert_eq!(r.lookup(Api::OpenAiChat, "resp_123"), Some(a.id));
        // A name given again moves to its new holder; forgetting that holder drops it.
        let b = answered(&mut r, &first, None, "hello again");
        r.name(b.id, "resp_moved");
        r.name(a.id, "resp_moved");
        assert_eq!(r.lookup(Api::OpenAiChat, "resp_moved"), Some(a.id));
        r.name(b.id, "resp_moved");
        r.forget(a.id);
        assert_eq!(r.lookup(Api::OpenAiChat, "resp_moved"), Some(b.id));
        r.forget(b.id);
        assert_eq!(r.lookup(Api::OpenAiChat, "resp_moved"), None);
        assert!(r.is_empty());
        assert_eq!(r.lookup(Api::OpenAiChat, "resp_123"), None);
        let next = openai(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "more"},
        ]));
        assert_eq!(r.assign(&next, None).by, AssignedBy::New);
        assert!(
            r.owners.is_empty(),
            "no reply points to a forgotten conversation"
        );
    }

    #[test]
    fn a_response_is_known_by_its_items_and_its_id() {
        let mut r = Registry::new();
        let responses = |input: Value| request(Api::OpenAiResponses, "You are Codex.", input);
        let opening = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]});
        let reasoning = json!({"type": "reasoning", "summary": [], "encrypted_content": "enc=="});
        let call = json!({"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "call_1"});
        let first = responses(json!([opening]));
        let a = r.assign(&first, None);
        r.synced(a.id, &first);
        // One reply, one message per output item, as the server announces it.
        for item in [&reasoning, &call] {
            r.replied(a.id, &crate::wire::responses::item_entries(item).unwrap());
        }
        r.name(a.id, "resp_1");
        r.finished(a.id);
        // Another conversation opening the same way.
        let b = r.assign(&first, None);
        assert_eq!(b.by, AssignedBy::New);
        r.finished(b.id);
        // Codex resends the whole input: the items it received tell the conversation.
        let output = json!({"type": "function_call_output", "call_id": "call_1", "output": "ok"});
        let resent = responses(json!([opening, reasoning, call, output]));
        let again = r.assign(&resent, None);
        assert_eq!((again.id, again.by), (a.id, AssignedBy::Reply));
        r.finished(a.id);
        // A request continuing the response names it; only the new items come.
        assert_eq!(r.lookup(Api::OpenAiResponses, "resp_1"), Some(a.id));
        assert_eq!(r.lookup(Api::OpenAiChat, "resp_1"), None);
        let continuing = responses(json!([output]));
        let by_id = r.assign(&continuing, Some("resp_1"));
        assert_eq!((by_id.id, by_id.by), (a.id, AssignedBy::Name));
        r.continued(a.id, 3, &continuing);
        assert_eq!(r.known[&a.id].trail.len(), 4);
        assert_eq!(r.known[&a.id].common(&resent), 4);
    }

    #[test]
    fn the_session_header_takes_a_visible_name_and_says_what_to_send_otherwise() {
        let h = |s: &[u8]| http::HeaderValue::from_bytes(s).unwrap();
        assert_eq!(session_header(None), Ok(None));
        assert_eq!(
            session_header(Some(&h(b" task-7 "))),
            Ok(Some("task-7".into()))
        );
        for bad in [&b"  "[..], &[b'x'; 201][..], &b"caf\xe9"[..], &b"a\tb"[..]] {
            let err = session_header(Some(&h(bad))).unwrap_err();
            assert!(
                err.contains("x-soba-session") && err.contains("e.g."),
                "{err}"
            );
        }
    }
}
