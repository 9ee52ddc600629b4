//! The entry points PyTorch loads (`torch.cuda.memory.CUDAPluggableAllocator(path,
//! "vrampool_torch_alloc", "vrampool_torch_free")`), and the C functions on the per-device pools behind
//! them.

use std::ffi::{c_char, c_int, c_void};
use std::ptr;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use vrampool::DEFAULT_ALIGNMENT;

use crate::abi_boundary::{guarded, guarded_status};
use crate::c_string::hand_out;
use crate::device_pools::{DevicePools, report};
use crate::error::CapiError;
use crate::handle_table::HANDLES;
use crate::pool_api::{NO_LIMIT, PoolHandle, write_counters, write_out};
use crate::pool_counters::Counters;
use crate::report_visit::{BlockVisitor, SegmentVisitor, visit};
use crate::status::Status;

/// The per-device pools, configured by `VRAMPOOL_CONF` when first used.
static DEVICE_POOLS: LazyLock<DevicePools> = LazyLock::new(DevicePools::from_env);

/// The alignment of every allocation PyTorch gets: 256 bytes, what `cudaMalloc` guarantees.
pub const TORCH_ALIGNMENT: u64 = DEFAULT_ALIGNMENT;

/// How many failed allocations and frees are written on stderr (PyTorch's own message does not say
/// why); the rest are counted in the stats.
const FAILURES_PRINTED: u64 = 8;

/// Failed calls written on stderr so far.
static FAILURES_SEEN: AtomicU64 = AtomicU64::new(0);

/// Writes a failure on stderr while fewer than [`FAILURES_PRINTED`] have been; config errors are left to
/// the pools' own once-only report.
#[cold]
fn note_failure(what: &str, err: &CapiError) {
    if err.is_config() {
        return;
    }
    let seen = FAILURES_SEEN.fetch_add(1, Ordering::Relaxed);
    if seen < FAILURES_PRINTED {
        let more = if seen + 1 == FAILURES_PRINTED { " (further failures are not printed)" } else { "" };
        report(&format!("vrampool: {what} failed: {err}{more}"));
    }
}

/// PyTorch's allocation function: `size` bytes on CUDA device `device` for use on `stream` (PyTorch's
/// current stream). Returns the device pointer, or NULL on failure with the reason in
/// `vrampool_last_error()` (and, for the first few failures, on stderr). A `size` of 0 returns NULL
/// without error.
///
/// The pool of each device is made on its first allocation from the config string in `VRAMPOOL_CONF`
/// (default: the adaptive pool on CUDA virtual memory); an invalid `VRAMPOOL_CONF` is reported once on
/// stderr, and then every allocation fails with that reason. Thread-safe.
///
/// # Safety
/// `stream` is NULL (the legacy default stream) or a `cudaStream_t` of the device's primary context
/// that stays alive for as long as the process (PyTorch's streams do).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vrampool_torch_alloc(size: usize, device: c_int, stream: *mut c_void) -> *mut c_void {
    const FUNCTION: &str = "vrampool_torch_alloc";
    guarded(FUNCTION, || {
        if size == 0 {
            return Ok(ptr::null_mut());
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { allocate(size, device, stream) }
            .inspect_err(|err| note_failure(&format!("allocation of {size} bytes on device {device}"), err))
    })
    .unwrap_or(ptr::null_mut())
}

/// The body of `vrampool_torch_alloc` for a size above 0.
///
/// # Safety
/// As for `vrampool_torch_alloc`.
unsafe fn allocate(size: usize, device: c_int, stream: *mut c_void) -> Result<*mut c_void, CapiError> {
    let ordinal = DevicePools::ordinal("vrampool_torch_alloc", device)?;
    let pool = DEVICE_POOLS.get_or_make(ordinal)?;
    // SAFETY: the caller vouches that the stream is one of the device's primary context (PyTorch uses the
    // primary context) and lives as long as the process.
    let addr = unsafe { pool.allocate(size as u64, TORCH_ALIGNMENT, stream.addr() as u64) }?;
    Ok(ptr::without_provenance_mut(addr as usize))
}

