//! `weft dev`: starts the suite in this process, says where it is, runs until Ctrl-C.

use std::io::Write;

use crate::args::DevArgs;
use crate::dev::{Database, Dev, Options};
use crate::error::Result;
use crate::exit;

/// Runs `weft dev` until SIGINT/SIGTERM.
pub async fn run(args: DevArgs, out: &mut dyn Write) -> Result<u8> {
    // Logs go to standard error; only the banner goes to standard output.
    let _telemetry = weft::telemetry::init("weft-dev").map_err(crate::dev::DevError::from)?;
    let config = weft::Config::from_env().map_err(crate::dev::DevError::from)?;
    let database = Database::from_args(args.db.as_deref(), &args.data_dir);
    let options = Options {
        database: database.clone(),
        addr: args.addr,
        examples: args.example,
        config,
    };
    let shutdown = weft::shutdown::on_signals();
    let dev = Dev::start(options, shutdown).await?;
    banner(out, &dev.url, &database, args.example)?;
    dev.wait().await?;
    writeln!(out, "weft dev stopped")?;
    Ok(exit::OK)
}

fn banner(out: &mut dyn Write, url: &str, database: &Database, example: bool) -> Result<()> {
    writeln!(out, "Weft is running (every service in this process).")?;
    writeln!(out, "  web UI    {url}/")?;
    writeln!(
        out,
        "  REST API  {url}/api (e.g. {url}/api/metadata/workflow)"
    )?;
    writeln!(out, "  database  {}", database.describe())?;
    let server = match url {
        "http://127.0.0.1:8080" => String::new(),
        other => format!(" --server {other}"),
    };
    if example {
        writeln!(
            out,
            "  examples  workflow `greet` registered; its worker runs in this process"
        )?;
        writeln!(out, "Start a workflow (in another terminal):")?;
        writeln!(
            out,
            "  cargo run --release --bin weft --{server} run greet --input '{{\"first\":\"Ada\",\"n\":3}}' --wait"
        )?;
        writeln!(out, "  or: curl -X POST {url}/api/workflow/greet -H 'Content-Type: application/json' -d '{{\"first\":\"Ada\",\"n\":3}}'")?;
    } else {
        writeln!(
            out,
            "Register a definition and start it (in another terminal):"
        )?;
        writeln!(
            out,
            "  cargo run --release --bin weft --{server} def register my-workflow.json"
        )?;
        writeln!(
            out,
            "  cargo run --release --bin weft --{server} run my-workflow --input '{{}}' --wait"
        )?;
        writeln!(
            out,
            "  (`weft dev --example` also registers a sample workflow with its worker.)"
        )?;
    }
    writeln!(
        out,
        "Workers elsewhere poll {url}/api/tasks/poll/<taskType> (Conductor's task API)."
    )?;
    writeln!(out, "Ctrl-C stops it.")?;
    out.flush()?;
    Ok(())
}
