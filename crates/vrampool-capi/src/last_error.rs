//! The calling thread's last failure, as C reads it: `vrampool_last_error()` and
//! `vrampool_last_error_code()`.
//!
//! Every C function of vrampool (but these two and `vrampool_string_free` on success) forgets the
//! previous failure when it starts, so after a call the last error describes that call.

use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::CapiError;
use crate::status::Status;

thread_local! {
    /// The last failure on this thread: its status and its message.
    static LAST_ERROR: RefCell<Option<(Status, CString)>> = const { RefCell::new(None) };
}

/// Whether any thread has recorded a failure yet. Until one has, every thread's last error is empty and
/// clearing it needs no look at the thread's storage (in a shared library, each look is a call into the
/// dynamic loader: a tenth of a class-served allocation's time through the C ABI).
static ANY_RECORDED: AtomicBool = AtomicBool::new(false);

/// Forgets the calling thread's last failure.
#[inline]
pub(crate) fn clear() {
    // A thread that recorded a failure set the flag before, in its own program order, so it sees it here.
    if !ANY_RECORDED.load(Ordering::Relaxed) {
        return;
    }
    let _ = LAST_ERROR.try_with(|last| {
        if let Ok(mut last) = last.try_borrow_mut()
            && last.is_some()
        {
            *last = None;
        }
    });
}

/// Records `err` as the calling thread's last failure; returns its status.
pub(crate) fn record(err: &CapiError) -> Status {
    let status = err.status();
    ANY_RECORDED.store(true, Ordering::Relaxed);
    let message = CString::new(err.to_string().replace('\0', "\\0")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|last| {
        if let Ok(mut last) = last.try_borrow_mut() {
            *last = Some((status, message));
        }
    });
    status
}

/// The calling thread's last failure as (status, message), for tests.
#[cfg(test)]
pub(crate) fn current() -> Option<(Status, String)> {
    LAST_ERROR.with(|last| last.borrow().as_ref().map(|(status, text)| (*status, text.to_string_lossy().into_owned())))
}

/// The message of the calling thread's last failure: "" where the last call succeeded.
///
/// The text stays valid until the next call of a vrampool function on the same thread; it is never NULL
/// and the caller must not free it.
#[unsafe(no_mangle)]
pub extern "C" fn vrampool_last_error() -> *const c_char {
    std::panic::catch_unwind(|| {
        LAST_ERROR
            .try_with(|last| match last.try_borrow() {
                Ok(last) => last.as_ref().map_or(c"".as_ptr(), |(_, text)| text.as_ptr()),
                Err(_) => c"".as_ptr(),
            })
            .unwrap_or(c"".as_ptr())
    })
    .unwrap_or(c"".as_ptr())
}

/// The status code of the calling thread's last failure (a `vrampool_status`): `VRAMPOOL_STATUS_OK`
/// where the last call succeeded. Useful after a function that returns a pointer (NULL on failure).
#[unsafe(no_mangle)]
pub extern "C" fn vrampool_last_error_code() -> c_int {
    std::panic::catch_unwind(|| {
        LAST_ERROR
            .try_with(|last| last.try_borrow().ok().and_then(|last| last.as_ref().map(|(s, _)| s.code())))
            .ok()
            .flatten()
            .unwrap_or(Status::Ok.code())
    })
    .unwrap_or(Status::Internal.code())
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::*;

    fn message() -> String {
        // SAFETY: the pointer is a NUL-terminated string owned by this thread, read before any other call.
        unsafe { CStr::from_ptr(vrampool_last_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn the_last_failure_is_per_thread_and_cleared_by_the_next_call() {
        clear();
        assert_eq!(message(), "");
        assert_eq!(vrampool_last_error_code(), 0);
        let status = record(&CapiError::NullArgument { function: "vrampool_pool_free", argument: "pool" });
        assert_eq!(status, Status::BadArgument);
        assert_eq!(message(), "vrampool_pool_free: argument `pool` is a null pointer");
        assert_eq!(vrampool_last_error_code(), Status::BadArgument.code());
        std::thread::spawn(|| assert_eq!(message(), "")).join().unwrap();
        clear();
        assert_eq!(message(), "");
        assert_eq!(current(), None);
    }
}
