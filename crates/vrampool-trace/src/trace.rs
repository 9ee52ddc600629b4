//! A trace: the events of one device, in order, as a replay engine consumes them.

use serde::{Deserialize, Serialize};

use crate::event::{Event, LiveBlock};
use crate::format::TraceFormat;

/// The events of one device of one trace file, in the order they happened.
///
/// Every read trace is consistent: each `Free` or `FreeRequested` matches a block that is live (allocated
/// earlier in `events`, or listed in `initial_live`), no block is freed twice and no address is allocated
/// while a block there is live. Zero-byte allocations and frees are kept but not tracked (allocators may
/// hand out one address for all of them), and replays and baselines leave them out. Events with actions outside [`crate::EventKind`] are left out: PyTorch's
/// `snapshot`, `annotate` and `user_defined` are counted in `ignored`, actions the reader does not know in
/// `unknown_actions`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    /// The file name without its directory (or the name given when reading bytes).
    pub name: String,
    /// The format the trace was read from; `None` for a trace built in memory.
    pub format: Option<TraceFormat>,
    /// The device index: the position in a snapshot's `device_traces`; 0 for CSV logs.
    pub device: usize,
    /// The events, in order.
    pub events: Vec<Event>,
    /// Blocks live from the start: freed in the trace but never allocated in it (PyTorch's ring buffer
    /// dropped the allocation). A replay allocates them before the first event.
    pub initial_live: Vec<LiveBlock>,
    /// Bad events skipped by a lenient read.
    pub skipped: usize,
    /// Why the first skipped events were skipped (at most [`Trace::MAX_SKIP_REASONS`] messages).
    pub skipped_reasons: Vec<String>,
    /// Entries whose action is outside the event model, left out on purpose.
    pub ignored: usize,
    /// Entries whose action the reader does not know (none of PyTorch's), left out.
    pub unknown_actions: usize,
}

impl Trace {
    /// The most skip reasons a trace keeps.
    pub const MAX_SKIP_REASONS: usize = 16;

    /// Bytes of the blocks live from the start.
    pub fn initial_live_bytes(&self) -> u64 {
        self.initial_live.iter().map(|block| block.size).sum()
    }
}
