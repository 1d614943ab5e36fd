//! The timeline as terminal lines: a budget bar per turn and one line per compaction.
//!
//! A turn's bar is printed when the turn ends, and also just before a compaction so the drop is
//! visible. Colour is opt-in (the caller decides: a terminal, and `NO_COLOR` unset).

use super::{Event, ForeignMark, Step, Timeline, TimelineCompaction};
use soba_core::limits::Limits;
use soba_core::session::entry::Outcome;
use soba_core::util::human_tokens;

const BAR_CELLS: u64 = 20;

struct Paint(bool);

impl Paint {
    fn with(&self, code: &str, s: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
}

/// `turn  7 ▕██████████████░░░░░░▏ 14.2k / 19.9k  estimated`
pub fn budget_bar(step: &Step, limits: &Limits, color: bool) -> String {
    let p = Paint(color);
    let cells = |t: u64| (t.min(limits.hard_limit) * BAR_CELLS).div_ceil(limits.hard_limit.max(1));
    let filled = cells(step.effective_tokens);
    let soft = cells(limits.soft_limit);
    let mut bar = String::new();
    for i in 0..BAR_CELLS {
        bar.push_str(&if i >= filled {
            p.with("2", "░")
        } else if i >= soft {
            p.with("33", "█")
        } else {
            p.with("32", "█")
        });
    }
    format!(
        "turn {:>2} ▕{bar}▏ {:>6} / {}  {}",
        step.turn,
        human_tokens(step.effective_tokens),
        human_tokens(limits.hard_limit),
        step.source.as_str()
    )
}

/// The persistent completion line of a compaction, marked by outcome.
pub fn compaction_line(c: &TimelineCompaction, color: bool) -> String {
    let p = Paint(color);
    let (mark, code) = match c.result.outcome {
        Outcome::Completed if c.result.fallback => ("⟳", "33"),
        Outcome::Completed => ("⟳", "36"),
        Outcome::Skipped => ("·", "2"),
        Outcome::Stale | Outcome::Cancelled => ("×", "35"),
        Outcome::Failed => ("!", "31"),
    };
    p.with(
        code,
        &format!(
            "        {mark} turn {} · {}",
            c.turn,
            soba_core::util::terminal_text(&c.result.completion_line())
        ),
    )
}

/// A compaction the source agent made, for comparison.
pub fn foreign_line(f: &ForeignMark, color: bool) -> String {
    let p = Paint(color);
    let at = f
        .tokens_before
        .map_or("an unreported size".to_string(), |t| {
            format!("{} tokens", human_tokens(t))
        });
    let mut line = format!(
        "        ◇ turn {} · {} compacted ({}) at {at}; SOBA's input was {} tokens",
        f.turn,
        soba_core::util::terminal_text(&f.agent),
        soba_core::util::terminal_text(f.trigger.as_deref().unwrap_or("unspecified")),
        human_tokens(f.soba_tokens)
    );
    if let Some(s) = f.summary_tokens {
        line.push_str(&format!("; its summary: {} tokens", human_tokens(s)));
    }
    if let Some(k) = f.kept_items {
        line.push_str(&format!(", {k} items kept"));
    }
    p.with("34", &line)
}

/// Turns events into lines as they arrive.
pub struct LivePrinter {
    limits: Limits,
    color: bool,
    pending: Option<Step>,
}

impl LivePrinter {
    pub fn new(limits: Limits, color: bool) -> Self {
        LivePrinter {
            limits,
            color,
            pending: None,
        }
    }

    /// The lines this event completes.
    pub fn event(&mut self, event: Event<'_>) -> Vec<String> {
        let mut lines = Vec::new();
        match event {
            Event::Step(step) => {
                if let Some(prev) = self.pending.take() {
                    if prev.turn != step.turn {
                        lines.push(budget_bar(&prev, &self.limits, self.color));
                    }
                }
                self.pending = Some(step.clone());
            }
            Event::Compaction(c) => {
                lines.extend(self.flush());
                lines.push(compaction_line(c, self.color));
            }
            Event::Foreign(f) => {
                lines.extend(self.flush());
                lines.push(foreign_line(f, self.color));
            }
        }
        lines
    }

