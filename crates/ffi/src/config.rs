//! The JSON configuration [`crate::lw_new`] reads.

use listwatch::ResourceInfo;
use serde::Deserialize;

/// An instance's configuration: which resources, which source, how many threads.
///
/// ```json
/// {"workers": 2, "startRv": 1, "resources": null, "source": {"hostFed": {}}}
/// ```
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Worker threads of the instance's tokio runtime (timers, etcd followers, views).
    #[serde(default = "two")]
    pub workers: usize,
    /// The RV the caches start at (host-fed): the first change fed must be after it.
    #[serde(default)]
    pub start_rv: u64,
    /// Served resources (listwatch's `ResourceInfo` as JSON); absent: the built-ins.
    #[serde(default)]
    pub resources: Option<Vec<ResourceInfo>>,
    /// Where the data comes from.
    #[serde(default)]
    pub source: SourceConfig,
    /// The serving tunables; what is absent keeps listwatch's default.
    #[serde(default)]
    pub server: ServerSettings,
}

/// The server tunables a host may set (listwatch's `ServerConfig`): admission caps, the
/// chunk size, the bookmark period, the protobuf sharing window. Every field is optional;
/// for the caps 0 means no cap.
///
/// ```json
/// {"maxLists": 6000, "maxListsPerUser": 0, "maxWatchesPerUser": 0, "chunkBytes": 65536}
/// ```
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerSettings {
    /// LISTs and watch-lists streaming at once (default 400).
    #[serde(default)]
    pub max_lists: Option<usize>,
    /// Watches open at once (default 100,000).
    #[serde(default)]
    pub max_watches: Option<usize>,
    /// LISTs and watch-lists one user may have streaming at once (default 100).
    #[serde(default)]
    pub max_lists_per_user: Option<usize>,
    /// Watches one user may hold open (default 10,000).
    #[serde(default)]
    pub max_watches_per_user: Option<usize>,
    /// Bytes all streaming LIST and watch-list responses may buffer together; each
    /// reserves two chunks (default 256 MiB).
    #[serde(default)]
    pub response_buffer_budget_bytes: Option<usize>,
    /// Bytes of one response chunk at most (default 64 KiB; at least 4 KiB).
    #[serde(default)]
    pub chunk_bytes: Option<usize>,
    /// Period of bookmarks on watches that asked for them, in milliseconds (default 60 s).
    #[serde(default)]
    pub bookmark_interval_ms: Option<u64>,
    /// Bytes of protobuf items kept for concurrent LISTs and watch-lists to share (default
    /// 32 MiB; 0: none kept).
    #[serde(default)]
    pub protobuf_share_bytes: Option<usize>,
}

impl ServerSettings {
    /// listwatch's defaults with what is set here applied.
    pub fn server_config(&self) -> listwatch::ServerConfig {
        let mut c = listwatch::ServerConfig::default();
        let l = &mut c.limits;
        let set = |slot: &mut usize, v: Option<usize>| {
            if let Some(v) = v {
                *slot = v;
            }
        };
        set(&mut l.max_lists, self.max_lists);
        set(&mut l.max_watches, self.max_watches);
        set(&mut l.max_lists_per_user, self.max_lists_per_user);
        set(&mut l.max_watches_per_user, self.max_watches_per_user);
        set(
            &mut l.response_buffer_budget,
            self.response_buffer_budget_bytes,
        );
        // Below a few KiB every chunk would be mostly framing.
        set(&mut c.chunk_bytes, self.chunk_bytes.map(|b| b.max(4 << 10)));
        set(&mut c.protobuf_share_bytes, self.protobuf_share_bytes);
        if let Some(ms) = self.bookmark_interval_ms {
            c.bookmark_interval = std::time::Duration::from_millis(ms.max(1));
        }
        c
    }
}

fn two() -> usize {
    2
}

/// The source of an instance.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum SourceConfig {
    /// The host feeds committed changes (`lw_feed_*`).
    HostFed {},
    /// listwatch follows etcd itself (kube-apiserver's flags).
    Etcd(EtcdSettings),
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig::HostFed {}
    }
}

/// kube-apiserver's etcd flags, as file paths.
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdSettings {
    /// `--etcd-servers`.
    pub endpoints: Vec<String>,
    /// `--etcd-cafile`.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// `--etcd-certfile`.
    #[serde(default)]
    pub cert_file: Option<String>,
    /// `--etcd-keyfile`.
    #[serde(default)]
    pub key_file: Option<String>,
    /// `--encryption-provider-config`.
    #[serde(default)]
    pub encryption_provider_config: Option<String>,
}

/// Starts an instance following etcd.
#[cfg(feature = "etcd")]
pub async fn start_etcd(
    builder: listwatch::Builder,
    s: &EtcdSettings,
) -> Result<listwatch::ListWatch, String> {
    use listwatch::{Decryptor, EtcdConfig, EtcdTlsFiles, ValueDecoder};
    let decryptor = s
        .encryption_provider_config
        .as_ref()
        .map(|p| Decryptor::from_file(std::path::Path::new(p)).map_err(|e| format!("{p}: {e}")))
        .transpose()?;
    let tls = EtcdTlsFiles {
        ca: s.ca_file.as_ref().map(Into::into),
        cert: s.cert_file.as_ref().map(Into::into),
        key: s.key_file.as_ref().map(Into::into),
    }
    .read()?;
    let https = s.endpoints.iter().any(|e| e.starts_with("https://"));
    let config = EtcdConfig {
        endpoints: s.endpoints.clone(),
        decoder: ValueDecoder::new(decryptor),
        tls: https.then_some(tls),
        ..EtcdConfig::default()
    };
    builder
        .etcd(config)
        .await
        .map_err(|e| format!("etcd {}: {e}", s.endpoints.join(",")))
}

/// Without the `etcd` feature an etcd configuration is refused, naming the feature.
#[cfg(not(feature = "etcd"))]
pub async fn start_etcd(
    _builder: listwatch::Builder,
    _s: &EtcdSettings,
) -> Result<listwatch::ListWatch, String> {
    Err("this library was built without the `etcd` feature (cargo build -p listwatch-ffi --features etcd)".into())
}
