//! `soba debug …`: hidden commands for the reliability harnesses.
//!
//! `append-loop` plays a seeded agent against a session log: messages, tool calls with results
//! (one batched write each), preflights that compact, explicit compactions, turn ends and
//! rewinds. After every operation returns it prints the ids of the entries that operation
//! appended, one per line, flushed: a line on stdout means the entry was acknowledged. The
//! crash test kills it at random moments and checks that every printed id is in the log.
//!
//! `capsule-quality` scores the capsules built at the annotated cuts of the fixture transcripts
//! against their gold working state (`docs/capsule-quality.md`).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use soba_core::compaction::run::{Barrier, Preflight};
use soba_core::config::{Config, ConfigFile, Durability, Overrides};
use soba_core::session::entry::{
    ContentBlock, Entry, EntryBody, HeaderTag, MessageEntry, RewindEntry, Role, SessionHeader,
    ToolResultEntry, LOG_FORMAT_VERSION,
};
use soba_core::session::log::SessionLog;
use soba_core::tool_mapping::ToolMapping;

#[derive(Debug, Subcommand)]
pub enum DebugCommand {
    /// Append seeded agent activity to LOG (created when missing) and print each acknowledged
    /// entry id on stdout.
    AppendLoop {
        /// The session log to append to.
        log: PathBuf,
        /// Seed of the generated activity (the same seed writes the same entries).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Stop after this many operations (default: run until killed).
        #[arg(long)]
        ops: Option<u64>,
        /// fsync every append (survives power loss) instead of writing to the OS only.
        #[arg(long)]
        fsync: bool,
    },
    /// Replay the request pairs of agent transcripts (files, or folders searched for
    /// `.jsonl`/`.json`) and print how far SOBA's budget and pi's chars/4 method fall from the
    /// input the provider reported: median, p90, share under-estimated by more than 2%, over
    /// the anchored requests, over the first requests (of the session, and after the agent's
    /// own compaction), and over all of them. Each transcript is replayed as on a machine that
    /// learned nothing: the agents' default unseen-context allowances.
    Accuracy {
        /// Transcripts, or folders to search for them.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Print each pair as a JSON line instead of the summary.
        #[arg(long)]
        pairs: bool,
    },
    /// Build the local capsule (and a model capsule when SOBA_EVAL_ENDPOINT names an
    /// OpenAI-compatible server, SOBA_EVAL_MODEL its model) at every annotated cut and print
    /// per-cut, per-field precision and recall against the gold, and the targets missed.
    CapsuleQuality {
        /// The folder of gold annotations.
        #[arg(long, default_value = "tests/capsule_quality/gold")]
        gold: PathBuf,
        /// The folder of fixture transcripts the annotations name.
        #[arg(long, default_value = "../shared/fixtures/transcripts")]
        transcripts: PathBuf,
        /// Print the scores (with every miss) as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(command: &DebugCommand) -> anyhow::Result<()> {
    match command {
        DebugCommand::Accuracy { paths, pairs } => accuracy(paths, *pairs),
        DebugCommand::CapsuleQuality {
            gold,
            transcripts,
            json,
        } => capsule_quality(gold, transcripts, *json),
        DebugCommand::AppendLoop {
            log,
            seed,
            ops,
            fsync,
        } => {
            let durability = if *fsync {
                Durability::Fsync
            } else {
                Durability::Flush
            };
            append_loop(log, *seed, *ops, durability)
        }
    }
}

/// A small window, so that compactions happen every few operations.
const LOOP_MODEL: &str =
    r#"{"model":{"name":"append-loop","contextWindow":65000,"maxOutputTokens":8000}}"#;
const LOOP_COMPACTION: &str =
    r#"{"compaction":{"keepRecentTokens":8000,"minReclaimableTokens":4000}}"#;

fn open_or_create(path: &Path, durability: Durability) -> anyhow::Result<SessionLog> {
    if path.exists() {
        let (log, report) = SessionLog::open(path, durability)?;
        super::warn_load(path, &report);
        return Ok(log);
    }
    let header = SessionHeader {
        kind: HeaderTag::Session,
        version: LOG_FORMAT_VERSION,
        id: soba_core::util::new_id("s_"),
        workspace: "/append-loop".into(),
        created_at: soba_core::util::now_rfc3339(),
        model: None,
        source: None,
    };
    Ok(SessionLog::create(path, header, durability)?)
}

fn words(rng: &mut StdRng, tokens: usize) -> String {
    const WORDS: [&str; 8] = [
        " parse", " token", " budget", " capsule", " error", " retry", " cache", " write",
    ];
    (0..tokens)
        .map(|_| WORDS[rng.random_range(0..WORDS.len())])
        .collect()
}

fn message(id: String, parent: Option<String>, role: Role, content: Vec<ContentBlock>) -> Entry {
    Entry::new(
        id,
        parent,
        EntryBody::Message(MessageEntry {
            role,
            content,
            usage: None,
            model: None,
            synthetic: false,
        }),
    )
}

fn append_loop(
    path: &Path,
    seed: u64,
    ops: Option<u64>,
    durability: Durability,
) -> anyhow::Result<()> {
    let mut log = open_or_create(path, durability)?;
    // The loop's small window makes its own logs compact often; a log that names its model
    // keeps that model's limits, or the first barrier would compact a session its own
    // window still holds.
    let own_model = log.session().model_config();
    let mut files = vec![ConfigFile::parse("append-loop", LOOP_COMPACTION)?];
    if own_model.is_none() {
        files.push(ConfigFile::parse("append-loop", LOOP_MODEL)?);
    }
    let config: Config = Config::resolve(&files, own_model.as_ref(), &Overrides::default())?;
    log.session_mut().configure_counting(&config.model);
    if own_model.is_some() {
        errln!(
            "append-loop: {} keeps its model {} (hard limit {})",
            path.display(),
            config.model.name,
            soba_core::util::human_tokens(config.limits().hard_limit)
        );
    }
    let mapping = ToolMapping::default();
    let barrier = Barrier {
        config: &config,
        mapping: &mapping,
    };
    let mut rng = StdRng::seed_from_u64(seed);
    // Ids stay unique when several runs append to one log.
    let run = soba_core::util::new_id("");
    let mut next = 0u64;
    let mut id = || {
        next += 1;
        format!("{run}-{next}")
    };
    let stdout = std::io::stdout();
    let mut op = 0u64;
    while ops.is_none_or(|n| op < n) {
        op += 1;
        let before = log.session().len();
        let parent = log.session().leaf_id().map(str::to_string);
        match rng.random_range(0..100) {
            0..=29 => {
                let text = format!("request {op}:{}", words(&mut rng, 200));
                let e = message(id(), parent, Role::User, vec![ContentBlock::text(text)]);
                log.append(e)?;
            }
            30..=69 => {
                // A tool call and its result in one write; now and then a result of several
                // megabytes, so that a kill can land in the middle of a write.
                let call_id = format!("call-{}", id());
                let call = message(
                    id(),
                    parent,
                    Role::Assistant,
                    vec![ContentBlock::ToolCall {
                        id: call_id.clone(),
                        name: "Bash".into(),
                        input: Box::new(json!({"command": format!("cargo test --test t{op}")})),
                        extra: Default::default(),
                    }],
                );
                let size = if rng.random_range(0..20) == 0 {
                    rng.random_range(50_000..200_000)
                } else {
                    rng.random_range(50..1500)
                };
                let result = Entry::new(
                    id(),
                    Some(call.id.clone()),
                    EntryBody::ToolResult(ToolResultEntry {
                        call_id,
                        tool_name: Some("Bash".into()),
                        content: vec![ContentBlock::text(words(&mut rng, size))],
                        is_error: false,
                        exit_code: Some(0),
                    }),
                );
                log.append_all(vec![call, result])?;
            }
            70..=79 => {
                let text = words(&mut rng, 300);
                let e = message(
                    id(),
                    parent,
                    Role::Assistant,
                    vec![ContentBlock::text(text)],
                );
                log.append(e)?;
            }
            80..=89 => {
                // Before an inference: the barrier, running any compaction it asks for.
                for _ in 0..4 {
                    match barrier.preflight(&mut log)? {
                        Preflight::Compact(plan) => {
                            barrier.run_local(&mut log, &plan)?;
                        }
                        Preflight::Ready { .. } | Preflight::Failed(_) => break,
                    }
                }
            }
            90..=94 => {
                if let Ok(plan) = barrier.explicit(&mut log, None)? {
                    barrier.run_local(&mut log, &plan)?;
                }
            }
            95..=97 => {
                barrier.turn_complete(&mut log, None)?;
            }
            _ => {
                // Rewind to a random earlier message.
                let s = log.session();
                let messages: Vec<String> = s
                    .entries()
                    .iter()
                    .filter(|e| e.as_message().is_some())
                    .map(|e| e.id.clone())
                    .collect();
                if !messages.is_empty() {
                    let to = messages[rng.random_range(0..messages.len())].clone();
                    log.append(Entry::new(
                        id(),
                        parent,
                        EntryBody::Rewind(RewindEntry { to }),
                    ))?;
                }
            }
        }
        let mut out = stdout.lock();
        for e in log.session().entries().from(before) {
            writeln!(out, "{}", e.id)?;
        }
        out.flush()?;
    }
    Ok(())
}

fn transcript_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut found = Vec::new();
            for e in std::fs::read_dir(p)? {
                let e = e?.path();
                if e.is_dir() {
                    found.extend(transcript_files(&[e])?);
                } else if e.extension().is_some_and(|x| x == "jsonl" || x == "json") {
                    found.push(e);
                }
            }
            found.sort();
            files.extend(found);
        } else {
            files.push(p.clone());
        }
    }
    Ok(files)
}

