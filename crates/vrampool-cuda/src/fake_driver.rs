//! A simulated driver for tests: allocations, physical handles, mappings, access, events, streams and
//! bytes, with the checks the real driver makes (stricter where that catches a backend bug), planted
//! failures, and a call log. It lets the backends' bookkeeping run in CI on a machine without a GPU.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::CudaContext;
use parking_lot::Mutex;

use crate::driver::{DeviceAttribute, DeviceQuery, Driver, DriverResult};
use crate::error::{
    CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY,
    CudaError,
};

/// `CUDA_ERROR_ILLEGAL_ADDRESS`: device memory touched where nothing is mapped with access.
const CUDA_ERROR_ILLEGAL_ADDRESS: u32 = 700;

/// What unwritten device memory reads as.
pub(crate) const FAKE_POISON: u8 = 0xA5;

static NEXT_FAKE: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The fake driver whose context is current on this thread (0: none), as `cuCtxSetCurrent` would.
    static CURRENT: Cell<u64> = const { Cell::new(0) };
}

fn failure(call: &'static str, code: u32) -> CudaError {
    let name = match code {
        CUDA_ERROR_INVALID_VALUE => "CUDA_ERROR_INVALID_VALUE",
        CUDA_ERROR_OUT_OF_MEMORY => "CUDA_ERROR_OUT_OF_MEMORY",
        CUDA_ERROR_INVALID_CONTEXT => "CUDA_ERROR_INVALID_CONTEXT",
        CUDA_ERROR_INVALID_HANDLE => "CUDA_ERROR_INVALID_HANDLE",
        CUDA_ERROR_ILLEGAL_ADDRESS => "CUDA_ERROR_ILLEGAL_ADDRESS",
        _ => "CUDA_ERROR_UNKNOWN",
    };
    CudaError::Call { call, code, name: name.into() }
}

/// How a fake device is set up.
#[derive(Clone, Debug)]
pub(crate) struct FakeConfig {
    pub(crate) ordinal: usize,
    pub(crate) capacity: u64,
    pub(crate) granularity: u64,
    pub(crate) virtual_memory: bool,
}

impl Default for FakeConfig {
    fn default() -> Self {
        FakeConfig { ordinal: 0, capacity: 1 << 30, granularity: 2 << 20, virtual_memory: true }
    }
}

/// Device bytes, allocated on first write (unwritten bytes read as [`FAKE_POISON`]).
#[derive(Debug)]
struct Bytes {
    size: u64,
    data: Vec<u8>,
}

impl Bytes {
    fn new(size: u64) -> Self {
        Bytes { size, data: Vec::new() }
    }

    fn read(&self, offset: usize, out: &mut Vec<u8>, n: usize) {
        if self.data.is_empty() {
            out.extend(std::iter::repeat_n(FAKE_POISON, n));
        } else {
            out.extend_from_slice(&self.data[offset..offset + n]);
        }
    }

    fn write(&mut self, offset: usize, bytes: &[u8]) {
        if self.data.is_empty() {
            self.data = vec![FAKE_POISON; self.size as usize];
        }
        self.data[offset..offset + bytes.len()].copy_from_slice(bytes);
    }
}

/// One physical handle.
#[derive(Debug)]
struct FakeHandle {
    size: u64,
    released: bool,
    mappings: u32,
    bytes: Bytes,
}

/// One event.
#[derive(Debug)]
struct FakeEvent {
    stream: Option<u64>,
    complete: bool,
}

/// A failure planted on the `skip + 1`-th next call of `call`.
#[derive(Debug)]
struct Fault {
    call: &'static str,
    skip: u64,
    code: u32,
}

#[derive(Debug, Default)]
struct FakeState {
    next_addr: u64,
    next_handle: u64,
    next_event: u64,
    next_stream: u64,
    used: u64,
    /// `cuMemAlloc` and `cuMemAllocAsync` memory: address → bytes.
    allocations: BTreeMap<u64, Bytes>,
    reservations: BTreeMap<u64, u64>,
    handles: BTreeMap<u64, FakeHandle>,
    /// Mappings: address → (bytes, handle).
    mappings: BTreeMap<u64, (u64, u64)>,
    /// Mapping addresses with read/write access.
    access: BTreeSet<u64>,
    events: BTreeMap<u64, FakeEvent>,
    streams: BTreeSet<u64>,
    busy: BTreeSet<u64>,
    waits: Vec<(u64, u64)>,
    calls: Vec<&'static str>,
    faults: Vec<Fault>,
    default_pool_kept: bool,
}

