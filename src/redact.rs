//! Secret redaction for everything that leaves a session: exported `.capsule.md` files,
//! Project Memory and flight records.
//!
//! Pure and regex-based. The rules are compiled once and applied in a fixed order, most
//! specific first, so a key gets its own kind (`openai_key`) rather than the generic one
//! (`env_secret`) of the assignment it sits in. Each secret becomes `[redacted:<kind>]`.
//! Redaction is idempotent: the marker itself never matches a rule.
//!
//! Shapes that look like secrets but are not (commit hashes, UUIDs, digests, base64 test
//! data, placeholders such as `$API_KEY` or `<your-token>`) are left alone: every rule needs
//! a vendor prefix, a structural anchor (`Bearer`, `user:pass@`, `KEY=`), or both, and the
//! looser prefixes also need a value that looks random.
//!
//! Stripe publishable keys (`pk_live_…`) are public by design and are not redacted.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::LazyLock;

use regex::{Captures, Regex};
use serde::Serialize;

/// What a redacted secret was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretKind {
    PrivateKey,
    UrlCredentials,
    AnthropicKey,
    OpenaiKey,
    GithubToken,
    GitlabToken,
    AwsAccessKey,
    AwsSecretKey,
    GcpApiKey,
    GcpOauthToken,
    SlackToken,
    SlackWebhook,
    StripeKey,
    NpmToken,
    HuggingfaceToken,
    Jwt,
    BearerToken,
    EnvSecret,
}

impl SecretKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SecretKind::PrivateKey => "private_key",
            SecretKind::UrlCredentials => "url_credentials",
            SecretKind::AnthropicKey => "anthropic_key",
            SecretKind::OpenaiKey => "openai_key",
            SecretKind::GithubToken => "github_token",
            SecretKind::GitlabToken => "gitlab_token",
            SecretKind::AwsAccessKey => "aws_access_key",
            SecretKind::AwsSecretKey => "aws_secret_key",
            SecretKind::GcpApiKey => "gcp_api_key",
            SecretKind::GcpOauthToken => "gcp_oauth_token",
            SecretKind::SlackToken => "slack_token",
            SecretKind::SlackWebhook => "slack_webhook",
            SecretKind::StripeKey => "stripe_key",
            SecretKind::NpmToken => "npm_token",
            SecretKind::HuggingfaceToken => "huggingface_token",
            SecretKind::Jwt => "jwt",
            SecretKind::BearerToken => "bearer_token",
            SecretKind::EnvSecret => "env_secret",
        }
    }

    /// The text that replaces a secret of this kind.
    pub fn marker(self) -> String {
        format!("[redacted:{}]", self.as_str())
    }
}

impl std::fmt::Display for SecretKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How many secrets of each kind were redacted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RedactionReport {
    pub counts: BTreeMap<SecretKind, usize>,
}

impl RedactionReport {
    pub fn total(&self) -> usize {
        self.counts.values().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Fold another report into this one.
    pub fn merge(&mut self, other: &RedactionReport) {
        for (k, n) in &other.counts {
            *self.counts.entry(*k).or_default() += n;
        }
    }

    /// `2 secrets redacted (openai_key, env_secret)`, or `None` when nothing was.
    pub fn summary(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let kinds: Vec<&str> = self.counts.keys().map(|k| k.as_str()).collect();
        let n = self.total();
        Some(format!(
            "{n} secret{} redacted ({})",
            if n == 1 { "" } else { "s" },
            kinds.join(", ")
        ))
    }
}

/// One detection rule: the capture group `secret` (or the whole match) is replaced when the
/// optional check accepts it.
struct Rule {
    kind: SecretKind,
    regex: Regex,
    check: Option<fn(&str) -> bool>,
}

fn rule(kind: SecretKind, pattern: &str, check: Option<fn(&str) -> bool>) -> Rule {
    Rule {
        kind,
        regex: Regex::new(pattern).expect("redaction pattern compiles"),
        check,
    }
}

/// Real keys are random: they mix digits with upper- and lower-case letters. Prose and
/// identifiers (`sk-learn-style-config-name`) do not.
fn looks_random(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_digit())
        && s.bytes().any(|b| b.is_ascii_uppercase())
        && s.bytes().any(|b| b.is_ascii_lowercase())
}

