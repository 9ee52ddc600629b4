//! Reading PyTorch memory snapshots (`torch.cuda.memory._snapshot()`, `_dump_snapshot()`): the pickled dict
//! whose `device_traces` holds one list of trace entries per device.
//!
//! Each entry is a dict with `action`, `addr`, `size`, `stream` and `time_us`; other keys (`frames`,
//! `compile_context`, `user_metadata`, anything newer) are ignored. `stream` and `time_us`, absent from some
//! older versions, read as 0 when missing. Actions map to [`EventKind`]s; `snapshot`, `annotate` and
//! `user_defined` are left out and counted in [`Trace::ignored`], unknown actions in
//! [`Trace::unknown_actions`].
//!
//! PyTorch records into a ring buffer that drops its oldest entries: a block freed in the trace but never
//! allocated in it is taken as live from the start and listed in [`Trace::initial_live`].

use crate::block_ledger::UnknownFree;
use crate::content::Content;
use crate::error::{Error, Location, Result};
use crate::event::{Event, EventKind};
use crate::format::TraceFormat;
use crate::memory_budget;
use crate::pickle::{self, Decoded, Field, Objects, Symbol, Value};
use crate::trace::Trace;
use crate::trace_builder::TraceBuilder;

/// A decoded snapshot: its device traces, ready to be read into [`Trace`]s.
pub(crate) struct Snapshot<'a> {
    name: &'a str,
    objects: Objects,
    /// The list handle of each device's trace.
    device_lists: Vec<u32>,
    /// Bytes of the file the snapshot was read from (compressed bytes, for a gzipped file).
    file_bytes: u64,
}

/// What an entry of a device trace is.
enum Entry {
    /// An event.
    Event(Event),
    /// An action PyTorch writes that is no allocator event.
    NonEvent,
    /// An action the reader does not know.
    Unknown,
}

