//! What the soak runs: one definition per construct, the input each run gets, what the
//! soak does to a run while it runs (a signal, a terminate), and the state a correct
//! run ends in.

use std::time::Duration;

use serde_json::{json, Value};

/// The kinds of run, each a construct (or an operation) of the DSL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `greet`: three activities in sequence on the example workers.
    Sequence,
    /// A FORK_JOIN of two branches and its JOIN.
    Fork,
    /// A DO_WHILE of three iterations.
    Loop,
    /// A SUB_WORKFLOW running `greet`.
    Child,
    /// A WAIT completed by a signal the soak sends, then an activity.
    Signal,
    /// A WAIT of a duration (a durable timer).
    Timer,
    /// An HTTP task against the soak's own HTTP server; the run's `onComplete` hook
    /// calls that server too.
    Http,
    /// An activity that fails its first attempt; retried after a back-off.
    Retry,
    /// A long activity (seconds) kept alive by heartbeats.
    Heartbeat,
    /// A run waiting on a signal, terminated by the operator instead.
    Terminate,
    /// A run waiting on a signal that never comes, whose WAIT the operator skips with an
    /// output instead; the run goes on to an activity.
    Skip,
    /// A run reset by the operator to its first activity once that completed: the
    /// activity's awaited rollback hook calls the soak's HTTP server, the new run does it
    /// again and waits for a signal, which completes it.
    Reset,
}

impl Kind {
    /// Every kind, in the order the soak cycles through them.
    pub const ALL: [Kind; 12] = [
        Kind::Sequence,
        Kind::Fork,
        Kind::Loop,
        Kind::Child,
        Kind::Signal,
        Kind::Timer,
        Kind::Http,
        Kind::Retry,
        Kind::Heartbeat,
        Kind::Terminate,
        Kind::Skip,
        Kind::Reset,
    ];

    /// The workflow it starts.
    pub fn workflow(self) -> &'static str {
        match self {
            Kind::Sequence => "greet",
            Kind::Fork => "soak_fork",
            Kind::Loop => "soak_loop",
            Kind::Child => "soak_child",
            Kind::Signal | Kind::Terminate | Kind::Skip => "soak_signal",
            Kind::Timer => "soak_timer",
            Kind::Http => "soak_http",
            Kind::Retry => "soak_retry",
            Kind::Heartbeat => "soak_heartbeat",
            Kind::Reset => "soak_reset",
        }
    }

    /// Whether its run's activities are the soak's own definitions', whose `onTimeout`
    /// hooks call the soak's server (`greet`, the example's, declares none).
    pub fn declares_timeout_hooks(self) -> bool {
        !matches!(self, Kind::Sequence | Kind::Child)
    }

    /// The status a correct run of this kind ends in.
    pub fn expected_status(self) -> &'static str {
        match self {
            Kind::Terminate => "TERMINATED",
            _ => "COMPLETED",
        }
    }

    /// The input of run number `n`.
    pub fn input(self, n: u64) -> Value {
        match self {
            Kind::Sequence | Kind::Child => weft_e2e::greet::input(&format!("S{n}"), 3),
            _ => json!({"first": format!("S{n}"), "key": n}),
        }
    }

    /// What the soak does to a started run, in order, each after its pause.
    pub fn interactions(self) -> Vec<(Duration, Interaction)> {
        let soon = Duration::from_millis(300);
        match self {
            Kind::Signal => vec![(soon, Interaction::Signal)],
            Kind::Terminate => vec![(soon, Interaction::Terminate)],
            Kind::Skip => vec![(soon, Interaction::Skip)],
            Kind::Reset => vec![(soon, Interaction::Reset), (soon, Interaction::Signal)],
            _ => Vec::new(),
        }
    }
}

/// An operator's or a client's act on a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interaction {
    /// `POST /api/workflow/{id}/signal/go` with `{"approved": true}`.
    Signal,
    /// `DELETE /api/workflow/{id}?reason=soak`.
    Terminate,
    /// `POST /api/workflow/{id}/reset` to the task `n1`, once it has completed.
    Reset,
    /// `PUT /api/workflow/{id}/skiptask/go` with `{"taskOutput": {"approved": "skipped"}}`.
    Skip,
}

