//! Device memory through CUDA's virtual memory management: address ranges reserved once, physical memory
//! created, mapped, unmapped and moved in granularity-sized chunks.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use vrampool::{Backend, DeviceAddr, DriverClock};

use crate::context::{DeviceContext, forward_to_context};
use crate::driver::{CudaDriver, Driver};
use crate::error::CudaError;
use crate::library::CudaLibrary;
use crate::segment_table::{MEM_ALLOC_PAGE, SegmentTable};
use crate::transfer::impl_cuda_memory;

/// The books of a virtual-memory backend.
#[derive(Debug, Default)]
struct VirtualState {
    /// Reserved ranges: base address → bytes.
    ranges: BTreeMap<u64, u64>,
    /// Mapped chunks: chunk address → the physical handle mapped there. A handle of one chunk is mapped
    /// at one chunk; a larger one ([`Backend::map_pages`]) at as many chunks that follow on, each of them
    /// here, unmapped and moved whole.
    chunks: BTreeMap<u64, u64>,
    /// The bytes of each handle larger than the granularity; a handle not here has one chunk's.
    pages: HashMap<u64, u64>,
    /// The addresses at which a page of more than one chunk is mapped (its first chunk), so that a span
    /// that cuts a page is told from one that starts where a second mapping of the same handle follows on.
    page_starts: HashSet<u64>,
    /// Handles mapped at more than one address ([`Backend::alias`]): the addresses beyond the first. A
    /// handle is released when its last address is unmapped.
    aliases: HashMap<u64, u32>,
    /// Handles mapped nowhere whose release the driver refused; released again when the backend drops.
    orphans: Vec<u64>,
}

/// A CUDA device used through virtual memory management, so that a pool's region grows in place.
///
/// - [`Backend::reserve_range`] is `cuMemAddressReserve`, [`Backend::release_range`] `cuMemAddressFree`;
/// - [`Backend::map`] is, per granularity chunk, `cuMemCreate` (pinned memory on this device) and
///   `cuMemMap`, then one `cuMemSetAccess` (read and write for this device) for the whole batch;
///   [`Backend::map_pages`] the same per page, each page one handle of its size;
/// - [`Backend::unmap`] is `cuMemUnmap` and `cuMemRelease` per page (per chunk, for pages of one chunk);
/// - [`Backend::remap`] moves each page's physical memory: `cuMemUnmap` at the old address, `cuMemMap` of
///   the same handle at the new one, then one `cuMemSetAccess` for the batch. The memory moves with its
///   contents;
/// - [`Backend::alias`] maps each page's handle at a second address (`cuMemMap`), then one
///   `cuMemSetAccess` for the batch; a handle is released (`cuMemRelease`) when its last address is
///   unmapped.
///
/// The granularity is the device's minimum (`cuMemGetAllocationGranularity`; 2 MiB on an H200). Plain
/// `cuMemAlloc` segments are offered too, for pools' fallbacks. A call that fails leaves the mappings as
/// they were where the driver lets it. It retains the device's primary context and makes it current on
/// the calling thread before each driver call. Dropping it waits for the device and releases every chunk,
/// range and segment still held.
#[derive(Debug)]
pub struct CudaVirtual {
    context: DeviceContext,
    granularity: u64,
    state: Mutex<VirtualState>,
    segments: SegmentTable,
}

impl CudaVirtual {
    /// The backend for device `ordinal`; an error (never a panic) where the driver library is missing,
    /// the device does not exist or lacks virtual memory management.
    pub fn new(ordinal: usize) -> Result<Self, CudaError> {
        Self::with_page_size(ordinal, None)
    }

    /// The backend for device `ordinal` with physical pages of `page` bytes (a multiple of the device's
    /// granularity; the granularity itself when `None`). Each page is one physical allocation, so larger
    /// pages mean fewer driver calls for the same memory, and coarser moving and trimming.
    pub fn with_page_size(ordinal: usize, page: Option<u64>) -> Result<Self, CudaError> {
        let library = CudaLibrary::load()?;
        let driver = CudaDriver::open(&library, ordinal)?;
        Self::with_driver_and_page(Arc::new(driver), page)
    }

    /// The backend over any driver (the real one, or a simulated one in tests).
    pub(crate) fn with_driver(driver: Arc<dyn Driver>) -> Result<Self, CudaError> {
        Self::with_driver_and_page(driver, None)
    }

    /// The backend over any driver with pages of `page` bytes.
    pub(crate) fn with_driver_and_page(driver: Arc<dyn Driver>, page: Option<u64>) -> Result<Self, CudaError> {
        let ordinal = driver.ordinal();
        let context = DeviceContext::new(driver, format!("cuda-virtual:{ordinal}"))?;
        if !context.driver().virtual_memory_supported()? {
            return Err(CudaError::VirtualMemoryUnsupported { ordinal });
        }
        let granularity = context.driver().granularity()?;
        if granularity == 0 || !granularity.is_power_of_two() {
            return Err(CudaError::Call {
                call: "cuMemGetAllocationGranularity",
                code: crate::error::CUDA_ERROR_INVALID_VALUE,
                name: format!("CUDA_ERROR_INVALID_VALUE (granularity {granularity} is not a power of two)"),
            });
        }
        let granularity = match page {
            None => granularity,
            Some(page) if page > 0 && page % granularity == 0 => page,
            Some(page) => return Err(CudaError::PageSize { page, granularity }),
        };
        Ok(CudaVirtual {
            context,
            granularity,
            state: Mutex::new(VirtualState::default()),
            segments: SegmentTable::default(),
        })
    }

