//! The worker SDK against a real RabbitMQ (`WEFT_AMQP_URL`, default the local broker).
//!
//! Each test plays the decider: it publishes activity tasks to the activity exchange of a
//! random namespace, runs a [`Worker`] in-process and reads the results from the command
//! shard queues. `heartbeats` adds a test-side heartbeat service.

mod heartbeats;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;
use weft::bus::{Bus, ConsumeOptions, Delivery, Disposition};
use weft::messages::{ActivityMessage, ActivityTask, Command};
use weft::topology::Names;
use weft::worker::{ActivityError, Worker, WorkerBuilder};
use weft::{Config, Envelope};

/// Upper bound on any wait for something that should happen.
const WAIT: Duration = Duration::from_secs(20);
/// How long to watch for something that should not happen.
const QUIET: Duration = Duration::from_millis(700);
/// The shard results are routed to (of two), so routing by `reply_to` is visible.
const REPLY_SHARD: u16 = 1;
const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The test's side of the bus: schedules activities and collects results, like the decider.
struct Decider {
    bus: Bus,
    names: Names,
    config: Config,
    results: mpsc::UnboundedReceiver<Delivery>,
    consumers: CancellationToken,
    /// The shard queues a stopping worker's `WithdrawOffer` came to, passed over by
    /// the result readers.
    withdrawals: Vec<String>,
}

impl Decider {
    /// The test decider, with a stand-in registry that grants every claim.
    async fn start() -> Self {
        let decider = Self::without_registry().await;
        weft::testing::grant_claims(&decider.bus, decider.consumers.clone());
        decider
    }

    /// The test decider alone: claims go unanswered unless the test serves the
    /// heartbeat queue itself.
    async fn without_registry() -> Self {
        let config = Config {
            namespace: format!("t{}", Uuid::new_v4().simple()),
            amqp_url: std::env::var("WEFT_AMQP_URL").unwrap_or_else(|_| Config::default().amqp_url),
            shards: 2,
            shutdown_grace: Duration::from_secs(10),
            ..Config::default()
        };
        let names = Names::new(&config.namespace, config.shards);
        let bus = tokio::time::timeout(
            WAIT,
            Bus::connect(&config.amqp_url, names.clone(), CancellationToken::new()),
        )
        .await
        .expect("broker reachable")
        .expect("connect");
        let (sender, results) = mpsc::unbounded_channel();
        let consumers = CancellationToken::new();
        for k in 0..config.shards {
            let sender = sender.clone();
            let opts = ConsumeOptions {
                prefetch: 32,
                concurrency: 1,
            };
            let on_result = move |d: Delivery| {
                let _ = sender.send(d);
                async { Disposition::Ack }
            };
            bus.consume(&names.command_queue(k), opts, on_result, consumers.clone());
        }
        Self {
            bus,
            names,
            config,
            results,
            consumers,
            withdrawals: Vec::new(),
        }
    }

    fn worker(&self) -> WorkerBuilder {
        Worker::builder(&self.config).worker_id("w-test")
    }

    fn task(&self, task_name: &str, input: Value) -> ActivityTask {
        ActivityTask {
            task_id: Uuid::new_v4(),
            workflow_id: format!("wf-{}", Uuid::new_v4().simple()),
            run_id: Uuid::new_v4(),
            task_ref: format!("{task_name}_ref"),
            task_name: task_name.to_owned(),
            task_type: "SIMPLE".into(),
            attempt: 1,
            input,
            reply_to: Names::shard_key(REPLY_SHARD),
            scheduled_at: Utc::now(),
            response_timeout_seconds: 0,
            eager: false,
            results_together: false,
        }
    }

    async fn schedule(&self, task: &ActivityTask) {
        let message = ActivityMessage::ActivityTask(task.clone());
        let envelope = Envelope::new(&task.workflow_id, Some(task.run_id), &message).unwrap();
        self.schedule_envelope(&task.task_name, &envelope, None)
            .await;
    }

