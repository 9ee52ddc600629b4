//! The entry points PyTorch loads (`torch.cuda.memory.CUDAPluggableAllocator(path,
//! "vrampool_torch_alloc", "vrampool_torch_free")`), and the C functions on the per-device pools behind
//! them.

use std::ffi::{c_char, c_int, c_void};
use std::ptr;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use vrampool::DEFAULT_ALIGNMENT;

use crate::abi_boundary::{guarded, guarded_status};
use crate::c_string::hand_out;
use crate::device_pools::{DevicePools, report};
use crate::error::CapiError;

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
/// (default: the hybrid pool on CUDA virtual memory); an invalid `VRAMPOOL_CONF` is reported once on
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

/// PyTorch's free function: frees `ptr`, which `vrampool_torch_alloc` returned for `device`. The pool
/// knows each block's size and stream, so `size` and `stream` are not needed. NULL is ignored; a pointer
/// the pool did not hand out (or freed already) is left alone, recorded in `vrampool_last_error()` and
/// written on stderr.
#[unsafe(no_mangle)]
pub extern "C" fn vrampool_torch_free(ptr: *mut c_void, size: usize, device: c_int, stream: *mut c_void) {
    const FUNCTION: &str = "vrampool_torch_free";
    let _ = stream;
    let _ = guarded(FUNCTION, || {
        if ptr.is_null() {
            return Ok(());
        }
        let ordinal = DevicePools::ordinal(FUNCTION, device)?;
        DEVICE_POOLS.existing_or_why(FUNCTION, ordinal).and_then(|pool| pool.free(ptr.addr() as u64)).inspect_err(
            |err| note_failure(&format!("free of {:#x} ({size} bytes) on device {device}", ptr.addr()), err),
        )
    });
}

/// The counters and detailed report of device `device`'s pool as one JSON object (as
/// `vrampool_pool_stats_json`, with `device` set). Free it with `vrampool_string_free`. NULL where the
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
/// back in all to `*out_bytes` (where not NULL). Every pool is trimmed even where one fails; the first
/// failure is returned.
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
                Ok(bytes) => total += bytes,
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
