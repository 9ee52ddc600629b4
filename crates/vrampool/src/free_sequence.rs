//! A stream's sequence number of frees: read by each free on the stream, advanced by each event recorded on
//! it, so that an event covers exactly the frees that came before it, whatever threads made them.

use crate::sync::{AtomicU64, Ordering, fence};

/// The number the frees on one stream read and the events recorded on it advance.
///
/// A free reads the number ([`FreeSequence::read_at_free`]); an event is recorded right after the number is
/// advanced ([`FreeSequence::advance_for_event`]), and takes the number it advanced from. The event then
/// covers every free that read that number or an earlier one: both sides put a sequentially consistent
/// fence between the number and the device's work (the free after the work its thread queued, the event
/// before its record), so a free that read the number before the advance had its work queued before the
/// event is recorded, on any thread. A free that read it after gets a number no earlier event covers.
///
/// Cost: a fence and a load per free, on a cache line of the stream's own.
#[derive(Debug)]
pub(crate) struct FreeSequence {
    next: AtomicU64,
}

impl Default for FreeSequence {
    fn default() -> Self {
        FreeSequence { next: AtomicU64::new(1) }
    }
}

impl FreeSequence {
    /// The number a free made now reads, after the work the calling thread queued on the stream.
    #[inline]
    pub(crate) fn read_at_free(&self) -> u64 {
        fence(Ordering::SeqCst);
        self.next.load(Ordering::Relaxed)
    }

    /// The number a free reads where nothing can record an event concurrently (the stream's pool has seen no
    /// other stream): no fence.
    #[inline]
    pub(crate) fn read_alone(&self) -> u64 {
        self.next.load(Ordering::Relaxed)
    }

    /// Advances the number for an event recorded right after this call; returns the number the event covers
    /// frees up to.
    pub(crate) fn advance_for_event(&self) -> u64 {
        let seq = self.next.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        seq
    }
}

/// Model checks of the protocol under every interleaving loom explores (`RUSTFLAGS="--cfg loom"`): a free on
/// one thread and an event recorded on another; whenever the event's number covers the free's, the event
/// sees the work queued before the free.
#[cfg(all(test, loom))]
mod loom_tests {
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicBool;
    use loom::thread;

    use super::*;

    #[test]
    fn an_event_that_covers_a_free_sees_the_work_before_it() {
        loom::model(|| {
            let sequence = Arc::new(FreeSequence::default());
            // Stands for the stream's queue in the driver: written when work is queued, read when an event
            // is recorded behind it.
            let queued = Arc::new(AtomicBool::new(false));
            let freeing = {
                let (sequence, queued) = (sequence.clone(), queued.clone());
                thread::spawn(move || {
                    queued.store(true, Ordering::Relaxed);
                    sequence.read_at_free()
                })
            };
            let covers = sequence.advance_for_event();
            let recorded_behind_work = queued.load(Ordering::Relaxed);
            let tag = freeing.join().unwrap();
            if tag <= covers {
                assert!(recorded_behind_work, "the event covers a free whose work it does not follow");
            }
        });
    }
}
