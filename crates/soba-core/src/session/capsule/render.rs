//! Rendering a capsule into the one message that opens the model input.
//!
//! The text is stable: the same capsule always renders to the same bytes (snapshot-tested), so
//! providers' prompt caches keep working across turns.

use std::fmt::Write;

use super::model::CapsuleEntry;

/// What capsules written by earlier versions put under an empty Decisions section. No longer
/// written (a line about SOBA is noise to the agent reading the capsule); readers of
/// `.capsule.md` files still drop it.
pub const DECISIONS_NEED_A_MODEL: &str = "None stated explicitly in the conversation. This capsule was built without a summarization model; finding implicit decisions and their reasons needs one (see docs/compaction.md).";

fn list(out: &mut String, title: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n## {title}");
    for i in items {
        let _ = writeln!(out, "- {}", one_line(i));
    }
}

/// Collapse a multi-line item so a list stays a list; long prompts keep their line breaks as ⏎.
fn one_line(s: &str) -> String {
    s.trim().replace("\r\n", "\n").replace('\n', " ⏎ ")
}

/// `text` as a block quote opened by `who`, its line breaks kept.
fn quoted(out: &mut String, who: &str, text: &str) {
    for (i, line) in text.trim().lines().enumerate() {
        let line = line.trim_end();
        match (i, line.is_empty()) {
            (0, _) => {
                let _ = writeln!(out, "> **{who}:** {line}");
            }
            (_, true) => out.push_str(">\n"),
            (_, false) => {
                let _ = writeln!(out, "> {line}");
            }
        }
    }
}

