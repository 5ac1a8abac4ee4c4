//! Logs and traces, set up the same way in every service and worker.
//!
//! [`init`] installs one global `tracing` subscriber:
//! - **logs** on stderr (stdout stays free for program output), filtered by `RUST_LOG`
//!   (default `info`); one JSON object per line when `WEFT_LOG_FORMAT=json`, human-readable
//!   text otherwise (`WEFT_LOG_FORMAT=text` or unset);
//! - **traces**: `tracing` spans are bridged to OpenTelemetry. When
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, finished
//!   spans go to it over OTLP HTTP/protobuf through a batch processor, with resource
//!   `service.name`. When unset there is no exporter and no background thread; spans still get
//!   trace ids so that trace context keeps flowing through this process to the next one.
//!
//! Trace context crosses process boundaries as a W3C `traceparent` string (in HTTP headers and
//! AMQP message headers): producers call [`current_traceparent`], consumers call [`set_parent`]
//! on the span they open for the incoming message or request.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::{OpenTelemetrySpanExt, SetParentError};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::{Error, Result};

/// Name of the W3C trace context header (HTTP) and message header (AMQP).
pub const TRACEPARENT: &str = "traceparent";

/// Environment variable choosing the log format: `json` or `text` (default).
pub const LOG_FORMAT_ENV: &str = "WEFT_LOG_FORMAT";

/// Instrumentation scope of the spans Weft creates.
const TRACER_NAME: &str = "weft";

/// Set once a call to [`init`] has installed the global subscriber.
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Set once [`init`] installed an exporter of spans (an OTLP endpoint is configured).
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether this process exports its spans. Spans made only for the trace (not for the
/// logs' context) can be left out when it does not: nobody would see them.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Keeps the trace pipeline alive; dropping it flushes pending spans and shuts the exporter
/// down. Hold it in `main` until the process is about to exit.
#[must_use = "dropping the guard shuts the trace exporter down"]
#[derive(Debug)]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl TelemetryGuard {
    /// A guard that owns nothing (telemetry was already installed by an earlier [`init`]).
    fn noop() -> Self {
        Self { provider: None }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            if let Err(e) = provider.shutdown() {
                tracing::warn!(error = %e, "flushing traces at shutdown failed");
            }
        }
    }
}

/// Log output format, from [`LOG_FORMAT_ENV`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

impl LogFormat {
    fn parse(value: Option<&str>) -> Result<Self> {
        match value.map(str::trim) {
            None | Some("") => Ok(Self::Text),
            Some(v) if v.eq_ignore_ascii_case("text") => Ok(Self::Text),
            Some(v) if v.eq_ignore_ascii_case("json") => Ok(Self::Json),
            Some(v) => Err(Error::Config(format!(
                "{LOG_FORMAT_ENV} must be \"json\" or \"text\", got {v:?}"
            ))),
        }
    }
}

/// Installs logging and tracing for this process (see the module docs for the environment
/// it reads). Call it once at the top of `main`, inside the Tokio runtime, and keep the guard.
///
/// A second call in the same process (tests starting several services) changes nothing and
/// returns a guard that owns nothing; so does a call when another global `tracing`
/// subscriber is already installed.
///
/// # Errors
/// [`Error::Config`] when `RUST_LOG` or `WEFT_LOG_FORMAT` is malformed, or the OTLP exporter
/// cannot be built from the `OTEL_EXPORTER_OTLP_*` variables.
pub fn init(service_name: &str) -> Result<TelemetryGuard> {
    if INSTALLED.load(Ordering::SeqCst) {
        return Ok(TelemetryGuard::noop());
    }

    let format = LogFormat::parse(std::env::var(LOG_FORMAT_ENV).ok().as_deref())?;
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .from_env()
        .map_err(|e| Error::Config(format!("RUST_LOG: {e}")))?;
    let endpoint = traces_endpoint();
    let provider = tracer_provider(service_name, endpoint.as_deref())?;

    let fmt_layer = match format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let otel_layer = tracing_opentelemetry::layer().with_tracer(provider.tracer(TRACER_NAME));

    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(fmt_layer)
        .with(otel_layer)
        .try_init();
    if installed.is_err() {
        // Someone else owns the global subscriber; leave it and stop what we started.
        let _ = provider.shutdown();
        return Ok(TelemetryGuard::noop());
    }
    INSTALLED.store(true, Ordering::SeqCst);
    EXPORTING.store(endpoint.is_some(), Ordering::SeqCst);

    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    opentelemetry::global::set_tracer_provider(provider.clone());
    tracing::info!(
        service = service_name,
        otlp_endpoint = endpoint.as_deref().unwrap_or("none"),
        "telemetry initialised"
    );
    Ok(TelemetryGuard {
        provider: Some(provider),
    })
}

