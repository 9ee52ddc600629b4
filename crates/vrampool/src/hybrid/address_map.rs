//! The hybrid core's map from a block's address to its class and index, read by every free without a lock
//! and without an atomic read-modify-write.
//!
//! Every free of a class block looks its address up, while the map changes only when a block is carved
//! (once per block) or the region takes the cached blocks back. So the map is a sequence lock around an
//! open-addressing table: a writer takes the mutex and makes the sequence number odd while it changes the
//! table; a reader reads the number, probes the table, and reads the number again, and probes again if a
//! change overlapped. Its cells are atomics, so a torn read is only ever retried.
//!
//! The table is sized for the blocks the classes start with. Where a class grows past them (more blocks
//! than the table holds at half load, or an index wider than its cells lay out), a writer makes a table
//! twice as large, or with wider cells, copies the entries into it and names it the current one, all with
//! the sequence number odd. A table replaced is kept until the map drops (the tables together hold at most
//! twice the cells of the last): a reader that read the name of the old one reads valid cells, and its
//! read is retried.
//!
//! A cell is one 4-byte word: the block's class and index, and above them as many bits of the address's
//! hash (a fingerprint) as the classes' number and largest capacity leave free. The address itself is not
//! in the cell: it is in the block's record ([`BlockAddrs`]), which the free reads next anyway, so a probe
//! compares fingerprints and confirms a match against the record (a fingerprint shared by two addresses
//! costs one more look at a record, never a wrong answer). The table is a quarter of the size of one of
//! 16-byte cells of the whole address and value, and half that of one of 8-byte cells of a 32-bit key:
//! where the pool's tables have gone cold between two calls (a program that does other work in between),
//! a free's probe fetches a line from memory on fewer frees (docs/BENCHMARKS.md).
//!
//! Written here rather than taken from a crate: a sharded map's read lock (dashmap's) is two atomic
//! read-modify-writes per free, this map's read none (docs/BENCHMARKS.md has the hybrid's pairs with
//! either).
//! Entries no table can hold spill into a mutex-guarded map that a lookup reads only when it is not empty:
//! more than half of [`MAX_SLOTS`] blocks (millions of them), a class past what the cells were laid out
//! for, or an index past what any layout holds.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

use parking_lot::Mutex;

/// The most cells of the lock-free table (4 bytes each: 16 MiB at most).
pub(crate) const MAX_SLOTS: usize = 1 << 22;

/// The most tables a map makes: each after the first doubles the cells or widens the index, which either
/// can do at most 23 times.
const MOST_TABLES: usize = 48;

/// An empty cell.
const EMPTY: u32 = 0;
/// Set in every occupied cell, so that none is [`EMPTY`].
const OCCUPIED: u32 = 1 << 31;

/// Where the map reads the address of the block an entry names: the block's record.
pub(crate) trait BlockAddrs {
    /// The address recorded for block `index` of class `class`; 0 where none is.
    ///
    /// Every entry in the map must have its address recorded from before it is inserted until after it
    /// is removed: a probe confirms a match with it, and a removal finds where the entries after it
    /// belong with it.
    fn block_addr(&self, class: u32, index: u32) -> u64;
}

/// How a cell packs an entry, below its [`OCCUPIED`] bit: the fingerprint, the class, the index. The
/// shifts and masks are kept rather than derived from the widths on every probe.
#[derive(Clone, Copy, Debug)]
struct CellLayout {
    index_bits: u32,
    index_mask: u32,
    class_mask: u32,
    /// The occupied bit and the fingerprint's bits.
    tag_mask: u32,
}

/// The bits that hold every number up to `n`.
fn bits_for(n: u64) -> u32 {
    64 - n.leading_zeros()
}

/// The `bits` low bits set.
fn low_mask(bits: u32) -> u32 {
    ((1u64 << bits) - 1) as u32
}

impl CellLayout {
    /// A layout for classes below `classes` and indices up to `max_index`; indices past 2^(31 - class
    /// bits) do not fit (their entries spill), and whatever bits are left hold the fingerprint.
    fn new(classes: u32, max_index: u32) -> Self {
        let class_bits = bits_for(u64::from(classes.saturating_sub(1)));
        let index_bits = bits_for(u64::from(max_index)).min(31 - class_bits);
        CellLayout {
            index_bits,
            index_mask: low_mask(index_bits),
            class_mask: low_mask(class_bits),
            tag_mask: !low_mask(class_bits + index_bits),
        }
    }

