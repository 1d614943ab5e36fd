//! Allowances for what a provider counts that the log never holds. Pure: no I/O.
//!
//! Transcripts of coding agents leave out the system prompt and the tool schemas, so a request
//! with no earlier usage report to stand on (the first of a session, the first after the agent
//! compacted its own context) counts a few percent of what the provider bills. Until the
//! session's own usage anchors the budget, an **unseen-context allowance** stands in for that
//! part: what earlier sessions of the same agent and model on this machine showed, or a default
//! measured on real transcripts of the agent. Once anchored, an **unseen-growth allowance**
//! covers what the agent adds between reports without recording it (reminders inside tool
//! results, hook output): a high percentile of what the session's reports grew beyond SOBA's
//! count of the same tail.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The agents whose transcripts SOBA imports and follows, named as a session header's
/// `source.format` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Agent {
    ClaudeCode,
    Codex,
    Pi,
    OpenaiChat,
    SweAgent,
    Aider,
    CopilotCli,
}

impl Agent {
    pub const ALL: [Agent; 7] = [
        Agent::ClaudeCode,
        Agent::Codex,
        Agent::Pi,
        Agent::OpenaiChat,
        Agent::SweAgent,
        Agent::Aider,
        Agent::CopilotCli,
    ];

    /// The agent of a header's `source.format`.
    pub fn from_format(format: &str) -> Option<Agent> {
        Agent::ALL.into_iter().find(|a| a.as_str() == format)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
            Agent::Pi => "pi",
            Agent::OpenaiChat => "openai-chat",
            Agent::SweAgent => "swe-agent",
            Agent::Aider => "aider",
            Agent::CopilotCli => "copilot-cli",
        }
    }

    /// What the agent sends again after its own compaction without recording it: the files it
    /// read or edited most recently, each up to a size. Claude Code attaches up to 5 of them,
    /// at most 5000 tokens each, read from disk as they are then (so the transcript's partial
    /// reads say nothing of their size). `None` for the agents that re-send no file.
    pub fn restores_files_after_compaction(self) -> Option<RestoredFiles> {
        match self {
            Agent::ClaudeCode => Some(RestoredFiles {
                max_files: 5,
                tokens_per_file: 5_000,
            }),
            _ => None,
        }
    }

    /// The agent's name in product text.
    pub fn display_name(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "Claude Code",
            Agent::Codex => "Codex",
            Agent::Pi => "pi",
            Agent::OpenaiChat => "OpenAI chat",
            Agent::SweAgent => "SWE-agent",
            Agent::Aider => "Aider",
            Agent::CopilotCli => "Copilot CLI",
        }
    }

    /// What a request of this agent holds beyond its transcript when nothing has been learned
    /// on this machine: the largest gap between the first reported usage and SOBA's count of
    /// the transcript over the real sessions of `../shared/fixtures/transcripts`, rounded up to
    /// the next 500 tokens (`docs/performance.md` lists each one). After the agent's own
    /// compaction the request holds more than at the start: Claude Code attaches the files it
    /// read again, Codex and pi their own framing of the summary. `None` for the agents no
    /// real transcript measured: a guess would be as likely low as absurdly high.
    pub fn default_unseen(self, fresh: Fresh) -> Option<u64> {
        match (self, fresh) {
            // Gaps of 14.6k, 17.6k, 30.8k and 40.0k at the start (the system prompt and tools
            // grow with the version and the MCP servers); 43.8k and 51.7k after a compaction.
            (Agent::ClaudeCode, Fresh::Start) => Some(40_500),
            (Agent::ClaudeCode, Fresh::AfterAgentCompaction) => Some(52_000),
            // 2.6k and 5.3k at the start; 5.8k and 6.1k after a compaction.
            (Agent::Codex, Fresh::Start) => Some(5_500),
            (Agent::Codex, Fresh::AfterAgentCompaction) => Some(6_500),
            // 1.6k and 2.6k at the start; 3.3k and 2.6k after a compaction.
            (Agent::Pi, Fresh::Start) => Some(3_000),
            (Agent::Pi, Fresh::AfterAgentCompaction) => Some(3_500),
            // The trajectory records the system message: 115 tokens of request framing remain.
            (Agent::OpenaiChat, _) => Some(500),
            (Agent::SweAgent | Agent::Aider | Agent::CopilotCli, _) => None,
        }
    }
}

