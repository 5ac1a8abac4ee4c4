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
