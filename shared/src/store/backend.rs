//! The store's contract: one trait per concern, each implemented once per backend
//! (PostgreSQL in [`super::pg`], SQLite in [`super::sqlite`]). Services never see a
//! backend: they hold a [`super::Store`], which dereferences to `dyn Backend`, so
//! `store.commit(&batch)` works on either and no service branches on the backend.
//!
//! Methods that publish (`publish_outbox`, `sweep_outbox`, `fire_timers`, the registry
//! scan) take the [`Bus`]: how rows are claimed around a publish (row locks in
//! PostgreSQL, the single writer in SQLite) is the backend's business.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::auth::{ApiToken, AuditEntry, AuditFilter};
use super::definitions::{PutOutcome, StoredDefinition};
use super::definitions_epoch::DefinitionsEpoch;
use super::event_handlers::{EventExecution, NewEventExecution, StoredEventHandler};
use super::executions::{Removal, RunningFilter};
use super::graph::RunVersion;
use super::graph_build::Graph;
use super::hooks::{AttemptResult, Claimed, DeliveryView};
use super::operations::{ChainedRun, OperationOutcome};
use super::outbox::OutboxMessage;
use super::reads::{EventView, RunView, TaskView};
use super::runs::{CommitBatch, StoredEvent};
use super::search::{Search, SearchHit};
use super::starts::{NewStart, StartOutcome, StartRow};
use super::stats::RunStats;
use super::task_api::{TaskLog, TaskWithRun};
use super::taskdefs::StoredTaskDef;
use super::timers::FireReport;
use crate::bus::Bus;
use crate::dsl::taskdef::TaskDef;
use crate::dsl::WorkflowDef;
use crate::hooks::Backoff;
use crate::messages::ClaimAttempt;
use crate::registry::rows::{
    BeatWrite, ClaimOutcome, End, LimitedClaim, Liveness, ScanOutcome, ScanScope, Stored,
};
use crate::registry::TaskCheck;
use crate::topology::Names;
use crate::Result;

/// Every concern of the store; what a [`super::Store`] holds.
pub trait Backend:
    RunStore
    + ReadStore
    + ExecutionStore
    + GraphStore
    + SearchStore
    + StatsStore
    + DefinitionStore
    + TaskDefStore
    + EventHandlerStore
    + StartStore
    + OperationStore
    + TaskApiStore
    + OutboxStore
    + TimerStore
    + HookStore
    + RegistryStore
    + AuthStore
    + Health
    + Send
    + Sync
    + std::fmt::Debug
{
}

impl<T> Backend for T where
    T: RunStore
        + ReadStore
        + ExecutionStore
        + GraphStore
        + SearchStore
        + StatsStore
        + DefinitionStore
        + TaskDefStore
        + EventHandlerStore
        + StartStore
        + OperationStore
        + TaskApiStore
        + OutboxStore
        + TimerStore
        + HookStore
        + RegistryStore
        + AuthStore
        + Health
        + Send
        + Sync
        + std::fmt::Debug
{
}

/// Readiness.
#[async_trait]
pub trait Health {
    /// A trivial round trip.
    async fn ping(&self) -> Result<()>;
    /// The backend's name, for logs and `/healthz`: `postgres` or `sqlite`.
    fn backend_name(&self) -> &'static str;
}

/// The decider's reads and its atomic commit (docs/decider.md).
#[async_trait]
pub trait RunStore {
    /// Loads the current run of `workflow_id`: its version and full history, oldest first.
    async fn load_current_run(&self, workflow_id: &str) -> Result<Option<(i64, Vec<StoredEvent>)>>;

    /// Commits `batch` atomically. Returns [`crate::Error::VersionConflict`] when an
    /// updated run's version moved, and a store error whose database error is a unique
    /// violation when a new run collides with an existing current run (the decider
    /// reloads and retries on both); nothing is written in either case.
    async fn commit(&self, batch: &CommitBatch) -> Result<()> {
        self.commit_all(&[batch]).await
    }

    /// Commits several batches (of different runs) atomically, as one transaction: the
    /// decider's group commit across its shards. Fails as [`RunStore::commit`] does, as a
    /// whole: nothing of any batch is written then.
    async fn commit_all(&self, batches: &[&CommitBatch]) -> Result<()>;

