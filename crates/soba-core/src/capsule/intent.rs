//! What a user message is to the work: a request, a question, a preference or correction, an
//! approval, or pasted material. Pasted blocks (logs, tables, diffs, code) are described, never
//! quoted as the goal; questions never become constraints; preferences and corrections do.

use std::sync::LazyLock;

use regex::Regex;

use super::requests::{
    is_one_off, is_substantive, sentences, stated_rules, NOT_A_RULE, PERMISSION,
    STANDING_PREFERENCE,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// Asks for work to be done.
    Request,
    /// Asks for an answer.
    Question,
    /// States how the work should be done, or corrects what the agent did.
    Preference,
    /// "yes", "ok go ahead": an answer to the agent.
    Approval,
    /// Material the user pasted with (almost) nothing typed around it.
    Paste,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserMessage {
    pub intent: Intent,
    /// The typed text with each pasted block replaced by its description.
    pub text: String,
    /// The user's own prose: the text without the pasted blocks.
    pub prose: String,
    /// "pasted 40 lines of test output", one per pasted block.
    pub pastes: Vec<String>,
}

/// A fenced block of at most this many lines, none longer than [`SHORT_FENCE_CHARS`], is kept
/// as written rather than described.
const SHORT_FENCE_LINES: usize = 1;
const SHORT_FENCE_CHARS: usize = 200;
/// A run of this many material lines (or a fenced block of any length) is a paste.
const MIN_PASTE_LINES: usize = 4;
/// Prose shorter than this many words around a paste makes the message a paste.
const MIN_PROSE_WORDS: usize = 3;

/// Classify a message a person typed (already cut of harness boilerplate).
pub fn classify(typed: &str) -> UserMessage {
    let (text, prose, pastes) = describe_pastes(typed);
    let words = prose.split_whitespace().count();
    // "…, does that make sense?" asks for agreement with what it follows, not an answer.
    let asked = without_tag_question(&prose);
    // "…, but then it would fail on a git level already, right?": a claim put up for the agent
    // to confirm asks a question; only a direction ("we should use X, does that make sense?")
    // asks for agreement with work.
    let confirms_a_claim = asked.len() < prose.len()
        && !opens_with_work(asked)
        && !DIRECTIVE.is_match(asked)
        && !is_preference(asked)
        && !CORRECTION.is_match(asked);
    let intent = if !pastes.is_empty() && words < MIN_PROSE_WORDS {
        Intent::Paste
    } else if is_approval(&prose) {
        Intent::Approval
    } else if confirms_a_claim {
        Intent::Question
    } else if CORRECTION.is_match(asked) && has_a_statement(asked) {
        // "no, that's not it, use X. is Y the cause?": the correction leads.
        Intent::Preference
    } else if is_question(asked) {
        Intent::Question
    } else if opens_with_work(asked) {
        Intent::Request
    } else if is_preference(asked) || states_a_rule_first(asked) {
        Intent::Preference
    } else {
        Intent::Request
    };
    UserMessage {
        intent,
        text,
        prose,
        pastes,
    }
}

static TAG_QUESTION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)[.,;!]?\s*(?:does (?:that|this) make sense|makes sense|right|no|ok(?:ay)?|agreed?|sounds good|wdyt|what do you think|thoughts)\s*\?+\s*$")
        .expect("valid regex")
});

/// The text without a closing tag question, when something is left before it.
fn without_tag_question(prose: &str) -> &str {
    match TAG_QUESTION.find(prose) {
        Some(m) if m.start() > 0 && prose[..m.start()].split_whitespace().count() >= 4 => {
            prose[..m.start()].trim_end()
        }
        _ => prose,
    }
}

/// A correction or direction this long states where the work is going.
const GOAL_SETTING_WORDS: usize = 12;

