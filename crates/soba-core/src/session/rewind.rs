//! Rewinding a session: the leaf moves back to an earlier entry by appending a `rewind` entry;
//! nothing is deleted and the abandoned branch stays in the log.

use serde::Serialize;

use super::entry::{Entry, EntryBody, RewindEntry};
use super::log::{LogError, SessionLog};
use super::view::ModelView;

/// Why a session could not be rewound.
#[derive(Debug, thiserror::Error)]
pub enum RewindError {
    /// The target is not an entry of the session; nothing was written.
    #[error("no entry `{to}` in {log}.{} Entry ids are in the log (`soba context --json` shows those of the model input)", did_you_mean(.suggestion))]
    NoEntry {
        to: String,
        /// The session's log, as shown.
        log: String,
        /// The entry id nearest to `to`, when one is near.
        suggestion: Option<String>,
    },
    /// The `rewind` entry could not be appended to the log.
    #[error("appending the rewind entry")]
    Append(#[source] LogError),
}

fn did_you_mean(suggestion: &Option<String>) -> String {
    suggestion
        .as_ref()
        .map(|c| format!(" Did you mean `{c}`?"))
        .unwrap_or_default()
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RewindReport {
    pub rewind_entry_id: String,
    pub from: Option<String>,
    pub to: String,
    /// Messages of the model input at the new leaf.
    pub messages: usize,
}

/// The `rewind` entry that moves the leaf of the session in `log` to entry `to`, after the
/// current leaf; the log is not written. An unknown `to` is refused with the nearest id.
pub fn rewind_entry(log: &SessionLog, to: &str) -> Result<Entry, RewindError> {
    let session = log.session();
    if session.index_of(to).is_none() {
        // Read from each line: a long log is not parsed whole for a hint.
        let ids: Vec<String> = (0..session.len())
            .map(|i| session.with_id(i, str::to_string))
            .collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        return Err(RewindError::NoEntry {
            to: to.to_string(),
            log: log.path().display().to_string(),
            suggestion: crate::util::did_you_mean(to, &ids).map(str::to_string),
        });
    }
    Ok(Entry::new(
        crate::util::new_id("e_"),
        session.leaf_id().map(str::to_string),
        EntryBody::Rewind(RewindEntry { to: to.to_string() }),
    ))
}

/// Move the leaf of the session to entry `to` by appending a `rewind` entry after the
/// current leaf. Nothing is deleted; the abandoned branch stays in the log.
pub fn rewind_session(log: &mut SessionLog, to: &str) -> Result<RewindReport, RewindError> {
    let entry = rewind_entry(log, to)?;
    let id = entry.id.clone();
    let from = entry.parent_id.clone();
    log.append(entry).map_err(RewindError::Append)?;
    let session = log.session();
    let messages = ModelView::build(session, session.leaf())
        .messages(session)
        .len();
    Ok(RewindReport {
        rewind_entry_id: id,
        from,
        to: to.to_string(),
        messages,
    })
}
