//! Copies and memsets of pool memory through the driver, and what else a cudarc user needs from a CUDA
//! backend: its context, its streams, and whether it holds an address range.
//!
//! Every transfer is ordered on a stream the backend knows and checks that the device range lies in
//! memory the backend holds (a segment, or mapped chunks), so a stray address is an error, not a write
//! into someone else's memory. Copies to and from the host wait for the stream before they return, so the
//! host slice is never touched after the call.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};
use vrampool::{Backend, StreamId};

use crate::context::DeviceContext;
use crate::error::CudaError;

mod sealed {
    /// Only this crate's backends implement [`super::CudaMemory`]: typed slices trust what it says.
    pub trait Sealed {}
}
pub(crate) use sealed::Sealed;

/// A CUDA backend: device memory a cudarc user can copy to, from and within, ordered on streams.
///
/// Implemented by [`crate::CudaDevice`] and [`crate::CudaVirtual`] (sealed). Allocation addresses
/// (`Allocation::addr`) of a pool on one of them are `CUdeviceptr`s of the backend's context.
pub trait CudaMemory: Backend + Sealed {
    /// The device ordinal.
    fn ordinal(&self) -> usize;

    /// The retained primary context, for making streams (`context.new_stream()`) and using cudarc.
    /// `None` only where no real driver is behind the backend.
    fn context(&self) -> Option<&Arc<CudaContext>>;

    /// Whether `[addr, addr + len)` lies in memory the backend holds now (a segment, or mapped chunks).
    fn holds(&self, addr: u64, len: u64) -> bool;

    /// Free and total device memory in bytes (`cuMemGetInfo`), for the whole device.
    fn memory_info(&self) -> Result<(u64, u64), CudaError>;

    /// Registers a cudarc stream of this backend's context so that pools may use its label; the
    /// backend keeps the stream alive. Returns the label (the `CUstream` handle value).
    fn register_stream(&self, stream: &Arc<CudaStream>) -> Result<StreamId, CudaError>;

    /// Registers a raw `CUstream` handle value.
    ///
    /// # Safety
    /// `stream` is a stream of this backend's context, and stays alive for as long as any pool or call
    /// on this backend may use its label (until the backend drops, to be safe).
    unsafe fn register_raw_stream(&self, stream: StreamId);

    /// Copies `dst.len()` bytes at `src` into `dst`, ordered on `stream`; returns once they are there.
    fn copy_device_to_host(&self, src: u64, dst: &mut [u8], stream: StreamId) -> Result<(), CudaError>;

    /// Copies `src` to `dst`, ordered on `stream`; returns once the host bytes are read.
    ///
    /// # Safety
    /// The destination is memory the caller owns (an allocation of a pool on this backend, not freed), and
    /// no typed view that other code reads (a [`crate::PoolSlice`], a cudarc slice) covers it: the bytes
    /// written may be invalid for such a view's type.
    unsafe fn copy_host_to_device(&self, dst: u64, src: &[u8], stream: StreamId) -> Result<(), CudaError>;

    /// Queues a copy of `len` bytes from `src` to `dst` on `stream` (returns before it runs).
    ///
    /// # Safety
    /// As for [`CudaMemory::copy_host_to_device`], for the destination.
    unsafe fn copy_device_to_device(&self, dst: u64, src: u64, len: u64, stream: StreamId) -> Result<(), CudaError>;

    /// Queues setting `len` bytes at `dst` to `value` on `stream` (`cuMemsetD8Async`; returns before it
    /// runs).
    ///
    /// # Safety
    /// As for [`CudaMemory::copy_host_to_device`].
    unsafe fn memset_d8(&self, dst: u64, value: u8, len: u64, stream: StreamId) -> Result<(), CudaError>;

    /// Waits for the work queued on `stream`.
    fn synchronize_stream(&self, stream: StreamId) -> Result<(), CudaError>;

    /// Events created so far for ordering streams (they are reused once released).
    fn events_created(&self) -> usize;

