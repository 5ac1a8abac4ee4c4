//! Lifecycle events sent together (docs/events.md, "Events sent together"): with
//! `WEFT_EVENTS_TOGETHER`, events with the same routing key that meet at the decider go as
//! one `LifecycleEvents` message on the events exchange, with that routing key — so every
//! binding that matches the message matches each event in it. Each event is the
//! `LifecycleEvent` envelope it would have been published as alone, with its trace
//! context ([`crate::activity_batch::encode`] writes the message around them).

use serde::{Deserialize, Serialize};

use crate::activity_batch::BatchedMessage;
use crate::messages::{EventMessage, LifecycleEvent};
use crate::{Envelope, Error, Result};

/// The envelope type of lifecycle events sent together.
pub const EVENTS_KIND: &str = "LifecycleEvents";

/// Lifecycle events with one routing key sent as one message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleEventBatch {
    /// The events, each as the envelope it would have been sent as alone, in the order
    /// the decider published them.
    pub messages: Vec<BatchedMessage>,
}

impl LifecycleEventBatch {
    /// The encoded `LifecycleEvents` envelope around `messages` (each an encoded
    /// `LifecycleEvent` envelope and its trace context).
    pub fn encode(messages: &[(&[u8], Option<&str>)]) -> Result<Vec<u8>> {
        crate::activity_batch::encode(EVENTS_KIND, messages)
    }

    /// Each event with its envelope, or why that message of the batch is not a
    /// `LifecycleEvent` (the others stay usable).
    pub fn into_events(self) -> Vec<Result<(Envelope, LifecycleEvent)>> {
        self.messages
            .into_iter()
            .map(|m| match m.envelope.decode::<EventMessage>()? {
                EventMessage::LifecycleEvent(event) => Ok((m.envelope, event)),
                EventMessage::LifecycleEvents(_) => Err(Error::Decode(format!(
                    "message {} of a {EVENTS_KIND} is a batch itself",
                    m.envelope.id
                ))),
            })
            .collect()
    }
}

/// The events a message of the events exchange carries: one for a `LifecycleEvent`, each
/// of a `LifecycleEvents` (an undecodable one as its error); an error for a message that
/// is neither (another type, another version).
pub fn events_of(envelope: &Envelope) -> Result<Vec<Result<(Envelope, LifecycleEvent)>>> {
    // `decode` refuses another version itself.
    match envelope.decode::<EventMessage>()? {
        EventMessage::LifecycleEvent(event) => Ok(vec![Ok((envelope.clone(), event))]),
        EventMessage::LifecycleEvents(batch) if batch.messages.is_empty() => {
            Err(Error::Decode(format!("a {EVENTS_KIND} without messages")))
        }
        EventMessage::LifecycleEvents(batch) => Ok(batch.into_events()),
    }
}

/// A lifecycle event's envelope for tests of the modules that read them.
#[cfg(test)]
pub(crate) fn test_event(run: &str, key: &str, event_id: i64) -> Envelope {
    let event = LifecycleEvent {
        event: key.into(),
        workflow_id: run.into(),
        run_id: uuid::Uuid::new_v4(),
        correlation_id: None,
        workflow_type: "greet".into(),
        event_id,
        task_id: None,
        task_ref: None,
        task_type: None,
        attempt: None,
        iteration: None,
        status: "RUNNING".into(),
        reason: None,
        time: chrono::Utc::now(),
    };
    Envelope::new(
        run,
        Some(event.run_id),
        &EventMessage::LifecycleEvent(event),
    )
    .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_sent_together_read_back_as_the_events_they_were() {
        let (a, b) = (
            test_event("wf-a", "task.scheduled", 2),
            test_event("wf-b", "task.scheduled", 5),
        );
        let (body_a, body_b) = (a.to_bytes().unwrap(), b.to_bytes().unwrap());
        let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let encoded =
            LifecycleEventBatch::encode(&[(&body_a, Some(trace)), (&body_b, None)]).unwrap();
        let envelope = Envelope::from_bytes(&encoded).unwrap();
        assert_eq!(envelope.kind, EVENTS_KIND);
        let events: Vec<(Envelope, LifecycleEvent)> = events_of(&envelope)
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].0, a, "each envelope as it was sent");
        assert_eq!(events[1].0, b);
        assert_eq!((events[0].1.event_id, events[1].1.event_id), (2, 5));
        assert_eq!(events[1].1.workflow_id, "wf-b");

        let alone = events_of(&a).unwrap();
        assert_eq!(alone.len(), 1, "a single event is one event");
        assert_eq!(alone[0].as_ref().unwrap().0, a);
    }

    #[test]
    fn a_message_that_is_no_event_is_named_and_the_others_stay() {
        let good = test_event("wf-a", "task.completed", 3).to_bytes().unwrap();
        let stranger = Envelope::new(
            "wf-b",
            None,
            &crate::messages::Command::WithdrawOffer(crate::messages::WithdrawOffer {
                queue_prefix: "weft.eager.x".into(),
            }),
        )
        .unwrap()
        .to_bytes()
        .unwrap();
        let encoded = LifecycleEventBatch::encode(&[(&good, None), (&stranger, None)]).unwrap();
        let events = events_of(&Envelope::from_bytes(&encoded).unwrap()).unwrap();
        assert!(events[0].is_ok());
        let why = events[1].as_ref().unwrap_err().to_string();
        assert!(why.contains("WithdrawOffer"), "{why}");

        let empty = Envelope::new(
            "wf",
            None,
            &EventMessage::LifecycleEvents(LifecycleEventBatch { messages: vec![] }),
        )
        .unwrap();
        assert!(
            events_of(&empty).is_err(),
            "an empty batch is refused whole"
        );
        let not_an_event = Envelope::from_bytes(&stranger).unwrap();
        assert!(events_of(&not_an_event).is_err());
    }
}
