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

    /// When the gateway accepted the start of `workflow_id` and when its run ended, as
    /// the engine stamped them.
    pub async fn accepted_and_ended(
        &self,
        workflow_id: &str,
    ) -> anyhow::Result<(DateTime<Utc>, DateTime<Utc>)> {
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
        Ok((accepted, end))
    }

    /// The moments of one run of `workflow_id`, as the engine stamped them: the start
    /// accepted, the run started, each task scheduled / taken by a worker / ended (in
    /// order), the run ended.
    pub async fn timeline(&self, workflow_id: &str) -> anyhow::Result<Timeline> {
        type Row = (DateTime<Utc>, Option<DateTime<Utc>>, Option<DateTime<Utc>>);
        let (accepted, started, ended, tasks): (_, _, _, Vec<Row>) = match self {
            Runs::Postgres(pool) => {
                let (accepted, started, ended, run_id): (
                    DateTime<Utc>,
                    DateTime<Utc>,
                    DateTime<Utc>,
                    uuid::Uuid,
                ) = sqlx::query_as(
                    "SELECT s.created_at, r.start_time, r.end_time, r.run_id FROM runs r
                     JOIN workflow_starts s USING (workflow_id) WHERE r.workflow_id = $1",
                )
                .bind(workflow_id)
                .fetch_one(pool)
                .await?;
                let tasks = sqlx::query_as(
                    "SELECT scheduled_time, start_time, end_time FROM tasks
                     WHERE run_id = $1 ORDER BY seq",
                )
                .bind(run_id)
                .fetch_all(pool)
                .await?;
                (accepted, started, ended, tasks)
            }
            Runs::Sqlite(pool) => {
                let (accepted, started, ended, run_id): (
                    DateTime<Utc>,
                    DateTime<Utc>,
                    DateTime<Utc>,
                    Vec<u8>,
                ) = sqlx::query_as(
                    "SELECT s.created_at, r.start_time, r.end_time, r.run_id FROM runs r
                     JOIN workflow_starts s USING (workflow_id) WHERE r.workflow_id = ?",
                )
                .bind(workflow_id)
                .fetch_one(pool)
                .await?;
                let tasks = sqlx::query_as(
                    "SELECT scheduled_time, start_time, end_time FROM tasks
                     WHERE run_id = ? ORDER BY seq",
                )
                .bind(run_id)
                .fetch_all(pool)
                .await?;
                (accepted, started, ended, tasks)
            }
        };
        Ok(Timeline {
            accepted,
            started,
            tasks,
            ended,
        })
    }
}

/// One run's moments ([`Runs::timeline`]).
pub struct Timeline {
    pub accepted: DateTime<Utc>,
    pub started: DateTime<Utc>,
    /// Each task's scheduled, taken and ended moments, in order.
    #[allow(clippy::type_complexity)]
    pub tasks: Vec<(DateTime<Utc>, Option<DateTime<Utc>>, Option<DateTime<Utc>>)>,
    pub ended: DateTime<Utc>,
}

impl Timeline {
    /// The run's time split into phases, in milliseconds, by name: the start
    /// (accepted → run started), decision → worker has the task (the commit, the publish,
    /// the broker), worker has it → its handler ended (the claim and the handler), and
    /// the handler's end → the next decision or the run's end (the result's publish, the
    /// broker, the decider).
    pub fn phases(&self) -> [(&'static str, f64); 4] {
        let ms = |a: DateTime<Utc>, b: DateTime<Utc>| {
            (b - a).num_microseconds().unwrap_or(0) as f64 / 1000.0
        };
        let (mut to_worker, mut claim_and_handler, mut back) = (0.0, 0.0, 0.0);
        for (i, (scheduled, taken, ended)) in self.tasks.iter().enumerate() {
            let (Some(taken), Some(ended)) = (*taken, *ended) else {
                continue;
            };
            to_worker += ms(*scheduled, taken);
            claim_and_handler += ms(taken, ended);
            let next = self.tasks.get(i + 1).map(|t| t.0).unwrap_or(self.ended);
            back += ms(ended, next);
        }
        [
            (
                "start accepted → run started",
                ms(self.accepted, self.started),
            ),
            ("decision → worker has the task (all tasks)", to_worker),
            (
                "worker has the task → handler ended (all tasks)",
                claim_and_handler,
            ),
            ("handler ended → next decision or run end (all tasks)", back),
        ]
    }
}
