//! The hybrid pool: size classes for the common requests, a dynamic region for the rest.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::class_learner::{ClassLearner, LearnedClasses};
use super::config::{ClassSpec, HybridConfig};
use super::core::Core;
use super::size_class::SizeClass;
use super::slab_chunks::SlabChunks;
use super::watermark::Watermark;
use crate::backend::Backend;
use crate::dynamic::{ChunkDonor, DynamicPool};
use crate::error::{Error, Result};
use crate::pool::{Allocation, Pool};
use crate::report::{BlockReport, PoolReport, SegmentKind, SegmentReport, SizeClassReport};
use crate::request::Request;
use crate::slab::Slab;
use crate::stats::{PoolStats, Stat};
use crate::stats_counters::StatsCounters;
use crate::stream::StreamId;
use crate::stream_order::StreamOrder;
use crate::thread_slot;
use crate::units::round_up_to;

/// Why a request went to the dynamic region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// The classes are still being learned.
    WarmUp,
    /// No class serves the size (too small, too large, between classes) or the alignment.
    NoClass,
    /// The class's slab had no free block.
    ClassFull,
}

impl Route {
    const ALL: [Route; 3] = [Route::WarmUp, Route::NoClass, Route::ClassFull];

    fn name(self) -> &'static str {
        match self {
            Route::WarmUp => "warm-up",
            Route::NoClass => "no-class",
            Route::ClassFull => "class-full",
        }
    }
}

/// The seed's favourite strategy, done right, and vrampool's default.
///
/// A core of size classes, each a slab of equal blocks handed out in O(1) with no lock (the fixed pool's
/// machinery), serves the common requests; a [`DynamicPool`] serves the rest: sizes no class serves, and
/// overflow from a full class. The classes are given or learned during warm-up ([`HybridConfig`]).
///
/// On a device with virtual memory the slabs are carved from the dynamic region's own address range and
/// take physical memory only where their blocks are used; a slab chunk that holds no live block can be
/// lent to the dynamic region when it needs memory (and is backed again when a block of it is next used):
/// idle blocks of one class do not hold memory another class or the dynamic region needs. On a device
/// without virtual memory each slab is a segment of its own, held whole.
///
/// When the share of core blocks in use passes [`HybridConfig::watermark`], a background worker grows the
/// dynamic region by one step ahead of need, once per crossing; an allocation never waits for it.
#[derive(Debug)]
pub struct HybridPool {
    config: HybridConfig,
    dynamic: Arc<DynamicPool>,
    core: OnceLock<Arc<Core>>,
    learner: Mutex<Option<ClassLearner>>,
    learning: AtomicBool,
    learned: OnceLock<LearnedClasses>,
    watermark: Watermark,
    order: StreamOrder,
    counters: StatsCounters,
    routes: [AtomicU64; 3],
}

impl HybridPool {
    /// Makes the pool: the dynamic region's initial reservation, and the slabs if the classes are given.
    pub fn new(backend: Arc<dyn Backend>, config: HybridConfig) -> Result<Self> {
        config.validate()?;
        let dynamic = Arc::new(DynamicPool::new(backend, config.dynamic.clone())?);
        let watermark = Watermark::new(config.watermark, dynamic.clone(), config.deterministic)
            .map_err(|err| Error::Worker { message: err.to_string() })?;
        let learn = config.classes.is_empty();
        let pool = HybridPool {
            dynamic,
            core: OnceLock::new(),
            learner: Mutex::new(learn.then(ClassLearner::default)),
            learning: AtomicBool::new(learn),
            learned: OnceLock::new(),
            watermark,
            order: StreamOrder::default(),
            counters: StatsCounters::default(),
            routes: Default::default(),
            config,
        };
        if !learn {
            let classes = pool.install(&pool.config.classes);
            if classes.len() < pool.config.classes.len() {
                let missing = pool.config.classes[classes.len()];
                return Err(pool.dynamic.carve_error(missing.block_size * missing.block_count));
            }
        }
        Ok(pool)
    }

    /// The configuration the pool was made with.
    pub fn config(&self) -> &HybridConfig {
        &self.config
    }

    /// The dynamic region.
    pub fn dynamic_region(&self) -> &DynamicPool {
        &self.dynamic
    }

    /// The classes learned at the end of warm-up, once learned.
    pub fn learned_classes(&self) -> Option<&LearnedClasses> {
        self.learned.get()
    }

    /// The core's classes now (empty during warm-up).
    pub fn classes(&self) -> Vec<ClassSpec> {
        self.core.get().map_or_else(Vec::new, |core| {
            core.classes()
                .iter()
                .map(|c| ClassSpec { block_size: c.block_size(), block_count: u64::from(c.slab.count()) })
                .collect()
        })
    }

