//! Any bytes as a trace file: mostly PyTorch snapshot pickles, plain or gzipped, from the corpus.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| vrampool_fuzz::read_and_check("fuzz.pickle", data));
