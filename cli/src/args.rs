//! The command line's shape (clap derive) and the parsers of its values: the server
//! URL and the JSON flags (`--input`, `--data`, `--output`), which take inline JSON or
//! `@file.json`.
//!
//! A bad value is a usage error: clap reports it naming the flag
//! (`invalid value '{x' for '--input <JSON>': not valid JSON: ...`) and exits with 2.

use std::path::Path;

use clap::{Args, Parser, Subcommand};
use reqwest::Url;
use serde_json::Value;

use crate::exit;

/// Where the CLI looks for a gateway when neither `--server` nor `WEFT_SERVER` says.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// The text after `--help`: the exit codes (kept in step with [`crate::exit`] by a test).
const AFTER_HELP: &str = "\
Exit codes:
  0  done (with --wait: the run COMPLETED)
  1  with --wait: the run ended FAILED, TIMED_OUT or TERMINATED
  2  usage error: unknown command or flag, bad JSON, unreadable file
  3  refused by the gateway (4xx): not found, invalid field, not allowed in this state
  4  gateway unreachable, failing (5xx) or answering outside the API;
     weft dev: could not start (address in use, database not openable) or a service failed

JSON values (--input, --data, --output) are inline JSON or @FILE to read one.";

/// `weft`: talks to a Weft gateway (or any Conductor-compatible one) over HTTP.
#[derive(Debug, Parser)]
#[command(
    name = "weft",
    version,
    about = "Weft's command line: register definitions, start and watch runs, operate on them",
    after_help = AFTER_HELP
)]
pub struct Cli {
    /// The gateway's base URL (http).
    #[arg(
        long,
        global = true,
        env = "WEFT_SERVER",
        hide_env_values = true,
        default_value = DEFAULT_SERVER,
        value_name = "URL",
        value_parser = parse_server
    )]
    pub server: Url,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Workflow definitions: register, list, get.
    #[command(subcommand)]
    Def(DefCommand),
    /// Start a run of a registered workflow and print its id (--wait: follow it to the end).
    Run(RunArgs),
    /// Show a run: status, tasks, reason, output.
    Get(GetArgs),
    /// End a run now (TERMINATED); its running tasks are canceled.
    Terminate(TerminateArgs),
    /// Continue an ended run from the task it stopped at (a new run of the same id).
    Retry(IdArgs),
    /// Run an ended run again from its first task (a new run of the same id).
    Restart(IdArgs),
    /// Continue a run from any task (a new run of the same id); prints the new run id.
    Reset(ResetArgs),
    /// Skip a task (scheduled, in progress or not reached yet) with an optional output.
    Skip(SkipArgs),
    /// Pause a run: nothing new is scheduled until it is resumed.
    Pause(IdArgs),
    /// Resume a paused run.
    Resume(IdArgs),
    /// Send a signal: completes the WAIT task whose reference name is NAME.
    Signal(SignalArgs),
    /// Print a run's history (its event log).
    History(HistoryArgs),
    /// Search runs (newest first).
    Search(SearchArgs),
    /// Event handlers: add, update, list, delete, and what they did.
    #[command(subcommand)]
    Event(EventCommand),
    /// Run the whole suite in this process (REST API, web UI, every service) on an
    /// embedded database: nothing to install. Ctrl-C stops it.
    Dev(DevArgs),
}

/// `weft dev`.
#[derive(Debug, Args)]
pub struct DevArgs {
    /// Where the database file `weft.db` is kept (created when missing).
    #[arg(long, default_value = ".weft", value_name = "DIR")]
    pub data_dir: std::path::PathBuf,
    /// The database: a SQLite file path (default: DIR/weft.db), or `:memory:` for a
    /// throwaway one.
    #[arg(long, value_name = "FILE|:memory:")]
    pub db: Option<String>,
    /// Where the REST API and the web UI listen.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub addr: std::net::SocketAddr,
    /// Also register the example workflows (`greet`) and run their worker here.
    #[arg(long)]
    pub example: bool,
}

