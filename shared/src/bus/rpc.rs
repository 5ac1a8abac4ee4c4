//! Request/reply ([`Bus::call`], [`Bus::reply`]), the parts every transport shares: the
//! messages (transient, with the envelope's id and the trace context) and the time limit.
//! How a reply finds its caller is the transport's business (RabbitMQ's direct reply-to,
//! or a table of waiting calls in process).

use std::time::Duration;

use super::transport::Message;
use super::{check_name, message, Bus, Delivery, RawDelivery};
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

    /// Publishes `body` as it is (JSON from outside Weft's envelopes) as a request, with
    /// `message_id` when given, and returns the reply's body: what an outside publisher
    /// asking for an answer does (a start event with `reply_to`). Transient, like
    /// [`Bus::call`], and bounded by `timeout` the same way.
    pub async fn call_raw(
        &self,
        exchange: &str,
        routing_key: &str,
        body: Vec<u8>,
        message_id: Option<&str>,
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        check_name("exchange", exchange)?;
        check_name("routing key", routing_key)?;
        let mut request = message::outgoing(body, None, None);
        request.persistent = false;
        request.message_id = message_id.map(str::to_owned);
        self.count("raw", false);
        let exchange_and_reply = self.transport.request(exchange, routing_key, request);
        match tokio::time::timeout(timeout, exchange_and_reply).await {
            Ok(reply) => Ok(reply?.body),
            Err(_) => Err(Error::NoReply {
                exchange: exchange.to_owned(),
                routing_key: routing_key.to_owned(),
                timeout,
            }),
        }
    }

    /// Answers a message consumed with [`Bus::consume_raw`] that asked for a reply:
    /// publishes `body` (JSON) to the default exchange with its `reply_to` as routing key
    /// and its `correlation_id`; RabbitMQ's direct reply-to works. A no-op when it asked
    /// for none. Transient, like every reply.
    pub async fn reply_raw(&self, delivery: &RawDelivery, body: Vec<u8>) -> Result<()> {
        let Some(reply_to) = delivery.reply_to.as_deref() else {
            return Ok(());
        };
        check_name("reply-to", reply_to)?;
        let mut message = message::outgoing(body, None, None);
        message.persistent = false;
        message.correlation_id = delivery.correlation_id.clone();
        self.count("reply", false);
        self.transport.publish("", reply_to, message).await
    }
}