    /// The cell for `(class, index)` with `tag` (the occupied bit and a fingerprint in place), if the
    /// layout holds them.
    #[inline]
    fn cell(self, tag: u32, class: u32, index: u32) -> Option<u32> {
        let fits = class <= self.class_mask && index <= self.index_mask;
        fits.then(|| tag | (class << self.index_bits) | index)
    }

    /// `(class, index)` from an occupied cell.
    #[inline]
    fn entry(self, cell: u32) -> (u32, u32) {
        ((cell >> self.index_bits) & self.class_mask, cell & self.index_mask)
    }

    /// The bits of the class.
    #[cfg(test)]
    fn class_bits(self) -> u32 {
        self.class_mask.count_ones()
    }

    /// The bits of the fingerprint.
    #[cfg(test)]
    fn fingerprint_bits(self) -> u32 {
        self.tag_mask.count_ones() - 1
    }

    /// The fingerprint of an occupied cell.
    #[cfg(test)]
    fn fingerprint(self, cell: u32) -> u32 {
        (cell & !OCCUPIED) >> (self.class_bits() + self.index_bits)
    }
}

/// One table of cells: its layout, and the shifts that hash an address into it.
#[derive(Debug)]
struct Table {
    /// Each [`EMPTY`] or an entry packed by `layout`.
    cells: Box<[AtomicU32]>,
    layout: CellLayout,
    /// Shift that keeps the top bits of the hash: 64 - log2(cells).
    shift: u32,
    /// Shift that brings the hash's bits just below the home's to the cell's fingerprint bits.
    tag_shift: u32,
}

impl Table {
    /// An empty table of `cells` cells (a power of two, at least 2) laid out by `layout`.
    fn new(cells: usize, layout: CellLayout) -> Self {
        let shift = 64 - cells.trailing_zeros();
        Table { cells: (0..cells).map(|_| AtomicU32::new(EMPTY)).collect(), layout, shift, tag_shift: shift - 31 }
    }

    #[inline]
    fn mask(&self) -> usize {
        self.cells.len() - 1
    }

    /// The first cell to probe for `addr` (Fibonacci hashing: the hash's top bits), and the tag its cell
    /// has: the occupied bit and the fingerprint (the bits of the hash just below those of the home).
    #[inline]
    fn home(&self, addr: u64) -> (usize, u32) {
        let hash = addr.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((hash >> self.shift) as usize, ((hash >> self.tag_shift) as u32 & self.layout.tag_mask) | OCCUPIED)
    }

    /// The position and content of the cell holding `addr` (`Ok`), or the empty cell where its probe
    /// ends (`Err`). A probe visits each cell at most once: a reader overlapping a writer may see no empty
    /// cell, and then gets `Err` of the cell it stopped at (its read is retried); under the writers' lock
    /// the table is at most half full, so `Err` is always an empty cell there.
    #[inline]
    fn locate(&self, addr: u64, records: &impl BlockAddrs) -> Result<(usize, u32), usize> {
        let mask = self.mask();
        let (mut position, tag) = self.home(addr);
        for _ in 0..self.cells.len() {
            let cell = self.cells[position].load(Ordering::Relaxed);
            if cell == EMPTY {
                return Err(position);
            }
            if cell & self.layout.tag_mask == tag {
                let (class, index) = self.layout.entry(cell);
                if records.block_addr(class, index) == addr {
                    return Ok((position, cell));
                }
            }
            position = (position + 1) & mask;
        }
        Err(position)
    }

    /// Empties the cell at `hole`, shifting back the entries after it so that no probe chain breaks
    /// (linear probing's deletion, without tombstones); each entry's home is found from its record.
    fn remove_at(&self, mut hole: usize, records: &impl BlockAddrs) {
        let mask = self.mask();
        let mut position = hole;
        loop {
            position = (position + 1) & mask;
            let cell = self.cells[position].load(Ordering::Relaxed);
            if cell == EMPTY {
                break;
            }
            let (class, index) = self.layout.entry(cell);
            let addr = records.block_addr(class, index);
            debug_assert_ne!(addr, 0, "an entry of the table has its address recorded");
            // The entry at `position` may fill the hole if its home is not cyclically in (hole, position].
            let (home, _) = self.home(addr);
            let stays =
                if hole <= position { hole < home && home <= position } else { hole < home || home <= position };
            if !stays {
                self.cells[hole].store(cell, Ordering::Relaxed);
                hole = position;
            }
        }
        self.cells[hole].store(EMPTY, Ordering::Relaxed);
    }
}

