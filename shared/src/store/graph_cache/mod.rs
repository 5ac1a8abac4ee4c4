//! The flowchart cache: a run's rendered graph JSON by `(run_id, version)`. A run's
//! version grows with every event the decider commits, so an entry is never stale: a
//! newer state has another key, and old keys expire on their own after [`TTL`].
//!
//! A cache only: every failure answers "miss" and the caller computes the graph from
//! PostgreSQL. Two implementations sit behind [`GraphCache`]: Redis (`redis.rs`, shared by
//! the gateways) and an in-process map bounded in entries and bytes (`memory.rs`, for
//! `weft dev`).

mod memory;
mod redis;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use crate::Result;

pub use self::redis::BREAK_FOR;

/// Lifetime of an entry: a finished run's graph is read again; a running run's old
/// versions are dead weight, which the expiry clears.
pub const TTL: Duration = Duration::from_secs(3_600);

/// What the gateway needs from a graph cache; object-safe, so [`GraphCache`] can hold
/// either implementation. Infallible by design: a failure is a miss.
#[async_trait]
pub(crate) trait Backend: std::fmt::Debug + Send + Sync {
    /// The key a run's graph at a version is stored under.
    fn key(&self, run_id: Uuid, version: i64) -> String;
    /// The cached graph JSON, or `None` (absent, expired, or the cache unavailable).
    async fn get(&self, run_id: Uuid, version: i64) -> Option<Vec<u8>>;
    /// Stores a graph's JSON for [`TTL`], replacing any entry under that key.
    async fn put(&self, run_id: Uuid, version: i64, json: &[u8]);
}

/// A cheap-to-clone handle on the graph cache (Redis, or in-process memory).
#[derive(Clone, Debug)]
pub struct GraphCache {
    backend: Arc<dyn Backend>,
}

impl GraphCache {
    /// A cache on the Redis at `url` with keys under `<namespace>:graph:`. Connects
    /// lazily; only a malformed URL is an error.
    pub fn new(url: &str, namespace: &str) -> Result<Self> {
        Ok(Self {
            backend: Arc::new(redis::RedisGraphCache::new(url, namespace)?),
        })
    }

    /// A cache in this process's memory, for `weft dev`: entries live [`TTL`] like the
    /// Redis keys, and at most 1,024 entries and 64 MiB of JSON are kept (the least
    /// recently used go first). Not shared with other processes, lost on restart.
    pub fn in_memory() -> Self {
        Self {
            backend: Arc::new(memory::MemoryGraphCache::new(
                memory::MAX_ENTRIES,
                memory::MAX_BYTES,
            )),
        }
    }

    /// The key of a run's graph at a version (in Redis, the key itself).
    pub fn key(&self, run_id: Uuid, version: i64) -> String {
        self.backend.key(run_id, version)
    }

    /// The cached graph JSON, or `None` (absent, or the cache unavailable).
    pub async fn get(&self, run_id: Uuid, version: i64) -> Option<Vec<u8>> {
        self.backend.get(run_id, version).await
    }

    /// Stores a graph's JSON; a failure is only logged (the next read recomputes).
    pub async fn put(&self, run_id: Uuid, version: i64, json: &[u8]) {
        self.backend.put(run_id, version, json).await;
    }
}
