//! The books of a virtual space's address range, chunk by chunk: which chunks are mapped, how many live
//! blocks touch each, which mapped chunks sit idle under wholly free stretches, and which are retiring:
//! their memory aliased to another address while queued work may still use them here. No device calls:
//! [`super::VirtualSpace`] makes them and records them here.

use std::collections::VecDeque;
use std::ops::Range;

use super::chunk_set::{ChunkSet, word_masks};
use crate::backend::EventId;

/// Chunk bookkeeping for one reserved address range.
///
/// Idle chunks are stamped with the epoch in which they became idle. An epoch ends when the pool records an
/// event on its stream; once that event completes, no work queued before it still touches the chunks that
/// became idle in that epoch or earlier, and they can be moved without waiting for the device. Idle chunks
/// that cannot wait for that are aliased ([`ChunkMap::retire`]): they count as unmapped here, and stay
/// mapped on the device, in a [`Retirement`], until their event completes.
#[derive(Debug)]
pub(super) struct ChunkMap {
    base: u64,
    size: u64,
    granularity: u64,
    /// `log2(granularity)` where the granularity is a power of two (2 MiB on CUDA): the chunks of a span are
    /// then found by shifts, not by two 64-bit divisions per allocation and per free.
    granularity_shift: Option<u32>,
    mapped: ChunkSet,
    idle: ChunkSet,
    /// Chunks retiring: aliased away, still mapped on the device here ([`ChunkMap::retire`]).
    retiring: ChunkSet,
    /// Per chunk mapped or retiring, log2 of the chunks of the physical page it belongs to: pages of
    /// `2^order` chunks start at a multiple of `2^order` ([`ChunkMap::set_mapped_pages`]).
    page_order: Vec<u8>,
    live: Vec<u32>,
    idle_since: Vec<u32>,
    epoch: u32,
    safe_through: u32,
    epoch_events: VecDeque<(u32, EventId)>,
    /// Whether a free that leaves chunks idle ends the epoch ([`ChunkMap::end_epochs_at_frees`]).
    epochs_at_frees: bool,
    moved_since_growth: usize,
    /// Chunks whose physical memory was aliased to another address while queued work may still use them
    /// here, in runs, each batch with the event after which no queued work uses them: still mapped on the
    /// device, but neither mapped nor idle for the pool, until unmapped. Few at a time, and looked at only
    /// when the pool calls the device.
    retirements: Vec<Retirement>,
}

/// Chunks aliased away from their address in one batch, waiting for the work queued before to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Retirement {
    /// The runs of chunks, still mapped on the device at these addresses.
    pub(super) runs: Vec<Range<usize>>,
    /// Recorded on the pool's stream when the chunks were aliased: once it completes they may be unmapped.
    pub(super) event: EventId,
}

impl Retirement {
    /// Whether a chunk of `run` is in the batch.
    fn touches(&self, run: &Range<usize>) -> bool {
        self.runs.iter().any(|own| own.start < run.end && run.start < own.end)
    }
}

/// Blocks touching at least this many chunks have their chunks counted a word of the idle and mapped sets at
/// a time; fewer, one chunk at a time, which is cheaper for the few chunks most blocks touch
/// (docs/BENCHMARKS.md).
const WORD_PATH_CHUNKS: usize = 8;

/// The epoch stamp of chunks mapped and never used: safe to move at any time.
const FRESH: u32 = 0;

impl ChunkMap {
    /// A range of `size` bytes at `base`, nothing mapped.
    pub(super) fn new(base: u64, size: u64, granularity: u64) -> Self {
        let chunks = (size / granularity) as usize;
        ChunkMap {
            base,
            size,
            granularity,
            granularity_shift: granularity.is_power_of_two().then(|| granularity.trailing_zeros()),
            mapped: ChunkSet::new(chunks),
            idle: ChunkSet::new(chunks),
            retiring: ChunkSet::new(chunks),
            page_order: vec![0; chunks],
            live: vec![0; chunks],
            idle_since: vec![FRESH; chunks],
            epoch: 1,
            safe_through: FRESH,
            epoch_events: VecDeque::new(),
            epochs_at_frees: false,
            moved_since_growth: 0,
            retirements: Vec::new(),
        }
    }

