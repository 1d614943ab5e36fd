//! JSON Schemas of the formats SOBA writes and of its JSON-RPC protocol, generated from the
//! Rust types. The checked-in copies under `schemas/` are compared with these by
//! `tests/it/schemas.rs`; regenerate them with `UPDATE_SCHEMAS=1 cargo test --test it schemas::`.
//! The SDKs' types are generated from `schemas/protocol/` in turn
//! (`sdk/ts/scripts/gen-types.mjs`, `sdk/python/scripts/gen_types.py`).

use std::collections::{BTreeSet, HashSet};

use schemars::generate::SchemaSettings;
use schemars::JsonSchema;
use serde_json::Value;

use crate::daemon::protocol::{self as rpc, method, notification};
use soba_core::session::capsule::model::CapsuleEntry;
use soba_core::session::entry::{Entry, SessionHeader};

/// One line of a session log: the header (line 1) or an entry (every later line).
#[derive(JsonSchema)]
#[serde(untagged)]
#[schemars(
    title = "SOBA session log line",
    description = "Line 1 of a session log is the header; every later line is one entry."
)]
#[allow(dead_code)] // Exists for its schema only.
enum LogLine {
    Header(SessionHeader),
    Entry(Entry),
}

/// Schema of a `capsule` entry's payload (`schemas/capsule.schema.json`).
pub fn capsule_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(CapsuleEntry)).expect("schema serializes")
}

/// Schema of a session log line (`schemas/session-entry.schema.json`).
pub fn session_entry_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(LogLine)).expect("schema serializes")
}

/// A function that generates one schema.
pub type SchemaFn = fn() -> Value;

/// Schema of what a client sends: optional fields may be left out.
pub fn params_schema<T: JsonSchema>() -> Value {
    let schema = SchemaSettings::draft2020_12()
        .into_generator()
        .into_root_schema_for::<T>();
    serde_json::to_value(schema).expect("schema serializes")
}

/// Schema of what the daemon sends: a field it always writes is required, even when null.
pub fn result_schema<T: JsonSchema>() -> Value {
    let schema = SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<T>();
    serde_json::to_value(schema).expect("schema serializes")
}

/// `soba/session/append` params: the entry schema without the daemon-written types.
fn append_params_schema() -> Value {
    let mut schema = params_schema::<rpc::AppendParams>();
    let daemon_written: HashSet<&str> = crate::daemon::actor::DAEMON_WRITTEN
        .iter()
        .map(|(ty, _)| *ty)
        .collect();
    if let Some(variants) = schema
        .pointer_mut("/$defs/AppendedEntry/oneOf")
        .and_then(Value::as_array_mut)
    {
        variants.retain(|v| {
            let ty = v.pointer("/properties/type/const").and_then(Value::as_str);
            !ty.is_some_and(|t| daemon_written.contains(t))
        });
    }
    prune_unused_defs(&mut schema);
    schema
}

