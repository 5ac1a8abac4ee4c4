//! The heartbeat registry's rows (`task_check`) on both backends.

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use futures_util::future::BoxFuture;
use uuid::Uuid;
use weft::messages::{AttemptRef, AttemptStarted, ClaimAttempt, Command, HeartbeatAction};
use weft::registry::rows::{BeatWrite, End, Liveness, ScanScope};
use weft::registry::{AttemptLimits, AttemptStatus, LimitKind, RateLimit, Registry};
use weft::store::runs::{AttemptCheck, CommitBatch};
use weft::store::Store;
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

fn claim(task_id: Uuid, attempt: i32, worker: &str, timeout: i64, takeover: bool) -> ClaimAttempt {
    ClaimAttempt {
        started: started(task_id, attempt, worker, timeout),
        takeover,
    }
}

/// The registry row of an attempt as the decider writes it with its commit.
fn attempt_row(
    task_id: Uuid,
    status: AttemptStatus,
    reason: Option<&str>,
    timeout: i64,
) -> AttemptCheck {
    AttemptCheck {
        task_id,
        attempt: 1,
        workflow_id: "wf-reg".into(),
        run_id: Uuid::from_u128(7),
        task_name: "work".into(),
        task_ref: "work_ref".into(),
        reply_to: "shard.1".into(),
        status,
        reason: reason.map(str::to_owned),
        timeout_seconds: timeout,
        limits: Default::default(),
        worker_id: None,
    }
}

async fn write_checks(env: &Env, checks: Vec<AttemptCheck>) {
    env.store
        .commit(&CommitBatch {
            checks,
            ..CommitBatch::default()
        })
        .await
        .unwrap();
}

