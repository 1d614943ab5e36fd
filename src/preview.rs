//! "What SOBA would send": the model input after a compaction, a capsule load or a rewind,
//! computed from the session without appending anything.
//!
//! For a transcript SOBA only follows, these are the only honest answers to those actions:
//! the agent compacts its own context, so SOBA shows what it would send instead of appending
//! a capsule the agent never reads. Pure: the session, the config and the capsule file's
//! contents in, messages and token counts out.

use soba_core::compaction::plan::plan;
use soba_core::compaction::plan::PlanRequest;
use soba_core::compaction::run::generate_local;
use soba_core::compaction::run::Generated;
use soba_core::config::Config;
use soba_core::session::entry::ContentBlock;
use soba_core::session::trigger::Trigger;
use soba_core::session::view::{ModelMessage, ModelView};
use soba_core::session::Session;
use soba_core::tokens::MESSAGE_OVERHEAD_TOKENS;
use soba_core::tool_mapping::ToolMapping;

/// The model input an action would produce. The token figures are the session's count of its
/// log, scaled by its calibration as the budget scales it; [`Preview::on_budget_basis`] adds
/// what the budget holds beyond the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Preview {
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub messages: Vec<ModelMessage>,
}

impl Preview {
    /// The figures on the budget's basis, so that they agree with the status bar: "before" is
    /// the budget's total, and "after" keeps the budget's not-in-log part (a system prompt and
    /// tool schemas the log does not hold), which no action of SOBA's changes.
    pub fn on_budget_basis(self, effective_tokens: u64, not_in_log: u64) -> Preview {
        Preview {
            tokens_before: effective_tokens,
            tokens_after: self.tokens_after + not_in_log,
            ..self
        }
    }
}

fn user_message(text: String) -> ModelMessage {
    ModelMessage {
        role: "user".into(),
        content: vec![ContentBlock::text(text)],
        tool_call_id: None,
        is_error: None,
        entry_id: None,
    }
}

fn tokens_now(session: &Session) -> u64 {
    counted(
        session,
        ModelView::build(session, session.leaf())
            .breakdown(session)
            .total(),
    )
}

/// Counted tokens as the budget scales them (a model whose tokenizer is not public).
fn counted(session: &Session, tokens: u64) -> u64 {
    session.calibration().apply(tokens)
}

/// An explicit `/compact` with the local builder: the capsule, then the retained tail.
pub fn compact(
    session: &Session,
    config: &Config,
    mapping: &ToolMapping,
    instructions: Option<String>,
) -> Result<Preview, String> {
    let request = PlanRequest {
        trigger: Trigger::User,
        requested: false,
        instructions,
        title: None,
        config,
        mapping,
        operation_id: soba_core::util::new_id("op_"),
    };
    let plan = plan(session, session.leaf(), &request).map_err(|no| no.reason)?;
    let Generated::State {
        state,
        quality,
        degraded_reason,
    } = generate_local(&plan)
    else {
        return Err("the local capsule builder produced nothing".into());
    };
    let capsule = plan.capsule("ck_preview".into(), state, quality, degraded_reason);
    let mut messages = vec![user_message(
        soba_core::session::capsule::render::render_for_model(&capsule),
    )];
    let mut view = ModelView::build(session, session.leaf());
    if let Some(limit) = plan.elide_tool_results_over {
        view.elide_results_over(session, limit);
    }
    if let Some(first_kept) = &plan.first_kept_entry_id {
        messages.extend(
            view.messages(session)
                .into_iter()
                .skip_while(|m| m.entry_id.as_deref() != Some(first_kept.as_str())),
        );
    }
    Ok(Preview {
        tokens_before: plan.tokens_before,
        tokens_after: plan.continuation_tokens(&capsule),
        messages,
    })
}

