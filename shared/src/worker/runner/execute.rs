//! One attempt, from start to disposition: claim it, run the handler under the
//! heartbeat scheduler, publish the result (or nothing, when the attempt was stopped).

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::task::JoinError;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use super::{Shared, Source};
use crate::bus::Disposition;
use crate::messages::{
    ActivityCompleted, ActivityFailed, ActivityTask, AttemptRef, AttemptStarted, ClaimAttempt,
    Command, EagerOffer, HeartbeatAction,
};
use crate::worker::builder::BoxedHandler;
use crate::worker::heartbeat::Stop;
use crate::worker::stats::Counter;
use crate::worker::{ActivityContext, ActivityError};
use crate::{Envelope, Error};

type Running = AbortOnDropHandle<Result<serde_json::Value, ActivityError>>;

/// Pause before handing back a task whose claim got no answer.
const CLAIM_RETRY_PAUSE: Duration = Duration::from_millis(500);
/// The wait of a deferral that advised none (a service that answers DEFER without
/// `retryAfterMs`).
const DEFAULT_DEFER: Duration = Duration::from_millis(500);

/// What the heartbeat service answered a claim.
enum Claim {
    /// The attempt is this worker's: run it.
    Granted,
    /// It must not run (skipped, its run terminated or reset while it waited, or another
    /// worker holds it): acknowledge it.
    Refused(String),
    /// Its task is over a limit of its definition: leave it for later.
    Deferred {
        /// The service's advice.
        retry_after: Duration,
        /// Which limit.
        reason: String,
    },
}

/// What became of a delivery in [`Shared::execute`].
pub(super) enum Executed {
    /// Settle it so.
    Done(Disposition),
    /// Over its task's limit: not run, not settled; give it back to its queue after the
    /// advised wait (see `Shared::defer`).
    Deferred(Duration),
}

impl Shared {
    /// Tells the run the attempt is IN_PROGRESS (its `timeoutSeconds` counts from
    /// `started_at`, carried in the message) once the handler has run for
    /// `start_report_after` (`WorkerBuilder::start_report_after`), beside the handler rather than before it. An activity that
    /// ends sooner is never reported started: its result carries the start time, and the
    /// decider is spared a commit per activity. Dropping the handle cancels the report.
    fn report_started(
        &self,
        task: &ActivityTask,
        started_at: DateTime<Utc>,
    ) -> Option<AbortOnDropHandle<()>> {
        let command = Command::ActivityStarted(crate::messages::ActivityStarted {
            task_id: task.task_id,
            run_id: task.run_id,
            attempt: task.attempt,
            worker_id: Some(self.worker_id.clone()),
            started_at,
        });
        let envelope = match Envelope::new(&task.workflow_id, Some(task.run_id), &command) {
            Ok(envelope) => envelope,
            Err(e) => {
                tracing::warn!(error = %e, "could not encode ActivityStarted");
                return None;
            }
        };
        let (bus, exchange, key, delay) = (
            self.bus.clone(),
            self.commands_exchange.clone(),
            task.reply_to.clone(),
            self.start_report_after,
        );
        let report = tokio::spawn(
            async move {
                tokio::time::sleep(delay).await;
                if let Err(e) = bus.publish(&exchange, &key, &envelope).await {
                    tracing::warn!(error = %e, "could not report the activity's start");
                }
            }
            .in_current_span(),
        );
        Some(AbortOnDropHandle::new(report))
    }

    /// Claims the attempt of `task` for this worker: a request to the heartbeat
    /// service (sent with the other claims waiting, see [`crate::worker::claims`]), which
    /// moves the attempt's registry row from SCHEDULED to RUNNING (compare-and-set)
    /// before answering. `Err`: no answer (the task goes back to its queue and is claimed
    /// again). A redelivered task may take over an attempt its earlier consumer claimed
    /// and died with.
    async fn claim(
        &self,
        task: &ActivityTask,
        started_at: DateTime<Utc>,
        redelivered: bool,
    ) -> Result<Claim, Error> {
        let answer = self
            .claims
            .claim(ClaimAttempt {
                started: AttemptStarted::of(task, &self.worker_id, started_at),
                takeover: redelivered,
            })
            .await?;
        Ok(match answer.action {
            HeartbeatAction::Continue => Claim::Granted,
            HeartbeatAction::Defer => Claim::Deferred {
                retry_after: Duration::from_millis(
                    answer
                        .retry_after_ms
                        .unwrap_or(DEFAULT_DEFER.as_millis() as u64),
                ),
                reason: answer.reason.unwrap_or_else(|| "deferred".to_owned()),
            },
            _ => Claim::Refused(answer.reason.unwrap_or_else(|| "stopped".to_owned())),
        })
    }

