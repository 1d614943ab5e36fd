//! Redaction recall and false positives on a corpus written for this test: at least 300
//! planted secrets in the forms they take in real sessions (`.env` files, shell exports,
//! JSON and YAML config, command lines, HTTP headers, code, log lines) and at least 300
//! ordinary lines that only look like they might hold one (database keys, token limits,
//! public keys, publishable keys, hashes, ids, code reading a secret from the environment).
//!
//! Every secret is fake, assembled at run time from a vendor prefix and a deterministic
//! pseudo-random body, so the repository holds no secret-shaped literal. The figures are
//! printed (`cargo test --test it redaction_corpus:: -- --nocapture`) and kept in
//! docs/reliability.md.

use soba::redact::redact;

const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const UPPER_DIGITS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const B64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const HEX: &str = "0123456789abcdef";
const DIGITS: &str = "0123456789";
const PASSWORDISH: &str = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789!#%*-_.";

/// Deterministic random-looking text (xorshift64*), different for every seed.
fn rnd(seed: u64, len: usize, alphabet: &str) -> String {
    let chars: Vec<char> = alphabet.chars().collect();
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03 | 1;
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

/// A password as people choose them: words, digits and a symbol, never a plain word.
fn password(seed: u64) -> String {
    const WORDS: &[&str] = &[
        "Summer", "tiger", "Orchid", "blue", "Falcon", "maple", "Quartz", "river",
    ];
    let w = WORDS[seed as usize % WORDS.len()];
    match seed % 3 {
        0 => format!("{w}{}!{}", rnd(seed, 2, DIGITS), rnd(seed + 1, 3, ALNUM)),
        1 => rnd(seed, 14 + (seed % 7) as usize, PASSWORDISH) + "9",
        _ => format!("{}{w}{}", rnd(seed, 4, ALNUM), rnd(seed + 2, 4, DIGITS)),
    }
}

fn pem(label: &str, seed: u64, lines: usize) -> String {
    let body: Vec<String> = (0..lines).map(|i| rnd(seed + i as u64, 64, B64)).collect();
    format!(
        "-----BEGIN {label}-----\n{}\n{}=\n-----END {label}-----",
        body.join("\n"),
        rnd(seed + 99, 23, B64)
    )
}

fn jwt(seed: u64) -> String {
    format!(
        "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJ{}.{}",
        rnd(seed, 40 + (seed % 40) as usize, B64URL),
        rnd(seed + 1, 43, B64URL)
    )
}

/// A vendor token generator: `seed → token`.
type Gen = fn(u64) -> String;

/// Vendor tokens that are recognisable on their own, with the variable names they live in.
fn vendor_tokens() -> Vec<(&'static str, &'static str, Gen)> {
    vec![
        ("openai", "OPENAI_API_KEY", |s| {
            format!("sk-proj-{}", rnd(s, 100 + (s % 60) as usize, B64URL))
        }),
        ("openai-legacy", "OPENAI_KEY", |s| {
            format!("sk-{}T3BlbkFJ{}", rnd(s, 20, ALNUM), rnd(s + 1, 20, ALNUM))
        }),
        ("anthropic", "ANTHROPIC_API_KEY", |s| {
            format!("sk-ant-api03-{}AA", rnd(s, 93, B64URL))
        }),
        ("github", "GITHUB_TOKEN", |s| {
            format!("ghp_{}", rnd(s, 36, ALNUM))
        }),
        ("github-fine", "GH_TOKEN", |s| {
            format!("github_pat_{}_{}", rnd(s, 22, ALNUM), rnd(s + 1, 59, ALNUM))
        }),
        ("gitlab", "GITLAB_TOKEN", |s| {
            format!("glpat-{}", rnd(s, 20, B64URL))
        }),
        ("aws-access", "AWS_ACCESS_KEY_ID", |s| {
            format!("AKIA{}", rnd(s, 16, UPPER_DIGITS))
        }),
        ("gcp", "GOOGLE_API_KEY", |s| {
            format!("AIza{}", rnd(s, 35, B64URL))
        }),
        ("google-oauth", "GOOGLE_CLIENT_SECRET", |s| {
            format!("GOCSPX-{}", rnd(s, 28, B64URL))
        }),
        ("slack", "SLACK_BOT_TOKEN", |s| {
            format!(
                "xoxb-{}-{}-{}",
                rnd(s, 12, DIGITS),
                rnd(s + 1, 13, DIGITS),
                rnd(s + 2, 24, ALNUM)
            )
        }),
        ("stripe", "STRIPE_SECRET_KEY", |s| {
            format!("sk_live_{}", rnd(s, 24 + (s % 70) as usize, ALNUM))
        }),
        ("npm", "NPM_TOKEN", |s| format!("npm_{}", rnd(s, 36, ALNUM))),
        ("huggingface", "HF_TOKEN", |s| {
            format!("hf_{}", rnd(s, 34, ALNUM))
        }),
        ("twilio", "TWILIO_API_KEY", |s| {
            format!("SK{}", rnd(s, 32, HEX))
        }),
        ("sendgrid", "SENDGRID_API_KEY", |s| {
            format!("SG.{}.{}", rnd(s, 22, B64URL), rnd(s + 1, 43, B64URL))
        }),
        ("mailgun", "MAILGUN_API_KEY", |s| {
            format!("key-{}", rnd(s, 32, HEX))
        }),
        ("shopify", "SHOPIFY_ACCESS_TOKEN", |s| {
            format!("shpat_{}", rnd(s, 32, HEX))
        }),
        ("digitalocean", "DIGITALOCEAN_TOKEN", |s| {
            format!("dop_v1_{}", rnd(s, 64, HEX))
        }),
        ("pypi", "TWINE_PASSWORD", |s| {
            format!(
                "pypi-AgEIcHlwaS5vcmc{}",
                rnd(s, 70 + (s % 80) as usize, B64URL)
            )
        }),
        ("docker", "DOCKER_TOKEN", |s| {
            format!("dckr_pat_{}", rnd(s, 27, B64URL))
        }),
        ("telegram", "TELEGRAM_BOT_TOKEN", |s| {
            format!("{}:AA{}", rnd(s, 10, DIGITS), rnd(s + 1, 33, B64URL))
        }),
        ("discord", "DISCORD_BOT_TOKEN", |s| {
            format!(
                "M{}.{}.{}",
                rnd(s, 25, ALNUM),
                rnd(s + 1, 6, B64URL),
                rnd(s + 2, 38, B64URL)
            )
        }),
        ("jwt", "SESSION_JWT", jwt),
    ]
}

/// Where a free-standing token is found: the variable name and the token.
fn contexts() -> Vec<fn(&str, &str) -> String> {
    vec![
        |n, t| format!("{n}={t}"),
        |n, t| format!("export {n}=\"{t}\""),
        |n, t| format!("  \"{}\": \"{t}\",", n.to_ascii_lowercase()),
        |n, t| format!("{}: {t}", n.to_ascii_lowercase()),
        |_, t| format!("client = Client(\"{t}\", timeout=30)"),
        |_, t| format!("2024-05-01T10:22:01Z DEBUG auth: using credential {t} for request"),
        |n, t| format!("docker run -e {n}={t} ghcr.io/acme/worker:1.4"),
        |_, t| format!("```\n$ tool login --token {t}\nLogged in.\n```"),
        |n, t| format!("{{\"env\": {{\"{n}\": \"{t}\"}}}}"),
        |n, t| format!("{n}='{t}' npm run deploy"),
        |_, t| format!("Here is the key you asked for: {t}"),
        |n, t| format!("      - {n}={t}"),
    ]
}

/// (form, secret, text that contains it)
fn secrets() -> Vec<(String, String, String)> {
    let mut v = Vec::new();
    let mut seed = 1000u64;
    let mut next = || {
        seed += 7;
        seed
    };
    let ctx = contexts();
    for (i, (form, name, gen)) in vendor_tokens().into_iter().enumerate() {
        // Every vendor in eight of the twelve contexts, a different eight for each.
        for j in 0..8 {
            let c = ctx[(i * 5 + j * 7) % ctx.len()];
            let token = gen(next());
            v.push((form.to_string(), token.clone(), c(name, &token)));
        }
    }
    let mut add = |form: &str, secret: String, text: String| {
        v.push((form.to_string(), secret, text));
    };
    for k in 0..6 {
        // AWS secret keys in every configuration form, and session tokens.
        let s = rnd(next(), 40, B64);
        let text = match k {
            0 => format!("[default]\naws_secret_access_key = {s}\nregion = eu-west-1"),
            1 => format!(
                "{{\"AccessKeyId\": \"ASIA{}\", \"SecretAccessKey\": \"{s}\"}}",
                rnd(next(), 16, UPPER_DIGITS)
            ),
            2 => format!("aws configure set aws_secret_access_key {s}"),
            3 => format!("  secret_access_key: {s}"),
            4 => format!("AWS_SECRET_ACCESS_KEY={s} terraform apply"),
            _ => format!("s3cmd --secret_key= --secret-access-key {s} ls"),
        };
        add("aws-secret", s, text);
        let t = format!("IQoJb3JpZ2luX2Vj{}", rnd(next(), 300, B64));
        let text = match k {
            0 => format!("aws_session_token = {t}"),
            1 => format!("\"SessionToken\": \"{t}\","),
            2 => format!("export AWS_SESSION_TOKEN={t}"),
            3 => format!("aws configure set aws_session_token {t}"),
            4 => format!("x-amz-security-token: {t}"),
            _ => format!("  session_token: \"{t}\""),
        };
        add("aws-session", t, text);
        // npm's own config forms with a legacy (UUID) or base64 token.
        let u = format!(
            "{}-{}-4{}-a{}-{}",
            rnd(next(), 8, HEX),
            rnd(next(), 4, HEX),
            rnd(next(), 3, HEX),
            rnd(next(), 3, HEX),
            rnd(next(), 12, HEX)
        );
        let text = match k % 3 {
            0 => format!("//registry.npmjs.org/:_authToken={u}"),
            1 => format!("//npm.pkg.github.com/:_authToken=\"{u}\""),
            _ => format!("_auth = {}", rnd(next(), 32, B64) + "=="),
        };
        let secret = if k % 3 == 2 {
            text.rsplit(' ').next().unwrap().to_string()
        } else {
            u
        };
        add("npmrc", secret, text);
        // Azure storage connection strings and SAS URLs.
        let key = format!("{}==", rnd(next(), 86, B64));
        add(
            "azure-account-key",
            key.clone(),
            format!("DefaultEndpointsProtocol=https;AccountName=acmeprod;AccountKey={key};EndpointSuffix=core.windows.net"),
        );
        let sig = format!("{}%2B{}%3D", rnd(next(), 20, ALNUM), rnd(next(), 20, ALNUM));
        add(
            "azure-sas",
            sig.clone(),
            format!("https://acmeprod.blob.core.windows.net/backups/db.bak?sv=2022-11-02&ss=b&srt=o&sp=r&se=2025-01-01T00:00:00Z&sig={sig}"),
        );
        // Authorization headers.
        let basic = rnd(next(), 28, B64) + "=";
        let text = match k % 3 {
            0 => format!("curl -H 'Authorization: Basic {basic}' https://ci.acme.dev/api"),
            1 => format!("{{\"headers\": {{\"Authorization\": \"Basic {basic}\"}}}}"),
            _ => format!("> Authorization: basic {basic}"),
        };
        add("basic-auth", basic, text);
        let key = rnd(next(), 32, ALNUM);
        let text = match k % 3 {
            0 => format!("curl -H \"X-API-Key: {key}\" https://api.acme.dev/v2/items"),
            1 => format!("headers = {{\"x-api-key\": \"{key}\"}}"),
            _ => format!("api-key: {key}"),
        };
        add("api-key-header", key, text);
        let bearer = rnd(next(), 40, ALNUM);
        add(
            "bearer",
            bearer.clone(),
            format!("-H \"Authorization: Bearer {bearer}\""),
        );
        // Webhooks.
        let hook = format!(
            "https://discord.com/api/webhooks/{}/{}",
            rnd(next(), 18, DIGITS),
            rnd(next(), 68, B64URL)
        );
        add(
            "discord-webhook",
            hook.clone(),
            format!("curl -X POST {hook} -d @msg.json"),
        );
        let hook = format!(
            "https://hooks.slack.com/services/T{}/B{}/{}",
            rnd(next(), 8, UPPER_DIGITS),
            rnd(next(), 10, UPPER_DIGITS),
            rnd(next(), 24, ALNUM)
        );
        add(
            "slack-webhook",
            hook.clone(),
            format!("SLACK_WEBHOOK={hook}"),
        );
        // Private keys: whole, in JSON, truncated.
        let labels = [
            "RSA PRIVATE KEY",
            "OPENSSH PRIVATE KEY",
            "EC PRIVATE KEY",
            "PRIVATE KEY",
            "ENCRYPTED PRIVATE KEY",
            "PGP PRIVATE KEY BLOCK",
        ];
        let key = pem(labels[k], next(), 4 + k);
        let text = match k % 3 {
            0 => format!("$ cat ~/.ssh/id\n{key}\n"),
            1 => format!("{{\"private_key\": \"{}\\n\"}}", key.replace('\n', "\\n")),
            _ => key.split("\n-----END").next().unwrap().to_string(),
        };
        let secret = key.lines().nth(2).unwrap().to_string();
        add("private-key", secret, text);
        // Credentials in URLs.
        let pw = password(next());
        let text = match k % 3 {
            0 => format!("DATABASE_URL=postgres://app:{pw}@db.internal:5432/prod"),
            1 => format!("git clone https://deploy:{pw}@git.acme.dev/ops/infra.git"),
            _ => format!("redis://default:{pw}@cache.acme.dev:6379/0"),
        };
        add("url-credentials", pw, text);
    }
    // Passwords and secrets in every assignment form people write.
    let forms: Vec<fn(&str) -> String> = vec![
        |p| format!("password={p}"),
        |p| format!("db_password={p}"),
        |p| format!("DB_PASSWORD={p}"),
        |p| format!("export POSTGRES_PASSWORD='{p}'"),
        |p| format!("  password: {p}"),
        |p| format!("  password: \"{p}\""),
        |p| format!("{{\"user\": \"admin\", \"password\": \"{p}\"}}"),
        |p| format!("mysql -u root --password={p} app"),
        |p| format!("https://api.acme.dev/login?user=ops&password={p}"),
        |p| format!("DATABASES = {{'default': {{'PASSWORD': '{p}'}}}}"),
        |p| format!("admin_pass = \"{p}\""),
        |p| format!("smtp_password: '{p}'"),
        |p| format!("client_secret=\"{p}\""),
        |p| format!("\"clientSecret\": \"{p}\""),
        |p| format!("JWT_SECRET={p}"),
        |p| format!("redis.passwd={p}"),
    ];
    for (i, f) in forms.iter().enumerate() {
        for r in 0..3 {
            let p = password(next() + (i * 3 + r) as u64);
            v.push(("password".into(), p.clone(), f(&p)));
        }
    }
    for k in 0..6 {
        let key = format!("django-insecure-{}", rnd(next(), 50, PASSWORDISH));
        let text = match k % 3 {
            0 => format!("SECRET_KEY = '{key}'"),
            1 => format!("SECRET_KEY = \"{key}\"\nDEBUG = False"),
            _ => format!("DJANGO_SECRET_KEY={key}"),
        };
        v.push(("django-secret".into(), key, text));
    }
    v
}

/// Lines from ordinary sessions that must come out unchanged.
fn ordinary_lines() -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    let mut seed = 5000u64;
    let mut next = || {
        seed += 3;
        seed
    };
    let templates: Vec<fn(&str, u64) -> String> = vec![
        |h, _| format!("commit {h}"),
        |h, _| format!("git cherry-pick {}", &h[..12]),
        |h, n| format!("fixed in {} (see #{n})", &h[..10]),
        |h, _| format!("image: ghcr.io/acme/api@sha256:{h}{h}"),
        |h, _| format!("{h}  dist/app-1.4.2.tar.gz"),
        |_, n| format!("SORT_KEY=created_at # page {n}"),
        |_, _| "PRIMARY_KEY=user_id".to_string(),
        |_, n| format!("DEFAULT_MAX_TOKEN={}", 1024 * (n % 8 + 1)),
        |_, n| format!("MAX_TOKENS={}", 512 * (n % 16 + 1)),
        |h, _| format!("PUBLIC_KEY=ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{h} ops@bastion"),
        |h, _| format!("STRIPE_PUBLISHABLE_KEY=pk_live_{h}"),
        |h, _| format!("NEXT_PUBLIC_STRIPE_KEY=pk_test_{h}"),
        |h, _| format!("const stripe = Stripe('pk_live_{}');", &h[..24]),
        |_, n| format!("PARTITION_KEY=tenant_id  # shard {n}"),
        |_, _| "CACHE_KEY=session:user".to_string(),
        |_, _| "IDEMPOTENCY_KEY=request_id".to_string(),
        |_, n| format!("\"max_output_tokens\": {n},"),
        |_, n| format!("  \"maxTokens\": {n}, \"temperature\": 0.2"),
        |_, n| format!("usage: prompt_tokens={n} completion_tokens={}", n / 3),
        |_, _| "api_key = os.environ[\"OPENAI_API_KEY\"]".to_string(),
        |_, _| "client = OpenAI(api_key=os.getenv(\"OPENAI_API_KEY\"))".to_string(),
        |_, _| "password = getpass.getpass(\"Password: \")".to_string(),
        |_, _| "conn = psycopg.connect(password=password, host=host)".to_string(),
        |_, _| "db.connect(user=cfg.user, password=cfg.db_password)".to_string(),
        |_, _| "token = request.headers.get(\"Authorization\")".to_string(),
        |_, _| "let token = std::env::var(\"GITHUB_TOKEN\")?;".to_string(),
        |_, _| "API_KEY=${API_KEY}".to_string(),
        |_, _| "GITHUB_TOKEN=${{ secrets.GITHUB_TOKEN }}".to_string(),
        |_, _| "password: ${{ secrets.DB_PASSWORD }}".to_string(),
        |_, _| "DB_PASSWORD=$(cat /run/secrets/db_password)".to_string(),
        |_, _| "OPENAI_API_KEY=sk-...".to_string(),
        |_, _| "export ANTHROPIC_API_KEY=<your-key>".to_string(),
        |_, _| "SECRET_KEY = os.environ[\"DJANGO_SECRET_KEY\"]".to_string(),
        |_, _| "SECRET_KEY = env(\"SECRET_KEY\")".to_string(),
        |_, n| format!("session id {}", uuid(n)),
        |_, n| format!("\"requestId\": \"{}\"", uuid(n + 1)),
        |_, n| format!("DELETE /users/{}", uuid(n + 2)),
        |h, _| format!("\"integrity\": \"sha512-{h}{h}==\""),
        |_, n| format!("src/capsule/portable.rs:{n}:17: warning: unused variable"),
        |_, n| format!("test redact::tests::case_{n} ... ok"),
        |_, n| format!("Compiling soba v0.{n}.0 (/work/soba)"),
        |_, n| format!("  --> src/main.rs:{n}:5"),
        |_, n| format!("Finished `test` profile in {}.{}s", n % 60, n % 10),
        |_, n| format!("HTTP/1.1 200 OK content-length: {n}"),
        |_, _| "Authorization: Bearer $TOKEN".to_string(),
        |_, _| "Authorization: Basic <base64 user:pass>".to_string(),
        |_, _| "The API uses a bearer token for authentication.".to_string(),
        |_, _| "X-API-Key: ${API_KEY}".to_string(),
        |_, _| "git@github.com:acme/api.git".to_string(),
        |_, n| format!("http://localhost:{}/api/v1/health", 3000 + n % 1000),
        |_, _| "postgres://localhost:5432/app_test".to_string(),
        |_, _| "url = f\"postgresql://{user}:{password}@{host}:5432/{db}\"".to_string(),
        |_, _| "key=value pairs are separated by `&`".to_string(),
        |_, n| format!("for key, value in items[{n}:]:"),
        |_, _| "map.insert(key, value);".to_string(),
        |_, _| "token_count += 1".to_string(),
        |_, _| "if CSRF_TOKEN == \"\" { return Err(e) }".to_string(),
        |_, _| "KEY_PATH=/etc/ssl/private/server.pem".to_string(),
        |_, _| "TOKEN_URL=https://oauth2.googleapis.com/token".to_string(),
        |_, _| "password_reset_url: /accounts/reset".to_string(),
        |_, n| format!("ULID 01ARZ3NDEKTSV4RRFF{:06}", n % 1_000_000),
        |_, n| format!("color: #{:06x}; background: #fafafa;", n * 7919 % 0xffffff),
        |h, _| format!("\"id\": \"toolu_01{}\"", &h[..22]),
        |h, _| format!("\"id\": \"call_{}\"", &h[..24]),
        |_, n| format!("version 1.{}.{}-beta.{}+build.{n}", n % 9, n % 7, n % 5),
        |_, _| "AKIA is the prefix of long-term AWS access key ids".to_string(),
        |_, _| "aws_access_key_id = AKIAXXXXXXXXXXXXXXXX".to_string(),
        |_, _| "Use sk_test_... keys in CI and sk_live_... keys in production.".to_string(),
        |_, _| "-----BEGIN PUBLIC KEY-----".to_string(),
        |_, _| "-----BEGIN CERTIFICATE-----".to_string(),
        |_, n| format!("assert_eq!(tokens.before, {n});"),
        |_, _| "The password must be at least 12 characters long.".to_string(),
        |_, _| "Reset your password from the account page.".to_string(),
        |_, _| "token: the session's newest checkpoint".to_string(),
        |_, _| "secret: true".to_string(),
        |_, _| "  auth: required".to_string(),
        |_, _| "auth_token_ttl=3600".to_string(),
        |_, n| format!("  valueFrom: {{secretKeyRef: {{name: api-{n}, key: password}}}}"),
        |_, n| format!("kubectl create secret generic db-{n} --from-file=./password.txt"),
        |_, n| format!("TOKEN_EXPIRY_SECONDS={n}"),
        |_, n| format!("RATE_LIMIT_TOKENS_PER_MINUTE={}", n * 10),
        |_, n| format!("max_tokens={n}"),
        |_, n| format!("--max-tokens {n} --temperature 0.{}", n % 10),
        |h, _| {
            format!(
                "AWS_DEFAULT_REGION=eu-west-1 aws s3 cp s3://acme-{}/x .",
                &h[..6]
            )
        },
        |_, n| format!("    let key = format!(\"user:{{}}\", id{n});"),
        |_, n| format!("HashMap<String, u64> with {n} keys"),
        |_, n| format!("redis-cli GET session:{n}"),
        |h, _| format!("etag: \"{}\"", &h[..32]),
        |h, _| format!("Cookie: _ga=GA1.2.{}.{}", &h[..8], &h[8..16]),
        |_, n| format!("PORT={} HOST=0.0.0.0 cargo run", 8000 + n % 1000),
        |_, n| format!("LOG_LEVEL=debug WORKERS={} ./serve", n % 16 + 1),
        |h, _| format!("uses: actions/checkout@{h}"),
        |_, n| format!("\"password_min_length\": {},", 8 + n % 8),
        |_, n| format!("tokens.before = {n}; tokens.after = {};", n / 4),
        |_, n| format!("{n} passed; 0 failed; 0 ignored"),
        |_, n| format!("error[E0308]: mismatched types at line {n}"),
        |h, _| format!("Merge: {} {}", &h[..7], &h[7..14]),
        |h, _| format!("https://github.com/acme/api/commit/{h}"),
        |h, _| format!("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQ{h}{h} dev@laptop"),
        |_, n| format!("sk-learn-style-config-name-{n}"),
        |_, n| format!("pip install scikit-learn=={}.{}", n % 2 + 1, n % 9),
        |h, _| format!("const FIXTURE: &str = \"{h}{h}\";"),
        |_, n| format!("export PATH=$HOME/.cargo/bin:$PATH # step {n}"),
        |_, n| format!("echo \"done in {n}ms\""),
        |_, n| format!("KEYCLOAK_REALM=acme-{n}"),
        |_, n| format!("MONKEY_PATCH={}", n % 2 == 0),
        |_, n| format!("turkey: {n}"),
        |_, n| {
            format!(
                "\"tokenizer\": \"o200k_base\", \"contextWindow\": {}",
                n * 100
            )
        },
        |_, n| format!("see https://docs.acme.dev/auth?page={n}"),
        |_, n| format!("assert!(secret_count({n}) == 0);"),
        |_, n| format!("keepRecentTokens: {}", n * 10),
    ];
    for (i, t) in templates.iter().enumerate() {
        for r in 0..4u64 {
            let h = rnd(next() + i as u64 * 31 + r, 40, HEX);
            let n = 17 + (i as u64 * 13 + r * 101) % 4000;
            let line = t(&h, n);
            if !v.contains(&line) {
                v.push(line);
            }
        }
    }
    v
}

