//! Segments from `cuMemAlloc`, with the books every free is checked against.

use std::collections::BTreeMap;

use parking_lot::Mutex;

use crate::context::DeviceContext;

/// The page `cuMemAlloc` hands out large allocations in on current NVIDIA GPUs (2 MiB on the H200): a
/// segment takes its size rounded up to a whole number of them, so pools ask for whole pages
/// ([`vrampool::Backend::segment_unit`]).
pub(crate) const MEM_ALLOC_PAGE: u64 = 2 << 20;

/// The `cuMemAlloc` segments a backend holds, by address.
#[derive(Debug, Default)]
pub(crate) struct SegmentTable {
    segments: Mutex<BTreeMap<u64, u64>>,
}

impl SegmentTable {
    /// Allocates a segment of `size` bytes (`cuMemAlloc`); `held_elsewhere` is what the backend holds
    /// besides segments, for the out-of-memory error.
    pub(crate) fn allocate(&self, context: &DeviceContext, size: u64, held_elsewhere: u64) -> vrampool::Result<u64> {
        if size == 0 {
            return Err(vrampool::Error::InvalidBackendCall {
                call: "allocate_segment",
                reason: "a segment of 0 bytes".into(),
            });
        }
        context.bind()?;
        match context.driver().mem_alloc(size) {
            Ok(addr) => {
                self.segments.lock().insert(addr, size);
                Ok(addr)
            }
            Err(err) => Err(context.memory_error(err, size, self.bytes() + held_elsewhere)),
        }
    }

    /// Frees a segment (`cuMemFree`), after checking that it is one, with this size.
    pub(crate) fn free(&self, context: &DeviceContext, addr: u64, size: u64) -> vrampool::Result<()> {
        const CALL: &str = "free_segment";
        let mut segments = self.segments.lock();
        match segments.get(&addr) {
            Some(&held) if held == size => {}
            Some(&held) => {
                return Err(vrampool::Error::InvalidBackendCall {
                    call: CALL,
                    reason: format!("segment {addr:#x} has {held} bytes, not {size}"),
                });
            }
            None => {
                return Err(vrampool::Error::InvalidBackendCall {
                    call: CALL,
                    reason: format!("{addr:#x} is not a segment of {}", context.name()),
                });
            }
        }
        context.bind()?;
        // SAFETY: `addr` is a segment this table holds from `cuMemAlloc` on this driver, removed from the
        // table under the same lock, so it is freed once; `cuMemFree` waits for the work queued on it.
        unsafe { context.driver().mem_free(addr) }?;
        segments.remove(&addr);
        Ok(())
    }

    /// Whether `[addr, addr + len)` lies inside one segment.
    pub(crate) fn holds(&self, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else { return false };
        let segments = self.segments.lock();
        segments.range(..=addr).next_back().is_some_and(|(&base, &size)| end <= base + size)
    }

    /// Bytes held in segments.
    pub(crate) fn bytes(&self) -> u64 {
        self.segments.lock().values().sum()
    }

    /// Segments held.
    pub(crate) fn count(&self) -> usize {
        self.segments.lock().len()
    }

    /// Frees every segment still held (when the backend drops); returns how many the driver refused.
    pub(crate) fn release_all(&self, context: &DeviceContext) -> usize {
        let segments = std::mem::take(&mut *self.segments.lock());
        let mut failures = 0;
        for addr in segments.into_keys() {
            // SAFETY: each segment came from `cuMemAlloc` on this driver and leaves the table here, so it
            // is freed once; the backend is dropping, so no pool hands it out any more.
            if unsafe { context.driver().mem_free(addr) }.is_err() {
                failures += 1;
            }
        }
        failures
    }
}
