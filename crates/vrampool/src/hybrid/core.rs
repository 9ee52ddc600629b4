//! The hybrid's core: its size classes, found by block size or by address.

use super::class_learner::serves;
use super::size_class::SizeClass;
use crate::dynamic::ChunkDonor;

/// The size classes, by block size, and their slabs, by address.
#[derive(Debug)]
pub(crate) struct Core {
    /// Classes by increasing block size.
    classes: Vec<SizeClass>,
    /// Class indices by increasing slab address.
    by_address: Vec<usize>,
    max_waste: f64,
    total_blocks: u64,
}

impl Core {
    /// A core of `classes` serving requests at most `max_waste` smaller than their block.
    pub(crate) fn new(mut classes: Vec<SizeClass>, max_waste: f64) -> Self {
        classes.sort_by_key(|c| c.block_size());
        let mut by_address: Vec<usize> = (0..classes.len()).collect();
        by_address.sort_by_key(|&i| classes[i].slab.base());
        let total_blocks = classes.iter().map(|c| u64::from(c.slab.count())).sum();
        Core { classes, by_address, max_waste, total_blocks }
    }

    /// Every class, by block size.
    pub(crate) fn classes(&self) -> &[SizeClass] {
        &self.classes
    }

    /// Blocks in all slabs.
    pub(crate) fn total_blocks(&self) -> u64 {
        self.total_blocks
    }

    /// The class that serves a request spanning `span` bytes aligned to `align`: the smallest block that
    /// holds it within the waste bound. O(log classes).
    #[inline]
    pub(crate) fn class_for(&self, span: u64, align: u64) -> Option<&SizeClass> {
        let index = self.classes.partition_point(|c| c.block_size() < span);
        let class = self.classes.get(index)?;
        (serves(class.block_size(), span, self.max_waste) && class.slab.block_alignment() >= align).then_some(class)
    }

    /// The class whose slab holds `addr`. O(log classes).
    #[inline]
    pub(crate) fn class_holding(&self, addr: u64) -> Option<&SizeClass> {
        let after = self.by_address.partition_point(|&i| self.classes[i].slab.base() <= addr);
        let class = &self.classes[*self.by_address.get(after.checked_sub(1)?)?];
        class.slab.contains(addr).then_some(class)
    }
}

impl ChunkDonor for Core {
    fn claim_idle(&self, limit: usize) -> Vec<u64> {
        let mut claimed = Vec::new();
        for class in &self.classes {
            if let Some(chunks) = &class.chunks {
                chunks.claim_idle(limit, &mut claimed);
            }
        }
        claimed
    }

    fn unclaim(&self, chunks: &[u64]) {
        for &chunk in chunks {
            if let Some(owner) = self.classes.iter().filter_map(|c| c.chunks.as_ref()).find(|c| c.holds(chunk)) {
                owner.unclaim(chunk);
            }
        }
    }
}