/// Drop `$defs` no `$ref` reaches from the root any more.
fn prune_unused_defs(schema: &mut Value) {
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                if let Some(r) = map.get("$ref").and_then(Value::as_str) {
                    if let Some(name) = r.strip_prefix("#/$defs/") {
                        out.push(name.to_string());
                    }
                }
                map.iter()
                    .filter(|(k, _)| k.as_str() != "$defs")
                    .for_each(|(_, v)| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let Some(defs) = schema.get("$defs").cloned() else {
        return;
    };
    let mut reached = BTreeSet::new();
    let mut todo = Vec::new();
    refs(schema, &mut todo);
    while let Some(name) = todo.pop() {
        if reached.insert(name.clone()) {
            if let Some(def) = defs.get(&name) {
                refs(def, &mut todo);
            }
        }
    }
    if let Some(Value::Object(defs)) = schema.get_mut("$defs") {
        defs.retain(|name, _| reached.contains(name));
    }
}

/// The schemas of one request method.
pub struct MethodSchemas {
    pub method: &'static str,
    pub params: SchemaFn,
    pub result: SchemaFn,
}

const fn m(method: &'static str, params: SchemaFn, result: SchemaFn) -> MethodSchemas {
    MethodSchemas {
        method,
        params,
        result,
    }
}

/// Every request method's params and result schema. `tests/it/schemas.rs` checks that the list
/// covers every method the server dispatches.
pub const PROTOCOL_METHODS: &[MethodSchemas] = &[
    m(
        method::SESSION_OPEN,
        params_schema::<rpc::SessionOpenParams>,
        result_schema::<rpc::SessionOpenResult>,
    ),
    m(
        method::SESSION_APPEND,
        append_params_schema,
        result_schema::<rpc::AppendResult>,
    ),
    m(
        method::PREFLIGHT,
        params_schema::<rpc::PreflightParams>,
        result_schema::<rpc::PreflightResult>,
    ),
    m(
        method::TURN_COMPLETE,
        params_schema::<rpc::TurnCompleteParams>,
        result_schema::<rpc::TurnCompleteResult>,
    ),
    m(
        method::CHECKPOINT,
        params_schema::<rpc::CheckpointParams>,
        result_schema::<rpc::CheckpointResult>,
    ),
    m(
        method::OVERFLOW,
        params_schema::<rpc::OverflowParams>,
        result_schema::<rpc::OverflowResult>,
    ),
    m(
        method::CANCEL,
        params_schema::<rpc::SessionParams>,
        result_schema::<rpc::CancelResult>,
    ),
    m(
        method::REWIND,
        params_schema::<rpc::RewindParams>,
        result_schema::<rpc::RewindResult>,
    ),
    m(
        method::SESSION_CLOSE,
        params_schema::<rpc::SessionParams>,
        result_schema::<rpc::SessionCloseResult>,
    ),
    m(
        method::BUDGET,
        params_schema::<rpc::BudgetParams>,
        result_schema::<rpc::BudgetReport>,
    ),
    m(
        method::CONTEXT,
        params_schema::<rpc::ContextParams>,
        result_schema::<rpc::ContextResult>,
    ),
    m(
        method::COMPACT,
        params_schema::<rpc::CompactParams>,
        result_schema::<soba_core::compaction::CompactionResult>,
    ),
    m(
        method::AUTO_COMPACT,
        params_schema::<rpc::AutoCompactParams>,
        result_schema::<rpc::AutoCompactResult>,
    ),
    m(
        method::SESSIONS,
        params_schema::<rpc::SessionsParams>,
        result_schema::<rpc::SessionsResult>,
    ),
    m(
        method::FLIGHT,
        params_schema::<rpc::FlightParams>,
        result_schema::<rpc::FlightResult>,
    ),
    m(
        method::CAPSULE_CREATE,
        params_schema::<rpc::CapsuleCreateParams>,
        result_schema::<rpc::CapsuleCreateResult>,
    ),
    m(
        method::CAPSULE_EXPORT,
        params_schema::<rpc::CapsuleExportParams>,
        result_schema::<rpc::CapsuleExportResult>,
    ),
    m(
        method::CAPSULE_LOAD,
        params_schema::<rpc::CapsuleLoadParams>,
        result_schema::<rpc::CapsuleLoadResult>,
    ),
    m(
        method::CAPSULE_LIST,
        params_schema::<rpc::CapsuleListParams>,
        result_schema::<rpc::CapsuleListResult>,
    ),
    m(
        method::ATTACH,
        params_schema::<rpc::AttachParams>,
        result_schema::<rpc::AttachResult>,
    ),
    m(
        method::PREVIEW,
        params_schema::<rpc::PreviewParams>,
        result_schema::<rpc::PreviewResult>,
    ),
];

/// The connection handshake, answered by the frame reader before `initialize` rather than by
/// the service: `soba serve`, `soba proxy` and `soba attach` send it themselves, so it is no
/// SDK method. Its schemas are under `schemas/protocol/handshake/`.
pub const HANDSHAKE_METHODS: &[MethodSchemas] = &[m(
    rpc::CLIENT_HELLO,
    params_schema::<rpc::HelloParams>,
    result_schema::<rpc::HelloResult>,
)];

/// Requests the daemon sends to a client that offered them, under `schemas/protocol/client/`.
/// Their params are what the daemon writes and their result what the client answers, so the
/// strictness of each side is the other way round from the daemon's own methods.
pub const CLIENT_METHODS: &[MethodSchemas] = &[m(
    rpc::client_method::SUMMARIZE,
    result_schema::<rpc::SummarizeParams>,
    params_schema::<rpc::SummarizeResult>,
)];

/// The offer a client makes at `initialize` (`capabilities.experimental.soba.summarize`).
pub const SUMMARIZE_CAPABILITY_FILE: &str = "protocol/client/summarize.capability.schema.json";

/// Every custom notification's params schema.
pub const PROTOCOL_NOTIFICATIONS: &[(&str, SchemaFn)] = &[
    (
        notification::BUDGET_CHANGED,
        result_schema::<rpc::BudgetReport>,
    ),
    (
        notification::COMPACTION,
        result_schema::<rpc::CompactionNotice>,
    ),
    (
        notification::SESSION_CLOSED,
        result_schema::<rpc::SessionClosedNotice>,
    ),
];

/// `soba/session/open` → `session.open` (the file-name stem of its schemas).
pub fn protocol_stem(name: &str) -> String {
    name.strip_prefix("soba/").unwrap_or(name).replace('/', ".")
}

/// Path under `schemas/` of a method's params or result schema (`part` is `params` or
/// `result`), or of a notification's params (`part` is `notification`).
pub fn protocol_file(name: &str, part: &str) -> String {
    if CLIENT_METHODS.iter().any(|m| m.method == name) {
        return format!("protocol/client/{}.{part}.schema.json", protocol_stem(name));
    }
    if HANDSHAKE_METHODS.iter().any(|m| m.method == name) {
        return format!(
            "protocol/handshake/{}.{part}.schema.json",
            protocol_stem(name)
        );
    }
    format!("protocol/{}.{part}.schema.json", protocol_stem(name))
}

/// Every protocol schema: its path under `schemas/` and its text-ready value, titled after
/// the method so that each file stands alone.
pub fn protocol_schemas() -> Vec<(String, Value)> {
    fn titled(mut schema: Value, title: String, description: Option<String>) -> Value {
        if let Value::Object(map) = &mut schema {
            let old_description = map.remove("description");
            let rest = std::mem::take(map);
            map.insert("$schema".into(), rest["$schema"].clone());
            map.insert("title".into(), Value::String(title));
            if let Some(d) = description.map(Value::String).or(old_description) {
                map.insert("description".into(), d);
            }
            map.extend(
                rest.into_iter()
                    .filter(|(k, _)| k != "$schema" && k != "title"),
            );
        }
        schema
    }
    let mut out = Vec::new();
    for m in PROTOCOL_METHODS
        .iter()
        .chain(HANDSHAKE_METHODS)
        .chain(CLIENT_METHODS)
    {
        out.push((
            protocol_file(m.method, "params"),
            titled((m.params)(), format!("{} params", m.method), None),
        ));
        out.push((
            protocol_file(m.method, "result"),
            titled((m.result)(), format!("{} result", m.method), None),
        ));
    }
    out.push((
        SUMMARIZE_CAPABILITY_FILE.to_string(),
        titled(
            params_schema::<rpc::SummarizeCapability>(),
            "capabilities.experimental.soba.summarize".to_string(),
            None,
        ),
    ));
    for (name, generate) in PROTOCOL_NOTIFICATIONS {
        out.push((
            protocol_file(name, "notification"),
            titled(
                generate(),
                format!("{name} notification params"),
                Some(format!(
                    "Params of the `{name}` notification the daemon sends."
                )),
            ),
        ));
    }
    out
}

/// Every checked-in schema: file name under `schemas/` and its generator.
pub const SCHEMA_FILES: [(&str, SchemaFn); 3] = [
    ("capsule.schema.json", capsule_schema),
    ("session-entry.schema.json", session_entry_schema),
    ("config.schema.json", soba_core::config::config_schema),
];

/// The file text of a schema: pretty JSON and a final newline.
pub fn schema_text(schema: &Value) -> String {
    let mut s = serde_json::to_string_pretty(schema).expect("schema serializes");
    s.push('\n');
    s
}
