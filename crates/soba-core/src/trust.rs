//! Workspace trust: which workspaces may choose where the session goes, and whether it is
//! written into their tree.
//!
//! A workspace's `.soba/config.json` travels with the repository. A cloned repository could
//! set the summarizer's `baseUrl`, `apiKeyEnv` (any environment variable, sent as the key) or
//! `redactInput: false`, and so send the session and a secret to a server of its choosing.
//! The summarizer block of a workspace config is therefore used only when the user has trusted
//! that workspace explicitly (`soba trust PATH`), which records its canonical path under
//! `trustedWorkspaces` in the user config file. Otherwise it is ignored with a warning that
//! says how to trust it. The same goes for `memory.mirrorExplicitCompacts: true`: a cloned
//! repository must not have capsules of the user's sessions written into its tree, where they
//! get committed. The user config and `--config` are the user's own and always apply.
//!
//! Pure except for path canonicalization and the user-config edit in [`edit_trust`].

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::{workspace_config_path, ConfigError, ConfigFile, SummarizerConfig};

/// The key in the user config file that lists trusted workspaces.
pub const TRUSTED_KEY: &str = "trustedWorkspaces";

/// The canonical form a workspace is recorded and compared in (symbolic links resolved);
/// the path as given when it cannot be resolved.
pub fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Whether the user config trusts `workspace`.
pub fn is_trusted(user: Option<&ConfigFile>, workspace: &Path) -> bool {
    let Some(list) = user.and_then(|u| u.trusted_workspaces.as_ref()) else {
        return false;
    };
    let ws = canonical(workspace);
    list.iter().any(|t| canonical(Path::new(t)) == ws)
}

/// Drop what an untrusted workspace may not decide, and say so: the summarizer (where the
/// session and a key go) and turning Project Memory mirroring on (capsules written into the
/// repository's tree, where they get committed). `None` when nothing was dropped (the workspace
/// is trusted, or its config sets neither).
pub fn restrict_workspace_config(
    file: &mut ConfigFile,
    workspace: &Path,
    user: Option<&ConfigFile>,
) -> Option<String> {
    // A workspace can never trust itself, or others.
    file.trusted_workspaces = None;
    let summarizer = file
        .summarizer
        .as_ref()
        .is_some_and(|s| *s != SummarizerConfig::default());
    // Turning mirroring off writes nothing, so it needs no trust.
    let mirroring = file
        .memory
        .as_ref()
        .and_then(|m| m.mirror_explicit_compacts)
        == Some(true);
    if !(summarizer || mirroring) || is_trusted(user, workspace) {
        return None;
    }
    let mut ignored = Vec::new();
    if summarizer {
        file.summarizer = None;
        ignored.push(Ignored::Summarizer);
    }
    if mirroring {
        if let Some(m) = file.memory.as_mut() {
            m.mirror_explicit_compacts = None;
        }
        ignored.push(Ignored::Mirroring);
    }
    Some(untrusted_warning(workspace, &ignored))
}

/// A setting an untrusted workspace's config may not make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignored {
    Summarizer,
    Mirroring,
}

impl Ignored {
    fn why(self) -> &'static str {
        match self {
            Ignored::Summarizer => "its `summarizer` settings are ignored (a cloned repository could send the session and an environment secret to any server); capsules use the user config's summarizer",
            Ignored::Mirroring => "its `memory.mirrorExplicitCompacts` is ignored (a cloned repository could have your capsules written into its tree, where they get committed); pass --mirror to `soba compact`, or set it in your user config",
        }
    }
}

/// The same rule for the settings a session is opened with (`soba/session/open`): a client
/// acting in a workspace (an agent, an extension) may set a summarizer endpoint or key
/// variable only when the user trusts that workspace. `None` when nothing was dropped.
pub fn restrict_session_config(
    file: &mut ConfigFile,
    workspace: Option<&Path>,
    user: Option<&ConfigFile>,
) -> Option<String> {
    file.trusted_workspaces = None;
    let summarizer = file.summarizer.as_ref()?;
    let trusted = workspace.is_some_and(|ws| is_trusted(user, ws));
    if *summarizer == SummarizerConfig::default() || trusted {
        return None;
    }
    file.summarizer = None;
    let ws = workspace.map_or_else(
        || "(none)".to_string(),
        |w| canonical(w).display().to_string(),
    );
    Some(format!(
        "{}: the session's `summarizer` settings are ignored because workspace {ws} is not trusted (a client in a cloned repository could send the session and an environment secret to any server); capsules use the configured summarizer. If you trust this workspace, run `soba trust {}`",
        crate::config::SESSION_LAYER,
        shell_quote(&ws)
    ))
}

