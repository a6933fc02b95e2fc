//! TLS for the standalone server (rustls, HTTP/2 by ALPN, optional client certificates)
//! and the user a verified client certificate names.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

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
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(cert)?)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(cert, e))?;
    let key_der = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| invalid(key, e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(cert, e))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                roots(ca)?.into(),
                provider,
            )
            .allow_unauthenticated()
            .build()
            .map_err(|e| invalid(ca, e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key_der)
        .map_err(|e| invalid(key, e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
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
    Some(User { name, groups })
}
