//! The task API for HTTP workers over the real broker, PostgreSQL and the registry: a
//! run and its task rows are inserted as the decider would write them, the activity task
//! is published to its queue as the decider's outbox would, and a worker polls it,
//! reports its result and writes its log through the API.

use axum::http::{Method, StatusCode};
use chrono::Utc;
use serde_json::{json, Value};
use uuid::Uuid;
use weft::messages::{ActivityMessage, ActivityTask, Command, TaskUpdateStatus};
use weft::Envelope;

use crate::utils::{next_delivery, random_suffix, TestEnv};

/// One scheduled activity: its rows and its message on the queue.
struct Scheduled {
    workflow_id: String,
    run_id: Uuid,
    task_id: Uuid,
}

/// Inserts a RUNNING run with one SCHEDULED task of `task_name` and publishes its
/// activity task, as the decider does.
async fn schedule(env: &TestEnv, task_name: &str) -> Scheduled {
    let workflow_id = format!("wf-{}", random_suffix());
    let run_id = Uuid::now_v7();
    let task_id = Uuid::now_v7();
    let now = Utc::now();
    sqlx::query(
        "INSERT INTO runs (run_id, workflow_id, workflow_name, workflow_version, status,
             sub_status, input, variables, start_time, update_time, version, is_current)
         VALUES ($1, $2, 'orders', 1, 'RUNNING', 'QUEUING', '{}', '{}', $3, $3, 2, TRUE)",
    )
    .bind(run_id)
    .bind(&workflow_id)
    .bind(now)
    .execute(env.store.pg_pool().unwrap())
    .await
    .expect("insert run");
    sqlx::query(
        "INSERT INTO tasks (task_id, run_id, workflow_id, task_ref, task_type, task_name, seq,
             attempt, status, input, scheduled_time, update_time)
         VALUES ($1, $2, $3, 'charge_ref', 'SIMPLE', $4, 1, 1, 'SCHEDULED', '{\"amount\": 12}',
             $5, $5)",
    )
    .bind(task_id)
    .bind(run_id)
    .bind(&workflow_id)
    .bind(task_name)
    .bind(now)
    .execute(env.store.pg_pool().unwrap())
    .await
    .expect("insert task");
    let names = env.bus.names();
    env.bus
        .declare_activity_queue(task_name)
        .await
        .expect("declare the activity queue");
    let message = ActivityMessage::ActivityTask(ActivityTask {
        task_id,
        workflow_id: workflow_id.clone(),
        run_id,
        task_ref: "charge_ref".into(),
        task_name: task_name.into(),
        task_type: "SIMPLE".into(),
        attempt: 1,
        input: json!({"amount": 12}),
        reply_to: names.command_key_for(&workflow_id),
        scheduled_at: now,
        response_timeout_seconds: 30,
        eager: false,
        results_together: false,
    });
    let envelope = Envelope::new(&workflow_id, Some(run_id), &message).expect("envelope");
    env.bus
        .publish(&names.activity_exchange(), task_name, &envelope)
        .await
        .expect("publish the activity task");
    Scheduled {
        workflow_id,
        run_id,
        task_id,
    }
}

/// Cancels the row of `task_id`, as the decider does when its run moves on.
async fn cancel_row(env: &TestEnv, task_id: Uuid) {
    sqlx::query("UPDATE tasks SET status = 'CANCELED' WHERE task_id = $1")
        .bind(task_id)
        .execute(env.store.pg_pool().unwrap())
        .await
        .expect("cancel the row");
}

/// The task ids of a batch poll's answer, in order.
fn task_ids(tasks: &Value) -> Vec<Value> {
    let tasks = tasks.as_array().expect("an array of tasks");
    tasks.iter().map(|t| t["taskId"].clone()).collect()
}

/// The namespace's queues, the test's activity queue included, then the rest.
async fn finish(env: TestEnv, task_name: &str) {
    let queue = env.bus.names().activity_queue(task_name);
    if let Err(e) = env.bus.teardown(&[queue]).await {
        eprintln!("teardown: {e}");
    }
    env.finish().await;
}

