use std::process::ExitCode;

use clap::Parser;

use soba::cli::errors::ErrorReport;
use soba::cli::{self, command::Cli};

fn main() -> ExitCode {
    // Output piped into `head` and closed early ends the process quietly, as in other tools.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Before anything runs: the engine's warnings (the daemon's too) reach stderr through it.
    install_warning_printer();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match cli::command::run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<cli::hook::HookFailure>().is_some() => {
            // A Claude Code hook's fault: one line, as docs/claude-code-hooks.md gives it.
            eprintln!("{e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            // The one place a failed command is printed: hints for permission and full-disk
            // failures, and one JSON object on stderr under `--json` so callers can parse it.
            let report = ErrorReport::from_error(&e);
            if cli.common.json {
                eprintln!("{}", report.to_json());
            } else {
                eprintln!("{}", report.to_text());
            }
            ExitCode::FAILURE
        }
    }
}

/// A command line clap rejected (or `--help` / `--version`). Under `--json` a rejection is one
/// JSON object on stderr too, with clap's exit status.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let wants_json = std::env::args_os().any(|a| a == "--json");
    let informational = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    if !wants_json || informational {
        e.exit();
    }
    let rendered = e.render().to_string();
    // clap's message is the paragraph before the first blank line (`error: …` plus details).
    let message = rendered
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ")
        .trim_start_matches("error: ")
        .to_string();
    let report = ErrorReport {
        error: message,
        hint: Some(usage_hint(&rendered)),
    };
    eprintln!("{}", report.to_json());
    ExitCode::from(e.exit_code() as u8)
}

/// The usage line clap printed, and where the full help is.
fn usage_hint(rendered: &str) -> String {
    match rendered.lines().find(|l| l.starts_with("Usage: ")) {
        Some(usage) => format!("{}; `soba --help` lists every command", usage.trim()),
        None => "`soba --help` lists every command".to_string(),
    }
}

/// Prints the warnings SOBA's own code logs (`log::warn!`) on stderr as `soba: warning: …`;
/// the library prints nothing itself. Records of other crates are not SOBA's to show.
struct WarningPrinter;

impl log::Log for WarningPrinter {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn && is_soba_target(metadata.target())
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let level = match record.level() {
            log::Level::Error => "error",
            _ => "warning",
        };
        eprintln!("soba: {level}: {}", record.args());
    }

    fn flush(&self) {}
}

/// Whether a record comes from this package's crates (`soba`, `soba_…`): the target is the
/// module path of the code that logged it.
fn is_soba_target(target: &str) -> bool {
    let krate = target.split("::").next().unwrap_or_default();
    krate == "soba" || krate.starts_with("soba_")
}

fn install_warning_printer() {
    static PRINTER: WarningPrinter = WarningPrinter;
    // Only a second install fails, and there is none.
    if log::set_logger(&PRINTER).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
}
