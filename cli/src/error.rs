//! What can make a command fail, and the exit code each failure maps to.

use crate::{client, exit};

/// A command's failure. Displayed after `weft: ` as one sentence.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The gateway did not give the answer asked for (see [`client::Error`]).
    #[error(transparent)]
    Client(#[from] client::Error),
    /// The same, about one item of several (e.g. one definition of a file).
    #[error("{context}: {source}")]
    About {
        /// Which item, e.g. `greet version 2 (item 2 of 3)`.
        context: String,
        /// What went wrong with it.
        source: client::Error,
    },
    /// A file named on the command line cannot be read or does not hold what it should.
    /// Retrying does not help until the file is fixed.
    #[error("{0}")]
    Input(String),
    /// `weft dev` could not start, or a service of it failed.
    #[error("{0}")]
    Dev(#[from] crate::dev::DevError),
    /// Writing to standard output failed (e.g. the reader of a pipe went away).
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

impl Error {
    /// The process exit code (see [`crate::exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Client(e) | Error::About { source: e, .. } => e.exit_code(),
            Error::Input(_) => exit::USAGE,
            Error::Output(_) | Error::Dev(_) => exit::UNAVAILABLE,
        }
    }

    /// Whether the failure is only that the reader of standard output went away
    /// (`weft history ID | head`): not worth a message.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Error::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
