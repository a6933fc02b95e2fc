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
/// token users can still connect). Certificate and CA files are read again when they
/// change.
pub fn tls_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, ConfigError> {
    let verifier = client_ca
        .map(|ca| CaFiles::new(&[ca]).map(Arc::new))
        .transpose()?;
    server_config(cert, key, verifier)
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
    let both: Vec<&Path> = client_ca
        .into_iter()
        .chain([front_proxy.ca.as_path()])
        .collect();
    let certs = ClientCerts {
        users: client_ca
            .map(|ca| CaFiles::new(&[ca]).map(Arc::new))
            .transpose()?,
        front_proxy: Some((
            Arc::new(CaFiles::new(&[&front_proxy.ca])?),
            front_proxy.allowed_names.clone(),
        )),
    };
    Ok((
        server_config(cert, key, Some(Arc::new(CaFiles::new(&both)?)))?,
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
    users: Option<Arc<CaFiles>>,
    front_proxy: Option<(Arc<CaFiles>, Vec<String>)>,
}

impl ClientCerts {
    /// What the presented `chain` (end entity first) makes the client.
    pub fn identify(&self, chain: &[CertificateDer<'_>]) -> PeerIdentity {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return PeerIdentity::default();
        };
        let now = rustls::pki_types::UnixTime::now();
        let signed_by = |v: &Arc<CaFiles>| {
            use rustls::server::danger::ClientCertVerifier;
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

/// The server config over `cert`/`key`, verifying optional client certificates with
/// `client_cas`.
fn server_config(
    cert: &Path,
    key: &Path,
    client_cas: Option<Arc<CaFiles>>,
) -> Result<Arc<rustls::ServerConfig>, ConfigError> {
    let resolver = CertFiles::new(cert, key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(cert, e))?;
    let builder = match client_cas {
        None => builder.with_no_client_auth(),
        Some(v) => builder.with_client_cert_verifier(v),
    };
    let mut config = builder.with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// How often certificate and CA files are looked at (a `stat` each, on a handshake).
const RELOAD_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// A value read from files and read again when one of them changes: looked at (a `stat`
/// each) at most every [`RELOAD_CHECK`], when the value is asked for. Files that no longer
/// read keep the previous value (a warning is logged), as a half-written renewal must not
/// take the server down.
#[derive(Debug)]
struct Reloading<T> {
    files: Vec<std::path::PathBuf>,
    load: fn(&[&Path]) -> Result<T, ConfigError>,
    current: parking_lot::Mutex<Loaded<T>>,
}

#[derive(Debug)]
struct Loaded<T> {
    value: T,
    /// The files' modification times when read.
    stamp: Vec<Option<std::time::SystemTime>>,
    checked: std::time::Instant,
}

impl<T: Clone> Reloading<T> {
    /// Reads `files` with `load` now: an error names the file.
    fn new(
        files: &[&Path],
        load: fn(&[&Path]) -> Result<T, ConfigError>,
    ) -> Result<Self, ConfigError> {
        Ok(Reloading {
            current: parking_lot::Mutex::new(Loaded {
                stamp: stamps(files),
                value: load(files)?,
                checked: std::time::Instant::now(),
            }),
            files: files.iter().map(|f| f.to_path_buf()).collect(),
            load,
        })
    }

    /// The current value, read again first when the files changed.
    fn current(&self) -> T {
        let mut c = self.current.lock();
        if c.checked.elapsed() >= RELOAD_CHECK {
            c.checked = std::time::Instant::now();
            let files: Vec<&Path> = self.files.iter().map(|f| f.as_path()).collect();
            let stamp = stamps(&files);
            if stamp != c.stamp {
                match (self.load)(&files) {
                    Ok(v) => {
                        c.value = v;
                        c.stamp = stamp;
                        tracing::info!(files = ?self.files, "reloaded");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "not reloaded; keeping the previous one")
                    }
                }
            }
        }
        c.value.clone()
    }
}

/// A certificate and its key, read again from their files when they change (cert-manager
/// and kubeadm renew them in place): each new handshake gets the current one, connections
/// already open keep theirs. Serves as the serving certificate and as the client
/// certificate presented to an upstream.
#[derive(Debug)]
pub struct CertFiles(Reloading<Arc<rustls::sign::CertifiedKey>>);

impl CertFiles {
    /// Reads `cert` (PEM chain) and `key` (PEM private key) now: an error names the file.
    pub fn new(cert: &Path, key: &Path) -> Result<Self, ConfigError> {
        Reloading::new(&[cert, key], |f| certified_key(f[0], f[1]).map(Arc::new)).map(CertFiles)
    }

    /// The current certificate.
    pub fn current(&self) -> Arc<rustls::sign::CertifiedKey> {
        self.0.current()
    }
}

impl rustls::server::ResolvesServerCert for CertFiles {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.current())
    }
}

impl rustls::client::ResolvesClientCert for CertFiles {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Client certificates verified against CA bundles read again when their files change
/// (kube-apiserver reloads `--client-ca-file` and `--requestheader-client-ca-file` the same
/// way): each handshake and each identification uses the current roots.
#[derive(Debug)]
struct CaFiles {
    verifier: Reloading<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    /// The CA names offered in the handshake, as first read: hints only (clients present
    /// their certificate without a match too), and a borrowed slice cannot follow a reload.
    hints: Vec<rustls::DistinguishedName>,
}

impl CaFiles {
    fn new(files: &[&Path]) -> Result<Self, ConfigError> {
        let verifier = Reloading::new(files, verifier_of)?;
        Ok(CaFiles {
            hints: verifier.current().root_hint_subjects().to_vec(),
            verifier,
        })
    }

    fn current(&self) -> Arc<dyn rustls::server::danger::ClientCertVerifier> {
        self.verifier.current()
    }
}

impl rustls::server::danger::ClientCertVerifier for CaFiles {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &self.hints
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        self.current()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.current().supported_verify_schemes()
    }
}

/// A verifier trusting every certificate of the PEM bundles `files` (client certificates
/// optional, so token users still connect).
fn verifier_of(
    files: &[&Path],
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, ConfigError> {
    let mut all = rustls::RootCertStore::empty();
    for f in files {
        all.roots.extend(roots(f)?.roots);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::server::WebPkiClientVerifier::builder_with_provider(all.into(), provider)
        .allow_unauthenticated()
        .build()
        .map_err(|e| invalid(files.first().copied().unwrap_or(Path::new("")), e))
}

fn stamps(files: &[&Path]) -> Vec<Option<std::time::SystemTime>> {
    files
        .iter()
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

/// The certificate chain and key of two PEM files, checked to belong together.
fn certified_key(cert: &Path, key: &Path) -> Result<rustls::sign::CertifiedKey, ConfigError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(cert)?)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(cert, e))?;
    if certs.is_empty() {
        return Err(invalid(cert, "no certificate in the file"));
    }
    let key_der = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| invalid(key, e))?;
    rustls::sign::CertifiedKey::from_der(certs, key_der, &rustls::crypto::ring::default_provider())
        .map_err(|e| invalid(key, e))
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
