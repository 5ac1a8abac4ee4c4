//! `weft token create|list|revoke`: access tokens (`/api/admin/tokens`, scope `admin`).
//!
//! The gateway shows a token's secret once, in its answer to the creation; the list
//! carries names, scopes and dates only.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::Method;
use serde_json::{json, Value};

use crate::args::TokenCreateArgs;
use crate::client::{self, Client};
use crate::error::{Error, Result};
use crate::{exit, output};

/// Now, in epoch milliseconds (expiry times are absolute in the API).
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The request body of `POST /api/admin/tokens`; `expiresAt` is `now_ms` plus the
/// lifetime (both bounded, so the sum stays far from overflowing).
pub fn create_body(args: &TokenCreateArgs, now_ms: i64) -> Value {
    let mut scopes: Vec<&str> = Vec::new();
    for scope in &args.scopes {
        // `--scope read --scope read,start` asks for two scopes, not three.
        if !scopes.contains(&scope.as_str()) {
            scopes.push(scope.as_str());
        }
    }
    let mut body = json!({ "name": args.name, "scopes": scopes });
    if !args.task_types.is_empty() {
        body["taskTypes"] = json!(args.task_types);
    }
    if let Some(lifetime) = args.expires_in {
        body["expiresAt"] = json!(now_ms.saturating_add(millis(lifetime)));
    }
    body
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// `weft token create NAME --scope S... [--task-type T...] [--expires-in D] [--json]`.
pub async fn create(client: &Client, args: &TokenCreateArgs, out: &mut dyn Write) -> Result<u8> {
    args.check().map_err(Error::Input)?;
    let now = now_ms();
    let path = ["api", "admin", "tokens"];
    let created = client
        .send_json(Method::POST, &path, &[], Some(&create_body(args, now)))
        .await?;
    let Some(secret) = created["token"].as_str().filter(|s| !s.is_empty()) else {
        return Err(client::Error::Unexpected {
            server: client.server(),
            request: "POST /api/admin/tokens".to_owned(),
            detail: "the answer carries no token (is it a Weft gateway with tokens?)".to_owned(),
        }
        .into());
    };
    if args.json {
        writeln!(out, "{}", output::pretty(&created))?;
    } else {
        write!(out, "{}", output::token_created(&created, secret, now))?;
    }
    Ok(exit::OK)
}

/// `weft token list [--json]`.
pub async fn list(client: &Client, json: bool, out: &mut dyn Write) -> Result<u8> {
    let tokens = client.get_json(&["api", "admin", "tokens"], &[]).await?;
    if json {
        writeln!(out, "{}", output::pretty(&tokens))?;
    } else {
        let tokens = tokens.as_array().map(Vec::as_slice).unwrap_or(&[]);
        write!(out, "{}", output::tokens_table(tokens, now_ms()))?;
    }
    Ok(exit::OK)
}

/// `weft token revoke NAME`.
pub async fn revoke(client: &Client, name: &str, out: &mut dyn Write) -> Result<u8> {
    client
        .send(Method::DELETE, &["api", "admin", "tokens", name], &[], None)
        .await?;
    writeln!(
        out,
        "revoked token {name}: requests carrying it are refused from now on"
    )?;
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::args::{Command, TokenCommand};
    use crate::Cli;

    fn create_args(args: &[&str]) -> TokenCreateArgs {
        let argv = ["weft", "token", "create"].iter().chain(args).copied();
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Token(TokenCommand::Create(c)) => c,
            other => panic!("not token create: {other:?}"),
        }
    }

    #[test]
    fn the_create_body_has_the_contract_fields_only_when_given() {
        let now = 1_767_225_600_000;
        let body = create_body(&create_args(&["ci", "--scope", "read,start"]), now);
        assert_eq!(body, json!({"name": "ci", "scopes": ["read", "start"]}));

        let args = create_args(&[
            "w",
            "--scope",
            "work",
            "--scope",
            "read,work",
            "--task-type",
            "greet",
            "--expires-in",
            "12h",
        ]);
        assert_eq!(
            create_body(&args, now),
            json!({"name": "w", "scopes": ["work", "read"], "taskTypes": ["greet"],
                   "expiresAt": now + 12 * 3_600_000})
        );
    }
}
