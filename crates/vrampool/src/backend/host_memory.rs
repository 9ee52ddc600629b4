//! Real host bytes behind the backend interface, so that tests can write a canary into every block and
//! catch two blocks that overlap, or memory unmapped under a live block. The addresses it hands out are
//! synthetic: the bytes live in its own table and are reached only through its methods, never by
//! dereferencing an address.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

use super::device_ledger::DeviceLedger;
use super::{Backend, CostModel, DeviceAddr, DeviceCounters, EventId, FaultPlan};
use crate::error::{Error, Result};
use crate::stream::StreamId;
use crate::units::MIB;

/// The word that memory no one has written holds: fresh segments, fresh mappings and moved chunks read as
/// this, so a block whose bytes were lost fails its canary check.
pub const POISON: u64 = 0xDEAD_BEEF_DEAD_BEEF;

/// Segments keep their bytes in pieces of this size, allocated on first touch, so that a large
/// reservation costs host memory only where it is used.
const SEGMENT_PIECE: u64 = MIB;

/// How a [`HostMemory`] is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostMemoryConfig {
    /// Memory the device pretends to have, in bytes. Default: 256 MiB.
    pub capacity: u64,
    /// Virtual-memory granularity, or `None` for segments only. Default: 2 MiB, as on an H200.
    pub granularity: Option<u64>,
    /// The first address handed out. Default: `0x1_0000_0000`.
    pub base_address: u64,
    /// The bytes of address space from [`HostMemoryConfig::base_address`] the device hands addresses out
    /// of; a call that finds no room left in it fails ([`Error::AddressSpaceExhausted`]). Default:
    /// [`HOST_ADDRESS_SPACE`].
    pub address_space: u64,
}

/// The address space a [`HostMemory`] hands addresses out of by default: 1 TiB.
pub const HOST_ADDRESS_SPACE: u64 = 1 << 40;

impl Default for HostMemoryConfig {
    fn default() -> Self {
        HostMemoryConfig {
            capacity: 256 * MIB,
            granularity: Some(2 * MIB),
            base_address: 0x1_0000_0000,
            address_space: HOST_ADDRESS_SPACE,
        }
    }
}

impl HostMemoryConfig {
    /// Sets the capacity in bytes.
    pub fn capacity(mut self, bytes: u64) -> Self {
        self.capacity = bytes;
        self
    }

    /// Sets the virtual-memory granularity, or turns virtual memory off with `None`.
    pub fn granularity(mut self, granularity: Option<u64>) -> Self {
        self.granularity = granularity;
        self
    }

    /// Sets the first address handed out (devices that must not share addresses start apart).
    pub fn base_address(mut self, addr: u64) -> Self {
        self.base_address = addr;
        self
    }

    /// Sets the bytes of address space the device hands addresses out of.
    pub fn address_space(mut self, bytes: u64) -> Self {
        self.address_space = bytes;
        self
    }
}

type Piece = RwLock<Option<Box<[AtomicU64]>>>;

/// The bytes of one segment or reserved range.
#[derive(Debug)]
struct HostRegion {
    base: u64,
    size: u64,
    piece_size: u64,
    pieces: Box<[Piece]>,
    /// Per piece, whether it may be touched: always for segments, while mapped for ranges.
    mapped: Box<[AtomicBool]>,
}

impl HostRegion {
    fn new(base: u64, size: u64, piece_size: u64, mapped: bool) -> Self {
        let count = size.div_ceil(piece_size) as usize;
        HostRegion {
            base,
            size,
            piece_size,
            pieces: (0..count).map(|_| RwLock::new(None)).collect(),
            mapped: (0..count).map(|_| AtomicBool::new(mapped)).collect(),
        }
    }

    /// Marks the pieces of `[addr, addr + size)` mapped or not; either way their bytes are gone.
    fn set_mapped(&self, addr: u64, size: u64, mapped: bool) {
        let first = ((addr - self.base) / self.piece_size) as usize;
        let count = (size / self.piece_size) as usize;
        for index in first..first + count {
            self.mapped[index].store(mapped, Ordering::SeqCst);
            *self.pieces[index].write() = None;
        }
    }

