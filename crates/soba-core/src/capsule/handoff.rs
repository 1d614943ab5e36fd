//! A session's capsules as hand-offs: find one by checkpoint id, list them, export one to the
//! portable `.capsule.md` format, and load one back into a session. Shared by the command line
//! and the daemon.

use serde::Serialize;

use super::portable::{write, Exported, Parsed, PortableCapsule};
use crate::session::capsule::model::{CapsuleEntry, Origin};
use crate::session::entry::{Entry, EntryBody, EntryKind};
use crate::session::log::{LogError, SessionLog};
use crate::session::Session;

/// Why a capsule could not be found or handed over.
#[derive(Debug, thiserror::Error)]
pub enum HandoffError {
    /// The session has no capsule at all.
    #[error("no capsule `{checkpoint}`: this session has no capsules yet")]
    NoCapsules { checkpoint: String },
    /// The session has capsules, none with this checkpoint id.
    #[error("no capsule `{checkpoint}` in this session.{} Its capsules: {}", did_you_mean(.suggestion), .known.join(", "))]
    NoCapsule {
        checkpoint: String,
        /// The checkpoint ids of the session's capsules, in log order.
        known: Vec<String>,
        /// The known id nearest to `checkpoint`, when one is near.
        suggestion: Option<String>,
    },
    /// The loaded capsule could not be appended to the session's log.
    #[error("cannot add the capsule to the session")]
    Append(#[source] LogError),
}

fn did_you_mean(suggestion: &Option<String>) -> String {
    suggestion
        .as_ref()
        .map(|c| format!(" Did you mean `{c}`?"))
        .unwrap_or_default()
}

/// The capsule entry with this checkpoint id, or an error listing the ones there are.
pub fn find_capsule<'a>(
    session: &'a Session,
    checkpoint: &str,
) -> Result<(&'a Entry, &'a CapsuleEntry), HandoffError> {
    let mut ids = Vec::new();
    for e in session
        .indices_of(EntryKind::Capsule)
        .map(|i| session.entry(i))
    {
        if let Some(c) = e.as_capsule() {
            if c.checkpoint_id == checkpoint {
                return Ok((e, c));
            }
            ids.push(c.checkpoint_id.as_str());
        }
    }
    if ids.is_empty() {
        return Err(HandoffError::NoCapsules {
            checkpoint: checkpoint.to_string(),
        });
    }
    Err(HandoffError::NoCapsule {
        checkpoint: checkpoint.to_string(),
        suggestion: crate::util::did_you_mean(checkpoint, &ids).map(str::to_string),
        known: ids.into_iter().map(str::to_string).collect(),
    })
}

/// Tokens of the capsule with this checkpoint id, as the session's tokenizer counts its entry:
/// the capsule's own size, not the size of the state it describes.
pub fn capsule_tokens(session: &Session, checkpoint: &str) -> Option<u64> {
    let idx = session.indices_of(EntryKind::Capsule).find(|&i| {
        session
            .entry(i)
            .as_capsule()
            .is_some_and(|c| c.checkpoint_id == checkpoint)
    })?;
    Some(session.tokens_of(idx))
}

/// The `.capsule.md` text of a capsule of `session`.
pub fn export_capsule(session: &Session, checkpoint: &str) -> Result<Exported, HandoffError> {
    let (entry, capsule) = find_capsule(session, checkpoint)?;
    let h = &session.header;
    Ok(write(&PortableCapsule::from_entry(
        capsule,
        &entry.ts,
        Some(&h.workspace),
        Some(&h.id),
    )))
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadReport {
    pub checkpoint_id: String,
    pub entry_id: String,
    pub title: Option<String>,
    pub loaded_from: String,
    pub source_checkpoint_id: String,
    /// Lines of the file that are not part of the capsule (notes, unknown sections).
    pub ignored_lines: Vec<usize>,
}

/// Append a parsed capsule file to a session as a capsule with `origin: loaded`, after the
/// current leaf, so that it is the latest capsule of the model input.
pub fn load_capsule(
    log: &mut SessionLog,
    parsed: &Parsed,
    path: &str,
) -> Result<LoadReport, HandoffError> {
    let checkpoint_id = crate::util::new_id("ck_");
    let capsule = parsed.capsule.to_loaded_entry(checkpoint_id.clone(), path);
    let entry_id = crate::util::new_id("e_");
    let parent = log.session().leaf_id().map(str::to_string);
    log.append(Entry::new(
        entry_id.clone(),
        parent,
        EntryBody::Capsule(Box::new(capsule)),
    ))
    .map_err(HandoffError::Append)?;
    Ok(LoadReport {
        checkpoint_id,
        entry_id,
        title: parsed.capsule.title.clone(),
        loaded_from: path.to_string(),
        source_checkpoint_id: parsed.capsule.checkpoint_id.clone(),
        ignored_lines: parsed.ignored.iter().map(|i| i.line).collect(),
    })
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapsuleRow {
    pub checkpoint_id: String,
    pub entry_id: String,
    pub title: Option<String>,
    pub trigger: String,
    pub quality: String,
    pub origin: String,
    pub ts: String,
    pub tokens_before: u64,
    pub tokens_after: u64,
    /// On the branch of the current leaf.
    pub on_branch: bool,
    /// The capsule that opens the model input now.
    pub current: bool,
}

/// Every capsule of the session, in log order.
pub fn list_capsules(session: &Session) -> Vec<CapsuleRow> {
    let leaf = session.leaf();
    let current = leaf.and_then(|l| session.capsule_on_path(l));
    session
        .indices_of(EntryKind::Capsule)
        .filter_map(|i| {
            let e = session.entry(i);
            let c = e.as_capsule()?;
            Some(CapsuleRow {
                checkpoint_id: c.checkpoint_id.clone(),
                entry_id: e.id.clone(),
                title: c.title.clone(),
                trigger: c.trigger.as_str().into(),
                quality: c.quality.as_str().into(),
                origin: match c.origin {
                    Origin::Session => "session".into(),
                    Origin::Loaded => "loaded".into(),
                },
                ts: e.ts.clone(),
                tokens_before: c.tokens.before,
                tokens_after: c.tokens.after,
                on_branch: leaf.is_some_and(|l| session.is_ancestor(i, l)),
                current: current == Some(i),
            })
        })
        .collect()
}
