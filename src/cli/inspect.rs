//! `soba budget` and `soba context`: read-only views of a session log.

use std::path::Path;

use super::{print_json, warn_load, CommonArgs};
use crate::inspect::{budget_report, context_report, preflight_outlook};
use soba_core::session::log::{read_session, read_session_for_budget};
use soba_core::session::unseen_priors::UnseenStore;
use soba_core::util::human_tokens;

pub fn budget(path: &Path, common: &CommonArgs) -> anyhow::Result<()> {
    // A budget reads the index and the current turn: no entry needs to stay parsed.
    let (mut session, report, side_file) = read_session_for_budget(path)?;
    warn_load(path, &report);
    let config = common.config_for_session(&session)?;
    session.configure_counting(&config.model);
    // Read, never written: what this machine learned is taught by the processes that write
    // sessions (the daemon), so a budget reads the same whatever logs were inspected before.
    if let Some(store) = unseen_store_path() {
        let store = UnseenStore::load(&store);
        if let Some(problem) = store.problem() {
            errln!("warning: {problem}");
        }
        let prior = store.prior(session.agent(), &config.model.name, &session.header.id);
        session.set_unseen_prior(prior);
    }
    let summarizer = crate::summarize::from_config(&config.summarizer)?;
    let r = budget_report(
        &session,
        config.limits_under(session.window_setting()),
        config.compaction.auto,
        &config.model.name,
        summarizer.as_deref(),
    );
    // A log no writer recorded counts for (imported by an older version, written by another
    // tool, its side file lost) had to be counted: record what was counted, so that the next
    // budget of it reads the counts. A cache beside the log, never the log itself: a folder
    // this process cannot write to only leaves the next budget to count again.
    if let Err(e) = side_file.record_new_counts(&session, &report) {
        ::log::debug!("token counts of {} not recorded: {e}", path.display());
    }
    // The process ends once the budget is printed, and the session is not read again: freeing
    // each of its lines and index tables one by one would only add to what a budget costs.
    std::mem::forget(session);
    let warning = report.summary(path);
    let keep_note = config.keep_recent_capped.map(|c| c.note());
    let small_note = config.small_window.map(|w| w.note());
    if common.json {
        let mut v = serde_json::to_value(&r)?;
        v["keepRecentTokens"] = config.compaction.keep_recent_tokens.into();
        if let Some(note) = &small_note {
            v["smallWindowNote"] = note.clone().into();
        }
        if let Some(note) = &keep_note {
            v["keepRecentNote"] = note.clone().into();
        }
        if let Some(w) = &warning {
            v["warning"] = w.clone().into();
            v["load"] = serde_json::to_value(&report)?;
        }
        return print_json(&v);
    }
    let pct = |n: u64| 100.0 * n as f64 / r.hard_limit as f64;
    outln!(
        "{} / {} tokens ({:.0}% of hard limit, {})",
        human_tokens(r.effective_tokens),
        human_tokens(r.hard_limit),
        pct(r.effective_tokens),
        r.source.as_str()
    );
    outln!(
        "soft limit {}  ·  window {}  ·  max output {}  ·  model {} ({})",
        human_tokens(r.soft_limit),
        human_tokens(r.context_window),
        human_tokens(r.max_output_tokens),
        r.model,
        r.tokenizer
    );
    if let Some(w) = &r.learned_window {
        outln!(
            "note: {}",
            soba_core::window::describe(w, config.limits().context_window)
        );
    }
    let c = r.calibration;
    // What the first line's source means: the provider's own count, or SOBA's.
    let counted = match r.source {
        soba_core::budget::MeasurementSource::ProviderUsage => {
            "provider_usage: the input tokens the provider reported for the last response, plus \
             the entries after it"
        }
        soba_core::budget::MeasurementSource::Estimated => {
            "estimated: no usage report from the provider since the latest capsule, so every entry"
        }
    };
    match c.source {
        soba_core::tokens::CalibrationSource::Exact => {
            outln!("{counted}, counted with {}", c.tokenizer.as_str())
        }
        soba_core::tokens::CalibrationSource::Session => outln!(
            "{counted}, counted with {} × {:.2} (learned from this session's usage reports: the \
             provider counted its recent tails this much above SOBA's count)",
            c.tokenizer.as_str(),
            c.factor
        ),
        soba_core::tokens::CalibrationSource::Provisional => outln!(
            "{counted}, counted with {} × {:.2} (the catalog factor with a {:.0}% margin until this \
             session's usage reports teach its own: the model's own tokenizer is not public)",
            c.tokenizer.as_str(),
            c.factor,
            (soba_core::tokens::PROVISIONAL_MARGIN - 1.0) * 100.0
        ),
        source => outln!(
            "{counted}, counted with {} × {:.2} ({} factor: the model's own tokenizer is not public)",
            c.tokenizer.as_str(),
            c.factor,
            match source {
                soba_core::tokens::CalibrationSource::Config => "model.countFactor",
                _ => "catalog",
            }
        ),
    }
    // The parts sum to the first line's total: each on the budget's scale, then what is not in
    // the log (the provider's count beyond it, or the allowance an estimate keeps for it).
    let b = r.breakdown.parts;
    outln!(
        "system {}  ·  tools {}  ·  capsule {}  ·  retained tail {}  ·  new {}{}",
        b.system,
        b.tools,
        b.capsule,
        b.retained_tail,
        b.new_entries,
        match b.not_in_log {
            0 => String::new(),
            n => format!("  ·  not in the log {n}"),
        }
    );
    if r.breakdown.counted.total() != b.total() - b.not_in_log {
        let counted = r.breakdown.counted;
        outln!(
            "(parts on the budget's scale; counted with {}: system {}  ·  tools {}  ·  capsule {}  ·  retained tail {}  ·  new {})",
            r.tokenizer,
            counted.system,
            counted.tools,
            counted.capsule,
            counted.retained_tail,
            counted.new_entries
        );
    }
    if let Some(unseen) = &r.breakdown.unseen_text {
        outln!("{unseen}");
    }
    if r.source == soba_core::budget::MeasurementSource::ProviderUsage {
        if let Some(note) = soba_core::budget::not_in_log_note(r.breakdown.parts.not_in_log) {
            outln!("note: {note}");
        }
    }
    if let Some(note) = &small_note {
        outln!("note: {note}");
    }
    match &keep_note {
        Some(note) => outln!("note: {note}"),
        None => outln!(
            "keepRecentTokens {}",
            human_tokens(config.compaction.keep_recent_tokens)
        ),
    }
    outln!("auto-compact {}", if r.auto_compact { "on" } else { "off" });
    outln!("capsules written by {}", r.summarizer.uses);
    match &r.last_compaction {
        Some(c) => outln!(
            "last compaction {} ({}, {}): {} → {} tokens",
            c.checkpoint_id,
            c.trigger,
            c.quality,
            c.tokens_before,
            c.tokens_after
        ),
        None => outln!("no compaction yet"),
    }
    if let Some(w) = warning {
        outln!("warning: {w}");
    }
    Ok(())
}

