//! Rendering a capsule into the one message that opens the model input.
//!
//! The text is stable: the same capsule always renders to the same bytes (snapshot-tested), so
//! providers' prompt caches keep working across turns.

use std::fmt::Write;

use super::model::CapsuleEntry;

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

/// The capsule as the model reads it.
pub fn render_for_model(c: &CapsuleEntry) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Context Capsule {} ({}, {})",
        c.checkpoint_id,
        c.trigger.as_str(),
        c.quality.as_str()
    );
    out.push_str(
        "Earlier conversation was compacted into this capsule. Continue from it; the messages \
         after it are the most recent history, verbatim.\n",
    );
    if let Some(t) = &c.title {
        let _ = writeln!(out, "Title: {}", one_line(t));
    }
    if !c.state.goal.trim().is_empty() {
        let _ = writeln!(out, "\n## Goal\n{}", c.state.goal.trim());
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
                let _ = writeln!(out, "- {} — because {}", one_line(&d.decision), one_line(&d.rationale));
            }
        }
    }
    list(&mut out, "Blockers", &c.state.blockers);
    list(&mut out, "Next steps", &c.state.next_steps);
    let paths = |v: &[super::model::FileArtifact]| v.iter().map(|f| f.path.clone()).collect::<Vec<_>>();
    list(&mut out, "Files read", &paths(&c.artifacts.read_files));
    list(&mut out, "Files modified", &paths(&c.artifacts.modified_files));
    if !c.artifacts.verification.is_empty() {
        out.push_str("\n## Verification\n");
        for v in &c.artifacts.verification {
            let _ = writeln!(out, "- `{}` — {}", one_line(&v.command), v.outcome.as_str());
        }
    }
    list(&mut out, "Active skills", &c.artifacts.active_skills);
    out
}
