//! Model summarization: a model writes the capsule's narrative state (goal, decisions,
//! blockers, next steps) over the facts the log already holds.
//!
//! The pure parts — SSE parsing ([`sse`]), provider wire formats ([`wire`]), the prompt and its
//! chunking ([`prompt`]), reply validation ([`response`]), progress ([`progress`]) and the
//! circuit breaker ([`breaker`]) — are tested without a runtime. [`client`] is the HTTP shell,
//! and [`summarize_with_fallback`] the orchestration the compaction engine calls: timeout,
//! external cancellation, breaker, and the fallback to the deterministic local capsule.

pub mod breaker;
pub mod client;
pub mod progress;
pub mod prompt;
pub mod response;
pub mod summarizer;

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use soba_core::compaction::plan::Plan;
use soba_core::compaction::run::generate_local;
use soba_core::compaction::run::Generated;
use soba_core::config::{Provider, SummarizerConfig};
use soba_core::session::capsule::model::CapsuleState;
use soba_core::session::capsule::model::Quality;

use breaker::Admission;
use client::ModelSummarizer;
use progress::Progress;
use response::Corrections;
use summarizer::{Summarizer, SummarizerConfigError, SummaryError, SummaryRequest};

/// The result of [`summarize_with_fallback`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Summarized {
    /// A validated model state, with the claims corrected from the facts counted: the capsule
    /// has `quality: model`.
    Model(CapsuleState, Corrections),
    /// No model is configured: the deterministic local state, `quality: local`.
    Local(CapsuleState),
    /// A configured model's summary could not be used: the deterministic local state stands
    /// in, `quality: degraded`, with the reason for the UI and the flight record (timeout,
    /// HTTP error, invalid reply, breaker open).
    Degraded { state: CapsuleState, reason: String },
    /// Cancelled from outside: append nothing.
    Cancelled,
}

/// Run the model under `timeout`, falling back to `local` (the deterministic builder) on any
/// failure. External cancellation wins over everything, including a reply that arrives in the
/// same instant: it yields [`Summarized::Cancelled`] and never a state. The caller must still
/// check the cancellation and the expected leaf immediately before appending.
pub async fn summarize_with_fallback(
    summarizer: Option<&dyn Summarizer>,
    req: &SummaryRequest,
    timeout: Duration,
    cancel: CancellationToken,
    progress: &(dyn Fn(u8) + Send + Sync),
    local: impl FnOnce() -> CapsuleState,
) -> Summarized {
    let progress = Progress::new(progress);
    if cancel.is_cancelled() {
        return Summarized::Cancelled;
    }
    fn degraded(
        reason: String,
        local: impl FnOnce() -> CapsuleState,
        progress: &Progress,
    ) -> Summarized {
        let state = local();
        progress.finish();
        Summarized::Degraded { state, reason }
    }
    let Some(summarizer) = summarizer else {
        let state = local();
        progress.finish();
        return Summarized::Local(state);
    };
    let breaker = summarizer.breaker();
    if let Some(Admission::Rejected { retry_in }) = breaker.map(|b| b.admit(Instant::now())) {
        let error = SummaryError::BreakerOpen {
            retry_in_ms: retry_in.as_millis() as u64,
        };
        return degraded(fallback_reason(&error), local, &progress);
    }

    let started = tokio::time::Instant::now();
    let mut outcome = attempt(summarizer, req, &progress, started, timeout, &cancel).await;
    // One more try for a malformed reply, with what was wrong, when the time left is at least
    // what the first try took.
    if let Err(SummaryError::InvalidResponse(why)) = &outcome {
        let elapsed = started.elapsed();
        if !cancel.is_cancelled() && timeout.saturating_sub(elapsed) >= elapsed {
            let again = SummaryRequest {
                follow_up: Some(follow_up(why)),
                ..req.clone()
            };
            outcome = attempt(summarizer, &again, &progress, started, timeout, &cancel)
                .await
                .map_err(|e| match e {
                    SummaryError::InvalidResponse(second) => {
                        SummaryError::InvalidResponse(format!("{second} (asked twice)"))
                    }
                    other => other,
                });
        }
    }

    if cancel.is_cancelled() {
        if let Some(b) = breaker {
            b.record_abandoned(Instant::now());
        }
        return Summarized::Cancelled;
    }
    match outcome {
        Ok(mut state) => {
            // Names of files the log never mentions are the model's, not the session's; claims
            // the facts contradict are corrected from them.
            let unknown = response::vet_paths(&mut state, &response::Grounding::of(req));
            let mut corrections = response::vet_claims(&mut state, &req.shown_artifacts());
            response::fill_current_work(&mut state, req.current_work());
            corrections.unknown_paths = unknown.len() as u32;
            if let Some(b) = breaker {
                b.record_success();
            }
            progress.finish();
            Summarized::Model(state, corrections)
        }
        Err(error) => {
            if let Some(b) = breaker {
                b.record_failure(Instant::now());
            }
            degraded(fallback_reason(&error), local, &progress)
        }
    }
}

