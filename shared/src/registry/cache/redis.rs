//! The registry's cache in Redis: one hash per task, `<ns>:hb:<task_id>`, with the
//! attempt (`a`), status (`s`), stop reason (`r`), heartbeat timeout in seconds (`t`),
//! last heartbeat (`l`, ms, Redis clock), last PostgreSQL write (`w`, ms) and the last
//! progress details (`d`, JSON).
//!
//! Redis is a cache only: every method answers `None`/`false` when Redis is unreachable,
//! and the registry falls back to PostgreSQL. After a failure the cache is left alone for
//! [`BREAK_FOR`] (a circuit breaker), so a dead Redis costs one timeout, not one per call.
//! Times come from Redis's own clock (`TIME` inside the scripts), so several heartbeat
//! replicas and gateways share one clock for the last-heartbeat comparisons.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Script;
use uuid::Uuid;

use super::{ttl_ms, Backend, Cached, Entry, Liveness, UNWATCHED_TTL_MS};
use crate::registry::model::AttemptStatus;
use crate::{Error, Result};

/// How long Redis is left alone after a failed call.
pub const BREAK_FOR: Duration = Duration::from_secs(1);

/// The registry's cache in Redis (see the module docs for the key layout).
pub(crate) struct RedisCache {
    conn: ConnectionManager,
    prefix: String,
    health: Arc<Health>,
    scripts: Arc<Scripts>,
    /// Tasks whose status change could not be written to Redis: their keys are deleted
    /// as soon as Redis answers again, so a stale RUNNING cannot outlive an outage.
    dirty: Arc<Mutex<HashSet<Uuid>>>,
}

impl std::fmt::Debug for RedisCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCache")
            .field("prefix", &self.prefix)
            .finish()
    }
}

struct Health {
    epoch: Instant,
    /// Milliseconds since `epoch` before which Redis is not tried.
    down_until_ms: AtomicU64,
    /// Logged the outage already (one warning per outage, not one per call).
    warned: AtomicBool,
    errors: AtomicU64,
}

struct Scripts {
    beat: Script,
    populate: Script,
    liveness: Script,
}

impl RedisCache {
    /// A handle on the Redis at `url` whose keys start with `<namespace>:hb:`. Connects
    /// lazily (on first use) and reconnects by itself: an unreachable Redis is not an
    /// error here, only a malformed URL is.
    pub(crate) fn new(url: &str, namespace: &str) -> Result<Self> {
        let client =
            redis::Client::open(url).map_err(|e| Error::Config(format!("WEFT_REDIS_URL: {e}")))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(500)))
            .set_response_timeout(Some(Duration::from_millis(1_000)))
            // The breaker paces retries; the manager should fail fast, not back off.
            .set_number_of_retries(0);
        let conn = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| Error::Config(format!("WEFT_REDIS_URL: {e}")))?;
        Ok(Self {
            conn,
            prefix: format!("{namespace}:hb:"),
            health: Arc::new(Health {
                epoch: Instant::now(),
                down_until_ms: AtomicU64::new(0),
                warned: AtomicBool::new(false),
                errors: AtomicU64::new(0),
            }),
            scripts: Arc::new(Scripts {
                beat: Script::new(BEAT_LUA),
                populate: Script::new(POPULATE_LUA),
                liveness: Script::new(LIVENESS_LUA),
            }),
            dirty: Arc::default(),
        })
    }

    fn key(&self, task_id: Uuid) -> String {
        format!("{}{task_id}", self.prefix)
    }

    fn available(&self) -> bool {
        let now = self.health.epoch.elapsed().as_millis() as u64;
        now >= self.health.down_until_ms.load(Ordering::Relaxed)
    }

    fn failed(&self, what: &str, e: &redis::RedisError) {
        self.health.errors.fetch_add(1, Ordering::Relaxed);
        let until = self.health.epoch.elapsed() + BREAK_FOR;
        self.health
            .down_until_ms
            .store(until.as_millis() as u64, Ordering::Relaxed);
        if !self.health.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, %what, "Redis unavailable; the registry uses PostgreSQL until it answers again");
        }
    }

    fn succeeded(&self) {
        if self.health.warned.swap(false, Ordering::Relaxed) {
            tracing::info!("Redis answers again");
        }
    }

    /// Runs `op` unless the breaker is open; `None` when Redis is (or just went) away.
    /// Deletes the keys left stale by an outage before anything else.
    async fn call<T, F, Fut>(&self, what: &str, op: F) -> Option<T>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        if !self.available() {
            return None;
        }
        if !self.flush_dirty().await {
            return None;
        }
        match op(self.conn.clone()).await {
            Ok(v) => {
                self.succeeded();
                Some(v)
            }
            Err(e) => {
                self.failed(what, &e);
                None
            }
        }
    }

    async fn flush_dirty(&self) -> bool {
        let keys: Vec<String> = {
            let dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
            if dirty.is_empty() {
                return true;
            }
            dirty.iter().map(|id| self.key(*id)).collect()
        };
        let mut conn = self.conn.clone();
        match redis::cmd("DEL").arg(&keys).exec_async(&mut conn).await {
            Ok(()) => {
                let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
                for k in &keys {
                    if let Some(id) = k.strip_prefix(&self.prefix).and_then(|s| s.parse().ok()) {
                        dirty.remove(&id);
                    }
                }
                true
            }
            Err(e) => {
                self.failed("deleting stale keys", &e);
                false
            }
        }
    }
}

