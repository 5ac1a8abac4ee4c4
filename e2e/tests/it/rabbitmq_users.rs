//! Least-privilege RabbitMQ users (docs/rabbitmq-users.md): `scripts/rabbitmq-users`
//! creates them in a virtual host of the test's own, then
//!
//! - a worker's credentials are tried with raw AMQP: it consumes its activity queue and
//!   sends a result, and the broker refuses it (403) everything else it could abuse:
//!   another task type's queue, the command, heartbeat and start-event queues,
//!   publishing tasks, events or starts, declaring, binding, purging, deleting;
//! - every service, the example worker, the HTTP worker, an event listener and a
//!   publisher of start events run under their own users, and real runs complete:
//!   `greet` started over REST and by a start event, and a run with an HTTP task, an
//!   EVENT task publishing to an exchange outside the namespace (`--sinks`) whose event
//!   handler completes the run's WAIT task, and a task polled over HTTP; the listener
//!   receives their `workflow.completed` events.
//!
//! The virtual host and every user are deleted at the end (also when the test fails).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions,
    ConfirmSelectOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use weft::listener::{EventListener, ListenerError};
use weft::messages::LifecycleEvent;
use weft::topology::Names;
use weft_e2e::amqp::RawBus;
use weft_e2e::{greet, poll_until, EnvOptions, Service, Suite, TestEnv};

use crate::{assert_greet_completed, RUN_TIMEOUT};

/// The script under test.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/rabbitmq-users");
/// The worker the script makes for the example worker's task types.
const WORKER: &str = "greet";
/// Its task types: those `weft-worker-example` serves.
const WORKER_TASKS: &str = "make_name,shout,count,slow";
/// The event listener the script makes, and the name it runs as.
const LISTENER: &str = "audit";
/// The publisher of start events the script makes.
const STARTER: &str = "shop";
/// A task type no bus worker serves: polled over HTTP through the gateway.
const POLLED: &str = "users_polled";
/// The routing key of the EVENT task's message, which the event handler listens to.
const ORDER_KEY: &str = "order.created";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_principal_runs_with_only_its_own_permissions() {
    let options = EnvOptions {
        shards: 4,
        // The listener's events: the decider publishes only the keys switched on.
        extra_env: vec![("WEFT_EVENTS".to_owned(), "workflow.completed".to_owned())],
        ..EnvOptions::default()
    };
    let mut env = TestEnv::create(options).await.unwrap();
    let names = env.names();
    let mut broker = Broker::create(&env.namespace, &env.amqp_url).await.unwrap();
    env.amqp_url = broker.admin_url();
    env.activity_queues.push(names.activity_queue(POLLED));
    // Owns the environment from here: dropped before the broker's virtual host, it tears
    // its namespace down in it (and drops its database).
    let mut suite = Suite::new(env).unwrap();

    let passwords = broker.run_script(&[]).await.unwrap();
    let users: Vec<String> = passwords.keys().cloned().collect();
    assert_eq!(users, broker.users(), "one generated password per new user");
    let permissions = broker.permissions().await.unwrap();
    // Again, with a password for the worker: permissions as they were, passwords kept
    // except the one given, nothing printed.
    let worker_user = broker.user(&format!("worker-{WORKER}"));
    let worker_password = "worker-password-from-env";
    let again = broker
        .run_script(&[(password_variable(&worker_user), worker_password)])
        .await
        .unwrap();
    assert!(
        again.is_empty(),
        "a second run generates nothing: {again:?}"
    );
    assert_eq!(broker.permissions().await.unwrap(), permissions);
    let url = |principal: &str| {
        let user = broker.user(principal);
        let password = match user == worker_user {
            true => worker_password,
            false => passwords[&user].as_str(),
        };
        broker.url(&user, password)
    };

    // The services' topology, as any service declares it on connecting, and a queue of
    // a task type the worker does not serve.
    let admin =
        weft::bus::Bus::connect(&broker.admin_url(), names.clone(), CancellationToken::new())
            .await
            .unwrap();
    admin.declare_activity_queue("make_name").await.unwrap();
    admin.declare_activity_queue("other").await.unwrap();
    let raw_admin = RawBus::connect(&broker.admin_url()).await.unwrap();
    check_worker(&url(&format!("worker-{WORKER}")), &names, &raw_admin).await;
    check_others(&url, &names).await;
    raw_admin.close().await;

    // Everything under its own user.
    for (service, principal) in [
        (Service::Gateway, "gateway".to_owned()),
        (Service::Decider, "decider".to_owned()),
        (Service::History, "history".to_owned()),
        (Service::Heartbeat, "heartbeat".to_owned()),
        (Service::Worker, format!("worker-{WORKER}")),
        (Service::HttpWorker, "http-worker".to_owned()),
    ] {
        suite.set_service_env(service, "WEFT_AMQP_URL", &url(&principal));
    }
    suite.spawn_all(&Service::ALL).await.unwrap();
    let (events, mut completed) = mpsc::unbounded_channel();
    let stop_listener = CancellationToken::new();
    let listener = {
        let config = weft::Config {
            amqp_url: url(&format!("listener-{LISTENER}")),
            ..suite.worker_config()
        };
        let stop = stop_listener.clone();
        tokio::spawn(async move {
            weft::listener::run(&config, LISTENER, Completions(events), stop).await
        })
    };

    // The runs' events reach only a queue that exists (and is bound) by then.
    let audit = weft::listener::queue_name(&names, LISTENER);
    wait_for_queue(&admin, &audit).await;

    let client = suite.client();
    client.register(&greet::definition()).await.unwrap();
    let by_rest = client.start("greet", greet::input("Ada", 3)).await.unwrap();
    let by_event = start_by_event(&url(&format!("starter-{STARTER}")), &names).await;
    let orders = broker.sink();
    listen_for_orders(&suite, &admin, &orders).await;
    drop(admin);
    let mixed = start_mixed(&suite, &orders).await;
    assert_greet_completed(client, &by_rest, "Ada", 3).await;
    assert_greet_completed(client, &by_event, "Bo", 2).await;
    complete_polled(&suite, &mixed).await;
    let run = client
        .wait_for_status(&mixed, &["COMPLETED"], RUN_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}", suite.describe()));
    let output = json!({"status": 200, "paid": "handler", "done": "yes"});
    assert_eq!(run["output"], output, "{run}");

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let event = tokio::time::timeout(RUN_TIMEOUT, completed.recv())
            .await
            .expect("the listener receives every workflow.completed")
            .expect("the listener runs");
        assert_eq!(event.event, "workflow.completed");
        seen.push(event.workflow_id);
    }
    seen.sort();
    let mut expected = vec![by_rest, by_event, mixed];
    expected.sort();
    assert_eq!(seen, expected);

    stop_listener.cancel();
    listener.await.unwrap().unwrap();
    drop(suite);
    broker.cleanup().await.unwrap();
}