    /// Times the watermark was passed while armed.
    pub fn watermark_crossings(&self) -> u64 {
        self.watermark.crossings()
    }

    /// Ends warm-up now: chooses the classes from the requests seen so far and reserves their slabs.
    /// Classes whose slab cannot be reserved are left out. Returns the classes chosen (the same ones on
    /// later calls; the classes given in the configuration when there was no warm-up).
    pub fn freeze(&self) -> LearnedClasses {
        let Some(learner) = self.learner.lock().take() else {
            return self.learned.get().cloned().unwrap_or_else(|| LearnedClasses {
                classes: self.classes(),
                coverage: f64::NAN,
                requests: 0,
            });
        };
        self.learning.store(false, Ordering::Release);
        let c = &self.config;
        let mut learned = learner.choose(c.coverage, c.max_rounding_waste, c.max_classes, c.slab_headroom);
        let installed = self.install(&learned.classes);
        learned.classes.truncate(installed.len());
        learned.classes = installed;
        let _ = self.learned.set(learned.clone());
        learned
    }

    /// Reserves a slab for each class, in order, until one cannot be reserved; installs the core.
    fn install(&self, classes: &[ClassSpec]) -> Vec<ClassSpec> {
        let granularity = self.dynamic.granularity();
        let mut built = Vec::new();
        for spec in classes {
            let bytes = spec.block_size * spec.block_count;
            let len = match granularity {
                Some(g) => round_up_to(bytes, g).unwrap_or(u64::MAX),
                None => bytes,
            };
            // On virtual memory a slab is only address space until its blocks are used.
            let Ok(base) = self.dynamic.carve_slab(len, false) else { break };
            built.push(SizeClass {
                slab: Slab::new(base, spec.block_size, spec.block_count as u32),
                chunks: granularity.map(|g| SlabChunks::new(base, len, g, false)),
            });
        }
        let specs = built
            .iter()
            .map(|c| ClassSpec { block_size: c.block_size(), block_count: u64::from(c.slab.count()) })
            .collect();
        let core = Arc::new(Core::new(built, self.config.max_rounding_waste));
        if granularity.is_some() {
            self.dynamic.set_chunk_donor(core.clone() as Arc<dyn ChunkDonor>);
        }
        let _ = self.core.set(core);
        specs
    }

    /// Serves a request from `class`'s slab; `None` when the slab is full or its memory cannot be backed.
    #[inline]
    fn allocate_in(
        &self,
        core: &Core,
        class: &SizeClass,
        request: Request,
        stream: StreamId,
    ) -> Result<Option<Allocation>> {
        let slot = thread_slot::current();
        let Some(index) = class.slab.pop(slot) else { return Ok(None) };
        let addr = class.slab.block_addr(index);
        let block_size = class.block_size();
        let undo = || {
            if let Some(chunks) = &class.chunks {
                chunks.release(addr, block_size);
            }
            class.slab.push(slot, index);
        };
        if let Some(chunks) = &class.chunks
            && chunks.acquire(addr, block_size)
        {
            match self.dynamic.back_span(addr, block_size) {
                Ok(()) => chunks.backed(addr, block_size),
                Err(err) => {
                    undo();
                    return if err.is_out_of_memory() { Ok(None) } else { Err(err) };
                }
            }
        }
        let stream_index = self.order.index_of(stream);
        if let Err(err) = self.order.order_reuse(&**self.dynamic.backend(), class.slab.free_tag(index), stream_index) {
            undo();
            return Err(err);
        }
        class.slab.mark_live(index, stream_index, request.size);
        self.watermark.count(slot, 1, core.total_blocks());
        self.counters.on_allocate(slot, request.size);
        Ok(Some(Allocation { addr, size: request.size, stream }))
    }

    #[cold]
    fn allocate_in_region(
        &self,
        request: Request,
        alignment: u64,
        stream: StreamId,
        route: Route,
    ) -> Result<Allocation> {
        let allocation = self.dynamic.allocate(request.size, alignment, stream)?;
        self.routes[route as usize].fetch_add(1, Ordering::Relaxed);
        self.counters.on_allocate(thread_slot::current(), request.size);
        if route == Route::WarmUp {
            let mut learner = self.learner.lock();
            let seen = learner.as_mut().map(|l| l.allocated(allocation.addr, request.span));
            drop(learner);
            if seen.is_some_and(|seen| seen >= self.config.warmup_requests) {
                self.freeze();
            }
        }
        Ok(allocation)
    }

    #[inline]
    fn free_in(&self, core: &Core, class: &SizeClass, addr: u64) -> Result<()> {
        let block = class.slab.live_block(addr)?;
        let tag = self.order.tag_free(&**self.dynamic.backend(), block.stream_index())?;
        let slot = thread_slot::current();
        class.slab.release(slot, block, tag)?;
        if let Some(chunks) = &class.chunks {
            chunks.release(addr, class.block_size());
        }
        self.watermark.count(slot, -1, core.total_blocks());
        self.counters.on_free(slot, block.size());
        Ok(())
    }
}

