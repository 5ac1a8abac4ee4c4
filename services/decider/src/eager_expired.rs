//! Eager tasks that waited too long in a worker's eager queue (the worker died, or stayed
//! busy for the queue's message TTL) are dead-lettered to `<ns>.eager.expired`; the
//! decider sends each task on to its shared queue, where any worker claims it with a
//! takeover (docs/eager-dispatch.md). Tasks that were sent together go on one message a
//! task: a shared queue only ever holds single `ActivityTask`s, which every consumer —
//! an HTTP poll, a worker written against docs/protocol.md — reads.

use weft::bus::{Bus, ConsumeOptions, Delivery, Disposition};
use weft::dsl::TaskType;
use weft::messages::{ActivityMessage, ActivityTask, ActivityTaskBatch};
use weft::{Envelope, Error};

/// A task of an expired eager message: its envelope as decided, its trace context.
type Expired = (Envelope, Option<String>, ActivityTask);

/// Consumes `<ns>.eager.expired` until `shutdown`.
pub fn consume(
    bus: &Bus,
    shutdown: tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let queue = bus.names().eager_expired_queue();
    let opts = ConsumeOptions {
        prefetch: 16,
        concurrency: 4,
    };
    let sender = bus.clone();
    bus.consume(
        &queue,
        opts,
        move |delivery| {
            let bus = sender.clone();
            async move { send_on(&bus, delivery).await }
        },
        shutdown,
    )
}

/// Publishes the task (or each task) of an expired eager message to its shared queue,
/// as the envelope it was decided as; acknowledged once all are confirmed. A message
/// that is no activity task is dead-lettered (the valid tasks of a batch go on first).
/// When a publish fails, what is left goes back to this queue as a message of its own
/// and the delivery is acknowledged, so that no task already sent on is sent twice (two
/// copies would both take the attempt over).
pub async fn send_on(bus: &Bus, delivery: Delivery) -> Disposition {
    let (tasks, invalid) = single_tasks(&delivery);
    let exchange = bus.names().activity_exchange();
    for (i, (envelope, traceparent, task)) in tasks.iter().enumerate() {
        let key = shared_queue_key(task);
        let sent = async {
            bus.declare_activity_queue(&key).await?;
            bus.publish_with_id(
                &exchange,
                &key,
                &envelope.to_bytes()?,
                None,
                traceparent.as_deref(),
            )
            .await
        };
        if let Err(e) = sent.await {
            tracing::warn!(task_id = %task.task_id, error = %e, "could not send an expired eager task on to its shared queue; it is tried again");
            return again(bus, &tasks[i..]).await;
        }
    }
    if let Some(e) = invalid {
        tracing::warn!(id = %delivery.envelope.id, error = %e, "an expired eager message that is no activity task; dead-lettering it");
        return Disposition::DeadLetter(format!("not an activity task: {e}"));
    }
    tracing::debug!(
        tasks = tasks.len(),
        "expired eager tasks sent on to their shared queues"
    );
    Disposition::Ack
}

/// Puts `left` back on `<ns>.eager.expired` as one message and acknowledges the
/// delivery; gives the delivery back when even that fails (the broker is away: what
/// was sent on may then go twice).
async fn again(bus: &Bus, left: &[Expired]) -> Disposition {
    let body = ActivityTaskBatch::encode_envelopes(
        left.iter()
            .map(|(envelope, trace, _)| (envelope, trace.as_deref())),
    );
    let queue = bus.names().eager_expired_queue();
    let sent = match body {
        Ok(body) => bus.publish_bytes("", &queue, &body, None).await,
        Err(e) => Err(e),
    };
    match sent {
        Ok(()) => Disposition::Ack,
        Err(_) => {
            // No hot loop while the broker is away.
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            Disposition::Requeue
        }
    }
}

