//! `WEFT_QUEUE_TYPE=quorum` (docs/bus.md, "Quorum queues"): every process declares the
//! namespace's queues as quorum queues — replicated over a cluster's nodes — and runs
//! work on them as on classic ones (without task priorities, which RabbitMQ 3.x quorum
//! queues do not have). On one node here; a quorum queue of one node is a quorum queue.

use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable};
use weft::topology::QueueType;
use weft_e2e::infra::RabbitNode;
use weft_e2e::{greet, EnvOptions, Service, Suite, TestEnv};

use crate::{assert_all_completed, start_greets};

/// The services and the example worker in `env`, `greet` registered.
async fn greet_suite(env: TestEnv) -> Suite {
    let mut services = Service::CORE.to_vec();
    services.push(Service::Worker);
    let suite = Suite::start_with(env, &services).await.unwrap();
    suite.client().register(&greet::definition()).await.unwrap();
    suite
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_complete_on_quorum_queues() {
    let options = EnvOptions {
        queue_type: QueueType::Quorum,
        ..EnvOptions::default()
    };
    let env = TestEnv::create(options).await.unwrap();
    let names = env.names();
    let mut suite = greet_suite(env).await;
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

/// A RabbitMQ cluster of three private nodes (one cookie, the second and third joined to
/// the first): the services run on quorum queues with the three nodes in
/// `WEFT_AMQP_URL`; the node they are connected to dies; runs started before and after
/// complete — the queues keep a majority, and every process reconnects to a node of the
/// list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_node_cluster_loses_a_node_and_runs_go_on() {
    let root = std::env::temp_dir().join(format!("weft-cluster-{}", uuid::Uuid::new_v4().simple()));
    let suffix = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let mut nodes = RabbitNode::cluster(&root, &format!("weft-{suffix}"), 3)
        .await
        .expect("a cluster of three private RabbitMQ nodes");
    let urls = nodes
        .iter()
        .map(RabbitNode::url)
        .collect::<Vec<_>>()
        .join(",");
    let options = EnvOptions {
        queue_type: QueueType::Quorum,
        ..EnvOptions::default()
    };
    let env = TestEnv::create_with_broker(options, &urls).await.unwrap();
    let mut suite = greet_suite(env).await;
    let before = start_greets(&suite, "Before", 5).await;
    assert_all_completed(&suite, &before).await;

    // Every process is connected to the first node of the list: it dies.
    nodes[0].kill().await.unwrap();
    let after = start_greets(&suite, "After", 5).await;
    assert_all_completed(&suite, &after).await;

    suite.stop_all().await.unwrap();
    drop(suite);
    drop(nodes);
    let _ = std::fs::remove_dir_all(&root);
}
