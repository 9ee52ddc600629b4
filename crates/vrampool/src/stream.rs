//! Stream labels: the order in which a device runs work that uses memory.

use serde::{Deserialize, Serialize};

/// A stream of device work, as a label.
///
/// For the CUDA backends this is the `CUstream` handle's value (0 is the legacy default stream); for the
/// simulated device and host memory it is any number the caller chooses. A block freed on a stream can be
/// reused at once by a request on the same stream; reuse on another stream is ordered after an event
/// recorded on the freeing stream (see [`crate::Backend::record_event`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StreamId(pub u64);

impl StreamId {
    /// The default stream (CUDA's legacy stream 0).
    pub const DEFAULT: StreamId = StreamId(0);
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stream {:#x}", self.0)
    }
}