/// `weft def ...`.
#[derive(Debug, Subcommand)]
pub enum DefCommand {
    /// Register a definition file: one workflow definition, or a JSON array of them.
    Register(RegisterArgs),
    /// List the registered definitions (every version).
    List(JsonFlag),
    /// Print a definition (the latest version unless --version).
    Get(DefGetArgs),
}

/// `weft event ...`.
#[derive(Debug, Subcommand)]
pub enum EventCommand {
    /// Register a new event handler from a JSON file (`-` for standard input).
    Add(FileArg),
    /// Replace a registered event handler from a JSON file (`-` for standard input).
    Update(FileArg),
    /// List the event handlers.
    List(JsonFlag),
    /// Remove an event handler.
    Delete(NameArg),
    /// What a handler did with recent events, newest first.
    Executions(ExecutionsArgs),
}

/// A JSON file argument.
#[derive(Debug, Args)]
pub struct FileArg {
    /// The JSON file (`-` for standard input).
    #[arg(value_name = "FILE")]
    pub file: String,
}

/// A name argument.
#[derive(Debug, Args)]
pub struct NameArg {
    /// The name.
    pub name: String,
}

/// `weft event executions`.
#[derive(Debug, Args)]
pub struct ExecutionsArgs {
    /// The handler's name.
    pub name: String,
    /// How many (1 to 1000).
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// Print the gateway's JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `weft def register`.
#[derive(Debug, Args)]
pub struct RegisterArgs {
    /// The JSON file (`-` for standard input).
    #[arg(value_name = "FILE")]
    pub file: String,
    /// Replace a version that is already registered.
    #[arg(long)]
    pub overwrite: bool,
}

/// `weft def get`.
#[derive(Debug, Args)]
pub struct DefGetArgs {
    /// The definition's name.
    pub name: String,
    /// The version (default: the latest).
    #[arg(long)]
    pub version: Option<i32>,
}

/// `--json`: the gateway's document as it came, instead of a summary.
#[derive(Debug, Args)]
pub struct JsonFlag {
    /// Print the gateway's JSON instead of a summary.
    #[arg(long)]
    pub json: bool,
}

/// `weft run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The registered workflow's name.
    pub name: String,
    /// The definition version (default: the latest).
    #[arg(long)]
    pub version: Option<i32>,
    /// The workflow input: a JSON object, inline or @FILE.
    #[arg(long, value_name = "JSON", value_parser = parse_json_object)]
    pub input: Option<Value>,
    /// A correlation id to find the run by later.
    #[arg(long, value_name = "ID")]
    pub correlation_id: Option<String>,
    /// Follow the run: print tasks as their status changes, then the final status and
    /// output; exit 1 unless it COMPLETED.
    #[arg(long)]
    pub wait: bool,
}

/// `weft get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// The workflow id.
    pub id: String,
    /// Print the gateway's JSON instead of a summary.
    #[arg(long)]
    pub json: bool,
}

/// Commands that take just a workflow id.
#[derive(Debug, Args)]
pub struct IdArgs {
    /// The workflow id.
    pub id: String,
}

/// `weft terminate`.
#[derive(Debug, Args)]
pub struct TerminateArgs {
    /// The workflow id.
    pub id: String,
    /// Why (recorded as the run's reason).
    #[arg(long)]
    pub reason: Option<String>,
}

/// `weft reset`.
#[derive(Debug, Args)]
pub struct ResetArgs {
    /// The workflow id.
    pub id: String,
    /// The reference name of the task to continue from.
    pub task_ref: String,
    /// Inside a loop: the iteration (default: the newest execution of the task).
    #[arg(long)]
    pub iteration: Option<i32>,
    /// Why (recorded with the reset).
    #[arg(long)]
    pub reason: Option<String>,
}

/// `weft skip`.
#[derive(Debug, Args)]
pub struct SkipArgs {
    /// The workflow id.
    pub id: String,
    /// The reference name of the task to skip.
    pub task_ref: String,
    /// The skipped task's output: a JSON object, inline or @FILE (default `{}`).
    #[arg(long, value_name = "JSON", value_parser = parse_json_object)]
    pub output: Option<Value>,
}

