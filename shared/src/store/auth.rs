//! API tokens and the audit trail (docs/security.md).
//!
//! A token's secret is shown once, when it is created, and stored only as its SHA-256
//! ([`hash_secret`]): a leaked database does not leak working tokens. The audit trail is
//! one row per state-changing request: who (the token's name), what, when, the target
//! and the reason.

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

/// A stored API token (its secret's hash, never the secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    /// The token's unique name: what the audit trail records.
    pub name: String,
    /// Hex SHA-256 of the secret.
    pub token_hash: String,
    /// The scopes granted (`read`, `start`, `operate`, `define`, `work`, `admin`).
    pub scopes: Vec<String>,
    /// The task types a `work` scope is limited to; `None`: every task type.
    pub task_types: Option<Vec<String>>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it stops working; `None`: never.
    pub expires_at: Option<DateTime<Utc>>,
}

impl ApiToken {
    /// Whether the token has expired at `now`.
    pub fn expired_at(&self, now: DateTime<Utc>) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
}

/// The stored form of a token's secret: hex SHA-256.
pub fn hash_secret(secret: &str) -> String {
    hex_of(&Sha256::digest(secret.as_bytes()))
}

fn hex_of(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// One audited request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// When the request was answered (or the change committed).
    #[serde(with = "chrono::serde::ts_milliseconds")]
    pub at: DateTime<Utc>,
    /// The token's name; `None` when auth is off.
    #[serde(rename = "token")]
    pub actor: Option<String>,
    /// What was done, e.g. `workflow.terminate`, `definition.put`, `token.create`.
    pub action: String,
    /// What it was done to: a workflow id, a definition's or a token's name.
    pub target: Option<String>,
    /// The workflow concerned, when there is one.
    pub workflow_id: Option<String>,
    /// The reason the caller gave.
    pub reason: Option<String>,
    /// The HTTP status of the answer; `None` for rows written in the change's own
    /// transaction (the change happened).
    pub status: Option<i32>,
    /// The request's method.
    pub method: String,
    /// The request's path.
    pub path: String,
}

/// Which audit rows to read, newest first.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// Rows at or after this time.
    pub from: Option<DateTime<Utc>>,
    /// Rows before this time.
    pub to: Option<DateTime<Utc>>,
    /// Rows of this token only.
    pub actor: Option<String>,
    /// Rows about this workflow only.
    pub workflow_id: Option<String>,
    /// At most this many rows.
    pub limit: i64,
}

/// The time `age` ago; `None` when that is before any time there can be (nothing is
/// that old).
pub(crate) fn older_than(age: std::time::Duration) -> Option<DateTime<Utc>> {
    Utc::now().checked_sub_signed(chrono::Duration::from_std(age).ok()?)
}

/// An audit row as both backends select it (`at, actor, action, target, workflow_id,
/// reason, status, method, path`).
pub(crate) type AuditRow = (
    DateTime<Utc>,
    Option<String>,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i32>,
    String,
    String,
);

impl From<AuditRow> for AuditEntry {
    fn from(
        (at, actor, action, target, workflow_id, reason, status, method, path): AuditRow,
    ) -> Self {
        Self {
            at,
            actor,
            action,
            target,
            workflow_id,
            reason,
            status,
            method,
            path,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_stored_as_its_sha256() {
        assert_eq!(
            hash_secret("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