impl UserMessage {
    /// Whether this message sets (or resets) the task the user is driving at.
    pub fn sets_goal(&self) -> bool {
        // "btw, …", "also …", "fyi …": an aside to the work under way, however long.
        let first = self
            .prose
            .split(|c: char| !c.is_alphanumeric())
            .find(|w| !w.is_empty())
            .unwrap_or("")
            .to_lowercase();
        if matches!(first.as_str(), "btw" | "fyi" | "also" | "ps" | "aside") {
            return false;
        }
        // "then we need to tackle this bash issue: … how can we prevent it?", "How about this
        // logic: - …": work set out (a question about it may follow).
        if self.intent != Intent::Approval
            && SETS_OUT_WORK.is_match(&self.prose)
            && self.text.split_whitespace().count() >= GOAL_SETTING_WORDS
        {
            return true;
        }
        match self.intent {
            Intent::Request => is_substantive(&self.prose),
            // A direction sets it; a correction that also asks something ("actually, can you
            // revert that?", "slight steering: why does …?") steers the work it corrects.
            Intent::Preference => {
                (CORRECTION.is_match(&self.prose) || DIRECTIVE.is_match(&self.prose))
                    && !without_tag_question(&self.prose).contains('?')
                    && (is_substantive(&self.prose)
                        || without_tag_question(&self.prose).split_whitespace().count()
                            >= GOAL_SETTING_WORDS)
            }
            // A pasted error with nothing said around it asks for it to be fixed.
            Intent::Paste => self.pastes.iter().any(|p| p.contains(" of error output")),

            _ => false,
        }
    }

    /// What the user asked the agent to keep to: stated rules, preferences and corrections,
    /// never a question and never a line of pasted material.
    pub fn constraints(&self) -> Vec<String> {
        if matches!(self.intent, Intent::Approval | Intent::Paste) {
            return Vec::new();
        }
        let own_words = own_words(&self.prose);
        let mut out: Vec<String> = stated_rules(&own_words)
            .into_iter()
            .filter(|r| !is_question(r))
            .collect();
        // A message counts whole only when it corrects the agent or says how the user wants
        // the work; a direction ("we should …", "… should be closed") is work, not a rule.
        // "i don't think the invalidate works": a report about the code, not a rule; a
        // correction states a rule only in the words rules are said in ("actually, it's the
        // background that doesn't change" reports a bug).
        let about_someone = NOT_A_RULE.replace_all(&self.prose, "");
        let states_a_preference = (CORRECTION.is_match(&self.prose)
            && CORRECTION_RULE.is_match(&about_someone))
            || STATED_PREFERENCE.is_match(&about_someone);
        // A long message that corrects the agent is a new plan of work ("no, that's horrible.
        // tools -> core/tools, tui -> …, then update both"): its request, not a standing rule.
        let short = self.prose.split_whitespace().count() <= MAX_PREFERENCE_WORDS;
        // A pointer ("you can look up … (don't read the full file!)") says where to look; the
        // rules it carries are [`stated_rules`]'s to keep or leave.
        let pointer = PERMISSION.is_match(&self.prose);
        if self.intent == Intent::Preference
            && out.is_empty()
            && states_a_preference
            && short
            && !pointer
            && !is_one_off(&own_words)
        {
            // The preference without the questions asked beside it.
            let stated: Vec<&str> = sentences(without_tag_question(&self.prose))
                .into_iter()
                .map(str::trim)
                .filter(|s| !s.is_empty() && !s.ends_with('?') && !is_question(s))
                .collect();
            if !stated.is_empty() {
                out.push(clip(&stated.join(" "), MAX_PREFERENCE_CHARS));
            }
        }
        out
    }
}

/// Words a standing correction is said in: "no, keep the block as is", "no need for X".
static CORRECTION_RULE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:must|mustn't|never|always|don't|do not|dont|only|keep|no need|prefer|should|shouldn't|stop|avoid|instead|rather|from now on)\b")
        .expect("valid regex")
});

/// The user's own lines of `prose`: a program's lines pasted among them left out, with the
/// lines that continue one (an API error wrapped over several lines).
fn own_words(prose: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let mut in_machine_text = false;
    for l in prose.lines() {
        if l.trim().is_empty() {
            in_machine_text = false;
            out.push(l);
            continue;
        }
        if is_machine_text(l) {
            in_machine_text = true;
        }
        if !in_machine_text {
            out.push(l);
        }
    }
    out.join("\n")
}

