//! The AMQP client (amqprs) as the rest of the transport uses it: channels whose broker
//! errors keep their reply code, publisher confirms as futures, and every request that
//! waits for the broker's answer run as a task of its own.
//!
//! Why a task of its own: amqprs hands a request's answer to a waiting slot, and a slot
//! whose waiter went away (a caller's future dropped mid-request: an HTTP poll whose
//! client hung up, a timeout) makes its channel's dispatcher or its connection's reader
//! fail — the whole connection is lost. A request that runs in its own task always has
//! its waiter; a caller that goes away only stops waiting for the task.
//!
//! Why the reply codes: a channel closed by the broker (PRECONDITION_FAILED on a
//! re-declaration with other arguments, NOT_FOUND, ACCESS_REFUSED) fails its pending
//! request with a bare "channel closed"; the channel's callback keeps the broker's code
//! and text, and [`Chan::call`] returns them instead.
//!
//! Why channel numbers are counted: amqprs (2.1) frees a channel's number only when the
//! client closes it (explicitly or when its last handle drops), never for a channel the
//! broker closed, and it panics in the connection's reader when none is left. Each
//! connection's [`Numbers`] counts the channels open and those the broker closed, a new
//! channel is refused when the connection's `channel_max` is reached, and the connection
//! is replaced well before that ([`Numbers::running_out`]).
//!
//! Why sends pass a gate: a frame queued after the client's `channel.close-ok` to a
//! broker's `channel.close` arrives on a channel the broker no longer knows, and the
//! broker closes the whole connection for it (CHANNEL_ERROR). The channel's callback
//! takes the gate before the answer is queued; a send holds it from its check to the
//! frame's queueing.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use amqprs::callbacks::{ChannelCallback, ConnectionCallback};
use amqprs::channel::Channel;
use amqprs::connection::Connection;
use amqprs::{Ack, BasicProperties, Cancel, Close, CloseChannel, Nack, Return};
use async_trait::async_trait;
use tokio::sync::oneshot;

/// The share of a connection's channel numbers kept in reserve: a connection with fewer
/// free numbers than this is replaced (its channels go on until they close).
const RESERVED_SHARE: usize = 4;

/// The channel numbers of one connection in use: open channels and the channels the
/// broker closed (see the module's doc).
#[derive(Debug)]
pub(crate) struct Numbers {
    /// Channels opened and not yet dropped by the client.
    open: AtomicUsize,
    /// Numbers amqprs keeps taken for the connection's life: channels the broker closed,
    /// channels that failed to open.
    lost: AtomicUsize,
    /// The connection's `channel_max` (AMQP: 0 means 65,535).
    max: usize,
}

impl Numbers {
    /// The numbers of a connection whose negotiated `channel_max` is `channel_max`.
    pub(crate) fn new(channel_max: u16) -> Self {
        Self {
            open: AtomicUsize::new(0),
            lost: AtomicUsize::new(0),
            max: match channel_max {
                0 => usize::from(u16::MAX),
                max => usize::from(max),
            },
        }
    }

    /// Numbers taken.
    pub(crate) fn taken(&self) -> usize {
        self.open.load(Ordering::Relaxed) + self.lost.load(Ordering::Relaxed)
    }

    /// Fewer numbers left than the reserve: time for a new connection.
    pub(crate) fn running_out(&self) -> bool {
        self.taken() + self.max / RESERVED_SHARE >= self.max
    }

    /// Takes a number for a channel about to open, or says why none is left.
    fn take(self: &Arc<Self>) -> Result<Taken, AmqpError> {
        if self.open.fetch_add(1, Ordering::Relaxed) + self.lost.load(Ordering::Relaxed) >= self.max
        {
            self.open.fetch_sub(1, Ordering::Relaxed);
            return Err(AmqpError::client(format!(
                "no channel number left on this connection (channel_max {})",
                self.max
            )));
        }
        Ok(Taken(self.clone()))
    }
}

/// A channel's number, given back when the channel's last handle drops (amqprs then
/// closes the channel, which frees the number).
struct Taken(Arc<Numbers>);

