//! The heartbeat registry's rows (`task_check`) on both backends.

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use futures_util::future::BoxFuture;
use uuid::Uuid;
use weft::messages::{AttemptRef, AttemptStarted, Command};
use weft::registry::rows::{BeatWrite, End, Liveness};
use weft::registry::AttemptStatus;
use weft::Envelope;

use super::Env;

fn started(task_id: Uuid, attempt: i32, worker: &str, timeout: i64) -> AttemptStarted {
    AttemptStarted {
        attempt: AttemptRef { task_id, attempt },
        workflow_id: "wf-reg".into(),
        run_id: Uuid::from_u128(7),
        task_name: "work".into(),
        task_ref: "work_ref".into(),
        worker_id: worker.into(),
        response_timeout_seconds: timeout,
        input_bytes: 12,
        reply_to: String::new(),
        started_at: Utc::now(),
    }
}

fn end(task_id: Uuid, attempt: i32, status: AttemptStatus, reason: Option<&str>) -> End<'_> {
    End {
        attempt: AttemptRef { task_id, attempt },
        status,
        reason,
        output_bytes: Some(3),
    }
}

bus_test!(registry_registers_beats_and_ends_attempts, register);
async fn register(env: &Env) -> Vec<String> {
    let store = &env.store;
    let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    // The last registration of a repeated attempt wins.
    let rows = store
        .insert_started_many(&[
            started(a, 1, "w1", 30),
            started(b, 1, "w1", 0),
            started(a, 1, "w2", 60),
        ])
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    let row_a = rows.iter().find(|r| r.task_id == a).unwrap();
    assert_eq!(
        (row_a.status, row_a.timeout_seconds),
        (AttemptStatus::Running, 60)
    );
    let check = store.task_check(a).await.unwrap().unwrap();
    assert_eq!(check.worker_id.as_deref(), Some("w2"));
    let expires = check.expires_at.unwrap();
    assert!(expires > Utc::now() + TimeDelta::seconds(55));
    assert!(store
        .task_check(b)
        .await
        .unwrap()
        .unwrap()
        .expires_at
        .is_none());

    // An end before the registration creates the row in its end status; the registration
    // then fills in the details and keeps the status.
    let ended = store
        .end_each(&[end(c, 1, AttemptStatus::Completed, None)])
        .await
        .unwrap();
    assert_eq!(ended[0].status, AttemptStatus::Completed);
    let rows = store
        .insert_started_many(&[started(c, 1, "w3", 30)])
        .await
        .unwrap();
    assert_eq!(rows[0].status, AttemptStatus::Completed);
    let check = store.task_check(c).await.unwrap().unwrap();
    assert_eq!(
        (check.workflow_id.as_str(), check.output_bytes),
        ("wf-reg", Some(3))
    );

    // Beats: only RUNNING rows; never backwards; the deadline follows when watched.
    let now_ms = Utc::now().timestamp_millis();
    let beat = |task_id, at_ms, details: Option<&str>| BeatWrite {
        task_id,
        attempt: 1,
        at_ms,
        details: details.map(str::to_owned),
    };
    let written = store
        .write_beats(&[
            beat(a, Some(now_ms + 5_000), Some(r#"{"p": 1}"#)),
            beat(c, None, None),
        ])
        .await
        .unwrap();
    assert_eq!(written, 1);
    store
        .write_beats(&[beat(a, Some(now_ms - 60_000), None)])
        .await
        .unwrap();
    let check = store.task_check(a).await.unwrap().unwrap();
    let last = check.last_heartbeat_at.unwrap();
    assert_eq!(last.timestamp_millis(), now_ms + 5_000);
    assert_eq!(check.expires_at.unwrap(), last + TimeDelta::seconds(60));
    assert_eq!(check.details, Some(serde_json::json!({"p": 1})));
    store.write_beats(&[beat(b, None, None)]).await.unwrap();
    let check = store.task_check(b).await.unwrap().unwrap();
    assert!(check.last_heartbeat_at.is_some() && check.expires_at.is_none());

    // The first end wins, in a batch and later.
    let rows = store
        .end_each(&[
            end(a, 1, AttemptStatus::Stopped, Some("reset")),
            end(a, 1, AttemptStatus::Failed, Some("boom")),
        ])
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].status, rows[0].reason.as_deref()),
        (AttemptStatus::Stopped, Some("reset"))
    );
    let rows = store
        .end_each(&[end(a, 1, AttemptStatus::Completed, None)])
        .await
        .unwrap();
    assert_eq!(rows[0].status, AttemptStatus::Stopped);
    assert_eq!(store.write_beats(&[beat(a, None, None)]).await.unwrap(), 0);

    // The newest attempt of each task.
    store
        .insert_started_many(&[started(a, 2, "w4", 0)])
        .await
        .unwrap();
    let mut latest = store.load_latest(&[a, b, Uuid::now_v7()]).await.unwrap();
    latest.sort_by_key(|r| r.task_id);
    assert_eq!(
        latest
            .iter()
            .map(|r| (r.task_id, r.attempt))
            .collect::<Vec<_>>(),
        [(a, 2), (b, 1)]
    );
    assert_eq!(store.task_check(a).await.unwrap().unwrap().attempt, 2);

    // Retention: ended attempts (a#1 and c#1) go.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        store.purge_task_checks(Duration::ZERO, 100).await.unwrap(),
        2
    );
    assert!(store.task_check(c).await.unwrap().is_none());
    assert_eq!(store.task_check(a).await.unwrap().unwrap().attempt, 2);
    Vec::new()
}

