//! The heartbeat schedule: which running activities are due, and what an answer does to
//! them. Pure logic over explicit `now` instants (no I/O, no clock), so the rules are
//! tested with a fake clock; [`super::run`] drives it with the real one.
//!
//! Every activity has an absolute next-due time. A cycle sends every activity due at its
//! start once; an answered beat moves the activity's next-due time to *the time it was
//! sent + interval*, never to *old due time + interval*, so a scheduler that stalled sends
//! what is overdue once and then goes back to its rhythm instead of catching up with a
//! burst. A tick sends what falls due before the middle of the next tick period (half a
//! tick early rather than a whole tick late), so an activity whose interval is a whole
//! number of ticks is beaten on every n-th tick despite the ticks' jitter.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use uuid::Uuid;

use super::Stop;
use crate::messages::{Beat, HeartbeatAction, HeartbeatAnswer};

/// Shortest interval between two heartbeats of one activity.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// Longest interval between two heartbeats of one activity.
pub const MAX_INTERVAL: Duration = Duration::from_secs(30);

/// How the scheduler paces heartbeats; see the builder's `heartbeat_*` methods.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    /// How often the scheduler looks for due activities (one cycle per tick).
    pub(crate) tick: Duration,
    /// A fixed interval for every watched activity, instead of a third of its heartbeat
    /// timeout clamped to [`MIN_INTERVAL`, `MAX_INTERVAL`].
    pub(crate) interval: Option<Duration>,
    /// Most heartbeats in one request; a cycle with more due sends several.
    pub(crate) max_batch: usize,
    /// Retries of one activity's heartbeat within a cycle before it waits for the next.
    pub(crate) max_retries: u32,
    /// Pause before a throttled heartbeat is sent again.
    pub(crate) throttle_pause: Duration,
    /// Pause before a heartbeat whose request failed is sent again.
    pub(crate) failure_pause: Duration,
    /// Beat for every running activity (`true`), or only for those whose handler called
    /// `ActivityContext::heartbeat` since their last beat.
    pub(crate) automatic: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            tick: Duration::from_secs(1),
            interval: None,
            max_batch: 10_000,
            max_retries: 3,
            throttle_pause: Duration::from_millis(50),
            failure_pause: Duration::from_millis(250),
            automatic: true,
        }
    }
}

impl Policy {
    /// The interval of an activity with this heartbeat timeout; `None` when unwatched.
    pub(crate) fn interval_for(&self, response_timeout_seconds: i64) -> Option<Duration> {
        let timeout = u64::try_from(response_timeout_seconds)
            .ok()
            .filter(|s| *s > 0)?;
        Some(self.interval.unwrap_or_else(|| {
            (Duration::from_secs(timeout) / 3).clamp(MIN_INTERVAL, MAX_INTERVAL)
        }))
    }
}

/// One running activity.
#[derive(Debug)]
struct Entry {
    /// `None`: the service does not watch it (heartbeat timeout 0).
    interval: Option<Duration>,
    next_due: Instant,
    /// The handler asked for a beat (with these details, if any) not yet acknowledged.
    requested: Option<Requested>,
    stop: Arc<Stop>,
}

#[derive(Debug)]
struct Requested {
    details: Option<Value>,
    /// Tells a request made while a beat was in flight from the one that beat carried.
    seq: u64,
}

impl Entry {
    fn is_due(&self, now: Instant, automatic: bool) -> bool {
        self.requested.is_some() || (automatic && self.interval.is_some() && self.next_due <= now)
    }
}

/// One running handler: an attempt, and which of its runs in this process. The same
/// attempt can run twice at once (a redelivered or re-published task), and a stale
/// attempt beside its retry; each is beaten and taken off the schedule on its own. The
/// beat names only the task, so the service's answer for the task applies to all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) task_id: Uuid,
    pub(crate) attempt: i32,
    /// Unique per registration in the process.
    pub(crate) run: u64,
}

/// The activities of one worker process and their due times.
#[derive(Debug)]
pub(crate) struct Schedule {
    policy: Policy,
    entries: HashMap<Key, Entry>,
    seq: u64,
}

/// One beat as sent: the attempt it is for, and the sequence number of the handler's
/// request it carries (0: none).
#[derive(Debug, Clone)]
pub(crate) struct Sent {
    pub(crate) key: Key,
    pub(crate) beat: Beat,
    pub(crate) seq: u64,
}

/// What a heartbeat request came back with.
pub(crate) type Outcome<'a> = Result<&'a BTreeMap<Uuid, HeartbeatAnswer>, ()>;

impl Schedule {
    pub(crate) fn new(policy: Policy) -> Self {
        Self {
            policy,
            entries: HashMap::new(),
            seq: 0,
        }
    }

    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Activities on the schedule.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Puts an activity that started at `now` on the schedule; its first beat is due one
    /// interval later (the service counts its timeout from the start).
    pub(crate) fn add(
        &mut self,
        key: Key,
        response_timeout_seconds: i64,
        now: Instant,
    ) -> Arc<Stop> {
        let interval = self.policy.interval_for(response_timeout_seconds);
        let stop = Arc::new(Stop::default());
        let entry = Entry {
            interval,
            next_due: now + interval.unwrap_or_default(),
            requested: None,
            stop: stop.clone(),
        };
        self.entries.insert(key, entry);
        stop
    }

    /// Takes an activity off the schedule (it finished, or was stopped).
    pub(crate) fn remove(&mut self, key: &Key) {
        self.entries.remove(key);
    }

