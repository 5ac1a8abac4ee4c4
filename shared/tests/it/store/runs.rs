//! The decider's commit: what one batch writes is read back through the read traits;
//! a moved version or a second current run writes nothing.

use serde_json::json;
use uuid::Uuid;
use weft::hooks::NewDelivery;
use weft::store::operations::OperationOutcome;
use weft::store::outbox::OutboxMessage;
use weft::store::runs::{AttemptCheck, CommitBatch};
use weft::store::timers::TimerRecord;
use weft::store::Store;
use weft::Error;

use super::{now, run, started, task, variables};

fn outbox(key: &str) -> OutboxMessage {
    OutboxMessage {
        id: Uuid::now_v7(),
        exchange: "weft.commands".into(),
        routing_key: key.into(),
        body: vec![1, 2, 3],
        traceparent: None,
        raw: false,
    }
}

fn timer(workflow_id: &str, run_id: Uuid) -> TimerRecord {
    TimerRecord {
        id: Uuid::now_v7(),
        workflow_id: workflow_id.into(),
        run_id: Some(run_id),
        fire_at: now() + chrono::Duration::hours(1),
        exchange: "weft.commands".into(),
        routing_key: "cmd.0".into(),
        body: vec![4, 5],
        traceparent: None,
    }
}

fn delivery(workflow_id: &str, run_id: Uuid) -> NewDelivery {
    NewDelivery {
        id: Uuid::new_v4(),
        workflow_id: workflow_id.into(),
        run_id,
        hook: "onComplete".into(),
        event: "workflow.completed".into(),
        task_ref: None,
        task_id: None,
        iteration: 0,
        url: "http://127.0.0.1:9/hook".into(),
        headers: serde_json::Map::new(),
        body: "{}".into(),
        signature: None,
        blocking: false,
        group_seq: None,
        traceparent: None,
    }
}

fn outcome(workflow_id: &str, request_id: Uuid, status: i16) -> OperationOutcome {
    OperationOutcome {
        request_id,
        workflow_id: workflow_id.into(),
        status,
        body: json!({"status": status}),
    }
}

store_test!(commit_then_load_round_trips);

