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

use regex::{Captures, Regex, RegexSet};
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
    AwsSessionToken,
    AzureKey,
    GcpApiKey,
    GcpOauthToken,
    GoogleOauthSecret,
    SlackToken,
    SlackWebhook,
    StripeKey,
    NpmToken,
    HuggingfaceToken,
    TwilioKey,
    SendgridKey,
    MailgunKey,
    ShopifyToken,
    DigitaloceanToken,
    PypiToken,
    DockerToken,
    TelegramToken,
    DiscordToken,
    Jwt,
    BearerToken,
    BasicAuth,
    ApiKeyHeader,
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
            SecretKind::AwsSessionToken => "aws_session_token",
            SecretKind::AzureKey => "azure_key",
            SecretKind::GcpApiKey => "gcp_api_key",
            SecretKind::GcpOauthToken => "gcp_oauth_token",
            SecretKind::GoogleOauthSecret => "google_oauth_secret",
            SecretKind::SlackToken => "slack_token",
            SecretKind::SlackWebhook => "slack_webhook",
            SecretKind::StripeKey => "stripe_key",
            SecretKind::NpmToken => "npm_token",
            SecretKind::HuggingfaceToken => "huggingface_token",
            SecretKind::TwilioKey => "twilio_key",
            SecretKind::SendgridKey => "sendgrid_key",
            SecretKind::MailgunKey => "mailgun_key",
            SecretKind::ShopifyToken => "shopify_token",
            SecretKind::DigitaloceanToken => "digitalocean_token",
            SecretKind::PypiToken => "pypi_token",
            SecretKind::DockerToken => "docker_token",
            SecretKind::TelegramToken => "telegram_token",
            SecretKind::DiscordToken => "discord_token",
            SecretKind::Jwt => "jwt",
            SecretKind::BearerToken => "bearer_token",
            SecretKind::BasicAuth => "basic_auth",
            SecretKind::ApiKeyHeader => "api_key_header",
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

/// What a rule's match must also satisfy before it is replaced.
#[derive(Clone, Copy)]
enum Check {
    /// Every match is a secret.
    None,
    /// The secret (the `secret` group, or the whole match) must pass.
    Value(fn(&str) -> bool),
    /// An assignment: the variable's name (group `name`) and its value must pass together.
    Named(fn(&str, &str) -> bool),
}

/// One detection rule: the capture group `secret` (or the whole match) is replaced when the
/// check accepts it.
struct Rule {
    kind: SecretKind,
    regex: Regex,
    check: Check,
}

