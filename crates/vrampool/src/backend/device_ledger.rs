//! The bookkeeping shared by the backends that need no GPU: what is allocated, reserved and mapped, with
//! strict checks of every call, capacity, fault injection, counters and modelled driver time.

use std::collections::{BTreeMap, HashMap};

use super::{CostModel, DeviceCounters, FaultPlan};
use crate::error::{Error, Result};
use crate::units::align_up;

/// One reserved address range and the physical chunk mapped at each of its chunks.
#[derive(Debug)]
struct ReservedRange {
    size: u64,
    /// Per chunk, the id of the physical chunk mapped there ([`UNMAPPED`] where none is).
    mapped: Vec<u64>,
    mapped_chunks: u64,
}

/// A transfer of mapped pages to unmapped addresses, checked ([`DeviceLedger::check_transfer`]).
struct Transfer {
    from_base: u64,
    from_first: usize,
    to_base: u64,
    to_first: usize,
    count: usize,
    /// The physical page of each chunk moved.
    physical: Vec<u64>,
    /// The bytes of each page moved, in order.
    pages: Vec<u64>,
}

/// The physical id of a chunk of address range that nothing is mapped at.
const UNMAPPED: u64 = 0;

/// The state of a device without a GPU. Every call is checked against the backend contract: a pool bug
/// (a double free, a map over a mapped chunk) shows up as [`Error::InvalidBackendCall`], never silently.
///
/// Addresses come from the device's own range, `[first_addr, end_addr)`: handed out one after the other,
/// and once the end is reached, from the lowest stretch free between the segments and ranges held. No
/// address outside the range, and never 0, is handed out.
#[derive(Debug)]
pub(crate) struct DeviceLedger {
    capacity: u64,
    granularity: Option<u64>,
    address_align: u64,
    /// The first address of the device's range.
    first_addr: u64,
    /// The end of the device's range (exclusive).
    end_addr: u64,
    /// Where the next address is taken from while the range has room past everything handed out.
    next_addr: u64,
    segments: BTreeMap<u64, u64>,
    ranges: BTreeMap<u64, ReservedRange>,
    counters: DeviceCounters,
    cost: CostModel,
    faults: FaultPlan,
    calls_since_plan: u64,
    /// The last physical chunk id handed out.
    last_physical: u64,
    /// Per physical page, how many of its chunks are mapped at some address (more than its chunks after an
    /// alias).
    mappings: HashMap<u64, u32>,
    /// Per physical page of more than one chunk ([`DeviceLedger::map_pages`]), its chunks; a page not here
    /// has one.
    page_chunks: HashMap<u64, u32>,
}

impl DeviceLedger {
    /// A device of `capacity` bytes whose addresses lie in the `address_space` bytes from `base_addr`
    /// (its first address rounded up to the alignment of segments, and never 0; the range's end clamped
    /// to the top of the 64-bit space).
    pub(crate) fn new(
        capacity: u64,
        granularity: Option<u64>,
        base_addr: u64,
        address_space: u64,
        cost: CostModel,
    ) -> Self {
        let address_align = granularity.unwrap_or(2 << 20).max(256);
        let first_addr = align_up(base_addr.max(1), address_align).unwrap_or(u64::MAX);
        let end_addr = base_addr.saturating_add(address_space).max(first_addr);
        DeviceLedger {
            capacity,
            granularity,
            address_align,
            first_addr,
            end_addr,
            next_addr: first_addr,
            segments: BTreeMap::new(),
            ranges: BTreeMap::new(),
            counters: DeviceCounters::default(),
            cost,
            faults: FaultPlan::none(),
            calls_since_plan: 0,
            last_physical: UNMAPPED,
            mappings: HashMap::new(),
            page_chunks: HashMap::new(),
        }
    }

    /// The alignment of every address handed out.
    pub(crate) fn address_align(&self) -> u64 {
        self.address_align
    }

    pub(crate) fn counters(&self) -> DeviceCounters {
        self.counters.clone()
    }

    pub(crate) fn set_faults(&mut self, plan: FaultPlan) {
        self.faults = plan;
        self.calls_since_plan = 0;
    }

    pub(crate) fn cost(&self) -> &CostModel {
        &self.cost
    }

    pub(crate) fn add_time(&mut self, ns: u64) {
        self.counters.driver_time_ns = self.counters.driver_time_ns.saturating_add(ns);
    }

