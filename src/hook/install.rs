//! Claude Code's `settings.json` with SOBA's hooks added or removed, everything else kept.
//!
//! SOBA's hooks are told apart by their command: the program is `soba` (any path) and the
//! arguments are `hook claude-code`. Installing first removes them, then adds one
//! `SessionStart` group (matcher `compact`) and one `PreCompact` group, so installing twice
//! leaves the file as installing once, and a new binary path replaces the old one.

use serde_json::{json, Map, Value};

/// Seconds Claude Code waits for the hook; importing a long transcript takes a few.
pub const HOOK_TIMEOUT_SECONDS: u64 = 60;

/// The events SOBA hooks, with the matcher of its group.
const EVENTS: &[(&str, Option<&str>)] = &[("SessionStart", Some("compact")), ("PreCompact", None)];

/// Whether `command` runs SOBA's Claude Code hook.
pub fn is_soba_hook(command: &str) -> bool {
    let Some(program) = command.trim().strip_suffix("hook claude-code") else {
        return false;
    };
    if !program.ends_with(char::is_whitespace) {
        return false;
    }
    let program = program.trim().trim_matches(|c| c == '"' || c == '\'');
    std::path::Path::new(program)
        .file_name()
        .is_some_and(|n| n == "soba" || n == "soba.exe")
}

/// The command line installed: the binary's path, quoted when it has spaces.
pub fn hook_command(program: &str) -> String {
    if program.contains(char::is_whitespace) {
        format!("\"{program}\" hook claude-code")
    } else {
        format!("{program} hook claude-code")
    }
}

/// Parse a settings file's text: empty means `{}`; anything but a JSON object is refused.
pub fn parse_settings(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    let v: Value = serde_json::from_str(text).map_err(|e| format!("it is not valid JSON ({e})"))?;
    if !v.is_object() {
        return Err("it is not a JSON object".into());
    }
    check_hooks_shape(&v)?;
    Ok(v)
}

fn check_hooks_shape(settings: &Value) -> Result<(), String> {
    let Some(hooks) = settings.get("hooks") else {
        return Ok(());
    };
    let hooks = hooks
        .as_object()
        .ok_or("its `hooks` is not an object of events")?;
    for (event, groups) in hooks {
        let groups = groups
            .as_array()
            .ok_or_else(|| format!("its `hooks.{event}` is not a list of matcher groups"))?;
        for g in groups {
            if g.get("hooks").is_some_and(|h| !h.is_array()) {
                return Err(format!(
                    "a group in `hooks.{event}` has a `hooks` that is not a list"
                ));
            }
        }
    }
    Ok(())
}

/// `settings` without SOBA's hooks; groups and events left empty by that are removed, others
/// are kept exactly, also when empty.
pub fn uninstall(settings: &Value) -> Value {
    let mut out = settings.clone();
    let Some(hooks) = out.get_mut("hooks").and_then(Value::as_object_mut) else {
        return out;
    };
    let mut removed_any = false;
    for groups in hooks.values_mut() {
        let Some(list) = groups.as_array_mut() else {
            continue;
        };
        list.retain_mut(|g| {
            let Some(items) = g.get_mut("hooks").and_then(Value::as_array_mut) else {
                return true;
            };
            let before = items.len();
            items.retain(|h| {
                !h.get("command")
                    .and_then(Value::as_str)
                    .is_some_and(is_soba_hook)
            });
            let removed = items.len() < before;
            removed_any |= removed;
            !(removed && items.is_empty())
        });
    }
    if removed_any {
        hooks.retain(|_, groups| groups.as_array().is_none_or(|l| !l.is_empty()));
        if hooks.is_empty() {
            out.as_object_mut().map(|o| o.remove("hooks"));
        }
    }
    out
}

/// `settings` with SOBA's hooks, running `command`.
pub fn install(settings: &Value, command: &str) -> Value {
    let mut out = uninstall(settings);
    let root = out.as_object_mut().expect("parse_settings gives an object");
    let hooks = root
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .expect("checked by parse_settings");
    for (event, matcher) in EVENTS {
        let mut group = Map::new();
        if let Some(m) = matcher {
            group.insert("matcher".into(), json!(m));
        }
        group.insert(
            "hooks".into(),
            json!([{"type": "command", "command": command, "timeout": HOOK_TIMEOUT_SECONDS}]),
        );
        hooks
            .entry(*event)
            .or_insert_with(|| json!([]))
            .as_array_mut()
            .expect("checked by parse_settings")
            .push(Value::Object(group));
    }
    out
}

