//! Workflow search (`GET /api/workflow/search`): Conductor's query subset over the
//! current run of each workflow, newest first.
//!
//! The query is clauses joined by `AND`: `status IN (A, B)`, `status = A`,
//! `workflowType = x` (or `IN`), `workflowId = x`, `correlationId = x`, and
//! `startTime > | >= | < | <= <epoch ms>`. Values may be quoted ('…' or "…"). Free text
//! matches the workflow id or the correlation id exactly, or by prefix when it ends in
//! `*`; `*` alone matches everything. Every filter is served by a partial index of
//! migration 0007 whose order is the answer's order, so a page costs its size.

use chrono::{DateTime, TimeZone, Utc};

use super::reads::RunView;
use crate::Result;

/// `totalHits` counts at most this many matches (as Elasticsearch's default
/// `track_total_hits` does): an exact count over millions of runs would cost a scan.
pub const MAX_COUNTED_HITS: i64 = 10_000;

/// A query the subset does not support; the message says what and where.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct BadQuery(pub String);

/// One clause of a parsed query.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// `status IN (…)` / `status = …`.
    Status(Vec<String>),
    /// `workflowType IN (…)` / `workflowType = …`.
    WorkflowType(Vec<String>),
    /// `workflowId = …`.
    WorkflowId(Vec<String>),
    /// `correlationId = …`.
    CorrelationId(Vec<String>),
    /// `startTime <op> <epoch ms>`; op is one of `>`, `>=`, `<`, `<=`.
    StartTime(&'static str, DateTime<Utc>),
}

/// A search request.
#[derive(Debug, Clone, Default)]
pub struct Search {
    /// Clauses, all of which must hold.
    pub filters: Vec<Filter>,
    /// Free text (see the module doc); `None` or `*`: no free-text filter.
    pub free_text: Option<String>,
    /// Matches skipped.
    pub start: i64,
    /// Matches returned at most.
    pub size: i64,
}

/// Parses Conductor's query subset; an empty query has no filters.
pub fn parse_query(query: &str) -> Result<Vec<Filter>, BadQuery> {
    let tokens = tokenize(query)?;
    let mut filters = Vec::new();
    let mut it = tokens.into_iter().peekable();
    while it.peek().is_some() {
        let field = it.next().unwrap_or_default();
        let op = it
            .next()
            .ok_or_else(|| BadQuery(format!("{field:?} needs an operator and a value")))?;
        let values = if op.eq_ignore_ascii_case("IN") {
            if it.next().as_deref() != Some("(") {
                return Err(BadQuery(format!("{field} IN needs a list: (A, B)")));
            }
            let mut values = Vec::new();
            loop {
                match it.next() {
                    Some(t) if t == ")" => break,
                    Some(t) if t == "," => continue,
                    Some(t) => values.push(unquote(&t)),
                    None => return Err(BadQuery(format!("{field} IN (…: missing ')'"))),
                }
            }
            if values.is_empty() {
                return Err(BadQuery(format!("{field} IN (): the list is empty")));
            }
            values
        } else {
            let v = it
                .next()
                .ok_or_else(|| BadQuery(format!("{field} {op}: missing value")))?;
            vec![unquote(&v)]
        };
        filters.push(filter(&field, &op, values)?);
        match it.next() {
            None => break,
            Some(t) if t.eq_ignore_ascii_case("AND") => {}
            Some(t) => return Err(BadQuery(format!("expected AND, found {t:?}"))),
        }
        if it.peek().is_none() {
            return Err(BadQuery("the query ends with AND".into()));
        }
    }
    Ok(filters)
}

