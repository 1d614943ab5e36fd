//! Project Memory: validated capsules of explicit `/compact` runs, mirrored into the
//! workspace's `.soba/memory/` as Portable Capsules, with an `index.md` listing them.
//!
//! Only a capsule the user asked for (`trigger: user`), written by the summarization model and
//! validated (`quality: model`), produced by this session (not loaded from a file), and only
//! when mirroring was asked for (`--mirror` or `memory.mirrorExplicitCompacts`) is mirrored.
//! Automatic, turn-complete, milestone, plan-pivot, hard-limit, overflow and hand-off capsules
//! stay session-local: working summaries are not project knowledge.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::portable::{read_capsule_file, write, PortableCapsule};
use crate::files::write_atomic;
use crate::redact::RedactionReport;
use crate::session::capsule::model::{CapsuleEntry, Origin, Quality};
use crate::session::trigger::Trigger;

/// Folder of Project Memory, relative to the workspace root.
pub const MEMORY_DIR: &str = ".soba/memory";
/// The index file inside [`MEMORY_DIR`].
pub const INDEX_FILE: &str = "index.md";
const CAPSULE_SUFFIX: &str = ".capsule.md";

/// Why a capsule is not mirrored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum NotMirrored {
    /// Only explicit `/compact` capsules are mirrored.
    Trigger { trigger: Trigger },
    /// The capsule was built locally: no summarization model is configured.
    Local,
    /// A configured model's summary was not used; the local capsule stands in.
    Degraded { degraded_reason: Option<String> },
    /// The capsule came from a `.capsule.md` file, not from this session's history.
    Loaded,
    /// Nobody asked for it.
    NotRequested,
}

impl std::fmt::Display for NotMirrored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotMirrored::Trigger { trigger } => write!(
                f,
                "{trigger} capsules stay in the session; only an explicit /compact is mirrored into Project Memory"
            ),
            NotMirrored::Local => f.write_str(
                "the capsule was built locally (no summarization model configured); only validated model capsules are mirrored into Project Memory",
            ),
            NotMirrored::Degraded { degraded_reason } => write!(
                f,
                "the capsule is degraded{}; only validated model capsules are mirrored into Project Memory",
                degraded_reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()
            ),
            NotMirrored::Loaded => f.write_str("the capsule was loaded from a file; it is not mirrored again"),
            NotMirrored::NotRequested => f.write_str(
                "mirroring was not asked for; pass --mirror or set memory.mirrorExplicitCompacts in .soba/config.json",
            ),
        }
    }
}

impl std::error::Error for NotMirrored {}

/// Whether `capsule` may be mirrored into Project Memory. `explicit_request` is the user's
/// ask (`--mirror`, or the workspace config).
pub fn should_mirror(capsule: &CapsuleEntry, explicit_request: bool) -> Result<(), NotMirrored> {
    if capsule.trigger != Trigger::User {
        return Err(NotMirrored::Trigger {
            trigger: capsule.trigger,
        });
    }
    match capsule.quality {
        Quality::Model => {}
        Quality::Local => return Err(NotMirrored::Local),
        Quality::Degraded => {
            return Err(NotMirrored::Degraded {
                degraded_reason: capsule.degraded_reason.clone(),
            })
        }
    }
    if capsule.origin == Origin::Loaded {
        return Err(NotMirrored::Loaded);
    }
    if !explicit_request {
        return Err(NotMirrored::NotRequested);
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    // Messages print their cause, so it is not also a `source()`: `{:#}` would repeat it.
    #[error("not mirrored: {0}")]
    NotMirrored(NotMirrored),
    #[error("checkpoint id `{0}` cannot name a file; expected letters, digits, `_` and `-` only")]
    BadCheckpointId(String),
    #[error("{path} is a symbolic link; Project Memory is written only into a real `.soba/memory` folder inside the workspace, never through a link (a cloned repository could point it at any folder). Remove the link (`rm {path}`) and compact again")]
    Link { path: String },
    #[error("{path}: {cause}")]
    Io { path: String, cause: std::io::Error },
}

impl MirrorError {
    /// The I/O error behind this one, for advice on its kind (not a `source()`: see above).
    pub fn io_cause(&self) -> Option<&std::io::Error> {
        match self {
            MirrorError::Io { cause, .. } => Some(cause),
            _ => None,
        }
    }
}

/// What a mirror wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Mirrored {
    pub path: PathBuf,
    pub index: PathBuf,
    pub redactions: RedactionReport,
}

