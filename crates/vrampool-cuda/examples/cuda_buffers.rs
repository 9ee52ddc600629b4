//! Pool memory used from CUDA code: a dynamic pool on virtual memory hands out buffers that cudarc copies
//! into, between and out of.
//!
//! Run with `cargo run -p vrampool-cuda --example cuda_buffers` on a machine with an NVIDIA GPU; elsewhere
//! it says so and exits with status 1.

use std::process::ExitCode;
use std::sync::Arc;

use vrampool::{DynamicConfig, DynamicPool, Pool, human_bytes};
use vrampool_cuda::{CudaMemory, CudaVirtual, PoolSlice};

/// Elements per buffer: 16 Mi `u32`s, 64 MiB.
const LEN: usize = 16 << 20;

fn main() -> ExitCode {
    let backend = match CudaVirtual::new(0) {
        Ok(backend) => Arc::new(backend),
        Err(err) => {
            eprintln!("cuda_buffers needs an NVIDIA GPU with its driver: {err}");
            return ExitCode::from(1);
        }
    };
    match run(&backend) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("cuda_buffers failed: {err}");
            ExitCode::from(1)
        }
    }
}

fn run(backend: &Arc<CudaVirtual>) -> Result<(), Box<dyn std::error::Error>> {
    let pool = DynamicPool::new(backend.clone(), DynamicConfig::default().initial_size(64 << 20))?;
    let context = backend.context().ok_or("no CUDA context behind the backend")?;
    let stream = context.new_stream()?;

    // Three buffers from the pool; the first fills from the host, the second copies it on the device, the
    // third is zeroed by the driver.
    let mut source = PoolSlice::<u32, _>::zeroed(&pool, backend, LEN, &stream)?;
    let mut copy = PoolSlice::<u32, _>::zeroed(&pool, backend, LEN, &stream)?;
    let mut zeroed = PoolSlice::<u32, _>::zeroed(&pool, backend, LEN, &stream)?;
    let pattern: Vec<u32> = (0..LEN as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    stream.memcpy_htod(&pattern, &mut source)?;
    stream.memcpy_dtod(&source, &mut copy)?;
    stream.memcpy_htod(&pattern, &mut zeroed)?;
    stream.memset_zeros(&mut zeroed)?;

    let back = stream.clone_dtoh(&copy)?;
    let zeros = stream.clone_dtoh(&zeroed)?;
    if back != pattern {
        let at = back.iter().zip(&pattern).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!("copy differs at element {at}: {:#x} != {:#x}", back[at], pattern[at]).into());
    }
    if let Some(at) = zeros.iter().position(|&x| x != 0) {
        return Err(format!("zeroed buffer holds {:#x} at element {at}", zeros[at]).into());
    }

    let stats = pool.stats();
    println!(
        "buffers at {:#x}, {:#x}, {:#x}: host -> device -> device -> host copy of {} checked, memset checked",
        source.addr(),
        copy.addr(),
        zeroed.addr(),
        human_bytes((LEN * 4) as u64),
    );
    println!(
        "pool: {} allocated, {} reserved ({} mapped by the backend), {} growths, {} backend calls",
        human_bytes(stats.allocated_bytes.current),
        human_bytes(stats.reserved_bytes.current),
        human_bytes(backend.mapped_bytes()),
        stats.growths,
        stats.backend_calls,
    );
    Ok(())
}