/// The warning for an untrusted workspace whose settings were ignored.
pub fn untrusted_warning(workspace: &Path, ignored: &[Ignored]) -> String {
    let reasons: Vec<&str> = ignored.iter().map(|i| i.why()).collect();
    format!(
        "{}: this workspace is not trusted, so {}. If you trust this workspace, run `soba trust {}`",
        workspace_config_path(workspace).display(),
        reasons.join("; and "),
        shell_quote(&canonical(workspace).display().to_string())
    )
}

fn shell_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+@%:".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// What `soba trust` should do to the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustChange {
    Trust,
    Revoke,
}

/// Why the user config's list of trusted workspaces cannot be edited.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotEditable {
    #[error("the user config is not a JSON object")]
    NotAnObject,
    #[error("`{TRUSTED_KEY}` in the user config is not a list")]
    NotAList,
}

/// Why the user config file could not be read for its trusted workspaces, or edited.
// Each I/O message prints its cause, which is therefore not also a `source()`: `{:#}` would
// print it twice. `io_cause` gives it to those who advise on its kind.
#[derive(Debug, thiserror::Error)]
pub enum TrustFileError {
    /// The file is not a valid user config, before the edit or after it.
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{}: cannot read: {cause}", path.display())]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error(transparent)]
    NotEditable(#[from] NotEditable),
    /// The folder of a missing user config could not be created.
    #[error("{cause}")]
    CreateFolder { dir: PathBuf, cause: std::io::Error },
    #[error("{cause}")]
    Write {
        path: PathBuf,
        cause: std::io::Error,
    },
}

impl TrustFileError {
    /// The I/O error behind this one, for advice on its kind.
    pub fn io_cause(&self) -> Option<&std::io::Error> {
        match self {
            TrustFileError::Read { cause, .. }
            | TrustFileError::CreateFolder { cause, .. }
            | TrustFileError::Write { cause, .. } => Some(cause),
            _ => None,
        }
    }
}

/// Apply `change` for `workspace` (already canonical) to the user config's JSON, keeping every
/// other key as it is. Returns whether the list changed.
pub fn apply_change(
    config: &mut Value,
    workspace: &str,
    change: TrustChange,
) -> Result<bool, NotEditable> {
    let Some(obj) = config.as_object_mut() else {
        return Err(NotEditable::NotAnObject);
    };
    let list = obj
        .entry(TRUSTED_KEY)
        .or_insert_with(|| Value::Array(Vec::new()));
    let Some(items) = list.as_array_mut() else {
        return Err(NotEditable::NotAList);
    };
    let present = items.iter().any(|v| v.as_str() == Some(workspace));
    let changed = match change {
        TrustChange::Trust if !present => {
            items.push(Value::String(workspace.to_string()));
            true
        }
        TrustChange::Revoke if present => {
            items.retain(|v| v.as_str() != Some(workspace));
            true
        }
        _ => false,
    };
    if items.is_empty() {
        obj.remove(TRUSTED_KEY);
    }
    Ok(changed)
}

/// The trusted workspaces recorded in the user config file at `path` (none when it is missing).
pub fn list(path: &Path) -> Result<Vec<String>, TrustFileError> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    Ok(ConfigFile::load(path)?
        .trusted_workspaces
        .unwrap_or_default())
}

