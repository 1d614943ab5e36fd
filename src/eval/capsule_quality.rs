//! Capsule quality: the working state an agent needs at a cut point of a real transcript,
//! annotated by hand (the gold), and a scorer that compares a capsule with it field by field.
//!
//! Everything here is pure: an [`Annotation`] and a [`CapsuleEntry`] in, a [`CutScore`] out.
//! Building the capsules at the annotated cuts is [`super::bench`]'s job.
//!
//! # Matching
//!
//! Every annotated item is a [`Matcher`]: terms that must all (`all`), and at least one of
//! which (`any`), occur in one item of the capsule, compared case-insensitively. A term is a
//! plain substring, or a regular expression when written `/like this/`. A bare string is a
//! matcher of one `all` term.
//!
//! # Precision and recall
//!
//! For each field, *recall* is the share of annotated items that some capsule item satisfies,
//! and *precision* the share of the capsule's items that satisfy an annotated item of the
//! field. A capsule item the annotation does not list counts against precision: precision is
//! the share of what the capsule says that the annotator judged to belong there, a lower bound
//! wherever the annotation is not exhaustive (done work has a long tail; goal, constraints,
//! next steps, checks and files are annotated in full). A done item that names an annotated
//! check (`cargo test` passes) is right when that check's last run passed, wrong otherwise.
//!
//! # Targets
//!
//! Four pass/fail checks per cut, each failure with its reason ([`Target`]).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use regex::Regex;
use serde::{Deserialize, Serialize};

use soba_core::session::capsule::model::VerificationOutcome;
use soba_core::session::capsule::model::{CapsuleEntry, CapsuleState};
use soba_core::session::entry::{blocks_text, Role};
use soba_core::session::Session;

/// One term of a matcher: a case-insensitive substring, or a `/regular expression/`.
#[derive(Debug, Clone)]
pub struct Term {
    source: String,
    lowered: String,
    regex: Option<Regex>,
}

impl Term {
    pub fn parse(source: &str) -> Result<Term, String> {
        let regex = match source
            .strip_prefix('/')
            .and_then(|s| s.strip_suffix('/'))
            .filter(|s| !s.is_empty())
        {
            Some(pattern) => Some(
                Regex::new(&format!("(?i){pattern}"))
                    .map_err(|e| format!("bad regular expression `{source}`: {e}"))?,
            ),
            None if source.trim().is_empty() => return Err("empty term".into()),
            None => None,
        };
        Ok(Term {
            source: source.to_string(),
            lowered: source.to_lowercase(),
            regex,
        })
    }

    fn occurs_in(&self, text: &str, lowered: &str) -> bool {
        match &self.regex {
            Some(re) => re.is_match(text),
            None => lowered.contains(&self.lowered),
        }
    }
}

/// How a matcher is written in an annotation file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum MatcherSpec {
    One(String),
    Terms {
        #[serde(default)]
        all: Vec<String>,
        #[serde(default)]
        any: Vec<String>,
    },
}

/// Key terms an item must hold: every `all` term, and one of the `any` terms when there are any.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "MatcherSpec")]
pub struct Matcher {
    all: Vec<Term>,
    any: Vec<Term>,
}

impl TryFrom<MatcherSpec> for Matcher {
    type Error = String;

    fn try_from(spec: MatcherSpec) -> Result<Matcher, String> {
        let (all, any) = match spec {
            MatcherSpec::One(s) => (vec![s], Vec::new()),
            MatcherSpec::Terms { all, any } => (all, any),
        };
        if all.is_empty() && any.is_empty() {
            return Err("a matcher needs at least one term (it would match anything)".into());
        }
        let parse = |v: Vec<String>| v.iter().map(|s| Term::parse(s)).collect::<Result<_, _>>();
        Ok(Matcher {
            all: parse(all)?,
            any: parse(any)?,
        })
    }
}

impl Matcher {
    /// A matcher from terms, for tests and hand-built annotations.
    pub fn new(all: &[&str], any: &[&str]) -> Result<Matcher, String> {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Matcher::try_from(MatcherSpec::Terms {
            all: owned(all),
            any: owned(any),
        })
    }

    pub fn matches(&self, text: &str) -> bool {
        let lowered = text.to_lowercase();
        self.all.iter().all(|t| t.occurs_in(text, &lowered))
            && (self.any.is_empty() || self.any.iter().any(|t| t.occurs_in(text, &lowered)))
    }

    fn matches_any<'a>(&self, items: impl IntoIterator<Item = &'a String>) -> bool {
        items.into_iter().any(|i| self.matches(i))
    }
}

impl fmt::Display for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[Term]| {
            v.iter()
                .map(|t| t.source.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match (self.all.is_empty(), self.any.is_empty()) {
            (false, true) => write!(f, "[{}]", list(&self.all)),
            (true, false) => write!(f, "any[{}]", list(&self.any)),
            _ => write!(f, "[{}] any[{}]", list(&self.all), list(&self.any)),
        }
    }
}

/// Where an annotated cut is: the history up to and including this entry is what the capsule
/// covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Cut {
    /// Just before the source agent's own N-th compaction (1-based): the last entry the agent
    /// summarized itself.
    BeforeCompaction(usize),
    /// After the last entry imported from this source record: its `sourceId` (a Claude Code
    /// uuid, a pi id, `line N` of a Codex rollout, `messages[i]` of an OpenAI chat).
    AfterRecord(String),
}

impl fmt::Display for Cut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cut::BeforeCompaction(n) => write!(f, "before the agent's compaction {n}"),
            Cut::AfterRecord(id) => write!(f, "after record {id}"),
        }
    }
}

/// The last outcome a check had at the cut, as annotated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GoldOutcome {
    Passed,
    Failed,
    Unknown,
    /// Started and not finished at the cut: a capsule can only say `unknown`.
    Running,
}

impl GoldOutcome {
    pub fn expected(self) -> VerificationOutcome {
        match self {
            GoldOutcome::Passed => VerificationOutcome::Passed,
            GoldOutcome::Failed => VerificationOutcome::Failed,
            GoldOutcome::Unknown | GoldOutcome::Running => VerificationOutcome::Unknown,
        }
    }
}