impl Pool for HybridPool {
    fn strategy(&self) -> &'static str {
        "hybrid"
    }

    fn backend(&self) -> &Arc<dyn Backend> {
        self.dynamic.backend()
    }

    #[inline]
    fn allocate(&self, size: u64, alignment: u64, stream: StreamId) -> Result<Allocation> {
        let request = Request::new(size, alignment)?;
        let route = match self.core.get() {
            Some(core) => match core.class_for(request.span, request.align) {
                Some(class) => match self.allocate_in(core, class, request, stream)? {
                    Some(allocation) => return Ok(allocation),
                    None => Route::ClassFull,
                },
                None => Route::NoClass,
            },
            None if self.learning.load(Ordering::Acquire) => Route::WarmUp,
            None => Route::NoClass,
        };
        self.allocate_in_region(request, alignment, stream, route)
    }

    #[inline]
    fn free(&self, addr: u64) -> Result<()> {
        if let Some(core) = self.core.get()
            && let Some(class) = core.class_holding(addr)
        {
            return self.free_in(core, class, addr);
        }
        let size = self.dynamic.free_sized(addr)?;
        if self.learning.load(Ordering::Acquire)
            && let Some(learner) = self.learner.lock().as_mut()
        {
            learner.freed(addr);
        }
        self.counters.on_free(thread_slot::current(), size);
        Ok(())
    }

    fn stats(&self) -> PoolStats {
        let region = self.dynamic.stats();
        let reading = self.counters.read();
        let order = &self.order.counters;
        let fallback_reasons = Route::ALL
            .iter()
            .map(|&r| (r.name().to_string(), self.routes[r as usize].load(Ordering::Relaxed)))
            .filter(|&(_, n)| n > 0)
            .collect();
        PoolStats {
            allocated_bytes: Stat { current: reading.allocated, peak: reading.allocated_peak },
            reserved_bytes: region.reserved_bytes,
            active_allocations: reading.allocations - reading.frees,
            allocations: reading.allocations,
            frees: reading.frees,
            fallbacks: self.routes.iter().map(|r| r.load(Ordering::Relaxed)).sum(),
            fallback_reasons,
            ooms: region.ooms,
            growths: region.growths,
            pre_expansions: region.pre_expansions,
            backend_calls: region.backend_calls,
            chunks_moved: region.chunks_moved,
            trimmed_bytes: region.trimmed_bytes,
            events_recorded: region.events_recorded + order.events_recorded.load(Ordering::Relaxed),
            stream_waits: region.stream_waits + order.stream_waits.load(Ordering::Relaxed),
            synchronizations: region.synchronizations + order.synchronizations.load(Ordering::Relaxed),
        }
    }

    fn report(&self) -> PoolReport {
        let mut report = self.dynamic.report();
        report.strategy = self.strategy().into();
        report.stats = self.stats();
        if let Some(core) = self.core.get() {
            for class in core.classes() {
                let slab = &class.slab;
                report.segments.push(SegmentReport {
                    kind: SegmentKind::Slab,
                    addr: slab.base(),
                    size: slab.len(),
                    reserved_bytes: class.chunks.as_ref().map_or(slab.len(), |c| c.backed_bytes()),
                });
                let mut live = 0;
                for (index, size, stream_index) in slab.live_blocks() {
                    live += 1;
                    report.blocks.push(BlockReport {
                        addr: slab.block_addr(index),
                        size,
                        block_size: class.block_size(),
                        stream: self.order.stream_of(stream_index),
                        fallback: false,
                    });
                }
                report.classes.push(SizeClassReport {
                    block_size: class.block_size(),
                    block_count: u64::from(slab.count()),
                    live_blocks: live,
                });
            }
        }
        // Blocks of the dynamic region count as fallbacks of the hybrid.
        for block in report.blocks.iter_mut() {
            block.fallback = self.core.get().is_none_or(|core| core.class_holding(block.addr).is_none());
        }
        report.segments.sort_by_key(|s| s.addr);
        report.blocks.sort_by_key(|b| b.addr);
        report
    }

    fn trim(&self) -> Result<u64> {
        let mut released = 0;
        if let Some(core) = self.core.get()
            && self.dynamic.granularity().is_some()
        {
            let idle = core.claim_idle(usize::MAX);
            released += self.dynamic.unmap_donated(&idle)?;
        }
        Ok(released + self.dynamic.trim()?)
    }
}

impl Drop for HybridPool {
    fn drop(&mut self) {
        self.watermark.stop();
        self.order.release_all(&**self.dynamic.backend());
    }
}
