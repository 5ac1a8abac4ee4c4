//! The example worker: the activities of the `greet` workflow (`make_name`, `shout`,
//! `count`), and `slow` (sleeps as long as its input says, for tests that watch
//! activities overlap), served through the worker SDK. The binary `weft-worker-example`
//! wires configuration, telemetry and signals around [`register`].

pub mod activities;

use weft::worker::WorkerBuilder;

/// The example workflow definitions these activities serve (`workflows/*.json`), for
/// `weft dev --example` to register.
pub const WORKFLOWS: [(&str, &str); 1] = [("greet", include_str!("../workflows/greet.json"))];

/// The task names this worker serves.
pub const TASK_NAMES: [&str; 4] = ["make_name", "shout", "count", "slow"];

/// Activities run at once: the handlers return at once, so many can share the process
/// (the SDK's default, 16, suits handlers that do real work).
pub const CONCURRENCY: usize = 64;

/// Adds the `greet` activities' handlers to `builder`, with [`CONCURRENCY`].
pub fn register(builder: WorkerBuilder) -> WorkerBuilder {
    builder
        .concurrency(CONCURRENCY)
        .handler("make_name", |task| async move {
            activities::make_name(&task.input)
        })
        .handler(
            "shout",
            |task| async move { activities::shout(&task.input) },
        )
        .handler(
            "count",
            |task| async move { activities::count(&task.input) },
        )
        .handler(
            "slow",
            |task| async move { activities::slow(&task.input).await },
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft::worker::Worker;

    #[test]
    fn registers_every_task_name() {
        let worker = register(Worker::builder(&weft::Config::default())).build();
        let mut names: Vec<_> = worker.task_names().collect();
        names.sort_unstable();
        let mut expected = TASK_NAMES.to_vec();
        expected.sort_unstable();
        assert_eq!(names, expected);
    }
}