/// The worker's user: its activity queue and the commands exchange, and nothing more.
async fn check_worker(url: &str, names: &Names, admin: &RawBus) {
    let worker = As::connect(url).await;
    let own = names.activity_queue("make_name");
    let other = names.activity_queue("other");

    // Allowed: take a task of its own, send a result.
    admin
        .publish(
            &names.activity_exchange(),
            "make_name",
            b"task for the worker",
        )
        .await
        .unwrap();
    let channel = worker.channel().await;
    let mut tasks = channel
        .basic_consume(
            own.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("the worker consumes its activity queue");
    let task = tokio::time::timeout(RUN_TIMEOUT, tasks.next())
        .await
        .expect("the task is delivered")
        .expect("the consumer is open")
        .expect("a delivery");
    assert_eq!(task.data, b"task for the worker");
    task.ack(BasicAckOptions::default()).await.unwrap();
    let key = Names::shard_key(1);
    let confirm = worker
        .publish(&names.commands_exchange(), &key, b"a result")
        .await
        .expect("the worker sends results to the commands exchange");
    assert!(confirm.is_ack());
    let result = admin.get(&names.command_queue(1)).await.unwrap();
    assert_eq!(result.map(|m| m.body), Some(b"a result".to_vec()));
    // A passive declaration needs no permission: it shows a queue exists (and its
    // counts), nothing more.
    worker
        .channel()
        .await
        .queue_declare(other.as_str().into(), passive(), FieldTable::default())
        .await
        .expect("a passive declaration is allowed");

    // Refused: other queues.
    for queue in [
        other.clone(),
        names.command_queue(0),
        names.heartbeat_queue(),
        names.starts_queue(),
        Names::dlq(&own),
    ] {
        refused(&format!("consuming {queue}"), worker.consume(&queue).await);
        refused(&format!("basic.get on {queue}"), worker.get(&queue).await);
    }
    // Refused: publishing anything but results.
    for exchange in [
        names.activity_exchange(),
        names.events_exchange(),
        names.starts_exchange(),
    ] {
        refused(
            &format!("publishing to {exchange}"),
            worker.publish(&exchange, "other", b"forged").await,
        );
    }
    // Refused: changing the topology, its own queue included; binding its queue to
    // another task type's routing key (which would copy that type's tasks to it).
    for queue in [other.clone(), own.clone(), names.activity_queue("new_type")] {
        refused(&format!("declaring {queue}"), worker.declare(&queue).await);
    }
    let exchange = names.activity_exchange();
    let bind = worker.bind(&own, &exchange, "other").await;
    refused("binding its queue to another task type", bind);
    refused("deleting its own queue", worker.delete_queue(&own).await);
    refused("purging another queue", worker.purge(&other).await);
    let commands = names.commands_exchange();
    let delete = worker.delete_exchange(&commands).await;
    refused("deleting the commands exchange", delete);
    worker.close().await;
}

/// A few refusals of the other principals: each reaches only what its table says.
async fn check_others(url: &impl Fn(&str) -> String, names: &Names) {
    let listener = As::connect(&url(&format!("listener-{LISTENER}"))).await;
    let queue = names.command_queue(0);
    refused(
        "the listener consuming commands",
        listener.consume(&queue).await,
    );
    let (commands, shard) = (names.commands_exchange(), Names::shard_key(0));
    let forged = listener.publish(&commands, &shard, b"forged");
    refused("the listener publishing commands", forged.await);
    listener.close().await;

    let starter = As::connect(&url(&format!("starter-{STARTER}"))).await;
    let starts = names.starts_queue();
    refused(
        "the starter consuming starts",
        starter.consume(&starts).await,
    );
    let forged = starter.publish(&commands, &shard, b"forged");
    refused("the starter publishing commands", forged.await);
    starter.close().await;

    let history = As::connect(&url("history")).await;
    let tasks = names.activity_queue("make_name");
    refused(
        "the history service taking tasks",
        history.get(&tasks).await,
    );
    history.close().await;

    let heartbeat = As::connect(&url("heartbeat")).await;
    let activity = names.activity_exchange();
    let forged = heartbeat.publish(&activity, "make_name", b"forged");
    refused("the heartbeat service publishing tasks", forged.await);
    heartbeat.close().await;
}

/// Starts `greet("Bo", 2)` the way an upstream system does: a start event on the
/// start-event exchange, asking for a reply; returns the run's id from the reply.
async fn start_by_event(url: &str, names: &Names) -> String {
    let starter = As::connect(url).await;
    let channel = starter.channel().await;
    let reply_to = "amq.rabbitmq.reply-to";
    let no_ack = BasicConsumeOptions {
        no_ack: true,
        ..BasicConsumeOptions::default()
    };
    let mut replies = channel
        .basic_consume(reply_to.into(), "".into(), no_ack, FieldTable::default())
        .await
        .expect("the starter takes its replies");
    let body = json!({"name": "greet", "input": greet::input("Bo", 2)}).to_string();
    let properties = BasicProperties::default()
        .with_delivery_mode(2)
        .with_message_id("order-1-created".into())
        .with_reply_to(reply_to.into())
        .with_correlation_id("order-1".into());
    channel
        .basic_publish(
            names.starts_exchange().as_str().into(),
            "orders".into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            properties,
        )
        .await
        .expect("the starter publishes start events");
    let reply = tokio::time::timeout(RUN_TIMEOUT, replies.next())
        .await
        .expect("the gateway replies")
        .expect("the reply consumer is open")
        .expect("a reply");
    let reply: Value = serde_json::from_slice(&reply.data).unwrap();
    starter.close().await;
    reply["workflowId"]
        .as_str()
        .unwrap_or_else(|| panic!("no run in the reply {reply}"))
        .to_owned()
}

/// Registers an event handler (the gateway's) on the exchange `orders`, outside the
/// namespace, that completes the WAIT task `paid` of the run an event names; waits
/// until the gateway listens (its queue exists), since a message the exchange routes
/// to no queue is dropped.
async fn listen_for_orders(suite: &Suite, admin: &weft::bus::Bus, orders: &str) {
    let handler = json!({
        "name": "users-paid", "event": format!("amqp_exchange:{orders}:{ORDER_KEY}"),
        "active": true,
        "actions": [{"action": "complete_task", "complete_task": {
            "workflowId": "${workflowId}", "taskRefName": "paid",
            "output": {"by": "handler"}}}]
    });
    let r = suite
        .client()
        .post_json("/api/event", &handler)
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    let queue = format!("{}.event.{orders}.{ORDER_KEY}", admin.names().namespace());
    wait_for_queue(admin, &queue).await;
}

/// Waits until `queue` exists: a consumer of it declared it, and binds it right after.
async fn wait_for_queue(admin: &weft::bus::Bus, queue: &str) {
    poll_until(
        RUN_TIMEOUT,
        Duration::from_millis(50),
        || format!("{queue} was never declared"),
        || async { Ok(admin.message_count(queue).await.ok()) },
    )
    .await
    .unwrap();
}

/// Starts a run of an HTTP task (the HTTP worker's, calling the gateway's `/healthz`),
/// an EVENT task publishing to `orders`, the WAIT task the event's handler completes,
/// then a task polled over HTTP (taken from its queue by the gateway).
async fn start_mixed(suite: &Suite, orders: &str) -> String {
    let definition = json!({
        "name": "users_mixed", "version": 1,
        "tasks": [
            {"name": "ping", "taskReferenceName": "ping", "type": "HTTP",
             "inputParameters": {"http_request": {
                 "uri": format!("{}/healthz", suite.gateway_url()), "method": "GET"}}},
            {"name": "announce", "taskReferenceName": "announce", "type": "EVENT",
             "sink": format!("amqp_exchange:{orders}:{ORDER_KEY}"),
             "inputParameters": {"workflowId": "${workflow.workflowId}"}},
            {"name": "paid", "taskReferenceName": "paid", "type": "WAIT"},
            {"name": POLLED, "taskReferenceName": "polled", "type": "SIMPLE"}
        ],
        "outputParameters": {"status": "${ping.output.response.statusCode}",
                             "paid": "${paid.output.by}", "done": "${polled.output.done}"}
    });
    suite.client().register(&definition).await.unwrap();
    suite
        .client()
        .start("users_mixed", json!({}))
        .await
        .unwrap()
}

/// Polls the run's SIMPLE task over HTTP, as a Conductor worker does, and completes it.
async fn complete_polled(suite: &Suite, id: &str) {
    let path = format!("/api/tasks/poll/batch/{POLLED}?workerid=users&count=1&timeout=1000");
    let task = poll_until(
        RUN_TIMEOUT,
        Duration::from_millis(10),
        || format!("the task of {id} was never handed out"),
        || async {
            let r = suite
                .client()
                .raw(reqwest::Method::GET, &path, None)
                .await?;
            anyhow::ensure!(r.status == 200, "poll answered {}: {}", r.status, r.text);
            Ok(r.json
                .and_then(|tasks| tasks.as_array().and_then(|a| a.first().cloned())))
        },
    )
    .await
    .unwrap();
    assert_eq!(task["workflowInstanceId"], json!(id));
    let result = json!({"taskId": task["taskId"], "workflowInstanceId": id,
                        "status": "COMPLETED", "outputData": {"done": "yes"}});
    let r = suite
        .client()
        .post_json("/api/tasks", &result)
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
}

/// Hands every event to the test.
struct Completions(mpsc::UnboundedSender<LifecycleEvent>);

impl EventListener for Completions {
    fn bindings(&self) -> Vec<String> {
        vec!["workflow.completed".to_owned()]
    }

    async fn on_event(&self, event: LifecycleEvent) -> Result<(), ListenerError> {
        let _ = self.0.send(event);
        Ok(())
    }
}

/// Asserts that the broker refused `what` for want of permission (403 ACCESS_REFUSED).
fn refused<T>(what: &str, result: lapin::Result<T>) {
    match result {
        Ok(_) => panic!("{what}: allowed, but the permissions must refuse it"),
        Err(e) => {
            let is_403 = matches!(e.kind(), lapin::ErrorKind::ProtocolError(p)
                if *p.kind() == AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED));
            assert!(is_403, "{what}: expected ACCESS_REFUSED, got {e}");
        }
    }
}

fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    }
}

/// One AMQP connection under one user; every operation on a channel of its own, since
/// a refusal closes the channel it happened on.
struct As(Connection);

impl As {
    async fn connect(url: &str) -> Self {
        let conn = Connection::connect(url, ConnectionProperties::default())
            .await
            .unwrap_or_else(|e| panic!("connecting as {url}: {e}"));
        Self(conn)
    }

    async fn channel(&self) -> Channel {
        self.0.create_channel().await.unwrap()
    }

    async fn consume(&self, queue: &str) -> lapin::Result<lapin::Consumer> {
        let channel = self.channel().await;
        channel
            .basic_consume(
                queue.into(),
                "".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
    }

    async fn get(&self, queue: &str) -> lapin::Result<Option<lapin::message::BasicGetMessage>> {
        let channel = self.channel().await;
        channel
            .basic_get(queue.into(), BasicGetOptions::default())
            .await
    }

    /// Publishes with confirms: a refusal closes the channel before the confirm.
    async fn publish(&self, exchange: &str, key: &str, body: &[u8]) -> lapin::Result<Confirmation> {
        let channel = self.channel().await;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let confirm = channel
            .basic_publish(
                exchange.into(),
                key.into(),
                BasicPublishOptions::default(),
                body,
                BasicProperties::default(),
            )
            .await?;
        confirm.await
    }

    async fn declare(&self, queue: &str) -> lapin::Result<lapin::Queue> {
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        let channel = self.channel().await;
        channel
            .queue_declare(queue.into(), durable, FieldTable::default())
            .await
    }

    async fn bind(&self, queue: &str, exchange: &str, key: &str) -> lapin::Result<()> {
        let channel = self.channel().await;
        let options = QueueBindOptions::default();
        channel
            .queue_bind(
                queue.into(),
                exchange.into(),
                key.into(),
                options,
                FieldTable::default(),
            )
            .await
    }

    async fn delete_queue(&self, queue: &str) -> lapin::Result<u32> {
        let channel = self.channel().await;
        channel
            .queue_delete(queue.into(), QueueDeleteOptions::default())
            .await
    }

    async fn purge(&self, queue: &str) -> lapin::Result<u32> {
        let channel = self.channel().await;
        channel
            .queue_purge(queue.into(), QueuePurgeOptions::default())
            .await
    }

    async fn delete_exchange(&self, exchange: &str) -> lapin::Result<()> {
        let channel = self.channel().await;
        channel
            .exchange_delete(exchange.into(), ExchangeDeleteOptions::default())
            .await
    }

    async fn close(self) {
        let _ = self.0.close(200, "done".into()).await;
    }
}

/// The environment variable the script reads `user`'s password from.
fn password_variable(user: &str) -> String {
    let upper: String = user
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_uppercase(),
            false => '_',
        })
        .collect();
    format!("WEFT_RABBITMQ_PASSWORD_{upper}")
}

