//! A capsule as the session log stores it (the `capsule` entry and its parts: [`model`]) and as
//! the model reads it ([`render`]). Building capsules, their portable file format and hand-offs
//! live above, in [`crate::capsule`].

pub mod model;
pub mod render;
