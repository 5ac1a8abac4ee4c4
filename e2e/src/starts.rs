//! Starts as the gateway publishes them, for tests that publish commands to the bus
//! themselves (a start published twice, a copy after its run ended).

use std::time::Duration;

use serde_json::Value;
use weft::messages::{Command, StartWorkflow};
use weft::topology::Names;

use crate::amqp::RawBus;
use crate::Client;

/// The `StartWorkflow` command of a run of `definition` with `input`.
pub fn start_command(definition: &Value, input: Value) -> Command {
    Command::StartWorkflow(StartWorkflow {
        definition: serde_json::from_value(definition.clone()).expect("a workflow definition"),
        input,
        correlation_id: None,
        parent_workflow_id: None,
        parent: None,
        traceparent: None,
        priority: None,
        task_to_domain: Default::default(),
    })
}

/// The wire bytes of a start of `definition` for `workflow_id`.
pub fn start_body(definition: &Value, workflow_id: &str, input: Value) -> Vec<u8> {
    weft::Envelope::new(workflow_id, None, &start_command(definition, input))
        .and_then(|envelope| envelope.to_bytes())
        .expect("an encodable start")
}

/// Publishes a start of `definition` with `input` for a new workflow on the command shard
/// of routing key `key` and waits until that run COMPLETED: every command published to
/// the shard before it has been applied by then (a shard applies its commands in order).
pub async fn drain_shard(
    bus: &RawBus,
    client: &Client,
    names: &Names,
    key: &str,
    (definition, input): (&Value, Value),
    timeout: Duration,
) -> anyhow::Result<()> {
    let marker = std::iter::repeat_with(|| weft::ids::new_id().to_string())
        .find(|id| names.command_key_for(id) == key)
        .expect("some id lands on every shard");
    let body = start_body(definition, &marker, input);
    bus.publish(&names.commands_exchange(), key, &body).await?;
    client
        .wait_for_status(&marker, &["COMPLETED"], timeout)
        .await?;
    Ok(())
}

/// Waits until the run of `workflow_id` COMPLETED, publishes its start's `body` to its
/// shard again (the outbox sweeper's copy), and waits until the copy has been applied
/// ([`drain_shard`], with a run of `marker`).
pub async fn publish_again_after_end(
    bus: &RawBus,
    client: &Client,
    names: &Names,
    (workflow_id, body): (&str, &[u8]),
    marker: (&Value, Value),
    timeout: Duration,
) -> anyhow::Result<()> {
    client
        .wait_for_status(workflow_id, &["COMPLETED"], timeout)
        .await?;
    let key = names.command_key_for(workflow_id);
    bus.publish(&names.commands_exchange(), &key, body).await?;
    drain_shard(bus, client, names, &key, marker, timeout).await
}
