//! The C API for pools a program makes itself: create from a config string, allocate, free, trim,
//! stats, destroy.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr;

use vrampool::{BackendKind, DEFAULT_ALIGNMENT, PoolSpec};

use crate::abi_boundary::{guarded, guarded_status};
use crate::backed_pool::BackedPool;
use crate::c_string::hand_out;
use crate::device_pools::MAX_DEVICES;
use crate::error::CapiError;
use crate::handle_table::HANDLES;
use crate::pool_counters::Counters;
use crate::report_visit::{BlockVisitor, SegmentVisitor, visit};

/// A pool made with `vrampool_pool_create`: an opaque handle, valid until `vrampool_pool_destroy`.
pub struct PoolHandle {
    _opaque: [u8; 0],
}

/// The device a pool takes its memory from where the config string names no `backend`: CUDA virtual
/// memory, so the pool grows in place.
pub const DEFAULT_BACKEND: BackendKind = BackendKind::CudaVirtual;

/// The config string at `config` (NULL: the empty string, every default).
///
/// # Safety
/// `config` is NULL or a NUL-terminated string.
unsafe fn config_text<'a>(function: &'static str, config: *const c_char) -> Result<&'a str, CapiError> {
    if config.is_null() {
        return Ok("");
    }
    // SAFETY: the caller vouches that `config` is a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(config) };
    bytes.to_str().map_err(|err| CapiError::NotUtf8 { function, argument: "config", offset: err.valid_up_to() })
}

/// The live pool behind `pool`.
fn lookup(function: &'static str, pool: *mut PoolHandle) -> Result<std::sync::Arc<BackedPool>, CapiError> {
    if pool.is_null() {
        return Err(CapiError::NullArgument { function, argument: "pool" });
    }
    HANDLES.get(pool.addr()).ok_or_else(|| CapiError::NoSuchPool { function, handle: pool.addr() })
}

/// Writes `value` to `out` where `out` is not NULL.
///
/// # Safety
/// `out` is NULL or points to a writable `uint64_t`.
pub(crate) unsafe fn write_out(out: *mut u64, value: u64) {
    if !out.is_null() {
        // SAFETY: the caller vouches that a non-null `out` points to a writable u64.
        unsafe { out.write_unaligned(value) };
    }
}

/// Makes a pool on device 0 from a config string (`strategy=hybrid,coverage=0.9,...`, the syntax of the
/// `vrampool` command; NULL or "" for every default). `backend=` picks the device: `cuda-vm` (CUDA
/// virtual memory, the default), `cuda` (`cuMemAlloc` segments), `host` (host memory, for tests; it
/// pretends to hold 4 GiB) or `sim` (the simulated H200). The addresses `host` and `sim` hand out are
/// synthetic, not pointers: no memory of the pool's lies at them, so reading or writing through one is
/// undefined behaviour (a segmentation fault, typically), and no C function reads or writes the bytes
/// behind them; such a pool serves to exercise the calls, the counters and the errors without a GPU.
///
/// Returns NULL on failure, with `vrampool_last_error()` saying why (a bad config string names the bad
/// key) and `vrampool_last_error_code()` giving the status.
///
/// # Safety
/// `config` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vrampool_pool_create(config: *const c_char) -> *mut PoolHandle {
    // SAFETY: the same contract, passed on.
    unsafe { create("vrampool_pool_create", config, 0) }
}

/// `vrampool_pool_create` on CUDA device `device`. The host and simulated devices take the device ordinals
/// 0 to 63 (an ordinal out of that range is `VRAMPOOL_STATUS_BAD_ARGUMENT`) and give every pool, whatever its
/// ordinal, an address range of its own: a pointer of one pool is foreign to every other. A GPU's ordinal
/// is the driver's to refuse (`VRAMPOOL_STATUS_DEVICE`).
///
/// # Safety
/// `config` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vrampool_pool_create_on_device(config: *const c_char, device: c_int) -> *mut PoolHandle {
    // SAFETY: the same contract, passed on.
    unsafe { create("vrampool_pool_create_on_device", config, device) }
}

/// Makes a pool for the C function `function`.
///
/// # Safety
/// `config` is NULL or a NUL-terminated string.
unsafe fn create(function: &'static str, config: *const c_char, device: c_int) -> *mut PoolHandle {
    guarded(function, || {
        // SAFETY: the caller's contract.
        let text = unsafe { config_text(function, config) }?;
        let spec = PoolSpec::parse(text)?;
        // The simulated device and host memory serve the ordinals the PyTorch entry points do; a GPU's
        // ordinal is the driver's to refuse.
        let last = match spec.backend.unwrap_or(DEFAULT_BACKEND) {
            BackendKind::Sim | BackendKind::Host => MAX_DEVICES - 1,
            BackendKind::Cuda | BackendKind::CudaVirtual => c_int::MAX as usize,
        };
        let ordinal = usize::try_from(device).ok().filter(|&ordinal| ordinal <= last).ok_or(CapiError::BadDevice {
            function,
            device: device.into(),
            last,
        })?;
        let pool = BackedPool::build(&spec, DEFAULT_BACKEND, ordinal)?;
        Ok(ptr::without_provenance_mut(HANDLES.insert(pool)))
    })
    .unwrap_or(ptr::null_mut())
}