    /// Counts a call and fails it if the fault plan says so.
    pub(crate) fn begin(&mut self, call: &'static str, acquires: u64) -> Result<()> {
        self.calls_since_plan += 1;
        if self.faults.fails(self.calls_since_plan, acquires) {
            self.counters.failed_calls += 1;
            return Err(Error::InjectedFault { call, index: self.calls_since_plan });
        }
        Ok(())
    }

    fn invalid(&mut self, call: &'static str, reason: String) -> Error {
        self.counters.failed_calls += 1;
        Error::InvalidBackendCall { call, reason }
    }

    /// Refuses `bytes` more than the device has left.
    fn check_capacity(&mut self, call: &'static str, bytes: u64) -> Result<()> {
        let used = self.counters.used_bytes;
        if bytes > self.capacity - used {
            self.counters.failed_calls += 1;
            return Err(Error::DeviceOutOfMemory { call, requested: bytes, used, capacity: self.capacity });
        }
        Ok(())
    }

    /// Counts `bytes` more in use (checked by [`DeviceLedger::check_capacity`]).
    fn add_used(&mut self, bytes: u64) {
        self.counters.used_bytes += bytes;
        self.counters.peak_used_bytes = self.counters.peak_used_bytes.max(self.counters.used_bytes);
    }

    fn take_capacity(&mut self, call: &'static str, bytes: u64) -> Result<()> {
        self.check_capacity(call, bytes)?;
        self.add_used(bytes);
        Ok(())
    }

    /// The bytes of address space a segment or range of `size` bytes takes: `size` rounded up to the
    /// alignment of addresses, or `None` past the top of the 64-bit space.
    fn address_span(&self, size: u64) -> Option<u64> {
        align_up(size, self.address_align)
    }

    /// An address where `size` bytes of address space are free: the next one while the range has room past
    /// everything handed out, else the lowest stretch free between what is held. O(1), or O(n) in the
    /// segments and ranges held once the range's end was reached.
    fn free_address(&mut self, call: &'static str, size: u64) -> Result<u64> {
        let span = self.address_span(size);
        let fits_at = |addr: u64, end: u64| span.is_some_and(|span| end.saturating_sub(addr) >= span);
        if fits_at(self.next_addr, self.end_addr) {
            return Ok(self.next_addr);
        }
        let mut held: Vec<(u64, u64)> = self.segments.iter().map(|(&addr, &size)| (addr, size)).collect();
        held.extend(self.ranges.iter().map(|(&addr, range)| (addr, range.size)));
        held.sort_unstable();
        let mut from = self.first_addr;
        for (addr, size) in held {
            if fits_at(from, addr) {
                return Ok(from);
            }
            from = from.max(addr.saturating_add(self.address_span(size).unwrap_or(u64::MAX)));
        }
        if fits_at(from, self.end_addr) {
            return Ok(from);
        }
        self.counters.failed_calls += 1;
        Err(Error::AddressSpaceExhausted {
            call,
            requested: size,
            base: self.first_addr,
            space: self.end_addr - self.first_addr,
        })
    }

    /// Takes the address space of `size` bytes at `addr` ([`DeviceLedger::free_address`]).
    fn claim_address(&mut self, addr: u64, size: u64) {
        if addr == self.next_addr {
            self.next_addr += self.address_span(size).expect("a free address has room for the size");
        }
    }

    pub(crate) fn allocate_segment(&mut self, size: u64) -> Result<u64> {
        const CALL: &str = "allocate_segment";
        self.begin(CALL, size)?;
        if size == 0 {
            return Err(self.invalid(CALL, "size 0".into()));
        }
        self.check_capacity(CALL, size)?;
        let addr = self.free_address(CALL, size)?;
        self.add_used(size);
        self.claim_address(addr, size);
        self.segments.insert(addr, size);
        self.counters.segments_allocated += 1;
        self.add_time(self.cost.segment_alloc(size));
        Ok(addr)
    }

    pub(crate) fn free_segment(&mut self, addr: u64, size: u64) -> Result<()> {
        const CALL: &str = "free_segment";
        self.begin(CALL, 0)?;
        match self.segments.get(&addr) {
            Some(&held) if held == size => {}
            Some(&held) => {
                return Err(self.invalid(CALL, format!("segment {addr:#x} has {held} bytes, not {size}")));
            }
            None => return Err(self.invalid(CALL, format!("{addr:#x} is not a segment of this device"))),
        }
        self.segments.remove(&addr);
        self.counters.used_bytes -= size;
        self.counters.segments_freed += 1;
        self.add_time(self.cost.segment_free(size));
        Ok(())
    }

