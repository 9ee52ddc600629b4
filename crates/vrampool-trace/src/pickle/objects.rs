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

/// A list: its length, and its items from the first one that may matter.
#[derive(Default)]
struct ListData {
    len: u32,
    /// Either empty (nothing kept so far) or all `len` items, with [`Opaque::Unkept`] for the ones before
    /// the first kept item.
    items: Vec<Value>,
}

/// Every list and dict of a decoded pickle, by handle.
#[derive(Default)]
pub(crate) struct Objects {
    /// For each dict, the index of its record, or [`NO_RECORD`].
    dicts: Vec<u32>,
    records: Vec<Record>,
    /// Kept values that do not fit a record, by record index and field.
    side: FxHashMap<(u32, Field), Value>,
    lists: Vec<ListData>,
}

impl Objects {
    /// Empty, with room for what a snapshot pickle of `len` bytes usually holds: PyTorch's trace entries take
    /// about 50 bytes each. Reserving up front saves the copies and page faults of growing by doubling.
    pub(crate) fn for_pickle_of(len: usize) -> Self {
        Objects {
            dicts: Vec::with_capacity(len / 40),
            records: Vec::with_capacity(len / 48),
            side: FxHashMap::default(),
            lists: Vec::with_capacity(16),
        }
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
    pub(crate) fn append(&mut self, list: u32, item: Value) {
        let keep = match item {
            Value::List(_) => true,
            Value::Dict(dict) => self.dicts[dict as usize] != NO_RECORD,
            _ => false,
        };
        let data = &mut self.lists[list as usize];
        if keep || !data.items.is_empty() {
            if data.items.len() < data.len as usize {
                data.items.resize(data.len as usize, Value::Opaque(Opaque::Unkept));
            }
            data.items.push(item);
        }
        data.len = data.len.saturating_add(1);
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

    /// Item `index` of `list` ([`Opaque::Unkept`] for an item that was not kept).
    pub(crate) fn list_item(&self, list: u32, index: usize) -> Value {
        self.lists
            .get(list as usize)
            .and_then(|data| data.items.get(index).copied())
            .unwrap_or(Value::Opaque(Opaque::Unkept))
    }
}
