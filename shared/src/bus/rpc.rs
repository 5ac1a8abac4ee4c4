//! Request/reply ([`Bus::call`], [`Bus::reply`]), the parts every transport shares: the
//! messages (transient, with the envelope's id and the trace context) and the time limit.
//! How a reply finds its caller is the transport's business (RabbitMQ's direct reply-to,
//! or a table of waiting calls in process).

use std::time::Duration;

use super::transport::Message;
use super::{check_name, message, Bus, Delivery};
use crate::{Envelope, Error, Result};

/// A request or reply: transient (kept in memory only: a request outlives its caller
/// only as long as its timeout, so a reply the broker lost is the same as a late one).
fn transient(envelope: &Envelope, correlation_id: Option<&str>) -> Result<Message> {
    let traceparent = crate::telemetry::current_traceparent();
    let mut message = message::outgoing(
        envelope.to_bytes()?,
        Some(envelope.id),
        traceparent.as_deref(),
    );
    message.persistent = false;
    message.correlation_id = correlation_id.map(str::to_owned);
    Ok(message)
}

impl Bus {
    /// Sends `envelope` to `exchange`/`routing_key` as a request and waits for its reply
    /// (at most `timeout`, everything included: connecting, publishing, the answer).
    ///
    /// The responder answers with [`Bus::reply`]. Fails with [`Error::NoReply`] when no
    /// reply came in time (responder down or slow, request routed nowhere), and with
    /// [`Error::Bus`] when the connection or the reply channel was lost meanwhile; both
    /// can be retried. Requests are transient and not confirmed: a lost one is a timeout.
    pub async fn call(
        &self,
        exchange: &str,
        routing_key: &str,
        envelope: &Envelope,
        timeout: Duration,
    ) -> Result<Envelope> {
        check_name("exchange", exchange)?;
        check_name("routing key", routing_key)?;
        let request = transient(envelope, None)?;
        self.count(&envelope.kind, false);
        let exchange_and_reply = async {
            let reply = self
                .transport
                .request(exchange, routing_key, request)
                .await?;
            Envelope::from_bytes(&reply.body)
        };
        tokio::time::timeout(timeout, exchange_and_reply)
            .await
            .unwrap_or_else(|_| {
                Err(Error::NoReply {
                    exchange: exchange.to_owned(),
                    routing_key: routing_key.to_owned(),
                    timeout,
                })
            })
    }

    /// Answers a request received by a consumer: publishes `envelope` to the default
    /// exchange with the request's `reply_to` as routing key and its `correlation_id`.
    ///
    /// A no-op when the delivery asked for no reply. Transient; waits only for the
    /// broker's confirm (a caller that is gone makes the broker drop the reply).
    pub async fn reply(&self, delivery: &Delivery, envelope: &Envelope) -> Result<()> {
        let Some(reply_to) = delivery.reply_to.as_deref() else {
            return Ok(());
        };
        check_name("reply-to", reply_to)?;
        let message = transient(envelope, delivery.correlation_id.as_deref())?;
        self.count(&envelope.kind, false);
        self.transport.publish("", reply_to, message).await
    }
}
