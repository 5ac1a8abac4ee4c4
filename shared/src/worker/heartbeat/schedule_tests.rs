//! The schedule's rules with a fake clock: `t(s)` is `s` seconds after a fixed start.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;

fn start() -> Instant {
    // One fixed origin per test run; every test counts from it.
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *START.get_or_init(Instant::now)
}

fn t(seconds: f64) -> Instant {
    start() + Duration::from_secs_f64(seconds)
}

/// `n` first attempts of new tasks, in task id order.
fn ids(n: usize) -> Vec<Key> {
    let mut ids: Vec<Key> = (0..n)
        .map(|run| Key {
            task_id: Uuid::new_v4(),
            attempt: 1,
            run: run as u64,
        })
        .collect();
    ids.sort_by_key(|k| k.task_id);
    ids
}

fn answer(action: HeartbeatAction) -> HeartbeatAnswer {
    HeartbeatAnswer {
        action,
        reason: None,
        retry_after_ms: None,
    }
}

/// Every beat of `sent` answered `action`.
fn answers(sent: &[Sent], action: HeartbeatAction) -> BTreeMap<Uuid, HeartbeatAnswer> {
    sent.iter()
        .map(|s| (s.beat.task_id, answer(action)))
        .collect()
}

/// Sends what is due at `now` and answers everything CONTINUE; returns how many were sent.
fn beat_all(schedule: &mut Schedule, now: Instant) -> usize {
    let sent = schedule.beats(&schedule.due(now));
    let ok = answers(&sent, HeartbeatAction::Continue);
    schedule.apply(&mut Cycle::default(), &sent, Ok(&ok), now, now);
    sent.len()
}

fn sorted(mut v: Vec<Key>) -> Vec<Key> {
    v.sort_by_key(|k| k.task_id);
    v
}

#[test]
fn the_interval_is_a_third_of_the_timeout_clamped_to_one_to_thirty_seconds() {
    let p = Policy::default();
    assert_eq!(p.interval_for(0), None);
    assert_eq!(p.interval_for(-5), None);
    assert_eq!(p.interval_for(1), Some(MIN_INTERVAL));
    assert_eq!(p.interval_for(12), Some(Duration::from_secs(4)));
    assert_eq!(p.interval_for(3_600), Some(MAX_INTERVAL));
    let fixed = Policy {
        interval: Some(Duration::from_millis(500)),
        ..Policy::default()
    };
    assert_eq!(fixed.interval_for(3_600), Some(Duration::from_millis(500)));
    assert_eq!(fixed.interval_for(0), None, "unwatched stays unwatched");
}

#[test]
fn an_activity_is_first_due_one_interval_after_its_start_then_one_after_each_answer() {
    let mut s = Schedule::new(Policy::default());
    let [a] = ids(1)[..] else { unreachable!() };
    s.add(a, 12, t(0.0)); // every 4 s; ticks of 1 s send what is due within half a tick
    assert!(s.due(t(3.4)).is_empty());
    assert_eq!(s.due(t(3.5)), [a]);
    assert_eq!(beat_all(&mut s, t(4.2)), 1);
    // Due again 4 s after it was sent, not after the previous due time.
    assert!(s.due(t(7.6)).is_empty());
    assert_eq!(s.due(t(7.7)), [a]);
}

#[test]
fn unwatched_activities_are_registered_but_never_due_unless_the_handler_asks() {
    let mut s = Schedule::new(Policy::default());
    let [a] = ids(1)[..] else { unreachable!() };
    s.add(a, 0, t(0.0));
    assert_eq!(s.len(), 1);
    assert!(s.due(t(3_600.0)).is_empty());
    s.request(&a, Some(json!({ "done": 10 })));
    assert_eq!(s.due(t(1.0)), [a]);
    let sent = s.beats(&[a]);
    assert_eq!(sent[0].beat.details, Some(json!({ "done": 10 })));
    s.apply(
        &mut Cycle::default(),
        &sent,
        Ok(&answers(&sent, HeartbeatAction::Continue)),
        t(1.0),
        t(1.0),
    );
    assert!(s.due(t(3_600.0)).is_empty(), "the request was answered");
}

