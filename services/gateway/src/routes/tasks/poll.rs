//! Handing activity tasks to HTTP workers: `GET /api/tasks/poll/{taskType}` and the
//! long-polling `GET /api/tasks/poll/batch/{taskType}`.
//!
//! A poll takes tasks from the same `<ns>.activity.<taskType>` queue that bus workers
//! consume; a long poll finding it empty waits for the broker to push the next task
//! (`Bus::wait_for_message`), not for its next look. A task is handed out only once its
//! attempt is claimed (running) in the heartbeat registry and acknowledged on the queue;
//! a worker that then dies goes silent, the heartbeat service times the attempt out, and
//! the decider retries the task. A task whose run moved on (terminated, skipped, reset,
//! stopped) is dropped from the queue and never handed out. A task over its task
//! definition's limits (docs/task-limits.md) goes back to its queue at once, and the poll
//! answers as if the queue had nothing more.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;
use serde::Deserialize;
use weft::bus::{Disposition, Taken};
use weft::messages::{
    ActivityMessage, ActivityStarted, ActivityTask, AttemptStarted, ClaimAttempt, Command,
};
use weft::topology::Names;
use weft::Envelope;

use super::view::{self, Task};
use crate::error::ApiError;
use crate::extract::{Path, Query};
use crate::state::AppState;

/// Most tasks one batch poll hands out.
pub const MAX_COUNT: u32 = 100;
/// Longest a batch poll waits for a task, in milliseconds.
pub const MAX_TIMEOUT_MS: u64 = 30_000;
/// Stale tasks (of runs that moved on) one poll drops before answering "none" for now.
const MAX_STALE_PER_POLL: usize = 100;
/// Longest a long poll waits for a pushed task before looking at the queue again.
const LOOK_AGAIN: Duration = Duration::from_secs(1);
/// Longest worker id accepted.
const MAX_WORKER_ID: usize = 256;

/// Query of `GET /api/tasks/poll/{taskType}`.
#[derive(Debug, Deserialize)]
pub struct PollQuery {
    workerid: Option<String>,
    /// Conductor's task domain: only tasks of that domain (docs/domains.md).
    #[serde(default)]
    domain: Option<String>,
}

/// Query of `GET /api/tasks/poll/batch/{taskType}`.
#[derive(Debug, Deserialize)]
pub struct BatchQuery {
    workerid: Option<String>,
    /// Conductor's task domain: only tasks of that domain.
    #[serde(default)]
    domain: Option<String>,
    count: Option<i64>,
    timeout: Option<i64>,
}

/// Notes the poll for Conductor's poll data (a poller that gives no `workerid` is not
/// named in it).
fn record_poll(state: &AppState, task_type: &str, worker: Option<&str>) {
    if let Some(worker) = worker {
        state.polls.saw(task_type, worker);
    }
}

/// `GET /api/tasks/poll/{taskType}`: a task, or 204 when none is waiting.
pub async fn one(
    State(state): State<AppState>,
    Path(task_type): Path<String>,
    Query(q): Query<PollQuery>,
) -> Result<Response, ApiError> {
    let worker = worker_id(q.workerid)?;
    let queue = queue_of(&state, &task_type, q.domain.as_deref()).await?;
    record_poll(&state, &task_type, worker.as_deref());
    Ok(
        match take(&state, &queue, worker.as_deref()).await?.task() {
            Some(task) => Json(task).into_response(),
            None => StatusCode::NO_CONTENT.into_response(),
        },
    )
}

