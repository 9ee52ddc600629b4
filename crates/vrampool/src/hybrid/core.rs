//! The hybrid's core: its size classes, found by request size, and the blocks it holds, found by address.

use super::address_map::AddressMap;
use super::class_cache::ClassCache;
use super::class_learner::serves;
use super::config::ClassSpec;
use crate::dynamic::BlockCache;
use crate::stream_order::FreeTag;

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
    /// Block address to (class, index).
    blocks: AddressMap,
    max_waste: f64,
    total_blocks: u64,
}

impl Core {
    /// A core with a class per spec (block size and capacity), serving requests at most `max_waste`
    /// smaller than their block.
    pub(crate) fn new(specs: &[ClassSpec], max_waste: f64) -> Self {
        let mut specs = specs.to_vec();
        specs.sort_by_key(|c| c.block_size);
        let classes: Vec<ClassCache> = specs
            .iter()
            .map(|c| ClassCache::new(c.block_size, c.block_count.min(u64::from(u32::MAX - 1)) as u32))
            .collect();
        let total_blocks = classes.iter().map(|c| u64::from(c.capacity())).sum();
        let sizes = classes.iter().map(ClassCache::block_size).collect();
        Core { classes, sizes, blocks: AddressMap::with_capacity(total_blocks), max_waste, total_blocks }
    }

    /// Every class, by block size.
    pub(crate) fn classes(&self) -> &[ClassCache] {
        &self.classes
    }

    /// The capacity of all classes together.
    pub(crate) fn total_blocks(&self) -> u64 {
        self.total_blocks
    }

    /// The class that serves a request spanning `span` bytes aligned to at most 256 bytes: the smallest
    /// block that holds it within the waste bound. O(log classes).
    #[inline]
    pub(crate) fn class_for(&self, span: u64, align: u64) -> Option<(u32, &ClassCache)> {
        if align > crate::units::MIN_BLOCK {
            return None;
        }
        let index = self.sizes.partition_point(|&size| size < span);
        let class = self.classes.get(index)?;
        serves(class.block_size(), span, self.max_waste).then_some((index as u32, class))
    }

    /// Records a block carved for `class` at `index`.
    pub(crate) fn register(&self, addr: u64, class: u32, index: u32) {
        self.blocks.insert(addr, class, index);
    }

    /// The class and index of the block at `addr`, if the core holds one there.
    #[inline]
    pub(crate) fn lookup(&self, addr: u64) -> Option<(&ClassCache, u32)> {
        let (class, index) = self.blocks.get(addr)?;
        let class = &self.classes[class as usize];
        (class.addr(index) == addr).then_some((class, index))
    }

    /// Whether the core holds a block at `addr`.
    pub(crate) fn holds(&self, addr: u64) -> bool {
        self.lookup(addr).is_some()
    }
}

impl BlockCache for Core {
    fn drain(&self) -> Vec<(u64, FreeTag)> {
        let mut drained = Vec::new();
        for class in &self.classes {
            class.drain(&mut drained);
        }
        self.blocks.remove_all(drained.iter().map(|&(_, addr, _)| addr));
        drained.into_iter().map(|(_, addr, tag)| (addr, tag)).collect()
    }

    fn is_empty(&self) -> bool {
        self.classes.iter().all(ClassCache::nothing_cached)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_found_by_size_within_the_waste_bound() {
        let core = Core::new(
            &[ClassSpec { block_size: 1 << 20, block_count: 4 }, ClassSpec { block_size: 4096, block_count: 4 }],
            0.125,
        );
        assert_eq!(core.class_for(4096, 256).map(|(i, _)| i), Some(0));
        assert_eq!(core.class_for(3840, 256).map(|(i, _)| i), Some(0));
        assert!(core.class_for(2048, 256).is_none(), "a 4 KiB block wastes too much on 2 KiB");
        assert!(core.class_for(4096, 4096).is_none(), "more alignment than blocks carved at 256 bytes have");
        assert_eq!(core.class_for(1 << 20, 256).map(|(i, _)| i), Some(1));
        assert!(core.class_for((1 << 20) + 256, 256).is_none());
        assert_eq!(core.total_blocks(), 8);
    }

    #[test]
    fn blocks_are_found_by_address_until_drained() {
        let core = Core::new(&[ClassSpec { block_size: 4096, block_count: 2 }], 0.125);
        let class = &core.classes()[0];
        let index = class.take_empty().unwrap();
        class.set_addr(index, 0x7000);
        core.register(0x7000, 0, index);
        assert!(core.holds(0x7000));
        assert!(!core.holds(0x8000));
        class.cache(crate::thread_slot::current(), index);
        assert!(!BlockCache::is_empty(&core));
        let drained = core.drain();
        assert_eq!(drained.len(), 1);
        assert_eq!(drained[0].0, 0x7000);
        assert!(!core.holds(0x7000));
        assert!(BlockCache::is_empty(&core));
    }
}
