//! A host that drives the barrier the way an agent integration does, over a session log it
//! owns, and records what happens on a [`Timeline`]. `soba demo` and `soba replay` both run on
//! it; nothing here decides an outcome, the barrier does.

use crate::capsule::artifacts::ToolMapping;
use crate::capsule::render::render_for_model;
use crate::compaction::run::{Barrier, Preflight};
use crate::compaction::{generate_local, CompactionResult, Generated, Plan};
use crate::config::Config;
use crate::report::{Event, ForeignMark, Step, Timeline, TimelineCompaction};
use crate::session::entry::{CheckpointKind, Entry, EntryBody, Role, Usage};
use crate::session::log::{LogError, SessionLog};
use crate::session::view::{ModelMessage, ModelView};
use crate::util::new_id;

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
}

impl<'a> SimulatedHost<'a> {
    pub fn new(log: SessionLog, config: &'a Config, title: &str, sink: Sink<'a>) -> Self {
        let mut timeline = Timeline::new(
            title,
            &config.model.name,
            log.session().tokenizer().as_str(),
            config.limits(),
        );
        timeline.keep_recent_tokens = config.compaction.keep_recent_tokens;
        SimulatedHost {
            log,
            config,
            mapping: ToolMapping::default(),
            timeline,
            turn: 0,
            sink,
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
        crate::budget::Budget::measure(
            self.config.limits(),
            view.breakdown(s),
            view.usage_anchor(s),
        )
        .effective_tokens
    }

    fn record(&mut self, result: CompactionResult) -> CompactionResult {
        let c = TimelineCompaction {
            step: self.timeline.steps.len(),
            turn: self.turn,
            result,
        };
        (self.sink)(Event::Compaction(&c));
        let result = c.result.clone();
        self.timeline.compactions.push(c);
        result
    }

    /// Generate a plan's capsule with the local builder and commit it, with `before_commit`
    /// run in between (where a real summarizer would be writing and new input may land).
    pub fn run_plan_with(
        &mut self,
        plan: &Plan,
        before_commit: impl FnOnce(&mut Self) -> Result<(), LogError>,
    ) -> Result<CompactionResult, LogError> {
        let started = std::time::Instant::now();
        let generated: Generated = generate_local(plan);
        before_commit(self)?;
        let result = crate::compaction::commit(
            &mut self.log,
            plan,
            generated,
            false,
            started.elapsed().as_millis() as u64,
        )?;
        Ok(self.record(result))
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
                    let budget = crate::budget::Budget::measure(
                        self.config.limits(),
                        view.breakdown(s),
                        view.usage_anchor(s),
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

    /// The provider rejected the input as too long: the recovery compaction.
    pub fn overflow(&mut self) -> Result<CompactionResult, LogError> {
        match barrier!(self).overflow(&mut self.log)? {
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

    /// Note a compaction the source agent made, beside SOBA's input at this point.
    pub fn foreign(&mut self, mark: impl FnOnce(usize, usize, u64) -> ForeignMark) {
        let f = mark(
            self.timeline.steps.len(),
            self.turn,
            self.effective_tokens(),
        );
        (self.sink)(Event::Foreign(&f));
        self.timeline.foreign_compactions.push(f);
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
