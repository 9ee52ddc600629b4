//! Device memory as plain `cuMemAlloc` segments.

use std::sync::Arc;

use vrampool::{Backend, DeviceAddr, DriverClock};

use crate::context::{DeviceContext, forward_to_context};
use crate::driver::{CudaDriver, Driver};
use crate::error::CudaError;
use crate::library::CudaLibrary;
use crate::segment_table::{MEM_ALLOC_PAGE, SegmentTable};
use crate::transfer::impl_cuda_memory;

/// A CUDA device whose memory comes in `cuMemAlloc` segments, freed whole with `cuMemFree`; no virtual
/// memory ([`Backend::granularity`] is `None`).
///
/// It retains the device's primary context and makes it current on the calling thread before each
/// driver call, so pools on it can be used from any thread. Its capacity is the device's total memory.
/// Streams pools use on it must be registered first ([`crate::CudaMemory::register_stream`]); stream 0,
/// the legacy default stream, always works. Dropping it frees every segment still held.
#[derive(Debug)]
pub struct CudaDevice {
    context: DeviceContext,
    segments: SegmentTable,
}

impl CudaDevice {
    /// The backend for device `ordinal`; an error (never a panic) where the driver library is missing,
    /// the device does not exist or its context cannot be retained.
    pub fn new(ordinal: usize) -> Result<Self, CudaError> {
        let library = CudaLibrary::load()?;
        let driver = CudaDriver::open(&library, ordinal)?;
        Self::with_driver(Arc::new(driver))
    }

    /// The backend over any driver (the real one, or a simulated one in tests).
    pub(crate) fn with_driver(driver: Arc<dyn Driver>) -> Result<Self, CudaError> {
        let name = format!("cuda:{}", driver.ordinal());
        Ok(CudaDevice { context: DeviceContext::new(driver, name)?, segments: SegmentTable::default() })
    }

    /// Segments held now.
    pub fn segment_count(&self) -> usize {
        self.segments.count()
    }

    /// Bytes held in segments now.
    pub fn held_bytes(&self) -> u64 {
        self.segments.bytes()
    }

    /// Whether `[addr, addr + len)` lies inside a segment held now.
    pub fn holds(&self, addr: u64, len: u64) -> bool {
        self.segments.holds(addr, len)
    }
}

impl Backend for CudaDevice {
    fn driver_clock(&self) -> DriverClock {
        DriverClock::Wall
    }

    fn segment_unit(&self) -> u64 {
        MEM_ALLOC_PAGE
    }

    fn allocate_segment(&self, size: u64) -> vrampool::Result<DeviceAddr> {
        self.segments.allocate(&self.context, size, 0)
    }

    fn free_segment(&self, addr: DeviceAddr, size: u64) -> vrampool::Result<()> {
        self.segments.free(&self.context, addr, size)
    }

    forward_to_context!();
}

impl_cuda_memory!(CudaDevice);

impl Drop for CudaDevice {
    /// Waits for the device and frees every segment still held; the context then destroys its events.
    /// Driver errors are dropped: a drop has no caller to give them to, and must not panic.
    fn drop(&mut self) {
        if self.context.bind().is_ok() {
            let _ = self.context.driver().ctx_synchronize();
            self.segments.release_all(&self.context);
        }
    }
}

#[cfg(test)]
mod tests {
    use vrampool::{DynamicConfig, DynamicPool, Error, FixedConfig, FixedPool, MIB, Pool, PoolExt, StreamId};

    use super::*;
    use crate::error::CUDA_ERROR_INVALID_VALUE;
    use crate::fake_driver::{FakeConfig, FakeDriver};
    use crate::transfer::CudaMemory;

    fn backend() -> (Arc<FakeDriver>, CudaDevice) {
        let fake = FakeDriver::standard();
        let backend = CudaDevice::with_driver(fake.clone()).unwrap();
        (fake, backend)
    }

    #[test]
    fn segments_come_from_cu_mem_alloc_and_every_free_is_checked() {
        let (fake, d) = backend();
        assert_eq!((d.name(), d.capacity(), d.granularity()), ("cuda:0".into(), 1 << 30, None));
        assert!(matches!(d.reserve_range(2 * MIB), Err(Error::Unsupported { call: "reserve_range", .. })));
        let a = d.allocate_segment(3 * MIB).unwrap();
        let b = d.allocate_segment(1000).unwrap();
        assert_eq!((fake.count("cuMemAlloc"), fake.allocation_count(), d.held_bytes()), (2, 2, 3 * MIB + 1000));
        let invalid = |result: vrampool::Result<()>| matches!(result, Err(Error::InvalidBackendCall { .. }));
        assert!(invalid(d.free_segment(a, MIB)), "wrong size");
        assert!(invalid(d.free_segment(a + 256, 3 * MIB)), "not a segment");
        assert!(matches!(d.allocate_segment(0), Err(Error::InvalidBackendCall { .. })));
        assert_eq!(fake.count("cuMemFree"), 0, "refused before the driver");
        d.free_segment(a, 3 * MIB).unwrap();
        assert!(invalid(d.free_segment(a, 3 * MIB)), "second free");
        assert_eq!((fake.count("cuMemFree"), d.segment_count()), (1, 1));
        assert!(d.holds(b, 1000) && !d.holds(b, 1001) && !d.holds(a, 1));
    }

