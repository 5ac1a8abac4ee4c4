//! Where the benchmark watches runs end: the suite's PostgreSQL database, or the SQLite
//! file of a `weft dev` process (read-only, beside its writer). Watching costs the
//! engine nothing but a read now and then.

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::PgPool;

/// The store whose `runs` the benchmark reads.
pub enum Runs {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

impl Runs {
    /// The SQLite database of a `weft dev` at `path`, opened read-only.
    pub async fn sqlite(path: &Path) -> anyhow::Result<Self> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .read_only(true)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(2)
            .connect_with(options)
            .await?;
        Ok(Self::Sqlite(pool))
    }

    /// How many runs are in `status`.
    pub async fn count(&self, status: &str) -> anyhow::Result<i64> {
        Ok(match self {
            Runs::Postgres(pool) => {
                sqlx::query_scalar("SELECT count(*) FROM runs WHERE status = $1")
                    .bind(status)
                    .fetch_one(pool)
                    .await?
            }
            Runs::Sqlite(pool) => {
                sqlx::query_scalar("SELECT count(*) FROM runs WHERE status = ?")
                    .bind(status)
                    .fetch_one(pool)
                    .await?
            }
        })
    }

    /// When the last COMPLETED run ended, as the decider stamped it.
    pub async fn last_end(&self) -> anyhow::Result<DateTime<Utc>> {
        let sql = "SELECT end_time FROM runs WHERE status = 'COMPLETED'
                   ORDER BY end_time DESC LIMIT 1";
        Ok(match self {
            Runs::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await?,
            Runs::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await?,
        })
    }

    /// The status of the current run of `workflow_id`, if it exists yet.
    pub async fn status(&self, workflow_id: &str) -> anyhow::Result<Option<String>> {
        Ok(match self {
            Runs::Postgres(pool) => {
                sqlx::query_scalar("SELECT status FROM runs WHERE workflow_id = $1 AND is_current")
                    .bind(workflow_id)
                    .fetch_optional(pool)
                    .await?
            }
            Runs::Sqlite(pool) => {
                sqlx::query_scalar("SELECT status FROM runs WHERE workflow_id = ? AND is_current")
                    .bind(workflow_id)
                    .fetch_optional(pool)
                    .await?
            }
        })
    }

    /// From the gateway accepting the start of `workflow_id` to the decider committing
    /// its end, as the engine stamped them.
    pub async fn engine_latency(&self, workflow_id: &str) -> anyhow::Result<Duration> {
        let (end, accepted): (DateTime<Utc>, DateTime<Utc>) = match self {
            Runs::Postgres(pool) => {
                sqlx::query_as(
                    "SELECT r.end_time, s.created_at FROM runs r
                     JOIN workflow_starts s USING (workflow_id) WHERE r.workflow_id = $1",
                )
                .bind(workflow_id)
                .fetch_one(pool)
                .await?
            }
            Runs::Sqlite(pool) => {
                sqlx::query_as(
                    "SELECT r.end_time, s.created_at FROM runs r
                     JOIN workflow_starts s USING (workflow_id) WHERE r.workflow_id = ?",
                )
                .bind(workflow_id)
                .fetch_one(pool)
                .await?
            }
        };
        Ok((end - accepted).to_std().unwrap_or_default())
    }
}
