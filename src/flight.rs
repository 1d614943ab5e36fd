//! Flight records: one JSON line per compaction operation, append-only, per workspace.
//!
//! A record holds identifiers, limits, token counts, the outcome and its reason — never capsule
//! or summary text, so the file can be shared in a bug report as is.
//!
//! Every compaction writes one, whoever runs it: the daemon, `soba compact`, `soba capsule
//! create`, `soba demo` and `soba replay`. Where the file is follows from the session log's
//! path ([`FlightLog::for_session_log`]), so `soba flight SESSION` finds them all.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::summarize::response::Corrections;
use soba_core::compaction::CompactionResult;

/// File name of the flight log inside a workspace's data folder.
pub const FLIGHT_FILE: &str = "flight.jsonl";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlightRecord {
    pub operation_id: String,
    pub session_id: String,
    #[schemars(with = "soba_core::session::trigger::Trigger")]
    pub trigger: String,
    #[schemars(with = "soba_core::session::entry::Outcome")]
    pub outcome: String,
    pub reason: String,
    pub duration_ms: u64,
    pub checkpoint_id: Option<String>,
    pub tokens_before: u64,
    pub tokens_after: u64,
    /// Tokens the operation took out of the model input (`before - after`, never negative).
    pub reclaimed: u64,
    pub hard_limit: u64,
    pub soft_limit: u64,
    /// Claims of the model's capsule corrected from the facts, by kind (counts, never text).
    #[serde(default, skip_serializing_if = "Corrections::is_empty")]
    pub corrections: Corrections,
    pub ts: String,
}

impl FlightRecord {
    /// The record of one operation's outcome in session `session_id`.
    pub fn of(session_id: &str, r: &CompactionResult) -> FlightRecord {
        FlightRecord {
            operation_id: r.operation_id.clone(),
            session_id: session_id.to_string(),
            trigger: r.trigger.as_str().to_string(),
            outcome: r.outcome.as_str().to_string(),
            reason: r.reason.clone(),
            duration_ms: r.duration_ms,
            checkpoint_id: r.checkpoint_id.clone(),
            tokens_before: r.tokens_before,
            tokens_after: r.tokens_after,
            reclaimed: r.tokens_before.saturating_sub(r.tokens_after),
            hard_limit: r.hard_limit,
            soft_limit: r.soft_limit,
            corrections: Corrections::default(),
            ts: soba_core::util::now_rfc3339(),
        }
    }
}

/// The flight log of one workspace.
#[derive(Debug, Clone)]
pub struct FlightLog {
    path: PathBuf,
}

impl FlightLog {
    pub fn new(workspace_data_dir: &Path) -> Self {
        FlightLog {
            path: workspace_data_dir.join(FLIGHT_FILE),
        }
    }

    /// The flight log a session log's compactions are recorded in: the workspace data folder's
    /// for a log the daemon keeps (`<data>/workspaces/<key>/sessions/<id>.jsonl` →
    /// `<data>/workspaces/<key>/flight.jsonl`), else `flight.jsonl` beside the log (a demo's or
    /// replay's output folder, an imported log). Records carry the session id, so logs that
    /// share a folder share the file and stay apart when read.
    pub fn for_session_log(log_path: &Path) -> FlightLog {
        let log_path = std::fs::canonicalize(log_path).unwrap_or_else(|_| log_path.to_path_buf());
        let dir = log_path.parent().unwrap_or(Path::new("."));
        let daemon_kept = dir.file_name() == Some(std::ffi::OsStr::new("sessions"))
            && dir
                .parent()
                .and_then(Path::parent)
                .and_then(Path::file_name)
                == Some(std::ffi::OsStr::new("workspaces"));
        match dir.parent() {
            Some(workspace_dir) if daemon_kept => FlightLog::new(workspace_dir),
            _ => FlightLog::new(dir),
        }
    }

    /// Write the record of `r`; a failure is reported on stderr and loses nothing else: the
    /// compaction itself is already in the session log.
    pub fn record(&self, session_id: &str, r: &CompactionResult) {
        self.record_corrected(session_id, r, Corrections::default());
    }

    /// [`FlightLog::record`] for an operation whose model capsule had claims corrected from
    /// the facts.
    pub fn record_corrected(
        &self,
        session_id: &str,
        r: &CompactionResult,
        corrections: Corrections,
    ) {
        let record = FlightRecord {
            corrections,
            ..FlightRecord::of(session_id, r)
        };
        if let Err(e) = self.append(&record) {
            eprintln!(
                "soba: cannot write flight record to {}: {e}",
                self.path.display()
            );
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append one record as a single write of a whole line.
    pub fn append(&self, record: &FlightRecord) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            soba_core::files::create_private_dir_all(dir)?;
        }
        let mut f = soba_core::files::open_or_create_private_append(&self.path)?;
        let mut line = Vec::new();
        // A torn last line (a crash mid-write) must not swallow this record.
        if !ends_with_newline(&self.path)? {
            line.push(b'\n');
        }
        // Reasons can quote provider errors; nothing secret leaves the session through them.
        let mut record = record.clone();
        record.reason = soba_core::redact::redact(&record.reason).into_owned();
        serde_json::to_writer(&mut line, &record).map_err(std::io::Error::other)?;
        line.push(b'\n');
        f.write_all(&line)
    }

