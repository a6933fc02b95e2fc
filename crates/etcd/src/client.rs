//! The etcd client: how it connects, and the one in use (replaced as TLS files renew).

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

use crate::EtcdError;
use crate::config::EtcdTls;

/// The etcd client new requests and (re)started watches use. Replaced when the TLS files
/// change: what is open on the old connection finishes there (a renewed certificate
/// matters only to new handshakes), so nothing in flight is dropped.
pub(crate) struct CurrentClient(parking_lot::RwLock<Client>);

impl CurrentClient {
    /// Starts with `client`.
    pub(crate) fn new(client: Client) -> Self {
        CurrentClient(parking_lot::RwLock::new(client))
    }

    /// The client to use now (a cheap clone of its channel).
    pub(crate) fn get(&self) -> Client {
        self.0.read().clone()
    }

    /// Makes `client` the one new requests use.
    pub(crate) fn replace(&self, client: Client) {
        *self.0.write() = client;
    }
}

/// A client to `endpoints` with `tls`, keep-alives and leader-required watches.
pub(crate) async fn connect(
    endpoints: &[String],
    tls: Option<&EtcdTls>,
) -> Result<Client, EtcdError> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        // Detects a dead member under an open watch (no TCP reset when it is killed -9
        // behind a proxy, or frozen) and lets the balanced channel move on.
        .with_keep_alive(Duration::from_secs(5), Duration::from_secs(5))
        .with_keep_alive_while_idle(true)
        // A member cut off from the quorum would otherwise keep our watch open silently.
        .with_require_leader(true);
    if let Some(tls) = tls {
        let mut t = etcd_client::TlsOptions::new();
        if let Some(ca) = &tls.ca_pem {
            t = t.ca_certificate(etcd_client::Certificate::from_pem(ca));
        }
        if let (Some(cert), Some(key)) = (&tls.cert_pem, &tls.key_pem) {
            t = t.identity(etcd_client::Identity::from_pem(cert, key));
        }
        options = options.with_tls(t);
    }
    Ok(Client::connect(endpoints, Some(options)).await?)
}
