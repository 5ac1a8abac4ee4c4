//! The PostgreSQL backend (sqlx). Migrations live in `shared/migrations` and are applied
//! at start-up by every service, so a service started on a fresh database creates the
//! schema (sqlx's migrator takes an advisory lock, so concurrent starts are safe).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

mod auth;
mod commit_sql;
mod definitions;
mod definitions_watch;
mod event_handlers;
mod executions;
mod graph;
mod held;
pub(crate) mod hooks;
mod operations;
pub(crate) mod outbox;
mod reads;
pub mod registry;
mod replica;
mod runs;
mod search;
mod starts;
mod stats;
mod task_api;
mod taskdefs;
pub(crate) mod timers;

use super::backend::Health;
use super::definitions_epoch::DefinitionsEpoch;
use crate::{Error, Result};

/// The PostgreSQL backend: a pool, and the janitor that deletes published outbox rows.
#[derive(Clone, Debug)]
pub struct PgStore {
    pub(crate) pool: PgPool,
    /// The streaming replica that reads which may lag go to (`replica`), if any.
    pub(crate) replica: Option<PgPool>,
    /// Deletes published outbox rows in the background, in batches.
    pub(crate) janitor: crate::store::outbox::Janitor,
    /// Moved on by every change to the definitions; current only while watched
    /// ([`crate::store::backend::DefinitionStore::watch_definitions`]).
    pub(crate) definitions: DefinitionsEpoch,
    /// Connections the commits, starts and claims keep between statements (`held`).
    pub(crate) held: Arc<held::HeldSets>,
}

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

impl PgStore {
    /// Connects (retrying with back-off until `shutdown`) and applies pending migrations.
    pub async fn connect(
        url: &str,
        max_connections: u32,
        shutdown: &CancellationToken,
    ) -> Result<Self> {
        let options: PgConnectOptions = url
            .parse()
            .map_err(|e| Error::Config(format!("WEFT_DATABASE_URL: {e}")))?;
        let options = planned(options);
        let mut delay = Duration::from_millis(100);
        let pool = loop {
            let attempt = PgPoolOptions::new()
                .max_connections(max_connections)
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(options.clone())
                .await;
            match attempt {
                Ok(pool) => break pool,
                Err(e) if is_missing_database(&e) => {
                    create_database(&options).await?;
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "database not reachable");
                    tokio::select! {
                        _ = shutdown.cancelled() => return Err(Error::ShuttingDown),
                        _ = tokio::time::sleep(delay) => {}
                    }
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        };
        MIGRATOR.run(&pool).await?;
        // Deleting published outbox rows need not wait for the WAL flush: losing such a
        // delete in a database crash only means a duplicate publish by the sweeper, and
        // consumers are idempotent.
        let relaxed = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(options.options([("synchronous_commit", "off")]));
        Ok(Self {
            held: Arc::new(held::HeldSets::over(&pool)),
            pool,
            replica: None,
            janitor: outbox::janitor(relaxed),
            definitions: DefinitionsEpoch::default(),
        })
    }

    /// Sends the reads that may lag (search, statistics, history pages) to the streaming
    /// replica at `url` (`WEFT_DATABASE_READ_URL`), with up to `max_connections`
    /// connections of its own.
    pub fn with_read_replica(mut self, url: &str, max_connections: u32) -> Result<Self> {
        self.replica = Some(replica::pool(url, max_connections)?);
        Ok(self)
    }

    /// Wraps an existing pool (tests); does not migrate. Needs a Tokio runtime.
    pub fn from_pool(pool: PgPool) -> Self {
        Self {
            held: Arc::new(held::HeldSets::over(&pool)),
            janitor: outbox::janitor(pool.clone()),
            replica: None,
            definitions: DefinitionsEpoch::default(),
            pool,
        }
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl Health for PgStore {
    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    fn backend_name(&self) -> &'static str {
        "postgres"
    }
}

/// `options` with Weft's planner settings: generic plans (planned once per connection)
/// and no sequential scans. Every statement Weft runs is a keyed lookup or an index
/// range, and a plan made while a table was small — or had no statistics yet — must not
/// scan it once it is large (docs/decider.md, "Prepared statements, generic plans").
pub(super) fn planned(options: PgConnectOptions) -> PgConnectOptions {
    options.options([
        ("plan_cache_mode", "force_generic_plan"),
        ("enable_seqscan", "off"),
    ])
}

/// Postgres error 3D000: the database named in the URL does not exist.
fn is_missing_database(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("3D000"))
}

/// Creates the database named in `options` through the `postgres` maintenance database,
/// so that a first start on a fresh server needs no manual step.
async fn create_database(options: &PgConnectOptions) -> Result<()> {
    use sqlx::ConnectOptions;
    let name = options.get_database().unwrap_or("weft").to_owned();
    let mut admin = options.clone().database("postgres").connect().await?;
    let quoted = format!("\"{}\"", name.replace('"', "\"\""));
    match sqlx::query(&format!("CREATE DATABASE {quoted}"))
        .execute(&mut admin)
        .await
    {
        Ok(_) => tracing::info!(database = %name, "created database"),
        // A concurrent starter created it first: 42P04 (duplicate database), or 23505
        // when both inserts race on pg_database's unique index.
        Err(sqlx::Error::Database(db))
            if matches!(db.code().as_deref(), Some("42P04") | Some("23505")) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(())
}
