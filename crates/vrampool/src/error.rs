//! The one error type of the core crate: every failure of a pool, a backend or a configuration.

/// Result of a vrampool operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a pool, a backend or a configuration.
///
/// Messages name the numbers involved (requested, live, reserved, cap) so that a log line alone says what
/// happened. An operation that returns an error leaves the pool exactly as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An allocation of zero bytes.
    #[error("allocation of 0 bytes requested")]
    ZeroSize,

    /// An alignment that is not a power of two.
    #[error("alignment {alignment} is not a power of two")]
    AlignmentNotPowerOfTwo {
        /// The alignment asked for.
        alignment: u64,
    },

    /// An alignment larger than the pool can guarantee.
    #[error("alignment {alignment} exceeds the largest alignment this pool guarantees ({max})")]
    AlignmentTooLarge {
        /// The alignment asked for.
        alignment: u64,
        /// The largest alignment the pool guarantees.
        max: u64,
    },

    /// A request refused because serving it would pass the pool's cap.
    #[error(
        "out of memory: requested {requested} bytes with {live} bytes live and {reserved} bytes reserved; \
         the cap is {cap} bytes"
    )]
    OutOfMemory {
        /// Bytes requested.
        requested: u64,
        /// Bytes live (requested by allocations not yet freed) at the time.
        live: u64,
        /// Bytes the pool held from the device at the time.
        reserved: u64,
        /// The most the pool may hold.
        cap: u64,
    },

    /// A fixed pool with the `Reject` fallback refused a request larger than its blocks.
    #[error(
        "request of {requested} bytes does not fit this pool's {block_size}-byte blocks; \
         a block size of {fitting_block_size} bytes would fit it"
    )]
    BlockTooSmall {
        /// Bytes requested.
        requested: u64,
        /// The pool's block size.
        block_size: u64,
        /// The smallest block size (a multiple of 256 bytes) that would hold the request.
        fitting_block_size: u64,
    },

    /// A free of an address that is the start of a block of this pool but not live (a second free).
    #[error("free of {addr:#x}: not a live allocation of this pool (freed already?)")]
    NotLive {
        /// The address passed to free.
        addr: u64,
    },

    /// A free of an address this pool never handed out and that lies in none of its memory.
    #[error("free of {addr:#x}: the address lies outside every segment of this pool")]
    ForeignAddress {
        /// The address passed to free.
        addr: u64,
    },

    /// A free of an address inside a block rather than at its start.
    #[error("free of {addr:#x}: the address is inside the block that starts at {block:#x}, not its start")]
    InteriorAddress {
        /// The address passed to free.
        addr: u64,
        /// The start of the block that contains it.
        block: u64,
    },

    /// A configuration value out of range.
    #[error("invalid configuration: {field} = {value}: {reason}")]
    InvalidConfig {
        /// The configuration field.
        field: &'static str,
        /// The value given, as text.
        value: String,
        /// Why it is refused.
        reason: String,
    },

    /// A config string with an unknown key or a bad value.
    #[error("bad config string at `{key}`: {reason}")]
    BadConfigString {
        /// The key (or the item, where it has no `=`).
        key: String,
        /// What is wrong.
        reason: String,
    },

    /// A device call failed.
    #[error("{call} failed: {message}")]
    Backend {
        /// The device call (for CUDA, the driver function).
        call: &'static str,
        /// What the device said.
        message: String,
    },

    /// The device has no memory left for a call.
    #[error("{call}: device out of memory: {requested} bytes requested, {used} of {capacity} bytes in use")]
    DeviceOutOfMemory {
        /// The device call.
        call: &'static str,
        /// Bytes the call asked for.
        requested: u64,
        /// Bytes of device memory in use before the call.
        used: u64,
        /// The device's total memory.
        capacity: u64,
    },

    /// A simulated or host device with no room left in its own range of addresses for a call.
    #[error("{call}: no room for {requested} bytes in the device's address range of {space} bytes from {base:#x}")]
    AddressSpaceExhausted {
        /// The device call.
        call: &'static str,
        /// Bytes the call asked for.
        requested: u64,
        /// The first address of the device's range.
        base: u64,
        /// The size of the device's range in bytes.
        space: u64,
    },

    /// A failure planted by fault injection on a simulated or host backend.
    #[error("{call} failed: fault injected at backend call #{index}")]
    InjectedFault {
        /// The device call.
        call: &'static str,
        /// The 1-based number of the call since the fault plan was set.
        index: u64,
    },

    /// A call the backend does not offer (virtual memory on a device without it).
    #[error("{call}: not supported by the {backend} backend")]
    Unsupported {
        /// The device call.
        call: &'static str,
        /// The backend's name.
        backend: String,
    },

    /// A call to a backend with arguments that break its contract (a bug in the caller).
    #[error("{call}: invalid arguments: {reason}")]
    InvalidBackendCall {
        /// The device call.
        call: &'static str,
        /// What was wrong.
        reason: String,
    },

    /// A pool's background worker thread could not be started.
    #[error("could not start the pool's background worker: {message}")]
    Worker {
        /// What the operating system said.
        message: String,
    },

    /// The host has no memory for a pool's bookkeeping (its per-block records), for example for a class
    /// of billions of blocks.
    #[error("no host memory for {what}: {bytes} bytes needed for {count} blocks")]
    HostOutOfMemory {
        /// The table that could not be allocated.
        what: &'static str,
        /// Blocks it was to record.
        count: u64,
        /// Bytes it needed.
        bytes: u64,
    },

    /// A host-memory read or write outside mapped memory.
    #[error("host memory access of {len} bytes at {addr:#x} touches memory that is not mapped")]
    HostAccess {
        /// Start of the access.
        addr: u64,
        /// Length of the access.
        len: u64,
    },

    /// A canary written into host memory was found changed.
    #[error("canary mismatch at {addr:#x}: expected {expected:#018x}, found {found:#018x}")]
    CanaryMismatch {
        /// Address of the first changed word.
        addr: u64,
        /// The word written.
        expected: u64,
        /// The word found.
        found: u64,
    },
}

impl Error {
    /// Shorthand for an [`Error::InvalidConfig`].
    pub fn invalid_config(field: &'static str, value: impl ToString, reason: impl Into<String>) -> Self {
        Error::InvalidConfig { field, value: value.to_string(), reason: reason.into() }
    }

    /// Whether the error means the device or the pool ran out of memory (or of addresses).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self,
            Error::OutOfMemory { .. } | Error::DeviceOutOfMemory { .. } | Error::AddressSpaceExhausted { .. }
        )
    }
}