/// A check (test, build, lint command) and its last outcome at the cut.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GoldCheck {
    /// Matched against the verification's command.
    pub command: Matcher,
    pub outcome: GoldOutcome,
}

/// The gold working state at one cut of one transcript.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Annotation {
    /// Path under the fixture transcripts folder, e.g. `pi/pi-mono-two-compactions.jsonl`.
    pub transcript: String,
    pub cut: Cut,
    /// Provenance: which records were read to write this annotation, and judgement calls.
    pub note: String,
    /// The task the user is driving at now.
    pub goal: Matcher,
    /// Preferences and corrections the user stated that must be kept.
    #[serde(default)]
    pub constraints: Vec<Matcher>,
    /// The user's questions: none may appear as a constraint.
    #[serde(default)]
    pub questions: Vec<Matcher>,
    /// Work finished by the cut.
    #[serde(default)]
    pub done: Vec<Matcher>,
    /// Work still open at the cut (active or pending).
    #[serde(default)]
    pub open_tasks: Vec<Matcher>,
    #[serde(default)]
    pub checks: Vec<GoldCheck>,
    #[serde(default)]
    pub decisions: Vec<Matcher>,
    /// What the agent should do next: each must be satisfied by a next step.
    #[serde(default)]
    pub next_step: Vec<Matcher>,
    /// Steps already done (or abandoned): none may appear as a next step or a blocker.
    #[serde(default)]
    pub stale: Vec<Matcher>,
    /// Files modified by the cut, matched against the capsule's modified files.
    #[serde(default)]
    pub modified: Vec<Matcher>,
    /// Files deleted by the cut (workspace-relative paths): none may be listed as plainly
    /// modified, i.e. as a modified file of exactly that path.
    #[serde(default)]
    pub deleted: Vec<String>,
}

impl Annotation {
    pub fn parse(text: &str) -> Result<Annotation, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
}

/// The fields scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    Goal,
    Constraints,
    Done,
    Open,
    NextSteps,
    Checks,
    Decisions,
    Files,
    /// The user's prompts before the cut kept among the capsule's requests (by their opening).
    Prompts,
}

impl Field {
    pub const ALL: [Field; 9] = [
        Field::Goal,
        Field::Constraints,
        Field::Done,
        Field::Open,
        Field::NextSteps,
        Field::Checks,
        Field::Decisions,
        Field::Files,
        Field::Prompts,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Field::Goal => "goal",
            Field::Constraints => "constraints",
            Field::Done => "done",
            Field::Open => "open",
            Field::NextSteps => "next_steps",
            Field::Checks => "checks",
            Field::Decisions => "decisions",
            Field::Files => "files",
            Field::Prompts => "prompts",
        }
    }
}

/// Counts of one field at one cut (or summed over cuts).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(into = "FieldReport")]
pub struct FieldScore {
    /// Capsule items that satisfy an annotated item of the field.
    pub matched_items: usize,
    /// Capsule items in the field.
    pub items: usize,
    /// Annotated items some capsule item satisfies.
    pub found: usize,
    /// Annotated items.
    pub annotated: usize,
    /// Annotated items the capsule misses, and capsule items that are wrong (ruled out by the
    /// annotation) or unlisted, for the detailed report.
    pub missed: Vec<String>,
    pub unmatched: Vec<String>,
}

/// A field's score as reports show it: the counts with their precision and recall.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FieldReport {
    precision: Option<f64>,
    recall: Option<f64>,
    matched_items: usize,
    items: usize,
    found: usize,
    annotated: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    missed: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    unmatched: Vec<String>,
}

impl From<FieldScore> for FieldReport {
    fn from(s: FieldScore) -> FieldReport {
        FieldReport {
            precision: s.precision(),
            recall: s.recall(),
            matched_items: s.matched_items,
            items: s.items,
            found: s.found,
            annotated: s.annotated,
            missed: s.missed,
            unmatched: s.unmatched,
        }
    }
}

impl FieldScore {
    /// `None` when the capsule has no item in the field.
    pub fn precision(&self) -> Option<f64> {
        (self.items > 0).then(|| self.matched_items as f64 / self.items as f64)
    }

    /// `None` when nothing is annotated for the field.
    pub fn recall(&self) -> Option<f64> {
        (self.annotated > 0).then(|| self.found as f64 / self.annotated as f64)
    }

    fn add(&mut self, other: &FieldScore) {
        self.matched_items += other.matched_items;
        self.items += other.items;
        self.found += other.found;
        self.annotated += other.annotated;
    }
}

/// The pass/fail targets of the local capsule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// The capsule's goal satisfies the annotated goal.
    Goal,
    /// No constraint of the capsule is one of the user's questions.
    NoQuestionAsConstraint,
    /// There are next steps, every annotated next step is among them, and no stale step is a
    /// next step or a blocker.
    NextSteps,
    /// Every annotated check is in the verification list with its last outcome.
    CheckOutcomes,
}

impl Target {
    pub const ALL: [Target; 4] = [
        Target::Goal,
        Target::NoQuestionAsConstraint,
        Target::NextSteps,
        Target::CheckOutcomes,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Target::Goal => "goal",
            Target::NoQuestionAsConstraint => "no question as constraint",
            Target::NextSteps => "next steps",
            Target::CheckOutcomes => "check outcomes",
        }
    }
}

/// One missed target at one cut, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TargetFailure {
    pub target: Target,
    pub reason: String,
}

/// A capsule scored against the annotation of one cut.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CutScore {
    pub cut: String,
    /// Every field, in [`Field::ALL`] order.
    pub fields: BTreeMap<Field, FieldScore>,
    pub failures: Vec<TargetFailure>,
}

impl CutScore {
    pub fn field(&self, f: Field) -> &FieldScore {
        &self.fields[&f]
    }

    pub fn meets(&self, t: Target) -> bool {
        !self.failures.iter().any(|f| f.target == t)
    }
}

