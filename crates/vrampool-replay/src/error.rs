//! The one error type of trace replay.

/// Result of a replay operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong while replaying, comparing or advising.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A trace could not be read.
    #[error(transparent)]
    Trace(#[from] vrampool_trace::Error),
    /// A pool could not be made or refused an operation in a way a replay cannot go on from.
    #[error("{trace}: {strategy} pool ({config}): {source}")]
    Pool {
        /// The trace's name.
        trace: String,
        /// The strategy.
        strategy: &'static str,
        /// The config string.
        config: String,
        /// What the pool said.
        source: Box<vrampool::Error>,
    },
    /// The pool's event log could not be written.
    #[error("writing the event log: {0}")]
    EventLog(vrampool_trace::Error),
    /// A trace with more allocations than a replay numbers.
    #[error("{trace}: more than {} allocations, the most a replay numbers (in 32 bits)", u32::MAX)]
    TooManyAllocations {
        /// The trace's name.
        trace: String,
    },
    /// A trace to advise on allocates nothing: every strategy would reserve only its initial memory.
    #[error("{trace}: no allocation in the trace (events: {events}): nothing to compare or advise on")]
    NoAllocations {
        /// The trace's name.
        trace: String,
        /// Events in the trace.
        events: u64,
    },
}
