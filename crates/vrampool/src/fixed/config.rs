//! How a fixed pool is set up.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::units::{MAX_BLOCK_SIZE, MIB, MIN_BLOCK};

/// What a fixed pool does with a request it cannot serve from a block: one larger than a block, one
/// needing more alignment than a block has, or any request once every block is taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fallback {
    /// Refuse it with an error that says which block size would have fit.
    Reject,
    /// Serve it with a device segment of its own, counted as a fallback and freed on free (the default).
    #[default]
    Backend,
}

/// How a [`crate::FixedPool`] is set up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixedConfig {
    /// Bytes per block, a multiple of 256, at most [`MAX_BLOCK_SIZE`]. Default: 4 MiB.
    pub block_size: u64,
    /// Number of blocks. Default: 2048 (8 GiB in all with the default block size).
    pub block_count: u64,
    /// What to do with requests that no block serves. Default: [`Fallback::Backend`].
    pub fallback: Fallback,
}

impl Default for FixedConfig {
    fn default() -> Self {
        FixedConfig { block_size: 4 * MIB, block_count: 2048, fallback: Fallback::Backend }
    }
}

/// The most blocks a fixed pool can hold (block indices are 32-bit, one value marks the end of a list).
pub const MAX_BLOCKS: u64 = u32::MAX as u64 - 1;

impl FixedConfig {
    /// Sets the block size.
    pub fn block_size(mut self, bytes: u64) -> Self {
        self.block_size = bytes;
        self
    }

    /// Sets the number of blocks.
    pub fn block_count(mut self, count: u64) -> Self {
        self.block_count = count;
        self
    }

    /// Sets the fallback.
    pub fn fallback(mut self, fallback: Fallback) -> Self {
        self.fallback = fallback;
        self
    }

    /// The bytes of the one reservation, after checking the configuration against `capacity`.
    pub fn validate(&self, capacity: u64) -> Result<u64> {
        if self.block_size < MIN_BLOCK || self.block_size % MIN_BLOCK != 0 || self.block_size > MAX_BLOCK_SIZE {
            return Err(Error::invalid_config(
                "block_size",
                self.block_size,
                format!("must be a positive multiple of 256, at most {MAX_BLOCK_SIZE}"),
            ));
        }
        if self.block_count == 0 || self.block_count > MAX_BLOCKS {
            return Err(Error::invalid_config("block_count", self.block_count, format!("must be 1 to {MAX_BLOCKS}")));
        }
        match self.block_size.checked_mul(self.block_count) {
            Some(total) if total <= capacity => Ok(total),
            _ => Err(Error::invalid_config(
                "block_count",
                self.block_count,
                format!(
                    "{} blocks of {} bytes exceed the device's {capacity} bytes",
                    self.block_count, self.block_size
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_seeds() {
        let config = FixedConfig::default();
        assert_eq!((config.block_size, config.block_count, config.fallback), (4 * MIB, 2048, Fallback::Backend));
        assert_eq!(config.validate(u64::MAX), Ok(8 << 30));
    }

    #[test]
    fn bad_values_are_named() {
        let err = FixedConfig::default().block_size(100).validate(u64::MAX).unwrap_err();
        assert!(err.to_string().contains("block_size = 100"), "{err}");
        for size in [1 << 56, u64::MAX - 255] {
            let err = FixedConfig::default().block_size(size).block_count(1).validate(u64::MAX).unwrap_err();
            assert!(err.to_string().contains(&format!("at most {MAX_BLOCK_SIZE}")), "{err}");
        }
        assert!(FixedConfig::default().block_size(MAX_BLOCK_SIZE).block_count(1).validate(u64::MAX).is_ok());
        let err = FixedConfig::default().block_count(0).validate(u64::MAX).unwrap_err();
        assert!(err.to_string().contains("block_count = 0"), "{err}");
        let err = FixedConfig::default().validate(1 << 30).unwrap_err();
        assert!(err.to_string().contains("exceed the device's 1073741824 bytes"), "{err}");
    }
}
