//! A list of brokers in `WEFT_AMQP_URL` (docs/bus.md, "Several brokers"): a bus connects
//! to the first that answers and, when that one dies, to the next — declaring the
//! namespace's topology there on the way, as on any reconnect. Two private RabbitMQ nodes
//! (not the machine's broker), the first killed as a crash.

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use tokio_util::sync::CancellationToken;
use weft::bus::Bus;
use weft::messages::{Command, TimerFired};
use weft::topology::Names;
use weft::Envelope;
use weft_e2e::infra::RabbitNode;

/// Messages ready in `queue` on the broker at `url` (a passive declaration).
async fn ready(url: &str, queue: &str) -> u32 {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .expect("connect to the node");
    let channel = conn.create_channel().await.expect("a channel");
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let queue = channel
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
        .expect("the queue exists on the node");
    let _ = conn.close(200, "done".into()).await;
    queue.message_count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_fails_over_to_the_next_broker_of_its_list() {
    let root =
        std::env::temp_dir().join(format!("weft-failover-{}", uuid::Uuid::new_v4().simple()));
    let suffix = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let (dir_a, dir_b) = (root.join("a"), root.join("b"));
    let (name_a, name_b) = (format!("weft-a-{suffix}"), format!("weft-b-{suffix}"));
    let (mut first, second) = tokio::try_join!(
        RabbitNode::start(&dir_a, &name_a),
        RabbitNode::start(&dir_b, &name_b),
    )
    .expect("two private RabbitMQ nodes");

    let names = Names::new(&format!("failover_{suffix}"), 2);
    let queue = names.heartbeat_queue();
    let shutdown = CancellationToken::new();
    // A dead address first: the list is tried in order until one answers.
    let dead = "amqp://guest:guest@127.0.0.1:1/%2f";
    let urls = format!("{dead}, {}, {}", first.url(), second.url());
    let bus = Bus::connect(&urls, names.clone(), shutdown.clone())
        .await
        .expect("connects to the first live broker of the list");
    let message = Envelope::new(
        "wf-failover",
        None,
        &Command::TimerFired(TimerFired {
            timer_id: uuid::Uuid::new_v4(),
            run_id: uuid::Uuid::now_v7(),
        }),
    )
    .unwrap();
    bus.publish("", &queue, &message).await.unwrap();
    assert_eq!(
        ready(&first.url(), &queue).await,
        1,
        "the first live node has it"
    );

    // The node dies; the next publish finds the connection gone, tries the list again
    // from that node on and lands on the next one, with the topology declared there.
    first.kill().await.unwrap();
    bus.publish("", &queue, &message)
        .await
        .expect("the bus fails over to the next broker");
    assert_eq!(
        ready(&second.url(), &queue).await,
        1,
        "the second node has it"
    );
    let taken = bus
        .get(&queue)
        .await
        .unwrap()
        .expect("consumed from the second node");
    assert_eq!(taken.delivery.envelope.id, message.id);
    taken.ack().await.unwrap();

    shutdown.cancel();
    drop((first, second));
    let _ = std::fs::remove_dir_all(&root);
}