#[async_trait]
impl Backend for RedisCache {
    /// Records one heartbeat per `(task, details JSON)` for the RUNNING attempts Redis
    /// knows, and reads every task's cached status. `None` when Redis is unavailable.
    async fn beat(
        &self,
        beats: &[(Uuid, Option<String>)],
        write_interval: Duration,
    ) -> Option<Vec<Cached>> {
        let mut inv = self.scripts.beat.prepare_invoke();
        inv.arg(write_interval.as_millis() as u64)
            .arg(UNWATCHED_TTL_MS);
        for (task_id, details) in beats {
            inv.key(self.key(*task_id));
            inv.arg(details.as_deref().unwrap_or(""));
        }
        let raw: Vec<String> = self
            .call("heartbeat", |mut c| async move {
                inv.invoke_async(&mut c).await
            })
            .await?;
        // [now, then 5 fields per beat: status, reason, attempt, due, details]
        let fields = raw.get(1..).unwrap_or_default();
        let parsed: Vec<Cached> = fields
            .chunks(5)
            .map(|f| match AttemptStatus::parse(&f[0]) {
                None => Cached::Miss,
                Some(status) => Cached::Known {
                    attempt: f[2].parse().unwrap_or(0),
                    status,
                    reason: f[1].clone(),
                    due: f[3] == "1",
                    details: Some(f[4].clone()).filter(|d| !d.is_empty()),
                },
            })
            .collect();
        (parsed.len() == beats.len()).then_some(parsed)
    }

    /// Caches entries whose key is absent (never overwrites: a status change written
    /// meanwhile wins over what was read before it). The last heartbeat is set to now.
    async fn populate(&self, entries: &[Entry], write_interval: Duration) {
        if entries.is_empty() {
            return;
        }
        let mut inv = self.scripts.populate.prepare_invoke();
        for e in entries {
            inv.key(self.key(e.task_id));
            inv.arg(e.status.as_str())
                .arg(e.reason.as_deref().unwrap_or(""))
                .arg(e.attempt)
                .arg(e.timeout_seconds)
                .arg(ttl_ms(e.status, e.timeout_seconds, write_interval));
        }
        let _: Option<()> = self
            .call("caching attempts", |mut c| async move {
                inv.invoke_async(&mut c).await
            })
            .await;
    }

    /// Writes status changes (overwriting). When Redis cannot take them, their keys are
    /// remembered and deleted once it answers again.
    async fn set_status(&self, entries: &[Entry], write_interval: Duration) {
        if entries.is_empty() {
            return;
        }
        let mut pipe = redis::pipe();
        for e in entries {
            let key = self.key(e.task_id);
            pipe.cmd("HSET")
                .arg(&key)
                .arg("s")
                .arg(e.status.as_str())
                .arg("r")
                .arg(e.reason.as_deref().unwrap_or(""))
                .arg("a")
                .arg(e.attempt)
                .arg("t")
                .arg(e.timeout_seconds)
                .ignore();
            pipe.cmd("PEXPIRE")
                .arg(&key)
                .arg(ttl_ms(e.status, e.timeout_seconds, write_interval))
                .ignore();
        }
        let done = self
            .call("writing statuses", |mut c| async move {
                pipe.exec_async(&mut c).await
            })
            .await;
        if done.is_none() {
            let mut dirty = self.dirty.lock().unwrap_or_else(|p| p.into_inner());
            dirty.extend(entries.iter().map(|e| e.task_id));
        }
    }

