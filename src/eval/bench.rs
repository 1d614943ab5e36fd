//! The capsule-quality benchmark: for each annotated cut of a fixture transcript, the
//! transcript is imported, cut at the annotated entry, and the capsule SOBA builds there (of
//! the whole history up to the cut, as `soba capsule create` builds it) is scored against the
//! gold working state. The local capsule always; a model capsule through the `openai`
//! summarizer when an endpoint is given ([`ModelEndpoint::from_env`]).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use tokio_util::sync::CancellationToken;

use super::capsule_quality::{score, user_prompts, Annotation, Cut, CutScore};
use crate::import::transcript::import_str;
use crate::import::ImportOptions;
use crate::summarize::client::ModelSummarizer;
use crate::summarize::summarizer::Summarizer;
use soba_core::compaction::plan::plan;
use soba_core::compaction::plan::Plan;
use soba_core::compaction::plan::PlanRequest;
use soba_core::compaction::run::Generated;
use soba_core::config::{Config, Overrides, Provider, SummarizerConfig};
use soba_core::session::capsule::model::CapsuleEntry;
use soba_core::session::capsule::model::Quality;
use soba_core::session::entry::EntryBody;
use soba_core::session::foreign::ForeignCompactions;
use soba_core::session::trigger::Trigger;
use soba_core::session::Session;

/// The line printed when no model endpoint is given.
pub const MODEL_SKIPPED: &str =
    "capsule quality: model capsule skipped (SOBA_EVAL_ENDPOINT not set)";

/// Default time one model capsule may take: long histories are summarized in several chunks.
const DEFAULT_MODEL_TIMEOUT_MS: u64 = 600_000;

/// One annotated cut, named after its file.
#[derive(Debug, Clone)]
pub struct GoldCut {
    pub name: String,
    pub annotation: Annotation,
}

/// Every `*.json` annotation in `dir`, in file-name order.
pub fn load_gold(dir: &Path) -> anyhow::Result<Vec<GoldCut>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the gold folder {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.extension().is_some_and(|x| x == "json"));
    files.sort();
    if files.is_empty() {
        bail!("no annotations (*.json) in {}", dir.display());
    }
    files
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            let annotation =
                Annotation::parse(&text).map_err(|e| anyhow!("{}: {e}", p.display()))?;
            let name = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            Ok(GoldCut { name, annotation })
        })
        .collect()
}

/// An OpenAI-compatible server to write model capsules with, from the environment:
/// `SOBA_EVAL_ENDPOINT` (base URL, e.g. `http://127.0.0.1:8000/v1`), `SOBA_EVAL_MODEL`
/// (required with it), and optionally `SOBA_EVAL_API_KEY_ENV` (the variable holding the key),
/// `SOBA_EVAL_CONTEXT_WINDOW` (the model's window, when the catalog does not know it) and
/// `SOBA_EVAL_TIMEOUT_MS` (per capsule; default 10 minutes).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelEndpoint {
    pub summarizer: SummarizerConfig,
    pub timeout_ms: u64,
}

