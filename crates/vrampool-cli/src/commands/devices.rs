//! `vrampool devices`: the GPUs the CUDA driver sees.

use std::io::Write;

use vrampool::whole_mib;

use crate::error::{Error, Result};
use crate::table::Table;

/// Lists each GPU, or says clearly why none can be listed.
pub fn run(out: &mut dyn Write) -> Result<()> {
    let devices = vrampool_cuda::devices().map_err(|err| Error::Device(err.to_string()))?;
    if devices.is_empty() {
        outln!(out, "the CUDA driver sees no GPU")?;
        return Ok(());
    }
    let mut table = Table::new(&["ordinal", "name", "memory", "vm granularity", "memory pools"]);
    for d in devices {
        table.row(vec![
            d.ordinal.to_string(),
            d.name.clone(),
            whole_mib(d.total_memory),
            d.granularity.map_or_else(|| "none".into(), vrampool::format_bytes),
            if d.memory_pools_supported { "yes".into() } else { "no".into() },
        ]);
    }
    outln!(out, "{}", table.render())?;
    Ok(())
}