    pub(super) fn base(&self) -> u64 {
        self.base
    }

    pub(super) fn size(&self) -> u64 {
        self.size
    }

    pub(super) fn granularity(&self) -> u64 {
        self.granularity
    }

    /// Bytes in `chunks` chunks.
    pub(super) fn bytes(&self, chunks: usize) -> u64 {
        chunks as u64 * self.granularity
    }

    /// Whole chunks in `bytes` (rounded down).
    pub(super) fn whole_chunks(&self, bytes: u64) -> usize {
        (bytes / self.granularity) as usize
    }

    /// The first address of `run` and its bytes.
    pub(super) fn extent(&self, run: &Range<usize>) -> (u64, u64) {
        (self.chunk_addr(run.start), self.bytes(run.len()))
    }

    /// Whether `addr` lies in the range.
    pub(super) fn contains(&self, addr: u64) -> bool {
        addr >= self.base && addr < self.base + self.size
    }

    /// Bytes of mapped chunks.
    pub(super) fn mapped_bytes(&self) -> u64 {
        self.bytes(self.mapped.count())
    }

    /// Mapped chunks that no live block touches.
    pub(super) fn idle_chunks(&self) -> usize {
        self.idle.count()
    }

    /// The address of chunk `index`.
    pub(super) fn chunk_addr(&self, index: usize) -> u64 {
        self.base + index as u64 * self.granularity
    }

    /// The chunks that `[addr, addr + size)` touches.
    fn chunks(&self, addr: u64, size: u64) -> Range<usize> {
        let (offset, end) = (addr - self.base, addr - self.base + size);
        let (first, end) = match self.granularity_shift {
            Some(shift) => (offset >> shift, (end + self.granularity - 1) >> shift),
            None => (offset / self.granularity, end.div_ceil(self.granularity)),
        };
        first as usize..end as usize
    }

    /// Counts a live block on `[addr, addr + size)`; returns the runs of its chunks that are not mapped.
    pub(super) fn use_span(&mut self, addr: u64, size: u64) -> Vec<Range<usize>> {
        let chunks = self.chunks(addr, size);
        if chunks.len() < WORD_PATH_CHUNKS {
            let mut all_mapped = true;
            for index in chunks.clone() {
                self.live[index] += 1;
                if self.live[index] == 1 {
                    self.idle.remove(index);
                }
                all_mapped &= self.mapped.contains(index);
            }
            return if all_mapped { Vec::new() } else { self.mapped.gaps_in(chunks) };
        }
        for count in &mut self.live[chunks.clone()] {
            *count += 1;
        }
        // Only chunks no block touched were idle: after the count, none of these is. A word at a time.
        self.idle.remove_run(chunks.clone());
        if self.mapped.contains_run(chunks.clone()) { Vec::new() } else { self.mapped.gaps_in(chunks) }
    }

    /// Forgets a live block on `[addr, addr + size)`; mapped chunks no block touches become idle. Returns
    /// whether any did.
    pub(super) fn release_span(&mut self, addr: u64, size: u64) -> bool {
        let chunks = self.chunks(addr, size);
        let mut went_idle = false;
        if chunks.len() < WORD_PATH_CHUNKS {
            for index in chunks {
                self.live[index] -= 1;
                if self.live[index] == 0 && self.mapped.contains(index) {
                    self.idle.insert(index);
                    self.idle_since[index] = self.epoch;
                    went_idle = true;
                }
            }
            return went_idle;
        }
        // A word of chunks at a time: the counts that reach 0 make a mask, the mapped ones among them go idle.
        for (w, mask) in word_masks(chunks) {
            let base = w * 64;
            let mut unused = 0u64;
            let mut bits = mask;
            while bits != 0 {
                let bit = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let count = &mut self.live[base + bit];
                *count -= 1;
                unused |= u64::from(*count == 0) << bit;
            }
            let idle = unused & self.mapped.word(w);
            if idle != 0 {
                went_idle = true;
                self.idle.insert_word(w, idle);
                let mut bits = idle;
                while bits != 0 {
                    self.idle_since[base + bits.trailing_zeros() as usize] = self.epoch;
                    bits &= bits - 1;
                }
            }
        }
        went_idle
    }

