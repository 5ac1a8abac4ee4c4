//! The consumer of `<ns>.heartbeat`: each message is applied to the registry.
//!
//! - `ClaimAttempt` is a request (`Bus::call`): the claim is written (in groups) and
//!   answered CONTINUE (the attempt is the worker's) or STOP (stopped, ended, or another
//!   worker's), then acknowledged; a claim of a limited task goes on to a second group
//!   (docs/task-limits.md) and may be answered DEFER (over a limit: come back later).
//! - `AttemptStarted` (older SDKs) registers the attempt; `AttemptFinished` and `StopAttempts` end it.
//!   These are persistent and acknowledged once the registry committed them; a transient
//!   failure (database unreachable) hands the message back after a pause.
//! - `Heartbeats` is a request (`Bus::call`): answered on its `reply_to` with
//!   `HeartbeatAnswers`, one answer per beat, then acknowledged. When the registry cannot
//!   answer, every beat is answered THROTTLED so the worker retries it soon.
//! - `Barrier` is the timeout scanner's request: answered once every heartbeat batch
//!   taken before it has been recorded (docs/heartbeats.md).
//! - A message that can never be applied (undecodable, attempt 0, unknown result status)
//!   goes to the dead-letter queue with the reason.

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use weft::bus::{Bus, ConsumeOptions, Delivery, Disposition};
use weft::messages::{
    AttemptFinished, AttemptStarted, ClaimAttempt, HeartbeatAction, HeartbeatAnswer,
    HeartbeatAnswers, HeartbeatMessage, Heartbeats,
};
use weft::registry::rows::LimitedClaim;
use weft::registry::{throttled, Registry};
use weft::{envelope, Envelope, Error};

use crate::group::{Group, Outcome};
use crate::pending::Pending;

/// Messages handled at once: heartbeat batches of many workers are answered in parallel.
const CONCURRENCY: usize = 32;
/// Pause before handing back a message whose effect could not be committed, so that a
/// database outage does not turn into a hot redelivery loop.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// Starts consuming the namespace's heartbeat queue until `shutdown`.
pub fn start(
    bus: &Bus,
    registry: Registry,
    prefetch: u16,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    let opts = ConsumeOptions {
        prefetch: prefetch.max(CONCURRENCY as u16),
        concurrency: CONCURRENCY,
    };
    let polls = weft::store::poll_data::Recorder::default();
    // Stops with `shutdown`, after writing what it saw last.
    tokio::spawn(
        polls
            .clone()
            .run(registry.store().clone(), shutdown.clone()),
    );
    let ingest = Ingest {
        claims: claims(&registry),
        limited: limited_claims(&registry),
        starts: registrations(&registry),
        finishes: ends(&registry),
        registry,
        bus: bus.clone(),
        pending: Pending::default(),
        shutdown: shutdown.clone(),
        recording: Default::default(),
        polls,
    };
    bus.consume(
        &bus.names().heartbeat_queue(),
        opts,
        move |delivery| {
            let ingest = ingest.clone();
            async move { ingest.handle(delivery).await }
        },
        shutdown,
    )
}

/// What a registry write's error means for its message.
fn outcome_of(e: &Error) -> Outcome {
    match e {
        Error::Decode(why) => Outcome::Refused(why.clone()),
        other => Outcome::Failed(other.to_string()),
    }
}

/// What the first step of a claim concluded.
#[derive(Debug)]
pub enum FirstStep {
    /// The answer (CONTINUE: the attempt is the worker's; STOP: refused).
    Answer(HeartbeatAnswer),
    /// The attempt's task is limited: the claim goes on to the limited group.
    Limited(LimitedClaim),
}

/// Claims written in groups: one statement for all that queued up meanwhile. A group
/// that fails fails each of its claims (the worker hands its task back and it is claimed
/// again later). A claim of a limited task is handed back for the limited group.
fn claims(registry: &Registry) -> Group<ClaimAttempt, Result<FirstStep, String>> {
    let registry = registry.clone();
    Group::start(move |claims: Vec<ClaimAttempt>| {
        let registry = registry.clone();
        async move {
            match registry.claim_fast(&claims).await {
                Ok(outcomes) => claims
                    .into_iter()
                    .zip(outcomes)
                    .map(|(claim, o)| {
                        Ok(match o.limited {
                            Some(limited) => FirstStep::Limited(LimitedClaim { claim, limited }),
                            None => FirstStep::Answer(o.answer()),
                        })
                    })
                    .collect(),
                Err(e) => {
                    tracing::warn!(error = %e, group = claims.len(), "a group of claims failed");
                    claims.iter().map(|_| Err(e.to_string())).collect()
                }
            }
        }
    })
}

