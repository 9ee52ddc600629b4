//! The content of a trace file as its readers take it: in pieces, through a look-ahead buffer, decompressed on
//! the way where the file is gzipped, and refused past [`ReadOptions::max_content_bytes`]. A reader never holds
//! the whole content, only the window it is looking at.
//!
//! [`ReadOptions::max_content_bytes`]: crate::ReadOptions::max_content_bytes

use std::io::{self, Read};

use crate::error::{Error, Result};
use crate::gzip::{self, GzipReader};

/// The most content bytes a read takes by default (decompressed bytes, for a gzipped file): twenty times the
/// largest bundled trace, whose million events take 51 MB. [`crate::ReadOptions::max_content_bytes`] changes it.
pub const DEFAULT_MAX_CONTENT_BYTES: u64 = 1 << 30;

/// Bytes the window holds at least, and reads from the file at a time.
const CHUNK_BYTES: usize = 64 << 10;

/// The most a gzipped file's own claim of its size (its trailer) is believed, as a multiple of the file's
/// size, when sizing tables up front: the bundled snapshots expand 11- to 13-fold.
const MAX_EXPANSION_BELIEVED: u64 = 32;

/// Where the content comes from.
enum Source<'r> {
    /// The file's own bytes.
    Plain {
        reader: Box<dyn Read + 'r>,
        /// Bytes read so far.
        bytes: u64,
    },
    /// The decompressed bytes of a gzipped file.
    Gzip(Box<GzipReader<Box<dyn Read + 'r>>>),
}

/// A line of the content, as [`Content::line`] finds it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line<'a> {
    /// A line ended by a newline (consumed, not included).
    Ended(&'a [u8]),
    /// The last bytes of the content, with no newline after them.
    Last(&'a [u8]),
    /// A line longer than the most asked for: nothing is consumed.
    TooLong,
    /// Nothing is left.
    End,
}

/// The content of the trace `name`, read through a window.
pub(crate) struct Content<'r> {
    name: &'r str,
    source: Source<'r>,
    /// The window's storage; bytes `pos..end` are read and not yet consumed.
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// The content offset of `buf[0]`.
    base: u64,
    /// Whether the source has no more bytes.
    eof: bool,
    max_bytes: u64,
    /// About how many bytes the content has, where known: for sizing tables up front, never believed past
    /// `max_bytes`.
    size_hint: u64,
}

impl<'r> Content<'r> {
    /// The content of the file `reader` reads, named `name` in errors; gzip is recognised by its magic bytes.
    /// More than `max_bytes` bytes of content are an error ([`Error::ContentTooLarge`]).
    pub(crate) fn open(name: &'r str, mut reader: impl Read + 'r, max_bytes: u64) -> Result<Self> {
        let mut head = [0; 2];
        let mut got = 0;
        while got < head.len() {
            match reader.read(&mut head[got..]) {
                Ok(0) => break,
                Ok(read) => got += read,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => return Err(Error::Io { path: name.into(), source }),
            }
        }
        let gzipped = head[..got] == gzip::MAGIC;
        let reader: Box<dyn Read + 'r> = Box::new(io::Cursor::new(head).take(got as u64).chain(reader));
        let source =
            if gzipped { Source::Gzip(Box::new(GzipReader::new(reader))) } else { Source::Plain { reader, bytes: 0 } };
        let buf = vec![0; CHUNK_BYTES];
        Ok(Content { name, source, buf, pos: 0, end: 0, base: 0, eof: false, max_bytes, size_hint: 0 })
    }

    /// The content of a file of `file_bytes` bytes whose first bytes are `head` and last four `tail`, as
    /// [`Content::open`] reads it, with the size of the content estimated from them.
    pub(crate) fn open_sized(
        name: &'r str,
        reader: impl Read + 'r,
        max_bytes: u64,
        file_bytes: u64,
        head: &[u8],
        tail: [u8; 4],
    ) -> Result<Self> {
        let mut content = Content::open(name, reader, max_bytes)?;
        let size = if head.starts_with(&gzip::MAGIC) {
            // The trailer holds the size modulo 2^32: a claim, believed only as far as it is plausible.
            u64::from(u32::from_le_bytes(tail)).min(file_bytes.saturating_mul(MAX_EXPANSION_BELIEVED))
        } else {
            file_bytes
        };
        content.size_hint = size.min(max_bytes);
        Ok(content)
    }

