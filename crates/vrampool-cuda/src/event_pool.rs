//! Events recorded for the pools, from a pool of created events.
//!
//! Creating an event is a driver call a pool should not pay at every cross-stream free, so events are
//! created once (`cuEventCreate` with `CU_EVENT_DISABLE_TIMING`) and reused: a released event goes back to
//! the pool and is recorded again later. An [`EventId`] is a slot index and a generation, so an id that
//! was released, or never handed out, is refused instead of reaching the driver.

use parking_lot::Mutex;
use vrampool::EventId;

use crate::driver::Driver;
use crate::error::CudaError;

/// The most events one backend creates: slot indices are 32-bit.
const MAX_EVENTS: usize = u32::MAX as usize;

/// One created event and whether it is handed out.
#[derive(Debug)]
struct Slot {
    /// The `CUevent` handle value.
    raw: u64,
    /// Bumped at each release, so old ids stop matching.
    generation: u32,
    /// Whether the event is recorded and not yet released.
    live: bool,
}

#[derive(Debug, Default)]
struct Slots {
    slots: Vec<Slot>,
    idle: Vec<u32>,
}

/// The created events of one backend.
#[derive(Debug, Default)]
pub(crate) struct EventPool {
    state: Mutex<Slots>,
}

fn event_id(index: u32, generation: u32) -> EventId {
    EventId((u64::from(generation) << 32) | u64::from(index))
}

impl EventPool {
    /// Records an event on `stream` (a stream the backend checked), creating one if none is idle.
    ///
    /// The caller has bound the driver's context on this thread.
    pub(crate) fn record(&self, driver: &dyn Driver, stream: u64) -> Result<EventId, CudaError> {
        let reused = {
            let mut state = self.state.lock();
            state.idle.pop().map(|index| (index, state.slots[index as usize].raw))
        };
        let (index, raw) = match reused {
            Some(found) => found,
            None => {
                if self.state.lock().slots.len() >= MAX_EVENTS {
                    return Err(CudaError::Call {
                        call: "cuEventCreate",
                        code: crate::error::CUDA_ERROR_OUT_OF_MEMORY,
                        name: format!("CUDA_ERROR_OUT_OF_MEMORY ({MAX_EVENTS} events in flight)"),
                    });
                }
                let raw = driver.event_create()?;
                let mut state = self.state.lock();
                let index = state.slots.len() as u32;
                state.slots.push(Slot { raw, generation: 0, live: false });
                (index, raw)
            }
        };
        // SAFETY: `raw` is a live event of this driver (slots are destroyed only on drop) that no one else
        // holds (it was idle or just created); the caller checked the stream.
        if let Err(err) = unsafe { driver.event_record(raw, stream) } {
            self.state.lock().idle.push(index);
            return Err(err);
        }
        let mut state = self.state.lock();
        let slot = &mut state.slots[index as usize];
        slot.live = true;
        Ok(event_id(index, slot.generation))
    }

    /// The `CUevent` handle of a live event id.
    pub(crate) fn lookup(&self, event: EventId, backend: impl FnOnce() -> String) -> Result<u64, CudaError> {
        let (index, generation) = ((event.0 & u64::from(u32::MAX)) as usize, (event.0 >> 32) as u32);
        let state = self.state.lock();
        match state.slots.get(index) {
            Some(slot) if slot.live && slot.generation == generation => Ok(slot.raw),
            _ => Err(CudaError::UnknownEvent { event: event.0, backend: backend() }),
        }
    }

    /// Puts a live event back in the pool; an unknown or released id is ignored.
    pub(crate) fn release(&self, event: EventId) {
        let (index, generation) = ((event.0 & u64::from(u32::MAX)) as usize, (event.0 >> 32) as u32);
        let mut state = self.state.lock();
        let Some(slot) = state.slots.get_mut(index) else { return };
        if slot.live && slot.generation == generation {
            slot.live = false;
            slot.generation = slot.generation.wrapping_add(1);
            state.idle.push(index as u32);
        }
    }

    /// Events created so far (live and idle).
    pub(crate) fn created(&self) -> usize {
        self.state.lock().slots.len()
    }

    /// Events handed out and not yet released.
    pub(crate) fn live(&self) -> usize {
        self.state.lock().slots.iter().filter(|slot| slot.live).count()
    }

    /// Destroys every created event; returns how many the driver refused to destroy.
    ///
    /// The caller has bound the driver's context and waited for the device, so no queued work refers to
    /// the events.
    pub(crate) fn destroy_all(&self, driver: &dyn Driver) -> usize {
        let slots = std::mem::take(&mut *self.state.lock());
        let mut failures = 0;
        for slot in slots.slots {
            // SAFETY: each slot's event was created by this driver and is destroyed once, here, after the
            // device finished the work that could signal it.
            if unsafe { driver.event_destroy(slot.raw) }.is_err() {
                failures += 1;
            }
        }
        failures
    }
}
