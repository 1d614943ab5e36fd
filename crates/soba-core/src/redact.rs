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
//! Structure counts as much as shape, because agents show secrets inside other text: a file
//! view's line marks (`12→DB_PASSWORD=…` in Claude Code's Read output), a value followed by a
//! comment, a subscripted config key (`app.config['SECRET_KEY']`), a command's password flag
//! (`mysql -pPW`, `curl -u user:pw`, `docker login -p`), netrc, pgpass, cookie and
//! `Authorization` lines, XML elements, and JSON strings where line breaks are `\n`. Vendor
//! prefixes missing from SOBA's own list come from gitleaks' maintained rules
//! (`config/gitleaks.toml`, MIT). Shapes left alone on purpose are listed in
//! docs/reliability.md.
//!
//! Two shapes are looked at twice: a base64 value under a Kubernetes Secret's `data:` or an
//! `auth`/`_auth` key is decoded one level and redacted when what it decodes to holds a secret,
//! and a secret split by a line continuation or a string join is found in the text with its
//! splits joined (see [`redact_with_report`]).
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
    VaultToken,
    SentryKey,
    DatabricksToken,
    VendorToken,
    EncodedSecret,
    BearerToken,
    BasicAuth,
    ApiKeyHeader,
    SessionCookie,
    Password,
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
            SecretKind::VaultToken => "vault_token",
            SecretKind::SentryKey => "sentry_key",
            SecretKind::DatabricksToken => "databricks_token",
            SecretKind::VendorToken => "vendor_token",
            SecretKind::EncodedSecret => "encoded_secret",
            SecretKind::BearerToken => "bearer_token",
            SecretKind::BasicAuth => "basic_auth",
            SecretKind::ApiKeyHeader => "api_key_header",
            SecretKind::SessionCookie => "session_cookie",
            SecretKind::Password => "password",
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
    /// The secret's shape (`Some(true)`: a secret; `Some(false)`: one only if the text around
    /// says so; `None`: none) and what the whole text says, asked at most once per text, so
    /// that many candidates in a long text do not each scan it (for a shape that is a secret
    /// only beside another, such as a bare AWS secret key beside its key id).
    InText(fn(&str) -> Option<bool>, fn(&str) -> bool),
}

/// One detection rule: the capture group `secret` (or the whole match) is replaced when the
/// check accepts it.
struct Rule {
    kind: SecretKind,
    regex: Regex,
    check: Check,
    /// A cheaper pattern that matches wherever `regex` can (its keywords), for the prefilter;
    /// `None` when the rule's own pattern is cheap enough.
    keys: Option<&'static str>,
    /// A scan that stands in for the prefilter: true wherever `regex` can match. A rule with
    /// one is left out of the prefilter's automaton.
    scan: Option<fn(&str) -> bool>,
}

fn rule(kind: SecretKind, pattern: &str, check: Check) -> Rule {
    Rule {
        kind,
        regex: Regex::new(pattern).expect("redaction pattern compiles"),
        check,
        keys: None,
        scan: None,
    }
}

impl Rule {
    /// Prefilter on `keys` instead of the whole pattern: long alternations and counted
    /// repetitions would make the one automaton of every rule slow.
    fn keyed(mut self, keys: &'static str) -> Rule {
        self.keys = Some(keys);
        self
    }

    /// Decide candidacy with `scan` instead of the prefilter.
    fn scanned(mut self, scan: fn(&str) -> bool) -> Rule {
        self.scan = Some(scan);
        self
    }

    fn prefilter_pattern(&self) -> &str {
        match (self.scan, self.keys) {
            // Matches nothing: the scan decides.
            (Some(_), _) => r"[^\s\S]",
            (None, Some(keys)) => keys,
            (None, None) => self.regex.as_str(),
        }
    }
}

/// Whether `text` has a run of exactly 40 base64 characters (what a bare AWS secret key is),
/// found by counting rather than by the prefilter, where a 40-character window would cost
/// every rule's scan.
fn has_run_of_40(text: &str) -> bool {
    let mut run = 0usize;
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b == b'/' || b == b'+' {
            run += 1;
        } else {
            if run == 40 {
                return true;
            }
            run = 0;
        }
    }
    run == 40
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
    // A statement's end is not part of the value (`key = process.env.KEY;`).
    let v = unquoted(v).trim_end_matches(';');
    if v.contains(['(', '[', '{']) || v.contains("::") || v.contains("->") {
        return true;
    }
    // A reference or a dereference (`&config.verifier`), a member (`self.token`).
    if v.starts_with(['&', '*']) || v.starts_with("self.") || v.starts_with("this.") {
        return true;
    }
    let ident = |p: &str| {
        !p.is_empty()
            && p.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    // The end of a call or a signature (`password: bytes):`).
    if v.ends_with(')') || v.ends_with("):") {
        return true;
    }
    // An attribute path (`win32api.RegEnumKey`, `base64.decodebytes`), whose parts are names,
    // not random runs.
    let parts: Vec<&str> = v.split('.').collect();
    parts.len() > 1 && parts.iter().all(|p| ident(p) && !looks_random(p))
}