/// Block address to `(class, index)`.
#[derive(Debug)]
pub(crate) struct AddressMap {
    /// The first table, held in place: where the map never grows, a lookup finds its cells with no more
    /// loads than in a map of one table.
    first: Table,
    /// The tables made after the first (`grown[g - 1]` is table `g`); the one `current` names holds the
    /// entries, the others are kept for readers that may still read them.
    grown: Box<[OnceLock<Table>]>,
    /// The table in use: 0 for the first.
    current: AtomicUsize,
    /// The classes the cells lay out.
    classes: u32,
    /// Even while no writer is changing the table.
    seq: AtomicU64,
    /// Entries in the current table; at most half its cells.
    len: AtomicUsize,
    /// Entries the table does not hold, by address, as `(class, index)` (guarded; also the writers' lock).
    spill: Mutex<HashMap<u64, (u32, u32)>>,
    spilled: AtomicUsize,
}

impl AddressMap {
    /// A map for `entries` blocks at once, of classes below `classes` and indices up to `max_index`, which
    /// grows where more, or larger indices, come.
    pub(crate) fn with_capacity(entries: u64, classes: u32, max_index: u32) -> Self {
        let cells = (entries.saturating_mul(2).max(16) as usize).next_power_of_two().min(MAX_SLOTS);
        AddressMap {
            first: Table::new(cells, CellLayout::new(classes, max_index)),
            grown: (1..MOST_TABLES).map(|_| OnceLock::new()).collect(),
            current: AtomicUsize::new(0),
            classes,
            seq: AtomicU64::new(0),
            len: AtomicUsize::new(0),
            spill: Mutex::new(HashMap::new()),
            spilled: AtomicUsize::new(0),
        }
    }

    /// The table in use.
    #[inline]
    fn table(&self) -> &Table {
        match self.current.load(Ordering::Acquire) {
            0 => &self.first,
            now => self.grown_table(now),
        }
    }

    /// Table `now`, one made after the first.
    #[cold]
    fn grown_table(&self, now: usize) -> &Table {
        self.grown[now - 1].get().expect("a table is made before it is named")
    }

    /// Entries in the table (not those spilled).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Changes made to the table so far (each a writer's turn with the sequence number odd).
    #[cfg(test)]
    pub(crate) fn writes(&self) -> u64 {
        self.seq.load(Ordering::Relaxed) / 2
    }

    /// The class and index recorded for `addr`.
    #[inline]
    pub(crate) fn get(&self, addr: u64, records: &impl BlockAddrs) -> Option<(u32, u32)> {
        if addr == 0 {
            return None;
        }
        let found = loop {
            let before = self.seq.load(Ordering::Acquire);
            if before & 1 == 0 {
                let table = self.table();
                let found = table.locate(addr, records).ok().map(|(_, cell)| table.layout.entry(cell));
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == before {
                    break found;
                }
            }
            std::hint::spin_loop();
        };
        if found.is_none() && self.spilled.load(Ordering::Acquire) > 0 {
            return self.spill.lock().get(&addr).copied();
        }
        found
    }

    /// Replaces the current table, where another can be made, by one with twice the cells (up to
    /// [`MAX_SLOTS`]) if `fuller`, laid out for indices up to `max_index` at least, holding the same
    /// entries; whether it did. Called by a writer, with the sequence number odd.
    fn regrow(&self, fuller: bool, max_index: u32, records: &impl BlockAddrs) -> bool {
        let now = self.current.load(Ordering::Relaxed);
        let Some(slot) = self.grown.get(now) else { return false };
        let old = self.table();
        let cells = if fuller { (old.cells.len() * 2).min(MAX_SLOTS) } else { old.cells.len() };
        // An index that needs more bits gets room for twice as many again, so that a growing class widens
        // the cells once per doubling of its blocks at most.
        let widest = low_mask(old.layout.index_bits);
        let layout =
            CellLayout::new(self.classes, if max_index > widest { max_index.saturating_mul(2) } else { widest });
        if cells == old.cells.len() && layout.index_bits == old.layout.index_bits {
            return false;
        }
        let table = Table::new(cells, layout);
        let mask = table.mask();
        for cell in old.cells.iter().map(|c| c.load(Ordering::Relaxed)).filter(|&c| c != EMPTY) {
            let (class, index) = old.layout.entry(cell);
            let (mut position, tag) = table.home(records.block_addr(class, index));
            let moved = table.layout.cell(tag, class, index).expect("a layout at least as wide holds every entry");
            // The entries are of distinct addresses: each goes to the first empty cell from its home.
            while table.cells[position].load(Ordering::Relaxed) != EMPTY {
                position = (position + 1) & mask;
            }
            table.cells[position].store(moved, Ordering::Relaxed);
        }
        let _ = slot.set(table);
        self.current.store(now + 1, Ordering::Release);
        true
    }

