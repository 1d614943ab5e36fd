//! The third attack set: shapes written from gitleaks' rules (its `config/gitleaks.toml`,
//! compared rule by rule in docs/reliability.md) and from the classes that leaked in the third
//! attack round, placed as agents see them (Read views with line marks, diffs, `env` dumps,
//! `kubectl` and `docker` output, command lines, heredocs, prose), with look-alikes that must
//! stay (git SHAs, UUIDs, lockfile hashes, base64 images and certificates, identifiers, split
//! strings that hold no secret).
//!
//! Every secret is fake: a vendor prefix and a deterministic pseudo-random body, assembled at
//! run time, so the repository holds no secret-shaped literal. The set joins the attack corpus
//! (`redaction_corpus::attack_secrets`), which `redaction_paths` sends down every output path,
//! and the look-alikes join the corpus's ordinary lines.

use crate::redaction_corpus::{read_output, rnd, Planted, Shown};

const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const UPPER_DIGITS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const LOWER_DIGITS: &str = "abcdefghijklmnopqrstuvwxyz0123456789";
const B64URL: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const HEX: &str = "0123456789abcdef";
const DIGITS: &str = "0123456789";

/// Standard base64 with padding, for the values a Kubernetes Secret or an `auth` key holds.
pub fn base64(bytes: &[u8]) -> String {
    let table = B64.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &b)| acc | (u32::from(b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(table[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A password as people choose them, never a plain word (digits, both cases, a symbol).
fn password(seed: u64) -> String {
    format!("{}-{}9", rnd(seed, 8, ALNUM), rnd(seed + 1, 6, ALNUM))
}

/// The further shapes: every one leaked in the third attack round or is a gitleaks prefix
/// SOBA lacked. A split secret's `secret` is the half after the split, the one the rules
/// kept; each half is at least twelve characters, so the harness's tail check sees it.
pub fn further_shapes() -> Vec<Planted> {
    use Shown::{Command, Output};
    let mut v: Vec<Planted> = Vec::new();
    let mut seed = 120_000u64;
    let mut next = || {
        seed += 13;
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

    // Credential names the rules know by meaning, in the places the round found them.
    let p = password(next());
    add(
        "pgpassword-inline",
        p.clone(),
        format!("PGPASSWORD='{p}' psql -h db.internal -U app -c 'select 1'"),
        Command,
    );
    let t = rnd(next(), 52, LOWER_DIGITS);
    add(
        "env-dump-pat",
        t.clone(),
        format!("$ env | sort\nAZURE_DEVOPS_EXT_PAT={t}\nHOME=/home/ci\nPATH=/usr/bin:/bin"),
        Output,
    );
    let ts = format!(
        "tskey-auth-k{}CNTRL-{}",
        rnd(next(), 10, ALNUM),
        rnd(next(), 32, ALNUM)
    );
    add(
        "tailscale-flag",
        ts.clone(),
        format!("sudo tailscale up --authkey {ts} --ssh"),
        Command,
    );
    let ts = format!(
        "tskey-auth-k{}CNTRL-{}",
        rnd(next(), 10, ALNUM),
        rnd(next(), 32, ALNUM)
    );
    add(
        "tailscale-bare",
        ts.clone(),
        format!("the node joined with {ts} and got 100.64.0.7"),
        Output,
    );
    let p = password(next());
    add(
        "docker-inspect-env",
        p.clone(),
        format!(
            "$ docker inspect api --format '{{{{json .Config.Env}}}}'\n[\"REDIS_PASS={p}\",\"NODE_ENV=production\",\"PATH=/usr/local/bin\"]"
        ),
        Output,
    );
    let p = password(next());
    add(
        "diff-added-line",
        p.clone(),
        format!("--- a/.env\n+++ b/.env\n@@ -3,2 +3,2 @@\n-DB_PASSWORD=changeme\n+DB_PASSWORD={p}\n DB_HOST=db"),
        Output,
    );
    let p = password(next());
    add(
        "env-dump-mysql-pwd",
        p.clone(),
        format!("MYSQL_HOST=db\nMYSQL_PWD={p}\nMYSQL_USER=app"),
        Output,
    );

    // Vendor shapes: Vault's batch token of 136 characters and a bare service token on a
    // line of its own, Notion's legacy key, New Relic, Telegram inside its API URL.
    let t = format!("hvb.AAAAAQ{}", rnd(next(), 126, B64URL));
    assert_eq!(t.len(), 136);
    add(
        "vault-batch-136",
        t.clone(),
        format!("$ vault token create -type=batch -policy=ci\nKey                  Value\n---                  -----\ntoken                {t}\ntoken_accessor       n/a"),
        Output,
    );
    let t = format!("hvs.{}", rnd(next(), 24, ALNUM));
    add("vault-bare-line", t.clone(), format!("{t}\n"), Output);
    let t = format!("secret_{}", rnd(next(), 43, ALNUM));
    add(
        "notion-legacy",
        t.clone(),
        format!("const notion = new Client({{ auth: \"{t}\" }});"),
        Output,
    );
    let t = format!("NRAK-{}", rnd(next(), 27, UPPER_DIGITS));
    add(
        "newrelic-user-key",
        t.clone(),
        format!("newrelic profile add --profile prod --apiKey {t} --region US"),
        Command,
    );
    let t = format!("NRII-{}", rnd(next(), 32, B64URL));
    add(
        "newrelic-insert-key",
        t.clone(),
        format!("2026-05-01 10:22:01 INFO posting 12 events with {t}"),
        Output,
    );
    let t = format!("{}:AA{}", rnd(next(), 10, DIGITS), rnd(next(), 33, B64URL));
    add(
        "telegram-in-url",
        t.clone(),
        format!("curl -s \"https://api.telegram.org/bot{t}/sendMessage?chat_id=42&text=deployed\""),
        Command,
    );
    let t = format!("{}:AA{}", rnd(next(), 9, DIGITS), rnd(next(), 33, B64URL));
    add(
        "telegram-in-fstring",
        t.clone(),
        format!("    url = f\"https://api.telegram.org/bot{t}/getUpdates\""),
        Output,
    );

    // Prefixes adopted from gitleaks.
    let vendors: Vec<(&'static str, String)> = vec![
        (
            "1password-secret-key",
            format!(
                "A3-{}-{}-{}-{}-{}",
                rnd(next(), 6, UPPER_DIGITS),
                rnd(next(), 11, UPPER_DIGITS),
                rnd(next(), 5, UPPER_DIGITS),
                rnd(next(), 5, UPPER_DIGITS),
                rnd(next(), 5, UPPER_DIGITS)
            ),
        ),
        ("adobe", format!("p8e-{}", rnd(next(), 32, ALNUM))),
        ("alibaba", format!("LTAI{}", rnd(next(), 20, ALNUM))),
        ("aws-a3t", format!("A3TX{}", rnd(next(), 16, UPPER_DIGITS))),
        ("clickhouse", format!("4b1d{}", rnd(next(), 38, ALNUM))),
        (
            "cloudflare-origin-ca",
            format!("v1.0-{}-{}", rnd(next(), 24, HEX), rnd(next(), 146, HEX)),
        ),
        (
            "facebook-app-token",
            format!("{}|{}", rnd(next(), 15, DIGITS), rnd(next(), 32, ALNUM)),
        ),
        ("flyio", format!("fm2_{}", rnd(next(), 120, B64))),
        (
            "gitlab-feature-flag",
            format!("glffct-{}", rnd(next(), 20, ALNUM)),
        ),
        ("gitlab-oauth", format!("gloas-{}", rnd(next(), 64, ALNUM))),
        (
            "harness",
            format!(
                "pat.{}.{}.{}",
                rnd(next(), 22, ALNUM),
                rnd(next(), 24, ALNUM),
                rnd(next(), 20, ALNUM)
            ),
        ),
        (
            "maxmind",
            format!("{}_{}_mmk", rnd(next(), 6, ALNUM), rnd(next(), 29, ALNUM)),
        ),
        ("octopus", format!("API-{}", rnd(next(), 26, UPPER_DIGITS))),
        ("sonarqube", format!("sqp_{}", rnd(next(), 40, HEX))),
        ("sourcegraph", format!("sgp_{}", rnd(next(), 40, HEX))),
        ("square", format!("EAAA{}", rnd(next(), 60, B64URL))),
        ("typeform", format!("tfp_{}", rnd(next(), 59, ALNUM))),
        ("yandex", format!("AQVN{}", rnd(next(), 36, B64URL))),
        (
            "plaid",
            format!(
                "access-production-{}-{}-{}-{}-{}",
                rnd(next(), 8, HEX),
                rnd(next(), 4, HEX),
                rnd(next(), 4, HEX),
                rnd(next(), 4, HEX),
                rnd(next(), 12, HEX)
            ),
        ),
        (
            "mailchimp",
            format!("{}-us{}", rnd(next(), 32, HEX), rnd(next(), 1, "123456789")),
        ),
        ("atlassian", format!("ATATT3{}", rnd(next(), 186, B64URL))),
        ("dropbox", format!("sl.{}", rnd(next(), 138, B64URL))),
        ("scalingo", format!("tk-us-{}", rnd(next(), 48, B64URL))),
        ("settlemint", format!("sm_pat_{}", rnd(next(), 16, ALNUM))),
        ("stripe-prod", format!("rk_prod_{}", rnd(next(), 32, ALNUM))),
    ];
    for (i, (form, t)) in vendors.into_iter().enumerate() {
        let text = match i % 4 {
            0 => format!("2026-05-01T10:22:01Z DEBUG using credential {t} for the sync"),
            1 => read_output(7 + i, &["# vendor".into(), format!("  client({t})")]),
            2 => format!("$ deploy --verbose\nconfigured {t}; uploading 3 files"),
            _ => format!("the key in the screenshot was {t}, please rotate it"),
        };
        add(form, t, text, Output);
    }
    let webhook = format!(
        "https://hooks.slack.com/triggers/T0{}/{}/{}",
        rnd(next(), 9, UPPER_DIGITS),
        rnd(next(), 10, DIGITS),
        rnd(next(), 32, HEX)
    );
    add(
        "slack-trigger",
        webhook.clone(),
        format!("curl -X POST {webhook} -d '{{\"text\":\"done\"}}'"),
        Command,
    );

    // Values the rules catch elsewhere, here behind a line mark or base64 encoded.
    let auth = base64(format!("ci-bot:{}", password(next())).as_bytes());
    add(
        "npmrc-auth-read",
        auth.clone(),
        read_output(
            1,
            &[
                "registry=https://npm.acme.dev/".into(),
                "always-auth=true".into(),
                format!("_auth={auth}"),
            ],
        ),
        Output,
    );
    let url =
        base64(format!("postgres://app:{}@db.internal:5432/app", password(next())).as_bytes());
    add(
        "k8s-secret-yaml",
        url.clone(),
        format!("$ kubectl get secret db -o yaml\napiVersion: v1\ndata:\n  DATABASE_URL: {url}\n  username: YXBw\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque"),
        Output,
    );
    let url = base64(format!("redis://:{}@cache.internal:6379/0", password(next())).as_bytes());
    add(
        "k8s-secret-json",
        url.clone(),
        format!("{{\n    \"apiVersion\": \"v1\",\n    \"data\": {{\n        \"REDIS_URL\": \"{url}\"\n    }},\n    \"kind\": \"Secret\"\n}}"),
        Output,
    );
    let creds = base64(format!("admin:{}", password(next())).as_bytes());
    add(
        "k8s-secret-user-pass",
        creds.clone(),
        read_output(
            4,
            &[
                "kind: Secret".into(),
                "data:".into(),
                format!("  credentials: {creds}"),
            ],
        ),
        Output,
    );
    let key = base64(
        format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            rnd(next(), 64, B64)
        )
        .as_bytes(),
    );
    add(
        "k8s-secret-tls-key",
        key.clone(),
        format!("apiVersion: v1\nkind: Secret\ntype: kubernetes.io/tls\ndata:\n  tls.key: {key}"),
        Output,
    );
    let auth = base64(format!("deploy:{}", password(next())).as_bytes());
    add(
        "docker-config-auth",
        auth.clone(),
        read_output(
            2,
            &[
                "  \"auths\": {".into(),
                "    \"registry.acme.dev\": {".into(),
                format!("      \"auth\": \"{auth}\""),
            ],
        ),
        Output,
    );
    let auth = base64(format!("robot$ci:{}", password(next())).as_bytes());
    add(
        "helm-values-auth",
        auth.clone(),
        format!("imageCredentials:\n  registry: harbor.acme.dev\n  auth: {auth}"),
        Output,
    );

    // A secret split by a shell line continuation or a string join.
    let (a, b) = (rnd(next(), 24, ALNUM), rnd(next(), 24, ALNUM));
    add(
        "continuation-bearer",
        b.clone(),
        format!("curl -H \"Authorization: Bearer {a}\\\n{b}\" https://api.acme.dev/v1/jobs"),
        Command,
    );
    let (a, b) = (rnd(next(), 30, B64URL), rnd(next(), 40, B64URL));
    add(
        "continuation-export",
        b.clone(),
        format!("export OPENAI_API_KEY=sk-proj-{a}\\\n  {b}\necho ok"),
        Command,
    );
    let (a, b) = (rnd(next(), 18, ALNUM), rnd(next(), 18, ALNUM));
    add(
        "continuation-docker-run",
        b.clone(),
        format!("docker run --rm \\\n  -e GITHUB_TOKEN=ghp_{a}\\\n{b} \\\n  ghcr.io/acme/bot:2"),
        Command,
    );
    let (a, b) = (rnd(next(), 16, ALNUM), rnd(next(), 40, ALNUM));
    add(
        "string-join-plus",
        b.clone(),
        format!("const key = \"sk-proj-{a}\" + \"{b}\";"),
        Output,
    );
    let (a, b) = (rnd(next(), 18, ALNUM), rnd(next(), 18, ALNUM));
    add(
        "string-join-adjacent",
        b.clone(),
        format!("GITHUB = ('ghp_{a}'\n          '{b}')"),
        Output,
    );
    let (a, b) = (rnd(next(), 24, HEX), rnd(next(), 40, HEX));
    add(
        "string-join-go",
        b.clone(),
        format!("\ttoken := \"dop_v1_{a}\" +\n\t\t\"{b}\""),
        Output,
    );

    // Heredocs and prose.
    let t = format!("sk_live_{}", rnd(next(), 32, ALNUM));
    add(
        "heredoc-env",
        t.clone(),
        format!("cat <<'EOF' > .env\nSTRIPE_SECRET_KEY={t}\nLOG_LEVEL=info\nEOF"),
        Command,
    );
    let p = password(next());
    add(
        "heredoc-k8s-stringdata",
        p.clone(),
        format!("kubectl apply -f - <<EOF\napiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: {p}\nEOF"),
        Command,
    );
    let t = rnd(next(), 32, HEX);
    add(
        "prose-twilio",
        t.clone(),
        format!("ok, the twilio auth token is {t} and the SID is in the vault"),
        Output,
    );
    let p = format!("{}{}", rnd(next(), 10, ALNUM), rnd(next(), 4, DIGITS));
    add(
        "prose-admin-password",
        p.clone(),
        format!("The staging admin password is {p} until Friday."),
        Output,
    );
    v
}

/// Look-alikes of the further shapes that must stay as they are.
pub fn further_look_alikes() -> Vec<String> {
    let mut v = Vec::new();
    for n in 0..4u64 {
        let seed = 130_000 + n * 17;
        let sha = rnd(seed, 40, HEX);
        let sha256 = rnd(seed + 1, 64, HEX);
        let integrity = format!("sha512-{}==", rnd(seed + 2, 86, B64));
        let uuid = {
            let h = rnd(seed + 3, 32, HEX);
            format!(
                "{}-{}-4{}-a{}-{}",
                &h[..8],
                &h[8..12],
                &h[13..16],
                &h[17..20],
                &h[20..]
            )
        };
        v.push(format!(
            "commit {sha}\nMerge: {} {}",
            &sha[..7],
            &sha[7..14]
        ));
        v.push(format!("      \"integrity\": \"{integrity}\","));
        v.push(format!(
            "[[package]]\nname = \"regex\"\nversion = \"1.11.{n}\"\nchecksum = \"{sha256}\""
        ));
        v.push(format!(
            "  resolved \"https://registry.yarnpkg.com/left-pad/-/left-pad-1.3.{n}.tgz#{sha}\""
        ));
        v.push(format!("request_id: {uuid}\ntrace_id: {}", &sha256[..32]));
        v.push(format!(
            "Digest: sha256:{sha256}\nStatus: Downloaded newer image"
        ));
        v.push(format!(
            "  icon: data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk{}AAAAAElFTkSuQmCC",
            rnd(seed + 4, 8, ALNUM)
        ));
        v.push(format!(
            "  hvs.ts: {}\n  hvs.d.ts: {}",
            &sha[..12],
            &sha256[..12]
        ));
    }
    // A Kubernetes Secret whose values decode to no secret: a user name, a certificate, a
    // port; and a ConfigMap's plain `data:`.
    let cert = base64(
        format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            rnd(140_000, 64, B64)
        )
        .as_bytes(),
    );
    v.push(format!(
        "apiVersion: v1\nkind: Secret\ndata:\n  username: {}\n  tls.crt: {cert}\n  port: {}",
        base64(b"admin"),
        base64(b"5432")
    ));
    v.push("kind: ConfigMap\ndata:\n  LOG_LEVEL: debug\n  API_URL: https://api.acme.dev\n  WORKERS: \"4\"".to_string());
    v.push(format!("  \"auth\": \"{}\"", base64(b"none")));
    // Splits that join into no secret.
    v.push("cargo build --release \\\n  --features tracing,metrics \\\n  --target x86_64-unknown-linux-musl".to_string());
    v.push("echo \"part one of the message\" \\\n  \"part two of the message\"".to_string());
    v.push("const greeting = \"Hello, \" + \"world\" + \"!\";".to_string());
    v.push("msg = ('first half of a long sentence '\n       'second half of it')".to_string());
    v.push("SELECT 'abc' || 'def' FROM dual;".to_string());
    v.push("export PATH=/usr/local/bin:/usr/bin\\\n:/opt/tools/bin".to_string());
    // Identifiers and text near the new prefixes.
    v.extend(
        [
            "see API-REFERENCE.md for the endpoints",
            "fn secret_manager_client_factory() -> SecretManagerClient {",
            "the NRAK- prefix marks New Relic user keys; A3- marks 1Password secret keys",
            "Telegram bot API: https://api.telegram.org/bot<token>/getMe",
            "curl https://api.telegram.org/bot$TELEGRAM_TOKEN/sendMessage",
            "pat.example.com resolves to 10.0.0.4",
            "s3://acme-backups/sl.daily/2026-05-01.tar.zst",
            "GET /v1/access-production-report HTTP/1.1",
            "PGPASSWORD=$(cat /run/secrets/pg) psql -h db -U app",
            "TS_AUTHKEY=${TS_AUTHKEY:?set it in the environment}",
            "  hash: 5f4dcc3b5aa765d61d8327deb882cf99-us",
        ]
        .map(str::to_string),
    );
    v
}
