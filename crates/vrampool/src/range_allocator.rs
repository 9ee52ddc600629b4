//! An O(1) range allocator over addresses: two-level segregated fit (TLSF), with splitting and
//! coalescing of address neighbours inside a region, never across regions.
//!
//! Free blocks sit in bins: the first level is the power of two of the size, the second splits each
//! power of two into [`SL_COUNT`] equal steps. Two bitmaps say which bins hold blocks, so finding a bin
//! with a block that fits is a couple of bit scans: O(1). Before taking a block from a larger bin, up to
//! [`EXACT_BIN_SCAN`] blocks of the request's own bin are tried, which keeps large blocks whole (better
//! fit, less fragmentation) at a bounded cost. Freeing merges the block with free neighbours: O(1).
//!
//! Each free block carries a tag (the streams that freed it, for the pools) that merges when blocks
//! merge and is handed back when a block is carved from it.
//!
//! Written here rather than taken from a crate: offset-allocator keeps 32-bit offsets and no per-block
//! tag, and both are needed (device addresses are 64-bit; stream tags must follow coalescing).

use crate::stream_order::FreeTag;
use crate::units::{MIN_BLOCK, align_up, log_linear_bin};

/// What a free block carries and how two merge.
pub(crate) trait BlockTag: Copy + Default + std::fmt::Debug {
    /// The tag of the block formed by merging two free neighbours.
    fn merge(self, other: Self) -> Self;
}

impl BlockTag for () {
    fn merge(self, _other: Self) -> Self {}
}

impl BlockTag for FreeTag {
    fn merge(self, other: Self) -> Self {
        FreeTag::merge(self, other)
    }
}

/// Second-level bins per power of two (a block is at most 1/16 larger than the bin's smallest size).
pub(crate) const SL_COUNT: usize = 1 << SL_BITS;
const SL_BITS: u32 = 4;
/// Blocks of the request's own bin examined before a larger bin is used.
pub(crate) const EXACT_BIN_SCAN: usize = 8;
const UNIT_SHIFT: u32 = MIN_BLOCK.trailing_zeros();
const GROUPS: usize = (64 - UNIT_SHIFT - SL_BITS + 1) as usize;
const BINS: usize = GROUPS * SL_COUNT;
const NIL: u32 = u32::MAX;
/// The most places [`RangeAllocator::places`] makes room for before it looks.
const PLACES_RESERVED: usize = 32;

/// A block of the allocator, with its address neighbours in the same region (whether it is free or used is
/// in [`RangeAllocator`]'s bitmap).
///
/// One cache line each: an allocation and a free touch several nodes at random (the block, its neighbours,
/// their neighbours on the bins' lists), and a node of 56 bytes would straddle two lines at most positions
/// (docs/BENCHMARKS.md has the cache misses this saves).
#[derive(Clone, Debug)]
#[repr(align(64))]
struct Node<T> {
    offset: u64,
    size: u64,
    bin_prev: u32,
    bin_next: u32,
    prev: u32,
    next: u32,
    tag: T,
}

/// A handle to a used block, valid until it is freed.
pub(crate) type NodeId = u32;

/// A block carved for a request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Carved<T> {
    /// The handle to give back to [`RangeAllocator::free`].
    pub(crate) node: NodeId,
    /// The block's first address (aligned as asked).
    pub(crate) offset: u64,
    /// The block's size in bytes (the request rounded up to 256 bytes).
    pub(crate) size: u64,
    /// The tag of the free memory it was carved from.
    pub(crate) tag: T,
}

/// A free block a request fits in ([`RangeAllocator::places`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FreePlace {
    /// The block's node.
    index: u32,
    /// The block's first address.
    pub(crate) offset: u64,
    /// The block's size in bytes.
    pub(crate) size: u64,
}

/// A TLSF allocator over 64-bit addresses in units of [`MIN_BLOCK`] bytes.
#[derive(Debug)]
pub(crate) struct RangeAllocator<T: BlockTag> {
    nodes: Vec<Node<T>>,
    /// A bit per node, set while its block is used. A free asks whether its two neighbours are free here,
    /// in a few hundred bytes that stay cached, rather than in the neighbours' own nodes, which are cache
    /// misses where the tables have gone cold: a used neighbour is not touched at all.
    used: Vec<u64>,
    recycled: Vec<u32>,
    group_bitmap: u64,
    bin_bitmaps: [u16; GROUPS],
    heads: Box<[u32]>,
    free_bytes: u64,
    total_bytes: u64,
}

