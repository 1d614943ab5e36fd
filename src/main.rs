use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use soba::cli::{self, CommonArgs};

/// SOBA keeps coding-agent sessions inside their context window: append-only session logs,
/// exact token budgets, and Context Capsules at a barrier before the next inference.
#[derive(Debug, Parser)]
#[command(name = "soba", version, about, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Token budget of a session: effective tokens against the hard and soft limits.
    Budget { session: PathBuf },
    /// The model input the next preflight would send.
    Context { session: PathBuf },
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
    Flight { session: Option<PathBuf> },
    /// Compact a session now: a capsule of the old history plus the retained recent tail.
    Compact {
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
    Import(cli::import::ImportArgs),
    /// Follow a live Claude Code, Codex or pi transcript through the shared daemon and print
    /// its budget as it changes.
    Attach(cli::attach::AttachArgs),
    /// Run a scripted coding session through the whole pipeline and chart it.
    Demo(cli::demo::DemoArgs),
    /// Run an agent transcript through SOBA's agent loop and compare its compactions.
    Replay(cli::replay::ReplayArgs),
    /// Portable Capsules: export a capsule to `.capsule.md`, load one, list a session's capsules.
    Capsule {
        #[command(subcommand)]
        command: cli::capsule::CapsuleCommand,
    },
    /// Trust a workspace to choose its summarizer (endpoint, key variable) in .soba/config.json.
    Trust(cli::trust::TrustArgs),
    /// Move a session's leaf back to an earlier entry by appending a `rewind` entry (nothing is deleted).
    Rewind { session: PathBuf, entry: String },
    /// Serve the OpenAI and Anthropic chat APIs locally, compacting every conversation that
    /// passes through on its way to the real provider.
    Proxy(cli::proxy::ProxyArgs),
    /// Agent hooks: `soba hook claude-code` (run by Claude Code), `soba hook install claude-code`.
    Hook {
        #[command(subcommand)]
        command: cli::hook::HookCommand,
    },
    /// Reliability harness commands.
    #[command(hide = true)]
    Debug {
        #[command(subcommand)]
        command: cli::debug::DebugCommand,
    },
}

fn main() -> ExitCode {
    // Output piped into `head` and closed early ends the process quietly, as in other tools.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Budget { session } => cli::inspect::budget(session, &cli.common),
        Command::Context { session } => cli::inspect::context(session, &cli.common),
        Command::Serve { standalone, daemon } => {
            use cli::serve::ServeMode;
            let mode = match (standalone, daemon) {
                (true, _) => ServeMode::Standalone,
                (_, true) => ServeMode::Daemon,
                _ => ServeMode::Shared,
            };
            cli::serve::serve(mode, &cli.common)
        }
        Command::Flight { session } => cli::serve::flight(session.as_deref(), &cli.common),
        Command::Compact {
            session,
            instructions,
            mirror,
        } => cli::compact::compact(session, instructions.clone(), *mirror, &cli.common),
        Command::Import(args) => cli::import::run(args, &cli.common),
        Command::Attach(args) => cli::attach::run(args, &cli.common),
        Command::Demo(args) => cli::demo::run(args, &cli.common),
        Command::Replay(args) => cli::replay::run(args, &cli.common),
        Command::Capsule { command } => cli::capsule::run(command, &cli.common),
        Command::Trust(args) => cli::trust::run(args, &cli.common),
        Command::Rewind { session, entry } => cli::capsule::rewind(session, entry, &cli.common),
        Command::Proxy(args) => cli::proxy::run(args, &cli.common),
        Command::Hook { command } => cli::hook::run(command, &cli.common),
        Command::Debug { command } => cli::debug::run(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
