//! Messages sent together as one (`crate::bus::together`): the `ActivityTasks` message
//! that carries several `ActivityTask` envelopes to one worker's eager queue
//! (docs/eager-dispatch.md, "Eager tasks sent together"), and the `ActivityResults`
//! message that carries several results to one command shard (docs/worker-sdk.md,
//! "Results sent together"), and the `StartWorkflows` message that carries several
//! gateway starts to one command shard (docs/decider.md, "Starts sent together"). Each is
//! written around its envelopes as they were encoded and read back into them.

use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::envelope::VERSION;
use crate::messages::{ActivityMessage, ActivityTask};
use crate::{Envelope, Error, Result};

/// Messages sent together at most: bounds a message's size (and what one lost confirm
/// sends again).
pub const MAX_MESSAGES: usize = 32;

/// The envelope type of eager tasks sent together.
pub const TASKS_KIND: &str = "ActivityTasks";

/// The envelope type of results sent together.
pub const RESULTS_KIND: &str = "ActivityResults";

/// The envelope type of starts sent together.
pub const STARTS_KIND: &str = "StartWorkflows";

/// The commands a `StartWorkflows` message may carry: starts alone.
pub const START_KINDS: [&str; 1] = ["StartWorkflow"];

/// The commands an `ActivityResults` message may carry: what a worker reports about an
/// attempt. Requests (which want a reply of their own) and commands that are not a
/// worker's never go together.
pub const RESULT_KINDS: [&str; 4] = [
    "ActivityCompleted",
    "ActivityFailed",
    "ActivityStarted",
    "ActivityPostponed",
];

/// Eager tasks for one worker's eager queue sent as one message: each as the
/// `ActivityTask` envelope it would have been sent as alone, with its trace context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityTaskBatch {
    /// The tasks, in the order they were decided.
    pub messages: Vec<BatchedMessage>,
}

/// One message of an [`ActivityTaskBatch`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchedMessage {
    /// The envelope, as it would have been sent alone.
    pub envelope: Envelope,
    /// Its W3C trace context (the `traceparent` header it would have had alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// The encoded envelope of type `kind` around `messages` (each an encoded envelope and its
/// trace context), written without decoding them. Its own envelope names the first
/// message's workflow (a batch holds messages of many runs) and has no run.
pub fn encode(kind: &'static str, messages: &[(&[u8], Option<&str>)]) -> Result<Vec<u8>> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Head<'a> {
        id: uuid::Uuid,
        #[serde(rename = "type")]
        kind: &'static str,
        version: u32,
        workflow_id: &'a str,
        time: chrono::DateTime<Utc>,
        payload: Payload<'a>,
    }
    #[derive(Serialize)]
    struct Payload<'a> {
        messages: Vec<Item<'a>>,
    }
    #[derive(Serialize)]
    struct Item<'a> {
        envelope: &'a RawValue,
        #[serde(skip_serializing_if = "Option::is_none")]
        traceparent: Option<&'a str>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct WorkflowOf<'a> {
        #[serde(borrow)]
        workflow_id: std::borrow::Cow<'a, str>,
    }
    let Some((first, _)) = messages.first() else {
        return Err(Error::Decode("an empty batch of messages".into()));
    };
    let first: WorkflowOf<'_> = serde_json::from_slice(first)?;
    let items = messages
        .iter()
        .map(|(body, traceparent)| {
            Ok(Item {
                envelope: serde_json::from_slice(body)?,
                traceparent: *traceparent,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let head = Head {
        id: crate::ids::new_id(),
        kind,
        version: VERSION,
        workflow_id: &first.workflow_id,
        time: Utc::now(),
        payload: Payload { messages: items },
    };
    Ok(serde_json::to_vec(&head)?)
}

impl ActivityTaskBatch {
    /// The encoded `ActivityTasks` envelope of `messages` (each an encoded envelope and
    /// its trace context), written around them without decoding them ([`encode`]).
    pub fn encode(messages: &[(&[u8], Option<&str>)]) -> Result<Vec<u8>> {
        encode(TASKS_KIND, messages)
    }

    /// [`ActivityTaskBatch::encode`] of envelopes at hand (encoded here first).
    pub fn encode_envelopes<'a>(
        messages: impl IntoIterator<Item = (&'a Envelope, Option<&'a str>)>,
    ) -> Result<Vec<u8>> {
        let (bodies, traces): (Vec<Vec<u8>>, Vec<Option<&str>>) = messages
            .into_iter()
            .map(|(envelope, trace)| Ok((envelope.to_bytes()?, trace)))
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        let parts: Vec<(&[u8], Option<&str>)> =
            bodies.iter().map(Vec::as_slice).zip(traces).collect();
        Self::encode(&parts)
    }

    /// Each message as its envelope, its trace context and its task, or why it is not an
    /// `ActivityTask`.
    pub fn into_messages(self) -> Vec<Result<(Envelope, Option<String>, ActivityTask)>> {
        self.messages
            .into_iter()
            .map(|m| match m.envelope.decode::<ActivityMessage>()? {
                ActivityMessage::ActivityTask(task) => Ok((m.envelope, m.traceparent, task)),
                ActivityMessage::ActivityTasks(_) => Err(Error::Decode(format!(
                    "message {} of a batch is a batch itself",
                    m.envelope.id
                ))),
            })
            .collect()
    }

    /// The tasks with their trace contexts; an error names the first message that is not
    /// an `ActivityTask`.
    pub fn into_tasks(self) -> Result<Vec<(ActivityTask, Option<String>)>> {
        self.into_messages()
            .into_iter()
            .map(|m| m.map(|(_, trace, task)| (task, trace)))
            .collect()
    }
}

/// Results for one command shard sent as one `ActivityResults` message by a worker
/// (docs/worker-sdk.md, "Results sent together"): each as the envelope it would have been
/// sent as alone (one of [`RESULT_KINDS`]), with its trace context. A worker sends them
/// only for tasks whose decider said it takes them (`ActivityTask::results_together`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityResultBatch {
    /// The results, in the order the worker had them.
    pub messages: Vec<BatchedMessage>,
}

impl ActivityResultBatch {
    /// The encoded `ActivityResults` envelope of `messages` ([`encode`]).
    pub fn encode(messages: &[(&[u8], Option<&str>)]) -> Result<Vec<u8>> {
        encode(RESULTS_KIND, messages)
    }

    /// The results an `ActivityResults` envelope carries; the error says what makes it
    /// unusable as a whole (another type or version, an empty batch, a message that is
    /// not a worker's result).
    pub fn unpack(envelope: &Envelope) -> Result<Vec<BatchedMessage>> {
        unpack_commands(envelope, RESULTS_KIND, &RESULT_KINDS)
    }
}

/// Starts for one command shard sent as one `StartWorkflows` message by a gateway
/// (docs/decider.md, "Starts sent together"): each as the `StartWorkflow` envelope it
/// would have been sent as alone, with its trace context. A gateway sends them only with
/// `WEFT_STARTS_TOGETHER` on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartWorkflowBatch {
    /// The starts, in the order the gateway accepted them.
    pub messages: Vec<BatchedMessage>,
}

