//! Conductor's poll data (`GET /api/tasks/queue/polldata`): for each task type, the last
//! worker that took work and when. HTTP workers poll the gateway; bus workers consume
//! their queues and claim each task, so their claim is their poll.
//!
//! [`Recorder`] keeps what it saw in memory and writes it at most once a second per task
//! type, in one statement, off the path of the poll or the claim that it records.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::Store;

/// How often a recorder writes what it saw.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// One task type's last poll.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PollData {
    /// The task type (queue) polled.
    pub task_name: String,
    /// Conductor's task domain; Weft has none (empty).
    pub domain: String,
    /// Who polled last.
    pub worker_id: String,
    /// When.
    pub last_poll_time: DateTime<Utc>,
}

/// The last poll of each task type seen: task type → (worker, when).
type Seen = HashMap<String, (String, DateTime<Utc>)>;

/// Polls seen since the last write, by task type; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    seen: Arc<Mutex<Seen>>,
}

impl Recorder {
    /// Notes that `worker_id` took (or asked for) work of `task_name` now.
    pub fn saw(&self, task_name: &str, worker_id: &str) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.insert(task_name.to_owned(), (worker_id.to_owned(), Utc::now()));
    }

    /// Takes what was seen since the last call.
    pub fn drain(&self) -> Vec<PollData> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.drain()
            .map(|(task_name, (worker_id, last_poll_time))| PollData {
                task_name,
                domain: String::new(),
                worker_id,
                last_poll_time,
            })
            .collect()
    }

    /// Writes what was seen every [`FLUSH_INTERVAL`] until `shutdown`, then once more.
    pub async fn run(self, store: Store, shutdown: CancellationToken) {
        loop {
            let stop = tokio::select! {
                _ = tokio::time::sleep(FLUSH_INTERVAL) => false,
                _ = shutdown.cancelled() => true,
            };
            let polls = self.drain();
            if !polls.is_empty() {
                if let Err(e) = store.record_poll_data(&polls).await {
                    // Poll data is informational: a lost second is not worth a retry.
                    tracing::warn!(error = %e, count = polls.len(), "poll data not written");
                }
            }
            if stop {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_worker_of_each_task_type_is_kept_until_drained() {
        let recorder = Recorder::default();
        recorder.saw("a", "w1");
        recorder.saw("a", "w2");
        recorder.saw("b", "w1");
        let mut drained = recorder.drain();
        drained.sort_by(|x, y| x.task_name.cmp(&y.task_name));
        let pairs: Vec<(&str, &str)> = drained
            .iter()
            .map(|p| (p.task_name.as_str(), p.worker_id.as_str()))
            .collect();
        assert_eq!(pairs, [("a", "w2"), ("b", "w1")]);
        assert!(recorder.drain().is_empty());
    }
}