/// Settings text as written: two-space indented JSON with a final newline.
pub fn settings_text(settings: &Value) -> String {
    let mut s = serde_json::to_string_pretty(settings).expect("a JSON value serializes");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const CMD: &str = "/usr/local/bin/soba hook claude-code";

    fn users_settings() -> Value {
        json!({
            "model": "opus",
            "permissions": {"allow": ["Bash(cargo test:*)"]},
            "hooks": {
                "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "echo hi"}]}],
                "PostToolUse": [{"matcher": "Edit", "hooks": [{"type": "command", "command": "cargo fmt"}]}]
            }
        })
    }

    #[test]
    fn soba_hooks_are_recognized_by_program_and_arguments() {
        assert!(is_soba_hook(CMD));
        assert!(is_soba_hook("soba hook claude-code"));
        assert!(is_soba_hook("\"/Users/a b/bin/soba\" hook claude-code"));
        assert!(!is_soba_hook("echo soba hook claude-code-ish"));
        assert!(!is_soba_hook("/bin/other hook claude-code"));
        assert!(!is_soba_hook("soba import x"));
    }

    #[test]
    fn install_adds_both_hooks_and_keeps_everything_of_the_user() {
        let out = install(&users_settings(), CMD);
        assert_eq!(out["model"], "opus");
        assert_eq!(out["permissions"], users_settings()["permissions"]);
        assert_eq!(
            out["hooks"]["PostToolUse"],
            users_settings()["hooks"]["PostToolUse"]
        );
        let start = out["hooks"]["SessionStart"].as_array().unwrap();
        assert_eq!(start[0], users_settings()["hooks"]["SessionStart"][0]);
        assert_eq!(start[1]["matcher"], "compact");
        assert_eq!(start[1]["hooks"][0]["command"], CMD);
        assert_eq!(out["hooks"]["PreCompact"][0]["hooks"][0]["command"], CMD);
        assert_eq!(out["hooks"]["PreCompact"][0]["hooks"][0]["timeout"], 60);
    }

    #[test]
    fn installing_twice_is_installing_once_and_a_new_path_replaces_the_old() {
        let once = install(&users_settings(), CMD);
        assert_eq!(install(&once, CMD), once);
        let moved = install(&once, "/opt/soba/bin/soba hook claude-code");
        assert_eq!(moved["hooks"]["SessionStart"].as_array().unwrap().len(), 2);
        assert_eq!(
            moved["hooks"]["PreCompact"][0]["hooks"][0]["command"],
            "/opt/soba/bin/soba hook claude-code"
        );
    }

    #[test]
    fn uninstall_removes_exactly_sobas_hooks() {
        let users = users_settings();
        assert_eq!(uninstall(&install(&users, CMD)), users);
        assert_eq!(uninstall(&install(&json!({}), CMD)), json!({}));
        // A group the user shares with SOBA's hook keeps the user's hook.
        let shared = json!({"hooks": {"PreCompact": [{"hooks": [
            {"type": "command", "command": "backup.sh"},
            {"type": "command", "command": CMD}]}]}});
        assert_eq!(
            uninstall(&shared),
            json!({"hooks": {"PreCompact": [{"hooks": [{"type": "command", "command": "backup.sh"}]}]}})
        );
        // The user's own empty lists are not SOBA's to tidy.
        let empty = json!({"hooks": {"Stop": []}});
        assert_eq!(uninstall(&empty), empty);
    }

    #[test]
    fn malformed_settings_are_refused_with_the_reason() {
        assert!(parse_settings("{\"hooks\": ")
            .unwrap_err()
            .contains("not valid JSON"));
        assert!(parse_settings("[1]")
            .unwrap_err()
            .contains("not a JSON object"));
        assert!(parse_settings(r#"{"hooks": []}"#)
            .unwrap_err()
            .contains("`hooks`"));
        assert!(parse_settings(r#"{"hooks": {"Stop": {}}}"#)
            .unwrap_err()
            .contains("hooks.Stop"));
        assert_eq!(parse_settings("  \n").unwrap(), json!({}));
    }
}
