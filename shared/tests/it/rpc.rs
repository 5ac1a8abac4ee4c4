//! Request/reply (`Bus::call`, `Bus::reply`) over the real RabbitMQ's direct reply-to and
//! in process. Each test has its own namespace; the responder consumes the namespace's
//! heartbeat queue.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft::bus::{Bus, ConsumeOptions, Delivery, Disposition};
use weft::{Envelope, Error};

use crate::bus::{pair, Kind};

/// Generous bound for a call that should be answered.
const ANSWERED: Duration = Duration::from_secs(20);

both_transports!(
    a_call_gets_the_reply_to_its_request,
    a_call_nobody_answers_fails_with_no_reply,
    replying_to_a_message_that_asked_for_none_is_a_no_op,
    a_late_reply_to_a_caller_that_gave_up_is_dropped_quietly,
    many_concurrent_calls_each_get_their_own_reply,
    a_call_waiting_when_the_connection_drops_fails_without_waiting_for_its_timeout,
    a_reply_to_a_caller_whose_connection_is_gone_is_dropped_by_the_broker,
);

fn request(n: u64) -> Envelope {
    Envelope {
        id: Uuid::now_v7(),
        kind: "Ping".into(),
        version: 1,
        workflow_id: "rpc".into(),
        run_id: None,
        time: chrono::Utc::now(),
        priority: None,
        payload: json!({ "n": n }),
    }
}

fn n_of(envelope: &Envelope) -> u64 {
    envelope.payload["n"].as_u64().expect("payload n")
}

/// Answers every request on the heartbeat queue with `{ "n": 2n }`, counting requests.
struct Responder {
    stop: CancellationToken,
    task: JoinHandle<()>,
    requests: Arc<AtomicUsize>,
}

impl Responder {
    fn start(bus: &Bus) -> Self {
        let stop = CancellationToken::new();
        let requests = Arc::new(AtomicUsize::new(0));
        let (responder, seen) = (bus.clone(), requests.clone());
        let handler = move |d: Delivery| {
            let (bus, seen) = (responder.clone(), seen.clone());
            async move {
                seen.fetch_add(1, Ordering::Relaxed);
                let mut answer = request(n_of(&d.envelope) * 2);
                answer.kind = "Pong".into();
                bus.reply(&d, &answer).await.expect("reply published");
                Disposition::Ack
            }
        };
        let opts = ConsumeOptions {
            prefetch: 256,
            concurrency: 64,
        };
        let task = bus.consume(&bus.names().heartbeat_queue(), opts, handler, stop.clone());
        Self {
            stop,
            task,
            requests,
        }
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.expect("responder ended cleanly");
    }
}

async fn call(bus: &Bus, n: u64, timeout: Duration) -> weft::Result<Envelope> {
    let queue = bus.names().heartbeat_queue();
    bus.call("", &queue, &request(n), timeout).await
}

async fn a_call_gets_the_reply_to_its_request(kind: Kind) {
    let (caller, server) = pair(kind).await;
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let responder = server.clone();
    let handler = move |d: Delivery| {
        let (bus, seen_tx) = (responder.clone(), seen_tx.clone());
        async move {
            let _ = seen_tx.send((d.reply_to.clone(), d.correlation_id.clone()));
            let answer = request(n_of(&d.envelope) + 1);
            bus.reply(&d, &answer).await.expect("reply");
            Disposition::Ack
        }
    };
    let queue = server.names().heartbeat_queue();
    let opts = ConsumeOptions {
        prefetch: 8,
        concurrency: 1,
    };
    let task = server.consume(&queue, opts, handler, stop.clone());

    let reply = call(&caller, 41, ANSWERED).await.expect("answered");
    assert_eq!(n_of(&reply), 42);
    let (reply_to, correlation_id) = seen.recv().await.expect("request seen");
    assert!(reply_to.is_some_and(|r| r.starts_with("amq.rabbitmq.reply-to")));
    assert!(correlation_id.is_some());

    stop.cancel();
    task.await.unwrap();
    caller.teardown(&[]).await.unwrap();
}

async fn a_call_nobody_answers_fails_with_no_reply(kind: Kind) {
    let (caller, _server) = pair(kind).await;
    let err = call(&caller, 1, Duration::from_millis(300))
        .await
        .expect_err("nobody answers");
    assert!(matches!(err, Error::NoReply { .. }), "{err}");
    assert!(err.to_string().contains("no reply"), "{err}");
    caller.teardown(&[]).await.unwrap();
}