/// PyTorch's free function: frees `ptr`, which `vrampool_torch_alloc` returned. The pool knows each
/// block's size and stream, so `size` and `stream` are not needed. `device` is where to look first: a
/// negative `device`, or a pointer the pool of `device` did not hand out, is looked for in every device's
/// pool. NULL is ignored; a pointer no pool handed out (or freed already) is left alone, recorded in
/// `vrampool_last_error()` and written on stderr (the first few times).
#[unsafe(no_mangle)]
pub extern "C" fn vrampool_torch_free(ptr: *mut c_void, size: usize, device: c_int, stream: *mut c_void) {
    const FUNCTION: &str = "vrampool_torch_free";
    let _ = stream;
    let _ = guarded(FUNCTION, || {
        if ptr.is_null() {
            return Ok(());
        }
        free_anywhere(ptr.addr() as u64, device).inspect_err(|err| {
            note_failure(&format!("free of {:#x} ({size} bytes) on device {device}", ptr.addr()), err)
        })
    });
}

/// The device whose pool freed last: where a free that names no device looks first (on one GPU, always
/// the right one).
static LAST_FREED_ON: AtomicUsize = AtomicUsize::new(0);

/// Frees `addr` in the pool of `device`, or (where `device` is negative) of the device that freed last; where
/// that pool did not hand `addr` out, in whichever device's pool did.
#[inline]
fn free_anywhere(addr: u64, device: c_int) -> Result<(), CapiError> {
    const FUNCTION: &str = "vrampool_torch_free";
    let first =
        if device < 0 { LAST_FREED_ON.load(Ordering::Relaxed) } else { DevicePools::ordinal(FUNCTION, device)? };
    match DEVICE_POOLS.existing_or_why(FUNCTION, first).and_then(|pool| pool.free(addr)) {
        Err(err) if not_this_pools(&err) => free_elsewhere(addr, first, err),
        done => done,
    }
}

/// Whether a failed free says only that the pool did not hand `addr` out (so another pool may have).
fn not_this_pools(err: &CapiError) -> bool {
    matches!(err.status(), Status::ForeignAddress | Status::NotLive | Status::NoPool)
}

/// How much a refusal of a free says: a double free, over an address outside the pool, over a device
/// without a pool.
fn telling(err: &CapiError) -> u8 {
    match err.status() {
        Status::NotLive => 2,
        Status::ForeignAddress => 1,
        _ => 0,
    }
}

/// Frees `addr` in the first device pool other than `skip` that handed it out, and remembers that device
/// for the next free that names none; where no pool did, the most [`telling`] of the refusals, starting from
/// `first`.
#[cold]
fn free_elsewhere(addr: u64, skip: usize, first: CapiError) -> Result<(), CapiError> {
    let mut best = first;
    for (ordinal, pool) in DEVICE_POOLS.all() {
        if ordinal == skip {
            continue;
        }
        match pool.free(addr) {
            Err(err) if not_this_pools(&err) => {
                if telling(&err) > telling(&best) {
                    best = err;
                }
            }
            Ok(()) => {
                LAST_FREED_ON.store(ordinal, Ordering::Relaxed);
                return Ok(());
            }
            Err(err) => return Err(err),
        }
    }
    Err(best)
}

/// Notes that work queued on `stream` uses the live allocation at `ptr` of device `device` (PyTorch's
/// `record_stream`): its free is held back until the work queued on `stream` before the free has run.
/// NULL does nothing.
///
/// # Safety
/// `stream` is NULL (the legacy default stream) or a `cudaStream_t` of the device's primary context that
/// stays alive for as long as the process.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vrampool_torch_record_stream(ptr: *mut c_void, device: c_int, stream: *mut c_void) -> c_int {
    const FUNCTION: &str = "vrampool_torch_record_stream";
    guarded_status(FUNCTION, || {
        if ptr.is_null() {
            return Ok(());
        }
        let ordinal = DevicePools::ordinal(FUNCTION, device)?;
        let pool = DEVICE_POOLS.existing_or_why(FUNCTION, ordinal)?;
        // SAFETY: the caller vouches for the stream as `record_stream` asks.
        unsafe { pool.record_stream(ptr.addr() as u64, stream.addr() as u64) };
        Ok(())
    })
}

