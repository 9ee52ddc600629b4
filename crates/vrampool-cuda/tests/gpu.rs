//! Tests on a real NVIDIA GPU: every strategy on both CUDA backends, with the bytes checked through the
//! driver. They are ignored where no GPU is; on a GPU host run them with
//!
//! ```text
//! cargo test -p vrampool-cuda --test gpu -- --ignored --nocapture
//! ```
//!
//! Each prints what it measured and checked. They take the GPU one at a time (one of them fills the
//! device's memory).
#![warn(clippy::undocumented_unsafe_blocks, clippy::multiple_unsafe_ops_per_block)]

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use vrampool::{
    Backend, Cap, DynamicConfig, DynamicPool, Error, EventId, Fallback, FixedConfig, FixedPool, GIB, HybridConfig,
    HybridPool, MIB, Pool, SegmentKind, StreamId, human_bytes,
};
use vrampool_cuda::{CudaDevice, CudaError, CudaMemory, CudaVirtual, PoolSlice, devices};

/// One test on the GPU at a time.
static GPU: Mutex<()> = Mutex::new(());

fn gpu() -> MutexGuard<'static, ()> {
    GPU.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn device() -> Arc<CudaDevice> {
    Arc::new(CudaDevice::new(0).expect("CUDA device 0 as cuMemAlloc segments"))
}

fn virtual_memory() -> Arc<CudaVirtual> {
    Arc::new(CudaVirtual::new(0).expect("CUDA device 0 with virtual memory"))
}

/// A byte pattern that differs from block to block and along each block.
fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i / 4096 + seed * 31 + i % 251) % 256) as u8).collect()
}

/// Reads `len` bytes at `addr` on the default stream.
fn read<B: CudaMemory>(backend: &B, addr: u64, len: u64) -> Vec<u8> {
    let mut bytes = vec![0; len as usize];
    backend.copy_device_to_host(addr, &mut bytes, StreamId::DEFAULT).expect("device to host copy");
    bytes
}

/// The first offset where `bytes` differs from `expected`.
fn first_difference(bytes: &[u8], expected: impl Fn(usize) -> u8) -> Option<usize> {
    bytes.iter().enumerate().position(|(i, &b)| b != expected(i))
}

/// The strategies under test on `backend`, each sized to take a fallback or grow.
fn strategies(backend: Arc<dyn Backend>) -> Vec<Box<dyn Pool>> {
    let fixed = FixedConfig::default().block_size(4 * MIB).block_count(32).fallback(Fallback::Backend);
    vec![
        Box::new(FixedPool::new(backend.clone(), fixed).expect("fixed pool")),
        Box::new(DynamicPool::new(backend.clone(), DynamicConfig::default().initial_size(32 * MIB)).expect("dynamic")),
        Box::new(HybridPool::new(backend, HybridConfig::default()).expect("hybrid pool")),
    ]
}

