//! Debouncing: raw file events gather into a burst that is handed on once the file system has
//! been quiet for a while, or once the burst has lasted long enough that holding it longer
//! would leave the session behind (a build writing for minutes still reports as it goes).

use std::time::{Duration, Instant};

/// Gathers items and says when they are due. Time is passed in, so the rules are testable
/// without sleeping.
#[derive(Debug)]
pub struct Burst<T> {
    items: Vec<T>,
    /// Items beyond [`Burst::capacity`], counted and dropped.
    overflow: usize,
    started: Option<Instant>,
    last: Option<Instant>,
    quiet: Duration,
    longest: Duration,
    capacity: usize,
}

impl<T> Burst<T> {
    /// Due after `quiet` without a new item, or `longest` after the first, whichever is sooner;
    /// holds at most `capacity` items.
    pub fn new(quiet: Duration, longest: Duration, capacity: usize) -> Self {
        Burst {
            items: Vec::new(),
            overflow: 0,
            started: None,
            last: None,
            quiet,
            longest,
            capacity,
        }
    }

    pub fn push(&mut self, now: Instant, item: T) {
        self.started.get_or_insert(now);
        self.last = Some(now);
        if self.items.len() < self.capacity {
            self.items.push(item);
        } else {
            self.overflow += 1;
        }
    }

    /// When the burst falls due; `None` while it is empty.
    pub fn due_at(&self) -> Option<Instant> {
        let (started, last) = (self.started?, self.last?);
        Some((last + self.quiet).min(started + self.longest))
    }

    /// The items and the count dropped over capacity, once due; the burst starts afresh.
    pub fn take_if_due(&mut self, now: Instant) -> Option<(Vec<T>, usize)> {
        if self.due_at()? > now {
            return None;
        }
        self.started = None;
        self.last = None;
        let overflow = std::mem::take(&mut self.overflow);
        Some((std::mem::take(&mut self.items), overflow))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_burst_is_due_after_a_quiet_spell() {
        let t0 = Instant::now();
        let mut b = Burst::new(300 * MS, 2000 * MS, 10);
        assert_eq!(b.due_at(), None);
        assert!(b.take_if_due(t0).is_none());
        b.push(t0, 'a');
        b.push(t0 + 100 * MS, 'b');
        assert_eq!(b.due_at(), Some(t0 + 400 * MS));
        assert!(b.take_if_due(t0 + 399 * MS).is_none());
        assert_eq!(b.take_if_due(t0 + 400 * MS), Some((vec!['a', 'b'], 0)));
        assert_eq!(b.due_at(), None, "a taken burst starts afresh");
    }

    #[test]
    fn a_burst_that_never_goes_quiet_is_due_at_its_longest() {
        let t0 = Instant::now();
        let mut b = Burst::new(300 * MS, 2000 * MS, 1000);
        let mut t = t0;
        while t < t0 + 1900 * MS {
            b.push(t, ());
            t += 100 * MS;
        }
        assert_eq!(b.due_at(), Some(t0 + 2000 * MS));
        let (items, _) = b.take_if_due(t0 + 2000 * MS).expect("due at its longest");
        assert_eq!(items.len(), 19);
        b.push(t0 + 2050 * MS, ());
        assert_eq!(
            b.due_at(),
            Some(t0 + 2350 * MS),
            "the next burst has its own clock"
        );
    }

    #[test]
    fn items_beyond_capacity_are_counted_not_kept() {
        let t0 = Instant::now();
        let mut b = Burst::new(MS, MS, 3);
        for i in 0..5 {
            b.push(t0, i);
        }
        assert_eq!(b.take_if_due(t0 + MS), Some((vec![0, 1, 2], 2)));
        b.push(t0 + 2 * MS, 9);
        assert_eq!(b.take_if_due(t0 + 3 * MS), Some((vec![9], 0)));
    }
}