/// Destroys a pool: its memory goes back to the device (allocations still live are freed with it). NULL
/// is ignored; a handle that is not live is left alone and recorded as the last error
/// (`VRAMPOOL_STATUS_NO_POOL`). A call on another thread that is using the pool finishes first.
#[unsafe(no_mangle)]
pub extern "C" fn vrampool_pool_destroy(pool: *mut PoolHandle) {
    let _ = guarded("vrampool_pool_destroy", || {
        if pool.is_null() {
            return Ok(());
        }
        HANDLES
            .remove(pool.addr())
            .map(drop)
            .ok_or(CapiError::NoSuchPool { function: "vrampool_pool_destroy", handle: pool.addr() })
    });
}

/// Allocates `size` bytes aligned to `alignment` (a power of two; 0 means 256, and every block is
/// aligned to at least 256 bytes) for use on `stream`, and writes the address to `*out_addr`.
///
/// A `size` of 0 allocates nothing, writes 0 and returns `VRAMPOOL_STATUS_OK` (free of 0 does nothing, as
/// with malloc and free). Returns `VRAMPOOL_STATUS_OUT_OF_MEMORY` where the pool cannot serve the request,
/// and `VRAMPOOL_STATUS_BAD_ARGUMENT` for an alignment larger than the pool gives (the error names the
/// largest).
///
/// # Safety
/// `out_addr` points to a writable `uint64_t`. On a CUDA device `stream` is 0 or a `CUstream` of the
/// device's primary context that stays alive for as long as the pool (it is registered with the device
/// on first use); on the host and simulated devices any number is a stream label.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vrampool_pool_alloc(
    pool: *mut PoolHandle,
    size: usize,
    alignment: usize,
    stream: u64,
    out_addr: *mut u64,
) -> c_int {
    const FUNCTION: &str = "vrampool_pool_alloc";
    guarded_status(FUNCTION, || {
        let pool = lookup(FUNCTION, pool)?;
        if out_addr.is_null() {
            return Err(CapiError::NullArgument { function: FUNCTION, argument: "out_addr" });
        }
        // SAFETY: `out_addr` is not null, and the caller vouches that it points to a writable u64.
        unsafe { write_out(out_addr, 0) };
        if size == 0 {
            return Ok(());
        }
        let alignment = if alignment == 0 { DEFAULT_ALIGNMENT } else { alignment as u64 };
        // SAFETY: the caller vouches for the stream as `allocate` asks.
        let addr = unsafe { pool.allocate(size as u64, alignment, stream) }?;
        // SAFETY: as above.
        unsafe { write_out(out_addr, addr) };
        Ok(())
    })
}

/// Frees the allocation that starts at `addr`. 0 does nothing. A second free gives
/// `VRAMPOOL_STATUS_NOT_LIVE` (or `VRAMPOOL_STATUS_FOREIGN_ADDRESS` once the block's memory has gone back
/// to the device or lies inside a later block), an address the pool never handed out
/// `VRAMPOOL_STATUS_FOREIGN_ADDRESS`; either way the pool is left as it was.
#[unsafe(no_mangle)]
pub extern "C" fn vrampool_pool_free(pool: *mut PoolHandle, addr: u64) -> c_int {
    const FUNCTION: &str = "vrampool_pool_free";
    guarded_status(FUNCTION, || {
        let pool = lookup(FUNCTION, pool)?;
        if addr == 0 {
            return Ok(());
        }
        pool.free(addr)
    })
}

/// Gives the pool's wholly free memory back to the device, and writes the bytes given back to
/// `*out_bytes` (where `out_bytes` is not NULL).
///
/// # Safety
/// `out_bytes` is NULL or points to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vrampool_pool_trim(pool: *mut PoolHandle, out_bytes: *mut u64) -> c_int {
    const FUNCTION: &str = "vrampool_pool_trim";
    guarded_status(FUNCTION, || {
        let bytes = lookup(FUNCTION, pool)?.trim()?;
        // SAFETY: the caller vouches that a non-null `out_bytes` points to a writable u64.
        unsafe { write_out(out_bytes, bytes) };
        Ok(())
    })
}

/// The pool's counters and its detailed report as one JSON object: `strategy`, `backend`, `config`,
/// `utilization`, `stats` (`allocated_bytes` and `reserved_bytes` as `{"current", "peak"}`, counts of
/// allocations, frees, fallbacks, growths, ...), `failed_allocations`, `last_failure`, and `report`: the
/// segments and live blocks at the lowest addresses, at most 1024 segments and 4096 blocks, with
/// `segments_left_out` and `blocks_left_out` counting the others, so that the string and the memory it takes
/// to make stay small whatever the pool holds (`vrampool_pool_visit` hands over every segment and block, and
/// `vrampool_pool_counters` the counters alone). Free it with `vrampool_string_free`. NULL on failure.
#[unsafe(no_mangle)]
pub extern "C" fn vrampool_pool_stats_json(pool: *mut PoolHandle) -> *mut c_char {
    const FUNCTION: &str = "vrampool_pool_stats_json";
    guarded(FUNCTION, || Ok(hand_out(lookup(FUNCTION, pool)?.to_json(None)))).unwrap_or(ptr::null_mut())
}

