//! The SQLite backend (sqlx), for `weft dev`: the whole store in one file (or in memory),
//! nothing to install. Its schema is `shared/migrations-sqlite` (the same tables as
//! PostgreSQL's, in SQLite's types), applied at open.
//!
//! One process owns the file. SQLite has one writer at a time, so the store has one
//! writing connection (`writer`, a pool of one): every write — transactions, which start
//! with `BEGIN IMMEDIATE`, and single statements — waits its turn for that connection in
//! the process, asynchronously, instead of in SQLite's busy handler, which sleeps
//! (milliseconds at a time) and left `weft dev` idle behind its own lock. Reads use the
//! other pool; WAL journaling lets them run beside the writer. No transaction is held
//! across a publish on the bus: the in-process bus journals messages in the same file,
//! and would wait for the write lock the transaction holds.

mod hooks;
pub(crate) mod outbox;
mod registry;
mod search;
mod stats;
pub(crate) mod timers;

pub(crate) mod auth;
mod definitions;
mod event_handlers;
mod executions;
mod graph;
mod operations;
mod reads;
mod runs;
mod starts;
mod task_api;
mod taskdefs;
pub mod writer;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::SqliteSynchronous;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

use super::backend::Health;
use crate::{Error, Result};
pub use writer::{SqliteWriter, SqlxWrite, WriteTx};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations-sqlite");

/// How long a statement waits for the write lock before failing.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The SQLite backend: a pool of readers and one writer on one database file.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    /// Reads (and the migrations at open).
    pub(crate) pool: SqlitePool,
    /// Every write: one sqlx connection taken in turn ([`SqliteWriter::pool`]), and the
    /// synchronous connection of the hot writes, which takes that turn too.
    pub(crate) writer: SqliteWriter,
    /// Deletes published outbox rows in the background, in batches.
    pub(crate) janitor: super::outbox::Janitor,
    /// Moved on by every change to the definitions (all made through this store).
    pub(crate) definitions: super::definitions_epoch::DefinitionsEpoch,
}

impl SqliteStore {
    /// Opens (creating it when missing) the database at `url` (`sqlite:PATH`,
    /// `sqlite://PATH` or `sqlite::memory:`) and applies pending migrations.
    pub async fn open(url: &str) -> Result<Self> {
        let memory = url.contains(":memory:");
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| Error::Config(format!("WEFT_DATABASE_URL: {e}")))?
            .create_if_missing(true)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let options = match memory {
            true => options,
            false => options
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal),
        };
        // An in-memory database lives as long as its one connection: keep exactly one,
        // forever.
        let pool = match memory {
            true => SqlitePoolOptions::new()
                .min_connections(1)
                .max_connections(1)
                .idle_timeout(None)
                .max_lifetime(None),
            // A read is not worth a second round trip to the connection's thread: a
            // broken connection fails its statement instead.
            false => SqlitePoolOptions::new()
                .max_connections(4)
                .test_before_acquire(false),
        }
        .acquire_timeout(BUSY_TIMEOUT)
        .connect_with(options.clone())
        .await?;
        MIGRATOR.run(&pool).await?;
        let writer = match memory {
            // The one connection is the database: it reads and writes.
            true => pool.clone(),
            false => {
                SqlitePoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(BUSY_TIMEOUT)
                    // Taking the turn is not worth a round trip to the connection's
                    // thread: a broken connection fails its statement instead.
                    .test_before_acquire(false)
                    .connect_with(options.clone())
                    .await?
            }
        };
        let writer = SqliteWriter::open(&options, writer, memory)?;
        let janitor = outbox::janitor(writer.clone());
        Ok(Self {
            pool,
            writer,
            janitor,
            definitions: super::definitions_epoch::DefinitionsEpoch::watched(),
        })
    }

    /// Opens the database file `path` (created when missing).
    pub async fn open_file(path: &Path) -> Result<Self> {
        Self::open(&format!("sqlite://{}", path.display())).await
    }

    /// The readers' pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The writing side (the in-process bus journals its messages through it, in turn
    /// with the store's writes).
    pub fn writer(&self) -> &SqliteWriter {
        &self.writer
    }

    /// Closes both pools.
    pub async fn close(&self) {
        self.writer.close().await;
        self.pool.close().await;
    }
}

/// A JSON array stored as TEXT (PostgreSQL's `text[]`), decoded.
pub(crate) fn string_array(text: &str) -> Result<Vec<String>> {
    serde_json::from_str(text).map_err(|e| Error::Decode(format!("JSON text array: {e}")))
}

#[async_trait]
impl Health for SqliteStore {
    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    fn backend_name(&self) -> &'static str {
        "sqlite"
    }
}
