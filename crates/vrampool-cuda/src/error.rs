//! The one error type of the CUDA backends, and its conversion into the core crate's [`vrampool::Error`].

/// `CUDA_ERROR_INVALID_VALUE`: an argument out of range.
pub(crate) const CUDA_ERROR_INVALID_VALUE: u32 = 1;
/// `CUDA_ERROR_OUT_OF_MEMORY`: the device has no memory left for the call.
pub(crate) const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;
/// `CUDA_ERROR_INVALID_CONTEXT`: no context (or a destroyed one) is current on the calling thread.
pub(crate) const CUDA_ERROR_INVALID_CONTEXT: u32 = 201;
/// `CUDA_ERROR_INVALID_HANDLE`: a handle the driver does not know.
#[cfg(test)]
pub(crate) const CUDA_ERROR_INVALID_HANDLE: u32 = 400;

/// Everything that can go wrong in the CUDA backends.
///
/// Messages name the driver call, the `CUresult` (name and number), addresses and sizes, so that a log line
/// alone says what happened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// The CUDA driver library (`libcuda.so`) could not be loaded: no NVIDIA driver on this machine.
    #[error(
        "the CUDA driver library could not be loaded (searched for {searched}); install the NVIDIA driver or \
         add the folder holding libcuda.so.1 to LD_LIBRARY_PATH"
    )]
    DriverNotFound {
        /// The library names looked for, comma-separated.
        searched: String,
    },

    /// The driver library lacks a function these backends call (a driver older than CUDA 11.2).
    #[error("the CUDA driver library has no function {symbol}: the driver is too old for vrampool-cuda")]
    MissingSymbol {
        /// The missing function.
        symbol: &'static str,
    },

    /// A driver call failed.
    #[error("{call} failed: {name} ({code})")]
    Call {
        /// The driver function, without its version suffix (`cuMemCreate`, `cuMemAlloc`).
        call: &'static str,
        /// The `CUresult` number.
        code: u32,
        /// The `CUresult` name (`CUDA_ERROR_OUT_OF_MEMORY`).
        name: String,
    },

    /// A device ordinal past the devices the driver sees.
    #[error("there is no CUDA device {ordinal}: the driver sees {count} device(s)")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// Devices the driver sees.
        count: usize,
    },

    /// A page size that is not a multiple of the device's virtual-memory granularity.
    #[error("a page of {page} bytes is not a positive multiple of the device's {granularity}-byte granularity")]
    PageSize {
        /// The page size asked for.
        page: u64,
        /// The device's granularity.
        granularity: u64,
    },

    /// Virtual memory management asked of a device that lacks it.
    #[error("CUDA device {ordinal} does not support virtual memory management (cuMemCreate/cuMemMap)")]
    VirtualMemoryUnsupported {
        /// The device.
        ordinal: usize,
    },

    /// A copy or memset touching memory the backend does not hold (not allocated, or not mapped).
    #[error("{call}: [{addr:#x}, +{len}) is not memory held by {backend}")]
    NotHeld {
        /// The operation.
        call: &'static str,
        /// The first byte touched.
        addr: u64,
        /// Bytes touched.
        len: u64,
        /// The backend's name.
        backend: String,
    },

    /// A stream that was never registered with the backend.
    #[error(
        "stream {stream:#x} is not registered with {backend}: register it first (register_stream), \
         or use stream 0, the legacy default stream"
    )]
    UnknownStream {
        /// The `CUstream` handle value.
        stream: u64,
        /// The backend's name.
        backend: String,
    },

    /// A stream of another context than the backend's.
    #[error("stream {stream:#x} belongs to another CUDA context than {backend}'s")]
    ForeignStream {
        /// The `CUstream` handle value.
        stream: u64,
        /// The backend's name.
        backend: String,
    },

    /// An event id the backend did not hand out, or one already released.
    #[error("event {event:#x} was never recorded by {backend} or was released")]
    UnknownEvent {
        /// The event id.
        event: u64,
        /// The backend's name.
        backend: String,
    },

    /// A typed slice asked of a pool that does not take its memory from the given backend.
    #[error("the pool takes its memory from {pool_backend}, not from {backend}")]
    ForeignPool {
        /// The name of the pool's backend.
        pool_backend: String,
        /// The name of the backend given.
        backend: String,
    },

    /// A typed slice of a length that cannot be allocated.
    #[error("a slice of {len} elements of {element_size} bytes cannot be allocated")]
    BadSliceLength {
        /// Elements asked for.
        len: usize,
        /// Bytes per element.
        element_size: usize,
    },

    /// A pool or core backend error.
    #[error(transparent)]
    Pool(#[from] vrampool::Error),
}