    fn granularity_for(&mut self, call: &'static str) -> Result<u64> {
        match self.granularity {
            Some(g) => Ok(g),
            None => {
                self.counters.failed_calls += 1;
                Err(Error::Unsupported { call, backend: "this device (virtual memory off)".into() })
            }
        }
    }

    fn check_aligned(&mut self, call: &'static str, addr: u64, size: u64, granularity: u64) -> Result<()> {
        if size == 0 || size % granularity != 0 || addr % granularity != 0 {
            return Err(self.invalid(
                call,
                format!("[{addr:#x}, +{size}) is not a non-empty multiple of the {granularity}-byte granularity"),
            ));
        }
        Ok(())
    }

    pub(crate) fn reserve_range(&mut self, size: u64) -> Result<u64> {
        const CALL: &str = "reserve_range";
        let granularity = self.granularity_for(CALL)?;
        self.begin(CALL, 0)?;
        if size == 0 || size % granularity != 0 {
            return Err(self.invalid(CALL, format!("size {size} is not a multiple of {granularity}")));
        }
        let addr = self.free_address(CALL, size)?;
        self.claim_address(addr, size);
        let chunks = (size / granularity) as usize;
        self.ranges.insert(addr, ReservedRange { size, mapped: vec![UNMAPPED; chunks], mapped_chunks: 0 });
        self.counters.ranges_reserved += 1;
        self.add_time(self.cost.reserve_range_ns);
        Ok(addr)
    }

    pub(crate) fn release_range(&mut self, addr: u64, size: u64) -> Result<()> {
        const CALL: &str = "release_range";
        self.granularity_for(CALL)?;
        self.begin(CALL, 0)?;
        match self.ranges.get(&addr) {
            Some(range) if range.size == size && range.mapped_chunks == 0 => {}
            Some(range) if range.size != size => {
                let held = range.size;
                return Err(self.invalid(CALL, format!("range {addr:#x} has {held} bytes, not {size}")));
            }
            Some(range) => {
                let mapped = range.mapped_chunks;
                return Err(self.invalid(CALL, format!("range {addr:#x} still has {mapped} mapped chunks")));
            }
            None => return Err(self.invalid(CALL, format!("{addr:#x} is not a reserved range"))),
        }
        self.ranges.remove(&addr);
        self.counters.ranges_released += 1;
        self.add_time(self.cost.release_range_ns);
        Ok(())
    }

    /// The range holding `[addr, addr + size)` and the index of its first chunk.
    fn locate(&mut self, call: &'static str, addr: u64, size: u64) -> Result<(u64, usize)> {
        let granularity = self.granularity_for(call)?;
        self.check_aligned(call, addr, size, granularity)?;
        let found = self.ranges.range(..=addr).next_back().map(|(&base, range)| (base, range.size));
        match found {
            Some((base, range_size)) if addr - base <= range_size && size <= range_size - (addr - base) => {
                Ok((base, ((addr - base) / granularity) as usize))
            }
            _ => Err(self.invalid(call, format!("[{addr:#x}, +{size}) is not inside one reserved range"))),
        }
    }

    /// Checks that every chunk of `[addr, addr + size)` has the mapped state `expect`.
    fn check_chunks(&mut self, call: &'static str, base: u64, first: usize, count: usize, expect: bool) -> Result<()> {
        let range = &self.ranges[&base];
        if let Some(offset) = range.mapped[first..first + count].iter().position(|&m| (m != UNMAPPED) != expect) {
            let state = if expect { "not mapped" } else { "already mapped" };
            let granularity = self.granularity.unwrap_or(1);
            let chunk = base + (first + offset) as u64 * granularity;
            return Err(self.invalid(call, format!("chunk {chunk:#x} is {state}")));
        }
        Ok(())
    }

    /// The physical chunks mapped at `count` chunks from chunk `first` of the range at `base`.
    fn physical(&self, base: u64, first: usize, count: usize) -> Vec<u64> {
        self.ranges[&base].mapped[first..first + count].to_vec()
    }

