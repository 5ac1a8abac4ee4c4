//! `${...}` parameter expressions, resolved the way Conductor's `ParametersUtils` does.
//!
//! A template is any JSON value. Maps and arrays are walked (keys are never resolved);
//! strings may hold expressions:
//!
//! - a string that is exactly one `${expr}` becomes the value found, keeping its JSON
//!   type (object, number, …), or `null` when nothing is found;
//! - a string with expressions among other text gets each one interpolated: strings as
//!   they are, `null`/missing as `null` (Conductor uses Java's `Objects.toString`), other
//!   values as compact JSON (where Conductor would print a Java `Map.toString`);
//! - `$${` is an escape for a literal `${`;
//! - `${}` (blank) is the empty string, and expressions may nest
//!   (`${workflow.input.${workflow.input.key}}`: the inner one is resolved first and its
//!   text becomes part of the outer path), both as in Conductor.
//!
//! An expression is a JSONPath over the context document the decider builds:
//! `{"workflow": {"input": …, "variables": …, "workflowId": …, "correlationId": …},
//! "<ref>": {"input": …, "output": …}, …}`. Like Conductor's Jayway JsonPath, a path that
//! does not start with `$` is read from the root (`workflow.input.x` is
//! `$.workflow.input.x`). The first segment is a task reference, which may contain
//! characters dot notation cannot hold (`my-ref`), so it is always written in bracket
//! notation; later dot segments that are not valid RFC 9535 member names are bracketed
//! too. A definite path (only names and indices) yields the single value found; any
//! other path (`..`, `*`, filters, slices, unions) yields an array of every match, as
//! Jayway does. An invalid path is "not found", never an error.

use std::panic::{catch_unwind, AssertUnwindSafe};

use jsonpath_rust::parser::model::{JpQuery, Segment, Selector};
use jsonpath_rust::parser::parse_json_path;
use jsonpath_rust::query::js_path_process;
use serde_json::{Map, Value};

/// The root Conductor reserves for the workflow itself (`${workflow.input.x}`).
pub const WORKFLOW_ROOT: &str = "workflow";

/// Conductor's system parameter for the id of the task being scheduled
/// (`${CPEWF_TASK_ID}`). Weft resolves it like any other root: the decider puts the
/// task id under this key of the context.
pub const TASK_ID_VARIABLE: &str = "CPEWF_TASK_ID";

/// Expressions nested deeper than this are left unresolved (`null`/empty). Templates
/// come from users; the bound keeps recursion finite whatever they write.
const MAX_NESTING: usize = 16;

/// One `${...}` occurrence inside a string, and the root it reads from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// The expression as written, with its `${` and `}`.
    pub expression: String,
    /// The first segment of its path: a task reference, `workflow`, or `CPEWF_TASK_ID`.
    pub root: String,
}

/// Resolves every `${...}` in `template` against `context`.
pub fn resolve(template: &Value, context: &Value) -> Value {
    match template {
        Value::String(s) => resolve_str(s, context),
        Value::Array(items) => Value::Array(items.iter().map(|v| resolve(v, context)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), resolve(v, context)))
                .collect::<Map<String, Value>>(),
        ),
        other => other.clone(),
    }
}

/// Resolves the expressions of one string (see the module documentation).
pub fn resolve_str(s: &str, context: &Value) -> Value {
    let pieces = split(s);
    // Conductor returns the value itself only when a single expression spans the whole
    // string; `$${x}` or `a${x}` are always text.
    if let [Piece::Expr(body)] = pieces.as_slice() {
        return evaluate(body, context, 0);
    }
    if !pieces.iter().any(|p| matches!(p, Piece::Expr(_))) {
        return match pieces.as_slice() {
            [] => Value::String(String::new()),
            _ => Value::String(join_literals(&pieces)),
        };
    }
    Value::String(interpolate(&pieces, context, 0))
}

/// Whether `s` contains at least one `${...}` expression (an escaped `$${` is not one).
pub fn has_expression(s: &str) -> bool {
    split(s).iter().any(|p| matches!(p, Piece::Expr(_)))
}