/// The model input at an earlier entry, as `soba/rewind` to it would leave it.
pub fn rewind(session: &Session, entry_id: &str) -> Result<Preview, String> {
    let idx = session
        .index_of(entry_id)
        .ok_or_else(|| format!("entry `{entry_id}` is not in the session"))?;
    let view = ModelView::build(session, Some(idx));
    Ok(Preview {
        tokens_before: tokens_now(session),
        tokens_after: counted(session, view.breakdown(session).total()),
        messages: view.messages(session),
    })
}

/// A Portable Capsule loaded at the leaf: the capsule alone opens the model input.
pub fn capsule_load(
    session: &Session,
    parsed: &soba_core::capsule::portable::Parsed,
    path: &str,
) -> Preview {
    let entry = parsed.capsule.to_loaded_entry("ck_preview".into(), path);
    let text = soba_core::session::capsule::render::render_for_model(&entry);
    let view = ModelView::build(session, session.leaf()).breakdown(session);
    let tokens_after =
        view.system + view.tools + MESSAGE_OVERHEAD_TOKENS + session.tokenizer().count(&text);
    Preview {
        tokens_before: counted(session, view.total()),
        tokens_after: counted(session, tokens_after),
        messages: vec![user_message(text)],
    }
}

/// The messages as plain text, one `── role` line before each: what `soba context` prints.
pub fn messages_text(messages: &[ModelMessage]) -> String {
    let mut out = String::new();
    for m in messages {
        let text: Vec<String> = m
            .content
            .iter()
            .map(|b| match b {
                ContentBlock::Text { text, .. } => text.clone(),
                ContentBlock::Thinking { thinking, .. } => format!("(thinking) {thinking}"),
                ContentBlock::ToolCall {
                    id, name, input, ..
                } => format!("→ {name} [{id}] {input}"),
                ContentBlock::Image { .. } => "[image]".into(),
                ContentBlock::Opaque(o) => format!("[{}]", o.block_type()),
            })
            .collect();
        let who = match &m.tool_call_id {
            Some(id) => format!("tool [{id}]"),
            None => m.role.clone(),
        };
        out.push_str(&format!("── {who}\n{}\n", text.join("\n")));
    }
    out
}

/// The preview as a Markdown document: `header` (who compacts, that nothing was changed), the
/// sizes, then the messages in a fenced block so that nothing in them renders as Markdown.
pub fn document(title: &str, header: &[String], preview: &Preview) -> String {
    let body = messages_text(&preview.messages);
    let fence = "`".repeat(longest_backtick_run(&body).max(2) + 1);
    let mut doc = format!("# {title}\n\n");
    for line in header {
        doc.push_str(&format!("> {line}\n"));
    }
    doc.push_str(&format!(
        "\n{} → {} tokens, {} message{}.\n\n{fence}text\n{body}{fence}\n",
        soba_core::util::human_tokens(preview.tokens_before),
        soba_core::util::human_tokens(preview.tokens_after),
        preview.messages.len(),
        if preview.messages.len() == 1 { "" } else { "s" },
    ));
    doc
}

fn longest_backtick_run(text: &str) -> usize {
    text.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_says_it_is_a_preview_and_fences_the_input_whatever_it_holds() {
        let preview = Preview {
            tokens_before: 12_000,
            tokens_after: 3_000,
            messages: vec![user_message("a ```rust block``` inside".into())],
        };
        let doc = document(
            "What SOBA would send",
            &["Nothing was changed.".into()],
            &preview,
        );
        assert!(doc.starts_with("# What SOBA would send\n\n> Nothing was changed.\n"));
        assert!(doc.contains("12.0k → 3.0k tokens, 1 message."), "{doc}");
        assert!(
            doc.contains("````text\n── user\na ```rust block``` inside\n````\n"),
            "{doc}"
        );
    }

    #[test]
    fn on_the_budgets_basis_before_is_the_budget_and_after_keeps_what_is_not_in_the_log() {
        let counted = Preview {
            tokens_before: 8_000,
            tokens_after: 413,
            messages: Vec::new(),
        };
        let p = counted.on_budget_basis(62_228, 54_272);
        assert_eq!(p.tokens_before, 62_228);
        assert_eq!(p.tokens_after, 54_685);
    }
}
