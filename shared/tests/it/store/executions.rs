//! Conductor's execution lookups (by correlation id, running ids) and the removal of an
//! ended workflow.

use chrono::Duration;
use serde_json::json;
use uuid::Uuid;
use weft::store::executions::{Removal, RunningFilter};
use weft::store::runs::{CommitBatch, RunRecord};
use weft::store::starts::NewStart;
use weft::store::Store;

use super::{now, run, started, task, variables};

/// A new run of `wf`, definition `name`, with `correlation` and `status`.
fn run_of(wf: &str, name: &str, correlation: &str, status: &str) -> RunRecord {
    let mut r = run(wf, Uuid::new_v4(), 1);
    r.workflow_name = name.into();
    r.correlation_id = Some(correlation.into());
    r.status = status.into();
    if status != "RUNNING" {
        r.end_time = Some(now());
    }
    r
}

store_test!(runs_are_found_by_name_and_correlation_id);
async fn runs_are_found_by_name_and_correlation_id(store: &Store) {
    let runs = vec![
        run_of("c-1", "orders", "cart-1", "RUNNING"),
        run_of("c-2", "orders", "cart-1", "COMPLETED"),
        run_of("c-3", "orders", "cart-2", "RUNNING"),
        run_of("c-4", "refunds", "cart-1", "RUNNING"),
        run_of("c-5", "orders", "cart-3", "PAUSED"),
    ];
    let events = runs.iter().map(|r| started(r.run_id)).collect();
    store
        .commit(&CommitBatch {
            new_runs: runs,
            events,
            ..CommitBatch::default()
        })
        .await
        .unwrap();

    let ids = |runs: Vec<weft::store::reads::RunView>| {
        let mut ids: Vec<String> = runs.into_iter().map(|r| r.workflow_id).collect();
        ids.sort();
        ids
    };
    let cart_1 = vec!["cart-1".to_owned()];
    assert_eq!(
        ids(store
            .runs_by_correlation("orders", &cart_1, false)
            .await
            .unwrap()),
        vec!["c-1"]
    );
    assert_eq!(
        ids(store
            .runs_by_correlation("orders", &cart_1, true)
            .await
            .unwrap()),
        vec!["c-1", "c-2"]
    );
    let many = vec![
        "cart-1".to_owned(),
        "cart-2".to_owned(),
        "cart-3".to_owned(),
    ];
    assert_eq!(
        ids(store
            .runs_by_correlation("orders", &many, true)
            .await
            .unwrap()),
        vec!["c-1", "c-2", "c-3", "c-5"]
    );
    // PAUSED is not RUNNING: Conductor leaves it out unless closed runs are asked for.
    assert_eq!(
        ids(store
            .runs_by_correlation("orders", &many, false)
            .await
            .unwrap()),
        vec!["c-1", "c-3"]
    );
    assert!(store
        .runs_by_correlation("nothing", &many, true)
        .await
        .unwrap()
        .is_empty());
    assert!(store
        .runs_by_correlation("orders", &[], true)
        .await
        .unwrap()
        .is_empty());
}

store_test!(running_ids_by_version_and_by_start_window);
async fn running_ids_by_version_and_by_start_window(store: &Store) {
    let mut old = run_of("r-old", "orders", "x", "COMPLETED");
    old.start_time = now() - Duration::hours(2);
    let mut v2 = run_of("r-v2", "orders", "x", "RUNNING");
    v2.workflow_version = 2;
    let runs = vec![
        run_of("r-1", "orders", "x", "RUNNING"),
        run_of("r-2", "orders", "x", "RUNNING"),
        run_of("r-done", "orders", "x", "FAILED"),
        old,
        v2,
    ];
    let events = runs.iter().map(|r| started(r.run_id)).collect();
    store
        .commit(&CommitBatch {
            new_runs: runs,
            events,
            ..CommitBatch::default()
        })
        .await
        .unwrap();

    let mut running = store
        .running_workflow_ids("orders", 1, &RunningFilter::Running)
        .await
        .unwrap();
    running.sort();
    assert_eq!(running, vec!["r-1", "r-2"]);
    assert_eq!(
        store
            .running_workflow_ids("orders", 2, &RunningFilter::Running)
            .await
            .unwrap(),
        vec!["r-v2"]
    );
    let window = RunningFilter::StartedBetween {
        from: now() - Duration::minutes(5),
        to: now() + Duration::minutes(5),
    };
    let mut recent = store
        .running_workflow_ids("orders", 1, &window)
        .await
        .unwrap();
    recent.sort();
    assert_eq!(recent, vec!["r-1", "r-2", "r-done"]);
}