fn accuracy(paths: &[PathBuf], print_pairs: bool) -> anyhow::Result<()> {
    use crate::accuracy::{model_of, replay, Distribution};
    use crate::import::transcript::import_str;
    use crate::import::ImportOptions;
    let pct = |x: f64| format!("{:+.2}%", x * 100.0);
    let line = |name: &str, d: Option<Distribution>| match d {
        Some(d) => println!(
            "  {name:<10} median {:>8}  p90 {:>8}  worst low {:>8}  under by >2%: {:.1}% of {}",
            pct(d.median),
            pct(d.p90),
            pct(d.worst_low),
            d.share_low_over_2pct * 100.0,
            d.pairs
        ),
        None => println!("  {name:<10} no comparable requests"),
    };
    let (mut soba_all, mut pi_all) = (Vec::new(), Vec::new());
    let (mut soba_fresh, mut soba_every) = (Vec::new(), Vec::new());
    let (mut soba_starts, mut soba_after) = (Vec::new(), Vec::new());
    for path in transcript_files(paths)? {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        let options = ImportOptions {
            source_path: path.display().to_string(),
            default_workspace: "/".into(),
            default_session_id: "accuracy".into(),
            now: soba_core::util::now_rfc3339(),
        };
        let import = match import_str(&text, None, &options) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("skipped {}: {e}", path.display());
                continue;
            }
        };
        let model = model_of(&import)?;
        let pairs = replay(&import, &model);
        if print_pairs {
            for p in &pairs {
                let mut v = serde_json::to_value(p)?;
                v["file"] = path.display().to_string().into();
                println!("{v}");
            }
            continue;
        }
        let comparable: Vec<_> = pairs.iter().filter(|p| p.comparable()).collect();
        println!(
            "{} ({}, counted with {} × {:.2}): {} requests, {} comparable",
            path.display(),
            model.name,
            model.tokenizer.as_str(),
            model.count_factor,
            pairs.len(),
            comparable.len()
        );
        line(
            "SOBA",
            Distribution::of(comparable.iter().map(|p| p.soba_error())),
        );
        line(
            "pi chars/4",
            Distribution::of(comparable.iter().map(|p| p.pi_error())),
        );
        let fresh: Vec<f64> = pairs
            .iter()
            .filter(|p| p.fresh())
            .map(|p| p.soba_error())
            .collect();
        line("SOBA first", Distribution::of(fresh.iter().copied()));
        line(
            "SOBA every",
            Distribution::of(pairs.iter().map(|p| p.soba_error())),
        );
        soba_all.extend(comparable.iter().map(|p| p.soba_error()));
        pi_all.extend(comparable.iter().map(|p| p.pi_error()));
        for p in pairs.iter().filter(|p| p.fresh()) {
            match p.after_foreign_compaction {
                true => soba_after.push(p.soba_error()),
                false => soba_starts.push(p.soba_error()),
            }
        }
        soba_fresh.extend(fresh);
        soba_every.extend(pairs.iter().map(|p| p.soba_error()));
    }
    if !print_pairs {
        println!("all transcripts:");
        line("SOBA", Distribution::of(soba_all));
        line("pi chars/4", Distribution::of(pi_all));
        line("SOBA first", Distribution::of(soba_fresh));
        line("  start", Distribution::of(soba_starts));
        line("  after cmp", Distribution::of(soba_after));
        line("SOBA every", Distribution::of(soba_every));
        println!(
            "  (SOBA and pi: anchored requests; first: the first request of a session (start) and \
             the first after the agent's own compaction (after cmp), with the agent's default \
             unseen-context allowance; every: both)"
        );
    }
    Ok(())
}

