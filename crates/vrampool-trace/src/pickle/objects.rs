//! The lists and dicts a decoded snapshot pickle is made of, kept only as far as a snapshot reader needs
//! them.
//!
//! A dict keeps the values of the keys in [`Field`] and nothing else: a trace entry becomes a fixed 40-byte
//! record of its action, address, size, stream and time as soon as its items are set, and its other items
//! (`frames`, `compile_context`, ...) are dropped on the spot. Kept values that are not of the usual kind
//! (an action that is not a string, an address that is not a 64-bit int, `device_traces`) go to a side
//! table. A list keeps its items only from the first
//! item that may matter (a list, or a dict with a kept key): the lists of stack frames that newer PyTorch
//! versions attach to every entry cost a counter, not a vector.

use rustc_hash::FxHashMap;

use super::symbol::{Field, Symbol};
use super::value::{Opaque, Value};

/// The record of a dict: the values of its kept keys.
#[derive(Clone, Copy)]
struct Record {
    /// `addr`, `size`, `stream`, `time_us` (fields 1 to 4), where they are ints.
    ints: [i64; 4],
    /// `action`, where it is a string.
    action: Symbol,
    /// One bit per [`Field`]: the dict has that key.
    present: u8,
    /// One bit per [`Field`]: the key's value is in the side table.
    in_side: u8,
}

impl Record {
    const EMPTY: Record = Record { ints: [0; 4], action: Symbol::Other, present: 0, in_side: 0 };
}

/// Marks a dict that has no kept key (yet).
const NO_RECORD: u32 = u32::MAX;

/// The most items a list may have: room for a device trace of the longest snapshot that
/// [`crate::DEFAULT_MAX_CONTENT_BYTES`] of content holds, several times over.
pub(crate) const MAX_LIST_ITEMS: u32 = 1 << 26;

/// A list: its length, and its items from the first one that may matter.
#[derive(Default)]
struct ListData {
    len: u32,
    /// The index of the first kept item: the items before it are [`Opaque::Unkept`].
    first_kept: u32,
    /// Either empty (nothing kept so far) or the items from `first_kept` on.
    items: Vec<Value>,
}

/// A list that already has [`MAX_LIST_ITEMS`] items was given another.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ListFull;

/// Every list and dict of a decoded pickle, by handle.
#[derive(Default)]
pub(crate) struct Objects {
    /// For each dict, the index of its record, or [`NO_RECORD`].
    dicts: Vec<u32>,
    records: Vec<Record>,
    /// Kept values that do not fit a record, by record index and field.
    side: FxHashMap<(u32, Field), Value>,
    lists: Vec<ListData>,
    /// The capacity of every list's items together.
    item_capacity: usize,
}

impl Objects {
    /// Empty, with room for what a snapshot pickle of `len` bytes usually holds: PyTorch's trace entries take
    /// about 50 bytes each. Reserving up front saves the copies and page faults of growing by doubling.
    pub(crate) fn for_pickle_of(len: usize) -> Self {
        Objects {
            dicts: Vec::with_capacity(len / 40),
            records: Vec::with_capacity(len / 48),
            lists: Vec::with_capacity(16),
            ..Objects::default()
        }
    }

    /// About how many bytes the lists and dicts take (tables reserved up front count as far as they are used).
    pub(crate) fn held_bytes(&self) -> u64 {
        let held = self.dicts.len() * size_of::<u32>()
            + self.records.len() * size_of::<Record>()
            + self.side.capacity() * (size_of::<((u32, Field), Value)>() + 1)
            + self.lists.len() * size_of::<ListData>()
            + self.item_capacity * size_of::<Value>();
        held as u64
    }

    /// A new empty dict's handle (`None` when there are too many).
    #[inline]
    pub(crate) fn new_dict(&mut self) -> Option<u32> {
        let id = u32::try_from(self.dicts.len()).ok().filter(|&id| id != NO_RECORD)?;
        self.dicts.push(NO_RECORD);
        Some(id)
    }

    /// A new empty list's handle (`None` when there are too many).
    #[inline]
    pub(crate) fn new_list(&mut self) -> Option<u32> {
        let id = u32::try_from(self.lists.len()).ok()?;
        self.lists.push(ListData::default());
        Some(id)
    }

