//! Reads that may lag, on a streaming replica (`WEFT_DATABASE_READ_URL`).
//!
//! Search, statistics and pages of a run's history tolerate a replica's lag (they show
//! the state of a moment ago); everything else — the decider's loads, the registry, a
//! run's current state, which a client reads right after changing it — stays on the
//! primary. When the replica cannot be reached (down, starting, or a query cancelled by
//! a recovery conflict), the read goes to the primary instead: a replica is an offload,
//! never a new way to fail.

use std::future::Future;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use super::PgStore;
use crate::{Error, Result};

/// How long a read waits for a replica connection before it reads the primary.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// A pool on the replica at `url`, connected lazily: a replica that is down when the
/// process starts does not hold the process up.
pub(super) fn pool(url: &str, max_connections: u32) -> Result<PgPool> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(Error::Config(
            "WEFT_DATABASE_READ_URL: a PostgreSQL URL (postgres://…) is expected".into(),
        ));
    }
    let options: PgConnectOptions = url
        .parse()
        .map_err(|e| Error::Config(format!("WEFT_DATABASE_READ_URL: {e}")))?;
    let options = super::planned(options).options([("default_transaction_read_only", "on")]);
    Ok(PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_lazy_with(options))
}

impl PgStore {
    /// Runs `read` on the replica when there is one, on the primary otherwise or when
    /// the replica cannot answer.
    pub(super) async fn lagging_read<T, F, Fut>(&self, read: F) -> Result<T>
    where
        F: Fn(PgPool) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.replica_read_if(read, |_| true).await
    }

    /// Runs `read` on the replica when there is one and keeps its answer if `current`
    /// accepts it (the replica may be behind what the caller already knows); on the
    /// primary otherwise, or when the replica cannot answer.
    pub(super) async fn replica_read_if<T, F, Fut>(
        &self,
        read: F,
        current: impl Fn(&T) -> bool,
    ) -> Result<T>
    where
        F: Fn(PgPool) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        if let Some(replica) = &self.replica {
            match read(replica.clone()).await {
                Ok(answer) if current(&answer) => return Ok(answer),
                Ok(_) => {} // behind: the primary has what the caller knows
                Err(Error::Store(e)) if unavailable(&e) => {
                    tracing::warn!(error = %e, "the read replica did not answer; reading the primary");
                }
                Err(e) => return Err(e),
            }
        }
        read(self.pool.clone()).await
    }
}

/// Whether `e` says the replica could not answer (rather than that the read is wrong):
/// no connection, the pool's wait, a server shutting down or starting (class 57P), a
/// connection exception (class 08), or a query cancelled by a recovery conflict
/// (40001 on a hot standby).
fn unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("08") || c.starts_with("57P") || c == "40001"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_replicas_fall_back_and_wrong_reads_do_not() {
        assert!(unavailable(&sqlx::Error::PoolTimedOut));
        assert!(unavailable(&sqlx::Error::Io(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused
        ))));
        assert!(!unavailable(&sqlx::Error::RowNotFound));
        assert!(!unavailable(&sqlx::Error::ColumnNotFound("x".into())));
    }

    #[test]
    fn a_url_that_is_not_postgresql_names_the_variable() {
        for url in [
            "mysql://db/weft",
            "sqlite:weft.db",
            "postgres://host:notaport/db",
        ] {
            let e = pool(url, 1).unwrap_err();
            assert!(
                e.to_string().contains("WEFT_DATABASE_READ_URL"),
                "{url}: {e}"
            );
        }
    }
}