    /// Events recorded and not yet released.
    fn events_live(&self) -> usize;
}

/// Checks a device range against what the backend holds.
fn check_held(
    context: &DeviceContext,
    holds: impl Fn(u64, u64) -> bool,
    call: &'static str,
    addr: u64,
    len: u64,
) -> Result<(), CudaError> {
    if holds(addr, len) {
        Ok(())
    } else {
        Err(CudaError::NotHeld { call, addr, len, backend: context.name().to_string() })
    }
}

impl DeviceContext {
    /// Registers a cudarc stream after checking it belongs to this backend's context.
    pub(crate) fn register_stream(&self, stream: &Arc<CudaStream>) -> Result<StreamId, CudaError> {
        let ours = self.driver().context().map(|context| context.cu_ctx());
        if ours != Some(stream.context().cu_ctx()) {
            return Err(CudaError::ForeignStream {
                stream: stream.cu_stream() as usize as u64,
                backend: self.name().to_string(),
            });
        }
        Ok(self.streams().register(stream))
    }

    /// Waits for `stream`.
    pub(crate) fn synchronize_stream(&self, stream: StreamId) -> Result<(), CudaError> {
        let raw = self.stream(stream)?;
        self.bind()?;
        // SAFETY: the stream is the legacy stream or one registered with this backend.
        unsafe { self.driver().stream_synchronize(raw) }
    }

    /// See [`CudaMemory::copy_device_to_host`].
    pub(crate) fn copy_device_to_host(
        &self,
        holds: impl Fn(u64, u64) -> bool,
        src: u64,
        dst: &mut [u8],
        stream: StreamId,
    ) -> Result<(), CudaError> {
        if dst.is_empty() {
            return Ok(());
        }
        check_held(self, holds, "copy_device_to_host", src, dst.len() as u64)?;
        let raw = self.stream(stream)?;
        self.bind()?;
        // SAFETY: the source range is device memory this backend holds; the stream is the legacy stream
        // or a registered one; `dst` stays borrowed until the stream is synchronised below.
        unsafe { self.driver().memcpy_dtoh(dst, src, raw) }?;
        // SAFETY: as above, the stream is known to this backend.
        unsafe { self.driver().stream_synchronize(raw) }
    }

    /// See [`CudaMemory::copy_host_to_device`].
    ///
    /// # Safety
    /// As for [`CudaMemory::copy_host_to_device`].
    pub(crate) unsafe fn copy_host_to_device(
        &self,
        holds: impl Fn(u64, u64) -> bool,
        dst: u64,
        src: &[u8],
        stream: StreamId,
    ) -> Result<(), CudaError> {
        if src.is_empty() {
            return Ok(());
        }
        check_held(self, holds, "copy_host_to_device", dst, src.len() as u64)?;
        let raw = self.stream(stream)?;
        self.bind()?;
        // SAFETY: the destination is device memory this backend holds and the caller owns; the stream is
        // known; `src` stays borrowed until the stream is synchronised below.
        unsafe { self.driver().memcpy_htod(dst, src, raw) }?;
        // SAFETY: as above, the stream is known to this backend.
        unsafe { self.driver().stream_synchronize(raw) }
    }

    /// See [`CudaMemory::copy_device_to_device`].
    ///
    /// # Safety
    /// As for [`CudaMemory::copy_host_to_device`], for the destination.
    pub(crate) unsafe fn copy_device_to_device(
        &self,
        holds: impl Fn(u64, u64) -> bool,
        dst: u64,
        src: u64,
        len: u64,
        stream: StreamId,
    ) -> Result<(), CudaError> {
        if len == 0 {
            return Ok(());
        }
        check_held(self, &holds, "copy_device_to_device", src, len)?;
        check_held(self, &holds, "copy_device_to_device", dst, len)?;
        let raw = self.stream(stream)?;
        self.bind()?;
        // SAFETY: both ranges are device memory this backend holds, the destination owned by the caller;
        // the stream is known to this backend.
        unsafe { self.driver().memcpy_dtod(dst, src, len, raw) }
    }

