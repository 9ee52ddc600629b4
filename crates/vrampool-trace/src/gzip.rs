//! Gzip-compressed traces: recognised by their magic bytes, decompressed whole into memory.

use std::io::Read;

use flate2::read::MultiGzDecoder;

use crate::error::{Error, Result};

/// The first two bytes of every gzip member.
const MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The largest buffer reserved up front from the size a gzip trailer announces (the buffer still grows past
/// it if the data is larger).
const MAX_RESERVE: usize = 1 << 30;

/// Whether `bytes` start like gzip data.
pub(crate) fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// The decompressed content of the gzip data `bytes` (all members, as `gzip -d` does) of the trace `name`.
pub(crate) fn decompress(name: &str, bytes: &[u8]) -> Result<Vec<u8>> {
    // The trailer's last 4 bytes hold the uncompressed size modulo 2^32: reserve it so that the output is
    // not copied as it grows. Deflate expands at most 1032-fold, which bounds a forged size.
    let announced = match bytes {
        [.., a, b, c, d] => u32::from_le_bytes([*a, *b, *c, *d]) as usize,
        _ => 0,
    };
    let reserve = announced.min(bytes.len().saturating_mul(1032)).min(MAX_RESERVE);
    let mut content = Vec::with_capacity(reserve.saturating_add(1));
    MultiGzDecoder::new(bytes).read_to_end(&mut content).map_err(|source| Error::Gzip {
        name: name.to_owned(),
        decoded: content.len() as u64,
        source,
    })?;
    Ok(content)
}
