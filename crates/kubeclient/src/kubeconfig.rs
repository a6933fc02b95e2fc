//! The few kubeconfig fields listwatch needs: the current context's server, the CA its
//! serving certificate is verified against, and listwatch's own credential (client
//! certificate or bearer token), inline (`*-data`) or as files (relative to the kubeconfig);
//! and the in-cluster configuration a pod is given (`KUBERNETES_SERVICE_HOST`/`_PORT`, the
//! mounted token and CA), as client-go's `rest.InClusterConfig` finds it.

use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Deserialize;

use crate::Error;

/// Where a pod's service-account credentials are mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What a kubeconfig says about reaching one cluster as one user.
#[derive(Clone, Debug, Default)]
pub struct Kubeconfig {
    /// `clusters[].cluster.server`.
    pub server: Option<String>,
    /// The CA bundle (PEM), as read at start.
    pub ca_pem: Option<Vec<u8>>,
    /// The CA bundle's file (`certificate-authority`, the in-cluster `ca.crt`), read again
    /// as it changes; `None` when it is given inline.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key: files (read again as they change) or inline PEM.
    pub client_cert: Option<crate::ClientCert>,
    /// Bearer token: `token`, or `tokenFile` (read again as it changes).
    pub token: Option<crate::TokenSource>,
}

#[derive(Deserialize)]
struct File {
    #[serde(rename = "current-context", default)]
    current_context: String,
    #[serde(default)]
    contexts: Vec<Named<Context>>,
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
    #[serde(default)]
    users: Vec<Named<UserEntry>>,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "context", alias = "cluster", alias = "user")]
    value: T,
}

#[derive(Deserialize)]
struct Context {
    cluster: String,
    #[serde(default)]
    user: String,
}

#[derive(Deserialize)]
struct Cluster {
    server: Option<String>,
    #[serde(rename = "certificate-authority")]
    ca_file: Option<PathBuf>,
    #[serde(rename = "certificate-authority-data")]
    ca_data: Option<String>,
}

#[derive(Deserialize, Default)]
struct UserEntry {
    #[serde(rename = "client-certificate")]
    cert_file: Option<PathBuf>,
    #[serde(rename = "client-certificate-data")]
    cert_data: Option<String>,
    #[serde(rename = "client-key")]
    key_file: Option<PathBuf>,
    #[serde(rename = "client-key-data")]
    key_data: Option<String>,
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<PathBuf>,
}

impl Kubeconfig {
    /// Reads `path`'s current context (the first context when none is current).
    pub fn from_file(path: &Path) -> Result<Kubeconfig, Error> {
        let bad = |why: String| Error::Config(format!("{}: {why}", path.display()));
        let text = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
        let file: File = serde_yaml::from_slice(&text).map_err(|e| bad(e.to_string()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let context = file
            .contexts
            .iter()
            .find(|c| c.name == file.current_context)
            .or(file.contexts.first())
            .ok_or_else(|| bad("no context".into()))?;
        let cluster = file
            .clusters
            .iter()
            .find(|c| c.name == context.value.cluster)
            .ok_or_else(|| bad(format!("no cluster {:?}", context.value.cluster)))?;
        let default = UserEntry::default();
        let user = file
            .users
            .iter()
            .find(|u| u.name == context.value.user)
            .map_or(&default, |u| &u.value);
        let material = |data: &Option<String>, file: &Option<PathBuf>, what: &str| {
            if let Some(d) = data {
                return base64::engine::general_purpose::STANDARD
                    .decode(d.trim())
                    .map(Some)
                    .map_err(|e| bad(format!("{what}-data: {e}")));
            }
            file.as_ref()
                .map(|f| {
                    std::fs::read(dir.join(f))
                        .map_err(|e| bad(format!("{what} {}: {e}", f.display())))
                })
                .transpose()
        };
        let c = &cluster.value;
        let cert = material(&user.cert_data, &user.cert_file, "client-certificate")?;
        let key = material(&user.key_data, &user.key_file, "client-key")?;
        let client_cert = match (
            &user.cert_data,
            &user.key_data,
            &user.cert_file,
            &user.key_file,
        ) {
            // Both as files: followed as they are renewed.
            (None, None, Some(c), Some(k)) if cert.is_some() && key.is_some() => {
                Some(crate::ClientCert::Files {
                    cert: dir.join(c),
                    key: dir.join(k),
                })
            }
            _ => cert
                .zip(key)
                .map(|(cert, key)| crate::ClientCert::Pem { cert, key }),
        };
        let token = match (&user.token, &user.token_file) {
            (Some(t), _) => Some(crate::TokenSource::Value(t.clone())),
            (None, Some(f)) => {
                let source = crate::TokenSource::File(dir.join(f));
                // Readable now, so a wrong path is named at start-up.
                crate::Bearer::new(&source)
                    .map_err(|e| bad(format!("tokenFile {}: {e}", f.display())))?;
                Some(source)
            }
            (None, None) => None,
        };
        Ok(Kubeconfig {
            server: c.server.clone(),
            ca_pem: material(&c.ca_data, &c.ca_file, "certificate-authority")?,
            ca_file: match (&c.ca_data, &c.ca_file) {
                (None, Some(f)) => Some(dir.join(f)),
                _ => None,
            },
            client_cert,
            token,
        })
    }

    /// The in-cluster apiserver as client-go's `rest.InClusterConfig` finds it: the URL from
    /// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`, the CA and the token (kept
    /// current as the kubelet rotates it) from `dir`. `None` outside a pod (no such
    /// environment); an error names what is missing inside one.
    pub fn in_cluster(dir: &Path) -> Result<Option<(String, Kubeconfig)>, Error> {
        let (Ok(host), Ok(port)) = (
            std::env::var("KUBERNETES_SERVICE_HOST"),
            std::env::var("KUBERNETES_SERVICE_PORT"),
        ) else {
            return Ok(None);
        };
        if host.is_empty() || port.is_empty() {
            return Ok(None);
        }
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let ca_file = dir.join("ca.crt");
        let ca_pem = std::fs::read(&ca_file)
            .map_err(|e| Error::Config(format!("in-cluster CA {}: {e}", ca_file.display())))?;
        let token = crate::TokenSource::File(dir.join("token"));
        // Read now, so a pod without its token is told so at start-up.
        crate::Bearer::new(&token)?;
        let url = format!("https://{host}:{port}");
        Ok(Some((
            url.clone(),
            Kubeconfig {
                server: Some(url),
                ca_pem: Some(ca_pem),
                ca_file: Some(ca_file),
                client_cert: None,
                token: Some(token),
            },
        )))
    }
}
