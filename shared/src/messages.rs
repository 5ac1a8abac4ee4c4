//! The typed payloads of bus messages and of history events.
//!
//! Each enum is tagged by `type` (the envelope's `type`) and carries its body under
//! `payload` (or `attributes` for history events). A new shape is a new variant; old
//! variants stay decodable.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::dsl::WorkflowDef;
use crate::envelope::Typed;

/// Commands consumed by the decider from `weft.commands.<shard>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// A start carries its whole definition; messages are decoded one at a time and moved,
// never kept in bulk, so boxing it would only add noise to every constructor.
#[allow(clippy::large_enum_variant)]
#[serde(tag = "type", content = "payload")]
pub enum Command {
    /// Start a new workflow run.
    StartWorkflow(StartWorkflow),
    /// A worker finished an activity attempt successfully.
    ActivityCompleted(ActivityCompleted),
    /// A worker's activity attempt failed.
    ActivityFailed(ActivityFailed),
    /// A named signal for a run (completes the WAIT task whose ref is the name).
    Signal(Signal),
    /// A durable timer of the run came due (published by the history service).
    TimerFired(TimerFired),
    /// A child run (SUB_WORKFLOW) ended.
    ChildWorkflowEnded(ChildWorkflowEnded),
}

impl Typed for Command {
    fn kind(&self) -> &'static str {
        match self {
            Command::StartWorkflow(_) => "StartWorkflow",
            Command::ActivityCompleted(_) => "ActivityCompleted",
            Command::ActivityFailed(_) => "ActivityFailed",
            Command::Signal(_) => "Signal",
            Command::TimerFired(_) => "TimerFired",
            Command::ChildWorkflowEnded(_) => "ChildWorkflowEnded",
        }
    }
}

/// Where a child run reports when it ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentLink {
    /// The parent's workflow.
    pub workflow_id: String,
    /// The parent's run.
    pub run_id: Uuid,
    /// The parent's SUB_WORKFLOW task.
    pub task_id: Uuid,
}

/// Start a run of `definition` (already resolved and validated by the sender).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartWorkflow {
    /// The definition the run executes, frozen for the run's lifetime.
    pub definition: WorkflowDef,
    /// The workflow input.
    #[serde(default)]
    pub input: Value,
    /// The caller's correlation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// The parent run's workflow id, for child runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_workflow_id: Option<String>,
    /// The parent's run and task, for child runs: told when this run ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// W3C trace context of the start request, kept with the run so later decisions join its trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// A signal sent to a run by an operator or another system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Signal {
    /// The signal's name: the ref of the WAIT task it completes.
    pub name: String,
    /// Its payload: the WAIT task's output.
    #[serde(default)]
    pub payload: Value,
}

/// A child run ended; sent to its parent's shard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildWorkflowEnded {
    /// The parent's run and task.
    pub parent: ParentLink,
    /// The child workflow.
    pub child_workflow_id: String,
    /// COMPLETED, FAILED, TERMINATED or TIMED_OUT.
    pub status: String,
    /// The child's output.
    #[serde(default)]
    pub output: Value,
    /// Why it did not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A timer came due.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimerFired {
    /// The timer (from [`TimerStarted`]).
    pub timer_id: Uuid,
    /// The run that started it.
    pub run_id: Uuid,
}

/// A successful activity attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityCompleted {
    /// The task the attempt belongs to.
    pub task_id: Uuid,
    /// The run that scheduled it.
    pub run_id: Uuid,
    /// The attempt number; a result for an attempt that is no longer current is ignored.
    pub attempt: i32,
    /// The activity's output.
    #[serde(default)]
    pub output: Value,
    /// Who ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// When the worker started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
}

/// A failed activity attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityFailed {
    /// The task the attempt belongs to.
    pub task_id: Uuid,
    /// The run that scheduled it.
    pub run_id: Uuid,
    /// The attempt number.
    pub attempt: i32,
    /// Why it failed.
    pub reason: String,
    /// `FAILED_WITH_TERMINAL_ERROR`: no retry even if the policy allows one.
    #[serde(default)]
    pub terminal: bool,
    /// Optional output the worker attached to the failure.
    #[serde(default)]
    pub output: Value,
    /// Who ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// When the worker started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
}

/// Messages on `weft.activity.<task>` queues, consumed by workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload")]
pub enum ActivityMessage {
    /// Run one attempt of an activity.
    ActivityTask(ActivityTask),
}

impl Typed for ActivityMessage {
    fn kind(&self) -> &'static str {
        match self {
            ActivityMessage::ActivityTask(_) => "ActivityTask",
        }
    }
}

