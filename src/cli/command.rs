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
    /// Convert a Claude Code, Codex, pi or OpenAI-chat transcript into a session log.
    Import(super::import::ImportArgs),
    /// Run a scripted coding session through the whole pipeline and chart it.
    Demo(super::demo::DemoArgs),
    /// Run an agent transcript through SOBA's agent loop and compare its compactions.
    Replay(super::replay::ReplayArgs),
    /// Portable Capsules: export a capsule to `.capsule.md`, load one, list a session's capsules.
    Capsule {
        #[command(subcommand)]
        command: super::capsule::CapsuleCommand,
    },
    /// Move a session's leaf back to an earlier entry by appending a `rewind` entry (nothing is deleted).
    Rewind {
        /// The session log (`.jsonl`) to rewind.
        session: PathBuf,
        /// The entry id to make the leaf again (`soba capsule list` and the log show ids).
        entry: String,
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
        Command::Demo(args) => demo::run(args, &cli.common),
        Command::Replay(args) => replay::run(args, &cli.common),
        Command::Capsule { command } => capsule::run(command, &cli.common),
        Command::Rewind { session, entry } => capsule::rewind(session, entry, &cli.common),
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