/// The test's virtual host, its administrator and the users the script makes there;
/// all deleted by [`Broker::cleanup`], or on drop.
struct Broker {
    /// `rabbitmqctl`, or what `RABBITMQCTL` says (the script reads it too).
    ctl: Vec<String>,
    vhost: String,
    namespace: String,
    /// Host and port of the broker, from the suite's URL.
    host: String,
    admin: String,
    admin_password: String,
    cleaned: bool,
}

impl Broker {
    /// A fresh virtual host, with an administrator of its own (the guest user stays
    /// as it is).
    async fn create(namespace: &str, amqp_url: &str) -> anyhow::Result<Self> {
        let ctl = std::env::var("RABBITMQCTL").unwrap_or_else(|_| "rabbitmqctl".to_owned());
        let rest = amqp_url.split_once("://").map_or(amqp_url, |(_, r)| r);
        let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
        let host = host.split(['/', '?']).next().unwrap_or(host).to_owned();
        let broker = Self {
            ctl: ctl.split_whitespace().map(str::to_owned).collect(),
            vhost: format!("weft-{namespace}"),
            namespace: namespace.to_owned(),
            host,
            admin: format!("{namespace}-admin"),
            admin_password: uuid::Uuid::new_v4().simple().to_string(),
            cleaned: false,
        };
        broker.ctl(&["add_vhost", &broker.vhost], None).await?;
        let password = broker.admin_password.clone();
        broker
            .ctl(&["add_user", &broker.admin], Some(&password))
            .await?;
        let vhost = broker.vhost.clone();
        broker
            .ctl(
                &[
                    "set_permissions",
                    "-p",
                    &vhost,
                    &broker.admin,
                    ".*",
                    ".*",
                    ".*",
                ],
                None,
            )
            .await?;
        Ok(broker)
    }

