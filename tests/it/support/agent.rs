//! A session log on disk driven the way an agent host drives the compaction barrier
//! (`compaction::run::Barrier`): messages, tool calls and turns appended one entry at a time,
//! preflight before each inference, explicit compacts, with the local capsule builder or a
//! summarizer.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Instant;

use serde_json::json;
use soba::summarize::generate;
use soba::summarize::summarizer::Summarizer;
use soba_core::budget::Budget;
use soba_core::compaction::plan::Plan;
use soba_core::compaction::run::commit;
use soba_core::compaction::run::{Barrier, Preflight};
use soba_core::compaction::CompactionResult;
use soba_core::config::{Config, ConfigFile, Durability, Overrides};
use soba_core::session::entry::*;
use soba_core::session::log::SessionLog;
use soba_core::session::view::{ModelMessage, ModelView};
use soba_core::tool_mapping::ToolMapping;
use tokio_util::sync::CancellationToken;

/// contextWindow 65000, maxOutputTokens 8000 → hard limit 48808, soft limit 39046.
pub const WINDOW_65K: &str =
    r#"{"model":{"name":"test","contextWindow":65000,"maxOutputTokens":8000}}"#;

/// The configuration of one config file with this text.
pub fn config(json: &str) -> Config {
    let file = ConfigFile::parse("test.json", json).expect("valid test config");
    Config::resolve(&[file], None, &Overrides::default()).expect("config resolves")
}

/// Text of about `tokens` tokens.
pub fn filler(tokens: usize) -> String {
    " lorem".repeat(tokens)
}

pub struct Agent {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
    pub log: SessionLog,
    pub config: Config,
    pub mapping: ToolMapping,
    pub runtime: tokio::runtime::Runtime,
    /// Entries appended so far; entry ids are `x1`, `x2`, …
    pub n: usize,
}

/// A copy of an agent's configuration, for a [`Barrier`] that is used between calls that change
/// the agent's log.
pub struct Settings {
    pub config: Config,
    pub mapping: ToolMapping,
}

impl Settings {
    pub fn barrier(&self) -> Barrier<'_> {
        Barrier {
            config: &self.config,
            mapping: &self.mapping,
        }
    }
}

impl Agent {
    /// A new session under [`WINDOW_65K`].
    pub fn new() -> Agent {
        Agent::with(config(WINDOW_65K))
    }