    /// Records `addr` as block `index` of class `class` (replacing what was recorded for it), whose
    /// record says `addr` already.
    pub(crate) fn insert(&self, addr: u64, class: u32, index: u32, records: &impl BlockAddrs) {
        assert_ne!(addr, 0, "no block is at address 0");
        let mut spill = self.spill.lock();
        self.write(|| {
            let table = self.table();
            let fits = class <= table.layout.class_mask && index <= table.layout.index_mask;
            let full = self.len.load(Ordering::Relaxed) * 2 >= table.cells.len();
            let table = if (!fits && class < self.classes) || full {
                let _ = self.regrow(full && table.cells.len() < MAX_SLOTS, index, records);
                self.table()
            } else {
                table
            };
            let (_, tag) = table.home(addr);
            let cell = table.layout.cell(tag, class, index);
            let (empty, cell) = match (table.locate(addr, records), cell) {
                (Ok((position, _)), Some(cell)) => {
                    table.cells[position].store(cell, Ordering::Relaxed);
                    return;
                }
                // An earlier entry for the address sits in the table: the spilled one replaces it.
                (Ok((position, _)), None) => {
                    table.remove_at(position, records);
                    self.len.fetch_sub(1, Ordering::Relaxed);
                    return self.spill_insert(&mut spill, addr, class, index);
                }
                (Err(_), None) => return self.spill_insert(&mut spill, addr, class, index),
                (Err(empty), Some(cell)) => (empty, cell),
            };
            if self.len.load(Ordering::Relaxed) * 2 >= table.cells.len() {
                return self.spill_insert(&mut spill, addr, class, index);
            }
            table.cells[empty].store(cell, Ordering::Relaxed);
            self.len.fetch_add(1, Ordering::Relaxed);
            // An earlier entry for the address may have spilled while the table was full: the table's
            // entry replaces it.
            self.spill_remove(&mut spill, addr);
        });
    }

    /// Records `addr` as block `index` of class `class` in the spill map (guarded by `spill`).
    fn spill_insert(&self, spill: &mut HashMap<u64, (u32, u32)>, addr: u64, class: u32, index: u32) {
        spill.insert(addr, (class, index));
        self.spilled.store(spill.len(), Ordering::Release);
    }

    /// Forgets `addr` in the spill map (guarded by `spill`), if it is there.
    fn spill_remove(&self, spill: &mut HashMap<u64, (u32, u32)>, addr: u64) {
        if spill.remove(&addr).is_some() {
            self.spilled.store(spill.len(), Ordering::Release);
        }
    }

