//! Loading the CUDA driver library at run time, so that a machine without an NVIDIA driver gets an error
//! instead of a panic.
//!
//! cudarc's `sys` layer loads `libcuda` on the first driver call and panics when the library or one of its
//! functions is missing. Every path into the driver here goes through [`CudaLibrary::load`] first: it checks
//! that the library loads and that every function these backends call is in it, then runs `cuInit`, once
//! per process.

use std::sync::OnceLock;

use cudarc::driver::sys;

use crate::error::CudaError;

/// Every driver function the backends, the device listing and the latency bench call (the names cudarc
/// loads with the `cuda-12080` bindings), checked at load time so that none can panic later.
const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuGetErrorName",
    "cuDeviceGet",
    "cuDeviceGetCount",
    "cuDeviceGetName",
    "cuDeviceTotalMem_v2",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuMemGetInfo_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemAddressReserve",
    "cuMemAddressFree",
    "cuMemCreate",
    "cuMemRelease",
    "cuMemMap",
    "cuMemUnmap",
    "cuMemSetAccess",
    "cuMemGetAllocationGranularity",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuStreamWaitEvent",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuMemsetD8Async",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuDeviceGetDefaultMemPool",
    "cuMemPoolSetAttribute",
];

/// Proof that the CUDA driver library is loaded, has every function the backends call, and is
/// initialised (`cuInit`). Only [`CudaLibrary::load`] makes one.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CudaLibrary {
    _loaded: (),
}

static LOADED: OnceLock<Result<(), CudaError>> = OnceLock::new();

impl CudaLibrary {
    /// Loads and initialises the driver library, once per process; later calls return the first answer.
    pub(crate) fn load() -> Result<CudaLibrary, CudaError> {
        LOADED.get_or_init(load_once).clone().map(|()| CudaLibrary { _loaded: () })
    }
}

/// Whether the CUDA driver library can be loaded on this machine (it may still have no usable device).
pub fn driver_present() -> bool {
    // SAFETY: loading the NVIDIA driver library runs its initialisers, which is what loading it is for;
    // nothing in it is called.
    unsafe { sys::is_culib_present() }
}

fn load_once() -> Result<(), CudaError> {
    // SAFETY: loading the NVIDIA driver library runs its initialisers, which is what loading it is for;
    // the library is found, not yet used.
    if !unsafe { sys::is_culib_present() } {
        let mut names = cudarc::get_lib_name_candidates("cuda");
        let mut seen = std::collections::HashSet::new();
        names.retain(|name| seen.insert(name.clone()));
        let searched = names.join(", ");
        return Err(CudaError::DriverNotFound { searched });
    }
    // SAFETY: the library was just found loadable, so `culib` loads it (once per process) without
    // reaching its panic for a missing library.
    let library = unsafe { sys::culib() };
    for &symbol in REQUIRED_SYMBOLS {
        // SAFETY: the symbol is only looked up to see that it exists; the pointer is never used.
        let found = unsafe { library.get::<*const std::ffi::c_void>(symbol) };
        if found.is_err() {
            return Err(CudaError::MissingSymbol { symbol });
        }
    }
    // SAFETY: `cuInit` is in the library (checked above) and takes only flags, which must be 0.
    let result = unsafe { sys::cuInit(0) };
    crate::driver::check("cuInit", result)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On this machine or a GPU host alike: loading answers, it never panics, and its answer agrees with
    /// whether the library is there.
    #[test]
    fn a_missing_driver_is_an_error_not_a_panic() {
        match CudaLibrary::load() {
            Ok(_) => assert!(driver_present()),
            Err(CudaError::DriverNotFound { searched }) => {
                assert!(!driver_present());
                assert!(searched.contains("libcuda.so.1"), "{searched}");
            }
            // A driver without a device or too old answers with its call; the library is there.
            Err(other) => assert!(driver_present(), "{other}"),
        }
        // A second call gives the same answer, from the cache.
        assert_eq!(CudaLibrary::load().is_ok(), CudaLibrary::load().is_ok());
    }

    /// Every driver function the driver layer calls directly is checked at load time: a function missing
    /// from the list would reach cudarc's panic on a driver that lacks it.
    #[test]
    fn every_function_the_driver_layer_calls_is_checked_at_load() {
        let source = include_str!("driver.rs");
        let mut called = 0;
        for (at, _) in source.match_indices("sys::cu") {
            let name: String =
                source[at + 5..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if name == "culib" {
                continue;
            }
            called += 1;
            assert!(REQUIRED_SYMBOLS.contains(&name.as_str()), "{name} is called but not checked at load");
        }
        assert!(called > 30, "{called} calls found");
    }

    /// Every way into the driver answers with an error where the library is missing.
    #[test]
    fn every_entry_point_reports_a_missing_driver() {
        let present = driver_present();
        let answers = [
            crate::CudaDevice::new(0).err(),
            crate::CudaVirtual::new(0).err(),
            crate::devices().err(),
            crate::bench::BenchDevice::open(0).err(),
        ];
        for answer in answers {
            match answer {
                Some(CudaError::DriverNotFound { .. }) => assert!(!present),
                Some(other) => assert!(present, "{other}"),
                None => assert!(present),
            }
        }
    }
}
