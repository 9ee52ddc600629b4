//! The one place a front end opens the device its pools take memory from: the C ABI (`backend=` of a config
//! string), `vrampool replay --on` and the replays of vrampool-replay all call [`open_backend`], so that a
//! config string's `page_size` means the same to each.

use std::sync::Arc;

use vrampool::{Backend, BackendKind, HostMemory, HostMemoryConfig, SimDevice, SimDeviceConfig};

use crate::cuda_device::CudaDevice;
use crate::cuda_virtual::CudaVirtual;
use crate::error::CudaError;
use crate::transfer::CudaMemory;

/// The physical page a virtual-memory device maps with where the config string names no `page_size`.
///
/// Each front end names its own ([`DeviceRequest::default_page`]); they differ today. The C ABI maps 16 MiB
/// pages, which on a real GPU cost fewer driver calls for about the same memory; replays map the device's
/// granularity, the finest pages, against which `compare` and `advise` weigh larger ones. The figures
/// behind both are in docs/BENCHMARKS.md ("Default page sizes of the front ends").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultPage {
    /// The device's own granularity (2 MiB on the simulated H200, and on H100 and H200 GPUs).
    Granularity,
    /// This many bytes, a multiple of the device's granularity.
    Bytes(u64),
}

impl DefaultPage {
    /// The page size for a config string that names `page_size` (or none): the named one, else this
    /// default; `None` for the device's granularity.
    pub fn resolve(self, page_size: Option<u64>) -> Option<u64> {
        page_size.or(match self {
            DefaultPage::Granularity => None,
            DefaultPage::Bytes(bytes) => Some(bytes),
        })
    }
}

/// Which device a front end opens, and how.
#[derive(Clone, Debug)]
pub struct DeviceRequest {
    /// The kind of device.
    pub kind: BackendKind,
    /// The device's ordinal (the GPU's, for the CUDA kinds).
    pub ordinal: usize,
    /// The page size the config string names, if any (the simulated device and CUDA virtual memory).
    pub page_size: Option<u64>,
    /// The page size where the config string names none.
    pub default_page: DefaultPage,
    /// The simulated device's settings; its page size is set from the two fields above.
    pub sim: SimDeviceConfig,
    /// Host memory's settings.
    pub host: HostMemoryConfig,
}

impl DeviceRequest {
    /// Device `ordinal` of `kind`, pages of `page_size` (else `default_page`), the simulated device and
    /// host memory at their default settings.
    pub fn new(kind: BackendKind, ordinal: usize, page_size: Option<u64>, default_page: DefaultPage) -> Self {
        DeviceRequest {
            kind,
            ordinal,
            page_size,
            default_page,
            sim: SimDeviceConfig::default(),
            host: HostMemoryConfig::default(),
        }
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
/// request's page size ([`DefaultPage::resolve`]); host memory and CUDA segments have no pages. An error
/// (never a panic) where the page size does not suit the device, or where a CUDA device cannot be opened.
pub fn open_backend(request: DeviceRequest) -> Result<OpenedBackend, CudaError> {
    let page = request.default_page.resolve(request.page_size);
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
    fn a_named_page_size_wins_over_the_default() {
        assert_eq!(DefaultPage::Granularity.resolve(None), None);
        assert_eq!(DefaultPage::Granularity.resolve(Some(8 * MIB)), Some(8 * MIB));
        assert_eq!(DefaultPage::Bytes(16 * MIB).resolve(None), Some(16 * MIB));
        assert_eq!(DefaultPage::Bytes(16 * MIB).resolve(Some(4 * MIB)), Some(4 * MIB));
    }

    #[test]
    fn the_simulated_device_maps_the_resolved_page() {
        let granularity = |request: DeviceRequest| open_backend(request).unwrap().backend.granularity();
        let sim = |page, default| DeviceRequest::new(BackendKind::Sim, 0, page, default);
        assert_eq!(granularity(sim(None, DefaultPage::Granularity)), Some(2 * MIB));
        assert_eq!(granularity(sim(None, DefaultPage::Bytes(16 * MIB))), Some(16 * MIB));
        assert_eq!(granularity(sim(Some(4 * MIB), DefaultPage::Bytes(16 * MIB))), Some(4 * MIB));
        let opened = open_backend(sim(None, DefaultPage::Granularity)).unwrap();
        assert!(opened.simulated.is_some() && opened.cuda.is_none());
        let refused = open_backend(sim(Some(3 * MIB), DefaultPage::Granularity)).unwrap_err();
        assert!(matches!(refused, CudaError::Pool(vrampool::Error::InvalidConfig { field: "page_size", .. })));
    }

    #[test]
    fn host_memory_takes_its_settings_and_no_page() {
        let host = HostMemoryConfig::default().capacity(64 * MIB);
        let request = DeviceRequest::new(BackendKind::Host, 0, Some(4 * MIB), DefaultPage::Granularity).host(host);
        let opened = open_backend(request).unwrap();
        assert_eq!(opened.backend.capacity(), 64 * MIB);
        assert!(opened.simulated.is_none() && opened.cuda.is_none());
    }
}
