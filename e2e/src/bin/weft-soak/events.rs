//! The lifecycle events the soak receives (every key, `WEFT_EVENTS=#` on the deciders),
//! kept by run, and the check that each run's history is matched by its events.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use weft::listener::{EventListener, ListenerError};
use weft::messages::LifecycleEvent;
use weft_e2e::HistoryEvent;

/// A run's events: `(routing key, eventId)`.
type RunEvents = HashSet<(String, i64)>;

/// Events received, by workflow (the soak resets no run, so a workflow is one run):
/// `(routing key, eventId)`, deduplicated (delivery is at least once).
#[derive(Debug, Clone, Default)]
pub struct Received {
    by_run: Arc<Mutex<HashMap<String, RunEvents>>>,
}

impl EventListener for Received {
    async fn on_event(&self, event: LifecycleEvent) -> Result<(), ListenerError> {
        self.by_run
            .lock()
            .expect("events lock")
            .entry(event.workflow_id)
            .or_default()
            .insert((event.event, event.event_id));
        Ok(())
    }
}

/// The lifecycle event a history event causes, if it causes one the soak checks.
fn key_of(history_type: &str) -> Option<&'static str> {
    Some(match history_type {
        "WorkflowStarted" => "workflow.started",
        "WorkflowCompleted" => "workflow.completed",
        "WorkflowTerminated" => "workflow.terminated",
        "WorkflowFailed" => "workflow.failed",
        "TaskScheduled" => "task.scheduled",
        "TaskCompleted" => "task.completed",
        "TaskFailed" => "task.failed",
        "TaskTimedOut" => "task.timed_out",
        _ => return None,
    })
}

impl Received {
    /// Every history event of `workflow_id` that should have been announced but was not.
    pub fn missing(&self, workflow_id: &str, history: &[HistoryEvent]) -> Vec<String> {
        let by_run = self.by_run.lock().expect("events lock");
        let empty = RunEvents::new();
        let got = by_run.get(workflow_id).unwrap_or(&empty);
        history
            .iter()
            .filter_map(|e| key_of(&e.kind).map(|key| (key, e.event_id, &e.kind)))
            .filter(|(key, id, _)| !got.contains(&((*key).to_owned(), *id)))
            .map(|(key, id, kind)| format!("no {key} event for history event {id} ({kind})"))
            .collect()
    }
}
