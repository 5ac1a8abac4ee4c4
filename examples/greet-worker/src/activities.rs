//! The `greet` workflow's activities, as pure functions of their input.
//!
//! A missing or mistyped input field is a terminal failure naming the field: running the
//! same input again cannot succeed.

use serde_json::{json, Value};
use weft::worker::ActivityError;

/// `make_name`: `{ "first": "Ada" }` → `{ "name": "Ada Weft" }`.
pub fn make_name(input: &Value) -> Result<Value, ActivityError> {
    let first = string_field(input, "first")?;
    Ok(json!({ "name": format!("{first} Weft") }))
}

/// `shout`: `{ "text": "hi" }` → `{ "text": "HI" }`.
pub fn shout(input: &Value) -> Result<Value, ActivityError> {
    let text = string_field(input, "text")?;
    Ok(json!({ "text": text.to_uppercase() }))
}

/// `count`: `{ "text": "HI", "n": 3 }` → `{ "result": "HI x3" }`; `n` may also be a
/// string such as `"3"` (an unresolved-to-number `${...}` parameter arrives that way).
pub fn count(input: &Value) -> Result<Value, ActivityError> {
    let text = string_field(input, "text")?;
    let n = integer_field(input, "n")?;
    Ok(json!({ "result": format!("{text} x{n}") }))
}

/// The longest `slow` sleeps, so a mistyped input cannot hold a slot for hours.
pub const SLOW_MAX_MS: i64 = 60_000;

/// `slow`: `{ "ms": 300 }` → sleeps 300 ms → `{ "began": <ms>, "ended": <ms> }`, the
/// handler's own start and end (Unix ms, this machine's clock). Not part of `greet`: a
/// test activity whose runs can be seen overlapping, or not (the task limits' tests).
pub async fn slow(input: &Value) -> Result<Value, ActivityError> {
    let ms = integer_field(input, "ms")?;
    if !(0..=SLOW_MAX_MS).contains(&ms) {
        return Err(ActivityError::terminal(format!(
            "input `ms` must be 0 to {SLOW_MAX_MS}, got {ms}"
        )));
    }
    let began = unix_ms();
    tokio::time::sleep(std::time::Duration::from_millis(ms.unsigned_abs())).await;
    Ok(json!({ "began": began, "ended": unix_ms() }))
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn field<'a>(input: &'a Value, name: &str) -> Result<&'a Value, ActivityError> {
    match input.get(name) {
        None | Some(Value::Null) => Err(ActivityError::terminal(format!(
            "input `{name}` is missing"
        ))),
        Some(v) => Ok(v),
    }
}

fn string_field<'a>(input: &'a Value, name: &str) -> Result<&'a str, ActivityError> {
    let v = field(input, name)?;
    v.as_str()
        .ok_or_else(|| ActivityError::terminal(format!("input `{name}` must be a string, got {v}")))
}

fn integer_field(input: &Value, name: &str) -> Result<i64, ActivityError> {
    let v = field(input, name)?;
    let n = match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    n.ok_or_else(|| ActivityError::terminal(format!("input `{name}` must be an integer, got {v}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terminal_reason(r: Result<Value, ActivityError>) -> String {
        let e = r.expect_err("should fail");
        assert!(e.terminal, "{e:?}");
        e.reason
    }

    #[test]
    fn make_name_appends_weft() {
        assert_eq!(
            make_name(&json!({"first": "Ada"})).unwrap(),
            json!({"name": "Ada Weft"})
        );
    }

    #[test]
    fn shout_upper_cases_the_text() {
        assert_eq!(
            shout(&json!({"text": "Ada Weft"})).unwrap(),
            json!({"text": "ADA WEFT"})
        );
    }

    #[test]
    fn count_accepts_a_number_or_a_numeric_string() {
        let expected = json!({"result": "HI x3"});
        assert_eq!(count(&json!({"text": "HI", "n": 3})).unwrap(), expected);
        assert_eq!(count(&json!({"text": "HI", "n": "3"})).unwrap(), expected);
        assert_eq!(count(&json!({"text": "HI", "n": " 3 "})).unwrap(), expected);
    }

    #[tokio::test]
    async fn slow_sleeps_and_reports_when_it_ran() {
        let out = slow(&json!({"ms": 20})).await.unwrap();
        let (began, ended) = (
            out["began"].as_u64().unwrap(),
            out["ended"].as_u64().unwrap(),
        );
        assert!(ended >= began + 20, "{out}");
        assert!(terminal_reason(slow(&json!({"ms": -1})).await).contains("`ms` must be 0 to"));
        assert!(terminal_reason(slow(&json!({})).await).contains("`ms` is missing"));
    }

    #[test]
    fn missing_input_is_terminal_and_names_the_field() {
        assert!(terminal_reason(make_name(&json!({}))).contains("`first` is missing"));
        assert!(terminal_reason(shout(&Value::Null)).contains("`text` is missing"));
        assert!(terminal_reason(count(&json!({"text": "a"}))).contains("`n` is missing"));
        assert!(terminal_reason(make_name(&json!({"first": null}))).contains("`first`"));
    }

    #[test]
    fn mistyped_input_is_terminal_and_names_the_field() {
        assert!(terminal_reason(shout(&json!({"text": 5}))).contains("`text` must be a string"));
        let r = terminal_reason(count(&json!({"text": "a", "n": "three"})));
        assert!(r.contains("`n` must be an integer"), "{r}");
        let r = terminal_reason(count(&json!({"text": "a", "n": 1.5})));
        assert!(r.contains("`n`"), "{r}");
        let r = terminal_reason(count(&json!({"text": ["a"], "n": 1})));
        assert!(r.contains("`text`"), "{r}");
    }
}
