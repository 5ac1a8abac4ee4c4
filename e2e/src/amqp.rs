//! Raw AMQP access for tests that bypass the services: publish arbitrary bytes (poison
//! messages) and read dead-letter queues.

use std::collections::BTreeMap;

use anyhow::Context as _;
use lapin::options::{BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

/// A message taken from a queue.
#[derive(Debug, Clone)]
pub struct RawMessage {
    /// The body as published.
    pub body: Vec<u8>,
    /// AMQP headers, values rendered as text.
    pub headers: BTreeMap<String, String>,
    /// The AMQP `message-id` property, when set.
    pub message_id: Option<String>,
}

/// One broker connection with a confirming publisher channel.
pub struct RawBus {
    conn: Connection,
    publisher: Channel,
}

impl std::fmt::Debug for RawBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawBus").finish_non_exhaustive()
    }
}

impl RawBus {
    /// Connects to the broker at `url`.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let conn = Connection::connect(url, ConnectionProperties::default())
            .await
            .with_context(|| format!("connecting to {url}"))?;
        let publisher = conn.create_channel().await?;
        publisher
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        Ok(Self { conn, publisher })
    }

    /// Publishes `body` as a persistent message and waits for the broker's confirm.
    /// Fails if the broker could not route it to any queue.
    pub async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        body: &[u8],
    ) -> anyhow::Result<()> {
        let confirm = self
            .publisher
            .basic_publish(
                exchange.into(),
                routing_key.into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                body,
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .with_context(|| format!("publishing to {exchange}/{routing_key}"))?
            .await
            .with_context(|| format!("confirm of the publish to {exchange}/{routing_key}"))?;
        anyhow::ensure!(
            confirm.is_ack(),
            "the broker nacked the publish to {exchange}/{routing_key}"
        );
        if let Some(returned) = confirm.take_message() {
            anyhow::bail!(
                "the publish to {exchange}/{routing_key} was returned: {} {}",
                returned.reply_code,
                returned.reply_text
            );
        }
        Ok(())
    }

    /// Takes one message from `queue` (acknowledging it), `None` when it is empty.
    /// A missing queue is an error.
    pub async fn get(&self, queue: &str) -> anyhow::Result<Option<RawMessage>> {
        // A fresh channel each time: a failed basic.get (no such queue) closes its channel.
        let channel = self.conn.create_channel().await?;
        let got = channel
            .basic_get(queue.into(), BasicGetOptions::default())
            .await
            .with_context(|| format!("basic.get on {queue}"))?;
        let Some(msg) = got else {
            let _ = channel.close(200, "done".into()).await;
            return Ok(None);
        };
        let delivery = msg.delivery;
        delivery.ack(BasicAckOptions::default()).await?;
        let headers = delivery
            .properties
            .headers()
            .as_ref()
            .map(render_headers)
            .unwrap_or_default();
        let message_id = delivery
            .properties
            .message_id()
            .as_ref()
            .map(|id| id.to_string());
        let _ = channel.close(200, "done".into()).await;
        Ok(Some(RawMessage {
            body: delivery.data,
            headers,
            message_id,
        }))
    }

    /// Closes the connection.
    pub async fn close(self) {
        let _ = self.conn.close(200, "done".into()).await;
    }
}

fn render_headers(table: &FieldTable) -> BTreeMap<String, String> {
    table
        .inner()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), render(v)))
        .collect()
}

fn render(value: &AMQPValue) -> String {
    match value {
        AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        AMQPValue::ShortString(s) => s.as_str().to_owned(),
        other => format!("{other:?}"),
    }
}
