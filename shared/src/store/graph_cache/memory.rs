//! The graph cache in this process's memory, for `weft dev`. Same keys and expiry as in
//! Redis (`(run_id, version)`, [`TTL`] from the last put, reads do not extend it), and
//! bounded where Redis is bounded by its server's memory: past [`MAX_ENTRIES`] entries
//! or [`MAX_BYTES`] of JSON, expired entries go first, then the least recently used.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use uuid::Uuid;

use super::{Backend, TTL};

/// Most graphs kept.
pub(crate) const MAX_ENTRIES: usize = 1_024;
/// Most JSON bytes kept (a large run's graph is a few hundred KiB).
pub(crate) const MAX_BYTES: usize = 64 << 20;

/// The graph cache in memory.
#[derive(Debug)]
pub(crate) struct MemoryGraphCache {
    lru: Mutex<Lru>,
}

impl MemoryGraphCache {
    /// An empty cache holding at most `max_entries` graphs and `max_bytes` of JSON.
    pub(crate) fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            lru: Mutex::new(Lru::new(max_entries, max_bytes, TTL)),
        }
    }

    fn lru(&self) -> std::sync::MutexGuard<'_, Lru> {
        // Every update leaves the map and its byte count consistent before anything
        // that could panic, so a poisoned lock's state is still sound.
        self.lru.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Backend for MemoryGraphCache {
    fn key(&self, run_id: Uuid, version: i64) -> String {
        format!("graph:{run_id}:{version}")
    }

    async fn get(&self, run_id: Uuid, version: i64) -> Option<Vec<u8>> {
        self.lru().get((run_id, version), Instant::now())
    }

    async fn put(&self, run_id: Uuid, version: i64, json: &[u8]) {
        self.lru().put((run_id, version), json, Instant::now());
    }
}

type Key = (Uuid, i64);

#[derive(Debug)]
struct Slot {
    json: Vec<u8>,
    expires_at: Instant,
    /// The tick of the last put or get: the smallest is evicted first.
    used: u64,
}

/// The bounded map. Operations take `now`, so the tests move time by hand.
#[derive(Debug)]
struct Lru {
    slots: HashMap<Key, Slot>,
    bytes: usize,
    tick: u64,
    max_entries: usize,
    max_bytes: usize,
    ttl: Duration,
}

