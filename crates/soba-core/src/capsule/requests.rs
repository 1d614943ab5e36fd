//! The user's requests as a person typed them: the boilerplate agents wrap around prompts cut,
//! the current goal picked from the latest substantive request, and the rules the user stated
//! (must / never / don't / always / only / avoid …) kept as constraints.

use std::sync::LazyLock;

use regex::Regex;

/// Blocks a harness or IDE wraps around (or injects as) a user turn; none of it was typed.
const BOILERPLATE_TAGS: [&str; 22] = [
    "ide_opened_file",
    "ide_selection",
    "ide_diagnostics",
    "system-reminder",
    "command-name",
    "command-message",
    "command-args",
    "command-contents",
    "local-command-stdout",
    "local-command-stderr",
    "local-command-caveat",
    "bash-input",
    "bash-stdout",
    "bash-stderr",
    "user-prompt-submit-hook",
    "environment_context",
    "user_instructions",
    "INSTRUCTIONS",
    "permissions instructions",
    "turn_aborted",
    "user_shell_command",
    "collaboration_mode",
];

static BOILERPLATE_BLOCK: LazyLock<Regex> = LazyLock::new(|| {
    let alternatives: Vec<String> = BOILERPLATE_TAGS
        .iter()
        .map(|t| {
            let t = regex::escape(t);
            format!(r"<{t}(?:\s[^>]*)?>.*?(?:</{t}>|\z)")
        })
        .collect();
    Regex::new(&format!("(?s){}", alternatives.join("|"))).expect("valid regex")
});

/// Lines a harness adds on its own.
fn is_boilerplate_line(line: &str) -> bool {
    let l = line.trim();
    l.starts_with("Caveat: The messages below were generated")
        || l.starts_with("[Request interrupted")
        || l.starts_with("# AGENTS.md instructions for")
        || l.starts_with("<image>")
        || l == "</image>"
}

/// The text a person typed in a user turn, or `None` when the turn is all boilerplate
/// (an AGENTS.md dump, a slash-command echo, an interruption marker, a bare `/command`).
pub fn typed_text(text: &str) -> Option<String> {
    // Codex IDE extension: "# Context from my IDE setup: … ## My request for Codex:\nREQUEST".
    let text = match text.split_once("## My request for Codex:") {
        Some((_, request)) => request,
        None => text,
    };
    let cut = BOILERPLATE_BLOCK.replace_all(text, "");
    let kept: Vec<&str> = cut.lines().filter(|l| !is_boilerplate_line(l)).collect();
    let joined = kept.join("\n");
    let typed = joined.trim();
    if typed.is_empty() || is_bare_slash_command(typed) {
        return None;
    }
    Some(typed.to_string())
}

/// `/mode`, `/them`, `/`: a command a harness handled, not a request to the agent.
fn is_bare_slash_command(t: &str) -> bool {
    t.strip_prefix('/')
        .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
}

fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'')
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Replies that only make sense as an answer to the agent.
const ACKNOWLEDGEMENTS: [&str; 40] = [
    "yes", "y", "yeah", "yep", "yup", "ok", "okay", "k", "sure", "continue", "go", "on", "ahead",
    "proceed", "do", "it", "all", "thanks", "thank", "you", "no", "nope", "wow", "cool", "great",
    "nice", "lgtm", "good", "yo", "hi", "hey", "hello", "please", "alright", "fine", "right",
    "perfect", "that", "works", "done",
];

/// Filler a request may open with before its verb.
const OPENERS: [&str; 14] = [
    "ok", "okay", "alright", "so", "sooo", "hmm", "hmmm", "now", "then", "yo", "right", "great",
    "cool", "please",
];

/// Verbs that open an instruction.
const IMPERATIVE_VERBS: [&str; 72] = [
    "add",
    "fix",
    "implement",
    "create",
    "make",
    "write",
    "read",
    "update",
    "remove",
    "delete",
    "refactor",
    "investigate",
    "check",
    "review",
    "run",
    "move",
    "rename",
    "port",
    "build",
    "test",
    "debug",
    "find",
    "explain",
    "describe",
    "show",
    "change",
    "use",
    "adjust",
    "copy",
    "open",
    "replace",
    "convert",
    "set",
    "tackle",
    "start",
    "modify",
    "improve",
    "optimize",
    "clean",
    "migrate",
    "merge",
    "rebase",
    "commit",
    "push",
    "deploy",
    "release",
    "install",
    "document",
    "audit",
    "analyze",
    "analyse",
    "validate",
    "verify",
    "ensure",
    "support",
    "handle",
    "split",
    "extract",
    "generate",
    "design",
    "propose",
    "plan",
    "prepare",
    "summarize",
    "kill",
    "revert",
    "undo",
    "restore",
    "wire",
    "integrate",
    "give",
    "tell",
];

