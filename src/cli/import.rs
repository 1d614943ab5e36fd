//! `soba import`: convert an agent transcript into a SOBA session log.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use super::{print_json, CommonArgs};
use crate::import::transcript::import_str;
use crate::import::{model_ref, Format, ImportOptions, ImportReport, ImportResult};
use soba_core::config::Durability;
use soba_core::session::entry::SessionHeader;
use soba_core::session::log::{LogError, SessionLog};

/// Entries written per append: one write call each, no sync until the end.
const WRITE_BATCH: usize = 512;
/// Below this many entries the write is too quick for a progress bar to help.
const PROGRESS_MIN_ENTRIES: usize = 2_000;
/// Transcripts at least this large get a spinner while they are read.
const SPINNER_MIN_BYTES: usize = 8 << 20;

#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// The transcript: a Claude Code, Codex, pi or OpenAI-chat session file.
    pub file: PathBuf,
    /// The session log to write.
    #[arg(short = 'o', long = "output", value_name = "SESSION.jsonl")]
    pub output: PathBuf,
    /// Transcript format; `auto` detects it from the content.
    #[arg(long, value_enum, default_value_t = FormatChoice::Auto)]
    pub format: FormatChoice,
    /// Replace the output file if it exists.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatChoice {
    Auto,
    ClaudeCode,
    Codex,
    Pi,
    OpenaiChat,
    SweAgent,
    Aider,
    CopilotCli,
}

impl FormatChoice {
    fn format(self) -> Option<Format> {
        match self {
            FormatChoice::Auto => None,
            FormatChoice::ClaudeCode => Some(Format::ClaudeCode),
            FormatChoice::Codex => Some(Format::Codex),
            FormatChoice::Pi => Some(Format::Pi),
            FormatChoice::OpenaiChat => Some(Format::OpenaiChat),
            FormatChoice::SweAgent => Some(Format::SweAgent),
            FormatChoice::Aider => Some(Format::Aider),
            FormatChoice::CopilotCli => Some(Format::CopilotCli),
        }
    }
}

/// `--json` output: the import report and where the log went.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ImportSummary<'a> {
    output: String,
    session_id: &'a str,
    #[serde(flatten)]
    report: &'a ImportReport,
}

