//! The device a pool of the C ABI takes its memory from, made from the config string's `backend` key.

use parking_lot::Mutex;
use vrampool::{BackendKind, GIB, HostMemoryConfig, SimDeviceConfig};
use vrampool_cuda::{CudaError, DeviceRequest, OpenedBackend, open_backend};

use crate::error::CapiError;

/// The memory `backend=host` pretends to have: 4 GiB, so that every default (a 256 MiB first
/// reservation under a cap of 80%) fits. Host bytes are taken only where memory is touched.
pub const HOST_CAPACITY: u64 = 4 * GIB;

/// The address range of each simulated or host device the C ABI opens, one per pool: 1 TiB, room for
/// the simulated H200's virtual range (twice its memory at the most) beside its segments. A device never
/// hands out an address outside its range, so a pointer of one pool is foreign to every other.
pub const DEVICE_ADDRESS_RANGE: u64 = 1 << 40;

/// The most simulated and host devices open at once in one process: 65536. Their ranges lie from
/// [`DEVICE_ADDRESS_RANGE`] up, below 2^57.
pub const MAX_OPEN_DEVICES: usize = 1 << 16;

/// The address ranges of the simulated and host devices open now, one bit per range.
struct AddressRanges {
    taken: Box<[u64]>,
    /// Where the search for a free range starts: ranges are taken round the table, so that a range given
    /// back is taken again only after every other, and a stale pointer of a destroyed pool is foreign to
    /// the pools made soon after it.
    next: usize,
}

impl AddressRanges {
    /// A table of `count` ranges, all free.
    fn new(count: usize) -> Self {
        AddressRanges { taken: vec![0; count.div_ceil(64)].into_boxed_slice(), next: 0 }
    }

    /// The number of ranges.
    fn count(&self) -> usize {
        self.taken.len() * 64
    }

    /// A free range's index, marked taken; `None` where every range is taken. O(ranges / 64).
    fn take(&mut self) -> Option<usize> {
        let count = self.count();
        let index =
            (0..count).map(|step| (self.next + step) % count).find(|&i| self.taken[i / 64] & (1 << (i % 64)) == 0)?;
        self.taken[index / 64] |= 1 << (index % 64);
        self.next = (index + 1) % count;
        Some(index)
    }

    /// Marks range `index` free.
    fn give_back(&mut self, index: usize) {
        self.taken[index / 64] &= !(1 << (index % 64));
    }
}

/// The ranges of this process's simulated and host devices.
static RANGES: Mutex<Option<AddressRanges>> = Mutex::new(None);

/// The address range of one open simulated or host device: taken from the process's table when the
/// device is opened, given back when dropped (after the device's pool).
#[derive(Debug)]
pub(crate) struct AddressRange {
    index: usize,
}

impl AddressRange {
    /// A free range, or an error where [`MAX_OPEN_DEVICES`] are open.
    fn take() -> Result<Self, CapiError> {
        let mut ranges = RANGES.lock();
        let index = ranges.get_or_insert_with(|| AddressRanges::new(MAX_OPEN_DEVICES)).take();
        index.map(|index| AddressRange { index }).ok_or(CapiError::NoAddressRange { max: MAX_OPEN_DEVICES })
    }

    /// The range's first address.
    pub(crate) fn base(&self) -> u64 {
        (self.index as u64 + 1) * DEVICE_ADDRESS_RANGE
    }
}

impl Drop for AddressRange {
    fn drop(&mut self) {
        if let Some(ranges) = RANGES.lock().as_mut() {
            ranges.give_back(self.index);
        }
    }
}

/// A device opened for a pool of the C ABI, with the address range it holds where it is simulated or host
/// memory (kept for as long as the pool).
pub(crate) struct OpenedDevice {
    /// The device.
    pub(crate) opened: OpenedBackend,
    /// The range of a simulated or host device.
    pub(crate) range: Option<AddressRange>,
}

