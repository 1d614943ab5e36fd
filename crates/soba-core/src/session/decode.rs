//! Reading entries and content blocks in one pass.
//!
//! An entry is one flat JSON object: the entry's own keys (`id`, `parentId`, `ts`, `sourceId`)
//! beside its body's keys, the body told apart by `type`; content blocks are tagged the same
//! way. serde's derived `flatten` and internally tagged enums read such objects by first copying
//! every key and value into an intermediate tree and then reading that tree again; on a long log
//! the copy was most of the load time. These impls read each object once: SOBA writes the
//! entry's own keys and `type` first, so everything after `type` streams straight into the
//! body's own type. Any other key order still reads the same; body keys seen before `type` are
//! held as JSON values until the type is known.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::entry::{ContentBlock, Entry, EntryBody, OpaqueBlock, ProviderFields};

/// A map key, borrowed from the input when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> de::Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

impl<'de> Key<'de> {
    fn feed<K: DeserializeSeed<'de>, E: de::Error>(self, seed: K) -> Result<K::Value, E> {
        match self.0 {
            Cow::Borrowed(s) => seed.deserialize(de::value::BorrowedStrDeserializer::new(s)),
            Cow::Owned(s) => seed.deserialize(s.into_deserializer()),
        }
    }
}

fn set<T, E: de::Error>(slot: &mut Option<T>, field: &'static str, value: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(field));
    }
    *slot = Some(value);
    Ok(())
}

/// Where the value of the key just read comes from: the input itself, or a key held back
/// because it came before `type`.
trait ValueSource<'de> {
    type Error: de::Error;
    fn value<T: Deserialize<'de>>(self) -> Result<T, Self::Error>;
}

impl<'de, A: MapAccess<'de>> ValueSource<'de> for &mut A {
    type Error = A::Error;
    fn value<T: Deserialize<'de>>(self) -> Result<T, A::Error> {
        self.next_value()
    }
}

struct HeldValue<E>(Value, std::marker::PhantomData<E>);

impl<'de, E: de::Error> ValueSource<'de> for HeldValue<E> {
    type Error = E;
    fn value<T: Deserialize<'de>>(self) -> Result<T, E> {
        T::deserialize(self.0).map_err(E::custom)
    }
}

fn hold<E>(v: Value) -> HeldValue<E> {
    HeldValue(v, std::marker::PhantomData)
}

/// The entry's own keys.
#[derive(Default)]
struct EntryKeys {
    id: Option<String>,
    parent_id: Option<Option<String>>,
    ts: Option<String>,
    source_id: Option<Option<String>>,
}

impl EntryKeys {
    /// Read the value of `key` when it is one of the entry's own keys.
    fn take<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
        match key {
            "id" => set(&mut self.id, "id", map.next_value()?)?,
            "parentId" => set(&mut self.parent_id, "parentId", map.next_value()?)?,
            "ts" => set(&mut self.ts, "ts", map.next_value()?)?,
            "sourceId" => set(&mut self.source_id, "sourceId", map.next_value()?)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// The body's keys: those held back from before `type`, then the rest of the object, with the
/// entry's own keys taken out wherever they appear.
struct BodyKeys<'a, A> {
    held: std::vec::IntoIter<(String, Value)>,
    held_value: Option<Value>,
    rest: A,
    entry: &'a mut EntryKeys,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for BodyKeys<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        if let Some((key, value)) = self.held.next() {
            self.held_value = Some(value);
            return seed.deserialize(key.into_deserializer()).map(Some);
        }
        loop {
            let Some(Key(key)) = self.rest.next_key::<Key>()? else {
                return Ok(None);
            };
            if self.entry.take(&key, &mut self.rest)? {
                continue;
            }
            if key == "type" {
                return Err(de::Error::duplicate_field("type"));
            }
            return Key(key).feed(seed).map(Some);
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        match self.held_value.take() {
            Some(v) => seed.deserialize(v).map_err(de::Error::custom),
            None => self.rest.next_value_seed(seed),
        }
    }
}

const ENTRY_TYPES: &[&str] = &[
    "message",
    "tool_result",
    "capsule",
    "checkpoint",
    "file",
    "setting",
    "rewind",
    "skill",
    "intent",
    "turn_complete",
    "compaction",
    "foreign_compaction",
];

