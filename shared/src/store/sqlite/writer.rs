//! The hot writes of `weft dev` as synchronous transactions on a connection of their
//! own (rusqlite), instead of one round trip to sqlx's connection thread per statement.
//!
//! Why: sqlx runs every SQLite connection on a thread of its own and hands each
//! statement (and `BEGIN`, and `COMMIT`) to it over a channel, then wakes the awaiting
//! task with the outcome. Under load a decider commit of ten statements held the write
//! lock for milliseconds mostly waiting for those wake-ups (on this VM a cross-thread
//! wake-up is an inter-processor interrupt: 39 % of the SQLite thread's samples were in
//! the kernel's wake-up path, 5 % in SQLite itself). A [`SqliteWriter`] transaction runs
//! start to commit on the calling thread, its statements prepared once per process.
//!
//! There is still one writer: a transaction first takes the writer's turn, an async
//! mutex that every write takes — the synchronous ones here and the ones that still go
//! through sqlx's writing connection ([`SqliteWriter::sqlx`], [`SqliteWriter::begin`]) —
//! so no write ever meets another at SQLite's lock, where the busy handler would sleep.
//! The turn is not the sqlx pool itself: sqlx returns a connection to its pool only
//! after a spawned task has pinged it (a round trip to its thread), and the next writer
//! waited for those wake-ups after every transaction. The work runs inline on the
//! caller's thread, as CPU-bound work does: a transaction takes well under a
//! millisecond, except when its commit also checkpoints the WAL.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::{OpenFlags, TransactionBehavior};
use serde_json::Value;
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{Sqlite, SqlitePool, Transaction};
use tokio::sync::{Mutex, OwnedMutexGuard};
use uuid::Uuid;

use super::BUSY_TIMEOUT;
use crate::Result;

/// Prepared statements kept per process (every hot statement, with room).
const STATEMENT_CACHE: usize = 64;

/// The store's writing side: the synchronous connection of the hot writes, whose lock is
/// every write's turn, and the sqlx writing connection (a pool of one) for the writes
/// that still go through sqlx.
#[derive(Clone)]
pub struct SqliteWriter {
    pool: SqlitePool,
    conn: Arc<Mutex<rusqlite::Connection>>,
}

impl std::fmt::Debug for SqliteWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteWriter").finish_non_exhaustive()
    }
}

impl SqliteWriter {
    /// Opens the synchronous connection to the database of `options` (already created
    /// and migrated through `pool`). An in-memory database is the one sqlx opened: sqlx
    /// names it and opens it with a shared cache, so a second connection reaches it.
    pub(crate) fn open(
        options: &SqliteConnectOptions,
        pool: SqlitePool,
        memory: bool,
    ) -> Result<Self> {
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if memory {
            flags |= OpenFlags::SQLITE_OPEN_MEMORY | OpenFlags::SQLITE_OPEN_SHARED_CACHE;
        }
        let conn = rusqlite::Connection::open_with_flags(options.get_filename(), flags)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "foreign_keys", true)?;
        if !memory {
            conn.pragma_update(None, "synchronous", "NORMAL")?;
        }
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(Self {
            pool,
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// The sqlx writing connection, in turn with every other write: statements run on
    /// it as on any `&mut SqliteConnection` (the turn is released when it is dropped).
    pub async fn sqlx(&self) -> Result<SqlxWrite> {
        let turn = self.conn.clone().lock_owned().await;
        let conn = self.pool.acquire().await?;
        Ok(SqlxWrite { conn, _turn: turn })
    }

    /// A sqlx write transaction, in turn with every other write: `BEGIN IMMEDIATE` takes
    /// SQLite's write lock at once, so it never fails to upgrade a read lock half-way.
    /// Rolled back when dropped uncommitted.
    pub async fn begin(&self) -> Result<WriteTx> {
        let turn = self.conn.clone().lock_owned().await;
        let tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        Ok(WriteTx { tx, _turn: turn })
    }

    /// Closes the sqlx writing connection.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Runs `work` in one `BEGIN IMMEDIATE` transaction, in turn with every other write,
    /// and commits it; rolls it back when `work` fails (nothing is written).
    pub async fn transaction<T>(
        &self,
        work: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        // A panic inside `work` rolls its transaction back while unwinding and releases
        // the turn: nothing stale is left behind it.
        let mut conn = self.conn.lock().await;
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = work(&tx)?;
        tx.commit()?;
        Ok(out)
    }
}

/// The sqlx writing connection during a turn ([`SqliteWriter::sqlx`]).
pub struct SqlxWrite {
    // Dropped first: the connection goes back to its pool, then the turn is released.
    conn: PoolConnection<Sqlite>,
    _turn: OwnedMutexGuard<rusqlite::Connection>,
}

impl Deref for SqlxWrite {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        &self.conn
    }
}

impl DerefMut for SqlxWrite {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.conn
    }
}

/// A sqlx write transaction during a turn ([`SqliteWriter::begin`]); statements run on
/// `&mut *tx`.
pub struct WriteTx {
    // Dropped first: an uncommitted transaction's rollback is handed to sqlx's thread,
    // then the turn is released (a write that meets its lock meanwhile waits in SQLite's
    // busy handler: only on that failure path).
    tx: Transaction<'static, Sqlite>,
    _turn: OwnedMutexGuard<rusqlite::Connection>,
}

impl WriteTx {
    /// Commits the transaction, then releases the turn.
    pub async fn commit(self) -> Result<()> {
        Ok(self.tx.commit().await?)
    }
}

impl Deref for WriteTx {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        &self.tx
    }
}

impl DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.tx
    }
}

/// A time as sqlx writes it to SQLite (RFC 3339, `+00:00`), so that the rows of both
/// connections compare and decode alike.
pub(crate) fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, false)
}

/// An optional time, as [`ts`].
pub(crate) fn ts_opt(t: Option<DateTime<Utc>>) -> Option<String> {
    t.map(ts)
}

/// A UUID as sqlx writes it to SQLite: its 16 bytes.
pub(crate) fn id(u: &Uuid) -> &[u8] {
    u.as_bytes().as_slice()
}

/// An optional UUID, as [`id`].
pub(crate) fn id_opt(u: &Option<Uuid>) -> Option<&[u8]> {
    u.as_ref().map(id)
}

/// A JSON value as sqlx writes it to SQLite: its text.
pub(crate) fn json(v: &Value) -> String {
    v.to_string()
}

/// An optional JSON value: NULL when absent (a JSON `null` is the text `null`).
pub(crate) fn json_opt(v: &Option<Value>) -> Option<String> {
    v.as_ref().map(json)
}