/// Short, one-line form of a capsule item for reports.
fn shown(text: &str) -> String {
    const MAX: usize = 100;
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() > MAX {
        format!("`{}…`", line.chars().take(MAX).collect::<String>())
    } else {
        format!("`{line}`")
    }
}

/// Score list items against annotated matchers: `good` are the matchers an item may satisfy to
/// count as matched, `wanted` those recall counts (found in `recall_items`), `ruled_out` those
/// that make an item wrong whatever else it matches.
fn score_list(
    items: &[String],
    good: &[&Matcher],
    ruled_out: &[(&Matcher, &str)],
    wanted: &[&Matcher],
    recall_items: &[String],
) -> FieldScore {
    let mut s = FieldScore {
        items: items.len(),
        annotated: wanted.len(),
        ..FieldScore::default()
    };
    for item in items {
        if let Some((_, why)) = ruled_out.iter().find(|(m, _)| m.matches(item)) {
            s.unmatched.push(format!("{} ({why})", shown(item)));
        } else if good.iter().any(|m| m.matches(item)) {
            s.matched_items += 1;
        } else {
            s.unmatched.push(shown(item));
        }
    }
    for m in wanted {
        if m.matches_any(recall_items) {
            s.found += 1;
        } else {
            s.missed.push(m.to_string());
        }
    }
    s
}

/// How many characters of a user prompt open it: a prompt is kept when its opening is in one of
/// the capsule's requests (older requests are kept by their opening only).
pub const PROMPT_OPENING_CHARS: usize = 60;

