//! A capsule as the session log stores it (the `capsule` entry and its parts) and as the model
//! reads it. Building capsules, their portable file format and hand-offs live above, in
//! `crate::capsule`, which re-exports these modules under their old paths.

pub mod model;
pub mod render;

pub use model::*;
