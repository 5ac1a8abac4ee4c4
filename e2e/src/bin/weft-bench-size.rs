//! `weft-bench-size` — the cost of one run's step as the run grows (issue 20): a DO_WHILE
//! of N iterations and a FORK_JOIN_DYNAMIC of N branches, each with a system task (INLINE)
//! and with a worker's task (SIMPLE `make_name` on the example worker), against the real
//! services (release build), each size in a fresh database and namespace.
//!
//! For each shape and size: one run, started and polled (`includeTasks=false`, every
//! 100 ms) until it ends; the wall time from start to end (ms per step = that / N), the
//! decider's CPU time per step, and its resident memory (the highest sampled while the
//! run went on). Then the run is read as a client would: `GET` without tasks, and its
//! tasks in pages of 100.
//!
//! `--dev`: the same on `weft dev` in this process (SQLite in memory, the in-process bus,
//! the example worker on it); the memory is then this process's.
//!
//! Prints a markdown block with the figures, the machine and the command.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::{json, Value};
use weft_e2e::process::Service;
use weft_e2e::{EnvOptions, Suite};

/// Clock ticks per second of `/proc`'s times (`USER_HZ`).
const TICKS_PER_SECOND: f64 = 100.0;
/// How often the run is polled, and the decider's memory sampled.
const POLL: Duration = Duration::from_millis(100);

const USAGE: &str = "usage: weft-bench-size [--sizes 100,1000,10000,100000] \
    [--shapes loop-inline,loop-simple,fork-inline,fork-simple] [--keep-last N] [--dev]";

/// What a run's steps are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// A DO_WHILE whose body is one INLINE task.
    LoopInline,
    /// A DO_WHILE whose body is one SIMPLE task.
    LoopSimple,
    /// A FORK_JOIN_DYNAMIC of INLINE branches.
    ForkInline,
    /// A FORK_JOIN_DYNAMIC of SIMPLE branches.
    ForkSimple,
}

impl Shape {
    const ALL: [Shape; 4] = [
        Shape::LoopInline,
        Shape::LoopSimple,
        Shape::ForkInline,
        Shape::ForkSimple,
    ];

    fn name(self) -> &'static str {
        match self {
            Shape::LoopInline => "loop-inline",
            Shape::LoopSimple => "loop-simple",
            Shape::ForkInline => "fork-inline",
            Shape::ForkSimple => "fork-simple",
        }
    }

    fn step(self) -> &'static str {
        match self {
            Shape::LoopInline | Shape::LoopSimple => "iteration",
            Shape::ForkInline | Shape::ForkSimple => "branch",
        }
    }

    /// The definition (named after the shape) and the input of a run of `n` steps; a
    /// loop keeps the outputs of its last `keep_last` iterations when given
    /// (`keepLastN`), else every iteration's, as Conductor's.
    fn workflow(self, n: usize, keep_last: Option<usize>) -> (Value, Value) {
        let inline = json!({"evaluatorType": "javascript", "expression": "$.i + 1"});
        let simple = json!({"first": "x"});
        let body = match self {
            Shape::LoopInline => json!({"name": "step", "taskReferenceName": "step",
                "type": "INLINE", "inputParameters": {
                    "evaluatorType": "javascript", "expression": "$.i + 1",
                    "i": "${loop.output.iteration}"}}),
            _ => json!({"name": "make_name", "taskReferenceName": "step", "type": "SIMPLE",
                "inputParameters": {"first": "x"}}),
        };
        let mut loop_input = json!({"times": "${workflow.input.n}"});
        if let Some(keep) = keep_last {
            loop_input["keepLastN"] = json!(keep);
        }
        let tasks = match self {
            Shape::LoopInline | Shape::LoopSimple => json!([
                {"name": "loop", "taskReferenceName": "loop", "type": "DO_WHILE",
                 "loopCondition": "$.loop['iteration'] < $.times",
                 "inputParameters": loop_input,
                 "loopOver": [body]}]),
            Shape::ForkInline | Shape::ForkSimple => {
                let (task_type, name) = if self == Shape::ForkInline {
                    ("INLINE", "step")
                } else {
                    ("SIMPLE", "make_name")
                };
                json!([
                    {"name": "fork", "taskReferenceName": "fork", "type": "FORK_JOIN_DYNAMIC",
                     "inputParameters": {"forkTaskName": name, "forkTaskType": task_type,
                                         "forkTaskInputs": "${workflow.input.inputs}"}},
                    {"name": "join", "taskReferenceName": "join", "type": "JOIN"}])
            }
        };
        let definition = json!({"name": format!("size_{}", self.name()).replace('-', "_"),
            "version": 1, "tasks": tasks, "outputParameters": {}});
        let input = match self {
            Shape::LoopInline | Shape::LoopSimple => json!({"n": n}),
            Shape::ForkInline => {
                json!({"inputs": (0..n).map(|i| {
                    let mut input = inline.clone();
                    input["i"] = json!(i);
                    input
                }).collect::<Vec<_>>()})
            }
            Shape::ForkSimple => json!({"inputs": vec![simple; n]}),
        };
        (definition, input)
    }

    fn needs_worker(self) -> bool {
        matches!(self, Shape::LoopSimple | Shape::ForkSimple)
    }
}

