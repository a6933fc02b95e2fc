//! Stores the store's and the codec's tests start from.

use std::sync::Arc;

use listwatch_store::{Record, Store, StoreConfig};

/// An empty store of the built-in resource `plural` (`pods`, `configmaps`) at `rv`, with
/// the default configuration; its [`Store::info`] is the resource's.
pub fn empty_store(plural: &str, rv: u64) -> Arc<Store> {
    let info = listwatch_core::builtin_resource(plural)
        .unwrap_or_else(|| panic!("{plural} is not a built-in resource"));
    Store::new(
        Arc::new(info),
        rv,
        Vec::<Record>::new(),
        StoreConfig::default(),
    )
}