/// `GET /api/tasks/poll/batch/{taskType}`: up to `count` tasks (default 1), waiting up
/// to `timeout` ms (default 100) for the first; `[]` when none came or the gateway is
/// shutting down.
pub async fn batch(
    State(state): State<AppState>,
    Path(task_type): Path<String>,
    Query(q): Query<BatchQuery>,
) -> Result<Json<Vec<Task>>, ApiError> {
    let worker = worker_id(q.workerid)?;
    let count = match q.count.unwrap_or(1) {
        n if (1..=i64::from(MAX_COUNT)).contains(&n) => n as usize,
        n => {
            return Err(ApiError::invalid(
                "invalid_query",
                "count",
                format!("count {n}: expected 1 to {MAX_COUNT}"),
            ))
        }
    };
    let timeout = match q.timeout.unwrap_or(100) {
        ms if (0..=MAX_TIMEOUT_MS as i64).contains(&ms) => Duration::from_millis(ms as u64),
        ms => {
            return Err(ApiError::invalid(
                "invalid_query",
                "timeout",
                format!("timeout {ms} ms: expected 0 to {MAX_TIMEOUT_MS}"),
            ))
        }
    };
    let queue = queue_of(&state, &task_type, q.domain.as_deref()).await?;
    record_poll(&state, &task_type, worker.as_deref());
    let deadline = tokio::time::Instant::now() + timeout;
    let mut tasks = Vec::new();
    loop {
        let mut limited = false;
        while tasks.len() < count {
            match take(&state, &queue, worker.as_deref()).await? {
                Took::Task(task) => tasks.push(*task),
                Took::Nothing => break,
                Took::Limited => {
                    limited = true;
                    break;
                }
            }
        }
        let now = tokio::time::Instant::now();
        // Over its limit, the queue's next task would be deferred again at every look:
        // the poller is answered now, as when the queue is empty, and polls again.
        if !tasks.is_empty() || limited || now >= deadline || state.shutdown.is_cancelled() {
            return Ok(Json(tasks));
        }
        // The broker pushes the queue's next task to the first poller waiting (a
        // doorbell, `Bus::wait_for_message`); the queue is looked at again now and then
        // in case a push was missed (a consumer lost and opened again).
        let until = deadline.min(now + LOOK_AGAIN);
        let pushed = state
            .bus
            .wait_for_message(&queue, until, &state.shutdown)
            .await?;
        if let Some(taken) = pushed {
            match hand_out(&state, taken, worker.as_deref()).await? {
                HandOut::Task(task) => {
                    state.http.polled("pushed");
                    tasks.push(*task);
                }
                HandOut::Deferred => return Ok(Json(tasks)),
                HandOut::Dropped => {}
            }
        }
    }
}

/// The worker id, if any; refused when absurdly long.
fn worker_id(raw: Option<String>) -> Result<Option<String>, ApiError> {
    match raw.filter(|w| !w.is_empty()) {
        Some(w) if w.len() > MAX_WORKER_ID => Err(ApiError::invalid(
            "invalid_query",
            "workerid",
            format!("workerid is longer than {MAX_WORKER_ID} bytes"),
        )),
        other => Ok(other),
    }
}

/// The activity queue of `task_type` in `domain` (none: the tasks of no domain),
/// declared if missing; 400 for a name the broker cannot carry.
pub async fn queue_of(
    state: &AppState,
    task_type: &str,
    domain: Option<&str>,
) -> Result<String, ApiError> {
    let domain = domain_of(domain)?;
    let key = weft::topology::activity_key(task_type, domain);
    let queue = state.bus.names().activity_queue(&key);
    // 255 bytes is AMQP's limit on names; the DLQ's is the longest.
    if task_type.is_empty() || Names::dlq(&queue).len() > 255 {
        return Err(ApiError::invalid(
            "invalid_task_type",
            "taskType",
            format!("task type {task_type:?} is empty or too long for a queue name"),
        ));
    }
    state.bus.declare_activity_queue(&key).await?;
    Ok(queue)
}

/// Conductor's `domain` query parameter: `None` for none, empty or `NO_DOMAIN`; 400 for
/// one that cannot name a queue.
pub fn domain_of(domain: Option<&str>) -> Result<Option<&str>, ApiError> {
    match domain.filter(|d| !d.is_empty() && *d != "NO_DOMAIN") {
        Some(d) if !weft::topology::is_valid_domain(d) => Err(ApiError::invalid(
            "invalid_query",
            "domain",
            "a domain is 1 to 64 letters, digits, '_' or '-'",
        )),
        domain => Ok(domain),
    }
}

/// What one [`take`] found.
#[derive(Debug)]
pub enum Took {
    /// A task, claimed for the poller.
    Task(Box<Task>),
    /// The queue has no task to hand out right now.
    Nothing,
    /// The next task is over its task definition's limits (docs/task-limits.md): it
    /// went back to its queue at once, still SCHEDULED; for the poller, the queue has
    /// nothing more for now.
    Limited,
}

impl Took {
    /// The task, if one was taken.
    pub fn task(self) -> Option<Task> {
        match self {
            Took::Task(task) => Some(*task),
            Took::Nothing | Took::Limited => None,
        }
    }
}

/// What became of one message.
enum HandOut {
    Task(Box<Task>),
    /// Dropped: its task is no longer awaited.
    Dropped,
    /// Given back: over its task's limits.
    Deferred,
}

/// Takes the next task of `queue` that is still awaited and hands it to `worker`.
pub async fn take(state: &AppState, queue: &str, worker: Option<&str>) -> Result<Took, ApiError> {
    for _ in 0..MAX_STALE_PER_POLL {
        let Some(taken) = state.bus.get(queue).await? else {
            return Ok(Took::Nothing);
        };
        match hand_out(state, taken, worker).await? {
            HandOut::Task(task) => {
                state.http.polled("looked");
                return Ok(Took::Task(task));
            }
            HandOut::Deferred => return Ok(Took::Limited),
            HandOut::Dropped => {}
        }
    }
    Ok(Took::Nothing)
}

