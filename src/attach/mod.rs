//! Following a live agent transcript (Claude Code, Codex, pi) into a SOBA session.
//!
//! - [`tail`] reads what was appended to a transcript since the last look, and notices when
//!   the file was replaced, truncated or rewritten.
//! - [`follow`] feeds those bytes through the importers' incremental readers
//!   ([`crate::import::stream`]) and turns the settled entries into session entries, skipping
//!   any record already in the session, so that starting over is idempotent.
//! - [`discover`] finds the newest transcript of a workspace in each agent's home.
//! - [`liveness`] tells whether an agent still holds its transcript open.
//! - [`agent_settings`] reads what the agent's own settings files say about its default model
//!   and when it compacts itself.
//! - [`integration`] tells whether the agent hands its compactions to SOBA (the Claude Code
//!   hooks, the pi extension).
//!
//! The daemon drives these (`soba/attach` in `daemon/attach.rs`); nothing here does network or
//! async IO.

pub mod agent_settings;
pub mod discover;
pub mod follow;
pub mod integration;
pub mod liveness;
pub mod tail;