impl Taken {
    /// The number stays taken for the connection's life.
    fn lose(self) {
        self.0.lost.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A broker or client error; `code` is the broker's AMQP reply code when it closed the
/// channel or connection.
#[derive(Debug, Clone)]
pub(crate) struct AmqpError {
    pub(crate) code: Option<u16>,
    pub(crate) text: String,
}

/// AMQP reply codes Weft tells apart.
pub(crate) mod code {
    /// The operation was refused for want of permission.
    pub(crate) const ACCESS_REFUSED: u16 = 403;
    /// The queue or exchange does not exist.
    pub(crate) const NOT_FOUND: u16 = 404;
    /// The entity exists with other arguments (or another kind).
    pub(crate) const PRECONDITION_FAILED: u16 = 406;
}

impl AmqpError {
    /// An error of the client (no reply code).
    pub(crate) fn client(e: impl fmt::Display) -> Self {
        Self {
            code: None,
            text: e.to_string(),
        }
    }

    /// A channel-level refusal (3xx/4xx soft error): the connection is fine, retrying
    /// the same operation gets the same answer.
    pub(crate) fn is_soft(&self) -> bool {
        matches!(self.code, Some(311..=313 | 403..=406))
    }

    pub(crate) fn is(&self, code: u16) -> bool {
        self.code == Some(code)
    }
}

impl fmt::Display for AmqpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code {
            // RabbitMQ's text starts with the code's name ("PRECONDITION_FAILED - …").
            Some(code) => write!(f, "{} (reply code {code})", self.text),
            None => f.write_str(&self.text),
        }
    }
}

impl From<AmqpError> for crate::Error {
    fn from(e: AmqpError) -> Self {
        crate::Error::Bus(e.to_string())
    }
}

/// Runs `request` as a task of its own (see the module's doc).
async fn detached<T, F>(request: F) -> Result<T, amqprs::error::Error>
where
    T: Send + 'static,
    F: Future<Output = Result<T, amqprs::error::Error>> + Send + 'static,
{
    match tokio::spawn(request).await {
        Ok(res) => res,
        Err(e) => Err(amqprs::error::Error::InternalChannelError(format!(
            "the request's task failed: {e}"
        ))),
    }
}

/// Opens a connection (in a task of its own, so that a caller's timeout leaves no
/// handshake half done) with a callback that logs what the broker says about it.
pub(crate) async fn connect(
    args: amqprs::connection::OpenConnectionArguments,
) -> Result<Connection, AmqpError> {
    let conn = detached(async move { Connection::open(&args).await })
        .await
        .map_err(AmqpError::client)?;
    conn.register_callback(Logged)
        .await
        .map_err(AmqpError::client)?;
    Ok(conn)
}

/// Closes `conn` (a task of its own).
pub(crate) async fn disconnect(conn: &Connection) -> Result<(), AmqpError> {
    let conn = conn.clone();
    detached(async move { conn.close().await })
        .await
        .map_err(AmqpError::client)
}

/// Logs the broker's closing of a connection and its flow control.
struct Logged;

#[async_trait]
impl ConnectionCallback for Logged {
    async fn close(
        &mut self,
        connection: &Connection,
        close: Close,
    ) -> Result<(), amqprs::error::Error> {
        tracing::warn!(connection = %connection.connection_name(), reason = %close, "the broker closed the connection");
        Ok(())
    }

    // amqprs 2.1 does not advertise `connection.blocked`, so RabbitMQ sends neither
    // notice (docs/bus.md); logged should a later version advertise it.
    async fn blocked(&mut self, connection: &Connection, reason: String) {
        tracing::warn!(connection = %connection.connection_name(), %reason, "the broker blocks publishing on this connection (flow control)");
    }

    async fn unblocked(&mut self, connection: &Connection) {
        tracing::info!(connection = %connection.connection_name(), "the broker unblocked publishing");
    }

    async fn secret_updated(&mut self, _connection: &Connection) {}
}

/// The publishes of a confirm-mode channel waiting for the broker's ack, by their
/// sequence number (the first publish after `confirm.select` is 1).
#[derive(Default)]
struct Confirms {
    /// The number of the last publish sent.
    last: u64,
    pending: BTreeMap<u64, oneshot::Sender<bool>>,
    /// The channel is gone: nothing will be confirmed any more.
    gone: bool,
}

/// What a channel's callback learns and its users read.
#[derive(Default)]
struct ChannelState {
    /// Why the broker closed the channel.
    closed: Mutex<Option<AmqpError>>,
    confirms: Mutex<Confirms>,
    /// Held (shared) by a send from its check to its frame's queueing, and (exclusive)
    /// by the callback while it learns that the broker closes the channel (module doc).
    gate: tokio::sync::RwLock<()>,
}