/// Whitespace collapsed and lowercased, so that a request rewrapped or recased still matches.
fn normalized(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// What the user sent in one user message, or `None` when it is no request to the agent: the
/// marker an agent writes when the user stops a turn, or a bare `/command` the harness handled.
/// An IDE's context block in front of a Codex prompt is left out: the request is what follows
/// its `## My request for Codex:` heading.
pub fn prompt_of(text: &str) -> Option<&str> {
    let text = text
        .split_once("## My request for Codex:")
        .map_or(text, |(_, request)| request)
        .trim();
    let bare_command = text
        .strip_prefix('/')
        .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    let interruption = text.starts_with("[Request interrupted by user");
    (!text.is_empty() && !bare_command && !interruption).then_some(text)
}

/// The prompts the user sent on the branch up to `leaf`, oldest first: the text of every user
/// message the importer did not mark as the harness's own (command output, caveats, injected
/// instructions), as [`prompt_of`] reads it. This is read from the log, not from the capsule,
/// so that the share of prompts a capsule keeps does not depend on how its builder tells
/// prompts from boilerplate.
pub fn user_prompts(session: &Session, leaf: usize) -> Vec<String> {
    session
        .branch(leaf)
        .into_iter()
        .filter_map(|i| session.entry(i).as_message())
        .filter(|m| m.role == Role::User && !m.synthetic)
        .map(|m| blocks_text(&m.content))
        .filter_map(|t| prompt_of(&t).map(str::to_string))
        .collect()
}

/// Where a capsule keeps the user's words: its requests, and the messages its recent
/// exchanges quote.
fn kept_prompts(state: &CapsuleState) -> Vec<String> {
    state
        .requests
        .iter()
        .chain(state.exchanges.iter().map(|x| &x.user))
        .cloned()
        .collect()
}

/// The user's prompts against the capsule's requests: recall is the share of prompts whose
/// opening ([`PROMPT_OPENING_CHARS`]) is in a request, precision the share of requests that
/// hold the opening of a prompt.
fn score_prompts(prompts: &[String], requests: &[String]) -> FieldScore {
    let openings: Vec<String> = prompts
        .iter()
        .map(|p| normalized(p).chars().take(PROMPT_OPENING_CHARS).collect())
        .collect();
    let requests: Vec<String> = requests.iter().map(|r| normalized(r)).collect();
    let mut s = FieldScore {
        items: requests.len(),
        annotated: openings.len(),
        ..FieldScore::default()
    };
    for r in &requests {
        if openings.iter().any(|o| r.contains(o.as_str())) {
            s.matched_items += 1;
        } else {
            s.unmatched.push(shown(r));
        }
    }
    for o in &openings {
        if requests.iter().any(|r| r.contains(o.as_str())) {
            s.found += 1;
        } else {
            s.missed.push(shown(o));
        }
    }
    s
}

/// Score `capsule` against `gold`. `position` orders entries of the log (an entry's index):
/// when several of the capsule's checks match one annotated check, the one run last decides its
/// outcome (checks whose entry it does not know count as earlier, in the capsule's order).
/// `prompts` are the user's prompts up to the cut ([`user_prompts`]).
pub fn score(
    cut: &str,
    gold: &Annotation,
    capsule: &CapsuleEntry,
    position: &HashMap<String, usize>,
    prompts: &[String],
) -> CutScore {
    let state = &capsule.state;
    let facts = &capsule.artifacts;
    fn refs(v: &[Matcher]) -> Vec<&Matcher> {
        v.iter().collect()
    }
    let mut failures = Vec::new();
    let mut fail = |target, reason: String| failures.push(TargetFailure { target, reason });

    // Goal.
    let goal: Vec<String> = Some(state.goal.trim().to_string())
        .filter(|g| !g.is_empty())
        .into_iter()
        .collect();
    let goal_score = score_list(&goal, &[&gold.goal], &[], &[&gold.goal], &goal);
    if goal_score.found == 0 {
        fail(
            Target::Goal,
            match goal.first() {
                Some(g) => format!("goal {} does not match {}", shown(g), gold.goal),
                None => format!("goal is empty; expected {}", gold.goal),
            },
        );
    }

    // Constraints; the user's questions are wrong there.
    let questions: Vec<(&Matcher, &str)> = gold
        .questions
        .iter()
        .map(|q| (q, "a question of the user"))
        .collect();
    let constraints = score_list(
        &state.constraints,
        &refs(&gold.constraints),
        &questions,
        &refs(&gold.constraints),
        &state.constraints,
    );
    for c in &state.constraints {
        if let Some(q) = gold.questions.iter().find(|q| q.matches(c)) {
            fail(
                Target::NoQuestionAsConstraint,
                format!("constraint {} is the user's question {q}", shown(c)),
            );
        }
    }

    // Done work. An item that names an annotated check is right when that check passed last,
    // and wrong when it did not.
    let mut done_good = refs(&gold.done);
    let mut not_passed: Vec<(&Matcher, &str)> = Vec::new();
    for c in &gold.checks {
        if c.outcome == GoldOutcome::Passed {
            done_good.push(&c.command);
        } else {
            not_passed.push((&c.command, "a check whose last run did not pass"));
        }
    }
    let done = score_list(
        &state.completed,
        &done_good,
        &not_passed,
        &refs(&gold.done),
        &state.completed,
    );

    // Open work: active and pending items; a task the capsule lists only as a next step is
    // found too. The current work records what was just done, not open tasks.
    let open_items: Vec<String> = state.active.iter().chain(&state.pending).cloned().collect();
    let open_or_next: Vec<&Matcher> = gold.open_tasks.iter().chain(&gold.next_step).collect();
    let stale: Vec<(&Matcher, &str)> = gold.stale.iter().map(|m| (m, "already done")).collect();
    let mut open_recall_items = open_items.clone();
    open_recall_items.extend(state.next_steps.iter().cloned());
    let open = score_list(
        &open_items,
        &open_or_next,
        &stale,
        &refs(&gold.open_tasks),
        &open_recall_items,
    );

    // Next steps.
    let next = score_list(
        &state.next_steps,
        &open_or_next,
        &stale,
        &refs(&gold.next_step),
        &state.next_steps,
    );
    if state.next_steps.is_empty() {
        fail(
            Target::NextSteps,
            match next.missed.is_empty() {
                true => "no next steps".into(),
                false => format!("no next steps; expected {}", next.missed.join(", ")),
            },
        );
    } else if !next.missed.is_empty() {
        fail(
            Target::NextSteps,
            format!(
                "no next step matches {}; next steps: [{}]",
                next.missed.join(", "),
                state
                    .next_steps
                    .iter()
                    .map(|s| shown(s))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    for (kind, list) in [
        ("next step", &state.next_steps),
        ("blocker", &state.blockers),
    ] {
        for item in list {
            if let Some(m) = gold.stale.iter().find(|m| m.matches(item)) {
                fail(
                    Target::NextSteps,
                    format!("{kind} {} is stale (done already: {m})", shown(item)),
                );
            }
        }
    }

    // Checks: the verification list against the annotated last outcomes.
    let run_at = |i: usize, entry_id: &str| (position.get(entry_id).copied(), i);
    let mut checks = FieldScore {
        items: facts.verification.len(),
        annotated: gold.checks.len(),
        ..FieldScore::default()
    };
    let mut deciding_wrong: Vec<usize> = Vec::new();
    for g in &gold.checks {
        let expected = g.outcome.expected();
        let last = facts
            .verification
            .iter()
            .enumerate()
            .filter(|(_, v)| g.command.matches(&v.command))
            .max_by_key(|(i, v)| run_at(*i, &v.entry_id));
        match last {
            Some((_, v)) if v.outcome == expected => checks.found += 1,
            Some((i, v)) => {
                deciding_wrong.push(i);
                checks
                    .missed
                    .push(format!("{} {}", g.command, expected.as_str()));
                fail(
                    Target::CheckOutcomes,
                    format!(
                        "check {} last ran as {} with outcome {}, expected {}",
                        g.command,
                        shown(&v.command),
                        v.outcome.as_str(),
                        expected.as_str()
                    ),
                );
            }
            None => {
                checks
                    .missed
                    .push(format!("{} {}", g.command, expected.as_str()));
                fail(
                    Target::CheckOutcomes,
                    format!(
                        "check {} ({}) is not in the verification list",
                        g.command,
                        expected.as_str()
                    ),
                );
            }
        }
    }
    for (i, v) in facts.verification.iter().enumerate() {
        let annotated = gold.checks.iter().any(|g| g.command.matches(&v.command));
        if annotated && !deciding_wrong.contains(&i) {
            checks.matched_items += 1;
        } else {
            let why = if annotated { " (wrong outcome)" } else { "" };
            checks
                .unmatched
                .push(format!("{} {}{why}", shown(&v.command), v.outcome.as_str()));
        }
    }

    // Decisions, each with its rationale.
    let decision_items: Vec<String> = state
        .decisions
        .iter()
        .map(|d| format!("{} — {}", d.decision, d.rationale))
        .collect();
    let decisions = score_list(
        &decision_items,
        &refs(&gold.decisions),
        &[],
        &refs(&gold.decisions),
        &decision_items,
    );

    // Files: modified ones listed, deleted ones not listed as plainly modified.
    let paths: Vec<String> = facts
        .modified_files
        .iter()
        .map(|f| f.path.clone())
        .collect();
    let mut files = score_list(
        &paths,
        &refs(&gold.modified),
        &[],
        &refs(&gold.modified),
        &paths,
    );
    for d in &gold.deleted {
        files.annotated += 1;
        // Listed and marked deleted is right; listed as a plain modification is not.
        if let Some(i) = facts
            .modified_files
            .iter()
            .position(|f| &f.path == d && !f.deleted)
        {
            files.missed.push(format!("{d} (deleted)"));
            files.unmatched.retain(|u| u != &shown(&paths[i]));
            files
                .unmatched
                .push(format!("{} (deleted, listed as modified)", shown(d)));
            if gold.modified.iter().any(|m| m.matches(d)) {
                files.matched_items -= 1;
            }
        } else {
            files.found += 1;
        }
    }

    CutScore {
        cut: cut.to_string(),
        fields: BTreeMap::from([
            (Field::Goal, goal_score),
            (Field::Constraints, constraints),
            (Field::Done, done),
            (Field::Open, open),
            (Field::NextSteps, next),
            (Field::Checks, checks),
            (Field::Decisions, decisions),
            (Field::Files, files),
            (Field::Prompts, score_prompts(prompts, &kept_prompts(state))),
        ]),
        failures,
    }
}

/// Each field's counts summed over cuts (micro-averaged precision and recall).
pub fn totals(cuts: &[CutScore]) -> Vec<(Field, FieldScore)> {
    Field::ALL
        .iter()
        .map(|&f| {
            let mut sum = FieldScore::default();
            for c in cuts {
                sum.add(c.field(f));
            }
            (f, sum)
        })
        .collect()
}

fn ratio(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_string(), |x| format!("{x:.2}"))
}

/// The per-cut and per-field table: precision/recall in each cell (`-` where the capsule has
/// no item or nothing is annotated), the targets each cut meets, and the totals.
pub fn render_table(title: &str, cuts: &[CutScore]) -> String {
    let width = cuts
        .iter()
        .map(|c| c.cut.chars().count())
        .max()
        .unwrap_or(0)
        .max(16);
    let mut out =
        format!("{title}\nprecision/recall per field; targets met of 4; then the floors\n");
    out.push_str(&format!("{:<width$}", "cut"));
    for f in Field::ALL {
        out.push_str(&format!(" {:>11}", f.as_str()));
    }
    out.push_str("  targets\n");
    let cell = |s: &FieldScore| format!("{}/{}", ratio(s.precision()), ratio(s.recall()));
    for c in cuts {
        out.push_str(&format!("{:<width$}", c.cut));
        for f in Field::ALL {
            out.push_str(&format!(" {:>11}", cell(c.field(f))));
        }
        let met = Target::ALL.iter().filter(|&&t| c.meets(t)).count();
        out.push_str(&format!("  {met}/4\n"));
    }
    out.push_str(&format!("{:<width$}", "all cuts"));
    for (_, s) in totals(cuts) {
        out.push_str(&format!(" {:>11}", cell(&s)));
    }
    let all_met = cuts.iter().filter(|c| c.failures.is_empty()).count();
    out.push_str(&format!("  {all_met}/{} cuts meet all\n", cuts.len()));
    for t in Target::ALL {
        let met = cuts.iter().filter(|c| c.meets(t)).count();
        out.push_str(&format!(
            "target {:<26} met on {met} of {} cuts\n",
            t.as_str(),
            cuts.len()
        ));
    }
    out.push_str(&render_floors(cuts, &FLOORS));
    out
}

/// Every missed target, one line each: `cut: target: reason`.
pub fn failure_lines(cuts: &[CutScore]) -> Vec<String> {
    cuts.iter()
        .flat_map(|c| {
            c.failures
                .iter()
                .map(move |f| format!("{}: {}: {}", c.cut, f.target.as_str(), f.reason))
        })
        .collect()
}

/// Which ratio of a field a [`Floor`] bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Measure {
    Precision,
    Recall,
}

impl Measure {
    pub fn as_str(self) -> &'static str {
        match self {
            Measure::Precision => "precision",
            Measure::Recall => "recall",
        }
    }

    fn of(self, s: &FieldScore) -> Option<f64> {
        match self {
            Measure::Precision => s.precision(),
            Measure::Recall => s.recall(),
        }
    }
}

/// The least precision or recall of one field a useful capsule has at a cut.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Floor {
    pub field: Field,
    pub measure: Measure,
    pub min: f64,
}

