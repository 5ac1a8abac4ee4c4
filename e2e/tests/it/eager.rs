//! Eager dispatch over real processes (docs/eager-dispatch.md): the worker that sends a
//! result is sent the run's next activity already claimed for it, on its own queue; and
//! when that worker dies with the task, the task moves on to its shared queue, where
//! another worker takes it over.

use serde_json::json;
use weft_e2e::{poll_until, EnvOptions, Service, Suite, TestEnv};

use crate::heartbeats::{slow_worker, TASK};
use crate::RUN_TIMEOUT;

/// The registry row of the workflow's task `task_ref`: its status and worker.
async fn attempt(suite: &Suite, workflow_id: &str, task_ref: &str) -> Option<(String, String)> {
    sqlx::query_as(
        "SELECT status, coalesce(worker_id, '') FROM task_check
         WHERE workflow_id = $1 AND task_ref = $2 ORDER BY attempt DESC LIMIT 1",
    )
    .bind(workflow_id)
    .bind(task_ref)
    .fetch_optional(suite.env().pool())
    .await
    .expect("read task_check")
}

/// Activities the suite's decider dispatched eagerly (`weft_decider_eager_dispatches`).
async fn eager_dispatches(suite: &Suite) -> u64 {
    let addr = suite.proc(suite.first(Service::Decider)).addr;
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .and_then(|r| r.error_for_status())
        .expect("the decider's /metrics")
        .text()
        .await
        .expect("the decider's /metrics");
    text.lines()
        .find_map(|l| l.strip_prefix("weft_decider_eager_dispatches_total "))
        .map_or(0, |v| v.trim().parse().expect("a counter"))
}

/// A definition `name` of two [`TASK`] activities in sequence, `first` then `second`,
/// working `first_ms` and `second_ms`.
fn two_tasks(name: &str, first_ms: u64, second_ms: u64) -> serde_json::Value {
    json!({"name": name, "version": 1, "tasks": [
        {"name": TASK, "taskReferenceName": "first", "type": "SIMPLE",
         "inputParameters": {"ms": first_ms}},
        {"name": TASK, "taskReferenceName": "second", "type": "SIMPLE",
         "inputParameters": {"ms": second_ms}}]})
}

