//! The work state in the agent's own words: what a wrap-up message reports done, what the agent
//! says comes next, and what it offered to do. Conservative: a sentence counts only when it
//! opens the way agents open such statements ("Done.", "I've …", "Next I'll …", "Would you like
//! me to …?"); narration in the middle of a turn ("Let me read the file") is not progress.

use std::sync::LazyLock;

use regex::Regex;

use super::decisions::sentences;

/// Longest item kept whole.
const MAX_ITEM_CHARS: usize = 200;
/// Items taken from one summary section.
const MAX_SECTION_ITEMS: usize = 5;

static WRAP_UP_OPENING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)^(?:done|fixed|all (?:\d+ )?(?:tests?|checks?|specs?)(?: now)? pass|all set|implemented|completed|finished|the (?:implementation|change|fix|refactor|migration) is (?:complete|done|in place)|here'?s (?:a |the )?summary|summary|i'?ve|i have|changes made|rebase (?:completed|done|finished)|pushed|committed|merged|released|updated|added|removed|created|renamed|moved|deleted|everything (?:is|works|passes)|tests? (?:pass|passes|are passing)|the (?:tests?|build|linter) (?:now )?pass|build (?:passes|succeeded)|successfully)\b",
    )
    .expect("valid regex")
});

static SUMMARY_HEADING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^(?:#+\s*|\*\*)?(?:summary(?: of (?:the |my |what )?(?:changes|work|fixes|what (?:was|i) (?:done|did|changed)))?|changes(?: made)?|what (?:changed|i did|was done)|what's (?:new|done)|done|completed|implemented|fixes?(?: applied)?)\s*:?\**:?$")
        .expect("valid regex")
});

static NEXT_HEADING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^(?:#+\s*|\*\*)?(?:next steps?|remaining(?: work| tasks)?|to ?do|still to do|follow[- ]ups?|open (?:items|questions|issues)|what's left|not (?:yet )?done)\b.*:?\**:?$")
        .expect("valid regex")
});

static NEXT_SENTENCE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)^(?:next,?\s+(?:i'll|i will|we'll|we will|i need to|step:?)|now,?\s+(?:i'll|i will|i need to|let me|let's)|then,?\s+(?:i'll|i will)|let me|i'll now|i will now|i still need to|we still need to|still need to|remaining:|todo:|the next step is(?: to)?|next step:?)\s*(?P<step>.{4,})$",
    )
    .expect("valid regex")
});

static OFFER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)^(?:would you like(?: me)? to|do you want me to|want me to|shall i|should i|i can also|if you(?:'d)? like,? i can)\s+(?P<what>.{4,}?)[?.]?$",
    )
    .expect("valid regex")
});

fn clean(s: &str) -> String {
    let s = s
        .trim()
        .trim_start_matches(['-', '*', '•', '>', '#'])
        .trim()
        .replace("**", "")
        .replace('`', "");
    let s = strip_number(&s);
    clip(s.trim().trim_end_matches([':', ',']), MAX_ITEM_CHARS)
}

fn strip_number(s: &str) -> &str {
    let digits = s.chars().take_while(char::is_ascii_digit).count();
    if digits > 0 && s[digits..].starts_with(['.', ')']) {
        s[digits + 1..].trim_start()
    } else {
        s
    }
}

pub fn clip(s: &str, n: usize) -> String {
    let mut out: String = s.chars().take(n).collect();
    if s.chars().count() > n {
        out.push('…');
    }
    out
}

/// Lines outside fenced code blocks.
pub(crate) fn prose_lines(text: &str) -> Vec<&str> {
    let mut in_code = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if !in_code && !line.trim().is_empty() {
            out.push(line);
        }
    }
    out
}

