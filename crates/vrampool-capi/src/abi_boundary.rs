//! The boundary every exported function runs its body behind: the last error is cleared, a failure is
//! recorded for `vrampool_last_error()`, and a panic is caught (unwinding into C is undefined behaviour)
//! and turned into [`Status::Internal`].

use std::any::Any;
use std::ffi::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::error::CapiError;
use crate::last_error;
use crate::status::Status;

/// Runs `body` for the C function `function`; a failure or a panic is recorded as the thread's last
/// error and returned as its status.
#[inline]
pub(crate) fn guarded<T>(function: &'static str, body: impl FnOnce() -> Result<T, CapiError>) -> Result<T, Status> {
    last_error::clear();
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(failed(err)),
        Err(payload) => Err(failed(CapiError::Panic { function, message: panic_message(payload) })),
    }
}

/// Records `err` as the thread's last error; returns its status. Out of line: the functions' success path
/// carries no error handling.
#[cold]
#[inline(never)]
fn failed(err: CapiError) -> Status {
    last_error::record(&err)
}

/// [`guarded`] for a C function that returns a status code.
pub(crate) fn guarded_status(function: &'static str, body: impl FnOnce() -> Result<(), CapiError>) -> c_int {
    match guarded(function, body) {
        Ok(()) => Status::Ok.code(),
        Err(status) => status.code(),
    }
}

/// The message a panic carried. The payload is dropped here, behind its own guard: a payload whose drop
/// panics must not unwind into C either.
fn panic_message(payload: Box<dyn Any + Send>) -> String {
    let message = if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_string()
    };
    if catch_unwind(AssertUnwindSafe(move || drop(payload))).is_err() {
        return format!("{message} (and its payload panicked when dropped)");
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_internal_error_naming_the_function() {
        let status = guarded_status("vrampool_pool_trim", || panic!("the books do not balance"));
        assert_eq!(status, Status::Internal.code());
        let (status, message) = last_error::current().unwrap();
        assert_eq!(status, Status::Internal);
        assert_eq!(message, "vrampool_pool_trim: internal fault (a panic inside vrampool): the books do not balance");
    }

    #[test]
    fn an_error_is_recorded_and_a_success_clears_it() {
        let status = guarded_status("f", || Err(CapiError::NullArgument { function: "f", argument: "out" }));
        assert_eq!(status, Status::BadArgument.code());
        assert!(last_error::current().is_some());
        assert_eq!(guarded("f", || Ok(7)), Ok(7));
        assert_eq!(last_error::current(), None);
    }
}