/// A snake-case name (`_pep_440_key`, `request_id`): a reference, not a value.
fn is_snake_case_name(v: &str) -> bool {
    let v = unquoted(v).trim_start_matches('_');
    v.contains('_')
        && v.starts_with(|c: char| c.is_ascii_lowercase())
        && v.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// An assignment on a line of its own with spaces around `=` and an unquoted value, or a
/// flag's spaced value: also program code and prose (`password = credentials`, `the
/// --password option`), so the value must not be a plain word.
fn is_spaced_secret(name: &str, v: &str) -> bool {
    let plain = unquoted(v).trim_end_matches(['.', ',', ';', ':']);
    !is_plain_word(plain) && is_secret_assignment(name, v)
}

/// The name of a constant or an environment variable (`CLIENT_TRAFFIC_SECRET_0`,
/// `OPENAI_API_KEY`): a reference to a secret, not one.
fn is_constant_name(v: &str) -> bool {
    let v = unquoted(v);
    v.contains('_')
        && v.starts_with(|c: char| c.is_ascii_uppercase())
        && v.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
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

/// Names whose `…_pass` is a verdict or a stage, not a password (`test-pass`, `first_pass`).
const ORDINARY_PASS_WORDS: &[&str] = &[
    "test", "tests", "first", "second", "third", "final", "dry", "single", "multi", "one", "two",
    "compile", "lint", "check", "render", "build", "ci", "grader", "all", "must", "should",
    "force", "skip", "no", "allow",
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
    // What a statement puts after a value (`;`, `)`, `?`, `,`) is not part of it.
    let code = is_code(value);
    let value = unquoted(unquoted(value).trim_end_matches([';', ')', '?', ',', ':']));
    if !is_literal_secret_value(value)
        || code
        || is_code(value)
        || is_constant_name(value)
        || is_snake_case_name(value)
    {
        return false;
    }
    let v = value;
    // Public keys and publishable keys are meant to be shared.
    if v.starts_with("ssh-") || v.starts_with("ecdsa-") || v.starts_with("pk_") {
        return false;
    }
    // Also run together with what they are for (`PGPASSWORD`, `dbpasswd`).
    let password_like = matches!(last, "password" | "passwd" | "pwd" | "pass" | "passphrase")
        || ["password", "passwd", "passphrase"]
            .iter()
            .any(|w| last.len() > w.len() && last.ends_with(w));
    if password_like {
        // A bare `pass` is a verdict or a keyword far more often than a password, and so is a
        // `test-pass` or a `first_pass`.
        if last == "pass" {
            let qualifier = words.len().checked_sub(2).map(|i| words[i].as_str());
            if qualifier.is_none_or(|q| ORDINARY_PASS_WORDS.contains(&q)) {
                return false;
            }
        }
        // A sentence is not a password (a passphrase of a few words still is).
        if v.matches(' ').count() > 3 {
            return false;
        }
        // `password=password`, `db_password=db_pass`: the same words, not a value.
        let lower = v.to_ascii_lowercase();
        return !(words.contains(&lower) || (is_plain_word(v) && v.contains('_')));
    }
    // A personal access token (`AZURE_DEVOPS_EXT_PAT`, `GITHUB_PAT`); a bare `pat` is too
    // many other things.
    let access_token = last == "pat" && words.len() > 1;
    let secret_like = access_token
        || matches!(
            last,
            "secret"
                | "token"
                | "key"
                | "apikey"
                | "authkey"
                | "authtoken"
                | "credentials"
                | "credential"
                | "auth"
        );
    if !secret_like {
        return false;
    }
    if access_token && !has_digit_and_letter(v) {
        return false;
    }
    // Keys and tokens hold no spaces; `Error::Token => "invalid token"` is a message.
    if v.contains(char::is_whitespace) {
        return false;
    }
    // A file that holds the key (`--private-key ~/.ssh/id_ed25519`), not the key.
    if v.starts_with(['/', '~']) || v.starts_with("./") || v.starts_with("../") {
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

/// A value that is a password where its position says so (netrc, pgpass, a command's password
/// flag): a literal, and not a plain word, a flag or a wildcard.
fn is_password_value(v: &str) -> bool {
    let v = unquoted(v);
    // `password combination.`: a sentence's punctuation does not make a word a password.
    let plain = v.trim_end_matches(['.', ',', ';', ':', '!', '?']);
    is_literal_secret_value(v) && !is_plain_word(plain) && !v.starts_with('-') && v != "*"
}

/// A value named in prose (`the token is …`) that is a secret: at least 12 characters, letters
/// and digits, and random enough (at least 3 bits of Shannon entropy a character) that it is no
/// word, version, path or placeholder.
fn is_random_prose_value(v: &str) -> bool {
    let v = unquoted(v).trim_end_matches(['.', ',', ';', ':', '!', '?', ')']);
    if v.len() < 12
        || !has_digit_and_letter(v)
        || !is_literal_secret_value(v)
        || v.starts_with(['/', '~', '.', '-'])
        || v.contains("://")
    {
        return false;
    }
    // A version (`1.2.3-beta.4567`) or a dotted name is no key.
    if v.split('.').count() > 2 && !looks_random(v) {
        return false;
    }
    let mut counts = std::collections::HashMap::new();
    for c in v.chars() {
        *counts.entry(c).or_insert(0usize) += 1;
    }
    let n = v.chars().count() as f64;
    let entropy: f64 = counts
        .values()
        .map(|&k| {
            let p = k as f64 / n;
            -p * p.log2()
        })
        .sum();
    entropy >= 3.0
}

/// `user:password` (`curl -u`): the password half is a literal value.
fn has_password_half(v: &str) -> bool {
    unquoted(v)
        .split_once(':')
        .is_some_and(|(_, p)| is_literal_secret_value(p) && !p.starts_with('$'))
}

/// A flag's value (`--token …`) judged like an assignment to a variable of that name.
fn is_flag_secret(name: &str, v: &str) -> bool {
    !unquoted(v).starts_with('-') && is_spaced_secret(name, v)
}

/// A session cookie's value: long and random, not a placeholder.
fn is_cookie_secret(_name: &str, v: &str) -> bool {
    let v = unquoted(v);
    v.len() >= 12 && has_digit_and_letter(v) && is_literal_secret_value(v)
}

/// A 40-character run that is an AWS secret access key with no name before it: random (digits,
/// upper and lower case), and either holding `/` or `+` (which identifiers and paths of that
/// exact length rarely mix in like this) or beside an access key id or the words of a secret
/// key (`aws configure`, the console's key download).
fn bare_aws_secret_shape(s: &str) -> Option<bool> {
    let count = |f: fn(&u8) -> bool| s.bytes().filter(f).count();
    let digits = count(u8::is_ascii_digit);
    let upper = count(u8::is_ascii_uppercase);
    let lower = count(u8::is_ascii_lowercase);
    let symbols = s.len() - digits - upper - lower;
    if digits < 3 || upper < 4 || lower < 4 || symbols > 4 || s.contains("//") {
        return None;
    }
    if s.starts_with('/') || s.ends_with('/') {
        return None;
    }
    Some(symbols > 0)
}

/// Whether a text names an AWS secret key or holds an access key id, beside which a bare
/// 40-character run is the secret.
fn mentions_aws_secret(text: &str) -> bool {
    static KEY_ID: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b|\[redacted:aws_access_key\]")
            .expect("pattern compiles")
    });
    if KEY_ID.is_match(text) {
        return true;
    }
    let lower = text.to_ascii_lowercase();
    ["secret access key", "secret_access_key", "secretaccesskey"]
        .iter()
        .any(|w| lower.contains(w))
}

/// Decode base64, standard or URL-safe, padded or not; `None` when `s` is not base64.
fn decode_base64(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    if s.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for b in s.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// Whether a base64 value decodes, one level, to text that holds a secret: `user:password`
/// (what Docker's and npm's `auth` hold), or anything the rules find in it, such as the
/// database URL with its password that a Kubernetes Secret's `data:` holds. The decoded text
/// is not decoded again.
fn decodes_to_secret(v: &str) -> bool {
    let Some(decoded) = decode_base64(unquoted(v)).and_then(|b| String::from_utf8(b).ok()) else {
        return false;
    };
    // Binary data (a hash, an image, a key's DER bytes) is no text to look into.
    if decoded
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        return false;
    }
    let decoded = decoded.trim();
    if let Some((user, pass)) = decoded.split_once(':') {
        let word = |p: &str| !p.is_empty() && !p.contains(char::is_whitespace);
        // `user:password`, but not `scheme://…`, which the rules judge below.
        // A GitHub node id (`04:User583231`) has a number for its user.
        let numeric = user.bytes().all(|b| b.is_ascii_digit());
        if word(user) && word(pass) && !user.contains('/') && !pass.starts_with("//") && !numeric {
            return is_literal_secret_value(pass);
        }
    }
    !run_rules(decoded, false).1.is_empty()
}

/// Whether a text has a `data` section (a Kubernetes Secret's, shown as YAML or as JSON),
/// whose values are decoded.
fn mentions_data(text: &str) -> bool {
    memchr::memmem::find(text.as_bytes(), b"data").is_some()
}

/// The characters that may end an unquoted value.
const VALUE_UNQUOTED: &str = r#"[^\s"'`;&|)\\,]+"#;
/// A value on a command line: quoted (also as escaped inside a JSON string) or a bare word.
const SHELL_VALUE: &str = r#"(?:"[^"\n]+"|'[^'\n]+'|\\"[^"\\\n]+\\"|[^\s"'`;&|)\\]+)"#;
/// What may stand right before a variable's name: the start of a line, separators, quotes, the
/// marks file views put before a line (`12→` in Claude Code's Read output, `12 │` in bat,
/// `file:12:` from `grep -n`), a diff's `+`, and line breaks escaped inside a JSON string (`\n`, `\t`).
const BEFORE_NAME: &str = r#"(?:^|[\s;&|("'`?,{:\[→│+]|\\[ntr])"#;
/// The start of a line, also after a file view's line mark or an escaped line break, or a
/// diff's added line.
const LINE_START: &str = r"(?:^\+?|\\n\+?|[→│])";
/// Names ending in a credential word, in any case: `DB_PASSWORD`, `db_password`,
/// `clientSecret`, `--api-key`, `aws.secret_key`, `PGPASSWORD`, `AZURE_DEVOPS_EXT_PAT`.
const SECRET_NAME: &str = r"[A-Za-z0-9_.-]*(?:[Kk][Ee][Yy]|[Tt][Oo][Kk][Ee][Nn]|[Ss][Ee][Cc][Rr][Ee][Tt]|[Pp][Aa][Ss][Ss](?:[Ww][Oo][Rr][Dd]|[Ww][Dd]|[Pp][Hh][Rr][Aa][Ss][Ee])?|[Pp][Ww][Dd]|[Aa][Uu][Tt][Hh]|[Cc][Rr][Ee][Dd][Ee][Nn][Tt][Ii][Aa][Ll][Ss]?|[Pp][Aa][Tt])";

static RULES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    use Check::{InText, Named, None as Always, Value};
    use SecretKind::*;
    vec![
        // PEM blocks, also inside JSON strings where newlines are `\n`; an unterminated block
        // (a truncated paste) is redacted up to the end of its base64 body, also when the
        // block was flattened onto one line (its lines joined by spaces, or none). The way to
        // the END line crosses only what a key block holds (base64, its headers, line breaks
        // and file-view line marks), so a block cut before its END cannot run on through the
        // prose after it to another block's END.
        rule(
            PrivateKey,
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----(?:[A-Za-z0-9+/=:,\s\\→│-]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|(?:(?:\r?\n|\\n)(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]+: [^\r\n\\]*)|[ \t]*[A-Za-z0-9+/=]{16,})*)",
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
            r"https://hooks\.slack\.com/(?:services|workflows|triggers)/(?:T[A-Z0-9]{6,}/[A-Z0-9]{6,}/[A-Za-z0-9]{16,}|[A-Za-z0-9+/]{43,56})",
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
            r"\bgl(?:pat|dt|rt|ptt|cbt|soat|ft|imt|agent|ffct|oas)-[A-Za-z0-9_-]{20,}|\bGR1348941[A-Za-z0-9_-]{20}",
            Value(varied),
        ),
        rule(
            AwsAccessKey,
            r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AROA|AIDA)[A-Z0-9]{16}\b",
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
            r"\b(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{16,}\b|\bwhsec_[A-Za-z0-9]{24,}\b",
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
            r#"(?i)(?:^|[\s:"'→│]|\\n)_(?:authToken|auth|password)\s*=\s*["']?(?P<secret>[^\s"'`\\]+)"#,
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
        // An auth token passed right after its account SID (`Client("AC…", "…")`).
        rule(
            TwilioKey,
            r#"\bAC[0-9a-f]{32}\b\\?["']?\s*,\s*\\?["']?(?P<secret>[0-9a-f]{32})\b"#,
            Value(varied),
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
            r"(?:\b|/bot)(?P<secret>[0-9]{5,16}:AA[A-Za-z0-9_-]{33})",
            Value(varied),
        ),
        rule(
            DiscordToken,
            r"\b[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}",
            Value(looks_random),
        ),
        // Vendor prefixes from gitleaks' maintained rules (config/gitleaks.toml, MIT; the
        // `(?:[\x60'"\s;]|\\[nr]|$)` ends are `\b` here): Slack app-level and configuration
        // tokens, Vault service and batch tokens, Sentry tokens and DSN keys, Databricks.
        rule(
            SlackToken,
            r"(?i)\bxapp-[0-9]-[A-Z0-9]+-[0-9]+-[a-z0-9]+|\bxoxe(?:\.xox[bp])?-[0-9]-[A-Za-z0-9]{140,170}",
            Value(|s| has_digit_and_letter(s) && varied(s)),
        )
        .keyed(r"(?i)xapp-|xoxe"),
        rule(
            VaultToken,
            r"\bhv[sb]\.[A-Za-z0-9_-]{24,400}|\bs\.[A-Za-z0-9]{24}\b",
            Value(looks_random),
        )
        .keyed(r"hv[sb]\.|\bs\.[A-Za-z0-9]{24}\b"),
        rule(
            SentryKey,
            r"\bsntryu_[a-f0-9]{64}\b|\bsntrys_eyJ[A-Za-z0-9+/=_]{60,}|\bhttps?://(?P<secret>[0-9a-f]{32})(?::[0-9a-f]{32})?@[A-Za-z0-9.-]+(?::[0-9]+)?/(?:[A-Za-z0-9_.-]+/)*[0-9]+\b",
            Value(varied),
        )
        .keyed(r"sntry[su]_|://[0-9a-f]{32}"),
        rule(
            DatabricksToken,
            r"\bdapi[a-f0-9]{32}(?:-[0-9])?\b",
            Value(varied),
        ),
        // The long tail, one automaton: Linear, Pulumi, Doppler, Postman, PlanetScale, Grafana,
        // Terraform Cloud, age, Brevo, Square, Perplexity, Notion, Prefect, Hugging Face
        // organizations, ReadMe, RubyGems, Infracost, Fly.io, Heroku, 1Password service
        // accounts, Artifactory, Clojars, Dynatrace, EasyPost, Duffel, Frame.io, Shippo,
        // OpenShift, Flutterwave, Airtable, Azure AD client secrets, Facebook page tokens (all
        // gitleaks rules), and Groq, xAI, Replicate and LangSmith keys.
        rule(
            VendorToken,
            concat!(
                r"\blin_api_[A-Za-z0-9]{40}\b|\bpul-[a-f0-9]{40}\b|\bdp\.pt\.[A-Za-z0-9]{43}\b",
                r"|\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b|\bpscale_(?:tkn|pw|oauth)_[A-Za-z0-9_=.-]{32,64}",
                r"|\bglsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}\b|\bglc_[A-Za-z0-9+/]{32,400}={0,3}",
                r"|\beyJrIjoi[A-Za-z0-9]{70,400}={0,3}|\b[a-z0-9]{14}\.atlasv1\.[a-z0-9_=-]{60,70}",
                r"|\bAGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
                r"|\bxkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}\b|\bsq0(?:atp|csp)-[A-Za-z0-9_-]{22,60}",
                r"|\bpplx-[A-Za-z0-9]{48}\b|\bntn_[0-9]{11}[A-Za-z0-9]{35}\b|\bpnu_[A-Za-z0-9]{36}\b",
                r"|\bapi_org_[A-Za-z]{34}\b|\brdme_[a-z0-9]{70}\b|\brubygems_[a-f0-9]{48}\b",
                r"|\bico-[A-Za-z0-9]{32}\b|\bfo1_[A-Za-z0-9_-]{43}\b|\bHRKU-AA[0-9A-Za-z_-]{58}\b",
                r"|\bops_eyJ[A-Za-z0-9+/]{250,}={0,3}|\bAKCp[A-Za-z0-9]{69}\b|\bCLOJARS_[a-z0-9]{60}\b",
                r"|\bdt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}\b|\bEZ[AT]K[A-Za-z0-9]{54}\b",
                r"|\bduffel_(?:test|live)_[A-Za-z0-9_=-]{43}|\bfio-u-[A-Za-z0-9_=-]{64}",
                r"|\bshippo_(?:live|test)_[a-fA-F0-9]{40}\b|\bsha256~[A-Za-z0-9_-]{43}\b",
                r"|\bFLWSECK(?:_TEST)?-[a-h0-9]{32}-X|\bpat[A-Za-z0-9]{14}\.[a-f0-9]{64}\b",
                r"|\b[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}|\bEAA[MC][A-Za-z0-9]{100,}",
                r"|\bgsk_[A-Za-z0-9]{52}\b|\bxai-[A-Za-z0-9]{80}\b|\br8_[A-Za-z0-9]{37}\b",
                r"|\blsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}\b",
            ),
            Value(|s| varied(s) && has_digit_and_letter(s)),
        )
        .keyed(concat!(
                r"lin_api_|pul-|dp\.pt\.|PMAK-|pscale_|glsa_|glc_|eyJrIjoi|\.atlasv1\.|AGE-SECRET-KEY-1",
                r"|xkeysib-|sq0atp-|sq0csp-|pplx-|ntn_|pnu_|api_org_|rdme_|rubygems_|ico-|fo1_|HRKU-AA",
                r"|ops_eyJ|AKCp|CLOJARS_|dt0c01\.|EZAK|EZTK|duffel_|fio-u-|shippo_|sha256~|FLWSECK",
                r"|pat[A-Za-z0-9]{14}\.|Q~|EAAM|EAAC|gsk_|xai-|r8_|lsv2_",
            )),
        // The rest of gitleaks' prefixed rules (its commit b58d3f10; the comparison is in
        // docs/reliability.md): 1Password secret keys, Adobe, Alibaba key ids, Artifactory
        // reference tokens, Authress, Amazon Bedrock, ClickHouse, Cloudflare origin CA,
        // Facebook app tokens, Flutterwave encryption keys, Fly.io macaroons, GitLab session
        // cookies, Harness, 42 Intra, base64-encoded JWTs, MaxMind, Microsoft Teams webhooks,
        // Octopus Deploy, Scalingo, SettleMint, Sidekiq, SonarQube, Sourcegraph, Square,
        // Typeform, Yandex, Defined Networking, Plaid, Mailchimp, Atlassian and Dropbox. Also
        // New Relic's `NRAK-`/`NRII-` and Notion's legacy `secret_` keys, which gitleaks finds
        // only beside the vendor's name but whose shape alone is specific enough.
        rule(
            VendorToken,
            concat!(
                r"\bA3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}\b",
                r"|\bp8e-[A-Za-z0-9]{32}\b|\bLTAI[A-Za-z0-9]{20}\b|\bcmVmd[A-Za-z0-9]{59}\b",
                r"|\b(?:sc|ext|scauth|authress)_[A-Za-z0-9]{5,30}\.[A-Za-z0-9]{4,6}\.acc[_-][A-Za-z0-9-]{10,32}\.[A-Za-z0-9+/_=-]{30,120}",
                r"|\bABSK[A-Za-z0-9+/]{109,269}={0,2}|\bbedrock-api-key-YmVkcm9jay5hbWF6b25hd3MuY29t[A-Za-z0-9+/=%_-]*",
                r"|\b4b1d[A-Za-z0-9]{38}\b|\bv1\.0-[a-f0-9]{24}-[a-f0-9]{146}\b",
                r"|\b[0-9]{15,16}(?:\||%7C)[A-Za-z0-9_-]{27,40}\b|\bFLWSECK_TEST-[a-h0-9]{12}\b",
                r"|\bfm1[ar]_[A-Za-z0-9+/]{100,}={0,3}|\bfm2_[A-Za-z0-9+/]{100,}={0,3}",
                r"|\b_gitlab_session=(?P<secret>[0-9a-z]{32})\b",
                r"|\b(?:pat|sat)\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}\b",
                r"|\bs-s4t2(?:ud|af)-[a-f0-9]{64}\b|\bZXlK(?:aGJHY2lPaU|MGVYQWlPaU)[A-Za-z0-9+/_-]{40,}={0,2}",
                r"|\b[A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk\b",
                r"|https://[a-z0-9-]+\.webhook\.office\.com/webhookb2/[A-Za-z0-9@/_-]{60,}",
                r"|\bNRAK-[A-Z0-9]{27}\b|\bNRII-[A-Za-z0-9_-]{32}|\bsecret_[A-Za-z0-9]{43}\b",
                r"|\bAPI-[A-Z0-9]{26}\b|\btk-us-[A-Za-z0-9_-]{48}|\bsm_(?:aat|pat|sat)_[A-Za-z0-9]{16}\b",
                r#"|BUNDLE_(?:ENTERPRISE|GEMS)__CONTRIBSYS__COM\\?["']?\s*[=:]\s*\\?["']?(?P<sig>[a-f0-9]{8}:[a-f0-9]{8})\b"#,
                r"|\bsq[upa]_[a-f0-9]{40}\b|\bsgp_(?:[a-f0-9]{16}_|local_)?[a-f0-9]{40}\b",
                r"|\bEAAA[A-Za-z0-9_-]{60,64}|\btfp_[A-Za-z0-9_.=-]{59}|\bAQVN[A-Za-z0-9_-]{35,38}",
                r"|\bdnkey-[A-Za-z0-9=_-]{26}-[A-Za-z0-9=_-]{52}|\btskey-(?:auth|api|client|scim|webhook)-[A-Za-z0-9]{6,}-[A-Za-z0-9]{16,}",
                r"|\baccess-(?:sandbox|development|production)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
                r"|\b[a-f0-9]{32}-us[0-9]{1,2}\b|\bATATT3[A-Za-z0-9_=-]{186}|\bsl\.[A-Za-z0-9_=-]{130,}",
            ),
            Value(|s| varied(s) && has_digit_and_letter(s)),
        )
        .keyed(concat!(
            r"A3-|p8e-|LTAI|cmVmd|\.acc[_-]|ABSK|bedrock-api-key-|4b1d|v1\.0-|[0-9]{15}(?:\||%7C)",
            r"|FLWSECK_TEST-|fm1a_|fm1r_|fm2_|_gitlab_session=|pat\.|sat\.|s-s4t2|ZXlK|_mmk",
            r"|webhook\.office\.com|NRAK-|NRII-|secret_|API-|tk-us-|sm_aat_|sm_pat_|sm_sat_|CONTRIBSYS",
            r"|squ_|sqp_|sqa_|sgp_|EAAA|tfp_|AQVN|dnkey-|tskey-|access-sandbox-|access-development-",
            r"|access-production-|-us[0-9]|ATATT3|\bsl\.",
        )),
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
        // `Authorization:` with another scheme than Bearer and Basic, or none:
        // `Authorization: token …` (GitHub), `Token …`, `ApiKey …`, a bare key.
        rule(
            ApiKeyHeader,
            r#"(?i)\bauthorization\\?["']?\s*[:=]\s*\\?["']?(?:(?:token|apikey|api-key|key|sso-key|bot|ssws|splunk|otoken|gitlab-token|dsn)\s+)?(?P<secret>[A-Za-z0-9._~+/=-]{16,})"#,
            Value(|s| is_literal_secret_value(s) && has_digit_and_letter(s) && !is_code(s)),
        )
        .keyed(r"(?i)authorization"),
        // Session cookies in `Set-Cookie:` and `Cookie:` headers (`sessionid`, `connect.sid`,
        // `PHPSESSID`, `laravel_session`, `auth_token`, …); other cookies stay.
        rule(
            SessionCookie,
            r#"(?i)\b(?:set-)?cookie\\?["']?\s*:\s*\\?["']?(?:[^\n;"'\\]*;\s*)*?(?P<name>[A-Za-z0-9_.-]*(?:sess|sid|auth|token|jwt|remember|login|csrf|xsrf)[A-Za-z0-9_.-]*)=(?P<secret>[^;\s"'\\,]+)"#,
            Named(is_cookie_secret),
        )
        .keyed(r"(?i)cookie"),
        // `.netrc`: `machine HOST login USER password PASS`, on one line or several.
        rule(
            Password,
            r#"\b(?:machine\s+\S+|default)(?:\s+(?:login|account)\s+\S+)*\s+password\s+(?P<secret>[^\s"'\\]+)"#,
            Value(is_password_value),
        )
        .keyed(r"password\s"),
        rule(
            Password,
            &format!(r#"(?m){LINE_START}[ \t]*password[ \t]+(?P<secret>[^\s"'\\]+)[ \t]*\r?(?:$|\\n)"#),
            Value(is_password_value),
        )
        .keyed(r"password[ \t]"),
        // `.pgpass`: `host:port:database:user:password`.
        rule(
            Password,
            r#"(?m)(?:^|\\n|[\s'"→│])[A-Za-z0-9_.*-]+:(?:\d{1,5}|\*):[A-Za-z0-9_.*-]+:[A-Za-z0-9_.*@-]+:(?P<secret>[^\s:'"\\]+)(?:$|[\s'"]|\\n)"#,
            Value(is_password_value),
        )
        .keyed(r":(?:[0-9]{1,5}|\*):"),
        // Password flags of common command-line tools.
        rule(
            Password,
            &format!(
                concat!(
                    r"\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mysqlsh|mariadb(?:-dump|-admin)?)\b[^\n|;&]*?[ \t]-p(?P<secret>{v})",
                    r"|\blogin\b[^\n|;&]*?[ \t](?:-p|--password)(?:=|[ \t]+)(?P<login>{v})",
                    r"|\b(?:mongo|mongosh|mongodump|mongorestore|mongoexport|mongoimport)\b[^\n|;&]*?[ \t](?:-p|--password)(?:=|[ \t]+)(?P<mongo>{v})",
                    r"|\bsshpass\b[^\n|;&]*?[ \t]-p[ \t]*(?P<sshpass>{v})",
                    r"|\bredis-cli\b[^\n|;&]*?[ \t](?:-a|--pass)[ \t]+(?P<redis>{v})",
                    r"|\bldap(?:search|add|modify|delete|passwd|compare|whoami|modrdn|exop)\b[^\n|;&]*?[ \t]-w[ \t]+(?P<ldap>{v})",
                    r"|\b(?:zip|unzip)\b[^\n|;&]*?[ \t]-P[ \t]+(?P<zip>{v})",
                    r"|\b7z[ar]?\b[^\n|;&]*?[ \t]-p(?P<sevenzip>{v})",
                    r"|[ \t]-pass(?:in|out)?[ \t]+\\?[\x22']?pass:(?P<openssl>{v})",
                    r"|\becho[ \t]+(?:-n[ \t]+)?(?P<echo>{v})[ \t]*\|[^\n|;&]*--password-stdin",
                    r"|\bhtpasswd(?:[ \t]+-[A-Za-z]+)*?[ \t]+-[A-Za-z]*b[A-Za-z]*(?:[ \t]+-[A-Za-z]+)*[ \t]+[^\s-]\S*[ \t]+\S+[ \t]+(?P<htpasswd>{v})",
                    r"|\b(?:smbclient|smbmap|smbget|rpcclient)\b[^\n|;&]*?[ \t](?:-U|--user)(?:=|[ \t]+)\\?[\x22']?[^\s%\x22']+%(?P<smb>[^\s\x22'`;&|)\\]+)",
                ),
                v = SHELL_VALUE
            ),
            Value(is_password_value),
        )
        .keyed(r"mysql|mariadb|login|mongo|sshpass|redis-cli|ldap|zip|7z|-pass|--password-stdin|htpasswd|smbclient|smbmap|smbget|rpcclient"),
        // `curl -u user:password`: the user-info goes, as in a URL.
        rule(
            Password,
            &format!(r"\bcurl\b[^\n|;&]*?[ \t](?:-u|--user)(?:=|[ \t]*)(?P<secret>{SHELL_VALUE})"),
            Value(has_password_half),
        )
        .keyed(r"curl"),
        // Long flags named for a secret: `--token …`, `--api-key …`, `--registration-token …`,
        // `--password …`, `--client-secret …` (with `=`, the assignment rules below see them).
        rule(
            EnvSecret,
            &format!(r#"(?:^|[\s"'(]|\\[ntr])--(?P<name>[A-Za-z0-9-]*(?:password|passwd|token|secret|api-key|apikey|access-key|secret-key|private-token|auth-key|authkey))[ \t]+(?P<secret>{SHELL_VALUE})"#),
            Named(is_flag_secret),
        )
        .keyed(r"--[A-Za-z0-9-]*(?:password|passwd|token|secret|api-key|apikey|access-key|secret-key|private-token|auth-key|authkey)[ \t]"),
        // Prose that gives the value: `the password is …`, `my token is: …`. Only a value
        // that looks random (see [`is_random_prose_value`]) is one; `the token is expired` is
        // not.
        rule(
            Password,
            r#"(?i:\b(?:password|passphrase|passwd)[ \t]+(?:is|was)[ \t]*:?[ \t]+)["'`]?(?P<secret>[^\s"'`<>]+)"#,
            Value(is_random_prose_value),
        ),
        rule(
            EnvSecret,
            r#"(?i:\b(?:token|secret|api[ \t]+key|access[ \t]+key|auth[ \t]+key)[ \t]+(?:is|was)[ \t]*:?[ \t]+)["'`]?(?P<secret>[^\s"'`<>]+)"#,
            Value(is_random_prose_value),
        ),
        // Dockerfile `ENV NAME value`, a Kubernetes `env` list's `- name: …` / `value: …`, XML
        // elements and .NET `<add key="…" value="…"/>`.
        rule(
            EnvSecret,
            &format!(
                concat!(
                    r"(?m){start}[ \t]*(?:ENV|ARG)[ \t]+(?P<name>{n})[ \t]+(?P<secret>{v})",
                    r#"|name:[ \t]*\\?["']?(?P<k8s>{n})\\?["']?(?:\s|\\n)*value:[ \t]*(?P<yaml>"[^"\n]*"|'[^'\n]*'|\\"[^"\\\n]*\\"|[^\s"'#\\]+)"#,
                    r"|<(?P<xml>{n})>(?P<ini>[^<\s]{{4,}})</",
                    r#"|<add\s+key=\\?["'](?P<add>{n})\\?["']\s+value=\\?["'](?P<sig>[^"'\\]{{4,}})"#,
                ),
                start = LINE_START,
                n = SECRET_NAME,
                v = SHELL_VALUE
            ),
            Named(is_secret_assignment),
        )
        .keyed(r"(?:ENV|ARG)[ \t]|name:|<add|(?i:key|token|secret|pass(?:word|wd|phrase)?|pwd|auth|credentials?)>"),
        // `.env`, shell, INI and command-line assignments with no space around `=`:
        // `export GITHUB_TOKEN=…`, `DB_PASSWORD="…"`, `db_password=…`, `--password=…`,
        // `?token=…`. Program code with spaces (`api_key = os.environ[…]`) is the next rule's.
        rule(
            EnvSecret,
            &format!(
                r#"(?m){BEFORE_NAME}(?:export\s+)?(?:--?)?(?P<name>{SECRET_NAME})=(?P<secret>"[^"\n]*"|'[^'\n]*'|\\"[^"\\\n]*\\"|{VALUE_UNQUOTED})"#
            ),
            Named(is_secret_assignment),
        )
        .keyed(r"(?i:key|token|secret|pass(?:word|wd|phrase)?|pwd|auth|credentials?|pat)[ \t]*="),
        // Quoted values with any spacing and separator (`SECRET_KEY = '…'` in Django's
        // settings, `"password": "…"` in JSON, `password := "…"`, `:token => "…"`), and YAML's
        // unquoted `password: …`.
        rule(
            EnvSecret,
            &format!(
                r#"(?m){BEFORE_NAME}(?P<name>{SECRET_NAME})\\?["']?\]?\s*(?:(?::|=|:=|=>)\s*(?P<secret>"[^"\n]{{4,}}"|'[^'\n]{{4,}}'|\\"[^"\\\n]{{4,}}\\")|:\s+(?P<yaml>[^\s"'`#,{{}}\[\]&*!|>\\][^\s"',{{}}\\]*)(?:[ \t]+#[^\n]*)?[ \t]*\r?(?:$|\\n))"#
            ),
            Named(is_secret_assignment),
        ),
        // INI, TOML, properties and `.env` lines with spaces around `=` and an unquoted value
        // to the end of the line or a comment (`password = s3cret ; staging`). Program code
        // (`token = get_token()`, `key = self.key`) never reaches the end of the line this way
        // or is refused as code.
        rule(
            EnvSecret,
            &format!(
                r#"(?m)(?:{LINE_START}|[ \t])(?P<name>{SECRET_NAME})[ \t]*=[ \t]*(?P<ini>[^\s"'`(){{}}\[\]\\,<>|]+)(?:[ \t]+[#;][^\n]*)?[ \t]*\r?(?:$|\\n)"#
            ),
            Named(is_spaced_secret),
        ),
        // Base64 values decoded one level. Under a Kubernetes Secret's `data:` every value is
        // base64 (`DATABASE_URL: cG9zdGdyZXM6Ly9…`), in YAML or in the JSON of `-o json`;
        // an `auth` or `_auth` key holds base64 `user:password` (`~/.docker/config.json`,
        // `.npmrc`). The value is redacted when what it decodes to holds a secret.
        rule(
            EncodedSecret,
            r#"(?m)(?:^|\\n|[→│])[ \t]+\\?["']?[A-Za-z0-9_.-]+\\?["']?:[ \t]*\\?["']?(?P<secret>[A-Za-z0-9+/]{8,}={0,2})\\?["']?,?[ \t]*\r?(?:$|\\n)|\\?"[A-Za-z0-9_.-]+\\?"[ \t]*:[ \t]*\\?"(?P<sig>[A-Za-z0-9+/]{8,}={0,2})\\?""#,
            Value(decodes_to_secret),
        )
        // Only in a text that has a `data` section: the scan stands in for a check of each
        // value against the whole text.
        .scanned(mentions_data),
        rule(
            EncodedSecret,
            r#"(?i)(?:^|[^A-Za-z0-9_])_?auth\\?["']?[ \t]*[:=][ \t]*\\?["']?(?P<secret>[A-Za-z0-9+/]{8,}={0,2})(?:$|[^A-Za-z0-9+/=])"#,
            Value(decodes_to_secret),
        )
        .keyed(r"(?i)auth"),
        // A bare AWS secret access key (see [`bare_aws_secret_shape`]).
        rule(
            AwsSecretKey,
            r"(?:^|[^A-Za-z0-9/+=_.-])(?P<secret>[A-Za-z0-9/+]{40})(?:$|[^A-Za-z0-9/+=_-])",
            InText(bare_aws_secret_shape, mentions_aws_secret),
        )
        .scanned(has_run_of_40),
    ]
});

/// Every rule's pattern in one automaton: a single pass says which rules can match at all,
/// so clean text (nearly all of it) is scanned once instead of once per rule.
static PREFILTER: LazyLock<RegexSet> = LazyLock::new(|| {
    // Room for the automaton of every rule's keys (the default 2 MiB cache thrashes on them,
    // which made a scan of clean text about six times slower).
    regex::RegexSetBuilder::new(RULES.iter().map(Rule::prefilter_pattern))
        .dfa_size_limit(16 << 20)
        .build()
        .expect("redaction patterns compile")
});

/// The part of a match that is replaced: the first secret-like group that took part, else
/// the whole match.
fn secret_of<'t>(caps: &Captures<'t>) -> regex::Match<'t> {
    [
        "secret", "sig", "yaml", "ini", "login", "mongo", "sshpass", "redis", "ldap", "zip",
        "sevenzip", "openssl", "echo", "htpasswd", "smb",
    ]
    .iter()
    .find_map(|g| caps.name(g))
    .unwrap_or_else(|| caps.get(0).expect("group 0 always matches"))
}