/// `weft dev --db :memory:`: the synchronous writer's connection reaches the database
/// sqlx opened in memory (not a second, empty one), and two stores stay apart.
#[tokio::test]
async fn an_in_memory_store_commits_through_its_writer() {
    let open = || async {
        Store::new(
            weft::store::sqlite::SqliteStore::open("sqlite::memory:")
                .await
                .expect("open in memory"),
        )
    };
    let (store, other) = (open().await, open().await);
    commit_then_load_round_trips(&store).await;
    commit_then_load_round_trips(&other).await;
}
/// Every write of `weft dev` takes one turn: a synchronous transaction waits while a
/// write through sqlx's connection holds it (instead of meeting SQLite's lock), and runs
/// once it is released; so does a sqlx write while a synchronous one is pending.
#[tokio::test]
async fn sqlx_writes_and_synchronous_transactions_take_one_turn() {
    use futures_util::FutureExt as _;
    let dir = std::env::temp_dir().join(format!("weft-turn-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let sqlite = weft::store::sqlite::SqliteStore::open_file(&dir.join("weft.db"))
        .await
        .expect("open a database file");
    let writer = sqlite.writer().clone();
    let mut held = writer.sqlx().await.expect("the sqlx writing connection");
    sqlx::query("CREATE TABLE turn_probe (who TEXT NOT NULL)")
        .execute(&mut *held)
        .await
        .unwrap();

    let synchronous = writer.transaction(|tx| {
        tx.execute("INSERT INTO turn_probe (who) VALUES ('synchronous')", [])?;
        Ok(())
    });
    let mut synchronous = Box::pin(synchronous);
    assert!(
        (&mut synchronous).now_or_never().is_none(),
        "a synchronous transaction ran while a sqlx write held the turn"
    );
    let mut sqlx_write = Box::pin(writer.begin());
    assert!(
        (&mut sqlx_write).now_or_never().is_none(),
        "a second sqlx write began while the first held the turn"
    );
    drop(held);
    synchronous
        .await
        .expect("the synchronous transaction, after the turn");
    let mut tx = sqlx_write.await.expect("the sqlx transaction, after it");
    sqlx::query("INSERT INTO turn_probe (who) VALUES ('sqlx')")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let rows: Vec<String> = sqlx::query_scalar("SELECT who FROM turn_probe ORDER BY rowid")
        .fetch_all(sqlite.pool())
        .await
        .unwrap();
    assert_eq!(rows, ["synchronous", "sqlx"]);
    sqlite.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

async fn commit_then_load_round_trips(store: &Store) {
    let wf = "wf-round-trip";
    let run_id = Uuid::new_v4();
    let new_run = run(wf, run_id, 2);
    let mut task_a = task(&new_run, "a", 0);
    let request = Uuid::new_v4();
    let batch = CommitBatch {
        new_runs: vec![new_run.clone()],
        events: vec![started(run_id), variables(run_id, 2)],
        tasks: vec![task_a.clone()],
        outbox: vec![outbox("cmd.0")],
        timers: vec![timer(wf, run_id)],
        outcomes: vec![outcome(wf, request, 200)],
        ..CommitBatch::default()
    };
    store.commit(&batch).await.expect("first commit");

    let (version, events) = store.load_current_run(wf).await.unwrap().expect("run");
    assert_eq!(version, 2);
    assert_eq!(events, batch.events);
    assert_eq!(store.run_events(run_id).await.unwrap(), batch.events);
    let view = store.current_run(wf).await.unwrap().expect("view");
    assert_eq!(view.run_id, run_id);
    assert_eq!(view.workflow_name, "wf");
    assert_eq!(view.input, new_run.input);
    assert_eq!(view.output, None);
    assert_eq!(view.correlation_id.as_deref(), Some("corr-1"));
    assert_eq!(view.start_time, new_run.start_time);
    assert!(view.failed_task_refs.is_empty());
    assert!(view.is_current);
    let tasks = store.tasks_of_run(run_id).await.unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].task_id, task_a.task_id);
    assert_eq!(tasks[0].status, "SCHEDULED");
    assert_eq!(tasks[0].input, task_a.input);
    assert_eq!(tasks[0].scheduled_time, task_a.scheduled_time);
    let found = store
        .operation_outcome(request)
        .await
        .unwrap()
        .expect("outcome");
    assert_eq!(found, batch.outcomes[0]);
    assert_eq!(
        store.next_timer_at().await.unwrap(),
        Some(batch.timers[0].fire_at)
    );

    // Second decision: the run completes, its task is upserted, a hook fires.
    let mut done = new_run.clone();
    done.status = "COMPLETED".into();
    done.sub_status = "COMPLETED".into();
    done.output = Some(json!({"result": [1, 2]}));
    done.variables = json!({"n": 3});
    done.failed_task_refs = vec!["x".into(), "y".into()];
    done.end_time = Some(now());
    done.version = 3;
    task_a.status = "COMPLETED".into();
    task_a.output = Some(json!({"ok": true}));
    task_a.worker_id = Some("worker-1".into());
    task_a.attempt = 2;
    task_a.end_time = Some(now());
    let task_b = task(&new_run, "b", 1);
    let batch = CommitBatch {
        updated_runs: vec![(done.clone(), 2)],
        events: vec![variables(run_id, 3)],
        tasks: vec![task_a.clone(), task_b.clone()],
        hook_deliveries: vec![delivery(wf, run_id)],
        ..CommitBatch::default()
    };
    store.commit(&batch).await.expect("second commit");

    let (version, events) = store.load_current_run(wf).await.unwrap().expect("run");
    assert_eq!(version, 3);
    assert_eq!(events.len(), 3);
    let (view, tasks) = store
        .current_run_with_tasks(wf)
        .await
        .unwrap()
        .expect("run");
    assert_eq!(view.status, "COMPLETED");
    assert_eq!(view.output, done.output);
    assert_eq!(view.variables, done.variables);
    assert_eq!(view.failed_task_refs, vec!["x".to_owned(), "y".to_owned()]);
    assert_eq!(view.end_time, done.end_time);
    assert_eq!(tasks.len(), 2);
    assert_eq!(tasks[0].task_id, task_a.task_id);
    assert_eq!(tasks[0].status, "COMPLETED");
    assert_eq!(tasks[0].attempt, 2);
    assert_eq!(tasks[0].output, task_a.output);
    assert_eq!(tasks[0].worker_id.as_deref(), Some("worker-1"));
    assert_eq!(tasks[0].end_time, task_a.end_time);
    assert_eq!(tasks[1].task_id, task_b.task_id);
    let with_run = store
        .task_with_run(task_a.task_id)
        .await
        .unwrap()
        .expect("task");
    assert_eq!(with_run.task.status, "COMPLETED");
    assert_eq!(with_run.workflow_name, "wf");
    assert_eq!(with_run.correlation_id.as_deref(), Some("corr-1"));
    assert!(store.task_with_run(Uuid::new_v4()).await.unwrap().is_none());
    let hooks = store.hook_deliveries(wf).await.unwrap();
    assert_eq!(hooks.len(), 1);
    assert_eq!(hooks[0].delivery_id, batch.hook_deliveries[0].id);
    assert!(store.current_run("wf-unknown").await.unwrap().is_none());
    assert!(store
        .load_current_run("wf-unknown")
        .await
        .unwrap()
        .is_none());
}

store_test!(a_moved_version_writes_nothing);
async fn a_moved_version_writes_nothing(store: &Store) {
    let wf = "wf-conflict";
    let run_id = Uuid::new_v4();
    let first = run(wf, run_id, 2);
    let batch = CommitBatch {
        new_runs: vec![first.clone()],
        events: vec![started(run_id), variables(run_id, 2)],
        ..CommitBatch::default()
    };
    store.commit(&batch).await.unwrap();

    // A writer that loaded version 1 (stale) must not change anything.
    let other = Uuid::new_v4();
    let mut stale = first.clone();
    stale.status = "FAILED".into();
    stale.version = 3;
    let request = Uuid::new_v4();
    let task_a = task(&first, "a", 0);
    let batch = CommitBatch {
        new_runs: vec![run("wf-conflict-other", other, 1)],
        updated_runs: vec![(stale, 1)],
        events: vec![variables(run_id, 3), started(other)],
        tasks: vec![task_a.clone()],
        outbox: vec![outbox("cmd.0")],
        timers: vec![timer(wf, run_id)],
        outcomes: vec![outcome(wf, request, 200)],
        hook_deliveries: vec![delivery(wf, run_id)],
        checks: vec![attempt_check(wf, run_id, task_a.task_id)],
        ended_runs: vec![run_id],
        cancelled_timers: vec![Uuid::new_v4()],
        starts: vec![child_start("wf-conflict-child")],
    };
    let err = store.commit(&batch).await.expect_err("stale version");
    assert!(
        matches!(err, Error::VersionConflict { run_id: r, expected: 1 } if r == run_id),
        "{err:?}"
    );

    let (version, events) = store.load_current_run(wf).await.unwrap().unwrap();
    assert_eq!(version, 2);
    assert_eq!(events.len(), 2);
    assert_eq!(
        store.current_run(wf).await.unwrap().unwrap().status,
        "RUNNING"
    );
    assert!(store
        .current_run("wf-conflict-other")
        .await
        .unwrap()
        .is_none());
    assert!(store.tasks_of_run(run_id).await.unwrap().is_empty());
    assert!(store.operation_outcome(request).await.unwrap().is_none());
    assert!(store.hook_deliveries(wf).await.unwrap().is_empty());
    assert_eq!(store.next_timer_at().await.unwrap(), None);
    assert!(store.task_check(task_a.task_id).await.unwrap().is_none());
    assert!(store
        .get_start("wf-conflict-child")
        .await
        .unwrap()
        .is_none());
}

/// A run the decider starts (a child): its start record.
fn child_start(workflow_id: &str) -> weft::store::starts::NewStart {
    weft::store::starts::NewStart {
        workflow_id: workflow_id.into(),
        idempotency_key: None,
        workflow_name: "child".into(),
        workflow_version: 2,
        input: serde_json::json!({"n": 1}),
        correlation_id: Some("corr-9".into()),
    }
}

store_test!(a_commits_starts_are_found_before_they_are_applied);
async fn a_commits_starts_are_found_before_they_are_applied(store: &Store) {
    let parent = Uuid::new_v4();
    let batch = CommitBatch {
        new_runs: vec![run("wf-parent", parent, 1)],
        events: vec![started(parent)],
        starts: vec![child_start("wf-started-child")],
        ..CommitBatch::default()
    };
    store.commit(&batch).await.unwrap();
    let start = store
        .get_start("wf-started-child")
        .await
        .unwrap()
        .expect("the child's start is recorded with the commit");
    assert_eq!(start.workflow_name, "child");
    assert_eq!(start.workflow_version, 2);
    assert_eq!(start.correlation_id.as_deref(), Some("corr-9"));
    // The same start in a later commit (a command published twice) changes nothing.
    let again = CommitBatch {
        starts: vec![child_start("wf-started-child")],
        events: vec![variables(parent, 2)],
        updated_runs: vec![(
            {
                let mut r = run("wf-parent", parent, 2);
                r.version = 2;
                r
            },
            1,
        )],
        ..CommitBatch::default()
    };
    store.commit(&again).await.unwrap();
}

/// The registry row of an activity attempt scheduled by a commit.
fn attempt_check(wf: &str, run_id: Uuid, task_id: Uuid) -> AttemptCheck {
    AttemptCheck {
        task_id,
        attempt: 1,
        workflow_id: wf.to_owned(),
        run_id,
        task_name: "work".into(),
        task_ref: "a".into(),
        reply_to: "shard.0".into(),
        status: weft::registry::AttemptStatus::Scheduled,
        reason: None,
        timeout_seconds: 30,
        limits: Default::default(),
        worker_id: None,
    }
}

store_test!(the_commit_ending_a_run_deletes_its_timers);
async fn the_commit_ending_a_run_deletes_its_timers(store: &Store) {
    let (wf, other_wf) = ("wf-timers-end", "wf-timers-other");
    let (run_id, other) = (Uuid::new_v4(), Uuid::new_v4());
    let mut soon = timer(wf, run_id);
    soon.fire_at = now() + chrono::Duration::minutes(10);
    let later = timer(other_wf, other);
    store
        .commit(&CommitBatch {
            new_runs: vec![run(wf, run_id, 1), run(other_wf, other, 1)],
            events: vec![started(run_id), started(other)],
            timers: vec![soon.clone(), later.clone()],
            ..CommitBatch::default()
        })
        .await
        .unwrap();
    let first = store.next_timer_at().await.unwrap().unwrap();
    assert!((first - soon.fire_at).num_milliseconds().abs() < 1_000);
    let mut ended = run(wf, run_id, 2);
    ended.status = "TERMINATED".into();
    store
        .commit(&CommitBatch {
            updated_runs: vec![(ended, 1)],
            events: vec![variables(run_id, 2)],
            ended_runs: vec![run_id],
            ..CommitBatch::default()
        })
        .await
        .unwrap();
    // The ended run's timer went; the other run's stays.
    let first = store.next_timer_at().await.unwrap().unwrap();
    assert!((first - later.fire_at).num_milliseconds().abs() < 1_000);
}

store_test!(a_commit_deletes_the_timers_it_made_moot_and_keeps_the_others);
async fn a_commit_deletes_the_timers_it_made_moot_and_keeps_the_others(store: &Store) {
    let wf = "wf-timers-moot";
    let run_id = Uuid::new_v4();
    let mut moot = timer(wf, run_id);
    moot.fire_at = now() + chrono::Duration::minutes(10);
    let mut kept = timer(wf, run_id);
    kept.fire_at = now() + chrono::Duration::minutes(20);
    store
        .commit(&CommitBatch {
            new_runs: vec![run(wf, run_id, 1)],
            events: vec![started(run_id)],
            timers: vec![moot.clone(), kept.clone()],
            ..CommitBatch::default()
        })
        .await
        .unwrap();
    store
        .commit(&CommitBatch {
            updated_runs: vec![(run(wf, run_id, 2), 1)],
            events: vec![variables(run_id, 2)],
            cancelled_timers: vec![moot.id],
            ..CommitBatch::default()
        })
        .await
        .unwrap();
    // The run goes on: only the moot timer went.
    let first = store.next_timer_at().await.unwrap().unwrap();
    assert!((first - kept.fire_at).num_milliseconds().abs() < 1_000);
}

store_test!(a_second_current_run_is_a_unique_violation);
async fn a_second_current_run_is_a_unique_violation(store: &Store) {
    let wf = "wf-twice";
    let first = Uuid::new_v4();
    store
        .commit(&CommitBatch {
            new_runs: vec![run(wf, first, 1)],
            events: vec![started(first)],
            ..CommitBatch::default()
        })
        .await
        .unwrap();

    let second = Uuid::new_v4();
    let second_run = run(wf, second, 1);
    let err = store
        .commit(&CommitBatch {
            new_runs: vec![second_run.clone()],
            events: vec![started(second)],
            tasks: vec![task(&second_run, "a", 0)],
            ..CommitBatch::default()
        })
        .await
        .expect_err("one current run per workflow");
    // What the decider retries on: a unique violation (SQLite's partial unique index), or
    // PostgreSQL's deferred exclusion constraint (23P01).
    assert!(
        err.is_write_conflict() && !matches!(err, Error::VersionConflict { .. }),
        "{err:?}"
    );
    assert_eq!(store.current_run(wf).await.unwrap().unwrap().run_id, first);
    assert!(store.run_events(second).await.unwrap().is_empty());
    assert!(store.tasks_of_run(second).await.unwrap().is_empty());
}

store_test!(a_reset_moves_the_current_run_and_extends_the_chain);
async fn a_reset_moves_the_current_run_and_extends_the_chain(store: &Store) {
    let wf = "wf-reset";
    let old = Uuid::new_v4();
    let old_run = run(wf, old, 1);
    store
        .commit(&CommitBatch {
            new_runs: vec![old_run.clone()],
            events: vec![started(old)],
            ..CommitBatch::default()
        })
        .await
        .unwrap();

    // The reset: the old run stops being current and its successor is, in one batch.
    let mut replaced = old_run.clone();
    replaced.is_current = false;
    replaced.status = "TERMINATED".into();
    replaced.end_time = Some(super::now());
    replaced.version = 2;
    let new = Uuid::new_v4();
    let mut successor = run(wf, new, 1);
    successor.start_time = old_run.start_time + chrono::Duration::milliseconds(5);
    successor.reset_from = Some((old, "a".into()));
    store
        .commit(&CommitBatch {
            new_runs: vec![successor],
            updated_runs: vec![(replaced, 1)],
            events: vec![variables(old, 2), started(new)],
            ..CommitBatch::default()
        })
        .await
        .expect("reset commit");

    assert_eq!(store.current_run(wf).await.unwrap().unwrap().run_id, new);
    let (version, events) = store.load_current_run(wf).await.unwrap().unwrap();
    assert_eq!((version, events.len()), (1, 1));
    let previous = store.run_of_workflow(wf, old).await.unwrap().unwrap();
    assert!(!previous.is_current);
    assert_eq!(previous.status, "TERMINATED");
    assert!(store
        .run_of_workflow("wf-other", old)
        .await
        .unwrap()
        .is_none());
    let chain = store.run_chain(wf).await.unwrap();
    assert_eq!(chain.len(), 2);
    assert_eq!(chain[0].run_id, old);
    assert!(!chain[0].is_current);
    assert_eq!(chain[0].reset_from, None);
    assert!(chain[0].end_time.is_some());
    assert_eq!(chain[1].run_id, new);
    assert!(chain[1].is_current);
    assert_eq!(chain[1].reset_from, Some((old, "a".to_owned())));
    let current = store.run_version(wf, None).await.unwrap().unwrap();
    assert_eq!((current.run_id, current.version), (new, 1));
    let earlier = store.run_version(wf, Some(old)).await.unwrap().unwrap();
    assert_eq!((earlier.run_id, earlier.version), (old, 2));
    assert!(store.run_chain("wf-none").await.unwrap().is_empty());
}

store_test!(the_first_verdict_on_a_request_stands);
async fn the_first_verdict_on_a_request_stands(store: &Store) {
    let wf = "wf-verdict";
    let request = Uuid::new_v4();
    let first = outcome(wf, request, 200);
    for verdict in [first.clone(), outcome(wf, request, 409)] {
        store
            .commit(&CommitBatch {
                outcomes: vec![verdict],
                ..CommitBatch::default()
            })
            .await
            .expect("a redelivered command's verdict is not an error");
    }
    assert_eq!(store.operation_outcome(request).await.unwrap(), Some(first));
    assert!(store
        .operation_outcome(Uuid::new_v4())
        .await
        .unwrap()
        .is_none());

    // Retention: nothing is an hour old; everything is older than nothing.
    let hour = std::time::Duration::from_secs(3600);
    assert_eq!(store.purge_operation_outcomes(hour, 10).await.unwrap(), 0);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let zero = std::time::Duration::ZERO;
    assert_eq!(store.purge_operation_outcomes(zero, 10).await.unwrap(), 1);
    assert!(store.operation_outcome(request).await.unwrap().is_none());
}

store_test!(batches_of_several_runs_commit_as_one);
/// The decider's group commit: batches of different runs are written together, and a
/// stale version in any of them writes none of them.
async fn batches_of_several_runs_commit_as_one(store: &Store) {
    let (run_a, run_b) = (Uuid::new_v4(), Uuid::new_v4());
    let first_a = run("wf-group-a", run_a, 1);
    let first_b = run("wf-group-b", run_b, 1);
    let task_b = task(&first_b, "b", 0);
    let a = CommitBatch {
        new_runs: vec![first_a.clone()],
        events: vec![started(run_a)],
        outbox: vec![outbox("cmd.0")],
        ..CommitBatch::default()
    };
    let b = CommitBatch {
        new_runs: vec![first_b.clone()],
        events: vec![started(run_b)],
        tasks: vec![task_b.clone()],
        timers: vec![timer("wf-group-b", run_b)],
        checks: vec![attempt_check("wf-group-b", run_b, task_b.task_id)],
        ..CommitBatch::default()
    };
    store.commit_all(&[&a, &b]).await.expect("group commit");
    for (wf, run_id) in [("wf-group-a", run_a), ("wf-group-b", run_b)] {
        let (version, events) = store.load_current_run(wf).await.unwrap().expect(wf);
        assert_eq!((version, events.len()), (1, 1), "{wf}");
        assert_eq!(events[0].run_id, run_id);
    }
    assert_eq!(store.tasks_of_run(run_b).await.unwrap().len(), 1);

    // A moves on; B's writer is stale: neither batch of the group is written.
    let mut next_a = first_a.clone();
    next_a.version = 2;
    let mut stale_b = first_b.clone();
    stale_b.status = "FAILED".into();
    stale_b.version = 3;
    let a = CommitBatch {
        updated_runs: vec![(next_a, 1)],
        events: vec![variables(run_a, 2)],
        ..CommitBatch::default()
    };
    let b = CommitBatch {
        updated_runs: vec![(stale_b, 2)],
        events: vec![variables(run_b, 3)],
        ..CommitBatch::default()
    };
    let err = store
        .commit_all(&[&a, &b])
        .await
        .expect_err("stale version");
    assert!(matches!(err, Error::VersionConflict { .. }), "{err:?}");
    let (version, _) = store.load_current_run("wf-group-a").await.unwrap().unwrap();
    assert_eq!(version, 1, "the group's other batch was written");
    assert_eq!(
        store
            .current_run("wf-group-b")
            .await
            .unwrap()
            .unwrap()
            .status,
        "RUNNING"
    );
    // Alone, A's batch goes through.
    store.commit_all(&[&a]).await.expect("A alone");
    let (version, _) = store.load_current_run("wf-group-a").await.unwrap().unwrap();
    assert_eq!(version, 2);
}
