//! SOBA: context compaction for coding agents.
//!
//! The core (budget, triggers, cut points, ROI, capsules, the model-input view) is pure and
//! synchronous; the daemon, HTTP clients and file watching are a thin async shell over it.

pub mod accuracy;
pub mod attach;
pub mod budget;
pub mod capsule;
pub mod cli;
pub mod compaction;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod eval;
pub mod files;
pub mod flight;
pub mod hook;
pub mod import;
pub mod inspect;
pub mod limits;
pub mod preview;
pub mod proxy;
pub mod redact;
pub mod replay;
pub mod report;
pub mod schemas;
pub mod session;
pub mod summarize;
pub mod tokens;
pub mod tool_mapping;
pub mod trust;
pub mod util;
pub mod window;