    /// See [`CudaMemory::memset_d8`].
    ///
    /// # Safety
    /// As for [`CudaMemory::copy_host_to_device`].
    pub(crate) unsafe fn memset_d8(
        &self,
        holds: impl Fn(u64, u64) -> bool,
        dst: u64,
        value: u8,
        len: u64,
        stream: StreamId,
    ) -> Result<(), CudaError> {
        if len == 0 {
            return Ok(());
        }
        check_held(self, holds, "memset_d8", dst, len)?;
        let raw = self.stream(stream)?;
        self.bind()?;
        // SAFETY: the range is device memory this backend holds and the caller owns; the stream is known.
        unsafe { self.driver().memset_d8(dst, value, len, raw) }
    }
}

/// Implements [`CudaMemory`] for a backend with a `context: DeviceContext` field and a
/// `fn holds(&self, addr, len) -> bool` method.
macro_rules! impl_cuda_memory {
    ($backend:ty) => {
        impl $crate::transfer::Sealed for $backend {}

        impl $crate::transfer::CudaMemory for $backend {
            fn ordinal(&self) -> usize {
                self.context.driver().ordinal()
            }

            fn context(&self) -> Option<&std::sync::Arc<cudarc::driver::CudaContext>> {
                self.context.driver().context()
            }

            fn holds(&self, addr: u64, len: u64) -> bool {
                <$backend>::holds(self, addr, len)
            }

            fn memory_info(&self) -> Result<(u64, u64), $crate::CudaError> {
                self.context.bind()?;
                self.context.driver().memory_info()
            }

            fn register_stream(
                &self,
                stream: &std::sync::Arc<cudarc::driver::CudaStream>,
            ) -> Result<vrampool::StreamId, $crate::CudaError> {
                self.context.register_stream(stream)
            }

            unsafe fn register_raw_stream(&self, stream: vrampool::StreamId) {
                self.context.streams().register_raw(stream)
            }

            fn copy_device_to_host(
                &self,
                src: u64,
                dst: &mut [u8],
                stream: vrampool::StreamId,
            ) -> Result<(), $crate::CudaError> {
                self.context.copy_device_to_host(|a, l| <$backend>::holds(self, a, l), src, dst, stream)
            }

            unsafe fn copy_host_to_device(
                &self,
                dst: u64,
                src: &[u8],
                stream: vrampool::StreamId,
            ) -> Result<(), $crate::CudaError> {
                // SAFETY: the caller's contract is the same as the callee's, passed on unchanged.
                unsafe { self.context.copy_host_to_device(|a, l| <$backend>::holds(self, a, l), dst, src, stream) }
            }

            unsafe fn copy_device_to_device(
                &self,
                dst: u64,
                src: u64,
                len: u64,
                stream: vrampool::StreamId,
            ) -> Result<(), $crate::CudaError> {
                // SAFETY: the caller's contract is the same as the callee's, passed on unchanged.
                unsafe {
                    self.context.copy_device_to_device(|a, l| <$backend>::holds(self, a, l), dst, src, len, stream)
                }
            }

            unsafe fn memset_d8(
                &self,
                dst: u64,
                value: u8,
                len: u64,
                stream: vrampool::StreamId,
            ) -> Result<(), $crate::CudaError> {
                // SAFETY: the caller's contract is the same as the callee's, passed on unchanged.
                unsafe { self.context.memset_d8(|a, l| <$backend>::holds(self, a, l), dst, value, len, stream) }
            }

            fn synchronize_stream(&self, stream: vrampool::StreamId) -> Result<(), $crate::CudaError> {
                self.context.synchronize_stream(stream)
            }

            fn events_created(&self) -> usize {
                self.context.events().created()
            }

            fn events_live(&self) -> usize {
                self.context.events().live()
            }
        }
    };
}
pub(crate) use impl_cuda_memory;

