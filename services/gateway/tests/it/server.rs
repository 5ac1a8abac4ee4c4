//! The whole service: `serve` on a real socket, ready once connected, stopped by its token.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::utils::{amqp_url, simple_def, TestDb};

#[tokio::test]
async fn serves_the_api_over_http_and_stops_on_shutdown() {
    let db = TestDb::create("gw").await;
    let namespace = format!("gws-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let config = weft::Config {
        database_url: db.url.clone(),
        amqp_url: amqp_url(),
        namespace: namespace.clone(),
        shards: 2,
        ..weft::Config::default()
    };
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(weft_gateway::serve(listener, config, shutdown.clone()));

    // Wait on readiness (bounded), never on a fixed sleep.
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = http
            .get(format!("{base}/readyz"))
            .send()
            .await
            .map(|r| r.status().as_u16())
            .ok();
        if status == Some(200) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never ready: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let r = http
        .post(format!("{base}/api/metadata/workflow"))
        .json(&simple_def("over_http", 1))
        .send()
        .await
        .expect("register");
    assert_eq!(r.status().as_u16(), 200);
    let r = http
        .post(format!("{base}/api/workflow"))
        .json(&json!({"name": "over_http", "input": {"who": "Ada"}}))
        .send()
        .await
        .expect("start");
    assert_eq!(r.status().as_u16(), 200);
    let id = r.text().await.expect("the id");
    let wf: serde_json::Value = http
        .get(format!("{base}/api/workflow/{id}"))
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(wf["subStatus"], "QUEUING");

    shutdown.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("stops promptly")
        .expect("join");
    assert!(outcome.is_ok(), "{outcome:?}");

    // Remove the namespace this test's gateway declared.
    let names = weft::topology::Names::new(&namespace, 2);
    let bus = weft::bus::Bus::connect(&amqp_url(), names, CancellationToken::new())
        .await
        .expect("bus");
    bus.teardown(&[]).await.expect("teardown");
}

#[tokio::test]
async fn a_public_address_without_auth_is_refused_unless_said_on_purpose() {
    let listener = TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], 0)))
        .await
        .expect("bind");
    let e = weft_gateway::serve(listener, weft::Config::default(), CancellationToken::new())
        .await
        .expect_err("no auth on a public address");
    let text = e.to_string();
    assert!(
        matches!(e, weft_gateway::Error::Insecure { .. })
            && text.contains("WEFT_ADMIN_TOKEN")
            && text.contains("WEFT_AUTH=off"),
        "{text}"
    );

    // Said on purpose: it serves (and stops on its token).
    let db = TestDb::create("gw").await;
    let config = weft::Config {
        database_url: db.url.clone(),
        amqp_url: amqp_url(),
        namespace: format!("gwp-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        shards: 2,
        auth: weft::auth_settings::AuthSettings {
            mode: Some(false),
            ..Default::default()
        },
        ..weft::Config::default()
    };
    let listener = TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], 0)))
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(weft_gateway::serve(listener, config, shutdown.clone()));
    let http = reqwest::Client::new();
    let r = http
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await
        .expect("served");
    assert_eq!(r.status().as_u16(), 200);
    shutdown.cancel();
    server.await.expect("join").expect("a clean stop");
}