    async fn schedule_envelope(&self, task_name: &str, env: &Envelope, trace: Option<&str>) {
        self.bus.declare_activity_queue(task_name).await.unwrap();
        let body = env.to_bytes().unwrap();
        let exchange = self.names.activity_exchange();
        self.bus
            .publish_bytes(&exchange, task_name, &body, trace)
            .await
            .unwrap();
    }

    /// The next result command, with the delivery it came in (the `ActivityStarted`
    /// reports that precede results are checked and passed over).
    async fn next_result(&mut self) -> (Delivery, Command) {
        loop {
            let delivery = tokio::time::timeout(WAIT, self.results.recv())
                .await
                .expect("a result in time")
                .expect("result consumers alive");
            if self.withdrawn(&delivery) {
                continue;
            }
            assert_eq!(
                delivery.queue,
                self.names.command_queue(REPLY_SHARD),
                "results go to the shard named by reply_to"
            );
            match delivery.envelope.decode::<Command>().unwrap() {
                Command::ActivityStarted(started) => {
                    assert_eq!(started.worker_id.as_deref(), Some("w-test"));
                }
                command => return (delivery, command),
            }
        }
    }

    /// Whether `delivery` is a stopping worker's withdrawal of its eager offers (noted).
    fn withdrawn(&mut self, delivery: &Delivery) -> bool {
        let withdrawal = matches!(
            delivery.envelope.decode::<Command>(),
            Ok(Command::WithdrawOffer(_))
        );
        if withdrawal {
            self.withdrawals.push(delivery.queue.clone());
        }
        withdrawal
    }

    /// Results for `n` tasks, keyed by task id.
    async fn results_by_task(&mut self, n: usize) -> Vec<(Uuid, Command)> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let (_, command) = self.next_result().await;
            out.push((task_id(&command), command));
        }
        out
    }

    async fn assert_no_result(&mut self) {
        while let Ok(got) = tokio::time::timeout(QUIET, self.results.recv()).await {
            if got.as_ref().is_some_and(|d| self.withdrawn(d)) {
                continue;
            }
            let started = got.as_ref().map(|d| {
                matches!(
                    d.envelope.decode::<Command>(),
                    Ok(Command::ActivityStarted(_))
                )
            });
            if started != Some(true) {
                panic!("unexpected result: {got:?}");
            }
        }
    }

    async fn teardown(self) {
        self.consumers.cancel();
        self.bus.teardown(&[]).await.unwrap();
    }
}

fn task_id(command: &Command) -> Uuid {
    match command {
        Command::ActivityCompleted(c) => c.task_id,
        Command::ActivityFailed(f) => f.task_id,
        other => panic!("not an activity result: {other:?}"),
    }
}

fn spawn(worker: Worker, shutdown: &CancellationToken) -> JoinHandle<weft::Result<()>> {
    tokio::spawn(worker.run(shutdown.clone()))
}

