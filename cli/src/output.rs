//! How the gateway's documents read on a terminal: pure functions from JSON to text, so
//! that every shape is unit-tested without a gateway.
//!
//! Times are shown in UTC (`2025-01-31 12:00:01.234Z`); durations in ms, s, min or h.

use chrono::{DateTime, Utc};
use serde_json::Value;

/// Workflow statuses after which nothing changes any more.
pub const TERMINAL: [&str; 4] = ["COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED"];

/// A string field, or `-` when absent or empty.
fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field].as_str().filter(|s| !s.is_empty()).unwrap_or("-")
}

/// An optional string field: absent, null and empty are `None`.
fn opt<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    v[field].as_str().filter(|s| !s.is_empty())
}

/// Epoch milliseconds (0 or absent: unset) as a UTC time.
pub fn time(ms: Option<i64>) -> String {
    ms.filter(|&ms| ms > 0)
        .and_then(DateTime::<Utc>::from_timestamp_millis)
        .map_or_else(
            || "-".to_owned(),
            |t| t.format("%Y-%m-%d %H:%M:%S%.3fZ").to_string(),
        )
}

/// A duration in milliseconds, short: `850 ms`, `3.2 s`, `4 min 5 s`, `2 h 10 min`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..=3_599_999 => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{} h {} min", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// The time between two epoch-millisecond fields, when both are set.
fn elapsed(v: &Value, from: &str, to: &str) -> Option<i64> {
    let (a, b) = (v[from].as_i64()?, v[to].as_i64()?);
    (a > 0 && b > 0).then(|| b - a)
}

