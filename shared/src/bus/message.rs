//! Building the messages Weft sends, whatever the transport: every message carries its
//! envelope's id, the trace context and the time it was published (for the consumer's
//! `queue.wait` span).

use uuid::Uuid;

use super::transport::{HeaderValue, Message};
use super::TRACEPARENT_HEADER;

/// A persistent message with `body`, its id and the current publish time, and the
/// priority its envelope carries (if any).
pub(crate) fn outgoing(
    body: Vec<u8>,
    message_id: Option<Uuid>,
    traceparent: Option<&str>,
) -> Message {
    let priority = envelope_head(&body)
        .priority
        .map_or(0, super::priority::level);
    outgoing_with_priority(body, message_id, traceparent, priority)
}

/// [`outgoing`] for a caller that knows the message's priority level already.
pub(crate) fn outgoing_with_priority(
    body: Vec<u8>,
    message_id: Option<Uuid>,
    traceparent: Option<&str>,
    priority: u8,
) -> Message {
    let mut message = Message {
        body,
        message_id: message_id.map(|id| id.to_string()),
        persistent: true,
        priority,
        ..Message::default()
    };
    if let Some(tp) = traceparent {
        message.headers.insert(
            TRACEPARENT_HEADER.to_owned(),
            HeaderValue::Text(tp.to_owned()),
        );
    }
    message.headers.insert(
        crate::telemetry::PUBLISHED_AT_HEADER.to_owned(),
        HeaderValue::Int(crate::telemetry::now_micros()),
    );
    message
}

/// What the bus reads of an encoded envelope without decoding its payload.
#[derive(Debug, Default, PartialEq, Eq, serde::Deserialize)]
pub(crate) struct Head {
    /// Its id.
    pub id: Option<Uuid>,
    /// Its `type`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Its run's priority (Conductor's 0–99).
    pub priority: Option<u8>,
}

/// The head of an encoded envelope; all `None` when the body is not one.
pub(crate) fn envelope_head(body: &[u8]) -> Head {
    serde_json::from_slice::<Head>(body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_persistent_with_id_trace_and_publish_time() {
        let id = Uuid::new_v4();
        let m = outgoing(b"{}".to_vec(), Some(id), Some("00-abc-def-01"));
        assert!(m.persistent);
        assert_eq!(m.message_id, Some(id.to_string()));
        assert_eq!(m.header_text(TRACEPARENT_HEADER), Some("00-abc-def-01"));
        assert!(m
            .header_int(crate::telemetry::PUBLISHED_AT_HEADER)
            .is_some_and(|t| t > 0));
    }

    #[test]
    fn envelope_head_reads_the_id_and_type_of_an_encoded_envelope() {
        let id = Uuid::new_v4();
        let body = serde_json::json!({ "id": id, "type": "X", "payload": {} }).to_string();
        let head = envelope_head(body.as_bytes());
        assert_eq!((head.id, head.kind), (Some(id), Some("X".to_owned())));
        assert_eq!(head.priority, None);
        assert_eq!(envelope_head(b"not json"), Head::default());
        let urgent = serde_json::json!({ "id": id, "type": "X", "priority": 87 }).to_string();
        assert_eq!(envelope_head(urgent.as_bytes()).priority, Some(87));
    }
}
