//! One command shard's processing: a batch of deliveries → load runs → apply commands
//! → run the interpreter → ONE transaction (events, run rows, task rows, outbox) with a
//! version check → publish the outbox → acknowledge. Several commands share a
//! transaction (group commit); their order per run is the queue's order.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use chrono::Utc;
use uuid::Uuid;
use weft::bus::together::Together;
use weft::bus::{Bus, Delivery, Disposition, ExchangeKind};
use weft::dsl::failure_workflow::needs_freezing;
use weft::dsl::{TaskType, WorkflowDef};
use weft::event_location::EventLocation;
use weft::messages::{
    ActivityMessage, ActivityTask, AttemptRef, ChildWorkflowEnded, Command, Event,
    HeartbeatMessage, ParentLink, StartWorkflow, StopAttempts, TaskScheduled, TaskStarted,
    TimerFired, WorkflowStarted,
};
use weft::registry::{AttemptLimits, AttemptStatus};
use weft::store::operations::OperationOutcome;
use weft::store::outbox::{publish_together, OutboxMessage};
use weft::store::runs::{AttemptCheck, CommitBatch, StoredEvent};
use weft::store::starts::NewStart;
use weft::store::timers::TimerRecord;
use weft::store::Store;
use weft::{Envelope, Error};

use crate::apply::{apply_command, Applied, ResetPlan};
use crate::committer::{Committer, PublishedEarly};
use crate::eager_batcher::EagerBatcher;
use crate::interpreter::{decide, events_for, ChildDefinition, Decision};
use crate::metrics::DeciderMetrics;
use crate::poison::Failure;
use crate::recent_starts::RecentStarts;
use crate::recent_verdicts::RecentVerdicts;
use crate::spare_offers::{Eager, SpareOffers};
use crate::state::{RunState, RunStatus};

/// Runs kept in memory per shard; beyond this the cache is cleared (runs reload from
/// PostgreSQL on their next command).
const CACHE_CAPACITY: usize = 10_000;
/// Rounds of decisions one command may settle: a run with more to decide (a long loop of
/// system tasks, say) commits them as a slice and goes on in a `Continue` behind the
/// shard's other commands, so that no batch grows without bound and other runs are not
/// held up (docs/decider.md, "Long settles in slices").
const ROUNDS_PER_SLICE: usize = 1_000;
/// Version conflicts are retried this many times before the batch is requeued.
const MAX_ATTEMPTS: usize = 3;
/// How long a command that came before its run's start waits before it is tried again.
const PARK_FOR: chrono::TimeDelta = chrono::TimeDelta::seconds(1);
/// How old an accepted start may be for commands to wait for it: one that has not become
/// a run in this time never will (its start message was dead-lettered).
const PARK_AT_MOST: chrono::TimeDelta = chrono::TimeDelta::hours(1);

/// The state of one command shard: its sticky cache of runs.
pub struct Shard {
    store: Store,
    bus: Bus,
    committer: Committer,
    cache: Mutex<HashMap<String, RunState>>,
    publishers: TaskTracker,
    metrics: DeciderMetrics,
    limits: RunLimits,
    /// The lifecycle events published (`WEFT_EVENTS`); the others are never written.
    events: weft::events::EventKeys,
    /// Callers waiting for runs of the shard to reach a point (synchronous execution).
    watches: crate::watch::Watches,
    /// The process's eager offers that their runs did not take.
    spares: SpareOffers,
    /// The process's sender of eager tasks (docs/eager-dispatch.md, "Eager tasks sent
    /// together").
    eager_sender: EagerBatcher,
    /// Verdicts the shard committed lately, for `WatchVerdict` calls.
    verdicts: RecentVerdicts,
    /// Workflows whose run the shard started lately: a start naming one is a copy.
    recent_starts: RecentStarts,
    /// Failures of commands that failed the same way each time, until set aside.
    attempts: crate::poison::Attempts,
    /// Its activity tasks say their results may come together (`WEFT_RESULTS_TOGETHER`).
    results_together: bool,
    /// The process's sender of lifecycle events when they go together
    /// (`WEFT_EVENTS_TOGETHER`; docs/events.md, "Events sent together"); `None`: one
    /// message an event.
    events_together: Option<Together<Bus>>,
}

/// A run being changed by the current batch.
struct Working {
    state: RunState,
    /// Version in PostgreSQL when loaded; `None` for a run created by this batch.
    loaded_version: Option<i64>,
    first_new_event: usize,
    events: Vec<StoredEvent>,
    touched: HashSet<Uuid>,
    outbox: Vec<OutboxMessage>,
    timers: Vec<TimerRecord>,
    /// Timers made moot by this batch (a WAIT that ended before its timer fired).
    cancelled_timers: Vec<Uuid>,
    /// Work that ended without its result (terminate, skip, cancel, timeout): its
    /// workers are told to stop, its child runs are terminated.
    stopped: Vec<Stopped>,
    /// Replaced by a reset: it is no longer its workflow's current run, and its end is
    /// not reported to a parent (the successor run carries on for it).
    replaced: bool,
    /// The run's end has had its effects (reported to the parent, failure workflow).
    effects_done_for_end: bool,
    /// Lifecycle events of the new events, for the events exchange.
    lifecycle: Vec<weft::messages::LifecycleEvent>,
    /// Hook deliveries the new events fire (docs/hooks.md).
    deliveries: Vec<weft::hooks::NewDelivery>,
    /// Registry rows of the activity attempts scheduled or ended, oldest first (the last
    /// of an attempt is its state at the commit).
    checks: Vec<AttemptCheck>,
    /// Runs this run starts (children, START_WORKFLOW, its failure workflow), recorded
    /// as accepted starts with the commit.
    starts: Vec<NewStart>,
    /// The offer of the worker whose result the current command is, to run the next
    /// activity itself (docs/eager-dispatch.md); taken by the first activity it fits,
    /// dropped after the command.
    eager: Option<Eager>,
    /// Activities dispatched eagerly in this batch: counted once committed (a batch
    /// retried after a conflict decides them again).
    eager_dispatched: u64,
    /// The outbox ids of its eager tasks whose worker takes them sent together
    /// (`EagerOffer::batches`).
    sent_together: Vec<Uuid>,
}

/// A task that left its pending state without a result.
struct Stopped {
    task_id: Uuid,
    attempt: i32,
    task_type: String,
    /// The child run of a SUB_WORKFLOW task.
    child_workflow_id: Option<String>,
    reason: String,
    /// Stopped because its run ended.
    by_run_end: bool,
}

/// What one command of a batch did: for an operator command, the verdict the gateway
/// answers with.
struct Verdict {
    status: i16,
    body: serde_json::Value,
}

impl Working {
    fn new(state: RunState, loaded_version: Option<i64>, events: Vec<StoredEvent>) -> Self {
        Self {
            touched: if loaded_version.is_none() {
                state.tasks.iter().map(|t| t.task_id).collect()
            } else {
                HashSet::new()
            },
            state,
            loaded_version,
            first_new_event: 0,
            events,
            outbox: Vec::new(),
            timers: Vec::new(),
            cancelled_timers: Vec::new(),
            stopped: Vec::new(),
            replaced: false,
            effects_done_for_end: false,
            lifecycle: Vec::new(),
            eager: None,
            eager_dispatched: 0,
            sent_together: Vec::new(),
            deliveries: Vec::new(),
            checks: Vec::new(),
            starts: Vec::new(),
        }
    }

    /// Whether the new events end the run.
    fn ended(&self) -> bool {
        self.events[self.first_new_event..]
            .iter()
            .any(|e| e.event.ends_run())
    }
}

/// The limits a shard records in each run it starts (so a replay applies the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// `WEFT_MAX_LOOP_ITERATIONS`.
    pub max_loop_iterations: u32,
    /// `WEFT_MAX_FORK_BRANCHES`.
    pub max_fork_branches: u32,
    /// `WEFT_MAX_VARIABLES_KB`.
    pub max_variables_kb: u32,
}

impl Shard {
    /// A shard with an empty cache. Outbox publishes run on `publishers`, which the
    /// caller waits for at shutdown.
    pub fn new(
        store: Store,
        bus: Bus,
        committer: Committer,
        publishers: TaskTracker,
        metrics: DeciderMetrics,
        limits: RunLimits,
        events: weft::events::EventKeys,
    ) -> Self {
        Self {
            store,
            bus: bus.clone(),
            committer,
            cache: Mutex::new(HashMap::new()),
            publishers,
            metrics,
            limits,
            events,
            watches: crate::watch::Watches::default(),
            spares: SpareOffers::default(),
            eager_sender: EagerBatcher::new(bus.clone()),
            verdicts: RecentVerdicts::default(),
            recent_starts: RecentStarts::default(),
            attempts: crate::poison::Attempts::default(),
            results_together: true,
            events_together: None,
        }
    }

    /// Publishes its lifecycle events through `sender`, which the other shards of the
    /// process share: events with one routing key that meet there go as one
    /// `LifecycleEvents` message (`WEFT_EVENTS_TOGETHER`). `None`: one message an event.
    pub fn sending_events_together(mut self, sender: Option<Together<Bus>>) -> Self {
        self.events_together = sender;
        self
    }

    /// Whether its activity tasks say that their results may come together in one
    /// `ActivityResults` message (`WEFT_RESULTS_TOGETHER`; never where a publish waits
    /// for the store's writer, see [`Shard::activity_task`]).
    pub fn taking_results_together(mut self, together: bool) -> Self {
        self.results_together = together;
        self
    }

    /// Keeps the offers its runs do not take in `spares`, which the other shards of the
    /// process share (a run ends on one shard, the next starts on another).
    pub fn sharing_offers(mut self, spares: SpareOffers) -> Self {
        self.spares = spares;
        self
    }

    /// Sends its eager tasks through `sender`, which the other shards of the process
    /// share (tasks of many shards for one worker go together).
    pub fn sharing_eager_sender(mut self, sender: EagerBatcher) -> Self {
        self.eager_sender = sender;
        self
    }

    /// Processes a batch; returns one disposition per delivery, in order.
    ///
    /// A batch that fails in a way retrying can mend (the database or the broker away)
    /// is requeued whole after a pause. One that fails the same way every time is taken
    /// apart: each command is applied alone, so that the others take effect and the one
    /// at fault is found, counted, retried with a back-off and, at its last attempt, set
    /// aside (docs/decider.md, "Poison commands").
    pub async fn handle_batch(&self, deliveries: Vec<Delivery>) -> Vec<Disposition> {
        self.metrics.commands.inc_by(deliveries.len() as u64);
        self.metrics.batch_size.observe(deliveries.len() as f64);
        let commands: Vec<Result<Command, String>> = deliveries
            .iter()
            .map(|d| d.envelope.decode::<Command>().map_err(|e| e.to_string()))
            .collect();
        let unreadable = commands.iter().filter(|c| c.is_err()).count();
        self.metrics.set_aside.inc_by(unreadable as u64);
        match self.apply_batch(&deliveries, &commands).await {
            Ok(()) => settled_as(Disposition::Ack, &commands),
            Err(Failure::Transient(e)) => {
                tracing::error!(error = %e, "command batch failed; requeueing");
                // Back off so a database outage does not become a redelivery storm.
                tokio::time::sleep(Duration::from_millis(500)).await;
                settled_as(Disposition::Requeue, &commands)
            }
            Err(failure) if deliveries.len() == 1 => {
                let (disposition, pause) = self.judge(&deliveries[0], &commands[0], failure).await;
                tokio::time::sleep(pause).await;
                vec![disposition]
            }
            Err(failure) => {
                tracing::warn!(error = %failure, size = deliveries.len(), "command batch failed; applying its commands one by one");
                self.one_by_one(&deliveries, &commands).await
            }
        }
    }

