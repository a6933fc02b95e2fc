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