/// Compact JSON on one line.
pub fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Pretty JSON.
pub fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// Left-aligned columns, two spaces apart, each row indented by `indent`; trailing
/// spaces trimmed.
pub fn table(rows: &[Vec<String>], indent: &str) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = indent.to_owned();
        for (cell, width) in row.iter().zip(&widths) {
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', width - cell.chars().count() + 2));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A task's reference name, with its loop iteration when it has one (`body#2`; the
/// gateway names a loop task as Conductor does, `body__2`).
pub fn task_label(task: &Value) -> String {
    let reference = text(task, "referenceTaskName");
    match task["iteration"].as_i64() {
        Some(i) if i > 0 => {
            let suffix = format!("__{i}");
            let plain = reference.strip_suffix(&suffix).unwrap_or(reference);
            format!("{plain}#{i}")
        }
        _ => reference.to_owned(),
    }
}

/// One line of `run --wait` progress: a task and the status it just reached.
pub fn progress_line(task: &Value) -> String {
    let status = text(task, "status");
    let mut line = format!(
        "  {status:<11} {} ({})",
        task_label(task),
        text(task, "taskDefName")
    );
    if let Some(ms) = elapsed(task, "startTime", "endTime").filter(|_| status != "IN_PROGRESS") {
        line.push_str(&format!(" in {}", duration(ms)));
    }
    if let Some(reason) = opt(task, "reasonForIncompletion") {
        line.push_str(&format!(": {reason}"));
    }
    line
}

/// The status line: `COMPLETED` or `RUNNING (QUEUING)` when the sub-status says more.
pub fn status_line(wf: &Value) -> String {
    let status = text(wf, "status");
    match opt(wf, "subStatus") {
        Some(sub) if sub != status => format!("{status} (subStatus {sub})"),
        _ => status.to_owned(),
    }
}

/// The end of a followed run: `COMPLETED in 1.2 s` (and the reason), then the output.
pub fn final_report(wf: &Value) -> String {
    let mut out = text(wf, "status").to_owned();
    if let Some(ms) = elapsed(wf, "startTime", "endTime") {
        out.push_str(&format!(" in {}", duration(ms)));
    }
    if let Some(reason) = opt(wf, "reasonForIncompletion") {
        out.push_str(&format!(": {reason}"));
    }
    out.push('\n');
    if let Some(failed) = failed_refs(wf) {
        out.push_str(&format!("failed tasks: {failed}\n"));
    }
    out.push_str(&format!("output: {}\n", pretty(&wf["output"])));
    out
}

fn failed_refs(wf: &Value) -> Option<String> {
    let refs: Vec<&str> = wf["failedReferenceTaskNames"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    (!refs.is_empty()).then(|| refs.join(", "))
}

/// `weft get`: a run's summary.
pub fn workflow_summary(wf: &Value) -> String {
    let mut fields: Vec<Vec<String>> = vec![
        vec!["workflow".into(), text(wf, "workflowId").into()],
        vec![
            "definition".into(),
            format!(
                "{} version {}",
                text(wf, "workflowName"),
                wf["workflowVersion"].as_i64().unwrap_or(0)
            ),
        ],
        vec!["status".into(), status_line(wf)],
    ];
    if let Some(run) = opt(wf, "runId") {
        fields.push(vec!["run".into(), run.into()]);
    }
    for (label, field) in [
        ("correlation", "correlationId"),
        ("parent", "parentWorkflowId"),
    ] {
        if let Some(v) = opt(wf, field) {
            fields.push(vec![label.into(), v.into()]);
        }
    }
    fields.push(vec!["started".into(), time(wf["startTime"].as_i64())]);
    if let Some(ms) = elapsed(wf, "startTime", "endTime") {
        fields.push(vec![
            "ended".into(),
            format!("{} (took {})", time(wf["endTime"].as_i64()), duration(ms)),
        ]);
    }
    if let Some(reason) = opt(wf, "reasonForIncompletion") {
        fields.push(vec!["reason".into(), reason.into()]);
    }
    if let Some(failed) = failed_refs(wf) {
        fields.push(vec!["failed".into(), failed]);
    }
    fields.push(vec!["input".into(), compact(&wf["input"])]);
    if TERMINAL.contains(&text(wf, "status")) || !is_empty_object(&wf["output"]) {
        fields.push(vec!["output".into(), compact(&wf["output"])]);
    }
    let tasks = wf["tasks"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    if tasks.is_empty() {
        fields.push(vec!["tasks".into(), "none yet".into()]);
        return table(&fields, "");
    }
    fields.push(vec!["tasks".into()]);
    let mut out = table(&fields, "");
    out.push_str(&tasks_table(tasks));
    out
}

fn is_empty_object(v: &Value) -> bool {
    v.is_null() || v.as_object().is_some_and(serde_json::Map::is_empty)
}

/// The tasks of a run, one row each, in schedule order.
pub fn tasks_table(tasks: &[Value]) -> String {
    let mut rows = vec![vec![
        "REF".to_owned(),
        "NAME".into(),
        "TYPE".into(),
        "STATUS".into(),
        "ATTEMPT".into(),
        "TOOK".into(),
        "REASON".into(),
    ]];
    for t in tasks {
        rows.push(vec![
            task_label(t),
            text(t, "taskDefName").into(),
            text(t, "taskType").into(),
            text(t, "status").into(),
            (t["retryCount"].as_i64().unwrap_or(0) + 1).to_string(),
            elapsed(t, "startTime", "endTime").map_or_else(|| "-".into(), duration),
            opt(t, "reasonForIncompletion").unwrap_or("").into(),
        ]);
    }
    table(&rows, "  ")
}

/// `weft def list`: one row per definition version.
pub fn definitions_table(defs: &[Value]) -> String {
    if defs.is_empty() {
        return "no workflow definitions registered\n".to_owned();
    }
    let mut sorted: Vec<&Value> = defs.iter().collect();
    sorted.sort_by(|a, b| {
        (text(a, "name"), a["version"].as_i64()).cmp(&(text(b, "name"), b["version"].as_i64()))
    });
    let mut rows = vec![vec![
        "NAME".to_owned(),
        "VERSION".into(),
        "TASKS".into(),
        "DESCRIPTION".into(),
    ]];
    for d in sorted {
        rows.push(vec![
            text(d, "name").into(),
            d["version"].as_i64().unwrap_or(1).to_string(),
            d["tasks"].as_array().map_or(0, Vec::len).to_string(),
            opt(d, "description").unwrap_or("").into(),
        ]);
    }
    table(&rows, "")
}

/// `weft event list`: one row per handler.
pub fn event_handlers_table(handlers: &[Value]) -> String {
    if handlers.is_empty() {
        return "no event handlers registered\n".to_owned();
    }
    let mut rows = vec![vec![
        "NAME".to_owned(),
        "EVENT".into(),
        "ACTIVE".into(),
        "ACTIONS".into(),
    ]];
    for h in handlers {
        let actions: Vec<&str> = h["actions"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
            .iter()
            .map(|a| text(a, "action"))
            .collect();
        rows.push(vec![
            text(h, "name").into(),
            text(h, "event").into(),
            h["active"].as_bool().unwrap_or(false).to_string(),
            actions.join(", "),
        ]);
    }
    table(&rows, "")
}

/// `weft event executions`: one row per execution, newest first.
pub fn event_executions_table(executions: &[Value]) -> String {
    if executions.is_empty() {
        return "no executions recorded\n".to_owned();
    }
    let mut rows = vec![vec![
        "TIME".to_owned(),
        "MESSAGE".into(),
        "ACTION".into(),
        "STATUS".into(),
        "OUTPUT".into(),
    ]];
    for e in executions {
        rows.push(vec![
            time(e["created"].as_i64()),
            text(e, "messageId").into(),
            text(e, "action").into(),
            text(e, "status").into(),
            compact(&e["output"]),
        ]);
    }
    table(&rows, "")
}

/// A token's scopes (`read, start`) from the gateway's document.
fn scopes_of(token: &Value) -> Vec<&str> {
    token["scopes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// The task types a token's `work` scope is limited to: `greet, shout`, `any` when it
/// has `work` without a limit, `-` when it cannot work at all.
fn task_types_of(token: &Value) -> String {
    let types: Vec<&str> = token["taskTypes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let scopes = scopes_of(token);
    match types.is_empty() {
        false => types.join(", "),
        true if scopes.contains(&"work") || scopes.contains(&"admin") => "any".to_owned(),
        true => "-".to_owned(),
    }
}

/// When a token expires: `never`, the time, and `(expired)` once `now_ms` is past it.
fn expiry(token: &Value, now_ms: i64) -> String {
    match token["expiresAt"].as_i64().filter(|&ms| ms > 0) {
        None => "never".to_owned(),
        Some(ms) if ms <= now_ms => format!("{} (expired)", time(Some(ms))),
        Some(ms) => time(Some(ms)),
    }
}

/// `weft token create`: what the token allows, the token itself on a line of its own
/// (easy to select and copy), and how to keep and use it, since it is never shown again.
pub fn token_created(token: &Value, secret: &str, now_ms: i64) -> String {
    let mut out = format!(
        "created token {}: scopes {}; ",
        text(token, "name"),
        scopes_of(token).join(", ")
    );
    // Task types only matter to a token that can work.
    match task_types_of(token).as_str() {
        "-" => {}
        types => out.push_str(&format!("task types {types}; ")),
    }
    out.push_str(&format!("expires {}\n\n", expiry(token, now_ms)));
    out.push_str(&format!("    {secret}\n\n"));
    out.push_str(
        "Store it now (e.g. in a secret store): it is not shown again. Use it with \
         --token or WEFT_TOKEN;\nHTTP clients send it as `Authorization: Bearer <token>`.\n",
    );
    out
}

/// `weft token list`: one row per token, by name (the gateway never answers secrets).
pub fn tokens_table(tokens: &[Value], now_ms: i64) -> String {
    if tokens.is_empty() {
        return "no tokens\n".to_owned();
    }
    let mut sorted: Vec<&Value> = tokens.iter().collect();
    sorted.sort_by_key(|t| text(t, "name"));
    let mut rows = vec![vec![
        "NAME".to_owned(),
        "SCOPES".into(),
        "TASK TYPES".into(),
        "CREATED".into(),
        "EXPIRES".into(),
    ]];
    for t in sorted {
        rows.push(vec![
            text(t, "name").into(),
            scopes_of(t).join(","),
            task_types_of(t),
            time(t["createdAt"].as_i64()),
            expiry(t, now_ms),
        ]);
    }
    table(&rows, "")
}

/// `weft audit`: the gateway's audit rows, newest first, as a table.
pub fn audit_table(rows: &[Value]) -> String {
    if rows.is_empty() {
        return "no audit rows\n".to_owned();
    }
    let mut table_rows = vec![vec![
        "TIME".to_owned(),
        "TOKEN".into(),
        "ACTION".into(),
        "TARGET".into(),
        "STATUS".into(),
        "REASON".into(),
    ]];
    for r in rows {
        table_rows.push(vec![
            time(r["at"].as_i64()),
            r["token"].as_str().unwrap_or("-").to_owned(),
            text(r, "action").to_owned(),
            r["target"].as_str().unwrap_or("-").to_owned(),
            r["status"]
                .as_i64()
                .map_or_else(|| "-".to_owned(), |s| s.to_string()),
            r["reason"].as_str().unwrap_or("").to_owned(),
        ]);
    }
    table(&table_rows, "")
}

/// `weft search`: Conductor's `{totalHits, results: [WorkflowSummary]}` as a table.
pub fn search_table(result: &Value, start: u32) -> String {
    let hits = result["results"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let total = result["totalHits"].as_i64().unwrap_or(hits.len() as i64);
    if hits.is_empty() {
        return format!("no runs found ({total} in all)\n");
    }
    let mut rows = vec![vec![
        "WORKFLOW ID".to_owned(),
        "NAME".into(),
        "VERSION".into(),
        "STATUS".into(),
        "STARTED".into(),
        "TOOK".into(),
    ]];
    for h in hits {
        let took = h["executionTime"]
            .as_i64()
            .filter(|&ms| ms > 0)
            .map_or_else(|| "-".into(), duration);
        rows.push(vec![
            text(h, "workflowId").into(),
            text(h, "workflowType").into(),
            h["version"].as_i64().unwrap_or(0).to_string(),
            text(h, "status").into(),
            iso_time(text(h, "startTime")),
            took,
        ]);
    }
    let mut out = table(&rows, "");
    let first = u64::from(start) + 1;
    let last = u64::from(start) + hits.len() as u64;
    out.push_str(&format!("runs {first}-{last} of {total}\n"));
    out
}

/// Conductor's ISO-8601 summary times shown like [`time`].
fn iso_time(raw: &str) -> String {
    DateTime::parse_from_rfc3339(raw)
        .map(|t| time(Some(t.timestamp_millis())))
        .unwrap_or_else(|_| raw.to_owned())
}

/// `weft history`: one line per event: id, time, type and its attributes.
pub fn history_lines(events: &[Value]) -> String {
    if events.is_empty() {
        return "no events yet\n".to_owned();
    }
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                e["eventId"].as_i64().unwrap_or(0).to_string(),
                time(e["time"].as_i64()),
                text(e, "type").into(),
                attributes(&e["attributes"]),
            ]
        })
        .collect();
    table(&rows, "")
}

/// An event's attributes on one line, cut at 160 characters.
fn attributes(v: &Value) -> String {
    if is_empty_object(v) {
        return String::new();
    }
    let line = compact(v);
    match line.char_indices().nth(160) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const T0: i64 = 1_735_732_800_000; // 2025-01-01 12:00:00Z

    fn task(reference: &str, name: &str, status: &str, iteration: i64) -> Value {
        json!({"taskId": format!("id-{reference}-{iteration}"), "referenceTaskName": reference,
               "taskDefName": name, "taskType": "SIMPLE", "status": status,
               "iteration": iteration, "retryCount": 0,
               "startTime": T0, "endTime": if status == "IN_PROGRESS" { 0 } else { T0 + 42 }})
    }

    #[test]
    fn times_and_durations_read_short() {
        assert_eq!(time(Some(T0 + 7)), "2025-01-01 12:00:00.007Z");
        assert_eq!(time(Some(0)), "-");
        assert_eq!(time(None), "-");
        assert_eq!(duration(42), "42 ms");
        assert_eq!(duration(3_250), "3.2 s");
        assert_eq!(duration(245_000), "4 min 5 s");
        assert_eq!(duration(7_800_000), "2 h 10 min");
    }

    #[test]
    fn tokens_read_as_a_table_by_name_with_their_expiry() {
        let tokens = json!([
            {"name": "worker", "scopes": ["work"], "taskTypes": ["greet", "shout"],
             "createdAt": T0, "expiresAt": T0 + 3_600_000},
            {"name": "ci", "scopes": ["read", "start"], "taskTypes": [],
             "createdAt": T0, "expiresAt": null},
            {"name": "old", "scopes": ["work"], "createdAt": T0, "expiresAt": T0 + 1}]);
        let now = T0 + 60_000;
        assert_eq!(
            tokens_table(tokens.as_array().unwrap(), now),
            "NAME    SCOPES      TASK TYPES    CREATED                   EXPIRES\n\
             ci      read,start  -             2025-01-01 12:00:00.000Z  never\n\
             old     work        any           2025-01-01 12:00:00.000Z  2025-01-01 12:00:00.001Z (expired)\n\
             worker  work        greet, shout  2025-01-01 12:00:00.000Z  2025-01-01 13:00:00.000Z\n"
        );
        assert_eq!(tokens_table(&[], now), "no tokens\n");
    }

    #[test]
    fn a_created_token_is_shown_on_its_own_line_with_how_to_keep_it() {
        let token = json!({"name": "ci", "scopes": ["read", "start"], "taskTypes": [],
            "createdAt": T0, "expiresAt": T0 + 86_400_000, "token": "weft_abc"});
        let text = token_created(&token, "weft_abc", T0);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "created token ci: scopes read, start; expires 2025-01-02 12:00:00.000Z"
        );
        assert_eq!(lines[1..4], ["", "    weft_abc", ""]);
        assert!(lines[4].starts_with("Store it now"), "{text}");
        assert!(text.contains("it is not shown again"), "{text}");
        assert!(text.contains("--token or WEFT_TOKEN"), "{text}");
        assert_eq!(
            text.matches("weft_abc").count(),
            1,
            "the secret is printed once: {text}"
        );

        let worker = json!({"name": "w", "scopes": ["work"], "taskTypes": ["greet"],
            "createdAt": T0, "expiresAt": null, "token": "weft_w"});
        assert!(
            token_created(&worker, "weft_w", T0)
                .starts_with("created token w: scopes work; task types greet; expires never\n"),
            "{}",
            token_created(&worker, "weft_w", T0)
        );
    }

    #[test]
    fn event_handlers_and_their_executions_read_as_tables() {
        let handlers = json!([{"name": "paid", "event": "amqp:pay", "active": true,
            "actions": [{"action": "complete_task"}, {"action": "start_workflow"}]}]);
        assert_eq!(
            event_handlers_table(handlers.as_array().unwrap()),
            "NAME  EVENT     ACTIVE  ACTIONS\npaid  amqp:pay  true    complete_task, start_workflow\n"
        );
        let executions = json!([{"created": 1_700_000_000_000i64, "messageId": "m-1",
            "action": null, "status": "SKIPPED", "output": {"msg": "no"}}]);
        let text = event_executions_table(executions.as_array().unwrap());
        assert!(
            text.contains("2023-11-14 22:13:20.000Z  m-1      -       SKIPPED  {\"msg\":\"no\"}"),
            "{text}"
        );
        assert_eq!(event_handlers_table(&[]), "no event handlers registered\n");
    }

    #[test]
    fn tables_align_columns() {
        let rows = vec![
            vec!["A".to_owned(), "long cell".into(), "x".into()],
            vec!["bbb".to_owned(), "c".into(), String::new()],
        ];
        assert_eq!(table(&rows, "  "), "  A    long cell  x\n  bbb  c\n");
    }

    #[test]
    fn progress_lines_name_the_task_its_status_and_time() {
        assert_eq!(
            progress_line(&task("n", "make_name", "COMPLETED", 0)),
            "  COMPLETED   n (make_name) in 42 ms"
        );
        assert_eq!(
            progress_line(&task("body", "count", "IN_PROGRESS", 2)),
            "  IN_PROGRESS body#2 (count)"
        );
        assert_eq!(
            progress_line(&task("body__2", "count", "IN_PROGRESS", 2)),
            "  IN_PROGRESS body#2 (count)",
            "the gateway's Conductor name of a loop task"
        );
        let mut failed = task("s", "shout", "FAILED", 0);
        failed["reasonForIncompletion"] = json!("boom");
        assert_eq!(
            progress_line(&failed),
            "  FAILED      s (shout) in 42 ms: boom"
        );
    }

    #[test]
    fn the_final_report_gives_status_time_reason_and_output() {
        let wf = json!({"status": "FAILED", "startTime": T0, "endTime": T0 + 1_500,
                        "reasonForIncompletion": "task s failed: boom",
                        "failedReferenceTaskNames": ["s"], "output": {}});
        assert_eq!(
            final_report(&wf),
            "FAILED in 1.5 s: task s failed: boom\nfailed tasks: s\noutput: {}\n"
        );
        let wf = json!({"status": "COMPLETED", "startTime": T0, "endTime": T0 + 20,
                        "output": {"result": "ADA WEFT x3"}});
        assert_eq!(
            final_report(&wf),
            "COMPLETED in 20 ms\noutput: {\n  \"result\": \"ADA WEFT x3\"\n}\n"
        );
    }

    #[test]
    fn a_workflow_summary_shows_status_tasks_and_reason() {
        let wf = json!({
            "workflowId": "wf-1", "workflowName": "greet", "workflowVersion": 1,
            "status": "TERMINATED", "subStatus": "TERMINATED", "runId": "r-1",
            "correlationId": "order-7", "startTime": T0, "endTime": T0 + 2_000,
            "reasonForIncompletion": "stopped by ops", "input": {"first": "Ada"},
            "output": {}, "failedReferenceTaskNames": [],
            "tasks": [task("n", "make_name", "COMPLETED", 0), task("s", "shout", "CANCELED", 0)]
        });
        let expected = "\
workflow     wf-1
definition   greet version 1
status       TERMINATED
run          r-1
correlation  order-7
started      2025-01-01 12:00:00.000Z
ended        2025-01-01 12:00:02.000Z (took 2.0 s)
reason       stopped by ops
input        {\"first\":\"Ada\"}
output       {}
tasks
  REF  NAME       TYPE    STATUS     ATTEMPT  TOOK   REASON
  n    make_name  SIMPLE  COMPLETED  1        42 ms
  s    shout      SIMPLE  CANCELED   1        42 ms
";
        assert_eq!(workflow_summary(&wf), expected);
    }

    #[test]
    fn a_queued_workflow_shows_its_sub_status_and_no_tasks() {
        let wf = json!({"workflowId": "wf-2", "workflowName": "greet", "workflowVersion": 3,
                        "status": "RUNNING", "subStatus": "QUEUING", "startTime": T0,
                        "endTime": 0, "input": {}, "output": {}, "tasks": []});
        let text = workflow_summary(&wf);
        assert!(
            text.contains("status      RUNNING (subStatus QUEUING)\n"),
            "{text}"
        );
        assert!(text.contains("tasks       none yet\n"), "{text}");
        assert!(
            !text.contains("output"),
            "a running run's empty output is not shown: {text}"
        );
        assert!(!text.contains("ended"), "{text}");
    }

    #[test]
    fn definitions_are_listed_by_name_and_version() {
        let defs = [
            json!({"name": "greet", "version": 2, "tasks": [{}, {}]}),
            json!({"name": "approve", "version": 1, "tasks": [{}], "description": "needs ops"}),
            json!({"name": "greet", "version": 1, "tasks": [{}, {}, {}]}),
        ];
        assert_eq!(
            definitions_table(&defs),
            "NAME     VERSION  TASKS  DESCRIPTION\n\
             approve  1        1      needs ops\n\
             greet    1        3\n\
             greet    2        2\n"
        );
        assert_eq!(
            definitions_table(&[]),
            "no workflow definitions registered\n"
        );
    }

    #[test]
    fn search_results_are_a_table_with_a_count() {
        let result = json!({"totalHits": 7, "results": [
            {"workflowId": "wf-1", "workflowType": "greet", "version": 1, "status": "COMPLETED",
             "startTime": "2025-01-01T12:00:00.000Z", "executionTime": 1500}]});
        assert_eq!(
            search_table(&result, 3),
            "WORKFLOW ID  NAME   VERSION  STATUS     STARTED                   TOOK\n\
             wf-1         greet  1        COMPLETED  2025-01-01 12:00:00.000Z  1.5 s\n\
             runs 4-4 of 7\n"
        );
        assert_eq!(
            search_table(&json!({"totalHits": 0, "results": []}), 0),
            "no runs found (0 in all)\n"
        );
    }

    #[test]
    fn history_lines_show_each_event() {
        let events = [
            json!({"eventId": 1, "time": T0, "type": "WorkflowStarted", "attributes": {}}),
            json!({"eventId": 2, "time": T0 + 5, "type": "TaskScheduled",
                   "attributes": {"taskRef": "n"}}),
        ];
        assert_eq!(
            history_lines(&events),
            "1  2025-01-01 12:00:00.000Z  WorkflowStarted\n\
             2  2025-01-01 12:00:00.005Z  TaskScheduled    {\"taskRef\":\"n\"}\n"
        );
        let long = json!({"eventId": 3, "time": T0, "type": "X",
                          "attributes": {"blob": "y".repeat(300)}});
        assert!(history_lines(&[long]).trim_end().ends_with('…'));
    }
}
