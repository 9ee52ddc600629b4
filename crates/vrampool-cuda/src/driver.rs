//! The driver calls the backends make, behind a small trait, and its implementation over cudarc's raw
//! `sys` layer.
//!
//! The trait is the checked layer (cudarc's `result` layer has no virtual-memory calls): every method
//! returns the `CUresult` as a [`CudaError::Call`] naming the call. Methods that take raw addresses or
//! handles are `unsafe fn`: the backends, which keep the books of what they hold, are the safe layer above.
//! Tests put a simulated driver behind the same trait, so that the backends' bookkeeping is tested without
//! a GPU.

use std::ffi::{c_int, c_uint, c_void};
use std::fmt;
use std::mem::MaybeUninit;
use std::sync::Arc;

use cudarc::driver::{CudaContext, result as cu_result, sys};

use crate::error::{CUDA_ERROR_INVALID_CONTEXT, CudaError};
use crate::library::CudaLibrary;

/// The result of a driver call.
pub(crate) type DriverResult<T> = Result<T, CudaError>;

/// Turns a `CUresult` into a result naming `call`.
pub(crate) fn check(call: &'static str, result: sys::CUresult) -> DriverResult<()> {
    match result {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        failure => Err(CudaError::Call { call, code: failure as u32, name: format!("{failure:?}") }),
    }
}

/// A size or address as the driver's `usize`.
fn to_usize(call: &'static str, value: u64) -> DriverResult<usize> {
    usize::try_from(value).map_err(|_| CudaError::Call {
        call,
        code: crate::error::CUDA_ERROR_INVALID_VALUE,
        name: format!("CUDA_ERROR_INVALID_VALUE ({value} does not fit this machine's address width)"),
    })
}

/// A device attribute the device listing reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DeviceAttribute {
    /// `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`: `cuMemAllocAsync` and memory pools.
    MemoryPoolsSupported,
    /// `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`: `cuMemCreate`, `cuMemMap` and friends.
    VirtualMemorySupported,
}

impl DeviceAttribute {
    fn raw(self) -> sys::CUdevice_attribute {
        match self {
            DeviceAttribute::MemoryPoolsSupported => {
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
            }
            DeviceAttribute::VirtualMemorySupported => {
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED
            }
        }
    }
}

/// Questions about the devices that need no context.
pub(crate) trait DeviceQuery: Send + Sync {
    /// Devices the driver sees (`cuDeviceGetCount`).
    fn device_count(&self) -> DriverResult<usize>;
    /// The device's name (`cuDeviceGetName`).
    fn device_name(&self, ordinal: usize) -> DriverResult<String>;
    /// The device's memory in bytes (`cuDeviceTotalMem`).
    fn device_total_memory(&self, ordinal: usize) -> DriverResult<u64>;
    /// A device attribute (`cuDeviceGetAttribute`).
    fn device_attribute(&self, ordinal: usize, attribute: DeviceAttribute) -> DriverResult<i32>;
    /// The minimum granularity of pinned device memory (`cuMemGetAllocationGranularity`).
    fn device_granularity(&self, ordinal: usize) -> DriverResult<u64>;
}

/// One device's driver calls, made in the device's primary context.
///
/// Callers call [`Driver::bind`] on the calling thread before the other calls of an operation (pools are
/// used from many threads, and another library may have made another context current). Handles and
/// addresses are the driver's values as `u64`: `CUdeviceptr`, `CUmemGenericAllocationHandle`, and the
/// pointer values of `CUevent` and `CUstream` (stream 0 is the legacy default stream).
pub(crate) trait Driver: Send + Sync + fmt::Debug {
    /// The device ordinal.
    fn ordinal(&self) -> usize;

    /// The retained primary context, for cudarc users (`None` for a simulated driver).
    fn context(&self) -> Option<&Arc<CudaContext>>;

    /// Makes the device's primary context current on the calling thread (`cuCtxSetCurrent`).
    fn bind(&self) -> DriverResult<()>;

    /// The device's memory in bytes.
    fn total_memory(&self) -> DriverResult<u64>;

