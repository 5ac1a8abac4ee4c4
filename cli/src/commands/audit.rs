//! `weft audit`: the audit trail (`GET /api/audit`, scope `admin`), or one run's
//! (`GET /api/workflow/{id}/audit`, scope `read`, when only `--workflow` narrows it).

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::args::AuditArgs;
use crate::client::Client;
use crate::error::Result;
use crate::{exit, output};

/// The request `args` make: path segments and query.
pub fn request(args: &AuditArgs, now_ms: i64) -> (Vec<String>, Vec<(&'static str, String)>) {
    let mut query = vec![("limit", args.limit.to_string())];
    if let Some(since) = args.since {
        let ms = i64::try_from(since.as_millis()).unwrap_or(i64::MAX);
        query.push(("from", now_ms.saturating_sub(ms).to_string()));
    }
    match (&args.workflow, &args.by) {
        // One run's trail is a reader's; its answer is every row of the run (a run's
        // operations are few), narrowed here by the time and the limit.
        (Some(id), None) => (
            vec!["api".into(), "workflow".into(), id.clone(), "audit".into()],
            Vec::new(),
        ),
        (workflow, by) => {
            if let Some(id) = workflow {
                query.push(("workflowId", id.clone()));
            }
            if let Some(name) = by {
                query.push(("token", name.clone()));
            }
            (vec!["api".into(), "audit".into()], query)
        }
    }
}

/// `weft audit [--workflow ID] [--by NAME] [--since D] [--limit N] [--json]`.
pub async fn list(client: &Client, args: &AuditArgs, out: &mut dyn Write) -> Result<u8> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let (segments, query) = request(args, now);
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let rows = client.get_json(&segments, &query).await?;
    let mut rows = rows.as_array().cloned().unwrap_or_default();
    if args.workflow.is_some() && args.by.is_none() {
        let from = args
            .since
            .map(|s| now.saturating_sub(i64::try_from(s.as_millis()).unwrap_or(i64::MAX)));
        rows.retain(|r| from.is_none_or(|from| r["at"].as_i64().unwrap_or(0) >= from));
        rows.truncate(args.limit as usize);
    }
    if args.json {
        writeln!(out, "{}", output::pretty(&serde_json::Value::Array(rows)))?;
    } else {
        write!(out, "{}", output::audit_table(&rows))?;
    }
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn args(workflow: Option<&str>, by: Option<&str>, since: Option<u64>) -> AuditArgs {
        AuditArgs {
            workflow: workflow.map(str::to_owned),
            by: by.map(str::to_owned),
            since: since.map(Duration::from_secs),
            limit: 50,
            json: false,
        }
    }

    #[test]
    fn one_runs_trail_is_read_from_the_run_and_the_rest_from_the_admins_trail() {
        let (path, query) = request(&args(Some("wf-1"), None, None), 0);
        assert_eq!(path, ["api", "workflow", "wf-1", "audit"]);
        assert!(query.is_empty());
        let (path, query) = request(&args(Some("wf-1"), Some("ops"), Some(60)), 100_000);
        assert_eq!(path, ["api", "audit"]);
        assert_eq!(
            query,
            vec![
                ("limit", "50".to_owned()),
                ("from", "40000".to_owned()),
                ("workflowId", "wf-1".to_owned()),
                ("token", "ops".to_owned()),
            ]
        );
    }

    #[test]
    fn the_table_shows_who_did_what_with_dashes_for_what_is_unknown() {
        let rows = serde_json::json!([
            {"at": 1_700_000_000_000_i64, "token": "ops", "action": "workflow.terminate",
             "target": "wf-1", "status": 200, "reason": "wrong input"},
            {"at": 1_700_000_000_000_i64, "token": null, "action": "definition.create",
             "target": null, "status": null, "reason": null}
        ]);
        let table = output::audit_table(rows.as_array().unwrap());
        assert!(
            table.contains("workflow.terminate") && table.contains("wrong input"),
            "{table}"
        );
        let last = table.lines().last().unwrap();
        assert!(
            last.contains(" - ") && last.contains("definition.create"),
            "{table}"
        );
        assert_eq!(output::audit_table(&[]), "no audit rows\n");
    }
}
