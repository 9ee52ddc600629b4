//! A validated allocation request.

use crate::error::{Error, Result};
use crate::units::MIN_BLOCK;

/// An allocation request checked for bad input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    /// Bytes asked for.
    pub(crate) size: u64,
    /// Bytes the block takes: the size rounded up to [`MIN_BLOCK`], or `u64::MAX` where that overflows
    /// (no pool can serve it; the pool answers with its out-of-memory error).
    pub(crate) span: u64,
    /// The alignment to honour, at least [`MIN_BLOCK`].
    pub(crate) align: u64,
}

impl Request {
    /// Checks a request: size 0 and alignments that are not powers of two are refused.
    #[inline]
    pub(crate) fn new(size: u64, alignment: u64) -> Result<Self> {
        if size == 0 {
            return Err(Error::ZeroSize);
        }
        if !alignment.is_power_of_two() {
            return Err(Error::AlignmentNotPowerOfTwo { alignment });
        }
        let span = size.checked_next_multiple_of(MIN_BLOCK).unwrap_or(u64::MAX);
        Ok(Request { size, span, align: alignment.max(MIN_BLOCK) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_requests_are_refused() {
        assert_eq!(Request::new(0, 256), Err(Error::ZeroSize));
        assert_eq!(Request::new(1, 0), Err(Error::AlignmentNotPowerOfTwo { alignment: 0 }));
        assert_eq!(Request::new(1, 384), Err(Error::AlignmentNotPowerOfTwo { alignment: 384 }));
        assert_eq!(Request::new(1, 1).unwrap(), Request { size: 1, span: 256, align: 256 });
        assert_eq!(Request::new(u64::MAX, 256).unwrap().span, u64::MAX);
        assert_eq!(Request::new(300, 4096).unwrap(), Request { size: 300, span: 512, align: 4096 });
    }
}
