//! Context Capsules: the model, artifact extraction, the deterministic builder, rendering,
//! the portable `.capsule.md` format, and hand-offs between sessions.

pub mod artifacts;
pub mod builder;
pub mod decisions;
pub mod handoff;
pub mod intent;
pub mod model;

pub use model::*;
pub mod memory;
pub mod milestones;
pub mod portable;
pub mod render;
pub mod requests;
pub mod shell;
pub mod work;
