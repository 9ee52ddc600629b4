//! Where pages go to back a block: which idle pages cover which of its unbacked chunks, and which new
//! pages cover the rest. A page of `2^k` chunks always starts at a multiple of `2^k` chunks (its slot), so
//! that the page of any chunk is found from the chunk alone.

use std::collections::BTreeMap;
use std::ops::Range;

/// The slots taken by the pages of one backing, so that no two pages land on the same chunks.
#[derive(Clone, Debug, Default)]
pub(super) struct Claims {
    /// Slot start → slot end; slots never overlap.
    slots: BTreeMap<usize, usize>,
}

impl Claims {
    /// Whether a claimed slot holds chunk `index`.
    pub(super) fn covers(&self, index: usize) -> bool {
        self.slots.range(..=index).next_back().is_some_and(|(_, &end)| end > index)
    }

    /// Whether a claimed slot shares a chunk with `slot`.
    fn overlaps(&self, slot: &Range<usize>) -> bool {
        self.slots.range(..slot.end).next_back().is_some_and(|(_, &end)| end > slot.start)
    }

    /// Takes `slot`.
    fn claim(&mut self, slot: &Range<usize>) {
        self.slots.insert(slot.start, slot.end);
    }
}

/// What a block being backed still lacks: its chunks not backed yet, and the slots the pages given to it
/// have taken so far.
#[derive(Debug)]
pub(super) struct Shortfall {
    /// The block's chunks.
    pub(super) block: Range<usize>,
    /// Its chunks not backed yet, in runs.
    pub(super) missing: Vec<Range<usize>>,
    /// The slots its pages took.
    pub(super) claims: Claims,
}

impl Shortfall {
    /// A block on the chunks `block` that lacks the runs `missing`.
    pub(super) fn new(block: Range<usize>, missing: Vec<Range<usize>>) -> Self {
        Shortfall { block, missing, claims: Claims::default() }
    }
}

/// The slot of a page of `2^order` chunks that holds chunk `index`.
pub(super) fn slot_of(index: usize, order: u32) -> Range<usize> {
    let len = 1usize << order;
    let start = index & !(len - 1);
    start..start + len
}

/// A page moved or aliased from `from` to the slot starting at `to`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PageMove {
    /// The page's chunks where it is mapped now.
    pub(super) from: Range<usize>,
    /// The first chunk of its slot.
    pub(super) to: usize,
}

/// Pairs the whole pages of `sources` with the chunks of `missing` (in order): each chunk no claim covers
/// yet takes the largest source page whose slot around it `free` accepts and no claim overlaps. Among pages
/// of one size, the one that continues the previous move on both sides is taken first (one device call
/// for both), else the first of the highest run of them. Returns the moves in the order chosen; their slots are claimed.
pub(super) fn cover(
    sources: Vec<Range<usize>>,
    missing: &[Range<usize>],
    claims: &mut Claims,
    free: impl Fn(&Range<usize>) -> bool,
) -> Vec<PageMove> {
    // Per page size (log2 of its chunks, ascending), the first chunks of the pages of that size, ascending: a
    // few sizes, and lists sorted once, where maps would cost an allocation per page.
    let mut by_order: Vec<(u32, Vec<usize>)> = Vec::new();
    for page in sources {
        let order = page.len().ilog2();
        match by_order.iter_mut().find(|(o, _)| *o == order) {
            Some((_, starts)) => starts.push(page.start),
            None => by_order.push((order, vec![page.start])),
        }
    }
    by_order.sort_unstable_by_key(|&(order, _)| order);
    for (_, starts) in &mut by_order {
        starts.sort_unstable();
        starts.dedup();
    }
    let mut moves: Vec<PageMove> = Vec::new();
    for index in missing.iter().cloned().flatten() {
        if claims.covers(index) {
            continue;
        }
        for (order, pages) in by_order.iter_mut().rev() {
            if pages.is_empty() {
                continue;
            }
            let slot = slot_of(index, *order);
            if claims.overlaps(&slot) || !free(&slot) {
                continue;
            }
            let next = moves.last().filter(|last| last.to + last.from.len() == slot.start).map(|last| last.from.end);
            let position = match next.and_then(|start| pages.binary_search(&start).ok()) {
                Some(position) => position,
                None => lowest_of_top_run(pages, slot.len()),
            };
            let start = pages.remove(position);
            claims.claim(&slot);
            moves.push(PageMove { from: start..start + slot.len(), to: slot.start });
            break;
        }
    }
    moves
}

