//! Latency `soba proxy` adds to a chat request of a 100k-token conversation.
//!
//! A loopback fake upstream answers OpenAI Chat Completions at once. The conversation (about
//! 100k tokens of generated coding-session turns) is sent with one new user message per
//! request, as agents do, alternately straight to the upstream and through the proxy (an
//! in-process daemon, the model window large enough that no compaction runs: this measures the
//! steady-state cost of matching the history, appending, preflight and the rewrite). The added
//! latency is the difference of the medians and of the 99th percentiles.
//!
//! Per-request percentiles are what matter here, which criterion does not report; like
//! `daemon_rtt`, this bench has its own harness. `cargo bench --bench proxy` measures (200
//! requests each way) and prints one JSON object and a summary; under `cargo test` it sends a
//! few requests as a smoke test.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba::proxy::server::DaemonTarget;
use soba::proxy::server::Proxy;
use soba::proxy::server::ProxyConfig;
use soba::proxy::server::ProxySummarizer;

fn measuring() -> bool {
    std::env::args().any(|a| a == "--bench")
}

async fn fake_upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    |req: http::Request<hyper::body::Incoming>| async move {
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let prompt = body.len() / 4;
                        let answer = json!({"id": "c", "object": "chat.completion",
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok, done."}, "finish_reason": "stop"}],
                            "usage": {"prompt_tokens": prompt, "completion_tokens": 4}});
                        Ok::<_, std::convert::Infallible>(
                            http::Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(answer.to_string())))
                                .unwrap(),
                        )
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// A user turn of about 800 tokens and a short answer, distinct per turn.
fn turn(i: usize) -> (Value, Value) {
    let text: String = (0..130)
        .map(|j| format!("step{i}.{j} edits src/module_{}.rs ", j % 17))
        .collect();
    (
        json!({"role": "user", "content": text}),
        json!({"role": "assistant", "content": format!("Turn {i}: the change is in place and the tests pass.")}),
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let full = measuring();
    let requests = if full { 200 } else { 3 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let base = tempfile::tempdir().unwrap();
        let workspace = std::fs::canonicalize(base.path()).unwrap().join("project");
        std::fs::create_dir_all(&workspace).unwrap();
        let upstream = fake_upstream().await;
        let daemon = Daemon::new(
            Paths::under(&base.path().join("soba")),
            DaemonOptions {
                watch: None,
                extra_config: None,
                summarizer: None,
                ..DaemonOptions::default()
            },
        );
        let proxy = Proxy::new(ProxyConfig {
            upstream: format!("http://{upstream}").parse().unwrap(),
            workspace: workspace.display().to_string(),
            context_window: Some(1_000_000),
            max_output_tokens: Some(8_000),
            // The proxy's own cost: no summarization requests.
            summarizer: ProxySummarizer::Local,
            daemon: DaemonTarget::InProcess(daemon),
            log: Arc::new(|_: &str| {}),
            max_conversations: soba::proxy::server::DEFAULT_MAX_CONVERSATIONS,
        })
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_addr = listener.local_addr().unwrap();
        tokio::spawn(proxy.serve(listener));

        let mut messages = vec![json!({"role": "system", "content": "You are a careful coding agent."})];
        let turns = if full { 76 } else { 10 };
        for i in 0..turns {
            let (u, a) = turn(i);
            messages.push(u);
            messages.push(a);
        }
        let tokens: u64 = messages
            .iter()
            .map(|m| soba_core::tokens::TokenizerKind::O200kBase.count(m["content"].as_str().unwrap()))
            .sum();
        let client = reqwest::Client::new();
        let send = |addr: SocketAddr, body: Value| {
            let client = client.clone();
            async move {
                let started = Instant::now();
                let r = client
                    .post(format!("http://{addr}/v1/chat/completions"))
                    .header("authorization", "Bearer sk-bench")
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 200);
                let reply: Value = r.json().await.unwrap();
                (started.elapsed(), reply)
            }
        };
        // The first request through the proxy appends the whole history; it is not measured.
        messages.push(json!({"role": "user", "content": "start"}));
        let (first, reply) = send(proxy_addr, json!({"model": "gpt-4o", "messages": messages})).await;
        messages.push(reply["choices"][0]["message"].clone());
        let mut direct = Vec::with_capacity(requests);
        let mut proxied = Vec::with_capacity(requests);
        for i in 0..requests {
            messages.push(json!({"role": "user", "content": format!("next step {i}: run the tests again")}));
            let body = json!({"model": "gpt-4o", "messages": messages});
            let (d, _) = send(upstream, body.clone()).await;
            let (p, reply) = send(proxy_addr, body).await;
            direct.push(d);
            proxied.push(p);
            messages.push(reply["choices"][0]["message"].clone());
        }
        direct.sort();
        proxied.sort();
        let (d50, d99) = (percentile(&direct, 0.5), percentile(&direct, 0.99));
        let (p50, p99) = (percentile(&proxied, 0.5), percentile(&proxied, 0.99));
        let report = json!({
            "conversationTokens": tokens,
            "messages": messages.len(),
            "requests": requests,
            "firstRequestMs": ms(first),
            "directMs": {"p50": ms(d50), "p99": ms(d99)},
            "proxiedMs": {"p50": ms(p50), "p99": ms(p99)},
            "addedMs": {"p50": ms(p50.saturating_sub(d50)), "p99": ms(p99.saturating_sub(d99))},
            "ratioP50": ms(p50) / ms(d50).max(1e-9),
        });
        println!("{report}");
        println!(
            "proxy: {tokens} tokens, {requests} requests: direct p50 {:.2} ms / p99 {:.2} ms; through the proxy p50 {:.2} ms / p99 {:.2} ms; added p50 {:.2} ms, p99 {:.2} ms (first request, whole history appended: {:.1} ms)",
            ms(d50), ms(d99), ms(p50), ms(p99),
            ms(p50.saturating_sub(d50)), ms(p99.saturating_sub(d99)), ms(first)
        );
    });
}
