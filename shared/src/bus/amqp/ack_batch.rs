//! One acknowledgement for many deliveries of a consumer's channel.
//!
//! The broker's work per message includes settling it: an acknowledgement for each
//! delivery costs it about a third of what a persistent message costs in all, one
//! `basic.ack` with `multiple` for many costs it about as much as one
//! (`weft-bench-broker --ack-every`, BENCHMARKS.md). So acknowledgements that meet while
//! one of their channel is being written go out together in the next round: the longest
//! run of acknowledged deliveries from the oldest one still open, as ONE `multiple`
//! acknowledgement by its newest; the acknowledged deliveries behind a delivery still
//! open, one each (a long handler must not hold back the others' acknowledgements, nor the
//! consumer's prefetch window). A quiet consumer waits for nothing: a round starts as soon
//! as nothing is being written.
//!
//! A `multiple` acknowledgement settles, at the broker, every open delivery of the channel
//! up to its tag. It is only sent for a run in which every delivery was acknowledged by
//! its handler; a delivery whose handler has not settled it (running, or dropped
//! unsettled at shutdown) ends every run, so it is never acknowledged on another's behalf.
//! Requeued and dead-lettered deliveries are settled one by one, as before, and leave the
//! open set once settled.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex};

use tokio::sync::oneshot;

use super::consume::Delivery;

/// `basic.ack` frames sent by this process's consumers (exported by
/// [`crate::bus::Bus::count_publishes`]).
pub(crate) static ACKS_SENT: LazyLock<prometheus_client::metrics::counter::Counter> =
    LazyLock::new(Default::default);
/// Deliveries those frames acknowledged: with [`ACKS_SENT`], how many met a round.
pub(crate) static DELIVERIES_ACKED: LazyLock<prometheus_client::metrics::counter::Counter> =
    LazyLock::new(Default::default);

/// A delivery tag of one channel.
type Tag = u64;

/// What an acknowledgement came to: `true` once sent (`false`: not sent, the channel is
/// closed or the delivery was settled before), or its error.
pub(crate) type Outcome = Result<bool, String>;

/// What sends an acknowledgement of one delivery (the delivery itself; a recorder in
/// tests).
pub(crate) trait SendAck: Send + 'static {
    /// Acknowledges this delivery, and with `multiple` every open one before it.
    fn send_ack(&self, multiple: bool) -> impl Future<Output = Outcome> + Send;
}

/// The acknowledgements of one consumer's channel.
pub(crate) struct AckBatcher<A = Arc<Delivery>> {
    state: Mutex<State<A>>,
}

struct State<A> {
    /// Every delivery handed to a handler and not settled at the broker yet, oldest first:
    /// `None` until its handler acknowledges it.
    open: BTreeMap<Tag, Option<Waiting<A>>>,
    /// A round is being sent; acknowledgements made now wait for the next one.
    sending: bool,
}

/// An acknowledged delivery waiting for its round.
struct Waiting<A> {
    acker: A,
    done: oneshot::Sender<Outcome>,
}

/// What one round sends.
struct Round<A> {
    /// The run from the oldest open delivery, acknowledged by its newest with `multiple`.
    together: Vec<Waiting<A>>,
    /// Acknowledged deliveries behind one still open, acknowledged one by one.
    alone: Vec<Waiting<A>>,
}

impl<A> Round<A> {
    fn is_empty(&self) -> bool {
        self.together.is_empty() && self.alone.is_empty()
    }
}

impl<A> State<A> {
    /// Takes every acknowledged delivery out of the open set, as the next round.
    fn take_round(&mut self) -> Round<A> {
        let mut together = Vec::new();
        while let Some(oldest) = self.open.first_entry() {
            if oldest.get().is_none() {
                break;
            }
            together.extend(oldest.remove());
        }
        // Behind the oldest open delivery: the acknowledged ones go alone, the rest stay.
        let mut alone = Vec::new();
        self.open = std::mem::take(&mut self.open)
            .into_iter()
            .filter_map(|(tag, waiting)| match waiting {
                Some(waiting) => {
                    alone.push(waiting);
                    None
                }
                None => Some((tag, None)),
            })
            .collect();
        Round { together, alone }
    }
}