    /// The handler asked for a beat: sent at the next tick, with `details` if any.
    pub(crate) fn request(&mut self, key: &Key, details: Option<Value>) {
        self.seq += 1;
        let seq = self.seq;
        if let Some(entry) = self.entries.get_mut(key) {
            // Details given earlier and not yet sent are kept unless replaced.
            let details = details.or_else(|| entry.requested.take().and_then(|r| r.details));
            entry.requested = Some(Requested { details, seq });
        }
    }

    /// The activities due at a tick at `now` (or within half a tick), most overdue first.
    pub(crate) fn due(&self, now: Instant) -> Vec<Key> {
        let horizon = now + self.policy.tick / 2;
        let mut due: Vec<(Instant, Key)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.is_due(horizon, self.policy.automatic))
            .map(|(id, e)| (e.next_due, *id))
            .collect();
        due.sort_unstable_by_key(|(at, key)| (*at, key.run));
        due.into_iter().map(|(_, id)| id).collect()
    }

    /// The beats for `keys`, skipping activities no longer on the schedule.
    pub(crate) fn beats(&self, keys: &[Key]) -> Vec<Sent> {
        keys.iter()
            .filter_map(|key| {
                let entry = self.entries.get(key)?;
                let (details, seq) = match &entry.requested {
                    Some(r) => (r.details.clone(), r.seq),
                    None => (None, 0),
                };
                let beat = Beat {
                    task_id: key.task_id,
                    details,
                };
                Some(Sent {
                    key: *key,
                    beat,
                    seq,
                })
            })
            .collect()
    }

    /// Applies a request's outcome to the activities it carried (`sent`, as returned by
    /// [`Schedule::beats`], sent at `sent_at`, answered at `now`), queueing retries in
    /// `cycle`. A stopped activity's [`Stop`] fires and it leaves the schedule.
    pub(crate) fn apply(
        &mut self,
        cycle: &mut Cycle,
        sent: &[Sent],
        outcome: Outcome<'_>,
        sent_at: Instant,
        now: Instant,
    ) {
        for Sent { key, beat, seq } in sent {
            let Some(entry) = self.entries.get_mut(key) else {
                continue; // finished meanwhile
            };
            let answer = outcome.ok().and_then(|answers| answers.get(&beat.task_id));
            match answer.map(|a| a.action) {
                Some(HeartbeatAction::Continue) => {
                    entry.next_due = sent_at + entry.interval.unwrap_or_default();
                    if entry.requested.as_ref().is_some_and(|r| r.seq == *seq) {
                        entry.requested = None;
                    }
                }
                Some(HeartbeatAction::Stop | HeartbeatAction::NotFound) => {
                    let reason = answer.and_then(|a| a.reason.clone()).unwrap_or_else(|| {
                        match answer.map(|a| a.action) {
                            Some(HeartbeatAction::NotFound) => {
                                "not found by the heartbeat service".into()
                            }
                            _ => "stopped by the heartbeat service".into(),
                        }
                    });
                    entry.stop.fire(reason);
                    self.entries.remove(key);
                }
                Some(HeartbeatAction::Throttled) => {
                    cycle.retry(*key, Retry::Throttled, now, &self.policy)
                }
                // No answer for it: the request failed, or the answer left it out. (DEFER
                // answers claims only; from a heartbeat it means nothing: sent again.)
                None | Some(HeartbeatAction::Defer) => {
                    cycle.retry(*key, Retry::Failed, now, &self.policy)
                }
            }
        }
    }
}

/// Why a heartbeat is sent again within its cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Retry {
    /// The service asked to retry soon: goes first.
    Throttled,
    /// The request failed or went unanswered: goes later.
    Failed,
}

/// One cycle's retries: throttled heartbeats go first (after a short pause), failed ones
/// later; each activity is retried at most `max_retries` times in a cycle, then waits for
/// the next cycle (it is still due, so the next tick sends it).
#[derive(Debug, Default)]
pub(crate) struct Cycle {
    /// `(not before, kind, task)`.
    pending: Vec<(Instant, Retry, Key)>,
    retries: HashMap<Key, u32>,
    /// Heartbeats given up on in this cycle.
    pub(crate) gave_up: usize,
}

/// What the cycle's driver does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Round {
    /// Send these now, throttled ones first.
    Send(Vec<Key>),
    /// Nothing to send before then.
    WaitUntil(Instant),
    /// The cycle is over.
    Done,
}

impl Cycle {
    fn retry(&mut self, id: Key, why: Retry, now: Instant, policy: &Policy) {
        let count = self.retries.entry(id).or_insert(0);
        *count += 1;
        if *count > policy.max_retries {
            self.gave_up += 1;
            return;
        }
        let pause = match why {
            Retry::Throttled => policy.throttle_pause,
            Retry::Failed => policy.failure_pause,
        };
        self.pending.push((now + pause, why, id));
    }

    /// The next round of retries at `now`.
    pub(crate) fn next_round(&mut self, now: Instant) -> Round {
        let Some(earliest) = self.pending.iter().map(|p| p.0).min() else {
            return Round::Done;
        };
        if earliest > now {
            return Round::WaitUntil(earliest);
        }
        let (mut ready, later): (Vec<_>, Vec<_>) = self.pending.drain(..).partition(|p| p.0 <= now);
        self.pending = later;
        ready.sort_unstable_by_key(|p| (p.1, p.0));
        Round::Send(ready.into_iter().map(|p| p.2).collect())
    }

    /// Retries of `id` so far in this cycle.
    #[cfg(test)]
    fn retries_of(&self, id: &Key) -> u32 {
        self.retries.get(id).copied().unwrap_or(0)
    }
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