/// Opens device `ordinal` as `kind` for a pool of the C ABI ([`open_backend`]): pages of `page_size`, or
/// the device's granularity where `None`, as every front end maps; host memory of [`HOST_CAPACITY`]; the simulated device and host memory
/// each in an address range of its own ([`DEVICE_ADDRESS_RANGE`]), whatever their ordinal.
pub(crate) fn open_device(
    kind: BackendKind,
    ordinal: usize,
    page_size: Option<u64>,
) -> Result<OpenedDevice, CapiError> {
    let range = match kind {
        BackendKind::Sim | BackendKind::Host => Some(AddressRange::take()?),
        BackendKind::Cuda | BackendKind::CudaVirtual => None,
    };
    let base = range.as_ref().map_or(0, AddressRange::base);
    let sim = SimDeviceConfig::default().base_address(base).address_space(DEVICE_ADDRESS_RANGE);
    let host =
        HostMemoryConfig::default().capacity(HOST_CAPACITY).base_address(base).address_space(DEVICE_ADDRESS_RANGE);
    let request = DeviceRequest::new(kind, ordinal, page_size).sim(sim).host(host);
    let opened = open_backend(request).map_err(|err| match err {
        CudaError::Pool(err) => CapiError::Pool(err),
        err => CapiError::Cuda(err),
    })?;
    Ok(OpenedDevice { opened, range })
}

#[cfg(test)]
mod tests {
    use super::*;
    use vrampool::MIB;

    #[test]
    fn the_devices_without_a_gpu_open_anywhere() {
        let sim = open_device(BackendKind::Sim, 3, None).unwrap().opened;
        assert!(sim.cuda.is_none() && sim.backend.name().contains("sim"), "{}", sim.backend.name());
        assert_eq!(sim.backend.granularity(), Some(2 * MIB), "the device's granularity, as every front end maps");
        let host = open_device(BackendKind::Host, 0, None).unwrap().opened;
        assert!(host.cuda.is_none());
        assert_eq!(host.backend.capacity(), HOST_CAPACITY);
    }

    #[test]
    fn each_device_without_a_gpu_has_a_range_of_its_own() {
        let devices: Vec<OpenedDevice> = [BackendKind::Sim, BackendKind::Host, BackendKind::Sim, BackendKind::Host]
            .into_iter()
            .map(|kind| open_device(kind, 0, None).unwrap())
            .collect();
        let mut spans: Vec<(u64, u64)> = devices
            .iter()
            .map(|device| {
                let addr = device.opened.backend.allocate_segment(MIB).unwrap();
                let base = device.range.as_ref().unwrap().base();
                assert!(addr >= base && addr + MIB <= base + DEVICE_ADDRESS_RANGE, "{addr:#x} outside {base:#x}");
                (base, base + DEVICE_ADDRESS_RANGE)
            })
            .collect();
        spans.sort_unstable();
        assert!(spans.windows(2).all(|pair| pair[0].1 <= pair[1].0), "ranges overlap: {spans:x?}");
    }

    #[test]
    fn ranges_are_taken_round_the_table_and_run_out() {
        let mut ranges = AddressRanges::new(128);
        let taken: Vec<usize> = (0..128).map(|_| ranges.take().unwrap()).collect();
        assert_eq!(taken, (0..128).collect::<Vec<_>>());
        assert_eq!(ranges.take(), None, "every range is taken");
        ranges.give_back(5);
        ranges.give_back(70);
        assert_eq!(ranges.take(), Some(5));
        assert_eq!(ranges.take(), Some(70));
        ranges.give_back(5);
        ranges.give_back(3);
        assert_eq!(ranges.take(), Some(3), "round the table from the last range taken");
        // The last range's addresses end below 2^57.
        let last = AddressRange { index: MAX_OPEN_DEVICES - 1 };
        assert!(last.base().checked_add(DEVICE_ADDRESS_RANGE).is_some_and(|end| end <= 1 << 57));
        std::mem::forget(last);
    }

    #[test]
    fn a_cuda_device_opens_or_says_why_not() {
        // Without a GPU the driver is missing; with one, device 0 opens. Either way nothing panics.
        match open_device(BackendKind::Cuda, 0, None) {
            Ok(device) => assert!(device.opened.cuda.is_some() && device.range.is_none()),
            Err(err) => assert_eq!(err.status(), crate::status::Status::Device, "{err}"),
        }
        match open_device(BackendKind::Cuda, 1 << 20, None) {
            Ok(_) => panic!("no machine has a millionth GPU"),
            Err(err) => assert_eq!(err.status(), crate::status::Status::Device, "{err}"),
        }
    }
}
