//! Definitions: register, read, list, replace, delete, validate.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::utils::{simple_def, TestEnv};

#[tokio::test]
async fn registered_definition_reads_back_with_unknown_fields_preserved() {
    let env = TestEnv::new().await;
    let mut def = simple_def("greeting", 1);
    def["ownerEmail"] = json!("ops@example.com");
    def["restartable"] = json!(true);
    def["timeoutPolicy"] = json!("ALERT_ONLY");
    def["tasks"][0]["startDelay"] = json!(0);
    def["tasks"][0]["taskDefinition"] = json!({"retryCount": 3});
    env.register(&def).await;

    let got = env.get("/api/metadata/workflow/greeting?version=1").await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.text());
    assert_eq!(got.json(), def);
    let latest = env.get("/api/metadata/workflow/greeting").await;
    assert_eq!(latest.json(), def);
    env.finish().await;
}

#[tokio::test]
async fn get_without_version_answers_the_latest_and_list_has_all_versions() {
    let env = TestEnv::new().await;
    env.register(&simple_def("multi", 1)).await;
    env.register(&simple_def("multi", 3)).await;
    env.register(&simple_def("multi", 2)).await;

    let latest = env.get("/api/metadata/workflow/multi").await.json();
    assert_eq!(latest["version"], 3);
    let v2 = env
        .get("/api/metadata/workflow/multi?version=2")
        .await
        .json();
    assert_eq!(v2["version"], 2);

    let all = env.get("/api/metadata/workflow").await.json();
    let versions: Vec<i64> = all
        .as_array()
        .expect("a list")
        .iter()
        .map(|d| d["version"].as_i64().unwrap_or_default())
        .collect();
    assert_eq!(versions, [1, 2, 3]);
    env.finish().await;
}

#[tokio::test]
async fn unknown_definition_or_version_is_404_json() {
    let env = TestEnv::new().await;
    let body = env
        .get("/api/metadata/workflow/nope")
        .await
        .error(StatusCode::NOT_FOUND);
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("nope"),
        "{body}"
    );
    env.register(&simple_def("some", 1)).await;
    env.get("/api/metadata/workflow/some?version=9")
        .await
        .error(StatusCode::NOT_FOUND);
    env.get("/api/metadata/workflow/some?version=x")
        .await
        .error(StatusCode::BAD_REQUEST);
    env.finish().await;
}

#[tokio::test]
async fn existing_version_is_409_unless_overwrite() {
    let env = TestEnv::new().await;
    env.register(&simple_def("dup", 1)).await;
    let mut changed = simple_def("dup", 1);
    changed["description"] = json!("second");

    let again = env.post("/api/metadata/workflow", &changed).await;
    again.error(StatusCode::CONFLICT);
    let kept = env.get("/api/metadata/workflow/dup").await.json();
    assert!(
        kept.get("description").is_none(),
        "the first one is kept: {kept}"
    );

    let forced = env
        .post("/api/metadata/workflow?overwrite=true", &changed)
        .await;
    assert_eq!(forced.status, StatusCode::OK, "{}", forced.text());
    let replaced = env.get("/api/metadata/workflow/dup").await.json();
    assert_eq!(replaced["description"], "second");
    env.finish().await;
}

#[tokio::test]
async fn invalid_definitions_are_400_naming_the_field() {
    let env = TestEnv::new().await;
    let mut duplicate_ref = simple_def("bad", 1);
    duplicate_ref["tasks"] = json!([
        {"name": "a", "taskReferenceName": "same", "type": "SIMPLE"},
        {"name": "b", "taskReferenceName": "same", "type": "SIMPLE"}
    ]);
    let mut unknown_type = simple_def("bad", 1);
    unknown_type["tasks"][0]["type"] = json!("TELEPORT");
    let mut missing_name = simple_def("bad", 1);
    missing_name.as_object_mut().map(|m| m.remove("name"));

    for (def, path) in [
        (&duplicate_ref, "tasks[1].taskReferenceName"),
        (&unknown_type, "tasks[0].type"),
        (&missing_name, "name"),
    ] {
        for uri in ["/api/metadata/workflow", "/api/metadata/workflow/validate"] {
            let body = env.post(uri, def).await.error(StatusCode::BAD_REQUEST);
            assert_eq!(body["path"], path, "{uri}: {body}");
        }
    }
    // Wrong JSON types inside a definition are refused the same way, never a 500.
    for def in [
        json!({"name": "x", "tasks": "nope"}),
        json!({"name": 5}),
        json!([1]),
    ] {
        env.post("/api/metadata/workflow", &def)
            .await
            .error(StatusCode::BAD_REQUEST);
    }
    let list = env.get("/api/metadata/workflow").await.json();
    assert_eq!(list, json!([]), "nothing invalid was stored");
    env.finish().await;
}

#[tokio::test]
async fn validate_accepts_a_valid_definition_without_storing_it() {
    let env = TestEnv::new().await;
    let r = env
        .post("/api/metadata/workflow/validate", &simple_def("v", 1))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    env.get("/api/metadata/workflow/v")
        .await
        .error(StatusCode::NOT_FOUND);
    env.finish().await;
}

#[tokio::test]
async fn bulk_put_upserts_valid_definitions_and_reports_invalid_ones() {
    let env = TestEnv::new().await;
    env.register(&simple_def("one", 1)).await;
    let mut one_again = simple_def("one", 1);
    one_again["description"] = json!("updated");
    let mut broken = simple_def("broken", 1);
    broken["tasks"][0]["type"] = json!("TELEPORT");
    let r = env
        .put(
            "/api/metadata/workflow",
            &json!([one_again, simple_def("two", 1), broken]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let body = r.json();
    assert_eq!(body["bulkSuccessfulResults"], json!(["one", "two"]));
    let why = body["bulkErrorResults"]["broken"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("tasks[0].type"), "{body}");

    assert_eq!(
        env.get("/api/metadata/workflow/one").await.json()["description"],
        "updated"
    );
    env.get("/api/metadata/workflow/broken")
        .await
        .error(StatusCode::NOT_FOUND);
    env.put("/api/metadata/workflow", &json!({"name": "not a list"}))
        .await
        .error(StatusCode::BAD_REQUEST);
    env.finish().await;
}

#[tokio::test]
async fn delete_removes_one_version_and_404s_after() {
    let env = TestEnv::new().await;
    env.register(&simple_def("gone", 1)).await;
    env.register(&simple_def("gone", 2)).await;
    let r = env
        .send(Method::DELETE, "/api/metadata/workflow/gone/2", None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(
        env.get("/api/metadata/workflow/gone").await.json()["version"],
        1
    );
    env.send(Method::DELETE, "/api/metadata/workflow/gone/2", None)
        .await
        .error(StatusCode::NOT_FOUND);
    env.send(Method::DELETE, "/api/metadata/workflow/gone/two", None)
        .await
        .error(StatusCode::BAD_REQUEST);
    env.finish().await;
}
