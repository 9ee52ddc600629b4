//! A set of chunk indices as a bitmap, with the runs of contiguous members.

use std::ops::Range;

/// A set of chunk indices in `0..len`: a bit per index, and a bit per word of those telling whether the word
/// holds a member, so that searches for runs step over empty stretches 4,096 indices at a time.
#[derive(Clone, Debug)]
pub(super) struct ChunkSet {
    words: Vec<u64>,
    /// Bit `w` is set where `words[w]` holds a member.
    nonzero: Vec<u64>,
    count: usize,
}

impl ChunkSet {
    /// An empty set over `len` chunks.
    pub(super) fn new(len: usize) -> Self {
        let words = len.div_ceil(64);
        ChunkSet { words: vec![0; words], nonzero: vec![0; words.div_ceil(64)], count: 0 }
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
            self.note_word(index / 64);
        }
    }

    #[inline]
    pub(super) fn remove(&mut self, index: usize) {
        let word = &mut self.words[index / 64];
        let bit = 1 << (index % 64);
        if *word & bit != 0 {
            *word &= !bit;
            self.count -= 1;
            self.note_word(index / 64);
        }
    }

    /// Brings word `w`'s bit of the summary up to date with the word.
    #[inline]
    fn note_word(&mut self, w: usize) {
        let bit = 1 << (w % 64);
        if self.words[w] == 0 {
            self.nonzero[w / 64] &= !bit;
        } else {
            self.nonzero[w / 64] |= bit;
        }
    }

    /// The first word at or after `w` and before `end` that holds a member.
    #[inline]
    fn nonzero_from(&self, w: usize, end: usize) -> Option<usize> {
        if w >= end {
            return None;
        }
        let mut s = w / 64;
        let mut bits = self.nonzero[s] & (!0u64 << (w % 64));
        loop {
            if bits != 0 {
                let found = s * 64 + bits.trailing_zeros() as usize;
                return (found < end).then_some(found);
            }
            s += 1;
            if s * 64 >= end {
                return None;
            }
            bits = self.nonzero[s];
        }
    }

    /// The last word before `w` that holds a member.
    #[inline]
    fn nonzero_below(&self, w: usize) -> Option<usize> {
        let top = w.checked_sub(1)?;
        let mut s = top / 64;
        let mut bits = self.nonzero[s] & (u64::MAX >> (63 - top % 64));
        loop {
            if bits != 0 {
                return Some(s * 64 + 63 - bits.leading_zeros() as usize);
            }
            s = s.checked_sub(1)?;
            bits = self.nonzero[s];
        }
    }

    /// Whether every index of `range` is a member.
    #[inline]
    pub(super) fn contains_run(&self, range: Range<usize>) -> bool {
        if let Some((w, mask)) = one_word(&range) {
            return self.words[w] & mask == mask;
        }
        word_masks(range).all(|(w, mask)| self.words[w] & mask == mask)
    }

    /// Members among the indices of `range`.
    #[inline]
    pub(super) fn count_in(&self, range: Range<usize>) -> usize {
        if let Some((w, mask)) = one_word(&range) {
            return (self.words[w] & mask).count_ones() as usize;
        }
        word_masks(range).map(|(w, mask)| (self.words[w] & mask).count_ones() as usize).sum()
    }

    /// The first `max` runs of members inside `range`, in order (cut at the range's ends). Costs a step per
    /// run and per word holding members, and one per 64 words of the range.
    pub(super) fn runs_in(&self, range: Range<usize>, max: usize) -> Vec<Range<usize>> {
        let mut runs: Vec<Range<usize>> = Vec::with_capacity(max.min(RUNS_RESERVED));
        if range.start >= range.end || max == 0 {
            return runs;
        }
        let (first_word, end_word) = (range.start / 64, range.end.div_ceil(64));
        let mut next = first_word;
        while let Some(w) = self.nonzero_from(next, end_word) {
            next = w + 1;
            let mut bits = self.words[w];
            if w == first_word {
                bits &= !0u64 << (range.start % 64);
            }
            if w == end_word - 1 && range.end % 64 != 0 {
                bits &= (1u64 << (range.end % 64)) - 1;
            }
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
            self.note_word(w);
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
        self.note_word(w);
    }

    /// Runs of members, from the highest index down, holding at most `limit` members in all (the last one
    /// cut to its top part where the limit falls inside it).
    pub(super) fn runs_from_top(&self, limit: usize) -> Vec<Range<usize>> {
        let mut runs: Vec<Range<usize>> = Vec::new();
        let mut taken = 0;
        for run in self.runs_down() {
            if taken >= limit {
                break;
            }
            let run = run.end.saturating_sub(limit - taken).max(run.start)..run.end;
            taken += run.len();
            runs.push(run);
        }
        runs
    }

    /// Every run of members, from the highest index down. Costs a step per run and per word holding
    /// members, and one per 64 words below the top member.
    pub(super) fn runs_down(&self) -> RunsDown<'_> {
        RunsDown { set: self, next_word: self.words.len(), bits: 0, word: 0 }
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

/// The most runs [`ChunkSet::runs_in`] makes room for before it looks.
const RUNS_RESERVED: usize = 16;

/// The one word a non-empty `range` lies in, with the bits of its indices; `None` for an empty range or one
/// that spans words (most ranges a block covers lie in one word).
#[inline]
fn one_word(range: &Range<usize>) -> Option<(usize, u64)> {
    let len = range.end.checked_sub(range.start).filter(|&len| len > 0)?;
    let w = range.start / 64;
    ((range.end - 1) / 64 == w).then(|| (w, (u64::MAX >> (64 - len)) << (range.start % 64)))
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

/// The runs of members of a [`ChunkSet`], from the highest index down ([`ChunkSet::runs_down`]).
pub(super) struct RunsDown<'a> {
    set: &'a ChunkSet,
    /// Words at and above this one are done.
    next_word: usize,
    /// The members of word `word` not yet handed out.
    bits: u64,
    word: usize,
}

impl RunsDown<'_> {
    /// The highest run of members left in the current word, removed from it, or `None` when it has none.
    fn piece(&mut self) -> Option<Range<usize>> {
        if self.bits == 0 {
            return None;
        }
        let top = 63 - self.bits.leading_zeros() as usize;
        let gaps = !self.bits & (u64::MAX >> (63 - top));
        let low = if gaps == 0 { 0 } else { 64 - gaps.leading_zeros() as usize };
        self.bits &= if low == 0 { 0 } else { (1u64 << low) - 1 };
        Some(self.word * 64 + low..self.word * 64 + top + 1)
    }

    /// Makes word `w` current.
    fn enter(&mut self, w: usize) {
        (self.next_word, self.word, self.bits) = (w, w, self.set.words[w]);
    }
}