    /// Records `physical` (one id per chunk, or [`UNMAPPED`]) as what is mapped from chunk `first` of the
    /// range at `base`.
    fn set_chunks(&mut self, base: u64, first: usize, physical: &[u64]) {
        let range = self.ranges.get_mut(&base).expect("range located before");
        for (slot, &id) in range.mapped[first..first + physical.len()].iter_mut().zip(physical) {
            match (*slot == UNMAPPED, id == UNMAPPED) {
                (true, false) => range.mapped_chunks += 1,
                (false, true) => range.mapped_chunks -= 1,
                _ => {}
            }
            *slot = id;
        }
    }

    /// Counts one more address mapping each of `physical`.
    fn add_mappings(&mut self, physical: &[u64]) {
        for &id in physical {
            *self.mappings.entry(id).or_insert(0) += 1;
        }
    }

    /// The chunks of physical page `id`.
    fn chunks_of(&self, id: u64) -> u32 {
        self.page_chunks.get(&id).copied().unwrap_or(1)
    }

    /// Counts one address fewer mapping each of `physical`; returns the chunks of each page no address maps
    /// any more (their memory goes back to the device).
    fn drop_mappings(&mut self, physical: &[u64]) -> Vec<u64> {
        let mut released = Vec::new();
        for id in physical {
            let count = self.mappings.get_mut(id).expect("a mapped chunk is counted");
            *count -= 1;
            if *count == 0 {
                self.mappings.remove(id);
                released.push(u64::from(self.chunks_of(*id)));
                self.page_chunks.remove(id);
            }
        }
        released
    }

    /// The bytes of each page among `physical` (the ids of consecutive chunks), in order; an error naming
    /// `call` where the chunks do not hold whole pages.
    fn whole_pages(&mut self, call: &'static str, at: u64, physical: &[u64]) -> Result<Vec<u64>> {
        let granularity = self.granularity.unwrap_or(1);
        let mut pages = Vec::new();
        let mut index = 0;
        while index < physical.len() {
            let id = physical[index];
            let chunks = self.chunks_of(id) as usize;
            let whole = physical.get(index..index + chunks).is_some_and(|run| run.iter().all(|&other| other == id));
            if !whole {
                let chunk = at + index as u64 * granularity;
                return Err(self.invalid(call, format!("chunk {chunk:#x} is not the start of a whole page")));
            }
            pages.push(chunks as u64 * granularity);
            index += chunks;
        }
        Ok(pages)
    }

    pub(crate) fn map(&mut self, addr: u64, size: u64) -> Result<()> {
        const CALL: &str = "map";
        let granularity = self.granularity_for(CALL)?;
        self.begin(CALL, size)?;
        // The span is checked against a reserved range before its list of pages is built.
        self.locate(CALL, addr, size)?;
        self.map_begun(addr, size, &vec![granularity; (size / granularity) as usize])
    }

    /// Maps new physical pages of the sizes `pages` gives, one after another from `addr`.
    pub(crate) fn map_pages(&mut self, addr: u64, pages: &[u64]) -> Result<()> {
        const CALL: &str = "map";
        self.granularity_for(CALL)?;
        let size = pages.iter().try_fold(0u64, |sum, &page| sum.checked_add(page)).unwrap_or(u64::MAX);
        self.begin(CALL, size)?;
        self.map_begun(addr, size, pages)
    }

    /// [`DeviceLedger::map_pages`] once the call is counted: `size` is the bytes of `pages`.
    fn map_begun(&mut self, addr: u64, size: u64, pages: &[u64]) -> Result<()> {
        const CALL: &str = "map";
        let granularity = self.granularity_for(CALL)?;
        if let Some(&page) = pages.iter().find(|&&page| page == 0 || page % granularity != 0) {
            return Err(self.invalid(CALL, format!("a page of {page} bytes is not a multiple of {granularity}")));
        }
        let (base, first) = self.locate(CALL, addr, size)?;
        let count = (size / granularity) as usize;
        self.check_chunks(CALL, base, first, count, false)?;
        self.take_capacity(CALL, size)?;
        let mut physical = Vec::with_capacity(count);
        for &page in pages {
            let chunks = (page / granularity) as usize;
            self.last_physical += 1;
            if chunks > 1 {
                self.page_chunks.insert(self.last_physical, chunks as u32);
            }
            physical.extend(std::iter::repeat_n(self.last_physical, chunks));
        }
        self.add_mappings(&physical);
        self.set_chunks(base, first, &physical);
        self.counters.map_calls += 1;
        self.counters.chunks_mapped += count as u64;
        self.add_time(self.cost.batched(pages, CostModel::map, true));
        Ok(())
    }

