//! The decider's metrics (rendered on `/metrics`).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use weft::admin::Metrics;

/// Counters and histograms shared by every shard of one decider.
#[derive(Clone, Debug)]
pub struct DeciderMetrics {
    /// Commands taken from the shard queues.
    pub commands: Counter,
    /// Commands that no longer applied (duplicates, stale attempts, finished runs).
    pub ignored: Counter,
    /// Transactions committed (one per batch that changed anything): what a run costs the
    /// database, read by the hot-path budget test.
    pub commits: Counter,
    /// Commands per shard batch (taken from one shard queue at once).
    pub batch_size: Histogram,
    /// Shard batches per transaction (group commit across shards).
    pub joined_batches: Histogram,
    /// Duration of a shard batch's commit, from handing it to the committer to its
    /// outcome.
    pub commit_seconds: Histogram,
    /// Duration of a group's statement alone (the committer's `commit_all`): the rest of
    /// `commit_seconds` is the hand-over to the committer and back.
    pub statement_seconds: Histogram,
    /// Duration from commit to confirmed publish of a batch's outbox.
    pub publish_seconds: Histogram,
    /// Transactions retried after a version conflict.
    pub conflicts: Counter,
    /// Commands parked because they came before their run's start was applied.
    pub parked: Counter,
    /// Activities sent to a worker's own queue, claimed for it at dispatch
    /// (docs/eager-dispatch.md); counted when the commit that dispatches them succeeds.
    pub eager_dispatches: Counter,
    /// Outbox rows left out of a commit because the broker had confirmed their messages
    /// before it (docs/eager-dispatch.md, "Dispatch while committing").
    pub outbox_rows_skipped: Counter,
    /// Settles committed as a slice, the run going on in a `Continue` (docs/decider.md,
    /// "Long settles in slices").
    pub slices: Counter,
    /// Commands set aside: failed the same way on every attempt (or could not be read)
    /// and dead-lettered (docs/decider.md, "Poison commands").
    pub set_aside: Counter,
    /// Verdicts a gateway's `WatchVerdict` needed read from the store: neither in the
    /// call's batch nor committed lately by its shard (`recent_verdicts`).
    pub verdicts_read: Counter,
}

impl DeciderMetrics {
    /// Registers the decider's metrics in `registry`.
    pub fn new(registry: &Metrics) -> Self {
        Self {
            commands: registry.counter("weft_decider_commands", "Commands received"),
            ignored: registry.counter(
                "weft_decider_commands_ignored",
                "Commands that no longer applied",
            ),
            commits: registry.counter("weft_decider_commits", "Transactions committed"),
            parked: registry.counter(
                "weft_decider_commands_parked",
                "Commands parked until their run's start is applied",
            ),
            eager_dispatches: registry.counter(
                "weft_decider_eager_dispatches",
                "Activities dispatched to the worker that offered to run them, claimed at dispatch",
            ),
            slices: registry.counter(
                "weft_decider_settle_slices",
                "Settles committed as a slice, the run going on in a Continue command",
            ),
            set_aside: registry.counter(
                "weft_decider_commands_set_aside",
                "Commands dead-lettered because they failed the same way on every attempt or could not be read",
            ),
            verdicts_read: registry.counter(
                "weft_decider_verdicts_read",
                "Verdicts asked for that had to be read from the store (not committed lately by the shard)",
            ),
            outbox_rows_skipped: registry.counter(
                "weft_decider_outbox_rows_skipped",
                "Outbox rows not written: the broker confirmed their messages before the commit",
            ),
            batch_size: registry.histogram(
                "weft_decider_batch_size",
                "Commands per shard batch",
                exponential_buckets(1.0, 2.0, 9),
            ),
            joined_batches: registry.histogram(
                "weft_decider_joined_batches",
                "Shard batches per transaction",
                exponential_buckets(1.0, 2.0, 7),
            ),
            commit_seconds: registry.histogram(
                "weft_decider_commit_seconds",
                "Commit transaction duration",
                exponential_buckets(0.0001, 2.0, 16),
            ),
            statement_seconds: registry.histogram(
                "weft_decider_commit_statement_seconds",
                "The commit statement of a group of shard batches, alone",
                exponential_buckets(0.0001, 2.0, 16),
            ),
            publish_seconds: registry.histogram(
                "weft_decider_outbox_publish_seconds",
                "Confirmed publish of a batch's outbox",
                exponential_buckets(0.0001, 2.0, 16),
            ),
            conflicts: registry.counter(
                "weft_decider_version_conflicts",
                "Batches retried after a version conflict",
            ),
        }
    }
}