impl<T: BlockTag> Default for RangeAllocator<T> {
    fn default() -> Self {
        RangeAllocator {
            nodes: Vec::new(),
            used: Vec::new(),
            recycled: Vec::new(),
            group_bitmap: 0,
            bin_bitmaps: [0; GROUPS],
            heads: vec![NIL; BINS].into_boxed_slice(),
            free_bytes: 0,
            total_bytes: 0,
        }
    }
}

/// The bin holding blocks of `units` units (rounding down).
#[inline]
fn bin_down(units: u64) -> usize {
    log_linear_bin::<SL_BITS>(units)
}

/// The first bin whose every block holds at least `units` units (rounding up).
#[inline]
fn bin_up(units: u64) -> usize {
    if units < SL_COUNT as u64 {
        return units as usize;
    }
    let fl = 63 - units.leading_zeros();
    let step = 1u64 << (fl - SL_BITS);
    match units.checked_add(step - 1) {
        Some(rounded) => bin_down(rounded),
        None => BINS,
    }
}

impl<T: BlockTag> RangeAllocator<T> {
    /// Bytes in free blocks.
    #[cfg(test)]
    pub(crate) fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// Bytes in all regions.
    #[cfg(test)]
    pub(crate) fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Adds a node for a free block (a recycled one where there is one).
    fn new_node(&mut self, node: Node<T>) -> u32 {
        match self.recycled.pop() {
            Some(index) => {
                debug_assert!(!self.is_used(index), "a recycled node was a free block's");
                self.nodes[index as usize] = node;
                index
            }
            None => {
                self.nodes.push(node);
                let index = self.nodes.len() - 1;
                if index / 64 == self.used.len() {
                    self.used.push(0);
                }
                index as u32
            }
        }
    }

    /// Whether node `index`'s block is used.
    #[inline]
    fn is_used(&self, index: u32) -> bool {
        self.used[index as usize / 64] & (1 << (index % 64)) != 0
    }

    #[inline]
    fn set_used(&mut self, index: u32, used: bool) {
        let (word, bit) = (index as usize / 64, 1u64 << (index % 64));
        if used {
            self.used[word] |= bit;
        } else {
            self.used[word] &= !bit;
        }
    }

    fn bin_insert(&mut self, index: u32) {
        let bin = bin_down(self.nodes[index as usize].size >> UNIT_SHIFT);
        let head = self.heads[bin];
        {
            let node = &mut self.nodes[index as usize];
            node.bin_prev = NIL;
            node.bin_next = head;
        }
        if head != NIL {
            self.nodes[head as usize].bin_prev = index;
        }
        self.heads[bin] = index;
        self.bin_bitmaps[bin / SL_COUNT] |= 1 << (bin % SL_COUNT);
        self.group_bitmap |= 1 << (bin / SL_COUNT);
        self.free_bytes += self.nodes[index as usize].size;
    }

    fn bin_remove(&mut self, index: u32) {
        let (size, prev, next) = {
            let node = &self.nodes[index as usize];
            (node.size, node.bin_prev, node.bin_next)
        };
        let bin = bin_down(size >> UNIT_SHIFT);
        if prev != NIL {
            self.nodes[prev as usize].bin_next = next;
        } else {
            self.heads[bin] = next;
            if next == NIL {
                self.bin_bitmaps[bin / SL_COUNT] &= !(1 << (bin % SL_COUNT));
                if self.bin_bitmaps[bin / SL_COUNT] == 0 {
                    self.group_bitmap &= !(1 << (bin / SL_COUNT));
                }
            }
        }
        if next != NIL {
            self.nodes[next as usize].bin_prev = prev;
        }
        self.free_bytes -= size;
    }

