//! TLS material read from files and read again when they change — the CA bundle and the
//! client certificate of a connection to an apiserver here, the serving certificate and
//! client CA bundles in listwatch-auth — and the rustls client configuration a
//! [`crate::ClientConfig`] makes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime, pem::PemObject};

use crate::Error;

/// How often certificate and CA files are looked at (a `stat` each, on a handshake).
pub const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// A value read from files and read again when one of them changes: looked at (a `stat`
/// each) at most every [`RELOAD_CHECK`], when the value is asked for. Files that no longer
/// read keep the previous value (a warning is logged), as a half-written renewal must not
/// take a server or a client down.
#[derive(Debug)]
pub struct Reloading<T, E> {
    files: Vec<PathBuf>,
    load: fn(&[&Path]) -> Result<T, E>,
    current: parking_lot::Mutex<Loaded<T>>,
}

#[derive(Debug)]
struct Loaded<T> {
    value: T,
    /// The files' modification times when read.
    stamp: Vec<Option<SystemTime>>,
    checked: Instant,
}

impl<T: Clone, E: std::fmt::Display> Reloading<T, E> {
    /// Reads `files` with `load` now: its error (which names the file) if that fails.
    pub fn new(files: &[&Path], load: fn(&[&Path]) -> Result<T, E>) -> Result<Self, E> {
        Ok(Reloading {
            current: parking_lot::Mutex::new(Loaded {
                stamp: stamps(files),
                value: load(files)?,
                checked: Instant::now(),
            }),
            files: files.iter().map(|f| f.to_path_buf()).collect(),
            load,
        })
    }