    /// Free and total device memory in bytes (`cuMemGetInfo`).
    fn memory_info(&self) -> DriverResult<(u64, u64)>;

    /// Whether the device supports virtual memory management.
    fn virtual_memory_supported(&self) -> DriverResult<bool>;

    /// The minimum granularity of pinned memory on this device (`cuMemGetAllocationGranularity`).
    fn granularity(&self) -> DriverResult<u64>;

    /// Allocates `size` bytes of device memory (`cuMemAlloc`).
    fn mem_alloc(&self, size: u64) -> DriverResult<u64>;

    /// Frees memory from [`Driver::mem_alloc`] (`cuMemFree`).
    ///
    /// # Safety
    /// `ptr` came from `mem_alloc` on this driver, is freed once, and no queued device work uses it.
    unsafe fn mem_free(&self, ptr: u64) -> DriverResult<()>;

    /// Reserves `size` bytes of address space (`cuMemAddressReserve`), `size` a multiple of the granularity.
    fn address_reserve(&self, size: u64) -> DriverResult<u64>;

    /// Frees a reserved range (`cuMemAddressFree`).
    ///
    /// # Safety
    /// `[ptr, ptr + size)` is a whole range from `address_reserve` on this driver, with nothing mapped in
    /// it, freed once.
    unsafe fn address_free(&self, ptr: u64, size: u64) -> DriverResult<()>;

    /// Creates `size` bytes of pinned physical memory on this device (`cuMemCreate`).
    fn mem_create(&self, size: u64) -> DriverResult<u64>;

    /// Releases a physical memory handle (`cuMemRelease`); its memory goes back once it is unmapped.
    ///
    /// # Safety
    /// `handle` came from `mem_create` on this driver and is released once.
    unsafe fn mem_release(&self, handle: u64) -> DriverResult<()>;

    /// Maps the whole of `handle` (of `size` bytes) at `ptr` (`cuMemMap`).
    ///
    /// # Safety
    /// `[ptr, ptr + size)` lies in a range reserved on this driver and is not mapped; `handle` is live and
    /// has `size` bytes.
    unsafe fn mem_map(&self, ptr: u64, size: u64, handle: u64) -> DriverResult<()>;

    /// Unmaps `[ptr, ptr + size)`, one whole earlier mapping (`cuMemUnmap`).
    ///
    /// # Safety
    /// The range is exactly one mapping made by `mem_map`, and no queued device work uses it.
    unsafe fn mem_unmap(&self, ptr: u64, size: u64) -> DriverResult<()>;

    /// Grants this device read and write access to `[ptr, ptr + size)` (`cuMemSetAccess`).
    ///
    /// # Safety
    /// Every byte of the range is mapped by `mem_map` on this driver.
    unsafe fn set_access(&self, ptr: u64, size: u64) -> DriverResult<()>;

    /// Creates an event without timing (`cuEventCreate` with `CU_EVENT_DISABLE_TIMING`).
    fn event_create(&self) -> DriverResult<u64>;

    /// Destroys an event (`cuEventDestroy`).
    ///
    /// # Safety
    /// `event` came from `event_create` on this driver and is destroyed once.
    unsafe fn event_destroy(&self, event: u64) -> DriverResult<()>;

    /// Records `event` on `stream` (`cuEventRecord`).
    ///
    /// # Safety
    /// `event` is live, from this driver; `stream` is 0 or a live stream of this context.
    unsafe fn event_record(&self, event: u64, stream: u64) -> DriverResult<()>;

    /// Whether the work before the event's record has completed (`cuEventQuery`: `CUDA_SUCCESS` is true,
    /// `CUDA_ERROR_NOT_READY` false, anything else an error).
    ///
    /// # Safety
    /// `event` is live, from this driver.
    unsafe fn event_query(&self, event: u64) -> DriverResult<bool>;

    /// Blocks the host until the work before the event's record has completed (`cuEventSynchronize`).
    ///
    /// # Safety
    /// `event` is live, from this driver.
    unsafe fn event_synchronize(&self, event: u64) -> DriverResult<()>;