/// A line a program wrote, pasted among the user's words (a JSON log record, an API error):
/// its "must" is the program's, not a rule of the user's.
fn is_machine_text(line: &str) -> bool {
    ["{\"", "\":\"", "\\\""].iter().any(|m| line.contains(m))
}

/// Longest message taken whole as a preference, in words.
const MAX_PREFERENCE_WORDS: usize = 30;
/// Longest preference kept whole as a constraint.
const MAX_PREFERENCE_CHARS: usize = 300;

fn clip(s: &str, n: usize) -> String {
    let mut out: String = s.chars().take(n).collect();
    if s.chars().count() > n {
        out.push('…');
    }
    out
}

const APPROVALS: [&str; 44] = [
    "yes",
    "y",
    "yeah",
    "yep",
    "yup",
    "ok",
    "okay",
    "k",
    "sure",
    "continue",
    "go",
    "ahead",
    "proceed",
    "do",
    "it",
    "all",
    "thanks",
    "thank",
    "you",
    "lgtm",
    "good",
    "great",
    "nice",
    "perfect",
    "please",
    "alright",
    "fine",
    "right",
    "that",
    "works",
    "sounds",
    "looks",
    "cool",
    "on",
    "with",
    "them", // "let's do that", "sounds good, implement it", "agreed, ship this"
    "let's",
    "lets",
    "implement",
    "this",
    "agreed",
    "agree",
    "makes",
    "sense",
];

fn is_approval(prose: &str) -> bool {
    let words: Vec<String> = prose
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect();
    !words.is_empty() && words.len() <= 6 && words.iter().all(|w| APPROVALS.contains(&w.as_str()))
}

static POLITE_REQUEST: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(?:ok(?:ay)?[,.]?\s+|so[,]?\s+|and\s+|now\s+|btw[,]?\s+)?(?:can|could|would|will)\s+(?:you|we)\s+(?:please\s+)?(?P<verb>[a-z]+)")
        .expect("valid regex")
});

/// "Can you tell me how …?" asks for an answer; "can you audit …?" for work.
const ASKING_VERBS: [&str; 10] = [
    "tell", "explain", "describe", "clarify", "remind", "confirm", "be", "have", "see", "say",
];

fn is_polite_request(t: &str) -> bool {
    POLITE_REQUEST
        .captures(t)
        .is_some_and(|c| !ASKING_VERBS.contains(&c["verb"].to_lowercase().as_str()))
}

static QUESTION_OPENER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(?:ok(?:ay)?[,.]?\s+|so[,]?\s+|and\s+|but\s+|hmm+[,.]?\s+)?(?:why|what|what's|whats|how|does|do|did|is|are|was|were|where|when|which|who|whose|should|shouldn't|would|wouldn't|could|couldn't|can|can't|isn't|aren't|doesn't|don't|didn't|will|won't|have|has|hasn't|haven't|am)\b")
        .expect("valid regex")
});

static WHY_HOW: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(?:why|how come|what|how|where|when|which|does|do|is|are)\b")
        .expect("valid regex")
});

/// A question the user wants answered (not "can you fix X?", which asks for work).
pub fn is_question(text: &str) -> bool {
    let t = text.trim();
    if t.is_empty() {
        return false;
    }
    if is_polite_request(t) {
        return false;
    }
    let last_sentence = t
        .rsplit(['.', '!', '\n'])
        .map(str::trim)
        .find(|s| !s.is_empty())
        .unwrap_or(t);
    // "slight steering: why does X …? i would assume …": the question leads.
    let first_sentence = t.split_inclusive(['?', '.', '!', '\n']).next().unwrap_or(t);
    let leading_question = first_sentence.trim_end().ends_with('?')
        && WHY_HOW.is_match(
            first_sentence
                .split_once(':')
                .map_or(first_sentence, |(_, q)| q),
        );
    t.ends_with('?')
        || leading_question
        || (QUESTION_OPENER.is_match(last_sentence) && last_sentence.ends_with('?'))
}

