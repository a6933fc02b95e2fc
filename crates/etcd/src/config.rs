//! The etcd source's configuration: endpoints, TLS, tunables, and which progress
//! notifications can be trusted. A leaf: the source and its followers both read it.

use std::time::Duration;

use crate::decode::ValueDecoder;

/// Tunables of the etcd source.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// Client URLs of the etcd members (`http://127.0.0.1:2379`).
    pub endpoints: Vec<String>,
    /// Keys per page of a list (kube-apiserver's cacher reads 10,000 at a time).
    pub page_size: i64,
    /// How often every follower asks etcd for a progress notification, so idle
    /// resources' RVs (and their bookmarks) advance.
    pub progress_interval: Duration,
    /// Limit on one unary request (list page, revision probe, write).
    pub request_timeout: Duration,
    /// First reconnect/relist delay; doubles up to `max_backoff`.
    pub min_backoff: Duration,
    /// Longest reconnect/relist delay.
    pub max_backoff: Duration,
    /// Which progress notifications can be trusted; `start` sets it from etcd's version.
    pub progress_order: ProgressOrder,
    /// Test knob for the history checker (`crates/systest/tests/history.rs`, feature
    /// `fault-injection`, never in a release binary): apply etcd's
    /// current revision to the cache as soon as a consistent read learns it, before the
    /// watch has delivered the events up to it — the bug the checker must find. Never set
    /// it otherwise.
    #[cfg(feature = "fault-injection")]
    pub fault_early_progress: bool,
    /// Reads stored values: JSON, protobuf, and encrypted ones with the configured keys.
    pub decoder: ValueDecoder,
    /// Accept writes and commit them to etcd directly, bypassing kube-apiserver's
    /// admission, defaulting, validation and encryption at rest: tests and labs only.
    /// Off: every write is 405 with [`READ_ONLY`].
    pub unsafe_direct_writes: bool,
    /// TLS to etcd (for `https://` endpoints): the CA etcd's certificate is verified
    /// against, host names included, and the client certificate etcd asks for.
    pub tls: Option<EtcdTls>,
    /// kube-apiserver's `--etcd-prefix`: custom resources found later are read under it
    /// (built-in resources come with their prefixes set: `ResourceInfo::under_etcd_root`).
    pub prefix: String,
}

/// TLS material for etcd, as PEM: kube-apiserver's `--etcd-cafile`, `--etcd-certfile`,
/// `--etcd-keyfile`.
#[derive(Clone, Default)]
pub struct EtcdTls {
    /// CA bundle that signed etcd's serving certificate.
    pub ca_pem: Option<Vec<u8>>,
    /// Client certificate (chain) presented to etcd.
    pub cert_pem: Option<Vec<u8>>,
    /// The client certificate's private key.
    pub key_pem: Option<Vec<u8>>,
    /// The files the PEMs were read from, if they were: looked at every
    /// [`TLS_RELOAD_CHECK`] and, when one changed, read again and a new connection made
    /// with them (requests and watches already open finish on the old one).
    pub reload_from: Option<EtcdTlsFiles>,
}

/// How often [`EtcdTlsFiles`] are looked at for a renewal.
pub const TLS_RELOAD_CHECK: Duration = Duration::from_secs(10);

/// kube-apiserver's `--etcd-cafile`, `--etcd-certfile` and `--etcd-keyfile`, as paths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EtcdTlsFiles {
    /// The CA bundle's file.
    pub ca: Option<std::path::PathBuf>,
    /// The client certificate's file.
    pub cert: Option<std::path::PathBuf>,
    /// The client key's file.
    pub key: Option<std::path::PathBuf>,
}

impl EtcdTlsFiles {
    /// Reads the files named (an error names the file), remembering them for reloads.
    pub fn read(&self) -> Result<EtcdTls, String> {
        let pem = |p: &Option<std::path::PathBuf>| {
            p.as_ref()
                .map(|p| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display())))
                .transpose()
        };
        Ok(EtcdTls {
            ca_pem: pem(&self.ca)?,
            cert_pem: pem(&self.cert)?,
            key_pem: pem(&self.key)?,
            reload_from: Some(self.clone()),
        })
    }

    /// The files' modification times (None for a file absent or unreadable).
    pub(crate) fn stamps(&self) -> [Option<std::time::SystemTime>; 3] {
        let m = |p: &Option<std::path::PathBuf>| {
            p.as_ref()
                .and_then(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        };
        [m(&self.ca), m(&self.cert), m(&self.key)]
    }
}

impl std::fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("EtcdTls")
            .field("ca", &self.ca_pem.is_some())
            .field("client_certificate", &self.cert_pem.is_some())
            .finish()
    }
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            endpoints: vec!["http://127.0.0.1:2379".into()],
            page_size: 10_000,
            progress_interval: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            progress_order: ProgressOrder::Ordered,
            #[cfg(feature = "fault-injection")]
            fault_early_progress: false,
            decoder: ValueDecoder::default(),
            unsafe_direct_writes: false,
            tls: None,
            prefix: listwatch_core::resource::DEFAULT_ETCD_ROOT.into(),
        }
    }
}

/// Why a write to the etcd source is refused.
pub const READ_ONLY: &str = "listwatch serves reads from the cluster's etcd; writes belong to kube-apiserver (its admission, defaulting, validation and encryption at rest): send them there, or run listwatch with --upstream <kube-apiserver URL> to pass them on (--etcd-unsafe-direct-writes writes into etcd directly, for tests and labs only)";

/// Whether etcd sends a *requested* progress notification in order with the events it
/// covers — what a consistent read relies on to know the cache has caught up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressOrder {
    /// etcd ≥ 3.4.31 / 3.5.13: a requested notification goes through the watch stream once
    /// every watcher on it has caught up, so its revision covers every event before it.
    Ordered,
    /// etcd with etcd#15220 or etcd#17507 (3.4 < 3.4.31, 3.5 < 3.5.13): a requested
    /// notification can be answered with etcd's current revision ahead of queued events —
    /// and, right after a watch is (re)created, of events etcd has not even sent yet
    /// (catch-up). Applying it served stale consistent reads (issue 14). Only
    /// etcd's periodic notifications on the watch itself (`--experimental-watch-progress-
    /// notify-interval`, default 10 min) are applied; consistent reads of a resource
    /// without writes wait for them (docs/etcd.md).
    OwnWatchOnly,
}