/// Where in `pages` (first chunks, ascending, not empty) the highest run of pages of `len` chunks that follow
/// on starts: the moves that start there go on to the pages above it, as the slots they fill go up.
fn lowest_of_top_run(pages: &[usize], len: usize) -> usize {
    let mut position = pages.len() - 1;
    while let Some(below) =
        pages[position].checked_sub(len).and_then(|start| pages[..position].binary_search(&start).ok())
    {
        position = below;
    }
    position
}

/// New pages for the chunks of `missing` that no claim covers: for each, the largest page of at most
/// `2^order` chunks whose slot `free` accepts and no claim overlaps (a page of one chunk always fits a chunk
/// that `free` accepts). Returns the slots in order; they are claimed.
pub(super) fn new_pages(
    missing: &[Range<usize>],
    order: u32,
    claims: &mut Claims,
    free: impl Fn(&Range<usize>) -> bool,
) -> Vec<Range<usize>> {
    let mut pages = Vec::new();
    for index in missing.iter().cloned().flatten() {
        if claims.covers(index) {
            continue;
        }
        let found = (0..=order).rev().map(|k| slot_of(index, k)).find(|slot| !claims.overlaps(slot) && free(slot));
        if let Some(slot) = found {
            claims.claim(&slot);
            pages.push(slot);
        }
    }
    pages
}

/// The moves in batches a device call each: consecutive moves whose pages and slots both follow on.
pub(super) fn move_batches(moves: &[PageMove]) -> Vec<&[PageMove]> {
    let mut batches = Vec::new();
    let mut start = 0;
    for i in 1..=moves.len() {
        let continues = i < moves.len()
            && moves[i].from.start == moves[i - 1].from.end
            && moves[i].to == moves[i - 1].to + moves[i - 1].from.len();
        if !continues {
            batches.push(&moves[start..i]);
            start = i;
        }
    }
    batches
}

