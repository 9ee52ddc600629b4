//! Measures how long reading a trace takes: the file read, gunzip, and decoding into events.
//!
//! ```sh
//! cargo run -p vrampool-trace --release --example decode_speed [TRACE] [RUNS]
//! ```
//!
//! TRACE defaults to the gpt_serve snapshot (a million events) in `traces/`; RUNS to 5. Prints each stage's
//! median and fastest time.

use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use vrampool_trace::{ReadOptions, parse_trace, read_trace};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../traces/gpt_serve.pickle.gz"));
    let runs: usize = args.next().map(|runs| runs.parse()).transpose()?.unwrap_or(5).max(1);
    let options = ReadOptions::default();

    let compressed = std::fs::read(&path)?;
    let mut content = Vec::new();
    if compressed.starts_with(&[0x1f, 0x8b]) {
        flate2::read::MultiGzDecoder::new(&compressed[..]).read_to_end(&mut content)?;
    } else {
        content.clone_from(&compressed);
    }
    println!("{}: {} bytes, {} bytes decompressed, {runs} runs", path.display(), compressed.len(), content.len());

    let mut whole = Vec::new();
    let mut gunzip = Vec::new();
    let mut decode = Vec::new();
    let mut events = 0;
    for _ in 0..runs {
        let start = Instant::now();
        let trace = read_trace(&path, &options)?;
        whole.push(start.elapsed());
        events = trace.events.len();

        let start = Instant::now();
        let mut out = Vec::with_capacity(content.len());
        flate2::read::MultiGzDecoder::new(&compressed[..]).read_to_end(&mut out)?;
        gunzip.push(start.elapsed());

        let start = Instant::now();
        let trace = parse_trace("content", &content, &options)?;
        decode.push(start.elapsed());
        assert_eq!(trace.events.len(), events);
    }
    println!("{events} events");
    report("read_trace (read + gunzip + decode)", &mut whole);
    report("gunzip alone", &mut gunzip);
    report("decode alone (pickle into events)", &mut decode);
    Ok(())
}

fn report(what: &str, times: &mut [Duration]) {
    times.sort();
    let median = times[times.len() / 2];
    println!("{what:<40} median {:>8.1} ms, fastest {:>8.1} ms", ms(median), ms(times[0]));
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