    /// The newest `limit` records (oldest first), of one session when `session` is given.
    /// Lines that do not parse (a torn last line) are skipped.
    pub fn read(
        &self,
        session: Option<&str>,
        limit: Option<usize>,
    ) -> std::io::Result<Vec<FlightRecord>> {
        let file = match soba_core::files::open_regular(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for line in BufReader::new(file).lines() {
            let line = line?;
            let Ok(record) = serde_json::from_str::<FlightRecord>(&line) else {
                continue;
            };
            if session.is_none_or(|s| s == record.session_id) {
                out.push(record);
            }
        }
        if let Some(limit) = limit {
            let skip = out.len().saturating_sub(limit);
            out.drain(..skip);
        }
        Ok(out)
    }
}

/// Whether the file is empty or ends with a newline.
fn ends_with_newline(path: &Path) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = soba_core::files::open_regular(path)?;
    if f.metadata()?.len() == 0 {
        return Ok(true);
    }
    f.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    f.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(op: &str, session: &str) -> FlightRecord {
        FlightRecord {
            operation_id: op.into(),
            session_id: session.into(),
            trigger: "user".into(),
            outcome: "completed".into(),
            reason: "capsule appended".into(),
            duration_ms: 12,
            checkpoint_id: Some("ck_1".into()),
            tokens_before: 1000,
            tokens_after: 400,
            reclaimed: 600,
            hard_limit: 48808,
            soft_limit: 39046,
            corrections: Default::default(),
            ts: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn records_filter_by_session_and_keep_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let log = FlightLog::new(dir.path());
        assert!(log.read(None, None).unwrap().is_empty());
        for (op, s) in [("op1", "a"), ("op2", "b"), ("op3", "a"), ("op4", "a")] {
            log.append(&record(op, s)).unwrap();
        }
        let ops = |v: Vec<FlightRecord>| v.into_iter().map(|r| r.operation_id).collect::<Vec<_>>();
        assert_eq!(ops(log.read(Some("a"), Some(2)).unwrap()), ["op3", "op4"]);
        assert_eq!(ops(log.read(None, None).unwrap()).len(), 4);
    }

    #[test]
    fn a_torn_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let log = FlightLog::new(dir.path());
        log.append(&record("op1", "a")).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(log.path())
            .unwrap();
        f.write_all(b"{\"operationId\":\"op2\",").unwrap();
        assert_eq!(log.read(None, None).unwrap().len(), 1);
        // The next record starts on a line of its own.
        log.append(&record("op3", "a")).unwrap();
        let ops: Vec<String> = log
            .read(None, None)
            .unwrap()
            .into_iter()
            .map(|r| r.operation_id)
            .collect();
        assert_eq!(ops, ["op1", "op3"]);
    }

    #[test]
    fn secrets_in_reasons_are_redacted() {
        let dir = tempfile::tempdir().unwrap();
        let log = FlightLog::new(dir.path());
        let mut r = record("op1", "a");
        let key = format!("sk-ant-api03-{}", "x7Qa".repeat(20));
        r.reason = format!("provider error: invalid key {key}; the local capsule was used");
        log.append(&r).unwrap();
        let text = std::fs::read_to_string(log.path()).unwrap();
        assert!(!text.contains(&key), "{text}");
        assert!(text.contains("[redacted:"), "{text}");
    }

    /// Spec §8: "Runtime and flight records include operation ID, trigger, token limits,
    /// outcome, duration, checkpoint, and reclaimed tokens without publishing summary contents."
    #[test]
    fn flight_records_hold_the_operation_facts_but_no_summary_text() {
        let v = serde_json::to_value(record("op1", "a")).unwrap();
        for key in [
            "operationId",
            "sessionId",
            "trigger",
            "hardLimit",
            "softLimit",
            "outcome",
            "reason",
            "durationMs",
            "checkpointId",
            "tokensBefore",
            "tokensAfter",
            "reclaimed",
        ] {
            assert!(v.get(key).is_some(), "{key} missing: {v}");
        }
        // Only identifiers, figures and the reason: no field can carry capsule or summary text.
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert!(
            keys.iter()
                .all(|k| !["state", "summary", "goal", "capsule", "content"].contains(k)),
            "{keys:?}"
        );
    }

    #[test]
    fn a_session_log_s_flight_log_is_its_workspace_s_or_the_one_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("data/workspaces/abc");
        std::fs::create_dir_all(ws.join("sessions")).unwrap();
        let kept = ws.join("sessions/s1.jsonl");
        std::fs::write(&kept, "").unwrap();
        let ws = std::fs::canonicalize(&ws).unwrap();
        assert_eq!(
            FlightLog::for_session_log(&kept).path(),
            ws.join(FLIGHT_FILE)
        );
        let loose = dir.path().join("out/session.jsonl");
        std::fs::create_dir_all(loose.parent().unwrap()).unwrap();
        std::fs::write(&loose, "").unwrap();
        let out = std::fs::canonicalize(dir.path().join("out")).unwrap();
        assert_eq!(
            FlightLog::for_session_log(&loose).path(),
            out.join(FLIGHT_FILE)
        );
        // A folder that is only called `sessions` is not the daemon's.
        let other = dir.path().join("mine/sessions/s.jsonl");
        std::fs::create_dir_all(other.parent().unwrap()).unwrap();
        std::fs::write(&other, "").unwrap();
        let sessions = std::fs::canonicalize(dir.path().join("mine/sessions")).unwrap();
        assert_eq!(
            FlightLog::for_session_log(&other).path(),
            sessions.join(FLIGHT_FILE)
        );
    }
}