    /// The first non-empty bin at or above `bin`.
    #[inline]
    fn first_bin_from(&self, bin: usize) -> Option<usize> {
        if bin >= BINS {
            return None;
        }
        let group = bin / SL_COUNT;
        let in_group = u32::from(self.bin_bitmaps[group]) & (u32::MAX << (bin % SL_COUNT));
        if in_group != 0 {
            return Some(group * SL_COUNT + in_group.trailing_zeros() as usize);
        }
        let later = if group + 1 >= 64 { 0 } else { self.group_bitmap & (u64::MAX << (group + 1)) };
        if later == 0 {
            return None;
        }
        let group = later.trailing_zeros() as usize;
        Some(group * SL_COUNT + self.bin_bitmaps[group].trailing_zeros() as usize)
    }

    /// Adds the free region `[offset, offset + size)`; it never merges with another region.
    pub(crate) fn add_region(&mut self, offset: u64, size: u64) {
        debug_assert!(offset % MIN_BLOCK == 0 && size % MIN_BLOCK == 0 && size > 0);
        let index =
            self.new_node(Node { offset, size, bin_prev: NIL, bin_next: NIL, prev: NIL, next: NIL, tag: T::default() });
        self.bin_insert(index);
        self.total_bytes += size;
    }

    /// Whether the free block `index` can hold `size` bytes at `align`.
    #[inline]
    fn fits(&self, index: u32, size: u64, align: u64) -> bool {
        let node = &self.nodes[index as usize];
        if align == MIN_BLOCK {
            // Every block starts at a multiple of the unit: no padding.
            return size <= node.size;
        }
        align_up(node.offset, align).is_some_and(|start| start - node.offset + size <= node.size)
    }

    /// Carves a block of `size` bytes (a multiple of 256) aligned to `align` (a power of two), or `None`
    /// if no free block can hold it.
    pub(crate) fn allocate(&mut self, size: u64, align: u64) -> Option<Carved<T>> {
        debug_assert!(size % MIN_BLOCK == 0 && size > 0 && align.is_power_of_two());
        let align = align.max(MIN_BLOCK);
        let need = size.checked_add(align - MIN_BLOCK)?;
        let units = need >> UNIT_SHIFT;
        let exact = bin_down(units);
        let mut chosen = NIL;
        if exact < BINS && self.heads[exact] != NIL {
            // The request's own bin may hold blocks that fit; take the smallest of the first few.
            let mut index = self.heads[exact];
            let mut best_size = u64::MAX;
            for _ in 0..EXACT_BIN_SCAN {
                if index == NIL {
                    break;
                }
                let node_size = self.nodes[index as usize].size;
                if node_size < best_size && self.fits(index, size, align) {
                    chosen = index;
                    best_size = node_size;
                    if node_size == need {
                        break;
                    }
                }
                index = self.nodes[index as usize].bin_next;
            }
        }
        if chosen == NIL {
            let bin = self.first_bin_from(bin_up(units))?;
            chosen = self.heads[bin];
        }
        Some(self.carve(chosen, size, align))
    }

    /// Up to `max` free blocks that can hold `size` bytes (a multiple of 256) at `align`, from the
    /// request's own bin up (the smallest bins first): the places a request may be carved from when
    /// something other than size picks among them ([`RangeAllocator::carve_at`]).
    pub(crate) fn places(&self, size: u64, align: u64, max: usize) -> Vec<FreePlace> {
        let align = align.max(MIN_BLOCK);
        let Some(need) = size.checked_add(align - MIN_BLOCK) else { return Vec::new() };
        // Room for the places asked for at once: growing the list as it fills would cost more than the search.
        let mut places = Vec::with_capacity(max.min(PLACES_RESERVED));
        let mut from = bin_down(need >> UNIT_SHIFT);
        while places.len() < max
            && let Some(bin) = self.first_bin_from(from)
        {
            let mut index = self.heads[bin];
            while index != NIL && places.len() < max {
                let node = &self.nodes[index as usize];
                if self.fits(index, size, align) {
                    places.push(FreePlace { index, offset: node.offset, size: node.size });
                }
                index = node.bin_next;
            }
            from = bin + 1;
        }
        places
    }

    /// Carves a block of `size` bytes at `start` out of the free block of `place`, as
    /// [`RangeAllocator::places`] gave it with nothing carved or freed since; `start` must leave the block
    /// inside it. What is left on either side stays free.
    pub(crate) fn carve_at(&mut self, place: FreePlace, start: u64, size: u64) -> Carved<T> {
        debug_assert!(start >= place.offset && start + size <= place.offset + place.size);
        debug_assert!(!self.is_used(place.index) && self.nodes[place.index as usize].offset == place.offset);
        self.carve_from(place.index, start, size)
    }

