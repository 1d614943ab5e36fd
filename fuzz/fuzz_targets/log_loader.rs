//! The session-log loader on arbitrary bytes: read-only load, then the repairing open (which
//! moves a torn tail aside), then the model input and a compaction plan of whatever loaded.
#![no_main]

use libfuzzer_sys::fuzz_target;
use soba_core::tool_mapping::ToolMapping;
use soba_core::compaction::plan::{plan, PlanRequest};
use soba_core::config::{Config, Durability};
use soba_core::session::trigger::Trigger;
use soba_core::session::log::{read_session, SessionLog};
use soba_core::session::view::ModelView;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("s.jsonl");
    std::fs::write(&path, data).expect("write input");
    let Ok((session, _)) = read_session(&path) else {
        return;
    };
    let view = ModelView::build(&session, session.leaf());
    let _ = view.messages(&session);
    let _ = view.breakdown(&session);
    let config = Config::default();
    let mapping = ToolMapping::default();
    let req = PlanRequest {
        trigger: Trigger::User,
        instructions: None,
        title: None,
        config: &config,
        mapping: &mapping,
        operation_id: "op_fuzz".into(),
    };
    let _ = plan(&session, session.leaf(), &req);
    let (reopened, _) = SessionLog::open(&path, Durability::Flush)
        .expect("a log that loads read-only also opens for writing");
    assert_eq!(reopened.session().len(), session.len());
});