/// The roots (first path segments) of every expression inside `template`, nested ones
/// included, each once, in the order the template is walked (object members in map
/// order). The validator checks them against the
/// task references of the definition.
pub fn references(template: &Value) -> Vec<String> {
    let mut roots: Vec<String> = Vec::new();
    each_string(template, &mut |s| {
        for r in references_in_str(s) {
            if !roots.contains(&r.root) {
                roots.push(r.root);
            }
        }
    });
    roots
}

/// Calls `visit` with every string inside `template`, in the order it is walked.
fn each_string(template: &Value, visit: &mut dyn FnMut(&str)) {
    match template {
        Value::String(s) => visit(s),
        Value::Array(items) => items.iter().for_each(|v| each_string(v, visit)),
        Value::Object(map) => map.values().for_each(|v| each_string(v, visit)),
        _ => {}
    }
}

/// The roots (first path segments) every expression inside `values` reads, nested
/// ones included, each once; `None` when the root of one of them cannot be known
/// before run time (blank, a descendant path `$..x`, a wildcard or filter at the top,
/// a root computed by a nested expression). With `Some`, resolving against a context
/// holding only those roots gives what the whole context gives: the decider builds
/// only that much of a run for each task's input instead of copying every task's data.
pub fn known_roots<'a>(values: impl IntoIterator<Item = &'a Value>) -> Option<Vec<String>> {
    let mut roots: Vec<String> = Vec::new();
    let mut all_known = true;
    for value in values {
        each_string(value, &mut |s| {
            let mut found = Vec::new();
            all_known &= references_rec(s, 0, &mut found);
            for r in found {
                // Only a plain name selects one member of the context; anything else
                // (`*`, a filter, a slice) may read several.
                if r.root
                    .contains(['*', '?', '(', ')', '@', ':', ',', '$', '[', ']'])
                {
                    all_known = false;
                } else if !roots.contains(&r.root) {
                    roots.push(r.root);
                }
            }
        });
    }
    all_known.then_some(roots)
}

/// Every expression inside one string with its root, nested ones included (an outer
/// expression first, then the ones inside it). Expressions whose root cannot be known
/// before run time (blank, or itself computed by a nested expression) are left out.
pub fn references_in_str(s: &str) -> Vec<Reference> {
    let mut out = Vec::new();
    references_rec(s, 0, &mut out);
    out
}

/// [`references_in_str`] from nesting `depth`; `false` when an expression was left out
/// (its root unknown, or nested too deep to be read).
fn references_rec(s: &str, depth: usize, out: &mut Vec<Reference>) -> bool {
    if depth > MAX_NESTING {
        return false;
    }
    let mut all_known = true;
    for piece in split(s) {
        if let Piece::Expr(body) = piece {
            match root(&body) {
                Some(root) => out.push(Reference {
                    expression: format!("${{{body}}}"),
                    root,
                }),
                None => all_known = false,
            }
            all_known &= references_rec(&body, depth + 1, out);
        }
    }
    all_known
}

/// The first segment of one expression body (the text between `${` and `}`):
/// `t1` for `t1.output.a[0]`, `my-ref` for `my-ref.output` or `$['my-ref'].output`.
/// `None` when blank, when the path starts with a descendant segment (`$..x`), or when
/// the root is computed by a nested expression.
pub fn root(expression: &str) -> Option<String> {
    let e = expression.trim();
    let rest = match e.strip_prefix('$') {
        Some(after) if after.starts_with("..") => return None,
        Some(after) => after.strip_prefix('.').unwrap_or(after),
        None => e,
    };
    let root = if rest.starts_with('[') {
        let (name, _) = bracket_name(rest)?;
        name
    } else {
        let end = rest.find(['.', '[']).unwrap_or(rest.len());
        rest[..end].trim().to_owned()
    };
    if root.is_empty() || root.contains("${") || root.contains('}') {
        return None;
    }
    Some(root)
}