    #[test]
    fn out_of_memory_and_driver_failures_name_the_call() {
        let (fake, d) = backend();
        d.allocate_segment(768 * MIB).unwrap();
        assert_eq!(
            d.allocate_segment(512 * MIB).unwrap_err(),
            Error::DeviceOutOfMemory { call: "cuMemAlloc", requested: 512 * MIB, used: 768 * MIB, capacity: 1 << 30 }
        );
        fake.fail("cuMemAlloc", 0, CUDA_ERROR_INVALID_VALUE);
        assert_eq!(
            d.allocate_segment(MIB).unwrap_err(),
            Error::Backend { call: "cuMemAlloc", message: "cuMemAlloc failed: CUDA_ERROR_INVALID_VALUE (1)".into() }
        );
        // When cuMemGetInfo fails too, the error counts what this backend holds.
        fake.fail("cuMemGetInfo", 0, CUDA_ERROR_INVALID_VALUE);
        assert!(matches!(
            d.allocate_segment(512 * MIB),
            Err(Error::DeviceOutOfMemory { used, .. }) if used == 768 * MIB
        ));
    }

    #[test]
    fn the_context_is_made_current_on_every_thread_before_each_call() {
        let (fake, d) = backend();
        let other_fake = FakeDriver::new(FakeConfig { ordinal: 1, ..FakeConfig::default() });
        let other = CudaDevice::with_driver(other_fake.clone()).unwrap();
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                let (d, other) = (&d, &other);
                scope.spawn(move || {
                    for i in 0..50 {
                        // Alternate between the two devices: each call must bind its own context first.
                        let a = d.allocate_segment(MIB + t * 4096 + i).unwrap();
                        let b = other.allocate_segment(MIB).unwrap();
                        d.free_segment(a, MIB + t * 4096 + i).unwrap();
                        other.free_segment(b, MIB).unwrap();
                    }
                });
            }
        });
        assert_eq!((fake.allocation_count(), other_fake.allocation_count()), (0, 0));
        assert_eq!(fake.count("cuMemAlloc"), 200);
        // Each driver call was preceded by a bind on its thread (the fake refuses calls without one).
        let calls = fake.calls();
        assert!(calls.iter().filter(|&&c| c == "cuCtxSetCurrent").count() >= 400);
    }

    #[test]
    fn pools_run_on_it_and_keep_their_bytes() {
        let (fake, d) = backend();
        let d = Arc::new(d);
        let fixed = FixedPool::new(d.clone(), FixedConfig::default().block_size(MIB).block_count(8)).unwrap();
        let dynamic = DynamicPool::new(d.clone(), DynamicConfig::default().initial_size(16 * MIB)).unwrap();
        let pools: [&dyn Pool; 2] = [&fixed, &dynamic];
        for (p, pool) in pools.into_iter().enumerate() {
            let blocks: Vec<_> = (0..6u64).map(|i| pool.alloc(100_000 + i * 50_000).unwrap()).collect();
            let oversize = pool.alloc(3 * MIB).unwrap();
            for (i, block) in blocks.iter().chain([&oversize]).enumerate() {
                // SAFETY: the test owns each allocation and reads it only as bytes.
                unsafe { d.memset_d8(block.addr, (p * 16 + i) as u8, block.size, StreamId::DEFAULT) }.unwrap();
            }
            for (i, block) in blocks.iter().chain([&oversize]).enumerate() {
                let mut back = vec![0; block.size as usize];
                d.copy_device_to_host(block.addr, &mut back, StreamId::DEFAULT).unwrap();
                assert!(back.iter().all(|&b| b == (p * 16 + i) as u8), "pool {p} block {i}");
            }
            for block in blocks.into_iter().chain([oversize]) {
                pool.free(block.addr).unwrap();
            }
        }
        assert_eq!(fixed.stats().fallbacks, 1, "the oversize request took the fixed pool's fallback");
        drop((fixed, dynamic));
        assert_eq!((fake.allocation_count(), fake.used()), (0, 0));
    }

    #[test]
    fn drop_frees_every_segment_still_held() {
        let (fake, d) = backend();
        for size in [MIB, 5 * MIB, 300] {
            d.allocate_segment(size).unwrap();
        }
        drop(d);
        assert_eq!((fake.allocation_count(), fake.used()), (0, 0));
        assert!(fake.count("cuCtxSynchronize") >= 1);
    }
}
