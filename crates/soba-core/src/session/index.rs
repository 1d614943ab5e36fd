//! The in-memory index of one session: its entries in file order and by id, the entry tree,
//! and the per-entry facts (counts, the capsule, setting and usage report on each branch) that
//! keep every budget and view computation proportional to the model input, not to the whole
//! history. The session ([`super::Session`]) is this index with its tally kept beside it.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::OnceLock;

use super::calls;
use super::entry;
use super::foreign::ForeignCompactions;
use super::store::{Entries, Store};
use super::trigger;
use crate::budget::{Calibration, CountSample};
use crate::session::count::entry_tokens;
use crate::tokens::CalibrationSource;
use crate::tokens::TokenizerKind;
use entry::{Entry, EntryBody, EntryKind, SessionHeader, SettingEntry};

/// Below this many entries to count, threads cost more than they save.
pub(crate) const PARALLEL_COUNT_MIN: usize = 2048;

/// Token counts of one entry with one tokenizer: its cost in the model input as written, and
/// the counts of what the model view derives from it (see [`EntryCounts::derived`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryCounts {
    pub tokens: u32,
    /// What the view makes of the entry beyond its own message, counted so that a resumed
    /// session finds every count it needs recorded (`<log>.tokens`) and never tokenizes to
    /// answer its first budget: a setting's system prompt and tool schemas; a tool-calling
    /// message's stand-in result for each call, in call order (sent while the call has no
    /// result); a source agent's compaction's summary message. Empty for every other entry.
    pub derived: Box<[u32]>,
    /// For an entry with provider usage: its report set against SOBA's count of the content it
    /// measured (see [`Session::count_sample`]), `Some(None)` when it teaches nothing; `None`
    /// when not measured yet. Recorded so that a resumed session learns its count factor
    /// without building a view per report.
    pub sample: Option<Option<CountSample>>,
}

/// A count as recorded: a `u32`, saturated.
fn clamp_count(n: u64) -> u32 {
    n.min(u64::from(u32::MAX)) as u32
}

/// How many derived counts entry `e` has (see [`EntryCounts::derived`]).
fn derived_len(e: &Entry) -> usize {
    match &e.body {
        EntryBody::Setting(_) => 2,
        EntryBody::ForeignCompaction(_) => 1,
        EntryBody::Message(_) => e.tool_calls().count(),
        _ => 0,
    }
}

/// Counts the derived parts of `e` (see [`EntryCounts::derived`]).
fn count_derived(kind: TokenizerKind, e: &Entry) -> Box<[u32]> {
    match &e.body {
        EntryBody::Setting(set) => {
            let count = |t: &Option<String>| t.as_deref().map_or(0, |t| clamp_count(kind.count(t)));
            Box::new([count(&set.system_prompt), count(&set.tool_schemas)])
        }
        EntryBody::ForeignCompaction(f) => Box::new([clamp_count(
            super::foreign::foreign_summary_tokens_of(kind, f),
        )]),
        EntryBody::Message(_) => e
            .tool_calls()
            .map(|(id, _, _)| clamp_count(super::count::interrupted_result_tokens(kind, id)))
            .collect(),
        _ => Box::default(),
    }
}

/// One entry's count, filled once: half the size of `OnceLock<u32>`, and a long log holds one
/// per entry. Counts saturate one below `u32::MAX`, which marks "not counted yet".
#[derive(Debug)]
pub(super) struct Count(std::sync::atomic::AtomicU32);

impl Count {
    const NOT_COUNTED: u32 = u32::MAX;

    fn new() -> Count {
        Count(std::sync::atomic::AtomicU32::new(Self::NOT_COUNTED))
    }

    fn get(&self) -> Option<u32> {
        Some(self.0.load(std::sync::atomic::Ordering::Acquire)).filter(|&n| n != Self::NOT_COUNTED)
    }

    /// Keep `n` unless a count is there already.
    fn set(&self, n: u32) -> u32 {
        use std::sync::atomic::Ordering;
        let n = n.min(Self::NOT_COUNTED - 1);
        match self
            .0
            .compare_exchange(Self::NOT_COUNTED, n, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => n,
            Err(kept) => kept,
        }
    }