    /// The bar of the last step, at the end of the run.
    pub fn flush(&mut self) -> Option<String> {
        self.pending
            .take()
            .map(|s| budget_bar(&s, &self.limits, self.color))
    }
}

/// The source agent's compactions beside SOBA's: for each, where and at what size it compacted
/// and what it kept, and what SOBA had done by then and what its latest capsule kept.
pub fn comparison(timeline: &Timeline) -> Vec<String> {
    if timeline.foreign_compactions.is_empty() {
        return Vec::new();
    }
    let mut lines = vec!["The source agent's compactions beside SOBA's:".to_string()];
    for f in &timeline.foreign_compactions {
        lines.push(format!(
            "  turn {:>2} · {} compacted ({}) at {}; kept {}",
            f.turn,
            soba_core::util::terminal_text(&f.agent),
            soba_core::util::terminal_text(f.trigger.as_deref().unwrap_or("unspecified")),
            f.tokens_before
                .map_or("an unreported size".into(), |t| format!(
                    "{} tokens",
                    human_tokens(t)
                )),
            soba_core::util::terminal_text(&timeline.source_kept(f))
        ));
        let done: Vec<&TimelineCompaction> = timeline.completed_before(f).collect();
        let soba = match done.last() {
            None => format!(
                "SOBA by then: no compaction, context {} tokens",
                human_tokens(f.soba_tokens)
            ),
            Some(last) => {
                let r = &last.result;
                let mut line = format!(
                    "SOBA by then: {} compaction{}, context {} tokens; the last ({}, turn {}) {} → {}",
                    done.len(),
                    if done.len() == 1 { "" } else { "s" },
                    human_tokens(f.soba_tokens),
                    r.trigger,
                    last.turn,
                    human_tokens(r.tokens_before),
                    human_tokens(r.tokens_after)
                );
                if let Some(k) = last.kept {
                    line.push_str(&format!(
                        ", a {}-token capsule keeping {} files read, {} modified, {} checks",
                        human_tokens(k.capsule_tokens),
                        k.read_files,
                        k.modified_files,
                        k.verifications
                    ));
                }
                line
            }
        };
        lines.push(format!("          {soba}"));
    }
    lines
}

/// The run summed up, under a heading: the same sentences as the HTML page's bottom line.
pub fn bottom_line(timeline: &Timeline) -> Vec<String> {
    let mut lines = vec!["Bottom line:".to_string()];
    lines.extend(
        timeline
            .bottom_line_sentences()
            .iter()
            .map(|s| format!("  {}", soba_core::util::terminal_text(s))),
    );
    lines
}

/// The whole timeline as lines, as a live printer would have printed it.
pub fn render(timeline: &Timeline, color: bool) -> Vec<String> {
    let mut printer = LivePrinter::new(timeline.limits, color);
    let mut lines = Vec::new();
    let mut compactions = timeline.compactions.iter().peekable();
    let mut foreign = timeline.foreign_compactions.iter().peekable();
    for step in &timeline.steps {
        while let Some(f) = foreign.next_if(|f| f.step <= step.index) {
            lines.extend(printer.event(Event::Foreign(f)));
        }
        while let Some(c) = compactions.next_if(|c| c.step <= step.index) {
            lines.extend(printer.event(Event::Compaction(c)));
        }
        lines.extend(printer.event(Event::Step(step)));
    }
    for f in foreign {
        lines.extend(printer.event(Event::Foreign(f)));
    }
    for c in compactions {
        lines.extend(printer.event(Event::Compaction(c)));
    }
    lines.extend(printer.flush());
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use soba_core::budget::MeasurementSource;
    use soba_core::compaction::CompactionResult;
    use soba_core::session::trigger::Trigger;

    fn limits() -> Limits {
        Limits {
            context_window: 24000,
            max_output_tokens: 2000,
            safety_reserve_tokens: 2000,
            hard_limit: 20000,
            soft_limit: 14000,
        }
    }

    fn step(index: usize, turn: usize, tokens: u64) -> Step {
        Step {
            index,
            turn,
            effective_tokens: tokens,
            source: MeasurementSource::Estimated,
            messages: 3,
            source_agent_tokens: None,
        }
    }

    fn compaction(step: usize, turn: usize) -> TimelineCompaction {
        let mut result = CompactionResult::ended(
            "op",
            Trigger::HardLimit,
            Outcome::Completed,
            "",
            21000,
            limits(),
        );
        result.tokens_after = 8400;
        result.reclaimed_percent = 60.0;
        result.checkpoint_id = Some("ck_1".into());
        TimelineCompaction {
            step,
            turn,
            result,
            kept: Some(crate::report::Kept {
                capsule_tokens: 900,
                read_files: 3,
                modified_files: 1,
                verifications: 2,
            }),
        }
    }

    #[test]
    fn the_bar_fills_in_proportion_to_the_hard_limit() {
        assert_eq!(
            budget_bar(&step(0, 7, 14200), &limits(), false),
            "turn  7 ▕███████████████░░░░░▏  14.2k / 20.0k  estimated"
        );
        assert_eq!(
            budget_bar(&step(0, 12, 0), &limits(), false),
            "turn 12 ▕░░░░░░░░░░░░░░░░░░░░▏      0 / 20.0k  estimated"
        );
    }

    #[test]
    fn colour_marks_cells_past_the_soft_limit_and_is_absent_when_off() {
        let plain = budget_bar(&step(0, 1, 18000), &limits(), false);
        let coloured = budget_bar(&step(0, 1, 18000), &limits(), true);
        assert!(!plain.contains('\x1b'));
        assert_eq!(
            coloured.matches("\x1b[33m█").count(),
            4,
            "cells 15–18 are over soft"
        );
        assert_eq!(coloured.matches("\x1b[32m█").count(), 14);
    }

    #[test]
    fn a_turn_bar_prints_when_the_turn_ends_and_before_each_compaction() {
        let mut p = LivePrinter::new(limits(), false);
        assert!(p.event(Event::Step(&step(0, 1, 5000))).is_empty());
        assert!(p.event(Event::Step(&step(1, 1, 9000))).is_empty());
        let lines = p.event(Event::Step(&step(2, 2, 12000)));
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with("turn  1 ") && lines[0].contains("9.0k"));
        let lines = p.event(Event::Compaction(&compaction(3, 2)));
        assert_eq!(lines.len(), 2);
        assert!(lines[0].contains("12.0k"));
        assert!(
            lines[1].contains("⟳ turn 2 · hard_limit compact: 21.0k → 8.4k tokens (−60%), ck_1")
        );
        assert_eq!(p.flush(), None, "nothing pending after a compaction");
    }

