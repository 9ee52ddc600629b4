//! Paths of the test data and the bundled traces.

#![allow(dead_code)]

use std::path::PathBuf;

/// A file in `tests/data/`.
pub fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// A bundled trace in the repository's `traces/`.
pub fn bundled(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../traces").join(name)
}

/// The bytes of a file in `tests/data/`.
pub fn data_bytes(name: &str) -> Vec<u8> {
    std::fs::read(data(name)).unwrap_or_else(|error| panic!("{name}: {error}"))
}
