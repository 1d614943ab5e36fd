//! Small helpers shared across layers.

use std::time::SystemTime;

/// Current time as RFC 3339 with milliseconds, UTC.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// A short random id with a prefix, e.g. `ck_3f9a1c2b7d4e`.
pub fn new_id(prefix: &str) -> String {
    use rand::Rng;
    let n: u64 = rand::rng().random();
    format!("{prefix}{:012x}", n & 0xffff_ffff_ffff)
}

/// Levenshtein distance, for did-you-mean suggestions.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The closest candidate within a small distance, case-insensitively.
pub fn did_you_mean<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let lw = word.to_ascii_lowercase();
    candidates
        .iter()
        .map(|c| (edit_distance(&lw, &c.to_ascii_lowercase()), *c))
        .filter(|(d, c)| *d <= (c.len() / 3).max(2))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// `12.3k`-style rendering of a token count.
pub fn human_tokens(n: u64) -> String {
    if n >= 1000 {
        format!("{:.1}k", n as f64 / 1000.0)
    } else {
        n.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_key() {
        let keys = ["keepRecentTokens", "timeoutMs"];
        assert_eq!(
            did_you_mean("keepRecentToken", &keys),
            Some("keepRecentTokens")
        );
        assert_eq!(did_you_mean("timeout_ms", &keys), Some("timeoutMs"));
        assert_eq!(did_you_mean("zzz", &keys), None);
    }
}
