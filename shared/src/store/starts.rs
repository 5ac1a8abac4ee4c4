//! Accepted workflow starts (`workflow_starts`).
//!
//! The gateway answers a start only after the start row and the `StartWorkflow` command
//! are committed together (outbox), so an accepted start is never lost (DESIGN.md §3.1).
//! The idempotency key is a UNIQUE column: a repeated key, even from concurrent requests,
//! finds the first start instead of creating a second run.

use chrono::{DateTime, Utc};
use serde_json::Value;

/// A start to record.
#[derive(Debug, Clone)]
pub struct NewStart {
    /// The fresh workflow id.
    pub workflow_id: String,
    /// The caller's idempotency key, if any.
    pub idempotency_key: Option<String>,
    /// The definition's name.
    pub workflow_name: String,
    /// The definition's version.
    pub workflow_version: i32,
    /// The workflow input.
    pub input: Value,
    /// The caller's correlation id.
    pub correlation_id: Option<String>,
}

/// What [`Store::accept_start`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartOutcome {
    /// The start and its messages were committed; publish the messages now.
    Accepted,
    /// A start with the same idempotency key exists: this workflow id answers the
    /// request, and nothing was written.
    Existing(String),
}

/// An accepted start as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StartRow {
    /// The workflow id.
    pub workflow_id: String,
    /// The idempotency key, if any.
    pub idempotency_key: Option<String>,
    /// The definition's name.
    pub workflow_name: String,
    /// The definition's version.
    pub workflow_version: i32,
    /// The workflow input.
    pub input: Value,
    /// The caller's correlation id.
    pub correlation_id: Option<String>,
    /// When the start was accepted.
    pub created_at: DateTime<Utc>,
}
