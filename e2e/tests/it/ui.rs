//! The web UI in a real browser (issue 5): headless Chromium (Debian's `chromium`),
//! driven by Playwright (`e2e/ui/drive.mjs`), against the real services. It opens the
//! list, filters it, opens a run with a loop, a fork and a switch, checks the node
//! statuses and the branch taken, signals the run's WAIT, sees a refused retry's 409,
//! resets a task through the UI's confirm dialog, sees the new run, pauses, resumes
//! and skips its WAIT; then terminates a second run. This test starts the suite and the run, runs the script, and
//! checks through the API what the clicks did.
//!
//! With authentication on (issue 15, `e2e/ui/auth.mjs`): the page asks for a token,
//! shows a refused one's error, shows the runs once signed in, lists who terminated a
//! run on its page, asks again when the session's token is refused, and signs out.
//!
//! Needs `/usr/bin/chromium` (or `WEFT_CHROMIUM`) and `npm ci` in `e2e/ui`; `.ci/run`
//! provides both. Without them the test fails and says so.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;
use weft::worker::Worker;
use weft_e2e::{Suite, TestEnv};

/// Bound on the whole browser session (debug builds on two shared cores).
const SESSION_TIMEOUT: Duration = Duration::from_secs(600);

/// A fork (a three-iteration loop beside one task), a switch taking case `a`, a WAIT
/// and a last task.
fn ui_flow() -> Value {
    json!({"name": "ui_flow", "version": 1, "tasks": [
        {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [
            [{"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
              "loopCondition": "$.loop['iteration'] < 3",
              "loopOver": [
                {"name": "ui_step", "taskReferenceName": "tick", "type": "SIMPLE",
                 "inputParameters": {"i": "${loop.output.iteration}"}}]}],
            [{"name": "ui_step", "taskReferenceName": "side", "type": "SIMPLE"}]]},
        {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["loop", "side"]},
        {"name": "pick", "taskReferenceName": "pick", "type": "SWITCH",
         "evaluatorType": "value-param", "expression": "mode",
         "inputParameters": {"mode": "${workflow.input.mode}"},
         "decisionCases": {
            "a": [{"name": "ui_step", "taskReferenceName": "chosen", "type": "SIMPLE"}],
            "b": [{"name": "ui_step", "taskReferenceName": "other", "type": "SIMPLE"}]}},
        {"name": "approve", "taskReferenceName": "approve", "type": "WAIT"},
        {"name": "ui_step", "taskReferenceName": "done", "type": "SIMPLE",
         "inputParameters": {"approval": "${approve.output}"}}],
     "outputParameters": {"approval": "${approve.output.ok}"}})
}

fn ui_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("ui")
}

/// The browser, or a panic that says how to get it.
fn chromium() -> PathBuf {
    let path =
        std::env::var_os("WEFT_CHROMIUM").map_or_else(|| "/usr/bin/chromium".into(), PathBuf::from);
    assert!(
        path.is_file(),
        "no Chromium at {}: install Debian's package (apt-get install -y chromium, as .ci/run does) \
         or set WEFT_CHROMIUM",
        path.display()
    );
    let playwright = ui_dir().join("node_modules/playwright-core");
    assert!(
        playwright.is_dir(),
        "{} is missing: run `npm ci` in e2e/ui (as .ci/run does)",
        playwright.display()
    );
    path
}

