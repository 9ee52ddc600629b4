//! The GPUs the driver sees, and what each offers the pools.

use serde::{Deserialize, Serialize};

use crate::driver::{DeviceAttribute, DeviceQuery};
use crate::error::CudaError;
use crate::library::CudaLibrary;

/// One GPU as the pools see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// The device ordinal.
    pub ordinal: usize,
    /// The device's name (`NVIDIA H200`).
    pub name: String,
    /// Device memory in bytes.
    pub total_memory: u64,
    /// Whether virtual memory management (`cuMemCreate`, `cuMemMap`) is supported, so that
    /// [`crate::CudaVirtual`] works.
    pub virtual_memory_supported: bool,
    /// The minimum virtual-memory granularity in bytes, where virtual memory is supported.
    pub granularity: Option<u64>,
    /// Whether CUDA's stream-ordered memory pools (`cuMemAllocAsync`) are supported.
    pub memory_pools_supported: bool,
}

/// Every GPU the driver sees, in ordinal order; an error (never a panic) where the driver library cannot
/// be loaded or initialised.
pub fn devices() -> Result<Vec<DeviceInfo>, CudaError> {
    list_devices(&CudaLibrary::load()?)
}

/// Every device `query` answers for.
pub(crate) fn list_devices(query: &dyn DeviceQuery) -> Result<Vec<DeviceInfo>, CudaError> {
    let count = query.device_count()?;
    (0..count)
        .map(|ordinal| {
            let virtual_memory_supported =
                query.device_attribute(ordinal, DeviceAttribute::VirtualMemorySupported)? != 0;
            let granularity = if virtual_memory_supported { Some(query.device_granularity(ordinal)?) } else { None };
            Ok(DeviceInfo {
                ordinal,
                name: query.device_name(ordinal)?,
                total_memory: query.device_total_memory(ordinal)?,
                virtual_memory_supported,
                granularity,
                memory_pools_supported: query.device_attribute(ordinal, DeviceAttribute::MemoryPoolsSupported)? != 0,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_driver::{FakeConfig, FakeLibrary};

    #[test]
    fn every_device_is_listed_with_what_it_offers() {
        let library = FakeLibrary {
            devices: vec![
                ("NVIDIA H200".into(), FakeConfig { capacity: 150_000_000_000, ..FakeConfig::default() }, true),
                ("Old GPU".into(), FakeConfig { ordinal: 1, virtual_memory: false, ..FakeConfig::default() }, false),
            ],
        };
        let devices = list_devices(&library).unwrap();
        assert_eq!(
            devices,
            vec![
                DeviceInfo {
                    ordinal: 0,
                    name: "NVIDIA H200".into(),
                    total_memory: 150_000_000_000,
                    virtual_memory_supported: true,
                    granularity: Some(2 << 20),
                    memory_pools_supported: true,
                },
                DeviceInfo {
                    ordinal: 1,
                    name: "Old GPU".into(),
                    total_memory: 1 << 30,
                    virtual_memory_supported: false,
                    granularity: None,
                    memory_pools_supported: false,
                },
            ]
        );
        assert!(list_devices(&FakeLibrary { devices: vec![] }).unwrap().is_empty());
    }

    #[test]
    fn listing_without_a_driver_is_an_error_not_a_panic() {
        match devices() {
            Ok(list) => assert!(crate::driver_present(), "{list:?}"),
            Err(err) => {
                if !crate::driver_present() {
                    assert!(matches!(err, CudaError::DriverNotFound { .. }), "{err}");
                }
            }
        }
    }
}
