//! Group commit across shards: every shard of a decider hands its batch to the
//! committer, which writes whatever batches are waiting as ONE transaction.
//!
//! Each shard still has at most one batch in flight (it waits for its commit before it
//! takes the next deliveries), so a run's commands stay in order; batches of different
//! shards are of different runs, so joining them changes nothing but the number of
//! transactions: under load the database sees a few large commits instead of one small
//! commit per shard batch (docs/decider.md, "Group commit across shards").
//!
//! A batch's eager tasks may be on their way to the broker while the batch waits here
//! (`Shard::dispatch_early`). When the broker has confirmed every one of them by the time
//! the group's statement is made, their outbox rows are left out of it: a confirmed
//! message is already durable, and the row would only be written to be deleted again.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Mutex};
use tokio::task::JoinHandle;
use uuid::Uuid;
use weft::store::runs::CommitBatch;
use weft::store::Store;
use weft::Error;

use crate::metrics::DeciderMetrics;

/// Batches joined into one transaction at most.
const MAX_JOINED: usize = 64;

/// Outbox messages of a batch published before its commit: their rows' ids, and
/// whether the broker has confirmed all of them yet.
#[derive(Debug)]
pub struct PublishedEarly {
    ids: HashSet<Uuid>,
    confirmed: AtomicBool,
}

impl PublishedEarly {
    /// Messages whose rows are `ids`, not confirmed yet.
    pub fn new(ids: HashSet<Uuid>) -> Self {
        Self {
            ids,
            confirmed: AtomicBool::new(false),
        }
    }

    /// The rows' ids.
    pub fn ids(&self) -> &HashSet<Uuid> {
        &self.ids
    }

    /// The broker has confirmed every one of the messages.
    pub fn mark_confirmed(&self) {
        self.confirmed.store(true, Ordering::Release);
    }

    fn is_confirmed(&self) -> bool {
        self.confirmed.load(Ordering::Acquire)
    }
}

/// A batch waiting for its commit, and where its outcome goes.
struct Waiting {
    batch: CommitBatch,
    early: Option<Arc<PublishedEarly>>,
    /// Outbox rows left out of the batch (their messages were confirmed).
    skipped: u64,
    done: oneshot::Sender<(CommitBatch, Result<(), Error>)>,
}

impl Waiting {
    /// Leaves out the rows of messages the broker has confirmed already.
    fn skip_confirmed_rows(&mut self) {
        let Some(early) = self.early.as_ref().filter(|e| e.is_confirmed()) else {
            return;
        };
        let before = self.batch.outbox.len();
        self.batch.outbox.retain(|m| !early.ids.contains(&m.id));
        self.skipped = (before - self.batch.outbox.len()) as u64;
    }
}

/// The shards' handle on the committer; cheap to clone.
#[derive(Clone)]
pub struct Committer {
    queue: mpsc::UnboundedSender<Waiting>,
}

impl Committer {
    /// Starts `writers` committer tasks on `store` (each commits one group at a time;
    /// more than one keeps the database busy while a commit waits for its flush). They
    /// end once every handle is dropped and the queue is drained.
    pub fn start(
        store: Store,
        metrics: DeciderMetrics,
        writers: usize,
    ) -> (Self, Vec<JoinHandle<()>>) {
        let (queue, receiver) = mpsc::unbounded_channel();
        let receiver = Arc::new(Mutex::new(receiver));
        let tasks = (0..writers.max(1))
            .map(|_| {
                tokio::spawn(write_groups(
                    store.clone(),
                    metrics.clone(),
                    receiver.clone(),
                ))
            })
            .collect();
        (Self { queue }, tasks)
    }

    /// Commits `batch`, alone or with other shards' batches; gives it back with the
    /// outcome (without the outbox rows left out because `early` was confirmed first).
    /// An error is this batch's own: a group that fails is committed again batch by
    /// batch, so one shard's version conflict never fails another's commit.
    pub async fn commit(
        &self,
        batch: CommitBatch,
        early: Option<Arc<PublishedEarly>>,
    ) -> (CommitBatch, Result<(), Error>) {
        let (done, outcome) = oneshot::channel();
        let waiting = Waiting {
            batch,
            early,
            skipped: 0,
            done,
        };
        if let Err(mpsc::error::SendError(waiting)) = self.queue.send(waiting) {
            return (waiting.batch, Err(Error::ShuttingDown));
        }
        match outcome.await {
            Ok(outcome) => outcome,
            // The committer task died (a panic): the batch is lost with it, but nothing
            // was acknowledged, so its commands come back.
            Err(_) => (CommitBatch::default(), Err(Error::ShuttingDown)),
        }
    }
}