/// Where a mirrored capsule was written: its entry time and session.
#[derive(Debug, Clone, Copy)]
pub struct MirrorSource<'a> {
    pub created: &'a str,
    pub session: Option<&'a str>,
}

/// Mirror `capsule` into `<workspace>/.soba/memory/<checkpointId>.capsule.md` (redacted) and
/// rebuild the index, both written atomically. Refuses what [`should_mirror`] refuses.
pub fn mirror(
    workspace: &Path,
    capsule: &CapsuleEntry,
    source: MirrorSource<'_>,
    explicit_request: bool,
) -> Result<Mirrored, MirrorError> {
    should_mirror(capsule, explicit_request).map_err(MirrorError::NotMirrored)?;
    let id = &capsule.checkpoint_id;
    if id.is_empty()
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(MirrorError::BadCheckpointId(id.clone()));
    }
    let dir = memory_dir(workspace)?;
    let path = dir.join(format!("{id}{CAPSULE_SUFFIX}"));
    let portable = PortableCapsule::from_entry(
        capsule,
        source.created,
        Some(&workspace.display().to_string()),
        source.session,
    );
    let exported = write(&portable);
    let io = |p: &Path| {
        let p = p.display().to_string();
        move |cause| MirrorError::Io { path: p, cause }
    };
    write_atomic(&path, exported.text.as_bytes()).map_err(io(&path))?;
    let index = rebuild_index(&dir)?;
    Ok(Mirrored {
        path,
        index,
        redactions: exported.redactions,
    })
}

/// `<workspace>/.soba/memory`, each folder below the workspace created private (`0700`) when
/// missing. A component that is a symbolic link is refused: a repository can carry a
/// `.soba/memory` link pointing anywhere, and the mirror and its `index.md` would be written
/// there. (The files inside are replaced by rename, which never follows a link.)
pub fn memory_dir(workspace: &Path) -> Result<PathBuf, MirrorError> {
    let dir = workspace.join(MEMORY_DIR);
    let mut at = workspace.to_path_buf();
    for part in Path::new(MEMORY_DIR).components() {
        at.push(part);
        match crate::files::create_private_dir(&at) {
            Ok(()) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(cause) => {
                return Err(MirrorError::Io {
                    path: dir.display().to_string(),
                    cause,
                })
            }
        }
        let meta = std::fs::symlink_metadata(&at).map_err(|cause| MirrorError::Io {
            path: at.display().to_string(),
            cause,
        })?;
        if meta.file_type().is_symlink() {
            return Err(MirrorError::Link {
                path: at.display().to_string(),
            });
        }
        if !meta.is_dir() {
            return Err(MirrorError::Io {
                path: dir.display().to_string(),
                cause: std::io::Error::new(
                    std::io::ErrorKind::NotADirectory,
                    format!(
                        "{} is not a folder; move it away so Project Memory can be written",
                        at.display()
                    ),
                ),
            });
        }
    }
    Ok(dir)
}

/// One row of the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexRow {
    pub file: String,
    pub capsule: PortableCapsule,
}

/// Rewrite `index.md` from the capsule files in `dir`.
pub fn rebuild_index(dir: &Path) -> Result<PathBuf, MirrorError> {
    let io = |p: &Path| {
        let p = p.display().to_string();
        move |cause| MirrorError::Io { path: p, cause }
    };
    let mut rows = Vec::new();
    let mut unreadable = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(CAPSULE_SUFFIX) || name.starts_with('.') {
            continue;
        }
        // A link could put any file's text into the index.
        if entry.file_type().is_ok_and(|t| t.is_symlink()) {
            unreadable.push((name, "a symbolic link; not followed".to_string()));
            continue;
        }
        match read_capsule_file(&entry.path()) {
            Ok(parsed) => rows.push(IndexRow {
                file: name,
                capsule: parsed.capsule,
            }),
            Err(e) => unreadable.push((name, e.to_string())),
        }
    }
    let index = dir.join(INDEX_FILE);
    write_atomic(&index, render_index(rows, unreadable).as_bytes()).map_err(io(&index))?;
    Ok(index)
}

