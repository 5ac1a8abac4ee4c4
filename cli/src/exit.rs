//! The process exit codes, documented in `--help` and the README.

/// Done; with `--wait`, the run COMPLETED.
pub const OK: u8 = 0;
/// With `--wait`: the run ended FAILED, TIMED_OUT or TERMINATED.
pub const RUN_UNSUCCESSFUL: u8 = 1;
/// A usage error: unknown command or flag, bad JSON, an unreadable file (clap's code).
pub const USAGE: u8 = 2;
/// The gateway refused the request (4xx): not found, an invalid field, a state that
/// does not allow the operation.
pub const REFUSED: u8 = 3;
/// The gateway cannot be reached, failed (5xx), or answered outside the API.
pub const UNAVAILABLE: u8 = 4;
