//! API tokens and the audit trail on SQLite (JSON arrays as TEXT).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::sqlite::SqliteConnection;

use super::{string_array, SqliteStore};
use crate::store::auth::{older_than, ApiToken, AuditEntry, AuditFilter, AuditRow};
use crate::store::backend::AuthStore;
use crate::{Error, Result};

/// A token row as selected.
type TokenRow = (
    String,
    String,
    String,
    Option<String>,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
);

const TOKEN_COLUMNS: &str = "name, token_hash, scopes, task_types, created_at, expires_at";

fn token(
    (name, token_hash, scopes, task_types, created_at, expires_at): TokenRow,
) -> Result<ApiToken> {
    Ok(ApiToken {
        name,
        token_hash,
        scopes: string_array(&scopes)?,
        task_types: task_types.as_deref().map(string_array).transpose()?,
        created_at,
        expires_at,
    })
}

fn json_text(values: &[String]) -> Result<String> {
    serde_json::to_string(values).map_err(|e| Error::Decode(format!("JSON text array: {e}")))
}

/// Appends `e` to the audit trail on `conn` (the caller's write transaction).
pub(crate) async fn insert_audit(conn: &mut SqliteConnection, e: &AuditEntry) -> Result<()> {
    sqlx::query(
        "INSERT INTO audit_log (at, actor, action, target, workflow_id, reason, status,
             method, path)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(e.at)
    .bind(&e.actor)
    .bind(&e.action)
    .bind(&e.target)
    .bind(&e.workflow_id)
    .bind(&e.reason)
    .bind(e.status)
    .bind(&e.method)
    .bind(&e.path)
    .execute(conn)
    .await?;
    Ok(())
}

/// [`insert_audit`] in the caller's synchronous write transaction.
pub(crate) fn insert_audit_sync(tx: &rusqlite::Transaction<'_>, e: &AuditEntry) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO audit_log (at, actor, action, target, workflow_id, reason, status,
             method, path)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(rusqlite::params![
        super::writer::ts(e.at),
        e.actor,
        e.action,
        e.target,
        e.workflow_id,
        e.reason,
        e.status,
        e.method,
        e.path
    ])?;
    Ok(())
}

#[async_trait]
impl AuthStore for SqliteStore {
    async fn create_token(&self, t: &ApiToken, audit: &AuditEntry) -> Result<bool> {
        let mut tx = self.writer.begin().await?;
        let inserted = sqlx::query(
            "INSERT INTO api_tokens (name, token_hash, scopes, task_types, created_at,
                 expires_at)
             VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING",
        )
        .bind(&t.name)
        .bind(&t.token_hash)
        .bind(json_text(&t.scopes)?)
        .bind(t.task_types.as_deref().map(json_text).transpose()?)
        .bind(t.created_at)
        .bind(t.expires_at)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !inserted {
            return Ok(false);
        }
        insert_audit(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn tokens(&self) -> Result<Vec<ApiToken>> {
        let rows: Vec<TokenRow> = sqlx::query_as(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens ORDER BY name"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(token).collect()
    }

    async fn token_by_hash(&self, token_hash: &str) -> Result<Option<ApiToken>> {
        let row: Option<TokenRow> = sqlx::query_as(&format!(
            "SELECT {TOKEN_COLUMNS} FROM api_tokens WHERE token_hash = ?"
        ))
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?;
        row.map(token).transpose()
    }

    async fn revoke_token(&self, name: &str, audit: &AuditEntry) -> Result<bool> {
        let mut tx = self.writer.begin().await?;
        let deleted = sqlx::query("DELETE FROM api_tokens WHERE name = ?")
            .bind(name)
            .execute(&mut *tx)
            .await?
            .rows_affected()
            == 1;
        if !deleted {
            return Ok(false);
        }
        insert_audit(&mut tx, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn record_audit(&self, entry: &AuditEntry) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        insert_audit(&mut tx, entry).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn audit_entries(&self, f: &AuditFilter) -> Result<Vec<AuditEntry>> {
        let rows: Vec<AuditRow> = sqlx::query_as(
            "SELECT at, actor, action, target, workflow_id, reason, status, method, path
             FROM audit_log
             WHERE (?1 IS NULL OR at >= ?1)
               AND (?2 IS NULL OR at < ?2)
               AND (?3 IS NULL OR actor = ?3)
               AND (?4 IS NULL OR workflow_id = ?4)
             ORDER BY at DESC, id DESC LIMIT ?5",
        )
        .bind(f.from)
        .bind(f.to)
        .bind(&f.actor)
        .bind(&f.workflow_id)
        .bind(f.limit)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows.into_iter().map(AuditEntry::from).collect())
    }

    async fn purge_audit(&self, age: std::time::Duration, limit: i64) -> Result<u64> {
        let Some(cutoff) = older_than(age) else {
            return Ok(0);
        };
        let done = sqlx::query(
            "DELETE FROM audit_log WHERE id IN (
                 SELECT id FROM audit_log WHERE at < ? ORDER BY at LIMIT ?)",
        )
        .bind(cutoff)
        .bind(limit)
        .execute(&mut *self.writer.sqlx().await?)
        .await?;
        Ok(done.rows_affected())
    }
}
