//! What the agent established, in its own words: a root cause, a hypothesis ruled out, how a
//! part of the system works, and the options it laid before the user. Quoted, never
//! paraphrased: where the builder cannot tell what a conclusion means, the agent's sentence
//! says it best. Conservative: a sentence counts only when it states a conclusion the way
//! agents state them ("The root cause is …", "This means …", "X is not the cause"); narration
//! ("Let me check …") and plans are not findings.

use std::sync::LazyLock;

use regex::Regex;

use super::decisions::sentences;
use super::work::{clip, prose_lines};

/// A conclusion shorter than this many words leads in to the sentence after it.
const LEAD_IN_WORDS: usize = 6;
/// Longest finding kept whole.
const MAX_FINDING_CHARS: usize = 300;
/// Findings taken from one message.
const MAX_PER_MESSAGE: usize = 3;
/// Options kept from one message, and characters of each.
const MAX_OPTIONS: usize = 6;
const MAX_OPTION_CHARS: usize = 160;

static CONCLUSION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?i)(?-u:\b)(?:",
        r"root cause|",
        r"the (?:real |actual |underlying |core )?(?:issue|problem|bug|culprit|cause|reason) (?:is|was|here is|seems to be)|",
        r"(?:is|was|are|were) caused by|",
        r"(?:it )?turns out|",
        r"this (?:means|explains|is why)|that(?:'s| is) why|",
        r"(?:is|was|isn't|wasn't) (?:not )?the (?:cause|culprit|problem|issue)|",
        r"ruled out|rules out|",
        r"(?:doesn't|does not|didn't|did not) (?:fix|help|solve|explain)|",
        r"confirm(?:s|ed) (?:that|the)|",
        r"i found that|found the (?:bug|cause)|",
        r"the fix (?:is|was) to|",
        r"works by|is responsible for|is handled (?:by|in)|",
        // What the agent learned about the system: what exists, what does not work, why.
        r"(?:i |we )?found (?:that|no|[0-9]+|it)(?-u:\b)|found the (?:bug|cause|problem|issue|culprit)|^found(?-u:\b)|",
        r"(?:doesn't|does not|isn't|is not|can't|cannot|won't|aren't|are not) (?:work|exist|support|handle|accept|match|recogni[sz]e|include|allow|run|pass|affect|apply)|",
        r"(?:is|are) (?:defined|stored|handled|set|created|configured|registered|implemented|generated) (?:in|by|at|from|via|through)|",
        r"(?:fails?|failed|breaks?|broke) because|because (?:the|it|of|we|there)|",
        r"expects? \S.{0,80}? (?:but|while|whereas) |",
        r"confirmed|already (?:exists?|implemented|handled|there|done)|",
        r"(?:my|the) (?:earlier |previous |first )?(?:guess|theory|hypothesis|assumption) (?:was|is) wrong",
        r")",
    ))
    .expect("valid regex")
});

/// Openings of narration and plans: not conclusions even when they name a cause.
static NOT_A_FINDING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)^(?:let me|let's|i'll|i will|i'm going to|now (?:i'll|let me|i need|we need)|i need to|we need to|i should|we should|next|first,? (?:let me|i'll)|maybe|perhaps|if )",
    )
    .expect("valid regex")
});

/// A heading or lead-in that introduces options for the user to choose from.
static OPTIONS_LEAD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)(?-u:\b)(?:options?|approaches|alternatives|choices|two ways|three ways|could either|which (?:one |approach |option )?(?:do you|would you)|you can choose|pick one)(?-u:\b)",
    )
    .expect("valid regex")
});

/// "Option 1: …", "**Option A** — …", "Approach 2. …".
static OPTION_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)^\s*(?:#+\s*)?(?:\*\*)?(?:option|approach|alternative|choice)\s+(?P<label>[A-Z0-9]+)\b\s*(?:\*\*)?\s*[:.)\-—–]*\s*(?:\*\*)?\s*(?P<text>.*)$",
    )
    .expect("valid regex")
});