    /// Makes `stream` wait for `event` (`cuStreamWaitEvent`).
    ///
    /// # Safety
    /// `event` is live, from this driver; `stream` is 0 or a live stream of this context.
    unsafe fn stream_wait_event(&self, stream: u64, event: u64) -> DriverResult<()>;

    /// Creates a non-blocking stream (`cuStreamCreate` with `CU_STREAM_NON_BLOCKING`).
    fn stream_create(&self) -> DriverResult<u64>;

    /// Destroys a stream (`cuStreamDestroy`).
    ///
    /// # Safety
    /// `stream` came from `stream_create` on this driver and is destroyed once.
    unsafe fn stream_destroy(&self, stream: u64) -> DriverResult<()>;

    /// Waits for the work queued on `stream` (`cuStreamSynchronize`).
    ///
    /// # Safety
    /// `stream` is 0 or a live stream of this context.
    unsafe fn stream_synchronize(&self, stream: u64) -> DriverResult<()>;

    /// Waits for all work of the context (`cuCtxSynchronize`).
    fn ctx_synchronize(&self) -> DriverResult<()>;

    /// Queues a copy of `src` to `dst` on `stream` (`cuMemcpyHtoDAsync`).
    ///
    /// # Safety
    /// `[dst, dst + src.len())` is device memory of this context that nothing else uses meanwhile;
    /// `stream` is 0 or a live stream of this context. `src` must stay unchanged until the stream has
    /// read it (the backends synchronise the stream before returning).
    unsafe fn memcpy_htod(&self, dst: u64, src: &[u8], stream: u64) -> DriverResult<()>;

    /// Queues a copy of `[src, src + dst.len())` into `dst` on `stream` (`cuMemcpyDtoHAsync`).
    ///
    /// # Safety
    /// The source range is device memory of this context; `stream` is 0 or a live stream of this
    /// context; `dst` is not used until the stream has written it (the backends synchronise the stream
    /// before returning).
    unsafe fn memcpy_dtoh(&self, dst: &mut [u8], src: u64, stream: u64) -> DriverResult<()>;

    /// Queues a copy of `len` bytes from `src` to `dst` on `stream` (`cuMemcpyDtoDAsync`).
    ///
    /// # Safety
    /// Both ranges are device memory of this context; the destination is used by nothing else meanwhile;
    /// `stream` is 0 or a live stream of this context.
    unsafe fn memcpy_dtod(&self, dst: u64, src: u64, len: u64, stream: u64) -> DriverResult<()>;

    /// Queues setting `len` bytes at `dst` to `value` on `stream` (`cuMemsetD8Async`).
    ///
    /// # Safety
    /// The range is device memory of this context used by nothing else meanwhile; `stream` is 0 or a live
    /// stream of this context.
    unsafe fn memset_d8(&self, dst: u64, value: u8, len: u64, stream: u64) -> DriverResult<()>;

    /// Allocates from the device's current memory pool, ordered on `stream` (`cuMemAllocAsync`).
    ///
    /// # Safety
    /// `stream` is 0 or a live stream of this context.
    unsafe fn mem_alloc_async(&self, size: u64, stream: u64) -> DriverResult<u64>;

    /// Frees memory from [`Driver::mem_alloc_async`], ordered on `stream` (`cuMemFreeAsync`).
    ///
    /// # Safety
    /// `ptr` came from `mem_alloc_async` and is freed once; `stream` is 0 or a live stream of this
    /// context.
    unsafe fn mem_free_async(&self, ptr: u64, stream: u64) -> DriverResult<()>;

    /// Makes the device's default memory pool keep freed memory instead of giving it back at each
    /// synchronisation (`cuMemPoolSetAttribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, u64::MAX)`).
    fn keep_default_pool_memory(&self) -> DriverResult<()>;
}

