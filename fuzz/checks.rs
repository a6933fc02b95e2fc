//! The properties every fuzz target checks, shared with the corpus replay test
//! (`crates/store/tests/fuzz_corpus.rs`) so CI re-checks every committed input on stable.

use listwatch_core::fields::FieldSelector;
use listwatch_core::labels::LabelSelector;
use listwatch_core::{ContinueToken, ListOptions, builtin_resources};
use listwatch_store::Record;

/// `ListOptions::parse` returns options or a well-formed `Status`, never panics.
pub fn list_options(data: &[u8]) {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };
    let resources = builtin_resources();
    for ns in [Some("ns-1"), None] {
        match ListOptions::parse(query, &resources[0], ns) {
            Ok(o) => {
                if o.flags.send_initial_events.is_some() {
                    assert!(o.flags.watch, "sendInitialEvents accepted without watch");
                }
            }
            Err(e) => {
                let s = e.to_status();
                assert!((400..600).contains(&s.code));
                assert!(serde_json::from_slice::<serde_json::Value>(&s.body).is_ok());
            }
        }
    }
}

/// Label selectors parse or fail with a message; parsed ones evaluate.
pub fn label_selector(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(sel) = LabelSelector::parse(s) {
        let _ = sel.matches(|k| (k.len() % 2 == 0).then_some("x"));
        let _ = sel.matches(|_| None);
    }
}

/// Field selectors parse or fail with a message; parsed ones evaluate.
pub fn field_selector(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(sel) = FieldSelector::parse(s) {
        let _ = sel.matches(|f| if f == "metadata.name" { "a" } else { "" });
        let _ = sel.exact("metadata.namespace");
    }
}

/// Continue tokens decode or fail; a decoded start key stays under the list's prefix and a
/// re-encoded token decodes to the same RV; base64url round-trips any bytes.
pub fn continue_token(data: &[u8]) {
    if let Ok(token) = std::str::from_utf8(data) {
        for prefix in ["", "ns-1/"] {
            if let Ok(t) = ContinueToken::decode(token, prefix) {
                assert!(t.start_key.starts_with(prefix), "escaped the prefix: {t:?}");
                // No `..` path segment (kube-apiserver's path.Clean rule); `+..` is a name.
                let rel = &t.start_key[prefix.len()..];
                assert!(!rel.split('/').any(|seg| seg == ".."), "{t:?}");
                if t.rv > 0 {
                    let again =
                        ContinueToken::encode(t.rv, prefix, t.start_key.trim_end_matches('\0'));
                    let t2 = ContinueToken::decode(&again, prefix).expect("re-encoded decodes");
                    assert_eq!(t2.rv, t.rv);
                }
            }
        }
    }
    let enc = listwatch_core::continue_token::base64url_encode(data);
    assert_eq!(
        listwatch_core::continue_token::base64url_decode(&enc).expect("decodes"),
        data
    );
}

/// Ingest accepts or refuses any bytes; an accepted record is JSON with the given RV and a
/// key that ends with its name.
pub fn ingest(data: &[u8]) {
    let resources = builtin_resources();
    if let Ok(r) = Record::ingest(data, &resources[0], 42) {
        let v: serde_json::Value =
            serde_json::from_slice(r.bytes()).expect("ingested record is JSON");
        assert_eq!(v["metadata"]["resourceVersion"], "42");
        let name = v["metadata"]["name"].as_str().expect("name");
        assert!(r.key().ends_with(name));
    }
}