impl Floor {
    pub fn name(&self) -> String {
        format!(
            "{} {} >= {:.2}",
            self.field.as_str(),
            self.measure.as_str(),
            self.min
        )
    }

    /// The cut's ratio when the floor applies there: `None` where it has nothing to divide by
    /// (no item in the capsule for precision, nothing annotated for recall; an empty field is
    /// caught by the other ratio).
    pub fn value_at(&self, cut: &CutScore) -> Option<f64> {
        self.measure.of(cut.field(self.field))
    }

    pub fn met_at(&self, cut: &CutScore) -> bool {
        self.value_at(cut).is_none_or(|v| v >= self.min)
    }
}

/// The floors of the fields beyond the four targets: what a capsule that an agent can carry on
/// from must reach at every cut. They are set by what such a capsule needs, not by what any
/// builder reaches: a constraint lost or invented changes what the agent does, a file missing
/// from the list is a change it does not know of, and a prompt not kept is a request it never
/// heard. Done work is not annotated exhaustively, so its precision is a lower bound and its
/// floor is the lowest here.
pub const FLOORS: [Floor; 9] = [
    Floor {
        field: Field::Constraints,
        measure: Measure::Precision,
        min: 0.8,
    },
    Floor {
        field: Field::Constraints,
        measure: Measure::Recall,
        min: 0.6,
    },
    Floor {
        field: Field::Done,
        measure: Measure::Precision,
        min: 0.6,
    },
    Floor {
        field: Field::Done,
        measure: Measure::Recall,
        min: 0.6,
    },
    Floor {
        field: Field::Decisions,
        measure: Measure::Precision,
        min: 0.6,
    },
    Floor {
        field: Field::Decisions,
        measure: Measure::Recall,
        min: 0.5,
    },
    Floor {
        field: Field::Files,
        measure: Measure::Precision,
        min: 0.9,
    },
    Floor {
        field: Field::Files,
        measure: Measure::Recall,
        min: 0.9,
    },
    Floor {
        field: Field::Prompts,
        measure: Measure::Recall,
        min: 0.95,
    },
];

/// The floor `measure` of `field` in [`FLOORS`].
pub fn floor(field: Field, measure: Measure) -> Option<Floor> {
    FLOORS
        .iter()
        .find(|f| f.field == field && f.measure == measure)
        .copied()
}

/// The floor's ratio over all `cuts` (micro-averaged), `None` where it has nothing to divide by.
pub fn total_value(floor: &Floor, cuts: &[CutScore]) -> Option<f64> {
    let mut sum = FieldScore::default();
    for c in cuts {
        sum.add(c.field(floor.field));
    }
    floor.measure.of(&sum)
}