/// The files an agent attaches again after its own compaction (see
/// [`Agent::restores_files_after_compaction`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoredFiles {
    pub max_files: usize,
    pub tokens_per_file: u64,
}

/// Which request lacks a usage report to stand on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Fresh {
    /// The first request of the session (or the first after a SOBA capsule).
    Start,
    /// The first request after the agent compacted its own context.
    AfterAgentCompaction,
}

/// What earlier sessions of one agent and model on this machine showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Learned {
    pub tokens: u64,
    /// How many sessions showed a gap of this kind.
    pub sessions: u32,
}

/// Learning keeps the newest gaps of this many sessions: enough to see an agent's usual
/// set-ups (with and without its MCP servers), few enough that an upgrade's larger or smaller
/// system prompt replaces the old figure within a day or two of work.
pub const LEARN_FROM_SESSIONS: usize = 8;

/// A gap more than this many times the usual gap of its agent and model is an outlier, left out
/// of what is learned: Claude Code's own set-ups span 2.7× (14.6k without MCP servers, 40.0k
/// with them), while a session measured against a log that lost messages (an importer that
/// dropped what the agent kept after its compaction) shows 10× its agent's gap. One such
/// session must not make every later first request read that high.
pub const OUTLIER_FACTOR: u64 = 3;

/// Gaps this small are never outliers, however small the usual gap: a usual gap of a few
/// hundred tokens (or none) says nothing about whether 1.5k is far from it.
pub const OUTLIER_FLOOR: u64 = 1_000;

impl Learned {
    /// The largest of the newest [`LEARN_FROM_SESSIONS`] gaps (`newest_last`, oldest first), so
    /// a first request errs high rather than low, with **outliers left out**: a gap above
    /// [`OUTLIER_FACTOR`] × the usual gap, where the usual gap is the median of those newest
    /// gaps and the agent's `default` (its measured default, a vote that stands for the
    /// sessions of other machines; the lower middle of an even count). With the default among
    /// the votes, the first session a machine learns from cannot move the allowance beyond 3×
    /// the default on its own; a set-up that really grew (an upgrade, a new MCP server) is
    /// taken as soon as the sessions showing it hold the median (the second such session on a
    /// machine that learned nothing else; the larger half of the newest sessions on one that
    /// learned the smaller set-up). Only high gaps are left out: a low one
    /// never raises the largest. `sessions` counts every gap given but the outliers; `None`
    /// when no gap is left.
    pub fn from_gaps(newest_last: &[u64], default: Option<u64>) -> Option<Learned> {
        let recent = &newest_last[newest_last.len().saturating_sub(LEARN_FROM_SESSIONS)..];
        let mut votes: Vec<u64> = recent.iter().copied().chain(default).collect();
        votes.sort_unstable();
        let usual = *votes.get(votes.len().checked_sub(1)? / 2)?;
        let ceiling = usual.max(OUTLIER_FLOOR).saturating_mul(OUTLIER_FACTOR);
        let kept = || recent.iter().copied().filter(|&gap| gap <= ceiling);
        let outliers = recent.len() - kept().count();
        Some(Learned {
            tokens: kept().max()?,
            sessions: (newest_last.len() - outliers).min(u32::MAX as usize) as u32,
        })
    }
}

/// What a session assumes about its agent's unseen context before its own reports say: the
/// agent, and what this machine learned for it and the session's model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UnseenPrior {
    pub agent: Option<Agent>,
    pub start: Option<Learned>,
    pub after_agent_compaction: Option<Learned>,
}

impl UnseenPrior {
    /// Nothing learned: the agent's defaults.
    pub fn defaults(agent: Option<Agent>) -> UnseenPrior {
        UnseenPrior {
            agent,
            ..UnseenPrior::default()
        }
    }