/// `weft signal`.
#[derive(Debug, Args)]
pub struct SignalArgs {
    /// The workflow id.
    pub id: String,
    /// The signal's name: the reference name of the WAIT task it completes.
    pub name: String,
    /// The payload (the WAIT task's output): JSON, inline or @FILE (default `{}`).
    #[arg(long, value_name = "JSON", value_parser = parse_json)]
    pub data: Option<Value>,
}

/// `weft history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The workflow id.
    pub id: String,
    /// Print the events as a JSON array.
    #[arg(long)]
    pub json: bool,
}

/// `weft search`.
#[derive(Debug, Args)]
pub struct SearchArgs {
    /// A query, e.g. `status IN (FAILED, TIMED_OUT)` or `workflowType = greet`.
    #[arg(long, value_name = "Q")]
    pub query: Option<String>,
    /// Free text to look for (ids, correlation ids).
    #[arg(long, value_name = "T")]
    pub free_text: Option<String>,
    /// How many results to show.
    #[arg(long, default_value_t = 20)]
    pub size: u32,
    /// How many results to pass over first (paging).
    #[arg(long, default_value_t = 0)]
    pub start: u32,
    /// Print the gateway's JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Parses `--server`: an `http://` URL (`host:port` alone means http) (this build has no TLS client; put a gateway
/// behind https through a local proxy or tunnel).
pub fn parse_server(raw: &str) -> Result<Url, String> {
    // `localhost:9000` parses as scheme `localhost`: a URL without `://` gets `http://`.
    let full = match raw.contains("://") {
        true => raw.to_owned(),
        false => format!("http://{raw}"),
    };
    let url = Url::parse(&full).map_err(|e| format!("not a URL ({e}); e.g. {DEFAULT_SERVER}"))?;
    match url.scheme() {
        "http" if url.has_host() => Ok(url),
        "http" => Err(format!("{raw:?} names no host; e.g. {DEFAULT_SERVER}")),
        "https" => Err("https is not supported by this build of weft; use an http:// URL".into()),
        other => Err(format!(
            "unsupported scheme {other:?}; use an http:// URL, e.g. {DEFAULT_SERVER}"
        )),
    }
}

/// Parses a JSON value given inline or as `@FILE`.
pub fn parse_json(raw: &str) -> Result<Value, String> {
    match raw.strip_prefix('@') {
        Some(path) => read_json_file(Path::new(path)),
        None => serde_json::from_str(raw).map_err(|e| format!("not valid JSON: {e}")),
    }
}

/// Parses a JSON object given inline or as `@FILE`.
pub fn parse_json_object(raw: &str) -> Result<Value, String> {
    let value = parse_json(raw)?;
    match value {
        Value::Object(_) => Ok(value),
        other => Err(format!(
            "must be a JSON object ({{...}}), not {}",
            kind_of(&other)
        )),
    }
}

/// Reads and parses a JSON file; the error names the file.
pub fn read_json_file(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{} is not valid JSON: {e}", path.display()))
}

/// "an array", "a string", ... for messages.
pub fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The exit codes `--help` documents, for the test that keeps the two in step.
pub const DOCUMENTED_EXIT_CODES: [u8; 5] = [
    exit::OK,
    exit::RUN_UNSUCCESSFUL,
    exit::USAGE,
    exit::REFUSED,
    exit::UNAVAILABLE,
];

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;
    use serde_json::json;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("weft").chain(args.iter().copied()))
    }

    fn temp_file(name: &str, contents: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("weft-cli-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_takes_inline_json_input() {
        let cli = parse(&[
            "run",
            "greet",
            "--input",
            r#"{"first": "Ada", "n": 3}"#,
            "--wait",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run: {:?}", cli.command)
        };
        assert_eq!(run.name, "greet");
        assert_eq!(run.input, Some(json!({"first": "Ada", "n": 3})));
        assert!(run.wait);
        assert_eq!(cli.server.as_str(), "http://127.0.0.1:8080/");
    }

    #[test]
    fn json_flags_read_at_files() {
        let path = temp_file("input.json", r#"{"first": "Bo"}"#);
        let cli = parse(&["run", "greet", "--input", &format!("@{}", path.display())]).unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.input, Some(json!({"first": "Bo"})));
    }

    #[test]
    fn bad_json_is_a_usage_error_naming_the_flag() {
        let err = parse(&["run", "greet", "--input", "{first: 1}"]).unwrap_err();
        assert_eq!(err.exit_code(), i32::from(exit::USAGE));
        let text = err.to_string();
        assert!(text.contains("--input"), "{text}");
        assert!(text.contains("not valid JSON"), "{text}");

        let err = parse(&["signal", "wf-1", "approval", "--data", "[1,"]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("--data") && text.contains("not valid JSON"),
            "{text}"
        );
    }

    #[test]
    fn a_json_object_flag_refuses_other_json() {
        let err = parse(&["skip", "wf-1", "s", "--output", "[1, 2]"]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("--output"), "{text}");
        assert!(text.contains("must be a JSON object"), "{text}");
        assert!(text.contains("an array"), "{text}");
    }

    #[test]
    fn a_missing_at_file_is_named() {
        let err = parse(&["run", "greet", "--input", "@/nonexistent/weft-input.json"]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("--input"), "{text}");
        assert!(
            text.contains("cannot read /nonexistent/weft-input.json"),
            "{text}"
        );
    }

    #[test]
    fn an_at_file_with_bad_json_names_the_file() {
        let path = temp_file("bad.json", "{\"a\": }");
        let err = parse(&[
            "signal",
            "wf-1",
            "go",
            "--data",
            &format!("@{}", path.display()),
        ])
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!("{} is not valid JSON", path.display())),
            "{text}"
        );
    }

    #[test]
    fn server_urls_are_checked() {
        let cli = parse(&["--server", "localhost:9000", "get", "wf-1"]).unwrap();
        assert_eq!(cli.server.as_str(), "http://localhost:9000/");
        let cli = parse(&["get", "wf-1", "--server", "http://10.0.0.1:8080/weft"]).unwrap();
        assert_eq!(cli.server.path(), "/weft");
        let err = parse(&["--server", "https://example.com", "get", "wf-1"]).unwrap_err();
        assert!(err.to_string().contains("https is not supported"), "{err}");
        let err = parse(&["--server", "ftp://x", "get", "wf-1"]).unwrap_err();
        assert!(err.to_string().contains("unsupported scheme"), "{err}");
    }

    #[test]
    fn operations_take_their_arguments() {
        let cli = parse(&[
            "reset",
            "wf-1",
            "loop_body",
            "--iteration",
            "2",
            "--reason",
            "bad data",
        ])
        .unwrap();
        let Command::Reset(r) = cli.command else {
            panic!("not reset")
        };
        assert_eq!(
            (
                r.id.as_str(),
                r.task_ref.as_str(),
                r.iteration,
                r.reason.as_deref()
            ),
            ("wf-1", "loop_body", Some(2), Some("bad data"))
        );
        let cli = parse(&["run", "greet", "--version", "2"]).unwrap();
        let Command::Run(r) = cli.command else {
            panic!("not run")
        };
        assert_eq!(r.version, Some(2), "a subcommand's --version is its own");
        let cli = parse(&["def", "register", "defs.json", "--overwrite"]).unwrap();
        let Command::Def(DefCommand::Register(r)) = cli.command else {
            panic!("not def register")
        };
        assert!(r.overwrite);
        assert_eq!(r.file, "defs.json");
    }

    #[test]
    fn help_documents_every_exit_code() {
        let help = Cli::command().render_help().to_string();
        for code in DOCUMENTED_EXIT_CODES {
            assert!(
                help.contains(&format!("\n  {code}  ")),
                "exit {code} in:\n{help}"
            );
        }
    }
}