const POLITE_FORMS: [&str; 14] = [
    "can you",
    "could you",
    "can we",
    "could we",
    "would you",
    "will you",
    "please",
    "let's",
    "lets",
    "we need",
    "we should",
    "i want",
    "i'd like",
    "i need",
];

/// Words that point back at something said before: a short message ending on one is a
/// follow-up ("can you proof read this?", "print it again").
const BACK_REFERENCES: [&str; 12] = [
    "this", "that", "it", "them", "these", "those", "again", "too", "there", "here", "instead",
    "now",
];

const QUESTION_OPENERS: [&str; 20] = [
    "why", "what", "what's", "how", "does", "do", "did", "is", "are", "was", "were", "where",
    "when", "which", "who", "should", "would", "could", "isn't", "aren't",
];

const FOLLOW_UP_OPENERS: [&str; 8] = [
    "also", "and", "but", "wait", "actually", "btw", "same", "or",
];

/// Whether a request sets (or resets) the goal, as opposed to an acknowledgement, a question
/// about the work, or a follow-up that only makes sense with an earlier request.
pub fn is_substantive(request: &str) -> bool {
    let w = words(request);
    if w.is_empty() {
        return false;
    }
    if w.len() <= 5 && w.iter().all(|x| ACKNOWLEDGEMENTS.contains(&x.as_str())) {
        return false;
    }
    let lower = request.to_lowercase();
    let polite = POLITE_FORMS.iter().any(|p| contains_phrase(&lower, p));
    let start = w
        .iter()
        .position(|x| !OPENERS.contains(&x.as_str()))
        .unwrap_or(0);
    let first = w[start].as_str();
    if FOLLOW_UP_OPENERS.contains(&first) && w.len() <= 25 {
        return false;
    }
    if w.len() <= 12 && BACK_REFERENCES.contains(&w[w.len() - 1].as_str()) {
        return false;
    }
    let imperative = IMPERATIVE_VERBS.contains(&first);
    if QUESTION_OPENERS.contains(&first) && !polite {
        return false;
    }
    let long = w.len() >= 25;
    (imperative || polite || long) && w.len() >= 4
}

fn contains_phrase(haystack: &str, phrase: &str) -> bool {
    haystack.match_indices(phrase).any(|(i, _)| {
        let before = haystack[..i].chars().next_back();
        let after = haystack[i + phrase.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric()) && !after.is_some_and(|c| c.is_alphanumeric())
    })
}

/// The current goal among `requests` (oldest first): the latest substantive one.
pub fn latest_substantive(requests: &[String]) -> Option<&String> {
    requests.iter().rev().find(|r| is_substantive(r))
}

static RULE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(must|mustn't|never|don't|do not|dont|always|avoid|make sure|shouldn't|should not|no need to|under no circumstances)\b|^only\b|\b(use|change|touch|modify|edit|commit|run|read) only\b|\bonly (use|change|touch|modify|edit|commit|run)\b|^no [a-z]+(?: [a-z]+){0,3}!$",
    )
    .expect("valid regex")
});

/// "I don't understand", "we don't know": a statement about someone, not a rule.
pub(crate) static NOT_A_RULE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(?:i|we|you|it|that|this|they|he|she)\s+(?:don't|dont|do not|must have|always)\b",
    )
    .expect("valid regex")
});

/// "you can look up the history in /path/…": a pointer or a permission, not a rule.
pub(crate) static PERMISSION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^(?:\W*)(?:you|u) (?:can|could|may|might)\b(?:\s+(?:also|always|just))?\s+(?:look|find|check|see|use|read|try|refer)\b|^feel free\b")
        .expect("valid regex")
});