    /// Splits `size` bytes at `align` out of the free block `index`; what is left stays free.
    fn carve(&mut self, index: u32, size: u64, align: u64) -> Carved<T> {
        let start = align_up(self.nodes[index as usize].offset, align).expect("fit checked");
        self.carve_from(index, start, size)
    }

    /// Splits `[start, start + size)` out of the free block `index`; what is left stays free.
    fn carve_from(&mut self, index: u32, start: u64, size: u64) -> Carved<T> {
        self.bin_remove(index);
        let (offset, block_size, tag, next) = {
            let node = &self.nodes[index as usize];
            (node.offset, node.size, node.tag, node.next)
        };
        if start > offset {
            let pad = self.new_node(Node {
                offset,
                size: start - offset,
                bin_prev: NIL,
                bin_next: NIL,
                prev: self.nodes[index as usize].prev,
                next: index,
                tag,
            });
            if let Some(prev) = self.link(self.nodes[pad as usize].prev) {
                self.nodes[prev].next = pad;
            }
            self.nodes[index as usize].prev = pad;
            self.bin_insert(pad);
        }
        let end = offset + block_size;
        if start + size < end {
            let tail = self.new_node(Node {
                offset: start + size,
                size: end - start - size,
                bin_prev: NIL,
                bin_next: NIL,
                prev: index,
                next,
                tag,
            });
            if let Some(next) = self.link(next) {
                self.nodes[next].prev = tail;
            }
            self.nodes[index as usize].next = tail;
            self.bin_insert(tail);
        }
        let node = &mut self.nodes[index as usize];
        node.offset = start;
        node.size = size;
        self.set_used(index, true);
        Carved { node: index, offset: start, size, tag }
    }

    #[inline]
    fn link(&self, index: u32) -> Option<usize> {
        (index != NIL).then_some(index as usize)
    }

    /// The address and size of a used block.
    pub(crate) fn span(&self, node: NodeId) -> (u64, u64) {
        let node = &self.nodes[node as usize];
        (node.offset, node.size)
    }

    /// Frees a used block, tagging its memory with `tag` and merging it with free neighbours.
    pub(crate) fn free(&mut self, node: NodeId, tag: T) {
        let index = node;
        debug_assert!(self.is_used(index), "free of a free block");
        self.set_used(index, false);
        let (prev, next) = {
            let node = &mut self.nodes[index as usize];
            node.tag = tag;
            (node.prev, node.next)
        };
        // Both neighbours are asked about before either is merged (merging the one before leaves the one
        // after as it was).
        let prev_free = prev != NIL && !self.is_used(prev);
        let next_free = next != NIL && !self.is_used(next);
        if prev_free {
            self.bin_remove(prev);
            let absorbed = self.nodes[prev as usize].clone();
            let node = &mut self.nodes[index as usize];
            node.offset = absorbed.offset;
            node.size += absorbed.size;
            node.tag = node.tag.merge(absorbed.tag);
            node.prev = absorbed.prev;
            if let Some(before) = self.link(absorbed.prev) {
                self.nodes[before].next = index;
            }
            self.recycle(prev);
        }
        if next_free {
            self.bin_remove(next);
            let absorbed = self.nodes[next as usize].clone();
            let node = &mut self.nodes[index as usize];
            node.size += absorbed.size;
            node.tag = node.tag.merge(absorbed.tag);
            node.next = absorbed.next;
            if let Some(after) = self.link(absorbed.next) {
                self.nodes[after].prev = index;
            }
            self.recycle(next);
        }
        self.bin_insert(index);
    }

    /// Regions that are wholly free: `(offset, size)` of each.
    pub(crate) fn free_regions(&self) -> Vec<(u64, u64)> {
        self.live_nodes()
            .filter(|&(i, n)| !self.is_used(i) && n.prev == NIL && n.next == NIL)
            .map(|(_, n)| (n.offset, n.size))
            .collect()
    }