/// Reads a leading `['name']` / `["name"]`: the name, and the text after it.
fn bracket_name(s: &str) -> Option<(String, &str)> {
    let inner = s.strip_prefix('[')?.trim_start();
    let quote = inner.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let mut name = String::new();
    let mut chars = inner[1..].char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    name.push(escaped);
                }
            }
            c if c == quote => {
                let after = inner[1 + i + 1..].trim_start();
                return after.strip_prefix(']').map(|rest| (name, rest));
            }
            c => name.push(c),
        }
    }
    None
}

/// Turns an expression body into the JSONPath that is run over the context; `None` when
/// it is blank.
pub fn to_json_path(expression: &str) -> Option<String> {
    let e = expression.trim();
    if e.is_empty() {
        return None;
    }
    if let Some(rest) = e.strip_prefix('$') {
        return Some(format!("${}", normalize_segments(rest)));
    }
    if e.starts_with('[') {
        return Some(format!("${}", normalize_segments(e)));
    }
    let end = e.find(['.', '[']).unwrap_or(e.len());
    let (first, rest) = e.split_at(end);
    Some(format!(
        "$[{}]{}",
        quote_name(first.trim()),
        normalize_segments(rest)
    ))
}

/// Rewrites dot segments whose names RFC 9535 shorthand cannot hold (`.some-key`,
/// `.0abc`) into bracket notation; everything else is kept as written.
fn normalize_segments(rest: &str) -> String {
    let chars: Vec<char> = rest.chars().collect();
    let mut out = String::with_capacity(rest.len() + 8);
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '[' => {
                let end = bracket_end(&chars, i);
                out.extend(&chars[i..end]);
                i = end;
            }
            '.' => {
                let descendant = chars.get(i + 1) == Some(&'.');
                i += if descendant { 2 } else { 1 };
                let start = i;
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                if name.is_empty() || name == "*" || is_shorthand(&name) {
                    // `a.['b']` (a dot before a bracket) is not RFC 9535: drop the dot.
                    let before_bracket = name.is_empty() && chars.get(i) == Some(&'[');
                    if descendant {
                        out.push_str("..");
                    } else if !before_bracket {
                        out.push('.');
                    }
                    out.push_str(&name);
                } else {
                    if descendant {
                        out.push_str("..");
                    }
                    out.push('[');
                    out.push_str(&quote_name(&name));
                    out.push(']');
                }
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The index just past the `]` closing the bracket opened at `start` (quotes and nested
/// brackets of filters are skipped); the end of input when it is never closed.
fn bracket_end(chars: &[char], start: usize) -> usize {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut i = start;
    while i < chars.len() {
        let c = chars[i];
        match quote {
            Some(q) => {
                if c == '\\' {
                    i += 1;
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '\'' | '"' => quote = Some(c),
                '[' => depth += 1,
                ']' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return i + 1;
                    }
                }
                _ => {}
            },
        }
        i += 1;
    }
    chars.len()
}

/// Whether `name` is an RFC 9535 `member-name-shorthand`.
fn is_shorthand(name: &str) -> bool {
    let mut chars = name.chars();
    let first_ok = |c: char| c.is_ascii_alphabetic() || c == '_' || !c.is_ascii();
    match chars.next() {
        Some(c) if first_ok(c) => chars.all(|c| first_ok(c) || c.is_ascii_digit()),
        _ => false,
    }
}

/// A single-quoted JSONPath name literal.
fn quote_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('\'');
    for c in name.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Runs one expression body against the context.
fn evaluate(body: &str, context: &Value, depth: usize) -> Value {
    if depth > MAX_NESTING {
        return Value::Null;
    }
    // A nested `${...}` is resolved to text first, and that text is the path.
    let path_text = if has_expression(body) {
        interpolate(&split(body), context, depth + 1)
    } else {
        body.to_owned()
    };
    if path_text.trim().is_empty() {
        return Value::String(String::new());
    }
    if let Some(found) = member_path(&path_text, context) {
        return found;
    }
    match to_json_path(&path_text) {
        Some(path) => query(&path, context),
        None => Value::Null,
    }
}

/// The value at `path` when it is only member names joined by dots
/// (`workflow.input.name`, `my-ref.output.result`): what the JSONPath query would find,
/// read without parsing one (most expressions are such paths, and the decider resolves
/// every input of every task it schedules). `None` for any other path: indices, `$`,
/// brackets, wildcards, descendants, blanks.
fn member_path(path: &str, context: &Value) -> Option<Value> {
    let path = path.trim();
    let simple = |name: &str| {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    if !path.split('.').all(simple) {
        return None;
    }
    let mut at = context;
    for name in path.split('.') {
        match at.get(name) {
            Some(next) => at = next,
            None => return Some(Value::Null),
        }
    }
    Some(at.clone())
}

/// Runs a JSONPath; `null` when the path is invalid or matches nothing (definite paths),
/// an array of every match otherwise.
fn query(path: &str, context: &Value) -> Value {
    let Ok(parsed) = parse_json_path(path) else {
        return Value::Null;
    };
    let definite = is_definite(&parsed);
    // The path comes from a user's definition and the query engine is a third-party
    // crate: a panic in it must not take the decider down, so it is contained here.
    let found = catch_unwind(AssertUnwindSafe(|| {
        js_path_process(&parsed, context).map(|refs| {
            refs.into_iter()
                .map(|r| r.val().clone())
                .collect::<Vec<_>>()
        })
    }));
    match found {
        Ok(Ok(values)) if definite => values.into_iter().next().unwrap_or(Value::Null),
        Ok(Ok(values)) => Value::Array(values),
        _ => Value::Null,
    }
}

/// Jayway's "definite path": only single names and indices, so at most one match.
fn is_definite(query: &JpQuery) -> bool {
    query.segments.iter().all(|s| {
        matches!(
            s,
            Segment::Selector(Selector::Name(_)) | Segment::Selector(Selector::Index(_))
        )
    })
}

fn interpolate(pieces: &[Piece], context: &Value, depth: usize) -> String {
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Literal(text) => out.push_str(text),
            Piece::Expr(body) => match evaluate(body, context, depth) {
                Value::String(s) => out.push_str(&s),
                other => out.push_str(&other.to_string()),
            },
        }
    }
    out
}

/// The text of pieces known to hold no expression.
fn join_literals(pieces: &[Piece]) -> String {
    pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Literal(t) => Some(t.as_str()),
            Piece::Expr(_) => None,
        })
        .collect()
}

