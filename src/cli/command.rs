//! The `soba` command tree (what clap parses) and the dispatch from a parsed command to the
//! command's module. Lives in the library so tests and `soba completions` see the same tree.

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

use super::CommonArgs;

/// SOBA keeps coding-agent sessions inside their context window: append-only session logs,
/// exact token budgets, and Context Capsules at a barrier before the next inference.
#[derive(Debug, Parser)]
#[command(name = "soba", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Token budget of a session: effective tokens against the hard and soft limits.
    Budget {
        /// The session log (`.jsonl`) to measure.
        session: PathBuf,
    },
    /// The model input the next preflight would send.
    Context {
        /// The session log (`.jsonl`) whose next model input to print.
        session: PathBuf,
    },
    /// JSON-RPC over stdio for editors and agents, through the user's shared daemon.
    Serve {
        /// Serve this client in-process instead of through the shared daemon.
        #[arg(long, conflicts_with = "daemon")]
        standalone: bool,
        /// Run as the shared daemon (started by `soba serve`).
        #[arg(long, hide = true)]
        daemon: bool,
    },
    /// Flight records of compactions: of a session log, or of the current folder's workspace.
    Flight {
        /// A session log; without it, the flight records of the current folder's workspace.
        session: Option<PathBuf>,
    },
    /// Compact a session now: a capsule of the old history plus the retained recent tail.
    Compact {
        /// The session log (`.jsonl`) to compact; the capsule is appended to it.
        session: PathBuf,
        /// What the capsule should focus on.
        #[arg(long)]
        instructions: Option<String>,
        /// Also mirror the capsule into the workspace's Project Memory (.soba/memory/), if it
        /// is a validated model capsule.
        #[arg(long)]
        mirror: bool,
    },
    /// Convert a Claude Code, Codex, pi, OpenAI-chat, SWE-agent, aider or Copilot CLI
    /// transcript into a session log.
    Import(super::import::ImportArgs),
    /// Follow a live Claude Code, Codex or pi transcript through the shared daemon and print
    /// its budget as it changes.
    Attach(super::attach::AttachArgs),
    /// Run a scripted coding session through the whole pipeline and chart it.
    Demo(super::demo::DemoArgs),
    /// Run an agent transcript through SOBA's agent loop and compare its compactions.
    Replay(super::replay::ReplayArgs),
    /// Portable Capsules: export a capsule to `.capsule.md`, load one, list a session's capsules.
    Capsule {
        #[command(subcommand)]
        command: super::capsule::CapsuleCommand,
    },
    /// Trust a workspace to choose its summarizer (endpoint, key variable) in .soba/config.json.
    Trust(super::trust::TrustArgs),
    /// Move a session's leaf back to an earlier entry by appending a `rewind` entry (nothing is deleted).
    Rewind {
        /// The session log (`.jsonl`) to rewind.
        session: PathBuf,
        /// The entry id to make the leaf again (`soba capsule list` and the log show ids).
        entry: String,
    },
    /// Serve the OpenAI and Anthropic chat APIs locally, compacting every conversation that
    /// passes through on its way to the real provider.
    Proxy(super::proxy::ProxyArgs),
    /// Agent hooks: `soba hook claude-code` (run by Claude Code), `soba hook install claude-code`.
    Hook {
        #[command(subcommand)]
        command: super::hook::HookCommand,
    },
    /// Print a shell completion script: `soba completions bash > ~/.local/share/bash-completion/completions/soba`.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Reliability harness commands.
    #[command(hide = true)]
    Debug {
        #[command(subcommand)]
        command: super::debug::DebugCommand,
    },
}

/// Run a parsed command.
pub fn run(cli: &Cli) -> anyhow::Result<()> {
    use super::*;
    match &cli.command {
        Command::Budget { session } => inspect::budget(session, &cli.common),
        Command::Context { session } => inspect::context(session, &cli.common),
        Command::Serve { standalone, daemon } => {
            use serve::ServeMode;
            let mode = match (standalone, daemon) {
                (true, _) => ServeMode::Standalone,
                (_, true) => ServeMode::Daemon,
                _ => ServeMode::Shared,
            };
            serve::serve(mode, &cli.common)
        }
        Command::Flight { session } => serve::flight(session.as_deref(), &cli.common),
        Command::Compact {
            session,
            instructions,
            mirror,
        } => compact::compact(session, instructions.clone(), *mirror, &cli.common),
        Command::Import(args) => import::run(args, &cli.common),
        Command::Attach(args) => attach::run(args, &cli.common),
        Command::Demo(args) => demo::run(args, &cli.common),
        Command::Replay(args) => replay::run(args, &cli.common),
        Command::Capsule { command } => capsule::run(command, &cli.common),
        Command::Trust(args) => trust::run(args, &cli.common),
        Command::Rewind { session, entry } => capsule::rewind(session, entry, &cli.common),
        Command::Proxy(args) => proxy::run(args, &cli.common),
        Command::Hook { command } => hook::run(command, &cli.common),
        Command::Completions { shell } => {
            completions(*shell, &mut std::io::stdout().lock());
            Ok(())
        }
        Command::Debug { command } => debug::run(command),
    }
}

/// Write the completion script of the whole `soba` command tree for `shell`.
pub fn completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "soba", out);
}