/// Claims of limited tasks (docs/task-limits.md), written in groups of their own: they
/// wait for their task name's lock, and must not hold up the claims of unlimited tasks.
/// An answer is CONTINUE, DEFER (over a limit, with when to come back) or STOP.
fn limited_claims(registry: &Registry) -> Group<LimitedClaim, Result<HeartbeatAnswer, String>> {
    let registry = registry.clone();
    Group::start(move |claims: Vec<LimitedClaim>| {
        let registry = registry.clone();
        async move {
            match registry.claim_limited(&claims).await {
                Ok(outcomes) => outcomes.iter().map(|o| Ok(o.answer())).collect(),
                Err(e) => {
                    tracing::warn!(error = %e, group = claims.len(), "a group of limited claims failed");
                    vec![Err(e.to_string()); claims.len()]
                }
            }
        }
    })
}

/// Registrations written in groups. A group that fails is written again one by one, so
/// that one bad registration fails alone rather than with its group.
fn registrations(registry: &Registry) -> Group<AttemptStarted> {
    let registry = registry.clone();
    Group::start(move |started: Vec<AttemptStarted>| {
        let registry = registry.clone();
        async move {
            match registry.register_many(&started).await {
                Ok(_) => vec![Outcome::Done; started.len()],
                Err(e) if started.len() == 1 => vec![outcome_of(&e)],
                Err(e) => {
                    tracing::warn!(error = %e, group = started.len(), "a group of registrations failed; writing them one by one");
                    let mut outcomes = Vec::with_capacity(started.len());
                    for s in &started {
                        outcomes.push(match registry.register(s).await {
                            Ok(_) => Outcome::Done,
                            Err(e) => outcome_of(&e),
                        });
                    }
                    outcomes
                }
            }
        }
    })
}

/// Ends (results published) written in groups; a group that fails, one by one.
fn ends(registry: &Registry) -> Group<AttemptFinished> {
    let registry = registry.clone();
    Group::start(move |finished: Vec<AttemptFinished>| {
        let registry = registry.clone();
        async move {
            let each = match registry.finish_many(&finished).await {
                Ok(each) => each,
                Err(e) if finished.len() == 1 => return vec![outcome_of(&e)],
                Err(e) => {
                    tracing::warn!(error = %e, group = finished.len(), "a group of ends failed; writing them one by one");
                    let mut each = Vec::with_capacity(finished.len());
                    for f in &finished {
                        each.push(registry.finish(f).await);
                    }
                    each
                }
            };
            each.into_iter()
                .map(|r| match r {
                    Ok(_) => Outcome::Done,
                    Err(e) => outcome_of(&e),
                })
                .collect()
        }
    })
}

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct Ingest {
    /// Claims, written in groups.
    pub claims: Group<ClaimAttempt, Result<FirstStep, String>>,
    /// Claims of limited tasks, written in groups after the first step.
    pub limited: Group<LimitedClaim, Result<HeartbeatAnswer, String>>,
    /// Registrations, written in groups.
    pub starts: Group<AttemptStarted>,
    /// Ends, written in groups.
    pub finishes: Group<AttemptFinished>,
    /// The registry messages are applied to.
    pub registry: Registry,
    /// Where heartbeat answers are sent.
    pub bus: Bus,
    /// Registrations in flight, which unknown heartbeats wait for.
    pub pending: Pending,
    /// Cuts the pause before a requeue short.
    pub shutdown: CancellationToken,
    /// Read-held by every heartbeat batch being recorded; a barrier takes it to write.
    pub recording: std::sync::Arc<tokio::sync::RwLock<()>>,
    /// Claims seen, written as Conductor's poll data (a bus worker's claim is its poll).
    pub polls: weft::store::poll_data::Recorder,
}

impl Ingest {
    /// Applies one message; the disposition says what becomes of it.
    pub async fn handle(&self, delivery: Delivery) -> Disposition {
        let message = match delivery.envelope.decode::<HeartbeatMessage>() {
            Ok(m) => m,
            Err(e) => return Disposition::DeadLetter(e.to_string()),
        };
        if let Err(reason) = check(&message) {
            return Disposition::DeadLetter(reason);
        }
        // A traced message (an attempt's start or end, a stop from the decider) gets its
        // span in the run's trace; untraced heartbeat batches (many runs at once) none.
        let span = match delivery.traceparent.as_deref() {
            Some(parent) => {
                let span = tracing::info_span!(
                    "heartbeat.apply",
                    message = %delivery.envelope.kind,
                    workflow_id = %delivery.envelope.workflow_id
                );
                weft::telemetry::set_parent(&span, Some(parent));
                span
            }
            None => tracing::Span::none(),
        };
        self.apply(&delivery, message).instrument(span).await
    }