/// "1. …", "2) …", "A. …", "- **B**: …" under an options lead-in.
static LISTED_OPTION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^\s*(?:[-*]\s*)?(?:\*\*)?(?P<label>[0-9]|[A-Ca-c])(?:\*\*)?[.):]\s+(?P<text>\S.*)$",
    )
    .expect("valid regex")
});

fn tidy(s: &str, max: usize) -> String {
    let s = s
        .trim()
        .trim_start_matches(['-', '*', '•', '>', '#'])
        .trim()
        .replace("**", "");
    clip(&s.split_whitespace().collect::<Vec<_>>().join(" "), max)
}

/// A conclusion that takes back what was concluded before it: "Actually, …", "No, the cause
/// is …", "Wait — that's not it".
static REVISION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^(?:\W*)(?:(?:hmm|ok(?:ay)?|oh)[,.!]?\s+)?(?:actually|no[,.!]|wait|that's not (?:it|the)|i was wrong|scratch that|correction)(?-u:\b)")
        .expect("valid regex")
});

/// Words that announce what the agent is about to do.
static PLAN_WORDS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?-u:\b)(?:let me|let's|i'll|i will|i need to|i'm going to|i should)(?-u:\b)")
        .expect("valid regex")
});

/// Whether a finding takes back the ones before it.
pub fn revises(finding: &str) -> bool {
    REVISION.is_match(finding) && !PLAN_WORDS.is_match(finding)
}

/// The sentences of an assistant message that state a conclusion, quoted.
pub fn stated_findings(text: &str) -> Vec<String> {
    let all: Vec<&str> = prose_lines(text)
        .into_iter()
        .flat_map(sentences)
        .map(|s| {
            s.trim()
                .trim_start_matches(['-', '*', '•', '>', '#'])
                .trim()
        })
        .filter(|s| !s.is_empty())
        .collect();
    let mut out: Vec<String> = Vec::new();
    for (i, s) in all.iter().enumerate() {
        // "Actually, the footer is fine: …" states a finding by taking back an earlier one.
        // "Actually wait, let me re-read …" announces a look, and takes nothing back yet.
        let revision = REVISION.is_match(s)
            && s.split_whitespace().count() >= LEAD_IN_WORDS
            && !PLAN_WORDS.is_match(s);
        if s.ends_with('?') || NOT_A_FINDING.is_match(s) || !(CONCLUSION.is_match(s) || revision) {
            continue;
        }
        // A lead-in ("The problem is in `_cstack`:", "The bug is confirmed.") says what it
        // concluded in the sentence after it.
        let lead_in = s.ends_with(':') || s.split_whitespace().count() < LEAD_IN_WORDS;
        let f = match (lead_in, all.get(i + 1)) {
            (true, Some(next)) if !next.ends_with('?') && next.split_whitespace().count() >= 4 => {
                format!("{s} {next}")
            }
            (true, _) => continue,
            (false, _) => s.to_string(),
        };
        let f = tidy(&f, MAX_FINDING_CHARS);
        if !out.contains(&f) {
            out.push(f);
        }
        if out.len() == MAX_PER_MESSAGE {
            return out;
        }
    }
    out
}