    /// Records the chunks of `run` as mapped (in pages of one chunk) or unmapped.
    pub(super) fn set_mapped(&mut self, run: Range<usize>, mapped: bool) {
        for index in run {
            if mapped {
                self.page_order[index] = 0;
                self.mapped.insert(index);
                if self.live[index] == 0 {
                    self.idle.insert(index);
                    self.idle_since[index] = FRESH;
                }
            } else {
                self.mapped.remove(index);
                self.idle.remove(index);
            }
        }
    }

    /// Records `run`, a whole number of pages of `2^order` chunks each, each starting at a multiple of its
    /// size, as mapped.
    pub(super) fn set_mapped_pages(&mut self, run: Range<usize>, order: u32) {
        debug_assert!(run.start % (1 << order) == 0 && run.len() % (1 << order) == 0, "{run:?}");
        self.set_mapped(run.clone(), true);
        self.page_order[run].fill(order as u8);
    }

    /// Records the pages of `pages` (as [`ChunkMap::pages_of`] gives them) as mapped at `to`, where
    /// `[to, to + pages' chunks)` keeps each page at a multiple of its size; the chunks they came from are
    /// left as [`ChunkMap::set_mapped`] finds them.
    pub(super) fn set_mapped_like(&mut self, pages: &[Range<usize>], to: usize) {
        let mut at = to;
        for page in pages {
            let order = self.page_order[page.start];
            self.set_mapped(at..at + page.len(), true);
            self.page_order[at..at + page.len()].fill(order);
            at += page.len();
        }
    }

    /// The page chunk `index` belongs to (mapped or retiring).
    pub(super) fn page_at(&self, index: usize) -> Range<usize> {
        let len = 1usize << self.page_order[index];
        let start = index & !(len - 1);
        start..start + len
    }

    /// The pages of `run` (whole pages, mapped or retiring), in order.
    pub(super) fn pages_of(&self, run: Range<usize>) -> Vec<Range<usize>> {
        let mut pages = Vec::new();
        let mut at = run.start;
        while at < run.end {
            let page = self.page_at(at);
            debug_assert!(page.start == at && page.end <= run.end, "{run:?} cuts page {page:?}");
            at = page.end;
            pages.push(page);
        }
        pages
    }

    /// The bytes of each of `pages`, in order: what a device call on them is priced by
    /// ([`crate::CostModel::batched`]).
    pub(super) fn page_bytes(&self, pages: &[Range<usize>]) -> Vec<u64> {
        pages.iter().map(|page| self.bytes(page.len())).collect()
    }

    /// Whole idle pages, highest addresses first, at most `limit` chunks in all (a page that would pass it
    /// is left out); only those no queued work can still touch where `safe_only`.
    pub(super) fn idle_pages(&self, limit: usize, safe_only: bool) -> Vec<Range<usize>> {
        let mut pages = Vec::new();
        let mut taken = 0;
        for run in self.idle.runs_down() {
            if taken >= limit {
                break;
            }
            let mut top = run.end;
            while top > run.start && taken < limit {
                let page = self.page_at(top - 1);
                top = page.start.max(run.start);
                let whole = page.start >= run.start && page.end <= run.end;
                let safe = !safe_only || page.clone().all(|i| self.idle_since[i] <= self.safe_through);
                if whole && safe && taken + page.len() <= limit {
                    taken += page.len();
                    pages.push(page);
                }
            }
        }
        pages
    }

