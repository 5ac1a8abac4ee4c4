//! The `weft` command line (issue 7) as a user runs it: the real binary as a process,
//! against the real suite: definitions, a followed run, reads, a WAIT completed by a
//! signal, terminate, retry, pause, resume, skip, refusals and an absent gateway, each
//! with its exit code; and, on a gateway with authentication on (issue 15), tokens:
//! created, listed, used, refused, revoked.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use weft_e2e::{greet, Client, Suite, TestEnv};

use crate::constructs::statuses;
use crate::RUN_TIMEOUT;

/// What a finished `weft` process left.
#[derive(Debug)]
pub(crate) struct Output {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Output {
    /// Panics with everything it printed unless it exited with `code`.
    pub(crate) fn expect(self, code: i32, what: &str) -> Self {
        assert_eq!(
            self.code, code,
            "{what}: exit {} (expected {code})\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        );
        self
    }
}

/// The `weft` binary, aimed at one gateway.
pub(crate) struct Weft {
    bin: PathBuf,
    server: String,
}

impl Weft {
    pub(crate) fn new(server: &str) -> Self {
        let dir = weft_e2e::process::bin_dir().unwrap();
        let bin = dir.join("weft");
        assert!(
            bin.is_file(),
            "{} not found; build the binaries first: cargo build --workspace --bins",
            bin.display()
        );
        Self {
            bin,
            server: server.to_owned(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--server")
            .arg(&self.server)
            .args(args)
            .env_remove("WEFT_SERVER")
            .env_remove("WEFT_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs `weft --server <gateway> args...` to its end.
    pub(crate) async fn run(&self, args: &[&str]) -> Output {
        let out = tokio::time::timeout(RUN_TIMEOUT, self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("weft {args:?} did not end within {RUN_TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("running weft {args:?}: {e}"));
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs `weft --server <gateway> args...` with `WEFT_TOKEN=token` to its end.
    pub(crate) async fn run_with_token_env(&self, token: &str, args: &[&str]) -> Output {
        let mut command = self.command(args);
        command.env("WEFT_TOKEN", token);
        let out = tokio::time::timeout(RUN_TIMEOUT, command.output())
            .await
            .unwrap_or_else(|_| panic!("weft {args:?} did not end within {RUN_TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("running weft {args:?}: {e}"));
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Starts `weft run ... --wait` and returns once it printed the workflow id (its
    /// first line), while it goes on following the run.
    async fn follow(&self, args: &[&str]) -> Following {
        let mut child = self.command(args).spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut stderr = child.stderr.take().unwrap();
        let mut first = String::new();
        tokio::time::timeout(RUN_TIMEOUT, stdout.read_line(&mut first))
            .await
            .unwrap_or_else(|_| panic!("weft {args:?} printed no workflow id"))
            .unwrap();
        let id = first.trim().to_owned();
        assert!(!id.is_empty(), "weft {args:?} printed an empty first line");
        let rest = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stdout.read_to_string(&mut text).await;
            text
        });
        let errors = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text).await;
            text
        });
        Following {
            child,
            id,
            rest,
            errors,
        }
    }
}

/// A `weft run --wait` still running.
struct Following {
    child: Child,
    id: String,
    rest: JoinHandle<String>,
    errors: JoinHandle<String>,
}

impl Following {
    /// Waits for the process to end (the run to end).
    async fn finish(mut self) -> Output {
        let status = tokio::time::timeout(RUN_TIMEOUT, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("weft run --wait ({}) did not end", self.id))
            .unwrap();
        Output {
            code: status.code().unwrap_or(-1),
            stdout: format!("{}\n{}", self.id, self.rest.await.unwrap()),
            stderr: self.errors.await.unwrap(),
        }
    }
}

/// A workflow that waits for a signal named `approval` between two activities.
fn approve_definition() -> Value {
    json!({"name": "approve", "version": 1, "tasks": [
        {"name": "make_name", "taskReferenceName": "n", "type": "SIMPLE",
         "inputParameters": {"first": "${workflow.input.first}"}},
        {"name": "approval", "taskReferenceName": "approval", "type": "WAIT"},
        {"name": "shout", "taskReferenceName": "s", "type": "SIMPLE",
         "inputParameters": {"text": "${approval.output.note}"}}],
     "outputParameters": {"approved": "${s.output.text}"}})
}

fn write_json(dir: &Path, name: &str, value: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
    path.display().to_string()
}

/// Waits until run `id`'s task `task_ref` is IN_PROGRESS (a WAIT waiting for its signal).
async fn reached(client: &Client, id: &str, task_ref: &str) {
    let waiting = || async {
        let wf = client.get(id).await?;
        Ok(statuses(&wf)
            .iter()
            .any(|(r, s)| r == task_ref && s == "IN_PROGRESS")
            .then_some(()))
    };
    weft_e2e::poll_until(
        RUN_TIMEOUT,
        std::time::Duration::from_millis(20),
        || format!("{task_ref} of {id} never became IN_PROGRESS"),
        waiting,
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_registers_runs_follows_signals_and_operates_with_meaningful_exit_codes() {
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    let client = suite.client();
    let weft = Weft::new(&suite.gateway_url());
    let dir = suite.log_dir();

    // Definitions: a file with an array of two.
    let defs = write_json(
        dir,
        "defs.json",
        &json!([greet::definition(), approve_definition()]),
    );
    let out = weft
        .run(&["def", "register", &defs])
        .await
        .expect(0, "def register");
    assert_eq!(
        out.stdout,
        "registered greet version 1\nregistered approve version 1\n"
    );
    let out = weft
        .run(&["def", "register", &defs])
        .await
        .expect(3, "registering again");
    assert!(
        out.stderr
            .contains("already exists; pass --overwrite to replace it"),
        "{}",
        out.stderr
    );
    weft.run(&["def", "register", &defs, "--overwrite"])
        .await
        .expect(0, "def register --overwrite");
    let out = weft.run(&["def", "list"]).await.expect(0, "def list");
    assert!(out.stdout.contains("approve  1"), "{}", out.stdout);
    assert!(out.stdout.contains("greet    1"), "{}", out.stdout);
    let out = weft
        .run(&["def", "get", "greet", "--version", "1"])
        .await
        .expect(0, "def get");
    let def: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(def["name"], "greet");

    // A followed run: progress, then the final status and output; exit 0.
    let input = write_json(dir, "input.json", &greet::input("Ada", 3));
    let out = weft
        .run(&["run", "greet", "--input", &format!("@{input}"), "--wait"])
        .await
        .expect(0, "run --wait");
    let id = out.stdout.lines().next().unwrap().to_owned();
    for task in ["n (make_name)", "s (shout)", "c (count)"] {
        assert!(
            out.stdout.contains(&format!("COMPLETED   {task}")),
            "progress of {task}:\n{}",
            out.stdout
        );
    }
    assert!(out.stdout.contains("\nCOMPLETED in "), "{}", out.stdout);
    assert!(
        out.stdout.contains("\"result\": \"ADA WEFT x3\""),
        "{}",
        out.stdout
    );
    crate::assert_greet_completed(client, &id, "Ada", 3).await;

    // Reads.
    let out = weft.run(&["get", &id]).await.expect(0, "get");
    assert!(
        out.stdout.starts_with(&format!("workflow    {id}\n")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("status      COMPLETED\n"),
        "{}",
        out.stdout
    );
    for task in ["make_name", "shout", "count"] {
        assert!(out.stdout.contains(task), "{}", out.stdout);
    }
    let out = weft
        .run(&["get", &id, "--json"])
        .await
        .expect(0, "get --json");
    let wf: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        (wf["workflowId"].as_str(), wf["status"].as_str()),
        (Some(id.as_str()), Some("COMPLETED"))
    );
    let out = weft.run(&["history", &id]).await.expect(0, "history");
    assert!(out.stdout.contains("WorkflowStarted"), "{}", out.stdout);
    assert!(out.stdout.contains("WorkflowCompleted"), "{}", out.stdout);
    let out = weft
        .run(&["search", "--free-text", &id])
        .await
        .expect(0, "search");
    assert!(out.stdout.contains(&id), "{}", out.stdout);
    assert!(out.stdout.contains("runs 1-1 of 1"), "{}", out.stdout);

    // Refusals: exit 3 with the gateway's sentence.
    let out = weft
        .run(&["resume", &id])
        .await
        .expect(3, "resume of a COMPLETED run");
    assert_eq!(
        out.stderr,
        format!("weft: workflow {id} is COMPLETED: only a PAUSED run can be resumed\n")
    );
    let out = weft
        .run(&["get", "wf-does-not-exist"])
        .await
        .expect(3, "get of an unknown workflow");
    assert_eq!(out.stderr, "weft: workflow wf-does-not-exist not found\n");
    let out = weft
        .run(&["run", "no-such-definition"])
        .await
        .expect(3, "run of an unknown definition");
    assert_eq!(
        out.stderr,
        "weft: workflow definition no-such-definition not found\n"
    );

    // A WAIT completed by `weft signal` while `weft run --wait` follows the run.
    let following = weft
        .follow(&["run", "approve", "--input", r#"{"first": "Bo"}"#, "--wait"])
        .await;
    reached(client, &following.id, "approval").await;
    let out = weft
        .run(&[
            "signal",
            &following.id,
            "approval",
            "--data",
            r#"{"note": "ok by ops"}"#,
        ])
        .await
        .expect(0, "signal");
    assert!(
        out.stdout.starts_with("signal approval completed task ")
            && out.stdout.ends_with(&format!(" of {}\n", following.id)),
        "{}",
        out.stdout
    );
    let out = following
        .finish()
        .await
        .expect(0, "run --wait until signalled");
    assert!(
        out.stdout.contains("COMPLETED   approval (approval)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("\"approved\": \"OK BY OPS\""),
        "{}",
        out.stdout
    );

    // Terminate with a reason: the follower ends with exit 1.
    let following = weft
        .follow(&["run", "approve", "--input", r#"{"first": "Cy"}"#, "--wait"])
        .await;
    let id = following.id.clone();
    reached(client, &id, "approval").await;
    let out = weft
        .run(&["terminate", &id, "--reason", "stopped by the test"])
        .await
        .expect(0, "terminate");
    assert_eq!(out.stdout, format!("terminated {id}\n"));
    let out = following
        .finish()
        .await
        .expect(1, "run --wait of a terminated run");
    assert!(
        out.stdout.contains("\nTERMINATED in ") && out.stdout.contains("stopped by the test"),
        "{}",
        out.stdout
    );
    let out = weft
        .run(&["get", &id])
        .await
        .expect(0, "get of the terminated run");
    assert!(
        out.stdout.contains("status      TERMINATED\n")
            && out.stdout.contains("reason      stopped by the test"),
        "{}",
        out.stdout
    );

    // Retry (a new run from the canceled WAIT), pause, resume, skip the WAIT.
    let out = weft.run(&["retry", &id]).await.expect(0, "retry");
    assert!(
        out.stdout.starts_with(&format!("retried {id}")),
        "{}",
        out.stdout
    );
    weft.run(&["pause", &id]).await.expect(0, "pause");
    let out = weft
        .run(&["get", &id, "--json"])
        .await
        .expect(0, "get paused");
    let wf: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(wf["status"], "PAUSED");
    weft.run(&["resume", &id]).await.expect(0, "resume");
    let out = weft
        .run(&[
            "skip",
            &id,
            "approval",
            "--output",
            r#"{"note": "skipped"}"#,
        ])
        .await
        .expect(0, "skip");
    assert_eq!(out.stdout, format!("skipped approval in {id}\n"));
    let wf = crate::ended(&suite, &id, "COMPLETED").await;
    assert_eq!(wf["output"], json!({"approved": "SKIPPED"}));
}

#[tokio::test]
async fn the_cli_names_the_url_when_no_gateway_answers_and_refuses_bad_json() {
    let addr = weft_e2e::suite::free_port().unwrap();
    let server = format!("http://{addr}");
    let weft = Weft::new(&server);

    let out = weft.run(&["get", "wf-1"]).await.expect(4, "no gateway");
    assert!(
        out.stderr.starts_with(&format!(
            "weft: cannot reach the gateway at {server} (connection refused). Is it running?"
        )),
        "{}",
        out.stderr
    );
    let out = weft
        .run(&["run", "greet", "--input", "{first: 1}"])
        .await
        .expect(2, "bad --input");
    assert!(
        out.stderr.contains("'--input <JSON>'") && out.stderr.contains("not valid JSON"),
        "{}",
        out.stderr
    );
}

/// The token `weft token create` printed: the indented line of its own.
fn printed_token(out: &Output) -> String {
    let token = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("    "))
        .unwrap_or_else(|| panic!("no token line in:\n{}", out.stdout));
    assert!(!token.trim().is_empty(), "{}", out.stdout);
    token.trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_manages_tokens_and_says_what_a_refusal_means() {
    let admin = format!("weft_admin_{}", uuid::Uuid::new_v4().simple());
    let options = weft_e2e::EnvOptions {
        extra_env: vec![("WEFT_ADMIN_TOKEN".into(), admin.clone())],
        ..weft_e2e::EnvOptions::default()
    };
    let suite = Suite::start(TestEnv::create(options).await.unwrap())
        .await
        .unwrap();
    let admin_client = suite.client().with_token(&admin).unwrap();
    let weft = Weft::new(&suite.gateway_url());
    let server = suite.gateway_url();

    // No token, a wrong one: exit 3, and the sentence says what to do.
    let out = weft.run(&["def", "list"]).await.expect(3, "no token");
    assert!(
        out.stderr.starts_with(&format!(
            "weft: the gateway at {server} requires a token: pass --token or set WEFT_TOKEN"
        )),
        "{}",
        out.stderr
    );
    let out = weft
        .run(&["--token", "weft_wrong", "def", "list"])
        .await
        .expect(3, "a wrong token");
    assert!(
        out.stderr.starts_with(&format!(
            "weft: the gateway at {server} refused the token: "
        )),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.ends_with(". Check --token or WEFT_TOKEN\n"),
        "{}",
        out.stderr
    );

    // The administrator's token from WEFT_TOKEN: definitions, then tokens.
    let dir = suite.log_dir();
    let defs = write_json(
        dir,
        "defs.json",
        &json!([greet::definition(), approve_definition()]),
    );
    weft.run_with_token_env(&admin, &["def", "register", &defs])
        .await
        .expect(0, "def register with WEFT_TOKEN");
    let out = weft
        .run_with_token_env(
            &admin,
            &[
                "token",
                "create",
                "ci",
                "--scope",
                "read",
                "--scope",
                "start",
                "--expires-in",
                "1d",
            ],
        )
        .await
        .expect(0, "token create ci");
    assert!(
        out.stdout
            .starts_with("created token ci: scopes read, start; expires 20"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("it is not shown again"),
        "{}",
        out.stdout
    );
    let ci = printed_token(&out);
    let out = weft
        .run(&[
            "--token",
            &admin,
            "token",
            "create",
            "ops",
            "--scope",
            "read,operate",
            "--json",
        ])
        .await
        .expect(0, "token create ops --json");
    let created: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(created["name"], "ops");
    assert_eq!(created["scopes"], json!(["read", "operate"]));
    assert_eq!(created["expiresAt"], Value::Null, "{created}");
    let ops = created["token"].as_str().unwrap().to_owned();
    let out = weft
        .run(&[
            "--token",
            &admin,
            "token",
            "create",
            "w",
            "--scope",
            "work",
            "--task-type",
            "greet,shout",
            "--json",
        ])
        .await
        .expect(0, "token create w --task-type");
    let created: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(created["taskTypes"], json!(["greet", "shout"]), "{created}");

    // Refusals of the creation: the gateway's 409, the command line's own usage error.
    let out = weft
        .run(&[
            "--token", &admin, "token", "create", "ci", "--scope", "read",
        ])
        .await
        .expect(3, "a second token named ci");
    assert!(out.stderr.starts_with("weft: "), "{}", out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    weft.run(&[
        "--token",
        &admin,
        "token",
        "create",
        "x",
        "--scope",
        "read",
        "--task-type",
        "greet",
    ])
    .await
    .expect(2, "--task-type without --scope work");

    // The list: every token made here, no secret.
    let out = weft
        .run(&["--token", &admin, "token", "list"])
        .await
        .expect(0, "token list");
    let row = |name: &str| {
        out.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row {name}:\n{}", out.stdout))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert!(out.stdout.starts_with("NAME "), "{}", out.stdout);
    assert_eq!(row("ci")[1..3], ["read,start", "-"], "{}", out.stdout);
    assert_eq!(row("ops")[1..3], ["read,operate", "-"], "{}", out.stdout);
    assert_eq!(row("ops").last(), Some(&"never"), "{}", out.stdout);
    assert_eq!(
        row("w")[1..4],
        ["work", "greet,", "shout"],
        "{}",
        out.stdout
    );
    for secret in [&ci, &ops, &admin] {
        assert!(!out.stdout.contains(secret.as_str()), "{}", out.stdout);
    }
    let out = weft
        .run(&["--token", &admin, "token", "list", "--json"])
        .await
        .expect(0, "token list --json");
    let listed: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t.get("token").is_none()),
        "{listed}"
    );

    // The `ci` token reads and starts: a followed run completes.
    let out = weft
        .run(&[
            "--token",
            &ci,
            "run",
            "greet",
            "--input",
            r#"{"first": "Ci", "n": 2}"#,
            "--wait",
        ])
        .await
        .expect(0, "run --wait with the ci token");
    let id = out.stdout.lines().next().unwrap().to_owned();
    crate::assert_greet_completed(&admin_client, &id, "Ci", 2).await;

    // ... but does not operate, nor manage tokens: 403, the scope named.
    let id = weft
        .run(&[
            "--token",
            &ci,
            "run",
            "approve",
            "--input",
            r#"{"first": "Di"}"#,
        ])
        .await
        .expect(0, "run approve with the ci token")
        .stdout
        .trim()
        .to_owned();
    reached(&admin_client, &id, "approval").await;
    let out = weft
        .run(&["--token", &ci, "terminate", &id, "--reason", "nope"])
        .await
        .expect(3, "terminate without the operate scope");
    assert!(
        out.stderr.starts_with("weft: not allowed: ") && out.stderr.contains("operate"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("weft token create"), "{}", out.stderr);
    let out = weft
        .run(&["--token", &ci, "token", "list"])
        .await
        .expect(3, "token list without the admin scope");
    assert!(
        out.stderr.starts_with("weft: not allowed: ") && out.stderr.contains("admin"),
        "{}",
        out.stderr
    );

    // The `ops` token terminates; the run's audit names it, with the reason.
    let out = weft
        .run_with_token_env(&ops, &["terminate", &id, "--reason", "stopped by ops"])
        .await
        .expect(0, "terminate with the ops token");
    assert_eq!(out.stdout, format!("terminated {id}\n"));
    let audit = admin_client
        .raw(
            reqwest::Method::GET,
            &format!("/api/workflow/{id}/audit"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(audit.status, 200, "{}", audit.text);
    let audit = audit.json.unwrap();
    // The refused attempt (403, before any handler) left no row; the applied one did.
    let terminations: Vec<&Value> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["action"] == "workflow.terminate")
        .collect();
    assert_eq!(terminations.len(), 1, "{audit}");
    let entry = terminations[0];
    assert_eq!(entry["token"], "ops", "{audit}");
    assert_eq!(entry["reason"], "stopped by ops", "{audit}");
    assert_eq!(entry["workflowId"], id.as_str(), "{audit}");
    // The same through `weft audit`: a reader sees the run's trail, the admin the whole
    // trail narrowed to a token; a reader asking for the whole trail is refused.
    let out = weft
        .run_with_token_env(&ci, &["audit", "--workflow", &id])
        .await
        .expect(0, "weft audit --workflow as a reader");
    let line = out
        .stdout
        .lines()
        .find(|l| l.contains("workflow.terminate"))
        .unwrap_or_else(|| panic!("no terminate row in:\n{}", out.stdout));
    assert!(
        line.contains("ops") && line.contains("stopped by ops"),
        "{}",
        out.stdout
    );
    let out = weft
        .run(&[
            "--token", &admin, "audit", "--by", "ops", "--since", "1h", "--json",
        ])
        .await
        .expect(0, "weft audit --by ops");
    let rows: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(
        rows.as_array().unwrap().iter().all(|r| r["token"] == "ops")
            && rows
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["action"] == "workflow.terminate"),
        "{rows}"
    );
    let out = weft
        .run_with_token_env(&ci, &["audit"])
        .await
        .expect(3, "the whole trail without the admin scope");
    assert!(out.stderr.contains("admin"), "{}", out.stderr);

    // Revoked: the token is refused from now on; a second revoke finds nothing.
    let out = weft
        .run(&["--token", &admin, "token", "revoke", "ci"])
        .await
        .expect(0, "token revoke ci");
    assert_eq!(
        out.stdout,
        "revoked token ci: requests carrying it are refused from now on\n"
    );
    let out = weft
        .run(&["--token", &ci, "get", &id])
        .await
        .expect(3, "get with a revoked token");
    assert!(out.stderr.contains("refused the token"), "{}", out.stderr);
    weft.run(&["--token", &admin, "token", "revoke", "ci"])
        .await
        .expect(3, "revoking ci again");
    let out = weft
        .run(&["--token", &admin, "token", "list"])
        .await
        .expect(0, "token list after the revoke");
    assert!(
        !out.stdout.lines().any(|l| l.starts_with("ci ")),
        "{}",
        out.stdout
    );
}
