//! The status codes the C functions return.

/// What a C function of vrampool returns: 0 for success, a negative code for each kind of failure.
/// `vrampool_last_error()` gives the message of the calling thread's last failure.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// An argument is unusable: a null pointer, an alignment that is not a power of two or larger than
    /// the pool gives, a device ordinal out of range, text that is not UTF-8.
    BadArgument = -1,
    /// The pool cannot serve the request: it would pass the pool's cap, the device has no memory left, or
    /// a fixed pool that rejects oversize requests got one larger than its blocks; or (making a pool) the
    /// host has no memory for the pool's per-block records.
    OutOfMemory = -2,
    /// A free of the start of a block that is not live: a double free.
    NotLive = -3,
    /// A free of an address the pool never handed out (outside its memory, or inside a block rather than
    /// at its start).
    ForeignAddress = -4,
    /// A config string with an unknown key or a bad value, or values the device cannot hold.
    BadConfig = -5,
    /// The device or its driver failed: no driver, no such device, a driver call that failed.
    Device = -6,
    /// The device lacks something the pool needs (virtual memory management, for `backend=cuda-vm`).
    Unsupported = -7,
    /// A pool handle that is not live (never created, or destroyed), or a device with no pool yet.
    NoPool = -8,
    /// A fault inside vrampool (a caught panic): a bug, the message says where.
    Internal = -9,
}

impl Status {
    /// Every status, in code order.
    pub const ALL: [Status; 10] = [
        Status::Ok,
        Status::BadArgument,
        Status::OutOfMemory,
        Status::NotLive,
        Status::ForeignAddress,
        Status::BadConfig,
        Status::Device,
        Status::Unsupported,
        Status::NoPool,
        Status::Internal,
    ];

    /// The code as C sees it.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The status with this code, if there is one.
    pub fn from_code(code: i32) -> Option<Status> {
        Status::ALL.into_iter().find(|status| status.code() == code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_zero_then_distinct_negatives() {
        assert_eq!(Status::Ok.code(), 0);
        for (index, status) in Status::ALL.into_iter().enumerate() {
            assert_eq!(status.code(), -(index as i32));
            assert_eq!(Status::from_code(status.code()), Some(status));
        }
        assert_eq!(Status::from_code(1), None);
        assert_eq!(Status::from_code(-10), None);
    }
}