/// The OTLP/HTTP traces URL from the environment: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as is,
/// else `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces` (the OTLP specification's rules).
fn traces_endpoint() -> Option<String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| {
        var("OTEL_EXPORTER_OTLP_ENDPOINT")
            .map(|base| format!("{}/v1/traces", base.trim().trim_end_matches('/')))
    })
}

/// The OTLP encoding from `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` or
/// `OTEL_EXPORTER_OTLP_PROTOCOL`: `http/protobuf` (the default) or `http/json`.
fn protocol() -> Result<Protocol> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    match var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .as_deref()
        .map(str::trim)
    {
        None | Some("http/protobuf") => Ok(Protocol::HttpBinary),
        Some("http/json") => Ok(Protocol::HttpJson),
        Some(other) => Err(Error::Config(format!(
            "OTEL_EXPORTER_OTLP_PROTOCOL: {other:?} is not supported (http/protobuf or http/json)"
        ))),
    }
}

/// The SDK tracer provider: with an OTLP HTTP/protobuf batch exporter to `endpoint` (a full
/// traces URL) when there is one; without any span processor, so that nothing runs in the
/// background, otherwise. Headers and timeout come from the `OTEL_EXPORTER_OTLP_*` variables.
fn tracer_provider(service_name: &str, endpoint: Option<&str>) -> Result<SdkTracerProvider> {
    let resource = Resource::builder()
        .with_service_name(service_name.to_owned())
        .build();
    let builder = SdkTracerProvider::builder().with_resource(resource);
    let Some(endpoint) = endpoint else {
        return Ok(builder.build());
    };
    // The blocking reqwest client (feature `reqwest-blocking-client`): the batch processor
    // exports from its own thread, outside any Tokio runtime, where the async client panics.
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol()?)
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| Error::Config(format!("OTLP span exporter for {endpoint}: {e}")))?;
    Ok(builder.with_batch_exporter(exporter).build())
}

/// The W3C `traceparent` of the current `tracing` span (or, failing that, of the current
/// OpenTelemetry context), to put in the headers of an outgoing message or request.
///
/// `None` when there is no valid span context: outside any span, or when no OpenTelemetry
/// layer is installed.
pub fn current_traceparent() -> Option<String> {
    traceparent_of(&tracing::Span::current().context())
        .or_else(|| traceparent_of(&Context::current()))
}

