//! Eager offers that their own run did not take (docs/eager-dispatch.md, "Spare
//! offers").
//!
//! Each result a worker sends offers the slot it just freed for the run's next activity.
//! When the run has none — it ended, or goes on with a system task or a task this worker
//! does not run — the offer is kept here for a moment, and the next activity scheduled
//! without an offer of its own (typically a new run's first one, which otherwise goes
//! through its shared queue and a claim round trip) takes it. One activity per offer, as
//! before: a freed slot is promised once.
//!
//! Shared by the shards of one decider process: a run ends on one shard and the next
//! run starts on another.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use weft::messages::EagerOffer;

/// How long an unused offer is kept. Short: the freed slot may be taken by a task from a
/// shared queue meanwhile, and a task sent to a busy worker waits in its eager queue
/// (up to the queue's 5 s before it moves on to its shared queue).
const KEEP_FOR: Duration = Duration::from_secs(2);
/// Offers kept at most; the oldest go first.
const CAPACITY: usize = 256;
/// How long a withdrawal is remembered: a result the worker sent before it withdrew may
/// be decided on another shard after the withdrawal (shards go at their own pace); its
/// offer is not kept or taken then. Well past any result still in flight.
const WITHDRAWN_FOR: Duration = Duration::from_secs(60);

/// A worker's eager offer, with the worker it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Eager {
    /// Who would run the activity (its registry row and `TaskStarted` name it).
    pub worker_id: String,
    /// The worker's eager queues and the task names it runs.
    pub offer: EagerOffer,
}

impl Eager {
    /// Whether the offer is for `queue_key` (a task name, or `HTTP`) and fresh enough
    /// by the worker's clock (`max_age`).
    pub fn fits(&self, queue_key: &str, max_age: chrono::Duration) -> bool {
        Utc::now().signed_duration_since(self.offer.offered_at) < max_age
            && self.offer.task_names.iter().any(|t| t == queue_key)
    }
}

/// The process's unused offers, newest last, and the withdrawals of stopping workers.
#[derive(Debug, Clone, Default)]
pub struct SpareOffers {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    kept: VecDeque<(Instant, Eager)>,
    /// Queue prefixes of workers that withdrew, with when.
    withdrawn: Vec<(Instant, String)>,
}

impl Inner {
    /// Drops the offers kept longer than [`KEEP_FOR`] (the oldest are at the front).
    fn forget_expired(&mut self) {
        while self
            .kept
            .front()
            .is_some_and(|(at, _)| at.elapsed() >= KEEP_FOR)
        {
            self.kept.pop_front();
        }
    }

    fn forget_old_withdrawals(&mut self) {
        self.withdrawn
            .retain(|(at, _)| at.elapsed() < WITHDRAWN_FOR);
    }

    fn is_withdrawn(&self, queue_prefix: &str) -> bool {
        self.withdrawn
            .iter()
            .any(|(at, p)| p == queue_prefix && at.elapsed() < WITHDRAWN_FOR)
    }
}

impl SpareOffers {
    /// Keeps an offer its run did not take. The same offer again (a batch decided again
    /// after a failed commit) is kept once.
    ///
    /// Under load every ending run keeps one, so the expired ones go here too, and the
    /// repeat check compares the offer's time first: the other fields are the same for
    /// every offer of a worker.
    pub fn keep(&self, eager: Eager) {
        let mut inner = self.lock();
        inner.forget_expired();
        let offered_at = eager.offer.offered_at;
        if inner.is_withdrawn(&eager.offer.queue_prefix)
            || inner
                .kept
                .iter()
                .any(|(_, e)| e.offer.offered_at == offered_at && *e == eager)
        {
            return;
        }
        if inner.kept.len() >= CAPACITY {
            inner.kept.pop_front();
        }
        inner.kept.push_back((Instant::now(), eager));
    }

    /// The worker process whose eager queues start with `queue_prefix` is stopping: its
    /// kept offers go, and no offer of it is kept or taken from now on (a task sent to
    /// its queue would wait out the queue's 5 s before another worker got it).
    pub fn withdraw(&self, queue_prefix: &str) {
        let mut inner = self.lock();
        inner.forget_old_withdrawals();
        inner
            .kept
            .retain(|(_, e)| e.offer.queue_prefix != queue_prefix);
        if !inner.is_withdrawn(queue_prefix) {
            inner
                .withdrawn
                .push((Instant::now(), queue_prefix.to_owned()));
        }
    }

    /// Whether the worker process of `queue_prefix` withdrew its offers.
    pub fn is_withdrawn(&self, queue_prefix: &str) -> bool {
        self.lock().is_withdrawn(queue_prefix)
    }

    /// Takes the newest kept offer for `queue_key` that is still fresh (see
    /// [`Eager::fits`]); forgets those kept too long.
    pub fn take(&self, queue_key: &str, max_age: chrono::Duration) -> Option<Eager> {
        let mut inner = self.lock();
        inner.forget_expired();
        let index = inner
            .kept
            .iter()
            .rposition(|(_, e)| e.fits(queue_key, max_age))?;
        inner.kept.remove(index).map(|(_, e)| e)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A poisoned lock only means a panic elsewhere; the offers stay usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(worker: &str, tasks: &[&str]) -> Eager {
        Eager {
            worker_id: worker.to_owned(),
            offer: EagerOffer {
                queue_prefix: format!("ns.eager.{worker}"),
                task_names: tasks.iter().map(|t| (*t).to_owned()).collect(),
                offered_at: Utc::now(),
                batches: false,
            },
        }
    }

    const FRESH: chrono::Duration = chrono::Duration::seconds(10);

    #[test]
    fn an_offer_is_taken_once_by_a_task_its_worker_runs() {
        let spares = SpareOffers::default();
        spares.keep(offer("a", &["greet"]));
        assert!(
            spares.take("charge", FRESH).is_none(),
            "a does not run charge"
        );
        assert_eq!(spares.take("greet", FRESH).unwrap().worker_id, "a");
        assert!(
            spares.take("greet", FRESH).is_none(),
            "one slot, one activity"
        );
    }

    #[test]
    fn the_newest_fitting_offer_goes_first_and_a_repeated_one_is_kept_once() {
        let spares = SpareOffers::default();
        let a = offer("a", &["greet"]);
        spares.keep(a.clone());
        spares.keep(offer("b", &["greet"]));
        spares.keep(a);
        assert_eq!(spares.take("greet", FRESH).unwrap().worker_id, "b");
        assert_eq!(spares.take("greet", FRESH).unwrap().worker_id, "a");
        assert!(spares.take("greet", FRESH).is_none());
    }

    #[test]
    fn a_withdrawn_workers_offers_are_neither_taken_nor_kept_any_more() {
        let spares = SpareOffers::default();
        spares.keep(offer("a", &["greet"]));
        spares.keep(offer("b", &["greet"]));
        spares.withdraw("ns.eager.a");
        assert!(spares.is_withdrawn("ns.eager.a"));
        spares.keep(offer("a", &["greet"])); // a result sent before the withdrawal
        assert_eq!(spares.take("greet", FRESH).unwrap().worker_id, "b");
        assert!(spares.take("greet", FRESH).is_none());
    }

    #[test]
    fn an_offer_too_old_by_the_workers_clock_is_not_taken() {
        let spares = SpareOffers::default();
        let mut old = offer("a", &["greet"]);
        old.offer.offered_at = Utc::now() - chrono::Duration::seconds(30);
        spares.keep(old);
        assert!(spares.take("greet", FRESH).is_none());
    }
}
