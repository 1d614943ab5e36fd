//! The timeline as one self-contained HTML file: an inline SVG chart of effective tokens per
//! preflight with the soft and hard limits, compaction markers (coloured by trigger, hollow when
//! the capsule is degraded), the source agent's own compactions, a table of compactions and the
//! latest capsule. No scripts, no external resources; every text from the session is redacted.

use std::fmt::Write;

use super::Timeline;
use soba_core::session::capsule::model::Quality;
use soba_core::session::entry::Outcome;
use soba_core::session::trigger::Trigger;
use soba_core::util::human_tokens;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 360.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 20.0;
const BOTTOM: f64 = 40.0;

/// Marker colour of a trigger.
pub fn trigger_color(t: Trigger) -> &'static str {
    match t {
        Trigger::HardLimit => "#d62728",
        Trigger::Milestone => "#2ca02c",
        Trigger::PlanPivot => "#9467bd",
        Trigger::TurnComplete => "#17becf",
        Trigger::AutoThreshold => "#ff7f0e",
        Trigger::User => "#1f77b4",
        Trigger::ContextOverflow => "#8c564b",
        Trigger::Handoff => "#7f7f7f",
    }
}

const ALL_TRIGGERS: [Trigger; 8] = [
    Trigger::AutoThreshold,
    Trigger::TurnComplete,
    Trigger::Milestone,
    Trigger::PlanPivot,
    Trigger::HardLimit,
    Trigger::User,
    Trigger::ContextOverflow,
    Trigger::Handoff,
];

/// Text from the session as it goes into the page: secrets redacted, then escaped. The page is
/// shared (attached to issues, sent to colleagues), so nothing from the log enters it raw.
fn session_text(s: &str) -> String {
    escape(&soba_core::redact::redact(s))
}

/// Text made safe for HTML element content and attribute values. Control characters
/// (terminal escape sequences, bells, NULs from a transcript) are stripped; line breaks and
/// tabs stay.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' | '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

struct Scale {
    steps: usize,
    max_tokens: f64,
}

impl Scale {
    fn x(&self, step: usize) -> f64 {
        let span = (self.steps.max(2) - 1) as f64;
        LEFT + (WIDTH - LEFT - RIGHT) * (step as f64 / span).min(1.0)
    }

    fn y(&self, tokens: u64) -> f64 {
        TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - tokens as f64 / self.max_tokens)
    }
}

