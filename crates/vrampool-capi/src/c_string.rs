//! Strings vrampool hands to C (the JSON texts), and `vrampool_string_free`, which takes them back.
//!
//! Every string handed out is remembered until it is freed, so that freeing a pointer vrampool did not
//! hand out, or freeing one twice, is a recorded error rather than a corrupted heap. Strings are rare (a
//! stats call), so the lock costs nothing that matters.

use std::collections::HashSet;
use std::ffi::{CString, c_char};
use std::sync::LazyLock;

use parking_lot::Mutex;

use crate::abi_boundary::guarded;
use crate::error::CapiError;

/// The addresses of the strings handed out and not yet freed.
static HANDED_OUT: LazyLock<Mutex<HashSet<usize>>> = LazyLock::new(Mutex::default);

/// Hands `text` to C as a NUL-terminated string the caller frees with `vrampool_string_free` (a NUL
/// inside the text is written as `\0`).
pub(crate) fn hand_out(text: String) -> *mut c_char {
    let text = if text.contains('\0') { text.replace('\0', "\\0") } else { text };
    let pointer = CString::new(text).unwrap_or_default().into_raw();
    HANDED_OUT.lock().insert(pointer.addr());
    pointer
}

/// Strings handed out and not yet freed.
pub(crate) fn outstanding() -> usize {
    HANDED_OUT.lock().len()
}

/// Frees a string a vrampool function returned. NULL is ignored; a pointer vrampool did not hand out (or
/// freed already) is left alone and recorded as the thread's last error (`VRAMPOOL_STATUS_BAD_ARGUMENT`).
#[unsafe(no_mangle)]
#[allow(clippy::not_unsafe_ptr_arg_deref, reason = "the pointer is taken back only once found among those handed out")]
pub extern "C" fn vrampool_string_free(text: *mut c_char) {
    let _ = guarded("vrampool_string_free", || {
        if text.is_null() {
            return Ok(());
        }
        if !HANDED_OUT.lock().remove(&text.addr()) {
            return Err(CapiError::UnknownString { addr: text.addr() });
        }
        // SAFETY: the pointer came from `CString::into_raw` in `hand_out` (it was in the set) and is taken
        // back exactly once (it has just left the set).
        drop(unsafe { CString::from_raw(text) });
        Ok(())
    });
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::*;
    use crate::last_error;
    use crate::status::Status;

    #[test]
    fn strings_come_back_once() {
        let text = hand_out("{\"a\":1}".to_string());
        // SAFETY: `text` is a live string from `hand_out`.
        assert_eq!(unsafe { CStr::from_ptr(text) }.to_str().unwrap(), "{\"a\":1}");
        vrampool_string_free(text);
        assert_eq!(last_error::current(), None);
        vrampool_string_free(text);
        let (status, message) = last_error::current().unwrap();
        assert_eq!(status, Status::BadArgument);
        assert!(message.contains("not a string vrampool handed out"), "{message}");
        vrampool_string_free(std::ptr::null_mut());
        assert_eq!(last_error::current(), None);
        let mut local = *b"mine\0";
        vrampool_string_free(local.as_mut_ptr().cast());
        assert_eq!(last_error::current().unwrap().0, Status::BadArgument);
    }
}
