//! Per-block tables in host memory, allocated so that a host without room for one is an error
//! ([`Error::HostOutOfMemory`]) rather than an abort: a pool's records grow with its block count, which a
//! config string sets, and an abort inside a process that loaded the pool (PyTorch's) would take the
//! process down with it.

use crate::error::{Error, Result};

/// A table of `count` entries, each made by `make`, or [`Error::HostOutOfMemory`] naming `what` when the
/// host cannot hold it.
pub(crate) fn host_table<T>(what: &'static str, count: usize, make: impl FnMut() -> T) -> Result<Box<[T]>> {
    let mut table = Vec::new();
    table.try_reserve_exact(count).map_err(|_| Error::HostOutOfMemory {
        what,
        count: count as u64,
        bytes: (count as u64).saturating_mul(std::mem::size_of::<T>() as u64),
    })?;
    table.extend(std::iter::repeat_with(make).take(count));
    Ok(table.into_boxed_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_holds_what_it_was_made_with() {
        let mut next = 0;
        let table = host_table("test", 4, || {
            next += 1;
            next
        })
        .unwrap();
        assert_eq!(&*table, &[1, 2, 3, 4]);
    }

    #[test]
    fn a_table_the_host_cannot_hold_is_an_error_naming_it() {
        // 2^59 entries of 16 bytes: more than any address space, refused before anything is written.
        let err = host_table("block records", 1 << 59, || [0u64; 2]).unwrap_err();
        assert_eq!(err, Error::HostOutOfMemory { what: "block records", count: 1 << 59, bytes: 1 << 63 });
        assert_eq!(
            err.to_string(),
            format!("no host memory for block records: {} bytes needed for {} blocks", 1u64 << 63, 1u64 << 59)
        );
    }
}
