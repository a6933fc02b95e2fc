//! `Store::progress_from`: a source's "nothing happened up to rv" that holds only while the
//! store is still at the RV the source compared against.

use std::sync::Arc;

use listwatch_store::{Change, Record, Store};

fn store() -> Arc<Store> {
    listwatch_testkit::store::empty_store("configmaps", 5)
}

fn put(store: &Store, name: &str, rv: u64) {
    let json = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"d"}}}}"#
    );
    let r = Record::ingest(json.as_bytes(), store.info(), rv).expect("record");
    store.apply([Change::Put(r)]).expect("apply");
}

#[test]
fn advances_only_from_the_compared_rv() {
    let s = store();
    assert!(s.progress_from(5, 9));
    assert_eq!(s.rv(), 9);
    // An event applied after the comparison: the proof no longer holds.
    put(&s, "a", 12);
    assert!(!s.progress_from(9, 20));
    assert_eq!(s.rv(), 12);
    assert_eq!(s.current().len(), 1);
    // A relist in between, even at the compared RV's successor: refused too.
    s.replace(13, Vec::<Record>::new());
    assert!(!s.progress_from(12, 20));
    assert_eq!(s.rv(), 13);
    // Never backwards.
    assert!(s.progress_from(13, 10));
    assert_eq!(s.rv(), 13);
}
