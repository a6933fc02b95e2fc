//! Any field selector: parse or a message; parsed selectors evaluate without panicking.
#![no_main]
use libfuzzer_sys::fuzz_target;
use listwatch_core::fields::FieldSelector;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(sel) = FieldSelector::parse(s) {
        let _ = sel.matches(|f| if f == "metadata.name" { "a" } else { "" });
        let _ = sel.exact("metadata.namespace");
    }
});