/// Runs `script` (in `e2e/ui`) against the suite's gateway with `vars`, and returns
/// the JSON of its `RESULT` line; panics with its output, the screenshots' folder and
/// the suite's logs when it fails.
async fn drive(suite: &Suite, browser: &Path, script: &str, vars: &[(&str, &str)]) -> Value {
    let out = suite.log_dir().join(script.trim_end_matches(".mjs"));
    let mut child = tokio::process::Command::new("node")
        .arg(ui_dir().join(script))
        .current_dir(ui_dir())
        .env("WEFT_UI_URL", suite.gateway_url())
        .env("WEFT_UI_OUT", &out)
        .env("WEFT_CHROMIUM", browser)
        .envs(vars.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starting node (Node.js 20 is needed for the browser test)");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (mut so, mut se) = (String::new(), String::new());
    let session = async {
        let (a, b) = tokio::join!(
            stdout.read_to_string(&mut so),
            stderr.read_to_string(&mut se)
        );
        a.and(b).expect("reading the script's output");
        child.wait().await.expect("waiting for node")
    };
    let status = match tokio::time::timeout(SESSION_TIMEOUT, session).await {
        Ok(status) => status,
        Err(_) => {
            // kill_on_drop ends the node process (and so its browser) started above.
            panic!(
                "the browser session ({script}) did not end within {SESSION_TIMEOUT:?}\n{}",
                suite.describe()
            );
        }
    };
    assert!(
        status.success(),
        "browser session {script} failed ({status}):\n{so}\n{se}\nscreenshots in {}\n{}",
        out.display(),
        suite.describe()
    );
    so.lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_else(|| panic!("no RESULT line:\n{so}\n{se}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_shows_a_run_and_resets_it_in_a_browser() {
    let browser = chromium();
    let options = weft_e2e::EnvOptions {
        extra_env: vec![(
            "WEFT_TRACE_URL".into(),
            "http://traces.example/trace/{traceId}".into(),
        )],
        ..weft_e2e::EnvOptions::default()
    };
    let suite = Suite::start(TestEnv::create(options).await.unwrap())
        .await
        .unwrap();
    let client = suite.client();
    let shutdown = CancellationToken::new();
    let env = suite.env();
    let config = weft::Config {
        amqp_url: env.amqp_url.clone(),
        namespace: env.namespace.clone(),
        shards: env.options.shards,
        database_url: env.database_url.clone(),
        ..weft::Config::default()
    };
    let worker = Worker::builder(&config)
        .handler("ui_step", |task| async move {
            Ok(json!({ "ref": task.task_ref, "input": task.input }))
        })
        .build();
    let stop = shutdown.clone();
    tokio::spawn(async move { worker.run(stop).await });

    client.register(&ui_flow()).await.unwrap();
    let id = client.start("ui_flow", json!({"mode": "a"})).await.unwrap();
    let other = client.start("ui_flow", json!({"mode": "b"})).await.unwrap();

    let result = drive(
        &suite,
        &browser,
        "drive.mjs",
        &[
            ("WEFT_UI_WORKFLOW", id.as_str()),
            ("WEFT_UI_WORKFLOW2", &other),
        ],
    )
    .await;

    // What the clicks did, seen through the API: the signal completed the first run, the
    // reset made a second run from `chosen`, whose WAIT was skipped with the operator's
    // output.
    let (old, new) = (
        result["oldRun"].as_str().unwrap(),
        result["newRun"].as_str().unwrap(),
    );
    let runs = client
        .raw(
            reqwest::Method::GET,
            &format!("/api/workflow/{id}/runs"),
            None,
        )
        .await
        .unwrap()
        .json
        .unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0]["runId"], old);
    assert_eq!(runs[0]["status"], "COMPLETED");
    assert_eq!(runs[1]["runId"], new);
    assert_eq!(
        runs[1]["resetFrom"],
        json!({"runId": old, "taskRef": "chosen"})
    );
    let wf = client.get(&id).await.unwrap();
    assert_eq!(wf["status"], "COMPLETED", "{wf}");
    let approve = wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["referenceTaskName"] == "approve")
        .unwrap();
    assert_eq!(approve["status"], "SKIPPED", "{wf}");
    assert_eq!(approve["outputData"], json!({"ok": "skipped"}));
    assert_eq!(wf["output"], json!({"approval": "skipped"}));
    let wf = client.get(&other).await.unwrap();
    assert_eq!(wf["status"], "TERMINATED", "{wf}");
    assert!(
        wf["reasonForIncompletion"]
            .as_str()
            .is_some_and(|r| r.contains("enough")),
        "{wf}"
    );
    shutdown.cancel();
}