    /// Chunks of physical memory mapped now (one mapped at two addresses counts once).
    pub fn mapped_chunks(&self) -> usize {
        physical_chunks(&self.state.lock(), self.granularity)
    }

    /// Bytes of physical memory mapped now.
    pub fn mapped_bytes(&self) -> u64 {
        self.mapped_chunks() as u64 * self.granularity
    }

    /// Address ranges reserved now.
    pub fn reserved_ranges(&self) -> usize {
        self.state.lock().ranges.len()
    }

    /// Segments (`cuMemAlloc`) held now.
    pub fn segment_count(&self) -> usize {
        self.segments.count()
    }

    /// The physical memory handle mapped at the chunk starting at `addr`, if one is.
    pub fn chunk_handle(&self, addr: u64) -> Option<u64> {
        self.state.lock().chunks.get(&addr).copied()
    }

    /// Whether `[addr, addr + len)` lies in mapped chunks or inside one segment.
    pub fn holds(&self, addr: u64, len: u64) -> bool {
        if self.segments.holds(addr, len) {
            return true;
        }
        let g = self.granularity;
        let Some(end) = addr.checked_add(len.max(1)) else { return false };
        let start = addr / g * g;
        let chunks = (end - start).div_ceil(g) as usize;
        self.state.lock().chunks.range(start..end).count() == chunks
    }

    /// Bytes this backend holds from the device (mapped chunks and segments).
    fn held_bytes(&self, state: &VirtualState) -> u64 {
        physical_chunks(state, self.granularity) as u64 * self.granularity + self.segments.bytes()
    }

    /// Checks that `[addr, addr + size)` is a non-empty span of whole chunks inside one reserved range.
    fn check_span(&self, state: &VirtualState, call: &'static str, addr: u64, size: u64) -> vrampool::Result<()> {
        let g = self.granularity;
        if size == 0 || size % g != 0 || addr % g != 0 {
            return Err(vrampool::Error::InvalidBackendCall {
                call,
                reason: format!("[{addr:#x}, +{size}) is not a non-empty multiple of the {g}-byte granularity"),
            });
        }
        let inside = state
            .ranges
            .range(..=addr)
            .next_back()
            .is_some_and(|(&base, &len)| addr.checked_add(size).is_some_and(|end| end <= base + len));
        if !inside {
            return Err(vrampool::Error::InvalidBackendCall {
                call,
                reason: format!("[{addr:#x}, +{size}) is not inside one range reserved on {}", self.context.name()),
            });
        }
        Ok(())
    }

    /// Checks that every chunk of `[addr, addr + size)` is mapped (`mapped`) or not.
    fn check_chunks(
        &self,
        state: &VirtualState,
        call: &'static str,
        addr: u64,
        size: u64,
        mapped: bool,
    ) -> vrampool::Result<()> {
        let wrong =
            (addr..addr + size).step_by(self.granularity as usize).find(|at| state.chunks.contains_key(at) != mapped);
        match wrong {
            None => Ok(()),
            Some(chunk) => Err(vrampool::Error::InvalidBackendCall {
                call,
                reason: format!("chunk {chunk:#x} is {}", if mapped { "not mapped" } else { "already mapped" }),
            }),
        }
    }

    /// The bytes of `handle`.
    fn handle_bytes(&self, state: &VirtualState, handle: u64) -> u64 {
        state.pages.get(&handle).copied().unwrap_or(self.granularity)
    }

    /// The pages mapped on `[addr, addr + size)`, every chunk of which is mapped: `(address, handle, bytes)`
    /// of each, in order; an error naming `call` where the span cuts a page.
    fn pages_in(
        &self,
        state: &VirtualState,
        call: &'static str,
        addr: u64,
        size: u64,
    ) -> vrampool::Result<Vec<(u64, u64, u64)>> {
        let g = self.granularity;
        let cut = |at: u64| vrampool::Error::InvalidBackendCall {
            call,
            reason: format!("[{addr:#x}, +{size}) cuts the page mapped at {at:#x}"),
        };
        let mut pages = Vec::new();
        let mut at = addr;
        while at < addr + size {
            let handle = state.chunks[&at];
            let bytes = self.handle_bytes(state, handle);
            if at + bytes > addr + size || (bytes > g && !state.page_starts.contains(&at)) {
                return Err(cut(at));
            }
            pages.push((at, handle, bytes));
            at += bytes;
        }
        Ok(pages)
    }

    /// Records `handle`, of `bytes`, as mapped at `at`.
    fn record_page(&self, state: &mut VirtualState, at: u64, handle: u64, bytes: u64) {
        if bytes > self.granularity {
            state.page_starts.insert(at);
        }
        for chunk in (at..at + bytes).step_by(self.granularity as usize) {
            state.chunks.insert(chunk, handle);
        }
    }

    /// Forgets what is mapped on `[at, at + bytes)`.
    fn forget_page(&self, state: &mut VirtualState, at: u64, bytes: u64) {
        state.page_starts.remove(&at);
        for chunk in (at..at + bytes).step_by(self.granularity as usize) {
            state.chunks.remove(&chunk);
        }
    }

    /// Forgets one address of `handle`, just unmapped: releases the handle where no other address maps it.
    fn drop_mapping(&self, state: &mut VirtualState, handle: u64) {
        match state.aliases.get_mut(&handle) {
            Some(extra) if *extra > 1 => *extra -= 1,
            Some(_) => {
                state.aliases.remove(&handle);
            }
            None => self.release_handle(state, handle),
        }
    }

