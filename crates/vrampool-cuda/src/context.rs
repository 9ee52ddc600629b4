//! What both CUDA backends share: the device's retained primary context (made current on the calling
//! thread before each operation), its capacity, the streams the backend may use and the events it
//! recorded.

use std::sync::Arc;

use vrampool::{EventId, StreamId};

use crate::driver::Driver;
use crate::error::{CUDA_ERROR_OUT_OF_MEMORY, CudaError};
use crate::event_pool::EventPool;
use crate::stream_registry::StreamRegistry;

/// One device as a backend sees it.
#[derive(Debug)]
pub(crate) struct DeviceContext {
    driver: Arc<dyn Driver>,
    name: String,
    capacity: u64,
    streams: StreamRegistry,
    events: EventPool,
}

impl DeviceContext {
    /// Binds the driver's context on this thread and reads the device's capacity.
    pub(crate) fn new(driver: Arc<dyn Driver>, name: String) -> Result<Self, CudaError> {
        driver.bind()?;
        let capacity = driver.total_memory()?;
        Ok(DeviceContext { driver, name, capacity, streams: StreamRegistry::default(), events: EventPool::default() })
    }

    /// The driver.
    #[inline]
    pub(crate) fn driver(&self) -> &dyn Driver {
        &*self.driver
    }

    /// The backend's name (`cuda:0`, `cuda-virtual:0`).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The device's memory in bytes.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The registered streams.
    pub(crate) fn streams(&self) -> &StreamRegistry {
        &self.streams
    }

    /// The created events.
    pub(crate) fn events(&self) -> &EventPool {
        &self.events
    }

    /// Makes the device's context current on this thread; the first step of every operation.
    #[inline]
    pub(crate) fn bind(&self) -> Result<(), CudaError> {
        self.driver.bind()
    }

    /// The core error for a driver call that asked for `requested` bytes: an out-of-memory answer becomes
    /// [`vrampool::Error::DeviceOutOfMemory`] with the device's use from `cuMemGetInfo` (or, where that
    /// fails, `held`, the bytes this backend holds); anything else keeps its call and `CUresult`.
    #[cold]
    pub(crate) fn memory_error(&self, err: CudaError, requested: u64, held: u64) -> vrampool::Error {
        match err {
            CudaError::Call { call, code: CUDA_ERROR_OUT_OF_MEMORY, .. } => {
                let used = self.driver.memory_info().map_or(held, |(free, total)| total.saturating_sub(free));
                vrampool::Error::DeviceOutOfMemory { call, requested, used, capacity: self.capacity }
            }
            other => other.into(),
        }
    }

    /// The handle value of `stream`, if the backend may pass it to the driver.
    #[inline]
    pub(crate) fn stream(&self, stream: StreamId) -> Result<u64, CudaError> {
        self.streams.check(stream, || self.name.clone())
    }

    /// Records an event on `stream` (`cuEventRecord`), from the event pool.
    pub(crate) fn record_event(&self, stream: StreamId) -> Result<EventId, CudaError> {
        let raw_stream = self.stream(stream)?;
        self.bind()?;
        self.events.record(&*self.driver, raw_stream)
    }

    /// Whether an event has completed (`cuEventQuery`).
    pub(crate) fn event_complete(&self, event: EventId) -> Result<bool, CudaError> {
        let raw = self.events.lookup(event, || self.name.clone())?;
        self.bind()?;
        // SAFETY: `raw` is a live event of this driver (the pool checked the id); events are destroyed
        // only when the backend drops.
        unsafe { self.driver.event_query(raw) }
    }

    /// Blocks the host until an event has completed (`cuEventSynchronize`).
    pub(crate) fn wait_event(&self, event: EventId) -> Result<(), CudaError> {
        let raw = self.events.lookup(event, || self.name.clone())?;
        self.bind()?;
        // SAFETY: `raw` is a live event of this driver (the pool checked the id); events are destroyed
        // only when the backend drops.
        unsafe { self.driver.event_synchronize(raw) }
    }

    /// Makes `stream` wait for an event (`cuStreamWaitEvent`).
    pub(crate) fn stream_wait_event(&self, stream: StreamId, event: EventId) -> Result<(), CudaError> {
        let raw_stream = self.stream(stream)?;
        let raw_event = self.events.lookup(event, || self.name.clone())?;
        self.bind()?;
        // SAFETY: the event is live (checked by the pool) and the stream is the legacy stream or one
        // registered with this backend, kept alive by the registry or vouched for by its registrant.
        unsafe { self.driver.stream_wait_event(raw_stream, raw_event) }
    }

