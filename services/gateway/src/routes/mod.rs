//! The REST routes (API.md), one module per resource.

pub mod metadata;
pub mod signal;
mod start;
pub mod taskdefs;
pub mod workflow;
