//! The REST routes (API.md), one module per resource.

pub mod admin;
pub mod bulk;
pub mod execute;
pub mod executions;
pub mod graph;
pub mod heartbeat;
pub mod hooks;
pub mod metadata;
pub mod not_offered;
pub mod operations;
pub mod search;
pub mod server_info;
pub mod signal;
pub mod start;
pub mod stats;
pub mod taskdefs;
pub mod tasks;
pub mod ui;
pub mod workflow;
