//! WAIT tasks over the real services: signals (before or after the WAIT is reached) and
//! durable timers.

use serde_json::{json, Value};
use weft_e2e::Suite;

use crate::constructs::statuses;

crate::on_both_backends!(
    wait_tasks_complete_on_signals_sent_before_or_after_they_are_reached,
    wait_with_a_duration_is_woken_by_the_history_services_timer,
);

async fn post_json(client: &weft_e2e::Client, path: &str, body: Value) -> (u16, String) {
    let r = client
        .raw(
            reqwest::Method::POST,
            path,
            Some(("application/json", body.to_string().into_bytes())),
        )
        .await
        .unwrap();
    (r.status, r.text)
}

async fn wait_tasks_complete_on_signals_sent_before_or_after_they_are_reached(suite: Suite) {
    let client = suite.client();
    client
        .register(&json!({"name": "approve", "version": 1, "tasks": [
            {"name": "make_name", "taskReferenceName": "n", "type": "SIMPLE",
             "inputParameters": {"first": "${workflow.input.first}"}},
            {"name": "approval", "taskReferenceName": "approval", "type": "WAIT"},
            {"name": "shout", "taskReferenceName": "s", "type": "SIMPLE",
             "inputParameters": {"text": "${approval.output.note}"}}],
         "outputParameters": {"approved": "${s.output.text}"}}))
        .await
        .unwrap();

    // Signalled after the WAIT is reached.
    let late = client
        .start("approve", json!({"first": "Ada"}))
        .await
        .unwrap();
    let mut reached = false;
    for _ in 0..2_000 {
        let wf = client.get(&late).await.unwrap();
        if statuses(&wf)
            .iter()
            .any(|(r, s)| r == "approval" && s == "IN_PROGRESS")
        {
            assert_eq!(
                wf["subStatus"],
                json!("RUNNING"),
                "waiting for a signal, not a worker"
            );
            reached = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(reached, "the WAIT task was never reached");
    let (status, body) = post_json(
        client,
        &format!("/api/workflow/{late}/signal/approval"),
        json!({"note": "ok by ops"}),
    )
    .await;
    assert_eq!(status, 200, "consumed at once: {body}");
    let wf = crate::ended(&suite, &late, "COMPLETED").await;
    assert_eq!(wf["output"], json!({"approved": "OK BY OPS"}));

    // Signalled at once: kept until reached (202, `held`). Conductor's task-by-ref
    // endpoint applies only to a task that waits (409 before: docs/task-updates.md).
    let early = client
        .start("approve", json!({"first": "Bo"}))
        .await
        .unwrap();
    let (status, body) = post_json(
        client,
        &format!("/api/workflow/{early}/signal/approval"),
        json!({"note": "pre-approved"}),
    )
    .await;
    assert!(
        status == 202 && body.contains("\"held\":true") || status == 200,
        "kept, or consumed by a WAIT reached meanwhile: {status} {body}"
    );
    let wf = crate::ended(&suite, &early, "COMPLETED").await;
    assert_eq!(wf["output"], json!({"approved": "PRE-APPROVED"}));

    // Bad requests: unknown workflow, finished run, malformed payload.
    let (status, body) = post_json(client, "/api/workflow/nope/signal/approval", json!({})).await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = post_json(
        client,
        &format!("/api/workflow/{early}/signal/approval"),
        json!({}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("COMPLETED"), "{body}");
    let r = client
        .raw(
            reqwest::Method::POST,
            &format!("/api/workflow/{late}/signal/approval"),
            Some(("application/json", b"{not json".to_vec())),
        )
        .await
        .unwrap();
    assert_eq!(r.status, 400, "{}", r.text);
}

async fn wait_with_a_duration_is_woken_by_the_history_services_timer(suite: Suite) {
    let client = suite.client();
    client
        .register(&json!({"name": "nap", "version": 1, "tasks": [
            {"name": "nap", "taskReferenceName": "nap", "type": "WAIT",
             "inputParameters": {"duration": "1s"}},
            {"name": "make_name", "taskReferenceName": "n", "type": "SIMPLE",
             "inputParameters": {"first": "Nap"}}]}))
        .await
        .unwrap();
    let id = client.start("nap", json!({})).await.unwrap();
    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    let nap = wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["referenceTaskName"] == "nap")
        .cloned()
        .unwrap();
    assert_eq!(nap["status"], json!("COMPLETED"));
    let slept_ms = nap["endTime"].as_i64().unwrap() - nap["scheduledTime"].as_i64().unwrap();
    assert!(
        slept_ms >= 1_000,
        "the WAIT ended before its timer was due: {slept_ms} ms"
    );
    let events: Vec<String> = client
        .history(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(
        events.contains(&"TimerStarted".to_owned()) && events.contains(&"TimerFired".to_owned()),
        "{events:?}"
    );
}

/// What the gateway writes when its publish of a start times out (say, the broker is
/// down): the start row and its command in the outbox, nothing on the bus; the history
/// service's sweeper publishes it later. Returns the new workflow id.
async fn accept_start_unpublished(suite: &Suite, definition: &Value) -> String {
    use weft::envelope::Envelope;
    use weft::store::outbox::OutboxMessage;
    use weft::store::starts::NewStart;

    let store = weft::store::Store::from_pool(suite.env().pool().clone());
    let workflow_id = weft::ids::new_id().to_string();
    let command = weft_e2e::starts::start_command(definition, json!({}));
    let names = suite.env().names();
    let mut messages = vec![OutboxMessage::new(
        names.commands_exchange(),
        names.command_key_for(&workflow_id),
        &Envelope::new(&workflow_id, None, &command).unwrap(),
        None,
    )
    .unwrap()];
    let start = NewStart {
        workflow_id: workflow_id.clone(),
        idempotency_key: None,
        workflow_name: definition["name"].as_str().unwrap().to_owned(),
        workflow_version: 1,
        input: json!({}),
        correlation_id: None,
    };
    store
        .accept_start(&start, &mut messages, None)
        .await
        .unwrap();
    workflow_id
}

/// Found by the chaos soak: a start was accepted while the broker was down (its command
/// left in the outbox for the sweeper), and a signal sent right after reached the decider
/// first. The decider dropped the signal as "for an unknown workflow" and the run waited
/// for it for ever; an operator's terminate in that window was refused with 404. Now
/// such commands are parked until the start is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_that_reaches_the_decider_before_its_runs_start_is_kept() {
    let options = weft_e2e::EnvOptions {
        // A start's command stays in the outbox for 3 s: the signal comes first.
        outbox_sweep_after_ms: Some(3_000),
        ..weft_e2e::EnvOptions::default()
    };
    let env = weft_e2e::TestEnv::create(options).await.unwrap();
    let suite = Suite::start(env).await.unwrap();
    let client = suite.client();
    let definition = json!({"name": "approve_first", "version": 1, "tasks": [
        {"name": "go", "taskReferenceName": "go", "type": "WAIT"},
        {"name": "make_name", "taskReferenceName": "n", "type": "SIMPLE",
         "inputParameters": {"first": "${go.output.who}"}}],
     "outputParameters": {"name": "${n.output.name}"}});
    client.register(&definition).await.unwrap();

    let signalled = accept_start_unpublished(&suite, &definition).await;
    let (status, body) = post_json(
        client,
        &format!("/api/workflow/{signalled}/signal/go"),
        json!({"who": "Early"}),
    )
    .await;
    // Parked until the start is applied, then judged: the WAIT is reached by then.
    assert_eq!(status, 200, "{body}");

    // An operation waits for its verdict (10 s): applied once the start is.
    let terminated = accept_start_unpublished(&suite, &definition).await;
    let resp = client
        .raw(
            reqwest::Method::DELETE,
            &format!("/api/workflow/{terminated}?reason=early"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        resp.status, 200,
        "terminate before the start: {}",
        resp.text
    );

    let wf = client
        .wait_for_status(
            &signalled,
            &["COMPLETED"],
            std::time::Duration::from_secs(30),
        )
        .await
        .unwrap();
    assert_eq!(wf["output"], json!({"name": "Early Weft"}));
    let completions = client
        .history(&signalled)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "TaskCompleted" && e.attributes["taskRef"] == "go")
        .count();
    assert_eq!(completions, 1, "the signal completed the WAIT once");
    let wf = client.get(&terminated).await.unwrap();
    assert_eq!(wf["status"], "TERMINATED", "{wf}");
}
