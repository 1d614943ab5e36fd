//! `soba capsule export|load|list` and `soba rewind`: glue from the command line to the
//! session log and the Portable Capsule format.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use clap::Subcommand;
use serde::Serialize;

use super::{human_tokens, print_json, warn_load, CommonArgs};
use crate::capsule::portable::{
    read_capsule_file, write, write_capsule_file, Exported, Parsed, PortableCapsule,
};
use crate::capsule::CapsuleEntry;
use crate::config::Durability;
use crate::session::entry::{
    Entry, EntryBody, HeaderTag, RewindEntry, SessionHeader, LOG_FORMAT_VERSION,
};
use crate::session::log::{read_session, SessionLog};
use crate::session::view::ModelView;
use crate::session::Session;

#[derive(Debug, Subcommand)]
pub enum CapsuleCommand {
    /// Record an intentional capsule of the current state (a hand-off); the session's model
    /// input does not change.
    Create { session: PathBuf, title: String },
    /// Write a capsule of a session to a `.capsule.md` file (secrets redacted).
    Export {
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
        session: PathBuf,
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
    List { session: PathBuf },
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

/// The capsule entry with this checkpoint id, or an error listing the ones there are.
pub fn find_capsule<'a>(
    session: &'a Session,
    checkpoint: &str,
) -> anyhow::Result<(&'a Entry, &'a CapsuleEntry)> {
    let mut ids = Vec::new();
    for e in session.entries() {
        if let Some(c) = e.as_capsule() {
            if c.checkpoint_id == checkpoint {
                return Ok((e, c));
            }
            ids.push(c.checkpoint_id.as_str());
        }
    }
    if ids.is_empty() {
        bail!("no capsule `{checkpoint}`: this session has no capsules yet");
    }
    let hint = crate::util::did_you_mean(checkpoint, &ids)
        .map(|c| format!(" Did you mean `{c}`?"))
        .unwrap_or_default();
    bail!(
        "no capsule `{checkpoint}` in this session.{hint} Its capsules: {}",
        ids.join(", ")
    )
}

/// The `.capsule.md` text of a capsule of `session`.
pub fn export_capsule(session: &Session, checkpoint: &str) -> anyhow::Result<Exported> {
    let (entry, capsule) = find_capsule(session, checkpoint)?;
    let h = &session.header;
    Ok(write(&PortableCapsule::from_entry(
        capsule,
        &entry.ts,
        Some(&h.workspace),
        Some(&h.id),
    )))
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportReport {
    pub checkpoint_id: String,
    pub path: String,
    pub bytes: usize,
    pub redactions: crate::redact::RedactionReport,
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
    println!("wrote {} ({} bytes)", r.path, r.bytes);
    if let Some(s) = r.redactions.summary() {
        println!("{s}");
    }
    Ok(())
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadReport {
    pub checkpoint_id: String,
    pub entry_id: String,
    pub title: Option<String>,
    pub loaded_from: String,
    pub source_checkpoint_id: String,
    /// Lines of the file that are not part of the capsule (notes, unknown sections).
    pub ignored_lines: Vec<usize>,
}

/// Append a parsed capsule file to a session as a capsule with `origin: loaded`, after the
/// current leaf, so that it is the latest capsule of the model input.
pub fn load_capsule(
    log: &mut SessionLog,
    parsed: &Parsed,
    path: &str,
) -> anyhow::Result<LoadReport> {
    let checkpoint_id = crate::util::new_id("ck_");
    let capsule = parsed.capsule.to_loaded_entry(checkpoint_id.clone(), path);
    let entry_id = crate::util::new_id("e_");
    let parent = log.session().leaf_id().map(str::to_string);
    log.append(Entry::new(
        entry_id.clone(),
        parent,
        EntryBody::Capsule(Box::new(capsule)),
    ))?;
    Ok(LoadReport {
        checkpoint_id,
        entry_id,
        title: parsed.capsule.title.clone(),
        loaded_from: path.to_string(),
        source_checkpoint_id: parsed.capsule.checkpoint_id.clone(),
        ignored_lines: parsed.ignored.iter().map(|i| i.line).collect(),
    })
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
        id: crate::util::new_id("s_"),
        workspace: dir.display().to_string(),
        created_at: crate::util::now_rfc3339(),
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
        eprintln!(
            "note: {}:{}: not part of the capsule, ignored: {}",
            capsule_path.display(),
            i.line,
            i.text
        );
    }
    println!(
        "loaded {} as capsule {} (entry {}); it opens the model input from now on",
        r.loaded_from, r.checkpoint_id, r.entry_id
    );
    Ok(())
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleRow {
    pub checkpoint_id: String,
    pub entry_id: String,
    pub title: Option<String>,
    pub trigger: String,
    pub quality: String,
    pub origin: String,
    pub ts: String,
    pub tokens_before: u64,
    pub tokens_after: u64,
    /// On the branch of the current leaf.
    pub on_branch: bool,
    /// The capsule that opens the model input now.
    pub current: bool,
}

/// Every capsule of the session, in log order.
pub fn list_capsules(session: &Session) -> Vec<CapsuleRow> {
    let leaf = session.leaf();
    let current = leaf.and_then(|l| session.capsule_on_path(l));
    session
        .entries()
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let c = e.as_capsule()?;
            Some(CapsuleRow {
                checkpoint_id: c.checkpoint_id.clone(),
                entry_id: e.id.clone(),
                title: c.title.clone(),
                trigger: c.trigger.as_str().into(),
                quality: c.quality.as_str().into(),
                origin: match c.origin {
                    crate::capsule::Origin::Session => "session".into(),
                    crate::capsule::Origin::Loaded => "loaded".into(),
                },
                ts: e.ts.clone(),
                tokens_before: c.tokens.before,
                tokens_after: c.tokens.after,
                on_branch: leaf.is_some_and(|l| session.is_ancestor(i, l)),
                current: current == Some(i),
            })
        })
        .collect()
}

fn list(session_path: &Path, common: &CommonArgs) -> anyhow::Result<()> {
    let (session, report) = read_session(session_path)?;
    warn_load(session_path, &report);
    let rows = list_capsules(&session);
    if common.json {
        return print_json(&serde_json::json!({ "capsules": rows }));
    }
    if rows.is_empty() {
        println!("no capsules");
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
        println!("{}", line.trim_end());
    }
    println!("* opens the model input now  ~ on another branch");
    Ok(())
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RewindReport {
    pub rewind_entry_id: String,
    pub from: Option<String>,
    pub to: String,
    /// Messages of the model input at the new leaf.
    pub messages: usize,
}

/// Move the leaf of the session to entry `to` by appending a `rewind` entry after the
/// current leaf. Nothing is deleted; the abandoned branch stays in the log.
pub fn rewind_session(log: &mut SessionLog, to: &str) -> anyhow::Result<RewindReport> {
    let session = log.session();
    if session.index_of(to).is_none() {
        let ids: Vec<&str> = session.entries().iter().map(|e| e.id.as_str()).collect();
        let hint = crate::util::did_you_mean(to, &ids)
            .map(|c| format!(" Did you mean `{c}`?"))
            .unwrap_or_default();
        return Err(anyhow!(
            "no entry `{to}` in {}.{hint} Entry ids are in the log (`soba context --json` shows those of the model input)",
            log.path().display()
        ));
    }
    let from = session.leaf_id().map(str::to_string);
    let id = crate::util::new_id("e_");
    log.append(Entry::new(
        id.clone(),
        from.clone(),
        EntryBody::Rewind(RewindEntry { to: to.to_string() }),
    ))
    .context("appending the rewind entry")?;
    let session = log.session();
    let messages = ModelView::build(session, session.leaf())
        .messages(session)
        .len();
    Ok(RewindReport {
        rewind_entry_id: id,
        from,
        to: to.to_string(),
        messages,
    })
}

pub fn rewind(session_path: &Path, to: &str, common: &CommonArgs) -> anyhow::Result<()> {
    let (mut log, report) = SessionLog::open(session_path, CLI_DURABILITY)?;
    warn_load(session_path, &report);
    let r = rewind_session(&mut log, to)?;
    if common.json {
        return print_json(&r);
    }
    println!(
        "rewound {} to {} (was {}); the model input is now {} message{}",
        session_path.display(),
        r.to,
        r.from.as_deref().unwrap_or("empty"),
        r.messages,
        if r.messages == 1 { "" } else { "s" }
    );
    Ok(())
}