    /// Forgets every address of `addrs`, whose records still say them. With no address, the table is left
    /// alone: no writer's turn, which would make every lookup overlapping it read again (a drain that found
    /// nothing cached, as happens over and over when a pool at its cap keeps asking).
    pub(crate) fn remove_all(&self, addrs: impl IntoIterator<Item = u64>, records: &impl BlockAddrs) {
        let mut addrs = addrs.into_iter().peekable();
        if addrs.peek().is_none() {
            return;
        }
        let mut spill = self.spill.lock();
        self.write(|| {
            let table = self.table();
            for addr in addrs {
                if let Ok((position, _)) = table.locate(addr, records) {
                    table.remove_at(position, records);
                    self.len.fetch_sub(1, Ordering::Relaxed);
                }
                self.spill_remove(&mut spill, addr);
            }
        });
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

    /// The tests' block records: an address per `(class, index)`, as the classes keep them.
    #[derive(Default)]
    struct Records(Mutex<HashMap<(u32, u32), u64>>);

    impl BlockAddrs for Records {
        fn block_addr(&self, class: u32, index: u32) -> u64 {
            self.0.lock().get(&(class, index)).copied().unwrap_or(0)
        }
    }

    impl Records {
        /// Records `addr` for the block, then maps it, as a carve does.
        fn put(&self, map: &AddressMap, addr: u64, class: u32, index: u32) {
            self.0.lock().insert((class, index), addr);
            map.insert(addr, class, index, self);
        }

        /// Removes the blocks at `addrs` from the map, then forgets their records, as a drain does.
        fn take(&self, map: &AddressMap, addrs: &[u64]) {
            map.remove_all(addrs.iter().copied(), self);
            self.0.lock().retain(|_, addr| !addrs.contains(addr));
        }
    }

    #[test]
    fn cells_are_laid_out_for_the_classes_and_the_largest_index() {
        let cases =
            [((37, 300), (9, 6, 16)), ((1, 0), (0, 0, 31)), ((255, u32::MAX), (23, 8, 0)), ((2, 1), (1, 1, 29))];
        for ((classes, max_index), (index_bits, class_bits, fingerprint_bits)) in cases {
            let layout = CellLayout::new(classes, max_index);
            assert_eq!(
                (layout.index_bits, layout.class_bits(), layout.fingerprint_bits()),
                (index_bits, class_bits, fingerprint_bits),
                "{classes} classes, indices up to {max_index}"
            );
            let (class, index) = (classes - 1, max_index.min(low_mask(index_bits)));
            let fingerprint = low_mask(fingerprint_bits);
            let tag = OCCUPIED | (fingerprint << (class_bits + index_bits));
            let cell = layout.cell(tag, class, index).unwrap();
            assert_ne!(cell, EMPTY);
            assert_eq!((layout.entry(cell), layout.fingerprint(cell)), ((class, index), fingerprint));
            assert_eq!(layout.cell(0, 0, low_mask(index_bits) + 1), None, "an index past the layout's");
        }
    }

    #[test]
    fn inserts_are_found_and_removals_keep_the_rest() {
        let (map, records) = (AddressMap::with_capacity(64, 7, 99), Records::default());
        let addrs: Vec<u64> = (1..=64u64).map(|i| i * 0x1_0000 + 0x100).collect();
        for (i, &addr) in addrs.iter().enumerate() {
            records.put(&map, addr, i as u32 % 7, i as u32);
        }
        for (i, &addr) in addrs.iter().enumerate() {
            assert_eq!(map.get(addr, &records), Some((i as u32 % 7, i as u32)));
        }
        assert_eq!(map.get(0x42, &records), None);
        assert_eq!(map.get(0, &records), None);
        let removed: Vec<u64> = addrs.iter().copied().step_by(2).collect();
        records.take(&map, &removed);
        for (i, &addr) in addrs.iter().enumerate() {
            let expected = (i % 2 == 1).then_some((i as u32 % 7, i as u32));
            assert_eq!(map.get(addr, &records), expected, "entry {i}");
        }
        records.put(&map, addrs[1], 3, 99);
        assert_eq!(map.get(addrs[1], &records), Some((3, 99)), "insert replaces");
        assert_eq!(map.len.load(Ordering::Relaxed), 32);
    }

    /// Addresses that all hash to neighbouring cells: removal in the middle of a chain keeps every other
    /// entry reachable, across the end of the table too.
    #[test]
    fn removal_inside_a_collision_chain_keeps_the_chain() {
        let (map, records) = (AddressMap::with_capacity(8, 1, 8), Records::default());
        let cells = map.table().cells.len();
        // Addresses whose home cell is the last one, then the first: chains wrap around.
        let wrapping: Vec<u64> =
            (1u64..).map(|unit| unit << 8).filter(|&a| map.table().home(a).0 >= cells - 2).take(6).collect();
        for (i, &addr) in wrapping.iter().enumerate() {
            records.put(&map, addr, 0, i as u32);
        }
        for victim in 0..wrapping.len() {
            records.take(&map, &[wrapping[victim]]);
            for (i, &addr) in wrapping.iter().enumerate() {
                assert_eq!(map.get(addr, &records), (i > victim).then_some((0, i as u32)), "after removing {victim}");
            }
        }
    }

    /// With no bit left for a fingerprint (255 classes, indices of 23 bits), every occupied cell matches
    /// every probe: the records tell the entries apart, and lookups, misses and removals stay right.
    #[test]
    fn entries_without_a_fingerprint_are_told_apart_by_their_records() {
        let (map, records) = (AddressMap::with_capacity(64, 255, (1 << 23) - 1), Records::default());
        assert_eq!(map.table().layout.fingerprint_bits(), 0);
        let addrs: Vec<u64> = (1..=64u64).map(|i| i << 12).collect();
        for (i, &addr) in addrs.iter().enumerate() {
            records.put(&map, addr, 254 - i as u32, (1 << 23) - 1 - i as u32);
        }
        assert_eq!(map.spilled.load(Ordering::Relaxed), 0);
        let expect = |i: usize| Some((254 - i as u32, (1 << 23) - 1 - i as u32));
        for (i, &addr) in addrs.iter().enumerate() {
            assert_eq!(map.get(addr, &records), expect(i));
            assert_eq!(map.get(addr + 256, &records), None, "a miss");
        }
        let removed: Vec<u64> = addrs.iter().copied().skip(1).step_by(3).collect();
        records.take(&map, &removed);
        for (i, &addr) in addrs.iter().enumerate() {
            assert_eq!(map.get(addr, &records), expect(i).filter(|_| i % 3 != 1), "entry {i}");
        }
    }

    /// A table at half load is replaced by one twice as large that keeps every entry: nothing spills.
    #[test]
    fn a_table_at_half_load_doubles_and_keeps_its_entries() {
        let (map, records) = (AddressMap::with_capacity(4, 2, 1 << 10), Records::default());
        let cells = map.table().cells.len();
        let addrs: Vec<u64> = (1..=4 * cells as u64).map(|i| i << 12).collect();
        for (i, &addr) in addrs.iter().enumerate() {
            records.put(&map, addr, 1, i as u32);
            assert!(map.len() * 2 <= map.table().cells.len(), "at most half full after {i}");
        }
        assert_eq!(map.spilled.load(Ordering::Relaxed), 0);
        assert_eq!(map.table().cells.len(), 8 * cells, "doubled three times");
        assert_eq!(map.current.load(Ordering::Relaxed), 3);
        for (i, &addr) in addrs.iter().enumerate() {
            assert_eq!(map.get(addr, &records), Some((1, i as u32)));
        }
        records.take(&map, &addrs);
        assert!(addrs.iter().all(|&a| map.get(a, &records).is_none()));
        assert_eq!(map.len(), 0);
    }

    /// An index wider than the cells lay out gets a table with wider cells (room for twice that index);
    /// a class past the layout's, or an index past every layout's, spills, and is found, replaces and is
    /// replaced by table entries for the same address, and is removed. Addresses need no alignment.
    #[test]
    fn wider_indices_widen_the_cells_and_what_no_cell_holds_spills() {
        let (map, records) = (AddressMap::with_capacity(64, 4, 100), Records::default());
        assert_eq!(map.table().layout.index_bits, 7);
        let first = 1u64 << 40;
        records.put(&map, first, 1, 1);
        let cases = [(first + 0x100, 4, 3), (first + 0x200, 2, 128), ((1 << 62) + 0x1080, 3, 127), (0x17, 0, 5)];
        for &(addr, class, index) in &cases {
            records.put(&map, addr, class, index);
        }
        assert_eq!(map.table().layout.index_bits, 9, "room for index 256");
        assert_eq!(map.spilled.load(Ordering::Relaxed), 1, "class 4 of 4");
        assert_eq!(map.len(), 4);
        for &(addr, class, index) in cases.iter().chain([&(first, 1, 1)]) {
            assert_eq!(map.get(addr, &records), Some((class, index)), "{addr:#x}");
        }
        records.put(&map, first + 0x100, 3, 7);
        assert_eq!(map.get(first + 0x100, &records), Some((3, 7)), "a table entry replaces a spilled one");
        records.put(&map, first, 3, 1000);
        assert_eq!(map.get(first, &records), Some((3, 1000)), "widened again");
        records.put(&map, first, 4, 0);
        assert_eq!(map.get(first, &records), Some((4, 0)), "a spilled entry replaces a table entry");
        assert_eq!((map.len(), map.spilled.load(Ordering::Relaxed)), (4, 1));
        let all: Vec<u64> = cases.iter().map(|c| c.0).chain([first]).collect();
        records.take(&map, &all);
        assert!(all.iter().all(|&a| map.get(a, &records).is_none()));
        assert_eq!((map.len(), map.spilled.load(Ordering::Relaxed)), (0, 0));
        // 255 classes leave 23 bits for an index: one past them spills.
        let (map, records) = (AddressMap::with_capacity(4, 255, 3), Records::default());
        records.put(&map, 0x1000, 7, 1 << 23);
        records.put(&map, 0x2000, 7, (1 << 23) - 1);
        assert_eq!((map.len(), map.spilled.load(Ordering::Relaxed)), (1, 1));
        assert_eq!(map.get(0x1000, &records), Some((7, 1 << 23)));
        assert_eq!(map.get(0x2000, &records), Some((7, (1 << 23) - 1)));
    }

    /// An address that spilled and is recorded again where the table can hold it lives in the table alone:
    /// removing it leaves no stale spilled entry behind.
    #[test]
    fn a_spilled_address_recorded_again_leaves_no_stale_entry() {
        let (map, records) = (AddressMap::with_capacity(4, 4, 64), Records::default());
        let late = 0x9000;
        records.put(&map, late, 4, 1);
        assert_eq!(map.spilled.load(Ordering::Relaxed), 1);
        records.put(&map, late, 2, 2);
        assert_eq!(map.spilled.load(Ordering::Relaxed), 0, "the table's entry replaced the spilled one");
        assert_eq!(map.get(late, &records), Some((2, 2)));
        records.take(&map, &[late]);
        assert_eq!(map.get(late, &records), None);
    }

    /// Maps `stable` entries (class 2, index by position) in a map of `entries` blocks and indices up to
    /// `max_index`, runs three readers that look them up over and over while `write` changes the map around
    /// them, and checks that every lookup found its entry; returns the map.
    fn read_while(
        entries: u64,
        max_index: u32,
        stable: usize,
        write: impl FnOnce(&AddressMap, &Records),
    ) -> Arc<AddressMap> {
        let map = Arc::new(AddressMap::with_capacity(entries, 6, max_index));
        let records = Arc::new(Records::default());
        let stable: Vec<u64> = (1..=stable as u64).map(|i| i << 10).collect();
        for (i, &addr) in stable.iter().enumerate() {
            records.put(&map, addr, 2, i as u32);
        }
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (map, records, stable, done) = (map.clone(), records.clone(), stable.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut reads = 0u64;
                    while !done.load(Ordering::Relaxed) {
                        for (i, &addr) in stable.iter().enumerate() {
                            assert_eq!(map.get(addr, &*records), Some((2, i as u32)));
                            reads += 1;
                        }
                    }
                    reads
                })
            })
            .collect();
        write(&map, &records);
        done.store(true, Ordering::Relaxed);
        for reader in readers {
            assert!(reader.join().unwrap() > 0);
        }
        map
    }

    /// Readers looking up entries that stay while a writer grows the map under them (thousands of entries,
    /// indices ever wider) always find them: a read overlapping a new table is retried, never wrong.
    #[test]
    fn readers_never_miss_a_stable_entry_while_the_map_grows() {
        let map = read_while(8, 7, 8, |map, records| {
            for round in 0..4u64 {
                let grown: Vec<u64> = (0..5000u64).map(|i| ((round * 5000 + i) << 10) | 0x100).collect();
                for (i, &addr) in grown.iter().enumerate() {
                    records.put(map, addr, 5, 8 + i as u32);
                }
                records.take(map, &grown);
            }
        });
        assert!(map.current.load(Ordering::Relaxed) >= 10, "the map grew");
        assert_eq!(map.spilled.load(Ordering::Relaxed), 0);
    }

    /// Readers looking up entries that stay while a writer inserts and removes others around them always
    /// find them, with their values: a read overlapping a change is retried, never wrong.
    #[test]
    fn readers_never_miss_a_stable_entry_while_others_change() {
        let map = read_while(256, 127, 64, |map, records| {
            for round in 0..2000u64 {
                let churn: Vec<u64> = (0..100u64).map(|i| ((round * 100 + i) << 10) | 0x100).collect();
                for (i, &addr) in churn.iter().enumerate() {
                    records.put(map, addr, 5, i as u32);
                }
                records.take(map, &churn);
            }
        });
        assert_eq!(map.current.load(Ordering::Relaxed), 0, "the map never outgrew its first table");
    }
}
