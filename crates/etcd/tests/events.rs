//! The lost-event guard without a network: watch events are checked against a real
//! `Store` before they are applied, and every event that could hide a lost change makes
//! the cache unsafe (the follower then relists) instead of leaving a stale object.

use std::sync::Arc;

use listwatch_core::builtin_resource;
use listwatch_etcd::ValueDecoder;
use listwatch_etcd::follower::{WatchedEvent, WatchedKv, apply_events};
use listwatch_store::{Record, Store, StoreConfig};

fn pods_store() -> Arc<Store> {
    let info = builtin_resource("pods").expect("pods");
    let json = br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns"}}"#;
    let rec = Record::ingest(json, &info, 5).expect("ingest");
    Store::new(Arc::new(info), 10, [rec], StoreConfig::default())
}

fn kv(name: &str, create: i64, rev: i64) -> WatchedKv {
    WatchedKv {
        key: format!("/registry/pods/ns/{name}").into_bytes(),
        value: format!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns"}}}}"#
        )
        .into_bytes(),
        create_revision: create,
        mod_revision: rev,
    }
}

/// A put of `kv` (`prev` the value it replaced, when etcd sent it).
fn put(kv: WatchedKv, prev: Option<WatchedKv>) -> WatchedEvent {
    WatchedEvent {
        delete: false,
        kv,
        prev,
    }
}

/// A delete of pod `ns/<name>` at revision `rev` (etcd sends the key without a value).
fn delete(name: &str, rev: i64, prev: Option<WatchedKv>) -> WatchedEvent {
    WatchedEvent {
        delete: true,
        kv: WatchedKv {
            value: Vec::new(),
            ..kv(name, 0, rev)
        },
        prev,
    }
}

#[test]
fn update_without_prev_kv_is_unsafe() {
    let s = pods_store();
    let e = put(kv("a", 5, 11), None);
    let err = apply_events(&s, &ValueDecoder::default(), &[e]).expect_err("unsafe");
    assert!(err.0.contains("without prev_kv"), "{err}");
    assert_eq!(s.rv(), 10, "nothing applied");
}

#[test]
fn delete_without_prev_kv_is_unsafe() {
    let s = pods_store();
    let e = delete("a", 11, None);
    assert!(apply_events(&s, &ValueDecoder::default(), &[e]).is_err());
    assert!(s.current().get("ns/a").is_some());
}

#[test]
fn delete_of_an_object_never_seen_is_unsafe() {
    let s = pods_store();
    let e = delete("ghost", 11, Some(kv("ghost", 7, 7)));
    let err = apply_events(&s, &ValueDecoder::default(), &[e]).expect_err("unsafe");
    assert!(err.0.contains("does not hold"), "{err}");
}

#[test]
fn event_at_or_below_the_cache_rv_is_unsafe() {
    let s = pods_store();
    let e = put(kv("b", 9, 9), None);
    assert!(
        apply_events(&s, &ValueDecoder::default(), &[e]).is_err(),
        "revision went backwards"
    );
}

#[test]
fn create_update_delete_apply_in_order() {
    let s = pods_store();
    let events = [
        put(kv("b", 11, 11), None),
        put(kv("a", 5, 12), Some(kv("a", 5, 5))),
        delete("b", 13, Some(kv("b", 11, 11))),
    ];
    assert_eq!(apply_events(&s, &ValueDecoder::default(), &events), Ok(0));
    assert_eq!(s.rv(), 13);
    assert_eq!(s.current().get("ns/a").map(|r| r.rv()), Some(12));
    assert!(s.current().get("ns/b").is_none());
}

#[test]
fn protobuf_value_replacing_an_object_removes_it() {
    let s = pods_store();
    let e = put(
        WatchedKv {
            value: b"k8s\0\n\x02v1".to_vec(),
            ..kv("a", 5, 11)
        },
        Some(kv("a", 5, 5)),
    );
    assert_eq!(
        apply_events(&s, &ValueDecoder::default(), &[e]),
        Ok(1),
        "skipped, counted"
    );
    assert!(
        s.current().get("ns/a").is_none(),
        "the old version is not served as if current"
    );
}
