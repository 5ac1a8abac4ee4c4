//! The message envelope every bus message travels in (DESIGN.md §4).

use chrono::{DateTime, Utc};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use uuid::Uuid;

use crate::{Error, Result};

/// Schema version of the envelope and of every payload defined in [`crate::messages`].
pub const VERSION: u32 = 1;

/// `{ id, type, version, workflowId, runId, time, payload }`; the W3C `traceparent`
/// travels beside it in the AMQP headers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    /// Unique per message; consumers deduplicate on it.
    pub id: Uuid,
    /// The payload's type name, e.g. `StartWorkflow`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Schema version of `payload`.
    pub version: u32,
    /// The workflow the message is about.
    pub workflow_id: String,
    /// The run the message is about, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Uuid>,
    /// When the message was created.
    pub time: DateTime<Utc>,
    /// The run's priority (Conductor's 0–99, higher first), on the activity tasks of a run
    /// started with one: the broker hands them out ahead of lower ones
    /// (`crate::bus::priority`). Absent means 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// The typed body, see [`Typed`].
    pub payload: serde_json::Value,
}

/// A payload type that knows its envelope `type` name.
pub trait Typed: Serialize + DeserializeOwned {
    /// Reads the `type` name of this value.
    fn kind(&self) -> &'static str;
}

impl Envelope {
    /// Wraps a typed payload with a fresh id and the current time.
    pub fn new<T: Typed>(workflow_id: &str, run_id: Option<Uuid>, payload: &T) -> Result<Self> {
        Ok(Self {
            id: crate::ids::new_id(),
            kind: payload.kind().to_owned(),
            version: VERSION,
            workflow_id: workflow_id.to_owned(),
            run_id,
            time: Utc::now(),
            priority: None,
            payload: match serde_json::to_value(payload)? {
                serde_json::Value::Object(mut tagged) => {
                    tagged.remove("payload").unwrap_or(serde_json::Value::Null)
                }
                other => other,
            },
        })
    }

    /// The same message with `priority` (Conductor's 0–99; 0 leaves it unset).
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.priority = u8::try_from(priority.clamp(0, 99)).ok().filter(|p| *p > 0);
        self
    }

    /// Decodes the payload as `T` (an enum tagged by `type`, carrying `payload`).
    pub fn decode<T: Typed>(&self) -> Result<T> {
        if self.version != VERSION {
            return Err(Error::Decode(format!(
                "{} has unsupported version {}",
                self.kind, self.version
            )));
        }
        // The enum is read from `{type, payload}` as a map over borrowed values: building
        // that object would copy the whole payload tree for every message decoded.
        let kind = serde_json::Value::String(self.kind.clone());
        let tagged = serde::de::value::MapDeserializer::<_, serde_json::Error>::new(
            [("type", &kind), ("payload", &self.payload)].into_iter(),
        );
        T::deserialize(tagged).map_err(|e| Error::Decode(format!("{} payload: {e}", self.kind)))
    }

    /// The JSON bytes put on the wire.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        Ok(serde_json::to_vec(self)?)
    }

    /// Parses wire bytes; the error names what is wrong.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        serde_json::from_slice(bytes).map_err(|e| Error::Decode(format!("envelope: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{Command, TimerFired};

    fn timer_fired() -> Command {
        Command::TimerFired(TimerFired {
            timer_id: Uuid::from_u128(7),
            run_id: Uuid::from_u128(9),
        })
    }

    #[test]
    fn a_payload_decodes_to_what_was_wrapped_through_the_wire() {
        let envelope = Envelope::new("wf", None, &timer_fired()).unwrap();
        let wire = Envelope::from_bytes(&envelope.to_bytes().unwrap()).unwrap();
        assert_eq!(wire.decode::<Command>().unwrap(), timer_fired());
        assert_eq!(
            wire.payload, envelope.payload,
            "decoding leaves the payload as it was"
        );
    }

    #[test]
    fn a_payload_that_does_not_fit_its_type_names_the_type_and_the_field() {
        let mut envelope = Envelope::new("wf", None, &timer_fired()).unwrap();
        envelope.payload = serde_json::json!({"timerId": Uuid::from_u128(7)});
        let error = envelope.decode::<Command>().unwrap_err().to_string();
        assert!(error.contains("TimerFired payload"), "{error}");
        assert!(error.contains("runId"), "{error}");

        envelope.kind = "NoSuchCommand".to_owned();
        let error = envelope.decode::<Command>().unwrap_err().to_string();
        assert!(error.contains("NoSuchCommand"), "{error}");
    }
}
