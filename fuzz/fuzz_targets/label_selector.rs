//! Fuzz target: see `checks::label_selector` for the property checked.
#![no_main]
#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::label_selector(data));