/// Waits for the next command of `kind` on the shards, skipping others.
async fn next_command(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<weft::bus::Delivery>,
    kind: &str,
) -> Command {
    loop {
        let d = next_delivery(rx, 20)
            .await
            .unwrap_or_else(|| panic!("no {kind} command"));
        if d.envelope.kind == kind {
            return d.envelope.decode::<Command>().expect("a command");
        }
    }
}

#[tokio::test]
async fn a_long_poll_is_handed_the_task_the_broker_pushes_while_it_waits() {
    let env = TestEnv::new().await;
    let task_name = format!("pushed_{}", random_suffix());
    let poll = format!("/api/tasks/poll/batch/{task_name}?workerid=w1&count=2&timeout=30000");
    let queue = env.bus.names().activity_queue(&task_name);
    let (r, s) = tokio::join!(env.get(&poll), async {
        // The poll finds the queue empty and waits before the task is scheduled.
        for _ in 0..4_000 {
            if env.bus.callers_waiting(&queue) > 0 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        schedule(&env, &task_name).await
    });
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let ids = task_ids(&r.json());
    assert_eq!(ids, [json!(s.task_id.to_string())]);
    // Handed over as the broker pushed it to the waiting poll, not found at a later look.
    let metrics = env.get("/metrics").await.text();
    let pushed = metrics
        .lines()
        .find(|l| l.starts_with("weft_gateway_polled_tasks_total{via=\"pushed\"}"));
    assert_eq!(
        pushed.and_then(|l| l.split_whitespace().last()),
        Some("1"),
        "{metrics}"
    );
    finish(env, &task_name).await;
}

#[tokio::test]
async fn a_polled_task_completed_over_http_becomes_an_activity_result() {
    let env = TestEnv::new().await;
    let task_name = format!("charge_{}", random_suffix());
    let mut commands = env.consume_commands_applying_updates();
    let s = schedule(&env, &task_name).await;

    let r = env
        .get(&format!(
            "/api/tasks/poll/batch/{task_name}?workerid=w1&count=5&timeout=5000"
        ))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let tasks = r.json();
    let tasks = tasks.as_array().expect("an array");
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    let t = &tasks[0];
    assert_eq!(t["taskId"], json!(s.task_id.to_string()));
    assert_eq!(t["taskType"], json!(task_name));
    assert_eq!(t["taskDefName"], json!(task_name));
    assert_eq!(t["referenceTaskName"], json!("charge_ref"));
    assert_eq!(t["status"], json!("IN_PROGRESS"));
    assert_eq!(t["inputData"], json!({"amount": 12}));
    assert_eq!(t["workflowInstanceId"], json!(s.workflow_id));
    assert_eq!(t["workflowType"], json!("orders"));
    assert_eq!(t["workerId"], json!("w1"));
    assert_eq!(t["retryCount"], json!(0));
    assert_eq!(t["responseTimeoutSeconds"], json!(30));
    assert!(t["startTime"].as_i64().unwrap_or(0) > 0, "{t}");

    // Taken: the queue is empty now, and the run is told the task started.
    let again = env.get(&format!("/api/tasks/poll/{task_name}")).await;
    assert_eq!(again.status, StatusCode::NO_CONTENT, "{}", again.text());
    match next_command(&mut commands, "ActivityStarted").await {
        Command::ActivityStarted(started) => {
            assert_eq!(started.task_id, s.task_id);
            assert_eq!(started.worker_id.as_deref(), Some("w1"));
        }
        other => panic!("{other:?}"),
    }
    // The attempt is registered: its heartbeats answer CONTINUE.
    let beat = env
        .post(
            &format!("/api/tasks/{}/heartbeat", s.task_id),
            &json!({"details": {"pct": 40}}),
        )
        .await;
    assert_eq!(beat.status, StatusCode::OK, "{}", beat.text());
    assert_eq!(beat.json()["action"], json!("CONTINUE"));
    // The task shows the worker's last heartbeat and its progress details.
    let read = env.get(&format!("/api/tasks/{}", s.task_id)).await.json();
    let heartbeat = &read["heartbeat"];
    assert_eq!(heartbeat["status"], json!("RUNNING"), "{read}");
    assert_eq!(heartbeat["attempt"], json!(1));
    assert_eq!(heartbeat["details"], json!({"pct": 40}));
    assert_eq!(heartbeat["timeoutSeconds"], json!(30));
    assert!(
        heartbeat["lastHeartbeatTime"].as_i64().unwrap_or(0) > 0,
        "{read}"
    );

    let result = json!({
        "workflowInstanceId": s.workflow_id,
        "taskId": s.task_id.to_string(),
        "status": "COMPLETED",
        "outputData": {"charged": 12},
        "workerId": "w1",
        "logs": [{"log": "charging", "createdTime": 1_700_000_000_000_i64}],
    });
    let r = env.post("/api/tasks", &result).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(r.content_type.starts_with("text/plain"), "{r:?}");
    assert_eq!(r.text(), s.task_id.to_string());
    match next_command(&mut commands, "UpdateTask").await {
        Command::UpdateTask(done) => {
            assert_eq!(
                (done.task_id, done.run_id, done.status),
                (Some(s.task_id), Some(s.run_id), TaskUpdateStatus::Completed)
            );
            assert_eq!(done.output, json!({"charged": 12}));
            assert_eq!(done.worker_id.as_deref(), Some("w1"));
        }
        other => panic!("{other:?}"),
    }
    // The gateway does not end the attempt in the registry: the decider does, in the
    // commit that applies this result (e2e: `budget`, `operations`).

    // The log: lines of the result, then one posted alone.
    let r = env
        .send(
            Method::POST,
            &format!("/api/tasks/{}/log", s.task_id),
            Some(b"charged 12".to_vec()),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let logs = env
        .get(&format!("/api/tasks/{}/log", s.task_id))
        .await
        .json();
    assert_eq!(logs.as_array().map(Vec::len), Some(2), "{logs}");
    assert_eq!(logs[0]["log"], json!("charging"));
    assert_eq!(logs[0]["createdTime"], json!(1_700_000_000_000_i64));
    assert_eq!(logs[0]["taskId"], json!(s.task_id.to_string()));
    assert_eq!(logs[1]["log"], json!("charged 12"));

    // Once the decider recorded the result, another result is refused.
    sqlx::query("UPDATE tasks SET status = 'COMPLETED' WHERE task_id = $1")
        .bind(s.task_id)
        .execute(env.store.pg_pool().unwrap())
        .await
        .expect("complete the row");
    // The decider ends the attempt's registry row in the same commit.
    sqlx::query("UPDATE task_check SET status = 'COMPLETED' WHERE task_id = $1")
        .bind(s.task_id)
        .execute(env.store.pg_pool().unwrap())
        .await
        .expect("end the attempt");
    let late = env.post("/api/tasks", &result).await;
    late.error(StatusCode::CONFLICT);
    let read = env.get(&format!("/api/tasks/{}", s.task_id)).await;
    assert_eq!(read.status, StatusCode::OK, "{}", read.text());
    assert_eq!(read.json()["status"], json!("COMPLETED"));
    assert_eq!(read.json()["taskType"], json!(task_name));
    assert_eq!(read.json()["heartbeat"]["status"], json!("COMPLETED"));
    assert_eq!(read.json()["heartbeat"]["details"], json!({"pct": 40}));
    finish(env, &task_name).await;
}

#[tokio::test]
async fn failed_results_and_update_v2_reach_the_run_and_hand_out_the_next_task() {
    let env = TestEnv::new().await;
    let task_name = format!("ship_{}", random_suffix());
    let mut commands = env.consume_commands_applying_updates();
    let first = schedule(&env, &task_name).await;
    let second = schedule(&env, &task_name).await;

    let r = env
        .get(&format!("/api/tasks/poll/{task_name}?workerid=w2"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["taskId"], json!(first.task_id.to_string()));

    // update-v2: the result is applied and the next task of the type comes back.
    let result = json!({
        "workflowInstanceId": first.workflow_id,
        "taskId": first.task_id.to_string(),
        "status": "FAILED_WITH_TERMINAL_ERROR",
        "reasonForIncompletion": "no such address",
        "workerId": "w2",
    });
    let r = env.post("/api/tasks/update-v2", &result).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["taskId"], json!(second.task_id.to_string()));
    assert_eq!(r.json()["workerId"], json!("w2"));
    match next_command(&mut commands, "UpdateTask").await {
        Command::UpdateTask(failed) => {
            assert_eq!(failed.task_id, Some(first.task_id));
            assert_eq!(failed.status, TaskUpdateStatus::FailedWithTerminalError);
            assert_eq!(failed.reason.as_deref(), Some("no such address"));
        }
        other => panic!("{other:?}"),
    }

    // IN_PROGRESS is a heartbeat: nothing reaches the run, the attempt keeps running.
    let progress = json!({
        "taskId": second.task_id.to_string(),
        "status": "IN_PROGRESS",
        "outputData": {"percent": 40},
        "extendLease": true,
    });
    let lease = || async {
        sqlx::query_as::<_, (Option<chrono::DateTime<Utc>>, Option<Value>, String)>(
            "SELECT expires_at, details, status FROM task_check WHERE task_id = $1",
        )
        .bind(second.task_id)
        .fetch_one(env.store.pg_pool().unwrap())
        .await
        .expect("the attempt is registered")
    };
    let (before, _, _) = lease().await;
    let r = env.post("/api/tasks", &progress).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let (after, details, status) = lease().await;
    assert!(after > before, "the lease moved: {before:?} -> {after:?}");
    assert_eq!(details, Some(json!({"percent": 40})));
    assert_eq!(status, "RUNNING");
    let failed = json!({"taskId": second.task_id.to_string(), "status": "FAILED"});
    let r = env.post("/api/tasks/update-v2", &failed).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT, "{}", r.text());
    match next_command(&mut commands, "UpdateTask").await {
        Command::UpdateTask(f) => {
            assert_eq!(f.task_id, Some(second.task_id));
            assert_eq!(f.status, TaskUpdateStatus::Failed);
        }
        other => panic!("{other:?}"),
    }
    finish(env, &task_name).await;
}

#[tokio::test]
async fn in_progress_with_a_callback_gives_the_task_back_to_the_run() {
    let env = TestEnv::new().await;
    let task_name = format!("slow_{}", random_suffix());
    let mut commands = env.consume_commands_applying_updates();
    let s = schedule(&env, &task_name).await;
    let r = env
        .get(&format!("/api/tasks/poll/{task_name}?workerid=w1"))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    // A negative delay is refused, naming the field; nothing reaches the run.
    let mut result = json!({
        "workflowInstanceId": s.workflow_id,
        "taskId": s.task_id.to_string(),
        "status": "IN_PROGRESS",
        "outputData": {"percent": 10},
        "workerId": "w1",
        "callbackAfterSeconds": -1,
    });
    let bad = env.post("/api/tasks", &result).await;
    assert_eq!(
        bad.error(StatusCode::BAD_REQUEST)["path"],
        json!("callbackAfterSeconds")
    );

    // With `extendLease` it stays a heartbeat, callback or not.
    result["callbackAfterSeconds"] = json!(30);
    result["extendLease"] = json!(true);
    let r = env.post("/api/tasks", &result).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    // Without: the task goes back to the run, to be handed out again after 30 s.
    result["extendLease"] = json!(false);
    let r = env.post("/api/tasks", &result).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    // The poll's start report is ahead of the worker's own messages about the task in
    // the run's queue (a late start would undo the giving back).
    match next_command(&mut commands, "ActivityStarted").await {
        Command::ActivityStarted(started) => assert_eq!(started.task_id, s.task_id),
        other => panic!("{other:?}"),
    }
    match next_command(&mut commands, "UpdateTask").await {
        Command::UpdateTask(p) => {
            assert_eq!((p.task_id, p.run_id), (Some(s.task_id), Some(s.run_id)));
            assert_eq!(p.status, TaskUpdateStatus::Postponed);
            assert_eq!(p.callback_after_seconds, 30);
            assert_eq!(p.output, json!({"percent": 10}));
            assert_eq!(p.worker_id.as_deref(), Some("w1"));
        }
        other => panic!("{other:?}"),
    }
    finish(env, &task_name).await;
}

#[tokio::test]
async fn tasks_of_runs_that_moved_on_are_never_handed_out() {
    let env = TestEnv::new().await;
    let task_name = format!("stale_{}", random_suffix());
    let stale = schedule(&env, &task_name).await;
    let live = schedule(&env, &task_name).await;
    cancel_row(&env, stale.task_id).await;
    let r = env
        .get(&format!(
            "/api/tasks/poll/batch/{task_name}?count=2&timeout=0"
        ))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(task_ids(&r.json()), [json!(live.task_id.to_string())]);
    let none = env
        .get(&format!("/api/tasks/poll/batch/{task_name}?timeout=0"))
        .await;
    assert_eq!(none.json(), json!([]));
    finish(env, &task_name).await;
}

/// A batch poll takes every waiting message first, then reads, claims and reports the
/// lot together: each task still awaited is handed out, claimed for the poller and
/// reported started; the one whose run moved on is dropped, in whatever place it stood.
#[tokio::test]
async fn a_batch_poll_hands_out_the_awaited_tasks_of_all_it_took() {
    let env = TestEnv::new().await;
    let task_name = format!("lot_{}", random_suffix());
    let mut commands = env.consume_commands_applying_updates();
    let first = schedule(&env, &task_name).await;
    let stale = schedule(&env, &task_name).await;
    let third = schedule(&env, &task_name).await;
    let fourth = schedule(&env, &task_name).await;
    cancel_row(&env, stale.task_id).await;
    let r = env
        .get(&format!(
            "/api/tasks/poll/batch/{task_name}?workerid=w1&count=10&timeout=0"
        ))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let expected: Vec<Value> = [&first, &third, &fourth]
        .iter()
        .map(|s| json!(s.task_id.to_string()))
        .collect();
    assert_eq!(task_ids(&r.json()), expected);
    let mut started = Vec::new();
    for _ in 0..3 {
        match next_command(&mut commands, "ActivityStarted").await {
            Command::ActivityStarted(s) => {
                assert_eq!(s.worker_id.as_deref(), Some("w1"));
                started.push(s.task_id);
            }
            other => panic!("{other:?}"),
        }
    }
    started.sort();
    let mut handed = vec![first.task_id, third.task_id, fourth.task_id];
    handed.sort();
    assert_eq!(started, handed);
    for s in [&first, &third, &fourth] {
        let beat = env
            .post(&format!("/api/tasks/{}/heartbeat", s.task_id), &json!({}))
            .await;
        assert_eq!(beat.json()["action"], json!("CONTINUE"), "{}", beat.text());
    }
    let none = env
        .get(&format!("/api/tasks/poll/batch/{task_name}?timeout=0"))
        .await;
    assert_eq!(none.json(), json!([]));
    finish(env, &task_name).await;
}

#[tokio::test]
async fn a_poll_over_the_concurrency_limit_gives_the_task_back_and_answers_none() {
    let env = TestEnv::new().await;
    let task_name = format!("capped_{}", random_suffix());
    let first = schedule(&env, &task_name).await;
    let second = schedule(&env, &task_name).await;
    // The registry rows the decider writes for a TaskDef with concurrentExecLimit 1.
    for s in [&first, &second] {
        sqlx::query(
            "INSERT INTO task_check (task_id, attempt, workflow_id, run_id, task_name,
                 status, timeout_seconds, concurrency_limit)
             VALUES ($1, 1, $2, $3, $4, 'SCHEDULED', 30, 1)",
        )
        .bind(s.task_id)
        .bind(&s.workflow_id)
        .bind(s.run_id)
        .bind(&task_name)
        .execute(env.store.pg_pool().unwrap())
        .await
        .expect("insert the registry row");
    }
    // A batch of five gets the one the limit allows, at once.
    let r = env
        .get(&format!(
            "/api/tasks/poll/batch/{task_name}?workerid=w1&count=5&timeout=20000"
        ))
        .await;
    let ids = task_ids(&r.json());
    assert_eq!(ids, [json!(first.task_id.to_string())]);
    // The next is over the limit: back on its queue, and the poll has nothing for now,
    // without waiting out its timeout (a bound far above an answer at once).
    let none = env.get(&format!("/api/tasks/poll/{task_name}")).await;
    assert_eq!(none.status, StatusCode::NO_CONTENT, "{}", none.text());
    let long = tokio::time::timeout(
        std::time::Duration::from_secs(15),
        env.get(&format!("/api/tasks/poll/batch/{task_name}?timeout=30000")),
    )
    .await
    .expect("a deferred task ends a long poll");
    assert_eq!(long.json(), json!([]));
    let size = env
        .get(&format!("/api/tasks/queue/size?taskType={task_name}"))
        .await;
    assert_eq!(size.json(), json!(1), "still queued");
    let row: String = sqlx::query_scalar("SELECT status FROM task_check WHERE task_id = $1")
        .bind(second.task_id)
        .fetch_one(env.store.pg_pool().unwrap())
        .await
        .unwrap();
    assert_eq!(row, "SCHEDULED");
    // The first ends (the decider's commit): the next poll gets the second.
    sqlx::query("UPDATE task_check SET status = 'COMPLETED' WHERE task_id = $1")
        .bind(first.task_id)
        .execute(env.store.pg_pool().unwrap())
        .await
        .unwrap();
    let next = env.get(&format!("/api/tasks/poll/{task_name}")).await;
    assert_eq!(next.status, StatusCode::OK, "{}", next.text());
    assert_eq!(next.json()["taskId"], json!(second.task_id.to_string()));
    finish(env, &task_name).await;
}