    fn get_or_init(&self, count: impl FnOnce() -> u32) -> u32 {
        self.get().unwrap_or_else(|| self.set(count()))
    }
}

/// The derived counts of the entries that have any (most have none), all in one table.
#[derive(Debug, Default)]
pub(super) struct Derived {
    /// Entry index → where its counts start in `values`, and how many.
    at: hashbrown::HashMap<u32, (u32, u32), foldhash::fast::FixedState>,
    values: Vec<Count>,
}

impl Derived {
    fn add(&mut self, idx: u32, len: usize) {
        let start = u32::try_from(self.values.len())
            .expect("a session holds fewer than 4 billion derived counts");
        self.at.insert(idx, (start, len as u32));
        self.values.extend((0..len).map(|_| Count::new()));
    }

    /// The same entries, nothing counted.
    fn like(&self) -> Derived {
        Derived {
            at: self.at.clone(),
            values: self.values.iter().map(|_| Count::new()).collect(),
        }
    }

    /// Entry `idx`'s cells, one per derived count; empty when it has none.
    fn cells(&self, idx: usize) -> &[Count] {
        match self.at.get(&(idx as u32)) {
            Some(&(start, len)) => &self.values[start as usize..(start + len) as usize],
            None => &[],
        }
    }
}

/// Per-entry counts made with one tokenizer.
#[derive(Debug)]
pub(super) struct Counts {
    tokenizer: TokenizerKind,
    tokens: Vec<Count>,
    derived: Derived,
}

impl Counts {
    fn new(tokenizer: TokenizerKind) -> Counts {
        Counts {
            tokenizer,
            tokens: Vec::new(),
            derived: Derived::default(),
        }
    }

    /// Empty counts with `tokenizer` for the entries `other` has counts for: which entries
    /// have derived counts does not depend on the tokenizer.
    fn like(other: &Counts, tokenizer: TokenizerKind) -> Counts {
        Counts {
            tokenizer,
            tokens: other.tokens.iter().map(|_| Count::new()).collect(),
            derived: other.derived.like(),
        }
    }

    fn push(&mut self, e: &Entry) {
        let len = derived_len(e);
        if len > 0 {
            self.derived.add(self.tokens.len() as u32, len);
        }
        self.tokens.push(Count::new());
    }
}

/// An optional entry index per entry, `u32::MAX` for none: half the size of `Option<u32>`,
/// which a long log holds four of per entry.
#[derive(Debug, Default)]
pub(super) struct Links(Vec<u32>);

impl Links {
    const NONE: u32 = u32::MAX;

    fn push(&mut self, link: Option<u32>) {
        self.0.push(link.unwrap_or(Self::NONE));
    }

    pub(super) fn at(&self, idx: usize) -> Option<u32> {
        Some(self.0[idx]).filter(|&l| l != Self::NONE)
    }

    pub(super) fn get(&self, idx: usize) -> Option<Option<u32>> {
        self.0.get(idx).map(|&l| (l != Self::NONE).then_some(l))
    }
}

/// Why an entry could not join the tree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("entry id `{0}` is already used in this session")]
    DuplicateId(String),
    #[error("entry `{id}` names parent `{parent}`, which is not in this session")]
    UnknownParent { id: String, parent: String },
    #[error("rewind target `{0}` is not in this session")]
    UnknownRewindTarget(String),
}

