//! A host that drives the barrier the way an agent integration does, over a session log it
//! owns, and records what happens on a [`Timeline`]. `soba demo` and `soba replay` both run on
//! it; nothing here decides an outcome, the barrier does.

use crate::report::{Event, ForeignMark, Kept, Step, Timeline, TimelineCompaction};
use crate::summarize::summarizer::Summarizer;
use soba_core::compaction::plan::Plan;
use soba_core::compaction::run::generate_local;
use soba_core::compaction::run::{Barrier, Preflight};
use soba_core::compaction::CompactionResult;
use soba_core::config::Config;
use soba_core::session::capsule::render::render_for_model;
use soba_core::session::entry::{
    CheckpointKind, Entry, EntryBody, ForeignCompactionEntry, Role, Usage,
};
use soba_core::session::log::{LogError, SessionLog};
use soba_core::session::view::{ModelMessage, ModelView};
use soba_core::tool_mapping::ToolMapping;
use soba_core::util::new_id;

/// How many compactions one preflight may run before it settles. The barrier needs at most a
/// soft attempt and a hard-limit compaction; more means it is not converging.
const MAX_COMPACTIONS_PER_PREFLIGHT: usize = 4;

/// What a preflight ended with.
#[derive(Debug, Clone, PartialEq)]
pub enum Sent {
    /// This input went to the model.
    Input {
        messages: Vec<ModelMessage>,
        tokens: u64,
    },
    /// Nothing could be sent; the failure is on the timeline.
    Nothing(CompactionResult),
}

/// Receives each timeline event as it happens (a live printer, or nothing).
pub type Sink<'a> = Box<dyn FnMut(Event<'_>) + 'a>;

/// The barrier over the host's config and mapping, borrowing them apart from the log.
macro_rules! barrier {
    ($host:expr) => {
        Barrier {
            config: $host.config,
            mapping: &$host.mapping,
        }
    };
}

pub struct SimulatedHost<'a> {
    log: SessionLog,
    config: &'a Config,
    mapping: ToolMapping,
    timeline: Timeline,
    turn: usize,
    sink: Sink<'a>,
    writer: CapsuleWriter<'a>,
}

/// What writes the capsules: the local builder, or a configured model (with the local builder
/// as its fallback) run on a runtime of the host's own.
pub enum CapsuleWriter<'a> {
    Local,
    Model {
        summarizer: &'a dyn Summarizer,
        runtime: tokio::runtime::Runtime,
    },
}

impl<'a> CapsuleWriter<'a> {
    pub fn new(summarizer: Option<&'a dyn Summarizer>) -> std::io::Result<Self> {
        Ok(match summarizer {
            None => CapsuleWriter::Local,
            Some(summarizer) => CapsuleWriter::Model {
                summarizer,
                runtime: tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?,
            },
        })
    }

    /// For the timeline and the header: who writes the capsules.
    pub fn describe(&self) -> String {
        match self {
            CapsuleWriter::Local => {
                "built locally from the log (no summarization model configured)".into()
            }
            CapsuleWriter::Model { summarizer, .. } => {
                format!(
                    "written by {}, built locally when it fails",
                    summarizer.describe()
                )
            }
        }
    }

    fn generate(&self, plan: &Plan) -> crate::summarize::Generation {
        match self {
            CapsuleWriter::Local => crate::summarize::Generation {
                generated: generate_local(plan),
                corrections: Default::default(),
            },
            CapsuleWriter::Model {
                summarizer,
                runtime,
            } => runtime.block_on(crate::summarize::generate_checked(
                plan,
                Some(*summarizer),
                tokio_util::sync::CancellationToken::new(),
                &|_| {},
            )),
        }
    }
}

impl<'a> SimulatedHost<'a> {
    pub fn new(
        log: SessionLog,
        config: &'a Config,
        title: &str,
        writer: CapsuleWriter<'a>,
        sink: Sink<'a>,
    ) -> Self {
        let mut timeline = Timeline::new(
            title,
            &config.model.name,
            log.session().tokenizer().as_str(),
            config.limits(),
        );
        timeline.keep_recent_tokens = config.compaction.keep_recent_tokens;
        timeline.capsule_writer = writer.describe();
        SimulatedHost {
            log,
            mapping: config.tool_mapping.clone(),
            config,
            timeline,
            turn: 0,
            sink,
            writer,
        }
    }

