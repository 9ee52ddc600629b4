//! The trace formats, and telling them apart by content.

use serde::{Deserialize, Serialize};

use crate::pickle::{HIGHEST_PROTOCOL, PROTO, STOP, is_opcode};

/// The header line of an RMM `logging_resource_adaptor` log.
pub const RMM_CSV_HEADER: &str = "Thread,Time,Action,Pointer,Size,Stream";

/// The header line of a vrampool CSV event log.
pub const VRAMPOOL_CSV_HEADER: &str = "time_us,action,addr,size,stream";

/// A trace file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceFormat {
    /// A pickled PyTorch memory snapshot (`torch.cuda.memory._snapshot()`, `_dump_snapshot()`).
    PytorchSnapshot,
    /// An RMM `logging_resource_adaptor` CSV log.
    RmmCsv,
    /// A vrampool CSV event log.
    VrampoolCsv,
}

impl TraceFormat {
    /// The format of `content` (already decompressed), judged from its bytes; `None` if it is none of the
    /// formats.
    ///
    /// A CSV log is recognised by its header line (a UTF-8 byte-order mark, blank lines before it and spaces
    /// around the column names are allowed). A pickle starts with the PROTO opcode (protocols 2 to 5) or, for
    /// protocols 0 and 1, starts with an opcode byte and ends with the STOP opcode.
    pub fn detect(content: &[u8]) -> Option<TraceFormat> {
        if let Some(header) = first_line(content) {
            if header_matches(header, RMM_CSV_HEADER) {
                return Some(TraceFormat::RmmCsv);
            }
            if header_matches(header, VRAMPOOL_CSV_HEADER) {
                return Some(TraceFormat::VrampoolCsv);
            }
        }
        match content {
            [PROTO, protocol, ..] if *protocol <= HIGHEST_PROTOCOL => Some(TraceFormat::PytorchSnapshot),
            [first, .., STOP] if is_opcode(*first) => Some(TraceFormat::PytorchSnapshot),
            _ => None,
        }
    }

    /// The format of content that starts with `head` and goes on, judged from its first bytes: a CSV log's
    /// header line, or a pickle's first opcode (PROTO, or any opcode for protocols 0 and 1, whose STOP opcode
    /// at the end the decoder checks); `None` if it is none of the formats.
    pub(crate) fn detect_start(head: &[u8]) -> Option<TraceFormat> {
        match Self::detect(head) {
            Some(format) => Some(format),
            None => head.first().is_some_and(|&first| is_opcode(first)).then_some(TraceFormat::PytorchSnapshot),
        }
    }

    /// A short human name of the format.
    pub const fn name(self) -> &'static str {
        match self {
            TraceFormat::PytorchSnapshot => "PyTorch memory snapshot",
            TraceFormat::RmmCsv => "RMM CSV log",
            TraceFormat::VrampoolCsv => "vrampool CSV",
        }
    }
}

impl std::fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The first non-blank line, without a byte-order mark or line ending.
fn first_line(content: &[u8]) -> Option<&[u8]> {
    let content = content.strip_prefix(b"\xef\xbb\xbf").unwrap_or(content);
    content.split(|&b| b == b'\n').map(<[u8]>::trim_ascii).find(|line| !line.is_empty())
}

/// Whether `line` is `header`, allowing spaces around the column names.
pub(crate) fn header_matches(line: &[u8], header: &str) -> bool {
    let mut found = line.split(|&b| b == b',').map(<[u8]>::trim_ascii);
    let mut expected = header.split(',').map(str::as_bytes);
    loop {
        match (found.next(), expected.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a == b => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_logs_are_told_by_their_header() {
        assert_eq!(TraceFormat::detect(b"Thread,Time,Action,Pointer,Size,Stream\n1,2"), Some(TraceFormat::RmmCsv));
        assert_eq!(
            TraceFormat::detect(b"\xef\xbb\xbf\n  time_us, action ,addr,size,stream\r\n"),
            Some(TraceFormat::VrampoolCsv)
        );
        assert_eq!(TraceFormat::detect(b"time_us,action,addr,size\n"), None);
        assert_eq!(TraceFormat::detect(b"time_us,action,addr,size,stream,extra\n"), None);
        assert_eq!(TraceFormat::detect(b"thread,time,action,pointer,size,stream\n"), None);
    }

    #[test]
    fn pickles_are_told_by_their_opcodes() {
        for protocol in 2..=5 {
            assert_eq!(TraceFormat::detect(&[0x80, protocol, b'}', b'.']), Some(TraceFormat::PytorchSnapshot));
        }
        // An unknown protocol is a pickle that the decoder then refuses with its own message.
        assert_eq!(TraceFormat::detect(&[0x80, 6, b'}', b'.']), Some(TraceFormat::PytorchSnapshot));
        assert_eq!(TraceFormat::detect(&[0x80, 6, b'}']), None);
        assert_eq!(TraceFormat::detect(b"(dp0\n."), Some(TraceFormat::PytorchSnapshot));
        assert_eq!(TraceFormat::detect(b"cposix\nsystem\n."), Some(TraceFormat::PytorchSnapshot));
        assert_eq!(TraceFormat::detect(b"cposix\nsystem\n"), None);
        assert_eq!(TraceFormat::detect(b""), None);
    }

    #[test]
    fn the_start_of_longer_content_is_told_by_its_header_or_first_opcode() {
        assert_eq!(TraceFormat::detect_start(b"time_us,action,addr,size,stream\n0,al"), Some(TraceFormat::VrampoolCsv));
        assert_eq!(TraceFormat::detect_start(&[0x80, 4, b'}', b'(']), Some(TraceFormat::PytorchSnapshot));
        // A protocol 0 pickle's STOP is at its end, which the decoder checks.
        assert_eq!(TraceFormat::detect_start(b"(dp0\nVaction"), Some(TraceFormat::PytorchSnapshot));
        assert_eq!(TraceFormat::detect_start(&[0; 64]), None);
        assert_eq!(TraceFormat::detect_start(b"# not a trace"), None);
    }
}
