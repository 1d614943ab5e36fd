//! `soba demo`: the scripted session with a live timeline, a session log and an HTML report.

use std::cell::RefCell;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use super::{print_json, CommonArgs};
use crate::replay::host::CapsuleWriter;
use crate::report::text::LivePrinter;
use crate::report::{html, Event, Timeline};
use soba_core::config::Config;
use soba_core::util::human_tokens;

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Folder for the session log and the report (default: a new folder in the system temp dir).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// `--json` output: the timeline and where the files went.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunOutput<'a> {
    #[serde(flatten)]
    pub timeline: &'a Timeline,
    /// `None` when the log was not kept (`soba replay` without `--log`).
    pub session_log: Option<String>,
    pub report: Option<String>,
}

/// Whether to colour terminal output: stdout is a terminal and `NO_COLOR` is unset.
pub fn use_color() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A new folder for a run's files, named after the command and the time.
pub fn fresh_dir(out: Option<&Path>, command: &str) -> anyhow::Result<PathBuf> {
    let dir = match out {
        Some(d) => d.to_path_buf(),
        None => std::env::temp_dir().join(soba_core::util::new_id(&format!("soba-{command}-"))),
    };
    soba_core::files::create_private_dir_all(&dir)
        .with_context(|| format!("cannot create the output folder {}", dir.display()))?;
    Ok(dir)
}

/// The limits line of a run's header.
pub fn limits_line(config: &Config) -> String {
    let l = config.limits();
    format!(
        "window {} · max output {} · safety reserve {} → hard limit {}, soft limit {} · keep recent {}",
        human_tokens(l.context_window),
        human_tokens(l.max_output_tokens),
        human_tokens(l.safety_reserve_tokens),
        human_tokens(l.hard_limit),
        human_tokens(l.soft_limit),
        human_tokens(config.compaction.keep_recent_tokens)
    )
}

pub fn run(args: &DemoArgs, common: &CommonArgs) -> anyhow::Result<()> {
    // The demo's window, with the summarizer the user configured (if any).
    let mut config = crate::demo::demo_config();
    config.summarizer = common.config_for(None)?.summarizer;
    let summarizer = crate::summarize::from_config(&config.summarizer)?;
    let writer = CapsuleWriter::new(summarizer.as_deref())?;
    let dir = fresh_dir(args.out.as_deref(), "demo")?;
    let log_path = dir.join("session.jsonl");
    if log_path.exists() {
        anyhow::bail!(
            "{} already exists; pass --out with a new or empty folder",
            log_path.display()
        );
    }
    let color = use_color();
    let text = !common.json;
    if text {
        outln!("soba demo: a scripted bug-fix session through the real pipeline");
        outln!("{}", limits_line(&config));
        outln!("capsules: {}\n", writer.describe());
    }
    let printer = RefCell::new(LivePrinter::new(config.limits(), color));
    let sink = Box::new(|event: Event<'_>| {
        if text {
            for line in printer.borrow_mut().event(event) {
                println!("{line}");
            }
        }
    });
    let timeline = crate::demo::run(&config, writer, &log_path, sink)?;
    let report_path = dir.join("report.html");
    std::fs::write(&report_path, html::render(&timeline))
        .with_context(|| format!("cannot write {}", report_path.display()))?;
    if common.json {
        return print_json(&RunOutput {
            timeline: &timeline,
            session_log: Some(log_path.display().to_string()),
            report: Some(report_path.display().to_string()),
        });
    }
    if let Some(line) = printer.borrow_mut().flush() {
        println!("{line}");
    }
    outln!("\nsession log  {}", log_path.display());
    outln!("report       {}", report_path.display());
    Ok(())
}
