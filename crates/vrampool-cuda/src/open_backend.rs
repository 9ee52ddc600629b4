//! The one place a front end opens the device its pools take memory from: the C ABI (`backend=` of a config
//! string), `vrampool replay --on` and the replays of vrampool-replay all call [`open_backend`], so that a
//! config string's `page_size` means the same to each, and its absence too: the device's granularity, on
//! which the default pool (the adaptive pool) sizes its own pages.

use std::sync::Arc;

use vrampool::{Backend, BackendKind, HostMemory, HostMemoryConfig, SimDevice, SimDeviceConfig};

use crate::cuda_device::CudaDevice;
use crate::cuda_virtual::CudaVirtual;
use crate::error::CudaError;
use crate::transfer::CudaMemory;

/// Which device a front end opens, and how.
#[derive(Clone, Debug)]
pub struct DeviceRequest {
    /// The kind of device.
    pub kind: BackendKind,
    /// The device's ordinal (the GPU's, for the CUDA kinds).
    pub ordinal: usize,
    /// The page size the config string names, if any (the simulated device and CUDA virtual memory); the
    /// device's granularity where `None`.
    pub page_size: Option<u64>,
    /// The simulated device's settings; its page size is set from the two fields above.
    pub sim: SimDeviceConfig,
    /// Host memory's settings.
    pub host: HostMemoryConfig,
}

impl DeviceRequest {
    /// Device `ordinal` of `kind`, pages of `page_size` (else the device's granularity), the simulated
    /// device and host memory at their default settings.
    pub fn new(kind: BackendKind, ordinal: usize, page_size: Option<u64>) -> Self {
        DeviceRequest { kind, ordinal, page_size, sim: SimDeviceConfig::default(), host: HostMemoryConfig::default() }
    }

    /// The request with the simulated device's settings `sim`.
    pub fn sim(mut self, sim: SimDeviceConfig) -> Self {
        self.sim = sim;
        self
    }

    /// The request with host memory's settings `host`.
    pub fn host(mut self, host: HostMemoryConfig) -> Self {
        self.host = host;
        self
    }
}

/// A device opened for a front end, as pools see it and as the front end needs it besides.
#[derive(Clone, Debug)]
pub struct OpenedBackend {
    /// The device as pools see it.
    pub backend: Arc<dyn Backend>,
    /// The same device as a CUDA backend, for the CUDA kinds (streams, the driver's memory figures).
    pub cuda: Option<Arc<dyn CudaMemory>>,
    /// The same device when it is simulated (its modelled driver time, its clock).
    pub simulated: Option<Arc<SimDevice>>,
}

/// Opens the device `request` asks for. The simulated device and CUDA virtual memory map pages of the
/// request's page size (their granularity where it names none); host memory and CUDA segments have no
/// pages. An error (never a panic) where the page size does not suit the device, or where a CUDA device
/// cannot be opened.
pub fn open_backend(request: DeviceRequest) -> Result<OpenedBackend, CudaError> {
    let page = request.page_size;
    Ok(match request.kind {
        BackendKind::Sim => {
            let config = match page {
                Some(page) => request.sim.page_size(page)?,
                None => request.sim,
            };
            let device = Arc::new(SimDevice::new(config));
            OpenedBackend { backend: device.clone(), cuda: None, simulated: Some(device) }
        }
        BackendKind::Host => {
            OpenedBackend { backend: Arc::new(HostMemory::new(request.host)), cuda: None, simulated: None }
        }
        BackendKind::Cuda => {
            let device = Arc::new(CudaDevice::new(request.ordinal)?);
            OpenedBackend { backend: device.clone(), cuda: Some(device), simulated: None }
        }
        BackendKind::CudaVirtual => {
            let device = Arc::new(CudaVirtual::with_page_size(request.ordinal, page)?);
            OpenedBackend { backend: device.clone(), cuda: Some(device), simulated: None }
        }
    })
}

#[cfg(test)]
mod tests {
    use vrampool::MIB;

    use super::*;

    #[test]
    fn the_simulated_device_maps_the_named_page_else_its_granularity() {
        let granularity = |request: DeviceRequest| open_backend(request).unwrap().backend.granularity();
        let sim = |page| DeviceRequest::new(BackendKind::Sim, 0, page);
        assert_eq!(granularity(sim(None)), Some(2 * MIB));
        assert_eq!(granularity(sim(Some(4 * MIB))), Some(4 * MIB));
        let opened = open_backend(sim(None)).unwrap();
        assert!(opened.simulated.is_some() && opened.cuda.is_none());
        let refused = open_backend(sim(Some(3 * MIB))).unwrap_err();
        assert!(matches!(refused, CudaError::Pool(vrampool::Error::InvalidConfig { field: "page_size", .. })));
    }

    #[test]
    fn host_memory_takes_its_settings_and_no_page() {
        let host = HostMemoryConfig::default().capacity(64 * MIB);
        let request = DeviceRequest::new(BackendKind::Host, 0, Some(4 * MIB)).host(host);
        let opened = open_backend(request).unwrap();
        assert_eq!(opened.backend.capacity(), 64 * MIB);
        assert!(opened.simulated.is_none() && opened.cuda.is_none());
    }
}
