//! Redaction throughput on real transcript text (almost all clean, as in practice) and on
//! the same text with a planted secret every fiftieth string: redaction runs on every export,
//! Project Memory mirror, flight record, HTML report and remote summarizer request.

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
}

criterion_group!(benches, redaction);
criterion_main!(benches);