/// Apply one rule; `None` when it changed nothing.
fn apply(rule: &Rule, text: &str, report: &mut RedactionReport) -> Option<String> {
    let mut hits = 0usize;
    let mut text_says: Option<bool> = None;
    let out = rule.regex.replace_all(text, |caps: &Captures| {
        let whole = caps.get(0).expect("group 0 always matches");
        let secret = secret_of(caps);
        let accepted = match rule.check {
            Check::None => true,
            Check::Value(check) => check(secret.as_str()),
            Check::Named(check) => check(
                ["name", "k8s", "xml", "add"]
                    .iter()
                    .find_map(|g| caps.name(g))
                    .map_or("", |m| m.as_str()),
                secret.as_str(),
            ),
            Check::InText(shape, context) => match shape(secret.as_str()) {
                Some(accepted) => accepted || *text_says.get_or_insert_with(|| context(text)),
                None => false,
            },
        };
        // A marker is never redacted again (redaction stays idempotent).
        let accepted = accepted && !secret.as_str().contains("[redacted");
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
///
/// A secret split in two (by a shell line continuation, `sk-abc\⏎def`, or by a string join,
/// `"sk-abc" + "def"`, `'abc' 'def'`) is found in the text with its splits joined; when that
/// redacts what the text as it is would keep, the joined text is the one returned, so neither
/// half survives.
pub fn redact_with_report(text: &str) -> (Cow<'_, str>, RedactionReport) {
    let (out, report, _) = redact_joining_splits(text);
    (out, report)
}

/// [`redact_with_report`], and whether the text returned is the one with its splits joined.
fn redact_joining_splits(text: &str) -> (Cow<'_, str>, RedactionReport, bool) {
    let (out, report) = run_rules(text, true);
    let Some((joined, tails)) = join_splits(text) else {
        return (out, report, false);
    };
    let (joined_out, joined_report) = run_rules(&joined, true);
    // How often each part after a split occurs, counted for all of them in one pass over each
    // text (a search per part would make a text with many splits quadratic).
    let counter = aho_corasick::AhoCorasick::new(&tails).expect("the parts make an automaton");
    let count = |hay: &str| {
        let mut counts = vec![0usize; tails.len()];
        for m in counter.find_overlapping_iter(hay) {
            counts[m.pattern().as_usize()] += 1;
        }
        counts
    };
    if count(&out)
        .iter()
        .zip(count(&joined_out))
        .any(|(&kept, joined)| kept > joined)
    {
        return (Cow::Owned(joined_out.into_owned()), joined_report, true);
    }
    (out, report, false)
}

/// Characters a token (a key, a password) is made of, on either side of a split.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'+' | b'/' | b'=' | b'-' | b'.')
}

/// `text` with every split inside a token removed (a line continuation, raw or escaped inside
/// a JSON string, or the quotes and `+` of a string join), and the part after each split (at
/// least four characters of it), by which a caller can tell whether the join revealed a
/// secret. `None` when nothing is split.
fn join_splits(text: &str) -> Option<(String, Vec<&str>)> {
    static SPLIT: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(concat!(
            r"\\\r?\n[ \t]*|\\\\\\n(?:[ \t]|\\t)*",
            r#"|\\?"[ \t]*\+?[ \t]*(?:\\?\r?\n[ \t]*|\\n[ \t]*)?\\?""#,
            r"|'[ \t]*\+?[ \t]*(?:\\?\r?\n[ \t]*)?'",
        ))
        .expect("pattern compiles")
    });
    let bytes = text.as_bytes();
    let mut joined = String::new();
    let mut tails = Vec::new();
    let mut last = 0;
    for gap in SPLIT.find_iter(text) {
        let inside = gap.start() > 0
            && is_token_byte(bytes[gap.start() - 1])
            && bytes
                .get(gap.end())
                .is_some_and(|&b| is_token_byte(b) && b != b'.');
        if !inside {
            continue;
        }
        let rest = &text[gap.end()..];
        let tail_len = rest.bytes().take_while(|&b| is_token_byte(b)).count();
        if tail_len >= 4 {
            tails.push(&rest[..tail_len]);
        }
        joined.push_str(&text[last..gap.start()]);
        last = gap.end();
    }
    if tails.is_empty() {
        return None;
    }
    joined.push_str(&text[last..]);
    Some((joined, tails))
}