/// The core services on a namespace of their own (its queue of [`TASK`] removed with
/// it), with `definition` registered.
async fn suite_with(definition: serde_json::Value) -> Suite {
    let mut env = TestEnv::create(EnvOptions::default()).await.unwrap();
    env.activity_queues.push(env.names().activity_queue(TASK));
    let suite = Suite::start_with(env, &Service::CORE).await.unwrap();
    suite.client().register(&definition).await.unwrap();
    suite
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_sent_eagerly_to_a_worker_that_dies_moves_on_to_another_worker() {
    // No task definition: the heartbeat timeout is the default hour, so nothing but
    // the eager queue's expiry can bring the second task to another worker in time.
    let mut suite = suite_with(two_tasks("eager_wf", 0, 3000)).await;
    let client = suite.client();

    let mut first = slow_worker(&suite, "worker-a");
    let id = client.start("eager_wf", json!({})).await.unwrap();
    // The second task went to worker-a with its first result, claimed for it at once.
    poll_until(
        RUN_TIMEOUT,
        std::time::Duration::from_millis(20),
        || "the second task was never dispatched to worker-a".into(),
        || async {
            Ok(attempt(&suite, &id, "second")
                .await
                .filter(|(status, worker)| status == "RUNNING" && worker == "worker-a"))
        },
    )
    .await
    .unwrap();
    assert_eq!(
        eager_dispatches(&suite).await,
        1,
        "the second task was not claimed"
    );
    let wf = client.get(&id).await.unwrap();
    let second = &wf["tasks"][1];
    assert_eq!(second["status"], json!("IN_PROGRESS"), "{wf}");
    assert_eq!(second["workerId"], json!("worker-a"), "{wf}");
    let history = client.history(&id).await.unwrap();
    assert!(
        history.iter().any(|e| e.kind == "TaskStarted"),
        "the eager dispatch is recorded as the task's start: {history:?}"
    );

    // worker-a dies in the middle of it; worker-b gets it from the task's shared queue
    // once it has waited out the eager queue, takes the attempt over and completes it.
    first.kill().await.unwrap();
    let mut second_worker = slow_worker(&suite, "worker-b");
    let wf = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(wf["output"]["worker"], json!("worker-b"), "{wf}");
    assert_eq!(wf["tasks"][1]["workerId"], json!("worker-b"), "{wf}");
    assert_eq!(
        wf["tasks"][1]["retryCount"],
        json!(0),
        "one attempt, taken over: {wf}"
    );
    assert_eq!(
        attempt(&suite, &id, "second").await,
        Some(("COMPLETED".to_owned(), "worker-b".to_owned()))
    );

    second_worker
        .terminate(std::time::Duration::from_secs(20))
        .await
        .unwrap();
    suite.stop_all().await.unwrap();
}

/// While `refused`, the database refuses every new history event, so every decider
/// commit fails (and its batch comes back).
async fn refuse_history_events(pool: &sqlx::PgPool, refused: bool) {
    let sql = match refused {
        true => {
            "ALTER TABLE history_events ADD CONSTRAINT e2e_refuse_events CHECK (false) NOT VALID"
        }
        false => "ALTER TABLE history_events DROP CONSTRAINT e2e_refuse_events",
    };
    sqlx::query(sql).execute(pool).await.unwrap();
}

/// A batch whose commit fails is decided again when its commands come back (here: the
/// database refuses every new history event for a while). Its eager dispatch is counted
/// once, by the commit that makes it, not once per decision: the budget test reads this
/// counter as what the run's path cost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eager_dispatch_decided_again_after_a_failed_commit_is_counted_once() {
    let mut suite = suite_with(two_tasks("eager_refused", 500, 0)).await;
    let client = suite.client();
    let mut worker = slow_worker(&suite, "worker-a");
    let id = client.start("eager_refused", json!({})).await.unwrap();
    poll_until(
        RUN_TIMEOUT,
        std::time::Duration::from_millis(10),
        || "the first task was never claimed".into(),
        || async {
            Ok(attempt(&suite, &id, "first")
                .await
                .filter(|(status, _)| status == "RUNNING"))
        },
    )
    .await
    .unwrap();

    // The first result's batch (and any other) fails to commit, and is requeued.
    let pool = suite.env().pool().clone();
    refuse_history_events(&pool, true).await;
    let log = suite.proc(suite.first(Service::Decider)).log_path.clone();
    let failures = |log: &std::path::Path| {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .matches("command batch failed")
            .count()
    };
    // The run's batches are retried every half second: by the third failure the first
    // task's result (half a second after its start) has been refused too.
    poll_until(
        RUN_TIMEOUT,
        std::time::Duration::from_millis(50),
        || "the decider's commits did not fail three times".into(),
        || async { Ok((failures(&log) >= 3).then_some(())) },
    )
    .await
    .unwrap();
    refuse_history_events(&pool, false).await;

    let wf = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(wf["tasks"][1]["workerId"], json!("worker-a"), "{wf}");
    assert_eq!(
        eager_dispatches(&suite).await,
        1,
        "one eager dispatch committed, however often it was decided"
    );
    worker
        .terminate(std::time::Duration::from_secs(20))
        .await
        .unwrap();
    suite.stop_all().await.unwrap();
}

