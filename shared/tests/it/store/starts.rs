//! Accepted starts (idempotent by key) and task logs.

use chrono::Duration;
use serde_json::json;
use uuid::Uuid;
use weft::store::outbox::OutboxMessage;
use weft::store::starts::{NewStart, StartOutcome};
use weft::store::task_api::TaskLog;
use weft::store::Store;

use super::now;

fn start(workflow_id: &str, key: Option<&str>) -> NewStart {
    NewStart {
        workflow_id: workflow_id.into(),
        idempotency_key: key.map(str::to_owned),
        workflow_name: "wf".into(),
        workflow_version: 1,
        input: json!({"order": 7}),
        correlation_id: Some("c-1".into()),
    }
}

fn message() -> OutboxMessage {
    OutboxMessage {
        id: Uuid::now_v7(),
        exchange: "weft.commands".into(),
        routing_key: "cmd.0".into(),
        body: b"start".to_vec(),
        traceparent: None,
        raw: false,
    }
}

store_test!(accept_start_is_idempotent_by_key);
async fn accept_start_is_idempotent_by_key(store: &Store) {
    let first = store
        .accept_start(&start("wf-1", Some("key-1")), &mut [message()], None)
        .await
        .unwrap();
    assert_eq!(first, StartOutcome::Accepted);
    let row = store.get_start("wf-1").await.unwrap().expect("start row");
    assert_eq!(row.idempotency_key.as_deref(), Some("key-1"));
    assert_eq!(row.workflow_version, 1);
    assert_eq!(row.input, json!({"order": 7}));
    assert_eq!(row.correlation_id.as_deref(), Some("c-1"));
    assert!((chrono::Utc::now() - row.created_at).num_seconds().abs() < 60);

    // The same key again answers the first workflow id and writes nothing.
    let again = store
        .accept_start(&start("wf-2", Some("key-1")), &mut [message()], None)
        .await
        .unwrap();
    assert_eq!(again, StartOutcome::Existing("wf-1".into()));
    assert!(store.get_start("wf-2").await.unwrap().is_none());

    // Without a key every start is new.
    for id in ["wf-3", "wf-4"] {
        assert_eq!(
            store
                .accept_start(&start(id, None), &mut [], None)
                .await
                .unwrap(),
            StartOutcome::Accepted
        );
    }
    assert!(store.get_start("wf-4").await.unwrap().is_some());
    assert!(store.get_start("wf-none").await.unwrap().is_none());
}

store_test!(task_logs_come_back_in_append_order);
async fn task_logs_come_back_in_append_order(store: &Store) {
    let task_id = Uuid::new_v4();
    let t = now();
    // Out of time order on purpose: the order is the append order.
    let lines = vec![
        TaskLog {
            log: "second by time".into(),
            created_time: t + Duration::seconds(1),
        },
        TaskLog {
            log: "first by time".into(),
            created_time: t,
        },
    ];
    store.append_task_logs(task_id, &lines).await.unwrap();
    store.append_task_logs(task_id, &[]).await.unwrap();
    let third = TaskLog {
        log: "third".into(),
        created_time: t + Duration::seconds(2),
    };
    store
        .append_task_logs(task_id, std::slice::from_ref(&third))
        .await
        .unwrap();
    store
        .append_task_logs(
            Uuid::new_v4(),
            &[TaskLog {
                log: "another task".into(),
                created_time: t,
            }],
        )
        .await
        .unwrap();

    let mut expected = lines;
    expected.push(third);
    assert_eq!(store.task_logs(task_id).await.unwrap(), expected);
    assert!(store.task_logs(Uuid::new_v4()).await.unwrap().is_empty());
}

store_test!(concurrent_starts_with_one_key_make_one_start);
async fn concurrent_starts_with_one_key_make_one_start(store: &Store) {
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let id = format!("wf-race-{i}");
                store
                    .accept_start(&start(&id, Some("race")), &mut [message()], None)
                    .await
                    .map(|outcome| (id, outcome))
            })
        })
        .collect();
    let mut accepted = Vec::new();
    let mut existing = Vec::new();
    for task in tasks {
        match task.await.expect("join").expect("accept_start") {
            (id, StartOutcome::Accepted) => accepted.push(id),
            (_, StartOutcome::Existing(first)) => existing.push(first),
        }
    }
    assert_eq!(accepted.len(), 1, "{accepted:?}");
    assert_eq!(existing.len(), 7);
    assert!(existing.iter().all(|id| *id == accepted[0]));
}