    /// Runs `f` on the word at `addr` (8-byte aligned, inside the region).
    fn with_word<T>(&self, addr: u64, f: impl FnOnce(&AtomicU64) -> T) -> Result<T> {
        let offset = addr - self.base;
        let index = (offset / self.piece_size) as usize;
        let word = ((offset % self.piece_size) / 8) as usize;
        let not_mapped = || Error::HostAccess { addr, len: 8 };
        if !self.mapped[index].load(Ordering::SeqCst) {
            return Err(not_mapped());
        }
        if let Some(words) = self.pieces[index].read().as_ref() {
            return Ok(f(&words[word]));
        }
        let mut piece = self.pieces[index].write();
        if !self.mapped[index].load(Ordering::SeqCst) {
            return Err(not_mapped());
        }
        let words = piece.get_or_insert_with(|| {
            let piece_words = self.piece_size.min(self.size - index as u64 * self.piece_size).div_ceil(8);
            (0..piece_words).map(|_| AtomicU64::new(POISON)).collect()
        });
        Ok(f(&words[word]))
    }
}

/// Real host bytes behind the [`Backend`] interface, for tests that check data.
///
/// Addresses are labels, as on the simulated device (from [`HostMemoryConfig::base_address`] up), not
/// pointers into the process: no memory of the device's lies at them, and dereferencing one is undefined
/// behaviour (a segmentation fault, typically). The bytes behind them are real, kept in the device's own
/// table (allocated piece by piece where first touched), and are read and written with
/// [`HostMemory::fill`], [`HostMemory::check`], [`HostMemory::write`] and [`HostMemory::read`] only, from any
/// number of threads. Touching memory that is not mapped is an error, fresh and moved memory
/// reads as [`POISON`], and every call is checked as on [`crate::SimDevice`]. Events complete at once: the
/// host runs no asynchronous work.
#[derive(Debug)]
pub struct HostMemory {
    capacity: u64,
    granularity: Option<u64>,
    ledger: Mutex<DeviceLedger>,
    regions: RwLock<BTreeMap<u64, Arc<HostRegion>>>,
    next_event: AtomicU64,
}

impl Default for HostMemory {
    fn default() -> Self {
        Self::new(HostMemoryConfig::default())
    }
}

impl HostMemory {
    /// Host memory with the given setup.
    pub fn new(config: HostMemoryConfig) -> Self {
        HostMemory {
            capacity: config.capacity,
            granularity: config.granularity,
            ledger: Mutex::new(DeviceLedger::new(
                config.capacity,
                config.granularity,
                config.base_address,
                config.address_space,
                CostModel::free(),
            )),
            regions: RwLock::new(BTreeMap::new()),
            next_event: AtomicU64::new(0),
        }
    }

    /// What the device has been asked to do so far.
    pub fn counters(&self) -> DeviceCounters {
        self.ledger.lock().counters()
    }

    /// Memory in use now (segments plus mapped chunks).
    pub fn used_bytes(&self) -> u64 {
        self.ledger.lock().counters().used_bytes
    }

    /// Replaces the fault plan; calls are numbered from 1 again.
    pub fn set_faults(&self, plan: FaultPlan) {
        self.ledger.lock().set_faults(plan);
    }

    fn region(&self, addr: u64, len: u64) -> Result<Arc<HostRegion>> {
        let regions = self.regions.read();
        match regions.range(..=addr).next_back() {
            Some((_, region)) if addr.checked_add(len).is_some_and(|end| end <= region.base + region.size) => {
                Ok(region.clone())
            }
            _ => Err(Error::HostAccess { addr, len }),
        }
    }

