//! The ledger of blocks a trace has allocated and freed, which checks that each event is consistent with
//! the ones before it.

use rustc_hash::FxHashMap;

use crate::error::{Error, Location, Result};
use crate::event::{Event, EventKind, LiveBlock};

/// What a free of an address that the trace never allocated means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnknownFree {
    /// The block was allocated before the first recorded event (a ring buffer dropped it): it is live from
    /// the start. PyTorch snapshots.
    LiveFromStart,
    /// An error: a complete log cannot free what it never allocated. CSV logs.
    Reject,
}

/// Where a block stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Allocated, not freed.
    Live,
    /// Freed by the program, not yet reusable.
    FreeRequested,
    /// Reusable.
    Freed,
    /// Its allocation was a bad event that a lenient read skipped.
    Skipped,
}

/// One address's latest block.
#[derive(Clone, Copy, Debug)]
struct Block {
    state: State,
    size: u64,
    allocated_at: Location,
    freed_at: Location,
}

/// The blocks of one trace by address, and the blocks found live from the start.
///
/// Zero-byte allocations and frees are not tracked: allocators may hand out one address (often null) for
/// all of them.
pub(crate) struct BlockLedger {
    unknown_free: UnknownFree,
    blocks: FxHashMap<u64, Block>,
    initial_live: Vec<LiveBlock>,
}

impl BlockLedger {
    /// An empty ledger.
    pub(crate) fn new(unknown_free: UnknownFree) -> Self {
        BlockLedger { unknown_free, blocks: FxHashMap::default(), initial_live: Vec::new() }
    }

    /// Checks `event` against the blocks so far and records it; on error nothing changes.
    pub(crate) fn apply(&mut self, name: &str, at: Location, event: &Event) -> Result<()> {
        match event.kind {
            EventKind::Alloc => self.alloc(name, at, event),
            EventKind::FreeRequested => self.free(name, at, event, State::FreeRequested),
            EventKind::Free => self.free(name, at, event, State::Freed),
            _ => Ok(()),
        }
    }

    /// Marks `addr` as the address of a skipped allocation, so that its free is skipped too (unless a block
    /// is live there).
    pub(crate) fn mark_skipped(&mut self, addr: u64) {
        let skipped = Block {
            state: State::Skipped,
            size: 0,
            allocated_at: Location::BeforeTrace,
            freed_at: Location::BeforeTrace,
        };
        let block = self.blocks.entry(addr).or_insert(skipped);
        if matches!(block.state, State::Freed) {
            *block = skipped;
        }
    }

    /// About how many bytes the ledger takes.
    pub(crate) fn held_bytes(&self) -> u64 {
        let blocks = self.blocks.capacity() * (size_of::<(u64, Block)>() + 1);
        (blocks + self.initial_live.capacity() * size_of::<LiveBlock>()) as u64
    }

    /// The blocks found live from the start, in the order their frees appear.
    pub(crate) fn into_initial_live(self) -> Vec<LiveBlock> {
        self.initial_live
    }

    fn alloc(&mut self, name: &str, at: Location, event: &Event) -> Result<()> {
        if event.size == 0 {
            return Ok(());
        }
        let block = Block { state: State::Live, size: event.size, allocated_at: at, freed_at: at };
        match self.blocks.get_mut(&event.addr) {
            Some(old) if matches!(old.state, State::Live | State::FreeRequested) => Err(Error::AddressInUse {
                name: name.to_owned(),
                at,
                addr: event.addr,
                size: event.size,
                allocated_at: old.allocated_at,
            }),
            Some(old) => {
                *old = block;
                Ok(())
            }
            None => {
                self.blocks.insert(event.addr, block);
                Ok(())
            }
        }
    }

    fn free(&mut self, name: &str, at: Location, event: &Event, to: State) -> Result<()> {
        if event.size == 0 {
            return Ok(());
        }
        let addr = event.addr;
        let Some(block) = self.blocks.get_mut(&addr) else {
            return match self.unknown_free {
                UnknownFree::LiveFromStart => {
                    self.initial_live.push(LiveBlock { addr, size: event.size, stream: event.stream });
                    let block =
                        Block { state: to, size: event.size, allocated_at: Location::BeforeTrace, freed_at: at };
                    self.blocks.insert(addr, block);
                    Ok(())
                }
                UnknownFree::Reject => Err(Error::FreeOfUnknownBlock { name: name.to_owned(), at, addr }),
            };
        };
        match block.state {
            State::Freed => Err(Error::DoubleFree { name: name.to_owned(), at, addr, freed_at: block.freed_at }),
            State::FreeRequested if to == State::FreeRequested => {
                Err(Error::DoubleFree { name: name.to_owned(), at, addr, freed_at: block.freed_at })
            }
            State::Live | State::FreeRequested => {
                if block.size != event.size {
                    return Err(Error::FreeSizeMismatch {
                        name: name.to_owned(),
                        at,
                        addr,
                        size: event.size,
                        allocated_size: block.size,
                        allocated_at: block.allocated_at,
                    });
                }
                block.state = to;
                block.freed_at = at;
                Ok(())
            }
            State::Skipped => Err(Error::BadRecord {
                name: name.to_owned(),
                at,
                reason: format!("free of {addr:#x}, whose allocation was skipped as bad"),
            }),
        }
    }
}
