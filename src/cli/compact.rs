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
    let summarizer = crate::summarize::from_config(&config.summarizer)?;
    let result = match barrier.explicit(&mut log, instructions)? {
        Ok(plan) => {
            let started = std::time::Instant::now();
            let show_progress =
                !common.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
            let progress = move |pct: u8| {
                if show_progress {
                    eprint!("\rCompacting context · {pct}%");
                }
            };
            let (generated, cancelled) =
                crate::summarize::generate_blocking(&plan, summarizer.as_deref(), &progress)?;
            if show_progress {
                eprintln!();
            }
            crate::compaction::commit(
                &mut log,
                &plan,
                generated,
                cancelled,
                started.elapsed().as_millis() as u64,
            )?
        }
        Err(ended) => ended,
    };
    if result.degraded {
        eprintln!(
            "warning: a summarization model was configured but the local capsule was used: {}",
            result.reason
        );
    }
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
