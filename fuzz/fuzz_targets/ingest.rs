//! Fuzz target: see `checks::ingest` for the property checked.
#![no_main]
#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::ingest(data));
