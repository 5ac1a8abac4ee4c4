//! Eager tasks sent together (docs/eager-dispatch.md, "Eager tasks sent together").
//!
//! Under load the committer joins many shards' batches, and most of their eager tasks go
//! to the same few queues (one per worker process and task). Each would be a persistent
//! message of its own: the broker's work per message, not per byte, is what a run costs
//! it. So eager tasks are sent through this process-wide sender, which keeps one round of
//! messages in flight per eager queue (`weft::bus::together`): whatever waited for a
//! queue's confirm goes as one `ActivityTasks` message. Only to a worker whose offer says
//! it takes batches; one message a task, at once, otherwise. A task that waited
//! [`weft::bus::together::MAX_WAIT`] behind a confirm that does not come is not sent: its
//! outbox row stays for the sweeper, which publishes rows older than
//! `WEFT_OUTBOX_SWEEP_AFTER_MS` (5 s by default). Sending it as well would put it at its
//! worker twice.

use uuid::Uuid;
use weft::activity_batch::TASKS_KIND;
use weft::bus::together::{Publisher, Together};
use weft::bus::Bus;
use weft::store::outbox::{publish_together, OutboxMessage};
use weft::Error;

/// Tasks sent together at most.
pub const MAX_SENT_TOGETHER: usize = weft::activity_batch::MAX_MESSAGES;

/// The process's sender of eager tasks; cheap to clone.
pub struct EagerBatcher<P = Bus> {
    together: Together<P>,
}

impl<P> Clone for EagerBatcher<P> {
    fn clone(&self) -> Self {
        Self {
            together: self.together.clone(),
        }
    }
}

impl<P: Publisher> EagerBatcher<P> {
    /// A sender publishing through `publisher`.
    pub fn new(publisher: P) -> Self {
        Self {
            together: Together::new(publisher, TASKS_KIND),
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
        let (together, alone): (Vec<_>, Vec<_>) = messages.into_iter().partition(|(_, t)| *t);
        // Started now, not when awaited: the tasks sent alone go side by side.
        let alone: Vec<_> = alone
            .into_iter()
            .map(|(m, _)| {
                let sending = self.together.publisher().publish(
                    &m.exchange,
                    &m.routing_key,
                    m.body,
                    m.traceparent,
                );
                (m.id, tokio::spawn(sending))
            })
            .collect();
        // Those that go together are queued at once, so that a commit's tasks for an
        // idle queue start one round, not one round and then the rest.
        let together = together.into_iter().map(|(m, _)| m).collect();
        let (mut sent, mut first) = publish_together(&self.together, together).await;
        for (id, sending) in alone {
            let answer = sending
                .await
                .unwrap_or_else(|e| Err(Error::Bus(format!("publishing an eager task: {e}"))));
            match answer {
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
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use serde_json::json;
    use tokio::sync::Notify;
    use weft::bus::together::{Sending, MAX_WAIT};
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

    /// The recorder as the batcher's publisher (a local type: `Publisher` is `weft`'s).
    #[derive(Clone, Default)]
    struct Shared(Arc<Recorder>);

    impl std::ops::Deref for Shared {
        type Target = Recorder;
        fn deref(&self) -> &Recorder {
            &self.0
        }
    }

    impl Publisher for Shared {
        fn publish(
            &self,
            _exchange: &str,
            routing_key: &str,
            body: Vec<u8>,
            _traceparent: Option<String>,
        ) -> Sending {
            let envelope: Envelope = serde_json::from_slice(&body).expect("an envelope");
            let recorder = self.0.clone();
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
            results_together: false,
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
        batcher: &EagerBatcher<Shared>,
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
    ) -> (Shared, EagerBatcher<Shared>, Publishing) {
        let recorder = Shared::default();
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
        assert_eq!(batcher.together.in_flight(), 0, "idle queues are forgotten");
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
            matches!(outcome, Err(Error::Bus(ref m)) if m.contains("not sent")),
            "{outcome:?}"
        );
        assert_eq!(recorder.sent().len(), 1, "only a was published");
    }
}
