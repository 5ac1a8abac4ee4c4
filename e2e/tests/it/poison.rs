//! Invariant 7 on the bus: a poison message is dead-lettered and never blocks its queue.

use std::time::Duration;

use weft::ids::shard_of;
use weft::topology::Names;
use weft_e2e::amqp::{RawBus, RawMessage};
use weft_e2e::{greet, EnvOptions, Suite, TestEnv};

use crate::assert_all_completed;

const DEAD_REASON: &str = "x-weft-dead-reason";

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