fn first_sentence(text: &str) -> Option<String> {
    let line = prose_lines(text).into_iter().next()?;
    let line = line.trim().trim_start_matches('#').trim().replace("**", "");
    let end = line
        .char_indices()
        .find(|&(i, c)| matches!(c, '.' | '!') && line[i + 1..].starts_with(' ') || c == '\n')
        .map(|(i, _)| i + 1)
        .unwrap_or(line.len());
    let s = clean(&line[..end]);
    (!s.is_empty()).then_some(s)
}

/// Whether an assistant message reports finished work.
pub fn is_wrap_up(text: &str) -> bool {
    let lines = prose_lines(text);
    let Some(first) = lines.first() else {
        return false;
    };
    let first = first
        .trim()
        .trim_start_matches(['#', '*', ' ', '✅', '🎉'])
        .trim();
    WRAP_UP_OPENING.is_match(first)
        || lines
            .iter()
            .any(|l| SUMMARY_HEADING.is_match(l.trim()) && l.trim().len() < 60)
}

/// The items of the section under the first heading that `heading` matches: its bullets, or
/// its sub-headings when it has them.
fn section_items(text: &str, heading: &Regex) -> Vec<String> {
    let lines = prose_lines(text);
    let Some(start) = lines
        .iter()
        .position(|l| l.trim().len() < 60 && heading.is_match(l.trim()))
    else {
        return Vec::new();
    };
    let level = heading_level(lines[start]);
    let body: Vec<&str> = lines[start + 1..]
        .iter()
        .take_while(|l| heading_level(l).is_none_or(|h| level.is_some_and(|top| h > top)))
        .copied()
        .collect();
    let sub_headings: Vec<String> = body
        .iter()
        .filter(|l| heading_level(l).is_some() || is_bold_line(l))
        .map(|l| clean(l))
        .filter(|s| !s.is_empty())
        .collect();
    let items = if sub_headings.len() >= 2 {
        sub_headings
    } else {
        body.iter()
            .filter(|l| {
                let t = l.trim_start();
                // Top-level bullets only: their sub-bullets are detail.
                l.len() - t.len() < 2
                    && (t.starts_with("- ")
                        || t.starts_with("* ")
                        || t.starts_with("• ")
                        || strip_number(t) != t)
            })
            .map(|l| clean(l))
            .filter(|s| !s.is_empty())
            .collect()
    };
    items.into_iter().take(MAX_SECTION_ITEMS).collect()
}

fn heading_level(line: &str) -> Option<usize> {
    let t = line.trim_start();
    let n = t.chars().take_while(|&c| c == '#').count();
    (n > 0 && t[n..].starts_with(' ')).then_some(n)
}

fn is_bold_line(line: &str) -> bool {
    let t = line.trim();
    t.starts_with("**") && (t.ends_with("**") || t.ends_with("**:"))
}

