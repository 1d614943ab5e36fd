//! Where each agent keeps its transcripts, and the newest one of a workspace.
//!
//! - Claude Code: `$CLAUDE_CONFIG_DIR` (default `~/.claude`) `/projects/<cwd>/*.jsonl`, the
//!   working directory with every character other than an ASCII letter or digit replaced by
//!   `-` (`/home/me/my_app` → `-home-me-my-app`).
//! - Codex: `$CODEX_HOME` (default `~/.codex`) `/sessions/YYYY/MM/DD/rollout-*.jsonl`; the
//!   workspace is the `cwd` of the file's `session_meta` record.
//! - pi: `$PI_CODING_AGENT_DIR` (default `~/.pi/agent`) `/sessions/--<cwd>--/*.jsonl`, the
//!   working directory without its leading `/` and with `/`, `\` and `:` replaced by `-`
//!   (pi's `getDefaultSessionDir`); `$PI_CODING_AGENT_SESSION_DIR` replaces the whole folder.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;

use crate::import::Format;

/// Lines of a Codex rollout read to find its `session_meta`.
const META_LINES: usize = 5;
/// Day folders of Codex sessions looked into, newest first.
const CODEX_DAYS: usize = 7;

/// An agent whose transcripts SOBA follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Agent {
    ClaudeCode,
    Codex,
    Pi,
}

impl Agent {
    pub const ALL: [Agent; 3] = [Agent::ClaudeCode, Agent::Codex, Agent::Pi];

    pub fn format(self) -> Format {
        match self {
            Agent::ClaudeCode => Format::ClaudeCode,
            Agent::Codex => Format::Codex,
            Agent::Pi => Format::Pi,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.format().as_str()
    }

    pub fn parse(s: &str) -> Result<Agent, String> {
        Agent::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| format!("unknown agent `{s}`; use claude-code, codex or pi"))
    }
}

/// The agents' home folders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Homes {
    pub claude: PathBuf,
    pub codex: PathBuf,
    /// pi's session folder (`<agent dir>/sessions`, or `$PI_CODING_AGENT_SESSION_DIR`).
    pub pi_sessions: PathBuf,
    /// Whether `pi_sessions` is pi's own per-workspace tree or one flat folder.
    pub pi_flat: bool,
}

impl Homes {
    /// From the agents' own environment variables, else their defaults under `$HOME`.
    pub fn from_env() -> Homes {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let home = var("HOME").unwrap_or_else(|| PathBuf::from("/"));
        let pi_session_dir = var("PI_CODING_AGENT_SESSION_DIR");
        Homes {
            claude: var("CLAUDE_CONFIG_DIR").unwrap_or_else(|| home.join(".claude")),
            codex: var("CODEX_HOME").unwrap_or_else(|| home.join(".codex")),
            pi_flat: pi_session_dir.is_some(),
            pi_sessions: pi_session_dir.unwrap_or_else(|| {
                var("PI_CODING_AGENT_DIR")
                    .unwrap_or_else(|| home.join(".pi/agent"))
                    .join("sessions")
            }),
        }
    }

    /// Where `agent` keeps transcripts (for messages).
    pub fn describe(&self, agent: Agent) -> String {
        match agent {
            Agent::ClaudeCode => self.claude.join("projects").display().to_string(),
            Agent::Codex => self.codex.join("sessions").display().to_string(),
            Agent::Pi => self.pi_sessions.display().to_string(),
        }
    }
}

impl Homes {
    /// Where `agent` keeps the transcripts of `workspace` (for messages): the workspace's own
    /// folder where the agent has one, else the folder searched by each file's recorded cwd.
    pub fn describe_for(&self, agent: Agent, workspace: &Path) -> String {
        let cwd = workspace.to_string_lossy();
        match agent {
            Agent::ClaudeCode => self
                .claude
                .join("projects")
                .join(claude_project_dir(&cwd))
                .display()
                .to_string(),
            Agent::Pi if !self.pi_flat => self
                .pi_sessions
                .join(pi_session_dir(&cwd))
                .display()
                .to_string(),
            Agent::Pi | Agent::Codex => self.describe(agent),
        }
    }
}

/// A transcript found for a workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub agent: Agent,
    pub path: PathBuf,
    pub modified: SystemTime,
}