/// Where a device address lives in the fake.
enum Storage {
    Allocation(u64),
    Handle(u64),
}

/// The simulated driver of one device.
#[derive(Debug)]
pub(crate) struct FakeDriver {
    id: u64,
    config: FakeConfig,
    state: Mutex<FakeState>,
}

impl FakeDriver {
    pub(crate) fn new(config: FakeConfig) -> Arc<FakeDriver> {
        let state = FakeState {
            next_addr: 0x7000_0000_0000 + config.ordinal as u64 * 0x0100_0000_0000,
            next_handle: 1,
            next_event: 0xE000,
            next_stream: 0x5000,
            ..FakeState::default()
        };
        Arc::new(FakeDriver { id: NEXT_FAKE.fetch_add(1, Ordering::Relaxed), config, state: Mutex::new(state) })
    }

    /// A fake with the default setup (1 GiB, 2 MiB granularity, virtual memory).
    pub(crate) fn standard() -> Arc<FakeDriver> {
        Self::new(FakeConfig::default())
    }

    /// Makes the `skip + 1`-th next call of `call` fail with `code`.
    pub(crate) fn fail(&self, call: &'static str, skip: u64, code: u32) {
        self.state.lock().faults.push(Fault { call, skip, code });
    }

    /// How many times `call` was made (failed calls included).
    pub(crate) fn count(&self, call: &str) -> usize {
        self.state.lock().calls.iter().filter(|&&c| c == call).count()
    }

