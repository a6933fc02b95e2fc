//! listwatch-etcd: the production source. It follows a real etcd holding objects in
//! kube-apiserver's key layout, keeps every served resource's cache exactly at an etcd
//! revision, and sends writes to etcd in transactions.
//!
//! - [`layout`]: etcd keys ↔ store keys (`/registry/pods/<ns>/<name>` ↔ `<ns>/<name>`).
//! - [`follower`]: etcd as the backend of a follower (`listwatch_sources::follower`'s state
//!   machine: loading → following → unsafe → relisting), and how watch events are applied.
//! - [`EtcdSource`]: the followers, consistent-read revisions and the write verbs.

mod client;
mod config;
pub mod convert;
pub mod decode;
pub mod encryption;
pub mod follower;
pub mod layout;
mod source;

pub use config::{EtcdConfig, EtcdTls, EtcdTlsFiles, ProgressOrder, READ_ONLY, TLS_RELOAD_CHECK};
pub use decode::{DecodeError, ValueDecoder};
pub use encryption::Decryptor;
pub use listwatch_sources::follower::{FollowerState, FollowerStats};
pub use source::{CRD_DRAIN, EtcdSource};

use listwatch_core::ApiError;

/// What can go wrong talking to etcd.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// etcd answered with an error or could not be reached (with every cause in the chain:
    /// "connection refused", a certificate etcd or we refused…).
    #[error("etcd: {}", describe(.0))]
    Client(#[from] etcd_client::Error),
    /// etcd did not answer in time.
    #[error("etcd did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// A response lacked its header (never sent by a real etcd).
    #[error("etcd response without a header")]
    NoHeader,
}

impl EtcdError {
    /// What an operator can do about this error, by what it says ("" when nothing
    /// specific): a CA that does not verify etcd's certificate, a missing client
    /// certificate, nothing listening.
    pub fn hint(&self) -> &'static str {
        let text = self.to_string().to_ascii_lowercase();
        let has = |s: &str| text.contains(&s.to_ascii_lowercase());
        if has("NotValidForName") {
            "; etcd's certificate is not valid for the endpoint's host name: use a name or address it lists"
        } else if has("UnknownIssuer") || has("invalid peer certificate") {
            "; etcd's certificate did not verify against --etcd-cafile: give the CA that signed it"
        } else if has("CertificateRequired")
            || has("certificate required")
            || has("BadCertificate")
            || has("bad certificate")
        {
            "; etcd wants a client certificate it trusts: give --etcd-certfile and --etcd-keyfile"
        } else if has("connection refused") {
            "; is etcd running at that address?"
        } else if [
            "connection closed",
            "broken pipe",
            "connection reset",
            "stream closed",
            "eof",
            "connection error",
        ]
        .iter()
        .any(|s| has(s))
        {
            // With TLS 1.3 the client's handshake completes before etcd checks the client
            // certificate; etcd's refusal then surfaces as whichever of these the first
            // write meets (seen: closed, broken pipe, reset).
            "; etcd closed the connection: if it requires client certificates (--client-cert-auth), give --etcd-certfile and --etcd-keyfile"
        } else {
            ""
        }
    }
}

/// One line for an etcd client error: a gRPC status by its message and the causes below it
/// (its own Display dumps the source's Debug form).
fn describe(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            let mut text = s.message().to_string();
            if let Some(source) = std::error::Error::source(s) {
                let below = causes(source);
                if !text.contains(&below) {
                    text.push_str(": ");
                    text.push_str(&below);
                }
            }
            text
        }
        other => causes(other),
    }
}

/// `e` and its sources in one line, each once (transport errors hide their cause below a
/// generic "transport error").
fn causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
        next = cause.source();
    }
    text
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
