//! Building a trace from parsed records: checking each event against the ledger, and skipping bad events
//! (or stopping at the first one) as the read options say.

use crate::block_ledger::{BlockLedger, UnknownFree};
use crate::error::{Error, Location, Result};
use crate::event::Event;
use crate::format::TraceFormat;
use crate::trace::Trace;

/// The trace being read: its events so far, its ledger and its counts.
pub(crate) struct TraceBuilder<'a> {
    name: &'a str,
    lenient: bool,
    ledger: BlockLedger,
    events: Vec<Event>,
    skipped: usize,
    skipped_reasons: Vec<String>,
    ignored: usize,
    unknown_actions: usize,
}

impl<'a> TraceBuilder<'a> {
    /// An empty trace named `name`, with room for `capacity` events.
    pub(crate) fn new(name: &'a str, lenient: bool, unknown_free: UnknownFree, capacity: usize) -> Self {
        TraceBuilder {
            name,
            lenient,
            ledger: BlockLedger::new(unknown_free),
            events: Vec::with_capacity(capacity),
            skipped: 0,
            skipped_reasons: Vec::new(),
            ignored: 0,
            unknown_actions: 0,
        }
    }

    /// The trace's name, for error messages.
    pub(crate) fn name(&self) -> &'a str {
        self.name
    }

    /// Adds `event`, read at `at`, if it is consistent with the events before it; otherwise skips it
    /// (lenient) or returns the error.
    pub(crate) fn push(&mut self, at: Location, event: Event) -> Result<()> {
        match self.ledger.apply(self.name, at, &event) {
            Ok(()) => {
                self.events.push(event);
                Ok(())
            }
            Err(error) => self.reject(error, None),
        }
    }

    /// Handles a record that could not be read as an event: skips it (lenient, and only if the error concerns
    /// this record alone) or returns the error. `failed_alloc_addr` is the address of an allocation that could
    /// not be read, where known, so that its free is skipped as well.
    pub(crate) fn reject(&mut self, error: Error, failed_alloc_addr: Option<u64>) -> Result<()> {
        if let Some(addr) = failed_alloc_addr
            && self.lenient
            && error.is_skippable()
        {
            self.ledger.mark_skipped(addr);
        }
        self.reject_many(error, 1)
    }

    /// [`TraceBuilder::reject`] for `count` records in a row that fail alike, `error` being the first one's.
    pub(crate) fn reject_many(&mut self, error: Error, count: usize) -> Result<()> {
        if !(self.lenient && error.is_skippable()) {
            return Err(error);
        }
        self.skipped = self.skipped.saturating_add(count);
        if self.skipped_reasons.len() < Trace::MAX_SKIP_REASONS {
            let more = if count > 1 { format!(" (and the {} records after it)", count - 1) } else { String::new() };
            self.skipped_reasons.push(format!("{error}{more}"));
        }
        Ok(())
    }

    /// Counts a record left out on purpose (an action outside the event model).
    pub(crate) fn ignore(&mut self) {
        self.ignored += 1;
    }

    /// Counts a record left out for an action the reader does not know.
    pub(crate) fn unknown_action(&mut self) {
        self.unknown_actions += 1;
    }

    /// About how many bytes the trace so far takes.
    pub(crate) fn held_bytes(&self) -> u64 {
        (self.events.capacity() * size_of::<Event>()) as u64 + self.ledger.held_bytes()
    }

    /// The finished trace.
    pub(crate) fn finish(self, format: TraceFormat, device: usize) -> Trace {
        Trace {
            name: self.name.to_owned(),
            format: Some(format),
            device,
            events: self.events,
            initial_live: self.ledger.into_initial_live(),
            skipped: self.skipped,
            skipped_reasons: self.skipped_reasons,
            ignored: self.ignored,
            unknown_actions: self.unknown_actions,
        }
    }
}
