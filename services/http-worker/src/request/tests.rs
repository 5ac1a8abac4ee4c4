//! Unit tests of [`super::parse`]: every field, its default and its errors.

use serde_json::json;

use super::*;

fn ok(input: Value) -> RequestSpec {
    match parse(&input) {
        Ok(spec) => spec,
        Err(e) => panic!("{input} should parse: {e:?}"),
    }
}

/// The reason of a terminal failure.
fn terminal(input: Value) -> String {
    match parse(&input) {
        Ok(spec) => panic!("{input} should fail, got {spec:?}"),
        Err(e) => {
            assert!(e.terminal, "{e:?}");
            e.reason
        }
    }
}

fn req(fields: Value) -> Value {
    json!({ "http_request": fields })
}

fn header<'a>(spec: &'a RequestSpec, name: &str) -> Vec<&'a str> {
    spec.headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect()
}

#[test]
fn minimal_request_takes_conductor_defaults() {
    let spec = ok(req(json!({"uri": "http://example.test:8080/a?b=1"})));
    assert_eq!(spec.url.as_str(), "http://example.test:8080/a?b=1");
    assert_eq!(spec.method, Method::GET);
    assert_eq!(header(&spec, "accept"), ["application/json"]);
    assert!(
        spec.headers.get(CONTENT_TYPE).is_none(),
        "no body, no content type"
    );
    assert_eq!(spec.body, None);
    assert_eq!(spec.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
    assert_eq!(spec.read_timeout, DEFAULT_READ_TIMEOUT);
}

#[test]
fn flat_fields_at_the_top_level_are_accepted() {
    let spec = ok(json!({"uri": "http://h/x", "method": "post", "body": {"a": 1}}));
    assert_eq!(spec.method, Method::POST);
    assert_eq!(spec.body.as_deref(), Some(&b"{\"a\":1}"[..]));
    let r = terminal(json!({"uri": "http://h", "method": 5}));
    assert!(r.contains("input `method` must be a string"), "{r}");
}

#[test]
fn missing_or_invalid_uri_names_the_field() {
    for input in [
        json!({}),
        Value::Null,
        json!({"method": "GET"}),
        req(json!({})),
        req(json!({"method": "GET", "uri": null})),
        req(json!({"uri": "  "})),
    ] {
        let r = terminal(input.clone());
        assert!(r.contains("`http_request.uri` is missing"), "{input}: {r}");
    }
    let r = terminal(req(json!({"uri": 7})));
    assert!(r.contains("`http_request.uri` must be a string"), "{r}");
    let r = terminal(req(json!({"uri": "not a url"})));
    assert!(r.contains("`http_request.uri` is not a valid URL"), "{r}");
    let r = terminal(req(json!({"uri": "ftp://h/x"})));
    assert!(r.contains("`http_request.uri` has scheme `ftp`"), "{r}");
    let r = terminal(json!({"http_request": "http://h"}));
    assert!(r.contains("`http_request` must be an object"), "{r}");
}

#[test]
fn https_needs_the_feature() {
    let input = req(json!({"uri": "https://h/x"}));
    if cfg!(feature = "https") {
        assert_eq!(ok(input).url.scheme(), "https");
    } else {
        assert!(terminal(input).contains("`https` feature"));
    }
}

#[test]
fn method_is_case_insensitive_and_checked() {
    for m in METHODS {
        let spec = ok(req(json!({"uri": "http://h", "method": m.to_lowercase()})));
        assert_eq!(spec.method.as_str(), m);
    }
    let r = terminal(req(json!({"uri": "http://h", "method": "FETCH"})));
    assert!(
        r.contains("`http_request.method` must be one of GET"),
        "{r}"
    );
    assert!(r.contains("got `FETCH`"), "{r}");
    let r = terminal(req(json!({"uri": "http://h", "method": ["GET"]})));
    assert!(r.contains("`http_request.method` must be a string"), "{r}");
}

#[test]
fn headers_accept_scalars_lists_and_override_the_defaults() {
    let spec = ok(req(json!({
        "uri": "http://h",
        "body": "x",
        "headers": {
            "X-Trace": "abc", "X-Count": 3, "X-Flag": true, "X-Skip": null,
            "X-Many": ["a", "b"], "Accept": "text/plain", "content-type": "text/csv"
        }
    })));
    assert_eq!(header(&spec, "x-trace"), ["abc"]);
    assert_eq!(header(&spec, "x-count"), ["3"]);
    assert_eq!(header(&spec, "x-flag"), ["true"]);
    assert!(spec.headers.get("x-skip").is_none());
    assert_eq!(header(&spec, "x-many"), ["a", "b"]);
    assert_eq!(header(&spec, "accept"), ["text/plain"]);
    assert_eq!(header(&spec, "content-type"), ["text/csv"]);
}

#[test]
fn bad_headers_name_the_header() {
    let r = terminal(req(json!({"uri": "http://h", "headers": ["X-A"]})));
    assert!(
        r.contains("`http_request.headers` must be an object"),
        "{r}"
    );
    let r = terminal(req(
        json!({"uri": "http://h", "headers": {"bad name": "v"}}),
    ));
    assert!(
        r.contains("`http_request.headers.bad name` is not a valid header name"),
        "{r}"
    );
    let r = terminal(req(
        json!({"uri": "http://h", "headers": {"X-A": {"o": 1}}}),
    ));
    assert!(
        r.contains("`http_request.headers.X-A` must be a string"),
        "{r}"
    );
    let r = terminal(req(json!({"uri": "http://h", "headers": {"X-A": "a\nb"}})));
    assert!(
        r.contains("`http_request.headers.X-A` is not a valid header value"),
        "{r}"
    );
}

#[test]
fn accept_and_content_type_are_set_and_checked() {
    let spec = ok(req(json!({
        "uri": "http://h", "accept": "text/html", "contentType": "text/plain", "body": "hi"
    })));
    assert_eq!(header(&spec, "accept"), ["text/html"]);
    assert_eq!(header(&spec, "content-type"), ["text/plain"]);
    let r = terminal(req(json!({"uri": "http://h", "accept": 1})));
    assert!(r.contains("`http_request.accept` must be a string"), "{r}");
    let r = terminal(req(
        json!({"uri": "http://h", "contentType": "a\u{7f}b", "body": 1}),
    ));
    assert!(
        r.contains("`http_request.contentType` is not a valid header value"),
        "{r}"
    );
}

#[test]
fn body_is_json_unless_it_is_a_string() {
    let spec = ok(req(
        json!({"uri": "http://h", "method": "PUT", "body": [1, {"a": null}]}),
    ));
    assert_eq!(spec.body.as_deref(), Some(&b"[1,{\"a\":null}]"[..]));
    assert_eq!(header(&spec, "content-type"), ["application/json"]);
    let spec = ok(req(json!({"uri": "http://h", "body": "a=1&b=2",
        "contentType": "application/x-www-form-urlencoded"})));
    assert_eq!(spec.body.as_deref(), Some(&b"a=1&b=2"[..]));
    let spec = ok(req(json!({"uri": "http://h", "body": "{\"pre\":1}"})));
    assert_eq!(
        spec.body.as_deref(),
        Some(&b"{\"pre\":1}"[..]),
        "a string is sent as is"
    );
    let spec = ok(req(json!({"uri": "http://h", "body": false})));
    assert_eq!(spec.body.as_deref(), Some(&b"false"[..]));
    assert_eq!(ok(req(json!({"uri": "http://h", "body": null}))).body, None);
}

#[test]
fn timeouts_take_numbers_or_strings_clamped_to_the_caps() {
    let spec = ok(req(
        json!({"uri": "http://h", "connectionTimeOut": 250, "readTimeOut": "1500"}),
    ));
    assert_eq!(spec.connect_timeout, Duration::from_millis(250));
    assert_eq!(spec.read_timeout, Duration::from_millis(1500));
    let spec = ok(req(
        json!({"uri": "http://h", "connectionTimeOut": 1e9, "readTimeOut": 0}),
    ));
    assert_eq!(spec.connect_timeout, MAX_CONNECT_TIMEOUT);
    assert_eq!(
        spec.read_timeout, MAX_READ_TIMEOUT,
        "0 (no timeout) is the cap"
    );
    let spec = ok(req(json!({"uri": "http://h", "readTimeOut": 99.9})));
    assert_eq!(spec.read_timeout, Duration::from_millis(99));
}

#[test]
fn bad_timeouts_name_the_field() {
    let r = terminal(req(json!({"uri": "http://h", "connectionTimeOut": -1})));
    assert!(
        r.contains("`http_request.connectionTimeOut` must be a non-negative"),
        "{r}"
    );
    let r = terminal(req(json!({"uri": "http://h", "readTimeOut": "soon"})));
    assert!(
        r.contains("`http_request.readTimeOut` must be a non-negative"),
        "{r}"
    );
    let r = terminal(req(json!({"uri": "http://h", "readTimeOut": [1]})));
    assert!(r.contains("`http_request.readTimeOut`"), "{r}");
}

#[test]
fn unknown_fields_are_ignored() {
    let spec = ok(req(
        json!({"uri": "http://h", "vipAddress": "x", "appName": "y"}),
    ));
    assert_eq!(spec.method, Method::GET);
}