    /// Whether the pages moved, aliased or mapped anew over `slot` may cover it: every chunk of it is in
    /// the range, neither mapped nor retiring, and touched by no block but the one being backed, on the
    /// chunks `block`.
    pub(super) fn slot_is_free(&self, slot: &Range<usize>, block: &Range<usize>) -> bool {
        slot.end <= self.live.len()
            && self.mapped.count_in(slot.clone()) == 0
            && self.retiring.count_in(slot.clone()) == 0
            && slot.clone().all(|i| self.live[i] == 0 || block.contains(&i))
    }

    /// Chunks of `[addr, addr + size)` not mapped, and whether any of them is retiring.
    pub(super) fn unbacked_in(&self, addr: u64, size: u64) -> (usize, bool) {
        let chunks = self.chunks(addr, size);
        let unmapped = chunks.len() - self.mapped.count_in(chunks.clone());
        (unmapped, unmapped > 0 && self.retiring.count_in(chunks) > 0)
    }

    /// The first `max` runs of mapped chunks wholly inside `[addr, addr + size)`, as byte ranges.
    pub(super) fn mapped_within(&self, addr: u64, size: u64, max: usize) -> Vec<Range<u64>> {
        let offset = addr - self.base;
        let first = offset.div_ceil(self.granularity) as usize;
        let end = ((offset + size) / self.granularity) as usize;
        if first >= end {
            return Vec::new();
        }
        self.mapped
            .runs_in(first..end, max)
            .into_iter()
            .map(|run| self.chunk_addr(run.start)..self.chunk_addr(run.end))
            .collect()
    }

    /// The chunks `[addr, addr + size)` touches.
    pub(super) fn chunks_of(&self, addr: u64, size: u64) -> Range<usize> {
        self.chunks(addr, size)
    }

    /// Runs of chunks of `run` that are not mapped, in order.
    pub(super) fn unmapped_runs(&self, run: Range<usize>) -> Vec<Range<usize>> {
        self.mapped.gaps_in(run)
    }

    /// Chunks moved since the space last gained new physical memory.
    pub(super) fn moved_since_growth(&self) -> usize {
        self.moved_since_growth
    }

    /// Counts `chunks` moved from idle stretches to where a block needed them.
    pub(super) fn count_moved(&mut self, chunks: usize) {
        self.moved_since_growth += chunks;
    }

    /// Records that new physical memory was mapped: the count of moves starts again.
    pub(super) fn count_growth(&mut self) {
        self.moved_since_growth = 0;
    }

    /// Runs of idle chunks, highest addresses first, at most `limit` chunks in all.
    pub(super) fn idle_runs(&self, limit: usize) -> Vec<Range<usize>> {
        self.idle.runs_from_top(limit)
    }

    /// Runs of idle chunks that no queued work can still touch (idle since an epoch whose event completed),
    /// highest addresses first, at most `limit` chunks in all.
    pub(super) fn safe_idle_runs(&self, limit: usize) -> Vec<Range<usize>> {
        let mut runs: Vec<Range<usize>> = Vec::new();
        let mut taken = 0;
        for run in self.idle.runs_down() {
            for index in run.rev() {
                if taken >= limit {
                    return runs;
                }
                if self.idle_since[index] > self.safe_through {
                    continue;
                }
                match runs.last_mut() {
                    Some(last) if last.start == index + 1 => last.start = index,
                    _ => runs.push(index..index + 1),
                }
                taken += 1;
            }
        }
        runs
    }

    /// Ends the current epoch with `event`, recorded on the pool's stream just now.
    pub(super) fn end_epoch(&mut self, event: EventId) {
        self.epoch_events.push_back((self.epoch, event));
        self.epoch += 1;
    }

