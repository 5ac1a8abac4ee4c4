//! The in-memory cache against the rules of the Redis scripts, with the clock moved by
//! hand (every `State` operation takes `now`), so nothing here waits or measures time.

use std::time::Duration;

use uuid::Uuid;

use super::*;
use crate::registry::cache::{Cache, FINISHED_TTL_MS, UNWATCHED_TTL_MS};

const T0: i64 = 1_700_000_000_000;
const INTERVAL: Duration = Duration::from_secs(60);
const INTERVAL_MS: i64 = 60_000;

fn entry(task_id: Uuid, status: AttemptStatus, reason: Option<&str>, timeout: i64) -> Entry {
    Entry {
        task_id,
        attempt: 3,
        status,
        reason: reason.map(str::to_string),
        timeout_seconds: timeout,
    }
}

fn running(task_id: Uuid, timeout: i64) -> Entry {
    entry(task_id, AttemptStatus::Running, None, timeout)
}

fn known(
    attempt: i32,
    status: AttemptStatus,
    reason: &str,
    due: bool,
    details: Option<&str>,
) -> Cached {
    Cached::Known {
        attempt,
        status,
        reason: reason.into(),
        due,
        details: details.map(str::to_string),
    }
}

/// A state with one RUNNING attempt (timeout `timeout` s) cached at `T0`.
fn with_running(timeout: i64) -> (State, Uuid) {
    let mut state = State::default();
    let id = Uuid::new_v4();
    state.populate(&[running(id, timeout)], INTERVAL, T0);
    (state, id)
}

#[test]
fn a_beat_on_an_unknown_task_is_a_miss_and_caches_nothing() {
    let mut state = State::default();
    let id = Uuid::new_v4();
    let got = state.beat(&[(id, Some("{\"x\":1}".into()))], INTERVAL, T0);
    assert_eq!(got, vec![Cached::Miss]);
    assert!(state.items.is_empty());
    assert_eq!(state.peek(id, T0), (None, None));
}

#[test]
fn a_beat_on_a_running_attempt_records_time_and_details_but_is_not_due_within_the_interval() {
    let (mut state, id) = with_running(30);
    let got = state.beat(&[(id, Some("{\"done\":1}".into()))], INTERVAL, T0 + 5_000);
    // Not due: the populate wrote "now", and details only travel with a due write.
    assert_eq!(got, vec![known(3, AttemptStatus::Running, "", false, None)]);
    assert_eq!(
        state.peek(id, T0 + 5_000),
        (Some(T0 + 5_000), Some("{\"done\":1}".into()))
    );
}

#[test]
fn a_beat_is_due_once_the_last_write_is_an_interval_old_and_carries_the_latest_details() {
    let (mut state, id) = with_running(30);
    state.beat(
        &[(id, Some("{\"step\":\"a\"}".into()))],
        INTERVAL,
        T0 + 1_000,
    );
    // No details in this beat: the due write takes the ones kept from before.
    let at = T0 + INTERVAL_MS;
    let got = state.beat(&[(id, None)], INTERVAL, at);
    assert_eq!(
        got,
        vec![known(
            3,
            AttemptStatus::Running,
            "",
            true,
            Some("{\"step\":\"a\"}")
        )]
    );
    // The write is recorded at `at`: the next beat is not due again.
    let again = state.beat(&[(id, Some(String::new()))], INTERVAL, at + 1);
    assert_eq!(
        again,
        vec![known(3, AttemptStatus::Running, "", false, None)]
    );
    assert_eq!(
        state.peek(id, at + 1).1.as_deref(),
        Some("{\"step\":\"a\"}"),
        "an empty details string is no details"
    );
}

#[test]
fn the_same_task_twice_in_a_batch_is_due_only_once() {
    let (mut state, id) = with_running(30);
    let at = T0 + INTERVAL_MS;
    let got = state.beat(&[(id, None), (id, None)], INTERVAL, at);
    let due: Vec<bool> = got
        .iter()
        .map(|c| matches!(c, Cached::Known { due: true, .. }))
        .collect();
    assert_eq!(due, vec![true, false]);
}

#[test]
fn a_beat_on_a_stopped_attempt_reads_only_and_answers_the_reason() {
    let (mut state, id) = with_running(30);
    state.beat(&[(id, Some("{\"p\":1}".into()))], INTERVAL, T0 + 1_000);
    state.set_status(
        &[entry(
            id,
            AttemptStatus::Stopped,
            Some("workflow terminated"),
            30,
        )],
        INTERVAL,
        T0 + 2_000,
    );
    let before = state.items.get(&id).cloned();
    let got = state.beat(
        &[(id, Some("{\"p\":2}".into()))],
        INTERVAL,
        T0 + INTERVAL_MS * 5,
    );
    assert_eq!(
        got,
        vec![known(
            3,
            AttemptStatus::Stopped,
            "workflow terminated",
            false,
            None
        )]
    );
    assert_eq!(state.items.get(&id).cloned(), before, "nothing recorded");
}

