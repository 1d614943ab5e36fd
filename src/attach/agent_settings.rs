//! What a followed agent's own settings files say about its default model and about when it
//! compacts itself: Claude Code's `settings.json` files, Codex's `config.toml`, pi's
//! `settings.json` files.
//!
//! Before the agent's first response names its model, its settings are the only honest source
//! of the model it will use; its compaction settings move the threshold at which it compacts.
//! A settings file is read only where it lives in the agent's folder: a link out of that folder
//! is refused, so following a transcript never makes SOBA read a file elsewhere on the machine.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::discover::Agent;
use super::integration::SettingsHomes;

/// The model an agent's settings file names as its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultModel {
    pub name: String,
    /// The file that names it (the one that wins where several do).
    pub file: PathBuf,
}

/// What the agent's settings say, and what could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentSettings {
    pub default_model: Option<DefaultModel>,
    /// Codex `model_auto_compact_token_limit`: a configured threshold, which can only lower the
    /// model's default.
    pub auto_compact_token_limit: Option<u64>,
    /// pi `compaction.reserveTokens`: pi compacts when the context passes its window less these.
    pub reserve_tokens: Option<u64>,
    /// pi `compaction.enabled`: `false` when pi does not compact by itself.
    pub auto_compact_enabled: Option<bool>,
    /// Files that exist but were not read, each with why and what to do.
    pub problems: Vec<String>,
}

/// Reads `agent`'s settings: the user's in the agent's home, then the workspace's, the later
/// winning, as the agent itself reads them.
pub fn read(agent: Agent, homes: &SettingsHomes, workspace: &Path) -> AgentSettings {
    let mut settings = AgentSettings::default();
    match agent {
        Agent::ClaudeCode => {
            let project = workspace.join(".claude");
            let files = [
                (homes.claude.join("settings.json"), homes.claude.clone()),
                (project.join("settings.json"), project.clone()),
                (project.join("settings.local.json"), project),
            ];
            for (file, folder) in files {
                if let Some(json) = settings.json_within(&file, &folder) {
                    if let Some(model) = json.get("model").and_then(Value::as_str) {
                        settings.name_model(model, &file);
                    }
                }
            }
        }
        Agent::Pi => {
            let project = workspace.join(".pi");
            let files = [
                (homes.pi.join("settings.json"), homes.pi.clone()),
                (project.join("settings.json"), project),
            ];
            for (file, folder) in files {
                let Some(json) = settings.json_within(&file, &folder) else {
                    continue;
                };
                if let Some(model) = json.get("defaultModel").and_then(Value::as_str) {
                    settings.name_model(model, &file);
                }
                let compaction = json.get("compaction");
                if let Some(reserve) = compaction.and_then(|c| c["reserveTokens"].as_u64()) {
                    settings.reserve_tokens = Some(reserve);
                }
                if let Some(enabled) = compaction.and_then(|c| c["enabled"].as_bool()) {
                    settings.auto_compact_enabled = Some(enabled);
                }
            }
        }
        Agent::Codex => {
            let file = homes.codex.join("config.toml");
            if let Some(text) = settings.text_within(&file, &homes.codex) {
                let top = top_level_keys(&text);
                if let Some(TomlValue::String(model)) = top.get("model") {
                    settings.name_model(model, &file);
                }
                if let Some(TomlValue::Integer(limit)) = top.get("model_auto_compact_token_limit") {
                    settings.auto_compact_token_limit = u64::try_from(*limit).ok();
                }
            }
        }
    }
    settings
}

impl AgentSettings {
    fn name_model(&mut self, name: &str, file: &Path) {
        let name = name.trim();
        if !name.is_empty() {
            self.default_model = Some(DefaultModel {
                name: name.to_string(),
                file: file.to_path_buf(),
            });
        }
    }

    fn json_within(&mut self, file: &Path, folder: &Path) -> Option<Value> {
        let text = self.text_within(file, folder)?;
        match serde_json::from_str(&text) {
            Ok(json) => Some(json),
            Err(e) => {
                self.problems.push(format!(
                    "{} is not valid JSON ({e}); its model and compaction settings were not read",
                    file.display()
                ));
                None
            }
        }
    }

    fn text_within(&mut self, file: &Path, folder: &Path) -> Option<String> {
        match read_within(file, folder) {
            Ok(text) => text,
            Err(problem) => {
                self.problems.push(problem);
                None
            }
        }
    }
}