/// The attributes of pinned device memory on `device`: what `cuMemCreate` makes and what
/// `cuMemGetAllocationGranularity` is asked about.
fn pinned_device_memory(device: sys::CUdevice) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
        location: sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: device },
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// Asks the minimum granularity of pinned memory on `device`, with whatever context is current.
fn query_granularity(device: sys::CUdevice) -> DriverResult<u64> {
    let prop = pinned_device_memory(device);
    let mut granularity: usize = 0;
    // SAFETY: both pointers are to live locals of the right types; the call only writes `granularity`.
    let result = unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut granularity,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    };
    check("cuMemGetAllocationGranularity", result)?;
    Ok(granularity as u64)
}

/// The `CUdevice` of an ordinal.
fn device_handle(ordinal: usize) -> DriverResult<sys::CUdevice> {
    let ordinal = c_int::try_from(ordinal).map_err(|_| CudaError::NoDevice { ordinal, count: 0 })?;
    let mut device = MaybeUninit::uninit();
    // SAFETY: the pointer is to a local the call writes on success, read only then.
    check("cuDeviceGet", unsafe { sys::cuDeviceGet(device.as_mut_ptr(), ordinal) })?;
    // SAFETY: `cuDeviceGet` succeeded, so it wrote the device.
    Ok(unsafe { device.assume_init() })
}

fn device_attribute(device: sys::CUdevice, attribute: DeviceAttribute) -> DriverResult<i32> {
    let mut value: c_int = 0;
    // SAFETY: the pointer is to a live local; `device` came from `cuDeviceGet`.
    check("cuDeviceGetAttribute", unsafe { sys::cuDeviceGetAttribute(&mut value, attribute.raw(), device) })?;
    Ok(value)
}

impl DeviceQuery for CudaLibrary {
    fn device_count(&self) -> DriverResult<usize> {
        let mut count: c_int = 0;
        // SAFETY: the library is initialised (a `CudaLibrary` exists); the pointer is to a live local.
        check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut count) })?;
        Ok(count.max(0) as usize)
    }

    fn device_name(&self, ordinal: usize) -> DriverResult<String> {
        let device = device_handle(ordinal)?;
        cu_result::device::get_name(device).map_err(|e| driver_error("cuDeviceGetName", e))
    }

    fn device_total_memory(&self, ordinal: usize) -> DriverResult<u64> {
        let device = device_handle(ordinal)?;
        let mut bytes: usize = 0;
        // SAFETY: `device` came from `cuDeviceGet`; the pointer is to a live local.
        check("cuDeviceTotalMem", unsafe { sys::cuDeviceTotalMem_v2(&mut bytes, device) })?;
        Ok(bytes as u64)
    }

    fn device_attribute(&self, ordinal: usize, attribute: DeviceAttribute) -> DriverResult<i32> {
        device_attribute(device_handle(ordinal)?, attribute)
    }

    /// Asked without a context first; a driver that wants one gets the device's primary context for the
    /// query, and the thread's current context is put back after.
    fn device_granularity(&self, ordinal: usize) -> DriverResult<u64> {
        let device = device_handle(ordinal)?;
        match query_granularity(device) {
            Err(CudaError::Call { code: CUDA_ERROR_INVALID_CONTEXT, .. }) => {}
            answer => return answer,
        }
        let previous = cu_result::ctx::get_current().map_err(|e| driver_error("cuCtxGetCurrent", e))?;
        // SAFETY: `device` came from `cuDeviceGet`; the context is released below.
        let context = unsafe { cu_result::primary_ctx::retain(device) }
            .map_err(|e| driver_error("cuDevicePrimaryCtxRetain", e))?;
        // SAFETY: the context was just retained and stays alive until released below.
        let answer = unsafe { cu_result::ctx::set_current(context) }
            .map_err(|e| driver_error("cuCtxSetCurrent", e))
            .and_then(|()| query_granularity(device));
        // SAFETY: `previous` was current on this thread a moment ago (or null, which unbinds).
        let _ = unsafe { cu_result::ctx::set_current(previous.unwrap_or(std::ptr::null_mut())) };
        // SAFETY: the retain above is released once.
        let _ = unsafe { cu_result::primary_ctx::release(device) };
        answer
    }
}