/// Every cut that misses one of `floors`, one line each: `cut: floor: value`.
pub fn floor_miss_lines(cuts: &[CutScore], floors: &[Floor]) -> Vec<String> {
    floors
        .iter()
        .flat_map(|f| {
            cuts.iter()
                .filter(|c| !f.met_at(c))
                .map(move |c| format!("{}: {}: {}", c.cut, f.name(), ratio(f.value_at(c))))
        })
        .collect()
}

/// One line per floor: its ratio over all cuts (micro-averaged), the cuts that meet it of those
/// where it applies, and the cuts that miss it with their ratio.
pub fn render_floors(cuts: &[CutScore], floors: &[Floor]) -> String {
    let mut out = String::new();
    for f in floors {
        let total = total_value(f, cuts);
        let applies = cuts.iter().filter(|c| f.value_at(c).is_some()).count();
        let missed: Vec<String> = cuts
            .iter()
            .filter(|c| !f.met_at(c))
            .map(|c| format!("{} {}", c.cut, ratio(f.value_at(c))))
            .collect();
        out.push_str(&format!(
            "floor {:<28} all cuts {:>4}, met on {} of {applies} cuts",
            f.name(),
            ratio(total),
            applies - missed.len()
        ));
        if !missed.is_empty() {
            out.push_str(&format!("; missed: {}", missed.join(", ")));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use soba_core::session::capsule::model::Artifacts;
    use soba_core::session::capsule::model::CapsuleState;
    use soba_core::session::capsule::model::Decision;
    use soba_core::session::capsule::model::FileArtifact;
    use soba_core::session::capsule::model::Origin;
    use soba_core::session::capsule::model::Quality;
    use soba_core::session::capsule::model::Verification;
    use soba_core::session::trigger::Trigger;

    fn capsule(state: CapsuleState, artifacts: Artifacts) -> CapsuleEntry {
        CapsuleEntry {
            checkpoint_id: "ck_test".into(),
            trigger: Trigger::Handoff,
            quality: Quality::Degraded,
            first_kept_entry_id: None,
            previous_checkpoint_id: None,
            state,
            artifacts,
            tokens: Default::default(),
            origin: Origin::Session,
            mirrored: false,
            title: None,
            degraded_reason: None,
            instructions: None,
            elide_tool_results_over: None,
            loaded_from: None,
        }
    }

    fn gold() -> Annotation {
        Annotation::parse(
            r#"{
              "transcript": "claude-code/x.jsonl",
              "cut": {"before_compaction": 1},
              "note": "hand-made",
              "goal": {"all": ["rebase"], "any": ["main", "master"]},
              "constraints": ["don't push"],
              "questions": [{"all": ["why", "hook"]}],
              "done": [{"all": ["conflict", "resolved"]}, "lint clean"],
              "open_tasks": ["run the integration tests"],
              "checks": [
                {"command": "/go test.*integration/", "outcome": "passed"},
                {"command": "mise run lint", "outcome": "running"}
              ],
              "decisions": [{"all": ["keep"], "any": ["both sessions"]}],
              "next_step": [{"any": ["force-push", "push --force"]}],
              "stale": [{"all": ["resolve", "conflict"]}],
              "modified": ["rewind.go", "/^strategy/common\\.go$/"],
              "deleted": ["old.go"]
            }"#,
        )
        .unwrap()
    }

    fn v(command: &str, outcome: VerificationOutcome, entry: &str) -> Verification {
        Verification {
            command: command.into(),
            outcome,
            entry_id: entry.into(),
            edited_since: false,
        }
    }

    fn file(path: &str) -> FileArtifact {
        FileArtifact {
            path: path.into(),
            ..Default::default()
        }
    }

    /// The user's prompts up to the cut.
    fn prompts() -> Vec<String> {
        vec![
            "Rebase the branch onto main and fix the conflicts in the strategy package, \
             then run the integration tests"
                .into(),
            "Don't push   until I say so".into(),
        ]
    }

    /// A capsule that gets everything right.
    fn good() -> CapsuleEntry {
        capsule(
            CapsuleState {
                goal: "Rebase the branch onto main and fix the conflicts".into(),
                requests: vec![
                    "Rebase the branch onto main and fix the conflicts in the strategy…".into(),
                    "don't push until I say so".into(),
                ],
                constraints: vec!["Don't push without asking".into()],
                completed: vec![
                    "Conflicts in rewind.go resolved".into(),
                    "Lint clean".into(),
                ],
                active: vec!["Run the integration tests again".into()],
                next_steps: vec!["Force-push the branch once the tests pass".into()],
                decisions: vec![Decision {
                    decision: "Keep checkpoints of both sessions".into(),
                    rationale: "users asked".into(),
                }],
                ..Default::default()
            },
            Artifacts {
                modified_files: vec![file("rewind.go"), file("strategy/common.go")],
                verification: vec![
                    v(
                        "go test -tags=integration ./integration_test/...",
                        VerificationOutcome::Passed,
                        "e9",
                    ),
                    v("mise run lint", VerificationOutcome::Unknown, "e10"),
                ],
                ..Default::default()
            },
        )
    }

    fn scored(c: &CapsuleEntry) -> CutScore {
        score("cut", &gold(), c, &HashMap::new(), &prompts())
    }

    #[test]
    fn matchers_need_all_terms_and_one_of_any_case_insensitively() {
        let m = Matcher::new(&["rebase", "/on(to)? main/"], &["fix", "resolve"]).unwrap();
        assert!(m.matches("Rebase onto MAIN and resolve conflicts"));
        assert!(m.matches("rebase on main, fix it"));
        assert!(!m.matches("rebase onto main"), "no `any` term");
        assert!(!m.matches("merge main and fix"), "an `all` term missing");
        assert!(Matcher::new(&[], &[]).is_err());
        assert!(Matcher::new(&["/(unclosed/"], &[]).is_err());
        assert!(Annotation::parse(
            r#"{"transcript":"x","cut":{"after_record":"a"},"note":"","goal":{}}"#
        )
        .is_err());
        assert!(
            Annotation::parse(
                r#"{"transcript":"x","cut":{"after_record":"a"},"note":"","goal":"g","extra":1}"#
            )
            .is_err(),
            "unknown fields are refused"
        );
    }

    #[test]
    fn a_capsule_that_gets_everything_right_meets_every_target_at_full_recall() {
        let s = scored(&good());
        assert!(s.failures.is_empty(), "{:?}", s.failures);
        for (f, fs) in &s.fields {
            assert_eq!(fs.recall(), Some(1.0), "{f:?}: {fs:?}");
            assert_eq!(fs.precision(), Some(1.0), "{f:?}: {fs:?}");
        }
    }

    #[test]
    fn a_stale_goal_fails_the_goal_target() {
        let mut c = good();
        c.state.goal = "Can you tell me how the hook logic works?".into();
        let s = scored(&c);
        assert!(!s.meets(Target::Goal));
        assert!(s.failures[0]
            .reason
            .contains("does not match [rebase] any[main, master]"));
        assert_eq!(s.field(Field::Goal).precision(), Some(0.0));
        c.state.goal.clear();
        let s = scored(&c);
        assert_eq!(
            s.failures[0].reason,
            "goal is empty; expected [rebase] any[main, master]"
        );
        assert_eq!(s.field(Field::Goal).precision(), None);
        assert_eq!(s.field(Field::Goal).recall(), Some(0.0));
    }

    #[test]
    fn a_question_kept_as_a_constraint_fails_and_costs_precision() {
        let mut c = good();
        c.state
            .constraints
            .push("why is the change in the hook handler needed?".into());
        let s = scored(&c);
        assert!(!s.meets(Target::NoQuestionAsConstraint));
        let f = s.field(Field::Constraints);
        assert_eq!((f.matched_items, f.items), (1, 2));
        assert!(f.unmatched[0].contains("a question of the user"), "{f:?}");
    }

    #[test]
    fn missing_or_stale_next_steps_fail_the_next_step_target() {
        let mut c = good();
        c.state.next_steps.clear();
        let s = scored(&c);
        let reasons: Vec<&str> = s.failures.iter().map(|f| f.reason.as_str()).collect();
        assert_eq!(
            reasons,
            ["no next steps; expected any[force-push, push --force]"]
        );

        let mut c = good();
        c.state.next_steps = vec!["Write the changelog".into()];
        let s = scored(&c);
        assert_eq!(
            s.failures[0].reason,
            "no next step matches any[force-push, push --force]; next steps: [`Write the changelog`]"
        );

        let mut c = good();
        c.state
            .next_steps
            .push("Resolve the merge conflicts".into());
        c.state
            .blockers
            .push("resolve conflict in rewind.go".into());
        let s = scored(&c);
        assert!(!s.meets(Target::NextSteps));
        assert_eq!(s.failures.len(), 2, "{:?}", s.failures);
        assert!(s.failures[1].reason.starts_with("blocker"));
        assert_eq!(s.field(Field::NextSteps).precision(), Some(0.5));
        assert_eq!(s.field(Field::NextSteps).recall(), Some(1.0));
    }

    #[test]
    fn the_check_run_last_decides_its_outcome() {
        let mut c = good();
        // An earlier variant failed; the later one passed: right.
        c.artifacts.verification.insert(
            0,
            v(
                "go test -v -tags=integration ./integration_test/... -run X",
                VerificationOutcome::Failed,
                "e3",
            ),
        );
        let positions: HashMap<String, usize> = [("e3", 3), ("e9", 9), ("e10", 10)]
            .map(|(k, v)| (k.to_string(), v))
            .into();
        let s = score("cut", &gold(), &c, &positions, &prompts());
        assert!(s.meets(Target::CheckOutcomes), "{:?}", s.failures);
        assert_eq!(s.field(Field::Checks).precision(), Some(1.0));

        // The failing variant ran last: wrong.
        let positions: HashMap<String, usize> = [("e3", 30), ("e9", 9), ("e10", 10)]
            .map(|(k, v)| (k.to_string(), v))
            .into();
        let s = score("cut", &gold(), &c, &positions, &prompts());
        assert!(!s.meets(Target::CheckOutcomes));
        assert!(
            s.failures[0]
                .reason
                .contains("with outcome failed, expected passed"),
            "{:?}",
            s.failures
        );
        let f = s.field(Field::Checks);
        assert_eq!((f.found, f.annotated), (1, 2));
        assert_eq!((f.matched_items, f.items), (2, 3));
    }

    #[test]
    fn a_missing_check_or_a_running_one_reported_as_passed_fails() {
        let mut c = good();
        c.artifacts.verification[1].outcome = VerificationOutcome::Passed;
        let s = scored(&c);
        assert_eq!(
            s.failures[0].reason,
            "check [mise run lint] last ran as `mise run lint` with outcome passed, expected unknown"
        );
        c.artifacts.verification.remove(1);
        let s = scored(&c);
        assert_eq!(
            s.failures[0].reason,
            "check [mise run lint] (unknown) is not in the verification list"
        );
    }

    #[test]
    fn a_done_item_naming_a_check_is_right_only_when_that_check_passed_last() {
        let mut c = good();
        c.state.completed = vec![
            "`go test -tags=integration ./integration_test/...` passes".into(),
            "`mise run lint` passes".into(),
        ];
        let done = scored(&c).field(Field::Done).clone();
        assert_eq!((done.matched_items, done.items), (1, 2));
        assert_eq!(
            done.unmatched,
            ["``mise run lint` passes` (a check whose last run did not pass)"]
        );
        assert_eq!(
            done.recall(),
            Some(0.0),
            "checks are no annotated done work"
        );
    }

    #[test]
    fn unlisted_items_cost_precision_and_missed_ones_recall() {
        let mut c = good();
        c.state.completed.push("Read the README".into());
        c.state.decisions.clear();
        c.artifacts.modified_files.push(file("old.go"));
        let s = scored(&c);
        assert!(
            s.failures.is_empty(),
            "precision and recall alone are no target"
        );
        let done = s.field(Field::Done);
        assert_eq!((done.matched_items, done.items), (2, 3));
        assert_eq!(done.unmatched, ["`Read the README`"]);
        let d = s.field(Field::Decisions);
        assert_eq!((d.precision(), d.recall()), (None, Some(0.0)));
        assert_eq!(d.missed, ["[keep] any[both sessions]"]);
        let files = s.field(Field::Files);
        assert_eq!((files.matched_items, files.items), (2, 3));
        assert_eq!((files.found, files.annotated), (2, 3));
        assert_eq!(files.unmatched, ["`old.go` (deleted, listed as modified)"]);
        // Marked deleted, it is right.
        let mut c = good();
        c.artifacts.modified_files.push(FileArtifact {
            path: "old.go".into(),
            deleted: true,
            ..Default::default()
        });
        let files = scored(&c).field(Field::Files).clone();
        assert_eq!((files.found, files.annotated), (3, 3));
    }

    #[test]
    fn totals_sum_counts_over_cuts_and_the_table_shows_them() {
        let a = scored(&good());
        let mut c = good();
        c.state.goal = "something else".into();
        let b = score("other cut", &gold(), &c, &HashMap::new(), &prompts());
        let t = totals(&[a.clone(), b.clone()]);
        let goal = &t[0].1;
        assert_eq!(
            (goal.matched_items, goal.items, goal.found, goal.annotated),
            (1, 2, 1, 2)
        );
        let table = render_table("local capsule", &[a, b.clone()]);
        assert!(table.contains("other cut"), "{table}");
        assert!(table.contains("0.50/0.50"), "{table}");
        assert!(table.contains("1/2 cuts meet all"), "{table}");
        assert!(
            table.contains("target goal                       met on 1 of 2 cuts"),
            "{table}"
        );
        assert_eq!(
            failure_lines(&[b]),
            ["other cut: goal: goal `something else` does not match [rebase] any[main, master]"]
        );
    }

    #[test]
    fn a_prompt_is_what_the_user_sent_less_the_harness_own_text() {
        assert_eq!(prompt_of("  fix the footer  "), Some("fix the footer"));
        assert_eq!(
            prompt_of("# Context from my IDE setup:\n## Open tabs:\n- a.ts\n## My request for Codex:\nQuality score page"),
            Some("Quality score page")
        );
        assert_eq!(
            prompt_of("[Request interrupted by user for tool use]"),
            None
        );
        assert_eq!(prompt_of("/mode"), None);
        assert_eq!(prompt_of("   "), None);
        assert_eq!(
            prompt_of("/tmp/shot.png any idea why the colors differ?"),
            Some("/tmp/shot.png any idea why the colors differ?"),
            "a path that opens a prompt is no command"
        );
    }

    #[test]
    fn a_prompt_is_kept_when_its_opening_is_in_a_request() {
        let s = scored(&good());
        let p = s.field(Field::Prompts);
        assert_eq!((p.found, p.annotated), (2, 2), "{p:?}");
        assert_eq!((p.matched_items, p.items), (2, 2), "{p:?}");

        let mut c = good();
        c.state.requests = vec![
            "Don't push until I say so".into(),
            "Summarize the session".into(),
        ];
        let s = scored(&c);
        let p = s.field(Field::Prompts);
        assert_eq!((p.found, p.annotated), (1, 2));
        assert_eq!(
            p.missed,
            ["`rebase the branch onto main and fix the conflicts in the str`"]
        );
        assert_eq!(p.unmatched, ["`summarize the session`"]);
        assert!(s.failures.is_empty(), "the prompts are no target");

        let s = score("cut", &gold(), &good(), &HashMap::new(), &[]);
        let p = s.field(Field::Prompts);
        assert_eq!((p.recall(), p.precision()), (None, Some(0.0)));
    }

    fn floor_of(field: Field, measure: Measure) -> Floor {
        floor(field, measure).expect("a floor in the table")
    }

    #[test]
    fn a_cut_below_a_floor_is_listed_and_one_with_nothing_to_divide_by_is_not() {
        let a = scored(&good());
        let mut c = good();
        c.state.constraints = vec!["Use tabs".into(), "Don't push".into()];
        c.state.decisions.clear();
        let b = score("other cut", &gold(), &c, &HashMap::new(), &prompts());

        let precision = floor_of(Field::Constraints, Measure::Precision);
        assert!(precision.met_at(&a));
        assert!(!precision.met_at(&b));
        assert_eq!(precision.value_at(&b), Some(0.5));
        let decisions = floor_of(Field::Decisions, Measure::Precision);
        assert_eq!(decisions.value_at(&b), None);
        assert!(decisions.met_at(&b), "no decision listed: recall says it");
        assert!(!floor_of(Field::Decisions, Measure::Recall).met_at(&b));

        let cuts = [a, b];
        assert_eq!(
            floor_miss_lines(&cuts, &FLOORS),
            [
                "other cut: constraints precision >= 0.80: 0.50",
                "other cut: decisions recall >= 0.50: 0.00"
            ]
        );
        assert_eq!(total_value(&precision, &cuts), Some(2.0 / 3.0));
        let report = render_floors(&cuts, &[precision]);
        assert_eq!(
            report,
            "floor constraints precision >= 0.80 all cuts 0.67, met on 1 of 2 cuts; missed: other cut 0.50\n"
        );
        assert!(render_table("local capsule", &cuts).ends_with(&render_floors(&cuts, &FLOORS)));
    }

    #[test]
    fn every_floor_bounds_a_ratio_between_zero_and_one_and_is_listed_once() {
        for (i, f) in FLOORS.iter().enumerate() {
            assert!(f.min > 0.0 && f.min <= 1.0, "{}", f.name());
            assert!(
                !FLOORS[..i]
                    .iter()
                    .any(|g| g.field == f.field && g.measure == f.measure),
                "{} twice",
                f.name()
            );
        }
        assert_eq!(floor(Field::Goal, Measure::Recall), None);
    }
}
