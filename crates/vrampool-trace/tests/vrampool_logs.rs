//! vrampool CSV event logs: reading, and writing what reads back the same.

mod common;

use std::io::{self, Write};

use common::data;
use proptest::prelude::*;
use vrampool_trace::{
    Error, Event, EventKind, Location, PytorchBaseline, ReadOptions, Trace, TraceFormat, VrampoolCsvWriter,
    parse_trace, read_trace,
};

fn write_events(events: &[Event]) -> Vec<u8> {
    let mut writer = VrampoolCsvWriter::new(Vec::new()).unwrap();
    for event in events {
        writer.write_event(event).unwrap();
    }
    writer.finish().unwrap()
}

#[test]
fn a_vrampool_log_reads_every_action_and_both_number_syntaxes() {
    let trace = read_trace(data("vrampool_small.csv"), &ReadOptions::default()).unwrap();
    assert_eq!(trace.format, Some(TraceFormat::VrampoolCsv));
    use EventKind::*;
    assert_eq!(
        trace.events,
        [
            Event::new(0, SegmentAlloc, 0x7f00_0000_0000, 2 << 20, 0),
            Event::new(1, Alloc, 0x7f00_0000_0000, 1000, 0),
            Event::new(2, Alloc, 0x7f00_0000_0400, 24, 0x10),
            Event::new(3, FreeRequested, 0x7f00_0000_0000, 1000, 0),
            Event::new(4, Free, 0x7f00_0000_0000, 1000, 0),
            // A decimal address: the block freed at time 4 is reused.
            Event::new(5, Alloc, 0x7f00_0000_0000, 4000, 0),
            Event::new(6, Oom, 0, 4 << 30, 0),
            Event::new(7, AllocFailure, 0, 4 << 30, 0),
            Event::new(8, Free, 0x7f00_0000_0400, 24, 16),
        ]
    );
    let baseline = PytorchBaseline::of(&trace);
    assert_eq!((baseline.peak_live_bytes, baseline.peak_reserved_bytes), (4024, 2 << 20));
}

#[test]
fn a_double_free_names_both_lines() {
    let error = read_trace(data("vrampool_double_free.csv"), &ReadOptions::default()).unwrap_err();
    assert!(matches!(error, Error::DoubleFree { at: Location::Line(4), freed_at: Location::Line(3), .. }), "{error}");
    assert_eq!(
        error.to_string(),
        "vrampool_double_free.csv: line 4: double free of 0x1000: the block was freed already at line 3"
    );
}

#[test]
fn malformed_lines_are_skipped_with_the_frees_of_their_allocations() {
    let error = read_trace(data("vrampool_malformed.csv"), &ReadOptions::default()).unwrap_err();
    assert_eq!(error.to_string(), "vrampool_malformed.csv: line 3: time_us `x` is not a decimal number");
    let trace = read_trace(data("vrampool_malformed.csv"), &ReadOptions::default().lenient(true)).unwrap();
    assert_eq!(trace.skipped, 3);
    assert_eq!(
        trace.events,
        [Event::new(0, EventKind::Alloc, 0x1000, 64, 0), Event::new(4, EventKind::Free, 0x1000, 64, 0)]
    );
    assert!(trace.skipped_reasons[1].ends_with("line 4: size `-64` is not a decimal number"));
    assert!(trace.skipped_reasons[2].ends_with("line 5: free of 0x3000, whose allocation was skipped as bad"));
}

#[test]
fn the_writer_writes_the_documented_format() {
    let bytes = write_events(&[
        Event::new(-3, EventKind::SegmentAlloc, 0xabc000, 1 << 21, 7),
        Event::new(10, EventKind::Alloc, 0xabc000, 5, 7),
    ]);
    assert_eq!(
        String::from_utf8(bytes).unwrap(),
        "time_us,action,addr,size,stream\n-3,segment_alloc,0xabc000,2097152,7\n10,alloc,0xabc000,5,7\n"
    );
}

#[test]
fn write_trace_turns_blocks_live_from_the_start_into_first_allocations() {
    let snapshot = read_trace(data("small_snapshot.p4.pickle"), &ReadOptions::default().device(0)).unwrap();
    let mut writer = VrampoolCsvWriter::new(Vec::new()).unwrap();
    writer.write_trace(&snapshot).unwrap();
    let back = parse_trace("back.csv", &writer.finish().unwrap(), &ReadOptions::default()).unwrap();
    assert!(back.initial_live.is_empty());
    assert_eq!(back.events.len(), snapshot.events.len() + snapshot.initial_live.len());
    assert_eq!(&back.events[snapshot.initial_live.len()..], &snapshot.events[..]);
    for (event, block) in back.events.iter().zip(&snapshot.initial_live) {
        assert_eq!(
            (event.kind, event.addr, event.size, event.time_us),
            (EventKind::Alloc, block.addr, block.size, snapshot.events[0].time_us)
        );
    }
    assert_eq!(PytorchBaseline::of(&back), PytorchBaseline::of(&snapshot));
}