/// The follow-up of a second try: what was wrong with the first reply.
fn follow_up(why: &str) -> String {
    format!("Your reply was rejected: {why}.")
}

/// One run of the model under what is left of `timeout` since `started`, its state validated.
async fn attempt(
    summarizer: &dyn Summarizer,
    req: &SummaryRequest,
    progress: &Progress<'_>,
    started: tokio::time::Instant,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<CapsuleState, SummaryError> {
    let run_cancel = cancel.child_token();
    let report = |pct: u8| progress.fraction(f64::from(pct) / 100.0);
    // A provider that does not stream says nothing until its reply is complete: the time spent
    // against the timeout moves the progress meanwhile (the larger of the two is shown).
    let elapsed_ticks = async {
        loop {
            tokio::time::sleep(progress::elapsed_tick(timeout)).await;
            progress.fraction(progress::elapsed_fraction(started.elapsed(), timeout));
        }
    };
    let outcome = {
        // The run future is dropped at the end of this block whichever branch wins, which
        // drops its HTTP response and so closes the connection.
        let run = summarizer.summarize(req, &report, run_cancel.clone());
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(SummaryError::Cancelled),
            result = run => result,
            _ = tokio::time::sleep_until(started + timeout) => {
                Err(SummaryError::Timeout { after_ms: timeout.as_millis() as u64 })
            }
            () = elapsed_ticks => unreachable!("the elapsed-time ticks never end"),
        }
    };
    run_cancel.cancel();
    let state = outcome?;
    response::validate_state(&state).map_err(SummaryError::InvalidResponse)?;
    Ok(state)
}

/// What the generate step produced, with the claims of a model capsule that were corrected
/// from the facts (zero for any other capsule).
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub generated: Generated,
    pub corrections: Corrections,
}

impl Generation {
    /// Record the corrections in `result` (the outcome of committing this generation): its
    /// reason says how many claims were corrected when the model's capsule was kept. Returns
    /// the corrections for the flight record: none when the model's capsule was not kept (the
    /// local one stood in, or nothing was appended).
    pub fn annotate(&self, result: &mut soba_core::compaction::CompactionResult) -> Corrections {
        if result.quality != Some(Quality::Model) {
            return Corrections::default();
        }
        if let Some(note) = self.corrections.describe() {
            result.reason = format!("{}; {note}", result.reason);
        }
        self.corrections
    }
}

/// The generate step of the compaction barrier: the plan's history through `summarizer`
/// (under the plan's `compaction.timeoutMs`), its local state on any failure, or
/// [`Generated::Cancelled`]. Holds no borrow of the session; hand the result to
/// [`soba_core::compaction::run::commit`], which checks the expected leaf before appending.
pub async fn generate(
    plan: &Plan,
    summarizer: Option<&dyn Summarizer>,
    cancel: CancellationToken,
    progress: &(dyn Fn(u8) + Send + Sync),
) -> Generated {
    generate_checked(plan, summarizer, cancel, progress)
        .await
        .generated
}

/// [`generate`] with the corrections made to a model capsule, for the flight record and the
/// result ([`Generation::annotate`]).
pub async fn generate_checked(
    plan: &Plan,
    summarizer: Option<&dyn Summarizer>,
    cancel: CancellationToken,
    progress: &(dyn Fn(u8) + Send + Sync),
) -> Generation {
    let unchecked = |generated| Generation {
        generated,
        corrections: Corrections::default(),
    };
    if summarizer.is_none() {
        if cancel.is_cancelled() {
            return unchecked(Generated::Cancelled);
        }
        progress(100);
        return unchecked(generate_local(plan));
    }
    let req = SummaryRequest {
        previous: plan.previous.clone(),
        history: plan.to_summarize.clone(),
        instructions: plan.instructions.clone(),
        artifacts: plan.artifacts.clone(),
        follow_up: None,
    };
    let timeout = Duration::from_millis(plan.roi.timeout_ms);
    let local = || plan.local_state.clone();
    match summarize_with_fallback(summarizer, &req, timeout, cancel, progress, local).await {
        Summarized::Model(state, corrections) => Generation {
            generated: Generated::State {
                // What was said is quoted from the log, not written by the model: the same
                // exchanges as the local capsule's.
                state: CapsuleState {
                    exchanges: plan.local_state.exchanges.clone(),
                    ..state
                },
                quality: Quality::Model,
                degraded_reason: None,
            },
            corrections,
        },
        Summarized::Local(state) => unchecked(Generated::State {
            state,
            quality: Quality::Local,
            degraded_reason: None,
        }),
        Summarized::Degraded { state, reason } => unchecked(Generated::State {
            state,
            quality: Quality::Degraded,
            degraded_reason: Some(reason),
        }),
        Summarized::Cancelled => unchecked(Generated::Cancelled),
    }
}

