//! The ceiling a pool that never moves a live block can reach on a trace: one virtual range, exact best fit
//! at 512 bytes, pages mapped where blocks land, and idle pages moved to where they are needed only when
//! the pool would otherwise map new memory. Prints peak live and reserved bytes, utilization, the pages
//! mapped and moved, and the driver time the simulated device's cost model gives those calls.
//!
//! `cargo run --release -p vrampool-replay --example ideal_pool -- [--page MIB] [--lag-ms MS] [TRACE...]`
//!
//! With `--lag-ms`, a page idle for less than that many milliseconds of trace time is still in use by
//! queued work and cannot move: the pool maps new memory instead. Without traces, every bundled one.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use vrampool::{CostModel, MIB};
use vrampool_replay::{Operation, ReplayPlan};

/// Blocks are requests rounded up to this.
const BLOCK_ALIGN: u64 = 512;

/// The address range, larger than any trace needs.
const RANGE: u64 = 1 << 44;

/// Best fit over one address range, with its pages' books.
struct IdealPool {
    page: u64,
    lag_us: i64,
    /// Free extents by (size, offset), and by offset.
    by_size: BTreeSet<(u64, u64)>,
    by_offset: BTreeMap<u64, u64>,
    /// Live blocks touching each page.
    users: Vec<u32>,
    mapped: Vec<bool>,
    /// Mapped pages no block touches, with the trace time they went idle.
    idle: BTreeMap<usize, i64>,
    mapped_pages: u64,
    peak_mapped: u64,
    live: u64,
    peak_live: u64,
    new_pages: u64,
    moved_pages: u64,
    calls: u64,
    driver_ns: u64,
    cost: CostModel,
}

impl IdealPool {
    fn new(page: u64, lag_us: i64) -> Self {
        let mut pool = IdealPool {
            page,
            lag_us,
            by_size: BTreeSet::new(),
            by_offset: BTreeMap::new(),
            users: Vec::new(),
            mapped: Vec::new(),
            idle: BTreeMap::new(),
            mapped_pages: 0,
            peak_mapped: 0,
            live: 0,
            peak_live: 0,
            new_pages: 0,
            moved_pages: 0,
            calls: 0,
            driver_ns: 0,
            cost: CostModel::default(),
        };
        pool.insert_free(0, RANGE);
        pool
    }

    fn insert_free(&mut self, offset: u64, size: u64) {
        self.by_size.insert((size, offset));
        self.by_offset.insert(offset, size);
    }

    fn remove_free(&mut self, offset: u64, size: u64) {
        self.by_size.remove(&(size, offset));
        self.by_offset.remove(&offset);
    }

    fn pages_of(&self, offset: u64, span: u64) -> Range<usize> {
        (offset / self.page) as usize..(offset + span).div_ceil(self.page) as usize
    }

    /// Places a block of `size` bytes at the start of the smallest free extent that holds it.
    fn allocate(&mut self, size: u64, now: i64) -> (u64, u64) {
        let span = size.max(1).next_multiple_of(BLOCK_ALIGN);
        let (free, offset) = *self.by_size.range((span, 0)..).next().expect("the range holds every trace");
        self.remove_free(offset, free);
        if free > span {
            self.insert_free(offset + span, free - span);
        }
        let pages = self.pages_of(offset, span);
        if self.users.len() < pages.end {
            self.users.resize(pages.end, 0);
            self.mapped.resize(pages.end, false);
        }
        let mut missing = Vec::new();
        for page in pages {
            self.users[page] += 1;
            if self.users[page] == 1 {
                if self.mapped[page] {
                    self.idle.remove(&page);
                } else {
                    missing.push(page);
                }
            }
        }
        self.back(&missing, now);
        self.live += size;
        self.peak_live = self.peak_live.max(self.live);
        (offset, span)
    }

