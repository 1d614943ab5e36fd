//! `soba proxy`: serve the OpenAI- and Anthropic-style chat APIs on a loopback port, with
//! SOBA's barrier in front of every request.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, ValueEnum};

use super::CommonArgs;
use crate::daemon::paths::Paths;
use crate::daemon::registry::{Daemon, DaemonOptions};
use crate::proxy::{check_listen, DaemonTarget, Proxy, ProxyConfig, ProxySummarizer};

/// Which provider the upstream speaks when `--upstream` is left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApiFlavor {
    Openai,
    Anthropic,
}

#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    /// Address to listen on (loopback unless --allow-remote).
    #[arg(long, default_value = "127.0.0.1:4860", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Base URL of the provider API the requests go to.
    #[arg(long, value_name = "URL")]
    pub upstream: Option<String>,
    /// The provider whose public API is the upstream when --upstream is not given.
    #[arg(long, value_enum, default_value = "openai")]
    pub api: ApiFlavor,
    /// Workspace the proxied sessions belong to (default: the current folder).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Listen on an address other machines can reach. Anyone who reaches it can use the API
    /// keys your agents send through it.
    #[arg(long)]
    pub allow_remote: bool,
    /// Keep the sessions in this process instead of the shared daemon (editors will not see
    /// them).
    #[arg(long)]
    pub standalone: bool,
    /// Summarize with this model of the upstream instead of the conversation's own model (a
    /// cheaper one), with the same credentials.
    #[arg(long, value_name = "NAME", conflicts_with = "local_capsules")]
    pub summarizer_model: Option<String>,
    /// Never summarize through the upstream: capsules come from the configured summarizer, or
    /// are built locally from the log.
    #[arg(long)]
    pub local_capsules: bool,
}

fn upstream(args: &ProxyArgs) -> anyhow::Result<reqwest::Url> {
    let text = args.upstream.clone().unwrap_or_else(|| {
        match args.api {
            ApiFlavor::Openai => "https://api.openai.com",
            ApiFlavor::Anthropic => "https://api.anthropic.com",
        }
        .to_string()
    });
    let url: reqwest::Url = text.parse().with_context(|| {
        format!("--upstream `{text}` is not a URL; give one such as https://api.openai.com")
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        anyhow::bail!("--upstream `{text}` must be an http:// or https:// URL");
    }
    Ok(url)
}

pub fn run(args: &ProxyArgs, common: &CommonArgs) -> anyhow::Result<()> {
    check_listen(&args.listen, args.allow_remote)?;
    if args
        .summarizer_model
        .as_deref()
        .is_some_and(|m| m.trim().is_empty())
    {
        anyhow::bail!("--summarizer-model needs a model name, e.g. --summarizer-model gpt-4o-mini; leave it out to summarize with the conversation's own model");
    }
    let upstream = upstream(args)?;
    let workspace = match &args.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().context("cannot read the current folder")?,
    };
    let workspace = workspace
        .canonicalize()
        .with_context(|| format!("workspace {} does not exist", workspace.display()))?;
    // A client gone mid-reply ends that connection, not the proxy.
    // SAFETY: before the runtime starts any thread; SIG_IGN is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let paths = Paths::from_env()?;
    let settings = crate::config::DaemonSettings::load(common.config.clone())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let daemon = if args.standalone {
            DaemonTarget::InProcess(Daemon::new(
                paths,
                DaemonOptions {
                    extra_config: common.config.clone(),
                    max_idle_sessions: settings.max_idle_sessions,
                    ..DaemonOptions::default()
                },
            ))
        } else {
            let mut daemon_args = Vec::new();
            if let Some(c) = &common.config {
                daemon_args.push("--config".into());
                daemon_args.push(c.clone().into_os_string());
            }
            let (hello, warnings) =
                crate::daemon::connection::gather_own(common.config.as_deref(), Some(&workspace))?;
            for w in &warnings {
                errln!("soba proxy: warning: {w}");
            }
            DaemonTarget::Shared {
                paths,
                args: daemon_args,
                hello: Some(hello),
            }
        };
        let proxy = Proxy::new(ProxyConfig {
            upstream: upstream.clone(),
            workspace: workspace.display().to_string(),
            context_window: common.context_window,
            max_output_tokens: common.max_output_tokens,
            summarizer: if args.local_capsules {
                ProxySummarizer::Local
            } else {
                ProxySummarizer::Upstream {
                    model: args.summarizer_model.clone(),
                }
            },
            daemon,
            log: Arc::new(|line: &str| eprintln!("{line}")),
        })?;
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        eprintln!(
            "soba proxy: listening on http://{} → {} (workspace {})",
            listener.local_addr()?,
            upstream,
            workspace.display()
        );
        proxy.serve(listener).await
    })
}
