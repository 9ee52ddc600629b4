//! A lock-free stack of block indices (Treiber's stack) with ABA protection.
//!
//! The head packs a 32-bit version with the 32-bit index of the top block; every successful change bumps
//! the version, so a pop that read a head, was delayed while the block was popped, reused and pushed
//! back, fails its compare-and-swap instead of installing a stale successor. The successor links live in
//! the blocks' own records ([`BlockLinks`]), shared by all stacks of a pool, so blocks move freely between
//! stacks.
//! Push and pop are O(1): one compare-and-swap each when uncontended.

use crate::sync::{AtomicU64, Ordering};

/// The index that marks an empty stack or the end of a chain.
pub(crate) const NONE: u32 = u32::MAX;

/// Where each block keeps its successor while it sits on a stack.
pub(crate) trait BlockLinks {
    /// The successor cell of block `index`.
    fn next(&self, index: u32) -> &AtomicU64;
}

/// A table of successors alone, for the stack's own tests.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct LinkTable {
    next: Box<[AtomicU64]>,
}

#[cfg(test)]
impl LinkTable {
    /// Links for `count` blocks.
    pub(crate) fn new(count: usize) -> Self {
        LinkTable { next: (0..count).map(|_| AtomicU64::new(u64::from(NONE))).collect() }
    }
}

#[cfg(test)]
impl BlockLinks for LinkTable {
    fn next(&self, index: u32) -> &AtomicU64 {
        &self.next[index as usize]
    }
}

/// One lock-free stack of block indices.
#[derive(Debug)]
pub(crate) struct BlockStack {
    head: AtomicU64,
}

impl Default for BlockStack {
    fn default() -> Self {
        BlockStack { head: AtomicU64::new(u64::from(NONE)) }
    }
}

#[inline]
fn pack(version: u64, index: u32) -> u64 {
    (version << 32) | u64::from(index)
}

impl BlockStack {
    /// Pushes block `index`.
    #[inline]
    pub(crate) fn push(&self, links: &impl BlockLinks, index: u32) {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            links.next(index).store(head & 0xffff_ffff, Ordering::Relaxed);
            let new = pack((head >> 32).wrapping_add(1), index);
            match self.head.compare_exchange_weak(head, new, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(current) => head = current,
            }
        }
    }

    /// Pops a block index, or `None` when the stack is empty.
    #[inline]
    pub(crate) fn pop(&self, links: &impl BlockLinks) -> Option<u32> {
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            let index = (head & 0xffff_ffff) as u32;
            if index == NONE {
                return None;
            }
            let next = links.next(index).load(Ordering::Relaxed) & 0xffff_ffff;
            let new = pack((head >> 32).wrapping_add(1), next as u32);
            match self.head.compare_exchange_weak(head, new, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => return Some(index),
                Err(current) => head = current,
            }
        }
    }

    /// Whether the stack looks empty (a racy hint).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        (self.head.load(Ordering::Relaxed) & 0xffff_ffff) as u32 == NONE
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn lifo_and_empty() {
        let links = LinkTable::new(4);
        let stack = BlockStack::default();
        assert!(stack.is_empty());
        for i in 0..4 {
            stack.push(&links, i);
        }
        assert_eq!(
            (0..5).map(|_| stack.pop(&links)).collect::<Vec<_>>(),
            vec![Some(3), Some(2), Some(1), Some(0), None]
        );
    }

    #[test]
    fn threads_never_pop_a_block_twice() {
        use std::sync::Arc;
        let links = Arc::new(LinkTable::new(64));
        let stacks: Arc<[BlockStack; 2]> = Arc::new(Default::default());
        for i in 0..64 {
            stacks[0].push(&*links, i);
        }
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (links, stacks) = (links.clone(), stacks.clone());
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    for round in 0..20_000 {
                        if let Some(i) = stacks[round % 2].pop(&*links) {
                            held.push(i);
                        }
                        if held.len() > 3 || round % 3 == 0 {
                            if let Some(i) = held.pop() {
                                stacks[(round + t) % 2].push(&*links, i);
                            }
                        }
                    }
                    held
                })
            })
            .collect();
        let mut all: Vec<u32> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        for stack in stacks.iter() {
            while let Some(i) = stack.pop(&*links) {
                all.push(i);
            }
        }
        all.sort();
        assert_eq!(all, (0..64).collect::<Vec<_>>());
    }
}

/// Model checks of the stack under every interleaving loom explores (`RUSTFLAGS="--cfg loom"`).
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    #[test]
    fn concurrent_pops_and_pushes_keep_every_block_once() {
        loom::model(|| {
            let links = Arc::new(LinkTable::new(3));
            let stack = Arc::new(BlockStack::default());
            for i in 0..3 {
                stack.push(&*links, i);
            }
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    let (links, stack) = (links.clone(), stack.clone());
                    thread::spawn(move || {
                        let a = stack.pop(&*links);
                        if let Some(a) = a {
                            stack.push(&*links, a);
                        }
                        stack.pop(&*links)
                    })
                })
                .collect();
            let mut seen: Vec<u32> = workers.into_iter().filter_map(|w| w.join().unwrap()).collect();
            while let Some(i) = stack.pop(&*links) {
                seen.push(i);
            }
            seen.sort();
            assert_eq!(seen, vec![0, 1, 2]);
        });
    }

    /// The ABA case: one thread reads the top and its successor, another pops both and pushes the first
    /// back; without the version the first thread's compare-and-swap would install a block already taken.
    #[test]
    fn a_delayed_pop_does_not_install_a_taken_block() {
        loom::model(|| {
            let links = Arc::new(LinkTable::new(3));
            let stack = Arc::new(BlockStack::default());
            for i in (0..3).rev() {
                stack.push(&*links, i);
            }
            let delayed = {
                let (links, stack) = (links.clone(), stack.clone());
                thread::spawn(move || stack.pop(&*links))
            };
            let first = stack.pop(&*links);
            let second = stack.pop(&*links);
            if let Some(first) = first {
                stack.push(&*links, first);
            }
            let mut seen: Vec<u32> = second.into_iter().collect();
            seen.extend(delayed.join().unwrap());
            while let Some(i) = stack.pop(&*links) {
                seen.push(i);
            }
            seen.sort();
            assert_eq!(seen, vec![0, 1, 2]);
        });
    }

    #[test]
    fn blocks_moving_between_stacks_are_not_lost() {
        loom::model(|| {
            let links = Arc::new(LinkTable::new(2));
            let stacks = Arc::new([BlockStack::default(), BlockStack::default()]);
            stacks[0].push(&*links, 0);
            stacks[0].push(&*links, 1);
            let mover = {
                let (links, stacks) = (links.clone(), stacks.clone());
                thread::spawn(move || {
                    if let Some(i) = stacks[0].pop(&*links) {
                        stacks[1].push(&*links, i);
                    }
                })
            };
            let taken = stacks[0].pop(&*links);
            mover.join().unwrap();
            let mut seen: Vec<u32> = taken.into_iter().collect();
            for stack in stacks.iter() {
                while let Some(i) = stack.pop(&*links) {
                    seen.push(i);
                }
            }
            seen.sort();
            assert_eq!(seen, vec![0, 1]);
        });
    }
}
