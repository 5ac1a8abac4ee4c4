//! `weft`: the command line (see the crate docs of `weft_cli` and `weft --help`).

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser as _;
use weft_cli::args::Command;
use weft_cli::{exit, Cli};

/// mimalloc, not glibc's allocator: `weft dev` runs every service on a few threads that
/// allocate and free each other's memory all the time, and glibc's arenas spent about a
/// quarter of its CPU in `malloc`/`free` and their locks (BENCHMARKS.md: +32 % W1).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Usage errors, --help and --version end here (exit 2, 0, 0).
    let cli = Cli::parse();
    // `weft dev` runs every service: it gets every core.
    let runtime = match cli.command {
        Command::Dev(_) => tokio::runtime::Builder::new_multi_thread(),
        _ => tokio::runtime::Builder::new_current_thread(),
    }
    .enable_all()
    .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("weft: cannot start the async runtime: {e}");
            return ExitCode::from(exit::UNAVAILABLE);
        }
    };
    let mut stdout = std::io::stdout().lock();
    let result = runtime.block_on(weft_cli::run(cli, &mut stdout));
    let _ = stdout.flush();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) if e.is_broken_pipe() => ExitCode::from(exit::OK),
        Err(e) => {
            eprintln!("weft: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
