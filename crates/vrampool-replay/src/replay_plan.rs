//! A trace turned into the operations a pool sees.

use rustc_hash::FxHashMap;
use vrampool_trace::{EventKind, Trace};

use crate::error::{Error, Result};

/// One operation of a replay. Allocations are numbered (slots) so the replay needs no address lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Allocate `size` bytes on `stream` into `slot`.
    Alloc {
        /// The allocation's number.
        slot: u32,
        /// Bytes requested.
        size: u64,
        /// The stream label.
        stream: u64,
    },
    /// Free the allocation in `slot`.
    Free {
        /// The allocation's number.
        slot: u32,
    },
}

/// The operations of a trace, in order, with what the replay reports alongside.
#[derive(Clone, Debug, Default)]
pub struct ReplayPlan {
    /// The trace's name.
    pub name: String,
    /// Blocks live before the first event (a snapshot's ring buffer dropped their allocation).
    pub initial: Vec<Operation>,
    /// The operations.
    pub operations: Vec<Operation>,
    /// Each operation's trace time in microseconds (for the pool's event log).
    pub times_us: Vec<i64>,
    /// Slots used.
    pub slots: u32,
    /// Events in the trace.
    pub events: u64,
    /// Microseconds from the first event to the last: 0 where the last is not later than the first, and
    /// `i64::MAX` for a longer span.
    pub duration_us: i64,
}

impl ReplayPlan {
    /// The plan of `trace`: its allocations and the frees that make blocks reusable (PyTorch's
    /// `free_completed`); segment events, refused allocations, zero-byte allocations and frees, and frees of
    /// blocks never seen are left out.
    /// A trace of more than `u32::MAX` allocations is an error ([`Error::TooManyAllocations`]).
    pub fn from_trace(trace: &Trace) -> Result<Self> {
        let mut plan = ReplayPlan {
            name: trace.name.clone(),
            events: trace.events.len() as u64,
            duration_us: match (trace.events.first(), trace.events.last()) {
                (Some(first), Some(last)) => last.time_us.saturating_sub(first.time_us).max(0),
                _ => 0,
            },
            ..ReplayPlan::default()
        };
        let mut slots: FxHashMap<u64, u32> = FxHashMap::default();
        let mut next = 0u32;
        for block in &trace.initial_live {
            let slot = take_slot(&mut next, &trace.name)?;
            slots.insert(block.addr, slot);
            plan.initial.push(Operation::Alloc { slot, size: block.size, stream: block.stream });
        }
        for event in &trace.events {
            match event.kind {
                EventKind::Alloc if event.size > 0 => {
                    let slot = take_slot(&mut next, &trace.name)?;
                    if let Some(old) = slots.insert(event.addr, slot) {
                        // An address allocated twice without a free: the trace lost the free.
                        plan.operations.push(Operation::Free { slot: old });
                        plan.times_us.push(event.time_us);
                    }
                    plan.operations.push(Operation::Alloc { slot, size: event.size, stream: event.stream });
                    plan.times_us.push(event.time_us);
                }
                EventKind::Free if event.size > 0 => {
                    if let Some(slot) = slots.remove(&event.addr) {
                        plan.operations.push(Operation::Free { slot });
                        plan.times_us.push(event.time_us);
                    }
                }
                _ => {}
            }
        }
        plan.slots = next;
        Ok(plan)
    }

    /// Requested sizes of every allocation, the initial blocks included.
    pub fn allocation_sizes(&self) -> impl Iterator<Item = u64> + '_ {
        self.initial.iter().chain(&self.operations).filter_map(|op| match *op {
            Operation::Alloc { size, .. } => Some(size),
            Operation::Free { .. } => None,
        })
    }
}

/// The slot numbered `next`, the count of slots taken, and the next one's number: an error when `next` is the
/// last number (slots are numbered in 32 bits and `u32::MAX` of them are counted in a `u32`).
fn take_slot(next: &mut u32, trace: &str) -> Result<u32> {
    let slot = *next;
    *next = next.checked_add(1).ok_or_else(|| Error::TooManyAllocations { trace: trace.to_owned() })?;
    Ok(slot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vrampool_trace::{Event, LiveBlock};

    #[test]
    fn allocations_and_reusable_frees_become_operations() {
        let trace = Trace {
            name: "t".into(),
            events: vec![
                Event::new(0, EventKind::SegmentAlloc, 0x1000, 4096, 0),
                Event::new(1, EventKind::Alloc, 0x1000, 100, 0),
                Event::new(2, EventKind::FreeRequested, 0x1000, 100, 0),
                Event::new(3, EventKind::Free, 0x1000, 100, 0),
                Event::new(4, EventKind::Free, 0x9000, 50, 0),
                Event::new(5, EventKind::Alloc, 0x2000, 0, 0),
            ],
            initial_live: vec![LiveBlock { addr: 0x9000, size: 50, stream: 0 }],
            ..Trace::default()
        };
        let plan = ReplayPlan::from_trace(&trace).unwrap();
        assert_eq!(plan.initial, vec![Operation::Alloc { slot: 0, size: 50, stream: 0 }]);
        assert_eq!(
            plan.operations,
            vec![
                Operation::Alloc { slot: 1, size: 100, stream: 0 },
                Operation::Free { slot: 1 },
                Operation::Free { slot: 0 }
            ]
        );
        assert_eq!((plan.slots, plan.events, plan.duration_us), (2, 6, 5));
        assert_eq!(plan.allocation_sizes().collect::<Vec<_>>(), vec![50, 100]);
    }

    #[test]
    fn the_duration_saturates_and_is_never_negative() {
        let duration = |first: i64, last: i64| {
            let events = vec![Event::new(first, EventKind::Alloc, 1, 1, 0), Event::new(last, EventKind::Free, 1, 1, 0)];
            ReplayPlan::from_trace(&Trace { events, ..Trace::default() }).unwrap().duration_us
        };
        assert_eq!(duration(i64::MIN, i64::MAX), i64::MAX);
        assert_eq!(duration(i64::MIN, 0), i64::MAX);
        assert_eq!(duration(-5, 5), 10);
        assert_eq!(duration(0, 0), 0);
        assert_eq!(duration(i64::MAX, i64::MIN), 0);
        assert_eq!(duration(7, 3), 0);
    }

    #[test]
    fn slots_are_numbered_up_to_the_32_bit_count_and_no_further() {
        let mut next = u32::MAX - 1;
        assert_eq!(take_slot(&mut next, "t").unwrap(), u32::MAX - 1);
        assert_eq!(next, u32::MAX);
        let error = take_slot(&mut next, "t").unwrap_err();
        assert_eq!(error.to_string(), "t: more than 4294967295 allocations, the most a replay numbers (in 32 bits)");
        assert_eq!(next, u32::MAX);
    }

    #[test]
    fn a_zero_byte_free_at_a_blocks_address_leaves_the_block_live() {
        let trace = Trace {
            events: vec![
                Event::new(0, EventKind::Alloc, 0x1000, 512, 0),
                Event::new(1, EventKind::Free, 0x1000, 0, 0),
                Event::new(2, EventKind::Free, 0x1000, 512, 0),
            ],
            ..Trace::default()
        };
        let plan = ReplayPlan::from_trace(&trace).unwrap();
        assert_eq!(
            plan.operations,
            vec![Operation::Alloc { slot: 0, size: 512, stream: 0 }, Operation::Free { slot: 0 }]
        );
        assert_eq!(plan.times_us, vec![0, 2]);
    }
}
