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
//! A cell is one 8-byte word: the block's address as a 32-bit key (its 256-byte unit counted from a base
//! fixed at the first insert, so a window of 1 TiB around it) and its class (8 bits) and index (24 bits).
//! The table is half the size it was with a 16-byte cell of the whole address and value, and a free's probe
//! lands on one of half as many cache lines: where the pool's tables have gone cold between two calls (a
//! program that does other work in between), that is a line fetched from memory on most frees. The churn
//! through the C ABI with the nearer caches emptied before each round of 2,000 operations ran 7% faster
//! (docs/BENCHMARKS.md).
//!
//! Written here rather than taken from a crate (dashmap was used before): dashmap's shard read lock is two
//! atomic read-modify-writes per free, this map's read none (docs/BENCHMARKS.md has the hybrid's pairs
//! before and after).
//! Entries the table cannot hold spill into a mutex-guarded map that a lookup reads only when it is not
//! empty: capacity beyond [`MAX_SLOTS`] (only from classes configured with millions of blocks), an index
//! past 2^24 (a class of more blocks), or an address outside the window. (A class past the 255th would
//! spill too; a hybrid pool has at most 255.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};

use parking_lot::Mutex;

/// The most cells of the lock-free table (8 bytes each: 32 MiB at most).
pub(crate) const MAX_SLOTS: usize = 1 << 22;

/// An empty cell (no key is 0).
const EMPTY: u64 = 0;

/// Classes whose blocks the table holds (those past it spill; a hybrid pool has no more).
const TABLE_CLASSES: u32 = super::config::MAX_CLASSES as u32;
/// Indices the table holds per class (those past it spill).
const TABLE_INDICES: u32 = 1 << 24;
/// [`AddressMap::base`] before the first insert.
const NO_BASE: u64 = u64::MAX;
/// Units of 256 bytes the window of keys reaches below its first address (half the window).
const BASE_MARGIN: u64 = 1 << 31;

/// Block address to `(class, index)`.
#[derive(Debug)]
pub(crate) struct AddressMap {
    /// Each a key in the high 32 bits (0: empty) and the packed class and index in the low 32.
    cells: Box<[AtomicU64]>,
    /// Shift that keeps the top bits of the hash: 64 - log2(cells).
    shift: u32,
    /// Even while no writer is changing the table.
    seq: AtomicU64,
    /// The 256-byte unit that key 1 stands for; [`NO_BASE`] until the first insert.
    base: AtomicU64,
    /// Entries in the table; at most half its cells, the rest spill.
    len: AtomicUsize,
    /// Entries the table does not hold, by address (guarded; also the writers' lock).
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

/// The low word of a cell for `(class, index)`, if the table holds such an entry.
#[inline]
fn cell_value(class: u32, index: u32) -> Option<u64> {
    (class < TABLE_CLASSES && index < TABLE_INDICES).then(|| (u64::from(class) << 24) | u64::from(index))
}

/// `(class, index)` from a cell.
#[inline]
fn cell_entry(cell: u64) -> (u32, u32) {
    let low = cell as u32;
    (low >> 24, low & (TABLE_INDICES - 1))
}

impl AddressMap {
    /// A map for at most `entries` blocks at once.
    pub(crate) fn with_capacity(entries: u64) -> Self {
        let cells = (entries.saturating_mul(2).max(16) as usize).next_power_of_two().min(MAX_SLOTS);
        AddressMap {
            cells: (0..cells).map(|_| AtomicU64::new(EMPTY)).collect(),
            shift: 64 - cells.trailing_zeros(),
            seq: AtomicU64::new(0),
            base: AtomicU64::new(NO_BASE),
            len: AtomicUsize::new(0),
            spill: Mutex::new(HashMap::new()),
            spilled: AtomicUsize::new(0),
        }
    }

    #[inline]
    fn mask(&self) -> usize {
        self.cells.len() - 1
    }

    /// The key of `addr` in the window starting at unit `base`: `None` for an address the table cannot hold
    /// (not a multiple of 256 bytes, outside the window, or no window yet).
    #[inline]
    fn key(addr: u64, base: u64) -> Option<u64> {
        if addr % 256 != 0 || base == NO_BASE {
            return None;
        }
        let key = (addr >> 8).wrapping_sub(base).wrapping_add(1);
        (1..=u64::from(u32::MAX)).contains(&key).then_some(key)
    }

