//! The hybrid core's map from a block's address to its class and index, read by every free without a lock
//! and without an atomic read-modify-write.
//!
//! Every free of a class block looks its address up, while the map changes only when a block is carved
//! (once per block) or the region takes the cached blocks back. So the map is a sequence lock around an
//! open-addressing table: a writer takes the mutex and makes the sequence number odd while it changes the
//! table; a reader reads the number, probes the table, and reads the number again, and probes again if a
//! change overlapped. The table never moves (it is sized once, for every block the classes can hold), so a
//! reader never follows a stale pointer; its cells are atomics, so a torn read is only ever retried.
//!
//! Written here rather than taken from a crate (dashmap was used before): dashmap's shard read lock is two
//! atomic read-modify-writes per free, this map's read none (docs/BENCHMARKS.md has the hybrid's pairs
//! before and after).
//! Capacity beyond [`MAX_SLOTS`] (only from classes configured with millions of blocks) spills into a
//! mutex-guarded map that a lookup reads only when it is not empty.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};

use parking_lot::Mutex;

/// The most cells of the lock-free table (16 bytes each: 64 MiB at most).
pub(crate) const MAX_SLOTS: usize = 1 << 22;

/// An empty cell's key (no block has address 0).
const EMPTY: u64 = 0;

/// One cell of the table: a block's address and its packed `(class, index)`, side by side so that a
/// lookup reads one cache line, not two.
#[derive(Debug, Default)]
#[repr(C, align(16))]
struct Cell {
    key: AtomicU64,
    value: AtomicU64,
}

/// Block address to `(class, index)`.
#[derive(Debug)]
pub(crate) struct AddressMap {
    cells: Box<[Cell]>,
    /// Shift that keeps the top bits of the hash: 64 - log2(cells).
    shift: u32,
    /// Even while no writer is changing the table.
    seq: AtomicU64,
    /// Entries in the table; at most half its cells, the rest spill.
    len: AtomicUsize,
    /// Entries that found the table at its load bound, by address (guarded; also the writers' lock).
    spill: Mutex<HashMap<u64, u64>>,
    spilled: AtomicUsize,
}

#[inline]
fn pack(class: u32, index: u32) -> u64 {
    (u64::from(class) << 32) | u64::from(index)
}

#[inline]
fn unpack(value: u64) -> (u32, u32) {
    ((value >> 32) as u32, value as u32)
}