    /// A run's whole history, oldest first.
    async fn run_events(&self, run_id: Uuid) -> Result<Vec<StoredEvent>>;

    /// Marks the current run of `workflow_id` FAILED with `reason` in its row alone,
    /// when it is RUNNING: for a run whose history cannot be read (it does not fold, or
    /// disagrees with the row), which no event can be appended to. The decider's last
    /// resort when it sets aside a command of such a run (docs/decider.md, "Poison
    /// commands"). `false` when there was no such run.
    async fn fail_unreadable_run(&self, workflow_id: &str, reason: &str) -> Result<bool>;
}

/// The read side of runs and tasks (gateway, history service).
#[async_trait]
pub trait ReadStore {
    /// The current run of `workflow_id`.
    async fn current_run(&self, workflow_id: &str) -> Result<Option<RunView>>;
    /// The current run of `workflow_id` with its tasks.
    async fn current_run_with_tasks(
        &self,
        workflow_id: &str,
    ) -> Result<Option<(RunView, Vec<TaskView>)>>;
    /// The current run of `workflow_id`, how many of its tasks have one of `statuses`
    /// (any status when empty), and `count` of those from position `start` in schedule
    /// order: a page read without the rest of a run of 100,000 tasks.
    async fn current_run_tasks_page(
        &self,
        workflow_id: &str,
        statuses: &[String],
        start: i64,
        count: i64,
    ) -> Result<Option<(RunView, i64, Vec<TaskView>)>>;
    /// Run `run_id` of `workflow_id` (any run of its chain).
    async fn run_of_workflow(&self, workflow_id: &str, run_id: Uuid) -> Result<Option<RunView>>;
    /// The tasks of a run, in schedule order.
    async fn tasks_of_run(&self, run_id: Uuid) -> Result<Vec<TaskView>>;
    /// Up to `limit` events of a run after event `after`.
    async fn history_page(&self, run_id: Uuid, after: i64, limit: i64) -> Result<Vec<EventView>>;
}

/// Conductor's lookups over runs and the removal of ended ones
/// ([`super::executions`]).
#[async_trait]
pub trait ExecutionStore {
    /// The current runs of definition `name` whose correlation id is among
    /// `correlation_ids`, RUNNING ones only unless `include_closed` (as Conductor); at most
    /// [`super::executions::MAX_LOOKUP`], the newest first.
    async fn runs_by_correlation(
        &self,
        name: &str,
        correlation_ids: &[String],
        include_closed: bool,
    ) -> Result<Vec<RunView>>;
    /// The workflow ids of the current runs of `name` version `version` that `filter`
    /// selects; at most [`super::executions::MAX_LOOKUP`], the newest first.
    async fn running_workflow_ids(
        &self,
        name: &str,
        version: i32,
        filter: &RunningFilter,
    ) -> Result<Vec<String>>;
    /// Deletes every row of `workflow_id` in one transaction, provided its current run
    /// has ended; see [`Removal`].
    async fn remove_workflow(&self, workflow_id: &str) -> Result<Removal>;
    /// Upserts the last poll of each task type (the newest wins).
    async fn record_poll_data(&self, polls: &[super::poll_data::PollData]) -> Result<()>;
    /// The poll data of `task_name`, or of every task type when `None`.
    async fn poll_data(&self, task_name: Option<&str>) -> Result<Vec<super::poll_data::PollData>>;
    /// Page `start`/`count` of the pending (SCHEDULED or IN_PROGRESS) tasks of type
    /// `task_type`, the oldest first: one of [`super::executions::PENDING_LISTED`].
    async fn pending_tasks(&self, task_type: &str, start: i64, count: i64)
        -> Result<Vec<TaskView>>;
}

/// The flowchart of a run (docs/graph.md).
#[async_trait]
pub trait GraphStore {
    /// A run's id and version (the graph cache's key); the current run when `run_id` is
    /// `None`.
    async fn run_version(
        &self,
        workflow_id: &str,
        run_id: Option<Uuid>,
    ) -> Result<Option<RunVersion>>;
    /// A run's graph, built from its definition and task rows.
    async fn run_graph(&self, workflow_id: &str, run_id: Uuid) -> Result<Option<Graph>>;
    /// A run's graph at `version` or later (the version [`GraphStore::run_version`]
    /// read): a backend with a read replica may build it there when the replica has
    /// caught up with that version.
    async fn run_graph_at_least(
        &self,
        workflow_id: &str,
        run_id: Uuid,
        version: i64,
    ) -> Result<Option<Graph>> {
        let _ = version; // one database: what it reads is the latest
        self.run_graph(workflow_id, run_id).await
    }
}

