//! What a session's requests hold beyond its log: the allowance the budget adds for it (see
//! [`crate::budget::unseen_allowance`]) and what the session's own reports teach about it.

use super::entry::{EntryBody, Role};
use super::foreign::ForeignCompactions;
use super::view::{replacing_compaction, ModelView};
use super::Session;
use crate::budget::unseen_allowance::Agent;
use crate::budget::unseen_allowance::Fresh;
use crate::budget::unseen_allowance::Unseen;
use crate::budget::unseen_allowance::UnseenPrior;
use crate::budget::unseen_allowance::LEARN_GROWTH_FROM_REPORTS;
use crate::budget::UsageAnchor;

/// What a session's reports showed beyond its counted log, for the requests that had no earlier
/// report to stand on: the tokens a later session's first request should allow for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UnseenObservations {
    /// The first request of the session.
    pub start: Option<u64>,
    /// The largest of the first requests after the agent's own compactions.
    pub after_agent_compaction: Option<u64>,
}

impl UnseenObservations {
    pub fn is_empty(&self) -> bool {
        self.start.is_none() && self.after_agent_compaction.is_none()
    }
}

/// The file a tool call names (`file_path`, `path`, `notebook_path`), if any.
fn file_argument(block: &super::entry::ContentBlock) -> Option<&str> {
    match block {
        super::entry::ContentBlock::ToolCall { input, .. } => {
            ["file_path", "path", "notebook_path"]
                .iter()
                .find_map(|k| input.get(*k).and_then(|v| v.as_str()))
                .filter(|p| !p.is_empty())
        }
        _ => None,
    }
}

impl Session {
    /// The agent whose transcript the session follows or imports, from the header.
    pub fn agent(&self) -> Option<Agent> {
        Agent::from_format(&self.header.source.as_ref()?.format)
    }

    /// What the budget assumes about the agent's unseen context before the session's own usage
    /// says: the agent's defaults until [`Session::set_unseen_prior`] gives what this machine
    /// learned.
    pub fn unseen_prior(&self) -> UnseenPrior {
        self.unseen_prior
            .unwrap_or_else(|| UnseenPrior::defaults(self.agent()))
    }

    pub fn set_unseen_prior(&mut self, prior: UnseenPrior) {
        self.unseen_prior = Some(prior);
    }

    /// Measure the log alone, with no allowance for what the provider counts beyond it: for a
    /// replay, whose input is SOBA's own and whose report accounts for what the transcript
    /// does not hold beside it.
    pub fn set_allow_for_unseen(&mut self, allow: bool) {
        self.allow_for_unseen = allow;
    }

    /// The allowance for what the request at `leaf` holds beyond the log, given the view's
    /// usage `anchor` there: over an anchored budget the session's unseen growth; otherwise its
    /// unseen context (none for a session of no known agent). A log that records a system
    /// prompt still gets the context allowance: the gaps it is learned from were measured
    /// against the same kind of log (Codex records its 4.4k-token base instructions and still
    /// sends 5.3k more: its tools).
    pub fn unseen_at(&self, leaf: Option<usize>, anchor: Option<UsageAnchor>) -> Unseen {
        if !self.allow_for_unseen {
            return Unseen::NONE;
        }
        if let Some(a) = anchor.filter(|a| a.usage.context_tokens() > 0) {
            let calibration = self.calibration_at(leaf);
            let residuals: Vec<i64> = self
                .newest_samples_at(leaf, LEARN_GROWTH_FROM_REPORTS)
                .iter()
                .map(|s| s.provider as i64 - calibration.apply(s.counted) as i64)
                .collect();
            return Unseen::growth(&residuals, a.usage.context_tokens(), self.agent());
        }
        // Only a followed or imported agent's log leaves out what its requests hold; no walk of
        // the branch is spent on the others.
        if self.agent().is_none() {
            return Unseen::NONE;
        }
        let prior = self.unseen_prior();
        match self.agent_compaction_at(leaf) {
            Some(compaction) => Unseen::after_agent_compaction(
                &prior,
                self.start_gap_at(leaf),
                self.files_touched_before(compaction, prior.agent),
            ),
            None => Unseen::context(&prior, Fresh::Start, self.start_gap_at(leaf)),
        }
    }