impl ChannelState {
    fn confirms(&self) -> std::sync::MutexGuard<'_, Confirms> {
        self.confirms.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn closed(&self) -> Option<AmqpError> {
        self.closed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Answers the publishes up to `tag` (with `multiple`) or `tag` alone.
    fn confirm(&self, tag: u64, multiple: bool, ok: bool) {
        let mut confirms = self.confirms();
        let answered = match multiple {
            true => {
                let later = confirms.pending.split_off(&(tag + 1));
                std::mem::replace(&mut confirms.pending, later)
            }
            false => confirms
                .pending
                .remove(&tag)
                .map(|w| (tag, w))
                .into_iter()
                .collect(),
        };
        drop(confirms);
        for (_, waiter) in answered {
            let _ = waiter.send(ok);
        }
    }
}

/// The callback of every channel: keeps the broker's reason for closing it, answers
/// publisher confirms, and fails the unconfirmed publishes when the channel goes.
struct Watch {
    state: Arc<ChannelState>,
    numbers: Arc<Numbers>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        // The channel's dispatcher ended (closed channel or lost connection): the
        // waiting publishes' senders drop with the map, failing them at once.
        let pending = {
            let mut confirms = self.state.confirms();
            confirms.gone = true;
            std::mem::take(&mut confirms.pending)
        };
        drop(pending);
    }
}

#[async_trait]
impl ChannelCallback for Watch {
    async fn close(
        &mut self,
        _channel: &Channel,
        close: CloseChannel,
    ) -> Result<(), amqprs::error::Error> {
        // Sends under way queue their frames first; later ones see `closed` and refuse.
        // amqprs answers `close-ok` after this returns.
        let _gate = self.state.gate.write().await;
        self.numbers.lost.fetch_add(1, Ordering::Relaxed);
        *self.state.closed.lock().unwrap_or_else(|e| e.into_inner()) = Some(AmqpError {
            code: Some(close.reply_code()),
            text: close.reply_text().clone(),
        });
        Ok(())
    }

    async fn cancel(
        &mut self,
        _channel: &Channel,
        _cancel: Cancel,
    ) -> Result<(), amqprs::error::Error> {
        // The consumer's stream ends; its subscription reports it and starts again.
        Ok(())
    }

    async fn flow(
        &mut self,
        _channel: &Channel,
        active: bool,
    ) -> Result<bool, amqprs::error::Error> {
        Ok(active)
    }

    async fn publish_ack(&mut self, _channel: &Channel, ack: Ack) {
        self.state.confirm(ack.delivery_tag(), ack.mutiple(), true);
    }

    async fn publish_nack(&mut self, _channel: &Channel, nack: Nack) {
        self.state
            .confirm(nack.delivery_tag(), nack.multiple(), false);
    }

    async fn publish_return(
        &mut self,
        _channel: &Channel,
        _ret: Return,
        _properties: BasicProperties,
        _content: Vec<u8>,
    ) {
        // Weft never publishes `mandatory`: nothing comes back.
    }
}

/// A channel and what its callback learned.
#[derive(Clone)]
pub(crate) struct Chan {
    raw: Channel,
    state: Arc<ChannelState>,
    /// The channel's number, counted until the last clone drops.
    _number: Arc<Taken>,
}

impl fmt::Debug for Chan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chan")
            .field("id", &self.raw.channel_id())
            .field("open", &self.raw.is_open())
            .finish()
    }
}

/// Undoes a confirm number taken for a publish that was not sent (its caller went away
/// while the frames waited for room): the next publish takes the number again.
struct Unsent<'a> {
    state: &'a ChannelState,
    tag: Option<u64>,
}

impl Drop for Unsent<'_> {
    fn drop(&mut self) {
        if let Some(tag) = self.tag {
            let mut confirms = self.state.confirms();
            confirms.pending.remove(&tag);
            confirms.last = tag - 1;
        }
    }
}

impl Chan {
    /// Opens a channel on `conn`, whose channel numbers `numbers` counts.
    pub(crate) async fn open(conn: &Connection, numbers: &Arc<Numbers>) -> Result<Self, AmqpError> {
        // Taken before amqprs allocates one: a number it failed to open with may stay
        // taken, and is then counted until the connection goes.
        let number = numbers.take()?;
        let opening = conn.clone();
        let raw = match detached(async move { opening.open_channel(None).await }).await {
            Ok(raw) => raw,
            Err(e) => {
                number.lose();
                return Err(AmqpError::client(e));
            }
        };
        let state = Arc::new(ChannelState::default());
        let watch = Watch {
            state: state.clone(),
            numbers: numbers.clone(),
        };
        raw.register_callback(watch)
            .await
            .map_err(AmqpError::client)?;
        Ok(Self {
            raw,
            state,
            _number: Arc::new(number),
        })
    }

