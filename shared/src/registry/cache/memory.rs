//! The registry's cache in this process's memory, for `weft dev`: a map from task to
//! the same fields the Redis hash holds, with the same rules as the Lua scripts in
//! `redis.rs` (each operation below names the script or command it mirrors).
//!
//! - Clock: the wall clock in ms since the Unix epoch, like Redis's `TIME`, because the
//!   registry compares the last heartbeat with PostgreSQL's `last_heartbeat_at`.
//! - Expiry: every write sets an absolute deadline, as `PEXPIRE` does; an entry past it
//!   is absent to every operation (removed when met) and a sweep at most every
//!   [`SWEEP_EVERY_MS`] drops the ones nobody asks for, so memory follows the live
//!   attempts instead of growing with every attempt ever seen.
//! - Availability: memory always answers, so nothing is ever left for later (Redis's
//!   dirty set of status changes it could not take has no counterpart here).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use super::{ttl_ms, Backend, Cached, Entry, Liveness};
use crate::registry::model::AttemptStatus;

/// The most time between two sweeps of expired entries (ms). A sweep walks every entry
/// under the lock, so it is paced rather than run on each call.
const SWEEP_EVERY_MS: i64 = 10_000;

/// The registry's cache in memory. Operations hold one lock for their whole batch, as a
/// Lua script runs atomically in Redis.
#[derive(Debug, Default)]
pub(crate) struct MemoryCache {
    state: Mutex<State>,
}

impl MemoryCache {
    /// An empty cache.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The state, swept if a sweep is due, and the clock's now.
    fn state(&self) -> (MutexGuard<'_, State>, i64) {
        let now = now_ms();
        // A panic cannot leave an entry half-written (fields are plain values), so a
        // poisoned lock's state is still sound.
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.sweep_if_due(now);
        (state, now)
    }
}

#[async_trait]
impl Backend for MemoryCache {
    async fn beat(
        &self,
        beats: &[(Uuid, Option<String>)],
        write_interval: Duration,
    ) -> Option<Vec<Cached>> {
        let (mut state, now) = self.state();
        Some(state.beat(beats, write_interval, now))
    }

    async fn populate(&self, entries: &[Entry], write_interval: Duration) {
        let (mut state, now) = self.state();
        state.populate(entries, write_interval, now);
    }

    async fn set_status(&self, entries: &[Entry], write_interval: Duration) {
        let (mut state, now) = self.state();
        state.set_status(entries, write_interval, now);
    }

    async fn liveness(&self, task_ids: &[Uuid]) -> Option<Vec<Liveness>> {
        let (mut state, now) = self.state();
        Some(state.liveness(task_ids, now))
    }

    async fn statuses(&self, task_ids: &[Uuid]) -> Option<Vec<Option<(AttemptStatus, String)>>> {
        let (mut state, now) = self.state();
        Some(state.statuses(task_ids, now))
    }

    async fn peek(&self, task_id: Uuid) -> Option<(Option<i64>, Option<String>)> {
        let (mut state, now) = self.state();
        Some(state.peek(task_id, now))
    }

    fn errors(&self) -> u64 {
        0
    }
}

/// The wall clock, ms since the Unix epoch (what Redis's `TIME` gives the scripts).
fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// One task's entry: the fields of the Redis hash. `last_ms` and `written_ms` are absent
/// on an entry created by a status change, as `HSET` of the status alone leaves them.
#[derive(Debug, Clone, PartialEq)]
struct Item {
    attempt: i32,
    status: AttemptStatus,
    reason: String,
    timeout_seconds: i64,
    last_ms: Option<i64>,
    written_ms: Option<i64>,
    details: Option<String>,
    /// The deadline after which the entry is gone (the key's expire time).
    expires_at_ms: i64,
}

impl Item {
    /// Redis keeps a key up to and including its expire time.
    fn expired(&self, now: i64) -> bool {
        now > self.expires_at_ms
    }
}

/// The map and the time of its last sweep. Every operation takes the clock's `now` as an
/// argument, so the tests can move time instead of waiting for it.
#[derive(Debug, Default)]
struct State {
    items: HashMap<Uuid, Item>,
    last_sweep_ms: i64,
}

/// An absolute deadline `ttl` after `now` (`PEXPIRE`).
fn deadline(now: i64, ttl: u64) -> i64 {
    now.saturating_add(i64::try_from(ttl).unwrap_or(i64::MAX))
}

impl State {
    /// Drops every expired entry when the last sweep is [`SWEEP_EVERY_MS`] old (or the
    /// clock went back, after which the pacing would otherwise stall).
    fn sweep_if_due(&mut self, now: i64) {
        let since = now - self.last_sweep_ms;
        if !(0..SWEEP_EVERY_MS).contains(&since) {
            self.items.retain(|_, item| !item.expired(now));
            self.last_sweep_ms = now;
        }
    }

