//! Which thread slot last allocated on each stream, so that a block another thread frees goes back to where
//! its stream's thread looks for blocks first.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::stream_order::MAX_STREAMS;
use crate::thread_slot::ThreadSlot;

/// No slot has allocated on the stream yet.
const NO_HOME: u8 = u8::MAX;

/// Per stream index of a pool's [`StreamOrder`](crate::stream_order::StreamOrder), the slot of the thread
/// that allocated on it last.
///
/// A server runs a thread per stream; a block one thread frees for another's stream is then best kept
/// where that stream's thread takes blocks from, which reuses it with no event, rather than where the
/// freeing thread would hand it to its own stream behind an event. Reading costs a load of a line that
/// changes only when a stream's allocating thread does.
#[derive(Debug)]
pub(crate) struct StreamHomes {
    slots: [AtomicU8; MAX_STREAMS],
}

impl Default for StreamHomes {
    fn default() -> Self {
        StreamHomes { slots: std::array::from_fn(|_| AtomicU8::new(NO_HOME)) }
    }
}

impl StreamHomes {
    /// Notes that the thread in `slot` allocates on the stream with `stream_index`.
    #[inline]
    pub(crate) fn note(&self, stream_index: usize, slot: ThreadSlot) {
        let home = &self.slots[stream_index];
        let index = slot.index as u8;
        if home.load(Ordering::Relaxed) != index {
            home.store(index, Ordering::Relaxed);
        }
    }

    /// Where a block of the stream with `stream_index`, freed by the thread in `slot`, is kept: `slot` itself
    /// where that thread allocated on the stream last (or nobody has), else the slot of the thread that did,
    /// shared (the freeing thread does not hold it).
    #[inline]
    pub(crate) fn keeper(&self, stream_index: usize, slot: ThreadSlot) -> ThreadSlot {
        match self.slots[stream_index].load(Ordering::Relaxed) {
            NO_HOME => slot,
            home if usize::from(home) == slot.index => slot,
            home => ThreadSlot { index: usize::from(home), exclusive: false },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_goes_to_the_thread_that_allocates_on_its_stream() {
        let homes = StreamHomes::default();
        let (a, b) = (ThreadSlot { index: 3, exclusive: true }, ThreadSlot { index: 5, exclusive: true });
        assert_eq!(homes.keeper(0, a), a, "no home yet: the freeing thread keeps it");
        homes.note(0, a);
        homes.note(1, b);
        assert_eq!(homes.keeper(0, a), a);
        assert_eq!(homes.keeper(0, b), ThreadSlot { index: 3, exclusive: false });
        assert_eq!(homes.keeper(1, a), ThreadSlot { index: 5, exclusive: false });
        homes.note(0, b);
        assert_eq!(homes.keeper(0, b), b, "the stream moved to another thread");
    }
}