/// Registers the attempt and acknowledges the message; the message is dropped when the
/// task is no longer awaited, and given back when its task is over its limits. On a
/// failure the message goes back to the queue.
async fn hand_out(
    state: &AppState,
    taken: Taken,
    worker: Option<&str>,
) -> Result<HandOut, ApiError> {
    let task = match taken.delivery.envelope.decode::<ActivityMessage>() {
        Ok(ActivityMessage::ActivityTask(task)) if !task.reply_to.is_empty() => task,
        Ok(_) => {
            taken
                .settle(Disposition::DeadLetter(
                    "activity task without reply_to".into(),
                ))
                .await;
            return Ok(HandOut::Dropped);
        }
        Err(e) => {
            taken
                .settle(Disposition::DeadLetter(format!(
                    "not an activity task: {e}"
                )))
                .await;
            return Ok(HandOut::Dropped);
        }
    };
    let row = match view::load(&state.store, task.task_id).await {
        Ok(row) => row,
        Err(e) => {
            taken.requeue().await;
            return Err(e.into());
        }
    };
    let Some(row) = row.filter(|r| view::is_pending(r) && r.task.attempt == task.attempt) else {
        tracing::info!(task_id = %task.task_id, attempt = task.attempt,
            "dropping an activity task that is no longer awaited");
        taken.settle(Disposition::Ack).await;
        return Ok(HandOut::Dropped);
    };
    let started_at = Utc::now();
    let worker_id = worker.unwrap_or("http-worker").to_owned();
    let claim = ClaimAttempt {
        started: AttemptStarted::of(&task, &worker_id, started_at),
        // A task that waited out a worker's eager queue is claimed for that worker already
        // (docs/eager-dispatch.md): taken over, as a redelivered one.
        takeover: taken.delivery.redelivered || task.eager,
    };
    match state.registry.claim(&claim).await {
        Ok(outcome) if outcome.claimed => {}
        Ok(outcome) if outcome.deferred.is_some() => {
            // Back at once (a poller holds no message between polls); its next poll
            // claims it again, or another poller's does.
            tracing::debug!(task_id = %task.task_id, reason = ?outcome.deferred,
                "a polled task is over its task's limit; it goes back to its queue");
            taken.requeue().await;
            return Ok(HandOut::Deferred);
        }
        Ok(outcome) => {
            tracing::info!(task_id = %task.task_id, status = ?outcome.stored.status,
                "dropping an activity task whose attempt was stopped or taken");
            taken.settle(Disposition::Ack).await;
            return Ok(HandOut::Dropped);
        }
        Err(e) => {
            taken.requeue().await;
            return Err(e.into());
        }
    }
    let redelivered = taken.delivery.redelivered;
    if let Err(e) = taken.ack().await {
        // The broker gives it to someone else: do not hand it out twice.
        tracing::warn!(error = %e, task_id = %task.task_id, "could not acknowledge a polled task");
        return Ok(HandOut::Dropped);
    }
    report_started(state, &task, &worker_id, started_at).await;
    Ok(HandOut::Task(Box::new(Task::polled(
        row,
        worker.map(str::to_owned),
        started_at,
        task.response_timeout_seconds,
        redelivered,
    ))))
}

/// Tells the run the task is IN_PROGRESS before the poller gets it: the start is then
/// ahead, in the run's queue, of anything the worker sends about the task. A result
/// would overtake a start harmlessly (the decider ignores a start of an ended task), but
/// a worker giving the task back (IN_PROGRESS with `callbackAfterSeconds`) would be
/// undone by its own late start, the task read IN_PROGRESS again while nobody runs it.
/// A failed report is logged: the task is the poller's all the same.
async fn report_started(
    state: &AppState,
    task: &ActivityTask,
    worker_id: &str,
    started_at: chrono::DateTime<Utc>,
) {
    let command = Command::ActivityStarted(ActivityStarted {
        task_id: task.task_id,
        run_id: task.run_id,
        attempt: task.attempt,
        worker_id: Some(worker_id.to_owned()),
        started_at,
    });
    let envelope = match Envelope::new(&task.workflow_id, Some(task.run_id), &command) {
        Ok(envelope) => envelope,
        Err(e) => return tracing::warn!(error = %e, "could not encode ActivityStarted"),
    };
    let exchange = state.bus.names().commands_exchange();
    if let Err(e) = state
        .bus
        .publish(&exchange, &task.reply_to, &envelope)
        .await
    {
        tracing::warn!(error = %e, "could not report a polled task's start");
    }
}
