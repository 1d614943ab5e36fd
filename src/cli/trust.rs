//! `soba trust [PATH] [--revoke] [--list]`: record which workspaces may set their own
//! summarizer, in the user config file.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use serde::Serialize;

use super::{print_json, CommonArgs};
use soba_core::trust::{canonical, edit_trust, list, TrustChange};

#[derive(Debug, Clone, Args)]
pub struct TrustArgs {
    /// The workspace folder (default: the current folder).
    pub path: Option<PathBuf>,
    /// Stop trusting the workspace.
    #[arg(long, conflicts_with = "list")]
    pub revoke: bool,
    /// List the trusted workspaces.
    #[arg(long)]
    pub list: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TrustOutput {
    user_config: String,
    /// The workspace changed, when one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    workspace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trusted: Option<bool>,
    changed: bool,
    trusted_workspaces: Vec<String>,
}

pub fn run(args: &TrustArgs, common: &CommonArgs) -> anyhow::Result<()> {
    let user = soba_core::config::user_config_path().context(
        "no user config folder is known on this system; set SOBA_CONFIG to the user config file",
    )?;
    if args.list {
        let trusted = list(&user)?;
        if common.json {
            return print_json(&TrustOutput {
                user_config: user.display().to_string(),
                workspace: None,
                trusted: None,
                changed: false,
                trusted_workspaces: trusted,
            });
        }
        if trusted.is_empty() {
            outln!("No trusted workspaces (in {}).", user.display());
        }
        for w in trusted {
            outln!("{}", super::terminal_text(&w));
        }
        return Ok(());
    }
    let path = match &args.path {
        Some(p) => p.clone(),
        None => std::env::current_dir().context("cannot read the current folder")?,
    };
    if !args.revoke && !path.is_dir() {
        anyhow::bail!(
            "{} is not a folder; give the workspace folder (the one holding .soba/)",
            path.display()
        );
    }
    let workspace = canonical(&path).display().to_string();
    let change = if args.revoke {
        TrustChange::Revoke
    } else {
        TrustChange::Trust
    };
    let changed = edit_trust(&user, &workspace, change)
        .with_context(|| format!("cannot update {}", user.display()))?;
    if common.json {
        return print_json(&TrustOutput {
            user_config: user.display().to_string(),
            workspace: Some(workspace),
            trusted: Some(!args.revoke),
            changed,
            trusted_workspaces: list(&user)?,
        });
    }
    let shown = super::terminal_text(&workspace);
    match (args.revoke, changed) {
        (false, true) => outln!(
            "Trusted {shown}: its .soba/config.json may now set the summarizer and Project Memory mirroring (recorded in {}).",
            user.display()
        ),
        (false, false) => outln!("{shown} was already trusted."),
        (true, true) => {
            outln!("{shown} is no longer trusted: its summarizer and mirroring settings are ignored.")
        }
        (true, false) => outln!("{shown} was not trusted."),
    }
    Ok(())
}
