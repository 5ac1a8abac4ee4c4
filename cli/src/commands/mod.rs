//! One module per command group. Each command writes what it shows to `out` and
//! returns the exit code, or an [`crate::Error`] that `main` prints as a sentence.

pub mod audit;
pub mod defs;
pub mod dev;
pub mod events;
pub mod inspect;
pub mod ops;
pub mod start;
pub mod tokens;
