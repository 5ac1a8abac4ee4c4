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
//! There is still one writer: the transaction first takes the store's writing sqlx
//! connection (a pool of one) as its turn, so it never meets another write at SQLite's
//! lock, where the busy handler would sleep. The work runs inline on the caller's
//! thread, as CPU-bound work does: a transaction takes well under a millisecond, except
//! when its commit also checkpoints the WAL.

use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::{OpenFlags, TransactionBehavior};
use serde_json::Value;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::SqlitePool;
use uuid::Uuid;

use super::BUSY_TIMEOUT;
use crate::Result;

/// Prepared statements kept per process (every hot statement, with room).
const STATEMENT_CACHE: usize = 64;

/// The store's writing side: its turn (the sqlx writer pool, for the writes that still go
/// through sqlx) and the synchronous connection of the hot writes.
#[derive(Clone)]
pub struct SqliteWriter {
    turn: SqlitePool,
    conn: Arc<Mutex<rusqlite::Connection>>,
}

impl std::fmt::Debug for SqliteWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteWriter").finish_non_exhaustive()
    }
}

impl SqliteWriter {
    /// Opens the synchronous connection to the database of `options` (already created
    /// and migrated through `turn`). An in-memory database is the one sqlx opened: sqlx
    /// names it and opens it with a shared cache, so a second connection reaches it.
    pub(crate) fn open(
        options: &SqliteConnectOptions,
        turn: SqlitePool,
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
            turn,
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// The writing sqlx connection's pool: writes through sqlx take it in turn with
    /// [`transaction`](Self::transaction).
    pub fn pool(&self) -> &SqlitePool {
        &self.turn
    }

    /// Runs `work` in one `BEGIN IMMEDIATE` transaction, in turn with every other write,
    /// and commits it; rolls it back when `work` fails (nothing is written).
    pub async fn transaction<T>(
        &self,
        work: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let _turn = self.turn.acquire().await?;
        // Uncontended: only the holder of the turn locks it. A panic inside `work` rolled
        // its transaction back while unwinding, so a poisoned lock guards nothing stale.
        let mut conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let out = work(&tx)?;
        tx.commit()?;
        Ok(out)
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