bus_test!(registry_claims_beats_and_ends_attempts, register);
async fn register(env: &Env) -> Vec<String> {
    let store = &env.store;
    let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    // Attempts without a row are created RUNNING; the first claim of a repeated attempt
    // is the one tried, the other is refused.
    let outcomes = store
        .claim_many(&[
            claim(a, 1, "w1", 60, false),
            claim(b, 1, "w1", 0, false),
            claim(a, 1, "w2", 30, false),
        ])
        .await
        .unwrap();
    assert_eq!(outcomes.len(), 2);
    let row_a = outcomes.iter().find(|o| o.stored.task_id == a).unwrap();
    assert!(row_a.claimed);
    assert_eq!(
        (row_a.stored.status, row_a.stored.timeout_seconds),
        (AttemptStatus::Running, 60)
    );
    let check_a = store.task_check(a).await.unwrap().unwrap();
    assert_eq!(check_a.worker_id.as_deref(), Some("w1"));
    let expires = check_a.expires_at.unwrap();
    assert!(expires > Utc::now() + TimeDelta::seconds(55));
    assert!(store
        .task_check(b)
        .await
        .unwrap()
        .unwrap()
        .expires_at
        .is_none());
    // Another worker cannot take a running attempt; a redelivery may take it over.
    let again = store
        .claim_many(&[claim(a, 1, "w2", 60, false)])
        .await
        .unwrap();
    assert!(!again[0].claimed);
    assert_eq!(again[0].stored.status, AttemptStatus::Running);
    let over = store
        .claim_many(&[claim(a, 1, "w2", 60, true)])
        .await
        .unwrap();
    assert!(over[0].claimed);
    assert_eq!(
        store
            .task_check(a)
            .await
            .unwrap()
            .unwrap()
            .worker_id
            .as_deref(),
        Some("w2")
    );

    // An attempt the decider scheduled is claimed with the timeout it wrote; one it
    // stopped while it waited is refused with the reason, takeover or not.
    let (scheduled, skipped) = (Uuid::now_v7(), Uuid::now_v7());
    write_checks(
        env,
        vec![
            attempt_row(scheduled, AttemptStatus::Scheduled, None, 45),
            attempt_row(skipped, AttemptStatus::Scheduled, None, 45),
        ],
    )
    .await;
    assert_eq!(
        store.task_check(scheduled).await.unwrap().unwrap().status,
        AttemptStatus::Scheduled
    );
    write_checks(
        env,
        vec![attempt_row(
            skipped,
            AttemptStatus::Stopped,
            Some("skipped by an operator"),
            0,
        )],
    )
    .await;
    let outcomes = store
        .claim_many(&[
            claim(scheduled, 1, "w5", 0, false),
            claim(skipped, 1, "w5", 0, true),
        ])
        .await
        .unwrap();
    let of = |id: Uuid| outcomes.iter().find(|o| o.stored.task_id == id).unwrap();
    assert!(of(scheduled).claimed);
    assert_eq!(of(scheduled).stored.timeout_seconds, 45);
    let row = store.task_check(scheduled).await.unwrap().unwrap();
    assert_eq!(
        (row.status, row.worker_id.as_deref()),
        (AttemptStatus::Running, Some("w5"))
    );
    assert!(!of(skipped).claimed);
    assert_eq!(
        (
            of(skipped).stored.status,
            of(skipped).stored.reason.as_deref()
        ),
        (AttemptStatus::Stopped, Some("skipped by an operator"))
    );
    // The decider's end applies to an open attempt only: a timeout already recorded stays.
    write_checks(
        env,
        vec![attempt_row(scheduled, AttemptStatus::Completed, None, 0)],
    )
    .await;
    assert_eq!(
        store.task_check(scheduled).await.unwrap().unwrap().status,
        AttemptStatus::Completed
    );
    write_checks(
        env,
        vec![attempt_row(skipped, AttemptStatus::Failed, Some("late"), 0)],
    )
    .await;
    assert_eq!(
        store.task_check(skipped).await.unwrap().unwrap().status,
        AttemptStatus::Stopped
    );

    // An end before any claim creates the row in its end status; a claim then is refused.
    let ended = store
        .end_each(&[end(c, 1, AttemptStatus::Completed, None)])
        .await
        .unwrap();
    assert_eq!(ended[0].status, AttemptStatus::Completed);
    let outcomes = store
        .claim_many(&[claim(c, 1, "w3", 30, true)])
        .await
        .unwrap();
    assert!(!outcomes[0].claimed);
    assert_eq!(outcomes[0].stored.status, AttemptStatus::Completed);
    assert_eq!(
        store.task_check(c).await.unwrap().unwrap().output_bytes,
        Some(3)
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
        .claim_many(&[claim(a, 2, "w4", 0, false)])
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

    // Retention: ended attempts (a#1, c#1, and the two the decider ended) go; a
    // SCHEDULED one stays, however old.
    let waiting = Uuid::now_v7();
    write_checks(
        env,
        vec![attempt_row(waiting, AttemptStatus::Scheduled, None, 0)],
    )
    .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        store.purge_task_checks(Duration::ZERO, 100).await.unwrap(),
        4
    );
    assert!(store.task_check(waiting).await.unwrap().is_some());
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
        .claim_many(&[
            claim(live, 1, "w", 1, false),
            claim(silent, 1, "w", 1, false),
            claim(unsure, 1, "w", 1, false),
        ])
        .await
        .unwrap();
    // `unsure` has beaten once (a claim alone leaves no heartbeat: an attempt that never
    // beat is judged without waiting for a stored deadline to be surely passed).
    store
        .write_beats(&[BeatWrite {
            task_id: unsure,
            attempt: 1,
            at_ms: None,
            details: None,
        }])
        .await
        .unwrap();
    let nothing =
        |_: Vec<Uuid>| -> BoxFuture<'static, Option<Vec<Liveness>>> { Box::pin(async { None }) };
    let outcome = store
        .scan_expired(&env.names, 10, Duration::ZERO, &nothing, ScanScope::TimeOut)
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
        .scan_expired(
            &env.names,
            10,
            Duration::from_secs(3600),
            &probe,
            ScanScope::TimeOut,
        )
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
        .scan_expired(&env.names, 10, Duration::ZERO, &nothing, ScanScope::TimeOut)
        .await
        .unwrap();
    assert_eq!(outcome.expired, [(unsure, 1, 1)]);
    vec![queue]
}

