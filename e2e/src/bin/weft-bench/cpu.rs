//! CPU time per run, by process: a measure far steadier than throughput on a shared
//! machine. Throughput moves with whatever else the machine does; the CPU seconds a
//! process spends on N runs move much less, so an A/B of a hot-path change reads here
//! first (BENCHMARKS.md).
//!
//! Read from `/proc` (Linux): each suite process's own time, the broker's (`beam.smp`),
//! PostgreSQL's (the postmaster's reaped children plus its live backends) and the
//! machine's non-idle total, before and after the throughput phase.

use std::collections::BTreeMap;
use std::fs;

use weft_e2e::process::Service;
use weft_e2e::suite::Suite;

/// Clock ticks per second of `/proc`'s times (`USER_HZ`, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// CPU ticks spent so far, by process kind, and the machine's total.
#[derive(Debug, Clone, Default)]
pub struct CpuSample {
    by_kind: BTreeMap<String, u64>,
    machine: u64,
}

/// `utime + stime` (and with `children`, `cutime + cstime`) of `pid`, from
/// `/proc/<pid>/stat`; `None` once it has gone.
fn ticks(pid: u32, children: bool) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may hold spaces and parentheses: the fields start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // Fields 14–17 of stat(5) are utime, stime, cutime, cstime; `fields[0]` is field 3.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    let own = field(14)? + field(15)?;
    Some(if children {
        own + field(16)? + field(17)?
    } else {
        own
    })
}

/// `(pid, parent pid, command name)` of every process.
fn processes() -> Vec<(u32, u32, String)> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (head, tail) = stat.rsplit_once(')')?;
        let name = head.split_once('(')?.1.to_owned();
        let ppid = tail.split_whitespace().nth(1)?.parse().ok()?;
        Some((pid, ppid, name))
    })
    .collect()
}

/// The machine's non-idle ticks (all CPUs): user, nice, system, irq, softirq, steal.
fn machine_ticks() -> u64 {
    let Ok(stat) = fs::read_to_string("/proc/stat") else {
        return 0;
    };
    let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal
    [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| v.get(i)).sum()
}

impl CpuSample {
    /// Reads the suite's processes, the broker, PostgreSQL and the machine now.
    pub fn take(suite: &Suite) -> Self {
        let mut by_kind = BTreeMap::new();
        for service in Service::ALL.into_iter().chain([Service::Dev]) {
            for id in suite.procs(service) {
                if let Some(t) = suite.proc(id).pid().and_then(|pid| ticks(pid, false)) {
                    *by_kind.entry(service.name().to_owned()).or_default() += t;
                }
            }
        }
        let all = processes();
        let broker: u64 = all
            .iter()
            .filter(|(_, _, name)| name == "beam.smp")
            .filter_map(|(pid, _, _)| ticks(*pid, false))
            .sum();
        by_kind.insert("RabbitMQ".to_owned(), broker);
        // The postmaster holds the time of the backends it reaped; the live ones hold
        // their own.
        let postgres: Vec<&(u32, u32, String)> = all
            .iter()
            .filter(|(_, _, name)| name == "postgres")
            .collect();
        let is_postgres = |pid: u32| postgres.iter().any(|(p, _, _)| *p == pid);
        let pg: u64 = postgres
            .iter()
            .filter_map(|(pid, ppid, _)| ticks(*pid, !is_postgres(*ppid)))
            .sum();
        by_kind.insert("PostgreSQL".to_owned(), pg);
        Self {
            by_kind,
            machine: machine_ticks(),
        }
    }

    /// The table rows of what was spent between `self` and `later` over `runs` runs:
    /// milliseconds of CPU per run, by process kind, then the rest and the machine.
    pub fn rows_until(&self, later: &CpuSample, runs: usize) -> String {
        let per_run = |ticks: u64| ticks as f64 / TICKS_PER_SECOND * 1000.0 / runs.max(1) as f64;
        let mut rows = String::new();
        let mut named = 0;
        let mut spent: Vec<(&String, u64)> = later
            .by_kind
            .iter()
            .map(|(kind, after)| {
                let before = self.by_kind.get(kind).copied().unwrap_or_default();
                (kind, after.saturating_sub(before))
            })
            .collect();
        spent.sort_by_key(|&(_, ticks)| std::cmp::Reverse(ticks));
        for (kind, ticks) in spent {
            named += ticks;
            rows.push_str(&format!(
                "| &nbsp;&nbsp;CPU per run, {kind} | {:.3}ms |\n",
                per_run(ticks)
            ));
        }
        let machine = later.machine.saturating_sub(self.machine);
        rows.push_str(&format!(
            "| &nbsp;&nbsp;CPU per run, everything else (the benchmark client, the kernel) | {:.3}ms |\n",
            per_run(machine.saturating_sub(named))
        ));
        format!(
            "| CPU per run, throughput phase (all cores; the machine's non-idle time over the runs) | {:.3}ms |\n{rows}",
            per_run(machine)
        )
    }
}