impl Iterator for RunsDown<'_> {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        let mut run = match self.piece() {
            Some(run) => run,
            None => {
                let w = self.set.nonzero_below(self.next_word)?;
                self.enter(w);
                self.piece().expect("a word with members")
            }
        };
        // A run that reaches the bottom of its word goes on in the word below where that word's top bit is set.
        while run.start % 64 == 0 && self.bits == 0 && run.start > 0 {
            let below = run.start / 64 - 1;
            if self.set.words[below] >> 63 == 0 {
                break;
            }
            self.enter(below);
            run.start = self.piece().expect("its top bit is set").start;
        }
        Some(run)
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
        assert_eq!(s.runs_from_top(2), vec![65..66, 63..64]);
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
        assert_eq!(s.runs_from_top(1), vec![256..257], "a word inserted is found from the top");
    }

    /// Runs of the members of `set` among `indices`, in order, one member at a time.
    fn runs_one_by_one(set: &ChunkSet, indices: impl Iterator<Item = usize>) -> Vec<Range<usize>> {
        let mut runs: Vec<Range<usize>> = Vec::new();
        for i in indices.filter(|&i| set.contains(i)) {
            match runs.last_mut() {
                Some(run) if run.end == i => run.end = i + 1,
                Some(run) if run.start == i + 1 => run.start = i,
                _ => runs.push(i..i + 1),
            }
        }
        runs
    }

    /// Indices of the sets the property tests draw: several words of the summary.
    const LEN: usize = 3 * 4096 + 100;

    proptest::proptest! {
        #[test]
        fn runs_a_word_at_a_time_are_the_runs_member_by_member(
            inserted in proptest::collection::vec((0usize..LEN, 1usize..300), 0..40),
            removed in proptest::collection::vec((0usize..LEN, 1usize..100), 0..40),
            words in proptest::collection::vec((0usize..LEN / 64, proptest::num::u64::ANY), 0..8),
            limit in 0usize..3000,
            range in (0usize..LEN, 0usize..LEN),
            max in 0usize..12,
        ) {
            let mut s = ChunkSet::new(LEN);
            for &(at, len) in &inserted {
                (at..(at + len).min(LEN)).for_each(|i| s.insert(i));
            }
            for &(w, bits) in &words {
                s.insert_word(w, bits);
            }
            for (k, &(at, len)) in removed.iter().enumerate() {
                match k % 2 {
                    0 => s.remove_run(at..(at + len).min(LEN)),
                    _ => (at..(at + len).min(LEN)).for_each(|i| s.remove(i)),
                }
            }
            proptest::prop_assert_eq!(s.count(), (0..LEN).filter(|&i| s.contains(i)).count());
            let down = runs_one_by_one(&s, (0..LEN).rev());
            proptest::prop_assert_eq!(s.runs_down().collect::<Vec<_>>(), down.clone());
            let mut left = limit;
            let cut: Vec<Range<usize>> = down
                .into_iter()
                .map_while(|run| {
                    (left > 0).then(|| {
                        let run = run.end - run.len().min(left)..run.end;
                        left -= run.len();
                        run
                    })
                })
                .collect();
            proptest::prop_assert_eq!(s.runs_from_top(limit), cut);
            let (start, end) = (range.0.min(range.1), range.0.max(range.1));
            let mut within = runs_one_by_one(&s, start..end);
            within.truncate(max);
            proptest::prop_assert_eq!(s.runs_in(start..end, max), within);
            for (from, to) in [(start, end), (start, (start + max).min(LEN)), (end, end)] {
                let members = (from..to).filter(|&i| s.contains(i)).count();
                proptest::prop_assert_eq!(s.count_in(from..to), members);
                proptest::prop_assert_eq!(s.contains_run(from..to), members == to - from);
            }
        }
    }
}
