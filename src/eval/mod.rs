//! Benchmarks of SOBA's output against hand-written gold: the capsule-quality scorer (pure)
//! (`docs/capsule-quality.md`).

pub mod capsule_quality;
