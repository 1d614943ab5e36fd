//! Token counting: bpe-openai (the crate SOBA uses) against tiktoken-rs on real transcript text.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

#[path = "support.rs"]
mod support;

fn tokenizers(c: &mut Criterion) {
    // Start-up: each crate builds its tables on first use.
    let t = std::time::Instant::now();
    bpe_openai::o200k_base().count("warm up");
    let bpe_start = t.elapsed();
    let t = std::time::Instant::now();
    tiktoken_rs::o200k_base_singleton().encode_ordinary("warm up");
    let tiktoken_start = t.elapsed();
    eprintln!(
        "first count (tables built): bpe-openai {bpe_start:?}, tiktoken-rs {tiktoken_start:?}"
    );
    let texts = support::transcript_texts();
    let bytes: usize = texts.iter().map(String::len).sum();
    // The choice of crate requires identical counts: check them before timing.
    let mut differing = 0;
    for t in &texts {
        let a = tiktoken_rs::o200k_base_singleton().encode_ordinary(t).len();
        let b = bpe_openai::o200k_base().count(t.as_str());
        if a != b {
            differing += 1;
        }
    }
    eprintln!(
        "o200k_base over {} texts ({bytes} bytes): {differing} counts differ between the crates",
        texts.len()
    );
    let texts = if support::measuring() {
        texts
    } else {
        texts.into_iter().take(50).collect()
    };
    let bytes: usize = texts.iter().map(String::len).sum();

    let mut g = c.benchmark_group("count_o200k");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.sample_size(10);
    g.bench_function("tiktoken-rs", |b| {
        b.iter(|| {
            texts
                .iter()
                .map(|t| tiktoken_rs::o200k_base_singleton().encode_ordinary(t).len())
                .sum::<usize>()
        })
    });
    g.bench_function("bpe-openai", |b| {
        b.iter(|| {
            texts
                .iter()
                .map(|t| bpe_openai::o200k_base().count(t.as_str()))
                .sum::<usize>()
        })
    });
    g.finish();
}

criterion_group!(benches, tokenizers);
criterion_main!(benches);
