//! Durable timers: fired when due (never before), once per timer across replicas, kept
//! when their publish fails, cancellable per run, read through their indexes.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft::admin::Metrics;
use weft::bus::Bus;
use weft::store::timers::{self, TimerRecord, DUE_TIMERS_QUERY};
use weft::Envelope;
use weft_history::timers::{TimerFirer, POLL_INTERVAL};

use crate::utils::{amqp_url, eventually, next, ping_number, Ping, TestEnv, SHARDS};

/// The generous bound of every "eventually".
const WITHIN: Duration = Duration::from_secs(10);

/// Runs a firer on `store`/`bus` until `stop`.
fn spawn_firer(
    store: weft::store::Store,
    bus: Bus,
    metrics: &Metrics,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let firer = TimerFirer::new(store, bus, metrics);
    tokio::spawn(async move { firer.run(stop).await })
}

fn ms(n: u64) -> chrono::TimeDelta {
    chrono::TimeDelta::milliseconds(n as i64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_fires_not_before_it_is_due_and_a_future_one_waits() {
    let env = TestEnv::new().await;
    let mut rx = env.receive().await;
    let now = env.db_now().await;
    let near = env.timer(1, Some(Uuid::new_v4()), now + ms(300));
    let far = env.timer(2, None, now + chrono::TimeDelta::hours(1));
    env.insert(&[near.clone(), far.clone()]).await;

    let metrics = Metrics::new();
    let firer = spawn_firer(
        env.store.clone(),
        env.bus.clone(),
        &metrics,
        env.shutdown.clone(),
    );

    let got = next(&mut rx, WITHIN).await.expect("the near timer fires");
    assert_eq!(ping_number(&got), 1);
    assert!(
        got.at >= near.fire_at,
        "delivered at {} before its fire_at {}",
        got.at,
        near.fire_at
    );
    assert_eq!(got.delivery.traceparent, near.traceparent);
    let envelope = Envelope::from_bytes(&near.body).expect("an envelope");
    assert_eq!(got.delivery.envelope, envelope, "published as stored");
    let e = &env;
    assert!(
        eventually(WITHIN, || async move { !e.timer_exists(near.id).await }).await,
        "a fired timer's row is deleted"
    );

    // Several rounds later the far timer is still waiting, and nothing else came.
    tokio::time::sleep(POLL_INTERVAL * 3).await;
    assert!(next(&mut rx, Duration::from_millis(300)).await.is_none());
    assert!(env.timer_exists(far.id).await, "a future timer stays");
    let wait = env.store.next_timer_in().await.expect("next timer");
    assert!(
        wait.is_some_and(|w| w > Duration::from_secs(3500)),
        "{wait:?}"
    );
    assert_eq!(
        env.store.next_timer_at().await.expect("next timer"),
        Some(far.fire_at)
    );

    let text = metrics.render();
    assert!(text.contains("weft_timers_fired_total 1"), "{text}");
    assert!(
        text.contains("weft_timer_lateness_seconds_count 1"),
        "{text}"
    );

    env.finish().await;
    firer.await.expect("the firer stops at shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_firers_publish_each_of_200_timers_exactly_once() {
    let env = TestEnv::new().await;
    let mut rx = env.receive().await;
    // A second replica: its own pool and its own broker connection.
    let store2 = env.second_store().await;
    let bus2 = Bus::connect(&amqp_url(), env.names.clone(), env.shutdown.clone())
        .await
        .expect("a second bus");

    // Half due already, half becoming due over the next second, so that both firers
    // find due rows in many rounds.
    let now = env.db_now().await;
    let timers: Vec<TimerRecord> = (0..200u32)
        .map(|n| {
            let fire_at = if n % 2 == 0 {
                now - ms(1000)
            } else {
                now + ms(u64::from(n) * 5)
            };
            env.timer(n, None, fire_at)
        })
        .collect();
    env.insert(&timers).await;
    let due: HashMap<Uuid, DateTime<Utc>> = timers
        .iter()
        .map(|t| {
            (
                Envelope::from_bytes(&t.body).expect("envelope").id,
                t.fire_at,
            )
        })
        .collect();

    let (m1, m2) = (Metrics::new(), Metrics::new());
    let a = spawn_firer(
        env.store.clone(),
        env.bus.clone(),
        &m1,
        env.shutdown.clone(),
    );
    let b = spawn_firer(store2, bus2, &m2, env.shutdown.clone());

    let mut seen: HashMap<Uuid, usize> = HashMap::new();
    while seen.len() < timers.len() {
        let got = next(&mut rx, WITHIN)
            .await
            .unwrap_or_else(|| panic!("only {} of 200 timers fired", seen.len()));
        let id = got.delivery.envelope.id;
        let fire_at = due.get(&id).expect("a timer of this test");
        assert!(got.at >= *fire_at, "{id} delivered before its fire_at");
        *seen.entry(id).or_default() += 1;
    }
    // Give a duplicate the time to show up.
    while let Some(got) = next(&mut rx, Duration::from_secs(1)).await {
        *seen.entry(got.delivery.envelope.id).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n != 1).collect();
    assert!(twice.is_empty(), "published more than once: {twice:?}");
    assert_eq!(seen.len(), 200);
    let e = &env;
    assert!(eventually(WITHIN, || async move { e.timer_count().await == 0 }).await);
    let fired = |m: &Metrics| {
        m.render()
            .lines()
            .find_map(|l| l.strip_prefix("weft_timers_fired_total "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert_eq!(fired(&m1) + fired(&m2), 200, "the firers' counters add up");

    env.finish().await;
    a.await.expect("firer a stops");
    b.await.expect("firer b stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_whose_publish_fails_stays_and_fires_later() {
    let env = TestEnv::new().await;
    let mut rx = env.receive().await;
    let now = env.db_now().await;
    let good = env.timer(1, None, now - ms(100));
    let mut bad = env.timer(2, None, now - ms(100));
    let missing = format!("{}.no-such-exchange", env.names.namespace());
    bad.exchange = missing.clone();
    env.insert(&[good.clone(), bad.clone()]).await;

    let failed = env.store.fire_due_timers(&env.bus, 10).await;
    assert!(
        failed.is_err(),
        "the missing exchange is an error: {failed:?}"
    );
    // The good one went out in the same round and is gone; the bad one stays.
    let got = next(&mut rx, WITHIN).await.expect("the good timer fires");
    assert_eq!(ping_number(&got), 1);
    assert!(!env.timer_exists(good.id).await);
    assert!(env.timer_exists(bad.id).await, "a failed timer is kept");

    // The broker is fixed (here: the row points at an exchange that exists): it fires.
    sqlx::query("UPDATE timers SET exchange = $1 WHERE id = $2")
        .bind(env.names.commands_exchange())
        .bind(bad.id)
        .execute(env.store.pg_pool().unwrap())
        .await
        .expect("update");
    let firer = spawn_firer(
        env.store.clone(),
        env.bus.clone(),
        &Metrics::new(),
        env.shutdown.clone(),
    );
    let got = loop {
        let got = next(&mut rx, WITHIN).await.expect("the kept timer fires");
        // The good one may come twice: a channel closed by the failing publish can lose
        // its confirm, and a retried publish is a duplicate (consumers are idempotent).
        if ping_number(&got) == 2 {
            break got;
        }
    };
    assert!(got.at >= bad.fire_at);
    let e = &env;
    assert!(eventually(WITHIN, || async move { !e.timer_exists(bad.id).await }).await);

    env.finish().await;
    firer.await.expect("the firer stops");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_firer_stopped_before_its_commit_leaves_the_timer_to_another() {
    let env = TestEnv::new().await;
    let mut rx = env.receive().await;
    let now = env.db_now().await;
    let timer = env.timer(1, None, now - ms(10));
    env.insert(std::slice::from_ref(&timer)).await;

    // A replica takes the row and publishes it, but dies before committing.
    let mut crashed = env.store.pg_pool().unwrap().begin().await.expect("begin");
    let taken: Vec<(Uuid,)> = sqlx::query_as(&format!("SELECT id FROM ({DUE_TIMERS_QUERY}) due"))
        .bind(10i64)
        .fetch_all(&mut *crashed)
        .await
        .expect("select due");
    assert_eq!(taken, vec![(timer.id,)]);
    env.bus
        .publish_bytes(&timer.exchange, &timer.routing_key, &timer.body, None)
        .await
        .expect("publish");

    // While it holds the row, another firer skips it (no double publish at once).
    let fired = env.store.fire_due_timers(&env.bus, 10).await.expect("fire");
    assert_eq!(fired, 0, "a locked row is skipped");

    drop(crashed); // the connection goes back to the pool and the transaction rolls back
                   // The row is free again once the rollback is done.
    let deadline = tokio::time::Instant::now() + WITHIN;
    let mut fired_again = 0;
    while fired_again == 0 && tokio::time::Instant::now() < deadline {
        fired_again += env.store.fire_due_timers(&env.bus, 10).await.expect("fire");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fired_again, 1);
    assert!(!env.timer_exists(timer.id).await);
    let first = next(&mut rx, WITHIN).await.expect("the first publish");
    let second = next(&mut rx, WITHIN)
        .await
        .expect("the publish after the crash");
    // A duplicate, never a loss: both carry the same envelope id.
    assert_eq!(first.delivery.envelope.id, second.delivery.envelope.id);

    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_for_run_deletes_only_that_runs_timers() {
    let env = TestEnv::new().await;
    let (run_a, run_b) = (Uuid::new_v4(), Uuid::new_v4());
    let later = env.db_now().await + chrono::TimeDelta::hours(1);
    let timers = vec![
        env.timer(1, Some(run_a), later),
        env.timer(2, Some(run_a), later),
        env.timer(3, Some(run_a), later),
        env.timer(4, Some(run_b), later),
        env.timer(5, None, later),
    ];
    env.insert(&timers).await;

    let mut conn = env
        .store
        .pg_pool()
        .unwrap()
        .acquire()
        .await
        .expect("a connection");
    assert_eq!(
        timers::cancel_for_run(&mut conn, run_a)
            .await
            .expect("cancel"),
        3
    );
    assert_eq!(
        timers::cancel_for_run(&mut conn, run_a)
            .await
            .expect("cancel"),
        0
    );
    drop(conn);
    for t in &timers {
        assert_eq!(
            env.timer_exists(t.id).await,
            t.run_id != Some(run_a),
            "{}",
            t.workflow_id
        );
    }
    // Empty inserts are a no-op.
    env.insert(&[]).await;
    assert_eq!(env.timer_count().await, 2);

    env.finish().await;
}

/// The plan of `sql` with `$1` bound to `param`, one string.
async fn plan<T>(env: &TestEnv, sql: &str, param: T) -> String
where
    T: for<'q> sqlx::Encode<'q, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send,
{
    let lines: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {sql}"))
        .bind(param)
        .fetch_all(env.store.pg_pool().unwrap())
        .await
        .expect("explain");
    lines.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timer_queries_use_their_indexes() {
    let env = TestEnv::new().await;
    sqlx::query(
        "INSERT INTO timers (id, workflow_id, run_id, fire_at, exchange, routing_key, body)
         SELECT gen_random_uuid(), 'wf-' || i, gen_random_uuid(),
                now() + make_interval(secs => 3600 + i), 'x', 'y', '\\x00'::bytea
         FROM generate_series(1, 20000) AS i",
    )
    .execute(env.store.pg_pool().unwrap())
    .await
    .expect("insert 20,000 future timers");
    sqlx::query("ANALYZE timers")
        .execute(env.store.pg_pool().unwrap())
        .await
        .expect("analyze");

    let due = plan(&env, DUE_TIMERS_QUERY, 500i64).await;
    assert!(
        due.contains("Index Scan using timers_by_fire_at"),
        "the due query must read the fire_at index:\n{due}"
    );
    assert!(!due.contains("Seq Scan"), "{due}");

    // `next_timer_at`'s query (its parameter-free text, plus a harmless `$1`).
    let next = plan(&env, "SELECT min(fire_at) FROM timers WHERE $1::bool", true).await;
    assert!(next.contains("timers_by_fire_at"), "{next}");
    assert!(!next.contains("Seq Scan"), "{next}");

    let cancel = plan(&env, "DELETE FROM timers WHERE run_id = $1", Uuid::new_v4()).await;
    assert!(cancel.contains("timers_by_run"), "{cancel}");
    assert!(!cancel.contains("Seq Scan"), "{cancel}");

    // And the firer's round has nothing to do.
    assert_eq!(
        env.store
            .fire_due_timers(&env.bus, 500)
            .await
            .expect("fire"),
        0
    );
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_service_fires_timers_end_to_end() {
    let env = TestEnv::new().await;
    let config = weft::Config {
        database_url: env.db_url.clone(),
        amqp_url: amqp_url(),
        namespace: env.names.namespace().to_owned(),
        shards: SHARDS,
        admin_addr: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        ..weft::Config::default()
    };
    let stop = CancellationToken::new();
    let service = tokio::spawn(weft_history::run(config, stop.clone()));

    // A command for the decider, as the decider itself would schedule it.
    let workflow_id = "wf-e2e";
    let envelope = Envelope::new(workflow_id, Some(Uuid::new_v4()), &Ping::TimerPing { n: 7 })
        .expect("an envelope");
    let fire_at = env.db_now().await + ms(300);
    let timer = TimerRecord::command(&env.names, fire_at, &envelope, None).expect("a timer");
    assert_eq!(timer.run_id, envelope.run_id);
    env.insert(std::slice::from_ref(&timer)).await;
    let shard = weft::ids::shard_of(workflow_id, SHARDS);
    let mut rx = env.consume(&env.names.command_queue(shard));

    let got = next(&mut rx, WITHIN)
        .await
        .expect("the service fires the timer to the workflow's shard");
    assert_eq!(got.delivery.envelope.id, envelope.id);
    assert!(got.at >= fire_at);
    let e = &env;
    assert!(eventually(WITHIN, || async move { !e.timer_exists(timer.id).await }).await);

    stop.cancel();
    let ended = tokio::time::timeout(WITHIN, service)
        .await
        .expect("the service stops at shutdown")
        .expect("join");
    assert!(ended.is_ok(), "{ended:?}");
    env.finish().await;
}
