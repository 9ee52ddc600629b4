//! vrampool-cuda: the CUDA backends of vrampool, so that every strategy runs on a real NVIDIA GPU.
//!
//! - [`CudaDevice`]: plain `cuMemAlloc`/`cuMemFree` segments;
//! - [`CudaVirtual`]: CUDA virtual memory management: address ranges reserved once, physical memory
//!   created, mapped, unmapped and moved in granularity chunks (2 MiB on an H200), so a
//!   [`vrampool::DynamicPool`] grows in place. It offers plain segments too, for fallbacks.
//!
//! Both go through cudarc's driver API, loaded at run time: a machine without the NVIDIA driver builds and
//! runs everything else, and asking it for a backend gives [`CudaError::DriverNotFound`], not a panic.
//! A pool allocation's address is a `CUdeviceptr`. Streams are `CUstream` handle values
//! ([`vrampool::StreamId`]; 0 is the legacy default stream); a pool's cross-stream reuse is ordered with
//! CUDA events from a pool of created events. Streams other than the default one are registered with the
//! backend first ([`CudaMemory::register_stream`]), so that no stray number reaches the driver.
//!
//! Pool memory is used from CUDA code through [`PoolSlice`], a typed view that cudarc's copies, memsets
//! and kernel launches accept, or through the byte-level copies and memsets of [`CudaMemory`].
//! [`open_backend()`] opens the device a front end asks for by kind (these two, the simulated device or host
//! memory). [`devices`] lists the GPUs; [`mod@bench`] measures allocation latency against `cuMemAlloc` and CUDA's own
//! pool.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use vrampool::{DynamicConfig, DynamicPool, Pool};
//! use vrampool_cuda::{CudaMemory, CudaVirtual, PoolSlice};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let backend = Arc::new(CudaVirtual::new(0)?);
//! let pool = DynamicPool::new(backend.clone(), DynamicConfig::default())?;
//! let stream = backend.context().expect("a real driver").new_stream()?;
//!
//! let mut a = PoolSlice::<f32, _>::zeroed(&pool, &backend, 1 << 20, &stream)?;
//! let mut b = PoolSlice::<f32, _>::zeroed(&pool, &backend, 1 << 20, &stream)?;
//! stream.memcpy_htod(&vec![1.5f32; 1 << 20], &mut a)?;
//! stream.memcpy_dtod(&a, &mut b)?;
//! assert!(stream.clone_dtoh(&b)?.iter().all(|&x| x == 1.5));
//! println!("{} bytes reserved", pool.stats().reserved_bytes.current);
//! # Ok(())
//! # }
//! ```
#![warn(clippy::undocumented_unsafe_blocks, clippy::multiple_unsafe_ops_per_block, clippy::missing_safety_doc)]

pub mod bench;
mod context;
mod cuda_device;
mod cuda_virtual;
mod device_info;
mod driver;
mod error;
mod event_pool;
#[cfg(test)]
mod fake_driver;
mod library;
mod open_backend;
mod pool_slice;
mod segment_table;
mod stream_registry;
mod transfer;

pub use cuda_device::CudaDevice;
pub use cuda_virtual::CudaVirtual;
pub use device_info::{DeviceInfo, devices};
pub use error::CudaError;
pub use library::driver_present;
pub use open_backend::{DeviceRequest, OpenedBackend, open_backend};
pub use pool_slice::PoolSlice;
pub use transfer::CudaMemory;