impl ModelEndpoint {
    /// `Ok(None)` when `SOBA_EVAL_ENDPOINT` is not set.
    pub fn from_env() -> anyhow::Result<Option<ModelEndpoint>> {
        Self::from_vars(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
    }

    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> anyhow::Result<Option<Self>> {
        let Some(endpoint) = var("SOBA_EVAL_ENDPOINT") else {
            return Ok(None);
        };
        let model = var("SOBA_EVAL_MODEL").ok_or_else(|| {
            anyhow!("SOBA_EVAL_ENDPOINT is set but SOBA_EVAL_MODEL is not: name the model to ask")
        })?;
        let number = |k: &str| -> anyhow::Result<Option<u64>> {
            var(k)
                .map(|v| v.trim().parse().map_err(|e| anyhow!("{k}={v}: {e}")))
                .transpose()
        };
        Ok(Some(ModelEndpoint {
            summarizer: SummarizerConfig {
                provider: Provider::Openai,
                base_url: Some(endpoint),
                model: Some(model),
                api_key_env: var("SOBA_EVAL_API_KEY_ENV"),
                context_window: number("SOBA_EVAL_CONTEXT_WINDOW")?,
                ..SummarizerConfig::default()
            },
            timeout_ms: number("SOBA_EVAL_TIMEOUT_MS")?.unwrap_or(DEFAULT_MODEL_TIMEOUT_MS),
        }))
    }

    pub fn describe(&self) -> String {
        format!(
            "{} at {}",
            self.summarizer.model.as_deref().unwrap_or("?"),
            self.summarizer.base_url.as_deref().unwrap_or("?")
        )
    }
}

/// The capsules built at one cut, scored.
#[derive(Debug, Clone)]
pub struct CutResult {
    pub name: String,
    pub local: CutScore,
    pub local_capsule: CapsuleEntry,
    /// The model capsule's score, or why there is none (the model failed and the local capsule
    /// stood in, which is not scored as the model's).
    pub model: Option<Result<(CutScore, CapsuleEntry), String>>,
}

/// A transcript imported into a session that holds the whole history: SOBA in the agent's
/// place, whose own compactions are marks, not cuts.
struct Imported {
    session: Session,
    config: Config,
}

fn import(transcripts: &Path, file: &str) -> anyhow::Result<Imported> {
    let path = transcripts.join(file);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read transcript {}", path.display()))?;
    let options = ImportOptions {
        source_path: file.to_string(),
        default_workspace: "/workspace".into(),
        default_session_id: "capsule-quality".into(),
        now: "2026-01-01T00:00:00Z".into(),
    };
    let imported = import_str(&text, None, &options)
        .map_err(|e| anyhow!("cannot import {}: {e}", path.display()))?;
    let config = Config::resolve(
        &[],
        imported.header.model_config().as_ref(),
        &Overrides::default(),
    )?;
    let mut session = Session::new(imported.header.clone(), config.model.tokenizer);
    session.configure_counting(&config.model);
    for e in imported.entries {
        // An entry the tree refuses is left out, as `soba replay` leaves it out.
        let _ = session.push(e);
    }
    session.set_foreign_compactions(ForeignCompactions::WholeHistory);
    Ok(Imported { session, config })
}

/// The index of the leaf an annotated cut names.
fn leaf_of(session: &Session, cut: &Cut) -> anyhow::Result<usize> {
    match cut {
        Cut::BeforeCompaction(n) => {
            let compactions: Vec<usize> = (0..session.len())
                .filter(|&i| {
                    matches!(&session.entry(i).body,
                        EntryBody::ForeignCompaction(f) if f.replaces_context())
                })
                .collect();
            let &at = n
                .checked_sub(1)
                .and_then(|k| compactions.get(k))
                .ok_or_else(|| {
                    anyhow!(
                        "the transcript has {} compactions of its agent, not {n}",
                        compactions.len()
                    )
                })?;
            session
                .parent_of(at)
                .ok_or_else(|| anyhow!("the agent's compaction {n} follows no entry"))
        }
        Cut::AfterRecord(id) => (0..session.len())
            .rev()
            .find(|&i| session.entry(i).source_id.as_deref() == Some(id.as_str()))
            .ok_or_else(|| anyhow!("no entry was imported from record `{id}`")),
    }
}

/// The plan of a capsule of the whole history up to `leaf`.
fn plan_at(imported: &Imported, leaf: usize) -> anyhow::Result<Plan> {
    let req = PlanRequest {
        trigger: Trigger::Handoff,
        requested: false,
        instructions: None,
        title: None,
        config: &imported.config,
        mapping: &imported.config.tool_mapping,
        operation_id: "op_capsule_quality".into(),
    };
    plan(&imported.session, Some(leaf), &req)
        .map_err(|no| anyhow!("no capsule: {} ({})", no.reason, no.outcome))
}

fn model_capsule(
    plan: &Plan,
    summarizer: &dyn Summarizer,
    timeout_ms: u64,
    runtime: &tokio::runtime::Runtime,
) -> Result<CapsuleEntry, String> {
    let mut plan = plan.clone();
    plan.roi.timeout_ms = timeout_ms;
    let generated = runtime.block_on(crate::summarize::generate(
        &plan,
        Some(summarizer),
        CancellationToken::new(),
        &|_| {},
    ));
    match generated {
        Generated::State {
            state,
            quality: Quality::Model,
            ..
        } => Ok(plan.capsule("ck_model".into(), state, Quality::Model, None)),
        Generated::State {
            degraded_reason, ..
        } => Err(degraded_reason.unwrap_or_else(|| "the model wrote no capsule".into())),
        Generated::Cancelled => Err("cancelled".into()),
    }
}

/// Build and score the capsules of every cut in `gold`, reading transcripts from
/// `transcripts`. Each transcript is imported once. `progress` hears each cut's name as it
/// starts.
pub fn run(
    transcripts: &Path,
    gold: &[GoldCut],
    model: Option<&ModelEndpoint>,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Vec<CutResult>> {
    let summarizer = model
        .map(|m| ModelSummarizer::new(&m.summarizer, |k| std::env::var(k).ok()))
        .transpose()
        .map_err(|e| anyhow!("the model endpoint cannot be used: {e}"))?;
    let runtime = match model {
        Some(_) => Some(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
        ),
        None => None,
    };
    let mut by_transcript: BTreeMap<&str, Vec<&GoldCut>> = BTreeMap::new();
    for g in gold {
        by_transcript
            .entry(g.annotation.transcript.as_str())
            .or_default()
            .push(g);
    }
    let mut results = Vec::new();
    for (file, cuts) in by_transcript {
        let imported = import(transcripts, file)?;
        let position: HashMap<String, usize> = (0..imported.session.len())
            .map(|i| (imported.session.entry(i).id.clone(), i))
            .collect();
        for g in cuts {
            progress(&g.name);
            let at =
                |e: anyhow::Error| e.context(format!("{} ({file}, {})", g.name, g.annotation.cut));
            let leaf = leaf_of(&imported.session, &g.annotation.cut).map_err(at)?;
            let plan = plan_at(&imported, leaf).map_err(at)?;
            let local_capsule = plan.capsule(
                "ck_local".into(),
                plan.local_state.clone(),
                Quality::Degraded,
                None,
            );
            let prompts = user_prompts(&imported.session, leaf);
            let local = score(&g.name, &g.annotation, &local_capsule, &position, &prompts);
            let model = match (&summarizer, &runtime, model) {
                (Some(s), Some(rt), Some(m)) => Some(
                    model_capsule(&plan, s, m.timeout_ms, rt)
                        .map(|c| (score(&g.name, &g.annotation, &c, &position, &prompts), c)),
                ),
                _ => None,
            };
            results.push(CutResult {
                name: g.name.clone(),
                local,
                local_capsule,
                model,
            });
        }
    }
    results.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_endpoint_comes_from_the_environment_and_needs_a_model_name() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(ModelEndpoint::from_vars(vars(&[])).unwrap(), None);
        let err =
            ModelEndpoint::from_vars(vars(&[("SOBA_EVAL_ENDPOINT", "http://h/v1")])).unwrap_err();
        assert!(err.to_string().contains("SOBA_EVAL_MODEL"), "{err}");
        let m = ModelEndpoint::from_vars(vars(&[
            ("SOBA_EVAL_ENDPOINT", "http://127.0.0.1:8000/v1"),
            ("SOBA_EVAL_MODEL", "qwen"),
            ("SOBA_EVAL_API_KEY_ENV", "EVAL_KEY"),
            ("SOBA_EVAL_CONTEXT_WINDOW", "131072"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(m.summarizer.provider, Provider::Openai);
        assert_eq!(m.summarizer.api_key_env.as_deref(), Some("EVAL_KEY"));
        assert_eq!(m.summarizer.context_window, Some(131_072));
        assert_eq!(m.timeout_ms, DEFAULT_MODEL_TIMEOUT_MS);
        assert_eq!(m.describe(), "qwen at http://127.0.0.1:8000/v1");
        assert!(ModelEndpoint::from_vars(vars(&[
            ("SOBA_EVAL_ENDPOINT", "http://h/v1"),
            ("SOBA_EVAL_MODEL", "m"),
            ("SOBA_EVAL_TIMEOUT_MS", "soon"),
        ]))
        .is_err());
    }
}