    /// The first cell to probe for `key` (Fibonacci hashing).
    #[inline]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The class and index recorded for `addr`.
    #[inline]
    pub(crate) fn get(&self, addr: u64) -> Option<(u32, u32)> {
        let found = loop {
            let before = self.seq.load(Ordering::Acquire);
            if before & 1 == 0 {
                let found = Self::key(addr, self.base.load(Ordering::Relaxed)).and_then(|key| self.probe(key));
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
    fn probe(&self, key: u64) -> Option<(u32, u32)> {
        let cell = self.locate(key).ok()?;
        Some(cell_entry(self.cells[cell].load(Ordering::Relaxed)))
    }

    /// The cell holding `key` (`Ok`), or the empty cell where its probe ends (`Err`). A probe visits each
    /// cell at most once: a reader overlapping a writer may see no empty cell, and then gets `Err` of the
    /// cell it stopped at (its read is retried); under the writers' lock the table is at most half full, so
    /// `Err` is always an empty cell there.
    #[inline]
    fn locate(&self, key: u64) -> Result<usize, usize> {
        let mask = self.mask();
        let mut cell = self.home(key);
        for _ in 0..self.cells.len() {
            let word = self.cells[cell].load(Ordering::Relaxed);
            if word >> 32 == key {
                return Ok(cell);
            }
            if word == EMPTY {
                return Err(cell);
            }
            cell = (cell + 1) & mask;
        }
        Err(cell)
    }

    /// Records `addr` as block `index` of class `class` (replacing what was recorded for it).
    pub(crate) fn insert(&self, addr: u64, class: u32, index: u32) {
        assert_ne!(addr, 0, "no block is at address 0");
        let mut spill = self.spill.lock();
        self.write(|| {
            if self.base.load(Ordering::Relaxed) == NO_BASE && addr % 256 == 0 {
                self.base.store((addr >> 8).saturating_sub(BASE_MARGIN), Ordering::Relaxed);
            }
            let key = Self::key(addr, self.base.load(Ordering::Relaxed));
            let value = cell_value(class, index);
            let (Some(key), Some(value)) = (key, value) else {
                // An earlier entry for the address may sit in the table: the spilled one replaces it.
                if let Some(key) = key {
                    self.remove_from_table(key);
                }
                self.spill_insert(&mut spill, addr, class, index);
                return;
            };
            let cell = match self.locate(key) {
                Ok(cell) => {
                    self.cells[cell].store((key << 32) | value, Ordering::Relaxed);
                    return;
                }
                Err(empty) => empty,
            };
            if self.len.load(Ordering::Relaxed) * 2 >= self.cells.len() {
                self.spill_insert(&mut spill, addr, class, index);
                return;
            }
            self.cells[cell].store((key << 32) | value, Ordering::Relaxed);
            self.len.fetch_add(1, Ordering::Relaxed);
            // An earlier entry for the address may have spilled while the table was full: the table's
            // entry replaces it.
            self.spill_remove(&mut spill, addr);
        });
    }

    /// Records `addr` as block `index` of class `class` in the spill map (guarded by `spill`).
    fn spill_insert(&self, spill: &mut HashMap<u64, u64>, addr: u64, class: u32, index: u32) {
        spill.insert(addr, pack(class, index));
        self.spilled.store(spill.len(), Ordering::Release);
    }

    /// Forgets `addr` in the spill map (guarded by `spill`), if it is there.
    fn spill_remove(&self, spill: &mut HashMap<u64, u64>, addr: u64) {
        if spill.remove(&addr).is_some() {
            self.spilled.store(spill.len(), Ordering::Release);
        }
    }

    /// Forgets every address of `addrs`.
    pub(crate) fn remove_all(&self, addrs: impl IntoIterator<Item = u64>) {
        let mut spill = self.spill.lock();
        self.write(|| {
            let base = self.base.load(Ordering::Relaxed);
            for addr in addrs {
                if let Some(key) = Self::key(addr, base) {
                    self.remove_from_table(key);
                }
                self.spill_remove(&mut spill, addr);
            }
        });
    }

    /// Removes `key` from the table, shifting back the entries after it so that no probe chain breaks
    /// (linear probing's deletion, without tombstones). Whether it was there.
    fn remove_from_table(&self, key: u64) -> bool {
        let Ok(mut hole) = self.locate(key) else { return false };
        let mask = self.mask();
        let mut cell = hole;
        loop {
            cell = (cell + 1) & mask;
            let word = self.cells[cell].load(Ordering::Relaxed);
            if word == EMPTY {
                break;
            }
            // The entry at `cell` may fill the hole if its home is not cyclically in (hole, cell].
            let home = self.home(word >> 32);
            let stays = if hole <= cell { hole < home && home <= cell } else { hole < home || home <= cell };
            if !stays {
                self.cells[hole].store(word, Ordering::Relaxed);
                hole = cell;
            }
        }
        self.cells[hole].store(EMPTY, Ordering::Relaxed);
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
        // The first insert fixes the window of keys; it is removed again below.
        let anchor = 1u64 << 30;
        map.insert(anchor, 0, 0);
        let base = map.base.load(Ordering::Relaxed);
        // Addresses whose home cell is the last one, then the first: chains wrap around.
        let mut wrapping = Vec::new();
        let mut unit = 1u64;
        while wrapping.len() < 6 {
            let addr = anchor + (unit << 8);
            let home = map.home(AddressMap::key(addr, base).unwrap()) as u64;
            if home >= cells - 2 {
                wrapping.push(addr);
            }
            unit += 1;
        }
        map.remove_all([anchor]);
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

    /// Entries the table cannot hold (a class past the 255th, an index past 2^24, an address outside the
    /// window of keys or not a multiple of 256 bytes) spill, are found, replace and are replaced by table
    /// entries for the same address, and are removed.
    #[test]
    fn entries_the_cells_cannot_hold_spill() {
        let map = AddressMap::with_capacity(64);
        let first = 1u64 << 40;
        map.insert(first, 1, 1);
        let far = first + (1u64 << 41);
        let odd = first + 0x1080;
        let cases = [(first + 0x100, TABLE_CLASSES, 3), (first + 0x200, 2, TABLE_INDICES), (far, 0, 4), (odd, 0, 5)];
        for &(addr, class, index) in &cases {
            map.insert(addr, class, index);
        }
        assert_eq!(map.spilled.load(Ordering::Relaxed), cases.len());
        assert_eq!(map.len.load(Ordering::Relaxed), 1);
        for &(addr, class, index) in &cases {
            assert_eq!(map.get(addr), Some((class, index)), "{addr:#x}");
        }
        assert_eq!(map.get(first), Some((1, 1)));
        map.insert(first + 0x100, 7, 7);
        assert_eq!(map.get(first + 0x100), Some((7, 7)), "a table entry replaces a spilled one");
        map.insert(first, TABLE_CLASSES + 1, 9);
        assert_eq!(map.get(first), Some((TABLE_CLASSES + 1, 9)), "a spilled entry replaces a table entry");
        assert_eq!(map.len.load(Ordering::Relaxed), 1);
        map.remove_all(cases.iter().map(|c| c.0).chain([first]));
        assert!(cases.iter().all(|c| map.get(c.0).is_none()) && map.get(first).is_none());
        assert_eq!(map.spilled.load(Ordering::Relaxed), 0);
        assert_eq!(map.len.load(Ordering::Relaxed), 0);
    }

    /// The window of keys reaches half of it below the first address and half above (but the unit key 0
    /// would stand for).
    #[test]
    fn the_window_of_keys_is_centred_on_the_first_address() {
        let map = AddressMap::with_capacity(16);
        let first = 1u64 << 45;
        map.insert(first, 0, 0);
        let reach = BASE_MARGIN << 8;
        for (addr, in_table) in [
            (first - reach, true),
            (first - reach - 256, false),
            (first + reach - 512, true),
            (first + reach - 256, false),
        ] {
            map.insert(addr, 1, 1);
            assert_eq!(map.get(addr), Some((1, 1)));
            assert_eq!(map.spill.lock().contains_key(&addr), !in_table, "{addr:#x}");
        }
        assert_eq!(AddressMap::key(0x100, NO_BASE), None, "no key before the first insert");
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