    /// Checks a call that gives the mapped chunks of `[from, from + size)` to the unmapped `[to, to + size)`
    /// (both inside reserved ranges), and makes the context current for it.
    fn check_transfer(
        &self,
        state: &VirtualState,
        call: &'static str,
        from: u64,
        to: u64,
        size: u64,
    ) -> vrampool::Result<()> {
        self.check_span(state, call, from, size)?;
        self.check_span(state, call, to, size)?;
        self.check_chunks(state, call, from, size, true)?;
        self.check_chunks(state, call, to, size, false)?;
        Ok(self.context.bind()?)
    }

    /// Releases a handle mapped nowhere; one the driver refuses is kept for the drop.
    fn release_handle(&self, state: &mut VirtualState, handle: u64) {
        state.pages.remove(&handle);
        // SAFETY: the handle came from `cuMemCreate` on this driver, is mapped nowhere and leaves the
        // books here, so it is released once.
        if unsafe { self.context.driver().mem_release(handle) }.is_err() {
            state.orphans.push(handle);
        }
    }

    /// Undoes a partial map: unmaps and releases the pages just created (`(address, handle, bytes)`),
    /// newest first.
    fn undo_map(&self, state: &mut VirtualState, made: Vec<(u64, u64, u64)>) {
        for (at, handle, bytes) in made.into_iter().rev() {
            // SAFETY: the page was mapped by this call a moment ago and never handed out, so no work uses
            // it; it is one whole mapping.
            match unsafe { self.context.driver().mem_unmap(at, bytes) } {
                Ok(()) => self.release_handle(state, handle),
                // Still mapped: keep it in the books, so the drop unmaps it.
                Err(_) => self.record_page(state, at, handle, bytes),
            }
        }
    }

    /// Moves the physical memory of the page `handle`, of `bytes`, from `src` to the unmapped `dst`; on
    /// failure the page is put back at `src` where the driver lets it (or released), and the books say
    /// where it is.
    fn move_page(
        &self,
        state: &mut VirtualState,
        src: u64,
        dst: u64,
        handle: u64,
        bytes: u64,
    ) -> Result<(), CudaError> {
        let driver = self.context.driver();
        // SAFETY: `src` is one whole mapping of ours (the caller found the page there, lock held); by the
        // backend contract the caller waited for the device, so no queued work uses it.
        unsafe { driver.mem_unmap(src, bytes) }?;
        self.forget_page(state, src, bytes);
        // SAFETY: `[dst, dst + bytes)` is unmapped and inside a reserved range (checked by the caller under
        // the same lock); `handle` is live and has `bytes` bytes.
        match unsafe { driver.mem_map(dst, bytes, handle) } {
            Ok(()) => {
                self.record_page(state, dst, handle, bytes);
                Ok(())
            }
            Err(err) => {
                // SAFETY: `src` was unmapped just above and nothing else maps there meanwhile (lock held).
                match unsafe { driver.mem_map(src, bytes, handle) } {
                    Ok(()) => self.record_page(state, src, handle, bytes),
                    Err(_) => self.drop_mapping(state, handle),
                }
                Err(err)
            }
        }
    }

    /// Grants access to each run of mapped chunks inside `[addr, addr + size)`.
    fn grant_access_runs(&self, state: &VirtualState, addr: u64, size: u64) {
        let g = self.granularity;
        let mut run: Option<(u64, u64)> = None;
        let mut runs = Vec::new();
        for &at in state.chunks.range(addr..addr + size).map(|(at, _)| at) {
            run = match run {
                Some((start, end)) if end == at => Some((start, at + g)),
                Some(done) => {
                    runs.push(done);
                    Some((at, at + g))
                }
                None => Some((at, at + g)),
            };
        }
        runs.extend(run);
        for (start, end) in runs {
            // SAFETY: every chunk of the run is mapped (the books say so, under the lock).
            let _ = unsafe { self.context.driver().set_access(start, end - start) };
        }
    }
}

impl Backend for CudaVirtual {
    fn driver_clock(&self) -> DriverClock {
        DriverClock::Wall
    }

    fn segment_unit(&self) -> u64 {
        MEM_ALLOC_PAGE
    }

    fn allocate_segment(&self, size: u64) -> vrampool::Result<DeviceAddr> {
        let mapped = self.mapped_bytes();
        self.segments.allocate(&self.context, size, mapped)
    }

    fn free_segment(&self, addr: DeviceAddr, size: u64) -> vrampool::Result<()> {
        self.segments.free(&self.context, addr, size)
    }

    fn granularity(&self) -> Option<u64> {
        Some(self.granularity)
    }

    fn reserve_range(&self, size: u64) -> vrampool::Result<DeviceAddr> {
        let g = self.granularity;
        if size == 0 || size % g != 0 {
            return Err(vrampool::Error::InvalidBackendCall {
                call: "reserve_range",
                reason: format!("size {size} is not a positive multiple of the {g}-byte granularity"),
            });
        }
        let mut state = self.state.lock();
        self.context.bind()?;
        match self.context.driver().address_reserve(size) {
            Ok(addr) => {
                state.ranges.insert(addr, size);
                Ok(addr)
            }
            Err(err) => Err(self.context.memory_error(err, size, self.held_bytes(&state))),
        }
    }

