//! Rewinding a session: the leaf moves back to an earlier entry by appending a `rewind` entry;
//! nothing is deleted and the abandoned branch stays in the log.

use anyhow::{anyhow, Context};
use serde::Serialize;

use super::entry::{Entry, EntryBody, RewindEntry};
use super::log::SessionLog;
use super::view::ModelView;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RewindReport {
    pub rewind_entry_id: String,
    pub from: Option<String>,
    pub to: String,
    /// Messages of the model input at the new leaf.
    pub messages: usize,
}

/// Move the leaf of the session to entry `to` by appending a `rewind` entry after the
/// current leaf. Nothing is deleted; the abandoned branch stays in the log.
pub fn rewind_session(log: &mut SessionLog, to: &str) -> anyhow::Result<RewindReport> {
    let session = log.session();
    if session.index_of(to).is_none() {
        // Read from each line: a long log is not parsed whole for a hint.
        let ids: Vec<String> = (0..session.len())
            .map(|i| session.with_id(i, str::to_string))
            .collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let hint = crate::util::did_you_mean(to, &ids)
            .map(|c| format!(" Did you mean `{c}`?"))
            .unwrap_or_default();
        return Err(anyhow!(
            "no entry `{to}` in {}.{hint} Entry ids are in the log (`soba context --json` shows those of the model input)",
            log.path().display()
        ));
    }
    let from = session.leaf_id().map(str::to_string);
    let id = crate::util::new_id("e_");
    log.append(Entry::new(
        id.clone(),
        from.clone(),
        EntryBody::Rewind(RewindEntry { to: to.to_string() }),
    ))
    .context("appending the rewind entry")?;
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
