//! Fuzz target: see `checks::list_options` for the property checked.
#![no_main]
#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::list_options(data));
