//! Results sent together (docs/worker-sdk.md, "Results sent together") over the real
//! services: the decider marks the tasks it sends as taking their results together, and
//! applies each result of an `ActivityResults` message to its run as it would have applied
//! it alone.

use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use weft::activity_batch::ActivityResultBatch;
use weft::bus::Bus;
use weft::messages::{ActivityCompleted, ActivityMessage, ActivityTask, Command};
use weft::Envelope;
use weft_e2e::{greet, poll_until, EnvOptions, Service, Suite, TestEnv};

use crate::start_greets;

const RUNS: usize = 4;

/// The first activity of `runs` greets, taken from its shared queue as a worker would.
async fn first_tasks(bus: &Bus, queue: &str, runs: usize) -> Vec<ActivityTask> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut tasks = Vec::new();
    while tasks.len() < runs {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{runs} tasks on {queue}, got {tasks:?}"
        );
        let Some(taken) = bus.get(queue).await.unwrap() else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        match taken.delivery.envelope.decode::<ActivityMessage>().unwrap() {
            ActivityMessage::ActivityTask(task) => tasks.push(task),
            other => panic!("not a single task: {other:?}"),
        }
        taken.ack().await.unwrap();
    }
    tasks
}

/// The services without a worker, on one shard (every run's result may go in one
/// message), with `extra_env`; the bus, and the first activity's queue, declared.
async fn suite(extra_env: Vec<(String, String)>) -> (Suite, Bus, String) {
    let options = EnvOptions {
        shards: 1,
        extra_env,
        ..EnvOptions::default()
    };
    let mut env = TestEnv::create(options).await.unwrap();
    let names = env.names();
    let first = names.activity_queue(greet::TASKS[0]);
    env.activity_queues.push(first.clone());
    let bus = Bus::connect(&env.amqp_url, names, CancellationToken::new())
        .await
        .unwrap();
    // Declared before any run: the decider declares it with its first task, which the
    // test would otherwise poll for before it exists.
    bus.declare_activity_queue(greet::TASKS[0]).await.unwrap();
    let suite = Suite::start_with(env, &Service::CORE).await.unwrap();
    suite.client().register(&greet::definition()).await.unwrap();
    (suite, bus, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_result_of_a_message_sent_together_advances_its_own_run() {
    let (suite, bus, first) = suite(Vec::new()).await;
    let names = suite.env().names();
    let runs = start_greets(&suite, "Together", RUNS).await;

    let tasks = first_tasks(&bus, &first, RUNS).await;
    assert!(
        tasks.iter().all(|t| t.results_together),
        "the decider takes results together: {tasks:?}"
    );
    let bodies: Vec<Vec<u8>> = tasks
        .iter()
        .map(|t| {
            let done = ActivityCompleted {
                task_id: t.task_id,
                run_id: t.run_id,
                attempt: t.attempt,
                output: json!({"name": format!("name of {}", t.workflow_id)}),
                worker_id: Some("hand".into()),
                started_at: Some(Utc::now()),
                eager: None,
            };
            let command = Command::ActivityCompleted(done);
            Envelope::new(&t.workflow_id, Some(t.run_id), &command)
                .unwrap()
                .to_bytes()
                .unwrap()
        })
        .collect();
    let parts: Vec<(&[u8], Option<&str>)> = bodies.iter().map(|b| (b.as_slice(), None)).collect();
    let together = ActivityResultBatch::encode(&parts).unwrap();
    bus.publish_bytes(
        &names.commands_exchange(),
        &tasks[0].reply_to,
        &together,
        None,
    )
    .await
    .unwrap();

    // Each run's first task completed with its own output, and its second scheduled.
    for (id, _, _) in &runs {
        let run = poll_until(
            Duration::from_secs(20),
            Duration::from_millis(100),
            || format!("{id}: its first task completed, its second scheduled"),
            || async {
                let run = suite.client().get(id).await?;
                let tasks = run["tasks"].as_array().cloned().unwrap_or_default();
                Ok((tasks.len() >= 2).then_some(run))
            },
        )
        .await
        .unwrap();
        let first = &run["tasks"][0];
        assert_eq!(first["status"], "COMPLETED", "{run:#}");
        assert_eq!(
            first["outputData"]["name"],
            json!(format!("name of {id}")),
            "{run:#}"
        );
        assert_eq!(run["tasks"][1]["status"], "SCHEDULED", "{run:#}");
    }
    let dlq = format!("{}.dlq", names.command_queue(0));
    assert_eq!(
        bus.message_count(&dlq).await.unwrap(),
        0,
        "nothing dead-lettered"
    );
}

/// `WEFT_RESULTS_TOGETHER=false` (a rolling upgrade from deciders that cannot take results
/// together apart): the decider's tasks leave the flag off, so workers send each result
/// alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switched_off_the_decider_asks_for_results_alone() {
    let off = vec![("WEFT_RESULTS_TOGETHER".to_owned(), "false".to_owned())];
    let (suite, bus, first) = suite(off).await;
    start_greets(&suite, "Alone", 1).await;
    let tasks = first_tasks(&bus, &first, 1).await;
    assert!(!tasks[0].results_together, "{tasks:?}");
}