    /// Sets `dict[key] = value`: kept if `key` is a [`Field`], dropped otherwise.
    #[inline]
    pub(crate) fn set_item(&mut self, dict: u32, key: Value, value: Value) {
        let Value::Str(symbol) = key else { return };
        let Some(field) = symbol.field() else { return };
        let slot = &mut self.dicts[dict as usize];
        if *slot == NO_RECORD {
            *slot = self.records.len() as u32;
            self.records.push(Record::EMPTY);
        }
        let index = *slot;
        let record = &mut self.records[index as usize];
        let bit = 1 << field as u8;
        record.present |= bit;
        match (field, value) {
            (Field::Action, Value::Str(action)) => {
                record.action = action;
                record.in_side &= !bit;
            }
            (Field::Addr | Field::Size | Field::Stream | Field::TimeUs, Value::Int(int)) => {
                record.ints[field as usize - 1] = int;
                record.in_side &= !bit;
            }
            _ => {
                record.in_side |= bit;
                self.side.insert((index, field), value);
            }
        }
    }

    /// Appends `item` to `list`.
    #[inline]
    pub(crate) fn append(&mut self, list: u32, item: Value) -> Result<(), ListFull> {
        let keep = match item {
            Value::List(_) => true,
            Value::Dict(dict) => self.dicts[dict as usize] != NO_RECORD,
            _ => false,
        };
        let data = &mut self.lists[list as usize];
        if data.len >= MAX_LIST_ITEMS {
            return Err(ListFull);
        }
        if keep || !data.items.is_empty() {
            if data.items.is_empty() {
                data.first_kept = data.len;
            }
            let capacity = data.items.capacity();
            data.items.push(item);
            self.item_capacity += data.items.capacity() - capacity;
        }
        data.len += 1;
        Ok(())
    }

    /// The value of `field` in `dict`, if the dict has that key.
    pub(crate) fn field(&self, dict: u32, field: Field) -> Option<Value> {
        let index = *self.dicts.get(dict as usize)?;
        let record = self.records.get(index as usize)?;
        let bit = 1 << field as u8;
        if record.present & bit == 0 {
            None
        } else if record.in_side & bit != 0 {
            self.side.get(&(index, field)).copied()
        } else if field == Field::Action {
            Some(Value::Str(record.action))
        } else {
            Some(Value::Int(record.ints[field as usize - 1]))
        }
    }

    /// Whether `dict` has any kept key.
    pub(crate) fn has_record(&self, dict: u32) -> bool {
        self.dicts.get(dict as usize).is_some_and(|&record| record != NO_RECORD)
    }

    /// The number of items of `list`.
    pub(crate) fn list_len(&self, list: u32) -> usize {
        self.lists.get(list as usize).map_or(0, |data| data.len as usize)
    }

    /// The number of items of `list` from its first kept one on: those that take memory.
    pub(crate) fn kept_len(&self, list: u32) -> usize {
        self.lists.get(list as usize).map_or(0, |data| data.items.len())
    }

    /// Item `index` of `list` ([`Opaque::Unkept`] for an item that was not kept).
    pub(crate) fn list_item(&self, list: u32, index: usize) -> Value {
        self.lists
            .get(list as usize)
            .and_then(|data| data.items.get(index.checked_sub(data.first_kept as usize)?).copied())
            .unwrap_or(Value::Opaque(Opaque::Unkept))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_takes_items_up_to_its_limit() {
        let mut objects = Objects::default();
        let list = objects.new_list().unwrap();
        objects.lists[list as usize].len = MAX_LIST_ITEMS - 1;
        assert_eq!(objects.append(list, Value::None), Ok(()));
        assert_eq!(objects.append(list, Value::None), Err(ListFull));
        assert_eq!(objects.list_len(list), MAX_LIST_ITEMS as usize);
    }

    #[test]
    fn items_before_the_first_kept_one_take_no_memory() {
        let mut objects = Objects::default();
        let (outer, inner) = (objects.new_list().unwrap(), objects.new_list().unwrap());
        for _ in 0..100_000 {
            objects.append(outer, Value::None).unwrap();
        }
        let before = objects.held_bytes();
        objects.append(outer, Value::List(inner)).unwrap();
        objects.append(outer, Value::Int(3)).unwrap();
        assert!(objects.held_bytes() - before < 1024, "{} bytes for two items", objects.held_bytes() - before);
        assert_eq!((objects.list_len(outer), objects.kept_len(outer)), (100_002, 2));
        assert_eq!(objects.list_item(outer, 99_999), Value::Opaque(Opaque::Unkept));
        assert_eq!(objects.list_item(outer, 100_000), Value::List(inner));
        assert_eq!(objects.list_item(outer, 100_001), Value::Int(3));
        assert_eq!(objects.list_item(outer, 100_002), Value::Opaque(Opaque::Unkept));
    }
}