/// Options an assistant message laid before the user, by label ("1", "A"), with their text.
/// Only a message that introduces options counts, so a plain numbered plan is no option list.
pub fn offered_options(text: &str) -> Vec<(String, String)> {
    let lines = prose_lines(text);
    let mut out: Vec<(String, String)> = Vec::new();
    for l in &lines {
        if let Some(c) = OPTION_LINE.captures(l) {
            let body = tidy(&c["text"], MAX_OPTION_CHARS);
            out.push((c["label"].to_ascii_uppercase(), body));
        }
    }
    if out.is_empty() {
        if let Some(lead) = lines.iter().position(|l| OPTIONS_LEAD.is_match(l)) {
            for l in &lines[lead + 1..] {
                match LISTED_OPTION.captures(l) {
                    Some(c) => out.push((
                        c["label"].to_ascii_uppercase(),
                        tidy(&c["text"], MAX_OPTION_CHARS),
                    )),
                    // Sub-bullets and wrapped lines belong to the option above them.
                    None if l.starts_with([' ', '\t']) => {}
                    None if !out.is_empty() => break,
                    None => {}
                }
            }
        }
    }
    out.retain(|(_, t)| !t.is_empty());
    out.truncate(MAX_OPTIONS);
    if out.len() < 2 {
        return Vec::new();
    }
    out
}

static RECOMMENDATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)^(?:so,?\s+)?(?:i(?:'d| would)? (?:recommend|suggest|propose)|my (?:recommendation|suggestion|proposal)|the (?:best|simplest|cleanest|safest) (?:approach|option|fix|way|solution) (?:is|would be)|i think (?:we|you) should|(?:the )?(?:proposed|suggested) (?:approach|design|fix|plan))",
    )
    .expect("valid regex")
});

/// What an assistant message proposes ("I'd recommend …", "The simplest fix is …"): the
/// sentence, for when the user answers it with a plain "yes".
pub fn proposal(text: &str) -> Option<String> {
    prose_lines(text).into_iter().find_map(|line| {
        sentences(line).into_iter().find_map(|sentence| {
            let s = sentence
                .trim()
                .trim_start_matches(['-', '*', '•', '>', '#'])
                .trim();
            let s = s.trim_start_matches("**");
            (RECOMMENDATION.is_match(s) && s.split_whitespace().count() >= 4)
                .then(|| tidy(s, MAX_FINDING_CHARS))
        })
    })
}

static PROPOSAL_HEADING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?-u:\b)(?:proposed|proposal|recommend\w*|solution|suggested)(?-u:\b)")
        .expect("valid regex")
});

/// A weaker heading, taken when no [`PROPOSAL_HEADING`] is there.
static PLAN_HEADING: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)(?-u:\b)(?:approach|plan)(?-u:\b)").expect("valid regex"));

/// What a message proposes under a heading that says so ("### Proposed Solution",
/// "**Recommendation:**"): the first statement under it, for an offer that only points at it
/// ("Would you like me to implement this solution?").
pub fn proposed_section(text: &str) -> Option<String> {
    let lines = prose_lines(text);
    let heading = |pattern: &Regex| {
        lines.iter().position(|l| {
            let t = l.trim();
            let is_heading = t.starts_with('#')
                || (t.starts_with("**")
                    && (t.ends_with("**") || t.ends_with("**:") || t.ends_with(":**")));
            is_heading && pattern.is_match(t)
        })
    };
    let heading_at = heading(&PROPOSAL_HEADING).or_else(|| heading(&PLAN_HEADING))?;
    lines[heading_at + 1..]
        .iter()
        .map(|l| l.trim())
        .take_while(|l| !l.starts_with('#'))
        .find(|l| l.split_whitespace().count() >= 6 && !l.ends_with('?'))
        .map(|l| tidy(l.trim_end_matches(':'), MAX_FINDING_CHARS))
}

