//! The one error type of the C ABI, and the status code each error gives C.

use vrampool::Error as PoolError;
use vrampool_cuda::CudaError;

use crate::status::Status;

/// Everything that can go wrong behind a C function of vrampool.
///
/// The message is what `vrampool_last_error()` returns; [`CapiError::status`] is the code the function
/// returns.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CapiError {
    /// A pool, backend or configuration error of the core crate.
    #[error(transparent)]
    Pool(#[from] PoolError),

    /// An error of the CUDA backends (no driver, no such device, a failed driver call).
    #[error(transparent)]
    Cuda(#[from] CudaError),

    /// A pointer argument that must not be null was null.
    #[error("{function}: argument `{argument}` is a null pointer")]
    NullArgument {
        /// The C function.
        function: &'static str,
        /// The argument.
        argument: &'static str,
    },

    /// A text argument that is not UTF-8.
    #[error("{function}: argument `{argument}` is not UTF-8 text (invalid byte at offset {offset})")]
    NotUtf8 {
        /// The C function.
        function: &'static str,
        /// The argument.
        argument: &'static str,
        /// The offset of the first invalid byte.
        offset: usize,
    },

    /// A device ordinal outside what the library serves.
    #[error("{function}: device {device} is not a device ordinal this library serves (0 to {last})")]
    BadDevice {
        /// The C function.
        function: &'static str,
        /// The ordinal given.
        device: i64,
        /// The largest ordinal served.
        last: usize,
    },

    /// A simulated or host device that cannot be opened: every address range is held by an open one.
    #[error("no address range left for another simulated or host device: {max} are open, the most at once")]
    NoAddressRange {
        /// The most such devices open at once.
        max: usize,
    },

    /// A pool handle that is not live: never created, or destroyed already.
    #[error("{function}: {handle:#x} is not a live pool handle (never created, or destroyed already)")]
    NoSuchPool {
        /// The C function.
        function: &'static str,
        /// The handle's value.
        handle: usize,
    },

    /// A device whose pool has not been made yet (it is made at the first allocation on the device).
    #[error("{function}: device {device} has no vrampool pool yet: it is made at the first allocation on the device")]
    NoDevicePool {
        /// The C function.
        function: &'static str,
        /// The device ordinal.
        device: usize,
    },

    /// `VRAMPOOL_CONF` is not a valid config string (or names values the device cannot hold).
    #[error("VRAMPOOL_CONF=`{text}` is invalid: {source}")]
    EnvConfig {
        /// The variable's value ([`vrampool::excerpt`]: its start only, where it is long).
        text: String,
        /// What is wrong with it.
        source: PoolError,
    },

    /// `VRAMPOOL_CONF` is set to bytes that are not UTF-8.
    #[error("VRAMPOOL_CONF is invalid: its value is not UTF-8 text")]
    EnvConfigNotUtf8,

    /// A string freed with `vrampool_string_free` that vrampool did not hand out, or freed already.
    #[error("vrampool_string_free: {addr:#x} is not a string vrampool handed out (freed already?)")]
    UnknownString {
        /// The pointer's address.
        addr: usize,
    },

    /// A panic inside vrampool, caught at the C boundary.
    #[error("{function}: internal fault (a panic inside vrampool): {message}")]
    Panic {
        /// The C function.
        function: &'static str,
        /// The panic's message.
        message: String,
    },
}

impl CapiError {
    /// The status code a C function returns for this error.
    pub fn status(&self) -> Status {
        match self {
            CapiError::Pool(err) | CapiError::EnvConfig { source: err, .. } => pool_status(err),
            CapiError::Cuda(CudaError::Pool(err)) => pool_status(err),
            CapiError::Cuda(err) if err.is_out_of_memory() => Status::OutOfMemory,
            CapiError::Cuda(CudaError::VirtualMemoryUnsupported { .. }) => Status::Unsupported,
            CapiError::Cuda(_) => Status::Device,
            CapiError::NullArgument { .. }
            | CapiError::NotUtf8 { .. }
            | CapiError::BadDevice { .. }
            | CapiError::UnknownString { .. } => Status::BadArgument,
            CapiError::NoSuchPool { .. } | CapiError::NoDevicePool { .. } => Status::NoPool,
            CapiError::NoAddressRange { .. } => Status::OutOfMemory,
            CapiError::EnvConfigNotUtf8 => Status::BadConfig,
            CapiError::Panic { .. } => Status::Internal,
        }
    }

    /// Whether the error is a configuration that can never work (retrying cannot help).
    pub fn is_config(&self) -> bool {
        self.status() == Status::BadConfig
    }
}

/// The status code of a core error.
fn pool_status(err: &PoolError) -> Status {
    match err {
        PoolError::ZeroSize | PoolError::AlignmentNotPowerOfTwo { .. } | PoolError::AlignmentTooLarge { .. } => {
            Status::BadArgument
        }
        PoolError::OutOfMemory { .. }
        | PoolError::DeviceOutOfMemory { .. }
        | PoolError::AddressSpaceExhausted { .. }
        | PoolError::HostOutOfMemory { .. }
        | PoolError::BlockTooSmall { .. } => Status::OutOfMemory,
        PoolError::NotLive { .. } => Status::NotLive,
        PoolError::ForeignAddress { .. } | PoolError::InteriorAddress { .. } => Status::ForeignAddress,
        PoolError::InvalidConfig { .. } | PoolError::BadConfigString { .. } => Status::BadConfig,
        PoolError::Unsupported { .. } => Status::Unsupported,
        PoolError::Backend { .. }
        | PoolError::InjectedFault { .. }
        | PoolError::InvalidBackendCall { .. }
        | PoolError::Worker { .. }
        | PoolError::HostAccess { .. }
        | PoolError::CanaryMismatch { .. } => Status::Device,
        _ => Status::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_failure_has_its_code() {
        let cases = [
            (CapiError::Pool(PoolError::ZeroSize), Status::BadArgument),
            (CapiError::Pool(PoolError::AlignmentNotPowerOfTwo { alignment: 3 }), Status::BadArgument),
            (
                CapiError::Pool(PoolError::OutOfMemory { requested: 1, live: 2, reserved: 3, cap: 4 }),
                Status::OutOfMemory,
            ),
            (
                CapiError::Pool(PoolError::HostOutOfMemory { what: "block records", count: 1 << 40, bytes: 1 << 44 }),
                Status::OutOfMemory,
            ),
            (
                CapiError::Pool(PoolError::BlockTooSmall { requested: 9, block_size: 8, fitting_block_size: 256 }),
                Status::OutOfMemory,
            ),
            (
                CapiError::Pool(PoolError::AddressSpaceExhausted {
                    call: "reserve_range",
                    requested: 1 << 41,
                    base: 1 << 40,
                    space: 1 << 40,
                }),
                Status::OutOfMemory,
            ),
            (CapiError::Pool(PoolError::NotLive { addr: 0x100 }), Status::NotLive),
            (CapiError::Pool(PoolError::ForeignAddress { addr: 0x100 }), Status::ForeignAddress),
            (CapiError::Pool(PoolError::InteriorAddress { addr: 0x108, block: 0x100 }), Status::ForeignAddress),
            (
                CapiError::Pool(PoolError::BadConfigString { key: "colour".into(), reason: "unknown key".into() }),
                Status::BadConfig,
            ),
            (CapiError::Pool(PoolError::Unsupported { call: "map", backend: "sim".into() }), Status::Unsupported),
            (CapiError::Cuda(CudaError::DriverNotFound { searched: "libcuda.so.1".into() }), Status::Device),
            (CapiError::Cuda(CudaError::VirtualMemoryUnsupported { ordinal: 0 }), Status::Unsupported),
            (
                CapiError::Cuda(CudaError::Call {
                    call: "cuMemCreate",
                    code: 2,
                    name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
                }),
                Status::OutOfMemory,
            ),
            (CapiError::NullArgument { function: "f", argument: "out" }, Status::BadArgument),
            (CapiError::NoSuchPool { function: "f", handle: 7 }, Status::NoPool),
            (CapiError::NoAddressRange { max: 65536 }, Status::OutOfMemory),
            (CapiError::NoDevicePool { function: "f", device: 0 }, Status::NoPool),
            (CapiError::EnvConfigNotUtf8, Status::BadConfig),
            (CapiError::Panic { function: "f", message: "boom".into() }, Status::Internal),
        ];
        for (err, status) in cases {
            assert_eq!(err.status(), status, "{err}");
            assert_eq!(err.is_config(), status == Status::BadConfig, "{err}");
        }
    }

    #[test]
    fn a_bad_environment_config_names_the_variable_and_the_key() {
        let source = PoolError::BadConfigString { key: "colour".into(), reason: "unknown key".into() };
        let err = CapiError::EnvConfig { text: "colour=blue".into(), source };
        assert_eq!(
            err.to_string(),
            "VRAMPOOL_CONF=`colour=blue` is invalid: bad config string at `colour`: unknown key"
        );
        assert_eq!(err.status(), Status::BadConfig);
    }
}
