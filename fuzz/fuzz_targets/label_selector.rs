//! Any label selector: parse or a message, never a panic; a parsed selector evaluates
//! against any label set without panicking.
#![no_main]
use libfuzzer_sys::fuzz_target;
use listwatch_core::labels::LabelSelector;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(sel) = LabelSelector::parse(s) {
        let _ = sel.matches(|k| (k.len() % 2 == 0).then_some("x"));
        let _ = sel.matches(|_| None);
    }
});