store_test!(an_ended_workflow_is_removed_whole_and_a_running_one_is_kept);
async fn an_ended_workflow_is_removed_whole_and_a_running_one_is_kept(store: &Store) {
    let ended = run_of("rm-ended", "orders", "x", "COMPLETED");
    let running = run_of("rm-running", "orders", "x", "RUNNING");
    let mut done_task = task(&ended, "a", 0);
    done_task.status = "COMPLETED".into();
    let live_task = task(&running, "a", 0);
    store
        .commit(&CommitBatch {
            events: vec![
                started(ended.run_id),
                variables(ended.run_id, 2),
                started(running.run_id),
            ],
            tasks: vec![done_task.clone(), live_task.clone()],
            new_runs: vec![ended.clone(), running.clone()],
            ..CommitBatch::default()
        })
        .await
        .unwrap();
    store
        .append_task_logs(
            done_task.task_id,
            &[weft::store::task_api::TaskLog {
                log: "done".into(),
                created_time: now(),
            }],
        )
        .await
        .unwrap();
    let mut nothing = Vec::new();
    store
        .accept_start(
            &NewStart {
                workflow_id: "rm-ended".into(),
                idempotency_key: Some("key-rm".into()),
                workflow_name: "orders".into(),
                workflow_version: 1,
                input: json!({}),
                correlation_id: None,
            },
            &mut nothing,
            None,
        )
        .await
        .unwrap();

    assert_eq!(
        store.remove_workflow("rm-running").await.unwrap(),
        Removal::NotEnded {
            status: "RUNNING".into()
        }
    );
    assert_eq!(
        store.remove_workflow("rm-ended").await.unwrap(),
        Removal::Removed
    );
    assert_eq!(
        store.remove_workflow("rm-ended").await.unwrap(),
        Removal::NotFound
    );
    assert!(store.current_run("rm-ended").await.unwrap().is_none());
    assert!(store.get_start("rm-ended").await.unwrap().is_none());
    assert!(store.run_events(ended.run_id).await.unwrap().is_empty());
    assert!(store.tasks_of_run(ended.run_id).await.unwrap().is_empty());
    assert!(store.task_logs(done_task.task_id).await.unwrap().is_empty());
    // The idempotency key is free again.
    let outcome = store
        .accept_start(
            &NewStart {
                workflow_id: "rm-again".into(),
                idempotency_key: Some("key-rm".into()),
                workflow_name: "orders".into(),
                workflow_version: 1,
                input: json!({}),
                correlation_id: None,
            },
            &mut nothing,
            None,
        )
        .await
        .unwrap();
    assert_eq!(outcome, weft::store::starts::StartOutcome::Accepted);
    // The running workflow is untouched.
    assert_eq!(
        store.tasks_of_run(running.run_id).await.unwrap().len(),
        1,
        "the running workflow's tasks stay"
    );
    // A start not applied yet counts as running.
    assert_eq!(
        store.remove_workflow("rm-again").await.unwrap(),
        Removal::NotEnded {
            status: "RUNNING".into()
        }
    );
    // A decider commit to the removed run finds its version gone.
    let mut stale = ended.clone();
    stale.version = 2;
    let conflict = store
        .commit(&CommitBatch {
            updated_runs: vec![(stale, 1)],
            ..CommitBatch::default()
        })
        .await;
    assert!(
        matches!(conflict, Err(weft::Error::VersionConflict { .. })),
        "{conflict:?}"
    );
}

store_test!(poll_data_keeps_the_newest_poll_of_each_task_type);
async fn poll_data_keeps_the_newest_poll_of_each_task_type(store: &Store) {
    use weft::store::poll_data::PollData;
    let base = now();
    let at = |secs: i64| base - Duration::seconds(secs);
    let poll = |task: &str, worker: &str, secs: i64| PollData {
        task_name: task.into(),
        domain: String::new(),
        worker_id: worker.into(),
        last_poll_time: at(secs),
    };
    store
        .record_poll_data(&[poll("charge", "w1", 30), poll("ship", "w2", 20)])
        .await
        .unwrap();
    // A newer poll replaces the older; an older one (a slower writer) does not.
    store
        .record_poll_data(&[poll("charge", "w3", 10)])
        .await
        .unwrap();
    store
        .record_poll_data(&[poll("charge", "w0", 60)])
        .await
        .unwrap();
    let charge = store.poll_data(Some("charge")).await.unwrap();
    assert_eq!(charge, vec![poll("charge", "w3", 10)]);
    let all = store.poll_data(None).await.unwrap();
    assert_eq!(
        all.iter().map(|p| p.task_name.as_str()).collect::<Vec<_>>(),
        ["charge", "ship"]
    );
    assert!(store.poll_data(Some("nothing")).await.unwrap().is_empty());
    store.record_poll_data(&[]).await.unwrap();
}
