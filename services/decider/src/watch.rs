//! Watches of synchronous execution (Conductor's `POST /api/workflow/execute`,
//! docs/execute.md): a caller waits, through a transient request on the run's command
//! shard, until the run ends, blocks on a WAIT task without a timer, or ends one of the
//! tasks it names. The shard keeps the watch in memory and replies right after the
//! commit that reaches it — or at once, when the run has reached it already. Nothing is
//! stored: a watch lost with its decider only makes the caller wait for its own
//! deadline, then read the run as it stands.
//!
//! Runs nobody watches pay one look-up in an empty map per commit.

use std::collections::HashMap;
use std::sync::Mutex;

use chrono::Utc;
use weft::bus::Delivery;
use weft::messages::{RunReached, WatchRun};

use crate::state::{RunState, RunStatus, TaskStatus};

/// Watches kept at most per shard: more are answered at once with the run's state as
/// it stands (the caller then reads it), so a flood of execute calls cannot grow the
/// decider's memory without bound.
const MAX_WATCHES: usize = 10_000;

/// One caller's wait.
struct Watcher {
    /// The request, to reply to.
    request: Delivery,
    watch: WatchRun,
}

/// The watches of one shard, by workflow id.
#[derive(Default)]
pub struct Watches {
    by_workflow: Mutex<HashMap<String, Vec<Watcher>>>,
}

/// A reply due: the request and what to answer.
pub type Due = (Delivery, RunReached);

impl Watches {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Watcher>>> {
        // A poisoned lock only means a panic elsewhere; the map itself stays usable.
        self.by_workflow.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether someone watches `workflow_id`.
    pub fn watched(&self, workflow_id: &str) -> bool {
        let watches = self.lock();
        !watches.is_empty() && watches.contains_key(workflow_id)
    }

    /// A new watch of `workflow_id`, whose run is `state` (`None`: not started yet). Due
    /// at once when the run has reached the point already (or too many watches wait);
    /// kept otherwise.
    pub fn add(
        &self,
        workflow_id: &str,
        request: Delivery,
        watch: WatchRun,
        state: Option<&RunState>,
    ) -> Option<Due> {
        if let Some(reached) = state.and_then(|s| reached(s, &watch.until_task_refs)) {
            return Some((request, reached));
        }
        let mut watches = self.lock();
        let now = Utc::now();
        watches.retain(|_, list| {
            list.retain(|w| w.watch.deadline > now);
            !list.is_empty()
        });
        if watches.values().map(Vec::len).sum::<usize>() >= MAX_WATCHES {
            let as_it_stands = state.map(|s| RunReached {
                run_id: s.run_id,
                status: s.status.as_str().to_owned(),
                task_ref: None,
            })?;
            return Some((request, as_it_stands));
        }
        watches
            .entry(workflow_id.to_owned())
            .or_default()
            .push(Watcher { request, watch });
        None
    }

