//! Topology: exchanges, queues, their dead-letter queues and bindings (DESIGN.md §4).
//!
//! RabbitMQ refuses a re-declaration whose arguments differ (PRECONDITION_FAILED), so
//! every queue's arguments come from [`queue_arguments`] and nowhere else.

use amqprs::channel::{
    ExchangeDeclareArguments, ExchangeDeleteArguments, ExchangeType, QueueBindArguments,
    QueueDeclareArguments, QueueDeleteArguments,
};
use amqprs::{FieldTable, FieldValue};

use super::client::{code, AmqpError, Chan};
use super::connection::{Declared, Link, Role, Session};
use super::publish::text;
use crate::bus::check_name;
use crate::topology::{Names, QueueType};
use crate::Result;

/// What a queue is for; decides its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueKind {
    /// A command shard: one active consumer at a time keeps per-run order.
    Shard,
    /// An activity queue (`<ns>.activity.<task>`): a priority queue
    /// (`crate::bus::priority`).
    Activity,
    /// Any other work queue (heartbeats, listeners).
    Work,
    /// A dead-letter queue: the end of the line, it dead-letters nowhere.
    DeadLetter,
    /// A worker process's eager queue of one task (`<ns>.eager.<instance>.<task>`,
    /// docs/eager-dispatch.md); `ns_len` is the namespace's length in its name. What waits
    /// in it longer than [`EAGER_TTL_MS`] goes to `<ns>.eager.expired`, whence the decider
    /// sends it on to the task's activity queue; unused for [`EAGER_EXPIRES_MS`], it is
    /// deleted. It has no DLQ.
    Eager { ns_len: usize },
}

/// How long an eagerly dispatched task waits for its worker before it goes on to its
/// task's shared queue (the worker is gone, or busy).
pub(crate) const EAGER_TTL_MS: u32 = 5_000;
/// How long a worker's eager queue outlives its last consumer: far longer than
/// [`EAGER_TTL_MS`], so that whatever waits in it has moved on first.
pub(crate) const EAGER_EXPIRES_MS: u32 = 600_000;

/// The arguments of every queue Weft declares.
pub(crate) fn queue_arguments(queue: &str, kind: QueueKind, queue_type: QueueType) -> FieldTable {
    let mut args = FieldTable::new();
    let mut put = |name: &str, value: FieldValue| {
        if let Ok(name) = name.try_into() {
            args.insert(name, value);
        }
    };
    // A worker's eager queues too: a task waiting in one must outlive the node it is on,
    // to move on to its shared queue (RabbitMQ 3.10 quorum queues expire messages and
    // themselves).
    let quorum = queue_type == QueueType::Quorum;
    if quorum {
        put("x-queue-type", text("quorum"));
    }
    if kind == QueueKind::DeadLetter {
        return args;
    }
    if let QueueKind::Eager { ns_len } = kind {
        // `<ns>.eager.<32 hex digits>.<task>`: past its TTL a message goes to
        // `<ns>.eager.expired` (through the default exchange, which every worker may
        // write to), where the decider splits what was sent together and sends each task
        // on to its shared queue: a shared queue only ever holds single tasks.
        let ns = &queue[..ns_len];
        put("x-dead-letter-exchange", text(""));
        put(
            "x-dead-letter-routing-key",
            text(&format!("{ns}.eager.expired")),
        );
        put("x-message-ttl", FieldValue::i(EAGER_TTL_MS));
        put("x-expires", FieldValue::i(EAGER_EXPIRES_MS));
        return args;
    }
    // Broker-level rejects (and expiries) land in the DLQ too, not only Weft's own.
    put("x-dead-letter-exchange", text(""));
    put("x-dead-letter-routing-key", text(&Names::dlq(queue)));
    if kind == QueueKind::Shard {
        put("x-single-active-consumer", FieldValue::t(true));
    }
    // RabbitMQ 3.x quorum queues have no priorities (refused at declaration).
    if kind == QueueKind::Activity && !quorum {
        put(
            "x-max-priority",
            FieldValue::B(crate::bus::priority::MAX_LEVEL),
        );
    }
    args
}