impl<'a> Snapshot<'a> {
    /// Decodes the snapshot pickle that is the whole of `content`.
    pub(crate) fn decode(content: &mut Content<'a>) -> Result<Self> {
        let name = content.name();
        let Decoded { root, objects } = pickle::decode(content)?;
        let not_a_snapshot = |reason: String| Error::NotASnapshot { name: name.to_owned(), reason };
        let Value::Dict(root) = root else {
            return Err(not_a_snapshot(format!("the pickled value is {}, not a dict", root.describe())));
        };
        let traces = match objects.field(root, Field::DeviceTraces) {
            Some(Value::List(list)) => list,
            Some(other) => return Err(not_a_snapshot(format!("`device_traces` is {}, not a list", other.describe()))),
            None => return Err(not_a_snapshot("the top-level dict has no `device_traces` key".to_owned())),
        };
        let device_lists = (0..objects.list_len(traces))
            .map(|device| match objects.list_item(traces, device) {
                Value::List(list) => Ok(list),
                other => Err(not_a_snapshot(format!("`device_traces[{device}]` is {}, not a list", other.describe()))),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Snapshot { name, objects, device_lists, file_bytes: content.file_bytes() })
    }

    /// How many devices the snapshot has traces for.
    pub(crate) fn device_count(&self) -> usize {
        self.device_lists.len()
    }

    /// How many entries the trace of `device` has.
    pub(crate) fn entry_count(&self, device: usize) -> usize {
        self.device_lists.get(device).map_or(0, |&list| self.objects.list_len(list))
    }

    /// The trace of `device`; [`Error::NoSuchDevice`] for a device the snapshot has no trace for.
    pub(crate) fn trace(&self, device: usize, lenient: bool) -> Result<Trace> {
        let Some(&list) = self.device_lists.get(device) else {
            return Err(Error::NoSuchDevice { name: self.name.to_owned(), device, devices: self.device_count() });
        };
        let count = self.objects.list_len(list);
        // Items before the first one kept are all alike (none is a dict with a trace entry's keys).
        let unkept = count - self.objects.kept_len(list);
        let mut builder = TraceBuilder::new(self.name, lenient, UnknownFree::LiveFromStart, count - unkept);
        if unkept > 0 {
            let at = Location::Event { device, index: 0 };
            let reason =
                self.entry(list, 0).err().map_or_else(|| "the entry is not a dict".to_owned(), |(reason, _)| reason);
            builder.reject_many(Error::BadRecord { name: self.name.to_owned(), at, reason }, unkept)?;
        }
        for index in unkept..count {
            if index % memory_budget::CHECK_EVERY as usize == 0 {
                let held = self.objects.held_bytes() + builder.held_bytes();
                memory_budget::check(self.name, held, self.file_bytes)?;
            }
            let at = Location::Event { device, index };
            match self.entry(list, index) {
                Ok(Entry::Event(event)) => builder.push(at, event)?,
                Ok(Entry::NonEvent) => builder.ignore(),
                Ok(Entry::Unknown) => builder.unknown_action(),
                Err((reason, failed_alloc_addr)) => {
                    let error = Error::BadRecord { name: builder.name().to_owned(), at, reason };
                    builder.reject(error, failed_alloc_addr)?;
                }
            }
        }
        Ok(builder.finish(TraceFormat::PytorchSnapshot, device))
    }

    /// What entry `index` of `list` is. An error says what is wrong and, for an allocation whose address was
    /// read, that address.
    fn entry(&self, list: u32, index: usize) -> Result<Entry, (String, Option<u64>)> {
        let objects = &self.objects;
        let dict = match objects.list_item(list, index) {
            Value::Dict(dict) if objects.has_record(dict) => dict,
            Value::Dict(_) => {
                return Err(("the entry has none of the keys action, addr, size, stream, time_us".to_owned(), None));
            }
            other => return Err((format!("the entry is {}, not a dict", other.describe()), None)),
        };
        let kind = match objects.field(dict, Field::Action) {
            Some(Value::Str(action)) => match action {
                Symbol::Alloc => EventKind::Alloc,
                Symbol::FreeRequested => EventKind::FreeRequested,
                Symbol::FreeCompleted => EventKind::Free,
                Symbol::SegmentAlloc => EventKind::SegmentAlloc,
                Symbol::SegmentFree => EventKind::SegmentFree,
                Symbol::SegmentMap => EventKind::SegmentMap,
                Symbol::SegmentUnmap => EventKind::SegmentUnmap,
                Symbol::Oom => EventKind::Oom,
                Symbol::NonEvent => return Ok(Entry::NonEvent),
                _ => return Ok(Entry::Unknown),
            },
            Some(other) => return Err((format!("`action` is {}, not a string", other.describe()), None)),
            None => return Err(("the entry has no `action`".to_owned(), None)),
        };
        let addr = unsigned(objects, dict, Field::Addr)
            .and_then(|addr| addr.ok_or_else(|| format!("the {} entry has no `addr`", action_name(kind))))
            .map_err(|reason| (reason, None))?;
        let failed_alloc = |reason: String| (reason, (kind == EventKind::Alloc).then_some(addr));
        let size = unsigned(objects, dict, Field::Size)
            .and_then(|size| size.ok_or_else(|| format!("the {} entry has no `size`", action_name(kind))))
            .map_err(failed_alloc)?;
        let stream = unsigned(objects, dict, Field::Stream).map_err(failed_alloc)?.unwrap_or(0);
        let time_us = match objects.field(dict, Field::TimeUs) {
            None => 0,
            Some(Value::Int(time)) => time,
            Some(other) => {
                return Err(failed_alloc(format!("`time_us` is {}, not a 64-bit integer", other.describe())));
            }
        };
        Ok(Entry::Event(Event { time_us, kind, addr, size, stream }))
    }
}

/// The non-negative integer of `field` in `dict`, if present.
fn unsigned(objects: &Objects, dict: u32, field: Field) -> Result<Option<u64>, String> {
    match objects.field(dict, field) {
        None => Ok(None),
        Some(Value::Int(value)) => {
            u64::try_from(value).map(Some).map_err(|_| format!("`{}` is negative ({value})", field.key()))
        }
        Some(Value::BigUint(value)) => Ok(Some(value)),
        Some(other) => Err(format!("`{}` is {}, not a 64-bit integer", field.key(), other.describe())),
    }
}

/// The PyTorch action name of an event kind, for messages.
fn action_name(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Free => "free_completed",
        other => other.name(),
    }
}