#[test]
fn a_batch_answers_each_beat_in_order() {
    let (mut state, running_id) = with_running(30);
    let (done, unknown) = (Uuid::new_v4(), Uuid::new_v4());
    state.set_status(
        &[entry(
            done,
            AttemptStatus::Completed,
            Some("already finished"),
            30,
        )],
        INTERVAL,
        T0,
    );
    let got = state.beat(
        &[(running_id, None), (done, None), (unknown, None)],
        INTERVAL,
        T0 + 1,
    );
    assert_eq!(
        got,
        vec![
            known(3, AttemptStatus::Running, "", false, None),
            known(3, AttemptStatus::Completed, "already finished", false, None),
            Cached::Miss,
        ]
    );
}

#[test]
fn populate_never_overwrites_a_status_written_before_it() {
    let mut state = State::default();
    let id = Uuid::new_v4();
    state.set_status(
        &[entry(id, AttemptStatus::Stopped, Some("skipped"), 30)],
        INTERVAL,
        T0,
    );
    state.populate(&[running(id, 30)], INTERVAL, T0 + 1);
    assert_eq!(
        state.statuses(&[id], T0 + 1),
        vec![Some((AttemptStatus::Stopped, "skipped".into()))]
    );
    // Twice in one populate: the first wins, as the script's EXISTS check makes it.
    let other = Uuid::new_v4();
    state.populate(
        &[
            running(other, 30),
            entry(other, AttemptStatus::Failed, None, 30),
        ],
        INTERVAL,
        T0,
    );
    assert_eq!(
        state.statuses(&[other], T0)[0],
        Some((AttemptStatus::Running, String::new()))
    );
}

#[test]
fn set_status_overwrites_the_status_and_keeps_heartbeat_and_details() {
    let (mut state, id) = with_running(30);
    state.beat(&[(id, Some("{\"p\":1}".into()))], INTERVAL, T0 + 1_000);
    let mut ended = entry(
        id,
        AttemptStatus::TimedOut,
        Some("no heartbeat for 30s"),
        30,
    );
    ended.attempt = 4;
    state.set_status(&[ended], INTERVAL, T0 + 2_000);
    assert_eq!(
        state.statuses(&[id], T0 + 2_000),
        vec![Some((
            AttemptStatus::TimedOut,
            "no heartbeat for 30s".into()
        ))]
    );
    assert_eq!(
        state.peek(id, T0 + 2_000),
        (Some(T0 + 1_000), Some("{\"p\":1}".into()))
    );
    let got = state.beat(&[(id, None)], INTERVAL, T0 + 3_000);
    assert_eq!(
        got,
        vec![known(
            4,
            AttemptStatus::TimedOut,
            "no heartbeat for 30s",
            false,
            None
        )]
    );
}

#[test]
fn a_running_entry_created_by_set_status_has_no_heartbeat_and_its_first_beat_is_due() {
    let mut state = State::default();
    let id = Uuid::new_v4();
    state.set_status(&[running(id, 30)], INTERVAL, T0);
    assert_eq!(state.peek(id, T0), (None, None));
    assert_eq!(state.liveness(&[id], T0)[0].last_ms, None);
    let got = state.beat(&[(id, None)], INTERVAL, T0 + 1);
    assert_eq!(got, vec![known(3, AttemptStatus::Running, "", true, None)]);
}

#[test]
fn liveness_gives_the_clock_and_the_last_heartbeat_or_none_for_an_unknown_task() {
    let (mut state, id) = with_running(30);
    state.beat(&[(id, None)], INTERVAL, T0 + 7_000);
    let unknown = Uuid::new_v4();
    let got = state.liveness(&[id, unknown], T0 + 9_000);
    assert_eq!(
        got,
        vec![
            Liveness {
                now_ms: T0 + 9_000,
                last_ms: Some(T0 + 7_000)
            },
            Liveness {
                now_ms: T0 + 9_000,
                last_ms: None
            },
        ]
    );
    assert!(
        !state.items.contains_key(&unknown),
        "reading creates nothing"
    );
}

#[test]
fn statuses_and_peek_read_without_recording_a_heartbeat() {
    let (mut state, id) = with_running(30);
    let unknown = Uuid::new_v4();
    assert_eq!(
        state.statuses(&[id, unknown], T0 + 500),
        vec![Some((AttemptStatus::Running, String::new())), None]
    );
    assert_eq!(state.peek(id, T0 + 500), (Some(T0), None));
    assert_eq!(state.peek(unknown, T0 + 500), (None, None));
}

