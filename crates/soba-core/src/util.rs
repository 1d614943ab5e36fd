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

/// `950`, `12.3k`, `1.2M`: a token count in the steps the editors' status bars use. Millions
/// start where the thousands would round to `1000.0k`.
pub fn human_tokens(n: u64) -> String {
    if n >= 999_950 {
        format!("{:.1}M", n as f64 / 1_000_000.0)
    } else if n >= 1000 {
        format!("{:.1}k", n as f64 / 1000.0)
    } else {
        n.to_string()
    }
}

/// Text from a log made safe to print on a terminal: control characters (ESC and the
/// sequences it starts, BEL, backspace, carriage return, C1 controls) and bidirectional
/// overrides are shown as `\u{1b}` escapes instead of acting, so a capsule title or a reason
/// cannot move the cursor, rewrite earlier lines, set the window title or plant a link.
/// Newlines and tabs stay. JSON output never goes through this: it stays exact.
pub fn terminal_text(s: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !s.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::human_tokens;

    #[test]
    fn token_counts_read_in_thousands_then_millions_never_1000k() {
        assert_eq!(human_tokens(950), "950");
        assert_eq!(human_tokens(1000), "1.0k");
        assert_eq!(human_tokens(48_800), "48.8k");
        assert_eq!(human_tokens(999_949), "999.9k");
        assert_eq!(human_tokens(999_950), "1.0M");
        assert_eq!(human_tokens(27_840_100), "27.8M");
    }

    #[test]
    fn terminal_text_escapes_control_characters_and_keeps_newlines() {
        assert!(matches!(
            super::terminal_text("plain\ttext\n"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            super::terminal_text("a\u{1b}[2Jb\u{7}c\rd\u{9b}e\u{202e}f"),
            "a\\u{1b}[2Jb\\u{7}c\\u{d}d\\u{9b}e\\u{202e}f"
        );
    }

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
