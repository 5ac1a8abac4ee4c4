//! `weft event add|update|list|delete|executions`: event handlers (`/api/event`).

use std::io::Write;

use reqwest::Method;
use serde_json::Value;

use crate::args::{kind_of, ExecutionsArgs};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::{exit, output};

/// The handler in `file` (`-`: standard input), which must be a JSON object.
fn handler_in(file: &str) -> Result<Value> {
    let json = crate::commands::defs::load(file)?;
    match json {
        Value::Object(_) => Ok(json),
        other => Err(Error::Input(format!(
            "{file} holds {}; expected an event handler (a JSON object)",
            kind_of(&other)
        ))),
    }
}

fn name_of(handler: &Value) -> &str {
    handler["name"].as_str().unwrap_or("(unnamed handler)")
}

/// `weft event add FILE`.
pub async fn add(client: &Client, file: &str, out: &mut dyn Write) -> Result<u8> {
    let handler = handler_in(file)?;
    client
        .send(Method::POST, &["api", "event"], &[], Some(&handler))
        .await?;
    writeln!(out, "registered event handler {}", name_of(&handler))?;
    Ok(exit::OK)
}

/// `weft event update FILE`.
pub async fn update(client: &Client, file: &str, out: &mut dyn Write) -> Result<u8> {
    let handler = handler_in(file)?;
    client
        .send(Method::PUT, &["api", "event"], &[], Some(&handler))
        .await?;
    writeln!(out, "updated event handler {}", name_of(&handler))?;
    Ok(exit::OK)
}

/// `weft event list`.
pub async fn list(client: &Client, json: bool, out: &mut dyn Write) -> Result<u8> {
    let handlers = client.get_json(&["api", "event"], &[]).await?;
    if json {
        writeln!(out, "{}", output::pretty(&handlers))?;
    } else {
        let handlers = handlers.as_array().map(Vec::as_slice).unwrap_or(&[]);
        write!(out, "{}", output::event_handlers_table(handlers))?;
    }
    Ok(exit::OK)
}

/// `weft event delete NAME`.
pub async fn delete(client: &Client, name: &str, out: &mut dyn Write) -> Result<u8> {
    client
        .send(Method::DELETE, &["api", "event", name], &[], None)
        .await?;
    writeln!(out, "deleted event handler {name}")?;
    Ok(exit::OK)
}

/// `weft event executions NAME`.
pub async fn executions(client: &Client, args: &ExecutionsArgs, out: &mut dyn Write) -> Result<u8> {
    let found = client
        .get_json(
            &["api", "event", &args.name, "executions"],
            &[("limit", args.limit.to_string())],
        )
        .await?;
    if args.json {
        writeln!(out, "{}", output::pretty(&found))?;
    } else {
        let found = found.as_array().map(Vec::as_slice).unwrap_or(&[]);
        write!(out, "{}", output::event_executions_table(found))?;
    }
    Ok(exit::OK)
}
