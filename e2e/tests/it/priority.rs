//! Conductor's start `priority` on both back-ends: with a backlog of a task waiting for
//! its worker, a run started with a high priority has its task handed out first.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;
use weft::worker::Worker;
use weft_e2e::Suite;

use crate::RUN_TIMEOUT;

const TASK: &str = "ranked_task";

crate::on_both_backends!(an_urgent_run_overtakes_a_backlog);

async fn an_urgent_run_overtakes_a_backlog(mut suite: Suite) {
    suite.delete_queue_on_cleanup(TASK);
    let client = suite.client();
    client
        .register(&json!({"name": "ranked", "version": 1, "tasks": [
            {"name": TASK, "taskReferenceName": "work",
             "inputParameters": {"n": "${workflow.input.n}"}}]}))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 1..=20 {
        ids.push(client.start("ranked", json!({"n": n})).await.unwrap());
    }
    ids.push(
        client
            .start_request(&json!({"name": "ranked", "input": {"n": 99}, "priority": 90}))
            .await
            .unwrap(),
    );
    // Every task is queued before a worker comes.
    let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
    loop {
        let size = client
            .raw(
                reqwest::Method::GET,
                &format!("/api/tasks/queue/size?taskType={TASK}"),
                None,
            )
            .await
            .unwrap();
        if size.json == Some(json!(21)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the backlog never reached 21 tasks: {}",
            size.text
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let handled = Arc::new(Mutex::new(Vec::new()));
    let seen = handled.clone();
    let worker = Worker::builder(&suite.worker_config())
        .concurrency(1)
        .activity(TASK, move |task, _ctx| {
            let seen = seen.clone();
            async move {
                seen.lock()
                    .unwrap()
                    .push(task.input["n"].as_i64().unwrap_or(-1));
                Ok(json!({}))
            }
        })
        .build();
    let shutdown = CancellationToken::new();
    let running = suite.run_worker(worker, &shutdown);
    for id in &ids {
        crate::ended(&suite, id, "COMPLETED").await;
    }
    shutdown.cancel();
    let _ = running.await;
    let order = handled.lock().unwrap().clone();
    assert_eq!(order.len(), 21, "{order:?}");
    assert_eq!(order[0], 99, "the urgent task first: {order:?}");
}
