//! Shared test support for the C functions called from Rust.

use std::ffi::CStr;

use vrampool_c::vrampool_last_error;

/// The calling thread's last error message, as `vrampool_last_error()` says it.
pub fn last_error() -> String {
    // SAFETY: the message is a NUL-terminated string of this thread, read before the next call.
    unsafe { CStr::from_ptr(vrampool_last_error()) }.to_string_lossy().into_owned()
}
