//! Start events: any AMQP client starts a run by publishing a plain JSON start request
//! (Conductor's `StartWorkflowRequest`) to the `<ns>.starts` queue (docs/start-events.md).
//!
//! Each event goes through exactly what `POST /api/workflow` does ([`start::start_run`]),
//! and is acknowledged only once the start is committed. The idempotency key is the
//! body's `idempotencyKey`, else the AMQP `message-id`: a redelivered or republished event
//! answers the first run instead of starting another. An event the REST API would refuse
//! with a 4xx (not JSON, an unknown definition, a bad field) is dead-lettered with that
//! reason in its `x-weft-dead-reason` header; one that failed on a dependency (a 5xx) is
//! given back to the queue after a pause. When the event has `reply_to`, the outcome is
//! published there: `{"workflowId": …}` or `{"error": {code, message, path}}`.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use weft::admin::CounterFamily;
use weft::bus::{ConsumeOptions, Disposition, RawDelivery};

use crate::error::ApiError;
use crate::routes::start::{self, StartRequest, Started};
use crate::state::AppState;

/// How long an event that failed on a dependency waits before it goes back to the queue
/// (so that a database outage does not spin the consumer).
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Consumes the namespace's start-event queue with `concurrency` starts at once until
/// `shutdown`; `None` when `concurrency` is 0 (this gateway takes no start events).
pub fn spawn(
    state: &AppState,
    concurrency: usize,
    shutdown: CancellationToken,
) -> Option<JoinHandle<()>> {
    if concurrency == 0 {
        tracing::info!("start events are off (WEFT_START_EVENT_CONCURRENCY=0)");
        return None;
    }
    let outcomes = state.metrics.counter_family(
        "weft_start_events",
        "Start events taken from the start-event queue, by outcome",
    );
    let queue = state.bus.names().starts_queue();
    let opts = ConsumeOptions {
        prefetch: u16::try_from(concurrency.saturating_mul(2)).unwrap_or(u16::MAX),
        concurrency,
    };
    let bus = state.bus.clone();
    let state = state.clone();
    let stop = shutdown.clone();
    let handler = move |delivery: RawDelivery| {
        let (state, outcomes, stop) = (state.clone(), outcomes.clone(), stop.clone());
        async move { handle(&state, &outcomes, &stop, delivery).await }
    };
    Some(bus.consume_raw(&queue, opts, handler, shutdown))
}

/// Starts the run an event asks for and says what becomes of the event.
async fn handle(
    state: &AppState,
    outcomes: &CounterFamily,
    shutdown: &CancellationToken,
    delivery: RawDelivery,
) -> Disposition {
    let span = tracing::info_span!("start_event", queue = %delivery.queue, message_id = ?delivery.message_id);
    weft::telemetry::set_parent(&span, delivery.traceparent.as_deref());
    let result = accept(state, &delivery).instrument(span).await;
    let (outcome, reply, disposition) = match result {
        Ok(Started {
            workflow_id,
            repeated,
        }) => {
            let outcome = if repeated { "repeated" } else { "started" };
            let reply = json!({ "workflowId": workflow_id, "repeated": repeated });
            (outcome, Some(reply), Disposition::Ack)
        }
        Err(e) if e.status().is_client_error() => {
            let reason = e.summary();
            tracing::warn!(message_id = ?delivery.message_id, %reason, "start event refused");
            let reply = json!({ "error": e.body() });
            (
                "dead_lettered",
                Some(reply),
                Disposition::DeadLetter(reason),
            )
        }
        Err(e) => {
            let error = match &e {
                ApiError::Internal(cause) => cause.to_string(),
                other => other.summary(),
            };
            tracing::warn!(message_id = ?delivery.message_id, %error, "start event failed; it goes back to the queue");
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = tokio::time::sleep(RETRY_PAUSE) => {}
            }
            ("requeued", None, Disposition::Requeue)
        }
    };
    outcomes
        .get_or_create(&vec![("outcome".to_owned(), outcome.to_owned())])
        .inc();
    if let Some(reply) = reply {
        if let Err(e) = state
            .bus
            .reply_raw(&delivery, reply.to_string().into_bytes())
            .await
        {
            tracing::warn!(reply_to = ?delivery.reply_to, error = %e, "could not answer a start event");
        }
    }
    disposition
}

/// Reads the event as `POST /api/workflow` reads its body and starts the run.
async fn accept(state: &AppState, delivery: &RawDelivery) -> Result<Started, ApiError> {
    if delivery.body.len() > state.max_body_bytes {
        return Err(ApiError::PayloadTooLarge(format!(
            "the start event has {} bytes; WEFT_MAX_BODY_BYTES is {}",
            delivery.body.len(),
            state.max_body_bytes
        )));
    }
    let json: Value = serde_json::from_slice(&delivery.body)
        .map_err(|e| ApiError::bad_request("invalid_json", format!("the body is not JSON: {e}")))?;
    let mut request = StartRequest::from_json(json)?;
    if request.idempotency_key.is_none() {
        request.idempotency_key = delivery.message_id.clone().filter(|id| !id.is_empty());
    }
    start::start_run(state, request).await
}
