//! Telling the heartbeat service's registry that an attempt started or finished
//! (`AttemptStarted` / `AttemptFinished` on the namespace's heartbeat queue).

use chrono::{DateTime, Utc};
use serde_json::Value;
use tracing::Instrument;

use crate::bus::Bus;
use crate::messages::{
    ActivityTask, AttemptFinished, AttemptRef, AttemptStarted, HeartbeatMessage,
};
use crate::{Envelope, Result};

/// How an attempt ended, as the registry records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    Completed,
    Failed,
    FailedTerminal,
}

impl Ended {
    fn status(self) -> &'static str {
        match self {
            Ended::Completed => "COMPLETED",
            Ended::Failed => "FAILED",
            Ended::FailedTerminal => "FAILED_WITH_TERMINAL_ERROR",
        }
    }
}

/// Bytes of `value` as JSON.
pub(super) fn json_len(value: &Value) -> i64 {
    serde_json::to_vec(value).map_or(0, |v| i64::try_from(v.len()).unwrap_or(i64::MAX))
}

async fn send(
    bus: &Bus,
    workflow_id: &str,
    run_id: uuid::Uuid,
    message: &HeartbeatMessage,
) -> Result<()> {
    let envelope = Envelope::new(workflow_id, Some(run_id), message)?;
    let queue = bus.names().heartbeat_queue();
    bus.publish("", &queue, &envelope).await
}

/// Registers the attempt, waiting for the broker's confirm: the registry must know the
/// attempt before its first heartbeat, or that heartbeat is answered NOT_FOUND and stops
/// it.
pub(super) async fn started(
    bus: &Bus,
    worker_id: &str,
    task: &ActivityTask,
    started_at: DateTime<Utc>,
) -> Result<()> {
    let message = HeartbeatMessage::AttemptStarted(AttemptStarted::of(task, worker_id, started_at));
    send(bus, &task.workflow_id, task.run_id, &message).await
}

/// Tells the registry the attempt's result was published, in the background: if this
/// message is lost the registry times the attempt out, and the decider ignores a timeout
/// of an attempt it already has the result of.
pub(super) fn finished(
    bus: &Bus,
    (workflow_id, run_id): (&str, uuid::Uuid),
    attempt: AttemptRef,
    ended: Ended,
    output_bytes: i64,
) {
    let message = HeartbeatMessage::AttemptFinished(AttemptFinished {
        attempt,
        status: ended.status().to_owned(),
        output_bytes,
    });
    let (bus, workflow_id) = (bus.clone(), workflow_id.to_owned());
    tokio::spawn(
        async move {
            if let Err(e) = send(&bus, &workflow_id, run_id, &message).await {
                tracing::warn!(error = %e, "could not tell the heartbeat service the attempt finished");
            }
        }
        .in_current_span(),
    );
}
