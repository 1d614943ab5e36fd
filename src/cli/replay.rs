//! `soba replay`: a transcript through SOBA's agent loop, with the timeline, a comparison with
//! the source agent's own compactions, and an optional HTML report.

use std::cell::RefCell;
use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::demo::{limits_line, use_color, RunOutput};
use super::import::FormatChoice;
use super::scratch::ScratchDir;
use super::{print_json, CommonArgs};
use crate::import::transcript::import_str;
use crate::import::{Format, ImportOptions};
use crate::replay::host::CapsuleWriter;
use crate::replay::{replay, Observers};
use crate::report::text::LivePrinter;
use crate::report::{html, Event};
use soba_core::util::human_tokens;

/// Below this many entries a replay is too quick for a progress bar to help.
const PROGRESS_MIN_ENTRIES: usize = 500;

#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// The transcript: a Claude Code, Codex, pi or OpenAI-chat session file.
    pub transcript: PathBuf,
    /// Write a self-contained HTML report (chart, compactions, latest capsule) here.
    #[arg(long, value_name = "FILE.html")]
    pub report: Option<PathBuf>,
    /// Where to keep the replayed session log (default: not kept; it is written to a private
    /// temporary folder removed when the command ends).
    #[arg(long, value_name = "SESSION.jsonl")]
    pub log: Option<PathBuf>,
    /// Transcript format; `auto` detects it from the content.
    #[arg(long, value_enum, default_value_t = FormatChoice::Auto)]
    pub format: FormatChoice,
}

pub fn run(args: &ReplayArgs, common: &CommonArgs) -> anyhow::Result<()> {
    let path = &args.transcript;
    let (text, not_utf8) = crate::import::read_transcript(path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let source_path = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
    let options = ImportOptions {
        source_path: source_path.display().to_string(),
        default_workspace: std::env::current_dir()
            .map(|d| d.display().to_string())
            .unwrap_or_default(),
        default_session_id: soba_core::util::new_id("s_"),
        now: soba_core::util::now_rfc3339(),
    };
    let mut import = import_str(&text, format_of(args.format), &options)
        .with_context(|| format!("cannot import {}", path.display()))?;
    // One warning per line that could not be read as it was, saying what was done with it.
    import.note_lossy_lines(not_utf8);
    for c in &import.report.corrupt_lines {
        errln!("warning: {}:{}: {}", path.display(), c.line, c.reason);
    }
    drop(text);
    let config = common.config_for(Some(&import.header))?;
    // Without --log the replayed log (the whole transcript) lives in a private folder that is
    // removed when the command ends, interrupted or not.
    let mut scratch = None;
    let log_path = match &args.log {
        Some(p) => {
            if p.exists() {
                anyhow::bail!("{} already exists; choose another --log path", p.display());
            }
            p.clone()
        }
        None => scratch
            .insert(ScratchDir::new("replay")?)
            .path()
            .join("session.jsonl"),
    };
    let kept_log = scratch.is_none().then(|| log_path.display().to_string());

    let summarizer = crate::summarize::from_config(&config.summarizer)?;
    let writer = CapsuleWriter::new(summarizer.as_deref())?;
    let show_text = !common.json;
    let color = use_color();
    if show_text {
        outln!(
            "soba replay: {} ({} entries, {})",
            path.display(),
            import.entries.len(),
            import.report.format
        );
        outln!("{} · model {}", limits_line(&config), config.model.name);
        outln!("capsules: {}\n", writer.describe());
    }
    let total = import.entries.len();
    let bar = if total >= PROGRESS_MIN_ENTRIES && std::io::stderr().is_terminal() {
        let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("replaying {bar:40} {pos}/{len} entries")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let printer = RefCell::new(LivePrinter::new(config.limits(), color));
    let print = |lines: Vec<String>| {
        if show_text && !lines.is_empty() {
            bar.suspend(|| lines.iter().for_each(|l| println!("{l}")));
        }
    };
    let observers = Observers {
        sink: Box::new(|event: Event<'_>| print(printer.borrow_mut().event(event))),
        on_input: Box::new(|_, _| {}),
        on_progress: Box::new(|done, _| bar.set_position(done as u64)),
    };
    let replayed = replay(import, &config, writer, &log_path, observers)
        .with_context(|| format!("cannot write the replayed log {}", log_path.display()))?;
    bar.finish_and_clear();
    print(printer.borrow_mut().flush().into_iter().collect());

    let report = match &args.report {
        Some(p) => {
            // Redacted and private (0600) like every other export of the session.
            soba_core::files::require_parent(p)
                .and_then(|()| {
                    soba_core::files::write_atomic(p, html::render(&replayed.timeline).as_bytes())
                })
                .with_context(|| format!("cannot write {}", p.display()))?;
            Some(p.display().to_string())
        }
        None => None,
    };
    if common.json {
        return print_json(&RunOutput {
            timeline: &replayed.timeline,
            session_log: kept_log,
            report,
        });
    }
    let t = &replayed.timeline;
    let completed = t
        .compactions
        .iter()
        .filter(|c| c.result.outcome == soba_core::session::entry::Outcome::Completed)
        .count();
    let peak = t
        .steps
        .iter()
        .map(|s| s.effective_tokens)
        .max()
        .unwrap_or(0);
    outln!(
        "\n{} inferences · {completed} SOBA compactions ({} outcomes in all) · {} by the source agent · largest input {} (hard limit {})",
        replayed.inputs,
        t.compactions.len(),
        t.foreign_compactions.len(),
        human_tokens(peak),
        human_tokens(t.limits.hard_limit)
    );
    let comparison = crate::report::text::comparison(t);
    if !comparison.is_empty() {
        outln!();
        comparison.iter().for_each(|l| outln!("{l}"));
        outln!();
    }
    if comparison.is_empty() {
        outln!();
    }
    crate::report::text::bottom_line(t)
        .iter()
        .for_each(|l| outln!("{l}"));
    outln!();
    if replayed.refusals > 0 {
        outln!(
            "{} inferences could not be sent: the input did not fit even after compaction",
            replayed.refusals
        );
    }
    match &kept_log {
        Some(p) => outln!("session log  {p}"),
        None => outln!("session log  not kept (pass --log SESSION.jsonl to keep it)"),
    }
    if let Some(r) = report {
        outln!("report       {r}");
    }
    Ok(())
}

fn format_of(choice: FormatChoice) -> Option<Format> {
    match choice {
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
