//! A session at its leaf, read-only: its budget (behind `soba budget` and the daemon's
//! `soba/budget`) and the model input it hands out (behind `soba context`).

use schemars::JsonSchema;
use serde::Serialize;

use soba_core::budget::{Breakdown, Budget, BudgetParts, MeasurementSource};
use soba_core::limits::Limits;
use soba_core::session::view::{ModelMessage, ModelView};
use soba_core::session::Session;

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetReport {
    pub effective_tokens: u64,
    pub hard_limit: u64,
    pub soft_limit: u64,
    pub source: MeasurementSource,
    pub context_window: u64,
    /// Where `contextWindow` comes from: `configured`, or `provider_error` / `refused_request`
    /// when a provider's context-overflow error lowered it for this session.
    pub window_source: &'static str,
    /// The lowered window's setting from the session log, while one is in force: what the
    /// provider's error said and SOBA's count of the refused request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub learned_window: Option<soba_core::window::WindowSetting>,
    pub max_output_tokens: u64,
    pub auto_compact: bool,
    pub last_compaction: Option<LastCompaction>,
    pub breakdown: ReportBreakdown,
    pub model: String,
    pub tokenizer: &'static str,
    /// How the counted tokens were turned into the estimate: the tokenizer, the factor applied
    /// to what was counted (the provider's own usage is never scaled), and where it comes from.
    pub calibration: soba_core::budget::Calibration,
    /// Who writes capsules: the configured model (with its circuit breaker) or the local builder.
    pub summarizer: SummarizerStatus,
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummarizerStatus {
    /// `local`; the configured model and server (never the key); or the agent's own model and
    /// the client it is reached through (`the agent's model (gpt-4o) through soba proxy`).
    pub uses: String,
    /// The model path's circuit breaker; absent for the local builder.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker: Option<crate::summarize::breaker::BreakerState>,
}

impl SummarizerStatus {
    pub fn of(summarizer: Option<&dyn crate::summarize::summarizer::Summarizer>) -> Self {
        match summarizer {
            None => SummarizerStatus {
                uses: "local".into(),
                breaker: None,
            },
            Some(s) => SummarizerStatus {
                uses: s.describe(),
                breaker: s.breaker().map(|b| b.state(std::time::Instant::now())),
            },
        }
    }
}

/// `effectiveTokens` split into the parts of the model input and what the provider counts
/// beyond them (`notInLog`): the parts always sum to the total. Each part is on the budget's
/// scale (SOBA's count times the calibration factor; with provider usage, fitted to the
/// provider's count of the input before the anchor); `counted` gives SOBA's own counts.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportBreakdown {
    #[serde(flatten)]
    pub parts: BudgetParts,
    /// SOBA's counts of the parts of the model input, in the session's tokenizer, before any
    /// scale: what `soba/context` lists.
    pub counted: Breakdown,
    /// The allowance `effectiveTokens` includes for what the provider counts beyond the log:
    /// before the session's usage anchors the budget, the agent's unseen context (system
    /// prompt, tool schemas), learned on this machine or the agent's default; after, the
    /// growth its reports showed beyond the log.
    pub unseen: soba_core::budget::unseen_allowance::Unseen,
    /// `unseen` in words, e.g. `not in the log: ~39.9k, learned from 12 Claude Code sessions`;
    /// absent when there is no allowance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unseen_text: Option<String>,
}