/// One attempt of an activity, as a worker receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityTask {
    /// Identifies the task (and, with `attempt`, the attempt).
    pub task_id: Uuid,
    /// The workflow.
    pub workflow_id: String,
    /// The run.
    pub run_id: Uuid,
    /// The task's reference name in the definition.
    pub task_ref: String,
    /// The task (definition) name; the queue it came from.
    pub task_name: String,
    /// The task type (`SIMPLE`, `HTTP`).
    pub task_type: String,
    /// 1 for the first attempt.
    pub attempt: i32,
    /// Resolved input.
    #[serde(default)]
    pub input: Value,
    /// Routing key on the commands exchange for the result (the run's shard), so
    /// workers need not know the shard count.
    pub reply_to: String,
    /// When the decider scheduled it.
    pub scheduled_at: DateTime<Utc>,
}

/// Events of a run's history (`history_events.type` / `.attributes`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
// A start carries its whole definition; messages are decoded one at a time and moved,
// never kept in bulk, so boxing it would only add noise to every constructor.
#[allow(clippy::large_enum_variant)]
#[serde(tag = "type", content = "attributes")]
pub enum Event {
    /// The run began.
    WorkflowStarted(WorkflowStarted),
    /// A task was scheduled (an activity published to its queue).
    TaskScheduled(TaskScheduled),
    /// A task completed.
    TaskCompleted(TaskCompleted),
    /// A task attempt failed.
    TaskFailed(TaskFailed),
    /// The run completed.
    WorkflowCompleted(WorkflowCompleted),
    /// The run failed.
    WorkflowFailed(WorkflowFailed),
    /// Workflow variables changed (SET_VARIABLE).
    VariablesUpdated(VariablesUpdated),
    /// The run was terminated (TERMINATE task, or an operator).
    WorkflowTerminated(WorkflowTerminated),
    /// A signal arrived (kept until a WAIT task with its name consumes it).
    SignalReceived(Signal),
    /// A durable timer was set (a WAIT's duration, a retry back-off, a timeout).
    TimerStarted(TimerStarted),
    /// A task ran out of time (`timeoutSeconds`).
    TaskTimedOut(TaskTimedOut),
    /// The run ran out of time (the definition's `timeoutSeconds`).
    WorkflowTimedOut(WorkflowTimedOut),
    /// That timer came due.
    TimerFired(TimerFired),
    /// A SUB_WORKFLOW task started its child run.
    ChildWorkflowStarted(ChildWorkflowStarted),
}

impl Event {
    /// The `type` name stored in `history_events.type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::WorkflowStarted(_) => "WorkflowStarted",
            Event::TaskScheduled(_) => "TaskScheduled",
            Event::TaskCompleted(_) => "TaskCompleted",
            Event::TaskFailed(_) => "TaskFailed",
            Event::WorkflowCompleted(_) => "WorkflowCompleted",
            Event::WorkflowFailed(_) => "WorkflowFailed",
            Event::VariablesUpdated(_) => "VariablesUpdated",
            Event::WorkflowTerminated(_) => "WorkflowTerminated",
            Event::SignalReceived(_) => "SignalReceived",
            Event::TimerStarted(_) => "TimerStarted",
            Event::TaskTimedOut(_) => "TaskTimedOut",
            Event::WorkflowTimedOut(_) => "WorkflowTimedOut",
            Event::TimerFired(_) => "TimerFired",
            Event::ChildWorkflowStarted(_) => "ChildWorkflowStarted",
        }
    }

    /// The event's attributes as stored.
    pub fn attributes(&self) -> Value {
        match serde_json::to_value(self) {
            Ok(Value::Object(mut m)) => m.remove("attributes").unwrap_or(Value::Null),
            _ => Value::Null,
        }
    }

    /// Rebuilds an event from its stored `type` and `attributes`.
    pub fn from_parts(kind: &str, attributes: Value) -> crate::Result<Self> {
        Ok(serde_json::from_value(
            serde_json::json!({ "type": kind, "attributes": attributes }),
        )?)
    }
}