#[cfg(test)]
mod tests {
    use vrampool::MIB;

    use super::*;
    use crate::cuda_device::CudaDevice;
    use crate::cuda_virtual::CudaVirtual;
    use crate::fake_driver::{FAKE_POISON, FakeDriver};

    #[test]
    fn copies_and_memsets_touch_only_memory_the_backend_holds() {
        let fake = FakeDriver::standard();
        let v = CudaVirtual::with_driver(fake.clone()).unwrap();
        let g = 2 * MIB;
        let r = v.reserve_range(8 * g).unwrap();
        v.map(r, 2 * g).unwrap();
        let s = StreamId::DEFAULT;
        // SAFETY: the test owns the mapped range and reads it only as bytes.
        unsafe { v.memset_d8(r, 0x11, 2 * g, s) }.unwrap();
        // SAFETY: as above.
        unsafe { v.copy_host_to_device(r + g - 3, b"across", s) }.unwrap();
        // SAFETY: as above.
        unsafe { v.copy_device_to_device(r + 100, r + g - 3, 6, s) }.unwrap();
        let mut back = [0u8; 6];
        v.copy_device_to_host(r + 100, &mut back, s).unwrap();
        assert_eq!(&back, b"across", "a copy may span two chunks");
        let mut edge = [0u8; 2];
        v.copy_device_to_host(r + 2 * g - 2, &mut edge, s).unwrap();
        assert_eq!(edge, [0x11, 0x11]);

        fake.clear_calls();
        let not_held = |err: CudaError| matches!(err, CudaError::NotHeld { .. });
        assert!(not_held(v.copy_device_to_host(r + 2 * g - 1, &mut edge, s).unwrap_err()), "past the mapping");
        // SAFETY: refused before anything is written (the range is not held).
        assert!(not_held(unsafe { v.memset_d8(r + 3 * g, 0, 1, s) }.unwrap_err()));
        // SAFETY: as above.
        assert!(not_held(unsafe { v.copy_host_to_device(0x10, b"x", s) }.unwrap_err()));
        // SAFETY: as above (the source is not held).
        assert!(not_held(unsafe { v.copy_device_to_device(r + 5 * g, r, 1, s) }.unwrap_err()));
        // SAFETY: as above.
        assert!(not_held(unsafe { v.copy_device_to_device(r, r + 5 * g, 1, s) }.unwrap_err()));
        let err = v.copy_device_to_host(r, &mut edge, StreamId(0x9999)).unwrap_err();
        assert!(matches!(err, CudaError::UnknownStream { stream: 0x9999, .. }));
        assert!(fake.calls().iter().all(|c| !c.starts_with("cuMemcpy") && !c.starts_with("cuMemset")));
    }

    #[test]
    fn copies_wait_for_their_stream_before_returning() {
        let fake = FakeDriver::standard();
        let d = CudaDevice::with_driver(fake.clone()).unwrap();
        let a = d.allocate_segment(MIB).unwrap();
        let mut back = vec![0; 16];
        fake.clear_calls();
        d.copy_device_to_host(a, &mut back, StreamId::DEFAULT).unwrap();
        assert_eq!(back, vec![FAKE_POISON; 16], "unwritten memory reads as the fake's poison");
        // SAFETY: the test owns the segment.
        unsafe { d.copy_host_to_device(a, &[1, 2, 3], StreamId::DEFAULT) }.unwrap();
        let calls: Vec<_> = fake.calls().into_iter().filter(|c| *c != "cuCtxSetCurrent").collect();
        assert_eq!(calls, ["cuMemcpyDtoHAsync", "cuStreamSynchronize", "cuMemcpyHtoDAsync", "cuStreamSynchronize"]);
        d.synchronize_stream(StreamId::DEFAULT).unwrap();
        assert_eq!(d.memory_info().unwrap(), ((1 << 30) - MIB, 1 << 30));
        assert!(d.context().is_none() && CudaMemory::ordinal(&d) == 0);
    }
}
