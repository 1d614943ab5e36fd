//! Every integration test, in one binary: SOBA and its token tables are linked once rather than
//! once per test file, which is most of the build's time and disk.

mod common;
mod loopback;
mod support;

mod accuracy;
mod attach;
mod calibration;
mod capsule_cli;
mod capsule_quality;
mod claude_code_hook;
mod cli;
mod client_model;
mod compaction_progress;
mod crash;
mod daemon_compaction;
mod daemon_races;
mod daemon_rpc;
mod demo;
mod explicit_compact;
mod foreign_compaction;
mod fuzz_regressions;
mod idle_sessions;
mod import;
mod layering;
mod lossless;
mod peer_failures;
mod protocol_schemas;
mod protocol_stress;
mod provider_data;
mod proxy;
mod proxy_responses;
mod proxy_service;
mod redaction;
mod redaction_corpus;
mod redaction_paths;
mod replay;
mod report_render;
mod rewind;
mod schemas;
mod session_config;
mod spec;
mod summarize;
mod transcripts_compaction;