bus_test!(
    a_suspecting_scan_writes_nothing_and_a_confirmation_judges_again,
    suspect_then_confirm
);
async fn suspect_then_confirm(env: &Env) -> Vec<String> {
    let store = &env.store;
    let task = Uuid::now_v7();
    store
        .claim_many(&[claim(task, 1, "w", 1, false)])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    // The cache's last heartbeat of the attempt is `age_ms` old.
    let seen = |age_ms: i64| {
        move |ids: Vec<Uuid>| -> BoxFuture<'static, Option<Vec<Liveness>>> {
            let now_ms = Utc::now().timestamp_millis();
            let lives = ids
                .iter()
                .map(|_| Liveness {
                    now_ms,
                    last_ms: Some(now_ms - age_ms),
                })
                .collect();
            Box::pin(async move { Some(lives) })
        }
    };
    let silent = seen(10_000);
    let suspected = store
        .scan_expired(&env.names, 10, Duration::ZERO, &silent, ScanScope::Suspect)
        .await
        .unwrap();
    let attempt = AttemptRef {
        task_id: task,
        attempt: 1,
    };
    assert_eq!(suspected.suspects, [attempt]);
    assert_eq!(
        (suspected.report.suspected, suspected.report.timed_out),
        (1, 0)
    );
    assert!(suspected.messages.is_empty());
    let row = store.task_check(task).await.unwrap().unwrap();
    assert_eq!(
        row.status,
        AttemptStatus::Running,
        "a suspicion writes nothing"
    );

    // Another attempt of the task is not the one suspected.
    let other = [AttemptRef {
        task_id: task,
        attempt: 2,
    }];
    let none = store
        .scan_expired(
            &env.names,
            10,
            Duration::ZERO,
            &silent,
            ScanScope::Confirm(&other),
        )
        .await
        .unwrap();
    assert_eq!(none.report.candidates, 0);

    // A heartbeat recorded since the suspicion: alive after all, its deadline moved.
    let beaten = seen(100);
    let confirmed = store
        .scan_expired(
            &env.names,
            10,
            Duration::ZERO,
            &beaten,
            ScanScope::Confirm(&[attempt]),
        )
        .await
        .unwrap();
    assert_eq!(
        (confirmed.report.extended, confirmed.report.timed_out),
        (1, 0)
    );
    let row = store.task_check(task).await.unwrap().unwrap();
    assert_eq!(row.status, AttemptStatus::Running);
    assert!(row.expires_at.unwrap() > Utc::now());

    // Silent again past the new deadline: suspected, and confirmed expired.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let confirmed = store
        .scan_expired(
            &env.names,
            10,
            Duration::ZERO,
            &silent,
            ScanScope::Confirm(&[attempt]),
        )
        .await
        .unwrap();
    assert_eq!(confirmed.report.timed_out, 1);
    assert_eq!(confirmed.messages.len(), 1);
    let row = store.task_check(task).await.unwrap().unwrap();
    assert_eq!(row.status, AttemptStatus::TimedOut);
    Vec::new()
}

/// A SCHEDULED row of task `name` under `limits`, as the decider writes it.
fn limited_row(task_id: Uuid, name: &str, limits: AttemptLimits) -> AttemptCheck {
    AttemptCheck {
        task_name: name.into(),
        limits,
        ..attempt_row(task_id, AttemptStatus::Scheduled, None, 30)
    }
}

fn claim_of(task_id: Uuid, name: &str, takeover: bool) -> ClaimAttempt {
    let mut c = claim(task_id, 1, "w", 30, takeover);
    c.started.task_name = name.into();
    c
}

async fn commit_rows(store: &Store, checks: Vec<AttemptCheck>) {
    store
        .commit(&CommitBatch {
            checks,
            ..CommitBatch::default()
        })
        .await
        .unwrap();
}

fn concurrency(n: i32) -> AttemptLimits {
    AttemptLimits {
        concurrency: Some(n),
        rate: None,
    }
}

fn registry(store: &Store) -> Registry {
    Registry::new(store.clone(), None, Duration::from_secs(60))
}

store_test!(
    limited_claims_wait_for_a_running_attempt_to_end,
    concurrency_limit
);
async fn concurrency_limit(store: &Store) {
    let registry = registry(store);
    let ids: Vec<Uuid> = (0..5).map(|_| Uuid::now_v7()).collect();
    commit_rows(
        store,
        ids.iter()
            .map(|id| limited_row(*id, "capped", concurrency(2)))
            .collect(),
    )
    .await;
    // Unlimited attempts of the same name take the usual path and count for nothing.
    let free = Uuid::now_v7();
    commit_rows(
        store,
        vec![limited_row(free, "capped", AttemptLimits::default())],
    )
    .await;
    assert!(
        registry
            .claim(&claim_of(free, "capped", false))
            .await
            .unwrap()
            .claimed
    );

    // The first step leaves a limited row alone, flagged for the limited path.
    let first = store
        .claim_many(&[claim_of(ids[0], "capped", false)])
        .await
        .unwrap();
    assert!(!first[0].claimed);
    assert_eq!(first[0].stored.status, AttemptStatus::Scheduled);
    let limited = first[0].limited.clone().expect("flagged");
    assert_eq!(
        (limited.task_name.as_str(), limited.limits),
        ("capped", concurrency(2))
    );
    assert_eq!(
        store.task_check(ids[0]).await.unwrap().unwrap().status,
        AttemptStatus::Scheduled
    );

    // Five claims of a name limited to two at once: two run, three wait SCHEDULED.
    let claims: Vec<ClaimAttempt> = ids
        .iter()
        .map(|id| claim_of(*id, "capped", false))
        .collect();
    let outcomes = registry.claim_many(&claims).await.unwrap();
    let claimed: Vec<Uuid> = outcomes
        .iter()
        .filter(|o| o.claimed)
        .map(|o| o.stored.task_id)
        .collect();
    assert_eq!(claimed, ids[..2], "in order: {outcomes:?}");
    for o in &outcomes[2..] {
        let d = o.deferred.as_ref().expect("deferred");
        assert_eq!(d.limit, LimitKind::Concurrency);
        assert_eq!(d.retry_after, Duration::from_millis(500));
        let answer = o.answer();
        assert_eq!(answer.action, HeartbeatAction::Defer);
        assert_eq!(answer.retry_after_ms, Some(500));
        assert!(answer.reason.unwrap().contains("concurrentExecLimit 2"));
        assert_eq!(
            store
                .task_check(o.stored.task_id)
                .await
                .unwrap()
                .unwrap()
                .status,
            AttemptStatus::Scheduled
        );
    }
    assert_eq!(registry.stats().deferred, 3);

    // Still full: asked again, deferred again. A takeover of a running attempt (its
    // worker died) changes no count and is not limited.
    let again = registry.claim(&claims[2]).await.unwrap();
    assert!(again.deferred.is_some());
    let over = registry
        .claim(&claim_of(ids[0], "capped", true))
        .await
        .unwrap();
    assert!(over.claimed && over.deferred.is_none());

    // One ends: the next claim gets its place, the one after still waits.
    commit_rows(
        store,
        vec![AttemptCheck {
            task_name: "capped".into(),
            ..attempt_row(ids[0], AttemptStatus::Completed, None, 0)
        }],
    )
    .await;
    let outcomes = registry.claim_many(&claims[2..4]).await.unwrap();
    assert!(outcomes[0].claimed, "{outcomes:?}");
    assert!(outcomes[1].deferred.is_some(), "{outcomes:?}");

    // One stopped while it waited is refused with its reason, not deferred.
    commit_rows(
        store,
        vec![attempt_row(
            ids[4],
            AttemptStatus::Stopped,
            Some("skipped by an operator"),
            0,
        )],
    )
    .await;
    let refused = registry.claim(&claims[4]).await.unwrap();
    assert!(!refused.claimed && refused.deferred.is_none());
    assert_eq!(
        refused.answer().reason.as_deref(),
        Some("skipped by an operator")
    );
}