    pub(crate) fn unmap(&mut self, addr: u64, size: u64) -> Result<()> {
        const CALL: &str = "unmap";
        self.granularity_for(CALL)?;
        self.begin(CALL, 0)?;
        let (base, first) = self.locate(CALL, addr, size)?;
        let count = (size / self.granularity.unwrap_or(1)) as usize;
        self.check_chunks(CALL, base, first, count, true)?;
        let physical = self.physical(base, first, count);
        let pages = self.whole_pages(CALL, addr, &physical)?;
        self.set_chunks(base, first, &vec![UNMAPPED; count]);
        let granularity = self.granularity.unwrap_or(1);
        let released = self.drop_mappings(&physical);
        self.counters.used_bytes -= released.iter().sum::<u64>() * granularity;
        self.counters.unmap_calls += 1;
        self.counters.chunks_unmapped += count as u64;
        // Every page is unmapped; only those no other address maps are released.
        let released_time: u64 = released.iter().map(|&chunks| self.cost.release(1, chunks * granularity)).sum();
        self.add_time(self.cost.batched(&pages, CostModel::unmap_only, false) + released_time);
        Ok(())
    }

    /// Checks a call that gives the chunks mapped at `[from, from + size)` to the unmapped `[to, to + size)`;
    /// returns the ranges and first chunks of both, the chunk count, and the bytes of each page moved.
    fn check_transfer(&mut self, call: &'static str, from: u64, to: u64, size: u64) -> Result<Transfer> {
        self.granularity_for(call)?;
        self.begin(call, 0)?;
        let (from_base, from_first) = self.locate(call, from, size)?;
        let (to_base, to_first) = self.locate(call, to, size)?;
        let count = (size / self.granularity.unwrap_or(1)) as usize;
        self.check_chunks(call, from_base, from_first, count, true)?;
        self.check_chunks(call, to_base, to_first, count, false)?;
        let physical = self.physical(from_base, from_first, count);
        let pages = self.whole_pages(call, from, &physical)?;
        Ok(Transfer { to_base, to_first, from_base, from_first, count, physical, pages })
    }

    pub(crate) fn remap(&mut self, from: u64, to: u64, size: u64) -> Result<()> {
        let t = self.check_transfer("remap", from, to, size)?;
        self.set_chunks(t.from_base, t.from_first, &vec![UNMAPPED; t.count]);
        self.set_chunks(t.to_base, t.to_first, &t.physical);
        self.counters.remap_calls += 1;
        self.counters.chunks_moved += t.count as u64;
        self.add_time(self.cost.batched(&t.pages, CostModel::remap, true));
        Ok(())
    }

    /// Maps the physical chunks mapped at `[from, from + size)` at the unmapped `[to, to + size)` too.
    pub(crate) fn alias(&mut self, from: u64, to: u64, size: u64) -> Result<()> {
        let t = self.check_transfer("alias", from, to, size)?;
        self.add_mappings(&t.physical);
        self.set_chunks(t.to_base, t.to_first, &t.physical);
        self.counters.alias_calls += 1;
        self.counters.chunks_aliased += t.count as u64;
        self.add_time(self.cost.batched(&t.pages, CostModel::alias, true));
        Ok(())
    }

    /// Counts an event call and its modelled time (the call may still fail by fault injection).
    pub(crate) fn event_call(&mut self, call: &'static str, ns: u64) -> Result<()> {
        self.begin(call, 0)?;
        self.add_time(ns);
        Ok(())
    }

    pub(crate) fn count_event_recorded(&mut self) {
        self.counters.events_recorded += 1;
    }

    pub(crate) fn count_event_query(&mut self) {
        self.counters.event_queries += 1;
    }

    pub(crate) fn count_stream_wait(&mut self) {
        self.counters.stream_waits += 1;
    }

    pub(crate) fn count_synchronization(&mut self) {
        self.counters.synchronizations += 1;
    }

    pub(crate) fn count_event_wait(&mut self) {
        self.counters.event_waits += 1;
    }

