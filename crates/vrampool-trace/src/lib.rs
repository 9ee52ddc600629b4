//! vrampool-trace: reading real GPU allocation traces into one event model, for replay through memory pools.
//!
//! Three formats are read, chosen from the content (not the file name), each plain or gzipped:
//!
//! - **PyTorch memory snapshots**: the pickle of `torch.cuda.memory._snapshot()` or `_dump_snapshot()`,
//!   one trace per device. The pickle is decoded as data only: an opcode that would import or call
//!   anything is refused with an error naming it and its byte offset.
//! - **RMM `logging_resource_adaptor` logs** (CSV, header `Thread,Time,Action,Pointer,Size,Stream`).
//! - **vrampool CSV event logs** (header `time_us,action,addr,size,stream`), which
//!   [`VrampoolCsvWriter`] writes.
//!
//! Reading is bounded whatever the input: content is read in pieces, never held whole; more than
//! [`ReadOptions::max_content_bytes`] of it ([`DEFAULT_MAX_CONTENT_BYTES`] by default) is an error, and so is a
//! file whose content makes the reader hold more than 64 MiB plus 256 bytes per byte of the file (a
//! decompression bomb); the pickle decoder limits its stack, its memo, its lists and its text lines, and CSV
//! readers their lines.
//!
//! A [`Trace`] is the ordered [`Event`]s of one device, checked for consistency (no double free, no free
//! of an unknown block in a log; a snapshot's ring buffer may have dropped allocations, whose blocks are
//! then [`Trace::initial_live`]). [`PytorchBaseline`] gives the recording allocator's own peak live bytes,
//! peak reserved bytes and utilization; [`TraceSummary`] counts events and spreads of sizes.
//!
//! ```no_run
//! use vrampool_trace::{PytorchBaseline, ReadOptions, TraceSummary, read_trace};
//!
//! let trace = read_trace("traces/resnet_train_fixed.pickle.gz", &ReadOptions::default())?;
//! let summary = TraceSummary::of(&trace);
//! let baseline = PytorchBaseline::of(&trace);
//! println!(
//!     "{}: {} events, {} allocations, PyTorch utilization {:.3}",
//!     trace.name,
//!     summary.events,
//!     summary.allocations,
//!     baseline.utilization().unwrap_or(0.0)
//! );
//! # Ok::<(), vrampool_trace::Error>(())
//! ```
//!
//! Reading bytes, leniently (bad events are skipped and counted instead of failing the read):
//!
//! ```
//! use vrampool_trace::{EventKind, ReadOptions, parse_trace};
//!
//! let log = b"time_us,action,addr,size,stream\n\
//!             0,alloc,0x1000,256,0\n\
//!             5,free,0x2000,256,0\n\
//!             9,free,0x1000,256,0\n";
//! let strict = parse_trace("log.csv", log, &ReadOptions::default());
//! assert!(strict.unwrap_err().to_string().contains("log.csv: line 3: free of 0x2000"));
//!
//! let trace = parse_trace("log.csv", log, &ReadOptions::default().lenient(true))?;
//! assert_eq!(trace.skipped, 1);
//! assert_eq!(trace.events.iter().map(|e| e.kind).collect::<Vec<_>>(), [EventKind::Alloc, EventKind::Free]);
//! # Ok::<(), vrampool_trace::Error>(())
//! ```
#![forbid(unsafe_code)]

mod baseline;
mod block_ledger;
mod content;
mod csv_record;
mod error;
mod event;
mod format;
mod gzip;
mod memory_budget;
mod pickle;
mod pytorch_snapshot;
mod read;
mod rmm_csv;
mod summary;
mod trace;
mod trace_builder;
mod vrampool_csv;

pub use baseline::PytorchBaseline;
pub use content::DEFAULT_MAX_CONTENT_BYTES;
pub use error::{Error, Location, Result};
pub use event::{Event, EventKind, LiveBlock};
pub use format::{RMM_CSV_HEADER, TraceFormat, VRAMPOOL_CSV_HEADER};
pub use read::{ReadOptions, parse_trace, parse_traces, read_trace, read_trace_from, read_traces};
pub use summary::TraceSummary;
pub use trace::Trace;
pub use vrampool_csv::VrampoolCsvWriter;
