//! The happy path across all processes.

use weft_e2e::{greet, Suite, TestEnv};

use crate::{assert_all_completed, start_greets};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_greets_complete_in_order() {
    let suite = Suite::start(TestEnv::new().await.unwrap()).await.unwrap();
    suite.client().register(&greet::definition()).await.unwrap();

    let runs = start_greets(&suite, "Ada", 20).await;

    let mut ids: Vec<&str> = runs.iter().map(|(id, _, _)| id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 20, "every start gets its own workflow id");
    assert_all_completed(&suite, &runs).await;
}
