//! Building Context Capsules: artifact extraction, the deterministic builder, the portable
//! `.capsule.md` format, Project Memory and hand-offs between sessions. The capsule's data
//! types and its model rendering live below the session log, which stores them
//! ([`crate::session::capsule`]).

pub mod artifacts;
pub mod builder;
pub mod current;
pub mod decisions;
pub mod findings;
pub mod handoff;
pub mod intent;
pub mod milestones;
pub mod portable;
pub mod project_memory;
pub mod requests;
pub mod shell;
pub mod work;
