//! Races through the real async shell: a compaction runs in a session actor of the daemon while
//! a second client cancels it, sends new input, or rewinds, at seeded random moments. Zero
//! capsules may be appended after a cancel that reported a running compaction, and none after
//! the leaf changed during the compaction.
//!
//! 50 seeds in the normal run; `SOBA_RACE_SEEDS=1000 cargo test --test it daemon_races:: --
//! --nocapture` for the long mode.

use crate::support::lsp_client::connect;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use soba::daemon::paths::Paths;
use soba::daemon::registry::{Daemon, DaemonOptions};
use soba::summarize::summarizer::Summarizer;
use soba::summarize::summarizer::SummaryError;
use soba::summarize::summarizer::SummaryRequest;
use soba_core::session::capsule::model::CapsuleState;
use soba_core::session::log::read_session;
use tokio_util::sync::CancellationToken;

/// A model that takes a few milliseconds (seeded per call) and honours cancellation.
struct SlowSummarizer {
    seed: std::sync::atomic::AtomicU64,
}

impl Summarizer for SlowSummarizer {
    fn describe(&self) -> String {
        "slow test summarizer".into()
    }

    fn summarize<'a>(
        &'a self,
        _req: &'a SummaryRequest,
        progress: &'a (dyn Fn(u8) + Send + Sync),
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<CapsuleState, SummaryError>> {
        let n = self.seed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let delay = Duration::from_millis(StdRng::seed_from_u64(n).random_range(5..40));
        Box::pin(async move {
            progress(10);
            tokio::select! {
                _ = cancel.cancelled() => Err(SummaryError::Cancelled),
                _ = tokio::time::sleep(delay) => Ok(CapsuleState {
                    goal: "continue".into(),
                    ..CapsuleState::default()
                }),
            }
        })
    }
}

fn message(role: &str, tokens: usize) -> Value {
    json!({"type": "message", "role": role,
        "content": [{"type": "text", "text": " lorem".repeat(tokens)}]})
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Cancel,
    NewInput,
    Rewind,
    Nothing,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_capsule_after_cancel_or_on_a_changed_leaf() {
    let seeds: u64 = std::env::var("SOBA_RACE_SEEDS")
        .ok()
        .map(|v| v.parse().expect("SOBA_RACE_SEEDS is a number"))
        .unwrap_or(50);
    let base = tempfile::tempdir().unwrap();
    let workspace = std::fs::canonicalize(base.path()).unwrap().join("project");
    std::fs::create_dir_all(&workspace).unwrap();
    let daemon = Daemon::new(
        Paths::under(&base.path().join("soba")),
        DaemonOptions {
            watch: None,
            extra_config: None,
            summarizer: Some(Arc::new(SlowSummarizer { seed: 0.into() })),
            ..DaemonOptions::default()
        },
    );
    let agent = Arc::new(connect(&daemon));
    agent.initialize(&[&workspace], false).await;
    let other = connect(&daemon);
    other.initialize(&[&workspace], false).await;

    let mut tally = std::collections::BTreeMap::<String, u64>::new();
    for seed in 0..seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        let opened = agent
            .request(
                "soba/session/open",
                json!({"workspace": workspace, "create": true,
                    "model": {"name": "race", "contextWindow": 65000, "maxOutputTokens": 8000}}),
            )
            .await;
        let session = opened["sessionId"].as_str().unwrap().to_string();
        let path = opened["path"].as_str().unwrap().to_string();
        let history: Vec<Value> = (0..24)
            .map(|i| message(if i % 2 == 0 { "user" } else { "assistant" }, 1800))
            .collect();
        let appended = agent
            .request(
                "soba/session/append",
                json!({"sessionId": session, "entries": history}),
            )
            .await;
        let first_entry = appended["entryIds"][0].as_str().unwrap().to_string();
        let event = [
            Event::Cancel,
            Event::NewInput,
            Event::Rewind,
            Event::Nothing,
        ][rng.random_range(0..4)];
        let wait = Duration::from_micros(rng.random_range(0..12_000));

        let compact = {
            let agent = agent.clone();
            let session = session.clone();
            tokio::spawn(async move {
                agent
                    .raw("soba/compact", json!({"sessionId": session}))
                    .await
            })
        };
        // The event goes out only once the compaction has started (its plan is made).
        loop {
            let n = other
                .expect_notification("soba/compaction", Duration::from_secs(10))
                .await;
            if n["sessionId"] == session.as_str() && n["phase"] == "start" {
                break;
            }
        }
        tokio::time::sleep(wait).await;
        let mut cancelled_running = false;
        let mut event_entries: Vec<String> = Vec::new();
        match event {
            Event::Cancel => {
                let r = other
                    .request("soba/cancel", json!({"sessionId": session}))
                    .await;
                cancelled_running = r["cancelled"] == true;
            }
            Event::NewInput => {
                let r = other
                    .request(
                        "soba/session/append",
                        json!({"sessionId": session, "entries": [message("user", 5)]}),
                    )
                    .await;
                event_entries.extend(
                    r["entryIds"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap().to_string()),
                );
            }
            Event::Rewind => {
                let r = other
                    .request(
                        "soba/rewind",
                        json!({"sessionId": session, "entryId": first_entry}),
                    )
                    .await;
                assert!(r["leafId"] == first_entry.as_str(), "{r}");
            }
            Event::Nothing => {}
        }
        let result = compact.await.unwrap();
        let outcome = result["result"]["outcome"]
            .as_str()
            .or_else(|| result["error"]["data"]["outcome"].as_str())
            .unwrap_or("error")
            .to_string();

        let (log, _) = read_session(std::path::Path::new(&path)).unwrap();
        let entries = log.entries();
        let capsule_at = entries.iter().position(|e| e.as_capsule().is_some());
        if cancelled_running {
            assert_eq!(
                capsule_at, None,
                "seed {seed}: a capsule after a cancel that reported a running compaction ({outcome})"
            );
            assert_eq!(outcome, "cancelled", "seed {seed}");
        }
        if let Some(at) = capsule_at {
            assert_eq!(outcome, "completed", "seed {seed}");
            // Nothing the event created may precede the capsule: queued input lands after it,
            // and a leaf moved during the compaction makes it stale.
            for e in entries.iter().take(at) {
                assert!(
                    !event_entries.contains(&e.id),
                    "seed {seed}: the capsule follows input sent during the compaction"
                );
                assert!(
                    !matches!(e.body, soba_core::session::entry::EntryBody::Rewind(_)),
                    "seed {seed}: a capsule appended on a changed leaf"
                );
            }
        } else {
            assert_ne!(
                outcome, "completed",
                "seed {seed}: completed without a capsule"
            );
        }
        *tally.entry(format!("{event:?} → {outcome}")).or_default() += 1;
    }
    eprintln!("races: {seeds} seeds: {tally:?}");
}
