//! `soba budget` and `soba context`: read-only views of a session log.

use std::path::Path;

use super::{print_json, warn_load, CommonArgs};
use crate::inspect::{budget_report, context_report, preflight_outlook};
use crate::session::log::read_session;
use crate::util::human_tokens;

pub fn budget(path: &Path, common: &CommonArgs) -> anyhow::Result<()> {
    let (mut session, report) = read_session(path)?;
    warn_load(path, &report);
    let config = common.config_for_session(&session)?;
    session.configure_counting(&config.model);
    let summarizer = crate::summarize::from_config(&config.summarizer)?;
    let r = budget_report(
        &session,
        config.limits(),
        config.compaction.auto,
        &config.model.name,
        summarizer.as_deref(),
    );
    let warning = report.summary(path);
    let keep_note = config.keep_recent_capped.map(|c| c.note());
    if common.json {
        let mut v = serde_json::to_value(&r)?;
        v["keepRecentTokens"] = config.compaction.keep_recent_tokens.into();
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
    let c = r.calibration;
    // What the first line's source means: the provider's own count, or SOBA's.
    let counted = match r.source {
        crate::budget::MeasurementSource::ProviderUsage => {
            "provider_usage: the input tokens the provider reported for the last response, plus \
             the entries after it"
        }
        crate::budget::MeasurementSource::Estimated => {
            "estimated: no usage report from the provider since the latest capsule, so every entry"
        }
    };
    match c.source {
        crate::budget::CalibrationSource::Exact => {
            outln!("{counted}, counted with {}", c.tokenizer.as_str())
        }
        crate::budget::CalibrationSource::Session => outln!(
            "{counted}, counted with {} × {:.2} (learned from this session's usage reports: the \
             provider counted its recent tails this much above SOBA's count)",
            c.tokenizer.as_str(),
            c.factor
        ),
        crate::budget::CalibrationSource::Provisional => outln!(
            "{counted}, counted with {} × {:.2} (the catalog factor with a {:.0}% margin until this \
             session's usage reports teach its own: the model's own tokenizer is not public)",
            c.tokenizer.as_str(),
            c.factor,
            (crate::budget::PROVISIONAL_MARGIN - 1.0) * 100.0
        ),
        source => outln!(
            "{counted}, counted with {} × {:.2} ({} factor: the model's own tokenizer is not public)",
            c.tokenizer.as_str(),
            c.factor,
            match source {
                crate::budget::CalibrationSource::Config => "model.countFactor",
                _ => "catalog",
            }
        ),
    }
    let b = r.breakdown.parts;
    outln!(
        "system {}  ·  tools {}  ·  capsule {}  ·  retained tail {}  ·  new {}{}",
        b.system,
        b.tools,
        b.capsule,
        b.retained_tail,
        b.new_entries,
        match (r.breakdown.not_in_log, r.source) {
            (0, crate::budget::MeasurementSource::Estimated) => {
                // The factor's share, so the parts add up to the first line's total.
                match r.effective_tokens.saturating_sub(b.total()) {
                    0 => String::new(),
                    n => format!("  ·  tokenizer scale {n}"),
                }
            }
            (0, _) => String::new(),
            (n, _) => format!("  ·  not in the log {n}"),
        }
    );
    if let Some(note) = crate::budget::not_in_log_note(r.breakdown.not_in_log) {
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
    let k = crate::util::human_tokens;
    let said = match preflight.decision {
        "send" => None,
        "compact_first" => Some(format!(
            "the next preflight would not send this input: {} ({} tokens; hard limit {}); after it the input would be about {} tokens. Run `soba compact {}` to see it",
            preflight.reason,
            k(preflight.effective_tokens),
            k(preflight.hard_limit),
            k(preflight.tokens_after.unwrap_or(0)),
            path.display()
        )),
        "skip_then_send" => Some(format!(
            "a soft compaction is due but would be skipped ({}); this input is sent as shown",
            preflight.reason
        )),
        _ => Some(format!(
            "the next preflight would refuse to send anything: {}",
            preflight.reason
        )),
    };
    if let Some(said) = &said {
        errln!("note: {said}");
    }
    for m in &r.messages {
        let text: Vec<String> = m
            .content
            .iter()
            .map(|b| match b {
                crate::session::entry::ContentBlock::Text { text, .. } => text.clone(),
                crate::session::entry::ContentBlock::Thinking { thinking, .. } => {
                    format!("(thinking) {thinking}")
                }
                crate::session::entry::ContentBlock::ToolCall {
                    id, name, input, ..
                } => {
                    format!("→ {name} [{id}] {input}")
                }
                crate::session::entry::ContentBlock::Image { .. } => "[image]".into(),
                crate::session::entry::ContentBlock::Opaque(o) => format!("[{}]", o.block_type()),
            })
            .collect();
        let who = match &m.tool_call_id {
            Some(id) => format!("tool [{id}]"),
            None => m.role.clone(),
        };
        outln!("── {who}\n{}", text.join("\n"));
    }
    outln!("── {} messages, {} tokens", r.messages.len(), r.tokens);
    if let Some(said) = said {
        // Again after the input, where a reader of a long transcript ends up.
        outln!("── {said}");
    }
    Ok(())
}
