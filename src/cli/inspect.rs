//! `soba budget` and `soba context`: read-only views of a session log.

use std::path::Path;

use super::{print_json, warn_load, CommonArgs};
use crate::inspect::{budget_report, context_report};
use crate::session::log::read_session;
use crate::util::human_tokens;

pub fn budget(path: &Path, common: &CommonArgs) -> anyhow::Result<()> {
    let (mut session, report) = read_session(path)?;
    warn_load(path, &report);
    let config = common.config_for(Some(&session.header))?;
    session.set_tokenizer(config.model.tokenizer);
    let summarizer = crate::summarize::from_config(&config.summarizer)?;
    let r = budget_report(
        &session,
        config.limits(),
        config.compaction.auto,
        &config.model.name,
        summarizer.as_deref(),
    );
    let warning = report.summary(path);
    if common.json {
        let mut v = serde_json::to_value(&r)?;
        if let Some(w) = &warning {
            v["warning"] = w.clone().into();
            v["load"] = serde_json::to_value(&report)?;
        }
        return print_json(&v);
    }
    let pct = |n: u64| 100.0 * n as f64 / r.hard_limit as f64;
    println!(
        "{} / {} tokens ({:.0}% of hard limit, {})",
        human_tokens(r.effective_tokens),
        human_tokens(r.hard_limit),
        pct(r.effective_tokens),
        r.source.as_str()
    );
    println!(
        "soft limit {}  ·  window {}  ·  max output {}  ·  model {} ({})",
        human_tokens(r.soft_limit),
        human_tokens(r.context_window),
        human_tokens(r.max_output_tokens),
        r.model,
        r.tokenizer
    );
    let b = r.breakdown;
    println!(
        "system {}  ·  tools {}  ·  capsule {}  ·  retained tail {}  ·  new {}",
        b.system, b.tools, b.capsule, b.retained_tail, b.new_entries
    );
    println!("auto-compact {}", if r.auto_compact { "on" } else { "off" });
    println!("capsules written by {}", r.summarizer.uses);
    match &r.last_compaction {
        Some(c) => println!(
            "last compaction {} ({}, {}): {} → {} tokens",
            c.checkpoint_id, c.trigger, c.quality, c.tokens_before, c.tokens_after
        ),
        None => println!("no compaction yet"),
    }
    if let Some(w) = warning {
        println!("warning: {w}");
    }
    Ok(())
}

pub fn context(path: &Path, common: &CommonArgs) -> anyhow::Result<()> {
    let (mut session, report) = read_session(path)?;
    warn_load(path, &report);
    let config = common.config_for(Some(&session.header))?;
    session.set_tokenizer(config.model.tokenizer);
    let r = context_report(&session);
    if common.json {
        return print_json(&r);
    }
    for w in &r.warnings {
        eprintln!("warning: {w}");
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
        println!("── {who}\n{}", text.join("\n"));
    }
    println!("── {} messages, {} tokens", r.messages.len(), r.tokens);
    Ok(())
}