    /// Why the broker closed the channel, if it did.
    pub(crate) fn closed_by_broker(&self) -> Option<AmqpError> {
        self.state.closed()
    }

    /// Whether the channel (and its connection) is open.
    pub(crate) fn is_open(&self) -> bool {
        self.raw.is_open() && self.raw.is_connection_open()
    }

    /// The error of a failed request: the broker's reason when it closed the channel.
    fn failure(&self, e: amqprs::error::Error) -> AmqpError {
        self.state.closed().unwrap_or_else(|| AmqpError::client(e))
    }

    /// Runs a request that waits for the broker's answer, as a task of its own.
    pub(crate) async fn call<T, F, Fut>(&self, request: F) -> Result<T, AmqpError>
    where
        T: Send + 'static,
        F: FnOnce(Channel) -> Fut,
        Fut: Future<Output = Result<T, amqprs::error::Error>> + Send + 'static,
    {
        if let Some(closed) = self.state.closed() {
            return Err(closed);
        }
        detached(request(self.raw.clone()))
            .await
            .map_err(|e| self.failure(e))
    }

    /// Sends a message frame (publish, ack, nack: nothing to wait for). A channel that
    /// is closed is refused here: a frame on it would make the broker close the whole
    /// connection.
    pub(crate) async fn send<F, Fut>(&self, frame: F) -> Result<(), AmqpError>
    where
        F: FnOnce(Channel) -> Fut,
        Fut: Future<Output = Result<(), amqprs::error::Error>>,
    {
        let _gate = self.state.gate.read().await;
        if let Some(closed) = self.state.closed() {
            return Err(closed);
        }
        if !self.is_open() {
            return Err(AmqpError::client(
                "the channel is closed (its connection was lost)",
            ));
        }
        frame(self.raw.clone()).await.map_err(|e| self.failure(e))
    }

    /// Puts the channel in confirm mode.
    pub(crate) async fn confirm_select(&self) -> Result<(), AmqpError> {
        self.call(|c| async move {
            c.confirm_select(amqprs::channel::ConfirmSelectArguments::default())
                .await
        })
        .await
    }

    /// Publishes on a confirm-mode channel and returns the broker's answer to come
    /// (`true`: ack). The caller sends one publish at a time on a channel: the broker
    /// numbers confirms in the order publishes arrive.
    pub(crate) async fn publish_confirmed(
        &self,
        exchange: &str,
        routing_key: &str,
        body: Vec<u8>,
        props: BasicProperties,
    ) -> Result<oneshot::Receiver<bool>, AmqpError> {
        let (tx, rx) = oneshot::channel();
        let tag = {
            let mut confirms = self.state.confirms();
            if confirms.gone {
                return Err(self.state.closed().unwrap_or_else(|| {
                    AmqpError::client("the channel is closed (its connection was lost)")
                }));
            }
            confirms.last += 1;
            let tag = confirms.last;
            confirms.pending.insert(tag, tx);
            tag
        };
        let mut unsent = Unsent {
            state: &self.state,
            tag: Some(tag),
        };
        let args = amqprs::channel::BasicPublishArguments::new(exchange, routing_key);
        let sent = self
            .send(|c| async move { c.basic_publish(props, body, args).await })
            .await;
        unsent.tag = None;
        sent.map(|()| rx)
    }

