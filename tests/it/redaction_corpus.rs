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

use soba_core::redact::redact;

const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const UPPER_DIGITS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const B64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const HEX: &str = "0123456789abcdef";
const DIGITS: &str = "0123456789";
const PASSWORDISH: &str = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789!#%*-_.";

/// Deterministic random-looking text (xorshift64*), different for every seed.
pub(crate) fn rnd(seed: u64, len: usize, alphabet: &str) -> String {
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

/// Where an attack-corpus text appears in a session: in what a tool showed (a file read, a
/// command's output), or in the command an agent ran (a tool call's argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    Output,
    Command,
}

/// One planted secret of the attack corpus.
#[derive(Debug, Clone)]
pub struct Planted {
    pub form: &'static str,
    pub secret: String,
    pub text: String,
    pub shown: Shown,
}

/// A text built around a secret.
type Form = fn(&str) -> String;

/// Claude Code's Read output: every line prefixed with its number and an arrow.
pub(crate) fn read_output(first_line: usize, lines: &[String]) -> String {
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{:>6}\u{2192}{l}", first_line + i))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The attack corpus: 130 secrets in the shapes agents show them, each shape the attack round
/// found leaking (line-numbered Read output, values followed by comments, subscripted config
/// keys, credential flags of common CLIs, netrc / pgpass / cookie / Authorization lines, a bare
/// AWS secret key, a positional Twilio token) and the vendor prefixes that were missing (Slack
/// `xapp-`, Vault `hvs.`, Sentry DSNs, Databricks `dapi`, and more from gitleaks' rules).
pub fn attack_secrets() -> Vec<Planted> {
    use Shown::{Command, Output};
    let mut v: Vec<Planted> = Vec::new();
    let mut seed = 90_000u64;
    let mut next = || {
        seed += 11;
        seed
    };
    let mut add = |form: &'static str, secret: String, text: String, shown: Shown| {
        v.push(Planted {
            form,
            secret,
            text,
            shown,
        });
    };
    // Line-numbered file views: Claude Code's `N→`, `grep -n`'s `file:N:`, `cat -n`'s tab,
    // `bat`'s `N │`, and indentation before the assignment.
    for k in 0..4 {
        let p = password(next());
        add(
            "read-arrow-env",
            p.clone(),
            read_output(
                10 + k,
                &[
                    "# database".into(),
                    format!("DB_PASSWORD={p}"),
                    "DB_HOST=db.internal".into(),
                ],
            ),
            Output,
        );
    }
    for k in 0..3 {
        let p = password(next());
        add(
            "read-arrow-yaml",
            p.clone(),
            read_output(
                3 + k,
                &[
                    "database:".into(),
                    "  user: app".into(),
                    format!("  password: {p}"),
                ],
            ),
            Output,
        );
    }
    for k in 0..3 {
        let key = rnd(next(), 32, ALNUM);
        add(
            "read-arrow-json",
            key.clone(),
            read_output(
                40 + k,
                &[
                    "{".into(),
                    format!("    \"api_key\": \"{key}\","),
                    "}".into(),
                ],
            ),
            Output,
        );
    }
    for k in 0..2 {
        let key = rnd(next(), 50, PASSWORDISH);
        add(
            "read-arrow-django",
            key.clone(),
            read_output(88 + k, &[format!("SECRET_KEY = '{key}'")]),
            Output,
        );
    }
    for k in 0..3 {
        let t = rnd(next(), 40, ALNUM);
        let text = match k {
            0 => format!("config/.env:4:API_TOKEN={t}"),
            1 => format!("settings.py:23:SECRET_KEY = \"{t}\""),
            _ => format!("deploy/values.yaml:12:  auth_token: {t}"),
        };
        add("grep-n", t, text, Output);
    }
    for k in 0..3 {
        let p = password(next());
        let text = match k {
            0 => format!("     9\tDB_PASS={p}\n    10\tDB_PORT=5432"),
            1 => format!("  12 │ REDIS_PASSWORD={p}"),
            _ => format!("  7 | SMTP_PASSWORD={p}"),
        };
        add("line-numbered", p, text, Output);
    }
    for _ in 0..2 {
        let p = password(next());
        add(
            "indented-assignment",
            p.clone(),
            format!("def connect():\n        DB_PASSWORD={p}\n        return db(DB_PASSWORD)"),
            Output,
        );
    }
    // YAML / TOML / INI / .env values followed by a comment.
    for k in 0..8 {
        let p = password(next());
        let t = rnd(next(), 36, ALNUM);
        let (secret, text) = match k {
            0 => (p.clone(), format!("  password: {p}  # prod db")),
            1 => (p.clone(), format!("db_password = {p} ; staging")),
            2 => (t.clone(), format!("api_key = \"{t}\" # rotated 2024")),
            3 => (t.clone(), format!("SECRET_TOKEN={t} # do not commit")),
            4 => (t.clone(), format!("token: {t} # expires monthly")),
            5 => (
                p.clone(),
                format!("[database]\nhost = db.internal\npassword = {p}"),
            ),
            6 => (
                t.clone(),
                format!("client_secret: '{t}' # from the console"),
            ),
            _ => (p.clone(), format!("ADMIN_PASSWORD = {p}  # TODO rotate")),
        };
        add("value-with-comment", secret, text, Output);
    }
    // Subscripted configuration keys.
    for k in 0..8 {
        let t = rnd(next(), 40, B64URL) + "9";
        let p = password(next());
        let (secret, text) = match k {
            0 => (t.clone(), format!("app.config['SECRET_KEY'] = '{t}'")),
            1 => (
                t.clone(),
                format!("app.config[\"JWT_SECRET_KEY\"] = \"{t}\""),
            ),
            2 => (
                t.clone(),
                format!("os.environ[\"SERVICE_API_KEY\"] = \"{t}\""),
            ),
            3 => (p.clone(), format!("settings['db_password'] = '{p}'")),
            4 => (t.clone(), format!("ENV['STRIPE_API_KEY'] = '{t}'")),
            5 => (t.clone(), format!("config[:api_token] = \"{t}\"")),
            6 => (p.clone(), format!("$config['password'] = '{p}';")),
            _ => (
                t.clone(),
                format!("process.env[\"AUTH_SECRET\"] = \"{t}\";"),
            ),
        };
        add("subscripted-key", secret, text, Output);
    }
    // Vendor prefixes the rules missed.
    for k in 0..4 {
        let t = format!(
            "xapp-1-A{}-{}-{}",
            rnd(next(), 10, UPPER_DIGITS),
            rnd(next(), 13, DIGITS),
            rnd(next(), 64, HEX)
        );
        let text = match k {
            0 => format!("SLACK_APP_TOKEN={t}"),
            1 => format!("  app_token: \"{t}\""),
            2 => format!("socket mode connected with {t}"),
            _ => format!("App(token=\"{t}\")"),
        };
        add("slack-app", t, text, Output);
    }
    for k in 0..4 {
        let t = format!("hvs.CAESI{}", rnd(next(), 86, B64URL));
        let text = match k {
            0 => format!("VAULT_TOKEN={t}"),
            1 => format!("vault login {t}"),
            2 => format!("Key     Value\n---     -----\ntoken   {t}\ntoken_accessor  x"),
            _ => format!("client = hvac.Client(url=url, token='{t}')"),
        };
        add("vault", t, text, if k == 1 { Command } else { Output });
    }
    for k in 0..4 {
        let key = rnd(next(), 32, HEX);
        let dsn = format!(
            "https://{key}@o{}.ingest.sentry.io/{}",
            rnd(next(), 6, DIGITS),
            rnd(next(), 7, DIGITS)
        );
        let text = match k {
            0 => format!("SENTRY_DSN={dsn}"),
            1 => format!("Sentry.init({{ dsn: \"{dsn}\", tracesSampleRate: 0.2 }})"),
            2 => format!("sentry:\n  dsn: {dsn}"),
            _ => format!("[sentry] sending event to {dsn}"),
        };
        add("sentry-dsn", key, text, Output);
    }
    for k in 0..4 {
        let t = format!("dapi{}", rnd(next(), 32, HEX));
        let text = match k {
            0 => format!("DATABRICKS_TOKEN={t}"),
            1 => format!("databricks configure --token <<< {t}"),
            2 => format!("[DEFAULT]\nhost = https://adb-1234.azuredatabricks.net\ntoken = {t}"),
            _ => format!("headers = {{\"Authorization\": \"Bearer {t}\"}}"),
        };
        add("databricks", t, text, if k == 1 { Command } else { Output });
    }
    let more: Vec<(&'static str, String)> = vec![
        (
            "vault-batch",
            format!("hvb.AAAAAQ{}", rnd(next(), 140, B64URL)),
        ),
        (
            "sentry-user-token",
            format!("sntryu_{}", rnd(next(), 64, HEX)),
        ),
        ("linear", format!("lin_api_{}", rnd(next(), 40, ALNUM))),
        ("pulumi", format!("pul-{}", rnd(next(), 40, HEX))),
        ("doppler", format!("dp.pt.{}", rnd(next(), 43, ALNUM))),
        (
            "postman",
            format!("PMAK-{}-{}", rnd(next(), 24, HEX), rnd(next(), 34, HEX)),
        ),
        (
            "planetscale",
            format!("pscale_pw_{}", rnd(next(), 43, B64URL)),
        ),
        (
            "grafana",
            format!("glsa_{}_{}", rnd(next(), 32, ALNUM), rnd(next(), 8, HEX)),
        ),
        (
            "terraform",
            format!(
                "{}.atlasv1.{}",
                rnd(next(), 14, "abcdefghijklmnopqrstuvwxyz0123456789"),
                rnd(next(), 67, "abcdefghijklmnopqrstuvwxyz0123456789")
            ),
        ),
        (
            "age",
            format!(
                "AGE-SECRET-KEY-1{}",
                rnd(next(), 58, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L")
            ),
        ),
    ];
    for (i, (form, t)) in more.into_iter().enumerate() {
        let text = match i % 3 {
            0 => format!(
                "export {}_TOKEN={t}",
                form.to_ascii_uppercase().replace('-', "_")
            ),
            1 => format!("using credential {t} for the deploy"),
            _ => format!("  token: \"{t}\""),
        };
        add(form, t, text, Output);
    }
    // Files that hold credentials by position.
    for k in 0..4 {
        let p = password(next());
        let text = match k {
            0 => format!("machine api.heroku.com login ops@acme.dev password {p}"),
            1 => format!("machine github.com\n  login deploy-bot\n  password {p}"),
            2 => format!("$ cat ~/.netrc\nmachine pypi.org login __token__ password {p}"),
            _ => format!("default login anonymous password {p}"),
        };
        add("netrc", p, text, Output);
    }
    for k in 0..4 {
        let p = password(next());
        let text = match k {
            0 => format!("db.internal:5432:app:appuser:{p}"),
            1 => format!("$ cat ~/.pgpass\n*:*:*:postgres:{p}"),
            2 => format!("localhost:5432:*:replicator:{p}\nlocalhost:5433:*:admin:{p}x"),
            _ => format!("echo 'prod-db.acme.dev:6432:billing:billing_rw:{p}' >> ~/.pgpass"),
        };
        add("pgpass", p, text, if k == 3 { Command } else { Output });
    }
    for k in 0..6 {
        let s = rnd(next(), 32, "abcdefghijklmnopqrstuvwxyz0123456789");
        let text = match k {
            0 => format!("Set-Cookie: sessionid={s}; expires=Tue, 01 Jul 2025 10:00:00 GMT; HttpOnly; Path=/"),
            1 => format!("< set-cookie: connect.sid=s%3A{s}.{}; Path=/; HttpOnly", rnd(next(), 43, B64)),
            2 => format!("Set-Cookie: laravel_session={s}; path=/; secure; httponly"),
            3 => format!("Cookie: _ga=GA1.2.1234.5678; PHPSESSID={s}"),
            4 => format!("< Set-Cookie: JSESSIONID={}; Path=/; Secure", s.to_ascii_uppercase()),
            _ => format!("headers: {{'Cookie': 'auth_token={s}'}}"),
        };
        let secret = if k == 4 { s.to_ascii_uppercase() } else { s };
        add("session-cookie", secret, text, Output);
    }
    for k in 0..4 {
        let t = rnd(next(), 40, ALNUM);
        let text = match k {
            0 => format!("Authorization: token {t}"),
            1 => format!("-H 'Authorization: Token {t}'"),
            2 => format!("{{\"Authorization\": \"{t}\"}}"),
            _ => format!("authorization: ApiKey {t}"),
        };
        add("authorization", t, text, Output);
    }
    // Credential flags of common command-line tools.
    let clis: Vec<(&'static str, Form)> = vec![
        ("curl-u", |p| {
            format!("curl -u admin:{p} https://ci.acme.dev/api/json")
        }),
        ("curl-u", |p| {
            format!("curl -s --user 'deploy:{p}' -X POST https://nexus.acme.dev/upload")
        }),
        ("curl-u", |p| {
            format!("curl -fsSL -u \"jenkins:{p}\" \"$JENKINS_URL/crumbIssuer\"")
        }),
        ("mysql-p", |p| format!("mysql -uroot -p{p} app < dump.sql")),
        ("mysql-p", |p| {
            format!("mysqldump -h db -u backup -p'{p}' --all-databases > all.sql")
        }),
        ("mysql-p", |p| {
            format!("mysql --host=127.0.0.1 --user=app --password {p} app")
        }),
        ("docker-login", |p| {
            format!("docker login -u bob -p {p} registry.acme.dev")
        }),
        ("docker-login", |p| {
            format!("docker login registry.gitlab.com --username ci --password {p}")
        }),
        ("docker-login", |p| {
            format!("echo \"{p}\" | docker login -u ci --password-stdin ghcr.io")
        }),
        ("az-login", |p| format!("az login -u ops@acme.dev -p {p}")),
        ("az-login", |p| {
            format!("az login --service-principal -u 5f0c2a8e-1b2c-4d3e-9f8a-7b6c5d4e3f2a -p {p} --tenant acme.onmicrosoft.com")
        }),
        ("token-flag", |p| {
            format!("kubectl --server https://k8s.acme.dev --token {p} get pods")
        }),
        ("token-flag", |p| {
            format!("gitlab-runner register --url https://gitlab.acme.dev --registration-token {p}")
        }),
        ("token-flag", |p| {
            format!("npx vercel deploy --prod --token {p}")
        }),
        ("sshpass", |p| {
            format!("sshpass -p '{p}' ssh deploy@10.0.0.5 uptime")
        }),
        ("redis-cli", |p| {
            format!("redis-cli -h cache.acme.dev -a {p} ping")
        }),
        ("password-flag", |p| {
            format!("psql --host db --username app --password {p}")
        }),
        ("api-key-flag", |p| {
            format!("datadog-ci sourcemaps upload ./dist --api-key {p}")
        }),
    ];
    for (i, (form, f)) in clis.into_iter().enumerate() {
        let p = if form.ends_with("flag") || form == "az-login" {
            rnd(next(), 32 + i % 8, ALNUM)
        } else {
            password(next())
        };
        add(form, p.clone(), f(&p), Command);
    }
    // Configuration formats that hold a password by position or element.
    for k in 0..16 {
        let p = password(next());
        let t = rnd(next(), 36, ALNUM);
        let (secret, text, shown) = match k {
            0 => (p.clone(), format!("\"ConnectionStrings\": {{\"Default\": \"Server=db;Database=app;User Id=sa;Password={p};\"}}"), Output),
            1 => (p.clone(), format!("Driver={{ODBC Driver 18}};Server=tcp:acme.database.windows.net;Uid=app;Pwd={p};Encrypt=yes"), Output),
            2 => (p.clone(), format!("jdbc:sqlserver://db:1433;databaseName=app;user=sa;password={p}"), Output),
            3 => (p.clone(), format!("<server>\n  <id>nexus</id>\n  <username>deploy</username>\n  <password>{p}</password>\n</server>"), Output),
            4 => (t.clone(), format!("<add key=\"ApiKey\" value=\"{t}\" />"), Output),
            5 => (p.clone(), format!("<user username=\"admin\" password=\"{p}\" roles=\"manager-gui\"/>"), Output),
            6 => (p.clone(), format!("<Password>{p}</Password>"), Output),
            7 => (t.clone(), format!("ENV API_TOKEN {t}"), Output),
            8 => (p.clone(), format!("FROM node:20\nENV DB_PASSWORD {p}\nRUN npm ci"), Output),
            9 => (p.clone(), read_output(14, &[format!("spring.datasource.password={p}")]), Output),
            10 => (t.clone(), read_output(3, &[format!("mail.smtp.auth.token: {t}")]), Output),
            11 => (p.clone(), read_output(27, &[format!("  \"password\": \"{p}\",")]), Output),
            13 => (t.clone(), read_output(5, &[format!("WEBHOOK_SECRET={t}")]), Output),
            14 => (p.clone(), format!("        env:\n          - name: DB_PASSWORD\n            value: \"{p}\""), Output),
            15 => (p.clone(), format!("    'password' => '{p}',"), Output),
            _ => (p.clone(), read_output(61, &[format!("        'PASSWORD': '{p}',")]), Output),
        };
        add("config-format", secret, text, shown);
    }
    let more_clis: Vec<(&'static str, Form)> = vec![
        ("openssl-pass", |p| {
            format!("openssl pkcs12 -export -in cert.pem -inkey key.pem -out cert.p12 -passout pass:{p}")
        }),
        ("openssl-pass", |p| {
            format!("openssl rsa -in enc.key -passin pass:'{p}' -out plain.key")
        }),
        ("archive-password", |p| {
            format!("zip -r -P {p} backup.zip ./data")
        }),
        ("archive-password", |p| {
            format!("7z a -p{p} -mhe=on secrets.7z secrets/")
        }),
        ("mongo-p", |p| {
            format!("mongosh --host db -u admin -p {p} --authenticationDatabase admin")
        }),
        ("ldap-w", |p| {
            format!("ldapsearch -x -H ldap://ldap.acme.dev -D cn=admin,dc=acme,dc=dev -w {p} -b dc=acme,dc=dev")
        }),
        ("smbclient-u", |p| {
            format!("smbclient //fs.acme.dev/share -U ops%{p} -c ls")
        }),
        ("htpasswd-b", |p| {
            format!("htpasswd -b -c /etc/nginx/.htpasswd admin {p}")
        }),
        ("helm-repo", |p| {
            format!("helm repo add acme https://charts.acme.dev --username ci --password {p}")
        }),
    ];
    for (form, f) in more_clis {
        let p = password(next());
        add(form, p.clone(), f(&p), Command);
    }
    // A bare AWS secret key, beside its key id or on its own.
    for k in 0..4 {
        let s = loop {
            let s = rnd(next(), 40, B64);
            // A real key mixes the classes; skip the rare draw that does not.
            if s.bytes().filter(u8::is_ascii_digit).count() >= 3 {
                break s;
            }
        };
        let id = format!("AKIA{}", rnd(next(), 16, UPPER_DIGITS));
        let text = match k {
            0 => format!("User name,Access key ID,Secret access key\nci-bot,{id},{s}"),
            1 => format!("Access key ID: {id}\nSecret access key: {s}"),
            2 => format!("creds = (\"{id}\", \"{s}\")"),
            _ => format!(
                "aws configure\nAWS Access Key ID [None]: {id}\nAWS Secret Access Key [None]: {s}"
            ),
        };
        add("aws-secret-bare", s, text, Output);
    }
    // A Twilio auth token passed positionally after its account SID.
    for k in 0..3 {
        let sid = format!("AC{}", rnd(next(), 32, HEX));
        let t = rnd(next(), 32, HEX);
        let text = match k {
            0 => format!("client = Client(\"{sid}\", \"{t}\")"),
            1 => format!("twilio = require('twilio')('{sid}', '{t}');"),
            _ => format!("new Twilio(\"{sid}\", \"{t}\")"),
        };
        add("twilio-positional", t, text, Output);
    }
    v.extend(crate::redaction_shapes::further_shapes());
    v
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
    v.extend(
        attack_secrets()
            .into_iter()
            .map(|p| (p.form.to_string(), p.secret, p.text)),
    );
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
        // Look-alikes of the structural shapes: line-numbered views of references, commands
        // without their secret, cookies and headers that hold none, code that names one.
        |_, n| format!("{:>6}\u{2192}DB_PASSWORD=${{DB_PASSWORD}}", n % 90 + 1),
        |_, n| {
            format!(
                "{:>6}\u{2192}  password: ${{{{ secrets.DB_PASSWORD }}}}",
                n % 90 + 1
            )
        },
        |_, n| format!("{:>6}\u{2192}SORT_KEY=created_at", n % 90 + 1),
        |_, n| format!("{:>6}\u{2192}MAX_TOKENS={}", n % 90 + 1, 512 * (n % 8 + 1)),
        |_, n| format!("src/auth.py:{n}:    token = request.headers.get(\"Authorization\")"),
        |_, _| "machine github.com login deploy-bot".to_string(),
        |_, _| "localhost:5432:*:postgres:*".to_string(),
        |_, n| format!("12:30:{:02}:INFO:worker:ready", n % 60),
        |_, _| "Set-Cookie: theme=dark; Path=/; Max-Age=31536000".to_string(),
        |_, n| format!("Set-Cookie: session_count={}; Path=/", n % 9),
        |_, _| "curl -u admin https://ci.acme.dev/api/json".to_string(),
        |_, _| "curl -u \"$CI_USER:$CI_TOKEN\" https://ci.acme.dev/api".to_string(),
        |_, _| "curl --user-agent \"Mozilla/5.0 (X11; Linux x86_64)\" https://acme.dev".to_string(),
        |_, _| "mysql -u root -p app < dump.sql".to_string(),
        |_, n| format!("ps -p {n} -o pid,cmd"),
        |_, n| format!("ssh -p {} deploy@10.0.0.5", 2000 + n % 1000),
        |_, _| "mkdir -p ~/.config/soba && git add -p src/main.rs".to_string(),
        |_, n| format!("docker run -p {}:80 nginx", 8000 + n % 1000),
        |_, _| "docker login -u ci --password-stdin ghcr.io < token.txt".to_string(),
        |_, _| "az login --use-device-code".to_string(),
        |_, _| "kubectl --token \"$K8S_TOKEN\" get pods".to_string(),
        |_, _| "npx vercel deploy --prod --token $VERCEL_TOKEN".to_string(),
        |_, _| "pip: the --username and --password options can't be used here".to_string(),
        |_, _| "app.config['DEBUG'] = True".to_string(),
        |_, _| "app.config['SECRET_KEY'] = os.environ['SECRET_KEY']".to_string(),
        |_, _| "config[:api_token] = ENV.fetch(\"API_TOKEN\")".to_string(),
        |_, _| "settings['db_password'] = get_secret('db')".to_string(),
        |_, _| "  password: ${DB_PASSWORD}  # from the environment".to_string(),
        |_, _| "token: null # set at deploy time".to_string(),
        |_, n| format!("max_tokens: {n} # per request"),
        |_, _| "api_key = None  # filled in at runtime".to_string(),
        |_, _| "Authorization: token ${GITHUB_TOKEN}".to_string(),
        |_, _| "authorization = base64.decodebytes(authorization)".to_string(),
        |_, _| "self.username, self.password = credentials".to_string(),
        |_, _| "const apiKey = process.env.OPENROUTER_API_KEY;".to_string(),
        |_, _| "let mut token = self.next_token?;".to_string(),
        |_, _| "type Token = private::IdentAny;".to_string(),
        |_, _| "fn append(&mut self, token: TokenTree);".to_string(),
        |_, _| "def __init__(self, password: bytes):".to_string(),
        |_, _| "Error::Token => \"invalid token\",".to_string(),
        |_, _| "_normalized_key = _pep_440_key".to_string(),
        |_, _| "RegEnumKey = win32api.RegEnumKey".to_string(),
        |_, _| "ENV NODE_ENV production".to_string(),
        |_, _| "ENV API_TOKEN_FILE /run/secrets/api_token".to_string(),
        |_, _| {
            "- name: DB_PASSWORD\n  valueFrom:\n    secretKeyRef: {name: db, key: password}"
                .to_string()
        },
        |_, _| "<password>${env.NEXUS_PASSWORD}</password>".to_string(),
        |_, _| "sshpass -f ~/.sshpass ssh deploy@10.0.0.5".to_string(),
        |_, _| "openssl rsa -in enc.key -passin env:KEY_PASS -out plain.key".to_string(),
        |_, _| "htpasswd -c /etc/nginx/.htpasswd admin".to_string(),
        |_, _| "the password combination.".to_string(),
        |_, _| "code-grader:test-pass\": \"Tests pass but the cache is cold\"".to_string(),
        |_, _| "management.ssl.need.client.auth=true|false".to_string(),
        |_, _| "getUserProfileSettingsForAccountIdV20241".to_string(),
        |_, _| "src/components/Dashboard/UserSettings2.tsx".to_string(),
        |_, _| "the dapi prefix marks Databricks tokens; xapp- marks Slack app tokens".to_string(),
        |_, _| "client = Client(account_sid, auth_token)".to_string(),
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
    v.extend(crate::redaction_shapes::further_look_alikes());
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
fn the_attack_corpus_has_130_secrets_and_40_further_shapes_each_in_its_text() {
    let a = attack_secrets();
    let further = crate::redaction_shapes::further_shapes().len();
    assert!(further >= 40, "{further} further shapes");
    assert_eq!(a.len(), 130 + further);
    for p in &a {
        assert!(
            p.text.contains(&p.secret),
            "corpus bug in {}: {}",
            p.form,
            p.text
        );
    }
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
pub(crate) fn capsule_holding(
    text: &str,
    n: usize,
) -> soba_core::session::capsule::model::CapsuleEntry {
    use soba_core::session::capsule::model::*;
    use soba_core::session::trigger::Trigger;
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
            short_tail: None,
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
    use soba_core::capsule::portable::{write, PortableCapsule};
    let s = secrets();
    let ws = tempfile::tempdir().unwrap();
    let flight = soba::flight::FlightLog::new(&ws.path().join("data"));
    std::fs::create_dir_all(ws.path().join("data")).unwrap();
    let limits = soba_core::limits::Limits::compute(200_000, 8_000, &Default::default()).unwrap();
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
        let src = soba_core::capsule::project_memory::MirrorSource {
            created: "2026-12-01T00:00:00Z",
            session: Some("s1"),
        };
        let m = soba_core::capsule::project_memory::mirror(ws.path(), &capsule, src, true).unwrap();
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
                corrections: Default::default(),
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
