//! A set of chunk indices as a bitmap, with the runs of contiguous members.

use std::ops::Range;

/// A set of chunk indices in `0..len`.
#[derive(Clone, Debug)]
pub(super) struct ChunkSet {
    words: Vec<u64>,
    count: usize,
    /// No word above this one holds a member (searches from the top start here).
    top_word: usize,
}

impl ChunkSet {
    /// An empty set over `len` chunks.
    pub(super) fn new(len: usize) -> Self {
        ChunkSet { words: vec![0; len.div_ceil(64)], count: 0, top_word: 0 }
    }

    /// Members.
    pub(super) fn count(&self) -> usize {
        self.count
    }

    #[inline]
    pub(super) fn contains(&self, index: usize) -> bool {
        self.words[index / 64] & (1 << (index % 64)) != 0
    }

    #[inline]
    pub(super) fn insert(&mut self, index: usize) {
        let word = &mut self.words[index / 64];
        let bit = 1 << (index % 64);
        if *word & bit == 0 {
            *word |= bit;
            self.count += 1;
            self.top_word = self.top_word.max(index / 64);
        }
    }

    #[inline]
    pub(super) fn remove(&mut self, index: usize) {
        let word = &mut self.words[index / 64];
        let bit = 1 << (index % 64);
        if *word & bit != 0 {
            *word &= !bit;
            self.count -= 1;
        }
    }

    /// Whether every index of `range` is a member.
    #[inline]
    pub(super) fn contains_run(&self, range: Range<usize>) -> bool {
        word_masks(range).all(|(w, mask)| self.words[w] & mask == mask)
    }

    /// Members among the indices of `range`.
    #[inline]
    pub(super) fn count_in(&self, range: Range<usize>) -> usize {
        word_masks(range).map(|(w, mask)| (self.words[w] & mask).count_ones() as usize).sum()
    }

    /// The first `max` runs of members inside `range`, in order (cut at the range's ends).
    pub(super) fn runs_in(&self, range: Range<usize>, max: usize) -> Vec<Range<usize>> {
        let mut runs: Vec<Range<usize>> = Vec::new();
        // No word above the top one holds a member.
        let end = range.end.min((self.top_word + 1) * 64);
        for (w, mask) in word_masks(range.start..end.max(range.start)) {
            let mut bits = self.words[w] & mask;
            while bits != 0 {
                let low = bits.trailing_zeros() as usize;
                let len = (!(bits >> low)).trailing_zeros() as usize;
                let (start, end) = (w * 64 + low, w * 64 + low + len);
                if let Some(run) = runs.last_mut()
                    && run.end == start
                {
                    run.end = end;
                } else if runs.len() == max {
                    return runs;
                } else {
                    runs.push(start..end);
                }
                bits &= if low + len >= 64 { 0 } else { !0u64 << (low + len) };
            }
        }
        runs
    }

    /// Removes every index of `range`.
    #[inline]
    pub(super) fn remove_run(&mut self, range: Range<usize>) {
        for (w, mask) in word_masks(range) {
            let word = &mut self.words[w];
            self.count -= (*word & mask).count_ones() as usize;
            *word &= !mask;
        }
    }

    /// The members among indices `64 * w .. 64 * w + 64`, as bits.
    #[inline]
    pub(super) fn word(&self, w: usize) -> u64 {
        self.words[w]
    }

    /// Adds the indices `64 * w + b` for each bit `b` set in `bits`.
    #[inline]
    pub(super) fn insert_word(&mut self, w: usize, bits: u64) {
        let word = &mut self.words[w];
        self.count += (bits & !*word).count_ones() as usize;
        *word |= bits;
        if bits != 0 {
            self.top_word = self.top_word.max(w);
        }
    }