static PREFERENCE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)^\s*(?:no|nope|not|actually|instead|rather)\b[,.!]?|\bi\s+(?:wanted|want(?:ed)?\s+it|meant|prefer|'d prefer|would prefer|'d rather|would rather|like it)\b|\b(?:please\s+)?(?:don't|do not|never|always|stop|avoid)\b|\bshould(?:n't| not)?\s+(?:be|use|stay|keep|have|go)\b|\btoo\s+(?:long|verbose|short|many|much|wordy|complex|complicated)\b|\b(?:use|keep|prefer)\s+\S+\s+(?:instead|rather)\b|\bthat's\s+(?:not|wrong)\b|\bthat is\s+(?:not|wrong)\b",
    )
    .expect("valid regex")
});

/// How the user wants the work done, said as a preference: what [`PREFERENCE`] finds, less a
/// bare "should be" (which directs work as often as it states a rule).
static STATED_PREFERENCE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\bi\s+(?:wanted|want(?:ed)?\s+it|meant|prefer|'d prefer|would prefer|'d rather|would rather|like it)\b|\b(?:please\s+)?(?:don't|do not|never|always|stop|avoid)\b|\btoo\s+(?:long|verbose|short|many|much|wordy|complex|complicated)\b|\b(?:use|keep|prefer)\s+\S+\s+(?:instead|rather)\b|\bthat's\s+(?:not|wrong)\b|\bthat is\s+(?:not|wrong)\b",
    )
    .expect("valid regex")
});

fn has_a_statement(prose: &str) -> bool {
    sentences(prose)
        .into_iter()
        .map(str::trim)
        .any(|s| s.split_whitespace().count() >= 3 && !s.ends_with('?'))
}

/// "We should use the initials from the username": a direction for the work.
static DIRECTIVE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:we|you)\s+(?:should|need to|have to|must)\s+(?:use|make|show|change|add|fix|move|put|keep|return|switch|call|read|write|handle)\b|\bi want you to\b")
        .expect("valid regex")
});

/// Opens with the work it asks for: an imperative or a polite request.
fn opens_with_work(prose: &str) -> bool {
    let first = prose
        .split_inclusive(['.', '!', '?', '\n'])
        .next()
        .unwrap_or(prose);
    (POLITE_OR_IMPERATIVE.is_match(first)
        && !first.trim_start().to_lowercase().starts_with("make sure"))
        || is_polite_request(first)
}

/// Opens by setting out work or proposing a design, whatever question follows.
static SETS_OUT_WORK: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(?:(?:ok(?:ay)?|alright|so|then|now|and|well)[,.!]?\s+)*(?:(?:we|you) (?:need|have) to (?:tackle|fix|solve|look at|handle|implement|add|build|change|address)|let'?s (?:tackle|fix|solve|implement|add|build|change|address|look at|do)|how about (?:this|the following|we)|what if we)(?-u:\b)")
        .expect("valid regex")
});

static CORRECTION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(?:no|nope|not|actually|instead|rather|wait)\b").expect("valid regex")
});

/// "this plan must be written so that …", "make sure …": a message that opens with a rule
/// tells how to work, not what to work on.
fn states_a_rule_first(prose: &str) -> bool {
    let first = prose
        .split_inclusive(['.', '!', '?', '\n'])
        .next()
        .unwrap_or(prose);
    // "it doesn't need any core code change, it's just documentation.. can you update the
    // docs": a scope said in passing frames the work it asks for.
    !stated_rules(first).is_empty()
        && !STANDING_PREFERENCE.is_match(first)
        && !opens_with_work(first)
}

static POLITE_OR_IMPERATIVE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(?:ok(?:ay)?|alright|so|now|please|let'?s|can you|could you|can we|add|fix|implement|create|make|write|update|remove|delete|refactor|port|build|move|rename|read|run|use|change)\b")
        .expect("valid regex")
});

fn is_preference(prose: &str) -> bool {
    PREFERENCE.is_match(prose)
}

