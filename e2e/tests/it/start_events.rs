//! Start events from another language: a publisher written with `pika` (Python's plain
//! AMQP client from PyPI, knowing nothing of Weft but the queue's name) publishes 1,050
//! distinct starts of `greet`, 250 repeats of them (the same message id, or the same
//! `idempotencyKey` under another message id, some through the starts exchange) and 30
//! poison messages, plus one start that asks for a reply through RabbitMQ's direct
//! reply-to. Exactly the distinct valid starts run, each to completion; the poison is
//! dead-lettered with its reason; the reply names the run.

use std::time::Duration;

use anyhow::Context as _;
use serde_json::{json, Value};
use weft_e2e::{greet, Suite, TestEnv};

use crate::RUN_TIMEOUT;

/// The Python packages the AMQP tests pin: the client, and the JSON Schema validator
/// that checks Weft's messages against docs/protocol.
pub(crate) const PYTHON_PACKAGES: &[(&str, &str)] = &[("pika", "1.3.2"), ("jsonschema", "4.26.0")];
/// Distinct valid starts keyed by message id, and by `idempotencyKey`.
const BY_MESSAGE_ID: u32 = 1_000;
const BY_KEY: u32 = 50;
/// Poison messages of each kind (not JSON, unknown definition, bad input).
const POISON_EACH: u32 = 10;

/// The publisher: every message persistent, the channel in confirm mode (each publish
/// returns once the broker has it). Prints the direct reply it asked for as JSON.
const PUBLISHER: &str = r#"
import json
import sys

import pika

url, queue, exchange = sys.argv[1], sys.argv[2], sys.argv[3]
by_message_id, by_key, poison_each = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
connection = pika.BlockingConnection(pika.URLParameters(url))
channel = connection.channel()
channel.confirm_delivery()


def publish(body, message_id, exchange="", routing_key=queue, reply_to=None):
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    properties = pika.BasicProperties(
        delivery_mode=pika.DeliveryMode.Persistent,
        content_type="application/json",
        message_id=message_id,
        reply_to=reply_to,
    )
    channel.basic_publish(exchange, routing_key, body, properties)


def greet(i):
    return {"name": "greet", "version": 1, "input": {"first": "P%d" % i, "n": i % 5 + 1},
            "correlationId": "order-%d" % i}


for i in range(by_message_id):
    publish(greet(i), "evt-%d" % i)
for i in range(0, by_message_id, 5):
    publish(greet(i), "evt-%d" % i)
for i in range(by_message_id, by_message_id + by_key):
    body = dict(greet(i), idempotencyKey="key-%d" % i)
    publish(body, "first-%d" % i, exchange=exchange, routing_key="orders.created")
    publish(body, "again-%d" % i, exchange=exchange, routing_key="orders.created")
for i in range(poison_each):
    publish(b"{not json", "poison-json-%d" % i)
    publish({"name": "no_such_workflow", "input": {}}, "poison-name-%d" % i)
    publish({"name": "greet", "input": "not an object"}, "poison-input-%d" % i)

replies = []


def on_reply(ch, method, properties, body):
    replies.append(json.loads(body))
    ch.stop_consuming()


channel.basic_consume("amq.rabbitmq.reply-to", on_reply, auto_ack=True)
publish(greet(9999), "asks-for-a-reply", reply_to="amq.rabbitmq.reply-to")
connection.call_later(60, channel.stop_consuming)
channel.start_consuming()
if replies:
    import jsonschema
    with open(sys.argv[7]) as f:
        jsonschema.validate(replies[0], json.load(f))
print(json.dumps(replies[0] if replies else None))
connection.close()
"#;

/// The repository's docs/protocol: the JSON Schemas of the wire protocol.
pub(crate) fn protocol_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("docs")
        .join("protocol")
}