    /// The agent's own compaction the view at `leaf` starts from: walks up from the leaf to the
    /// latest capsule, as the view does.
    fn agent_compaction_at(&self, leaf: Option<usize>) -> Option<usize> {
        if self.foreign_compactions() != ForeignCompactions::Honour {
            return None;
        }
        let capsule = self.capsule_on_path(leaf?);
        let mut cur = leaf;
        while let Some(i) = cur.filter(|&i| Some(i) != capsule) {
            if replacing_compaction(self, i).is_some() {
                return Some(i);
            }
            cur = self.parent_of(i);
        }
        None
    }

    /// How many distinct files the agent's tool calls named (read or edited) on the branch
    /// before entry `compaction`, counted up to the most the agent attaches again after a
    /// compaction; 0 for an agent that attaches none. Newest first, and the walk ends there.
    fn files_touched_before(&self, compaction: usize, agent: Option<Agent>) -> usize {
        let Some(restore) = agent.and_then(Agent::restores_files_after_compaction) else {
            return 0;
        };
        let mut files: Vec<&str> = Vec::new();
        let mut cur = self.parent_of(compaction);
        while let Some(i) = cur.filter(|_| files.len() < restore.max_files) {
            // Told by the index: only the messages that make tool calls are parsed.
            if self.kind_of(i) == super::entry::EntryKind::Message && self.call_ids_of(i).len() > 0
            {
                if let EntryBody::Message(m) = &self.entry(i).body {
                    for path in m.content.iter().filter_map(file_argument) {
                        if !files.contains(&path) && files.len() < restore.max_files {
                            files.push(path);
                        }
                    }
                }
            }
            cur = self.parent_of(i);
        }
        files.len()
    }

    /// What the first usage report on the branch ending at `leaf` showed beyond the counted log
    /// of its request, or `None` when the branch has no report yet.
    pub fn start_gap_at(&self, leaf: Option<usize>) -> Option<u64> {
        let mut first = None;
        let mut cur = leaf.and_then(|i| self.usage_on_path.at(i));
        while let Some(u) = cur {
            first = Some(u as usize);
            cur = self
                .parent_of(u as usize)
                .and_then(|p| self.usage_on_path.at(p));
        }
        self.fresh_gap(first?)
    }

    /// The report of entry `idx` set against SOBA's count of its request, when that request had
    /// no earlier report to stand on: what the request held beyond the log.
    fn fresh_gap(&self, idx: usize) -> Option<u64> {
        let usage = match &self.entry(idx).body {
            EntryBody::Message(m) if m.role == Role::Assistant => m.usage?,
            _ => return None,
        };
        let request_leaf = self.parent_of(self.response_start(idx));
        let view = ModelView::build(self, request_leaf);
        if view
            .usage_anchor(self)
            .is_some_and(|a| a.usage.context_tokens() > 0)
        {
            return None;
        }
        let breakdown = view.breakdown(self);
        let counted = self.calibration_at(request_leaf).apply(breakdown.total());
        Some(usage.prompt_tokens().saturating_sub(counted))
    }

