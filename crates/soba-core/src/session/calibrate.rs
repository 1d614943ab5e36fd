//! The count factor a session learns from its own usage reports: each report set against
//! SOBA's count of the content it measured (see [`Calibration::learned`] for the rule).

use super::entry::{EntryBody, Role};
use super::view::ModelView;
use super::Session;
use crate::budget::{Calibration, CountSample, LEARN_FROM_REPORTS};

impl Session {
    /// How counted tokens become the budget's estimate at the leaf (see
    /// [`Session::calibration_at`]).
    pub fn calibration(&self) -> Calibration {
        *self
            .calibration
            .get_or_init(|| self.calibration_at(self.leaf()))
    }

    /// How counted tokens become the budget's estimate of the input at `leaf`: the tokenizer,
    /// and the model's factor raised to what the newest usage reports on the branch show
    /// ([`Calibration::learned`]). Learned from the log alone, so a session reopened from its
    /// log gives the same figure it gave before.
    pub fn calibration_at(&self, leaf: Option<usize>) -> Calibration {
        let (factor, source) = self.count_factor;
        let configured = Calibration {
            tokenizer: self.tokenizer,
            factor,
            source,
        };
        Calibration::learned(configured, &self.count_samples_at(leaf))
    }

    /// The samples of the newest [`LEARN_FROM_REPORTS`] usage reports on the branch ending at
    /// `leaf`, newest first (reports that teach nothing give none). Jumps from report to
    /// report and stops after that many, taught or not: the cost is a few reports', never the
    /// branch's, even where no report teaches.
    pub fn count_samples_at(&self, leaf: Option<usize>) -> Vec<CountSample> {
        self.newest_samples_at(leaf, LEARN_FROM_REPORTS)
    }

    /// The samples of the newest `reports` usage reports on the branch ending at `leaf`, newest
    /// first (see [`Session::count_samples_at`]).
    pub fn newest_samples_at(&self, leaf: Option<usize>, reports: usize) -> Vec<CountSample> {
        let mut out = Vec::with_capacity(reports);
        let mut cur = leaf.and_then(|i| self.usage_on_path.at(i));
        for _ in 0..reports {
            let Some(u) = cur else { break };
            let u = u as usize;
            out.extend(self.count_sample(u));
            cur = self.parent_of(u).and_then(|p| self.usage_on_path.at(p));
        }
        out
    }

    /// The usage report of entry `idx` set against SOBA's count of the same content, measured
    /// once: the request that produced the response held the input at the response's start;
    /// the budget there stood on an earlier report plus a counted tail; the provider's count
    /// of that tail is what the new report adds to the earlier one. `None` where the two do
    /// not measure the same content: no earlier report (the provider counts a system prompt
    /// and tool schemas a log may not hold), the source agent's own compaction in between when
    /// the view keeps the whole history (the agent sent another context), a setting in between
    /// (the system prompt or tools changed), or a report below the earlier one.
    pub fn count_sample(&self, idx: usize) -> Option<CountSample> {
        let cell = self.count_samples.get(&(idx as u32))?;
        *cell.get_or_init(|| {
            // Read without keeping the entry parsed: a budget samples the newest reports of a
            // history it otherwise holds as lines.
            let usage = self.entries.with(idx, |e| match &e.body {
                EntryBody::Message(m) if m.role == Role::Assistant => m.usage,
                _ => None,
            })?;
            let request_leaf = self.parent_of(self.response_start(idx))?;
            let view = ModelView::build(self, Some(request_leaf));
            // A view that starts from the agent's own compaction measures from usage after it;
            // one that keeps the whole history cannot set that usage against its count.
            if view.usage_ignored_from(self).is_some() {
                return None;
            }
            let (at, anchor) = view.usage_anchor_at(self)?;
            if self
                .setting_on_path
                .at(request_leaf)
                .is_some_and(|s| s as usize > at)
            {
                return None;
            }
            let provider = usage
                .prompt_tokens()
                .checked_sub(anchor.usage.context_tokens())?;
            (anchor.usage.context_tokens() > 0).then_some(CountSample {
                provider,
                counted: anchor.tokens_after,
            })
        })
    }

    /// The first entry of the response that ends at `idx`: its run of assistant entries without
    /// usage of their own (a response logged as one entry per block or per call), and the
    /// bookkeeping entries between them.
    pub fn response_start(&self, idx: usize) -> usize {
        let mut start = idx;
        while let Some(p) = self.parent_of(start) {
            let part_of_response = self.entries.with(p, |e| match &e.body {
                EntryBody::Message(m) => m.role == Role::Assistant && m.usage.is_none(),
                EntryBody::ToolResult(_) => false,
                // The agent compacted before this response: the request held the compacted context.
                EntryBody::ForeignCompaction(f) => !f.replaces_context(),
                // Bookkeeping entries between the blocks of one response.
                _ => true,
            });
            if !part_of_response {
                break;
            }
            start = p;
        }
        start
    }
}

