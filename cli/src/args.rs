//! The command line's shape (clap derive) and the parsers of its values: the server
//! URL, the token, the JSON flags (`--input`, `--data`, `--output`), which take inline
//! JSON or `@file.json`, and token lifetimes (`--expires-in 30d`).
//!
//! A bad value is a usage error: clap reports it naming the flag
//! (`invalid value '{x' for '--input <JSON>': not valid JSON: ...`) and exits with 2.

use std::path::Path;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use reqwest::Url;
use serde_json::Value;

use crate::client::Token;
use crate::exit;

/// Where the CLI looks for a gateway when neither `--server` nor `WEFT_SERVER` says.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// The text after `--help`: the exit codes (kept in step with [`crate::exit`] by a test).
const AFTER_HELP: &str = "\
Exit codes:
  0  done (with --wait: the run COMPLETED)
  1  with --wait: the run ended FAILED, TIMED_OUT or TERMINATED
  2  usage error: unknown command or flag, bad JSON, unreadable file
  3  refused by the gateway (4xx): not found, invalid field, not allowed in this state,
     no token or a refused one (401), a token without the scope needed (403)
  4  gateway unreachable, failing (5xx) or answering outside the API;
     weft dev: could not start (address in use, database not openable) or a service failed

JSON values (--input, --data, --output) are inline JSON or @FILE to read one.

A gateway with authentication on wants a token: --token or WEFT_TOKEN (an
administrator creates one with `weft token create`).";

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
    /// The access token sent with every request (`Authorization: Bearer`), for a
    /// gateway with authentication on.
    #[arg(
        long,
        global = true,
        env = "WEFT_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN",
        value_parser = Token::parse
    )]
    pub token: Option<Token>,
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
    /// Access tokens (administrators): create, list, revoke.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Who changed what, newest first: one run's operations (--workflow), or the whole
    /// trail (administrators).
    Audit(AuditArgs),
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

/// `weft token ...`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token and print it (shown only this once).
    Create(TokenCreateArgs),
    /// List the tokens (names, scopes, task types, dates; never the secrets).
    List(JsonFlag),
    /// Revoke a token: requests carrying it are refused from now on.
    Revoke(NameArg),
}

/// What a token allows (the gateway's scopes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scope {
    /// Read runs, histories, definitions, a run's audit.
    Read,
    /// Start runs and send signals.
    Start,
    /// Terminate, pause, resume, skip, reset, retry, restart runs.
    Operate,
    /// Workflow and task definitions, event handlers.
    Define,
    /// Poll, update and heartbeat tasks as a worker (of the --task-type types only,
    /// when given).
    Work,
    /// Tokens and the audit trail.
    Admin,
}

impl Scope {
    /// The scope's name in the gateway's API.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Start => "start",
            Scope::Operate => "operate",
            Scope::Define => "define",
            Scope::Work => "work",
            Scope::Admin => "admin",
        }
    }
}

/// `weft token create`.
#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    /// The token's name (who or what uses it; shown in the audit of operations).
    pub name: String,
    /// A scope it grants; repeat the flag or separate with commas.
    #[arg(
        long = "scope",
        value_name = "SCOPE",
        required = true,
        value_delimiter = ','
    )]
    pub scopes: Vec<Scope>,
    /// Limit the `work` scope to a task type; repeat for several (default: every type).
    #[arg(long = "task-type", value_name = "TYPE", value_delimiter = ',')]
    pub task_types: Vec<String>,
    /// How long the token lives: a number and a unit, m (minutes), h, d or w, e.g.
    /// 90m, 12h, 30d (default: until revoked).
    #[arg(long, value_name = "DURATION", value_parser = parse_lifetime)]
    pub expires_in: Option<Duration>,
    /// Print the gateway's JSON (the token included) instead of the summary.
    #[arg(long)]
    pub json: bool,
}

impl TokenCreateArgs {
    /// Checks what clap cannot: task types only narrow the `work` scope.
    pub fn check(&self) -> Result<(), String> {
        if !self.task_types.is_empty() && !self.scopes.contains(&Scope::Work) {
            return Err("--task-type limits the work scope: add --scope work".to_owned());
        }
        Ok(())
    }
}

