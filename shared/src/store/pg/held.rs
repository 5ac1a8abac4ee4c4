//! Pooled connections a hot-path writer keeps between its statements (docs/decider.md,
//! "Held connections").
//!
//! sqlx's pool pings a connection when it is taken (`test_before_acquire`) and again
//! when it is given back: two round trips to PostgreSQL around every statement, each
//! waking its backend. For the statements every run makes — the decider's commit, the
//! gateway's start — that tripled the round trips, and the ping before the commit sat on
//! a sequential run's path four times. A writer here takes a connection it held before
//! (no ping) or one from the pool (sqlx's ping), and keeps it after the statement unless
//! the statement failed for another reason than the database refusing it (a broken
//! connection goes back to the pool, whose ping on release closes it). A connection held
//! idle longer than [`PING_AFTER_IDLE`] is pinged before use, as the pool would: after a
//! quiet spell the server may have gone away.

use std::ops::{Deref, DerefMut};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres};

/// A held connection idle this long is pinged before its next statement.
pub(crate) const PING_AFTER_IDLE: Duration = Duration::from_secs(5);

/// The held connections of one store, one set per kind of hot statement.
#[derive(Debug)]
pub(crate) struct HeldSets {
    /// The decider's commits: one a committer task (`WEFT_DECIDER_WRITERS`, 1 by
    /// default, a few at most).
    pub(crate) commits: Held,
    /// The starts: half the pool, so the reads always have the other half.
    pub(crate) starts: Held,
    /// The claims: the heartbeat service writes one group at a time.
    pub(crate) claims: Held,
}

impl HeldSets {
    /// Sets over `pool`.
    pub(crate) fn over(pool: &PgPool) -> Self {
        let max_connections = pool.options().get_max_connections() as usize;
        Self {
            commits: Held::new(pool.clone(), 4),
            starts: Held::new(pool.clone(), (max_connections / 2).max(1)),
            claims: Held::new(pool.clone(), 2),
        }
    }
}

/// Connections held for one kind of statement, taken from (and counted in) `pool`.
#[derive(Debug)]
pub(crate) struct Held {
    pool: PgPool,
    /// Idle held connections, with when each was last used; the most recent last.
    idle: Mutex<Vec<(PoolConnection<Postgres>, Instant)>>,
    /// Held at most; more taken at once go back to the pool after their statement.
    max_held: usize,
    /// A held connection idle this long is pinged before use ([`PING_AFTER_IDLE`]).
    ping_after: Duration,
}

impl Held {
    /// Holds up to `max_held` of `pool`'s connections between statements.
    pub(crate) fn new(pool: PgPool, max_held: usize) -> Self {
        Self {
            pool,
            idle: Mutex::new(Vec::new()),
            max_held,
            ping_after: PING_AFTER_IDLE,
        }
    }

    /// A connection for one statement: a held one (pinged first if it sat idle over
    /// [`PING_AFTER_IDLE`]) or, when none is idle, one from the pool.
    pub(crate) async fn take(&self) -> Result<HeldConnection<'_>, sqlx::Error> {
        while let Some((mut conn, since)) = self.pop() {
            if since.elapsed() < self.ping_after || conn.ping().await.is_ok() {
                return Ok(self.hand_out(conn));
            }
            // Broken while idle: back to the pool, whose ping on release closes it.
        }
        let conn = self.pool.acquire().await?;
        Ok(self.hand_out(conn))
    }

    fn hand_out(&self, conn: PoolConnection<Postgres>) -> HeldConnection<'_> {
        HeldConnection { conn, home: self }
    }

    fn pop(&self) -> Option<(PoolConnection<Postgres>, Instant)> {
        self.lock().pop()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(PoolConnection<Postgres>, Instant)>> {
        // A poisoned lock only means a panic elsewhere; the list itself stays usable.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A connection taken from [`Held`]; given back to the pool when dropped, unless
/// [`HeldConnection::keep_if_sound`] holds it for the next statement.
pub(crate) struct HeldConnection<'a> {
    conn: PoolConnection<Postgres>,
    home: &'a Held,
}

impl HeldConnection<'_> {
    /// Holds the connection for the next statement when `outcome` says it is sound: a
    /// success, or an error the database answered with that ends the statement only (the
    /// protocol is in step). Any other error — I/O, a protocol error, a `FATAL` one such
    /// as a terminated backend's, a cancelled statement — gives it back to the pool
    /// instead, whose ping on release closes it.
    pub(crate) fn keep_if_sound<T>(self, outcome: &Result<T, sqlx::Error>) {
        self.keep_unless_broken(outcome.as_ref().err());
    }

    /// [`HeldConnection::keep_if_sound`] for a store operation's outcome: an error that
    /// is not the database's (decoding a row, say) left the connection in step.
    pub(crate) fn keep_if_sound_after<T>(self, outcome: &crate::Result<T>) {
        let error = match outcome {
            Err(crate::Error::Store(e)) => Some(e),
            _ => None,
        };
        self.keep_unless_broken(error);
    }

    fn keep_unless_broken(self, error: Option<&sqlx::Error>) {
        if !is_sound_error(error) {
            return;
        }
        let mut idle = self.home.lock();
        if idle.len() < self.home.max_held {
            idle.push((self.conn, Instant::now()));
        }
        // Otherwise dropped here: back to the pool.
    }
}

