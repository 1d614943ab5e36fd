//! Following live agent transcripts: the incremental importer against `soba import` on every
//! real transcript, the tailer, discovery of each agent's transcripts, and `soba/attach`
//! through the daemon.

mod common;

use rand::{Rng, SeedableRng};
use soba::import::stream::StreamImporter;
use soba::import::{import_str, ImportOptions};

fn options(path: &str) -> ImportOptions {
    ImportOptions {
        source_path: path.into(),
        default_workspace: "/ws".into(),
        default_session_id: "imported".into(),
        now: "2026-01-01T00:00:00.000Z".into(),
    }
}

#[test]
fn incremental_import_fed_in_random_chunks_equals_soba_import_on_every_fixture() {
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let mut checked = 0;
    for agent in std::fs::read_dir(&dir).unwrap() {
        let agent = agent.unwrap().path();
        if !agent.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&agent).unwrap() {
            let path = file.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let text = String::from_utf8(bytes.clone()).unwrap();
            let name = path.display().to_string();
            let whole = import_str(&text, None, &options(&name)).unwrap();
            let is_lines = path.extension().is_some_and(|e| e == "jsonl");
            if !is_lines {
                // One JSON document: followed only once complete.
                let mut s = StreamImporter::new(None, options(&name)).unwrap();
                let refused = s.feed(&bytes).err().or_else(|| s.finish().err());
                assert!(refused.is_some(), "{name}: a whole document was followed");
                continue;
            }
            for seed in 0..3u64 {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                let mut s = StreamImporter::new(None, options(&name)).unwrap();
                let mut streamed = Vec::new();
                let mut at = 0;
                while at < bytes.len() {
                    // Mostly small pieces, sometimes single bytes, sometimes big ones.
                    let max = match rng.random_range(0..3) {
                        0 => 1,
                        1 => 64,
                        _ => 8192,
                    };
                    let n = rng.random_range(1..=max).min(bytes.len() - at);
                    s.feed(&bytes[at..at + n]).unwrap();
                    at += n;
                    streamed.extend(s.take_settled());
                }
                // Some fixtures end without a newline: live, that last line waits for it.
                if !bytes.ends_with(b"\n") {
                    s.feed(b"\n").unwrap();
                }
                streamed.extend(s.take_all());
                let result = s.finish().unwrap();
                assert_eq!(result, whole, "{name} (seed {seed}): finish differs from import");
                // What was handed out live is what `soba import` writes, up to the leaf rewind
                // only a finished file has.
                let imported: Vec<_> = whole
                    .entries
                    .iter()
                    .filter(|e| !matches!(e.body, soba::session::entry::EntryBody::Rewind(_)))
                    .cloned()
                    .collect();
                assert_same_entries(&streamed, &imported, &format!("{name} (seed {seed})"));
            }
            checked += 1;
        }
    }
    assert!(checked >= 6, "only {checked} line transcripts were checked");
}

/// Entries equal one by one; a difference names the first entry that differs.
fn assert_same_entries(
    got: &[soba::session::entry::Entry],
    want: &[soba::session::entry::Entry],
    what: &str,
) {
    if let Some(i) = (0..got.len().min(want.len())).find(|&i| got[i] != want[i]) {
        panic!(
            "{what}: entry {i} differs:\n got  {:?}\n want {:?}",
            got[i], want[i]
        );
    }
    assert_eq!(got.len(), want.len(), "{what}: entry counts differ");
}
