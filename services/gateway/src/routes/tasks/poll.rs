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

use std::collections::HashMap;
use std::time::Duration;

use futures_util::future::join_all;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;
use serde::Deserialize;
use uuid::Uuid;
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
/// Messages one round of a batch poll takes before handing them out: each holds its
/// channel until settled, and the pool keeps 32 idle ones, so a round stays within it
/// (a batch of 100 takes several rounds).
const TAKE_PER_ROUND: usize = 16;

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
        let took = match take_up_to(&state, &queue, worker.as_deref(), count - tasks.len()).await {
            Ok(took) => took,
            Err(e) => return answer_taken(tasks, e),
        };
        let limited = took.limited;
        tasks.extend(took.tasks);
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
            let handed = match hand_out(&state, vec![taken], worker.as_deref()).await {
                Ok(handed) => handed,
                Err(e) => return answer_taken(tasks, e),
            };
            state.http.polled("pushed", handed.tasks.len());
            tasks.extend(handed.tasks);
            if handed.deferred {
                return Ok(Json(tasks));
            }
        }
    }
}

/// A batch poll that failed after it took some tasks answers with them: they are
/// claimed for the poller and acknowledged, and would otherwise wait for their heartbeat
/// timeout. With none, the error.
fn answer_taken(tasks: Vec<Task>, error: ApiError) -> Result<Json<Vec<Task>>, ApiError> {
    if tasks.is_empty() {
        return Err(error);
    }
    tracing::warn!(error = ?error, taken = tasks.len(),
        "a batch poll failed after taking tasks; answering with them");
    Ok(Json(tasks))
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

/// What [`hand_out`] made of the messages it was given.
#[derive(Default)]
struct Handed {
    /// The tasks claimed for the poller, in the order taken.
    tasks: Vec<Task>,
    /// Messages dropped: their tasks are no longer awaited (or they are no tasks).
    dropped: usize,
    /// A task over its task definition's limits went back to its queue.
    deferred: bool,
}

/// What [`take_up_to`] found.
struct TookSome {
    tasks: Vec<Task>,
    /// The queue's next task is over its task definition's limits (see [`Took::Limited`]).
    limited: bool,
}

/// Takes the next task of `queue` that is still awaited and hands it to `worker`.
pub async fn take(state: &AppState, queue: &str, worker: Option<&str>) -> Result<Took, ApiError> {
    let took = take_up_to(state, queue, worker, 1).await?;
    Ok(match took.tasks.into_iter().next() {
        Some(task) => Took::Task(Box::new(task)),
        None if took.limited => Took::Limited,
        None => Took::Nothing,
    })
}

/// Takes up to `want` tasks of `queue` that are still awaited and hands them to
/// `worker`: the messages waiting are taken first, then their tasks are read, claimed
/// and reported started together (one statement each for the lot, not one per task).
async fn take_up_to(
    state: &AppState,
    queue: &str,
    worker: Option<&str>,
    want: usize,
) -> Result<TookSome, ApiError> {
    let mut tasks = Vec::new();
    let mut stale = 0;
    while tasks.len() < want && stale < MAX_STALE_PER_POLL {
        let missing = (want - tasks.len()).min(TAKE_PER_ROUND);
        let round = take_round(state, queue, worker, missing).await;
        let (handed, drained) = match round {
            Ok(Some(round)) => round,
            Ok(None) => break,
            // Tasks of earlier rounds are claimed and acknowledged: the poller gets them.
            Err(e) if !tasks.is_empty() => {
                tracing::warn!(error = ?e, taken = tasks.len(),
                    "a batch poll's next round failed; answering with the tasks taken");
                break;
            }
            Err(e) => return Err(e),
        };
        state.http.polled("looked", handed.tasks.len());
        tasks.extend(handed.tasks);
        stale += handed.dropped;
        if handed.deferred {
            return Ok(TookSome {
                tasks,
                limited: true,
            });
        }
        if drained {
            break;
        }
    }
    Ok(TookSome {
        tasks,
        limited: false,
    })
}

/// One round of [`take_up_to`]: takes up to `missing` messages and hands them out; `None`
/// when the queue had none, else what was handed out and whether the queue ran dry.
async fn take_round(
    state: &AppState,
    queue: &str,
    worker: Option<&str>,
    missing: usize,
) -> Result<Option<(Handed, bool)>, ApiError> {
    let mut taken = Vec::with_capacity(missing);
    while taken.len() < missing {
        match state.bus.get(queue).await? {
            Some(message) => taken.push(message),
            None => break,
        }
    }
    if taken.is_empty() {
        return Ok(None);
    }
    let drained = taken.len() < missing;
    let handed = hand_out(state, taken, worker).await?;
    Ok(Some((handed, drained)))
}

/// Claims the attempts of `taken` for `worker` and acknowledges their messages; a
/// message is dropped when its task is no longer awaited, and given back when its task
/// is over its limits. Each task is reported started before the poller gets it. On a
/// failure the messages not settled yet go back to the queue.
async fn hand_out(
    state: &AppState,
    taken: Vec<Taken>,
    worker: Option<&str>,
) -> Result<Handed, ApiError> {
    let mut handed = Handed::default();
    let mut decoded: Vec<(Taken, ActivityTask)> = Vec::with_capacity(taken.len());
    for message in taken {
        let reason = match message.delivery.envelope.decode::<ActivityMessage>() {
            Ok(ActivityMessage::ActivityTask(task)) if !task.reply_to.is_empty() => {
                decoded.push((message, task));
                continue;
            }
            Ok(_) => "activity task without reply_to".to_owned(),
            Err(e) => format!("not an activity task: {e}"),
        };
        handed.dropped += 1;
        message.settle(Disposition::DeadLetter(reason)).await;
    }
    if decoded.is_empty() {
        return Ok(handed);
    }
    let ids: Vec<Uuid> = decoded.iter().map(|(_, t)| t.task_id).collect();
    let mut rows: HashMap<Uuid, view::TaskRow> = match state.store.tasks_with_runs(&ids).await {
        Ok(rows) => rows.into_iter().map(|r| (r.task.task_id, r)).collect(),
        Err(e) => {
            join_all(decoded.into_iter().map(|(m, _)| m.requeue())).await;
            return Err(e.into());
        }
    };
    let mut awaited = Vec::with_capacity(decoded.len());
    for (message, task) in decoded {
        let row = rows
            .remove(&task.task_id)
            .filter(|r| view::is_pending(r) && r.task.attempt == task.attempt);
        match row {
            Some(row) => awaited.push((message, task, row)),
            None => {
                tracing::info!(task_id = %task.task_id, attempt = task.attempt,
                    "dropping an activity task that is no longer awaited");
                handed.dropped += 1;
                message.settle(Disposition::Ack).await;
            }
        }
    }
    if awaited.is_empty() {
        return Ok(handed);
    }
    let started_at = Utc::now();
    let worker_id = worker.unwrap_or("http-worker").to_owned();
    let claims: Vec<ClaimAttempt> = awaited
        .iter()
        .map(|(message, task, _)| ClaimAttempt {
            started: AttemptStarted::of(task, &worker_id, started_at),
            // A task that waited out a worker's eager queue is claimed for that worker
            // already (docs/eager-dispatch.md): taken over, as a redelivered one.
            takeover: message.delivery.redelivered || task.eager,
        })
        .collect();
    let outcomes = match state.registry.claim_many(&claims).await {
        Ok(outcomes) if outcomes.len() == awaited.len() => outcomes,
        failed => {
            join_all(awaited.into_iter().map(|(m, _, _)| m.requeue())).await;
            let e = failed.err().unwrap_or_else(|| {
                weft::Error::Decode("the claims returned another number of outcomes".into())
            });
            return Err(e.into());
        }
    };
    let mut claimed = Vec::with_capacity(awaited.len());
    for ((message, task, row), outcome) in awaited.into_iter().zip(outcomes) {
        if outcome.claimed {
            claimed.push((message, task, row));
        } else if outcome.deferred.is_some() {
            // Back at once (a poller holds no message between polls); its next poll
            // claims it again, or another poller's does.
            tracing::debug!(task_id = %task.task_id, reason = ?outcome.deferred,
                "a polled task is over its task's limit; it goes back to its queue");
            handed.deferred = true;
            message.requeue().await;
        } else {
            tracing::info!(task_id = %task.task_id, status = ?outcome.stored.status,
                "dropping an activity task whose attempt was stopped or taken");
            handed.dropped += 1;
            message.settle(Disposition::Ack).await;
        }
    }
    let claimed_count = claimed.len();
    let acked = join_all(claimed.into_iter().map(|(message, task, row)| async move {
        let redelivered = message.delivery.redelivered;
        match message.ack().await {
            Ok(()) => Some((task, row, redelivered)),
            Err(e) => {
                // The broker gives it to someone else: do not hand it out twice.
                tracing::warn!(error = %e, task_id = %task.task_id, "could not acknowledge a polled task");
                None
            }
        }
    }))
    .await;
    let acked: Vec<(ActivityTask, view::TaskRow, bool)> = acked.into_iter().flatten().collect();
    // Counted with the dropped: a poll loops over the queue only so often.
    handed.dropped += claimed_count - acked.len();
    // Reported together: the poller is answered once every start is on its way.
    join_all(
        acked
            .iter()
            .map(|(task, _, _)| report_started(state, task, &worker_id, started_at)),
    )
    .await;
    handed.tasks = acked
        .into_iter()
        .map(|(task, row, redelivered)| {
            Task::polled(
                row,
                worker.map(str::to_owned),
                started_at,
                task.response_timeout_seconds,
                redelivered,
            )
        })
        .collect();
    Ok(handed)
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