/// The text with pasted blocks described, the prose alone, and the descriptions.
fn describe_pastes(typed: &str) -> (String, String, Vec<String>) {
    let lines: Vec<&str> = typed.lines().collect();
    let mut text: Vec<String> = Vec::new();
    let mut prose: Vec<&str> = Vec::new();
    let mut pastes = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        // A fenced block is pasted material whatever its length.
        if lines[i].trim_start().starts_with("```") {
            let lang = lines[i]
                .trim_start()
                .trim_start_matches('`')
                .trim()
                .to_string();
            let start = i + 1;
            let mut end = start;
            while end < lines.len() && !lines[end].trim_start().starts_with("```") {
                end += 1;
            }
            let body = &lines[start..end.min(lines.len())];
            // A command or a line of code in a fence is part of what the user wrote ("submit
            // with ```echo DONE && git add -A```"): kept as written, where a description would
            // lose the one thing that matters.
            let short = body.iter().filter(|l| !l.trim().is_empty()).count() <= SHORT_FENCE_LINES
                && body.iter().all(|l| l.chars().count() <= SHORT_FENCE_CHARS);
            if short {
                text.extend(
                    lines[i..(end + 1).min(lines.len())]
                        .iter()
                        .map(|l| l.to_string()),
                );
                i = (end + 1).min(lines.len().max(end + 1));
                continue;
            }
            let d = describe(body, (!lang.is_empty()).then_some(lang.as_str()));
            text.push(format!("[{d}]"));
            pastes.push(d);
            i = (end + 1).min(lines.len().max(end + 1));
            continue;
        }
        // A run of material lines (blank lines, and single prose-looking lines between
        // material ones, included: a message line inside a stack trace is still the trace).
        let mut end = i;
        let mut material = 0;
        while end < lines.len() {
            let l = lines[end];
            if l.trim().is_empty() {
                end += 1;
                continue;
            }
            if l.trim_start().starts_with("```") {
                break;
            }
            if !is_material(l) {
                let bridged = material > 0
                    && lines
                        .get(end + 1)
                        .is_some_and(|n| !n.trim().is_empty() && is_material(n));
                if !bridged {
                    break;
                }
            }
            material += 1;
            end += 1;
        }
        // Trailing blank lines belong to what follows.
        while end > i && lines[end - 1].trim().is_empty() {
            end -= 1;
        }
        if material >= MIN_PASTE_LINES {
            let body = &lines[i..end];
            let d = describe(body, None);
            text.push(format!("[{d}]"));
            pastes.push(d);
            i = end;
            continue;
        }
        text.push(lines[i].to_string());
        prose.push(lines[i]);
        i += 1;
    }
    let join = |v: &[String]| v.join("\n").trim().to_string();
    (join(&text), prose.join("\n").trim().to_string(), pastes)
}

static LOG_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?xi)^\s*(?:
            \d{4}-\d{2}-\d{2}[T\ ]\d{2}:\d{2}      # timestamps
          | \[?\d{2}:\d{2}:\d{2}
          | \[?(?:INFO|WARN|WARNING|ERROR|DEBUG|TRACE|FATAL)\b
          | at\s+[\w.$<>]+\s*\(                     # stack frames
          | File\ "
          | Traceback\b
          | error(?:\[E\d+\])?:
          | warning:
          | thread\ '
          | ---\ (?:FAIL|PASS)
          | ===\ RUN
          | (?:ok|FAIL|PASS|FAILED|PASSED)\s
          | [❯➜$>%]\s
          | ~/\S*
          | \^+\s*$                                # caret markers under an error
          | [\w.]+:\d+(?::\d+)?\s*$              # file:line
          | (?:errno|code|syscall|path|status|stack):\s
          | >>>
          | npm\ ERR!
          | \d+\s*[→|:]\s                           # numbered source lines
          | [├└│┌┐┘┬┴┼─]
        )"#,
    )
    .expect("valid regex")
});

static ERROR_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^(?:error|\w*error:|\w*exception:|fatal:|panic|thread '.*' panicked|fail(?:ed)?\b|--- fail|assertionerror)")
        .expect("valid regex")
});

