//! Sessions: entries, the in-memory index of the entry tree, the model-input view, and the
//! append-only JSONL log on disk.

mod calibrate;
mod calls;
pub mod capsule;
pub mod count;
mod decode;
pub mod entry;
pub mod foreign;
pub mod index;
pub mod log;
pub mod rewind;
mod store;
pub mod tally;
pub mod token_file;
pub mod trigger;
pub mod turn;
pub mod unseen_measure;
pub mod unseen_priors;
pub mod view;

use std::ops::{Deref, DerefMut};
use std::sync::OnceLock;

use crate::tokens::TokenizerKind;
use entry::{Entry, SessionHeader};
use foreign::ForeignCompactions;
use index::{SessionIndex, TreeError};
// `store` is private: this is the one path to the type `SessionIndex::entries` returns.
pub use store::Entries;

/// One session: its index ([`SessionIndex`], which it dereferences to) and the tally of budget
/// and turn facts at the leaf, kept beside the index so that each append updates it.
#[derive(Debug)]
pub struct Session {
    index: SessionIndex,
    /// Budget and turn facts at the leaf; empty until first asked for, and after an entry
    /// that reshapes the view.
    tally: OnceLock<tally::Tally>,
}

impl Deref for Session {
    type Target = SessionIndex;
    fn deref(&self) -> &SessionIndex {
        &self.index
    }
}

impl DerefMut for Session {
    fn deref_mut(&mut self) -> &mut SessionIndex {
        &mut self.index
    }
}

impl Session {
    pub fn new(header: SessionHeader, tokenizer: TokenizerKind) -> Self {
        Session {
            index: SessionIndex::new(header, tokenizer),
            tally: OnceLock::new(),
        }
    }

    /// Add an entry to the index and move the leaf: to the entry itself, or to the target of a
    /// `rewind`. The tally follows the entry, or is built again when the entry reshapes the
    /// view.
    pub fn push(&mut self, entry: Entry) -> Result<(), TreeError> {
        let idx = self.index.push(entry)?;
        if let Some(mut t) = self.tally.take() {
            if t.apply(&self.index, idx as usize) {
                self.tally = OnceLock::from(t);
            }
        }
        Ok(())
    }

    /// Change the tokenizer. Counts made with the previous one are set aside, not mixed in;
    /// counts kept for `kind` come back.
    pub fn set_tokenizer(&mut self, kind: TokenizerKind) {
        if self.index.set_tokenizer(kind) {
            self.tally = OnceLock::new();
        }
    }

    /// Change what the model view makes of the source agent's own compactions.
    pub fn set_foreign_compactions(&mut self, policy: ForeignCompactions) {
        if self.index.set_foreign_compactions(policy) {
            self.tally = OnceLock::new();
        }
    }

    /// The budget's parts and the turn's facts at the leaf: built from the model view on first
    /// use, then kept up to date by each append (see [`tally`]).
    pub fn tally(&self) -> &tally::Tally {
        self.tally.get_or_init(|| tally::Tally::build(&self.index))
    }
}

#[cfg(any(test, feature = "test-support"))]
pub mod testing;
