//! Builds canned histories for interpreter tests, the way sdk-core's
//! `history_builder.rs` does: a readable list of events, folded into a state.

use chrono::{TimeZone, Utc};
use serde_json::Value;
use uuid::Uuid;
use weft::dsl::WorkflowDef;
use weft::messages::{Event, TaskCompleted, TaskFailed, TaskScheduled, WorkflowStarted};
use weft::store::runs::StoredEvent;

use crate::state::RunState;

/// Accumulates events of one run.
pub struct HistoryBuilder {
    run_id: Uuid,
    events: Vec<StoredEvent>,
    scheduled: Vec<(String, Uuid)>,
}

impl HistoryBuilder {
    /// A history that starts `definition` with `input`.
    pub fn started(definition: Value, input: Value) -> Self {
        let definition: WorkflowDef = serde_json::from_value(definition).unwrap();
        let mut b = Self {
            run_id: Uuid::from_u128(1),
            events: Vec::new(),
            scheduled: Vec::new(),
        };
        b.push(Event::WorkflowStarted(WorkflowStarted {
            definition,
            input,
            correlation_id: None,
            parent_workflow_id: None,
            parent: None,
            max_loop_iterations: None,
            max_variables_kb: None,
            max_fork_branches: None,
            traceparent: None,
            priority: None,
            task_to_domain: Default::default(),
        }));
        b
    }

    /// The start as `change` leaves it (a limit recorded in it, say).
    pub fn with_start(mut self, change: impl FnOnce(&mut WorkflowStarted)) -> Self {
        if let Event::WorkflowStarted(started) = &mut self.events[0].event {
            change(started);
        }
        self
    }

    fn push(&mut self, event: Event) {
        let n = self.events.len() as i64 + 1;
        self.events.push(StoredEvent {
            run_id: self.run_id,
            event_id: n,
            time: Utc.timestamp_opt(1_700_000_000 + n, 0).unwrap(),
            event,
        });
    }

    /// `task_ref` (named `task_name`) was scheduled with `input`.
    pub fn scheduled(mut self, task_ref: &str, task_name: &str, input: Value) -> Self {
        let task_id = Uuid::from_u128(100 + self.scheduled.len() as u128);
        self.scheduled.push((task_ref.to_owned(), task_id));
        let seq = self.scheduled.len() as i32 - 1;
        self.push(Event::TaskScheduled(TaskScheduled {
            task_id,
            task_ref: task_ref.to_owned(),
            task_type: "SIMPLE".into(),
            task_name: task_name.to_owned(),
            seq,
            attempt: 1,
            input,
            iteration: 0,
            output: None,
            callback_after_seconds: 0,
            dispatch_delay_ms: 0,
            domain: None,
        }));
        self
    }

    fn id_of(&self, task_ref: &str) -> Uuid {
        self.scheduled
            .iter()
            .rev()
            .find(|(r, _)| r == task_ref)
            .map(|(_, id)| *id)
            .unwrap()
    }

    /// `task_ref` completed with `output`.
    pub fn completed(mut self, task_ref: &str, output: Value) -> Self {
        let task_id = self.id_of(task_ref);
        self.push(Event::TaskCompleted(TaskCompleted {
            task_id,
            task_ref: task_ref.to_owned(),
            output,
            worker_id: Some("w".into()),
            started_at: None,
            errors: None,
        }));
        self
    }

    /// `task_ref` failed.
    pub fn failed(mut self, task_ref: &str, reason: &str) -> Self {
        let task_id = self.id_of(task_ref);
        self.push(Event::TaskFailed(TaskFailed {
            error_kind: None,
            task_id,
            task_ref: task_ref.to_owned(),
            reason: reason.to_owned(),
            terminal: false,
            output: Value::Null,
            worker_id: None,
            started_at: None,
        }));
        self
    }

    /// The events.
    pub fn events(&self) -> &[StoredEvent] {
        &self.events
    }

    /// The folded state.
    pub fn state(&self) -> RunState {
        RunState::from_history("wf-1", &self.events).unwrap()
    }
}