    /// From now on, a free that leaves chunks idle ends the epoch (the pool records an event right after it),
    /// so that those chunks are known safe to move once the device has run past it, with no wait later. Set
    /// once the pool has had to wait for idle chunks: on a device that keeps up, epochs end only when the
    /// pool looks for chunks to move, and frees record nothing.
    pub(super) fn end_epochs_at_frees(&mut self) {
        self.epochs_at_frees = true;
    }

    /// Whether frees that leave chunks idle end the epoch.
    pub(super) fn ends_epochs_at_frees(&self) -> bool {
        self.epochs_at_frees
    }

    /// Ended epochs whose events are not yet known complete.
    pub(super) fn pending_epochs(&self) -> usize {
        self.epoch_events.len()
    }

    /// The events of ended epochs not yet known complete, oldest first.
    pub(super) fn epoch_events(&self) -> impl Iterator<Item = (u32, EventId)> + '_ {
        self.epoch_events.iter().copied()
    }

    /// The oldest ended epoch, with its event, by whose end at least `need` of the idle chunks had gone idle:
    /// once its event completes, that many idle chunks are safe to move. `None` when fewer chunks are idle,
    /// or when some of those needed went idle in the current epoch (no event ends it yet).
    pub(super) fn epoch_covering(&self, need: usize) -> Option<(u32, EventId)> {
        let mut stamps: Vec<u32> = self.idle.runs_down().flatten().map(|index| self.idle_since[index]).collect();
        if need == 0 || stamps.len() < need {
            return None;
        }
        let (_, &mut newest_needed, _) = stamps.select_nth_unstable(need - 1);
        self.epoch_events.iter().copied().find(|&(epoch, _)| epoch >= newest_needed)
    }

    /// Records that the event ending `epoch` completed; returns the events of that epoch and earlier ones,
    /// to give back.
    pub(super) fn complete_through(&mut self, epoch: u32) -> Vec<EventId> {
        self.safe_through = self.safe_through.max(epoch);
        let mut done = Vec::new();
        while self.epoch_events.front().is_some_and(|&(e, _)| e <= epoch) {
            done.extend(self.epoch_events.pop_front().map(|(_, event)| event));
        }
        done
    }

    /// Records that the device finished all queued work: every chunk idle now is safe. Returns the events
    /// to give back.
    pub(super) fn device_idle(&mut self) -> Vec<EventId> {
        let through = self.epoch;
        self.epoch += 1;
        self.complete_through(through)
    }

    /// `run` extended forward by up to `extra` chunks that are neither mapped, nor retiring, nor touched by a
    /// block.
    pub(super) fn extend_run(&self, run: Range<usize>, extra: usize) -> Range<usize> {
        let mut end = run.end;
        while end < self.live.len()
            && end - run.end < extra
            && !self.mapped.contains(end)
            && !self.is_retiring(end)
            && self.live[end] == 0
        {
            end += 1;
        }
        run.start..end
    }

    /// Records the chunks of `runs`, mapped and idle, as aliased away: retiring until `event` completes.
    pub(super) fn retire(&mut self, runs: Vec<Range<usize>>, event: EventId) {
        for run in &runs {
            for index in run.clone() {
                debug_assert!(self.mapped.contains(index) && self.live[index] == 0, "chunk {index} is not idle");
                self.mapped.remove(index);
                self.idle.remove(index);
                self.retiring.insert(index);
            }
        }
        self.retirements.push(Retirement { runs, event });
    }

    /// Batches of retiring chunks, oldest first.
    pub(super) fn retirements(&self) -> &[Retirement] {
        &self.retirements
    }

    /// The positions in [`ChunkMap::retirements`] of the batches that hold a chunk of `runs`.
    pub(super) fn retirements_touching(&self, runs: &[Range<usize>]) -> Vec<usize> {
        let touched = |r: &Retirement| runs.iter().any(|run| r.touches(run));
        self.retirements.iter().enumerate().filter(|(_, r)| touched(r)).map(|(i, _)| i).collect()
    }

    /// Takes the batch at `position` of [`ChunkMap::retirements`]: its chunks are no longer retiring (the
    /// caller unmaps them).
    pub(super) fn finish_retirement(&mut self, position: usize) -> Retirement {
        let retirement = self.retirements.remove(position);
        for run in &retirement.runs {
            for index in run.clone() {
                self.retiring.remove(index);
            }
        }
        retirement
    }

    /// Whether chunk `index` is retiring.
    fn is_retiring(&self, index: usize) -> bool {
        self.retiring.contains(index)
    }

    /// Runs of mapped chunks, in order.
    pub(super) fn mapped_runs(&self) -> Vec<Range<usize>> {
        let all = 0..self.live.len();
        let mut runs: Vec<Range<usize>> = Vec::new();
        for index in all.filter(|&i| self.mapped.contains(i)) {
            match runs.last_mut() {
                Some(run) if run.end == index => run.end = index + 1,
                _ => runs.push(index..index + 1),
            }
        }
        runs
    }
}

