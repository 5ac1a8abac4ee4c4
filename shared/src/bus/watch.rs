//! Waiting for a queue's next message: the gateway's long poll is woken by the broker's
//! push instead of looking at the queue again and again.
//!
//! While callers wait on a queue, this process keeps one consumer on it with a prefetch
//! of one (the *doorbell*): the broker pushes the queue's next message as soon as it is
//! published, and the doorbell hands it to the longest-waiting caller, unsettled, as a
//! [`Taken`]. The caller settles it (the gateway claims the task, then acknowledges);
//! the broker pushes the next message only after that, so the doorbell never holds more
//! than one message that other consumers of the queue (bus workers, other gateways)
//! could have taken.
//!
//! Handing one message out also wakes the next caller to look at the queue itself
//! (`basic.get`): when tasks arrive in a burst, the waiting polls take them at once
//! instead of one push at a time.
//!
//! A message pushed when every caller has gone (their polls answered empty a moment
//! before) is kept for the next caller for [`LINGER`] at most, then given back to the
//! queue; a doorbell nobody waits on for as long is closed. So an idle queue costs no
//! consumer, and a queue polled without pause (Conductor's SDKs poll again at once)
//! keeps one consumer for as long as its pollers come back.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{oneshot, Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::get::Taken;
use super::transport::{Subscription, Transport};
use super::{dispose, Bus, Disposition};
use crate::Result;

/// How long a doorbell stays open with nobody waiting, and how long it keeps a message
/// pushed after its callers went for the next one to come.
pub const LINGER: Duration = Duration::from_secs(1);
/// How long a closing doorbell waits for the message it handed out to be settled before
/// closing its channel anyway (which gives an unsettled message back to the queue).
const SETTLE_GRACE: Duration = Duration::from_secs(30);
/// Pause before opening a doorbell again after the broker refused one.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// The doorbells of one [`Bus`] (shared by its clones), by queue.
#[derive(Debug, Default)]
pub(crate) struct Doorbells {
    by_queue: Mutex<HashMap<String, Arc<Doorbell>>>,
}

/// One queue's doorbell: who waits, and whether its consumer runs.
#[derive(Debug, Default)]
struct Doorbell {
    state: Mutex<Waiting>,
    /// Rung when a caller starts waiting: a kept message may be theirs.
    arrived: Notify,
}

/// What a waiting caller is handed.
#[derive(Debug)]
enum Push {
    /// A message, unsettled.
    Message(Box<Taken>),
    /// Another caller was handed one: the queue may hold more, look at it.
    LookAgain,
}

#[derive(Debug, Default)]
struct Waiting {
    /// Waiting callers, longest-waiting first.
    callers: VecDeque<oneshot::Sender<Push>>,
    /// Whether the consumer's task runs.
    running: bool,
}

impl Waiting {
    /// Forgets the callers that stopped waiting.
    fn prune(&mut self) {
        self.callers.retain(|c| !c.is_closed());
    }
}

impl Bus {
    /// Waits until `until` for a message of `queue` pushed to this process, unsettled:
    /// `None` when none came, when `shutdown` fired, or when the queue may hold more
    /// (another caller was just handed one): look at it with [`Bus::get`] then. Look at
    /// the queue first too: only messages that arrive while someone waits are pushed.
    pub async fn wait_for_message(
        &self,
        queue: &str,
        until: Instant,
        shutdown: &CancellationToken,
    ) -> Result<Option<Taken>> {
        super::check_name("queue", queue)?;
        let doorbell = self.doorbells.of(queue);
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut state = doorbell.state.lock().expect("doorbell lock");
            state.prune();
            state.callers.push_back(tx);
            !std::mem::replace(&mut state.running, true)
        };
        if start {
            tokio::spawn(ring(
                self.transport.clone(),
                queue.to_owned(),
                doorbell.clone(),
                shutdown.clone(),
            ));
        }
        doorbell.arrived.notify_one();
        tokio::select! {
            // A message handed over while the wait ends is taken, not dropped.
            biased;
            pushed = rx => match pushed {
                Ok(Push::Message(taken)) => Ok(Some(*taken)),
                Ok(Push::LookAgain) | Err(_) => Ok(None),
            },
            _ = tokio::time::sleep_until(until) => Ok(None),
            _ = shutdown.cancelled() => Ok(None),
        }
    }
}