    /// The calls made so far, in order.
    pub(crate) fn calls(&self) -> Vec<&'static str> {
        self.state.lock().calls.clone()
    }

    /// Forgets the call log.
    pub(crate) fn clear_calls(&self) {
        self.state.lock().calls.clear();
    }

    /// Device memory in use (allocations and live handles).
    pub(crate) fn used(&self) -> u64 {
        self.state.lock().used
    }

    /// Live handles (created and not yet given back).
    pub(crate) fn live_handles(&self) -> usize {
        self.state.lock().handles.len()
    }

    /// Mappings now.
    pub(crate) fn mapping_count(&self) -> usize {
        self.state.lock().mappings.len()
    }

    /// The handle mapped at `addr`.
    pub(crate) fn handle_at(&self, addr: u64) -> Option<u64> {
        self.state.lock().mappings.get(&addr).map(|&(_, handle)| handle)
    }

    /// Whether the mapping at `addr` has access.
    pub(crate) fn has_access(&self, addr: u64) -> bool {
        self.state.lock().access.contains(&addr)
    }

    /// Reserved ranges now.
    pub(crate) fn reservation_count(&self) -> usize {
        self.state.lock().reservations.len()
    }

    /// Allocations (`cuMemAlloc` and `cuMemAllocAsync`) now.
    pub(crate) fn allocation_count(&self) -> usize {
        self.state.lock().allocations.len()
    }

    /// Events created and not destroyed.
    pub(crate) fn event_count(&self) -> usize {
        self.state.lock().events.len()
    }

    /// The stream an event was last recorded on.
    pub(crate) fn event_stream(&self, event: u64) -> Option<u64> {
        self.state.lock().events.get(&event).and_then(|e| e.stream)
    }

    /// Every `(stream, event)` wait, in order.
    pub(crate) fn waits(&self) -> Vec<(u64, u64)> {
        self.state.lock().waits.clone()
    }

    /// Keeps events recorded on `stream` from now on incomplete until [`FakeDriver::finish_stream`].
    pub(crate) fn hold_stream(&self, stream: u64) {
        self.state.lock().busy.insert(stream);
    }

    /// Completes every event recorded on `stream`.
    pub(crate) fn finish_stream(&self, stream: u64) {
        let mut state = self.state.lock();
        state.busy.remove(&stream);
        state.events.values_mut().filter(|e| e.stream == Some(stream)).for_each(|e| e.complete = true);
    }

    /// Whether the default pool's release threshold was raised.
    pub(crate) fn default_pool_kept(&self) -> bool {
        self.state.lock().default_pool_kept
    }

    /// The common start of every call: the context must be current, the call is logged, and a planted
    /// failure fires.
    fn enter(&self, state: &mut FakeState, call: &'static str) -> DriverResult<()> {
        state.calls.push(call);
        if CURRENT.with(Cell::get) != self.id {
            return Err(failure(call, CUDA_ERROR_INVALID_CONTEXT));
        }
        if let Some(index) = state.faults.iter().position(|f| f.call == call) {
            if state.faults[index].skip == 0 {
                let fault = state.faults.remove(index);
                return Err(failure(call, fault.code));
            }
            state.faults[index].skip -= 1;
        }
        Ok(())
    }

    fn take_address(&self, state: &mut FakeState, size: u64) -> u64 {
        let g = self.config.granularity;
        let addr = state.next_addr;
        state.next_addr += size.div_ceil(g).max(1) * g + g;
        addr
    }

    fn take_memory(&self, state: &mut FakeState, call: &'static str, size: u64) -> DriverResult<()> {
        if size == 0 {
            return Err(failure(call, CUDA_ERROR_INVALID_VALUE));
        }
        if size > self.config.capacity - state.used {
            return Err(failure(call, CUDA_ERROR_OUT_OF_MEMORY));
        }
        state.used += size;
        Ok(())
    }

    fn check_stream(state: &FakeState, call: &'static str, stream: u64) -> DriverResult<()> {
        if stream <= 2 || state.streams.contains(&stream) {
            Ok(())
        } else {
            Err(failure(call, CUDA_ERROR_INVALID_HANDLE))
        }
    }

    /// Drops a handle that is released and mapped nowhere.
    fn collect_handle(state: &mut FakeState, handle: u64) {
        if let Some(h) = state.handles.get(&handle)
            && h.released
            && h.mappings == 0
        {
            let size = h.size;
            state.handles.remove(&handle);
            state.used -= size;
        }
    }

    /// Where `addr` lives, its offset there, and the bytes left in that piece.
    fn locate(state: &FakeState, addr: u64) -> Option<(Storage, usize, u64)> {
        if let Some((&base, bytes)) = state.allocations.range(..=addr).next_back()
            && addr < base + bytes.size
        {
            return Some((Storage::Allocation(base), (addr - base) as usize, base + bytes.size - addr));
        }
        if let Some((&base, &(size, handle))) = state.mappings.range(..=addr).next_back()
            && addr < base + size
            && state.access.contains(&base)
        {
            return Some((Storage::Handle(handle), (addr - base) as usize, base + size - addr));
        }
        None
    }

    fn piece<'s>(state: &'s mut FakeState, storage: &Storage) -> &'s mut Bytes {
        match *storage {
            Storage::Allocation(base) => state.allocations.get_mut(&base).expect("located"),
            Storage::Handle(handle) => &mut state.handles.get_mut(&handle).expect("located").bytes,
        }
    }

    /// Reads `len` bytes at `addr`.
    fn read(state: &mut FakeState, call: &'static str, mut addr: u64, len: u64) -> DriverResult<Vec<u8>> {
        let mut out = Vec::with_capacity(len as usize);
        while (out.len() as u64) < len {
            let (storage, offset, left) = Self::locate(state, addr).ok_or(failure(call, CUDA_ERROR_ILLEGAL_ADDRESS))?;
            let n = left.min(len - out.len() as u64) as usize;
            Self::piece(state, &storage).read(offset, &mut out, n);
            addr += n as u64;
        }
        Ok(out)
    }

    /// Writes `bytes` at `addr`.
    fn write(state: &mut FakeState, call: &'static str, mut addr: u64, mut bytes: &[u8]) -> DriverResult<()> {
        // Check the whole range first, so a failed write changes nothing.
        Self::read(state, call, addr, bytes.len() as u64)?;
        while !bytes.is_empty() {
            let (storage, offset, left) = Self::locate(state, addr).ok_or(failure(call, CUDA_ERROR_ILLEGAL_ADDRESS))?;
            let n = (left as usize).min(bytes.len());
            Self::piece(state, &storage).write(offset, &bytes[..n]);
            addr += n as u64;
            bytes = &bytes[n..];
        }
        Ok(())
    }

    fn allocate(&self, call: &'static str, size: u64) -> DriverResult<u64> {
        let mut state = self.state.lock();
        self.enter(&mut state, call)?;
        self.take_memory(&mut state, call, size)?;
        let addr = self.take_address(&mut state, size);
        state.allocations.insert(addr, Bytes::new(size));
        Ok(addr)
    }

    fn free(&self, call: &'static str, ptr: u64) -> DriverResult<()> {
        let mut state = self.state.lock();
        self.enter(&mut state, call)?;
        let bytes = state.allocations.remove(&ptr).ok_or(failure(call, CUDA_ERROR_INVALID_VALUE))?;
        state.used -= bytes.size;
        Ok(())
    }
}