struct Args {
    sizes: Vec<usize>,
    shapes: Vec<Shape>,
    keep_last: Option<usize>,
    dev: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        sizes: vec![100, 1_000, 10_000, 100_000],
        shapes: Shape::ALL.to_vec(),
        keep_last: None,
        dev: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--dev" => args.dev = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "--keep-last" => {
                let value = it.next().context("--keep-last needs a value")?;
                args.keep_last = Some(
                    value
                        .parse()
                        .with_context(|| format!("--keep-last {value:?}"))?,
                );
            }
            "--sizes" => {
                let value = it.next().context("--sizes needs a value")?;
                args.sizes = value
                    .split(',')
                    .map(|s| s.trim().replace('_', "").parse())
                    .collect::<Result<_, _>>()
                    .with_context(|| format!("--sizes {value:?}"))?;
            }
            "--shapes" => {
                let value = it.next().context("--shapes needs a value")?;
                args.shapes = value
                    .split(',')
                    .map(|s| {
                        Shape::ALL
                            .into_iter()
                            .find(|shape| shape.name() == s.trim())
                            .with_context(|| format!("unknown shape {s:?}; {USAGE}"))
                    })
                    .collect::<anyhow::Result<_>>()?;
            }
            _ => anyhow::bail!("unknown argument {flag:?}; {USAGE}"),
        }
    }
    Ok(args)
}

/// One run's figures.
struct Row {
    shape: Shape,
    size: usize,
    wall: Duration,
    /// The decider's CPU seconds over the run (`None` on `--dev`: one process does all).
    decider_cpu: Option<f64>,
    /// The highest resident memory sampled while the run went on, in MiB.
    peak_rss_mib: f64,
    /// `GET /api/workflow/{id}?includeTasks=false`, median of 20.
    get_without_tasks: Duration,
    /// A page of 100 tasks from the middle of the run, median of 20.
    tasks_page: Duration,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let mut rows = Vec::new();
    for &shape in &args.shapes {
        for &size in &args.sizes {
            eprintln!("{} × {size}", shape.name());
            rows.push(one(shape, size, &args).await?);
            eprintln!("  {}", render_row(rows.last().expect("pushed")));
        }
    }
    println!("{}", report(&args, &rows));
    Ok(())
}

async fn one(shape: Shape, size: usize, args: &Args) -> anyhow::Result<Row> {
    let dev = args.dev;
    let cap = (size + 10).to_string();
    let options = EnvOptions {
        extra_env: vec![
            ("WEFT_MAX_LOOP_ITERATIONS".into(), cap.clone()),
            ("WEFT_MAX_FORK_BRANCHES".into(), cap),
        ],
        ..EnvOptions::default()
    };
    let env = weft_e2e::TestEnv::create(options).await?;
    let mut suite = if dev {
        Suite::start_dev(env).await?
    } else {
        let mut services = Service::CORE.to_vec();
        if shape.needs_worker() {
            services.push(Service::Worker);
        }
        Suite::start_with(env, &services).await?
    };
    let result = measure(&suite, shape, size, args).await;
    if let Err(e) = &result {
        eprintln!("benchmark failed: {e:#}\nprocesses:\n{}", suite.describe());
    }
    if dev {
        suite.stop_dev().await?;
    } else {
        suite.stop_all().await?;
    }
    result
}

