//! A deterministic run simulator for interpreter tests: it plays the engine (decisions
//! become events, as `events_for` says) and the workers (complete or fail a pending
//! activity), with no database or broker.

use chrono::{TimeZone, Utc};
use serde_json::Value;
use uuid::Uuid;
use weft::messages::{Event, TaskCompleted, TaskFailed};
use weft::store::runs::StoredEvent;

use crate::history_builder::HistoryBuilder;
use crate::interpreter::{decide, events_for};
use crate::state::{is_activity, RunState};

/// One simulated run.
#[derive(Clone)]
pub struct Sim {
    pub state: RunState,
    /// The whole history, oldest first.
    pub events: Vec<StoredEvent>,
}

impl Sim {
    /// Starts `definition` with `input` and lets the interpreter run.
    pub fn start(definition: Value, input: Value) -> Self {
        Self::start_from(HistoryBuilder::started(definition, input))
    }

    /// Starts the run `builder` begins and lets the interpreter run.
    pub fn start_from(builder: HistoryBuilder) -> Self {
        let mut sim = Self {
            state: builder.state(),
            events: builder.events().to_vec(),
        };
        sim.settle();
        sim
    }

    pub fn append(&mut self, event: Event) {
        if let Some(unconsumed) = self.state.unconsumed_at_end(&event) {
            self.append(unconsumed);
        }
        let stored = StoredEvent {
            run_id: self.state.run_id,
            event_id: self.state.version + 1,
            time: Utc
                .timestamp_opt(1_700_000_000 + self.state.version, 0)
                .unwrap(),
            event,
        };
        let pending_before: Vec<Uuid> = self
            .state
            .tasks
            .iter()
            .filter(|t| t.status.is_pending())
            .map(|t| t.task_id)
            .collect();
        self.state.apply(&stored).unwrap();
        self.events.push(stored);
        // Every simulated run checks the index against a pass over the tasks.
        self.state.assert_index_agrees();
        let ended: Vec<Uuid> = pending_before
            .into_iter()
            .filter(|id| self.state.task(*id).is_some_and(|t| !t.status.is_pending()))
            .collect();
        let ended_by_index: Vec<Uuid> = self
            .state
            .ended_by_last_event()
            .iter()
            .map(|t| t.task_id)
            .collect();
        assert_eq!(ended_by_index, ended, "the tasks an event ended");
    }

