//! Gzip-compressed traces: recognised by their magic bytes, decompressed as they are read.

use std::io::{self, Read};

use flate2::read::MultiGzDecoder;

use crate::error::{Error, Result};

/// The first two bytes of every gzip member.
pub(crate) const MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The decompressed bytes of gzip data (all members, as `gzip -d` does), read on demand.
pub(crate) struct GzipReader<R: Read> {
    decoder: MultiGzDecoder<CountingReader<R>>,
    /// Bytes decompressed so far.
    decoded: u64,
}

impl<R: Read> GzipReader<R> {
    /// A reader of the decompressed content of the gzip data `compressed` yields.
    pub(crate) fn new(compressed: R) -> Self {
        GzipReader {
            decoder: MultiGzDecoder::new(CountingReader { inner: compressed, bytes: 0, failed: false }),
            decoded: 0,
        }
    }

    /// Compressed bytes read so far.
    pub(crate) fn compressed_bytes(&self) -> u64 {
        self.decoder.get_ref().bytes
    }

    /// Reads decompressed bytes of the trace `name` into `buf`: how many (0 at the end of the data).
    pub(crate) fn read(&mut self, name: &str, buf: &mut [u8]) -> Result<usize> {
        loop {
            match self.decoder.read(buf) {
                Ok(read) => {
                    self.decoded += read as u64;
                    return Ok(read);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(source) if self.decoder.get_ref().failed => return Err(Error::Io { path: name.into(), source }),
                Err(source) => return Err(Error::Gzip { name: name.to_owned(), decoded: self.decoded, source }),
            }
        }
    }
}

/// A reader that counts the bytes it yields and remembers whether reading failed.
struct CountingReader<R> {
    inner: R,
    bytes: u64,
    failed: bool,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buf).inspect_err(|error| {
            self.failed |= error.kind() != io::ErrorKind::Interrupted;
        })?;
        self.bytes += read as u64;
        Ok(read)
    }
}