fn filter(field: &str, op: &str, values: Vec<String>) -> Result<Filter, BadQuery> {
    let is_list = op.eq_ignore_ascii_case("IN") || op == "=";
    match field {
        "status" | "workflowType" | "workflowId" | "correlationId" if !is_list => {
            Err(BadQuery(format!("{field} supports = and IN, not {op:?}")))
        }
        "status" => Ok(Filter::Status(values)),
        "workflowType" => Ok(Filter::WorkflowType(values)),
        "workflowId" => Ok(Filter::WorkflowId(values)),
        "correlationId" => Ok(Filter::CorrelationId(values)),
        "startTime" => {
            let op = match op {
                ">" => ">",
                ">=" => ">=",
                "<" => "<",
                "<=" => "<=",
                _ => {
                    return Err(BadQuery(format!(
                        "startTime supports > >= < <=, not {op:?}"
                    )))
                }
            };
            let raw = values.first().map(String::as_str).unwrap_or_default();
            let at = raw
                .parse::<i64>()
                .ok()
                .and_then(|ms| Utc.timestamp_millis_opt(ms).single())
                .ok_or_else(|| BadQuery(format!("startTime: {raw:?} is not epoch milliseconds")))?;
            Ok(Filter::StartTime(op, at))
        }
        other => Err(BadQuery(format!(
            "unknown field {other:?} (status, workflowType, workflowId, correlationId, startTime)"
        ))),
    }
}

/// Words, quoted strings, and the symbols `( ) , = > >= < <=`.
fn tokenize(query: &str) -> Result<Vec<String>, BadQuery> {
    let mut tokens = Vec::new();
    let mut chars = query.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '(' | ')' | ',' | '=' => {
                tokens.push(c.to_string());
                chars.next();
            }
            '<' | '>' => {
                chars.next();
                if chars.peek() == Some(&'=') {
                    chars.next();
                    tokens.push(format!("{c}="));
                } else {
                    tokens.push(c.to_string());
                }
            }
            '\'' | '"' => {
                chars.next();
                let mut s = String::from(c);
                loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some(x) => s.push(x),
                        None => return Err(BadQuery("unterminated quote".into())),
                    }
                }
                s.push(c);
                tokens.push(s);
            }
            _ => {
                let mut word = String::new();
                while let Some(&x) = chars.peek() {
                    if x.is_whitespace() || "(),=<>'\"".contains(x) {
                        break;
                    }
                    word.push(x);
                    chars.next();
                }
                tokens.push(word);
            }
        }
    }
    Ok(tokens)
}

fn unquote(t: &str) -> String {
    let quoted = t.len() >= 2
        && ((t.starts_with('\'') && t.ends_with('\'')) || (t.starts_with('"') && t.ends_with('"')));
    if quoted {
        t[1..t.len() - 1].to_owned()
    } else {
        t.to_owned()
    }
}

/// One match: the run and its payload sizes.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SearchHit {
    /// The run.
    #[sqlx(flatten)]
    pub run: RunView,
    /// Input size (JSON text bytes).
    pub input_bytes: Option<i32>,
    /// Output size (JSON text bytes).
    pub output_bytes: Option<i32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_conductor_subset() {
        let f = parse_query(
            "status IN (RUNNING, 'FAILED') AND workflowType = \"orders\" AND startTime > 1000 \
             and startTime<=2000",
        )
        .unwrap();
        assert_eq!(f.len(), 4);
        assert_eq!(
            f[0],
            Filter::Status(vec!["RUNNING".into(), "FAILED".into()])
        );
        assert_eq!(f[1], Filter::WorkflowType(vec!["orders".into()]));
        assert!(matches!(f[2], Filter::StartTime(">", _)));
        assert!(matches!(f[3], Filter::StartTime("<=", _)));
        assert!(parse_query("  ").unwrap().is_empty());
    }

    #[test]
    fn refuses_what_it_does_not_support() {
        for bad in [
            "status",
            "status IN RUNNING",
            "status IN (RUNNING",
            "status IN ()",
            "color = red",
            "startTime > yesterday",
            "startTime = 5",
            "status > A",
            "status = A OR status = B",
            "status = A AND",
            "workflowId = 'open",
        ] {
            assert!(parse_query(bad).is_err(), "{bad}");
        }
    }
}