#[tokio::test]
async fn bad_task_requests_are_refused_naming_the_field() {
    let env = TestEnv::new().await;
    let task_name = format!("bad_{}", random_suffix());
    let s = schedule(&env, &task_name).await;
    let id = s.task_id.to_string();
    let cases = [
        (
            json!({"status": "COMPLETED"}),
            StatusCode::BAD_REQUEST,
            Some("taskId"),
        ),
        (
            json!({"taskId": id}),
            StatusCode::BAD_REQUEST,
            Some("status"),
        ),
        (
            json!({"taskId": id, "status": "DONE"}),
            StatusCode::BAD_REQUEST,
            Some("status"),
        ),
        (
            json!({"taskId": id, "status": "COMPLETED", "outputData": [1]}),
            StatusCode::BAD_REQUEST,
            Some("outputData"),
        ),
        (
            json!({"taskId": id, "status": "COMPLETED", "workflowInstanceId": "other"}),
            StatusCode::BAD_REQUEST,
            Some("workflowInstanceId"),
        ),
        (
            json!({"taskId": Uuid::now_v7().to_string(), "status": "COMPLETED"}),
            StatusCode::NOT_FOUND,
            None,
        ),
        (
            json!({"taskId": "nope", "status": "COMPLETED"}),
            StatusCode::NOT_FOUND,
            None,
        ),
        (json!([1, 2]), StatusCode::BAD_REQUEST, None),
    ];
    for (body, status, path) in cases {
        let r = env.post("/api/tasks", &body).await;
        let err = r.error(status);
        assert_eq!(err["path"].as_str(), path, "{body}: {err}");
    }
    let r = env
        .send(Method::POST, "/api/tasks", Some(b"{not json".to_vec()))
        .await;
    r.error(StatusCode::BAD_REQUEST);
    for (uri, path) in [
        (
            format!("/api/tasks/poll/batch/{task_name}?count=0"),
            "count",
        ),
        (format!("/api/tasks/poll/batch/{task_name}?count=x"), ""),
        (
            format!("/api/tasks/poll/batch/{task_name}?timeout=-1"),
            "timeout",
        ),
        (
            format!("/api/tasks/poll/batch/{task_name}?timeout=999999"),
            "timeout",
        ),
        (format!("/api/tasks/poll/{}", "x".repeat(300)), "taskType"),
    ] {
        let err = env.get(&uri).await.error(StatusCode::BAD_REQUEST);
        if !path.is_empty() {
            assert_eq!(err["path"], json!(path), "{uri}: {err}");
        }
    }
    env.get(&format!("/api/tasks/{}", Uuid::now_v7()))
        .await
        .error(StatusCode::NOT_FOUND);
    env.get("/api/tasks/nope/log")
        .await
        .error(StatusCode::NOT_FOUND);
    env.send(
        Method::POST,
        &format!("/api/tasks/{id}/log"),
        Some(Vec::new()),
    )
    .await
    .error(StatusCode::BAD_REQUEST);
    // Nothing was taken from the queue by the refused requests.
    let r = env.get(&format!("/api/tasks/poll/{task_name}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    finish(env, &task_name).await;
}

#[tokio::test]
async fn a_pending_activity_completed_by_ref_reaches_the_run_as_a_result() {
    let env = TestEnv::new().await;
    let task_name = format!("byref_{}", random_suffix());
    let mut commands = env.consume_commands_applying_updates();
    let done = schedule(&env, &task_name).await;
    let r = env
        .post(
            &format!(
                "/api/tasks/{}/charge_ref/COMPLETED?workerid=ops",
                done.workflow_id
            ),
            &json!({"approved": true}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.text(), done.task_id.to_string());
    match next_command(&mut commands, "UpdateTask").await {
        Command::UpdateTask(c) => {
            assert_eq!(c.task_id, Some(done.task_id));
            assert_eq!(c.output, json!({"approved": true}));
            assert_eq!(c.worker_id.as_deref(), Some("ops"));
        }
        other => panic!("{other:?}"),
    }
    let failed = schedule(&env, &task_name).await;
    let r = env
        .post(
            &format!("/api/tasks/{}/charge_ref/FAILED", failed.workflow_id),
            &json!({}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    match next_command(&mut commands, "UpdateTask").await {
        Command::UpdateTask(f) => assert_eq!(f.task_id, Some(failed.task_id)),
        other => panic!("{other:?}"),
    }
    let bad = env
        .post(
            &format!("/api/tasks/{}/charge_ref/DONE", failed.workflow_id),
            &json!({}),
        )
        .await;
    bad.error(StatusCode::BAD_REQUEST);
    finish(env, &task_name).await;
}

#[tokio::test]
async fn a_long_poll_answers_at_once_when_the_gateway_shuts_down() {
    let mut env = TestEnv::new().await;
    let task_name = format!("idle_{}", random_suffix());
    let stop = tokio_util::sync::CancellationToken::new();
    let state = weft_gateway::AppState::new(
        env.store.clone(),
        env.bus.clone(),
        weft::Config::default().max_body_bytes,
        weft::admin::Metrics::new(),
    )
    .with_shutdown(stop.clone());
    env.router = weft_gateway::router(state);
    let uri = format!("/api/tasks/poll/batch/{task_name}?timeout=30000");
    let poll = env.get(&uri);
    let shut_down = async {
        // The poll is waiting on an empty queue by then (or starts after: same answer).
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        stop.cancel();
    };
    // A bound far below the poll's own 30 s: the shutdown, not the timeout, ended it.
    let (r, ()) = tokio::time::timeout(std::time::Duration::from_secs(15), async {
        tokio::join!(poll, shut_down)
    })
    .await
    .expect("the long poll ignored the shutdown");
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json(), json!([]));
    finish(env, &task_name).await;
}

#[tokio::test]
async fn queue_sizes_count_the_tasks_waiting_for_a_worker() {
    let env = crate::utils::TestEnv::new().await;
    env.bus.declare_activity_queue("sized").await.unwrap();
    let names = env.bus.names().clone();
    for i in 0..3 {
        let message = weft::messages::ActivityMessage::ActivityTask(weft::messages::ActivityTask {
            task_id: uuid::Uuid::new_v4(),
            workflow_id: format!("wf-{i}"),
            run_id: uuid::Uuid::now_v7(),
            task_ref: "s".into(),
            task_name: "sized".into(),
            task_type: "SIMPLE".into(),
            attempt: 1,
            input: serde_json::json!({}),
            reply_to: weft::topology::Names::shard_key(0),
            scheduled_at: chrono::Utc::now(),
            response_timeout_seconds: 0,
            eager: false,
            results_together: false,
        });
        let envelope = weft::Envelope::new(&format!("wf-{i}"), None, &message).unwrap();
        env.bus
            .publish(&names.activity_exchange(), "sized", &envelope)
            .await
            .unwrap();
    }
    env.put(
        "/api/metadata/taskdefs",
        &serde_json::json!({"name": "sized", "ownerEmail": "t@weft.dev"}),
    )
    .await;
    let sizes = env
        .get("/api/tasks/queue/sizes?taskType=sized&taskType=never_used")
        .await;
    assert_eq!(sizes.status, axum::http::StatusCode::OK, "{}", sizes.text());
    assert_eq!(
        sizes.json(),
        serde_json::json!({"sized": 3, "never_used": 0})
    );
    assert_eq!(
        env.get("/api/tasks/queue/size?taskType=sized").await.json(),
        3
    );
    let all = env.get("/api/tasks/queue/all").await.json();
    assert_eq!(all["sized"], 3, "{all}");
    assert_eq!(all["HTTP"], 0, "{all}");
    let body = env
        .get("/api/tasks/queue/size")
        .await
        .error(axum::http::StatusCode::BAD_REQUEST);
    assert_eq!(body["path"], "taskType", "{body}");
    let queue = names.activity_queue("sized");
    let _ = env.bus.teardown(&[queue]).await;
    env.finish().await;
}

/// The verdict is pushed (docs/task-updates.md): a result's answer is the verdict the
/// decider replies to the gateway's `WatchVerdict` with — here one that no store row
/// holds, so reading the store could never have given it (it would wait 10 s and answer
/// 202).
#[tokio::test]
async fn a_results_answer_is_the_verdict_the_decider_pushes() {
    let env = TestEnv::new().await;
    let task_name = format!("pushed_{}", random_suffix());
    let mut commands = env.consume_commands_pushing(409, "pushed, never stored");
    let s = schedule(&env, &task_name).await;
    let r = env
        .get(&format!(
            "/api/tasks/poll/batch/{task_name}?workerid=w1&count=1&timeout=5000"
        ))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let result = json!({
        "workflowInstanceId": s.workflow_id,
        "taskId": s.task_id.to_string(),
        "status": "COMPLETED",
        "outputData": {"charged": 12},
        "workerId": "w1",
    });
    let answer = env.post("/api/tasks", &result).await;
    let body = answer.error(StatusCode::CONFLICT);
    assert_eq!(body["message"], json!("pushed, never stored"), "{body}");
    // The result itself went to the run's shard, before the watch.
    let Command::UpdateTask(update) = next_command(&mut commands, "UpdateTask").await else {
        panic!("an UpdateTask");
    };
    assert_eq!(update.task_id, Some(s.task_id));
    finish(env, &task_name).await;
}
