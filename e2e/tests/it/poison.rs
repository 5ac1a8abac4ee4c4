//! Invariant 7 on the bus: a poison message is dead-lettered and never blocks its queue.

use std::time::Duration;

use weft::ids::shard_of;
use weft::topology::Names;
use weft_e2e::amqp::{RawBus, RawMessage};
use weft_e2e::{greet, Backend, EnvOptions, Suite, TestEnv};

use crate::assert_all_completed;

const DEAD_REASON: &str = "x-weft-dead-reason";

crate::on_both_backends!(a_command_of_a_run_that_cannot_be_read_is_set_aside_and_the_run_fails);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_command_is_dead_lettered_and_its_shard_keeps_going() {
    const SHARDS: u16 = 4;
    let options = EnvOptions {
        shards: SHARDS,
        ..EnvOptions::default()
    };
    let suite = Suite::start(TestEnv::create(options).await.unwrap())
        .await
        .unwrap();
    suite.client().register(&greet::definition()).await.unwrap();
    let names = suite.env().names();
    let bus = RawBus::connect(&suite.env().amqp_url).await.unwrap();

    let garbage: [&[u8]; 2] = [
        b"\x00\xff\xfe this is not JSON \x80",
        br#"{"hello": "a JSON object that is no envelope"}"#,
    ];
    for body in garbage {
        bus.publish(&names.commands_exchange(), &Names::shard_key(0), body)
            .await
            .unwrap();
    }

    // Start runs until one lands on shard 0, behind the garbage; all must complete.
    let mut runs = Vec::new();
    for i in 0..100 {
        let first = format!("Poison{i}");
        let id = suite
            .client()
            .start("greet", greet::input(&first, 1))
            .await
            .unwrap();
        let on_zero = shard_of(&id, SHARDS) == 0;
        runs.push((id, first, 1));
        if on_zero {
            break;
        }
    }
    let last = &runs.last().unwrap().0;
    assert_eq!(shard_of(last, SHARDS), 0, "no run landed on shard 0");
    assert_all_completed(&suite, &runs).await;

    let dlq = Names::dlq(&names.command_queue(0));
    let dead = take_messages(&bus, &dlq, garbage.len()).await;
    for body in garbage {
        let msg = dead
            .iter()
            .find(|m| m.body == body)
            .unwrap_or_else(|| panic!("{body:?} is not in {dlq}; found {dead:?}"));
        let reason = msg.headers.get(DEAD_REASON).map(String::as_str);
        assert!(
            reason.is_some_and(|r| !r.is_empty()),
            "no {DEAD_REASON} header on {body:?}: {:?}",
            msg.headers
        );
    }
    bus.close().await;
}

