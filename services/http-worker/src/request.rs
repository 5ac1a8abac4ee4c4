//! An HTTP task's input → a [`RequestSpec`], checked field by field.
//!
//! The input is Conductor's: the request under `http_request` (`uri`, `method`,
//! `headers`, `body`, `accept`, `contentType`, `connectionTimeOut`, `readTimeOut`), or,
//! as newer Conductor (Orkes) accepts, the same fields at the top level of the input when
//! there is no `http_request`. Unknown fields (`vipAddress`, `appName`, …) are ignored.
//! Any bad field is a terminal failure naming it (`input \`http_request.uri\` is missing`):
//! running the same input again cannot succeed.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::{Method, Url};
use serde_json::{Map, Value};
use weft::worker::ActivityError;

/// Connect timeout when `connectionTimeOut` is absent (Conductor's server default is
/// 100 ms, too short for most real services).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest connect timeout; larger values (and `0`, "no timeout" in Conductor) are
/// clamped to it.
pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// Read timeout (longest wait for the next bytes) when `readTimeOut` is absent.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest read timeout; larger values (and `0`) are clamped to it.
pub const MAX_READ_TIMEOUT: Duration = Duration::from_secs(300);

/// `accept` and `contentType` when absent, as in Conductor.
pub const DEFAULT_MEDIA_TYPE: &str = "application/json";

/// The methods Conductor's HTTP task accepts (case-insensitive in the input).
const METHODS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE",
];

/// A request ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSpec {
    /// Where to (http, or https with the `https` feature).
    pub url: Url,
    /// The method, `GET` unless given.
    pub method: Method,
    /// `Accept`, `Content-Type` (with a body only), then the input's `headers`, which
    /// replace those two when they name them.
    pub headers: HeaderMap,
    /// The bytes to send: a string as is, any other JSON value serialised.
    pub body: Option<Vec<u8>>,
    /// Longest wait for the connection.
    pub connect_timeout: Duration,
    /// Longest wait for the next bytes of the response.
    pub read_timeout: Duration,
}

/// The input object holding the request fields, and how fields are named in errors.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    prefix: &'static str,
}

impl Fields<'_> {
    fn name(&self, field: &str) -> String {
        format!("{}{field}", self.prefix)
    }

    /// The field's value; JSON `null` counts as absent.
    fn get(&self, field: &str) -> Option<&Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    fn string(&self, field: &str) -> Result<Option<&str>, ActivityError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(bad(
                &self.name(field),
                &format!("must be a string, got {v}"),
            )),
        }
    }
}

fn bad(name: &str, what: &str) -> ActivityError {
    ActivityError::terminal(format!("input `{name}` {what}"))
}

/// Reads the request out of an HTTP task's input.
pub fn parse(input: &Value) -> Result<RequestSpec, ActivityError> {
    let fields = locate(input)?;
    let url = parse_url(&fields)?;
    let method = parse_method(&fields)?;
    let content_type = fields.string("contentType")?.unwrap_or(DEFAULT_MEDIA_TYPE);
    let accept = fields.string("accept")?.unwrap_or(DEFAULT_MEDIA_TYPE);
    let body = fields.get("body").map(|b| match b {
        // As Conductor (Spring writes a String body verbatim): a string is sent as is,
        // so a pre-serialised document or a form is not quoted again.
        Value::String(s) => s.as_bytes().to_vec(),
        other => other.to_string().into_bytes(),
    });
    let mut headers = HeaderMap::new();
    headers.insert(ACCEPT, header_value(&fields.name("accept"), accept)?);
    if body.is_some() {
        let value = header_value(&fields.name("contentType"), content_type)?;
        headers.insert(CONTENT_TYPE, value);
    }
    add_headers(&fields, &mut headers)?;
    Ok(RequestSpec {
        url,
        method,
        headers,
        body,
        connect_timeout: millis(
            &fields,
            "connectionTimeOut",
            DEFAULT_CONNECT_TIMEOUT,
            MAX_CONNECT_TIMEOUT,
        )?,
        read_timeout: millis(
            &fields,
            "readTimeOut",
            DEFAULT_READ_TIMEOUT,
            MAX_READ_TIMEOUT,
        )?,
    })
}

