//! Agent hooks: small programs an agent runs at its own lifecycle events. Pure logic here (what
//! the payload means, what to answer, how the agent's settings change); reading stdin, files
//! and writing settings happens in `crate::cli::hook`.

pub mod claude_code;
pub mod install;