/// Claude Code's project folder name for a working directory.
pub fn claude_project_dir(cwd: &str) -> String {
    cwd.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// pi's session folder name for a working directory.
pub fn pi_session_dir(cwd: &str) -> String {
    let trimmed = cwd
        .strip_prefix('/')
        .or_else(|| cwd.strip_prefix('\\'))
        .unwrap_or(cwd);
    let safe: String = trimmed
        .chars()
        .map(|c| {
            if matches!(c, '/' | '\\' | ':') {
                '-'
            } else {
                c
            }
        })
        .collect();
    format!("--{safe}--")
}

/// The newest transcript of `workspace`, of `agent` or of any agent.
pub fn newest(homes: &Homes, workspace: &Path, agent: Option<Agent>) -> Option<Found> {
    let agents: Vec<Agent> = match agent {
        Some(a) => vec![a],
        None => Agent::ALL.to_vec(),
    };
    agents
        .into_iter()
        .filter_map(|a| newest_of(homes, workspace, a))
        .max_by_key(|f| f.modified)
}

fn newest_of(homes: &Homes, workspace: &Path, agent: Agent) -> Option<Found> {
    let cwd = workspace.to_str()?;
    let candidates: Vec<PathBuf> = match agent {
        Agent::ClaudeCode => jsonl_in(&homes.claude.join("projects").join(claude_project_dir(cwd))),
        Agent::Pi if homes.pi_flat => jsonl_in(&homes.pi_sessions)
            .into_iter()
            .filter(|p| first_record_cwd(p, 1, pi_cwd).as_deref() == Some(cwd))
            .collect(),
        Agent::Pi => jsonl_in(&homes.pi_sessions.join(pi_session_dir(cwd))),
        Agent::Codex => codex_rollouts(&homes.codex.join("sessions"))
            .into_iter()
            .filter(|p| first_record_cwd(p, META_LINES, codex_cwd).as_deref() == Some(cwd))
            .collect(),
    };
    candidates
        .into_iter()
        .filter_map(|path| {
            let modified = std::fs::metadata(&path).ok()?.modified().ok()?;
            Some(Found {
                agent,
                path,
                modified,
            })
        })
        .max_by_key(|f| f.modified)
}

fn jsonl_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl") && p.is_file())
        .collect()
}

/// Rollouts of the newest day folders (`YYYY/MM/DD`).
fn codex_rollouts(sessions: &Path) -> Vec<PathBuf> {
    let mut days = Vec::new();
    for year in sorted_dirs(sessions) {
        for month in sorted_dirs(&year) {
            days.extend(sorted_dirs(&month));
        }
    }
    days.sort();
    days.iter()
        .rev()
        .take(CODEX_DAYS)
        .flat_map(|d| jsonl_in(d))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("rollout-"))
        })
        .collect()
}

fn sorted_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|es| {
            es.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn first_record_cwd(
    path: &Path,
    lines: usize,
    cwd_of: fn(&Value) -> Option<String>,
) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    BufReader::new(file)
        .lines()
        .take(lines)
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str::<Value>(&l).ok())
        .find_map(|v| cwd_of(&v))
}

fn codex_cwd(v: &Value) -> Option<String> {
    (v.get("type")?.as_str()? == "session_meta")
        .then(|| v.pointer("/payload/cwd")?.as_str().map(str::to_string))
        .flatten()
}

fn pi_cwd(v: &Value) -> Option<String> {
    (v.get("type")?.as_str()? == "session")
        .then(|| v.get("cwd")?.as_str().map(str::to_string))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_code_replaces_every_non_alphanumeric_character() {
        assert_eq!(
            claude_project_dir("/home/me/my_app.v2"),
            "-home-me-my-app-v2"
        );
    }

    #[test]
    fn messages_name_the_workspaces_own_folder_of_each_agent() {
        let homes = Homes {
            claude: PathBuf::from("/h/.claude"),
            codex: PathBuf::from("/h/.codex"),
            pi_sessions: PathBuf::from("/h/.pi/agent/sessions"),
            pi_flat: false,
        };
        let ws = Path::new("/work/my_app");
        assert_eq!(
            homes.describe_for(Agent::ClaudeCode, ws),
            "/h/.claude/projects/-work-my-app"
        );
        assert_eq!(
            homes.describe_for(Agent::Pi, ws),
            "/h/.pi/agent/sessions/--work-my_app--"
        );
        assert_eq!(homes.describe_for(Agent::Codex, ws), "/h/.codex/sessions");
        let flat = Homes {
            pi_flat: true,
            ..homes
        };
        assert_eq!(flat.describe_for(Agent::Pi, ws), "/h/.pi/agent/sessions");
    }

    #[test]
    fn pi_drops_the_leading_slash_and_wraps_in_dashes() {
        assert_eq!(pi_session_dir("/home/me/my_app"), "--home-me-my_app--");
        assert_eq!(pi_session_dir("C:\\work\\x"), "--C--work-x--");
    }
}