impl Driver for FakeDriver {
    fn ordinal(&self) -> usize {
        self.config.ordinal
    }

    fn context(&self) -> Option<&Arc<CudaContext>> {
        None
    }

    fn bind(&self) -> DriverResult<()> {
        let mut state = self.state.lock();
        CURRENT.with(|current| current.set(self.id));
        self.enter(&mut state, "cuCtxSetCurrent")
    }

    fn total_memory(&self) -> DriverResult<u64> {
        Ok(self.config.capacity)
    }

    fn memory_info(&self) -> DriverResult<(u64, u64)> {
        let mut state = self.state.lock();
        self.enter(&mut state, "cuMemGetInfo")?;
        Ok((self.config.capacity - state.used, self.config.capacity))
    }

    fn virtual_memory_supported(&self) -> DriverResult<bool> {
        Ok(self.config.virtual_memory)
    }

    fn granularity(&self) -> DriverResult<u64> {
        Ok(self.config.granularity)
    }

    fn mem_alloc(&self, size: u64) -> DriverResult<u64> {
        self.allocate("cuMemAlloc", size)
    }

    unsafe fn mem_free(&self, ptr: u64) -> DriverResult<()> {
        self.free("cuMemFree", ptr)
    }

    fn address_reserve(&self, size: u64) -> DriverResult<u64> {
        const CALL: &str = "cuMemAddressReserve";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        if size == 0 || size % self.config.granularity != 0 {
            return Err(failure(CALL, CUDA_ERROR_INVALID_VALUE));
        }
        let addr = self.take_address(&mut state, size);
        state.reservations.insert(addr, size);
        Ok(addr)
    }

    unsafe fn address_free(&self, ptr: u64, size: u64) -> DriverResult<()> {
        const CALL: &str = "cuMemAddressFree";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        if state.reservations.get(&ptr) != Some(&size) || state.mappings.range(ptr..ptr + size).next().is_some() {
            return Err(failure(CALL, CUDA_ERROR_INVALID_VALUE));
        }
        state.reservations.remove(&ptr);
        Ok(())
    }

    fn mem_create(&self, size: u64) -> DriverResult<u64> {
        const CALL: &str = "cuMemCreate";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        if size % self.config.granularity != 0 {
            return Err(failure(CALL, CUDA_ERROR_INVALID_VALUE));
        }
        self.take_memory(&mut state, CALL, size)?;
        let handle = state.next_handle;
        state.next_handle += 1;
        state.handles.insert(handle, FakeHandle { size, released: false, mappings: 0, bytes: Bytes::new(size) });
        Ok(handle)
    }

    unsafe fn mem_release(&self, handle: u64) -> DriverResult<()> {
        const CALL: &str = "cuMemRelease";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        match state.handles.get_mut(&handle) {
            Some(h) if !h.released => h.released = true,
            _ => return Err(failure(CALL, CUDA_ERROR_INVALID_VALUE)),
        }
        Self::collect_handle(&mut state, handle);
        Ok(())
    }

    unsafe fn mem_map(&self, ptr: u64, size: u64, handle: u64) -> DriverResult<()> {
        const CALL: &str = "cuMemMap";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        let reserved = state.reservations.range(..=ptr).next_back().is_some_and(|(&b, &s)| ptr + size <= b + s);
        let overlaps = state.mappings.range(..ptr + size).next_back().is_some_and(|(&b, &(s, _))| b + s > ptr);
        let fits = state.handles.get(&handle).is_some_and(|h| !h.released && h.size == size);
        if !reserved || overlaps || !fits {
            return Err(failure(CALL, CUDA_ERROR_INVALID_VALUE));
        }
        state.handles.get_mut(&handle).expect("checked").mappings += 1;
        state.mappings.insert(ptr, (size, handle));
        Ok(())
    }

