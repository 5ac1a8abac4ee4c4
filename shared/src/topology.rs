//! Names of every exchange and queue (DESIGN.md §4). Names are a contract: all
//! services and workers derive them from the namespace here and nowhere else.

/// Exchange and queue names under one namespace, and the kind of queue they are
/// declared as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    ns: String,
    shards: u16,
    queue_type: QueueType,
}

/// The RabbitMQ queue type of the namespace's durable queues (`WEFT_QUEUE_TYPE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum QueueType {
    /// Classic queues (the default): one node holds each; activity queues are priority
    /// queues.
    #[default]
    Classic,
    /// Quorum queues, replicated over a cluster's nodes (Raft): a queue survives the
    /// loss of a minority of them. RabbitMQ 3.x quorum queues have no priorities, so task
    /// priorities are not applied on them (docs/bus.md, "Quorum queues").
    Quorum,
}

impl std::str::FromStr for QueueType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "classic" | "" => Ok(Self::Classic),
            "quorum" => Ok(Self::Quorum),
            other => Err(format!("{other:?} is not a queue type (classic or quorum)")),
        }
    }
}

impl Names {
    /// Names under `namespace` with `shards` command shards, declared as classic queues.
    pub fn new(namespace: &str, shards: u16) -> Self {
        Self {
            ns: namespace.to_owned(),
            shards,
            queue_type: QueueType::Classic,
        }
    }

    /// The same names, declared as `queue_type` queues.
    pub fn with_queue_type(mut self, queue_type: QueueType) -> Self {
        self.queue_type = queue_type;
        self
    }

    /// The type the namespace's durable queues are declared as.
    pub fn queue_type(&self) -> QueueType {
        self.queue_type
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// The number of command shards.
    pub fn shards(&self) -> u16 {
        self.shards
    }

    /// Direct exchange for decider commands.
    pub fn commands_exchange(&self) -> String {
        format!("{}.commands", self.ns)
    }

    /// Routing key of shard `k` on the commands exchange.
    pub fn shard_key(k: u16) -> String {
        format!("shard.{k}")
    }

    /// Routing key on the commands exchange for `workflow_id`.
    pub fn command_key_for(&self, workflow_id: &str) -> String {
        Self::shard_key(crate::ids::shard_of(workflow_id, self.shards))
    }

    /// Queue of command shard `k` (single active consumer).
    pub fn command_queue(&self, k: u16) -> String {
        format!("{}.commands.{k}", self.ns)
    }

    /// Direct exchange for activity tasks; routing key = task name.
    pub fn activity_exchange(&self) -> String {
        format!("{}.activity", self.ns)
    }

    /// Queue of the activities named `task_name` (an [`activity_key`]: `<domain>:<task>`
    /// for a domain's).
    pub fn activity_queue(&self, task_name: &str) -> String {
        format!("{}.activity.{task_name}", self.ns)
    }

    /// Direct exchange of eagerly dispatched activity tasks (docs/eager-dispatch.md): each
    /// worker process binds its eager queues with their own names as keys.
    pub fn eager_exchange(&self) -> String {
        format!("{}.eager", self.ns)
    }

    /// The common prefix of the eager queues of the worker process `instance` (32 hex
    /// digits).
    pub fn eager_prefix(&self, instance: &str) -> String {
        format!("{}.eager.{instance}", self.ns)
    }

    /// The eager queue of task `task_name` under `prefix`, when `prefix` is an eager prefix
    /// of this namespace (`<ns>.eager.<32 hex digits>`): a worker's offer names it, and the
    /// decider publishes only where a worker of its own namespace can be.
    pub fn eager_queue(&self, prefix: &str, task_name: &str) -> Option<String> {
        let instance = prefix.strip_prefix(&format!("{}.eager.", self.ns))?;
        let valid = instance.len() == 32 && instance.bytes().all(|b| b.is_ascii_hexdigit());
        let queue = format!("{prefix}.{task_name}");
        (valid && queue.len() <= 255).then_some(queue)
    }

    /// Where eager tasks that waited too long in a worker's eager queue go (its
    /// dead-letter target): the decider sends each on to its task's shared queue, one
    /// message a task (docs/eager-dispatch.md).
    pub fn eager_expired_queue(&self) -> String {
        format!("{}.eager.expired", self.ns)
    }

    /// The task whose eager queue `queue` is (`<ns>.eager.<32 hex digits>.<task>` of this
    /// namespace), the inverse of [`Names::eager_queue`].
    pub fn eager_task<'q>(&self, queue: &'q str) -> Option<&'q str> {
        let rest = queue.strip_prefix(&format!("{}.eager.", self.ns))?;
        let (instance, task) = (rest.get(..32)?, rest.get(32..)?.strip_prefix('.')?);
        let valid = instance.bytes().all(|b| b.is_ascii_hexdigit()) && !task.is_empty();
        valid.then_some(task)
    }

    /// Queue of worker heartbeats.
    pub fn heartbeat_queue(&self) -> String {
        format!("{}.heartbeat", self.ns)
    }

    /// Topic exchange of lifecycle events.
    pub fn events_exchange(&self) -> String {
        format!("{}.events", self.ns)
    }

    /// Queue of start events: plain JSON start requests from any AMQP client, published
    /// to it through the default exchange or through [`Names::starts_exchange`].
    pub fn starts_queue(&self) -> String {
        format!("{}.starts", self.ns)
    }

    /// Topic exchange bound to the start-event queue with `#` (the same name as the
    /// queue; AMQP keeps exchanges and queues apart).
    pub fn starts_exchange(&self) -> String {
        format!("{}.starts", self.ns)
    }

    /// Dead-letter queue of `queue`.
    pub fn dlq(queue: &str) -> String {
        format!("{queue}.dlq")
    }
}