    /// Runs of members, from the highest index down, holding at most `limit` members in all.
    pub(super) fn runs_from_top(&self, limit: usize) -> Vec<Range<usize>> {
        let mut runs: Vec<Range<usize>> = Vec::new();
        let mut taken = 0;
        if self.count == 0 {
            return runs;
        }
        for (w, &word) in self.words[..=self.top_word].iter().enumerate().rev() {
            let mut bits = word;
            while bits != 0 && taken < limit {
                let top = 63 - bits.leading_zeros() as usize;
                bits &= !(1 << top);
                let index = w * 64 + top;
                match runs.last_mut() {
                    Some(run) if run.start == index + 1 => run.start = index,
                    _ => runs.push(index..index + 1),
                }
                taken += 1;
            }
            if taken >= limit {
                break;
            }
        }
        runs
    }

    /// Runs of non-members inside `range`, in order.
    pub(super) fn gaps_in(&self, range: Range<usize>) -> Vec<Range<usize>> {
        let mut gaps: Vec<Range<usize>> = Vec::new();
        for index in range {
            if !self.contains(index) {
                match gaps.last_mut() {
                    Some(gap) if gap.end == index => gap.end = index + 1,
                    _ => gaps.push(index..index + 1),
                }
            }
        }
        gaps
    }
}

/// The words that `range` touches, each with the bits of its indices inside `range`.
#[inline]
pub(super) fn word_masks(range: Range<usize>) -> impl Iterator<Item = (usize, u64)> {
    let (start, end) = (range.start, range.end);
    let words = if start < end { start / 64..end.div_ceil(64) } else { 0..0 };
    words.map(move |w| {
        let lo = start.max(w * 64) - w * 64;
        let hi = end.min(w * 64 + 64) - w * 64;
        let mask = if hi - lo == 64 { u64::MAX } else { ((1u64 << (hi - lo)) - 1) << lo };
        (w, mask)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_gaps() {
        let mut s = ChunkSet::new(200);
        for i in [1, 2, 3, 63, 64, 65, 150] {
            s.insert(i);
        }
        s.insert(2);
        assert_eq!(s.count(), 7);
        assert_eq!(s.runs_from_top(100), vec![150..151, 63..66, 1..4]);
        assert_eq!(s.runs_from_top(3), vec![150..151, 64..66]);
        assert_eq!(s.gaps_in(0..5), vec![0..1, 4..5]);
        s.remove(64);
        s.remove(64);
        assert_eq!(s.count(), 6);
        assert_eq!(s.gaps_in(62..67), vec![62..63, 64..65, 66..67]);
        s.remove(150);
        assert_eq!(s.runs_from_top(2), vec![65..66, 63..64], "a stale top hint only costs a longer search");
    }

    #[test]
    fn runs_of_indices_are_handled_a_word_at_a_time() {
        assert_eq!(word_masks(3..5).collect::<Vec<_>>(), vec![(0, 0b11000)]);
        assert_eq!(word_masks(60..130).collect::<Vec<_>>(), vec![(0, 0xF << 60), (1, u64::MAX), (2, 0b11)]);
        assert_eq!(word_masks(64..128).collect::<Vec<_>>(), vec![(1, u64::MAX)]);
        assert_eq!(word_masks(7..7).count(), 0);
        let mut s = ChunkSet::new(300);
        for i in 50..140 {
            s.insert(i);
        }
        assert!(s.contains_run(50..140) && s.contains_run(63..65) && !s.contains_run(49..51));
        assert!(s.contains_run(10..10), "every index of an empty run");
        assert_eq!((s.count_in(40..70), s.count_in(0..300), s.count_in(10..10)), (20, 90, 0));
        assert_eq!(s.runs_in(0..300, 5), vec![50..140]);
        assert_eq!(s.runs_in(60..130, 5), vec![60..130]);
        s.remove(100);
        assert_eq!(s.runs_in(0..300, 5), vec![50..100, 101..140]);
        assert_eq!(s.runs_in(0..300, 1), vec![50..100]);
        s.remove_run(60..130);
        assert_eq!((s.count(), s.runs_from_top(100)), (20, vec![130..140, 50..60]));
        s.insert_word(1, 0b101);
        s.insert_word(1, 0b1);
        assert_eq!((s.count(), s.contains(64), s.contains(65), s.contains(66)), (22, true, false, true));
        assert_eq!(s.word(1), 0b101);
        s.insert_word(4, 1);
        assert_eq!(s.runs_from_top(1), vec![256..257], "the top hint follows a word insert");
    }
}
