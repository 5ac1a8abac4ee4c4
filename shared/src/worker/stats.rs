//! Counters of a worker's activities, reported through `tracing`.

use std::sync::atomic::{AtomicU64, Ordering};

/// What a worker did since it started; every field only grows.
#[derive(Debug, Default)]
pub(super) struct Stats {
    started: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    panicked: AtomicU64,
    dead_lettered: AtomicU64,
    requeued: AtomicU64,
    publish_failed: AtomicU64,
    stopped: AtomicU64,
    deferred: AtomicU64,
}

/// One counter of [`Stats`].
#[derive(Debug, Clone, Copy)]
pub(super) enum Counter {
    /// A handler was started.
    Started,
    /// A handler returned `Ok` and the result was confirmed.
    Completed,
    /// A handler returned `Err` (or panicked) and the failure was confirmed.
    Failed,
    /// A handler panicked.
    Panicked,
    /// A message was not an activity task and went to the DLQ.
    DeadLettered,
    /// A task went back to its queue (shutdown, or its result could not be published).
    Requeued,
    /// Publishing a result failed.
    PublishFailed,
    /// The heartbeat service stopped an attempt; nothing was reported.
    Stopped,
    /// The heartbeat service deferred a claim (the task is over its limits); the task
    /// went back to its queue after a wait.
    Deferred,
}

impl Stats {
    pub(super) fn incr(&self, counter: Counter) {
        let c = match counter {
            Counter::Started => &self.started,
            Counter::Completed => &self.completed,
            Counter::Failed => &self.failed,
            Counter::Panicked => &self.panicked,
            Counter::DeadLettered => &self.dead_lettered,
            Counter::Requeued => &self.requeued,
            Counter::PublishFailed => &self.publish_failed,
            Counter::Stopped => &self.stopped,
            Counter::Deferred => &self.deferred,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Total of every counter, to tell whether anything happened since the last report.
    pub(super) fn activity(&self) -> u64 {
        [
            &self.started,
            &self.completed,
            &self.failed,
            &self.dead_lettered,
            &self.requeued,
            &self.stopped,
            &self.deferred,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }

    /// Logs every counter at `info`, with the handlers running now.
    pub(super) fn log(&self, message: &'static str, running: usize) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        tracing::info!(
            running,
            started = get(&self.started),
            completed = get(&self.completed),
            failed = get(&self.failed),
            panicked = get(&self.panicked),
            dead_lettered = get(&self.dead_lettered),
            requeued = get(&self.requeued),
            publish_failed = get(&self.publish_failed),
            stopped = get(&self.stopped),
            deferred = get(&self.deferred),
            "{message}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up() {
        let s = Stats::default();
        s.incr(Counter::Started);
        s.incr(Counter::Completed);
        s.incr(Counter::Panicked);
        assert_eq!(s.activity(), 2);
        s.log("test", 0);
    }
}
