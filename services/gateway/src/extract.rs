//! Request extractors whose failures answer in the gateway's error shape.
//!
//! axum's own `Json` and `Query` answer rejections as plain text (and `Json` insists on a
//! `Content-Type`); these wrappers keep every 4xx a JSON `{code, message, path?}` and let
//! the body-size limit surface as 413.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON request body of type `T`. The body is read within the router's size limit
/// (413 beyond it) and parsed whatever the `Content-Type`, as Conductor's clients do not
/// all send one.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Parses `bytes` as JSON of type `T`; the error says where the document went wrong.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "invalid_json",
            "request body is empty; a JSON document is expected",
        ));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request("invalid_json", format!("request body: {e}")))
}

/// Query parameters of type `T`; a malformed value answers 400 naming it.
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<S, T> FromRequestParts<S> for Query<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| Query(q.0))
            .map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))
    }
}

/// Path parameters of type `T`; a malformed segment (e.g. a non-numeric version) answers
/// 400 naming it.
#[derive(Debug)]
pub struct Path<T>(pub T);

impl<S, T> FromRequestParts<S> for Path<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e| ApiError::bad_request("invalid_path", e.body_text()))
    }
}

/// The `key=value` pairs of a query string, percent-decoded, in order; repeated keys
/// stay repeated (Conductor's clients send lists as `status=A&status=B`).
pub fn query_pairs(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |text: &str| {
                percent_decode(text).ok_or_else(|| {
                    ApiError::invalid(
                        "invalid_query",
                        key.to_owned(),
                        "is not valid percent-encoding",
                    )
                })
            };
            Ok((decode(key)?, decode(value)?))
        })
        .collect()
}

/// `%41+b` → `A b`; `None` for a broken escape or bytes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let mut out = Vec::with_capacity(text.len());
    let mut bytes = text.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'%' => {
                let hex = [bytes.next()?, bytes.next()?];
                out.push(u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?);
            }
            b'+' => out.push(b' '),
            other => out.push(other),
        }
    }
    String::from_utf8(out).ok()
}

/// A boolean query parameter read as Conductor's server (Spring) reads one: `true`,
/// `on`, `yes`, `1` and `false`, `off`, `no`, `0`, in any case (Conductor's Python SDK
/// sends `True`). Use with `#[serde(default, deserialize_with = "...")]`.
pub fn lenient_bool<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
    parse_flag(&text).ok_or_else(|| {
        serde::de::Error::custom(format!("{text:?} is not a boolean (true or false)"))
    })
}

/// [`lenient_bool`] for an optional parameter.
pub fn lenient_opt_bool<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    lenient_bool(d).map(Some)
}

fn parse_flag(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" => Some(true),
        "false" | "off" | "no" | "0" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Flags {
        #[serde(default, deserialize_with = "lenient_bool")]
        include_tasks: bool,
        #[serde(default, deserialize_with = "lenient_opt_bool")]
        archive: Option<bool>,
    }

    fn read(query: &str) -> Result<Flags, String> {
        axum::extract::Query::<Flags>::try_from_uri(&format!("/x?{query}").parse().unwrap())
            .map(|q| q.0)
            .map_err(|e| e.body_text())
    }

    #[test]
    fn booleans_read_as_conductor_reads_them() {
        assert!(read("includeTasks=True").unwrap().include_tasks);
        assert!(read("includeTasks=1").unwrap().include_tasks);
        assert!(!read("includeTasks=FALSE").unwrap().include_tasks);
        assert!(!read("").unwrap().include_tasks);
        assert_eq!(read("archive=no").unwrap().archive, Some(false));
        assert_eq!(read("").unwrap().archive, None);
        assert!(read("includeTasks=maybe").unwrap_err().contains("maybe"));
    }
}
