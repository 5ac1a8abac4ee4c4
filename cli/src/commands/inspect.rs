//! Reading runs: `weft get`, `weft history`, `weft search`.

use std::io::Write;

use crate::args::{GetArgs, HistoryArgs, SearchArgs};
use crate::client::Client;
use crate::error::Result;
use crate::{exit, output};

/// `weft get ID [--json]`.
pub async fn get(client: &Client, args: &GetArgs, out: &mut dyn Write) -> Result<u8> {
    let wf = client.workflow(&args.id).await?;
    if args.json {
        writeln!(out, "{}", output::pretty(&wf))?;
    } else {
        write!(out, "{}", output::workflow_summary(&wf))?;
    }
    Ok(exit::OK)
}

/// `weft history ID [--json]`: every event of the current run.
pub async fn history(client: &Client, args: &HistoryArgs, out: &mut dyn Write) -> Result<u8> {
    let events = client.history(&args.id).await?;
    if args.json {
        writeln!(out, "{}", output::pretty(&serde_json::Value::Array(events)))?;
    } else {
        write!(out, "{}", output::history_lines(&events))?;
    }
    Ok(exit::OK)
}

/// `weft search [--query Q] [--free-text T]`.
pub async fn search(client: &Client, args: &SearchArgs, out: &mut dyn Write) -> Result<u8> {
    let mut query = vec![
        ("start", args.start.to_string()),
        ("size", args.size.to_string()),
    ];
    if let Some(q) = &args.query {
        query.push(("query", q.clone()));
    }
    if let Some(t) = &args.free_text {
        query.push(("freeText", t.clone()));
    }
    let result = client
        .get_json(&["api", "workflow", "search"], &query)
        .await?;
    if args.json {
        writeln!(out, "{}", output::pretty(&result))?;
    } else {
        write!(out, "{}", output::search_table(&result, args.start))?;
    }
    Ok(exit::OK)
}