/// The tasks of an expired eager message, each as its own envelope, and why the
/// message (or a part of it) is no activity task.
fn single_tasks(delivery: &Delivery) -> (Vec<Expired>, Option<Error>) {
    let batch = match delivery.envelope.decode::<ActivityMessage>() {
        Ok(ActivityMessage::ActivityTask(task)) => {
            let one = (
                delivery.envelope.clone(),
                delivery.traceparent.clone(),
                task,
            );
            return (vec![one], None);
        }
        Ok(ActivityMessage::ActivityTasks(batch)) => batch,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut tasks = Vec::with_capacity(batch.messages.len());
    let mut invalid = None;
    for message in batch.into_messages() {
        match message {
            Ok(task) => tasks.push(task),
            Err(e) => invalid = Some(e),
        }
    }
    (tasks, invalid)
}

/// The shared queue (routing key) of an eager task: HTTP tasks go to the built-in HTTP
/// worker's queue whatever their name; others to their name (eager tasks have no
/// domain).
fn shared_queue_key(task: &ActivityTask) -> String {
    match task.task_type == TaskType::Http.as_str() {
        true => TaskType::Http.as_str().to_owned(),
        false => task.task_name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::Utc;
    use serde_json::json;
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;
    use uuid::Uuid;
    use weft::topology::Names;

    use super::*;

    fn task(task_name: &str, task_type: &str, text: &str) -> Envelope {
        let task = ActivityTask {
            task_id: Uuid::new_v4(),
            workflow_id: format!("wf-{text}"),
            run_id: Uuid::new_v4(),
            task_ref: text.into(),
            task_name: task_name.into(),
            task_type: task_type.into(),
            attempt: 1,
            input: json!({ "text": text }),
            reply_to: "0".into(),
            scheduled_at: Utc::now(),
            response_timeout_seconds: 0,
            eager: true,
            results_together: false,
        };
        let (workflow_id, run_id) = (task.workflow_id.clone(), task.run_id);
        Envelope::new(
            &workflow_id,
            Some(run_id),
            &ActivityMessage::ActivityTask(task),
        )
        .unwrap()
    }

    /// A bus on a namespace of its own (one shard), stopped by the token.
    async fn test_bus() -> (Names, CancellationToken, Bus) {
        let names = Names::new(&format!("t{}", Uuid::new_v4().simple()), 1);
        let stop = CancellationToken::new();
        let bus = Bus::connect(&weft::testing::amqp_url(), names.clone(), stop.clone())
            .await
            .expect("the broker is up");
        (names, stop, bus)
    }

    /// What arrives on `queue`, as it arrives.
    fn read(bus: &Bus, queue: &str, stop: &CancellationToken) -> mpsc::UnboundedReceiver<Delivery> {
        let (sender, received) = mpsc::unbounded_channel();
        let opts = ConsumeOptions {
            prefetch: 16,
            concurrency: 1,
        };
        let on = move |d: Delivery| {
            let _ = sender.send(d);
            async { Disposition::Ack }
        };
        bus.consume(queue, opts, on, stop.clone());
        received
    }

    /// Tasks sent together to a worker that never takes them wait out the eager queue's
    /// TTL, are dead-lettered to `<ns>.eager.expired`, and reach their shared queues one
    /// message a task, each the envelope it was decided as (its id, its trace context).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tasks_sent_together_that_expire_reach_their_shared_queues_one_by_one() {
        let (names, stop, bus) = test_bus().await;
        let prefix = names.eager_prefix(&Uuid::new_v4().simple().to_string());
        let eager_queue = bus.declare_eager_queue(&prefix, "shout").await.unwrap();
        let http_queue = bus.declare_eager_queue(&prefix, "HTTP").await.unwrap();
        for key in ["shout", "HTTP"] {
            bus.declare_activity_queue(key).await.unwrap();
        }
        let mut shout = read(&bus, &names.activity_queue("shout"), &stop);
        let mut http = read(&bus, &names.activity_queue("HTTP"), &stop);
        let splitter = consume(&bus, stop.clone());

        let sent = [task("shout", "SIMPLE", "a"), task("shout", "SIMPLE", "b")];
        let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let bodies: Vec<Vec<u8>> = sent.iter().map(|e| e.to_bytes().unwrap()).collect();
        let parts: Vec<(&[u8], Option<&str>)> = vec![(&bodies[0], Some(trace)), (&bodies[1], None)];
        let batch = ActivityTaskBatch::encode(&parts).unwrap();
        bus.publish_bytes(&names.eager_exchange(), &eager_queue, &batch, None)
            .await
            .unwrap();
        // A single task too (an HTTP task: its shared queue is `HTTP`, whatever its name).
        let lone = task("call_api", "HTTP", "c");
        bus.publish_bytes(
            &names.eager_exchange(),
            &http_queue,
            &lone.to_bytes().unwrap(),
            None,
        )
        .await
        .unwrap();

        // The eager queues' TTL is 5 s.
        let within = Duration::from_secs(20);
        let mut got = Vec::new();
        for _ in 0..2 {
            let d = tokio::time::timeout(within, shout.recv())
                .await
                .expect("in time")
                .unwrap();
            got.push(d);
        }
        got.sort_by_key(|d| d.envelope.workflow_id.clone());
        assert_eq!(got[0].envelope, sent[0], "the envelope as it was decided");
        assert_eq!(got[1].envelope, sent[1]);
        assert_eq!(got[0].traceparent.as_deref(), Some(trace));
        let d = tokio::time::timeout(within, http.recv())
            .await
            .expect("in time")
            .unwrap();
        assert_eq!(d.envelope, lone);
        assert_eq!(
            bus.message_count(&names.eager_expired_queue())
                .await
                .unwrap(),
            0
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(500), shout.recv())
                .await
                .is_err(),
            "each task once"
        );

        stop.cancel();
        let _ = splitter.await;
        bus.teardown(&[eager_queue, http_queue]).await.unwrap();
    }

    /// A message there that is no activity task is dead-lettered with the reason; in a
    /// batch, the valid tasks go on to their shared queues first.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_is_no_activity_task_is_dead_lettered() {
        let (names, stop, bus) = test_bus().await;
        bus.declare_activity_queue("shout").await.unwrap();
        let mut shout = read(&bus, &names.activity_queue("shout"), &stop);
        let splitter = consume(&bus, stop.clone());
        let mut dead = read(&bus, &Names::dlq(&names.eager_expired_queue()), &stop);
        let command = weft::messages::Command::TimerFired(weft::messages::TimerFired {
            timer_id: Uuid::new_v4(),
            run_id: Uuid::new_v4(),
        });
        let not_a_task = Envelope::new("wf", None, &command).unwrap();
        let valid = task("shout", "SIMPLE", "ok");
        let (a, b) = (not_a_task.to_bytes().unwrap(), valid.to_bytes().unwrap());
        let mixed = ActivityTaskBatch::encode(&[(&b, None), (&a, None)]).unwrap();
        let expired = names.eager_expired_queue();
        bus.publish_bytes("", &expired, &a, None).await.unwrap();
        bus.publish_bytes("", &expired, &mixed, None).await.unwrap();

        let within = Duration::from_secs(20);
        let first = tokio::time::timeout(within, dead.recv())
            .await
            .expect("in time")
            .unwrap();
        assert_eq!(first.envelope.id, not_a_task.id);
        let second = tokio::time::timeout(within, dead.recv())
            .await
            .expect("in time")
            .unwrap();
        assert_eq!(
            second.envelope.kind, "ActivityTasks",
            "the batch, for an operator to see"
        );
        let sent_on = tokio::time::timeout(within, shout.recv())
            .await
            .expect("in time")
            .unwrap();
        assert_eq!(sent_on.envelope, valid, "its valid task went on");
        stop.cancel();
        let _ = splitter.await;
        bus.teardown(&[]).await.unwrap();
    }
}
