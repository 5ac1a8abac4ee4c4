//! Starts sent together (`WEFT_STARTS_TOGETHER=true`, docs/decider.md, "Starts sent
//! together") over the real services: starts accepted for one command shard that meet
//! behind a message in flight go as one `StartWorkflows` message, and the decider starts
//! each run of it once, as it would have alone.

use tokio_util::sync::CancellationToken;
use weft::bus::Bus;
use weft::topology::Names;
use weft_e2e::{greet, EnvOptions, Service, Suite, TestEnv};

use crate::{assert_all_completed, start_greets};

/// Starts sent at once: far more than one message in flight to one shard can carry.
const RUNS: usize = 48;

/// The gateway's start messages so far: `(StartWorkflow alone, StartWorkflows)`.
async fn start_messages(suite: &Suite) -> (u64, u64) {
    let (mut alone, mut together) = (0, 0);
    for text in suite.metrics_of(Service::Gateway).await.unwrap() {
        for ((kind, delivery), n) in weft_e2e::metrics::published(&text) {
            match (kind.as_str(), delivery.as_str()) {
                ("StartWorkflow", "persistent") => alone += n,
                ("StartWorkflows", "persistent") => together += n,
                _ => {}
            }
        }
    }
    (alone, together)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_for_one_shard_that_meet_go_as_one_message_and_each_starts_its_run_once() {
    let options = EnvOptions {
        // One shard: every start goes to the same queue, so starts sent at once meet.
        shards: 1,
        // The services' default (5 s): the suite's 500 ms would re-publish rows whose
        // publish is merely slow on a busy box, and a start sent again would hide a
        // message of starts the decider refused.
        outbox_sweep_after_ms: None,
        extra_env: vec![("WEFT_STARTS_TOGETHER".into(), "true".into())],
        ..EnvOptions::default()
    };
    let suite = Suite::start(TestEnv::create(options).await.unwrap())
        .await
        .unwrap();
    suite.client().register(&greet::definition()).await.unwrap();

    let runs = start_greets(&suite, "Together", RUNS).await;
    assert_all_completed(&suite, &runs).await;

    let (alone, together) = start_messages(&suite).await;
    assert!(
        together >= 1,
        "{RUNS} starts at once for one shard, none went with another ({alone} alone)"
    );
    assert!(
        alone + 2 * together <= RUNS as u64,
        "{RUNS} starts in {alone} messages alone and {together} together: a message of \
         starts carries two or more"
    );
    // Nothing refused: a message of starts the decider could not use would be in the
    // shard's dead-letter queue (and its starts sent alone by the sweeper later).
    let names = suite.env().names();
    let bus = Bus::connect(
        &suite.env().amqp_url,
        names.clone(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let dlq = Names::dlq(&names.command_queue(0));
    assert_eq!(
        bus.message_count(&dlq).await.unwrap(),
        0,
        "nothing dead-lettered"
    );
    // Each start made one run: a workflow id's run is the start's and no other.
    let client = suite.client();
    for (id, _, _) in &runs {
        let run = client.get(id).await.unwrap();
        assert_eq!(run["workflowId"], id.as_str(), "{run}");
    }
}