async fn replying_to_a_message_that_asked_for_none_is_a_no_op(kind: Kind) {
    let (caller, server) = pair(kind).await;
    let delivery = Delivery {
        envelope: request(1),
        traceparent: None,
        redelivered: false,
        queue: server.names().heartbeat_queue(),
        reply_to: None,
        correlation_id: None,
    };
    server.reply(&delivery, &request(2)).await.expect("no-op");
    caller.teardown(&[]).await.unwrap();
}

async fn a_late_reply_to_a_caller_that_gave_up_is_dropped_quietly(kind: Kind) {
    let (caller, server) = pair(kind).await;
    // The request stays queued until the responder starts, after the call timed out.
    let err = call(&caller, 5, Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoReply { .. }), "{err}");
    let responder = Responder::start(&server);
    // The late reply is published fine and ignored; the next call gets its own reply.
    let reply = call(&caller, 6, ANSWERED).await.expect("answered");
    assert_eq!(n_of(&reply), 12);
    assert_eq!(responder.requests.load(Ordering::Relaxed), 2);
    responder.stop().await;
    caller.teardown(&[]).await.unwrap();
}

async fn many_concurrent_calls_each_get_their_own_reply(kind: Kind) {
    let (caller, server) = pair(kind).await;
    let responder = Responder::start(&server);
    let calls = (0..1_000u64).map(|n| {
        let caller = caller.clone();
        async move { (n, call(&caller, n, ANSWERED).await) }
    });
    for (n, reply) in join_all(calls).await {
        let reply = reply.unwrap_or_else(|e| panic!("call {n}: {e}"));
        assert_eq!(n_of(&reply), 2 * n);
    }
    assert_eq!(responder.requests.load(Ordering::Relaxed), 1_000);
    responder.stop().await;
    caller.teardown(&[]).await.unwrap();
}

#[tokio::test]
async fn calls_are_answered_again_after_the_caller_reconnects() {
    let (caller, server) = pair(Kind::Amqp).await;
    let responder = Responder::start(&server);
    assert_eq!(n_of(&call(&caller, 1, ANSWERED).await.unwrap()), 2);

    caller.force_disconnect().await;
    assert!(!caller.is_connected());
    assert_eq!(n_of(&call(&caller, 2, ANSWERED).await.unwrap()), 4);
    assert!(caller.is_connected());

    responder.stop().await;
    caller.teardown(&[]).await.unwrap();
}

async fn a_call_waiting_when_the_connection_drops_fails_without_waiting_for_its_timeout(
    kind: Kind,
) {
    let (caller, server) = pair(kind).await;
    // A responder that takes the request and never answers.
    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let handler = move |_d: Delivery| {
        let _ = seen_tx.send(());
        std::future::ready(Disposition::Ack)
    };
    let opts = ConsumeOptions {
        prefetch: 8,
        concurrency: 1,
    };
    let task = server.consume(
        &server.names().heartbeat_queue(),
        opts,
        handler,
        stop.clone(),
    );
    let waiting = tokio::spawn({
        let caller = caller.clone();
        async move { call(&caller, 1, Duration::from_secs(600)).await }
    });
    tokio::time::timeout(ANSWERED, seen.recv())
        .await
        .expect("the request arrived");
    caller.force_disconnect().await;
    let err = tokio::time::timeout(ANSWERED, waiting)
        .await
        .expect("the call gave up when the connection dropped")
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, Error::Bus(_)), "{err}");
    stop.cancel();
    task.await.unwrap();
    caller.teardown(&[]).await.unwrap();
}

async fn a_reply_to_a_caller_whose_connection_is_gone_is_dropped_by_the_broker(kind: Kind) {
    let (caller, server) = pair(kind).await;
    // Take the request and keep it until the caller's connection is gone.
    let (held_tx, mut held) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let handler = move |d: Delivery| {
        let _ = held_tx.send(d);
        std::future::ready(Disposition::Ack)
    };
    let opts = ConsumeOptions {
        prefetch: 8,
        concurrency: 1,
    };
    let task = server.consume(
        &server.names().heartbeat_queue(),
        opts,
        handler,
        stop.clone(),
    );
    let waiting = tokio::spawn({
        let caller = caller.clone();
        async move { call(&caller, 1, Duration::from_secs(600)).await }
    });
    let taken = tokio::time::timeout(ANSWERED, held.recv())
        .await
        .expect("the request arrived")
        .unwrap();
    caller.force_disconnect().await;
    assert!(waiting.await.unwrap().is_err());
    server
        .reply(&taken, &request(2))
        .await
        .expect("the broker drops the reply without an error");
    // The responder's channels still work.
    let queue = server.names().heartbeat_queue();
    server.publish("", &queue, &request(3)).await.unwrap();
    stop.cancel();
    task.await.unwrap();
    caller.teardown(&[]).await.unwrap();
}
