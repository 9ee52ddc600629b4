//! What CUDA's virtual-memory calls cost on this GPU, on an idle device and on one busy with a long queue of
//! work on other memory: whether moving pages (`cuMemUnmap`, `cuMemMap`, `cuMemSetAccess`) waits for that
//! work. A pool moves idle pages while a program keeps the GPU busy; if the calls wait for the queue, each
//! move costs the program what the GPU had left to run.
//!
//! Run with `cargo run --release -p vrampool-cuda --example vm_call_costs` on a machine with an NVIDIA GPU;
//! elsewhere it says so and exits with status 1. It prints one line per measurement: the call, the page
//! size, whether the device was busy, the microseconds per call, and for the busy case whether the queued
//! work had finished when the call returned. Moves and new pages are timed one page a call and many pages a
//! call (one `cuMemSetAccess` for all of them), to show what a batch saves.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vrampool::{Backend, MIB, human_bytes};
use vrampool_cuda::{CudaMemory, CudaVirtual};

/// Pages moved per measurement.
const PAGES: u64 = 16;
/// The busy work: memsets of this many bytes, queued back to back on their own stream.
const BUSY_BYTES: u64 = 1024 * MIB;
const BUSY_MEMSETS: u32 = 600;

fn main() -> ExitCode {
    let mut failed = false;
    for page in [2 * MIB, 16 * MIB] {
        let backend = match CudaVirtual::with_page_size(0, Some(page)) {
            Ok(backend) => Arc::new(backend),
            Err(err) => {
                eprintln!("vm_call_costs needs an NVIDIA GPU with its driver: {err}");
                return ExitCode::from(1);
            }
        };
        if let Err(err) = run(&backend, page) {
            eprintln!("vm_call_costs failed with {} pages: {err}", human_bytes(page));
            failed = true;
        }
    }
    if failed { ExitCode::from(1) } else { ExitCode::SUCCESS }
}

/// Microseconds per call of `calls` calls that took `took`.
fn per_call(took: Duration, calls: u64) -> f64 {
    took.as_secs_f64() * 1e6 / calls as f64
}

fn run(backend: &Arc<CudaVirtual>, page: u64) -> Result<(), Box<dyn std::error::Error>> {
    let context = backend.context().ok_or("no CUDA context behind the backend")?;
    let stream = context.new_stream()?;
    let busy_stream = backend.register_stream(&stream)?;
    // The busy work's buffer, then PAGES mapped pages, then as many unmapped ones to move them to.
    let busy = backend.reserve_range(BUSY_BYTES)?;
    backend.map(busy, BUSY_BYTES)?;
    let range = backend.reserve_range(4 * PAGES * page)?;
    let (mapped, free) = (range, range + 2 * PAGES * page);
    backend.map(mapped, PAGES * page)?;
    for busy_device in [false, true] {
        let done = if busy_device {
            for i in 0..BUSY_MEMSETS {
                // SAFETY: the buffer is mapped above, used by nothing else, and only written as bytes.
                unsafe { backend.memset_d8(busy, (i % 251) as u8, BUSY_BYTES, busy_stream) }?;
            }
            Some(backend.record_event(busy_stream)?)
        } else {
            None
        };
        // Page by page: move each mapped page to the free half and back, then map and unmap fresh pages.
        let start = Instant::now();
        for i in 0..PAGES {
            backend.remap(mapped + i * page, free + i * page, page)?;
        }
        let moved_there = start.elapsed();
        let still_running = match done {
            Some(event) => !backend.event_complete(event)?,
            None => false,
        };
        let start = Instant::now();
        backend.remap(free, mapped, PAGES * page)?;
        let moved_back = start.elapsed();
        let start = Instant::now();
        for i in 0..PAGES {
            backend.map(free + i * page, page)?;
        }
        let mapped_fresh = start.elapsed();
        let start = Instant::now();
        for i in 0..PAGES {
            backend.unmap(free + i * page, page)?;
        }
        let unmapped = start.elapsed();
        // The same new pages mapped in one call: one access-rights call over all of them.
        let sizes = vec![page; PAGES as usize];
        let start = Instant::now();
        backend.map_pages(free, &sizes)?;
        let mapped_together = start.elapsed();
        backend.unmap(free, PAGES * page)?;
        let state = match done {
            None => "idle".to_string(),
            Some(event) => {
                let finished = backend.event_complete(event)?;
                backend.release_event(event);
                format!(
                    "busy ({BUSY_MEMSETS} memsets of {} queued; still running after the page-by-page moves: {}; \
                     finished by the end: {finished})",
                    human_bytes(BUSY_BYTES),
                    still_running,
                )
            }
        };
        let p = human_bytes(page);
        println!("{p} pages, {state}:");
        println!("  move one page (unmap, map, set access): {:8.1} us per call", per_call(moved_there, PAGES));
        println!("  move {PAGES} pages in one call:            {:8.1} us per page", per_call(moved_back, PAGES));
        println!("  map one new page (create, map, access): {:8.1} us per call", per_call(mapped_fresh, PAGES));
        println!("  map {PAGES} new pages in one call:          {:8.1} us per page", per_call(mapped_together, PAGES));
        println!("  unmap and release one page:             {:8.1} us per call", per_call(unmapped, PAGES));
        backend.synchronize()?;
    }
    backend.unmap(mapped, PAGES * page)?;
    backend.release_range(range, 4 * PAGES * page)?;
    backend.unmap(busy, BUSY_BYTES)?;
    backend.release_range(busy, BUSY_BYTES)?;
    Ok(())
}
