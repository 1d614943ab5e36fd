//! `soba capsule export|load|list` and `soba rewind`: glue from the command line to the
//! session log and the Portable Capsule format.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Subcommand;
use serde::Serialize;

use super::{print_json, warn_load, CommonArgs};
use soba_core::capsule::handoff::{export_capsule, list_capsules, load_capsule};
use soba_core::capsule::portable::{read_capsule_file, write_capsule_file};
use soba_core::config::Durability;
use soba_core::session::entry::{HeaderTag, SessionHeader, LOG_FORMAT_VERSION};
use soba_core::session::log::{read_session, SessionLog};
use soba_core::session::rewind::rewind_session;
use soba_core::util::human_tokens;

#[derive(Debug, Subcommand)]
pub enum CapsuleCommand {
    /// Record an intentional capsule of the current state (a hand-off); the session's model
    /// input does not change.
    Create {
        /// The session log (`.jsonl`).
        session: PathBuf,
        /// A short title for the capsule, shown by `soba capsule list`.
        title: String,
    },
    /// Write a capsule of a session to a `.capsule.md` file (secrets redacted).
    Export {
        /// The session log (`.jsonl`) holding the capsule.
        session: PathBuf,
        /// Checkpoint id of the capsule (`ck_…`); `soba capsule list` shows them.
        checkpoint: String,
        /// Output file, conventionally `NAME.capsule.md`.
        path: PathBuf,
        /// Replace PATH when it exists (it may hold notes added by hand).
        #[arg(long)]
        force: bool,
    },
    /// Load a `.capsule.md` file into a session: it becomes the latest capsule of the model input.
    Load {
        /// The session log (`.jsonl`) to load into (with --new: to create).
        session: PathBuf,
        /// The `.capsule.md` file to load.
        path: PathBuf,
        /// Start a new session log at SESSION (which must not exist) with the capsule as its
        /// first entry.
        #[arg(long)]
        new: bool,
        /// Workspace root of the new session (default: the current directory).
        #[arg(long, value_name = "DIR", requires = "new")]
        workspace: Option<PathBuf>,
    },
    /// The capsules of a session: id, title, trigger, quality, time and tokens.
    List {
        /// The session log (`.jsonl`).
        session: PathBuf,
    },
}

pub fn run(command: &CapsuleCommand, common: &CommonArgs) -> anyhow::Result<()> {
    match command {
        CapsuleCommand::Create { session, title } => super::compact::create(session, title, common),
        CapsuleCommand::Export {
            session,
            checkpoint,
            path,
            force,
        } => export(session, checkpoint, path, *force, common),
        CapsuleCommand::Load {
            session,
            path,
            new,
            workspace,
        } => {
            let new_session = new.then_some(workspace.as_deref());
            load(session, path, new_session, common)
        }
        CapsuleCommand::List { session } => list(session, common),
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportReport {
    pub checkpoint_id: String,
    pub path: String,
    pub bytes: usize,
    pub redactions: soba_core::redact::RedactionReport,
}

fn export(
    session_path: &Path,
    checkpoint: &str,
    out: &Path,
    force: bool,
    common: &CommonArgs,
) -> anyhow::Result<()> {
    if out.exists() && !force {
        bail!(
            "{} already exists; pass --force to replace it, or choose another path",
            out.display()
        );
    }
    let (session, report) = read_session(session_path)?;
    warn_load(session_path, &report);
    let exported = export_capsule(&session, checkpoint)?;
    write_capsule_file(out, &exported.text)?;
    let r = ExportReport {
        checkpoint_id: checkpoint.to_string(),
        path: out.display().to_string(),
        bytes: exported.text.len(),
        redactions: exported.redactions,
    };
    if common.json {
        return print_json(&r);
    }
    outln!("wrote {} ({} bytes)", r.path, r.bytes);
    if let Some(s) = r.redactions.summary() {
        outln!("{s}");
    }
    Ok(())
}

/// Appends from the command line are rare and small: always make them durable.
const CLI_DURABILITY: Durability = Durability::Fsync;

/// Header of a session started by loading a capsule into it.
fn new_session_header(workspace: Option<&Path>) -> anyhow::Result<SessionHeader> {
    let dir = match workspace {
        Some(w) => w.to_path_buf(),
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let dir = std::fs::canonicalize(&dir)
        .with_context(|| format!("workspace {}: not a directory that exists", dir.display()))?;
    Ok(SessionHeader {
        kind: HeaderTag::Session,
        version: LOG_FORMAT_VERSION,
        id: soba_core::util::new_id("s_"),
        workspace: dir.display().to_string(),
        created_at: soba_core::util::now_rfc3339(),
        model: None,
        source: None,
    })
}

/// `new_session`: `Some(workspace)` to create the session log instead of opening it.
fn load(
    session_path: &Path,
    capsule_path: &Path,
    new_session: Option<Option<&Path>>,
    common: &CommonArgs,
) -> anyhow::Result<()> {
    let parsed = read_capsule_file(capsule_path)?;
    let mut log = match new_session {
        Some(workspace) => {
            SessionLog::create(session_path, new_session_header(workspace)?, CLI_DURABILITY)?
        }
        None => {
            let (log, report) = SessionLog::open(session_path, CLI_DURABILITY)?;
            warn_load(session_path, &report);
            log
        }
    };
    let shown = std::fs::canonicalize(capsule_path).unwrap_or_else(|_| capsule_path.to_path_buf());
    let r = load_capsule(&mut log, &parsed, &shown.display().to_string())?;
    if common.json {
        return print_json(&r);
    }
    for i in &parsed.ignored {
        errln!(
            "note: {}:{}: not part of the capsule, ignored: {}",
            capsule_path.display(),
            i.line,
            i.text
        );
    }
    outln!(
        "loaded {} as capsule {} (entry {}); it opens the model input from now on",
        r.loaded_from,
        r.checkpoint_id,
        r.entry_id
    );
    Ok(())
}

fn list(session_path: &Path, common: &CommonArgs) -> anyhow::Result<()> {
    let (session, report) = read_session(session_path)?;
    warn_load(session_path, &report);
    let rows = list_capsules(&session);
    if common.json {
        return print_json(&serde_json::json!({ "capsules": rows }));
    }
    if rows.is_empty() {
        outln!("no capsules");
        return Ok(());
    }
    for r in &rows {
        let mark = if r.current {
            "*"
        } else if r.on_branch {
            " "
        } else {
            "~"
        };
        let line = format!(
            "{mark} {}  {}  {}/{}{}  {} → {} tokens  {}",
            r.checkpoint_id,
            r.ts,
            r.trigger,
            r.quality,
            if r.origin == "loaded" {
                " (loaded)"
            } else {
                ""
            },
            human_tokens(r.tokens_before),
            human_tokens(r.tokens_after),
            r.title.as_deref().unwrap_or("")
        );
        outln!("{}", line.trim_end());
    }
    outln!("* opens the model input now  ~ on another branch");
    Ok(())
}

pub fn rewind(session_path: &Path, to: &str, common: &CommonArgs) -> anyhow::Result<()> {
    let (mut log, report) = SessionLog::open(session_path, CLI_DURABILITY)?;
    warn_load(session_path, &report);
    let r = rewind_session(&mut log, to)?;
    if common.json {
        return print_json(&r);
    }
    outln!(
        "rewound {} to {} (was {}); the model input is now {} message{}",
        session_path.display(),
        r.to,
        r.from.as_deref().unwrap_or("empty"),
        r.messages,
        if r.messages == 1 { "" } else { "s" }
    );
    Ok(())
}