/// The task definitions the soak's activities run under: every attempt of an example
/// worker's activity may be retried (a worker killed or paused mid-activity loses its
/// attempt to a timeout), with heartbeats due every few seconds.
pub fn task_definitions() -> Value {
    let retried = |name: &str, response_timeout: u64, delay: u64| {
        json!({"name": name, "retryCount": 10, "retryLogic": "FIXED",
               "retryDelaySeconds": delay, "responseTimeoutSeconds": response_timeout,
               "timeoutSeconds": 0, "ownerEmail": "soak@weft.dev"})
    };
    json!([
        retried("make_name", 5, 0),
        retried("shout", 5, 0),
        retried("count", 5, 0),
        retried("soak_flaky", 5, 1),
        retried("soak_long", 2, 0),
        retried("soak_call", 10, 1),
    ])
}

/// The soak's workflow definitions (besides `greet`), the HTTP task calling
/// `http_addr`. Every SIMPLE task of them declares an `onTimeout` hook calling the
/// soak's server (`with_timeout_hooks`).
pub fn definitions(http_addr: std::net::SocketAddr) -> Vec<Value> {
    let hook = json!({"url": format!("http://{http_addr}/hook")});
    let mut definitions = plain_definitions(http_addr);
    for definition in &mut definitions {
        with_timeout_hooks(&mut definition["tasks"], &hook);
    }
    definitions
}

/// Declares `hook` as the `onTimeout` hook of every SIMPLE task in `tasks`, nested ones
/// (fork branches, loop bodies) included, beside the hooks a task declares already.
fn with_timeout_hooks(tasks: &mut Value, hook: &Value) {
    for task in tasks.as_array_mut().into_iter().flatten() {
        if task["type"] == "SIMPLE" {
            task["hooks"]["onTimeout"] = hook.clone();
        }
        with_timeout_hooks(&mut task["loopOver"], hook);
        for branch in task["forkTasks"].as_array_mut().into_iter().flatten() {
            with_timeout_hooks(branch, hook);
        }
    }
}

/// The soak's definitions as written, without the timeout hooks.
fn plain_definitions(http_addr: std::net::SocketAddr) -> Vec<Value> {
    vec![
        json!({"name": "soak_fork", "version": 1, "tasks": [
            {"name": "f", "taskReferenceName": "f", "type": "FORK_JOIN", "forkTasks": [
                [{"name": "make_name", "taskReferenceName": "fa", "type": "SIMPLE",
                  "inputParameters": {"first": "${workflow.input.first}"}}],
                [{"name": "count", "taskReferenceName": "fb", "type": "SIMPLE",
                  "inputParameters": {"text": "x", "n": 2}}]]},
            {"name": "j", "taskReferenceName": "j", "type": "JOIN", "joinOn": ["fa", "fb"]}],
         "outputParameters": {"name": "${fa.output.name}", "count": "${fb.output.result}"}}),
        json!({"name": "soak_loop", "version": 1, "tasks": [
            {"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
             "loopCondition": "$.loop['iteration'] < 3",
             "loopOver": [
                {"name": "count", "taskReferenceName": "c", "type": "SIMPLE",
                 "inputParameters": {"text": "l", "n": 1}}]}],
         "outputParameters": {"iterations": "${loop.output.iteration}"}}),
        json!({"name": "soak_child", "version": 1, "tasks": [
            {"name": "kid", "taskReferenceName": "kid", "type": "SUB_WORKFLOW",
             "inputParameters": {"first": "${workflow.input.first}", "n": 3},
             "subWorkflowParam": {"name": "greet"}}],
         "outputParameters": {"result": "${kid.output.result}"}}),
        json!({"name": "soak_signal", "version": 1, "tasks": [
            {"name": "go", "taskReferenceName": "go", "type": "WAIT"},
            {"name": "make_name", "taskReferenceName": "n", "type": "SIMPLE",
             "inputParameters": {"first": "${workflow.input.first}"}}],
         "outputParameters": {"approved": "${go.output.approved}", "name": "${n.output.name}"}}),
        json!({"name": "soak_reset", "version": 1, "tasks": [
            {"name": "make_name", "taskReferenceName": "n1", "type": "SIMPLE",
             "inputParameters": {"first": "${workflow.input.first}"},
             "hooks": {"onRollback": {"url": format!("http://{http_addr}/hook"), "await": true}}},
            {"name": "go", "taskReferenceName": "go", "type": "WAIT"},
            {"name": "make_name", "taskReferenceName": "n2", "type": "SIMPLE",
             "inputParameters": {"first": "${n1.output.name}"}}],
         "outputParameters": {"approved": "${go.output.approved}", "name": "${n2.output.name}"}}),
        json!({"name": "soak_timer", "version": 1, "tasks": [
            {"name": "nap", "taskReferenceName": "nap", "type": "WAIT",
             "inputParameters": {"duration": "2s"}},
            {"name": "make_name", "taskReferenceName": "n", "type": "SIMPLE",
             "inputParameters": {"first": "${workflow.input.first}"}}],
         "outputParameters": {"name": "${n.output.name}"}}),
        json!({"name": "soak_http", "version": 1,
               "hooks": {"onComplete": {"url": format!("http://{http_addr}/hook")}},
               "tasks": [
            {"name": "soak_call", "taskReferenceName": "call", "type": "HTTP",
             "inputParameters": {"http_request": {
                 "uri": format!("http://{http_addr}/call/${{workflow.input.key}}"),
                 "method": "GET"}}}],
         "outputParameters": {"body": "${call.output.response.body}"}}),
        json!({"name": "soak_retry", "version": 1, "tasks": [
            {"name": "soak_flaky", "taskReferenceName": "flaky", "type": "SIMPLE",
             "inputParameters": {"key": "${workflow.input.key}"}}],
         "outputParameters": {"attempt": "${flaky.output.attempt}"}}),
        json!({"name": "soak_heartbeat", "version": 1, "tasks": [
            {"name": "soak_long", "taskReferenceName": "long", "type": "SIMPLE",
             "inputParameters": {"key": "${workflow.input.key}"}}],
         "outputParameters": {"done": "${long.output.done}"}}),
    ]
}