impl CudaError {
    /// The `CUresult` number of a failed driver call, if this is one.
    pub fn driver_code(&self) -> Option<u32> {
        match self {
            CudaError::Call { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the device ran out of memory (a driver call answered `CUDA_ERROR_OUT_OF_MEMORY`, or a pool
    /// refused a request).
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            CudaError::Call { code, .. } => *code == CUDA_ERROR_OUT_OF_MEMORY,
            CudaError::Pool(err) => err.is_out_of_memory(),
            _ => false,
        }
    }

    /// The driver call that failed, for the core error's `call` field.
    pub(crate) fn call_name(&self) -> &'static str {
        match self {
            CudaError::Call { call, .. } => call,
            CudaError::NotHeld { call, .. } => call,
            CudaError::DriverNotFound { .. } | CudaError::MissingSymbol { .. } => "cuInit",
            CudaError::NoDevice { .. } => "cuDeviceGet",
            CudaError::VirtualMemoryUnsupported { .. } => "cuMemCreate",
            CudaError::PageSize { .. } => "cuMemGetAllocationGranularity",
            CudaError::UnknownStream { .. } | CudaError::ForeignStream { .. } => "stream",
            CudaError::UnknownEvent { .. } => "event",
            CudaError::ForeignPool { .. } | CudaError::BadSliceLength { .. } => "slice",
            CudaError::Pool(_) => "pool",
        }
    }
}

impl From<CudaError> for vrampool::Error {
    /// Driver failures become [`vrampool::Error::Backend`] naming the call; a misuse of the backend
    /// (unknown stream, event or memory) becomes [`vrampool::Error::InvalidBackendCall`]. Out-of-memory
    /// answers are mapped where the requested size is known, by the backends themselves, to
    /// [`vrampool::Error::DeviceOutOfMemory`].
    fn from(err: CudaError) -> Self {
        let call = err.call_name();
        match err {
            CudaError::Pool(inner) => inner,
            CudaError::NotHeld { .. }
            | CudaError::UnknownStream { .. }
            | CudaError::ForeignStream { .. }
            | CudaError::UnknownEvent { .. }
            | CudaError::ForeignPool { .. }
            | CudaError::BadSliceLength { .. } => vrampool::Error::InvalidBackendCall { call, reason: err.to_string() },
            other => vrampool::Error::Backend { call, message: other.to_string() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_failures_name_the_call_and_the_result() {
        let err = CudaError::Call { call: "cuMemCreate", code: 2, name: "CUDA_ERROR_OUT_OF_MEMORY".into() };
        assert_eq!(err.to_string(), "cuMemCreate failed: CUDA_ERROR_OUT_OF_MEMORY (2)");
        assert!(err.is_out_of_memory());
        assert_eq!(err.driver_code(), Some(2));
        let core: vrampool::Error = err.into();
        assert_eq!(
            core,
            vrampool::Error::Backend {
                call: "cuMemCreate",
                message: "cuMemCreate failed: CUDA_ERROR_OUT_OF_MEMORY (2)".into()
            }
        );
    }

    #[test]
    fn misuse_becomes_an_invalid_backend_call() {
        let err = CudaError::UnknownStream { stream: 0x1234, backend: "cuda:0".into() };
        let core: vrampool::Error = err.into();
        match core {
            vrampool::Error::InvalidBackendCall { call, reason } => {
                assert_eq!(call, "stream");
                assert!(reason.contains("0x1234") && reason.contains("register_stream"), "{reason}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn pool_errors_pass_through_both_ways() {
        let inner = vrampool::Error::ZeroSize;
        let wrapped: CudaError = inner.clone().into();
        assert_eq!(vrampool::Error::from(wrapped), inner);
        let missing = CudaError::DriverNotFound { searched: "libcuda.so".into() };
        assert!(missing.to_string().contains("libcuda.so"));
        assert!(matches!(vrampool::Error::from(missing), vrampool::Error::Backend { call: "cuInit", .. }));
    }
}
