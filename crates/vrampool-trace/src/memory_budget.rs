//! How much memory reading a trace may hold: a floor, plus a multiple of the bytes read from the file. A small
//! file cannot make a reader hold much, whatever its content expands to; a plain (uncompressed) file never
//! reaches the budget, since no content takes more than a few dozen bytes of memory per byte.

use crate::error::{Error, Result};

/// Memory a read may always hold, in bytes.
pub(crate) const MEMORY_FLOOR_BYTES: u64 = 64 << 20;

/// Memory a read may hold per byte read from the file (a compressed byte, for a gzipped file). The bundled
/// snapshots need at most 23 (gzip expands them 11- to 13-fold).
pub(crate) const MEMORY_PER_FILE_BYTE: u64 = 256;

/// Held bytes are checked against the budget at least this often: every this many content bytes decoded or
/// events built.
pub(crate) const CHECK_EVERY: u64 = 64 << 10;

/// The memory a read of the trace `name` may hold after `file_bytes` bytes of its file were read.
pub(crate) fn check(name: &str, held_bytes: u64, file_bytes: u64) -> Result<()> {
    let limit = MEMORY_FLOOR_BYTES.saturating_add(MEMORY_PER_FILE_BYTE.saturating_mul(file_bytes));
    if held_bytes <= limit {
        return Ok(());
    }
    Err(Error::MemoryBudget { name: name.to_owned(), held_bytes, limit, file_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_the_floor_plus_a_multiple_of_the_file() {
        assert!(check("t", MEMORY_FLOOR_BYTES, 0).is_ok());
        assert!(check("t", MEMORY_FLOOR_BYTES + 1, 0).is_err());
        assert!(check("t", MEMORY_FLOOR_BYTES + 256, 1).is_ok());
        let error = check("t", MEMORY_FLOOR_BYTES + 257, 1).unwrap_err();
        assert!(matches!(error, Error::MemoryBudget { limit, .. } if limit == MEMORY_FLOOR_BYTES + 256), "{error}");
        assert!(check("t", u64::MAX, u64::MAX).is_ok());
    }
}
