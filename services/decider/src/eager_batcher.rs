//! Eager tasks sent together (docs/eager-dispatch.md, "Eager tasks sent together").
//!
//! Under load the committer joins many shards' batches, and most of their eager tasks go
//! to the same few queues (one per worker process and task). Each would be a persistent
//! message of its own: the broker's work per message, not per byte, is what a run costs
//! it. So eager tasks are sent through this process-wide sender, which keeps one round of
//! messages in flight per eager queue: a task for a queue whose last round the broker has
//! not confirmed yet waits, and whatever waited goes as one `ActivityTasks` message (32
//! tasks at most) when the confirm comes. A queue with nothing in flight sends at once,
//! so a quiet system waits for nothing; a busy one sends fewer, larger messages, as many
//! as its confirms allow. Only to a worker whose offer says it takes batches; one message
//! a task, at once, otherwise.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::oneshot;
use uuid::Uuid;
use weft::bus::Bus;
use weft::messages::ActivityTaskBatch;
use weft::store::outbox::OutboxMessage;
use weft::Error;

/// Tasks sent together at most.
pub const MAX_SENT_TOGETHER: usize = weft::activity_batch::MAX_MESSAGES;

/// A task that waited this long behind a message in flight (a confirm that does not come:
/// the broker is in trouble) is not sent: its outbox row stays for the sweeper, which
/// publishes rows older than `WEFT_OUTBOX_SWEEP_AFTER_MS` (5 s by default). Sending it
/// as well would put it at its worker twice.
const MAX_WAIT: Duration = Duration::from_secs(2);

/// A message published and confirmed (or not).
type Sending = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// Where the messages go: the bus, or a test's recorder.
pub trait Publisher: Send + Sync + 'static {
    /// Publishes `body` (persistent, confirmed) to `exchange` with `routing_key`.
    fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        body: Vec<u8>,
        traceparent: Option<String>,
    ) -> Sending;
}

impl Publisher for Bus {
    fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        body: Vec<u8>,
        traceparent: Option<String>,
    ) -> Sending {
        let (bus, exchange, key) = (self.clone(), exchange.to_owned(), routing_key.to_owned());
        Box::pin(async move {
            bus.publish_with_id(&exchange, &key, &body, None, traceparent.as_deref())
                .await
        })
    }
}

/// The process's sender of eager tasks; cheap to clone.
pub struct EagerBatcher<P = Bus> {
    publisher: Arc<P>,
    queues: Arc<Mutex<HashMap<String, Queue>>>,
}

impl<P> Clone for EagerBatcher<P> {
    fn clone(&self) -> Self {
        Self {
            publisher: self.publisher.clone(),
            queues: self.queues.clone(),
        }
    }
}

/// One eager queue's tasks waiting for its message in flight.
#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
}

struct Waiting {
    message: OutboxMessage,
    done: oneshot::Sender<Result<(), Error>>,
    since: Instant,
}

impl<P: Publisher> EagerBatcher<P> {
    /// A sender publishing through `publisher`.
    pub fn new(publisher: P) -> Self {
        Self {
            publisher: Arc::new(publisher),
            queues: Arc::default(),
        }
    }

