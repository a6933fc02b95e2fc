//! One module per scenario (see the README for what each measures).

pub mod churn;
pub mod idle_watchers;
pub mod informers;
pub mod kubelet_storm;
pub mod list;
pub mod relist_storm;
pub mod slow_readers;
pub mod writes;