/// The kind of a queue Weft declares besides the core topology, from its name.
pub(crate) fn kind_of(names: &Names, queue: &str) -> QueueKind {
    let eager = format!("{}.eager.", names.namespace());
    if let Some(rest) = queue.strip_prefix(&eager) {
        let instance = rest.split('.').next().unwrap_or_default();
        let task_at = instance.len() + 1;
        if instance.len() == 32 && rest.len() > task_at && !queue.ends_with(".dlq") {
            return QueueKind::Eager {
                ns_len: names.namespace().len(),
            };
        }
    }
    let activity_prefix = format!("{}.", names.activity_exchange());
    match queue.starts_with(&activity_prefix) && !queue.ends_with(".dlq") {
        true => QueueKind::Activity,
        false => QueueKind::Work,
    }
}

/// Declares `queue` as `kind`; an activity queue that exists without priorities (declared
/// before they existed: RabbitMQ refuses to change a queue's arguments) is declared as it
/// is, with a warning — it works, without priorities, until it is deleted and declared
/// anew (docs/priority.md).
///
/// A client's declaration the broker refuses for want of permission is not an error: a
/// worker granted only to consume its activity queues (docs/rabbitmq-users.md) consumes
/// what the services declared — the decider declares an activity queue before it
/// publishes the first task there, and the consumer waits for it until then.
async fn declare_kind(
    session: &Session,
    queue: &str,
    kind: QueueKind,
    bindings: &[(String, String)],
    role: Role,
    queue_type: QueueType,
) -> Result<(), AmqpError> {
    let ch = session.channel().await?;
    let first = declare_queue(&ch, queue, kind, bindings, queue_type).await;
    match first {
        // A worker's own queue exists only if it declares it: a refusal is an error (the
        // worker goes without eager dispatch).
        Err(e) if matches!(kind, QueueKind::Eager { .. }) => Err(e),
        // A client configured otherwise than the services (another WEFT_QUEUE_TYPE):
        // the queue is theirs, so it is consumed as they declared it.
        Err(e) if role == Role::Client && e.is(code::PRECONDITION_FAILED) => {
            tracing::warn!(%queue, error = %e, "the queue exists with other arguments (is WEFT_QUEUE_TYPE the same as the services'?); consuming it as it is");
            Ok(())
        }
        Err(e) if kind == QueueKind::Activity && e.is(code::PRECONDITION_FAILED) => {
            // The refusal closed that channel.
            let ch = session.channel().await?;
            match declare_queue(&ch, queue, QueueKind::Work, bindings, queue_type).await {
                Ok(()) => {
                    ch.close().await;
                    tracing::warn!(%queue, error = %e, "activity queue exists without priorities; task priorities are ignored on it until it is deleted and declared again");
                    Ok(())
                }
                // Not for want of priorities: another queue type altogether, declared by
                // a worker configured otherwise. Its tasks must still reach it: failing
                // here would fail every command that schedules one, again and again.
                Err(again) if again.is(code::PRECONDITION_FAILED) => {
                    tracing::error!(%queue, error = %again, "the activity queue exists with another queue type (is WEFT_QUEUE_TYPE the same in every process?); publishing to it as it is");
                    bind_existing(session, queue, bindings).await
                }
                Err(again) => Err(again),
            }
        }
        Err(e) if role == Role::Client && e.is(code::ACCESS_REFUSED) => {
            // The refusal closed that channel. A passive declaration needs no permission.
            let ch = session.channel().await?;
            match declare_passive(&ch, queue).await {
                Ok(_) => {
                    ch.close().await;
                    tracing::info!(%queue, "not permitted to declare the queue; it exists: consuming it as the services declared it");
                }
                Err(missing) => {
                    tracing::warn!(%queue, error = %missing, "not permitted to declare the queue, and it does not exist yet: the services declare it before its first message; consuming it from then on")
                }
            }
            Ok(())
        }
        other => {
            ch.close().await;
            other
        }
    }
}