/// A cudarc `DriverError` as a [`CudaError::Call`].
pub(crate) fn driver_error(call: &'static str, err: cu_result::DriverError) -> CudaError {
    CudaError::Call { call, code: err.0 as u32, name: format!("{:?}", err.0) }
}

/// A `CUstream` from its handle value.
fn raw_stream(stream: u64) -> sys::CUstream {
    stream as usize as sys::CUstream
}

/// A `CUevent` from its handle value.
fn raw_event(event: u64) -> sys::CUevent {
    event as usize as sys::CUevent
}

/// The real driver: cudarc's `sys` calls in the device's retained primary context.
pub(crate) struct CudaDriver {
    context: Arc<CudaContext>,
    device: sys::CUdevice,
    ordinal: usize,
    /// The access every mapping gets: read and write for this device.
    access: sys::CUmemAccessDesc,
    /// What `cuMemCreate` makes: pinned memory on this device.
    allocation: sys::CUmemAllocationProp,
}

// SAFETY: the raw pointer inside `allocation` (`win32HandleMetaData`) is always null and never
// dereferenced; the other fields are plain numbers, and the context is `Send + Sync`.
unsafe impl Send for CudaDriver {}
// SAFETY: as for `Send`: nothing in the driver is mutated after construction.
unsafe impl Sync for CudaDriver {}

impl fmt::Debug for CudaDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaDriver").field("ordinal", &self.ordinal).field("device", &self.device).finish()
    }
}

impl CudaDriver {
    /// Retains the primary context of device `ordinal` and makes it current on this thread.
    pub(crate) fn open(library: &CudaLibrary, ordinal: usize) -> DriverResult<CudaDriver> {
        let count = library.device_count()?;
        if ordinal >= count {
            return Err(CudaError::NoDevice { ordinal, count });
        }
        let context = CudaContext::new(ordinal).map_err(|e| driver_error("cuDevicePrimaryCtxRetain", e))?;
        let device = context.cu_device();
        Ok(CudaDriver {
            context,
            device,
            ordinal,
            access: sys::CUmemAccessDesc {
                location: sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: device },
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            },
            allocation: pinned_device_memory(device),
        })
    }
}

impl Driver for CudaDriver {
    fn ordinal(&self) -> usize {
        self.ordinal
    }

    fn context(&self) -> Option<&Arc<CudaContext>> {
        Some(&self.context)
    }

    fn bind(&self) -> DriverResult<()> {
        self.context.bind_to_thread().map_err(|e| driver_error("cuCtxSetCurrent", e))
    }

    fn total_memory(&self) -> DriverResult<u64> {
        self.context.total_mem().map(|b| b as u64).map_err(|e| driver_error("cuDeviceTotalMem", e))
    }