    /// The last heartbeat Redis recorded for each task, with Redis's clock now.
    async fn liveness(&self, task_ids: &[Uuid]) -> Option<Vec<Liveness>> {
        let mut inv = self.scripts.liveness.prepare_invoke();
        for id in task_ids {
            inv.key(self.key(*id));
        }
        let raw: Vec<String> = self
            .call("reading last heartbeats", |mut c| async move {
                inv.invoke_async(&mut c).await
            })
            .await?;
        let now_ms: i64 = raw.first()?.parse().ok()?;
        let lives: Vec<Liveness> = raw[1..]
            .iter()
            .map(|l| Liveness {
                now_ms,
                last_ms: l.parse().ok(),
            })
            .collect();
        (lives.len() == task_ids.len()).then_some(lives)
    }

    /// The status (and stop reason) Redis holds for each task, `None` for a task it does
    /// not know; `None` altogether when Redis cannot answer. Reads only.
    async fn statuses(&self, task_ids: &[Uuid]) -> Option<Vec<Option<(AttemptStatus, String)>>> {
        let mut pipe = redis::pipe();
        for id in task_ids {
            pipe.cmd("HMGET").arg(self.key(*id)).arg("s").arg("r");
        }
        let raw: Vec<(Option<String>, Option<String>)> = self
            .call("reading statuses", |mut c| async move {
                pipe.query_async(&mut c).await
            })
            .await?;
        Some(
            raw.into_iter()
                .map(|(s, r)| Some((AttemptStatus::parse(&s?)?, r.unwrap_or_default())))
                .collect(),
        )
    }

    /// The last heartbeat (ms) and details Redis holds for a task, if any.
    async fn peek(&self, task_id: Uuid) -> Option<(Option<i64>, Option<String>)> {
        let key = self.key(task_id);
        let (l, d): (Option<i64>, Option<String>) = self
            .call("reading an attempt", |mut c| async move {
                redis::cmd("HMGET")
                    .arg(key)
                    .arg("l")
                    .arg("d")
                    .query_async(&mut c)
                    .await
            })
            .await?;
        Some((l, d))
    }

    /// Calls to Redis that failed since start.
    fn errors(&self) -> u64 {
        self.health.errors.load(Ordering::Relaxed)
    }
}

/// KEYS: one per beat. ARGV[1]: write interval (ms); ARGV[2]: TTL of an unwatched
/// attempt (ms); ARGV[2+i]: details JSON of beat i, or ''. Returns
/// `[now, {status, reason, attempt, due, details} per key]` (status '' on a miss).
const BEAT_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local unwatched_ttl = tonumber(ARGV[2])
local out = {tostring(now)}
for i, key in ipairs(KEYS) do
  local v = redis.call('HMGET', key, 's', 'r', 'a', 'w', 't', 'd')
  local status = v[1]
  if not status then
    for _ = 1, 5 do table.insert(out, '') end
  elseif status == 'RUNNING' then
    local details = ARGV[2 + i]
    if details ~= '' then
      redis.call('HSET', key, 'l', now, 'd', details)
    else
      redis.call('HSET', key, 'l', now)
      details = v[6] or ''
    end
    local timeout = tonumber(v[5]) or 0
    local ttl = unwatched_ttl
    if timeout > 0 then ttl = timeout * 1000 + 2 * interval + 60000 end
    redis.call('PEXPIRE', key, ttl)
    local due = '0'
    if now - (tonumber(v[4]) or 0) >= interval then
      redis.call('HSET', key, 'w', now)
      due = '1'
    else
      details = ''
    end
    table.insert(out, status); table.insert(out, '')
    table.insert(out, v[3] or '0'); table.insert(out, due); table.insert(out, details)
  else
    table.insert(out, status); table.insert(out, v[2] or '')
    table.insert(out, v[3] or '0'); table.insert(out, '0'); table.insert(out, '')
  end
end
return out
"#;

/// KEYS: one per entry; ARGV: 5 per entry (status, reason, attempt, timeout s, TTL ms).
/// Writes an entry only where its key is absent; its last heartbeat and last write are now.
const POPULATE_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i, key in ipairs(KEYS) do
  local b = (i - 1) * 5
  if redis.call('EXISTS', key) == 0 then
    redis.call('HSET', key, 's', ARGV[b + 1], 'r', ARGV[b + 2], 'a', ARGV[b + 3],
      't', ARGV[b + 4], 'l', now, 'w', now)
    redis.call('PEXPIRE', key, ARGV[b + 5])
  end
end
return 'OK'
"#;

/// KEYS: tasks. Returns `[now, last heartbeat ms or '' per key]`.
const LIVENESS_LUA: &str = r#"
local t = redis.call('TIME')
local out = {tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))}
for _, key in ipairs(KEYS) do
  local l = redis.call('HGET', key, 'l')
  table.insert(out, l or '')
end
return out
"#;
