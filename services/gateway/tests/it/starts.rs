//! Starting workflows: validation, the committed start, the command on its shard queue,
//! idempotency, and reading a start the decider has not applied yet.

use axum::http::StatusCode;
use serde_json::{json, Value};
use tower::ServiceExt;
use weft::messages::Command;

use crate::utils::{next_delivery, simple_def, TestEnv};

async fn count_starts(env: &TestEnv) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM workflow_starts")
        .fetch_one(env.store.pg_pool().unwrap())
        .await
        .expect("count starts")
}

#[tokio::test]
async fn start_of_unknown_definition_is_404_naming_it() {
    let env = TestEnv::new().await;
    let body = env
        .post("/api/workflow", &json!({"name": "ghost", "input": {}}))
        .await
        .error(StatusCode::NOT_FOUND);
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("ghost"),
        "{body}"
    );
    env.register(&simple_def("ghost", 1)).await;
    let body = env
        .post("/api/workflow/ghost?version=2", &json!({}))
        .await
        .error(StatusCode::NOT_FOUND);
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("version 2"),
        "{body}"
    );
    assert_eq!(count_starts(&env).await, 0);
    env.finish().await;
}

#[tokio::test]
async fn start_commits_the_start_and_publishes_start_workflow_to_the_shard_queue() {
    let env = TestEnv::new().await;
    let mut commands = env.consume_commands();
    env.register(&simple_def("greeting", 1)).await;
    env.register(&simple_def("greeting", 2)).await;

    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let r = env
        .send_with(
            axum::http::Method::POST,
            "/api/workflow",
            Some(
                json!({"name": "greeting", "input": {"who": "Ada"}, "correlationId": "order-7"})
                    .to_string()
                    .into_bytes(),
            ),
            &[("traceparent", traceparent)],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(r.content_type.starts_with("text/plain"), "{r:?}");
    let id = r.text();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");

    let row: (String, i32, Value, Option<String>) = sqlx::query_as(
        "SELECT workflow_name, workflow_version, input, correlation_id
         FROM workflow_starts WHERE workflow_id = $1",
    )
    .bind(&id)
    .fetch_one(env.store.pg_pool().unwrap())
    .await
    .expect("the start row");
    assert_eq!(
        row,
        (
            "greeting".into(),
            2,
            json!({"who": "Ada"}),
            Some("order-7".into())
        )
    );

    let delivery = next_delivery(&mut commands, 10)
        .await
        .expect("the StartWorkflow command arrives");
    let shard = weft::ids::shard_of(&id, crate::utils::SHARDS);
    assert_eq!(delivery.queue, env.bus.names().command_queue(shard));
    assert_eq!(delivery.envelope.workflow_id, id);
    assert_eq!(delivery.envelope.kind, "StartWorkflow");
    let Command::StartWorkflow(start) = delivery.envelope.decode::<Command>().expect("decodes")
    else {
        panic!("not a StartWorkflow: {:?}", delivery.envelope);
    };
    assert_eq!(start.definition.name, "greeting");
    assert_eq!(
        start.definition.version, 2,
        "latest version when none is given"
    );
    assert_eq!(start.input, json!({"who": "Ada"}));
    assert_eq!(start.correlation_id.as_deref(), Some("order-7"));

    // Published and confirmed: the outbox row is deleted (in the background, so poll,
    // bounded; the sweeper would otherwise publish it again).
    let mut left: i64 = -1;
    for _ in 0..500 {
        left = sqlx::query_scalar("SELECT count(*) FROM outbox")
            .fetch_one(env.store.pg_pool().unwrap())
            .await
            .expect("count outbox");
        if left == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(left, 0, "the published start's outbox row is deleted");
    env.finish().await;
}

#[tokio::test]
async fn start_by_name_takes_version_and_correlation_id_from_the_query() {
    let env = TestEnv::new().await;
    let mut commands = env.consume_commands();
    env.register(&simple_def("named", 1)).await;
    env.register(&simple_def("named", 2)).await;
    let r = env
        .post(
            "/api/workflow/named?version=1&correlationId=c-1",
            &json!({"who": "Bo"}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let id = r.text();
    let delivery = next_delivery(&mut commands, 10).await.expect("a command");
    let Ok(Command::StartWorkflow(start)) = delivery.envelope.decode::<Command>() else {
        panic!("not a StartWorkflow");
    };
    assert_eq!(delivery.envelope.workflow_id, id);
    assert_eq!(start.definition.version, 1);
    assert_eq!(start.correlation_id.as_deref(), Some("c-1"));
    assert_eq!(start.input, json!({"who": "Bo"}));
    env.finish().await;
}

#[tokio::test]
async fn inline_definition_starts_without_being_registered() {
    let env = TestEnv::new().await;
    let id = env
        .start(&json!({"name": "adhoc", "workflowDef": simple_def("adhoc", 5), "input": {}}))
        .await;
    let wf = env.get(&format!("/api/workflow/{id}")).await.json();
    assert_eq!(wf["workflowName"], "adhoc");
    assert_eq!(wf["workflowVersion"], 5);
    env.get("/api/metadata/workflow/adhoc")
        .await
        .error(StatusCode::NOT_FOUND);

    let mut bad = simple_def("adhoc", 1);
    bad["tasks"][0]["type"] = json!("TELEPORT");
    let body = env
        .post("/api/workflow", &json!({"workflowDef": bad}))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(body["path"], "workflowDef.tasks[0].type", "{body}");
    env.finish().await;
}

#[tokio::test]
async fn same_idempotency_key_twice_starts_one_run() {
    let env = TestEnv::new().await;
    env.register(&simple_def("once", 1)).await;
    let request = json!({"name": "once", "input": {}, "idempotencyKey": "order-42"});
    let first = env.start(&request).await;
    let second = env.start(&request).await;
    assert_eq!(first, second);
    let other = env
        .start(&json!({"name": "once", "input": {}, "idempotencyKey": "order-43"}))
        .await;
    assert_ne!(first, other);
    assert_eq!(count_starts(&env).await, 2);
    env.finish().await;
}

#[tokio::test]
async fn concurrent_starts_with_one_idempotency_key_start_one_run() {
    let env = TestEnv::new().await;
    let mut commands = env.consume_commands();
    env.register(&simple_def("race", 1)).await;
    let request = json!({"name": "race", "input": {}, "idempotencyKey": "same-key"});
    let ids = futures_util::future::join_all((0..8).map(|_| env.start(&request))).await;
    assert!(ids.iter().all(|id| id == &ids[0]), "{ids:?}");
    assert_eq!(count_starts(&env).await, 1);

    let delivery = next_delivery(&mut commands, 10).await.expect("one command");
    assert_eq!(delivery.envelope.workflow_id, ids[0]);
    assert!(
        next_delivery(&mut commands, 1).await.is_none(),
        "only one StartWorkflow is published"
    );
    env.finish().await;
}

#[tokio::test]
async fn accepted_start_not_yet_applied_reads_as_running_queuing() {
    let env = TestEnv::new().await;
    env.register(&simple_def("waiting", 1)).await;
    let id = env
        .start(&json!({"name": "waiting", "input": {"n": 1}, "correlationId": "c"}))
        .await;
    let wf = env.get(&format!("/api/workflow/{id}")).await;
    assert_eq!(wf.status, StatusCode::OK, "{}", wf.text());
    let wf = wf.json();
    assert_eq!(wf["workflowId"], id.as_str());
    assert_eq!(wf["status"], "RUNNING");
    assert_eq!(wf["subStatus"], "QUEUING");
    assert_eq!(wf["tasks"], json!([]));
    assert_eq!(wf["input"], json!({"n": 1}));
    assert_eq!(wf["correlationId"], "c");
    assert!(
        wf["startTime"].as_i64().unwrap_or_default() > 1_600_000_000_000,
        "{wf}"
    );

    let status = env.get(&format!("/api/workflow/{id}/status")).await.json();
    assert_eq!(status["status"], "RUNNING");
    assert_eq!(status["subStatus"], "QUEUING");
    let history = env.get(&format!("/api/workflow/{id}/history")).await.json();
    assert_eq!(history, json!({"events": [], "next": null}));
    env.finish().await;
}

#[tokio::test]
async fn definition_with_a_legacy_dynamic_fork_is_refused_as_not_supported_yet() {
    let env = TestEnv::new().await;
    let def = json!({
        "name": "branchy", "version": 1,
        "tasks": [
            {"name": "first", "taskReferenceName": "first", "type": "SIMPLE"},
            {"name": "pick", "taskReferenceName": "pick", "type": "FORK_JOIN_DYNAMIC",
             "dynamicForkJoinTasksParam": "tasks",
             "inputParameters": {"tasks": "${workflow.input.tasks}"}},
            {"name": "j", "taskReferenceName": "j", "type": "JOIN"}
        ]
    });
    env.register(&def).await;
    let body = env
        .post("/api/workflow", &json!({"name": "branchy", "input": {}}))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(body["path"], "tasks[1].dynamicForkJoinTasksParam", "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("not supported yet"),
        "{body}"
    );
    assert_eq!(count_starts(&env).await, 0);
    env.finish().await;
}

/// Conductor's harness definition `integration_test_wf` names its failure workflow
/// `$workflow.input.failureWfName`: read from the run's input (none when absent), then
/// frozen like a literal name (404 when it is not registered).
#[tokio::test]
async fn a_failure_workflow_named_by_the_input_is_resolved_at_start() {
    let env = TestEnv::new().await;
    let mut commands = env.consume_commands();
    let harness: Value = serde_json::from_str(include_str!(
        "../../../../shared/tests/conductor-samples/simple_workflow_1_integration_test.json"
    ))
    .unwrap();
    env.register(&harness).await;
    let frozen_failure = |start: weft::messages::StartWorkflow| {
        (
            start.definition.failure_workflow.clone(),
            start
                .definition
                .extra
                .get("failureWorkflowDefinition")
                .and_then(|d| d["name"].as_str().map(str::to_owned)),
        )
    };
    let mut next_start = async || {
        let delivery = next_delivery(&mut commands, 10)
            .await
            .expect("the StartWorkflow command arrives");
        match delivery.envelope.decode::<Command>().expect("decodes") {
            Command::StartWorkflow(start) => start,
            other => panic!("not a StartWorkflow: {other:?}"),
        }
    };

    env.start(&json!({"name": "integration_test_wf", "input": {"param1": "p1"}}))
        .await;
    assert_eq!(frozen_failure(next_start().await), (None, None));

    let missing = env
        .post(
            "/api/workflow",
            &json!({"name": "integration_test_wf", "input": {"failureWfName": "cleanup"}}),
        )
        .await
        .error(StatusCode::NOT_FOUND);
    assert!(
        missing["message"].as_str().unwrap().contains("cleanup"),
        "{missing}"
    );

    env.register(&simple_def("cleanup", 1)).await;
    env.start(&json!({"name": "integration_test_wf", "input": {"failureWfName": "cleanup"}}))
        .await;
    assert_eq!(
        frozen_failure(next_start().await),
        (Some("cleanup".into()), Some("cleanup".into()))
    );
    env.finish().await;
}

#[tokio::test]
async fn a_start_beyond_the_in_flight_limit_is_refused_with_429_and_nothing_written() {
    let env = TestEnv::new().await;
    let state = env.state.clone().with_start_limit(1);
    let router = weft_gateway::router(state.clone());
    env.register(&simple_def("limited", 1)).await;
    let send = |uri: &str, body: &str| {
        axum::http::Request::builder()
            .method("POST")
            .uri(uri)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_owned()))
            .unwrap()
    };

    // The one permit is held (a start in flight): the next start, whatever its form, is
    // turned away before it reads or writes anything.
    let held = state.start_permits.clone().try_acquire_owned().unwrap();
    for (uri, body) in [
        ("/api/workflow", r#"{"name": "limited"}"#),
        ("/api/workflow/limited", "{}"),
    ] {
        let res = router.clone().oneshot(send(uri, body)).await.unwrap();
        assert_eq!(res.status().as_u16(), 429, "{uri}");
        assert_eq!(res.headers()["retry-after"], "1");
        let body = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["code"], "overloaded", "{body}");
        assert!(body["message"]
            .as_str()
            .unwrap()
            .contains("WEFT_MAX_STARTS_IN_FLIGHT"));
    }
    assert_eq!(count_starts(&env).await, 0);

    // Freed: starts go through again, one after the other.
    drop(held);
    for _ in 0..2 {
        let res = router
            .clone()
            .oneshot(send("/api/workflow", r#"{"name": "limited"}"#))
            .await
            .unwrap();
        assert_eq!(res.status().as_u16(), 200);
    }
    assert_eq!(count_starts(&env).await, 2);
    env.finish().await;
}

/// The definition (with its frozen task definitions) that the `StartWorkflow` of the
/// next start carries.
async fn started_definition(
    env: &TestEnv,
    commands: &mut tokio::sync::mpsc::UnboundedReceiver<weft::bus::Delivery>,
    name: &str,
) -> weft::dsl::WorkflowDef {
    env.start(&json!({"name": name, "input": {}})).await;
    let delivery = next_delivery(commands, 10)
        .await
        .expect("the StartWorkflow command arrives");
    let Ok(Command::StartWorkflow(start)) = delivery.envelope.decode::<Command>() else {
        panic!("not a StartWorkflow: {:?}", delivery.envelope);
    };
    start.definition
}

/// Starts of a registered definition are served from the gateway's cache (they read
/// nothing: they work with the definitions table renamed away), and every change to a
/// workflow or task definition made elsewhere — another gateway, SQL by hand — is
/// heard and used by the next starts.
#[tokio::test]
async fn cached_starts_read_nothing_and_follow_changes_made_elsewhere() {
    let env = TestEnv::new().await;
    env.watch_definitions();
    let mut commands = env.consume_commands();
    let pool = env.store.pg_pool().unwrap().clone();
    env.register(&simple_def("cached", 1)).await;
    let r = env
        .post(
            "/api/metadata/taskdefs",
            &json!([{"name": "greet", "retryCount": 3}]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let retries =
        |def: &weft::dsl::WorkflowDef| def.tasks[0].extra["taskDefinition"]["retryCount"].clone();
    // The listener may still be connecting, and the notifications of the registrations
    // above may arrive after a start has cached its definition (dropping it, rightly):
    // start until one is served from the cache, with the definitions table renamed away.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let cached = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no start was served from the cache"
        );
        if env.store.definitions_epoch().current().is_none() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        }
        assert_eq!(
            retries(&started_definition(&env, &mut commands, "cached").await),
            3
        );
        sqlx::query("ALTER TABLE definitions RENAME TO definitions_away")
            .execute(&pool)
            .await
            .unwrap();
        let away = env
            .post("/api/workflow", &json!({"name": "cached", "input": {}}))
            .await;
        sqlx::query("ALTER TABLE definitions_away RENAME TO definitions")
            .execute(&pool)
            .await
            .unwrap();
        if away.status == StatusCode::OK {
            let delivery = next_delivery(&mut commands, 10)
                .await
                .expect("the StartWorkflow command arrives");
            let Ok(Command::StartWorkflow(start)) = delivery.envelope.decode::<Command>() else {
                panic!("not a StartWorkflow: {:?}", delivery.envelope);
            };
            break start.definition;
        }
    };
    assert_eq!((cached.version, retries(&cached)), (1, json!(3)));

    // Another gateway registers version 2 with a second task.
    let elsewhere = weft::store::Store::from_pool(pool.clone());
    let mut v2 = simple_def("cached", 2);
    v2["tasks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "wave", "taskReferenceName": "wave_ref", "type": "SIMPLE"}));
    elsewhere
        .put_definition(&weft::dsl::parse_definition(&v2).unwrap(), false)
        .await
        .unwrap();
    let followed = started_until(&env, &mut commands, |def| def.version == 2).await;
    assert_eq!(followed.tasks.len(), 2);
    // Someone changes the task definition by hand.
    sqlx::query(
        "UPDATE task_definitions SET definition = jsonb_set(definition, '{retryCount}', '7')",
    )
    .execute(&pool)
    .await
    .unwrap();
    started_until(&env, &mut commands, |def| retries(def) == json!(7)).await;
    env.finish().await;
}

/// Starts until one carries a definition that `done` accepts (a change made elsewhere
/// is heard within milliseconds, not at once).
async fn started_until(
    env: &TestEnv,
    commands: &mut tokio::sync::mpsc::UnboundedReceiver<weft::bus::Delivery>,
    done: impl Fn(&weft::dsl::WorkflowDef) -> bool,
) -> weft::dsl::WorkflowDef {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let def = started_definition(env, commands, "cached").await;
        if done(&def) {
            return def;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the change was never used: {def:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
