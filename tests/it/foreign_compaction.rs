//! The followed agent's real budget after its own compactions, on the real transcripts of
//! `../shared/fixtures/transcripts` that hold some: once the agent compacted, SOBA's view holds
//! what the agent sent (its summary, what it kept, what came after), so the budget follows the
//! provider's reported usage instead of the whole history.

use crate::common;

use std::path::Path;

use soba::accuracy::{model_of, pairs, session_of, Pair};
use soba::import::transcript::import_str;
use soba::import::{ImportOptions, ImportResult};
use soba_core::session::entry::EntryBody;
use soba_core::session::foreign::ForeignCompactions;
use soba_core::session::Session;

fn import(path: &Path) -> ImportResult {
    let text = std::fs::read_to_string(path).unwrap();
    let options = ImportOptions {
        source_path: path.display().to_string(),
        default_workspace: "/w".into(),
        default_session_id: "s".into(),
        now: "2026-01-01T00:00:00Z".into(),
    };
    import_str(&text, None, &options).unwrap()
}

/// Indices of the compactions that replaced the agent's context.
fn compactions(session: &Session) -> Vec<usize> {
    (0..session.len())
        .filter(|&i| {
            matches!(&session.entry(i).body, EntryBody::ForeignCompaction(f) if f.replaces_context())
        })
        .collect()
}

/// The first request after compaction `f`, and the first whose estimate rests on a provider
/// usage (which, the view starting from `f`, was reported after it).
fn after<'a>(
    session: &Session,
    pairs: &'a [Pair],
    f: usize,
) -> (Option<&'a Pair>, Option<&'a Pair>) {
    let later = |p: &&Pair| session.index_of(&p.entry_id).is_some_and(|i| i > f);
    let first = pairs.iter().find(later);
    let anchored = pairs.iter().filter(later).find(|p| p.anchored);
    (first, anchored)
}

const WITH_COMPACTIONS: &[(&str, usize)] = &[
    ("claude-code/entire-cli-two-compactions.jsonl", 2),
    ("codex/agentv-two-compactions.jsonl", 2),
    ("pi/pi-mono-two-compactions.jsonl", 2),
];

#[test]
fn after_each_foreign_compaction_the_budget_follows_the_reported_usage() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    for (file, expected) in WITH_COMPACTIONS {
        let import = import(&dir.join(file));
        let model = model_of(&import).unwrap();
        let mut session = session_of(&import, &model);
        let found = compactions(&session);
        assert_eq!(found.len(), *expected, "{file}: compactions");
        let honoured = pairs(&session);
        session.set_foreign_compactions(ForeignCompactions::WholeHistory);
        let whole = pairs(&session);
        session.set_foreign_compactions(ForeignCompactions::Honour);
        for &f in &found {
            let (first, anchored) = after(&session, &honoured, f);
            let first = first.unwrap_or_else(|| panic!("{file}: a request after entry {f}"));
            let anchored =
                anchored.unwrap_or_else(|| panic!("{file}: an anchored request after entry {f}"));
            let old = whole.iter().find(|p| p.entry_id == first.entry_id).unwrap();
            let old_anchored = whole
                .iter()
                .find(|p| p.entry_id == anchored.entry_id)
                .unwrap();
            eprintln!(
                "{file} after {}: first request reported {}, SOBA {} ({:+.1}%; whole history {} {:+.1}%), first anchored {} reported {} SOBA {} ({:+.2}%; whole history {:+.1}%)",
                session.entry(f).id,
                first.reported,
                first.soba,
                first.soba_error() * 100.0,
                old.soba,
                old.soba_error() * 100.0,
                anchored.entry_id,
                anchored.reported,
                anchored.soba,
                anchored.soba_error() * 100.0,
                old_anchored.soba_error() * 100.0,
            );
            assert!(
                first.after_foreign_compaction && anchored.after_foreign_compaction,
                "{file}: the view starts from the compaction"
            );
            assert!(
                anchored.soba_error().abs() < 0.03,
                "{file}: request {} after the compaction: SOBA {} vs reported {}",
                anchored.entry_id,
                anchored.soba,
                anchored.reported
            );
            assert!(
                !first.anchored,
                "{file}: no usage measured the compacted context before its first request"
            );
            assert!(
                old_anchored.soba_error() > 0.5,
                "{file}: the whole history over-estimates the agent's context"
            );
            assert!(
                first.soba < old.soba,
                "{file}: the first request after the compaction counts less than the whole history"
            );
        }
    }
}