    /// The task's entry unless absent or expired (an expired one is removed).
    fn live(&mut self, task_id: Uuid, now: i64) -> Option<&mut Item> {
        if self.items.get(&task_id).is_some_and(|i| i.expired(now)) {
            self.items.remove(&task_id);
        }
        self.items.get_mut(&task_id)
    }

    /// `BEAT_LUA`: a RUNNING entry records the heartbeat (and details), gets its expiry
    /// refreshed and is due a PostgreSQL write once the last one is an interval old;
    /// another status is only read; an absent entry is a miss.
    fn beat(
        &mut self,
        beats: &[(Uuid, Option<String>)],
        write_interval: Duration,
        now: i64,
    ) -> Vec<Cached> {
        let interval = write_interval.as_millis() as i64;
        beats
            .iter()
            .map(|(task_id, details)| {
                let Some(item) = self.live(*task_id, now) else {
                    return Cached::Miss;
                };
                if item.status != AttemptStatus::Running {
                    return Cached::Known {
                        attempt: item.attempt,
                        status: item.status,
                        reason: item.reason.clone(),
                        due: false,
                        details: None,
                    };
                }
                item.last_ms = Some(now);
                // An empty string is "no details", as the script's '' argument is.
                if let Some(d) = details.as_ref().filter(|d| !d.is_empty()) {
                    item.details = Some(d.clone());
                }
                item.expires_at_ms = deadline(
                    now,
                    ttl_ms(AttemptStatus::Running, item.timeout_seconds, write_interval),
                );
                let due = now - item.written_ms.unwrap_or(0) >= interval;
                if due {
                    item.written_ms = Some(now);
                }
                Cached::Known {
                    attempt: item.attempt,
                    status: item.status,
                    reason: String::new(),
                    due,
                    details: item.details.clone().filter(|_| due),
                }
            })
            .collect()
    }

    /// `POPULATE_LUA`: writes an entry only where none is; last heartbeat and last write
    /// are now.
    fn populate(&mut self, entries: &[Entry], write_interval: Duration, now: i64) {
        for e in entries {
            if self.live(e.task_id, now).is_some() {
                continue;
            }
            let item = Item {
                attempt: e.attempt,
                status: e.status,
                reason: e.reason.clone().unwrap_or_default(),
                timeout_seconds: e.timeout_seconds,
                last_ms: Some(now),
                written_ms: Some(now),
                details: None,
                expires_at_ms: deadline(now, ttl_ms(e.status, e.timeout_seconds, write_interval)),
            };
            self.items.insert(e.task_id, item);
        }
    }

    /// `HSET s r a t` + `PEXPIRE`: overwrites the status fields, keeps the heartbeat,
    /// last write and details (none on an entry it creates).
    fn set_status(&mut self, entries: &[Entry], write_interval: Duration, now: i64) {
        for e in entries {
            let expires_at_ms = deadline(now, ttl_ms(e.status, e.timeout_seconds, write_interval));
            let reason = e.reason.clone().unwrap_or_default();
            match self.live(e.task_id, now) {
                Some(item) => {
                    item.status = e.status;
                    item.reason = reason;
                    item.attempt = e.attempt;
                    item.timeout_seconds = e.timeout_seconds;
                    item.expires_at_ms = expires_at_ms;
                }
                None => {
                    let item = Item {
                        attempt: e.attempt,
                        status: e.status,
                        reason,
                        timeout_seconds: e.timeout_seconds,
                        last_ms: None,
                        written_ms: None,
                        details: None,
                        expires_at_ms,
                    };
                    self.items.insert(e.task_id, item);
                }
            }
        }
    }

    /// `LIVENESS_LUA`: now, and each task's last heartbeat (`None` when absent).
    fn liveness(&mut self, task_ids: &[Uuid], now: i64) -> Vec<Liveness> {
        task_ids
            .iter()
            .map(|id| Liveness {
                now_ms: now,
                last_ms: self.live(*id, now).and_then(|i| i.last_ms),
            })
            .collect()
    }

    /// `HMGET s r` per task.
    fn statuses(&mut self, task_ids: &[Uuid], now: i64) -> Vec<Option<(AttemptStatus, String)>> {
        task_ids
            .iter()
            .map(|id| self.live(*id, now).map(|i| (i.status, i.reason.clone())))
            .collect()
    }

    /// `HMGET l d`: both `None` for an absent entry.
    fn peek(&mut self, task_id: Uuid, now: i64) -> (Option<i64>, Option<String>) {
        self.live(task_id, now)
            .map_or((None, None), |i| (i.last_ms, i.details.clone()))
    }
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
