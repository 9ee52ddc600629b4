//! The hybrid pool: size classes for the common requests, a dynamic region for the rest.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use super::class_cache::ClassCache;
use super::class_learner::{ClassLearner, ClassLimits, LearnedClasses};
use super::config::{ClassSpec, HybridConfig};
use super::core::{ClassFit, Core};
use super::watermark::Watermark;
use crate::backend::Backend;
use crate::counters::{PoolStats, SlotTallies, Stat, StatsCounters};
use crate::dynamic::{BlockCache, DynamicPool};
use crate::error::{Error, Result};
use crate::pool::{Allocation, Pool};
use crate::report::{BlockReport, Listing, PoolReport, ReportLimit, SizeClassReport};
use crate::request::Request;
use crate::stream::StreamId;
use crate::stream_homes::StreamHomes;
use crate::stream_order::{FreeTag, StreamOrder};
use crate::thread_slot;
use crate::units::{MAX_BLOCK_SIZE, MIN_BLOCK};

/// Why a request went to the dynamic region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// The classes are still being learned.
    WarmUp,
    /// No class serves the size (too small, too large, between classes) or the alignment.
    NoClass,
    /// The class holds its capacity of blocks, all live.
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

/// A request that a class serves, with what the allocation path found out about it on the way.
#[derive(Clone, Copy)]
struct ClassRequest<'a> {
    core: &'a Core,
    /// The class's index in the core.
    class_index: u32,
    class: &'a ClassCache,
    request: Request,
    stream: StreamId,
    /// The stream's index in the pool's stream order.
    stream_index: usize,
    /// The calling thread's slot.
    slot: thread_slot::ThreadSlot,
}

/// The seed's favourite strategy, done right, and vrampool's default.
///
/// A core of size classes serves the common requests; a [`DynamicPool`] (the region) serves the rest:
/// sizes no class serves, and overflow from a full class. The classes are given or learned during warm-up
/// ([`HybridConfig`]). Each class holds up to a fixed number of equal blocks (its capacity, sized from the
/// most blocks of the class seen live at once), handed out and taken back in O(1) with no lock, as in the
/// fixed pool: a free block of the class is reused at once by the next request of the class.
/// A request that no class serves within the rounding-waste bound may take a free block the next larger
/// class has cached, within the looser [`HybridConfig::max_cached_waste`]: memory the pool holds already,
/// where the region would place the request anew.
///
/// The classes' blocks are carved from the region's own memory when first needed, so they share it: when
/// the region's cap or the device refuses it memory, it takes back every free block the classes hold (and
/// on virtual memory moves the pages idle under them to where they are needed), so idle blocks of one class
/// never make a request of another class or of the region fail. With [`HybridConfig::drain_before_growth`]
/// it does so before every growth, and the hybrid reserves no more than the region would alone, at the cost
/// of the classes carving their blocks again.
///
/// When the share of class blocks in use passes [`HybridConfig::watermark`], a background worker grows the
/// region by one step ahead of need, once per crossing; an allocation never waits for it.
#[derive(Debug)]
pub struct HybridPool {
    config: HybridConfig,
    backend: Arc<dyn Backend>,
    /// The streams the pool has seen and the events that order reuse between them: the classes' and the
    /// region's alike, so that a block's tag means the same in both.
    order: Arc<StreamOrder>,
    /// The thread that allocates on each stream, where the classes keep the blocks others free for it.
    homes: StreamHomes,
    dynamic: Arc<DynamicPool>,
    core: OnceLock<Arc<Core>>,
    learner: Mutex<Option<ClassLearner>>,
    learning: AtomicBool,
    learned: OnceLock<LearnedClasses>,
    watermark: Watermark,
    counters: StatsCounters,
    /// Requests the region served, by [`Route`].
    routes: SlotTallies<3>,
    /// Class blocks carved from the region (requests served by a class but not by a cached block).
    carves: AtomicU64,
}