    fn release_range(&self, addr: DeviceAddr, size: u64) -> vrampool::Result<()> {
        const CALL: &str = "release_range";
        let mut state = self.state.lock();
        match state.ranges.get(&addr) {
            Some(&len) if len == size => {}
            Some(&len) => {
                return Err(vrampool::Error::InvalidBackendCall {
                    call: CALL,
                    reason: format!("range {addr:#x} has {len} bytes, not {size}"),
                });
            }
            None => {
                return Err(vrampool::Error::InvalidBackendCall {
                    call: CALL,
                    reason: format!("{addr:#x} is not a range reserved on {}", self.context.name()),
                });
            }
        }
        let mapped = state.chunks.range(addr..addr + size).count();
        if mapped > 0 {
            return Err(vrampool::Error::InvalidBackendCall {
                call: CALL,
                reason: format!("range {addr:#x} still has {mapped} mapped chunks"),
            });
        }
        self.context.bind()?;
        // SAFETY: a whole range reserved by this backend, nothing mapped in it (checked above), leaving the
        // books under the same lock, so it is freed once.
        unsafe { self.context.driver().address_free(addr, size) }?;
        state.ranges.remove(&addr);
        Ok(())
    }

    fn map(&self, addr: DeviceAddr, size: u64) -> vrampool::Result<()> {
        let g = self.granularity;
        self.map_pages(addr, &vec![g; (size / g) as usize])
    }

    fn supports_large_pages(&self) -> bool {
        true
    }

    fn map_pages(&self, addr: DeviceAddr, pages: &[u64]) -> vrampool::Result<()> {
        const CALL: &str = "map";
        let g = self.granularity;
        let size: u64 = pages.iter().sum();
        let mut state = self.state.lock();
        if let Some(&page) = pages.iter().find(|&&page| page == 0 || page % g != 0) {
            return Err(vrampool::Error::InvalidBackendCall {
                call: CALL,
                reason: format!("a page of {page} bytes is not a positive multiple of the {g}-byte granularity"),
            });
        }
        self.check_span(&state, CALL, addr, size)?;
        self.check_chunks(&state, CALL, addr, size, false)?;
        self.context.bind()?;
        let driver = self.context.driver();
        let mut made = Vec::with_capacity(pages.len());
        let mut at = addr;
        for &bytes in pages {
            let handle = match driver.mem_create(bytes) {
                Ok(handle) => handle,
                Err(err) => {
                    self.undo_map(&mut state, made);
                    return Err(self.context.memory_error(err, size, self.held_bytes(&state)));
                }
            };
            if bytes > g {
                state.pages.insert(handle, bytes);
            }
            // SAFETY: `[at, at + bytes)` is unmapped and inside a reserved range (checked above, lock held)
            // and `handle` was just created with `bytes` bytes.
            if let Err(err) = unsafe { driver.mem_map(at, bytes, handle) } {
                self.release_handle(&mut state, handle);
                self.undo_map(&mut state, made);
                return Err(err.into());
            }
            made.push((at, handle, bytes));
            at += bytes;
        }
        // SAFETY: every page of `[addr, addr + size)` was mapped just above.
        if let Err(err) = unsafe { driver.set_access(addr, size) } {
            self.undo_map(&mut state, made);
            return Err(err.into());
        }
        for (at, handle, bytes) in made {
            self.record_page(&mut state, at, handle, bytes);
        }
        Ok(())
    }

    fn unmap(&self, addr: DeviceAddr, size: u64) -> vrampool::Result<()> {
        const CALL: &str = "unmap";
        let mut state = self.state.lock();
        self.check_span(&state, CALL, addr, size)?;
        self.check_chunks(&state, CALL, addr, size, true)?;
        let pages = self.pages_in(&state, CALL, addr, size)?;
        self.context.bind()?;
        let driver = self.context.driver();
        for (done, &(at, _, bytes)) in pages.iter().enumerate() {
            // SAFETY: `at` is one whole mapping of ours (checked above, lock held); by the backend contract
            // the caller waited for the device, so no queued work uses it.
            if let Err(err) = unsafe { driver.mem_unmap(at, bytes) } {
                // Put back what was unmapped, so the call changes nothing.
                for &(back, handle, bytes) in &pages[..done] {
                    // SAFETY: `back` was unmapped by this call a moment ago; `handle` is still live.
                    if unsafe { driver.mem_map(back, bytes, handle) }.is_err() {
                        self.forget_page(&mut state, back, bytes);
                        self.drop_mapping(&mut state, handle);
                    }
                }
                self.grant_access_runs(&state, addr, size);
                return Err(err.into());
            }
        }
        for (at, handle, bytes) in pages {
            self.forget_page(&mut state, at, bytes);
            self.drop_mapping(&mut state, handle);
        }
        Ok(())
    }

    fn remap(&self, from: DeviceAddr, to: DeviceAddr, size: u64) -> vrampool::Result<()> {
        const CALL: &str = "remap";
        let mut state = self.state.lock();
        self.check_transfer(&state, CALL, from, to, size)?;
        let pages = self.pages_in(&state, CALL, from, size)?;
        let mut moved = 0;
        let mut outcome = Ok(());
        for &(at, handle, bytes) in &pages {
            if let Err(err) = self.move_page(&mut state, at, to + (at - from), handle, bytes) {
                outcome = Err(err);
                break;
            }
            moved += 1;
        }
        if outcome.is_ok() {
            // SAFETY: every page of `[to, to + size)` was mapped just above.
            outcome = unsafe { self.context.driver().set_access(to, size) };
        }
        if let Err(err) = outcome {
            // Move back what moved, newest first, then give the old pages their access again.
            for &(at, handle, bytes) in pages[..moved].iter().rev() {
                if self.move_page(&mut state, to + (at - from), at, handle, bytes).is_err() {
                    break;
                }
            }
            self.grant_access_runs(&state, from, size);
            return Err(err.into());
        }
        Ok(())
    }

    fn supports_alias(&self) -> bool {
        true
    }

