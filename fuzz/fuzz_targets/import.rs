//! Every transcript importer on arbitrary text. The first byte picks the format (or
//! detection); whatever imports must form a session whose model input builds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use soba::import::transcript::import_str;
use soba::import::{Format, ImportOptions};
use soba_core::session::view::ModelView;
use soba_core::session::Session;

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let format = Format::ALL
        .get(usize::from(selector) % (Format::ALL.len() + 1))
        .copied();
    let options = ImportOptions {
        source_path: "fuzz.jsonl".into(),
        default_workspace: "/ws".into(),
        default_session_id: "fuzz".into(),
        now: "2026-01-01T00:00:00Z".into(),
    };
    let Ok(result) = import_str(text, format, &options) else {
        return;
    };
    let mut session = Session::new(result.header, Default::default());
    for entry in result.entries {
        session
            .push(entry)
            .expect("imported entries form a valid tree");
    }
    let view = ModelView::build(&session, session.leaf());
    let _ = view.messages(&session);
    let _ = view.breakdown(&session);
});