impl<A: SendAck> AckBatcher<A> {
    /// A batcher for a new channel (its delivery tags start again).
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                open: BTreeMap::new(),
                sending: false,
            }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<A>> {
        // A panic while holding the lock leaves consistent data (each step is one
        // map operation): go on with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The broker handed delivery `tag` to this consumer (in tag order: the consumer's
    /// stream yields them so).
    pub(crate) fn delivered(&self, tag: Tag) {
        self.state().open.insert(tag, None);
    }

    /// Delivery `tag` was settled on its own (requeued, rejected).
    pub(crate) fn settled_alone(&self, tag: Tag) {
        self.state().open.remove(&tag);
    }

    /// Acknowledges delivery `tag` with the next round; answers once that round is sent.
    ///
    /// Rounds are sent by a task of their own, never inside a caller's future: a caller
    /// that goes away (an HTTP poll whose client hung up) must not leave a round half
    /// sent, its other waiters unanswered and the channel's rounds stopped.
    pub(crate) async fn ack(self: &Arc<Self>, tag: Tag, acker: A) -> Outcome {
        let (done, outcome) = oneshot::channel();
        let lead = {
            let mut state = self.state();
            match state.open.get_mut(&tag) {
                Some(slot @ None) => {
                    *slot = Some(Waiting { acker, done });
                    Ok(!std::mem::replace(&mut state.sending, true))
                }
                // Not open (never delivered here, or settled already): not something a
                // run may cover; acknowledged alone.
                _ => Err(acker),
            }
        };
        let lead = match lead {
            Ok(lead) => lead,
            Err(acker) => return acker.send_ack(false).await,
        };
        if lead {
            tokio::spawn(Arc::clone(self).send_rounds());
        }
        outcome
            .await
            .unwrap_or_else(|_| Err("the acknowledgement was dropped unsent".into()))
    }

    /// Sends rounds until none is left.
    async fn send_rounds(self: Arc<Self>) {
        loop {
            let round = {
                let mut state = self.state();
                let round = state.take_round();
                if round.is_empty() {
                    state.sending = false;
                    return;
                }
                round
            };
            send(round).await;
        }
    }
}

