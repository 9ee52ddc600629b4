//! The memo of the pickle machine: values put aside by index (PUT, BINPUT, LONG_BINPUT, MEMOIZE) and pushed
//! again by GET, BINGET and LONG_BINGET.
//!
//! Picklers number memo entries 0, 1, 2, ... in order, so entries live in a vector; an index past the end
//! (which no pickler writes, but a pickle may hold) goes to a map, so that memory follows the entries set,
//! never the largest index named.

use rustc_hash::FxHashMap;

use super::value::Value;

/// The most entries a memo may hold. PyTorch's snapshots set two per trace entry: this is room for
/// snapshots of some thirty million events, more than [`crate::DEFAULT_MAX_CONTENT_BYTES`] of content holds.
pub(crate) const MAX_MEMO_ENTRIES: usize = 1 << 26;

/// The memo: entries `0..dense.len()` in order, the others by index.
pub(crate) struct Memo {
    dense: Vec<Value>,
    sparse: FxHashMap<u64, Value>,
    /// The most entries it may hold.
    limit: usize,
}

impl Default for Memo {
    fn default() -> Self {
        Memo::with_limit(MAX_MEMO_ENTRIES)
    }
}

/// A memo that already holds as many entries as it may was asked for another.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct MemoFull;

impl Memo {
    /// An empty memo with room for `entries` entries in order.
    pub(crate) fn with_capacity(entries: usize) -> Self {
        Memo { dense: Vec::with_capacity(entries.min(MAX_MEMO_ENTRIES)), ..Memo::default() }
    }

    /// An empty memo that holds at most `limit` entries.
    pub(crate) fn with_limit(limit: usize) -> Self {
        Memo { dense: Vec::new(), sparse: FxHashMap::default(), limit }
    }

    /// The entry at `index`, if set.
    #[inline]
    pub(crate) fn get(&self, index: u64) -> Option<&Value> {
        match usize::try_from(index).ok().and_then(|index| self.dense.get(index)) {
            Some(value) => Some(value),
            None if self.sparse.is_empty() => None,
            None => self.sparse.get(&index),
        }
    }

    /// Sets the entry at `index` to `value`.
    #[inline]
    pub(crate) fn put(&mut self, index: u64, value: Value) -> Result<(), MemoFull> {
        let len = self.dense.len() as u64;
        if index < len {
            self.dense[index as usize] = value;
            return Ok(());
        }
        let replaces = index > len && self.sparse.contains_key(&index);
        if !replaces && self.len() >= self.limit {
            return Err(MemoFull);
        }
        if index == len {
            self.dense.push(value);
            if !self.sparse.is_empty() {
                self.sparse.remove(&index);
            }
        } else {
            self.sparse.insert(index, value);
        }
        Ok(())
    }

    /// Sets the next entry (MEMOIZE): the one whose index is the number of entries, as Python's unpickler does.
    #[inline]
    pub(crate) fn memoize(&mut self, value: Value) -> Result<(), MemoFull> {
        self.put(self.len() as u64, value)
    }

    /// How many entries are set.
    pub(crate) fn len(&self) -> usize {
        self.dense.len() + self.sparse.len()
    }

    /// About how many bytes the memo takes (its entries in order count as far as they are set).
    pub(crate) fn held_bytes(&self) -> u64 {
        let dense = self.dense.len() * size_of::<Value>();
        let sparse = self.sparse.capacity() * (size_of::<(u64, Value)>() + 1);
        (dense + sparse) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_in_order_and_out_of_order_read_back() {
        let mut memo = Memo::default();
        memo.memoize(Value::Int(0)).unwrap();
        memo.put(1, Value::Int(1)).unwrap();
        memo.put(1_000_000_000, Value::Int(2)).unwrap();
        memo.put(u64::MAX, Value::Int(3)).unwrap();
        assert_eq!(memo.len(), 4);
        // MEMOIZE takes the index after the entries set, as Python's unpickler does.
        memo.memoize(Value::Int(4)).unwrap();
        assert_eq!(memo.get(4), Some(&Value::Int(4)));
        assert_eq!(memo.get(0), Some(&Value::Int(0)));
        assert_eq!(memo.get(1_000_000_000), Some(&Value::Int(2)));
        assert_eq!(memo.get(u64::MAX), Some(&Value::Int(3)));
        assert_eq!(memo.get(2), None);
        assert_eq!(memo.get(3), None);
        assert!(memo.held_bytes() < 4096, "{} bytes for 5 entries", memo.held_bytes());
    }

    #[test]
    fn an_entry_set_out_of_order_is_replaced_when_the_entries_reach_it() {
        let mut memo = Memo::default();
        memo.put(1, Value::Int(10)).unwrap();
        memo.put(0, Value::Int(0)).unwrap();
        memo.put(1, Value::Int(11)).unwrap();
        assert_eq!(memo.get(1), Some(&Value::Int(11)));
        assert_eq!(memo.len(), 2);
    }

    #[test]
    fn the_memo_refuses_entries_past_its_limit_but_lets_set_ones_change() {
        let mut memo = Memo::with_limit(3);
        memo.memoize(Value::None).unwrap();
        memo.memoize(Value::None).unwrap();
        memo.put(u64::MAX, Value::Int(1)).unwrap();
        assert_eq!(memo.memoize(Value::None), Err(MemoFull));
        assert_eq!(memo.put(5_000_000_000, Value::None), Err(MemoFull));
        memo.put(u64::MAX, Value::Int(2)).unwrap();
        memo.put(1, Value::Int(7)).unwrap();
        assert_eq!((memo.get(u64::MAX), memo.get(1)), (Some(&Value::Int(2)), Some(&Value::Int(7))));
    }
}
