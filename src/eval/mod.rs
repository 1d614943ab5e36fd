//! Benchmarks of SOBA's output against hand-written gold: the capsule-quality scorer (pure)
//! and the benchmark that builds capsules at annotated cuts of real transcripts
//! (`soba debug capsule-quality`, `docs/capsule-quality.md`).

pub mod bench;
pub mod capsule_quality;