    fn memory_info(&self) -> DriverResult<(u64, u64)> {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both pointers are to live locals.
        check("cuMemGetInfo", unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) })?;
        Ok((free as u64, total as u64))
    }

    fn virtual_memory_supported(&self) -> DriverResult<bool> {
        Ok(device_attribute(self.device, DeviceAttribute::VirtualMemorySupported)? != 0)
    }

    fn granularity(&self) -> DriverResult<u64> {
        query_granularity(self.device)
    }

    fn mem_alloc(&self, size: u64) -> DriverResult<u64> {
        let size = to_usize("cuMemAlloc", size)?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: the pointer is to a live local, written on success.
        check("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut ptr, size) })?;
        Ok(ptr)
    }

    unsafe fn mem_free(&self, ptr: u64) -> DriverResult<()> {
        // SAFETY: the caller passes memory from `mem_alloc` that no work uses, freed once.
        check("cuMemFree", unsafe { sys::cuMemFree_v2(ptr) })
    }

    fn address_reserve(&self, size: u64) -> DriverResult<u64> {
        let size = to_usize("cuMemAddressReserve", size)?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: the pointer is to a live local; alignment 0 and address 0 let the driver choose.
        check("cuMemAddressReserve", unsafe { sys::cuMemAddressReserve(&mut ptr, size, 0, 0, 0) })?;
        Ok(ptr)
    }

    unsafe fn address_free(&self, ptr: u64, size: u64) -> DriverResult<()> {
        let size = to_usize("cuMemAddressFree", size)?;
        // SAFETY: the caller passes a whole reserved range with nothing mapped, freed once.
        check("cuMemAddressFree", unsafe { sys::cuMemAddressFree(ptr, size) })
    }

    fn mem_create(&self, size: u64) -> DriverResult<u64> {
        let size = to_usize("cuMemCreate", size)?;
        let mut handle: sys::CUmemGenericAllocationHandle = 0;
        // SAFETY: both pointers are to live values of the right types; flags must be 0.
        check("cuMemCreate", unsafe { sys::cuMemCreate(&mut handle, size, &self.allocation, 0) })?;
        Ok(handle)
    }

    unsafe fn mem_release(&self, handle: u64) -> DriverResult<()> {
        // SAFETY: the caller passes a live handle from `mem_create`, released once.
        check("cuMemRelease", unsafe { sys::cuMemRelease(handle) })
    }

    unsafe fn mem_map(&self, ptr: u64, size: u64, handle: u64) -> DriverResult<()> {
        let size = to_usize("cuMemMap", size)?;
        // SAFETY: the caller passes an unmapped reserved range and a live handle of `size` bytes; offset
        // and flags must be 0.
        check("cuMemMap", unsafe { sys::cuMemMap(ptr, size, 0, handle, 0) })
    }

    unsafe fn mem_unmap(&self, ptr: u64, size: u64) -> DriverResult<()> {
        let size = to_usize("cuMemUnmap", size)?;
        // SAFETY: the caller passes one whole mapping that no work uses.
        check("cuMemUnmap", unsafe { sys::cuMemUnmap(ptr, size) })
    }

    unsafe fn set_access(&self, ptr: u64, size: u64) -> DriverResult<()> {
        let size = to_usize("cuMemSetAccess", size)?;
        // SAFETY: the caller passes a fully mapped range; the descriptor is a live value, one of them.
        check("cuMemSetAccess", unsafe { sys::cuMemSetAccess(ptr, size, &self.access, 1) })
    }

    fn event_create(&self) -> DriverResult<u64> {
        let mut event: sys::CUevent = std::ptr::null_mut();
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as c_uint;
        // SAFETY: the pointer is to a live local, written on success.
        check("cuEventCreate", unsafe { sys::cuEventCreate(&mut event, flags) })?;
        Ok(event as usize as u64)
    }

    unsafe fn event_destroy(&self, event: u64) -> DriverResult<()> {
        // SAFETY: the caller passes a live event of this driver, destroyed once.
        check("cuEventDestroy", unsafe { sys::cuEventDestroy_v2(raw_event(event)) })
    }

    unsafe fn event_record(&self, event: u64, stream: u64) -> DriverResult<()> {
        // SAFETY: the caller passes a live event and a live stream (or 0) of this context.
        check("cuEventRecord", unsafe { sys::cuEventRecord(raw_event(event), raw_stream(stream)) })
    }

    unsafe fn event_query(&self, event: u64) -> DriverResult<bool> {
        // SAFETY: the caller passes a live event of this driver.
        match unsafe { sys::cuEventQuery(raw_event(event)) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            failure => check("cuEventQuery", failure).map(|()| false),
        }
    }

    unsafe fn event_synchronize(&self, event: u64) -> DriverResult<()> {
        // SAFETY: the caller passes a live event of this driver.
        check("cuEventSynchronize", unsafe { sys::cuEventSynchronize(raw_event(event)) })
    }

    unsafe fn stream_wait_event(&self, stream: u64, event: u64) -> DriverResult<()> {
        // SAFETY: the caller passes a live event and a live stream (or 0) of this context; flags 0.
        check("cuStreamWaitEvent", unsafe { sys::cuStreamWaitEvent(raw_stream(stream), raw_event(event), 0) })
    }

    fn stream_create(&self) -> DriverResult<u64> {
        let mut stream: sys::CUstream = std::ptr::null_mut();
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint;
        // SAFETY: the pointer is to a live local, written on success.
        check("cuStreamCreate", unsafe { sys::cuStreamCreate(&mut stream, flags) })?;
        Ok(stream as usize as u64)
    }

    unsafe fn stream_destroy(&self, stream: u64) -> DriverResult<()> {
        // SAFETY: the caller passes a live stream from `stream_create`, destroyed once.
        check("cuStreamDestroy", unsafe { sys::cuStreamDestroy_v2(raw_stream(stream)) })
    }

    unsafe fn stream_synchronize(&self, stream: u64) -> DriverResult<()> {
        // SAFETY: the caller passes a live stream (or 0) of this context.
        check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(raw_stream(stream)) })
    }

    fn ctx_synchronize(&self) -> DriverResult<()> {
        // SAFETY: takes no arguments; waits for the current context.
        check("cuCtxSynchronize", unsafe { sys::cuCtxSynchronize() })
    }

    unsafe fn memcpy_htod(&self, dst: u64, src: &[u8], stream: u64) -> DriverResult<()> {
        let ptr = src.as_ptr().cast::<c_void>();
        // SAFETY: `src` is a live host slice of `src.len()` bytes; the caller passes a destination range
        // of that many bytes and a live stream, and keeps `src` until the stream has read it.
        check("cuMemcpyHtoDAsync", unsafe { sys::cuMemcpyHtoDAsync_v2(dst, ptr, src.len(), raw_stream(stream)) })
    }

    unsafe fn memcpy_dtoh(&self, dst: &mut [u8], src: u64, stream: u64) -> DriverResult<()> {
        let ptr = dst.as_mut_ptr().cast::<c_void>();
        // SAFETY: `dst` is a live, exclusively borrowed host slice of `dst.len()` bytes; the caller passes
        // a source range of that many bytes and a live stream, and leaves `dst` alone until written.
        check("cuMemcpyDtoHAsync", unsafe { sys::cuMemcpyDtoHAsync_v2(ptr, src, dst.len(), raw_stream(stream)) })
    }

    unsafe fn memcpy_dtod(&self, dst: u64, src: u64, len: u64, stream: u64) -> DriverResult<()> {
        let len = to_usize("cuMemcpyDtoDAsync", len)?;
        // SAFETY: the caller passes two device ranges of `len` bytes and a live stream.
        check("cuMemcpyDtoDAsync", unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, len, raw_stream(stream)) })
    }

    unsafe fn memset_d8(&self, dst: u64, value: u8, len: u64, stream: u64) -> DriverResult<()> {
        let len = to_usize("cuMemsetD8Async", len)?;
        // SAFETY: the caller passes a device range of `len` bytes and a live stream.
        check("cuMemsetD8Async", unsafe { sys::cuMemsetD8Async(dst, value, len, raw_stream(stream)) })
    }

    unsafe fn mem_alloc_async(&self, size: u64, stream: u64) -> DriverResult<u64> {
        let size = to_usize("cuMemAllocAsync", size)?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: the pointer is to a live local; the caller passes a live stream.
        check("cuMemAllocAsync", unsafe { sys::cuMemAllocAsync(&mut ptr, size, raw_stream(stream)) })?;
        Ok(ptr)
    }

    unsafe fn mem_free_async(&self, ptr: u64, stream: u64) -> DriverResult<()> {
        // SAFETY: the caller passes memory from `mem_alloc_async`, freed once, and a live stream.
        check("cuMemFreeAsync", unsafe { sys::cuMemFreeAsync(ptr, raw_stream(stream)) })
    }

    fn keep_default_pool_memory(&self) -> DriverResult<()> {
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: the pointer is to a live local; `device` came from the context.
        check("cuDeviceGetDefaultMemPool", unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, self.device) })?;
        let mut threshold: u64 = u64::MAX;
        let value = (&mut threshold as *mut u64).cast::<c_void>();
        let attribute = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
        // SAFETY: `pool` is the device's default pool (never destroyed); the release threshold attribute
        // takes a pointer to a `cuuint64_t`, which `value` is.
        check("cuMemPoolSetAttribute", unsafe { sys::cuMemPoolSetAttribute(pool, attribute, value) })
    }
}