    fn alias(&self, from: DeviceAddr, to: DeviceAddr, size: u64) -> vrampool::Result<()> {
        const CALL: &str = "alias";
        let mut state = self.state.lock();
        self.check_transfer(&state, CALL, from, to, size)?;
        let pages = self.pages_in(&state, CALL, from, size)?;
        let driver = self.context.driver();
        let mut made = Vec::with_capacity(pages.len());
        let mut outcome = Ok(());
        for (at, handle, bytes) in pages {
            let second = to + (at - from);
            // SAFETY: `[second, second + bytes)` is unmapped and inside a reserved range (checked above, lock
            // held); `handle` is live (mapped at `at`) and has `bytes` bytes. Mapping it a second time leaves
            // the first mapping, and the work queued on it, as they are.
            match unsafe { driver.mem_map(second, bytes, handle) } {
                Ok(()) => made.push((second, handle, bytes)),
                Err(err) => {
                    outcome = Err(err);
                    break;
                }
            }
        }
        if outcome.is_ok() {
            // SAFETY: every page of `[to, to + size)` was mapped just above.
            outcome = unsafe { driver.set_access(to, size) };
        }
        if let Err(err) = outcome {
            for (at, _, bytes) in made.into_iter().rev() {
                // SAFETY: `at` was mapped by this call a moment ago and never handed out; the handle stays
                // mapped at its first address.
                let _ = unsafe { driver.mem_unmap(at, bytes) };
            }
            return Err(err.into());
        }
        for (at, handle, bytes) in made {
            self.record_page(&mut state, at, handle, bytes);
            *state.aliases.entry(handle).or_insert(0) += 1;
        }
        Ok(())
    }

    forward_to_context!();
}

/// The physical chunks mapped: mapped chunks, less those at the second (and later) addresses of aliased
/// handles.
fn physical_chunks(state: &VirtualState, granularity: u64) -> usize {
    let aliased: u64 = state
        .aliases
        .iter()
        .map(|(handle, &extra)| u64::from(extra) * state.pages.get(handle).map_or(1, |bytes| bytes / granularity))
        .sum();
    state.chunks.len() - aliased as usize
}

impl_cuda_memory!(CudaVirtual);

impl Drop for CudaVirtual {
    /// Waits for the device, then unmaps and releases every chunk, frees every range and segment still
    /// held; the context then destroys its events. Driver errors are dropped: a drop has no caller to give
    /// them to, and must not panic.
    fn drop(&mut self) {
        if self.context.bind().is_err() {
            return;
        }
        let driver = self.context.driver();
        let _ = driver.ctx_synchronize();
        let mut state = std::mem::take(self.state.get_mut());
        let mut next = 0;
        for (at, handle) in std::mem::take(&mut state.chunks) {
            // The other chunks of a page are unmapped with its first.
            if at < next {
                continue;
            }
            let bytes = self.handle_bytes(&state, handle);
            next = at + bytes;
            // SAFETY: each page is one whole mapping of ours and the device is idle; it leaves the books
            // here, so it is unmapped once.
            if unsafe { driver.mem_unmap(at, bytes) }.is_ok() {
                // Released with its last address; a release the driver refuses joins the orphans below.
                self.drop_mapping(&mut state, handle);
            }
        }
        for handle in state.orphans {
            // SAFETY: orphans are mapped nowhere and were never released successfully.
            let _ = unsafe { driver.mem_release(handle) };
        }
        for (base, size) in state.ranges {
            // SAFETY: a whole range of ours, its chunks unmapped above, freed once.
            let _ = unsafe { driver.address_free(base, size) };
        }
        self.segments.release_all(&self.context);
    }
}

#[cfg(test)]
mod tests {
    use vrampool::{Cap, DynamicConfig, DynamicPool, Error, MIB, Pool, StreamId};

    use super::*;
    use crate::error::{CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY};
    use crate::fake_driver::{FAKE_POISON, FakeConfig, FakeDriver};
    use crate::transfer::CudaMemory;

    const G: u64 = 2 * MIB;

    fn backend() -> (Arc<FakeDriver>, CudaVirtual) {
        let fake = FakeDriver::standard();
        let backend = CudaVirtual::with_driver(fake.clone()).unwrap();
        (fake, backend)
    }