/// A rule said in brackets inside another sentence: "(don't read the full file!)".
static BRACKETED_RULE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\(((?:don't|do not|never|always|only|avoid)\b[^()]{3,200})\)")
        .expect("valid regex")
});

/// How all the work is to be done, said without a rule word: formats ("use rgb values, not
/// palette indices"), test kinds ("i would only want e2e tests"), what to keep ("keep the old
/// code around for reference") and scope ("no core code change, it's just documentation").
pub(crate) static STANDING_PREFERENCE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\buse\b[^.!?]{1,60}[,;]\s*(?:not|no)\s+\w|\bonly (?:ever )?want\b|\bkeep\b[^.!?]{1,40}\b(?:around|for reference)\b|\bjust (?:documentation|docs)\b|\b(?:docs|documentation)[- ]only\b|\b(?:no|doesn't (?:require|need) any|without any)\s+(?:\w+\s+)?code changes?\b",
    )
    .expect("valid regex")
});

/// "X doesn't adhere to the invariant that …": the invariant, after "that".
static BROKEN_INVARIANT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:doesn't|does not|don't|do not|isn't|is not)\s+(?:adhere to|follow|respect|obey|honou?r|keep)\s+the\s+(?:invariant|rule|contract|requirement)\s+that\s+(.{8,})")
        .expect("valid regex")
});

/// What is wrong, reported: a look that should change ("should be dimmer", "too wide") or a
/// crash the user ran into.
static SYMPTOM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bshould be (?:\w+er|more \w+|less \w+)\b|\b(?:is|are|looks?) too (?:wide|narrow|dark|bright|dim|light|small|big|large|long|short|tall)\b|\bgot an? (?:crash|exception|error)\b|\b(?:it|this|that) (?:crashed|crashes|exploded)\b")
        .expect("valid regex")
});

/// "don't", "never", "do not": a prohibition.
static PROHIBITION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:don't|dont|do not|never|mustn't|must not)\b").expect("valid regex")
});

/// A path (`/Users/me/x.jsonl`, `~/notes`), "this file", "that component", "the session log":
/// one object, not a kind of thing.
static ONE_OBJECT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?:^|[\s(])(?:/|~/)[\w.-]+/\S*|\b(?:this|that)\s+(?:file|folder|directory|path|log|session|function|component|method|class|test|script|branch|commit)\b|\bsession(?:'s)? (?:log|history|file)\b")
        .expect("valid regex")
});

fn names_one_object(sentence: &str) -> bool {
    ONE_OBJECT.is_match(sentence)
}

/// An instruction for one fix, not a standing rule: a report of what is wrong ("should be
/// dimmer, don't modify the theme, look into the footer sources", "got a crash, that should
/// never happen"), whose rule is how to fix that one thing, or a prohibition said of one
/// object ("don't open that file", "never edit /tmp/x.json").
pub(crate) fn is_one_off(text: &str) -> bool {
    SYMPTOM.is_match(text) || (PROHIBITION.is_match(text) && names_one_object(text))
}

/// Longest constraint kept whole; a longer sentence keeps its opening.
const MAX_RULE_CHARS: usize = 300;

/// The sentences of `request` that state a rule: must, never, don't, always, only, avoid, …
pub fn stated_rules(request: &str) -> Vec<String> {
    let mut out = Vec::new();
    for sentence in sentences(request) {
        let s = sentence.trim().trim_start_matches(['-', '*', '•']).trim();
        // "the queued messages component doesn't adhere to the invariant that every line …
        // must not be wider than the width": the report is a bug; the invariant it names is
        // the rule.
        let s = BROKEN_INVARIANT
            .captures(s)
            .and_then(|c| c.get(1))
            .map_or(s, |m| m.as_str().trim());
        let about_the_user = NOT_A_RULE.replace_all(s, "");
        let is_rule = RULE.is_match(&about_the_user) || STANDING_PREFERENCE.is_match(s);
        if s.chars().count() < 8 || !is_rule {
            continue;
        }
        if is_one_off(s) {
            continue;
        }
        // A pointer ("you can look up … in /path/x.jsonl if you need to (don't read the full
        // file!)") is no rule; a rule it carries in brackets is, unless it is about the one
        // object the pointer names.
        if PERMISSION.is_match(s) {
            if names_one_object(s) {
                continue;
            }
            for c in BRACKETED_RULE.captures_iter(s) {
                let rule = c[1].trim().to_string();
                if !out.contains(&rule) {
                    out.push(rule);
                }
            }
            continue;
        }
        let mut rule: String = s.chars().take(MAX_RULE_CHARS).collect();
        if s.chars().count() > MAX_RULE_CHARS {
            rule.push('…');
        }
        if !out.contains(&rule) {
            out.push(rule);
        }
    }
    out
}

