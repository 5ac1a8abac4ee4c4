//! The gateway: Weft's only HTTP surface (DESIGN.md §2).
//!
//! It speaks Conductor's REST API (API.md): definitions are validated and stored here;
//! a workflow start is validated, committed to PostgreSQL together with its
//! `StartWorkflow` command (outbox) and then published to the run's command shard; reads
//! come from what the decider materialised. Bad input gets a 4xx naming the field and
//! never reaches the bus.
//!
//! [`run`] serves on the configured address until the shutdown token is cancelled;
//! [`router`] builds the routes over an [`AppState`] so tests can drive them in-process.

pub mod auth;
pub mod error;
pub mod event_handlers;
mod extract;
mod middleware;
pub mod routes;
pub mod secrets;
pub mod start_definitions;
pub mod start_events;
pub mod state;
pub mod views;

use std::future::IntoFuture;
use std::sync::{Arc, OnceLock};

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use weft::runtime::Backing;
use weft::Config;

pub use error::{ApiError, Error};
pub use state::AppState;

/// Database connections of one gateway process: requests hold one only for a query or
/// the start transaction, so a few serve many concurrent requests; one more is held by
/// the listener of definition changes.
const POOL_SIZE: u32 = 17;

/// The gateway's routes (REST API, `/healthz`, `/readyz`, `/metrics`) over `state`.
pub fn router(state: AppState) -> Router {
    let admin = weft::admin::router(state.metrics.clone(), state.ready_check());
    Router::new()
        .merge(routes::metadata::routes())
        .merge(routes::workflow::routes())
        .merge(routes::executions::routes())
        .merge(routes::execute::routes())
        .merge(routes::bulk::routes())
        .merge(routes::admin::routes())
        .merge(routes::not_offered::routes())
        .merge(routes::server_info::routes())
        .merge(routes::hooks::routes())
        .merge(routes::operations::routes())
        .merge(routes::signal::routes())
        .merge(routes::taskdefs::routes())
        .merge(routes::heartbeat::routes())
        .merge(routes::tasks::routes())
        .merge(routes::ui::routes())
        .merge(routes::ui::config_routes())
        .merge(routes::graph::routes())
        .merge(routes::search::routes())
        .merge(routes::stats::routes())
        .merge(event_handlers::routes::routes())
        .merge(auth::routes::routes())
        .fallback(middleware::no_route)
        .method_not_allowed_fallback(middleware::wrong_method)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::guard,
        ))
        .layer(DefaultBodyLimit::max(state.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::observe,
        ))
        .with_state(state.clone())
        .merge(admin.layer(axum::middleware::from_fn_with_state(
            state,
            auth::metrics_guard,
        )))
}

/// Connects to PostgreSQL (migrating it) and RabbitMQ, then serves on
/// `config.http_addr` until `shutdown` is cancelled; in-flight requests finish first.
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), Error> {
    run_on(Backing::Connect, config, shutdown).await
}

/// [`run`] on `backing` (`weft dev` provides an open store, bus and caches).
pub async fn run_on(
    backing: Backing,
    config: Config,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let addr = config.http_addr;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Serve { addr, source })?;
    serve_on(backing, listener, config, shutdown).await
}

/// As [`run`], on an already bound listener (tests bind port 0).
///
/// The listener serves at once: while the database and the broker are being connected,
/// `/healthz` answers 200, `/readyz` 503 and every other route 503, so an orchestrator
/// sees a live but not-ready process (DESIGN.md §8).
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    serve_on(Backing::Connect, listener, config, shutdown).await
}

/// [`serve`] on `backing`.
pub async fn serve_on(
    backing: Backing,
    listener: TcpListener,
    config: Config,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let addr = listener.local_addr().map_err(|source| Error::Serve {
        addr: config.http_addr,
        source,
    })?;
    if !config.auth.enabled() && !config.auth.explicitly_off() && !addr.ip().is_loopback() {
        return Err(Error::Insecure { addr });
    }
    let app: Arc<OnceLock<Router>> = Arc::default();
    let stop = shutdown.child_token();
    let server = tokio::spawn(
        axum::serve(listener, front_door(app.clone()))
            .with_graceful_shutdown(stop.clone().cancelled_owned())
            .into_future(),
    );
    tracing::info!(%addr, "gateway listening");

    let state = match connect(&backing, &config, &shutdown).await {
        Ok(state) => state,
        Err(e) => {
            stop.cancel();
            let _ = server.await;
            return match e {
                weft::Error::ShuttingDown => Ok(()),
                other => Err(Error::Startup(other)),
            };
        }
    };
    let consumer = start_events::spawn(&state, config.start_event_concurrency, shutdown.clone());
    let listeners = event_handlers::listeners::spawn(&state, shutdown.clone());
    let polls = tokio::spawn(
        state
            .polls
            .clone()
            .run(state.store.clone(), shutdown.clone()),
    );
    // `app` is set once, here; nothing else can have set it.
    let _ = app.set(router(state));
    tracing::info!("gateway ready");
    let served = server.await;
    if let Some(consumer) = consumer {
        // Stops with `shutdown`, finishing the starts under way.
        let _ = consumer.await;
    }
    // The same for the events handlers are acting on.
    let _ = listeners.await;
    // Writes the polls seen last, then stops.
    let _ = polls.await;
    match served {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(Error::Serve { addr, source }),
        Err(join) => Err(Error::Serve {
            addr,
            source: std::io::Error::other(join),
        }),
    }
}

/// The gateway's dependencies, connected (each retries until reachable or shutdown).
async fn connect(
    backing: &Backing,
    config: &Config,
    shutdown: &CancellationToken,
) -> weft::Result<AppState> {
    let (store, bus) = backing.store_and_bus(config, POOL_SIZE, shutdown).await?;
    // Starts cache resolved definitions while changes are heard (one pooled connection
    // listens for them).
    store.watch_definitions(shutdown.clone());
    let cache = backing.cache(config)?;
    let metrics = backing.metrics();
    // HTTP polls claim here: their deferrals count on the gateway's `/metrics`.
    let registry =
        weft::registry::Registry::new(store.clone(), Some(cache), config.heartbeat_write_interval)
            .with_metrics(&metrics);
    let graphs = backing.graphs(config)?;
    bus.count_publishes(&metrics);
    Ok(AppState::new(store, bus, config.max_body_bytes, metrics)
        .with_registry(registry)
        .with_graph_cache(graphs)
        .with_trace_url(config.trace_url.clone())
        .with_auth(&config.auth)
        .with_start_limit(config.max_starts_in_flight)
        .with_starts_together(config.starts_together)
        .with_shutdown(shutdown.clone()))
}

/// Hands each request to the full router once it exists, and answers "starting" before.
fn front_door(app: Arc<OnceLock<Router>>) -> Router {
    Router::new().fallback(move |req: Request| {
        let app = app.clone();
        async move {
            match app.get() {
                Some(router) => match router.clone().oneshot(req).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                },
                None => starting(&req),
            }
        }
    })
}

/// The answer while connecting: live, not ready.
fn starting(req: &Request) -> Response {
    const REASON: &str = "starting: connecting to the database and the broker";
    match req.uri().path() {
        "/healthz" => Json(serde_json::json!({ "status": "ok" })).into_response(),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "status": "not ready", "reason": REASON })),
        )
            .into_response(),
        _ => ApiError::Unavailable(REASON.to_owned()).into_response(),
    }
}