/// Checks a run's output against what its kind and run number dictate.
pub fn check_output(kind: Kind, n: u64, wf: &Value) -> Result<(), String> {
    let output = &wf["output"];
    let name = format!("S{n} Weft");
    let ok = match kind {
        // A worker frozen past a task's response timeout (a fault the soak injects)
        // leaves a timed-out attempt before the one that completes.
        Kind::Sequence => {
            return weft_e2e::greet::check_run_after_timeouts(wf, &format!("S{n}"), 3)
        }
        Kind::Fork => output["name"] == name.as_str(),
        Kind::Loop => output["iterations"] == 3,
        Kind::Child => {
            output["result"] == weft_e2e::greet::expected_output(&format!("S{n}"), 3)["result"]
        }
        Kind::Signal => output["approved"] == true && output["name"] == name.as_str(),
        Kind::Skip => output["approved"] == "skipped" && output["name"] == name.as_str(),
        Kind::Timer => output["name"] == name.as_str(),
        Kind::Http => output["body"]["key"] == n,
        // Attempt 1 completes only where its task was delivered twice (checked with the
        // worker's counts in `checks`): the first execution fails, on purpose.
        Kind::Retry => output["attempt"].as_i64().is_some_and(|a| a >= 1),
        Kind::Heartbeat => output["done"] == true,
        Kind::Terminate => true,
        Kind::Reset => output["approved"] == true && output["name"] == format!("{name} Weft"),
    };
    match ok {
        true => Ok(()),
        false => Err(format!("{kind:?} run {n}: unexpected output {output}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_simple_task_of_the_soaks_definitions_declares_a_timeout_hook() {
        let addr: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
        let mut simple = 0;
        fn visit(tasks: &Value, simple: &mut usize) {
            for t in tasks.as_array().into_iter().flatten() {
                if t["type"] == "SIMPLE" {
                    assert_eq!(
                        t["hooks"]["onTimeout"]["url"], "http://127.0.0.1:9/hook",
                        "{t}"
                    );
                    *simple += 1;
                }
                visit(&t["loopOver"], simple);
                for b in t["forkTasks"].as_array().into_iter().flatten() {
                    visit(b, simple);
                }
            }
        }
        for d in definitions(addr) {
            visit(&d["tasks"], &mut simple);
        }
        // fork 2, loop 1, signal 1, reset 2, timer 1, retry 1, heartbeat 1
        assert_eq!(simple, 9);
        let reset = definitions(addr)
            .into_iter()
            .find(|d| d["name"] == "soak_reset")
            .unwrap();
        assert_eq!(reset["tasks"][0]["hooks"]["onRollback"]["await"], true);
    }
}
