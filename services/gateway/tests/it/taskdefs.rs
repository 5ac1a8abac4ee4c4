//! Task definitions: register, read, list, update, delete, validation, and their freezing
//! into the definition a run starts with.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use weft::messages::{Command, StartWorkflow};

use crate::utils::{next_delivery, TestEnv};

const TASKDEFS: &str = "/api/metadata/taskdefs";

async fn start_command(
    commands: &mut tokio::sync::mpsc::UnboundedReceiver<weft::bus::Delivery>,
) -> StartWorkflow {
    let delivery = next_delivery(commands, 10)
        .await
        .expect("the StartWorkflow command arrives");
    match delivery.envelope.decode::<Command>().expect("decodes") {
        Command::StartWorkflow(start) => start,
        other => panic!("not a StartWorkflow: {other:?}"),
    }
}

#[tokio::test]
async fn task_defs_round_trip_with_unknown_fields_and_conductor_defaults() {
    let env = TestEnv::new().await;
    let charge = json!({
        "name": "charge", "description": "charges a card", "retryCount": 5,
        "retryLogic": "EXPONENTIAL_BACKOFF", "retryDelaySeconds": 2,
        "timeoutSeconds": 120, "responseTimeoutSeconds": 30, "timeoutPolicy": "RETRY",
        "ownerEmail": "pay@example.com", "baseType": "SIMPLE", "createdBy": "ops",
        "metadata": {"team": "payments"}
    });
    let r = env
        .post(TASKDEFS, &json!([{"name": "ship"}, charge.clone()]))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    let got = env.get(&format!("{TASKDEFS}/charge")).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.text());
    let got = got.json();
    for (key, value) in charge.as_object().expect("an object") {
        assert_eq!(&got[key], value, "{key} reads back as registered");
    }
    // Conductor's defaults fill what was not sent.
    let ship = env.get(&format!("{TASKDEFS}/ship")).await.json();
    assert_eq!(ship["retryCount"], 3);
    assert_eq!(ship["retryLogic"], "FIXED");
    assert_eq!(ship["retryDelaySeconds"], 60);
    assert_eq!(ship["responseTimeoutSeconds"], 3600);
    assert_eq!(ship["timeoutPolicy"], "TIME_OUT_WF");

    let names = |list: Value| -> Vec<String> {
        list.as_array()
            .expect("a list")
            .iter()
            .map(|d| d["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(names(env.get(TASKDEFS).await.json()), ["charge", "ship"]);

    // PUT replaces one, and creates one that did not exist.
    let mut changed = charge.clone();
    changed["retryCount"] = json!(1);
    let r = env.put(TASKDEFS, &changed).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let got = env.get(&format!("{TASKDEFS}/charge")).await.json();
    assert_eq!(got["retryCount"], 1);
    assert_eq!(got["metadata"], json!({"team": "payments"}));
    let r = env.put(TASKDEFS, &json!({"name": "audit"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(
        names(env.get(TASKDEFS).await.json()),
        ["audit", "charge", "ship"]
    );

    let r = env
        .send(Method::DELETE, &format!("{TASKDEFS}/ship"), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    env.get(&format!("{TASKDEFS}/ship"))
        .await
        .error(StatusCode::NOT_FOUND);
    assert_eq!(names(env.get(TASKDEFS).await.json()), ["audit", "charge"]);
    env.finish().await;
}

#[tokio::test]
async fn invalid_task_defs_are_400_naming_the_field_and_nothing_is_written() {
    let env = TestEnv::new().await;
    let body = env
        .post(
            TASKDEFS,
            &json!([{"name": "a"}, {"name": "b", "retryLogic": "RANDOM"}]),
        )
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(body["path"], "[1].retryLogic", "{body}");
    let body = env
        .post(
            TASKDEFS,
            &json!([{"name": "a"}, {"name": "b", "retryCount": -1}]),
        )
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(body["path"], "[1].retryCount", "{body}");
    let body = env
        .post(TASKDEFS, &json!([{"retryCount": 1}]))
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(body["path"], "[0].name", "{body}");
    let body = env
        .post(
            TASKDEFS,
            &json!([{"name": "a", "timeoutSeconds": 10, "responseTimeoutSeconds": 20}]),
        )
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(body["path"], "[0].responseTimeoutSeconds", "{body}");
    env.post(TASKDEFS, &json!({"name": "not-a-list"}))
        .await
        .error(StatusCode::BAD_REQUEST);

    let body = env
        .put(
            TASKDEFS,
            &json!({"name": "a", "timeoutPolicy": "SOMETIMES"}),
        )
        .await
        .error(StatusCode::BAD_REQUEST);
    assert_eq!(body["path"], "timeoutPolicy", "{body}");
    env.send(Method::PUT, TASKDEFS, Some(b"{not json".to_vec()))
        .await
        .error(StatusCode::BAD_REQUEST);

    assert_eq!(env.get(TASKDEFS).await.json(), json!([]));
    env.finish().await;
}

#[tokio::test]
async fn unknown_task_def_is_404_json() {
    let env = TestEnv::new().await;
    let body = env
        .get(&format!("{TASKDEFS}/nope"))
        .await
        .error(StatusCode::NOT_FOUND);
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("nope"),
        "{body}"
    );
    env.send(Method::DELETE, &format!("{TASKDEFS}/nope"), None)
        .await
        .error(StatusCode::NOT_FOUND);
    env.finish().await;
}

#[tokio::test]
async fn start_freezes_registered_task_defs_and_keeps_inline_ones() {
    let env = TestEnv::new().await;
    let mut commands = env.consume_commands();
    let r = env
        .post(
            TASKDEFS,
            &json!([{"name": "greet", "retryCount": 7, "retryLogic": "LINEAR_BACKOFF"}]),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let def = json!({
        "name": "frozen", "version": 1,
        "tasks": [
            {"name": "greet", "taskReferenceName": "g1", "type": "SIMPLE"},
            {"name": "greet", "taskReferenceName": "g2", "type": "SIMPLE",
             "taskDefinition": {"retryCount": 1}},
            {"name": "pick", "taskReferenceName": "pick", "type": "SWITCH",
             "evaluatorType": "value-param", "expression": "k",
             "inputParameters": {"k": "${workflow.input.k}"},
             "decisionCases": {"yes": [{"name": "greet", "taskReferenceName": "g3"}]},
             "defaultCase": [{"name": "unregistered", "taskReferenceName": "u1"}]}
        ]
    });
    env.register(&def).await;

    env.start(&json!({"name": "frozen", "input": {}})).await;
    let start = start_command(&mut commands).await;
    let tasks = &start.definition.tasks;
    let frozen = &tasks[0].extra["taskDefinition"];
    assert_eq!(frozen["name"], "greet");
    assert_eq!(frozen["retryCount"], 7);
    assert_eq!(frozen["retryLogic"], "LINEAR_BACKOFF");
    assert_eq!(frozen["retryDelaySeconds"], 60, "defaults are frozen too");
    assert_eq!(
        tasks[1].extra["taskDefinition"],
        json!({"retryCount": 1}),
        "an inline taskDefinition is kept"
    );
    let cases = tasks[2].decision_cases.as_ref().expect("cases");
    assert_eq!(cases["yes"][0].extra["taskDefinition"]["retryCount"], 7);
    let default = tasks[2].default_case.as_ref().expect("default case");
    assert!(
        !default[0].extra.contains_key("taskDefinition"),
        "no TaskDef registered: default policies"
    );

    // The registered workflow definition is not changed; a later change of the TaskDef
    // reaches later starts only.
    let stored = env.get("/api/metadata/workflow/frozen").await.json();
    assert!(
        stored["tasks"][0].get("taskDefinition").is_none(),
        "{stored}"
    );
    assert!(
        stored["tasks"][2]["decisionCases"]["yes"][0]
            .get("taskDefinition")
            .is_none(),
        "{stored}"
    );
    let r = env
        .put(TASKDEFS, &json!({"name": "greet", "retryCount": 2}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    env.start(&json!({"name": "frozen", "input": {}})).await;
    let later = start_command(&mut commands).await;
    assert_eq!(
        later.definition.tasks[0].extra["taskDefinition"]["retryCount"],
        2
    );
    assert_eq!(frozen["retryCount"], 7);
    env.finish().await;
}