fn body<'de, M: MapAccess<'de>>(type_name: &str, keys: M) -> Result<EntryBody, M::Error> {
    let d = de::value::MapAccessDeserializer::new(keys);
    Ok(match type_name {
        "message" => EntryBody::Message(Deserialize::deserialize(d)?),
        "tool_result" => EntryBody::ToolResult(Deserialize::deserialize(d)?),
        "capsule" => {
            let mut c: Box<crate::session::capsule::model::CapsuleEntry> =
                Deserialize::deserialize(d)?;
            (c.quality, c.degraded_reason) =
                crate::session::capsule::model::read_quality(c.quality, c.degraded_reason.take());
            EntryBody::Capsule(c)
        }
        "checkpoint" => EntryBody::Checkpoint(Deserialize::deserialize(d)?),
        "file" => EntryBody::File(Deserialize::deserialize(d)?),
        "setting" => EntryBody::Setting(Deserialize::deserialize(d)?),
        "rewind" => EntryBody::Rewind(Deserialize::deserialize(d)?),
        "skill" => EntryBody::Skill(Deserialize::deserialize(d)?),
        "intent" => EntryBody::Intent(Deserialize::deserialize(d)?),
        "turn_complete" => EntryBody::TurnComplete(Deserialize::deserialize(d)?),
        "compaction" => EntryBody::Compaction(Deserialize::deserialize(d)?),
        "foreign_compaction" => EntryBody::ForeignCompaction(Deserialize::deserialize(d)?),
        other => return Err(de::Error::unknown_variant(other, ENTRY_TYPES)),
    })
}

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EntryVisitor;
        impl<'de> de::Visitor<'de> for EntryVisitor {
            type Value = Entry;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a session log entry: an object with `id`, `ts` and `type`")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
                let mut own = EntryKeys::default();
                let mut held = Vec::new();
                let body = loop {
                    let Some(Key(key)) = map.next_key::<Key>()? else {
                        return Err(de::Error::missing_field("type"));
                    };
                    if own.take(&key, &mut map)? {
                        continue;
                    }
                    if key == "type" {
                        let Key(type_name) = map.next_value()?;
                        let keys = BodyKeys {
                            held: std::mem::take(&mut held).into_iter(),
                            held_value: None,
                            rest: &mut map,
                            entry: &mut own,
                        };
                        break body(&type_name, keys)?;
                    }
                    held.push((key.into_owned(), map.next_value::<Value>()?));
                };
                Ok(Entry {
                    id: own.id.ok_or_else(|| de::Error::missing_field("id"))?,
                    parent_id: own.parent_id.flatten(),
                    ts: own.ts.ok_or_else(|| de::Error::missing_field("ts"))?,
                    source_id: own.source_id.flatten(),
                    body,
                })
            }
        }
        d.deserialize_map(EntryVisitor)
    }
}

#[derive(Clone, Copy)]
enum BlockType {
    Text,
    Thinking,
    ToolCall,
    Image,
}

impl BlockType {
    /// `None` for a type SOBA does not know: such a block is kept whole.
    fn of(name: &str) -> Option<BlockType> {
        Some(match name {
            "text" => BlockType::Text,
            "thinking" => BlockType::Thinking,
            "tool_call" => BlockType::ToolCall,
            "image" => BlockType::Image,
            _ => return None,
        })
    }
}

/// Every key any content block has; which of them count depends on the block's type. The
/// others are the provider's, kept in `extra`.
#[derive(Default)]
struct BlockKeys {
    text: Option<String>,
    thinking: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<Value>,
    media_type: Option<Option<String>>,
    data: Option<Option<String>>,
    extra: ProviderFields,
}

impl BlockKeys {
    /// Read `key`'s value into its field if it belongs to a block of type `t`, into the
    /// provider fields otherwise.
    fn read<'de, S: ValueSource<'de>>(
        &mut self,
        t: BlockType,
        key: &str,
        source: S,
    ) -> Result<(), S::Error> {
        match (t, key) {
            (BlockType::Text, "text") => set(&mut self.text, "text", source.value()?),
            (BlockType::Thinking, "thinking") => {
                set(&mut self.thinking, "thinking", source.value()?)
            }
            (BlockType::ToolCall, "id") => set(&mut self.id, "id", source.value()?),
            (BlockType::ToolCall, "name") => set(&mut self.name, "name", source.value()?),
            (BlockType::ToolCall, "input") => set(&mut self.input, "input", source.value()?),
            (BlockType::Image, "media_type") => {
                set(&mut self.media_type, "media_type", source.value()?)
            }
            (BlockType::Image, "data") => set(&mut self.data, "data", source.value()?),
            _ => match self.extra.insert(key.to_owned(), source.value()?) {
                Some(_) => Err(de::Error::custom(format_args!("duplicate field `{key}`"))),
                None => Ok(()),
            },
        }
    }

