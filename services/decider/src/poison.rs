//! Telling a failure that retrying can mend (the database or the broker away) from one
//! that repeats on every attempt (a value the database refuses, a history that does
//! not fold, a panic), and counting the attempts of the second kind, so that no command
//! is retried forever (docs/decider.md, "Poison commands").

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use uuid::Uuid;
use weft::Error;

/// Attempts a command gets when it fails the same way each time; the last failure sets
/// it aside.
pub const ATTEMPTS: u32 = 3;
/// How long the shard waits before the attempt after the `n`th failure (n ≥ 1): 250 ms,
/// 1 s, then 4 s for as long as the store refuses (see [`Failure::Refused`]).
pub fn back_off(failures: u32) -> Duration {
    Duration::from_millis(250 * 4u64.pow(failures.saturating_sub(1).min(2)))
}
/// Message ids remembered at most; beyond it the counts start over (a command then
/// gets a few more attempts, never unboundedly many in a row).
const REMEMBERED: usize = 4_096;

/// Why a batch failed.
#[derive(Debug)]
pub enum Failure {
    /// Retrying can mend it: the database or the broker was unreachable or busy, the
    /// process is shutting down. Nothing is counted.
    Transient(Error),
    /// The database refused the write (a data exception, an integrity violation, a
    /// missing grant): the same command fails again — but so may every command, when a
    /// constraint or a permission changed under the decider. A command is set aside for
    /// it only once its run could be failed (that write went in): docs/decider.md.
    Refused(String),
    /// It happens again on every attempt and is the command's or its run's own: a bug,
    /// a history that does not fold, a panic (its message).
    Persistent(String),
}

impl Failure {
    /// The failure `e` is.
    pub fn of(e: Error) -> Self {
        if is_transient(&e) {
            Failure::Transient(e)
        } else if matches!(
            e,
            Error::Store(sqlx::Error::Database(_))
                | Error::Embedded(rusqlite::Error::SqliteFailure(..))
        ) {
            Failure::Refused(e.to_string())
        } else {
            Failure::Persistent(e.to_string())
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Transient(e) => write!(f, "{e}"),
            Failure::Refused(why) | Failure::Persistent(why) => f.write_str(why),
        }
    }
}

/// Whether retrying `e` later can succeed.
fn is_transient(e: &Error) -> bool {
    match e {
        Error::Bus(_)
        | Error::NotConfirmed { .. }
        | Error::NoReply { .. }
        | Error::Io(_)
        | Error::ShuttingDown => true,
        Error::Store(e) => is_transient_sql(e),
        Error::Embedded(e) => is_transient_sqlite(e),
        // A conflict that outlived the engine's own retries, a message or history that
        // does not decode, a configuration or schema error: the same next time.
        Error::VersionConflict { .. } | Error::Decode(_) | Error::Config(_) | Error::Migrate(_) => {
            false
        }
    }
}

/// PostgreSQL's refusals by SQLSTATE class: connection (08), rollback for
/// serialization or deadlock (40), resources (53), operator intervention such as a
/// shutdown or a statement timeout (57), system errors (58) can pass; data exceptions
/// (22), integrity violations (23), syntax or access (42) and the rest repeat.
fn is_transient_sql(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            ["08", "40", "53", "57", "58"]
                .iter()
                .any(|class| code.starts_with(class))
        }),
        sqlx::Error::RowNotFound
        | sqlx::Error::TypeNotFound { .. }
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::Encode(_) => false,
        // I/O, TLS, protocol, pool timeouts and closures, a crashed worker thread.
        _ => true,
    }
}

/// SQLite's: busy or locked, I/O, full or out-of-memory can pass; a constraint, a value
/// too big or of the wrong type repeats.
fn is_transient_sqlite(e: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode;
    match e {
        rusqlite::Error::SqliteFailure(failure, _) => matches!(
            failure.code,
            ErrorCode::DatabaseBusy
                | ErrorCode::DatabaseLocked
                | ErrorCode::SystemIoFailure
                | ErrorCode::OutOfMemory
                | ErrorCode::DiskFull
                | ErrorCode::CannotOpen
        ),
        _ => false,
    }
}

/// How often each command failed the same way, by message id (one shard's).
#[derive(Debug, Default)]
pub struct Attempts {
    failures: Mutex<HashMap<Uuid, u32>>,
}

impl Attempts {
    /// Counts one more failure of the message `id`; returns how many it has had.
    pub fn failed(&self, id: Uuid) -> u32 {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= REMEMBERED && !failures.contains_key(&id) {
            failures.clear();
        }
        let n = failures.entry(id).or_default();
        *n += 1;
        *n
    }

    /// Forgets the message `id` (it succeeded or was set aside).
    pub fn forget(&self, id: Uuid) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

/// Runs `fut`, turning a panic into a failure naming it.
pub async fn guarded<Fut: Future>(fut: Fut) -> Result<Fut::Output, String> {
    weft::bus::guarded(fut)
        .await
        .map_err(|panic| format!("the decider panicked: {panic}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_store_is_transient_and_a_refused_value_is_not() {
        let away = Error::Store(sqlx::Error::PoolTimedOut);
        assert!(matches!(Failure::of(away), Failure::Transient(_)));
        let io = Error::Store(sqlx::Error::Io(std::io::Error::other("reset")));
        assert!(matches!(Failure::of(io), Failure::Transient(_)));
        let busy = Error::Embedded(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        ));
        assert!(matches!(Failure::of(busy), Failure::Transient(_)));
        let constraint = Error::Embedded(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT),
            None,
        ));
        assert!(matches!(Failure::of(constraint), Failure::Refused(_)));
        let fold = Error::Decode("event 4 of run x names unknown task y".into());
        match Failure::of(fold) {
            Failure::Persistent(why) => assert!(why.contains("unknown task"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            Failure::of(Error::ShuttingDown),
            Failure::Transient(_)
        ));
    }

    #[test]
    fn failures_are_counted_per_message_until_forgotten() {
        let attempts = Attempts::default();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        assert_eq!(attempts.failed(a), 1);
        assert_eq!(attempts.failed(a), 2);
        assert_eq!(attempts.failed(b), 1);
        attempts.forget(a);
        assert_eq!(attempts.failed(a), 1);
    }

    #[test]
    fn the_back_off_grows_and_stays_bounded() {
        assert_eq!(back_off(1), Duration::from_millis(250));
        assert_eq!(back_off(2), Duration::from_millis(1_000));
        assert_eq!(back_off(50), Duration::from_millis(4_000));
    }

    #[tokio::test]
    async fn a_panic_becomes_its_message() {
        let caught = guarded(async { panic!("boom at {}", 7) }).await;
        assert_eq!(caught.unwrap_err(), "the decider panicked: boom at 7");
        assert_eq!(guarded(async { 3 }).await, Ok(3));
    }
}