    /// Waits for all work on the device (`cuCtxSynchronize`).
    pub(crate) fn synchronize(&self) -> Result<(), CudaError> {
        self.bind()?;
        self.driver.ctx_synchronize()
    }
}

impl Drop for DeviceContext {
    /// Destroys the created events, after the backend released its memory and waited for the device.
    /// Nothing here can panic; driver errors are dropped, as there is no caller to give them to.
    fn drop(&mut self) {
        if self.driver.bind().is_ok() {
            let _ = self.driver.ctx_synchronize();
            self.events.destroy_all(&*self.driver);
        }
    }
}

/// The [`vrampool::Backend`] methods a CUDA backend answers from its [`DeviceContext`], in the field
/// `context`: its name and capacity, and its streams' events (record, query, wait, release) and
/// synchronisation. Used inside both backends' `impl Backend` blocks, so that the two forward alike.
macro_rules! forward_to_context {
    () => {
        fn name(&self) -> String {
            self.context.name().to_string()
        }

        fn capacity(&self) -> u64 {
            self.context.capacity()
        }

        fn record_event(&self, stream: vrampool::StreamId) -> vrampool::Result<vrampool::EventId> {
            Ok(self.context.record_event(stream)?)
        }

        fn event_complete(&self, event: vrampool::EventId) -> vrampool::Result<bool> {
            Ok(self.context.event_complete(event)?)
        }

        fn stream_wait_event(&self, stream: vrampool::StreamId, event: vrampool::EventId) -> vrampool::Result<()> {
            Ok(self.context.stream_wait_event(stream, event)?)
        }

        fn release_event(&self, event: vrampool::EventId) {
            self.context.events().release(event);
        }

        fn wait_event(&self, event: vrampool::EventId) -> vrampool::Result<()> {
            Ok(self.context.wait_event(event)?)
        }

        fn synchronize(&self) -> vrampool::Result<()> {
            Ok(self.context.synchronize()?)
        }
    };
}

pub(crate) use forward_to_context;

#[cfg(test)]
mod tests {
    use vrampool::{Backend, DynamicConfig, DynamicPool, Error, FixedConfig, FixedPool, MIB, Pool};

    use crate::cuda_device::CudaDevice;
    use crate::cuda_virtual::CudaVirtual;
    use crate::driver::Driver;
    use crate::error::CUDA_ERROR_INVALID_HANDLE;
    use crate::fake_driver::FakeDriver;
    use crate::transfer::CudaMemory;

    use super::*;

    /// A backend and two streams created on its fake driver and registered with it.
    fn backend_with_streams() -> (Arc<FakeDriver>, Arc<CudaVirtual>, StreamId, StreamId) {
        let fake = FakeDriver::standard();
        let backend = Arc::new(CudaVirtual::with_driver(fake.clone()).unwrap());
        fake.bind().unwrap();
        let (a, b) = (StreamId(fake.stream_create().unwrap()), StreamId(fake.stream_create().unwrap()));
        // SAFETY: the stream was created on this fake driver and outlives the backend.
        unsafe { backend.register_raw_stream(a) };
        // SAFETY: as above.
        unsafe { backend.register_raw_stream(b) };
        (fake, backend, a, b)
    }

    #[test]
    fn events_are_created_once_and_reused() {
        let (fake, backend, a, _) = backend_with_streams();
        let first = backend.record_event(a).unwrap();
        let second = backend.record_event(StreamId::DEFAULT).unwrap();
        assert_ne!(first, second);
        assert_eq!((backend.events_created(), backend.events_live()), (2, 2));
        backend.release_event(first);
        backend.release_event(second);
        for _ in 0..100 {
            let event = backend.record_event(a).unwrap();
            backend.release_event(event);
        }
        assert_eq!(fake.count("cuEventCreate"), 2, "released events are recorded again, not created");
        assert_eq!(fake.count("cuEventRecord"), 102);
        assert_eq!((backend.events_created(), backend.events_live()), (2, 0));
    }