/// A passive declaration of `queue` (no permission needed): its ready messages, or
/// NOT_FOUND (which closes the channel).
pub(crate) async fn declare_passive(ch: &Chan, queue: &str) -> Result<u32, AmqpError> {
    let args = QueueDeclareArguments::new(queue).passive(true).finish();
    let declared = ch
        .call(|c| async move { c.queue_declare(args).await })
        .await?;
    Ok(declared.map_or(0, |(_, messages, _)| messages))
}

/// Binds `queue` to each `(exchange, routing key)`.
async fn bind_all(ch: &Chan, queue: &str, bindings: &[(String, String)]) -> Result<(), AmqpError> {
    for (exchange, key) in bindings {
        let args = QueueBindArguments::new(queue, exchange, key);
        ch.call(|c| async move { c.queue_bind(args).await }).await?;
    }
    Ok(())
}

/// Binds `queue`, which exists with arguments of its own, as it is (a passive declaration
/// first: an error when it does not exist after all).
async fn bind_existing(
    session: &Session,
    queue: &str,
    bindings: &[(String, String)],
) -> Result<(), AmqpError> {
    let ch = session.channel().await?;
    declare_passive(&ch, queue).await?;
    bind_all(&ch, queue, bindings).await?;
    ch.close().await;
    Ok(())
}

async fn declare_exchange(ch: &Chan, name: &str, kind: ExchangeType) -> Result<(), AmqpError> {
    let args = ExchangeDeclareArguments::of_type(name, kind)
        .durable(true)
        .finish();
    ch.call(|c| async move { c.exchange_declare(args).await })
        .await
}

/// Declares `queue` and its DLQ, then binds `queue` to each `(exchange, routing key)`.
async fn declare_queue(
    ch: &Chan,
    queue: &str,
    kind: QueueKind,
    bindings: &[(String, String)],
    queue_type: QueueType,
) -> Result<(), AmqpError> {
    let durable = |name: &str, arguments: FieldTable| {
        QueueDeclareArguments::new(name)
            .durable(true)
            .arguments(arguments)
            .finish()
    };
    if !matches!(kind, QueueKind::Eager { .. }) {
        let dlq = Names::dlq(queue);
        let args = durable(
            &dlq,
            queue_arguments(&dlq, QueueKind::DeadLetter, queue_type),
        );
        ch.call(|c| async move { c.queue_declare(args).await })
            .await?;
    }
    let args = durable(queue, queue_arguments(queue, kind, queue_type));
    ch.call(|c| async move { c.queue_declare(args).await })
        .await?;
    bind_all(ch, queue, bindings).await?;
    Ok(())
}

/// Declares the core topology of `names` (a client: checks that its exchanges exist),
/// then the queues in `declared`.
pub(crate) async fn core(
    session: &Session,
    names: &Names,
    role: Role,
    declared: &Declared,
) -> Result<(), AmqpError> {
    let qt = names.queue_type();
    if role == Role::Client {
        find_core_exchanges(session, names).await?;
        for (queue, bindings) in declared {
            declare_kind(session, queue, kind_of(names, queue), bindings, role, qt).await?;
        }
        return Ok(());
    }
    let ch = session.channel().await?;
    declare_exchange(&ch, &names.commands_exchange(), ExchangeType::Direct).await?;
    declare_exchange(&ch, &names.activity_exchange(), ExchangeType::Direct).await?;
    declare_exchange(&ch, &names.events_exchange(), ExchangeType::Topic).await?;
    declare_exchange(&ch, &names.starts_exchange(), ExchangeType::Topic).await?;
    declare_exchange(&ch, &names.eager_exchange(), ExchangeType::Direct).await?;
    for k in 0..names.shards() {
        let binding = [(names.commands_exchange(), Names::shard_key(k))];
        declare_queue(&ch, &names.command_queue(k), QueueKind::Shard, &binding, qt).await?;
    }
    declare_queue(&ch, &names.heartbeat_queue(), QueueKind::Work, &[], qt).await?;
    declare_queue(&ch, &names.eager_expired_queue(), QueueKind::Work, &[], qt).await?;
    let every_start = [(names.starts_exchange(), "#".to_owned())];
    declare_queue(
        &ch,
        &names.starts_queue(),
        QueueKind::Work,
        &every_start,
        qt,
    )
    .await?;
    ch.close().await;
    for (queue, bindings) in declared {
        declare_kind(session, queue, kind_of(names, queue), bindings, role, qt).await?;
    }
    Ok(())
}

