//! The storm breaker: automatic compaction that would run on a loop stops, and says why.
//!
//! A window too small for what the agent adds per step (a 16k window and 3k-token tool results)
//! makes every compaction fill up again within an inference or two: capsule after capsule, and
//! no work done. Before an automatic compaction (hard limit or a soft trigger), the barrier
//! reads the automatic capsules on the branch: when the latest came fewer than
//! [`STORM_INFERENCES`] inferences ago, and either it came as soon after the one before it or
//! it reclaimed less than [`STORM_MIN_RECLAIM`] of its input, compacting again is a storm. It
//! does not run: a soft trigger is skipped, a hard limit fails (its input is never sent), both
//! with [`StormFacts::reason`]. An explicit `/compact` runs as ever and ends the storm (the
//! breaker looks no further back than a capsule it did not write), and so does a turn whose
//! input fits.

use crate::session::entry::{EntryBody, EntryKind, Role};
use crate::session::trigger::Trigger;
use crate::session::Session;

/// Automatic compactions fewer than this many inferences apart are on a loop.
pub const STORM_INFERENCES: u32 = 3;

/// A compaction that reclaimed less than this share of its input did too little to matter.
pub const STORM_MIN_RECLAIM: f64 = 0.1;

/// What the breaker reads from the branch: the latest automatic capsule and the one before.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StormFacts {
    /// Inferences (assistant messages) since the latest automatic capsule; `None` without one.
    pub since_latest: Option<u32>,
    /// Inferences between the automatic capsule before it and the latest.
    pub gap_before_latest: Option<u32>,
    /// The latest automatic capsule's input before and after.
    pub latest_before: u64,
    pub latest_after: u64,
}

fn is_automatic(t: Trigger) -> bool {
    t.is_soft() || t == Trigger::HardLimit
}

/// Read the storm facts at `leaf`, walking back at most to the second automatic capsule (or the
/// first capsule of another trigger, which ends any storm).
pub fn storm_facts(session: &Session, leaf: Option<usize>) -> StormFacts {
    let mut facts = StormFacts::default();
    let mut inferences = 0u32;
    let mut cur = leaf;
    while let Some(i) = cur {
        match session.kind_of(i) {
            EntryKind::Capsule => {
                let Some(c) = session.entry(i).as_capsule() else {
                    break;
                };
                if !is_automatic(c.trigger) {
                    break;
                }
                if facts.since_latest.is_none() {
                    facts.since_latest = Some(inferences);
                    facts.latest_before = c.tokens.before;
                    facts.latest_after = c.tokens.after;
                    inferences = 0;
                    // Past the storm window nothing earlier matters.
                    if facts.since_latest >= Some(STORM_INFERENCES) {
                        break;
                    }
                } else {
                    facts.gap_before_latest = Some(inferences);
                    break;
                }
            }
            EntryKind::Message => {
                if matches!(&session.entry(i).body, EntryBody::Message(m) if m.role == Role::Assistant)
                {
                    inferences += 1;
                    // The gap before the latest is only needed while it is short.
                    if facts.since_latest.is_some() && inferences >= STORM_INFERENCES {
                        facts.gap_before_latest = Some(inferences);
                        break;
                    }
                }
            }
            _ => {}
        }
        cur = session.parent_of(i);
    }
    facts
}

impl StormFacts {
    /// Why compacting again now would be a storm, or `None` when it would not.
    pub fn reason(&self) -> Option<String> {
        let since = self.since_latest.filter(|&s| s < STORM_INFERENCES)?;
        let reclaimed = self.latest_before.saturating_sub(self.latest_after);
        let share = if self.latest_before == 0 {
            0.0
        } else {
            reclaimed as f64 / self.latest_before as f64
        };
        let quick_again = self.gap_before_latest.is_some_and(|g| g < STORM_INFERENCES);
        let too_little = share < STORM_MIN_RECLAIM;
        if !quick_again && !too_little {
            return None;
        }
        let why = if too_little {
            format!(
                "the last one reclaimed {reclaimed} of {} tokens ({:.0}%, under {:.0}%)",
                self.latest_before,
                share * 100.0,
                STORM_MIN_RECLAIM * 100.0
            )
        } else {
            format!(
                "the last two came {} inference{} apart",
                self.gap_before_latest.unwrap_or(0),
                if self.gap_before_latest == Some(1) {
                    ""
                } else {
                    "s"
                }
            )
        };
        Some(format!(
            "{STORM}: the input filled up again {since} inference{} after the last automatic \
             compaction and {why}; automatic compaction stops here instead of writing capsule \
             after capsule. Give the model a larger window (`--context-window`), keep tool \
             results smaller, or run /compact to start over from a new capsule",
            if since == 1 { "" } else { "s" }
        ))
    }
}

/// How a storm's reason begins.
pub const STORM: &str = "compaction storm";

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(since: u32, gap: Option<u32>, before: u64, after: u64) -> StormFacts {
        StormFacts {
            since_latest: Some(since),
            gap_before_latest: gap,
            latest_before: before,
            latest_after: after,
        }
    }

    #[test]
    fn a_second_quick_compaction_after_a_quick_one_is_a_storm() {
        let r = facts(1, Some(1), 10_000, 6_000).reason().expect("a storm");
        assert!(r.starts_with(STORM), "{r}");
        assert!(r.contains("1 inference after"), "{r}");
        assert!(r.contains("the last two came 1 inference apart"), "{r}");
        assert!(r.contains("--context-window"), "{r}");
    }

    #[test]
    fn a_compaction_that_reclaimed_too_little_stops_the_next_quick_one() {
        let r = facts(2, None, 10_000, 9_500).reason().expect("a storm");
        assert!(
            r.contains("reclaimed 500 of 10000 tokens (5%, under 10%)"),
            "{r}"
        );
    }

    #[test]
    fn compactions_far_enough_apart_or_reclaiming_enough_are_no_storm() {
        assert_eq!(
            facts(3, Some(1), 10_000, 9_900).reason(),
            None,
            "3 inferences on"
        );
        assert_eq!(
            facts(1, Some(3), 10_000, 6_000).reason(),
            None,
            "the one before was far"
        );
        assert!(
            facts(2, Some(2), 10_000, 6_000).reason().is_some(),
            "2 and 2"
        );
        assert_eq!(
            facts(1, None, 10_000, 6_000).reason(),
            None,
            "the first quick one"
        );
        assert_eq!(StormFacts::default().reason(), None, "no automatic capsule");
    }
}