/// A run that ends leaves the offer of its last result unused; the next run's first
/// activity takes it (docs/eager-dispatch.md, "Spare offers"): it goes to that worker
/// already claimed for it, IN_PROGRESS from its dispatch, without a claim round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offer_a_finished_run_left_unused_takes_the_next_runs_first_activity() {
    let mut suite = suite_with(json!({"name": "spare_wf", "version": 1, "tasks": [
        {"name": TASK, "taskReferenceName": "only", "type": "SIMPLE",
         "inputParameters": {"ms": 0}}]}))
    .await;
    let client = suite.client();
    let mut worker = slow_worker(&suite, "worker-a");
    let first = client.start("spare_wf", json!({})).await.unwrap();
    client
        .wait_for_status(&first, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(
        eager_dispatches(&suite).await,
        0,
        "nobody had offered anything before the first run: its task was claimed"
    );

    // An offer is kept for two seconds: a slow box may miss it once, not every time.
    let mut taken = None;
    for _ in 0..5 {
        let id = client.start("spare_wf", json!({})).await.unwrap();
        client
            .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
            .await
            .unwrap();
        if eager_dispatches(&suite).await > 0 {
            taken = Some(id);
            break;
        }
    }
    let id = taken.expect("no run's first activity took the offer left by the run before");
    assert_eq!(
        attempt(&suite, &id, "only").await,
        Some(("COMPLETED".to_owned(), "worker-a".to_owned()))
    );
    let history = client.history(&id).await.unwrap();
    let kinds: Vec<&str> = history.iter().map(|e| e.kind.as_str()).collect();
    let scheduled = kinds.iter().position(|k| *k == "TaskScheduled").unwrap();
    assert_eq!(
        kinds.get(scheduled + 1),
        Some(&"TaskStarted"),
        "started by its dispatch, in the commit that scheduled it: {kinds:?}"
    );

    // A worker that stops withdraws its offers from every shard: a run started right
    // after finds none to take (its task waits in the shared queue for a worker, instead
    // of in the queue of one that is gone).
    let eager_before = eager_dispatches(&suite).await;
    let last = client.start("spare_wf", json!({})).await.unwrap();
    client
        .wait_for_status(&last, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    worker
        .terminate(std::time::Duration::from_secs(20))
        .await
        .unwrap();
    let orphan = client.start("spare_wf", json!({})).await.unwrap();
    poll_until(
        RUN_TIMEOUT,
        std::time::Duration::from_millis(20),
        || "the run after the worker stopped never scheduled its task".into(),
        || async { Ok(attempt(&suite, &orphan, "only").await) },
    )
    .await
    .map(|(status, worker)| {
        assert_eq!(
            (status.as_str(), worker.as_str()),
            ("SCHEDULED", ""),
            "sent to a worker that withdrew"
        )
    })
    .unwrap();
    assert!(eager_dispatches(&suite).await <= eager_before + 1);
    suite.stop_all().await.unwrap();
}

/// An eager task travels to its worker while the commit that schedules it runs, not
/// after it (docs/eager-dispatch.md, "Dispatch while committing"): with the decider's
/// commit held back by a lock on `history_events`, the worker already runs the second
/// task; once the lock goes, the commit lands and the run completes with that attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eager_task_reaches_its_worker_while_its_commit_is_held_back() {
    let mut suite = suite_with(two_tasks("eager_early", 1500, 0)).await;
    let client = suite.client();
    let mut worker = slow_worker(&suite, "worker-a");
    let id = client.start("eager_early", json!({})).await.unwrap();
    // IN_PROGRESS in the run: the worker's start report (sent for an activity running
    // over 20 ms) is committed, so the next commit is the one applying the result.
    poll_until(
        RUN_TIMEOUT,
        std::time::Duration::from_millis(10),
        || "the first task never showed IN_PROGRESS".into(),
        || async {
            let wf = client.get(&id).await?;
            Ok((wf["tasks"][0]["status"] == "IN_PROGRESS").then_some(()))
        },
    )
    .await
    .unwrap();

    // Every decider commit writes history events: this lock holds them all back.
    let mut lock = suite.env().pool().begin().await.unwrap();
    sqlx::query("LOCK TABLE history_events IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    assert_eq!(
        attempt(&suite, &id, "second").await,
        None,
        "the first task's result was committed before the lock (it runs 1.5 s)"
    );
    let log = suite.log_dir().join("worker-a.log");
    let reached = |log: &std::path::Path, id: &str| {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .any(|l| {
                l.contains("activity started") && l.contains(id) && l.contains("task_ref=second")
            })
    };
    poll_until(
        RUN_TIMEOUT,
        std::time::Duration::from_millis(20),
        || "the second task did not reach the worker while its commit was held back".into(),
        || async { Ok(reached(&log, &id).then_some(())) },
    )
    .await
    .unwrap();
    assert_eq!(
        attempt(&suite, &id, "second").await,
        None,
        "the second task's commit landed under the lock"
    );
    lock.rollback().await.unwrap();

    let wf = client
        .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(wf["tasks"][1]["workerId"], json!("worker-a"), "{wf}");
    assert_eq!(
        attempt(&suite, &id, "second").await,
        Some(("COMPLETED".to_owned(), "worker-a".to_owned()))
    );
    assert_eq!(eager_dispatches(&suite).await, 1);
    worker
        .terminate(std::time::Duration::from_secs(20))
        .await
        .unwrap();
    suite.stop_all().await.unwrap();
}

/// The task ids of the activities the worker logging to `log` started for `workflow_id`.
fn tasks_started(log: &std::path::Path, workflow_id: &str) -> Vec<String> {
    let field = |line: &str, name: &str| {
        line.split([' ', '{', '}', ':'])
            .find_map(|part| part.strip_prefix(name))
            .map(str::to_owned)
    };
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("activity started"))
        .filter(|l| field(l, "workflow_id=").as_deref() == Some(workflow_id))
        .filter_map(|l| field(l, "task_id="))
        .collect()
}

