//! The segments a dynamic pool holds when it does not use virtual memory.

use std::collections::BTreeMap;

/// Segments by address, with their sizes.
#[derive(Debug, Default)]
pub(crate) struct SegmentSpace {
    segments: BTreeMap<u64, u64>,
    total: u64,
}

impl SegmentSpace {
    /// Records a segment.
    pub(crate) fn add(&mut self, addr: u64, size: u64) {
        self.segments.insert(addr, size);
        self.total += size;
    }

    /// Forgets the segment at `addr`.
    pub(crate) fn remove(&mut self, addr: u64) {
        if let Some(size) = self.segments.remove(&addr) {
            self.total -= size;
        }
    }

    /// The size of the segment at `addr`.
    pub(crate) fn size_of(&self, addr: u64) -> Option<u64> {
        self.segments.get(&addr).copied()
    }

    /// Bytes held.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// Whether `addr` lies in a segment.
    pub(crate) fn contains(&self, addr: u64) -> bool {
        self.segments.range(..=addr).next_back().is_some_and(|(&start, &size)| addr < start + size)
    }

    /// Every segment, as `(addr, size)`.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.segments.iter().map(|(&a, &s)| (a, s))
    }
}
