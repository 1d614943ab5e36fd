//! Monotonic progress for a summarization: never goes back, reaches 100 only at the end.

use std::sync::atomic::{AtomicU8, Ordering};

/// The highest percentage reported before the run has finished.
pub const MAX_BEFORE_DONE: u8 = 99;

/// Wraps a progress callback so that it only ever sees increasing values, capped at 99 until
/// [`Progress::finish`]. Shared between the orchestration and the provider stream.
pub struct Progress<'a> {
    sink: &'a (dyn Fn(u8) + Send + Sync),
    last: AtomicU8,
}

impl<'a> Progress<'a> {
    pub fn new(sink: &'a (dyn Fn(u8) + Send + Sync)) -> Self {
        Progress {
            sink,
            last: AtomicU8::new(0),
        }
    }

    /// Report `fraction` (0.0..=1.0) of the work done; ignored when it would not increase.
    pub fn fraction(&self, fraction: f64) {
        let pct = (fraction.clamp(0.0, 1.0) * 100.0).floor() as u8;
        self.report(pct.min(MAX_BEFORE_DONE));
    }

    /// The run is over (whatever its outcome): report 100.
    pub fn finish(&self) {
        self.report(100);
    }

    fn report(&self, pct: u8) {
        if self.last.fetch_max(pct, Ordering::AcqRel) < pct {
            (self.sink)(pct);
        }
    }
}

/// Progress of one chunk's output stream: tokens received against the expected output size.
/// The expectation is a guess, so a chunk never claims more than `ceiling` of its share.
pub fn stream_fraction(received_tokens: u64, expected_tokens: u64) -> f64 {
    const CEILING: f64 = 0.95;
    if expected_tokens == 0 {
        return 0.0;
    }
    (received_tokens as f64 / expected_tokens as f64).min(CEILING)
}

/// The share of a run the elapsed time stands for: time alone never claims the end, since a
/// reply may come at any moment before the timeout or not at all.
const ELAPSED_CEILING: f64 = 0.9;

/// Progress from the time spent against the timeout, for a reply that does not stream.
pub fn elapsed_fraction(elapsed: std::time::Duration, timeout: std::time::Duration) -> f64 {
    if timeout.is_zero() {
        return 0.0;
    }
    (elapsed.as_secs_f64() / timeout.as_secs_f64() * ELAPSED_CEILING).min(ELAPSED_CEILING)
}

/// How often the elapsed time is reported: some fifty steps over the timeout, at least every
/// second and at most ten times a second.
pub fn elapsed_tick(timeout: std::time::Duration) -> std::time::Duration {
    (timeout / 50).clamp(
        std::time::Duration::from_millis(100),
        std::time::Duration::from_secs(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn monotonic_and_capped_until_finish() {
        let seen = Mutex::new(Vec::new());
        let sink = |p: u8| seen.lock().unwrap().push(p);
        let progress = Progress::new(&sink);
        for f in [0.1, 0.05, 0.5, 0.5, 1.0, 2.0, 0.7] {
            progress.fraction(f);
        }
        progress.finish();
        progress.finish();
        assert_eq!(*seen.lock().unwrap(), vec![10, 50, 99, 100]);
    }

    #[test]
    fn elapsed_time_moves_the_progress_but_never_to_the_end() {
        use std::time::Duration;
        let timeout = Duration::from_secs(15);
        assert_eq!(elapsed_fraction(Duration::ZERO, timeout), 0.0);
        assert!((elapsed_fraction(Duration::from_millis(7500), timeout) - 0.45).abs() < 1e-9);
        assert_eq!(elapsed_fraction(Duration::from_secs(60), timeout), 0.9);
        assert_eq!(
            elapsed_fraction(Duration::from_secs(1), Duration::ZERO),
            0.0
        );
        assert_eq!(elapsed_tick(timeout), Duration::from_millis(300));
        assert_eq!(
            elapsed_tick(Duration::from_secs(600)),
            Duration::from_secs(1)
        );
        assert_eq!(
            elapsed_tick(Duration::from_millis(50)),
            Duration::from_millis(100)
        );
    }

    #[test]
    fn stream_fraction_is_bounded() {
        assert_eq!(stream_fraction(0, 100), 0.0);
        assert_eq!(stream_fraction(50, 100), 0.5);
        assert_eq!(stream_fraction(500, 100), 0.95);
        assert_eq!(stream_fraction(5, 0), 0.0);
    }
}