fn rule(kind: SecretKind, pattern: &str, check: Check) -> Rule {
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

fn unquoted(v: &str) -> &str {
    v.trim_matches(|c| c == '"' || c == '\'' || c == '\\')
}

/// A value assigned to a secret-named variable that is a real value, not a reference or a
/// placeholder (`$TOKEN`, `${TOKEN}`, `<your-key>`, `{{ secret }}`, `xxxx`, `changeme`).
fn is_literal_secret_value(v: &str) -> bool {
    let v = unquoted(v);
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
        "none",
        "true",
        "false",
        "required",
        "optional",
        "string",
        "secret",
        "password",
        "token",
        "undefined",
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

/// Program code rather than a value: a call, an index, an attribute path (`os.environ[…]`,
/// `self.password`, `request.form`).
fn is_code(v: &str) -> bool {
    let v = unquoted(v);
    if v.contains(['(', '[', '{']) {
        return true;
    }
    let ident = |p: &str| {
        !p.is_empty()
            && p.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let parts: Vec<&str> = v.split('.').collect();
    parts.len() > 1 && parts.iter().all(|p| ident(p)) && !v.bytes().any(|b| b.is_ascii_digit())
}

/// An identifier-like word with no digit (`created_at`, `user_id`, `createdAt`, `sha256` has
/// one): the value of a sort key, a column name, a mode, not a credential.
fn is_plain_word(v: &str) -> bool {
    let v = unquoted(v);
    !v.bytes().any(|b| b.is_ascii_digit())
        && v.chars()
            .all(|c| c.is_ascii_alphabetic() || c == '_' || c == '-')
}

/// The words of a variable name, lower-case: `DB_PASSWORD` → `db password`,
/// `--api-key` → `api key`, `clientSecret` → `client secret`.
fn name_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        word.push(c.to_ascii_lowercase());
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// Names whose `…_KEY` is a database or data-structure key, not a credential.
const ORDINARY_KEY_WORDS: &[&str] = &[
    "sort",
    "primary",
    "foreign",
    "partition",
    "range",
    "cache",
    "hash",
    "lookup",
    "idempotency",
    "unique",
    "composite",
    "index",
    "map",
    "dedup",
    "group",
    "shard",
    "routing",
    "object",
    "s3",
    "row",
    "column",
    "order",
    "hot",
    "max",
    "min",
    "default",
    "storage",
];

/// Whether `name = value` assigns a credential.
///
/// Public halves (`PUBLIC_KEY`, `STRIPE_PUBLISHABLE_KEY`, `NEXT_PUBLIC_…`) never are. A
/// password-like name takes any literal value that is not code (`password=self.password`);
/// key- and token-like names also need a value that is no plain word and no number
/// (`SORT_KEY=created_at`, `DEFAULT_MAX_TOKEN=4096`).
fn is_secret_assignment(name: &str, value: &str) -> bool {
    let words = name_words(name);
    let Some(last) = words.last().map(String::as_str) else {
        return false;
    };
    if words
        .iter()
        .any(|w| matches!(w.as_str(), "public" | "publishable" | "pub"))
    {
        return false;
    }
    if !is_literal_secret_value(value) || is_code(value) {
        return false;
    }
    let v = unquoted(value);
    // Public keys and publishable keys are meant to be shared.
    if v.starts_with("ssh-") || v.starts_with("ecdsa-") || v.starts_with("pk_") {
        return false;
    }
    let password_like = matches!(last, "password" | "passwd" | "pwd" | "pass" | "passphrase");
    if password_like {
        // A bare `pass` is a verdict or a keyword far more often than a password.
        if words.len() == 1 && last == "pass" {
            return false;
        }
        // `password=password`, `db_password=db_pass`: the same words, not a value.
        let lower = v.to_ascii_lowercase();
        return !(words.contains(&lower) || (is_plain_word(v) && v.contains('_')));
    }
    let secret_like = matches!(
        last,
        "secret" | "token" | "key" | "apikey" | "credentials" | "credential" | "auth"
    );
    if !secret_like {
        return false;
    }
    if last == "key" {
        let qualifier = words.len().checked_sub(2).map(|i| words[i].as_str());
        match qualifier {
            // A bare `key=…` is any dictionary key.
            None => return false,
            Some(q) if ORDINARY_KEY_WORDS.contains(&q) => return false,
            _ => {}
        }
    }
    if words.len() == 1 && last == "auth" {
        return false;
    }
    !is_plain_word(v) && !v.bytes().all(|b| b.is_ascii_digit() || b == b'.') && v.len() >= 8
}

/// The characters that may end an unquoted value.
const VALUE_UNQUOTED: &str = r#"[^\s"'`;&|)\\,]+"#;
/// Names ending in a credential word, in any case: `DB_PASSWORD`, `db_password`,
/// `clientSecret`, `--api-key`, `aws.secret_key`.
const SECRET_NAME: &str = r"[A-Za-z0-9_.-]*(?:[Kk][Ee][Yy]|[Tt][Oo][Kk][Ee][Nn]|[Ss][Ee][Cc][Rr][Ee][Tt]|[Pp][Aa][Ss][Ss](?:[Ww][Oo][Rr][Dd]|[Ww][Dd]|[Pp][Hh][Rr][Aa][Ss][Ee])?|[Pp][Ww][Dd]|[Aa][Uu][Tt][Hh]|[Cc][Rr][Ee][Dd][Ee][Nn][Tt][Ii][Aa][Ll][Ss]?)";

static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    use Check::{Named, None as Always, Value};
    use SecretKind::*;
    vec![
        // PEM blocks, also inside JSON strings where newlines are `\n`; an unterminated block
        // (a truncated paste) is redacted up to the end of its base64 body.
        rule(
            PrivateKey,
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|(?:(?:\r?\n|\\n)(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]+: [^\r\n\\]*))*)",
            Always,
        ),
        // `scheme://user:password@host`: only the user-info goes; the host stays readable.
        rule(
            UrlCredentials,
            r#"\b[a-zA-Z][a-zA-Z0-9+.-]*://(?P<secret>[^\s:/@\[\]'"<>]*:[^\s@/'"<>]+)@"#,
            Value(|s| {
                s.split_once(':')
                    .is_some_and(|(_, p)| is_literal_secret_value(p))
            }),
        ),
        rule(
            SlackWebhook,
            r"https://hooks\.slack\.com/(?:services|workflows)/T[A-Z0-9]{6,}/[A-Z0-9]{6,}/[A-Za-z0-9]{16,}",
            Always,
        ),
        rule(
            DiscordToken,
            r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/[0-9]{17,20}/[A-Za-z0-9_-]{60,68}",
            Always,
        ),
        rule(
            AnthropicKey,
            r"\bsk-ant-[a-z]{2,8}\d{0,3}-[A-Za-z0-9_-]{32,}",
            Always,
        ),
        rule(
            OpenaiKey,
            r"\bsk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}",
            Value(looks_random),
        ),
        rule(
            GithubToken,
            r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,}\b|\bgithub_pat_[A-Za-z0-9_]{50,}\b",
            Always,
        ),
        rule(
            GitlabToken,
            r"\bgl(?:pat|dt|rt|ptt|cbt|soat|ft|imt|agent)-[A-Za-z0-9_-]{20,}",
            Value(varied),
        ),
        rule(
            AwsAccessKey,
            r"\b(?:AKIA|ASIA|ABIA|ACCA|AROA|AIDA)[A-Z0-9]{16}\b",
            Value(varied),
        ),
        // `aws_secret_access_key = …`, `"SecretAccessKey": "…"`, YAML, and the CLI's
        // `aws configure set aws_secret_access_key …` / `--secret-access-key …`.
        rule(
            AwsSecretKey,
            r#"(?i)(?:aws[_-]?secret[_-]?(?:access[_-]?)?key|secret[_-]?access[_-]?key)["']?\s*(?:[:=]|\s)\s*["']?(?P<secret>[A-Za-z0-9/+=]{40})(?:[^A-Za-z0-9/+=]|$)"#,
            Value(has_digit_and_letter),
        ),
        // Temporary credentials: by name, or by the fixed start every STS token has.
        rule(
            AwsSessionToken,
            r#"(?i)(?:aws[_-]?(?:session|security)[_-]?token|session[_-]?token)["']?\s*(?:[:=]|\s)\s*["']?(?P<secret>[A-Za-z0-9/+=]{100,})|\b(?:FwoGZXIvYXdzE|IQoJb3JpZ2luX2Vj)[A-Za-z0-9/+=]{80,}"#,
            Value(has_digit_and_letter),
        ),
        // Storage connection strings (`AccountKey=`, `SharedAccessKey=`) and SAS URLs (`sig=`).
        rule(
            AzureKey,
            r"(?i)\b(?:AccountKey|SharedAccessKey)=(?P<secret>[A-Za-z0-9+/]{20,}={0,2})|[?&]sig=(?P<sig>[A-Za-z0-9%+/]{20,}(?:%3D|=){0,2})",
            Value(has_digit_and_letter),
        ),
        rule(GcpApiKey, r"\bAIza[0-9A-Za-z_-]{35}\b", Always),
        rule(
            GcpOauthToken,
            r"\bya29\.[0-9A-Za-z_-]{20,}",
            Value(has_digit_and_letter),
        ),
        rule(
            GoogleOauthSecret,
            r"\bGOCSPX-[A-Za-z0-9_-]{28}",
            Value(varied),
        ),
        rule(
            SlackToken,
            r"\bxox[abposre]-[A-Za-z0-9-]{10,}",
            Value(|s| s.bytes().filter(u8::is_ascii_digit).count() >= 6),
        ),
        rule(
            StripeKey,
            r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b|\bwhsec_[A-Za-z0-9]{24,}\b",
            Value(has_digit_and_letter),
        ),
        rule(
            NpmToken,
            r"\bnpm_[A-Za-z0-9]{36}\b",
            Value(has_digit_and_letter),
        ),
        // `.npmrc`: `//registry…/:_authToken=…`, `_auth=…`, `_password=…` in any form.
        rule(
            NpmToken,
            r#"(?i)(?:^|[\s:"'])_(?:authToken|auth|password)\s*=\s*["']?(?P<secret>[^\s"'`]+)"#,
            Value(is_literal_secret_value),
        ),
        rule(
            HuggingfaceToken,
            r"\bhf_[A-Za-z0-9]{30,}\b",
            Value(looks_random),
        ),
        rule(
            TwilioKey,
            r"\bSK[0-9a-fA-F]{32}\b",
            Value(has_digit_and_letter),
        ),
        rule(
            SendgridKey,
            r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}",
            Always,
        ),
        rule(
            MailgunKey,
            r"\bkey-[0-9a-f]{32}\b|\b[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8}\b",
            Value(varied),
        ),
        rule(
            ShopifyToken,
            r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b",
            Value(varied),
        ),
        rule(
            DigitaloceanToken,
            r"\bdo[opr]_v1_[a-f0-9]{64}\b",
            Value(varied),
        ),
        rule(
            PypiToken,
            r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}",
            Always,
        ),
        // Docker Hub access tokens, and the `auth` of `~/.docker/config.json`.
        rule(
            DockerToken,
            r#"\bdckr_(?:pat|oat)_[A-Za-z0-9_-]{27,}|"auth"\s*:\s*"(?P<secret>[A-Za-z0-9+/]{12,}={0,2})""#,
            Value(has_digit_and_letter),
        ),
        rule(
            TelegramToken,
            r"\b[0-9]{8,10}:AA[A-Za-z0-9_-]{33}",
            Value(varied),
        ),
        rule(
            DiscordToken,
            r"\b[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}",
            Value(looks_random),
        ),
        rule(
            Jwt,
            r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
            Always,
        ),
        rule(
            BearerToken,
            r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/-]{16,}=*)",
            Value(has_digit_and_letter),
        ),
        rule(
            BasicAuth,
            r#"(?i)\bauthorization["']?\s*[:=]\s*["']?basic\s+(?P<secret>[A-Za-z0-9+/]{8,}={0,2})"#,
            Value(|s| s.len() >= 8 && varied(s)),
        ),
        // Key headers: `X-API-Key: …`, `api-key: …` (Azure OpenAI), `X-Auth-Token: …`.
        rule(
            ApiKeyHeader,
            r#"(?i)\b(?:x-api-key|api-key|x-auth-token|x-access-token|x-goog-api-key|private-token|x-apikey|apikey)["']?\s*:\s*["']?(?P<secret>[A-Za-z0-9._~+/=-]{12,})"#,
            Value(|s| is_literal_secret_value(s) && has_digit_and_letter(s)),
        ),
        // `.env`, shell, INI and command-line assignments with no space around `=`:
        // `export GITHUB_TOKEN=…`, `DB_PASSWORD="…"`, `db_password=…`, `--password=…`,
        // `?token=…`. Program code with spaces (`api_key = os.environ[…]`) is the next rule's.
        rule(
            EnvSecret,
            &format!(
                r#"(?m)(?:^|[\s;&|("'`?,{{])(?:export\s+)?(?:--?)?(?P<name>{SECRET_NAME})=(?P<secret>"[^"\n]*"|'[^'\n]*'|\\"[^"\\\n]*\\"|{VALUE_UNQUOTED})"#
            ),
            Named(is_secret_assignment),
        ),
        // Quoted values with any spacing and separator (`SECRET_KEY = '…'` in Django's
        // settings, `"password": "…"` in JSON, `password := "…"`, `:token => "…"`), and YAML's
        // unquoted `password: …`.
        rule(
            EnvSecret,
            &format!(
                r#"(?m)(?:^|[\s;&|("'`,{{:])(?P<name>{SECRET_NAME})["']?\s*(?:(?::|=|:=|=>)\s*(?P<secret>"[^"\n]{{4,}}"|'[^'\n]{{4,}}'|\\"[^"\\\n]{{4,}}\\")|:\s+(?P<yaml>[^\s"'#,{{}}\[\]&*!|>][^\s"',{{}}]*)\s*$)"#
            ),
            Named(is_secret_assignment),
        ),
    ]
});

