//! The verdicts a shard committed lately, by request id.
//!
//! A gateway asks for an operation's verdict (`WatchVerdict`, docs/task-updates.md) right
//! after publishing the operation, and the call usually lands in the batch after the
//! one that committed the verdict: answered from here, it costs no read of
//! `operation_outcomes`. Bounded; the store answers what fell out (or what a restarted
//! process never saw).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde_json::Value;
use uuid::Uuid;
use weft::store::operations::OperationOutcome;

/// Verdicts kept per shard; the oldest go first. A verdict is asked for within
/// milliseconds of its commit, so a few batches' worth is plenty.
const CAPACITY: usize = 1024;

/// Recently committed verdicts: `(status, body)` by request id.
#[derive(Debug, Default)]
pub struct RecentVerdicts {
    inner: Mutex<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    by_request: HashMap<Uuid, (i16, Value)>,
    /// Request ids, oldest first.
    order: VecDeque<Uuid>,
}

impl RecentVerdicts {
    /// Keeps the verdicts of a commit that succeeded.
    pub fn remember(&self, committed: &[OperationOutcome]) {
        if committed.is_empty() {
            return;
        }
        let mut kept = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for outcome in committed {
            // The first verdict stands, as in the store (a command applied again after
            // its commit is judged again, and that later verdict is not the one kept).
            if kept.by_request.contains_key(&outcome.request_id) {
                continue;
            }
            let verdict = (outcome.status, outcome.body.clone());
            kept.by_request.insert(outcome.request_id, verdict);
            kept.order.push_back(outcome.request_id);
        }
        while kept.order.len() > CAPACITY {
            if let Some(oldest) = kept.order.pop_front() {
                kept.by_request.remove(&oldest);
            }
        }
    }

    /// The verdict of `request_id`, when committed lately.
    pub fn get(&self, request_id: Uuid) -> Option<(i16, Value)> {
        let kept = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        kept.by_request.get(&request_id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn outcome(n: u128, status: i16) -> OperationOutcome {
        OperationOutcome {
            request_id: Uuid::from_u128(n),
            workflow_id: format!("wf-{n}"),
            status,
            body: json!({"n": n}),
        }
    }

    #[test]
    fn a_committed_verdict_is_answered_until_newer_ones_push_it_out() {
        let recent = RecentVerdicts::default();
        assert_eq!(recent.get(Uuid::from_u128(1)), None);
        recent.remember(&[outcome(1, 200), outcome(2, 409)]);
        assert_eq!(recent.get(Uuid::from_u128(1)), Some((200, json!({"n": 1}))));
        assert_eq!(recent.get(Uuid::from_u128(2)), Some((409, json!({"n": 2}))));
        recent.remember(&[outcome(1, 409)]);
        assert_eq!(
            recent.get(Uuid::from_u128(1)),
            Some((200, json!({"n": 1}))),
            "the first verdict stands"
        );
        let newer: Vec<_> = (3..3 + CAPACITY as u128).map(|n| outcome(n, 200)).collect();
        recent.remember(&newer);
        assert_eq!(
            recent.get(Uuid::from_u128(1)),
            None,
            "the oldest went first"
        );
        assert_eq!(recent.get(Uuid::from_u128(2)), None);
        assert!(recent.get(Uuid::from_u128(3)).is_some());
        assert!(recent.get(Uuid::from_u128(2 + CAPACITY as u128)).is_some());
    }
}
