//! What the latency bench measures: an allocator made fresh for each pattern.

use std::sync::Arc;

use vrampool::{
    Backend, DEFAULT_ALIGNMENT, DynamicConfig, DynamicPool, Fallback, FixedConfig, FixedPool, HybridConfig, HybridPool,
    MIN_BLOCK, Pool, StreamId,
};

use super::bench_device::BenchDevice;
use super::latency_report::PoolWork;
use crate::error::CudaError;
use vrampool_bench::Pattern;

/// Something that hands out device memory and takes it back.
pub trait Allocator {
    /// Allocates `size` bytes; returns the address.
    fn allocate(&mut self, size: u64) -> Result<u64, CudaError>;

    /// Frees what [`Allocator::allocate`] returned.
    fn free(&mut self, addr: u64) -> Result<(), CudaError>;

    /// The device work a vrampool pool has done so far (backend calls, growths, moved chunks,
    /// synchronizations); `None` for the driver's own allocators.
    fn pool_work(&self) -> Option<PoolWork> {
        None
    }
}

/// A vrampool pool as an [`Allocator`], on the default stream.
struct PoolAllocator<P: Pool> {
    pool: P,
}

impl<P: Pool> Allocator for PoolAllocator<P> {
    #[inline]
    fn allocate(&mut self, size: u64) -> Result<u64, CudaError> {
        Ok(self.pool.allocate(size, DEFAULT_ALIGNMENT, StreamId::DEFAULT)?.addr)
    }

    #[inline]
    fn free(&mut self, addr: u64) -> Result<(), CudaError> {
        Ok(self.pool.free(addr)?)
    }

    fn pool_work(&self) -> Option<PoolWork> {
        Some(PoolWork::of(&self.pool.stats()))
    }
}

/// How a method makes its allocator for a pattern.
type MakeAllocator = Box<dyn Fn(&BenchDevice, &Pattern) -> Result<Box<dyn Allocator>, CudaError>>;

/// One row of the bench: a name and how to make its allocator.
pub struct Method {
    /// The row's name (`cuMemAlloc`, `dynamic / CudaVirtual`).
    pub name: String,
    make: MakeAllocator,
}

impl std::fmt::Debug for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Method").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Method {
    /// A method from any allocator maker.
    pub fn new(
        name: impl Into<String>,
        make: impl Fn(&BenchDevice, &Pattern) -> Result<Box<dyn Allocator>, CudaError> + 'static,
    ) -> Self {
        Method { name: name.into(), make: Box::new(make) }
    }

    /// A vrampool strategy on both CUDA backends: `<strategy> / CudaDevice` and `<strategy> / CudaVirtual`.
    /// `make` builds the pool on the backend it is given, for the pattern.
    pub fn pool_on_both<P, F>(strategy: &str, make: F) -> [Method; 2]
    where
        P: Pool + 'static,
        F: Fn(Arc<dyn Backend>, &Pattern) -> vrampool::Result<P> + Clone + 'static,
    {
        let on_virtual = make.clone();
        [
            Method::new(format!("{strategy} / CudaDevice"), move |device, pattern| {
                Ok(Box::new(PoolAllocator { pool: make(device.segments(), pattern)? }))
            }),
            Method::new(format!("{strategy} / CudaVirtual"), move |device, pattern| {
                Ok(Box::new(PoolAllocator { pool: on_virtual(device.virtual_memory()?, pattern)? }))
            }),
        ]
    }

    /// Makes the allocator for `pattern`.
    pub(crate) fn make(&self, device: &BenchDevice, pattern: &Pattern) -> Result<Box<dyn Allocator>, CudaError> {
        (self.make)(device, pattern)
    }
}

/// Blocks a fixed pool keeps beyond the most a pattern holds live.
const FIXED_SPARE_BLOCKS: u64 = 16;

/// A fixed pool sized for a pattern: blocks that hold its largest request, as many as it keeps live plus
/// 16 spare; requests that do not fit are refused, so a fallback is never timed.
pub fn fixed_config(pattern: &Pattern) -> FixedConfig {
    FixedConfig::default()
        .block_size(pattern.max_size().next_multiple_of(MIN_BLOCK))
        .block_count(pattern.max_live() as u64 + FIXED_SPARE_BLOCKS)
        .fallback(Fallback::Reject)
}

/// The methods of the design: the driver's `cuMemAlloc`, CUDA's own pool, and each vrampool strategy on
/// both backends (one line per strategy).
pub fn default_methods() -> Vec<Method> {
    let mut methods = vec![
        Method::new("cuMemAlloc", |device, _| device.driver_allocator()),
        Method::new("cuMemAllocAsync (CUDA pool)", |device, _| device.async_pool_allocator()),
    ];
    methods.extend(Method::pool_on_both("fixed", |backend, pattern| FixedPool::new(backend, fixed_config(pattern))));
    methods.extend(Method::pool_on_both("dynamic", |backend, _| DynamicPool::new(backend, DynamicConfig::default())));
    // The hybrid learns its classes during the runner's warm-up; the bound on rounding waste is the one
    // that lets 128 classes cover log-uniform churn sizes.
    let hybrid = || HybridConfig::default().warmup_requests(1024).max_rounding_waste(0.125);
    methods.extend(Method::pool_on_both("hybrid", move |backend, _| HybridPool::new(backend, hybrid())));
    methods
}