/// Every rule's pattern in one automaton: a single pass says which rules can match at all,
/// so clean text (nearly all of it) is scanned once instead of once per rule.
static PREFILTER: LazyLock<RegexSet> = LazyLock::new(|| {
    RegexSet::new(RULES.iter().map(|r| r.regex.as_str())).expect("redaction patterns compile")
});

/// The part of a match that is replaced: the first secret-like group that took part, else
/// the whole match.
fn secret_of<'t>(caps: &Captures<'t>) -> regex::Match<'t> {
    ["secret", "sig", "yaml"]
        .iter()
        .find_map(|g| caps.name(g))
        .unwrap_or_else(|| caps.get(0).expect("group 0 always matches"))
}

/// Apply one rule; `None` when it changed nothing.
fn apply(rule: &Rule, text: &str, report: &mut RedactionReport) -> Option<String> {
    let mut hits = 0usize;
    let out = rule.regex.replace_all(text, |caps: &Captures| {
        let whole = caps.get(0).expect("group 0 always matches");
        let secret = secret_of(caps);
        let accepted = match rule.check {
            Check::None => true,
            Check::Value(check) => check(secret.as_str()),
            Check::Named(check) => check(
                caps.name("name").map_or("", |m| m.as_str()),
                secret.as_str(),
            ),
        };
        if !accepted {
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
    let candidates = PREFILTER.matches(text);
    if !candidates.matched_any() {
        return (current, report);
    }
    // A rule that cannot match the original text cannot match it after earlier rules ran
    // either: they only put markers in, and no rule accepts a marker.
    for i in candidates.iter() {
        if let Some(changed) = apply(&RULES[i], &current, &mut report) {
            current = Cow::Owned(changed);
        }
    }
    (current, report)
}

/// Redact a list of separate text items that together may hold one secret, as when a model
/// writes a private key one line per item: a PEM block that starts in one item takes every
/// following item that is part of it (base64 lines, `Proc-Type:` headers, the `END` line).
/// Each item is otherwise redacted on its own.
pub fn redact_items(items: &[String]) -> (Vec<String>, RedactionReport) {
    static PEM_BEGIN: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
            .expect("pattern compiles")
    });
    static PEM_END: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")
            .expect("pattern compiles")
    });
    static PEM_BODY: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^\s*(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]+: \S.*|)\s*$").expect("pattern compiles")
    });
    let mut report = RedactionReport::default();
    let mut out = Vec::with_capacity(items.len());
    let mut inside = false;
    for item in items {
        if inside {
            if PEM_END.is_match(item) {
                inside = false;
                let rest = PEM_END.splitn(item, 2).nth(1).unwrap_or("");
                let (rest, found) = redact_with_report(rest);
                report.merge(&found);
                out.push(
                    format!("{}{rest}", SecretKind::PrivateKey.marker())
                        .trim()
                        .to_string(),
                );
                continue;
            }
            if PEM_BODY.is_match(item) {
                out.push(SecretKind::PrivateKey.marker());
                continue;
            }
            inside = false;
        }
        let (clean, found) = redact_with_report(item);
        report.merge(&found);
        // A block that begins here and does not end here continues in the next items.
        if let Some(begin) = PEM_BEGIN.find_iter(item).last() {
            if !PEM_END.is_match(&item[begin.end()..]) {
                inside = true;
            }
        }
        out.push(clean.into_owned());
    }
    (out, report)
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

    #[test]
    fn a_key_split_over_items_is_redacted_item_by_item() {
        let items: Vec<String> = vec![
            "made a deploy key".into(),
            format!("-----BEGIN {}-----", "OPENSSH PRIVATE KEY"),
            format!(
                "b3BlbnNzaC1rZXktdjEAAAAABG5v{}",
                "bmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtz"
            ),
            format!("c2gtZWQyNTUxOQAAACDx{}", "Q9Lm2Pz9Rt4Vw8Ys3Kd6Hf1Nb5Jc0Ga"),
            format!("-----END {}----- saved", "OPENSSH PRIVATE KEY"),
            "pushed the branch".into(),
        ];
        let (out, report) = redact_items(&items);
        assert_eq!(out[0], "made a deploy key");
        assert_eq!(out[1], "[redacted:private_key]");
        assert_eq!(out[2], "[redacted:private_key]");
        assert_eq!(out[3], "[redacted:private_key]");
        assert_eq!(out[4], "[redacted:private_key] saved");
        assert_eq!(out[5], "pushed the branch");
        assert!(report.counts.contains_key(&SecretKind::PrivateKey));
    }
}
