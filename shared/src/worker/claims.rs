//! Claims sent together: while one claim request waits for the heartbeat service's
//! answer, the claims of the tasks taken meanwhile wait here, and go as ONE request
//! (`ClaimAttempts`) as soon as it is answered. An idle worker sends each claim at once
//! (as a `ClaimAttempt`); a busy one sends one request per round trip instead of one per
//! task, which is what the broker and the heartbeat service would otherwise spend their
//! time on (docs/worker-sdk.md, "Claims").

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tracing::Instrument;

use crate::bus::Bus;
use crate::messages::{
    ClaimAttempt, ClaimAttempts, HeartbeatAnswer, HeartbeatAnswers, HeartbeatMessage,
};
use crate::{Envelope, Error, Result};

/// Claims in one request at most.
const MAX_CLAIMS: usize = 256;

/// A claim waiting for its request.
struct Waiting {
    claim: ClaimAttempt,
    /// The activity's span: the request of a group is sent in its first claim's.
    span: tracing::Span,
    answer: oneshot::Sender<Result<HeartbeatAnswer>>,
}

#[derive(Default)]
struct State {
    waiting: Vec<Waiting>,
    /// A request is on its way; whatever waits goes with the next one.
    sending: bool,
}

/// The worker's claims, sent in groups to the heartbeat service; cheap to clone.
#[derive(Clone)]
pub(crate) struct Claims {
    bus: Bus,
    timeout: Duration,
    state: Arc<Mutex<State>>,
}

impl Claims {
    /// Claims sent on `bus`, each request waiting `timeout` for its answer.
    pub(crate) fn new(bus: Bus, timeout: Duration) -> Self {
        Self {
            bus,
            timeout,
            state: Arc::default(),
        }
    }

    /// Sends `claim` (with others waiting, if any) and returns the service's answer
    /// for it. `Err`: no answer (the request failed or timed out, or the service could
    /// not write this claim).
    pub(crate) async fn claim(&self, claim: ClaimAttempt) -> Result<HeartbeatAnswer> {
        let (answer, answered) = oneshot::channel();
        let lead = {
            let mut state = self.lock();
            state.waiting.push(Waiting {
                claim,
                span: tracing::Span::current(),
                answer,
            });
            !std::mem::replace(&mut state.sending, true)
        };
        if lead {
            tokio::spawn(self.clone().send_all());
        }
        answered.await.unwrap_or(Err(Error::ShuttingDown))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the lock is held leaves nothing half-done: the list is intact.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends what waits, group after group, until nothing does.
    async fn send_all(self) {
        loop {
            let group: Vec<Waiting> = {
                let mut state = self.lock();
                if state.waiting.is_empty() {
                    state.sending = false;
                    return;
                }
                take_group(&mut state.waiting)
            };
            let span = group[0].span.clone();
            self.send(group).instrument(span).await;
        }
    }

    /// One request for `group` (one claim per task: see [`take_group`]); every claim of it gets its answer (or an error).
    async fn send(&self, group: Vec<Waiting>) {
        let answers = self.request(&group).await;
        for waiting in group {
            let task_id = waiting.claim.started.attempt.task_id;
            let answer = match &answers {
                Ok(answers) => answers.results.get(&task_id).cloned().ok_or_else(|| {
                    Error::Decode(format!("the claim answer says nothing of task {task_id}"))
                }),
                Err(e) => Err(Error::Bus(format!("claim not answered: {e}"))),
            };
            let _ = waiting.answer.send(answer);
        }
    }

    async fn request(&self, group: &[Waiting]) -> Result<HeartbeatAnswers> {
        let first = &group[0].claim.started;
        let message = match group {
            [one] => HeartbeatMessage::ClaimAttempt(one.claim.clone()),
            _ => HeartbeatMessage::ClaimAttempts(ClaimAttempts {
                claims: group.iter().map(|w| w.claim.clone()).collect(),
            }),
        };
        let request = Envelope::new(&first.workflow_id, Some(first.run_id), &message)?;
        let queue = self.bus.names().heartbeat_queue();
        let reply = self.bus.call("", &queue, &request, self.timeout).await?;
        serde_json::from_value(reply.payload)
            .map_err(|e| Error::Decode(format!("claim answer ({}): {e}", reply.kind)))
    }
}

/// The next group to send, in arrival order: at most [`MAX_CLAIMS`] claims and at most one
/// per task. A request's answers are per task id, so two claims of one task in a request
/// would both read the same answer; a task the broker delivered again (an outbox row
/// published twice) while its first claim waited would then be refused twice, or run
/// twice. Its second claim waits for the next request instead, which the service answers
/// on its own (refused: the first claimed it).
fn take_group(waiting: &mut Vec<Waiting>) -> Vec<Waiting> {
    let mut tasks = std::collections::HashSet::new();
    let mut group = Vec::new();
    let mut later = Vec::new();
    for w in waiting.drain(..) {
        let fits = group.len() < MAX_CLAIMS;
        if fits && tasks.insert(w.claim.started.attempt.task_id) {
            group.push(w);
        } else {
            later.push(w);
        }
    }
    *waiting = later;
    group
}
