//! A run with more to decide than one command may settle — a long loop of system tasks,
//! which the decider runs itself — commits it in slices and goes on behind its shard's
//! other commands (docs/decider.md, "Long settles in slices"). Before, a DO_WHILE of
//! 1,200 INLINE iterations stayed RUNNING forever: its command failed ("produced
//! decisions for 1000 rounds") and was requeued every couple of seconds.

use serde_json::json;
use weft_e2e::{Backend, EnvOptions, Service, Suite};

/// The loop that stayed RUNNING forever: more than a slice's worth (a slice is 1,000
/// rounds of decisions).
const ITERATIONS: u32 = 1_200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_of_system_tasks_longer_than_a_slice_completes_on_services() {
    a_loop_of_system_tasks_longer_than_a_slice_completes(Backend::Services).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_of_system_tasks_longer_than_a_slice_completes_on_weft_dev() {
    a_loop_of_system_tasks_longer_than_a_slice_completes(Backend::Dev).await;
}

async fn a_loop_of_system_tasks_longer_than_a_slice_completes(backend: Backend) {
    let options = EnvOptions {
        extra_env: vec![("WEFT_MAX_LOOP_ITERATIONS".into(), "10000".into())],
        ..EnvOptions::default()
    };
    let suite = Suite::start_on_with(backend, options).await.unwrap();
    let client = suite.client();
    client
        .register(&json!({"name": "inline_loop", "version": 1, "tasks": [
            {"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
             "loopCondition": "$.loop['iteration'] < $.times",
             "inputParameters": {"times": "${workflow.input.times}"},
             "loopOver": [
                {"name": "step", "taskReferenceName": "step", "type": "INLINE",
                 "inputParameters": {"evaluatorType": "javascript", "expression": "1 + 1"}}]},
            {"name": "after", "taskReferenceName": "after", "type": "INLINE",
             "inputParameters": {"evaluatorType": "javascript", "expression": "'done'"}}],
         "outputParameters": {"iterations": "${loop.output.iteration}",
                              "after": "${after.output.result}"}}))
        .await
        .unwrap();
    // A short run of the same shard's traffic beside it completes too.
    let long = client
        .start("inline_loop", json!({"times": ITERATIONS}))
        .await
        .unwrap();
    let short = client
        .start("inline_loop", json!({"times": 2}))
        .await
        .unwrap();
    let wf = crate::ended(&suite, &short, "COMPLETED").await;
    assert_eq!(wf["output"], json!({"iterations": 2, "after": "done"}));
    let wf = crate::ended(&suite, &long, "COMPLETED").await;
    assert_eq!(
        wf["output"],
        json!({"iterations": ITERATIONS, "after": "done"}),
        "{}",
        weft_e2e::client::summarize(&wf)
    );
    let steps = wf["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| {
            t["referenceTaskName"]
                .as_str()
                .is_some_and(|r| r.starts_with("step"))
        })
        .count();
    assert_eq!(steps, ITERATIONS as usize, "one INLINE task an iteration");
    if backend == Backend::Services {
        let texts = suite.metrics_of(Service::Decider).await.unwrap();
        let slices: u64 = texts
            .iter()
            .map(|t| weft_e2e::metrics::counter(t, "weft_decider_settle_slices"))
            .sum();
        assert!(slices >= 1, "the long run went on in a slice: {slices}");
    }
}
