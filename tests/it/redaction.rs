//! Redaction corpus: realistic secrets (every one redacted, with the right kind) and
//! near-misses that look like secrets but are not (none redacted).
//!
//! The secrets are fake. They are assembled at run time from a vendor prefix and a
//! deterministic pseudo-random body so that the repository holds no secret-shaped literal.

use crate::common;

use soba_core::redact::{redact, redact_with_report, SecretKind};

const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const UPPER_DIGITS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const B64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const HEX: &str = "0123456789abcdef";
const DIGITS: &str = "0123456789";

/// Deterministic random-looking text (xorshift64*), different for every seed.
fn rnd(seed: u64, len: usize, alphabet: &str) -> String {
    let chars: Vec<char> = alphabet.chars().collect();
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
            chars[(v >> 33) as usize % chars.len()]
        })
        .collect()
}

fn pem(label: &str, seed: u64) -> String {
    let body: Vec<String> = (0..6).map(|i| rnd(seed + i, 64, B64)).collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----",
        body.join("\n")
    )
}

fn jwt(seed: u64) -> String {
    let header = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9";
    format!(
        "{header}.eyJ{}.{}",
        rnd(seed, 60, B64URL),
        rnd(seed + 1, 43, B64URL)
    )
}

/// (expected kind, the secret itself, text that contains it)
fn secrets() -> Vec<(SecretKind, String, String)> {
    use SecretKind::*;
    let mut v: Vec<(SecretKind, String, String)> = Vec::new();
    let mut add = |kind, secret: String, context: &dyn Fn(&str) -> String| {
        let text = context(&secret);
        v.push((kind, secret, text));
    };
    let s = |p: &str, seed, n, a| format!("{p}{}", rnd(seed, n, a));

    // OpenAI
    add(OpenaiKey, s("sk-", 1, 48, ALNUM), &|k| {
        format!("client = OpenAI(api_key=\"{k}\")")
    });
    add(OpenaiKey, s("sk-proj-", 2, 120, B64URL), &|k| {
        format!("curl https://api.openai.com/v1/models -H \"Authorization: Bearer {k}\"")
    });
    add(OpenaiKey, s("sk-svcacct-", 3, 100, B64URL), &|k| {
        format!("OPENAI_API_KEY={k}")
    });
    add(OpenaiKey, s("sk-admin-", 4, 90, B64URL), &|k| {
        format!("export OPENAI_ADMIN_KEY={k}")
    });
    // Anthropic
    add(
        AnthropicKey,
        format!("{}{}AA", "sk-ant-api03-", rnd(5, 93, B64URL)),
        &|k| format!("ANTHROPIC_API_KEY={k}"),
    );
    add(
        AnthropicKey,
        format!("{}{}AA", "sk-ant-admin01-", rnd(6, 93, B64URL)),
        &|k| format!("{{\"x-api-key\": \"{k}\"}}"),
    );
    add(
        AnthropicKey,
        format!("{}{}AA", "sk-ant-api03-", rnd(7, 93, B64URL)),
        &|k| format!("anthropic.Anthropic(api_key='{k}')"),
    );
    // GitHub
    add(GithubToken, s("ghp_", 8, 36, ALNUM), &|k| {
        format!("git remote set-url origin https://{k}@github.com/acme/api.git")
    });
    add(GithubToken, s("gho_", 9, 36, ALNUM), &|k| {
        format!("token: {k}")
    });
    add(GithubToken, s("ghs_", 10, 36, ALNUM), &|k| {
        format!("Using installation token {k} for checkout")
    });
    add(GithubToken, s("ghu_", 11, 36, ALNUM), &|k| {
        format!("gh auth login --with-token <<< {k}")
    });
    add(GithubToken, s("ghr_", 12, 36, ALNUM), &|k| {
        format!("refresh_token={k}&grant_type=refresh_token")
    });
    add(
        GithubToken,
        format!(
            "{}{}_{}",
            "github_pat_",
            rnd(13, 22, ALNUM),
            rnd(14, 59, ALNUM)
        ),
        &|k| format!("GH_TOKEN={k} gh pr list"),
    );
    // GitLab
    add(GitlabToken, s("glpat-", 15, 20, B64URL), &|k| {
        format!("curl --header \"PRIVATE-TOKEN: {k}\" https://gitlab.com/api/v4/projects")
    });
    add(GitlabToken, s("gldt-", 16, 20, ALNUM), &|k| {
        format!("deploy token {k}")
    });
    add(GitlabToken, s("glrt-", 17, 20, ALNUM), &|k| {
        format!("gitlab-runner register --token {k}")
    });
    // AWS
    add(AwsAccessKey, s("AKIA", 18, 16, UPPER_DIGITS), &|k| {
        format!("aws_access_key_id = {k}")
    });
    add(AwsAccessKey, s("ASIA", 19, 16, UPPER_DIGITS), &|k| {
        format!("\"AccessKeyId\": \"{k}\",")
    });
    add(AwsSecretKey, rnd(20, 40, B64), &|k| {
        format!("[default]\naws_secret_access_key = {k}\n")
    });
    add(AwsSecretKey, rnd(21, 40, B64), &|k| {
        format!("AWS_SECRET_ACCESS_KEY={k}")
    });
    // GCP
    add(GcpApiKey, s("AIza", 22, 35, B64URL), &|k| {
        format!("https://maps.googleapis.com/maps/api/geocode/json?address=x&key={k}")
    });
    add(GcpApiKey, s("AIza", 23, 35, B64URL), &|k| {
        format!("firebaseConfig = {{ apiKey: \"{k}\" }}")
    });
    add(GcpOauthToken, s("ya29.", 24, 120, B64URL), &|k| {
        format!("gcloud auth print-access-token\n{k}")
    });
    add(
        PrivateKey,
        pem("PRIVATE KEY", 25).replace('\n', "\\n"),
        &|k| {
            format!("{{\"type\": \"service_account\", \"private_key\": \"{k}\\n\", \"client_email\": \"ci@acme.iam.gserviceaccount.com\"}}")
        },
    );
    // Slack
    add(
        SlackToken,
        format!(
            "xoxb-{}-{}-{}",
            rnd(26, 12, DIGITS),
            rnd(27, 13, DIGITS),
            rnd(28, 24, ALNUM)
        ),
        &|k| format!("SLACK_BOT_TOKEN={k}"),
    );
    add(
        SlackToken,
        format!(
            "xoxp-{}-{}-{}-{}",
            rnd(29, 12, DIGITS),
            rnd(30, 12, DIGITS),
            rnd(31, 13, DIGITS),
            rnd(32, 32, HEX)
        ),
        &|k| format!("slack.WebClient(token=\"{k}\")"),
    );
    add(
        SlackWebhook,
        format!(
            "https://hooks.slack.com/services/T{}/B{}/{}",
            rnd(33, 8, UPPER_DIGITS),
            rnd(34, 10, UPPER_DIGITS),
            rnd(35, 24, ALNUM)
        ),
        &|k| format!("curl -X POST -d '{{\"text\":\"deploy done\"}}' {k}"),
    );
    // Stripe
    add(StripeKey, s("sk_live_", 36, 24, ALNUM), &|k| {
        format!("Stripe.api_key = \"{k}\"")
    });
    add(StripeKey, s("rk_live_", 37, 24, ALNUM), &|k| {
        format!("restricted key {k}")
    });
    add(StripeKey, s("sk_test_", 38, 99, ALNUM), &|k| {
        format!("STRIPE_SECRET_KEY={k}")
    });
    add(StripeKey, s("whsec_", 39, 32, ALNUM), &|k| {
        format!("STRIPE_WEBHOOK_SECRET={k}")
    });
    // npm, Hugging Face
    add(NpmToken, s("npm_", 40, 36, ALNUM), &|k| {
        format!("//registry.npmjs.org/:_authToken={k}")
    });
    add(HuggingfaceToken, s("hf_", 41, 34, ALNUM), &|k| {
        format!("huggingface-cli login --token {k}")
    });
    // Private keys
    add(PrivateKey, pem("RSA PRIVATE KEY", 42), &|k| {
        format!("cat ~/.ssh/id_rsa\n{k}\n")
    });
    add(PrivateKey, pem("OPENSSH PRIVATE KEY", 43), &|k| {
        format!("{k}\n")
    });
    add(PrivateKey, pem("EC PRIVATE KEY", 44), &|k| {
        format!("key.pem:\n{k}")
    });
    add(PrivateKey, pem("ENCRYPTED PRIVATE KEY", 45), &|k| {
        format!("```\n{k}\n```")
    });
    add(PrivateKey, pem("PGP PRIVATE KEY BLOCK", 46), &|k| {
        format!("gpg --export-secret-keys --armor\n{k}")
    });
    add(
        PrivateKey,
        pem("PRIVATE KEY", 47)
            .split("\n-----END")
            .next()
            .unwrap_or_default()
            .to_string(),
        &|k| format!("(truncated output)\n{k}"),
    );
    // JWTs and bearer tokens
    add(Jwt, jwt(48), &|k| format!("Cookie: session={k}; Path=/"));
    add(Jwt, jwt(50), &|k| {
        format!("{{\"access_token\": \"{k}\", \"expires_in\": 3600}}")
    });
    add(Jwt, jwt(52), &|k| format!("Authorization: Bearer {k}"));
    add(BearerToken, rnd(54, 40, ALNUM), &|k| {
        format!("Authorization: Bearer {k}")
    });
    add(
        BearerToken,
        format!("{}.{}", rnd(55, 20, ALNUM), rnd(56, 30, B64URL)),
        &|k| format!("curl -H 'authorization: bearer {k}' https://api.acme.dev"),
    );
    add(BearerToken, rnd(57, 64, HEX), &|k| {
        format!("{{\"headers\": {{\"Authorization\": \"Bearer {k}\"}}}}")
    });
    // URLs with credentials
    add(
        UrlCredentials,
        format!("app:{}", rnd(58, 18, ALNUM)),
        &|k| format!("DATABASE_URL=postgres://{k}@db.internal:5432/prod"),
    );
    add(
        UrlCredentials,
        format!("admin:{}", rnd(59, 16, ALNUM)),
        &|k| format!("mongodb+srv://{k}@cluster0.ab12c.mongodb.net/test"),
    );
    add(UrlCredentials, format!(":{}", rnd(60, 24, ALNUM)), &|k| {
        format!("redis://{k}@cache:6379/0")
    });
    add(
        UrlCredentials,
        format!("deploy:{}", rnd(61, 12, ALNUM)),
        &|k| format!("git clone https://{k}@git.acme.dev/ops/infra.git"),
    );
    add(
        UrlCredentials,
        format!("oauth2:{}", s("glpat-", 62, 20, B64URL)),
        &|k| format!("https://{k}@gitlab.com/acme/app.git"),
    );
    // .env-style assignments
    add(EnvSecret, rnd(63, 24, ALNUM), &|k| {
        format!("DB_PASSWORD={k}")
    });
    add(EnvSecret, rnd(64, 50, B64), &|k| {
        format!("DJANGO_SECRET_KEY='{k}'")
    });
    add(EnvSecret, rnd(65, 32, HEX), &|k| {
        format!("export JWT_SECRET=\"{k}\"")
    });
    add(EnvSecret, rnd(66, 20, ALNUM), &|k| {
        format!("POSTGRES_PASSWORD={k} docker compose up")
    });
    add(EnvSecret, format!("sntrys_{}", rnd(67, 60, B64URL)), &|k| {
        format!("SENTRY_AUTH_TOKEN={k}")
    });
    add(MailgunKey, format!("key-{}", rnd(68, 32, HEX)), &|k| {
        format!("MAILGUN_API_KEY={k}")
    });
    add(EnvSecret, rnd(69, 16, ALNUM), &|k| format!("PASSWORD={k}"));
    add(EnvSecret, rnd(71, 24, ALNUM), &|k| {
        format!(r#"{{"command": "echo DB_PASSWORD=\"{k}\" >> .env\ncat .env"}}"#)
    });
    add(EnvSecret, rnd(72, 30, ALNUM), &|k| {
        format!(r#"{{"text": "set it with\nexport REDIS_PASSWORD={k}\nthen restart"}}"#)
    });
    add(EnvSecret, rnd(70, 40, HEX), &|k| {
        format!("{{\"command\": \"CI_JOB_TOKEN={k} ./release.sh\"}}")
    });
    // Names that say password, access token or auth key in any casing and position.
    add(EnvSecret, rnd(73, 18, ALNUM), &|k| {
        format!("PGPASSWORD='{k}' psql -h db.internal -U app")
    });
    add(
        EnvSecret,
        rnd(74, 52, "abcdefghijklmnopqrstuvwxyz234567"),
        &|k| format!("export AZURE_DEVOPS_EXT_PAT={k}"),
    );
    add(EnvSecret, s("tskey-auth-", 75, 30, ALNUM), &|k| {
        format!("TS_AUTHKEY={k} tailscale up")
    });
    add(EnvSecret, s("tskey-auth-", 76, 30, ALNUM), &|k| {
        format!("sudo tailscale up --authkey={k} --ssh")
    });
    add(EnvSecret, s("tskey-auth-", 77, 30, ALNUM), &|k| {
        format!("sudo tailscale up --authkey {k}")
    });
    // Prose that gives the value.
    add(Password, rnd(78, 16, ALNUM), &|k| {
        format!("The password is {k}, keep it safe.")
    });
    add(EnvSecret, rnd(79, 24, ALNUM), &|k| {
        format!("my token is: {k}")
    });
    add(EnvSecret, rnd(80, 32, B64URL), &|k| {
        format!("the secret is \"{k}\"")
    });
    // A key block flattened onto one line, with and without its END line.
    add(PrivateKey, rnd(81, 64, B64), &|k| {
        format!(
            "-----BEGIN RSA PRIVATE KEY----- {} {k} -----END RSA PRIVATE KEY----- saved",
            rnd(82, 64, B64)
        )
    });
    add(PrivateKey, rnd(83, 64, B64), &|k| {
        format!(
            "key: -----BEGIN OPENSSH PRIVATE KEY----- {} {k}",
            rnd(84, 64, B64)
        )
    });
    add(PrivateKey, rnd(85, 64, B64), &|k| {
        format!("-----BEGIN EC PRIVATE KEY-----{k}")
    });
    v
}

/// Text that looks like it might hold a secret but does not.
fn near_misses() -> Vec<String> {
    let mut v = vec![
        format!("commit {}", rnd(100, 40, HEX)),
        format!("git show {}", rnd(101, 40, HEX)),
        format!("Merge: {} {}", rnd(102, 7, HEX), rnd(103, 7, HEX)),
        format!("https://github.com/acme/api/commit/{}", rnd(104, 40, HEX)),
        format!("fixed in {} (see #123)", rnd(105, 12, HEX)),
        "session id 3f2b8c1e-9a4d-4e7f-b2c6-1d5e8f9a0b3c".to_string(),
        "\"requestId\": \"d290f1ee-6c54-4b01-90e6-d701748f0851\"".to_string(),
        "DELETE /users/550e8400-e29b-41d4-a716-446655440000".to_string(),
        format!("image: ghcr.io/acme/api@sha256:{}", rnd(106, 64, HEX)),
        format!("\"integrity\": \"sha512-{}==\"", rnd(107, 86, B64)),
        format!("sha256sum: {}  dist/app.tar.gz", rnd(108, 64, HEX)),
        "assert_eq!(encode(b\"test data\"), \"dGVzdCBkYXRh\");".to_string(),
        format!("const FIXTURE: &str = \"{}\";", rnd(109, 120, B64)),
        format!("data:image/png;base64,iVBORw0KGgo{}", rnd(110, 200, B64)),
        "ULID 01ARZ3NDEKTSV4RRFFQ69G5FAV".to_string(),
        "color: #1e90ff; background: #fafafa;".to_string(),
        "git@github.com:acme/api.git".to_string(),
        "https://alice@example.com/repo.git".to_string(),
        "http://localhost:8080/api/v1/health".to_string(),
        "postgres://localhost:5432/app_test".to_string(),
        "http://[::1]:3000/callback?next=/home".to_string(),
        "Authorization: Bearer $TOKEN".to_string(),
        "Authorization: Bearer <token>".to_string(),
        "Authorization: Bearer ${{ secrets.GITHUB_TOKEN }}".to_string(),
        "The API uses a bearer token for authentication.".to_string(),
        "API_KEY=${API_KEY}".to_string(),
        "OPENAI_API_KEY=".to_string(),
        "GITHUB_TOKEN=<your-token>".to_string(),
        "DB_PASSWORD=changeme".to_string(),
        "API_KEY=xxxxxxxxxxxxxxxx".to_string(),
        "DB_PASSWORD=$(cat /run/secrets/db_password)".to_string(),
        "MAX_TOKENS=4096".to_string(),
        "KEY_PATH=/etc/ssl/private/server.pem".to_string(),
        "api_key = os.environ[\"OPENAI_API_KEY\"]".to_string(),
        "client = OpenAI(api_key=os.getenv(\"OPENAI_API_KEY\"))".to_string(),
        "if CSRF_TOKEN == \"\" { return Err(e) }".to_string(),
        "\"keepRecentTokens\": 20000, \"maxOutputTokens\": 8192".to_string(),
        format!(
            "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----",
            rnd(111, 64, B64)
        ),
        format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----",
            rnd(112, 64, B64)
        ),
        format!("ssh-rsa AAAAB3NzaC1yc2E{} dev@laptop", rnd(113, 300, B64)),
        format!(
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5{} ci@runner",
            rnd(114, 48, B64)
        ),
        "risk-assessment-framework-document-2024".to_string(),
        "cargo run --bin task-runner-config-loader-v2".to_string(),
        "pip install scikit-learn-intelex-extension".to_string(),
        "eyJhbGciOiJIUzI1NiJ9 is just a base64 JSON header".to_string(),
        "SLACK_TOKEN=xoxb-your-token-here".to_string(),
        "GitHub personal tokens start with ghp_ and fine-grained ones with github_pat_".to_string(),
        "Use sk_test_... keys in CI and sk_live_... keys in production.".to_string(),
        "tokens.before = 123456; tokens.after = 23456;".to_string(),
        "version 1.2.3-beta.4+build.5678".to_string(),
        "fe80::1ff:fe23:4567:890a".to_string(),
        "src/capsule/portable.rs:142:17".to_string(),
        format!("\"id\": \"toolu_01{}\"", rnd(115, 22, ALNUM)),
        format!("\"id\": \"call_{}\"", rnd(116, 24, ALNUM)),
        "AKIA is the prefix of long-term AWS access key ids".to_string(),
        "aws_access_key_id = AKIAXXXXXXXXXXXXXXXX".to_string(),
        "OPENAI_API_KEY=sk-your-key-here".to_string(),
        "password: ${{ secrets.DB_PASSWORD }}".to_string(),
        // A README quoted inside a JSON transcript: newlines are `\n`, keys are elided.
        r#"{"text":"```bash\nexport ANTHROPIC_API_KEY=sk-ant-...\n\n# Or OpenAI\nexport OPENAI_API_KEY=sk-...\n```"}"#.to_string(),
        "export GEMINI_API_KEY=…".to_string(),
        "url = f\"postgresql://{user}:{password}@{host}:5432/{db}\"".to_string(),
        "DSN = \"mysql://%s:%s@%s/app\" % (user, pw, host)".to_string(),
    ];
    v.extend(
        [
            // Names that end like a credential word but are none.
            "PAT_COUNT=12",
            "KEEPALIVE_PAT=abc",
            "PATTERN=foo_bar",
            "BYPASS=1",
            "GIT_PAT=$GIT_PAT",
            "export AZURE_DEVOPS_EXT_PAT=<your-pat>",
            "PGPASSWORD=$PGPASSWORD psql -h db",
            "export TS_AUTHKEY=${TS_AUTHKEY}",
            "tailscale up --authkey=$TS_AUTHKEY",
            // Prose about a credential that gives no value.
            "the token is expired",
            "The password is the one in the vault.",
            "the token is 1.2.3-beta.4567",
            "the secret is in src/config/settings.rs",
            "the password is password123",
            "the token was 2026-01-01T00:00:00Z",
            "the key is sorted by created_at",
            "the secret is https://vault.example.com/v1/kv/app",
        ]
        .map(String::from),
    );
    v.push(format!("msg_{}", rnd(117, 24, ALNUM)));
    v
}

#[test]
fn corpus_has_at_least_fifty_of_each() {
    assert!(secrets().len() >= 50, "{} secrets", secrets().len());
    assert!(
        near_misses().len() >= 50,
        "{} near-misses",
        near_misses().len()
    );
}

#[test]
fn every_secret_is_redacted_with_its_kind() {
    let mut failures = Vec::new();
    for (kind, secret, text) in secrets() {
        assert!(
            text.contains(&secret),
            "corpus bug: context drops the secret for {kind}"
        );
        let (out, report) = redact_with_report(&text);
        let marker = kind.marker();
        // The secret's random body must be gone, not just its prefix.
        let tail = &secret[secret.len().saturating_sub(12)..];
        if out.contains(tail) || !out.contains(&marker) || !report.counts.contains_key(&kind) {
            failures.push(format!("{kind}: {text:?}\n  -> {out:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} not redacted as expected:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn no_near_miss_is_redacted() {
    let failures: Vec<String> = near_misses()
        .into_iter()
        .filter_map(|text| match redact(&text) {
            std::borrow::Cow::Borrowed(_) => None,
            std::borrow::Cow::Owned(out) => Some(format!("{text:?}\n  -> {out:?}")),
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} near-misses redacted:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn redaction_is_idempotent() {
    for (_, _, text) in secrets() {
        let once = redact(&text).into_owned();
        assert_eq!(redact(&once), once, "second pass changed {once:?}");
    }
}

#[test]
fn secrets_inside_a_larger_document_are_all_found() {
    let all = secrets();
    let doc: String = all.iter().map(|(_, _, t)| format!("{t}\n\n")).collect();
    let (out, report) = redact_with_report(&doc);
    for (kind, secret, _) in &all {
        assert!(
            !out.contains(&secret[secret.len() - 12..]),
            "{kind} survived in the document"
        );
    }
    assert!(
        report.total() >= all.len(),
        "{} redactions for {} secrets",
        report.total(),
        all.len()
    );
}

/// Every string of a JSON value: the texts SOBA redacts are a session's message and tool
/// texts, not the transcript file's JSON around them.
fn json_strings(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(a) => a.iter().for_each(|x| json_strings(x, out)),
        serde_json::Value::Object(o) => o.values().for_each(|x| json_strings(x, out)),
        _ => {}
    }
}

#[test]
fn real_transcripts_have_nothing_to_redact() {
    // The fixture transcripts (public sessions) hold no secrets, only placeholders such as
    // `export OPENAI_API_KEY=sk-...` in quoted READMEs, and shapes close to secrets: git SHAs,
    // GitHub API JSON whose base64 `node_id`s decode to `04:User583231`, line continuations,
    // joined strings. Nothing may be flagged, neither in a file as it is nor in any of its
    // strings on its own (a message's or a tool result's text, as SOBA redacts it).
    let Some(dir) = common::transcripts_dir() else {
        return;
    };
    let mut files = 0;
    let mut strings = Vec::new();
    for format in ["pi", "claude-code", "codex", "openai-chat"] {
        for file in std::fs::read_dir(dir.join(format)).unwrap() {
            let path = file.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let (_, report) = redact_with_report(&text);
            assert!(report.is_empty(), "{}: {:?}", path.display(), report.counts);
            files += 1;
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                json_strings(&v, &mut strings);
            }
            for line in text.lines() {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
                    json_strings(&v, &mut strings);
                }
            }
        }
    }
    assert!(files >= 9, "{files} transcripts checked");
    strings.sort_unstable();
    strings.dedup();
    let flagged: Vec<String> = strings
        .iter()
        .filter_map(|s| {
            let (out, report) = redact_with_report(s);
            (!report.is_empty())
                .then(|| format!("{:?}: {}", report.counts, &out[..out.len().min(200)]))
        })
        .collect();
    assert!(strings.len() > 10_000, "{} strings checked", strings.len());
    assert!(
        flagged.is_empty(),
        "{} strings redacted:\n{}",
        flagged.len(),
        flagged.join("\n")
    );
}