/// The in-memory index of one session: entries in file order, by id, with the per-entry facts
/// that keep every budget and view computation proportional to the model input, not to the
/// whole history. Pure: rebuilt from the log on load.
#[derive(Debug)]
pub struct SessionIndex {
    pub header: SessionHeader,
    pub(super) entries: Store,
    /// Entry indices by id. The table holds indices only, hashed by the entry's own id, so
    /// no id is stored twice (a long log holds hundreds of thousands). Ids are hashed once
    /// per entry on load; foldhash is several times faster than the default SipHash here and
    /// still seeded per process.
    pub(super) by_id: hashbrown::HashTable<u32>,
    pub(super) id_hasher: foldhash::fast::RandomState,
    /// Ids of entries lost to damaged lines, and where their children attach instead.
    pub(super) bridges: HashMap<String, Option<u32>>,
    pub(super) parent: Links,
    /// Each entry's type.
    pub(super) kinds: Vec<EntryKind>,
    /// Each entry's tool-call ids.
    pub(super) calls: calls::CallIndex,
    /// Latest capsule at or above each entry on its branch.
    pub(super) capsule_on_path: Links,
    /// Latest setting entry at or above each entry on its branch.
    pub(super) setting_on_path: Links,
    /// Latest assistant message with provider usage at or above each entry on its branch.
    pub(super) usage_on_path: Links,
    /// Per-entry counts with `tokenizer`, filled when first needed (or from the side file).
    pub(super) counts: Counts,
    /// Counts with another tokenizer, kept across a change of tokenizer: a log is loaded
    /// with the tokenizer its header names and then set to the configured one, which may be
    /// the one its side file was counted with.
    pub(super) other_counts: Option<Counts>,
    /// For each entry with provider usage: its report against SOBA's count of the same
    /// content (see [`Session::count_sample`]), measured once. `None` inside: nothing to learn.
    /// Only entries with provider usage have one: a sparse table, not a slot per entry.
    pub(super) count_samples:
        hashbrown::HashMap<u32, OnceLock<Option<CountSample>>, foldhash::fast::FixedState>,
    pub(super) tokenizer: TokenizerKind,
    /// The factor counts are raised by for the model (see [`Session::calibration`]).
    pub(super) count_factor: (f64, CalibrationSource),
    pub(super) leaf: Option<u32>,
    /// The calibration at the leaf, kept while the leaf's newest usage report and the
    /// configured factor stay the same: a preflight asks for it before every inference.
    pub(super) calibration: OnceLock<Calibration>,
    pub(super) foreign_compactions: ForeignCompactions,
    /// What this machine learned about the agent's unseen context; `None`: the agent's
    /// defaults (see [`Session::unseen_prior`]).
    pub(super) unseen_prior: Option<crate::budget::unseen_allowance::UnseenPrior>,
    /// Whether budgets add the allowances for what the provider counts beyond the log.
    pub(super) allow_for_unseen: bool,
    /// The newest window setting in file order (see [`SettingEntry::window`]).
    pub(super) window: Option<crate::window::WindowSetting>,
    /// Whether any entry was tokenized since the session was loaded (counts taken from the
    /// side file are not): a reader then has counts worth recording.
    pub(super) tokenized: std::sync::atomic::AtomicBool,
}

