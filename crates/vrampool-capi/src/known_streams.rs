//! The raw `CUstream` values a CUDA backend has been told about, so that each is registered once.
//!
//! A CUDA backend passes the driver only streams it knows (see `CudaMemory::register_raw_stream`); the
//! streams C callers and PyTorch pass are raw handles, registered here on first sight. The common case, the
//! same stream as the thread's previous call, is answered from a thread-local cache without a lock.

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;
use vrampool::StreamId;
use vrampool_cuda::CudaMemory;

/// Handles the driver defines itself (the legacy default stream as 0 and `CU_STREAM_LEGACY`, and
/// `CU_STREAM_PER_THREAD`); they need no registration.
const DRIVER_STREAMS: [u64; 3] = [0, 1, 2];

/// Numbers each [`KnownStreams`], so the thread-local cache never confuses two backends.
static NEXT_BOOK: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The (book, stream) this thread registered or found last.
    static LAST_SEEN: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// The streams registered with one CUDA backend.
pub(crate) struct KnownStreams {
    backend: Arc<dyn CudaMemory>,
    book: u64,
    streams: RwLock<HashSet<u64>>,
}

impl KnownStreams {
    /// An empty book for `backend`.
    pub(crate) fn new(backend: Arc<dyn CudaMemory>) -> Self {
        KnownStreams { backend, book: NEXT_BOOK.fetch_add(1, Ordering::Relaxed), streams: RwLock::default() }
    }

    /// Registers `stream` with the backend unless it is known already.
    ///
    /// # Safety
    /// `stream` is 0 or a `CUstream` of the backend's context (the device's primary context) that stays
    /// alive for as long as the backend, as `CudaMemory::register_raw_stream` requires.
    pub(crate) unsafe fn ensure(&self, stream: u64) {
        if DRIVER_STREAMS.contains(&stream) || LAST_SEEN.try_with(Cell::get).ok() == Some((self.book, stream)) {
            return;
        }
        if !self.streams.read().contains(&stream) {
            let mut streams = self.streams.write();
            if streams.insert(stream) {
                // SAFETY: the caller vouches that `stream` is a live stream of the backend's context that
                // outlives the backend.
                unsafe { self.backend.register_raw_stream(StreamId(stream)) };
            }
        }
        let _ = LAST_SEEN.try_with(|last| last.set((self.book, stream)));
    }

    /// Streams registered so far (the driver's own handles not counted).
    pub(crate) fn len(&self) -> usize {
        self.streams.read().len()
    }
}