    /// Publishes eager tasks (each with whether its worker takes batches): those of
    /// workers that do together with other tasks for the same queue where they meet, the
    /// others at once, alone. Returns, as `weft::store::outbox::publish_messages` does,
    /// the ids of the confirmed ones and the first failure.
    pub async fn publish(
        &self,
        messages: Vec<(OutboxMessage, bool)>,
    ) -> (Vec<Uuid>, Result<(), Error>) {
        let mut answers = Vec::with_capacity(messages.len());
        let mut idle = Vec::new();
        {
            let mut queues = self.lock();
            for (message, together) in messages {
                let (done, answer) = oneshot::channel();
                answers.push((message.id, answer));
                if !together {
                    let publisher = self.publisher.clone();
                    tokio::spawn(async move {
                        let m = message;
                        let sent = publisher
                            .publish(&m.exchange, &m.routing_key, m.body, m.traceparent)
                            .await;
                        let _ = done.send(sent);
                    });
                    continue;
                }
                let key = message.routing_key.clone();
                // An entry exists exactly while a message of its queue is in flight.
                let queue = queues.entry(key.clone()).or_insert_with(|| {
                    idle.push(key);
                    Queue::default()
                });
                queue.waiting.push(Waiting {
                    message,
                    done,
                    since: Instant::now(),
                });
            }
        }
        for key in idle {
            tokio::spawn(self.clone().send_queue(key));
        }
        let mut sent = Vec::with_capacity(answers.len());
        let mut first = Ok(());
        for (id, answer) in answers {
            let outcome = answer
                .await
                .unwrap_or_else(|_| Err(Error::Bus("the eager sender stopped".into())));
            match outcome {
                Ok(()) => sent.push(id),
                Err(e) => {
                    if first.is_ok() {
                        first = Err(e);
                    }
                }
            }
        }
        (sent, first)
    }

    /// Sends what waits for `key`, one message (or group of messages) at a time, until
    /// nothing waits; then forgets the queue.
    async fn send_queue(self, key: String) {
        loop {
            let taken = {
                let mut queues = self.lock();
                let Some(queue) = queues.get_mut(&key) else {
                    return;
                };
                if queue.waiting.is_empty() {
                    queues.remove(&key);
                    return;
                }
                std::mem::take(&mut queue.waiting)
            };
            self.send(taken).await;
        }
    }

    /// Publishes `taken` in messages of up to [`MAX_SENT_TOGETHER`] tasks, side by
    /// side (a backlog above that goes as several messages in one round), each task
    /// answered with its message's confirm; those that waited longer than [`MAX_WAIT`]
    /// are answered with an error instead (left to the sweeper).
    async fn send(&self, taken: Vec<Waiting>) {
        let (stale, fresh): (Vec<Waiting>, Vec<Waiting>) = taken
            .into_iter()
            .partition(|w| w.since.elapsed() >= MAX_WAIT);
        for waiting in stale {
            let late =
                format!("waited over {MAX_WAIT:?} for a confirm; left to the outbox sweeper");
            let _ = waiting.done.send(Err(Error::Bus(late)));
        }
        let mut groups: Vec<Vec<Waiting>> = Vec::new();
        let mut fresh = fresh.into_iter().peekable();
        while fresh.peek().is_some() {
            groups.push(fresh.by_ref().take(MAX_SENT_TOGETHER).collect());
        }
        let sends = groups.into_iter().map(|group| async move {
            let outcome = self.send_group(&group).await;
            for waiting in group {
                let answer = match &outcome {
                    Ok(()) => Ok(()),
                    Err(e) => Err(Error::Bus(e.to_string())),
                };
                let _ = waiting.done.send(answer);
            }
        });
        futures_util::future::join_all(sends).await;
    }