/// Search over runs.
#[async_trait]
pub trait SearchStore {
    /// The total of matching runs and one page of them.
    async fn search_runs(&self, search: &Search) -> Result<(i64, Vec<SearchHit>)>;
}

/// Per-definition statistics.
#[async_trait]
pub trait StatsStore {
    /// Counts and percentiles of the runs of `name` (`version`) started since `since`.
    async fn run_stats(
        &self,
        name: &str,
        version: Option<i32>,
        since: DateTime<Utc>,
        limit: i64,
    ) -> Result<RunStats>;
}

/// Workflow definitions.
#[async_trait]
pub trait DefinitionStore {
    /// Stores a definition (replacing the same version only when `overwrite`).
    async fn put_definition(&self, def: &WorkflowDef, overwrite: bool) -> Result<PutOutcome>;
    /// A definition by name and version (the latest when `None`).
    async fn get_definition(
        &self,
        name: &str,
        version: Option<i32>,
    ) -> Result<Option<StoredDefinition>>;
    /// Every definition.
    async fn list_definitions(&self) -> Result<Vec<StoredDefinition>>;
    /// Deletes one version; whether it existed.
    async fn delete_definition(&self, name: &str, version: i32) -> Result<bool>;
    /// The epoch of the registered workflow and task definitions: what a cache of them
    /// checks before using an entry (docs/definition-cache.md).
    fn definitions_epoch(&self) -> &DefinitionsEpoch;
    /// Watches the changes other processes make to the definitions until `shutdown`
    /// (PostgreSQL: a listening connection of its own), so that
    /// [`DefinitionStore::definitions_epoch`] has a current epoch. Without it only this
    /// process's own changes are seen, and a backend that other processes write to
    /// gives no current epoch (nothing is cached).
    fn watch_definitions(&self, shutdown: CancellationToken);
}

/// Task definitions.
#[async_trait]
pub trait TaskDefStore {
    /// Creates or replaces task definitions.
    async fn put_task_defs(&self, defs: &[TaskDef]) -> Result<()>;
    /// One task definition.
    async fn get_task_def(&self, name: &str) -> Result<Option<StoredTaskDef>>;
    /// The task definitions among `names`.
    async fn get_task_defs(&self, names: &[String]) -> Result<Vec<StoredTaskDef>>;
    /// Every task definition.
    async fn list_task_defs(&self) -> Result<Vec<StoredTaskDef>>;
    /// Deletes one; whether it existed.
    async fn delete_task_def(&self, name: &str) -> Result<bool>;
}

/// Event handlers and their executions.
#[async_trait]
pub trait EventHandlerStore {
    /// Registers a new handler; `false` when one with its name exists.
    async fn add_event_handler(
        &self,
        name: &str,
        event: &str,
        active: bool,
        definition: &serde_json::Value,
    ) -> Result<bool>;
    /// Replaces a handler; `false` when none has its name.
    async fn update_event_handler(
        &self,
        name: &str,
        event: &str,
        active: bool,
        definition: &serde_json::Value,
    ) -> Result<bool>;
    /// Every handler, by name.
    async fn list_event_handlers(&self) -> Result<Vec<StoredEventHandler>>;
    /// Deletes one; whether it existed.
    async fn delete_event_handler(&self, name: &str) -> Result<bool>;
    /// Records what handlers did with an event.
    async fn record_event_executions(&self, executions: &[NewEventExecution]) -> Result<()>;
    /// A handler's executions, the newest first, at most `limit`.
    async fn list_event_executions(&self, handler: &str, limit: i64)
        -> Result<Vec<EventExecution>>;
    /// Keeps each handler's newest `keep` executions; returns how many were deleted.
    async fn prune_event_executions(&self, keep: i64) -> Result<u64>;
}

