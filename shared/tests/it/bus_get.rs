//! `Bus::get`: taking messages on demand (the gateway's task poll), against RabbitMQ and
//! in process.

use weft::bus::Disposition;
use weft::topology::Names;

use crate::bus::{bus, envelope, header, n_of, ready_count, take_one, Kind};

both_transports!(
    get_takes_messages_in_order_and_none_once_the_queue_is_empty,
    a_taken_message_dropped_or_requeued_unsettled_goes_back_to_its_queue,
    get_moves_undecodable_messages_to_the_dlq_and_returns_the_next_one,
);

async fn get_takes_messages_in_order_and_none_once_the_queue_is_empty(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("pull").await.unwrap();
    let queue = names.activity_queue("pull");
    for n in 1..=2 {
        bus.publish(&names.activity_exchange(), "pull", &envelope("wf", n))
            .await
            .unwrap();
    }
    for n in 1..=2 {
        let taken = bus.get(&queue).await.unwrap().expect("a message");
        assert_eq!(n_of(&taken.delivery), n);
        assert!(!taken.delivery.redelivered);
        assert_eq!(taken.delivery.queue, queue);
        taken.ack().await.unwrap();
    }
    assert!(bus.get(&queue).await.unwrap().is_none());
    assert_eq!(ready_count(&bus, &queue, 0).await, 0);
    bus.teardown(&[]).await.unwrap();
}

async fn a_taken_message_dropped_or_requeued_unsettled_goes_back_to_its_queue(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("pull").await.unwrap();
    let queue = names.activity_queue("pull");
    bus.publish(&names.activity_exchange(), "pull", &envelope("wf", 7))
        .await
        .unwrap();
    let taken = bus.get(&queue).await.unwrap().expect("a message");
    drop(taken);
    assert_eq!(ready_count(&bus, &queue, 1).await, 1);
    let again = bus.get(&queue).await.unwrap().expect("the message again");
    assert_eq!(n_of(&again.delivery), 7);
    assert!(again.delivery.redelivered);
    again.requeue().await;
    assert_eq!(ready_count(&bus, &queue, 1).await, 1);
    let last = bus
        .get(&queue)
        .await
        .unwrap()
        .expect("the message once more");
    last.settle(Disposition::Ack).await;
    assert_eq!(ready_count(&bus, &queue, 0).await, 0);
    bus.teardown(&[]).await.unwrap();
}

async fn get_moves_undecodable_messages_to_the_dlq_and_returns_the_next_one(kind: Kind) {
    let bus = bus(kind).await;
    let names = bus.names().clone();
    bus.declare_activity_queue("pull").await.unwrap();
    let queue = names.activity_queue("pull");
    let exchange = names.activity_exchange();
    bus.publish_bytes(&exchange, "pull", b"{not an envelope", None)
        .await
        .unwrap();
    bus.publish(&exchange, "pull", &envelope("wf", 3))
        .await
        .unwrap();
    let taken = bus.get(&queue).await.unwrap().expect("the good message");
    assert_eq!(n_of(&taken.delivery), 3);
    taken.ack().await.unwrap();
    assert_dead_lettered_as_no_envelope(&bus, &queue).await;
    assert!(bus.get("no-such-queue-here").await.is_err());
    // The refused take's channel is not reused: the next take works.
    assert!(bus.get(&queue).await.unwrap().is_none());
    bus.teardown(&[]).await.unwrap();
}

/// `{not an envelope` (the body these scenarios publish) is in `queue`'s DLQ with a
/// reason naming the envelope.
pub(crate) async fn assert_dead_lettered_as_no_envelope(bus: &weft::bus::Bus, queue: &str) {
    let dead = take_one(bus, &Names::dlq(queue)).await;
    assert_eq!(dead.body, b"{not an envelope");
    let reason = header(&dead, "x-weft-dead-reason").unwrap();
    assert!(reason.contains("envelope"), "{reason}");
}