/// Writes the counters of device `device`'s pool to `*out` (the cheap stats call: no report, no string).
/// `VRAMPOOL_STATUS_NO_POOL` where the device has no pool yet.
///
/// # Safety
/// `out` points to a writable `vrampool_counters`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vrampool_device_counters(device: c_int, out: *mut Counters) -> c_int {
    const FUNCTION: &str = "vrampool_device_counters";
    guarded_status(FUNCTION, || {
        let ordinal = DevicePools::ordinal(FUNCTION, device)?;
        let counters = DEVICE_POOLS.existing_or_why(FUNCTION, ordinal)?.counters();
        // SAFETY: the caller's contract, passed on.
        unsafe { write_counters(FUNCTION, out, counters) }
    })
}

/// Sets the most device `device`'s pool may hold from the device from now on (PyTorch's
/// `set_per_process_memory_fraction`), as `vrampool_pool_set_limit` does; `UINT64_MAX` gives the configured
/// cap back. Where the device has no pool yet, the limit applies to the pool when it is made. Writes the
/// limit in force to `*out_limit` (where not NULL; `bytes` itself before the pool is made).
///
/// # Safety
/// `out_limit` is NULL or points to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vrampool_device_set_limit(device: c_int, bytes: u64, out_limit: *mut u64) -> c_int {
    const FUNCTION: &str = "vrampool_device_set_limit";
    guarded_status(FUNCTION, || {
        let ordinal = DevicePools::ordinal(FUNCTION, device)?;
        let limit = DEVICE_POOLS.set_limit(ordinal, (bytes != NO_LIMIT).then_some(bytes))?;
        // SAFETY: the caller vouches that a non-null `out_limit` points to a writable u64.
        unsafe { write_out(out_limit, limit) };
        Ok(())
    })
}

/// Starts the peaks of device `device`'s pool again from their values now (PyTorch's
/// `reset_peak_memory_stats`). `VRAMPOOL_STATUS_NO_POOL` where the device has no pool yet.
#[unsafe(no_mangle)]
pub extern "C" fn vrampool_device_reset_peaks(device: c_int) -> c_int {
    const FUNCTION: &str = "vrampool_device_reset_peaks";
    guarded_status(FUNCTION, || {
        let ordinal = DevicePools::ordinal(FUNCTION, device)?;
        DEVICE_POOLS.existing_or_why(FUNCTION, ordinal)?.reset_peaks();
        Ok(())
    })
}

/// `vrampool_pool_visit` on device `device`'s pool: its segments, then its live blocks, one callback each.
/// `VRAMPOOL_STATUS_NO_POOL` where the device has no pool yet.
///
/// # Safety
/// As for `vrampool_pool_visit`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vrampool_device_visit(
    device: c_int,
    on_segment: SegmentVisitor,
    on_block: BlockVisitor,
    context: *mut c_void,
) -> c_int {
    const FUNCTION: &str = "vrampool_device_visit";
    guarded_status(FUNCTION, || {
        let ordinal = DevicePools::ordinal(FUNCTION, device)?;
        let report = DEVICE_POOLS.existing_or_why(FUNCTION, ordinal)?.report();
        // SAFETY: the caller's contract, passed on.
        unsafe { visit(&report, on_segment, on_block, context) }
    })
}