    /// The current value, read again first when the files changed.
    pub fn current(&self) -> T {
        let mut c = self.current.lock();
        if c.checked.elapsed() >= RELOAD_CHECK {
            c.checked = Instant::now();
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

fn stamps(files: &[&Path]) -> Vec<Option<SystemTime>> {
    files
        .iter()
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

/// A certificate and its key, read again from their files when they change (cert-manager
/// and kubeadm renew them in place): each new handshake gets the current one, connections
/// already open keep theirs. Serves as a server's certificate and as the client certificate
/// presented to an apiserver.
#[derive(Debug)]
pub struct CertFiles(Reloading<Arc<rustls::sign::CertifiedKey>, Error>);

impl CertFiles {
    /// Reads `cert` (PEM chain) and `key` (PEM private key) now: an error names the file.
    pub fn new(cert: &Path, key: &Path) -> Result<Self, Error> {
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

/// Reads a file; the error names it.
fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| invalid(path, e))
}

/// An [`Error::File`] for `path`.
fn invalid(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::File {
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

/// The certificate chain and key of two PEM files, checked to belong together.
fn certified_key(cert: &Path, key: &Path) -> Result<rustls::sign::CertifiedKey, Error> {
    let chain = chain_of(&read(cert)?).map_err(|e| invalid(cert, e))?;
    let key_der = key_of(&read(key)?).map_err(|e| invalid(key, e))?;
    rustls::sign::CertifiedKey::from_der(chain, key_der, &rustls::crypto::ring::default_provider())
        .map_err(|e| invalid(key, e))
}

/// The certificates of a PEM chain (at least one).
fn chain_of(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    if chain.is_empty() {
        return Err("no certificate in the file".into());
    }
    Ok(chain)
}

/// The private key of a PEM file.
fn key_of(pem: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| e.to_string())
}

/// The certificates of a PEM bundle as trust roots.
pub fn roots_of(pem: &[u8]) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pem) {
        roots
            .add(c.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    Ok(roots)
}

/// The server's CA bundle, read again from its file when it changes (the in-cluster
/// `ca.crt` after a CA rotation, a kubeconfig's renewed `certificate-authority`): each new
/// handshake verifies against the current bundle, connections already open keep theirs.
#[derive(Debug)]
struct CaFile(Reloading<Arc<WebPkiServerVerifier>, Error>);

impl CaFile {
    fn new(file: &Path) -> Result<CaFile, Error> {
        Reloading::new(&[file], |f| server_verifier_of(f[0])).map(CaFile)
    }

    /// The verifier of the bundle as it is now.
    fn current(&self) -> Arc<WebPkiServerVerifier> {
        self.0.current()
    }
}

/// A verifier of server certificates trusting every certificate of the PEM bundle `ca`.
fn server_verifier_of(ca: &Path) -> Result<Arc<WebPkiServerVerifier>, Error> {
    let roots = roots_of(&read(ca)?).map_err(|e| invalid(ca, e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| invalid(ca, e))
}

impl ServerCertVerifier for CaFile {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.current().verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )
    }

    crate::delegate_handshake_signatures!(current);
}

/// The handshake-signature methods rustls' `ServerCertVerifier` and `ClientCertVerifier`
/// have alike (`verify_tls12_signature`, `verify_tls13_signature`,
/// `supported_verify_schemes`), each handed to the verifier `self.$current()` returns: a
/// verifier read again from its files checks signatures as the one it holds now does.
/// Written once for the server verifier here and listwatch-auth's client verifier; the
/// calling crate depends on rustls 0.23.
#[macro_export]
macro_rules! delegate_handshake_signatures {
    ($current:ident) => {
        $crate::delegate_handshake_signatures!(
            @each $current, verify_tls12_signature verify_tls13_signature
        );

        fn supported_verify_schemes(&self) -> Vec<::rustls::SignatureScheme> {
            self.$current().supported_verify_schemes()
        }
    };
    (@each $current:ident, $($method:ident)*) => {
        $(
            fn $method(
                &self,
                message: &[u8],
                cert: &::rustls::pki_types::CertificateDer<'_>,
                dss: &::rustls::DigitallySignedStruct,
            ) -> Result<::rustls::client::danger::HandshakeSignatureValid, ::rustls::Error> {
                self.$current().$method(message, cert, dss)
            }
        )*
    };
}

/// A client certificate and its key.
#[derive(Clone)]
pub enum ClientCert {
    /// PEM given inline (a kubeconfig's `*-data`): fixed for the process.
    Pem {
        /// The certificate chain.
        cert: Vec<u8>,
        /// The private key.
        key: Vec<u8>,
    },
    /// PEM files, read again when they change (cert-manager and kubeadm renew them in
    /// place): new connections present the current certificate, open ones keep theirs.
    Files {
        /// The certificate chain's file.
        cert: PathBuf,
        /// The private key's file.
        key: PathBuf,
    },
}

impl std::fmt::Debug for ClientCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        match self {
            ClientCert::Pem { .. } => f.write_str("ClientCert::Pem"),
            ClientCert::Files { cert, .. } => write!(f, "ClientCert::Files({})", cert.display()),
        }
    }
}

/// The rustls client configuration: the CA bundle to verify the server against (its file,
/// read again as it changes, else PEM given once), the client certificate to present.
/// ALPN is hyper-rustls's: HTTP/1.1 only, as protocol upgrades (exec, attach,
/// port-forward) need it.
pub(crate) fn client_config(
    ca_file: Option<&Path>,
    ca_pem: Option<&[u8]>,
    client_cert: Option<&ClientCert>,
) -> Result<rustls::ClientConfig, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?;
    let builder = match (ca_file, ca_pem) {
        (Some(file), _) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(CaFile::new(file)?)),
        (None, Some(ca)) => builder.with_root_certificates(
            roots_of(ca).map_err(|e| Error::Config(format!("CA bundle: {e}")))?,
        ),
        (None, None) => builder.with_root_certificates(rustls::RootCertStore::empty()),
    };
    Ok(match client_cert {
        Some(ClientCert::Pem { cert, key }) => {
            let chain =
                chain_of(cert).map_err(|e| Error::Config(format!("client certificate: {e}")))?;
            let key = key_of(key).map_err(|e| Error::Config(format!("client key: {e}")))?;
            builder.with_client_auth_cert(chain, key)?
        }
        Some(ClientCert::Files { cert, key }) => {
            builder.with_client_cert_resolver(Arc::new(CertFiles::new(cert, key)?))
        }
        None => builder.with_no_client_auth(),
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use http::Method;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use crate::tls::RELOAD_CHECK;
    use crate::{Client, ClientConfig};

    /// A self-signed CA: its certificate (PEM) and issuer.
    fn ca(name: &str) -> (String, rcgen::Issuer<'static, rcgen::KeyPair>) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("ca");
        (cert.pem(), rcgen::Issuer::new(params, key))
    }

    /// An HTTPS server on 127.0.0.1 with a certificate `issuer` signed, answering every
    /// request `200 ok` and closing the connection (each request makes a new handshake).
    async fn server(issuer: &rcgen::Issuer<'static, rcgen::KeyPair>) -> std::net::SocketAddr {
        let key = rcgen::KeyPair::generate().expect("key");
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).expect("params");
        let leaf = params.signed_by(&key, issuer).expect("sign");
        let der = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).expect("key");
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone()], der)
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut buf = [0u8; 4096];
                    let _ = tls.read(&mut buf).await;
                    let _ = tls
                        .write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        )
                        .await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_ca_file_is_read_again_when_it_changes() {
        let (serving_ca, issuer) = ca("serving-ca");
        let (other_ca, _) = ca("other-ca");
        let addr = server(&issuer).await;
        let dir = std::env::temp_dir().join(format!("lw-kubeclient-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let ca_file = dir.join("ca.crt");
        std::fs::write(&ca_file, &other_ca).expect("write");
        let mut config = ClientConfig::new(format!("https://{addr}"));
        config.ca_file = Some(ca_file.clone());
        let client = Client::new(&config).expect("client");
        let get = || client.request(Method::GET, "/", "*/*", None);
        assert!(get().await.is_err(), "another CA's bundle does not verify");
        // Rotated as the kubelet does: a new file renamed over the old one.
        let tmp = dir.join("ca.crt.new");
        std::fs::write(&tmp, &serving_ca).expect("write");
        std::fs::rename(&tmp, &ca_file).expect("rename");
        std::fs::File::options()
            .write(true)
            .open(&ca_file)
            .expect("open")
            .set_modified(SystemTime::now() + Duration::from_secs(5))
            .expect("mtime");
        tokio::time::sleep(RELOAD_CHECK + Duration::from_millis(50)).await;
        let resp = get().await.expect("the rotated bundle verifies");
        assert_eq!(resp.status(), 200);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
