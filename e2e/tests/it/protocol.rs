//! The JSON Schemas of the wire protocol (docs/protocol) hold for what the Rust code
//! writes: every message type a worker or a listener sees or sends, built by the same
//! types the services use (optional fields set and unset), is validated with Python's
//! `jsonschema`; and the schemas are not vacuous: a message missing a required field or
//! carrying an unknown one is refused.

use chrono::Utc;
use serde_json::{json, Value};
use uuid::Uuid;
use weft::messages::ActivityTask;
use weft::messages::{
    ActivityCompleted, ActivityFailed, ActivityMessage, AttemptStarted, Beat, ClaimAttempt,
    Command, EagerOffer, EventMessage, HeartbeatAction, HeartbeatAnswer, HeartbeatAnswers,
    HeartbeatMessage, Heartbeats, LifecycleEvent, WithdrawOffer,
};
use weft::Envelope;

use crate::start_events::{protocol_dir, PYTHON_PACKAGES};

/// Validates each message against the schema of its `type`; prints how many passed and
/// whether each broken one was refused.
const CHECK: &str = r#"
import json, os, sys
import jsonschema
folder, messages, broken = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
validators = {}
for name in os.listdir(folder):
    schema = json.load(open(os.path.join(folder, name)))
    kind = schema.get("properties", {}).get("type", {}).get("const")
    if kind:
        validators[kind] = jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
for m in messages:
    validators[m["type"]].validate(m)
refused = sum(1 for m in broken if not validators[m["type"]].is_valid(m))
print(json.dumps({"valid": len(messages), "refused": refused, "broken": len(broken)}))
"#;

fn task() -> ActivityTask {
    ActivityTask {
        task_id: Uuid::new_v4(),
        workflow_id: "wf-1".into(),
        run_id: Uuid::now_v7(),
        task_ref: "s".into(),
        task_name: "shout".into(),
        task_type: "SIMPLE".into(),
        attempt: 2,
        input: json!({"text": "hi"}),
        reply_to: weft::topology::Names::shard_key(3),
        scheduled_at: Utc::now(),
        response_timeout_seconds: 30,
        eager: false,
        results_together: false,
    }
}