    /// [`Self::try_batch`], again after a version conflict (reading every run), with a
    /// panic caught as a failure of its own.
    async fn apply_batch(
        &self,
        deliveries: &[Delivery],
        commands: &[Result<Command, String>],
    ) -> Result<(), Failure> {
        for attempt in 1..=MAX_ATTEMPTS {
            // A retry follows a conflict, perhaps a start of a run that exists: load all.
            let trust_new_starts = attempt == 1;
            let tried =
                crate::poison::guarded(self.try_batch(deliveries, commands, trust_new_starts))
                    .await;
            match tried {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => {
                    self.evict(deliveries);
                    // A unique or exclusion violation: another writer created a run of
                    // the same workflow (one current run per workflow).
                    if e.is_write_conflict() && attempt < MAX_ATTEMPTS {
                        self.metrics.conflicts.inc();
                        tracing::info!(error = %e, attempt, "concurrent writer detected; reloading and retrying");
                        continue;
                    }
                    return Err(Failure::of(e));
                }
                Err(panic) => {
                    self.evict(deliveries);
                    return Err(Failure::Persistent(panic));
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Applies each command of a failed batch alone, in order. A command after one of
    /// its run that failed is requeued behind it (a run's commands keep their order);
    /// once a failure is one retrying can mend, the rest are requeued too.
    async fn one_by_one(
        &self,
        deliveries: &[Delivery],
        commands: &[Result<Command, String>],
    ) -> Vec<Disposition> {
        let mut dispositions = Vec::with_capacity(deliveries.len());
        let mut held: HashSet<&str> = HashSet::new();
        let mut away = false;
        // One pause for the batch, the longest its failed commands call for.
        let mut pause = Duration::ZERO;
        for (i, (delivery, command)) in deliveries.iter().zip(commands).enumerate() {
            let wf = delivery.envelope.workflow_id.as_str();
            if let Err(why) = command {
                dispositions.push(Disposition::DeadLetter(why.clone()));
                continue;
            }
            if away || held.contains(wf) {
                dispositions.push(Disposition::Requeue);
                continue;
            }
            let alone = std::slice::from_ref(delivery);
            let disposition = match self.apply_batch(alone, &commands[i..=i]).await {
                Ok(()) => {
                    self.attempts.forget(delivery.envelope.id);
                    Disposition::Ack
                }
                Err(Failure::Transient(e)) => {
                    tracing::error!(error = %e, "command failed; requeueing it and the rest of its batch");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    away = true;
                    Disposition::Requeue
                }
                Err(failure) => {
                    held.insert(wf);
                    let (disposition, wait) = self.judge(delivery, command, failure).await;
                    pause = pause.max(wait);
                    disposition
                }
            };
            dispositions.push(disposition);
        }
        tokio::time::sleep(pause).await;
        dispositions
    }

    /// The disposition of a command that failed the same way again, applied alone, and
    /// the pause before the shard goes on: requeued after a back-off while it has
    /// attempts left, else set aside — unless the store refuses its run's failure too.
    async fn judge(
        &self,
        delivery: &Delivery,
        command: &Result<Command, String>,
        failure: Failure,
    ) -> (Disposition, Duration) {
        let Ok(command) = command else {
            return (Disposition::DeadLetter(failure.to_string()), Duration::ZERO);
        };
        let id = delivery.envelope.id;
        let failures = self.attempts.failed(id);
        let pause = crate::poison::back_off(failures);
        if failures < crate::poison::ATTEMPTS {
            tracing::warn!(workflow_id = %delivery.envelope.workflow_id, command = %delivery.envelope.kind,
                message_id = %id, failures, error = %failure, ?pause, "command batch failed the same way again; retrying its command after a pause");
            return (Disposition::Requeue, pause);
        }
        match self.set_aside(delivery, command, failures, &failure).await {
            Some(dead) => {
                self.attempts.forget(id);
                (dead, Duration::ZERO)
            }
            None => (Disposition::Requeue, pause),
        }
    }

    /// Sets a command aside: its run ends FAILED with the reason, and the command goes to
    /// the shard's dead-letter queue. `None` when the store refuses the run's failure
    /// too (a refusal of every write: a constraint or a grant changed, say): the command
    /// is not the cause, so it waits with the others.
    async fn set_aside(
        &self,
        delivery: &Delivery,
        command: &Command,
        failures: u32,
        failure: &Failure,
    ) -> Option<Disposition> {
        use weft::envelope::Typed as _;
        let kind = command.kind();
        let wf = &delivery.envelope.workflow_id;
        let reason = format!(
            "command {kind} ({}) failed {failures} times and was set aside: {failure}",
            delivery.envelope.id
        );
        let aside = Command::SetAside(weft::messages::SetAside {
            command: kind.to_owned(),
            message_id: delivery.envelope.id,
            reason: reason.clone(),
        });
        let failing = Envelope::new(wf, None, &aside).map(|envelope| Delivery {
            envelope,
            traceparent: delivery.traceparent.clone(),
            redelivered: false,
            queue: delivery.queue.clone(),
            reply_to: None,
            correlation_id: None,
        });
        let failing = failing
            .map_err(|e| tracing::error!(workflow_id = %wf, error = %e, "a SetAside command could not be encoded"))
            .ok()?;
        match self
            .apply_batch(std::slice::from_ref(&failing), &[Ok(aside)])
            .await
        {
            Ok(()) => {}
            Err(refused @ (Failure::Transient(_) | Failure::Refused(_))) => {
                tracing::error!(workflow_id = %wf, command = kind, error = %failure, run_failure = %refused,
                    "command batch failed and the store refuses the run's failure too: not setting the command aside; retrying after a pause");
                return None;
            }
            Err(Failure::Persistent(e)) => {
                // The run cannot be read (the same failure, most likely): no event can
                // end it, so its row says FAILED instead of RUNNING forever.
                let unreadable = format!("{reason} (the run's history cannot be read: {e})");
                if let Err(e) = self.store.fail_unreadable_run(wf, &unreadable).await {
                    tracing::error!(workflow_id = %wf, error = %e, "the run of a command set aside could not be marked FAILED: retrying the command after a pause");
                    return None;
                }
            }
        }
        self.metrics.set_aside.inc();
        tracing::error!(workflow_id = %wf, command = kind, message_id = %delivery.envelope.id, error = %failure,
            "command set aside: dead-lettered, its run failed");
        Some(Disposition::DeadLetter(reason))
    }

    async fn try_batch(
        &self,
        deliveries: &[Delivery],
        commands: &[Result<Command, String>],
        trust_new_starts: bool,
    ) -> Result<(), Error> {
        let mut working: HashMap<String, Working> = HashMap::new();
        let mut order: Vec<String> = Vec::new();
        let mut retired: Vec<Working> = Vec::new();
        let mut outcomes = Vec::new();
        // The traceparent of each command's span: the commit's span continues them.
        let mut traced: Vec<String> = Vec::new();
        let mut new_watches = Vec::new();
        let mut verdict_watches: Vec<(&Delivery, Uuid)> = Vec::new();
        // Commands that came before their run's start was applied, parked for later.
        let mut parked: Vec<TimerRecord> = Vec::new();
        for (delivery, command) in deliveries.iter().zip(commands) {
            let Ok(command) = command else { continue };
            if let Command::WatchRun(watch) = command {
                new_watches.push((delivery, watch));
                continue;
            }
            if let Command::WatchVerdict(watch) = command {
                verdict_watches.push((delivery, watch.request_id));
                continue;
            }
            if let Command::WithdrawOffer(withdrawn) = command {
                self.spares.withdraw(&withdrawn.queue_prefix);
                continue;
            }
            let wf = &delivery.envelope.workflow_id;
            // The first delivery of a start names a workflow id the gateway (or a parent)
            // just made: there is no run to read. Should there be one after all (a start
            // published twice), the commit meets the current run's unique index and the
            // batch is applied again, reading every run (`trust_new_starts` false).
            let new_start = trust_new_starts
                && !delivery.redelivered
                && matches!(command, Command::StartWorkflow(_))
                && !self.recent_starts.contains(wf);
            if !working.contains_key(wf) {
                if let Some(w) = self.load(wf, new_start).await? {
                    working.insert(wf.clone(), w);
                    order.push(wf.clone());
                }
            }
            let span = tracing::info_span!(
                "decider.command",
                workflow_id = %wf,
                command = %delivery.envelope.kind
            );
            let run_trace = working.get(wf).and_then(|w| w.state.traceparent.as_deref());
            trace_command(&span, delivery.traceparent.as_deref(), run_trace);
            traced.extend(weft::telemetry::traceparent_of_span(&span));
            // `instrument`, not `span.enter()`: the guard must not live across awaits.
            let verdict = self
                .apply_one(
                    &mut working,
                    &mut order,
                    &mut retired,
                    &mut parked,
                    delivery,
                    command,
                )
                .instrument(span)
                .await?;
            if let (Some(request_id), Some(verdict)) = (command.request_id(), verdict) {
                outcomes.push(OperationOutcome {
                    request_id,
                    workflow_id: delivery.envelope.workflow_id.clone(),
                    status: verdict.status,
                    body: verdict.body,
                });
            }
        }
        let mut batch = CommitBatch {
            outcomes,
            timers: parked,
            ..CommitBatch::default()
        };
        let current = order.iter().map(|wf| &working[wf]);
        for w in retired.iter().chain(current) {
            if w.events.len() == w.first_new_event && !w.replaced {
                // Nothing changed in the run; a command it passed on is sent all the same.
                batch.outbox.extend(w.outbox.iter().cloned());
                continue;
            }
            let mut record = w.state.record();
            record.is_current = !w.replaced;
            match w.loaded_version {
                None => batch.new_runs.push(record),
                Some(v) => batch.updated_runs.push((record, v)),
            }
            batch
                .events
                .extend(w.events[w.first_new_event..].iter().cloned());
            // The touched tasks alone, in schedule order: a commit of a run of 100,000
            // tasks does not pass over them all.
            let mut touched: Vec<&crate::state::TaskState> = w
                .touched
                .iter()
                .filter_map(|id| w.state.task(*id))
                .collect();
            touched.sort_unstable_by_key(|t| t.seq);
            batch
                .tasks
                .extend(touched.into_iter().map(|t| w.state.task_record(t)));
            batch.outbox.extend(w.outbox.iter().cloned());
            if w.ended() {
                // Whatever the run was waiting for is moot: its timers go with the end.
                batch.ended_runs.push(w.state.run_id);
            } else {
                batch.timers.extend(w.timers.iter().cloned());
                batch
                    .cancelled_timers
                    .extend(w.cancelled_timers.iter().copied());
            }
            batch.hook_deliveries.extend(w.deliveries.iter().cloned());
            batch.starts.extend(w.starts.iter().cloned());
            let mut last: HashMap<(Uuid, i32), usize> = HashMap::new();
            for (i, c) in w.checks.iter().enumerate() {
                last.insert((c.task_id, c.attempt), i);
            }
            batch.checks.extend(
                w.checks
                    .iter()
                    .enumerate()
                    .filter(|(i, c)| last.get(&(c.task_id, c.attempt)) == Some(i))
                    .map(|(_, c)| c.clone()),
            );
        }
        if batch.is_empty() {
            self.answer_verdicts(&[], verdict_watches).await;
            return self.settle_watches(&working, &order, new_watches).await;
        }
        let started = Instant::now();
        let commit = tracing::info_span!("decider.commit", commands = deliveries.len());
        weft::telemetry::set_parent(&commit, traced.first().map(String::as_str));
        for other in traced.iter().skip(1) {
            weft::telemetry::add_link(&commit, Some(other));
        }
        let together: HashSet<Uuid> = working
            .values()
            .chain(&retired)
            .flat_map(|w| w.sent_together.iter().copied())
            .collect();
        let early = self.dispatch_early(&batch.outbox, &together);
        let published_early = early.as_ref().map(|e| e.published.clone());
        let (batch, committed) = self
            .committer
            .commit(batch, published_early)
            .instrument(commit)
            .await;
        committed?;
        self.metrics
            .commit_seconds
            .observe(started.elapsed().as_secs_f64());
        let eager: u64 = working
            .values()
            .chain(&retired)
            .map(|w| w.eager_dispatched)
            .sum();
        self.metrics.eager_dispatches.inc_by(eager);
        self.verdicts.remember(&batch.outcomes);
        self.answer_verdicts(&batch.outcomes, verdict_watches).await;
        self.settle_watches(&working, &order, new_watches).await?;
        self.remember(working, &order);
        // The effect is committed, so the commands may be acknowledged now; publishing
        // goes on beside the next batch instead of holding up the shard. Should it fail
        // (or the process die first), the rows stay for the history service's sweeper.
        let (store, bus) = (self.store.clone(), self.bus.clone());
        // The early messages' rows the commit wrote (not those it left out), apart from
        // the rest of the outbox, which is published now.
        let (written_early, outbox): (Vec<OutboxMessage>, Vec<OutboxMessage>) = match &early {
            Some(early) => batch
                .outbox
                .into_iter()
                .partition(|m| early.published.ids().contains(&m.id)),
            None => (Vec::new(), batch.outbox),
        };
        let written_early: HashSet<Uuid> = written_early.iter().map(|m| m.id).collect();
        let (events, outbox) = self.events_apart(outbox);
        let events_together = self.events_together.clone();
        let publish_seconds = self.metrics.publish_seconds.clone();
        self.publishers.spawn(async move {
            let together = async {
                let Some(sender) = events_together.filter(|_| !events.is_empty()) else {
                    return Ok(());
                };
                let (sent, published) = publish_together(&sender, events).await;
                if !sent.is_empty() {
                    store.forget_outbox(sent);
                }
                published
            };
            let (published, published_together) =
                futures_util::join!(store.publish_outbox(&bus, &outbox), together);
            let published = published.and(published_together);
            let published_early = match early {
                Some(early) => early.confirmed(&store, &written_early).await,
                None => Ok(()),
            };
            match published.and(published_early) {
                Ok(()) => publish_seconds.observe(started.elapsed().as_secs_f64()),
                Err(e) => tracing::warn!(error = %e, "outbox publish failed; left for the sweeper"),
            }
        });
        Ok(())
    }

    /// The committed lifecycle events that go through the events sender (when there is
    /// one), apart from the rest of the outbox. Not when the outbox has an EVENT task's
    /// message: envelopes go out only once those are confirmed (`publish_messages`).
    fn events_apart(&self, outbox: Vec<OutboxMessage>) -> (Vec<OutboxMessage>, Vec<OutboxMessage>) {
        if self.events_together.is_none() || outbox.iter().any(|m| m.raw) {
            return (Vec::new(), outbox);
        }
        let exchange = self.bus.names().events_exchange();
        outbox.into_iter().partition(|m| m.exchange == exchange)
    }

    /// Starts publishing the eager tasks of a batch about to be committed, so that each
    /// travels to its worker while the commit runs instead of after it
    /// (docs/eager-dispatch.md, "Dispatch while committing"). Not when the batch has an
    /// EVENT task's message (those go out, confirmed, before every envelope of their
    /// commit), nor when the bus publishes through the store's writer (`weft dev`), which
    /// the commit holds.
    ///
    /// They go through the process's eager sender: those in `together` (their worker
    /// takes batches) with other tasks for the same queue when they meet there.
    fn dispatch_early(
        &self,
        outbox: &[OutboxMessage],
        together: &HashSet<Uuid>,
    ) -> Option<EarlyDispatch> {
        if self.bus.publishes_through_the_store() || outbox.iter().any(|m| m.raw) {
            return None;
        }
        let eager_exchange = self.bus.names().eager_exchange();
        let tasks: Vec<(OutboxMessage, bool)> = outbox
            .iter()
            .filter(|m| m.exchange == eager_exchange)
            .map(|m| (m.clone(), together.contains(&m.id)))
            .collect();
        if tasks.is_empty() {
            return None;
        }
        let published = Arc::new(PublishedEarly::new(
            tasks.iter().map(|(m, _)| m.id).collect(),
        ));
        let (sender, flag, count) = (self.eager_sender.clone(), published.clone(), tasks.len());
        let publishing = tokio::spawn(async move {
            let (sent, outcome) = sender.publish(tasks).await;
            if outcome.is_ok() && sent.len() == count {
                flag.mark_confirmed();
            }
            (sent, outcome)
        });
        Some(EarlyDispatch {
            published,
            publishing,
        })
    }

    /// Applies one command to its run (loading or creating it), runs the interpreter and
    /// gathers the side effects; returns the verdict for an operator command.
    async fn apply_one(
        &self,
        working: &mut HashMap<String, Working>,
        order: &mut Vec<String>,
        retired: &mut Vec<Working>,
        parked: &mut Vec<TimerRecord>,
        delivery: &Delivery,
        command: &Command,
    ) -> Result<Option<Verdict>, Error> {
        // `try_batch` loaded the run (if there is one) before the command's span.
        let wf = delivery.envelope.workflow_id.clone();
        let mut handed_on = false;
        let verdict = match (working.get_mut(&wf), command) {
            (None, Command::StartWorkflow(start)) => {
                let w = self.start_run(&wf, start, delivery)?;
                working.insert(wf.clone(), w);
                order.push(wf.clone());
                None
            }
            (None, Command::Continue(_) | Command::SetAside(_)) => {
                // The decider's own commands name a run it has: none means there is
                // nothing left to go on with or to fail.
                tracing::info!(workflow_id = %wf, command = %delivery.envelope.kind, "command for a workflow without a run ignored");
                return Ok(None);
            }
            (None, _) => {
                if let Some(timer) = self.park(delivery).await? {
                    parked.push(timer);
                    return Ok(None);
                }
                tracing::warn!(workflow_id = %wf, command = %delivery.envelope.kind, "command for an unknown workflow ignored");
                return Ok(Some(refusal(404, format!("workflow {wf} not found"))));
            }
            (Some(w), command) => match apply_command(&w.state, command) {
                Applied::Ignored(why) => {
                    self.metrics.ignored.inc();
                    tracing::info!(workflow_id = %wf, reason = %why, "command ignored");
                    return Ok(Some(refusal(409, why)));
                }
                Applied::Rejected { status, message } => {
                    self.metrics.ignored.inc();
                    tracing::info!(workflow_id = %wf, status, reason = %message, "operator command refused");
                    return Ok(Some(refusal(status as i16, message)));
                }
                Applied::Events(events) => {
                    for e in events {
                        let requeued = requeued_task(&e);
                        append(w, e)?;
                        if let Some((task_id, postponed)) = requeued {
                            self.requeue(w, task_id, postponed)?;
                        }
                    }
                    w.eager = eager_of(command);
                    None
                }
                Applied::PassDown {
                    child_workflow_id: to,
                    reset,
                }
                | Applied::FallBack {
                    workflow_id: to,
                    reset,
                    ..
                } => {
                    tracing::info!(workflow_id = %wf, to = %to,
                        "retry handed on: down to the child the run failed with, or back to the parent when this run has nothing to retry");
                    let message = self.command_to(&to, &Command::Reset(reset))?;
                    w.outbox.push(message);
                    handed_on = true;
                    None
                }
                Applied::Reset(_) if self.run_exists(command).await? => {
                    // Its run was made by an earlier delivery (since replaced): applying it
                    // again would write that run twice.
                    self.metrics.ignored.inc();
                    tracing::info!(workflow_id = %wf, "reset redelivered after it was applied; ignored");
                    return Ok(Some(refusal(409, "reset already applied".into())));
                }
                Applied::Reset(plan) => {
                    let Command::Reset(reset) = command else {
                        return Err(Error::Decode("a reset plan for another command".into()));
                    };
                    let mut successor = self.reset(w, &plan, reset).await?;
                    if let Some(message) = self.resume_parent(&successor)? {
                        successor.outbox.push(message);
                    }
                    let previous = std::mem::replace(w, successor);
                    retired.push(previous);
                    if let Some(old) = retired.last_mut() {
                        self.flush_effects(old)?;
                    }
                    None
                }
            },
        };
        if let Some(w) = working.get_mut(&wf) {
            self.run_interpreter(w).await?;
            // An offer the run did not take is another run's to take (a new run's first
            // activity, typically): the worker's slot is free all the same.
            if let Some(unused) = w.eager.take() {
                self.spares.keep(unused);
            }
            self.flush_effects(w)?;
        }
        // A retry handed on to another run is judged there, under the same request id.
        if command.request_id().is_none() || handed_on {
            return Ok(None);
        }
        Ok(verdict.or_else(|| {
            let w = working.get(&wf)?;
            let mut body = serde_json::json!({
                "workflowId": wf,
                "runId": w.state.run_id,
                "status": w.state.record().status,
            });
            if let Command::UpdateTask(update) = command {
                update_verdict(&w.state, update, &mut body);
            }
            Some(Verdict { status: 200, body })
        }))
    }

    /// Ends `w` (TERMINATED, naming the reset point and the successor) and builds the
    /// successor run from its history.
    /// A command for a workflow without a run whose start was accepted (by the gateway
    /// or a parent) but not applied yet — its start message is still in the outbox, e.g.
    /// its publish failed while the broker was down, or behind this command in the
    /// shard — is parked: a timer brings it back to the shard in [`PARK_FOR`], by which
    /// time the start has usually been applied (docs/decider.md, "Commands before their
    /// start"). The parked copy's id (and its timer's) is derived from the command's, so
    /// a redelivered command parks once, and a copy parked again gets a timer of its own
    /// (the row of the timer that brought it back may still be there, being fired).
    /// `None`: no such start (or one too old to wait for): the command is refused.
    async fn park(&self, delivery: &Delivery) -> Result<Option<TimerRecord>, Error> {
        let wf = &delivery.envelope.workflow_id;
        let Some(start) = self.store.get_start(wf).await? else {
            return Ok(None);
        };
        let now = Utc::now();
        if now - start.created_at > PARK_AT_MOST {
            tracing::warn!(workflow_id = %wf, accepted = %start.created_at,
                "the workflow's start was accepted long ago and never applied; not waiting for it");
            return Ok(None);
        }
        tracing::info!(workflow_id = %wf, command = %delivery.envelope.kind,
            "command before its run's start was applied; parked until the start is");
        self.metrics.parked.inc();
        let mut copy = delivery.envelope.clone();
        copy.id = weft::ids::derived_id(delivery.envelope.id, "parked");
        let mut timer = TimerRecord::command(
            self.bus.names(),
            now + PARK_FOR,
            &copy,
            delivery.traceparent.clone(),
        )?;
        timer.id = copy.id;
        Ok(Some(timer))
    }

    async fn reset(
        &self,
        w: &mut Working,
        plan: &ResetPlan,
        reset: &weft::messages::Reset,
    ) -> Result<Working, Error> {
        let mut history = match w.loaded_version {
            Some(_) => self.store.run_events(w.state.run_id).await?,
            None => Vec::new(),
        };
        let known = history.len();
        history.extend(
            w.events
                .iter()
                .filter(|e| e.event_id as usize > known)
                .cloned(),
        );
        let now = Utc::now();
        // Rollback hooks: decided from the old run as it stands, written with the reset.
        let deliveries = crate::hooks::rollback(&w.state, &history, plan, reset, now);
        let refs = deliveries
            .iter()
            .map(|d| weft::messages::RollbackHookRef {
                delivery_id: d.id,
                task_ref: d.task_ref.clone().unwrap_or_default(),
                iteration: d.iteration,
                blocking: d.blocking,
            })
            .collect();
        let (state, events) =
            crate::reset::successor_history(&history, plan, reset, &w.state.workflow_id, now, refs)
                .map_err(|e| Error::Decode(e.to_string()))?;
        if w.state.status == RunStatus::Running {
            let iteration = match plan.iteration {
                0 => String::new(),
                i => format!(" (iteration {i})"),
            };
            append(
                w,
                Event::WorkflowTerminated(weft::messages::WorkflowTerminated {
                    reason: format!(
                        "reset to task {:?}{iteration}; continued in run {}{}",
                        plan.task_ref,
                        reset.new_run_id,
                        reset
                            .reason
                            .as_deref()
                            .map_or(String::new(), |r| format!(": {r}"))
                    ),
                    output: w.state.output.clone().unwrap_or(serde_json::json!({})),
                }),
            )?;
        }
        w.replaced = true;
        let mut successor = Working::new(state, None, events);
        successor.deliveries = deliveries;
        // The copied prefix was announced by the old run; the marker and what it
        // canceled are new.
        let marker = successor
            .events
            .iter()
            .position(|e| matches!(e.event, Event::WorkflowReset(_)))
            .unwrap_or(0);
        successor.lifecycle = successor.events[marker..]
            .iter()
            .filter_map(|e| crate::lifecycle::of(&successor.state, e))
            .collect();
        Ok(successor)
    }

    /// Whether the run a reset `command` would create exists already.
    async fn run_exists(&self, command: &Command) -> Result<bool, Error> {
        let Command::Reset(reset) = command else {
            return Ok(false);
        };
        Ok(!self.store.run_events(reset.new_run_id).await?.is_empty())
    }

    /// After a reset of a child run (a retry, restart or rerun, as Conductor's
    /// `updateAndPushParents`): its parent's SUB_WORKFLOW task waits for the child again.
    /// The parent decides whether that applies (`reset::resume_child`): one still running
    /// waits for the child already, and ignores it.
    fn resume_parent(&self, successor: &Working) -> Result<Option<OutboxMessage>, Error> {
        let Some(parent) = successor.state.parent.as_ref() else {
            return Ok(None);
        };
        let command = Command::Reset(weft::messages::Reset {
            op: weft::messages::Operation::default(),
            target: weft::messages::ResetTarget::ResumeChild {
                child_workflow_id: successor.state.workflow_id.clone(),
            },
            new_run_id: Uuid::new_v5(&successor.state.run_id, b"resume-parent"),
            reason: Some(format!(
                "child workflow {} was reset",
                successor.state.workflow_id
            )),
            workflow_input: None,
            task_input: None,
            definition: None,
            fallback: None,
        });
        self.command_to(&parent.workflow_id, &command).map(Some)
    }

    /// An outbox message carrying `command` to run `workflow_id`'s shard.
    fn command_to(&self, workflow_id: &str, command: &Command) -> Result<OutboxMessage, Error> {
        let names = self.bus.names();
        let envelope = Envelope::new(workflow_id, None, command)?;
        OutboxMessage::new(
            names.commands_exchange(),
            names.command_key_for(workflow_id),
            &envelope,
            weft::telemetry::current_traceparent(),
        )
    }

    /// The outbox messages of what `w`'s new events ended: a run's end reported to its
    /// parent (and its failure workflow started), stopped attempts' workers told to stop
    /// (through the heartbeat service), stopped SUB_WORKFLOW tasks' child runs terminated.
    fn flush_effects(&self, w: &mut Working) -> Result<(), Error> {
        let ended = w.events[w.first_new_event..]
            .iter()
            .rev()
            .find(|e| e.event.ends_run())
            .map(|e| e.event.clone());
        if let Some(end) = ended.filter(|_| !w.effects_done_for_end) {
            w.effects_done_for_end = true;
            if !w.replaced {
                if let Some(message) = self.child_ended(&w.state, &end)? {
                    w.outbox.push(message);
                }
            }
            if let Some((message, start)) = self.failure_workflow(&w.state, &end)? {
                w.outbox.push(message);
                w.starts.push(start);
            }
        }
        let names = self.bus.names();
        for event in std::mem::take(&mut w.lifecycle) {
            w.deliveries
                .extend(crate::hooks::lifecycle(&w.state, &event));
            if !self.events.matches(&event.event) {
                continue;
            }
            let key = event.event.clone();
            let message = weft::messages::EventMessage::LifecycleEvent(event);
            let envelope = Envelope::new(&w.state.workflow_id, Some(w.state.run_id), &message)?;
            w.outbox.push(OutboxMessage::new(
                names.events_exchange(),
                key,
                &envelope,
                weft::telemetry::current_traceparent(),
            )?);
        }
        let stopped = std::mem::take(&mut w.stopped);
        let mut attempts = Vec::new();
        let mut reasons = Vec::new();
        for s in stopped {
            if let Some(child) = &s.child_workflow_id {
                // Conductor's reason when the parent ended; Weft's when an operator or a
                // timeout stopped the SUB_WORKFLOW task alone.
                let reason = match w.state.reason.as_deref() {
                    Some(run_reason) if s.by_run_end => {
                        format!("Parent workflow has been terminated with reason: {run_reason}")
                    }
                    _ => format!(
                        "parent workflow {} task ended: {}",
                        w.state.workflow_id, s.reason
                    ),
                };
                let command = Command::Terminate(weft::messages::Terminate {
                    op: weft::messages::Operation::default(),
                    reason,
                });
                w.outbox.push(self.command_to(child, &command)?);
            } else if crate::state::is_activity(&s.task_type) {
                attempts.push(AttemptRef {
                    task_id: s.task_id,
                    attempt: s.attempt,
                });
                if !reasons.contains(&s.reason) {
                    reasons.push(s.reason);
                }
            }
        }
        if !attempts.is_empty() {
            let message = HeartbeatMessage::StopAttempts(StopAttempts {
                attempts,
                reason: reasons.join("; "),
            });
            let envelope = Envelope::new(&w.state.workflow_id, Some(w.state.run_id), &message)?;
            // The default exchange routes by queue name.
            w.outbox.push(OutboxMessage::new(
                String::new(),
                names.heartbeat_queue(),
                &envelope,
                weft::telemetry::current_traceparent(),
            )?);
        }
        Ok(())
    }

    /// After a batch: replies to the watches its commit reached and registers the new
    /// ones (replying at once to those reached already). Replies are transient and
    /// sent beside the next batch; a lost one only makes its caller wait its deadline.
    async fn settle_watches(
        &self,
        working: &HashMap<String, Working>,
        order: &[String],
        new_watches: Vec<(&Delivery, &weft::messages::WatchRun)>,
    ) -> Result<(), Error> {
        let mut due = Vec::new();
        for wf in order {
            if self.watches.watched(wf) {
                due.extend(self.watches.reached_by(wf, &working[wf].state));
            }
        }
        for (delivery, watch) in new_watches {
            let wf = &delivery.envelope.workflow_id;
            let loaded;
            let state = match working.get(wf) {
                Some(w) => Some(&w.state),
                None => {
                    loaded = self.load(wf, false).await?;
                    if let Some(w) = &loaded {
                        // Only read here: back into the cache for the run's next command.
                        self.cache_lock().insert(wf.clone(), w.state.clone());
                    }
                    loaded.as_ref().map(|w| &w.state)
                }
            };
            due.extend(self.watches.add(wf, delivery.clone(), watch.clone(), state));
        }
        if due.is_empty() {
            return Ok(());
        }
        let bus = self.bus.clone();
        self.publishers.spawn(async move {
            for (request, reached) in due {
                let wf = request.envelope.workflow_id.clone();
                let run_id = Some(reached.run_id);
                let reached = weft::messages::WatchReply::RunReached(reached);
                let reply = match Envelope::new(&wf, run_id, &reached) {
                    Ok(reply) => reply,
                    Err(e) => {
                        tracing::warn!(workflow_id = %wf, error = %e, "watch reply not built");
                        continue;
                    }
                };
                if let Err(e) = bus.reply(&request, &reply).await {
                    tracing::info!(workflow_id = %wf, error = %e, "watch reply not sent; the caller reads the run at its deadline");
                }
            }
        });
        Ok(())
    }

    /// Replies to the batch's verdict watches, after its commit: with the verdict the
    /// batch recorded, else the one the store holds (an operation applied in an earlier
    /// batch). None found (the command was parked, or is not applied yet): no reply, and
    /// the caller reads the store. Replies go out beside the next batch; a lost one only
    /// makes its caller probe.
    async fn answer_verdicts(
        &self,
        recorded: &[OperationOutcome],
        watches: Vec<(&Delivery, Uuid)>,
    ) {
        if watches.is_empty() {
            return;
        }
        let mut replies = Vec::with_capacity(watches.len());
        for (delivery, request_id) in watches {
            let found = match recorded.iter().find(|o| o.request_id == request_id) {
                Some(o) => Some((o.status, o.body.clone())),
                None => match self.verdicts.get(request_id) {
                    Some(kept) => Some(kept),
                    None => self.read_verdict(request_id).await,
                },
            };
            if let Some((status, body)) = found {
                let verdict = weft::messages::Verdict {
                    request_id,
                    status,
                    body,
                };
                replies.push((delivery.clone(), verdict));
            }
        }
        if replies.is_empty() {
            return;
        }
        let bus = self.bus.clone();
        self.publishers.spawn(async move {
            for (request, verdict) in replies {
                let wf = request.envelope.workflow_id.clone();
                let reply = weft::messages::WatchReply::Verdict(verdict);
                let sent = match Envelope::new(&wf, None, &reply) {
                    Ok(reply) => bus.reply(&request, &reply).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = sent {
                    tracing::info!(workflow_id = %wf, error = %e, "verdict reply not sent; its caller probes");
                }
            }
        });
    }

    /// A verdict the shard did not commit lately, from the store; `None` when it is not
    /// there (yet) or cannot be read: its caller reads it itself.
    async fn read_verdict(&self, request_id: Uuid) -> Option<(i16, serde_json::Value)> {
        self.metrics.verdicts_read.inc();
        match self.store.operation_outcome(request_id).await {
            Ok(found) => found.map(|o| (o.status, o.body)),
            Err(e) => {
                tracing::info!(%request_id, error = %e, "verdict not read; its caller probes");
                None
            }
        }
    }

    /// The run of `workflow_id` from the cache, or the store on a miss — unless the
    /// command is a first start (`new_start`), whose run cannot be stored yet.
    async fn load(&self, workflow_id: &str, new_start: bool) -> Result<Option<Working>, Error> {
        // Taken out of the cache, not copied (a copy is the whole definition and every
        // task's data, per command): the batch puts the state back after its commit
        // (`remember`), and a batch that fails or changes nothing leaves it out, so the
        // next command reads the run from the store, as after an eviction.
        let cached = self.cache_lock().remove(workflow_id);
        let state = match cached {
            Some(s) => s,
            None if new_start => return Ok(None),
            None => match self.store.load_current_run(workflow_id).await? {
                None => return Ok(None),
                Some((version, events)) => {
                    let state = RunState::from_history(workflow_id, &events)
                        .map_err(|e| Error::Decode(e.to_string()))?;
                    if state.version != version {
                        return Err(Error::VersionConflict {
                            run_id: state.run_id,
                            expected: version,
                        });
                    }
                    state
                }
            },
        };
        let version = state.version;
        Ok(Some(Working::new(state, Some(version), Vec::new())))
    }

    /// The run `start` begins. Its id is the start message's own (a UUIDv7, made when the
    /// start was): applying the same start again — a redelivery after a commit that
    /// failed, or a copy the outbox sweeper published again — makes the same run, whose
    /// tasks have the same ids. An activity dispatched while the failed commit ran
    /// (docs/eager-dispatch.md) is then an attempt the run has, not one of a run that
    /// never was.
    fn start_run(
        &self,
        workflow_id: &str,
        start: &StartWorkflow,
        delivery: &Delivery,
    ) -> Result<Working, Error> {
        let run_id = delivery.envelope.id;
        let delivery_trace = delivery.traceparent.clone();
        let first = StoredEvent {
            run_id,
            event_id: 1,
            time: Utc::now(),
            event: Event::WorkflowStarted(WorkflowStarted {
                definition: start.definition.clone(),
                input: start.input.clone(),
                correlation_id: start.correlation_id.clone(),
                parent_workflow_id: start.parent_workflow_id.clone(),
                parent: start.parent.clone(),
                max_loop_iterations: Some(self.limits.max_loop_iterations),
                max_fork_branches: Some(self.limits.max_fork_branches),
                max_variables_kb: Some(self.limits.max_variables_kb),
                traceparent: start.traceparent.clone().or(delivery_trace),
                priority: start.priority.filter(|p| *p > 0),
                task_to_domain: start.task_to_domain.clone(),
            }),
        };
        let state = RunState::from_history(workflow_id, std::slice::from_ref(&first))
            .map_err(|e| Error::Decode(e.to_string()))?;
        let mut w = Working::new(state, None, vec![first]);
        w.lifecycle = crate::lifecycle::of(&w.state, &w.events[0])
            .into_iter()
            .collect();
        Ok(w)
    }

    /// Applies decisions until the interpreter has nothing more to say, or a slice's
    /// worth ([`ROUNDS_PER_SLICE`]): then the run's `Continue` goes out with the commit.
    async fn run_interpreter(&self, w: &mut Working) -> Result<(), Error> {
        for _ in 0..ROUNDS_PER_SLICE {
            let decisions = decide(&w.state);
            if decisions.is_empty() {
                return Ok(());
            }
            for d in decisions {
                for event in self.events_of(w, d).await? {
                    append(w, event)?;
                }
            }
        }
        if decide(&w.state).is_empty() {
            return Ok(());
        }
        let next = Command::Continue(weft::messages::Continue {
            run_id: w.state.run_id,
        });
        let message = self.command_to(&w.state.workflow_id, &next)?;
        w.outbox.push(message);
        self.metrics.slices.inc();
        tracing::debug!(workflow_id = %w.state.workflow_id, "settle committed as a slice; the run goes on behind its shard's other commands");
        Ok(())
    }

    /// The events a decision becomes; an activity also gets its queue declared and its
    /// outbox message.
    async fn events_of(&self, w: &mut Working, decision: Decision) -> Result<Vec<Event>, Error> {
        if let Decision::PublishEvent { .. } = &decision {
            return self.event_task(w, decision).await;
        }
        if let Decision::StartRun { .. } = &decision {
            return self.start_workflow_task(w, decision).await;
        }
        let is_activity = matches!(decision, Decision::ScheduleTask { .. });
        if let Decision::StartChild {
            task_id,
            input,
            child_workflow_id,
            definition,
            ..
        } = &decision
        {
            let mut child: Cow<WorkflowDef> = match definition {
                ChildDefinition::Frozen(frozen) => Cow::Borrowed(&**frozen),
                ChildDefinition::Registered { name, version } => {
                    match self.registered_frozen(name, *version).await? {
                        Ok(found) => Cow::Owned(found),
                        Err(why) => {
                            let named = match version {
                                Some(v) => format!("workflow definition {name} version {v}"),
                                None => format!("workflow definition {name}"),
                            };
                            return Ok(child_refused(decision, &w.state, why.of(&named)));
                        }
                    }
                }
            };
            // Asked first: a definition frozen at the parent's start is copied only then.
            if needs_freezing(&child) {
                self.freeze_failure_workflow(child.to_mut(), input).await?;
            }
            let (message, start) =
                self.child_start(&w.state, *task_id, child_workflow_id, &child, input)?;
            w.outbox.push(message);
            w.starts.push(start);
        }
        let mut events = events_for(decision, w.state.tasks.len() as i32, Utc::now());
        if let Some(Event::TaskScheduled(scheduled)) = events.first_mut() {
            // A worker's task goes to its domain's queue (the built-in HTTP worker
            // polls none: docs/domains.md).
            if is_activity && scheduled.task_type != TaskType::Http.as_str() {
                scheduled.domain = w.state.domain_of(&scheduled.task_name);
            }
        }
        match events.first() {
            Some(Event::TaskScheduled(scheduled)) if is_activity => {
                self.bus
                    .declare_activity_queue(&activity_queue_key(scheduled))
                    .await?;
                let limits = attempt_limits(&w.state, &scheduled.task_ref);
                // A retry waiting out its back-off goes to no worker before then. The
                // event is appended next: its id is the run's next.
                let held = (scheduled.dispatch_delay_ms > 0).then(|| {
                    crate::state::dispatch_timer_id(scheduled.task_id, w.state.version + 1)
                });
                let eager = match held {
                    Some(_) => None,
                    None => self.take_eager(w, scheduled, &limits),
                };
                let (message, worker_id) = match &eager {
                    Some((queue, eager)) => {
                        let message = self.eager_message(&w.state, scheduled, queue)?;
                        if eager.offer.batches {
                            w.sent_together.push(message.id);
                        }
                        (message, Some(eager.worker_id.clone()))
                    }
                    None => (self.activity_message(&w.state, scheduled)?, None),
                };
                match held {
                    Some(timer_id) => w.timers.push(dispatch_timer(
                        &w.state,
                        timer_id,
                        message,
                        scheduled.dispatch_delay_ms,
                    )),
                    None => w.outbox.push(message),
                }
                w.checks.push(AttemptCheck {
                    task_id: scheduled.task_id,
                    attempt: scheduled.attempt,
                    workflow_id: w.state.workflow_id.clone(),
                    run_id: w.state.run_id,
                    task_name: scheduled.task_name.clone(),
                    task_ref: scheduled.task_ref.clone(),
                    reply_to: self.bus.names().command_key_for(&w.state.workflow_id),
                    reason: None,
                    timeout_seconds: response_timeout_seconds(&w.state, &scheduled.task_ref),
                    status: match worker_id {
                        Some(_) => AttemptStatus::Running,
                        None => AttemptStatus::Scheduled,
                    },
                    limits,
                    worker_id: worker_id.clone(),
                });
                if let Some(worker_id) = worker_id {
                    // Claimed for its worker at dispatch: IN_PROGRESS from now, its
                    // `timeoutSeconds` counted from here.
                    let started = Event::TaskStarted(TaskStarted {
                        task_id: scheduled.task_id,
                        task_ref: scheduled.task_ref.clone(),
                        worker_id: Some(worker_id),
                        started_at: Utc::now(),
                    });
                    w.eager_dispatched += 1;
                    events.push(started);
                }
            }
            Some(Event::TimerStarted(started)) => {
                let fired = Command::TimerFired(TimerFired {
                    timer_id: started.timer_id,
                    run_id: w.state.run_id,
                });
                let envelope = Envelope::new(&w.state.workflow_id, Some(w.state.run_id), &fired)?;
                w.timers.push(TimerRecord::command(
                    self.bus.names(),
                    started.fire_at,
                    &envelope,
                    // The decision that set it, so the trace shows what woke what.
                    weft::telemetry::current_traceparent().or_else(|| w.state.traceparent.clone()),
                )?);
            }
            _ => {}
        }
        Ok(events)
    }

    /// An EVENT task: its destination declared (a queue with its dead-letter queue, or a
    /// topic exchange) before the commit, so that the message the outbox publishes after
    /// it has somewhere to go; a destination the broker refuses (a queue declared with
    /// other arguments, an exchange of another type) fails the task with the broker's
    /// reason instead. The message (the task id as its message id) goes in the commit's
    /// outbox.
    async fn event_task(&self, w: &mut Working, decision: Decision) -> Result<Vec<Event>, Error> {
        let Decision::PublishEvent {
            task_id,
            task_ref,
            task_name,
            input,
            attempt,
            output,
            location,
            iteration,
            async_complete,
        } = &decision
        else {
            return Ok(Vec::new());
        };
        let ns = self.bus.names().namespace();
        let (exchange, routing_key) = match &**location {
            EventLocation::Queue(queue) => (String::new(), queue.clone()),
            EventLocation::Conductor(rest) => {
                (String::new(), EventLocation::conductor_queue(ns, rest))
            }
            EventLocation::Exchange {
                exchange,
                routing_key,
                ..
            } => (exchange.clone(), routing_key.clone().unwrap_or_default()),
        };
        let declared = match &**location {
            EventLocation::Queue(_) | EventLocation::Conductor(_) => {
                self.bus.declare_queue(&routing_key, &[]).await
            }
            EventLocation::Exchange {
                exchange, topic, ..
            } => {
                let kind = match topic {
                    true => ExchangeKind::Topic,
                    false => ExchangeKind::Direct,
                };
                self.bus.declare_exchange(exchange, kind).await
            }
        };
        let seq = w.state.tasks.len() as i32;
        if let Err(e) = declared {
            // Without a connection nothing was refused: the batch is applied again later.
            if matches!(e, weft::Error::ShuttingDown) || !self.bus.is_connected() {
                return Err(e);
            }
            let started = Decision::StartSystemTask {
                task_id: *task_id,
                task_ref: task_ref.clone(),
                task_type: weft::dsl::TaskType::Event.as_str().to_owned(),
                task_name: task_name.clone(),
                input: input.clone(),
                attempt: *attempt,
                iteration: *iteration,
            };
            let failed = Decision::FailStartedTask {
                task_id: *task_id,
                task_ref: task_ref.clone(),
                reason: format!("the sink cannot take the event: {e}"),
                terminal: true,
            };
            let mut events = events_for(started, seq, Utc::now());
            events.extend(events_for(failed, seq, Utc::now()));
            return Ok(events);
        }
        let traceparent =
            weft::telemetry::current_traceparent().or_else(|| w.state.traceparent.clone());
        w.outbox.push(OutboxMessage::raw(
            exchange,
            routing_key,
            *task_id,
            serde_json::to_vec(output)?,
            traceparent.clone(),
        ));
        if !async_complete {
            // Sent by the outbox only once the message above is confirmed.
            let confirmed = Command::Signal(weft::messages::Signal {
                name: crate::interpreter::event_published(*task_id),
                payload: output.clone(),
            });
            let envelope = Envelope::new(&w.state.workflow_id, Some(w.state.run_id), &confirmed)?;
            let names = self.bus.names();
            w.outbox.push(OutboxMessage::new(
                names.commands_exchange(),
                names.command_key_for(&w.state.workflow_id),
                &envelope,
                traceparent,
            )?);
        }
        Ok(events_for(decision, seq, Utc::now()))
    }

    /// START_WORKFLOW: the new run's `StartWorkflow` in the commit's outbox, the task
    /// completed with `{workflowId}`; a definition neither frozen nor inline is read from
    /// the registered ones now (its name came from an expression), and when there is none
    /// the task fails with the reason.
    async fn start_workflow_task(
        &self,
        w: &mut Working,
        decision: Decision,
    ) -> Result<Vec<Event>, Error> {
        let Decision::StartRun {
            task_id,
            task_ref,
            task_name,
            input,
            attempt,
            iteration,
            workflow_id,
            definition,
            name,
            version,
            run_input,
            correlation_id,
        } = decision
        else {
            return Ok(Vec::new());
        };
        let seq = w.state.tasks.len() as i32;
        let definition = match definition {
            Some(definition) => Ok(*definition),
            None => self
                .registered_frozen(&name, version)
                .await?
                .map_err(|why| {
                    let which =
                        version.map_or("any version".to_owned(), |v| format!("version {v}"));
                    format!(
                        "startWorkflow: {}",
                        why.of(&format!("workflow {name:?} ({which})"))
                    )
                }),
        };
        let definition = match definition {
            Ok(mut definition) => {
                self.freeze_failure_workflow(&mut definition, &run_input)
                    .await?;
                definition
            }
            Err(why) => {
                let started = Decision::StartSystemTask {
                    task_id,
                    task_ref: task_ref.clone(),
                    task_type: TaskType::StartWorkflow.as_str().to_owned(),
                    task_name,
                    input,
                    attempt,
                    iteration,
                };
                let failed = Decision::FailStartedTask {
                    task_id,
                    task_ref,
                    reason: why,
                    terminal: false,
                };
                let mut events = events_for(started, seq, Utc::now());
                events.extend(events_for(failed, seq, Utc::now()));
                return Ok(events);
            }
        };
        let command = StartWorkflow {
            definition: definition.clone(),
            input: run_input.clone(),
            correlation_id: correlation_id.clone(),
            parent_workflow_id: None,
            parent: None,
            traceparent: weft::telemetry::current_traceparent()
                .or_else(|| w.state.traceparent.clone()),
            priority: None,
            // A run started by START_WORKFLOW is on its own, as in Conductor.
            task_to_domain: Default::default(),
        };
        let (message, start) = self.start_message(&workflow_id, command)?;
        w.outbox.push(message);
        w.starts.push(start);
        let decision = Decision::StartRun {
            task_id,
            task_ref,
            task_name,
            input,
            attempt,
            iteration,
            workflow_id,
            definition: Some(Box::new(definition)),
            name,
            version,
            run_input,
            correlation_id,
        };
        Ok(events_for(decision, seq, Utc::now()))
    }

    /// The registered definition `name` (`version`, else the latest) as a run this decider
    /// starts from a name runs it (a child named when its task is scheduled, a
    /// START_WORKFLOW's run, a failure workflow): checked, with the task definitions
    /// registered now frozen in (its own children are resolved when they are scheduled).
    /// `Ok(Err(_))` when there is no such definition to run; `Err` when the store cannot
    /// say (the batch is applied again later).
    async fn registered_frozen(
        &self,
        name: &str,
        version: Option<i32>,
    ) -> Result<Result<WorkflowDef, Unrunnable>, Error> {
        let Some(stored) = self.store.get_definition(name, version).await? else {
            return Ok(Err(Unrunnable::NotRegistered));
        };
        let mut definition = match weft::dsl::parse_definition(&stored.definition)
            .and_then(|d| weft::dsl::validate::check_executable(&d).map(|()| d))
        {
            Ok(d) => d,
            Err(e) => return Ok(Err(Unrunnable::Invalid(e.to_string()))),
        };
        self.store.freeze_task_defs(&mut definition).await?;
        if let Err(e) = weft::dsl::taskdef::check_all_policies_apply(&definition.tasks, "tasks") {
            return Ok(Err(Unrunnable::Invalid(e.to_string())));
        }
        Ok(Ok(definition))
    }

    /// Freezes the `failureWorkflow` of a run this decider starts into its definition, when
    /// it names one not frozen yet: a child named at run time, a START_WORKFLOW's run, a
    /// child embedded at its parent's start (the gateway freezes only the started run's
    /// own). The latest registered version with its task definitions, as a start freezes
    /// it; `input` is the new run's (a name `$workflow.input.<key>` reads it). One that
    /// cannot be had is logged and left out: the run starts without it, as Conductor's
    /// (which finds out only when the run fails); only a start through the gateway is
    /// refused for it.
    async fn freeze_failure_workflow(
        &self,
        definition: &mut WorkflowDef,
        input: &serde_json::Value,
    ) -> Result<(), Error> {
        use weft::dsl::failure_workflow::{failure_workflow_name, needs_freezing};
        if !needs_freezing(definition) {
            return Ok(());
        }
        definition.failure_workflow = failure_workflow_name(definition, input.as_object());
        let Some(name) = definition.failure_workflow.clone() else {
            return Ok(());
        };
        match self.registered_frozen(&name, None).await? {
            Ok(failure) => {
                definition.extra.insert(
                    weft::dsl::FAILURE_WORKFLOW_DEFINITION.to_owned(),
                    serde_json::to_value(&failure)?,
                );
            }
            Err(why) => tracing::warn!(workflow = %definition.name,
                reason = %why.of(&format!("failure workflow {name:?}")),
                "a run starts without its failure workflow"),
        }
        Ok(())
    }

    /// The `StartWorkflow` command of a SUB_WORKFLOW's child, to the child's shard.
    fn child_start(
        &self,
        parent: &RunState,
        task_id: Uuid,
        child_workflow_id: &str,
        definition: &weft::dsl::WorkflowDef,
        input: &serde_json::Value,
    ) -> Result<(OutboxMessage, NewStart), Error> {
        let command = StartWorkflow {
            definition: definition.clone(),
            input: input.clone(),
            correlation_id: parent.correlation_id.clone(),
            parent_workflow_id: Some(parent.workflow_id.clone()),
            parent: Some(ParentLink {
                workflow_id: parent.workflow_id.clone(),
                run_id: parent.run_id,
                task_id,
            }),
            traceparent: weft::telemetry::current_traceparent().or(parent.traceparent.clone()),
            // A child runs at its parent's priority and in its domains, as in Conductor.
            priority: Some(parent.priority).filter(|p| *p > 0),
            task_to_domain: parent.task_to_domain.clone(),
        };
        self.start_message(child_workflow_id, command)
    }

    /// The outbox message that starts run `workflow_id` (on its shard), and its start
    /// record, written with the commit so that reads find the run before it is applied.
    fn start_message(
        &self,
        workflow_id: &str,
        command: StartWorkflow,
    ) -> Result<(OutboxMessage, NewStart), Error> {
        let start = NewStart {
            workflow_id: workflow_id.to_owned(),
            idempotency_key: None,
            workflow_name: command.definition.name.clone(),
            workflow_version: command.definition.version,
            input: command.input.clone(),
            correlation_id: command.correlation_id.clone(),
        };
        let envelope = Envelope::new(workflow_id, None, &Command::StartWorkflow(command))?;
        let names = self.bus.names();
        let message = OutboxMessage::new(
            names.commands_exchange(),
            names.command_key_for(workflow_id),
            &envelope,
            weft::telemetry::current_traceparent(),
        )?;
        Ok((message, start))
    }

    /// When a run fails or times out and its definition names a `failureWorkflow`
    /// (frozen at start): that workflow's `StartWorkflow`, with the failed run's input
    /// plus `workflowId`, `reason`, `failureStatus` and `failureTaskId`, as Conductor does.
    fn failure_workflow(
        &self,
        run: &RunState,
        end: &Event,
    ) -> Result<Option<(OutboxMessage, NewStart)>, Error> {
        let (status, reason) = match end {
            Event::WorkflowFailed(f) => ("FAILED", f.reason.clone()),
            Event::WorkflowTimedOut(t) => ("TIMED_OUT", t.reason.clone()),
            _ => return Ok(None),
        };
        let Some(definition) = run
            .definition
            .extra
            .get(weft::dsl::FAILURE_WORKFLOW_DEFINITION)
        else {
            return Ok(None);
        };
        let definition: weft::dsl::WorkflowDef = serde_json::from_value(definition.clone())?;
        // The task the run's failure names (a failed task, a TERMINATE task), else the
        // newest that ended with a reason.
        let failed_task = run
            .failed_task_refs
            .first()
            .and_then(|r| run.latest(r))
            .or_else(|| {
                run.tasks
                    .iter()
                    .rev()
                    .find(|t| !t.status.is_pending() && t.reason.is_some())
            })
            .map(|t| t.task_id.to_string());
        let mut input = run.input.as_object().cloned().unwrap_or_default();
        input.insert("workflowId".into(), run.workflow_id.clone().into());
        input.insert("reason".into(), reason.clone().into());
        input.insert("failureStatus".into(), status.into());
        input.insert(
            "failureTaskId".into(),
            failed_task.map_or(serde_json::Value::Null, Into::into),
        );
        // Conductor passes the failed workflow itself; its summary here (not its tasks).
        input.insert(
            "failedWorkflow".into(),
            serde_json::json!({
                "workflowId": run.workflow_id,
                "runId": run.run_id,
                "workflowName": run.definition.name,
                "workflowVersion": run.definition.version,
                "status": status,
                "correlationId": run.correlation_id,
                "input": run.input,
                "output": run.output,
                "reasonForIncompletion": reason,
                "failedReferenceTaskNames": run.failed_task_refs,
            }),
        );
        let workflow_id = crate::interpreter::failure_workflow_id(run.run_id);
        let command = StartWorkflow {
            definition,
            input: serde_json::Value::Object(input),
            correlation_id: run.correlation_id.clone(),
            parent_workflow_id: Some(run.workflow_id.clone()),
            parent: None,
            traceparent: run.traceparent.clone(),
            priority: Some(run.priority).filter(|p| *p > 0),
            task_to_domain: run.task_to_domain.clone(),
        };
        self.start_message(&workflow_id, command).map(Some)
    }

    /// When a child run ends: the `ChildWorkflowEnded` command for its parent's shard.
    fn child_ended(&self, child: &RunState, end: &Event) -> Result<Option<OutboxMessage>, Error> {
        let Some(parent) = child.parent.clone() else {
            return Ok(None);
        };
        let (status, output, reason) = match end {
            Event::WorkflowCompleted(c) => ("COMPLETED", c.output.clone(), None),
            Event::WorkflowFailed(f) => ("FAILED", serde_json::Value::Null, Some(f.reason.clone())),
            Event::WorkflowTerminated(t) => {
                ("TERMINATED", t.output.clone(), Some(t.reason.clone()))
            }
            Event::WorkflowTimedOut(t) => {
                ("TIMED_OUT", serde_json::Value::Null, Some(t.reason.clone()))
            }
            _ => return Ok(None),
        };
        let command = Command::ChildWorkflowEnded(ChildWorkflowEnded {
            child_workflow_id: child.workflow_id.clone(),
            status: status.to_owned(),
            output,
            reason,
            parent: parent.clone(),
        });
        let envelope = Envelope::new(&parent.workflow_id, Some(parent.run_id), &command)?;
        let names = self.bus.names();
        Ok(Some(OutboxMessage::new(
            names.commands_exchange(),
            names.command_key_for(&parent.workflow_id),
            &envelope,
            weft::telemetry::current_traceparent(),
        )?))
    }

    /// The eager offer that the activity `s` takes (docs/eager-dispatch.md): that of
    /// `w`'s current command, else one another run left unused (a spare), when it
    /// fits: the worker runs the task, the task has no limits (a limit is judged at a
    /// claim), the offer is fresh (the worker was there a moment ago) and names a queue
    /// of this namespace. Taken: one activity per offer, as the worker freed one slot.
    /// Gives the eager queue's name with it.
    fn take_eager(
        &self,
        w: &mut Working,
        s: &TaskScheduled,
        limits: &AttemptLimits,
    ) -> Option<(String, Eager)> {
        // A worker's offer is for its tasks of no domain.
        if !limits.is_unlimited() || s.domain.is_some() {
            return None;
        }
        let key = activity_queue_key(s);
        let key = key.as_ref();
        let own = w.eager.take_if(|e| {
            e.fits(key, EAGER_OFFER_MAX_AGE) && !self.spares.is_withdrawn(&e.offer.queue_prefix)
        });
        let eager = match own {
            Some(own) => own,
            None => self.spares.take(key, EAGER_OFFER_MAX_AGE)?,
        };
        let queue = self
            .bus
            .names()
            .eager_queue(&eager.offer.queue_prefix, key)?;
        Some((queue, eager))
    }

    /// The task of `s` for the eager queue `queue`, through the eager exchange.
    fn eager_message(
        &self,
        state: &RunState,
        s: &TaskScheduled,
        queue: &str,
    ) -> Result<OutboxMessage, Error> {
        let names = self.bus.names();
        let mut task = self.activity_task(state, s);
        task.eager = true;
        let envelope = Envelope::new(
            &state.workflow_id,
            Some(state.run_id),
            &ActivityMessage::ActivityTask(task),
        )?
        .with_priority(state.priority);
        OutboxMessage::new(
            names.eager_exchange(),
            queue.to_owned(),
            &envelope,
            weft::telemetry::current_traceparent(),
        )
    }

    fn activity_message(
        &self,
        state: &RunState,
        s: &TaskScheduled,
    ) -> Result<OutboxMessage, Error> {
        let names = self.bus.names();
        let task = ActivityMessage::ActivityTask(self.activity_task(state, s));
        // The priority rides on the envelope, so a re-publish by the sweeper keeps it.
        let envelope = Envelope::new(&state.workflow_id, Some(state.run_id), &task)?
            .with_priority(state.priority);
        OutboxMessage::new(
            names.activity_exchange(),
            activity_queue_key(s).into_owned(),
            &envelope,
            weft::telemetry::current_traceparent(),
        )
    }

    /// Hands task `task_id` back to its queue: its worker gave it back (`postponed`: its
    /// registry row is SCHEDULED again, free for the next claim and no longer watched),
    /// or an operator made its callback due. Its message goes through its dispatch timer
    /// while it waits out a callback (set again, that timer only moves earlier), at once
    /// otherwise (docs/callbacks.md).
    fn requeue(&self, w: &mut Working, task_id: Uuid, postponed: bool) -> Result<(), Error> {
        let Some(t) = w.state.task(task_id).cloned() else {
            return Ok(());
        };
        let scheduled = TaskScheduled {
            task_id: t.task_id,
            task_ref: t.task_ref.clone(),
            task_type: t.task_type.clone(),
            task_name: t.task_name.clone(),
            seq: t.seq,
            attempt: t.attempt,
            input: t.input.clone(),
            iteration: t.iteration,
            output: None,
            callback_after_seconds: t.callback_after_seconds,
            dispatch_delay_ms: 0,
            domain: t.domain.clone(),
        };
        let message = self.activity_message(&w.state, &scheduled)?;
        match t.dispatch_timer {
            Some(timer_id) => {
                let delay_ms = t.callback_after_seconds.saturating_mul(1_000);
                let timer = dispatch_timer(&w.state, timer_id, message, delay_ms);
                // Once per timer in a commit (a giving back and a `resetcallbacks` in one
                // batch set the same timer twice: the statement may not write a row twice).
                w.timers.retain(|other| other.id != timer_id);
                w.timers.push(timer);
            }
            None => w.outbox.push(message),
        }
        if postponed {
            w.checks.push(AttemptCheck {
                task_id,
                attempt: t.attempt,
                workflow_id: w.state.workflow_id.clone(),
                run_id: w.state.run_id,
                task_name: t.task_name.clone(),
                task_ref: t.task_ref.clone(),
                reply_to: self.bus.names().command_key_for(&w.state.workflow_id),
                reason: None,
                timeout_seconds: response_timeout_seconds(&w.state, &t.task_ref),
                status: AttemptStatus::Scheduled,
                limits: attempt_limits(&w.state, &t.task_ref),
                worker_id: None,
            });
        }
        Ok(())
    }

    /// The message of a scheduled attempt.
    fn activity_task(&self, state: &RunState, s: &TaskScheduled) -> ActivityTask {
        ActivityTask {
            task_id: s.task_id,
            workflow_id: state.workflow_id.clone(),
            run_id: state.run_id,
            task_ref: s.task_ref.clone(),
            task_name: s.task_name.clone(),
            task_type: s.task_type.clone(),
            attempt: s.attempt,
            input: s.input.clone(),
            reply_to: self.bus.names().command_key_for(&state.workflow_id),
            scheduled_at: Utc::now(),
            response_timeout_seconds: response_timeout_seconds(state, &s.task_ref),
            eager: false,
            // Not where a publish waits for the store's writer (`weft dev`): there the
            // bus's journal already writes what is published together in one statement,
            // and a result waiting behind another would wait for the writer twice.
            results_together: self.results_together && !self.bus.publishes_through_the_store(),
        }
    }

    fn cache_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunState>> {
        // A poisoned lock only means a panic elsewhere; the map itself stays usable.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn remember(&self, mut working: HashMap<String, Working>, order: &[String]) {
        self.recent_starts.remember(
            order
                .iter()
                .filter(|wf| working.get(*wf).is_some_and(|w| w.loaded_version.is_none()))
                .map(String::as_str),
        );
        let mut cache = self.cache_lock();
        if cache.len() > CACHE_CAPACITY {
            cache.clear();
        }
        for wf in order {
            if let Some(w) = working.remove(wf) {
                if w.state.status == RunStatus::Running {
                    cache.insert(wf.clone(), w.state);
                } else {
                    cache.remove(wf);
                }
            }
        }
    }

    fn evict(&self, deliveries: &[Delivery]) {
        let mut cache = self.cache_lock();
        for d in deliveries {
            cache.remove(&d.envelope.workflow_id);
        }
    }
}

/// Every readable command of a batch settled as `each` (acknowledged once applied,
/// requeued when the batch is given back), the unreadable ones dead-lettered.
fn settled_as(each: Disposition, commands: &[Result<Command, String>]) -> Vec<Disposition> {
    commands
        .iter()
        .map(|c| match c {
            Ok(_) => each.clone(),
            Err(why) => Disposition::DeadLetter(why.clone()),
        })
        .collect()
}

/// The activity queue (routing key) of a scheduled task: HTTP tasks go to the built-in
/// HTTP worker's queue `HTTP` whatever their name; other activities to their name.
/// An eager offer older than this is not taken: its result waited (a backlog, a decider
/// down), and the worker may be gone — well within the eager queue's life after its last
/// consumer, so a task sent to it still moves on to its shared queue.
const EAGER_OFFER_MAX_AGE: chrono::Duration = chrono::Duration::seconds(10);

/// The eager offer a result carries, with its worker (an offer without one is not taken:
/// the registry row names who runs the attempt).
fn eager_of(command: &Command) -> Option<Eager> {
    let (offer, worker_id) = match command {
        Command::ActivityCompleted(c) => (c.eager.as_ref()?, c.worker_id.as_ref()?),
        Command::ActivityFailed(f) => (f.eager.as_ref()?, f.worker_id.as_ref()?),
        _ => return None,
    };
    Some(Eager {
        worker_id: worker_id.clone(),
        offer: offer.clone(),
    })
}

fn activity_queue_key(s: &TaskScheduled) -> std::borrow::Cow<'_, str> {
    if s.task_type == TaskType::Http.as_str() {
        TaskType::Http.as_str().into()
    } else {
        weft::topology::activity_key(&s.task_name, s.domain.as_deref())
    }
}

/// The heartbeat timeout (`responseTimeoutSeconds`) of the task `task_ref` of `state`.
fn response_timeout_seconds(state: &RunState, task_ref: &str) -> i64 {
    crate::state::find_task(&state.definition.tasks, task_ref).map_or(
        crate::interpreter::policy::DEFAULT_RESPONSE_TIMEOUT_SECONDS,
        |t| crate::interpreter::policy::Policy::of(t).response_timeout_seconds,
    )
}

/// The limits (`concurrentExecLimit`, rate limit) of the task `task_ref` of `state`, from
/// its frozen TaskDef; none for a task the definition does not name (a dynamic one
/// without a definition of its own).
fn attempt_limits(state: &RunState, task_ref: &str) -> AttemptLimits {
    crate::state::find_task(&state.definition.tasks, task_ref)
        .map(|t| crate::interpreter::policy::Policy::of(t).limits)
        .unwrap_or_default()
}

/// How an activity attempt that left its pending state ended, in the registry's words,
/// with the reason its worker is told (`stop_reason` for one stopped without a result).
fn attempt_end(
    status: crate::state::TaskStatus,
    failure: Option<&str>,
    stop_reason: &str,
) -> Option<(AttemptStatus, Option<String>)> {
    use crate::state::TaskStatus as T;
    Some(match status {
        T::Scheduled | T::InProgress => return None,
        T::Completed => (AttemptStatus::Completed, None),
        T::CompletedWithErrors | T::Failed | T::FailedWithTerminalError => {
            (AttemptStatus::Failed, failure.map(str::to_owned))
        }
        T::TimedOut => (AttemptStatus::TimedOut, failure.map(str::to_owned)),
        T::Canceled | T::Skipped => (AttemptStatus::Stopped, Some(stop_reason.to_owned())),
    })
}

/// Why a registered definition named at run time cannot be run.
#[derive(Debug)]
enum Unrunnable {
    /// No such definition (or version) is registered.
    NotRegistered,
    /// It is registered but cannot run: the reason.
    Invalid(String),
}

impl Unrunnable {
    /// The reason, naming the definition as `named`.
    fn of(&self, named: &str) -> String {
        match self {
            Unrunnable::NotRegistered => format!("{named} is not registered"),
            Unrunnable::Invalid(why) => format!("{named} cannot run: {why}"),
        }
    }
}

/// The events of a SUB_WORKFLOW task whose child has no definition to run (`why`): the
/// task is scheduled and fails at once, for good, as Conductor's mapper fails it.
fn child_refused(decision: Decision, state: &RunState, why: String) -> Vec<Event> {
    let Decision::StartChild {
        task_id, task_ref, ..
    } = &decision
    else {
        return Vec::new();
    };
    let failed = Decision::FailStartedTask {
        task_id: *task_id,
        task_ref: task_ref.clone(),
        reason: why,
        terminal: true,
    };
    let seq = state.tasks.len() as i32;
    // The task's scheduling, without the child it would have started.
    let mut events = events_for(decision, seq, Utc::now());
    events.truncate(1);
    events.extend(events_for(failed, seq, Utc::now()));
    events
}

/// The task an applied event hands back to its queue, and whether its worker gave it
/// back (rather than an operator making its callback due).
fn requeued_task(event: &Event) -> Option<(Uuid, bool)> {
    match event {
        Event::TaskPostponed(p) => Some((p.task_id, true)),
        Event::TaskCallbackReset(r) => Some((r.task_id, false)),
        _ => None,
    }
}

/// The durable timer `timer_id` that hands `message`, an activity's, to its queue
/// `delay_ms` from now: the task waits out a callback (docs/callbacks.md).
/// When a timer set further out than a date can hold fires: in 2262.
const DISTANT_FUTURE: chrono::DateTime<Utc> =
    chrono::DateTime::<Utc>::from_timestamp_nanos(i64::MAX);

/// When a timer `delay_ms` from now is due. A delay past what a date can hold (a
/// worker's `callbackAfterSeconds` of 10^15, say) is a timer that never fires in
/// practice, not an overflow (which panicked, failing every command of its batch).
fn due_in(delay_ms: i64) -> chrono::DateTime<Utc> {
    chrono::TimeDelta::try_milliseconds(delay_ms)
        .and_then(|delay| Utc::now().checked_add_signed(delay))
        .unwrap_or(DISTANT_FUTURE)
}

fn dispatch_timer(
    state: &RunState,
    timer_id: Uuid,
    message: OutboxMessage,
    delay_ms: i64,
) -> TimerRecord {
    TimerRecord {
        id: timer_id,
        workflow_id: state.workflow_id.clone(),
        run_id: Some(state.run_id),
        fire_at: due_in(delay_ms),
        exchange: message.exchange,
        routing_key: message.routing_key,
        body: message.body,
        traceparent: message.traceparent,
    }
}

/// Appends `event` to the working run: stores it and folds it into the state.
/// The timer of a WAIT task that `event` ends before the timer fired (completed by
/// ref, skipped, canceled): deleted in the same commit, so it never fires into the run.
fn moot_wait_timer(state: &crate::state::RunState, event: &Event) -> Option<Uuid> {
    if state.timers.is_empty() {
        return None;
    }
    let task_id = match event {
        Event::TaskCompleted(e) => e.task_id,
        Event::TaskFailed(e) => e.task_id,
        Event::TaskSkipped(e) => e.task_id,
        Event::TaskCanceled(e) => e.task_id,
        _ => return None,
    };
    let timer_id = crate::interpreter::wait_timer_id(task_id);
    state
        .timers
        .iter()
        .any(|t| t.timer_id == timer_id && !t.fired)
        .then_some(timer_id)
}

/// What the verdict on an applied task update adds: the task it applied to
/// (`taskId`), or, for a signal kept for a task not reached yet, `held: true`.
fn update_verdict(
    state: &crate::state::RunState,
    update: &weft::messages::UpdateTask,
    body: &mut serde_json::Value,
) {
    let held = update.task_id.is_none()
        && state
            .pending_signals()
            .iter()
            .any(|(name, _)| *name == update.task_ref);
    body["held"] = serde_json::json!(held);
    let task_id = update
        .task_id
        .or_else(|| (!held).then(|| state.latest(&update.task_ref).map(|t| t.task_id))?);
    if let Some(task_id) = task_id {
        body["taskId"] = serde_json::json!(task_id);
    }
}

fn append(w: &mut Working, event: Event) -> Result<(), Error> {
    if let Some(unconsumed) = w.state.unconsumed_at_end(&event) {
        append(w, unconsumed)?;
    }
    if let Some(timer_id) = moot_wait_timer(&w.state, &event) {
        w.timers.retain(|t| t.id != timer_id);
        w.cancelled_timers.push(timer_id);
    }
    // A task given back again while its message waits out the last callback: that
    // message's timer goes, the new one alone hands the task out.
    if let Event::TaskPostponed(p) = &event {
        if let Some(timer_id) = w.state.task(p.task_id).and_then(|t| t.dispatch_timer) {
            w.timers.retain(|t| t.id != timer_id);
            w.cancelled_timers.push(timer_id);
        }
    }
    let task_id = match &event {
        Event::TaskScheduled(s) => Some(s.task_id),
        Event::TaskCompleted(c) => Some(c.task_id),
        Event::TaskFailed(f) => Some(f.task_id),
        Event::TaskTimedOut(t) => Some(t.task_id),
        Event::ChildWorkflowStarted(c) => Some(c.task_id),
        Event::TaskSkipped(k) => Some(k.task_id),
        Event::TaskStarted(k) => Some(k.task_id),
        Event::TaskCanceled(k) => Some(k.task_id),
        Event::TaskPostponed(p) => Some(p.task_id),
        Event::TaskCallbackReset(r) => Some(r.task_id),
        _ => None,
    };
    let stored = StoredEvent {
        run_id: w.state.run_id,
        event_id: w.state.version + 1,
        time: Utc::now(),
        event,
    };
    w.state
        .apply(&stored)
        .map_err(|e| Error::Decode(e.to_string()))?;
    if let Some(id) = task_id {
        w.touched.insert(id);
    }
    // A loop's row shows the iteration its body is in: a body task scheduled in a loop
    // iteration may start the next one.
    if matches!(&stored.event, Event::TaskScheduled(s) if s.iteration > 0) {
        let loops = w
            .state
            .pending_tasks()
            .into_iter()
            .filter(|t| t.task_type == weft::dsl::TaskType::DoWhile.as_str());
        w.touched.extend(loops.map(|t| t.task_id));
    }
    // A run-ending event cancels what was waiting: those rows change too, and what
    // ended without its result is stopped.
    let with_result = match &stored.event {
        Event::TaskCompleted(c) => Some(c.task_id),
        Event::TaskFailed(f) => Some(f.task_id),
        _ => None,
    };
    if let Some(event) = crate::lifecycle::of(&w.state, &stored) {
        w.lifecycle.push(event);
    }
    let run_end = stored.event.ends_run();
    for t in w.state.ended_by_last_event() {
        let id = t.task_id;
        w.touched.insert(id);
        if crate::state::is_activity(&t.task_type) {
            let why = stop_reason(&stored.event);
            if let Some((status, reason)) = attempt_end(t.status, t.reason.as_deref(), &why) {
                w.checks.push(AttemptCheck {
                    task_id: id,
                    attempt: t.attempt,
                    workflow_id: w.state.workflow_id.clone(),
                    run_id: w.state.run_id,
                    task_name: t.task_name.clone(),
                    task_ref: t.task_ref.clone(),
                    reply_to: String::new(),
                    status,
                    reason,
                    timeout_seconds: 0,
                    // An end keeps the limits the row was scheduled with.
                    limits: AttemptLimits::default(),
                    worker_id: None,
                });
            }
        }
        if run_end {
            w.lifecycle.push(crate::lifecycle::canceled_by_run_end(
                &w.state,
                t,
                stored.event_id,
                stored.time,
                stop_reason(&stored.event),
            ));
        }
        if with_result != Some(id) {
            w.stopped.push(Stopped {
                task_id: id,
                attempt: t.attempt,
                task_type: t.task_type.clone(),
                child_workflow_id: t.child_workflow_id().map(str::to_owned),
                reason: stop_reason(&stored.event),
                by_run_end: run_end,
            });
        }
    }
    w.events.push(stored);
    Ok(())
}

/// Makes `span` (a command's) part of its run's trace: the trace of the start request,
/// stored with the run (`run_trace`), so that decisions made much later (a signal, an
/// operator's command, a heartbeat timeout) join the run's trace. A command already in
/// that trace (an activity's result, a timer the run set) continues its sender's span; one
/// from elsewhere (an operator's request) is linked to it instead.
fn trace_command(span: &tracing::Span, delivered: Option<&str>, run_trace: Option<&str>) {
    match run_trace {
        Some(run) if !delivered.is_some_and(|d| weft::telemetry::same_trace(d, run)) => {
            weft::telemetry::set_parent(span, Some(run));
            weft::telemetry::add_link(span, delivered);
        }
        _ => weft::telemetry::set_parent(span, delivered),
    }
}

/// Why a task that `event` ended without its result is stopped, as its worker is told.
fn stop_reason(event: &Event) -> String {
    match event {
        Event::WorkflowTerminated(t) => format!("workflow terminated: {}", t.reason),
        Event::WorkflowFailed(f) => format!("workflow failed: {}", f.reason),
        Event::WorkflowTimedOut(t) => format!("workflow timed out: {}", t.reason),
        Event::WorkflowCompleted(_) => "workflow completed".to_owned(),
        Event::TaskSkipped(_) => "skipped by an operator".to_owned(),
        Event::TaskTimedOut(t) => format!("timed out: {}", t.reason),
        Event::TaskCanceled(c) => format!("canceled: {}", c.reason),
        other => format!("ended by {}", other.kind()),
    }
}

/// An operator command's refusal.
fn refusal(status: i16, message: String) -> Verdict {
    let code = match status {
        400 => "bad_request",
        404 => "not_found",
        _ => "conflict",
    };
    Verdict {
        status,
        body: serde_json::json!({ "code": code, "message": message }),
    }
}

/// Eager tasks published while their commit runs (`Shard::dispatch_early`).
struct EarlyDispatch {
    /// Their outbox rows' ids (left out of the publish after the commit), and whether
    /// the broker confirmed them (then the committer leaves the rows out too).
    published: Arc<PublishedEarly>,
    /// The publish: the confirmed ids and the first failure.
    publishing: tokio::task::JoinHandle<(Vec<Uuid>, Result<(), Error>)>,
}

impl EarlyDispatch {
    /// Waits for the publish of a batch whose commit succeeded and forgets the confirmed
    /// rows among those the commit wrote (`written`); a row not confirmed stays for the
    /// sweeper. (When the commit fails, nothing waits for it: its rows were never
    /// written, and a task a worker got anyway is an attempt that is not the run's,
    /// whose result the run refuses.)
    async fn confirmed(self, store: &Store, written: &HashSet<Uuid>) -> Result<(), Error> {
        let (sent, published) = self.publishing.await.unwrap_or_else(|e| {
            let ended = format!("the eager tasks' publish ended before its confirms: {e}");
            (Vec::new(), Err(Error::Bus(ended)))
        });
        let written: Vec<Uuid> = sent.into_iter().filter(|id| written.contains(id)).collect();
        if !written.is_empty() {
            store.forget_outbox(written);
        }
        published
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delay_past_what_a_date_holds_is_a_timer_in_the_distant_future() {
        assert_eq!(due_in(i64::MAX), DISTANT_FUTURE);
        assert_eq!(due_in(i64::MAX / 2), DISTANT_FUTURE);
        let soon = due_in(1_000) - Utc::now();
        assert!(soon <= chrono::TimeDelta::seconds(1) && soon > chrono::TimeDelta::zero());
    }
}