    pub fn log(&self) -> &SessionLog {
        &self.log
    }

    pub fn timeline(&self) -> &Timeline {
        &self.timeline
    }

    pub fn turn(&self) -> usize {
        self.turn
    }

    /// Append an entry as the agent would; a real user prompt starts a new turn.
    pub fn append(&mut self, entry: Entry) -> Result<(), LogError> {
        if let EntryBody::Message(m) = &entry.body {
            if m.role == Role::User && !m.synthetic {
                self.turn += 1;
            }
        }
        self.log.append(entry)
    }

    /// Append a body as a child of the current leaf; returns its id.
    pub fn push(&mut self, body: EntryBody) -> Result<String, LogError> {
        let id = new_id("e_");
        let parent = self.log.session().leaf_id().map(str::to_string);
        self.append(Entry::new(id.clone(), parent, body))?;
        Ok(id)
    }

    /// Effective tokens of the input at the leaf, as the barrier measures them.
    pub fn effective_tokens(&self) -> u64 {
        let s = self.log.session();
        let view = ModelView::build(s, s.leaf());
        let (breakdown, anchor) = (view.breakdown(s), view.usage_anchor(s));
        soba_core::budget::Budget::measure(
            self.config.limits(),
            breakdown,
            anchor,
            s.calibration(),
            s.unseen_at(s.leaf(), anchor),
        )
        .effective_tokens
    }

    /// Put an outcome on the timeline and in the flight log beside the session log.
    fn record(&mut self, result: CompactionResult) -> CompactionResult {
        self.record_corrected(result, Default::default())
    }

    /// [`Self::record`] for an outcome whose model capsule had claims corrected from the facts.
    fn record_corrected(
        &mut self,
        result: CompactionResult,
        corrections: crate::summarize::response::Corrections,
    ) -> CompactionResult {
        if !result.operation_id.is_empty() {
            crate::flight::FlightLog::for_session_log(self.log.path()).record_corrected(
                &self.log.session().header.id,
                &result,
                corrections,
            );
        }
        let kept = self.kept(&result);
        let c = TimelineCompaction {
            step: self.timeline.steps.len(),
            turn: self.turn,
            result,
            kept,
        };
        (self.sink)(Event::Compaction(&c));
        let result = c.result.clone();
        self.timeline.compactions.push(c);
        result
    }

    /// What the capsule a completed compaction just appended keeps.
    fn kept(&self, result: &CompactionResult) -> Option<Kept> {
        let s = self.log.session();
        let leaf = s.leaf()?;
        let capsule = s.entry(leaf).as_capsule()?;
        if result.checkpoint_id.as_deref() != Some(capsule.checkpoint_id.as_str()) {
            return None;
        }
        Some(Kept {
            capsule_tokens: s.tokens_of(leaf),
            read_files: capsule.artifacts.read_files.len(),
            modified_files: capsule.artifacts.modified_files.len(),
            verifications: capsule.artifacts.verification.len(),
        })
    }

    /// Generate a plan's capsule and commit it, with `before_commit` run in between (new input
    /// may land while a summary is being written).
    pub fn run_plan_with(
        &mut self,
        plan: &Plan,
        before_commit: impl FnOnce(&mut Self) -> Result<(), LogError>,
    ) -> Result<CompactionResult, LogError> {
        let started = std::time::Instant::now();
        let generation = self.writer.generate(plan);
        before_commit(self)?;
        let mut result = soba_core::compaction::run::commit(
            &mut self.log,
            plan,
            generation.generated.clone(),
            false,
            started.elapsed().as_millis() as u64,
        )?;
        let corrections = generation.annotate(&mut result);
        Ok(self.record_corrected(result, corrections))
    }

    pub fn run_plan(&mut self, plan: &Plan) -> Result<CompactionResult, LogError> {
        self.run_plan_with(plan, |_| Ok(()))
    }