    /// Registers the attempt, runs the handler (in its own task, so a panic is caught)
    /// while the scheduler heartbeats it, then publishes the result. An attempt stopped
    /// before it started (e.g. skipped while SCHEDULED) is acknowledged without running;
    /// one over its task's limits is [`Executed::Deferred`], untouched.
    ///
    /// A task from this process's eager queue was claimed for it by the decider: it runs
    /// without a claim (unless redelivered). One that waited too long in some worker's eager queue and came on
    /// to its shared queue may take its attempt over (docs/eager-dispatch.md), as a
    /// redelivered one may.
    pub(super) async fn execute(
        &self,
        handler: BoxedHandler,
        task: ActivityTask,
        redelivered: bool,
        source: Source,
    ) -> Executed {
        let started_at = Utc::now();
        // A redelivered eager task (its worker died holding it, or gave it back) is
        // claimed as any redelivery is: its attempt may have been stopped, or its result
        // applied, meanwhile.
        let claimed = match source {
            Source::Eager if !redelivered => Ok(Claim::Granted),
            Source::Eager | Source::Shared => tokio::select! {
                claimed = self.claim(&task, started_at, redelivered || task.eager) => claimed,
                _ = self.abandon.cancelled() => Err(Error::ShuttingDown),
            },
        };
        match claimed {
            Ok(Claim::Granted) => {}
            Ok(Claim::Refused(reason)) => {
                self.stats.incr(Counter::Stopped);
                tracing::info!(task_id = %task.task_id, %reason, "activity not claimed; not running it");
                return Executed::Done(Disposition::Ack);
            }
            Ok(Claim::Deferred {
                retry_after,
                reason,
            }) => {
                tracing::debug!(task_id = %task.task_id, %reason, ?retry_after,
                    "activity over its task's limit; it goes back to its queue later");
                return Executed::Deferred(retry_after);
            }
            Err(e) => {
                // Nothing ran yet: the task goes back, and is claimed again (as a
                // redelivery) once the heartbeat service answers. The pause keeps an
                // outage from becoming a hot loop.
                self.stats.incr(Counter::Requeued);
                tracing::warn!(error = %e, "could not claim the attempt; the activity goes back to its queue");
                tokio::select! {
                    _ = tokio::time::sleep(CLAIM_RETRY_PAUSE) => {}
                    _ = self.abandon.cancelled() => {}
                }
                return Executed::Done(Disposition::Requeue);
            }
        }
        Executed::Done(self.run_claimed(handler, task, started_at, source).await)
    }

    /// [`Shared::execute`] once the attempt is this worker's.
    async fn run_claimed(
        &self,
        handler: BoxedHandler,
        task: ActivityTask,
        started_at: DateTime<Utc>,
        source: Source,
    ) -> Disposition {
        self.stats.incr(Counter::Started);
        // The run has an eager attempt IN_PROGRESS from its dispatch.
        let start_report = match source {
            Source::Shared => self.report_started(&task, started_at),
            Source::Eager => None,
        };
        let clock = std::time::Instant::now();
        let (workflow_id, run_id, reply_to, together) = (
            task.workflow_id.clone(),
            task.run_id,
            task.reply_to.clone(),
            task.results_together,
        );
        let attempt = AttemptRef {
            task_id: task.task_id,
            attempt: task.attempt,
        };
        // Off the schedule when this function returns, however it returns.
        let scheduled = self
            .heartbeats
            .register(attempt, task.response_timeout_seconds);
        let ctx = ActivityContext::new(&scheduled);
        let stop = scheduled.stop().clone();
        // Aborted if this future is dropped (the bus gave up on it), so no handler outlives
        // its delivery.
        let mut running: Running =
            AbortOnDropHandle::new(tokio::spawn(handler(task, ctx).in_current_span()));
        let joined = tokio::select! {
            joined = &mut running => joined,
            _ = stop.token().cancelled() => {
                drop(start_report);
                return self.stopped(Some(running), &stop).await;
            }
            _ = self.abandon.cancelled() => {
                self.stats.incr(Counter::Requeued);
                tracing::warn!("activity abandoned at shutdown; it goes back to its queue");
                return Disposition::Requeue;
            }
        };
        // Finished: a start report still waiting is not needed (the result says it all).
        drop(start_report);
        if stop.token().is_cancelled() {
            // Stopped while returning: the decider would ignore the result anyway. The
            // handler's task has ended; its handle must not be awaited again.
            return self.stopped(None, &stop).await;
        }
        let elapsed_ms = clock.elapsed().as_millis();
        let (command, counter) =
            self.result_command(joined, attempt, run_id, started_at, elapsed_ms);
        let published = match Envelope::new(&workflow_id, Some(run_id), &command) {
            Ok(envelope) => tokio::select! {
                sent = self.publish_result(&reply_to, &envelope, together) => sent,
                _ = self.abandon.cancelled() => Err(Error::ShuttingDown),
            },
            Err(e) => Err(e),
        };
        match published {
            Ok(()) => {
                // The decider ends the attempt's registry row with the result's commit.
                self.stats.incr(counter);
                Disposition::Ack
            }
            Err(e) => {
                self.stats.incr(Counter::PublishFailed);
                self.stats.incr(Counter::Requeued);
                tracing::warn!(error = %e, %reply_to,
                    "could not publish the result; the activity goes back to its queue");
                Disposition::Requeue
            }
        }
    }