#[test]
fn details_requested_while_a_beat_was_in_flight_go_with_the_next_one() {
    let mut s = Schedule::new(Policy::default());
    let [a] = ids(1)[..] else { unreachable!() };
    s.add(a, 30, t(0.0));
    s.request(&a, Some(json!(1)));
    let sent = s.beats(&s.due(t(0.1)));
    s.request(&a, Some(json!(2))); // while the request is out
    s.apply(
        &mut Cycle::default(),
        &sent,
        Ok(&answers(&sent, HeartbeatAction::Continue)),
        t(0.1),
        t(0.2),
    );
    let next = s.beats(&s.due(t(0.3)));
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].beat.details, Some(json!(2)));
}

#[test]
fn a_stall_sends_what_is_overdue_once_not_a_burst_of_missed_beats() {
    let mut s = Schedule::new(Policy::default());
    let all = ids(1_000);
    for id in &all {
        s.add(*id, 3, t(0.0)); // every second
    }
    assert_eq!(beat_all(&mut s, t(1.0)), 1_000);
    // The process stalls for a minute: 59 beats of each activity were missed.
    assert_eq!(sorted(s.due(t(61.0))), all);
    assert_eq!(
        beat_all(&mut s, t(61.0)),
        1_000,
        "each overdue activity once"
    );
    // Ticks that were delayed by the stall come in a rush: nothing is due in them.
    for rush in [61.0, 61.1, 61.3, 61.4] {
        assert_eq!(beat_all(&mut s, t(rush)), 0, "at {rush}");
    }
    assert_eq!(
        beat_all(&mut s, t(62.0)),
        1_000,
        "back to one beat a second"
    );
}

#[test]
fn the_most_overdue_activities_come_first() {
    let mut s = Schedule::new(Policy::default());
    let [a, b, c] = ids(3)[..] else {
        unreachable!()
    };
    s.add(b, 3, t(0.5));
    s.add(a, 3, t(0.0));
    s.add(c, 3, t(0.7));
    assert_eq!(s.due(t(5.0)), [a, b, c]);
}

#[test]
fn stop_and_not_found_fire_the_stop_with_a_reason_and_leave_the_schedule() {
    let mut s = Schedule::new(Policy::default());
    let [a, b, c] = ids(3)[..] else {
        unreachable!()
    };
    let stops = [
        s.add(a, 3, t(0.0)),
        s.add(b, 3, t(0.0)),
        s.add(c, 3, t(0.0)),
    ];
    let sent = s.beats(&s.due(t(1.0)));
    let mut got = BTreeMap::new();
    got.insert(
        a.task_id,
        HeartbeatAnswer {
            action: HeartbeatAction::Stop,
            reason: Some("terminated".into()),
            retry_after_ms: None,
        },
    );
    got.insert(b.task_id, answer(HeartbeatAction::NotFound));
    got.insert(c.task_id, answer(HeartbeatAction::Continue));
    let mut cycle = Cycle::default();
    s.apply(&mut cycle, &sent, Ok(&got), t(1.0), t(1.0));
    assert!(stops[0].token().is_cancelled());
    assert_eq!(stops[0].reason(), Some("terminated"));
    assert!(stops[1].token().is_cancelled());
    assert!(stops[1].reason().is_some_and(|r| r.contains("not found")));
    assert!(!stops[2].token().is_cancelled());
    assert_eq!(s.len(), 1);
    assert_eq!(cycle.next_round(t(1.0)), Round::Done);
}

#[test]
fn throttled_beats_are_retried_first_and_failed_ones_later_in_the_same_cycle() {
    let policy = Policy::default();
    let (throttle, failure) = (policy.throttle_pause, policy.failure_pause);
    let mut s = Schedule::new(policy);
    let [a, b, c] = ids(3)[..] else {
        unreachable!()
    };
    for id in [a, b, c] {
        s.add(id, 3, t(0.0));
    }
    let now = t(1.0);
    let sent = s.beats(&s.due(now));
    // a is throttled, b left out of the answer (a failure), c fine.
    let mut got = BTreeMap::new();
    got.insert(a.task_id, answer(HeartbeatAction::Throttled));
    got.insert(c.task_id, answer(HeartbeatAction::Continue));
    let mut cycle = Cycle::default();
    s.apply(&mut cycle, &sent, Ok(&got), now, now);
    assert_eq!(cycle.next_round(now), Round::WaitUntil(now + throttle));
    assert_eq!(cycle.next_round(now + throttle), Round::Send(vec![a]));
    assert_eq!(
        cycle.next_round(now + throttle),
        Round::WaitUntil(now + failure)
    );
    assert_eq!(cycle.next_round(now + failure), Round::Send(vec![b]));
    assert_eq!(cycle.next_round(now + failure), Round::Done);

    // Both ready at once: the throttled one still leads the round.
    let mut cycle = Cycle::default();
    let (sent_b, sent_a) = (s.beats(&[b]), s.beats(&[a]));
    s.apply(&mut cycle, &sent_b, Err(()), now, now);
    s.apply(&mut cycle, &sent_a, Ok(&got), now, now);
    assert_eq!(cycle.next_round(now + failure), Round::Send(vec![a, b]));
}

