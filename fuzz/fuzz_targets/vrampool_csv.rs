//! Any bytes as the lines of a vrampool CSV log, after its header.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vrampool_trace::VRAMPOOL_CSV_HEADER;

fuzz_target!(|data: &[u8]| {
    let mut log = format!("{VRAMPOOL_CSV_HEADER}\n").into_bytes();
    log.extend_from_slice(data);
    vrampool_fuzz::read_and_check("fuzz.csv", &log);
});