    /// The watches of `workflow_id` that its run `state` (just committed) reached,
    /// removed; expired ones are dropped.
    pub fn reached_by(&self, workflow_id: &str, state: &RunState) -> Vec<Due> {
        let mut watches = self.lock();
        let Some(list) = watches.get_mut(workflow_id) else {
            return Vec::new();
        };
        let now = Utc::now();
        let mut due = Vec::new();
        list.retain(|w| {
            if w.watch.deadline <= now {
                return false;
            }
            match reached(state, &w.watch.until_task_refs) {
                Some(r) => {
                    due.push((w.request.clone(), r));
                    false
                }
                None => true,
            }
        });
        if list.is_empty() {
            watches.remove(workflow_id);
        }
        due
    }
}

/// Whether `state` is where a watch for `until` stops waiting, as Conductor's
/// `WorkflowSignalResponder` judges it: the run has ended; or one of the `until` tasks
/// has ended (whatever its status); or a WAIT task without a timer is pending.
pub fn reached(state: &RunState, until: &[String]) -> Option<RunReached> {
    let at = |task_ref: Option<String>| RunReached {
        run_id: state.run_id,
        status: state.status.as_str().to_owned(),
        task_ref,
    };
    if state.status != RunStatus::Running {
        return Some(at(None));
    }
    let ended = state
        .tasks
        .iter()
        .find(|t| until.contains(&t.task_ref) && !t.status.is_pending());
    if let Some(task) = ended {
        return Some(at(Some(task.task_ref.clone())));
    }
    let blocking = state.tasks.iter().find(|t| {
        t.task_type == "WAIT"
            && matches!(t.status, TaskStatus::Scheduled | TaskStatus::InProgress)
            && !state.timers.iter().any(|timer| timer.task_id == t.task_id)
    });
    blocking.map(|t| at(Some(t.task_ref.clone())))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::history_builder::HistoryBuilder;

    fn two_tasks() -> HistoryBuilder {
        HistoryBuilder::started(
            json!({"name": "w", "tasks": [
                {"name": "a", "taskReferenceName": "a"},
                {"name": "b", "taskReferenceName": "b"}]}),
            json!({}),
        )
        .scheduled("a", "a", json!({}))
    }

    #[test]
    fn a_running_run_reaches_a_watch_only_once_a_named_task_ends() {
        let h = two_tasks();
        assert_eq!(reached(&h.state(), &[]), None);
        assert_eq!(reached(&h.state(), &["a".into()]), None);
        let h = h.completed("a", json!({}));
        let at_a = reached(&h.state(), &["a".into()]).expect("a ended");
        assert_eq!(at_a.task_ref.as_deref(), Some("a"));
        assert_eq!(at_a.status, "RUNNING");
        assert_eq!(reached(&h.state(), &["b".into()]), None);
    }

    #[test]
    fn an_ended_run_reaches_every_watch() {
        let mut state = two_tasks().state();
        state.status = RunStatus::Failed;
        let r = reached(&state, &["b".into()]).expect("ended");
        assert_eq!(r.status, "FAILED");
        assert_eq!(r.task_ref, None);
    }

    #[test]
    fn a_wait_without_a_timer_blocks_and_one_with_a_timer_does_not() {
        let def = json!({"name": "w", "tasks": [
            {"name": "w", "taskReferenceName": "w", "type": "WAIT"}]});
        let mut state = HistoryBuilder::started(def, json!({}))
            .scheduled("w", "w", json!({}))
            .state();
        state.tasks[0].task_type = "WAIT".into();
        let r = reached(&state, &[]).expect("blocked on the WAIT");
        assert_eq!(r.task_ref.as_deref(), Some("w"));
        state.timers.push(crate::state::TimerState {
            timer_id: uuid::Uuid::from_u128(1),
            task_id: state.tasks[0].task_id,
            fire_at: Utc::now(),
            fired: false,
        });
        assert_eq!(reached(&state, &[]), None, "a timed WAIT ends by itself");
    }

    fn request() -> Delivery {
        let envelope = weft::Envelope::new(
            "wf",
            None,
            &weft::messages::Command::WatchRun(WatchRun {
                until_task_refs: Vec::new(),
                deadline: Utc::now(),
            }),
        )
        .expect("envelope");
        Delivery {
            envelope,
            traceparent: None,
            redelivered: false,
            queue: "q".into(),
            reply_to: Some("amq.rabbitmq.reply-to".into()),
            correlation_id: Some("c".into()),
        }
    }

    #[test]
    fn a_kept_watch_is_due_after_the_commit_that_reaches_it_and_expired_ones_go() {
        let watches = Watches::default();
        let h = two_tasks();
        let watch = |secs: i64| WatchRun {
            until_task_refs: vec!["a".into()],
            deadline: Utc::now() + chrono::Duration::seconds(secs),
        };
        assert!(watches
            .add("wf", request(), watch(30), Some(&h.state()))
            .is_none());
        assert!(watches.add("wf", request(), watch(-1), None).is_none());
        assert!(watches.watched("wf"));
        assert!(watches.reached_by("wf", &h.state()).is_empty());
        let done = h.completed("a", json!({}));
        let due = watches.reached_by("wf", &done.state());
        assert_eq!(due.len(), 1, "the expired watch is dropped, not answered");
        assert!(!watches.watched("wf"));
        // Reached already: due at once, never kept.
        assert!(watches
            .add("wf", request(), watch(30), Some(&done.state()))
            .is_some());
        assert!(!watches.watched("wf"));
    }
}