/// Allocates blocks of many sizes from every strategy on `backend`, fills each (memset for the body,
/// a host copy for a distinct head), reads each whole block back, and frees it.
fn check_every_strategy<B: CudaMemory + 'static>(backend: Arc<B>) {
    let sizes = [256u64, 4096, 100_000, MIB, 3 * MIB + 17, 9 * MIB, 40 * MIB];
    for pool in strategies(backend.clone()) {
        let start = Instant::now();
        let blocks: Vec<_> = (0..3)
            .flat_map(|_| sizes)
            .map(|size| pool.allocate(size, 256, StreamId::DEFAULT).expect("allocation"))
            .collect();
        for (i, block) in blocks.iter().enumerate() {
            let head = pattern(i, block.size.min(8192) as usize);
            // SAFETY: the test owns each block until it frees it below, and reads it only as bytes.
            unsafe { backend.memset_d8(block.addr, i as u8, block.size, StreamId::DEFAULT) }.expect("memset");
            // SAFETY: as above.
            unsafe { backend.copy_host_to_device(block.addr, &head, StreamId::DEFAULT) }.expect("host to device");
        }
        let mut checked = 0;
        for (i, block) in blocks.iter().enumerate() {
            let bytes = read(&*backend, block.addr, block.size);
            let head = pattern(i, block.size.min(8192) as usize);
            let wrong = first_difference(&bytes, |at| if at < head.len() { head[at] } else { i as u8 });
            assert_eq!(wrong, None, "{} on {}: block {i} at {:#x}", pool.strategy(), backend.name(), block.addr);
            checked += block.size;
        }
        let stats = pool.stats();
        for block in &blocks {
            pool.free(block.addr).expect("free");
        }
        println!(
            "{:>7} on {:<15} {} blocks, {} written and read back in {:?}; reserved {}, {} fallbacks, {} growths, \
             {} backend calls",
            pool.strategy(),
            backend.name(),
            blocks.len(),
            human_bytes(checked),
            start.elapsed(),
            human_bytes(stats.reserved_bytes.peak),
            stats.fallbacks,
            stats.growths,
            stats.backend_calls,
        );
        assert_eq!(pool.stats().allocated_bytes.current, 0);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn the_gpu_is_listed_with_virtual_memory() {
    let _gpu = gpu();
    let list = devices().expect("device listing");
    for info in &list {
        println!(
            "device {}: {}, {}, virtual memory {} (granularity {:?}), memory pools {}",
            info.ordinal,
            info.name,
            human_bytes(info.total_memory),
            info.virtual_memory_supported,
            info.granularity,
            info.memory_pools_supported
        );
    }
    let first = list.first().expect("at least one GPU");
    assert!(first.total_memory > GIB);
    assert!(first.virtual_memory_supported && first.granularity.is_some_and(u64::is_power_of_two));
    assert_eq!(virtual_memory().granularity(), first.granularity);
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn every_strategy_keeps_its_bytes_on_both_backends() {
    let _gpu = gpu();
    check_every_strategy(device());
    check_every_strategy(virtual_memory());
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn out_of_memory_is_an_error_not_a_crash() {
    let _gpu = gpu();
    let backend = virtual_memory();
    // A pool's cap.
    let config = DynamicConfig::default().initial_size(64 * MIB).cap(Cap::Bytes(256 * MIB));
    let pool = DynamicPool::new(backend.clone(), config).expect("dynamic pool");
    let mut blocks = Vec::new();
    let refusal = loop {
        match pool.allocate(32 * MIB, 256, StreamId::DEFAULT) {
            Ok(block) => blocks.push(block),
            Err(err) => break err,
        }
        assert!(blocks.len() <= 8, "a 256 MiB cap holds at most eight 32 MiB blocks");
    };
    println!("dynamic pool, cap 256 MiB: {} blocks of 32 MiB, then: {refusal}", blocks.len());
    assert!(matches!(refusal, Error::OutOfMemory { cap, .. } if cap == 256 * MIB), "{refusal}");
    pool.free(blocks.pop().expect("a block").addr).expect("free");
    blocks.push(pool.allocate(32 * MIB, 256, StreamId::DEFAULT).expect("room again after a free"));
    for block in blocks {
        pool.free(block.addr).expect("free");
    }
    drop(pool);

    // A fixed pool that refuses fallbacks.
    let fixed =
        FixedPool::new(device(), FixedConfig::default().block_size(MIB).block_count(4).fallback(Fallback::Reject))
            .expect("fixed pool");
    let held: Vec<_> = (0..4).map(|_| fixed.allocate(MIB, 256, StreamId::DEFAULT).expect("block")).collect();
    let refusal = fixed.allocate(MIB, 256, StreamId::DEFAULT).unwrap_err();
    println!("fixed pool of 4 blocks, 5th request: {refusal}");
    assert!(refusal.is_out_of_memory(), "{refusal}");
    for block in held {
        fixed.free(block.addr).expect("free");
    }

    // The device itself: a segment larger than the GPU, then physical chunks past its memory.
    let segments = device();
    let too_big = segments.capacity() + GIB;
    let refusal = segments.allocate_segment(too_big).unwrap_err();
    println!("cuMemAlloc of {}: {refusal}", human_bytes(too_big));
    assert!(matches!(refusal, Error::DeviceOutOfMemory { call: "cuMemAlloc", .. }), "{refusal}");
    let g = backend.granularity().expect("granularity");
    let span = backend.capacity().next_multiple_of(g) + g;
    let range = backend.reserve_range(span).expect("address range larger than the GPU");
    let start = Instant::now();
    let refusal = backend.map(range, span).unwrap_err();
    println!(
        "map of {} in {} chunks: {refusal} (after {:?}, rolled back)",
        human_bytes(span),
        span / g,
        start.elapsed()
    );
    assert!(matches!(refusal, Error::DeviceOutOfMemory { call: "cuMemCreate", .. }), "{refusal}");
    assert_eq!(backend.mapped_chunks(), 0, "the partial batch was given back");
    backend.release_range(range, span).expect("release");
    let block = segments.allocate_segment(64 * MIB).expect("the device still allocates");
    segments.free_segment(block, 64 * MIB).expect("free");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_dynamic_pool_on_virtual_memory_grows_in_place() {
    let _gpu = gpu();
    let backend = virtual_memory();
    let config = DynamicConfig::default().initial_size(64 * MIB).cap(Cap::Bytes(4 * GIB));
    let pool = DynamicPool::new(backend.clone(), config).expect("dynamic pool");
    let first = pool.allocate(48 * MIB, 256, StreamId::DEFAULT).expect("first block");
    let bytes = pattern(7, first.size as usize);
    // SAFETY: the test owns the block and reads it only as bytes.
    unsafe { backend.copy_host_to_device(first.addr, &bytes, StreamId::DEFAULT) }.expect("write");
    let reserved_before = pool.stats().reserved_bytes.current;
    let second = pool.allocate(512 * MIB, 256, StreamId::DEFAULT).expect("a block past the initial size");
    let stats = pool.stats();
    let report = pool.report();
    let ranges = report.segments.iter().filter(|s| s.kind == SegmentKind::VirtualRange).count();
    println!(
        "grew from {} to {} reserved in {} growth(s); first block at {:#x}, second at {:#x}; {} virtual range(s), \
         {} mapped by the backend",
        human_bytes(reserved_before),
        human_bytes(stats.reserved_bytes.current),
        stats.growths,
        first.addr,
        second.addr,
        ranges,
        human_bytes(backend.mapped_bytes()),
    );
    assert!(stats.growths >= 1 && stats.reserved_bytes.current > reserved_before);
    assert_eq!((ranges, backend.reserved_ranges()), (1, 1), "one address range, grown in place");
    let (low, high) = (first.addr.min(second.addr), (first.addr + first.size).max(second.addr + second.size));
    assert!(second.addr > first.addr && backend.holds(low, high - low), "one mapped stretch");
    assert_eq!(read(&*backend, first.addr, first.size), bytes, "growth kept the first block's bytes");
    // SAFETY: the test owns the block and reads it only as bytes.
    unsafe { backend.memset_d8(second.addr, 0x5A, second.size, StreamId::DEFAULT) }.expect("memset");
    let back = read(&*backend, second.addr, second.size);
    assert_eq!(first_difference(&back, |_| 0x5A), None);
    pool.free(first.addr).expect("free");
    pool.free(second.addr).expect("free");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn remap_moves_physical_memory_with_its_bytes() {
    let _gpu = gpu();
    let backend = virtual_memory();
    let g = backend.granularity().expect("granularity");
    let range = backend.reserve_range(16 * g).expect("reserve");
    backend.map(range, 4 * g).expect("map");
    let handles: Vec<_> = (0..4).map(|i| backend.chunk_handle(range + i * g)).collect();
    let bytes = pattern(3, (4 * g) as usize);
    // SAFETY: the test owns the mapped range and reads it only as bytes.
    unsafe { backend.copy_host_to_device(range, &bytes, StreamId::DEFAULT) }.expect("write");
    backend.synchronize().expect("synchronize");
    let start = Instant::now();
    backend.remap(range, range + 8 * g, 4 * g).expect("remap");
    let took = start.elapsed();
    let moved: Vec<_> = (0..4).map(|i| backend.chunk_handle(range + (8 + i) * g)).collect();
    assert_eq!(handles, moved, "the same physical handles, at the new address");
    assert!(!backend.holds(range, g));
    assert_eq!(read(&*backend, range + 8 * g, 4 * g), bytes, "the bytes moved with the memory");
    println!("moved 4 chunks of {} in {took:?}; bytes intact at the new address", human_bytes(g));
    backend.unmap(range + 8 * g, 4 * g).expect("unmap");
    backend.release_range(range, 16 * g).expect("release");
}

/// Pages of several sizes (`map_pages`): each is one handle, moved, aliased and unmapped whole with its
/// bytes; a span that cuts a page is refused and changes nothing, and one that starts where a second
/// mapping of the same handle follows on is not taken for a cut.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn pages_of_several_sizes_move_and_alias_whole() {
    let _gpu = gpu();
    let backend = virtual_memory();
    assert!(backend.supports_large_pages());
    let g = backend.granularity().expect("granularity");
    let range = backend.reserve_range(64 * g).expect("reserve");
    let (free_before, _) = device().memory_info().expect("memory info");
    let start = Instant::now();
    backend.map_pages(range, &[4 * g, g, 2 * g]).expect("map pages of 4, 1 and 2 chunks");
    let took = start.elapsed();
    let (free_after, _) = device().memory_info().expect("memory info");
    assert!(free_before - free_after >= 7 * g, "7 chunks taken from the device: {free_before} -> {free_after}");
    assert_eq!((backend.mapped_chunks(), backend.mapped_bytes()), (7, 7 * g));
    let first = backend.chunk_handle(range).expect("mapped");
    assert!((1..4).all(|i| backend.chunk_handle(range + i * g) == Some(first)), "one handle for the 4-chunk page");
    let bytes = pattern(9, (7 * g) as usize);
    // SAFETY: the test owns the mapped range and reads it only as bytes.
    unsafe { backend.copy_host_to_device(range, &bytes, StreamId::DEFAULT) }.expect("write");
    backend.synchronize().expect("synchronize");
    for (from, size) in [(range, 2 * g), (range + 2 * g, 4 * g), (range + 4 * g, 2 * g), (range + 5 * g, g)] {
        let err = backend.remap(from, range + 32 * g, size).unwrap_err();
        assert!(err.to_string().contains("cuts the page"), "[{from:#x}, +{size}): {err}");
        let err = backend.unmap(from, size).unwrap_err();
        assert!(err.to_string().contains("cuts the page"), "[{from:#x}, +{size}): {err}");
    }
    assert_eq!(read(&*backend, range, 7 * g), bytes, "a refused call changes nothing");
    backend.remap(range, range + 16 * g, 7 * g).expect("remap three pages");
    assert_eq!(backend.chunk_handle(range + 16 * g), Some(first), "the same page, at the new address");
    assert_eq!(read(&*backend, range + 16 * g, 7 * g), bytes, "the bytes moved with the pages");
    // A second mapping of the 4-chunk page right after its first: the span at the second starts a page.
    backend.alias(range + 16 * g, range + 20 * g, 4 * g).unwrap_err();
    backend.alias(range + 16 * g, range + 24 * g, 4 * g).expect("alias after the first mapping");
    backend.unmap(range + 20 * g, 3 * g).expect("unmap the two small pages");
    backend.alias(range + 16 * g, range + 20 * g, 4 * g).expect("alias right after the first mapping");
    assert_eq!(backend.mapped_chunks(), 4, "aliased memory counted once");
    assert_eq!(read(&*backend, range + 20 * g, 4 * g), bytes[..(4 * g) as usize], "the alias reads the page");
    backend.remap(range + 20 * g, range + 40 * g, 4 * g).expect("move the second mapping whole");
    backend.unmap(range + 16 * g, 4 * g).expect("unmap the first mapping");
    backend.unmap(range + 24 * g, 4 * g).expect("unmap the third mapping");
    assert_eq!(backend.mapped_chunks(), 4);
    backend.unmap(range + 40 * g, 4 * g).expect("unmap the last mapping");
    assert_eq!((backend.mapped_chunks(), backend.mapped_bytes()), (0, 0));
    let (free_end, _) = device().memory_info().expect("memory info");
    assert!(free_end + 4 * g >= free_before, "every page given back: {free_before} -> {free_end}");
    println!("mapped pages of 4, 1 and 2 chunks of {} in {took:?}; moved, aliased and unmapped whole", human_bytes(g));
    backend.release_range(range, 64 * g).expect("release");
}

/// On stream A, a long run of memsets into block X; X is freed on A and a block of the same size is
/// allocated on B (the pool hands out X again) and written on B. The pool must order B's write after
/// A's work: the bytes end as B wrote them.
fn cross_stream_reuse<B: CudaMemory + 'static>(backend: Arc<B>, pool: &dyn Pool) {
    let context = backend.context().expect("a real driver");
    let (a, b) = (context.new_stream().expect("stream"), context.new_stream().expect("stream"));
    let (a, b) = (backend.register_stream(&a).expect("register"), backend.register_stream(&b).expect("register"));
    let size = 256 * MIB;
    // A block on B first, so the pool knows two streams before the free.
    let small = pool.allocate(MIB, 256, b).expect("small block on B");
    let x = pool.allocate(size, 256, a).expect("block X on A");
    let start = Instant::now();
    for i in 0..400u32 {
        // SAFETY: the test owns X until it frees it below, and reads it only as bytes.
        unsafe { backend.memset_d8(x.addr, if i % 2 == 0 { 0x11 } else { 0x22 }, size, a) }.expect("memset on A");
    }
    let queued = start.elapsed();
    pool.free(x.addr).expect("free X on A");
    let y = pool.allocate(size, 256, b).expect("block Y on B");
    let reused = y.addr < x.addr + size && x.addr < y.addr + size;
    // SAFETY: the test owns Y and reads it only as bytes.
    unsafe { backend.memset_d8(y.addr, 0x33, size, b) }.expect("memset on B");
    backend.synchronize().expect("synchronize");
    let finished = start.elapsed();
    let bytes = read(&*backend, y.addr, size);
    let stats = pool.stats();
    println!(
        "{} on {}: 400 memsets of {} queued on A in {queued:?}, done after {finished:?}; Y {} X; {} event(s) \
         recorded, {} stream wait(s), {} synchronisation(s)",
        pool.strategy(),
        backend.name(),
        human_bytes(size),
        if reused { "reuses" } else { "does not reuse" },
        stats.events_recorded,
        stats.stream_waits,
        stats.synchronizations,
    );
    assert!(reused, "the pool handed out X's memory again");
    assert_eq!(first_difference(&bytes, |_| 0x33), None, "B's bytes everywhere: B ran after A");
    assert!(stats.stream_waits + stats.synchronizations >= 1, "the pool ordered B after A");
    pool.free(y.addr).expect("free");
    pool.free(small.addr).expect("free");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn cross_stream_reuse_waits_for_the_freeing_stream() {
    let _gpu = gpu();
    let backend = virtual_memory();
    let dynamic = DynamicPool::new(backend.clone(), DynamicConfig::default().initial_size(512 * MIB)).expect("pool");
    cross_stream_reuse(backend, &dynamic);
    let backend = device();
    let fixed = FixedPool::new(backend.clone(), FixedConfig::default().block_size(256 * MIB).block_count(3))
        .expect("fixed pool");
    cross_stream_reuse(backend, &fixed);
}

/// A dynamic pool on a stream of its own (aliasing as `alias` says) whose block X of [`BUSY_X`] bytes was
/// freed while 1000 memsets queued on the stream still write it, with block Z right after X; when the
/// memsets began to be queued, how long queueing them took, and an event recorded right after them.
struct FreedUnderMemsets {
    backend: Arc<CudaVirtual>,
    pool: DynamicPool,
    stream: StreamId,
    x: u64,
    z: u64,
    start: Instant,
    queued: std::time::Duration,
    memsets_done: EventId,
}

/// The bytes of X in [`FreedUnderMemsets`].
const BUSY_X: u64 = 256 * MIB;

fn freed_under_memsets(alias: bool) -> FreedUnderMemsets {
    let backend = virtual_memory();
    let context = backend.context().expect("a real driver");
    let stream = context.new_stream().expect("stream");
    let stream = backend.register_stream(&stream).expect("register");
    let config = DynamicConfig::default().initial_size(0).growth_factor(1.01).wait_for_idle(true).alias_in_use(alias);
    let pool = DynamicPool::new(backend.clone(), config).expect("pool");
    let x = pool.allocate(BUSY_X, 256, stream).expect("block X").addr;
    let z = pool.allocate(2 * MIB, 256, stream).expect("block Z after X").addr;
    let start = Instant::now();
    for i in 0..1000u32 {
        // SAFETY: the test owns X until it frees it below, and reads it only as bytes.
        unsafe { backend.memset_d8(x, if i % 2 == 0 { 0x11 } else { 0x22 }, BUSY_X, stream) }.expect("memset X");
    }
    let queued = start.elapsed();
    let memsets_done = backend.record_event(stream).expect("event after the memsets");
    pool.free(x).expect("free X");
    FreedUnderMemsets { backend, pool, stream, x, z, start, queued, memsets_done }
}

/// On one stream, a long run of memsets into block X; X is freed and a larger block W allocated that lands
/// where nothing is mapped, so the pool (aliasing turned off) moves X's idle chunks under it. It must wait
/// for the memsets (for the event that ends their epoch, not the whole device) before it unmaps them: the
/// device reports no fault, the allocation took as long as the memsets had left to run, and W holds what
/// was written to it.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn moving_idle_chunks_waits_for_the_work_that_last_used_them() {
    let _gpu = gpu();
    let FreedUnderMemsets { backend, pool, stream: a, z, start, queued, memsets_done, .. } = freed_under_memsets(false);
    let size = BUSY_X;
    let w = pool.allocate(2 * size, 256, a).expect("block W");
    let allocated = start.elapsed();
    let waited = backend.event_complete(memsets_done).expect("event query");
    backend.release_event(memsets_done);
    // SAFETY: the test owns W and reads it only as bytes.
    unsafe { backend.memset_d8(w.addr, 0x33, 2 * size, a) }.expect("memset W");
    backend.synchronize().expect("no fault: nothing was unmapped under the memsets");
    let finished = start.elapsed();
    let bytes = read(&*backend, w.addr, 2 * size);
    let stats = pool.stats();
    println!(
        "1000 memsets of {} queued in {queued:?}; X freed and W ({}) allocated by {allocated:?}, all done after {finished:?}; {} chunks moved, {} event wait(s), {} synchronisation(s)",
        human_bytes(size),
        human_bytes(2 * size),
        stats.chunks_moved,
        stats.event_waits,
        stats.synchronizations,
    );
    assert!(stats.chunks_moved >= size / backend.granularity().unwrap(), "X's chunks moved: {stats:?}");
    assert_eq!((stats.event_waits, stats.synchronizations), (1, 0), "{stats:?}");
    assert!(waited && allocated * 2 > finished, "the allocation waited for the memsets");
    assert_eq!(first_difference(&bytes, |_| 0x33), None, "W holds what was written to it");
    pool.free(w.addr).expect("free");
    pool.free(z).expect("free");
}

/// The same, with aliasing (the default): W gets X's physical memory at once, mapped at W's address too,
/// while the memsets still write through X's: no wait, no fault. W's own memset, queued after them on the
/// same stream, is what W holds. While the memsets run, a block U is carved away from X's old addresses,
/// without a wait. Once they are done, a block V lands on X's old addresses: they are unmapped without a
/// wait and backed anew, and W and U keep their bytes.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn aliasing_idle_chunks_in_use_lets_queued_work_finish_first() {
    let _gpu = gpu();
    let FreedUnderMemsets { backend, pool, stream: a, x, z, start, queued, memsets_done } = freed_under_memsets(true);
    let size = BUSY_X;
    let w = pool.allocate(2 * size, 256, a).expect("block W");
    let allocated = start.elapsed();
    let u = pool.allocate(size, 256, a).expect("block U");
    let still_running = !backend.event_complete(memsets_done).expect("event query");
    backend.release_event(memsets_done);
    // SAFETY: the test owns W and U and reads them only as bytes.
    unsafe { backend.memset_d8(w.addr, 0x33, 2 * size, a) }.expect("memset W");
    // SAFETY: as above.
    unsafe { backend.memset_d8(u.addr, 0x55, size, a) }.expect("memset U");
    backend.synchronize().expect("no fault: X's addresses stayed mapped under the memsets");
    let finished = start.elapsed();
    let stats = pool.stats();
    println!(
        "1000 memsets of {} queued in {queued:?}; X freed and W ({}) allocated by {allocated:?}, all done after \
         {finished:?}; {} chunks aliased, {} moved, {} event wait(s), {} synchronisation(s); device holds {} for \
         the pool's {} reserved",
        human_bytes(size),
        human_bytes(2 * size),
        stats.chunks_aliased,
        stats.chunks_moved,
        stats.event_waits,
        stats.synchronizations,
        human_bytes(backend.mapped_bytes()),
        human_bytes(stats.reserved_bytes.current),
    );
    assert!(stats.chunks_aliased >= size / backend.granularity().unwrap(), "X's chunks aliased: {stats:?}");
    assert_eq!((stats.event_waits, stats.synchronizations), (0, 0), "{stats:?}");
    assert!(still_running, "W and U were handed out while the memsets still ran: neither waited for them");
    assert!(u.addr + size <= x || u.addr >= x + size, "U carved away from X's old addresses");
    assert_eq!(first_difference(&read(&*backend, u.addr, size), |_| 0x55), None, "U holds its own bytes");
    assert_eq!(backend.mapped_bytes(), stats.reserved_bytes.current, "aliased memory counted once");
    assert_eq!(first_difference(&read(&*backend, w.addr, 2 * size), |_| 0x33), None, "W holds its own bytes");
    let v = pool.allocate(size, 256, a).expect("block V");
    assert_eq!(v.addr, x, "V lands on X's old addresses");
    // SAFETY: the test owns V and reads it only as bytes.
    unsafe { backend.memset_d8(v.addr, 0x44, size, a) }.expect("memset V");
    backend.synchronize().expect("no fault");
    let stats = pool.stats();
    println!("V on X's old addresses: {} event wait(s) in all", stats.event_waits);
    assert_eq!((stats.event_waits, stats.synchronizations), (0, 0), "the memsets were done: {stats:?}");
    assert_eq!(first_difference(&read(&*backend, v.addr, size), |_| 0x44), None, "V holds its bytes");
    assert_eq!(first_difference(&read(&*backend, w.addr, 2 * size), |_| 0x33), None, "W kept its bytes");
    assert_eq!(first_difference(&read(&*backend, u.addr, size), |_| 0x55), None, "U kept its bytes");
    assert_eq!(backend.mapped_bytes(), stats.reserved_bytes.current);
    for block in [v.addr, w.addr, u.addr, z] {
        pool.free(block).expect("free");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn pool_slices_work_with_cudarc_copies() {
    let _gpu = gpu();
    let backend = virtual_memory();
    let pool = DynamicPool::new(backend.clone(), DynamicConfig::default().initial_size(64 * MIB)).expect("pool");
    let stream = backend.context().expect("a real driver").new_stream().expect("stream");
    let n = 4 << 20;
    let mut a = PoolSlice::<f32, _>::zeroed(&pool, &backend, n, &stream).expect("slice a");
    let mut b = PoolSlice::<f32, _>::zeroed(&pool, &backend, n, &stream).expect("slice b");
    assert!(stream.clone_dtoh(&a).expect("read").iter().all(|&x| x == 0.0), "zeroed");
    let host: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    stream.memcpy_htod(&host, &mut a).expect("host to device");
    stream.memcpy_dtod(&a, &mut b).expect("device to device");
    stream.memset_zeros(&mut a).expect("memset");
    assert_eq!(stream.clone_dtoh(&b).expect("read"), host);
    assert!(stream.clone_dtoh(&a).expect("read").iter().all(|&x| x == 0.0));
    println!(
        "PoolSlice<f32> of {} at {:#x} and {:#x}: copies and memsets checked",
        human_bytes(n as u64 * 4),
        a.addr(),
        b.addr()
    );
    // A pool on another backend is refused.
    let other = virtual_memory();
    let err = PoolSlice::<f32, _>::zeroed(&pool, &other, 16, &stream).unwrap_err();
    assert!(matches!(err, CudaError::ForeignPool { .. }), "{err}");
    drop((a, b));
    assert_eq!(pool.stats().allocated_bytes.current, 0, "slices give their memory back when dropped");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn events_are_reused_and_answer_for_their_stream() {
    let _gpu = gpu();
    let backend = device();
    let stream = backend.context().expect("a real driver").new_stream().expect("stream");
    let stream = backend.register_stream(&stream).expect("register");
    let start = Instant::now();
    for _ in 0..1000 {
        let event = backend.record_event(stream).expect("record");
        backend.release_event(event);
    }
    let per_event = start.elapsed() / 1000;
    let event = backend.record_event(stream).expect("record");
    backend.synchronize().expect("synchronize");
    assert!(backend.event_complete(event).expect("query"));
    backend.stream_wait_event(StreamId::DEFAULT, event).expect("wait");
    println!("1000 events recorded and released in {per_event:?} each; {} created", backend.events_created());
    assert!(backend.events_created() <= 2, "released events are recorded again");
    let unknown = backend.record_event(StreamId(0x1234_5678)).unwrap_err();
    assert!(unknown.to_string().contains("not registered"), "{unknown}");
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn dropping_a_backend_gives_every_byte_back() {
    let _gpu = gpu();
    let probe = device();
    let (free_before, total) = probe.memory_info().expect("memory info");
    {
        let backend = virtual_memory();
        let g = backend.granularity().expect("granularity");
        let range = backend.reserve_range(1024 * g).expect("reserve");
        backend.map(range, 512 * g).expect("map");
        backend.allocate_segment(512 * MIB).expect("segment");
        let _event = backend.record_event(StreamId::DEFAULT).expect("event");
        let (free_held, _) = probe.memory_info().expect("memory info");
        println!(
            "held {} of {} (free {} -> {})",
            human_bytes(free_before - free_held),
            human_bytes(total),
            human_bytes(free_before),
            human_bytes(free_held)
        );
        assert!(free_before - free_held >= 512 * g + 512 * MIB);
    }
    let (free_after, _) = probe.memory_info().expect("memory info");
    println!("after the drop: free {}", human_bytes(free_after));
    assert!(free_after + 64 * MIB >= free_before, "everything given back: {free_before} -> {free_after}");
}