/// Checks, with passive declarations (which need no permission), that the services
/// declared the core exchanges: a client binds its queues to them and publishes to them.
/// NOT_FOUND until a service of the namespace has connected once.
async fn find_core_exchanges(session: &Session, names: &Names) -> Result<(), AmqpError> {
    let ch = session.channel().await?;
    for exchange in [
        names.commands_exchange(),
        names.activity_exchange(),
        names.events_exchange(),
        names.starts_exchange(),
    ] {
        // The kind is not checked by a passive declaration.
        let args = ExchangeDeclareArguments::of_type(&exchange, ExchangeType::Direct)
            .passive(true)
            .finish();
        ch.call(|c| async move { c.exchange_declare(args).await })
            .await?;
    }
    ch.close().await;
    Ok(())
}

impl Link {
    /// Declares a work queue with its DLQ and bindings once per `Link`.
    pub(crate) async fn declare_queue(
        &self,
        queue: &str,
        bindings: Vec<(String, String)>,
    ) -> Result<()> {
        check_name("queue", &Names::dlq(queue))?;
        for (exchange, key) in &bindings {
            check_name("exchange", exchange)?;
            check_name("routing key", key)?;
        }
        let missing: Vec<(String, String)> = match self.declared().get(queue) {
            Some(have) => bindings.into_iter().filter(|b| !have.contains(b)).collect(),
            None => bindings,
        };
        if missing.is_empty() && self.declared().contains_key(queue) {
            return Ok(());
        }
        let session = self.session().await.map_err(|f| f.into_error())?;
        let kind = kind_of(&self.names, queue);
        let qt = self.names.queue_type();
        declare_kind(&session, queue, kind, &missing, self.role, qt).await?;
        self.declared()
            .entry(queue.to_owned())
            .or_default()
            .extend(missing);
        Ok(())
    }

    /// Declares a durable exchange once per `Link` (see `Bus::declare_exchange`).
    pub(crate) async fn declare_exchange(
        &self,
        exchange: &str,
        kind: crate::bus::ExchangeKind,
    ) -> Result<()> {
        if self.declared_exchanges().contains(exchange) {
            return Ok(());
        }
        let kind = match kind {
            crate::bus::ExchangeKind::Direct => ExchangeType::Direct,
            crate::bus::ExchangeKind::Topic => ExchangeType::Topic,
        };
        let session = self.session().await.map_err(|f| f.into_error())?;
        let ch = session.channel().await?;
        let declared = declare_exchange(&ch, exchange, kind).await;
        ch.close().await;
        declared?;
        self.declared_exchanges().insert(exchange.to_owned());
        Ok(())
    }

