//! The hook deliveries' store against the real PostgreSQL: the dispatcher's claim reads
//! only pending due rows through its partial index, and settling attempts moves a
//! reset's rollback sequence on (the next member becomes due only when the previous one
//! is released; an awaited one that runs out of attempts skips the rest and tells the
//! waiting run, in the same transaction).

use std::time::Duration;

use uuid::Uuid;
use weft::hooks::{Backoff, NewDelivery};
use weft::messages::Command;
use weft::store::hooks::{AttemptResult, CLAIM_SQL};
use weft::store::runs::CommitBatch;

use crate::utils::TestEnv;

fn delivery(run_id: Uuid, seq: Option<i32>, task_ref: &str, blocking: bool) -> NewDelivery {
    NewDelivery {
        id: Uuid::new_v4(),
        workflow_id: "wf-hooks".into(),
        run_id,
        hook: "onRollback".into(),
        event: "workflow.reset".into(),
        task_ref: Some(task_ref.into()),
        task_id: Some(Uuid::new_v4()),
        iteration: 0,
        url: "http://127.0.0.1:9/hook".into(),
        headers: serde_json::Map::new(),
        body: "{}".into(),
        signature: None,
        blocking,
        group_seq: seq,
        traceparent: None,
    }
}

async fn insert(env: &TestEnv, deliveries: Vec<NewDelivery>) {
    let batch = CommitBatch {
        hook_deliveries: deliveries,
        ..CommitBatch::default()
    };
    env.store.commit(&batch).await.expect("insert deliveries");
}

fn failed() -> AttemptResult {
    AttemptResult {
        status_code: Some(500),
        error: Some("HTTP 500".into()),
        duration: Duration::from_millis(3),
        permanent: false,
    }
}

fn delivered() -> AttemptResult {
    AttemptResult {
        status_code: Some(204),
        error: None,
        duration: Duration::from_millis(3),
        permanent: false,
    }
}

const LEASE: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_reads_pending_due_rows_through_its_index() {
    let env = TestEnv::new().await;
    sqlx::query(
        "INSERT INTO hook_deliveries (id, workflow_id, run_id, hook, event, url, body, status)
         SELECT gen_random_uuid(), 'wf-' || i, gen_random_uuid(), 'onComplete',
                'task.completed', 'http://x', '{}', 'DELIVERED'
         FROM generate_series(1, 20000) AS i",
    )
    .execute(env.store.pg_pool().unwrap())
    .await
    .expect("insert 20,000 settled deliveries");
    sqlx::query("ANALYZE hook_deliveries")
        .execute(env.store.pg_pool().unwrap())
        .await
        .expect("analyze");
    let lines: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {CLAIM_SQL}"))
        .bind(32i64)
        .bind(30.0f64)
        .fetch_all(env.store.pg_pool().unwrap())
        .await
        .expect("explain");
    let plan = lines.join("\n");
    assert!(plan.contains("hook_deliveries_due"), "{plan}");
    assert!(!plan.contains("Seq Scan on hook_deliveries"), "{plan}");
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_sequence_moves_on_and_reports_to_the_waiting_run() {
    let env = TestEnv::new().await;
    let backoff = Backoff {
        initial: Duration::from_millis(1),
        max: Duration::from_millis(1),
        max_attempts: 2,
    };
    // Sequence: d (not awaited), c (awaited), b (awaited, never reached), on run r1.
    let r1 = Uuid::new_v4();
    insert(
        &env,
        vec![
            delivery(r1, Some(0), "d", false),
            delivery(r1, Some(1), "c", true),
            delivery(r1, Some(2), "b", true),
        ],
    )
    .await;
    let claim = |n: i64| env.store.claim_hook_deliveries(n, LEASE);
    let due = claim(10).await.unwrap();
    let refs: Vec<_> = due.iter().map(|c| c.task_ref.clone().unwrap()).collect();
    assert_eq!(refs, vec!["d"], "only the head of a sequence is due");
    // d's first attempt fails: it is released (not awaited) and retried on its own; c is due.
    let sent = env
        .store
        .settle_hook_attempt(&env.names, &due[0], &failed(), &backoff)
        .await
        .unwrap();
    assert!(sent.is_empty());
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut due = claim(10).await.unwrap();
    due.sort_by_key(|c| c.group_seq);
    let refs: Vec<_> = due
        .iter()
        .map(|c| (c.task_ref.clone().unwrap(), c.attempt))
        .collect();
    assert_eq!(refs, vec![("d".to_owned(), 2), ("c".to_owned(), 1)]);
    // d succeeds; c (awaited) fails twice: dead, b skipped, the run told it failed.
    for c in &due {
        let result = if c.task_ref.as_deref() == Some("d") {
            delivered()
        } else {
            failed()
        };
        env.store
            .settle_hook_attempt(&env.names, c, &result, &backoff)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    let due = claim(10).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!((due[0].task_ref.as_deref(), due[0].attempt), (Some("c"), 2));
    let sent = env
        .store
        .settle_hook_attempt(&env.names, &due[0], &failed(), &backoff)
        .await
        .unwrap();
    assert_eq!(sent.len(), 1);
    let envelope = weft::Envelope::from_bytes(&sent[0].body).unwrap();
    let Command::RollbackHooksDone(done) = envelope.decode::<Command>().unwrap() else {
        panic!("not RollbackHooksDone");
    };
    assert_eq!((done.run_id, done.ok), (r1, false));
    let reason = done.reason.unwrap();
    assert!(
        reason.contains("task \"c\"") && reason.contains("after 2 attempts"),
        "{reason}"
    );
    assert_eq!(sent[0].routing_key, env.names.command_key_for("wf-hooks"));
    let statuses: Vec<(String, String, i32)> = env
        .store
        .hook_deliveries("wf-hooks")
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.task_ref.unwrap(), d.status, d.attempt_count))
        .collect();
    assert_eq!(
        statuses,
        vec![
            ("d".into(), "DELIVERED".into(), 2),
            ("c".into(), "DEAD".into(), 2),
            ("b".into(), "SKIPPED".into(), 0)
        ]
    );

    // A sequence whose members all succeed reports ok once the last is released.
    let r2 = Uuid::new_v4();
    insert(
        &env,
        vec![
            delivery(r2, Some(0), "y", true),
            delivery(r2, Some(1), "x", false),
        ],
    )
    .await;
    for expected in ["y", "x"] {
        let due = claim(10).await.unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].task_ref.as_deref(), Some(expected));
        let sent = env
            .store
            .settle_hook_attempt(&env.names, &due[0], &delivered(), &backoff)
            .await
            .unwrap();
        assert_eq!(sent.len(), usize::from(expected == "x"));
    }
    assert!(claim(10).await.unwrap().is_empty());
    env.finish().await;
}