impl SessionIndex {
    pub fn new(header: SessionHeader, tokenizer: TokenizerKind) -> Self {
        SessionIndex {
            header,
            entries: Store::default(),
            by_id: hashbrown::HashTable::new(),
            id_hasher: foldhash::fast::RandomState::default(),
            bridges: HashMap::new(),
            parent: Links::default(),
            kinds: Vec::new(),
            calls: calls::CallIndex::default(),
            capsule_on_path: Links::default(),
            setting_on_path: Links::default(),
            usage_on_path: Links::default(),
            counts: Counts::new(tokenizer),
            other_counts: None,
            count_samples: Default::default(),
            tokenizer,
            count_factor: (1.0, CalibrationSource::Exact),
            leaf: None,
            calibration: OnceLock::new(),
            foreign_compactions: ForeignCompactions::default(),
            unseen_prior: None,
            allow_for_unseen: true,
            window: None,
            tokenized: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The window setting in force: the newest in the log, on whatever branch.
    pub fn window_setting(&self) -> Option<&crate::window::WindowSetting> {
        self.window.as_ref()
    }

    /// What the model view makes of the source agent's own compactions.
    pub fn foreign_compactions(&self) -> ForeignCompactions {
        self.foreign_compactions
    }

    /// Change what the model view makes of the source agent's own compactions.
    pub(super) fn set_foreign_compactions(&mut self, policy: ForeignCompactions) -> bool {
        if policy != self.foreign_compactions {
            self.foreign_compactions = policy;
            // A sample sets a report against the view, which the policy shapes.
            self.count_samples
                .values_mut()
                .for_each(|cell| *cell = OnceLock::new());
            self.calibration = OnceLock::new();
            return true;
        }
        false
    }

    pub fn tokenizer(&self) -> TokenizerKind {
        self.tokenizer
    }

    /// Change the tokenizer. Counts made with the previous one are set aside, not mixed in;
    /// counts kept for `kind` come back.
    pub(super) fn set_tokenizer(&mut self, kind: TokenizerKind) -> bool {
        if kind != self.tokenizer {
            let next = match self.other_counts.take() {
                Some(kept) if kept.tokenizer == kind => kept,
                _ => Counts::like(&self.counts, kind),
            };
            self.other_counts = Some(std::mem::replace(&mut self.counts, next));
            self.tokenizer = kind;
            self.count_samples
                .values_mut()
                .for_each(|cell| *cell = OnceLock::new());
            self.calibration = OnceLock::new();
            return true;
        }
        false
    }

    /// Take counts of entry `idx` made with `tokenizer` (read from the side file) instead of
    /// counting it. Counts for a tokenizer other than the session's are kept for a later
    /// [`Session::set_tokenizer`].
    pub fn preset_counts(&mut self, tokenizer: TokenizerKind, idx: usize, counts: EntryCounts) {
        let target = if tokenizer == self.tokenizer {
            &mut self.counts
        } else {
            match &mut self.other_counts {
                Some(kept) if kept.tokenizer == tokenizer => kept,
                slot => slot.insert(Counts::like(&self.counts, tokenizer)),
            }
        };
        target.tokens[idx].set(counts.tokens);
        // A sample measures a view of the session's own tokenizer under the default policy
        // for foreign compactions; the side file is written under both.
        if let (Some(sample), true) = (
            counts.sample,
            tokenizer == self.tokenizer
                && self.foreign_compactions == ForeignCompactions::default(),
        ) {
            if let Some(cell) = self.count_samples.get(&(idx as u32)) {
                let _ = cell.set(sample);
            }
        }
        // A record of another shape (another counting of the same line) is not taken.
        let cells = match counts.derived.is_empty() {
            true => &[],
            false => target.derived.cells(idx),
        };
        if counts.derived.len() == cells.len() {
            for (cell, &n) in cells.iter().zip(counts.derived.iter()) {
                cell.set(n);
            }
        }
    }

    /// Every count the side file records for entry `idx` with the session's tokenizer.
    pub fn counts_of(&self, idx: usize) -> EntryCounts {
        if self.counts.tokens[idx].get().is_none() {
            // One read of an entry not parsed yet for both its counts.
            self.entries.with(idx, |e| {
                self.counts.tokens[idx].get_or_init(|| self.tokenize(e));
                self.fill_derived(idx, e);
            });
        }
        EntryCounts {
            tokens: self.tokens_of(idx) as u32,
            derived: self.derived_counts(idx),
            sample: self.measured_sample(idx),
        }
    }

    /// The counts of what the view derives from entry `idx` (see [`EntryCounts::derived`]),
    /// counted once.
    pub fn derived_counts(&self, idx: usize) -> Box<[u32]> {
        self.derived_cells(idx)
            .iter()
            .map(|c| c.get().unwrap_or(0))
            .collect()
    }

    /// The `n`-th derived count of entry `idx`, counted once.
    fn derived_count(&self, idx: usize, n: usize) -> Option<u32> {
        self.derived_cells(idx).get(n).and_then(Count::get)
    }

    /// Entry `idx`'s derived counts, counted (once) if they are not yet.
    fn derived_cells(&self, idx: usize) -> &[Count] {
        let cells = self.counts.derived.cells(idx);
        if cells.iter().any(|c| c.get().is_none()) {
            self.entries.with(idx, |e| self.fill_derived(idx, e));
        }
        cells
    }

    /// Count entry `idx`'s derived counts (`e` is the entry) where they are not counted.
    fn fill_derived(&self, idx: usize, e: &Entry) {
        let cells = self.counts.derived.cells(idx);
        if cells.iter().any(|c| c.get().is_none()) {
            self.tokenized
                .store(true, std::sync::atomic::Ordering::Relaxed);
            for (cell, &n) in cells.iter().zip(count_derived(self.tokenizer, e).iter()) {
                cell.set(n);
            }
        }
    }

    /// The sample of entry `idx` when it has been measured under the default policy for
    /// foreign compactions (what the side file records), without measuring it.
    fn measured_sample(&self, idx: usize) -> Option<Option<CountSample>> {
        if self.foreign_compactions != ForeignCompactions::default() {
            return None;
        }
        self.count_samples
            .get(&(idx as u32))
            .and_then(|cell| cell.get().copied())
    }

    /// Tokens of the stand-in result the view sends for the `call`-th tool call of entry
    /// `call_entry` while the call has no result (0 where the entry has no such call).
    pub fn stand_in_tokens_at(&self, call_entry: usize, call: usize) -> u64 {
        self.derived_count(call_entry, call).map_or(0, u64::from)
    }

    /// Count every entry not counted yet, on several threads when there is much to count
    /// (a first open of a long log).
    pub fn count_all(&self) {
        let todo: Vec<usize> = (0..self.entries.len())
            .filter(|&i| self.counts.tokens[i].get().is_none())
            .collect();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(8);
        if threads < 2 || todo.len() < PARALLEL_COUNT_MIN {
            todo.iter().for_each(|&i| {
                self.counts_of(i);
            });
            return;
        }
        let chunk = todo.len().div_ceil(threads);
        std::thread::scope(|scope| {
            for part in todo.chunks(chunk) {
                scope.spawn(move || {
                    part.iter().for_each(|&i| {
                        self.counts_of(i);
                    })
                });
            }
        });
    }

    /// The factor the model's bills run above SOBA's counts with this tokenizer (1.0 when the
    /// tokenizer is the model's own), and where it comes from: the configuration's or the
    /// catalog's. The session raises it where its own usage reports show more.
    pub fn set_count_factor(&mut self, factor: f64, source: CalibrationSource) {
        self.count_factor = (factor, source);
        self.calibration = OnceLock::new();
    }

    /// Count the way `model` is billed: its tokenizer and its factor.
    pub fn configure_counting(&mut self, model: &crate::config::ModelDef) {
        self.set_tokenizer(model.tokenizer);
        self.set_count_factor(model.count_factor, model.count_factor_source);
    }

    /// Check that `entry` can be appended (unique id, known parent, known rewind target).
    pub fn check(&self, entry: &Entry) -> Result<(), TreeError> {
        self.resolve(entry).map(|_| ())
    }

    /// The indices of `entry`'s parent and rewind target, or why it cannot be appended. Each id
    /// is looked up once: this runs for every line of a log being opened.
    fn resolve(&self, entry: &Entry) -> Result<(Option<u32>, Option<u32>), TreeError> {
        if self.index_of(&entry.id).is_some() {
            return Err(TreeError::DuplicateId(entry.id.clone()));
        }
        let parent = match &entry.parent_id {
            Some(p) => self.slot_of(p).ok_or_else(|| TreeError::UnknownParent {
                id: entry.id.clone(),
                parent: p.clone(),
            })?,
            None => None,
        };
        let rewind_to = match &entry.body {
            EntryBody::Rewind(r) => Some(
                self.slot_of(&r.to)
                    .flatten()
                    .ok_or_else(|| TreeError::UnknownRewindTarget(r.to.clone()))?,
            ),
            _ => None,
        };
        Ok((parent, rewind_to))
    }

    /// Where an entry naming `id` as its parent attaches: `Some(Some(i))` under entry `i`,
    /// `Some(None)` at the root (the parent of a lost root entry), `None` when `id` is unknown.
    fn slot_of(&self, id: &str) -> Option<Option<u32>> {
        match self.index_of(id) {
            Some(i) => Some(Some(i as u32)),
            None => self.bridges.get(id).copied(),
        }
    }

    /// Where an entry naming `id` as its parent attaches, as an index (`None`: the root).
    /// `None` overall when `id` is unknown.
    pub fn attach_point(&self, id: &str) -> Option<Option<usize>> {
        self.slot_of(id).map(|s| s.map(|i| i as usize))
    }

    /// Whether any entry was lost to a damaged line.
    pub fn has_bridges(&self) -> bool {
        !self.bridges.is_empty()
    }

    /// Whether `id` is an entry lost to a damaged line, whose children attach elsewhere.
    pub fn is_bridged(&self, id: &str) -> bool {
        self.index_of(id).is_none() && self.bridges.contains_key(id)
    }

    /// An entry `id` was lost (its line in the log is damaged): entries naming it as their
    /// parent attach to `to` instead, so one bad line does not cut the chain after it.
    pub fn bridge(&mut self, id: String, to: Option<usize>) {
        if self.index_of(&id).is_none() {
            self.bridges.insert(id, to.map(|i| i as u32));
        }
    }

    /// Add an entry to the index and move the leaf: to the entry itself, or to the target of a
    /// `rewind`.
    pub(super) fn push(&mut self, entry: Entry) -> Result<u32, TreeError> {
        let (parent, rewind_to) = self.resolve(&entry)?;
        let idx = self.entries.len() as u32;
        let inherited_capsule = parent.and_then(|p| self.capsule_on_path.at(p as usize));
        let inherited_setting = parent.and_then(|p| self.setting_on_path.at(p as usize));
        // A `/capsule create` hand-off capsule records state without compacting: it never
        // becomes the capsule of the model input. Loaded from a file into a session, it does:
        // continuing from it is the point of loading it.
        let capsule = match &entry.body {
            EntryBody::Capsule(c)
                if c.trigger != trigger::Trigger::Handoff
                    || c.origin == crate::session::capsule::model::Origin::Loaded =>
            {
                Some(idx)
            }
            _ => inherited_capsule,
        };
        let setting = match &entry.body {
            EntryBody::Setting(s) => {
                if let Some(w) = s.window {
                    self.window = Some(w);
                }
                Some(idx)
            }
            _ => inherited_setting,
        };
        let usage = match &entry.body {
            EntryBody::Message(m) if m.role == entry::Role::Assistant && m.usage.is_some() => {
                Some(idx)
            }
            _ => parent.and_then(|p| self.usage_on_path.at(p as usize)),
        };
        let newest_report = |s: &SessionIndex, leaf: Option<u32>| {
            leaf.and_then(|l| s.usage_on_path.get(l as usize).flatten())
        };
        let report_before = newest_report(self, self.leaf);
        self.leaf = rewind_to.or(Some(idx));
        self.parent.push(parent);
        self.kinds.push(entry.body.kind());
        self.calls.push(&entry);
        self.capsule_on_path.push(capsule);
        self.setting_on_path.push(setting);
        self.usage_on_path.push(usage);
        if newest_report(self, self.leaf) != report_before {
            self.calibration = OnceLock::new();
        }
        self.counts.push(&entry);
        if let Some(kept) = &mut self.other_counts {
            kept.push(&entry);
        }
        if usage == Some(idx) {
            self.count_samples.insert(idx, OnceLock::new());
        }
        let hash = self.id_hasher.hash_one(entry.id.as_str());
        self.entries.push(entry);
        let (entries, hasher) = (&self.entries, &self.id_hasher);
        self.by_id.insert_unique(hash, idx, |&i| {
            entries.with_id(i as usize, |id| hasher.hash_one(id))
        });
        Ok(idx)
    }

    /// Every entry, in file order, each parsed when first read.
    pub fn entries(&self) -> Entries<'_> {
        Entries::of(&self.entries)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// `f` of entry `idx`, without keeping it parsed when it is not already (see
    /// [`store`]): for walks over the whole history.
    pub fn with_entry<R>(&self, idx: usize, f: impl FnOnce(&Entry) -> R) -> R {
        self.entries.with(idx, f)
    }

    /// `f` of entry `idx`'s id, without parsing the entry.
    pub fn with_id<R>(&self, idx: usize, f: impl FnOnce(&str) -> R) -> R {
        self.entries.with_id(idx, f)
    }

    /// Make room for `additional` more entries in the index, so that each per-entry table is
    /// sized once: grown by doubling, each would leave its smaller copies behind in the heap.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.entries.reserve(additional);
        for links in [
            &mut self.parent,
            &mut self.capsule_on_path,
            &mut self.setting_on_path,
            &mut self.usage_on_path,
        ] {
            links.0.reserve(additional);
        }
        self.kinds.reserve(additional);
        self.calls.reserve(additional);
        self.counts.tokens.reserve(additional);
        let (entries, hasher) = (&self.entries, &self.id_hasher);
        self.by_id.reserve(additional, |&i| {
            entries.with_id(i as usize, |id| hasher.hash_one(id))
        });
    }

    /// Hold whole lines of the log being read, for entries to be parsed from when first read.
    pub(crate) fn hold_lines(&mut self, bytes: std::sync::Arc<Vec<u8>>) -> u32 {
        self.entries.hold_block(bytes)
    }

    /// Hold entry `idx`, just pushed from `len` bytes at `start` of held lines `block`, as
    /// those bytes rather than parsed (see [`store`]).
    pub(crate) fn shelve(&mut self, idx: usize, block: u32, start: usize, len: usize) -> bool {
        self.entries.shelve(idx, block, start, len)
    }

    /// Free held lines `block` when no entry is still to be parsed from them.
    pub(crate) fn free_lines_if_unneeded(&mut self, block: u32) {
        self.entries.free_block_if_unneeded(block)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn index_of(&self, id: &str) -> Option<usize> {
        let hash = self.id_hasher.hash_one(id);
        self.by_id
            .find(hash, |&i| {
                self.entries.with_id(i as usize, |held| held == id)
            })
            .map(|&i| i as usize)
    }

    pub fn get(&self, id: &str) -> Option<&Entry> {
        self.index_of(id).map(|i| self.entries.get(i))
    }

    pub fn entry(&self, idx: usize) -> &Entry {
        self.entries.get(idx)
    }

    /// Entry `idx`'s type, without parsing it.
    pub fn kind_of(&self, idx: usize) -> EntryKind {
        self.kinds[idx]
    }

    /// The ids of the tool calls entry `idx` makes (an assistant message), or of the one it
    /// answers (a tool result), without parsing it.
    pub fn call_ids_of(&self, idx: usize) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.calls.of(idx)
    }

    /// Whether entry `idx` is an assistant message with provider usage, without parsing it.
    pub fn has_usage(&self, idx: usize) -> bool {
        self.usage_on_path.at(idx) == Some(idx as u32)
    }

    /// The indices of the entries of type `kind`, in file order, parsing none of the others.
    pub fn indices_of(&self, kind: EntryKind) -> impl DoubleEndedIterator<Item = usize> + '_ {
        (0..self.kinds.len()).filter(move |&i| self.kinds[i] == kind)
    }

