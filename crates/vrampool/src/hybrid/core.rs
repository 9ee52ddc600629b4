//! The hybrid's core: its size classes, found by request size, and the blocks it holds, found by address.

use super::address_map::{AddressMap, BlockAddrs};
use super::class_cache::ClassCache;
use super::config::ClassSpec;
use super::waste_bound::WasteBound;
use crate::dynamic::BlockCache;
use crate::error::Result;
use crate::stream_order::FreeTag;
use crate::units::{MIN_BLOCK, log_linear_bin, log_linear_bin_floor};

/// Sub-bins per power of two of [`size_bin`]: a bin spans at most 1/32 (3%) of its sizes, finer than the
/// spacing of classes learned at the default waste bound (10%) and about that of classes at 3%.
const BIN_SUB_BITS: u32 = 5;
/// Classes passed one by one from a bin's first before the search turns binary (dense classes).
const LINEAR_STEPS: usize = 4;

/// The bin of a span (a positive multiple of 256 bytes): log-linear, exact below 32 units of 256 bytes.
#[inline]
fn size_bin(span: u64) -> usize {
    log_linear_bin::<BIN_SUB_BITS>(span >> MIN_BLOCK.trailing_zeros())
}

/// The smallest span of bin `bin`.
fn bin_floor(bin: usize) -> u64 {
    log_linear_bin_floor::<BIN_SUB_BITS>(bin) * MIN_BLOCK
}

/// The blocks class `spec` holds under a cap of `cap` bytes: its count, but no more blocks than fit in
/// the cap (and at least one), nor more than a block index can number.
fn capacity_under(spec: &ClassSpec, cap: u64) -> u32 {
    spec.block_count.min(most_under(spec, cap).into()) as u32
}

/// The most blocks of class `spec` that fit in a cap of `cap` bytes (at least one), and that a block index
/// can number.
fn most_under(spec: &ClassSpec, cap: u64) -> u32 {
    (cap / spec.block_size.max(1)).clamp(1, u64::from(u32::MAX - 1)) as u32
}