    /// Applies a decoded, checked message to the registry.
    async fn apply(&self, delivery: &Delivery, message: HeartbeatMessage) -> Disposition {
        let outcome = match message {
            HeartbeatMessage::Heartbeats(beats) => {
                // Held while the beats are recorded: a barrier waits for it.
                let _recording = self.recording.read().await;
                self.answer(delivery, &beats).await;
                Outcome::Done
            }
            HeartbeatMessage::Barrier(_) => {
                // Every heartbeat taken from the queue before the barrier has been
                // recorded once this lock is had (later ones wait behind it a moment).
                drop(self.recording.write().await);
                let empty = HeartbeatAnswers {
                    results: Default::default(),
                };
                let sent = match answers_envelope(&delivery.envelope, empty) {
                    Ok(reply) => self.bus.reply(delivery, &reply).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = sent {
                    tracing::warn!(error = %e, "barrier answer not sent");
                }
                Outcome::Done
            }
            HeartbeatMessage::ClaimAttempt(claim) => {
                self.claim(delivery, vec![claim]).await;
                Outcome::Done
            }
            HeartbeatMessage::ClaimAttempts(group) => {
                let (valid, refused): (Vec<_>, Vec<_>) = group
                    .claims
                    .into_iter()
                    .partition(|c| check_started(&c.started, "ClaimAttempt").is_ok());
                for c in &refused {
                    let why = check_started(&c.started, "ClaimAttempt").err();
                    tracing::warn!(task_id = %c.started.attempt.task_id, reason = ?why, "invalid claim in a group; not answered");
                }
                self.claim(delivery, valid).await;
                Outcome::Done
            }
            HeartbeatMessage::AttemptStarted(s) => {
                let _registering = self.pending.start(s.attempt.task_id);
                self.starts.submit(s).await
            }
            HeartbeatMessage::AttemptFinished(f) => self.finishes.submit(f).await,
            HeartbeatMessage::StopAttempts(s) => match self.registry.stop(&s).await {
                Ok(()) => Outcome::Done,
                Err(Error::Decode(why)) => Outcome::Refused(why),
                Err(e) => Outcome::Failed(e.to_string()),
            },
        };
        match outcome {
            Outcome::Done => Disposition::Ack,
            Outcome::Refused(reason) => Disposition::DeadLetter(reason),
            Outcome::Failed(e) => {
                tracing::warn!(error = %e, kind = %delivery.envelope.kind, "registry write failed; the message goes back to the queue");
                tokio::select! {
                    _ = self.shutdown.cancelled() => {}
                    _ = tokio::time::sleep(RETRY_PAUSE) => {}
                }
                Disposition::Requeue
            }
        }
    }

    /// Answers a heartbeat batch on the request's `reply_to`. A reply that cannot be sent
    /// is only logged: the heartbeats are recorded, and the worker retries when no answer
    /// came.
    async fn answer(&self, delivery: &Delivery, beats: &Heartbeats) {
        let results = match self.heartbeat(beats).await {
            Ok(answers) => answers.into_iter().collect(),
            Err(e) => {
                tracing::warn!(error = %e, beats = beats.beats.len(), "heartbeats not recorded; answering THROTTLED");
                beats
                    .beats
                    .iter()
                    .map(|b| (b.task_id, throttled()))
                    .collect()
            }
        };
        let reply = answers_envelope(&delivery.envelope, HeartbeatAnswers { results });
        let sent = match reply {
            Ok(reply) => self.bus.reply(delivery, &reply).await,
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            tracing::warn!(error = %e, worker = %beats.worker_id, "heartbeat answer not sent");
        }
    }

    /// Claims attempts (one request's) and answers on the request's `reply_to`, one
    /// answer per claim written: CONTINUE when the attempt is the worker's now, STOP with
    /// the reason when not. A claim that could not be written is left out of the answer
    /// (nothing is answered when none was): the worker hands its task back to its queue.
    async fn claim(&self, delivery: &Delivery, claims: Vec<ClaimAttempt>) {
        for c in &claims {
            self.polls.saw(&c.started.task_name, &c.started.worker_id);
        }
        let _claiming: Vec<_> = claims
            .iter()
            .map(|c| self.pending.start(c.started.attempt.task_id))
            .collect();
        let ids: Vec<uuid::Uuid> = claims.iter().map(|c| c.started.attempt.task_id).collect();
        // Submitted together, so they are written in one group.
        let outcomes = futures_util::future::join_all(claims.into_iter().map(|c| async move {
            match self.claims.submit(c).await? {
                FirstStep::Answer(answer) => Ok(answer),
                FirstStep::Limited(limited) => self.limited.submit(limited).await,
            }
        }))
        .await;
        let mut results = std::collections::BTreeMap::new();
        for (task_id, outcome) in ids.into_iter().zip(outcomes) {
            match outcome {
                Ok(answer) => {
                    results.insert(task_id, answer);
                }
                Err(e) => {
                    tracing::warn!(error = %e, %task_id, "claim not written; not answering it")
                }
            }
        }
        if results.is_empty() {
            return;
        }
        let sent = match answers_envelope(&delivery.envelope, HeartbeatAnswers { results }) {
            Ok(reply) => self.bus.reply(delivery, &reply).await,
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            tracing::warn!(error = %e, "claim answer not sent");
        }
    }

    /// The registry's answers; the beats of unknown tasks whose registration is in
    /// flight here are asked again once it is written.
    async fn heartbeat(
        &self,
        beats: &Heartbeats,
    ) -> weft::Result<Vec<(uuid::Uuid, HeartbeatAnswer)>> {
        if beats.probe {
            let ids: Vec<uuid::Uuid> = beats.beats.iter().map(|b| b.task_id).collect();
            return self.registry.probe(&ids).await;
        }
        let mut answers = self.registry.heartbeat(&beats.beats).await?;
        let unknown: Vec<usize> = (0..answers.len())
            .filter(|&i| answers[i].1.action == HeartbeatAction::NotFound)
            .collect();
        let ids: Vec<uuid::Uuid> = unknown.iter().map(|&i| answers[i].0).collect();
        if unknown.is_empty() || !self.pending.wait_for(&ids).await {
            return Ok(answers);
        }
        let again: Vec<_> = unknown.iter().map(|&i| beats.beats[i].clone()).collect();
        for (&i, answer) in unknown.iter().zip(self.registry.heartbeat(&again).await?) {
            answers[i] = answer;
        }
        Ok(answers)
    }
}

/// Refuses what no retry can make valid.
fn check(message: &HeartbeatMessage) -> Result<(), String> {
    match message {
        HeartbeatMessage::ClaimAttempt(c) => check_started(&c.started, "ClaimAttempt")?,
        HeartbeatMessage::ClaimAttempts(group) => {
            // Refused as a whole only when not one claim is valid; invalid ones among
            // valid ones are left unanswered.
            let checked: Vec<_> = group
                .claims
                .iter()
                .map(|c| check_started(&c.started, "ClaimAttempt"))
                .collect();
            if !checked.iter().any(Result::is_ok) {
                return Err(checked
                    .into_iter()
                    .find_map(Result::err)
                    .unwrap_or_else(|| "ClaimAttempts without a claim".into()));
            }
        }
        HeartbeatMessage::AttemptStarted(s) => check_started(s, "AttemptStarted")?,
        HeartbeatMessage::AttemptFinished(f) if f.attempt.attempt < 1 => {
            return Err(format!(
                "AttemptFinished attempt {} (from 1)",
                f.attempt.attempt
            ));
        }
        HeartbeatMessage::StopAttempts(s) => {
            if let Some(bad) = s.attempts.iter().find(|a| a.attempt < 1) {
                return Err(format!(
                    "StopAttempts attempt {} of task {} (from 1)",
                    bad.attempt, bad.task_id
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Refuses an attempt's start (`what` names the message) that no retry can make valid.
fn check_started(s: &AttemptStarted, what: &str) -> Result<(), String> {
    if s.attempt.attempt < 1 {
        return Err(format!("{what} attempt {} (from 1)", s.attempt.attempt));
    }
    if s.workflow_id.is_empty() {
        return Err(format!("{what} without workflowId"));
    }
    if s.response_timeout_seconds < 0 {
        return Err(format!(
            "{what} responseTimeoutSeconds {} (0 or more)",
            s.response_timeout_seconds
        ));
    }
    Ok(())
}

/// The reply envelope: type `HeartbeatAnswers`, the payload is [`HeartbeatAnswers`].
pub fn answers_envelope(request: &Envelope, answers: HeartbeatAnswers) -> weft::Result<Envelope> {
    Ok(Envelope {
        id: weft::ids::new_id(),
        kind: "HeartbeatAnswers".into(),
        version: envelope::VERSION,
        workflow_id: request.workflow_id.clone(),
        run_id: request.run_id,
        time: chrono::Utc::now(),
        priority: None,
        payload: serde_json::to_value(answers)?,
    })
}
