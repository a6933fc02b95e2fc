//! Any bytes as an object: `Record::ingest` accepts or refuses, never panics; an accepted
//! record is valid JSON whose `metadata.resourceVersion` is the RV given, whose name
//! matches its key, and whose list-item form is valid JSON too.
#![no_main]
use libfuzzer_sys::fuzz_target;
use listwatch_core::builtin_resources;
use listwatch_store::Record;

fuzz_target!(|data: &[u8]| {
    let resources = builtin_resources();
    let info = &resources[0];
    if let Ok(r) = Record::ingest(data, info, 42) {
        let v: serde_json::Value =
            serde_json::from_slice(r.bytes()).expect("ingested record is JSON");
        assert_eq!(v["metadata"]["resourceVersion"], "42");
        let name = v["metadata"]["name"].as_str().expect("name");
        assert!(r.key().ends_with(name));
    }
});
