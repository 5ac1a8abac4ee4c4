//! The workflows whose run a shard started lately, to tell a copy of a start from a new
//! one without a read.
//!
//! A start delivered for the first time is trusted to name a new workflow (docs/decider.md,
//! "A first start reads no run"). A copy of one the shard applied — the outbox sweeper
//! publishing a start again after its first copy was applied — is not: trusted, it would
//! make its run again in memory and hand that run's first activity to a spare worker
//! before its commit meets the existing run, so the activity ran once more. A start for
//! a workflow named here is read from the store instead, and its copy is ignored.
//! Bounded; a copy older than what is kept is trusted as before (and refused by its
//! commit).

use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasher as _, RandomState};
use std::sync::Mutex;

/// Workflows kept per shard, the oldest going first: at 1,000 runs a second over 16
/// shards, two minutes of starts, well past the sweeper's re-publishing.
const CAPACITY: usize = 8192;

/// Workflow ids (their hashes: a collision only costs a new start one read) of the runs
/// the shard started lately.
#[derive(Debug, Default)]
pub struct RecentStarts {
    inner: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    hasher: RandomState,
    ids: HashSet<u64>,
    /// Oldest first.
    order: VecDeque<u64>,
}

impl RecentStarts {
    /// Keeps the workflows of runs that a commit which succeeded started.
    pub fn remember<'a>(&self, started: impl IntoIterator<Item = &'a str>) {
        let mut kept = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for workflow_id in started {
            let hash = kept.hasher.hash_one(workflow_id);
            if kept.ids.insert(hash) {
                kept.order.push_back(hash);
            }
        }
        while kept.order.len() > CAPACITY {
            if let Some(oldest) = kept.order.pop_front() {
                kept.ids.remove(&oldest);
            }
        }
    }

    /// Whether the shard started a run of `workflow_id` lately.
    pub fn contains(&self, workflow_id: &str) -> bool {
        let kept = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        kept.ids.contains(&kept.hasher.hash_one(workflow_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_workflow_is_known_until_newer_ones_push_it_out() {
        let recent = RecentStarts::default();
        recent.remember(["first"]);
        assert!(recent.contains("first"));
        assert!(!recent.contains("second"), "never started here");
        let newer: Vec<String> = (0..CAPACITY).map(|n| format!("wf-{n}")).collect();
        recent.remember(newer.iter().map(String::as_str));
        assert!(!recent.contains("first"), "pushed out by newer starts");
        assert!(recent.contains("wf-0") && recent.contains(&format!("wf-{}", CAPACITY - 1)));
    }
}
