//! The flowchart cache in Redis: `<namespace>:graph:<run_id>:<version>` → the graph's
//! JSON, set with an expiry of [`TTL`].
//!
//! Redis is a cache only: every failure answers "miss" and the caller computes the graph
//! from PostgreSQL. After a failure Redis is left alone for [`BREAK_FOR`], so a dead
//! Redis costs one timeout per second, not one per request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use uuid::Uuid;

use super::{Backend, TTL};
use crate::{Error, Result};

/// How long Redis is left alone after a failed call.
pub const BREAK_FOR: Duration = Duration::from_secs(1);

/// The graph cache in Redis.
pub(crate) struct RedisGraphCache {
    conn: ConnectionManager,
    prefix: String,
    epoch: Instant,
    /// Milliseconds since `epoch` before which Redis is not tried.
    down_until_ms: Arc<AtomicU64>,
}

impl std::fmt::Debug for RedisGraphCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisGraphCache")
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl RedisGraphCache {
    /// A cache on the Redis at `url` with keys under `<namespace>:graph:`. Connects
    /// lazily; only a malformed URL is an error.
    pub(crate) fn new(url: &str, namespace: &str) -> Result<Self> {
        let client =
            redis::Client::open(url).map_err(|e| Error::Config(format!("WEFT_REDIS_URL: {e}")))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(500)))
            .set_response_timeout(Some(Duration::from_millis(500)))
            .set_number_of_retries(0);
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| Error::Config(format!("WEFT_REDIS_URL: {e}")))?;
        Ok(Self {
            conn,
            prefix: format!("{namespace}:graph:"),
            epoch: Instant::now(),
            down_until_ms: Arc::default(),
        })
    }

    async fn call<T, F, Fut>(&self, op: F) -> Option<T>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let now = self.epoch.elapsed().as_millis() as u64;
        if now < self.down_until_ms.load(Ordering::Relaxed) {
            return None;
        }
        match op(self.conn.clone()).await {
            Ok(v) => Some(v),
            Err(e) => {
                let until = (self.epoch.elapsed() + BREAK_FOR).as_millis() as u64;
                if self.down_until_ms.swap(until, Ordering::Relaxed) <= now {
                    tracing::warn!(error = %e, "Redis unavailable; graphs come from PostgreSQL");
                }
                None
            }
        }
    }
}

#[async_trait]
impl Backend for RedisGraphCache {
    /// The key of a run's graph at a version.
    fn key(&self, run_id: Uuid, version: i64) -> String {
        format!("{}{run_id}:{version}", self.prefix)
    }

    /// The cached graph JSON, or `None` (absent, or Redis unavailable).
    async fn get(&self, run_id: Uuid, version: i64) -> Option<Vec<u8>> {
        let key = self.key(run_id, version);
        self.call(|mut c| async move {
            redis::cmd("GET")
                .arg(key)
                .query_async::<Option<Vec<u8>>>(&mut c)
                .await
        })
        .await
        .flatten()
    }

    /// Stores a graph's JSON; a failure is only logged (the next read recomputes).
    async fn put(&self, run_id: Uuid, version: i64, json: &[u8]) {
        let key = self.key(run_id, version);
        let json = json.to_vec();
        let _: Option<()> = self
            .call(|mut c| async move {
                redis::cmd("SET")
                    .arg(key)
                    .arg(json)
                    .arg("EX")
                    .arg(TTL.as_secs())
                    .exec_async(&mut c)
                    .await
            })
            .await;
    }
}
