//! Trace propagation through the gateway, in a test binary of its own: it installs a
//! thread-local tracing subscriber, and tracing caches per-callsite interest process-wide,
//! so tests on other threads of a shared binary could disable its callsites.

#[path = "it/utils.rs"]
#[allow(dead_code)]
mod utils;

use axum::http::StatusCode;
use weft::messages::Command;

use crate::utils::{next_delivery, simple_def, TestEnv};

#[tokio::test]
async fn start_command_joins_the_callers_trace() {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    // A subscriber with the OpenTelemetry bridge for this test's thread only (the test
    // runtime is single-threaded, so the request runs here), without log output.
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("gateway-tests")));
    let _scope = tracing::subscriber::set_default(subscriber);
    // Callsites first hit by a parallel test's thread (which has no subscriber) cached
    // "never"; recompute their interest now that this thread's subscriber exists.
    tracing::callsite::rebuild_interest_cache();

    let env = TestEnv::new().await;
    let mut commands = env.consume_commands();
    env.register(&simple_def("traced", 1)).await;
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let r = env
        .send_with(
            axum::http::Method::POST,
            "/api/workflow/traced",
            Some(b"{}".to_vec()),
            &[("traceparent", &format!("00-{trace_id}-b7ad6b7169203331-01"))],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    let delivery = next_delivery(&mut commands, 10).await.expect("a command");
    let header = delivery.traceparent.clone().unwrap_or_default();
    assert!(header.contains(trace_id), "AMQP traceparent {header:?}");
    let Ok(Command::StartWorkflow(start)) = delivery.envelope.decode::<Command>() else {
        panic!("not a StartWorkflow");
    };
    let kept = start.traceparent.unwrap_or_default();
    assert!(
        kept.contains(trace_id),
        "StartWorkflow.traceparent {kept:?}"
    );
    env.finish().await;
}
