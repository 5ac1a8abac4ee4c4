//! `weft run`: starts a run and, with `--wait`, follows it to its end, printing each
//! task as its status changes.
//!
//! Following polls `GET /api/workflow/{id}`: every 100 ms while things change, backing
//! off to once a second while nothing does.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::args::RunArgs;
use crate::client::Client;
use crate::error::Result;
use crate::{exit, output};

/// The quickest poll, right after a change.
const POLL_MIN: Duration = Duration::from_millis(100);
/// The slowest poll, after a while without changes.
const POLL_MAX: Duration = Duration::from_secs(1);

/// Starts the run and prints its id (first line, alone); follows it with `--wait`.
pub async fn run(client: &Client, args: RunArgs, out: &mut dyn Write) -> Result<u8> {
    let mut request = json!({
        "name": args.name,
        "input": args.input.unwrap_or_else(|| Value::Object(Map::new())),
    });
    if let Some(version) = args.version {
        request["version"] = json!(version);
    }
    if let Some(correlation_id) = args.correlation_id {
        request["correlationId"] = json!(correlation_id);
    }
    let id = client.start(&request).await?;
    writeln!(out, "{id}")?;
    out.flush()?;
    if !args.wait {
        return Ok(exit::OK);
    }
    follow(client, &id, out).await
}

/// Follows run `id` until it ends; prints progress, then the final status and output.
/// [`exit::OK`] when it COMPLETED, [`exit::RUN_UNSUCCESSFUL`] otherwise.
pub async fn follow(client: &Client, id: &str, out: &mut dyn Write) -> Result<u8> {
    let mut progress = Progress::default();
    let mut delay = POLL_MIN;
    loop {
        let wf = client.workflow(id).await?;
        let lines = progress.update(&wf);
        for line in &lines {
            writeln!(out, "{line}")?;
        }
        out.flush()?;
        let status = wf["status"].as_str().unwrap_or_default();
        if output::TERMINAL.contains(&status) {
            write!(out, "{}", output::final_report(&wf))?;
            return Ok(match status {
                "COMPLETED" => exit::OK,
                _ => exit::RUN_UNSUCCESSFUL,
            });
        }
        delay = match lines.is_empty() {
            true => (delay * 2).min(POLL_MAX),
            false => POLL_MIN,
        };
        tokio::time::sleep(delay).await;
    }
}

/// What a follower has shown so far, to print only what changed.
#[derive(Debug, Default)]
pub struct Progress {
    /// Task id → the status last shown.
    tasks: HashMap<String, String>,
    /// The workflow status last seen.
    status: Option<String>,
    /// The run last seen (a reset starts a new run of the same workflow).
    run_id: Option<String>,
}

impl Progress {
    /// The lines to print for the run as it is now: a new run after a reset, a
    /// workflow status other than RUNNING (PAUSED, and RUNNING again after it), and
    /// each task that appeared or changed status. The final status is not included
    /// (see [`output::final_report`]).
    pub fn update(&mut self, wf: &Value) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(run_id) = wf["runId"].as_str() {
            if self.run_id.as_deref().is_some_and(|seen| seen != run_id) {
                lines.push(format!("new run {run_id} (the workflow was reset)"));
            }
            self.run_id = Some(run_id.to_owned());
        }
        let status = wf["status"].as_str().unwrap_or_default();
        let changed = match self.status.as_deref() {
            None => status != "RUNNING",
            Some(seen) => seen != status,
        };
        if changed && !output::TERMINAL.contains(&status) {
            lines.push(format!("workflow {}", output::status_line(wf)));
        }
        self.status = Some(status.to_owned());
        for task in wf["tasks"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            let Some(task_id) = task["taskId"].as_str() else {
                continue;
            };
            let task_status = task["status"].as_str().unwrap_or_default();
            if self.tasks.get(task_id).map(String::as_str) != Some(task_status) {
                self.tasks
                    .insert(task_id.to_owned(), task_status.to_owned());
                lines.push(output::progress_line(task));
            }
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, reference: &str, status: &str) -> Value {
        json!({"taskId": id, "referenceTaskName": reference, "taskDefName": reference,
               "status": status, "iteration": 0, "startTime": 0, "endTime": 0})
    }

    fn wf(status: &str, run: &str, tasks: Vec<Value>) -> Value {
        json!({"workflowId": "wf-1", "runId": run, "status": status, "subStatus": status,
               "tasks": tasks})
    }

    #[test]
    fn progress_shows_each_task_once_per_status() {
        let mut p = Progress::default();
        assert!(p.update(&wf("RUNNING", "r1", vec![])).is_empty());
        assert_eq!(
            p.update(&wf("RUNNING", "r1", vec![task("t1", "n", "SCHEDULED")])),
            vec!["  SCHEDULED   n (n)"]
        );
        assert!(
            p.update(&wf("RUNNING", "r1", vec![task("t1", "n", "SCHEDULED")]))
                .is_empty(),
            "nothing changed"
        );
        assert_eq!(
            p.update(&wf(
                "RUNNING",
                "r1",
                vec![task("t1", "n", "COMPLETED"), task("t2", "s", "IN_PROGRESS")]
            )),
            vec!["  COMPLETED   n (n)", "  IN_PROGRESS s (s)"]
        );
    }

    #[test]
    fn progress_shows_pauses_and_resets_but_not_the_end() {
        let mut p = Progress::default();
        assert_eq!(
            p.update(&wf("PAUSED", "r1", vec![])),
            vec!["workflow PAUSED"]
        );
        assert_eq!(
            p.update(&wf("RUNNING", "r1", vec![])),
            vec!["workflow RUNNING"]
        );
        assert_eq!(
            p.update(&wf("RUNNING", "r2", vec![])),
            vec!["new run r2 (the workflow was reset)"]
        );
        assert!(p.update(&wf("COMPLETED", "r2", vec![])).is_empty());
    }
}
