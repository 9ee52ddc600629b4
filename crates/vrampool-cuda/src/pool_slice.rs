//! A typed view of pool memory that cudarc's copies, memsets and kernel launches accept.

use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;

use cudarc::driver::{
    CudaStream, DevicePtr, DevicePtrMut, DeviceRepr, DeviceSlice, LaunchArgs, PushKernelArg, SyncOnDrop,
    ValidAsZeroBits,
};
use vrampool::{Allocation, Buffer, Pool, StreamId};

use crate::error::CudaError;
use crate::transfer::CudaMemory;

/// `len` values of `T` in memory from a pool on a CUDA backend, freed back to the pool when dropped.
///
/// It implements cudarc's [`DevicePtr`] and [`DevicePtrMut`] and is a kernel argument, so
/// `stream.memcpy_htod(&host, &mut slice)`, `stream.memcpy_dtoh(&slice, &mut host)`,
/// `stream.memcpy_dtod(&a, &mut b)`, `stream.memset_zeros(&mut slice)` and
/// `stream.launch_builder(&f).arg(&mut slice)` work on pool memory as on a `CudaSlice`. It belongs to the
/// stream it was made with: the pool orders reuse of its memory after the work that stream had queued at
/// the drop. cudarc's event tracking does not cover it: work on other streams is ordered by the caller, as
/// with any raw device memory.
#[derive(Debug)]
pub struct PoolSlice<T, H>
where
    H: Deref,
    H::Target: Pool,
{
    buffer: Buffer<H>,
    /// The `CUdeviceptr` of the first element (kept here so a kernel argument can point at it).
    ptr: u64,
    len: usize,
    stream: Arc<CudaStream>,
    marker: PhantomData<T>,
}

impl<T: DeviceRepr, H> PoolSlice<T, H>
where
    H: Deref,
    H::Target: Pool,
{
    /// Allocates `len` zeroed values from `pool` for use on `stream`. `backend` must be the backend the pool
    /// takes its memory from (the same `Arc`) and `stream` a stream of its context; the stream is
    /// registered with the backend.
    pub fn zeroed<B: CudaMemory>(
        pool: H,
        backend: &Arc<B>,
        len: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<Self, CudaError>
    where
        T: ValidAsZeroBits,
    {
        let slice = Self::allocate(pool, backend, len, stream)?;
        // SAFETY: the range is this slice's own allocation, seen by no one else yet; zero bytes are a valid
        // `T` (`ValidAsZeroBits`).
        unsafe { backend.memset_d8(slice.ptr, 0, slice.num_bytes() as u64, slice.stream_id()) }?;
        Ok(slice)
    }

    /// Allocates `len` values from `pool` for use on `stream`, leaving the memory as the pool had it.
    ///
    /// # Safety
    /// The memory may hold any bytes (what an earlier user left): nothing may read it as `T` before it is
    /// written with valid values of `T`.
    pub unsafe fn uninit<B: CudaMemory>(
        pool: H,
        backend: &Arc<B>,
        len: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<Self, CudaError> {
        Self::allocate(pool, backend, len, stream)
    }

    fn allocate<B: CudaMemory>(
        pool: H,
        backend: &Arc<B>,
        len: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<Self, CudaError> {
        if !std::ptr::addr_eq(Arc::as_ptr(pool.backend()), Arc::as_ptr(backend)) {
            return Err(CudaError::ForeignPool { pool_backend: pool.backend().name(), backend: backend.name() });
        }
        let element_size = std::mem::size_of::<T>();
        let bytes = len
            .checked_mul(element_size)
            .filter(|&bytes| bytes > 0)
            .ok_or(CudaError::BadSliceLength { len, element_size })?;
        let stream_id = backend.register_stream(stream)?;
        let buffer = Buffer::new(pool, bytes as u64, stream_id)?;
        if !backend.holds(buffer.addr(), bytes as u64) {
            return Err(CudaError::NotHeld {
                call: "PoolSlice",
                addr: buffer.addr(),
                len: bytes as u64,
                backend: backend.name(),
            });
        }
        Ok(PoolSlice { ptr: buffer.addr(), buffer, len, stream: stream.clone(), marker: PhantomData })
    }

    /// The `CUdeviceptr` of the first element.
    pub fn addr(&self) -> u64 {
        self.ptr
    }

    /// The pool allocation behind the slice.
    pub fn allocation(&self) -> Allocation {
        self.buffer.allocation()
    }

    /// The label of the slice's stream.
    pub fn stream_id(&self) -> StreamId {
        self.buffer.stream()
    }

    /// Gives up the typed view, keeping the allocation.
    pub fn into_buffer(self) -> Buffer<H> {
        self.buffer
    }
}

impl<T, H> DeviceSlice<T> for PoolSlice<T, H>
where
    H: Deref,
    H::Target: Pool,
{
    fn len(&self) -> usize {
        self.len
    }

    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl<T, H> DevicePtr<T> for PoolSlice<T, H>
where
    H: Deref,
    H::Target: Pool,
{
    /// The pointer, with nothing recorded: ordering against other streams is the caller's.
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        (self.ptr, SyncOnDrop::Record(None))
    }
}

impl<T, H> DevicePtrMut<T> for PoolSlice<T, H>
where
    H: Deref,
    H::Target: Pool,
{
    /// The pointer, with nothing recorded: ordering against other streams is the caller's.
    fn device_ptr_mut<'a>(&'a mut self, _stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        (self.ptr, SyncOnDrop::Record(None))
    }
}

// SAFETY: the argument pushed is a reference to the slice's `CUdeviceptr` (a `u64`, which is
// `DeviceRepr`), borrowed for as long as the launch builder, exactly as cudarc does for `CudaSlice`.
unsafe impl<'a, 'b: 'a, T, H> PushKernelArg<&'b PoolSlice<T, H>> for LaunchArgs<'a>
where
    H: Deref,
    H::Target: Pool,
{
    #[inline(always)]
    fn arg(&mut self, arg: &'b PoolSlice<T, H>) -> &mut Self {
        self.arg(&arg.ptr)
    }
}

// SAFETY: as for the shared reference: the argument is the slice's `CUdeviceptr`, borrowed for as long
// as the launch builder.
unsafe impl<'a, 'b: 'a, T, H> PushKernelArg<&'b mut PoolSlice<T, H>> for LaunchArgs<'a>
where
    H: Deref,
    H::Target: Pool,
{
    #[inline(always)]
    fn arg(&mut self, arg: &'b mut PoolSlice<T, H>) -> &mut Self {
        self.arg(&arg.ptr)
    }
}
