//! The crate's error type.

/// Everything that can go wrong in the shared plumbing.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The broker could not be reached or refused an operation. Retrying can help.
    #[error("bus: {0}")]
    Bus(String),
    /// The broker did not confirm a publish (nack). Retrying can help.
    #[error("bus: publish to {exchange}/{routing_key} was not confirmed")]
    NotConfirmed {
        /// Exchange of the publish.
        exchange: String,
        /// Routing key of the publish.
        routing_key: String,
    },
    /// A request sent with `Bus::call` got no reply in time: the responder is down or
    /// slow, or the request was routed nowhere. Retrying can help.
    #[error("bus: no reply from {exchange}/{routing_key} within {timeout:?}")]
    NoReply {
        /// Exchange of the request.
        exchange: String,
        /// Routing key of the request.
        routing_key: String,
        /// How long the caller waited.
        timeout: std::time::Duration,
    },
    /// A database operation failed. Retrying can help when the database was unreachable.
    #[error("store: {0}")]
    Store(#[from] sqlx::Error),
    /// A write on `weft dev`'s synchronous SQLite connection failed (see
    /// `store::sqlite::writer`).
    #[error("store: {0}")]
    Embedded(#[from] rusqlite::Error),
    /// Applying the schema migrations failed. Retrying does not help.
    #[error("store migration: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Another writer changed the run first (optimistic version check). Reload and retry.
    #[error("run {run_id} was changed concurrently (expected version {expected})")]
    VersionConflict {
        /// The run whose version moved.
        run_id: uuid::Uuid,
        /// The version the writer started from.
        expected: i64,
    },
    /// A message or document did not decode. Retrying does not help.
    #[error("decode: {0}")]
    Decode(String),
    /// A configuration value is missing or malformed. Retrying does not help.
    #[error("config: {0}")]
    Config(String),
    /// The operation was abandoned because shutdown was requested.
    #[error("shutting down")]
    ShuttingDown,
    /// A socket or file operation failed (e.g. binding a listen address). Retrying can help
    /// when the cause is transient (address still in use); not when it is a permission error.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    /// Whether every database connection stayed busy for the pool's whole wait: the
    /// process is saturated, and the same request can succeed a moment later.
    pub fn is_pool_exhausted(&self) -> bool {
        matches!(self, Error::Store(sqlx::Error::PoolTimedOut))
    }

    /// Whether another writer got there first: a run's version moved, or a row the
    /// write inserts exists already (a unique violation; PostgreSQL's exclusion
    /// violation too). Reloading and trying again can succeed.
    pub fn is_write_conflict(&self) -> bool {
        match self {
            Error::VersionConflict { .. } => true,
            Error::Store(sqlx::Error::Database(db)) => {
                db.is_unique_violation() || db.code().as_deref() == Some("23P01")
            }
            Error::Embedded(rusqlite::Error::SqliteFailure(e, _)) => matches!(
                e.extended_code,
                rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                    | rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
            ),
            _ => false,
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Decode(e.to_string())
    }
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