    unsafe fn mem_unmap(&self, ptr: u64, size: u64) -> DriverResult<()> {
        const CALL: &str = "cuMemUnmap";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        let handle = match state.mappings.get(&ptr) {
            Some(&(s, handle)) if s == size => handle,
            _ => return Err(failure(CALL, CUDA_ERROR_INVALID_VALUE)),
        };
        state.mappings.remove(&ptr);
        state.access.remove(&ptr);
        state.handles.get_mut(&handle).expect("mapped handles are live").mappings -= 1;
        Self::collect_handle(&mut state, handle);
        Ok(())
    }

    unsafe fn set_access(&self, ptr: u64, size: u64) -> DriverResult<()> {
        const CALL: &str = "cuMemSetAccess";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        let mut at = ptr;
        let mut covered = Vec::new();
        while at < ptr + size {
            match state.mappings.get(&at) {
                Some(&(s, _)) => {
                    covered.push(at);
                    at += s;
                }
                None => return Err(failure(CALL, CUDA_ERROR_INVALID_VALUE)),
            }
        }
        if at != ptr + size {
            return Err(failure(CALL, CUDA_ERROR_INVALID_VALUE));
        }
        state.access.extend(covered);
        Ok(())
    }

    fn event_create(&self) -> DriverResult<u64> {
        let mut state = self.state.lock();
        self.enter(&mut state, "cuEventCreate")?;
        state.next_event += 0x10;
        let event = state.next_event;
        state.events.insert(event, FakeEvent { stream: None, complete: true });
        Ok(event)
    }

    unsafe fn event_destroy(&self, event: u64) -> DriverResult<()> {
        const CALL: &str = "cuEventDestroy";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        state.events.remove(&event).map(|_| ()).ok_or(failure(CALL, CUDA_ERROR_INVALID_HANDLE))
    }

    unsafe fn event_record(&self, event: u64, stream: u64) -> DriverResult<()> {
        const CALL: &str = "cuEventRecord";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        Self::check_stream(&state, CALL, stream)?;
        let complete = !state.busy.contains(&stream);
        let e = state.events.get_mut(&event).ok_or(failure(CALL, CUDA_ERROR_INVALID_HANDLE))?;
        *e = FakeEvent { stream: Some(stream), complete };
        Ok(())
    }

    unsafe fn event_query(&self, event: u64) -> DriverResult<bool> {
        const CALL: &str = "cuEventQuery";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        state.events.get(&event).map(|e| e.complete).ok_or(failure(CALL, CUDA_ERROR_INVALID_HANDLE))
    }

    unsafe fn event_synchronize(&self, event: u64) -> DriverResult<()> {
        const CALL: &str = "cuEventSynchronize";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        let waited = state.events.get(&event).ok_or(failure(CALL, CUDA_ERROR_INVALID_HANDLE))?;
        // The host waits for the stream's work: a held stream's long work ends.
        if let Some(stream) = waited.stream {
            state.busy.remove(&stream);
            state.events.values_mut().filter(|e| e.stream == Some(stream)).for_each(|e| e.complete = true);
        }
        Ok(())
    }

    unsafe fn stream_wait_event(&self, stream: u64, event: u64) -> DriverResult<()> {
        const CALL: &str = "cuStreamWaitEvent";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        Self::check_stream(&state, CALL, stream)?;
        if !state.events.contains_key(&event) {
            return Err(failure(CALL, CUDA_ERROR_INVALID_HANDLE));
        }
        state.waits.push((stream, event));
        Ok(())
    }

    fn stream_create(&self) -> DriverResult<u64> {
        let mut state = self.state.lock();
        self.enter(&mut state, "cuStreamCreate")?;
        state.next_stream += 0x10;
        let stream = state.next_stream;
        state.streams.insert(stream);
        Ok(stream)
    }

    unsafe fn stream_destroy(&self, stream: u64) -> DriverResult<()> {
        const CALL: &str = "cuStreamDestroy";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        if state.streams.remove(&stream) { Ok(()) } else { Err(failure(CALL, CUDA_ERROR_INVALID_HANDLE)) }
    }

