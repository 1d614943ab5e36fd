//! Cut points: where the retained tail begins.
//!
//! A cut keeps at least `keepRecentTokens` of the newest complete entries, starts only at a
//! user or assistant message, and never separates a tool call from its results.

/// What a cut needs to know about one model-visible entry, in branch order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CutItem {
    /// A user or assistant message (a possible start of the retained tail).
    pub is_message: bool,
    pub tokens: u64,
    /// Tool calls this entry makes.
    pub calls: Vec<String>,
    /// The call this entry is a result of.
    pub result_of: Option<String>,
}

/// For each position: may the retained tail start here?
pub fn valid_starts(items: &[CutItem]) -> Vec<bool> {
    use std::collections::HashMap;
    let mut call_at: HashMap<&str, usize> = HashMap::new();
    // +1 at a call's position + 1, −1 after its result: positions inside a call→result span
    // would separate them.
    let mut delta = vec![0i64; items.len() + 1];
    for (pos, item) in items.iter().enumerate() {
        for c in &item.calls {
            call_at.insert(c.as_str(), pos);
        }
        if let Some(c) = &item.result_of {
            if let Some(&cp) = call_at.get(c.as_str()) {
                delta[cp + 1] += 1;
                delta[pos + 1] -= 1;
            }
        }
    }
    let mut open = 0i64;
    items
        .iter()
        .enumerate()
        .map(|(pos, item)| {
            open += delta[pos];
            item.is_message && open == 0
        })
        .collect()
}

/// Tokens from each position to the end.
pub fn suffix_tokens(items: &[CutItem]) -> Vec<u64> {
    let mut out = vec![0; items.len() + 1];
    for i in (0..items.len()).rev() {
        out[i] = out[i + 1] + items[i].tokens;
    }
    out
}

/// The latest valid start that keeps at least `keep_recent` tokens. `None` when the whole
/// history is within the retained window (nothing can be summarized).
pub fn choose_cut(items: &[CutItem], keep_recent: u64) -> Option<usize> {
    let valid = valid_starts(items);
    let suffix = suffix_tokens(items);
    (0..items.len())
        .rev()
        .find(|&p| valid[p] && suffix[p] >= keep_recent)
        .filter(|&p| p > 0)
}

/// The earliest valid start in `from..until` whose tail fits in `room` tokens; else the last
/// valid start there (the smallest tail a cut can give without passing `until`).
pub fn fit_cut(items: &[CutItem], from: usize, until: usize, room: u64) -> (usize, bool) {
    let valid = valid_starts(items);
    let suffix = suffix_tokens(items);
    let until = until.min(items.len());
    if let Some(p) = (from..until).find(|&p| valid[p] && suffix[p] <= room) {
        return (p, true);
    }
    let last = (from..until).rev().find(|&p| valid[p]).unwrap_or(from);
    (last, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn msg(tokens: u64) -> CutItem {
        CutItem {
            is_message: true,
            tokens,
            ..CutItem::default()
        }
    }
    fn call(tokens: u64, id: &str) -> CutItem {
        CutItem {
            is_message: true,
            tokens,
            calls: vec![id.into()],
            result_of: None,
        }
    }
    fn result(tokens: u64, id: &str) -> CutItem {
        CutItem {
            is_message: false,
            tokens,
            calls: vec![],
            result_of: Some(id.into()),
        }
    }

    #[test]
    fn keeps_at_least_keep_recent_tokens() {
        let items = [msg(100), msg(100), msg(100), msg(100)];
        assert_eq!(choose_cut(&items, 150), Some(2));
        assert_eq!(choose_cut(&items, 200), Some(2));
        assert_eq!(choose_cut(&items, 201), Some(1));
    }

    #[test]
    fn nothing_to_summarize_when_everything_fits_the_window() {
        let items = [msg(100), msg(100)];
        assert_eq!(choose_cut(&items, 500), None);
        assert_eq!(
            choose_cut(&items, 200),
            None,
            "a cut at 0 summarizes nothing"
        );
    }

    /// Spec §2.1: "Tool calls are never split from their results at the compaction boundary."
    #[test]
    fn tool_calls_are_never_split_from_their_results_at_the_compaction_boundary() {
        // user, assistant(call a), result a, user
        let items = [msg(10), call(10, "a"), result(500, "a"), msg(10)];
        let valid = valid_starts(&items);
        assert_eq!(valid, [true, true, false, true]);
        // Keeping 100 tokens would start at the result: the cut moves to the call.
        assert_eq!(choose_cut(&items, 100), Some(1));
    }

    #[test]
    fn parallel_calls_with_interleaved_messages_stay_together() {
        let items = [
            msg(1),
            call(1, "a"),
            call(1, "b"),
            result(1, "a"),
            msg(1),
            result(1, "b"),
            msg(1),
        ];
        assert_eq!(
            valid_starts(&items),
            [true, true, false, false, false, false, true]
        );
    }

    #[test]
    fn fit_cut_moves_later_to_fit_or_reports_no_fit() {
        let items = [msg(100), msg(100), msg(5000), msg(100)];
        assert_eq!(fit_cut(&items, 1, items.len(), 200), (3, true));
        assert_eq!(fit_cut(&items, 1, items.len(), 50), (3, false));
    }

    #[test]
    fn fit_cut_stops_at_its_bound_even_when_a_later_start_would_fit() {
        let items = [msg(100), msg(100), msg(5000), msg(100)];
        assert_eq!(fit_cut(&items, 0, 3, 200), (2, false));
        assert_eq!(fit_cut(&items, 0, 3, 5100), (2, true));
    }

    proptest! {
        /// A cut never separates a call from its result, whatever the interleaving.
        #[test]
        fn a_cut_never_separates_a_call_from_its_result(
            shape in proptest::collection::vec((0u8..4, 1u64..400), 1..60),
            keep in 0u64..4000,
        ) {
            let mut items = Vec::new();
            let mut open: Vec<String> = Vec::new();
            let mut n = 0;
            for (kind, tokens) in shape {
                match kind {
                    0 => items.push(msg(tokens)),
                    1 => { n += 1; let id = format!("c{n}"); open.push(id.clone()); items.push(call(tokens, &id)); }
                    _ => if let Some(id) = open.pop() { items.push(result(tokens, &id)); } else { items.push(msg(tokens)); },
                }
            }
            if let Some(p) = choose_cut(&items, keep) {
                prop_assert!(items[p].is_message);
                let before: Vec<&String> = items[..p].iter().flat_map(|i| i.calls.iter()).collect();
                for later in &items[p..] {
                    if let Some(r) = &later.result_of {
                        prop_assert!(!before.contains(&r), "result of {r} kept without its call");
                    }
                }
                prop_assert!(suffix_tokens(&items)[p] >= keep);
            }
        }
    }
}
