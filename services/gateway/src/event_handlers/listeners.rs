//! The gateway's listeners: one consumer per queue that active handlers listen to,
//! started and stopped as handlers come and go, without a restart.
//!
//! The handlers are read from the store at start, whenever this gateway changes them
//! (at once) and every [`REFRESH`] (the changes other gateways made). Each message is
//! handed to every active handler of its queue as it is when the message arrives; it is
//! acknowledged once every handler has acted, given back to its queue when a dependency
//! failed, and several gateways share a queue as competing consumers (each event is
//! handled by one of them).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use weft::admin::CounterFamily;
use weft::bus::{ConsumeOptions, Disposition, ExchangeKind, RawDelivery};

use super::actions::{self, Event};
use super::model::{EventHandler, Source};
use crate::state::AppState;

/// How often the handlers are read again (for changes made through other gateways).
pub const REFRESH: Duration = Duration::from_secs(5);
/// Executions kept per handler.
const KEPT_EXECUTIONS: i64 = 1_000;
/// Prune executions every this many refreshes.
const PRUNE_EVERY: u32 = 60;
/// Events handled at once per queue.
const CONCURRENCY: usize = 8;
/// How long an event that met a failed dependency waits before it goes back.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Active handlers by the queue they listen on.
type Table = Arc<RwLock<HashMap<String, Vec<Arc<EventHandler>>>>>;

/// The queue Weft consumes for `source`.
pub fn queue_of(state: &AppState, source: &Source) -> String {
    match source {
        Source::Queue(queue) => queue.clone(),
        Source::Conductor(rest) => Source::conductor_queue(state.bus.names().namespace(), rest),
        Source::Exchange {
            queue: Some(queue), ..
        } => queue.clone(),
        Source::Exchange {
            exchange,
            routing_key,
            ..
        } => format!(
            "{}.event.{exchange}.{}",
            state.bus.names().namespace(),
            routing_key.as_deref().unwrap_or("#")
        ),
    }
}

/// Runs the listeners until `shutdown`.
pub fn spawn(state: &AppState, shutdown: CancellationToken) -> JoinHandle<()> {
    let state = state.clone();
    tokio::spawn(async move { run(state, shutdown).await })
}