/// Where this machine keeps what it learned about agents' unseen context: SOBA's data folder
/// (`SOBA_DATA_DIR`, or the per-user default). `None` where there is no home folder: the
/// budget then uses the agents' defaults.
fn unseen_store_path() -> Option<std::path::PathBuf> {
    let paths = crate::daemon::paths::Paths::from_env().ok()?;
    Some(UnseenStore::path_in(&paths.data_dir))
}

pub fn context(path: &Path, common: &CommonArgs) -> anyhow::Result<()> {
    let (mut session, report) = read_session(path)?;
    warn_load(path, &report);
    let config = common.config_for_session(&session)?;
    session.configure_counting(&config.model);
    let r = context_report(&session);
    let preflight = preflight_outlook(&session, &config);
    if common.json {
        let mut v = serde_json::to_value(&r)?;
        v["preflight"] = serde_json::to_value(&preflight)?;
        return print_json(&v);
    }
    for w in &r.warnings {
        errln!("warning: {w}");
    }
    let k = soba_core::util::human_tokens;
    let said = match preflight.decision {
        "send" => format!(
            "the next preflight sends this input as shown: {} tokens, hard limit {}; {}",
            k(preflight.effective_tokens),
            k(preflight.hard_limit),
            preflight.reason
        ),
        "compact_first" => format!(
            "the next preflight would not send this input: {} ({} tokens; hard limit {}); after it the input would be about {} tokens. Run `soba compact {}` to see it",
            preflight.reason,
            k(preflight.effective_tokens),
            k(preflight.hard_limit),
            k(preflight.tokens_after.unwrap_or(0)),
            path.display()
        ),
        "skip_then_send" => format!(
            "a soft compaction is due but would be skipped ({}); this input is sent as shown",
            preflight.reason
        ),
        _ => format!(
            "the next preflight would refuse to send anything: {}",
            preflight.reason
        ),
    };
    if preflight.decision != "send" {
        // Before the input too: a terminal showing the end of a long one must not hide it.
        errln!("note: {said}");
    }
    outln!(
        "{}",
        crate::preview::messages_text(&r.messages).trim_end_matches('\n')
    );
    outln!("── {} messages, {} tokens", r.messages.len(), r.tokens);
    // After the input, where a reader of a long transcript ends up.
    outln!("── {said}");
    Ok(())
}