/// Accepted starts (the gateway's idempotent start).
#[async_trait]
pub trait StartStore {
    /// Records a start and its outbox messages in one transaction (with `audit`, the
    /// caller's audit row, when given), or reports the start already recorded for the
    /// workflow id (then nothing is written).
    async fn accept_start(
        &self,
        start: &NewStart,
        messages: &mut [OutboxMessage],
        audit: Option<&AuditEntry>,
    ) -> Result<StartOutcome>;
    /// The start recorded for `workflow_id`.
    async fn get_start(&self, workflow_id: &str) -> Result<Option<StartRow>>;
}

/// Operator commands' verdicts and run chains.
#[async_trait]
pub trait OperationStore {
    /// The verdict on `request_id`, when the decider gave one.
    async fn operation_outcome(&self, request_id: Uuid) -> Result<Option<OperationOutcome>>;
    /// Deletes verdicts older than `age`, at most `limit`; returns how many.
    async fn purge_operation_outcomes(&self, age: Duration, limit: i64) -> Result<u64>;
    /// Every run of `workflow_id`, oldest first.
    async fn run_chain(&self, workflow_id: &str) -> Result<Vec<ChainedRun>>;
}

/// The task API for HTTP workers.
#[async_trait]
pub trait TaskApiStore {
    /// A task with its run's ids.
    async fn task_with_run(&self, task_id: Uuid) -> Result<Option<TaskWithRun>>;
    /// The tasks of `task_ids` that exist, with their runs' ids, in no given order (a
    /// batch poll reads its tasks together).
    async fn tasks_with_runs(&self, task_ids: &[Uuid]) -> Result<Vec<TaskWithRun>>;
    /// Appends log lines to a task.
    async fn append_task_logs(&self, task_id: Uuid, lines: &[TaskLog]) -> Result<()>;
    /// A task's log lines, oldest first.
    async fn task_logs(&self, task_id: Uuid) -> Result<Vec<TaskLog>>;
}

/// The transactional outbox.
#[async_trait]
pub trait OutboxStore {
    /// Publishes committed outbox messages (confirmed), then forgets their rows; a failed
    /// publish leaves its row for the sweeper.
    async fn publish_outbox(&self, bus: &Bus, messages: &[OutboxMessage]) -> Result<()>;
    /// Forgets the rows of messages published (and confirmed) by other means once their
    /// commit is known to have succeeded: they are deleted in the background, like those
    /// `publish_outbox` published.
    fn forget_outbox(&self, ids: Vec<Uuid>);
    /// Re-publishes rows older than `older_than`, at most `limit`; returns how many.
    async fn sweep_outbox(&self, bus: &Bus, older_than: Duration, limit: i64) -> Result<usize>;
}

/// Durable timers.
#[async_trait]
pub trait TimerStore {
    /// Publishes up to `limit` due timers and deletes the published ones.
    async fn fire_timers(&self, bus: &Bus, limit: i64) -> Result<FireReport>;
    /// When the earliest pending timer is due, by the store's clock.
    async fn next_timer_at(&self) -> Result<Option<DateTime<Utc>>>;
    /// How long until the earliest pending timer is due (`ZERO` when due, `None` when
    /// there is none), by the store's clock.
    async fn next_timer_in(&self) -> Result<Option<Duration>>;
    /// How many messages for `exchange` wait in timers, by routing key (activities
    /// waiting out a callback delay before they go to their queue).
    async fn delayed_messages(
        &self,
        exchange: &str,
    ) -> Result<std::collections::HashMap<String, u64>>;
}

/// Hook deliveries (docs/hooks.md).
#[async_trait]
pub trait HookStore {
    /// Claims (leases) up to `limit` due deliveries.
    async fn claim_hook_deliveries(&self, limit: i64, lease: Duration) -> Result<Vec<Claimed>>;
    /// Records one attempt's result; returns the outbox messages it caused (published by
    /// the caller).
    async fn settle_hook_attempt(
        &self,
        names: &Names,
        claimed: &Claimed,
        result: &AttemptResult,
        backoff: &Backoff,
    ) -> Result<Vec<OutboxMessage>>;
    /// How long until the next delivery is due.
    async fn next_hook_delivery_in(&self) -> Result<Option<Duration>>;
    /// A workflow's deliveries, for the API.
    async fn hook_deliveries(&self, workflow_id: &str) -> Result<Vec<DeliveryView>>;
}