    /// About how many bytes the content has (0 when unknown): for sizing tables up front.
    pub(crate) fn size_hint(&self) -> u64 {
        self.size_hint
    }

    /// The trace's name.
    pub(crate) fn name(&self) -> &'r str {
        self.name
    }

    /// The offset in the content of the next byte.
    #[inline]
    pub(crate) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Bytes read from the file so far (compressed bytes, for a gzipped file).
    pub(crate) fn file_bytes(&self) -> u64 {
        match &self.source {
            Source::Plain { bytes, .. } => *bytes,
            Source::Gzip(gzip) => gzip.compressed_bytes(),
        }
    }

    /// The next byte, consumed; `None` at the end of the content.
    #[inline]
    pub(crate) fn byte(&mut self) -> Result<Option<u8>> {
        if self.pos == self.end && self.fill(1)? == 0 {
            return Ok(None);
        }
        let byte = self.buf[self.pos];
        self.pos += 1;
        Ok(Some(byte))
    }

    /// The next `len` bytes, consumed; `None` (and nothing consumed) when the content ends before them. The
    /// window grows to `len` bytes: callers keep `len` small.
    #[inline]
    pub(crate) fn take(&mut self, len: usize) -> Result<Option<&[u8]>> {
        if self.end - self.pos < len && self.fill(len)? < len {
            return Ok(None);
        }
        let start = self.pos;
        self.pos += len;
        Ok(Some(&self.buf[start..self.pos]))
    }

    /// Consumes the next `len` bytes, or what is left when fewer are: whether `len` bytes were there.
    pub(crate) fn skip(&mut self, mut len: u64) -> Result<bool> {
        loop {
            let available = (self.end - self.pos) as u64;
            if len <= available {
                self.pos += len as usize;
                return Ok(true);
            }
            len -= available;
            self.pos = self.end;
            if self.fill(1)? == 0 {
                return Ok(false);
            }
        }
    }

    /// Up to `len` of the next bytes, not consumed (fewer at the end of the content).
    pub(crate) fn peek(&mut self, len: usize) -> Result<&[u8]> {
        let available = self.fill(len)?;
        Ok(&self.buf[self.pos..self.pos + available.min(len)])
    }

    /// Whether nothing is left.
    pub(crate) fn at_end(&mut self) -> Result<bool> {
        Ok(self.fill(1)? == 0)
    }

    /// The next line, of at most `max` bytes before its newline.
    pub(crate) fn line(&mut self, max: usize) -> Result<Line<'_>> {
        let mut searched = 0;
        let (len, ended) = loop {
            let window = &self.buf[self.pos..self.end];
            if let Some(found) = window[searched..].iter().position(|&b| b == b'\n') {
                break (searched + found, true);
            }
            if window.len() > max {
                return Ok(Line::TooLong);
            }
            searched = window.len();
            if self.fill(searched + 1)? == searched {
                if searched == 0 {
                    return Ok(Line::End);
                }
                break (searched, false);
            }
        };
        if len > max {
            return Ok(Line::TooLong);
        }
        let start = self.pos;
        self.pos += len + usize::from(ended);
        let line = &self.buf[start..start + len];
        Ok(if ended { Line::Ended(line) } else { Line::Last(line) })
    }

    /// Consumes the rest of the line, its newline included, however long it is.
    pub(crate) fn skip_line(&mut self) -> Result<()> {
        loop {
            if let Some(found) = self.buf[self.pos..self.end].iter().position(|&b| b == b'\n') {
                self.pos += found + 1;
                return Ok(());
            }
            self.pos = self.end;
            if self.fill(1)? == 0 {
                return Ok(());
            }
        }
    }

    /// Makes `want` bytes available after the position where the content has them: how many are.
    #[inline]
    fn fill(&mut self, want: usize) -> Result<usize> {
        if self.end - self.pos >= want || self.eof { Ok(self.end - self.pos) } else { self.refill(want) }
    }

    #[cold]
    fn refill(&mut self, want: usize) -> Result<usize> {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.buf.len() < want {
            self.buf.resize(want.next_multiple_of(CHUNK_BYTES), 0);
        }
        while self.end < want && !self.eof {
            let read = match &mut self.source {
                Source::Plain { reader, bytes } => {
                    let read = loop {
                        match reader.read(&mut self.buf[self.end..]) {
                            Ok(read) => break read,
                            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                            Err(source) => return Err(Error::Io { path: self.name.into(), source }),
                        }
                    };
                    *bytes += read as u64;
                    read
                }
                Source::Gzip(gzip) => gzip.read(self.name, &mut self.buf[self.end..])?,
            };
            if read == 0 {
                self.eof = true;
            }
            self.end += read;
            if self.base + self.end as u64 > self.max_bytes {
                return Err(Error::ContentTooLarge { name: self.name.to_owned(), limit: self.max_bytes });
            }
        }
        Ok(self.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(bytes: &[u8]) -> Content<'_> {
        Content::open("t", bytes, u64::MAX).unwrap()
    }

    /// `bytes` gzipped.
    fn gz(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        io::Write::write_all(&mut encoder, bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn bytes_come_out_in_order_across_refills() {
        let data: Vec<u8> = (0..3 * CHUNK_BYTES + 17).map(|i| (i % 251) as u8).collect();
        for source in [data.clone(), gz(&data)] {
            let mut content = content(&source);
            let mut out = Vec::new();
            while let Some(byte) = content.byte().unwrap() {
                out.push(byte);
                if out.len() % 1000 == 0 {
                    out.extend_from_slice(content.take(7).unwrap().unwrap());
                }
            }
            assert_eq!(out, data);
            assert_eq!(content.offset(), data.len() as u64);
            assert!(content.at_end().unwrap());
        }
    }

    #[test]
    fn take_at_the_end_consumes_nothing_and_skip_says_whether_it_went_the_whole_way() {
        let mut content = content(b"abcdef");
        assert_eq!(content.take(2).unwrap(), Some(&b"ab"[..]));
        assert_eq!(content.take(5).unwrap(), None);
        assert_eq!(content.peek(10).unwrap(), b"cdef");
        assert!(content.skip(3).unwrap());
        assert!(!content.skip(3).unwrap());
        assert_eq!(content.offset(), 6);
    }

    #[test]
    fn lines_end_at_newlines_and_long_ones_are_refused_then_skipped() {
        let long = vec![b'x'; 2 * CHUNK_BYTES];
        let mut data = b"one\r\n\ntwo\n".to_vec();
        data.extend_from_slice(&long);
        data.extend_from_slice(b"\nlast");
        let mut content = content(&data);
        assert_eq!(content.line(100).unwrap(), Line::Ended(b"one\r"));
        assert_eq!(content.line(100).unwrap(), Line::Ended(b""));
        assert_eq!(content.line(3).unwrap(), Line::Ended(b"two"));
        assert_eq!(content.line(100).unwrap(), Line::TooLong);
        assert_eq!(content.line(long.len()).unwrap(), Line::Ended(&long[..]));
        assert_eq!(content.line(3).unwrap(), Line::TooLong);
        content.skip_line().unwrap();
        assert_eq!(content.line(100).unwrap(), Line::End);

        let mut content = self::content(b"a\nbc");
        assert_eq!(content.line(1).unwrap(), Line::Ended(b"a"));
        assert_eq!(content.line(2).unwrap(), Line::Last(b"bc"));
        assert_eq!(content.line(2).unwrap(), Line::End);
    }

    #[test]
    fn content_past_the_limit_is_an_error_naming_the_limit() {
        let data = vec![b'N'; 3 * CHUNK_BYTES];
        for source in [data.clone(), gz(&data)] {
            let mut content = Content::open("big", &source[..], CHUNK_BYTES as u64).unwrap();
            let error = content.skip(data.len() as u64).unwrap_err();
            assert!(matches!(error, Error::ContentTooLarge { limit, .. } if limit == CHUNK_BYTES as u64), "{error}");
        }
        let mut exact = Content::open("exact", &data[..], data.len() as u64).unwrap();
        assert!(exact.skip(data.len() as u64).unwrap());
        assert!(exact.at_end().unwrap());
    }

    #[test]
    fn file_bytes_count_the_compressed_bytes_of_a_gzipped_file() {
        let data = vec![0; 1 << 20];
        let compressed = gz(&data);
        let mut content = content(&compressed);
        assert!(content.skip(data.len() as u64).unwrap());
        assert!(content.at_end().unwrap());
        assert_eq!(content.file_bytes(), compressed.len() as u64);
        let mut plain = self::content(&data);
        assert!(plain.skip(data.len() as u64).unwrap());
        assert!(plain.at_end().unwrap());
        assert_eq!(plain.file_bytes(), data.len() as u64);
    }
}