/// One table cell: on one line, `|` escaped, and control characters written as visible
/// escapes (a capsule file put in the folder by hand may hold them raw).
fn cell(s: &str) -> String {
    crate::util::terminal_text(s)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// The index text: newest first, then files that could not be read.
pub fn render_index(mut rows: Vec<IndexRow>, mut unreadable: Vec<(String, String)>) -> String {
    rows.sort_by(|a, b| {
        (b.capsule.created.as_str(), b.file.as_str())
            .cmp(&(a.capsule.created.as_str(), a.file.as_str()))
    });
    unreadable.sort();
    let mut out = String::from(
        "# Project Memory\n\nCapsules of explicit `/compact` runs in this workspace, newest first. \
         Each file is a Portable Capsule: `soba capsule load SESSION FILE` continues from it.\n\n\
         | Checkpoint | Title | Created | Session | Tokens | File |\n|---|---|---|---|---|---|\n",
    );
    for r in &rows {
        let c = &r.capsule;
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} → {} | [{}]({}) |\n",
            cell(&c.checkpoint_id),
            cell(c.title.as_deref().unwrap_or("")),
            cell(&c.created),
            cell(c.session.as_deref().unwrap_or("")),
            c.tokens.before,
            c.tokens.after,
            cell(&r.file),
            r.file.replace(' ', "%20"),
        ));
    }
    if !unreadable.is_empty() {
        out.push_str("\n## Unreadable files\n\n");
        for (file, why) in &unreadable {
            out.push_str(&format!("- {}: {}\n", cell(file), cell(why)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::capsule::model::{Artifacts, CapsuleState, CapsuleTokens, LoadedFrom};

    fn capsule(trigger: Trigger, quality: Quality) -> CapsuleEntry {
        CapsuleEntry {
            checkpoint_id: "ck_00000000000a".into(),
            trigger,
            quality,
            first_kept_entry_id: None,
            previous_checkpoint_id: None,
            state: CapsuleState {
                goal: "Ship the parser".into(),
                ..Default::default()
            },
            artifacts: Artifacts::default(),
            tokens: CapsuleTokens {
                before: 90_000,
                after: 12_000,
                short_tail: None,
            },
            origin: Origin::Session,
            mirrored: false,
            title: Some("Parser | done".into()),
            degraded_reason: (quality == Quality::Degraded).then(|| "summarizer timed out".into()),
            instructions: None,
            elide_tool_results_over: None,
            loaded_from: None,
        }
    }

    #[test]
    fn explicit_compact_with_a_model_capsule_is_mirrored_when_asked() {
        assert_eq!(
            should_mirror(&capsule(Trigger::User, Quality::Model), true),
            Ok(())
        );
    }

    #[test]
    fn explicit_compact_is_not_mirrored_unless_asked() {
        let err = should_mirror(&capsule(Trigger::User, Quality::Model), false).unwrap_err();
        assert_eq!(err, NotMirrored::NotRequested);
        assert!(err.to_string().contains("--mirror"), "{err}");
    }

    #[test]
    fn degraded_capsule_is_never_mirrored() {
        let err = should_mirror(&capsule(Trigger::User, Quality::Degraded), true).unwrap_err();
        assert_eq!(
            err,
            NotMirrored::Degraded {
                degraded_reason: Some("summarizer timed out".into())
            }
        );
        assert!(err.to_string().contains("(summarizer timed out)"), "{err}");
    }

    #[test]
    fn loaded_capsule_is_not_mirrored() {
        let mut c = capsule(Trigger::User, Quality::Model);
        c.origin = Origin::Loaded;
        c.loaded_from = Some(LoadedFrom {
            path: "x.capsule.md".into(),
            workspace: None,
            session: None,
            checkpoint_id: None,
            created: None,
        });
        assert_eq!(should_mirror(&c, true), Err(NotMirrored::Loaded));
    }

    fn refused_for_trigger(trigger: Trigger) {
        for quality in [Quality::Model, Quality::Degraded] {
            let err = should_mirror(&capsule(trigger, quality), true).unwrap_err();
            assert_eq!(err, NotMirrored::Trigger { trigger });
            assert!(err.to_string().starts_with(trigger.as_str()), "{err}");
        }
    }

    #[test]
    fn automatic_threshold_capsule_is_not_mirrored() {
        refused_for_trigger(Trigger::AutoThreshold);
    }

    #[test]
    fn turn_complete_capsule_is_not_mirrored() {
        refused_for_trigger(Trigger::TurnComplete);
    }

    #[test]
    fn milestone_capsule_is_not_mirrored() {
        refused_for_trigger(Trigger::Milestone);
    }

    #[test]
    fn plan_pivot_capsule_is_not_mirrored() {
        refused_for_trigger(Trigger::PlanPivot);
    }

    #[test]
    fn hard_limit_capsule_is_not_mirrored() {
        refused_for_trigger(Trigger::HardLimit);
    }

    #[test]
    fn context_overflow_capsule_is_not_mirrored() {
        refused_for_trigger(Trigger::ContextOverflow);
    }

    #[test]
    fn handoff_capsule_is_not_mirrored() {
        refused_for_trigger(Trigger::Handoff);
    }

    #[test]
    fn a_private_key_written_one_line_per_item_leaves_no_line_in_the_mirror() {
        let ws = tempfile::tempdir().unwrap();
        let mut c = capsule(Trigger::User, Quality::Model);
        // Fake key lines, assembled so the repository holds no key-shaped literal.
        let body: Vec<String> = (0..5)
            .map(|i| {
                format!(
                    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC{i}{}",
                    "Xq7Lm2Pz9Rt4Vw8Ys3Kd6Hf1Nb5Jc0Ga"
                )
            })
            .collect();
        c.state.completed.push("deploy key created".into());
        c.state
            .completed
            .push(format!("-----BEGIN {}-----", "RSA PRIVATE KEY"));
        c.state.completed.extend(body.iter().cloned());
        c.state
            .completed
            .push(format!("-----END {}-----", "RSA PRIVATE KEY"));
        c.state.completed.push("CI secret updated".into());
        let src = MirrorSource {
            created: "2026-11-29T10:00:00Z",
            session: Some("s1"),
        };
        let m = mirror(ws.path(), &c, src, true).unwrap();
        let text = std::fs::read_to_string(&m.path).unwrap();
        for line in &body {
            assert!(!text.contains(line.as_str()), "key line kept:\n{text}");
        }
        assert!(text.contains("deploy key created") && text.contains("CI secret updated"));
        assert!(text.contains("[redacted:private_key]"), "{text}");
    }

    #[test]
    fn terminal_control_bytes_reach_neither_the_mirror_nor_the_index() {
        let ws = tempfile::tempdir().unwrap();
        let mut c = capsule(Trigger::User, Quality::Model);
        c.title = Some("title \u{1b}]0;pwned\u{7}".into());
        c.state
            .completed
            .push("copied \u{1b}]52;c;Y3VybCBldmlsLnNo\u{7} \u{9b}2J \0 done".into());
        let src = MirrorSource {
            created: "2026-11-29T10:00:00Z",
            session: Some("s1"),
        };
        let m = mirror(ws.path(), &c, src, true).unwrap();
        // A capsule file someone put in the folder by hand, raw bytes and all.
        std::fs::write(
            m.path.with_file_name("ck_00000000000b.capsule.md"),
            std::fs::read_to_string(&m.path)
                .unwrap()
                .replace("ck_00000000000a", "ck_00000000000b")
                .replace("title: title \\u{1b}", "title: raw \u{1b}[2J\u{9b}"),
        )
        .unwrap();
        let index = rebuild_index(m.path.parent().unwrap()).unwrap();
        let raw = |t: &str| t.chars().any(|c| c.is_control() && c != '\n' && c != '\t');
        let mirrored = std::fs::read_to_string(&m.path).unwrap();
        assert!(!raw(&mirrored), "{mirrored:?}");
        assert!(
            mirrored.contains("copied \\u{1b}]52;c;Y3VybCBldmlsLnNo\\u{7} \\u{9b}2J \\u{0} done")
        );
        let index = std::fs::read_to_string(index).unwrap();
        assert!(!raw(&index), "{index:?}");
        assert!(
            index.contains("| raw \\u{1b}[2J\\u{9b}]0;pwned\\u{7} |"),
            "{index}"
        );
    }

    #[test]
    fn mirror_writes_the_capsule_and_the_index() {
        let ws = tempfile::tempdir().unwrap();
        let mut c = capsule(Trigger::User, Quality::Model);
        let secret = format!(
            "{}{}",
            "xoxb-", "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
        );
        c.state.blockers.push(format!("bot token {secret} expired"));
        let src = MirrorSource {
            created: "2026-11-29T10:00:00Z",
            session: Some("s1"),
        };
        let m = mirror(ws.path(), &c, src, true).unwrap();
        assert_eq!(
            m.path,
            ws.path().join(".soba/memory/ck_00000000000a.capsule.md")
        );
        let text = std::fs::read_to_string(&m.path).unwrap();
        assert!(!text.contains(&secret) && text.contains("[redacted:slack_token]"));
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&m.path), 0o600, "mirrors are private");
            assert_eq!(mode(&m.index), 0o600);
        }
        assert_eq!(m.redactions.total(), 1);

        let mut later = capsule(Trigger::User, Quality::Model);
        later.checkpoint_id = "ck_00000000000b".into();
        later.title = None;
        let src = MirrorSource {
            created: "2026-11-29T11:00:00Z",
            session: Some("s1"),
        };
        mirror(ws.path(), &later, src, true).unwrap();
        std::fs::write(
            ws.path().join(".soba/memory/broken.capsule.md"),
            "not a capsule",
        )
        .unwrap();
        let index = rebuild_index(&ws.path().join(MEMORY_DIR)).unwrap();
        let index = std::fs::read_to_string(index).unwrap();
        let rows: Vec<&str> = index.lines().filter(|l| l.starts_with("| ck_")).collect();
        assert_eq!(rows.len(), 2, "{index}");
        assert!(
            rows[0].starts_with("| ck_00000000000b |"),
            "newest first: {index}"
        );
        assert!(rows[1].contains("Parser \\| done"), "{index}");
        assert!(rows[1].contains("90000 → 12000"), "{index}");
        assert!(index.contains("- broken.capsule.md: "), "{index}");
        // No temporary files are left behind.
        let names: Vec<String> = std::fs::read_dir(ws.path().join(MEMORY_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    }

    #[test]
    fn refused_capsules_write_nothing() {
        let ws = tempfile::tempdir().unwrap();
        let src = MirrorSource {
            created: "2026-11-29T10:00:00Z",
            session: None,
        };
        for (c, ask) in [
            (capsule(Trigger::User, Quality::Degraded), true),
            (capsule(Trigger::HardLimit, Quality::Model), true),
            (capsule(Trigger::User, Quality::Model), false),
        ] {
            assert!(matches!(
                mirror(ws.path(), &c, src, ask),
                Err(MirrorError::NotMirrored(_))
            ));
        }
        assert!(!ws.path().join(".soba").exists());
    }

    #[test]
    fn checkpoint_ids_that_are_not_file_names_are_refused() {
        let ws = tempfile::tempdir().unwrap();
        let mut c = capsule(Trigger::User, Quality::Model);
        c.checkpoint_id = "../../etc/passwd".into();
        let src = MirrorSource {
            created: "2026-11-29T10:00:00Z",
            session: None,
        };
        let err = mirror(ws.path(), &c, src, true).unwrap_err();
        assert!(matches!(err, MirrorError::BadCheckpointId(_)), "{err}");
    }

    #[test]
    fn a_symlinked_memory_folder_is_refused_and_nothing_is_written_through_it() {
        use std::os::unix::fs::symlink;
        let src = MirrorSource {
            created: "2026-11-29T10:00:00Z",
            session: None,
        };
        let c = capsule(Trigger::User, Quality::Model);
        // `.soba/memory` a link (as a cloned repository can carry one), and `.soba` a link.
        for link_at in [".soba/memory", ".soba"] {
            let ws = tempfile::tempdir().unwrap();
            let elsewhere = tempfile::tempdir().unwrap();
            std::fs::write(elsewhere.path().join(INDEX_FILE), "someone's index").unwrap();
            if link_at == ".soba/memory" {
                std::fs::create_dir(ws.path().join(".soba")).unwrap();
            }
            symlink(elsewhere.path(), ws.path().join(link_at)).unwrap();
            let err = mirror(ws.path(), &c, src, true).unwrap_err();
            assert!(matches!(err, MirrorError::Link { .. }), "{err}");
            let text = err.to_string();
            assert!(
                text.contains("symbolic link") && text.contains("Remove the link"),
                "{text}"
            );
            assert_eq!(
                std::fs::read_to_string(elsewhere.path().join(INDEX_FILE)).unwrap(),
                "someone's index",
                "the index behind the link was replaced"
            );
            let written: Vec<_> = walk(elsewhere.path());
            assert_eq!(
                written,
                vec![elsewhere.path().join(INDEX_FILE)],
                "{link_at}"
            );
        }
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
        out
    }

    #[test]
    fn the_memory_folders_are_private_and_a_linked_capsule_file_is_not_read_into_the_index() {
        use std::os::unix::fs::{symlink, PermissionsExt};
        let ws = tempfile::tempdir().unwrap();
        let src = MirrorSource {
            created: "2026-11-29T10:00:00Z",
            session: None,
        };
        let outside = ws.path().join("outside.txt");
        std::fs::write(&outside, "not for the index").unwrap();
        std::fs::create_dir_all(ws.path().join(".soba")).unwrap();
        std::fs::set_permissions(
            ws.path().join(".soba"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let m = mirror(
            ws.path(),
            &capsule(Trigger::User, Quality::Model),
            src,
            true,
        )
        .unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&ws.path().join(MEMORY_DIR)), 0o700);
        // An existing folder's mode is the user's.
        assert_eq!(mode(&ws.path().join(".soba")), 0o755);
        let fresh = tempfile::tempdir().unwrap();
        mirror(
            fresh.path(),
            &capsule(Trigger::User, Quality::Model),
            src,
            true,
        )
        .unwrap();
        assert_eq!(mode(&fresh.path().join(".soba")), 0o700);
        symlink(&outside, ws.path().join(".soba/memory/x.capsule.md")).unwrap();
        let index =
            std::fs::read_to_string(rebuild_index(m.path.parent().unwrap()).unwrap()).unwrap();
        assert!(
            index.contains("x.capsule.md: a symbolic link; not followed"),
            "{index}"
        );
        assert!(!index.contains("not for the index"));
    }

    #[test]
    fn write_failure_is_reported_with_its_path() {
        let ws = tempfile::tempdir().unwrap();
        // `.soba` is a file, so the memory folder cannot be created.
        std::fs::write(ws.path().join(".soba"), "").unwrap();
        let src = MirrorSource {
            created: "2026-11-29T10:00:00Z",
            session: None,
        };
        let err = mirror(
            ws.path(),
            &capsule(Trigger::User, Quality::Model),
            src,
            true,
        )
        .unwrap_err();
        assert!(matches!(err, MirrorError::Io { .. }), "{err}");
        assert!(err.to_string().contains(".soba/memory"), "{err}");
    }
}
