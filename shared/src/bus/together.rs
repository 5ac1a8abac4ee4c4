//! Messages sent together: one round of messages in flight per destination.
//!
//! The broker's work is per message, not per byte, and messages are what a run costs it
//! (BENCHMARKS.md). So a sender that would put many small messages on the same queue —
//! the decider's eager tasks for one worker's queue, a worker's results for one command
//! shard — sends through a [`Together`]: a message for a destination whose last round the
//! broker has not confirmed yet waits, and whatever waited goes as one message of the
//! sender's batch type ([`crate::activity_batch`], at most
//! [`crate::activity_batch::MAX_MESSAGES`] a message) when the confirm comes. A
//! destination with nothing in flight sends at once, so a quiet system waits for nothing;
//! a busy one sends fewer, larger messages, as many as its confirms allow. Each message is
//! answered with the confirm of the message it went in.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::Bus;
use crate::activity_batch::{self, MAX_MESSAGES};
use crate::{Error, Result};

/// By default, a message that waited this long behind a message in flight (a confirm that
/// does not come: the broker is in trouble) is not sent but answered with an error: its
/// sender has a slower way that does not send it twice (the decider's outbox sweeper).
/// See [`Together::with_max_wait`].
pub const MAX_WAIT: Duration = Duration::from_secs(2);

/// The bodies one message sent together carries at most, in bytes: far under a broker's
/// largest message, so that a few large results do not make one message too large to
/// send (a message over it goes alone).
pub const MAX_GROUP_BYTES: usize = 1 << 20;

/// A message published and confirmed (or not).
pub type Sending = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

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

/// One message to send: an encoded envelope, where it goes and its trace context.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The exchange.
    pub exchange: String,
    /// The routing key (with the exchange, the destination).
    pub routing_key: String,
    /// The encoded envelope.
    pub body: Vec<u8>,
    /// Its W3C trace context.
    pub traceparent: Option<String>,
}

/// A sender of messages that go together per destination; cheap to clone.
pub struct Together<P = Bus> {
    publisher: Arc<P>,
    kind: &'static str,
    max_wait: Duration,
    destinations: Arc<Mutex<Destinations>>,
}

impl<P> std::fmt::Debug for Together<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Together")
            .field("kind", &self.kind)
            .field("max_wait", &self.max_wait)
            .finish_non_exhaustive()
    }
}

impl<P> Clone for Together<P> {
    fn clone(&self) -> Self {
        Self {
            publisher: self.publisher.clone(),
            kind: self.kind,
            max_wait: self.max_wait,
            destinations: self.destinations.clone(),
        }
    }
}

/// Each destination, `(exchange, routing key)`, with a message in flight, and what waits
/// for its confirm.
type Destinations = HashMap<(String, String), Vec<Waiting>>;

struct Waiting {
    message: Outgoing,
    done: oneshot::Sender<Result<()>>,
    since: Instant,
}

/// Forgets a destination when its sender ends without doing so (a panic), failing what
/// waits for it: otherwise every later message for it would wait for a sender that is
/// gone.
struct Forget {
    destinations: Arc<Mutex<Destinations>>,
    key: (String, String),
    armed: bool,
}

impl Drop for Forget {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut destinations = self.destinations.lock().unwrap_or_else(|p| p.into_inner());
        for waiting in destinations.remove(&self.key).unwrap_or_default() {
            let _ = waiting.done.send(Err(Error::Bus(
                "the sender of its destination failed".into(),
            )));
        }
    }
}

impl<P: Publisher> Together<P> {
    /// A sender publishing through `publisher`, several messages as one envelope of type
    /// `kind` (an [`activity_batch`] type).
    pub fn new(publisher: P, kind: &'static str) -> Self {
        Self {
            publisher: Arc::new(publisher),
            kind,
            max_wait: MAX_WAIT,
            destinations: Arc::default(),
        }
    }

    /// The same sender, answering a message that waited `max_wait` behind one in flight
    /// with an error instead of [`MAX_WAIT`]: for a sender without a slower way, as long
    /// as a publish of its own would wait for its confirm.
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// The publisher.
    pub fn publisher(&self) -> &Arc<P> {
        &self.publisher
    }