    fn declared_exchanges(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<String>> {
        self.exchanges.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Deletes the namespace's queues (with their DLQs) and exchanges; see `Bus::teardown`.
    pub(crate) async fn teardown(&self, extra_queues: &[String]) -> Result<()> {
        let names = &self.names;
        let mut queues: Vec<String> = (0..names.shards())
            .map(|k| names.command_queue(k))
            .collect();
        queues.push(names.heartbeat_queue());
        queues.push(names.eager_expired_queue());
        queues.push(names.starts_queue());
        queues.extend(self.declared().keys().cloned());
        queues.extend(extra_queues.iter().cloned());
        // A name too long to declare was never declared.
        queues.retain(|q| check_name("queue", &Names::dlq(q)).is_ok());
        queues.sort();
        queues.dedup();

        let session = self.session().await.map_err(|f| f.into_error())?;
        let mut ch = session.channel().await?;
        for queue in &queues {
            for name in [queue.clone(), Names::dlq(queue)] {
                let args = QueueDeleteArguments::new(&name);
                let res = ch.call(|c| async move { c.queue_delete(args).await }).await;
                if let Err(e) = res {
                    // A failed delete closes the channel; carry on with a new one.
                    tracing::debug!(queue = %name, error = %e, "queue delete failed");
                    ch = session.channel().await?;
                }
            }
        }
        let mut exchanges = vec![
            names.commands_exchange(),
            names.activity_exchange(),
            names.events_exchange(),
            names.starts_exchange(),
            names.eager_exchange(),
        ];
        exchanges.extend(std::mem::take(&mut *self.declared_exchanges()));
        for exchange in exchanges {
            let args = ExchangeDeleteArguments::new(&exchange);
            let res = ch
                .call(|c| async move { c.exchange_delete(args).await })
                .await;
            if let Err(e) = res {
                tracing::debug!(%exchange, error = %e, "exchange delete failed");
                ch = session.channel().await?;
            }
        }
        ch.close().await;
        self.declared().clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(args: &FieldTable, name: &str) -> Option<FieldValue> {
        args.get(&name.try_into().unwrap()).cloned()
    }

    #[test]
    fn quorum_queues_are_declared_quorum_without_priorities() {
        let names = Names::new("weft", 4).with_queue_type(QueueType::Quorum);
        let quorum = |queue: &str| {
            let args = queue_arguments(queue, kind_of(&names, queue), QueueType::Quorum);
            (
                arg(&args, "x-queue-type"),
                arg(&args, "x-max-priority").is_some(),
            )
        };
        let q = Some(text("quorum"));
        assert_eq!(quorum("weft.activity.shout"), (q.clone(), false));
        assert_eq!(quorum("weft.commands.3"), (q.clone(), false));
        assert_eq!(quorum("weft.heartbeat"), (q.clone(), false));
        let dlq = queue_arguments(
            "weft.heartbeat.dlq",
            QueueKind::DeadLetter,
            QueueType::Quorum,
        );
        assert_eq!(arg(&dlq, "x-queue-type"), q);
        let eager = "weft.eager.0123456789abcdef0123456789abcdef.shout";
        assert_eq!(quorum(eager), (q, false));
        // Classic activity queues keep their priorities.
        let classic = queue_arguments(
            "weft.activity.shout",
            QueueKind::Activity,
            QueueType::Classic,
        );
        assert!(arg(&classic, "x-max-priority").is_some());
        assert!(arg(&classic, "x-queue-type").is_none());
    }

    #[test]
    fn an_eager_queue_dead_letters_to_the_expired_queue_through_the_default_exchange() {
        let names = Names::new("ns", 4);
        let queue = "ns.eager.0123456789abcdef0123456789abcdef.shout";
        let args = queue_arguments(queue, kind_of(&names, queue), QueueType::Classic);
        assert_eq!(arg(&args, "x-dead-letter-exchange"), Some(text("")));
        assert_eq!(
            arg(&args, "x-dead-letter-routing-key"),
            Some(text(&names.eager_expired_queue()))
        );
        assert_eq!(
            arg(&args, "x-message-ttl"),
            Some(FieldValue::i(EAGER_TTL_MS))
        );
        assert_eq!(
            kind_of(&names, &names.eager_expired_queue()),
            QueueKind::Work,
            "the expired queue is a work queue with a DLQ of its own"
        );
    }

    #[test]
    fn shard_queues_have_a_single_active_consumer_and_a_dlq() {
        let args = queue_arguments("weft.commands.3", QueueKind::Shard, QueueType::Classic);
        assert_eq!(
            arg(&args, "x-single-active-consumer"),
            Some(FieldValue::t(true))
        );
        assert_eq!(
            arg(&args, "x-dead-letter-routing-key"),
            Some(text("weft.commands.3.dlq"))
        );
        assert!(
            queue_arguments("q.dlq", QueueKind::DeadLetter, QueueType::Classic)
                .as_ref()
                .is_empty()
        );
    }
}