/// One committer task: takes the first waiting batch and every batch queued behind it
/// (up to [`MAX_JOINED`]), commits them together, answers each.
async fn write_groups(
    store: Store,
    metrics: DeciderMetrics,
    receiver: Arc<Mutex<mpsc::UnboundedReceiver<Waiting>>>,
) {
    loop {
        let mut group = {
            let mut receiver = receiver.lock().await;
            let Some(first) = receiver.recv().await else {
                return;
            };
            let mut group = vec![first];
            while group.len() < MAX_JOINED {
                match receiver.try_recv() {
                    Ok(next) => group.push(next),
                    Err(_) => break,
                }
            }
            group
        };
        metrics.joined_batches.observe(group.len() as f64);
        group.iter_mut().for_each(Waiting::skip_confirmed_rows);
        let outcome = {
            let batches: Vec<&CommitBatch> = group.iter().map(|w| &w.batch).collect();
            let started = std::time::Instant::now();
            let outcome = store.commit_all(&batches).await;
            metrics
                .statement_seconds
                .observe(started.elapsed().as_secs_f64());
            outcome
        };
        match outcome {
            Ok(()) => {
                metrics.commits.inc();
                for waiting in group {
                    metrics.outbox_rows_skipped.inc_by(waiting.skipped);
                    let _ = waiting.done.send((waiting.batch, Ok(())));
                }
            }
            Err(e) if group.len() == 1 => {
                let waiting = group.into_iter().next().expect("a group of one");
                let _ = waiting.done.send((waiting.batch, Err(e)));
            }
            Err(e) => {
                tracing::debug!(error = %e, batches = group.len(), "group commit failed; committing its batches one by one");
                for waiting in group {
                    let outcome = store.commit(&waiting.batch).await;
                    if outcome.is_ok() {
                        metrics.commits.inc();
                        metrics.outbox_rows_skipped.inc_by(waiting.skipped);
                    }
                    let _ = waiting.done.send((waiting.batch, outcome));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use serde_json::json;
    use uuid::Uuid;
    use weft::messages::Event;
    use weft::store::outbox::OutboxMessage;
    use weft::store::runs::{RunRecord, StoredEvent};
    use weft::testing::TestDb;

    use super::*;

    fn run(workflow_id: &str, run_id: Uuid, version: i64) -> RunRecord {
        let t = Utc::now();
        RunRecord {
            run_id,
            workflow_id: workflow_id.into(),
            workflow_name: "wf".into(),
            workflow_version: 1,
            status: "RUNNING".into(),
            sub_status: "RUNNING".into(),
            input: json!({}),
            output: None,
            variables: json!({}),
            correlation_id: None,
            parent_workflow_id: None,
            reason: None,
            failed_task_refs: Vec::new(),
            start_time: t,
            end_time: None,
            update_time: t,
            version,
            is_current: true,
            reset_from: None,
            pending_signals: None,
        }
    }

    fn event(run_id: Uuid, event_id: i64) -> StoredEvent {
        StoredEvent {
            run_id,
            event_id,
            time: Utc::now(),
            event: Event::from_parts("VariablesUpdated", json!({"variables": {"n": event_id}}))
                .expect("event"),
        }
    }

    /// A batch creating run `wf` at version 1.
    fn create(wf: &str, run_id: Uuid) -> CommitBatch {
        CommitBatch {
            new_runs: vec![run(wf, run_id, 1)],
            events: vec![event(run_id, 1)],
            ..CommitBatch::default()
        }
    }

    /// A batch moving run `wf` from `loaded` to `loaded + 1`.
    fn advance(wf: &str, run_id: Uuid, loaded: i64) -> CommitBatch {
        CommitBatch {
            updated_runs: vec![(run(wf, run_id, loaded + 1), loaded)],
            events: vec![event(run_id, loaded + 1)],
            ..CommitBatch::default()
        }
    }

    /// `batch` with `n` outbox rows (their bodies are never decoded here).
    fn with_outbox(mut batch: CommitBatch, n: usize) -> CommitBatch {
        batch.outbox = (0..n)
            .map(|_| OutboxMessage {
                id: Uuid::now_v7(),
                exchange: "ns.eager".into(),
                routing_key: "worker.task".into(),
                body: b"{}".to_vec(),
                traceparent: None,
                raw: false,
            })
            .collect();
        batch
    }

    async fn outbox_ids(store: &Store) -> Vec<Uuid> {
        let pool = store.pg_pool().expect("the test database is PostgreSQL");
        sqlx::query_scalar("SELECT id FROM outbox ORDER BY id")
            .fetch_all(pool)
            .await
            .unwrap()
    }

    async fn version(store: &Store, wf: &str) -> i64 {
        store
            .load_current_run(wf)
            .await
            .unwrap()
            .map(|(v, _)| v)
            .unwrap_or(0)
    }

    // One thread: the three commits below are queued before the committer task runs, so
    // they meet in one group.
    #[tokio::test(flavor = "current_thread")]
    async fn a_stale_batch_fails_alone_and_the_rest_of_its_group_commits() {
        let db = TestDb::create("decider_committer").await;
        let connections = tokio_util::sync::CancellationToken::new();
        let store = Store::connect(&db.url, 2, &connections).await.unwrap();
        let metrics = DeciderMetrics::new(&weft::admin::Metrics::new());
        let ids: Vec<Uuid> = (0..3).map(|_| Uuid::new_v4()).collect();
        let (committer, writers) = Committer::start(store.clone(), metrics.clone(), 1);

        let (a, b, c) = tokio::join!(
            committer.commit(create("wf-a", ids[0]), None),
            committer.commit(create("wf-b", ids[1]), None),
            committer.commit(create("wf-c", ids[2]), None),
        );
        assert!(a.1.is_ok() && b.1.is_ok() && c.1.is_ok());
        assert_eq!(metrics.commits.get(), 1, "three batches, one transaction");

        // wf-b's writer is stale (it loaded version 0 of a run at version 1).
        let (a, b, c) = tokio::join!(
            committer.commit(advance("wf-a", ids[0], 1), None),
            committer.commit(advance("wf-b", ids[1], 0), None),
            committer.commit(advance("wf-c", ids[2], 1), None),
        );
        assert!(a.1.is_ok(), "{:?}", a.1);
        assert!(
            matches!(b.1, Err(Error::VersionConflict { .. })),
            "{:?}",
            b.1
        );
        assert!(c.1.is_ok(), "{:?}", c.1);
        assert_eq!(
            b.0.events[0].event_id, 1,
            "the batch comes back to its shard"
        );
        assert_eq!(version(&store, "wf-a").await, 2);
        assert_eq!(version(&store, "wf-b").await, 1);
        assert_eq!(version(&store, "wf-c").await, 2);
        assert_eq!(
            metrics.commits.get(),
            3,
            "the failed group, then a and c alone"
        );

        drop(committer);
        for w in writers {
            w.await.unwrap();
        }
        drop(store);
        connections.cancel();
    }

    /// A batch's rows whose messages the broker confirmed before the commit are not
    /// written; those of a batch whose messages are not all confirmed are.
    #[tokio::test]
    async fn rows_of_messages_confirmed_before_the_commit_are_left_out() {
        let db = TestDb::create("decider_committer_early").await;
        let connections = tokio_util::sync::CancellationToken::new();
        let store = Store::connect(&db.url, 2, &connections).await.unwrap();
        let metrics = DeciderMetrics::new(&weft::admin::Metrics::new());
        let (committer, writers) = Committer::start(store.clone(), metrics.clone(), 1);
        let early_of = |batch: &CommitBatch| {
            Arc::new(PublishedEarly::new(
                batch.outbox.iter().map(|m| m.id).collect(),
            ))
        };

        let confirmed = with_outbox(create("wf-a", Uuid::new_v4()), 2);
        let early = early_of(&confirmed);
        early.mark_confirmed();
        let (back, outcome) = committer.commit(confirmed, Some(early)).await;
        assert!(outcome.is_ok(), "{outcome:?}");
        assert!(back.outbox.is_empty(), "the batch comes back without them");
        assert_eq!(outbox_ids(&store).await, Vec::<Uuid>::new());
        assert_eq!(metrics.outbox_rows_skipped.get(), 2);

        let pending = with_outbox(create("wf-b", Uuid::new_v4()), 2);
        let ids: Vec<Uuid> = pending.outbox.iter().map(|m| m.id).collect();
        let early = early_of(&pending);
        let (back, outcome) = committer.commit(pending, Some(early)).await;
        assert!(outcome.is_ok(), "{outcome:?}");
        assert_eq!(back.outbox.len(), 2);
        assert_eq!(outbox_ids(&store).await, ids, "not confirmed yet: written");
        assert_eq!(metrics.outbox_rows_skipped.get(), 2);

        drop(committer);
        for w in writers {
            w.await.unwrap();
        }
        drop(store);
        connections.cancel();
    }
}
