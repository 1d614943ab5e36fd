//! `soba proxy`: SOBA's compaction for any agent that talks to an OpenAI- (Chat Completions or
//! Responses) or Anthropic-style API. An incoming chat request is mapped onto its conversation's
//! session (the resent history matched by content, what is new appended), the preflight barrier
//! runs, and the upstream request carries the model input instead of the full history. Provider
//! formats stop here.
//!
//! - [`wire`]: provider requests, replies and errors ↔ session entries and the model input.
//! - [`responses`]: the same for OpenAI's Responses API (input items, output items, events).
//! - [`identity`]: which conversation a request belongs to: the replies it carries, its
//!   opening, or the name it gives (`X-Soba-Session`, or the response id it continues).
//! - [`overflow`]: which upstream errors are context overflows, and the figures they give.
//! - [`conversation`]: which incoming message became which entries; what to append, where to
//!   rewind, which messages go out as the agent sent them.
//! - [`rpc`]: the proxy as an agent client of the daemon (the one writer of every log).
//! - [`server`]: the HTTP shell (hyper server, reqwest upstream, SSE pass-through).
//! - [`service`]: connection handling for a proxy left running: limits, timeouts, the token.

pub mod conversation;
pub mod identity;
pub mod overflow;
pub mod rpc;
pub mod server;
pub mod service;