bus_test!(
    registry_scan_times_out_the_silent_and_extends_the_live,
    scan
);
async fn scan(env: &Env) -> Vec<String> {
    let store = &env.store;
    let (live, silent, unsure) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    store
        .insert_started_many(&[
            started(live, 1, "w", 1),
            started(silent, 1, "w", 1),
            started(unsure, 1, "w", 1),
        ])
        .await
        .unwrap();
    let nothing =
        |_: Vec<Uuid>| -> BoxFuture<'static, Option<Vec<Liveness>>> { Box::pin(async { None }) };
    let outcome = store
        .scan_expired(&env.names, 10, Duration::ZERO, &nothing)
        .await
        .unwrap();
    assert_eq!(outcome.report.candidates, 0, "not expired yet");
    tokio::time::sleep(Duration::from_millis(1_200)).await;

    let probe = move |ids: Vec<Uuid>| -> BoxFuture<'static, Option<Vec<Liveness>>> {
        let now_ms = Utc::now().timestamp_millis();
        let lives = ids
            .iter()
            .map(|id| Liveness {
                now_ms,
                last_ms: if *id == live {
                    Some(now_ms - 100)
                } else if *id == silent {
                    Some(now_ms - 10_000)
                } else {
                    None
                },
            })
            .collect();
        Box::pin(async move { Some(lives) })
    };
    // A write interval of an hour: the deadline of `unsure` has not surely passed, and
    // the cache knows nothing of it: deferred.
    let outcome = store
        .scan_expired(&env.names, 10, Duration::from_secs(3600), &probe)
        .await
        .unwrap();
    assert_eq!(outcome.report.candidates, 3);
    assert_eq!(outcome.report.extended, 1);
    assert_eq!(outcome.report.timed_out, 1);
    assert_eq!(outcome.report.deferred, 1);
    assert_eq!(outcome.expired, [(silent, 1, 1)]);
    assert_eq!(outcome.messages.len(), 1);
    let envelope = Envelope::from_bytes(&outcome.messages[0].body).unwrap();
    match envelope.decode::<Command>().unwrap() {
        Command::ActivityTimedOut(t) => {
            assert_eq!((t.task_id, t.attempt), (silent, 1));
            assert_eq!(t.reason, "no heartbeat for 1s (responseTimeoutSeconds)");
        }
        other => panic!("unexpected {other:?}"),
    }
    let check = store.task_check(silent).await.unwrap().unwrap();
    assert_eq!(check.status, AttemptStatus::TimedOut);
    assert!(check.stop_reason.unwrap().starts_with("no heartbeat"));
    let check = store.task_check(live).await.unwrap().unwrap();
    assert_eq!(check.status, AttemptStatus::Running);
    assert!(check.expires_at.unwrap() > Utc::now());
    // The message is in the outbox, for the caller (or the sweeper) to publish.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let queue = env.listen(&env.names.command_key_for("wf-reg")).await;
    assert_eq!(
        store
            .sweep_outbox(&env.bus, Duration::ZERO, 10)
            .await
            .unwrap(),
        1
    );
    assert_eq!(env.take(&queue, 1).await.len(), 1);

    // Surely passed and no evidence: expired.
    let outcome = store
        .scan_expired(&env.names, 10, Duration::ZERO, &nothing)
        .await
        .unwrap();
    assert_eq!(outcome.expired, [(unsure, 1, 1)]);
    vec![queue]
}