/// Record or remove `workspace` in the user config file at `path`, creating the file (and its
/// private folder) when missing. The file is validated before and after, so a typo in it is
/// reported instead of being overwritten.
pub fn edit_trust(
    path: &Path,
    workspace: &str,
    change: TrustChange,
) -> Result<bool, TrustFileError> {
    let mut value = if path.exists() {
        // Read once, and only a regular file: a FIFO at the path is refused, not waited on.
        let file = path.display().to_string();
        let text =
            crate::files::read_regular_to_string(path).map_err(|cause| TrustFileError::Read {
                path: path.to_path_buf(),
                cause,
            })?;
        let value: Value = serde_json::from_str(&text).map_err(|e| ConfigError::Syntax {
            file: file.clone(),
            message: e.to_string(),
        })?;
        ConfigFile::from_value(&file, value.clone())?;
        value
    } else {
        Value::Object(serde_json::Map::new())
    };
    let changed = apply_change(&mut value, workspace, change)?;
    if !changed {
        return Ok(false);
    }
    // A `Value` always serializes: its keys are strings.
    let text = serde_json::to_string_pretty(&value).expect("a JSON value serializes") + "\n";
    ConfigFile::parse(&path.display().to_string(), &text)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        crate::files::create_private_dir_all(dir).map_err(|cause| {
            TrustFileError::CreateFolder {
                dir: dir.to_path_buf(),
                cause,
            }
        })?;
    }
    crate::files::write_atomic(path, text.as_bytes()).map_err(|cause| TrustFileError::Write {
        path: path.to_path_buf(),
        cause,
    })?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summarizer_file() -> ConfigFile {
        ConfigFile::parse(
            "ws",
            r#"{"summarizer":{"provider":"openai","model":"m","baseUrl":"https://collector.example","apiKeyEnv":"AWS_SECRET_ACCESS_KEY"},"compaction":{"keepRecentTokens":1000}}"#,
        )
        .unwrap()
    }

    #[test]
    fn an_untrusted_workspace_loses_its_summarizer_block_and_keeps_the_rest() {
        let ws = tempfile::tempdir().unwrap();
        let mut f = summarizer_file();
        let warning = restrict_workspace_config(&mut f, ws.path(), None).expect("a warning");
        assert!(f.summarizer.is_none());
        assert!(f.compaction.is_some(), "other settings stay");
        assert!(warning.contains("soba trust"), "{warning}");
        assert!(warning.contains("not trusted"), "{warning}");
    }

    #[test]
    fn a_trusted_workspace_keeps_its_summarizer_block_through_a_symlink() {
        let ws = tempfile::tempdir().unwrap();
        let link = ws.path().with_extension("link");
        std::os::unix::fs::symlink(ws.path(), &link).unwrap();
        let user = ConfigFile {
            trusted_workspaces: Some(vec![canonical(ws.path()).display().to_string()]),
            ..ConfigFile::default()
        };
        let mut f = summarizer_file();
        assert_eq!(restrict_workspace_config(&mut f, &link, Some(&user)), None);
        assert!(f.summarizer.is_some());
        let _ = std::fs::remove_file(&link);
    }

    #[test]
    fn a_workspace_cannot_trust_itself() {
        let ws = tempfile::tempdir().unwrap();
        let path = canonical(ws.path()).display().to_string();
        let mut f = summarizer_file();
        f.trusted_workspaces = Some(vec![path]);
        let own = f.clone();
        assert!(
            restrict_workspace_config(&mut f, ws.path(), Some(&ConfigFile::default())).is_some()
        );
        assert!(f.trusted_workspaces.is_none());
        // Its list is not the user's either.
        let _ = own;
    }

    #[test]
    fn a_sessions_summarizer_needs_a_trusted_workspace() {
        let ws = tempfile::tempdir().unwrap();
        let mut f = summarizer_file();
        let warning = restrict_session_config(&mut f, Some(ws.path()), None).expect("a warning");
        assert!(f.summarizer.is_none(), "the endpoint is dropped");
        assert!(f.compaction.is_some(), "limits stay");
        assert!(warning.contains("soba/session/open"), "{warning}");
        assert!(warning.contains("soba trust"), "{warning}");

        let user = ConfigFile {
            trusted_workspaces: Some(vec![canonical(ws.path()).display().to_string()]),
            ..ConfigFile::default()
        };
        let mut f = summarizer_file();
        assert_eq!(
            restrict_session_config(&mut f, Some(ws.path()), Some(&user)),
            None
        );
        assert!(f.summarizer.is_some());
        let mut f = summarizer_file();
        assert!(restrict_session_config(&mut f, None, Some(&user)).is_some());
    }

    #[test]
    fn an_untrusted_workspace_cannot_turn_mirroring_on() {
        let ws = tempfile::tempdir().unwrap();
        let mut f = ConfigFile::parse(
            "ws",
            r#"{"memory":{"mirrorExplicitCompacts":true},"compaction":{"keepRecentTokens":1000}}"#,
        )
        .unwrap();
        let warning = restrict_workspace_config(&mut f, ws.path(), None).expect("a warning");
        assert_eq!(f.memory.as_ref().unwrap().mirror_explicit_compacts, None);
        assert!(f.compaction.is_some(), "other settings stay");
        assert!(
            warning.contains("mirrorExplicitCompacts") && warning.contains("soba trust"),
            "{warning}"
        );
        // Turning it off needs no trust; a trusted workspace may turn it on.
        let mut off =
            ConfigFile::parse("ws", r#"{"memory":{"mirrorExplicitCompacts":false}}"#).unwrap();
        assert_eq!(restrict_workspace_config(&mut off, ws.path(), None), None);
        assert_eq!(off.memory.unwrap().mirror_explicit_compacts, Some(false));
        let user = ConfigFile {
            trusted_workspaces: Some(vec![canonical(ws.path()).display().to_string()]),
            ..ConfigFile::default()
        };
        let mut on =
            ConfigFile::parse("ws", r#"{"memory":{"mirrorExplicitCompacts":true}}"#).unwrap();
        assert_eq!(
            restrict_workspace_config(&mut on, ws.path(), Some(&user)),
            None
        );
        assert_eq!(on.memory.unwrap().mirror_explicit_compacts, Some(true));
    }

    #[test]
    fn a_local_only_summarizer_block_needs_no_trust() {
        let ws = tempfile::tempdir().unwrap();
        let mut f = ConfigFile::parse("ws", r#"{"summarizer":{"provider":"local"}}"#).unwrap();
        assert_eq!(restrict_workspace_config(&mut f, ws.path(), None), None);
    }

    #[test]
    fn trusting_and_revoking_keep_the_other_keys() {
        let mut v: Value = serde_json::from_str(r#"{"compaction":{"auto":false}}"#).unwrap();
        assert_eq!(apply_change(&mut v, "/w", TrustChange::Trust), Ok(true));
        assert_eq!(apply_change(&mut v, "/w", TrustChange::Trust), Ok(false));
        assert_eq!(v[TRUSTED_KEY], serde_json::json!(["/w"]));
        assert_eq!(apply_change(&mut v, "/w", TrustChange::Revoke), Ok(true));
        assert!(v.get(TRUSTED_KEY).is_none());
        assert_eq!(v["compaction"]["auto"], false);
        let mut bad = serde_json::json!({TRUSTED_KEY: "oops"});
        assert_eq!(
            apply_change(&mut bad, "/w", TrustChange::Trust),
            Err(NotEditable::NotAList)
        );
        let mut bad = serde_json::json!(["/w"]);
        assert_eq!(
            apply_change(&mut bad, "/w", TrustChange::Trust),
            Err(NotEditable::NotAnObject)
        );
    }

    #[test]
    fn a_user_config_with_a_typo_is_reported_and_left_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        let typo = r#"{"compactoin":{}}"#;
        std::fs::write(&path, typo).unwrap();
        let err = edit_trust(&path, "/w", TrustChange::Trust).unwrap_err();
        assert!(
            matches!(err, TrustFileError::Config(ConfigError::UnknownKey { .. })),
            "{err}"
        );
        assert!(
            err.to_string().contains("unknown key `compactoin`"),
            "{err}"
        );
        std::fs::write(&path, "{").unwrap();
        let err = edit_trust(&path, "/w", TrustChange::Trust).unwrap_err();
        assert!(
            matches!(err, TrustFileError::Config(ConfigError::Syntax { .. })),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{");
        std::fs::write(&path, r#"{"trustedWorkspaces":"/w"}"#).unwrap();
        let err = edit_trust(&path, "/w", TrustChange::Trust).unwrap_err();
        assert!(matches!(err, TrustFileError::Config(_)), "{err}");
    }

    #[test]
    fn a_user_config_that_is_not_a_file_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::create_dir(&path).unwrap();
        let err = edit_trust(&path, "/w", TrustChange::Trust).unwrap_err();
        assert!(matches!(err, TrustFileError::Read { .. }), "{err}");
        assert!(err.io_cause().is_some());
        assert!(
            err.to_string()
                .starts_with(&format!("{}: cannot read: ", path.display())),
            "{err}"
        );
    }

    #[test]
    fn a_user_config_folder_that_cannot_be_made_is_a_create_folder_error() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("soba");
        std::fs::write(&blocker, "a file where the folder goes").unwrap();
        let err = edit_trust(&blocker.join("config.json"), "/w", TrustChange::Trust).unwrap_err();
        assert!(matches!(err, TrustFileError::CreateFolder { .. }), "{err}");
        assert!(err.io_cause().is_some());
    }

    #[test]
    fn a_user_config_that_cannot_be_replaced_is_a_write_error_and_stays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, "{}").unwrap();
        // The temporary file the new text goes to first is taken by a folder that is not empty.
        let tmp = dir
            .path()
            .join(format!(".config.json.tmp-{}", std::process::id()));
        std::fs::create_dir(&tmp).unwrap();
        std::fs::write(tmp.join("keep"), "x").unwrap();
        let err = edit_trust(&path, "/w", TrustChange::Trust).unwrap_err();
        assert!(matches!(err, TrustFileError::Write { .. }), "{err}");
        assert!(err.io_cause().is_some());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}");
    }
}