impl AddressMap {
    /// A map for at most `entries` blocks at once.
    ///
    /// Four cells per entry, so the table is at most a quarter full (it spills past half): a free's probe
    /// runs past fewer neighbours. Against two cells per entry, the churn through the C ABI mispredicts
    /// 0.18 fewer branches per step (callgrind, docs/BENCHMARKS.md), for 16 more bytes per block.
    pub(crate) fn with_capacity(entries: u64) -> Self {
        let cells = (entries.saturating_mul(4).max(16) as usize).next_power_of_two().min(MAX_SLOTS);
        AddressMap {
            cells: (0..cells).map(|_| Cell::default()).collect(),
            shift: 64 - cells.trailing_zeros(),
            seq: AtomicU64::new(0),
            len: AtomicUsize::new(0),
            spill: Mutex::new(HashMap::new()),
            spilled: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn mask(&self) -> usize {
        self.cells.len() - 1
    }

    /// The first cell to probe for `addr` (Fibonacci hashing of the address's 256-byte unit).
    #[inline]
    fn home(&self, addr: u64) -> usize {
        ((addr >> 8).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The class and index recorded for `addr`.
    #[inline]
    pub(crate) fn get(&self, addr: u64) -> Option<(u32, u32)> {
        if addr == EMPTY {
            return None;
        }
        let found = loop {
            let before = self.seq.load(Ordering::Acquire);
            if before & 1 == 0 {
                let found = self.probe(addr);
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == before {
                    break found;
                }
            }
            std::hint::spin_loop();
        };
        if found.is_none() && self.spilled.load(Ordering::Acquire) > 0 {
            return self.spill.lock().get(&addr).map(|&v| unpack(v));
        }
        found
    }

    /// Probes the table once; the caller checks that no writer overlapped.
    #[inline]
    fn probe(&self, addr: u64) -> Option<(u32, u32)> {
        let cell = self.locate(addr).ok()?;
        Some(unpack(self.cells[cell].value.load(Ordering::Relaxed)))
    }

    /// The cell holding `addr` (`Ok`), or the empty cell where its probe ends (`Err`). A probe visits each
    /// cell at most once: a reader overlapping a writer may see no empty cell, and then gets `Err` of the
    /// cell it stopped at (its read is retried); under the writers' lock the table is at most half full, so
    /// `Err` is always an empty cell there.
    #[inline]
    fn locate(&self, addr: u64) -> Result<usize, usize> {
        let mask = self.mask();
        let mut cell = self.home(addr);
        for _ in 0..self.cells.len() {
            let key = self.cells[cell].key.load(Ordering::Relaxed);
            if key == addr {
                return Ok(cell);
            }
            if key == EMPTY {
                return Err(cell);
            }
            cell = (cell + 1) & mask;
        }
        Err(cell)
    }

    /// Records `addr` as block `index` of class `class` (replacing what was recorded for it).
    pub(crate) fn insert(&self, addr: u64, class: u32, index: u32) {
        assert_ne!(addr, EMPTY, "no block is at address 0");
        let mut spill = self.spill.lock();
        self.write(|| {
            let cell = match self.locate(addr) {
                Ok(cell) => {
                    self.cells[cell].value.store(pack(class, index), Ordering::Relaxed);
                    return;
                }
                Err(empty) => empty,
            };
            if self.len.load(Ordering::Relaxed) * 2 >= self.cells.len() {
                spill.insert(addr, pack(class, index));
                self.spilled.store(spill.len(), Ordering::Release);
                return;
            }
            self.cells[cell].value.store(pack(class, index), Ordering::Relaxed);
            self.cells[cell].key.store(addr, Ordering::Relaxed);
            self.len.fetch_add(1, Ordering::Relaxed);
            // An earlier entry for the address may have spilled while the table was full: the table's
            // entry replaces it.
            if spill.remove(&addr).is_some() {
                self.spilled.store(spill.len(), Ordering::Release);
            }
        });
    }

    /// Forgets every address of `addrs`.
    pub(crate) fn remove_all(&self, addrs: impl IntoIterator<Item = u64>) {
        let mut spill = self.spill.lock();
        self.write(|| {
            for addr in addrs {
                self.remove_from_table(addr);
                if spill.remove(&addr).is_some() {
                    self.spilled.store(spill.len(), Ordering::Release);
                }
            }
        });
    }

    /// Removes `addr` from the table, shifting back the entries after it so that no probe chain breaks
    /// (linear probing's deletion, without tombstones). Whether it was there.
    fn remove_from_table(&self, addr: u64) -> bool {
        let Ok(mut hole) = self.locate(addr) else { return false };
        let mask = self.mask();
        let mut cell = hole;
        loop {
            cell = (cell + 1) & mask;
            let key = self.cells[cell].key.load(Ordering::Relaxed);
            if key == EMPTY {
                break;
            }
            // The entry at `cell` may fill the hole if its home is not cyclically in (hole, cell].
            let home = self.home(key);
            let stays = if hole <= cell { hole < home && home <= cell } else { hole < home || home <= cell };
            if !stays {
                self.cells[hole].key.store(key, Ordering::Relaxed);
                self.cells[hole].value.store(self.cells[cell].value.load(Ordering::Relaxed), Ordering::Relaxed);
                hole = cell;
            }
        }
        self.cells[hole].key.store(EMPTY, Ordering::Relaxed);
        self.len.fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// Runs `change` with the sequence number odd, so that readers overlapping it retry. The caller holds
    /// the spill mutex, which serialises writers.
    fn write(&self, change: impl FnOnce()) {
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        change();
        self.seq.store(seq + 2, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn inserts_are_found_and_removals_keep_the_rest() {
        let map = AddressMap::with_capacity(64);
        let addrs: Vec<u64> = (1..=64u64).map(|i| i * 0x1_0000 + 0x100).collect();
        for (i, &addr) in addrs.iter().enumerate() {
            map.insert(addr, i as u32 % 7, i as u32);
        }
        for (i, &addr) in addrs.iter().enumerate() {
            assert_eq!(map.get(addr), Some((i as u32 % 7, i as u32)));
        }
        assert_eq!(map.get(0x42), None);
        assert_eq!(map.get(0), None);
        map.remove_all(addrs.iter().copied().step_by(2));
        for (i, &addr) in addrs.iter().enumerate() {
            let expected = (i % 2 == 1).then_some((i as u32 % 7, i as u32));
            assert_eq!(map.get(addr), expected, "entry {i}");
        }
        map.insert(addrs[1], 3, 99);
        assert_eq!(map.get(addrs[1]), Some((3, 99)), "insert replaces");
    }

    /// Addresses that all hash to neighbouring cells: removal in the middle of a chain keeps every other
    /// entry reachable, across the end of the table too.
    #[test]
    fn removal_inside_a_collision_chain_keeps_the_chain() {
        let map = AddressMap::with_capacity(8);
        let cells = map.cells.len() as u64;
        // Addresses whose home cell is the last one, then the first: chains wrap around.
        let mut wrapping = Vec::new();
        let mut unit = 1u64;
        while wrapping.len() < 6 {
            let addr = unit << 8;
            let home = map.home(addr) as u64;
            if home >= cells - 2 {
                wrapping.push(addr);
            }
            unit += 1;
        }
        for (i, &addr) in wrapping.iter().enumerate() {
            map.insert(addr, 0, i as u32);
        }
        for victim in 0..wrapping.len() {
            map.remove_all([wrapping[victim]]);
            for (i, &addr) in wrapping.iter().enumerate() {
                assert_eq!(map.get(addr), (i > victim).then_some((0, i as u32)), "after removing {victim}");
            }
        }
    }

    #[test]
    fn entries_past_the_load_bound_spill_and_are_found() {
        let map = AddressMap::with_capacity(4);
        let cells = map.cells.len();
        let addrs: Vec<u64> = (1..=cells as u64).map(|i| i << 12).collect();
        for (i, &addr) in addrs.iter().enumerate() {
            map.insert(addr, 1, i as u32);
        }
        assert_eq!(map.spilled.load(Ordering::Relaxed), cells / 2);
        for (i, &addr) in addrs.iter().enumerate() {
            assert_eq!(map.get(addr), Some((1, i as u32)));
        }
        map.remove_all(addrs.iter().copied());
        assert!(addrs.iter().all(|&a| map.get(a).is_none()));
        assert_eq!(map.spilled.load(Ordering::Relaxed), 0);
    }

    /// An address that spilled while the table was full and is recorded again once there is room lives in
    /// the table alone: removing it leaves no stale spilled entry behind.
    #[test]
    fn a_spilled_address_recorded_again_leaves_no_stale_entry() {
        let map = AddressMap::with_capacity(4);
        let cells = map.cells.len() as u64;
        let fill: Vec<u64> = (1..=cells / 2).map(|i| i << 12).collect();
        for &addr in &fill {
            map.insert(addr, 0, 0);
        }
        let late = (cells + 1) << 12;
        map.insert(late, 1, 1);
        assert_eq!(map.spilled.load(Ordering::Relaxed), 1);
        map.remove_all([fill[0]]);
        map.insert(late, 2, 2);
        assert_eq!(map.spilled.load(Ordering::Relaxed), 0, "the table's entry replaced the spilled one");
        assert_eq!(map.get(late), Some((2, 2)));
        map.remove_all([late]);
        assert_eq!(map.get(late), None);
    }

    /// Readers looking up entries that stay while a writer inserts and removes others around them always
    /// find them, with their values: a read overlapping a change is retried, never wrong.
    #[test]
    fn readers_never_miss_a_stable_entry_while_others_change() {
        let map = Arc::new(AddressMap::with_capacity(256));
        let stable: Vec<u64> = (1..=64u64).map(|i| i << 10).collect();
        for (i, &addr) in stable.iter().enumerate() {
            map.insert(addr, 2, i as u32);
        }
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (map, stable, done) = (map.clone(), stable.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut reads = 0u64;
                    while !done.load(Ordering::Relaxed) {
                        for (i, &addr) in stable.iter().enumerate() {
                            assert_eq!(map.get(addr), Some((2, i as u32)));
                            reads += 1;
                        }
                    }
                    reads
                })
            })
            .collect();
        for round in 0..2000u64 {
            let churn: Vec<u64> = (0..100u64).map(|i| ((round * 100 + i) << 10) | 0x100).collect();
            for (i, &addr) in churn.iter().enumerate() {
                map.insert(addr, 5, i as u32);
            }
            map.remove_all(churn);
        }
        done.store(true, Ordering::Relaxed);
        for reader in readers {
            assert!(reader.join().unwrap() > 0);
        }
    }
}