    /// What the reports on the branch at the leaf showed beyond the log at the session's first
    /// request and at the first request after each of the agent's own compactions: what a later
    /// session of the same agent and model learns from. One walk up the branch.
    pub fn unseen_observations(&self) -> UnseenObservations {
        let leaf = self.leaf();
        let mut after: Option<u64> = None;
        if self.foreign_compactions() == ForeignCompactions::Honour {
            // Walking up, the report seen last is the oldest after the current entry.
            let mut oldest_report_since = None;
            let mut cur = leaf;
            while let Some(i) = cur {
                if self.has_usage(i) {
                    oldest_report_since = Some(i);
                }
                if replacing_compaction(self, i).is_some() {
                    if let Some(gap) = oldest_report_since.take().and_then(|r| self.fresh_gap(r)) {
                        after = Some(after.map_or(gap, |a| a.max(gap)));
                    }
                }
                cur = self.parent_of(i);
            }
        }
        UnseenObservations {
            start: self.start_gap_at(leaf),
            after_agent_compaction: after,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::budget::unseen_allowance::Agent;
    use crate::budget::unseen_allowance::Fresh;
    use crate::budget::unseen_allowance::Learned;
    use crate::budget::unseen_allowance::UnseenKind;
    use crate::budget::unseen_allowance::UnseenPrior;
    use crate::budget::unseen_allowance::UnseenSource;
    use crate::session::entry::*;
    use crate::session::testing::Builder;

    fn reply(b: &mut Builder, text: &str, prompt: u64) -> String {
        b.push(EntryBody::Message(MessageEntry {
            role: Role::Assistant,
            content: vec![ContentBlock::text(text)],
            usage: Some(Usage {
                input: prompt,
                output: 10,
                ..Usage::default()
            }),
            model: None,
            synthetic: false,
        }))
    }

    fn claude_code() -> Builder {
        let mut b = Builder::new();
        b.session.header.source = Some(SourceInfo {
            format: "claude-code".into(),
            path: "/t.jsonl".into(),
            session_id: None,
        });
        b
    }

    fn unseen(b: &Builder) -> crate::budget::unseen_allowance::Unseen {
        let s = &b.session;
        let t = s.tally();
        s.unseen_at(s.leaf(), t.usage_anchor())
    }

    fn summary() -> EntryBody {
        EntryBody::ForeignCompaction(Box::new(ForeignCompactionEntry {
            agent: "claude-code".into(),
            trigger: Some("auto".into()),
            tokens_before: Some(50_000),
            summary: Some("what happened so far".into()),
            summary_tokens: None,
            first_kept_entry_id: None,
            kept_items: None,
            kept_entry_ids: None,
            instructions: None,
        }))
    }

    #[test]
    fn a_first_request_allows_for_the_agents_unseen_context_until_a_report_anchors() {
        let mut b = claude_code();
        b.user("fix the bug");
        let u = unseen(&b);
        assert_eq!(
            (u.kind, u.source, u.agent),
            (
                UnseenKind::Context,
                UnseenSource::Default,
                Some(Agent::ClaudeCode)
            )
        );
        assert_eq!(
            u.tokens,
            Agent::ClaudeCode.default_unseen(Fresh::Start).unwrap()
        );
        let counted = b.session.tally().breakdown().total();
        reply(&mut b, "done", 30_000 + counted);
        b.user("next");
        let anchored = unseen(&b);
        assert_ne!(
            anchored.kind,
            UnseenKind::Context,
            "the session's usage anchors it"
        );
    }

    #[test]
    fn a_log_of_no_known_agent_gets_no_context_allowance() {
        let mut b = Builder::new();
        b.user("hello");
        assert_eq!(
            unseen(&b),
            crate::budget::unseen_allowance::Unseen::NONE,
            "no agent named"
        );
    }

    #[test]
    fn after_the_agents_compaction_the_first_reports_gap_and_the_prior_bound_the_allowance() {
        let mut b = claude_code();
        b.session.set_unseen_prior(UnseenPrior {
            agent: Some(Agent::ClaudeCode),
            start: Some(Learned {
                tokens: 20_000,
                sessions: 3,
            }),
            after_agent_compaction: Some(Learned {
                tokens: 1_000,
                sessions: 3,
            }),
        });
        b.user("start");
        let first_count = b.session.tally().breakdown().total();
        let u = unseen(&b);
        assert_eq!(
            (u.tokens, u.source, u.learned_from),
            (20_000, UnseenSource::Learned, 3)
        );
        reply(&mut b, "working", first_count + 25_000);
        b.user("more");
        b.push(summary());
        b.user("go on");
        let u = unseen(&b);
        assert_eq!(
            u.source,
            UnseenSource::Session,
            "the session's own gap is larger"
        );
        let start_gap = b.session.start_gap_at(b.session.leaf()).unwrap();
        assert_eq!(u.tokens, start_gap);
        assert!((24_000..=25_000).contains(&start_gap), "{start_gap}");
        let after_count = b.session.tally().breakdown().total();
        reply(&mut b, "continuing", after_count + 31_000);
        let seen = b.session.unseen_observations();
        assert_eq!(seen.start, Some(start_gap));
        let after = seen.after_agent_compaction.unwrap();
        assert!((30_000..=31_000).contains(&after), "{after}");
    }

    /// Claude Code attaches up to 5 of the files it read or edited again after its compaction,
    /// none recorded: the first request after it allows for the session's own start gap plus
    /// 5000 tokens a file, above the fixed after-compaction figure when that is lower.
    #[test]
    fn after_claude_codes_compaction_the_files_it_attaches_again_are_allowed_for() {
        let after_compaction = |files: usize| {
            let mut b = claude_code();
            b.user("start");
            let first_count = b.session.tally().breakdown().total();
            reply(&mut b, "working", first_count + 45_000);
            for n in 0..files {
                // Each file twice: a file counts once.
                for k in 0..2 {
                    let id = format!("r{n}-{k}");
                    b.call(
                        &id,
                        "Read",
                        serde_json::json!({"file_path": format!("/w/f{n}.rs")}),
                    );
                    b.result(&id, "fn main() {}");
                }
            }
            b.bash("c", "cargo test");
            b.result("c", "ok");
            b.push(summary());
            b.user("go on");
            let start_gap = b.session.start_gap_at(b.session.leaf()).unwrap();
            (unseen(&b), start_gap)
        };
        let default_after = Agent::ClaudeCode
            .default_unseen(Fresh::AfterAgentCompaction)
            .unwrap();
        // Two files: 45k + 10k is above the default after a compaction.
        let (u, gap) = after_compaction(2);
        assert_eq!(u.tokens, gap + 10_000);
        assert_eq!(
            (u.source, u.restored_files),
            (UnseenSource::Session, 10_000)
        );
        assert!(u.tokens > default_after);
        assert!(
            u.describe().unwrap().ends_with(
                "with ~10.0k for the files Claude Code attaches again after its compaction"
            ),
            "{:?}",
            u.describe()
        );
        // Nine files: at most five are attached again.
        assert_eq!(after_compaction(9).0.tokens, gap + 25_000);
        // None: what was measured after compactions stands.
        let (none, _) = after_compaction(0);
        assert_eq!(none.restored_files, 0);
        assert_eq!(none.tokens, gap.max(default_after));
    }

    #[test]
    fn a_replay_measures_the_log_alone() {
        let mut b = claude_code();
        b.user("start");
        b.session.set_allow_for_unseen(false);
        assert_eq!(unseen(&b), crate::budget::unseen_allowance::Unseen::NONE);
        b.session.set_allow_for_unseen(true);
        assert_eq!(unseen(&b).kind, UnseenKind::Context);
    }

    #[test]
    fn a_session_with_no_report_teaches_nothing() {
        let mut b = claude_code();
        b.user("start");
        assert!(b.session.unseen_observations().is_empty());
    }

    #[test]
    fn anchored_requests_allow_for_the_growth_the_sessions_reports_showed() {
        let mut b = claude_code();
        b.user("start");
        let mut prompt = 20_000;
        reply(&mut b, "first", prompt);
        for n in 0..6 {
            let leaf = b.session.leaf().unwrap();
            b.bash(&format!("c{n}"), "ls");
            b.result(&format!("c{n}"), "ok");
            let at = b.session.leaf().unwrap();
            let tail: u64 = b
                .session
                .branch(at)
                .into_iter()
                .filter(|&i| i > leaf)
                .map(|i| b.session.tokens_of(i))
                .sum();
            // Each report bills 250 tokens the log never shows (a reminder on every result):
            // on tails this short no count factor can stand for them.
            prompt += 10 + tail + 250;
            reply(&mut b, "next", prompt);
        }
        b.user("and now?");
        let g = unseen(&b);
        assert_eq!(
            (g.kind, g.source),
            (UnseenKind::Growth, UnseenSource::Session)
        );
        assert_eq!(g.tokens, 250);
    }
}