/// What a wrap-up says was done: the first sentence, then its summary section's items. An
/// exclamation ("Perfect!") or a bare heading ("The Fix", "Files Changed", "Benefits") says
/// nothing of what was done and is left out; a wrap-up with nothing else says "done".
pub fn reported_done(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let first = first_sentence(text);
    if let Some(s) = &first {
        out.push(s.clone());
    }
    for item in section_items(text, &SUMMARY_HEADING) {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out.retain(|i| says_what_was_done(i));
    if out.is_empty() && first.is_some() {
        out.push("done".to_string());
    }
    out
}

/// Headings and remarks that open or structure a wrap-up without saying what was done.
const EMPTY_REMARKS: [&str; 22] = [
    "summary",
    "summary of progress",
    "summary of changes",
    "benefits",
    "risks",
    "the fix",
    "the problem",
    "the solution",
    "root cause",
    "files changed",
    "files modified",
    "changes",
    "changes made",
    "what changed",
    "overview",
    "result",
    "results",
    "testing",
    "verification",
    "next steps",
    "now i have a complete picture",
    "here's what i did",
];

fn says_what_was_done(item: &str) -> bool {
    let plain: String = item
        .trim()
        .trim_end_matches(['.', '!', ':', '…'])
        .trim()
        .to_lowercase();
    let words = plain.split_whitespace().count();
    let exclamation = item.trim_end().ends_with('!') && words < 5;
    let completion = matches!(
        plain.as_str(),
        "done"
            | "fixed"
            | "updated"
            | "implemented"
            | "completed"
            | "finished"
            | "pushed"
            | "committed"
            | "merged"
            | "added"
            | "removed"
            | "resolved"
    );
    let bare_word = words < 2 && !completion && !item.contains(['`', '/', '(', '_']);
    !(exclamation || bare_word || EMPTY_REMARKS.contains(&plain.as_str()))
}

/// Steps the agent says come next: a "Next steps" section, or sentences such as "Next I'll …".
pub fn stated_next_steps(text: &str) -> Vec<String> {
    next_steps_in(text, true)
}

/// [`stated_next_steps`] of a finished message: its "Let me …" sentences narrate what the
/// message then did, so only what it plans for later counts ("Next I'll …", a "Next steps"
/// section).
pub fn planned_next_steps(text: &str) -> Vec<String> {
    next_steps_in(text, false)
}

fn next_steps_in(text: &str, with_let_me: bool) -> Vec<String> {
    let mut out = section_items(text, &NEXT_HEADING);
    for line in prose_lines(text) {
        for sentence in sentences(line) {
            let s = sentence
                .trim()
                .trim_start_matches(['-', '*', '•', '>'])
                .trim();
            if !with_let_me && NARRATION.is_match(s) {
                continue;
            }
            if let Some(c) = NEXT_SENTENCE.captures(s) {
                let step = capitalise(&clean(&c["step"]));
                if !step.is_empty() && !out.contains(&step) {
                    out.push(step);
                }
            }
        }
    }
    out
}

static NARRATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^(?:now,?\s+|first,?\s+|ok(?:ay)?,?\s+)?let(?:'s| me)(?-u:\b)")
        .expect("valid regex")
});

/// What the agent offered to do, waiting for the user's answer.
pub fn offers(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        for sentence in sentences(line) {
            let s = sentence.trim().trim_start_matches(['-', '*', '•']).trim();
            if let Some(c) = OFFER.captures(s) {
                let what = clean(&c["what"]);
                if !what.is_empty() && !out.contains(&what) {
                    out.push(what);
                }
            }
        }
    }
    out
}

pub(crate) fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Content words of a step, for telling whether later work covered it.
pub fn content_words(s: &str) -> Vec<String> {
    const STOP: [&str; 24] = [
        "the", "a", "an", "to", "and", "or", "of", "in", "on", "for", "with", "it", "is", "that",
        "this", "now", "then", "i'll", "let", "me", "we", "be", "all", "make",
    ];
    s.split(|c: char| !c.is_alphanumeric() && c != '_' && c != '\'')
        .map(str::to_lowercase)
        .filter(|w| w.len() > 2 && !STOP.contains(&w.as_str()))
        .collect()
}

/// Whether `later` (something reported done) covers `step`: most of the step's content words
/// appear in it.
pub fn covers(later: &str, step: &str) -> bool {
    let step_words = content_words(step);
    if step_words.is_empty() {
        return false;
    }
    let later_words = content_words(later);
    let shared = step_words
        .iter()
        .filter(|w| {
            later_words
                .iter()
                .any(|l| l == *w || (w.len() > 4 && l.starts_with(&w[..w.len() - 2])))
        })
        .count();
    shared * 3 >= step_words.len() * 2
}