/// [`generate`] for a caller without a runtime (the CLI): runs it on a current-thread runtime,
/// with Ctrl-C as external cancellation. Returns what was generated and whether it was
/// cancelled (pass that to [`soba_core::compaction::run::commit`] as `aborted`).
///
/// Once this has run, Ctrl-C no longer ends the process by default; it is meant to be the last
/// long step of a command.
pub fn generate_blocking(
    plan: &Plan,
    summarizer: Option<&dyn Summarizer>,
    progress: &(dyn Fn(u8) + Send + Sync),
) -> std::io::Result<(Generation, bool)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let cancel = CancellationToken::new();
    let generated = runtime.block_on(async {
        let on_interrupt = cancel.clone();
        let interrupt = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                on_interrupt.cancel();
            }
        });
        let generated = generate_checked(plan, summarizer, cancel.clone(), progress).await;
        interrupt.abort();
        generated
    });
    Ok((generated, cancel.is_cancelled()))
}

fn fallback_reason(error: &SummaryError) -> String {
    format!("{error}; the local capsule was used")
}

/// The summarizer a configuration asks for: `None` for the local builder.
pub fn from_config(
    cfg: &SummarizerConfig,
) -> Result<Option<Box<dyn Summarizer>>, SummarizerConfigError> {
    from_config_with_env(cfg, |var| std::env::var(var).ok())
}