    fn memory_calls(fake: &FakeDriver) -> Vec<&'static str> {
        fake.calls().into_iter().filter(|c| c.starts_with("cuMem")).collect()
    }

    #[test]
    fn larger_pages_are_one_physical_allocation_each() {
        let fake = FakeDriver::standard();
        let v = CudaVirtual::with_driver_and_page(fake.clone(), Some(4 * G)).unwrap();
        assert_eq!(v.granularity(), Some(4 * G));
        let r = v.reserve_range(16 * G).unwrap();
        v.map(r, 8 * G).unwrap();
        assert_eq!(fake.live_handles(), 2, "two pages of 8 MiB");
        assert_eq!(fake.used(), 8 * G);
        assert!(v.map(r + 8 * G, G).is_err(), "a part of a page is refused");
        v.unmap(r, 8 * G).unwrap();
        v.release_range(r, 16 * G).unwrap();
        let err = CudaVirtual::with_driver_and_page(FakeDriver::standard(), Some(3 * MIB)).unwrap_err();
        assert!(
            matches!(err, CudaError::PageSize { page, granularity } if page == 3 * MIB && granularity == G),
            "{err}"
        );
    }

    #[test]
    fn map_creates_one_handle_per_chunk_and_grants_access_once() {
        let (fake, v) = backend();
        assert_eq!((v.name(), v.granularity(), v.capacity()), ("cuda-virtual:0".into(), Some(G), 1 << 30));
        let r = v.reserve_range(16 * G).unwrap();
        fake.clear_calls();
        v.map(r + 2 * G, 4 * G).unwrap();
        let calls = memory_calls(&fake);
        assert_eq!(
            calls,
            [["cuMemCreate", "cuMemMap"]; 4].concat().into_iter().chain(["cuMemSetAccess"]).collect::<Vec<_>>()
        );
        let handles: Vec<u64> = (2..6).map(|i| v.chunk_handle(r + i * G).unwrap()).collect();
        let mut distinct = handles.clone();
        distinct.dedup();
        assert_eq!(distinct.len(), 4, "one handle per chunk: {handles:?}");
        for i in 2..6 {
            assert_eq!(fake.handle_at(r + i * G), v.chunk_handle(r + i * G));
            assert!(fake.has_access(r + i * G));
        }
        assert_eq!((v.mapped_chunks(), v.mapped_bytes(), fake.used()), (4, 4 * G, 4 * G));
        assert!(v.holds(r + 2 * G, 4 * G) && v.holds(r + 3 * G + 5, 100));
        assert!(!v.holds(r + G, 2 * G) && !v.holds(r + 5 * G, 2 * G));
    }

    #[test]
    fn unmap_unmaps_and_releases_each_chunk() {
        let (fake, v) = backend();
        let r = v.reserve_range(8 * G).unwrap();
        v.map(r, 4 * G).unwrap();
        fake.clear_calls();
        v.unmap(r + G, 2 * G).unwrap();
        assert_eq!(memory_calls(&fake), ["cuMemUnmap", "cuMemUnmap", "cuMemRelease", "cuMemRelease"]);
        assert_eq!((v.mapped_chunks(), fake.live_handles(), fake.used()), (2, 2, 2 * G));
        assert!(v.chunk_handle(r + G).is_none() && v.chunk_handle(r).is_some() && v.chunk_handle(r + 3 * G).is_some());
        v.unmap(r, G).unwrap();
        v.unmap(r + 3 * G, G).unwrap();
        v.release_range(r, 8 * G).unwrap();
        assert_eq!((fake.live_handles(), fake.mapping_count(), fake.reservation_count(), fake.used()), (0, 0, 0, 0));
    }

    #[test]
    fn alias_maps_the_same_handles_at_a_second_address_until_the_last_is_unmapped() {
        let (fake, v) = backend();
        assert!(v.supports_alias());
        let r = v.reserve_range(16 * G).unwrap();
        v.map(r, 2 * G).unwrap();
        let bytes: Vec<u8> = (0..2 * G).map(|i| (i % 249) as u8).collect();
        // SAFETY: the test owns the mapped range and reads it only as bytes.
        unsafe { v.copy_host_to_device(r, &bytes, StreamId::DEFAULT) }.unwrap();
        fake.clear_calls();
        v.alias(r, r + 8 * G, 2 * G).unwrap();
        assert_eq!(memory_calls(&fake), ["cuMemMap", "cuMemMap", "cuMemSetAccess"], "nothing created or unmapped");
        assert_eq!(v.chunk_handle(r), v.chunk_handle(r + 8 * G));
        assert_eq!((v.mapped_chunks(), fake.used(), fake.live_handles()), (2, 2 * G, 2), "one memory, two addresses");
        let mut back = vec![0; bytes.len()];
        v.copy_device_to_host(r + 8 * G, &mut back, StreamId::DEFAULT).unwrap();
        assert!(back == bytes, "the second address reaches the same bytes");
        // Refused before the driver is called: a target already mapped, a source not mapped.
        fake.clear_calls();
        assert!(matches!(v.alias(r, r + 8 * G, G), Err(Error::InvalidBackendCall { call: "alias", .. })));
        assert!(matches!(v.alias(r + 4 * G, r + 12 * G, G), Err(Error::InvalidBackendCall { call: "alias", .. })));
        assert!(memory_calls(&fake).is_empty());
        // The first address goes: the memory stays, reachable at the second; then the second goes too.
        v.unmap(r, 2 * G).unwrap();
        assert_eq!(memory_calls(&fake), ["cuMemUnmap", "cuMemUnmap"], "nothing released yet");
        assert_eq!((v.mapped_chunks(), fake.used(), fake.live_handles()), (2, 2 * G, 2));
        v.copy_device_to_host(r + 8 * G, &mut back, StreamId::DEFAULT).unwrap();
        assert!(back == bytes);
        v.remap(r + 8 * G, r + 4 * G, 2 * G).unwrap();
        v.unmap(r + 4 * G, 2 * G).unwrap();
        assert_eq!((v.mapped_chunks(), fake.used(), fake.live_handles()), (0, 0, 0));
        assert_eq!(fake.count("cuMemRelease"), 2, "each handle released once, with its last address");
    }

    #[test]
    fn a_failed_alias_changes_nothing_and_the_drop_releases_aliased_handles_once() {
        let (fake, v) = backend();
        let r = v.reserve_range(16 * G).unwrap();
        v.map(r, 3 * G).unwrap();
        fake.fail("cuMemMap", 1, crate::error::CUDA_ERROR_INVALID_VALUE);
        assert!(matches!(v.alias(r, r + 8 * G, 3 * G), Err(Error::Backend { call: "cuMemMap", .. })));
        assert!((8..11).all(|i| v.chunk_handle(r + i * G).is_none()), "the chunk aliased before the failure unmapped");
        assert_eq!((fake.mapping_count(), v.mapped_chunks()), (3, 3));
        v.alias(r, r + 8 * G, 3 * G).unwrap();
        v.unmap(r + G, G).unwrap();
        drop(v);
        assert_eq!((fake.used(), fake.live_handles(), fake.mapping_count()), (0, 0, 0));
        assert_eq!(fake.count("cuMemRelease"), 3);
    }

    #[test]
    fn remap_moves_the_same_handles_with_their_bytes() {
        let (fake, v) = backend();
        let r = v.reserve_range(16 * G).unwrap();
        v.map(r, 3 * G).unwrap();
        let before: Vec<u64> = (0..3).map(|i| v.chunk_handle(r + i * G).unwrap()).collect();
        let bytes: Vec<u8> = (0..3 * G).map(|i| (i % 251) as u8).collect();
        // SAFETY: the test owns the mapped range and reads it only as bytes.
        unsafe { v.copy_host_to_device(r, &bytes, StreamId::DEFAULT) }.unwrap();
        fake.clear_calls();
        v.remap(r, r + 10 * G, 3 * G).unwrap();
        assert_eq!(
            memory_calls(&fake),
            [["cuMemUnmap", "cuMemMap"]; 3].concat().into_iter().chain(["cuMemSetAccess"]).collect::<Vec<_>>(),
            "no chunk created or released, one access call for the batch"
        );
        let after: Vec<u64> = (0..3).map(|i| v.chunk_handle(r + (10 + i) * G).unwrap()).collect();
        assert_eq!(before, after);
        assert!((0..3).all(|i| v.chunk_handle(r + i * G).is_none()));
        let mut back = vec![0; bytes.len()];
        v.copy_device_to_host(r + 10 * G, &mut back, StreamId::DEFAULT).unwrap();
        assert!(back == bytes, "the physical memory moved with its contents");
        assert_eq!(fake.used(), 3 * G);
    }

    #[test]
    fn contract_breaches_are_refused_before_the_driver_is_called() {
        let (fake, v) = backend();
        let r = v.reserve_range(8 * G).unwrap();
        v.map(r, 2 * G).unwrap();
        let other = v.reserve_range(4 * G).unwrap();
        fake.clear_calls();
        let invalid = |result: vrampool::Result<()>| matches!(result, Err(Error::InvalidBackendCall { .. }));
        assert!(invalid(v.map(r + 1, G)), "unaligned");
        assert!(invalid(v.map(r, 0)), "empty");
        assert!(invalid(v.map(r + G, 2 * G)), "over a mapped chunk");
        assert!(invalid(v.map(r + 7 * G, 2 * G)), "past the range");
        assert!(invalid(v.map(0x1000_0000, G)), "outside every range");
        assert!(invalid(v.unmap(r + 2 * G, G)), "not mapped");
        assert!(invalid(v.remap(r, r + G, G)), "onto a mapped chunk");
        assert!(invalid(v.remap(r + 4 * G, r + 5 * G, G)), "from an unmapped chunk");
        assert!(invalid(v.release_range(r, 8 * G)), "chunks still mapped");
        assert!(invalid(v.release_range(other, 2 * G)), "wrong size");
        assert!(invalid(v.release_range(other + G, 2 * G)), "not a range");
        assert!(matches!(v.reserve_range(G + 1), Err(Error::InvalidBackendCall { .. })));
        assert!(memory_calls(&fake).is_empty(), "{:?}", fake.calls());
        let err = v.unmap(r + 2 * G, G).unwrap_err();
        assert!(err.to_string().contains("is not mapped"), "{err}");
    }

    #[test]
    fn a_failed_map_leaves_nothing_behind() {
        for (call, skip) in [("cuMemCreate", 2), ("cuMemMap", 1), ("cuMemSetAccess", 0)] {
            let (fake, v) = backend();
            let r = v.reserve_range(8 * G).unwrap();
            fake.fail(call, skip, CUDA_ERROR_INVALID_VALUE);
            let err = v.map(r, 4 * G).unwrap_err();
            assert_eq!(
                err,
                Error::Backend { call, message: format!("{call} failed: CUDA_ERROR_INVALID_VALUE (1)") },
                "{call}"
            );
            assert_eq!((v.mapped_chunks(), fake.mapping_count(), fake.live_handles(), fake.used()), (0, 0, 0, 0));
            v.map(r, 4 * G).unwrap();
            assert_eq!(fake.live_handles(), 4, "the range maps after the failure");
        }
    }

    #[test]
    fn out_of_memory_names_the_request_and_the_device() {
        let (fake, v) = backend();
        let r = v.reserve_range(1024 * G).unwrap();
        v.map(r, 400 * G).unwrap();
        let err = v.map(r + 400 * G, 200 * G).unwrap_err();
        assert_eq!(
            err,
            Error::DeviceOutOfMemory { call: "cuMemCreate", requested: 200 * G, used: 400 * G, capacity: 1 << 30 }
        );
        assert_eq!((v.mapped_chunks(), fake.live_handles()), (400, 400), "the partial batch was given back");
        fake.fail("cuMemCreate", 0, CUDA_ERROR_OUT_OF_MEMORY);
        assert!(v.map(r + 400 * G, G).unwrap_err().is_out_of_memory());
    }

    #[test]
    fn a_failed_remap_puts_every_chunk_back() {
        for (call, skip) in [("cuMemMap", 1), ("cuMemUnmap", 2), ("cuMemSetAccess", 0)] {
            let (fake, v) = backend();
            let r = v.reserve_range(16 * G).unwrap();
            v.map(r, 4 * G).unwrap();
            let handles: Vec<u64> = (0..4).map(|i| v.chunk_handle(r + i * G).unwrap()).collect();
            fake.fail(call, skip, CUDA_ERROR_INVALID_VALUE);
            assert!(v.remap(r, r + 8 * G, 4 * G).is_err(), "{call}");
            let now: Vec<Option<u64>> = (0..4).map(|i| v.chunk_handle(r + i * G)).collect();
            assert_eq!(now, handles.iter().copied().map(Some).collect::<Vec<_>>(), "{call}");
            for i in 0..4 {
                assert_eq!(fake.handle_at(r + i * G), Some(handles[i as usize]), "{call}");
                assert!(fake.has_access(r + i * G), "{call}: chunk {i} has its access again");
                assert!(fake.handle_at(r + (8 + i) * G).is_none(), "{call}");
            }
            assert_eq!(fake.live_handles(), 4, "{call}");
        }
    }

    #[test]
    fn a_failed_unmap_changes_nothing() {
        let (fake, v) = backend();
        let r = v.reserve_range(8 * G).unwrap();
        v.map(r, 3 * G).unwrap();
        let handles: Vec<u64> = (0..3).map(|i| v.chunk_handle(r + i * G).unwrap()).collect();
        fake.fail("cuMemUnmap", 2, CUDA_ERROR_INVALID_VALUE);
        assert!(matches!(v.unmap(r, 3 * G), Err(Error::Backend { call: "cuMemUnmap", .. })));
        for i in 0..3 {
            assert_eq!(fake.handle_at(r + i * G), Some(handles[i as usize]));
            assert!(fake.has_access(r + i * G));
        }
        assert_eq!((v.mapped_chunks(), fake.live_handles()), (3, 3));
    }

    #[test]
    fn a_refused_release_is_retried_when_the_backend_drops() {
        let (fake, v) = backend();
        let r = v.reserve_range(4 * G).unwrap();
        v.map(r, 2 * G).unwrap();
        fake.fail("cuMemRelease", 0, CUDA_ERROR_INVALID_VALUE);
        v.unmap(r, 2 * G).unwrap();
        assert_eq!((v.mapped_chunks(), fake.mapping_count(), fake.live_handles()), (0, 0, 1));
        drop(v);
        assert_eq!((fake.live_handles(), fake.reservation_count(), fake.used()), (0, 0, 0));
    }

    #[test]
    fn drop_releases_every_chunk_range_segment_and_event() {
        let (fake, v) = backend();
        let a = v.reserve_range(8 * G).unwrap();
        let b = v.reserve_range(8 * G).unwrap();
        v.map(a, 3 * G).unwrap();
        v.map(b + 4 * G, 2 * G).unwrap();
        let segment = v.allocate_segment(MIB).unwrap();
        assert!(v.holds(segment, MIB) && v.segment_count() == 1);
        let event = v.record_event(StreamId::DEFAULT).unwrap();
        let _ = event;
        assert!(fake.used() > 0 && fake.event_count() == 1);
        drop(v);
        assert_eq!(
            (fake.mapping_count(), fake.live_handles(), fake.reservation_count(), fake.allocation_count()),
            (0, 0, 0, 0)
        );
        assert_eq!((fake.used(), fake.event_count()), (0, 0));
        assert!(fake.count("cuCtxSynchronize") >= 1, "the device is idle before anything is unmapped");
    }

    #[test]
    fn a_device_without_virtual_memory_is_refused() {
        let fake = FakeDriver::new(FakeConfig { virtual_memory: false, ..FakeConfig::default() });
        let err = CudaVirtual::with_driver(fake).unwrap_err();
        assert_eq!(err, CudaError::VirtualMemoryUnsupported { ordinal: 0 });
    }

    #[test]
    fn a_dynamic_pool_grows_in_place_and_keeps_its_data() {
        let (fake, v) = backend();
        let v = Arc::new(v);
        let config = DynamicConfig::default().initial_size(8 * MIB).cap(Cap::Bytes(512 * MIB));
        let pool = DynamicPool::new(v.clone(), config).unwrap();
        let first = pool.allocate(3 * MIB, 256, StreamId::DEFAULT).unwrap();
        let bytes: Vec<u8> = (0..3 * MIB).map(|i| (i * 7 % 256) as u8).collect();
        // SAFETY: the test owns the allocation and reads it only as bytes.
        unsafe { v.copy_host_to_device(first.addr, &bytes, StreamId::DEFAULT) }.unwrap();
        let more: Vec<_> = (0..20).map(|_| pool.allocate(10 * MIB, 256, StreamId::DEFAULT).unwrap()).collect();
        assert!(pool.stats().growths >= 1);
        assert_eq!(fake.reservation_count(), 1, "one address range, grown in place");
        let (base, top) = (first.addr, more.iter().map(|a| a.addr + a.size).max().unwrap());
        assert!(v.holds(base, top - base), "the pool's memory is one mapped stretch");
        let mut back = vec![0; bytes.len()];
        v.copy_device_to_host(first.addr, &mut back, StreamId::DEFAULT).unwrap();
        assert!(back == bytes, "growth kept the first block's bytes");
        assert_eq!(pool.stats().reserved_bytes.current, v.mapped_bytes());
        // Past the cap: the pool's own out-of-memory error, and the device is left as it was.
        let mapped = v.mapped_bytes();
        assert!(matches!(pool.allocate(400 * MIB, 256, StreamId::DEFAULT), Err(Error::OutOfMemory { .. })));
        assert_eq!(v.mapped_bytes(), mapped);
        for a in more {
            pool.free(a.addr).unwrap();
        }
        pool.free(first.addr).unwrap();
        drop(pool);
        assert_eq!((fake.mapping_count(), fake.reservation_count(), fake.used()), (0, 0, 0));
        let _ = FAKE_POISON;
    }
}
