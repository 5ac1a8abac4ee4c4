//! `Bus::wait_for_message`: a caller waiting on an empty queue is handed the next message
//! the broker pushes (the gateway's long poll), against RabbitMQ and in process.

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use weft::bus::{Bus, Taken, DOORBELL_LINGER};

use crate::bus::{bus, envelope, n_of, ready_count, Kind};
use crate::bus_get::assert_dead_lettered_as_no_envelope;

both_transports!(
    a_waiting_caller_is_handed_a_message_published_while_it_waits,
    a_caller_handed_a_message_sends_the_next_caller_to_look_at_the_queue,
    a_pushed_message_dropped_unsettled_goes_back_and_is_pushed_again,
    a_message_pushed_after_its_callers_left_is_kept_for_the_next_or_given_back,
    an_undecodable_pushed_message_is_dead_lettered_and_the_next_one_handed_out,
);

/// Longer than any scenario takes: a wait that ends only at it found nothing.
const LONG: Duration = Duration::from_secs(60);

/// A queue of its own on `bus`, empty.
async fn queue_of(bus: &Bus) -> String {
    bus.declare_activity_queue("pull").await.unwrap();
    bus.names().activity_queue("pull")
}

async fn publish(bus: &Bus, n: u64) {
    let exchange = bus.names().activity_exchange();
    bus.publish(&exchange, "pull", &envelope("wf", n))
        .await
        .unwrap();
}

/// Waits until `n` callers wait on `queue`.
async fn callers_waiting(bus: &Bus, queue: &str, n: usize) {
    let deadline = Instant::now() + LONG;
    while bus.callers_waiting(queue) < n {
        assert!(Instant::now() < deadline, "{n} callers never waited");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits (up to [`LONG`]) in a task of its own for the queue's next pushed message.
fn waiter(bus: &Bus, queue: &str) -> tokio::task::JoinHandle<Option<Taken>> {
    let (bus, queue) = (bus.clone(), queue.to_owned());
    tokio::spawn(async move {
        let shutdown = CancellationToken::new();
        let until = Instant::now() + LONG;
        bus.wait_for_message(&queue, until, &shutdown)
            .await
            .unwrap()
    })
}

async fn a_waiting_caller_is_handed_a_message_published_while_it_waits(kind: Kind) {
    let bus = bus(kind).await;
    let queue = queue_of(&bus).await;
    let waiting = waiter(&bus, &queue);
    callers_waiting(&bus, &queue, 1).await;
    publish(&bus, 1).await;
    let taken = waiting.await.unwrap().expect("the message, pushed");
    assert_eq!(n_of(&taken.delivery), 1);
    assert_eq!(taken.delivery.queue, queue);
    assert!(!taken.delivery.redelivered);
    taken.ack().await.unwrap();
    assert_eq!(ready_count(&bus, &queue, 0).await, 0);
    assert!(bus.get(&queue).await.unwrap().is_none());
    bus.teardown(&[]).await.unwrap();
}

async fn a_caller_handed_a_message_sends_the_next_caller_to_look_at_the_queue(kind: Kind) {
    let bus = bus(kind).await;
    let queue = queue_of(&bus).await;
    let (first, second) = (waiter(&bus, &queue), waiter(&bus, &queue));
    callers_waiting(&bus, &queue, 2).await;
    publish(&bus, 1).await;
    publish(&bus, 2).await;
    // One caller is handed message 1; the doorbell holds one message at a time, so
    // message 2 stays queued, and the other caller is told at once to look for it
    // rather than wait for its turn.
    let (first, second) = tokio::time::timeout(LONG, async {
        (first.await.unwrap(), second.await.unwrap())
    })
    .await
    .expect("both callers answered");
    let handed = match (first, second) {
        (Some(handed), None) | (None, Some(handed)) => handed,
        (a, b) => panic!("expected one message and one look-again: {a:?}, {b:?}"),
    };
    assert_eq!(n_of(&handed.delivery), 1);
    let looked = bus
        .get(&queue)
        .await
        .unwrap()
        .expect("message 2, still queued");
    assert_eq!(n_of(&looked.delivery), 2);
    handed.ack().await.unwrap();
    looked.ack().await.unwrap();
    assert_eq!(ready_count(&bus, &queue, 0).await, 0);
    bus.teardown(&[]).await.unwrap();
}

async fn a_pushed_message_dropped_unsettled_goes_back_and_is_pushed_again(kind: Kind) {
    let bus = bus(kind).await;
    let queue = queue_of(&bus).await;
    publish(&bus, 7).await;
    let waiting = waiter(&bus, &queue);
    let taken = waiting.await.unwrap().expect("the message");
    assert_eq!(n_of(&taken.delivery), 7);
    // A poll whose client went away mid-way drops what it was handed.
    drop(taken);
    let again = waiter(&bus, &queue)
        .await
        .unwrap()
        .expect("the message again");
    assert_eq!(n_of(&again.delivery), 7);
    assert!(again.delivery.redelivered);
    again.ack().await.unwrap();
    assert_eq!(ready_count(&bus, &queue, 0).await, 0);
    bus.teardown(&[]).await.unwrap();
}

async fn a_message_pushed_after_its_callers_left_is_kept_for_the_next_or_given_back(kind: Kind) {
    let bus = bus(kind).await;
    let queue = queue_of(&bus).await;
    let shutdown = CancellationToken::new();
    let soon = Instant::now() + Duration::from_millis(100);
    let none = bus.wait_for_message(&queue, soon, &shutdown).await.unwrap();
    assert!(none.is_none(), "nothing was published");
    // The doorbell lingers: a message published now is pushed with nobody waiting; the
    // next caller is handed it.
    publish(&bus, 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let kept = waiter(&bus, &queue)
        .await
        .unwrap()
        .expect("the kept message");
    assert_eq!(n_of(&kept.delivery), 1);
    kept.ack().await.unwrap();
    // Nobody comes for the next one: it is given back to the queue within the linger.
    let soon = Instant::now() + Duration::from_millis(100);
    assert!(bus
        .wait_for_message(&queue, soon, &shutdown)
        .await
        .unwrap()
        .is_none());
    publish(&bus, 2).await;
    let deadline = Instant::now() + DOORBELL_LINGER * 20;
    let back = loop {
        if let Some(taken) = bus.get(&queue).await.unwrap() {
            break taken;
        }
        assert!(Instant::now() < deadline, "message 2 never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(n_of(&back.delivery), 2);
    back.ack().await.unwrap();
    bus.teardown(&[]).await.unwrap();
}

async fn an_undecodable_pushed_message_is_dead_lettered_and_the_next_one_handed_out(kind: Kind) {
    let bus = bus(kind).await;
    let queue = queue_of(&bus).await;
    let waiting = waiter(&bus, &queue);
    let exchange = bus.names().activity_exchange();
    bus.publish_bytes(&exchange, "pull", b"{not an envelope", None)
        .await
        .unwrap();
    publish(&bus, 3).await;
    let taken = waiting.await.unwrap().expect("the good message");
    assert_eq!(n_of(&taken.delivery), 3);
    taken.ack().await.unwrap();
    assert_dead_lettered_as_no_envelope(&bus, &queue).await;
    bus.teardown(&[]).await.unwrap();
}
