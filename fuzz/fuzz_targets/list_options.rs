//! Any query string: `ListOptions::parse` returns options or a `Status`-mapped error,
//! never panics, and accepted options are self-consistent.
#![no_main]
use libfuzzer_sys::fuzz_target;
use listwatch_core::{ListOptions, builtin_resources};

fuzz_target!(|data: &[u8]| {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };
    let resources = builtin_resources();
    for (info, ns) in [(&resources[0], Some("ns-1")), (&resources[0], None)] {
        match ListOptions::parse(query, info, ns) {
            Ok(o) => {
                // A watch-list always comes with bookmarks, as the API requires.
                if o.send_initial_events.is_some() {
                    assert!(o.watch);
                }
            }
            Err(e) => {
                let s = e.to_status();
                assert!(s.code >= 400 && s.code < 600);
                assert!(serde_json::from_slice::<serde_json::Value>(&s.body).is_ok());
            }
        }
    }
});
