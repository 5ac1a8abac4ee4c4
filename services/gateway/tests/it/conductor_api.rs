//! The rest of Conductor's REST surface: every endpoint Weft does not offer answers 501
//! naming it (and none of them falls through to a Weft route), the definition summaries,
//! health and version, search returning whole workflows, bulk requests' validation and
//! removal, and `decide`.

use axum::http::{Method, StatusCode};
use serde_json::json;
use uuid::Uuid;

use crate::utils::{simple_def, TestEnv};

#[tokio::test]
async fn every_endpoint_weft_does_not_offer_answers_501_naming_it() {
    let env = TestEnv::new().await;
    for (method, template) in weft_gateway::routes::not_offered::endpoints() {
        let path = template
            .replace("{*rest}", "schedules")
            .replace('{', "x")
            .replace('}', "");
        let method: Method = method.parse().unwrap();
        let body = (method != Method::GET).then(|| b"{}".to_vec());
        let r = env.send(method.clone(), &path, body).await;
        let error = r.error(StatusCode::NOT_IMPLEMENTED);
        assert_eq!(error["code"], "not_offered", "{method} {path}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(&path), "{method} {path}: {message}");
    }
    // `test` is not a workflow name here: nothing is started.
    env.register(&simple_def("test", 1)).await;
    let r = env
        .post("/api/workflow/test", &json!({"name": "test", "input": {}}))
        .await;
    r.error(StatusCode::NOT_IMPLEMENTED);
    let found = env
        .get("/api/workflow/search?query=workflowType%3Dtest")
        .await;
    assert_eq!(found.json()["totalHits"], 0, "{}", found.text());
    env.finish().await;
}

#[tokio::test]
async fn definition_summaries_health_and_version() {
    let env = TestEnv::new().await;
    env.register(&simple_def("b_flow", 1)).await;
    env.register(&simple_def("b_flow", 2)).await;
    env.register(&simple_def("a_flow", 1)).await;

    assert_eq!(
        env.get("/api/metadata/workflow/names").await.json(),
        json!(["a_flow", "b_flow"])
    );
    let by_name = env
        .get("/api/metadata/workflow/names-and-versions")
        .await
        .json();
    assert_eq!(by_name["b_flow"].as_array().map(Vec::len), Some(2));
    assert!(by_name["a_flow"][0]["createTime"].as_i64().unwrap() > 0);
    let versions = env
        .get("/api/metadata/workflow/b_flow/versions")
        .await
        .json();
    assert_eq!(versions[0]["version"], 1);
    assert_eq!(versions[1]["version"], 2);
    env.get("/api/metadata/workflow/nobody/versions")
        .await
        .error(StatusCode::NOT_FOUND);
    let latest = env
        .get("/api/metadata/workflow/latest-versions")
        .await
        .json();
    let mut pairs: Vec<(String, i64)> = latest
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap().to_owned(),
                d["version"].as_i64().unwrap(),
            )
        })
        .collect();
    pairs.sort();
    assert_eq!(pairs, [("a_flow".to_owned(), 1), ("b_flow".to_owned(), 2)]);

    for path in ["/health", "/api/health"] {
        let health = env.get(path).await;
        assert_eq!(health.status, StatusCode::OK, "{}", health.text());
        assert_eq!(health.json()["healthy"], true);
    }
    let version = env.get("/api/version").await;
    assert_eq!(version.status, StatusCode::OK);
    assert_eq!(version.text(), env!("CARGO_PKG_VERSION"));
    env.finish().await;
}

async fn insert_ended_run(env: &TestEnv, wf: &str) -> Uuid {
    let run = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO runs (run_id, workflow_id, workflow_name, workflow_version, status,
             sub_status, input, variables, failed_task_refs, start_time, end_time,
             update_time, version, is_current)
         VALUES ($1, $2, 'orders', 1, 'COMPLETED', 'COMPLETED', '{}', '{}', '{}', now(),
             now(), now(), 1, true)",
    )
    .bind(run)
    .bind(wf)
    .execute(env.store.pg_pool().unwrap())
    .await
    .expect("insert run");
    sqlx::query(
        "INSERT INTO tasks (task_id, run_id, workflow_id, task_ref, task_type, task_name, seq,
             iteration, attempt, status, input, scheduled_time, update_time)
         VALUES ($1, $2, $3, 'a', 'SIMPLE', 'a', 0, 0, 1, 'COMPLETED', '{}', now(), now())",
    )
    .bind(Uuid::now_v7())
    .bind(run)
    .bind(wf)
    .execute(env.store.pg_pool().unwrap())
    .await
    .expect("insert task");
    run
}

#[tokio::test]
async fn search_v2_bulk_validation_and_removal_and_decide() {
    let env = TestEnv::new().await;
    insert_ended_run(&env, "bulk-1").await;
    insert_ended_run(&env, "bulk-2").await;

    let full = env
        .get("/api/workflow/search-v2?query=workflowType%3Dorders")
        .await;
    assert_eq!(full.status, StatusCode::OK, "{}", full.text());
    let full = full.json();
    assert_eq!(full["totalHits"], 2);
    assert_eq!(full["results"][0]["tasks"][0]["referenceTaskName"], "a");

    for (method, path) in [
        (Method::PUT, "/api/workflow/bulk/pause"),
        (Method::POST, "/api/workflow/bulk/terminate"),
        (Method::DELETE, "/api/workflow/bulk/remove"),
    ] {
        let empty = env.send(method.clone(), path, Some(b"[]".to_vec())).await;
        assert_eq!(
            empty.error(StatusCode::BAD_REQUEST)["path"],
            "workflowIds",
            "{method} {path}"
        );
    }
    let too_many: Vec<String> = (0..1001).map(|i| format!("w{i}")).collect();
    env.send(
        Method::POST,
        "/api/workflow/bulk/retry",
        Some(serde_json::to_vec(&too_many).unwrap()),
    )
    .await
    .error(StatusCode::BAD_REQUEST);

    let removed = env
        .send(
            Method::DELETE,
            "/api/workflow/bulk/remove",
            Some(br#"["bulk-1", "nobody", "bulk-2"]"#.to_vec()),
        )
        .await;
    assert_eq!(removed.status, StatusCode::OK, "{}", removed.text());
    let removed = removed.json();
    assert_eq!(
        removed["bulkSuccessfulResults"],
        json!(["bulk-1", "bulk-2"])
    );
    assert!(
        removed["bulkErrorResults"]["nobody"]
            .as_str()
            .unwrap()
            .contains("not_found"),
        "{removed}"
    );
    env.get("/api/workflow/bulk-1")
        .await
        .error(StatusCode::NOT_FOUND);

    insert_ended_run(&env, "decided").await;
    let r = env
        .send(Method::PUT, "/api/workflow/decide/decided", None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    env.send(Method::PUT, "/api/workflow/decide/nobody", None)
        .await
        .error(StatusCode::NOT_FOUND);
    env.finish().await;
}
