//! Backends: what a strategy needs from a device, and the devices that need no GPU.
//!
//! A backend hands out address ranges and takes them back; it never decides policy. Two kinds of memory:
//!
//! - **segments**: one contiguous allocation each (`cuMemAlloc` on CUDA), freed whole;
//! - **virtual memory** (where [`Backend::granularity`] is `Some`): an address range reserved once, inside
//!   which physical memory is mapped and unmapped in granularity-sized chunks, so a region can grow in place.
//!
//! Streams are ordered by events: [`Backend::record_event`] marks the point a stream has reached,
//! [`Backend::stream_wait_event`] orders another stream after it without blocking the host.

mod cost_model;
mod device_ledger;
mod driver_clock;
mod fault_plan;
mod host_memory;
mod sim_device;
mod sim_events;

pub use crate::counters::DeviceCounters;
pub use cost_model::CostModel;
pub use driver_clock::DriverClock;
pub use fault_plan::FaultPlan;
pub use host_memory::{HOST_ADDRESS_SPACE, HostMemory, HostMemoryConfig, POISON};
pub use sim_device::{SIM_ADDRESS_SPACE, SimDevice, SimDeviceConfig};

use crate::error::{Error, Result};
use crate::stream::StreamId;

/// An address in a device's address space.
pub type DeviceAddr = u64;

/// A recorded event: the point a stream had reached when it was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventId(pub u64);

/// What a pool needs from a device.
///
/// Contract for callers: sizes and addresses passed to the virtual-memory calls are multiples of
/// [`Backend::granularity`]; a range unmapped, moved or aliased holds whole pages as they were mapped
/// ([`Backend::map_pages`]); a range is unmapped or moved only when no device work still uses it (the pool
/// waits first, for the event that ends its last use or for the whole device); every segment, mapping and range is returned exactly once.
/// Implementations check what they cheaply can and answer a broken contract with
/// [`Error::InvalidBackendCall`].
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// A short name for messages and reports (`sim`, `host`, `cuda:0`).
    fn name(&self) -> String;

    /// Total device memory in bytes.
    fn capacity(&self) -> u64;

    /// The alignment every segment's address has (at least 256 bytes).
    fn segment_alignment(&self) -> u64 {
        256
    }

    /// The unit the device rounds each segment's size up to: a segment of `size` bytes takes `size`
    /// rounded up to a multiple of it (`cuMemAlloc` hands out whole 2 MiB pages). Pools ask for whole
    /// units, so the bytes they count as reserved are the bytes the device holds. Default: 1 (exact); 0 is
    /// taken as 1.
    fn segment_unit(&self) -> u64 {
        1
    }

    /// Allocates one contiguous segment of `size` bytes.
    fn allocate_segment(&self, size: u64) -> Result<DeviceAddr>;

    /// Frees a segment that [`Backend::allocate_segment`] returned, with the size it was allocated with.
    fn free_segment(&self, addr: DeviceAddr, size: u64) -> Result<()>;

    /// The virtual-memory granularity in bytes, or `None` where the device has no virtual memory.
    fn granularity(&self) -> Option<u64> {
        None
    }

    /// Reserves `size` bytes of address space, backed by nothing yet.
    fn reserve_range(&self, size: u64) -> Result<DeviceAddr> {
        let _ = size;
        Err(self.unsupported("reserve_range"))
    }

    /// Releases a reserved range; everything in it must be unmapped first.
    fn release_range(&self, addr: DeviceAddr, size: u64) -> Result<()> {
        let _ = (addr, size);
        Err(self.unsupported("release_range"))
    }

    /// Creates physical memory for `[addr, addr + size)` inside a reserved range and maps it there, in one
    /// batch (one access-rights call for the whole range).
    fn map(&self, addr: DeviceAddr, size: u64) -> Result<()> {
        let _ = (addr, size);
        Err(self.unsupported("map"))
    }

    /// How the device's memory calls are timed, for a pool that bounds the time of its optional device work
    /// ([`DriverClock`]). Default: [`DriverClock::Untimed`].
    fn driver_clock(&self) -> DriverClock {
        DriverClock::Untimed
    }

    /// Whether [`Backend::map_pages`] takes pages larger than the granularity.
    fn supports_large_pages(&self) -> bool {
        false
    }

    /// Creates physical pages of the sizes `pages` gives (each a multiple of the granularity) and maps them
    /// one after another from `addr`, inside a reserved range, in one batch (one access-rights call for
    /// the whole span). Each page is one physical allocation, unmapped, moved and aliased whole; larger
    /// pages cost fewer driver calls for the same memory. Default: [`Backend::map`] where every page is of
    /// the granularity, else [`Error::Unsupported`].
    fn map_pages(&self, addr: DeviceAddr, pages: &[u64]) -> Result<()> {
        match self.granularity() {
            Some(granularity) if pages.iter().all(|&page| page == granularity) => {
                self.map(addr, granularity * pages.len() as u64)
            }
            _ => Err(self.unsupported("map_pages")),
        }
    }

    /// Unmaps `[addr, addr + size)`; the physical memory no other address maps goes back to the device.
    fn unmap(&self, addr: DeviceAddr, size: u64) -> Result<()> {
        let _ = (addr, size);
        Err(self.unsupported("unmap"))
    }

    /// Moves the physical memory mapped at `[from, from + size)` to the unmapped `[to, to + size)` without
    /// giving it back to the device. What the memory held is not kept.
    fn remap(&self, from: DeviceAddr, to: DeviceAddr, size: u64) -> Result<()> {
        let _ = (from, to, size);
        Err(self.unsupported("remap"))
    }

    /// Whether [`Backend::alias`] is supported.
    fn supports_alias(&self) -> bool {
        false
    }

    /// Maps the physical memory mapped at `[from, from + size)` at the unmapped `[to, to + size)` as well,
    /// leaving it mapped at `from`: both addresses reach the same bytes until one of them is unmapped, and
    /// the memory goes back to the device once neither maps it. Costs no new device memory.
    fn alias(&self, from: DeviceAddr, to: DeviceAddr, size: u64) -> Result<()> {
        let _ = (from, to, size);
        Err(self.unsupported("alias"))
    }

    /// Records an event on `stream`: it completes once the work queued on the stream so far has run.
    fn record_event(&self, stream: StreamId) -> Result<EventId>;

    /// Whether the event has completed (never blocks).
    fn event_complete(&self, event: EventId) -> Result<bool>;

    /// Makes `stream` wait for the event before running work queued after this call (never blocks the host).
    fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<()>;

    /// Gives an event back; the id is not used again.
    fn release_event(&self, event: EventId);

    /// Blocks the host until the event has completed: the work queued on its stream before it has run,
    /// while later work keeps the device busy. Default: waits for the whole device
    /// ([`Backend::synchronize`]), which implies it.
    fn wait_event(&self, event: EventId) -> Result<()> {
        let _ = event;
        self.synchronize()
    }

    /// Blocks until all work on the device has completed.
    fn synchronize(&self) -> Result<()>;

    /// The error for a call this backend does not offer.
    fn unsupported(&self, call: &'static str) -> Error {
        Error::Unsupported { call, backend: self.name() }
    }
}