    /// The barrier before an inference: compact as it asks until input is ready or nothing can
    /// be sent. `source_agent_tokens` is what the source agent reported for this inference.
    pub fn preflight(&mut self, source_agent_tokens: Option<u64>) -> Result<Sent, LogError> {
        for _ in 0..MAX_COMPACTIONS_PER_PREFLIGHT {
            match barrier!(self).preflight(&mut self.log)? {
                Preflight::Compact(plan) => {
                    self.run_plan(&plan)?;
                }
                Preflight::Ready {
                    messages,
                    tokens,
                    skipped,
                } => {
                    if let Some(s) = skipped {
                        self.record(s);
                    }
                    let s = self.log.session();
                    let view = ModelView::build(s, s.leaf());
                    let (breakdown, anchor) = (view.breakdown(s), view.usage_anchor(s));
                    let budget = soba_core::budget::Budget::measure(
                        self.config.limits(),
                        breakdown,
                        anchor,
                        s.calibration(),
                        s.unseen_at(s.leaf(), anchor),
                    );
                    let step = Step {
                        index: self.timeline.steps.len(),
                        turn: self.turn,
                        effective_tokens: tokens,
                        source: budget.source,
                        messages: messages.len(),
                        source_agent_tokens,
                    };
                    (self.sink)(Event::Step(&step));
                    self.timeline.steps.push(step);
                    return Ok(Sent::Input { messages, tokens });
                }
                Preflight::Failed(r) => return Ok(Sent::Nothing(self.record(r))),
            }
        }
        let r = barrier!(self).ready_input(&self.log, None);
        match r {
            Preflight::Failed(r) => Ok(Sent::Nothing(self.record(r))),
            _ => panic!(
                "the barrier asked for more than {MAX_COMPACTIONS_PER_PREFLIGHT} compactions in one preflight"
            ),
        }
    }

    /// `/compact [instructions]`: plan, then `before_commit`, then commit.
    pub fn explicit_with(
        &mut self,
        instructions: Option<String>,
        before_commit: impl FnOnce(&mut Self) -> Result<(), LogError>,
    ) -> Result<CompactionResult, LogError> {
        match barrier!(self).explicit(&mut self.log, instructions)? {
            Ok(plan) => self.run_plan_with(&plan, before_commit),
            Err(ended) => Ok(self.record(ended)),
        }
    }

    /// The provider rejected the input as too long, without figures: the recovery compaction.
    pub fn overflow(&mut self) -> Result<CompactionResult, LogError> {
        self.overflow_with(soba_core::window::OverflowFigures::default())
    }

    /// The provider rejected the input as too long and said by how much: the window is lowered
    /// to its figures, then the recovery compaction.
    pub fn overflow_with(
        &mut self,
        figures: soba_core::window::OverflowFigures,
    ) -> Result<CompactionResult, LogError> {
        match barrier!(self).overflow(&mut self.log, figures)? {
            Ok(plan) => self.run_plan(&plan),
            Err(ended) => Ok(self.record(ended)),
        }
    }

    /// The agent finished a turn (records a pending intent when configured).
    pub fn turn_complete(&mut self, usage: Option<Usage>) -> Result<bool, LogError> {
        barrier!(self).turn_complete(&mut self.log, usage)
    }

    /// A milestone or plan pivot (records a pending intent when configured).
    pub fn checkpoint(&mut self, kind: CheckpointKind, label: &str) -> Result<bool, LogError> {
        let (_, recorded) = barrier!(self).checkpoint(&mut self.log, kind, label.to_string())?;
        Ok(recorded)
    }

    /// Note a compaction the source agent made, beside SOBA's context at this point.
    pub fn foreign(&mut self, f: &ForeignCompactionEntry) {
        let mark = ForeignMark {
            step: self.timeline.steps.len(),
            turn: self.turn,
            agent: f.agent.clone(),
            trigger: f.trigger.clone(),
            tokens_before: f.tokens_before,
            summary_tokens: f.summary_tokens,
            kept_items: f.kept_items,
            first_kept_entry_id: f.first_kept_entry_id.clone(),
            soba_tokens: self.effective_tokens(),
            compactions_before: self.timeline.compactions.len(),
        };
        (self.sink)(Event::Foreign(&mark));
        self.timeline.foreign_compactions.push(mark);
    }