store_test!(
    limited_claims_racing_each_other_never_pass_the_limit,
    racing_claims
);
async fn racing_claims(store: &Store) {
    let ids: Vec<Uuid> = (0..12).map(|_| Uuid::now_v7()).collect();
    commit_rows(
        store,
        ids.iter()
            .map(|id| limited_row(*id, "raced", concurrency(3)))
            .collect(),
    )
    .await;
    // One registry per claim, all at once: as many heartbeat replicas and gateways.
    let claims = ids.iter().map(|id| {
        let registry = registry(store);
        let claim = claim_of(*id, "raced", false);
        tokio::spawn(async move { registry.claim(&claim).await.unwrap() })
    });
    let outcomes: Vec<_> = futures_util::future::join_all(claims)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(outcomes.iter().filter(|o| o.claimed).count(), 3);
    assert_eq!(outcomes.iter().filter(|o| o.deferred.is_some()).count(), 9);
}

store_test!(limited_claims_fill_a_fixed_rate_window, rate_window);
async fn rate_window(store: &Store) {
    let registry = registry(store);
    let rated = |per_window, window_seconds| AttemptLimits {
        concurrency: None,
        rate: Some(RateLimit {
            per_window,
            window_seconds,
        }),
    };
    let ids: Vec<Uuid> = (0..4).map(|_| Uuid::now_v7()).collect();
    commit_rows(
        store,
        ids.iter()
            .map(|id| limited_row(*id, "paced", rated(2, 1)))
            .collect(),
    )
    .await;
    // Another name has its own window.
    let other = Uuid::now_v7();
    commit_rows(store, vec![limited_row(other, "other", rated(2, 3_600))]).await;

    // Three claims in one window of two: the third waits for the window's end.
    let claims: Vec<ClaimAttempt> = ids.iter().map(|id| claim_of(*id, "paced", false)).collect();
    let outcomes = registry.claim_many(&claims[..3]).await.unwrap();
    assert!(outcomes[0].claimed && outcomes[1].claimed, "{outcomes:?}");
    let d = outcomes[2].deferred.clone().expect("deferred");
    assert_eq!(d.limit, LimitKind::Rate);
    assert!(
        d.retry_after > Duration::ZERO && d.retry_after <= Duration::from_secs(1),
        "{d:?}"
    );
    assert!(
        d.reason.contains("rateLimitPerFrequency 2 per 1 s"),
        "{d:?}"
    );
    assert!(
        registry
            .claim(&claim_of(other, "other", false))
            .await
            .unwrap()
            .claimed,
        "a window per task name"
    );

    // The next window admits two again.
    tokio::time::sleep(d.retry_after + Duration::from_millis(50)).await;
    let next = registry.claim_many(&claims[2..4]).await.unwrap();
    assert!(next.iter().all(|o| o.claimed), "{next:?}");
}