/// Asks the heartbeat cache how alive the candidates are (`None`: no evidence).
pub type LivenessProbe<'a> =
    &'a (dyn Fn(Vec<Uuid>) -> BoxFuture<'static, Option<Vec<Liveness>>> + Send + Sync);

/// The heartbeat registry's rows (`task_check`, docs/heartbeats.md).
#[async_trait]
pub trait RegistryStore {
    /// Claims attempts for their workers (compare-and-set): a SCHEDULED attempt — or a
    /// RUNNING one when the claim may take it over — becomes RUNNING, watched from now;
    /// an unknown attempt is created RUNNING; a stopped or ended one is refused. One
    /// outcome per distinct attempt, in no order.
    ///
    /// An attempt whose row is SCHEDULED under limits (docs/task-limits.md) is not
    /// claimed here: its outcome carries [`ClaimOutcome::limited`], and the caller passes
    /// it on to [`RegistryStore::claim_limited`]. Rows without limits never leave this
    /// one statement.
    async fn claim_many(&self, claims: &[ClaimAttempt]) -> Result<Vec<ClaimOutcome>>;
    /// Claims attempts of limited tasks: serialized per task name with every other
    /// limited claim of that name (whatever the replica), each is claimed as
    /// [`RegistryStore::claim_many`] would, or deferred ([`ClaimOutcome::deferred`], the
    /// row stays SCHEDULED) when its task has `concurrency` RUNNING limited attempts or
    /// its rate window is full; one stopped meanwhile is refused. One outcome per claim
    /// (distinct attempts), in no order.
    async fn claim_limited(&self, claims: &[LimitedClaim]) -> Result<Vec<ClaimOutcome>>;
    /// The newest attempt of each task (unknown tasks absent).
    async fn load_latest(&self, task_ids: &[Uuid]) -> Result<Vec<Stored>>;
    /// Writes heartbeats of RUNNING attempts; returns the rows written.
    async fn write_beats(&self, beats: &[BeatWrite]) -> Result<u64>;
    /// Ends attempts (the first end of a repeated attempt wins); rows afterwards.
    async fn end_each(&self, ends: &[End<'_>]) -> Result<Vec<Stored>>;
    /// The newest attempt's row of a task.
    async fn task_check(&self, task_id: Uuid) -> Result<Option<TaskCheck>>;
    /// One scan: claims up to `limit` RUNNING attempts past their stored deadline (those
    /// of `scope`), asks `probe` about them, writes through the heartbeats of the live
    /// ones and — unless `scope` only suspects them — marks the expired ones TIMED_OUT and
    /// writes their `ActivityTimedOut` to the outbox, all in one transaction. The caller
    /// publishes `ScanOutcome::messages`.
    async fn scan_expired(
        &self,
        names: &Names,
        limit: i64,
        write_interval: Duration,
        probe: LivenessProbe<'_>,
        scope: ScanScope<'_>,
    ) -> Result<ScanOutcome>;
    /// Deletes up to `batch` ended attempts older than `retention`; returns how many.
    async fn purge_task_checks(&self, retention: Duration, batch: i64) -> Result<u64>;
}

/// API tokens and the audit trail (`store::auth`, docs/security.md).
#[async_trait]
pub trait AuthStore {
    /// Stores `token` and audits it in one transaction; `false` (and nothing written)
    /// when a token of that name exists.
    async fn create_token(&self, token: &ApiToken, audit: &AuditEntry) -> Result<bool>;
    /// Every token, by name.
    async fn tokens(&self) -> Result<Vec<ApiToken>>;
    /// The token whose secret hashes to `token_hash`.
    async fn token_by_hash(&self, token_hash: &str) -> Result<Option<ApiToken>>;
    /// Deletes the token `name` and audits it in one transaction; `false` (and nothing
    /// written) when there is none.
    async fn revoke_token(&self, name: &str, audit: &AuditEntry) -> Result<bool>;
    /// Appends `entry` to the audit trail.
    async fn record_audit(&self, entry: &AuditEntry) -> Result<()>;
    /// Audit rows matching `filter`, newest first.
    async fn audit_entries(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>>;
    /// Deletes up to `limit` audit rows older than `age`, oldest first; how many went.
    async fn purge_audit(&self, age: Duration, limit: i64) -> Result<u64>;
}
