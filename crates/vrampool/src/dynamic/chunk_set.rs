//! A set of chunk indices as a bitmap, with the runs of contiguous members.

use std::ops::Range;

/// A set of chunk indices in `0..len`.
#[derive(Clone, Debug)]
pub(crate) struct ChunkSet {
    words: Vec<u64>,
    count: usize,
    /// No word above this one holds a member (searches from the top start here).
    top_word: usize,
}

impl ChunkSet {
    /// An empty set over `len` chunks.
    pub(crate) fn new(len: usize) -> Self {
        ChunkSet { words: vec![0; len.div_ceil(64)], count: 0, top_word: 0 }
    }

    /// Members.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    #[inline]
    pub(crate) fn contains(&self, index: usize) -> bool {
        self.words[index / 64] & (1 << (index % 64)) != 0
    }

    #[inline]
    pub(crate) fn insert(&mut self, index: usize) {
        let word = &mut self.words[index / 64];
        let bit = 1 << (index % 64);
        if *word & bit == 0 {
            *word |= bit;
            self.count += 1;
            self.top_word = self.top_word.max(index / 64);
        }
    }

    #[inline]
    pub(crate) fn remove(&mut self, index: usize) {
        let word = &mut self.words[index / 64];
        let bit = 1 << (index % 64);
        if *word & bit != 0 {
            *word &= !bit;
            self.count -= 1;
        }
    }

    /// Runs of members, from the highest index down, holding at most `limit` members in all.
    pub(crate) fn runs_from_top(&self, limit: usize) -> Vec<Range<usize>> {
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
    pub(crate) fn gaps_in(&self, range: Range<usize>) -> Vec<Range<usize>> {
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
}
