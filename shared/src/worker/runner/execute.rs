//! One attempt, from start to disposition: register it, run the handler under the
//! heartbeat scheduler, publish the result (or nothing, when the attempt was stopped).

use chrono::{DateTime, Utc};
use tokio::task::JoinError;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use super::Shared;
use crate::bus::Disposition;
use crate::messages::{
    ActivityCompleted, ActivityFailed, ActivityTask, AttemptRef, Beat, Command, HeartbeatAction,
};
use crate::worker::attempt::{self, Ended};
use crate::worker::builder::BoxedHandler;
use crate::worker::heartbeat::Stop;
use crate::worker::heartbeat::Transport;
use crate::worker::stats::Counter;
use crate::worker::{ActivityContext, ActivityError};
use crate::{Envelope, Error};

type Running = AbortOnDropHandle<Result<serde_json::Value, ActivityError>>;

/// How long a handler runs before the run is told it started: shorter activities are
/// reported by their result alone (which carries the start time).
const START_REPORT_DELAY: std::time::Duration = std::time::Duration::from_millis(20);

impl Shared {
    /// Tells the run the attempt is IN_PROGRESS (its `timeoutSeconds` counts from
    /// `started_at`, carried in the message) once the handler has run for
    /// [`START_REPORT_DELAY`], beside the handler rather than before it. An activity that
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
        let (bus, exchange, key) = (
            self.bus.clone(),
            self.commands_exchange.clone(),
            task.reply_to.clone(),
        );
        let report = tokio::spawn(
            async move {
                tokio::time::sleep(START_REPORT_DELAY).await;
                if let Err(e) = bus.publish(&exchange, &key, &envelope).await {
                    tracing::warn!(error = %e, "could not report the activity's start");
                }
            }
            .in_current_span(),
        );
        Some(AbortOnDropHandle::new(report))
    }

    /// Whether the attempt of `task` was stopped while it waited in its queue (an
    /// operator skipped it, its run was terminated or reset): the heartbeat registry
    /// keeps a stop that came before the attempt started. `Some(reason)` when stopped;
    /// `None` when it may run, including when the heartbeat service does not answer in
    /// time (the first heartbeat asks again).
    async fn stopped_before_start(&self, task: &ActivityTask) -> Option<String> {
        let beat = Beat {
            task_id: task.task_id,
            details: None,
        };
        match self.start_check.send(vec![beat]).await {
            Ok(answers) => answers
                .get(&task.task_id)
                .filter(|a| a.action == HeartbeatAction::Stop)
                .map(|a| a.reason.clone().unwrap_or_else(|| "stopped".to_owned())),
            Err(e) => {
                tracing::debug!(error = %e, "no answer to the check before the start; running the activity");
                None
            }
        }
    }

    /// Registers the attempt, runs the handler (in its own task, so a panic is caught)
    /// while the scheduler heartbeats it, then publishes the result. An attempt stopped
    /// before it started (e.g. skipped while SCHEDULED) is acknowledged without running.
    pub(super) async fn execute(&self, handler: BoxedHandler, task: ActivityTask) -> Disposition {
        let started_at = Utc::now();
        let registering = attempt::started(&self.bus, &self.worker_id, &task, started_at);
        let checking = self.stopped_before_start(&task);
        let (registered, stopped) = tokio::select! {
            both = futures_util::future::join(registering, checking) => both,
            _ = self.abandon.cancelled() => (Err(Error::ShuttingDown), None),
        };
        if let Err(e) = registered {
            // Nothing ran yet: the task goes back and runs when the broker is healthy.
            self.stats.incr(Counter::Requeued);
            tracing::warn!(error = %e, "could not register the attempt with the heartbeat service; the activity goes back to its queue");
            return Disposition::Requeue;
        }
        if let Some(reason) = stopped {
            self.stats.incr(Counter::Stopped);
            tracing::info!(task_id = %task.task_id, %reason, "activity stopped before it started; not running it");
            return Disposition::Ack;
        }
        self.stats.incr(Counter::Started);
        let start_report = self.report_started(&task, started_at);
        let clock = std::time::Instant::now();
        let (workflow_id, run_id, reply_to) =
            (task.workflow_id.clone(), task.run_id, task.reply_to.clone());
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
        let (command, counter, ended, output_bytes) =
            self.result_command(joined, attempt, run_id, started_at, elapsed_ms);
        let published = match Envelope::new(&workflow_id, Some(run_id), &command) {
            Ok(envelope) => tokio::select! {
                sent = self.bus.publish(&self.commands_exchange, &reply_to, &envelope) => sent,
                _ = self.abandon.cancelled() => Err(Error::ShuttingDown),
            },
            Err(e) => Err(e),
        };
        match published {
            Ok(()) => {
                self.stats.incr(counter);
                attempt::finished(
                    &self.bus,
                    (&workflow_id, run_id),
                    attempt,
                    ended,
                    output_bytes,
                );
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

    /// The command reporting the handler's outcome, with its counter, how the attempt
    /// ended and the output's size.
    fn result_command(
        &self,
        joined: Result<Result<serde_json::Value, ActivityError>, JoinError>,
        attempt: AttemptRef,
        run_id: uuid::Uuid,
        started_at: DateTime<Utc>,
        elapsed_ms: u128,
    ) -> (Command, Counter, Ended, i64) {
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
                let output_bytes = attempt::json_len(&output);
                let done = ActivityCompleted {
                    task_id: attempt.task_id,
                    run_id,
                    attempt: attempt.attempt,
                    output,
                    worker_id,
                    started_at: Some(started_at),
                };
                (
                    Command::ActivityCompleted(done),
                    Counter::Completed,
                    Ended::Completed,
                    output_bytes,
                )
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
                };
                let ended = if terminal {
                    Ended::FailedTerminal
                } else {
                    Ended::Failed
                };
                (Command::ActivityFailed(failed), Counter::Failed, ended, 0)
            }
        }
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