    fn finish<E: de::Error>(self, t: BlockType) -> Result<ContentBlock, E> {
        let required = |v: Option<String>, f| v.ok_or_else(|| E::missing_field(f));
        let extra = self.extra;
        Ok(match t {
            BlockType::Text => ContentBlock::Text {
                text: required(self.text, "text")?,
                extra,
            },
            BlockType::Thinking => ContentBlock::Thinking {
                thinking: required(self.thinking, "thinking")?,
                extra,
            },
            BlockType::ToolCall => ContentBlock::ToolCall {
                id: required(self.id, "id")?,
                name: required(self.name, "name")?,
                input: Box::new(self.input.ok_or_else(|| E::missing_field("input"))?),
                extra,
            },
            BlockType::Image => ContentBlock::Image {
                media_type: self.media_type.flatten(),
                data: self.data.flatten(),
                extra,
            },
        })
    }
}

/// The rest of a block of unknown type: every key, in order, as JSON values.
fn opaque<'de, A: MapAccess<'de>>(
    mut fields: Map<String, Value>,
    map: &mut A,
) -> Result<ContentBlock, A::Error> {
    while let Some(Key(key)) = map.next_key::<Key>()? {
        let value: Value = map.next_value()?;
        if fields.contains_key(key.as_ref()) {
            return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
        }
        fields.insert(key.into_owned(), value);
    }
    OpaqueBlock::new(fields)
        .map(ContentBlock::Opaque)
        .ok_or_else(|| de::Error::custom("an opaque block needs a string `type`"))
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct BlockVisitor;
        impl<'de> de::Visitor<'de> for BlockVisitor {
            type Value = ContentBlock;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a content block: an object with `type`")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ContentBlock, A::Error> {
                let mut keys = BlockKeys::default();
                let mut held: Vec<(String, Value)> = Vec::new();
                let mut block_type = None;
                while let Some(Key(key)) = map.next_key::<Key>()? {
                    if key == "type" {
                        if block_type.is_some() {
                            return Err(de::Error::duplicate_field("type"));
                        }
                        let Key(name) = map.next_value()?;
                        match BlockType::of(&name) {
                            Some(t) => block_type = Some(t),
                            None => {
                                let mut fields: Map<String, Value> = held.into_iter().collect();
                                fields.insert("type".into(), Value::String(name.into_owned()));
                                return opaque(fields, &mut map);
                            }
                        }
                        continue;
                    }
                    match block_type {
                        Some(t) => keys.read(t, &key, &mut map)?,
                        None => held.push((key.into_owned(), map.next_value()?)),
                    }
                }
                let t = block_type.ok_or_else(|| de::Error::missing_field("type"))?;
                for (key, value) in held {
                    keys.read(t, &key, hold::<A::Error>(value))?;
                }
                keys.finish(t)
            }
        }
        d.deserialize_map(BlockVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::entry::EntryBody;
    use proptest::prelude::*;
    use serde_json::json;

    /// Every entry type, written and read back, in SOBA's own key order.
    #[test]
    fn every_entry_type_reads_back_what_was_written() {
        for (n, body) in crate::session::entry::tests::one_of_each()
            .into_iter()
            .enumerate()
        {
            let e = Entry::new(format!("e{n}"), Some("p".into()), body);
            let line = serde_json::to_string(&e).unwrap();
            assert_eq!(serde_json::from_str::<Entry>(&line).unwrap(), e, "{line}");
            let value = serde_json::to_value(&e).unwrap();
            assert_eq!(serde_json::from_value::<Entry>(value).unwrap(), e);
        }
    }

    /// Logs written before `local` existed call a capsule built with no model `degraded`.
    #[test]
    fn an_old_degraded_capsule_without_a_failure_reads_as_local() {
        let capsule = crate::session::entry::tests::one_of_each()
            .into_iter()
            .find(|b| matches!(b, EntryBody::Capsule(_)))
            .unwrap();
        let line = |quality: &str, reason: Option<&str>| {
            let mut v = serde_json::to_value(Entry::new("e1", None, capsule.clone())).unwrap();
            v["quality"] = json!(quality);
            match reason {
                Some(r) => v["degradedReason"] = json!(r),
                None => {
                    v.as_object_mut().unwrap().remove("degradedReason");
                }
            }
            let e: Entry = serde_json::from_value(v).unwrap();
            let EntryBody::Capsule(c) = e.body else {
                unreachable!()
            };
            (c.quality.as_str(), c.degraded_reason)
        };
        let no_model = "no summarization model configured; built locally from the log";
        assert_eq!(line("degraded", Some(no_model)), ("local", None));
        assert_eq!(line("degraded", None), ("local", None));
        assert_eq!(line("local", None), ("local", None));
        assert_eq!(
            line("degraded", Some("summarizer timed out after 15000 ms")),
            (
                "degraded",
                Some("summarizer timed out after 15000 ms".to_string())
            ),
            "a fallback after a model failed stays degraded"
        );
        assert_eq!(line("model", None), ("model", None));
    }

    fn reorder(v: &Value, rotate: usize) -> Value {
        match v {
            Value::Object(m) => {
                let mut pairs: Vec<(String, Value)> = m
                    .iter()
                    .map(|(k, v)| (k.clone(), reorder(v, rotate)))
                    .collect();
                if !pairs.is_empty() {
                    let n = rotate % pairs.len();
                    pairs.rotate_left(n);
                }
                Value::Object(pairs.into_iter().collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(|v| reorder(v, rotate)).collect()),
            other => other.clone(),
        }
    }

    proptest! {
        /// Hand-edited or foreign logs may put `type` anywhere, even last.
        #[test]
        fn key_order_does_not_change_what_is_read(which in 0usize..12, rotate in 0usize..16) {
            let bodies = crate::session::entry::tests::one_of_each();
            let e = Entry::new("e1", Some("p".into()), bodies[which % bodies.len()].clone());
            let shuffled = reorder(&serde_json::to_value(&e).unwrap(), rotate);
            let line = serde_json::to_string(&shuffled).unwrap();
            prop_assert_eq!(serde_json::from_str::<Entry>(&line).unwrap(), e);
        }
    }

    #[test]
    fn entry_keys_after_the_body_are_still_the_entrys() {
        let line = r#"{"type":"message","role":"user","id":"a","content":[{"text":"hi","type":"text"}],"ts":"t","parentId":null,"sourceId":"s"}"#;
        let e: Entry = serde_json::from_str(line).unwrap();
        assert_eq!(e.id, "a");
        assert_eq!(e.ts, "t");
        assert_eq!(e.parent_id, None);
        assert_eq!(e.source_id.as_deref(), Some("s"));
        assert!(
            matches!(&e.body, EntryBody::Message(m) if m.content == vec![ContentBlock::text("hi")])
        );
    }

    fn error(v: Value) -> String {
        serde_json::from_value::<Entry>(v.clone())
            .expect_err("must not read")
            .to_string()
            + " | "
            + &serde_json::from_str::<Entry>(&v.to_string())
                .expect_err("must not read")
                .to_string()
    }

    #[test]
    fn bad_entries_are_refused_with_the_field_named() {
        let ok = json!({"id":"a","ts":"t","type":"message","role":"user","content":[]});
        assert!(serde_json::from_value::<Entry>(ok.clone()).is_ok());
        let without = |k: &str| {
            let mut v = ok.clone();
            v.as_object_mut().unwrap().remove(k);
            v
        };
        assert!(error(without("id")).contains("missing field `id`"));
        assert!(error(without("ts")).contains("missing field `ts`"));
        assert!(error(without("type")).contains("missing field `type`"));
        assert!(error(without("role")).contains("missing field `role`"));
        let mut unknown = ok.clone();
        unknown["type"] = json!("telegram");
        assert!(error(unknown).contains("unknown variant `telegram`"));
        let dup = r#"{"id":"a","ts":"t","type":"message","role":"user","content":[],"id":"b"}"#;
        assert!(serde_json::from_str::<Entry>(dup)
            .unwrap_err()
            .to_string()
            .contains("duplicate field `id`"));
        let dup_type =
            r#"{"id":"a","ts":"t","type":"message","role":"user","content":[],"type":"file"}"#;
        assert!(serde_json::from_str::<Entry>(dup_type)
            .unwrap_err()
            .to_string()
            .contains("duplicate field `type`"));
        assert!(error(json!([1, 2])).contains("invalid type"));
        let mut bad_type = ok.clone();
        bad_type["type"] = json!(7);
        assert!(error(bad_type).contains("invalid type"));
    }

    #[test]
    fn content_blocks_read_in_any_key_order_and_keep_foreign_keys() {
        let blocks: Vec<ContentBlock> = serde_json::from_value(json!([
            {"text": "a", "type": "text", "name": 5},
            {"type": "thinking", "thinking": "b"},
            {"input": {"z": 1, "a": [2]}, "name": "bash", "type": "tool_call", "id": "c1", "text": 3},
            {"type": "image"},
            {"type": "image", "media_type": "image/png", "data": "AAA"}
        ]))
        .unwrap();
        let fields = |pairs: Value| -> ProviderFields {
            pairs.as_object().unwrap().clone().into_iter().collect()
        };
        assert_eq!(
            blocks,
            vec![
                ContentBlock::Text {
                    text: "a".into(),
                    extra: fields(json!({"name": 5}))
                },
                ContentBlock::thinking("b"),
                ContentBlock::ToolCall {
                    id: "c1".into(),
                    name: "bash".into(),
                    input: Box::new(json!({"z": 1, "a": [2]})),
                    extra: fields(json!({"text": 3}))
                },
                ContentBlock::image(None, None),
                ContentBlock::image(Some("image/png".into()), Some("AAA".into())),
            ]
        );
        // Key order inside a tool input is kept: it is the agent's own JSON.
        if let ContentBlock::ToolCall { input, .. } = &blocks[2] {
            assert_eq!(input.to_string(), r#"{"z":1,"a":[2]}"#);
        }
    }

    #[test]
    fn provider_fields_of_a_known_block_are_written_back_after_its_own() {
        let line = r#"{"type":"thinking","thinking":"Let me look.","signature":"EqQBCkYIBRgCKkD+/=","cache_control":{"type":"ephemeral","ttl":"5m"}}"#;
        let block: ContentBlock = serde_json::from_str(line).unwrap();
        assert!(matches!(&block, ContentBlock::Thinking { extra, .. }
            if extra.get("signature") == Some(&json!("EqQBCkYIBRgCKkD+/="))));
        assert_eq!(serde_json::to_string(&block).unwrap(), line);
        // Fields before `type` come back too, after the block's own.
        let early = r#"{"cache_control":{"type":"ephemeral"},"type":"text","text":"hi"}"#;
        let block: ContentBlock = serde_json::from_str(early).unwrap();
        assert_eq!(
            serde_json::to_string(&block).unwrap(),
            r#"{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}"#
        );
    }

    #[test]
    fn a_block_of_unknown_type_is_kept_whole_in_its_key_order() {
        for line in [
            r#"{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}"#,
            r#"{"id":"srvtoolu_1","type":"server_tool_use","name":"web_search","input":{"query":"rust"}}"#,
            r#"{"data":"x","type":"video","nested":{"b":1,"a":[1.5,null,true]}}"#,
        ] {
            let block: ContentBlock = serde_json::from_str(line).unwrap();
            assert!(matches!(&block, ContentBlock::Opaque(_)), "{line}");
            assert_eq!(serde_json::to_string(&block).unwrap(), line);
            let value: Value = serde_json::from_str(line).unwrap();
            let from_value: ContentBlock = serde_json::from_value(value).unwrap();
            assert_eq!(from_value, block);
        }
    }

    #[test]
    fn bad_content_blocks_are_refused_with_the_field_named() {
        let err = |v: Value| {
            serde_json::from_value::<ContentBlock>(v)
                .unwrap_err()
                .to_string()
        };
        assert!(err(json!({"type": "text"})).contains("missing field `text`"));
        assert!(err(json!({"text": "a"})).contains("missing field `type`"));
        assert!(err(json!({"type": "tool_call", "id": "c", "name": "n"}))
            .contains("missing field `input`"));
        assert!(err(json!({"type": 5})).contains("invalid type"));
        assert!(err(json!({"text": 5, "type": "text"})).contains("invalid type"));
        assert!(err(json!({"type": "text", "text": 5})).contains("invalid type"));
        let dup = r#"{"type":"text","text":"a","text":"b"}"#;
        assert!(serde_json::from_str::<ContentBlock>(dup)
            .unwrap_err()
            .to_string()
            .contains("duplicate field `text`"));
        let dup_extra = r#"{"type":"text","text":"a","signature":"x","signature":"y"}"#;
        assert!(serde_json::from_str::<ContentBlock>(dup_extra)
            .unwrap_err()
            .to_string()
            .contains("duplicate field `signature`"));
        let dup_opaque = r#"{"type":"redacted_thinking","data":"x","data":"y"}"#;
        assert!(serde_json::from_str::<ContentBlock>(dup_opaque)
            .unwrap_err()
            .to_string()
            .contains("duplicate field `data`"));
        let dup_type = r#"{"type":"text","text":"a","type":"video"}"#;
        assert!(serde_json::from_str::<ContentBlock>(dup_type)
            .unwrap_err()
            .to_string()
            .contains("duplicate field `type`"));
    }
}