fn uuid(n: u64) -> String {
    let h = rnd(n, 32, HEX);
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..]
    )
}

/// A secret counts as caught when its random body (its last twelve characters) is gone and
/// a marker stands in its place.
fn caught(secret: &str, out: &str) -> bool {
    let tail = &secret[secret.len().saturating_sub(12)..];
    !out.contains(tail) && out.contains("[redacted:")
}

#[test]
fn the_corpus_has_at_least_three_hundred_secrets_and_three_hundred_ordinary_lines() {
    let s = secrets();
    let o = ordinary_lines();
    assert!(s.len() >= 300, "{} secrets", s.len());
    assert!(o.len() >= 300, "{} ordinary lines", o.len());
    for (form, secret, text) in &s {
        assert!(
            text.contains(secret.as_str()),
            "corpus bug in {form}: {text}"
        );
    }
}

#[test]
fn recall_on_planted_secrets_and_false_positives_on_ordinary_lines() {
    let s = secrets();
    let missed: Vec<String> = s
        .iter()
        .filter(|(_, secret, text)| !caught(secret, &redact(text)))
        .map(|(form, _, text)| format!("{form}: {text:?}\n  -> {:?}", redact(text)))
        .collect();
    let o = ordinary_lines();
    let flagged: Vec<String> = o
        .iter()
        .filter_map(|line| match redact(line) {
            std::borrow::Cow::Borrowed(_) => None,
            std::borrow::Cow::Owned(out) => Some(format!("{line:?}\n  -> {out:?}")),
        })
        .collect();
    let recall = 100.0 * (s.len() - missed.len()) as f64 / s.len() as f64;
    let fp = 100.0 * flagged.len() as f64 / o.len() as f64;
    println!(
        "redaction corpus: recall {recall:.1}% ({} of {} secrets), false positives {fp:.1}% ({} of {} ordinary lines)",
        s.len() - missed.len(),
        s.len(),
        flagged.len(),
        o.len()
    );
    assert!(
        missed.is_empty(),
        "{} of {} secrets missed:\n{}",
        missed.len(),
        s.len(),
        missed.join("\n")
    );
    assert!(
        flagged.is_empty(),
        "{} of {} ordinary lines redacted:\n{}",
        flagged.len(),
        o.len(),
        flagged.join("\n")
    );
}

