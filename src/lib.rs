//! SOBA: context compaction for coding agents.
//!
//! The engine (budget, triggers, cut points, ROI, capsules, the model-input view) is the
//! `soba-core` crate, pure and synchronous; this crate is the shell over it: the daemon, the
//! proxy, HTTP clients, file watching, transcript import and the command line.

pub mod accuracy;
pub mod attach;
pub mod cli;
pub mod daemon;
pub mod demo;
pub mod eval;
pub mod flight;
pub mod hook;
pub mod import;
pub mod inspect;
pub mod preview;
pub mod proxy;
pub mod replay;
pub mod report;
pub mod schemas;
pub mod summarize;
pub mod wire;