/// The class a request goes to ([`Core::class_for`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum ClassFit<'a> {
    /// The class at this index serves the request: a cached block, else a block carved for it.
    Serves(u32, &'a ClassCache),
    /// No class serves the request within the waste bound; this class, the next larger one, serves it
    /// within the cached-waste bound, from a block it has cached only (no block is carved for it).
    CachedOnly(&'a ClassCache),
    /// No class serves the request.
    None,
}

/// The size classes, by block size, and the address of every block they hold.
///
/// A free looks its address up in an [`AddressMap`], read without a lock.
#[derive(Debug)]
pub(crate) struct Core {
    /// Classes by increasing block size.
    classes: Vec<ClassCache>,
    /// The classes' block sizes, in the same order, packed so that the search by size stays in a few
    /// cache lines (searching the classes themselves touched one line per step).
    sizes: Box<[u64]>,
    /// Per size bin ([`size_bin`]), the first class whose block holds the bin's smallest span: a request
    /// starts its search there. A binary search over 100 classes is a chain of 7 dependent loads, the most
    /// expensive step of an allocation under churn; this is one load and a step or two.
    first_in_bin: Box<[u32]>,
    /// Per class, the smallest span its block serves within the waste bound, so that the check is one
    /// comparison (the bound's own test multiplies in floating point).
    smallest_served: Box<[u64]>,
    /// Per class, the smallest span one of its cached blocks serves when no class serves the span within
    /// the waste bound ([`ClassFit::CachedOnly`]).
    smallest_cached: Box<[u64]>,
    /// Block address to (class, index).
    blocks: AddressMap,
    total_blocks: u64,
}

impl Core {
    /// A core with a class per spec (block size and capacity), serving requests at most `waste`
    /// smaller than their block, and, from a block already cached, requests at most `cached_waste` smaller
    /// that no class serves within `waste`. A class holds at most as many blocks as fit in `cap` bytes,
    /// the region's cap, however many its spec asks for: no more could ever be carved. Where `grow`, a
    /// class that has carved its capacity carves more blocks as its requests need, up to that most, its
    /// records each on a cache line of its own where `spread` (several threads use the pool). An error when
    /// the host has no room for the blocks' records.
    pub(crate) fn new(
        specs: &[ClassSpec],
        cap: u64,
        grow: bool,
        spread: bool,
        waste: WasteBound,
        cached_waste: WasteBound,
    ) -> Result<Self> {
        let mut specs = specs.to_vec();
        specs.sort_by_key(|c| c.block_size);
        let classes: Vec<ClassCache> = specs
            .iter()
            .map(|c| match grow {
                true => ClassCache::growable(c.block_size, capacity_under(c, cap), most_under(c, cap), spread),
                false => ClassCache::new(c.block_size, capacity_under(c, cap)),
            })
            .collect::<Result<_>>()?;
        let total_blocks = classes.iter().map(|c| u64::from(c.capacity())).sum();
        let sizes: Box<[u64]> = classes.iter().map(ClassCache::block_size).collect();
        let bins = sizes.last().map_or(0, |&largest| size_bin(largest) + 1);
        let first_in_bin = (0..bins)
            .map(|bin| {
                let first = sizes.partition_point(|&size| size < bin_floor(bin));
                u32::try_from(first).unwrap_or(u32::MAX)
            })
            .collect();
        let smallest_served: Box<[u64]> = sizes.iter().map(|&size| waste.smallest_served(size)).collect();
        let smallest_cached = sizes
            .iter()
            .zip(&smallest_served)
            .map(|(&size, &served)| cached_waste.smallest_served(size).min(served))
            .collect();
        let largest_index = classes.iter().map(|c| c.capacity().saturating_sub(1)).max().unwrap_or(0);
        let blocks = AddressMap::with_capacity(total_blocks, classes.len() as u32, largest_index);
        Ok(Core { classes, sizes, first_in_bin, smallest_served, smallest_cached, blocks, total_blocks })
    }

    /// Every class, by block size.
    pub(crate) fn classes(&self) -> &[ClassCache] {
        &self.classes
    }

    /// The capacity of all classes together.
    pub(crate) fn total_blocks(&self) -> u64 {
        self.total_blocks
    }

    /// The class for a request spanning `span` bytes aligned to at most 256 bytes: the smallest block
    /// that holds it, if it does so within the waste bound, or within the cached-waste bound from a block
    /// already cached. O(1) for classes spread at least as far apart as the bins, O(log classes) at worst.
    #[inline]
    pub(crate) fn class_for(&self, span: u64, align: u64) -> ClassFit<'_> {
        if align > MIN_BLOCK {
            return ClassFit::None;
        }
        let Some(&first) = self.first_in_bin.get(size_bin(span)) else { return ClassFit::None };
        let mut index = first as usize;
        let mut steps = 0;
        while index < self.sizes.len() && self.sizes[index] < span {
            index += 1;
            steps += 1;
            if steps == LINEAR_STEPS {
                index += self.sizes[index..].partition_point(|&size| size < span);
                break;
            }
        }
        let Some(class) = self.classes.get(index) else { return ClassFit::None };
        if span >= self.smallest_served[index] {
            ClassFit::Serves(index as u32, class)
        } else if span >= self.smallest_cached[index] {
            ClassFit::CachedOnly(class)
        } else {
            ClassFit::None
        }
    }

    /// Records a block carved for `class` at `index`, whose address the class has recorded.
    pub(crate) fn register(&self, addr: u64, class: u32, index: u32) {
        self.blocks.insert(addr, class, index, self);
    }

    /// The class and index of the block at `addr`, if the core holds one there.
    #[inline]
    pub(crate) fn lookup(&self, addr: u64) -> Option<(&ClassCache, u32)> {
        let (class, index) = self.blocks.get(addr, self)?;
        let class = &self.classes[class as usize];
        // The map confirmed the record under its sequence lock; read again after it, so that a block a
        // drain gave back and a carve reused in between is not taken for the one freed.
        (class.addr(index) == addr).then_some((class, index))
    }

    /// Whether the core holds a block at `addr`.
    pub(crate) fn holds(&self, addr: u64) -> bool {
        self.lookup(addr).is_some()
    }
}

impl BlockAddrs for Core {
    #[inline]
    fn block_addr(&self, class: u32, index: u32) -> u64 {
        match self.classes.get(class as usize) {
            Some(class) => class.addr(index),
            _ => 0,
        }
    }
}

