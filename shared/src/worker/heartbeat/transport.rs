//! How a batch of heartbeats reaches the heartbeat service: a [`Bus::call`] on its queue.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use uuid::Uuid;

use crate::bus::Bus;
use crate::messages::{Beat, HeartbeatAnswer, HeartbeatAnswers, HeartbeatMessage, Heartbeats};
use crate::{Envelope, Error, Result};

/// Sends one batch of heartbeats and returns the answer per task.
pub(crate) trait Transport: Send + Sync {
    /// One request; an error means no answer at all (each beat counts as failed).
    fn send(
        &self,
        beats: Vec<Beat>,
    ) -> impl Future<Output = Result<BTreeMap<Uuid, HeartbeatAnswer>>> + Send;
}

/// Heartbeats as `Heartbeats` requests on the namespace's heartbeat queue, answered with
/// `HeartbeatAnswers` through direct reply-to.
#[derive(Debug, Clone)]
pub(crate) struct BusTransport {
    pub(crate) bus: Bus,
    pub(crate) worker_id: String,
    /// How long one request may wait for its answer.
    pub(crate) timeout: Duration,
}

impl Transport for BusTransport {
    async fn send(&self, beats: Vec<Beat>) -> Result<BTreeMap<Uuid, HeartbeatAnswer>> {
        let message = HeartbeatMessage::Heartbeats(Heartbeats {
            worker_id: self.worker_id.clone(),
            beats,
            probe: false,
        });
        // A batch is about many workflows: the envelope names none.
        let request = Envelope::new("", None, &message)?;
        let queue = self.bus.names().heartbeat_queue();
        let reply = self.bus.call("", &queue, &request, self.timeout).await?;
        let answers: HeartbeatAnswers = serde_json::from_value(reply.payload)
            .map_err(|e| Error::Decode(format!("heartbeat answer ({}): {e}", reply.kind)))?;
        Ok(answers.results)
    }
}
