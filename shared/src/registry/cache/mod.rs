//! The registry's hot copy of the running attempts: one entry per task with the attempt,
//! status, stop reason, heartbeat timeout, last heartbeat (ms, the cache's clock), last
//! PostgreSQL write (ms) and the last progress details (JSON).
//!
//! The cache is a cache only: every method answers `None`/`false` when it cannot, and
//! the registry falls back to PostgreSQL. Two implementations sit behind [`Cache`]:
//! Redis (`redis.rs`, shared by every replica, the production one) and an in-process map
//! (`memory.rs`, for `weft dev`, which runs the whole suite in one process). Both follow
//! the same rules, spelled out once here:
//!
//! - `populate` writes an entry only where none is (a status written meanwhile wins) and
//!   sets its last heartbeat and last write to now; `set_status` overwrites status,
//!   reason, attempt and timeout and keeps the rest.
//! - A heartbeat on a RUNNING entry records the time (and details), refreshes its expiry
//!   and says whether PostgreSQL is due a write; on any other status it only reads.
//! - Every write sets the entry's expiry to [`ttl_ms`]; an expired entry is a miss.

mod memory;
mod redis;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use super::model::AttemptStatus;
use crate::Result;

/// How long a finished attempt's status stays cached (late heartbeats answer STOP from
/// the cache; afterwards from PostgreSQL until the row's retention ends).
pub(crate) const FINISHED_TTL_MS: u64 = 3_600_000;
/// Cache lifetime of an attempt without a heartbeat timeout, refreshed by each heartbeat.
pub(crate) const UNWATCHED_TTL_MS: u64 = 24 * 3_600_000;

/// One heartbeat of a batch, as the cache answered it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cached {
    /// The cache does not know the task: ask PostgreSQL.
    Miss,
    /// The attempt's cached status. For a RUNNING attempt the heartbeat was recorded;
    /// `due` says the PostgreSQL copy is older than the write interval and must be
    /// written now (with `details`, the latest known).
    Known {
        attempt: i32,
        status: AttemptStatus,
        reason: String,
        due: bool,
        details: Option<String>,
    },
}

/// What the cache knows of an attempt's liveness, for the scanner.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Liveness {
    /// The cache's clock now, ms since the Unix epoch.
    pub now_ms: i64,
    /// The last heartbeat per asked task, ms; `None` when the cache has no entry (or an
    /// entry without a heartbeat).
    pub last_ms: Option<i64>,
}

/// An attempt's state to cache.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub task_id: Uuid,
    pub attempt: i32,
    pub status: AttemptStatus,
    pub reason: Option<String>,
    pub timeout_seconds: i64,
}

/// The operations the registry needs from a cache. Object-safe, so [`Cache`] can hold
/// either implementation behind one pointer. Every method is infallible by design: an
/// unavailable cache answers `None` (or does nothing) and the registry uses PostgreSQL.
#[async_trait]
pub(crate) trait Backend: std::fmt::Debug + Send + Sync {
    /// Records one heartbeat per `(task, details JSON)` for the RUNNING attempts known,
    /// and reads every task's cached status, in order.
    async fn beat(
        &self,
        beats: &[(Uuid, Option<String>)],
        write_interval: Duration,
    ) -> Option<Vec<Cached>>;
    /// Caches entries where none is; last heartbeat and last write are now.
    async fn populate(&self, entries: &[Entry], write_interval: Duration);
    /// Writes status changes, overwriting.
    async fn set_status(&self, entries: &[Entry], write_interval: Duration);
    /// The last heartbeat of each task, with the cache's clock now.
    async fn liveness(&self, task_ids: &[Uuid]) -> Option<Vec<Liveness>>;
    /// The status and stop reason of each task, `None` for one not cached. Reads only.
    async fn statuses(&self, task_ids: &[Uuid]) -> Option<Vec<Option<(AttemptStatus, String)>>>;
    /// The last heartbeat (ms) and details of a task.
    async fn peek(&self, task_id: Uuid) -> Option<(Option<i64>, Option<String>)>;
    /// Calls that failed since start.
    fn errors(&self) -> u64;
}