/// Sends one round and answers its waiters.
async fn send<A: SendAck>(round: Round<A>) {
    let Round { together, alone } = round;
    ACKS_SENT.inc_by((usize::from(!together.is_empty()) + alone.len()) as u64);
    DELIVERIES_ACKED.inc_by((together.len() + alone.len()) as u64);
    let together = async move {
        let Some(newest) = together.last() else {
            return;
        };
        let outcome = newest.acker.send_ack(true).await;
        for waiting in together {
            let _ = waiting.done.send(outcome.clone());
        }
    };
    let alone = futures_util::future::join_all(alone.into_iter().map(|waiting| async move {
        let outcome = waiting.acker.send_ack(false).await;
        let _ = waiting.done.send(outcome);
    }));
    futures_util::future::join(together, alone).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records `(tag, multiple)` of each acknowledgement sent; each send waits for `gate`
    /// to be opened (so that acknowledgements can meet a round being sent).
    #[derive(Clone)]
    struct Recorder {
        tag: Tag,
        sent: Arc<Mutex<Vec<(Tag, bool)>>>,
        gate: Arc<tokio::sync::Semaphore>,
    }

    impl SendAck for Recorder {
        async fn send_ack(&self, multiple: bool) -> Outcome {
            let _permit = self.gate.acquire().await.map_err(|e| e.to_string())?;
            self.sent.lock().unwrap().push((self.tag, multiple));
            Ok(true)
        }
    }

    struct Channel {
        batcher: Arc<AckBatcher<Recorder>>,
        sent: Arc<Mutex<Vec<(Tag, bool)>>>,
        gate: Arc<tokio::sync::Semaphore>,
    }

    impl Channel {
        fn new(delivered: std::ops::RangeInclusive<Tag>, open_gate: bool) -> Self {
            let batcher = AckBatcher::new();
            for tag in delivered {
                batcher.delivered(tag);
            }
            let permits = if open_gate {
                tokio::sync::Semaphore::MAX_PERMITS
            } else {
                0
            };
            Self {
                batcher,
                sent: Arc::default(),
                gate: Arc::new(tokio::sync::Semaphore::new(permits)),
            }
        }

        fn ack(&self, tag: Tag) -> tokio::task::JoinHandle<Outcome> {
            let acker = Recorder {
                tag,
                sent: self.sent.clone(),
                gate: self.gate.clone(),
            };
            let batcher = self.batcher.clone();
            tokio::spawn(async move { batcher.ack(tag, acker).await })
        }

        fn sent(&self) -> Vec<(Tag, bool)> {
            self.sent.lock().unwrap().clone()
        }
    }

    /// Lets the spawned tasks run until each waits.
    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_quiet_consumers_acknowledgement_goes_at_once() {
        let channel = Channel::new(1..=1, true);
        assert_eq!(channel.ack(1).await.unwrap(), Ok(true));
        assert_eq!(channel.sent(), [(1, true)]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn acknowledgements_made_while_one_is_sent_go_as_one_multiple() {
        let channel = Channel::new(1..=5, false);
        let first = channel.ack(1);
        settle().await;
        let rest: Vec<_> = (2..=5).map(|tag| channel.ack(tag)).collect();
        settle().await;
        channel
            .gate
            .add_permits(tokio::sync::Semaphore::MAX_PERMITS >> 1);
        assert_eq!(first.await.unwrap(), Ok(true));
        for ack in rest {
            assert_eq!(ack.await.unwrap(), Ok(true));
        }
        // Delivery 1 alone (nothing met it), then 2 to 5 as one.
        assert_eq!(channel.sent(), [(1, true), (5, true)]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_caller_that_goes_away_while_its_round_is_sent_stops_nothing() {
        let channel = Channel::new(1..=3, false);
        let first = channel.ack(1);
        settle().await;
        let second = channel.ack(2);
        settle().await;
        // The first caller goes away while its round waits for the gate.
        first.abort();
        settle().await;
        channel
            .gate
            .add_permits(tokio::sync::Semaphore::MAX_PERMITS >> 1);
        let second = tokio::time::timeout(std::time::Duration::from_secs(5), second);
        assert_eq!(second.await.expect("answered").unwrap(), Ok(true));
        assert_eq!(channel.ack(3).await.unwrap(), Ok(true));
        assert_eq!(channel.sent(), [(1, true), (2, true), (3, true)]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_acknowledgement_of_a_delivery_not_open_goes_alone() {
        let channel = Channel::new(1..=2, true);
        channel.batcher.settled_alone(1);
        assert_eq!(channel.ack(1).await.unwrap(), Ok(true));
        assert_eq!(channel.ack(2).await.unwrap(), Ok(true));
        assert_eq!(channel.sent(), [(1, false), (2, true)]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_delivery_still_open_is_never_acknowledged_by_a_later_ones_multiple() {
        // 1 is held (its handler runs), 2 and 3 are acknowledged: they go one by one.
        let channel = Channel::new(1..=4, true);
        assert_eq!(channel.ack(2).await.unwrap(), Ok(true));
        assert_eq!(channel.ack(3).await.unwrap(), Ok(true));
        assert_eq!(channel.sent(), [(2, false), (3, false)]);
        // 1 is requeued on its own; 4 is then the oldest open delivery.
        channel.batcher.settled_alone(1);
        assert_eq!(channel.ack(4).await.unwrap(), Ok(true));
        assert_eq!(channel.sent(), [(2, false), (3, false), (4, true)]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_run_before_an_open_delivery_goes_together_and_what_follows_it_alone() {
        let channel = Channel::new(1..=6, false);
        let first = channel.ack(1);
        settle().await;
        // Meanwhile 2, 3 and 5 are acknowledged; 4 still runs.
        let waiting: Vec<_> = [2, 3, 5].into_iter().map(|tag| channel.ack(tag)).collect();
        settle().await;
        channel
            .gate
            .add_permits(tokio::sync::Semaphore::MAX_PERMITS >> 1);
        first.await.unwrap().unwrap();
        for ack in waiting {
            ack.await.unwrap().unwrap();
        }
        let mut sent = channel.sent();
        sent[1..].sort_unstable();
        assert_eq!(sent, [(1, true), (3, true), (5, false)]);
        // 4 and 6 later: 4 is the oldest open one, and 6 is behind it but nothing is open
        // between them once 4 is acknowledged.
        assert_eq!(channel.ack(4).await.unwrap(), Ok(true));
        assert_eq!(channel.ack(6).await.unwrap(), Ok(true));
        assert_eq!(channel.sent()[3..], [(4, true), (6, true)]);
    }
}
