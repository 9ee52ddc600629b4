//! The device a pool of the C ABI takes its memory from, made from the config string's `backend` key.

use std::sync::Arc;

use vrampool::{Backend, BackendKind, GIB, HostMemory, HostMemoryConfig, MIB, SimDevice, SimDeviceConfig};
use vrampool_cuda::{CudaDevice, CudaMemory, CudaVirtual};

use crate::error::CapiError;

/// The memory `backend=host` pretends to have: 4 GiB, so that every default (a 256 MiB first
/// reservation under a cap of 80%) fits. Host bytes are taken only where memory is touched.
pub const HOST_CAPACITY: u64 = 4 * GIB;

/// The physical page of `backend=cuda-vm`, and of the simulated device (`backend=sim`, so that it maps
/// memory as the GPU does), when the config string names none: 16 MiB. On the bundled
/// traces, replayed on the simulated H200, the default hybrid pool reaches a utilization of 0.97 to 0.98
/// with 16 MiB pages and spends a fifth to a half of the driver time of 2 MiB pages (`vrampool replay
/// TRACE --strategy hybrid --config page_size=16MiB` against `page_size=2MiB`).
pub const DEFAULT_PAGE_SIZE: u64 = 16 * MIB;

/// How far apart the addresses of two simulated or host devices start, so that no address belongs to two
/// devices (as on real GPUs, whose address ranges are disjoint): 1 TiB per ordinal.
const DEVICE_ADDRESS_STRIDE: u64 = 1 << 40;

/// A device for a pool, and the same device as a CUDA backend where it is one (for registering streams).
pub(crate) struct DeviceBackend {
    /// The device as pools see it.
    pub(crate) backend: Arc<dyn Backend>,
    /// The device as a CUDA backend, for `backend=cuda` and `backend=cuda-vm`.
    pub(crate) cuda: Option<Arc<dyn CudaMemory>>,
}

impl DeviceBackend {
    /// Opens device `ordinal` as `kind`: the simulated device or CUDA virtual memory with pages of
    /// `page_size` ([`DEFAULT_PAGE_SIZE`] when `None`), host memory, or CUDA segments (these two ignore the
    /// page size). The simulated device and host memory start their addresses apart by ordinal.
    pub(crate) fn open(kind: BackendKind, ordinal: usize, page_size: Option<u64>) -> Result<Self, CapiError> {
        Ok(match kind {
            BackendKind::Sim => {
                let config = SimDeviceConfig::default().page_size(page_size.unwrap_or(DEFAULT_PAGE_SIZE))?;
                let base = config.base_address + ordinal as u64 * DEVICE_ADDRESS_STRIDE;
                DeviceBackend { backend: Arc::new(SimDevice::new(config.base_address(base))), cuda: None }
            }
            BackendKind::Host => {
                let config = HostMemoryConfig::default().capacity(HOST_CAPACITY);
                let base = config.base_address + ordinal as u64 * DEVICE_ADDRESS_STRIDE;
                DeviceBackend { backend: Arc::new(HostMemory::new(config.base_address(base))), cuda: None }
            }
            BackendKind::Cuda => {
                let device = Arc::new(CudaDevice::new(ordinal)?);
                DeviceBackend { backend: device.clone(), cuda: Some(device) }
            }
            BackendKind::CudaVirtual => {
                let device =
                    Arc::new(CudaVirtual::with_page_size(ordinal, Some(page_size.unwrap_or(DEFAULT_PAGE_SIZE)))?);
                DeviceBackend { backend: device.clone(), cuda: Some(device) }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_devices_without_a_gpu_open_anywhere() {
        let sim = DeviceBackend::open(BackendKind::Sim, 3, None).unwrap();
        assert!(sim.cuda.is_none() && sim.backend.name().contains("sim"), "{}", sim.backend.name());
        let host = DeviceBackend::open(BackendKind::Host, 0, None).unwrap();
        assert!(host.cuda.is_none());
        assert_eq!(host.backend.capacity(), HOST_CAPACITY);
    }

    #[test]
    fn a_cuda_device_opens_or_says_why_not() {
        // Without a GPU the driver is missing; with one, device 0 opens. Either way nothing panics.
        match DeviceBackend::open(BackendKind::Cuda, 0, None) {
            Ok(device) => assert!(device.cuda.is_some()),
            Err(err) => assert_eq!(err.status(), crate::status::Status::Device, "{err}"),
        }
        match DeviceBackend::open(BackendKind::Cuda, 1 << 20, None) {
            Ok(_) => panic!("no machine has a millionth GPU"),
            Err(err) => assert_eq!(err.status(), crate::status::Status::Device, "{err}"),
        }
    }
}