    /// Queues `message` for its destination (sent at once when nothing is in flight
    /// there) and returns its answer: the confirm of the message it went in.
    pub fn send(&self, message: Outgoing) -> impl Future<Output = Result<()>> + Send {
        let mut answers = self.send_all(vec![message]);
        let answer = answers.pop();
        async move {
            match answer {
                Some(answer) => answer.await,
                None => Err(Error::Bus("nothing was queued".into())),
            }
        }
    }

    /// [`Together::send`] of several messages, queued at once: those for an idle
    /// destination start their round together. One answer a message, in order.
    pub fn send_all(
        &self,
        messages: Vec<Outgoing>,
    ) -> Vec<impl Future<Output = Result<()>> + Send + 'static> {
        let mut answers = Vec::with_capacity(messages.len());
        let mut idle = Vec::new();
        {
            let mut destinations = self.lock();
            for message in messages {
                let (done, answer) = oneshot::channel();
                answers.push(answer);
                let key = (message.exchange.clone(), message.routing_key.clone());
                // An entry exists exactly while a round of its destination is on its way.
                let waiting = destinations.entry(key.clone()).or_insert_with(|| {
                    idle.push(key);
                    Vec::new()
                });
                waiting.push(Waiting {
                    message,
                    done,
                    since: Instant::now(),
                });
            }
        }
        for key in idle {
            tokio::spawn(self.clone().send_destination(key));
        }
        answers
            .into_iter()
            .map(|answer| async move {
                answer
                    .await
                    .unwrap_or_else(|_| Err(Error::Bus("the sender stopped".into())))
            })
            .collect()
    }

    /// Sends what waits for `key`, one round at a time, until nothing waits; then forgets
    /// the destination. Should it end otherwise (a panic), the guard forgets the
    /// destination and fails what waits, so that the next message starts a new sender.
    async fn send_destination(self, key: (String, String)) {
        let mut guard = Forget {
            destinations: self.destinations.clone(),
            key: key.clone(),
            armed: true,
        };
        loop {
            let taken = {
                let mut destinations = self.lock();
                let waiting = destinations.get_mut(&key).filter(|w| !w.is_empty());
                let Some(waiting) = waiting else {
                    // Forgotten under the lock: a message queued after this starts a new
                    // sender, whose entry the guard must leave alone.
                    destinations.remove(&key);
                    guard.armed = false;
                    return;
                };
                std::mem::take(waiting)
            };
            self.send_round(taken).await;
        }
    }

    /// Publishes `taken` in messages of up to [`MAX_MESSAGES`], side by side (a backlog
    /// above that goes as several messages in one round), each answered with its
    /// message's confirm; those that waited longer than the sender's longest wait are
    /// answered with an error instead.
    async fn send_round(&self, taken: Vec<Waiting>) {
        // A caller that stopped waiting (a worker giving its task back at shutdown) does
        // not want its message sent any more: it would only be sent twice.
        let (stale, fresh): (Vec<Waiting>, Vec<Waiting>) = taken
            .into_iter()
            .filter(|w| !w.done.is_closed())
            .partition(|w| w.since.elapsed() >= self.max_wait);
        for waiting in stale {
            let late = format!("waited over {:?} for a confirm; not sent", self.max_wait);
            let _ = waiting.done.send(Err(Error::Bus(late)));
        }
        // Groups of at most MAX_MESSAGES and MAX_GROUP_BYTES; a message larger than that
        // goes alone.
        let mut groups: Vec<Vec<Waiting>> = Vec::new();
        let mut bytes = 0;
        for waiting in fresh {
            let size = waiting.message.body.len();
            let full = groups
                .last()
                .is_none_or(|g| g.len() >= MAX_MESSAGES || bytes + size > MAX_GROUP_BYTES);
            if full {
                groups.push(Vec::new());
                bytes = 0;
            }
            bytes += size;
            groups.last_mut().expect("a group").push(waiting);
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

    /// One message: the message alone as it was encoded, or one of this sender's type
    /// around them all.
    async fn send_group(&self, group: &[Waiting]) -> Result<()> {
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
        let body = activity_batch::encode(self.kind, &parts)?;
        self.publisher
            .publish(&first.exchange, &first.routing_key, body, None)
            .await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Destinations> {
        // A poisoned lock only means a panic elsewhere; the map itself stays usable.
        self.destinations.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Destinations with a message in flight.
    pub fn in_flight(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::sync::Notify;

    use super::*;
    use crate::activity_batch::{ActivityResultBatch, RESULTS_KIND};
    use crate::Envelope;

    /// Records each message published (its destination and envelope) and holds every
    /// confirm until released.
    #[derive(Default)]
    struct Recorder {
        sent: Mutex<Vec<(String, String, Envelope)>>,
        release: Notify,
        confirmed: AtomicUsize,
        /// The next publish panics instead of being confirmed.
        panics: std::sync::atomic::AtomicBool,
    }

    impl Publisher for Arc<Recorder> {
        fn publish(
            &self,
            exchange: &str,
            routing_key: &str,
            body: Vec<u8>,
            _traceparent: Option<String>,
        ) -> Sending {
            let envelope = Envelope::from_bytes(&body).expect("an envelope");
            let recorder = self.clone();
            let sent = (exchange.to_owned(), routing_key.to_owned(), envelope);
            recorder.sent.lock().unwrap().push(sent);
            let panics = recorder.panics.swap(false, Ordering::SeqCst);
            Box::pin(async move {
                assert!(!panics, "the publisher panicked");
                recorder.release.notified().await;
                recorder.confirmed.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
        }
    }

    fn result(exchange: &str, key: &str, n: u32) -> Outgoing {
        sized(exchange, key, n, 0)
    }

    /// A result whose body carries `padding` bytes more.
    fn sized(exchange: &str, key: &str, n: u32, padding: usize) -> Outgoing {
        let mut envelope = Envelope::new(
            &format!("wf-{n}"),
            None,
            &crate::messages::Command::WithdrawOffer(crate::messages::WithdrawOffer {
                queue_prefix: format!("p{n}{}", "x".repeat(padding)),
            }),
        )
        .unwrap();
        envelope.kind = "ActivityCompleted".into();
        Outgoing {
            exchange: exchange.into(),
            routing_key: key.into(),
            body: envelope.to_bytes().unwrap(),
            traceparent: None,
        }
    }

    async fn until_sent(recorder: &Recorder, n: usize) {
        while recorder.sent.lock().unwrap().len() < n {
            tokio::task::yield_now().await;
        }
    }

    /// Releases confirms until each of `answers` is done.
    async fn confirm_until_done<T>(recorder: &Recorder, answers: &[&tokio::task::JoinHandle<T>]) {
        while answers.iter().any(|a| !a.is_finished()) {
            recorder.release.notify_waiters();
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn messages_for_a_destination_with_one_in_flight_go_as_one_of_the_senders_type() {
        let recorder = Arc::new(Recorder::default());
        let together = Together::new(recorder.clone(), RESULTS_KIND);
        let first = tokio::spawn(together.send(result("cmd", "3", 0)));
        until_sent(&recorder, 1).await;
        // Two more for shard 3 while 0's confirm is awaited; one for shard 4 and one for
        // the same key on another exchange go at once (nothing in flight there).
        let waiting: Vec<_> = [
            ("cmd", "3", 1),
            ("cmd", "4", 2),
            ("cmd", "3", 3),
            ("x", "3", 4),
        ]
        .into_iter()
        .map(|(e, k, n)| tokio::spawn(together.send(result(e, k, n))))
        .collect();
        until_sent(&recorder, 3).await;
        assert_eq!(together.in_flight(), 3);
        let mut all: Vec<_> = waiting.iter().collect();
        all.push(&first);
        confirm_until_done(&recorder, &all).await;
        first.await.unwrap().unwrap();
        for w in waiting {
            w.await.unwrap().unwrap();
        }
        let sent = recorder.sent.lock().unwrap();
        let shape: Vec<(&str, &str, Vec<String>)> = sent
            .iter()
            .map(|(e, k, envelope)| {
                let workflows = match envelope.kind.as_str() {
                    RESULTS_KIND => ActivityResultBatch::unpack(envelope)
                        .unwrap()
                        .into_iter()
                        .map(|m| m.envelope.workflow_id)
                        .collect(),
                    _ => vec![envelope.workflow_id.clone()],
                };
                (e.as_str(), k.as_str(), workflows)
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("cmd", "3", vec!["wf-0".to_owned()]),
                ("cmd", "4", vec!["wf-2".to_owned()]),
                ("x", "3", vec!["wf-4".to_owned()]),
                ("cmd", "3", vec!["wf-1".to_owned(), "wf-3".to_owned()]),
            ]
        );
        assert_eq!(together.in_flight(), 0, "idle destinations are forgotten");
    }

    /// What waited for its turn longer than the sender's wait is not sent but answered
    /// with an error; within it, it goes, behind the message in flight.
    #[tokio::test]
    async fn what_waits_is_sent_only_within_the_senders_wait() {
        let recorder = Arc::new(Recorder::default());
        let never = Together::new(recorder.clone(), RESULTS_KIND).with_max_wait(Duration::ZERO);
        let refused = never.send(result("cmd", "0", 0)).await;
        assert!(
            matches!(&refused, Err(Error::Bus(m)) if m.contains("not sent")),
            "{refused:?}"
        );
        assert!(recorder.sent.lock().unwrap().is_empty());

        let together = Together::new(recorder.clone(), RESULTS_KIND).with_max_wait(MAX_WAIT);
        let first = tokio::spawn(together.send(result("cmd", "0", 1)));
        until_sent(&recorder, 1).await;
        let late = tokio::spawn(together.send(result("cmd", "0", 2)));
        confirm_until_done(&recorder, &[&first, &late]).await;
        first.await.unwrap().unwrap();
        late.await.unwrap().unwrap();
        assert_eq!(recorder.sent.lock().unwrap().len(), 2);
        assert_eq!(recorder.confirmed.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_message_whose_caller_stopped_waiting_is_not_sent() {
        let recorder = Arc::new(Recorder::default());
        let together = Together::new(recorder.clone(), RESULTS_KIND);
        let first = tokio::spawn(together.send(result("cmd", "0", 0)));
        until_sent(&recorder, 1).await;
        drop(together.send(result("cmd", "0", 1)));
        let kept = tokio::spawn(together.send(result("cmd", "0", 2)));
        confirm_until_done(&recorder, &[&first, &kept]).await;
        kept.await.unwrap().unwrap();
        let workflows: Vec<String> = recorder
            .sent
            .lock()
            .unwrap()
            .iter()
            .map(|(_, _, e)| e.workflow_id.clone())
            .collect();
        assert_eq!(workflows, ["wf-0", "wf-2"], "the given-up message left out");
    }

    #[tokio::test]
    async fn messages_too_large_together_go_in_several_messages() {
        let recorder = Arc::new(Recorder::default());
        let together = Together::new(recorder.clone(), RESULTS_KIND);
        let first = tokio::spawn(together.send(result("cmd", "0", 0)));
        until_sent(&recorder, 1).await;
        let large = MAX_GROUP_BYTES * 3 / 5;
        let answers: Vec<_> = together
            .send_all(vec![
                sized("cmd", "0", 1, large),
                result("cmd", "0", 2),
                sized("cmd", "0", 3, large),
                result("cmd", "0", 4),
            ])
            .into_iter()
            .map(tokio::spawn)
            .collect();
        let mut waiting: Vec<_> = answers.iter().collect();
        waiting.push(&first);
        confirm_until_done(&recorder, &waiting).await;
        for answer in answers {
            answer.await.unwrap().unwrap();
        }
        let sizes: Vec<usize> = recorder
            .sent
            .lock()
            .unwrap()
            .iter()
            .map(|(_, _, e)| match e.kind.as_str() {
                RESULTS_KIND => ActivityResultBatch::unpack(e).unwrap().len(),
                _ => 1,
            })
            .collect();
        assert_eq!(
            sizes,
            [1, 2, 2],
            "no message over {MAX_GROUP_BYTES} bytes of bodies"
        );
    }

    #[tokio::test]
    async fn a_sender_that_fails_leaves_its_destination_to_the_next_message() {
        let recorder = Arc::new(Recorder::default());
        recorder.panics.store(true, Ordering::SeqCst);
        let together = Together::new(recorder.clone(), RESULTS_KIND);
        let failed = together.send(result("cmd", "0", 0)).await;
        assert!(failed.is_err(), "{failed:?}");
        assert_eq!(together.in_flight(), 0, "the destination is forgotten");
        let next = tokio::spawn(together.send(result("cmd", "0", 1)));
        confirm_until_done(&recorder, &[&next]).await;
        next.await.unwrap().unwrap();
    }
}
