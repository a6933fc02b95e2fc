//! TLS for the standalone server (rustls, HTTP/2 by ALPN, optional client certificates)
//! and the user a verified client certificate names.

use std::path::Path;
use std::sync::Arc;

use listwatch_kubeclient::tls::{Reloading, roots_of};
use rustls::pki_types::CertificateDer;

/// The serving certificate's files (and the client certificate presented upstream):
/// listwatch-kubeclient's, read again as they are renewed.
pub use listwatch_kubeclient::tls::CertFiles;

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

/// Client certificates verified against CA bundles read again when their files change
/// (kube-apiserver reloads `--client-ca-file` and `--requestheader-client-ca-file` the same
/// way): each handshake and each identification uses the current roots.
#[derive(Debug)]
struct CaFiles {
    verifier: Reloading<Arc<dyn rustls::server::danger::ClientCertVerifier>, ConfigError>,
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

    listwatch_kubeclient::delegate_handshake_signatures!(current);
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

/// The certificates of the PEM bundle `ca` as trust roots.
pub(crate) fn roots(ca: &Path) -> Result<rustls::RootCertStore, ConfigError> {
    roots_of(&read(ca)?).map_err(|e| invalid(ca, e))
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
