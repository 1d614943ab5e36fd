//! What the log says about the current agent turn: soft compaction attempts, overflow
//! recoveries, and the pending intents of soft triggers.

use super::entry::{EntryBody, EntryKind, IntentAction, Outcome, Role};
use super::index::SessionIndex;
use crate::session::trigger::Trigger;

/// A soft trigger's request for a compaction at the next preflight, not yet consumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingIntent {
    pub entry_id: String,
    pub trigger: Trigger,
    pub label: Option<String>,
}

/// What the log says about the current agent turn.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnFacts {
    /// The turn's one soft attempt is spent: a soft compaction ran, was skipped or was
    /// cancelled in this turn, or a hard-limit compaction ran (it already rewrote the input the
    /// soft attempt would have).
    pub soft_attempted: bool,
    /// Overflow recovery compactions in this turn.
    pub overflow_recoveries: u32,
    /// The last overflow recovery of this turn failed, or a second overflow was reported.
    pub overflow_exhausted: bool,
    /// Why the turn's last failed overflow recovery failed (its record's reason).
    pub overflow_failure: Option<String>,
    /// Pending intents, oldest first.
    pub pending: Vec<PendingIntent>,
}

/// Whether a compaction with this trigger, in whatever outcome, spends the turn's one soft
/// attempt (spec §4: "At most one soft attempt runs per agent turn"). Explicit, hand-off and
/// overflow-recovery compactions follow their own rules.
pub fn spends_the_soft_attempt(trigger: Trigger) -> bool {
    trigger.is_soft() || trigger == Trigger::HardLimit
}

/// Read the turn facts at `leaf`: walk back to the start of the turn (the latest real user
/// prompt) for attempts, and to the latest capsule for pending intents.
pub fn turn_facts(session: &SessionIndex, leaf: Option<usize>) -> TurnFacts {
    let mut facts = TurnFacts::default();
    let mut in_turn = true;
    let mut consumed: Vec<String> = Vec::new();
    let mut recorded: Vec<PendingIntent> = Vec::new();
    let mut cur = leaf;
    while let Some(i) = cur {
        // Past the turn's start only intents and the capsule still matter: the others, most
        // of a long history, are passed by their type without parsing them.
        if !in_turn && !matches!(session.kind_of(i), EntryKind::Intent | EntryKind::Capsule) {
            cur = session.parent_of(i);
            continue;
        }
        let e = session.entry(i);
        match &e.body {
            EntryBody::Message(m) if m.role == Role::User && !m.synthetic => in_turn = false,
            EntryBody::Capsule(c) => {
                if in_turn {
                    facts.soft_attempted |= spends_the_soft_attempt(c.trigger);
                    if c.trigger == Trigger::ContextOverflow {
                        facts.overflow_recoveries += 1;
                    }
                }
                // Intents before a capsule were served by a compaction.
                break;
            }
            EntryBody::Compaction(r) if in_turn => {
                facts.soft_attempted |= spends_the_soft_attempt(r.trigger);
                if r.trigger == Trigger::ContextOverflow {
                    facts.overflow_recoveries += 1;
                    if r.outcome == Outcome::Failed {
                        facts.overflow_exhausted = true;
                        // The walk goes back in time: the first failure met is the latest.
                        facts
                            .overflow_failure
                            .get_or_insert_with(|| r.reason.clone());
                    }
                }
            }
            EntryBody::Intent(intent) => match intent.action {
                IntentAction::Consumed => consumed.extend(intent.intent_id.clone()),
                IntentAction::Recorded => {
                    if !consumed.contains(&e.id) {
                        recorded.push(PendingIntent {
                            entry_id: e.id.clone(),
                            trigger: intent.trigger,
                            label: intent.label.clone(),
                        });
                    }
                }
            },
            _ => {}
        }
        cur = session.parent_of(i);
    }
    recorded.reverse();
    facts.pending = recorded;
    facts
}
