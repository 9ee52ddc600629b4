//! The streams a backend may pass to the driver.
//!
//! A [`vrampool::StreamId`] is a `CUstream` handle value, a bare number: handing the driver a number that
//! is not a live stream of the context would make it read freed or foreign memory. So a backend passes on
//! only streams it knows: the driver's special handles (0, the legacy default stream; 1, `CU_STREAM_LEGACY`;
//! 2, `CU_STREAM_PER_THREAD`), streams registered as cudarc [`CudaStream`]s (kept alive by the registry),
//! and raw handles registered by a caller who vouches for them.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use parking_lot::RwLock;
use vrampool::StreamId;

use crate::error::CudaError;

/// The handles the driver itself defines: the legacy default stream (0 and `CU_STREAM_LEGACY`) and the
/// per-thread default stream (`CU_STREAM_PER_THREAD`).
const SPECIAL_STREAMS: [u64; 3] = [0, 1, 2];

/// Streams registered with one backend.
#[derive(Debug, Default)]
pub(crate) struct StreamRegistry {
    /// Registered handle values; a cudarc stream is kept alive for as long as the backend.
    streams: RwLock<HashMap<u64, Option<Arc<CudaStream>>>>,
}

impl StreamRegistry {
    /// The handle value of `stream`, if the backend may pass it to the driver.
    #[inline]
    pub(crate) fn check(&self, stream: StreamId, backend: impl FnOnce() -> String) -> Result<u64, CudaError> {
        if SPECIAL_STREAMS.contains(&stream.0) || self.streams.read().contains_key(&stream.0) {
            Ok(stream.0)
        } else {
            Err(CudaError::UnknownStream { stream: stream.0, backend: backend() })
        }
    }

    /// Registers a cudarc stream, keeping it alive; returns its label.
    pub(crate) fn register(&self, stream: &Arc<CudaStream>) -> StreamId {
        let id = stream.cu_stream() as usize as u64;
        if !SPECIAL_STREAMS.contains(&id) {
            self.streams.write().insert(id, Some(stream.clone()));
        }
        StreamId(id)
    }

    /// Registers a raw handle value the caller vouches for.
    pub(crate) fn register_raw(&self, stream: StreamId) {
        if !SPECIAL_STREAMS.contains(&stream.0) {
            self.streams.write().entry(stream.0).or_insert(None);
        }
    }

    /// Streams registered (the special handles not counted).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.streams.read().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_special_and_registered_streams_pass() {
        let registry = StreamRegistry::default();
        for special in SPECIAL_STREAMS {
            assert_eq!(registry.check(StreamId(special), || "x".into()).unwrap(), special);
        }
        let err = registry.check(StreamId(0x5000), || "cuda:0".into()).unwrap_err();
        assert_eq!(err, CudaError::UnknownStream { stream: 0x5000, backend: "cuda:0".into() });
        registry.register_raw(StreamId(0x5000));
        registry.register_raw(StreamId(0x5000));
        registry.register_raw(StreamId(0));
        assert_eq!(registry.check(StreamId(0x5000), || unreachable!()).unwrap(), 0x5000);
        assert_eq!(registry.len(), 1);
    }
}