/// Formats the span context of `cx` as a `traceparent` value, if it is valid.
fn traceparent_of(cx: &Context) -> Option<String> {
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// Makes `span` a child of the remote span named by `traceparent` (from an incoming AMQP
/// message or HTTP request).
///
/// Call it right after creating the span, before entering it or recording anything in it:
/// OpenTelemetry fixes a span's parent when the span starts. A missing or malformed
/// `traceparent` leaves `span` as the root of a new trace.
pub fn set_parent(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(cx) = extract(traceparent) else {
        if traceparent.is_some_and(|t| !t.trim().is_empty()) {
            tracing::debug!(traceparent, "ignoring malformed traceparent");
        }
        return;
    };
    match OpenTelemetrySpanExt::set_parent(span, cx) {
        // No OpenTelemetry layer, or the span is filtered out: nothing to link.
        Ok(()) | Err(SetParentError::LayerNotFound | SetParentError::SpanDisabled) => {}
        Err(e) => tracing::debug!(error = %e, traceparent, "could not set the span's parent"),
    }
}

/// AMQP header with a message's publish time, in microseconds since the Unix epoch: the
/// consumer turns the time between it and the delivery into a `queue.wait` span.
pub const PUBLISHED_AT_HEADER: &str = "x-weft-published-at";

/// Microseconds since the Unix epoch, now (for [`PUBLISHED_AT_HEADER`]).
pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The context named by a `traceparent` value, if it is well formed.
fn extract(traceparent: Option<&str>) -> Option<Context> {
    let span_context = remote_span_context(traceparent?)?;
    Some(Context::current().with_remote_span_context(span_context))
}

/// The remote span a W3C `traceparent` value names, by the rules of OpenTelemetry's
/// `TraceContextPropagator` (which a test holds this to), without its carrier: every
/// message a service consumes is read this way several times, and the propagator's
/// path costs a map and two strings each time.
fn remote_span_context(traceparent: &str) -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    /// The highest version the W3C format allows (255 is invalid).
    const MAX_VERSION: u8 = 254;
    let mut parts = traceparent.trim().split_terminator('-');
    let (Some(version), Some(trace_id), Some(span_id), Some(flags)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let version = u8::from_str_radix(version, 16).ok()?;
    // Version 0 has exactly four parts; later versions may add more.
    if version > MAX_VERSION || (version == 0 && parts.next().is_some()) {
        return None;
    }
    let lower_hex = |s: &str| !s.bytes().any(|b| b.is_ascii_uppercase());
    if !lower_hex(trace_id) || !lower_hex(span_id) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok()?;
    let span_id = SpanId::from_hex(span_id).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    if version == 0 && flags > 2 {
        return None;
    }
    let span_context = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    span_context.is_valid().then_some(span_context)
}

/// Records the time a message spent in `queue` as a span `queue.wait` (from its publish
/// time to now, child of the publisher's span) and returns the traceparent the consumer
/// continues, so that the consumer's span is the wait's child and the wait shows in the
/// trace. Without a valid `traceparent` (an untraced message) or a publish time, nothing
/// is recorded and `traceparent` is returned as it is.
pub fn queue_wait(
    traceparent: Option<&str>,
    published_at_micros: Option<i64>,
    queue: &str,
) -> Option<String> {
    use opentelemetry::trace::{Span as _, SpanKind, Tracer as _};
    let (Some(parent), Some(published)) = (extract(traceparent), published_at_micros) else {
        return traceparent.map(str::to_owned);
    };
    let now = std::time::SystemTime::now();
    let start = u64::try_from(published)
        .ok()
        .map(|us| std::time::UNIX_EPOCH + std::time::Duration::from_micros(us))
        .filter(|t| *t <= now)
        .unwrap_or(now);
    let tracer = opentelemetry::global::tracer(TRACER_NAME);
    let mut span = tracer
        .span_builder("queue.wait")
        .with_kind(SpanKind::Consumer)
        .with_start_time(start)
        .with_attributes([opentelemetry::KeyValue::new(
            "messaging.destination.name",
            queue.to_owned(),
        )])
        .start_with_context(&tracer, &parent);
    let context = span.span_context().clone();
    span.end_with_timestamp(now);
    traceparent_of(&Context::new().with_remote_span_context(context))
        .or_else(|| traceparent.map(str::to_owned))
}

/// Whether two `traceparent` values belong to the same trace.
pub fn same_trace(a: &str, b: &str) -> bool {
    match (extract(Some(a)), extract(Some(b))) {
        (Some(a), Some(b)) => {
            a.span().span_context().trace_id() == b.span().span_context().trace_id()
        }
        _ => false,
    }
}

/// Links `span` to the remote span named by `traceparent` (a cause in another trace,
/// e.g. the operator request behind a signal); a missing or malformed value is ignored.
pub fn add_link(span: &tracing::Span, traceparent: Option<&str>) {
    if let Some(cx) = extract(traceparent) {
        span.add_link(cx.span().span_context().clone());
    }
}

/// The `traceparent` of `span` (to carry its context into a later span's parent or link).
pub fn traceparent_of_span(span: &tracing::Span) -> Option<String> {
    traceparent_of(&span.context())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::Registry;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    /// A subscriber with the OpenTelemetry layer over an SDK provider without exporter.
    fn otel_subscriber() -> (impl tracing::Subscriber + Send + Sync, SdkTracerProvider) {
        let provider = SdkTracerProvider::builder().build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
        (Registry::default().with(layer), provider)
    }

    #[test]
    fn traceparents_are_read_as_opentelemetrys_propagator_reads_them() {
        let propagator = TraceContextPropagator::new();
        let cases = [
            PARENT,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-02",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",
            "  00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01  ",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-extra",
            "fe-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-abc-def-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
            "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-",
            "00--00f067aa0ba902b7-01",
            "",
            "-",
            "garbage",
        ];
        for case in cases {
            let carrier = HashMap::from([(TRACEPARENT.to_owned(), case.to_owned())]);
            let theirs = propagator.extract(&carrier);
            let theirs = theirs.span().span_context().clone();
            let ours = remote_span_context(case);
            match ours {
                Some(ours) => assert_eq!(ours, theirs, "{case:?}"),
                None => assert!(!theirs.is_valid(), "{case:?}: the propagator reads it"),
            }
        }
    }

    /// Splits a `traceparent` into (version, trace id, span id, flags).
    fn parts(tp: &str) -> (String, String, String, String) {
        let p: Vec<&str> = tp.split('-').collect();
        assert_eq!(p.len(), 4, "malformed traceparent {tp}");
        (p[0].into(), p[1].into(), p[2].into(), p[3].into())
    }

    #[test]
    fn set_parent_then_current_traceparent_continues_the_remote_trace() {
        let (subscriber, _provider) = otel_subscriber();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("consume");
            set_parent(&span, Some(PARENT));
            let got = span.in_scope(current_traceparent).expect("a traceparent");
            let (version, trace_id, span_id, flags) = parts(&got);
            assert_eq!(version, "00");
            assert_eq!(trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
            assert_ne!(span_id, "00f067aa0ba902b7", "the child has its own span id");
            assert_eq!(flags, "01", "the sampling decision is inherited");
        });
    }

    #[test]
    fn nested_span_keeps_the_trace_id() {
        let (subscriber, _provider) = otel_subscriber();
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("outer");
            set_parent(&outer, Some(PARENT));
            let _outer = outer.enter();
            let inner = tracing::info_span!("inner");
            let got = inner.in_scope(current_traceparent).expect("a traceparent");
            assert_eq!(parts(&got).1, "4bf92f3577b34da6a3ce929d0e0e4736");
        });
    }

    #[test]
    fn missing_or_malformed_traceparent_starts_a_new_trace() {
        let (subscriber, _provider) = otel_subscriber();
        tracing::subscriber::with_default(subscriber, || {
            for bad in [None, Some(""), Some("garbage"), Some("00-zz-yy-01")] {
                let span = tracing::info_span!("consume");
                set_parent(&span, bad);
                let got = span
                    .in_scope(current_traceparent)
                    .expect("a root traceparent");
                assert_ne!(parts(&got).1, "4bf92f3577b34da6a3ce929d0e0e4736");
            }
        });
    }

    #[test]
    fn no_traceparent_outside_spans_or_without_the_otel_layer() {
        let (subscriber, _provider) = otel_subscriber();
        tracing::subscriber::with_default(subscriber, || {
            assert_eq!(current_traceparent(), None);
        });
        tracing::subscriber::with_default(Registry::default(), || {
            let span = tracing::info_span!("plain");
            set_parent(&span, Some(PARENT));
            assert_eq!(span.in_scope(current_traceparent), None);
        });
    }

    /// A one-request OTLP collector stub; yields (request head, body) of what it received.
    fn collector_stub() -> (String, std::sync::mpsc::Receiver<(String, Vec<u8>)>) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (send, received) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream);
            let mut head = String::new();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line == "\r\n" || line.is_empty() {
                    break;
                }
                head.push_str(&line);
            }
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            reader
                .get_mut()
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .unwrap();
            let _ = send.send((head, body));
        });
        (base, received)
    }

    #[test]
    fn spans_are_exported_over_otlp_http_protobuf_on_shutdown() {
        let (base, received) = collector_stub();
        let endpoint = format!("{base}/v1/traces");
        let provider = tracer_provider("weft-test-service", Some(&endpoint)).unwrap();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer(TRACER_NAME));
        tracing::subscriber::with_default(Registry::default().with(layer), || {
            tracing::info_span!("exported_span").in_scope(|| {});
        });
        provider.shutdown().expect("flush and shut down");

        let (head, body) = received
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the collector got a request");
        let head = head.to_ascii_lowercase();
        assert!(head.starts_with("post /v1/traces "), "{head}");
        assert!(
            head.contains("content-type: application/x-protobuf"),
            "{head}"
        );
        let contains = |needle: &[u8]| body.windows(needle.len()).any(|w| w == needle);
        assert!(
            contains(b"weft-test-service"),
            "service.name in the resource"
        );
        assert!(contains(b"exported_span"), "the span itself");
    }

    #[test]
    fn no_endpoint_means_no_span_processor() {
        // Spans still get ids (for propagation) but nothing is exported or spawned.
        let provider = tracer_provider("weft-test-service", None).unwrap();
        assert!(provider.shutdown().is_ok());
    }

    #[test]
    fn log_format_accepts_json_and_text_only() {
        assert_eq!(LogFormat::parse(None).unwrap(), LogFormat::Text);
        assert_eq!(LogFormat::parse(Some("")).unwrap(), LogFormat::Text);
        assert_eq!(LogFormat::parse(Some("TEXT")).unwrap(), LogFormat::Text);
        assert_eq!(LogFormat::parse(Some("json")).unwrap(), LogFormat::Json);
        assert!(matches!(
            LogFormat::parse(Some("yaml")),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn init_twice_does_not_panic() {
        let first = init("weft-test").expect("first init");
        let second = init("weft-test").expect("second init");
        assert!(second.provider.is_none(), "the second guard owns nothing");
        drop(second);
        drop(first);
    }
}
