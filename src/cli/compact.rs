//! `soba compact`: an explicit compaction of a session log.

use std::path::Path;

use super::{human_tokens, print_json, warn_load, CommonArgs};
use crate::capsule::artifacts::ToolMapping;
use crate::compaction::run::Barrier;
use crate::session::entry::Outcome;
use crate::session::log::{read_session, SessionLog};

pub fn compact(
    path: &Path,
    instructions: Option<String>,
    common: &CommonArgs,
) -> anyhow::Result<()> {
    let (probe, _) = read_session(path)?;
    let config = common.config_for(Some(&probe.header))?;
    drop(probe);
    let (mut log, report) = SessionLog::open(path, config.durability)?;
    warn_load(path, &report);
    log.session_mut().set_tokenizer(config.model.tokenizer);
    let mapping = ToolMapping::default();
    let barrier = Barrier {
        config: &config,
        mapping: &mapping,
    };
    let result = match barrier.explicit(&mut log, instructions)? {
        Ok(plan) => barrier.run_local(&mut log, &plan)?,
        Err(ended) => ended,
    };
    if common.json {
        print_json(&result)?;
    } else {
        println!("{}", result.completion_line());
        if result.outcome == Outcome::Completed {
            println!(
                "kept from {} · {} → {} tokens (hard limit {})",
                result.first_kept_entry_id.as_deref().unwrap_or("-"),
                human_tokens(result.tokens_before),
                human_tokens(result.tokens_after),
                human_tokens(result.hard_limit)
            );
        }
    }
    if result.outcome == Outcome::Failed {
        anyhow::bail!("compaction failed: {}", result.reason);
    }
    Ok(())
}