    /// The 8-byte words covering `[addr, addr + len)` (a range inside a region, so below the top of the
    /// 64-bit space).
    fn words(addr: u64, len: u64) -> impl Iterator<Item = u64> {
        let first = addr & !7;
        let end = addr.saturating_add(len).div_ceil(8).saturating_mul(8);
        (first..end).step_by(8)
    }

    /// Writes `word` into every 8-byte word covering `[addr, addr + len)`.
    pub fn fill(&self, addr: u64, len: u64, word: u64) -> Result<()> {
        let region = self.region(addr & !7, len.saturating_add(addr & 7))?;
        for at in Self::words(addr, len) {
            region.with_word(at, |w| w.store(word, Ordering::Relaxed))?;
        }
        Ok(())
    }

    /// Checks that every 8-byte word covering `[addr, addr + len)` holds `word`.
    pub fn check(&self, addr: u64, len: u64, word: u64) -> Result<()> {
        let region = self.region(addr & !7, len.saturating_add(addr & 7))?;
        for at in Self::words(addr, len) {
            let found = region.with_word(at, |w| w.load(Ordering::Relaxed))?;
            if found != word {
                return Err(Error::CanaryMismatch { addr: at, expected: word, found });
            }
        }
        Ok(())
    }

    /// Writes `bytes` at `addr`.
    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<()> {
        let region = self.region(addr, bytes.len() as u64)?;
        for (i, &byte) in bytes.iter().enumerate() {
            let at = addr + i as u64;
            let shift = (at % 8) * 8;
            region.with_word(at & !7, |w| {
                let old = w.load(Ordering::Relaxed);
                w.store((old & !(0xff << shift)) | (u64::from(byte) << shift), Ordering::Relaxed);
            })?;
        }
        Ok(())
    }

    /// Reads `len` bytes at `addr`.
    pub fn read(&self, addr: u64, len: u64) -> Result<Vec<u8>> {
        let region = self.region(addr, len)?;
        // `region` checked that `addr + len` lies inside it.
        (addr..addr + len)
            .map(|at| region.with_word(at & !7, |w| (w.load(Ordering::Relaxed) >> ((at % 8) * 8)) as u8))
            .collect()
    }
}

