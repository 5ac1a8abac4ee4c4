//! Runs of any size (issue 20; docs/decider.md, "Runs of any size"): under the default
//! caps, a loop of more than 1,000 worker tasks and a dynamic fork of more than 1,000
//! branches complete (both failed before, on caps of 1,000), and a run of 10,000 tasks is
//! read page by page.

use std::time::Duration;

use serde_json::{json, Value};
use weft_e2e::Suite;

/// Bound on the 10,000-task run reaching its end in a debug build on a busy machine: a
/// bound, not a timing assertion.
const BIG_RUN_TIMEOUT: Duration = Duration::from_secs(900);

crate::on_both_backends!(
    a_loop_of_1500_worker_tasks_completes_under_the_default_cap,
    a_dynamic_fork_of_2000_worker_tasks_completes_under_the_default_cap,
    a_run_of_10000_tasks_is_read_page_by_page,
);

async fn a_loop_of_1500_worker_tasks_completes_under_the_default_cap(suite: Suite) {
    let client = suite.client();
    client
        .register(&json!({"name": "long_worker_loop", "version": 1, "tasks": [
            {"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
             "loopCondition": "$.loop['iteration'] < $.times",
             "inputParameters": {"times": "${workflow.input.times}"},
             "loopOver": [
                {"name": "make_name", "taskReferenceName": "name", "type": "SIMPLE",
                 "inputParameters": {"first": "${workflow.input.first}"}}]}],
         "outputParameters": {"iterations": "${loop.output.iteration}",
                              "last": "${name.output.name}"}}))
        .await
        .unwrap();
    let id = client
        .start("long_worker_loop", json!({"times": 1_500, "first": "Ada"}))
        .await
        .unwrap();
    let wf = ended_within(&suite, &id, BIG_RUN_TIMEOUT).await;
    assert_eq!(
        wf["output"],
        json!({"iterations": 1_500, "last": "Ada Weft"}),
        "{}",
        weft_e2e::client::summarize(&wf)
    );
}

async fn a_dynamic_fork_of_2000_worker_tasks_completes_under_the_default_cap(suite: Suite) {
    let client = suite.client();
    client
        .register(&json!({"name": "wide_fork", "version": 1, "tasks": [
            {"name": "fork", "taskReferenceName": "fork", "type": "FORK_JOIN_DYNAMIC",
             "inputParameters": {"forkTaskName": "make_name",
                                 "forkTaskInputs": "${workflow.input.people}"}},
            {"name": "join", "taskReferenceName": "join", "type": "JOIN"}],
         "outputParameters": {"joined": "${join.output}"}}))
        .await
        .unwrap();
    let people: Vec<Value> = (0..2_000)
        .map(|i| json!({"first": format!("P{i}")}))
        .collect();
    let id = client
        .start("wide_fork", json!({"people": people}))
        .await
        .unwrap();
    let wf = ended_within(&suite, &id, BIG_RUN_TIMEOUT).await;
    let joined = wf["output"]["joined"]
        .as_object()
        .unwrap_or_else(|| panic!("{}", weft_e2e::client::summarize(&wf)));
    assert_eq!(joined.len(), 2_000, "the JOIN holds every branch's output");
    assert_eq!(joined["make_name_0"], json!({"name": "P0 Weft"}));
    assert_eq!(joined["make_name_1999"], json!({"name": "P1999 Weft"}));
}

/// A loop over 10,000 items whose body is one SET_VARIABLE (no script, so a debug build
/// gets through it), read as a client of a big run would: the run without its tasks,
/// then the tasks in pages of 1,000.
async fn a_run_of_10000_tasks_is_read_page_by_page(suite: Suite) {
    const ITEMS: usize = 10_000;
    const PAGE: usize = 1_000;
    let client = suite.client();
    client
        .register(&json!({"name": "ten_thousand", "version": 1, "tasks": [
            {"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
             "items": "${workflow.input.items}",
             "loopOver": [
                {"name": "note", "taskReferenceName": "note", "type": "SET_VARIABLE",
                 "inputParameters": {"last": "${loop.output.loopItem}"}}]}],
         "outputParameters": {"iterations": "${loop.output.iteration}",
                              "last": "${workflow.variables.last}"}}))
        .await
        .unwrap();
    let items: Vec<usize> = (1..=ITEMS).collect();
    let id = client
        .start("ten_thousand", json!({"items": items}))
        .await
        .unwrap();
    ended_within(&suite, &id, BIG_RUN_TIMEOUT).await;

    let run = client
        .raw(
            reqwest::Method::GET,
            &format!("/api/workflow/{id}?includeTasks=false"),
            None,
        )
        .await
        .unwrap();
    let run = run.json.expect("a run");
    assert_eq!(run["status"], "COMPLETED");
    assert_eq!(run["output"], json!({"iterations": ITEMS, "last": ITEMS}));
    assert!(
        run["tasks"].as_array().is_none_or(Vec::is_empty),
        "no tasks without includeTasks"
    );

    let mut read: Vec<Value> = Vec::new();
    loop {
        let page = client
            .raw(
                reqwest::Method::GET,
                &format!("/api/workflow/{id}/tasks?start={}&count={PAGE}", read.len()),
                None,
            )
            .await
            .unwrap();
        assert_eq!(page.status, 200, "{}", page.text);
        let page = page.json.expect("a page");
        assert_eq!(page["totalHits"], json!(ITEMS + 1), "the loop and its body");
        let results = page["results"].as_array().expect("results").clone();
        assert!(results.len() <= PAGE);
        if results.is_empty() {
            break;
        }
        read.extend(results);
    }
    assert_eq!(read.len(), ITEMS + 1, "every task once");
    assert_eq!(read[0]["referenceTaskName"], "loop");
    for (i, task) in read[1..].iter().enumerate() {
        assert_eq!(
            task["referenceTaskName"],
            format!("note__{}", i + 1),
            "task {} of the pages, in schedule order",
            i + 1
        );
        assert_eq!(task["status"], "COMPLETED");
    }
    let completed = client
        .raw(
            reqwest::Method::GET,
            &format!("/api/workflow/{id}/tasks?status=COMPLETED&start=9990&count=100"),
            None,
        )
        .await
        .unwrap()
        .json
        .expect("a page");
    assert_eq!(completed["totalHits"], json!(ITEMS + 1));
    assert_eq!(completed["results"].as_array().map(Vec::len), Some(11));
}

/// Waits for run `id` to complete, up to `timeout`, reading it without its tasks every
/// 200 ms (a big run's every poll would otherwise carry thousands of them).
async fn ended_within(suite: &Suite, id: &str, timeout: Duration) -> Value {
    let deadline = tokio::time::Instant::now() + timeout;
    let path = format!("/api/workflow/{id}?includeTasks=false");
    loop {
        let got = suite
            .client()
            .raw(reqwest::Method::GET, &path, None)
            .await
            .unwrap();
        let status = got
            .json
            .as_ref()
            .and_then(|w| w["status"].as_str())
            .unwrap_or_default()
            .to_owned();
        match status.as_str() {
            "COMPLETED" => return got.json.expect("a run"),
            "" | "RUNNING" => {}
            other => panic!("run {id} ended {other}: {}\n{}", got.text, suite.describe()),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run {id} not COMPLETED after {timeout:?}: {}\n{}",
            got.text,
            suite.describe()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
