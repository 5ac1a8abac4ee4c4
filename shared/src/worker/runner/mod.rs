//! The worker's event loop: consume, run handlers under a global bound, publish results,
//! drain on shutdown. One attempt's life is in [`execute`].

mod execute;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join_all, select_all};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::builder::BoxedHandler;
use super::heartbeat::{self, BusTransport, Heartbeats};
use super::stats::{Counter, Stats};
use super::Worker;
use crate::bus::{Bus, ConsumeOptions, Delivery, Disposition};
use crate::messages::{ActivityMessage, ActivityTaskBatch};
use crate::topology::Names;
use crate::{Envelope, Error, Result};
use execute::Executed;

/// How often the counters are logged while anything happens.
const REPORT_EVERY: Duration = Duration::from_secs(60);
/// After the grace period, how long consumers get to hand abandoned tasks back.
const ABANDON_WAIT: Duration = Duration::from_secs(2);
/// How long one heartbeat request waits for the service's answer.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a claim request waits for the heartbeat service's answer.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(5);
/// Bounds on the wait of a deferred task before it goes back to its queue.
const MIN_DEFER: Duration = Duration::from_millis(50);
const MAX_DEFER: Duration = Duration::from_secs(30);

/// State shared by every delivery of every queue of one worker.
struct Shared {
    bus: Bus,
    commands_exchange: String,
    /// Results for one shard that meet a result in flight go on together
    /// (docs/worker-sdk.md, "Results sent together").
    results: crate::bus::together::Together<Bus>,
    worker_id: String,
    /// One permit per running activity, across all queues.
    slots: Arc<Semaphore>,
    /// Cancelled on shutdown: take no new activity.
    stop: CancellationToken,
    /// Cancelled when the grace period is over: give up on running activities.
    abandon: CancellationToken,
    /// The number of slots.
    concurrency: usize,
    stats: Stats,
    /// The running attempts' heartbeat schedule.
    heartbeats: Heartbeats,
    /// Claims of the attempts taken, sent in groups.
    claims: super::claims::Claims,
    /// How long a stopped handler may take to return.
    stop_grace: Duration,
    /// How long a handler runs before the run is told it started.
    start_report_after: Duration,
    /// `weft_worker_claims_deferred`: tasks over their task's limit, given back later.
    deferred: prometheus_client::metrics::counter::Counter,
    /// This process's eager queues, when it has them: offered with each result.
    eager: Option<EagerQueues>,
}

/// A worker process's eager queues (docs/eager-dispatch.md).
struct EagerQueues {
    /// `<ns>.eager.<instance>`.
    prefix: String,
    /// The task names with a queue under it.
    task_names: Vec<String>,
}

/// Where a delivery came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// A task's shared queue: the attempt is claimed before it runs.
    Shared,
    /// This process's eager queue: the decider claimed the attempt for it.
    Eager,
}

