//! The one error type of the command.

/// Result of a command.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What ends a command with exit status 1.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A trace could not be read.
    #[error(transparent)]
    Trace(#[from] vrampool_trace::Error),
    /// A replay failed.
    #[error(transparent)]
    Replay(#[from] vrampool_replay::Error),
    /// A pool or a config string was refused.
    #[error(transparent)]
    Pool(#[from] vrampool::Error),
    /// Arguments that contradict each other or name nothing.
    #[error("{0}")]
    Usage(String),
    /// The command's output (standard output) could not be written.
    #[error("writing the output: {0}")]
    Output(#[source] std::io::Error),
    /// A file could not be written.
    #[error("{path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The GPU could not be reached.
    #[error("{0}")]
    Device(String),
}
