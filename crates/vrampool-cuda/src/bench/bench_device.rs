//! The GPU under the latency bench: its driver, both CUDA backends, and a stream for CUDA's own pool.

use std::sync::Arc;

use vrampool::Backend;

use super::method::Allocator;
use crate::cuda_device::CudaDevice;
use crate::cuda_virtual::CudaVirtual;
use crate::driver::{CudaDriver, Driver};
use crate::error::CudaError;
use crate::library::CudaLibrary;

/// One GPU, opened for the latency bench.
#[derive(Debug)]
pub struct BenchDevice {
    driver: Arc<dyn Driver>,
    name: String,
    segments: Arc<CudaDevice>,
    virtual_memory: Result<Arc<CudaVirtual>, CudaError>,
    /// A non-blocking stream for `cuMemAllocAsync`, destroyed with the device.
    stream: u64,
}

impl BenchDevice {
    /// Opens device `ordinal`; an error (never a panic) where the driver library is missing or the
    /// device does not exist.
    pub fn open(ordinal: usize) -> Result<Self, CudaError> {
        let library = CudaLibrary::load()?;
        let name = crate::driver::DeviceQuery::device_name(&library, ordinal).unwrap_or_else(|_| "unknown".into());
        let driver = CudaDriver::open(&library, ordinal)?;
        Self::with_driver(Arc::new(driver), name)
    }

    /// The bench over any driver (the real one, or a simulated one in tests).
    pub(crate) fn with_driver(driver: Arc<dyn Driver>, name: String) -> Result<Self, CudaError> {
        let segments = Arc::new(CudaDevice::with_driver(driver.clone())?);
        let virtual_memory = CudaVirtual::with_driver(driver.clone()).map(Arc::new);
        driver.bind()?;
        let stream = driver.stream_create()?;
        Ok(BenchDevice { driver, name, segments, virtual_memory, stream })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.driver.ordinal()
    }

    /// The device's memory in bytes.
    pub fn total_memory(&self) -> u64 {
        self.segments.capacity()
    }

    /// The virtual-memory granularity, where the device has virtual memory.
    pub fn granularity(&self) -> Option<u64> {
        self.virtual_memory.as_ref().ok().and_then(|backend| backend.granularity())
    }

    /// The `cuMemAlloc` backend.
    pub fn segments(&self) -> Arc<dyn Backend> {
        self.segments.clone()
    }

    /// The virtual-memory backend, or why the device has none.
    pub fn virtual_memory(&self) -> Result<Arc<dyn Backend>, CudaError> {
        match &self.virtual_memory {
            Ok(backend) => Ok(backend.clone()),
            Err(err) => Err(err.clone()),
        }
    }

    /// `cuMemAlloc` and `cuMemFree`, straight.
    pub fn driver_allocator(&self) -> Result<Box<dyn Allocator>, CudaError> {
        self.driver.bind()?;
        Ok(Box::new(DriverAllocator { driver: self.driver.clone() }))
    }

    /// CUDA's own pool: `cuMemAllocAsync` and `cuMemFreeAsync` on a stream, from the device's default
    /// memory pool with its release threshold at `u64::MAX` (freed memory is kept, not given back at each
    /// synchronisation).
    pub fn async_pool_allocator(&self) -> Result<Box<dyn Allocator>, CudaError> {
        self.driver.bind()?;
        self.driver.keep_default_pool_memory()?;
        Ok(Box::new(AsyncPoolAllocator { driver: self.driver.clone(), stream: self.stream }))
    }
}

impl Drop for BenchDevice {
    fn drop(&mut self) {
        if self.driver.bind().is_ok() {
            // SAFETY: the stream was created by this driver in `with_driver` and is still alive.
            let _ = unsafe { self.driver.stream_synchronize(self.stream) };
            // SAFETY: the stream was created by this driver in `with_driver` and is destroyed once, here;
            // the allocators that used it were dropped before (they borrow the device).
            let _ = unsafe { self.driver.stream_destroy(self.stream) };
        }
    }
}

/// `cuMemAlloc`/`cuMemFree`.
struct DriverAllocator {
    driver: Arc<dyn Driver>,
}

impl Allocator for DriverAllocator {
    fn allocate(&mut self, size: u64) -> Result<u64, CudaError> {
        self.driver.mem_alloc(size)
    }

    fn free(&mut self, addr: u64) -> Result<(), CudaError> {
        // SAFETY: the runner frees only addresses this allocator returned, once each, and queues no work
        // on them.
        unsafe { self.driver.mem_free(addr) }
    }
}

/// `cuMemAllocAsync`/`cuMemFreeAsync` on the bench stream.
struct AsyncPoolAllocator {
    driver: Arc<dyn Driver>,
    stream: u64,
}

impl Allocator for AsyncPoolAllocator {
    fn allocate(&mut self, size: u64) -> Result<u64, CudaError> {
        // SAFETY: the stream is the bench device's own, alive while the device is.
        unsafe { self.driver.mem_alloc_async(size, self.stream) }
    }

    fn free(&mut self, addr: u64) -> Result<(), CudaError> {
        // SAFETY: the runner frees only addresses this allocator returned, once each; the stream is alive.
        unsafe { self.driver.mem_free_async(addr, self.stream) }
    }
}

impl Drop for AsyncPoolAllocator {
    fn drop(&mut self) {
        // SAFETY: the stream is the bench device's own, alive while the device is.
        let _ = unsafe { self.driver.stream_synchronize(self.stream) };
    }
}