/// A line that reads as pasted output, code, a table or a diff rather than typed prose.
fn is_material(line: &str) -> bool {
    let t = line.trim();
    if t.starts_with('|') && t.matches('|').count() >= 2 {
        return true;
    }
    if t.starts_with("+++ ") || t.starts_with("--- ") || t.starts_with("@@") {
        return true;
    }
    // Diff lines: "+code" or "-code"; a "- item" bullet is prose.
    if (t.starts_with('+') && !t.starts_with("+ ") && t.len() > 1)
        || (t.starts_with('-') && t.len() > 1 && !t.starts_with("- ") && !t.starts_with("--"))
    {
        return true;
    }
    if t.starts_with("+ ") && looks_like_code(&t[2..]) {
        return true;
    }
    if LOG_LINE.is_match(line) {
        return true;
    }
    // `key: 'value',` lines of a printed object.
    if t.ends_with(',') && t.contains(": ") && !t.contains(". ") {
        return true;
    }
    let indented = line.starts_with("    ") || line.starts_with('\t');
    looks_like_code(t) || (indented && t.contains(['(', ')', '=', ';', '{', '}']))
}

fn looks_like_code(t: &str) -> bool {
    t.ends_with(';')
        || t.ends_with('{')
        || t == "}"
        || t.starts_with("}")
        || t.starts_with("//")
        || t.starts_with("#include")
        || t.starts_with("import ")
        || t.starts_with("from ") && t.contains(" import ")
        || t.starts_with("def ")
        || t.starts_with("fn ")
        || t.starts_with("pub ")
        || t.starts_with("func ")
        || t.starts_with("const ")
        || t.starts_with("let ")
        || t.starts_with("return ")
        || t.starts_with("</")
        || (t.starts_with('<') && t.ends_with('>') && !t.contains(' '))
        || (t.starts_with('"') && t.ends_with("\","))
}

/// "pasted 40 lines of test output".
fn describe(body: &[&str], lang: Option<&str>) -> String {
    let n = body.iter().filter(|l| !l.trim().is_empty()).count();
    let kind = lang
        .map(|l| match l {
            "diff" | "patch" => "a diff".to_string(),
            "sh" | "bash" | "shell" | "console" | "text" | "log" | "txt" => {
                kind_of(body).to_string()
            }
            other => format!("{other} code"),
        })
        .unwrap_or_else(|| kind_of(body).to_string());
    let lines = if n == 1 { "line" } else { "lines" };
    // The first error line says what the paste is about ("Error: ENOENT … package.json").
    let first_error = body
        .iter()
        .map(|l| l.trim())
        .find(|l| ERROR_LINE.is_match(l))
        .map(|l| format!(": {}", super::work::clip(l, 160)));
    format!(
        "pasted {n} {lines} of {kind}{}",
        first_error.unwrap_or_default()
    )
}

