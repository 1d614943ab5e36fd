//! JSON Schemas of the formats SOBA writes, generated from the Rust types. The checked-in
//! copies under `schemas/` are compared with these by `tests/schemas.rs`; regenerate them with
//! `UPDATE_SCHEMAS=1 cargo test --test schemas`.

use schemars::JsonSchema;
use serde_json::Value;

use crate::capsule::CapsuleEntry;
use crate::session::entry::{Entry, SessionHeader};

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

/// Every checked-in schema: file name under `schemas/` and its generator.
pub const SCHEMA_FILES: [(&str, SchemaFn); 3] = [
    ("capsule.schema.json", capsule_schema),
    ("session-entry.schema.json", session_entry_schema),
    ("config.schema.json", crate::config::config_schema),
];

/// The file text of a schema: pretty JSON and a final newline.
pub fn schema_text(schema: &Value) -> String {
    let mut s = serde_json::to_string_pretty(schema).expect("schema serializes");
    s.push('\n');
    s
}
