//! The REST routes (API.md), one module per resource.

pub mod metadata;
mod start;
pub mod workflow;