/// Words that name no particular work. A step or an offer made of these alone ("Fix this",
/// "Try a different approach", "Shall I proceed with the implementation then?") means nothing
/// out of its message: the builder quotes the message, or looks for what the offer refers to.
const NO_WORK_WORDS: [&str; 50] = [
    "a",
    "again",
    "ahead",
    "all",
    "an",
    "and",
    "another",
    "apply",
    "approach",
    "at",
    "change",
    "changes",
    "check",
    "continue",
    "different",
    "do",
    "everything",
    "first",
    "fix",
    "go",
    "implement",
    "implementation",
    "issue",
    "it",
    "look",
    "make",
    "more",
    "now",
    "plan",
    "problem",
    "proceed",
    "properly",
    "simpler",
    "so",
    "solution",
    "start",
    "still",
    "that",
    "the",
    "them",
    "then",
    "these",
    "this",
    "those",
    "try",
    "verify",
    "way",
    "with",
    "work",
    "works",
];

/// Whether a step or an offer names no work of its own.
pub fn names_no_work(s: &str) -> bool {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .all(|w| NO_WORK_WORDS.contains(&w.to_lowercase().as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrap_up_reports_its_first_sentence_and_its_summary_items() {
        let text = "All tests pass and the linter is clean. Here's a summary of the changes:\n\n## Summary of Changes\n\n### 1. Removed Skip Logic for Warned Sessions\n- **Removed** `shouldSkip()`\n\n### 2. Updated Warning Message\nChanged from: x\n";
        assert!(is_wrap_up(text));
        assert_eq!(
            reported_done(text),
            [
                "All tests pass and the linter is clean.",
                "Removed Skip Logic for Warned Sessions",
                "Updated Warning Message"
            ]
        );
        let done = "Done. The warning message now reads:\n\n> Another session is active.";
        assert!(is_wrap_up(done));
        assert_eq!(reported_done(done)[0], "Done.");
    }

    #[test]
    fn steps_and_offers_that_name_no_work() {
        for vague in [
            "Fix this",
            "Try a different approach",
            "Verify everything still works",
            "proceed with the implementation then",
            "implement it",
        ] {
            assert!(names_no_work(vague), "{vague}");
        }
        for work in [
            "Document feature 199",
            "archive each session to a numbered subfolder",
        ] {
            assert!(!names_no_work(work), "{work}");
        }
    }

    #[test]
    fn exclamations_and_bare_headings_are_not_reported_as_done() {
        let text = "Perfect! The fix is in place.\n\n## Summary\n\n### The Fix\n### Files Changed\n### Benefits\n### Added `getInitials()` to NavUser.tsx\n";
        assert_eq!(reported_done(text), ["Added getInitials() to NavUser.tsx"]);
        assert_eq!(
            reported_done("Perfect!\n\n## Summary\n\n### Benefits\n### Risks\n"),
            ["done"]
        );
        assert_eq!(reported_done("Fixed."), ["Fixed."]);
    }

    #[test]
    fn explanations_and_narration_are_not_wrap_ups() {
        for t in [
            "Here's how the concurrent session warning logic works:\n\n## Overview",
            "Let me check what information we have about the other session.",
            "Good question. If we allowed both sessions to create checkpoints, here's what would happen:",
        ] {
            assert!(!is_wrap_up(t), "{t}");
        }
    }

    #[test]
    fn next_steps_come_from_the_agent_saying_what_is_next() {
        assert_eq!(
            stated_next_steps("Rebase completed. Let me verify everything still works."),
            ["Verify everything still works."]
        );
        assert_eq!(
            stated_next_steps("Fixed the parser.\n\n## Next steps\n- Add a test for empty input\n- Update the changelog\n"),
            ["Add a test for empty input", "Update the changelog"]
        );
        assert!(stated_next_steps("The parser reads tokens one at a time.").is_empty());
    }

    #[test]
    fn offers_wait_for_the_user() {
        assert_eq!(
            offers("A couple of suggestions. Would you like me to change it to something shorter?"),
            ["change it to something shorter"]
        );
    }

    #[test]
    fn a_step_is_covered_by_work_that_names_it() {
        assert!(covers(
            "Added the integration test for two sessions",
            "Add an integration test for two sessions"
        ));
        assert!(!covers("Updated the changelog", "Add an integration test"));
    }
}
