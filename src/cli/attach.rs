//! `soba attach`: follow a live agent transcript through the shared daemon and print its
//! budget as it changes.
//!
//! The daemon does the following (`soba/attach`), so every editor of the workspace sees the
//! same session; this command is one more client of it that prints budget lines until the
//! agent goes away (`soba/session/closed`) or the command is stopped.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::CommonArgs;
use crate::daemon::paths::Paths;
use crate::daemon::socket;
use soba_core::util::human_tokens;

#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["transcript", "latest"])))]
pub struct AttachArgs {
    /// The agent's transcript (a Claude Code, Codex or pi session file).
    pub transcript: Option<PathBuf>,
    /// Follow the newest transcript of the workspace in the agents' homes.
    #[arg(long)]
    pub latest: bool,
    /// The agent; recognized from the transcript when left out.
    #[arg(long, value_enum)]
    pub agent: Option<AgentChoice>,
    /// The workspace the session belongs to (default: the current folder).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Seconds without a write (and no process holding the transcript) after which the
    /// agent counts as gone.
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    pub idle: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AgentChoice {
    ClaudeCode,
    Codex,
    Pi,
}

impl AgentChoice {
    fn as_str(self) -> &'static str {
        match self {
            AgentChoice::ClaudeCode => "claude-code",
            AgentChoice::Codex => "codex",
            AgentChoice::Pi => "pi",
        }
    }
}

pub fn run(args: &AttachArgs, common: &CommonArgs) -> anyhow::Result<()> {
    if !(args.idle.is_finite() && args.idle > 0.0) {
        bail!("--idle {}: give a positive number of seconds", args.idle);
    }
    let workspace = match &args.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir()?,
    };
    let workspace = std::fs::canonicalize(&workspace)
        .with_context(|| format!("cannot open workspace {}", workspace.display()))?;
    let transcript = match &args.transcript {
        Some(t) => {
            Some(std::fs::canonicalize(t).with_context(|| format!("cannot read {}", t.display()))?)
        }
        None => None,
    };
    let mut params = json!({ "workspace": workspace, "idleSecs": args.idle });
    if let Some(t) = &transcript {
        params["transcript"] = json!(t);
    }
    if let Some(a) = args.agent {
        params["agent"] = json!(a.as_str());
    }
    let paths = Paths::from_env()?;
    let mut extra = Vec::new();
    if let Some(c) = &common.config {
        extra.push("--config".into());
        extra.push(c.clone().into_os_string());
    }
    let json_out = common.json;
    // The session follows this client's config and keys, whoever started the daemon.
    let (hello, warnings) =
        crate::daemon::connection::gather_own(common.config.as_deref(), Some(&workspace))?;
    for w in &warnings {
        errln!("warning: {w}");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let withheld: Vec<&str> = hello.env.keys().map(String::as_str).collect();
        let start = || socket::spawn_daemon_process(&paths, &extra, &withheld);
        let mut stream = socket::connect_or_start(&paths, start, socket::START_TIMEOUT).await?;
        if let Some(w) = socket::send_hello(&mut stream, &hello).await? {
            errln!("warning: {w}");
        }
        follow(stream, &workspace, params, json_out).await
    })
}

async fn follow(
    stream: tokio::net::UnixStream,
    workspace: &std::path::Path,
    params: Value,
    json_out: bool,
) -> anyhow::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    let folder = json!([{ "uri": format!("file://{}", workspace.display()), "name": "workspace" }]);
    send(&mut w, json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"processId": std::process::id(), "rootUri": null, "capabilities": {}, "workspaceFolders": folder}})).await?;
    reply(&mut r, 1).await?;
    send(
        &mut w,
        json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
    )
    .await?;
    send(
        &mut w,
        json!({"jsonrpc": "2.0", "id": 2, "method": "soba/attach", "params": params}),
    )
    .await?;
    let attached = reply(&mut r, 2).await?;
    let session = attached["sessionId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if json_out {
        println!("{}", json!({"event": "attached", "result": attached}));
    } else {
        println!(
            "following {} ({}) into session {} ({} entries imported)",
            attached["transcript"].as_str().unwrap_or("?"),
            attached["agent"].as_str().unwrap_or("?"),
            session,
            attached["imported"]
        );
        println!("{}", budget_line(&attached["budget"]));
    }
    let mut last = attached["budget"]["effectiveTokens"].as_u64();
    loop {
        let msg = tokio::select! {
            m = read_frame(&mut r) => m?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let Some(msg) = msg else {
            bail!("the daemon closed the connection");
        };
        let p = &msg["params"];
        match msg["method"].as_str() {
            Some("soba/budgetChanged") if p["sessionId"] == session.as_str() => {
                let now = p["effectiveTokens"].as_u64();
                if now != last {
                    last = now;
                    if json_out {
                        println!("{}", json!({"event": "budget", "budget": p}));
                    } else {
                        println!("{}", budget_line(p));
                    }
                }
            }
            Some("soba/session/closed") if p["sessionId"] == session.as_str() => {
                if json_out {
                    println!("{}", json!({"event": "closed", "sessionId": session}));
                } else {
                    println!("the agent went away; session {session} closed");
                }
                return Ok(());
            }
            Some("window/showMessage") if !json_out => {
                eprintln!("soba: {}", p["message"].as_str().unwrap_or(""));
            }
            _ => {}
        }
    }
}

/// `12:04:31  41.2k / 168k tokens (25%)  soft 134k`.
fn budget_line(b: &Value) -> String {
    let effective = b["effectiveTokens"].as_u64().unwrap_or(0);
    let hard = b["hardLimit"].as_u64().unwrap_or(0);
    let soft = b["softLimit"].as_u64().unwrap_or(0);
    let pct = (effective * 100).checked_div(hard).unwrap_or(0);
    format!(
        "{}  {} / {} tokens ({pct}%)  soft {}{}",
        soba_core::util::now_rfc3339().get(11..19).unwrap_or(""),
        human_tokens(effective),
        human_tokens(hard),
        human_tokens(soft),
        b["model"]
            .as_str()
            .map(|m| format!("  {m}"))
            .unwrap_or_default()
    )
}

async fn send(w: &mut tokio::net::unix::OwnedWriteHalf, msg: Value) -> anyhow::Result<()> {
    let body = serde_json::to_vec(&msg)?;
    w.write_all(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes())
        .await?;
    w.write_all(&body).await?;
    w.flush().await?;
    Ok(())
}

/// The answer to request `id`; notifications before it are dropped.
async fn reply<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R, id: u64) -> anyhow::Result<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let msg = tokio::time::timeout_at(deadline, read_frame(r))
            .await
            .context("the daemon did not answer within 60 s")??
            .context("the daemon closed the connection")?;
        if msg["id"] == id {
            if let Some(e) = msg.get("error") {
                bail!("{}", e["message"].as_str().unwrap_or("the daemon refused"));
            }
            return Ok(msg["result"].clone());
        }
    }
}

async fn read_frame<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
) -> anyhow::Result<Option<Value>> {
    let mut length = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("Content-Length:") {
            length = Some(v.trim().parse::<usize>()?);
        }
    }
    let n = length.context("a frame from the daemon without Content-Length")?;
    let mut body = vec![0; n];
    r.read_exact(&mut body).await?;
    Ok(Some(serde_json::from_slice(&body)?))
}