    /// Removes the wholly free region that starts at `offset`; returns whether there was one.
    pub(crate) fn remove_free_region(&mut self, offset: u64) -> bool {
        let found =
            self.live_nodes().find(|&(i, n)| !self.is_used(i) && n.prev == NIL && n.next == NIL && n.offset == offset);
        let Some((index, _)) = found else { return false };
        let size = self.nodes[index as usize].size;
        self.bin_remove(index);
        self.total_bytes -= size;
        self.recycle(index);
        true
    }

    /// Puts a node no block uses back for reuse; its size 0 makes iteration skip it.
    fn recycle(&mut self, index: u32) {
        self.nodes[index as usize].size = 0;
        self.recycled.push(index);
    }

    /// Every node in use by the allocator, free or used, with its index.
    fn live_nodes(&self) -> impl Iterator<Item = (u32, &Node<T>)> {
        self.nodes.iter().enumerate().filter(|(_, n)| n.size > 0).map(|(i, n)| (i as u32, n))
    }

    /// Free blocks: `(offset, size, tag)` of each, in no particular order.
    #[cfg(test)]
    pub(crate) fn free_blocks(&self) -> impl Iterator<Item = (u64, u64, T)> + '_ {
        self.live_nodes().filter(|&(i, _)| !self.is_used(i)).map(|(_, n)| (n.offset, n.size, n.tag))
    }

    /// The used block that contains `addr`, as `(offset, size)`, found by a scan (for error messages).
    pub(crate) fn used_block_containing(&self, addr: u64) -> Option<(u64, u64)> {
        self.live_nodes()
            .find(|&(i, n)| self.is_used(i) && n.offset <= addr && addr < n.offset + n.size)
            .map(|(_, n)| (n.offset, n.size))
    }

    /// The size of the largest free block.
    #[cfg(test)]
    pub(crate) fn largest_free(&self) -> u64 {
        self.free_blocks().map(|(_, size, _)| size).max().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bins_are_monotonic_and_rounding_is_safe() {
        let mut last = 0;
        for units in 1..100_000u64 {
            let bin = bin_down(units);
            assert!(bin >= last);
            last = bin;
            let up = bin_up(units);
            assert!(up >= bin);
            // Every size that maps down to `up` is at least `units`.
            if up < BINS && up > bin {
                let mut smallest = units;
                while smallest > 1 && bin_down(smallest - 1) == up {
                    smallest -= 1;
                }
                assert!(bin_down(smallest) < up || smallest >= units);
            }
        }
        assert!(bin_down(u64::MAX >> UNIT_SHIFT) < BINS);
        assert_eq!(bin_up(u64::MAX), BINS);
    }

    #[test]
    fn splits_and_merges() {
        let mut a = RangeAllocator::<()>::default();
        a.add_region(0, 1 << 20);
        let x = a.allocate(1024, 256).unwrap();
        let y = a.allocate(4096, 256).unwrap();
        assert_eq!((x.offset, y.offset), (0, 1024));
        assert_eq!(a.free_bytes(), (1 << 20) - 5120);
        a.free(x.node, ());
        a.free(y.node, ());
        assert_eq!(a.free_regions(), vec![(0, 1 << 20)]);
    }

    #[test]
    fn regions_never_merge() {
        let mut a = RangeAllocator::<()>::default();
        a.add_region(0, 4096);
        a.add_region(4096, 4096);
        let x = a.allocate(4096, 256).unwrap();
        let y = a.allocate(4096, 256).unwrap();
        assert!(a.allocate(256, 256).is_none());
        a.free(x.node, ());
        a.free(y.node, ());
        let mut regions = a.free_regions();
        regions.sort();
        assert_eq!(regions, vec![(0, 4096), (4096, 4096)]);
        assert!(a.allocate(8192, 256).is_none(), "two regions side by side are not one block");
        assert!(a.remove_free_region(4096));
        assert_eq!(a.total_bytes(), 4096);
    }

    #[test]
    fn alignment_pads_and_the_pad_stays_free() {
        let mut a = RangeAllocator::<()>::default();
        a.add_region(256, 1 << 20);
        let x = a.allocate(256, 4096).unwrap();
        assert_eq!(x.offset, 4096);
        let y = a.allocate(256, 256).unwrap();
        assert_eq!(y.offset, 256, "the pad before the aligned block is reused");
        a.free(x.node, ());
        a.free(y.node, ());
        assert_eq!(a.free_regions(), vec![(256, 1 << 20)]);
    }

    /// The places that hold a request are the free blocks that fit it, the request's own bin first; one is
    /// carved at any address inside it, what is left on both sides staying free.
    #[test]
    fn places_list_the_free_blocks_that_fit_and_carve_anywhere_inside() {
        let mut r = RangeAllocator::<()>::default();
        r.add_region(0, 1 << 20);
        let blocks: Vec<_> = (0..8).map(|_| r.allocate(64 << 10, 256).unwrap()).collect();
        r.free(blocks[1].node, ());
        r.free(blocks[4].node, ());
        r.free(blocks[5].node, ());
        let places = r.places(64 << 10, 256, 16);
        let mut spans: Vec<(u64, u64)> = places.iter().map(|p| (p.offset, p.size)).collect();
        spans.sort_unstable();
        assert_eq!(spans, vec![(64 << 10, 64 << 10), (256 << 10, 128 << 10), (512 << 10, 512 << 10)]);
        assert_eq!(r.places(64 << 10, 256, 2).len(), 2, "at most as many as asked");
        assert!(r.places(600 << 10, 256, 16).is_empty(), "none holds it");
        let pair = *places.iter().find(|p| p.offset == 256 << 10).unwrap();
        let carved = r.carve_at(pair, (256 << 10) + 4096, 8192);
        assert_eq!((carved.offset, carved.size), ((256 << 10) + 4096, 8192));
        assert_eq!(r.free_bytes(), (64 << 10) + (128 << 10) - 8192 + (512 << 10));
        r.free(carved.node, ());
        assert_eq!(r.largest_free(), 512 << 10);
        assert!(r.places(128 << 10, 256, 16).iter().any(|p| p.offset == 256 << 10), "merged again");
    }

    #[test]
    fn tags_follow_splits_and_merges() {
        let mut a = RangeAllocator::<FreeTag>::default();
        a.add_region(0, 1 << 16);
        let x = a.allocate(1024, 256).unwrap();
        let y = a.allocate(1024, 256).unwrap();
        a.free(x.node, FreeTag::freed(1, 5));
        a.free(y.node, FreeTag::freed(2, 3));
        let z = a.allocate(2048, 256).unwrap();
        assert_eq!(z.tag, FreeTag::freed(1, 5).merge(FreeTag::freed(2, 3)));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        #[test]
        fn random_operations_match_a_shadow(ops in proptest::collection::vec((0u8..3, 1u64..5000, 0u32..4), 1..400)) {
            let mut a = RangeAllocator::<()>::default();
            let regions = [(0u64, 1u64 << 20), (1 << 20, 1 << 18), (4 << 20, 1 << 21)];
            for (o, s) in regions {
                a.add_region(o, s);
            }
            let mut live: Vec<(NodeId, u64, u64)> = Vec::new();
            for (kind, size, align_pow) in ops {
                if kind < 2 {
                    let size = size.div_ceil(256) * 256;
                    let align = 256u64 << (align_pow * 2);
                    if let Some(c) = a.allocate(size, align) {
                        prop_assert_eq!(c.offset % align, 0);
                        prop_assert!(regions.iter().any(|&(o, s)| c.offset >= o && c.offset + size <= o + s));
                        for &(_, o, s) in &live {
                            prop_assert!(c.offset + size <= o || o + s <= c.offset, "overlap");
                        }
                        live.push((c.node, c.offset, size));
                    } else {
                        // Refused only when no free block is sure to hold it (one a sixteenth larger than
                        // the worst case is in a bin that is searched).
                        let need = size + align - 256;
                        prop_assert!(a.largest_free() < need + need / 16 + 256);
                    }
                } else if !live.is_empty() {
                    let (node, _, _) = live.swap_remove(size as usize % live.len());
                    a.free(node, ());
                }
                let used: u64 = live.iter().map(|&(_, _, s)| s).sum();
                prop_assert_eq!(a.free_bytes() + used, a.total_bytes());
            }
            for (node, _, _) in live {
                a.free(node, ());
            }
            let mut free = a.free_regions();
            free.sort();
            prop_assert_eq!(free, regions.to_vec());
        }
    }
}
