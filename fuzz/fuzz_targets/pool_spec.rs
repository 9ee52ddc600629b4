//! Any text as a config string: parsing it ends in a spec or an error, never a panic, and a spec's own
//! text parses back to it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vrampool::PoolSpec;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(spec) = PoolSpec::parse(text) else { return };
    let shown = spec.to_string();
    let again = PoolSpec::parse(&shown).unwrap_or_else(|error| panic!("`{text}` shows as `{shown}`: {error}"));
    assert_eq!(again.to_string(), shown, "`{text}`");
});