impl StartWorkflowBatch {
    /// The encoded `StartWorkflows` envelope of `messages` ([`encode`]).
    pub fn encode(messages: &[(&[u8], Option<&str>)]) -> Result<Vec<u8>> {
        encode(STARTS_KIND, messages)
    }

    /// The starts a `StartWorkflows` envelope carries; the error says what makes it
    /// unusable as a whole (another type or version, an empty batch, a message that is
    /// not a `StartWorkflow`).
    pub fn unpack(envelope: &Envelope) -> Result<Vec<BatchedMessage>> {
        unpack_commands(envelope, STARTS_KIND, &START_KINDS)
    }
}

/// The messages of a batch of commands of type `kind` whose messages may only be of
/// `kinds`.
fn unpack_commands(envelope: &Envelope, kind: &str, kinds: &[&str]) -> Result<Vec<BatchedMessage>> {
    if envelope.kind != kind || envelope.version != VERSION {
        return Err(Error::Decode(format!(
            "{} version {} is not a {kind} message of version {VERSION}",
            envelope.kind, envelope.version
        )));
    }
    #[derive(Deserialize)]
    struct Batch {
        messages: Vec<BatchedMessage>,
    }
    let batch = Batch::deserialize(&envelope.payload)
        .map_err(|e| Error::Decode(format!("{kind} payload: {e}")))?;
    if batch.messages.is_empty() {
        return Err(Error::Decode(format!("a {kind} without messages")));
    }
    if let Some((i, m)) = batch
        .messages
        .iter()
        .enumerate()
        .find(|(_, m)| !kinds.contains(&m.envelope.kind.as_str()))
    {
        return Err(Error::Decode(format!(
            "message {i} ({}) of a {kind} is a {}, not one of {kinds:?}",
            m.envelope.id, m.envelope.kind
        )));
    }
    Ok(batch.messages)
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use uuid::Uuid;

    use super::*;

    fn task(workflow_id: &str, task_ref: &str) -> Envelope {
        let task = ActivityTask {
            task_id: Uuid::new_v4(),
            workflow_id: workflow_id.into(),
            run_id: Uuid::new_v4(),
            task_ref: task_ref.into(),
            task_name: "shout".into(),
            task_type: "SIMPLE".into(),
            attempt: 1,
            input: json!({"text": task_ref}),
            reply_to: "3".into(),
            scheduled_at: Utc::now(),
            response_timeout_seconds: 30,
            eager: true,
            results_together: false,
        };
        Envelope::new(
            workflow_id,
            Some(task.run_id),
            &ActivityMessage::ActivityTask(task),
        )
        .unwrap()
    }

    #[test]
    fn a_batch_is_written_around_its_envelopes_and_read_back_into_them() {
        let (a, b) = (task("wf-a", "one"), task("wf-b", "two"));
        let (body_a, body_b) = (a.to_bytes().unwrap(), b.to_bytes().unwrap());
        let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let encoded =
            ActivityTaskBatch::encode(&[(&body_a, Some(trace)), (&body_b, None)]).unwrap();

        let envelope: Envelope = serde_json::from_slice(&encoded).unwrap();
        assert_eq!(envelope.kind, "ActivityTasks");
        assert_eq!(
            envelope.workflow_id, "wf-a",
            "named after its first task's run"
        );
        let ActivityMessage::ActivityTasks(batch) = envelope.decode().unwrap() else {
            panic!("not a batch: {envelope:?}");
        };
        assert_eq!(
            batch.messages[0].envelope, a,
            "each envelope as it was sent"
        );
        assert_eq!(batch.messages[1].envelope, b);
        let tasks = batch.into_tasks().unwrap();
        let refs: Vec<_> = tasks.iter().map(|(t, _)| t.task_ref.as_str()).collect();
        assert_eq!(refs, ["one", "two"]);
        assert_eq!(tasks[0].1.as_deref(), Some(trace));
        assert_eq!(tasks[1].1, None);
    }

    #[test]
    fn an_empty_or_undecodable_batch_is_an_error() {
        assert!(ActivityTaskBatch::encode(&[]).is_err());
        assert!(ActivityTaskBatch::encode(&[(b"not json", None)]).is_err());
        let nested = ActivityTaskBatch {
            messages: vec![BatchedMessage {
                envelope: Envelope::new(
                    "wf",
                    None,
                    &ActivityMessage::ActivityTasks(ActivityTaskBatch { messages: vec![] }),
                )
                .unwrap(),
                traceparent: None,
            }],
        };
        assert!(nested.into_tasks().is_err());
    }

    fn completed(workflow_id: &str) -> Envelope {
        let done = crate::messages::ActivityCompleted {
            task_id: Uuid::new_v4(),
            run_id: Uuid::new_v4(),
            attempt: 1,
            output: json!({"ok": true}),
            worker_id: None,
            started_at: None,
            eager: None,
        };
        Envelope::new(
            workflow_id,
            Some(done.run_id),
            &crate::messages::Command::ActivityCompleted(done),
        )
        .unwrap()
    }

    #[test]
    fn results_sent_together_unpack_into_the_envelopes_they_were() {
        let (a, b) = (completed("wf-a"), completed("wf-b"));
        let (body_a, body_b) = (a.to_bytes().unwrap(), b.to_bytes().unwrap());
        let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let encoded =
            ActivityResultBatch::encode(&[(&body_a, None), (&body_b, Some(trace))]).unwrap();
        let envelope = Envelope::from_bytes(&encoded).unwrap();
        assert_eq!(envelope.kind, RESULTS_KIND);
        assert_eq!(envelope.workflow_id, "wf-a");
        let messages = ActivityResultBatch::unpack(&envelope).unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].envelope, a);
        assert_eq!(messages[0].traceparent, None);
        assert_eq!(messages[1].envelope, b);
        assert_eq!(messages[1].traceparent.as_deref(), Some(trace));
    }

    #[test]
    fn a_results_batch_holding_anything_but_results_is_refused_whole() {
        let result = completed("wf-a").to_bytes().unwrap();
        let stranger = task("wf-b", "t").to_bytes().unwrap();
        let encoded = ActivityResultBatch::encode(&[(&result, None), (&stranger, None)]).unwrap();
        let why = ActivityResultBatch::unpack(&Envelope::from_bytes(&encoded).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("message 1") && why.contains("ActivityTask"),
            "{why}"
        );

        let tasks = ActivityTaskBatch::encode(&[(&stranger, None)]).unwrap();
        let why = ActivityResultBatch::unpack(&Envelope::from_bytes(&tasks).unwrap())
            .unwrap_err()
            .to_string();
        assert!(why.contains("ActivityTasks"), "{why}");

        let mut empty = Envelope::from_bytes(&encoded).unwrap();
        empty.payload = json!({"messages": []});
        assert!(ActivityResultBatch::unpack(&empty).is_err());
    }
}
