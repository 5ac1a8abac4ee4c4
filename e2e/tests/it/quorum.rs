//! `WEFT_QUEUE_TYPE=quorum` (docs/bus.md, "Quorum queues"): every process declares the
//! namespace's queues as quorum queues — replicated over a cluster's nodes — and runs
//! work on them as on classic ones (without task priorities, which RabbitMQ 3.x quorum
//! queues do not have). On one node here; a quorum queue of one node is a quorum queue.

use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable};
use weft::topology::QueueType;
use weft_e2e::{greet, EnvOptions, Service, Suite, TestEnv};

use crate::{assert_all_completed, start_greets};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_complete_on_quorum_queues() {
    let options = EnvOptions {
        queue_type: QueueType::Quorum,
        ..EnvOptions::default()
    };
    let env = TestEnv::create(options).await.unwrap();
    let names = env.names();
    let mut suite = Suite::start_with(
        env,
        &[
            Service::Gateway,
            Service::Decider,
            Service::History,
            Service::Heartbeat,
            Service::Worker,
        ],
    )
    .await
    .unwrap();
    suite.client().register(&greet::definition()).await.unwrap();
    let runs = start_greets(&suite, "Quorum", 5).await;
    assert_all_completed(&suite, &runs).await;

    // They are quorum queues: declaring one with its classic arguments is refused, naming
    // the queue type it has.
    let conn = lapin::Connection::connect(&suite.env().amqp_url, Default::default())
        .await
        .unwrap();
    for (queue, extra) in [
        (
            names.command_queue(0),
            Some(("x-single-active-consumer", AMQPValue::Boolean(true))),
        ),
        (names.heartbeat_queue(), None),
        (names.activity_queue("make_name"), None),
    ] {
        let mut classic = FieldTable::default();
        let text = |s: String| AMQPValue::LongString(s.as_str().into());
        classic.insert("x-dead-letter-exchange".into(), text(String::new()));
        classic.insert(
            "x-dead-letter-routing-key".into(),
            text(format!("{queue}.dlq")),
        );
        if let Some((name, value)) = extra {
            classic.insert(name.into(), value);
        }
        let channel = conn.create_channel().await.unwrap();
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        let refused = channel
            .queue_declare(queue.as_str().into(), durable, classic)
            .await
            .expect_err("a classic declaration of a quorum queue is refused");
        assert!(refused.to_string().contains("quorum"), "{queue}: {refused}");
    }
    let _ = conn.close(200, "done".into()).await;
    suite.stop_all().await.unwrap();
}