/// Makes a private pool on device `device`, for memory that must stay apart from the device's pool (a CUDA
/// graph's, a `torch.cuda.MemPool`'s): a dynamic pool on the device and page size of `VRAMPOOL_CONF`, with
/// its cap, that grows from one page in plain segments (no virtual-memory remapping, so nothing it does
/// records or waits for events while it serves one stream, as a graph capture needs). Use it with the
/// `vrampool_pool_*` functions; destroy it with `vrampool_pool_destroy`. NULL on failure.
#[unsafe(no_mangle)]
pub extern "C" fn vrampool_device_private_pool_create(device: c_int) -> *mut PoolHandle {
    const FUNCTION: &str = "vrampool_device_private_pool_create";
    guarded(FUNCTION, || {
        let ordinal = DevicePools::ordinal(FUNCTION, device)?;
        let pool = DEVICE_POOLS.make_private(ordinal)?;
        Ok(ptr::without_provenance_mut(HANDLES.insert(pool)))
    })
    .unwrap_or(ptr::null_mut())
}

/// The counters and detailed report of device `device`'s pool as one JSON object (as
/// `vrampool_pool_stats_json`, with `device` set: at most 1024 segments and 4096 blocks listed). Free it with `vrampool_string_free`. NULL where the
/// device has no pool yet (`VRAMPOOL_STATUS_NO_POOL`) or `VRAMPOOL_CONF` is invalid
/// (`VRAMPOOL_STATUS_BAD_CONFIG`).
#[unsafe(no_mangle)]
pub extern "C" fn vrampool_stats_json(device: c_int) -> *mut c_char {
    const FUNCTION: &str = "vrampool_stats_json";
    guarded(FUNCTION, || {
        let ordinal = DevicePools::ordinal(FUNCTION, device)?;
        Ok(hand_out(DEVICE_POOLS.existing_or_why(FUNCTION, ordinal)?.to_json(Some(ordinal))))
    })
    .unwrap_or(ptr::null_mut())
}

/// 1 where device `device` has a pool (made by its first allocation), 0 where it has none yet, or
/// `VRAMPOOL_STATUS_BAD_ARGUMENT` for an ordinal out of range.
#[unsafe(no_mangle)]
pub extern "C" fn vrampool_device_pool_exists(device: c_int) -> c_int {
    const FUNCTION: &str = "vrampool_device_pool_exists";
    guarded(FUNCTION, || {
        let ordinal = DevicePools::ordinal(FUNCTION, device)?;
        Ok(c_int::from(DEVICE_POOLS.existing(ordinal).is_some()))
    })
    .unwrap_or_else(|status| status.code())
}

/// Gives the wholly free memory of device `device`'s pool back to the device, and writes the bytes given
/// back to `*out_bytes` (where not NULL).
///
/// # Safety
/// `out_bytes` is NULL or points to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vrampool_device_trim(device: c_int, out_bytes: *mut u64) -> c_int {
    const FUNCTION: &str = "vrampool_device_trim";
    guarded_status(FUNCTION, || {
        let ordinal = DevicePools::ordinal(FUNCTION, device)?;
        let bytes = DEVICE_POOLS.existing_or_why(FUNCTION, ordinal)?.trim()?;
        if !out_bytes.is_null() {
            // SAFETY: the caller vouches that a non-null `out_bytes` points to a writable u64.
            unsafe { out_bytes.write_unaligned(bytes) };
        }
        Ok(())
    })
}

/// Trims the pool of every device that has one (see `vrampool_device_trim`), and writes the bytes given
/// back in all to `*out_bytes` (where not NULL; the sum saturates at `UINT64_MAX`). Every pool is trimmed
/// even where one fails; the first failure is returned.
///
/// # Safety
/// `out_bytes` is NULL or points to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vrampool_device_trim_all(out_bytes: *mut u64) -> c_int {
    guarded_status("vrampool_device_trim_all", || {
        let mut total = 0;
        let mut first_failure = None;
        for (_, pool) in DEVICE_POOLS.all() {
            match pool.trim() {
                Ok(bytes) => total = u64::saturating_add(total, bytes),
                Err(err) => first_failure = first_failure.or(Some(err)),
            }
        }
        if !out_bytes.is_null() {
            // SAFETY: the caller vouches that a non-null `out_bytes` points to a writable u64.
            unsafe { out_bytes.write_unaligned(total) };
        }
        first_failure.map_or(Ok(()), Err)
    })
}