impl BlockCache for Core {
    fn drain(&self, bytes: u64) -> Vec<(u64, FreeTag)> {
        let mut drained = Vec::new();
        // Each class with where its blocks end in `drained`, the largest class first.
        let mut ends = Vec::with_capacity(self.classes.len());
        let mut left = bytes;
        for class in self.classes.iter().rev() {
            if left == 0 {
                break;
            }
            left = class.drain(left, &mut drained);
            ends.push((class, drained.len()));
        }
        // The map finds its entries, and where the entries after them belong, by the records' addresses:
        // they are forgotten only once the map has let go of the blocks.
        self.blocks.remove_all(drained.iter().map(|&(_, addr, _)| addr), self);
        let mut start = 0;
        for (class, end) in ends {
            for &(index, _, _) in &drained[start..end] {
                class.make_empty(index);
            }
            start = end;
        }
        drained.into_iter().map(|(_, addr, tag)| (addr, tag)).collect()
    }

    fn is_empty(&self) -> bool {
        self.classes.iter().all(ClassCache::nothing_cached)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fraction(fraction: f64) -> WasteBound {
        WasteBound { fraction, floor: 0 }
    }

    /// A core of one class of `count` blocks of 4 KiB, under no cap.
    fn one_class(count: u64) -> Core {
        Core::new(
            &[ClassSpec { block_size: 4096, block_count: count }],
            u64::MAX,
            false,
            false,
            fraction(0.125),
            fraction(0.5),
        )
        .unwrap()
    }

    /// Carves a block of the one class at `addr`: an empty index, its address recorded and mapped.
    fn carve_at(core: &Core, addr: u64) -> u32 {
        let class = &core.classes()[0];
        let index = class.take_empty(false).unwrap();
        class.set_addr(index, addr);
        core.register(addr, 0, index);
        index
    }

    /// The index of the class that serves the request.
    fn serving(fit: ClassFit<'_>) -> Option<u32> {
        match fit {
            ClassFit::Serves(index, _) => Some(index),
            _ => None,
        }
    }

    /// The block size of the class that serves the request from its cached blocks only.
    fn cached_only(fit: ClassFit<'_>) -> Option<u64> {
        match fit {
            ClassFit::CachedOnly(class) => Some(class.block_size()),
            _ => None,
        }
    }

    #[test]
    fn classes_are_found_by_size_within_the_waste_bound() {
        let core = Core::new(
            &[ClassSpec { block_size: 1 << 20, block_count: 4 }, ClassSpec { block_size: 4096, block_count: 4 }],
            u64::MAX,
            false,
            false,
            fraction(0.125),
            fraction(0.5),
        )
        .unwrap();
        assert_eq!(serving(core.class_for(4096, 256)), Some(0));
        assert_eq!(serving(core.class_for(3840, 256)), Some(0));
        assert!(matches!(core.class_for(2048, 256), ClassFit::None), "a 4 KiB block wastes too much on 2 KiB");
        assert_eq!(cached_only(core.class_for(3072, 256)), Some(4096), "within 50% from a cached block only");
        assert!(
            matches!(core.class_for(4096, 4096), ClassFit::None),
            "more alignment than blocks carved at 256 bytes have"
        );
        assert_eq!(serving(core.class_for(1 << 20, 256)), Some(1));
        assert!(matches!(core.class_for((1 << 20) + 256, 256), ClassFit::None));
        assert_eq!(core.total_blocks(), 8);
    }

    #[test]
    fn bins_start_at_their_floor_and_cover_every_span() {
        let mut last = None;
        for span in (256..(64u64 << 20)).step_by(256).filter(|s| s % 4096 == 0 || *s < (1 << 16)) {
            let bin = size_bin(span);
            assert!(bin_floor(bin) <= span && span < bin_floor(bin + 1), "{span} in bin {bin}");
            assert!(last.is_none_or(|l| l <= bin), "bins grow with the span");
            last = Some(bin);
        }
        assert_eq!(bin_floor(size_bin(3 << 20)), 3 << 20);
    }

    /// The bin table finds the same class as a search over all classes, dense classes and sparse alike,
    /// and the same fit: within the waste bound, within the cached-waste bound only, or none.
    #[test]
    fn the_bin_table_agrees_with_a_full_search() {
        let dense: Vec<ClassSpec> =
            (1..200).map(|i| ClassSpec { block_size: (1 << 20) + i * 256, block_count: 1 }).collect();
        let sparse: Vec<ClassSpec> = (0..40)
            .map(|i| ClassSpec { block_size: (256.0 * 1.3f64.powi(i)) as u64 / 256 * 256, block_count: 1 })
            .collect();
        let floored = WasteBound { fraction: 0.03, floor: 16 << 10 };
        for (specs, waste) in [
            (dense, fraction(0.03)),
            (sparse, fraction(0.125)),
            (sparse_and_small(), fraction(0.03)),
            (sparse_and_small(), floored),
        ] {
            let cached_waste = WasteBound { fraction: 0.5, ..waste };
            let core = Core::new(&specs, u64::MAX, false, false, waste, cached_waste).unwrap();
            let sizes: Vec<u64> = core.classes().iter().map(ClassCache::block_size).collect();
            for span in (256..(sizes.last().unwrap() + 8192)).step_by(256) {
                let next = sizes.iter().position(|&s| s >= span);
                let expected = next.filter(|&i| waste.serves(sizes[i], span));
                let fit = core.class_for(span, 256);
                assert_eq!(serving(fit).map(|i| i as usize), expected, "span {span}");
                let expected_cached = next.filter(|_| expected.is_none()).map(|i| sizes[i]);
                let expected_cached = expected_cached.filter(|&size| cached_waste.serves(size, span));
                assert_eq!(cached_only(fit), expected_cached, "span {span}");
            }
        }
    }

    fn sparse_and_small() -> Vec<ClassSpec> {
        [256, 512, 768, 4096, 8192, 9216, 1 << 20]
            .iter()
            .map(|&b| ClassSpec { block_size: b, block_count: 2 })
            .collect()
    }

    /// A drain of every other block of a full class leaves the map with the live blocks alone, each still
    /// found: the map lets go of the drained blocks while their records still name them.
    #[test]
    fn a_drain_leaves_the_live_blocks_findable() {
        let count = 300;
        let core = one_class(count);
        let class = &core.classes()[0];
        let slot = crate::thread_slot::current();
        let addr = |index: u32| 0x10_0000 + u64::from(index) * 4096;
        for expected in 0..count as u32 {
            // The empty indices come out in order.
            let index = carve_at(&core, addr(expected));
            assert_eq!(index, expected);
            class.mark_live(index, 0, 100);
            if index % 2 == 0 {
                class.put_back(slot, index, FreeTag::FRESH);
            }
        }
        let drained = core.drain(u64::MAX);
        assert_eq!(drained.len(), count as usize / 2);
        assert_eq!(core.blocks.len(), count as usize / 2, "the map holds the live blocks alone");
        for index in 0..count as u32 {
            assert_eq!(core.holds(addr(index)), index % 2 == 1, "block {index}");
        }
        assert!(drained.iter().all(|&(a, _)| class.addr(((a - 0x10_0000) / 4096) as u32) == 0));
    }

    #[test]
    fn blocks_are_found_by_address_until_drained() {
        let core = one_class(2);
        let class = &core.classes()[0];
        let index = carve_at(&core, 0x7000);
        assert!(core.holds(0x7000));
        assert!(!core.holds(0x8000));
        class.put_back(crate::thread_slot::current(), index, FreeTag::FRESH);
        assert!(!BlockCache::is_empty(&core));
        let drained = core.drain(u64::MAX);
        assert_eq!(drained.len(), 1);
        assert_eq!(drained[0].0, 0x7000);
        assert!(!core.holds(0x7000));
        assert!(BlockCache::is_empty(&core));
    }

    /// A drain that finds nothing cached leaves the address map alone: no writer's turn that would make
    /// the frees reading it at that moment read again.
    #[test]
    fn a_drain_of_nothing_leaves_the_map_alone() {
        let core = one_class(2);
        let class = &core.classes()[0];
        let index = carve_at(&core, 0x7000);
        class.mark_live(index, 0, 100);
        let writes = core.blocks.writes();
        assert!(core.drain(u64::MAX).is_empty());
        assert_eq!(core.blocks.writes(), writes);
        assert!(core.holds(0x7000));
    }
}