    /// The simulated clock: one second per event.
    pub fn now(&self) -> chrono::DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + self.state.version, 0)
            .unwrap()
    }

    /// The history service fires every timer of the run that is due by `at`.
    pub fn fire_timers_due_by(&mut self, at: chrono::DateTime<Utc>) -> &mut Self {
        let due: Vec<uuid::Uuid> = self
            .state
            .timers
            .iter()
            .filter(|t| !t.fired && t.fire_at <= at)
            .map(|t| t.timer_id)
            .collect();
        for timer_id in due {
            self.append(Event::TimerFired(weft::messages::TimerFired {
                timer_id,
                run_id: self.state.run_id,
            }));
        }
        self.settle();
        self
    }

    /// Applies decisions until there are none; then checks replay: the history folded
    /// again from its first event gives the same run, which decides nothing more.
    pub fn settle(&mut self) {
        for _ in 0..1_000 {
            let decisions = decide(&self.state);
            if decisions.is_empty() {
                self.check_replay();
                return;
            }
            for d in decisions {
                for e in events_for(d, self.state.tasks.len() as i32, self.now()) {
                    self.append(e);
                }
            }
        }
        panic!("the interpreter did not settle");
    }

    /// Deterministic replay (DESIGN.md §3.4): folding the recorded history again yields
    /// the state the simulation reached, and the same (no) decisions.
    fn check_replay(&self) {
        let replayed = RunState::from_history(&self.state.workflow_id, &self.events)
            .unwrap_or_else(|e| panic!("replay failed: {e}"));
        assert_eq!(
            replayed, self.state,
            "replaying the history gives another run"
        );
        assert!(
            decide(&replayed).is_empty(),
            "the replayed run decides again: {:?}",
            decide(&replayed)
        );
    }

    /// Refs of activities waiting for a worker, in schedule order.
    pub fn pending(&self) -> Vec<String> {
        self.state
            .tasks
            .iter()
            .filter(|t| t.status.is_pending() && is_activity(&t.task_type))
            .map(|t| t.task_ref.clone())
            .collect()
    }

    fn pending_id(&self, task_ref: &str) -> uuid::Uuid {
        self.state
            .tasks
            .iter()
            .find(|t| t.task_ref == task_ref && t.status.is_pending() && is_activity(&t.task_type))
            .unwrap_or_else(|| panic!("{task_ref} is not pending; pending: {:?}", self.pending()))
            .task_id
    }

    /// A worker completes `task_ref` with `output`.
    pub fn complete(&mut self, task_ref: &str, output: Value) -> &mut Self {
        let task_id = self.pending_id(task_ref);
        self.append(Event::TaskCompleted(TaskCompleted {
            task_id,
            task_ref: task_ref.to_owned(),
            output,
            worker_id: None,
            started_at: None,
            errors: None,
        }));
        self.settle();
        self
    }

    /// A worker takes `task_ref` (IN_PROGRESS from now on).
    pub fn take(&mut self, task_ref: &str) -> &mut Self {
        let task_id = self.pending_id(task_ref);
        let started_at = self.now();
        self.append(Event::TaskStarted(weft::messages::TaskStarted {
            task_id,
            task_ref: task_ref.to_owned(),
            worker_id: Some("sim".into()),
            started_at,
        }));
        self.settle();
        self
    }

    /// A worker fails `task_ref` with an error of `kind`.
    pub fn fail_with_kind(&mut self, task_ref: &str, kind: &str) -> &mut Self {
        let task_id = self.pending_id(task_ref);
        self.append(Event::TaskFailed(TaskFailed {
            error_kind: Some(kind.to_owned()),
            task_id,
            task_ref: task_ref.to_owned(),
            reason: format!("{kind} happened"),
            terminal: false,
            output: Value::Null,
            worker_id: None,
            started_at: None,
        }));
        self.settle();
        self
    }

    /// A worker fails `task_ref`.
    pub fn fail(&mut self, task_ref: &str, reason: &str) -> &mut Self {
        let task_id = self.pending_id(task_ref);
        self.append(Event::TaskFailed(TaskFailed {
            error_kind: None,
            task_id,
            task_ref: task_ref.to_owned(),
            reason: reason.to_owned(),
            terminal: false,
            output: Value::Null,
            worker_id: None,
            started_at: None,
        }));
        self.settle();
        self
    }

    /// Applies `command` as the engine would (ignored commands change nothing).
    pub fn command(&mut self, command: &weft::messages::Command) -> &mut Self {
        if let crate::apply::Applied::Events(events) =
            crate::apply::apply_command(&self.state, command)
        {
            for e in events {
                self.append(e);
            }
            self.settle();
        }
        self
    }

    /// What `command` comes to, without applying it.
    pub fn verdict(&self, command: &weft::messages::Command) -> crate::apply::Applied {
        crate::apply::apply_command(&self.state, command)
    }

    /// Applies a reset as the engine would: this run ends TERMINATED and the successor
    /// run is returned, settled.
    pub fn reset(&mut self, reset: &weft::messages::Reset) -> Sim {
        let crate::apply::Applied::Reset(plan) =
            self.verdict(&weft::messages::Command::Reset(reset.clone()))
        else {
            panic!(
                "reset refused: {:?}",
                self.verdict(&weft::messages::Command::Reset(reset.clone()))
            );
        };
        let (state, events) = crate::reset::successor_history(
            &self.events,
            &plan,
            reset,
            &self.state.workflow_id,
            self.now(),
            Vec::new(),
        )
        .unwrap();
        if self.state.status == crate::state::RunStatus::Running {
            self.append(Event::WorkflowTerminated(
                weft::messages::WorkflowTerminated {
                    reason: "reset".into(),
                    output: Value::Null,
                },
            ));
        }
        let mut next = Sim { state, events };
        next.settle();
        next
    }

    /// A signal `name` with `payload` arrives.
    pub fn signal(&mut self, name: &str, payload: Value) -> &mut Self {
        self.append(Event::SignalReceived(weft::messages::Signal {
            name: name.to_owned(),
            payload,
        }));
        self.settle();
        self
    }

    /// `(ref, type, status)` of every task, in schedule order.
    pub fn trail(&self) -> Vec<(String, String, &'static str)> {
        self.state
            .tasks
            .iter()
            .map(|t| (t.task_ref.clone(), t.task_type.clone(), t.status.as_str()))
            .collect()
    }
}