/// The sentence a message's closing offer refers to: the last statement of at least six words
/// before the offer ("So the logic would go in X: archive before writing. Want me to implement
/// it?").
pub fn sentence_before_offer(text: &str) -> Option<String> {
    // The items of a list of reasons ("I like this approach because:" then bullets) argue for
    // the proposal; none of them is it.
    let mut reasons = false;
    let mut kept: Vec<&str> = Vec::new();
    for line in prose_lines(text) {
        let t = line.trim();
        let item = t.starts_with(['-', '*', '•']) || t.starts_with(|c: char| c.is_ascii_digit());
        if !item {
            let lower = t.to_lowercase();
            reasons = lower.ends_with("because:")
                || lower.ends_with("because")
                || lower.contains("benefits")
                || lower.ends_with("why:");
        }
        // A heading ("**After the second session:**") names a part of the proposal, not it.
        let heading = t.starts_with('#') || (t.starts_with("**") && t.ends_with("**"));
        if !(heading || item && reasons) {
            kept.push(line);
        }
    }
    let all: Vec<&str> = kept
        .into_iter()
        .flat_map(sentences)
        .map(|s| {
            s.trim()
                .trim_start_matches(['-', '*', '•', '>', '#'])
                .trim()
        })
        .filter(|s| !s.is_empty())
        .collect();
    let offer_at = all.iter().rposition(|s| s.ends_with('?'))?;
    all[..offer_at]
        .iter()
        .rev()
        .find(|s| s.split_whitespace().count() >= 6 && !s.ends_with(':') && !s.ends_with('?'))
        .map(|s| tidy(s, MAX_FINDING_CHARS))
}

static ORDINAL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?-u:\b)(?:the )?(first|second|third|fourth|1st|2nd|3rd|4th)(?: one| option| approach)?(?-u:\b)")
        .expect("valid regex")
});

static LABELLED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?-u:\b)(?:option|approach|alternative|choice|number|#)\s*(?P<label>[A-Z0-9])(?-u:\b)")
        .expect("valid regex")
});

static BARE_LABEL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(?:yes|ok(?:ay)?|sure|let'?s|go(?: with)?|do|pick)?[,.!\s]*(?:go with |do |pick |use )?(?P<label>[0-9]|[A-C])\s*(?:please|pls|then)?[.!]?\s*$")
        .expect("valid regex")
});

