//! Test doubles shared by the integration tests.

pub mod agent;
pub mod lsp_client;