/// Takes messages from `queue` until `want` are in hand (bounded).
async fn take_messages(bus: &RawBus, queue: &str, want: usize) -> Vec<RawMessage> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut found = Vec::new();
    let mut last_error = String::new();
    while found.len() < want {
        match bus.get(queue).await {
            Ok(Some(msg)) => {
                found.push(msg);
                continue;
            }
            Ok(None) => {}
            Err(e) => last_error = format!("{e:#}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {want} messages in {queue} after 60 s (last error: {last_error}): {found:?}",
            found.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    found
}

/// A start published twice (the outbox sweeper re-publishing a start whose first copy
/// was slow to be confirmed, say) makes one run: the second copy meets the run the first
/// one created and is ignored, whether it comes in the same batch or after the run ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_published_twice_makes_one_run() {
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    suite.client().register(&greet::definition()).await.unwrap();
    let names = suite.env().names();
    let bus = RawBus::connect(&suite.env().amqp_url).await.unwrap();
    let greet_def = greet::definition();
    let workflow_id = weft::ids::new_id().to_string();
    let key = names.command_key_for(&workflow_id);
    let body = weft_e2e::starts::start_body(&greet_def, &workflow_id, greet::input("Twice", 1));
    for _ in 0..2 {
        bus.publish(&names.commands_exchange(), &key, &body)
            .await
            .unwrap();
    }
    // Once more after the run ended, then a start of another workflow on the same shard:
    // once that one has run, the copy before it has been applied.
    weft_e2e::starts::publish_again_after_end(
        &bus,
        suite.client(),
        &names,
        (&workflow_id, &body),
        (&greet_def, greet::input("Twice", 1)),
        crate::RUN_TIMEOUT,
    )
    .await
    .unwrap();
    let client = suite.client();
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM runs WHERE workflow_id = $1")
        .bind(&workflow_id)
        .fetch_one(suite.env().pool())
        .await
        .unwrap();
    assert_eq!(runs, 1, "one run for the workflow");
    let history = client.history(&workflow_id).await.unwrap();
    let starts = history
        .iter()
        .filter(|e| e.kind == "WorkflowStarted")
        .count();
    assert_eq!(starts, 1, "{history:?}");
    bus.close().await;
}

/// A command that fails the same way on every attempt — here a worker's result whose
/// output PostgreSQL refuses to store (`\u0000` in a JSON string) — is retried a bounded
/// number of times, then set aside: dead-lettered with the reason in its headers,
/// counted, and its run ends FAILED saying why, while the shard's other runs go on
/// (docs/decider.md, "Poison commands"). Before, the batch was requeued forever and the
/// run stayed RUNNING with nothing to show for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_failing_every_time_is_set_aside_and_its_run_fails_visibly() {
    use weft::messages::{ActivityCompleted, ActivityMessage, ActivityTask, Command};
    use weft_e2e::Service;

    let mut env = TestEnv::create(EnvOptions {
        shards: 1,
        ..EnvOptions::default()
    })
    .await
    .unwrap();
    let names = env.names();
    let first_queue = names.activity_queue(greet::TASKS[0]);
    env.activity_queues.push(first_queue.clone());
    let bus = weft::bus::Bus::connect(
        &env.amqp_url,
        names.clone(),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    bus.declare_activity_queue(greet::TASKS[0]).await.unwrap();
    // No worker: the test answers the first tasks itself.
    let suite = Suite::start_with(env, &Service::CORE).await.unwrap();
    let client = suite.client();
    client.register(&greet::definition()).await.unwrap();
    let take_task = || async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(taken) = bus.get(&first_queue).await.unwrap() {
                let ActivityMessage::ActivityTask(task) =
                    taken.delivery.envelope.decode::<ActivityMessage>().unwrap()
                else {
                    panic!("not a single task");
                };
                taken.ack().await.unwrap();
                return task;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no task on {first_queue}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let answer = |task: &ActivityTask, name: &str| {
        let command = Command::ActivityCompleted(ActivityCompleted {
            task_id: task.task_id,
            run_id: task.run_id,
            attempt: task.attempt,
            output: serde_json::json!({ "name": name }),
            worker_id: Some("hand".into()),
            started_at: None,
            eager: None,
        });
        weft::Envelope::new(&task.workflow_id, Some(task.run_id), &command).unwrap()
    };

    let doomed = client.start("greet", greet::input("Nul", 1)).await.unwrap();
    let task = take_task().await;
    let poison = answer(&task, "a\u{0}b");
    bus.publish(&names.commands_exchange(), &task.reply_to, &poison)
        .await
        .unwrap();
    // Another run of the same (only) shard, answered properly, goes on meanwhile.
    let other = client
        .start("greet", greet::input("Fine", 1))
        .await
        .unwrap();
    let task = take_task().await;
    assert_eq!(task.workflow_id, other);
    bus.publish(
        &names.commands_exchange(),
        &task.reply_to,
        &answer(&task, "Fine"),
    )
    .await
    .unwrap();

    let failed = crate::ended(&suite, &doomed, "FAILED").await;
    let reason = failed["reasonForIncompletion"].as_str().unwrap_or_default();
    assert!(
        reason.contains("ActivityCompleted") && reason.contains("set aside"),
        "the run says why it failed: {failed:#}"
    );
    let moved_on = poll_until_tasks(&suite, &other, 2).await;
    assert_eq!(moved_on["tasks"][0]["status"], "COMPLETED", "{moved_on:#}");

    let raw = RawBus::connect(&suite.env().amqp_url).await.unwrap();
    let dlq = Names::dlq(&names.command_queue(0));
    let dead = take_messages(&raw, &dlq, 1).await;
    let why = dead[0]
        .headers
        .get(DEAD_REASON)
        .cloned()
        .unwrap_or_default();
    assert!(why.contains("set aside"), "{dead:?}");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&dead[0].body).unwrap()["id"],
        serde_json::json!(poison.id),
        "the dead-lettered message is the result that failed"
    );
    let texts = suite.metrics_of(Service::Decider).await.unwrap();
    let set_aside: u64 = texts
        .iter()
        .map(|t| weft_e2e::metrics::counter(t, "weft_decider_commands_set_aside"))
        .sum();
    assert_eq!(set_aside, 1, "one command set aside");
    raw.close().await;
}

/// Run `id` once it has at least `n` tasks.
async fn poll_until_tasks(suite: &Suite, id: &str, n: usize) -> serde_json::Value {
    weft_e2e::poll_until(
        Duration::from_secs(60),
        Duration::from_millis(100),
        || format!("{id} has {n} tasks"),
        || async {
            let run = suite.client().get(id).await?;
            let count = run["tasks"].as_array().map_or(0, Vec::len);
            Ok((count >= n).then_some(run))
        },
    )
    .await
    .unwrap()
}

/// The last resort of a command set aside: a run whose row and history disagree (its
/// version moved by hand, say, or by a bug) cannot be read, so no event can end it; its
/// row is marked FAILED with the reason, so that the run does not stay RUNNING with its
/// commands failing unseen (docs/decider.md, "Poison commands").
async fn a_command_of_a_run_that_cannot_be_read_is_set_aside_and_the_run_fails(suite: Suite) {
    let client = suite.client();
    client
        .register(
            &serde_json::json!({"name": "waits", "version": 1, "tasks": [
            {"name": "w", "taskReferenceName": "w", "type": "WAIT"}]}),
        )
        .await
        .unwrap();
    let id = client.start("waits", serde_json::json!({})).await.unwrap();
    poll_until_tasks(&suite, &id, 1).await;
    // The row no longer matches the history the decider folds.
    let moved = "UPDATE runs SET version = version + 10 WHERE workflow_id = $1";
    let changed = match suite.backend() {
        Backend::Services => sqlx::query(moved)
            .bind(&id)
            .execute(suite.env().pool())
            .await
            .map(|done| done.rows_affected()),
        Backend::Dev => sqlx::query(moved)
            .bind(&id)
            .execute(suite.dev_pool().unwrap())
            .await
            .map(|done| done.rows_affected()),
    };
    assert_eq!(changed.unwrap(), 1, "the run's row");
    // Completing the WAIT is a command for that run; its verdict never comes.
    let path = format!("/api/tasks/{id}/w/COMPLETED");
    let _ = client.post_json(&path, &serde_json::json!({})).await;
    let failed = crate::ended(&suite, &id, "FAILED").await;
    let reason = failed["reasonForIncompletion"].as_str().unwrap_or_default();
    assert!(
        reason.contains("UpdateTask") && reason.contains("set aside"),
        "the run says why it failed: {failed:#}"
    );
}
