//! The dispatcher's real client against a receiver on this machine, through the outbound
//! guard: without the allow-list every call to this machine (by address, by a name that
//! resolves to it) and any other scheme is refused, and the delivery is dead-lettered on
//! its first attempt with the reason; with the allow-list the same calls are delivered.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft::hooks::NewDelivery;
use weft::outbound::{AllowList, Guard};
use weft::store::hooks::DeliveryView;
use weft::store::runs::CommitBatch;
use weft_history::hooks::{Dispatcher, HookConfig};

use crate::utils::TestEnv;

/// Upper bound on a delivery settling.
const WAIT: Duration = Duration::from_secs(20);

/// A receiver on 127.0.0.1 answering 204 to every POST, counting them.
async fn receiver() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, calls)
}

fn delivery(workflow_id: &str, url: String) -> NewDelivery {
    NewDelivery {
        id: Uuid::new_v4(),
        workflow_id: workflow_id.to_owned(),
        run_id: Uuid::new_v4(),
        hook: "onComplete".into(),
        event: "workflow.completed".into(),
        task_ref: None,
        task_id: None,
        iteration: 0,
        url,
        headers: serde_json::Map::new(),
        body: "{}".into(),
        signature: None,
        blocking: false,
        group_seq: None,
        traceparent: None,
    }
}

/// Runs a dispatcher with `guard` until every delivery of `workflow_id` has settled;
/// returns them.
async fn dispatch(env: &TestEnv, guard: Guard, workflow_id: &str) -> Vec<DeliveryView> {
    let dispatcher = Dispatcher::new(
        env.store.clone(),
        env.bus.clone(),
        &weft::admin::Metrics::new(),
        HookConfig::default(),
        guard,
    )
    .unwrap();
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let stop = stop.clone();
        async move { dispatcher.run(stop).await }
    });
    let deadline = tokio::time::Instant::now() + WAIT;
    let settled = loop {
        let views = env.store.hook_deliveries(workflow_id).await.unwrap();
        if views.iter().all(|v| v.status != "PENDING") {
            break views;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never settled: {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.cancel();
    running.await.unwrap();
    settled
}

fn by_url<'a>(views: &'a [DeliveryView], url: &str) -> &'a DeliveryView {
    views.iter().find(|v| v.url == url).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_delivery_is_dead_at_once_with_the_reason_and_an_allowed_one_is_sent() {
    let env = TestEnv::new().await;
    let (addr, calls) = receiver().await;
    let literal = format!("http://{addr}/hook");
    let by_name = format!("http://localhost:{}/hook", addr.port());
    let other_scheme = format!("ftp://{addr}/hook");
    let urls = [literal.clone(), by_name.clone(), other_scheme.clone()];

    let batch = CommitBatch {
        hook_deliveries: urls
            .iter()
            .map(|u| delivery("wf-strict", u.clone()))
            .collect(),
        ..CommitBatch::default()
    };
    env.store.commit(&batch).await.unwrap();
    let views = dispatch(&env, Guard::default(), "wf-strict").await;
    for url in &urls {
        let v = by_url(&views, url);
        assert_eq!(v.status, "DEAD", "{v:?}");
        assert_eq!(v.attempt_count, 1, "no retry: {v:?}");
        assert_eq!(v.next_attempt_at, None);
        assert_eq!(v.attempts[0]["statusCode"], serde_json::Value::Null);
    }
    let error = |url: &str| by_url(&views, url).last_error.clone().unwrap();
    assert_eq!(
        error(&literal),
        "outbound call refused: 127.0.0.1 is in the loopback range (127.0.0.0/8); \
         allow it with WEFT_OUTBOUND_ALLOW"
    );
    assert!(
        error(&by_name).starts_with("outbound call refused: localhost resolves to "),
        "{}",
        error(&by_name)
    );
    assert_eq!(
        error(&other_scheme),
        "outbound call refused: scheme `ftp` is not allowed (http and https only)"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "nothing reached the receiver"
    );

    // The same calls with this machine allowed are delivered.
    let batch = CommitBatch {
        hook_deliveries: vec![
            delivery("wf-allowed", literal.clone()),
            delivery("wf-allowed", by_name.clone()),
        ],
        ..CommitBatch::default()
    };
    env.store.commit(&batch).await.unwrap();
    let views = dispatch(&env, Guard::new(AllowList::loopback()), "wf-allowed").await;
    for v in &views {
        assert_eq!(v.status, "DELIVERED", "{v:?}");
        assert_eq!(v.attempts[0]["statusCode"], 204);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    env.finish().await;
}
