//! Redaction throughput on real transcript text (almost all clean, as in practice) and on
//! the same text with a planted secret every fiftieth string: redaction runs on every export,
//! Project Memory mirror, flight record, HTML report and remote summarizer request. And
//! redaction of one text of 1 MB and one of 10 MB, the transcript strings with secrets among
//! them (split ones and base64 ones included): the time of the second should be ten times the
//! first's, no more (docs/performance.md).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

#[path = "support.rs"]
mod support;

fn redaction(c: &mut Criterion) {
    let texts = support::transcript_texts();
    let texts = if support::measuring() {
        texts
    } else {
        texts.into_iter().take(50).collect()
    };
    // Assembled at run time so that the repository holds no secret-shaped literal.
    let planted = format!("export DB_PASSWORD={}{}", "Tr0ub4dor", "-and-3");
    let with_secrets: Vec<String> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if i % 50 == 0 {
                format!("{t}\n{planted}\n")
            } else {
                t.clone()
            }
        })
        .collect();
    let bytes: usize = texts.iter().map(String::len).sum();
    let mut g = c.benchmark_group("redact");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.sample_size(10);
    g.bench_function("transcript_text", |b| {
        b.iter(|| {
            texts
                .iter()
                .map(|t| soba_core::redact::redact(t).len())
                .sum::<usize>()
        })
    });
    g.bench_function("transcript_text_with_secrets", |b| {
        b.iter(|| {
            with_secrets
                .iter()
                .map(|t| soba_core::redact::redact(t).len())
                .sum::<usize>()
        })
    });
    g.finish();

    // One text per size, the strings joined by line breaks and repeated to the size, with a
    // planted secret of each kind the rules treat specially every fiftieth string.
    let planted_shapes = [
        planted.clone(),
        format!(
            "export OPENAI_API_KEY=sk-proj-{}\\\n  {}",
            "Ab3dEf6hIj9kLm2nOp5q", "Rs8tUv1wXy4zAb3dEf6h"
        ),
        format!(
            "const key = \"ghp_{}\" + \"{}\";",
            "Mv835ZSftJKeVtQRC2", "QKT1uow2Zs7cHbF6Jk"
        ),
        // `postgres://app:Kq7-vVd2x9Lp@db/app` in base64, under a Secret's `data:`.
        format!(
            "kind: Secret\ndata:\n  DATABASE_URL: {}",
            "cG9zdGdyZXM6Ly9hcHA6S3E3LXZWZDJ4OUxwQGRiL2FwcA=="
        ),
    ];
    let mixed = |size: usize| {
        let mut text = String::with_capacity(size + 4096);
        for (i, t) in texts.iter().cycle().enumerate() {
            if text.len() >= size {
                break;
            }
            text.push_str(t);
            text.push('\n');
            if i % 50 == 0 {
                text.push_str(&planted_shapes[(i / 50) % planted_shapes.len()]);
                text.push('\n');
            }
        }
        text
    };
    let mut g = c.benchmark_group("redact_size");
    g.sample_size(10);
    let sizes: &[(&str, usize)] = if support::measuring() {
        &[("1MB", 1 << 20), ("10MB", 10 << 20)]
    } else {
        &[("64KB", 64 << 10)]
    };
    for &(name, size) in sizes {
        let text = mixed(size);
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_function(name, |b| b.iter(|| soba_core::redact::redact(&text).len()));
    }
    g.finish();
}

criterion_group!(benches, redaction);
criterion_main!(benches);