/// A run that waits on a WAIT until it is ended.
fn ui_wait() -> Value {
    json!({"name": "ui_wait", "version": 1, "tasks": [
        {"name": "hold", "taskReferenceName": "hold", "type": "WAIT"}]})
}

/// Creates a token on the gateway (`POST /api/admin/tokens`) and returns its secret.
async fn create_token(admin: &weft_e2e::Client, name: &str, scopes: &[&str]) -> String {
    let created = admin
        .post_json(
            "/api/admin/tokens",
            &json!({"name": name, "scopes": scopes}),
        )
        .await
        .unwrap();
    assert_eq!(
        created.status, 201,
        "creating token {name}: {}",
        created.text
    );
    created
        .json
        .as_ref()
        .and_then(|c| c["token"].as_str())
        .map_or_else(|| panic!("no token in {}", created.text), str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_asks_for_a_token_and_shows_who_operated_when_auth_is_on() {
    let browser = chromium();
    let admin_token = format!("weft_admin_{}", uuid::Uuid::new_v4().simple());
    let options = weft_e2e::EnvOptions {
        extra_env: vec![("WEFT_ADMIN_TOKEN".into(), admin_token.clone())],
        ..weft_e2e::EnvOptions::default()
    };
    let suite = Suite::start(TestEnv::create(options).await.unwrap())
        .await
        .unwrap();
    let admin = suite.client().with_token(&admin_token).unwrap();
    let config = suite
        .client()
        .raw(reqwest::Method::GET, "/api/ui/config", None)
        .await
        .unwrap();
    assert_eq!(
        config.status, 200,
        "the UI's config needs no token: {}",
        config.text
    );
    assert_eq!(config.json.unwrap()["auth"], true);

    // A run, terminated with a reason by the operator `ops-alice` through the API.
    admin.register(&ui_wait()).await.unwrap();
    let id = admin.start("ui_wait", json!({})).await.unwrap();
    weft_e2e::poll_until(
        crate::RUN_TIMEOUT,
        Duration::from_millis(50),
        || format!("the WAIT of {id} never became IN_PROGRESS"),
        || async {
            let wf = admin.get(&id).await?;
            Ok(crate::constructs::statuses(&wf)
                .iter()
                .any(|(r, s)| r == "hold" && s == "IN_PROGRESS")
                .then_some(()))
        },
    )
    .await
    .unwrap();
    let viewer = create_token(&admin, "viewer", &["read"]).await;
    let operator = create_token(&admin, "ops-alice", &["read", "operate"]).await;
    let reason = "stopped from the console";
    let terminated = suite
        .client()
        .with_token(&operator)
        .unwrap()
        .raw(
            reqwest::Method::DELETE,
            &format!("/api/workflow/{id}?reason={}", reason.replace(' ', "%20")),
            None,
        )
        .await
        .unwrap();
    assert!(
        (200..300).contains(&terminated.status),
        "terminate as ops-alice: {} {}",
        terminated.status,
        terminated.text
    );
    admin
        .wait_for_status(&id, &["TERMINATED"], crate::RUN_TIMEOUT)
        .await
        .unwrap();

    // The browser signs in with the read-only `viewer` token.
    let result = drive(
        &suite,
        &browser,
        "auth.mjs",
        &[
            ("WEFT_UI_WORKFLOW", id.as_str()),
            ("WEFT_UI_TOKEN", &viewer),
            ("WEFT_UI_OPERATOR", "ops-alice"),
            ("WEFT_UI_REASON", reason),
        ],
    )
    .await;
    // Every API call after the sign-in carried the token (the script counts them).
    assert!(
        result["authorizedCalls"].as_u64().is_some_and(|n| n >= 3),
        "{result}"
    );
}