#[test]
fn a_running_entry_expires_after_its_timeout_plus_two_intervals_and_a_minute_and_beats_push_it_back(
) {
    let (mut state, id) = with_running(30);
    let ttl = 30_000 + 2 * INTERVAL_MS + 60_000;
    assert_eq!(
        state.statuses(&[id], T0 + ttl)[0].as_ref().map(|s| s.0),
        Some(AttemptStatus::Running)
    );
    assert_eq!(state.statuses(&[id], T0 + ttl + 1), vec![None]);
    assert!(state.items.is_empty(), "an expired entry met is removed");

    let (mut state, id) = with_running(30);
    state.beat(&[(id, None)], INTERVAL, T0 + ttl);
    assert!(
        state.live(id, T0 + 2 * ttl).is_some(),
        "the beat refreshed the expiry"
    );
    assert_eq!(
        state.beat(&[(id, None)], INTERVAL, T0 + 2 * ttl + 1),
        vec![Cached::Miss]
    );
}

#[test]
fn unwatched_and_finished_entries_expire_like_their_redis_keys() {
    let (mut state, unwatched) = with_running(0);
    let ended = Uuid::new_v4();
    state.set_status(
        &[entry(ended, AttemptStatus::Completed, None, 30)],
        INTERVAL,
        T0,
    );
    let finished_ttl = FINISHED_TTL_MS as i64;
    assert!(state.live(ended, T0 + finished_ttl).is_some());
    assert!(state.live(ended, T0 + finished_ttl + 1).is_none());
    // A stopped attempt's beats do not refresh its expiry.
    let (mut stopped_state, stopped) = with_running(30);
    stopped_state.set_status(
        &[entry(stopped, AttemptStatus::Stopped, None, 30)],
        INTERVAL,
        T0,
    );
    stopped_state.beat(&[(stopped, None)], INTERVAL, T0 + finished_ttl);
    assert!(stopped_state.live(stopped, T0 + finished_ttl + 1).is_none());

    let unwatched_ttl = UNWATCHED_TTL_MS as i64;
    assert!(state.live(unwatched, T0 + unwatched_ttl).is_some());
    assert!(state.live(unwatched, T0 + unwatched_ttl + 1).is_none());
}

#[test]
fn an_expired_entry_is_absent_so_populate_caches_it_afresh() {
    let (mut state, id) = with_running(30);
    state.set_status(
        &[entry(id, AttemptStatus::Stopped, Some("old"), 30)],
        INTERVAL,
        T0,
    );
    let later = T0 + FINISHED_TTL_MS as i64 + 1;
    state.populate(&[running(id, 30)], INTERVAL, later);
    assert_eq!(
        state.statuses(&[id], later),
        vec![Some((AttemptStatus::Running, String::new()))]
    );
    assert_eq!(state.peek(id, later), (Some(later), None));
}

#[test]
fn the_sweep_drops_expired_entries_nobody_asks_for() {
    let mut state = State::default();
    state.sweep_if_due(T0);
    let ids: Vec<Uuid> = (0..100).map(|_| Uuid::new_v4()).collect();
    let entries: Vec<Entry> = ids.iter().map(|id| running(*id, 1)).collect();
    state.populate(&entries, INTERVAL, T0);
    let keeper = Uuid::new_v4();
    state.populate(&[running(keeper, 0)], INTERVAL, T0);
    let past = T0 + 1_000 + 2 * INTERVAL_MS + 60_000 + 1;
    // Not yet: the last sweep was at T0, and sweeps are paced.
    state.sweep_if_due(T0 + 1);
    assert_eq!(state.items.len(), 101);
    state.sweep_if_due(past);
    assert_eq!(state.items.keys().collect::<Vec<_>>(), vec![&keeper]);
    // A clock that went back sweeps too, rather than waiting for it to catch up.
    state.populate(&[running(Uuid::new_v4(), 1)], INTERVAL, past);
    state.sweep_if_due(past - 1);
    assert_eq!(state.last_sweep_ms, past - 1);
}

#[tokio::test]
async fn the_facade_over_memory_answers_like_the_registry_expects() {
    let cache = Cache::in_memory();
    let id = Uuid::new_v4();
    assert_eq!(
        cache.beat(&[(id, None)], INTERVAL).await,
        Some(vec![Cached::Miss])
    );
    cache.populate(&[running(id, 30)], INTERVAL).await;
    let got = cache.beat(&[(id, Some("{}".into()))], INTERVAL).await;
    assert_eq!(
        got,
        Some(vec![known(3, AttemptStatus::Running, "", false, None)])
    );
    let lives = cache.liveness(&[id]).await.expect("memory always answers");
    let last = lives[0].last_ms.expect("a heartbeat was recorded");
    assert!(last <= lives[0].now_ms);
    assert_eq!(cache.peek(id).await, Some((Some(last), Some("{}".into()))));
    cache
        .set_status(
            &[entry(id, AttemptStatus::Stopped, Some("reset"), 30)],
            INTERVAL,
        )
        .await;
    assert_eq!(
        cache.statuses(&[id]).await,
        Some(vec![Some((AttemptStatus::Stopped, "reset".into()))])
    );
    assert_eq!(cache.errors(), 0);
    // Clones share the entries.
    assert_eq!(
        cache.clone().statuses(&[id]).await,
        cache.statuses(&[id]).await
    );
}
