//! The event model every trace format is read into.

use serde::{Deserialize, Serialize};

/// What happened in one event of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A block of `size` requested bytes was handed out at `addr`.
    Alloc,
    /// The program released the block at `addr`; it is not reusable yet (work on other streams may still use
    /// it). PyTorch's `free_requested`.
    FreeRequested,
    /// The block at `addr` is reusable: PyTorch's `free_completed`, RMM's `free`, vrampool's `free`.
    Free,
    /// The allocator took `size` bytes at `addr` from the device (PyTorch's `segment_alloc`).
    SegmentAlloc,
    /// The allocator gave the segment at `addr` back to the device (PyTorch's `segment_free`).
    SegmentFree,
    /// `size` bytes of physical memory were mapped at `addr` into an expandable segment (`segment_map`).
    SegmentMap,
    /// `size` bytes were unmapped at `addr` from an expandable segment (`segment_unmap`).
    SegmentUnmap,
    /// The allocator reported out of memory for a request of `size` bytes (PyTorch's `oom`; PyTorch puts the
    /// device's free bytes in `addr`).
    Oom,
    /// An allocation of `size` bytes failed (RMM's `allocate failure`).
    AllocFailure,
}

impl EventKind {
    /// Every kind, in declaration order.
    pub const ALL: [EventKind; 9] = [
        EventKind::Alloc,
        EventKind::FreeRequested,
        EventKind::Free,
        EventKind::SegmentAlloc,
        EventKind::SegmentFree,
        EventKind::SegmentMap,
        EventKind::SegmentUnmap,
        EventKind::Oom,
        EventKind::AllocFailure,
    ];

    /// The kind's name as the vrampool CSV writes it in its `action` column (`alloc`, `free`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            EventKind::Alloc => "alloc",
            EventKind::FreeRequested => "free_requested",
            EventKind::Free => "free",
            EventKind::SegmentAlloc => "segment_alloc",
            EventKind::SegmentFree => "segment_free",
            EventKind::SegmentMap => "segment_map",
            EventKind::SegmentUnmap => "segment_unmap",
            EventKind::Oom => "oom",
            EventKind::AllocFailure => "alloc_failure",
        }
    }

    /// The kind whose [`name`](Self::name) is `name`.
    pub fn from_name(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One event of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Event {
    /// When it happened, in microseconds: since the Unix epoch for PyTorch snapshots, since midnight for RMM
    /// logs, as written for vrampool logs. Only differences between events are meaningful.
    pub time_us: i64,
    /// What happened.
    pub kind: EventKind,
    /// The block's or segment's address.
    pub addr: u64,
    /// Bytes: requested bytes for allocations and frees, segment bytes for segment events.
    pub size: u64,
    /// The stream the event is ordered on, as a label (the `cudaStream_t` value; 0 is the default stream).
    pub stream: u64,
}

impl Event {
    /// An event with every field given.
    pub const fn new(time_us: i64, kind: EventKind, addr: u64, size: u64, stream: u64) -> Self {
        Event { time_us, kind, addr, size, stream }
    }
}

/// A block that is live when the trace starts: freed in the trace but allocated before its first event
/// (a ring buffer that dropped its oldest events).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LiveBlock {
    /// The block's address.
    pub addr: u64,
    /// Its requested bytes (as the free event says).
    pub size: u64,
    /// The stream of its free event.
    pub stream: u64,
}