    unsafe fn stream_synchronize(&self, stream: u64) -> DriverResult<()> {
        const CALL: &str = "cuStreamSynchronize";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        Self::check_stream(&state, CALL, stream)
    }

    fn ctx_synchronize(&self) -> DriverResult<()> {
        let mut state = self.state.lock();
        self.enter(&mut state, "cuCtxSynchronize")?;
        state.busy.clear();
        state.events.values_mut().for_each(|e| e.complete = true);
        Ok(())
    }

    unsafe fn memcpy_htod(&self, dst: u64, src: &[u8], stream: u64) -> DriverResult<()> {
        const CALL: &str = "cuMemcpyHtoDAsync";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        Self::check_stream(&state, CALL, stream)?;
        Self::write(&mut state, CALL, dst, src)
    }

    unsafe fn memcpy_dtoh(&self, dst: &mut [u8], src: u64, stream: u64) -> DriverResult<()> {
        const CALL: &str = "cuMemcpyDtoHAsync";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        Self::check_stream(&state, CALL, stream)?;
        dst.copy_from_slice(&Self::read(&mut state, CALL, src, dst.len() as u64)?);
        Ok(())
    }

    unsafe fn memcpy_dtod(&self, dst: u64, src: u64, len: u64, stream: u64) -> DriverResult<()> {
        const CALL: &str = "cuMemcpyDtoDAsync";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        Self::check_stream(&state, CALL, stream)?;
        let bytes = Self::read(&mut state, CALL, src, len)?;
        Self::write(&mut state, CALL, dst, &bytes)
    }

    unsafe fn memset_d8(&self, dst: u64, value: u8, len: u64, stream: u64) -> DriverResult<()> {
        const CALL: &str = "cuMemsetD8Async";
        let mut state = self.state.lock();
        self.enter(&mut state, CALL)?;
        Self::check_stream(&state, CALL, stream)?;
        Self::write(&mut state, CALL, dst, &vec![value; len as usize])
    }

    unsafe fn mem_alloc_async(&self, size: u64, stream: u64) -> DriverResult<u64> {
        Self::check_stream(&self.state.lock(), "cuMemAllocAsync", stream)?;
        self.allocate("cuMemAllocAsync", size)
    }

    unsafe fn mem_free_async(&self, ptr: u64, stream: u64) -> DriverResult<()> {
        Self::check_stream(&self.state.lock(), "cuMemFreeAsync", stream)?;
        self.free("cuMemFreeAsync", ptr)
    }

    fn keep_default_pool_memory(&self) -> DriverResult<()> {
        let mut state = self.state.lock();
        self.enter(&mut state, "cuMemPoolSetAttribute")?;
        state.default_pool_kept = true;
        Ok(())
    }
}

/// A fake driver library with some devices.
pub(crate) struct FakeLibrary {
    pub(crate) devices: Vec<(String, FakeConfig, bool)>,
}

impl DeviceQuery for FakeLibrary {
    fn device_count(&self) -> DriverResult<usize> {
        Ok(self.devices.len())
    }

    fn device_name(&self, ordinal: usize) -> DriverResult<String> {
        self.devices.get(ordinal).map(|d| d.0.clone()).ok_or(failure("cuDeviceGet", CUDA_ERROR_INVALID_VALUE))
    }

    fn device_total_memory(&self, ordinal: usize) -> DriverResult<u64> {
        self.devices.get(ordinal).map(|d| d.1.capacity).ok_or(failure("cuDeviceGet", CUDA_ERROR_INVALID_VALUE))
    }

    fn device_attribute(&self, ordinal: usize, attribute: DeviceAttribute) -> DriverResult<i32> {
        let device = self.devices.get(ordinal).ok_or(failure("cuDeviceGet", CUDA_ERROR_INVALID_VALUE))?;
        Ok(match attribute {
            DeviceAttribute::VirtualMemorySupported => i32::from(device.1.virtual_memory),
            DeviceAttribute::MemoryPoolsSupported => i32::from(device.2),
        })
    }

    fn device_granularity(&self, ordinal: usize) -> DriverResult<u64> {
        self.devices.get(ordinal).map(|d| d.1.granularity).ok_or(failure("cuDeviceGet", CUDA_ERROR_INVALID_VALUE))
    }
}
