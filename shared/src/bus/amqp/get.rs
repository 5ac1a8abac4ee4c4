//! `basic.get` on pooled channels: the gateway's task polls take messages one at a time,
//! and a channel opened and closed for each (two more round trips, and a process the
//! broker starts and stops) cost more than the take itself.
//!
//! A message taken keeps its channel until settled (acknowledging needs the channel that
//! delivered it); then the channel goes back to the pool. One dropped unsettled takes its
//! channel with it, and the channel's close gives the message back to the queue.

use std::sync::{Arc, Mutex};

use amqprs::channel::BasicGetArguments;

use super::client::Chan;
use super::connection::Link;
use super::consume::{self, Delivery};
use crate::bus::transport::Inbound;
use crate::{Error, Result};

/// Idle channels kept for the next takes; more are closed when given back.
const MAX_IDLE: usize = 32;

/// The idle channels of one connection's takes (those of a lost connection are dropped
/// when met).
#[derive(Debug, Default)]
pub(crate) struct GetChannels {
    idle: Mutex<Vec<Chan>>,
}

/// The channel a taken message came on, to give back once it is settled.
#[derive(Debug)]
pub(crate) struct OwnChannel {
    channel: Chan,
    pool: Arc<GetChannels>,
}

impl OwnChannel {
    /// The message is settled: the channel serves the next take.
    pub(crate) async fn release(&self) {
        self.pool.give_back(self.channel.clone()).await;
    }
}

impl GetChannels {
    fn take_idle(&self) -> Option<Chan> {
        let mut idle = self.idle.lock().expect("get channels lock");
        while let Some(channel) = idle.pop() {
            if channel.is_open() {
                return Some(channel);
            }
        }
        None
    }

    async fn give_back(&self, channel: Chan) {
        if channel.is_open() {
            let mut idle = self.idle.lock().expect("get channels lock");
            if idle.len() < MAX_IDLE {
                idle.push(channel);
                return;
            }
        }
        channel.close().await;
    }
}

/// Takes the next ready message of `queue`, on an idle channel of `pool` or a new one.
pub(crate) async fn get(
    link: &Arc<Link>,
    pool: &Arc<GetChannels>,
    queue: &str,
) -> Result<Option<Inbound>> {
    if let Some(channel) = pool.take_idle() {
        // An idle channel the broker closed a moment ago fails: a new one is tried.
        if let Ok(got) = get_on(link, pool, channel, queue).await {
            return Ok(got);
        }
    }
    let session = link.session().await.map_err(|f| f.into_error())?;
    let channel = session
        .channel()
        .await
        .map_err(|e| Error::Bus(format!("opening a channel: {e}")))?;
    get_on(link, pool, channel, queue).await
}

async fn get_on(
    link: &Arc<Link>,
    pool: &Arc<GetChannels>,
    channel: Chan,
    queue: &str,
) -> Result<Option<Inbound>> {
    let args = BasicGetArguments::new(queue).no_ack(false).finish();
    let got = channel
        .call(|c| async move { c.basic_get(args).await })
        .await;
    match got {
        Ok(Some((get_ok, props, body))) => {
            let delivery = Delivery {
                channel: channel.clone(),
                tag: get_ok.delivery_tag(),
                props,
            };
            let own = OwnChannel {
                channel,
                pool: pool.clone(),
            };
            Ok(Some(consume::inbound(
                link.clone(),
                delivery,
                body,
                get_ok.redelivered(),
                consume::Settle::Taken(own),
            )))
        }
        Ok(None) => {
            pool.give_back(channel).await;
            Ok(None)
        }
        Err(e) => {
            // A refused get (no such queue) closed the channel already.
            channel.close().await;
            Err(Error::Bus(format!("basic.get on {queue}: {e}")))
        }
    }
}
