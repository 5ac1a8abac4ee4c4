//! The broker's floor on this machine (BENCHMARKS.md, "Floors"): what RabbitMQ itself
//! costs for the kind of message Weft's hot path sends — persistent, on a durable queue,
//! published with confirms, consumed with manual acks — measured with lapin alone, no
//! Weft code in between.
//!
//! - Rate: `--messages N` (default 20,000) published with up to `--in-flight C` (64)
//!   unconfirmed at once while one consumer (prefetch 64) acks them; messages per second
//!   from the first publish to the last delivery.
//! - Latency: `--latency M` (2,000) messages one at a time: publish, wait for the confirm,
//!   and the time from the publish to its delivery (p50, p99), plus the confirm's own
//!   round trip.
//!
//! - `--max-priority P` declares the queue as a priority queue with P levels
//!   (`x-max-priority`, as Weft's activity queues are; 0, the default, declares none).
//! - `--queue-version V` declares the queue with `x-queue-version` V (1 or 2: RabbitMQ's
//!   classic queue storage versions; 0, the default, declares none: the broker's default).
//! - `--transient 1` publishes the messages transient (delivery mode 1) instead: what
//!   persistence costs the broker.
//! - `--ack-every K` has the consumer of the rate phase acknowledge every K-th delivery
//!   with `multiple` (and the last), instead of each one: what one acknowledgement for
//!   many costs the broker against one each.
//!
//! `WEFT_AMQP_URL` (default the local broker). The queue is declared and deleted by the
//! program.

use std::time::Instant;

use anyhow::Context as _;
use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};

/// AMQP delivery mode of a message written to disk.
const PERSISTENT: u8 = 2;
/// AMQP delivery mode of a message kept in memory only.
const TRANSIENT: u8 = 1;

struct Args {
    messages: usize,
    in_flight: usize,
    latency: usize,
    max_priority: u8,
    queue_version: u8,
    transient: bool,
    ack_every: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        messages: 20_000,
        in_flight: 64,
        latency: 2_000,
        max_priority: 0,
        queue_version: 0,
        transient: false,
        ack_every: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let n: usize = value.parse().with_context(|| format!("{flag} {value}"))?;
        match flag.as_str() {
            "--messages" => args.messages = n,
            "--in-flight" => args.in_flight = n.max(1),
            "--latency" => args.latency = n,
            "--transient" => args.transient = n != 0,
            "--ack-every" => args.ack_every = n.max(1),
            "--max-priority" => {
                args.max_priority = u8::try_from(n).context("--max-priority is at most 255")?
            }
            "--queue-version" => {
                args.queue_version = match n {
                    0..=2 => n as u8,
                    _ => anyhow::bail!("--queue-version is 0 (the broker's default), 1 or 2"),
                }
            }
            other => anyhow::bail!(
                "unknown argument {other:?}; usage: weft-bench-broker [--messages N] [--in-flight C] [--latency M] [--max-priority P] [--queue-version V] [--transient 0|1] [--ack-every K]"
            ),
        }
    }
    Ok(args)
}