    fn url(&self, user: &str, password: &str) -> String {
        format!("amqp://{user}:{password}@{}/{}", self.host, self.vhost)
    }

    fn admin_url(&self) -> String {
        self.url(&self.admin, &self.admin_password)
    }

    /// The exchange EVENT tasks publish to and event handlers listen on: outside the
    /// namespace, granted with `--sinks`.
    fn sink(&self) -> String {
        format!("{}-orders", self.namespace)
    }

    /// The user name of `principal` (`gateway`, `worker-greet`, ...).
    fn user(&self, principal: &str) -> String {
        format!("{}-{principal}", self.namespace)
    }

    /// Every user the script makes, sorted.
    fn users(&self) -> Vec<String> {
        let mut users: Vec<String> = [
            "gateway",
            "decider",
            "history",
            "heartbeat",
            "http-worker",
            &format!("worker-{WORKER}"),
            &format!("listener-{LISTENER}"),
            &format!("starter-{STARTER}"),
        ]
        .iter()
        .map(|p| self.user(p))
        .collect();
        users.sort();
        users
    }

    /// The script's arguments for this test's users.
    fn script_args(&self) -> Vec<String> {
        [
            "--vhost",
            &self.vhost,
            "--namespace",
            &self.namespace,
            "--worker",
            &format!("{WORKER}={WORKER_TASKS}"),
            "--listener",
            LISTENER,
            "--starter",
            STARTER,
            "--sinks",
            &self.sink(),
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .collect()
    }

    /// Runs the script with `env`; returns the passwords it generated, by user.
    async fn run_script(&self, env: &[(String, &str)]) -> anyhow::Result<BTreeMap<String, String>> {
        let out = tokio::process::Command::new(SCRIPT)
            .args(self.script_args())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .await
            .with_context(|| format!("running {SCRIPT}"))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        anyhow::ensure!(out.status.success(), "{SCRIPT}: {}\n{stderr}", out.status);
        let stdout = String::from_utf8(out.stdout)?;
        stdout
            .lines()
            .map(|line| {
                let (user, password) = line
                    .split_once(' ')
                    .with_context(|| format!("not `<user> <password>`: {line:?}"))?;
                Ok((user.to_owned(), password.to_owned()))
            })
            .collect()
    }

    /// The permissions of the virtual host, one line per user, sorted.
    async fn permissions(&self) -> anyhow::Result<Vec<String>> {
        let vhost = self.vhost.clone();
        let listed = self
            .ctl(&["--silent", "list_permissions", "-p", &vhost], None)
            .await?;
        let mut lines: Vec<String> = listed.lines().map(str::to_owned).collect();
        lines.sort();
        Ok(lines)
    }

    /// Deletes the script's users (with the script), the virtual host and the
    /// administrator, then checks that no user is left.
    async fn cleanup(&mut self) -> anyhow::Result<()> {
        self.cleaned = true;
        let out = tokio::process::Command::new(SCRIPT)
            .args(self.script_args())
            .arg("--delete")
            .output()
            .await?;
        anyhow::ensure!(
            out.status.success(),
            "{SCRIPT} --delete: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let vhost = self.vhost.clone();
        let admin = self.admin.clone();
        self.ctl(&["delete_vhost", &vhost], None).await?;
        self.ctl(&["delete_user", &admin], None).await?;
        let users = self.ctl(&["--silent", "list_users"], None).await?;
        let prefix = format!("{}-", self.namespace);
        let left: Vec<&str> = users
            .lines()
            .filter(|line| line.starts_with(&prefix))
            .collect();
        anyhow::ensure!(left.is_empty(), "users left behind: {left:?}");
        Ok(())
    }

    /// Runs `rabbitmqctl args`, with `stdin` on its standard input; its output.
    async fn ctl(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        use tokio::io::AsyncWriteExt as _;
        let (program, first) = self.ctl.split_first().context("RABBITMQCTL is empty")?;
        let mut child = tokio::process::Command::new(program)
            .args(first)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("running {program} (set RABBITMQCTL to reach the broker)"))?;
        let mut input = child.stdin.take().context("no stdin")?;
        if let Some(text) = stdin {
            input.write_all(format!("{text}\n").as_bytes()).await?;
        }
        drop(input);
        let out = child.wait_with_output().await?;
        anyhow::ensure!(
            out.status.success(),
            "rabbitmqctl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if self.cleaned {
            return;
        }
        // A failed test: delete what it made, without waiting on the runtime.
        let run = |args: &[&str]| {
            let _ = std::process::Command::new(&self.ctl[0])
                .args(&self.ctl[1..])
                .args(args)
                .output();
        };
        let _ = std::process::Command::new(SCRIPT)
            .args(self.script_args())
            .arg("--delete")
            .output();
        run(&["delete_vhost", &self.vhost]);
        run(&["delete_user", &self.admin]);
    }
}