/// A string cut into literal text and expression bodies.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    Expr(String),
}

/// Cuts `s` into pieces: `$${` becomes a literal `${`, `${` opens an expression that ends
/// at its balancing `}`; an unclosed `${` is literal text.
fn split(s: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        literal.push_str(&rest[..pos]);
        let at = &rest[pos..];
        if let Some(after) = at.strip_prefix("$${") {
            literal.push_str("${");
            rest = after;
        } else if let Some(after) = at.strip_prefix("${") {
            match closing_brace(after) {
                Some(end) => {
                    if !literal.is_empty() {
                        pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                    }
                    pieces.push(Piece::Expr(after[..end].to_owned()));
                    rest = &after[end + 1..];
                }
                None => {
                    literal.push_str(at);
                    rest = "";
                }
            }
        } else {
            literal.push('$');
            rest = &at[1..];
        }
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        pieces.push(Piece::Literal(literal));
    }
    pieces
}

/// The byte offset of the `}` that balances an already opened `${`.
fn closing_brace(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return Some(i),
            '}' => depth -= 1,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx() -> Value {
        json!({
            "workflow": {
                "input": {"first": "Ada", "n": 3, "list": [1, 2, 3], "key": "first",
                          "obj": {"a": 1}, "nothing": null},
                "variables": {"v": true},
                "workflowId": "wf-1",
                "correlationId": null
            },
            "t1": {"input": {}, "output": {"op": 1.5, "items": [{"b": "x"}, {"b": "y"}],
                                            "some-key": "dash", "0abc": "digit"}},
            "my-ref": {"input": {}, "output": {"deep": {"list": [10, 20]}}},
            "loopTask": {"iteration": 2, "output": {"iteration": 2}},
            "CPEWF_TASK_ID": "task-9"
        })
    }

    fn r(template: Value) -> Value {
        resolve(&template, &ctx())
    }

    /// The member-path shortcut finds what the JSONPath query finds, and declines every
    /// path that is not plain member names.
    #[test]
    fn member_paths_read_what_the_json_path_query_reads() {
        let context = ctx();
        for path in [
            "workflow.input.first",
            "workflow.input.n",
            "workflow.input.obj",
            "workflow.input.nothing",
            "workflow.input.absent",
            "workflow.input.first.deeper",
            "workflow.input.list.0",
            "workflow.workflowId",
            "workflow",
            "t1.output.some-key",
            "t1.output.0abc",
            "t1.output.items.b",
            "my-ref.output.deep.list",
            "loopTask.iteration",
            "CPEWF_TASK_ID",
            "unknown.output",
        ] {
            let json_path = to_json_path(path).expect("a path");
            assert_eq!(
                member_path(path, &context),
                Some(query(&json_path, &context)),
                "{path}"
            );
        }
        for path in [
            "$.workflow.input.first",
            "workflow.input.list[0]",
            "t1.output.items[*].b",
            "workflow..first",
            "workflow.input.*",
            "workflow.input.",
            "[\"my-ref\"].output",
            "workflow.input.first name",
        ] {
            assert_eq!(member_path(path, &context), None, "{path}");
        }
    }

    #[test]
    fn whole_string_keeps_the_json_type() {
        assert_eq!(r(json!("${workflow.input.n}")), json!(3));
        assert_eq!(r(json!("${workflow.input.first}")), json!("Ada"));
        assert_eq!(r(json!("${workflow.input.obj}")), json!({"a": 1}));
        assert_eq!(r(json!("${workflow.input.list}")), json!([1, 2, 3]));
        assert_eq!(r(json!("${workflow.variables.v}")), json!(true));
        assert_eq!(r(json!("${t1.output.op}")), json!(1.5));
        assert_eq!(r(json!("${workflow.workflowId}")), json!("wf-1"));
        assert_eq!(r(json!("${workflow.input}"))["n"], json!(3));
    }

    #[test]
    fn missing_is_null() {
        assert_eq!(r(json!("${workflow.input.absent}")), Value::Null);
        assert_eq!(r(json!("${nope.output.x}")), Value::Null);
        assert_eq!(r(json!("${workflow.input.nothing}")), Value::Null);
        assert_eq!(r(json!("${workflow.input.list[7]}")), Value::Null);
    }

    #[test]
    fn embedded_expressions_are_interpolated() {
        assert_eq!(
            r(json!(
                "Hello ${workflow.input.first}, n=${workflow.input.n}!"
            )),
            json!("Hello Ada, n=3!")
        );
        assert_eq!(
            r(json!("${workflow.input.first}${workflow.input.n}")),
            json!("Ada3")
        );
        assert_eq!(r(json!("o=${workflow.input.obj}")), json!("o={\"a\":1}"));
        assert_eq!(r(json!("l=${workflow.input.list}")), json!("l=[1,2,3]"));
        // Conductor prints a missing value with Java's Objects.toString: "null".
        assert_eq!(r(json!("x=${workflow.input.absent}")), json!("x=null"));
        assert_eq!(r(json!(" ${workflow.input.n}")), json!(" 3"));
    }

    #[test]
    fn strings_without_expressions_are_unchanged() {
        for s in ["plain", "", "$", "$.a.b", "cost: $5", "${unclosed", "a}b{"] {
            assert_eq!(r(json!(s)), json!(s), "{s}");
        }
        assert_eq!(r(json!(7)), json!(7));
        assert_eq!(r(Value::Null), Value::Null);
    }

    #[test]
    fn nested_templates_in_arrays_and_maps() {
        let t = json!({
            "a": ["${workflow.input.n}", {"b": "${t1.output.items[1].b}"}, 4, null],
            "${workflow.input.first}": "keys are not resolved",
            "c": {"d": {"e": "n is ${workflow.input.n}"}}
        });
        assert_eq!(
            r(t),
            json!({
                "a": [3, {"b": "y"}, 4, null],
                "${workflow.input.first}": "keys are not resolved",
                "c": {"d": {"e": "n is 3"}}
            })
        );
    }

    #[test]
    fn hyphenated_refs_and_odd_keys() {
        assert_eq!(r(json!("${my-ref.output.deep.list[1]}")), json!(20));
        assert_eq!(r(json!("${t1.output.some-key}")), json!("dash"));
        assert_eq!(r(json!("${t1.output.0abc}")), json!("digit"));
        assert_eq!(r(json!("${t1.output['some-key']}")), json!("dash"));
        assert_eq!(
            to_json_path("my-ref.output.a-b[0].c").as_deref(),
            Some("$['my-ref'].output['a-b'][0].c")
        );
        assert_eq!(to_json_path("x..a-b").as_deref(), Some("$['x']..['a-b']"));
    }

    #[test]
    fn array_indices_wildcards_and_descendants() {
        assert_eq!(r(json!("${t1.output.items[0].b}")), json!("x"));
        assert_eq!(r(json!("${t1.output.items[-1].b}")), json!("y"));
        // Indefinite paths give every match, as Jayway does.
        assert_eq!(r(json!("${t1.output.items[*].b}")), json!(["x", "y"]));
        assert_eq!(r(json!("${t1.output..b}")), json!(["x", "y"]));
        assert_eq!(r(json!("${t1.output.nothing[*]}")), json!([]));
        // Bracket right after the ref, as in Conductor's DO_WHILE samples.
        assert_eq!(r(json!("${loopTask['iteration']}")), json!(2));
        assert_eq!(r(json!("${$.workflow.input.n}")), json!(3));
    }

    #[test]
    fn escape_and_blank() {
        assert_eq!(
            r(json!("$${workflow.input.n}")),
            json!("${workflow.input.n}")
        );
        assert_eq!(
            r(json!("a $${x} b ${workflow.input.n}")),
            json!("a ${x} b 3")
        );
        assert_eq!(r(json!("${}")), json!(""));
        assert_eq!(r(json!("a${ }b")), json!("ab"));
    }

    #[test]
    fn nested_expressions_and_system_parameter() {
        assert_eq!(
            r(json!("${workflow.input.${workflow.input.key}}")),
            json!("Ada")
        );
        assert_eq!(r(json!("${CPEWF_TASK_ID}")), json!("task-9"));
    }

    #[test]
    fn invalid_paths_do_not_panic() {
        for s in [
            "${a..}",
            "${a[}",
            "${a[?(@.x ==]}",
            "${a.b[1:2:0]}",
            "${t1.output.items[-9007199254740991:9007199254740991:-1]}",
            "${t1.output.items[?(@.b == 'x')]}",
            "${$}",
            "${$$}",
            "${..}",
            "${'}",
            "${\\}",
            "${a.length()}",
            "${[}",
            "${]}",
        ] {
            let _ = r(json!(s));
        }
        assert_eq!(r(json!("${a[}")), Value::Null);
    }

    #[test]
    fn references_lists_roots() {
        let t = json!({
            "a": "${t1.output.x} and ${workflow.input.y}",
            "b": ["${my-ref.output}", {"c": "${loopTask['iteration']}"}],
            "d": "${workflow.input.${t2.output.key}}",
            "e": "$${escaped.x} ${} ${$['q'].x} ${CPEWF_TASK_ID}",
            "f": "${t1.output.again}"
        });
        assert_eq!(
            references(&t),
            vec![
                "t1",
                "workflow",
                "my-ref",
                "loopTask",
                "t2",
                "q",
                "CPEWF_TASK_ID"
            ]
        );
        let refs = references_in_str("x ${t1.output.a[0].b} y");
        assert_eq!(
            refs,
            vec![Reference {
                expression: "${t1.output.a[0].b}".into(),
                root: "t1".into()
            }]
        );
        assert_eq!(root("${x}.y"), None);
        assert_eq!(root("$..x"), None);
        assert!(!has_expression("$${x}"));
        assert!(has_expression("a ${x}"));
    }
}