/// `weft audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only what was done to this run (needs the `read` scope; the rest needs `admin`).
    #[arg(long, value_name = "WORKFLOW_ID")]
    pub workflow: Option<String>,
    /// Only what this token did (its name).
    #[arg(long, value_name = "TOKEN_NAME")]
    pub by: Option<String>,
    /// Only the last DURATION: a number and a unit, m, h, d or w, e.g. 90m, 24h.
    #[arg(long, value_name = "DURATION", value_parser = parse_lifetime)]
    pub since: Option<Duration>,
    /// How many rows at most (1 to 1000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// Print the gateway's JSON instead of a table.
    #[arg(long)]
    pub json: bool,
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

/// The longest lifetime `--expires-in` takes: a hundred years (beyond it, a typo).
const MAX_LIFETIME: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Parses a token lifetime: a whole number and a unit, `m` (minutes), `h` (hours), `d`
/// (days) or `w` (weeks): `90m`, `12h`, `30d`.
pub fn parse_lifetime(raw: &str) -> Result<Duration, String> {
    const HINT: &str = "use a whole number and a unit m, h, d or w, e.g. 90m, 12h, 30d";
    let raw = raw.trim();
    let split = raw.find(|c: char| !c.is_ascii_digit()).unwrap_or(raw.len());
    let (number, unit) = raw.split_at(split);
    if number.is_empty() {
        return Err(format!("does not start with a number; {HINT}"));
    }
    let seconds_per_unit: u64 = match unit {
        "m" => 60,
        "h" => 3600,
        "d" => 24 * 3600,
        "w" => 7 * 24 * 3600,
        "" => return Err(format!("no unit; {HINT}")),
        other => return Err(format!("unknown unit {other:?}; {HINT}")),
    };
    let too_long = || "longer than 100 years".to_owned();
    // Only digits here: a parse failure is an overflow.
    let count: u64 = number.parse().map_err(|_| too_long())?;
    if count == 0 {
        return Err("must be longer than zero".to_owned());
    }
    count
        .checked_mul(seconds_per_unit)
        .map(Duration::from_secs)
        .filter(|d| *d <= MAX_LIFETIME)
        .ok_or_else(too_long)
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
    fn the_token_is_global_and_read_from_weft_token() {
        let cli = parse(&["get", "wf-1", "--token", "weft_abc"]).unwrap();
        assert_eq!(cli.token.as_ref().map(Token::secret), Some("weft_abc"));
        let cli = parse(&["--token", "weft_xyz", "token", "list"]).unwrap();
        assert_eq!(cli.token.as_ref().map(Token::secret), Some("weft_xyz"));
        let err = parse(&["--token", "a b", "get", "wf-1"]).unwrap_err();
        assert_eq!(err.exit_code(), i32::from(exit::USAGE));
        assert!(err.to_string().contains("--token"), "{err}");

        // WEFT_TOKEN is read by clap (the e2e tests pass a token that way), its value
        // never shown in --help.
        assert_eq!(
            Cli::command()
                .get_arguments()
                .find(|a| a.get_id() == "token")
                .and_then(|a| a.get_env())
                .and_then(|v| v.to_str()),
            Some("WEFT_TOKEN")
        );
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("[env: WEFT_TOKEN]"), "{help}");
    }

    #[test]
    fn token_create_takes_scopes_task_types_and_a_lifetime() {
        let cli = parse(&[
            "token",
            "create",
            "ci",
            "--scope",
            "read",
            "--scope",
            "start,work",
            "--task-type",
            "greet",
            "--task-type",
            "shout",
            "--expires-in",
            "30d",
        ])
        .unwrap();
        let Command::Token(TokenCommand::Create(c)) = cli.command else {
            panic!("not token create: {:?}", cli.command)
        };
        assert_eq!(c.name, "ci");
        assert_eq!(c.scopes, [Scope::Read, Scope::Start, Scope::Work]);
        assert_eq!(c.task_types, ["greet", "shout"]);
        assert_eq!(c.expires_in, Some(Duration::from_secs(30 * 24 * 3600)));
        assert!(!c.json);
        assert_eq!(c.check(), Ok(()));

        let cli = parse(&["token", "create", "ops", "--scope", "operate", "--json"]).unwrap();
        let Command::Token(TokenCommand::Create(c)) = cli.command else {
            panic!("not token create")
        };
        assert_eq!((c.expires_in, c.json), (None, true));
        assert!(c.task_types.is_empty());
    }

    #[test]
    fn token_create_refuses_missing_or_unknown_scopes_and_stray_task_types() {
        let err = parse(&["token", "create", "ci"]).unwrap_err();
        assert_eq!(err.exit_code(), i32::from(exit::USAGE));
        assert!(err.to_string().contains("--scope <SCOPE>"), "{err}");

        let err = parse(&["token", "create", "ci", "--scope", "root"]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("invalid value 'root'"), "{text}");
        assert!(
            text.contains("read, start, operate, define, work, admin"),
            "the scopes are listed: {text}"
        );

        let cli = parse(&[
            "token",
            "create",
            "w",
            "--scope",
            "read",
            "--task-type",
            "greet",
        ])
        .unwrap();
        let Command::Token(TokenCommand::Create(c)) = cli.command else {
            panic!("not token create")
        };
        assert_eq!(
            c.check(),
            Err("--task-type limits the work scope: add --scope work".to_owned())
        );

        let err = parse(&[
            "token",
            "create",
            "ci",
            "--scope",
            "read",
            "--expires-in",
            "3x",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("--expires-in"), "{err}");
        assert!(err.to_string().contains("unknown unit \"x\""), "{err}");
    }

    #[test]
    fn token_list_and_revoke_take_their_arguments() {
        let cli = parse(&["token", "list", "--json"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Token(TokenCommand::List(JsonFlag { json: true }))
        ));
        let cli = parse(&["token", "revoke", "ci"]).unwrap();
        let Command::Token(TokenCommand::Revoke(n)) = cli.command else {
            panic!("not token revoke")
        };
        assert_eq!(n.name, "ci");
        assert!(parse(&["token", "revoke"]).is_err(), "the name is required");
    }

    #[test]
    fn lifetimes_read_minutes_hours_days_and_weeks() {
        let minutes = |m: u64| Duration::from_secs(m * 60);
        assert_eq!(parse_lifetime("90m"), Ok(minutes(90)));
        assert_eq!(parse_lifetime("12h"), Ok(minutes(12 * 60)));
        assert_eq!(parse_lifetime("30d"), Ok(minutes(30 * 24 * 60)));
        assert_eq!(parse_lifetime("2w"), Ok(minutes(14 * 24 * 60)));
        assert_eq!(parse_lifetime(" 1d "), Ok(minutes(24 * 60)));
        assert_eq!(parse_lifetime("36500d"), Ok(MAX_LIFETIME));

        let err = |raw: &str| parse_lifetime(raw).unwrap_err();
        for raw in ["30", "12"] {
            assert!(err(raw).starts_with("no unit;"), "{raw:?}: {}", err(raw));
        }
        for raw in ["d", "-1h", "h1", ""] {
            assert!(
                err(raw).starts_with("does not start with a number;"),
                "{raw:?}: {}",
                err(raw)
            );
        }
        assert_eq!(
            err("5s"),
            "unknown unit \"s\"; use a whole number and a unit m, h, d or w, e.g. 90m, 12h, 30d"
        );
        assert!(
            err("1.5h").starts_with("unknown unit \".5h\""),
            "{}",
            err("1.5h")
        );
        assert!(
            err("3 d").starts_with("unknown unit \" d\""),
            "{}",
            err("3 d")
        );
        assert_eq!(err("0h"), "must be longer than zero");
        assert_eq!(err("36501d"), "longer than 100 years");
        assert_eq!(err("9999999999999999w"), "longer than 100 years");
        assert_eq!(err("99999999999999999999w"), "longer than 100 years");
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