/// Publishes `body` to `queue` (default exchange), persistent; returns its pending confirm.
async fn publish(
    channel: &lapin::Channel,
    queue: &str,
    body: &[u8],
    mode: u8,
) -> lapin::Result<lapin::PublisherConfirm> {
    channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body,
            BasicProperties::default().with_delivery_mode(mode),
        )
        .await
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let url = std::env::var("WEFT_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    let queue = format!("bench-broker-{}", uuid::Uuid::new_v4().simple());
    let publisher = Connection::connect(&url, ConnectionProperties::default()).await?;
    let consumer = Connection::connect(&url, ConnectionProperties::default()).await?;
    let pub_ch = publisher.create_channel().await?;
    pub_ch
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let mut queue_args = FieldTable::default();
    if args.max_priority > 0 {
        queue_args.insert(
            "x-max-priority".into(),
            lapin::types::AMQPValue::ShortShortUInt(args.max_priority),
        );
    }
    if args.queue_version > 0 {
        queue_args.insert(
            "x-queue-version".into(),
            lapin::types::AMQPValue::ShortShortUInt(args.queue_version),
        );
    }
    pub_ch
        .queue_declare(queue.as_str().into(), durable, queue_args)
        .await?;
    let con_ch = consumer.create_channel().await?;
    con_ch.basic_qos(64, BasicQosOptions::default()).await?;
    let mut deliveries = con_ch
        .basic_consume(
            queue.as_str().into(),
            "bench".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let mode = if args.transient {
        TRANSIENT
    } else {
        PERSISTENT
    };
    let body = vec![b'x'; 600]; // about a Weft activity task's envelope

    // Rate: pipelined publishes, confirms awaited in windows of `in_flight`.
    let started = Instant::now();
    let total = args.messages;
    let ack_every = args.ack_every;
    let consume = tokio::spawn(async move {
        let mut got = 0usize;
        while got < total {
            let Some(Ok(d)) = deliveries.next().await else {
                break;
            };
            got += 1;
            if got.is_multiple_of(ack_every) || got == total {
                d.ack(BasicAckOptions {
                    multiple: ack_every > 1,
                })
                .await?;
            }
        }
        Ok::<_, lapin::Error>((got, deliveries))
    });
    let mut pending = Vec::with_capacity(args.in_flight);
    for _ in 0..args.messages {
        pending.push(publish(&pub_ch, &queue, &body, mode).await?);
        if pending.len() >= args.in_flight {
            for c in pending.drain(..) {
                c.await?;
            }
        }
    }
    for c in pending.drain(..) {
        c.await?;
    }
    let (got, mut deliveries) = consume.await??;
    let elapsed = started.elapsed();
    anyhow::ensure!(got == args.messages, "consumed {got} of {}", args.messages);

    // Latency: one message at a time.
    let mut to_delivery = Vec::with_capacity(args.latency);
    let mut to_confirm = Vec::with_capacity(args.latency);
    for _ in 0..args.latency {
        let sent = Instant::now();
        let confirm = publish(&pub_ch, &queue, &body, mode).await?;
        let (confirmed, delivered) = tokio::join!(
            async {
                confirm.await?;
                Ok::<_, lapin::Error>(sent.elapsed())
            },
            async {
                let d = deliveries
                    .next()
                    .await
                    .context("the consumer ended")?
                    .context("delivery")?;
                let at = sent.elapsed();
                d.ack(BasicAckOptions::default()).await?;
                Ok::<_, anyhow::Error>(at)
            }
        );
        to_confirm.push(confirmed?.as_secs_f64() * 1000.0);
        to_delivery.push(delivered?.as_secs_f64() * 1000.0);
    }
    to_delivery.sort_by(f64::total_cmp);
    to_confirm.sort_by(f64::total_cmp);
    pub_ch
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await?;

    let rate = args.messages as f64 / elapsed.as_secs_f64().max(f64::EPSILON);
    let mode = if args.transient {
        "transient"
    } else {
        "persistent"
    };
    println!("### Broker floor: {mode}, confirmed, durable queue, manual ack (lapin alone)");
    if args.max_priority > 0 {
        println!();
        println!("Priority queue: `x-max-priority` {}.", args.max_priority);
    }
    if args.queue_version > 0 {
        println!();
        println!(
            "Classic queue version: `x-queue-version` {}.",
            args.queue_version
        );
    }
    println!();
    println!("| measure | result |");
    println!("|---|---|");
    println!(
        "| rate ({} messages of {} B, {} unconfirmed at most) | {rate:.0} messages/s ({:.2}s) |",
        args.messages,
        body.len(),
        args.in_flight,
        elapsed.as_secs_f64()
    );
    println!(
        "| latency, publish to delivery ({} sequential) | p50 {:.2}ms, p99 {:.2}ms |",
        args.latency,
        percentile(&to_delivery, 0.5),
        percentile(&to_delivery, 0.99)
    );
    println!(
        "| latency, publish to confirm (same messages) | p50 {:.2}ms, p99 {:.2}ms |",
        percentile(&to_confirm, 0.5),
        percentile(&to_confirm, 0.99)
    );
    println!("| command | `cargo build --release -p weft-e2e --bin weft-bench-broker && target/release/weft-bench-broker` |");
    Ok(())
}
