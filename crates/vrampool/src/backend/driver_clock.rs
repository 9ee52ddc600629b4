//! The clock a pool weighs the time of its optional device work against.

/// How a backend's memory calls are timed ([`crate::Backend::driver_clock`]): what a pool with a budget of
/// driver time ([`crate::PagePolicy::driver_per_mille`]) measures its optional device work and the time since
/// it opened by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverClock {
    /// No clock: a pool does its optional device work wherever it saves memory, however long it takes.
    Untimed,
    /// A real device: the pool reads the time since it opened on the host's monotonic clock, and charges its
    /// optional device calls at the default cost model's prices ([`crate::CostModel::default`]), as a
    /// simulated device charges them, rather than at what the host's clock says each took.
    Wall,
    /// A simulated device a replay drives: the replay's time and the cost model's driver time so far, in
    /// nanoseconds, so that a replay decides the same way on any host.
    Simulated {
        /// The trace's time now.
        now_ns: u64,
        /// The modelled time of every driver call so far.
        driver_ns: u64,
    },
}