/// A start whose commit fails is applied again as the same run: the run's id is the start
/// message's, so its tasks have the same ids. The activity that took a spare offer and
/// travelled to its worker while the failed commit ran (docs/eager-dispatch.md, "Dispatch
/// while committing") is then an attempt the run has, run at least once as any activity
/// — never a task of a run that was not made, which a worker would run with the
/// workflow's id and whose result would be refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_applied_again_after_a_failed_commit_sends_only_tasks_of_its_run() {
    let mut suite = suite_with(json!({"name": "start_again", "version": 1, "tasks": [
        {"name": TASK, "taskReferenceName": "only", "type": "SIMPLE",
         "inputParameters": {"ms": 0}}]}))
    .await;
    let client = suite.client();
    let mut worker = slow_worker(&suite, "worker-a");
    let pool = suite.env().pool().clone();
    let log = suite.log_dir().join("worker-a.log");

    // An offer is kept for two seconds: a slow box may miss it once, not every time.
    let mut sent_early = None;
    for _ in 0..5 {
        // A run that ends leaves its worker's offer for the next run's first activity.
        let before = client.start("start_again", json!({})).await.unwrap();
        client
            .wait_for_status(&before, &["COMPLETED"], RUN_TIMEOUT)
            .await
            .unwrap();
        refuse_history_events(&pool, true).await;
        let id = client.start("start_again", json!({})).await.unwrap();
        let reached = poll_until(
            std::time::Duration::from_secs(3),
            std::time::Duration::from_millis(20),
            || "no activity of the start reached the worker".into(),
            || async { Ok((!tasks_started(&log, &id).is_empty()).then_some(())) },
        )
        .await;
        refuse_history_events(&pool, false).await;
        client
            .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
            .await
            .unwrap();
        if reached.is_ok() {
            sent_early = Some(id);
            break;
        }
    }
    let id = sent_early.expect("no start's first activity reached the worker before its commit");

    let wf = client.get(&id).await.unwrap();
    let run_tasks: Vec<&str> = wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["taskId"].as_str())
        .collect();
    let started = tasks_started(&log, &id);
    assert!(
        started.iter().all(|t| run_tasks.contains(&t.as_str())),
        "the worker ran tasks {started:?} of the workflow, whose run has {run_tasks:?}"
    );
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM runs WHERE workflow_id = $1")
        .bind(&id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(runs, 1, "one run for the workflow");
    worker
        .terminate(std::time::Duration::from_secs(20))
        .await
        .unwrap();
    suite.stop_all().await.unwrap();
}

/// A start published again after its run ended (the outbox sweeper re-publishing a start
/// whose first copy was applied) is a copy the shard recognises: read, not trusted, and
/// ignored — its run's first activity does not run again, even with a spare offer at hand
/// that a new run's first activity would take (docs/decider.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_published_again_after_its_run_ended_runs_no_activity_again() {
    let definition = json!({"name": "start_copy", "version": 1, "tasks": [
        {"name": TASK, "taskReferenceName": "only", "type": "SIMPLE",
         "inputParameters": {"ms": 0}}]});
    let mut suite = suite_with(definition.clone()).await;
    let client = suite.client();
    let mut worker = slow_worker(&suite, "worker-a");
    let log = suite.log_dir().join("worker-a.log");
    let names = suite.env().names();
    let bus = weft_e2e::amqp::RawBus::connect(&suite.env().amqp_url)
        .await
        .unwrap();

    // Several times: the copy meets the spare offer its run's end left only while that
    // offer is fresh (two seconds).
    for _ in 0..3 {
        let workflow_id = weft::ids::new_id().to_string();
        let key = names.command_key_for(&workflow_id);
        let body = weft_e2e::starts::start_body(&definition, &workflow_id, json!({}));
        bus.publish(&names.commands_exchange(), &key, &body)
            .await
            .unwrap();
        // Applied again once its run ended (a start on the same shard behind the copy
        // has run).
        weft_e2e::starts::publish_again_after_end(
            &bus,
            client,
            &names,
            (&workflow_id, &body),
            (&definition, json!({})),
            RUN_TIMEOUT,
        )
        .await
        .unwrap();
        let started = tasks_started(&log, &workflow_id);
        assert_eq!(
            started.len(),
            1,
            "the run's one activity ran {} times: {started:?}",
            started.len()
        );
    }
    bus.close().await;
    worker
        .terminate(std::time::Duration::from_secs(20))
        .await
        .unwrap();
    suite.stop_all().await.unwrap();
}