    fn learned(&self, fresh: Fresh) -> Option<Learned> {
        match fresh {
            Fresh::Start => self.start,
            Fresh::AfterAgentCompaction => self.after_agent_compaction,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UnseenKind {
    /// No allowance: the log holds what the provider counts, as far as anything shows.
    #[default]
    None,
    /// The system prompt, tool schemas and whatever else the agent sends that its transcript
    /// never records, before the session's own usage anchors the budget.
    Context,
    /// What the agent adds between usage reports without recording it, over an anchored
    /// budget.
    Growth,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum UnseenSource {
    #[default]
    None,
    /// This session's own usage reports.
    Session,
    /// Earlier sessions of the same agent and model on this machine.
    Learned,
    /// The agent's default, measured on real transcripts.
    Default,
}

/// Tokens added to the budget for what the provider counts beyond the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Unseen {
    pub tokens: u64,
    pub kind: UnseenKind,
    pub source: UnseenSource,
    /// With `source: learned`: how many earlier sessions taught it.
    pub learned_from: u32,
    /// The agent whose requests it stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<Agent>,
    /// Of `tokens`, what stands for the files the agent attaches again after its own
    /// compaction (at most its per-file size for each file it read or edited before).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restored_files: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The percentile of a session's unexplained growth the growth allowance covers: the jumps an
/// agent makes again and again (a reminder on every tool result) sit below it; a one-off (a
/// resume that rebuilt the cache, an image attached by path) above it, where no allowance
/// learned from the past could reach without reading high on every request.
pub const GROWTH_PERCENTILE: f64 = 0.9;

/// The newest usage reports the growth allowance is learned from.
pub const LEARN_GROWTH_FROM_REPORTS: usize = 32;

/// The growth allowance never exceeds this share of the anchored usage. The allowance adds to
/// every request's figure; beyond a few percent it would move the budget toward the soft limit
/// (and trigger compactions) on content the session may never send again.
pub const MAX_GROWTH_SHARE: f64 = 0.05;

impl Unseen {
    pub const NONE: Unseen = Unseen {
        tokens: 0,
        kind: UnseenKind::None,
        source: UnseenSource::None,
        learned_from: 0,
        agent: None,
        restored_files: 0,
    };

    /// The unseen-context allowance of a request with no usage report to stand on.
    /// `own_start_gap` is what this session's first report showed beyond its counted log: the
    /// same system prompt and tools, so at a start (after a SOBA capsule) it wins over anything
    /// learned elsewhere. After the agent's own compaction the request may hold more than at
    /// the start (files the agent attaches again), so the larger of the two is taken.
    pub fn context(prior: &UnseenPrior, fresh: Fresh, own_start_gap: Option<u64>) -> Unseen {
        let elsewhere = match (prior.learned(fresh), prior.agent) {
            (Some(l), agent) => Some((l.tokens, UnseenSource::Learned, l.sessions, agent)),
            (None, Some(agent)) => agent
                .default_unseen(fresh)
                .map(|t| (t, UnseenSource::Default, 0, Some(agent))),
            (None, None) => None,
        };
        let own = own_start_gap.map(|t| (t, UnseenSource::Session, 0, prior.agent));
        let chosen = match (fresh, own, elsewhere) {
            (Fresh::Start, Some(own), _) => Some(own),
            (Fresh::AfterAgentCompaction, Some(own), Some(other)) => {
                Some(if own.0 >= other.0 { own } else { other })
            }
            (_, own, other) => own.or(other),
        };
        match chosen {
            Some((tokens, source, learned_from, agent)) if tokens > 0 => Unseen {
                tokens,
                kind: UnseenKind::Context,
                source,
                learned_from,
                agent,
                restored_files: 0,
            },
            _ => Unseen::NONE,
        }
    }

    /// The unseen-context allowance of the first request after the agent's own compaction
    /// that attaches `files` files again (see [`Agent::restores_files_after_compaction`]): what
    /// the request holds at a start (the session's own first report, else what is learned or
    /// the default) plus those files at their most, or what earlier compactions showed
    /// ([`Unseen::context`] after a compaction), whichever is larger. A fixed figure for
    /// after a compaction reads low wherever the agent restored more than the sessions it was
    /// measured on.
    pub fn after_agent_compaction(
        prior: &UnseenPrior,
        own_start_gap: Option<u64>,
        files: usize,
    ) -> Unseen {
        let measured = Unseen::context(prior, Fresh::AfterAgentCompaction, own_start_gap);
        let Some(restore) = prior.agent.and_then(Agent::restores_files_after_compaction) else {
            return measured;
        };
        let restored = files.min(restore.max_files) as u64 * restore.tokens_per_file;
        let start = Unseen::context(prior, Fresh::Start, own_start_gap);
        if start.kind == UnseenKind::None || start.tokens + restored <= measured.tokens {
            return measured;
        }
        Unseen {
            tokens: start.tokens + restored,
            restored_files: restored,
            ..start
        }
    }

    /// The unseen-growth allowance over an anchored budget: the [`GROWTH_PERCENTILE`] of what
    /// the session's newest reports grew beyond SOBA's (calibrated) count of their tails
    /// (`residuals`, negative where the count was higher), capped at [`MAX_GROWTH_SHARE`] of the
    /// anchored usage.
    pub fn growth(residuals: &[i64], anchor_context: u64, agent: Option<Agent>) -> Unseen {
        let mut sorted = residuals.to_vec();
        if sorted.is_empty() {
            return Unseen::NONE;
        }
        sorted.sort_unstable();
        // Rounded down: among ten reports a single one-off jump is left out, not taken.
        let at = ((sorted.len() - 1) as f64 * GROWTH_PERCENTILE).floor() as usize;
        let cap = (anchor_context as f64 * MAX_GROWTH_SHARE).floor() as u64;
        let tokens = u64::try_from(sorted[at]).unwrap_or(0).min(cap);
        if tokens == 0 {
            return Unseen::NONE;
        }
        Unseen {
            tokens,
            kind: UnseenKind::Growth,
            source: UnseenSource::Session,
            learned_from: 0,
            agent,
            restored_files: 0,
        }
    }

    /// The allowance as a part of the budget's breakdown, in words, or `None` when there is
    /// none: `not in the log: ~39.9k, learned from 12 Claude Code sessions`.
    pub fn describe(&self) -> Option<String> {
        let agent = self.agent.map_or("the agent", Agent::display_name);
        let why = match (self.kind, self.source) {
            (UnseenKind::None, _) | (_, UnseenSource::None) => return None,
            (UnseenKind::Growth, _) => {
                "the growth this session's usage reports showed beyond the log".to_string()
            }
            (UnseenKind::Context, UnseenSource::Session) => {
                "what this session's first usage report showed beyond the log".to_string()
            }
            (UnseenKind::Context, UnseenSource::Learned) => format!(
                "learned from {} {agent} session{}",
                self.learned_from,
                if self.learned_from == 1 { "" } else { "s" }
            ),
            (UnseenKind::Context, UnseenSource::Default) => format!("default for {agent}"),
        };
        let restored = match self.restored_files {
            0 => String::new(),
            n => format!(
                ", with ~{} for the files {agent} attaches again after its compaction",
                crate::util::human_tokens(n)
            ),
        };
        Some(format!(
            "not in the log: ~{}, {why}{restored}",
            crate::util::human_tokens(self.tokens)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn learned(tokens: u64, sessions: u32) -> Option<Learned> {
        Some(Learned { tokens, sessions })
    }

    #[test]
    fn agents_are_named_as_session_headers_name_them() {
        for a in Agent::ALL {
            assert_eq!(Agent::from_format(a.as_str()), Some(a));
            let json = serde_json::to_value(a).unwrap();
            assert_eq!(json, a.as_str());
        }
        assert_eq!(Agent::from_format("vim"), None);
    }

    #[test]
    fn with_nothing_learned_a_first_request_gets_the_agents_default() {
        let u = Unseen::context(
            &UnseenPrior::defaults(Some(Agent::ClaudeCode)),
            Fresh::Start,
            None,
        );
        assert_eq!(u.tokens, 40_500);
        assert_eq!(
            (u.kind, u.source),
            (UnseenKind::Context, UnseenSource::Default)
        );
        assert_eq!(
            u.describe().unwrap(),
            "not in the log: ~40.5k, default for Claude Code"
        );
        let after = Unseen::context(
            &UnseenPrior::defaults(Some(Agent::ClaudeCode)),
            Fresh::AfterAgentCompaction,
            None,
        );
        assert_eq!(after.tokens, 52_000);
        // An agent no transcript measured, and a session of no known agent, get none.
        for agent in [Some(Agent::Aider), None] {
            let u = Unseen::context(&UnseenPrior::defaults(agent), Fresh::Start, None);
            assert_eq!(u, Unseen::NONE);
            assert_eq!(u.describe(), None);
        }
    }

    #[test]
    fn what_this_machine_learned_replaces_the_default_lower_or_higher() {
        for tokens in [18_000, 60_000] {
            let prior = UnseenPrior {
                agent: Some(Agent::ClaudeCode),
                start: learned(tokens, 12),
                after_agent_compaction: None,
            };
            let u = Unseen::context(&prior, Fresh::Start, None);
            assert_eq!(
                (u.tokens, u.source, u.learned_from),
                (tokens, UnseenSource::Learned, 12)
            );
            // Learned for the start says nothing about after a compaction: the default stays.
            let after = Unseen::context(&prior, Fresh::AfterAgentCompaction, None);
            assert_eq!(
                (after.tokens, after.source),
                (52_000, UnseenSource::Default)
            );
        }
        let prior = UnseenPrior {
            agent: Some(Agent::ClaudeCode),
            start: learned(39_900, 12),
            after_agent_compaction: None,
        };
        assert_eq!(
            Unseen::context(&prior, Fresh::Start, None)
                .describe()
                .unwrap(),
            "not in the log: ~39.9k, learned from 12 Claude Code sessions"
        );
        let one = UnseenPrior {
            start: learned(2_000, 1),
            ..prior
        };
        assert!(Unseen::context(&one, Fresh::Start, None)
            .describe()
            .unwrap()
            .ends_with("learned from 1 Claude Code session"));
    }

    #[test]
    fn the_sessions_own_first_report_wins_at_a_start_and_bounds_after_a_compaction() {
        let prior = UnseenPrior {
            agent: Some(Agent::Pi),
            start: learned(9_000, 3),
            after_agent_compaction: learned(4_000, 2),
        };
        let start = Unseen::context(&prior, Fresh::Start, Some(2_500));
        assert_eq!((start.tokens, start.source), (2_500, UnseenSource::Session));
        let after = Unseen::context(&prior, Fresh::AfterAgentCompaction, Some(2_500));
        assert_eq!((after.tokens, after.source), (4_000, UnseenSource::Learned));
        let after = Unseen::context(&prior, Fresh::AfterAgentCompaction, Some(7_000));
        assert_eq!((after.tokens, after.source), (7_000, UnseenSource::Session));
        // Where nothing else says anything, the session's own figure still counts.
        let bare = Unseen::context(
            &UnseenPrior::default(),
            Fresh::AfterAgentCompaction,
            Some(700),
        );
        assert_eq!((bare.tokens, bare.source), (700, UnseenSource::Session));
        assert_eq!(
            Unseen::context(&UnseenPrior::default(), Fresh::Start, Some(0)),
            Unseen::NONE
        );
    }

    #[test]
    fn after_a_compaction_the_start_plus_the_restored_files_wins_only_when_larger() {
        let prior = UnseenPrior::defaults(Some(Agent::ClaudeCode));
        // No session figure: the default start (40.5k) plus 3 files against the default after.
        let u = Unseen::after_agent_compaction(&prior, None, 3);
        assert_eq!(
            (u.tokens, u.source, u.restored_files),
            (40_500 + 15_000, UnseenSource::Default, 15_000)
        );
        // One file: 45.5k is below the default after a compaction (52k), which stands.
        let u = Unseen::after_agent_compaction(&prior, None, 1);
        assert_eq!((u.tokens, u.restored_files), (52_000, 0));
        // An agent that attaches nothing again: the after-compaction figure as ever.
        let pi = UnseenPrior::defaults(Some(Agent::Pi));
        assert_eq!(
            Unseen::after_agent_compaction(&pi, Some(2_000), 9),
            Unseen::context(&pi, Fresh::AfterAgentCompaction, Some(2_000))
        );
        assert_eq!(
            Unseen::after_agent_compaction(&UnseenPrior::default(), None, 5),
            Unseen::NONE
        );
    }

    #[test]
    fn learning_takes_the_largest_of_the_newest_sessions_and_counts_them_all() {
        assert_eq!(Learned::from_gaps(&[], None), None);
        assert_eq!(Learned::from_gaps(&[], Some(40_500)), None);
        let mut gaps = vec![90_000];
        gaps.extend([10_000; LEARN_FROM_SESSIONS]);
        gaps.push(12_000);
        assert_eq!(
            Learned::from_gaps(&gaps, None),
            learned(12_000, LEARN_FROM_SESSIONS as u32 + 2),
            "an old session's larger set-up falls out of the window"
        );
        // Claude Code's spread of set-ups (14.6k to 40.0k) is no outlier.
        assert_eq!(
            Learned::from_gaps(&[14_600, 40_000, 17_600], Some(40_500)),
            learned(40_000, 3)
        );
    }

    #[test]
    fn one_session_far_above_what_others_showed_does_not_move_what_is_learned() {
        // pi's usual gap is ~2.6k; one session measured 31.2k (a log that lost the messages pi
        // kept after its compaction).
        let usual = [2_600, 1_600, 2_600, 2_400];
        let mut with_outlier = usual.to_vec();
        with_outlier.push(31_200);
        assert_eq!(
            Learned::from_gaps(&with_outlier, Some(3_000)),
            learned(2_600, 4),
            "the outlier is left out and not counted"
        );
        // The first session a machine learns from is weighed against the agent's default.
        assert_eq!(Learned::from_gaps(&[31_200], Some(3_000)), None);
        assert_eq!(
            Learned::from_gaps(&[8_000], Some(3_000)),
            learned(8_000, 1),
            "within 3× the default"
        );
        // With no default, a lone session is all there is to go on.
        assert_eq!(Learned::from_gaps(&[31_200], None), learned(31_200, 1));
        // A set-up that really grew is taken once the sessions showing it are most of the
        // votes: at once on a machine that learned nothing else, …
        assert_eq!(
            Learned::from_gaps(&[31_000, 31_200], Some(3_000)),
            learned(31_200, 2)
        );
        // … after three more sessions on one that learned the smaller set-up.
        assert_eq!(
            Learned::from_gaps(&[2_600, 31_000, 31_200], Some(3_000)),
            learned(2_600, 1)
        );
        assert_eq!(
            Learned::from_gaps(&[2_600, 31_000, 31_200, 30_800], Some(3_000)),
            learned(31_200, 4)
        );
        // Small gaps are never outliers, however small the usual one.
        assert_eq!(
            Learned::from_gaps(&[0, 0, 0, 2_900], None),
            learned(2_900, 4)
        );
        assert_eq!(Learned::from_gaps(&[0, 0, 0, 3_100], None), learned(0, 3));
    }

    #[test]
    fn growth_covers_the_high_percentile_of_unexplained_growth_and_is_capped() {
        // Nine reports grew 40 tokens beyond the count, one by 3,000: the one-off is not
        // covered, the recurring growth is.
        let mut residuals = vec![40; 9];
        residuals.push(3_000);
        residuals.extend([-200, -10]);
        let g = Unseen::growth(&residuals, 100_000, Some(Agent::ClaudeCode));
        assert_eq!(
            (g.tokens, g.kind, g.source),
            (40, UnseenKind::Growth, UnseenSource::Session)
        );
        assert!(g
            .describe()
            .unwrap()
            .contains("growth this session's usage reports showed"));
        // Recurring large growth on a small context: capped at the share of the usage.
        let g = Unseen::growth(&[2_000; 10], 10_000, None);
        assert_eq!(g.tokens, (10_000.0 * MAX_GROWTH_SHARE) as u64);
        // One jump among ten reports is a one-off; two are a habit.
        let mut once = vec![30; 9];
        once.push(900);
        assert_eq!(Unseen::growth(&once, 100_000, None).tokens, 30);
        once[0] = 900;
        assert_eq!(Unseen::growth(&once, 100_000, None).tokens, 900);
        // Reports at or below the count, or none at all: nothing to add.
        assert_eq!(Unseen::growth(&[-5, 0, -1], 10_000, None), Unseen::NONE);
        assert_eq!(Unseen::growth(&[], 10_000, None), Unseen::NONE);
    }
}
