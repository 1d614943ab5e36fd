//! Context Capsules: the model, artifact extraction, the deterministic builder, rendering,
//! the portable `.capsule.md` format, and hand-offs between sessions.

pub mod artifacts;
pub mod builder;
pub mod decisions;
pub mod findings;
pub mod handoff;
pub mod intent;
// The data types and their model rendering live below the session log, which stores them;
// these re-exports keep the old paths.
pub use crate::session::capsule::model;

pub use model::*;
pub mod memory;
pub mod milestones;
pub mod portable;
pub use crate::session::capsule::render;
pub mod requests;
pub mod shell;
pub mod work;
