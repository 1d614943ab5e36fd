//! Decisions the assistant stated explicitly in its text, with their reasons: "I'll use X
//! because Y", "Decided: …", "Going with X since Y", "Instead of X, …". Conservative on
//! purpose: a sentence that merely mentions a choice is not a decision, and the reason must be
//! in the same sentence. Implicit decisions need a summarization model.

use std::sync::LazyLock;

use regex::Regex;

use crate::session::capsule::model::Decision;

/// Longest decision or reason kept whole.
const MAX_CHARS: usize = 240;

static EXPLICIT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^(?:decided|decision)\s*:\s*(?P<d>.+)$").expect("valid regex")
});

static WITH_REASON: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)^(?:so\s+|then\s+)?(?P<d>(?:i'll|i will|we'll|we will|i'm going to|let's|i decided to|we decided to|i chose to|i'm going with|going with|i went with|we went with)\s+(?:use|go with|keep|switch to|stick with|choose|prefer|opt for|rely on|store|implement|add|put|make|avoid|drop|replace)?\b.{3,}?)\s*(?:,\s*)?\b(?:because|since|as it|as this|so that)\b\s*(?P<r>.{3,})$",
    )
    .expect("valid regex")
});

/// "I chose X over Y since Z", "went with X over Y because Z": the choice, the alternative it
/// beat and the reason.
static CHOSE_OVER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)^(?:so\s+)?(?:i|we)\s+(?:chose|picked|went with|opted for|prefer(?:red)?)\s+(?P<d>.{2,}?)\s+over\s+(?P<x>.{2,}?)\s*,?\s*\b(?:because|since)\b\s*(?P<r>.{3,})$",
    )
    .expect("valid regex")
});

static INSTEAD_OF: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^instead of\s+(?P<x>.{2,}?),\s*(?P<d>.{3,})$").expect("valid regex")
});

static REASON_SPLIT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\s*,?\s*\b(?:because|since|so that)\b\s*").expect("valid regex")
});

fn clip(s: &str) -> String {
    let s = s.trim().trim_end_matches(['.', ',', ';', ':']).trim();
    let mut out: String = s.chars().take(MAX_CHARS).collect();
    if s.chars().count() > MAX_CHARS {
        out.push('…');
    }
    out
}

fn split_reason(s: &str) -> (String, String) {
    match REASON_SPLIT.splitn(s, 2).collect::<Vec<_>>().as_slice() {
        [d, r] => (clip(d), clip(r)),
        _ => (clip(s), String::new()),
    }
}

/// The decisions stated in one assistant message, in order.
pub fn stated_decisions(text: &str) -> Vec<Decision> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        for sentence in sentences(line) {
            let s = sentence
                .trim()
                .trim_start_matches(['-', '*', '•', '>'])
                .trim()
                .trim_matches('*')
                .trim();
            let decision = if let Some(c) = CHOSE_OVER.captures(s) {
                Some(Decision {
                    decision: format!("{} (instead of {})", clip(&c["d"]), clip(&c["x"])),
                    rationale: clip(&c["r"]),
                })
            } else if let Some(c) = EXPLICIT.captures(s) {
                let (d, r) = split_reason(&c["d"]);
                Some(Decision {
                    decision: d,
                    rationale: r,
                })
            } else if let Some(c) = WITH_REASON.captures(s) {
                Some(Decision {
                    decision: clip(&c["d"]),
                    rationale: clip(&c["r"]),
                })
            } else if let Some(c) = INSTEAD_OF.captures(s) {
                let (d, r) = split_reason(&c["d"]);
                Some(Decision {
                    decision: format!("{d} (instead of {})", clip(&c["x"])),
                    rationale: r,
                })
            } else {
                None
            };
            if let Some(d) = decision.filter(|d| !d.decision.is_empty()) {
                if !out.contains(&d) {
                    out.push(d);
                }
            }
        }
    }
    out
}

/// Sentences of one line: split after `.`, `!` or `?` followed by a space.
pub(crate) fn sentences(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if matches!(b, b'.' | b'!' | b'?') && bytes.get(i + 1) == Some(&b' ') {
            out.push(&line[start..=i]);
            start = i + 1;
        }
    }
    if start < line.len() {
        out.push(&line[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> (String, String) {
        let d = stated_decisions(text);
        assert_eq!(d.len(), 1, "{text}: {d:?}");
        (d[0].decision.clone(), d[0].rationale.clone())
    }

    #[test]
    fn explicitly_stated_decisions_and_reasons_are_recognised() {
        assert_eq!(
            one("Looked at both. I'll use SQLite because the data fits on one machine."),
            (
                "I'll use SQLite".to_string(),
                "the data fits on one machine".to_string()
            )
        );
        assert_eq!(
            one("Decided: keep the cookie format, since clients parse it."),
            (
                "keep the cookie format".to_string(),
                "clients parse it".to_string()
            )
        );
        assert_eq!(
            one("Going with a Clock trait since the tests need a fixed time."),
            (
                "Going with a Clock trait".to_string(),
                "the tests need a fixed time".to_string()
            )
        );
        assert_eq!(
            one("Instead of patching the parser, we wrap the reader."),
            (
                "we wrap the reader (instead of patching the parser)".to_string(),
                String::new()
            )
        );
    }

    #[test]
    fn a_choice_over_an_alternative_with_a_reason_is_a_decision() {
        assert_eq!(
            one("I chose fs.watch over polling since it is built into Node."),
            (
                "fs.watch (instead of polling)".to_string(),
                "it is built into Node".to_string()
            )
        );
        assert_eq!(
            one("We went with a batched write over one commit per session because it cannot race."),
            (
                "a batched write (instead of one commit per session)".to_string(),
                "it cannot race".to_string()
            )
        );
        assert!(stated_decisions("I chose the second file over the first.").is_empty());
    }

    #[test]
    fn choices_without_an_explicit_statement_are_not_decisions() {
        for text in [
            "I'll read the file first.",
            "Let me check the tests.",
            "We could use SQLite because it is simple.",
            "The code uses SQLite since 2019.",
            "```\n// I'll use X because Y\n```",
        ] {
            assert!(stated_decisions(text).is_empty(), "{text}");
        }
    }
}