/// Not a placeholder run such as `AKIAXXXXXXXXXXXXXXXX`.
fn varied(s: &str) -> bool {
    let distinct: std::collections::HashSet<char> = s.chars().collect();
    distinct.len() >= 8
}

fn has_digit_and_letter(s: &str) -> bool {
    s.bytes().any(|b| b.is_ascii_digit()) && s.bytes().any(|b| b.is_ascii_alphabetic())
}

/// A value assigned to a secret-named variable that is a real value, not a reference or a
/// placeholder (`$TOKEN`, `${TOKEN}`, `<your-key>`, `{{ secret }}`, `xxxx`, `changeme`).
fn is_literal_secret_value(v: &str) -> bool {
    let v = v.trim_matches(|c| c == '"' || c == '\'' || c == '\\');
    if v.len() < 4 || v.starts_with("[redacted:") {
        return false;
    }
    // References and templates: `$X`, `${X}`, `<x>`, `{x}`, `{{ x }}`, `%s`, `%(x)s`.
    if v.starts_with(['$', '<', '{', '%']) {
        return false;
    }
    let first = v.chars().next().unwrap_or(' ');
    if v.chars().all(|c| c == first) {
        return false;
    }
    let lower = v.to_ascii_lowercase();
    const PLACEHOLDERS: &[&str] = &[
        "changeme",
        "placeholder",
        "redacted",
        "example",
        "dummy",
        "null",
        "true",
        "false",
    ];
    const PLACEHOLDER_PARTS: &[&str] = &[
        "your",
        "xxxx",
        "****",
        "...",
        "…",
        "replace",
        "change-me",
        "change_me",
        "<",
        ">",
    ];
    if PLACEHOLDERS.contains(&lower.as_str()) || PLACEHOLDER_PARTS.iter().any(|p| lower.contains(p))
    {
        return false;
    }
    true
}

static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    use SecretKind::*;
    vec![
        // PEM blocks, also inside JSON strings where newlines are `\n`; an unterminated block
        // (a truncated paste) is redacted up to the end of its base64 body.
        rule(
            PrivateKey,
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|(?:(?:\r?\n|\\n)[A-Za-z0-9+/=]{16,})*)",
            None,
        ),
        // `scheme://user:password@host`: only the user-info goes; the host stays readable.
        rule(
            UrlCredentials,
            r#"\b[a-zA-Z][a-zA-Z0-9+.-]*://(?P<secret>[^\s:/@\[\]'"<>]*:[^\s@/'"<>]+)@"#,
            Some(|s| {
                s.split_once(':')
                    .is_some_and(|(_, p)| is_literal_secret_value(p))
            }),
        ),
        rule(
            SlackWebhook,
            r"https://hooks\.slack\.com/(?:services|workflows)/T[A-Z0-9]{6,}/[A-Z0-9]{6,}/[A-Za-z0-9]{16,}",
            None,
        ),
        rule(
            AnthropicKey,
            r"\bsk-ant-[a-z]{2,8}\d{0,3}-[A-Za-z0-9_-]{32,}",
            None,
        ),
        rule(
            OpenaiKey,
            r"\bsk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}",
            Some(looks_random),
        ),
        rule(
            GithubToken,
            r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}\b|\bgithub_pat_[A-Za-z0-9_]{50,}\b",
            None,
        ),
        rule(
            GitlabToken,
            r"\bgl(?:pat|dt|rt|ptt|cbt|soat|ft|imt|agent)-[A-Za-z0-9_-]{20,}",
            Some(varied),
        ),
        rule(
            AwsAccessKey,
            r"\b(?:AKIA|ASIA|ABIA|ACCA|AROA|AIDA)[A-Z0-9]{16}\b",
            Some(varied),
        ),
        rule(
            AwsSecretKey,
            r#"(?i)\baws_?secret_?(?:access_?)?key["']?\s*[:=]\s*["']?(?P<secret>[A-Za-z0-9/+=]{40})\b"#,
            Some(has_digit_and_letter),
        ),
        rule(GcpApiKey, r"\bAIza[0-9A-Za-z_-]{35}\b", None),
        rule(
            GcpOauthToken,
            r"\bya29\.[0-9A-Za-z_-]{20,}",
            Some(has_digit_and_letter),
        ),
        rule(
            SlackToken,
            r"\bxox[abposre]-[A-Za-z0-9-]{10,}",
            Some(|s| s.bytes().filter(u8::is_ascii_digit).count() >= 6),
        ),
        rule(
            StripeKey,
            r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b|\bwhsec_[A-Za-z0-9]{24,}\b",
            Some(has_digit_and_letter),
        ),
        rule(
            NpmToken,
            r"\bnpm_[A-Za-z0-9]{36}\b",
            Some(has_digit_and_letter),
        ),
        rule(
            HuggingfaceToken,
            r"\bhf_[A-Za-z0-9]{30,}\b",
            Some(looks_random),
        ),
        rule(
            Jwt,
            r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
            None,
        ),
        rule(
            BearerToken,
            r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/-]{16,}=*)",
            Some(has_digit_and_letter),
        ),
        // `.env`-style and shell assignments to upper-case secret names: `export GITHUB_TOKEN=…`,
        // `DB_PASSWORD="…"`, `API_KEY=… npm test`. Shell and `.env` allow no spaces around `=`,
        // which keeps program code (`api_key = os.environ[…]`) out.
        rule(
            EnvSecret,
            r#"(?m)(?:^|[\s;&|("'`])(?:export\s+)?[A-Z0-9_]*(?:_KEY|_TOKEN|_SECRET|PASSWORD|_PASSWD|_PWD)=(?P<secret>"[^"\n]*"|'[^'\n]*'|\\"[^"\\\n]*\\"|[^\s"'`;&|)\\]+)"#,
            Some(is_literal_secret_value),
        ),
    ]
});