/// [`from_config`] with the environment passed in (for tests and embedders).
pub fn from_config_with_env(
    cfg: &SummarizerConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Box<dyn Summarizer>>, SummarizerConfigError> {
    if cfg.provider == Provider::Local {
        return Ok(None);
    }
    let summarizer = ModelSummarizer::new(cfg, env)?;
    Ok(Some(Box::new(summarizer)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use breaker::{Breaker, BreakerState};
    use futures::future::BoxFuture;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    /// A scripted summarizer: no network, just the outcome after a delay.
    struct Scripted {
        delay: Duration,
        outcome: Result<CapsuleState, SummaryError>,
        calls: AtomicUsize,
        breaker: Option<Breaker>,
        /// Reports progress as a streaming provider does; false: silent until the reply.
        streams: bool,
    }

    impl Scripted {
        fn new(delay_ms: u64, outcome: Result<CapsuleState, SummaryError>) -> Self {
            Scripted {
                delay: Duration::from_millis(delay_ms),
                outcome,
                calls: AtomicUsize::new(0),
                breaker: None,
                streams: true,
            }
        }

        fn not_streaming(delay_ms: u64) -> Self {
            Scripted {
                streams: false,
                ..Scripted::new(delay_ms, Ok(model_state()))
            }
        }
    }

    impl Summarizer for Scripted {
        fn describe(&self) -> String {
            "scripted".into()
        }
        fn summarize<'a>(
            &'a self,
            _req: &'a SummaryRequest,
            progress: &'a (dyn Fn(u8) + Send + Sync),
            _cancel: CancellationToken,
        ) -> BoxFuture<'a, Result<CapsuleState, SummaryError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                if self.streams {
                    progress(40);
                    progress(30);
                }
                tokio::time::sleep(self.delay).await;
                self.outcome.clone()
            })
        }
        fn breaker(&self) -> Option<&Breaker> {
            self.breaker.as_ref()
        }
    }

    fn model_state() -> CapsuleState {
        CapsuleState {
            goal: "from the model".into(),
            ..CapsuleState::default()
        }
    }

    fn local_state() -> CapsuleState {
        CapsuleState {
            goal: "from the log".into(),
            ..CapsuleState::default()
        }
    }

    async fn run(
        s: Option<&dyn Summarizer>,
        timeout_ms: u64,
        cancel: CancellationToken,
    ) -> (Summarized, Vec<u8>) {
        let seen = Mutex::new(Vec::new());
        let sink = |p: u8| seen.lock().unwrap().push(p);
        let out = summarize_with_fallback(
            s,
            &SummaryRequest::default(),
            Duration::from_millis(timeout_ms),
            cancel,
            &sink,
            local_state,
        )
        .await;
        let seen = seen.into_inner().unwrap();
        (out, seen)
    }

    #[tokio::test]
    async fn model_success_reports_monotonic_progress_to_100() {
        let s = Scripted::new(1, Ok(model_state()));
        let (out, seen) = run(Some(&s), 1000, CancellationToken::new()).await;
        assert_eq!(
            out,
            Summarized::Model(model_state(), Corrections::default())
        );
        assert_eq!(seen, vec![40, 100]);
    }

    #[tokio::test]
    async fn a_reply_that_does_not_stream_still_moves_the_progress_with_the_time_spent() {
        let s = Scripted::not_streaming(700);
        let (out, seen) = run(Some(&s), 1000, CancellationToken::new()).await;
        assert_eq!(
            out,
            Summarized::Model(model_state(), Corrections::default())
        );
        let before_done = &seen[..seen.len() - 1];
        assert!(
            before_done.len() >= 3 && before_done.iter().all(|p| (1..=70).contains(p)),
            "{seen:?}"
        );
        assert_eq!(seen.last(), Some(&100));
    }

    #[tokio::test]
    async fn no_model_means_local_not_degraded() {
        let (out, seen) = run(None, 1000, CancellationToken::new()).await;
        assert_eq!(out, Summarized::Local(local_state()));
        assert_eq!(seen, vec![100]);
    }

    #[tokio::test]
    async fn timeout_falls_back_at_once() {
        let s = Scripted::new(10_000, Ok(model_state()));
        let started = Instant::now();
        let (out, _) = run(Some(&s), 50, CancellationToken::new()).await;
        assert!(started.elapsed() < Duration::from_millis(1000));
        let Summarized::Degraded { state, reason } = out else {
            panic!("{out:?}")
        };
        assert_eq!(state, local_state());
        assert!(reason.contains("did not finish within 50 ms"), "{reason}");
    }

    #[tokio::test]
    async fn failure_reason_is_kept() {
        let s = Scripted::new(
            1,
            Err(SummaryError::Http {
                status: 503,
                message: "busy".into(),
            }),
        );
        let (out, _) = run(Some(&s), 1000, CancellationToken::new()).await;
        let Summarized::Degraded { reason, .. } = out else {
            panic!("{out:?}")
        };
        assert_eq!(
            reason,
            "the summarization model answered HTTP 503: busy; the local capsule was used"
        );
    }

    #[tokio::test]
    async fn an_invalid_state_from_a_summarizer_is_not_used() {
        let s = Scripted::new(1, Ok(CapsuleState::default()));
        let (out, _) = run(Some(&s), 1000, CancellationToken::new()).await;
        let Summarized::Degraded { reason, .. } = out else {
            panic!("{out:?}")
        };
        assert!(reason.contains("empty goal (asked twice)"), "{reason}");
        assert_eq!(s.calls.load(Ordering::SeqCst), 2, "asked once more");
    }

    #[tokio::test]
    async fn cancellation_yields_nothing_and_never_calls_local() {
        let s = Scripted::new(10_000, Ok(model_state()));
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            trigger.cancel();
        });
        let out = summarize_with_fallback(
            Some(&s),
            &SummaryRequest::default(),
            Duration::from_secs(5),
            cancel,
            &|_| {},
            || panic!("local builder called"),
        )
        .await;
        assert_eq!(out, Summarized::Cancelled);
        let cancel = CancellationToken::new();
        cancel.cancel();
        let (out, _) = run(Some(&s), 1000, cancel).await;
        assert_eq!(out, Summarized::Cancelled);
    }

    #[tokio::test]
    async fn a_reply_racing_cancellation_is_dropped() {
        // The summarizer finishes at once, but cancellation was requested first.
        let s = Scripted::new(0, Ok(model_state()));
        let cancel = CancellationToken::new();
        cancel.cancel();
        let (out, _) = run(Some(&s), 1000, cancel).await;
        assert_eq!(out, Summarized::Cancelled);
        assert_eq!(
            s.calls.load(Ordering::SeqCst),
            0,
            "no request after cancellation"
        );
    }

    #[tokio::test]
    async fn breaker_skips_the_model_after_three_failures() {
        let mut s = Scripted::new(1, Err(SummaryError::Transport("refused".into())));
        s.breaker = Some(Breaker::new(Duration::from_secs(60)));
        for _ in 0..3 {
            run(Some(&s), 1000, CancellationToken::new()).await;
        }
        let (out, _) = run(Some(&s), 1000, CancellationToken::new()).await;
        assert_eq!(s.calls.load(Ordering::SeqCst), 3);
        let Summarized::Degraded { reason, .. } = out else {
            panic!("{out:?}")
        };
        assert!(
            reason.contains("paused after 3 consecutive failures"),
            "{reason}"
        );
        assert!(matches!(
            s.breaker().unwrap().state(Instant::now()),
            BreakerState::Open { .. }
        ));
    }
}
