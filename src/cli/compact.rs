//! `soba compact` and `soba capsule create`: explicit compactions of a session log.

use std::path::Path;

use super::{print_json, warn_load, CommonArgs};
use soba_core::compaction::plan::Plan;
use soba_core::compaction::run::Barrier;
use soba_core::compaction::CompactionResult;
use soba_core::config::Config;
use soba_core::config::Durability;
use soba_core::session::entry::Outcome;
use soba_core::session::log::{LogError, SessionLog};
use soba_core::util::human_tokens;

/// Open a session for writing with its layered configuration. The log is read once: its
/// configuration comes from the session it holds (a long log took as long again to read
/// only for that), and the configured durability applies from the first append. What the
/// plan reads stays parsed from the load ([`SessionLog::open_to_compact`]).
fn open(path: &Path, common: &CommonArgs) -> anyhow::Result<(SessionLog, Config)> {
    let (mut log, report) = SessionLog::open_to_compact(path, Durability::default())?;
    let config = common.config_for_session(log.session())?;
    log.set_durability(config.durability);
    warn_load(path, &report);
    log.session_mut().configure_counting(&config.model);
    Ok((log, config))
}

/// Generate the capsule of a plan (the configured model, else the local builder; Ctrl-C
/// cancels) and commit it.
fn run_plan(
    log: &mut SessionLog,
    plan: Result<Plan, CompactionResult>,
    config: &Config,
    common: &CommonArgs,
) -> anyhow::Result<CompactionResult> {
    let flight = crate::flight::FlightLog::for_session_log(log.path());
    let session_id = log.session().header.id.clone();
    let plan = match plan {
        Ok(plan) => plan,
        Err(ended) => {
            flight.record(&session_id, &ended);
            return Ok(ended);
        }
    };
    let summarizer = crate::summarize::from_config(&config.summarizer)?;
    let started = std::time::Instant::now();
    let show_progress = !common.json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let progress = move |pct: u8| {
        if show_progress {
            eprint!("\rCompacting context · {pct}%");
        }
    };
    let (generation, cancelled) =
        crate::summarize::generate_blocking(&plan, summarizer.as_deref(), &progress)?;
    if show_progress {
        errln!();
    }
    let elapsed = started.elapsed().as_millis() as u64;
    let mut result = soba_core::compaction::run::commit(
        log,
        &plan,
        generation.generated.clone(),
        cancelled,
        elapsed,
    )?;
    let corrections = generation.annotate(&mut result);
    flight.record_corrected(&session_id, &result, corrections);
    if result.fallback {
        errln!(
            "warning: a summarization model was configured but the local capsule was used: {}",
            result.reason
        );
    }
    Ok(result)
}

/// Done with a log whose process ends next: its memory goes back to the system with the
/// process, at once. Freed entry by entry, a long session held parsed took a tenth of a
/// compaction's time. Every write is already made (the log and its side files are written
/// unbuffered), and the lock goes with the process.
fn leave_to_exit(log: SessionLog) {
    std::mem::forget(log);
}

fn with_barrier<T>(
    log: &mut SessionLog,
    config: &Config,
    f: impl FnOnce(&Barrier<'_>, &mut SessionLog) -> Result<T, LogError>,
) -> Result<T, LogError> {
    let mapping = config.tool_mapping.clone();
    let barrier = Barrier {
        config,
        mapping: &mapping,
    };
    f(&barrier, log)
}

pub fn compact(
    path: &Path,
    instructions: Option<String>,
    mirror: bool,
    common: &CommonArgs,
) -> anyhow::Result<()> {
    let (mut log, config) = open(path, common)?;
    let mirror = mirror || config.mirror_explicit_compacts;
    let plan = with_barrier(&mut log, &config, |b, log| {
        b.explicit_mirrored(log, instructions, mirror)
    })?;
    let result = run_plan(&mut log, plan, &config, common)?;
    leave_to_exit(log);
    if let Some(note) = &result.mirror_note {
        errln!("note: not mirrored into Project Memory: {note}");
    }
    if common.json {
        print_json(&result)?;
    } else {
        outln!("{}", result.completion_line());
        if result.outcome == Outcome::Completed {
            outln!(
                "kept from {} · {} → {} tokens (hard limit {})",
                result.first_kept_entry_id.as_deref().unwrap_or("-"),
                human_tokens(result.tokens_before),
                human_tokens(result.tokens_after),
                human_tokens(result.hard_limit)
            );
        }
        if let Some(path) = &result.mirrored_to {
            outln!("mirrored into Project Memory: {path}");
        }
    }
    if result.outcome == Outcome::Failed {
        anyhow::bail!("compaction failed: {}", result.reason);
    }
    Ok(())
}

/// `soba capsule create SESSION TITLE`: an intentional capsule of the current state, recorded
/// in the session without changing its model input.
pub fn create(path: &Path, title: &str, common: &CommonArgs) -> anyhow::Result<()> {
    let (mut log, config) = open(path, common)?;
    let plan = with_barrier(&mut log, &config, |b, log| {
        b.handoff(log, title.to_string())
    })?;
    let result = run_plan(&mut log, plan, &config, common)?;
    if result.outcome != Outcome::Completed {
        anyhow::bail!("no capsule created ({}): {}", result.outcome, result.reason);
    }
    // On the budget's scale (the session's count factor applied), as `soba capsule list` and
    // the budget show it, not as the tokenizer counted it.
    let capsule_tokens = result
        .checkpoint_id
        .as_deref()
        .and_then(|ck| soba_core::capsule::handoff::capsule_tokens(log.session(), ck))
        .map(|counted| log.session().calibration().apply(counted))
        .unwrap_or(0);
    leave_to_exit(log);
    if common.json {
        return print_json(&serde_json::json!({
            "checkpointId": result.checkpoint_id,
            "title": title,
            "quality": result.quality,
            "tokens": capsule_tokens,
            "sessionTokens": result.tokens_before,
            "result": result,
        }));
    }
    outln!(
        "created {} \"{title}\" ({}, {} tokens for a session of {}); export it with `soba capsule export {} {} FILE.capsule.md`",
        result.checkpoint_id.as_deref().unwrap_or("-"),
        result.quality.map(|q| q.as_str()).unwrap_or("-"),
        human_tokens(capsule_tokens),
        human_tokens(result.tokens_before),
        path.display(),
        result.checkpoint_id.as_deref().unwrap_or("-"),
    );
    Ok(())
}
