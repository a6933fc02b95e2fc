//! Fuzz target: see `checks::field_selector` for the property checked.
#![no_main]
#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::field_selector(data));
