//! listwatch-etcd: the production source. It follows a real etcd holding objects in
//! kube-apiserver's key layout, keeps every served resource's cache exactly at an etcd
//! revision, and sends writes to etcd in transactions.
//!
//! - [`layout`]: etcd keys ↔ store keys (`/registry/pods/<ns>/<name>` ↔ `<ns>/<name>`).
//! - [`follower`]: one resource's state machine — loading → following → unsafe → relisting.
//! - [`EtcdSource`]: the followers, consistent-read revisions and the write verbs.

pub mod follower;
pub mod layout;
mod source;

pub use follower::{FollowerState, FollowerStats};
pub use source::{EtcdConfig, EtcdSource};

use listwatch_core::ApiError;

/// What can go wrong talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// etcd answered with an error or could not be reached.
    #[error("etcd: {0}")]
    Client(#[from] etcd_client::Error),
    /// etcd did not answer in time.
    #[error("etcd did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// A response lacked its header (never sent by a real etcd).
    #[error("etcd response without a header")]
    NoHeader,
}

impl From<EtcdError> for ApiError {
    fn from(e: EtcdError) -> Self {
        // kube-apiserver answers storage outages with 500/504; 503 tells clients to retry.
        match e {
            EtcdError::Timeout(_) => ApiError::Unavailable(e.to_string()),
            EtcdError::Client(etcd_client::Error::GRpcStatus(ref s))
                if s.code() == tonic::Code::Unavailable
                    || s.code() == tonic::Code::DeadlineExceeded =>
            {
                ApiError::Unavailable(e.to_string())
            }
            EtcdError::Client(etcd_client::Error::TransportError(_)) => {
                ApiError::Unavailable(e.to_string())
            }
            _ => ApiError::Internal(e.to_string()),
        }
    }
}
