//! Command-line front end: argument types and the glue from a command to the library.
//! No engine logic lives here.
//!
//! Every line of text for a person goes through [`outln!`] or [`errln!`], which escape control
//! characters from the log (see [`soba_core::util::terminal_text`]); `--json` output does not.

/// `println!` for text that may hold log text: control characters are escaped.
macro_rules! outln {
    () => { println!() };
    ($($arg:tt)*) => { println!("{}", soba_core::util::terminal_text(&format!($($arg)*))) };
}

/// `eprintln!` for text that may hold log text: control characters are escaped.
macro_rules! errln {
    () => { eprintln!() };
    ($($arg:tt)*) => { eprintln!("{}", soba_core::util::terminal_text(&format!($($arg)*))) };
}

pub mod attach;
pub mod capsule;
pub mod command;
pub mod compact;
pub mod debug;
pub mod demo;
pub mod errors;
pub mod hook;
pub mod import;
pub mod inspect;
pub mod proxy;
pub mod replay;
pub mod scratch;
pub mod serve;
pub mod trust;

use std::path::{Path, PathBuf};

use clap::Args;

use soba_core::config::layers::ConfigSources;
use soba_core::config::{Config, ConfigFile, ModelFile, Overrides};
use soba_core::session::entry::SessionHeader;
use soba_core::session::Session;

/// Options every command takes.
#[derive(Debug, Clone, Default, Args)]
pub struct CommonArgs {
    /// A config file layered over the user's and the workspace's.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Agent model (a catalog name such as gpt-4o or claude-sonnet-4-5).
    #[arg(long, global = true)]
    pub model: Option<String>,
    /// Override the model's context window, in tokens.
    #[arg(long, global = true, value_name = "N")]
    pub context_window: Option<u64>,
    /// Override the model's maximum output tokens.
    #[arg(long, global = true, value_name = "N")]
    pub max_output_tokens: Option<u64>,
    /// Print one JSON object on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

impl CommonArgs {
    pub fn overrides(&self) -> Overrides {
        Overrides {
            model: self.model.clone(),
            context_window: self.context_window,
            max_output_tokens: self.max_output_tokens,
            ..Overrides::default()
        }
    }

    /// Layered configuration for a session log: its model (the header's, or the one a later
    /// `setting` switched to) < user < workspace < --config < flags.
    pub fn config_for_session(&self, session: &Session) -> anyhow::Result<Config> {
        self.config_with_model(Some(&session.header), session.model_config())
    }

    /// Layered configuration for a session: defaults < user < workspace < --config < flags.
    pub fn config_for(&self, header: Option<&SessionHeader>) -> anyhow::Result<Config> {
        self.config_with_model(header, header.and_then(SessionHeader::model_config))
    }

    fn config_with_model(
        &self,
        header: Option<&SessionHeader>,
        model: Option<ModelFile>,
    ) -> anyhow::Result<Config> {
        let workspace = header
            .map(|h| PathBuf::from(&h.workspace))
            .filter(|p| p.is_dir());
        let sources = ConfigSources::for_workspace(workspace.as_deref(), self.config.clone());
        let loaded = sources.load()?;
        for w in &loaded.warnings {
            errln!("warning: {w}");
        }
        let files: Vec<ConfigFile> = loaded.files;
        let config = Config::resolve(&files, model.as_ref(), &self.overrides())?;
        for w in &config.warnings {
            errln!("warning: {w}");
        }
        Ok(config)
    }
}

/// Print a value as one JSON object line.
pub fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}

/// Report load problems of a session log on stderr (they never stop a command).
pub fn warn_load(path: &Path, report: &soba_core::session::log::LoadReport) {
    for m in report.messages(path) {
        errln!("warning: {m}");
    }
}

/// Log text as it may be shown on a terminal (control characters escaped).
pub fn terminal_text(s: &str) -> std::borrow::Cow<'_, str> {
    soba_core::util::terminal_text(s)
}