/// Notes that work queued on `stream` uses the live allocation at `addr` (besides the stream it was
/// allocated on), as PyTorch's `record_stream` does: its free is then held back until the work queued on
/// `stream` before the free has run (an event is recorded on `stream` at the free; the host never waits for
/// it while memory lasts). 0 does nothing.
///
/// # Safety
/// On a CUDA device `stream` is 0 or a `CUstream` of the device's primary context that stays alive for as
/// long as the pool; on the host and simulated devices any number is a stream label.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vrampool_pool_record_stream(pool: *mut PoolHandle, addr: u64, stream: u64) -> c_int {
    const FUNCTION: &str = "vrampool_pool_record_stream";
    guarded_status(FUNCTION, || {
        let pool = lookup(FUNCTION, pool)?;
        if addr != 0 {
            // SAFETY: the caller vouches for the stream as `record_stream` asks.
            unsafe { pool.record_stream(addr, stream) };
        }
        Ok(())
    })
}

/// The limit `UINT64_MAX` passed to `vrampool_pool_set_limit` and `vrampool_device_set_limit`: none, the
/// configured cap again.
pub const NO_LIMIT: u64 = u64::MAX;

/// Sets the most the pool may hold from the device from now on, as PyTorch's per-process memory fraction
/// does: `bytes` in place of the configured cap (`UINT64_MAX`: the configured cap again). Memory held beyond a
/// lowered limit is kept, but the pool grows no further. Writes the limit in force to `*out_limit` (where not
/// NULL): `bytes` clamped to what the pool can hold.
///
/// # Safety
/// `out_limit` is NULL or points to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vrampool_pool_set_limit(pool: *mut PoolHandle, bytes: u64, out_limit: *mut u64) -> c_int {
    const FUNCTION: &str = "vrampool_pool_set_limit";
    guarded_status(FUNCTION, || {
        let limit = lookup(FUNCTION, pool)?.set_limit((bytes != NO_LIMIT).then_some(bytes))?;
        // SAFETY: the caller vouches that a non-null `out_limit` points to a writable u64.
        unsafe { write_out(out_limit, limit) };
        Ok(())
    })
}

/// Starts the pool's peaks of allocated and reserved bytes again from their values now (PyTorch's
/// `reset_peak_memory_stats`).
#[unsafe(no_mangle)]
pub extern "C" fn vrampool_pool_reset_peaks(pool: *mut PoolHandle) -> c_int {
    const FUNCTION: &str = "vrampool_pool_reset_peaks";
    guarded_status(FUNCTION, || {
        lookup(FUNCTION, pool)?.reset_peaks();
        Ok(())
    })
}

/// Writes the pool's counters to `*out` (the cheap stats call: no report, no string to free).
///
/// # Safety
/// `out` points to a writable `vrampool_counters`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vrampool_pool_counters(pool: *mut PoolHandle, out: *mut Counters) -> c_int {
    const FUNCTION: &str = "vrampool_pool_counters";
    guarded_status(FUNCTION, || {
        let counters = lookup(FUNCTION, pool)?.counters();
        // SAFETY: the caller vouches that `out` points to a writable struct; null is refused inside.
        unsafe { write_counters(FUNCTION, out, counters) }
    })
}

/// Writes `counters` to `out`.
///
/// # Safety
/// `out` is NULL (refused) or points to a writable `vrampool_counters`.
pub(crate) unsafe fn write_counters(
    function: &'static str,
    out: *mut Counters,
    counters: Counters,
) -> Result<(), CapiError> {
    if out.is_null() {
        return Err(CapiError::NullArgument { function, argument: "out" });
    }
    // SAFETY: not null, and the caller vouches that it points to a writable struct.
    unsafe { out.write_unaligned(counters) };
    Ok(())
}

/// Hands the pool's detailed report to C one record at a time: `on_segment` is called for every segment
/// (in address order), then `on_block` for every live block (in address order), each with `context`;
/// either may be NULL. The records are valid during the call only. The pool may change meanwhile on other
/// threads: the records are a snapshot taken before the first call.
///
/// # Safety
/// The visitors are NULL or functions that may be called with `context`, and that return normally (an
/// exception or a longjmp out of them is undefined behaviour).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vrampool_pool_visit(
    pool: *mut PoolHandle,
    on_segment: SegmentVisitor,
    on_block: BlockVisitor,
    context: *mut c_void,
) -> c_int {
    const FUNCTION: &str = "vrampool_pool_visit";
    guarded_status(FUNCTION, || {
        let report = lookup(FUNCTION, pool)?.report();
        // SAFETY: the caller's contract, passed on.
        unsafe { visit(&report, on_segment, on_block, context) }
    })
}