/// Apply one rule; `None` when it changed nothing.
fn apply(rule: &Rule, text: &str, report: &mut RedactionReport) -> Option<String> {
    let mut hits = 0usize;
    let out = rule.regex.replace_all(text, |caps: &Captures| {
        let whole = caps.get(0).expect("group 0 always matches");
        let secret = caps.name("secret").unwrap_or(whole);
        if rule.check.is_some_and(|check| !check(secret.as_str())) {
            return whole.as_str().to_string();
        }
        hits += 1;
        let start = secret.start() - whole.start();
        let end = secret.end() - whole.start();
        let w = whole.as_str();
        format!("{}{}{}", &w[..start], rule.kind.marker(), &w[end..])
    });
    if hits == 0 {
        return None;
    }
    *report.counts.entry(rule.kind).or_default() += hits;
    Some(out.into_owned())
}

/// Redact every secret in `text`, and say what was found.
pub fn redact_with_report(text: &str) -> (Cow<'_, str>, RedactionReport) {
    let mut report = RedactionReport::default();
    let mut current: Cow<'_, str> = Cow::Borrowed(text);
    for rule in RULES.iter() {
        if let Some(changed) = apply(rule, &current, &mut report) {
            current = Cow::Owned(changed);
        }
    }
    (current, report)
}

/// Redact every secret in `text`. Borrows when there is nothing to redact.
pub fn redact(text: &str) -> Cow<'_, str> {
    redact_with_report(text).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_text_is_borrowed() {
        assert!(matches!(redact("nothing to see here"), Cow::Borrowed(_)));
    }

    #[test]
    fn only_the_secret_part_is_replaced() {
        let url = format!("postgres://app:{}@db.internal:5432/prod", "s3cr3t-Pa55");
        assert_eq!(
            redact(&url),
            "postgres://[redacted:url_credentials]@db.internal:5432/prod"
        );
        let env = format!("export DB_PASSWORD=\"{}\" # prod", "hunter2-Hunter2");
        assert_eq!(
            redact(&env),
            "export DB_PASSWORD=[redacted:env_secret] # prod"
        );
    }

    #[test]
    fn specific_kind_wins_over_env_assignment() {
        let key = format!("sk-proj-{}", "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z");
        let text = format!("OPENAI_API_KEY={key}");
        let (out, report) = redact_with_report(&text);
        assert_eq!(out, "OPENAI_API_KEY=[redacted:openai_key]");
        assert_eq!(report.counts.get(&SecretKind::OpenaiKey), Some(&1));
        assert_eq!(report.counts.get(&SecretKind::EnvSecret), None);
        assert_eq!(
            report.summary().as_deref(),
            Some("1 secret redacted (openai_key)")
        );
    }
}
