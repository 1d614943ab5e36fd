//! How a failed command is reported: the message chain, plus a hint for the failures whose fix
//! lies outside SOBA (permissions, a full disk). Pure, so the wording is unit-tested; `main`
//! prints it as text or, under `--json`, as one JSON object on stderr.

use serde::Serialize;

/// A failed command as the user sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorReport {
    /// The error and its causes, outermost first, joined by `: `.
    pub error: String,
    /// What to do about it, when the cause is one SOBA cannot fix itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// `ENOSPC` on Linux and the BSDs; older std versions map it to `ErrorKind::Other`.
const ENOSPC: i32 = 28;

pub const PERMISSION_HINT: &str = "SOBA may not read or write that path: check its permissions and owner (`ls -ld PATH`), or choose a location you own";
pub const NO_SPACE_HINT: &str = "the disk is full: free space on that volume (`df -h PATH`) or write somewhere else; nothing already written was lost";

impl ErrorReport {
    pub fn from_error(e: &anyhow::Error) -> ErrorReport {
        let hint = e
            .chain()
            .find_map(io_error_in)
            .and_then(io_hint)
            .map(str::to_string);
        ErrorReport {
            error: format!("{e:#}"),
            hint,
        }
    }

    /// The text form: `error: …` and, on its own line, `hint: …`.
    pub fn to_text(&self) -> String {
        match &self.hint {
            Some(h) => format!("error: {}\nhint: {h}", self.error),
            None => format!("error: {}", self.error),
        }
    }

    /// The `--json` form: one JSON object on one line.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an error report serializes")
    }
}

/// The I/O error a link of the chain is or holds: SOBA's file errors print their I/O cause in
/// their own message instead of returning it as `source()`, so it is asked for by type.
fn io_error_in<'a>(cause: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    if let Some(io) = cause.downcast_ref::<std::io::Error>() {
        return Some(io);
    }
    if let Some(e) = cause.downcast_ref::<soba_core::session::log::LogError>() {
        return e.io_cause();
    }
    if let Some(e) = cause.downcast_ref::<soba_core::capsule::portable::PortableError>() {
        return e.io_cause();
    }
    if let Some(e) = cause.downcast_ref::<soba_core::trust::TrustFileError>() {
        return e.io_cause();
    }
    cause
        .downcast_ref::<soba_core::capsule::project_memory::MirrorError>()
        .and_then(|e| e.io_cause())
}

fn io_hint(e: &std::io::Error) -> Option<&'static str> {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => Some(PERMISSION_HINT),
        std::io::ErrorKind::StorageFull => Some(NO_SPACE_HINT),
        _ if e.raw_os_error() == Some(ENOSPC) => Some(NO_SPACE_HINT),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn permission_denied_anywhere_in_the_chain_gets_the_permission_hint() {
        let e = Err::<(), _>(std::io::Error::from(std::io::ErrorKind::PermissionDenied))
            .context("out/session.jsonl")
            .unwrap_err();
        let r = ErrorReport::from_error(&e);
        assert_eq!(r.hint.as_deref(), Some(PERMISSION_HINT));
        assert!(r.error.starts_with("out/session.jsonl: "), "{}", r.error);
    }

    #[test]
    fn a_full_disk_gets_the_free_space_hint_by_kind_and_by_raw_enospc() {
        for io in [
            std::io::Error::from(std::io::ErrorKind::StorageFull),
            std::io::Error::from_raw_os_error(ENOSPC),
        ] {
            let e = anyhow::Error::new(io).context("writing the log");
            assert_eq!(
                ErrorReport::from_error(&e).hint.as_deref(),
                Some(NO_SPACE_HINT)
            );
        }
    }

    #[test]
    fn the_engines_typed_errors_keep_their_io_hint() {
        let denied = || std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let trust = anyhow::Error::new(soba_core::trust::TrustFileError::Write {
            path: "config.json".into(),
            cause: denied(),
        })
        .context("cannot update config.json");
        let rewind = anyhow::Error::new(soba_core::session::rewind::RewindError::Append(
            soba_core::session::log::LogError::WriteFailed {
                path: "s.jsonl".into(),
                cause: denied(),
            },
        ));
        for e in [trust, rewind] {
            let r = ErrorReport::from_error(&e);
            assert_eq!(r.hint.as_deref(), Some(PERMISSION_HINT), "{}", r.error);
        }
    }

    #[test]
    fn other_errors_carry_no_hint_and_the_json_form_omits_it() {
        let e = anyhow::anyhow!("missing.jsonl: No such file or directory");
        let r = ErrorReport::from_error(&e);
        assert_eq!(r.hint, None);
        assert_eq!(
            r.to_text(),
            "error: missing.jsonl: No such file or directory"
        );
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error": "missing.jsonl: No such file or directory"})
        );
    }

    #[test]
    fn the_text_form_puts_the_hint_on_its_own_line() {
        let r = ErrorReport {
            error: "x: Permission denied".into(),
            hint: Some(PERMISSION_HINT.into()),
        };
        assert_eq!(
            r.to_text(),
            format!("error: x: Permission denied\nhint: {PERMISSION_HINT}")
        );
    }
}