    /// A new session under `config`.
    pub fn with(config: Config) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let header = SessionHeader {
            kind: HeaderTag::Session,
            version: LOG_FORMAT_VERSION,
            id: "s".into(),
            workspace: "/ws".into(),
            created_at: soba_core::util::now_rfc3339(),
            model: None,
            source: None,
        };
        let log = SessionLog::create(&path, header, Durability::Flush).unwrap();
        Agent {
            dir,
            path,
            log,
            config,
            mapping: ToolMapping::default(),
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            n: 0,
        }
    }

    pub fn push(&mut self, body: EntryBody) -> String {
        self.n += 1;
        let id = format!("x{}", self.n);
        let parent = self.log.session().leaf_id().map(str::to_string);
        self.log
            .append(Entry::new(id.clone(), parent, body))
            .unwrap();
        id
    }

    pub fn message(&mut self, role: Role, content: Vec<ContentBlock>) -> String {
        self.push(EntryBody::Message(MessageEntry {
            role,
            content,
            usage: None,
            model: None,
            synthetic: false,
        }))
    }

    pub fn user(&mut self, tokens: usize) -> String {
        let text = format!("request {}:{}", self.n, filler(tokens));
        self.message(Role::User, vec![ContentBlock::text(text)])
    }

    pub fn assistant(&mut self, tokens: usize) -> String {
        self.message(Role::Assistant, vec![ContentBlock::text(filler(tokens))])
    }

    /// One assistant message with these tool calls: (call id, tool name, input).
    pub fn call(&mut self, calls: &[(&str, &str, serde_json::Value)]) -> String {
        let content = calls
            .iter()
            .map(|(id, name, input)| ContentBlock::ToolCall {
                id: (*id).into(),
                name: (*name).into(),
                input: Box::new(input.clone()),
                extra: Default::default(),
            })
            .collect();
        self.message(Role::Assistant, content)
    }

    /// The result of a tool call, of about `tokens` tokens.
    pub fn result(&mut self, call_id: &str, name: &str, tokens: usize) -> String {
        self.push(EntryBody::ToolResult(ToolResultEntry {
            call_id: call_id.into(),
            tool_name: Some(name.into()),
            content: vec![ContentBlock::text(filler(tokens))],
            is_error: false,
            exit_code: Some(0),
        }))
    }

    /// An assistant tool call and its result of about `tokens` tokens.
    pub fn tool(
        &mut self,
        name: &str,
        input: serde_json::Value,
        tokens: usize,
    ) -> (String, String) {
        let call_id = format!("call{}", self.n);
        let call = self.call(&[(&call_id, name, input)]);
        let result = self.result(&call_id, name, tokens);
        (call, result)
    }

    /// A turn: user prompt, a file read, an edit, an answer: about `tokens` tokens.
    pub fn turn(&mut self, tokens: usize) {
        self.user(tokens / 4);
        let k = self.n;
        self.tool(
            "Read",
            json!({"file_path": format!("/ws/src/f{k}.rs")}),
            tokens / 4,
        );
        self.tool(
            "Edit",
            json!({"file_path": format!("/ws/src/f{k}.rs"), "old_string": "a", "new_string": "b"}),
            tokens / 4,
        );
        self.assistant(tokens / 4);
    }

    /// A copy of the configuration, for a barrier used across changes to the log.
    pub fn settings(&self) -> Settings {
        Settings {
            config: self.config.clone(),
            mapping: self.mapping.clone(),
        }
    }

    /// Effective tokens of the model input at the leaf.
    pub fn effective(&self) -> u64 {
        let s = self.log.session();
        let view = ModelView::build(s, s.leaf());
        let (breakdown, anchor) = (view.breakdown(s), view.usage_anchor(s));
        Budget::measure(
            self.config.limits(),
            breakdown,
            anchor,
            s.calibration(),
            s.unseen_at(s.leaf(), anchor),
        )
        .effective_tokens
    }

    pub fn preflight(&mut self) -> Preflight {
        let b = Barrier {
            config: &self.config,
            mapping: &self.mapping,
        };
        b.preflight(&mut self.log).unwrap()
    }

    /// Generate with `summarizer` (or, with `None`, the local builder, as
    /// `Barrier::run_local` does) and commit.
    pub fn run(&mut self, plan: &Plan, summarizer: Option<&dyn Summarizer>) -> CompactionResult {
        let started = Instant::now();
        let generated = self.runtime.block_on(generate(
            plan,
            summarizer,
            CancellationToken::new(),
            &|_| {},
        ));
        let duration_ms = started.elapsed().as_millis() as u64;
        commit(&mut self.log, plan, generated, false, duration_ms).unwrap()
    }

    /// Preflight as a host does before one inference: run any compaction it asks for (with
    /// `summarizer`, or locally), then ask again, until input is handed out or refused. Returns
    /// the compactions that ran.
    pub fn preflight_through(
        &mut self,
        summarizer: Option<&dyn Summarizer>,
    ) -> (Vec<CompactionResult>, Preflight) {
        let mut results = Vec::new();
        // A barrier that needed more than a few rounds would be the loop under test.
        for _ in 0..4 {
            match self.preflight() {
                Preflight::Compact(plan) => results.push(self.run(&plan, summarizer)),
                p @ Preflight::Ready { .. } => {
                    if let Preflight::Ready {
                        skipped: Some(s), ..
                    } = &p
                    {
                        results.push(s.clone());
                    }
                    return (results, p);
                }
                p @ Preflight::Failed(_) => return (results, p),
            }
        }
        panic!("preflight did not settle within 4 rounds: a compaction loop");
    }

    /// An explicit compact (`/compact [instructions]`), run with `summarizer` or locally.
    pub fn explicit(
        &mut self,
        instructions: Option<&str>,
        summarizer: Option<&dyn Summarizer>,
    ) -> CompactionResult {
        let plan = Barrier {
            config: &self.config,
            mapping: &self.mapping,
        }
        .explicit(&mut self.log, instructions.map(str::to_string))
        .unwrap();
        match plan {
            Ok(plan) => self.run(&plan, summarizer),
            Err(r) => r,
        }
    }

    pub fn capsules(&self) -> usize {
        self.log
            .session()
            .entries()
            .iter()
            .filter(|e| e.as_capsule().is_some())
            .count()
    }

    /// The model input at the leaf.
    pub fn input(&self) -> Vec<ModelMessage> {
        let s = self.log.session();
        ModelView::build(s, s.leaf()).messages(s)
    }

    /// The entry ids of the model input at the leaf.
    pub fn input_ids(&self) -> Vec<String> {
        self.input()
            .into_iter()
            .filter_map(|m| m.entry_id)
            .collect()
    }
}
