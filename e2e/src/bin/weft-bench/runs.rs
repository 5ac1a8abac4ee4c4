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
    /// accepted, the run started, each task decided / begun by its worker / its result applied (in
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
    /// Each task's decided, begun-by-its-worker and result-applied moments, in order.
    #[allow(clippy::type_complexity)]
    pub tasks: Vec<(DateTime<Utc>, Option<DateTime<Utc>>, Option<DateTime<Utc>>)>,
    pub ended: DateTime<Utc>,
}

impl Timeline {
    /// The run's time split into phases, in milliseconds, by name. A task's stamps are
    /// its decision (the decider's clock), the moment its worker began it (the worker's,
    /// carried in its result: before its claim, if it makes one) and the result applied
    /// (the decider's). So: the start (accepted → run started); decided → a worker began
    /// it (the publish, the broker, the worker's receipt), the first task apart from the
    /// later ones (a first task without a spare offer goes through its shared queue, the
    /// later ones go eagerly to the worker that ran the one before); began → result
    /// applied (the claim if any, the handler, the result's publish, the broker, and the
    /// decider's wait for its previous commit); applied → the next decision or the
    /// run's end (the decider).
    pub fn phases(&self) -> [(&'static str, f64); 5] {
        let ms = |a: DateTime<Utc>, b: DateTime<Utc>| {
            (b - a).num_microseconds().unwrap_or(0) as f64 / 1000.0
        };
        let (mut first_to_worker, mut to_worker, mut began_to_applied, mut back) =
            (0.0, 0.0, 0.0, 0.0);
        for (i, (scheduled, taken, ended)) in self.tasks.iter().enumerate() {
            let (Some(taken), Some(ended)) = (*taken, *ended) else {
                continue;
            };
            match i {
                0 => first_to_worker = ms(*scheduled, taken),
                _ => to_worker += ms(*scheduled, taken),
            }
            began_to_applied += ms(taken, ended);
            let next = self.tasks.get(i + 1).map(|t| t.0).unwrap_or(self.ended);
            back += ms(ended, next);
        }
        [
            (
                "start accepted → run started",
                ms(self.accepted, self.started),
            ),
            (
                "decided → a worker began it (the first task)",
                first_to_worker,
            ),
            ("decided → a worker began it (the later tasks)", to_worker),
            (
                "a worker began it → its result applied (all tasks)",
                began_to_applied,
            ),
            (
                "result applied → next decision or run end (all tasks)",
                back,
            ),
        ]
    }
}
