//! Turning an [`Inbound`] message into a [`Delivery`] and settling it afterwards, the
//! same for every transport.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;

use super::transport::{Acker, Inbound};
use super::{Delivery, Disposition, RawDelivery, TRACEPARENT_HEADER};
use crate::Envelope;

/// Decodes the envelope of `inbound` (the consumer continues the trace after a
/// `queue.wait` span for the time the message spent in `queue`); the error is the reason
/// to dead-letter it.
pub(crate) fn decode(inbound: &Inbound, queue: &str) -> Result<Delivery, String> {
    let message = &inbound.message;
    let envelope = Envelope::from_bytes(&message.body).map_err(|e| e.to_string())?;
    let traceparent = crate::telemetry::queue_wait(
        message.header_text(TRACEPARENT_HEADER),
        message.header_int(crate::telemetry::PUBLISHED_AT_HEADER),
        queue,
    );
    Ok(Delivery {
        envelope,
        traceparent,
        redelivered: inbound.redelivered,
        queue: queue.to_owned(),
        reply_to: message.reply_to.clone(),
        correlation_id: message.correlation_id.clone(),
    })
}

/// Hands over `inbound` as it came (for queues that publishers outside Weft write to);
/// never fails: what the body means is the handler's business.
pub(crate) fn raw(inbound: &Inbound, queue: &str) -> Result<RawDelivery, String> {
    let message = &inbound.message;
    let traceparent = crate::telemetry::queue_wait(
        message.header_text(TRACEPARENT_HEADER),
        message.header_int(crate::telemetry::PUBLISHED_AT_HEADER),
        queue,
    );
    Ok(RawDelivery {
        body: message.body.clone(),
        message_id: message.message_id.clone(),
        traceparent,
        redelivered: inbound.redelivered,
        queue: queue.to_owned(),
        reply_to: message.reply_to.clone(),
        correlation_id: message.correlation_id.clone(),
        headers: message.headers.clone(),
    })
}

/// Runs `fut`, turning a panic into its message (a handler's panic settles its messages
/// instead of ending the consumer).
pub async fn guarded<Fut: Future>(fut: Fut) -> Result<Fut::Output, String> {
    AssertUnwindSafe(fut).catch_unwind().await.map_err(|panic| {
        let panic: &(dyn Any + Send) = &*panic;
        panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-text panic".to_owned())
    })
}

/// Acks, requeues or dead-letters a delivery. Failures are logged: the broker gives back
/// whatever was not acknowledged once its consumer closes.
pub(crate) async fn settle(acker: &dyn Acker, queue: &str, disposition: Disposition) {
    let res = match disposition {
        Disposition::Ack => acker.ack().await,
        Disposition::Requeue => acker.requeue().await,
        Disposition::DeadLetter(reason) => {
            tracing::warn!(%queue, %reason, "dead-lettering a message");
            match acker.dead_letter(queue, &reason).await {
                Ok(()) => Ok(()),
                Err(e) => {
                    // Not in the DLQ: keep it in its queue rather than lose it.
                    tracing::error!(%queue, error = %e, "dead-lettering failed, requeueing");
                    acker.requeue().await
                }
            }
        }
    };
    if let Err(e) = res {
        tracing::warn!(%queue, error = %e, "settling a delivery failed; the broker will redeliver it");
    }
}