struct Listening {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

async fn run(state: AppState, shutdown: CancellationToken) {
    let table: Table = Arc::default();
    let mut listening: HashMap<String, Listening> = HashMap::new();
    let executions = state.metrics.counter_family(
        "weft_event_handler_executions",
        "What event handlers did with events, by handler and status",
    );
    let mut refreshes = 0u32;
    loop {
        if let Err(e) = refresh(&state, &table, &mut listening, &executions, &shutdown).await {
            tracing::warn!(error = %e, "reading the event handlers failed; trying again later");
        }
        refreshes = refreshes.wrapping_add(1);
        if refreshes.is_multiple_of(PRUNE_EVERY) {
            if let Err(e) = state.store.prune_event_executions(KEPT_EXECUTIONS).await {
                tracing::warn!(error = %e, "pruning event executions failed");
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = state.event_handlers_changed.notified() => {}
            _ = tokio::time::sleep(REFRESH) => {}
        }
    }
    for (_, listener) in listening.drain() {
        listener.stop.cancel();
        let _ = listener.task.await;
    }
}

/// Reads the handlers and starts or stops consumers to match.
async fn refresh(
    state: &AppState,
    table: &Table,
    listening: &mut HashMap<String, Listening>,
    executions: &CounterFamily,
    shutdown: &CancellationToken,
) -> weft::Result<()> {
    let mut wanted: HashMap<String, (Source, Vec<Arc<EventHandler>>)> = HashMap::new();
    for stored in state.store.list_event_handlers().await? {
        let handler = match EventHandler::from_json(&stored.definition) {
            Ok(handler) => handler,
            Err(e) => {
                tracing::warn!(handler = %stored.name, error = %e.summary(), "ignoring an event handler that no longer reads");
                continue;
            }
        };
        if !handler.active {
            continue;
        }
        let queue = queue_of(state, &handler.source);
        let entry = wanted
            .entry(queue)
            .or_insert_with(|| (handler.source.clone(), Vec::new()));
        entry.1.push(Arc::new(handler));
    }
    {
        let mut table = table.write().unwrap_or_else(|e| e.into_inner());
        *table = wanted
            .iter()
            .map(|(queue, (_, handlers))| (queue.clone(), handlers.clone()))
            .collect();
    }
    let gone: Vec<String> = listening
        .keys()
        .filter(|q| !wanted.contains_key(*q))
        .cloned()
        .collect();
    for queue in gone {
        if let Some(listener) = listening.remove(&queue) {
            tracing::info!(%queue, "no active event handler listens here any more; stopping");
            listener.stop.cancel();
            let _ = listener.task.await;
        }
    }
    for (queue, (source, _)) in wanted {
        if listening.contains_key(&queue) {
            continue;
        }
        if let Err(e) = declare(state, &source, &queue).await {
            tracing::warn!(%queue, error = %e, "cannot listen for events here yet");
            continue;
        }
        let stop = shutdown.child_token();
        let task = listen(state, table, &queue, executions, stop.clone());
        tracing::info!(%queue, "listening for events");
        listening.insert(queue, Listening { stop, task });
    }
    Ok(())
}

/// Declares what `source` needs: the queue (with its dead-letter queue) and, for an
/// exchange, the exchange and the binding.
async fn declare(state: &AppState, source: &Source, queue: &str) -> weft::Result<()> {
    match source {
        Source::Queue(_) | Source::Conductor(_) => state.bus.declare_queue(queue, &[]).await,
        Source::Exchange {
            exchange,
            routing_key,
            topic,
            ..
        } => {
            let kind = match topic {
                true => ExchangeKind::Topic,
                false => ExchangeKind::Direct,
            };
            state.bus.declare_exchange(exchange, kind).await?;
            let key = routing_key.as_deref().unwrap_or("#");
            state
                .bus
                .declare_queue(queue, &[(exchange.as_str(), key)])
                .await
        }
    }
}

fn listen(
    state: &AppState,
    table: &Table,
    queue: &str,
    executions: &CounterFamily,
    stop: CancellationToken,
) -> JoinHandle<()> {
    let opts = ConsumeOptions {
        prefetch: (CONCURRENCY * 2) as u16,
        concurrency: CONCURRENCY,
    };
    let (state_, table, executions, queue_) = (
        state.clone(),
        table.clone(),
        executions.clone(),
        queue.to_owned(),
    );
    let pause = stop.clone();
    let handler = move |delivery: RawDelivery| {
        let (state, table, executions, queue, pause) = (
            state_.clone(),
            table.clone(),
            executions.clone(),
            queue_.clone(),
            pause.clone(),
        );
        async move { handle(&state, &table, &executions, &queue, &pause, delivery).await }
    };
    state.bus.consume_raw(queue, opts, handler, stop)
}

/// Hands one message to every active handler of its queue.
async fn handle(
    state: &AppState,
    table: &Table,
    executions: &CounterFamily,
    queue: &str,
    pause: &CancellationToken,
    delivery: RawDelivery,
) -> Disposition {
    let handlers = table
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(queue)
        .cloned()
        .unwrap_or_default();
    if handlers.is_empty() {
        // The last handler went away while this message was on its way: keep it for
        // whoever listens next.
        wait(pause).await;
        return Disposition::Requeue;
    }
    let payload = serde_json::from_slice::<Value>(&delivery.body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&delivery.body).into_owned()));
    let mut done = Vec::new();
    for handler in handlers {
        let event = Event {
            event: handler.event.clone(),
            payload: payload.clone(),
            message_id: delivery.message_id.clone(),
        };
        match actions::run(state, &handler, &event).await {
            Ok(executions) => done.extend(executions),
            Err(actions::Transient(reason)) => {
                tracing::warn!(%queue, handler = %handler.name, %reason, "an event handler met a failed dependency; the event goes back to its queue");
                wait(pause).await;
                return Disposition::Requeue;
            }
        }
    }
    for execution in &done {
        executions
            .get_or_create(&vec![
                ("handler".to_owned(), execution.handler.clone()),
                ("status".to_owned(), execution.status.clone()),
            ])
            .inc();
    }
    if let Err(e) = state.store.record_event_executions(&done).await {
        // The actions took effect: the event is done even if its record is lost.
        tracing::warn!(%queue, error = %e, "recording event executions failed");
    }
    Disposition::Ack
}

async fn wait(stop: &CancellationToken) {
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = tokio::time::sleep(RETRY_PAUSE) => {}
    }
}