/// Sentences: split at line breaks and after `.`, `!` or `?` followed by a space.
pub(crate) fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut start = 0;
        let bytes = line.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            if matches!(b, b'.' | b'!' | b'?') && bytes.get(i + 1) == Some(&b' ') {
                out.push(&line[start..=i]);
                start = i + 1;
            }
        }
        if start < line.len() {
            out.push(&line[start..]);
        }
    }
    out.into_iter().filter(|s| !s.trim().is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ide_and_harness_boilerplate_is_cut_from_requests() {
        let codex = "# Context from my IDE setup:\n\n## Open tabs:\n- a.ts: src/a.ts\n\n## My request for Codex:\nCan you present the plan now?\n";
        assert_eq!(
            typed_text(codex).as_deref(),
            Some("Can you present the plan now?")
        );
        let claude = "<ide_opened_file>The user opened the file /x/src/a.rs in the IDE.</ide_opened_file>\nfix the overflow in parse()";
        assert_eq!(
            typed_text(claude).as_deref(),
            Some("fix the overflow in parse()")
        );
        let reminder = "add a test\n<system-reminder>\nThe TodoWrite tool…\n</system-reminder>";
        assert_eq!(typed_text(reminder).as_deref(), Some("add a test"));
        for only_boilerplate in [
            "<command-name>/clear</command-name>\n<command-message>clear</command-message>\n<command-args></command-args>",
            "<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>",
            "<user_instructions>\nbe terse\n</user_instructions>",
            "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\n# Guide\nrules\n</INSTRUCTIONS>",
            "<bash-input>pwd</bash-input>",
            "<bash-stdout>/Users/x</bash-stdout><bash-stderr></bash-stderr>",
            "[Request interrupted by user for tool use]",
            "/mode",
            "/",
        ] {
            assert_eq!(typed_text(only_boilerplate), None, "{only_boilerplate}");
        }
    }

    #[test]
    fn acknowledgements_questions_and_follow_ups_are_not_goals() {
        for follow_up in [
            "yes",
            "ok",
            "continue",
            "yeah, do it all",
            "can you proof read this?",
            "can you print a full example again?",
            "why is the change in hooks_claudecode_handler needed?",
            "does it get the logged in user from the authStore?",
            "also i thougth the pattern was to use bun run not specify a path",
            "how would that look in the file system in `entire/sessions`",
            "remove the nord.json",
        ] {
            assert!(!is_substantive(follow_up), "{follow_up}");
        }
        for goal in [
            "Can you audit this codebase?",
            "Can you add the first two initials of actual user who is logged into the NavUser",
            "investigate whether this issue is stale and should be closed.",
            "there are now merge conflicts against main, can you fix them? ideally just rebase onto main",
            "ok, create a new custom theme and open it with code command. i'll edit it myself",
        ] {
            assert!(is_substantive(goal), "{goal}");
        }
    }

    #[test]
    fn the_goal_is_the_latest_substantive_request() {
        let requests: Vec<String> = [
            "Implement retries in the HTTP client",
            "yes",
            "can you proof read this?",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            latest_substantive(&requests).map(String::as_str),
            Some("Implement retries in the HTTP client")
        );
    }

    #[test]
    fn constraints_are_the_rules_the_user_stated() {
        let r = stated_rules(
            "Can you check the skip hook part is actually working? don't fix anything, but just validate it works. Thanks",
        );
        assert_eq!(r, ["don't fix anything, but just validate it works."]);
        assert_eq!(
            stated_rules("my dude, this exploded. invalid themes must NEVER explode"),
            ["invalid themes must NEVER explode"]
        );
        assert_eq!(
            stated_rules("no console logs! return an error"),
            ["no console logs!"]
        );
        assert!(stated_rules("i think there's only one file left to fix up").is_empty());
        assert!(stated_rules("yes").is_empty());
        assert!(stated_rules("no, the block should stay as is").is_empty());
        assert!(stated_rules("i don't tink the component invalidate works correctly").is_empty());
        assert!(
            stated_rules("No fixes applied. Checked 3 files in 3ms with the biome linter")
                .is_empty()
        );
    }
}
