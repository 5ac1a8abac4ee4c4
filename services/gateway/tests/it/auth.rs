//! Tokens, scopes and the audit trail, through the router on the real store.

use axum::http::{Method, StatusCode};
use serde_json::{json, Value};
use weft_gateway::auth::scopes::{Need, Scope, ROUTES};

use crate::utils::TestEnv;

const ADMIN: &str = "admin-secret-for-the-tests-0123456789";

/// A concrete path for a route template.
fn concrete(template: &str) -> String {
    template
        .split('/')
        .map(|segment| match segment {
            "{version}" => "1".to_owned(),
            s if s.starts_with('{') => "x1".to_owned(),
            s => s.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

impl TestEnv {
    async fn as_token(
        &self,
        token: &str,
        method: Method,
        uri: &str,
        body: Option<&Value>,
    ) -> crate::utils::Reply {
        let auth = format!("Bearer {token}");
        self.send_with(
            method,
            uri,
            body.map(|b| b.to_string().into_bytes()),
            &[("authorization", &auth)],
        )
        .await
    }

    /// Creates a token with `scopes` as the admin; returns its secret.
    async fn token(&self, name: &str, scopes: &[&str]) -> String {
        let r = self
            .as_token(
                ADMIN,
                Method::POST,
                "/api/admin/tokens",
                Some(&json!({ "name": name, "scopes": scopes })),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
        r.json()["token"].as_str().expect("the secret").to_owned()
    }
}

#[tokio::test]
async fn every_route_refuses_a_token_without_its_scope_and_a_request_without_a_token() {
    let env = TestEnv::new().await.with_admin_token(ADMIN);
    for rule in ROUTES {
        let method: Method = rule.method.parse().unwrap();
        let uri = concrete(rule.path);
        let without = env.send(method.clone(), &uri, None).await;
        match rule.need {
            Need::Open => assert_ne!(
                without.status,
                StatusCode::UNAUTHORIZED,
                "{} {} is open",
                rule.method,
                rule.path
            ),
            _ => {
                let body = without.error(StatusCode::UNAUTHORIZED);
                assert_eq!(
                    body["code"], "unauthenticated",
                    "{} {}",
                    rule.method, rule.path
                );
            }
        }
        let Need::Any(needed) = rule.need else {
            continue;
        };
        // A token with every other scope still lacks this one.
        let others: Vec<&str> = Scope::ALL
            .iter()
            .filter(|s| !needed.contains(s))
            .map(|s| s.as_str())
            .collect();
        let name = format!("lacks-{}", rand_suffix());
        let token = env.token(&name, &others).await;
        let r = env.as_token(&token, method, &uri, Some(&json!({}))).await;
        let body = r.error(StatusCode::FORBIDDEN);
        let message = body["message"].as_str().unwrap();
        assert!(
            needed.iter().any(|s| message.contains(&format!("`{s}`"))),
            "{} {}: {message}",
            rule.method,
            rule.path
        );
    }
    env.finish().await;
}

fn rand_suffix() -> String {
    weft::testing::random_suffix()
}

#[tokio::test]
async fn a_token_works_until_it_is_revoked_or_expires_and_its_secret_is_never_listed() {
    let env = TestEnv::new().await.with_admin_token(ADMIN);
    let reader = env.token("reader", &["read"]).await;
    assert!(reader.starts_with("weft_"));
    let r = env
        .as_token(&reader, Method::GET, "/api/metadata/workflow", None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    // Conductor's header works too.
    let r = env
        .send_with(
            Method::GET,
            "/api/metadata/workflow",
            None,
            &[("x-authorization", &reader)],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    let listed = env
        .as_token(ADMIN, Method::GET, "/api/admin/tokens", None)
        .await
        .json();
    assert_eq!(listed[0]["name"], "reader");
    assert_eq!(listed[0]["scopes"], json!(["read"]));
    assert!(!listed.to_string().contains(&reader), "{listed}");

    // A second token of the same name is refused; bad scopes name their field.
    let r = env
        .as_token(
            ADMIN,
            Method::POST,
            "/api/admin/tokens",
            Some(&json!({"name": "reader", "scopes": ["read"]})),
        )
        .await;
    r.error(StatusCode::CONFLICT);
    let r = env
        .as_token(
            ADMIN,
            Method::POST,
            "/api/admin/tokens",
            Some(&json!({"name": "x", "scopes": ["read", "fly"]})),
        )
        .await;
    assert_eq!(r.error(StatusCode::BAD_REQUEST)["path"], "scopes[1]");

    let r = env
        .as_token(ADMIN, Method::DELETE, "/api/admin/tokens/reader", None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = env
        .as_token(&reader, Method::GET, "/api/metadata/workflow", None)
        .await;
    assert_eq!(r.error(StatusCode::UNAUTHORIZED)["code"], "unauthenticated");
    let r = env
        .as_token(ADMIN, Method::DELETE, "/api/admin/tokens/reader", None)
        .await;
    r.error(StatusCode::NOT_FOUND);

    // A token past its expiry is refused, saying so.
    let soon = chrono::Utc::now().timestamp_millis() + 1_500;
    let r = env
        .as_token(
            ADMIN,
            Method::POST,
            "/api/admin/tokens",
            Some(&json!({"name": "brief", "scopes": ["read"], "expiresAt": soon})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let brief = r.json()["token"].as_str().unwrap().to_owned();
    let r = env
        .as_token(&brief, Method::GET, "/api/metadata/workflow", None)
        .await;
    assert_eq!(r.status, StatusCode::OK);
    tokio::time::sleep(std::time::Duration::from_millis(1_600)).await;
    let r = env
        .as_token(&brief, Method::GET, "/api/metadata/workflow", None)
        .await;
    let body = r.error(StatusCode::UNAUTHORIZED);
    assert!(
        body["message"].as_str().unwrap().contains("expired"),
        "{body}"
    );
    let r = env
        .as_token(
            ADMIN,
            Method::POST,
            "/api/admin/tokens",
            Some(&json!({"name": "past", "scopes": ["read"], "expiresAt": 1000})),
        )
        .await;
    assert_eq!(r.error(StatusCode::BAD_REQUEST)["path"], "expiresAt");
    env.finish().await;
}

#[tokio::test]
async fn conductors_key_exchange_answers_a_token_for_the_right_key_only() {
    let env = TestEnv::new().await.with_admin_token(ADMIN);
    let secret = env.token("sdk", &["read", "work"]).await;
    let r = env
        .post("/api/token", &json!({"keyId": "sdk", "keySecret": secret}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let token = r.json()["token"].as_str().unwrap().to_owned();
    let r = env
        .send_with(
            Method::GET,
            "/api/tasks/queue/all",
            None,
            &[("x-authorization", &token)],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = env
        .post(
            "/api/token",
            &json!({"keyId": "other", "keySecret": secret}),
        )
        .await;
    r.error(StatusCode::UNAUTHORIZED);
    let r = env
        .post(
            "/api/token",
            &json!({"keyId": "sdk", "keySecret": "weft_nope"}),
        )
        .await;
    r.error(StatusCode::UNAUTHORIZED);
    env.finish().await;
}

#[tokio::test]
async fn a_worker_token_limited_to_task_types_polls_those_only() {
    let env = TestEnv::new().await.with_admin_token(ADMIN);
    let r = env
        .as_token(
            ADMIN,
            Method::POST,
            "/api/admin/tokens",
            Some(&json!({"name": "greeter", "scopes": ["work"], "taskTypes": ["greet"]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    let worker = r.json()["token"].as_str().unwrap().to_owned();
    let r = env
        .as_token(
            &worker,
            Method::GET,
            "/api/tasks/poll/greet?timeout=1",
            None,
        )
        .await;
    assert!(r.status.is_success(), "{}", r.text());
    let r = env
        .as_token(
            &worker,
            Method::GET,
            "/api/tasks/poll/charge?timeout=1",
            None,
        )
        .await;
    let body = r.error(StatusCode::FORBIDDEN);
    assert!(
        body["message"].as_str().unwrap().contains("`charge`"),
        "{body}"
    );
    // An update names its task in the body: an unknown one is not found, never let by.
    let r = env
        .as_token(
            &worker,
            Method::POST,
            "/api/tasks",
            Some(&json!({"taskId": uuid::Uuid::nil(), "workflowInstanceId": "w", "status": "COMPLETED"})),
        )
        .await;
    r.error(StatusCode::NOT_FOUND);
    // taskTypes without the work scope is refused.
    let r = env
        .as_token(
            ADMIN,
            Method::POST,
            "/api/admin/tokens",
            Some(&json!({"name": "odd", "scopes": ["read"], "taskTypes": ["greet"]})),
        )
        .await;
    assert_eq!(r.error(StatusCode::BAD_REQUEST)["path"], "taskTypes");
    env.finish().await;
}

#[tokio::test]
async fn changes_are_audited_with_who_what_and_why() {
    let env = TestEnv::new().await.with_admin_token(ADMIN);
    let definer = env
        .token("alice", &["define", "start", "operate", "read"])
        .await;
    let def = json!({
        "name": "audited", "version": 1,
        "tasks": [{"name": "wait", "taskReferenceName": "w", "type": "WAIT"}]
    });
    let r = env
        .as_token(&definer, Method::POST, "/api/metadata/workflow", Some(&def))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = env
        .as_token(
            &definer,
            Method::POST,
            "/api/workflow",
            Some(&json!({"name": "audited"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let workflow_id = r.text();
    let r = env
        .as_token(
            &definer,
            Method::DELETE,
            &format!("/api/workflow/{workflow_id}?reason=wrong+input"),
            None,
        )
        .await;
    // No decider runs here: the terminate is accepted and queued (202), and audited.
    assert!(r.status.is_success(), "{}", r.text());

    let rows = env
        .as_token(
            &definer,
            Method::GET,
            &format!("/api/workflow/{workflow_id}/audit"),
            None,
        )
        .await
        .json();
    let actions: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["workflow.terminate", "workflow.start"], "{rows}");
    assert_eq!(rows[0]["token"], "alice");
    assert_eq!(rows[0]["reason"], "wrong input");
    assert_eq!(rows[0]["status"], r.status.as_u16());
    assert_eq!(rows[1]["target"], "audited");

    let all = env
        .as_token(ADMIN, Method::GET, "/api/audit?token=alice", None)
        .await
        .json();
    let actions: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["workflow.terminate", "workflow.start", "definition.create"],
        "{all}"
    );
    // A definition is named in its body; the row names it.
    assert_eq!(all[2]["target"], "audited v1", "{all}");
    let admin_rows = env
        .as_token(ADMIN, Method::GET, "/api/audit?token=admin", None)
        .await
        .json();
    assert!(
        admin_rows
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["action"] == "token.create" && r["target"] == "alice"),
        "{admin_rows}"
    );
    // The audit trail is the admin's.
    let r = env
        .as_token(&definer, Method::GET, "/api/audit", None)
        .await;
    r.error(StatusCode::FORBIDDEN);
    env.finish().await;
}

#[tokio::test]
async fn without_auth_every_route_answers_and_changes_are_still_audited() {
    let env = TestEnv::new().await;
    let r = env.get("/api/metadata/workflow").await;
    assert_eq!(r.status, StatusCode::OK);
    let config = env.get("/api/ui/config").await.json();
    assert_eq!(config["auth"], false);
    let r = env
        .send(Method::DELETE, "/api/metadata/taskdefs/nothing", None)
        .await;
    r.error(StatusCode::NOT_FOUND);
    let rows = env.get("/api/audit").await.json();
    assert_eq!(rows[0]["action"], "taskdef.delete", "{rows}");
    assert_eq!(rows[0]["token"], Value::Null);
    assert_eq!(rows[0]["status"], 404);
    env.finish().await;
}

#[tokio::test]
async fn metrics_can_need_a_read_token_while_health_stays_open() {
    let env = TestEnv::new().await.with_admin_token(ADMIN);
    assert_eq!(env.get("/healthz").await.status, StatusCode::OK);
    env.get("/metrics").await.error(StatusCode::UNAUTHORIZED);
    let reader = env.token("scraper", &["read"]).await;
    let r = env.as_token(&reader, Method::GET, "/metrics", None).await;
    assert_eq!(r.status, StatusCode::OK);
    let config = env.get("/api/ui/config").await.json();
    assert_eq!(config["auth"], true);
    env.finish().await;
}

#[tokio::test]
async fn hook_secrets_are_write_only_and_survive_a_read_modify_write() {
    let env = TestEnv::new().await;
    let def = json!({
        "name": "signed", "version": 1,
        "hooks": {"secret": "hook-secret-value", "onFailure": {"url": "https://hooks.example/f"}},
        "tasks": [{"name": "wait", "taskReferenceName": "w", "type": "WAIT"}]
    });
    env.register(&def).await;
    for uri in [
        "/api/metadata/workflow/signed",
        "/api/metadata/workflow",
        "/api/metadata/workflow/latest-versions",
    ] {
        let text = env.get(uri).await.text();
        assert!(!text.contains("hook-secret-value"), "{uri}: {text}");
        assert!(text.contains(weft_gateway::secrets::MASK), "{uri}: {text}");
    }
    // Read, change the description, write back: the secret stays.
    let mut read = env.get("/api/metadata/workflow/signed").await.json();
    read["description"] = json!("edited");
    let r = env.put("/api/metadata/workflow", &json!([read])).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let stored = env
        .store
        .get_definition("signed", Some(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.definition["hooks"]["secret"], "hook-secret-value");
    assert_eq!(stored.definition["description"], "edited");
    // The mask cannot become a new definition's secret.
    let mut fresh = def.clone();
    fresh["name"] = json!("unsigned");
    fresh["hooks"]["secret"] = json!(weft_gateway::secrets::MASK);
    let r = env.post("/api/metadata/workflow", &fresh).await;
    assert_eq!(r.error(StatusCode::BAD_REQUEST)["path"], "hooks.secret");
    env.finish().await;
}