impl Backend for HostMemory {
    fn name(&self) -> String {
        "host".into()
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Segments start at multiples of the granularity (2 MiB without virtual memory).
    fn segment_alignment(&self) -> u64 {
        self.ledger.lock().address_align()
    }

    fn allocate_segment(&self, size: u64) -> Result<DeviceAddr> {
        let mut ledger = self.ledger.lock();
        let addr = ledger.allocate_segment(size)?;
        self.regions.write().insert(addr, Arc::new(HostRegion::new(addr, size, SEGMENT_PIECE, true)));
        Ok(addr)
    }

    fn free_segment(&self, addr: DeviceAddr, size: u64) -> Result<()> {
        let mut ledger = self.ledger.lock();
        ledger.free_segment(addr, size)?;
        self.regions.write().remove(&addr);
        Ok(())
    }

    fn granularity(&self) -> Option<u64> {
        self.granularity
    }

    fn reserve_range(&self, size: u64) -> Result<DeviceAddr> {
        let mut ledger = self.ledger.lock();
        let addr = ledger.reserve_range(size)?;
        let granularity = self.granularity.expect("the ledger refuses ranges without virtual memory");
        self.regions.write().insert(addr, Arc::new(HostRegion::new(addr, size, granularity, false)));
        Ok(addr)
    }

    fn release_range(&self, addr: DeviceAddr, size: u64) -> Result<()> {
        let mut ledger = self.ledger.lock();
        ledger.release_range(addr, size)?;
        self.regions.write().remove(&addr);
        Ok(())
    }

    fn map(&self, addr: DeviceAddr, size: u64) -> Result<()> {
        let mut ledger = self.ledger.lock();
        ledger.map(addr, size)?;
        self.region(addr, size)?.set_mapped(addr, size, true);
        Ok(())
    }

    fn supports_large_pages(&self) -> bool {
        true
    }

    fn map_pages(&self, addr: DeviceAddr, pages: &[u64]) -> Result<()> {
        let mut ledger = self.ledger.lock();
        ledger.map_pages(addr, pages)?;
        let size = pages.iter().sum();
        self.region(addr, size)?.set_mapped(addr, size, true);
        Ok(())
    }

    fn unmap(&self, addr: DeviceAddr, size: u64) -> Result<()> {
        let mut ledger = self.ledger.lock();
        ledger.unmap(addr, size)?;
        self.region(addr, size)?.set_mapped(addr, size, false);
        Ok(())
    }

    fn remap(&self, from: DeviceAddr, to: DeviceAddr, size: u64) -> Result<()> {
        let mut ledger = self.ledger.lock();
        ledger.remap(from, to, size)?;
        self.region(from, size)?.set_mapped(from, size, false);
        self.region(to, size)?.set_mapped(to, size, true);
        Ok(())
    }

    fn record_event(&self, _stream: StreamId) -> Result<EventId> {
        let mut ledger = self.ledger.lock();
        ledger.event_call("record_event", 0)?;
        ledger.count_event_recorded();
        Ok(EventId(self.next_event.fetch_add(1, Ordering::Relaxed) + 1))
    }

    fn event_complete(&self, _event: EventId) -> Result<bool> {
        let mut ledger = self.ledger.lock();
        ledger.event_call("event_complete", 0)?;
        ledger.count_event_query();
        Ok(true)
    }

    fn stream_wait_event(&self, _stream: StreamId, _event: EventId) -> Result<()> {
        let mut ledger = self.ledger.lock();
        ledger.event_call("stream_wait_event", 0)?;
        ledger.count_stream_wait();
        Ok(())
    }

    fn release_event(&self, _event: EventId) {}

    fn wait_event(&self, _event: EventId) -> Result<()> {
        let mut ledger = self.ledger.lock();
        ledger.event_call("wait_event", 0)?;
        ledger.count_event_wait();
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        let mut ledger = self.ledger.lock();
        ledger.event_call("synchronize", 0)?;
        ledger.count_synchronization();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::KIB;

    fn host() -> HostMemory {
        HostMemory::new(HostMemoryConfig::default().capacity(16 * MIB).granularity(Some(64 * KIB)))
    }

    #[test]
    fn segments_hold_bytes() {
        let host = host();
        let a = host.allocate_segment(3 * MIB).unwrap();
        host.check(a, 64, POISON).unwrap();
        host.fill(a + 256, 1024, 42).unwrap();
        host.check(a + 256, 1024, 42).unwrap();
        assert!(matches!(host.check(a + 256, 1032, 42), Err(Error::CanaryMismatch { .. })));
        host.write(a + 3, b"hello").unwrap();
        assert_eq!(host.read(a + 3, 5).unwrap(), b"hello");
        assert!(matches!(host.fill(a + 3 * MIB, 8, 1), Err(Error::HostAccess { .. })));
        host.free_segment(a, 3 * MIB).unwrap();
        assert!(matches!(host.fill(a, 8, 1), Err(Error::HostAccess { .. })));
    }

    #[test]
    fn unmapped_memory_cannot_be_touched_and_moves_lose_bytes() {
        let host = host();
        let g = 64 * KIB;
        let r = host.reserve_range(8 * g).unwrap();
        assert!(matches!(host.fill(r, 8, 1), Err(Error::HostAccess { .. })));
        host.map(r, 2 * g).unwrap();
        host.fill(r, 2 * g, 7).unwrap();
        host.remap(r, r + 4 * g, g).unwrap();
        assert!(host.fill(r, 8, 1).is_err());
        host.check(r + g, g, 7).unwrap();
        host.check(r + 4 * g, 8, POISON).unwrap();
        host.unmap(r + g, g).unwrap();
        host.unmap(r + 4 * g, g).unwrap();
        host.release_range(r, 8 * g).unwrap();
        assert_eq!(host.used_bytes(), 0);
    }
}
