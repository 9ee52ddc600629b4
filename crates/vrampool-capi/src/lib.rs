//! The C ABI of vrampool, and the shared library (`libvrampool_c.so`) PyTorch loads as its CUDA allocator.
//!
//! Two sets of C functions, declared in `include/vrampool.h` at the repository root:
//!
//! - **PyTorch's pluggable allocator**: [`vrampool_torch_alloc`] and [`vrampool_torch_free`], with the
//!   signatures `torch.cuda.memory.CUDAPluggableAllocator(path, "vrampool_torch_alloc",
//!   "vrampool_torch_free")` expects. One pool per device, made on the device's first allocation from
//!   the config string in `VRAMPOOL_CONF` (the syntax of the `vrampool` command; default: the adaptive pool
//!   on CUDA virtual memory). [`vrampool_stats_json`], [`vrampool_device_pool_exists`],
//!   [`vrampool_device_trim`] and [`vrampool_device_trim_all`] work on those pools.
//! - **Pools a program makes itself**: [`vrampool_pool_create`] (a config string; `backend=host` or
//!   `backend=sim` for a pool without a GPU, whose addresses are synthetic: no pointers to read or write
//!   through), [`vrampool_pool_alloc`], [`vrampool_pool_free`],
//!   [`vrampool_pool_trim`], [`vrampool_pool_stats_json`], [`vrampool_pool_destroy`].
//!
//! Every function returns a [`Status`] code (0 for success) or NULL on failure, and records the reason for
//! [`vrampool_last_error`] (per thread). Null pointers, unknown handles, double frees and foreign
//! addresses are error codes, never crashes, and no panic crosses into C. JSON strings are freed with
//! [`vrampool_string_free`].
//!
//! ```
//! use std::ffi::CStr;
//!
//! // SAFETY: the config is a NUL-terminated string; the out-pointer is a local.
//! unsafe {
//!     let pool = vrampool_c::vrampool_pool_create(c"backend=host".as_ptr());
//!     assert!(!pool.is_null());
//!     let mut addr = 0;
//!     assert_eq!(vrampool_c::vrampool_pool_alloc(pool, 1 << 20, 0, 0, &mut addr), 0);
//!     assert_eq!(vrampool_c::vrampool_pool_free(pool, addr), 0);
//!     assert_eq!(vrampool_c::vrampool_pool_free(pool, addr), vrampool_c::Status::NotLive.code());
//!     println!("{}", CStr::from_ptr(vrampool_c::vrampool_last_error()).to_str().unwrap());
//!     vrampool_c::vrampool_pool_destroy(pool);
//! }
//! ```
#![warn(clippy::undocumented_unsafe_blocks, clippy::multiple_unsafe_ops_per_block, clippy::missing_safety_doc)]

mod abi_boundary;
mod backed_pool;
mod c_string;
mod device_backend;
mod device_pools;
mod error;
mod handle_table;
mod known_streams;
mod last_error;
mod pool_api;
mod pool_counters;
mod report_visit;
mod status;
mod torch_api;

pub use backed_pool::{MAX_REPORTED_BLOCKS, MAX_REPORTED_SEGMENTS};
pub use c_string::vrampool_string_free;
pub use device_backend::HOST_CAPACITY;
pub use device_pools::{CONFIG_VARIABLE, DEFAULT_DEVICE_BACKEND, MAX_DEVICES, PRIVATE_INITIAL_SIZE};
pub use error::CapiError;
pub use last_error::{vrampool_last_error, vrampool_last_error_code};
pub use pool_api::{
    DEFAULT_BACKEND, PoolHandle, vrampool_pool_alloc, vrampool_pool_counters, vrampool_pool_create,
    vrampool_pool_create_on_device, vrampool_pool_destroy, vrampool_pool_free, vrampool_pool_record_stream,
    vrampool_pool_reset_peaks, vrampool_pool_set_limit, vrampool_pool_stats_json, vrampool_pool_trim,
    vrampool_pool_visit,
};
pub use pool_counters::Counters;
pub use report_visit::{BlockInfo, BlockVisitor, SegmentInfo, SegmentVisitor};
pub use status::Status;
pub use torch_api::{
    TORCH_ALIGNMENT, vrampool_device_counters, vrampool_device_pool_exists, vrampool_device_private_pool_create,
    vrampool_device_reset_peaks, vrampool_device_set_limit, vrampool_device_trim, vrampool_device_trim_all,
    vrampool_device_visit, vrampool_stats_json, vrampool_torch_alloc, vrampool_torch_free,
    vrampool_torch_record_stream,
};

/// Strings handed to C and not yet freed with [`vrampool_string_free`] (for leak checks).
pub fn outstanding_strings() -> usize {
    c_string::outstanding()
}

/// Pools made with [`vrampool_pool_create`] and not yet destroyed (for leak checks).
pub fn live_pools() -> usize {
    handle_table::HANDLES.len()
}