#[test]
fn a_failing_beat_is_retried_a_bounded_number_of_times_then_waits_for_the_next_cycle() {
    let policy = Policy::default();
    let max = policy.max_retries;
    let mut s = Schedule::new(policy);
    let [a] = ids(1)[..] else { unreachable!() };
    s.add(a, 3, t(0.0));
    let mut now = t(1.0);
    let mut cycle = Cycle::default();
    let mut requests = 0;
    let mut round = s.due(now);
    while !round.is_empty() {
        requests += 1;
        let sent = s.beats(&round);
        s.apply(&mut cycle, &sent, Err(()), now, now);
        round = match cycle.next_round(now + Duration::from_secs(1)) {
            Round::Send(ids) => ids,
            Round::WaitUntil(_) => unreachable!("a second covers every pause"),
            Round::Done => Vec::new(),
        };
        now += Duration::from_secs(1);
    }
    assert_eq!(requests, 1 + max, "the first send and its retries");
    assert_eq!(cycle.retries_of(&a), max + 1);
    assert_eq!(cycle.gave_up, 1);
    // Still due: the next cycle tries again, with a fresh count.
    assert_eq!(s.due(now), [a]);
    let mut next = Cycle::default();
    let sent = s.beats(&[a]);
    s.apply(&mut next, &sent, Err(()), now, now);
    assert_eq!(next.retries_of(&a), 1);
}

#[test]
fn without_automatic_heartbeats_only_the_handlers_requests_are_sent() {
    let mut s = Schedule::new(Policy {
        automatic: false,
        ..Policy::default()
    });
    let [a, b] = ids(2)[..] else { unreachable!() };
    s.add(a, 3, t(0.0));
    s.add(b, 3, t(0.0));
    assert!(s.due(t(10.0)).is_empty(), "no beat without a request");
    s.request(&b, None);
    assert_eq!(s.due(t(10.0)), [b]);
    assert_eq!(beat_all(&mut s, t(10.0)), 1);
    assert!(s.due(t(20.0)).is_empty());
}

#[test]
fn answers_for_activities_that_finished_meanwhile_are_ignored() {
    let mut s = Schedule::new(Policy::default());
    let [a] = ids(1)[..] else { unreachable!() };
    let stop = s.add(a, 3, t(0.0));
    let sent = s.beats(&s.due(t(1.0)));
    s.remove(&a);
    let mut cycle = Cycle::default();
    s.apply(
        &mut cycle,
        &sent,
        Ok(&answers(&sent, HeartbeatAction::Stop)),
        t(1.0),
        t(1.0),
    );
    assert!(!stop.token().is_cancelled());
    s.apply(&mut cycle, &sent, Err(()), t(1.0), t(1.0));
    assert_eq!(cycle.next_round(t(9.0)), Round::Done);
}

#[test]
fn two_attempts_of_one_task_are_scheduled_apart_and_share_the_tasks_answer() {
    let mut s = Schedule::new(Policy::default());
    let [old] = ids(1)[..] else { unreachable!() };
    let new = Key { attempt: 2, ..old };
    let (old_stop, new_stop) = (s.add(old, 3, t(0.0)), s.add(new, 3, t(0.0)));
    // The stale attempt ends: the retry stays on the schedule.
    s.remove(&old);
    assert_eq!(s.due(t(1.0)), [new]);
    let sent = s.beats(&[new]);
    s.apply(
        &mut Cycle::default(),
        &sent,
        Ok(&answers(&sent, HeartbeatAction::Stop)),
        t(1.0),
        t(1.0),
    );
    assert!(new_stop.token().is_cancelled());
    assert!(!old_stop.token().is_cancelled());
}
