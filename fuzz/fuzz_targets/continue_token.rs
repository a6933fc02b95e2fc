//! Fuzz target: see `checks::continue_token` for the property checked.
#![no_main]
#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::continue_token(data));
