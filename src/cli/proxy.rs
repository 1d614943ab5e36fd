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
use crate::proxy::server::check_listen;
use crate::proxy::server::DaemonTarget;
use crate::proxy::server::Proxy;
use crate::proxy::server::ProxyConfig;
use crate::proxy::server::ProxySummarizer;
use crate::proxy::service::{self, Access, ServiceOptions};

/// Which provider the upstream speaks when `--upstream` is left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApiFlavor {
    Openai,
    Anthropic,
}

#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    /// Address to listen on, HOST:PORT (loopback unless --allow-remote); a host name such as
    /// localhost is resolved.
    #[arg(long, default_value = "127.0.0.1:4860", value_name = "ADDR")]
    pub listen: String,
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
    /// Connections served at once; more are answered 503 (default: 256, or fewer when the
    /// file-descriptor limit is lower).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: Option<u32>,
    /// Seconds a request's headers may take, from the connection's start or the previous
    /// answer; idle connections are closed after it.
    #[arg(long, value_name = "SECS", default_value_t = service::DEFAULT_HEADER_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout: u64,
    /// Seconds a request body may stop arriving, or an answer stay unread, before the
    /// connection is closed.
    #[arg(long, value_name = "SECS", default_value_t = service::DEFAULT_IDLE_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout: u64,
    /// Largest request body taken (e.g. 32MiB, 512KiB); larger ones are answered 413.
    #[arg(long, value_name = "SIZE", default_value = "32MiB", value_parser = service::parse_size)]
    pub max_body: u64,
    /// Summarize with this model of the upstream instead of the conversation's own model (a
    /// cheaper one), with the same credentials.
    #[arg(long, value_name = "NAME", conflicts_with = "local_capsules")]
    pub summarizer_model: Option<String>,
    /// Never summarize through the upstream: capsules come from the configured summarizer, or
    /// are built locally from the log.
    #[arg(long)]
    pub local_capsules: bool,
    /// Conversations remembered at once; past it, the least recently used idle one is
    /// forgotten (its session stays in its log; if it comes back it starts a new session).
    #[arg(long, value_name = "N", default_value_t = crate::proxy::server::DEFAULT_MAX_CONVERSATIONS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_conversations: usize,
}

fn upstream(args: &ProxyArgs) -> anyhow::Result<reqwest::Url> {
    let text = args.upstream.clone().unwrap_or_else(|| {
        match args.api {
            ApiFlavor::Openai => "https://api.openai.com",
            ApiFlavor::Anthropic => "https://api.anthropic.com",
        }
        .to_string()
    });
    // The text may hold credentials: errors name what is wrong, not the text.
    let url: reqwest::Url = text.parse().map_err(|e| {
        anyhow::anyhow!("--upstream is not a URL ({e}); give one such as https://api.openai.com")
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        anyhow::bail!(
            "--upstream {} must be an http:// or https:// URL",
            crate::proxy::server::shown_url(&url)
        );
    }
    Ok(url)
}

/// The limits and access the port is served with; the connection cap follows the
/// file-descriptor limit unless given.
fn service_options(args: &ProxyArgs) -> anyhow::Result<ServiceOptions> {
    let access = Access::from_env()?;
    let fds = service::raise_fd_limit();
    let fits = fds.map_or(
        service::DEFAULT_MAX_CONNECTIONS,
        service::connections_for_fds,
    );
    let max_connections = match args.max_connections {
        Some(n) => {
            let n = n as usize;
            if n > fits {
                errln!(
                    "soba proxy: warning: --max-connections {n} is more than the file-descriptor limit ({}) leaves room for ({fits}); past that, new connections are answered 503 until descriptors are free. Raise the limit (ulimit -n) or lower --max-connections",
                    fds.unwrap_or(0)
                );
            }
            n
        }
        None => service::DEFAULT_MAX_CONNECTIONS.min(fits),
    };
    Ok(ServiceOptions {
        max_connections,
        header_timeout: std::time::Duration::from_secs(args.header_timeout),
        idle_timeout: std::time::Duration::from_secs(args.idle_timeout),
        max_body_bytes: args.max_body,
        access,
    })
}

/// The addresses `--listen` names: an IP address and port, or a host name resolved here.
fn listen_addrs(listen: &str) -> anyhow::Result<Vec<SocketAddr>> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = listen.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    let usage = "give HOST:PORT, e.g. --listen 127.0.0.1:4860 or --listen localhost:4860";
    let Some((host, port)) = listen.rsplit_once(':') else {
        anyhow::bail!("--listen {listen} has no port; {usage}");
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        anyhow::bail!("--listen {listen} is not HOST:PORT; {usage}");
    }
    let addrs: Vec<SocketAddr> = listen
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve --listen {listen}; {usage}"))?
        .collect();
    if addrs.is_empty() {
        anyhow::bail!("--listen {listen} resolves to no address; {usage}");
    }
    Ok(addrs)
}

pub fn run(args: &ProxyArgs, common: &CommonArgs) -> anyhow::Result<()> {
    let listen = listen_addrs(&args.listen)?;
    check_listen(&args.listen, &listen, args.allow_remote)?;
    if args
        .summarizer_model
        .as_deref()
        .is_some_and(|m| m.trim().is_empty())
    {
        anyhow::bail!("--summarizer-model needs a model name, e.g. --summarizer-model gpt-4o-mini; leave it out to summarize with the conversation's own model");
    }
    let upstream = upstream(args)?;
    let options = service_options(args)?;
    if args.allow_remote && options.access.is_none() {
        errln!(
            "soba proxy: warning: listening beyond this machine without a token; anyone who reaches {} can use the keys your agents send. Set {} (see docs/proxy.md)",
            args.listen,
            service::TOKEN_ENV
        );
    }
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
    let settings = soba_core::config::DaemonSettings::load(common.config.clone())?;
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
            max_conversations: args.max_conversations,
        })?;
        let listener = tokio::net::TcpListener::bind(&listen[..])
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        errln!(
            "soba proxy: listening on http://{} → {} (workspace {}; {}, at most {} connections, bodies up to {})",
            listener.local_addr()?,
            crate::proxy::server::shown_url(&upstream),
            workspace.display(),
            if options.access.is_some() {
                "token required"
            } else {
                "no token"
            },
            options.max_connections,
            service::human_bytes(options.max_body_bytes),
        );
        proxy.serve_with(listener, options).await
    })
}
