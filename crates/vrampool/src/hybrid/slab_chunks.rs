//! Which chunks under a slab hold live blocks, so that idle chunks can be lent to the dynamic region and
//! taken back, with no lock on the allocation path.
//!
//! Each chunk has a counter of the live blocks it holds and a "given up" bit. Allocation adds one to the
//! counters of its block's chunks; if any had been given up, it backs them again through the dynamic pool
//! (the rare slow path) and clears the bit. Free subtracts one. The dynamic pool, under its own lock,
//! claims a chunk only by turning a counter of exactly zero into "given up", so a chunk with a live block
//! is never taken, and an allocation racing a claim sees the bit and backs its chunk again.

use std::sync::atomic::{AtomicU32, Ordering};

use crossbeam_utils::CachePadded;

/// The "given up" bit of a chunk counter.
const GIVEN_UP: u32 = 1 << 31;

/// Counters for the chunks under one slab.
#[derive(Debug)]
pub(crate) struct SlabChunks {
    base: u64,
    granularity: u64,
    counters: Box<[CachePadded<AtomicU32>]>,
}

impl SlabChunks {
    /// Counters for a slab of `len` bytes at `base` (a multiple of `granularity`), every chunk backed or
    /// none (then each is backed when a block in it is first used).
    pub(crate) fn new(base: u64, len: u64, granularity: u64, backed: bool) -> Self {
        let chunks = len.div_ceil(granularity) as usize;
        let initial = if backed { 0 } else { GIVEN_UP };
        SlabChunks {
            base,
            granularity,
            counters: (0..chunks).map(|_| CachePadded::new(AtomicU32::new(initial))).collect(),
        }
    }

    fn chunks(&self, addr: u64, size: u64) -> std::ops::RangeInclusive<usize> {
        let first = (addr - self.base) / self.granularity;
        let last = (addr - self.base + size - 1) / self.granularity;
        first as usize..=last as usize
    }

    /// Counts a live block on `[addr, addr + size)`; returns whether any of its chunks was given up and must
    /// be backed again (then call [`SlabChunks::backed`]).
    #[inline]
    pub(crate) fn acquire(&self, addr: u64, size: u64) -> bool {
        let mut given_up = false;
        for chunk in self.chunks(addr, size) {
            given_up |= self.counters[chunk].fetch_add(1, Ordering::AcqRel) & GIVEN_UP != 0;
        }
        given_up
    }

    /// Marks the chunks of `[addr, addr + size)` backed again.
    pub(crate) fn backed(&self, addr: u64, size: u64) {
        for chunk in self.chunks(addr, size) {
            self.counters[chunk].fetch_and(!GIVEN_UP, Ordering::AcqRel);
        }
    }

    /// Forgets a live block on `[addr, addr + size)`.
    #[inline]
    pub(crate) fn release(&self, addr: u64, size: u64) {
        for chunk in self.chunks(addr, size) {
            self.counters[chunk].fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Claims up to `limit` chunks that hold no live block and are backed; returns their addresses.
    pub(crate) fn claim_idle(&self, limit: usize, out: &mut Vec<u64>) {
        for (index, counter) in self.counters.iter().enumerate() {
            if out.len() >= limit {
                return;
            }
            if counter.compare_exchange(0, GIVEN_UP, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                out.push(self.base + index as u64 * self.granularity);
            }
        }
    }

    /// Whether `chunk` (an address) lies under this slab.
    pub(crate) fn holds(&self, chunk: u64) -> bool {
        chunk >= self.base && chunk < self.base + self.counters.len() as u64 * self.granularity
    }

    /// Hands back a claimed chunk unchanged.
    pub(crate) fn unclaim(&self, chunk: u64) {
        let index = ((chunk - self.base) / self.granularity) as usize;
        self.counters[index].fetch_and(!GIVEN_UP, Ordering::AcqRel);
    }

    /// Bytes of chunks not given up.
    pub(crate) fn backed_bytes(&self) -> u64 {
        let backed = self.counters.iter().filter(|c| c.load(Ordering::Relaxed) & GIVEN_UP == 0).count();
        backed as u64 * self.granularity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_idle_chunks_are_claimed_and_claimed_chunks_are_backed_again() {
        let g = 1 << 20;
        let chunks = SlabChunks::new(1 << 30, 4 * g, g, true);
        assert_eq!(SlabChunks::new(1 << 30, 4 * g, g, false).backed_bytes(), 0);
        // A block over chunks 1 and 2.
        assert!(!chunks.acquire((1 << 30) + g + 100, g));
        let mut claimed = Vec::new();
        chunks.claim_idle(10, &mut claimed);
        assert_eq!(claimed, vec![1 << 30, (1 << 30) + 3 * g]);
        assert_eq!(chunks.backed_bytes(), 2 * g);
        // A block on a claimed chunk must back it again.
        assert!(chunks.acquire(1 << 30, 256));
        chunks.backed(1 << 30, 256);
        assert_eq!(chunks.backed_bytes(), 3 * g);
        chunks.unclaim((1 << 30) + 3 * g);
        assert_eq!(chunks.backed_bytes(), 4 * g);
        chunks.release((1 << 30) + g + 100, g);
        chunks.release(1 << 30, 256);
        let mut again = Vec::new();
        chunks.claim_idle(2, &mut again);
        assert_eq!(again.len(), 2);
        assert!(chunks.holds(1 << 30) && !chunks.holds((1 << 30) + 4 * g));
    }
}
