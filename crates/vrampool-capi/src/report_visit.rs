//! The detailed report handed to C one record at a time: each segment and each live block through a
//! callback, with no string to build, parse or free.

use std::ffi::{c_int, c_void};

use vrampool::{PoolReport, SegmentKind};

use crate::error::CapiError;

/// One stretch of memory a pool holds, as `vrampool_pool_visit` hands it over.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Its first address.
    pub addr: u64,
    /// Its size in bytes (for a virtual range: the address space reserved).
    pub size: u64,
    /// Bytes of device memory behind it (for a virtual range: the mapped pages).
    pub reserved_bytes: u64,
    /// 1 for a reserved virtual address range mapped where used, 0 for a plain segment.
    pub virtual_range: c_int,
}

/// One live allocation, as `vrampool_pool_visit` hands it over.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockInfo {
    /// Its address.
    pub addr: u64,
    /// The bytes requested.
    pub size: u64,
    /// The bytes it takes in the pool (the request rounded up).
    pub block_size: u64,
    /// The stream it was allocated on.
    pub stream: u64,
}

/// Called once per segment, in address order.
pub type SegmentVisitor = Option<unsafe extern "C" fn(context: *mut c_void, segment: *const SegmentInfo)>;

/// Called once per live block, in address order, after every segment.
pub type BlockVisitor = Option<unsafe extern "C" fn(context: *mut c_void, block: *const BlockInfo)>;

/// Hands `report`'s segments to `on_segment`, then its blocks to `on_block` (either may be NULL).
///
/// # Safety
/// The visitors are NULL or functions that may be called with `context` and a pointer valid for the call,
/// and that return normally (a C++ exception or a longjmp out of them is undefined behaviour).
pub(crate) unsafe fn visit(
    report: &PoolReport,
    on_segment: SegmentVisitor,
    on_block: BlockVisitor,
    context: *mut c_void,
) -> Result<(), CapiError> {
    if let Some(on_segment) = on_segment {
        for segment in &report.segments {
            let info = SegmentInfo {
                addr: segment.addr,
                size: segment.size,
                reserved_bytes: segment.reserved_bytes,
                virtual_range: c_int::from(segment.kind == SegmentKind::VirtualRange),
            };
            // SAFETY: the caller vouches for the visitor; `info` lives across the call.
            unsafe { on_segment(context, &info) };
        }
    }
    if let Some(on_block) = on_block {
        for block in &report.blocks {
            let info =
                BlockInfo { addr: block.addr, size: block.size, block_size: block.block_size, stream: block.stream.0 };
            // SAFETY: as above.
            unsafe { on_block(context, &info) };
        }
    }
    Ok(())
}
