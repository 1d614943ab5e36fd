//! Context Capsules: the model, artifact extraction, the deterministic builder, rendering,
//! and the portable `.capsule.md` format.

pub mod artifacts;
pub mod builder;
pub mod model;

pub use model::*;
pub mod memory;
pub mod portable;
pub mod render;