impl Lru {
    fn new(max_entries: usize, max_bytes: usize, ttl: Duration) -> Self {
        Self {
            slots: HashMap::new(),
            bytes: 0,
            tick: 0,
            max_entries,
            max_bytes,
            ttl,
        }
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    fn remove(&mut self, key: &Key) {
        if let Some(slot) = self.slots.remove(key) {
            self.bytes -= slot.json.len();
        }
    }

    /// The graph under `key` unless absent or expired (an expired one is dropped).
    fn get(&mut self, key: Key, now: Instant) -> Option<Vec<u8>> {
        let tick = self.next_tick();
        match self.slots.get_mut(&key) {
            // Redis keeps a key up to and including its expire time.
            Some(slot) if now <= slot.expires_at => {
                slot.used = tick;
                Some(slot.json.clone())
            }
            Some(_) => {
                self.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Stores `json` under `key` for the TTL (replacing), then evicts down to the bounds.
    /// A graph larger than the whole byte bound is not kept (the old entry goes too, as
    /// it would be replaced).
    fn put(&mut self, key: Key, json: &[u8], now: Instant) {
        self.remove(&key);
        if json.len() > self.max_bytes || self.max_entries == 0 {
            return;
        }
        let used = self.next_tick();
        self.bytes += json.len();
        self.slots.insert(
            key,
            Slot {
                json: json.to_vec(),
                expires_at: now + self.ttl,
                used,
            },
        );
        self.evict(now);
    }

    fn over(&self) -> bool {
        self.slots.len() > self.max_entries || self.bytes > self.max_bytes
    }

    /// Expired entries first (they are dead already), then the least recently used.
    fn evict(&mut self, now: Instant) {
        if !self.over() {
            return;
        }
        let expired: Vec<Key> = self
            .slots
            .iter()
            .filter(|(_, s)| now > s.expires_at)
            .map(|(k, _)| *k)
            .collect();
        for key in &expired {
            self.remove(key);
        }
        while self.over() {
            let Some(oldest) = self
                .slots
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| *k)
            else {
                break;
            };
            self.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::graph_cache::GraphCache;

    fn key(version: i64) -> Key {
        (Uuid::from_u128(7), version)
    }

    #[test]
    fn a_graph_is_kept_by_run_and_version_and_replaced_by_a_put() {
        let mut lru = Lru::new(8, 1_000, TTL);
        let now = Instant::now();
        lru.put(key(1), b"one", now);
        lru.put(key(2), b"two", now);
        assert_eq!(lru.get(key(1), now).as_deref(), Some(&b"one"[..]));
        assert_eq!(lru.get(key(3), now), None);
        assert_eq!(lru.get((Uuid::from_u128(8), 1), now), None, "another run");
        lru.put(key(1), b"uno!", now);
        assert_eq!(lru.get(key(1), now).as_deref(), Some(&b"uno!"[..]));
        assert_eq!(lru.bytes, 7, "the replaced JSON is no longer counted");
    }

    #[test]
    fn an_entry_expires_a_ttl_after_its_put_and_reads_do_not_extend_it() {
        let mut lru = Lru::new(8, 1_000, TTL);
        let t0 = Instant::now();
        lru.put(key(1), b"g", t0);
        assert!(
            lru.get(key(1), t0 + TTL).is_some(),
            "a read at the deadline"
        );
        assert_eq!(lru.get(key(1), t0 + TTL + Duration::from_millis(1)), None);
        assert!(lru.slots.is_empty(), "an expired entry met is dropped");
        assert_eq!(lru.bytes, 0);
        // A new put starts a new lifetime.
        lru.put(key(1), b"g", t0 + TTL * 2);
        assert!(lru.get(key(1), t0 + TTL * 2 + TTL / 2).is_some());
    }

    #[test]
    fn past_the_entry_bound_the_least_recently_used_goes() {
        let mut lru = Lru::new(2, 1_000, TTL);
        let now = Instant::now();
        lru.put(key(1), b"a", now);
        lru.put(key(2), b"b", now);
        lru.get(key(1), now); // 2 is now the least recently used
        lru.put(key(3), b"c", now);
        assert_eq!(lru.slots.len(), 2);
        assert!(lru.get(key(2), now).is_none());
        assert!(lru.get(key(1), now).is_some() && lru.get(key(3), now).is_some());
    }

    #[test]
    fn past_the_byte_bound_expired_entries_go_before_live_ones() {
        let mut lru = Lru::new(8, 10, TTL);
        let t0 = Instant::now();
        lru.put(key(1), b"12345", t0);
        let later = t0 + TTL + Duration::from_millis(1);
        lru.put(key(2), b"1234", later);
        lru.get(key(2), later);
        // 5 + 4 + 4 > 10: key 1 (expired) goes, not key 2 though it was used less lately
        // than the new key 3.
        lru.put(key(3), b"abcd", later);
        assert_eq!(lru.bytes, 8);
        assert!(lru.slots.contains_key(&key(2)) && lru.slots.contains_key(&key(3)));
        // Without expired ones, the least recently used go until the bytes fit.
        lru.put(key(4), b"123456789", later);
        assert_eq!(lru.slots.keys().collect::<Vec<_>>(), vec![&key(4)]);
        assert_eq!(lru.bytes, 9);
    }

    #[test]
    fn a_graph_larger_than_the_byte_bound_is_not_kept() {
        let mut lru = Lru::new(8, 4, TTL);
        let now = Instant::now();
        lru.put(key(1), b"abc", now);
        lru.put(key(1), b"too large", now);
        assert_eq!(lru.get(key(1), now), None, "not the stale JSON either");
        assert_eq!(lru.bytes, 0);
    }

    #[tokio::test]
    async fn the_facade_over_memory_round_trips_and_clones_share_entries() {
        let cache = GraphCache::in_memory();
        let run = Uuid::new_v4();
        assert_eq!(cache.get(run, 1).await, None);
        cache.put(run, 1, br#"{"nodes":[]}"#).await;
        let clone = cache.clone();
        assert_eq!(
            clone.get(run, 1).await.as_deref(),
            Some(&br#"{"nodes":[]}"#[..])
        );
        assert_eq!(
            clone.get(run, 2).await,
            None,
            "another version is another key"
        );
        assert_ne!(cache.key(run, 1), cache.key(run, 2));
    }
}