/// The option a user's reply chose, when it names one ("option 2", "go with B", "the first
/// one", "2").
pub fn chosen_option<'a>(reply: &str, options: &'a [(String, String)]) -> Option<&'a str> {
    if options.is_empty() || reply.split_whitespace().count() > 40 {
        return None;
    }
    let by_label = |label: &str| {
        options
            .iter()
            .find(|(l, _)| l.eq_ignore_ascii_case(label))
            .map(|(_, t)| t.as_str())
    };
    if let Some(c) = LABELLED.captures(reply) {
        return by_label(&c["label"]);
    }
    if let Some(c) = BARE_LABEL.captures(reply) {
        return by_label(&c["label"]);
    }
    if let Some(c) = ORDINAL.captures(reply) {
        let i = match c[1].to_ascii_lowercase().as_str() {
            "first" | "1st" => 0,
            "second" | "2nd" => 1,
            "third" | "3rd" => 2,
            _ => 3,
        };
        return options.get(i).map(|(_, t)| t.as_str());
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_revision_is_a_finding_and_an_announced_re_read_is_not() {
        let f = stated_findings(
            "Actually, the footer is fine: the cache in `Text` is never invalidated.",
        );
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(revises(&f[0]));
        assert!(stated_findings(
            "Actually wait, let me re-read `_separable` to see what it returns."
        )
        .is_empty());
        assert!(!revises(
            "Actually wait, let me re-read `_separable`: it returns an ndarray."
        ));
    }

    #[test]
    fn what_the_agent_found_and_why_something_fails_are_findings() {
        for s in [
            "Found 3 .env files in apps/app, none of them ignored.",
            "The version test expects 0.1.0 but the package is at 0.1.18.",
            "Some rg calls fail because the sandbox denies temp files for here-documents.",
            "The `--dry-run` flag doesn't exist on `eval`; the command is `eval run`.",
        ] {
            assert_eq!(stated_findings(s).len(), 1, "{s}");
        }
        assert!(
            stated_findings("I found the target issue details; now I'm pulling the rest.")
                .is_empty()
        );
    }

    use super::*;

    #[test]
    fn an_offer_to_implement_this_solution_points_at_the_proposed_section() {
        let text = "## Investigation\nClaude is launched in 3 places.\n\n### Proposed Solution\n\nAdd a `skipPermissions` setting that defaults to false.\n- it is read at launch\n\n### Notes\nThe setting needs a warning.\n\nWould you like me to implement this solution?";
        assert_eq!(
            proposed_section(text).as_deref(),
            Some("Add a `skipPermissions` setting that defaults to false.")
        );
        assert_eq!(proposed_section("Shall I go ahead? It is small."), None);
    }

    #[test]
    fn conclusions_are_quoted_and_narration_is_not() {
        let text = "Let me check the hook first.\n\nThe root cause is a timing issue: the subagent is still running at PostCommit. \
                    I'll fix it next. It turns out the cache key ignores the branch name, which explains the stale reads. \
                    Maybe the lock is involved?";
        assert_eq!(
            stated_findings(text),
            [
                "The root cause is a timing issue: the subagent is still running at PostCommit.",
                "It turns out the cache key ignores the branch name, which explains the stale reads."
            ]
        );
        assert_eq!(
            stated_findings("The lock is not the cause here: the test fails with it removed too."),
            ["The lock is not the cause here: the test fails with it removed too."]
        );
        assert!(stated_findings("Let me look at why the root cause is hidden.").is_empty());
        assert!(stated_findings("```\nthe root cause is in code\n```").is_empty());
        assert!(stated_findings("Done. All tests pass.").is_empty());
        assert!(stated_findings("The issue is likely that:").is_empty());
        assert!(
            stated_findings("I found the target issue details; now I'm pulling the rest.")
                .is_empty()
        );
    }

    #[test]
    fn a_vague_offer_points_at_the_sentence_before_it() {
        let text = "Each call reads the latest tree.\n\nSo the logic would go in `writeEntries` - check if metadata.json exists, and if so, archive before writing new files.\n\nWant me to implement it?";
        assert_eq!(
            sentence_before_offer(text).as_deref(),
            Some("So the logic would go in `writeEntries` - check if metadata.json exists, and if so, archive before writing new files.")
        );
    }

    #[test]
    fn a_proposal_is_the_sentence_that_recommends() {
        assert_eq!(
            proposal("Here is what happens.\n\nI'd recommend archiving each session to a numbered subfolder, so nothing is overwritten. Shall I?").as_deref(),
            Some("I'd recommend archiving each session to a numbered subfolder, so nothing is overwritten.")
        );
        assert_eq!(proposal("Let me read the file."), None);
    }

    #[test]
    fn options_put_to_the_user_and_the_one_chosen() {
        let text = "There are two approaches:\n\n1. Archive each session to a numbered subfolder\n   - keeps history\n2. Overwrite the metadata on every commit\n\nWhich do you prefer?";
        let options = offered_options(text);
        assert_eq!(
            options,
            [
                (
                    "1".to_string(),
                    "Archive each session to a numbered subfolder".to_string()
                ),
                (
                    "2".to_string(),
                    "Overwrite the metadata on every commit".to_string()
                ),
            ]
        );
        assert_eq!(
            chosen_option("yes, do option 1", &options),
            Some("Archive each session to a numbered subfolder")
        );
        assert_eq!(
            chosen_option("let's go with the second one", &options),
            Some("Overwrite the metadata on every commit")
        );
        assert_eq!(
            chosen_option("2", &options),
            Some("Overwrite the metadata on every commit")
        );
        assert_eq!(
            chosen_option("what does 2 cost us in disk space?", &options),
            None
        );
        let labelled = "**Option A**: keep the cookie format\n**Option B** - switch to JWT";
        let options = offered_options(labelled);
        assert_eq!(options.len(), 2);
        assert_eq!(chosen_option("B please", &options), Some("switch to JWT"));
        // A numbered plan is not a choice put to the user.
        assert!(offered_options("Plan:\n1. read the file\n2. fix the bug").is_empty());
    }
}