impl ReportBreakdown {
    pub fn of(budget: &Budget) -> ReportBreakdown {
        ReportBreakdown {
            parts: budget.parts,
            counted: budget.breakdown,
            unseen: budget.unseen,
            unseen_text: budget.unseen.describe(),
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastCompaction {
    pub checkpoint_id: String,
    #[schemars(with = "soba_core::session::trigger::Trigger")]
    pub trigger: String,
    #[schemars(with = "soba_core::session::capsule::model::Quality")]
    pub quality: String,
    pub tokens_before: u64,
    pub tokens_after: u64,
    pub ts: String,
}

/// The budget of a session at its leaf.
pub fn budget_report(
    session: &Session,
    limits: Limits,
    auto_default: bool,
    model: &str,
    summarizer: Option<&dyn crate::summarize::summarizer::Summarizer>,
) -> BudgetReport {
    // The kept tally, not a fresh view: the daemon reports the budget after every append.
    let tally = session.tally();
    let budget = Budget::measure(
        limits,
        tally.breakdown(),
        tally.usage_anchor(),
        session.calibration(),
        session.unseen_at(session.leaf(), tally.usage_anchor()),
    );
    let last_compaction = tally.capsule().map(|c| {
        let e = session.entry(c);
        let cap = e.as_capsule().expect("capsule");
        LastCompaction {
            checkpoint_id: cap.checkpoint_id.clone(),
            trigger: cap.trigger.as_str().into(),
            quality: cap.quality.as_str().into(),
            tokens_before: cap.tokens.before,
            tokens_after: cap.tokens.after,
            ts: e.ts.clone(),
        }
    });
    // The limits the caller passes are the session's (`Config::limits_under`): a setting is in
    // force when they use its window.
    let learned_window = session
        .window_setting()
        .filter(|w| w.context_window == Some(limits.context_window))
        .copied();
    BudgetReport {
        window_source: learned_window.map_or("configured", |w| w.source.as_str()),
        learned_window,
        effective_tokens: budget.effective_tokens,
        hard_limit: limits.hard_limit,
        soft_limit: limits.soft_limit,
        source: budget.source,
        context_window: limits.context_window,
        max_output_tokens: limits.max_output_tokens,
        auto_compact: tally.auto_compact().unwrap_or(auto_default),
        last_compaction,
        breakdown: ReportBreakdown::of(&budget),
        model: model.to_string(),
        tokenizer: session.tokenizer().as_str(),
        calibration: budget.calibration,
        summarizer: SummarizerStatus::of(summarizer),
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextReport {
    pub messages: Vec<ModelMessage>,
    pub capsule: Option<serde_json::Value>,
    pub first_kept_entry_id: Option<String>,
    pub tokens: u64,
    pub warnings: Vec<String>,
}

pub fn context_report(session: &Session) -> ContextReport {
    let view = ModelView::build(session, session.leaf());
    let breakdown = view.breakdown(session);
    ContextReport {
        messages: view.messages(session),
        capsule: view.capsule.map(|c| {
            serde_json::to_value(session.entry(c).as_capsule()).expect("capsule serializes")
        }),
        first_kept_entry_id: view.first_kept.map(|i| session.entry(i).id.clone()),
        tokens: breakdown.total(),
        warnings: view.warnings,
    }
}

/// What the preflight barrier would do before it hands out the input `soba context` shows.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreflightOutlook {
    /// `send` (the input as shown), `compact_first` (a compaction runs before anything is
    /// sent), `skip_then_send` (a soft attempt is due but skipped by its ROI check), or
    /// `refused` (nothing may be sent).
    pub decision: &'static str,
    pub trigger: Option<soba_core::session::trigger::Trigger>,
    /// Why, in words.
    pub reason: String,
    pub effective_tokens: u64,
    pub hard_limit: u64,
    /// For `compact_first`: the input's size after the compaction, with the local capsule.
    pub tokens_after: Option<u64>,
}

/// The preflight's decision at the leaf, without acting on it: nothing is written.
pub fn preflight_outlook(
    session: &Session,
    config: &soba_core::config::Config,
) -> PreflightOutlook {
    use soba_core::compaction::triggers::Decision;
    let mapping = config.tool_mapping.clone();
    let barrier = soba_core::compaction::run::Barrier {
        config,
        mapping: &mapping,
    };
    let check = barrier.check(session);
    let outlook = |decision, trigger, reason: String, tokens_after| PreflightOutlook {
        decision,
        trigger,
        reason,
        effective_tokens: check.budget.effective_tokens,
        hard_limit: check.budget.limits.hard_limit,
        tokens_after,
    };
    if check.overflow_exhausted {
        return outlook(
            "refused",
            Some(soba_core::session::trigger::Trigger::ContextOverflow),
            soba_core::compaction::reasons::overflow_exhausted(
                session.tally().facts().overflow_failure.as_deref(),
            ),
            None,
        );
    }
    if let Some(reason) = &check.fixed_part_refusal {
        return outlook(
            "refused",
            Some(soba_core::session::trigger::Trigger::HardLimit),
            reason.clone(),
            None,
        );
    }
    match &check.decision {
        Decision::Proceed | Decision::ConsumeOnly { .. } => outlook(
            "send",
            None,
            "within the limits and no compaction is due".into(),
            None,
        ),
        Decision::SkipSoft {
            trigger, reason, ..
        } => outlook("skip_then_send", Some(*trigger), reason.clone(), None),
        Decision::Compact { trigger, .. } => {
            let req = soba_core::compaction::plan::PlanRequest {
                trigger: *trigger,
                requested: false,
                instructions: None,
                title: None,
                config,
                mapping: &mapping,
                operation_id: String::new(),
            };
            match soba_core::compaction::plan::plan(session, session.leaf(), &req) {
                Ok(plan) => {
                    let capsule = plan.capsule(
                        String::new(),
                        plan.local_state.clone(),
                        soba_core::session::capsule::model::Quality::Local,
                        None,
                    );
                    let after = plan.continuation_tokens(&capsule);
                    if after > check.budget.limits.hard_limit && !trigger.is_soft() {
                        outlook(
                            "refused",
                            Some(*trigger),
                            format!(
                                "{}: even after a {trigger} compaction the input needs {after} tokens, the hard limit is {}",
                                soba_core::compaction::reasons::CONTEXT_BUDGET_EXCEEDED,
                                check.budget.limits.hard_limit
                            ),
                            Some(after),
                        )
                    } else {
                        outlook(
                            "compact_first",
                            Some(*trigger),
                            format!("a {trigger} compaction runs before this input is sent"),
                            Some(after),
                        )
                    }
                }
                Err(no) if trigger.is_soft() => {
                    outlook("skip_then_send", Some(*trigger), no.reason, None)
                }
                Err(no) => outlook("refused", Some(*trigger), no.reason, None),
            }
        }
    }
}

/// What fills the context window, as Claude Code's `/context` shows it: tokens by part and by
/// kind, the largest entries (file reads, tool outputs, messages), and the capsule in force.
/// Behind the daemon's `soba/context` and the editors' "show context" views.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContextUsage {
    /// Counted tokens of the model input at the leaf (system and tool schemas included).
    pub tokens: u64,
    /// By part of the view: system, tools, capsule, retained tail, new entries.
    pub breakdown: Breakdown,
    /// By kind of content.
    pub by_kind: KindTokens,
    /// The largest items of the model input, largest first.
    pub largest: Vec<LargestEntry>,
    /// The capsule the model input starts from; absent before the first compaction.
    pub capsule: Option<CurrentCapsule>,
    /// The summary a followed agent's own latest compaction wrote, where the model input starts
    /// from it (the agent compacted its context after SOBA's latest capsule, or SOBA wrote none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_summary: Option<AgentSummary>,
}

/// A followed agent's own compaction summary (Claude Code's `compact_boundary` summary, Codex
/// `compacted`, a pi compaction entry), as the agent sends it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSummary {
    /// The `foreign_compaction` entry.
    pub entry_id: String,
    /// `claude-code`, `codex` or `pi`.
    pub agent: String,
    /// `auto`, `manual`, or what the agent said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    pub ts: String,
    /// The summary message's tokens in the model input.
    pub tokens: u64,
    /// The summary as the agent sends it.
    pub text: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KindTokens {
    pub system: u64,
    pub tool_schemas: u64,
    pub capsule: u64,
    pub user_messages: u64,
    pub assistant_messages: u64,
    /// Tool results whose call named a file (`path`, `file_path`, …): file reads mostly.
    pub file_reads: u64,
    /// Every other tool result: shell output, searches, fetches.
    pub tool_outputs: u64,
}

/// `capsule`, `user`, `assistant`, `file` (a tool result on a named file) or `tool_output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    Capsule,
    User,
    Assistant,
    File,
    ToolOutput,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LargestEntry {
    /// The log entry; absent for a synthetic result of an interrupted call.
    pub entry_id: Option<String>,
    pub kind: EntryKind,
    /// `read src/parser.rs`, `bash cargo test`, `user: Fix the failing…`: what a person
    /// recognizes.
    pub label: String,
    /// The file the tool call named, for `file` entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    pub tokens: u64,
    pub part: soba_core::session::view::ViewPart,
    /// Shown shortened (head and tail) because the capsule elides large tool results.
    pub elided: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CurrentCapsule {
    pub checkpoint_id: String,
    pub entry_id: String,
    pub title: Option<String>,
    #[schemars(with = "soba_core::session::trigger::Trigger")]
    pub trigger: String,
    #[schemars(with = "soba_core::session::capsule::model::Quality")]
    pub quality: String,
    pub tokens: u64,
    /// The capsule as the model reads it.
    pub text: String,
}

/// Argument names that name a file in the tool calls of the agents SOBA imports.
const PATH_ARGUMENTS: &[&str] = &[
    "path",
    "file_path",
    "filePath",
    "filename",
    "file",
    "notebook_path",
];
/// Argument names whose value says what a tool call did (shell commands, searches, URLs).
const SUMMARY_ARGUMENTS: &[&str] = &["command", "cmd", "pattern", "query", "url", "description"];

/// The first line of `text`, at most `max` characters, with `…` when cut.
fn first_line(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if line.chars().count() <= max {
        line.to_string()
    } else {
        format!("{}…", line.chars().take(max).collect::<String>())
    }
}

fn argument<'a>(input: &'a serde_json::Value, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|n| input.get(*n).and_then(|v| v.as_str()))
        .filter(|s| !s.is_empty())
}

fn message_text(content: &[soba_core::session::entry::ContentBlock]) -> String {
    use soba_core::session::entry::ContentBlock;
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What fills the model input of `session` at its leaf, with the `largest` biggest items.
pub fn context_usage(session: &Session, largest: usize) -> ContextUsage {
    use soba_core::session::entry::{ContentBlock, EntryBody, Role};
    use soba_core::session::view::ViewItem;

    let view = ModelView::build(session, session.leaf());
    let breakdown = view.breakdown(session);
    // Tool calls by id, for naming their results.
    let mut calls: std::collections::HashMap<&str, (&str, &serde_json::Value)> = Default::default();
    for i in view.entry_indices() {
        if let EntryBody::Message(m) = &session.entry(i).body {
            for block in &m.content {
                if let ContentBlock::ToolCall {
                    id, name, input, ..
                } = block
                {
                    calls.insert(id.as_str(), (name.as_str(), input));
                }
            }
        }
    }
    let mut by_kind = KindTokens {
        system: breakdown.system,
        tool_schemas: breakdown.tools,
        ..KindTokens::default()
    };
    let mut items = Vec::new();
    for slot in &view.slots {
        let tokens = ModelView::slot_tokens(session, slot);
        let (entry_id, kind, label, path) = match &slot.item {
            ViewItem::Capsule(i) => {
                let e = session.entry(*i as usize);
                let c = e.as_capsule().expect("capsule slot");
                let label = match &c.title {
                    Some(t) => format!("capsule {} “{t}”", c.checkpoint_id),
                    None => format!("capsule {}", c.checkpoint_id),
                };
                (Some(e.id.clone()), EntryKind::Capsule, label, None)
            }
            ViewItem::ForeignSummary(i) => {
                let e = session.entry(*i as usize);
                let agent = match &e.body {
                    EntryBody::ForeignCompaction(f) => f.agent.as_str(),
                    _ => "source agent",
                };
                (
                    Some(e.id.clone()),
                    EntryKind::Capsule,
                    format!("{agent}'s compaction summary"),
                    None,
                )
            }
            ViewItem::InterruptedResult { .. } => {
                let (call_id, tool_name) = slot.item.interrupted_call(session).unwrap_or_default();
                (
                    None,
                    EntryKind::ToolOutput,
                    format!("{tool_name} (interrupted, {call_id})"),
                    None,
                )
            }
            ViewItem::Entry(i) => {
                let e = session.entry(*i as usize);
                match &e.body {
                    EntryBody::Message(m) => {
                        let (kind, who) = match m.role {
                            Role::User => (EntryKind::User, "user"),
                            _ => (EntryKind::Assistant, "assistant"),
                        };
                        let text = message_text(&m.content);
                        let label = if text.trim().is_empty() {
                            let called: Vec<&str> = m
                                .content
                                .iter()
                                .filter_map(|b| match b {
                                    ContentBlock::ToolCall { name, .. } => Some(name.as_str()),
                                    _ => None,
                                })
                                .collect();
                            format!("{who}: calls {}", called.join(", "))
                        } else {
                            format!("{who}: {}", first_line(&text, 60))
                        };
                        (Some(e.id.clone()), kind, label, None)
                    }
                    EntryBody::ToolResult(r) => {
                        let call = calls.get(r.call_id.as_str());
                        let name = call
                            .map(|(n, _)| *n)
                            .or(r.tool_name.as_deref())
                            .unwrap_or("tool");
                        let path = call.and_then(|(_, input)| argument(input, PATH_ARGUMENTS));
                        match path {
                            Some(p) => (
                                Some(e.id.clone()),
                                EntryKind::File,
                                format!("{name} {p}"),
                                Some(p.to_string()),
                            ),
                            None => {
                                let what = call
                                    .and_then(|(_, input)| argument(input, SUMMARY_ARGUMENTS))
                                    .map(|s| first_line(s, 60))
                                    .unwrap_or_else(|| first_line(&message_text(&r.content), 60));
                                (
                                    Some(e.id.clone()),
                                    EntryKind::ToolOutput,
                                    format!("{name} {what}").trim_end().to_string(),
                                    None,
                                )
                            }
                        }
                    }
                    other => (
                        Some(e.id.clone()),
                        EntryKind::ToolOutput,
                        other.type_name().to_string(),
                        None,
                    ),
                }
            }
        };
        match kind {
            EntryKind::Capsule => by_kind.capsule += tokens,
            EntryKind::User => by_kind.user_messages += tokens,
            EntryKind::Assistant => by_kind.assistant_messages += tokens,
            EntryKind::File => by_kind.file_reads += tokens,
            EntryKind::ToolOutput => by_kind.tool_outputs += tokens,
        }
        items.push(LargestEntry {
            entry_id,
            kind,
            label,
            path,
            tokens,
            part: slot.part,
            elided: slot.elided,
        });
    }
    // Largest first; ties in input order, so the list is stable between calls.
    items.sort_by_key(|e| std::cmp::Reverse(e.tokens));
    items.truncate(largest);
    let capsule = view.capsule.map(|i| {
        let e = session.entry(i);
        let c = e.as_capsule().expect("capsule");
        CurrentCapsule {
            checkpoint_id: c.checkpoint_id.clone(),
            entry_id: e.id.clone(),
            title: c.title.clone(),
            trigger: c.trigger.as_str().into(),
            quality: c.quality.as_str().into(),
            // On the budget's scale, as the capsule lists and creations give it: one size for
            // a capsule everywhere.
            tokens: session.calibration().apply(session.tokens_of(i)),
            text: soba_core::session::capsule::render::render_for_model(c),
        }
    });
    let agent_summary = view.foreign.and_then(|i| {
        let e = session.entry(i);
        let EntryBody::ForeignCompaction(f) = &e.body else {
            return None;
        };
        let text = soba_core::session::foreign::foreign_summary_text(f)?;
        Some(AgentSummary {
            entry_id: e.id.clone(),
            agent: f.agent.clone(),
            trigger: f.trigger.clone(),
            ts: e.ts.clone(),
            tokens: soba_core::session::foreign::foreign_summary_tokens_of(session.tokenizer(), f),
            text,
        })
    });
    ContextUsage {
        tokens: breakdown.total(),
        breakdown,
        by_kind,
        largest: items,
        capsule,
        agent_summary,
    }
}

#[cfg(test)]
mod tests {
    /// The budget `soba budget` prints, of the log read as it reads it, leaves at most `most`
    /// entries parsed.
    fn parsed_after_budget(path: &std::path::Path, most: usize) {
        let (mut s, report) = soba_core::session::log::read_session_as_lines(path).unwrap();
        assert!(report.is_clean());
        s.set_tokenizer(soba_core::tokens::TokenizerKind::O200kBase);
        let s = &s;
        assert_eq!(
            s.parsed_entries(),
            0,
            "opening parses each line to index it only"
        );
        let config =
            soba_core::config::Config::resolve(&[], None, &soba_core::config::Overrides::default())
                .unwrap();
        let report = super::budget_report(s, config.limits(), true, "m", None);
        assert!(report.last_compaction.is_some());
        let parsed = s.parsed_entries();
        assert!(
            parsed <= most,
            "{parsed} entries parsed: {:?}",
            s.parsed_entry_kinds()
        );
    }

    /// A budget reads the index (types, call ids, usage, counts), not the history: what stays
    /// parsed is the current turn, the capsule and the newest usage reports it learns from
    /// (each with the entry its response starts at), never the view's hundreds of entries.
    #[test]
    fn a_budget_of_a_long_log_keeps_parsed_only_what_it_reads() {
        let dir = tempfile::tempdir().unwrap();
        let (b, turn) = soba_core::session::testing::long_session_with_usage();
        let p = soba_core::session::testing::written_log(dir.path(), &b.session);
        assert_budget_reads_only_the_turn(&p, &b.session, turn);
        // Without the side file the samples are measured, not read: still the same entries.
        std::fs::remove_file(soba_core::session::token_file::path_for(&p)).unwrap();
        assert_budget_reads_only_the_turn(&p, &b.session, turn);
    }

    fn assert_budget_reads_only_the_turn(
        path: &std::path::Path,
        session: &soba_core::session::Session,
        turn: usize,
    ) {
        let view = soba_core::session::view::ModelView::build(session, session.leaf());
        assert!(view.entry_indices().count() > 100);
        parsed_after_budget(path, turn + 1 + 2 * soba_core::budget::LEARN_FROM_REPORTS);
    }

    /// Another JSON writer's spacing (`{"id": "…", "parentId": …}`, what Python's `json`
    /// writes) does not make a log be held parsed: ids are still read from the lines.
    #[test]
    fn a_log_rewritten_with_spaces_after_its_keys_is_held_as_lines_too() {
        let dir = tempfile::tempdir().unwrap();
        let (b, turn) = soba_core::session::testing::long_session_with_usage();
        let p = soba_core::session::testing::written_log(dir.path(), &b.session);
        std::fs::remove_file(soba_core::session::token_file::path_for(&p)).unwrap();
        let spaced: String = std::fs::read_to_string(&p)
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let mut out = Vec::new();
                let mut ser = serde_json::Serializer::with_formatter(
                    &mut out,
                    soba_core::session::testing::SpacedFormatter,
                );
                serde::Serialize::serialize(&v, &mut ser).unwrap();
                String::from_utf8(out).unwrap() + "\n"
            })
            .collect();
        assert!(spaced.lines().nth(1).unwrap().starts_with(r#"{"id": ""#));
        std::fs::write(&p, spaced).unwrap();
        assert_budget_reads_only_the_turn(&p, &b.session, turn);
        let (reread, _) = soba_core::session::log::read_session(&p).unwrap();
        assert_eq!(reread.entries().to_vec(), b.session.entries().to_vec());
    }

    use super::*;
    use serde_json::json;
    use soba_core::session::testing::Builder;
    use soba_core::session::view::ViewPart;

    #[test]
    fn context_usage_names_the_largest_file_reads_and_tool_outputs() {
        let mut b = Builder::new();
        b.user("Fix the failing parser test\nmore detail here");
        b.call("c1", "Read", json!({ "file_path": "src/parser.rs" }));
        b.result("c1", &"fn parse() {}\n".repeat(400));
        b.bash("c2", "cargo test -p parser");
        b.result("c2", &"test parser::cases ... FAILED\n".repeat(100));
        b.assistant("The parser drops the last token.");
        let usage = context_usage(&b.session, 3);

        assert_eq!(usage.largest.len(), 3);
        let top = &usage.largest[0];
        assert_eq!(top.kind, EntryKind::File);
        assert_eq!(top.label, "Read src/parser.rs");
        assert_eq!(top.path.as_deref(), Some("src/parser.rs"));
        assert_eq!(top.entry_id.as_deref(), Some("e3"));
        assert_eq!(top.part, ViewPart::New);
        let second = &usage.largest[1];
        assert_eq!(second.kind, EntryKind::ToolOutput);
        assert_eq!(second.label, "Bash cargo test -p parser");
        assert!(top.tokens > second.tokens && second.tokens > usage.largest[2].tokens);
        assert!(usage.capsule.is_none());
    }

    #[test]
    fn context_usage_by_kind_adds_up_to_the_total() {
        let mut b = Builder::new();
        b.user("Fix the failing parser test");
        b.call("c1", "Read", json!({ "path": "README.md" }));
        b.result("c1", "# Parser\nReads tokens.");
        b.bash("c2", "ls");
        b.result("c2", "src\ntests");
        b.assistant("Done.");
        let usage = context_usage(&b.session, 100);
        let k = &usage.by_kind;
        assert_eq!(
            k.system
                + k.tool_schemas
                + k.capsule
                + k.user_messages
                + k.assistant_messages
                + k.file_reads
                + k.tool_outputs,
            usage.tokens
        );
        assert_eq!(usage.tokens, usage.breakdown.total());
        assert!(k.file_reads > 0 && k.tool_outputs > 0 && k.user_messages > 0);
        assert_eq!(usage.largest.len(), 6, "every item when the limit allows");
        let labels: Vec<&str> = usage.largest.iter().map(|e| e.label.as_str()).collect();
        assert!(
            labels.contains(&"user: Fix the failing parser test"),
            "{labels:?}"
        );
        assert!(labels.contains(&"assistant: calls Read"), "{labels:?}");
    }
}