    /// The finished timeline (with the latest capsule rendered) and the log.
    pub fn finish(mut self) -> (Timeline, SessionLog) {
        let s = self.log.session();
        self.timeline.latest_capsule = s
            .leaf()
            .and_then(|leaf| s.capsule_on_path(leaf))
            .and_then(|i| s.entry(i).as_capsule())
            .map(render_for_model);
        (self.timeline, self.log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::summarize::summarizer::SummaryError;
    use futures::future::BoxFuture;
    use soba_core::config::{ConfigFile, Overrides};
    use soba_core::session::capsule::model::CapsuleState;
    use soba_core::session::capsule::model::Quality;
    use soba_core::session::entry::{ContentBlock, MessageEntry, Outcome};
    use soba_core::session::testing::header;
    use tokio_util::sync::CancellationToken;

    /// A model that answers with a fixed goal, or fails.
    struct FixedModel(Option<&'static str>);

    impl Summarizer for FixedModel {
        fn describe(&self) -> String {
            "fixed model".into()
        }

        fn summarize<'a>(
            &'a self,
            _req: &'a crate::summarize::summarizer::SummaryRequest,
            _progress: &'a (dyn Fn(u8) + Send + Sync),
            _cancel: CancellationToken,
        ) -> BoxFuture<'a, Result<CapsuleState, SummaryError>> {
            let reply = match self.0 {
                Some(goal) => Ok(CapsuleState {
                    goal: goal.into(),
                    ..CapsuleState::default()
                }),
                None => Err(SummaryError::Http {
                    status: 503,
                    message: "overloaded".into(),
                }),
            };
            Box::pin(async move { reply })
        }
    }

    fn config() -> Config {
        let f = ConfigFile::parse(
            "t",
            r#"{"model":{"name":"t","contextWindow":9000,"maxOutputTokens":1000},
                "compaction":{"safetyReserveTokens":1000,"keepRecentTokens":1000}}"#,
        )
        .unwrap();
        Config::resolve(&[f], None, &Overrides::default()).unwrap()
    }

    fn host<'a>(
        dir: &std::path::Path,
        config: &'a Config,
        writer: CapsuleWriter<'a>,
    ) -> SimulatedHost<'a> {
        let log = SessionLog::create(
            &dir.join("s.jsonl"),
            header(),
            soba_core::config::Durability::Flush,
        )
        .unwrap();
        let mut h = SimulatedHost::new(log, config, "t", writer, Box::new(|_| {}));
        for k in 0..6 {
            for role in [Role::User, Role::Assistant] {
                h.push(EntryBody::Message(MessageEntry {
                    role,
                    content: vec![ContentBlock::text(format!("{k}{}", " word".repeat(400)))],
                    usage: None,
                    model: None,
                    synthetic: false,
                }))
                .unwrap();
            }
        }
        h
    }

    #[test]
    fn a_configured_model_writes_the_capsule() {
        let dir = tempfile::tempdir().unwrap();
        let config = config();
        let model = FixedModel(Some("ship the parser"));
        let writer = CapsuleWriter::new(Some(&model)).unwrap();
        assert_eq!(
            writer.describe(),
            "written by fixed model, built locally when it fails"
        );
        let mut h = host(dir.path(), &config, writer);
        let r = h.explicit_with(None, |_| Ok(())).unwrap();
        assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
        assert_eq!(r.quality, Some(Quality::Model));
        let (t, _) = h.finish();
        assert!(t.latest_capsule.unwrap().contains("ship the parser"));
        assert_eq!(t.compactions.len(), 1);
    }

    #[test]
    fn a_failing_model_falls_back_to_the_local_capsule_marked_degraded() {
        let dir = tempfile::tempdir().unwrap();
        let config = config();
        let model = FixedModel(None);
        let mut h = host(
            dir.path(),
            &config,
            CapsuleWriter::new(Some(&model)).unwrap(),
        );
        let r = h.explicit_with(None, |_| Ok(())).unwrap();
        assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
        assert_eq!(r.quality, Some(Quality::Degraded));
        assert!(r.fallback, "a fallback, not the no-model case");
        assert!(r.reason.contains("503"), "{}", r.reason);
    }

    #[test]
    fn input_landing_before_the_commit_makes_the_compaction_stale() {
        let dir = tempfile::tempdir().unwrap();
        let config = config();
        let mut h = host(dir.path(), &config, CapsuleWriter::Local);
        let r = h
            .explicit_with(Some("focus".into()), |h| {
                h.push(EntryBody::TurnComplete(
                    soba_core::session::entry::TurnCompleteEntry { usage: None },
                ))
                .map(drop)
            })
            .unwrap();
        assert_eq!(r.outcome, Outcome::Stale);
        assert_eq!(h.timeline().compactions[0].result.outcome, Outcome::Stale);
        assert!(h
            .log()
            .session()
            .entries()
            .iter()
            .all(|e| e.as_capsule().is_none()));
    }
}