#[cfg(test)]
mod tests {
    use crate::budget::Budget;
    use crate::limits::CompactionConfig;
    use crate::limits::Limits;
    use crate::session::entry::*;
    use crate::session::testing::Builder;
    use crate::tokens::CalibrationSource;
    use crate::tokens::TokenizerKind;
    use crate::tokens::MAX_LEARNED_FACTOR;

    fn reply(b: &mut Builder, text: &str, prompt: u64) -> String {
        b.push(EntryBody::Message(MessageEntry {
            role: Role::Assistant,
            content: vec![ContentBlock::text(text)],
            usage: Some(Usage {
                input: prompt,
                output: 100,
                ..Usage::default()
            }),
            model: None,
            synthetic: false,
        }))
    }

    fn words(n: usize) -> String {
        (0..n).map(|i| format!("w{i} ")).collect()
    }

    #[test]
    fn a_configured_count_factor_is_the_sessions_until_reports_show_more() {
        let text = r#"{"model":{"name":"deepseek-chat","countFactor":1.05}}"#;
        let file = crate::config::ConfigFile::parse("test", text).unwrap();
        let config =
            crate::config::Config::resolve(&[file], None, &crate::config::Overrides::default())
                .unwrap();
        let mut b = Builder::new();
        b.session.configure_counting(&config.model);
        assert_eq!(b.session.calibration().factor, 1.05);
        assert_eq!(b.session.calibration().source, CalibrationSource::Config);
    }

    /// A Claude session: the catalog's 1.15 until a report shows the tail billed higher.
    fn claude() -> Builder {
        let mut b = Builder::new();
        b.session.set_count_factor(1.15, CalibrationSource::Catalog);
        b
    }

    /// One tool round after the report at `prompt`: a call, its result of `n` words, and the
    /// next report, which bills the tokens after the first one at `ratio` × SOBA's count.
    fn round(b: &mut Builder, call: &str, n: usize, prompt: u64, ratio: f64) -> u64 {
        let leaf = b.session.leaf();
        b.bash(call, "ls");
        b.result(call, &words(n));
        let at = b.session.leaf();
        let tail = b.session.count_tail(leaf, at);
        let next = prompt + 100 + (tail as f64 * ratio).round() as u64;
        reply(b, "done", next);
        next
    }

    impl crate::session::Session {
        /// SOBA's count of the entries after `from` up to `to` (inclusive), the tail a report at
        /// `from` leaves for the next request.
        fn count_tail(&self, from: Option<usize>, to: Option<usize>) -> u64 {
            let (from, to) = (from.unwrap(), to.unwrap());
            self.branch(to)
                .into_iter()
                .filter(|&i| i > from)
                .map(|i| self.tokens_of(i))
                .sum()
        }
    }

    #[test]
    fn a_report_above_the_factor_raises_it_for_the_next_tail() {
        let mut b = claude();
        b.user("start");
        reply(&mut b, "first", 5_000);
        assert_eq!(
            b.session.calibration().source,
            CalibrationSource::Provisional
        );
        let prompt = round(&mut b, "c1", 400, 5_000, 1.3);
        let c = b.session.calibration();
        assert_eq!(c.source, CalibrationSource::Session);
        assert!((c.factor - 1.3).abs() < 0.01, "learned {}", c.factor);
        // The budget scales the tail after the newest report by it, not the report itself.
        b.bash("c2", "ls");
        b.result("c2", &words(300));
        let tally = b.session.tally();
        let anchor = tally.usage_anchor().unwrap();
        let limits = Limits::compute(200_000, 8_000, &CompactionConfig::default()).unwrap();
        let budget = Budget::measure(
            limits,
            tally.breakdown(),
            Some(anchor),
            c,
            crate::budget::unseen_allowance::Unseen::NONE,
        );
        assert_eq!(anchor.usage.context_tokens(), prompt + 100);
        assert_eq!(
            budget.effective_tokens,
            prompt + 100 + (anchor.tokens_after as f64 * c.factor).ceil() as u64
        );
    }

    #[test]
    fn reports_at_or_below_the_factor_leave_it_and_the_highest_of_the_newest_wins() {
        let mut b = claude();
        b.user("start");
        reply(&mut b, "first", 5_000);
        let mut prompt = round(&mut b, "c1", 400, 5_000, 1.05);
        assert_eq!(b.session.calibration().factor, 1.15, "never lowered");
        assert_eq!(b.session.calibration().source, CalibrationSource::Catalog);
        prompt = round(&mut b, "c2", 400, prompt, 1.4);
        prompt = round(&mut b, "c3", 400, prompt, 1.2);
        let c = b.session.calibration();
        assert!((c.factor - 1.4).abs() < 0.01, "the highest: {}", c.factor);
        // Eight reports later the 1.4 is out of the window.
        for n in 0..crate::budget::LEARN_FROM_REPORTS {
            prompt = round(&mut b, &format!("d{n}"), 400, prompt, 1.2);
        }
        let c = b.session.calibration();
        assert!(
            (c.factor - 1.2).abs() < 0.01,
            "follows the newest: {}",
            c.factor
        );
    }