    pub(crate) fn count_host_blocked(&mut self, ns: u64) {
        self.counters.host_blocked_ns = self.counters.host_blocked_ns.saturating_add(ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> DeviceLedger {
        DeviceLedger::new(64 << 20, Some(2 << 20), 0x1000_0000, 1 << 40, CostModel::default())
    }

    #[test]
    fn segments_are_checked_and_counted() {
        let mut l = ledger();
        let a = l.allocate_segment(1000).unwrap();
        assert_eq!(l.counters().used_bytes, 1000);
        assert!(matches!(l.free_segment(a, 999), Err(Error::InvalidBackendCall { .. })));
        assert!(matches!(l.free_segment(a + 256, 1000), Err(Error::InvalidBackendCall { .. })));
        l.free_segment(a, 1000).unwrap();
        assert!(matches!(l.free_segment(a, 1000), Err(Error::InvalidBackendCall { .. })));
        assert_eq!(l.counters().used_bytes, 0);
        assert!(matches!(l.allocate_segment(65 << 20), Err(Error::DeviceOutOfMemory { .. })));
        assert!(l.counters().driver_time_ns > 0);
    }

    #[test]
    fn mappings_are_checked() {
        let mut l = ledger();
        let g = 2 << 20;
        let r = l.reserve_range(8 * g).unwrap();
        l.map(r, 2 * g).unwrap();
        assert!(l.map(r + g, g).is_err(), "double map");
        assert!(l.unmap(r + 2 * g, g).is_err(), "unmap of unmapped");
        assert!(l.map(r + 7 * g, 2 * g).is_err(), "past the range");
        assert!(l.map(r + 1, g).is_err(), "unaligned");
        l.remap(r, r + 4 * g, g).unwrap();
        assert_eq!(l.counters().used_bytes, 2 * g);
        assert!(l.release_range(r, 8 * g).is_err(), "still mapped");
        l.unmap(r + g, g).unwrap();
        l.unmap(r + 4 * g, g).unwrap();
        l.release_range(r, 8 * g).unwrap();
        assert_eq!(l.counters().used_bytes, 0);
        assert_eq!(l.counters().chunks_moved, 1);
    }

    /// A ledger of `capacity` bytes with addresses in `space` bytes from `base`, virtual memory in 2 MiB
    /// chunks.
    fn ranged(capacity: u64, base: u64, space: u64) -> DeviceLedger {
        DeviceLedger::new(capacity, Some(2 << 20), base, space, CostModel::default())
    }

    #[test]
    fn addresses_stay_in_the_range_and_free_stretches_are_used_again() {
        let g = 2 << 20;
        let mut l = ranged(u64::MAX, 0x4000_0000, 8 * g);
        let a = l.allocate_segment(3 * g).unwrap();
        let b = l.reserve_range(2 * g).unwrap();
        let c = l.allocate_segment(1).unwrap();
        assert_eq!((a, b, c), (0x4000_0000, 0x4000_0000 + 3 * g, 0x4000_0000 + 5 * g));
        // Two chunks are left at the end; three are not.
        let err = l.allocate_segment(2 * g + 1).unwrap_err();
        assert_eq!(
            err,
            Error::AddressSpaceExhausted { call: "allocate_segment", requested: 2 * g + 1, base: a, space: 8 * g }
        );
        assert!(err.is_out_of_memory());
        assert_eq!(l.counters().failed_calls, 1);
        assert_eq!(l.counters().used_bytes, 3 * g + 1, "a refused segment takes no memory");
        let d = l.allocate_segment(2 * g).unwrap();
        assert_eq!(d, 0x4000_0000 + 6 * g);
        assert!(matches!(l.reserve_range(g), Err(Error::AddressSpaceExhausted { call: "reserve_range", .. })));
        // Freed stretches are found again, lowest first.
        l.free_segment(a, 3 * g).unwrap();
        l.release_range(b, 2 * g).unwrap();
        assert_eq!(l.reserve_range(4 * g).unwrap(), a, "the stretch of the first segment and the range");
        assert_eq!(l.allocate_segment(g).unwrap(), a + 4 * g, "what is left of that stretch");
        assert!(l.allocate_segment(1).is_err(), "the range is full");
        l.free_segment(c, 1).unwrap();
        assert_eq!(l.allocate_segment(g).unwrap(), c);
    }

    #[test]
    fn addresses_at_the_extremes_are_refused_never_wrapped() {
        let g = 2 << 20;
        // A range from 0 never hands out 0; one at the top of the 64-bit space is cut at its top.
        let mut from_zero = ranged(u64::MAX, 0, 4 * g);
        assert_eq!(from_zero.allocate_segment(1).unwrap(), g);
        for base in [u64::MAX, u64::MAX - g, 1 << 63, u64::MAX - 4 * g + 1] {
            let mut top = ranged(u64::MAX, base, u64::MAX);
            for size in [1, g, 1 << 63, u64::MAX] {
                match top.allocate_segment(size) {
                    Ok(addr) => {
                        assert!(addr >= base && addr % g == 0 && addr.checked_add(size).is_some(), "{base:#x}");
                        top.free_segment(addr, size).unwrap();
                    }
                    Err(err) => assert!(err.is_out_of_memory(), "{base:#x} {size}: {err}"),
                }
            }
            assert!(top.reserve_range(u64::MAX / g * g).is_err());
        }
        // Sizes at the extremes on a device with all the memory a u64 counts.
        let mut l = ranged(u64::MAX, 0x1000_0000, 1 << 40);
        for size in [0, 1 << 63, u64::MAX, u64::MAX - 1] {
            assert!(l.allocate_segment(size).is_err(), "{size}");
            assert!(l.reserve_range(size).is_err(), "{size}");
        }
        let r = l.reserve_range(4 * g).unwrap();
        for (addr, size) in [(u64::MAX - g + 1, g), (r, u64::MAX - g + 1), (r + g, u64::MAX / g * g), (0, g)] {
            assert!(matches!(l.map(addr, size), Err(Error::InvalidBackendCall { .. })), "{addr:#x} {size}");
            assert!(l.unmap(addr, size).is_err());
            assert!(l.remap(r, addr, size).is_err());
            assert!(l.alias(addr, r, size).is_err());
        }
        assert_eq!(l.counters().used_bytes, 0);
    }

    /// Pages of several sizes: each one physical allocation, moved, aliased and unmapped whole, its memory
    /// given back once no address maps it, and timed per page by the cost model.
    #[test]
    fn pages_of_several_sizes_move_and_go_back_whole() {
        let mut l = ledger();
        let g = 2 << 20;
        let r = l.reserve_range(16 * g).unwrap();
        let reserved = l.counters().driver_time_ns;
        l.map_pages(r, &[4 * g, g, 2 * g]).unwrap();
        assert_eq!((l.counters().used_bytes, l.counters().map_calls), (7 * g, 1));
        let one_call = l.counters().driver_time_ns - reserved;
        let cost = CostModel::default();
        assert_eq!(one_call, cost.map(1, 4 * g) + cost.map(1, g) + cost.map(1, 2 * g) - 2 * cost.set_access_ns);
        assert!(l.unmap(r, 2 * g).is_err(), "half a page");
        assert!(l.remap(r + g, r + 8 * g, g).is_err(), "a page from its middle");
        assert!(l.map_pages(r + 8 * g, &[3 << 20]).is_err(), "a page not of whole chunks");
        l.remap(r, r + 8 * g, 5 * g).unwrap();
        assert_eq!(l.counters().used_bytes, 7 * g, "moved, not released");
        l.alias(r + 8 * g, r, 4 * g).unwrap();
        let before = l.counters().driver_time_ns;
        l.unmap(r, 4 * g).unwrap();
        assert_eq!(l.counters().used_bytes, 7 * g, "still mapped at the alias");
        assert_eq!(l.counters().driver_time_ns - before, cost.unmap_only(1, 4 * g), "nothing released");
        let before = l.counters().driver_time_ns;
        l.unmap(r + 8 * g, 5 * g).unwrap();
        assert_eq!(l.counters().used_bytes, 2 * g);
        assert_eq!(l.counters().driver_time_ns - before, cost.unmap(1, 4 * g) + cost.unmap(1, g));
        l.unmap(r + 5 * g, 2 * g).unwrap();
        l.release_range(r, 16 * g).unwrap();
        assert_eq!(l.counters().used_bytes, 0);
    }

    #[test]
    fn faults_fire_on_the_planned_call() {
        let mut l = ledger();
        l.set_faults(FaultPlan::fail_call(2));
        let a = l.allocate_segment(256).unwrap();
        assert!(matches!(l.allocate_segment(256), Err(Error::InjectedFault { index: 2, .. })));
        assert_eq!(l.counters().used_bytes, 256);
        l.free_segment(a, 256).unwrap();
        l.set_faults(FaultPlan::fail_above(1024));
        assert!(l.allocate_segment(2048).is_err());
        assert!(l.allocate_segment(1024).is_ok());
    }
}