async fn measure(suite: &Suite, shape: Shape, size: usize, args: &Args) -> anyhow::Result<Row> {
    let dev = args.dev;
    let client = suite.client();
    let (definition, input) = shape.workflow(size, args.keep_last);
    client.register(&definition).await?;
    let name = definition["name"].as_str().expect("named").to_owned();
    let pid = if dev {
        std::process::id()
    } else {
        suite
            .proc(suite.first(Service::Decider))
            .pid()
            .context("the decider has exited")?
    };
    let cpu_before = cpu_ticks(pid);
    let mut peak_rss_kib = rss_kib(pid).unwrap_or(0);
    let started = Instant::now();
    let id = client.start(&name, input).await?;
    // Generous: a hundred times the slowest step measured so far, and a minute.
    let deadline = started + Duration::from_secs(60) + Duration::from_millis(100 * size as u64);
    let status = loop {
        tokio::time::sleep(POLL).await;
        peak_rss_kib = peak_rss_kib.max(rss_kib(pid).unwrap_or(0));
        let got = client
            .raw(
                reqwest::Method::GET,
                &format!("/api/workflow/{id}?includeTasks=false"),
                None,
            )
            .await?;
        let status = got
            .json
            .as_ref()
            .and_then(|w| w["status"].as_str())
            .unwrap_or("")
            .to_owned();
        if !matches!(status.as_str(), "RUNNING" | "PAUSED" | "") {
            break status;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "run {id} still {status} after {:?}",
            started.elapsed()
        );
    };
    let wall = started.elapsed();
    let decider_cpu = (!dev).then(|| {
        cpu_ticks(pid)
            .unwrap_or(0)
            .saturating_sub(cpu_before.unwrap_or(0)) as f64
            / TICKS_PER_SECOND
    });
    let wf = client.get(&id).await?;
    anyhow::ensure!(
        status == "COMPLETED",
        "run {id} ended {status}: {}",
        wf["reasonForIncompletion"]
    );
    let get_without_tasks = median_of(20, || async {
        client
            .raw(
                reqwest::Method::GET,
                &format!("/api/workflow/{id}?includeTasks=false"),
                None,
            )
            .await
    })
    .await?;
    let middle = size / 2;
    let tasks_page = median_of(20, || async {
        client
            .raw(
                reqwest::Method::GET,
                &format!("/api/workflow/{id}/tasks?start={middle}&count=100"),
                None,
            )
            .await
    })
    .await?;
    Ok(Row {
        shape,
        size,
        wall,
        decider_cpu,
        peak_rss_mib: peak_rss_kib as f64 / 1024.0,
        get_without_tasks,
        tasks_page,
    })
}

/// The median time of `n` requests made by `request`, each checked for a 200.
async fn median_of<F, Fut>(n: usize, request: F) -> anyhow::Result<Duration>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<weft_e2e::client::RawResponse>>,
{
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let at = Instant::now();
        let response = request().await?;
        times.push(at.elapsed());
        anyhow::ensure!(
            response.status == 200,
            "{}: {}",
            response.status,
            response.text
        );
    }
    times.sort_unstable();
    Ok(times[n / 2])
}

/// `utime + stime` of `pid` in ticks, from `/proc/<pid>/stat`.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may hold spaces and parentheses: the fields start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `fields[0]` is field 3.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// `VmRSS` of `pid` in KiB, from `/proc/<pid>/status`.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

fn render_row(row: &Row) -> String {
    let per_step = row.wall.as_secs_f64() * 1_000.0 / row.size as f64;
    let cpu = row.decider_cpu.map_or("–".to_owned(), |s| {
        format!("{:.2}", s * 1_000.0 / row.size as f64)
    });
    format!(
        "| {} | {} | {:.1} s | {per_step:.2} | {cpu} | {:.0} MiB | {:.1} ms | {:.1} ms |",
        row.shape.name(),
        row.size,
        row.wall.as_secs_f64(),
        row.peak_rss_mib,
        row.get_without_tasks.as_secs_f64() * 1_000.0,
        row.tasks_page.as_secs_f64() * 1_000.0,
    )
}

fn report(args: &Args, rows: &[Row]) -> String {
    let machine = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut out = format!(
        "{} — one run per row, each in a fresh database; {machine}, {cores} cores\n\n\
         | shape | steps | wall | ms per step | decider CPU ms per step | {} RSS, peak | GET without tasks | a page of 100 tasks |\n\
         |---|---|---|---|---|---|---|---|\n",
        if args.dev { "weft dev" } else { "the real services" },
        if args.dev { "process" } else { "decider" },
    );
    for row in rows {
        out.push_str(&render_row(row));
        out.push('\n');
    }
    let sizes: Vec<String> = args.sizes.iter().map(ToString::to_string).collect();
    let shapes: Vec<&str> = args.shapes.iter().map(|s| s.name()).collect();
    out.push_str(&format!(
        "\n(step: {}; `scripts/bench-size --sizes {} --shapes {}{}{}`)\n",
        args.shapes
            .iter()
            .map(|s| format!("{} = one {}", s.name(), s.step()))
            .collect::<Vec<_>>()
            .join(", "),
        sizes.join(","),
        shapes.join(","),
        args.keep_last
            .map_or(String::new(), |n| format!(" --keep-last {n}")),
        if args.dev { " --dev" } else { "" },
    ));
    out
}
