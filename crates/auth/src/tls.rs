//! TLS for the standalone server (rustls, HTTP/2 by ALPN, optional client certificates)
//! and the user a verified client certificate names.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

use crate::authn::PeerIdentity;
use crate::authorizer::User;
use crate::config::{ConfigError, invalid, read};

/// A rustls server config: `cert`/`key` PEM files, ALPN `h2` then `http/1.1`, and, with
/// `client_ca`, client certificates verified against it (optional for the client, so
/// token users can still connect).
pub fn tls_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, ConfigError> {
    let client_roots = client_ca.map(roots).transpose()?;
    server_config(cert, key, client_roots, client_ca.unwrap_or(cert))
}

/// [`tls_config`] for a server that also trusts a front proxy: client certificates
/// signed by `client_ca` name users, those signed by the request-header CA vouch for the
/// user in the request's headers; the handshake accepts either, [`ClientCerts`] tells
/// them apart.
pub fn tls_config_with_front_proxy(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
    front_proxy: &FrontProxyTrust,
) -> Result<(Arc<rustls::ServerConfig>, ClientCerts), ConfigError> {
    let proxies = roots(&front_proxy.ca)?;
    let mut both = proxies.clone();
    let users = match client_ca {
        Some(ca) => {
            let r = roots(ca)?;
            both.roots.extend(r.roots.iter().cloned());
            Some(verifier(r, ca)?)
        }
        None => None,
    };
    let certs = ClientCerts {
        users,
        front_proxy: Some((
            verifier(proxies, &front_proxy.ca)?,
            front_proxy.allowed_names.clone(),
        )),
    };
    Ok((
        server_config(cert, key, Some(both), &front_proxy.ca)?,
        certs,
    ))
}

/// Where a front proxy's client certificate must come from: kube-apiserver's
/// `--requestheader-client-ca-file` and `--requestheader-allowed-names` (empty: any name).
#[derive(Clone, Debug)]
pub struct FrontProxyTrust {
    /// The CA bundle (PEM file) front-proxy certificates are signed by.
    pub ca: std::path::PathBuf,
    /// The common names accepted; empty accepts any certificate the CA signed.
    pub allowed_names: Vec<String>,
}

/// Tells a client CA's certificates from a front proxy's (the handshake accepted both).
pub struct ClientCerts {
    users: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    front_proxy: Option<(
        Arc<dyn rustls::server::danger::ClientCertVerifier>,
        Vec<String>,
    )>,
}

impl ClientCerts {
    /// What the presented `chain` (end entity first) makes the client.
    pub fn identify(&self, chain: &[CertificateDer<'_>]) -> PeerIdentity {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return PeerIdentity::default();
        };
        let now = rustls::pki_types::UnixTime::now();
        let signed_by = |v: &Arc<dyn rustls::server::danger::ClientCertVerifier>| {
            v.verify_client_cert(leaf, intermediates, now).is_ok()
        };
        let user = self
            .users
            .as_ref()
            .filter(|v| signed_by(v))
            .and_then(|_| user_from_cert(leaf));
        let front_proxy = self.front_proxy.as_ref().is_some_and(|(v, names)| {
            signed_by(v)
                && (names.is_empty()
                    || user_from_cert(leaf).is_some_and(|u| names.contains(&u.name)))
        });
        PeerIdentity { user, front_proxy }
    }
}

/// A client-certificate verifier trusting `roots` (from the file `ca`, named in errors).
fn verifier(
    roots: rustls::RootCertStore,
    ca: &Path,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, ConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
        .allow_unauthenticated()
        .build()
        .map_err(|e| invalid(ca, e))
}

/// The server config over `cert`/`key`, verifying optional client certificates against
/// `client_roots` (from `ca`, named in errors).
fn server_config(
    cert: &Path,
    key: &Path,
    client_roots: Option<rustls::RootCertStore>,
    ca: &Path,
) -> Result<Arc<rustls::ServerConfig>, ConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let resolver = ReloadingCert::new(cert, key, provider.clone())?;
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(cert, e))?;
    let builder = match client_roots {
        None => builder.with_no_client_auth(),
        Some(roots) => builder.with_client_cert_verifier(verifier(roots, ca)?),
    };
    let mut config = builder.with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// How often the serving certificate's files are looked at (a `stat` each, on a handshake).
const RELOAD_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// The serving certificate, read again from its files when they change (cert-manager and
/// kubeadm renew them in place): each new handshake gets the current one, connections
/// already open keep theirs. Files that do not parse keep the previous certificate (a
/// warning is logged), as a half-written renewal must not take the server down.
#[derive(Debug)]
struct ReloadingCert {
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
    provider: Arc<rustls::crypto::CryptoProvider>,
    current: parking_lot::Mutex<LoadedCert>,
}

#[derive(Debug)]
struct LoadedCert {
    key: Arc<rustls::sign::CertifiedKey>,
    /// The files' modification times when read.
    stamp: (Option<std::time::SystemTime>, Option<std::time::SystemTime>),
    checked: std::time::Instant,
}

impl ReloadingCert {
    fn new(
        cert: &Path,
        key: &Path,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Self, ConfigError> {
        let loaded = LoadedCert {
            stamp: stamps(cert, key),
            key: Arc::new(certified_key(cert, key, &provider)?),
            checked: std::time::Instant::now(),
        };
        Ok(ReloadingCert {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            provider,
            current: parking_lot::Mutex::new(loaded),
        })
    }

    /// The current certificate, read again first when a second has passed since the last
    /// look and either file changed.
    fn current(&self) -> Arc<rustls::sign::CertifiedKey> {
        let mut c = self.current.lock();
        if c.checked.elapsed() >= RELOAD_CHECK {
            c.checked = std::time::Instant::now();
            let stamp = stamps(&self.cert, &self.key);
            if stamp != c.stamp {
                match certified_key(&self.cert, &self.key, &self.provider) {
                    Ok(k) => {
                        c.key = Arc::new(k);
                        c.stamp = stamp;
                        tracing::info!(cert = %self.cert.display(), "serving certificate reloaded");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "serving certificate not reloaded; keeping the previous one")
                    }
                }
            }
        }
        c.key.clone()
    }
}

impl rustls::server::ResolvesServerCert for ReloadingCert {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.current())
    }
}

fn stamps(
    cert: &Path,
    key: &Path,
) -> (Option<std::time::SystemTime>, Option<std::time::SystemTime>) {
    let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    (m(cert), m(key))
}

/// The certificate chain and key of two PEM files, checked to belong together.
fn certified_key(
    cert: &Path,
    key: &Path,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<rustls::sign::CertifiedKey, ConfigError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(cert)?)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(cert, e))?;
    if certs.is_empty() {
        return Err(invalid(cert, "no certificate in the file"));
    }
    let key_der = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| invalid(key, e))?;
    rustls::sign::CertifiedKey::from_der(certs, key_der, provider).map_err(|e| invalid(key, e))
}

/// The certificates of the PEM bundle `ca` as trust roots.
pub(crate) fn roots(ca: &Path) -> Result<rustls::RootCertStore, ConfigError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&read(ca)?) {
        roots
            .add(c.map_err(|e| invalid(ca, e))?)
            .map_err(|e| invalid(ca, e))?;
    }
    Ok(roots)
}

/// The user named by a verified client certificate: CN is the user, each O a group.
pub fn user_from_cert(cert: &CertificateDer<'_>) -> Option<User> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let subject = parsed.subject();
    let name = subject
        .iter_common_name()
        .next()?
        .as_str()
        .ok()?
        .to_string();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    Some(User {
        name,
        groups,
        ..User::default()
    })
}