/// The text of `file` when it exists and, links resolved, lies inside `folder`; `Ok(None)` when
/// there is no such file.
pub fn read_within(file: &Path, folder: &Path) -> Result<Option<String>, String> {
    match std::fs::symlink_metadata(file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", file.display())),
        Ok(_) => {}
    }
    let real = file
        .canonicalize()
        .map_err(|e| format!("cannot resolve {}: {e}", file.display()))?;
    let home = folder
        .canonicalize()
        .map_err(|e| format!("cannot resolve {}: {e}", folder.display()))?;
    if !real.starts_with(&home) {
        return Err(format!(
            "{} links to {}, outside {}; SOBA reads the agent's settings only inside its folder, \
             so it was not read (put the file itself in {} for SOBA to read it)",
            file.display(),
            real.display(),
            home.display(),
            folder.display()
        ));
    }
    std::fs::read_to_string(&real)
        .map(Some)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum TomlValue {
    String(String),
    Integer(i64),
}

/// The string and integer keys of a TOML file's top level (before its first table), which is
/// where Codex keeps `model` and `model_auto_compact_token_limit`. Other values are skipped.
fn top_level_keys(text: &str) -> std::collections::BTreeMap<String, TomlValue> {
    let mut keys = std::collections::BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            break;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim().trim_matches('"').to_string();
        let value = value.trim();
        let parsed = if let Some(rest) = value.strip_prefix('"') {
            rest.split_once('"')
                .map(|(s, _)| TomlValue::String(s.to_string()))
        } else if let Some(rest) = value.strip_prefix('\'') {
            rest.split_once('\'')
                .map(|(s, _)| TomlValue::String(s.to_string()))
        } else {
            let number: String = value
                .split('#')
                .next()
                .unwrap_or("")
                .trim()
                .replace('_', "");
            number.parse().ok().map(TomlValue::Integer)
        };
        if let Some(v) = parsed {
            keys.insert(key, v);
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn homes(dir: &Path) -> SettingsHomes {
        let homes = SettingsHomes {
            claude: dir.join("claude-home"),
            pi: dir.join("pi-home"),
            codex: dir.join("codex-home"),
        };
        for d in [&homes.claude, &homes.pi, &homes.codex] {
            std::fs::create_dir_all(d).unwrap();
        }
        homes
    }

    #[test]
    fn claude_codes_project_settings_name_the_model_over_the_users() {
        let dir = tempfile::tempdir().unwrap();
        let homes = homes(dir.path());
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".claude")).unwrap();
        assert_eq!(
            read(Agent::ClaudeCode, &homes, &ws),
            AgentSettings::default()
        );
        std::fs::write(
            homes.claude.join("settings.json"),
            json!({"model": "claude-opus-4-1"}).to_string(),
        )
        .unwrap();
        let user = read(Agent::ClaudeCode, &homes, &ws);
        assert_eq!(user.default_model.unwrap().name, "claude-opus-4-1");
        std::fs::write(
            ws.join(".claude/settings.json"),
            json!({"model": "claude-sonnet-4-5"}).to_string(),
        )
        .unwrap();
        let project = read(Agent::ClaudeCode, &homes, &ws).default_model.unwrap();
        assert_eq!(project.name, "claude-sonnet-4-5");
        assert_eq!(project.file, ws.join(".claude/settings.json"));
    }

    #[cfg(unix)]
    #[test]
    fn a_settings_file_linking_out_of_the_agents_folder_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let homes = homes(dir.path());
        let elsewhere = dir.path().join("elsewhere.json");
        std::fs::write(&elsewhere, json!({"model": "claude-opus-4-1"}).to_string()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, homes.claude.join("settings.json")).unwrap();
        let s = read(Agent::ClaudeCode, &homes, &dir.path().join("ws"));
        assert_eq!(s.default_model, None);
        assert_eq!(s.problems.len(), 1, "{:?}", s.problems);
        assert!(s.problems[0].contains("outside"), "{}", s.problems[0]);
        assert!(s.problems[0].contains("was not read"), "{}", s.problems[0]);
    }

    #[cfg(unix)]
    #[test]
    fn a_link_inside_the_agents_folder_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let homes = homes(dir.path());
        let real = homes.claude.join("real.json");
        std::fs::write(&real, json!({"model": "claude-haiku-4-5"}).to_string()).unwrap();
        std::os::unix::fs::symlink(&real, homes.claude.join("settings.json")).unwrap();
        let s = read(Agent::ClaudeCode, &homes, &dir.path().join("ws"));
        assert_eq!(s.default_model.unwrap().name, "claude-haiku-4-5");
        assert!(s.problems.is_empty());
    }

    #[test]
    fn a_settings_file_that_is_not_json_is_named_as_a_problem() {
        let dir = tempfile::tempdir().unwrap();
        let homes = homes(dir.path());
        std::fs::write(homes.claude.join("settings.json"), "{ model: ").unwrap();
        let s = read(Agent::ClaudeCode, &homes, &dir.path().join("ws"));
        assert_eq!(s.default_model, None);
        assert!(s.problems[0].contains("not valid JSON"), "{:?}", s.problems);
    }

    #[test]
    fn codex_config_names_its_model_and_auto_compact_limit_at_the_top_level() {
        let dir = tempfile::tempdir().unwrap();
        let homes = homes(dir.path());
        std::fs::write(
            homes.codex.join("config.toml"),
            "# codex\nmodel = \"gpt-5-codex\"\nmodel_auto_compact_token_limit = 200_000 # lower\n\
             [profiles.fast]\nmodel = \"gpt-5-mini\"\n",
        )
        .unwrap();
        let s = read(Agent::Codex, &homes, dir.path());
        assert_eq!(s.default_model.unwrap().name, "gpt-5-codex");
        assert_eq!(s.auto_compact_token_limit, Some(200_000));
    }

    #[test]
    fn pi_settings_give_its_reserve_and_whether_it_compacts() {
        let dir = tempfile::tempdir().unwrap();
        let homes = homes(dir.path());
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".pi")).unwrap();
        std::fs::write(
            homes.pi.join("settings.json"),
            json!({"defaultModel": "gpt-5", "compaction": {"reserveTokens": 20000}}).to_string(),
        )
        .unwrap();
        std::fs::write(
            ws.join(".pi/settings.json"),
            json!({"compaction": {"enabled": false}}).to_string(),
        )
        .unwrap();
        let s = read(Agent::Pi, &homes, &ws);
        assert_eq!(s.default_model.unwrap().name, "gpt-5");
        assert_eq!(s.reserve_tokens, Some(20000));
        assert_eq!(s.auto_compact_enabled, Some(false));
    }
}
