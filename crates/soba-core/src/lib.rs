//! SOBA's engine: append-only session logs, exact token counts and budgets, configuration,
//! Context Capsules and compaction. Pure and synchronous: no async runtime, no HTTP, no command
//! line, no printing. The daemon, the proxy and the command line (the `soba` crate) are a thin
//! shell over it.

pub mod budget;
pub mod capsule;
pub mod compaction;
pub mod config;
pub mod files;
pub mod limits;
pub mod redact;
pub mod session;
pub mod tokens;
pub mod tool_mapping;
pub mod trust;
pub mod util;
pub mod window;