/// A writer that fails after `budget` bytes.
struct FailingWriter {
    budget: usize,
}

impl Write for FailingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.len() > self.budget {
            return Err(io::Error::other("disk full"));
        }
        self.budget -= buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_failing_writer_is_an_error() {
    let mut writer = VrampoolCsvWriter::new(FailingWriter { budget: 40 }).unwrap();
    let event = Event::new(0, EventKind::Alloc, 0x1000, 64, 0);
    let mut result = Ok(());
    for _ in 0..10_000 {
        result = writer.write_event(&event);
        if result.is_err() {
            break;
        }
    }
    let error = result.err().or_else(|| writer.finish().err()).expect("the write must fail");
    assert!(matches!(error, Error::Write(_)), "{error}");
    assert!(error.to_string().contains("disk full"), "{error}");
}

/// An operation of a random workload.
#[derive(Clone, Debug)]
enum Op {
    Alloc { size: u64, stream: u64 },
    FreeRequested { pick: usize },
    Free { pick: usize },
    Segment { kind: EventKind, size: u64 },
    Failure { kind: EventKind, size: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u64..=u64::MAX, prop_oneof![Just(0u64), any::<u64>()]).prop_map(|(size, stream)| Op::Alloc { size, stream }),
        1 => any::<usize>().prop_map(|pick| Op::FreeRequested { pick }),
        3 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => (prop::sample::select(vec![EventKind::SegmentAlloc, EventKind::SegmentFree, EventKind::SegmentMap, EventKind::SegmentUnmap]), any::<u64>())
            .prop_map(|(kind, size)| Op::Segment { kind, size }),
        1 => (prop::sample::select(vec![EventKind::Oom, EventKind::AllocFailure]), any::<u64>())
            .prop_map(|(kind, size)| Op::Failure { kind, size }),
    ]
}

/// The consistent events of a random workload: frees only of live blocks, addresses reused after frees.
fn events_of(ops: &[Op], start: i64, steps: &[u16]) -> Vec<Event> {
    let mut live: Vec<(u64, u64, u64, bool)> = Vec::new(); // addr, size, stream, free requested
    let mut free_addrs: Vec<u64> = Vec::new();
    let mut next_addr = 0x7f00_0000_0000u64;
    let mut time = start;
    let mut events = Vec::new();
    for (index, op) in ops.iter().enumerate() {
        time = time.saturating_add(i64::from(steps[index % steps.len()]));
        match *op {
            Op::Alloc { size, stream } => {
                let addr = free_addrs.pop().unwrap_or_else(|| {
                    next_addr += 0x1000;
                    next_addr
                });
                live.push((addr, size, stream, false));
                events.push(Event::new(time, EventKind::Alloc, addr, size, stream));
            }
            Op::FreeRequested { pick } if !live.is_empty() => {
                let count = live.len();
                let block = &mut live[pick % count];
                if !block.3 {
                    block.3 = true;
                    events.push(Event::new(time, EventKind::FreeRequested, block.0, block.1, block.2));
                }
            }
            Op::Free { pick } if !live.is_empty() => {
                let (addr, size, stream, _) = live.swap_remove(pick % live.len());
                free_addrs.push(addr);
                events.push(Event::new(time, EventKind::Free, addr, size, stream));
            }
            Op::Segment { kind, size } | Op::Failure { kind, size } => {
                events.push(Event::new(time, kind, next_addr.wrapping_mul(3), size, 0));
            }
            _ => {}
        }
    }
    events
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn what_the_writer_writes_reads_back_the_same(
        ops in prop::collection::vec(op(), 0..200),
        start in any::<i32>(),
        steps in prop::collection::vec(any::<u16>(), 1..8),
    ) {
        let events = events_of(&ops, i64::from(start), &steps);
        let bytes = write_events(&events);
        let trace = parse_trace("roundtrip.csv", &bytes, &ReadOptions::default()).unwrap();
        prop_assert_eq!(&trace.events, &events);
        prop_assert_eq!(trace.skipped, 0);
        let expected = Trace { name: "roundtrip.csv".into(), format: Some(TraceFormat::VrampoolCsv), events, ..Trace::default() };
        prop_assert_eq!(trace, expected);
    }

    #[test]
    fn any_line_of_text_reads_or_errs_without_panicking(line in "[ -~]{0,60}", lenient in any::<bool>()) {
        let log = format!("time_us,action,addr,size,stream\n{line}\n");
        let _ = parse_trace("random.csv", log.as_bytes(), &ReadOptions::default().lenient(lenient));
        let log = format!("Thread,Time,Action,Pointer,Size,Stream\n{line}\n");
        let _ = parse_trace("random.csv", log.as_bytes(), &ReadOptions::default().lenient(lenient));
    }
}
