//! Connections to the target: plain TCP for `http://`, rustls for `https://` (trusting
//! `--ca-file`, the system-less default of no roots, or nothing at all with
//! `--insecure-skip-tls-verify`).

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// A byte stream to the server, plain or TLS.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A connection to the server.
pub type Conn = Box<dyn Stream>;

static TLS: OnceLock<Option<(tokio_rustls::TlsConnector, ServerName<'static>)>> = OnceLock::new();

static TOKEN: OnceLock<Option<String>> = OnceLock::new();

/// The `Authorization` value every request sends, if a token was given.
pub fn bearer() -> Option<String> {
    TOKEN.get()?.as_ref().map(|t| format!("Bearer {t}"))
}

/// Sets up TLS for an `https://` target and the bearer token; returns `host:port`.
pub fn init(
    url: &str,
    ca_file: Option<&std::path::Path>,
    insecure: bool,
    token: Option<&str>,
) -> Result<String, String> {
    let _ = TOKEN.set(token.map(str::to_string));
    let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!("{url}: want http:// or https://"));
    };
    let host = rest.trim_end_matches('/').to_string();
    if !tls {
        let _ = TLS.set(None);
        return Ok(host);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let config = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
            .with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        if let Some(ca) = ca_file {
            let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
            for c in CertificateDer::pem_slice_iter(&pem) {
                roots
                    .add(c.map_err(|e| e.to_string())?)
                    .map_err(|e| e.to_string())?;
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    let name = host.rsplit_once(':').map_or(host.as_str(), |(h, _)| h);
    let name = ServerName::try_from(name.trim_matches(['[', ']']).to_string())
        .map_err(|e| e.to_string())?;
    let _ = TLS.set(Some((
        tokio_rustls::TlsConnector::from(Arc::new(config)),
        name,
    )));
    Ok(host)
}

/// Opens a connection (TLS when the target is `https://`).
pub async fn connect(host: &str) -> Result<Conn, String> {
    let tcp = TcpStream::connect(host).await.map_err(|e| e.to_string())?;
    let _ = tcp.set_nodelay(true);
    match TLS.get().and_then(Option::as_ref) {
        None => Ok(Box::new(tcp)),
        Some((connector, name)) => Ok(Box::new(
            connector
                .connect(name.clone(), tcp)
                .await
                .map_err(|e| format!("TLS: {e}"))?,
        )),
    }
}

/// `--insecure-skip-tls-verify`: accepts any certificate (signatures still checked).
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
