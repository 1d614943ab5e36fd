//! Whether a followed agent hands its compactions to SOBA: the Claude Code hooks in one of
//! Claude Code's settings files, or the SOBA pi extension among pi's packages.
//!
//! Following a transcript only reads it; these integrations are the only ways SOBA's capsule
//! reaches such an agent, and both act when the agent compacts, not when SOBA would.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::discover::Agent;

/// The name in the pi extension's `package.json` (editors/pi).
pub const PI_EXTENSION_PACKAGE: &str = "soba-pi";

/// An integration through which the agent's own compactions become SOBA's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Integration {
    /// `soba hook install claude-code`: SOBA's capsule is added after each Claude Code compaction.
    ClaudeCodeHook,
    /// editors/pi: pi's compactions are SOBA's, the capsule becomes pi's summary.
    PiExtension,
}

/// Where the agents keep their settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsHomes {
    /// `$CLAUDE_CONFIG_DIR`, else `~/.claude`.
    pub claude: PathBuf,
    /// `$PI_CODING_AGENT_DIR`, else `~/.pi/agent`.
    pub pi: PathBuf,
    /// `$CODEX_HOME`, else `~/.codex`.
    pub codex: PathBuf,
}

impl SettingsHomes {
    pub fn from_env() -> SettingsHomes {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let home = var("HOME").unwrap_or_else(|| PathBuf::from("/"));
        SettingsHomes {
            claude: var("CLAUDE_CONFIG_DIR").unwrap_or_else(|| home.join(".claude")),
            pi: var("PI_CODING_AGENT_DIR").unwrap_or_else(|| home.join(".pi/agent")),
            codex: var("CODEX_HOME").unwrap_or_else(|| home.join(".codex")),
        }
    }
}

/// The integration installed for `agent` in `workspace`, if any. Codex has none.
pub fn installed(agent: Agent, homes: &SettingsHomes, workspace: &Path) -> Option<Integration> {
    match agent {
        Agent::ClaudeCode => {
            let files = [
                homes.claude.join("settings.json"),
                workspace.join(".claude/settings.json"),
                workspace.join(".claude/settings.local.json"),
            ];
            files
                .iter()
                .any(|f| read_json(f).is_some_and(|s| has_claude_code_hook(&s)))
                .then_some(Integration::ClaudeCodeHook)
        }
        Agent::Pi => {
            let files = [
                (homes.pi.join("settings.json"), homes.pi.clone()),
                (workspace.join(".pi/settings.json"), workspace.join(".pi")),
            ];
            files
                .iter()
                .any(|(f, base)| read_json(f).is_some_and(|s| has_pi_extension(&s, base)))
                .then_some(Integration::PiExtension)
        }
        Agent::Codex => None,
    }
}

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Whether the settings run SOBA's hook when a compaction is done (`SessionStart`), the hook
/// that adds SOBA's capsule.
pub fn has_claude_code_hook(settings: &Value) -> bool {
    let Some(groups) = settings
        .pointer("/hooks/SessionStart")
        .and_then(Value::as_array)
    else {
        return false;
    };
    groups
        .iter()
        .filter_map(|g| g.get("hooks").and_then(Value::as_array))
        .flatten()
        .filter_map(|h| h.get("command").and_then(Value::as_str))
        .any(crate::hook::install::is_soba_hook)
}

/// Whether pi's `packages` name the SOBA extension: a folder (relative to `base`, the folder
/// the settings file is in) whose `package.json` is `soba-pi`, or the npm package itself.
pub fn has_pi_extension(settings: &Value, base: &Path) -> bool {
    let Some(packages) = settings.get("packages").and_then(Value::as_array) else {
        return false;
    };
    packages
        .iter()
        .filter_map(|p| {
            p.as_str()
                .or_else(|| p.get("source").and_then(Value::as_str))
        })
        .any(|source| {
            if let Some(spec) = source.strip_prefix("npm:") {
                return spec == PI_EXTENSION_PACKAGE
                    || spec.starts_with(&format!("{PI_EXTENSION_PACKAGE}@"));
            }
            let folder = base.join(source);
            read_json(&folder.join("package.json")).is_some_and(|p| {
                p.get("name").and_then(Value::as_str) == Some(PI_EXTENSION_PACKAGE)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_claude_code_hook_counts_only_when_soba_runs_after_a_compaction() {
        let with = json!({"hooks": {"SessionStart": [{"matcher": "compact", "hooks": [
            {"type": "command", "command": "/home/me/.cargo/bin/soba hook claude-code"}]}]}});
        assert!(has_claude_code_hook(&with));
        let other = json!({"hooks": {"SessionStart": [{"hooks": [
            {"type": "command", "command": "echo hi"}]}],
            "PreCompact": [{"hooks": [{"type": "command", "command": "soba hook claude-code"}]}]}});
        assert!(!has_claude_code_hook(&other));
        assert!(!has_claude_code_hook(&json!({})));
    }

    #[test]
    fn the_pi_extension_is_found_by_its_package_name_not_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let ext = dir.path().join("checkout/editors/pi");
        std::fs::create_dir_all(&ext).unwrap();
        std::fs::write(ext.join("package.json"), r#"{"name": "soba-pi"}"#).unwrap();
        let other = dir.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("package.json"), r#"{"name": "pi-todo"}"#).unwrap();
        let base = dir.path();
        assert!(has_pi_extension(
            &json!({"packages": [ext.display().to_string()]}),
            base
        ));
        assert!(has_pi_extension(
            &json!({"packages": ["checkout/editors/pi"]}),
            base
        ));
        assert!(has_pi_extension(
            &json!({"packages": ["npm:soba-pi@0.1.0"]}),
            base
        ));
        assert!(!has_pi_extension(
            &json!({"packages": ["other", "npm:soba-pi-fork"]}),
            base
        ));
        assert!(!has_pi_extension(&json!({"packages": "soba-pi"}), base));
    }

    #[test]
    fn an_installed_integration_is_found_in_the_workspace_settings() {
        let dir = tempfile::tempdir().unwrap();
        let homes = SettingsHomes {
            claude: dir.path().join("claude-home"),
            pi: dir.path().join("pi-home"),
            codex: dir.path().join("codex-home"),
        };
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".claude")).unwrap();
        assert_eq!(installed(Agent::ClaudeCode, &homes, &ws), None);
        std::fs::write(
            ws.join(".claude/settings.json"),
            json!({"hooks": {"SessionStart": [{"matcher": "compact", "hooks": [
                {"type": "command", "command": "soba hook claude-code"}]}]}})
            .to_string(),
        )
        .unwrap();
        assert_eq!(
            installed(Agent::ClaudeCode, &homes, &ws),
            Some(Integration::ClaudeCodeHook)
        );
        assert_eq!(installed(Agent::Codex, &homes, &ws), None);
        assert_eq!(installed(Agent::Pi, &homes, &ws), None);
    }
}