/// The new pages in batches a device call each: consecutive pages that follow on.
pub(super) fn page_batches(pages: &[Range<usize>]) -> Vec<&[Range<usize>]> {
    let mut batches = Vec::new();
    let mut start = 0;
    for i in 1..=pages.len() {
        let continues = i < pages.len() && pages[i].start == pages[i - 1].end;
        if !continues {
            batches.push(&pages[start..i]);
            start = i;
        }
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_start_at_multiples_of_their_size() {
        assert_eq!(slot_of(13, 0), 13..14);
        assert_eq!(slot_of(13, 2), 12..16);
        assert_eq!(slot_of(13, 4), 0..16);
    }

    #[test]
    fn the_largest_page_whose_slot_is_free_covers_each_chunk() {
        // Chunks 8..10 are missing; chunk 11 is taken, so a page of 4 (8..12) does not fit, pages of 2 do.
        let taken = |slot: &Range<usize>| slot.contains(&11);
        let mut claims = Claims::default();
        let sources = vec![40..44, 20..22, 30..31];
        let moves = cover(sources, std::slice::from_ref(&(8..10)), &mut claims, |slot| !taken(slot));
        assert_eq!(moves, vec![PageMove { from: 20..22, to: 8 }]);
        assert!(claims.covers(9) && !claims.covers(10));
        // With nothing taken, the page of 4 covers both (and two free chunks beyond).
        let mut claims = Claims::default();
        let moves = cover(vec![40..44, 20..22], std::slice::from_ref(&(8..10)), &mut claims, |_| true);
        assert_eq!(moves, vec![PageMove { from: 40..44, to: 8 }]);
    }

    #[test]
    fn moves_that_follow_on_both_sides_make_one_batch() {
        let mut claims = Claims::default();
        let moves = cover(vec![50..51, 7..8, 6..7, 5..6], std::slice::from_ref(&(2..5)), &mut claims, |_| true);
        assert_eq!(moves.iter().map(|m| (m.from.start, m.to)).collect::<Vec<_>>(), vec![(50, 2), (5, 3), (6, 4)]);
        let batches = move_batches(&moves);
        assert_eq!(batches.iter().map(|b| b.len()).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(move_batches(&[]).len(), 0);
    }

    #[test]
    fn new_pages_are_as_large_as_their_slots_allow() {
        let mut claims = Claims::default();
        claims.claim(&(3..4));
        // Chunk 0..3 missing beside a claimed chunk 3: pages of 2 (0..2) and 1 (2..3); 5 gets a page of 4.
        let pages = new_pages(&[0..3, 5..6], 2, &mut claims, |_| true);
        assert_eq!(pages, vec![0..2, 2..3, 4..8]);
        assert_eq!(page_batches(&pages).iter().map(|b| b.len()).collect::<Vec<_>>(), vec![2, 1]);
        let even = [0..2, 2..4, 4..6, 8..10];
        assert_eq!(page_batches(&even).iter().map(|b| b.len()).collect::<Vec<_>>(), vec![3, 1]);
    }

    /// [`cover`] as first written, with ordered maps: the reference the lists must agree with.
    fn cover_with_maps(
        sources: Vec<Range<usize>>,
        missing: &[Range<usize>],
        claims: &mut Claims,
        free: impl Fn(&Range<usize>) -> bool,
    ) -> Vec<PageMove> {
        let mut by_order: BTreeMap<u32, BTreeMap<usize, ()>> = BTreeMap::new();
        for page in sources {
            by_order.entry(page.len().ilog2()).or_default().insert(page.start, ());
        }
        let mut moves: Vec<PageMove> = Vec::new();
        for index in missing.iter().cloned().flatten() {
            if claims.covers(index) {
                continue;
            }
            for (&order, pages) in by_order.iter_mut().rev() {
                if pages.is_empty() {
                    continue;
                }
                let slot = slot_of(index, order);
                if claims.overlaps(&slot) || !free(&slot) {
                    continue;
                }
                let next =
                    moves.last().filter(|last| last.to + last.from.len() == slot.start).map(|last| last.from.end);
                let start = match next.filter(|start| pages.contains_key(start)) {
                    Some(start) => start,
                    None => {
                        let mut start = *pages.keys().next_back().expect("not empty");
                        while start >= slot.len() && pages.contains_key(&(start - slot.len())) {
                            start -= slot.len();
                        }
                        start
                    }
                };
                pages.remove(&start);
                claims.claim(&slot);
                moves.push(PageMove { from: start..start + slot.len(), to: slot.start });
                break;
            }
        }
        moves
    }

    proptest::proptest! {
        #[test]
        fn the_lists_pick_the_pages_the_maps_picked(
            pages in proptest::collection::vec((0usize..64, 0u32..4), 0..40),
            missing in proptest::collection::vec((0usize..256, 1usize..12), 0..5),
            taken in proptest::collection::vec(0usize..256, 0..6),
            claimed in proptest::collection::vec((0usize..64, 0u32..3), 0..3),
        ) {
            // Pages at their slots (as the pool maps them) and a few that are not, above the missing chunks.
            let sources: Vec<Range<usize>> = pages
                .iter()
                .enumerate()
                .map(|(i, &(at, order))| {
                    let len = 1usize << order;
                    let start = if i % 5 == 4 { 300 + at } else { 300 + (at << order) };
                    start..start + len
                })
                .collect();
            let missing: Vec<Range<usize>> = missing.iter().map(|&(at, len)| at..at + len).collect();
            let free = |slot: &Range<usize>| !taken.iter().any(|t| slot.contains(t));
            let mut claims = Claims::default();
            for &(at, order) in &claimed {
                claims.claim(&slot_of(at << order, order));
            }
            let mut reference_claims = claims.clone();
            let moves = cover(sources.clone(), &missing, &mut claims, free);
            let reference = cover_with_maps(sources, &missing, &mut reference_claims, free);
            proptest::prop_assert_eq!(moves, reference);
            proptest::prop_assert_eq!(claims.slots, reference_claims.slots);
        }
    }
}
