//! listwatch-etcd: the production source. It follows a real etcd holding objects in
//! kube-apiserver's key layout, keeps every served resource's cache exactly at an etcd
//! revision, and sends writes to etcd in transactions.
//!
//! - [`layout`]: etcd keys ↔ store keys (`/registry/pods/<ns>/<name>` ↔ `<ns>/<name>`).
//! - [`follower`]: one resource's state machine — loading → following → unsafe → relisting.
//! - [`EtcdSource`]: the followers, consistent-read revisions and the write verbs.

pub mod convert;
pub mod decode;
pub mod encryption;
pub mod follower;
pub mod layout;
mod source;

pub use decode::{DecodeError, ValueDecoder};
pub use encryption::Decryptor;
pub use follower::{FollowerState, FollowerStats, ProgressOrder};
pub use source::{CRD_DRAIN, EtcdConfig, EtcdSource};

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
    /// A storage outage is never a 500: a slow etcd is 504 `Timeout`, anything between us
    /// and etcd (unreachable member, broken HTTP/2 connection — gRPC `Unknown` "h2 protocol
    /// error" —, leader loss, cancelled stream) is 503 `ServiceUnavailable`, both of which
    /// clients retry. Only an answer etcd gives to a malformed request would be our bug.
    fn from(e: EtcdError) -> Self {
        use tonic::Code;
        match &e {
            EtcdError::Timeout(_) => ApiError::Timeout(e.to_string()),
            EtcdError::Client(etcd_client::Error::GRpcStatus(s)) => match s.code() {
                Code::DeadlineExceeded => ApiError::Timeout(e.to_string()),
                Code::InvalidArgument | Code::OutOfRange | Code::Unimplemented => {
                    ApiError::Internal(e.to_string())
                }
                _ => ApiError::Unavailable(e.to_string()),
            },
            EtcdError::Client(_) | EtcdError::NoHeader => ApiError::Unavailable(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_outages_are_503_or_504_never_500() {
        let code = |e: EtcdError| ApiError::from(e).to_status().code;
        let grpc = |c: tonic::Code, m: &str| {
            EtcdError::Client(etcd_client::Error::GRpcStatus(tonic::Status::new(c, m)))
        };
        assert_eq!(
            code(grpc(
                tonic::Code::Unknown,
                "h2 protocol error: error reading a body from connection"
            )),
            503
        );
        assert_eq!(
            code(grpc(tonic::Code::Unavailable, "connection refused")),
            503
        );
        assert_eq!(code(grpc(tonic::Code::Cancelled, "cancelled")), 503);
        assert_eq!(code(grpc(tonic::Code::DeadlineExceeded, "deadline")), 504);
        assert_eq!(
            code(EtcdError::Timeout(std::time::Duration::from_secs(10))),
            504
        );
        assert_eq!(code(EtcdError::NoHeader), 503);
        assert_eq!(code(grpc(tonic::Code::InvalidArgument, "bad range")), 500);
    }
}
