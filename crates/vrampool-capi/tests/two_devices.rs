//! One process using two devices through the PyTorch entry points gets two independent pools: their stats
//! never mix, a pointer freed with another device's number goes back to the pool that handed it out (the
//! number is where to look first), and a pointer neither handed out is an error that changes neither pool.
//! (Host memory stands in for the GPUs: each device's pool is made from the same `VRAMPOOL_CONF`.)

use std::ffi::{CStr, c_void};

use vrampool_c::{
    vrampool_device_pool_exists, vrampool_last_error, vrampool_last_error_code, vrampool_stats_json,
    vrampool_string_free, vrampool_torch_alloc, vrampool_torch_free,
};

const MIB: usize = 1 << 20;

fn stats(device: i32) -> serde_json::Value {
    let json = vrampool_stats_json(device);
    assert!(!json.is_null(), "device {device} has a pool");
    // SAFETY: a non-null result is a NUL-terminated string the library made; it is freed right after.
    let value = serde_json::from_str(&unsafe { CStr::from_ptr(json) }.to_string_lossy()).unwrap();
    // `json` came from `vrampool_stats_json` and is freed once.
    vrampool_string_free(json);
    value
}

fn allocated(device: i32) -> u64 {
    stats(device)["stats"]["allocated_bytes"]["current"].as_u64().unwrap()
}

fn alloc(size: usize, device: i32) -> *mut c_void {
    // SAFETY: host memory takes any stream label; NULL is the default stream.
    let ptr = unsafe { vrampool_torch_alloc(size, device, std::ptr::null_mut()) };
    assert!(!ptr.is_null(), "allocation on device {device}");
    ptr
}

#[test]
fn two_devices_have_independent_pools() {
    // SAFETY: this test binary runs this one test, before any other thread reads the environment.
    unsafe { std::env::set_var("VRAMPOOL_CONF", "backend=host") };
    let a0 = alloc(MIB, 0);
    let a1 = alloc(2 * MIB, 1);
    assert_ne!(a0, a1, "the devices hand out different addresses");
    assert_eq!((vrampool_device_pool_exists(0), vrampool_device_pool_exists(1)), (1, 1));
    assert_eq!(vrampool_device_pool_exists(2), 0);
    assert_eq!((allocated(0), allocated(1)), (MIB as u64, 2 * MIB as u64));

    // A pointer no pool handed out: an error naming it, both pools unchanged.
    let foreign = a1.wrapping_byte_add(1 << 40);
    vrampool_torch_free(foreign, MIB, 1, std::ptr::null_mut());
    assert_ne!(vrampool_last_error_code(), 0);
    // SAFETY: the message is a NUL-terminated string of this thread.
    let message = unsafe { CStr::from_ptr(vrampool_last_error()) }.to_string_lossy().into_owned();
    assert!(message.contains(&format!("{:#x}", foreign.addr())), "{message}");
    assert_eq!((allocated(0), allocated(1)), (MIB as u64, 2 * MIB as u64));

    // Device 0's pointer freed as device 1's: device 0's pool takes it back, device 1's is unchanged.
    vrampool_torch_free(a0, MIB, 1, std::ptr::null_mut());
    assert_eq!(vrampool_last_error_code(), 0);
    assert_eq!((allocated(0), allocated(1)), (0, 2 * MIB as u64));
    vrampool_torch_free(a0, MIB, 0, std::ptr::null_mut());
    assert_ne!(vrampool_last_error_code(), 0, "a second free is refused");
    assert_eq!((allocated(0), allocated(1)), (0, 2 * MIB as u64));
    vrampool_torch_free(a1, 2 * MIB, 1, std::ptr::null_mut());
    assert_eq!((allocated(0), allocated(1)), (0, 0));
    assert_eq!(stats(0)["stats"]["allocations"].as_u64(), Some(1));
    assert_eq!(stats(1)["stats"]["allocations"].as_u64(), Some(1));
}
