//! The store: runs, history, tasks, definitions, timers, outbox, hooks and the heartbeat
//! registry's rows. One contract ([`backend`]), two backends: PostgreSQL ([`pg`], the
//! production store) and SQLite ([`sqlite`], embedded, for `weft dev`). Each backend's
//! SQL lives in its own module; the types here and in the concern modules are shared.

pub mod auth;
pub mod backend;
pub mod definitions;
pub mod definitions_epoch;
pub mod event_handlers;
pub mod executions;
pub mod graph;
pub mod graph_build;
pub mod graph_cache;
pub mod hooks;
pub mod operations;
pub mod outbox;
pub mod pg;
pub mod poll_data;
pub mod reads;
pub mod runs;
pub mod search;
pub mod sqlite;
pub mod starts;
pub mod stats;
pub mod task_api;
pub mod taskdefs;
pub mod timers;

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use backend::Backend;
pub use pg::PgStore;

use crate::bus::Bus;
use crate::Result;
use operations::OperationOutcome;

/// A cheap-to-clone handle on the store, whichever its backend. Every concern's methods
/// ([`backend`]) are called through it: it dereferences to `dyn Backend`.
#[derive(Clone, Debug)]
pub struct Store {
    backend: Arc<dyn Backend>,
    /// The pool, when the backend is PostgreSQL (tests and benchmarks query it directly).
    pg: Option<PgPool>,
}

impl std::ops::Deref for Store {
    type Target = dyn Backend;

    fn deref(&self) -> &Self::Target {
        &*self.backend
    }
}

impl Store {
    /// Opens the store named by `url`, applying pending migrations: a `postgres://` URL
    /// (connecting with back-off until `shutdown`; the database is created when missing)
    /// or a `sqlite:` URL (`sqlite:PATH`, `sqlite::memory:`).
    pub async fn connect(
        url: &str,
        max_connections: u32,
        shutdown: &CancellationToken,
    ) -> Result<Self> {
        Self::connect_with_replica(url, None, max_connections, shutdown).await
    }

    /// [`Store::connect`], with the reads that may lag (search, statistics, history
    /// pages) on the streaming replica at `read_url` when one is given.
    pub async fn connect_with_replica(
        url: &str,
        read_url: Option<&str>,
        max_connections: u32,
        shutdown: &CancellationToken,
    ) -> Result<Self> {
        let pg = PgStore::connect(url, max_connections, shutdown).await?;
        let pg = match read_url {
            Some(read_url) => {
                tracing::info!("search, statistics and history pages read the replica (WEFT_DATABASE_READ_URL)");
                pg.with_read_replica(read_url, max_connections)?
            }
            None => pg,
        };
        Ok(Self::from_pg(pg))
    }

    /// Wraps an existing PostgreSQL pool (tests); does not migrate. Needs a Tokio runtime.
    pub fn from_pool(pool: PgPool) -> Self {
        Self::from_pg(PgStore::from_pool(pool))
    }

    fn from_pg(pg: PgStore) -> Self {
        Self {
            pg: Some(pg.pool().clone()),
            backend: Arc::new(pg),
        }
    }

    /// A store on any backend.
    pub fn new(backend: impl Backend + 'static) -> Self {
        Self {
            backend: Arc::new(backend),
            pg: None,
        }
    }

    /// The PostgreSQL pool, when the backend is PostgreSQL.
    pub fn pg_pool(&self) -> Option<&PgPool> {
        self.pg.as_ref()
    }

    /// Waits up to `timeout` for the verdict on `request_id` (primary-key probes with a
    /// growing pause: operator commands are rare, and the decider answers in
    /// milliseconds). `None` when it did not come in time: the command stays queued and
    /// takes effect when a decider gets to it.
    pub async fn wait_operation_outcome(
        &self,
        request_id: Uuid,
        timeout: Duration,
    ) -> Result<Option<OperationOutcome>> {
        self.wait_operation_outcome_from(request_id, timeout, operations::FIRST_POLL)
            .await
    }

    /// [`Store::wait_operation_outcome`] whose first pause is `first` (the fallback of a
    /// caller that expects the verdict pushed: its probes start late and grow to
    /// `max(first, 100 ms)`).
    pub async fn wait_operation_outcome_from(
        &self,
        request_id: Uuid,
        timeout: Duration,
        first: Duration,
    ) -> Result<Option<OperationOutcome>> {
        let deadline = tokio::time::Instant::now() + timeout;
        let longest = first.max(operations::MAX_POLL);
        let mut pause = first;
        loop {
            if let Some(outcome) = self.operation_outcome(request_id).await? {
                return Ok(Some(outcome));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(longest);
        }
    }

    /// Publishes up to `limit` due timers (confirmed, concurrently) and deletes the
    /// published ones, in one transaction; returns how many were published.
    ///
    /// If a publish fails, the others are still deleted and committed, the failed rows
    /// stay for a later round, and the first error is returned.
    pub async fn fire_due_timers(&self, bus: &Bus, limit: i64) -> Result<usize> {
        let report = self.fire_timers(bus, limit).await?;
        match report.failed.into_iter().next() {
            Some((_, e)) => Err(e),
            None => Ok(report.lateness.len()),
        }
    }
}