/// Reads one number from the database.
async fn count(env: &TestEnv, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(env.pool())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_amqp_publisher_starts_exactly_the_distinct_valid_runs() {
    let python = weft_e2e::python::venv_with("py-venv-amqp", PYTHON_PACKAGES)
        .expect("pika and jsonschema must be installable from PyPI");
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    suite.client().register(&greet::definition()).await.unwrap();
    let names = suite.env().names();
    let script = suite.log_dir().join("publisher.py");
    std::fs::write(&script, PUBLISHER).unwrap();

    let out = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(&suite.env().amqp_url)
        .arg(names.starts_queue())
        .arg(names.starts_exchange())
        .args([BY_MESSAGE_ID, BY_KEY, POISON_EACH].map(|n| n.to_string()))
        .arg(protocol_dir().join("start-reply.schema.json"))
        .output()
        .await
        .expect("run the publisher");
    assert!(
        out.status.success(),
        "publisher failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply: Value = serde_json::from_slice(&out.stdout).expect("the publisher prints JSON");
    let replied = reply["workflowId"]
        .as_str()
        .with_context(|| format!("the reply names no run: {reply}"))
        .unwrap()
        .to_owned();

    let distinct = i64::from(BY_MESSAGE_ID + BY_KEY) + 1;
    let env = suite.env();
    let finished = weft_e2e::poll_until(
        Duration::from_secs(240),
        Duration::from_millis(250),
        || "every distinct start completed".to_owned(),
        || async {
            let done = count(env, "SELECT count(*) FROM runs WHERE status = 'COMPLETED'").await;
            Ok((done >= distinct).then_some(done))
        },
    )
    .await;
    let done = match finished {
        Ok(done) => done,
        Err(e) => {
            let started = count(env, "SELECT count(*) FROM workflow_starts").await;
            panic!("{e:#} (starts so far: {started})")
        }
    };
    assert_eq!(done, distinct);
    assert_eq!(
        count(env, "SELECT count(*) FROM workflow_starts").await,
        distinct
    );
    assert_eq!(count(env, "SELECT count(*) FROM runs").await, distinct);

    // Each key started one run with the event's fields.
    let run = suite.client().get(&replied).await.unwrap();
    assert_eq!(run["status"], json!("COMPLETED"), "{run}");
    assert_eq!(run["correlationId"], json!("order-9999"), "{run}");
    assert_eq!(run["output"], greet::expected_output("P9999", 9999 % 5 + 1));
    let keyed: (String, String) = sqlx::query_as(
        "SELECT s.correlation_id, r.status FROM workflow_starts s \
         JOIN runs r ON r.workflow_id = s.workflow_id WHERE s.idempotency_key = 'key-1007'",
    )
    .fetch_one(env.pool())
    .await
    .unwrap();
    assert_eq!(keyed, ("order-1007".to_owned(), "COMPLETED".to_owned()));

    // The poison is in the DLQ, each with its reason, and counted.
    let metrics = reqwest::get(format!("{}/metrics", suite.gateway_url()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let outcome = |o: &str| {
        let prefix = format!("weft_start_events_total{{outcome=\"{o}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map(|v| v.trim().to_owned())
    };
    assert_eq!(outcome("started").as_deref(), Some(&*distinct.to_string()));
    assert_eq!(outcome("repeated").as_deref(), Some("250"), "{metrics}");
    assert_eq!(
        outcome("dead_lettered").as_deref(),
        Some(&*(3 * POISON_EACH).to_string()),
        "{metrics}"
    );
    let dlq = weft::topology::Names::dlq(&names.starts_queue());
    let raw = weft_e2e::amqp::RawBus::connect(&env.amqp_url)
        .await
        .unwrap();
    let mut dead = Vec::new();
    while let Some(message) = raw.get(&dlq).await.unwrap() {
        dead.push(message);
    }
    raw.close().await;
    assert_eq!(dead.len(), (3 * POISON_EACH) as usize);
    for message in &dead {
        let reason = message
            .headers
            .get(weft::bus::DEAD_REASON_HEADER)
            .map(String::as_str)
            .unwrap_or_default();
        let expected = match message.message_id.as_deref().unwrap_or_default() {
            id if id.starts_with("poison-json") => "invalid_json",
            id if id.starts_with("poison-name") => "not_found",
            id if id.starts_with("poison-input") => "invalid_request: input",
            other => panic!("{other} should not be dead-lettered ({reason})"),
        };
        assert!(reason.starts_with(expected), "{reason}");
    }
}

/// On `weft dev` the start-event queue lives on the in-process bus: a publisher in the
/// same process (an embedded worker, a test) starts runs through it exactly as an AMQP
/// client does on RabbitMQ, duplicates and poison included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_events_start_runs_on_weft_dev_too() {
    let suite = Suite::start_on(weft_e2e::Backend::Dev).await.unwrap();
    let client = suite.client();
    client.register(&greet::definition()).await.unwrap();
    let bus = suite.dev_bus().expect("weft dev's bus").clone();
    let queue = bus.names().starts_queue();
    let ask = |i: u32, message_id: String| {
        let (bus, queue) = (bus.clone(), queue.clone());
        async move {
            let body = json!({"name": "greet", "input": greet::input(&format!("D{i}"), 2)});
            let reply = bus
                .call_raw(
                    "",
                    &queue,
                    body.to_string().into_bytes(),
                    Some(&message_id),
                    RUN_TIMEOUT,
                )
                .await
                .expect("a reply");
            serde_json::from_slice::<Value>(&reply).expect("a JSON reply")
        }
    };
    let mut ids = Vec::new();
    for i in 0..20 {
        let first = ask(i, format!("dev-{i}")).await;
        let again = ask(i, format!("dev-{i}")).await;
        assert_eq!(first["repeated"], json!(false), "{first}");
        assert_eq!(again["repeated"], json!(true), "{again}");
        assert_eq!(first["workflowId"], again["workflowId"]);
        ids.push((i, first["workflowId"].as_str().unwrap().to_owned()));
    }
    bus.publish_raw("", &queue, b"not json", Some("dev-poison"))
        .await
        .unwrap();
    for (i, id) in ids {
        let run = client
            .wait_for_status(&id, &["COMPLETED"], RUN_TIMEOUT)
            .await
            .unwrap();
        assert_eq!(run["output"], greet::expected_output(&format!("D{i}"), 2));
    }
    let dlq = weft::topology::Names::dlq(&queue);
    let dead = weft_e2e::poll_until(
        RUN_TIMEOUT,
        Duration::from_millis(50),
        || "the poison in the DLQ".to_owned(),
        || async { Ok((bus.message_count(&dlq).await? == 1).then_some(())) },
    )
    .await;
    assert!(dead.is_ok(), "{dead:?}");
}