pub fn run(args: &ImportArgs, common: &CommonArgs) -> anyhow::Result<()> {
    let (text, not_utf8) = crate::import::read_transcript(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let source_path = std::fs::canonicalize(&args.file).unwrap_or_else(|_| args.file.clone());
    check_output(&source_path, &args.output, args.force)?;
    let options = ImportOptions {
        source_path: source_path.display().to_string(),
        default_workspace: std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
        default_session_id: soba_core::util::new_id("s_"),
        now: soba_core::util::now_rfc3339(),
    };
    let spinner =
        if !common.json && text.len() >= SPINNER_MIN_BYTES && std::io::stderr().is_terminal() {
            let spinner = ProgressBar::new_spinner();
            spinner.set_message(format!("reading {}", args.file.display()));
            spinner.enable_steady_tick(std::time::Duration::from_millis(120));
            spinner
        } else {
            ProgressBar::hidden()
        };
    let imported = import_str(&text, args.format.format(), &options);
    spinner.finish_and_clear();
    let mut result = imported.with_context(|| format!("cannot import {}", args.file.display()))?;
    result.note_lossy_lines(not_utf8);
    apply_model_flags(&mut result.header, common);
    write_log(&args.output, &result, !common.json)?;

    let report = &result.report;
    for c in &report.corrupt_lines {
        errln!("warning: {}:{}: {}", args.file.display(), c.line, c.reason);
    }
    for (kind, n) in &report.unknown_records {
        errln!("warning: {n} record(s) of unknown type `{kind}` left out");
    }
    if common.json {
        return print_json(&ImportSummary {
            output: args.output.display().to_string(),
            session_id: &result.header.id,
            report,
        });
    }
    print_text(args, &result);
    Ok(())
}

fn check_output(source: &Path, output: &Path, force: bool) -> anyhow::Result<()> {
    soba_core::files::require_parent(output)?;
    if std::fs::canonicalize(output).is_ok_and(|o| o == source) {
        bail!(
            "the output {} is the transcript itself; choose another path",
            output.display()
        );
    }
    if output.exists() {
        if !force {
            bail!(
                "{} already exists; choose another path or pass --force to replace it",
                output.display()
            );
        }
        // Never replace a log another process is writing: taking its writer lock tells.
        // Anything else (a log nobody writes, or not a log at all) may go.
        if let Err(e @ LogError::Locked { .. }) = SessionLog::open(output, Durability::Flush) {
            return Err(e.into());
        }
        // Its recorded token counts go with it (they would not match the new log anyway).
        let _ = std::fs::remove_file(soba_core::session::token_file::path_for(output));
        std::fs::remove_file(output)
            .with_context(|| format!("cannot replace {}", output.display()))?;
    }
    Ok(())
}

/// `--model`, `--context-window` and `--max-output-tokens` override what the transcript says.
fn apply_model_flags(header: &mut SessionHeader, common: &CommonArgs) {
    if let Some(name) = &common.model {
        header.model = Some(model_ref(name));
    }
    if common.context_window.is_some() {
        header
            .model
            .get_or_insert_with(Default::default)
            .context_window = common.context_window;
    }
    if common.max_output_tokens.is_some() {
        header
            .model
            .get_or_insert_with(Default::default)
            .max_output_tokens = common.max_output_tokens;
    }
}

/// Write the log in batches without a sync per batch, then sync once.
fn write_log(path: &Path, result: &ImportResult, show_progress: bool) -> anyhow::Result<()> {
    let mut log = SessionLog::create(path, result.header.clone(), Durability::Flush)?;
    let total = result.entries.len();
    let progress =
        if show_progress && total >= PROGRESS_MIN_ENTRIES && std::io::stderr().is_terminal() {
            let bar =
                ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("writing {bar:40} {pos}/{len} entries")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar
        } else {
            ProgressBar::hidden()
        };
    for batch in result.entries.chunks(WRITE_BATCH) {
        log.append_all(batch.to_vec())?;
        progress.inc(batch.len() as u64);
    }
    log.sync()?;
    progress.finish_and_clear();
    Ok(())
}

fn print_text(args: &ImportArgs, result: &ImportResult) {
    let r = &result.report;
    let format = r.format.as_str();
    outln!(
        "{} ({format}) → {}",
        args.file.display(),
        args.output.display()
    );
    outln!(
        "{} entries: {} user, {} assistant, {} system messages; {} tool calls, {} results",
        r.entries,
        r.messages.user,
        r.messages.assistant,
        r.messages.system,
        r.tool_calls,
        r.tool_results
    );
    outln!(
        "unmatched calls {}  ·  orphan results {}  ·  foreign compactions {}  ·  usage records {}",
        r.unmatched_calls,
        r.orphan_results,
        r.foreign_compactions,
        r.usage_records
    );
    let model = result.header.model.as_ref();
    match model.and_then(|m| m.name.as_deref()) {
        Some(name) if model.and_then(|m| m.tokenizer).is_some() => outln!("model {name}"),
        Some(name) => outln!("model {name} (not in the built-in catalog: pass --model or --context-window to set its limits)"),
        None => outln!("no model named in the transcript (pass --model to set one)"),
    }
    if !r.opaque_records.is_empty() {
        let kept: Vec<String> = r
            .opaque_records
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        outln!("kept whole (opaque, counted): {}", kept.join(", "));
    }
    if !r.skipped_records.is_empty() {
        let skipped: Vec<String> = r
            .skipped_records
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        outln!("left out on purpose: {}", skipped.join(", "));
    }
}