fn messages() -> Vec<Envelope> {
    let t = task();
    let (wf, run) = (t.workflow_id.as_str(), Some(t.run_id));
    let started = AttemptStarted::of(&t, "worker-1", Utc::now());
    let claim = |takeover| ClaimAttempt {
        started: started.clone(),
        takeover,
    };
    let answers = HeartbeatAnswers {
        results: [
            (
                t.task_id,
                HeartbeatAnswer {
                    action: HeartbeatAction::Continue,
                    reason: None,
                    retry_after_ms: None,
                },
            ),
            (
                Uuid::new_v4(),
                HeartbeatAnswer {
                    action: HeartbeatAction::Stop,
                    reason: Some("claimed by another worker".into()),
                    retry_after_ms: None,
                },
            ),
            (
                Uuid::new_v4(),
                HeartbeatAnswer {
                    action: HeartbeatAction::Defer,
                    reason: Some("concurrentExecLimit 2 reached".into()),
                    retry_after_ms: Some(500),
                },
            ),
        ]
        .into(),
    };
    let mut answer = Envelope::new(wf, run, &HeartbeatMessage::ClaimAttempt(claim(false))).unwrap();
    answer.kind = "HeartbeatAnswers".into();
    answer.payload = serde_json::to_value(&answers).unwrap();
    let lifecycle = |task: bool| LifecycleEvent {
        event: if task {
            "task.failed"
        } else {
            "workflow.completed"
        }
        .into(),
        workflow_id: wf.into(),
        run_id: t.run_id,
        correlation_id: task.then(|| "order-7".into()),
        workflow_type: "greet".into(),
        event_id: 4,
        task_id: task.then_some(t.task_id),
        task_ref: task.then(|| "s".into()),
        task_type: task.then(|| "SIMPLE".into()),
        attempt: task.then_some(2),
        iteration: task.then_some(0),
        status: if task { "FAILED" } else { "COMPLETED" }.into(),
        reason: task.then(|| "boom".into()),
        time: Utc::now(),
    };
    let eager_task = ActivityTask {
        eager: true,
        results_together: false,
        ..t.clone()
    };
    let one = Envelope::new(wf, run, &ActivityMessage::ActivityTask(eager_task))
        .unwrap()
        .to_bytes()
        .unwrap();
    let trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let together =
        weft::messages::ActivityTaskBatch::encode(&[(&one, Some(trace)), (&one, None)]).unwrap();
    let results_together = ActivityTask {
        results_together: true,
        ..t.clone()
    };
    let completed = Envelope::new(
        wf,
        run,
        &Command::ActivityCompleted(ActivityCompleted {
            task_id: t.task_id,
            run_id: t.run_id,
            attempt: 1,
            output: json!({"text": "HI"}),
            worker_id: Some("worker-1".into()),
            started_at: Some(Utc::now()),
            eager: None,
        }),
    )
    .unwrap()
    .to_bytes()
    .unwrap();
    let results = weft::activity_batch::ActivityResultBatch::encode(&[
        (&completed, Some(trace)),
        (&completed, None),
    ])
    .unwrap();
    let event = Envelope::new(wf, run, &EventMessage::LifecycleEvent(lifecycle(true)))
        .unwrap()
        .to_bytes()
        .unwrap();
    let events =
        weft::event_batch::LifecycleEventBatch::encode(&[(&event, Some(trace)), (&event, None)])
            .unwrap();
    vec![
        serde_json::from_slice(&together).unwrap(),
        serde_json::from_slice(&results).unwrap(),
        serde_json::from_slice(&events).unwrap(),
        Envelope::new(wf, run, &ActivityMessage::ActivityTask(results_together)).unwrap(),
        Envelope::new(wf, run, &ActivityMessage::ActivityTask(t.clone())).unwrap(),
        Envelope::new(wf, run, &ActivityMessage::ActivityTask(t.clone()))
            .unwrap()
            .with_priority(90),
        Envelope::new(wf, run, &HeartbeatMessage::ClaimAttempt(claim(false))).unwrap(),
        Envelope::new(wf, run, &HeartbeatMessage::ClaimAttempt(claim(true))).unwrap(),
        Envelope::new(
            "",
            None,
            &HeartbeatMessage::Heartbeats(Heartbeats {
                worker_id: "worker-1".into(),
                beats: vec![
                    Beat {
                        task_id: t.task_id,
                        details: Some(json!({"pct": 40})),
                    },
                    Beat {
                        task_id: Uuid::new_v4(),
                        details: None,
                    },
                ],
                probe: false,
            }),
        )
        .unwrap(),
        answer,
        Envelope::new(
            wf,
            run,
            &Command::ActivityCompleted(ActivityCompleted {
                task_id: t.task_id,
                run_id: t.run_id,
                attempt: 2,
                output: json!({"text": "HI"}),
                worker_id: Some("worker-1".into()),
                started_at: Some(Utc::now()),
                eager: Some(EagerOffer {
                    queue_prefix: "weft.eager.0123456789abcdef0123456789abcdef".into(),
                    task_names: vec!["shout".into()],
                    offered_at: Utc::now(),
                    batches: true,
                }),
            }),
        )
        .unwrap(),
        Envelope::new(
            wf,
            run,
            &Command::ActivityFailed(ActivityFailed {
                task_id: t.task_id,
                run_id: t.run_id,
                attempt: 2,
                reason: "card declined".into(),
                terminal: true,
                error_kind: Some("Declined".into()),
                output: json!({}),
                worker_id: None,
                started_at: None,
                eager: None,
            }),
        )
        .unwrap(),
        Envelope::new(
            "weft.eager.0123456789abcdef0123456789abcdef",
            None,
            &Command::WithdrawOffer(WithdrawOffer {
                queue_prefix: "weft.eager.0123456789abcdef0123456789abcdef".into(),
            }),
        )
        .unwrap(),
        Envelope::new(wf, run, &EventMessage::LifecycleEvent(lifecycle(true))).unwrap(),
        Envelope::new(wf, run, &EventMessage::LifecycleEvent(lifecycle(false))).unwrap(),
    ]
}

#[tokio::test]
async fn every_message_weft_writes_matches_its_json_schema() {
    let python = weft_e2e::python::venv_with("py-venv-amqp", PYTHON_PACKAGES)
        .expect("jsonschema must be installable from PyPI");
    let good: Vec<Value> = messages()
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    let kinds: std::collections::BTreeSet<&str> =
        good.iter().map(|m| m["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.len(), 11, "every enveloped message type: {kinds:?}");
    let mut broken = Vec::new();
    for m in &good {
        let mut missing = m.clone();
        missing["payload"]
            .as_object_mut()
            .unwrap()
            .retain(|k, _| k == "beats" || k == "claims");
        let mut unknown = m.clone();
        unknown["payload"]["notInTheProtocol"] = json!(1);
        broken.extend([missing, unknown]);
    }
    let dir = std::env::temp_dir().join(format!("weft-protocol-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let (good_file, broken_file) = (dir.join("good.json"), dir.join("broken.json"));
    std::fs::write(&good_file, serde_json::to_vec(&good).unwrap()).unwrap();
    std::fs::write(&broken_file, serde_json::to_vec(&broken).unwrap()).unwrap();
    let out = std::process::Command::new(&python)
        .args(["-c", CHECK])
        .arg(protocol_dir())
        .arg(&good_file)
        .arg(&broken_file)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        out.status.success(),
        "a message does not match its schema:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        summary,
        json!({"valid": good.len(), "refused": broken.len(), "broken": broken.len()})
    );
}