/// The chunks in `runs`.
pub(super) fn chunk_count(runs: &[Range<usize>]) -> usize {
    runs.iter().map(|run| run.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::MIB;

    #[test]
    fn retiring_chunks_are_neither_mapped_nor_idle_until_finished() {
        let g = 1024;
        let mut v = ChunkMap::new(1 << 20, 16 * g, g);
        v.set_mapped(0..6, true);
        v.retire(vec![0..2, 4..5], EventId(9));
        assert_eq!((v.mapped_bytes(), v.idle_chunks()), (3 * g, 3));
        assert_eq!(v.idle_runs(8), vec![5..6, 2..4]);
        assert_eq!(v.extend_run(6..7, 3), 6..10);
        v.set_mapped(3..4, false);
        assert_eq!(v.extend_run(3..4, 3), 3..4, "a retiring chunk stops the extension");
        assert_eq!(v.retirements_touching(&[2..3, 3..4]), Vec::<usize>::new());
        assert_eq!(v.retirements_touching(&[1..2, 2..3]), vec![0]);
        assert_eq!(v.use_span((1 << 20) + g, g), vec![1..2], "a block on a retiring chunk finds it unbacked");
        let done = v.finish_retirement(0);
        assert_eq!(done, Retirement { runs: vec![0..2, 4..5], event: EventId(9) });
        assert!(v.retirements().is_empty());
        assert_eq!(v.extend_run(3..4, 3), 3..5, "no longer retiring");
    }

    /// Pages of several sizes: a page of `2^k` chunks is idle only when all its chunks are, is found from any
    /// of its chunks, and a slot takes pages only where nothing is mapped, retiring or used by another block.
    #[test]
    fn pages_are_idle_whole_and_slots_are_free_only_around_the_block() {
        let g = 1024;
        let mut v = ChunkMap::new(0, 32 * g, g);
        v.set_mapped_pages(0..4, 2);
        v.set_mapped_pages(4..6, 1);
        v.set_mapped_pages(6..7, 0);
        assert_eq!((v.page_at(2), v.page_at(5), v.page_at(6)), (0..4, 4..6, 6..7));
        assert_eq!(v.pages_of(0..7), vec![0..4, 4..6, 6..7]);
        assert_eq!(v.idle_pages(usize::MAX, false), vec![6..7, 4..6, 0..4]);
        assert_eq!(v.idle_pages(3, false), vec![6..7, 4..6], "a page that would pass the limit is left out");
        v.use_span(3 * g, 10);
        assert_eq!(v.idle_pages(usize::MAX, false), vec![6..7, 4..6], "a page a block touches is not idle");
        assert_eq!(v.idle_chunks(), 6, "three of its chunks are, one by one");
        let block = v.chunks_of(8 * g, 2 * g);
        v.use_span(8 * g, 2 * g);
        assert!(v.slot_is_free(&(8..10), &block), "the block's own unmapped chunks");
        assert!(v.slot_is_free(&(8..12), &block), "and free chunks beside them");
        assert!(!v.slot_is_free(&(4..8), &block), "mapped chunks");
        v.use_span(12 * g, 10);
        assert!(!v.slot_is_free(&(8..16), &block), "a chunk another block uses");
        assert!(!v.slot_is_free(&(30..34), &block), "past the range");
        assert_eq!(v.unbacked_in(7 * g, 3 * g), (3, false));
        assert_eq!(v.unmapped_runs(0..12), vec![7..12]);
        assert_eq!(v.mapped_within(g / 2, 10 * g, 4), vec![g..7 * g], "whole chunks only");
        v.set_mapped_like(std::slice::from_ref(&(4..6)), 8);
        assert_eq!((v.page_at(9), v.mapped_bytes()), (8..10, 9 * g));
        v.set_mapped(4..6, false);
        v.retire(std::iter::once(6..7).collect(), EventId(3));
        assert_eq!(v.unbacked_in(6 * g, g), (1, true));
        assert!(!v.slot_is_free(&(6..7), &(6..7)), "a retiring chunk");
    }

    #[test]
    fn live_blocks_keep_chunks_busy() {
        let g = 1024;
        let mut v = ChunkMap::new(1 << 20, 16 * g, g);
        v.set_mapped(0..4, true);
        assert_eq!(v.idle_chunks(), 4);
        // A block over chunks 3..6: chunk 3 is mapped, 4 and 5 are not.
        assert_eq!(v.use_span((1 << 20) + 3 * g + 100, 2 * g), vec![4..6]);
        assert_eq!(v.idle_chunks(), 3);
        v.set_mapped(4..6, true);
        assert_eq!(v.idle_chunks(), 3);
        v.release_span((1 << 20) + 3 * g + 100, 2 * g);
        assert_eq!(v.idle_chunks(), 6);
        assert_eq!(v.idle_runs(4), vec![2..6]);
        assert_eq!(v.extend_run(6..7, 3), 6..10);
        assert_eq!(v.extend_run(1..3, 3), 1..3, "mapped chunks stop the extension");
        assert_eq!(v.mapped_runs(), vec![0..6]);
        assert_eq!(v.mapped_bytes(), 6 * g);
    }

    proptest::proptest! {
        /// Blocks of one to 150 chunks (both ways of counting, words crossed), used and released in any order
        /// over a range partly mapped: the live, idle and unmapped chunks are those of a chunk-by-chunk model,
        /// and a chunk that goes idle is stamped with the epoch it went idle in.
        #[test]
        fn spans_of_any_length_count_as_chunk_by_chunk(
            blocks in proptest::collection::vec((0usize..250, 1usize..150, proptest::bool::ANY), 1..40),
            mapped_upto in 0usize..400,
        ) {
            let (g, chunks) = (1024u64, 400usize);
            let mut v = ChunkMap::new(0, chunks as u64 * g, g);
            v.set_mapped(0..mapped_upto, true);
            let mut live = vec![0u32; chunks];
            let mut held: Vec<(usize, usize)> = Vec::new();
            for (start, len, release_one) in blocks {
                if release_one && !held.is_empty() {
                    let (start, len) = held.swap_remove(start % held.len());
                    v.end_epoch(EventId(start as u64));
                    v.release_span(start as u64 * g, len as u64 * g);
                    for (index, count) in live.iter_mut().enumerate().skip(start).take(len) {
                        *count -= 1;
                        if *count == 0 && index < mapped_upto {
                            proptest::prop_assert_eq!(v.idle_since[index], v.epoch, "chunk {}", index);
                        }
                    }
                } else {
                    let gaps = v.use_span(start as u64 * g + 1, len as u64 * g - 1);
                    let unmapped = (start..start + len).filter(|&i| i >= mapped_upto).count();
                    proptest::prop_assert_eq!(gaps.iter().map(|r| r.len()).sum::<usize>(), unmapped);
                    live[start..start + len].iter_mut().for_each(|c| *c += 1);
                    held.push((start, len));
                }
                proptest::prop_assert_eq!(&v.live, &live);
                let idle: Vec<usize> = (0..mapped_upto).filter(|&i| live[i] == 0).collect();
                proptest::prop_assert_eq!(v.idle_chunks(), idle.len());
                let mut runs: Vec<usize> = v.idle_runs(usize::MAX).into_iter().flatten().collect();
                runs.sort_unstable();
                proptest::prop_assert_eq!(runs, idle);
            }
        }
    }

    #[test]
    fn chunks_of_a_granularity_not_a_power_of_two_are_found_by_division() {
        let g = 3 * 1024;
        let mut v = ChunkMap::new(1 << 20, 10 * g, g);
        v.set_mapped(0..3, true);
        assert_eq!(v.use_span((1 << 20) + 2 * g + 5, g), vec![3..4], "chunks 2 and 3, 3 unmapped");
        assert_eq!(v.use_span((1 << 20) + g, g), Vec::<Range<usize>>::new(), "chunk 1 exactly");
        assert_eq!(v.idle_chunks(), 1);
        v.release_span((1 << 20) + g, g);
        assert_eq!(v.idle_runs(10), vec![0..2]);
    }

    /// The event to wait for is the oldest that makes enough idle chunks safe, not the newest.
    #[test]
    fn the_epoch_covering_a_need_is_the_oldest_whose_end_makes_enough_chunks_safe() {
        let g = 2 * MIB;
        let mut v = ChunkMap::new(0, 64 * g, g);
        v.set_mapped(0..10, true);
        v.use_span(0, 10 * g);
        v.release_span(0, 3 * g); // 3 chunks idle in epoch 1
        v.end_epoch(EventId(11));
        v.release_span(3 * g, 4 * g); // 4 more in epoch 2
        v.end_epoch(EventId(12));
        v.release_span(7 * g, g); // 1 more in epoch 3, not ended
        assert_eq!(v.epoch_covering(2), Some((1, EventId(11))));
        assert_eq!(v.epoch_covering(3), Some((1, EventId(11))));
        assert_eq!(v.epoch_covering(4), Some((2, EventId(12))));
        assert_eq!(v.epoch_covering(7), Some((2, EventId(12))));
        assert_eq!(v.epoch_covering(8), None, "the 8th went idle in an epoch no event ends yet");
        assert_eq!(v.epoch_covering(0), None);
        for event in v.complete_through(1) {
            assert_eq!(event, EventId(11));
        }
        assert_eq!(v.safe_idle_runs(usize::MAX).iter().map(|r| r.len()).sum::<usize>(), 3);
        assert_eq!(v.epoch_covering(5), Some((2, EventId(12))));
    }

    #[test]
    fn chunks_idle_since_an_ended_epoch_are_safe_once_its_event_completes() {
        let g = 1024;
        let mut v = ChunkMap::new(0, 8 * g, g);
        v.set_mapped(0..4, true);
        assert_eq!(v.safe_idle_runs(10), vec![0..4], "fresh chunks are safe");
        v.use_span(0, 2 * g);
        v.release_span(0, g);
        assert_eq!(v.safe_idle_runs(10), vec![2..4], "chunk 0 was just freed");
        v.end_epoch(EventId(7));
        v.release_span(g, g);
        assert_eq!(v.epoch_events().collect::<Vec<_>>(), vec![(1, EventId(7))]);
        assert_eq!(v.complete_through(1), vec![EventId(7)]);
        assert_eq!(v.safe_idle_runs(10), vec![2..4, 0..1], "chunk 1 became idle after the event");
        assert!(v.device_idle().is_empty());
        assert_eq!(v.safe_idle_runs(10), vec![0..4]);
    }
}