fn capsule_quality(gold: &Path, transcripts: &Path, json: bool) -> anyhow::Result<()> {
    use crate::eval::bench::{load_gold, run, ModelEndpoint, MODEL_SKIPPED};
    use crate::eval::capsule_quality::{failure_lines, render_table, totals};
    let cuts = load_gold(gold)?;
    let model = ModelEndpoint::from_env()?;
    match &model {
        Some(m) => eprintln!("capsule quality: model capsule by {}", m.describe()),
        None => eprintln!("{MODEL_SKIPPED}"),
    }
    let results = run(transcripts, &cuts, model.as_ref(), &mut |name| {
        eprintln!("  {name}")
    })?;
    let local: Vec<_> = results.iter().map(|r| r.local.clone()).collect();
    let scored_by_model: Vec<_> = results
        .iter()
        .filter_map(|r| r.model.as_ref()?.as_ref().ok().map(|(s, _)| s.clone()))
        .collect();
    let model_failures: Vec<(String, String)> = results
        .iter()
        .filter_map(|r| match &r.model {
            Some(Err(why)) => Some((r.name.clone(), why.clone())),
            _ => None,
        })
        .collect();
    if json {
        let fields = |cuts: &[crate::eval::capsule_quality::CutScore]| {
            totals(cuts)
                .into_iter()
                .map(|(f, s)| (f.as_str().to_string(), json!(s)))
                .collect::<serde_json::Map<_, _>>()
        };
        let with_capsule =
            |s: &crate::eval::capsule_quality::CutScore,
             c: &soba_core::session::capsule::model::CapsuleEntry| {
                let mut v = json!(s);
                v["capsule"] = json!({
                    "state": c.state,
                    "artifacts": c.artifacts,
                    // What the agent that continues reads: for a reader judging the capsule.
                    "rendered": soba_core::session::capsule::render::render_for_model(c),
                });
                v
            };
        let local_cuts: Vec<_> = results
            .iter()
            .map(|r| with_capsule(&r.local, &r.local_capsule))
            .collect();
        let model_cuts: Vec<_> = results
            .iter()
            .filter_map(|r| r.model.as_ref()?.as_ref().ok())
            .map(|(s, c)| with_capsule(s, c))
            .collect();
        let mut out = json!({"local": {"cuts": local_cuts, "totals": fields(&local)}});
        if model.is_some() {
            out["model"] = json!({
                "endpoint": model.as_ref().map(|m| m.describe()),
                "cuts": model_cuts,
                "totals": fields(&scored_by_model),
                "failed": model_failures
                    .iter()
                    .map(|(cut, why)| json!({"cut": cut, "reason": why}))
                    .collect::<Vec<_>>(),
            });
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!("{}", render_table("local capsule", &local));
    for line in failure_lines(&local) {
        println!("  {line}");
    }
    if let Some(m) = &model {
        println!();
        println!(
            "{}",
            render_table(
                &format!("model capsule ({})", m.describe()),
                &scored_by_model
            )
        );
        for line in failure_lines(&scored_by_model) {
            println!("  {line}");
        }
        for (cut, why) in &model_failures {
            println!("  {cut}: NO MODEL CAPSULE: {why}");
        }
    }
    Ok(())
}