/// `http_request` when present, else the top level when it has a `uri`.
fn locate(input: &Value) -> Result<Fields<'_>, ActivityError> {
    match input.get("http_request").filter(|v| !v.is_null()) {
        Some(Value::Object(map)) => Ok(Fields {
            map,
            prefix: "http_request.",
        }),
        Some(v) => Err(bad("http_request", &format!("must be an object, got {v}"))),
        None => match input {
            Value::Object(map) if map.get("uri").is_some_and(|v| !v.is_null()) => {
                Ok(Fields { map, prefix: "" })
            }
            _ => Err(bad(
                "http_request.uri",
                "is missing (give `http_request: {\"uri\": ..., \"method\": ...}`)",
            )),
        },
    }
}

fn parse_url(fields: &Fields<'_>) -> Result<Url, ActivityError> {
    let name = fields.name("uri");
    let raw = fields
        .string("uri")?
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad(&name, "is missing"))?;
    let url = Url::parse(raw).map_err(|e| bad(&name, &format!("is not a valid URL ({e})")))?;
    match url.scheme() {
        "http" => {}
        "https" if cfg!(feature = "https") => {}
        "https" => {
            return Err(bad(
                &name,
                "is https, which needs weft-http-worker built with the `https` feature",
            ))
        }
        other => return Err(bad(&name, &format!("has scheme `{other}`; use http"))),
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad(&name, "has no host"));
    }
    Ok(url)
}

fn parse_method(fields: &Fields<'_>) -> Result<Method, ActivityError> {
    let Some(raw) = fields.string("method")? else {
        return Ok(Method::GET);
    };
    let upper = raw.trim().to_ascii_uppercase();
    if !METHODS.contains(&upper.as_str()) {
        let what = format!("must be one of {}, got `{raw}`", METHODS.join(", "));
        return Err(bad(&fields.name("method"), &what));
    }
    Method::from_bytes(upper.as_bytes()).map_err(|e| bad(&fields.name("method"), &e.to_string()))
}

fn header_value(name: &str, value: &str) -> Result<HeaderValue, ActivityError> {
    HeaderValue::from_str(value)
        .map_err(|_| bad(name, &format!("is not a valid header value: {value:?}")))
}

/// The input's `headers`: a string, number or boolean per name (a list gives the header
/// several times); `null` values are skipped, as in Conductor.
fn add_headers(fields: &Fields<'_>, headers: &mut HeaderMap) -> Result<(), ActivityError> {
    let map = match fields.get("headers") {
        None => return Ok(()),
        Some(Value::Object(map)) => map,
        Some(v) => {
            let what = format!("must be an object of header → value, got {v}");
            return Err(bad(&fields.name("headers"), &what));
        }
    };
    for (key, value) in map {
        let field = format!("{}.{key}", fields.name("headers"));
        let name = HeaderName::from_bytes(key.as_bytes())
            .map_err(|_| bad(&field, "is not a valid header name"))?;
        let values: Vec<&Value> = match value {
            Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        let mut first = true;
        for v in values {
            let text = match v {
                Value::Null => continue,
                Value::String(s) => s.clone(),
                Value::Number(_) | Value::Bool(_) => v.to_string(),
                other => {
                    let what = format!("must be a string, number or boolean, got {other}");
                    return Err(bad(&field, &what));
                }
            };
            let hv = header_value(&field, &text)?;
            // The first value replaces a default (`Accept`, `Content-Type`).
            if first {
                headers.insert(name.clone(), hv);
                first = false;
            } else {
                headers.append(name.clone(), hv);
            }
        }
    }
    Ok(())
}

/// A timeout in milliseconds: a number or a numeric string; `0` means "as long as
/// allowed" (Conductor's "no timeout"), anything above `max` is clamped to it.
fn millis(
    fields: &Fields<'_>,
    field: &str,
    default: Duration,
    max: Duration,
) -> Result<Duration, ActivityError> {
    let Some(v) = fields.get(field) else {
        return Ok(default);
    };
    let ms = match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    };
    let ms = ms.ok_or_else(|| {
        bad(
            &fields.name(field),
            &format!("must be a non-negative number of milliseconds, got {v}"),
        )
    })?;
    Ok(match ms {
        0 => max,
        ms => Duration::from_millis(ms).min(max),
    })
}

#[cfg(test)]
mod tests;