fn kind_of(body: &[&str]) -> &'static str {
    let all = body.join("\n");
    let lower = all.to_lowercase();
    let count = |p: &dyn Fn(&str) -> bool| body.iter().filter(|l| p(l.trim())).count();
    if count(&|l| l.starts_with('|')) * 2 >= body.len() {
        "a table"
    } else if count(&|l| l.starts_with('+') || l.starts_with('-') || l.starts_with("@@")) * 2
        >= body.len()
    {
        "a diff"
    } else if lower.contains("traceback")
        || lower.contains("panicked")
        || lower.contains("exception")
        || lower.contains("error")
    {
        if lower.contains("test") || lower.contains("fail") {
            "test output"
        } else {
            "error output"
        }
    } else if lower.contains("passed") || lower.contains("fail") || lower.contains("=== run") {
        "test output"
    } else if count(&|l| LOG_LINE.is_match(l)) * 2 >= body.len() {
        "log output"
    } else {
        "code or text"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_correction_is_a_plan_of_work_not_a_rule() {
        let short = classify("no, the block should stay as is");
        assert_eq!(short.constraints(), vec!["no, the block should stay as is"]);
        let long = classify("no, that's horrible. tools -> core/tools, tui -> modes/interactive/components, theme -> modes/interactive/theme, oauth -> core/oauth, the rest -> utils. then we update the old and the new implementation to both reference them from there");
        assert!(long.constraints().is_empty(), "{:?}", long.constraints());
    }

    #[test]
    fn a_rule_inside_a_pasted_log_line_is_no_constraint() {
        let m = classify("then we need to tackle this bash issue:\n\n{\"type\":\"error\",\"error\":{\"message\":\"messages.3: `tool_use` ids were found without `tool_result` blocks. Each `tool_use` block must have a corresponding `tool_result` block in the next message\"}}\n\nreason being that we injected the bash message. Never reorder the user's messages.");
        assert_eq!(m.constraints(), vec!["Never reorder the user's messages."]);
    }

    #[test]
    fn a_pasted_log_is_described_never_quoted_as_the_request() {
        let log: String = (0..40)
            .map(|i| format!("2026-01-12T10:{i:02}:00Z INFO worker {i} started\n"))
            .collect();
        let m = classify(&log);
        assert_eq!(m.intent, Intent::Paste);
        assert_eq!(m.text, "[pasted 40 lines of log output]");
        assert!(!m.sets_goal());

        let with_request = format!("fix this crash please:\n{log}");
        let m = classify(&with_request);
        assert_eq!(m.intent, Intent::Request);
        assert_eq!(
            m.text,
            "fix this crash please:\n[pasted 40 lines of log output]"
        );
        assert_eq!(m.prose, "fix this crash please:");
    }

    #[test]
    fn fenced_blocks_and_tables_are_described() {
        let m = classify("Make the table match this:\n| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |");
        assert_eq!(
            m.text,
            "Make the table match this:\n[pasted 4 lines of a table]"
        );
        let m = classify("the test fails:\n```\nthread 'x' panicked at src/a.rs:3\ntest result: FAILED\n```\ncan you fix it");
        assert_eq!(
            m.text,
            "the test fails:\n[pasted 2 lines of test output: thread 'x' panicked at src/a.rs:3]\ncan you fix it"
        );
        assert_eq!(m.intent, Intent::Request);
    }

    #[test]
    fn a_bulleted_request_stays_prose() {
        let req = "How about this logic:\n\n- if there is no folder, create one\n- if there is a folder, read the count\n- write the new session into a subfolder\n- keep the newest at the root";
        let m = classify(req);
        assert!(m.pastes.is_empty(), "{:?}", m.pastes);
        assert_eq!(m.text, req);
    }

    #[test]
    fn a_claim_put_up_for_confirmation_is_a_question_and_sets_no_goal() {
        let m = classify("I was less worried about this happening from a single entire cli execution, but more if two different git commits happen, but then it would fail anyhow since the second commit would fail on a git level already, right?");
        assert_eq!(m.intent, Intent::Question);
        assert!(!m.sets_goal());
        let m = classify("We should use the initials from the username if name isn't present, does that make sense?");
        assert!(m.sets_goal(), "{m:?}");
    }

    #[test]
    fn questions_are_never_constraints() {
        for q in [
            "shouldn't runs be part of experiment?",
            "don't we just pass in a validated key and use it directly?",
            "why is the change in hooks_claudecode_handler needed?",
        ] {
            let m = classify(q);
            assert_eq!(m.intent, Intent::Question, "{q}");
            assert!(m.constraints().is_empty(), "{q}: {:?}", m.constraints());
        }
    }

    /// Work the user asks for, or a direction for it, is the goal or a request, never a rule
    /// to keep to.
    #[test]
    fn requests_and_directions_are_not_constraints() {
        for m in [
            "investigate whether this issue is stale and should be closed. also check every issue and rank each by staleness",
            "The username I am logged in with is jnarowski but the menu says Guest User. We should use the initials from the username if name isn't present",
            "the output should be grouped by file",
        ] {
            assert!(classify(m).constraints().is_empty(), "{m}: {:?}", classify(m).constraints());
        }
    }

    #[test]
    fn preferences_and_corrections_become_constraints() {
        let m = classify("i wanted a prose list of examples");
        assert_eq!(m.intent, Intent::Preference);
        assert_eq!(m.constraints(), ["i wanted a prose list of examples"]);
        let m = classify("no, the block should stay as is");
        assert_eq!(m.constraints(), ["no, the block should stay as is"]);
        let m = classify(
            "no, that's not it, use the dark theme. is Theme.fg maybe doing something stupid?",
        );
        assert_eq!(m.constraints(), ["no, that's not it, use the dark theme."]);
        let m = classify("don't fix anything, just validate it works");
        assert_eq!(
            m.constraints(),
            ["don't fix anything, just validate it works"]
        );
    }

    #[test]
    fn diff_lines_are_material_not_rules() {
        let m = classify(
            "look at this change\n+ // Fall back to generating a key; never store it\n+ let key = generate();\n+ store(key);\n+ return key;",
        );
        assert!(m.constraints().is_empty(), "{:?}", m.constraints());
        assert_eq!(m.pastes, ["pasted 4 lines of a diff"]);
    }

    #[test]
    fn a_pasted_terminal_session_is_described() {
        let pasted = "~/workspaces/pi-mono (refactor)\n➜  pi-mono git:(refactor) npx tsx packages/coding-agent/src/cli.ts -c\nnode:fs:443\n    return binding.readFileUtf8(path, stringToFlags(options.flag));\n                   ^\n\nError: ENOENT: no such file or directory, open '/x/package.json'\n    at Object.readFileSync (node:fs:443:20)\n  errno: -2,\n  code: 'ENOENT',\n}";
        let m = classify(pasted);
        assert_eq!(m.intent, Intent::Paste, "{m:?}");
        // A pasted error with nothing around it asks for a fix: it sets the goal, described.
        assert!(m.sets_goal());
        assert!(m.text.contains("error output: Error: ENOENT"), "{}", m.text);
    }

    #[test]
    fn a_direction_ending_in_a_tag_question_is_no_question() {
        let m = classify("no, we want to put it in pendingMessageContainer, and on next user submit, we move to chat and add to context. does that make sense?");
        assert_eq!(m.intent, Intent::Preference);
        assert!(m.sets_goal());
        assert_eq!(classify("does that make sense?").intent, Intent::Question);
    }

    #[test]
    fn a_rule_tells_how_to_work_not_what_to_work_on() {
        let m = classify("this plan must be written in such a way, that you can start a new session and pick up from where you left, also reading the diff of the current work tree");
        assert_eq!(m.intent, Intent::Preference);
        assert!(!m.sets_goal());
        assert!(!m.constraints().is_empty());
    }

    #[test]
    fn a_bug_report_with_a_direction_sets_the_goal() {
        let m = classify("The username I am logged in with is jnarowski but the menu says Guest User. We should use the initials from the username if name isn't present");
        assert!(m.sets_goal(), "{m:?}");
        let m = classify("Implement feature 7 and never break the public API.");
        assert_eq!(m.intent, Intent::Request);
        assert!(m.sets_goal());
    }

    #[test]
    fn an_aside_never_sets_the_goal() {
        let m = classify("btw, can we make it so we keep the old code around for reference? i think your plan already works like that, but i want to be able to compare the old and the new implementation side by side while we port everything over to the new structure");
        assert_eq!(m.intent, Intent::Request);
        assert!(!m.sets_goal());
    }

    #[test]
    fn approvals_and_polite_requests() {
        for a in [
            "yes",
            "ok go ahead",
            "sounds good, do it",
            "lgtm",
            "let's do that",
            "sounds good, implement it",
            "agreed, makes sense",
        ] {
            assert_eq!(classify(a).intent, Intent::Approval, "{a}");
        }
        for r in [
            "can you fix the flaky login test?",
            "Can we prefill the prompt with the old prompt?",
            "there are now merge conflicts against main, can you fix them? ideally just rebase onto main",
        ] {
            assert_eq!(classify(r).intent, Intent::Request, "{r}");
        }
    }
}