/// Text with every run of whitespace as one space, so a rewrapped quote still matches.
fn folded(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether a request is one of the quoted exchanges (`quoted`, their user sides folded): the
/// quote holds its opening.
fn quoted_below(request: &str, quoted: &[String]) -> bool {
    let opening: String = folded(request.trim_end_matches('…'))
        .chars()
        .take(60)
        .collect();
    !opening.is_empty() && quoted.iter().any(|q| q.contains(&opening))
}

/// What the model reads after the capsule. The capsule's opening says it, so that the model
/// knows how the capsule and what follows fit together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Followed {
    /// SOBA compacted: the messages after the capsule are the retained tail, verbatim.
    ByRetainedTail,
    /// The agent compacted on its own and SOBA adds its capsule of the same history (the
    /// Claude Code hook): the agent's summary and the messages after its compaction are there,
    /// not SOBA's retained tail.
    ByAgentSummary { agent: &'static str },
}

/// The capsule as the model reads it after SOBA's own compaction.
pub fn render_for_model(c: &CapsuleEntry) -> String {
    render_followed_by(c, Followed::ByRetainedTail)
}

/// The capsule as the model reads it, opening with what `next` says follows it.
pub fn render_followed_by(c: &CapsuleEntry, next: Followed) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Context Capsule {} ({}, {})",
        c.checkpoint_id,
        c.trigger.as_str(),
        c.quality.as_str()
    );
    match next {
        Followed::ByRetainedTail => out.push_str(
            "Earlier conversation was compacted into this capsule. Continue from it; the messages \
             after it are the most recent history, verbatim.\n",
        ),
        Followed::ByAgentSummary { agent } => {
            let _ = writeln!(
                out,
                "{agent} compacted this conversation into its own summary. This capsule is \
                 SOBA's record of the conversation up to that compaction, built from the full \
                 transcript: what the summary may have dropped (files read and modified, \
                 verification, blockers, the user's requests). Where the two differ about that \
                 history, trust this capsule; {agent}'s summary and the messages after the \
                 compaction are the more recent context."
            );
        }
    }
    if let Some(t) = &c.title {
        let _ = writeln!(out, "Title: {}", one_line(t));
    }
    if !c.state.goal.trim().is_empty() {
        let _ = writeln!(out, "\n## Goal\n{}", c.state.goal.trim());
    }
    if let Some(i) = c.instructions.as_deref().filter(|i| !i.trim().is_empty()) {
        let _ = writeln!(
            out,
            "\n## Focus requested for this compaction\n{}",
            i.trim()
        );
    }
    if c.state.exchanges.is_empty() {
        list(&mut out, "User requests", &c.state.requests);
    } else {
        // Folded once per render: every request is looked up among them.
        let quoted_users: Vec<String> = c.state.exchanges.iter().map(|x| folded(&x.user)).collect();
        let earlier: Vec<String> = c
            .state
            .requests
            .iter()
            .filter(|r| !quoted_below(r, &quoted_users))
            .cloned()
            .collect();
        list(&mut out, "Earlier user requests", &earlier);
        out.push_str("\n## Recent conversation (quoted, oldest first)\n");
        for (i, x) in c.state.exchanges.iter().enumerate() {
            if i > 0 {
                out.push_str(">\n");
            }
            quoted(&mut out, "User", &x.user);
            if !x.agent.trim().is_empty() {
                out.push_str(">\n");
                quoted(&mut out, "Agent", &x.agent);
            }
        }
    }
    list(&mut out, "Constraints", &c.state.constraints);
    list(&mut out, "Completed", &c.state.completed);
    list(&mut out, "Active", &c.state.active);
    list(&mut out, "Pending", &c.state.pending);
    if !c.state.decisions.is_empty() {
        out.push_str("\n## Decisions\n");
        for d in &c.state.decisions {
            if d.rationale.trim().is_empty() {
                let _ = writeln!(out, "- {}", one_line(&d.decision));
            } else {
                let _ = writeln!(
                    out,
                    "- {} — because {}",
                    one_line(&d.decision),
                    one_line(&d.rationale)
                );
            }
        }
    }
    list(&mut out, "Findings", &c.state.findings);
    if !c.state.errors.is_empty() {
        out.push_str("\n## Errors and fixes\n");
        for e in &c.state.errors {
            if e.fix.trim().is_empty() {
                let _ = writeln!(out, "- {} — not fixed yet", one_line(&e.error));
            } else {
                let _ = writeln!(
                    out,
                    "- {} — fixed: {}",
                    one_line(&e.error),
                    one_line(&e.fix)
                );
            }
        }
    }
    list(&mut out, "Blockers", &c.state.blockers);
    list(&mut out, "Current work", &c.state.current_work);
    list(&mut out, "Next steps", &c.state.next_steps);
    let paths =
        |v: &[super::model::FileArtifact]| v.iter().map(|f| f.path.clone()).collect::<Vec<_>>();
    list(&mut out, "Files read", &paths(&c.artifacts.read_files));
    let changes: Vec<String> = c
        .artifacts
        .modified_files
        .iter()
        .map(|f| match (&f.renamed_from, f.deleted) {
            (_, true) => format!("{} (deleted)", f.path),
            (Some(from), false) => format!("{} (renamed from {from})", f.path),
            (None, false) => f.path.clone(),
        })
        .collect();
    list(&mut out, "Files modified", &changes);
    list(
        &mut out,
        "Work trees outside the workspace",
        &c.artifacts.work_trees,
    );
    if !c.artifacts.verification.is_empty() {
        out.push_str("\n## Verification\n");
        // Said once: the mark repeated on every line in full buried the outcomes.
        if c.artifacts.verification.iter().any(|v| v.edited_since) {
            out.push_str(
                "(*before later edits*: files were modified after that run; run it again before relying on it)\n",
            );
        }
        for v in &c.artifacts.verification {
            let since = if v.edited_since {
                " (before later edits)"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "- `{}` — {}{since}",
                one_line(&v.command),
                v.outcome.as_str()
            );
        }
    }
    list(&mut out, "Active skills", &c.artifacts.active_skills);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::capsule::model::*;
    use crate::session::testing::full_capsule;

    #[test]
    fn rendering_is_stable() {
        insta::assert_snapshot!(render_for_model(&full_capsule()));
    }

    /// Spec §1: a Context Capsule preserves the goal and constraints; completed, active and
    /// pending work; decisions and rationale; blockers and next steps; read and modified files,
    /// verification commands, and active skills.
    #[test]
    fn a_context_capsule_preserves_the_state_needed_to_continue() {
        let text = render_for_model(&full_capsule());
        for section in [
            "## Goal",
            "## User requests",
            "## Constraints",
            "## Completed",
            "## Active",
            "## Pending",
            "## Decisions",
            "## Blockers",
            "## Next steps",
            "## Files read",
            "## Files modified",
            "## Verification",
            "## Active skills",
        ] {
            assert!(text.contains(section), "{section} missing");
        }
        assert!(text.contains("inject a Clock trait — because tests need a fixed time"));
        let mut c = full_capsule();
        c.artifacts.modified_files = vec![
            FileArtifact {
                path: "out.html".into(),
                deleted: true,
                ..Default::default()
            },
            FileArtifact {
                path: "src/b.rs".into(),
                renamed_from: Some("src/a.rs".into()),
                ..Default::default()
            },
        ];
        let text = render_for_model(&c);
        assert!(text.contains("- out.html (deleted)\n- src/b.rs (renamed from src/a.rs)\n"));
    }

    #[test]
    fn rendering_is_deterministic() {
        assert_eq!(
            render_for_model(&full_capsule()),
            render_for_model(&full_capsule().clone())
        );
    }

    /// An empty section is left out whoever wrote the capsule: a line about how the capsule
    /// was made is noise to the agent reading it.
    #[test]
    fn a_capsule_without_decisions_has_no_decisions_section_and_no_boilerplate() {
        for quality in [Quality::Local, Quality::Degraded, Quality::Model] {
            let mut c = full_capsule();
            c.quality = quality;
            c.state.decisions.clear();
            let text = render_for_model(&c);
            assert!(!text.contains("## Decisions"), "{text}");
            assert!(!text.contains(DECISIONS_NEED_A_MODEL), "{text}");
            assert!(!text.contains("docs/"), "{text}");
        }
    }

    #[test]
    fn recent_exchanges_are_quoted_and_their_requests_not_listed_twice() {
        let mut c = full_capsule();
        c.state.requests = vec![
            "Fix the flaky login test".into(),
            "now add a regression test".into(),
        ];
        c.state.exchanges = vec![super::super::model::Exchange {
            user: "now add a regression test".into(),
            agent: "Added it.\n\nShall I run the whole suite?".into(),
        }];
        let r = render_for_model(&c);
        assert!(
            r.contains("## Earlier user requests\n- Fix the flaky login test\n"),
            "{r}"
        );
        assert!(
            !r.contains("- now add a regression test"),
            "listed once, quoted: {r}"
        );
        assert!(
            r.contains("## Recent conversation (quoted, oldest first)\n> **User:** now add a regression test\n>\n> **Agent:** Added it.\n>\n> Shall I run the whole suite?\n"),
            "{r}"
        );
    }

    #[test]
    fn findings_errors_and_checks_run_before_later_edits_are_rendered() {
        let mut c = full_capsule();
        c.state.findings = vec!["root cause: the subagent is still running at PostCommit".into()];
        c.state.errors = vec![
            ErrorFix {
                error: "E0599 no method `tick` on Clock".into(),
                fix: "imported the Tick trait".into(),
            },
            ErrorFix {
                error: "flaky timeout in login test".into(),
                fix: String::new(),
            },
        ];
        c.artifacts.verification[0].edited_since = true;
        let text = render_for_model(&c);
        assert!(text
            .contains("## Findings\n- root cause: the subagent is still running at PostCommit\n"));
        assert!(text.contains(
            "## Errors and fixes\n- E0599 no method `tick` on Clock — fixed: imported the Tick trait\n- flaky timeout in login test — not fixed yet\n"
        ));
        assert!(text.contains(
            "## Verification\n(*before later edits*: files were modified after that run; run it again before relying on it)\n- `cargo test -p auth` — failed (before later edits)\n"
        ), "{text}");
    }

    /// After the agent's own compaction, no retained tail follows the capsule: its opening says
    /// what does, and the rest is the same capsule.
    #[test]
    fn after_an_agents_summary_the_opening_says_so_and_the_rest_is_unchanged() {
        let c = full_capsule();
        let ours = render_followed_by(&c, Followed::ByRetainedTail);
        assert_eq!(ours, render_for_model(&c));
        let theirs = render_followed_by(
            &c,
            Followed::ByAgentSummary {
                agent: "Claude Code",
            },
        );
        let opening = theirs.lines().nth(1).unwrap();
        assert!(
            opening.starts_with("Claude Code compacted this conversation into its own summary."),
            "{opening}"
        );
        assert!(
            opening.contains("built from the full transcript"),
            "{opening}"
        );
        assert!(!theirs.contains("verbatim"), "{theirs}");
        let without_opening = |t: &str| {
            let mut lines: Vec<&str> = t.lines().collect();
            lines.remove(1);
            lines.join("\n")
        };
        assert_eq!(without_opening(&theirs), without_opening(&ours));
    }
}