/// Attributes of [`Event::WorkflowStarted`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowStarted {
    /// The definition, frozen for the run.
    pub definition: WorkflowDef,
    /// The workflow input.
    pub input: Value,
    /// The caller's correlation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// The parent workflow, for child runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_workflow_id: Option<String>,
    /// The parent's run and task, for child runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentLink>,
    /// The DO_WHILE iteration cap in force when the run started (absent: 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_loop_iterations: Option<u32>,
    /// The start request's trace context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// Attributes of [`Event::TaskScheduled`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskScheduled {
    /// The new task's id.
    pub task_id: Uuid,
    /// Its reference name.
    pub task_ref: String,
    /// Its type.
    pub task_type: String,
    /// Its (definition) name.
    pub task_name: String,
    /// Position in the run's schedule order (0-based).
    pub seq: i32,
    /// Attempt number, from 1.
    pub attempt: i32,
    /// Resolved input.
    pub input: Value,
    /// Loop iteration (from 1) of a task inside a DO_WHILE body; 0 elsewhere.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub iteration: i32,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// Attributes of [`Event::TaskCompleted`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskCompleted {
    /// The task.
    pub task_id: Uuid,
    /// Its reference name.
    pub task_ref: String,
    /// Its output.
    pub output: Value,
    /// Who ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// When the worker started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
}

/// Attributes of [`Event::TaskFailed`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskFailed {
    /// The task.
    pub task_id: Uuid,
    /// Its reference name.
    pub task_ref: String,
    /// Why.
    pub reason: String,
    /// No retry allowed.
    #[serde(default)]
    pub terminal: bool,
    /// Output attached to the failure.
    #[serde(default)]
    pub output: Value,
    /// Who ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// When the worker started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
}

/// Attributes of [`Event::WorkflowCompleted`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowCompleted {
    /// The shaped workflow output.
    pub output: Value,
}

/// Attributes of [`Event::WorkflowFailed`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowFailed {
    /// Why.
    pub reason: String,
    /// The tasks whose failure failed the run.
    pub failed_task_refs: Vec<String>,
}

/// Attributes of [`Event::ChildWorkflowStarted`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildWorkflowStarted {
    /// The SUB_WORKFLOW task.
    pub task_id: Uuid,
    /// The child's workflow id.
    pub child_workflow_id: String,
}

/// Attributes of [`Event::TaskTimedOut`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskTimedOut {
    /// The task.
    pub task_id: Uuid,
    /// Its reference name.
    pub task_ref: String,
    /// Why, as shown to operators.
    pub reason: String,
}

/// Attributes of [`Event::WorkflowTimedOut`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowTimedOut {
    /// Why, as shown to operators.
    pub reason: String,
}

/// Attributes of [`Event::TimerStarted`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimerStarted {
    /// The timer.
    pub timer_id: Uuid,
    /// The task waiting for it.
    pub task_id: Uuid,
    /// When it is due (absolute: compared with the clock, never counted down).
    pub fire_at: DateTime<Utc>,
}

/// Attributes of [`Event::VariablesUpdated`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VariablesUpdated {
    /// The variables set (merged over the existing ones).
    pub variables: serde_json::Map<String, Value>,
}

/// Attributes of [`Event::WorkflowTerminated`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowTerminated {
    /// Why.
    pub reason: String,
    /// The output the run ends with.
    #[serde(default)]
    pub output: Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Envelope;

    #[test]
    fn command_round_trips_through_envelope() {
        let cmd = Command::ActivityCompleted(ActivityCompleted {
            task_id: Uuid::nil(),
            run_id: Uuid::nil(),
            attempt: 1,
            output: serde_json::json!({"x": 1}),
            worker_id: Some("w".into()),
            started_at: None,
        });
        let env = Envelope::new("wf", None, &cmd).unwrap();
        assert_eq!(env.kind, "ActivityCompleted");
        assert_eq!(env.payload["output"]["x"], 1);
        let back = Envelope::from_bytes(&env.to_bytes().unwrap()).unwrap();
        assert_eq!(back.decode::<Command>().unwrap(), cmd);
    }

    #[test]
    fn unknown_type_is_a_decode_error() {
        let mut env = Envelope::new(
            "wf",
            None,
            &ActivityMessage::ActivityTask(ActivityTask {
                task_id: Uuid::nil(),
                workflow_id: "wf".into(),
                run_id: Uuid::nil(),
                task_ref: "r".into(),
                task_name: "t".into(),
                task_type: "SIMPLE".into(),
                attempt: 1,
                input: Value::Null,
                reply_to: "shard.0".into(),
                scheduled_at: Utc::now(),
            }),
        )
        .unwrap();
        env.kind = "Bogus".into();
        assert!(env.decode::<Command>().is_err());
    }

    #[test]
    fn event_parts_round_trip() {
        let ev = Event::WorkflowCompleted(WorkflowCompleted {
            output: serde_json::json!({"r": "x"}),
        });
        let back = Event::from_parts(ev.kind(), ev.attributes()).unwrap();
        assert_eq!(back, ev);
    }
}