    #[test]
    fn released_and_unknown_event_ids_never_reach_the_driver() {
        let (fake, backend, a, b) = backend_with_streams();
        let event = backend.record_event(a).unwrap();
        backend.release_event(event);
        let reused = backend.record_event(a).unwrap();
        assert_ne!(reused, event, "the slot is reused under a new generation");
        fake.clear_calls();
        for stale in [event, EventId(0xdead_0000_0000)] {
            assert!(matches!(backend.event_complete(stale), Err(Error::InvalidBackendCall { call: "event", .. })));
            assert!(matches!(backend.stream_wait_event(b, stale), Err(Error::InvalidBackendCall { .. })));
            backend.release_event(stale);
        }
        assert!(fake.calls().iter().all(|c| !c.starts_with("cuEvent") && *c != "cuStreamWaitEvent"));
        assert!(backend.event_complete(reused).unwrap(), "the stale release did not free the live event");
    }

    #[test]
    fn event_completion_follows_the_stream_and_errors_name_the_call() {
        let (fake, backend, a, b) = backend_with_streams();
        fake.hold_stream(a.0);
        let event = backend.record_event(a).unwrap();
        assert!(!backend.event_complete(event).unwrap());
        backend.stream_wait_event(b, event).unwrap();
        let raw = fake.waits()[0].1;
        assert_eq!(fake.waits(), vec![(b.0, raw)]);
        assert_eq!(fake.event_stream(raw), Some(a.0));
        fake.finish_stream(a.0);
        assert!(backend.event_complete(event).unwrap());
        fake.fail("cuEventQuery", 0, CUDA_ERROR_INVALID_HANDLE);
        assert_eq!(
            backend.event_complete(event).unwrap_err(),
            Error::Backend {
                call: "cuEventQuery",
                message: "cuEventQuery failed: CUDA_ERROR_INVALID_HANDLE (400)".into()
            }
        );
        backend.synchronize().unwrap();
        assert!(fake.count("cuCtxSynchronize") >= 1);
    }

    /// A dynamic pool (waiting for idle chunks, aliasing as `alias` says) on stream A of a fake driver, whose
    /// 4-chunk block X was freed while A still runs work that used it, with a block Z right after X: the
    /// driver, the pool, A, the chunk size, X's address and Z. The driver's calls are cleared.
    fn freed_while_in_use(alias: bool) -> (Arc<FakeDriver>, DynamicPool, StreamId, u64, u64, vrampool::Allocation) {
        let (fake, backend, a, _) = backend_with_streams();
        let g = fake.granularity().unwrap();
        let config =
            DynamicConfig::default().initial_size(0).growth_factor(1.01).wait_for_idle(true).alias_in_use(alias);
        let pool = DynamicPool::new(backend, config).unwrap();
        let x = pool.allocate(4 * g, 256, a).unwrap();
        let z = pool.allocate(g, 256, a).unwrap();
        fake.hold_stream(a.0);
        pool.free(x.addr).unwrap();
        fake.clear_calls();
        (fake, pool, a, g, x.addr, z)
    }

