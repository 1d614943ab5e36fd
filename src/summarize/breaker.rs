//! Circuit breaker for the summarization model: after [`FAILURE_THRESHOLD`] consecutive
//! failures the model is skipped (local builder at once) until a cool-down has passed; then one
//! trial request is let through (half-open), and its outcome closes or re-opens the breaker.
//!
//! The transitions are pure functions of the current instant, so tests drive them without
//! sleeping; [`Breaker`] is the thread-safe cell the summarizer shares across calls.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Serialize;

/// Consecutive model failures that open the breaker.
pub const FAILURE_THRESHOLD: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell {
    Closed {
        consecutive_failures: u32,
    },
    Open {
        until: Instant,
    },
    /// The cool-down is over and one trial request is in flight.
    HalfOpen,
}

/// What the budget output shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum BreakerState {
    /// Model requests are made; `consecutiveFailures` counts towards the threshold.
    #[serde(rename_all = "camelCase")]
    Closed { consecutive_failures: u32 },
    /// Model requests are skipped for `retryInMs` more milliseconds.
    #[serde(rename_all = "camelCase")]
    Open { retry_in_ms: u64 },
    /// The cool-down is over; the next request is a trial.
    HalfOpen,
}

/// Whether a request may go to the model now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Allowed,
    /// Skip the model; it is retried after `retry_in`.
    Rejected {
        retry_in: Duration,
    },
}

#[derive(Debug)]
pub struct Breaker {
    cooldown: Duration,
    cell: Mutex<Cell>,
}

impl Breaker {
    pub fn new(cooldown: Duration) -> Self {
        Breaker {
            cooldown,
            cell: Mutex::new(Cell::Closed {
                consecutive_failures: 0,
            }),
        }
    }

    pub fn cooldown(&self) -> Duration {
        self.cooldown
    }

    fn with_cell<T>(&self, f: impl FnOnce(&mut Cell) -> T) -> T {
        // A poisoned lock only means another thread panicked mid-update of a plain Copy value;
        // the value itself is always whole.
        let mut guard = self.cell.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut guard)
    }

    /// Ask to send a request at `now`. An open breaker whose cool-down has passed admits one
    /// trial and becomes half-open; while that trial runs, other requests are rejected.
    pub fn admit(&self, now: Instant) -> Admission {
        let cooldown = self.cooldown;
        self.with_cell(|cell| match *cell {
            Cell::Closed { .. } => Admission::Allowed,
            Cell::Open { until } if now >= until => {
                *cell = Cell::HalfOpen;
                Admission::Allowed
            }
            Cell::Open { until } => Admission::Rejected {
                retry_in: until - now,
            },
            Cell::HalfOpen => Admission::Rejected { retry_in: cooldown },
        })
    }

    pub fn record_success(&self) {
        self.with_cell(|cell| {
            *cell = Cell::Closed {
                consecutive_failures: 0,
            }
        });
    }

    pub fn record_failure(&self, now: Instant) {
        let until = now + self.cooldown;
        self.with_cell(|cell| {
            *cell = match *cell {
                Cell::Closed {
                    consecutive_failures,
                } if consecutive_failures + 1 < FAILURE_THRESHOLD => Cell::Closed {
                    consecutive_failures: consecutive_failures + 1,
                },
                _ => Cell::Open { until },
            }
        });
    }

    /// A request that ended without an outcome (cancelled from outside) says nothing about the
    /// model: a half-open trial goes back to waiting for the next one.
    pub fn record_abandoned(&self, now: Instant) {
        self.with_cell(|cell| {
            if *cell == Cell::HalfOpen {
                *cell = Cell::Open { until: now };
            }
        });
    }

    pub fn state(&self, now: Instant) -> BreakerState {
        self.with_cell(|cell| match *cell {
            Cell::Closed {
                consecutive_failures,
            } => BreakerState::Closed {
                consecutive_failures,
            },
            Cell::Open { until } if now >= until => BreakerState::HalfOpen,
            Cell::Open { until } => BreakerState::Open {
                retry_in_ms: (until - now).as_millis() as u64,
            },
            Cell::HalfOpen => BreakerState::HalfOpen,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COOL: Duration = Duration::from_secs(60);

    #[test]
    fn opens_after_three_consecutive_failures() {
        let b = Breaker::new(COOL);
        let t0 = Instant::now();
        b.record_failure(t0);
        b.record_failure(t0);
        assert_eq!(
            b.state(t0),
            BreakerState::Closed {
                consecutive_failures: 2
            }
        );
        assert_eq!(b.admit(t0), Admission::Allowed);
        b.record_failure(t0);
        assert_eq!(
            b.state(t0),
            BreakerState::Open {
                retry_in_ms: 60_000
            }
        );
        assert_eq!(
            b.admit(t0 + Duration::from_secs(10)),
            Admission::Rejected {
                retry_in: Duration::from_secs(50)
            }
        );
    }

    #[test]
    fn a_success_resets_the_count() {
        let b = Breaker::new(COOL);
        let t0 = Instant::now();
        b.record_failure(t0);
        b.record_failure(t0);
        b.record_success();
        b.record_failure(t0);
        assert_eq!(
            b.state(t0),
            BreakerState::Closed {
                consecutive_failures: 1
            }
        );
    }

    #[test]
    fn half_open_trial_closes_or_reopens() {
        let b = Breaker::new(COOL);
        let t0 = Instant::now();
        for _ in 0..3 {
            b.record_failure(t0);
        }
        let later = t0 + COOL;
        assert_eq!(b.state(later), BreakerState::HalfOpen);
        assert_eq!(b.admit(later), Admission::Allowed);
        assert!(
            matches!(b.admit(later), Admission::Rejected { .. }),
            "one trial at a time"
        );
        b.record_failure(later);
        assert_eq!(
            b.state(later),
            BreakerState::Open {
                retry_in_ms: 60_000
            }
        );
        let again = later + COOL;
        assert_eq!(b.admit(again), Admission::Allowed);
        b.record_success();
        assert_eq!(
            b.state(again),
            BreakerState::Closed {
                consecutive_failures: 0
            }
        );
    }

    #[test]
    fn abandoned_trial_lets_the_next_request_try() {
        let b = Breaker::new(COOL);
        let t0 = Instant::now();
        for _ in 0..3 {
            b.record_failure(t0);
        }
        assert_eq!(b.admit(t0 + COOL), Admission::Allowed);
        b.record_abandoned(t0 + COOL);
        assert_eq!(b.admit(t0 + COOL), Admission::Allowed);
    }

    #[test]
    fn state_serializes_for_the_budget_output() {
        let v = serde_json::to_value(BreakerState::Open { retry_in_ms: 5 }).unwrap();
        assert_eq!(v, serde_json::json!({"state": "open", "retryInMs": 5}));
        let v = serde_json::to_value(BreakerState::Closed {
            consecutive_failures: 1,
        })
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"state": "closed", "consecutiveFailures": 1})
        );
    }
}