/// Apply the rules; `decode` says whether base64 values may be decoded (only one level is).
fn run_rules(text: &str, decode: bool) -> (Cow<'_, str>, RedactionReport) {
    let mut report = RedactionReport::default();
    let mut current: Cow<'_, str> = Cow::Borrowed(text);
    let candidates = PREFILTER.matches(text);
    let scanned = |r: &Rule| r.scan.is_some_and(|scan| scan(text));
    if !candidates.matched_any() && !RULES.iter().any(scanned) {
        return (current, report);
    }
    // A rule that cannot match the original text cannot match it after earlier rules ran
    // either: they only put markers in, and no rule accepts a marker.
    for (i, rule) in RULES.iter().enumerate() {
        if !candidates.matched(i) && !scanned(rule) {
            continue;
        }
        if !decode && rule.kind == SecretKind::EncodedSecret {
            continue;
        }
        if let Some(changed) = apply(rule, &current, &mut report) {
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
    // A Kubernetes `env` entry written one line per item: `- name: DB_PASSWORD`, then
    // `value: "…"`, which alone names nothing.
    static NAME_LINE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(&format!(r#"\bname:[ \t]*["']?{SECRET_NAME}["']?[ \t]*$"#))
            .expect("pattern compiles")
    });
    // The `data:` of a Kubernetes Secret, in YAML or JSON, whose base64 values follow one
    // per item.
    static DATA_LINE: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r#"^(?:\s*\d+[→│])?[ \t]*\\?["']?data\\?["']?:[ \t]*\{?[ \t]*$"#)
            .expect("pattern compiles")
    });
    let mut report = RedactionReport::default();
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    let mut inside = false;
    let mut under_data = false;
    let mut previous: Option<&String> = None;
    for item in items {
        let before = previous.take();
        previous = Some(item);
        // A secret split over two items by a line continuation or a string join: both items
        // are redacted together, the first takes the joined text and the second a marker.
        if let Some(prev) = before
            .filter(|p| !inside && (p.ends_with('\\') || p.trim_end().ends_with(['"', '\'', '+'])))
        {
            let pair = format!("{prev}\n{item}");
            let (clean, found, joined) = redact_joining_splits(&pair);
            if joined {
                let kind = found.counts.keys().next().copied();
                report.merge(&found);
                if let (Some(last), Some(kind)) = (out.last_mut(), kind) {
                    *last = clean.into_owned();
                    out.push(kind.marker());
                    continue;
                }
            }
        }
        // Items below a `data:` line, while they stay indented, are read as part of it.
        let unmarked = item.trim_start_matches(|c: char| c.is_ascii_digit() || c == ' ');
        let unmarked = unmarked.strip_prefix(['→', '│']).unwrap_or(item.as_str());
        if under_data && unmarked.starts_with([' ', '\t', '"']) {
            let under = format!("data:\n{item}");
            let (clean, found) = redact_with_report(&under);
            if let Some((_, line)) = clean.split_once('\n').filter(|_| !found.is_empty()) {
                report.merge(&found);
                out.push(line.to_string());
                continue;
            }
        } else {
            under_data = false;
        }
        if DATA_LINE.is_match(item) {
            under_data = true;
        }
        let named_before = before.filter(|p| !p.contains('\n') && NAME_LINE.is_match(p));
        if let Some(prev) = named_before {
            let pair = format!("{prev}\n{item}");
            let (clean, found) = redact_with_report(&pair);
            if let Some((_, line)) = clean.split_once('\n').filter(|_| !found.is_empty()) {
                report.merge(&found);
                out.push(line.to_string());
                continue;
            }
        }
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
    fn structure_says_where_the_secret_is_and_the_rest_stays_readable() {
        // Fake values, assembled so the repository holds no secret-shaped literal.
        let pw = format!("{}{}", "Tr0ub4dor", "-Horse7");
        let cases = [
            (
                format!("    12\u{2192}DB_PASSWORD={pw}"),
                "    12\u{2192}DB_PASSWORD=[redacted:env_secret]".to_string(),
            ),
            (
                format!("  password: {pw}  # prod"),
                "  password: [redacted:env_secret]  # prod".to_string(),
            ),
            (
                format!("app.config['SECRET_KEY'] = '{pw}'"),
                "app.config['SECRET_KEY'] = [redacted:env_secret]".to_string(),
            ),
            (
                format!("db.internal:5432:app:appuser:{pw}"),
                "db.internal:5432:app:appuser:[redacted:password]".to_string(),
            ),
            (
                format!("machine api.acme.dev login ops password {pw}"),
                "machine api.acme.dev login ops password [redacted:password]".to_string(),
            ),
            (
                format!("curl -u admin:{pw} https://ci.acme.dev"),
                "curl -u [redacted:password] https://ci.acme.dev".to_string(),
            ),
            (
                format!("mysql -uroot -p{pw} app"),
                "mysql -uroot -p[redacted:password] app".to_string(),
            ),
            (
                format!("docker login -u bob -p {pw} registry.acme.dev"),
                "docker login -u bob -p [redacted:password] registry.acme.dev".to_string(),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(redact(&text), want, "{text}");
        }
        let key = format!("{}{}", "9f86d081884c7d65", "9a2feaa0c55ad015");
        assert_eq!(
            redact(&format!(
                "SENTRY_DSN=https://{key}@o12345.ingest.sentry.io/678"
            )),
            "SENTRY_DSN=https://[redacted:sentry_key]@o12345.ingest.sentry.io/678"
        );
        let (_, report) = redact_with_report(&format!(
            "Set-Cookie: sessionid={}; Path=/",
            "3l1kqy9v8m3rwlap1annqt29kbihdy06"
        ));
        assert_eq!(report.counts.get(&SecretKind::SessionCookie), Some(&1));
    }

    #[test]
    fn code_and_prose_that_name_a_secret_are_left_alone() {
        for text in [
            "const apiKey = process.env.OPENROUTER_API_KEY;",
            "self.username, self.password = credentials",
            "authorization = base64.decodebytes(authorization)",
            "the --username and --password options",
            "mysql -u root -p app",
            "ssh -p 2222 deploy@10.0.0.5",
            "password combination.",
            "Error::Token => \"invalid token\",",
        ] {
            assert!(matches!(redact(text), Cow::Borrowed(_)), "{text}");
        }
    }

    #[test]
    fn a_kubernetes_env_entry_written_one_line_per_item_is_redacted() {
        let pw = format!("{}{}", "hvaj", "tiger4642");
        let items: Vec<String> = vec![
            "env:".into(),
            "- name: DB_PASSWORD".into(),
            format!("  value: \"{pw}\""),
            "- name: LOG_LEVEL".into(),
            "  value: debug".into(),
        ];
        let (out, report) = redact_items(&items);
        assert_eq!(out[2], "  value: [redacted:env_secret]");
        assert_eq!(out[4], "  value: debug");
        assert_eq!(report.total(), 1);
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

    /// Standard base64 with padding.
    fn b64(bytes: &[u8]) -> String {
        const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |acc, (i, &b)| acc | (u32::from(b) << (16 - 8 * i)));
            for i in 0..4 {
                out.push(if i <= chunk.len() {
                    T[((n >> (18 - 6 * i)) & 63) as usize] as char
                } else {
                    '='
                });
            }
        }
        out
    }

    #[test]
    fn base64_decodes_padded_unpadded_and_url_safe_and_refuses_the_rest() {
        assert_eq!(decode_base64(&b64(b"app:pw")).unwrap(), b"app:pw");
        assert_eq!(decode_base64("YWRtaW4").unwrap(), b"admin");
        assert_eq!(decode_base64("-_8").unwrap(), vec![0xfb, 0xff]);
        assert_eq!(decode_base64("abcde"), None);
        assert_eq!(decode_base64("ab$d"), None);
    }

    #[test]
    fn a_kubernetes_secret_value_is_decoded_and_redacted_when_it_holds_a_secret() {
        let url = b64(format!("postgres://app:{}@db:5432/app", "Kq7-vVd2x9Lp").as_bytes());
        let user = b64(b"admin");
        let yaml = format!(
            "apiVersion: v1\ndata:\n  DATABASE_URL: {url}\n  username: {user}\nkind: Secret"
        );
        let (out, report) = redact_with_report(&yaml);
        assert_eq!(
            out,
            format!("apiVersion: v1\ndata:\n  DATABASE_URL: [redacted:encoded_secret]\n  username: {user}\nkind: Secret")
        );
        assert_eq!(report.counts.get(&SecretKind::EncodedSecret), Some(&1));
        let json =
            format!("{{\"data\": {{\"DATABASE_URL\": \"{url}\", \"username\": \"{user}\"}}}}");
        assert_eq!(
            redact(&json),
            format!("{{\"data\": {{\"DATABASE_URL\": \"[redacted:encoded_secret]\", \"username\": \"{user}\"}}}}")
        );
        // The same value where nothing says it is a Secret's data stays: it is not decoded.
        let elsewhere = format!("checksum:\n  DATABASE_URL: {url}");
        assert!(matches!(redact(&elsewhere), Cow::Borrowed(_)));
    }

    #[test]
    fn an_auth_value_that_decodes_to_a_user_and_password_is_redacted() {
        let auth = b64(format!("robot$ci:{}", "Zr8-qPw4m2Tn").as_bytes());
        assert_eq!(
            redact(&format!("imageCredentials:\n  auth: {auth}\n")),
            "imageCredentials:\n  auth: [redacted:encoded_secret]\n"
        );
        assert_eq!(
            redact(&format!("     3\u{2192}_auth={auth}")),
            "     3\u{2192}_auth=[redacted:npm_token]"
        );
        // A decoded value with no password in it stays.
        let plain = format!("  auth: {}", b64(b"kerberos"));
        assert!(matches!(redact(&plain), Cow::Borrowed(_)));
    }

    #[test]
    fn base64_that_decodes_to_no_secret_is_left_alone() {
        let cert = b64(format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            "MIIBszCCAVmgAwIBAgIUQ2VydGlmaWNhdGVGb3JUZXN0czAKBggqhkjOPQQDAjAS"
        )
        .as_bytes());
        for text in [
            // GitHub API JSON: node ids decode to `NN:Type123`.
            format!(
                "{{\"data\": {{\"node_id\": \"{}\", \"license\": {{\"node_id\": \"{}\"}}}}}}",
                b64(b"04:User583231"),
                b64(b"07:License13")
            ),
            format!("data:\n  tls.crt: {cert}\n  port: {}", b64(b"5432")),
            // Binary data, as an image or a hash decodes.
            "data:\n  logo.png: iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB".to_string(),
        ] {
            assert!(matches!(redact(&text), Cow::Borrowed(_)), "{text}");
        }
    }

    #[test]
    fn a_secret_split_by_a_line_continuation_loses_both_halves() {
        let (a, b) = ("Ab3dEf6hIj9kLm2nOp5q", "Rs8tUv1wXy4zAb3dEf6h");
        let raw = format!("export OPENAI_API_KEY=sk-proj-{a}\\\n  {b}\necho ok");
        let (out, report) = redact_with_report(&raw);
        assert_eq!(out, "export OPENAI_API_KEY=[redacted:openai_key]\necho ok");
        assert_eq!(report.total(), 1);
        // As a command sits in a tool call's JSON: the backslash and the line break escaped.
        let escaped =
            format!("{{\"command\":\"curl -H 'Authorization: Bearer {a}\\\\\\n{b}' https://x\"}}");
        let out = redact(&escaped);
        assert!(!out.contains(a) && !out.contains(b), "{out}");
    }

    #[test]
    fn a_secret_split_by_a_string_join_loses_both_halves() {
        let (a, b) = ("Mv835ZSftJKeVtQRC2", "QKT1uow2Zs7cHbF6Jk");
        for text in [
            format!("const key = \"ghp_{a}\" + \"{b}\";"),
            format!("GITHUB = ('ghp_{a}'\n          '{b}')"),
            format!("token = \"ghp_{a}\" \"{b}\""),
        ] {
            let out = redact(&text);
            assert!(!out.contains(a) && !out.contains(b), "{text}\n-> {out}");
            assert!(out.contains("[redacted:github_token]"), "{out}");
        }
    }

    #[test]
    fn a_split_that_joins_into_no_secret_leaves_the_text_as_it_is() {
        for text in [
            "cargo build --release \\\n  --features tracing,metrics",
            "echo \"part one of the message\" \\\n  \"part two of the message\"",
            "const greeting = \"Hello, \" + \"world\" + \"!\";",
            "msg = ('first half of a long sentence '\n       'second half of it')",
        ] {
            assert!(matches!(redact(text), Cow::Borrowed(_)), "{text}");
        }
    }

    #[test]
    fn items_split_by_a_continuation_or_under_a_data_line_are_redacted_together() {
        let (a, b) = ("SGbgM1GXnwwN8yX8uc", "IvzTQo18Zz5BB3Qguw");
        let url = b64(format!("postgres://app:{}@db/app", "Kq7-vVd2x9Lp").as_bytes());
        let items: Vec<String> = vec![
            "docker run --rm \\".into(),
            format!("  -e GITHUB_TOKEN=ghp_{a}\\"),
            format!("{b} \\"),
            "  ghcr.io/acme/bot:2".into(),
            "kind: Secret".into(),
            "data:".into(),
            format!("  DATABASE_URL: {url}"),
            "metadata:".into(),
            format!("  note: {url}"),
        ];
        let (out, report) = redact_items(&items);
        let all = out.join("\n");
        assert!(!all.contains(a) && !all.contains(b), "{all}");
        assert_eq!(out.len(), items.len());
        assert_eq!(out[6], "  DATABASE_URL: [redacted:encoded_secret]");
        // Out of the `data:` section the value is not decoded.
        assert_eq!(out[8], items[8]);
        assert_eq!(out[3], items[3]);
        assert!(report.counts.contains_key(&SecretKind::EncodedSecret));
    }

    #[test]
    fn vendor_shapes_of_the_third_round_are_redacted() {
        let cases = [
            (
                format!(
                    "newrelic profile add --apiKey NRAK-{} --region US",
                    "7QX2M9VKD4ZB1T8RNC3W5HJ0PLE"
                ),
                "newrelic profile add --apiKey [redacted:vendor_token] --region US",
            ),
            (
                format!(
                    "new Client({{ auth: \"secret_{}\" }})",
                    "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3dEf6hIj9"
                ),
                "new Client({ auth: \"[redacted:vendor_token]\" })",
            ),
            (
                format!(
                    "curl https://api.telegram.org/bot123456789:AA{}/getMe",
                    "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zA"
                ),
                "curl https://api.telegram.org/bot[redacted:telegram_token]/getMe",
            ),
            (
                format!("hvs.{}\n", "Ab3dEf6hIj9kLm2nOp5qRs8t"),
                "[redacted:vault_token]\n",
            ),
            (
                format!("+DB_PASSWORD={}", "Tr0ub4dor-Horse7"),
                "+DB_PASSWORD=[redacted:env_secret]",
            ),
            (
                format!("key id A3TX{}", "QK2M9VKD4ZB1T8RN"),
                "key id [redacted:aws_access_key]",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(redact(&text), want, "{text}");
        }
        let batch = format!("hvb.AAAAAQ{}", "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z".repeat(4));
        assert_eq!(batch.len(), 138);
        assert_eq!(
            redact(&format!("token  {batch}")),
            "token  [redacted:vault_token]"
        );
    }
}