/// Whether a connection is still usable after a statement ended with `outcome`.
#[cfg(test)]
fn is_sound<T>(outcome: &Result<T, sqlx::Error>) -> bool {
    is_sound_error(outcome.as_ref().err())
}

/// Whether a connection is still usable after a statement that failed with `error`
/// (none: it succeeded).
fn is_sound_error(error: Option<&sqlx::Error>) -> bool {
    use sqlx::postgres::{PgDatabaseError, PgSeverity};
    match error {
        None => true,
        Some(sqlx::Error::Database(db)) => db
            .try_downcast_ref::<PgDatabaseError>()
            .is_some_and(|e| !matches!(e.severity(), PgSeverity::Fatal | PgSeverity::Panic)),
        Some(_) => false,
    }
}

impl Deref for HeldConnection<'_> {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.conn
    }
}

impl DerefMut for HeldConnection<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.conn
    }
}

#[cfg(test)]
mod tests {
    use sqlx::postgres::PgPoolOptions;

    use super::*;
    use crate::testing::TestDb;

    /// A test database, a pool on it, and `Held` over the pool keeping up to `max_held`.
    async fn held_on(name: &str, max_held: usize) -> (TestDb, PgPool, Held) {
        let db = TestDb::create(name).await;
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect(&db.url)
            .await
            .expect("the test database");
        let held = Held::new(pool.clone(), max_held);
        (db, pool, held)
    }

    async fn backend(conn: &mut PgConnection) -> Result<i32, sqlx::Error> {
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(conn)
            .await
    }

    /// Takes a connection, asks its backend's pid, keeps it if sound.
    async fn statement_on(held: &Held) -> Result<i32, sqlx::Error> {
        let mut conn = held.take().await?;
        let pid = backend(&mut conn).await;
        conn.keep_if_sound(&pid);
        pid
    }

    async fn terminate(pool: &PgPool, pid: i32) {
        let done: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .fetch_one(pool)
            .await
            .unwrap();
        assert!(done, "backend {pid} terminated");
        // The backend is gone once pg_stat_activity no longer lists it.
        for _ in 0..200 {
            let alive: bool =
                sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)")
                    .bind(pid)
                    .fetch_one(pool)
                    .await
                    .unwrap();
            if !alive {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("backend {pid} still alive");
    }

    #[tokio::test]
    async fn a_kept_connection_serves_the_next_statement_and_an_error_of_the_database_keeps_it() {
        let (_db, _pool, held) = held_on("held_kept", 2).await;
        let first = statement_on(&held).await.unwrap();
        assert_eq!(
            statement_on(&held).await.unwrap(),
            first,
            "the same backend"
        );

        let mut conn = held.take().await.unwrap();
        let refused = sqlx::query("SELECT 1 / 0").execute(&mut *conn).await;
        assert!(
            matches!(refused, Err(sqlx::Error::Database(_))),
            "{refused:?}"
        );
        conn.keep_if_sound(&refused);
        assert_eq!(
            statement_on(&held).await.unwrap(),
            first,
            "a refused statement leaves the connection in step: still held"
        );
    }

    #[tokio::test]
    async fn a_connection_that_broke_goes_and_the_next_statement_gets_a_sound_one() {
        let (_db, pool, held) = held_on("held_broken", 2).await;
        let first = statement_on(&held).await.unwrap();
        terminate(&pool, first).await;

        // Used within PING_AFTER_IDLE: not pinged, so its statement meets the break (the
        // backend's FATAL "terminating connection", or the closed socket).
        let broken = statement_on(&held).await;
        assert!(!is_sound(&broken), "{broken:?}");
        let next = statement_on(&held).await.expect("a sound connection");
        assert_ne!(next, first, "the broken one was not kept");
    }

    #[tokio::test]
    async fn a_held_connection_that_broke_while_idle_is_found_by_its_ping() {
        let (_db, pool, mut held) = held_on("held_idle", 2).await;
        held.ping_after = Duration::ZERO;
        let first = statement_on(&held).await.unwrap();
        terminate(&pool, first).await;

        let next = statement_on(&held)
            .await
            .expect("the ping finds the break before the statement");
        assert_ne!(next, first);
    }

    #[tokio::test]
    async fn no_more_than_max_held_are_kept() {
        let (_db, _pool, held) = held_on("held_max", 1).await;
        let mut a = held.take().await.unwrap();
        let mut b = held.take().await.unwrap();
        let (pa, pb) = (
            backend(&mut a).await.unwrap(),
            backend(&mut b).await.unwrap(),
        );
        assert_ne!(pa, pb);
        a.keep_if_sound(&Ok::<(), sqlx::Error>(()));
        b.keep_if_sound(&Ok::<(), sqlx::Error>(()));
        assert_eq!(held.lock().len(), 1, "one held, the other back in the pool");
        assert_eq!(statement_on(&held).await.unwrap(), pa);
    }
}