impl HybridPool {
    /// Makes the pool: the region's initial reservation, and the classes if they are given. A
    /// configuration the device cannot hold is an error before anything is reserved
    /// ([`HybridConfig::validate_against`]).
    pub fn new(backend: Arc<dyn Backend>, config: HybridConfig) -> Result<Self> {
        config.validate_against(backend.capacity())?;
        let order = Arc::new(StreamOrder::default());
        let dynamic = Arc::new(DynamicPool::with_stream_order(backend.clone(), config.dynamic.clone(), order.clone())?);
        let watermark = Watermark::new(config.watermark, dynamic.clone(), config.deterministic)
            .map_err(|err| Error::Worker { message: err.to_string() })?;
        let learn = config.classes.is_empty();
        let pool = HybridPool {
            backend,
            order,
            homes: StreamHomes::default(),
            dynamic,
            core: OnceLock::new(),
            learner: Mutex::new(learn.then(ClassLearner::default)),
            learning: AtomicBool::new(learn),
            learned: OnceLock::new(),
            watermark,
            counters: StatsCounters::default(),
            routes: Default::default(),
            carves: AtomicU64::new(0),
            config,
        };
        if !learn {
            pool.install(&pool.config.classes, false, false)?;
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

    /// The core's classes now, with their capacities (empty during warm-up).
    pub fn classes(&self) -> Vec<ClassSpec> {
        self.core.get().map_or_else(Vec::new, |core| {
            core.classes()
                .iter()
                .map(|c| ClassSpec { block_size: c.block_size(), block_count: u64::from(c.capacity()) })
                .collect()
        })
    }

    /// Times the watermark was passed while armed.
    pub fn watermark_crossings(&self) -> u64 {
        self.watermark.crossings()
    }

    /// Requests served by the classes' cached blocks, without the region.
    pub fn core_hits(&self) -> u64 {
        // Derived rather than counted: a shared counter written on every hit would be the one cache line
        // all threads fight over.
        let carves = self.carves.load(Ordering::Relaxed);
        self.counters.read().allocations.saturating_sub(self.region_requests() + carves)
    }

    /// Requests the region served, by every route.
    fn region_requests(&self) -> u64 {
        Route::ALL.iter().map(|&r| self.routes.total(r as usize)).sum()
    }

    /// Ends warm-up now: chooses the classes from the requests seen so far. Returns the classes chosen
    /// (the same ones on later calls; the classes given in the configuration when there was no warm-up).
    /// Should the host have no memory for the chosen classes' records, none is installed and the region
    /// goes on serving every request ([`HybridPool::classes`] stays empty).
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
        let learned = learner.choose(&ClassLimits {
            coverage: c.coverage,
            waste: c.waste_bound(),
            max_classes: c.max_classes,
            headroom: c.slab_headroom,
            max_block: c.max_class_size.min(MAX_BLOCK_SIZE),
        });
        // The records of learned classes are bounded by the blocks seen live during warm-up; a host out of
        // memory for them leaves the region serving everything, which is correct, only slower. They take a
        // cache line each where more than one thread allocated during warm-up.
        let spread = self.counters.slots_counted() > 1;
        let _ = self.install(&learned.classes, true, spread);
        let _ = self.learned.set(learned.clone());
        learned
    }

    /// Installs the core and puts it in front of the region; an error, with nothing changed, when the host
    /// has no memory for the classes' records. Learned classes (`grow`) carve past their capacity as their
    /// requests need, their records each on a cache line of its own where `spread`; configured ones hold
    /// the count they were given, their records packed.
    fn install(&self, classes: &[ClassSpec], grow: bool, spread: bool) -> Result<()> {
        let cap = self.dynamic.growth_policy().cap;
        let (waste, cached_waste) = (self.config.waste_bound(), self.config.cached_waste_bound());
        let core = Arc::new(Core::new(classes, cap, grow, spread, waste, cached_waste)?);
        self.dynamic.set_block_cache(core.clone() as Arc<dyn BlockCache>, self.config.drain_before_growth);
        let _ = self.core.set(core);
        Ok(())
    }

    /// Serves a request of a class that the fast path of [`Pool::allocate`] could not: `cached` is the
    /// block it took from the class, freed on another stream (its reuse is ordered here), or `None` when
    /// the class had none cached (a block is carved from the region). `None` when the class is full (or the
    /// region has no memory for a new block of it: the request then goes to the region at its own size).
    #[cold]
    fn allocate_in_class(&self, at: ClassRequest<'_>, cached: Option<(u32, FreeTag)>) -> Result<Option<Allocation>> {
        let ClassRequest { core, class, request, stream, stream_index, slot, .. } = at;
        if let Some((index, tag)) = cached {
            if let Err(err) = self.order.order_reuse(&*self.backend, tag, stream_index) {
                class.put_back(slot, index, tag);
                return Err(err);
            }
            self.served(core, request.size, slot);
            return Ok(Some(Allocation { addr: class.addr(index), size: request.size, stream }));
        }
        self.carve(at)
    }

    /// Carves a new block for the class from the region. A learned class that has carved its capacity
    /// carves more once the region has split into shards (threads contend for it): a request past the
    /// class then goes to a shard's lock, and a block freed there by another thread to that thread's, while
    /// the class serves both without a lock; and a shard's free memory serves its own blocks only, so that
    /// the region no longer packs every size together. A program whose threads do not contend keeps the
    /// class's capacity, and sends its requests past it to the region, which packs them with the rest. So
    /// does a pool whose region has taken the classes' blocks back (its cap or the device refused a growth,
    /// or a trim): memory is short there, and blocks carved past the capacity would be taken back and carved
    /// again, each time under the address map's write lock. So too a pool whose classes give their blocks
    /// back before the region grows ([`HybridConfig::drain_before_growth`]): blocks carved past the capacity
    /// would be given back at the region's next growth and carved again, and the memory they leave idle in
    /// the classes' part of the range raised such a pool's peak reserved under threads (docs/BENCHMARKS.md).
    #[cold]
    fn carve(&self, at: ClassRequest<'_>) -> Result<Option<Allocation>> {
        let ClassRequest { core, class_index, class, request, stream, stream_index, slot } = at;
        let grow = !self.config.drain_before_growth && self.dynamic.shards_open() > 1 && !self.dynamic.cache_drained();
        let Some(index) = class.take_empty(grow) else { return Ok(None) };
        match self.dynamic.allocate_for_cache(class.block_size(), MIN_BLOCK, stream) {
            Ok(block) => {
                class.set_addr(index, block.addr);
                core.register(block.addr, class_index, index);
                self.carves.fetch_add(1, Ordering::Relaxed);
                class.mark_live(index, stream_index, request.size);
                self.served(core, request.size, slot);
                Ok(Some(Allocation { addr: block.addr, size: request.size, stream }))
            }
            Err(err) => {
                class.give_back_empty(index);
                if err.is_out_of_memory() { Ok(None) } else { Err(err) }
            }
        }
    }

    /// Counts a block the core served to the thread in `slot`.
    #[inline]
    fn served(&self, core: &Core, size: u64, slot: thread_slot::ThreadSlot) {
        self.watermark.count(slot, 1, core.total_blocks());
        self.counters.on_allocate(slot, size);
    }

    /// Serves a request that no class serves within the waste bound with a cached block of `class`, the
    /// next larger class, that this stream may reuse at once; `None` (nothing taken) where it has none.
    /// Such a block is idle memory already held, where the region would carve the request anew (and
    /// perhaps grow); no block is carved for such a request.
    #[cold]
    fn allocate_cached_only(&self, core: &Core, class: &ClassCache, size: u64, stream: StreamId) -> Option<Allocation> {
        let slot = thread_slot::current();
        let stream_index = self.order.index_of(stream);
        let (index, tag) = class.take_cached(slot, stream_index, size)?;
        if !tag.reusable_on(stream_index) {
            class.put_back(slot, index, tag);
            return None;
        }
        self.served(core, size, slot);
        Some(Allocation { addr: class.addr(index), size, stream })
    }

    #[cold]
    fn allocate_in_region(
        &self,
        request: Request,
        alignment: u64,
        stream: StreamId,
        route: Route,
    ) -> Result<Allocation> {
        // The region's answer is handed back as it is, not taken apart and built again: copying a Result
        // this large cost failed store forwards on every region allocation.
        let result = self.dynamic.allocate(request.size, alignment, stream);
        let Ok(allocation) = &result else { return result };
        let slot = thread_slot::current();
        self.routes.count(slot, route as usize);
        self.counters.on_allocate(slot, request.size);
        if route == Route::WarmUp {
            self.learn(allocation.addr, request.span);
        }
        result
    }

    /// Counts a warm-up request for the learner; learns the classes once enough were seen.
    fn learn(&self, addr: u64, span: u64) {
        let mut learner = self.learner.lock();
        let seen = learner.as_mut().map(|l| l.allocated(addr, span));
        drop(learner);
        if seen.is_some_and(|seen| seen >= self.config.warmup_requests) {
            self.freeze();
        }
    }

    #[inline]
    fn free_in(&self, core: &Core, class: &ClassCache, index: u32, addr: u64) -> Result<()> {
        let block = class.live(index, addr)?;
        let tag = self.order.tag_free(block.stream_index());
        let slot = thread_slot::current();
        class.free_block(self.homes.keeper(block.stream_index(), slot), block, tag, addr)?;
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
        &self.backend
    }

    #[inline]
    fn allocate(&self, size: u64, alignment: u64, stream: StreamId) -> Result<Allocation> {
        let request = Request::new(size, alignment)?;
        let route = match self.core.get() {
            Some(core) => match core.class_for(request.span, request.align) {
                ClassFit::Serves(class_index, class) => {
                    // The common case, kept small so that nothing larger than an address passes through
                    // it (a nested Result here cost failed store forwards on every allocation): a cached
                    // block that this stream may reuse at once.
                    let slot = thread_slot::current();
                    let stream_index = self.order.index_of(stream);
                    self.homes.note(stream_index, slot);
                    let cached = class.take_cached(slot, stream_index, size);
                    if let Some((index, tag)) = cached
                        && tag.reusable_on(stream_index)
                    {
                        self.served(core, size, slot);
                        return Ok(Allocation { addr: class.addr(index), size, stream });
                    }
                    let at = ClassRequest { core, class_index, class, request, stream, stream_index, slot };
                    match self.allocate_in_class(at, cached)? {
                        Some(allocation) => return Ok(allocation),
                        None => Route::ClassFull,
                    }
                }
                ClassFit::CachedOnly(class) => match self.allocate_cached_only(core, class, size, stream) {
                    Some(allocation) => return Ok(allocation),
                    None => Route::NoClass,
                },
                ClassFit::None => Route::NoClass,
            },
            None if self.learning.load(Ordering::Acquire) => Route::WarmUp,
            None => Route::NoClass,
        };
        self.allocate_in_region(request, alignment, stream, route)
    }

    #[inline]
    fn free(&self, addr: u64) -> Result<()> {
        if let Some(core) = self.core.get()
            && let Some((class, index)) = core.lookup(addr)
        {
            return self.free_in(core, class, index, addr);
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

    /// The limit bounds the region, from which the classes' blocks are carved too.
    fn set_limit(&self, bytes: Option<u64>) -> Result<u64> {
        self.dynamic.set_limit(bytes)
    }

    fn reset_peaks(&self) {
        self.counters.reset_peak();
        self.dynamic.reset_peaks();
    }

    fn stats(&self) -> PoolStats {
        let region = self.dynamic.stats();
        let reading = self.counters.read();
        let fallback_reasons = Route::ALL
            .iter()
            .map(|&r| (r.name().to_string(), self.routes.total(r as usize)))
            .filter(|&(_, n)| n > 0)
            .collect();
        PoolStats {
            allocated_bytes: Stat { current: reading.allocated, peak: reading.allocated_peak },
            reserved_bytes: region.reserved_bytes,
            active_allocations: reading.allocations - reading.frees,
            allocations: reading.allocations,
            frees: reading.frees,
            fallbacks: self.region_requests(),
            fallback_reasons,
            ..region
        }
    }

    fn report_within(&self, limit: ReportLimit) -> PoolReport {
        let mut segments = Listing::new(limit.segments);
        let mut blocks = Listing::new(limit.blocks);
        let core = self.core.get();
        // The region's requests, served outside the classes. The classes' blocks are listed as the core's.
        self.dynamic.list(&mut segments, |block| {
            if core.is_none_or(|core| !core.holds(block.addr)) {
                blocks.block(BlockReport { fallback: true, ..block });
            }
        });
        let mut classes = Vec::new();
        for class in core.map_or(&[][..], |core| core.classes()) {
            let mut live = 0;
            for (index, size, stream_index) in class.live_blocks() {
                live += 1;
                blocks.block(BlockReport {
                    addr: class.addr(index),
                    size,
                    block_size: class.block_size(),
                    stream: self.order.stream_of(stream_index),
                    fallback: false,
                });
            }
            classes.push(SizeClassReport {
                block_size: class.block_size(),
                block_count: u64::from(class.capacity()),
                live_blocks: live,
            });
        }
        PoolReport { classes, ..PoolReport::listed(self, segments, blocks) }
    }

    fn trim(&self) -> Result<u64> {
        self.dynamic.trim()
    }
}

impl Drop for HybridPool {
    fn drop(&mut self) {
        self.watermark.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::SimDevice;
    use crate::units::KIB;

    /// A learned class that has carved its capacity sends further requests to the region while the region
    /// has one shard, carves past its capacity once threads have split the region into shards, and keeps
    /// its capacity again once the region has taken its blocks back.
    #[test]
    fn a_learned_class_carves_past_its_capacity_once_the_region_has_shards() {
        let config = HybridConfig::default().warmup_requests(8).deterministic(true);
        let pool = HybridPool::new(Arc::new(SimDevice::default()), config).unwrap();
        for _ in 0..8 {
            let a = pool.allocate(4 * KIB, MIN_BLOCK, StreamId::DEFAULT).unwrap();
            pool.free(a.addr).unwrap();
        }
        let learned = pool.learned_classes().expect("learned at the 8th request").classes.clone();
        assert_eq!(learned, vec![ClassSpec { block_size: 4 * KIB, block_count: 2 }], "twice the one live");
        let fallbacks = |pool: &HybridPool| pool.stats().fallback_reasons.get("class-full").copied().unwrap_or(0);
        let mut live: Vec<u64> =
            (0..6).map(|_| pool.allocate(4 * KIB, MIN_BLOCK, StreamId::DEFAULT).unwrap().addr).collect();
        assert_eq!(fallbacks(&pool), 4, "one shard: past its two blocks the class sends requests to the region");
        assert_eq!(pool.dynamic_region().move_to_own_shard(), 1);
        live.extend((0..40).map(|_| pool.allocate(4 * KIB, MIN_BLOCK, StreamId::DEFAULT).unwrap().addr));
        assert_eq!(fallbacks(&pool), 4, "two shards: the class carves its 40 blocks");
        let core = pool.core.get().unwrap();
        assert_eq!(live.iter().filter(|&&addr| core.holds(addr)).count(), 42);
        for addr in live {
            pool.free(addr).unwrap();
        }
        assert_eq!(pool.stats().allocated_bytes.current, 0);
        let again: Vec<u64> =
            (0..42).map(|_| pool.allocate(4 * KIB, MIN_BLOCK, StreamId::DEFAULT).unwrap().addr).collect();
        assert!(again.iter().all(|&addr| core.holds(addr)), "the class's 42 blocks serve 42 requests again");
        for addr in again {
            pool.free(addr).unwrap();
        }
        // A trim takes the blocks back: memory was asked for, and the class keeps its capacity from then on.
        pool.trim().unwrap();
        let after: Vec<u64> =
            (0..10).map(|_| pool.allocate(4 * KIB, MIN_BLOCK, StreamId::DEFAULT).unwrap().addr).collect();
        assert_eq!(after.iter().filter(|&&addr| core.holds(addr)).count(), 2, "the class's capacity");
        assert_eq!(fallbacks(&pool), 12);
        for addr in after {
            pool.free(addr).unwrap();
        }
    }

    /// Learned classes pack their records where one thread warmed the pool up, and give each a cache line
    /// of its own where several did.
    #[test]
    fn learned_classes_spread_their_records_only_where_threads_warmed_up() {
        for threads in [1, 3] {
            let config = HybridConfig::default().warmup_requests(12).deterministic(true);
            let pool = HybridPool::new(Arc::new(SimDevice::default()), config).unwrap();
            // All the threads at once: a thread that ended gives its slot to the next.
            let together = std::sync::Barrier::new(threads);
            std::thread::scope(|scope| {
                for _ in 0..threads {
                    scope.spawn(|| {
                        together.wait();
                        for _ in 0..12 / threads {
                            let a = pool.allocate(4 * KIB, MIN_BLOCK, StreamId::DEFAULT).unwrap();
                            pool.free(a.addr).unwrap();
                        }
                        together.wait();
                    });
                }
            });
            assert!(pool.learned_classes().is_some(), "learned at the 12th request");
            let classes = pool.core.get().unwrap().classes();
            assert!(!classes.is_empty());
            assert!(classes.iter().all(|c| c.records_spread() == (threads > 1)), "{threads} threads");
        }
    }

    /// Threads each in a shard of their own allocate, hand over and free blocks of learned classes far past
    /// what warm-up saw: the classes grow while others free and look blocks up, and no two live blocks
    /// ever overlap (a shadow of every live range checks each allocation), every free succeeds, and every
    /// byte comes back.
    #[test]
    fn classes_growing_under_threads_never_hand_out_a_block_twice() {
        use std::collections::BTreeMap;
        use std::sync::{Barrier, Mutex};
        const THREADS: usize = 6;
        let config = HybridConfig::default().warmup_requests(12).deterministic(true);
        let pool = HybridPool::new(Arc::new(SimDevice::default()), config).unwrap();
        let sizes = [4 * KIB, 8 * KIB, 64 * KIB];
        for i in 0..12 {
            let a = pool.allocate(sizes[i % 3], MIN_BLOCK, StreamId::DEFAULT).unwrap();
            pool.free(a.addr).unwrap();
        }
        let live: Mutex<BTreeMap<u64, u64>> = Mutex::new(BTreeMap::new());
        let handed: Mutex<Vec<u64>> = Mutex::new(Vec::new());
        let barrier = Barrier::new(THREADS);
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let (pool, live, handed, barrier) = (&pool, &live, &handed, &barrier);
                scope.spawn(move || {
                    pool.dynamic_region().move_to_own_shard();
                    barrier.wait();
                    let stream = StreamId(t as u64 + 1);
                    let mut mine: Vec<u64> = Vec::new();
                    let mut seed = t as u64 * 7919 + 1;
                    for step in 0..3000 {
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let roll = (seed >> 33) as usize;
                        if mine.len() < 40 && roll % 3 != 0 {
                            let size = sizes[roll % 3];
                            let a = pool.allocate(size, MIN_BLOCK, stream).unwrap();
                            let mut shadow = live.lock().unwrap();
                            let before = shadow.range(..a.addr + size).next_back().map(|(&at, &len)| at + len);
                            assert!(before.is_none_or(|end| end <= a.addr), "{a:?} overlaps a live block");
                            shadow.insert(a.addr, size);
                            drop(shadow);
                            mine.push(a.addr);
                        } else if !mine.is_empty() {
                            let addr = mine.swap_remove(roll % mine.len());
                            live.lock().unwrap().remove(&addr);
                            if step % 5 == 0 {
                                handed.lock().unwrap().push(addr);
                            } else {
                                pool.free(addr).unwrap();
                            }
                        }
                        if step % 50 == 0 {
                            let theirs = std::mem::take(&mut *handed.lock().unwrap());
                            for addr in theirs {
                                pool.free(addr).unwrap();
                            }
                        }
                    }
                    for addr in mine {
                        live.lock().unwrap().remove(&addr);
                        pool.free(addr).unwrap();
                    }
                });
            }
        });
        for addr in handed.into_inner().unwrap() {
            pool.free(addr).unwrap();
        }
        assert_eq!(pool.stats().allocated_bytes.current, 0);
        let core = pool.core.get().unwrap();
        assert!(
            core.classes().iter().any(|class| class.issued() > class.capacity()),
            "a class grew past its capacity: {:?}",
            core.classes().iter().map(|c| (c.capacity(), c.issued())).collect::<Vec<_>>()
        );
        pool.trim().unwrap();
    }
}