    #[test]
    fn the_comparison_puts_each_foreign_compaction_beside_what_soba_had_done_by_then() {
        let mut t = Timeline::new("t", "m", "o200k_base", limits());
        assert!(comparison(&t).is_empty(), "nothing to compare");
        t.compactions = vec![compaction(2, 2), compaction(9, 5)];
        let mark = |step, kept_items, compactions_before| crate::report::ForeignMark {
            step,
            turn: 3,
            agent: "codex".into(),
            trigger: Some("auto".into()),
            tokens_before: Some(150_000),
            summary_tokens: Some(2100),
            kept_items,
            first_kept_entry_id: None,
            soba_tokens: 9000,
            compactions_before,
        };
        t.foreign_compactions = vec![mark(1, None, 0), mark(4, Some(4), 1)];
        let lines = comparison(&t);
        assert_eq!(lines.len(), 5, "{lines:#?}");
        assert_eq!(
            lines[1],
            "  turn  3 · codex compacted (auto) at 150.0k tokens; kept a 2.1k-token summary"
        );
        assert_eq!(
            lines[2],
            "          SOBA by then: no compaction, context 9.0k tokens"
        );
        assert!(lines[3].ends_with("kept a 2.1k-token summary, 4 items verbatim"));
        // The context the source agent reported at its next inference is what it kept.
        t.steps = vec![step(0, 3, 5000), step(1, 3, 9000)];
        t.steps[1].source_agent_tokens = Some(31_000);
        assert!(comparison(&t)[1]
            .ends_with("kept a 2.1k-token summary; its next input was 31.0k tokens"));
        assert_eq!(
            lines[4],
            "          SOBA by then: 1 compaction, context 9.0k tokens; the last (hard_limit, turn 2) 21.0k → 8.4k, a 900-token capsule keeping 3 files read, 1 modified, 2 checks"
        );
    }

    #[test]
    fn rendering_a_whole_timeline_matches_the_live_lines() {
        let mut t = Timeline::new("t", "m", "o200k_base", limits());
        t.steps = vec![step(0, 1, 5000), step(1, 1, 19000), step(2, 2, 8400)];
        t.compactions = vec![compaction(2, 2)];
        let lines = render(&t, false);
        assert_eq!(lines.len(), 3, "{lines:#?}");
        assert!(lines[0].contains("19.0k"));
        assert!(lines[1].contains("hard_limit compact"));
        assert!(lines[2].starts_with("turn  2 ") && lines[2].contains("8.4k"));
    }
}