    pub fn parent_of(&self, idx: usize) -> Option<usize> {
        self.parent.at(idx).map(|p| p as usize)
    }

    /// The entry new entries attach to.
    pub fn leaf(&self) -> Option<usize> {
        self.leaf.map(|l| l as usize)
    }

    pub fn leaf_id(&self) -> Option<&str> {
        self.leaf().map(|i| self.entries.get(i).id.as_str())
    }

    /// Latest capsule on the branch ending at `idx` (inclusive).
    pub fn capsule_on_path(&self, idx: usize) -> Option<usize> {
        self.capsule_on_path.at(idx).map(|c| c as usize)
    }

    /// Tokens the entry costs in the model input, counted once and cached.
    pub fn tokens_of(&self, idx: usize) -> u64 {
        u64::from(
            self.counts.tokens[idx].get_or_init(|| self.entries.with(idx, |e| self.tokenize(e))),
        )
    }

    /// Tokens entry `e` costs, counted with the session's tokenizer.
    fn tokenize(&self, e: &Entry) -> u32 {
        self.tokenized
            .store(true, std::sync::atomic::Ordering::Relaxed);
        clamp_count(entry_tokens(self.tokenizer, e))
    }

    /// Whether any entry was tokenized since the session was loaded (see
    /// [`crate::session::log::SideFile`]).
    pub fn tokenized_since_load(&self) -> bool {
        self.tokenized.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Entry `idx`'s counts when its own count is made (its derived counts made too, where
    /// they are not yet); `None`, counting nothing, when it is not.
    pub fn counts_if_counted(&self, idx: usize) -> Option<EntryCounts> {
        self.counts.tokens[idx].get()?;
        Some(self.counts_of(idx))
    }

    /// Counted (system prompt, tool schemas) text of setting entry `idx`, counted once.
    fn setting_overhead(&self, idx: usize) -> (u32, u32) {
        match *self.derived_counts(idx) {
            [system, tools] if self.kind_of(idx) == EntryKind::Setting => (system, tools),
            _ => (0, 0),
        }
    }

    /// How many entries are held parsed (the others are held as their lines).
    #[cfg(any(test, feature = "test-support"))]
    pub fn parsed_entries(&self) -> usize {
        self.entries.held().0
    }

    /// Which entries are held parsed, with their types: what a test reports when too many are.
    #[cfg(any(test, feature = "test-support"))]
    pub fn parsed_entry_kinds(&self) -> Vec<(usize, EntryKind)> {
        self.entries
            .parsed_indices()
            .into_iter()
            .map(|i| (i, self.kind_of(i)))
            .collect()
    }

    /// Whether entry `idx` has its count with the session's tokenizer already.
    #[cfg(test)]
    pub(crate) fn is_counted(&self, idx: usize) -> bool {
        self.counts.tokens[idx].get().is_some()
    }

    /// Entries from the root to `idx`, oldest first.
    pub fn branch(&self, idx: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut cur = Some(idx);
        while let Some(i) = cur {
            out.push(i);
            cur = self.parent_of(i);
        }
        out.reverse();
        out
    }

    /// Whether `ancestor` is on the branch ending at `idx` (inclusive).
    pub fn is_ancestor(&self, ancestor: usize, idx: usize) -> bool {
        let mut cur = Some(idx);
        while let Some(i) = cur {
            if i == ancestor {
                return true;
            }
            if i < ancestor {
                // Parents always come before children in the file.
                return false;
            }
            cur = self.parent_of(i);
        }
        false
    }

    /// System-prompt and tool-schema tokens in force at `idx`: the newest setting on the branch
    /// that gives each one, as text (counted once per entry) or as a reported count.
    pub fn overhead_at(&self, idx: Option<usize>) -> (u64, u64) {
        let mut system = None;
        let mut tools = None;
        let mut cur = idx.and_then(|i| self.setting_on_path.at(i));
        while let Some(s) = cur {
            let s = s as usize;
            if let EntryBody::Setting(set) = &self.entries.get(s).body {
                let counted = self.setting_overhead(s);
                if system.is_none() {
                    system = set
                        .system_tokens
                        .or(set.system_prompt.as_ref().map(|_| u64::from(counted.0)));
                }
                if tools.is_none() {
                    tools = set
                        .tool_tokens
                        .or(set.tool_schemas.as_ref().map(|_| u64::from(counted.1)));
                }
            }
            if system.is_some() && tools.is_some() {
                break;
            }
            cur = self.parent_of(s).and_then(|p| self.setting_on_path.at(p));
        }
        (system.unwrap_or(0), tools.unwrap_or(0))
    }

    /// The agent model in force at the leaf, as the lowest layer of configuration: the newest
    /// `setting` on the branch that names one (a followed agent switched models), else the
    /// header's.
    pub fn model_config(&self) -> Option<crate::config::ModelFile> {
        match self.settings_at(self.leaf()).model {
            Some(m) => Some(m.to_config()),
            None => self.header.model_config(),
        }
    }

    /// Settings in force at the leaf: later setting entries on the branch override earlier ones.
    pub fn settings_at(&self, idx: Option<usize>) -> SettingEntry {
        let mut chain = Vec::new();
        let mut cur = idx.and_then(|i| self.setting_on_path.at(i));
        while let Some(s) = cur {
            chain.push(s as usize);
            cur = self
                .parent_of(s as usize)
                .and_then(|p| self.setting_on_path.at(p));
        }
        let mut out = SettingEntry::default();
        for i in chain.into_iter().rev() {
            if let EntryBody::Setting(s) = &self.entries.get(i).body {
                merge_setting(&mut out, s);
            }
        }
        out
    }
}

fn merge_setting(into: &mut SettingEntry, s: &SettingEntry) {
    if s.auto_compact.is_some() {
        into.auto_compact = s.auto_compact;
    }
    if s.model.is_some() {
        into.model = s.model.clone();
    }
    if s.system_prompt.is_some() {
        into.system_prompt = s.system_prompt.clone();
        into.system_tokens = None;
    }
    if s.system_tokens.is_some() {
        into.system_tokens = s.system_tokens;
        into.system_prompt = None;
    }
    if s.tool_schemas.is_some() {
        into.tool_schemas = s.tool_schemas.clone();
        into.tool_tokens = None;
    }
    if s.tool_tokens.is_some() {
        into.tool_tokens = s.tool_tokens;
        into.tool_schemas = None;
    }
}