/// Whether `domain` can name a task domain: 1 to 64 letters, digits, `_` or `-` (it
/// becomes part of a queue's name).
pub fn is_valid_domain(domain: &str) -> bool {
    !domain.is_empty()
        && domain.len() <= 64
        && domain
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The key of the activity queue of tasks named `task_name` in `domain` (Conductor's
/// `<domain>:<task>` queue name), the task name alone without one: the routing key on the
/// activity exchange and the last part of the queue's name (docs/domains.md).
pub fn activity_key<'a>(task_name: &'a str, domain: Option<&str>) -> std::borrow::Cow<'a, str> {
    match domain {
        Some(domain) => format!("{domain}:{task_name}").into(),
        None => task_name.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_design() {
        let n = Names::new("weft", 16);
        assert_eq!(n.commands_exchange(), "weft.commands");
        assert_eq!(n.command_queue(3), "weft.commands.3");
        assert_eq!(n.activity_queue("shout"), "weft.activity.shout");
        assert_eq!(Names::dlq(&n.heartbeat_queue()), "weft.heartbeat.dlq");
        assert!(n.command_key_for("wf").starts_with("shard."));
        assert_eq!(n.starts_queue(), "weft.starts");
        assert_eq!(n.starts_exchange(), "weft.starts");
    }

    #[test]
    fn an_eager_queue_is_named_only_under_an_eager_prefix_of_the_namespace() {
        let n = Names::new("weft", 16);
        let instance = "0123456789abcdef0123456789abcdef";
        let prefix = n.eager_prefix(instance);
        assert_eq!(prefix, format!("weft.eager.{instance}"));
        assert_eq!(
            n.eager_queue(&prefix, "shout").as_deref(),
            Some(format!("weft.eager.{instance}.shout").as_str())
        );
        // Somewhere else: another namespace, a command queue, a short or odd instance.
        assert_eq!(
            n.eager_queue(&format!("other.eager.{instance}"), "shout"),
            None
        );
        assert_eq!(n.eager_queue("weft.commands", "0"), None);
        assert_eq!(n.eager_queue("weft.eager.abc", "shout"), None);
        assert_eq!(
            n.eager_queue(&format!("weft.eager.{}", "z".repeat(32)), "t"),
            None
        );
        assert_eq!(n.eager_queue(&prefix, &"t".repeat(300)), None);
    }

    #[test]
    fn an_eager_queues_task_is_read_back_from_its_name() {
        let n = Names::new("weft", 16);
        let prefix = n.eager_prefix("0123456789abcdef0123456789abcdef");
        let queue = n.eager_queue(&prefix, "make.name").unwrap();
        assert_eq!(n.eager_task(&queue), Some("make.name"));
        assert_eq!(n.eager_task(&prefix), None);
        assert_eq!(n.eager_task(&format!("{prefix}.")), None);
        assert_eq!(n.eager_task("weft.activity.make_name"), None);
        assert_eq!(n.eager_task(&queue.replacen("weft", "other", 1)), None);
        assert_eq!(
            n.eager_task(&format!("weft.eager.{}.t", "z".repeat(32))),
            None
        );
    }
}
