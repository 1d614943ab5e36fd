//! The daemon: a JSON-RPC server (LSP base protocol) that owns live sessions.
//!
//! - [`protocol`]: every `soba/*` name, parameter, result and error code, in one place.
//! - [`server`]: the tower-lsp-server front end, one instance per connected client.
//! - [`framing`]: the connection's frame reader in front of it: bad frames are answered and
//!   skipped, and the connection goes on.
//! - [`registry`]: workspaces → sessions, the active session per workspace, event fan-out,
//!   idle sessions closed past `daemon.maxIdleSessions` and opened again on use.
//! - [`memory`]: memory closed sessions freed, handed back to the OS.
//! - [`actor`]: one task per session, the only writer of its log.
//! - [`connection`]: a connection's own config files and API keys (`soba/client/hello`).
//! - [`client_model`]: the agent's own model as summarizer, through the client that offered
//!   it (`soba/summarize`).
//! - [`socket`]: the per-user Unix socket shared by every `soba serve`, and the stdio relay.
//! - [`watcher`]: file changes under a workspace root, recorded as `file` entries.
//! - [`flight`]: append-only per-workspace records of every compaction operation.
//! - [`attach`]: `soba/attach` and discovery: live agent transcripts followed into sessions.
//! - [`control`]: who compacts a session (SOBA, or the followed agent itself), in words.

pub mod actor;
pub mod attach;
pub mod client_model;
pub mod connection;
pub mod control;
pub mod followed;
pub mod framing;
pub mod heap_trim;
pub mod paths;
pub mod protocol;
pub mod registry;
pub mod server;
pub mod socket;
pub mod watcher;