    /// Publishes without a confirm (a channel not in confirm mode).
    pub(crate) async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        body: Vec<u8>,
        props: BasicProperties,
    ) -> Result<(), AmqpError> {
        let args = amqprs::channel::BasicPublishArguments::new(exchange, routing_key);
        self.send(|c| async move { c.basic_publish(props, body, args).await })
            .await
    }

    /// Closes the channel, which hands every delivery it holds unsettled back to its
    /// queue.
    pub(crate) async fn close(&self) {
        if !self.is_open() {
            return;
        }
        if let Err(e) = self.call(|c| async move { c.close().await }).await {
            tracing::debug!(error = %e, "closing a channel failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(
        state: &ChannelState,
        tags: std::ops::RangeInclusive<u64>,
    ) -> Vec<oneshot::Receiver<bool>> {
        tags.map(|tag| {
            let (tx, rx) = oneshot::channel();
            state.confirms().pending.insert(tag, tx);
            rx
        })
        .collect()
    }

    #[test]
    fn a_multiple_confirm_answers_every_publish_up_to_its_tag_and_no_later_one() {
        let state = ChannelState::default();
        let mut rx = waiting(&state, 1..=4);
        state.confirm(3, true, true);
        for r in &mut rx[..3] {
            assert_eq!(r.try_recv(), Ok(true));
        }
        assert!(rx[3].try_recv().is_err(), "4 is still waiting");
        state.confirm(4, false, false);
        assert_eq!(rx[3].try_recv(), Ok(false), "a nack answers false");
    }

    #[test]
    fn a_channel_beyond_channel_max_is_refused_and_its_number_comes_back_with_its_handle() {
        let numbers = Arc::new(Numbers::new(8));
        let taken: Vec<Taken> = (0..8).map(|_| numbers.take().expect("a number")).collect();
        assert_eq!(numbers.taken(), 8);
        let refused = numbers.take().err().expect("none left");
        assert!(refused.to_string().contains("channel_max 8"), "{refused}");
        assert_eq!(numbers.taken(), 8, "a refusal takes nothing");
        let mut taken = taken.into_iter();
        drop(taken.next());
        assert_eq!(
            numbers.taken(),
            7,
            "a dropped channel gives its number back"
        );
        taken.next().expect("a number").lose();
        assert_eq!(numbers.taken(), 7, "a lost number stays taken");
        assert!(numbers.take().is_ok());
    }

    #[test]
    fn a_connection_runs_out_of_numbers_with_a_quarter_left() {
        let numbers = Arc::new(Numbers::new(16));
        let mut taken = Vec::new();
        while !numbers.running_out() {
            taken.push(numbers.take().expect("a number"));
        }
        assert_eq!(taken.len(), 12);
        assert_eq!(
            Numbers::new(0).max,
            65_535,
            "0 means no limit but AMQP's own"
        );
    }

    #[test]
    fn a_soft_error_is_a_channel_refusal_and_names_its_code() {
        let refused = AmqpError {
            code: Some(code::PRECONDITION_FAILED),
            text: "PRECONDITION_FAILED - inequivalent arg".into(),
        };
        assert!(refused.is_soft());
        assert!(refused.to_string().contains("PRECONDITION_FAILED"));
        assert!(!AmqpError::client("network").is_soft());
        let forced = AmqpError {
            code: Some(320),
            text: "CONNECTION_FORCED".into(),
        };
        assert!(!forced.is_soft());
    }

    /// A connection to the test broker.
    async fn broker() -> Connection {
        let args = super::super::connection::connection_arguments(
            &crate::testing::amqp_url(),
            "weft/client-test",
        )
        .expect("the test broker's URL");
        connect(args).await.expect("the test broker")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frames_racing_the_broker_closing_their_channel_never_cost_the_connection() {
        let conn = broker().await;
        let numbers = Arc::new(Numbers::new(conn.channel_max()));
        let missing = format!("weft-test-missing-{}", uuid::Uuid::new_v4().simple());
        for round in 0..200 {
            // A frame after amqprs's close-ok costs the connection: the broker closes it.
            let chan = Chan::open(&conn, &numbers)
                .await
                .unwrap_or_else(|e| panic!("round {round}: the connection was lost: {e}"));
            // The broker closes a channel that publishes to a missing exchange (404)
            // while this one goes on sending until it sees the channel closed.
            chan.publish(&missing, "k", b"x".to_vec(), BasicProperties::default())
                .await
                .expect("the first publish is queued");
            let mut sends = 0u32;
            while chan
                .publish("", &missing, b"x".to_vec(), BasicProperties::default())
                .await
                .is_ok()
            {
                sends += 1;
                assert!(sends < 10_000_000, "the channel was never seen closed");
            }
            let why = chan.closed_by_broker().expect("closed by the broker");
            assert!(why.is(code::NOT_FOUND), "{why}");
        }
        let last = Chan::open(&conn, &numbers).await;
        assert!(last.is_ok(), "the connection was lost: {:?}", last.err());
        assert!(
            numbers.taken() >= 200,
            "the broker-closed channels stay counted"
        );
        let _ = disconnect(&conn).await;
    }
}