/// The chart as an `<svg>` element.
pub fn chart(t: &Timeline) -> String {
    let scale = Scale {
        steps: t.steps.len(),
        max_tokens: (t.peak_tokens() as f64 * 1.08).max(1.0),
    };
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="effective tokens per preflight">"#
    );
    // Axes and y ticks.
    let x_end = WIDTH - RIGHT;
    let y_end = HEIGHT - BOTTOM;
    let _ = write!(
        svg,
        r##"<line class="axis" x1="{LEFT}" y1="{y_end}" x2="{x_end}" y2="{y_end}" stroke="#888"/><line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{y_end}" stroke="#888"/>"##
    );
    for q in 0..=4 {
        let tokens = (scale.max_tokens / 1.08 * q as f64 / 4.0) as u64;
        let y = scale.y(tokens);
        let _ = write!(
            svg,
            r##"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="end" font-size="11" fill="#555">{}</text><line x1="{LEFT}" y1="{y:.1}" x2="{x_end}" y2="{y:.1}" stroke="#eee"/>"##,
            LEFT - 6.0,
            y + 4.0,
            human_tokens(tokens)
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12" fill="#555">preflight (one per inference) — {} in all, {} turns</text>"##,
        (LEFT + x_end) / 2.0,
        HEIGHT - 8.0,
        t.steps.len(),
        t.steps.last().map_or(0, |s| s.turn)
    );
    // Limits.
    for (class, tokens, color, label) in [
        ("limit hard", t.limits.hard_limit, "#d62728", "hard limit"),
        ("limit soft", t.limits.soft_limit, "#ff7f0e", "soft limit"),
    ] {
        let y = scale.y(tokens);
        let _ = write!(
            svg,
            r#"<line class="{class}" x1="{LEFT}" y1="{y:.1}" x2="{x_end}" y2="{y:.1}" stroke="{color}" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" text-anchor="end" font-size="11" fill="{color}">{label} {}</text>"#,
            x_end - 4.0,
            y - 4.0,
            human_tokens(tokens)
        );
    }
    // The source agent's own context, when the transcript reported it.
    let source_points: Vec<String> = t
        .steps
        .iter()
        .filter_map(|s| {
            s.source_agent_tokens
                .map(|tok| format!("{:.1},{:.1}", scale.x(s.index), scale.y(tok)))
        })
        .collect();
    if !source_points.is_empty() {
        let _ = write!(
            svg,
            r##"<polyline class="source-agent" fill="none" stroke="#9aa" stroke-width="1.2" stroke-dasharray="3 3" points="{}"/>"##,
            source_points.join(" ")
        );
    }
    let points: Vec<String> = t
        .steps
        .iter()
        .map(|s| format!("{:.1},{:.1}", scale.x(s.index), scale.y(s.effective_tokens)))
        .collect();
    let _ = write!(
        svg,
        r##"<polyline class="effective" fill="none" stroke="#1f2937" stroke-width="1.8" points="{}"/>"##,
        points.join(" ")
    );
    // The source agent's compactions: a dotted rule and a triangle at the size it compacted at.
    for f in &t.foreign_compactions {
        let x = scale.x(f.step);
        let y = scale.y(f.tokens_before.unwrap_or(t.limits.hard_limit));
        let _ = write!(
            svg,
            r##"<g class="foreign"><line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{y_end}" stroke="#3b82f6" stroke-dasharray="1 3"/><path d="M{:.1},{:.1} l6,10 h-12 z" fill="#3b82f6"><title>{} compacted ({}) at {} tokens</title></path></g>"##,
            x,
            y - 5.0,
            session_text(&f.agent),
            session_text(f.trigger.as_deref().unwrap_or("unspecified")),
            f.tokens_before.map_or("?".into(), human_tokens)
        );
    }
    for c in &t.compactions {
        let r = &c.result;
        let x = scale.x(c.step);
        let color = trigger_color(r.trigger);
        let title = session_text(&r.completion_line());
        let class = format!("compaction trigger-{} outcome-{}", r.trigger, r.outcome);
        if r.outcome == Outcome::Completed {
            let hollow = r.fallback || r.quality.is_some_and(|q| q != Quality::Model);
            let fill = if hollow { "white" } else { color };
            let (y0, y1) = (scale.y(r.tokens_before), scale.y(r.tokens_after));
            let _ = write!(
                svg,
                r#"<g class="{class}"><line x1="{x:.1}" y1="{y0:.1}" x2="{x:.1}" y2="{y1:.1}" stroke="{color}" stroke-width="1.5"/><circle cx="{x:.1}" cy="{y0:.1}" r="5.5" fill="{fill}" stroke="{color}" stroke-width="2"><title>{title}</title></circle></g>"#
            );
        } else {
            let y = scale.y(r.tokens_before);
            let _ = write!(
                svg,
                r#"<g class="{class}"><rect x="{:.1}" y="{:.1}" width="8" height="8" fill="white" stroke="{color}" stroke-width="1.5" transform="rotate(45 {x:.1} {y:.1})"><title>{title}</title></rect></g>"#,
                x - 4.0,
                y - 4.0
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

fn legend(t: &Timeline) -> String {
    let mut out = String::from(r#"<ul class="legend">"#);
    for trigger in ALL_TRIGGERS {
        if t.compactions.iter().any(|c| c.result.trigger == trigger) {
            let _ = write!(
                out,
                r#"<li><span class="dot" style="border-color:{0};background:{0}"></span>{1}</li>"#,
                trigger_color(trigger),
                trigger
            );
        }
    }
    out.push_str(
        r#"<li><span class="dot" style="border-color:#555;background:white"></span>hollow: degraded capsule (built locally)</li><li>◇ not completed (skipped, stale, failed)</li>"#,
    );
    if !t.foreign_compactions.is_empty() {
        out.push_str(r#"<li><span style="color:#3b82f6">▲</span> the source agent's own compaction; dashed grey: its reported context</li>"#);
    }
    out.push_str("</ul>");
    out
}

fn compactions_table(t: &Timeline) -> String {
    let mut out = String::from(
        r#"<table class="compactions"><thead><tr><th>#</th><th>turn</th><th>step</th><th>trigger</th><th>outcome</th><th>before → after</th><th>reclaimed</th><th>checkpoint</th><th>quality</th><th>reason</th></tr></thead><tbody>"#,
    );
    for (n, c) in t.compactions.iter().enumerate() {
        let r = &c.result;
        let _ = write!(
            out,
            r#"<tr class="compaction-row outcome-{}"><td>{}</td><td>{}</td><td>{}</td><td><span class="dot" style="border-color:{color};background:{color}"></span>{}</td><td>{}</td><td>{} → {}</td><td>{:.0}%</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            r.outcome,
            n + 1,
            c.turn,
            c.step,
            r.trigger,
            r.outcome,
            human_tokens(r.tokens_before),
            human_tokens(r.tokens_after),
            r.reclaimed_percent,
            session_text(r.checkpoint_id.as_deref().unwrap_or("–")),
            r.quality.map_or("–", Quality::as_str),
            session_text(&r.reason),
            color = trigger_color(r.trigger),
        );
    }
    out.push_str("</tbody></table>");
    out
}

fn foreign_table(t: &Timeline) -> String {
    if t.foreign_compactions.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        r#"<h2>The source agent's own compactions</h2><table class="foreign-compactions"><thead><tr><th>turn</th><th>step</th><th>agent</th><th>trigger</th><th>compacted at</th><th>its summary</th><th>kept</th><th>SOBA's input then</th><th>SOBA's compactions by then</th></tr></thead><tbody>"#,
    );
    let opt = |v: Option<u64>| v.map_or("–".to_string(), human_tokens);
    for f in &t.foreign_compactions {
        let kept = session_text(&t.source_kept(f));
        let _ = write!(
            out,
            r#"<tr class="foreign-row"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{kept}</td><td>{}</td><td>{}</td></tr>"#,
            f.turn,
            f.step,
            session_text(&f.agent),
            session_text(f.trigger.as_deref().unwrap_or("–")),
            opt(f.tokens_before),
            opt(f.summary_tokens),
            human_tokens(f.soba_tokens),
            t.completed_before(f).count(),
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// The run summed up: the same sentences the terminal prints.
fn bottom_line(t: &Timeline) -> String {
    let mut out = String::from(r#"<h2>Bottom line</h2><ul class="bottom-line">"#);
    for sentence in t.bottom_line_sentences() {
        let _ = write!(out, "<li>{}</li>", session_text(&sentence));
    }
    out.push_str("</ul>");
    out
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#1f2937}\
h1{font-size:20px}h2{font-size:16px;margin-top:28px}\
.meta{color:#555}.legend{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:14px;font-size:12px}\
.dot{display:inline-block;width:9px;height:9px;border-radius:50%;border:2px solid;margin-right:5px;vertical-align:-1px}\
table{border-collapse:collapse;width:100%;font-size:12px}th,td{border-bottom:1px solid #e5e7eb;padding:4px 6px;text-align:left;vertical-align:top}\
tr.outcome-skipped,tr.outcome-stale,tr.outcome-cancelled{color:#6b7280}tr.outcome-failed{color:#b91c1c}\
pre{background:#f8fafc;border:1px solid #e5e7eb;padding:12px;white-space:pre-wrap;font-size:12px}";

/// The complete report page.
pub fn render(t: &Timeline) -> String {
    let l = &t.limits;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title} — SOBA report</title><style>{STYLE}</style></head><body><h1>{title}</h1><p class="meta">model {model} ({tokenizer}) · window {window} · max output {out_tokens} · safety reserve {reserve} · hard limit {hard} · soft limit {soft} · keep recent {keep}</p><p class="meta">capsules {writer}</p>"#,
        title = session_text(&t.title),
        model = session_text(&t.model),
        tokenizer = session_text(&t.tokenizer),
        window = human_tokens(l.context_window),
        out_tokens = human_tokens(l.max_output_tokens),
        reserve = human_tokens(l.safety_reserve_tokens),
        hard = human_tokens(l.hard_limit),
        soft = human_tokens(l.soft_limit),
        keep = human_tokens(t.keep_recent_tokens),
        writer = session_text(&t.capsule_writer),
    );
    out.push_str(&chart(t));
    out.push_str(&legend(t));
    let _ = write!(out, "<h2>Compactions ({})</h2>", t.compactions.len());
    out.push_str(&compactions_table(t));
    out.push_str(&foreign_table(t));
    out.push_str(&bottom_line(t));
    out.push_str("<h2>Latest capsule</h2>");
    match &t.latest_capsule {
        Some(c) => {
            let _ = write!(out, r#"<pre class="capsule">{}</pre>"#, session_text(c));
        }
        None => out.push_str(r#"<p class="capsule">No capsule: nothing was compacted.</p>"#),
    }
    out.push_str("</body></html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{ForeignMark, Step, TimelineCompaction};
    use soba_core::budget::MeasurementSource;
    use soba_core::compaction::CompactionResult;
    use soba_core::limits::Limits;

    fn limits() -> Limits {
        Limits {
            context_window: 24000,
            max_output_tokens: 2000,
            safety_reserve_tokens: 2000,
            hard_limit: 20000,
            soft_limit: 14000,
        }
    }

    fn result(trigger: Trigger, outcome: Outcome, quality: Option<Quality>) -> CompactionResult {
        let mut r = CompactionResult::ended("op", trigger, outcome, "why <not>", 18000, limits());
        if outcome == Outcome::Completed {
            r.tokens_after = 8000;
            r.quality = quality;
            r.checkpoint_id = Some("ck_1".into());
        }
        r
    }

    fn timeline() -> Timeline {
        let mut t = Timeline::new("A <b>session</b>", "m", "o200k_base", limits());
        t.steps = (0..4)
            .map(|i| Step {
                index: i,
                turn: 1 + i / 2,
                effective_tokens: 5000 + 4000 * i as u64,
                source: MeasurementSource::Estimated,
                messages: 2,
                source_agent_tokens: None,
            })
            .collect();
        let at = |step, result| TimelineCompaction {
            step,
            turn: 2,
            result,
            kept: None,
        };
        t.compactions = vec![
            at(
                2,
                result(Trigger::HardLimit, Outcome::Completed, Some(Quality::Model)),
            ),
            at(
                3,
                result(
                    Trigger::AutoThreshold,
                    Outcome::Completed,
                    Some(Quality::Degraded),
                ),
            ),
            at(3, result(Trigger::TurnComplete, Outcome::Skipped, None)),
        ];
        t
    }

    #[test]
    fn markers_are_coloured_by_trigger_and_hollow_when_degraded() {
        let svg = chart(&timeline());
        let model = svg
            .split("<g class=\"compaction trigger-hard_limit outcome-completed\">")
            .nth(1)
            .unwrap();
        assert!(model.starts_with(r##"<line x1="##));
        assert!(
            model.contains(r##"fill="#d62728" stroke="#d62728""##),
            "filled"
        );
        let local = svg
            .split("<g class=\"compaction trigger-auto_threshold outcome-completed\">")
            .nth(1)
            .unwrap();
        assert!(
            local.contains(r##"fill="white" stroke="#ff7f0e""##),
            "hollow"
        );
        assert!(svg.contains("<g class=\"compaction trigger-turn_complete outcome-skipped\"><rect"));
    }

    #[test]
    fn the_chart_scales_to_the_hard_limit_and_draws_both_limits() {
        let t = timeline();
        let svg = chart(&t);
        let hard_y = Scale {
            steps: 4,
            max_tokens: 20000.0 * 1.08,
        }
        .y(20000);
        assert!(svg.contains(&format!(
            r#"<line class="limit hard" x1="{LEFT}" y1="{hard_y:.1}""#
        )));
        assert!(svg.contains(r#"<line class="limit soft""#));
        let points = svg
            .split(r#"<polyline class="effective""#)
            .nth(1)
            .and_then(|rest| rest.split(r#"points=""#).nth(1))
            .and_then(|rest| rest.split('"').next())
            .unwrap();
        assert_eq!(points.split_whitespace().count(), 4, "one point per step");
    }

    #[test]
    fn text_from_the_session_is_escaped() {
        let mut t = timeline();
        t.latest_capsule = Some("# Context Capsule\n<script>alert(1)</script>".into());
        let page = render(&t);
        assert!(!page.contains("<script>"));
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("A &lt;b&gt;session&lt;/b&gt;"));
        assert!(page.contains("why &lt;not&gt;"));
        assert_eq!(escape(r#"a&"'"#), "a&amp;&quot;&#39;");
    }

    #[test]
    fn control_characters_from_the_session_never_reach_the_page() {
        assert_eq!(
            escape("\u{1b}[31mred\u{1b}[0m\u{7}\0\r\u{7f}\u{9b}2J ok\n\tnext"),
            "[31mred[0m2J ok\n\tnext"
        );
        let mut t = timeline();
        t.title = "build \u{1b}]0;owned\u{7} log".into();
        t.latest_capsule = Some("goal \u{1b}[2Jcleared".into());
        let page = render(&t);
        assert!(
            !page.chars().any(|c| c.is_control() && c != '\n'),
            "a control character in the page"
        );
        assert!(page.contains("build ]0;owned log"), "{page}");
    }

    #[test]
    fn the_page_has_one_row_per_compaction_and_the_source_agent_table_only_when_it_compacted() {
        let mut t = timeline();
        let page = render(&t);
        assert_eq!(page.matches("<tr class=\"compaction-row").count(), 3);
        assert!(!page.contains("foreign-compactions"));
        assert!(page.contains("No capsule: nothing was compacted."));
        t.steps[1].source_agent_tokens = Some(12000);
        t.foreign_compactions.push(ForeignMark {
            step: 1,
            turn: 1,
            agent: "codex".into(),
            trigger: Some("auto".into()),
            tokens_before: Some(150000),
            summary_tokens: Some(2100),
            kept_items: Some(4),
            first_kept_entry_id: None,
            soba_tokens: 9000,
            compactions_before: 0,
        });
        let page = render(&t);
        assert!(page.contains("<tr class=\"foreign-row\"><td>1</td><td>1</td><td>codex</td><td>auto</td><td>150.0k</td><td>2.1k</td><td>a 2.1k-token summary, 4 items verbatim; its next input was 12.0k tokens</td><td>9.0k</td><td>0</td></tr>"));
        assert!(page.contains(r#"<h2>Bottom line</h2><ul class="bottom-line"><li>SOBA: 2 compactions reclaimed 20.0k tokens"#));
        // The chart grows to the source agent's size.
        assert_eq!(t.peak_tokens(), 150000);
    }
}