    /// Where in `calls` the first `call` is.
    fn first(calls: &[&'static str], call: &str) -> usize {
        calls.iter().position(|c| *c == call).unwrap_or_else(|| panic!("no {call} among {calls:?}"))
    }

    /// A dynamic pool on one stream that must move idle chunks still used by queued work, without aliasing,
    /// waits for the event that ends that work (`cuEventSynchronize`), not for the whole context.
    #[test]
    fn moving_chunks_in_use_on_one_stream_waits_for_its_event() {
        for failing in [false, true] {
            let (fake, pool, a, g, _, z) = freed_while_in_use(false);
            if failing {
                fake.fail("cuEventSynchronize", 0, CUDA_ERROR_INVALID_HANDLE);
                let err = pool.allocate(8 * g, 256, a).unwrap_err();
                assert!(err.to_string().contains("cuEventSynchronize"), "{err}");
                assert_eq!(fake.count("cuMemUnmap"), 0, "nothing moved without the wait");
                fake.finish_stream(a.0);
                pool.free(z.addr).unwrap();
                continue;
            }
            let w = pool.allocate(8 * g, 256, a).unwrap();
            let stats = pool.stats();
            assert_eq!((stats.chunks_moved, stats.event_waits, stats.synchronizations), (4, 1, 0), "{stats:?}");
            let calls = fake.calls();
            assert!(
                first(&calls, "cuEventSynchronize") < first(&calls, "cuMemUnmap"),
                "the wait comes first: {calls:?}"
            );
            assert_eq!(fake.count("cuCtxSynchronize"), 0);
            pool.free(w.addr).unwrap();
            pool.free(z.addr).unwrap();
        }
    }

    /// With aliasing (the default), the same pool maps the chunks still in use at the new block's address
    /// as well, after recording an event, and waits for nothing. A block that would land on their old
    /// addresses is carved elsewhere while that work runs; one that needs fewer chunks backed there than
    /// anywhere else (it spans them and a mapped idle chunk) lands there and waits for that event
    /// (`cuEventSynchronize`) before they are unmapped.
    #[test]
    fn chunks_in_use_on_one_stream_are_aliased_and_unmapped_after_their_work() {
        let (fake, pool, a, g, x, z) = freed_while_in_use(true);
        let w = pool.allocate(8 * g, 256, a).unwrap();
        let stats = pool.stats();
        assert_eq!((stats.chunks_aliased, stats.event_waits, stats.synchronizations), (4, 0, 0), "{stats:?}");
        let calls = fake.calls();
        assert!(
            first(&calls, "cuEventRecord") < first(&calls, "cuMemMap"),
            "the event covers the work queued before the alias: {calls:?}"
        );
        assert!(!calls.contains(&"cuEventSynchronize") && !calls.contains(&"cuMemUnmap"), "{calls:?}");
        assert_eq!(fake.used(), 9 * g, "x's memory is the device's once");
        fake.clear_calls();
        let u = pool.allocate(4 * g, 256, a).unwrap();
        assert!(u.addr >= x + 4 * g, "u carved away from x's old addresses");
        assert!(!fake.calls().contains(&"cuEventSynchronize"), "no wait: {:?}", fake.calls());
        assert_eq!(pool.stats().event_waits, 0);
        pool.free(z.addr).unwrap();
        fake.clear_calls();
        let v = pool.allocate(5 * g, 256, a).unwrap();
        assert_eq!(v.addr, x, "v lands on x's old addresses and z's mapped chunk");
        let calls = fake.calls();
        assert!(
            first(&calls, "cuEventSynchronize") < first(&calls, "cuMemUnmap"),
            "x's old work waited for before its addresses are unmapped: {calls:?}"
        );
        assert_eq!(fake.count("cuCtxSynchronize"), 0);
        assert_eq!(pool.stats().event_waits, 1);
        for block in [v, w, u] {
            pool.free(block.addr).unwrap();
        }
        drop(pool);
        assert_eq!((fake.used(), fake.mapping_count()), (0, 0));
    }

    #[test]
    fn unregistered_streams_are_refused() {
        let (fake, backend, _, _) = backend_with_streams();
        fake.clear_calls();
        let err = backend.record_event(StreamId(0x1234)).unwrap_err();
        assert!(err.to_string().contains("stream 0x1234 is not registered with cuda-virtual:0"), "{err}");
        assert!(fake.calls().is_empty(), "nothing reached the driver: {:?}", fake.calls());
        for special in [0, 1, 2] {
            backend.record_event(StreamId(special)).unwrap();
        }
    }

    #[test]
    fn cross_stream_reuse_makes_the_new_stream_wait_for_the_old() {
        let (fake, backend, a, b) = backend_with_streams();
        let device = Arc::new(CudaDevice::with_driver(fake.clone()).unwrap());
        // SAFETY: the stream was created on this fake driver and outlives the backend.
        unsafe { device.register_raw_stream(a) };
        // SAFETY: as above.
        unsafe { device.register_raw_stream(b) };
        let backends: [Arc<dyn Backend>; 2] = [backend, device];
        for shared in backends {
            let fixed = FixedPool::new(shared.clone(), FixedConfig::default().block_size(MIB).block_count(4));
            let dynamic = DynamicPool::new(shared.clone(), DynamicConfig::default().initial_size(8 * MIB));
            let pools: Vec<Box<dyn Pool>> = vec![Box::new(fixed.unwrap()), Box::new(dynamic.unwrap())];
            for pool in pools {
                let waits_before = fake.waits().len();
                // Stream A has long-running work queued when its block is freed.
                fake.hold_stream(a.0);
                let x = pool.allocate(MIB, 256, a).unwrap();
                pool.free(x.addr).unwrap();
                let y = pool.allocate(MIB, 256, b).unwrap();
                assert_eq!(y.addr, x.addr, "{}: the freed block is reused", pool.strategy());
                let waits = fake.waits();
                assert_eq!(waits.len(), waits_before + 1, "{}: stream B waits", pool.strategy());
                let (waiter, raw) = waits[waits.len() - 1];
                assert_eq!((waiter, fake.event_stream(raw)), (b.0, Some(a.0)), "{}", pool.strategy());
                fake.finish_stream(a.0);
                pool.free(y.addr).unwrap();
            }
        }
    }
}