    /// One message: the task alone as it was encoded, or an `ActivityTasks` of them all.
    async fn send_group(&self, group: &[Waiting]) -> Result<(), Error> {
        let first = &group[0].message;
        if group.len() == 1 {
            return self
                .publisher
                .publish(
                    &first.exchange,
                    &first.routing_key,
                    first.body.clone(),
                    first.traceparent.clone(),
                )
                .await;
        }
        let parts: Vec<(&[u8], Option<&str>)> = group
            .iter()
            .map(|w| (w.message.body.as_slice(), w.message.traceparent.as_deref()))
            .collect();
        let body = ActivityTaskBatch::encode(&parts)?;
        self.publisher
            .publish(&first.exchange, &first.routing_key, body, None)
            .await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Queue>> {
        // A poisoned lock only means a panic elsewhere; the map itself stays usable.
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use serde_json::json;
    use tokio::sync::Notify;
    use weft::messages::{ActivityMessage, ActivityTask};
    use weft::Envelope;

    use super::*;

    /// Records what is published; holds every confirm until released (the broker's
    /// confirm in flight), failing them when told to.
    #[derive(Default)]
    struct Recorder {
        sent: Mutex<Vec<(String, Envelope)>>,
        release: Notify,
        fail: AtomicBool,
    }

    impl Publisher for Arc<Recorder> {
        fn publish(
            &self,
            _exchange: &str,
            routing_key: &str,
            body: Vec<u8>,
            _traceparent: Option<String>,
        ) -> Sending {
            let envelope: Envelope = serde_json::from_slice(&body).expect("an envelope");
            let recorder = self.clone();
            let key = routing_key.to_owned();
            recorder.sent.lock().unwrap().push((key, envelope));
            Box::pin(async move {
                recorder.release.notified().await;
                match recorder.fail.load(Ordering::SeqCst) {
                    true => Err(Error::Bus("refused".into())),
                    false => Ok(()),
                }
            })
        }
    }

    impl Recorder {
        /// What was published: per message, its queue and the task refs in it.
        fn sent(&self) -> Vec<(String, Vec<String>)> {
            let refs = |envelope: &Envelope| match envelope.decode().unwrap() {
                ActivityMessage::ActivityTask(t) => vec![t.task_ref],
                ActivityMessage::ActivityTasks(b) => b
                    .into_tasks()
                    .unwrap()
                    .into_iter()
                    .map(|(t, _)| t.task_ref)
                    .collect(),
            };
            let sent = self.sent.lock().unwrap();
            sent.iter().map(|(k, e)| (k.clone(), refs(e))).collect()
        }
    }

    fn task(queue: &str, task_ref: &str) -> OutboxMessage {
        let task = ActivityTask {
            task_id: Uuid::new_v4(),
            workflow_id: format!("wf-{task_ref}"),
            run_id: Uuid::new_v4(),
            task_ref: task_ref.into(),
            task_name: "shout".into(),
            task_type: "SIMPLE".into(),
            attempt: 1,
            input: json!({}),
            reply_to: "0".into(),
            scheduled_at: chrono::Utc::now(),
            response_timeout_seconds: 0,
            eager: true,
        };
        let (workflow_id, run_id) = (task.workflow_id.clone(), task.run_id);
        let envelope = Envelope::new(
            &workflow_id,
            Some(run_id),
            &ActivityMessage::ActivityTask(task),
        )
        .unwrap();
        OutboxMessage::new("ns.eager".into(), queue.into(), &envelope, None).unwrap()
    }

    async fn until_sent(recorder: &Recorder, n: usize) {
        while recorder.sent.lock().unwrap().len() < n {
            tokio::task::yield_now().await;
        }
    }

    type Publishing = tokio::task::JoinHandle<(Vec<Uuid>, Result<(), Error>)>;

    /// `batcher.publish(messages)` on a task of its own.
    fn spawn_publish(
        batcher: &EagerBatcher<Arc<Recorder>>,
        messages: Vec<(OutboxMessage, bool)>,
    ) -> Publishing {
        let batcher = batcher.clone();
        tokio::spawn(async move { batcher.publish(messages).await })
    }

    /// A batcher whose queue `queue` has task `task_ref` in flight (sent at once, alone:
    /// nothing else was).
    async fn one_in_flight(
        queue: &str,
        task_ref: &str,
        failing: bool,
    ) -> (Arc<Recorder>, EagerBatcher<Arc<Recorder>>, Publishing) {
        let recorder = Arc::new(Recorder::default());
        recorder.fail.store(failing, Ordering::SeqCst);
        let batcher = EagerBatcher::new(recorder.clone());
        let first = spawn_publish(&batcher, vec![(task(queue, task_ref), true)]);
        until_sent(&recorder, 1).await;
        (recorder, batcher, first)
    }

    /// Confirms whatever is in flight until every one of `publishing` has its answer.
    async fn confirm_until_answered(recorder: &Recorder, publishing: &[&Publishing]) {
        while publishing.iter().any(|p| !p.is_finished()) {
            recorder.release.notify_waiters();
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn tasks_that_meet_a_message_in_flight_go_together_after_its_confirm() {
        // A quiet queue: the first task goes at once, alone.
        let (recorder, batcher, first) = one_in_flight("q1", "a", false).await;
        // Three more for q1 while a's confirm is awaited, one for q2 (nothing in flight
        // there: at once), and one for q1 whose worker takes no batches (at once too:
        // nothing to wait for).
        let second = spawn_publish(
            &batcher,
            vec![
                (task("q1", "b"), true),
                (task("q2", "x"), true),
                (task("q1", "c"), true),
            ],
        );
        let third = spawn_publish(
            &batcher,
            vec![(task("q1", "d"), true), (task("q1", "lone"), false)],
        );
        until_sent(&recorder, 3).await;
        tokio::task::yield_now().await;
        let mut at_once = recorder.sent();
        at_once.sort();
        assert_eq!(
            at_once,
            [
                ("q1".into(), vec!["a".into()]),
                ("q1".into(), vec!["lone".into()]),
                ("q2".into(), vec!["x".into()]),
            ],
            "nothing more of those that take batches for q1 while its message is in flight"
        );

        // Confirms come one release at a time; a's releases q1's next round.
        confirm_until_answered(&recorder, &[&first, &second, &third]).await;
        let (sent, outcome) = first.await.unwrap();
        assert!(outcome.is_ok() && sent.len() == 1);
        let (sent, outcome) = second.await.unwrap();
        assert!(outcome.is_ok() && sent.len() == 3, "{outcome:?}");
        let (sent, outcome) = third.await.unwrap();
        assert!(outcome.is_ok() && sent.len() == 2, "{outcome:?}");
        assert_eq!(
            recorder.sent().split_off(3),
            [("q1".into(), vec!["b".into(), "c".into(), "d".into()])],
            "what waited for q1 goes as one message"
        );
        assert!(batcher.lock().is_empty(), "idle queues are forgotten");
    }

    #[tokio::test]
    async fn a_message_not_confirmed_fails_every_task_in_it() {
        let (recorder, batcher, first) = one_in_flight("q", "a", true).await;
        let second = spawn_publish(
            &batcher,
            vec![(task("q", "b"), true), (task("q", "c"), true)],
        );
        confirm_until_answered(&recorder, &[&first, &second]).await;
        let (sent, outcome) = second.await.unwrap();
        assert!(sent.is_empty() && outcome.is_err(), "{sent:?} {outcome:?}");
        assert_eq!(recorder.sent().len(), 2, "a alone, then b and c together");
    }

    #[tokio::test]
    async fn no_more_than_the_bound_go_in_one_message() {
        let (recorder, batcher, first) = one_in_flight("q", "first", false).await;
        let many: Vec<_> = (0..MAX_SENT_TOGETHER + 3)
            .map(|i| (task("q", &format!("t{i}")), true))
            .collect();
        let rest = spawn_publish(&batcher, many);
        confirm_until_answered(&recorder, &[&first, &rest]).await;
        let sizes: Vec<usize> = recorder.sent().iter().map(|(_, r)| r.len()).collect();
        assert_eq!(sizes, [1, MAX_SENT_TOGETHER, 3]);
    }

    /// A confirm that does not come for long: what waited behind it is not sent, but
    /// left to the outbox sweeper (which would send it too).
    #[tokio::test(start_paused = true)]
    async fn what_waited_too_long_behind_a_message_in_flight_is_left_to_the_sweeper() {
        let (recorder, batcher, first) = one_in_flight("q", "a", false).await;
        let late = spawn_publish(&batcher, vec![(task("q", "late"), true)]);
        tokio::task::yield_now().await;
        tokio::time::advance(MAX_WAIT).await;
        confirm_until_answered(&recorder, &[&first, &late]).await;
        let (sent, outcome) = late.await.unwrap();
        assert!(sent.is_empty(), "{sent:?}");
        assert!(
            matches!(outcome, Err(Error::Bus(ref m)) if m.contains("sweeper")),
            "{outcome:?}"
        );
        assert_eq!(recorder.sent().len(), 1, "only a was published");
    }
}
