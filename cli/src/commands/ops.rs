//! Operator operations: terminate, retry, restart, reset, skip, pause, resume, signal.
//!
//! The gateway answers with the decider's verdict (docs/operations.md): applied, or
//! refused (4xx, shown as the gateway's sentence, exit 3). When no decider answers in
//! time the operation is durably queued (202): that is said, and the exit code is 0.

use std::io::Write;

use reqwest::Method;
use serde_json::{json, Map, Value};

use crate::args::{ResetArgs, SignalArgs, SkipArgs, TerminateArgs};
use crate::client::{Applied, Client};
use crate::error::Result;
use crate::exit;

/// Prints `done` when applied, or the gateway's note when queued.
fn report(out: &mut dyn Write, id: &str, applied: &Applied, done: &str) -> Result<u8> {
    match applied {
        Applied::Done(_) => writeln!(out, "{done}")?,
        Applied::Queued(note) => writeln!(out, "{id}: {note}")?,
    }
    Ok(exit::OK)
}

/// `weft terminate ID [--reason R]`.
pub async fn terminate(client: &Client, args: &TerminateArgs, out: &mut dyn Write) -> Result<u8> {
    let query: Vec<(&str, String)> = args.reason.iter().map(|r| ("reason", r.clone())).collect();
    let applied = client
        .operate(Method::DELETE, &["api", "workflow", &args.id], &query, None)
        .await?;
    report(out, &args.id, &applied, &format!("terminated {}", args.id))
}

/// `weft retry ID`: a new run from the last failed, timed-out or canceled task.
pub async fn retry(client: &Client, id: &str, out: &mut dyn Write) -> Result<u8> {
    let applied = client
        .operate(Method::POST, &["api", "workflow", id, "retry"], &[], None)
        .await?;
    let done = format!("retried {id}: a new run continues from where it stopped");
    report(out, id, &applied, &done)
}

/// `weft restart ID`: a new run from the first task.
pub async fn restart(client: &Client, id: &str, out: &mut dyn Write) -> Result<u8> {
    let applied = client
        .operate(Method::POST, &["api", "workflow", id, "restart"], &[], None)
        .await?;
    let done = format!("restarted {id}: a new run starts from the first task");
    report(out, id, &applied, &done)
}

/// `weft reset ID TASK_REF [--iteration N] [--reason R]`: prints the new run id.
pub async fn reset(client: &Client, args: &ResetArgs, out: &mut dyn Write) -> Result<u8> {
    let mut body = json!({ "taskRef": args.task_ref });
    if let Some(iteration) = args.iteration {
        body["iteration"] = json!(iteration);
    }
    if let Some(reason) = &args.reason {
        body["reason"] = json!(reason);
    }
    let applied = client
        .operate(
            Method::POST,
            &["api", "workflow", &args.id, "reset"],
            &[],
            Some(&body),
        )
        .await?;
    let done = match &applied {
        Applied::Done(run_id) => {
            format!("reset {} to {}: new run {run_id}", args.id, args.task_ref)
        }
        Applied::Queued(_) => String::new(),
    };
    report(out, &args.id, &applied, &done)
}

/// `weft skip ID TASK_REF [--output JSON]`.
pub async fn skip(client: &Client, args: &SkipArgs, out: &mut dyn Write) -> Result<u8> {
    let body = json!({
        "taskOutput": args.output.clone().unwrap_or_else(|| Value::Object(Map::new())),
    });
    let applied = client
        .operate(
            Method::PUT,
            &["api", "workflow", &args.id, "skiptask", &args.task_ref],
            &[],
            Some(&body),
        )
        .await?;
    let done = format!("skipped {} in {}", args.task_ref, args.id);
    report(out, &args.id, &applied, &done)
}

/// `weft pause ID`.
pub async fn pause(client: &Client, id: &str, out: &mut dyn Write) -> Result<u8> {
    let applied = client
        .operate(Method::PUT, &["api", "workflow", id, "pause"], &[], None)
        .await?;
    report(out, id, &applied, &format!("paused {id}"))
}

/// `weft resume ID`.
pub async fn resume(client: &Client, id: &str, out: &mut dyn Write) -> Result<u8> {
    let applied = client
        .operate(Method::PUT, &["api", "workflow", id, "resume"], &[], None)
        .await?;
    report(out, id, &applied, &format!("resumed {id}"))
}

/// `weft signal ID NAME [--data JSON]`: the task named NAME takes it, or, when the run
/// has not reached that WAIT (HUMAN, asynchronous EVENT) task yet, it is kept until it
/// does; refused when no task would consume it (docs/task-updates.md).
pub async fn signal(client: &Client, args: &SignalArgs, out: &mut dyn Write) -> Result<u8> {
    let data = args
        .data
        .clone()
        .unwrap_or_else(|| Value::Object(Map::new()));
    let answer = client.signal(&args.id, &args.name, &data).await?;
    let verdict: Value = serde_json::from_str(&answer.text).unwrap_or(Value::Null);
    if verdict["held"] == Value::Bool(true) {
        writeln!(
            out,
            "signal {} kept: {} has not reached task {} yet",
            args.name, args.id, args.name
        )?;
    } else if let Some(task_id) = verdict["taskId"].as_str() {
        writeln!(
            out,
            "signal {} completed task {task_id} of {}",
            args.name, args.id
        )?;
    } else {
        writeln!(
            out,
            "signal {} queued for {} (no decider answered yet)",
            args.name, args.id
        )?;
    }
    Ok(exit::OK)
}
