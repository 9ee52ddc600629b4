//! The device a pool of the C ABI takes its memory from, made from the config string's `backend` key.

use vrampool::{BackendKind, GIB, HostMemoryConfig, MIB, SimDeviceConfig};
use vrampool_cuda::{CudaError, DefaultPage, DeviceRequest, OpenedBackend, open_backend};

use crate::error::CapiError;

/// The memory `backend=host` pretends to have: 4 GiB, so that every default (a 256 MiB first
/// reservation under a cap of 80%) fits. Host bytes are taken only where memory is touched.
pub const HOST_CAPACITY: u64 = 4 * GIB;

/// The physical page of `backend=cuda-vm`, and of the simulated device (`backend=sim`, so that it maps
/// memory as the GPU does), when the config string names none: 16 MiB, where replays map the device's
/// granularity ([`DefaultPage`] says why the two differ).
pub const DEFAULT_PAGE: DefaultPage = DefaultPage::Bytes(16 * MIB);

/// How far apart the addresses of two simulated or host devices start, so that no address belongs to two
/// devices (as on real GPUs, whose address ranges are disjoint): 1 TiB per ordinal.
const DEVICE_ADDRESS_STRIDE: u64 = 1 << 40;

/// Opens device `ordinal` as `kind` for a pool of the C ABI ([`open_backend`]): pages of `page_size`, or
/// [`DEFAULT_PAGE`] where `None`; host memory of [`HOST_CAPACITY`]; the simulated device and host memory
/// with their addresses apart by ordinal.
pub(crate) fn open_device(
    kind: BackendKind,
    ordinal: usize,
    page_size: Option<u64>,
) -> Result<OpenedBackend, CapiError> {
    let offset = ordinal as u64 * DEVICE_ADDRESS_STRIDE;
    let sim = SimDeviceConfig::default();
    let sim_base = sim.base_address + offset;
    let host = HostMemoryConfig::default().capacity(HOST_CAPACITY);
    let host_base = host.base_address + offset;
    let request = DeviceRequest::new(kind, ordinal, page_size, DEFAULT_PAGE)
        .sim(sim.base_address(sim_base))
        .host(host.base_address(host_base));
    open_backend(request).map_err(|err| match err {
        CudaError::Pool(err) => CapiError::Pool(err),
        err => CapiError::Cuda(err),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_devices_without_a_gpu_open_anywhere() {
        let sim = open_device(BackendKind::Sim, 3, None).unwrap();
        assert!(sim.cuda.is_none() && sim.backend.name().contains("sim"), "{}", sim.backend.name());
        assert_eq!(sim.backend.granularity(), Some(16 * MIB), "the C ABI's default page");
        let host = open_device(BackendKind::Host, 0, None).unwrap();
        assert!(host.cuda.is_none());
        assert_eq!(host.backend.capacity(), HOST_CAPACITY);
    }

    #[test]
    fn a_cuda_device_opens_or_says_why_not() {
        // Without a GPU the driver is missing; with one, device 0 opens. Either way nothing panics.
        match open_device(BackendKind::Cuda, 0, None) {
            Ok(device) => assert!(device.cuda.is_some()),
            Err(err) => assert_eq!(err.status(), crate::status::Status::Device, "{err}"),
        }
        match open_device(BackendKind::Cuda, 1 << 20, None) {
            Ok(_) => panic!("no machine has a millionth GPU"),
            Err(err) => assert_eq!(err.status(), crate::status::Status::Device, "{err}"),
        }
    }
}