    /// Publishes a result to its run's shard: with the other results for that shard that
    /// meet a result in flight there when its decider takes them together (the task said
    /// so), alone otherwise.
    async fn publish_result(
        &self,
        shard_key: &str,
        envelope: &Envelope,
        together: bool,
    ) -> Result<(), Error> {
        if !together {
            return self
                .bus
                .publish(&self.commands_exchange, shard_key, envelope)
                .await;
        }
        let outgoing = crate::bus::together::Outgoing {
            exchange: self.commands_exchange.clone(),
            routing_key: shard_key.to_owned(),
            body: envelope.to_bytes()?,
            traceparent: crate::telemetry::current_traceparent(),
        };
        self.results.send(outgoing).await
    }

    /// The command reporting the handler's outcome, with its counter.
    fn result_command(
        &self,
        joined: Result<Result<serde_json::Value, ActivityError>, JoinError>,
        attempt: AttemptRef,
        run_id: uuid::Uuid,
        started_at: DateTime<Utc>,
        elapsed_ms: u128,
    ) -> (Command, Counter) {
        let worker_id = Some(self.worker_id.clone());
        let outcome = joined.unwrap_or_else(|e| {
            if e.is_panic() {
                self.stats.incr(Counter::Panicked);
            }
            Err(ActivityError::from_join_error(e))
        });
        match outcome {
            Ok(output) => {
                tracing::debug!(elapsed_ms, "activity completed");
                let done = ActivityCompleted {
                    task_id: attempt.task_id,
                    run_id,
                    attempt: attempt.attempt,
                    output,
                    worker_id,
                    started_at: Some(started_at),
                    eager: self.eager_offer(),
                };
                (Command::ActivityCompleted(done), Counter::Completed)
            }
            Err(ActivityError { reason, terminal }) => {
                tracing::info!(elapsed_ms, %reason, terminal, "activity failed");
                let failed = ActivityFailed {
                    error_kind: None,
                    task_id: attempt.task_id,
                    run_id,
                    attempt: attempt.attempt,
                    reason,
                    terminal,
                    output: serde_json::Value::Null,
                    worker_id,
                    started_at: Some(started_at),
                    eager: self.eager_offer(),
                };
                (Command::ActivityFailed(failed), Counter::Failed)
            }
        }
    }

    /// This process's offer to run the run's next activity, sent with a result: none
    /// without eager queues, and none once it is shutting down (a task sent to it now
    /// would wait out its time in the eager queue before another worker got it).
    fn eager_offer(&self) -> Option<EagerOffer> {
        let eager = self.eager.as_ref()?;
        (!self.stop.is_cancelled()).then(|| EagerOffer {
            queue_prefix: eager.prefix.clone(),
            task_names: eager.task_names.clone(),
            offered_at: Utc::now(),
            batches: true,
        })
    }

    /// The heartbeat service stopped the attempt: the handler gets `stop_grace` to return
    /// (its token is cancelled), then is aborted. Nothing is reported and the task is
    /// acknowledged: a stopped attempt must not run again.
    async fn stopped(&self, running: Option<Running>, stop: &Stop) -> Disposition {
        let reason = stop.reason().unwrap_or("stopped");
        tracing::info!(%reason, "activity stopped by the heartbeat service; its result will not be reported");
        if let Some(running) = running {
            tokio::select! {
                returned = tokio::time::timeout(self.stop_grace, running) => {
                    if returned.is_err() {
                        tracing::warn!(grace = ?self.stop_grace, "a stopped handler did not return in time; aborted");
                    }
                }
                _ = self.abandon.cancelled() => {}
            }
        }
        self.stats.incr(Counter::Stopped);
        self.heartbeats.counters().stopped.inc();
        Disposition::Ack
    }
}
