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

/// The process's unused offers, newest last.
#[derive(Debug, Clone, Default)]
pub struct SpareOffers {
    kept: Arc<Mutex<VecDeque<(Instant, Eager)>>>,
}

impl SpareOffers {
    /// Keeps an offer its run did not take. The same offer again (a batch decided again
    /// after a failed commit) is kept once.
    pub fn keep(&self, eager: Eager) {
        let mut kept = self.lock();
        if kept.iter().any(|(_, e)| *e == eager) {
            return;
        }
        if kept.len() >= CAPACITY {
            kept.pop_front();
        }
        kept.push_back((Instant::now(), eager));
    }

    /// Takes the newest kept offer for `queue_key` that is still fresh (see
    /// [`Eager::fits`]); forgets those kept too long.
    pub fn take(&self, queue_key: &str, max_age: chrono::Duration) -> Option<Eager> {
        let mut kept = self.lock();
        while kept.front().is_some_and(|(at, _)| at.elapsed() >= KEEP_FOR) {
            kept.pop_front();
        }
        let index = kept.iter().rposition(|(_, e)| e.fits(queue_key, max_age))?;
        kept.remove(index).map(|(_, e)| e)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(Instant, Eager)>> {
        // A poisoned lock only means a panic elsewhere; the offers stay usable.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
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
    fn an_offer_too_old_by_the_workers_clock_is_not_taken() {
        let spares = SpareOffers::default();
        let mut old = offer("a", &["greet"]);
        old.offer.offered_at = Utc::now() - chrono::Duration::seconds(30);
        spares.keep(old);
        assert!(spares.take("greet", FRESH).is_none());
    }
}