    #[test]
    fn a_provider_count_far_above_the_log_is_capped() {
        let mut b = claude();
        b.user("start");
        reply(&mut b, "first", 5_000);
        round(&mut b, "c1", 400, 5_000, 4.0);
        assert_eq!(b.session.calibration().factor, MAX_LEARNED_FACTOR);
    }

    #[test]
    fn nothing_is_learned_from_short_tails_a_first_report_or_across_a_setting() {
        let mut b = claude();
        b.user(&words(2_000));
        // The first report: no earlier one, and the log may lack the system prompt it counted.
        reply(&mut b, "first", 40_000);
        assert_eq!(
            b.session.calibration().source,
            CalibrationSource::Provisional
        );
        // A tail of a few tokens: framing, not text, decides its ratio.
        let prompt = round(&mut b, "c1", 1, 40_000, 3.0);
        assert!(b.session.count_sample(b.session.leaf().unwrap()).is_some());
        assert_eq!(
            b.session.calibration().source,
            CalibrationSource::Provisional
        );
        // A new system prompt between two reports: the provider's growth is not the tail's.
        b.push(EntryBody::Setting(SettingEntry {
            system_prompt: Some(words(50)),
            ..SettingEntry::default()
        }));
        round(&mut b, "c2", 400, prompt, 1.5);
        assert_eq!(b.session.count_sample(b.session.leaf().unwrap()), None);
        assert_eq!(
            b.session.calibration().source,
            CalibrationSource::Provisional
        );
    }

    #[test]
    fn only_the_newest_reports_count_whether_they_teach_or_not() {
        let mut b = claude();
        b.user("start");
        reply(&mut b, "first", 5_000);
        let mut prompt = round(&mut b, "c1", 400, 5_000, 1.5);
        assert_eq!(b.session.calibration().source, CalibrationSource::Session);
        for n in 0..crate::budget::LEARN_FROM_REPORTS {
            b.push(EntryBody::Setting(SettingEntry {
                system_prompt: Some(words(n)),
                ..SettingEntry::default()
            }));
            prompt = round(&mut b, &format!("s{n}"), 400, prompt, 1.0);
        }
        assert!(b.session.count_samples_at(b.session.leaf()).is_empty());
        assert_eq!(
            b.session.calibration().source,
            CalibrationSource::Provisional,
            "the 1.5 is older than the newest reports"
        );
    }

    #[test]
    fn a_response_logged_as_several_entries_is_measured_from_its_first() {
        let mut b = claude();
        b.user("start");
        reply(&mut b, "first", 5_000);
        b.bash("c1", "ls");
        b.result("c1", &words(400));
        let before = b.session.leaf();
        let tail = b
            .session
            .count_tail(Some(b.session.index_of("e2").unwrap()), before);
        // Two call entries of one response; the usage on the second.
        b.bash("c2", "pwd");
        b.push(EntryBody::Message(MessageEntry {
            role: Role::Assistant,
            content: vec![ContentBlock::text("and")],
            usage: Some(Usage {
                input: 5_100 + (tail as f64 * 1.3) as u64,
                ..Usage::default()
            }),
            model: None,
            synthetic: false,
        }));
        let sample = b.session.count_sample(b.session.leaf().unwrap()).unwrap();
        assert_eq!(
            sample.counted, tail,
            "the request ended before the response began"
        );
        assert!((b.session.calibration().factor - 1.3).abs() < 0.01);
    }

    #[test]
    fn the_factor_belongs_to_the_branch() {
        let mut b = claude();
        b.user("start");
        reply(&mut b, "first", 5_000);
        let fork = b.session.leaf_id().unwrap().to_string();
        round(&mut b, "c1", 400, 5_000, 1.4);
        assert_eq!(b.session.calibration().source, CalibrationSource::Session);
        b.push(EntryBody::Rewind(RewindEntry { to: fork }));
        assert_eq!(
            b.session.calibration().source,
            CalibrationSource::Provisional,
            "the report that taught it is not on this branch"
        );
    }

    #[test]
    fn a_new_tokenizer_measures_again() {
        let mut b = claude();
        b.user("start");
        reply(&mut b, "first", 5_000);
        round(&mut b, "c1", 400, 5_000, 1.3);
        let leaf = b.session.leaf().unwrap();
        let o200k = b.session.count_sample(leaf).unwrap();
        b.session.set_tokenizer(TokenizerKind::Cl100kBase);
        let cl100k = b.session.count_sample(leaf).unwrap();
        assert_eq!(o200k.provider, cl100k.provider);
        assert_eq!(
            cl100k.counted,
            b.session
                .count_tail(b.session.index_of("e2"), Some(leaf - 1))
        );
    }
}
