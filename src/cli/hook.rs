//! `soba hook claude-code` (Claude Code runs it with the hook JSON on stdin) and
//! `soba hook install claude-code` (writes the hooks into Claude Code's settings).
//!
//! A hook must never break Claude Code: an event SOBA has nothing for ends with exit 0 and no
//! output; a fault (unreadable stdin, a missing transcript) prints one `soba hook: …` line on
//! stderr and exits 1, which Claude Code reports without blocking anything. Exit 2 (which
//! blocks) is never used.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};
use clap::{Subcommand, ValueEnum};

use super::CommonArgs;
use crate::daemon::paths::Paths;
use crate::hook::claude_code::{self, HookAction, HookInput, MAX_CONTEXT_CHARS};
use crate::hook::install;
use crate::import::transcript::import_str;
use crate::import::{Format, ImportOptions, ImportResult};
use soba_core::session::entry::{Entry, EntryBody, ForeignCompactionEntry};
use soba_core::session::log::SessionLog;

/// Most bytes read from stdin: a hook payload is a few hundred.
const MAX_INPUT_BYTES: u64 = 1 << 20;
/// `sourceId` of the entries the `PreCompact` hook records.
pub const PRE_COMPACT_SOURCE: &str = "hook:claude-code:PreCompact";

#[derive(Debug, Clone, Subcommand)]
pub enum HookCommand {
    /// Claude Code's hook: reads the hook JSON on stdin. After a compaction (`SessionStart`,
    /// source `compact`) prints SOBA's capsule as `additionalContext`; on `PreCompact` records
    /// the trigger and instructions.
    ClaudeCode,
    /// Write SOBA's hooks into the agent's settings (`~/.claude/settings.json`, or
    /// `$CLAUDE_CONFIG_DIR/settings.json`).
    Install {
        /// The agent whose settings get SOBA's hooks (`claude-code`).
        agent: HookAgent,
        /// The project's `.claude/settings.json` (in the current folder) instead of the user's.
        #[arg(long)]
        project: bool,
        /// Remove SOBA's hooks (and nothing else).
        #[arg(long)]
        uninstall: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HookAgent {
    ClaudeCode,
}

pub fn run(command: &HookCommand, common: &CommonArgs) -> anyhow::Result<()> {
    match command {
        HookCommand::ClaudeCode => {
            let answer = (|| {
                let mut text = String::new();
                std::io::stdin()
                    .take(MAX_INPUT_BYTES)
                    .read_to_string(&mut text)
                    .map_err(|e| anyhow!("cannot read the hook input on stdin: {e}"))?;
                let paths = Paths::from_env()?;
                claude_code_hook(&text, &paths, common)
            })();
            match answer {
                Ok(Some(out)) => println!("{out}"),
                Ok(None) => {}
                Err(e) => return Err(hook_failure(&e).into()),
            }
            Ok(())
        }
        HookCommand::Install {
            agent: HookAgent::ClaudeCode,
            project,
            uninstall,
        } => {
            let file = settings_path(*project)?;
            let program = std::env::current_exe()
                .context("cannot tell where the soba binary is")?
                .display()
                .to_string();
            let changed = install_into(&file, &install::hook_command(&program), *uninstall)?;
            let what = if *uninstall {
                "removed from"
            } else {
                "installed in"
            };
            match changed {
                Some(Some(backup)) => println!(
                    "SOBA's Claude Code hooks {what} {} (previous file kept as {})",
                    file.display(),
                    backup.display()
                ),
                Some(None) => println!(
                    "SOBA's Claude Code hooks {what} {} (a new file)",
                    file.display()
                ),
                None => println!("{} already as asked; nothing changed", file.display()),
            }
            Ok(())
        }
    }
}

/// A failed hook, printed by `main` as it is: one stderr line starting `soba hook:` (Claude
/// Code shows it as a non-blocking hook error), without the `error:` prefix of other commands.
#[derive(Debug)]
pub struct HookFailure(pub String);

impl std::fmt::Display for HookFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HookFailure {}

/// The one line a failed hook prints: the message chain on one line, prefixed `soba hook:`.
pub fn hook_failure(e: &anyhow::Error) -> HookFailure {
    let text = format!("{e:#}").replace(['\n', '\r'], " ");
    let text = text.strip_prefix("soba hook: ").unwrap_or(&text);
    HookFailure(format!("soba hook: {text}"))
}

/// Handle one hook invocation: `Some(stdout JSON)` to print, `None` for nothing. Errors are
/// one line, prefixed `soba hook:`.
pub fn claude_code_hook(
    stdin: &str,
    paths: &Paths,
    common: &CommonArgs,
) -> anyhow::Result<Option<String>> {
    let input = claude_code::parse_input(stdin).map_err(|e| anyhow!("soba hook: {e}"))?;
    let action = input.action();
    if action == HookAction::Nothing {
        return Ok(None);
    }
    // SOBA's session of this Claude Code session lives under the workspace `cwd` names; a
    // relative one would depend on where the hook happens to run.
    if let Some(cwd) = input.cwd.as_deref() {
        if !Path::new(cwd).is_absolute() {
            return Err(anyhow!(
                "soba hook: the hook input's `cwd` ({cwd:?}) is not an absolute path; Claude Code sends the session's working folder as an absolute path: give the full path (e.g. {:?})",
                std::env::current_dir()
                    .map(|d| d.join(cwd).display().to_string())
                    .unwrap_or_else(|_| format!("/path/to/{cwd}"))
            ));
        }
    }
    let imported = import_transcript(&input)?;
    let config = common
        .config_for(Some(&imported.header))
        .map_err(|e| anyhow!("soba hook: {e:#}"))?;
    let log_path = session_log_path(paths, &input, &imported);
    match action {
        HookAction::CapsuleAfterCompaction => {
            let session = claude_code::session_of(&imported, &config);
            let leaf = claude_code::compaction_point(&session);
            let instructions = recorded_instructions(&log_path);
            Ok(
                claude_code::capsule_text(&session, leaf, &config, instructions, MAX_CONTEXT_CHARS)
                    .map(|text| claude_code::session_start_output(&text).to_string()),
            )
        }
        HookAction::RecordPreCompact {
            trigger,
            instructions,
        } => {
            record_pre_compact(&log_path, &imported, trigger, instructions)
                .map_err(|e| anyhow!("soba hook: cannot record the compaction: {e:#}"))?;
            Ok(None)
        }
        HookAction::Nothing => Ok(None),
    }
}

fn import_transcript(input: &HookInput) -> anyhow::Result<ImportResult> {
    let path = Path::new(&input.transcript_path);
    // A line with bytes that are not UTF-8 is kept (lossy), as `soba import` keeps it.
    let (text, _) = crate::import::read_transcript(path).map_err(|e| {
        anyhow!(
            "soba hook: cannot read the transcript {}: {e}",
            path.display()
        )
    })?;
    let options = ImportOptions {
        source_path: path.display().to_string(),
        default_workspace: input.cwd.clone().unwrap_or_default(),
        default_session_id: input.session_id.clone(),
        now: soba_core::util::now_rfc3339(),
    };
    import_str(&text, Some(Format::ClaudeCode), &options).map_err(|e| {
        anyhow!(
            "soba hook: cannot import the transcript {}: {e}",
            path.display()
        )
    })
}

/// `<data>/workspaces/<workspace key>/sessions/claude-code-<session id>.jsonl`: the SOBA
/// session of this Claude Code session, beside the daemon's sessions of the workspace.
pub fn session_log_path(paths: &Paths, input: &HookInput, imported: &ImportResult) -> PathBuf {
    let workspace = input
        .cwd
        .clone()
        .unwrap_or_else(|| imported.header.workspace.clone());
    paths
        .sessions_dir(Path::new(&workspace))
        .join(format!("{}.jsonl", input.soba_session_id()))
}

/// The focus the user gave the latest compaction, from the session's `PreCompact` record.
fn recorded_instructions(log_path: &Path) -> Option<String> {
    let (session, _) = soba_core::session::log::read_session(log_path).ok()?;
    session
        .entries()
        .iter()
        .rev()
        .find(|e| e.source_id.as_deref() == Some(PRE_COMPACT_SOURCE))
        .and_then(|e| match &e.body {
            EntryBody::ForeignCompaction(f) => f.instructions.clone(),
            _ => None,
        })
}

/// Write the session log afresh from the transcript (the transcript is the source; its import
/// is complete), keep the `PreCompact` records of earlier calls, and add this one. The new
/// log is written beside the old one and moved over it, so a failure leaves the old log.
fn record_pre_compact(
    log_path: &Path,
    imported: &ImportResult,
    trigger: String,
    instructions: Option<String>,
) -> anyhow::Result<()> {
    let dir = log_path.parent().context("a session log has a folder")?;
    soba_core::files::create_private_dir_all(dir)?;
    let earlier: Vec<Entry> = soba_core::session::log::read_session(log_path)
        .map(|(s, _)| {
            s.entries()
                .iter()
                .filter(|e| e.source_id.as_deref() == Some(PRE_COMPACT_SOURCE))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let mut header = imported.header.clone();
    header.id = log_path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or(header.id);
    let tmp = log_path.with_extension("jsonl.soba-tmp");
    let _ = std::fs::remove_file(&tmp);
    let _ = std::fs::remove_file(tmp.with_extension("soba-tmp.lock"));
    {
        let mut log = SessionLog::create(&tmp, header, soba_core::config::Durability::Flush)?;
        log.append_all(imported.entries.clone())?;
        let mut records = earlier;
        let mut now = Entry::new(
            soba_core::util::new_id("e_"),
            None,
            EntryBody::ForeignCompaction(Box::new(ForeignCompactionEntry {
                agent: "claude-code".into(),
                trigger: Some(trigger),
                tokens_before: None,
                summary: None,
                summary_tokens: None,
                first_kept_entry_id: None,
                kept_items: None,
                kept_entry_ids: None,
                instructions,
            })),
        );
        now.source_id = Some(PRE_COMPACT_SOURCE.into());
        records.push(now);
        for mut r in records {
            // Each record hangs off the leaf: where the conversation stood when it was made is
            // not known after a re-import, only that it came after what is there.
            r.parent_id = log.session().leaf_id().map(str::to_string);
            if log.session().index_of(&r.id).is_some() {
                r.id = soba_core::util::new_id("e_");
            }
            log.append(r)?;
        }
        log.sync()?;
    }
    let tmp_counts = soba_core::session::token_file::path_for(&tmp);
    std::fs::rename(&tmp, log_path)
        .with_context(|| format!("cannot move the new log to {}", log_path.display()))?;
    let _ = std::fs::remove_file(tmp.with_extension("soba-tmp.lock"));
    // The counts were recorded for the same bytes at the same offsets: they stay valid.
    if std::fs::rename(
        &tmp_counts,
        soba_core::session::token_file::path_for(log_path),
    )
    .is_err()
    {
        let _ = std::fs::remove_file(&tmp_counts);
    }
    Ok(())
}

/// Claude Code's settings file: the project's, or the user's (`$CLAUDE_CONFIG_DIR`, else
/// `~/.claude`).
fn settings_path(project: bool) -> anyhow::Result<PathBuf> {
    if project {
        return Ok(std::env::current_dir()?
            .join(".claude")
            .join("settings.json"));
    }
    if let Some(dir) = std::env::var_os("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("settings.json"));
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or_else(|| anyhow!("no home folder (HOME is unset); set CLAUDE_CONFIG_DIR"))?;
    Ok(PathBuf::from(home).join(".claude").join("settings.json"))
}

/// Install (or uninstall) SOBA's hooks in `file`. `None` when the file already was as asked;
/// else `Some(backup path)` (`None` inside when there was no file to back up). A file that is
/// not a JSON object of settings is refused and left untouched.
pub fn install_into(
    file: &Path,
    command: &str,
    uninstall: bool,
) -> anyhow::Result<Option<Option<PathBuf>>> {
    let existing = match std::fs::symlink_metadata(file) {
        Ok(_) => Some(
            soba_core::files::read_regular_to_string(file)
                .with_context(|| format!("cannot read {}", file.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", file.display())),
    };
    let settings = install::parse_settings(existing.as_deref().unwrap_or("")).map_err(|e| {
        anyhow!(
            "{} was left as it is: {e}. Fix the file (or move it away) and run this again",
            file.display()
        )
    })?;
    let updated = if uninstall {
        install::uninstall(&settings)
    } else {
        install::install(&settings, command)
    };
    if updated == settings && (existing.is_some() || uninstall) {
        return Ok(None);
    }
    let dir = file.parent().context("a settings file has a folder")?;
    if !dir.is_dir() {
        if uninstall {
            return Ok(None);
        }
        soba_core::files::create_private_dir_all(dir)?;
    }
    let backup = match &existing {
        Some(text) => {
            let backup = file.with_extension("json.soba-backup");
            let _ = std::fs::remove_file(&backup);
            let mut f = soba_core::files::create_private(&backup, false)
                .with_context(|| format!("cannot write the backup {}", backup.display()))?;
            std::io::Write::write_all(&mut f, text.as_bytes())?;
            f.sync_all()?;
            Some(backup)
        }
        None => None,
    };
    let tmp = file.with_extension("json.soba-tmp");
    let _ = std::fs::remove_file(&tmp);
    {
        let mut f = soba_core::files::create_private(&tmp, false)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::io::Write::write_all(&mut f, install::settings_text(&updated).as_bytes())?;
        f.sync_all()?;
    }
    // The settings file keeps the mode it had (a new one is private).
    if let Ok(meta) = std::fs::metadata(file) {
        std::fs::set_permissions(&tmp, meta.permissions())?;
    }
    std::fs::rename(&tmp, file).with_context(|| format!("cannot replace {}", file.display()))?;
    Ok(Some(backup))
}