    /// Backs `missing` pages: idle pages safe to move first, then new pages, each in batches of pages
    /// that follow on (a device call per batch).
    fn back(&mut self, missing: &[usize], now: i64) {
        if missing.is_empty() {
            return;
        }
        let lag = self.lag_us;
        let safe: Vec<usize> =
            self.idle.iter().filter(|&(_, &since)| now - since >= lag).map(|(&p, _)| p).take(missing.len()).collect();
        for &page in &safe {
            self.idle.remove(&page);
            self.mapped[page] = false;
        }
        let batches = |pages: &[usize]| 1 + pages.windows(2).filter(|w| w[1] != w[0] + 1).count() as u64;
        let moved = safe.len();
        if moved > 0 {
            let calls = batches(&safe).max(batches(&missing[..moved]));
            self.calls += calls;
            self.moved_pages += moved as u64;
            self.driver_ns += self.cost.remap(moved as u64, self.page) + (calls - 1) * self.cost.set_access_ns;
        }
        let fresh = &missing[moved..];
        if !fresh.is_empty() {
            let calls = batches(fresh);
            self.calls += calls;
            self.new_pages += fresh.len() as u64;
            self.mapped_pages += fresh.len() as u64;
            self.driver_ns += self.cost.map(fresh.len() as u64, self.page) + (calls - 1) * self.cost.set_access_ns;
        }
        for &page in missing {
            self.mapped[page] = true;
        }
        self.peak_mapped = self.peak_mapped.max(self.mapped_pages);
    }

    fn free(&mut self, offset: u64, span: u64, size: u64, now: i64) {
        self.live -= size;
        for page in self.pages_of(offset, span) {
            self.users[page] -= 1;
            if self.users[page] == 0 {
                self.idle.insert(page, now);
            }
        }
        let (mut start, mut len) = (offset, span);
        if let Some((&before, &before_len)) = self.by_offset.range(..offset).next_back()
            && before + before_len == offset
        {
            self.remove_free(before, before_len);
            start = before;
            len += before_len;
        }
        if let Some(&after_len) = self.by_offset.get(&(offset + span)) {
            self.remove_free(offset + span, after_len);
            len += after_len;
        }
        self.insert_free(start, len);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut page = 2 * MIB;
    let mut lag_us = 0;
    let mut paths = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--page" => page = args.next().ok_or("--page MIB")?.parse::<u64>()? * MIB,
            "--lag-ms" => lag_us = args.next().ok_or("--lag-ms MS")?.parse::<i64>()? * 1000,
            _ => paths.push(arg),
        }
    }
    if paths.is_empty() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../traces");
        let mut bundled: Vec<String> = std::fs::read_dir(dir)?
            .filter_map(|entry| entry.ok()?.path().to_str().map(String::from))
            .filter(|path| path.ends_with(".pickle.gz"))
            .collect();
        bundled.sort();
        paths = bundled;
    }
    for path in paths {
        let trace = vrampool_trace::read_trace(&path, &Default::default())?;
        let plan = ReplayPlan::from_trace(&trace)?;
        let mut pool = IdealPool::new(page, lag_us);
        let mut blocks = vec![(0u64, 0u64, 0u64); plan.slots as usize];
        let start = plan.times_us.first().copied().unwrap_or(0);
        let initial = plan.initial.iter().map(|op| (op, start));
        for (op, now) in initial.chain(plan.operations.iter().zip(plan.times_us.iter().copied())) {
            match *op {
                Operation::Alloc { slot, size, .. } => {
                    let (offset, span) = pool.allocate(size, now);
                    blocks[slot as usize] = (offset, span, size);
                }
                Operation::Free { slot } => {
                    let (offset, span, size) = blocks[slot as usize];
                    pool.free(offset, span, size, now);
                }
            }
        }
        let reserved = pool.peak_mapped * page;
        let driver_ms = pool.driver_ns as f64 / 1e6;
        println!(
            "{:26} live {:>6} MiB reserved {:>6} MiB utilization {:.4} pages new {:>6} moved {:>6} calls {:>5} \
             driver {:>7.1} ms ({:.2}% of {:.1} s)",
            trace.name.trim_end_matches(".pickle.gz"),
            pool.peak_live >> 20,
            reserved >> 20,
            pool.peak_live as f64 / reserved as f64,
            pool.new_pages,
            pool.moved_pages,
            pool.calls,
            driver_ms,
            driver_ms / (plan.duration_us.max(1) as f64 / 1e3) * 100.0,
            plan.duration_us as f64 / 1e6,
        );
    }
    Ok(())
}