/// A cheap-to-clone handle on the registry's cache (Redis, or in-process memory).
#[derive(Clone, Debug)]
pub struct Cache {
    backend: Arc<dyn Backend>,
}

impl Cache {
    /// A cache on the Redis at `url` whose keys start with `<namespace>:hb:`. Connects
    /// lazily (on first use) and reconnects by itself: an unreachable Redis is not an
    /// error here, only a malformed URL is.
    pub fn new(url: &str, namespace: &str) -> Result<Self> {
        Ok(Self {
            backend: Arc::new(redis::RedisCache::new(url, namespace)?),
        })
    }

    /// A cache in this process's memory, for `weft dev` (one process, no Redis). Same
    /// answers as Redis; entries expire as Redis keys would and are swept, so memory
    /// follows the live attempts. Not shared with other processes, lost on restart.
    pub fn in_memory() -> Self {
        Self {
            backend: Arc::new(memory::MemoryCache::new()),
        }
    }

    /// Calls to the cache that failed since start (always 0 in memory).
    pub fn errors(&self) -> u64 {
        self.backend.errors()
    }

    /// Records one heartbeat per `(task, details JSON)` for the RUNNING attempts the
    /// cache knows, and reads every task's cached status. `None` when the cache is
    /// unavailable.
    pub(crate) async fn beat(
        &self,
        beats: &[(Uuid, Option<String>)],
        write_interval: Duration,
    ) -> Option<Vec<Cached>> {
        self.backend.beat(beats, write_interval).await
    }

    /// Caches entries whose key is absent (never overwrites: a status change written
    /// meanwhile wins over what was read before it). The last heartbeat is set to now.
    pub(crate) async fn populate(&self, entries: &[Entry], write_interval: Duration) {
        if entries.is_empty() {
            return;
        }
        self.backend.populate(entries, write_interval).await;
    }

    /// Writes status changes (overwriting). When the cache cannot take them, their
    /// entries are dropped as soon as it answers again.
    pub(crate) async fn set_status(&self, entries: &[Entry], write_interval: Duration) {
        if entries.is_empty() {
            return;
        }
        self.backend.set_status(entries, write_interval).await;
    }

    /// The last heartbeat the cache recorded for each task, with its clock now.
    pub(crate) async fn liveness(&self, task_ids: &[Uuid]) -> Option<Vec<Liveness>> {
        self.backend.liveness(task_ids).await
    }

    /// The status (and stop reason) cached for each task, `None` for a task not cached;
    /// `None` altogether when the cache cannot answer. Reads only.
    pub(crate) async fn statuses(
        &self,
        task_ids: &[Uuid],
    ) -> Option<Vec<Option<(AttemptStatus, String)>>> {
        self.backend.statuses(task_ids).await
    }

    /// The last heartbeat (ms) and details cached for a task, if any.
    pub(crate) async fn peek(&self, task_id: Uuid) -> Option<(Option<i64>, Option<String>)> {
        self.backend.peek(task_id).await
    }
}

/// How long an entry stays cached: a running attempt outlives its heartbeat timeout by
/// two write intervals, so an entry only expires once its attempt is surely silent for
/// longer than its timeout (the scanner then decides from PostgreSQL alone).
pub(crate) fn ttl_ms(status: AttemptStatus, timeout_seconds: i64, write_interval: Duration) -> u64 {
    match status {
        AttemptStatus::Running if timeout_seconds > 0 => {
            timeout_seconds as u64 * 1_000 + 2 * write_interval.as_millis() as u64 + 60_000
        }
        AttemptStatus::Running => UNWATCHED_TTL_MS,
        _ => FINISHED_TTL_MS,
    }
}