pub(super) async fn run(
    worker: Worker,
    bus: Option<Bus>,
    shutdown: CancellationToken,
) -> Result<()> {
    let Worker {
        config,
        worker_id,
        concurrency,
        handlers,
        heartbeat,
        stop_grace,
        start_report_after,
        eager,
        domain,
        metrics,
    } = worker;
    if handlers.is_empty() {
        return Err(Error::Config("the worker has no handler registered".into()));
    }
    let names = config.names();
    let bus = match bus {
        Some(bus) => bus,
        None => {
            match Bus::connect_client(&config.amqp_url, names.clone(), shutdown.clone()).await {
                Ok(bus) => bus,
                Err(Error::ShuttingDown) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    };
    bus.count_publishes(&metrics);
    let domain = domain.as_deref();
    for task_name in handlers.keys() {
        bus.declare_activity_queue(&crate::topology::activity_key(task_name, domain))
            .await?;
    }
    // The decider sends eager tasks of no domain only (docs/domains.md).
    let eager = match eager && domain.is_none() {
        true => eager_queues(&bus, &names, handlers.keys()).await,
        false => None,
    };

    // Beats until the very end: draining activities still need them.
    let heartbeats = Heartbeats::new(heartbeat, &metrics);
    let beats_stop = CancellationToken::new();
    let _stop_beats_on_return = beats_stop.clone().drop_guard();
    let transport = BusTransport {
        bus: bus.clone(),
        worker_id: worker_id.clone(),
        timeout: HEARTBEAT_TIMEOUT,
    };
    tokio::spawn(heartbeat::run(heartbeats.clone(), transport, beats_stop));

    let shared = Arc::new(Shared {
        bus: bus.clone(),
        commands_exchange: names.commands_exchange(),
        // A result waits behind another at most as long as its own publish would wait
        // for its confirm: given up, the activity would run again.
        results: crate::bus::together::Together::new(
            bus.clone(),
            crate::activity_batch::RESULTS_KIND,
        )
        .with_max_wait(crate::bus::CONFIRM_TIMEOUT),
        worker_id,
        slots: Arc::new(Semaphore::new(concurrency)),
        stop: shutdown.child_token(),
        abandon: CancellationToken::new(),
        concurrency,
        stats: Stats::default(),
        heartbeats,
        claims: super::claims::Claims::new(bus.clone(), CLAIM_TIMEOUT),
        stop_grace,
        start_report_after,
        deferred: metrics.counter(
            "weft_worker_claims_deferred",
            "Activity tasks the heartbeat service deferred (over their task's limit), given back to their queue",
        ),
        eager,
    });
    let opts = ConsumeOptions {
        prefetch: u16::try_from(concurrency).unwrap_or(u16::MAX),
        concurrency,
    };
    let mut queues = Vec::with_capacity(handlers.len());
    let mut consumers = Vec::with_capacity(handlers.len());
    for (task_name, handler) in handlers {
        let key = crate::topology::activity_key(&task_name, domain);
        let mut sources = vec![(names.activity_queue(&key), Source::Shared)];
        if let Some(eager) = &shared.eager {
            if let Some(queue) = names.eager_queue(&eager.prefix, &task_name) {
                sources.push((queue, Source::Eager));
            }
        }
        for (queue, source) in sources {
            let state = Arc::clone(&shared);
            let (task_name, handler) = (task_name.clone(), Arc::clone(&handler));
            let on_delivery = move |delivery: Delivery| {
                Arc::clone(&state).handle(task_name.clone(), Arc::clone(&handler), delivery, source)
            };
            consumers.push(bus.consume(&queue, opts, on_delivery, shared.stop.clone()));
            queues.push(queue);
        }
    }
    tracing::info!(
        worker_id = %shared.worker_id,
        concurrency,
        queues = ?queues,
        "worker started"
    );

    // A consumer that ended is done with: its handle must not be polled again. It ended
    // unexpectedly only when no shutdown was asked for (a consumer ends as soon as it
    // sees the shutdown, possibly before `watch` does).
    let failed = watch(&shared, &mut consumers).await.and_then(|i| {
        drop(consumers.swap_remove(i));
        let queue = queues.swap_remove(i);
        (!shared.stop.is_cancelled()).then_some(queue)
    });
    if let Some(queue) = &failed {
        tracing::error!(%queue, "consumer stopped unexpectedly; stopping the worker");
    }
    if let Some(eager) = &shared.eager {
        withdraw_offers(&bus, &names, &eager.prefix).await;
    }
    drain(&shared, consumers, config.shutdown_grace).await;
    match failed {
        Some(queue) => Err(Error::Bus(format!("consumer of {queue} stopped"))),
        None => Ok(()),
    }
}

/// How long a stopping worker tries to withdraw its offers.
const WITHDRAW_TIMEOUT: Duration = Duration::from_secs(2);

/// Tells every command shard that this process's eager offers are off (it is stopping):
/// a decider that kept one unused would otherwise send a new run's first activity to a
/// queue nobody consumes any more, where it waits 5 s before it moves on
/// (docs/eager-dispatch.md, "Spare offers"). Best effort: without it the task is late,
/// not lost.
async fn withdraw_offers(bus: &Bus, names: &Names, prefix: &str) {
    let command = crate::messages::Command::WithdrawOffer(crate::messages::WithdrawOffer {
        queue_prefix: prefix.to_owned(),
    });
    let envelope = match crate::Envelope::new(prefix, None, &command) {
        Ok(envelope) => envelope,
        Err(e) => {
            tracing::warn!(error = %e, "could not withdraw the eager offers");
            return;
        }
    };
    let exchange = names.commands_exchange();
    let publishes = (0..names.shards()).map(|k| {
        let key = Names::shard_key(k);
        let (envelope, exchange) = (&envelope, &exchange);
        async move { bus.publish(exchange, &key, envelope).await }
    });
    match tokio::time::timeout(WITHDRAW_TIMEOUT, join_all(publishes)).await {
        Ok(sent) => {
            if let Some(Err(e)) = sent.into_iter().find(Result::is_err) {
                tracing::warn!(error = %e, "could not withdraw the eager offers from every shard");
            }
        }
        Err(_) => tracing::warn!("withdrawing the eager offers timed out"),
    }
}

/// Declares this process's eager queue of every task it runs; none (with a warning) when
/// the bus or the broker's permissions do not allow them: the worker then works as
/// before, each task claimed from its shared queue.
async fn eager_queues<'a>(
    bus: &Bus,
    names: &Names,
    task_names: impl Iterator<Item = &'a String>,
) -> Option<EagerQueues> {
    let prefix = names.eager_prefix(&uuid::Uuid::new_v4().simple().to_string());
    let mut declared = Vec::new();
    for task_name in task_names {
        match bus.declare_eager_queue(&prefix, task_name).await {
            Ok(_) => declared.push(task_name.clone()),
            // The in-process bus of `weft dev` has none: nothing to warn about.
            Err(e @ crate::Error::Config(_)) => {
                tracing::debug!(error = %e, "no eager dispatch on this bus");
                return None;
            }
            Err(e) => {
                tracing::warn!(error = %e, task_name = %task_name,
                    "no eager dispatch for this worker: every task is claimed from its shared queue (docs/eager-dispatch.md)");
                return None;
            }
        }
    }
    Some(EagerQueues {
        prefix,
        task_names: declared,
    })
}

/// Waits for shutdown, logging the counters now and then; returns the index of a consumer
/// that ended on its own, which stops the worker too.
async fn watch(shared: &Shared, consumers: &mut [tokio::task::JoinHandle<()>]) -> Option<usize> {
    let mut report = tokio::time::interval(REPORT_EVERY);
    report.tick().await;
    let mut last_reported = 0;
    loop {
        tokio::select! {
            biased;
            _ = shared.stop.cancelled() => return None,
            (_, i, _) = select_all(consumers.iter_mut()) => return Some(i),
            _ = report.tick() => {
                let now = shared.stats.activity();
                if now != last_reported {
                    last_reported = now;
                    shared.stats.log("worker progress", shared.running());
                }
            }
        }
    }
}

/// Stops taking work and waits (at most `grace`) for running handlers to publish and for
/// the consumers to settle; then abandons what is left, unacknowledged.
async fn drain(shared: &Shared, mut consumers: Vec<tokio::task::JoinHandle<()>>, grace: Duration) {
    shared.stop.cancel();
    tracing::info!(
        running = shared.running(),
        ?grace,
        "worker stopping: finishing running activities"
    );
    let all_slots = u32::try_from(shared.concurrency).unwrap_or(u32::MAX);
    let settled = tokio::time::timeout(grace, async {
        // Every slot back means no handler is running or publishing any more.
        let _all = shared.slots.acquire_many(all_slots).await;
        join_all(consumers.iter_mut()).await;
    })
    .await;
    if settled.is_err() {
        tracing::warn!(
            running = shared.running(),
            "grace period over: abandoning running activities, they go back to their queues"
        );
        shared.abandon.cancel();
        let handed_back = tokio::time::timeout(ABANDON_WAIT, join_all(consumers.iter_mut())).await;
        if handed_back.is_err() {
            consumers.iter().for_each(|c| c.abort());
        }
    }
    shared.stats.log("worker stopped", shared.running());
}

impl Shared {
    /// Handlers running (or publishing) right now.
    fn running(&self) -> usize {
        self.concurrency
            .saturating_sub(self.slots.available_permits())
    }

    /// One delivery of `task_name`'s queue, start to disposition: one task, or several
    /// sent together to this process's eager queue (docs/eager-dispatch.md, "Eager tasks
    /// sent together"), run side by side and settled as one message.
    async fn handle(
        self: Arc<Self>,
        task_name: String,
        handler: BoxedHandler,
        delivery: Delivery,
        source: Source,
    ) -> Disposition {
        if self.stop.is_cancelled() {
            self.stats.incr(Counter::Requeued);
            return Disposition::Requeue;
        }
        let tasks = match delivery.envelope.decode::<ActivityMessage>() {
            Ok(ActivityMessage::ActivityTask(task)) => {
                Ok(vec![(task, delivery.traceparent.clone())])
            }
            Ok(ActivityMessage::ActivityTasks(batch)) => batch.into_tasks(),
            Err(e) => Err(e),
        };
        let invalid = match &tasks {
            Ok(tasks) => tasks
                .iter()
                .find(|(task, _)| task.reply_to.is_empty())
                .map(|(task, _)| format!("activity task {} has an empty replyTo", task.task_id)),
            Err(e) => Some(format!("not an activity task: {e}")),
        };
        if let Some(reason) = invalid {
            self.stats.incr(Counter::DeadLettered);
            tracing::warn!(queue = %delivery.queue, id = %delivery.envelope.id, %reason,
                "a message that is not a valid activity task; dead-lettering it");
            return match source {
                Source::Shared => Disposition::DeadLetter(reason),
                // An eager queue has no DLQ: the decider's consumer of expired eager
                // tasks sends on what it can and dead-letters the rest.
                Source::Eager => self.pass_on_bytes(delivery.envelope.to_bytes()).await,
            };
        }
        let tasks = tasks.unwrap_or_default();
        let redelivered = delivery.redelivered;
        if tasks.len() == 1 {
            let (task, traceparent) = tasks.into_iter().next().expect("one task");
            return self
                .handle_task(&task_name, handler, task, traceparent, redelivered, source)
                .await;
        }
        let each = tasks.iter().cloned().map(|(task, traceparent)| {
            let handler = Arc::clone(&handler);
            self.handle_task(&task_name, handler, task, traceparent, redelivered, source)
        });
        let settled = join_all(each).await;
        // One message: acknowledged once every task is done with. The tasks that have to
        // go back (a result that could not be published, shutdown) go on alone to the
        // decider's queue of expired eager tasks, which sends each to its shared queue,
        // where another worker claims it: requeueing the message would run the finished
        // ones again.
        let unfinished: Vec<_> = tasks
            .into_iter()
            .zip(&settled)
            .filter(|(_, d)| !matches!(d, Disposition::Ack))
            .map(|(task, _)| task)
            .collect();
        if unfinished.is_empty() {
            return Disposition::Ack;
        }
        tracing::info!(queue = %delivery.queue, tasks = unfinished.len(),
            "tasks sent together that this worker did not finish go on to their shared queues");
        let envelopes: Result<Vec<Envelope>> = unfinished
            .iter()
            .map(|(task, _)| {
                let message = ActivityMessage::ActivityTask(task.clone());
                Envelope::new(&task.workflow_id, Some(task.run_id), &message)
            })
            .collect();
        let body = envelopes.and_then(|envelopes| {
            ActivityTaskBatch::encode_envelopes(
                envelopes
                    .iter()
                    .zip(&unfinished)
                    .map(|(envelope, (_, trace))| (envelope, trace.as_deref())),
            )
        });
        self.pass_on_bytes(body).await
    }

    /// Sends an eager message (or what is left of one) to `<ns>.eager.expired`, as the
    /// broker does with one that waited too long, and acknowledges the delivery; gives
    /// it back when that fails.
    async fn pass_on_bytes(&self, body: Result<Vec<u8>>) -> Disposition {
        let queue = self.bus.names().eager_expired_queue();
        let sent = match body {
            Ok(body) => self.bus.publish_bytes("", &queue, &body, None).await,
            Err(e) => Err(e),
        };
        match sent {
            Ok(()) => Disposition::Ack,
            Err(e) => {
                self.stats.incr(Counter::Requeued);
                tracing::warn!(%queue, error = %e, "could not pass the tasks on; they go back to their queue");
                Disposition::Requeue
            }
        }
    }

    /// One task of a delivery, from its slot to its disposition.
    async fn handle_task(
        &self,
        task_name: &str,
        handler: BoxedHandler,
        task: crate::messages::ActivityTask,
        traceparent: Option<String>,
        redelivered: bool,
        source: Source,
    ) -> Disposition {
        if task.task_name != task_name {
            tracing::warn!(task_name = %task.task_name, queue_task = %task_name,
                "activity task on another task's queue; running this queue's handler");
        }
        // Wait for a slot, unless shutdown comes first: then the task goes back untouched.
        let slot = tokio::select! {
            biased;
            _ = self.stop.cancelled() => None,
            slot = Arc::clone(&self.slots).acquire_owned() => slot.ok(),
        };
        let Some(slot) = slot else {
            self.stats.incr(Counter::Requeued);
            return Disposition::Requeue;
        };
        let span = tracing::info_span!(
            "activity",
            task_name = %task_name,
            task_ref = %task.task_ref,
            workflow_id = %task.workflow_id,
            run_id = %task.run_id,
            task_id = %task.task_id,
            attempt = task.attempt,
            worker_id = %self.worker_id,
            redelivered,
        );
        crate::telemetry::set_parent(&span, traceparent.as_deref());
        let executed = self
            .execute(handler, task, redelivered, source)
            .instrument(span)
            .await;
        drop(slot);
        match executed {
            Executed::Done(disposition) => disposition,
            Executed::Deferred(advised) => self.defer(advised).await,
        }
    }

    /// A task over its task's limit (docs/task-limits.md): nothing ran, and its slot is
    /// free again for other tasks while it waits. After the advised wait it goes back
    /// to its queue (nack with requeue), where any worker may take it and claim it
    /// again; a worker holding it until a place frees would keep it from the others and
    /// hold it unacknowledged for as long as the limit lasts. The wait is what keeps a
    /// crowd of deferred tasks from spinning: each costs one claim and one redelivery
    /// per wait. It is stretched by up to a quarter at random, so that tasks deferred
    /// together do not come back together, and bounded by [`MAX_DEFER`] (a long rate
    /// window is waited out in several rounds, never past the broker's delivery
    /// timeout). Shutdown cuts it short.
    async fn defer(&self, advised: Duration) -> Disposition {
        self.stats.incr(Counter::Deferred);
        self.deferred.inc();
        let wait = advised.clamp(MIN_DEFER, MAX_DEFER);
        let wait = wait.mul_f64(1.0 + rand::random::<f64>() / 4.0);
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = self.stop.cancelled() => {}
        }
        Disposition::Requeue
    }
}
