//! The three lines that make a pool and allocate from it, on the simulated H200.
//!
//! Run with `cargo run -p vrampool --example quickstart`.

use std::sync::Arc;

use vrampool::{DynamicConfig, DynamicPool, Pool, PoolExt, SimDevice, human_bytes};

fn main() -> vrampool::Result<()> {
    let pool = DynamicPool::new(Arc::new(SimDevice::default()), DynamicConfig::default())?;
    let weights = pool.buffer(512 << 20)?; // freed when dropped
    let activations = pool.buffer(96 << 20)?;

    let stats = pool.stats();
    println!("weights at {:#x}, activations at {:#x}", weights.addr(), activations.addr());
    println!(
        "allocated {} of {} reserved ({} growths, {} device calls)",
        human_bytes(stats.allocated_bytes.current),
        human_bytes(stats.reserved_bytes.current),
        stats.growths,
        stats.backend_calls,
    );
    drop((weights, activations));
    println!("after drop: {} allocated", human_bytes(pool.stats().allocated_bytes.current));
    Ok(())
}