impl Bus {
    /// How many callers wait on `queue`'s doorbell now (tests).
    #[doc(hidden)]
    pub fn callers_waiting(&self, queue: &str) -> usize {
        let doorbell = self.doorbells.of(queue);
        let mut state = doorbell.state.lock().expect("doorbell lock");
        state.prune();
        state.callers.len()
    }
}

impl Doorbells {
    fn of(&self, queue: &str) -> Arc<Doorbell> {
        let mut by_queue = self.by_queue.lock().expect("doorbells lock");
        by_queue.entry(queue.to_owned()).or_default().clone()
    }
}

/// Runs `queue`'s doorbell while callers wait on it.
async fn ring(
    transport: Arc<dyn Transport>,
    queue: String,
    doorbell: Arc<Doorbell>,
    shutdown: CancellationToken,
) {
    loop {
        let lost = match transport.subscribe(&queue, 1, &shutdown).await {
            Ok(subscription) => serve(subscription, &queue, &doorbell, &shutdown).await,
            Err(e) => {
                tracing::debug!(%queue, error = %e, "could not open a poll's doorbell");
                true
            }
        };
        if lost {
            tokio::select! {
                _ = tokio::time::sleep(RETRY_PAUSE) => {}
                _ = shutdown.cancelled() => {}
            }
        }
        let mut state = doorbell.state.lock().expect("doorbell lock");
        state.prune();
        if state.callers.is_empty() || shutdown.is_cancelled() {
            state.running = false;
            return;
        }
    }
}

/// Hands what `subscription` pushes to the waiting callers, until nobody waited for
/// [`LINGER`], the subscription is lost (`true`) or `shutdown` fires; then closes it.
async fn serve(
    mut subscription: Box<dyn Subscription>,
    queue: &str,
    doorbell: &Doorbell,
    shutdown: &CancellationToken,
) -> bool {
    // One permit: the message handed out holds it until settled, and the doorbell takes
    // the next only then (as the broker's prefetch of one does).
    let settled = Arc::new(Semaphore::new(1));
    let mut kept: Option<Taken> = None;
    let mut idle_since = Instant::now();
    let mut lost = false;
    loop {
        if let Some(taken) = kept.take() {
            kept = hand(doorbell, taken);
            if kept.is_none() {
                idle_since = Instant::now();
            }
        }
        let quiet = tokio::time::sleep_until(idle_since + LINGER);
        tokio::select! {
            inbound = subscription.next(), if kept.is_none() => {
                let inbound = match inbound {
                    Ok(inbound) => inbound,
                    Err(reason) => {
                        tracing::debug!(%queue, %reason, "a poll's doorbell was closed");
                        lost = true;
                        break;
                    }
                };
                let delivery = match dispose::decode(&inbound, queue) {
                    Ok(delivery) => delivery,
                    Err(reason) => {
                        let poison = Disposition::DeadLetter(reason);
                        dispose::settle(&*inbound.acker, queue, poison).await;
                        continue;
                    }
                };
                let Ok(lease) = settled.clone().acquire_owned().await else { break };
                kept = Some(Taken::leased(delivery, inbound, lease));
                idle_since = Instant::now();
            }
            _ = doorbell.arrived.notified() => idle_since = Instant::now(),
            _ = quiet => {
                let mut state = doorbell.state.lock().expect("doorbell lock");
                state.prune();
                if state.callers.is_empty() {
                    break;
                }
                idle_since = Instant::now();
            }
            _ = shutdown.cancelled() => break,
        }
    }
    subscription.cancel().await;
    if let Some(taken) = kept {
        taken.requeue().await;
    }
    // Acknowledging needs the channel: close it once the message out is settled.
    let _ = tokio::time::timeout(SETTLE_GRACE, settled.acquire()).await;
    subscription.close().await;
    lost
}

/// Gives `taken` to the longest-waiting caller still waiting, and tells the next one to
/// look at the queue; back when nobody waits.
fn hand(doorbell: &Doorbell, taken: Taken) -> Option<Taken> {
    let mut state = doorbell.state.lock().expect("doorbell lock");
    let mut push = Push::Message(Box::new(taken));
    while let Some(caller) = state.callers.pop_front() {
        match caller.send(push) {
            Ok(()) => {
                while let Some(next) = state.callers.pop_front() {
                    if next.send(Push::LookAgain).is_ok() {
                        break;
                    }
                }
                return None;
            }
            Err(back) => push = back,
        }
    }
    match push {
        Push::Message(taken) => Some(*taken),
        Push::LookAgain => None,
    }
}
