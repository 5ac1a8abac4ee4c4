//! `weft`, Weft's command line: registers workflow definitions, starts runs and follows
//! them, reads them, and applies operator operations, over HTTP on any gateway (the
//! REST contract of API.md; Conductor-compatible where Conductor has the endpoint).
//!
//! The binary (`src/main.rs`) parses the command line ([`args::Cli`]), runs [`run`] on a
//! single-threaded runtime, prints a failure as `weft: <sentence>` and exits with the
//! code [`exit`] documents.

pub mod args;
pub mod client;
pub mod commands;
pub mod dev;
pub mod error;
pub mod exit;
pub mod output;

use std::io::Write;

pub use args::Cli;
pub use client::Client;
pub use error::{Error, Result};

use args::{Command, DefCommand, EventCommand, TokenCommand};

/// Runs one command against the gateway `cli.server` (with `cli.token` on every request
/// when given), writing what it shows to `out`;
/// returns the exit code ([`exit::OK`], or [`exit::RUN_UNSUCCESSFUL`] for a followed
/// run that did not complete).
pub async fn run(cli: Cli, out: &mut dyn Write) -> Result<u8> {
    let client = Client::with_token(cli.server, cli.token.as_ref());
    match cli.command {
        Command::Def(DefCommand::Register(a)) => commands::defs::register(&client, &a, out).await,
        Command::Def(DefCommand::List(a)) => commands::defs::list(&client, a.json, out).await,
        Command::Def(DefCommand::Get(a)) => commands::defs::get(&client, &a, out).await,
        Command::Event(EventCommand::Add(a)) => commands::events::add(&client, &a.file, out).await,
        Command::Event(EventCommand::Update(a)) => {
            commands::events::update(&client, &a.file, out).await
        }
        Command::Event(EventCommand::List(a)) => commands::events::list(&client, a.json, out).await,
        Command::Event(EventCommand::Delete(a)) => {
            commands::events::delete(&client, &a.name, out).await
        }
        Command::Event(EventCommand::Executions(a)) => {
            commands::events::executions(&client, &a, out).await
        }
        Command::Run(a) => commands::start::run(&client, a, out).await,
        Command::Get(a) => commands::inspect::get(&client, &a, out).await,
        Command::History(a) => commands::inspect::history(&client, &a, out).await,
        Command::Search(a) => commands::inspect::search(&client, &a, out).await,
        Command::Terminate(a) => commands::ops::terminate(&client, &a, out).await,
        Command::Retry(a) => commands::ops::retry(&client, &a.id, out).await,
        Command::Restart(a) => commands::ops::restart(&client, &a.id, out).await,
        Command::Reset(a) => commands::ops::reset(&client, &a, out).await,
        Command::Skip(a) => commands::ops::skip(&client, &a, out).await,
        Command::Pause(a) => commands::ops::pause(&client, &a.id, out).await,
        Command::Resume(a) => commands::ops::resume(&client, &a.id, out).await,
        Command::Signal(a) => commands::ops::signal(&client, &a, out).await,
        Command::Token(TokenCommand::Create(a)) => commands::tokens::create(&client, &a, out).await,
        Command::Token(TokenCommand::List(a)) => commands::tokens::list(&client, a.json, out).await,
        Command::Token(TokenCommand::Revoke(a)) => {
            commands::tokens::revoke(&client, &a.name, out).await
        }
        Command::Audit(a) => commands::audit::list(&client, &a, out).await,
        Command::Dev(a) => commands::dev::run(a, out).await,
    }
}