#[test]
fn redaction_of_the_corpus_is_idempotent() {
    for (_, _, text) in secrets() {
        let once = redact(&text).into_owned();
        assert_eq!(redact(&once), once, "second pass changed {once:?}");
    }
}

/// A model capsule whose goal is `text` and whose `completed` list holds `text` one line per
/// item, as a model writes it.
fn capsule_holding(text: &str, n: usize) -> soba::capsule::CapsuleEntry {
    use soba::capsule::*;
    use soba::session::entry::Trigger;
    CapsuleEntry {
        checkpoint_id: format!("ck_{n:012x}"),
        trigger: Trigger::User,
        quality: Quality::Model,
        first_kept_entry_id: None,
        previous_checkpoint_id: None,
        state: CapsuleState {
            goal: text.to_string(),
            completed: text.lines().map(str::to_string).collect(),
            ..Default::default()
        },
        artifacts: Artifacts::default(),
        tokens: CapsuleTokens {
            before: 90_000,
            after: 12_000,
        },
        origin: Origin::Session,
        mirrored: false,
        title: Some("corpus".into()),
        degraded_reason: None,
        instructions: None,
        elide_tool_results_over: None,
        loaded_from: None,
    }
}

#[test]
fn planted_secret_recall_on_every_output_path() {
    use soba::capsule::portable::{write, PortableCapsule};
    let s = secrets();
    let ws = tempfile::tempdir().unwrap();
    let flight = soba::flight::FlightLog::new(&ws.path().join("data"));
    std::fs::create_dir_all(ws.path().join("data")).unwrap();
    let limits = soba::budget::Limits::compute(200_000, 8_000, &Default::default()).unwrap();
    let mut missed: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for (n, (form, secret, text)) in s.iter().enumerate() {
        let capsule = capsule_holding(text, n);
        let mut check = |path: &'static str, out: &str| {
            let list = missed.entry(path).or_default();
            if out.contains(&secret[secret.len().saturating_sub(12)..]) {
                list.push(format!("{form}: {text:?}"));
            }
        };
        let exported = write(&PortableCapsule::from_entry(
            &capsule,
            "2026-12-01T00:00:00Z",
            None,
            None,
        ));
        check("export", &exported.text);
        let src = soba::capsule::memory::MirrorSource {
            created: "2026-12-01T00:00:00Z",
            session: Some("s1"),
        };
        let m = soba::capsule::memory::mirror(ws.path(), &capsule, src, true).unwrap();
        check("memory", &std::fs::read_to_string(&m.path).unwrap());
        check("memory index", &std::fs::read_to_string(&m.index).unwrap());
        flight
            .append(&soba::flight::FlightRecord {
                operation_id: format!("op{n}"),
                session_id: "s1".into(),
                trigger: "user".into(),
                outcome: "failed".into(),
                reason: text.clone(),
                duration_ms: 1,
                checkpoint_id: None,
                tokens_before: 1,
                tokens_after: 1,
                reclaimed: 0,
                hard_limit: 2,
                soft_limit: 1,
                ts: "2026-12-01T00:00:00Z".into(),
            })
            .unwrap();
        let mut t = soba::report::Timeline::new(text.clone(), "m", "o200k_base", limits);
        t.latest_capsule = Some(exported.text.replace("[redacted:", "[x:") + text);
        check("report", &soba::report::html::render(&t));
    }
    let flight_text = std::fs::read_to_string(flight.path()).unwrap();
    let leaked_in_flight: Vec<String> = s
        .iter()
        .filter(|(_, secret, _)| flight_text.contains(&secret[secret.len().saturating_sub(12)..]))
        .map(|(form, _, text)| format!("{form}: {text:?}"))
        .collect();
    missed.insert("flight", leaked_in_flight);
    for (path, list) in &missed {
        println!(
            "planted-secret recall, {path}: {:.1}% ({} of {})",
            100.0 * (s.len() - list.len()) as f64 / s.len() as f64,
            s.len() - list.len(),
            s.len()
        );
    }
    for (path, list) in &missed {
        assert!(
            list.is_empty(),
            "{path}: {} leaked:\n{}",
            list.len(),
            list.join("\n")
        );
    }
}
