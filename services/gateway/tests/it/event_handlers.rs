//! Event handlers: the `/api/event` resource (Conductor's answers), and handlers acting
//! on events published to their queue, taking effect without a restart.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::utils::{simple_def, TestEnv};

fn handler(name: &str, event: &str, active: bool) -> Value {
    json!({
        "name": name,
        "event": event,
        "active": active,
        "condition": "$.type == 'order'",
        "actions": [{
            "action": "start_workflow",
            "start_workflow": {
                "name": "greeting",
                "correlationId": "${id}",
                "input": {"orderId": "${id}", "who": "${customer.name}", "note": "order ${id}"}
            }
        }]
    })
}

#[tokio::test]
async fn event_handlers_are_registered_listed_updated_and_removed_as_conductor_answers() {
    let env = TestEnv::new().await;
    let active = handler("on-order", "amqp:orders", true);
    let r = env.post("/api/event", &active).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(r.body.is_empty());
    env.post("/api/event", &handler("idle", "amqp:orders", false))
        .await;
    env.post("/api/event", &handler("elsewhere", "amqp:refunds", true))
        .await;
    let again = env.post("/api/event", &active).await;
    let body = again.error(StatusCode::CONFLICT);
    assert!(
        body["message"].as_str().unwrap().contains("on-order"),
        "{body}"
    );

    let all = env.get("/api/event").await.json();
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["elsewhere", "idle", "on-order"]);
    let names_of = |v: Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|h| h["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        names_of(env.get("/api/event/amqp:orders").await.json()),
        ["on-order"]
    );
    assert_eq!(
        names_of(
            env.get("/api/event/amqp:orders?activeOnly=false")
                .await
                .json()
        ),
        ["idle", "on-order"]
    );

    // Conductor's default: a handler registered without `active` is inactive.
    let mut quiet = handler("quiet", "amqp:orders", false);
    quiet.as_object_mut().unwrap().remove("active");
    env.post("/api/event", &quiet).await;
    let listed = env
        .get("/api/event/amqp:orders?activeOnly=false")
        .await
        .json();
    let quiet_view = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == json!("quiet"))
        .cloned()
        .unwrap();
    assert_eq!(quiet_view["active"], json!(false));

    let missing = env
        .put("/api/event", &handler("ghost", "amqp:orders", true))
        .await;
    missing.error(StatusCode::NOT_FOUND);
    let r = env
        .put("/api/event", &handler("idle", "amqp:orders", true))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(
        names_of(env.get("/api/event/amqp:orders").await.json()),
        ["idle", "on-order"]
    );
    let r = env.send(Method::DELETE, "/api/event/idle", None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    env.send(Method::DELETE, "/api/event/idle", None)
        .await
        .error(StatusCode::NOT_FOUND);

    // Refused at registration, naming the field.
    let bad = json!({"name": "bad", "event": "sqs:orders", "actions": [
        {"action": "start_workflow", "start_workflow": {"name": "greeting"}}]});
    let body = env
        .post("/api/event", &bad)
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(body["path"], json!("event"), "{body}");
    let bad = json!({"name": "bad", "event": "amqp:q", "actions": [
        {"action": "fail_task", "fail_task": {"taskRefName": "x"}}]});
    let body = env
        .post("/api/event", &bad)
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(body["path"], json!("actions[0].fail_task.taskId"), "{body}");
    let body = env
        .get("/api/event/on-order/executions?limit=0")
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(body["path"], json!("limit"), "{body}");
    env.finish().await;
}

/// Polls the handler's executions until there are `n`.
async fn executions(env: &TestEnv, handler: &str, n: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let found = env
            .get(&format!("/api/event/{handler}/executions"))
            .await
            .json();
        let found = found.as_array().cloned().unwrap_or_default();
        if found.len() >= n || tokio::time::Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_handler_registered_while_the_gateway_runs_starts_runs_from_matching_events_once() {
    let env = TestEnv::new().await;
    env.register(&simple_def("greeting", 1)).await;
    let stop = CancellationToken::new();
    let listeners = weft_gateway::event_handlers::listeners::spawn(&env.state, stop.clone());
    let queue = format!("{}-orders", env.bus.names().namespace());
    // Declared as Weft declares it, so that nothing published before the listener
    // starts is lost.
    env.bus.declare_queue(&queue, &[]).await.unwrap();
    let r = env
        .post(
            "/api/event",
            &handler("on-order", &format!("amqp:{queue}"), true),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    let order = json!({"type": "order", "id": "o-1", "customer": {"name": "Ada"}});
    let refund = json!({"type": "refund", "id": "r-1"});
    for (body, id) in [(&order, "m-1"), (&order, "m-1"), (&refund, "m-2")] {
        env.bus
            .publish_raw("", &queue, body.to_string().as_bytes(), Some(id))
            .await
            .unwrap();
    }
    let done = executions(&env, "on-order", 3).await;
    assert_eq!(done.len(), 3, "{done:?}");
    let statuses: Vec<(&str, &str)> = done
        .iter()
        .map(|e| {
            (
                e["messageId"].as_str().unwrap(),
                e["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        statuses
            .iter()
            .filter(|s| **s == ("m-1", "COMPLETED"))
            .count(),
        2,
        "{done:?}"
    );
    assert!(statuses.contains(&("m-2", "SKIPPED")), "{done:?}");
    let started: Vec<&str> = done
        .iter()
        .filter_map(|e| e["output"]["workflowId"].as_str())
        .collect();
    assert_eq!(started.len(), 2);
    assert_eq!(
        started[0], started[1],
        "the repeated event started nothing new"
    );

    let starts: Vec<(String, Value)> =
        sqlx::query_as("SELECT correlation_id, input FROM workflow_starts")
            .fetch_all(env.store.pg_pool().unwrap())
            .await
            .unwrap();
    assert_eq!(starts.len(), 1, "{starts:?}");
    assert_eq!(starts[0].0, "o-1");
    assert_eq!(
        starts[0].1,
        json!({"orderId": "o-1", "who": "Ada", "note": "order o-1",
               "conductor.event.messageId": "m-1",
               "conductor.event.name": format!("amqp:{queue}")})
    );

    // Switched off without a restart: the next event stays in the queue.
    let mut off = handler("on-order", &format!("amqp:{queue}"), false);
    off["active"] = json!(false);
    assert_eq!(env.put("/api/event", &off).await.status, StatusCode::OK);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        env.bus
            .publish_raw("", &queue, order.to_string().as_bytes(), Some("m-3"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        if env.bus.message_count(&queue).await.unwrap() > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the listener never stopped"
        );
    }
    stop.cancel();
    listeners.await.unwrap();
    env.finish().await;
}