async fn stopped(run: JoinHandle<weft::Result<()>>) {
    tokio::time::timeout(WAIT, run)
        .await
        .expect("the worker stops in time")
        .expect("no panic")
        .expect("a clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_result_goes_to_the_reply_shard_with_output_attempt_and_worker_id() {
    let mut decider = Decider::start().await;
    let mut task = decider.task("echo", json!({"first": "Ada"}));
    task.attempt = 3;
    decider.schedule(&task).await;
    let worker = decider
        .worker()
        .handler("echo", |t: ActivityTask| async move {
            Ok(json!({"got": t.input, "ref": t.task_ref}))
        })
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    let (delivery, command) = decider.next_result().await;
    assert_eq!(delivery.envelope.workflow_id, task.workflow_id);
    assert_eq!(delivery.envelope.run_id, Some(task.run_id));
    let Command::ActivityCompleted(done) = command else {
        panic!("expected ActivityCompleted, got {command:?}");
    };
    assert_eq!(done.task_id, task.task_id);
    assert_eq!(done.run_id, task.run_id);
    assert_eq!(done.attempt, 3);
    assert_eq!(
        done.output,
        json!({"got": {"first": "Ada"}, "ref": "echo_ref"})
    );
    assert_eq!(done.worker_id.as_deref(), Some("w-test"));
    let started = done.started_at.expect("started_at set");
    assert!(started >= task.scheduled_at && started <= Utc::now());

    shutdown.cancel();
    stopped(run).await;
    decider.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_errors_are_reported_with_their_terminal_flag() {
    let mut decider = Decider::start().await;
    let terminal = decider.task("charge", json!({"terminal": true}));
    let retryable = decider.task("charge", json!({"terminal": false}));
    decider.schedule(&terminal).await;
    decider.schedule(&retryable).await;
    let worker = decider
        .worker()
        .handler("charge", |t: ActivityTask| async move {
            if t.input["terminal"] == json!(true) {
                Err(ActivityError::terminal("card declined"))
            } else {
                Err(anyhow::anyhow!("bank unavailable").into())
            }
        })
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    for (id, command) in decider.results_by_task(2).await {
        let Command::ActivityFailed(failed) = command else {
            panic!("expected ActivityFailed, got {command:?}");
        };
        assert_eq!(failed.worker_id.as_deref(), Some("w-test"));
        assert!(failed.started_at.is_some());
        if id == terminal.task_id {
            assert!(failed.terminal);
            assert_eq!(failed.reason, "card declined");
        } else {
            assert_eq!(id, retryable.task_id);
            assert!(!failed.terminal);
            assert_eq!(failed.reason, "bank unavailable");
        }
    }

    shutdown.cancel();
    stopped(run).await;
    decider.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panicking_handler_is_a_retryable_failure_and_the_worker_goes_on() {
    let mut decider = Decider::start().await;
    let boom = decider.task("fragile", json!({"panic": true}));
    let fine = decider.task("fragile", json!({"panic": false}));
    decider.schedule(&boom).await;
    let worker = decider
        .worker()
        .concurrency(1)
        .handler("fragile", |t: ActivityTask| async move {
            if t.input["panic"] == json!(true) {
                panic!("index out of bounds");
            }
            Ok(json!({"ok": true}))
        })
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    let (_, command) = decider.next_result().await;
    let Command::ActivityFailed(failed) = command else {
        panic!("expected ActivityFailed, got {command:?}");
    };
    assert_eq!(failed.task_id, boom.task_id);
    assert!(!failed.terminal);
    assert_eq!(failed.reason, "handler panicked: index out of bounds");

    decider.schedule(&fine).await;
    let (_, command) = decider.next_result().await;
    assert!(matches!(command, Command::ActivityCompleted(c) if c.task_id == fine.task_id));

    shutdown.cancel();
    stopped(run).await;
    decider.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_bound_holds_across_task_names() {
    let mut decider = Decider::start().await;
    let mut tasks = Vec::new();
    for name in ["slow_a", "slow_b"] {
        for _ in 0..3 {
            let task = decider.task(name, Value::Null);
            decider.schedule(&task).await;
            tasks.push(task.task_id);
        }
    }
    let (running, _) = watch::channel(0usize);
    let running = Arc::new(running);
    let most = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (running, most) = (Arc::clone(&running), Arc::clone(&most));
        move |_t: ActivityTask| {
            let (running, most) = (Arc::clone(&running), Arc::clone(&most));
            async move {
                running.send_modify(|n| {
                    *n += 1;
                    most.fetch_max(*n, Ordering::SeqCst);
                });
                // Stay until a second activity runs too, so that the bound is what stops a
                // third one; then linger a little to give a third the chance to start.
                let mut seen = running.subscribe();
                let _ = tokio::time::timeout(WAIT, seen.wait_for(|n| *n >= 2)).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                running.send_modify(|n| *n -= 1);
                Ok(Value::Null)
            }
        }
    };
    let worker = decider
        .worker()
        .concurrency(2)
        .handler("slow_a", handler.clone())
        .handler("slow_b", handler)
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    let mut done: Vec<Uuid> = decider
        .results_by_task(6)
        .await
        .into_iter()
        .map(|(id, command)| {
            assert!(
                matches!(command, Command::ActivityCompleted(_)),
                "{command:?}"
            );
            id
        })
        .collect();
    done.sort();
    tasks.sort();
    assert_eq!(done, tasks);
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "never more than 2 at once, and 2 reached"
    );

    shutdown.cancel();
    stopped(run).await;
    decider.teardown().await;
}

/// A handler that reports its start and waits for the test to let it finish.
fn gated(
    started: mpsc::UnboundedSender<Uuid>,
    gate: Arc<Semaphore>,
) -> impl Fn(ActivityTask) -> futures_util::future::BoxFuture<'static, Result<Value, ActivityError>>
       + Send
       + Sync
       + 'static {
    move |t: ActivityTask| {
        let (started, gate) = (started.clone(), Arc::clone(&gate));
        Box::pin(async move {
            let _ = started.send(t.task_id);
            gate.acquire().await.map_err(|e| e.to_string())?.forget();
            Ok(json!({"finished": t.task_id}))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_the_running_activity_finish_and_leaves_the_rest_queued() {
    let mut decider = Decider::start().await;
    let first = decider.task("wait", Value::Null);
    let second = decider.task("wait", Value::Null);
    decider.schedule(&first).await;
    decider.schedule(&second).await;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let gate = Arc::new(Semaphore::new(0));
    let worker = decider
        .worker()
        .concurrency(1)
        .handler("wait", gated(started_tx, Arc::clone(&gate)))
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    let running = tokio::time::timeout(WAIT, started.recv()).await.unwrap();
    assert_eq!(running, Some(first.task_id));
    shutdown.cancel();
    gate.add_permits(2);
    let (_, command) = decider.next_result().await;
    assert!(matches!(command, Command::ActivityCompleted(c) if c.task_id == first.task_id));
    stopped(run).await;
    decider.assert_no_result().await;
    assert!(
        started.try_recv().is_err(),
        "no activity starts after shutdown"
    );
    // Its eager offers are withdrawn from every shard (docs/eager-dispatch.md).
    let mut withdrawn = decider.withdrawals.clone();
    withdrawn.sort();
    let mut shards: Vec<String> = (0..decider.names.shards())
        .map(|k| decider.names.command_queue(k))
        .collect();
    shards.sort();
    assert_eq!(withdrawn, shards);

    // The second task was never acknowledged: the next worker gets it.
    let next = decider
        .worker()
        .handler("wait", |_t: ActivityTask| async { Ok(Value::Null) })
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(next, &shutdown);
    let (_, command) = decider.next_result().await;
    assert!(matches!(command, Command::ActivityCompleted(c) if c.task_id == second.task_id));
    shutdown.cancel();
    stopped(run).await;
    decider.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn activity_unfinished_after_the_grace_period_goes_back_to_its_queue() {
    let mut decider = Decider::start().await;
    decider.config.shutdown_grace = Duration::from_millis(300);
    let stuck = decider.task("stuck", Value::Null);
    decider.schedule(&stuck).await;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let worker = decider
        .worker()
        .handler("stuck", gated(started_tx, Arc::new(Semaphore::new(0))))
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    let running = tokio::time::timeout(WAIT, started.recv()).await.unwrap();
    assert_eq!(running, Some(stuck.task_id));
    shutdown.cancel();
    stopped(run).await;
    decider.assert_no_result().await;

    let next = decider
        .worker()
        .handler("stuck", |_t: ActivityTask| async {
            Ok(json!({"second": true}))
        })
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(next, &shutdown);
    let (_, command) = decider.next_result().await;
    assert!(matches!(command, Command::ActivityCompleted(c) if c.task_id == stuck.task_id));
    shutdown.cancel();
    stopped(run).await;
    decider.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_activity_messages_are_dead_lettered_without_blocking_the_queue() {
    let mut decider = Decider::start().await;
    let mut bogus = Envelope::new(
        "wf-bogus",
        None,
        &ActivityMessage::ActivityTask(decider.task("mixed", Value::Null)),
    )
    .unwrap();
    bogus.kind = "Bogus".into();
    decider.schedule_envelope("mixed", &bogus, None).await;
    let mut unanswerable = decider.task("mixed", Value::Null);
    unanswerable.reply_to = String::new();
    decider.schedule(&unanswerable).await;
    let good = decider.task("mixed", Value::Null);
    decider.schedule(&good).await;
    let (dead_tx, mut dead) = mpsc::unbounded_channel();
    let dlq = Names::dlq(&decider.names.activity_queue("mixed"));
    let opts = ConsumeOptions {
        prefetch: 1,
        concurrency: 1,
    };
    let on_dead = move |d: Delivery| {
        let _ = dead_tx.send(d);
        async { Disposition::Ack }
    };
    decider
        .bus
        .consume(&dlq, opts, on_dead, decider.consumers.clone());
    let worker = decider
        .worker()
        .concurrency(1)
        .handler("mixed", |_t: ActivityTask| async { Ok(Value::Null) })
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    let (_, command) = decider.next_result().await;
    assert!(matches!(command, Command::ActivityCompleted(c) if c.task_id == good.task_id));
    let mut dead_ids = Vec::new();
    for _ in 0..2 {
        let dead_letter = tokio::time::timeout(WAIT, dead.recv())
            .await
            .unwrap()
            .unwrap();
        dead_ids.push(dead_letter.envelope.id);
    }
    assert!(dead_ids.contains(&bogus.id), "{dead_ids:?}");
    decider.assert_no_result().await;

    shutdown.cancel();
    stopped(run).await;
    decider.teardown().await;
}

/// Runs a `shout` worker (tasks whose text is "stuck" never end) and one task from its
/// shared queue, whose result's offer names the worker's eager queue; then sends it the
/// tasks of `texts` together, as the decider would. Gives the tasks, the eager queue, the
/// worker and its shutdown.
async fn sent_together(
    decider: &mut Decider,
    texts: &[&str],
) -> (
    Vec<ActivityTask>,
    String,
    JoinHandle<weft::Result<()>>,
    CancellationToken,
) {
    let first = decider.task("shout", json!({"text": "first"}));
    decider.schedule(&first).await;
    let worker = decider
        .worker()
        .handler("shout", |t: ActivityTask| async move {
            let text = t.input["text"].as_str().unwrap_or_default().to_owned();
            if text == "stuck" {
                std::future::pending::<()>().await;
            }
            Ok(json!({"text": text.to_uppercase()}))
        })
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    let (_, command) = decider.next_result().await;
    let Command::ActivityCompleted(done) = command else {
        panic!("expected ActivityCompleted, got {command:?}");
    };
    let offer = done.eager.expect("the result offers the next activity");
    assert!(offer.batches, "the SDK takes tasks sent together");

    let together: Vec<ActivityTask> = texts
        .iter()
        .map(|text| ActivityTask {
            eager: true,
            results_together: false,
            ..decider.task("shout", json!({ "text": text }))
        })
        .collect();
    let bodies: Vec<Vec<u8>> = together
        .iter()
        .map(|t| {
            let message = ActivityMessage::ActivityTask(t.clone());
            Envelope::new(&t.workflow_id, Some(t.run_id), &message)
                .unwrap()
                .to_bytes()
                .unwrap()
        })
        .collect();
    let parts: Vec<(&[u8], Option<&str>)> = bodies
        .iter()
        .map(|b| (b.as_slice(), Some(PARENT)))
        .collect();
    let batch = weft::messages::ActivityTaskBatch::encode(&parts).unwrap();
    let queue = decider
        .names
        .eager_queue(&offer.queue_prefix, "shout")
        .expect("the offer names an eager queue of the namespace");
    decider
        .bus
        .publish_bytes(&decider.names.eager_exchange(), &queue, &batch, None)
        .await
        .unwrap();
    (together, queue, run, shutdown)
}

/// Eager tasks the decider sent together (one `ActivityTasks` message to the worker's
/// eager queue, docs/eager-dispatch.md) each run, without a claim, and report their
/// results; the message is acknowledged once, when all are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_sent_together_to_the_eager_queue_each_run_and_are_settled_as_one_message() {
    let mut decider = Decider::start().await;
    let (together, queue, run, shutdown) = sent_together(&mut decider, &["a", "b", "c"]).await;

    let mut results = decider.results_by_task(3).await;
    results.sort_by_key(|(id, _)| *id);
    let mut expected: Vec<(Uuid, String)> = together
        .iter()
        .map(|t| (t.task_id, t.input["text"].as_str().unwrap().to_uppercase()))
        .collect();
    expected.sort();
    for ((id, command), (task_id, text)) in results.iter().zip(&expected) {
        assert_eq!(id, task_id);
        let Command::ActivityCompleted(done) = command else {
            panic!("expected ActivityCompleted, got {command:?}");
        };
        assert_eq!(done.output, json!({ "text": text }));
    }
    decider.assert_no_result().await;
    assert_eq!(
        decider.bus.message_count(&queue).await.unwrap(),
        0,
        "the message was acknowledged, not left or requeued"
    );

    shutdown.cancel();
    stopped(run).await;
    decider.teardown().await;
}

/// Results for one shard that meet a result in flight there go on together, as one
/// `ActivityResults` message, when their tasks say the decider takes them
/// (`resultsTogether`); every result arrives once. Without the flag each goes alone. The
/// handlers of a round end together (a barrier), so their results meet the first one's
/// publish in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_for_one_shard_go_together_only_when_their_tasks_allow_it() {
    const TASKS: usize = 40;
    let mut decider = Decider::start().await;
    let barrier = |name: &'static str| {
        let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
        move |t: ActivityTask| {
            let barrier = barrier.clone();
            async move {
                barrier.wait().await;
                Ok(json!({"from": name, "ref": t.task_ref}))
            }
        }
    };
    let worker = decider
        .worker()
        .concurrency(TASKS)
        // Held at the barrier, the handlers must not report their start: results only.
        .start_report_after(Duration::from_secs(60))
        .handler("together", barrier("together"))
        .handler("alone", barrier("alone"))
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    for (name, together) in [("together", true), ("alone", false)] {
        let tasks: Vec<ActivityTask> = (0..TASKS)
            .map(|_| ActivityTask {
                results_together: together,
                ..decider.task(name, json!({}))
            })
            .collect();
        for task in &tasks {
            decider.schedule(task).await;
        }
        let (mut messages, mut batches) = (0, 0);
        let mut results = Vec::new();
        while results.len() < TASKS {
            let delivery = tokio::time::timeout(WAIT, decider.results.recv())
                .await
                .expect("results in time")
                .expect("result consumers alive");
            let envelopes = match delivery.envelope.kind.as_str() {
                "ActivityResults" => {
                    batches += 1;
                    weft::activity_batch::ActivityResultBatch::unpack(&delivery.envelope)
                        .unwrap()
                        .into_iter()
                        .map(|m| m.envelope)
                        .collect()
                }
                _ => vec![delivery.envelope],
            };
            messages += 1;
            for envelope in envelopes {
                match envelope.decode::<Command>().unwrap() {
                    Command::ActivityCompleted(done) => {
                        assert_eq!(envelope.run_id, Some(done.run_id));
                        results.push(done.task_id);
                    }
                    other => panic!("not a result: {other:?}"),
                }
            }
        }
        results.sort();
        let mut expected: Vec<Uuid> = tasks.iter().map(|t| t.task_id).collect();
        expected.sort();
        assert_eq!(results, expected, "{name}: each result once");
        if together {
            assert!(
                batches > 0 && messages < TASKS,
                "{name}: {TASKS} results in {messages} messages, {batches} of them together"
            );
        } else {
            assert_eq!((batches, messages), (0, TASKS), "{name}: each alone");
        }
    }
    decider.assert_no_result().await;

    shutdown.cancel();
    stopped(run).await;
    decider.teardown().await;
}

/// A task sent together with others that the worker does not finish (shutdown abandons
/// it) goes on alone to `<ns>.eager.expired`, whence the decider sends it to its shared
/// queue; the message is acknowledged, so the finished task does not run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_sent_together_that_is_not_finished_goes_on_alone_and_the_rest_is_not_run_again() {
    let mut decider = Decider::start().await;
    decider.config.shutdown_grace = Duration::from_millis(300);
    let (expired_tx, mut expired) = mpsc::unbounded_channel();
    let opts = ConsumeOptions {
        prefetch: 8,
        concurrency: 1,
    };
    decider.bus.consume(
        &decider.names.eager_expired_queue(),
        opts,
        move |d: Delivery| {
            let _ = expired_tx.send(d);
            async { Disposition::Ack }
        },
        decider.consumers.clone(),
    );
    let (together, queue, run, shutdown) = sent_together(&mut decider, &["ok", "stuck"]).await;
    let (_, command) = decider.next_result().await;
    assert_eq!(task_id(&command), together[0].task_id, "the task that ends");
    shutdown.cancel();
    stopped(run).await;

    let passed_on = tokio::time::timeout(WAIT, expired.recv())
        .await
        .expect("passed on in time")
        .unwrap();
    let ActivityMessage::ActivityTasks(batch) = passed_on.envelope.decode().unwrap() else {
        panic!("not tasks sent together: {:?}", passed_on.envelope);
    };
    let left: Vec<Uuid> = batch
        .into_tasks()
        .unwrap()
        .into_iter()
        .map(|(t, trace)| {
            assert_eq!(trace.as_deref(), Some(PARENT), "its trace goes with it");
            t.task_id
        })
        .collect();
    assert_eq!(left, [together[1].task_id], "only the unfinished task");
    assert_eq!(
        decider.bus.message_count(&queue).await.unwrap(),
        0,
        "the message was acknowledged, not requeued (its finished task would run again)"
    );
    decider.assert_no_result().await;
    decider.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_joins_the_trace_of_the_activity_task() {
    let _telemetry = weft::telemetry::init("weft-worker-test").unwrap();
    let mut decider = Decider::start().await;
    let task = decider.task("traced", Value::Null);
    let message = ActivityMessage::ActivityTask(task.clone());
    let envelope = Envelope::new(&task.workflow_id, Some(task.run_id), &message).unwrap();
    decider
        .schedule_envelope("traced", &envelope, Some(PARENT))
        .await;
    let worker = decider
        .worker()
        .handler("traced", |_t: ActivityTask| async { Ok(Value::Null) })
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);

    let (delivery, _) = decider.next_result().await;
    let traceparent = delivery
        .traceparent
        .expect("the result carries a traceparent");
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(
        parts.get(1),
        Some(&"4bf92f3577b34da6a3ce929d0e0e4736"),
        "{traceparent}"
    );
    assert_ne!(
        parts.get(2),
        Some(&"00f067aa0ba902b7"),
        "a child span, not the parent"
    );

    shutdown.cancel();
    stopped(run).await;
    decider.teardown().await;
}

#[tokio::test]
async fn worker_without_handlers_refuses_to_run() {
    let worker = Worker::builder(&Config::default()).build();
    let err = worker.run(CancellationToken::new()).await.unwrap_err();
    assert!(matches!(err, weft::Error::Config(_)), "{err}");
}

#[tokio::test]
async fn shutdown_while_waiting_for_the_broker_is_a_clean_stop() {
    let config = Config {
        amqp_url: "amqp://guest:guest@127.0.0.1:1/%2f".into(),
        ..Config::default()
    };
    let worker = Worker::builder(&config)
        .handler("x", |_t: ActivityTask| async { Ok(Value::Null) })
        .build();
    let shutdown = CancellationToken::new();
    let run = spawn(worker, &shutdown);
    tokio::time::sleep(Duration::from_millis(200)).await;
    shutdown.cancel();
    stopped(run).await;
}
