//! The one error type of the trace crate: every way reading or writing a trace can fail.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Result of a trace operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A place in a trace, for error messages: a line of a CSV log or an entry of a snapshot's device trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Location {
    /// A 1-based line of a CSV log.
    Line(u64),
    /// A 0-based entry of the trace of one device in a PyTorch snapshot.
    Event {
        /// The device index (position in `device_traces`).
        device: usize,
        /// The entry's index in that device's trace.
        index: usize,
    },
    /// Before the first recorded event: a block the trace takes as live from the start.
    BeforeTrace,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Line(line) => write!(f, "line {line}"),
            Location::Event { device, index } => write!(f, "device {device} event {index}"),
            Location::BeforeTrace => write!(f, "the trace start (before the first recorded event)"),
        }
    }
}

/// Everything that can go wrong reading or writing a trace.
///
/// Messages name the file (or the name given for in-memory bytes) and the place: the line of a CSV log, the
/// device and entry index of a snapshot event, or the byte offset of a pickle opcode.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be opened or read.
    #[error("{}: cannot read the file: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },

    /// A gzip stream that ends early or does not decode.
    #[error("{name}: the gzip data is truncated or corrupt ({decoded} bytes decoded before the failure): {source}")]
    Gzip {
        /// The trace's name.
        name: String,
        /// Bytes decoded before the failure.
        decoded: u64,
        /// What the decoder said.
        #[source]
        source: io::Error,
    },

    /// Content longer than [`crate::ReadOptions::max_content_bytes`] (decompressed bytes, for a gzipped file).
    #[error(
        "{name}: the content passes {limit} bytes, the most a read takes (`ReadOptions::max_content_bytes`, \
         `--max-trace-bytes` on the command line): raise it to read a larger trace"
    )]
    ContentTooLarge {
        /// The trace's name.
        name: String,
        /// The limit passed, in bytes.
        limit: u64,
    },

    /// A read that holds more memory than a file of its size may make it hold.
    #[error(
        "{name}: reading it takes {held_bytes} bytes of memory, past the {limit} that {file_bytes} bytes of file \
         may make a reader take ({floor_mib} MiB plus {per_byte} per byte read): its content expands far more \
         than a trace's does; to read it anyway, decompress it first (no plain file needs {per_byte} bytes per \
         byte)",
        floor_mib = crate::memory_budget::MEMORY_FLOOR_BYTES >> 20,
        per_byte = crate::memory_budget::MEMORY_PER_FILE_BYTE
    )]
    MemoryBudget {
        /// The trace's name.
        name: String,
        /// Bytes the read held when it was stopped (an estimate of what its tables take).
        held_bytes: u64,
        /// The budget, in bytes.
        limit: u64,
        /// Bytes read from the file so far (compressed bytes, for a gzipped file).
        file_bytes: u64,
    },

    /// Content that is none of the formats this crate reads.
    #[error(
        "{name}: not a trace this crate reads (a PyTorch snapshot pickle, an RMM log with header \
         `Thread,Time,Action,Pointer,Size,Stream`, or a vrampool CSV with header \
         `time_us,action,addr,size,stream`, each plain or gzipped); it starts with {found}"
    )]
    UnknownFormat {
        /// The trace's name.
        name: String,
        /// The first bytes of the content, escaped.
        found: String,
    },

    /// A pickle that ends in the middle of an opcode or before its STOP opcode.
    #[error("{name}: the pickle ends early: the opcode at byte offset {offset} needs more bytes than remain")]
    PickleTruncated {
        /// The trace's name.
        name: String,
        /// Byte offset of the opcode that could not be read whole.
        offset: u64,
    },

    /// A pickle opcode that would import or call code, refused.
    #[error(
        "{name}: refused pickle opcode {opcode} at byte offset {offset}: it imports or calls code, and this \
         reader decodes data only"
    )]
    PickleForbidden {
        /// The trace's name.
        name: String,
        /// The opcode's name (as Python's `pickletools` names it).
        opcode: &'static str,
        /// Byte offset of the opcode.
        offset: u64,
    },

    /// A pickle opcode this reader does not decode (out-of-band buffers, or an unknown byte).
    #[error("{name}: unsupported pickle opcode {opcode} (byte {code:#04x}) at byte offset {offset}")]
    PickleUnsupported {
        /// The trace's name.
        name: String,
        /// The opcode's name, or `unknown`.
        opcode: &'static str,
        /// The opcode byte.
        code: u8,
        /// Byte offset of the opcode.
        offset: u64,
    },

    /// A pickle whose opcodes do not make a value (a stack underflow, a missing memo entry, ...).
    #[error("{name}: malformed pickle at byte offset {offset}: {reason}")]
    PickleMalformed {
        /// The trace's name.
        name: String,
        /// Byte offset of the opcode.
        offset: u64,
        /// What was wrong.
        reason: String,
    },

    /// A pickle that passes one of the decoder's limits (stack depth, memo size, list length, line length).
    #[error("{name}: the pickle passes a limit of this reader at byte offset {offset}: {what} {limit}")]
    PickleLimit {
        /// The trace's name.
        name: String,
        /// Byte offset of the opcode.
        offset: u64,
        /// What passed the limit ("more stack entries than", ...).
        what: &'static str,
        /// The limit.
        limit: u64,
    },

    /// Bytes after the STOP opcode that ends the pickle.
    #[error(
        "{name}: data after the end of the pickle (its STOP opcode ends at byte offset {offset}): a snapshot \
         file holds one pickle and nothing after it"
    )]
    PickleTrailingData {
        /// The trace's name.
        name: String,
        /// Offset of the first byte after the STOP opcode.
        offset: u64,
    },

    /// A pickle that decodes but is not a PyTorch memory snapshot.
    #[error("{name}: not a PyTorch memory snapshot: {reason}")]
    NotASnapshot {
        /// The trace's name.
        name: String,
        /// What is missing or of the wrong kind.
        reason: String,
    },

    /// A device index that the trace does not have.
    #[error("{name}: no device {device}: the trace has {devices} device trace(s)")]
    NoSuchDevice {
        /// The trace's name.
        name: String,
        /// The device asked for.
        device: usize,
        /// How many device traces the file has.
        devices: usize,
    },

    /// A snapshot with events on several devices read without choosing one.
    #[error("{name}: devices {devices:?} all have events: choose one with `ReadOptions::device`")]
    AmbiguousDevice {
        /// The trace's name.
        name: String,
        /// The devices that have events.
        devices: Vec<usize>,
    },

    /// A record (CSV line or snapshot entry) that cannot be read as an event.
    #[error("{name}: {at}: {reason}")]
    BadRecord {
        /// The trace's name.
        name: String,
        /// Where the record is.
        at: Location,
        /// What is wrong with it.
        reason: String,
    },

    /// A free of an address that the log never allocated.
    #[error("{name}: {at}: free of {addr:#x}, which the log never allocated")]
    FreeOfUnknownBlock {
        /// The trace's name.
        name: String,
        /// Where the free is.
        at: Location,
        /// The address freed.
        addr: u64,
    },

    /// A second free of a block.
    #[error("{name}: {at}: double free of {addr:#x}: the block was freed already at {freed_at}")]
    DoubleFree {
        /// The trace's name.
        name: String,
        /// Where the second free is.
        at: Location,
        /// The address freed.
        addr: u64,
        /// Where the first free is.
        freed_at: Location,
    },

    /// An allocation at an address where a block is still live.
    #[error(
        "{name}: {at}: allocation of {size} bytes at {addr:#x}, where the block allocated at {allocated_at} is still live"
    )]
    AddressInUse {
        /// The trace's name.
        name: String,
        /// Where the allocation is.
        at: Location,
        /// The address allocated.
        addr: u64,
        /// Bytes requested.
        size: u64,
        /// Where the live block was allocated.
        allocated_at: Location,
    },

    /// A free whose size differs from the size the block was allocated with.
    #[error(
        "{name}: {at}: free of {addr:#x} with size {size}, but the block was allocated with size \
         {allocated_size} at {allocated_at}"
    )]
    FreeSizeMismatch {
        /// The trace's name.
        name: String,
        /// Where the free is.
        at: Location,
        /// The address freed.
        addr: u64,
        /// The size on the free.
        size: u64,
        /// The size on the allocation.
        allocated_size: u64,
        /// Where the block was allocated.
        allocated_at: Location,
    },

    /// Writing an event log failed.
    #[error("writing the vrampool CSV event log failed: {0}")]
    Write(#[source] io::Error),
}

impl Error {
    /// Whether the error concerns one event only, so that a lenient read skips that event and goes on.
    ///
    /// Errors about the file as a whole (unreadable, corrupt gzip, malformed or refused pickle, not a
    /// snapshot, no such device) are never skipped.
    pub fn is_skippable(&self) -> bool {
        matches!(
            self,
            Error::BadRecord { .. }
                | Error::FreeOfUnknownBlock { .. }
                | Error::DoubleFree { .. }
                | Error::AddressInUse { .. }
                | Error::FreeSizeMismatch { .. }
        )
    }
}
